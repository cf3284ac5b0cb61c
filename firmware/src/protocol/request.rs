//! Parsing one untrusted request line into a validated [`Request`].
//!
//! The checks run cheapest first: size, nesting depth (a byte scan, before serde builds
//! anything), JSON syntax, envelope (`id`, `method`, `task_token`), then the method's own
//! parameters with unknown fields rejected.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::host_params::{
    self, AttachParams, ConnectionKind, DetachParams, MailboxFlushParams, TaskMessagesParams, UserMessageParams,
    VideoOpenParams, VideoRevokeParams,
};
use super::params::{
    ActionParams, ActionSpec, CalibrateParams, CancelParams, PreviewParams, ScreenshotParams, SimStateParams,
    WaitForChangeParams, WaitForSettleParams, MAX_EDGE_LIMIT, MAX_PATH_POINTS, MAX_PREVIEW_EDGE, MAX_TEXT_BYTES,
    MAX_TIMEOUT_MS, QUIET_MS_RANGE, WAIT_MS_RANGE,
};
use super::strict_json::{self, StrictError};
use super::task_params::{
    self, BatchParams, TaskConfirmParams, TaskControlParams, TaskEventsParams, TaskFinishParams, TaskListParams,
    TaskNoteParams, TaskOpenParams, TaskRecordingParams, TaskReportParams, TaskThumbnailParams, MAX_BATCH_ACTIONS,
};
use super::text_params::{self, FindTextParams, WaitForTextParams, MAX_QUERY_BYTES};
use super::token_params::{PairParams, TokenParams};
use super::update_params::{UpdateInstallParams, UpdateUploadParams};
use super::{ErrorBody, ErrorCode, MAX_NESTING_DEPTH, MAX_REQUEST_BYTES};

/// A request id: a non-negative integer chosen by the client, echoed in the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RequestId(pub u64);

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Every method this daemon implements. Methods of tether/1 that are not listed here are
/// answered with `UNKNOWN_METHOD` until they are built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// Negotiate the protocol; learn capabilities, limits and who you are.
    Hello,
    /// Device and daemon state.
    Status,
    /// A PNG of the phone's screen that actions can refer to.
    Screenshot,
    /// A small PNG for people; creates no observation.
    Preview,
    /// Tap, drag, type, … on a screenshot's coordinates.
    Action,
    /// Cancel an in-flight request of this connection.
    Cancel,
    /// The virtual iPhone's internal state (sim only).
    SimState,
    /// Measure where the pointer lands and correct the mapping.
    Calibrate,
    /// Several actions on one observation, admitted one by one.
    Batch,
    /// Open a task; the connection becomes its lease.
    TaskOpen,
    /// Recent tasks.
    TaskList,
    /// A task's events (replay after a seq, then live).
    TaskEvents,
    /// The thumbnail of one of a task's steps (the screenshot it acted on).
    TaskThumbnail,
    /// A task's report: HTML, JUnit XML, the final screen and the recording's state.
    TaskReport,
    /// A piece of a task's recording (MP4 bytes, base64).
    TaskRecording,
    /// Every series `/metrics` serves, in Prometheus' text format.
    Metrics,
    /// The image, both root slots, the last update's trial, an install's progress.
    UpdateStatus,
    /// A piece of an update bundle (base64).
    UpdateUpload,
    /// Install the received bundle into the other slot (RAUC), then reboot to try it.
    UpdateInstall,
    /// Pause, resume, take over, hand back, stop, approve, reject.
    TaskControl,
    /// An agent asks a human a question and waits for the answer.
    TaskConfirm,
    /// A note in the task's log.
    TaskNote,
    /// End a task as completed or failed.
    TaskFinish,
    /// Named network tokens: add, list, revoke, rotate (admin).
    Token,
    /// Make a one-time pairing code for a new named token (admin).
    Pair,
    /// Mirror one running task on this connection (a third-party host).
    Attach,
    /// End this connection's mirror.
    Detach,
    /// Replay the attached task's events the client missed before it attached.
    MailboxFlush,
    /// A person's message to the attached task's agent.
    UserMessage,
    /// What people sent to a task's agent (its inbox).
    TaskMessages,
    /// A one-time ticket for the live H.264 WebSocket.
    VideoOpen,
    /// Void this caller's video tickets and close its video sockets.
    VideoRevoke,
    /// Wait until the screen differs from a screenshot (or from now).
    WaitForChange,
    /// Wait until the screen stops changing.
    WaitForSettle,
    /// Where a text is on the screen (read from a screenshot).
    FindText,
    /// Wait until a text appears on the screen, or is gone.
    WaitForText,
}

impl Method {
    /// All implemented methods, in the order `hello` lists them.
    pub const ALL: &'static [Method] = &[
        Method::Hello,
        Method::Status,
        Method::Screenshot,
        Method::Preview,
        Method::Action,
        Method::Cancel,
        Method::SimState,
        Method::Calibrate,
        Method::Batch,
        Method::TaskOpen,
        Method::TaskList,
        Method::TaskEvents,
        Method::TaskControl,
        Method::TaskConfirm,
        Method::TaskNote,
        Method::TaskFinish,
        Method::Token,
        Method::Pair,
        Method::Attach,
        Method::Detach,
        Method::MailboxFlush,
        Method::UserMessage,
        Method::TaskMessages,
        Method::VideoOpen,
        Method::VideoRevoke,
        Method::TaskThumbnail,
        Method::WaitForChange,
        Method::WaitForSettle,
        Method::FindText,
        Method::WaitForText,
        Method::TaskReport,
        Method::TaskRecording,
        Method::Metrics,
        Method::UpdateStatus,
        Method::UpdateUpload,
        Method::UpdateInstall,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Hello => "hello",
            Method::Status => "status",
            Method::Screenshot => "screenshot",
            Method::Preview => "preview",
            Method::Action => "action",
            Method::Cancel => "cancel",
            Method::SimState => "sim_state",
            Method::Calibrate => "calibrate",
            Method::Batch => "batch",
            Method::TaskOpen => "task_open",
            Method::TaskList => "task_list",
            Method::TaskEvents => "task_events",
            Method::TaskControl => "task_control",
            Method::TaskConfirm => "task_confirm",
            Method::TaskNote => "task_note",
            Method::TaskFinish => "task_finish",
            Method::Token => "token",
            Method::Pair => "pair",
            Method::Attach => "attach",
            Method::Detach => "detach",
            Method::MailboxFlush => "mailbox_flush",
            Method::UserMessage => "user_message",
            Method::TaskMessages => "task_messages",
            Method::VideoOpen => "video_open",
            Method::VideoRevoke => "video_revoke",
            Method::TaskThumbnail => "task_thumbnail",
            Method::WaitForChange => "wait_for_change",
            Method::WaitForSettle => "wait_for_settle",
            Method::FindText => "find_text",
            Method::WaitForText => "wait_for_text",
            Method::TaskReport => "task_report",
            Method::TaskRecording => "task_recording",
            Method::Metrics => "metrics",
            Method::UpdateStatus => "update_status",
            Method::UpdateUpload => "update_upload",
            Method::UpdateInstall => "update_install",
        }
    }

    /// Looks a method up by its wire name.
    pub fn from_name(name: &str) -> Option<Method> {
        Method::ALL.iter().copied().find(|m| m.as_str() == name)
    }
}

/// Parameters of `hello`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelloParams {
    /// The protocol the client speaks; must be `"tether/1"` when present.
    #[serde(default)]
    pub protocol: Option<String>,
    /// A free-form client name for logs (at most 128 bytes).
    #[serde(default)]
    pub client: Option<String>,
    /// What this connection is; the first `hello` fixes it (default `host`).
    #[serde(default)]
    pub kind: Option<ConnectionKind>,
}

/// Parameters of `status` (none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusParams {}

/// A method call with its validated parameters.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// `hello`.
    Hello(HelloParams),
    /// `status`.
    Status(StatusParams),
    /// `screenshot`.
    Screenshot(ScreenshotParams),
    /// `preview`.
    Preview(PreviewParams),
    /// `action`.
    Action(ActionParams),
    /// `cancel`.
    Cancel(CancelParams),
    /// `sim_state`.
    SimState(SimStateParams),
    /// `calibrate`.
    Calibrate(CalibrateParams),
    /// `batch`.
    Batch(BatchParams),
    /// `task_open`.
    TaskOpen(TaskOpenParams),
    /// `task_list`.
    TaskList(TaskListParams),
    /// `task_events`.
    TaskEvents(TaskEventsParams),
    /// `task_thumbnail`.
    TaskThumbnail(TaskThumbnailParams),
    /// `task_report`.
    TaskReport(TaskReportParams),
    /// `task_recording`.
    TaskRecording(TaskRecordingParams),
    /// `metrics`.
    Metrics(StatusParams),
    /// `update_status`.
    UpdateStatus(StatusParams),
    /// `update_upload`.
    UpdateUpload(UpdateUploadParams),
    /// `update_install`.
    UpdateInstall(UpdateInstallParams),
    /// `task_control`.
    TaskControl(TaskControlParams),
    /// `task_confirm`.
    TaskConfirm(TaskConfirmParams),
    /// `task_note`.
    TaskNote(TaskNoteParams),
    /// `task_finish`.
    TaskFinish(TaskFinishParams),
    /// `token`.
    Token(TokenParams),
    /// `pair`.
    Pair(PairParams),
    /// `attach`.
    Attach(AttachParams),
    /// `detach`.
    Detach(DetachParams),
    /// `mailbox_flush`.
    MailboxFlush(MailboxFlushParams),
    /// `user_message`.
    UserMessage(UserMessageParams),
    /// `task_messages`.
    TaskMessages(TaskMessagesParams),
    /// `video_open`.
    VideoOpen(VideoOpenParams),
    /// `video_revoke`.
    VideoRevoke(VideoRevokeParams),
    /// `wait_for_change`.
    WaitForChange(WaitForChangeParams),
    /// `wait_for_settle`.
    WaitForSettle(WaitForSettleParams),
    /// `find_text`.
    FindText(FindTextParams),
    /// `wait_for_text`.
    WaitForText(WaitForTextParams),
}

impl Call {
    /// Which method this is.
    pub fn method(&self) -> Method {
        match self {
            Call::Hello(_) => Method::Hello,
            Call::Status(_) => Method::Status,
            Call::Screenshot(_) => Method::Screenshot,
            Call::Preview(_) => Method::Preview,
            Call::Action(_) => Method::Action,
            Call::Cancel(_) => Method::Cancel,
            Call::SimState(_) => Method::SimState,
            Call::Calibrate(_) => Method::Calibrate,
            Call::Batch(_) => Method::Batch,
            Call::TaskOpen(_) => Method::TaskOpen,
            Call::TaskList(_) => Method::TaskList,
            Call::TaskEvents(_) => Method::TaskEvents,
            Call::TaskControl(_) => Method::TaskControl,
            Call::TaskConfirm(_) => Method::TaskConfirm,
            Call::TaskNote(_) => Method::TaskNote,
            Call::TaskFinish(_) => Method::TaskFinish,
            Call::Token(_) => Method::Token,
            Call::Pair(_) => Method::Pair,
            Call::Attach(_) => Method::Attach,
            Call::Detach(_) => Method::Detach,
            Call::MailboxFlush(_) => Method::MailboxFlush,
            Call::UserMessage(_) => Method::UserMessage,
            Call::TaskMessages(_) => Method::TaskMessages,
            Call::TaskThumbnail(_) => Method::TaskThumbnail,
            Call::TaskReport(_) => Method::TaskReport,
            Call::TaskRecording(_) => Method::TaskRecording,
            Call::Metrics(_) => Method::Metrics,
            Call::UpdateStatus(_) => Method::UpdateStatus,
            Call::UpdateUpload(_) => Method::UpdateUpload,
            Call::UpdateInstall(_) => Method::UpdateInstall,
            Call::VideoOpen(_) => Method::VideoOpen,
            Call::VideoRevoke(_) => Method::VideoRevoke,
            Call::WaitForChange(_) => Method::WaitForChange,
            Call::WaitForSettle(_) => Method::WaitForSettle,
            Call::FindText(_) => Method::FindText,
            Call::WaitForText(_) => Method::WaitForText,
        }
    }
}

/// A validated request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The client's id for this request.
    pub id: RequestId,
    /// A task token, when the request is made on behalf of a task.
    pub task_token: Option<String>,
    /// The method and its parameters.
    pub call: Call,
}

/// Why a line was rejected, with the id when it could be read so the client can correlate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestError {
    /// The request id, if the envelope got that far.
    pub id: Option<RequestId>,
    /// The wire error.
    pub error: ErrorBody,
}

impl RequestError {
    fn new(id: Option<RequestId>, code: ErrorCode, message: impl Into<String>) -> Self {
        RequestError { id, error: ErrorBody::new(code, message) }
    }

    /// The error for a line longer than [`MAX_REQUEST_BYTES`]; used by readers that discard
    /// such a line without buffering it.
    pub fn too_large(len: usize) -> Self {
        RequestError::new(
            None,
            ErrorCode::RequestTooLarge,
            format!(
                "request line of {len}+ bytes exceeds the limit of {MAX_REQUEST_BYTES} bytes; \
                 it was discarded (send large data in smaller requests)"
            ),
        )
    }
}

/// Most bytes of a client name kept by `hello`.
const MAX_CLIENT_NAME: usize = 128;

/// Parses one request line (without its newline).
pub fn parse_request(line: &[u8]) -> Result<Request, RequestError> {
    let value = parse_value(line)?;
    request_from_value(value)
}

/// Parses `line` into one JSON value with the checks every request gets before its
/// envelope is read: size, nesting depth (a byte scan, before serde builds anything),
/// syntax, and no key twice at any depth. HTTP bodies go through it too, so a body means
/// the same to every reader and is refused with the same code and message as the same
/// line on the socket.
///
/// # Errors
///
/// `REQUEST_TOO_LARGE`, `NESTING_TOO_DEEP`, `INVALID_JSON`, or `INVALID_REQUEST` for a
/// repeated key (with the request id when `id` appears once in the envelope).
pub fn parse_value(line: &[u8]) -> Result<Value, RequestError> {
    if line.len() > MAX_REQUEST_BYTES {
        return Err(RequestError::too_large(line.len()));
    }
    if let Some(depth) = exceeds_depth(line, MAX_NESTING_DEPTH) {
        return Err(RequestError::new(
            None,
            ErrorCode::NestingTooDeep,
            format!("JSON nesting reaches depth {depth}; the limit is {MAX_NESTING_DEPTH}"),
        ));
    }
    match strict_json::parse(line) {
        Ok(value) => Ok(value),
        Err(StrictError::Syntax(e)) => {
            Err(RequestError::new(None, ErrorCode::InvalidJson, format!("not valid JSON: {e}")))
        }
        Err(StrictError::DuplicateKey { key, top_level }) => {
            // The id is trustworthy only when it appears once in the envelope.
            let id = if key == "id" && top_level { None } else { unique_id(line) };
            let place = if top_level { "in the request" } else { "inside a parameter" };
            Err(RequestError::new(
                id,
                ErrorCode::InvalidRequest,
                format!("the key {key:?} appears twice {place}; a request must say everything once"),
            ))
        }
    }
}

/// Checks a JSON document that is not a tether/1 request (an MCP message, up to its own
/// size limit) the way [`parse_value`] checks requests: nesting depth first, then syntax and
/// repeated keys, so a message means one thing to every reader (rmcp's parser keeps the
/// last of two keys; ours refuses).
///
/// # Errors
///
/// `NESTING_TOO_DEEP`, `INVALID_JSON`, or `INVALID_REQUEST` for a repeated key.
pub fn check_document(bytes: &[u8]) -> Result<(), ErrorBody> {
    if let Some(depth) = exceeds_depth(bytes, MAX_NESTING_DEPTH) {
        return Err(ErrorBody::new(
            ErrorCode::NestingTooDeep,
            format!("JSON nesting reaches depth {depth}; the limit is {MAX_NESTING_DEPTH}"),
        ));
    }
    match strict_json::parse(bytes) {
        Ok(_) => Ok(()),
        Err(StrictError::Syntax(e)) => Err(ErrorBody::new(ErrorCode::InvalidJson, format!("not valid JSON: {e}"))),
        Err(StrictError::DuplicateKey { key, .. }) => Err(ErrorBody::new(
            ErrorCode::InvalidRequest,
            format!("the key {key:?} appears twice; a message must say everything once"),
        )),
    }
}

/// The request in an already parsed value (from [`parse_value`]).
fn request_from_value(value: Value) -> Result<Request, RequestError> {
    let Value::Object(mut fields) = value else {
        return Err(RequestError::new(
            None,
            ErrorCode::InvalidRequest,
            "a request must be a JSON object like {\"id\":1,\"method\":\"hello\"}",
        ));
    };
    let id = take_id(&mut fields)?;
    let method = match fields.remove("method") {
        Some(Value::String(name)) => name,
        Some(_) => return Err(RequestError::new(Some(id), ErrorCode::InvalidRequest, "\"method\" must be a string")),
        None => return Err(RequestError::new(Some(id), ErrorCode::InvalidRequest, "\"method\" is missing")),
    };
    let task_token = match fields.remove("task_token") {
        None | Some(Value::Null) => None,
        Some(Value::String(token)) => Some(token),
        Some(_) => {
            return Err(RequestError::new(Some(id), ErrorCode::InvalidParams, "\"task_token\" must be a string"))
        }
    };
    let Some(known) = Method::from_name(&method) else {
        let names: Vec<&str> = Method::ALL.iter().map(|m| m.as_str()).collect();
        return Err(RequestError::new(
            Some(id),
            ErrorCode::UnknownMethod,
            format!("unknown method {:?}; this daemon implements: {}", truncate(&method, 64), names.join(", ")),
        ));
    };
    let call = match known {
        Method::Hello => {
            let params: HelloParams = params(id, known, fields)?;
            if params.client.as_ref().is_some_and(|c| c.len() > MAX_CLIENT_NAME) {
                return Err(RequestError::new(
                    Some(id),
                    ErrorCode::InvalidParams,
                    format!("hello: \"client\" is longer than {MAX_CLIENT_NAME} bytes"),
                ));
            }
            Call::Hello(params)
        }
        Method::Status => Call::Status(params(id, known, fields)?),
        Method::Screenshot => {
            let p: ScreenshotParams = params(id, known, fields)?;
            validate_screenshot(&p).map_err(|m| RequestError::new(Some(id), ErrorCode::InvalidParams, m))?;
            Call::Screenshot(p)
        }
        Method::Preview => {
            let p: PreviewParams = params(id, known, fields)?;
            if p.max_edge.is_some_and(|e| !(64..=MAX_PREVIEW_EDGE).contains(&e)) {
                return Err(RequestError::new(
                    Some(id),
                    ErrorCode::InvalidParams,
                    format!("preview: max_edge must be 64..={MAX_PREVIEW_EDGE}"),
                ));
            }
            if p.timeout_ms.is_some_and(|t| t > MAX_TIMEOUT_MS) {
                return Err(RequestError::new(
                    Some(id),
                    ErrorCode::InvalidParams,
                    format!("preview: timeout_ms must be at most {MAX_TIMEOUT_MS}"),
                ));
            }
            Call::Preview(p)
        }
        Method::Action => {
            let p: ActionParams = params(id, known, fields)?;
            validate_action(&p).map_err(|m| RequestError::new(Some(id), ErrorCode::InvalidParams, m))?;
            Call::Action(p)
        }
        Method::Cancel => Call::Cancel(params(id, known, fields)?),
        Method::SimState => Call::SimState(params(id, known, fields)?),
        Method::Calibrate => {
            let p: CalibrateParams = params(id, known, fields)?;
            if p.grid.is_some_and(|g| !(3..=6).contains(&g)) {
                return Err(RequestError::new(Some(id), ErrorCode::InvalidParams, "calibrate: grid must be 3..=6"));
            }
            Call::Calibrate(p)
        }
        Method::Batch => {
            let p: BatchParams = params(id, known, fields)?;
            validate_batch(&p).map_err(|m| RequestError::new(Some(id), ErrorCode::InvalidParams, m))?;
            Call::Batch(p)
        }
        Method::TaskOpen => {
            let p: TaskOpenParams = params(id, known, fields)?;
            task_params::validate_open(&p).map_err(|m| RequestError::new(Some(id), ErrorCode::InvalidParams, m))?;
            Call::TaskOpen(p)
        }
        Method::TaskList => Call::TaskList(params(id, known, fields)?),
        Method::TaskEvents => Call::TaskEvents(params(id, known, fields)?),
        Method::TaskThumbnail => Call::TaskThumbnail(params(id, known, fields)?),
        Method::TaskReport => Call::TaskReport(params(id, known, fields)?),
        Method::Metrics => Call::Metrics(params(id, known, fields)?),
        Method::UpdateStatus => Call::UpdateStatus(params(id, known, fields)?),
        Method::UpdateUpload => Call::UpdateUpload(params(id, known, fields)?),
        Method::UpdateInstall => Call::UpdateInstall(params(id, known, fields)?),
        Method::TaskRecording => {
            let p: TaskRecordingParams = params(id, known, fields)?;
            if p.length == 0 || p.length > task_params::MAX_RECORDING_CHUNK {
                let m = format!("length must be 1..={} bytes", task_params::MAX_RECORDING_CHUNK);
                return Err(RequestError::new(Some(id), ErrorCode::InvalidParams, m));
            }
            Call::TaskRecording(p)
        }
        Method::TaskControl => {
            let p: TaskControlParams = params(id, known, fields)?;
            if let Some(r) = &p.reason {
                task_params::validate_text("task_control: reason", r)
                    .map_err(|m| RequestError::new(Some(id), ErrorCode::InvalidParams, m))?;
            }
            Call::TaskControl(p)
        }
        Method::TaskConfirm => {
            let p: TaskConfirmParams = params(id, known, fields)?;
            task_params::validate_text("task_confirm: question", &p.question)
                .map_err(|m| RequestError::new(Some(id), ErrorCode::InvalidParams, m))?;
            Call::TaskConfirm(p)
        }
        Method::TaskNote => {
            let p: TaskNoteParams = params(id, known, fields)?;
            task_params::validate_text("task_note: text", &p.text)
                .map_err(|m| RequestError::new(Some(id), ErrorCode::InvalidParams, m))?;
            Call::TaskNote(p)
        }
        Method::TaskFinish => {
            let p: TaskFinishParams = params(id, known, fields)?;
            if let Some(s) = &p.summary {
                task_params::validate_text("task_finish: summary", s)
                    .map_err(|m| RequestError::new(Some(id), ErrorCode::InvalidParams, m))?;
            }
            Call::TaskFinish(p)
        }
        Method::Token => {
            let p: TokenParams = params(id, known, fields)?;
            super::token_params::validate_token(&p)
                .map_err(|m| RequestError::new(Some(id), ErrorCode::InvalidParams, m))?;
            Call::Token(p)
        }
        Method::Pair => {
            let p: PairParams = params(id, known, fields)?;
            super::token_params::validate_pair(&p)
                .map_err(|m| RequestError::new(Some(id), ErrorCode::InvalidParams, m))?;
            Call::Pair(p)
        }
        Method::Attach => Call::Attach(params(id, known, fields)?),
        Method::Detach => Call::Detach(params(id, known, fields)?),
        Method::MailboxFlush => {
            let p: MailboxFlushParams = params(id, known, fields)?;
            host_params::validate_flush(&p).map_err(|m| RequestError::new(Some(id), ErrorCode::InvalidParams, m))?;
            Call::MailboxFlush(p)
        }
        Method::UserMessage => {
            let p: UserMessageParams = params(id, known, fields)?;
            task_params::validate_text("user_message: text", &p.text)
                .map_err(|m| RequestError::new(Some(id), ErrorCode::InvalidParams, m))?;
            Call::UserMessage(p)
        }
        Method::TaskMessages => {
            let p: TaskMessagesParams = params(id, known, fields)?;
            host_params::validate_messages(&p).map_err(|m| RequestError::new(Some(id), ErrorCode::InvalidParams, m))?;
            Call::TaskMessages(p)
        }
        Method::VideoOpen => Call::VideoOpen(params(id, known, fields)?),
        Method::VideoRevoke => Call::VideoRevoke(params(id, known, fields)?),
        Method::WaitForChange => {
            let p: WaitForChangeParams = params(id, known, fields)?;
            check_waits("wait_for_change", p.timeout_ms, p.quiet_ms)
                .map_err(|m| RequestError::new(Some(id), ErrorCode::InvalidParams, m))?;
            Call::WaitForChange(p)
        }
        Method::WaitForSettle => {
            let p: WaitForSettleParams = params(id, known, fields)?;
            check_waits("wait_for_settle", p.timeout_ms, p.quiet_ms)
                .map_err(|m| RequestError::new(Some(id), ErrorCode::InvalidParams, m))?;
            Call::WaitForSettle(p)
        }
        Method::FindText => {
            let p: FindTextParams = params(id, known, fields)?;
            text_params::validate_find(&p).map_err(|m| RequestError::new(Some(id), ErrorCode::InvalidParams, m))?;
            Call::FindText(p)
        }
        Method::WaitForText => {
            let p: WaitForTextParams = params(id, known, fields)?;
            text_params::validate_wait(&p).map_err(|m| RequestError::new(Some(id), ErrorCode::InvalidParams, m))?;
            Call::WaitForText(p)
        }
    };
    Ok(Request { id, task_token, call })
}

fn validate_screenshot(p: &ScreenshotParams) -> Result<(), String> {
    if let Some(e) = p.max_edge {
        if !(64..=MAX_EDGE_LIMIT).contains(&e) {
            return Err(format!("screenshot: max_edge must be 64..={MAX_EDGE_LIMIT}, got {e}"));
        }
    }
    if p.timeout_ms.is_some_and(|t| t > MAX_TIMEOUT_MS) {
        return Err(format!("screenshot: timeout_ms must be at most {MAX_TIMEOUT_MS}"));
    }
    if p.region.is_some_and(|r| r.width == 0 || r.height == 0) {
        return Err("screenshot: region must have a non-zero width and height".into());
    }
    Ok(())
}

/// Checks a timeout and a quiet period against their ranges.
fn check_waits(method: &str, timeout_ms: Option<u64>, quiet_ms: Option<u64>) -> Result<(), String> {
    if let Some(t) = timeout_ms.filter(|t| !WAIT_MS_RANGE.contains(t)) {
        return Err(format!(
            "{method}: timeout must be {}..={} ms, got {t}",
            WAIT_MS_RANGE.start(),
            WAIT_MS_RANGE.end()
        ));
    }
    if let Some(q) = quiet_ms.filter(|q| !QUIET_MS_RANGE.contains(q)) {
        return Err(format!(
            "{method}: quiet_ms must be {}..={} ms, got {q}",
            QUIET_MS_RANGE.start(),
            QUIET_MS_RANGE.end()
        ));
    }
    Ok(())
}

fn validate_batch(p: &BatchParams) -> Result<(), String> {
    if p.actions.is_empty() || p.actions.len() > MAX_BATCH_ACTIONS {
        return Err(format!("batch: actions takes 1-{MAX_BATCH_ACTIONS} actions"));
    }
    check_waits("batch", p.settle_timeout_ms, p.quiet_ms)?;
    for (i, action) in p.actions.iter().enumerate() {
        let one = ActionParams {
            operation_id: p.operation_id.clone(),
            observation_id: p.observation_id.clone(),
            action: action.clone(),
            verify: None,
            expect: None,
            return_image: None,
            quiet_ms: None,
            settle_timeout_ms: None,
            expect_text: None,
            expect_no_text: None,
        };
        if matches!(action, ActionSpec::TapText { .. }) {
            return Err(format!(
                "batch: actions[{i}]: tap_text reads the screen first and is not available in a batch; call action"
            ));
        }
        validate_action(&one).map_err(|m| format!("batch: actions[{i}]: {}", m.trim_start_matches("action: ")))?;
    }
    Ok(())
}

fn validate_action(p: &ActionParams) -> Result<(), String> {
    if p.operation_id.is_empty() || p.operation_id.len() > 128 {
        return Err("action: operation_id must be 1-128 bytes".into());
    }
    check_waits("action", p.settle_timeout_ms, p.quiet_ms)?;
    if p.action.needs_observation() && p.observation_id.is_none() {
        return Err(
            "action: pointer actions need the observation_id of the screenshot their coordinates refer to".into()
        );
    }
    match &p.action {
        ActionSpec::Drag { path, duration_ms } => {
            if path.len() < 2 || path.len() > MAX_PATH_POINTS {
                return Err(format!("action: drag path needs 2-{MAX_PATH_POINTS} points, got {}", path.len()));
            }
            if duration_ms.is_some_and(|d| !(100..=5000).contains(&d)) {
                return Err("action: drag duration_ms must be 100..=5000".into());
            }
        }
        ActionSpec::Scroll { distance: Some(d), .. } if !(*d > 0.0 && d.is_finite()) => {
            return Err("action: scroll distance must be a positive number of pixels".into());
        }
        ActionSpec::Hotkey { keys } => {
            let mut unique = keys.clone();
            unique.sort();
            unique.dedup();
            if keys.len() < 2 || keys.len() > 6 || unique.len() != keys.len() {
                return Err("action: hotkey needs 2-6 unique keys, e.g. [\"cmd\", \"h\"]".into());
            }
        }
        ActionSpec::TypeText { text, .. } if text.len() > MAX_TEXT_BYTES => {
            return Err(format!("action: type_text is limited to {MAX_TEXT_BYTES} bytes"));
        }
        ActionSpec::OpenApp { name } if name.trim().is_empty() || name.len() > 128 || name.contains(['\n', '\r']) => {
            return Err("action: open_app name must be one line of 1-128 bytes".into());
        }
        ActionSpec::TapText { min_confidence, .. } => {
            if let Some(q) = p.action.text_query() {
                q.check("action: tap_text")?;
            }
            if let Some(c) = min_confidence {
                if !(0.0..=100.0).contains(c) {
                    return Err(format!("action: tap_text min_confidence must be 0..=100, got {c}"));
                }
            }
        }
        _ => {}
    }
    for (name, text) in [("expect_text", &p.expect_text), ("expect_no_text", &p.expect_no_text)] {
        if let Some(t) = text {
            if t.trim().is_empty() || t.len() > MAX_QUERY_BYTES || t.contains(['\n', '\r']) {
                return Err(format!("action: {name} must be one line of 1-{MAX_QUERY_BYTES} bytes"));
            }
            if !p.verify.unwrap_or(true) {
                return Err(format!("action: {name} is checked on the settled screen; it needs verify (the default)"));
            }
        }
    }
    Ok(())
}

/// The request id of a line refused for a duplicate key elsewhere, when `id` appears
/// exactly once in its envelope and is valid.
fn unique_id(line: &[u8]) -> Option<RequestId> {
    if strict_json::top_level_keys(line).iter().filter(|k| *k == "id").count() != 1 {
        return None;
    }
    let mut fields = serde_json::from_slice::<Map<String, Value>>(line).ok()?;
    take_id(&mut fields).ok()
}

fn take_id(fields: &mut Map<String, Value>) -> Result<RequestId, RequestError> {
    match fields.remove("id") {
        // `as_u64` is `Some` only for integers in 0..=u64::MAX written without a fraction or
        // exponent, which is exactly the set of valid ids.
        Some(Value::Number(n)) => n.as_u64().map(RequestId).ok_or_else(|| {
            RequestError::new(None, ErrorCode::InvalidId, format!("\"id\" must be a non-negative integer, got {n}"))
        }),
        Some(other) => Err(RequestError::new(
            None,
            ErrorCode::InvalidId,
            format!("\"id\" must be a non-negative integer, got {}", json_kind(&other)),
        )),
        None => Err(RequestError::new(None, ErrorCode::InvalidId, "\"id\" is missing")),
    }
}

fn params<T: DeserializeOwned>(id: RequestId, method: Method, fields: Map<String, Value>) -> Result<T, RequestError> {
    serde_json::from_value(Value::Object(fields))
        .map_err(|e| RequestError::new(Some(id), ErrorCode::InvalidParams, format!("{}: {e}", method.as_str())))
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Returns the depth reached if the JSON text nests arrays/objects deeper than `max`.
/// Brackets inside strings (including escaped quotes) do not count. Runs before parsing so a
/// hostile line cannot make serde recurse.
fn exceeds_depth(bytes: &[u8], max: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return Some(depth);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_says_everything_once() {
        assert!(check_document(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).is_ok());
        let e = check_document(br#"{"jsonrpc":"2.0","method":"ping","method":"tools/call"}"#).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        assert!(e.message.contains("\"method\" appears twice"), "{}", e.message);
        let e = check_document(br#"{"params":{"arguments":{"x":1,"x":2}}}"#).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest, "nested keys too");
        assert_eq!(check_document(b"{").unwrap_err().code, ErrorCode::InvalidJson);
        let deep = "[".repeat(40) + &"]".repeat(40);
        assert_eq!(check_document(deep.as_bytes()).unwrap_err().code, ErrorCode::NestingTooDeep);
    }

    fn code(line: &str) -> (Option<RequestId>, ErrorCode) {
        let err = parse_request(line.as_bytes()).expect_err("should be rejected");
        (err.id, err.error.code)
    }

    #[test]
    fn parses_hello_and_status() {
        let req = parse_request(br#"{"id":7,"method":"hello","protocol":"tether/1"}"#).unwrap();
        assert_eq!(req.id, RequestId(7));
        assert_eq!(req.call, Call::Hello(HelloParams { protocol: Some("tether/1".into()), client: None, kind: None }));
        let req = parse_request(br#"{"method":"status","id":0,"task_token":"abc"}"#).unwrap();
        assert_eq!(req.call, Call::Status(StatusParams {}));
        assert_eq!(req.task_token.as_deref(), Some("abc"));
    }

    #[test]
    fn rejects_each_kind_of_bad_input_with_its_own_code() {
        assert_eq!(code("{not json"), (None, ErrorCode::InvalidJson));
        assert_eq!(code("[1,2]"), (None, ErrorCode::InvalidRequest));
        assert_eq!(code(r#"{"method":"hello"}"#), (None, ErrorCode::InvalidId));
        assert_eq!(code(r#"{"id":-1,"method":"hello"}"#), (None, ErrorCode::InvalidId));
        assert_eq!(code(r#"{"id":1.5,"method":"hello"}"#), (None, ErrorCode::InvalidId));
        assert_eq!(code(r#"{"id":"1","method":"hello"}"#), (None, ErrorCode::InvalidId));
        assert_eq!(code(r#"{"id":1e3,"method":"hello"}"#), (None, ErrorCode::InvalidId));
        assert_eq!(code(r#"{"id":99999999999999999999999,"method":"hello"}"#), (None, ErrorCode::InvalidId));
        assert_eq!(code(r#"{"id":3}"#), (Some(RequestId(3)), ErrorCode::InvalidRequest));
        assert_eq!(code(r#"{"id":3,"method":"fly"}"#), (Some(RequestId(3)), ErrorCode::UnknownMethod));
        assert_eq!(code(r#"{"id":4,"method":"status","bogus":1}"#), (Some(RequestId(4)), ErrorCode::InvalidParams));
        assert_eq!(code(r#"{"id":5,"method":"hello","protocol":5}"#), (Some(RequestId(5)), ErrorCode::InvalidParams));
        assert_eq!(code(r#"{"id":6,"method":"hello","task_token":1}"#), (Some(RequestId(6)), ErrorCode::InvalidParams));
    }

    #[test]
    fn duplicate_keys_are_refused_with_the_id_when_it_is_unambiguous() {
        assert_eq!(code(r#"{"id":1,"id":2,"method":"status"}"#), (None, ErrorCode::InvalidRequest));
        assert_eq!(
            code(r#"{"id":3,"method":"fly","method":"status"}"#),
            (Some(RequestId(3)), ErrorCode::InvalidRequest)
        );
        assert_eq!(
            code(r#"{"id":4,"method":"screenshot","max_edge":100,"max_edge":200}"#),
            (Some(RequestId(4)), ErrorCode::InvalidRequest)
        );
        assert_eq!(
            code(r#"{"id":5,"method":"action","operation_id":"o","action":{"type":"tap","x":1,"x":2,"y":1}}"#),
            (Some(RequestId(5)), ErrorCode::InvalidRequest)
        );
    }

    #[test]
    fn unit_actions_reject_unknown_fields() {
        for t in ["home", "app_switcher", "spotlight", "back"] {
            let line = format!(r#"{{"id":1,"method":"action","operation_id":"o","action":{{"type":"{t}","x":1}}}}"#);
            assert_eq!(code(&line), (Some(RequestId(1)), ErrorCode::InvalidParams), "{t}");
            let ok = format!(r#"{{"id":1,"method":"action","operation_id":"o","action":{{"type":"{t}"}}}}"#);
            assert!(parse_request(ok.as_bytes()).is_ok(), "{t}");
        }
    }

    #[test]
    fn depth_limit_is_exact_and_ignores_brackets_in_strings() {
        let ok = format!(r#"{{"id":1,"method":"status","x":{}1{}}}"#, "[".repeat(31), "]".repeat(31));
        // Depth 32 is allowed; the unknown field then fails parameter validation.
        assert_eq!(code(&ok).1, ErrorCode::InvalidParams);
        let deep = format!(r#"{{"id":1,"method":"status","x":{}1{}}}"#, "[".repeat(32), "]".repeat(32));
        assert_eq!(code(&deep), (None, ErrorCode::NestingTooDeep));
        let in_string = format!(r#"{{"id":1,"method":"hello","client":"{}\"{}"}}"#, "[".repeat(40), "{".repeat(40));
        assert!(parse_request(in_string.as_bytes()).is_ok());
    }

    #[test]
    fn size_limit() {
        let pad = "x".repeat(MAX_REQUEST_BYTES);
        let line = format!(r#"{{"id":1,"method":"hello","client":"{pad}"}}"#);
        assert_eq!(code(&line), (None, ErrorCode::RequestTooLarge));
    }

    #[test]
    fn long_client_name_is_rejected() {
        let line = format!(r#"{{"id":1,"method":"hello","client":"{}"}}"#, "é".repeat(100));
        assert_eq!(code(&line), (Some(RequestId(1)), ErrorCode::InvalidParams));
    }

    #[test]
    fn every_method_is_listed_and_parses() {
        let names: Vec<&str> = Method::ALL.iter().map(|m| m.as_str()).collect();
        assert_eq!(
            names,
            [
                "hello",
                "status",
                "screenshot",
                "preview",
                "action",
                "cancel",
                "sim_state",
                "calibrate",
                "batch",
                "task_open",
                "task_list",
                "task_events",
                "task_control",
                "task_confirm",
                "task_note",
                "task_finish",
                "token",
                "pair",
                "attach",
                "detach",
                "mailbox_flush",
                "user_message",
                "task_messages",
                "video_open",
                "video_revoke",
                "task_thumbnail",
                "wait_for_change",
                "wait_for_settle",
                "find_text",
                "wait_for_text",
                "task_report",
                "task_recording",
                "metrics",
                "update_status",
                "update_upload",
                "update_install"
            ]
        );
        for m in Method::ALL {
            let line = format!(r#"{{"id":1,"method":"{}"}}"#, m.as_str());
            match parse_request(line.as_bytes()) {
                Ok(req) => assert_eq!(req.call.method(), *m),
                // `action` has required parameters; it must fail on them, not on the name.
                Err(e) => assert_eq!(e.error.code, ErrorCode::InvalidParams, "{}", m.as_str()),
            }
        }
    }

    #[test]
    fn token_and_pair_params_are_validated() {
        let ok = [
            r#"{"id":1,"method":"token","action":"list"}"#,
            r#"{"id":1,"method":"token","action":"add","name":"ci","role":"view"}"#,
            r#"{"id":1,"method":"token","action":"revoke","name":"ci"}"#,
            r#"{"id":1,"method":"pair","role":"admin","ttl_ms":1000}"#,
        ];
        for line in ok {
            assert!(parse_request(line.as_bytes()).is_ok(), "{line}");
        }
        let bad = [
            r#"{"id":1,"method":"token","action":"add"}"#,
            r#"{"id":1,"method":"token","action":"list","name":"x"}"#,
            r#"{"id":1,"method":"token","action":"rotate","name":"x","role":"view"}"#,
            r#"{"id":1,"method":"token","action":"add","name":"x","role":"agent"}"#,
            r#"{"id":1,"method":"token","action":"explode","name":"x"}"#,
            r#"{"id":1,"method":"pair","ttl_ms":0}"#,
            r#"{"id":1,"method":"pair","ttl_ms":86400001}"#,
            r#"{"id":1,"method":"pair","role":"agent"}"#,
        ];
        for line in bad {
            assert_eq!(code(line).1, ErrorCode::InvalidParams, "{line}");
        }
    }

    #[test]
    fn host_params_are_validated() {
        for line in [
            r#"{"id":1,"method":"hello","kind":"console"}"#,
            r#"{"id":1,"method":"attach","task":3}"#,
            r#"{"id":1,"method":"mailbox_flush","after_seq":0}"#,
            r#"{"id":1,"method":"user_message","text":"open Settings"}"#,
            r#"{"id":1,"method":"task_messages","after_seq":4,"wait_ms":30000}"#,
        ] {
            assert!(parse_request(line.as_bytes()).is_ok(), "{line}");
        }
        for line in [
            r#"{"id":1,"method":"hello","kind":"desktop"}"#,
            r#"{"id":1,"method":"attach"}"#,
            r#"{"id":1,"method":"mailbox_flush","after_seq":-1}"#,
            r#"{"id":1,"method":"user_message","text":""}"#,
            r#"{"id":1,"method":"task_messages","wait_ms":30001}"#,
            r#"{"id":1,"method":"video_open","ticket":"x"}"#,
        ] {
            assert_eq!(code(line).1, ErrorCode::InvalidParams, "{line}");
        }
    }

    #[test]
    fn task_params_are_validated() {
        let bad = [
            r#"{"id":1,"method":"task_open","title":""}"#,
            r#"{"id":1,"method":"task_open","title":"t","scope":{"max_steps":0}}"#,
            r#"{"id":1,"method":"task_open","title":"t","scope":{"apps":[""]}}"#,
            r#"{"id":1,"method":"task_open","title":"t","scope":{"colour":"red"}}"#,
            r#"{"id":1,"method":"task_control","id2":1,"action":"pause"}"#,
            r#"{"id":1,"method":"task_control","task":1,"action":"explode"}"#,
            r#"{"id":1,"method":"task_confirm","question":"  "}"#,
            r#"{"id":1,"method":"batch","operation_id":"b","actions":[]}"#,
            r#"{"id":1,"method":"batch","operation_id":"b","actions":[{"type":"tap","x":1,"y":1}]}"#,
            r#"{"id":1,"method":"action","operation_id":"o","action":{"type":"open_app","name":""}}"#,
        ];
        for line in bad {
            assert_eq!(code(line), (Some(RequestId(1)), ErrorCode::InvalidParams), "{line}");
        }
        let ok = parse_request(br#"{"id":3,"method":"task_control","task":9,"action":"takeover","task_token":"t"}"#);
        assert!(matches!(ok, Ok(Request { call: Call::TaskControl(TaskControlParams { task: 9, .. }), .. })));
    }

    #[test]
    fn codes_serialize_as_screaming_snake() {
        for code in [ErrorCode::InvalidJson, ErrorCode::NestingTooDeep, ErrorCode::HostNotConnected] {
            assert_eq!(serde_json::to_value(code).unwrap(), Value::String(code.as_str().to_string()));
        }
    }
}
