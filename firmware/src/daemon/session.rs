//! Sessions (one per connection or in-process caller) and their in-flight requests.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{Caller, Daemon, DaemonError, Hold, Inner, Principal};
use crate::protocol::host_params::ConnectionKind;
use crate::protocol::{Event, RequestId};
use crate::sync::LockPlain;

/// Events a session's stream may hold before the producer waits.
const SESSION_EVENTS: usize = 64;

/// What a session's transport forwards besides responses.
#[derive(Debug)]
pub enum SessionMessage {
    /// An event to write.
    Event(Event),
    /// Answer once every earlier event is queued for writing (a response that must come
    /// after them waits for this).
    Flush(tokio::sync::oneshot::Sender<()>),
    /// A followed stream (`task_events` with `follow`) passed its checks and starts: a
    /// transport that answers a refusal differently from a stream (HTTP's status line)
    /// waits for this or the request's end. Others ignore it.
    Streaming,
}

/// Identifies one session (one connection) for the daemon's lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct SessionId(pub u64);

/// One caller's connection to the daemon. Dropping it releases held input it caused and
/// (once tasks exist) ends its lease.
#[derive(Debug)]
pub struct Session {
    pub(super) id: SessionId,
    pub(super) caller: Caller,
    pub(super) cancel: CancellationToken,
    in_flight: Arc<std::sync::Mutex<InFlight>>,
    pub(super) events: tokio::sync::mpsc::Sender<SessionMessage>,
    pub(super) events_rx: std::sync::Mutex<Option<tokio::sync::mpsc::Receiver<SessionMessage>>>,
    pub(super) inner: Arc<Inner>,
    /// Fixed by the first `hello`.
    pub(super) kind: std::sync::OnceLock<ConnectionKind>,
    /// The task this connection mirrors (`attach`).
    pub(super) mirror: std::sync::Mutex<Option<Mirror>>,
    /// Opened for one HTTP request: what outlives the request (a video ticket) is bound
    /// to the caller's principal instead.
    pub(super) per_request: std::sync::atomic::AtomicBool,
    /// Its place in the table of what principals hold (`None`: an in-process caller's
    /// uncounted session). Ends the session when the caller's token is revoked.
    hold: Option<Hold>,
}

/// An attached connection's mirror of one task.
#[derive(Debug)]
pub(super) struct Mirror {
    /// The task.
    pub(super) task: i64,
    /// The task's last seq when the mirror started: later events arrive live, earlier
    /// ones through `mailbox_flush`.
    pub(super) live_from: i64,
    /// Ends the mirror's stream.
    pub(super) cancel: CancellationToken,
}

/// The cancellable requests in flight on one session, by request id.
pub(super) type InFlight = HashMap<u64, CancellationToken>;

fn lock(map: &std::sync::Mutex<InFlight>) -> std::sync::MutexGuard<'_, InFlight> {
    // Plain data; a panic elsewhere cannot leave it inconsistent.
    map.lock_plain()
}

/// One in-flight request of a session: its id is taken until this is dropped, and its
/// cancellation token is what `cancel` (and the connection closing) fires.
#[derive(Debug)]
pub struct RequestSlot {
    id: u64,
    cancel: CancellationToken,
    map: Arc<std::sync::Mutex<InFlight>>,
}

impl RequestSlot {
    /// The request's cancellation: fires on `cancel`, disconnect and shutdown.
    pub fn cancel_token(&self) -> &CancellationToken {
        &self.cancel
    }
}

impl Drop for RequestSlot {
    fn drop(&mut self) {
        lock(&self.map).remove(&self.id);
    }
}

impl Session {
    pub(super) fn new(id: SessionId, mut caller: Caller, inner: Arc<Inner>, hold: Option<Hold>) -> Session {
        // A caller with no identity of its own is its session.
        if let Principal::Session { session } = &mut caller.principal {
            *session = id.0;
        }
        let (events, events_rx) = tokio::sync::mpsc::channel(SESSION_EVENTS);
        // A hold's end is a child of the shutdown: the session ends with either.
        let cancel = match &hold {
            Some(h) => h.ended().child_token(),
            None => inner.shutdown.child_token(),
        };
        Session {
            id,
            caller,
            cancel,
            in_flight: Arc::default(),
            events,
            events_rx: std::sync::Mutex::new(Some(events_rx)),
            inner,
            kind: std::sync::OnceLock::new(),
            mirror: std::sync::Mutex::new(None),
            per_request: std::sync::atomic::AtomicBool::new(false),
            hold,
        }
    }

    /// Returns when the caller's credential was revoked or rotated: the transport closes
    /// the connection saying why (the session's requests are already cancelled). Never
    /// returns for a shutdown or an in-process session.
    pub async fn credential_ended(&self) {
        match &self.hold {
            Some(h) => h.revocation().await,
            None => std::future::pending().await,
        }
    }

    /// What this connection is (fixed by its first `hello`; `host` until then).
    pub fn kind(&self) -> ConnectionKind {
        self.kind.get().copied().unwrap_or_default()
    }

    /// The task this connection mirrors and where its live events started.
    pub fn mirror(&self) -> Option<(i64, i64)> {
        self.mirror.lock_plain().as_ref().map(|m| (m.task, m.live_from))
    }

    /// The task this connection is attached to: its task-scoped calls go there.
    pub fn attached(&self) -> Option<i64> {
        self.mirror().map(|m| m.0)
    }

    /// Marks the session as serving a single HTTP request (see `per_request`).
    pub fn set_per_request(&self) {
        self.per_request.store(true, Ordering::Relaxed);
    }

    /// Whom this session's caller acts as (a task's opener, operation ids).
    pub fn principal(&self) -> &Principal {
        &self.caller.principal
    }

    /// Registers request `id` as in flight. Refused with `DUPLICATE_ID` while another
    /// request with the same id is in flight: replies and `cancel` must be unambiguous.
    pub fn begin_request(&self, id: RequestId) -> Result<RequestSlot, DaemonError> {
        let mut map = lock(&self.in_flight);
        if map.contains_key(&id.0) {
            return Err(DaemonError::DuplicateId(id.0));
        }
        let cancel = self.cancel.child_token();
        map.insert(id.0, cancel.clone());
        Ok(RequestSlot { id: id.0, cancel, map: self.in_flight.clone() })
    }

    /// Cancels in-flight request `id`; returns whether it was in flight.
    pub(super) fn cancel_request(&self, id: u64) -> bool {
        match lock(&self.in_flight).get(&id) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Releases what this session holds now (its peer closed), without waiting for drop.
    pub fn close(&self) {
        self.cancel.cancel();
    }

    /// The session's id.
    pub fn id(&self) -> SessionId {
        self.id
    }

    /// The caller.
    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// The session's event stream (task events it follows), for its transport to forward.
    /// Once: later calls get `None`.
    pub fn take_events(&self) -> Option<tokio::sync::mpsc::Receiver<SessionMessage>> {
        self.events_rx.lock_plain().take()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.inner.sessions.fetch_sub(1, Ordering::Relaxed);
        if !self.per_request.load(Ordering::Relaxed) {
            self.inner.video.session_closed(self.id);
        }
        // The lease: a task opened on this connection is abandoned now (its input was
        // cancelled with the task), and the transition is persisted in the background.
        let withdrawn = self.inner.tasks.withdraw_asked_by(self.id);
        let abandoned = self.inner.tasks.lease_lost(self.id);
        if let Some(change) = &abandoned {
            tracing::info!(task = change.task, session = self.id.0, "lease lost: task abandoned");
        }
        let changes: Vec<_> = withdrawn.into_iter().chain(abandoned).collect();
        if !changes.is_empty() {
            let daemon = Daemon { inner: self.inner.clone() };
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    for change in changes {
                        daemon.persist(change).await;
                    }
                });
            }
        }
    }
}
