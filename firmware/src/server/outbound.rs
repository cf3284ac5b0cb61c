//! A connection's bounded output queue (DESIGN.md: 64 messages / 8 MiB; a peer that makes
//! no progress for 10 s is dropped).
//!
//! Producers wait for room for at most the stall timeout; the writer gives each write the
//! same timeout. Either running out means the peer stopped reading: the connection's
//! cancellation token fires and the connection is closed.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// One queued message and the byte budget it holds until written.
#[derive(Debug)]
struct Queued {
    line: Vec<u8>,
    _bytes: OwnedSemaphorePermit,
}

/// The producing side; clone one per in-flight request.
#[derive(Debug, Clone)]
pub struct Outbound {
    tx: mpsc::Sender<Queued>,
    bytes: Arc<Semaphore>,
    max_bytes: usize,
    stall: Duration,
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
    /// A queue of `max_messages` / `max_bytes`, and the writer task's body that drains it into
    /// `sink`. `closed` is cancelled when the peer stalls or the sink fails.
    pub fn new<W: AsyncWrite + Unpin + Send + 'static>(
        sink: W,
        max_messages: usize,
        max_bytes: usize,
        stall: Duration,
        closed: CancellationToken,
    ) -> (Outbound, impl std::future::Future<Output = ()> + Send) {
        let (tx, rx) = mpsc::channel(max_messages);
        let bytes = Arc::new(Semaphore::new(max_bytes));
        let writer = write_loop(sink, rx, stall, closed.clone());
        (Outbound { tx, bytes, max_bytes, stall, closed }, writer)
    }

    /// Queues one line. Waits at most the stall timeout for room.
    pub async fn push(&self, line: Vec<u8>) -> Result<(), PushError> {
        // One message larger than the whole budget takes the whole budget, so it still goes
        // out once everything before it is written.
        let cost = u32::try_from(line.len().min(self.max_bytes)).unwrap_or(u32::MAX);
        let reserve = async {
            let permit = self.bytes.clone().acquire_many_owned(cost).await.map_err(|_| PushError::Closed)?;
            let slot = self.tx.reserve().await.map_err(|_| PushError::Closed)?;
            slot.send(Queued { line, _bytes: permit });
            Ok(())
        };
        tokio::select! {
            () = self.closed.cancelled() => Err(PushError::Closed),
            r = tokio::time::timeout(self.stall, reserve) => match r {
                Ok(r) => r,
                Err(_) => {
                    self.closed.cancel();
                    Err(PushError::Stalled)
                }
            },
        }
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut sink: W,
    mut rx: mpsc::Receiver<Queued>,
    stall: Duration,
    closed: CancellationToken,
) {
    loop {
        let queued = tokio::select! {
            () = closed.cancelled() => break,
            q = rx.recv() => match q {
                Some(q) => q,
                None => break,
            },
        };
        match tokio::time::timeout(stall, sink.write_all(&queued.line)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "peer write failed");
                closed.cancel();
                break;
            }
            Err(_) => {
                tracing::warn!(timeout_s = stall.as_secs(), "peer stopped reading; disconnecting");
                closed.cancel();
                break;
            }
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
        let (out, writer) = Outbound::new(server, 2, 1024, Duration::from_secs(10), closed.clone());
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
        let (out, writer) = Outbound::new(server, 64, 100, Duration::from_secs(10), closed.clone());
        tokio::spawn(writer);
        // A message bigger than the budget still goes through.
        out.push(vec![b'a'; 300]).await.unwrap();
        out.push(b"b\n".to_vec()).await.unwrap();
        let mut buf = vec![0u8; 302];
        tokio::io::AsyncReadExt::read_exact(&mut client, &mut buf).await.unwrap();
        assert_eq!(&buf[300..], b"b\n");
        assert!(!closed.is_cancelled());
    }
}
