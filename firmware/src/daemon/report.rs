//! A task's report read from the journal (`task_report`), its recording in pieces
//! (`task_recording`), and the screen kept when a task ends. Rendering is
//! [`crate::report`]'s.

use std::io::{Read, Seek, SeekFrom};
use std::time::Duration;

use base64::Engine as _;
use rusqlite::OptionalExtension;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::observations::MAX_SCREENSHOT_BYTES;
use super::{Daemon, DaemonError, StoreError, TaskError};
use crate::device::video::image::observe;
use crate::protocol::task_params::TaskRecordingParams;
use crate::report::{self, ReportEvent, ReportRecording, ReportTask, StepPictures, TaskReport};

/// The final screen's longest edge: enough to read, small enough for a report.
const FINAL_EDGE: u32 = 720;
/// How long a task's end waits for a picture of the screen.
const FINAL_WAIT: Duration = Duration::from_secs(2);

/// The machine's host name (reports and JUnit name the appliance by it).
fn host_name() -> String {
    nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "tether".into())
}

impl Daemon {
    /// Keeps the screen as `task` leaves it, for its report. Without video, nothing.
    pub(super) async fn keep_final_picture(&self, task: i64) {
        if self.inner.frames.state().signal != crate::device::video::Signal::Locked {
            return; // no picture is coming: the task's end does not wait for one
        }
        let frame = match self.frame_after(None, FINAL_WAIT, &CancellationToken::new()).await {
            Ok(f) => f,
            Err(e) => {
                tracing::debug!(task, error = %e, "no picture of the screen at the task's end");
                return;
            }
        };
        let active = self.active_rect(&frame);
        let png = tokio::task::spawn_blocking(move || observe(&frame, active, FINAL_EDGE, MAX_SCREENSHOT_BYTES)).await;
        let Ok(Ok(image)) = png else { return };
        let written = self
            .inner
            .store
            .run(move |conn| {
                conn.execute("UPDATE tasks SET final_png = ?1 WHERE id = ?2", rusqlite::params![image.png, task])?;
                Ok(())
            })
            .await;
        if let Err(e) = written {
            tracing::warn!(task, error = %e, "could not keep the final screen of a task");
        }
    }

    /// Everything `task`'s report shows, read from the store.
    pub(super) async fn report_of(&self, task: i64) -> Result<TaskReport, DaemonError> {
        let active = self.inner.tasks.active();
        let mut data = self
            .inner
            .store
            .read(move |conn| {
                let row = conn
                    .query_row(
                        "SELECT id, title, owner, state, created_ms, updated_ms, scope, final_png FROM tasks WHERE id = ?1",
                        [task],
                        |r| {
                            let scope: String = r.get(6)?;
                            Ok((
                                ReportTask {
                                    id: r.get(0)?,
                                    title: r.get(1)?,
                                    owner: r.get(2)?,
                                    state: r.get(3)?,
                                    created_ms: r.get(4)?,
                                    updated_ms: r.get(5)?,
                                    scope: serde_json::from_str(&scope).unwrap_or(Value::Null),
                                },
                                r.get::<_, Option<Vec<u8>>>(7)?,
                            ))
                        },
                    )
                    .optional()?
                    .ok_or(StoreError::NoSuchTask(task))?;
                let mut events = Vec::new();
                {
                    let mut stmt = conn.prepare_cached(
                        "SELECT seq, at_ms, kind, body FROM events WHERE task_id = ?1 ORDER BY seq LIMIT ?2",
                    )?;
                    let limit = i64::try_from(report::MAX_EVENTS + 1).unwrap_or(i64::MAX);
                    let rows = stmt.query_map(rusqlite::params![task, limit], |r| {
                        let body: String = r.get(3)?;
                        Ok(ReportEvent {
                            seq: r.get(0)?,
                            at_ms: r.get(1)?,
                            kind: r.get(2)?,
                            body: serde_json::from_str(&body).unwrap_or(Value::Null),
                        })
                    })?;
                    for row in rows {
                        events.push(row?);
                    }
                }
                let events_cut = events.len() > report::MAX_EVENTS;
                events.truncate(report::MAX_EVENTS);
                let mut pictures = std::collections::BTreeMap::new();
                {
                    let mut stmt = conn.prepare_cached(
                        "SELECT seq, thumbnail, after_thumbnail FROM steps WHERE task_id = ?1 \
                         AND (thumbnail IS NOT NULL OR after_thumbnail IS NOT NULL) ORDER BY seq LIMIT ?2",
                    )?;
                    let limit = i64::try_from(report::MAX_PICTURED_STEPS).unwrap_or(i64::MAX);
                    let rows = stmt.query_map(rusqlite::params![task, limit], |r| {
                        Ok((r.get::<_, i64>(0)?, StepPictures { before: r.get(1)?, after: r.get(2)? }))
                    })?;
                    for row in rows {
                        let (seq, p) = row?;
                        pictures.insert(seq, p);
                    }
                }
                let (task, final_png) = row;
                Ok(TaskReport {
                    task,
                    events,
                    events_cut,
                    pictures,
                    recording: None,
                    final_png,
                    appliance: String::new(),
                })
            })
            .await
            .map_err(|e| match e {
                StoreError::NoSuchTask(id) => DaemonError::from(TaskError::NoSuch(id)),
                e => e.into(),
            })?;
        // The state in memory is the newest (its store write may still be queued).
        if let Some((id, state)) = active.filter(|(id, _)| *id == task) {
            data.task.state = state.as_str().to_string();
            let _ = id;
        }
        data.recording = self.recording_info(task).await?.map(|r| ReportRecording {
            state: r.state,
            reason: r.reason,
            bytes: r.bytes,
            duration_ms: r.duration_ms,
        });
        data.appliance = host_name();
        Ok(data)
    }

    /// `task_report`: the HTML report, the JUnit XML, the final screen (PNG, base64) and
    /// the recording's state (its bytes come with `task_recording`).
    pub(super) async fn task_report(&self, task: i64) -> Result<Value, DaemonError> {
        let data = self.report_of(task).await?;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        Ok(json!({
            "task": task,
            "state": data.task.state,
            "passed": data.task.passed(),
            "html": report::html(&data),
            "junit": report::junit(&data),
            "final_png": data.final_png.as_deref().map(b64),
            "recording": data.recording.as_ref().map(|r| json!({
                "state": r.state, "reason": r.reason, "bytes": r.bytes, "duration_ms": r.duration_ms,
                "file": r.has_file(),
            })),
        }))
    }

    /// `task_recording`: `length` bytes of the task's MP4 from `offset` (base64), and the
    /// file's size. Only a whole file (complete or cut) is served.
    pub(super) async fn task_recording(&self, p: &TaskRecordingParams) -> Result<Value, DaemonError> {
        let (path, info) = self
            .recording_file(p.task)
            .await?
            .ok_or_else(|| DaemonError::NotFound(format!("task {} has no recording to send", p.task)))?;
        let (offset, length) = (p.offset, p.length);
        let read = tokio::task::spawn_blocking(move || -> std::io::Result<(Vec<u8>, u64)> {
            let mut file = std::fs::File::open(&path)?;
            let size = file.metadata()?.len();
            file.seek(SeekFrom::Start(offset.min(size)))?;
            let mut data = Vec::new();
            file.take(length).read_to_end(&mut data)?;
            Ok((data, size))
        })
        .await
        .map_err(|_| DaemonError::Worker("recording read"))?;
        let (data, size) = read.map_err(|e| {
            tracing::warn!(task = p.task, error = %e, "a recording on record could not be read");
            DaemonError::NotFound(format!("task {}'s recording cannot be read: {e}", p.task))
        })?;
        Ok(json!({
            "task": p.task,
            "offset": offset,
            "size": size,
            "state": info.state,
            "data": base64::engine::general_purpose::STANDARD.encode(&data),
        }))
    }
}
