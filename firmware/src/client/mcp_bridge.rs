//! `tether mcp --url`: a stdio MCP server on a laptop that forwards every JSON-RPC message
//! to an appliance's `/mcp` (Streamable HTTP) and writes back what comes (a JSON answer or
//! an SSE stream of messages: progress, then the result).
//!
//! It forwards messages, it does not interpret tools: the appliance's catalog is what the
//! client sees. Requests run concurrently (a `confirm` can wait minutes). The session id
//! from `initialize` is sent with every later message; when the appliance forgets the
//! session (404: restarted, or idle too long) the bridge initializes again with the
//! client's own `initialize` and retries once. When the appliance cannot be reached, each
//! request gets a JSON-RPC error at once instead of hanging. When stdin closes, the answers
//! still due are written and then the session is deleted. A kept-alive connection that the
//! appliance closed as it was reused (a restart, its idle rule) fails before any answer; the
//! message then goes again, once, on a fresh connection.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use super::https::{HttpsClient, HttpsClientError, KeptAlive};
use crate::sync::LockPlain;

use crate::server::mcp::MCP_PATH;
/// The JSON-RPC error code the bridge answers with when it cannot deliver a request.
pub const BRIDGE_ERROR: i64 = -32000;

/// What the bridge knows of its session.
#[derive(Debug, Default)]
struct SessionState {
    id: Option<String>,
    protocol_version: Option<String>,
    /// The client's `initialize` request and whether it sent `notifications/initialized`,
    /// replayed when the session is lost.
    initialize: Option<Value>,
}

/// The bridge.
#[derive(Clone)]
pub struct Bridge {
    client: HttpsClient,
    session: Arc<Mutex<SessionState>>,
    idle: Arc<Mutex<Vec<KeptAlive>>>,
    out: Arc<tokio::sync::Mutex<Box<dyn AsyncWrite + Send + Unpin>>>,
}

impl std::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge").field("client", &self.client).finish_non_exhaustive()
    }
}

/// What one POST brought back.
enum Delivery {
    /// Messages were written (or none were due: 202).
    Done,
    /// The appliance does not know the session any more.
    SessionLost,
}

impl Bridge {
    /// A bridge to `client`'s appliance writing to `out`.
    pub fn new(client: HttpsClient, out: Box<dyn AsyncWrite + Send + Unpin>) -> Bridge {
        Bridge { client, session: Arc::default(), idle: Arc::default(), out: Arc::new(tokio::sync::Mutex::new(out)) }
    }

    /// Forwards lines from `input` until it closes, then deletes the session.
    pub async fn run(&self, input: impl tokio::io::AsyncRead + Unpin) -> std::io::Result<()> {
        let mut lines = BufReader::new(input).lines();
        let mut running = tokio::task::JoinSet::new();
        while let Some(line) = lines.next_line().await? {
            if line.trim().is_empty() {
                continue;
            }
            let message: Value = match serde_json::from_str(&line) {
                Ok(v) => v,
                Err(e) => {
                    self.write(&json!({"jsonrpc": "2.0", "id": null,
                        "error": {"code": -32700, "message": format!("not JSON: {e}")}}))
                        .await;
                    continue;
                }
            };
            // `initialize` goes first and alone (later messages need its session id), and
            // notifications go in order (`initialized` before the requests after it); only
            // requests run concurrently.
            if message["method"] == "initialize" {
                self.session.lock_plain().initialize = Some(message.clone());
            }
            if message["method"] == "initialize" || message.get("id").is_none() {
                self.forward(message).await;
                continue;
            }
            let bridge = self.clone();
            running.spawn(async move { bridge.forward(message).await });
            // Reap finished forwards so the set does not grow without bound.
            while running.try_join_next().is_some() {}
        }
        // stdin closed: the client sends no more, but still reads the answers of what it
        // sent (`printf ... | tether mcp --url`); it may kill us sooner (MCP's shutdown).
        while running.join_next().await.is_some() {}
        self.delete_session().await;
        Ok(())
    }

    /// Delivers one message, re-initializing once if the session was lost; a request that
    /// cannot be delivered is answered with a JSON-RPC error.
    async fn forward(&self, message: Value) {
        let id = message.get("id").cloned().filter(|_| message.get("method").is_some());
        let mut result = self.post(&message).await;
        if matches!(result, Ok(Delivery::SessionLost)) && message["method"] != "initialize" {
            tracing::info!("the appliance lost the MCP session; initializing again");
            result = match self.reinitialize().await {
                Ok(()) => self.post(&message).await,
                Err(e) => Err(e),
            };
        }
        let failure = match result {
            Ok(Delivery::Done) => return,
            Ok(Delivery::SessionLost) => "the appliance does not know this MCP session".to_string(),
            Err(e) => e,
        };
        if let Some(id) = id {
            self.write(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": BRIDGE_ERROR,
                "message": format!("tether mcp --url: {failure}")}}))
                .await;
        } else {
            tracing::warn!(error = %failure, "could not forward a notification");
        }
    }

    /// Replays the client's `initialize` (answer not shown to the client, which already
    /// had one) and `notifications/initialized`.
    async fn reinitialize(&self) -> Result<(), String> {
        let init = {
            let mut s = self.session.lock_plain();
            s.id = None;
            s.initialize.clone()
        };
        let Some(mut init) = init else { return Err("no initialize to replay".into()) };
        init["id"] = json!("tether-bridge-reinitialize");
        let response = self.send(&init).await.map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("initialize again: HTTP {}", response.status()));
        }
        self.note_session(&response);
        // Read (and drop) the answer: it is the bridge's, not the client's.
        let _ = response.into_body().collect().await;
        let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        self.send(&done).await.map_err(|e| e.to_string())?;
        Ok(())
    }

    fn note_session(&self, response: &hyper::Response<hyper::body::Incoming>) {
        if let Some(id) = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()) {
            self.session.lock_plain().id = Some(id.to_string());
        }
    }

    /// POSTs `message` on a pooled connection.
    async fn send(&self, message: &Value) -> Result<hyper::Response<hyper::body::Incoming>, HttpsClientError> {
        let body = Bytes::from(serde_json::to_vec(message).unwrap_or_default());
        let (session, version) = {
            let s = self.session.lock_plain();
            (s.id.clone(), s.protocol_version.clone())
        };
        let mut headers = vec![("accept", "application/json, text/event-stream")];
        if let Some(s) = &session {
            headers.push(("mcp-session-id", s.as_str()));
        }
        if let Some(v) = &version {
            headers.push(("mcp-protocol-version", v.as_str()));
        }
        let (mut conn, pooled) = self.connection().await?;
        let response =
            match conn.send_with(Method::POST, MCP_PATH, body.clone(), Some("application/json"), &headers).await {
                // A kept-alive connection the appliance closed while it sat in the pool (a
                // restart, its idle rule) fails before any answer: the appliance never took the
                // request on it (it closes only connections with nothing in flight), so it goes
                // again, once, on a fresh connection. A fresh connection failing is an answer.
                Err(HttpsClientError::Http(e)) if pooled && closed_under_us(&e) => {
                    tracing::debug!(error = %e, "a pooled connection was closed; sending on a fresh one");
                    conn = self.client.connect().await?;
                    conn.send_with(Method::POST, MCP_PATH, body, Some("application/json"), &headers).await?
                }
                other => other?,
            };
        // Back to the pool once this answer's body has been read and the connection can
        // send again (a streamed answer holds it until its end; one dropped unread closes it).
        let idle = self.idle.clone();
        tokio::spawn(async move {
            if conn.wait_ready().await {
                idle.lock_plain().push(conn);
            }
        });
        Ok(response)
    }

    /// A connection, and whether it came from the pool (was used before).
    async fn connection(&self) -> Result<(KeptAlive, bool), HttpsClientError> {
        loop {
            let pooled = self.idle.lock_plain().pop();
            match pooled {
                Some(c) if c.is_open() => return Ok((c, true)),
                Some(_) => continue,
                None => return Ok((self.client.connect().await?, false)),
            }
        }
    }

    async fn post(&self, message: &Value) -> Result<Delivery, String> {
        let response = self.send(message).await.map_err(|e| e.to_string())?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND && self.session.lock_plain().id.is_some() {
            let _ = response.into_body().collect().await;
            return Ok(Delivery::SessionLost);
        }
        if message["method"] == "initialize" {
            self.note_session(&response);
        }
        if status == StatusCode::ACCEPTED {
            return Ok(Delivery::Done);
        }
        let sse = response
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !status.is_success() {
            let bytes = response.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let why = serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
                .unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(300).collect());
            return Err(format!("HTTP {status}: {why}"));
        }
        let mut body = response.into_body();
        if sse {
            let mut parser = SseParser::default();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| format!("the answer broke off: {e}"))?;
                if let Ok(data) = frame.into_data() {
                    for payload in parser.feed(&data) {
                        self.pass(&payload).await;
                    }
                }
            }
        } else {
            let bytes = body.collect().await.map_err(|e| format!("the answer broke off: {e}"))?.to_bytes();
            if !bytes.is_empty() {
                self.pass(&String::from_utf8_lossy(&bytes)).await;
            }
        }
        Ok(Delivery::Done)
    }

    /// Writes one JSON-RPC payload from the appliance (noting `initialize`'s version).
    async fn pass(&self, payload: &str) {
        let Ok(value) = serde_json::from_str::<Value>(payload) else {
            tracing::warn!("the appliance sent a message that is not JSON; dropped");
            return;
        };
        if let Some(v) = value["result"]["protocolVersion"].as_str() {
            self.session.lock_plain().protocol_version = Some(v.to_string());
        }
        self.write(&value).await;
    }

    async fn write(&self, value: &Value) {
        let mut line = serde_json::to_vec(value).unwrap_or_default();
        line.push(b'\n');
        let mut out = self.out.lock().await;
        let _ = out.write_all(&line).await;
        let _ = out.flush().await;
    }

    async fn delete_session(&self) {
        let Some(id) = self.session.lock_plain().id.clone() else { return };
        if let Ok((mut conn, _)) = self.connection().await {
            let headers = [("mcp-session-id", id.as_str())];
            let _ = conn.send_with(Method::DELETE, MCP_PATH, Bytes::new(), None, &headers).await;
        }
    }
}

/// Whether a request failed because its connection was closed (or reset) before any
/// answer: the appliance shut it (idle, restarted) as we reused it.
fn closed_under_us(e: &hyper::Error) -> bool {
    if e.is_canceled() || e.is_incomplete_message() {
        return true;
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            return matches!(io.kind(), UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe);
        }
        source = s.source();
    }
    false
}

/// Splits an SSE stream into `data` payloads (multi-line data joined with newlines).
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    data: Vec<String>,
}

impl SseParser {
    /// Feeds bytes; returns the payloads of the events they completed.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buf.extend_from_slice(bytes);
        let mut done = Vec::new();
        while let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
            let raw: Vec<u8> = self.buf.drain(..=i).collect();
            let line = String::from_utf8_lossy(&raw);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if !self.data.is_empty() {
                    done.push(self.data.join("\n"));
                    self.data.clear();
                }
            } else if let Some(rest) = line.strip_prefix("data:") {
                self.data.push(rest.strip_prefix(' ').unwrap_or(rest).to_string());
            }
            // `event:`, `id:`, `retry:` and comments (`:`) carry nothing the client needs.
        }
        done.retain(|d| !d.trim().is_empty());
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use crate::client::https::{Credentials, Target};
    use crate::server::tls::{self, Fingerprint, ServerNames};

    /// An MCP endpoint over TLS that answers one request per connection and then, like a
    /// server whose idle rule (or restart) closed a kept-alive connection just as the
    /// client reused it, drops the connection at the next request without an answer.
    async fn one_request_per_connection_server() -> (u16, Fingerprint, Arc<AtomicUsize>) {
        let dir = tempfile::tempdir().unwrap();
        let names = ServerNames::of_machine("localhost", &[], &[]);
        let material = tls::load_or_create(dir.path(), &names).unwrap();
        let pin = Fingerprint::of(&material.ca_der);
        let acceptor = tokio_rustls::TlsAcceptor::from(material.config.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let dropped = Arc::new(AtomicUsize::new(0));
        let dropped_count = dropped.clone();
        tokio::spawn(async move {
            let _dir = dir;
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let tls = acceptor.accept(tcp).await.unwrap();
                let served = Arc::new(AtomicUsize::new(0));
                let dropped = dropped_count.clone();
                let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let (served, dropped) = (served.clone(), dropped.clone());
                    async move {
                        if served.fetch_add(1, Ordering::SeqCst) > 0 {
                            // A service error ends the connection with no answer.
                            dropped.fetch_add(1, Ordering::SeqCst);
                            return Err("closed");
                        }
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let message: Value = serde_json::from_slice(&body).unwrap();
                        let Some(id) = message.get("id") else {
                            let mut r = hyper::Response::new(http_body_util::Full::new(Bytes::new()));
                            *r.status_mut() = StatusCode::ACCEPTED;
                            return Ok(r);
                        };
                        let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": "2025-06-18"}});
                        let mut r = hyper::Response::new(http_body_util::Full::new(Bytes::from(answer.to_string())));
                        r.headers_mut().insert("content-type", "application/json".parse().unwrap());
                        r.headers_mut().insert("mcp-session-id", "s1".parse().unwrap());
                        Ok(r)
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service),
                );
            }
        });
        (port, pin, dropped)
    }

    #[tokio::test]
    async fn a_pooled_connection_closed_by_the_appliance_is_retried_on_a_fresh_one() {
        let (port, pin, dropped) = one_request_per_connection_server().await;
        let (target, _, _) = Target::parse(&format!("https://localhost:{port}")).unwrap();
        let client = HttpsClient::new(target, pin, Credentials::default()).unwrap();
        let (out, mut read_out) = tokio::io::duplex(1 << 16);
        let bridge = Bridge::new(client, Box::new(out));
        let lines = [
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "status"}}),
        ];
        let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
        bridge.run(input.as_bytes()).await.unwrap();
        drop(bridge);
        let mut written = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut read_out, &mut written).await.unwrap();
        let replies: Vec<Value> = written.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(replies.len(), 2, "{written}");
        for (reply, id) in replies.iter().zip([1, 2]) {
            assert_eq!(reply["id"], id);
            assert!(reply.get("error").is_none(), "delivered despite the closed connection: {reply}");
        }
        assert!(dropped.load(Ordering::SeqCst) >= 2, "the reused connections were really closed");
    }

    #[test]
    fn sse_events_split_across_chunks_come_out_whole() {
        let mut p = SseParser::default();
        assert!(p.feed(b": keep-alive\n\nid: 1\nevent: message\ndata: {\"a\"").is_empty());
        assert_eq!(p.feed(b":1}\n\ndata: x\r\ndata: y\r\n\r\n"), vec!["{\"a\":1}".to_string(), "x\ny".to_string()]);
        assert!(p.feed(b"data:\n\n").is_empty(), "an empty event (a priming one) is not a message");
    }
}
