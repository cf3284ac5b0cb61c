//! Global limits: memory stays bounded whatever clients do.
//!
//! Per-connection limits (in-flight requests, a connection's output queue) bound one
//! client; these bound all of them together: sessions, screenshot work (a full-size phone
//! screenshot is tens of MB of pixels while it is scaled and encoded) and output bytes
//! queued for peers across every connection. A refused request gets `BUSY` (retryable) and
//! is counted in `status.limits`. What one principal may hold of the shared totals is
//! [`super::holds`]'s.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::holds::{HoldLimits, KindLimit, KindStatus};

/// The configured global limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DaemonLimits {
    /// Sessions (connections) at once; another is refused with `BUSY`.
    pub max_sessions: usize,
    /// Screenshots and previews produced at once (each holds a frame and its encoding).
    pub max_screenshots_in_flight: usize,
    /// Screenshots that may wait for one of those slots; beyond, `BUSY` at once.
    pub max_screenshots_waiting: usize,
    /// Output bytes queued for peers across every connection.
    pub max_queued_output_bytes: usize,
    /// Sessions one principal (a token, a Unix user; a nameless caller's address) may
    /// hold; a local administrator is not limited.
    pub sessions_per_principal: usize,
    /// Of each total (sessions, MCP sessions, streams), the part only administrators may
    /// take (at most a quarter of the total).
    pub reserved_for_admin: usize,
    /// MCP sessions at once, and per principal.
    pub max_mcp_sessions: usize,
    /// See `max_mcp_sessions`.
    pub mcp_sessions_per_principal: usize,
    /// Streamed answers at once (leases, followed journals, MCP SSE), and per principal.
    pub max_streams: usize,
    /// See `max_streams`.
    pub streams_per_principal: usize,
}

impl DaemonLimits {
    /// The limits of the table of what each principal holds ([`super::holds`]).
    pub fn holds(&self) -> HoldLimits {
        let kind = |total: usize, per_principal: usize| KindLimit {
            total,
            per_principal,
            reserved_for_admin: self.reserved_for_admin.min(total / 4),
        };
        HoldLimits {
            sessions: kind(self.max_sessions, self.sessions_per_principal),
            mcp_sessions: kind(self.max_mcp_sessions, self.mcp_sessions_per_principal),
            streams: kind(self.max_streams, self.streams_per_principal),
        }
    }
}

impl Default for DaemonLimits {
    fn default() -> Self {
        DaemonLimits {
            max_sessions: 64,
            max_screenshots_in_flight: 2,
            max_screenshots_waiting: 8,
            max_queued_output_bytes: 24 << 20,
            sessions_per_principal: 16,
            reserved_for_admin: 8,
            max_mcp_sessions: 64,
            mcp_sessions_per_principal: 8,
            max_streams: 64,
            streams_per_principal: 8,
        }
    }
}

/// Bytes queued for peers across all connections. Transports take a share for every
/// message they queue and give it back once it is written.
#[derive(Debug, Clone)]
pub struct OutputBudget {
    bytes: Arc<Semaphore>,
    max: usize,
}

impl OutputBudget {
    /// A budget of `max` bytes (at least 1 MiB, and at most what a semaphore can count).
    pub fn new(max: usize) -> OutputBudget {
        let max = max.clamp(1 << 20, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        OutputBudget { bytes: Arc::new(Semaphore::new(max)), max }
    }

    /// Waits for `bytes` of the budget (a message larger than the whole budget takes all
    /// of it). `None` only if the budget were closed, which nothing does. Cancel safe:
    /// nothing is taken unless it returns.
    pub async fn acquire(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let n = u32::try_from(bytes.min(self.max)).unwrap_or(u32::MAX);
        self.bytes.clone().acquire_many_owned(n).await.ok()
    }

    /// Bytes queued now.
    pub fn queued(&self) -> usize {
        self.max.saturating_sub(self.bytes.available_permits())
    }

    /// The budget's size.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Whether at least `bytes` are free now (a screenshot is refused up front when its
    /// answer could not be queued).
    pub fn has_room(&self, bytes: usize) -> bool {
        self.bytes.available_permits() >= bytes.min(self.max)
    }
}

/// Screenshot work: a few at once, a few waiting, the rest refused.
#[derive(Debug)]
pub struct WorkLimiter {
    running: Arc<Semaphore>,
    max_running: usize,
    waiting: AtomicUsize,
    max_waiting: usize,
}

/// A slot of screenshot work, held until the image is encoded.
#[derive(Debug)]
pub struct WorkSlot {
    _permit: OwnedSemaphorePermit,
}

impl WorkLimiter {
    /// At most `running` at once and `waiting` queued.
    pub fn new(running: usize, waiting: usize) -> WorkLimiter {
        WorkLimiter {
            running: Arc::new(Semaphore::new(running.max(1))),
            max_running: running.max(1),
            waiting: AtomicUsize::new(0),
            max_waiting: waiting,
        }
    }

    /// A slot, waiting for one if fewer than the limit already wait; `None`: refuse.
    /// Cancel safe (the waiting count is given back by a guard).
    pub async fn enter(&self) -> Option<WorkSlot> {
        if let Ok(p) = self.running.clone().try_acquire_owned() {
            return Some(WorkSlot { _permit: p });
        }
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.max_waiting {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let _waiting = Waiting(&self.waiting);
        self.running.clone().acquire_owned().await.ok().map(|p| WorkSlot { _permit: p })
    }

    /// Work running now.
    pub fn running(&self) -> usize {
        self.max_running.saturating_sub(self.running.available_permits())
    }

    /// Work waiting for a slot now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// The most work running at once (`max_screenshots_in_flight`).
    pub fn max_running(&self) -> usize {
        self.max_running
    }

    /// The most work waiting (`max_screenshots_waiting`).
    pub fn max_waiting(&self) -> usize {
        self.max_waiting
    }
}

/// `status.limits`: the global limits and how close the daemon is to them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimitsStatus {
    /// Sessions open.
    pub connections: usize,
    /// See [`DaemonLimits::max_sessions`].
    pub max_connections: usize,
    /// Screenshots being produced now.
    pub screenshots_in_flight: usize,
    /// See [`DaemonLimits::max_screenshots_in_flight`] (`[limits]` in the config).
    pub max_screenshots_in_flight: usize,
    /// Screenshots waiting for a slot now.
    pub screenshots_waiting: usize,
    /// See [`DaemonLimits::max_screenshots_waiting`]: more than these waiting are `BUSY`.
    pub max_screenshots_waiting: usize,
    /// How long an action waits for the device before `BUSY` (`queue_timeout_ms`).
    pub queue_timeout_ms: u64,
    /// Output bytes queued for peers.
    pub queued_output_bytes: usize,
    /// See [`DaemonLimits::max_queued_output_bytes`].
    pub max_queued_output_bytes: usize,
    /// Requests refused with `BUSY` by a limit since start.
    pub refused_busy: u64,
    /// What principals hold, by kind: the totals, the most one holds, the shares.
    pub holds: Vec<KindStatus>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_limiter_runs_some_queues_some_refuses_the_rest() {
        let w = WorkLimiter::new(1, 1);
        assert_eq!((w.max_running(), w.max_waiting()), (1, 1));
        let first = w.enter().await.unwrap();
        assert_eq!((w.running(), w.waiting()), (1, 0));
        let w = Arc::new(w);
        let w2 = w.clone();
        let queued = tokio::spawn(async move { w2.enter().await.is_some() });
        while w.waiting() < 1 {
            tokio::task::yield_now().await;
        }
        assert!(w.enter().await.is_none(), "a third is refused");
        drop(first);
        assert!(queued.await.unwrap());
        assert_eq!((w.running(), w.waiting()), (0, 0));
    }

    #[tokio::test]
    async fn output_budget_counts_queued_bytes() {
        let b = OutputBudget::new(2 << 20);
        let p = b.acquire(1 << 20).await.unwrap();
        assert_eq!(b.queued(), 1 << 20);
        assert!(b.has_room(1 << 20));
        assert!(!b.has_room((1 << 20) + 1));
        let whole = tokio::time::timeout(std::time::Duration::from_millis(50), b.acquire(10 << 20)).await;
        assert!(whole.is_err(), "a message larger than the budget waits for all of it");
        drop(p);
        let whole = b.acquire(10 << 20).await;
        assert_eq!(b.queued(), 2 << 20);
        drop(whole);
        assert_eq!(b.queued(), 0);
    }
}
