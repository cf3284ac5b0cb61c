//! One HTTPS connection's bookkeeping: what it is doing (requests being answered, open
//! streams, when bytes last moved) for the idle rule, and the table of every connection,
//! which says whose is dropped when the server is full.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;

use crate::sync::LockPlain;

/// A connection with no traffic for this long is closed (streamed answers send a
/// keep-alive line more often).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Every open connection, oldest first, with whom it proved to be (if it did) and whether
/// it is answering a request: what the server drops when it is full.
///
/// When full, the server drops one connection of the biggest group, where a group is
/// either the unauthenticated connections of one address or the authenticated connections
/// of one principal (on a tie, the unauthenticated group):
/// - of an address: its oldest unauthenticated connection (a flood of idle sockets costs
///   its own address first);
/// - of a principal: its oldest idle connection (no request being answered, no stream
///   open: a lease is never dropped while an idle one is there), else its oldest (a
///   principal that fills the table loses its own first, even while a newcomer from the
///   same address is still in its TLS handshake).
///
/// So no client, with or without credentials, can keep every connection: a new one always
/// gets in, and the one it replaces belongs to the biggest holder.
#[derive(Debug, Default)]
pub(super) struct ConnTable {
    /// Transport bookkeeping, not the phone's state: a plain mutex, never held across an await.
    entries: Mutex<VecDeque<Entry>>,
}

#[derive(Debug)]
struct Entry {
    id: u64,
    addr: IpAddr,
    cancel: CancellationToken,
    /// Whom it authenticated as (a principal's label, or its address for a nameless
    /// caller); `None` until a request authenticated.
    holder: Option<String>,
    /// Requests being answered and streams open (shared with its [`ConnState`]).
    busy: Busy,
}

/// A connection's requests being answered and streams open, shared by its [`ConnState`]
/// and its entry in the [`ConnTable`].
#[derive(Debug, Clone, Default)]
pub(super) struct Busy {
    pending: Arc<AtomicUsize>,
    streams: Arc<AtomicUsize>,
}

impl Busy {
    fn idle(&self) -> bool {
        self.pending.load(Ordering::Acquire) == 0 && self.streams.load(Ordering::Acquire) == 0
    }
}

impl ConnTable {
    /// Adds an accepted connection; returns the counters of what it is doing, for its
    /// [`ConnState`].
    pub(super) fn add(&self, id: u64, addr: IpAddr, cancel: CancellationToken) -> Busy {
        let busy = Busy::default();
        self.entries.lock_plain().push_back(Entry { id, addr, cancel, holder: None, busy: busy.clone() });
        busy
    }

    pub(super) fn remove(&self, id: u64) {
        self.entries.lock_plain().retain(|e| e.id != id);
    }

    fn prove(&self, id: u64, holder: &str) {
        if let Some(e) = self.entries.lock_plain().iter_mut().find(|e| e.id == id) {
            if e.holder.is_none() {
                e.holder = Some(holder.to_string());
            }
        }
    }

    /// Connections open.
    pub(super) fn len(&self) -> usize {
        self.entries.lock_plain().len()
    }

    /// Drops one connection to make room (see the type's documentation); `false` if the
    /// table is empty.
    pub(super) fn evict(&self) -> bool {
        let mut entries = self.entries.lock_plain();
        let index = Self::victim(&entries);
        match index.and_then(|i| entries.remove(i)) {
            Some(e) => {
                tracing::debug!(peer = %e.addr, holder = e.holder.as_deref().unwrap_or("-"), "connection dropped to make room");
                e.cancel.cancel();
                true
            }
            None => false,
        }
    }

    fn victim(entries: &VecDeque<Entry>) -> Option<usize> {
        fn most<K: std::hash::Hash + Eq>(keys: impl Iterator<Item = K>) -> Option<K> {
            let mut counts: HashMap<K, usize> = HashMap::new();
            for k in keys {
                *counts.entry(k).or_default() += 1;
            }
            counts.into_iter().max_by_key(|(_, n)| *n).map(|(k, _)| k)
        }
        let unproven = most(entries.iter().filter(|e| e.holder.is_none()).map(|e| e.addr));
        let proven = most(entries.iter().filter_map(|e| e.holder.as_deref()));
        let count_unproven = |addr: IpAddr| entries.iter().filter(|e| e.holder.is_none() && e.addr == addr).count();
        let count_proven = |h: &str| entries.iter().filter(|e| e.holder.as_deref() == Some(h)).count();
        let biggest = match (unproven, proven) {
            (None, None) => return None,
            (Some(addr), Some(holder)) if count_unproven(addr) >= count_proven(holder) => {
                return entries.iter().position(|e| e.holder.is_none() && e.addr == addr)
            }
            (Some(addr), None) => return entries.iter().position(|e| e.holder.is_none() && e.addr == addr),
            (_, Some(holder)) => holder,
        };
        let theirs = |e: &Entry| e.holder.as_deref() == Some(biggest);
        entries.iter().position(|e| theirs(e) && e.busy.idle()).or_else(|| entries.iter().position(theirs))
    }
}

/// What one connection is doing, for the idle rule and the eviction of unproven
/// connections.
///
/// Idle is judged by requests, not bytes alone (h2 keep-alive pings move bytes on a
/// connection nobody uses): with no request running and no stream open, a connection
/// goes after [`IDLE_TIMEOUT`] without a request or without bytes; an open stream keeps it
/// as long as bytes move (its keep-alive lines do); a request the daemon is still
/// answering (a question waiting for a human) keeps it regardless.
#[derive(Debug)]
pub(crate) struct ConnState {
    start: tokio::time::Instant,
    last_byte_ms: AtomicU64,
    last_request_ms: AtomicU64,
    pending: Arc<AtomicUsize>,
    streams: Arc<AtomicUsize>,
    id: u64,
    table: Arc<ConnTable>,
}

impl ConnState {
    /// The state of connection `id`, whose requests and streams are counted in `busy`
    /// (from [`ConnTable::add`]).
    pub(super) fn new(id: u64, table: Arc<ConnTable>, busy: Busy) -> ConnState {
        ConnState {
            start: tokio::time::Instant::now(),
            last_byte_ms: AtomicU64::new(0),
            last_request_ms: AtomicU64::new(0),
            pending: busy.pending,
            streams: busy.streams,
            id,
            table,
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn touch_bytes(&self) {
        self.last_byte_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    fn touch_request(&self) {
        self.last_request_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    fn since(&self, at: &AtomicU64) -> Duration {
        Duration::from_millis(self.now_ms().saturating_sub(at.load(Ordering::Relaxed)))
    }

    /// The connection authenticated as `holder` (a principal's label): it is now dropped
    /// to make room only when `holder` holds more connections than anyone else.
    pub(crate) fn proven(&self, holder: &str) {
        self.table.prove(self.id, holder);
    }

    /// Held by a streamed answer's body for as long as it streams.
    pub(crate) fn stream_guard(self: &Arc<Self>) -> StreamGuard {
        self.streams.fetch_add(1, Ordering::AcqRel);
        StreamGuard(self.clone())
    }

    pub(super) fn pending_guard(self: &Arc<Self>) -> PendingGuard {
        self.touch_request();
        self.pending.fetch_add(1, Ordering::AcqRel);
        PendingGuard(self.clone())
    }

    pub(super) fn should_close(&self) -> bool {
        if self.pending.load(Ordering::Acquire) > 0 {
            return false;
        }
        let bytes_idle = self.since(&self.last_byte_ms) >= IDLE_TIMEOUT;
        if self.streams.load(Ordering::Acquire) > 0 {
            return bytes_idle;
        }
        bytes_idle || self.since(&self.last_request_ms) >= IDLE_TIMEOUT
    }
}

/// An open stream of a connection (see [`ConnState`]).
#[derive(Debug)]
pub(crate) struct StreamGuard(Arc<ConnState>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::AcqRel);
        self.0.touch_request();
    }
}

/// A request the server is answering (dropped when its answer is ready or it is cancelled).
#[derive(Debug)]
pub(super) struct PendingGuard(Arc<ConnState>);

impl Drop for PendingGuard {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::AcqRel);
        self.0.touch_request();
    }
}

/// A stream that notes every read and write in its connection's [`ConnState`].
pub(super) struct Watched<I> {
    inner: I,
    activity: Arc<ConnState>,
}

impl<I> Watched<I> {
    pub(super) fn new(inner: I, activity: Arc<ConnState>) -> Self {
        activity.touch_bytes();
        Watched { inner, activity }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch_bytes();
        }
        r
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch_bytes();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch_bytes();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> Arc<ConnState> {
        let table = Arc::new(ConnTable::default());
        let busy = table.add(1, IpAddr::from([127, 0, 0, 1]), CancellationToken::new());
        Arc::new(ConnState::new(1, table, busy))
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_goes_after_a_minute_without_requests() {
        let c = conn();
        assert!(!c.should_close());
        // Bytes alone (h2 pings) do not keep it.
        for _ in 0..7 {
            tokio::time::advance(Duration::from_secs(10)).await;
            c.touch_bytes();
        }
        assert!(c.should_close(), "70 s of pings and no request");
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_being_answered_keeps_its_connection() {
        let c = conn();
        let pending = c.pending_guard();
        tokio::time::advance(Duration::from_secs(600)).await;
        assert!(!c.should_close(), "a question waiting for a person");
        c.touch_bytes(); // the answer is written
        drop(pending);
        assert!(!c.should_close(), "the answer just went out");
        tokio::time::advance(IDLE_TIMEOUT).await;
        assert!(c.should_close());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_stays_while_its_bytes_flow() {
        let c = conn();
        let stream = c.stream_guard();
        for _ in 0..10 {
            tokio::time::advance(crate::server::https::KEEPALIVE).await;
            c.touch_bytes();
            assert!(!c.should_close(), "keep-alive lines flow");
        }
        tokio::time::advance(IDLE_TIMEOUT).await;
        assert!(c.should_close(), "a stream whose peer takes nothing");
        drop(stream);
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn unproven_connections_go_first_from_the_address_with_the_most() {
        let t = ConnTable::default();
        let tokens: Vec<CancellationToken> = (0..5).map(|_| CancellationToken::new()).collect();
        t.add(0, ip(1), tokens[0].clone()); // a viewer's socket, first
        for (i, token) in tokens.iter().enumerate().skip(1).take(3) {
            t.add(i as u64, ip(2), token.clone()); // a flood from another address
        }
        t.add(4, ip(3), tokens[4].clone());
        t.prove(4, "token:admin");
        assert!(t.evict());
        assert!(tokens[1].is_cancelled(), "the flood's oldest");
        assert!(!tokens[0].is_cancelled() && !tokens[4].is_cancelled());
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn a_newcomer_in_its_handshake_outlasts_the_principal_that_fills_the_table() {
        let t = ConnTable::default();
        let tokens: Vec<CancellationToken> = (0..5).map(|_| CancellationToken::new()).collect();
        for (i, token) in tokens.iter().enumerate() {
            t.add(i as u64, ip(1), token.clone());
        }
        for i in 1..4 {
            t.prove(i, "token:viewer");
        }
        // 0 is the admin's new connection, still unauthenticated; 4 the viewer's newest, too.
        assert!(t.evict());
        assert!(tokens[1].is_cancelled(), "the viewer's oldest, not an unauthenticated one");
        assert!(!tokens[0].is_cancelled() && !tokens[4].is_cancelled());
    }

    #[test]
    fn proven_connections_go_from_whoever_holds_the_most_idle_first() {
        let t = ConnTable::default();
        let tokens: Vec<CancellationToken> = (0..5).map(|_| CancellationToken::new()).collect();
        let mut busy = Vec::new();
        for (i, token) in tokens.iter().enumerate() {
            busy.push(t.add(i as u64, ip(1), token.clone()));
        }
        t.prove(0, "token:admin");
        for i in 1..5 {
            t.prove(i, "token:viewer");
        }
        // The viewer's oldest is answering a request, its next holds a lease (a stream):
        // its next oldest idle one goes.
        busy[1].pending.fetch_add(1, Ordering::AcqRel);
        busy[2].streams.fetch_add(1, Ordering::AcqRel);
        assert!(t.evict());
        assert!(tokens[3].is_cancelled(), "the biggest holder's oldest idle connection");
        assert!(!tokens[0].is_cancelled() && !tokens[1].is_cancelled() && !tokens[2].is_cancelled());
        // All busy: the oldest of the biggest holder.
        for b in &busy {
            b.pending.fetch_add(1, Ordering::AcqRel);
        }
        assert!(t.evict());
        assert!(tokens[1].is_cancelled());
        assert!(!tokens[0].is_cancelled(), "the admin with one connection keeps it");
        t.remove(0);
        t.remove(2);
        t.remove(4);
        assert!(!t.evict(), "nothing left");
    }
}
