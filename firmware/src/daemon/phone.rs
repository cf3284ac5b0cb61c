//! The phone's state and its one owner.
//!
//! Everything the daemon knows about the phone and changes while it runs lives in
//! [`Phone`]: the input lane (the HID device, what it holds, where the pointer is) and
//! whether a gesture is being played, the observations actions may refer to, the operation
//! cache, the detected picture, the calibrations, the relative pointer's estimate, where
//! the last action left the pointer, the geometry epoch, and the refusal windows of the
//! task journal. Nothing else in the daemon holds phone state of its own; the task
//! lifecycle is [`super::tasks::Tasks`] (one lock over the active task) and the journal
//! is the store.
//!
//! Two kinds of access, by how long they take:
//! - **The lane** is held for a whole gesture and across its awaits, so it is a tokio
//!   mutex: an admitted input takes it ([`Phone::lane`]), hands it to the daemon's play
//!   (`play.rs`) and gets it back. Its fair queue is the FIFO of admitted inputs;
//!   admission is decided again once a request has it (`turn.rs`).
//! - **Everything else** ([`PhoneState`]) is small, and changed in critical sections that
//!   never await: one plain mutex ([`Phone::state`]). Its guard is not `Send`, so a future
//!   that held it across an await could not be spawned: the compiler keeps the sections
//!   short. No section takes the state twice (it is not reentrant): read what you need
//!   from elsewhere (the geometry epoch, the frame) first. PNG, luma and detection work
//!   runs outside it and only its result is stored.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, MutexGuard};

use tokio::sync::{Mutex, OwnedMutexGuard};

use super::calibrate::Calibrations;
use super::input::InputLane;
use super::observations::ObservationStore;
use super::operations::OperationCache;
use super::task_methods::RefusalWindows;
use crate::device::geometry::PixelRect;
use crate::device::input::RelativePlanner;
use crate::sync::LockPlain;

/// The phone's state that changes in short sections (see the module docs).
#[derive(Debug, Default)]
pub(super) struct PhoneState {
    /// Screenshots actions may refer to.
    pub(super) observations: ObservationStore,
    /// Outcomes by operation id (a retried action is answered, not played again).
    pub(super) operations: OperationCache,
    /// The phone's picture in the capture, detected once per video generation.
    pub(super) active: Option<(u32, PixelRect)>,
    /// The calibrations per orientation (persisted by `calibrate.rs`).
    pub(super) calibrations: Calibrations,
    /// The relative profile's pointer estimate (`None` with the absolute pointer).
    pub(super) relative: Option<RelativePlanner>,
    /// Where the last action left the pointer (normalized), for masking it in diffs.
    pub(super) pointer_at: Option<(f64, f64)>,
    /// Refusals counted per task and connection before they are journalled.
    pub(super) refusals: RefusalWindows,
    /// The settled picture of the last verified `home` (how `open_app` tells the home
    /// screen on a phone).
    pub(super) home_picture: Option<std::sync::Arc<crate::device::video::luma::LumaThumb>>,
}

/// The owner of the phone's state.
#[derive(Debug)]
pub(super) struct Phone {
    /// Taken by an admitted turn; its play holds it while it runs.
    lane: Arc<Mutex<InputLane>>,
    /// Whether a gesture is being played (published for `status` without the lane).
    playing: AtomicBool,
    /// Bumped when the mapping from pictures to the phone changes within one video
    /// generation (calibration, active rectangle): older observations are stale. An
    /// atomic beside the state, not in it: every observation check reads it, often while
    /// it holds the state.
    geometry_epoch: AtomicU64,
    state: std::sync::Mutex<PhoneState>,
}

impl Phone {
    /// The phone behind `lane`, starting from `state`.
    pub(super) fn new(lane: InputLane, state: PhoneState) -> Phone {
        Phone {
            lane: Arc::new(Mutex::new(lane)),
            playing: AtomicBool::new(false),
            geometry_epoch: AtomicU64::new(1),
            state: std::sync::Mutex::new(state),
        }
    }

    /// The state, for one short section that does not await.
    pub(super) fn state(&self) -> MutexGuard<'_, PhoneState> {
        // Plain data, each change complete in itself: a panic elsewhere cannot leave it
        // half-changed, so poison is ignored.
        self.state.lock_plain()
    }

    /// Waits for the lane (after every input admitted before).
    pub(super) async fn lane(&self) -> OwnedMutexGuard<InputLane> {
        self.lane.clone().lock_owned().await
    }

    /// The lane if no one holds it now (for `status`'s host and LED facts).
    pub(super) fn try_lane(&self) -> Option<tokio::sync::MutexGuard<'_, InputLane>> {
        self.lane.try_lock().ok()
    }

    /// Whether a gesture is being played.
    pub(super) fn playing(&self) -> bool {
        self.playing.load(Ordering::Relaxed)
    }

    /// Marks a gesture as being played, or over.
    pub(super) fn set_playing(&self, playing: bool) {
        self.playing.store(playing, Ordering::Relaxed);
    }

    /// The geometry epoch now.
    pub(super) fn geometry_epoch(&self) -> u64 {
        self.geometry_epoch.load(Ordering::Acquire)
    }

    /// A new geometry epoch (every observation before it is stale); returns it.
    pub(super) fn next_geometry_epoch(&self) -> u64 {
        self.geometry_epoch.fetch_add(1, Ordering::AcqRel) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::hid::RecordingSink;

    fn phone() -> Phone {
        Phone::new(InputLane::new(Box::new(RecordingSink::default())), PhoneState::default())
    }

    #[tokio::test]
    async fn the_lane_is_one_at_a_time_and_status_does_not_wait_for_it() {
        let phone = phone();
        let held = phone.lane().await;
        assert!(phone.try_lane().is_none(), "status sees the lane is busy instead of waiting");
        drop(held);
        assert!(phone.try_lane().is_some());
    }

    #[test]
    fn a_geometry_change_makes_a_new_epoch() {
        let phone = phone();
        let before = phone.geometry_epoch();
        assert_eq!(phone.next_geometry_epoch(), before + 1);
        assert_eq!(phone.geometry_epoch(), before + 1);
    }
}
