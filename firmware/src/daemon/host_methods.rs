//! Third-party hosts (reference 001): a connection attaches to one running task, mirrors
//! its events live, replays what it missed, and talks to the task's agent; the agent reads
//! what people said with `task_messages`.
//!
//! The invariants: the server decides the target (an attached connection's task-scoped
//! calls are stamped with the attached task, see [`crate::protocol::Call::stamped`]); only
//! a real, running task can be attached; one at a time per connection; and a connection's
//! kind is fixed by its first `hello`.

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::session::Mirror;
use super::task_methods::by;
use super::tasks::TaskError;
use super::{Daemon, DaemonError, Session};
use crate::protocol::host_params::{
    AttachParams, ConnectionKind, MailboxFlushParams, TaskMessagesParams, UserMessageParams, MAX_FLUSH_EVENTS,
    MAX_MESSAGES,
};
use crate::protocol::Acting;
use crate::sync::LockPlain;

/// The event kind of a person's message to a task's agent.
pub(super) const USER_MESSAGE: &str = "user_message";

impl Daemon {
    /// `attach`: mirror `p.task` on this session from now on (replacing an earlier mirror).
    pub(super) async fn attach(&self, session: &Session, p: &AttachParams) -> Result<Value, DaemonError> {
        if session.kind() == ConnectionKind::Agent {
            return Err(DaemonError::CannotAttach(
                "an agent connection acts for its own task with its task token; it cannot attach to one",
            ));
        }
        if session.events_rx.lock_plain().is_some() {
            // Nobody forwards this session's events (a one-shot HTTP request): a mirror
            // would fill a queue nobody reads.
            return Err(DaemonError::CannotAttach(
                "attach needs a connection that receives events: the control socket or the /api/ws WebSocket",
            ));
        }
        let task = p.task;
        let state = match self.inner.tasks.active() {
            Some((id, state)) if id == task && !state.is_terminal() => state,
            _ => return Err(self.not_active(task, "attach to").await),
        };
        let title = self.inner.tasks.with_active(|t| t.map(|t| t.title.clone())).unwrap_or_default();
        let live_from = self.inner.store.last_seq(task).await?;
        let cancel = session.cancel.child_token();
        let previous = session.mirror.lock_plain().replace(Mirror { task, live_from, cancel: cancel.clone() });
        if let Some(previous) = previous {
            previous.cancel.cancel();
        }
        let (daemon, events) = (self.clone(), session.events.clone());
        tokio::spawn(async move {
            // Ends with the task (everything sent), on detach, re-attach or disconnect.
            if let Err(e) = daemon.stream_events(task, live_from, false, &events, &cancel).await {
                tracing::debug!(task, error = %e, "mirror ended");
            }
        });
        tracing::info!(session = session.id.0, task, "attached");
        Ok(json!({"task": task, "title": title, "state": state, "live_from": live_from}))
    }

    /// `detach`: end this session's mirror (if any).
    pub(super) fn detach(&self, session: &Session) -> Value {
        let previous = session.mirror.lock_plain().take();
        let task = previous.map(|m| {
            m.cancel.cancel();
            m.task
        });
        json!({"detached": task})
    }

    /// `mailbox_flush`: the attached task's events after `p.after_seq` up to where the live
    /// mirror started. Together with the live events this connection receives, the client
    /// has every event once: none missing, none twice.
    pub(super) async fn mailbox_flush(&self, session: &Session, p: &MailboxFlushParams) -> Result<Value, DaemonError> {
        let (task, live_from) = session.mirror().ok_or(DaemonError::NotAttached("mailbox_flush"))?;
        let last_seq = self.inner.store.last_seq(task).await?;
        if p.after_seq > last_seq {
            return Err(DaemonError::AfterEnd { task, after_seq: p.after_seq, last_seq });
        }
        let mut events = Vec::new();
        if p.after_seq < live_from {
            let wanted = u32::try_from(live_from - p.after_seq).unwrap_or(u32::MAX).min(MAX_FLUSH_EVENTS);
            for e in self.inner.store.events_after(task, p.after_seq, wanted).await? {
                if e.seq > live_from {
                    break;
                }
                events.push(json!({"task": task, "seq": e.seq, "at_ms": e.at_ms, "kind": e.kind, "data": e.body}));
            }
        }
        let replayed_to = events.last().and_then(|e| e["seq"].as_i64()).unwrap_or(p.after_seq.max(live_from));
        Ok(json!({
            "task": task,
            "events": events,
            "replayed_to": replayed_to,
            "live_from": live_from,
            "more": replayed_to < live_from,
        }))
    }

    /// `user_message`: a person's words to the attached task's agent, recorded in the
    /// task's journal (where `task_messages` reads them).
    pub(super) async fn user_message(
        &self,
        session: &Session,
        acting: Acting,
        p: &UserMessageParams,
    ) -> Result<Value, DaemonError> {
        let (task, _) = session.mirror().ok_or(DaemonError::NotAttached("user_message"))?;
        match self.inner.tasks.active() {
            Some((id, state)) if id == task && !state.is_terminal() => {}
            _ => return Err(self.not_active(task, "send a message to").await),
        }
        let body = json!({"text": p.text, "by": by(session, acting)});
        let seq = self.inner.store.append(task, USER_MESSAGE.into(), body).await?;
        self.inner.tasks.notify();
        Ok(json!({"task": task, "seq": seq}))
    }

    /// `task_messages`: what people sent to a task's agent after `p.after_seq`, waiting up
    /// to `p.wait_ms` for the first when there is none.
    pub(super) async fn task_messages(
        &self,
        acting: Acting,
        p: &TaskMessagesParams,
        cancel: &CancellationToken,
    ) -> Result<Value, DaemonError> {
        let task = match (acting, p.task) {
            (Acting::Agent { task }, _) => task,
            (Acting::Human { .. }, Some(task)) => task,
            (Acting::Human { .. }, None) => return Err(DaemonError::MissingTask("task_messages")),
        };
        self.inner.store.task(task).await.map_err(|_| TaskError::NoSuch(task))?;
        let after = p.after_seq.unwrap_or(0);
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(p.wait_ms.unwrap_or(0));
        let mut changes = self.inner.tasks.subscribe();
        let found = loop {
            changes.borrow_and_update();
            let found = self.inner.store.events_of_kind_after(task, USER_MESSAGE, after, MAX_MESSAGES).await?;
            if !found.is_empty() || tokio::time::Instant::now() >= deadline {
                break found;
            }
            tokio::select! {
                r = changes.changed() => if r.is_err() { break found },
                () = tokio::time::sleep_until(deadline) => {}
                () = cancel.cancelled() => return Err(DaemonError::Cancelled),
            }
        };
        let last_seq = found.last().map_or(after, |e| e.seq);
        let messages: Vec<Value> = found
            .into_iter()
            .map(|e| {
                let from = e.body["by"]["principal"].clone();
                json!({"seq": e.seq, "at_ms": e.at_ms, "text": e.body["text"], "from": from})
            })
            .collect();
        Ok(json!({"task": task, "messages": messages, "last_seq": last_seq}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::{Caller, DaemonOptions, Devices, Role, SessionMessage};
    use crate::device::hid::RecordingSink;
    use crate::device::sim::{SimConfig, SimPhone};
    use crate::protocol::{Call, RequestId};

    fn daemon() -> Daemon {
        let phone = SimPhone::new(SimConfig::default());
        Daemon::start(
            Devices { hid: Box::new(RecordingSink::default()), video: Box::new(phone.display()), sim: Some(phone) },
            DaemonOptions { sim: true, ..DaemonOptions::default() },
        )
        .unwrap()
    }

    fn call(line: &str) -> Call {
        crate::protocol::parse_request(line.as_bytes()).unwrap().call
    }

    async fn next_seq(rx: &mut tokio::sync::mpsc::Receiver<SessionMessage>) -> u64 {
        loop {
            match tokio::time::timeout(std::time::Duration::from_secs(5), rx.recv()).await {
                Ok(Some(SessionMessage::Event(e))) => return e.seq,
                Ok(Some(_)) => {}
                other => panic!("no event: {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn a_mirror_gets_live_events_and_the_flush_fills_exactly_the_gap() {
        let d = daemon();
        let opener = d.open_session(Caller::in_process(Role::Operate));
        let opened = d
            .handle(&opener, RequestId(1), &call(r#"{"id":1,"method":"task_open","title":"t","events":false}"#))
            .await
            .unwrap();
        let task = opened["id"].as_i64().unwrap();
        let note = |n: u64| call(&format!(r#"{{"id":{n},"method":"task_note","task":{task},"text":"n{n}"}}"#));
        for n in 2..5 {
            d.handle(&opener, RequestId(n), &note(n)).await.unwrap();
        }
        let host = d.open_session(Caller::in_process(Role::Operate));
        let attach = call(&format!(r#"{{"id":1,"method":"attach","task":{task}}}"#));
        let refused = d.handle(&host, RequestId(1), &attach).await.unwrap_err();
        assert!(matches!(refused, DaemonError::CannotAttach(_)), "nobody reads this session's events: {refused}");
        let mut rx = host.take_events().unwrap();
        let att = d.handle(&host, RequestId(2), &attach).await.unwrap();
        let live_from = att["live_from"].as_i64().unwrap();
        assert!(live_from >= 4, "the open and three notes are before the mirror");
        d.handle(&opener, RequestId(9), &note(9)).await.unwrap();
        assert_eq!(next_seq(&mut rx).await, u64::try_from(live_from).unwrap() + 1, "live after the start");
        let flush =
            d.handle(&host, RequestId(3), &call(r#"{"id":3,"method":"mailbox_flush","after_seq":2}"#)).await.unwrap();
        let seqs: Vec<i64> = flush["events"].as_array().unwrap().iter().map(|e| e["seq"].as_i64().unwrap()).collect();
        assert_eq!(seqs, (3..=live_from).collect::<Vec<_>>());
        // Stamping: a task id the host writes is replaced by the attached one.
        let ev =
            d.handle(&host, RequestId(4), &call(r#"{"id":4,"method":"task_events","task":424242}"#)).await.unwrap();
        assert_eq!(ev["task"]["id"], task);
        // The inbox: a user message is an event the agent reads.
        let sent =
            d.handle(&host, RequestId(5), &call(r#"{"id":5,"method":"user_message","text":"hi"}"#)).await.unwrap();
        let read = d
            .handle(&opener, RequestId(6), &call(&format!(r#"{{"id":6,"method":"task_messages","task":{task}}}"#)))
            .await
            .unwrap();
        assert_eq!(read["messages"][0]["text"], "hi");
        assert_eq!(read["last_seq"], sent["seq"]);
        assert_eq!(
            d.handle(&host, RequestId(7), &call(r#"{"id":7,"method":"detach"}"#)).await.unwrap()["detached"],
            task
        );
        let e =
            d.handle(&host, RequestId(8), &call(r#"{"id":8,"method":"user_message","text":"x"}"#)).await.unwrap_err();
        assert!(matches!(e, DaemonError::NotAttached(_)));
    }

    #[tokio::test]
    async fn the_first_hello_fixes_the_kind() {
        let d = daemon();
        let s = d.open_session(Caller::in_process(Role::View));
        let console = call(r#"{"id":1,"method":"hello","kind":"console"}"#);
        assert_eq!(d.handle(&s, RequestId(1), &console).await.unwrap()["kind"], "console");
        let host = call(r#"{"id":2,"method":"hello","kind":"host"}"#);
        assert!(matches!(d.handle(&s, RequestId(2), &host).await, Err(DaemonError::KindFixed { .. })));
        assert_eq!(s.kind(), ConnectionKind::Console);
    }
}
