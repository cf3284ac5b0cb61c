//! MCP: the tool catalog as an `rmcp` server, one [`McpServer`] for every transport
//! (Streamable HTTP at `/mcp` in-process, stdio over the control socket in `tether mcp`).
//!
//! Calls are made as the request's caller (HTTP: whoever the request authenticated as),
//! and what a caller's tools remember (the latest screenshot) is kept per MCP session of
//! that caller (per caller for stateless clients), never shared with another token. `tools/list` shows only the tools the caller's role may call
//! (from `hello`, i.e. the one role table). A tool call inside a task that must wait (the
//! task is paused, taken over, or waiting for a human's answer) waits, with a progress
//! notification every few seconds saying why; a stop ends it with the daemon's error.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Map;

use tokio_util::sync::CancellationToken;

use crate::protocol::ErrorCode;
use crate::sync::LockPlain;
use crate::tools::{catalog, Backend, NoScreenshot, Runner, ToolDef, ToolError, ToolOutput};

/// Where MCP is served over HTTPS.
pub const MCP_PATH: &str = "/mcp";

/// How often a waiting tool call reports progress.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(3);

/// What the server tells a model about itself.
const INSTRUCTIONS: &str = "Drive a real iPhone. Call screenshot first: coordinates for tap, swipe and the \
other pointer tools are pixels of the latest screenshot, which pointer tools use unless you pass its \
observation_id. Every action waits until the screen settles and says what changed (and where), with a new \
observation that the next pointer tool uses: no screenshot is needed between steps unless you want to see \
the screen (return_image: region or full brings the picture with the answer). NO_VISIBLE_EFFECT means the \
input was sent and nothing changed: look before trying again. APP_NOT_OPENED means open_app found no app of \
that name (the phone is back on the home screen). To act on something with a label (a button, a row, a \
tab, a link), tap_text taps it by its text, read on the appliance, with no coordinates; find_text says \
where a text is, screenshot with text: true lists every line with its box, and expect_text on any action \
checks what the settled screen says. wait_for_text, wait_for_change and wait_for_settle wait for \
things you did not do. Inside a task a human may pause you (your call then waits), take over, or stop the \
task; ask with confirm before anything irreversible.";

/// Makes the backend for a caller from its request (HTTP: the caller the request
/// authenticated as; stdio: the one socket connection).
pub type MakeBackend<B> = Arc<dyn Fn(&RequestContext<RoleServer>) -> Result<B, ErrorData> + Send + Sync + 'static>;

/// Names a request's caller (principal and role, or its task token): the key of its tools'
/// state. `None`: the request carries no caller.
pub type IdentityOf = Arc<dyn Fn(&RequestContext<RoleServer>) -> Option<String> + Send + Sync + 'static>;

/// One caller's tools: its backend, its latest screenshot, what its role may call.
struct CallerTools<B> {
    runner: Runner<B>,
    /// The tools this caller may call.
    allowed: Vec<&'static ToolDef>,
    /// Cancelled when the caller's MCP session is ended ([`McpServer::end`]): its calls in
    /// flight end with it. rmcp itself lets them run on for up to 5 s after a `DELETE`.
    ended: CancellationToken,
}

/// Callers' tool state, by identity (the caller and its MCP session id, if any). It lives
/// here rather than in the server instance because rmcp makes an instance per request for
/// stateless clients (MCP's newest revision has no sessions). Idle entries go after
/// [`CALLER_IDLE`].
pub struct Callers<B> {
    map: Mutex<HashMap<String, Remembered<B>>>,
}

/// A caller's tools and when they were last used.
type Remembered<B> = (Arc<CallerTools<B>>, Instant);

impl<B> Default for Callers<B> {
    fn default() -> Self {
        Callers { map: Mutex::new(HashMap::new()) }
    }
}

/// A caller's tool state is forgotten after this long unused.
pub const CALLER_IDLE: Duration = Duration::from_secs(600);
/// Most callers remembered at once (the least recently used goes first).
const MAX_CALLERS: usize = 256;

/// The MCP server (a cheap handle: rmcp makes one per session or request).
pub struct McpServer<B: Backend> {
    make: MakeBackend<B>,
    identity_of: IdentityOf,
    callers: Arc<Callers<B>>,
}

impl<B: Backend> std::fmt::Debug for McpServer<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let callers = self.callers.map.lock_plain().len();
        f.debug_struct("McpServer").field("callers", &callers).finish_non_exhaustive()
    }
}

impl<B> std::fmt::Debug for Callers<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Callers").field("len", &self.map.lock_plain().len()).finish()
    }
}

impl<B: Backend> Clone for McpServer<B> {
    fn clone(&self) -> Self {
        McpServer { make: self.make.clone(), identity_of: self.identity_of.clone(), callers: self.callers.clone() }
    }
}

impl<B: Backend> McpServer<B> {
    /// A server whose callers' backends `make` builds; `identity_of` names each request's
    /// caller.
    pub fn new(make: MakeBackend<B>, identity_of: IdentityOf) -> McpServer<B> {
        McpServer { make, identity_of, callers: Arc::default() }
    }

    /// A server whose every request comes from one caller (stdio).
    pub fn single(backend: B) -> McpServer<B>
    where
        B: Clone,
    {
        McpServer::new(Arc::new(move |_| Ok(backend.clone())), Arc::new(|_| Some("stdio".to_string())))
    }

    /// Ends the MCP session whose caller `identity_of` named `identity`: its tool state is
    /// forgotten and its calls in flight are cancelled now (what they started on the phone
    /// the daemon ends and journals). `false`: no such session.
    pub fn end(&self, identity: &str) -> bool {
        match self.callers.map.lock_plain().remove(identity) {
            Some((tools, _)) => {
                tools.ended.cancel();
                true
            }
            None => false,
        }
    }

    /// The caller's tools, set up by its first request.
    async fn tools(&self, ctx: &RequestContext<RoleServer>) -> Result<Arc<CallerTools<B>>, ErrorData> {
        let who =
            (self.identity_of)(ctx).ok_or_else(|| ErrorData::invalid_request("the request names no caller", None))?;
        {
            let mut map = self.callers.map.lock_plain();
            map.retain(|_, (_, used)| used.elapsed() < CALLER_IDLE);
            if let Some((tools, used)) = map.get_mut(&who) {
                *used = Instant::now();
                return Ok(tools.clone());
            }
        }
        let backend = (self.make)(ctx)?;
        let hello = backend
            .call("hello", Map::new())
            .await
            .map_err(|e| ErrorData::internal_error(format!("the tether daemon did not answer hello: {e}"), None))?;
        let methods: Vec<String> = hello["capabilities"]["methods"]
            .as_array()
            .map(|a| a.iter().filter_map(|m| m.as_str().map(str::to_string)).collect())
            .unwrap_or_default();
        let allowed = Runner::<B>::allowed(&methods);
        let tools = Arc::new(CallerTools {
            runner: Runner::new(backend, NoScreenshot::Refuse),
            allowed,
            ended: CancellationToken::new(),
        });
        let mut map = self.callers.map.lock_plain();
        if map.len() >= MAX_CALLERS {
            if let Some(oldest) = map.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone()) {
                map.remove(&oldest);
            }
        }
        map.insert(who, (tools.clone(), Instant::now()));
        Ok(tools)
    }
}

/// The MCP form of a catalog tool.
pub fn tool_of(def: &ToolDef) -> Tool {
    let annotations =
        ToolAnnotations::new().read_only(def.read_only).destructive(false).idempotent(def.read_only).open_world(false);
    Tool::new(def.name, def.mcp_description(), def.input_schema()).with_annotations(annotations)
}

fn text_result(out: ToolOutput) -> CallToolResult {
    let mut content = Vec::new();
    if let Some((mime, data)) = out.image {
        content.push(ContentBlock::image(data, mime));
    }
    content.push(ContentBlock::text(out.text));
    CallToolResult::success(content)
}

fn error_result(e: &ToolError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!("{}: {}\nNext: {}", e.code, e.message, e.next_step()))])
}

/// Why a call is waiting, from `status` (None: it is not waiting on a human).
async fn waiting_reason<B: Backend>(backend: &B) -> Option<String> {
    let status = backend.call("status", Map::new()).await.ok()?;
    let task = status.get("task").filter(|t| !t.is_null())?;
    let (id, state) = (&task["id"], task["state"].as_str().unwrap_or_default());
    match state {
        "paused" => Some(format!("task {id} is paused by a human; the call goes on when it is resumed")),
        "taken_over" => Some(format!("a human has taken over task {id}; the call waits for the handback")),
        "waiting" => Some(format!(
            "task {id} is waiting for a human's answer: {}",
            task["question"]["text"].as_str().unwrap_or("a question")
        )),
        _ => None,
    }
}

impl<B: Backend> ServerHandler for McpServer<B> {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("tether", env!("CARGO_PKG_VERSION")).with_title("tether: drive a real iPhone"),
            )
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = self.tools(&ctx).await?;
        let tools = caller.allowed.iter().map(|d| tool_of(d)).collect();
        Ok(ListToolsResult::with_all_items(tools).with_cache_scope(CacheScope::Private))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = self.tools(&ctx).await?;
        let Some(def) = catalog::tool(&request.name) else {
            return Err(ErrorData::invalid_params(format!("no tool named {}", request.name), None));
        };
        if !caller.allowed.iter().any(|d| d.name == def.name) {
            let e = ToolError::new(
                ErrorCode::PermissionDenied,
                format!("{} is not among this token's tools (its role may not call {})", def.name, def.method.as_str()),
            );
            return Ok(error_result(&e).into());
        }
        let args = request.arguments.unwrap_or_default();
        let progress = ctx.meta.get_progress_token();
        let run = caller.runner.run(def, args);
        tokio::pin!(run);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
        let mut reported = 0u32;
        let outcome = loop {
            tokio::select! {
                r = &mut run => break r,
                // Dropping `run` ends the daemon request; the daemon releases what it held.
                () = ctx.ct.cancelled() => {
                    break Err(ToolError::new(ErrorCode::Cancelled, "the client cancelled the call; the daemon released any input it had started"))
                }
                () = caller.ended.cancelled() => {
                    break Err(ToolError::new(ErrorCode::Cancelled, "the MCP session was ended; the daemon released any input it had started"))
                }
                _ = tick.tick() => {
                    let Some(token) = progress.clone() else { continue };
                    let why = waiting_reason(caller.runner.backend()).await;
                    let message = why.unwrap_or_else(|| format!("{} is still running", def.name));
                    reported += 1;
                    let note = ProgressNotificationParam::new(token, f64::from(reported)).with_message(message);
                    let _ = ctx.peer.notify_progress(note).await;
                }
            }
        };
        Ok(match outcome {
            Ok(out) => text_result(out),
            Err(e) => error_result(&e),
        }
        .into())
    }
}
