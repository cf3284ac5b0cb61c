//! Gestures played by the daemon, not by the request that asked for them.
//!
//! A request hands its admitted turn's lane and steps to a task of the daemon's and waits
//! for the answer on a oneshot. Whatever ends the request early (its client gone, its
//! future dropped by hyper or rmcp, a closed socket, shutdown) closes that oneshot: the play
//! sees it, stops at once, the lane releases held buttons and keys, and the daemon journals
//! the step and caches the operation's outcome in the requester's place.

use std::convert::Infallible;
use std::time::Instant;

use serde_json::{json, Value};
use tokio::sync::{oneshot, OwnedMutexGuard};
use tokio_util::sync::CancellationToken;

use super::{Daemon, DaemonError, InputError, InputLane, InputStep};
use crate::device::hid::HidError;

/// What the daemon records if the requester is gone before its input ended.
#[derive(Debug, Default)]
pub(super) struct Abandoned {
    /// The journal step the input belongs to (input during a task).
    pub(super) step: Option<AbandonedStep>,
    /// The operation whose outcome is cached: (cache key, operation id).
    pub(super) operation: Option<(String, String)>,
}

/// A task step as the requester would have journalled it.
#[derive(Debug)]
pub(super) struct AbandonedStep {
    /// The task.
    pub(super) task: i64,
    /// The step's tool (`action`, `batch`, `calibrate`).
    pub(super) tool: &'static str,
    /// Its arguments as journalled.
    pub(super) args: Value,
    /// Who asked (the journal's `caller`).
    pub(super) caller: Value,
    /// When the request started.
    pub(super) started: Instant,
}

/// How many reports `steps` write.
pub(super) fn reports_in(steps: &[InputStep]) -> usize {
    steps.iter().filter(|s| matches!(s, InputStep::Report(_))).count()
}

/// A stop inside one play: the steps before `at` are played, `reached` says when they
/// ended, and the rest waits for `resume` (verification samples its baseline there, once
/// the pointer has glided to its target). It is one play all the same: a cancel, a task
/// control or the requester going away while it waits ends it like any other moment of
/// the play (nothing is held between a glide and its press), and an interrupted play counts
/// its reports over both parts.
#[derive(Debug)]
pub(super) struct Pause {
    /// The index of the first step after the stop.
    pub(super) at: usize,
    /// Told when the steps before the stop have been played.
    pub(super) reached: oneshot::Sender<Instant>,
    /// Awaited before the rest is played.
    pub(super) resume: oneshot::Receiver<()>,
}

/// Plays `steps` on `lane` (stopping at `pause` when given): the reports written.
async fn play_steps(
    lane: &mut InputLane,
    steps: &[InputStep],
    pause: Option<Pause>,
    cancel: &CancellationToken,
) -> Result<usize, InputError> {
    let Some(Pause { at, reached, resume }) = pause else {
        return lane.run(steps, cancel).await;
    };
    let (first, rest) = steps.split_at(at.min(steps.len()));
    let sent = lane.run(first, cancel).await?;
    // The requester may be gone already: then `cancel` fires below.
    let _ = reached.send(Instant::now());
    tokio::select! {
        resumed = resume => {
            if resumed.is_err() {
                return Err(InputError::Cancelled { reports_sent: sent });
            }
        }
        () = cancel.cancelled() => return Err(InputError::Cancelled { reports_sent: sent }),
    }
    match lane.run(rest, cancel).await {
        Ok(n) => Ok(sent + n),
        Err(InputError::Cancelled { reports_sent }) => Err(InputError::Cancelled { reports_sent: sent + reports_sent }),
        Err(InputError::Hid { reports_sent, source }) => {
            Err(InputError::Hid { reports_sent: sent + reports_sent, source })
        }
        Err(InputError::HostNotConnected) if sent > 0 => {
            Err(InputError::Hid { reports_sent: sent, source: HidError::HostNotConnected })
        }
        Err(e) => Err(e),
    }
}

/// Plays `steps` on `lane` in a task of the daemon's; the answer and the lane come back on
/// the receiver.
/// Dropping the receiver cancels the play (held input is released) and makes the daemon
/// record `abandoned`.
pub(super) fn spawn(
    daemon: Daemon,
    mut lane: OwnedMutexGuard<InputLane>,
    steps: Vec<InputStep>,
    pause: Option<Pause>,
    cancel: CancellationToken,
    abandoned: Abandoned,
) -> oneshot::Receiver<(Result<usize, InputError>, OwnedMutexGuard<InputLane>)> {
    let (mut tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        daemon.inner.phone.set_playing(true);
        let result = {
            let requester_gone = async {
                tx.closed().await;
                cancel.cancel();
                std::future::pending::<Infallible>().await
            };
            tokio::select! {
                result = play_steps(&mut lane, &steps, pause, &cancel) => result,
                never = requester_gone => match never {},
            }
        };
        daemon.inner.phone.set_playing(false);
        // The lane goes back to the turn (it may play again: calibration's points); with
        // the requester gone it is dropped here, after the release and the journal: a
        // shutdown waits for the lane ([`Daemon::input_released`]), so what the daemon
        // records in the requester's place is written before the process exits.
        if let Err((result, lane)) = tx.send((result, lane)) {
            let total = reports_in(&steps);
            daemon.record_abandoned(abandoned, result, total).await;
            drop(lane);
        }
    });
    rx
}

impl Daemon {
    /// Journals and caches a play whose requester went away before it ended.
    async fn record_abandoned(&self, abandoned: Abandoned, result: Result<usize, InputError>, total: usize) {
        let result = match result {
            Ok(reports) => Ok(json!({"status": "submitted", "reports": reports, "requester": "gone"})),
            Err(InputError::HostNotConnected) => Err(DaemonError::Input(InputError::HostNotConnected)),
            Err(InputError::Cancelled { reports_sent } | InputError::Hid { reports_sent, .. }) => {
                Err(DaemonError::Interrupted {
                    reports_sent,
                    reports_total: total,
                    why: "the request ended before its input did (client gone, cancelled or shutdown)".into(),
                })
            }
        };
        tracing::info!(ok = result.is_ok(), "input ended after its requester went away; held input released");
        let result = match (&abandoned.operation, result) {
            (Some((_, operation_id)), Err(e)) => Err(DaemonError::ActionFailed(e.action_body(operation_id))),
            (_, result) => result,
        };
        if let Some(step) = abandoned.step {
            let took = step.started.elapsed();
            self.append_step(step.task, step.tool, &step.args, &result, took, step.caller, None).await;
        }
        if let Some((key, _)) = abandoned.operation {
            self.finish_operation(&key, &result);
        }
    }
}
