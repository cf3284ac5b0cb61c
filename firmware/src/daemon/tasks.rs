//! Tasks and leases: who may drive the phone right now, decided here and nowhere else.
//!
//! One task at a time (one phone). The connection that opened it is its lease. The state
//! machine ([`transition`]) is a pure function; [`Tasks`] holds the active task, answers
//! admission ([`Tasks::admit_input`], re-checked after the device lock with
//! [`Tasks::still`]) and wakes everyone who waits on a change. Persisting each change is the
//! daemon's job (`daemon/task_methods.rs`), through the [`super::store::Store`].

use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::{Principal, SessionId};
use crate::protocol::task_params::{ControlAction, TaskScope};
use crate::protocol::{Acting, ErrorCode};
use crate::sync::LockPlain;

/// A task's state (DESIGN.md, "Tasks and leases").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// The task's own input is admitted.
    Running,
    /// Waiting for a human to resume.
    Paused,
    /// A human drives; the task waits and must observe after the handback.
    TakenOver,
    /// A question waits for a human's answer.
    Waiting,
    /// Finished successfully.
    Completed,
    /// Finished unsuccessfully (or hit its limits).
    Failed,
    /// Stopped.
    Cancelled,
    /// A human rejected it.
    Rejected,
    /// Its lease (the opening connection) closed.
    Abandoned,
    /// The device changed or the daemon restarted.
    Interrupted,
}

impl TaskState {
    /// Whether the task is over.
    pub fn is_terminal(self) -> bool {
        !matches!(self, TaskState::Running | TaskState::Paused | TaskState::TakenOver | TaskState::Waiting)
    }

    /// Every state.
    pub const ALL: [TaskState; 10] = [
        TaskState::Running,
        TaskState::Paused,
        TaskState::TakenOver,
        TaskState::Waiting,
        TaskState::Completed,
        TaskState::Failed,
        TaskState::Cancelled,
        TaskState::Rejected,
        TaskState::Abandoned,
        TaskState::Interrupted,
    ];

    /// The state a wire/store name stands for.
    pub fn from_name(name: &str) -> Option<TaskState> {
        TaskState::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// The wire and store name.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Running => "running",
            TaskState::Paused => "paused",
            TaskState::TakenOver => "taken_over",
            TaskState::Waiting => "waiting",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
            TaskState::Rejected => "rejected",
            TaskState::Abandoned => "abandoned",
            TaskState::Interrupted => "interrupted",
        }
    }
}

/// Why a task request was refused. Each maps to its own wire code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// Input without the task's token while it runs.
    #[error("task {task} ({title:?}) is {state}: only its agent drives the phone now; pause it or take over first")]
    Running {
        /// The task.
        task: i64,
        /// Its title.
        title: String,
        /// Its state.
        state: &'static str,
    },
    /// The token's task is over or unknown.
    #[error("this task token belongs to a task that has ended or does not exist: stop acting")]
    Ended,
    /// `task_open` while another task is active.
    #[error(
        "task {0} is active on this phone; one task at a time (task_open with wait, or task run --wait, queues for it)"
    )]
    Active(i64),
    /// `task_open` while jobs wait for the phone ahead of this one.
    #[error("{ahead} job(s) are waiting for the phone ahead of this one: open with wait to queue behind them")]
    Queued {
        /// How many wait ahead.
        ahead: usize,
    },
    /// No such task.
    #[error("no task {0}")]
    NoSuch(i64),
    /// A control that does not apply now.
    #[error("cannot {action} task {task}: it is {state}")]
    Transition {
        /// The task.
        task: i64,
        /// The control.
        action: &'static str,
        /// Its state.
        state: &'static str,
    },
    /// The task must observe before acting.
    #[error("someone else used the phone since your last screenshot: take a fresh screenshot before acting")]
    NeedsObservation,
    /// A human said no to this step.
    #[error("a human rejected this step ({0}); continue within the task's scope")]
    Rejected(String),
    /// Limits reached; the task was stopped.
    #[error("the task reached its {0} and was stopped")]
    ScopeExceeded(String),
    /// The request was cancelled while it waited for the task to run.
    #[error("the request was cancelled while waiting for the task to run")]
    Cancelled,
    /// A question is already waiting for an answer.
    #[error("task {0} already has a question waiting for a human; ask one at a time")]
    QuestionPending(i64),
    /// An answer named a question that is not the one waiting.
    #[error("question {question} of task {task} is not waiting for an answer (waiting: {waiting:?}); look again")]
    NotWaiting {
        /// The task.
        task: i64,
        /// The question named.
        question: u64,
        /// The question waiting, if any.
        waiting: Option<u64>,
    },
}

impl TaskError {
    /// The wire code.
    pub fn code(&self) -> ErrorCode {
        match self {
            TaskError::Running { .. } => ErrorCode::TaskRunning,
            TaskError::Ended => ErrorCode::TaskEnded,
            TaskError::Active(_) | TaskError::Queued { .. } => ErrorCode::TaskActive,
            TaskError::NoSuch(_) => ErrorCode::NoSuchTask,
            TaskError::Transition { .. } => ErrorCode::InvalidTransition,
            TaskError::NeedsObservation => ErrorCode::NeedsObservation,
            TaskError::Rejected(_) => ErrorCode::Rejected,
            TaskError::ScopeExceeded(_) => ErrorCode::ScopeExceeded,
            TaskError::Cancelled => ErrorCode::Cancelled,
            TaskError::QuestionPending(_) => ErrorCode::Busy,
            TaskError::NotWaiting { .. } => ErrorCode::InvalidTransition,
        }
    }
}

/// The state machine: where `action` takes a task in `state`. `question` says whether a
/// question is pending (resuming or handing back returns to it). Approve/reject answer it.
pub fn transition(task: i64, state: TaskState, action: ControlAction, question: bool) -> Result<TaskState, TaskError> {
    use ControlAction as A;
    use TaskState as S;
    let back = if question { S::Waiting } else { S::Running };
    let next = match (action, state) {
        (_, s) if s.is_terminal() => None,
        (A::Pause, S::Running | S::Waiting) => Some(S::Paused),
        (A::Resume, S::Paused) => Some(back),
        (A::Takeover, S::Running | S::Paused | S::Waiting) => Some(S::TakenOver),
        (A::Handback, S::TakenOver) => Some(back),
        (A::Stop, _) => Some(S::Cancelled),
        (A::Approve | A::Reject, S::Waiting) => Some(S::Running),
        _ => None,
    };
    next.ok_or(TaskError::Transition { task, action: action.as_str(), state: state.as_str() })
}

/// What identifies the device a task is bound to: a different picture size means a
/// different phone (or capture), which interrupts the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DeviceIdentity {
    /// HID backend.
    pub hid: &'static str,
    /// Video backend.
    pub video: &'static str,
    /// The captured picture's size, once known.
    pub source_size: Option<(u32, u32)>,
}

impl DeviceIdentity {
    /// Whether `now` is a different device than `self` (unknown sizes match anything).
    pub fn changed(&self, now: &DeviceIdentity) -> bool {
        self.hid != now.hid
            || self.video != now.video
            || matches!((self.source_size, now.source_size), (Some(a), Some(b)) if a != b)
    }
}

/// The answer to a question: yes/no (`None`: the task ended first) and who gave it.
pub type Answer = (Option<bool>, String);

/// A question waiting for a human.
#[derive(Debug)]
pub struct Question {
    /// Per-daemon id.
    pub id: u64,
    /// What is asked.
    pub text: String,
    /// `confirm` (the agent asked) or `open_app` (outside the scope).
    pub kind: &'static str,
    /// The connection that asked: the question goes when it does.
    asker: SessionId,
    /// Its row in the store's `approvals`, when it has one: the answer is written there in
    /// the transaction of the change that answers it.
    pub approval: Option<i64>,
    answer: Option<oneshot::Sender<Answer>>,
}

/// The active task.
#[derive(Debug)]
pub struct ActiveTask {
    /// Store id.
    pub id: i64,
    /// Title.
    pub title: String,
    /// Owner.
    pub owner: String,
    token: String,
    /// The session whose connection is the lease.
    pub lease: SessionId,
    /// Current state.
    pub state: TaskState,
    /// Limits.
    pub scope: TaskScope,
    /// Apps approved so far (the scope's plus those a human allowed), lower case.
    allowed_apps: Option<Vec<String>>,
    /// Input steps admitted so far.
    pub steps: u32,
    opened: Instant,
    /// Someone else used the phone: the task must observe before acting.
    pub needs_observation: bool,
    /// The pending question.
    pub question: Option<Question>,
    /// The input gate: cancelled (and replaced) at every state change, so input admitted
    /// under one state (the agent's while running, a human's during takeover) stops at its
    /// next report boundary when a pause, takeover, handback, question or the end comes.
    gate: CancellationToken,
    device: DeviceIdentity,
    /// Who opened it (may note and finish it, like its agent and admins).
    pub opener: Principal,
}

/// How an input request was admitted.
#[derive(Debug, Clone)]
pub enum Admission {
    /// No task is active: the caller's role decides.
    Free,
    /// The task's own input; `gate` fires at the task's next state change (pause,
    /// takeover, question, stop, lease lost, limits).
    Task {
        /// The task.
        id: i64,
        /// Stops its in-flight input.
        gate: CancellationToken,
    },
    /// A human during takeover; `gate` fires at the handback (or any other change).
    Human {
        /// The task.
        id: i64,
        /// Stops the human's in-flight input.
        gate: CancellationToken,
    },
}

impl Admission {
    /// The task this input counts for.
    pub fn task(&self) -> Option<i64> {
        match self {
            Admission::Free => None,
            Admission::Task { id, .. } | Admission::Human { id, .. } => Some(*id),
        }
    }

    /// The gate that interrupts this input, if it runs under a task's rules.
    pub fn gate(&self) -> Option<&CancellationToken> {
        match self {
            Admission::Free => None,
            Admission::Task { gate, .. } | Admission::Human { gate, .. } => Some(gate),
        }
    }
}

/// After the device lock: go on, give the lock back and wait, or stop.
#[derive(Debug)]
pub enum Still {
    /// Admission still holds.
    Go,
    /// The task was paused (or taken over, or asked a question) meanwhile: wait again.
    Wait,
    /// Refused now.
    Refuse(TaskError),
}

/// A change to persist, produced under the lock and written after it.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// The task.
    pub task: i64,
    /// The new state.
    pub state: TaskState,
    /// Why / by whom.
    pub detail: serde_json::Value,
}

/// A change worked out under the lock without being made. The daemon writes
/// [`Plan::change`] to the store first and applies the plan ([`Tasks::apply`]) only once it
/// is on disk, so the task in memory never claims what the disk does not hold; a plan
/// whose write failed is dropped and nothing changed. It applies only if the task is
/// still as it was planned from (same state, same question waiting).
#[derive(Debug)]
pub struct Plan {
    /// The change to write.
    pub change: Change,
    from: TaskState,
    question: Option<u64>,
    /// The approval row and answer an approve or reject writes with the change.
    answers: Option<(i64, &'static str)>,
    effect: Effect,
}

/// What applying a [`Plan`] does beside setting the state.
#[derive(Debug)]
enum Effect {
    /// A human's control: approve and reject answer the question, handback makes the
    /// task observe first.
    Control(ControlAction),
    /// The task ends (finish).
    End,
    /// The task's agent asks a question.
    Ask {
        /// The question's id.
        qid: u64,
        /// What is asked.
        text: String,
        /// `confirm` or `open_app`.
        kind: &'static str,
        /// The connection that asks.
        asker: SessionId,
    },
}

impl Plan {
    /// The `approvals` row to write in the same transaction as the change: a question
    /// asked, or the answer to one that has a row.
    pub fn approval(&self) -> Option<super::store::ApprovalWrite> {
        use super::store::ApprovalWrite;
        match (&self.effect, self.answers) {
            (Effect::Ask { text, .. }, _) => Some(ApprovalWrite::Asked(text.clone())),
            (_, Some((id, state))) => {
                Some(ApprovalWrite::Answered { id, state, by: self.change.detail["by"].to_string() })
            }
            _ => None,
        }
    }

    fn action(&self) -> &'static str {
        match &self.effect {
            Effect::Control(a) => a.as_str(),
            Effect::End => "finish",
            Effect::Ask { .. } => "ask",
        }
    }
}

/// A plan applied: the change made, and for a question asked, its id and where its
/// answer comes.
#[derive(Debug)]
pub struct Applied {
    /// The change now made in memory.
    pub change: Change,
    /// The question asked, when the plan asked one.
    pub question: Option<(u64, oneshot::Receiver<Answer>)>,
}

/// What `Tasks::install` needs to know about a new task.
#[derive(Debug, Clone)]
pub struct NewTask {
    /// Store id.
    pub id: i64,
    /// Title.
    pub title: String,
    /// Owner, for people.
    pub owner: String,
    /// The agent's secret.
    pub token: String,
    /// The opening session: its connection is the lease.
    pub lease: SessionId,
    /// Limits.
    pub scope: TaskScope,
    /// The device it is bound to.
    pub device: DeviceIdentity,
    /// Who opened it.
    pub opener: Principal,
}

/// Who asks, as admission sees it. Its role was checked against the method's rule
/// already ([`crate::protocol::access`]); admission decides by task state alone.
#[derive(Debug, Clone, Copy)]
pub struct Asker {
    /// The connection.
    pub session: SessionId,
    /// A human, or the agent of a task (its token resolved).
    pub acting: Acting,
}

/// The registry of the active task.
#[derive(Debug)]
pub struct Tasks {
    active: std::sync::Mutex<Option<ActiveTask>>,
    /// Jobs waiting to open a task, first first ([`super::queue`]). Locked after `active`
    /// when both are needed.
    waiting: std::sync::Arc<std::sync::Mutex<super::queue::WaitQueue>>,
    changed: watch::Sender<u64>,
    next_question: std::sync::atomic::AtomicU64,
}

impl Default for Tasks {
    fn default() -> Self {
        Tasks {
            active: std::sync::Mutex::new(None),
            waiting: std::sync::Arc::default(),
            changed: watch::channel(0).0,
            next_question: std::sync::atomic::AtomicU64::new(1),
        }
    }
}

/// Constant-time token comparison (tokens are secrets).
fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Tasks {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<ActiveTask>> {
        // Plain data; every mutation completes before the guard drops.
        self.active.lock_plain()
    }

    /// Wakes everyone waiting on a task change (state, question, events).
    pub fn notify(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that changes whenever a task changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The active task's id and state, if any.
    pub fn active(&self) -> Option<(i64, TaskState)> {
        self.lock().as_ref().map(|t| (t.id, t.state))
    }

    /// Runs `f` on the active task.
    pub fn with_active<T>(&self, f: impl FnOnce(Option<&ActiveTask>) -> T) -> T {
        f(self.lock().as_ref())
    }

    /// Joins the queue for the phone; `None` when it is full.
    pub fn enqueue(&self, principal: String) -> Option<super::queue::QueueTicket> {
        super::queue::QueueTicket::join(&self.waiting, &self.changed, principal)
    }

    /// Where `ticket` waits (1 = next), and how many wait.
    pub fn queue_position(&self, ticket: &super::queue::QueueTicket) -> (Option<usize>, usize) {
        let q = self.waiting.lock_plain();
        (q.position(ticket.id), q.len())
    }

    /// Everyone waiting for the phone, first first.
    pub fn waiters(&self) -> Vec<super::queue::Waiter> {
        self.waiting.lock_plain().waiters()
    }

    /// Whether a task could open now: none is active and `ticket` is first in the queue
    /// (without a ticket: nobody waits).
    pub fn may_open(&self, ticket: Option<&super::queue::QueueTicket>) -> Result<(), TaskError> {
        let active = self.lock();
        Self::may_open_locked(&active, &self.waiting.lock_plain(), ticket)
    }

    fn may_open_locked(
        active: &Option<ActiveTask>,
        queue: &super::queue::WaitQueue,
        ticket: Option<&super::queue::QueueTicket>,
    ) -> Result<(), TaskError> {
        if let Some(t) = active.as_ref().filter(|t| !t.state.is_terminal()) {
            return Err(TaskError::Active(t.id));
        }
        match ticket {
            Some(t) if queue.position(t.id) == Some(1) => Ok(()),
            Some(t) => Err(TaskError::Queued { ahead: queue.position(t.id).map_or(queue.len(), |p| p - 1) }),
            None if queue.len() > 0 => Err(TaskError::Queued { ahead: queue.len() }),
            None => Ok(()),
        }
    }

    /// Installs a new task (the caller created it in the store). Fails if one is active,
    /// or if others wait for the phone ahead of `ticket` (see [`Tasks::may_open`]); a
    /// ticket that opens leaves the queue.
    pub fn install(&self, new: NewTask, ticket: Option<&super::queue::QueueTicket>) -> Result<(), TaskError> {
        let mut active = self.lock();
        {
            let mut queue = self.waiting.lock_plain();
            Self::may_open_locked(&active, &queue, ticket)?;
            if let Some(t) = ticket {
                queue.remove(t.id);
            }
        }
        let allowed_apps = new.scope.apps.as_ref().map(|a| a.iter().map(|s| s.trim().to_lowercase()).collect());
        *active = Some(ActiveTask {
            id: new.id,
            title: new.title,
            owner: new.owner,
            token: new.token,
            lease: new.lease,
            state: TaskState::Running,
            scope: new.scope,
            allowed_apps,
            steps: 0,
            opened: Instant::now(),
            needs_observation: false,
            question: None,
            gate: CancellationToken::new(),
            device: new.device,
            opener: new.opener,
        });
        drop(active);
        self.notify();
        Ok(())
    }

    /// Whether another task is active (for `task_open`, checked before the store write).
    pub fn busy(&self) -> Option<i64> {
        self.lock().as_ref().filter(|t| !t.state.is_terminal()).map(|t| t.id)
    }

    /// The task a token names, if it is the active, unfinished one.
    pub fn by_token(&self, token: &str) -> Result<i64, TaskError> {
        self.lock()
            .as_ref()
            .filter(|t| !t.state.is_terminal() && same_token(&t.token, token))
            .map(|t| t.id)
            .ok_or(TaskError::Ended)
    }

    fn set_state(t: &mut ActiveTask, state: TaskState, detail: serde_json::Value) -> Change {
        t.state = state;
        // Control takes effect where input executes: whatever runs under the old state
        // stops at its next report boundary and the lane releases held buttons and keys.
        t.gate.cancel();
        t.gate = CancellationToken::new();
        if state.is_terminal() {
            if let Some(mut q) = t.question.take() {
                if let Some(tx) = q.answer.take() {
                    let _ = tx.send((None, "the task ended".into()));
                }
            }
        }
        Change { task: t.id, state, detail }
    }

    /// Why input admitted for task `id` was interrupted, for the caller: its state now.
    pub fn interruption(&self, id: i64) -> String {
        match self.lock().as_ref().filter(|t| t.id == id) {
            Some(t) => format!("task {} is now {}", t.id, t.state.as_str()),
            None => format!("task {id} has ended"),
        }
    }

    /// Who opened the active task `id`, while it is unfinished.
    pub fn opener(&self, id: i64) -> Option<Principal> {
        self.lock().as_ref().filter(|t| t.id == id && !t.state.is_terminal()).map(|t| t.opener.clone())
    }

    /// Ends the active task if `id` is it and it is unfinished (planned and applied at
    /// once: for changes the daemon makes on its own, and tests).
    pub fn end(&self, id: i64, state: TaskState, detail: serde_json::Value) -> Option<Change> {
        let plan = self.plan_end(id, state, detail)?;
        self.apply(plan, None).ok().map(|a| a.change)
    }

    /// Plans ending the active task if `id` is it and it is unfinished.
    pub fn plan_end(&self, id: i64, state: TaskState, detail: serde_json::Value) -> Option<Plan> {
        let active = self.lock();
        let t = active.as_ref().filter(|t| t.id == id && !t.state.is_terminal())?;
        Some(Plan {
            change: Change { task: id, state, detail },
            from: t.state,
            question: t.question.as_ref().map(|q| q.id),
            answers: None,
            effect: Effect::End,
        })
    }

    /// The lease `session` closed: its task is abandoned.
    pub fn lease_lost(&self, session: SessionId) -> Option<Change> {
        let id = self.lock().as_ref().filter(|t| t.lease == session && !t.state.is_terminal()).map(|t| t.id)?;
        self.end(id, TaskState::Abandoned, serde_json::json!({"reason": "the connection that opened the task closed"}))
    }

    /// Applies a human's control to task `id` at once (tests; the daemon plans, writes,
    /// then applies). `reject` with `end_task` ends it `rejected`.
    pub fn control(
        &self,
        id: i64,
        action: ControlAction,
        end_task: bool,
        detail: serde_json::Value,
    ) -> Result<Change, TaskError> {
        self.control_answering(id, action, end_task, None, detail)
    }

    /// [`Tasks::plan_control`] and [`Tasks::apply`] at once.
    pub fn control_answering(
        &self,
        id: i64,
        action: ControlAction,
        end_task: bool,
        question: Option<u64>,
        detail: serde_json::Value,
    ) -> Result<Change, TaskError> {
        let plan = self.plan_control(id, action, end_task, question, detail)?;
        self.apply(plan, None).map(|a| a.change)
    }

    /// Plans a human's control of task `id`. An approve or reject may name the question
    /// it answers: refused when another question is the one waiting (the named one was
    /// withdrawn or answered meanwhile), so a human's answer never lands on a question
    /// they did not see. `reject` with `end_task` ends the task `rejected`.
    pub fn plan_control(
        &self,
        id: i64,
        action: ControlAction,
        end_task: bool,
        question: Option<u64>,
        detail: serde_json::Value,
    ) -> Result<Plan, TaskError> {
        let active = self.lock();
        let t = active.as_ref().filter(|t| t.id == id).ok_or(TaskError::NoSuch(id))?;
        let answering = matches!(action, ControlAction::Approve | ControlAction::Reject);
        let waiting = t.question.as_ref().map(|q| q.id);
        if let (Some(named), true) = (question, answering) {
            if waiting != Some(named) {
                return Err(TaskError::NotWaiting { task: id, question: named, waiting });
            }
        }
        let next = transition(id, t.state, action, t.question.is_some())?;
        let mut detail = detail;
        let mut answers = None;
        if let (Some(q), true) = (&t.question, answering) {
            let approved = action == ControlAction::Approve;
            if let Some(obj) = detail.as_object_mut() {
                obj.insert("question".into(), serde_json::json!({"id": q.id, "text": q.text}));
                obj.insert("approved".into(), approved.into());
            }
            answers = q.approval.map(|row| (row, if approved { "approved" } else { "rejected" }));
        }
        let next = if action == ControlAction::Reject && end_task { TaskState::Rejected } else { next };
        Ok(Plan {
            change: Change { task: id, state: next, detail },
            from: t.state,
            question: waiting,
            answers,
            effect: Effect::Control(action),
        })
    }

    /// Asks a question for task `id` at once (tests; the daemon plans, writes, then
    /// applies); returns its id, the receiver of the answer and the change.
    pub fn ask(
        &self,
        id: i64,
        text: String,
        kind: &'static str,
        asker: SessionId,
    ) -> Result<(u64, oneshot::Receiver<Answer>, Change), TaskError> {
        let plan = self.plan_ask(id, text, kind, asker)?;
        let applied = self.apply(plan, None)?;
        let (qid, rx) = applied.question.ok_or(TaskError::Ended)?;
        Ok((qid, rx, applied.change))
    }

    /// Plans a question for task `id` (it must be running, with no other question).
    pub fn plan_ask(&self, id: i64, text: String, kind: &'static str, asker: SessionId) -> Result<Plan, TaskError> {
        let active = self.lock();
        let t = active.as_ref().filter(|t| t.id == id && !t.state.is_terminal()).ok_or(TaskError::Ended)?;
        if t.question.is_some() {
            return Err(TaskError::QuestionPending(id));
        }
        if t.state != TaskState::Running {
            return Err(TaskError::Transition { task: id, action: "ask", state: t.state.as_str() });
        }
        let qid = self.next_question.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let detail = serde_json::json!({"question": {"id": qid, "text": text, "kind": kind}});
        Ok(Plan {
            change: Change { task: id, state: TaskState::Waiting, detail },
            from: t.state,
            question: None,
            answers: None,
            effect: Effect::Ask { qid, text, kind, asker },
        })
    }

    /// Makes a planned change, now that it is on disk; `approval` is the row a question
    /// got in the store. Refused (and nothing changes) when the task changed since the
    /// plan: another change came first.
    pub fn apply(&self, plan: Plan, approval: Option<i64>) -> Result<Applied, TaskError> {
        let applied = {
            let mut active = self.lock();
            let task = plan.change.task;
            let t = active.as_mut().filter(|t| t.id == task).ok_or(TaskError::NoSuch(task))?;
            if t.state != plan.from || t.question.as_ref().map(|q| q.id) != plan.question {
                return Err(TaskError::Transition { task, action: plan.action(), state: t.state.as_str() });
            }
            let mut question = None;
            match plan.effect {
                Effect::Control(action @ (ControlAction::Approve | ControlAction::Reject)) => {
                    if let Some(mut q) = t.question.take() {
                        if let Some(tx) = q.answer.take() {
                            let by = plan.change.detail["by"].to_string();
                            let _ = tx.send((Some(action == ControlAction::Approve), by));
                        }
                    }
                }
                Effect::Control(ControlAction::Handback) => t.needs_observation = true,
                Effect::Control(_) | Effect::End => {}
                Effect::Ask { qid, text, kind, asker } => {
                    let (tx, rx) = oneshot::channel();
                    t.question = Some(Question { id: qid, text, kind, asker, approval, answer: Some(tx) });
                    question = Some((qid, rx));
                }
            }
            Applied { change: Self::set_state(t, plan.change.state, plan.change.detail), question }
        };
        self.notify();
        Ok(applied)
    }

    /// Withdraws question `qid` (its asker went away); the task runs again if it waited.
    pub fn withdraw(&self, id: i64, qid: u64) -> Option<Change> {
        let change = {
            let mut active = self.lock();
            let t = active.as_mut().filter(|t| t.id == id)?;
            if t.question.as_ref().map(|q| q.id) != Some(qid) {
                return None;
            }
            t.question = None;
            if t.state != TaskState::Waiting {
                return None;
            }
            Self::set_state(t, TaskState::Running, serde_json::json!({"reason": "the question was withdrawn"}))
        };
        self.notify();
        Some(change)
    }

    /// The connection `session` closed: a question it asked is withdrawn.
    pub fn withdraw_asked_by(&self, session: SessionId) -> Option<Change> {
        let (id, qid) = self
            .lock()
            .as_ref()
            .and_then(|t| t.question.as_ref().filter(|q| q.asker == session).map(|q| (t.id, q.id)))?;
        self.withdraw(id, qid)
    }

    /// The device is now `now`: a task bound to another device is interrupted.
    pub fn check_device(&self, now: &DeviceIdentity) -> Option<Change> {
        let change = {
            let mut active = self.lock();
            let t = active.as_mut().filter(|t| !t.state.is_terminal())?;
            if t.device.source_size.is_none() {
                t.device.source_size = now.source_size;
            }
            if !t.device.changed(now) {
                return None;
            }
            let detail = serde_json::json!({"reason": "the device changed", "was": t.device, "now": now});
            Self::set_state(t, TaskState::Interrupted, detail)
        };
        self.notify();
        Some(change)
    }

    /// Whether `name` is inside task `id`'s app scope (no scope: everything is).
    pub fn app_allowed(&self, id: i64, name: &str) -> bool {
        let key = name.trim().to_lowercase();
        self.lock()
            .as_ref()
            .filter(|t| t.id == id)
            .is_none_or(|t| t.allowed_apps.as_ref().is_none_or(|apps| apps.contains(&key)))
    }

    /// A human allowed `name` for task `id`: it joins the scope.
    pub fn allow_app(&self, id: i64, name: &str) {
        if let Some(t) = self.lock().as_mut().filter(|t| t.id == id) {
            if let Some(apps) = t.allowed_apps.as_mut() {
                apps.push(name.trim().to_lowercase());
            }
        }
    }

    /// A successful observation by task `id`'s agent.
    pub fn observed(&self, id: i64) {
        if let Some(t) = self.lock().as_mut().filter(|t| t.id == id) {
            t.needs_observation = false;
        }
    }

    /// One admission decision without waiting. `Ok(None)`: wait for a change.
    /// `Err((e, change))`: refused, possibly after ending the task (limits, device change).
    fn decide(&self, asker: &Asker, device: &DeviceIdentity) -> Result<Option<Admission>, (TaskError, Option<Change>)> {
        let mut active = self.lock();
        let Some(t) = active.as_mut().filter(|t| !t.state.is_terminal()) else {
            return match asker.acting {
                Acting::Agent { .. } => Err((TaskError::Ended, None)),
                Acting::Human { .. } => Ok(Some(Admission::Free)),
            };
        };
        if t.device.source_size.is_none() {
            t.device.source_size = device.source_size;
        }
        if t.device.changed(device) {
            let detail = serde_json::json!({"reason": "the device changed", "was": t.device, "now": device});
            let change = Self::set_state(t, TaskState::Interrupted, detail);
            return Err((TaskError::Ended, Some(change)));
        }
        match asker.acting {
            Acting::Agent { task } if task == t.id => match t.state {
                TaskState::Running if t.needs_observation => Err((TaskError::NeedsObservation, None)),
                TaskState::Running => {
                    if let Some(max) = t.scope.max_steps {
                        if t.steps >= max {
                            let what = format!("step limit ({max} steps)");
                            let change = Self::set_state(t, TaskState::Failed, serde_json::json!({"reason": what}));
                            return Err((TaskError::ScopeExceeded(what), Some(change)));
                        }
                    }
                    if let Some(max) = t.scope.max_duration_s {
                        if t.opened.elapsed() >= Duration::from_secs(max) {
                            let what = format!("time limit ({max} s)");
                            let change = Self::set_state(t, TaskState::Failed, serde_json::json!({"reason": what}));
                            return Err((TaskError::ScopeExceeded(what), Some(change)));
                        }
                    }
                    t.steps += 1;
                    Ok(Some(Admission::Task { id: t.id, gate: t.gate.clone() }))
                }
                // Paused, taken over, or a question pending: the task's input waits.
                _ => Ok(None),
            },
            Acting::Agent { .. } => Err((TaskError::Ended, None)),
            // Taken over: the humans drive (the table let only operators this far).
            Acting::Human { .. } if t.state == TaskState::TakenOver => {
                Ok(Some(Admission::Human { id: t.id, gate: t.gate.clone() }))
            }
            Acting::Human { .. } => {
                Err((TaskError::Running { task: t.id, title: t.title.clone(), state: t.state.as_str() }, None))
            }
        }
    }

    /// Admission of an input request: returns at once when refused or free, waits while the
    /// task's own input must wait (paused, taken over, question pending), and gives up when
    /// `cancel` fires. Ending changes (limits, device change) come back to be persisted.
    ///
    /// # Cancel safety
    /// Safe until it returns: a step is reserved only in the call that returns the
    /// admission, and the caller gives it back (`unreserve`) if it does not run.
    pub async fn admit_input(
        &self,
        asker: &Asker,
        device: impl Fn() -> DeviceIdentity,
        cancel: &CancellationToken,
    ) -> Result<Admission, (TaskError, Option<Change>)> {
        let mut changes = self.subscribe();
        loop {
            changes.borrow_and_update();
            match self.decide(asker, &device()) {
                Ok(Some(admission)) => return Ok(admission),
                Ok(None) => {}
                Err((e, change)) => {
                    if change.is_some() {
                        self.notify();
                    }
                    return Err((e, change));
                }
            }
            tokio::select! {
                r = changes.changed() => if r.is_err() { return Err((TaskError::Ended, None)) },
                () = cancel.cancelled() => return Err((TaskError::Cancelled, None)),
            }
        }
    }

    /// Re-checks an admission after the device lock was taken: the task may have been
    /// paused, taken over, handed back or ended while the request queued.
    pub fn still(&self, admission: &Admission) -> Still {
        let active = self.lock();
        match (admission, active.as_ref()) {
            (Admission::Free, None) => Still::Go,
            (Admission::Free, Some(t)) if t.state.is_terminal() => Still::Go,
            // A task opened while this request queued: decide again under its rules.
            (Admission::Free, Some(_)) => Still::Wait,
            (Admission::Task { id, .. }, Some(t)) if t.id == *id => match t.state {
                TaskState::Running if t.needs_observation => Still::Refuse(TaskError::NeedsObservation),
                TaskState::Running => Still::Go,
                s if s.is_terminal() => Still::Refuse(TaskError::Ended),
                _ => Still::Wait,
            },
            (Admission::Human { id, .. }, Some(t)) if t.id == *id && t.state == TaskState::TakenOver => Still::Go,
            (Admission::Human { id, .. }, Some(t)) if t.id == *id => {
                Still::Refuse(TaskError::Running { task: t.id, title: t.title.clone(), state: t.state.as_str() })
            }
            _ => Still::Refuse(TaskError::Ended),
        }
    }

    /// Gives back a step reserved by an admission that did not run (waits again).
    pub fn unreserve(&self, admission: &Admission) {
        if let Admission::Task { id, .. } = admission {
            if let Some(t) = self.lock().as_mut().filter(|t| t.id == *id) {
                t.steps = t.steps.saturating_sub(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Role;
    use ControlAction as A;
    use TaskState as S;

    #[test]
    fn every_transition_of_the_state_machine() {
        let ok = |s, a, q| transition(1, s, a, q).unwrap();
        assert_eq!(ok(S::Running, A::Pause, false), S::Paused);
        assert_eq!(ok(S::Waiting, A::Pause, true), S::Paused);
        assert_eq!(ok(S::Paused, A::Resume, false), S::Running);
        assert_eq!(ok(S::Paused, A::Resume, true), S::Waiting, "resuming returns to the pending question");
        for s in [S::Running, S::Paused, S::Waiting] {
            assert_eq!(ok(s, A::Takeover, false), S::TakenOver);
            assert_eq!(ok(s, A::Stop, false), S::Cancelled);
        }
        assert_eq!(ok(S::TakenOver, A::Handback, false), S::Running);
        assert_eq!(ok(S::TakenOver, A::Handback, true), S::Waiting);
        assert_eq!(ok(S::TakenOver, A::Stop, false), S::Cancelled);
        assert_eq!(ok(S::Waiting, A::Approve, true), S::Running);
        assert_eq!(ok(S::Waiting, A::Reject, true), S::Running);
    }

    #[test]
    fn controls_that_do_not_apply_are_refused() {
        let bad = [
            (S::Running, A::Resume),
            (S::Running, A::Handback),
            (S::Running, A::Approve),
            (S::Paused, A::Pause),
            (S::Paused, A::Approve),
            (S::TakenOver, A::Takeover),
            (S::TakenOver, A::Resume),
            (S::TakenOver, A::Pause),
            (S::Waiting, A::Resume),
        ];
        for (s, a) in bad {
            assert!(matches!(transition(7, s, a, false), Err(TaskError::Transition { task: 7, .. })), "{s:?} {a:?}");
        }
        // The store's list of terminal states is the state machine's.
        let terminal: Vec<&str> = TaskState::ALL.iter().filter(|s| s.is_terminal()).map(|s| s.as_str()).collect();
        assert_eq!(terminal, crate::daemon::store::TERMINAL_STATES);
        assert!(TaskState::ALL.iter().all(|s| TaskState::from_name(s.as_str()) == Some(*s)));
        for s in [S::Completed, S::Failed, S::Cancelled, S::Rejected, S::Abandoned, S::Interrupted] {
            assert!(s.is_terminal());
            for a in [A::Pause, A::Resume, A::Takeover, A::Handback, A::Stop, A::Approve, A::Reject] {
                assert!(transition(1, s, a, false).is_err(), "{s:?} {a:?}");
            }
        }
    }

    fn device(size: Option<(u32, u32)>) -> DeviceIdentity {
        DeviceIdentity { hid: "sim", video: "sim", source_size: size }
    }

    fn open(tasks: &Tasks, scope: TaskScope) {
        tasks
            .install(
                NewTask {
                    id: 1,
                    title: "t".into(),
                    owner: "me".into(),
                    token: "secret".into(),
                    lease: SessionId(1),
                    scope,
                    device: device(Some((1920, 1080))),
                    opener: Principal::Session { session: 1 },
                },
                None,
            )
            .unwrap();
    }

    const HUMAN: Acting = Acting::Human { role: Role::Operate };
    const AGENT: Acting = Acting::Agent { task: 1 };

    fn decide(tasks: &Tasks, acting: Acting) -> Result<Option<Admission>, TaskError> {
        tasks.decide(&Asker { session: SessionId(2), acting }, &device(Some((1920, 1080)))).map_err(|(e, _)| e)
    }

    #[test]
    fn admission_rules() {
        let tasks = Tasks::default();
        // No task: free for humans; an agent's task has ended.
        assert!(matches!(decide(&tasks, HUMAN), Ok(Some(Admission::Free))));
        assert_eq!(decide(&tasks, AGENT).unwrap_err(), TaskError::Ended);
        open(&tasks, TaskScope::default());
        assert!(matches!(decide(&tasks, AGENT), Ok(Some(Admission::Task { id: 1, .. }))));
        assert!(matches!(decide(&tasks, HUMAN), Err(TaskError::Running { task: 1, .. })));
        // The agent of another (earlier) task.
        assert_eq!(decide(&tasks, Acting::Agent { task: 2 }).unwrap_err(), TaskError::Ended);
        // Paused: the task waits, humans are refused.
        tasks.control(1, A::Pause, false, serde_json::json!({})).unwrap();
        assert!(matches!(decide(&tasks, AGENT), Ok(None)));
        assert!(matches!(decide(&tasks, Acting::Human { role: Role::Admin }), Err(TaskError::Running { .. })));
        // Taken over: humans drive, the task waits.
        tasks.control(1, A::Takeover, false, serde_json::json!({})).unwrap();
        assert!(matches!(decide(&tasks, HUMAN), Ok(Some(Admission::Human { id: 1, .. }))));
        assert!(matches!(decide(&tasks, AGENT), Ok(None)));
        // Handed back: the task must observe first.
        tasks.control(1, A::Handback, false, serde_json::json!({})).unwrap();
        assert_eq!(decide(&tasks, AGENT).unwrap_err(), TaskError::NeedsObservation);
        tasks.observed(1);
        assert!(matches!(decide(&tasks, AGENT), Ok(Some(Admission::Task { .. }))));
        // Ended: the agent's task is over, humans are free again.
        tasks.end(1, S::Completed, serde_json::json!({})).unwrap();
        assert_eq!(decide(&tasks, AGENT).unwrap_err(), TaskError::Ended);
        assert!(matches!(decide(&tasks, HUMAN), Ok(Some(Admission::Free))));
    }

    #[test]
    fn limits_and_device_changes_end_the_task() {
        let tasks = Tasks::default();
        open(&tasks, TaskScope { max_steps: Some(2), ..TaskScope::default() });
        assert!(decide(&tasks, AGENT).is_ok());
        assert!(decide(&tasks, AGENT).is_ok());
        assert!(matches!(decide(&tasks, AGENT), Err(TaskError::ScopeExceeded(_))));
        assert_eq!(tasks.active(), Some((1, S::Failed)));

        let tasks = Tasks::default();
        open(&tasks, TaskScope::default());
        let other = device(Some((1280, 720)));
        let r = tasks.decide(&Asker { session: SessionId(2), acting: AGENT }, &other);
        let (e, change) = r.unwrap_err();
        assert_eq!(e, TaskError::Ended);
        assert_eq!(change.unwrap().state, S::Interrupted);
        // No picture (signal lost) is not a different phone.
        assert!(!device(Some((1, 1))).changed(&device(None)));
        // The watcher's check: same device, nothing; another size, interrupted once.
        let tasks = Tasks::default();
        open(&tasks, TaskScope::default());
        assert!(tasks.check_device(&device(None)).is_none());
        assert!(tasks.check_device(&device(Some((1920, 1080)))).is_none());
        assert_eq!(tasks.check_device(&device(Some((1170, 2532)))).unwrap().state, S::Interrupted);
        assert!(tasks.check_device(&device(Some((1, 1)))).is_none());
    }

    #[test]
    fn questions_one_at_a_time_answered_by_humans_and_withdrawn_by_askers() {
        let tasks = Tasks::default();
        open(&tasks, TaskScope::default());
        let (qid, mut rx, change) = tasks.ask(1, "send it?".into(), "confirm", SessionId(5)).unwrap();
        assert_eq!(change.state, S::Waiting);
        assert_eq!(tasks.ask(1, "again?".into(), "confirm", SessionId(5)).unwrap_err(), TaskError::QuestionPending(1));
        // Paused while waiting, resumed: back to the question.
        tasks.control(1, A::Pause, false, serde_json::json!({})).unwrap();
        assert_eq!(tasks.control(1, A::Resume, false, serde_json::json!({})).unwrap().state, S::Waiting);
        let answered = tasks.control(1, A::Approve, false, serde_json::json!({})).unwrap();
        assert_eq!(answered.state, S::Running);
        assert_eq!(answered.detail["approved"], true);
        assert!(matches!(rx.try_recv(), Ok((Some(true), _))));
        let (qid2, _rx, _) = tasks.ask(1, "and this?".into(), "confirm", SessionId(6)).unwrap();
        assert_ne!(qid, qid2);
        // An answer naming the old question does not answer the new one.
        let stale = tasks.control_answering(1, A::Approve, false, Some(qid), serde_json::json!({}));
        assert!(matches!(stale, Err(TaskError::NotWaiting { waiting: Some(w), .. }) if w == qid2));
        assert!(tasks.withdraw(1, qid).is_none(), "an old question id withdraws nothing");
        assert!(tasks.withdraw_asked_by(SessionId(5)).is_none(), "asked by another connection");
        assert_eq!(tasks.withdraw_asked_by(SessionId(6)).unwrap().state, S::Running);
        let _ = qid2;
        // A question only while running.
        tasks.control(1, A::Pause, false, serde_json::json!({})).unwrap();
        assert!(matches!(tasks.ask(1, "?".into(), "confirm", SessionId(5)), Err(TaskError::Transition { .. })));
    }

    #[test]
    fn a_plan_changes_nothing_until_it_is_applied_and_applies_only_to_what_it_saw() {
        use crate::daemon::store::ApprovalWrite;
        let tasks = Tasks::default();
        open(&tasks, TaskScope::default());
        // Asking: nothing waits until the plan is applied with the question's row.
        let ask = tasks.plan_ask(1, "pay?".into(), "confirm", SessionId(5)).unwrap();
        assert_eq!(ask.approval(), Some(ApprovalWrite::Asked("pay?".into())));
        assert_eq!(tasks.active(), Some((1, S::Running)), "a plan is not a change");
        let applied = tasks.apply(ask, Some(42)).unwrap();
        let (qid, mut answer) = applied.question.unwrap();
        assert_eq!(applied.change.state, S::Waiting);
        // Approving: the asker hears nothing until the approval is applied, and the plan
        // carries the answer for the question's row.
        let by = serde_json::json!({"by": {"role": "operate"}});
        let approve = tasks.plan_control(1, A::Approve, false, Some(qid), by).unwrap();
        assert_eq!(
            approve.approval(),
            Some(ApprovalWrite::Answered { id: 42, state: "approved", by: r#"{"role":"operate"}"#.into() })
        );
        assert!(answer.try_recv().is_err(), "not answered before the change is on disk");
        assert_eq!(tasks.active(), Some((1, S::Waiting)));
        assert_eq!(tasks.apply(approve, None).unwrap().change.state, S::Running);
        assert!(matches!(answer.try_recv(), Ok((Some(true), _))));
        // A plan dropped (its write failed) leaves the task as it was.
        let finish = tasks.plan_end(1, S::Completed, serde_json::json!({})).unwrap();
        drop(finish);
        assert_eq!(tasks.active(), Some((1, S::Running)));
        assert!(tasks.busy().is_some());
        // Another change between a plan and its apply: the plan is refused, the other
        // change stands.
        let finish = tasks.plan_end(1, S::Completed, serde_json::json!({})).unwrap();
        tasks.control(1, A::Pause, false, serde_json::json!({})).unwrap();
        let late = tasks.apply(finish, None).unwrap_err();
        assert_eq!(late, TaskError::Transition { task: 1, action: "finish", state: "paused" });
        assert_eq!(tasks.active(), Some((1, S::Paused)));
        let finish = tasks.plan_end(1, S::Completed, serde_json::json!({})).unwrap();
        assert_eq!(tasks.apply(finish, None).unwrap().change.state, S::Completed);
        assert!(tasks.plan_end(1, S::Failed, serde_json::json!({})).is_none(), "ended once");
    }

    #[test]
    fn app_scope_is_case_insensitive_and_grows_on_approval() {
        let tasks = Tasks::default();
        open(&tasks, TaskScope { apps: Some(vec!["Settings".into()]), ..TaskScope::default() });
        assert!(tasks.app_allowed(1, "settings"));
        assert!(!tasks.app_allowed(1, "Messages"));
        tasks.allow_app(1, "Messages");
        assert!(tasks.app_allowed(1, " messages "));
        let free = Tasks::default();
        open(&free, TaskScope::default());
        assert!(free.app_allowed(1, "anything"));
    }

    #[test]
    fn losing_the_lease_abandons_only_its_own_task() {
        let tasks = Tasks::default();
        open(&tasks, TaskScope::default());
        assert!(tasks.lease_lost(SessionId(9)).is_none());
        let change = tasks.lease_lost(SessionId(1)).unwrap();
        assert_eq!(change.state, S::Abandoned);
        assert!(tasks.lease_lost(SessionId(1)).is_none(), "once");
    }

    #[test]
    fn every_state_change_fires_the_gate_of_input_admitted_before_it() {
        let tasks = Tasks::default();
        open(&tasks, TaskScope::default());
        let agent = decide(&tasks, AGENT).unwrap().unwrap();
        let gate = agent.gate().unwrap().clone();
        assert!(!gate.is_cancelled());
        tasks.control(1, A::Takeover, false, serde_json::json!({})).unwrap();
        assert!(gate.is_cancelled(), "takeover interrupts the agent's running input");
        let human = decide(&tasks, HUMAN).unwrap().unwrap();
        let human_gate = human.gate().unwrap().clone();
        tasks.control(1, A::Handback, false, serde_json::json!({})).unwrap();
        assert!(human_gate.is_cancelled(), "handback interrupts the human's running input");
        tasks.observed(1);
        let again = decide(&tasks, AGENT).unwrap().unwrap();
        assert!(!again.gate().unwrap().is_cancelled());
        tasks.control(1, A::Pause, false, serde_json::json!({})).unwrap();
        assert!(again.gate().unwrap().is_cancelled(), "pause interrupts");
        assert_eq!(tasks.interruption(1), "task 1 is now paused");
    }

    #[test]
    fn still_rechecks_after_the_lock() {
        let tasks = Tasks::default();
        open(&tasks, TaskScope::default());
        let admission = decide(&tasks, AGENT).unwrap().unwrap();
        assert!(matches!(tasks.still(&admission), Still::Go));
        tasks.control(1, A::Pause, false, serde_json::json!({})).unwrap();
        assert!(matches!(tasks.still(&admission), Still::Wait));
        tasks.control(1, A::Takeover, false, serde_json::json!({})).unwrap();
        let human = decide(&tasks, HUMAN).unwrap().unwrap();
        assert!(matches!(tasks.still(&human), Still::Go));
        tasks.control(1, A::Handback, false, serde_json::json!({})).unwrap();
        assert!(matches!(tasks.still(&human), Still::Refuse(TaskError::Running { .. })));
        assert!(matches!(tasks.still(&admission), Still::Refuse(TaskError::NeedsObservation)));
        tasks.control(1, A::Stop, false, serde_json::json!({})).unwrap();
        assert!(matches!(tasks.still(&admission), Still::Refuse(TaskError::Ended)));
    }
}
