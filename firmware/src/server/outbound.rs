//! A connection's bounded output queue (DESIGN.md: 64 messages / 8 MiB; a peer that makes
//! no progress for 10 s is dropped), inside the daemon's global output budget.
//!
//! The stall rule is about progress, not speed: the writer writes in chunks and each chunk
//! has the stall timeout; producers wait for room as long as the writer keeps making
//! progress. Only a peer that takes nothing for the whole timeout is dropped: the
//! connection's cancellation token fires and the connection is closed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::daemon::OutputBudget;

/// One queued message and the byte budgets (the connection's, the daemon's) it holds
/// until written: drop it once its bytes are out.
#[derive(Debug)]
pub struct Queued {
    line: Vec<u8>,
    _bytes: OwnedSemaphorePermit,
    _global: OwnedSemaphorePermit,
}

impl Queued {
    /// Takes the message's bytes (a line, with its newline); the budgets stay held until
    /// this is dropped.
    pub fn take_line(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.line)
    }
}

/// When the writer last made progress, in ms since `start`.
#[derive(Debug)]
pub struct Progress {
    start: Instant,
    last_ms: AtomicU64,
}

impl Progress {
    /// Progress starting now.
    pub fn new() -> Progress {
        Progress { start: Instant::now(), last_ms: AtomicU64::new(0) }
    }

    /// Records progress now (bytes went out, or there was nothing to write).
    pub fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Release);
    }

    /// How long since the last progress.
    pub fn since(&self) -> Duration {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Acquire)))
    }
}

/// The producing side; clone one per in-flight request.
#[derive(Debug, Clone)]
pub struct Outbound {
    tx: mpsc::Sender<Queued>,
    bytes: Arc<Semaphore>,
    max_bytes: usize,
    global: OutputBudget,
    stall: Duration,
    progress: Arc<Progress>,
    closed: CancellationToken,
}

/// Why a message was not queued.
#[derive(Debug, PartialEq, Eq)]
pub enum PushError {
    /// The peer did not make room within the stall timeout; the connection is being closed.
    Stalled,
    /// The connection is already closed.
    Closed,
}

impl Outbound {
    /// A queue of `max_messages` / `max_bytes` within the daemon's `global` budget, and the
    /// writer task's body that drains it into `sink`. `closed` is cancelled when the peer
    /// stalls or the sink fails.
    pub fn new<W: AsyncWrite + Unpin + Send + 'static>(
        sink: W,
        limits: QueueLimits,
        global: OutputBudget,
        closed: CancellationToken,
    ) -> (Outbound, impl std::future::Future<Output = ()> + Send) {
        let (out, queue) = Outbound::channel(limits, global, closed);
        (out, write_loop(sink, queue))
    }

    /// The queue alone, for a writer of another shape (WebSocket messages): the writer
    /// takes from the [`OutboundQueue`] and reports its progress there.
    pub fn channel(limits: QueueLimits, global: OutputBudget, closed: CancellationToken) -> (Outbound, OutboundQueue) {
        let (tx, rx) = mpsc::channel(limits.max_messages.max(1));
        let bytes = Arc::new(Semaphore::new(limits.max_bytes));
        let progress = Arc::new(Progress::new());
        let queue = OutboundQueue { rx, stall: limits.stall, progress: progress.clone(), closed: closed.clone() };
        let out = Outbound { tx, bytes, max_bytes: limits.max_bytes, global, stall: limits.stall, progress, closed };
        (out, queue)
    }

    /// Queues one line. Waits for room while the peer keeps reading; gives up (and closes
    /// the connection) once the writer has made no progress for the stall timeout.
    pub async fn push(&self, line: Vec<u8>) -> Result<(), PushError> {
        // One message larger than the whole budget takes the whole budget, so it still goes
        // out once everything before it is written.
        let cost = u32::try_from(line.len().min(self.max_bytes)).unwrap_or(u32::MAX);
        let len = line.len();
        let reserve = async {
            let permit = self.bytes.clone().acquire_many_owned(cost).await.map_err(|_| PushError::Closed)?;
            let global = self.global.acquire(len).await.ok_or(PushError::Closed)?;
            let slot = self.tx.reserve().await.map_err(|_| PushError::Closed)?;
            slot.send(Queued { line, _bytes: permit, _global: global });
            Ok(())
        };
        tokio::pin!(reserve);
        loop {
            tokio::select! {
                () = self.closed.cancelled() => return Err(PushError::Closed),
                r = &mut reserve => return r,
                () = tokio::time::sleep(self.stall) => {
                    // Waiting long is fine while the peer reads; a peer that reads nothing
                    // for the whole timeout is gone.
                    if self.progress.since() >= self.stall {
                        self.closed.cancel();
                        return Err(PushError::Stalled);
                    }
                }
            }
        }
    }
}

/// Per-connection output limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimits {
    /// Messages queued at most.
    pub max_messages: usize,
    /// Bytes queued at most.
    pub max_bytes: usize,
    /// A peer that makes no progress for this long is dropped.
    pub stall: Duration,
}

/// The consuming side of an [`Outbound`]: what a writer drains.
#[derive(Debug)]
pub struct OutboundQueue {
    rx: mpsc::Receiver<Queued>,
    stall: Duration,
    progress: Arc<Progress>,
    closed: CancellationToken,
}

impl OutboundQueue {
    /// The next message, or `None` once the connection is closed or every producer gone.
    /// Waiting here counts as progress (idle with nothing to write is not a stall).
    pub async fn next(&mut self) -> Option<Queued> {
        self.progress.touch();
        let queued = tokio::select! {
            () = self.closed.cancelled() => None,
            q = self.rx.recv() => q,
        };
        self.progress.touch();
        queued
    }

    /// Where the writer reports progress (every byte the peer takes).
    pub fn progress(&self) -> Arc<Progress> {
        self.progress.clone()
    }

    /// The stall timeout.
    pub fn stall(&self) -> Duration {
        self.stall
    }

    /// The connection's closing token (fired on a stall or a failed write).
    pub fn closed(&self) -> &CancellationToken {
        &self.closed
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(mut sink: W, mut queue: OutboundQueue) {
    let (stall, progress, closed) = (queue.stall, queue.progress.clone(), queue.closed.clone());
    'messages: loop {
        let Some(queued) = queue.next().await else { break };
        progress.touch();
        // Partial writes: every byte the peer takes is progress, however slowly it reads.
        let mut rest: &[u8] = &queued.line;
        while !rest.is_empty() {
            match tokio::time::timeout(stall, sink.write(rest)).await {
                Ok(Ok(0)) => {
                    closed.cancel();
                    break 'messages;
                }
                Ok(Ok(n)) => {
                    rest = rest.get(n..).unwrap_or_default();
                    progress.touch();
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "peer write failed");
                    closed.cancel();
                    break 'messages;
                }
                Err(_) => {
                    tracing::warn!(
                        timeout_s = stall.as_secs(),
                        "peer read nothing for the stall timeout; disconnecting"
                    );
                    closed.cancel();
                    break 'messages;
                }
            }
        }
        if !matches!(tokio::time::timeout(stall, sink.flush()).await, Ok(Ok(()))) {
            closed.cancel();
            break;
        }
    }
    let _ = sink.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_peer_that_never_reads_is_dropped_after_the_stall_timeout() {
        // A 16-byte pipe that nobody reads.
        let (client, server) = tokio::io::duplex(16);
        let closed = CancellationToken::new();
        let limits = QueueLimits { max_messages: 2, max_bytes: 1024, stall: Duration::from_secs(10) };
        let (out, writer) = Outbound::new(server, limits, OutputBudget::new(1 << 20), closed.clone());
        let writer = tokio::spawn(writer);
        let mut results = Vec::new();
        for _ in 0..5 {
            results.push(out.push(vec![b'x'; 32]).await);
        }
        assert!(closed.is_cancelled());
        assert!(results.iter().any(|r| *r == Err(PushError::Stalled) || *r == Err(PushError::Closed)));
        writer.await.unwrap();
        drop(client);
    }

    #[tokio::test]
    async fn byte_budget_bounds_queued_data() {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let closed = CancellationToken::new();
        let limits = QueueLimits { max_messages: 64, max_bytes: 100, stall: Duration::from_secs(10) };
        let (out, writer) = Outbound::new(server, limits, OutputBudget::new(1 << 20), closed.clone());
        tokio::spawn(writer);
        // A message bigger than the budget still goes through.
        out.push(vec![b'a'; 300]).await.unwrap();
        out.push(b"b\n".to_vec()).await.unwrap();
        let mut buf = vec![0u8; 302];
        tokio::io::AsyncReadExt::read_exact(&mut client, &mut buf).await.unwrap();
        assert_eq!(&buf[300..], b"b\n");
        assert!(!closed.is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_that_keeps_reading_is_not_dropped() {
        // A 4 KiB pipe and a 1 MiB message: the reader takes 4 KiB every 2 s, so the whole
        // message takes far longer than the stall timeout, but progress never stops.
        let (mut client, server) = tokio::io::duplex(4096);
        let closed = CancellationToken::new();
        let limits = QueueLimits { max_messages: 4, max_bytes: 8 << 20, stall: Duration::from_secs(10) };
        let (out, writer) = Outbound::new(server, limits, OutputBudget::new(16 << 20), closed.clone());
        tokio::spawn(writer);
        let message = vec![b'z'; 1 << 20];
        out.push(message.clone()).await.unwrap();
        let pusher = {
            let out = out.clone();
            tokio::spawn(async move { out.push(b"after\n".to_vec()).await })
        };
        let mut got = Vec::new();
        let mut buf = vec![0u8; 4096];
        while got.len() < message.len() + 6 {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let n = tokio::io::AsyncReadExt::read(&mut client, &mut buf).await.unwrap();
            assert!(n > 0, "closed after {} bytes", got.len());
            got.extend_from_slice(&buf[..n]);
        }
        assert!(!closed.is_cancelled());
        assert_eq!(pusher.await.unwrap(), Ok(()));
        assert_eq!(&got[got.len() - 6..], b"after\n");
    }
}
