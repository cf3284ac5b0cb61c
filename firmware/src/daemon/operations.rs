//! Idempotent actions: the same `operation_id` with the same arguments returns the cached
//! result; different arguments conflict. 128 entries, 5 minutes.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::protocol::ErrorBody;

/// Entries kept.
pub const OPERATIONS_KEPT: usize = 128;
/// Entries older than this may be dropped.
pub const OPERATION_TTL: Duration = Duration::from_secs(300);

/// What is known about an operation.
#[derive(Debug, Clone, PartialEq)]
pub enum OperationState {
    /// Still running.
    InProgress,
    /// Finished with this result.
    Done(Result<Value, ErrorBody>),
}

#[derive(Debug)]
struct Entry {
    args: Value,
    state: OperationState,
    at: Instant,
}

/// What `begin` decided.
#[derive(Debug, PartialEq)]
pub enum Begin {
    /// New: run it.
    Run,
    /// Seen before with the same arguments.
    Known(OperationState),
    /// Seen before with different arguments.
    Conflict,
}

/// The operation cache.
#[derive(Debug, Default)]
pub struct OperationCache {
    entries: HashMap<String, Entry>,
}

impl OperationCache {
    /// Registers `id` with `args` unless known.
    pub fn begin(&mut self, id: &str, args: &Value, now: Instant) -> Begin {
        if let Some(e) = self.entries.get(id) {
            return if &e.args == args { Begin::Known(e.state.clone()) } else { Begin::Conflict };
        }
        self.entries.retain(|_, e| now.saturating_duration_since(e.at) <= OPERATION_TTL);
        while self.entries.len() >= OPERATIONS_KEPT {
            // Drop the oldest finished entry; in-progress ones are at most a handful.
            let oldest = self
                .entries
                .iter()
                .filter(|(_, e)| e.state != OperationState::InProgress)
                .min_by_key(|(_, e)| e.at)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => self.entries.remove(&k),
                None => break,
            };
        }
        self.entries.insert(id.to_string(), Entry { args: args.clone(), state: OperationState::InProgress, at: now });
        Begin::Run
    }

    /// Forgets `id`: it was refused before anything ran, so the same id may run later.
    pub fn forget(&mut self, id: &str) {
        self.entries.remove(id);
    }

    /// Records the result of `id`.
    pub fn finish(&mut self, id: &str, result: Result<Value, ErrorBody>) {
        if let Some(e) = self.entries.get_mut(id) {
            e.state = OperationState::Done(result);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn same_args_cached_different_args_conflict() {
        let mut c = OperationCache::default();
        let t = Instant::now();
        assert_eq!(c.begin("a", &json!({"x": 1}), t), Begin::Run);
        assert_eq!(c.begin("a", &json!({"x": 1}), t), Begin::Known(OperationState::InProgress));
        c.finish("a", Ok(json!({"status": "submitted"})));
        assert_eq!(
            c.begin("a", &json!({"x": 1}), t),
            Begin::Known(OperationState::Done(Ok(json!({"status": "submitted"}))))
        );
        assert_eq!(c.begin("a", &json!({"x": 2}), t), Begin::Conflict);
    }

    #[test]
    fn bounded_and_expiring() {
        let mut c = OperationCache::default();
        let t = Instant::now();
        for i in 0..200 {
            c.begin(&format!("op{i}"), &json!(i), t + Duration::from_millis(i));
            c.finish(&format!("op{i}"), Ok(json!(i)));
        }
        assert_eq!(c.entries.len(), OPERATIONS_KEPT);
        assert!(!c.entries.contains_key("op0"));
        c.begin("late", &json!(0), t + Duration::from_secs(400));
        assert_eq!(c.entries.len(), 1, "old entries dropped after 5 minutes");
    }
}
