//! Observations: screenshots that actions may refer to, with expiry and invalidation.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::device::geometry::ObservationMapping;
use crate::protocol::Acting;

/// Observations older than this are refused.
pub const OBSERVATION_TTL: Duration = Duration::from_secs(30);
/// Observations kept; older ones are forgotten.
pub const OBSERVATIONS_KEPT: usize = 32;
/// Largest PNG returned by `screenshot`.
pub(super) const MAX_SCREENSHOT_BYTES: usize = 1 << 20;
/// Largest PNG returned by `preview`.
pub(super) const MAX_PREVIEW_BYTES: usize = 256 << 10;
/// Longest edge of a step's thumbnail (the console's task log).
pub(super) const THUMBNAIL_EDGE: u32 = 160;

/// One screenshot's identity and geometry.
#[derive(Debug, Clone)]
pub struct Observation {
    /// Its id, e.g. `obs_1_17`.
    pub id: String,
    /// Video generation of the frame.
    pub generation: u32,
    /// Frame sequence number.
    pub frame_id: u64,
    /// The daemon's geometry epoch when it was taken (calibration, active rectangle).
    pub geometry_epoch: u64,
    /// The task whose agent took it (with the task token), if any.
    pub task: Option<i64>,
    /// Why it may no longer be used, once invalidated.
    stale: Option<&'static str>,
    /// How image pixels map onto the phone.
    pub mapping: ObservationMapping,
    /// When it was taken.
    pub taken: Instant,
    /// A small PNG of it, kept while a task runs for the steps that act on it.
    pub thumbnail: Option<Thumbnail>,
    /// Its sampled luma, what `wait_for_change` compares the screen with.
    pub luma: Option<std::sync::Arc<crate::device::video::luma::LumaThumb>>,
    /// The text read on it (boxes in its image's pixels), once read.
    pub text: Option<std::sync::Arc<crate::device::ocr::TextRead>>,
}

/// A small PNG of an observation (shared, never copied).
pub type Thumbnail = std::sync::Arc<Vec<u8>>;

/// Why an observation cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObservationError {
    /// Unknown (never issued, or dropped as one of the oldest) or older than 30 s.
    #[error("observation {id:?} is unknown or expired (observations last 30 s); take a new screenshot")]
    Expired {
        /// The id.
        id: String,
    },
    /// Invalidated by a generation change.
    #[error("observation {id:?} is stale: {why}; take a new screenshot")]
    Stale {
        /// The id.
        id: String,
        /// What changed.
        why: &'static str,
    },
}

impl Observation {
    /// Whether it may authorize an action of `acting`: a task's agent acts only on what it
    /// saw with its own token (a screenshot taken without it, or by a human, may predate a
    /// takeover and would skip the re-observation a handback demands).
    pub fn authorizes(&self, acting: Acting) -> Result<(), ObservationError> {
        match acting {
            Acting::Agent { task } if self.task != Some(task) => {
                Err(ObservationError::Stale { id: self.id.clone(), why: "it was not taken with this task's token" })
            }
            _ => Ok(()),
        }
    }
}

/// Which frame an observation shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRef {
    /// Video generation.
    pub generation: u32,
    /// Frame sequence.
    pub frame_id: u64,
    /// Geometry epoch at the time.
    pub geometry_epoch: u64,
}

/// The bounded set of live observations.
#[derive(Debug, Default)]
pub struct ObservationStore {
    items: VecDeque<Observation>,
    next: u64,
}

impl ObservationStore {
    /// Records a new observation and returns it.
    pub fn insert(
        &mut self,
        frame: FrameRef,
        mapping: ObservationMapping,
        task: Option<i64>,
        now: Instant,
    ) -> Observation {
        self.next += 1;
        let obs = Observation {
            id: format!("obs_{}_{}", frame.generation, self.next),
            generation: frame.generation,
            frame_id: frame.frame_id,
            geometry_epoch: frame.geometry_epoch,
            task,
            stale: None,
            mapping,
            taken: now,
            thumbnail: None,
            luma: None,
            text: None,
        };
        self.items.push_back(obs.clone());
        while self.items.len() > OBSERVATIONS_KEPT {
            self.items.pop_front();
        }
        obs
    }

    /// Looks an observation up for an action at `now`, with the video at `generation`
    /// and the geometry at `geometry_epoch`.
    pub fn get(
        &self,
        id: &str,
        generation: u32,
        geometry_epoch: u64,
        now: Instant,
    ) -> Result<Observation, ObservationError> {
        let expired = || ObservationError::Expired { id: id.chars().take(64).collect() };
        let obs = self.items.iter().find(|o| o.id == id).ok_or_else(expired)?;
        if now.saturating_duration_since(obs.taken) > OBSERVATION_TTL {
            return Err(expired());
        }
        let stale = |why| ObservationError::Stale { id: obs.id.clone(), why };
        if obs.generation != generation {
            return Err(stale("the video generation changed"));
        }
        if obs.geometry_epoch != geometry_epoch {
            return Err(stale("the geometry changed (calibration or the phone's picture)"));
        }
        if let Some(why) = obs.stale {
            return Err(stale(why));
        }
        Ok(obs.clone())
    }

    /// Observation `id` as kept, whatever its age or state.
    pub fn peek(&self, id: &str) -> Option<&Observation> {
        self.items.iter().find(|o| o.id == id)
    }

    /// Keeps `png` as the thumbnail of observation `id` (if it is still kept).
    pub fn set_thumbnail(&mut self, id: &str, png: Thumbnail) {
        if let Some(o) = self.items.iter_mut().find(|o| o.id == id) {
            o.thumbnail = Some(png);
        }
    }

    /// Keeps `luma` as the sampled picture of observation `id` (if it is still kept).
    pub fn set_luma(&mut self, id: &str, luma: std::sync::Arc<crate::device::video::luma::LumaThumb>) {
        if let Some(o) = self.items.iter_mut().find(|o| o.id == id) {
            o.luma = Some(luma);
        }
    }

    /// Keeps `text` as what was read on observation `id` (if it is still kept).
    pub fn set_text(&mut self, id: &str, text: std::sync::Arc<crate::device::ocr::TextRead>) {
        if let Some(o) = self.items.iter_mut().find(|o| o.id == id) {
            o.text = Some(text);
        }
    }

    /// The thumbnail of observation `id`, whatever its state (a step records what it
    /// acted on even when that turned out stale).
    pub fn thumbnail(&self, id: &str) -> Option<Thumbnail> {
        self.items.iter().find(|o| o.id == id).and_then(|o| o.thumbnail.clone())
    }

    /// Invalidates every observation taken for task `task` (someone else used the phone).
    pub fn invalidate_task(&mut self, task: i64, why: &'static str) {
        for o in self.items.iter_mut().filter(|o| o.task == Some(task)) {
            o.stale.get_or_insert(why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::geometry::PixelRect;

    fn mapping() -> ObservationMapping {
        let r = PixelRect { x: 0, y: 0, width: 10, height: 10 };
        ObservationMapping { active: r, source: r, image: (10, 10) }
    }

    fn frame(generation: u32, frame_id: u64) -> FrameRef {
        FrameRef { generation, frame_id, geometry_epoch: 1 }
    }

    #[test]
    fn expiry_capacity_and_generation() {
        let mut store = ObservationStore::default();
        let t0 = Instant::now();
        let first = store.insert(frame(1, 1), mapping(), None, t0);
        assert!(store.get(&first.id, 1, 1, t0 + Duration::from_secs(29)).is_ok());
        assert!(matches!(
            store.get(&first.id, 1, 1, t0 + Duration::from_secs(31)),
            Err(ObservationError::Expired { .. })
        ));
        assert!(matches!(store.get(&first.id, 2, 1, t0), Err(ObservationError::Stale { .. })));
        assert!(matches!(store.get(&first.id, 1, 2, t0), Err(ObservationError::Stale { .. })), "geometry epoch");
        for i in 0..OBSERVATIONS_KEPT {
            store.insert(frame(1, 2 + i as u64), mapping(), None, t0);
        }
        assert!(
            matches!(store.get(&first.id, 1, 1, t0), Err(ObservationError::Expired { .. })),
            "33rd evicts the first"
        );
        assert!(matches!(store.get("obs_x", 1, 1, t0), Err(ObservationError::Expired { .. })));
    }

    #[test]
    fn a_tasks_observations_go_stale_when_someone_else_acts() {
        let mut store = ObservationStore::default();
        let t0 = Instant::now();
        let agents = store.insert(frame(1, 1), mapping(), Some(7), t0);
        let humans = store.insert(frame(1, 1), mapping(), None, t0);
        store.invalidate_task(7, "a human used the phone during the task");
        assert!(matches!(store.get(&agents.id, 1, 1, t0), Err(ObservationError::Stale { .. })));
        assert!(store.get(&humans.id, 1, 1, t0).is_ok());
    }
}
