//! [`Backend`]s of the client side: the control socket (one connection, requests
//! multiplexed by id, so a `confirm` waiting minutes does not hold up a screenshot) and an
//! appliance's HTTPS API (`POST /api/rpc`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::UnixStream;
use tokio::sync::oneshot;

use super::https::{HttpsClient, HttpsClientError};
use super::ClientError;
use crate::protocol::ErrorCode;
use crate::sync::LockPlain;
use crate::tools::{Backend, ToolCode, ToolError};

type Waiting = Arc<Mutex<Option<HashMap<u64, oneshot::Sender<Value>>>>>;

/// One control-socket connection shared by concurrent calls.
#[derive(Debug)]
pub struct SocketBackend {
    /// Whole lines to the writer task (a call dropped mid-write never leaves half a line).
    lines: tokio::sync::mpsc::Sender<Vec<u8>>,
    /// Replies expected, by id; `None` once the connection is gone.
    waiting: Waiting,
    next_id: AtomicU64,
    task_token: Option<String>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for SocketBackend {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

async fn write_lines(mut writer: OwnedWriteHalf, mut lines: tokio::sync::mpsc::Receiver<Vec<u8>>) {
    while let Some(line) = lines.recv().await {
        if writer.write_all(&line).await.is_err() {
            return;
        }
    }
}

impl SocketBackend {
    /// Connects to the socket at `path`; every call carries `task_token` when given.
    pub async fn connect(path: &Path, task_token: Option<String>) -> Result<SocketBackend, ClientError> {
        let stream =
            UnixStream::connect(path).await.map_err(|source| ClientError::Connect { path: path.into(), source })?;
        let (read, writer) = stream.into_split();
        let waiting: Waiting = Arc::new(Mutex::new(Some(HashMap::new())));
        let w = waiting.clone();
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(read).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(reply) = serde_json::from_str::<Value>(&line) else { continue };
                // Events (none are asked for) and connection-level notices have no id of ours.
                let Some(id) = reply.get("id").and_then(Value::as_u64) else { continue };
                let tx = w.lock_plain().as_mut().and_then(|m| m.remove(&id));
                if let Some(tx) = tx {
                    let _ = tx.send(reply);
                }
            }
            // Gone: every waiting call learns it (its sender is dropped).
            w.lock_plain().take();
        });
        let (lines, rx) = tokio::sync::mpsc::channel(64);
        tokio::spawn(write_lines(writer, rx));
        Ok(SocketBackend { lines, waiting, next_id: AtomicU64::new(1), task_token, reader })
    }
}

fn gone() -> ToolError {
    ToolError::new(ToolCode::Unavailable, "the connection to the tether daemon closed (did `tether serve` stop?)")
}

/// A tether/1 reply as a result or a tool error.
fn reply_result(reply: &Value) -> Result<Value, ToolError> {
    if reply["ok"] == Value::Bool(true) {
        return Ok(reply.get("result").cloned().unwrap_or(Value::Null));
    }
    let e = &reply["error"];
    Err(ToolError::new(ToolCode::of(e["code"].as_str().unwrap_or("INTERNAL")), e["message"].as_str().unwrap_or(""))
        .with_effect(e.get("effect")))
}

impl Backend for SocketBackend {
    async fn call(&self, method: &str, mut params: Map<String, Value>) -> Result<Value, ToolError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        params.insert("id".into(), id.into());
        params.insert("method".into(), method.into());
        if let Some(t) = &self.task_token {
            params.insert("task_token".into(), t.clone().into());
        }
        let mut line = serde_json::to_vec(&Value::Object(params))
            .map_err(|e| ToolError::new(ErrorCode::Internal, e.to_string()))?;
        line.push(b'\n');
        let (tx, rx) = oneshot::channel();
        match self.waiting.lock_plain().as_mut() {
            Some(m) => m.insert(id, tx),
            None => return Err(gone()),
        };
        // A dropped call (its MCP request cancelled) leaves no entry behind.
        let _forget = Forget { waiting: &self.waiting, id };
        self.lines.send(line).await.map_err(|_| gone())?;
        let reply = rx.await.map_err(|_| gone())?;
        reply_result(&reply)
    }
}

struct Forget<'a> {
    waiting: &'a Waiting,
    id: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        if let Some(m) = self.waiting.lock_plain().as_mut() {
            m.remove(&self.id);
        }
    }
}

impl Backend for HttpsClient {
    async fn call(&self, method: &str, params: Map<String, Value>) -> Result<Value, ToolError> {
        HttpsClient::call(self, method, Value::Object(params)).await.map_err(|e| match e {
            HttpsClientError::Remote { code, message, effect, .. } => {
                ToolError::new(ToolCode::of(&code), message).with_effect(effect.as_ref())
            }
            e @ HttpsClientError::PinMismatch { .. } => ToolError::new(ToolCode::FingerprintMismatch, e.to_string()),
            other => ToolError::new(ToolCode::Unavailable, other.to_string()),
        })
    }
}
