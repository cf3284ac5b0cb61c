//! Parameters of the task methods (`task_open` … `task_finish`) and `batch`.

use serde::{Deserialize, Serialize};

use super::params::{ActionSpec, Expect, ReturnImage};

/// Longest task title, note, question or summary, in bytes.
pub const MAX_TASK_TEXT: usize = 4096;
/// Most sub-steps in one `batch`.
pub const MAX_BATCH_ACTIONS: usize = 32;
/// Most apps in a task's scope.
pub const MAX_SCOPE_APPS: usize = 64;

/// What a task may do; every limit is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TaskScope {
    /// Most input steps (actions and batch sub-steps) before the task is stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
    /// Longest run, in seconds, before the task is stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_duration_s: Option<u64>,
    /// Apps the task may open by name; opening another first asks a human (HID alone
    /// cannot see which app is in front, so the check is on `open_app`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apps: Option<Vec<String>>,
}

/// Parameters of `task_open`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskOpenParams {
    /// What the task is for, shown to people.
    pub title: String,
    /// Who runs it (defaults to the caller's identity).
    #[serde(default)]
    pub owner: Option<String>,
    /// Limits.
    #[serde(default)]
    pub scope: TaskScope,
    /// Stream the task's events to this connection (its lease) as `event` messages
    /// until it ends (default `true`; `false` to read them with `task_events` instead).
    #[serde(default)]
    pub events: Option<bool>,
    /// Record the screen from now until the task ends (an MP4 kept with the journal;
    /// `task_report` and `/api/tasks/{id}/recording.mp4` give it).
    #[serde(default)]
    pub record: bool,
    /// When the phone is busy, wait for it in order of arrival instead of failing with
    /// `TASK_ACTIVE`: `queue` events say the position until the task opens. Closing the
    /// connection leaves the queue.
    #[serde(default)]
    pub wait: bool,
    /// With `wait`: give up after this long (`TIMEOUT`), 1..=86400000 ms (default: no limit).
    #[serde(default)]
    pub wait_timeout_ms: Option<u64>,
}

/// The longest `wait_timeout_ms`: a day.
pub const MAX_WAIT_MS: u64 = 86_400_000;

/// Parameters of `task_list`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskListParams {
    /// Most tasks returned, newest first (default 20, at most 200).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// Parameters of `task_events`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskEventsParams {
    /// The task (`task`: `id` is the request's own id).
    pub task: i64,
    /// Only events after this seq (resume after a reconnect).
    #[serde(default)]
    pub after_seq: Option<i64>,
    /// Keep streaming new events as `event` messages until the task ends.
    #[serde(default)]
    pub follow: bool,
}

/// Parameters of `task_thumbnail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskThumbnailParams {
    /// The task.
    pub task: i64,
    /// The step's seq (its event in `task_events` says `"thumbnail": true`).
    pub seq: i64,
}

/// Parameters of `task_report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskReportParams {
    /// The task.
    pub task: i64,
}

/// Most bytes of a recording one `task_recording` answers (base64 makes it a third more).
pub const MAX_RECORDING_CHUNK: u64 = 1 << 20;

/// Parameters of `task_recording`: `length` bytes of the task's MP4 from `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskRecordingParams {
    /// The task.
    pub task: i64,
    /// First byte.
    #[serde(default)]
    pub offset: u64,
    /// Bytes wanted, 1..=[`MAX_RECORDING_CHUNK`].
    #[serde(default = "default_chunk")]
    pub length: u64,
}

fn default_chunk() -> u64 {
    MAX_RECORDING_CHUNK
}

/// A control verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlAction {
    /// Running → paused.
    Pause,
    /// Paused → running.
    Resume,
    /// A human drives; the task waits.
    Takeover,
    /// Back to the task, which must observe before acting.
    Handback,
    /// End the task (`cancelled`).
    Stop,
    /// Answer the pending question yes.
    Approve,
    /// Answer the pending question no.
    Reject,
}

impl ControlAction {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ControlAction::Pause => "pause",
            ControlAction::Resume => "resume",
            ControlAction::Takeover => "takeover",
            ControlAction::Handback => "handback",
            ControlAction::Stop => "stop",
            ControlAction::Approve => "approve",
            ControlAction::Reject => "reject",
        }
    }
}

/// Parameters of `task_control`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskControlParams {
    /// The task.
    pub task: i64,
    /// What to do.
    pub action: ControlAction,
    /// Why (recorded with the event).
    #[serde(default)]
    pub reason: Option<String>,
    /// `reject` only: end the task as `rejected` instead of telling the agent no.
    #[serde(default)]
    pub end_task: bool,
    /// `approve`/`reject`: the id of the question answered (from `status` or the task's
    /// events). Refused when another question is waiting; without it, the waiting one is
    /// answered.
    #[serde(default)]
    pub question: Option<u64>,
}

/// Parameters of `task_confirm` (an agent asks a human; answered by approve/reject).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskConfirmParams {
    /// The question, for a person.
    pub question: String,
}

/// Parameters of `task_note`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskNoteParams {
    /// The task (optional with a task token).
    #[serde(default)]
    pub task: Option<i64>,
    /// The note.
    pub text: String,
}

/// Parameters of `task_finish`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskFinishParams {
    /// The task (optional with a task token).
    #[serde(default)]
    pub task: Option<i64>,
    /// Succeeded (`completed`) or not (`failed`).
    pub ok: bool,
    /// What happened.
    #[serde(default)]
    pub summary: Option<String>,
    /// A wrapped command's exit code (`tether task run`).
    #[serde(default)]
    pub exit_code: Option<i32>,
}

/// Parameters of `batch`: several actions on one observation, checked one by one.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchParams {
    /// Idempotency key of the whole batch, 1–128 bytes.
    pub operation_id: String,
    /// The screenshot the coordinates refer to.
    #[serde(default)]
    pub observation_id: Option<String>,
    /// The sub-steps, 1–32.
    pub actions: Vec<ActionSpec>,
    /// Watch the screen after the last sub-step until it settles and say what the batch
    /// changed (default true), as `action` does.
    #[serde(default)]
    pub verify: Option<bool>,
    /// What the batch should do to the screen (default `any`).
    #[serde(default)]
    pub expect: Option<Expect>,
    /// A picture in the answer (default none).
    #[serde(default)]
    pub return_image: Option<ReturnImage>,
    /// Settled after this long without a change, 50..=5000 ms (default 300).
    #[serde(default)]
    pub quiet_ms: Option<u64>,
    /// Longest wait for it to settle, 0..=30000 ms (default 3000).
    #[serde(default)]
    pub settle_timeout_ms: Option<u64>,
}

fn text_ok(what: &str, s: &str, allow_empty: bool) -> Result<(), String> {
    if (!allow_empty && s.trim().is_empty()) || s.len() > MAX_TASK_TEXT {
        return Err(format!("{what} must be {}1-{MAX_TASK_TEXT} bytes", if allow_empty { "0 or " } else { "" }));
    }
    Ok(())
}

/// Checks `task_open`.
pub fn validate_open(p: &TaskOpenParams) -> Result<(), String> {
    text_ok("task_open: title", &p.title, false)?;
    if let Some(owner) = &p.owner {
        text_ok("task_open: owner", owner, false)?;
    }
    if let Some(apps) = &p.scope.apps {
        if apps.len() > MAX_SCOPE_APPS || apps.iter().any(|a| a.trim().is_empty() || a.len() > 128) {
            return Err(format!("task_open: scope.apps takes at most {MAX_SCOPE_APPS} names of 1-128 bytes"));
        }
    }
    if p.scope.max_steps == Some(0) || p.scope.max_duration_s == Some(0) {
        return Err("task_open: scope limits must be positive".into());
    }
    match p.wait_timeout_ms {
        Some(ms) if !p.wait => Err(format!("task_open: wait_timeout_ms {ms} without wait: true")),
        Some(ms) if !(1..=MAX_WAIT_MS).contains(&ms) => {
            Err(format!("task_open: wait_timeout_ms must be 1..={MAX_WAIT_MS} (a day)"))
        }
        _ => Ok(()),
    }
}

/// Checks the free-text fields of the other task methods.
pub fn validate_text(what: &str, s: &str) -> Result<(), String> {
    text_ok(what, s, false)
}
