//! `/mcp`: MCP over Streamable HTTP (rmcp's service, mounted in our hyper service).
//!
//! Our guard has already checked the Host (so rmcp's own Host list is off: one list, not
//! two) and authenticated the caller (a Bearer token, a task token, or the console's
//! cookie); here a browser Origin must be the console's own, and the caller rides along in
//! the request's extensions to the session's [`McpServer`](crate::server::mcp::McpServer),
//! which calls the daemon in-process as that caller. Sessions hold no lease and are
//! dropped after 10 minutes without traffic (`[https] mcp_session_idle_s`).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use hyper::{Request, Response};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::RoleServer;
use tokio_util::sync::CancellationToken;

use super::body::ResponseBody;
use super::conn::StreamGuard;
use super::guard::Authenticated;
use crate::daemon::Daemon;
use crate::server::inprocess::InProcess;
use crate::server::mcp::{IdentityOf, MakeBackend, McpServer};

/// The largest MCP message a client may POST.
pub const MAX_MCP_BODY: usize = 1 << 20;
/// By default, an MCP session with no traffic for this long is forgotten (the client
/// initializes again).
pub const SESSION_IDLE: Duration = Duration::from_secs(600);

/// The mounted service, and the server behind it (to end a session's calls on `DELETE`).
#[derive(Clone)]
pub struct McpService {
    http: StreamableHttpService<McpServer<InProcess>, LocalSessionManager>,
    server: McpServer<InProcess>,
}

impl std::fmt::Debug for McpService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpService").finish_non_exhaustive()
    }
}

/// Who a request authenticated as (set by our guard, read by the MCP server).
fn authenticated(ctx: &RequestContext<RoleServer>) -> Option<&Authenticated> {
    ctx.extensions.get::<hyper::http::request::Parts>()?.extensions.get::<Authenticated>()
}

fn identity(auth: &Authenticated) -> String {
    // A task token is its own caller: the agent of that task, not the connection's role.
    match &auth.task_token {
        Some(t) => {
            let digest = ring::digest::digest(&ring::digest::SHA256, t.as_bytes());
            let hex: String = digest.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect();
            format!("task-token:{hex}")
        }
        // The role too: a token re-made under the same name with another role is another caller.
        None => format!("{}:{}", auth.caller.principal.label(), auth.caller.role),
    }
}

/// Builds `/mcp`'s service for `daemon`; a session idle for `session_idle` is forgotten,
/// and `shutdown` ends them all.
pub fn service(daemon: Daemon, session_idle: Duration, shutdown: &CancellationToken) -> McpService {
    let make: MakeBackend<InProcess> = Arc::new(move |ctx| {
        let auth = authenticated(ctx)
            .ok_or_else(|| rmcp::ErrorData::internal_error("the request carries no authenticated caller", None))?;
        Ok(InProcess { daemon: daemon.clone(), caller: auth.caller.clone(), task_token: auth.task_token.clone() })
    });
    // The caller, and its MCP session when it has one: "the latest screenshot" is the
    // session's (stateless clients, with no session id, have one per caller).
    let identity_of: IdentityOf = Arc::new(|ctx| {
        let parts = ctx.extensions.get::<hyper::http::request::Parts>()?;
        Some(session_key(parts.extensions.get::<Authenticated>()?, &parts.headers))
    });
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(session_idle);
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_max_request_body_bytes(MAX_MCP_BODY)
        .with_cancellation_token(shutdown.child_token());
    // One server for all sessions: rmcp clones it per session (or per request).
    let server = McpServer::new(make, identity_of);
    let for_sessions = server.clone();
    McpService {
        http: StreamableHttpService::new(move || Ok(for_sessions.clone()), Arc::new(sessions), config),
        server,
    }
}

/// The key of a caller's tool state: the caller, and its MCP session when it has one
/// ("the latest screenshot" is the session's; stateless clients have one per caller).
/// Another credential naming the same session id gets another key: only the session's
/// own caller reaches (or ends) it.
fn session_key(auth: &Authenticated, headers: &hyper::HeaderMap) -> String {
    let who = identity(auth);
    match headers.get("mcp-session-id").and_then(|v| v.to_str().ok()) {
        Some(id) => format!("{who}#{id}"),
        None => who,
    }
}

/// Answers one `/mcp` request of an authenticated caller.
pub async fn handle(
    service: &McpService,
    auth: Authenticated,
    mut req: Request<Incoming>,
    stream: StreamGuard,
) -> Response<ResponseBody> {
    let delete = req.method() == hyper::Method::DELETE;
    if delete && req.headers().contains_key("mcp-session-id") {
        // The session's calls in flight end now, not when rmcp's drain gives up on them.
        service.server.end(&session_key(&auth, req.headers()));
    }
    req.extensions_mut().insert(auth);
    let mut response = service.http.handle(req).await;
    if delete && response.status() == hyper::StatusCode::ACCEPTED {
        // The session is gone (rmcp says 202); clients expect a success with no body
        // (the Python SDK logs "termination failed" on 202).
        *response.status_mut() = hyper::StatusCode::NO_CONTENT;
    }
    // An SSE answer can stream for minutes (a question waiting for a person): it counts as
    // an open stream of its connection, like a task's lease.
    response.map(|b| Guarded { body: b, _stream: stream }.boxed_unsync())
}

/// A body that holds its connection's stream guard while it streams.
struct Guarded {
    body: http_body_util::combinators::BoxBody<Bytes, Infallible>,
    _stream: StreamGuard,
}

impl Body for Guarded {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}
