//! The remote side: a small tether/1 client over the control socket, used by the CLI.
#![forbid(unsafe_code)]

pub mod backends;
pub mod https;
pub mod mcp_bridge;

use std::io;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

/// Errors talking to the daemon.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket could not be reached.
    #[error("cannot connect to the tether daemon at {}: is `tether serve` running?", .path.display())]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The connection failed mid-conversation.
    #[error("connection to the daemon failed")]
    Io(#[from] io::Error),
    /// The daemon closed the connection before answering.
    #[error("the daemon closed the connection before answering")]
    Closed,
    /// The daemon sent something that is not tether/1.
    #[error("unexpected reply from the daemon: {0}")]
    Protocol(String),
    /// The daemon answered with an error.
    #[error("{code}: {message}")]
    Remote {
        /// The stable error code.
        code: String,
        /// The daemon's explanation.
        message: String,
    },
}

/// A connection to the control socket.
#[derive(Debug)]
pub struct ControlClient {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    next_id: u64,
}

impl ControlClient {
    /// Connects to the socket at `path`.
    pub async fn connect(path: &Path) -> Result<ControlClient, ClientError> {
        let stream =
            UnixStream::connect(path).await.map_err(|source| ClientError::Connect { path: path.into(), source })?;
        let (read, writer) = stream.into_split();
        Ok(ControlClient { reader: BufReader::new(read), writer, next_id: 1 })
    }

    /// Calls `method` with `params` (an object or null) and returns its result.
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value, ClientError> {
        self.call_streaming(method, params, |_| {}).await
    }

    /// Like [`ControlClient::call`], handing every event that arrives before the reply to
    /// `on_event` (e.g. `task_events` with `follow`).
    ///
    /// # Cancel safety
    /// Not cancel-safe: a line half read when the future is dropped is lost, so drop the
    /// client with it (as `tether task run` does with its follower connection).
    pub async fn call_streaming(
        &mut self,
        method: &str,
        params: Value,
        mut on_event: impl FnMut(&Value),
    ) -> Result<Value, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let mut request = match params {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        request.insert("id".into(), json!(id));
        request.insert("method".into(), json!(method));
        let mut line = serde_json::to_vec(&request).map_err(|e| ClientError::Protocol(e.to_string()))?;
        line.push(b'\n');
        self.writer.write_all(&line).await?;
        loop {
            let mut buf = String::new();
            if self.reader.read_line(&mut buf).await? == 0 {
                return Err(ClientError::Closed);
            }
            let reply: Value = serde_json::from_str(&buf).map_err(|e| ClientError::Protocol(e.to_string()))?;
            if reply.get("event").is_some() {
                on_event(&reply);
                continue;
            }
            match reply.get("id") {
                Some(v) if v.as_u64() == Some(id) => {}
                // A connection-level refusal (no role) carries a null id.
                Some(Value::Null) => {}
                _ => continue,
            }
            return if reply["ok"] == json!(true) {
                Ok(reply.get("result").cloned().unwrap_or(Value::Null))
            } else {
                let error = &reply["error"];
                Err(ClientError::Remote {
                    code: error["code"].as_str().unwrap_or("UNKNOWN").to_string(),
                    message: error["message"].as_str().unwrap_or("").to_string(),
                })
            };
        }
    }
}
