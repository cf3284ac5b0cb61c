//! `/api/video`: live H.264 (or the capture's own JPEGs) to browsers (reference 000's
//! video listener, on our port).
//!
//! The socket carries no credentials of its own: its first text message, within 3 s, is
//! `{"ticket": "..."}` from `video_open` (never in the URL, never logged). Then it receives
//! one text message `{"type":"ready",...}` and binary CDV1 (or CDJ1, when `protocol` is
//! `jpeg/1`) messages, and sends
//! `{"type":"ack","generation":G,"sequence":S}` after each and `{"type":"keyframe"}` to ask
//! for an IDR. At most 16 sockets wait for their ticket (4 from one address; when all 16
//! wait, the oldest of the address with the most makes room) and 8 watch; client messages
//! are at most 1024 bytes; a frame unacknowledged for 10 s closes the socket.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::StreamExt;
use hyper::body::Incoming;
use hyper::Request;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_util::sync::CancellationToken;

use super::body::{self, ResponseBody};
use crate::daemon::{Daemon, DaemonError, VideoEnd, VideoViewer};
use crate::protocol::{ErrorBody, ErrorCode};
use crate::server::outbound::Progress;
use crate::server::websocket::{self, close, Socket, PING_INTERVAL, PONG_TIMEOUT};
use crate::sync::LockPlain;

/// Sockets that may wait for their ticket at once.
pub const MAX_PENDING: usize = 16;
/// Sockets from one address that may wait for their ticket at once: no address (and no
/// one without credentials) can hold every waiting place.
pub const PENDING_PER_ADDRESS: usize = 4;
/// The ticket must arrive this soon after the upgrade (a viewer sends it at once).
pub const TICKET_WAIT: Duration = Duration::from_secs(2);
/// Largest client message.
pub const MAX_CLIENT_MESSAGE: usize = 1024;
/// A viewer whose oldest unacknowledged frame is this old is dropped.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a frame's send may make no progress before the viewer counts as gone.
const SEND_STALL: Duration = Duration::from_secs(10);

/// The sockets waiting for their ticket, oldest first, by address (transport bookkeeping
/// before any credential, not the phone's state: a plain mutex, never held across an await).
#[derive(Debug, Default, Clone)]
pub struct Pending(Arc<Mutex<PendingInner>>);

#[derive(Debug, Default)]
struct PendingInner {
    waits: VecDeque<(u64, IpAddr, CancellationToken)>,
    next: u64,
}

impl Pending {
    /// A waiting place for a socket from `addr`: refused when that address already has
    /// [`PENDING_PER_ADDRESS`]; when all [`MAX_PENDING`] are taken, the oldest of the address
    /// with the most waiting is dropped for it.
    fn enter(&self, addr: IpAddr) -> Option<PendingSlot> {
        let mut inner = self.0.lock_plain();
        let mine = inner.waits.iter().filter(|(_, a, _)| *a == addr).count();
        if mine >= PENDING_PER_ADDRESS {
            return None;
        }
        if inner.waits.len() >= MAX_PENDING {
            let mut counts: std::collections::HashMap<IpAddr, usize> = std::collections::HashMap::new();
            for (_, a, _) in &inner.waits {
                *counts.entry(*a).or_default() += 1;
            }
            let busiest = counts.into_iter().max_by_key(|(_, n)| *n).map(|(a, _)| a);
            if let Some(i) = busiest.and_then(|b| inner.waits.iter().position(|(_, a, _)| *a == b)) {
                if let Some((_, _, dropped)) = inner.waits.remove(i) {
                    dropped.cancel();
                }
            }
        }
        let id = inner.next;
        inner.next += 1;
        let dropped = CancellationToken::new();
        inner.waits.push_back((id, addr, dropped.clone()));
        Some(PendingSlot { pending: self.clone(), id, dropped })
    }

    /// Sockets waiting now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock_plain().waits.len()
    }
}

/// One waiting socket; dropping it makes room. `dropped` fires when it was made to give
/// its place to a newer socket.
#[derive(Debug)]
struct PendingSlot {
    pending: Pending,
    id: u64,
    dropped: CancellationToken,
}

impl Drop for PendingSlot {
    fn drop(&mut self) {
        self.pending.0.lock_plain().waits.retain(|(id, _, _)| *id != self.id);
    }
}

/// The one message before the ticket is redeemed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TicketMessage {
    ticket: String,
}

/// What a viewer sends afterwards.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum ViewerMessage {
    /// Received this frame (and every one before it).
    Ack {
        /// The generation in the frame's header.
        generation: u32,
        /// The sequence in the frame's header.
        sequence: u32,
    },
    /// A gap or a decoder error: send an IDR soon.
    Keyframe,
}

/// Answers `GET /api/video`: exact path, no query (tickets never go in URLs), the
/// room among the waiting sockets; then upgrades (the Origin policy has passed it).
pub fn upgrade(
    daemon: &Daemon,
    shutdown: &CancellationToken,
    pending: &Pending,
    peer: IpAddr,
    mut req: Request<Incoming>,
) -> hyper::Response<ResponseBody> {
    if req.uri().query().is_some() {
        return body::refuse(
            ErrorCode::InvalidRequest,
            "no query on /api/video: the ticket goes in the first message, {\"ticket\": ...}, never in the URL",
        );
    }
    let Some(slot) = pending.enter(peer) else {
        return body::refuse(
            ErrorCode::Busy,
            format!("{PENDING_PER_ADDRESS} video sockets from this address are waiting for their tickets; send the ticket as the first message, or retry shortly"),
        );
    };
    let (response, on_upgrade) = match websocket::accept(&mut req) {
        Ok(r) => r,
        Err(e) => return body::error(e),
    };
    let (daemon, shutdown) = (daemon.clone(), shutdown.clone());
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => serve(daemon, upgraded, slot, shutdown).await,
            Err(e) => tracing::debug!(error = %e, "video upgrade failed"),
        }
    });
    response.map(|()| body::full(bytes::Bytes::new()))
}

async fn serve(daemon: Daemon, upgraded: hyper::upgrade::Upgraded, slot: PendingSlot, shutdown: CancellationToken) {
    let progress = Arc::new(Progress::new());
    // Frames are sent, not read: the read limit only needs to cover client messages (and
    // notice oversized ones as such).
    let socket = websocket::open(upgraded, progress.clone(), 64 * 1024).await;
    let (mut sink, mut stream) = socket.split();
    let authorized = tokio::select! {
        r = authorize(&daemon, &mut stream) => r,
        () = slot.dropped.cancelled() => Err((close::TRY_LATER, "too many sockets waited for their tickets; this one waited longest: retry".into())),
    };
    let viewer = match authorized {
        Ok(v) => Arc::new(v),
        Err((code, reason)) => {
            // Its waiting place goes now, not after the close and the linger.
            drop(slot);
            tracing::debug!(code, reason = %crate::logtext::capped(&reason), "video socket refused");
            let close = websocket::close_message(code, &reason);
            if websocket::send_with_progress(&mut sink, close, &progress, SEND_STALL).await.is_ok() {
                websocket::linger(&mut stream).await;
            }
            return;
        }
    };
    drop(slot);
    let ready = serde_json::json!({
        "type": "ready",
        "protocol": viewer.protocol(),
        "generation": viewer.generation(),
        "codec": viewer.codec(),
        // The appliance's clock (the capture times' clock) now: a viewer elsewhere
        // estimates latency from its offset to its own clock.
        "now_us": crate::device::video::viewers::monotonic_micros(std::time::Instant::now()),
    });
    if websocket::send_with_progress(&mut sink, Message::text(ready.to_string()), &progress, SEND_STALL).await.is_err()
    {
        return;
    }
    tracing::info!(viewer = viewer.id().0, "video viewer watching");
    let (close_tx, close_rx) = mpsc::channel(1);
    let mut writer = tokio::spawn(send_frames(sink, viewer.clone(), close_rx, progress));
    let ending = watch(&viewer, &mut stream, &mut writer, &shutdown).await;
    if let Some((code, reason)) = ending {
        tracing::info!(viewer = viewer.id().0, code, reason = %crate::logtext::capped(&reason), "video viewer closed");
        let _ = close_tx.try_send(websocket::close_message(code, &reason));
        if tokio::time::timeout(Duration::from_secs(1), &mut writer).await.is_err() {
            writer.abort();
        } else if code != close::NORMAL {
            websocket::linger(&mut stream).await;
        }
    } else {
        writer.abort();
        tracing::info!(viewer = viewer.id().0, "video viewer gone");
    }
}

/// Waits for the ticket message and redeems it (within [`TICKET_WAIT`]).
async fn authorize(daemon: &Daemon, stream: &mut SplitStream<Socket>) -> Result<VideoViewer, (u16, String)> {
    let first = tokio::time::timeout(TICKET_WAIT, stream.next()).await;
    let text = match first {
        Err(_) => return Err((close::POLICY, "send {\"ticket\": ...} as the first message, within 2 s".into())),
        Ok(Some(Ok(Message::Text(t)))) if t.len() <= MAX_CLIENT_MESSAGE => t,
        Ok(Some(Ok(Message::Text(_)))) | Ok(Some(Err(WsError::Capacity(_)))) => {
            return Err((close::TOO_BIG, format!("client messages are at most {MAX_CLIENT_MESSAGE} bytes")))
        }
        Ok(_) => return Err((close::POLICY, "the first message must be the text {\"ticket\": ...}".into())),
    };
    let ticket: TicketMessage = serde_json::from_str(&text)
        .map_err(|_| (close::POLICY, "the first message must be {\"ticket\": \"...\"} and nothing else".to_string()))?;
    daemon.redeem_video_ticket(&ticket.ticket).map_err(|e| {
        let code = if matches!(e, DaemonError::Busy(_)) { close::TRY_LATER } else { close::POLICY };
        (code, ErrorBody::from(&e).message)
    })
}

/// Reads acks and keyframe requests, and ends the viewer when the daemon does, when it
/// falls 10 s behind, when it goes quiet, or when its socket fails.
async fn watch(
    viewer: &VideoViewer,
    stream: &mut SplitStream<Socket>,
    writer: &mut tokio::task::JoinHandle<()>,
    shutdown: &CancellationToken,
) -> Option<(u16, String)> {
    let mut check = tokio::time::interval(Duration::from_millis(500));
    let mut heard = tokio::time::Instant::now();
    loop {
        let message = tokio::select! {
            () = shutdown.cancelled() => return Some((close::GOING_AWAY, VideoEnd::ShuttingDown.reason().into())),
            () = viewer.ended().cancelled() => {
                let why = viewer.ended_because().unwrap_or(VideoEnd::Revoked);
                let code = match why {
                    VideoEnd::Revoked => close::REVOKED,
                    VideoEnd::GenerationChanged => close::GENERATION,
                    VideoEnd::SessionClosed => close::OPENER_CLOSED,
                    VideoEnd::CredentialEnded => close::CREDENTIAL_ENDED,
                    VideoEnd::ShuttingDown => close::GOING_AWAY,
                };
                return Some((code, why.reason().into()));
            }
            _ = &mut *writer => return None,
            _ = check.tick() => {
                if viewer.hub().oldest_unacked(viewer.id()).is_some_and(|age| age >= ACK_TIMEOUT) {
                    return Some((close::TOO_SLOW, "a frame stayed unacknowledged for 10 s".into()));
                }
                if heard.elapsed() >= PONG_TIMEOUT + PING_INTERVAL {
                    return Some((close::NO_PONG, "nothing from the viewer for a minute".into()));
                }
                continue;
            }
            m = stream.next() => m,
        };
        let text = match message {
            None => return None,
            Some(Err(WsError::Capacity(_))) => {
                return Some((close::TOO_BIG, format!("client messages are at most {MAX_CLIENT_MESSAGE} bytes")))
            }
            Some(Err(_)) => return None,
            Some(Ok(Message::Text(t))) => t,
            Some(Ok(Message::Binary(_))) => {
                return Some((close::UNSUPPORTED, "viewers send only text messages (ack, keyframe)".into()))
            }
            Some(Ok(Message::Close(_))) => return Some((close::NORMAL, "bye".into())),
            Some(Ok(_)) => {
                heard = tokio::time::Instant::now();
                continue;
            }
        };
        heard = tokio::time::Instant::now();
        if text.len() > MAX_CLIENT_MESSAGE {
            return Some((close::TOO_BIG, format!("client messages are at most {MAX_CLIENT_MESSAGE} bytes")));
        }
        match serde_json::from_str::<ViewerMessage>(&text) {
            Ok(ViewerMessage::Ack { generation, sequence }) => {
                if generation == viewer.generation() {
                    viewer.hub().ack(viewer.id(), sequence);
                }
            }
            Ok(ViewerMessage::Keyframe) => {
                viewer.hub().viewer_wants_keyframe();
            }
            Err(_) => {
                return Some((
                    close::POLICY,
                    "viewers send {\"type\":\"ack\",\"generation\":G,\"sequence\":S} or {\"type\":\"keyframe\"}".into(),
                ))
            }
        }
    }
}

/// Sends the viewer's frames as they are queued (each the hub's shared bytes), pings when
/// quiet, and the close when told.
async fn send_frames(
    mut sink: SplitSink<Socket, Message>,
    viewer: Arc<VideoViewer>,
    mut close_rx: mpsc::Receiver<Message>,
    progress: Arc<Progress>,
) {
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + PING_INTERVAL, PING_INTERVAL);
    loop {
        while let Some(frame) = viewer.hub().take(viewer.id()) {
            let message = Message::Binary(frame.message.clone());
            if websocket::send_with_progress(&mut sink, message, &progress, SEND_STALL).await.is_err() {
                return;
            }
        }
        progress.touch();
        tokio::select! {
            () = viewer.notify().notified() => {}
            _ = ping.tick() => {
                let ping = Message::Ping(bytes::Bytes::from_static(b"tether"));
                if websocket::send_with_progress(&mut sink, ping, &progress, SEND_STALL).await.is_err() {
                    return;
                }
            }
            m = close_rx.recv() => {
                if let Some(m) = m {
                    let _ = websocket::send_with_progress(&mut sink, m, &progress, SEND_STALL).await;
                }
                let _ = tokio::time::timeout(Duration::from_secs(1), futures_util::SinkExt::close(&mut sink)).await;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_waits_four_times_and_a_full_list_drops_the_busiest_addresss_oldest() {
        let p = Pending::default();
        let ip = |n: u8| IpAddr::from([10, 0, 0, n]);
        let flood: Vec<PendingSlot> = (0..PENDING_PER_ADDRESS).map(|_| p.enter(ip(1)).unwrap()).collect();
        assert!(p.enter(ip(1)).is_none(), "a fifth from one address is refused");
        let viewer = p.enter(ip(9)).unwrap();
        assert!(!viewer.dropped.is_cancelled(), "another address still waits");
        // Fill the list from three more addresses: then the busiest address's oldest goes.
        let others: Vec<PendingSlot> = (2..5)
            .flat_map(|n| (0..PENDING_PER_ADDRESS - 1).map(move |_| n))
            .map(|n| p.enter(ip(n)).unwrap())
            .collect();
        assert_eq!(p.len(), MAX_PENDING - 2);
        let _a = p.enter(ip(5)).unwrap();
        let _b = p.enter(ip(6)).unwrap();
        assert_eq!(p.len(), MAX_PENDING);
        let _c = p.enter(ip(7)).unwrap();
        assert!(flood[0].dropped.is_cancelled(), "the flood's oldest made room");
        assert!(!viewer.dropped.is_cancelled() && others.iter().all(|s| !s.dropped.is_cancelled()));
        drop(flood);
        assert_eq!(p.len(), MAX_PENDING - PENDING_PER_ADDRESS + 1, "dropped slots leave the list");
    }
}
