//! WebSocket plumbing shared by `/api/ws` and `/api/video`: the RFC 6455 upgrade over
//! hyper, an I/O wrapper that counts the peer's progress, the writer of queued messages,
//! and the close codes (each says why a socket was closed).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::stream::SplitSink;
use futures_util::SinkExt;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_VERSION, UPGRADE};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::outbound::{OutboundQueue, Progress};
use crate::protocol::{ErrorBody, ErrorCode};

/// Close codes: the standard ones and ours (4000–4999), documented in `docs/api.md`.
pub mod close {
    /// The client closed, or a normal end.
    pub const NORMAL: u16 = 1000;
    /// The appliance is shutting down.
    pub const GOING_AWAY: u16 = 1001;
    /// A message of a kind the endpoint does not take (binary on `/api/video`).
    pub const UNSUPPORTED: u16 = 1003;
    /// Authentication failed (ticket missing, late, used, expired; foreign Origin).
    pub const POLICY: u16 = 1008;
    /// A message over the endpoint's limit.
    pub const TOO_BIG: u16 = 1009;
    /// Full (viewers, connections): try again later.
    pub const TRY_LATER: u16 = 1013;
    /// No pong (or anything) from the peer for the keep-alive timeout.
    pub const NO_PONG: u16 = 4001;
    /// `video_revoke`.
    pub const REVOKED: u16 = 4002;
    /// The video generation changed: `video_open` again.
    pub const GENERATION: u16 = 4003;
    /// A video frame stayed unacknowledged for 10 s.
    pub const TOO_SLOW: u16 = 4004;
    /// The connection that opened the video closed.
    pub const OPENER_CLOSED: u16 = 4005;
    /// The token (or cookie) the socket authenticated with was revoked or rotated: log in
    /// again.
    pub const CREDENTIAL_ENDED: u16 = 4006;
}

/// How often a quiet socket is pinged.
pub const PING_INTERVAL: Duration = Duration::from_secs(20);
/// A socket the peer has said nothing on (not even a pong) for this long is closed.
pub const PONG_TIMEOUT: Duration = Duration::from_secs(45);

/// The upgraded socket as tungstenite sees it.
pub type Socket = WebSocketStream<Counted<TokioIo<hyper::upgrade::Upgraded>>>;

/// Checks an RFC 6455 upgrade request and answers it with `101 Switching Protocols`; the
/// socket is ready once the returned upgrade resolves.
pub fn accept(req: &mut Request<Incoming>) -> Result<(Response<()>, hyper::upgrade::OnUpgrade), ErrorBody> {
    let headers = req.headers();
    let has = |name: hyper::header::HeaderName, token: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    let refuse = |m: &str| Err(ErrorBody::new(ErrorCode::InvalidRequest, m));
    if req.method() != hyper::Method::GET || !has(CONNECTION, "upgrade") || !has(UPGRADE, "websocket") {
        return refuse("this path is a WebSocket: send a GET with `Connection: Upgrade` and `Upgrade: websocket`");
    }
    if headers.get(SEC_WEBSOCKET_VERSION).and_then(|v| v.to_str().ok()) != Some("13") {
        return refuse("only WebSocket version 13 (RFC 6455) is spoken here");
    }
    let Some(key) = headers.get(SEC_WEBSOCKET_KEY) else {
        return refuse("the WebSocket upgrade has no Sec-WebSocket-Key");
    };
    let accept = derive_accept_key(key.as_bytes());
    let on_upgrade = hyper::upgrade::on(req);
    let mut response = Response::new(());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = response.headers_mut();
    h.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(UPGRADE, HeaderValue::from_static("websocket"));
    let accept = HeaderValue::from_str(&accept).map_err(|_| ErrorBody::new(ErrorCode::Internal, "accept key"))?;
    h.insert(SEC_WEBSOCKET_ACCEPT, accept);
    Ok((response, on_upgrade))
}

/// Wraps the upgraded connection as a WebSocket whose writes count as progress.
pub async fn open(upgraded: hyper::upgrade::Upgraded, progress: Arc<Progress>, max_message: usize) -> Socket {
    let config = WebSocketConfig::default().max_message_size(Some(max_message)).max_frame_size(Some(max_message));
    WebSocketStream::from_raw_socket(Counted { inner: TokioIo::new(upgraded), progress }, Role::Server, Some(config))
        .await
}

/// A close message with `code` and a reason for people (cut to the 123 bytes a close
/// frame has room for).
pub fn close_message(code: u16, reason: &str) -> Message {
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let reason = reason.get(..end).unwrap_or_default().to_string();
    Message::Close(Some(CloseFrame { code: CloseCode::from(code), reason: reason.into() }))
}

/// I/O that records every byte written as the peer's progress (the stall rule is about
/// progress, not speed: see [`super::outbound`]).
#[derive(Debug)]
pub struct Counted<I> {
    inner: I,
    progress: Arc<Progress>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Counted<I> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Counted<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.progress.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// After our close frame: holds the socket until the peer closes too, or for a second.
/// Dropping it at once while the peer is still sending (an oversized message) would reset
/// the connection before the peer read why it was closed.
pub async fn linger(stream: &mut futures_util::stream::SplitStream<Socket>) {
    use futures_util::StreamExt;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    loop {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(Message::Close(_)))) | Err(_) => return,
            Ok(Some(Ok(_))) => {}
            Ok(None) | Ok(Some(Err(_))) => {
                // The stream cannot be read any more; keep the connection a moment anyway.
                tokio::time::sleep_until(deadline).await;
                return;
            }
        }
    }
}

/// Sends one message, giving up once the peer has taken nothing for `stall`.
pub async fn send_with_progress(
    sink: &mut SplitSink<Socket, Message>,
    message: Message,
    progress: &Progress,
    stall: Duration,
) -> Result<(), ()> {
    let send = sink.send(message);
    tokio::pin!(send);
    loop {
        tokio::select! {
            r = &mut send => return r.map_err(|e| tracing::debug!(error = %e, "WebSocket send failed")),
            () = tokio::time::sleep(stall) => {
                if progress.since() >= stall {
                    tracing::warn!(timeout_s = stall.as_secs(), "WebSocket peer read nothing for the stall timeout");
                    return Err(());
                }
            }
        }
    }
}

/// Drains a connection's queue into the socket as text messages, with control messages
/// (pings, the close) sent first. Ends after a close, when the queue ends, or when the
/// peer stalls (the queue's closing token fires).
pub async fn write_queue(
    mut sink: SplitSink<Socket, Message>,
    mut queue: OutboundQueue,
    mut control: mpsc::Receiver<Message>,
) {
    let (progress, stall) = (queue.progress(), queue.stall());
    loop {
        let (message, held) = tokio::select! {
            biased;
            c = control.recv() => match c {
                Some(m) => (m, None),
                None => break,
            },
            q = queue.next() => match q {
                Some(mut q) => {
                    let mut line = q.take_line();
                    if line.last() == Some(&b'\n') {
                        line.pop();
                    }
                    // Our own serializer wrote it: valid UTF-8.
                    match String::from_utf8(line) {
                        Ok(text) => (Message::text(text), Some(q)),
                        Err(_) => continue,
                    }
                }
                None => break,
            },
        };
        let closing = matches!(message, Message::Close(_));
        if send_with_progress(&mut sink, message, &progress, stall).await.is_err() {
            queue.closed().cancel();
            return;
        }
        drop(held);
        if closing {
            break;
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), sink.close()).await;
}
