//! Parameters of the third-party host methods (reference 001: `attach`, `detach`,
//! `mailbox_flush`, `user_message`, and the agent's `task_messages`) and of live video
//! (reference 000: `video_open`, `video_revoke`).

use serde::{Deserialize, Serialize};

/// Most events one `mailbox_flush` returns; `more` says to ask again after the last.
pub const MAX_FLUSH_EVENTS: u32 = 1000;
/// Most messages one `task_messages` returns.
pub const MAX_MESSAGES: u32 = 200;
/// Longest wait of `task_messages`, in milliseconds.
pub const MAX_MESSAGES_WAIT_MS: u64 = 30_000;

/// What a connection is, fixed by its first `hello` (reference 001: a pinned kind stops a
/// client from flipping it to get around a check).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectionKind {
    /// The web console.
    Console,
    /// A third-party host: a program that attaches to tasks and talks to their agents
    /// (the default when `hello` names none).
    #[default]
    Host,
    /// An agent's own connection: it acts with its task token and never attaches.
    Agent,
}

impl ConnectionKind {
    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            ConnectionKind::Console => "console",
            ConnectionKind::Host => "host",
            ConnectionKind::Agent => "agent",
        }
    }
}

/// Parameters of `attach`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttachParams {
    /// The running task to mirror.
    pub task: i64,
}

/// Parameters of `detach` (none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetachParams {}

/// Parameters of `mailbox_flush`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MailboxFlushParams {
    /// The last seq the client has of the attached task (0: none).
    pub after_seq: i64,
}

/// Parameters of `user_message`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserMessageParams {
    /// What the person says to the attached task's agent.
    pub text: String,
}

/// Parameters of `task_messages`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskMessagesParams {
    /// The task (an agent's token names its own; humans name one).
    #[serde(default)]
    pub task: Option<i64>,
    /// Only messages after this seq (the last one read).
    #[serde(default)]
    pub after_seq: Option<i64>,
    /// Wait up to this long for a message when there is none yet (default 0).
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

/// Parameters of `video_open` (none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VideoOpenParams {}

/// Parameters of `video_revoke` (none: the caller's tickets and viewers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VideoRevokeParams {}

/// Checks `task_messages`' ranges.
pub fn validate_messages(p: &TaskMessagesParams) -> Result<(), String> {
    if p.wait_ms.is_some_and(|w| w > MAX_MESSAGES_WAIT_MS) {
        return Err(format!("task_messages: wait_ms must be at most {MAX_MESSAGES_WAIT_MS}"));
    }
    if p.after_seq.is_some_and(|s| s < 0) {
        return Err("task_messages: after_seq must not be negative".into());
    }
    Ok(())
}

/// Checks `mailbox_flush`'s range.
pub fn validate_flush(p: &MailboxFlushParams) -> Result<(), String> {
    if p.after_seq < 0 {
        return Err("mailbox_flush: after_seq must not be negative (0: from the start)".into());
    }
    Ok(())
}
