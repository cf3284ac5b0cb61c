//! One HTTPS connection's bookkeeping: what it is doing (requests being answered, open
//! streams, when bytes last moved) for the idle rule, and the queue of connections not yet
//! authenticated, the ones dropped first when the server is full.

use std::collections::VecDeque;
use std::io;
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

/// Connections that have not yet completed a request, oldest first: the ones dropped
/// when the server is full.
#[derive(Debug, Default)]
pub(super) struct Unproven {
    queue: Mutex<VecDeque<(u64, CancellationToken)>>,
}

impl Unproven {
    pub(super) fn add(&self, id: u64, cancel: CancellationToken) {
        self.queue.lock_plain().push_back((id, cancel));
    }

    pub(super) fn remove(&self, id: u64) {
        self.queue.lock_plain().retain(|(i, _)| *i != id);
    }

    /// Drops the oldest unproven connection; `false` if there is none.
    pub(super) fn evict_oldest(&self) -> bool {
        match self.queue.lock_plain().pop_front() {
            Some((_, cancel)) => {
                cancel.cancel();
                true
            }
            None => false,
        }
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
    pending: AtomicUsize,
    streams: AtomicUsize,
    id: u64,
    unproven: Arc<Unproven>,
}

impl ConnState {
    pub(super) fn new(id: u64, unproven: Arc<Unproven>) -> ConnState {
        ConnState {
            start: tokio::time::Instant::now(),
            last_byte_ms: AtomicU64::new(0),
            last_request_ms: AtomicU64::new(0),
            pending: AtomicUsize::new(0),
            streams: AtomicUsize::new(0),
            id,
            unproven,
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

    /// The connection authenticated: it is no longer dropped to make room.
    pub(crate) fn proven(&self) {
        self.unproven.remove(self.id);
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
        Arc::new(ConnState::new(1, Arc::new(Unproven::default())))
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

    #[test]
    fn the_oldest_unproven_connection_makes_room() {
        let u = Unproven::default();
        let (a, b) = (CancellationToken::new(), CancellationToken::new());
        u.add(1, a.clone());
        u.add(2, b.clone());
        u.remove(1);
        assert!(u.evict_oldest());
        assert!(b.is_cancelled() && !a.is_cancelled(), "a proven connection is never evicted");
        assert!(!u.evict_oldest());
    }
}
