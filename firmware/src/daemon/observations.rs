//! Observations: screenshots that actions may refer to, with expiry and invalidation.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::device::geometry::ObservationMapping;

/// Observations older than this are refused.
pub const OBSERVATION_TTL: Duration = Duration::from_secs(30);
/// Observations kept; older ones are forgotten.
pub const OBSERVATIONS_KEPT: usize = 32;

/// One screenshot's identity and geometry.
#[derive(Debug, Clone)]
pub struct Observation {
    /// Its id, e.g. `obs_1_17`.
    pub id: String,
    /// Video generation of the frame.
    pub generation: u32,
    /// Frame sequence number.
    pub frame_id: u64,
    /// How image pixels map onto the phone.
    pub mapping: ObservationMapping,
    /// When it was taken.
    pub taken: Instant,
}

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

/// The bounded set of live observations.
#[derive(Debug, Default)]
pub struct ObservationStore {
    items: VecDeque<Observation>,
    next: u64,
}

impl ObservationStore {
    /// Records a new observation and returns it.
    pub fn insert(&mut self, generation: u32, frame_id: u64, mapping: ObservationMapping, now: Instant) -> Observation {
        self.next += 1;
        let obs =
            Observation { id: format!("obs_{generation}_{}", self.next), generation, frame_id, mapping, taken: now };
        self.items.push_back(obs.clone());
        while self.items.len() > OBSERVATIONS_KEPT {
            self.items.pop_front();
        }
        obs
    }

    /// Looks an observation up for an action at `now` with the video at `generation`.
    pub fn get(&self, id: &str, generation: u32, now: Instant) -> Result<Observation, ObservationError> {
        let expired = || ObservationError::Expired { id: id.to_string() };
        let obs = self.items.iter().find(|o| o.id == id).ok_or_else(expired)?;
        if now.saturating_duration_since(obs.taken) > OBSERVATION_TTL {
            return Err(expired());
        }
        if obs.generation != generation {
            return Err(ObservationError::Stale { id: id.to_string(), why: "the video generation changed" });
        }
        Ok(obs.clone())
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

    #[test]
    fn expiry_capacity_and_generation() {
        let mut store = ObservationStore::default();
        let t0 = Instant::now();
        let first = store.insert(1, 1, mapping(), t0);
        assert!(store.get(&first.id, 1, t0 + Duration::from_secs(29)).is_ok());
        assert!(matches!(store.get(&first.id, 1, t0 + Duration::from_secs(31)), Err(ObservationError::Expired { .. })));
        assert!(matches!(store.get(&first.id, 2, t0), Err(ObservationError::Stale { .. })));
        for i in 0..OBSERVATIONS_KEPT {
            store.insert(1, 2 + i as u64, mapping(), t0);
        }
        assert!(matches!(store.get(&first.id, 1, t0), Err(ObservationError::Expired { .. })), "33rd evicts the first");
        assert!(matches!(store.get("obs_x", 1, t0), Err(ObservationError::Expired { .. })));
    }
}
