//! The tool runner's backend inside the daemon's process (MCP over HTTPS): each tool's
//! call goes through the one dispatcher ([`super::dispatch::call`]) exactly as if it had
//! come over the socket, so the role table, task tokens and limits apply unchanged.

use serde_json::{Map, Value};

use super::dispatch;
use crate::daemon::{Caller, Daemon};
use crate::protocol::ErrorBody;
use crate::tools::{Backend, ToolError};

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
        let request = dispatch::request(method, params, self.task_token.as_deref()).map_err(tool_error)?;
        dispatch::call(&self.daemon, &self.caller, &request).await.map_err(tool_error)
    }
}

/// The daemon's error as a tool's.
pub fn tool_error(e: ErrorBody) -> ToolError {
    ToolError::new(e.code, e.message).with_effect(e.effect.as_deref())
}
