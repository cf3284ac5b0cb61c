//! The one dispatcher: every transport hands (caller, request) here and gets answers and
//! events back. Only this module opens daemon sessions and registers requests; the
//! transports turn their wire into a [`Request`] and the answers into their wire.
//!
//! Three entries, by how a transport carries requests:
//! - [`Dispatcher`]: a connection with many requests (the Unix socket, `/api/ws`): its
//!   session lives as long as the connection, at most [`connection::MAX_IN_FLIGHT`] requests run at
//!   once, and closing it ends what still runs.
//! - [`call`]: one request, one answer (`/api/*` routes, `/api/rpc`, MCP over HTTPS): a
//!   session of its own, counted against the daemon's session limit like a connection,
//!   so the daemon's bound on sessions bounds these requests in flight too.
//! - [`stream`]: one request whose answer streams (a task's lease, a followed journal):
//!   JSON lines until the task ends or the reader goes; the reader's going ends the
//!   session, and with it the lease.
//!
//! Every entry ends in [`Daemon::handle_request`], where the credential's role and the task
//! token are checked once against the role table; a request that ends early (its reader
//! gone, its future dropped) leaves what it started on the phone to the daemon's play,
//! which releases held input and journals the step.

mod connection;
mod stream;

use serde_json::{Map, Value};

pub use connection::{Dispatcher, Flow};
pub use stream::stream;

use crate::daemon::{Caller, Daemon};
use crate::protocol::{parse_request, Call, ErrorBody, Request, RequestId};

/// The tether/1 request for `method` with `params`, as the socket would have parsed it
/// (so malformed params get the same codes and messages on every transport).
pub fn request(method: &str, mut params: Map<String, Value>, task_token: Option<&str>) -> Result<Request, ErrorBody> {
    params.insert("id".into(), 1.into());
    params.insert("method".into(), method.into());
    if let Some(t) = task_token {
        params.insert("task_token".into(), t.into());
    }
    // A map of JSON values always serializes.
    let bytes = serde_json::to_vec(&Value::Object(params)).unwrap_or_default();
    parse_request(&bytes).map_err(|e| e.error)
}

/// The request for a call a transport built itself, typed, with nothing to parse: for
/// parameters that are bytes on the transport's wire (`POST /api/update`'s body), where a
/// detour through JSON and base64 would cost more than the work. It meets the same role
/// table and task-token check as every other request in [`Daemon::handle_request`].
pub fn typed_request(call: Call, task_token: Option<&str>) -> Request {
    Request { id: RequestId(1), task_token: task_token.map(str::to_owned), call }
}

/// Runs one request for `caller` on a session of its own and answers it.
pub async fn call(daemon: &Daemon, caller: &Caller, request: &Request) -> Result<Value, ErrorBody> {
    let session = daemon.try_open_session(caller.clone()).map_err(|e| ErrorBody::from(&e))?;
    // Lives for this request only: a video ticket it issues is bound to the caller.
    session.set_per_request();
    let slot = session.begin_request(request.id).map_err(|e| ErrorBody::from(&e))?;
    daemon.handle_request(&session, request, &slot).await.map_err(|e| ErrorBody::from(&e))
}
