//! Callers inside the daemon's process (HTTP routes, MCP): each request runs on a session
//! of its own, exactly as if it had come over the socket, so the role table, task tokens
//! and limits apply unchanged.

use serde_json::{Map, Value};

use crate::daemon::{Caller, Daemon};
use crate::protocol::{parse_request, ErrorBody, Request as WireRequest};
use crate::tools::{Backend, ToolError};

/// The tether/1 request for `method` with `params`, as the socket would have parsed it
/// (so malformed params get the same codes and messages).
pub fn wire_request(
    method: &str,
    mut params: Map<String, Value>,
    task_token: Option<&str>,
) -> Result<WireRequest, ErrorBody> {
    params.insert("id".into(), 1.into());
    params.insert("method".into(), method.into());
    if let Some(t) = task_token {
        params.insert("task_token".into(), t.into());
    }
    let bytes = serde_json::to_vec(&Value::Object(params)).unwrap_or_default();
    parse_request(&bytes).map_err(|e| e.error)
}

/// Runs one request for `caller` on a session of its own.
pub async fn call(daemon: &Daemon, caller: &Caller, request: &WireRequest) -> Result<Value, ErrorBody> {
    let session = daemon.try_open_session(caller.clone()).map_err(|e| ErrorBody::from(&e))?;
    // Lives for this request only: a video ticket it issues is bound to the caller.
    session.set_per_request();
    let slot = session.begin_request(request.id).map_err(|e| ErrorBody::from(&e))?;
    daemon.handle_request(&session, request, &slot).await.map_err(|e| ErrorBody::from(&e))
}

/// A [`Backend`] for one caller of this daemon (MCP over HTTPS).
#[derive(Debug, Clone)]
pub struct InProcess {
    /// The daemon.
    pub daemon: Daemon,
    /// Who calls.
    pub caller: Caller,
    /// The task token sent with every call (an agent's).
    pub task_token: Option<String>,
}

impl Backend for InProcess {
    async fn call(&self, method: &str, params: Map<String, Value>) -> Result<Value, ToolError> {
        let request = wire_request(method, params, self.task_token.as_deref()).map_err(tool_error)?;
        call(&self.daemon, &self.caller, &request).await.map_err(tool_error)
    }
}

/// The daemon's error as a tool's.
pub fn tool_error(e: ErrorBody) -> ToolError {
    ToolError::new(e.code.as_str(), e.message).with_effect(e.effect.as_deref())
}
