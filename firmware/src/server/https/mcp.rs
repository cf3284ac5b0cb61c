//! `/mcp`: MCP over Streamable HTTP (rmcp's service, mounted in our hyper service).
//!
//! Our guard has already checked the Host (so rmcp's own Host list is off: one list, not
//! two) and authenticated the caller (a Bearer token, a task token, or the console's
//! cookie); here a browser Origin must be the console's own, and the caller rides along in
//! the request's extensions to the session's [`McpServer`](crate::server::mcp::McpServer),
//! which calls the daemon in-process as that caller. Sessions hold no lease and are
//! dropped after 10 minutes without traffic (`[https] mcp_session_idle_s`).
//!
//! Each MCP session belongs to the caller that initialized it ([`Sessions`]): another
//! credential naming its id is told there is no such session (it cannot call in it, read
//! its stream or end it). A session takes a place in its principal's share of MCP
//! sessions (the daemon's table of what principals hold): a principal at its share that
//! initializes again loses its own least recently used session, so a loop of
//! `initialize` costs only its own sessions and memory stays bounded; when everyone's
//! total is taken, `initialize` is answered `BUSY`. A revoked or rotated token's sessions
//! are closed at once, their standalone streams with them.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::{Request, Response};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::RoleServer;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::body::{self, ResponseBody};
use super::conn::StreamGuard;
use super::guard::Authenticated;
use crate::daemon::{Daemon, Hold, HoldKind, Holder};
use crate::protocol::{check_document, ErrorBody, ErrorCode};
use crate::server::inprocess::InProcess;
use crate::server::mcp::{IdentityOf, MakeBackend, McpServer};
use crate::sync::LockPlain;

/// The largest MCP message a client may POST.
pub const MAX_MCP_BODY: usize = 1 << 20;
/// By default, an MCP session with no traffic for this long is forgotten (the client
/// initializes again).
pub const SESSION_IDLE: Duration = Duration::from_secs(600);

/// The header that names an MCP session.
const SESSION_HEADER: &str = "mcp-session-id";

/// How often sessions rmcp forgot (idle) are dropped from [`Sessions`].
const PRUNE_EVERY: Duration = Duration::from_secs(30);

/// The mounted service, and whose each session is (the server behind it ends a session's
/// calls on `DELETE`).
#[derive(Clone)]
pub struct McpService {
    http: StreamableHttpService<McpServer<InProcess>, LocalSessionManager>,
    sessions: Arc<Sessions>,
    daemon: Daemon,
}

/// One MCP session's owner and its place in the owner's share.
struct Owned {
    /// The caller that initialized it ([`identity`]).
    owner: String,
    /// Whose share it counts against.
    holder: Holder,
    /// Last request in it (the least recently used is given up first).
    used: Instant,
    /// Its place in the daemon's table; given back when the entry goes.
    _hold: Hold,
    /// Ends the watcher that closes the session on revocation.
    _watcher: DropGuard,
}

/// MCP sessions by id, with their owners: rmcp's own manager knows ids, not callers.
pub struct Sessions {
    manager: Arc<LocalSessionManager>,
    server: McpServer<InProcess>,
    /// Transport bookkeeping (which MCP session is whose), not the phone's state: a plain
    /// mutex, never held across an await.
    owned: Mutex<HashMap<String, Owned>>,
    /// Sessions rmcp had and nobody owned at the last prune.
    unowned: Mutex<std::collections::HashSet<String>>,
}

impl Sessions {
    /// Forgets session `id` and closes it in rmcp (its calls in flight end; its streams
    /// close). `false`: it was not ours.
    async fn close(&self, id: &str) -> bool {
        let Some(entry) = self.owned.lock_plain().remove(id) else { return false };
        self.server.end(&format!("{}#{id}", entry.owner));
        let _ = self.manager.close_session(&Arc::from(id)).await;
        true
    }

    /// Drops the entries of sessions rmcp no longer has (idle ones it reaped), and closes
    /// sessions rmcp has that nobody owns, once seen so on two prunes in a row (a session
    /// being made is registered within one): none escapes the count.
    async fn prune(&self) {
        let ids: Vec<String> = self.owned.lock_plain().keys().cloned().collect();
        for id in ids {
            if !self.manager.has_session(&Arc::from(id.as_str())).await.unwrap_or(false) {
                self.owned.lock_plain().remove(&id);
            }
        }
        let live: Vec<String> = self.manager.sessions.read().await.keys().map(|k| k.to_string()).collect();
        let unowned: std::collections::HashSet<String> = {
            let owned = self.owned.lock_plain();
            live.into_iter().filter(|id| !owned.contains_key(id)).collect()
        };
        let stale: Vec<String> = {
            let mut seen = self.unowned.lock_plain();
            let stale = unowned.intersection(&seen).cloned().collect();
            *seen = unowned;
            stale
        };
        for id in stale {
            tracing::debug!("closed an MCP session nobody owns");
            let _ = self.manager.close_session(&Arc::from(id.as_str())).await;
        }
    }

    /// Whether `owner` may use session `id` (and marks it used).
    fn check(&self, id: &str, owner: &str) -> bool {
        match self.owned.lock_plain().get_mut(id) {
            Some(entry) if entry.owner == owner => {
                entry.used = Instant::now();
                true
            }
            _ => false,
        }
    }

    /// `holder`'s least recently used session.
    fn oldest_of(&self, holder: &Holder) -> Option<String> {
        let owned = self.owned.lock_plain();
        owned.iter().filter(|(_, e)| &e.holder == holder).min_by_key(|(_, e)| e.used).map(|(id, _)| id.clone())
    }
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
    let for_service = daemon.clone();
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
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(session_idle);
    let manager = Arc::new(manager);
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_max_request_body_bytes(MAX_MCP_BODY)
        .with_cancellation_token(shutdown.child_token());
    // One server for all sessions: rmcp clones it per session (or per request).
    let server = McpServer::new(make, identity_of);
    let for_sessions = server.clone();
    let sessions = Arc::new(Sessions {
        manager: manager.clone(),
        server: server.clone(),
        owned: Mutex::default(),
        unowned: Mutex::default(),
    });
    // Sessions rmcp reaped for idleness give their places back within PRUNE_EVERY.
    let weak = Arc::downgrade(&sessions);
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(PRUNE_EVERY);
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = tick.tick() => match weak.upgrade() {
                    Some(sessions) => sessions.prune().await,
                    None => break,
                },
            }
        }
    });
    McpService {
        http: StreamableHttpService::new(move || Ok(for_sessions.clone()), manager, config),
        sessions,
        daemon: for_service,
    }
}

/// The key of a caller's tool state: the caller, and its MCP session when it has one
/// ("the latest screenshot" is the session's; stateless clients have one per caller).
/// Another credential naming the same session id gets another key: only the session's
/// own caller reaches (or ends) it.
fn session_key(auth: &Authenticated, headers: &hyper::HeaderMap) -> String {
    let who = identity(auth);
    match headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) {
        Some(id) => format!("{who}#{id}"),
        None => who,
    }
}

/// The answer to a session id that is not the caller's (or not anyone's): the same either
/// way, so nobody learns which ids exist.
fn no_such_session() -> Response<ResponseBody> {
    body::refuse(ErrorCode::NotFound, "no MCP session with that id for this caller: initialize a new one")
}

/// Answers one `/mcp` request of an authenticated caller.
pub async fn handle(
    service: &McpService,
    auth: Authenticated,
    req: Request<Incoming>,
    stream: StreamGuard,
) -> Response<ResponseBody> {
    let owner = identity(&auth);
    let session_id = req.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string);
    let mut held = None;
    if let Some(id) = &session_id {
        if !service.sessions.check(id, &owner) {
            return no_such_session();
        }
        if req.method() == hyper::Method::DELETE {
            // The session's calls in flight end now, not when rmcp's drain gives up on
            // them; its place is given back.
            service.sessions.close(id).await;
            return Response::builder()
                .status(hyper::StatusCode::NO_CONTENT)
                .body(body::full(Bytes::new()))
                .unwrap_or_else(|_| body::refuse(ErrorCode::Internal, "could not build the answer"));
        }
        if req.method() == hyper::Method::GET {
            // A standalone stream: one of the caller's share of streams.
            match service.daemon.take_hold(&auth.caller, HoldKind::Stream) {
                Ok(h) => held = Some(h),
                Err(e) => return body::error(ErrorBody::from(&e)),
            }
        }
    }
    // A POSTed message is read here and checked by our parser first (rmcp's keeps the
    // last of two keys): one meaning per message, on every transport.
    let mut initialize = false;
    let req = if req.method() == hyper::Method::POST {
        let (parts, incoming) = req.into_parts();
        let bytes = match super::routes::read_limited(MAX_MCP_BODY, &parts.headers, incoming).await {
            Ok(b) => b,
            Err(e) => return body::error(e),
        };
        if let Err(e) = check_document(&bytes) {
            return body::error(e);
        }
        initialize = session_id.is_none() && is_initialize(&bytes);
        Request::from_parts(parts, Full::new(bytes).map_err(|never| match never {}).boxed())
    } else {
        req.map(|b| b.boxed())
    };
    let mut req: Request<http_body_util::combinators::BoxBody<Bytes, hyper::Error>> = req;
    req.extensions_mut().insert(auth.clone());
    let response = if initialize {
        // Room first (the caller's own least recently used session may go), then the
        // session is made and registered on a task of its own: it runs to its end even if
        // this request's future is dropped (the client went), so every session rmcp makes
        // is counted and owned.
        let hold = match make_room(service, &auth).await {
            Ok(hold) => hold,
            Err(e) => return body::error(e),
        };
        let (svc, who, owner) = (service.clone(), auth.clone(), owner.clone());
        let made = tokio::spawn(async move {
            let response = svc.http.handle(req).await;
            register(&svc, &who, &owner, hold, &response);
            response
        });
        match made.await {
            Ok(response) => response,
            Err(_) => return body::refuse(ErrorCode::Internal, "the MCP session could not be made; retry"),
        }
    } else {
        let response = service.http.handle(req).await;
        if session_id.is_none() {
            if let Some(id) = response.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()) {
                // A session made by anything but an initialize we counted: not kept.
                let _ = service.sessions.manager.close_session(&Arc::from(id)).await;
            }
        }
        response
    };
    if response.status() == hyper::StatusCode::NOT_FOUND {
        if let Some(id) = &session_id {
            // rmcp forgot it (idle): so do we.
            service.sessions.owned.lock_plain().remove(id);
        }
    }
    // An SSE answer can stream for minutes (a question waiting for a person): it counts as
    // an open stream of its connection, like a task's lease, and a standalone stream as one
    // of its caller's share.
    response.map(|b| Guarded { body: b, _stream: stream, _held: held }.boxed_unsync())
}

/// Whether a checked MCP message is an `initialize` request.
fn is_initialize(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(bytes)
        .is_ok_and(|v| v.get("method").and_then(serde_json::Value::as_str) == Some("initialize"))
}

/// Room for a new session of `auth`'s principal: at its share, its own least recently used
/// session is closed first. `BUSY` when everyone's total is taken.
async fn make_room(service: &McpService, auth: &Authenticated) -> Result<Hold, ErrorBody> {
    let share = service.daemon.hold_limits().mcp_sessions.per_principal;
    let holder = Holder::of(&auth.caller);
    while service.daemon.held_by(&auth.caller, HoldKind::McpSession) >= share {
        let Some(oldest) = service.sessions.oldest_of(&holder) else { break };
        tracing::debug!(caller = %auth.caller.principal.label(), "a new MCP session replaces the caller's least recently used one");
        service.sessions.close(&oldest).await;
    }
    service.daemon.take_hold(&auth.caller, HoldKind::McpSession).map_err(|e| ErrorBody::from(&e))
}

/// Records the session an `initialize` answer opened as `owner`'s, with its place in the
/// table; a watcher closes it when the owner's token is revoked. An answer that opened no
/// session gives the place back (the hold is dropped).
fn register(service: &McpService, auth: &Authenticated, owner: &str, hold: Hold, response: &Response<impl Sized>) {
    let Some(id) = response.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string) else {
        return;
    };
    let gone = CancellationToken::new();
    let watch = hold.watch();
    let entry = Owned {
        owner: owner.to_string(),
        holder: Holder::of(&auth.caller),
        used: Instant::now(),
        _hold: hold,
        _watcher: gone.clone().drop_guard(),
    };
    // Registered before the watcher starts: a revocation that already happened closes it
    // at once.
    service.sessions.owned.lock_plain().insert(id.clone(), entry);
    let sessions = Arc::downgrade(&service.sessions);
    tokio::spawn(async move {
        tokio::select! {
            () = gone.cancelled() => {}
            () = watch.revocation() => {
                if let Some(sessions) = sessions.upgrade() {
                    sessions.close(&id).await;
                }
            }
        }
    });
}

/// A body that holds its connection's stream guard while it streams.
struct Guarded {
    body: http_body_util::combinators::BoxBody<Bytes, Infallible>,
    _stream: StreamGuard,
    /// A standalone stream's place in its caller's share.
    _held: Option<Hold>,
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
