//! Who may call what: the one role table.
//!
//! Every method has one [`Rule`] ([`Method::access`]); the daemon checks each request
//! against it exactly once, after resolving the task token, and every transport uses the
//! same table to list what a caller may call (`hello`, MCP `tools/list`, console buttons)
//! and may refuse early. The checks are pure: they take what the daemon resolved (the
//! caller's role, the token's task, whether the caller opened a task) and decide.
//!
//! The rules, in words:
//! - Anyone connected may `hello`, read `status` and `cancel` its own requests.
//! - `view` may also look (screenshots, previews, the simulator's state) and read tasks.
//! - `operate` may also drive the phone, calibrate, open tasks and control any task
//!   (pause, resume, take over, hand back, stop, approve, reject): a human must always be
//!   able to stop what an agent does, whoever opened it.
//! - A task's note and finish speak for its outcome: its agent, the principal that opened
//!   it, or an admin.
//! - A live task token makes a request its task's agent, whatever the connection's role:
//!   it may look, act, ask (`task_confirm`), note, finish and stop, for its own task only,
//!   and never the human-only methods (control, calibrate, open a task, the simulator's
//!   state).

use serde::Serialize;

use super::task_params::ControlAction;
use super::{Call, Method};

/// A caller's role, lowest first: each role may do all that a lower one may.
///
/// `Agent` is the agent user *without* a task token: `hello`, `status` and `cancel` only.
/// With its task's token it acts as that task's agent ([`Acting::Agent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The agent user: bound to one task by its task token.
    Agent,
    /// Watch only: screenshots, previews, status, tasks' journals.
    View,
    /// Drive the phone, open and control tasks, and everything `View` may do.
    Operate,
    /// Tokens, pairing, settings, and everything `Operate` may do.
    Admin,
}

impl Role {
    /// Every role, lowest first.
    pub const ALL: [Role; 4] = [Role::Agent, Role::View, Role::Operate, Role::Admin];

    /// The wire name (`agent`, `view`, `operate`, `admin`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::View => "view",
            Role::Operate => "operate",
            Role::Admin => "admin",
        }
    }

    /// Looks a role up by its wire name.
    pub fn from_name(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == name)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a task token does to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRule {
    /// Not looked at, live or dead: the role decides (`hello`, `status`, `cancel`,
    /// `task_list`), so an agent whose task just ended can still cancel and read status.
    Ignored,
    /// Humans only: a live token is refused, a dead one is `TASK_ENDED`.
    Refused,
    /// The token's agent may, for its own task only (a `task` in the params must be it);
    /// a dead token is `TASK_ENDED`.
    OwnTask,
}

/// Which humans (callers without a task token) a task-scoped method admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Humans {
    /// Anyone with the rule's `min_role`.
    Any,
    /// The principal that opened the task, or an admin.
    OpenerOrAdmin,
}

/// The access rule of one method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// The least role that may call it without a task token; `None`: only a task's agent.
    pub min_role: Option<Role>,
    /// What a task token does.
    pub token: TokenRule,
    /// Which humans a task-scoped call admits.
    pub humans: Humans,
}

/// Whom a request acts as once its token is resolved (only the daemon knows which tokens
/// are live).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "as", rename_all = "snake_case")]
pub enum Acting {
    /// No task token (or one the method ignores): the caller's role.
    Human {
        /// The caller's role.
        role: Role,
    },
    /// The live token of task `task`.
    Agent {
        /// The task it acts for.
        task: i64,
    },
}

impl Acting {
    /// The task an agent acts for; `None` for humans.
    pub const fn task(self) -> Option<i64> {
        match self {
            Acting::Agent { task } => Some(task),
            Acting::Human { .. } => None,
        }
    }

    /// Whether this is a task's agent.
    pub const fn is_agent(self) -> bool {
        matches!(self, Acting::Agent { .. })
    }
}

/// Why a request is refused (`PERMISSION_DENIED`). Each says what would be allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// The caller's role is below the method's.
    #[error("{method} needs the {needed} role; this caller is {have}")]
    Role {
        /// The method.
        method: &'static str,
        /// The least role it needs.
        needed: Role,
        /// The caller's role.
        have: Role,
    },
    /// Only a task's agent may call it.
    #[error("{method} is asked by a task's agent: send its task_token")]
    AgentOnly {
        /// The method.
        method: &'static str,
    },
    /// Humans only; a task token may not call it.
    #[error("{method} is for humans (operate role); a task token may not call it")]
    HumansOnly {
        /// The method.
        method: &'static str,
    },
    /// A task token named another task.
    #[error("a task token acts only for its own task {own}, not task {given}")]
    OtherTask {
        /// The token's task.
        own: i64,
        /// The task named in the request.
        given: i64,
    },
    /// Not the task's opener, and not an admin.
    #[error("only task {task}'s agent (with its token), the principal that opened it, or an admin may {method} it")]
    NotOpener {
        /// The method.
        method: &'static str,
        /// The task.
        task: i64,
    },
}

impl Method {
    /// This method's access rule: the table.
    pub const fn access(self) -> Rule {
        use Humans::Any;
        use Role::{Agent, Operate, View};
        use TokenRule::{Ignored, OwnTask, Refused};
        let (min_role, token, humans) = match self {
            Method::Hello | Method::Status | Method::Cancel => (Some(Agent), Ignored, Any),
            Method::TaskList => (Some(View), Ignored, Any),
            Method::Screenshot
            | Method::Preview
            | Method::TaskEvents
            | Method::TaskThumbnail
            | Method::TaskReport
            | Method::TaskRecording
            | Method::WaitForChange
            | Method::WaitForSettle
            | Method::FindText
            | Method::WaitForText => (Some(View), OwnTask, Any),
            Method::SimState | Method::Metrics | Method::UpdateStatus => (Some(View), Refused, Any),
            Method::UpdateUpload | Method::UpdateInstall => (Some(Role::Admin), Refused, Any),
            Method::Action | Method::Batch => (Some(Operate), OwnTask, Any),
            Method::Calibrate | Method::TaskOpen => (Some(Operate), Refused, Any),
            // A task's agent may stop its own task: see `Call::access`.
            Method::TaskControl => (Some(Operate), Refused, Any),
            Method::TaskConfirm => (None, OwnTask, Any),
            Method::TaskNote | Method::TaskFinish => (Some(Operate), OwnTask, Humans::OpenerOrAdmin),
            Method::Token | Method::Pair => (Some(Role::Admin), Refused, Any),
            // A host watches (view) and talks to the agent (operate); an agent's token is
            // its stamp already and never attaches to another task.
            Method::Attach | Method::MailboxFlush => (Some(View), Refused, Any),
            Method::Detach | Method::VideoRevoke => (Some(Agent), Ignored, Any),
            Method::UserMessage => (Some(Operate), Refused, Any),
            Method::TaskMessages | Method::VideoOpen => (Some(View), OwnTask, Any),
        };
        Rule { min_role, token, humans }
    }
}

impl Call {
    /// This call's rule: its method's, except that a task's agent may `stop` its own task.
    pub fn access(&self) -> Rule {
        match self {
            Call::TaskControl(p) if p.action == ControlAction::Stop => {
                Rule { token: TokenRule::OwnTask, ..Method::TaskControl.access() }
            }
            _ => self.method().access(),
        }
    }

    /// The task a task-scoped call names, if it names one.
    pub fn task_id(&self) -> Option<i64> {
        match self {
            Call::TaskEvents(p) => Some(p.task),
            Call::TaskThumbnail(p) => Some(p.task),
            Call::TaskReport(p) => Some(p.task),
            Call::TaskRecording(p) => Some(p.task),
            Call::TaskControl(p) => Some(p.task),
            Call::TaskNote(p) => p.task,
            Call::TaskFinish(p) => p.task,
            Call::TaskMessages(p) => p.task,
            Call::Attach(p) => Some(p.task),
            _ => None,
        }
    }

    /// The same call aimed at `task`: what an attached connection sends goes to the task
    /// it attached to, whatever task id it wrote (reference 001: the server stamps the
    /// target). Calls that name no task, and `attach` itself, are unchanged.
    pub fn stamped(&self, task: i64) -> Call {
        let mut call = self.clone();
        match &mut call {
            Call::TaskEvents(p) => p.task = task,
            Call::TaskThumbnail(p) => p.task = task,
            Call::TaskReport(p) => p.task = task,
            Call::TaskRecording(p) => p.task = task,
            Call::TaskControl(p) => p.task = task,
            Call::TaskNote(p) => p.task = Some(task),
            Call::TaskFinish(p) => p.task = Some(task),
            Call::TaskMessages(p) => p.task = Some(task),
            _ => {}
        }
        call
    }
}

impl Rule {
    /// The whole decision, once the token is resolved. `task` is the task the call names
    /// ([`Call::task_id`]); `is_opener(task)` answers for [`Humans::OpenerOrAdmin`], and
    /// should say `true` for a task that is not active, so that the handler answers with
    /// that task's state (`INVALID_TRANSITION`, `NO_SUCH_TASK`).
    pub fn check(
        &self,
        method: Method,
        acting: Acting,
        task: Option<i64>,
        is_opener: impl FnOnce(i64) -> bool,
    ) -> Result<(), Denied> {
        let name = method.as_str();
        match acting {
            Acting::Agent { task: own } => match self.token {
                TokenRule::Refused => Err(Denied::HumansOnly { method: name }),
                TokenRule::OwnTask => match task {
                    Some(given) if given != own => Err(Denied::OtherTask { own, given }),
                    _ => Ok(()),
                },
                // The daemon never resolves an ignored token; were it to, the agent's task
                // grants nothing here.
                TokenRule::Ignored => Ok(()),
            },
            Acting::Human { role } => {
                let needed = self.min_role.ok_or(Denied::AgentOnly { method: name })?;
                if role < needed {
                    return Err(Denied::Role { method: name, needed, have: role });
                }
                match (self.humans, task) {
                    (Humans::OpenerOrAdmin, Some(t)) if role < Role::Admin && !is_opener(t) => {
                        Err(Denied::NotOpener { method: name, task: t })
                    }
                    _ => Ok(()),
                }
            }
        }
    }

    /// For listings (`hello`, MCP `tools/list`, console buttons): whether a caller with
    /// `role` (`None`: not authenticated) may ever call it, with a live task token or not.
    pub fn lists_for(&self, role: Option<Role>, has_token: bool) -> bool {
        let by_role = match (role, self.min_role) {
            (Some(have), Some(needed)) => have >= needed,
            _ => false,
        };
        let by_token = has_token && self.token == TokenRule::OwnTask;
        // A caller without a role never reaches a method, token or not.
        role.is_some() && (by_role || by_token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::parse_request;

    /// One sample call of each method (every method must appear: the walk below checks).
    fn sample(method: Method) -> Call {
        let params = match method {
            Method::Hello | Method::Status | Method::Preview | Method::SimState | Method::TaskList => "{}",
            Method::Screenshot => "{}",
            Method::Action => r#"{"operation_id":"o1","action":{"type":"home"}}"#,
            Method::Batch => r#"{"operation_id":"o2","actions":[{"type":"home"}]}"#,
            Method::Cancel => r#"{"request_id":1}"#,
            Method::Calibrate => "{}",
            Method::TaskOpen => r#"{"title":"t"}"#,
            Method::TaskEvents => r#"{"task":7}"#,
            Method::TaskThumbnail => r#"{"task":7,"seq":3}"#,
            Method::TaskReport => r#"{"task":7}"#,
            Method::TaskRecording => r#"{"task":7,"offset":0,"length":1024}"#,
            Method::Metrics => "{}",
            Method::UpdateStatus => "{}",
            Method::UpdateUpload => r#"{"offset":0,"total":3,"data":"AAAA"}"#,
            Method::UpdateInstall => "{}",
            Method::TaskControl => r#"{"task":7,"action":"pause"}"#,
            Method::TaskConfirm => r#"{"question":"ok?"}"#,
            Method::TaskNote => r#"{"task":7,"text":"n"}"#,
            Method::TaskFinish => r#"{"task":7,"ok":true}"#,
            Method::Token => r#"{"action":"list"}"#,
            Method::Pair => r#"{"role":"view"}"#,
            Method::Attach => r#"{"task":7}"#,
            Method::Detach | Method::VideoOpen | Method::VideoRevoke => "{}",
            Method::WaitForChange | Method::WaitForSettle => r#"{"timeout_ms":10}"#,
            Method::FindText => r#"{"text":"Settings"}"#,
            Method::WaitForText => r#"{"text":"Done","timeout_ms":10}"#,
            Method::MailboxFlush => r#"{"after_seq":0}"#,
            Method::UserMessage => r#"{"text":"hi"}"#,
            Method::TaskMessages => r#"{"task":7}"#,
        };
        // The envelope carries the parameters beside `id` and `method`.
        let fields = &params[1..params.len() - 1];
        let sep = if fields.is_empty() { "" } else { "," };
        let line = format!(r#"{{"id":1,"method":"{}"{sep}{fields}}}"#, method.as_str());
        match parse_request(line.as_bytes()) {
            Ok(r) => r.call,
            Err(e) => panic!("sample {}: {:?}", method.as_str(), e.error),
        }
    }

    /// The table written out a second time, by hand, as the matrix a person reviews:
    /// per method, which of agent (no token), view, operate, admin may call it, and
    /// whether the task's own agent (live token) may.
    const EXPECTED: &[(&str, [bool; 4], bool)] = &[
        // method        agent  view   operate admin   own agent
        ("hello", [true, true, true, true], true),
        ("status", [true, true, true, true], true),
        ("screenshot", [false, true, true, true], true),
        ("preview", [false, true, true, true], true),
        ("action", [false, false, true, true], true),
        ("cancel", [true, true, true, true], true),
        ("sim_state", [false, true, true, true], false),
        ("calibrate", [false, false, true, true], false),
        ("batch", [false, false, true, true], true),
        ("task_open", [false, false, true, true], false),
        ("task_list", [false, true, true, true], false),
        ("task_events", [false, true, true, true], true),
        ("task_control", [false, false, true, true], false),
        ("task_confirm", [false, false, false, false], true),
        ("task_note", [false, false, true, true], true),
        ("task_finish", [false, false, true, true], true),
        ("token", [false, false, false, true], false),
        ("pair", [false, false, false, true], false),
        ("attach", [false, true, true, true], false),
        ("detach", [true, true, true, true], true),
        ("mailbox_flush", [false, true, true, true], false),
        ("user_message", [false, false, true, true], false),
        ("task_messages", [false, true, true, true], true),
        ("video_open", [false, true, true, true], true),
        ("video_revoke", [true, true, true, true], true),
        ("task_thumbnail", [false, true, true, true], true),
        ("wait_for_change", [false, true, true, true], true),
        ("wait_for_settle", [false, true, true, true], true),
        ("find_text", [false, true, true, true], true),
        ("wait_for_text", [false, true, true, true], true),
        ("task_report", [false, true, true, true], true),
        ("task_recording", [false, true, true, true], true),
        ("metrics", [false, true, true, true], false),
        ("update_status", [false, true, true, true], false),
        ("update_upload", [false, false, false, true], false),
        ("update_install", [false, false, false, true], false),
    ];

    #[test]
    fn every_method_and_role_against_the_table() {
        assert_eq!(EXPECTED.len(), Method::ALL.len(), "every method has a row");
        for &(name, by_role, own_agent) in EXPECTED {
            let method = Method::from_name(name).unwrap_or_else(|| panic!("{name} is a method"));
            let call = sample(method);
            let rule = call.access();
            for (role, expected) in Role::ALL.into_iter().zip(by_role) {
                // Opener: the caller opened the named task, so only the role decides.
                let got = rule.check(method, Acting::Human { role }, call.task_id(), |_| true);
                assert_eq!(got.is_ok(), expected, "{name} by {role}: {got:?}");
                assert_eq!(rule.lists_for(Some(role), false), expected, "{name} listed for {role}");
            }
            // The agent user with its task's token. Methods that ignore tokens (`hello`,
            // `status`, `cancel`, `task_list`) leave it its own role.
            let as_agent = match rule.token {
                TokenRule::Ignored => rule.check(method, Acting::Human { role: Role::Agent }, None, |_| true),
                _ => rule.check(method, Acting::Agent { task: 7 }, Some(7), |_| true),
            };
            assert_eq!(as_agent.is_ok(), own_agent, "{name} by its task's agent: {as_agent:?}");
            // Not authenticated: nothing, whatever the token.
            assert!(!rule.lists_for(None, false) && !rule.lists_for(None, true), "{name} listed for nobody");
        }
    }

    #[test]
    fn an_agent_acts_only_for_its_own_task() {
        let agent = Acting::Agent { task: 8 };
        for method in [
            Method::TaskEvents,
            Method::TaskThumbnail,
            Method::TaskReport,
            Method::TaskRecording,
            Method::TaskNote,
            Method::TaskFinish,
        ] {
            let call = sample(method); // names task 7
            assert_eq!(
                call.access().check(method, agent, call.task_id(), |_| true),
                Err(Denied::OtherTask { own: 8, given: 7 }),
                "{}",
                method.as_str()
            );
        }
        // Stop is the one control an agent may send, and only for its own task.
        let stop = parse_request(br#"{"id":1,"method":"task_control","task":7,"action":"stop"}"#)
            .map(|r| r.call)
            .unwrap_or_else(|e| panic!("{:?}", e.error));
        assert_eq!(stop.access().check(Method::TaskControl, Acting::Agent { task: 7 }, Some(7), |_| true), Ok(()));
        assert_eq!(
            stop.access().check(Method::TaskControl, Acting::Agent { task: 8 }, Some(7), |_| true),
            Err(Denied::OtherTask { own: 8, given: 7 })
        );
        let pause = sample(Method::TaskControl);
        assert_eq!(
            pause.access().check(Method::TaskControl, Acting::Agent { task: 7 }, Some(7), |_| true),
            Err(Denied::HumansOnly { method: "task_control" })
        );
    }

    #[test]
    fn note_and_finish_belong_to_the_opener_or_an_admin() {
        for method in [Method::TaskNote, Method::TaskFinish] {
            let call = sample(method);
            let rule = call.access();
            let operator = Acting::Human { role: Role::Operate };
            assert_eq!(
                rule.check(method, operator, Some(7), |_| false),
                Err(Denied::NotOpener { method: method.as_str(), task: 7 })
            );
            assert_eq!(rule.check(method, operator, Some(7), |t| t == 7), Ok(()));
            assert_eq!(rule.check(method, Acting::Human { role: Role::Admin }, Some(7), |_| false), Ok(()));
            // A view caller is refused for its role before ownership is asked.
            assert!(matches!(
                rule.check(method, Acting::Human { role: Role::View }, Some(7), |_| true),
                Err(Denied::Role { needed: Role::Operate, .. })
            ));
        }
        // Control is any operator's: a human can always stop what an agent does.
        let pause = sample(Method::TaskControl);
        assert_eq!(
            pause.access().check(Method::TaskControl, Acting::Human { role: Role::Operate }, Some(7), |_| false),
            Ok(())
        );
    }

    #[test]
    fn roles_are_ordered_and_named() {
        assert!(Role::Agent < Role::View && Role::View < Role::Operate && Role::Operate < Role::Admin);
        for r in Role::ALL {
            assert_eq!(Role::from_name(r.as_str()), Some(r));
            assert_eq!(serde_json::to_value(r).ok(), Some(serde_json::json!(r.as_str())));
        }
        assert_eq!(Role::from_name("root"), None);
    }
}
