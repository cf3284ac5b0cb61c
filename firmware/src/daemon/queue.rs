//! Jobs waiting for the phone (`task_open` with `wait`), in order of arrival.
//!
//! The queue only orders: a waiter opens its task when it is first and no task is active,
//! decided under the task registry's lock together with the install ([`super::Tasks`]), so
//! two openers never both win. A waiter is a [`QueueTicket`]: dropping it (the connection
//! closed, the wait was cancelled or timed out) takes it out and moves everyone behind it
//! up. A `task_open` without `wait` never jumps the queue. Positions are not persisted: a
//! restart drops the waiters with their connections.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;
use tokio::sync::watch;

use crate::sync::LockPlain;

/// Waiters at most; more are refused `BUSY` (each also holds a connection, which the
/// per-principal limits bound).
pub const MAX_WAITING: usize = 32;

/// One waiter, as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Waiter {
    /// 1 = next.
    pub position: usize,
    /// Who waits (a principal's label: a token's name, a uid).
    pub principal: String,
    /// How long it has waited.
    pub waited_ms: u64,
}

#[derive(Debug)]
struct Entry {
    ticket: u64,
    principal: String,
    since: Instant,
}

/// The waiters, first first.
#[derive(Debug, Default)]
pub(super) struct WaitQueue {
    order: VecDeque<Entry>,
    next: u64,
}

impl WaitQueue {
    /// The 1-based position of `ticket`, if it waits.
    pub(super) fn position(&self, ticket: u64) -> Option<usize> {
        self.order.iter().position(|e| e.ticket == ticket).map(|i| i + 1)
    }

    /// How many wait.
    pub(super) fn len(&self) -> usize {
        self.order.len()
    }

    /// Takes `ticket` out (it opened its task, or gave up).
    pub(super) fn remove(&mut self, ticket: u64) -> bool {
        let before = self.order.len();
        self.order.retain(|e| e.ticket != ticket);
        self.order.len() != before
    }

    /// The waiters, first first.
    pub(super) fn waiters(&self) -> Vec<Waiter> {
        self.order
            .iter()
            .enumerate()
            .map(|(i, e)| Waiter {
                position: i + 1,
                principal: e.principal.clone(),
                waited_ms: u64::try_from(e.since.elapsed().as_millis()).unwrap_or(u64::MAX),
            })
            .collect()
    }
}

/// A place in the queue. Dropping it leaves the queue (and wakes the others).
#[derive(Debug)]
pub struct QueueTicket {
    pub(super) id: u64,
    queue: Arc<Mutex<WaitQueue>>,
    changed: watch::Sender<u64>,
}

impl QueueTicket {
    /// Joins the back of `queue`; `None` when [`MAX_WAITING`] already wait.
    pub(super) fn join(
        queue: &Arc<Mutex<WaitQueue>>,
        changed: &watch::Sender<u64>,
        principal: String,
    ) -> Option<QueueTicket> {
        let id = {
            let mut q = queue.lock_plain();
            if q.order.len() >= MAX_WAITING {
                return None;
            }
            q.next += 1;
            let id = q.next;
            q.order.push_back(Entry { ticket: id, principal, since: Instant::now() });
            id
        };
        changed.send_modify(|n| *n = n.wrapping_add(1));
        Some(QueueTicket { id, queue: queue.clone(), changed: changed.clone() })
    }
}

impl Drop for QueueTicket {
    fn drop(&mut self) {
        if self.queue.lock_plain().remove(self.id) {
            self.changed.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue() -> (Arc<Mutex<WaitQueue>>, watch::Sender<u64>) {
        (Arc::default(), watch::channel(0).0)
    }

    #[test]
    fn waiters_keep_their_order_and_a_leaver_moves_the_others_up() {
        let (q, changed) = queue();
        let mut seen = changed.subscribe();
        let a = QueueTicket::join(&q, &changed, "a".into()).expect("room");
        let b = QueueTicket::join(&q, &changed, "b".into()).expect("room");
        let c = QueueTicket::join(&q, &changed, "c".into()).expect("room");
        assert!(seen.has_changed().unwrap_or(false));
        seen.borrow_and_update();
        let pos = |t: &QueueTicket| q.lock_plain().position(t.id);
        assert_eq!((pos(&a), pos(&b), pos(&c)), (Some(1), Some(2), Some(3)));
        drop(b);
        assert!(seen.has_changed().unwrap_or(false), "leaving wakes the others");
        assert_eq!((pos(&a), pos(&c)), (Some(1), Some(2)));
        let names: Vec<String> = q.lock_plain().waiters().into_iter().map(|w| w.principal).collect();
        assert_eq!(names, ["a", "c"]);
        // Opening takes the ticket out; its drop later changes nothing.
        assert!(q.lock_plain().remove(a.id));
        seen.borrow_and_update();
        drop(a);
        assert!(!seen.has_changed().unwrap_or(true));
        assert_eq!(pos(&c), Some(1));
    }

    #[test]
    fn the_queue_is_bounded() {
        let (q, changed) = queue();
        let tickets: Vec<QueueTicket> =
            (0..MAX_WAITING).map(|i| QueueTicket::join(&q, &changed, format!("{i}")).expect("room")).collect();
        assert!(QueueTicket::join(&q, &changed, "one too many".into()).is_none());
        drop(tickets);
        assert_eq!(q.lock_plain().len(), 0);
    }
}
