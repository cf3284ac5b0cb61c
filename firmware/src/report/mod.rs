//! A finished task as evidence for people and CI: a self-contained HTML report (every
//! step with its pictures before and after, the changed region drawn, who acted, the
//! questions and answers, refusals, the final screen) and a JUnit XML file (one test case
//! per task) for CI dashboards.
//!
//! Pure functions of a [`TaskReport`] the daemon reads from its journal: no I/O, so the
//! same bytes come from `GET /api/tasks/{id}/report`, `tether task report` and
//! `task run --report`.

mod html;
mod junit;
mod time;

use std::collections::BTreeMap;

use serde_json::Value;

pub use html::{html, CONTENT_SECURITY_POLICY};
pub use junit::junit;

/// Events a report shows at most (a longer journal is cut, and the report says so).
pub const MAX_EVENTS: usize = 5_000;
/// Steps whose pictures a report embeds at most (later ones are listed without).
pub const MAX_PICTURED_STEPS: usize = 500;

/// The file name of a report's recording beside `report.html` (the report links to it).
pub const RECORDING_FILE: &str = "recording.mp4";
/// The file name of the final screenshot beside `junit.xml` (its attachment).
pub const FINAL_PICTURE_FILE: &str = "final.png";

/// Everything a report shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskReport {
    /// The task.
    pub task: ReportTask,
    /// Its journal in order (at most [`MAX_EVENTS`]).
    pub events: Vec<ReportEvent>,
    /// Whether the journal had more events than [`MAX_EVENTS`].
    pub events_cut: bool,
    /// Step pictures by the step's event seq.
    pub pictures: BTreeMap<i64, StepPictures>,
    /// The recording, if the task was recorded.
    pub recording: Option<ReportRecording>,
    /// The screen when the task ended (PNG).
    pub final_png: Option<Vec<u8>>,
    /// The appliance's name (its host name).
    pub appliance: String,
}

/// The task's row.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReportTask {
    /// Id.
    pub id: i64,
    /// Title.
    pub title: String,
    /// Who opened it.
    pub owner: String,
    /// Its state now.
    pub state: String,
    /// When it opened (Unix ms).
    pub created_ms: i64,
    /// Its last change (Unix ms): when it ended, for a finished task.
    pub updated_ms: i64,
    /// Its scope.
    pub scope: Value,
}

impl ReportTask {
    /// Whether it ended well: only `completed` passes.
    pub fn passed(&self) -> bool {
        self.state == "completed"
    }

    /// Seconds from open to its last change.
    pub fn seconds(&self) -> f64 {
        (self.updated_ms - self.created_ms).max(0) as f64 / 1000.0
    }
}

/// One journal event.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportEvent {
    /// Sequence in the task.
    pub seq: i64,
    /// When (Unix ms).
    pub at_ms: i64,
    /// `state`, `step`, `note`, `refused`, `device`, `recording`, …
    pub kind: String,
    /// Its body.
    pub body: Value,
}

/// A step's small pictures (PNG).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepPictures {
    /// The screen the step's coordinates were read in.
    pub before: Option<Vec<u8>>,
    /// The screen once it settled after the step.
    pub after: Option<Vec<u8>>,
}

/// The recording's state, as the report tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportRecording {
    /// `complete`, `cut`, `failed`, `incomplete`, `evicted` or `recording`.
    pub state: String,
    /// Why it was cut, failed or evicted.
    pub reason: Option<String>,
    /// Its size.
    pub bytes: u64,
    /// How long it plays.
    pub duration_ms: Option<u64>,
}

impl ReportRecording {
    /// Whether a whole file goes with the report.
    pub fn has_file(&self) -> bool {
        matches!(self.state.as_str(), "complete" | "cut")
    }
}

/// The last words of the task: the summary its end gave, or the reason the daemon ended
/// it, or its state.
pub fn outcome(report: &TaskReport) -> String {
    let last_state = report.events.iter().rev().find(|e| e.kind == "state");
    let detail = last_state.map(|e| &e.body["detail"]);
    let text = |v: Option<&Value>| v.and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
    let summary = text(detail.map(|d| &d["summary"]));
    let reason = text(detail.map(|d| &d["reason"])).or_else(|| text(detail));
    let exit = detail.and_then(|d| d["exit_code"].as_i64());
    let mut out = summary.or(reason).unwrap_or_else(|| report.task.state.clone());
    if let Some(code) = exit {
        if !out.contains("exit") {
            out.push_str(&format!(" (exit code {code})"));
        }
    }
    out
}
