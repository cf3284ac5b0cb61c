//! The task methods (`task_open` … `task_finish`), the journal of every change and step,
//! and the human-in-the-loop questions. Admission itself lives in `tasks.rs`.

use std::time::Duration;

use serde_json::{json, Value};

use super::store::{ApprovalWrite, StepRecord, Store, StoreError};
use tokio_util::sync::CancellationToken;

use super::tasks::{Applied, Change, NewTask, Plan, TaskError, TaskState};
use super::{Daemon, DaemonError, Session, SessionMessage};
use crate::protocol::task_params::{
    ControlAction, TaskConfirmParams, TaskControlParams, TaskEventsParams, TaskFinishParams, TaskListParams,
    TaskNoteParams, TaskOpenParams, TaskThumbnailParams,
};
use crate::protocol::{Acting, Denied, ErrorBody, ErrorCode, Event};
use crate::sync::LockPlain;

/// Events read from the store per round while streaming.
const EVENTS_PER_READ: u32 = 256;
/// Repeated refusals of one connection within this window share one journal event.
pub const REFUSAL_WINDOW: std::time::Duration = std::time::Duration::from_secs(1);

/// A refusal's identity for coalescing: task, connection, what was tried, code.
type RefusalKey = (i64, super::SessionId, String, &'static str);

/// Repeated refusals being counted, per [`RefusalKey`]: when the window opened and how
/// many were counted since the last journal write.
#[derive(Debug, Default)]
pub(super) struct RefusalWindows {
    open: std::collections::HashMap<RefusalKey, (std::time::Instant, u64)>,
}

/// What [`RefusalWindows::note`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Noted {
    /// Write an event standing for this many refusals (this one and any still counted).
    Write(u64),
    /// Counted, the first since the last write: write the count when the window closes.
    CountedFirst,
    /// Counted.
    Counted,
}

impl RefusalWindows {
    /// Notes one refusal at `now`.
    fn note(&mut self, key: RefusalKey, now: std::time::Instant) -> Noted {
        // Bounded: windows of other tasks (ended ones are flushed) and long-quiet keys go.
        if self.open.len() > 256 {
            self.open.retain(|_, (at, n)| *n > 0 || now.saturating_duration_since(*at) < REFUSAL_WINDOW);
        }
        match self.open.get_mut(&key) {
            Some((at, counted)) if now.saturating_duration_since(*at) < REFUSAL_WINDOW => {
                *counted += 1;
                if *counted == 1 {
                    Noted::CountedFirst
                } else {
                    Noted::Counted
                }
            }
            Some((at, counted)) => {
                let count = *counted + 1;
                *at = now;
                *counted = 0;
                Noted::Write(count)
            }
            None => {
                self.open.insert(key, (now, 0));
                Noted::Write(1)
            }
        }
    }

    /// Takes the refusals of `key` counted but not written (its window closed), and opens
    /// a new window from now.
    fn take_pending(&mut self, key: &RefusalKey, now: std::time::Instant) -> u64 {
        match self.open.get_mut(key) {
            Some((at, counted)) => {
                *at = now;
                std::mem::take(counted)
            }
            None => 0,
        }
    }

    /// Removes `task`'s windows; returns those with refusals not yet written.
    fn take_task(&mut self, task: i64) -> Vec<(RefusalKey, u64)> {
        let keys: Vec<RefusalKey> = self.open.keys().filter(|k| k.0 == task).cloned().collect();
        keys.into_iter().filter_map(|k| self.open.remove(&k).map(|(_, n)| (k, n))).filter(|(_, n)| *n > 0).collect()
    }
}

/// Writes a state change to the store, with the `approvals` row it asks or answers, in
/// one transaction; returns the id of an approval asked. A task that ended also triggers
/// retention (once the change is written).
pub(super) async fn persist_change(
    store: &Store,
    change: &Change,
    approval: Option<ApprovalWrite>,
    keep: u32,
) -> Result<Option<i64>, StoreError> {
    let (_, asked) =
        store.transition(change.task, change.state.as_str().into(), change.detail.clone(), approval).await?;
    if change.state.is_terminal() {
        if let Err(e) = store.retain(keep).await {
            tracing::warn!(error = %e, "task retention failed");
        }
    }
    Ok(asked)
}

/// A 256-bit random token, hex: from the kernel's CSPRNG (`/dev/urandom` never blocks
/// once the pool is initialised, which it is long before the daemon starts).
fn new_token() -> Result<String, DaemonError> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)).map_err(|e| {
        tracing::error!(error = %e, "no randomness for a task token");
        DaemonError::NoRandomness
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Who did something, for the journal.
pub(super) fn by(session: &Session, acting: Acting) -> Value {
    let identity = serde_json::to_value(session.caller.identity).unwrap_or(Value::Null);
    json!({
        "role": session.caller.role,
        "identity": identity,
        "principal": session.principal(),
        "with_task_token": acting.is_agent(),
    })
}

/// What a task's agent may read of its own journal: a human's steps during a takeover
/// keep their tool and outcome but not their arguments (what a person typed is theirs).
fn redacted_for_agent(kind: &str, mut body: Value) -> Value {
    if kind == "step" && body["by"]["with_task_token"] != json!(true) {
        if let Some(args) = body.get_mut("args") {
            *args = json!({"redacted": "a human's input during the task"});
        }
    }
    body
}

impl Daemon {
    /// Persists one change the daemon made on its own (a lease lost, the device changed,
    /// a limit reached, a question withdrawn) under the journal lock (store order = change
    /// order) and wakes followers. Nobody waits for an answer: the change stands in memory
    /// (a task that ended stays ended), and one the disk refused is logged at error; the
    /// store still holds the state before it, and a restart marks an unfinished task
    /// `interrupted`.
    pub(super) async fn persist(&self, change: Change) {
        if change.state.is_terminal() {
            self.flush_refusals(change.task).await;
            self.task_ending(change.task).await;
        }
        let _journal = self.inner.journal.lock().await;
        let written = persist_change(&self.inner.store, &change, None, self.inner.tasks_kept).await;
        if change.state.is_terminal() {
            self.sweep_recordings().await;
        }
        if let Err(e) = written {
            tracing::error!(
                task = change.task,
                state = change.state.as_str(),
                error = %e,
                "could not record a task transition the daemon made: the journal does not have it"
            );
        }
        self.inner.tasks.notify();
    }

    /// Makes a change someone asked for and waits to hear about: written first (with
    /// its approval row), applied in memory only once it is on disk. A write the disk
    /// refused answers `STORAGE_FAILED` and nothing changed. The caller holds the
    /// journal lock.
    /// Returns the change applied and the id of the approval row a question got.
    async fn commit(&self, plan: Plan) -> Result<(Applied, Option<i64>), DaemonError> {
        if plan.change.state.is_terminal() {
            self.task_ending(plan.change.task).await;
        }
        let asked = persist_change(&self.inner.store, &plan.change, plan.approval(), self.inner.tasks_kept).await?;
        let task = plan.change.task;
        if plan.change.state.is_terminal() {
            self.sweep_recordings().await;
        }
        match self.inner.tasks.apply(plan, asked) {
            Ok(applied) => Ok((applied, asked)),
            Err(e) => {
                // Something the daemon did on its own (a lease lost, the device changed)
                // came between the plan and its write; its own transition follows this one
                // in the journal, and memory holds it. A question asked meanwhile was not.
                tracing::warn!(task, error = %e, "a change was written but another came first");
                if let Some(row) = asked {
                    let why = "the task changed before the question was asked".to_string();
                    if let Err(w) = self.inner.store.approval_answered(row, "withdrawn".into(), why).await {
                        tracing::error!(task, error = %w, "could not record a question withdrawn");
                    }
                }
                Err(e.into())
            }
        }
    }

    async fn append(&self, task: i64, kind: &str, body: Value) {
        if let Err(e) = self.inner.store.append(task, kind.into(), body).await {
            tracing::error!(task, kind, error = %e, "could not record a task event");
        }
        self.inner.tasks.notify();
    }

    /// Records a refusal in the active task's journal (who tried what, and why). Repeats
    /// of the same refusal by the same connection within [`REFUSAL_WINDOW`] are counted,
    /// not written one by one: each `refused` event carries the `count` of refusals it
    /// stands for, and what is still counted is written when the task ends.
    pub(super) async fn record_refusal(&self, session: &Session, acting: Acting, what: &str, e: &DaemonError) {
        let e = ErrorBody::from(e);
        if e.code == ErrorCode::TaskEnded {
            return; // no task to record it in
        }
        let Some((task, _)) = self.inner.tasks.active() else { return };
        let key = (task, session.id, what.to_string(), e.code.as_str());
        let count = { self.inner.phone.state().refusals.note(key.clone(), std::time::Instant::now()) };
        let body = json!({"what": what, "code": e.code, "message": e.message, "by": by(session, acting)});
        match count {
            Noted::Write(count) => self.append_refusal(task, body, count).await,
            Noted::CountedFirst => {
                // Written when the window closes, so the journal is at most a window behind.
                let daemon = self.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(REFUSAL_WINDOW).await;
                    let pending = daemon.inner.phone.state().refusals.take_pending(&key, std::time::Instant::now());
                    if pending > 0 {
                        daemon.append_refusal(task, body, pending).await;
                    }
                });
            }
            Noted::Counted => {}
        }
    }

    async fn append_refusal(&self, task: i64, mut body: Value, count: u64) {
        body["count"] = json!(count);
        self.append(task, "refused", body).await;
    }

    /// What ends with a task, written before its last state so that a follower of the
    /// journal, which stops at that state, has it all: the recording (finished as of
    /// now) and the screen as the task left it.
    async fn task_ending(&self, task: i64) {
        let at = std::time::Instant::now();
        self.stop_recording(task, at).await;
        self.keep_final_picture(task).await;
    }

    /// Writes the refusals still counted for `task` (it ended).
    async fn flush_refusals(&self, task: i64) {
        let pending = { self.inner.phone.state().refusals.take_task(task) };
        for ((_, session, what, code), count) in pending {
            let body = json!({"what": what, "code": code, "session": session, "count": count, "coalesced": true});
            self.append(task, "refused", body).await;
        }
    }

    /// Records one step (tool, args, result, duration, caller) when it counted for a task.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn record_step(
        &self,
        session: &Session,
        acting: Acting,
        task: Option<i64>,
        tool: &str,
        args: &Value,
        result: &Result<Value, DaemonError>,
        took: Duration,
        thumbnail: Option<Vec<u8>>,
    ) {
        let Some(task) = task else { return };
        self.append_step(task, tool, args, result, took, by(session, acting), thumbnail).await;
    }

    /// Appends one step to `task`'s journal (`caller` as [`by`] describes it).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn append_step(
        &self,
        task: i64,
        tool: &str,
        args: &Value,
        result: &Result<Value, DaemonError>,
        took: Duration,
        caller: Value,
        thumbnail: Option<Vec<u8>>,
    ) {
        // A verified step's picture after it (the report shows both).
        let after_thumbnail = result
            .as_ref()
            .ok()
            .and_then(|v| v["after_observation_id"].as_str())
            .and_then(|id| self.inner.phone.state().observations.thumbnail(id))
            .map(|png| png.as_ref().clone());
        let result = match result {
            Ok(v) => json!({"ok": true, "result": v}),
            Err(e) => json!({"ok": false, "error": ErrorBody::from(e)}),
        };
        let step = StepRecord {
            after_thumbnail,
            tool: tool.into(),
            args: args.clone(),
            result,
            duration_ms: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
            caller,
            thumbnail,
        };
        if let Err(e) = self.inner.store.append_step(task, step).await {
            tracing::error!(task, error = %e, "could not record a step");
        }
        self.inner.tasks.notify();
    }

    /// `task_thumbnail`: the picture a step acted on (PNG, base64), for people reading
    /// the journal. The role table already limited a token to its own task.
    pub(super) async fn task_thumbnail(&self, p: &TaskThumbnailParams) -> Result<Value, DaemonError> {
        match self.inner.store.thumbnail(p.task, p.seq).await? {
            Some(png) => Ok(json!({
                "task": p.task,
                "seq": p.seq,
                "mime_type": "image/png",
                "data": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, png),
            })),
            None => Err(DaemonError::NotFound(format!("task {} has no step {} with a thumbnail", p.task, p.seq))),
        }
    }

    pub(super) async fn task_open(
        &self,
        session: &Session,
        p: &TaskOpenParams,
        cancel: &CancellationToken,
    ) -> Result<Value, DaemonError> {
        let ticket = match p.wait {
            true => Some(self.wait_for_phone(session, p.wait_timeout_ms, cancel).await?),
            false => None,
        };
        self.inner.tasks.may_open(ticket.as_ref())?;
        let owner = p.owner.clone().unwrap_or_else(|| session.principal().label());
        let token = new_token()?;
        let scope = serde_json::to_value(&p.scope).unwrap_or(Value::Null);
        let device = self.device_identity();
        let _journal = self.inner.journal.lock().await;
        // The task and its device are written in one transaction before it exists in
        // memory: a task_open answered is on disk.
        let device_event = json!({"device": device, "lease": session.id});
        let id = self.inner.store.create_task(p.title.clone(), owner.clone(), scope, Some(device_event)).await?;
        let new = NewTask {
            id,
            title: p.title.clone(),
            owner: owner.clone(),
            token: token.clone(),
            lease: session.id,
            scope: p.scope.clone(),
            device,
            opener: session.principal().clone(),
        };
        if let Err(e) = self.inner.tasks.install(new, ticket.as_ref()) {
            // Another task won the race between the check and the store write.
            if let Err(w) = self.inner.store.set_state(id, "cancelled".into(), json!({"reason": e.to_string()})).await {
                tracing::error!(task = id, error = %w, "could not record that a task lost the race to open");
            }
            return Err(e.into());
        }
        drop(_journal);
        self.inner.tasks.notify();
        if p.record {
            self.start_recording(id).await;
        }
        tracing::info!(task = id, title = %crate::logtext::capped(&p.title), owner = %owner, session = session.id.0, "task opened");
        if p.events.unwrap_or(true) {
            // The lease hears its task: events stream to the opening connection until the
            // task ends or the connection closes, as if it had followed `task_events`.
            let (daemon, events, cancel) = (self.clone(), session.events.clone(), session.cancel.clone());
            tokio::spawn(async move {
                if let Err(e) = daemon.stream_events(id, 0, false, &events, &cancel).await {
                    tracing::debug!(task = id, error = %e, "the lease's event stream ended");
                }
            });
        }
        Ok(json!({
            "id": id, "token": token, "state": "running", "lease": session.id,
            "events": p.events.unwrap_or(true), "record": p.record,
        }))
    }

    /// Waits in the queue until this caller may open a task: first in line and the phone
    /// free. Sends a `queue` event each time its place changes (the first at once). Ends
    /// with the ticket (still in the queue: the install takes it out) or an error, and then
    /// the ticket's drop moves the others up.
    async fn wait_for_phone(
        &self,
        session: &Session,
        timeout_ms: Option<u64>,
        cancel: &CancellationToken,
    ) -> Result<super::queue::QueueTicket, DaemonError> {
        let tasks = &self.inner.tasks;
        let ticket = tasks
            .enqueue(session.principal().label())
            .ok_or(DaemonError::Busy("jobs waiting for the phone (32 at most); try again later"))?;
        let started = tokio::time::Instant::now();
        let deadline = timeout_ms.map(|ms| started + Duration::from_millis(ms));
        let mut changes = tasks.subscribe();
        let mut said: Option<(Option<usize>, usize, Option<i64>)> = None;
        let mut seq = 0;
        // Transports that answer a refusal differently from a stream start the stream now.
        let _ = session.events.send(SessionMessage::Streaming).await;
        loop {
            changes.borrow_and_update();
            let active = tasks.busy();
            let (position, waiting) = tasks.queue_position(&ticket);
            if position == Some(1) && active.is_none() {
                return Ok(ticket);
            }
            if said != Some((position, waiting, active)) {
                said = Some((position, waiting, active));
                seq += 1;
                let mut body = serde_json::Map::new();
                body.insert("position".into(), json!(position));
                body.insert("waiting".into(), json!(waiting));
                body.insert("active_task".into(), json!(active));
                let event = Event { event: "queue".into(), seq, body };
                if session.events.send(SessionMessage::Event(event)).await.is_err() {
                    return Err(DaemonError::Cancelled);
                }
            }
            let timeout = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = changes.changed() => if r.is_err() { return Err(DaemonError::ShuttingDown) },
                () = cancel.cancelled() => return Err(DaemonError::Cancelled),
                () = timeout => {
                    let waited_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                    let ahead = position.map_or(waiting, |p| p - 1);
                    return Err(DaemonError::PhoneWaitTimeout { waited_ms, ahead, active: tasks.busy() });
                }
            }
        }
    }

    /// Why `action` cannot apply to `task`, which is not the active task: it has finished
    /// (say in which state) or it does not exist.
    pub(super) async fn not_active(&self, task: i64, action: &'static str) -> DaemonError {
        match self.inner.store.task(task).await {
            Ok(t) => {
                let state = TaskState::from_name(&t.state).map_or("unknown", TaskState::as_str);
                TaskError::Transition { task, action, state }.into()
            }
            Err(_) => TaskError::NoSuch(task).into(),
        }
    }

    pub(super) async fn task_list(&self, p: &TaskListParams) -> Result<Value, DaemonError> {
        let limit = p.limit.unwrap_or(20).clamp(1, 200);
        let tasks = self.inner.store.list(limit).await?;
        let active = self.inner.tasks.active();
        let list: Vec<Value> = tasks
            .into_iter()
            .map(|t| {
                // The in-memory state is the newest (the store write may still be queued).
                let state = match active {
                    Some((id, s)) if id == t.id => s.as_str().to_string(),
                    _ => t.state,
                };
                json!({"id": t.id, "title": t.title, "owner": t.owner, "state": state})
            })
            .collect();
        Ok(json!({"tasks": list}))
    }

    /// `task_events`: replay after `after_seq`; with `follow`, stream new events as they are
    /// written, until the task has ended and everything was sent. An `after_seq` the task
    /// never reached is refused (a client resuming from a seq of another daemon or task
    /// would otherwise wait in silence).
    pub(super) async fn task_events(
        &self,
        session: &Session,
        acting: Acting,
        p: &TaskEventsParams,
        cancel: &CancellationToken,
    ) -> Result<Value, DaemonError> {
        let redact = acting.is_agent();
        let last = p.after_seq.unwrap_or(0).max(0);
        let task = self.inner.store.task(p.task).await.map_err(|_| TaskError::NoSuch(p.task))?;
        let last_seq = self.inner.store.last_seq(p.task).await?;
        if last > last_seq {
            return Err(DaemonError::AfterEnd { task: p.task, after_seq: last, last_seq });
        }
        if !p.follow {
            let events = self.inner.store.events_after(p.task, last, 10_000).await?;
            let list: Vec<Value> = events
                .into_iter()
                .map(|e| {
                    let data = if redact { redacted_for_agent(&e.kind, e.body) } else { e.body };
                    json!({"seq": e.seq, "at_ms": e.at_ms, "kind": e.kind, "data": data})
                })
                .collect();
            let approvals: Vec<Value> = self
                .inner
                .store
                .approvals(p.task)
                .await?
                .into_iter()
                .map(|(question, state, by)| json!({"question": question, "state": state, "answered_by": by}))
                .collect();
            return Ok(json!({
                "task": {"id": task.id, "title": task.title, "state": task.state},
                "events": list,
                "approvals": approvals,
            }));
        }
        let _ = session.events.send(SessionMessage::Streaming).await;
        let (last, state) = self.stream_events(p.task, last, redact, &session.events, cancel).await?;
        // The response must not overtake the events still in the session's queue.
        let (tx, rx) = tokio::sync::oneshot::channel();
        let forwarded = session.events_rx.lock_plain().is_none();
        if forwarded && session.events.send(SessionMessage::Flush(tx)).await.is_ok() {
            let _ = rx.await;
        }
        Ok(json!({"id": p.task, "state": state, "last_seq": last}))
    }

    /// Streams task `task`'s events after `after` into `events` until the task has ended
    /// and everything was sent; returns the last seq sent and the final state. `redact`:
    /// for the task's agent ([`redacted_for_agent`]).
    pub(super) async fn stream_events(
        &self,
        task: i64,
        after: i64,
        redact: bool,
        events: &tokio::sync::mpsc::Sender<SessionMessage>,
        cancel: &CancellationToken,
    ) -> Result<(i64, String), DaemonError> {
        let mut last = after;
        let mut changes = self.inner.tasks.subscribe();
        loop {
            changes.borrow_and_update();
            let batch = self.inner.store.events_after(task, last, EVENTS_PER_READ).await?;
            let got = batch.len();
            for e in batch {
                let mut body = serde_json::Map::new();
                body.insert("task".into(), json!(task));
                body.insert("kind".into(), json!(e.kind));
                body.insert("at_ms".into(), json!(e.at_ms));
                let data = if redact { redacted_for_agent(&e.kind, e.body) } else { e.body };
                body.insert("data".into(), data);
                let event = Event { event: "task".into(), seq: u64::try_from(e.seq).unwrap_or(0), body };
                tokio::select! {
                    r = events.send(SessionMessage::Event(event)) => if r.is_err() { return Err(DaemonError::Cancelled) },
                    () = cancel.cancelled() => return Err(DaemonError::Cancelled),
                }
                last = e.seq;
            }
            if got >= EVENTS_PER_READ as usize {
                continue;
            }
            let ended = match self.inner.tasks.active() {
                Some((id, s)) if id == task => s.is_terminal(),
                _ => true,
            };
            if ended {
                // The final transition may still be queued for the store: read once more
                // after it (the journal lock orders it), then finish.
                drop(self.inner.journal.lock().await);
                let rest = self.inner.store.events_after(task, last, EVENTS_PER_READ).await?;
                if !rest.is_empty() {
                    continue;
                }
                let state = self.inner.store.task(task).await?.state;
                return Ok((last, state));
            }
            tokio::select! {
                r = changes.changed() => if r.is_err() { return Err(DaemonError::ShuttingDown) },
                () = cancel.cancelled() => return Err(DaemonError::Cancelled),
                // Belt and braces: a missed wake-up costs at most a second.
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    /// `task_control`: any operator may control the active task (a human can always stop
    /// what an agent does); a task's agent may only stop its own (the role table).
    pub(super) async fn task_control(
        &self,
        session: &Session,
        acting: Acting,
        p: &TaskControlParams,
    ) -> Result<Value, DaemonError> {
        let mut detail = json!({"by": by(session, acting), "action": p.action.as_str()});
        if let Some(r) = &p.reason {
            detail["reason"] = json!(r);
        }
        let journal = self.inner.journal.lock().await;
        let plan = match self.inner.tasks.plan_control(p.task, p.action, p.end_task, p.question, detail) {
            Ok(plan) => plan,
            Err(TaskError::NoSuch(_)) => {
                drop(journal);
                return Err(self.not_active(p.task, p.action.as_str()).await);
            }
            Err(e) => return Err(e.into()),
        };
        if plan.change.state.is_terminal() {
            self.flush_refusals(p.task).await;
        }
        // On disk first: a refused write answers STORAGE_FAILED and the task is as it was
        // (a question stays unanswered, a running task runs).
        let change = self.commit(plan).await?.0.change;
        drop(journal);
        if p.action == ControlAction::Takeover {
            // What the agent saw before a human took over must not authorize its actions.
            self.inner.phone.state().observations.invalidate_task(p.task, "a human took over the task");
        }
        self.inner.tasks.notify();
        tracing::info!(task = p.task, action = p.action.as_str(), state = change.state.as_str(), "task control");
        Ok(json!({"id": p.task, "state": change.state}))
    }

    /// Asks a human about task `id` and waits for the answer. Waits for the task to run
    /// first (a question is asked only while running); the asker going away withdraws it.
    pub(super) async fn ask_human(
        &self,
        session: &Session,
        id: i64,
        text: String,
        kind: &'static str,
        cancel: &CancellationToken,
    ) -> Result<bool, DaemonError> {
        let mut changes = self.inner.tasks.subscribe();
        let (qid, answer, approval) = loop {
            changes.borrow_and_update();
            let asked = {
                let _journal = self.inner.journal.lock().await;
                match self.inner.tasks.plan_ask(id, text.clone(), kind, session.id) {
                    // The question and its approval row are on disk before anyone can
                    // answer it: a question the disk refused is not asked.
                    Ok(plan) => {
                        let (applied, row) = self.commit(plan).await?;
                        let (qid, rx) = applied.question.ok_or(TaskError::Ended)?;
                        Some((qid, rx, row))
                    }
                    // Not running (paused, taken over) or another question waits: ask once
                    // the task runs and the other question is answered.
                    Err(TaskError::Transition { .. } | TaskError::QuestionPending(_)) => None,
                    Err(e) => return Err(e.into()),
                }
            };
            self.inner.tasks.notify();
            if let Some(asked) = asked {
                break asked;
            }
            tokio::select! {
                r = changes.changed() => if r.is_err() { return Err(DaemonError::ShuttingDown) },
                () = cancel.cancelled() => return Err(DaemonError::Cancelled),
            }
        };
        // An approve or reject wrote its answer into the row with the transition it made
        // (before the answer reached this asker); a question withdrawn is written here.
        let (outcome, state, who) = tokio::select! {
            answer = answer => match answer {
                Ok((Some(true), who)) => (Ok(true), "approved", who),
                Ok((Some(false), who)) => (Ok(false), "rejected", who),
                // The task ended with the question open.
                Ok((None, why)) => (Err(TaskError::Ended.into()), "withdrawn", why),
                Err(_) => (Err(TaskError::Ended.into()), "withdrawn", String::new()),
            },
            () = cancel.cancelled() => {
                if let Some(change) = self.inner.tasks.withdraw(id, qid) {
                    self.persist(change).await;
                }
                (Err(DaemonError::Cancelled), "withdrawn", "the asker cancelled or disconnected".into())
            }
        };
        if let (Some(a), "withdrawn") = (approval, state) {
            if let Err(e) = self.inner.store.approval_answered(a, state.into(), who).await {
                tracing::error!(task = id, error = %e, "could not record a question withdrawn");
            }
        }
        outcome
    }

    pub(super) async fn task_confirm(
        &self,
        session: &Session,
        acting: Acting,
        p: &TaskConfirmParams,
        cancel: &CancellationToken,
    ) -> Result<Value, DaemonError> {
        // The table admits only a task's agent; a human here would be a table bug.
        let Some(id) = acting.task() else {
            return Err(Denied::AgentOnly { method: "task_confirm" }.into());
        };
        let approved = self.ask_human(session, id, p.question.clone(), "confirm", cancel).await?;
        // A `reject` with end_task ends the task: the agent learns it here.
        let state = self.inner.tasks.active().map(|(_, s)| s).unwrap_or(TaskState::Cancelled);
        Ok(json!({"approved": approved, "state": state}))
    }

    /// `open_app` inside a task with an app scope: a name outside it asks a human first.
    pub(super) async fn check_app_scope(
        &self,
        session: &Session,
        id: i64,
        name: &str,
        cancel: &CancellationToken,
    ) -> Result<(), DaemonError> {
        if self.inner.tasks.app_allowed(id, name) {
            return Ok(());
        }
        let question = format!("The task wants to open {name:?}, which is outside its app scope. Allow it?");
        if self.ask_human(session, id, question, "open_app", cancel).await? {
            self.inner.tasks.allow_app(id, name);
            Ok(())
        } else {
            let e = TaskError::Rejected(format!("opening {name:?}")).into();
            self.record_refusal(session, Acting::Agent { task: id }, "open_app", &e).await;
            Err(e)
        }
    }

    /// The task a note or finish is for: the agent's own, or the id a human gave (the
    /// role table checked that it is the opener or an admin). Only an unfinished task: the
    /// journal of a finished one is closed.
    async fn target(&self, acting: Acting, id: Option<i64>, what: &'static str) -> Result<i64, DaemonError> {
        match (acting, id) {
            (Acting::Agent { task }, _) => Ok(task),
            (Acting::Human { .. }, Some(id)) => match self.inner.tasks.opener(id) {
                Some(_) => Ok(id),
                None => Err(self.not_active(id, what).await),
            },
            (Acting::Human { .. }, None) => Err(DaemonError::MissingTask(what)),
        }
    }

    pub(super) async fn task_note(
        &self,
        session: &Session,
        acting: Acting,
        p: &TaskNoteParams,
    ) -> Result<Value, DaemonError> {
        let id = self.target(acting, p.task, "note").await?;
        let seq =
            self.inner.store.append(id, "note".into(), json!({"text": p.text, "by": by(session, acting)})).await?;
        self.inner.tasks.notify();
        Ok(json!({"id": id, "seq": seq}))
    }

    pub(super) async fn task_finish(
        &self,
        session: &Session,
        acting: Acting,
        p: &TaskFinishParams,
    ) -> Result<Value, DaemonError> {
        let id = self.target(acting, p.task, "finish").await?;
        let state = if p.ok { TaskState::Completed } else { TaskState::Failed };
        let detail = json!({"summary": p.summary, "exit_code": p.exit_code, "ok": p.ok, "by": by(session, acting)});
        let journal = self.inner.journal.lock().await;
        let Some(plan) = self.inner.tasks.plan_end(id, state, detail) else {
            drop(journal);
            return Err(self.not_active(id, "finish").await);
        };
        self.flush_refusals(id).await;
        // On disk first: a refused write answers STORAGE_FAILED and the task still runs
        // (its agent may finish it again once the disk takes writes).
        self.commit(plan).await?;
        drop(journal);
        self.inner.tasks.notify();
        tracing::info!(task = id, state = state.as_str(), "task finished");
        Ok(json!({"id": id, "state": state}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::SessionId;

    #[test]
    fn refusals_in_one_window_are_counted_once_and_none_is_lost() {
        let mut w = RefusalWindows::default();
        let key: RefusalKey = (1, SessionId(2), "input".into(), "TASK_RUNNING");
        let t0 = std::time::Instant::now();
        assert_eq!(w.note(key.clone(), t0), Noted::Write(1));
        assert_eq!(w.note(key.clone(), t0), Noted::CountedFirst);
        for _ in 0..98 {
            assert_eq!(w.note(key.clone(), t0), Noted::Counted);
        }
        // Another connection or code has its own window.
        let other: RefusalKey = (1, SessionId(3), "input".into(), "TASK_RUNNING");
        assert_eq!(w.note(other.clone(), t0), Noted::Write(1));
        // After the window the next refusal writes everything counted with it.
        assert_eq!(w.note(key.clone(), t0 + REFUSAL_WINDOW), Noted::Write(100));
        assert_eq!(w.note(key.clone(), t0 + REFUSAL_WINDOW), Noted::CountedFirst);
        let t1 = t0 + REFUSAL_WINDOW * 2;
        assert_eq!(w.take_pending(&key, t1), 1);
        assert_eq!(w.take_pending(&key, t1), 0, "taken once");
        assert_eq!(w.note(key.clone(), t1 + REFUSAL_WINDOW), Noted::Write(1));
        w.note(key.clone(), t1 + REFUSAL_WINDOW);
        let rest = w.take_task(1);
        assert_eq!(rest.iter().map(|(_, n)| n).sum::<u64>(), 1, "the task's end takes what is left");
        assert!(w.take_task(1).is_empty());
    }
}
