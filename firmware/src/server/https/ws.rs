//! `/api/ws`: tether/1 over a WebSocket, for the console and third-party hosts
//! (reference 001). The caller authenticates before the upgrade, as for any `/api/` route;
//! each text message is one tether/1 request through the same dispatcher as the Unix
//! socket (same limits, codes and role table), and responses and events come back as
//! text messages. Closing the socket ends the lease of a task opened on it.

use std::time::Duration;

use futures_util::StreamExt;
use hyper::body::Incoming;
use hyper::Request;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_util::sync::CancellationToken;

use super::body::{self, ResponseBody};
use super::guard::Authenticated;
use crate::daemon::Daemon;
use crate::protocol::{
    ErrorBody, ErrorCode, RequestError, MAX_OUTPUT_BYTES, MAX_OUTPUT_MESSAGES, MAX_REQUEST_BYTES, STALL_TIMEOUT,
};
use crate::server::dispatch::{Dispatcher, Flow};
use crate::server::outbound::{Outbound, QueueLimits};
use crate::server::websocket::{self, close, PING_INTERVAL, PONG_TIMEOUT};

/// The largest message read at all; past [`MAX_REQUEST_BYTES`] a message is answered with
/// `REQUEST_TOO_LARGE` and the socket stays open, past this the socket is closed (1009).
const MAX_WS_MESSAGE: usize = 1 << 20;

/// Upgrades an authenticated request to the tether/1 WebSocket.
pub fn upgrade(
    daemon: &Daemon,
    shutdown: &CancellationToken,
    auth: Authenticated,
    mut req: Request<Incoming>,
) -> hyper::Response<ResponseBody> {
    let (response, on_upgrade) = match websocket::accept(&mut req) {
        Ok(r) => r,
        Err(e) => return body::error(e),
    };
    let (daemon, shutdown) = (daemon.clone(), shutdown.clone());
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => serve(daemon, auth, upgraded, shutdown).await,
            Err(e) => tracing::debug!(error = %e, "WebSocket upgrade failed"),
        }
    });
    response.map(|()| body::full(bytes::Bytes::new()))
}

/// Why the read loop ended: a close to send (code, reason), or the peer is gone.
type Ending = Option<(u16, String)>;

async fn serve(daemon: Daemon, auth: Authenticated, upgraded: hyper::upgrade::Upgraded, shutdown: CancellationToken) {
    let closed = CancellationToken::new();
    let limits = QueueLimits { max_messages: MAX_OUTPUT_MESSAGES, max_bytes: MAX_OUTPUT_BYTES, stall: STALL_TIMEOUT };
    let (out, queue) = Outbound::channel(limits, daemon.output_budget().clone(), closed.clone());
    let socket = websocket::open(upgraded, queue.progress(), MAX_WS_MESSAGE).await;
    let (sink, mut stream) = socket.split();
    let (control, control_rx) = mpsc::channel(4);
    let writer = tokio::spawn(websocket::write_queue(sink, queue, control_rx));
    let mut dispatcher = match Dispatcher::open(&daemon, auth.caller.clone(), &out).await {
        Ok(d) => d,
        Err(why) => {
            // The refusal (BUSY) is queued; then say why in the close.
            let _ = control.send(websocket::close_message(close::TRY_LATER, &why)).await;
            drop(out);
            let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
            return;
        }
    };
    dispatcher.set_task_token(auth.task_token.clone());
    let session_id = dispatcher.session().id().0;
    tracing::info!(session = session_id, caller = %auth.caller.principal.label(), role = %auth.caller.role, "WebSocket connected");
    let session = dispatcher.session().clone();
    let ending = tokio::select! {
        ending = read_requests(&mut dispatcher, &mut stream, &control, &closed, &shutdown) => ending,
        // The token or cookie it came with was revoked or rotated: its requests are
        // already cancelled by the daemon; the socket closes saying why.
        () = session.credential_ended() => {
            Some((close::CREDENTIAL_ENDED, "the token this connection logged in with was revoked or rotated: log in again".into()))
        }
    };
    if let Some((code, reason)) = &ending {
        tracing::info!(session = session_id, code, reason = %crate::logtext::capped(reason), "WebSocket closing");
        let _ = control.try_send(websocket::close_message(*code, reason));
    } else {
        tracing::info!(session = session_id, "WebSocket peer gone");
    }
    dispatcher.close().await;
    drop(out);
    drop(control);
    if tokio::time::timeout(Duration::from_secs(2), writer).await.is_err() {
        tracing::debug!(session = session_id, "WebSocket writer did not finish; dropped");
    }
    // After the peer's own close it is done; after ours, give it time to read why.
    if ending.as_ref().is_some_and(|(code, _)| *code != close::NORMAL) {
        websocket::linger(&mut stream).await;
    }
}

async fn read_requests(
    dispatcher: &mut Dispatcher,
    stream: &mut futures_util::stream::SplitStream<websocket::Socket>,
    control: &mpsc::Sender<Message>,
    closed: &CancellationToken,
    shutdown: &CancellationToken,
) -> Ending {
    let mut ping = tokio::time::interval_at(Instant::now() + PING_INTERVAL, PING_INTERVAL);
    let mut heard = Instant::now();
    loop {
        let message = tokio::select! {
            () = closed.cancelled() => return None,
            () = shutdown.cancelled() => return Some((close::GOING_AWAY, "the appliance is shutting down".into())),
            () = dispatcher.request_done() => continue,
            _ = ping.tick() => {
                if heard.elapsed() >= PONG_TIMEOUT {
                    return Some((close::NO_PONG, "no pong for 45 s".into()));
                }
                let _ = control.try_send(Message::Ping(bytes::Bytes::from_static(b"tether")));
                continue;
            }
            m = stream.next() => m,
        };
        let message = match message {
            None => return None,
            Some(Err(WsError::Capacity(_))) => {
                return Some((
                    close::TOO_BIG,
                    format!("a message over {MAX_WS_MESSAGE} bytes; requests are at most {MAX_REQUEST_BYTES}"),
                ))
            }
            Some(Err(e)) => {
                tracing::debug!(error = %e, "WebSocket read failed");
                return None;
            }
            Some(Ok(m)) => m,
        };
        heard = Instant::now();
        match message {
            Message::Text(text) => {
                if text.len() > MAX_REQUEST_BYTES {
                    dispatcher.refuse(RequestError::too_large(text.len())).await;
                } else if dispatcher.message(text.as_bytes(), closed).await == Flow::Closed {
                    return None;
                }
            }
            Message::Binary(_) => {
                let body = ErrorBody::new(
                    ErrorCode::InvalidRequest,
                    "binary messages are not tether/1: send each request as a JSON text message",
                );
                dispatcher.refuse(RequestError { id: None, error: body }).await;
            }
            Message::Close(_) => return Some((close::NORMAL, "bye".into())),
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
        }
    }
}
