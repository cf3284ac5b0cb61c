//! A caller's turn at the device: admission, the device lock (bounded wait), the re-checks
//! after it, and input that stops where it runs when a task control comes.
//!
//! Every path that moves the phone (`action`, `batch`, `calibrate`) takes a [`DeviceTurn`]
//! here, so a pause, takeover, handback, stop or lost lease interrupts all of them the same
//! way: at the next report boundary, with held input released.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::OwnedMutexGuard;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::play::{self, Abandoned};
use super::tasks::{Admission, Asker, Still};
use super::{Daemon, DaemonError, InputError, InputLane, InputStep, Session};
use crate::protocol::Acting;

/// The device, held for one caller after admission. Dropping it gives the device back.
#[derive(Debug)]
pub(super) struct DeviceTurn<'a> {
    daemon: &'a Daemon,
    /// The lane; lent to the daemon's play while [`DeviceTurn::run`] plays, then back here.
    lane: Option<OwnedMutexGuard<InputLane>>,
    admission: Admission,
    /// Fires on the caller's cancellation or the admission's gate, whichever comes first.
    run_cancel: CancellationToken,
    caller_cancel: CancellationToken,
    watcher: Option<JoinHandle<()>>,
}

impl DeviceTurn<'_> {
    /// The task the input counts for.
    pub(super) fn task(&self) -> Option<i64> {
        self.admission.task()
    }

    /// Whether the input runs as a human during someone's task (a takeover).
    pub(super) fn is_human_in_task(&self) -> bool {
        matches!(self.admission, Admission::Human { .. })
    }

    /// Runs `steps`; returns the reports written. Interrupted input answers
    /// [`DaemonError::Interrupted`] with how far it got; the lane has released what it held.
    ///
    /// The steps are played by a task of the daemon's, not by this future: if the request
    /// ends early (its client gone, its future dropped), the play is cancelled, held input
    /// is released and `abandoned` says what the daemon journals in the requester's place.
    /// The lane comes back to the turn after each play (calibration plays several).
    pub(super) async fn run(&mut self, steps: &[InputStep], abandoned: Abandoned) -> Result<usize, DaemonError> {
        let total = play::reports_in(steps);
        let lane = self.lane.take().ok_or(DaemonError::Worker("input lane"))?;
        let (result, lane) =
            play::spawn(self.daemon.clone(), lane, steps.to_vec(), None, self.run_cancel.clone(), abandoned)
                .await
                .map_err(|_| DaemonError::Worker("input play"))?;
        self.lane = Some(lane);
        self.judge(result, total)
    }

    /// Runs `steps` like [`DeviceTurn::run`], as one play that stops before step `at` for
    /// `between` (given when the steps before it ended) and then plays the rest. Nothing
    /// else runs on the device meanwhile; an interruption at any moment, the stop included,
    /// answers and journals as it would for an unbroken play. `between`'s answer is `None`
    /// when the play ended before the stop.
    pub(super) async fn run_paused<T, F, Fut>(
        &mut self,
        steps: &[InputStep],
        at: usize,
        abandoned: Abandoned,
        between: F,
    ) -> (Result<usize, DaemonError>, Option<T>)
    where
        F: FnOnce(Instant) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let total = play::reports_in(steps);
        let Some(lane) = self.lane.take() else {
            return (Err(DaemonError::Worker("input lane")), None);
        };
        let (reached_tx, reached) = tokio::sync::oneshot::channel();
        let (resume, resume_rx) = tokio::sync::oneshot::channel();
        let pause = play::Pause { at, reached: reached_tx, resume: resume_rx };
        let played =
            play::spawn(self.daemon.clone(), lane, steps.to_vec(), Some(pause), self.run_cancel.clone(), abandoned);
        let mut answer = None;
        if let Ok(glided) = reached.await {
            answer = Some(between(glided).await);
        }
        // The play may have ended meanwhile (cancelled): then nobody listens.
        let _ = resume.send(());
        let Ok((result, lane)) = played.await else {
            return (Err(DaemonError::Worker("input play")), answer);
        };
        self.lane = Some(lane);
        (self.judge(result, total), answer)
    }

    /// A play's outcome as the request answers it.
    fn judge(&self, result: Result<usize, InputError>, total: usize) -> Result<usize, DaemonError> {
        match result {
            Ok(n) => Ok(n),
            // Input cut short once it reached the phone answers INTERRUPTED whoever cut it
            // (a task control, the task's end, `cancel`, a closed connection, shutdown), as
            // a play whose requester is gone is journalled: one code for one outcome, on
            // every transport. CANCELLED stays for a request stopped before its first
            // report or after its last (calibration's settle wait).
            Err(InputError::Cancelled { reports_sent })
                if (reports_sent > 0 && reports_sent < total) || !self.caller_cancel.is_cancelled() =>
            {
                let why = if self.caller_cancel.is_cancelled() {
                    "the request was cancelled (cancel, its connection closed, or shutdown)".to_string()
                } else {
                    // Free input has no gate, and the caller's token is a child of the
                    // daemon's shutdown: only a task's gate gets here.
                    self.interruption()
                };
                Err(DaemonError::Interrupted { reports_sent, reports_total: total, why })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Why this turn's task stopped its input.
    fn interruption(&self) -> String {
        match self.admission.task() {
            Some(id) => self.daemon.inner.tasks.interruption(id),
            None => "the input was stopped".into(),
        }
    }
}

impl Drop for DeviceTurn<'_> {
    fn drop(&mut self) {
        if let Some(w) = self.watcher.take() {
            w.abort();
        }
    }
}

impl Daemon {
    /// Admission, the device lock, then the re-checks (task state, and the observation the
    /// input's coordinates come from). Waits while the caller's task must wait (paused,
    /// taken over, a question pending); the wait for the device lock itself is bounded by
    /// the configured queue timeout.
    pub(super) async fn acquire_device<'a>(
        &'a self,
        session: &Session,
        acting: Acting,
        observation: Option<&str>,
        cancel: &CancellationToken,
    ) -> Result<DeviceTurn<'a>, DaemonError> {
        // Who may drive at all was decided by the role table; admission decides by the
        // task's state.
        let asker = Asker { session: session.id, acting };
        loop {
            let admission = match self.inner.tasks.admit_input(&asker, || self.device_identity(), cancel).await {
                Ok(a) => a,
                Err((e, change)) => {
                    if let Some(change) = change {
                        self.persist(change).await;
                    }
                    if cancel.is_cancelled() {
                        return Err(InputError::Cancelled { reports_sent: 0 }.into());
                    }
                    let e = e.into();
                    self.record_refusal(session, acting, "input", &e).await;
                    return Err(e);
                }
            };
            let gate = admission.gate().cloned().unwrap_or_default();
            let queued = Instant::now();
            let limit = self.inner.queue_timeout;
            let lane = tokio::select! {
                lane = self.inner.phone.lane() => lane,
                () = cancel.cancelled() => {
                    self.inner.tasks.unreserve(&admission);
                    return Err(InputError::Cancelled { reports_sent: 0 }.into());
                }
                // The task changed while this request queued: decide again under its rules.
                () = gate.cancelled() => {
                    self.inner.tasks.unreserve(&admission);
                    continue;
                }
                () = tokio::time::sleep(limit) => {
                    self.inner.tasks.unreserve(&admission);
                    self.count_busy();
                    let waited_ms = u64::try_from(queued.elapsed().as_millis()).unwrap_or(u64::MAX);
                    return Err(DaemonError::QueueTimeout { waited_ms });
                }
            };
            // The task may have been paused, taken over or handed back while this request
            // queued for the device.
            match self.inner.tasks.still(&admission) {
                Still::Go => {}
                Still::Wait => {
                    self.inner.tasks.unreserve(&admission);
                    drop(lane);
                    continue;
                }
                Still::Refuse(e) => {
                    self.inner.tasks.unreserve(&admission);
                    drop(lane);
                    let e = e.into();
                    self.record_refusal(session, acting, "input", &e).await;
                    return Err(e);
                }
            }
            // A task's every step is journalled before its answer: while the disk takes
            // no write, a task's input is refused before anything is sent. Journalling the
            // refusal is itself a write: once one succeeds, input is admitted again.
            if let (Some(_), Some(why)) = (admission.task(), self.inner.store.health().problem()) {
                self.inner.tasks.unreserve(&admission);
                drop(lane);
                let e = DaemonError::Unwritable(why);
                self.record_refusal(session, acting, "input", &e).await;
                return Err(e);
            }
            // The observation is checked again now: it may have expired or been invalidated
            // (someone else's input, a geometry change) while this request waited.
            if let Some(id) = observation {
                if let Err(e) = self.check_observation(id, acting) {
                    self.inner.tasks.unreserve(&admission);
                    return Err(e);
                }
            }
            // A token has one parent: a small watcher joins the caller's cancellation and
            // the admission's gate.
            let run_cancel = cancel.child_token();
            let watcher = admission.gate().cloned().map(|gate| {
                let run_cancel = run_cancel.clone();
                tokio::spawn(async move {
                    gate.cancelled().await;
                    run_cancel.cancel();
                })
            });
            return Ok(DeviceTurn {
                daemon: self,
                lane: Some(lane),
                admission,
                run_cancel,
                caller_cancel: cancel.clone(),
                watcher,
            });
        }
    }

    /// Runs one input sequence for `session`, after every sequence queued before it, under
    /// `action`'s rule (operate and up). The session's cancellation (disconnect, shutdown)
    /// stops it and releases held input. A test entry for the lane's order and release:
    /// transports reach input only through `action`, `batch` and `calibrate`.
    #[cfg(test)]
    pub(crate) async fn run_input(&self, session: &Session, steps: &[InputStep]) -> Result<usize, DaemonError> {
        let acting = Acting::Human { role: session.caller.role };
        let action = crate::protocol::Method::Action;
        action.access().check(action, acting, None, |_| true)?;
        let mut turn = self.acquire_device(session, acting, None, &session.cancel).await?;
        turn.run(steps, Abandoned::default()).await
    }

    /// Counts a refusal by a global limit (shown in `status.limits`).
    pub(super) fn count_busy(&self) {
        self.inner.refused_busy.fetch_add(1, Ordering::Relaxed);
    }
}

/// The default bound on waiting for the device behind other input.
pub const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(10);
