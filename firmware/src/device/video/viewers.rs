//! Encoded video to viewers: a bounded tap plus one bounded, acknowledged queue per viewer
//! (reference 000: 60 frames / 8 MiB tap; 8 frames / 1 MiB unacknowledged per viewer;
//! overflow drops dependent pictures until the next IDR; keyframe requests ≤ 1/s).
//!
//! The encoder publishes; transports (the WebSocket, later) take from their viewer's queue
//! and acknowledge. Nothing here ever blocks the encoder.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::codec::AccessUnit;
use crate::sync::LockPlain;

/// Frames kept in the tap.
pub const TAP_FRAMES: usize = 60;
/// Bytes kept in the tap.
pub const TAP_BYTES: usize = 8 << 20;
/// Unacknowledged frames per viewer.
pub const VIEWER_FRAMES: usize = 8;
/// Unacknowledged bytes per viewer (a single keyframe may exceed it).
pub const VIEWER_BYTES: usize = 1 << 20;
/// Keyframe requests are honoured at most this often.
pub const KEYFRAME_INTERVAL: Duration = Duration::from_secs(1);

/// Identifies a viewer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ViewerId(pub u64);

/// One message for a viewer: the access unit and its per-viewer sequence number.
#[derive(Debug, Clone)]
pub struct ViewerFrame {
    /// Sequence within this viewer's stream (gaps mean dropped pictures).
    pub sequence: u64,
    /// The picture.
    pub unit: AccessUnit,
}

#[derive(Debug, Default)]
struct Viewer {
    ready: VecDeque<ViewerFrame>,
    unacked: VecDeque<(u64, usize)>,
    waiting_for_idr: bool,
    next_sequence: u64,
    dropped: u64,
    notify: Arc<Notify>,
}

impl Viewer {
    fn outstanding(&self) -> (usize, usize) {
        let frames = self.ready.len() + self.unacked.len();
        let bytes = self.ready.iter().map(|f| f.unit.data.len()).sum::<usize>()
            + self.unacked.iter().map(|u| u.1).sum::<usize>();
        (frames, bytes)
    }
}

#[derive(Debug, Default)]
struct Inner {
    viewers: HashMap<ViewerId, Viewer>,
    tap: VecDeque<AccessUnit>,
    tap_bytes: usize,
    next_id: u64,
    keyframe_wanted: bool,
    last_keyframe_request: Option<Instant>,
    encoder: &'static str,
}

/// Counters for `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ViewerStats {
    /// Connected viewers.
    pub viewers: usize,
    /// Pictures in the tap.
    pub tap_frames: usize,
    /// Pictures dropped for slow viewers, in total.
    pub dropped: u64,
}

/// The hub; clones share it.
#[derive(Debug, Clone, Default)]
pub struct ViewerHub {
    inner: Arc<Mutex<Inner>>,
    /// Woken when a viewer joins, so an idle encoder sleeps instead of polling.
    joined: Arc<Notify>,
}

impl ViewerHub {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Plain queues; a panic elsewhere cannot leave them inconsistent.
        self.inner.lock_plain()
    }

    /// Adds a viewer; it receives nothing until the next IDR, which is requested now.
    pub fn join(&self) -> (ViewerId, Arc<Notify>) {
        let mut inner = self.lock();
        inner.next_id += 1;
        let id = ViewerId(inner.next_id);
        let viewer = Viewer { waiting_for_idr: true, ..Viewer::default() };
        let notify = viewer.notify.clone();
        inner.viewers.insert(id, viewer);
        // A joining viewer always gets its keyframe, whatever the rate limit says.
        inner.keyframe_wanted = true;
        inner.last_keyframe_request = Some(Instant::now());
        drop(inner);
        // A stored permit when nobody waits: the encoder's next wait returns at once.
        self.joined.notify_one();
        (id, notify)
    }

    /// For the encoder: waits until a viewer joins (returns at once if one joined since
    /// the last wait; callers check [`ViewerHub::has_viewers`] again).
    pub async fn viewer_joined(&self) {
        self.joined.notified().await;
    }

    /// Removes a viewer.
    pub fn leave(&self, id: ViewerId) {
        self.lock().viewers.remove(&id);
    }

    /// Whether anyone is watching (the encoder idles otherwise).
    pub fn has_viewers(&self) -> bool {
        !self.lock().viewers.is_empty()
    }

    /// A viewer asks for a keyframe (it saw a gap); honoured at most once a second.
    pub fn request_keyframe(&self) -> bool {
        let mut inner = self.lock();
        let now = Instant::now();
        if inner.last_keyframe_request.is_some_and(|t| now.duration_since(t) < KEYFRAME_INTERVAL) {
            return false;
        }
        inner.last_keyframe_request = Some(now);
        inner.keyframe_wanted = true;
        true
    }

    /// For the encoder: whether the next picture must be an IDR (clears the request).
    pub fn take_keyframe_request(&self) -> bool {
        std::mem::take(&mut self.lock().keyframe_wanted)
    }

    /// Publishes one picture to the tap and every viewer with room for it.
    pub fn publish(&self, unit: AccessUnit) {
        let mut inner = self.lock();
        let len = unit.data.len();
        inner.tap.push_back(unit.clone());
        inner.tap_bytes += len;
        while inner.tap.len() > TAP_FRAMES || (inner.tap_bytes > TAP_BYTES && inner.tap.len() > 1) {
            if let Some(old) = inner.tap.pop_front() {
                inner.tap_bytes -= old.data.len();
            }
        }
        let mut want_keyframe = false;
        for v in inner.viewers.values_mut() {
            if v.waiting_for_idr && !unit.keyframe {
                v.dropped += 1;
                continue;
            }
            let (frames, bytes) = v.outstanding();
            let fits = frames < VIEWER_FRAMES && (bytes + len <= VIEWER_BYTES || (unit.keyframe && frames == 0));
            if !fits {
                // A dependent picture is lost: skip until an IDR and ask for one.
                v.dropped += 1;
                v.waiting_for_idr = true;
                want_keyframe = true;
                continue;
            }
            v.waiting_for_idr = false;
            v.next_sequence += 1;
            v.ready.push_back(ViewerFrame { sequence: v.next_sequence, unit: unit.clone() });
            v.notify.notify_one();
        }
        drop(inner);
        if want_keyframe {
            self.request_keyframe();
        }
    }

    /// Takes the next picture for `id` (it now counts as unacknowledged).
    pub fn take(&self, id: ViewerId) -> Option<ViewerFrame> {
        let mut inner = self.lock();
        let v = inner.viewers.get_mut(&id)?;
        let f = v.ready.pop_front()?;
        v.unacked.push_back((f.sequence, f.unit.data.len()));
        Some(f)
    }

    /// Acknowledges everything up to and including `sequence`.
    pub fn ack(&self, id: ViewerId, sequence: u64) {
        if let Some(v) = self.lock().viewers.get_mut(&id) {
            while v.unacked.front().is_some_and(|u| u.0 <= sequence) {
                v.unacked.pop_front();
            }
        }
    }

    /// Records which encoder feeds the hub (`software`, `v4l2-m2m`).
    pub fn set_encoder(&self, name: &'static str) {
        self.lock().encoder = name;
    }

    /// Which encoder feeds the hub; `none` before one started.
    pub fn encoder(&self) -> &'static str {
        let name = self.lock().encoder;
        if name.is_empty() {
            "none"
        } else {
            name
        }
    }

    /// Counters.
    pub fn stats(&self) -> ViewerStats {
        let inner = self.lock();
        ViewerStats {
            viewers: inner.viewers.len(),
            tap_frames: inner.tap.len(),
            dropped: inner.viewers.values().map(|v| v.dropped).sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn au(keyframe: bool, len: usize) -> AccessUnit {
        AccessUnit {
            data: Arc::from(vec![0u8; len]),
            keyframe,
            generation: 1,
            frame_id: 0,
            captured_at: Instant::now(),
        }
    }

    #[test]
    fn joiners_start_at_an_idr_and_get_one_requested() {
        let hub = ViewerHub::default();
        let (id, _) = hub.join();
        assert!(hub.take_keyframe_request(), "joining asks for a keyframe");
        hub.publish(au(false, 10));
        assert!(hub.take(id).is_none(), "no dependent picture before the IDR");
        hub.publish(au(true, 10));
        hub.publish(au(false, 10));
        let f = hub.take(id).unwrap();
        assert!(f.unit.keyframe);
        assert_eq!(hub.take(id).unwrap().sequence, f.sequence + 1);
    }

    #[test]
    fn a_slow_viewer_drops_until_the_next_idr_without_affecting_others() {
        let hub = ViewerHub::default();
        let (slow, _) = hub.join();
        let (fast, _) = hub.join();
        hub.take_keyframe_request();
        hub.publish(au(true, 100));
        // Past the joins' keyframe request, so the overflow's own request is not rate limited.
        std::thread::sleep(KEYFRAME_INTERVAL);
        for _ in 0..20 {
            hub.publish(au(false, 100));
            if let Some(f) = hub.take(fast) {
                hub.ack(fast, f.sequence);
            }
        }
        while let Some(f) = hub.take(fast) {
            hub.ack(fast, f.sequence);
        }
        // The slow viewer never acked: it holds at most 8 pictures, then waits for an IDR.
        let mut slow_frames = 0;
        while hub.take(slow).is_some() {
            slow_frames += 1;
        }
        assert_eq!(slow_frames, VIEWER_FRAMES);
        assert!(hub.stats().dropped >= 12);
        assert!(hub.take_keyframe_request(), "overflow asks for a keyframe");
        hub.ack(slow, u64::MAX);
        hub.publish(au(false, 100));
        assert!(hub.take(slow).is_none(), "still waiting for the IDR");
        hub.publish(au(true, 100));
        assert!(hub.take(slow).unwrap().unit.keyframe);
    }

    #[test]
    fn byte_budget_and_rate_limited_keyframe_requests() {
        let hub = ViewerHub::default();
        let (id, _) = hub.join();
        hub.take_keyframe_request();
        hub.publish(au(true, VIEWER_BYTES + 10)); // one big keyframe still goes through
        assert!(hub.take(id).is_some());
        hub.publish(au(false, 10));
        assert!(hub.take(id).is_none(), "over the byte budget until acked");
        assert!(!hub.request_keyframe(), "rate limited right after the join/overflow request");
    }

    #[test]
    fn tap_is_bounded() {
        let hub = ViewerHub::default();
        for _ in 0..100 {
            hub.publish(au(false, 10));
        }
        assert_eq!(hub.stats().tap_frames, TAP_FRAMES);
    }
}
