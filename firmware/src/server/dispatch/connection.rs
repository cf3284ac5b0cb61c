//! The request loop of one connection: parse each message, bound the requests in flight,
//! run each on its own task, answer on the connection's bounded queue, forward the task
//! events the session follows, and cancel what is left when the connection goes. The Unix
//! socket feeds it lines; `/api/ws` feeds it text messages.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::daemon::{Caller, Daemon, Session, SessionMessage};
use crate::protocol::{parse_request, ErrorBody, Outgoing, RequestError, Response};
use crate::server::outbound::Outbound;

/// Requests one connection may have in flight; reading pauses beyond this, which pushes
/// back on a client that sends faster than it reads.
pub const MAX_IN_FLIGHT: usize = 64;

/// How long requests get to wind down after their connection closed (withdrawing a
/// question, ending a followed stream) before they are aborted.
const WIND_DOWN: Duration = Duration::from_secs(1);

/// Whether the connection goes on after a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Read the next message.
    Continue,
    /// The connection closed while waiting for room to run the request.
    Closed,
}

/// One connection's session and its requests.
#[derive(Debug)]
pub struct Dispatcher {
    daemon: Daemon,
    session: Arc<Session>,
    out: Outbound,
    in_flight: Arc<Semaphore>,
    requests: JoinSet<()>,
    forwarder: Option<JoinHandle<()>>,
    task_token: Option<String>,
}

impl Dispatcher {
    /// Opens a session for `caller` (refused with `BUSY` beyond its share or the daemon's
    /// limit: the refusal is queued on `out` and its message returned, for a transport
    /// that can also say it in its close) and starts forwarding the task events it follows
    /// onto `out`, with the responses.
    pub async fn open(daemon: &Daemon, caller: Caller, out: &Outbound) -> Result<Dispatcher, String> {
        let session = match daemon.try_open_session(caller) {
            Ok(session) => Arc::new(session),
            Err(e) => {
                tracing::debug!("refused a connection: {e}");
                let body = ErrorBody::from(&e);
                let message = body.message.clone();
                let _ = out.push(Outgoing::Response(Response::err(None, body)).to_line()).await;
                return Err(message);
            }
        };
        let forwarder = session.take_events().map(|mut events| {
            let out = out.clone();
            tokio::spawn(async move {
                while let Some(message) = events.recv().await {
                    match message {
                        SessionMessage::Event(event) => {
                            if out.push(Outgoing::Event(event).to_line()).await.is_err() {
                                break;
                            }
                        }
                        SessionMessage::Flush(done) => {
                            let _ = done.send(());
                        }
                        SessionMessage::Streaming => {}
                    }
                }
            })
        });
        Ok(Dispatcher {
            daemon: daemon.clone(),
            session,
            out: out.clone(),
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            requests: JoinSet::new(),
            forwarder,
            task_token: None,
        })
    }

    /// A task token the connection presented when it opened (a header), used by every
    /// request that carries none of its own.
    pub fn set_task_token(&mut self, token: Option<String>) {
        self.task_token = token;
    }

    /// The connection's session.
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// Handles one message of the peer: a malformed one is answered with its error at
    /// once; a request is registered (in arrival order, so the second of two with one id
    /// is the one refused) and runs on its own task once fewer than [`MAX_IN_FLIGHT`] run.
    /// Waiting for that room stops when `closed` fires.
    pub async fn message(&mut self, bytes: &[u8], closed: &CancellationToken) -> Flow {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Flow::Continue;
        }
        let mut request = match parse_request(bytes) {
            Ok(request) => request,
            Err(err) => {
                self.refuse(err).await;
                return Flow::Continue;
            }
        };
        if request.task_token.is_none() {
            request.task_token.clone_from(&self.task_token);
        }
        let permit = tokio::select! {
            () = closed.cancelled() => return Flow::Closed,
            p = self.in_flight.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return Flow::Closed,
            },
        };
        let slot = match self.session.begin_request(request.id) {
            Ok(slot) => slot,
            Err(e) => {
                let response = Response::err(Some(request.id), ErrorBody::from(&e));
                let _ = self.out.push(Outgoing::Response(response).to_line()).await;
                return Flow::Continue;
            }
        };
        let (daemon, session, out) = (self.daemon.clone(), self.session.clone(), self.out.clone());
        self.requests.spawn(async move {
            let response = match daemon.handle_request(&session, &request, &slot).await {
                Ok(result) => Response::ok(request.id, result),
                Err(e) => {
                    tracing::debug!(id = request.id.0, error = %e, "request failed");
                    Response::err(Some(request.id), ErrorBody::from(&e))
                }
            };
            drop(slot);
            let _ = out.push(Outgoing::Response(response).to_line()).await;
            drop(permit);
        });
        Flow::Continue
    }

    /// Answers a message the transport refused before parsing (too large).
    pub async fn refuse(&self, err: RequestError) {
        let _ = self.out.push(Outgoing::Response(Response::err(err.id, err.error)).to_line()).await;
    }

    /// Resolves when one request has finished (never, while none runs): a transport
    /// selects on it beside reading, so finished requests are reaped as they go.
    pub async fn request_done(&mut self) {
        if self.requests.join_next().await.is_none() {
            std::future::pending::<()>().await;
        }
    }

    /// Resolves when every request started has finished.
    pub async fn all_done(&mut self) {
        while self.requests.join_next().await.is_some() {}
    }

    /// Aborts every request at once (the peer is gone and its queue with it).
    pub fn abort(&mut self) {
        self.requests.abort_all();
    }

    /// Ends the connection's session: requests see its cancellation and get a moment to
    /// wind down (a question is withdrawn, a lease lost), then what is left is aborted.
    /// Returns once nothing of the connection runs.
    pub async fn close(mut self) {
        self.session.close();
        let _ = tokio::time::timeout(WIND_DOWN, self.all_done()).await;
        self.requests.abort_all();
        self.all_done().await;
        if let Some(f) = self.forwarder.take() {
            f.abort();
        }
    }
}
