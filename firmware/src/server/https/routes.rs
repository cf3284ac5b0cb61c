//! The routes: each turns an HTTP request into tether/1 calls on the daemon (the same
//! parameters, validation and error codes as the socket) and the answer into HTTP.
//!
//! | route | call |
//! |---|---|
//! | `GET /api/status` | `status` |
//! | `GET /metrics` | `metrics`, as Prometheus text |
//! | `GET /api/screenshot?max_edge=&after_frame_id=&timeout_ms=&format=png\|json` | `screenshot` |
//! | `POST /api/action`, `POST /api/calibrate` | `action`, `calibrate` (body: the params) |
//! | `POST /api/tasks` | `task_open`; the streamed answer is the lease |
//! | `GET /api/tasks?limit=` | `task_list` |
//! | `GET /api/tasks/{id}/events?after=&follow=1` | `task_events` (streamed with `follow`) |
//! | `GET /api/tasks/{id}/steps/{seq}/thumbnail` | `task_thumbnail`, as PNG |
//! | `GET /api/tasks/{id}/report`, `.../junit.xml`, `.../final.png` | `task_report`'s parts ([`super::report`]) |
//! | `GET /api/tasks/{id}/recording.mp4` (with `Range`) | `task_recording` |
//! | `POST /api/tasks/{id}/{pause\|resume\|takeover\|handback\|stop\|approve\|reject}` | `task_control` |
//! | `POST /api/tasks/{id}/note`, `.../finish` | `task_note`, `task_finish` |
//! | `POST /api/rpc` | any one tether/1 request (body: the request object) |
//! | `GET /api/update` | `update_status` |
//! | `POST /api/update?force=1&reboot=0` (body: the bundle) | `update_upload` pieces, then `update_install` ([`super::update`]) |
//! | `GET /api/ws` | WebSocket: tether/1 text messages ([`super::ws`]) |
//! | `GET /api/video` | WebSocket: live H.264 after a `video_open` ticket ([`super::video`]) |
//! | `GET /ca.crt`, `GET /ca.mobileconfig` | the CA, no auth |
//! | `POST /api/pair`, `POST /login`, `POST /logout`, `GET /api/session` | sessions |
//! | `GET /`, `/pair`, `/live`, `/tasks`, `/access`, `/device`, the console's files | the web console ([`super::console`]), no auth |

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, LOCATION, SET_COOKIE};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Map, Value};

use super::body::{self, ResponseBody};
use super::guard::{self, Auth, Authenticated};
use super::origin::{Entry, OwnOrigin};
pub use super::shared::{Peer, Shared};
use crate::daemon::SESSION_LIFETIME;
use crate::logtext::capped;
use crate::protocol::{parse_request, parse_value, ErrorBody, ErrorCode, Request as WireRequest};
use crate::server::dispatch;

/// The largest body of an unauthenticated request (`/login`, `/api/pair`).
const MAX_PUBLIC_BODY: usize = 4096;

pub(super) type Answer = Response<ResponseBody>;

/// MCP's path.
const MCP_PATH: &str = crate::server::mcp::MCP_PATH;

/// Prometheus' path (a view token, or any login: `metrics`).
const METRICS_PATH: &str = "/metrics";

/// Handles one request; never fails (every refusal is an answer).
pub async fn handle(shared: Arc<Shared>, peer: Peer, req: Request<Incoming>) -> Answer {
    tracing::debug!(peer = %peer.addr, path = %capped(req.uri().path()), "request");
    let raw_host = match guard::host_of(req.uri(), req.headers()) {
        Ok(h) => h,
        Err(e) => {
            if !shared.noisy.failed() {
                tracing::warn!(peer = %peer.addr, "refused a request with an ambiguous Host: {}", e.message);
            }
            return body::error(e);
        }
    };
    let Some(host) = shared.hosts.allows(&raw_host) else {
        if !shared.noisy.failed() {
            tracing::warn!(peer = %peer.addr, host = %capped(&raw_host), "refused a request for a foreign Host");
        }
        return body::refuse(
            ErrorCode::PermissionDenied,
            "this appliance does not answer to that host name; use its own name or address",
        );
    };
    if !peer.tls && !peer.addr.ip().is_loopback() {
        return redirect_to_https(&shared, &host, &req);
    }
    let scheme = if peer.tls { "https" } else { "http" };
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let own = OwnOrigin::new(scheme, &raw_host);
    match (&method, path.as_str()) {
        (&Method::GET, "/ca.crt") => return text(StatusCode::OK, "application/x-pem-file", shared.ca_pem.clone()),
        (&Method::GET, "/ca.mobileconfig") => {
            return text(StatusCode::OK, "application/x-apple-aspen-config", shared.mobileconfig.clone())
        }
        (&Method::POST, "/login" | "/api/pair" | "/logout") => {
            // Unauthenticated forms that set or clear the session cookie: from a browser,
            // only our own pages (login CSRF, forced logout).
            let cookie = guard::cookie_value(req.headers(), &guard::cookie_name(shared.port)).is_some();
            if let Err(e) = own.check(req.headers(), Entry::Form, cookie) {
                if !shared.noisy.failed() {
                    tracing::warn!(peer = %peer.addr, path = %capped(&path), "refused by the Origin policy: {}", e.message);
                }
                return body::error(e);
            }
            return match path.as_str() {
                "/login" => login(&shared, &peer, scheme, req).await,
                "/api/pair" => pair(&shared, &peer, scheme, req).await,
                _ => logout(&shared),
            };
        }
        (&Method::GET, "/api/session") => return session_info(&shared, &peer, &req),
        // The ticket in its first message authenticates it.
        (&Method::GET, crate::daemon::VIDEO_PATH) => {
            if let Err(e) = own.check(req.headers(), Entry::Stream, false) {
                return body::error(e);
            }
            return super::video::upgrade(&shared.daemon, &shared.shutdown, &shared.video_pending, peer.addr.ip(), req);
        }
        _ => {}
    }
    if (method == Method::GET || method == Method::HEAD) && super::console::serves(&path) {
        return super::console::answer(&method, &path, req.headers(), &raw_host);
    }
    if !path.starts_with("/api/") && path != MCP_PATH && path != METRICS_PATH {
        return body::refuse(ErrorCode::NotFound, format!("no page at {path}; the console is at /"));
    }
    let auth = match guard::authenticate(&shared.daemon, &shared.limiter, req.headers(), shared.port, peer.addr) {
        Ok(a) => a,
        Err(e) => return body::error(e),
    };
    let entry = match (&method, path.as_str()) {
        (_, MCP_PATH) | (&Method::GET, "/api/ws") => Entry::Stream,
        (&Method::GET | &Method::HEAD | &Method::OPTIONS, _) => Entry::Read,
        _ => Entry::Write,
    };
    if let Err(e) = own.check(req.headers(), entry, auth.how == Auth::Cookie) {
        if !shared.noisy.failed() {
            tracing::warn!(peer = %peer.addr, path = %capped(&path), "refused by the Origin policy: {}", e.message);
        }
        return body::error(e);
    }
    peer.conn.proven(&holder_label(&auth));
    if method == Method::GET && path == "/api/ws" {
        return super::ws::upgrade(&shared.daemon, &shared.shutdown, auth, req);
    }
    if path == MCP_PATH {
        let stream = peer.conn.stream_guard();
        return super::mcp::handle(&shared.mcp, auth, req, stream).await;
    }
    route(&shared, &peer, auth, req).await.unwrap_or_else(body::error)
}

/// Whose connection this is, for the connection table: the principal, or the address of a
/// caller with no name of its own (a task token alone).
fn holder_label(auth: &Authenticated) -> String {
    match crate::daemon::Holder::of(&auth.caller) {
        crate::daemon::Holder::Principal(p) => p.label(),
        crate::daemon::Holder::Address(ip) => format!("addr:{ip}"),
        crate::daemon::Holder::InProcess => "in-process".into(),
    }
}

async fn route(shared: &Shared, peer: &Peer, auth: Authenticated, req: Request<Incoming>) -> Result<Answer, ErrorBody> {
    let path = req.uri().path().trim_end_matches('/').to_string();
    let query = Query::parse(req.uri().query());
    let method = req.method().clone();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (&method, segments.as_slice()) {
        (&Method::GET, ["api", "status"]) => answer(shared, &auth, "status", Map::new()).await,
        (&Method::GET, ["metrics"]) => {
            let request = dispatch::request("metrics", Map::new(), auth.task_token.as_deref())?;
            let value = call(shared, &auth, &request).await?;
            let text = value["text"].as_str().unwrap_or_default().to_string();
            let mut r = Response::new(body::full(text));
            let kind = HeaderValue::from_static(crate::daemon::METRICS_CONTENT_TYPE);
            r.headers_mut().insert(CONTENT_TYPE, kind);
            Ok(r)
        }
        (&Method::GET, ["api", "screenshot"]) => screenshot(shared, &auth, &query).await,
        (&Method::POST, ["api", "action"]) => {
            let params = read_object(shared, req).await?;
            answer(shared, &auth, "action", params).await
        }
        (&Method::POST, ["api", "calibrate"]) => {
            let params = read_object(shared, req).await?;
            answer(shared, &auth, "calibrate", params).await
        }
        (&Method::POST, ["api", "rpc"]) => rpc(shared, &auth, req).await,
        (&Method::GET, ["api", "update"]) => answer(shared, &auth, "update_status", Map::new()).await,
        (&Method::POST, ["api", "update"]) => {
            let reboot = !matches!(query.get("reboot"), Some("0" | "false"));
            super::update::post(shared, &auth, query.flag("force"), reboot, req).await
        }
        (&Method::GET, ["api", "tasks"]) => {
            let mut params = Map::new();
            if let Some(limit) = query.number("limit")? {
                params.insert("limit".into(), limit.into());
            }
            answer(shared, &auth, "task_list", params).await
        }
        (&Method::POST, ["api", "tasks"]) => {
            let params = read_object(shared, req).await?;
            open_task(shared, peer, auth, params).await
        }
        (&Method::GET, ["api", "tasks", id, "events"]) => {
            let id = task_id(id)?;
            let mut params = Map::new();
            params.insert("task".into(), id.into());
            if let Some(after) = query.number("after")? {
                params.insert("after_seq".into(), after.into());
            }
            if query.flag("follow") {
                params.insert("follow".into(), true.into());
                follow(shared, peer, auth, params).await
            } else {
                answer(shared, &auth, "task_events", params).await
            }
        }
        (&Method::GET, ["api", "tasks", id, "steps", seq, "thumbnail"]) => {
            let mut params = Map::new();
            params.insert("task".into(), task_id(id)?.into());
            let seq: i64 = seq
                .parse()
                .map_err(|_| ErrorBody::new(ErrorCode::InvalidParams, format!("step {seq:?} is not a number")))?;
            params.insert("seq".into(), seq.into());
            let request = dispatch::request("task_thumbnail", params, auth.task_token.as_deref())?;
            let value = call(shared, &auth, &request).await?;
            png_answer(&value)
        }
        (&Method::GET, ["api", "tasks", id, "report"]) => {
            super::report::artifact(shared, &auth, task_id(id)?, super::report::Artifact::Html).await
        }
        (&Method::GET, ["api", "tasks", id, "junit.xml"]) => {
            super::report::artifact(shared, &auth, task_id(id)?, super::report::Artifact::Junit).await
        }
        (&Method::GET, ["api", "tasks", id, "final.png"]) => {
            super::report::artifact(shared, &auth, task_id(id)?, super::report::Artifact::FinalPng).await
        }
        (&Method::GET, ["api", "tasks", id, "recording.mp4"]) => {
            super::report::recording(shared, &auth, task_id(id)?, req.headers()).await
        }
        (&Method::POST, ["api", "tasks", id, verb]) => {
            let id = task_id(id)?;
            let verb = verb.to_string();
            let mut params = read_object(shared, req).await?;
            params.insert("task".into(), id.into());
            let method = match verb.as_str() {
                "pause" | "resume" | "takeover" | "handback" | "stop" | "approve" | "reject" => {
                    params.insert("action".into(), verb.into());
                    "task_control"
                }
                "note" => "task_note",
                "finish" => "task_finish",
                _ => return Err(not_found(&path)),
            };
            answer(shared, &auth, method, params).await
        }
        (_, ["api", ..]) => Err(not_found(&path)),
        _ => Err(not_found(&path)),
    }
}

fn not_found(path: &str) -> ErrorBody {
    ErrorBody::new(ErrorCode::NotFound, format!("no API route {path}; docs/api.md lists them"))
}

fn task_id(s: &str) -> Result<i64, ErrorBody> {
    s.parse().map_err(|_| ErrorBody::new(ErrorCode::InvalidParams, format!("task id {s:?} is not a number")))
}

/// A query string's parameters (numbers and flags only: nothing here needs decoding).
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(q: Option<&str>) -> Query {
        Query(
            q.unwrap_or_default()
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| match p.split_once('=') {
                    Some((k, v)) => (k.to_string(), v.to_string()),
                    None => (p.to_string(), String::new()),
                })
                .collect(),
        )
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    fn number(&self, key: &str) -> Result<Option<u64>, ErrorBody> {
        self.get(key)
            .map(|v| v.parse().map_err(|_| ErrorBody::new(ErrorCode::InvalidParams, format!("{key} must be a number"))))
            .transpose()
    }

    fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("" | "1" | "true"))
    }
}

/// Parses a JSON body with the socket's parser ([`parse_value`]): the same limits, and a
/// key given twice is refused with the socket's code and message, never read as its last
/// value.
fn json_body(bytes: &[u8]) -> Result<Value, ErrorBody> {
    parse_value(bytes).map_err(|e| e.error)
}

/// Reads a JSON object body (empty: `{}`), at most `max_body` bytes.
async fn read_object(shared: &Shared, req: Request<Incoming>) -> Result<Map<String, Value>, ErrorBody> {
    let bytes = read_body(shared.max_body, req).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match json_body(&bytes)? {
        Value::Object(map) => {
            for key in ["id", "method", "task_token"] {
                if map.contains_key(key) {
                    return Err(ErrorBody::new(
                        ErrorCode::InvalidParams,
                        format!("{key:?} does not go in the body (task tokens go in the Tether-Task-Token header)"),
                    ));
                }
            }
            Ok(map)
        }
        _ => Err(ErrorBody::new(ErrorCode::InvalidRequest, "the body must be a JSON object")),
    }
}

async fn read_body(max: usize, req: Request<Incoming>) -> Result<Bytes, ErrorBody> {
    let (parts, body) = req.into_parts();
    read_limited(max, &parts.headers, body).await
}

/// Reads a body of at most `max` bytes (by its declared length first) within
/// [`super::BODY_TIMEOUT`].
pub(super) async fn read_limited(max: usize, headers: &hyper::HeaderMap, body: Incoming) -> Result<Bytes, ErrorBody> {
    let too_large = || ErrorBody::new(ErrorCode::RequestTooLarge, format!("the body is larger than {max} bytes"));
    let declared = headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    let collected = tokio::time::timeout(super::BODY_TIMEOUT, Limited::new(body, max).collect()).await;
    match collected {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => Err(too_large()),
        Ok(Err(_)) => Err(ErrorBody::new(ErrorCode::InvalidRequest, "the body could not be read")),
        Err(_) => Err(ErrorBody::new(
            ErrorCode::Timeout,
            format!("the body took longer than {} s to arrive", super::BODY_TIMEOUT.as_secs()),
        )),
    }
}

/// Runs one request on a session of its own.
async fn call(shared: &Shared, auth: &Authenticated, request: &WireRequest) -> Result<Value, ErrorBody> {
    dispatch::call(&shared.daemon, &auth.caller, request).await
}

async fn answer(
    shared: &Shared,
    auth: &Authenticated,
    method: &str,
    params: Map<String, Value>,
) -> Result<Answer, ErrorBody> {
    let request = dispatch::request(method, params, auth.task_token.as_deref())?;
    let value = call(shared, auth, &request).await?;
    Ok(body::json(StatusCode::OK, &value))
}

/// `POST /api/rpc`: one tether/1 request object (its `id` optional). Methods that stream
/// (a task's lease, a followed journal) have their own routes.
async fn rpc(shared: &Shared, auth: &Authenticated, req: Request<Incoming>) -> Result<Answer, ErrorBody> {
    let bytes = read_body(shared.max_body, req).await?;
    let request = rpc_request(&bytes, auth.task_token.as_deref())?;
    let streams = match &request.call {
        crate::protocol::Call::TaskOpen(_) => true,
        crate::protocol::Call::TaskEvents(p) => p.follow,
        _ => false,
    };
    if streams {
        return Err(ErrorBody::new(
            ErrorCode::InvalidRequest,
            "this call streams: use POST /api/tasks or GET /api/tasks/{id}/events?follow=1",
        ));
    }
    let value = call(shared, auth, &request).await?;
    Ok(body::json(StatusCode::OK, &json!({"id": request.id, "ok": true, "result": value})))
}

/// The tether/1 request in a `POST /api/rpc` body: `id` defaults to 1 and the task token
/// comes from its header, never from the body.
fn rpc_request(bytes: &[u8], task_token: Option<&str>) -> Result<WireRequest, ErrorBody> {
    // Strict before anything is added: `id` and `task_token` go into a map that already
    // holds each key at most once, so what the daemon reads is what the client sent.
    let Value::Object(mut object) = json_body(bytes)? else {
        return Err(ErrorBody::new(ErrorCode::InvalidRequest, "the body must be one tether/1 request object"));
    };
    object.entry("id").or_insert(1.into());
    if object.contains_key("task_token") {
        return Err(ErrorBody::new(ErrorCode::InvalidParams, "task tokens go in the Tether-Task-Token header"));
    }
    if let Some(t) = task_token {
        object.insert("task_token".into(), t.into());
    }
    // A map of JSON values always serializes.
    let bytes = serde_json::to_vec(&Value::Object(object)).unwrap_or_default();
    parse_request(&bytes).map_err(|e| e.error)
}

async fn screenshot(shared: &Shared, auth: &Authenticated, query: &Query) -> Result<Answer, ErrorBody> {
    let mut params = Map::new();
    for key in ["max_edge", "after_frame_id", "timeout_ms"] {
        if let Some(n) = query.number(key)? {
            params.insert(key.into(), n.into());
        }
    }
    let as_json = match query.get("format") {
        None | Some("png") => false,
        Some("json") => true,
        Some(other) => {
            return Err(ErrorBody::new(ErrorCode::InvalidParams, format!("format is png or json, not {other:?}")))
        }
    };
    let request = dispatch::request("screenshot", params, auth.task_token.as_deref())?;
    let value = call(shared, auth, &request).await?;
    if as_json {
        return Ok(body::json(StatusCode::OK, &value));
    }
    let metadata = value.get("metadata").cloned().unwrap_or(Value::Null);
    let mut r = png_answer(&value)?;
    let headers = r.headers_mut();
    if let Some(id) = metadata.get("observation_id").and_then(Value::as_str).and_then(|s| HeaderValue::from_str(s).ok())
    {
        headers.insert("tether-observation-id", id);
    }
    if let Ok(v) = HeaderValue::from_str(&metadata.to_string()) {
        headers.insert("tether-metadata", v);
    }
    Ok(r)
}

/// A `200` PNG from an answer carrying it in `data` (base64).
fn png_answer(value: &Value) -> Result<Answer, ErrorBody> {
    use base64::Engine;
    let png = value
        .get("data")
        .and_then(Value::as_str)
        .and_then(|d| base64::engine::general_purpose::STANDARD.decode(d).ok())
        .ok_or_else(|| ErrorBody::new(ErrorCode::Internal, "the answer had no image"))?;
    let mut r = Response::new(body::full(png));
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("image/png"));
    Ok(r)
}

/// `POST /api/tasks`: the lease. The answer streams `{id, token, …}`, then the task's
/// events, a keep-alive line every [`Shared::keepalive`], and ends after the task's final
/// state; when the client goes (the stream is closed) the task is abandoned.
async fn open_task(
    shared: &Shared,
    peer: &Peer,
    auth: Authenticated,
    params: Map<String, Value>,
) -> Result<Answer, ErrorBody> {
    let request = dispatch::request("task_open", params, auth.task_token.as_deref())?;
    let streamed = dispatch::stream(&shared.daemon, &auth.caller, request, shared.keepalive).await?;
    let mut r = body::lines(streamed.lines, peer.conn.stream_guard());
    if let Some(v) = streamed.task.and_then(|t| HeaderValue::from_str(&t.to_string()).ok()) {
        r.headers_mut().insert("tether-task-id", v);
    }
    Ok(r)
}

/// `GET /api/tasks/{id}/events?follow=1`: the journal from `after`, then live, ending with
/// `{"id", "state", "last_seq"}` once the task has ended and everything was sent.
async fn follow(
    shared: &Shared,
    peer: &Peer,
    auth: Authenticated,
    params: Map<String, Value>,
) -> Result<Answer, ErrorBody> {
    let request = dispatch::request("task_events", params, auth.task_token.as_deref())?;
    let streamed = dispatch::stream(&shared.daemon, &auth.caller, request, shared.keepalive).await?;
    Ok(body::lines(streamed.lines, peer.conn.stream_guard()))
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Answer {
    let mut r = Response::new(body::full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn redirect_to_https(shared: &Shared, host: &str, req: &Request<Incoming>) -> Answer {
    let host = if host.contains(':') { format!("[{host}]") } else { host.to_string() };
    let port = if shared.port == 443 { String::new() } else { format!(":{}", shared.port) };
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let location = format!("https://{host}{port}{path}");
    let mut r = text(StatusCode::TEMPORARY_REDIRECT, "text/plain", format!("use {location}\n"));
    if let Ok(v) = HeaderValue::from_str(&location) {
        r.headers_mut().insert(LOCATION, v);
    }
    r
}

fn session_cookie(shared: &Shared, value: &str, scheme: &str) -> Option<HeaderValue> {
    let secure = if scheme == "https" { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{secure}",
        guard::cookie_name(shared.port),
        SESSION_LIFETIME.as_secs()
    ))
    .ok()
}

/// `POST /login` with `{"token": …}` (or a form field `token`): a session cookie.
async fn login(shared: &Shared, peer: &Peer, scheme: &str, req: Request<Incoming>) -> Answer {
    let form = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    let bytes = match read_body(MAX_PUBLIC_BODY.min(shared.max_body), req).await {
        Ok(b) => b,
        Err(e) => return body::error(e),
    };
    let token = if form {
        let text = String::from_utf8_lossy(&bytes);
        let mut tokens = text.split('&').filter_map(|p| p.strip_prefix("token="));
        let first = tokens.next();
        if tokens.next().is_some() {
            return body::refuse(ErrorCode::InvalidRequest, "the form names \"token\" twice; send it once");
        }
        first.map(|t| t.replace("%5F", "_").replace("%2D", "-"))
    } else {
        match json_body(&bytes) {
            Ok(v) => v.get("token").and_then(Value::as_str).map(str::to_string),
            Err(e) => return body::error(e),
        }
    };
    let Some(token) = token else {
        return body::refuse(ErrorCode::InvalidParams, "send {\"token\": \"…\"}");
    };
    let tokens = shared.daemon.tokens();
    let Some((name, role)) = tokens.authenticate(&token) else {
        let over = shared.limiter.failed();
        tracing::warn!(peer = %peer.addr, limited = over, "refused a login with a wrong token");
        return if over {
            body::refuse(ErrorCode::RateLimited, "too many wrong tokens in the last minute; wait a minute")
        } else {
            body::refuse(ErrorCode::Unauthorized, "that token is not valid")
        };
    };
    let mut r = body::json(StatusCode::OK, &json!({"name": name, "role": role}));
    if let Some(c) = tokens.session_cookie(&token).and_then(|v| session_cookie(shared, &v, scheme)) {
        r.headers_mut().insert(SET_COOKIE, c);
    }
    tracing::info!(peer = %peer.addr, token = %name, "logged in");
    r
}

/// `POST /api/pair` with `{"code": …}`: redeems a pairing code into a named token (shown
/// once, in this answer) and a session cookie.
async fn pair(shared: &Shared, peer: &Peer, scheme: &str, req: Request<Incoming>) -> Answer {
    let bytes = match read_body(MAX_PUBLIC_BODY.min(shared.max_body), req).await {
        Ok(b) => b,
        Err(e) => return body::error(e),
    };
    let value = match json_body(&bytes) {
        Ok(v) => v,
        Err(e) => return body::error(e),
    };
    let Some(code) = value.get("code").and_then(Value::as_str).map(str::to_string) else {
        return body::refuse(ErrorCode::InvalidParams, "send {\"code\": \"…\"} from the pairing URL");
    };
    let tokens = shared.daemon.tokens();
    match tokens.redeem_pairing(&code).await {
        Ok((name, role, secret)) => {
            let mut r = body::json(
                StatusCode::OK,
                &json!({"name": name, "role": role, "token": secret, "fingerprint": shared.fingerprint}),
            );
            if let Some(c) = tokens.session_cookie(&secret).and_then(|v| session_cookie(shared, &v, scheme)) {
                r.headers_mut().insert(SET_COOKIE, c);
            }
            tracing::info!(peer = %peer.addr, token = %name, role = %role, "paired");
            r
        }
        Err(e) => {
            let e = crate::daemon::DaemonError::from(e);
            let body = ErrorBody::from(&e);
            if body.code == ErrorCode::PairingInvalid {
                let over = shared.limiter.failed();
                tracing::warn!(peer = %peer.addr, limited = over, "refused a pairing code");
                if over {
                    return body::refuse(
                        ErrorCode::RateLimited,
                        "too many wrong codes in the last minute; wait a minute",
                    );
                }
            }
            body::error(body)
        }
    }
}

/// `GET /api/session`: whether this request is logged in, and as whom — `200` either way,
/// so the console can decide between its login form and its pages without a failed
/// request in the browser's log.
fn session_info(shared: &Shared, peer: &Peer, req: &Request<Incoming>) -> Answer {
    let headers = req.headers();
    let presented = headers.contains_key(hyper::header::AUTHORIZATION)
        || guard::cookie_value(headers, &guard::cookie_name(shared.port)).is_some();
    if !presented {
        return body::json(StatusCode::OK, &json!({"logged_in": false}));
    }
    match guard::authenticate(&shared.daemon, &shared.limiter, headers, shared.port, peer.addr) {
        Ok(auth) => body::json(
            StatusCode::OK,
            &json!({"logged_in": true, "role": auth.caller.role, "name": auth.caller.principal.label()}),
        ),
        Err(e) if e.code == ErrorCode::RateLimited => body::error(e),
        Err(_) => body::json(StatusCode::OK, &json!({"logged_in": false, "expired": true})),
    }
}

fn logout(shared: &Shared) -> Answer {
    let mut r = body::json(StatusCode::OK, &json!({"logged_out": true}));
    if let Ok(v) = HeaderValue::from_str(&format!("{}=; Path=/; Max-Age=0", guard::cookie_name(shared.port))) {
        r.headers_mut().insert(SET_COOKIE, v);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Call, RequestId};

    /// What the control socket answers to `line`.
    fn socket_refusal(line: &str) -> ErrorBody {
        parse_request(line.as_bytes()).unwrap_err().error
    }

    #[test]
    fn rpc_refuses_duplicate_keys_like_the_socket() {
        let cases = [
            (r#"{"method":"hello","method":"status"}"#, r#"{"id":1,"method":"hello","method":"status"}"#),
            (r#"{"id":1,"id":2,"method":"status"}"#, r#"{"id":1,"id":2,"method":"status"}"#),
            (
                r#"{"method":"screenshot","max_edge":100,"max_edge":200}"#,
                r#"{"id":1,"method":"screenshot","max_edge":100,"max_edge":200}"#,
            ),
        ];
        for (body, line) in cases {
            let refused = rpc_request(body.as_bytes(), None).unwrap_err();
            assert_eq!(refused.code, ErrorCode::InvalidRequest, "{body}");
            assert_eq!(refused, socket_refusal(line), "{body}: the socket's code and message");
        }
    }

    #[test]
    fn rpc_inserting_the_id_and_task_token_does_not_hide_a_duplicate() {
        // Two task tokens in the body: refused as a duplicate, before the header's is added.
        let body = br#"{"method":"status","task_token":"a","task_token":"b"}"#;
        assert_eq!(rpc_request(body, Some("tt")).unwrap_err().code, ErrorCode::InvalidRequest);
        let one = rpc_request(br#"{"method":"status","task_token":"a"}"#, Some("tt")).unwrap_err();
        assert_eq!(one.code, ErrorCode::InvalidParams, "a body never carries a task token");
        let ok = rpc_request(br#"{"method":"status"}"#, Some("tt")).unwrap();
        assert_eq!((ok.id, ok.task_token.as_deref()), (RequestId(1), Some("tt")));
        assert!(matches!(ok.call, Call::Status(_)));
    }

    #[test]
    fn rest_bodies_refuse_duplicate_keys_at_any_depth() {
        for body in [r#"{"operation_id":"a","operation_id":"b"}"#, r#"{"action":{"type":"home","type":"tap"}}"#] {
            let refused = json_body(body.as_bytes()).unwrap_err();
            assert_eq!(refused.code, ErrorCode::InvalidRequest, "{body}");
            assert!(refused.message.contains("appears twice"), "{}", refused.message);
        }
        assert_eq!(json_body(b"{not json").unwrap_err().code, ErrorCode::InvalidJson);
    }
}
