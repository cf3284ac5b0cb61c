//! Task recordings: which task is being recorded, the files in the data directory, and
//! the caps that bound them. The video itself is written by the device layer's recorder
//! ([`crate::device::video::record`]); this module decides when it starts and ends, what
//! the journal says about it, and which files are kept.
//!
//! A recording is `{data_dir}/recordings/task-{id}.mp4` with a row in `recordings`:
//! `recording` while it runs, then `complete`, `cut` (ended early, whole up to there),
//! `failed` (no file), `incomplete` (the daemon stopped while recording; its file is
//! deleted at the next start) or `evicted` (deleted to make room). Only `complete` and
//! `cut` have a file, and only those are served. Every change is also a `recording`
//! event in the task's journal.

use std::path::{Path, PathBuf};
use std::time::Instant;

use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::store::{Store, StoreError};
use super::Daemon;
use crate::device::video::encode::EncoderKind;
use crate::device::video::record::{self, RecordOutcome, RecordSettings, Recorder};
use crate::device::video::FrameReader;
use crate::sync::LockPlain;

/// `[recording]`: how task recordings are made and how much disk they may take.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RecordingSettings {
    /// One recording is cut (ended cleanly, and says so) before it grows past this.
    pub max_bytes: u64,
    /// All recordings together: before one starts, the oldest finished ones are deleted
    /// until it fits whole (`max_bytes`) beside the others.
    pub max_total_bytes: u64,
    /// Pictures a second when the capture is encoded for the recording (raw, MJPEG).
    pub fps: f32,
    /// Longest edge in pixels when encoding (1280: a 1080p capture is recorded at 720p).
    pub max_edge: u32,
    /// Bitrate when encoding.
    pub bitrate_bps: u32,
}

impl Default for RecordingSettings {
    fn default() -> Self {
        let r = RecordSettings::default();
        RecordingSettings {
            max_bytes: r.max_bytes,
            max_total_bytes: 2 << 30,
            fps: r.fps,
            max_edge: r.max_edge,
            bitrate_bps: r.bitrate_bps,
        }
    }
}

impl RecordingSettings {
    /// Checks the numbers a bad config file could hold.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_bytes < 64 << 10 {
            return Err(format!("[recording] max_bytes {} is below 64 KiB", self.max_bytes));
        }
        if self.max_bytes > self.max_total_bytes {
            return Err(format!(
                "[recording] max_bytes {} is more than max_total_bytes {}: one recording must fit in the total",
                self.max_bytes, self.max_total_bytes
            ));
        }
        if !(self.fps.is_finite() && (0.5..=60.0).contains(&self.fps)) {
            return Err(format!("[recording] fps {} is outside 0.5..=60", self.fps));
        }
        if !(64..=3840).contains(&self.max_edge) {
            return Err(format!("[recording] max_edge {} is outside 64..=3840", self.max_edge));
        }
        if !(50_000..=50_000_000).contains(&self.bitrate_bps) {
            return Err(format!("[recording] bitrate_bps {} is outside 50000..=50000000", self.bitrate_bps));
        }
        Ok(())
    }

    fn record(&self, region: Option<crate::device::geometry::PixelRect>) -> RecordSettings {
        RecordSettings {
            max_bytes: self.max_bytes,
            fps: self.fps,
            max_edge: self.max_edge,
            bitrate_bps: self.bitrate_bps,
            region,
        }
    }
}

/// The recording in progress, if any (one task runs at a time, so at most one).
///
/// Its own lock, not the phone's owner (`phone.rs`): nothing about driving the phone
/// depends on it (admission, input and observations never read it); it only pairs a task
/// id with the recorder thread's handle between the task's start and its end, and is
/// held for a swap, never across an await.
#[derive(Debug, Default)]
pub(super) struct Recordings {
    active: std::sync::Mutex<Option<(i64, Recorder)>>,
}

/// A recording's row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordingInfo {
    /// `recording`, `complete`, `cut`, `failed`, `incomplete` or `evicted`.
    pub state: String,
    /// Why it was cut, failed or evicted.
    pub reason: Option<String>,
    /// Size of the file.
    pub bytes: u64,
    /// How long it plays.
    pub duration_ms: Option<u64>,
    /// Picture size.
    pub width: Option<u32>,
    /// Picture height.
    pub height: Option<u32>,
    /// `passthrough` or `encoded`.
    pub source: Option<String>,
}

impl RecordingInfo {
    /// Whether a whole file exists for it.
    pub fn has_file(&self) -> bool {
        matches!(self.state.as_str(), "complete" | "cut")
    }
}

/// Where recordings live.
pub(super) fn recordings_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("recordings")
}

/// The file of `task`'s recording.
pub(super) fn recording_path(data_dir: &Path, task: i64) -> PathBuf {
    recordings_dir(data_dir).join(format!("task-{task}.mp4"))
}

/// The task a file in the recordings directory belongs to (`task-12.mp4`,
/// `task-12.mp4.part`).
fn task_of(name: &str) -> Option<i64> {
    let rest = name.strip_prefix("task-")?;
    let id = rest.strip_suffix(".mp4").or_else(|| rest.strip_suffix(".mp4.part"))?;
    id.parse().ok()
}

/// Which finished recordings go, oldest first, so that one more of `need` bytes fits
/// under `total`: `finished` is (task, bytes) oldest first.
pub(super) fn evictions(finished: &[(i64, u64)], need: u64, total: u64) -> Vec<i64> {
    let mut used: u64 = finished.iter().map(|(_, b)| b).sum();
    let mut out = Vec::new();
    for &(task, bytes) in finished {
        if used.saturating_add(need) <= total {
            break;
        }
        used -= bytes;
        out.push(task);
    }
    out
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Removes files of recordings that have no whole file on record (deleted tasks,
/// evicted, interrupted `.part` files), except the one being written.
fn sweep(conn: &Connection, dir: &Path, writing: Option<i64>) -> Result<usize, StoreError> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(0) };
    let mut keep =
        conn.prepare_cached("SELECT 1 FROM recordings WHERE task_id = ?1 AND state IN ('complete', 'cut')")?;
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(task) = name.to_str().and_then(task_of) else { continue };
        let part = name.to_str().is_some_and(|n| n.ends_with(".part"));
        if Some(task) == writing && part {
            continue;
        }
        if !part && keep.query_row([task], |_| Ok(())).optional()?.is_some() {
            continue;
        }
        match std::fs::remove_file(entry.path()) {
            Ok(()) => removed += 1,
            Err(e) => tracing::warn!(path = %entry.path().display(), error = %e, "could not remove a recording"),
        }
    }
    Ok(removed)
}

/// At start: recordings the last run left `recording` are `incomplete`, with an event;
/// files nobody owns go.
pub(super) fn recover(store: &Store, data_dir: &Path) -> Result<(), StoreError> {
    let dir = recordings_dir(data_dir);
    store.run_now(move |conn| {
        let tx = conn.transaction()?;
        let ids: Vec<i64> = {
            let mut stmt = tx.prepare("SELECT task_id FROM recordings WHERE state = 'recording'")?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            rows.collect::<Result<_, _>>()?
        };
        let why = "the daemon stopped while recording";
        for &id in &ids {
            tx.execute(
                "UPDATE recordings SET state = 'incomplete', reason = ?1, ended_ms = ?2 WHERE task_id = ?3",
                params![why, now_ms(), id],
            )?;
            super::store::append_event(&tx, id, "recording", &json!({"state": "incomplete", "reason": why}))?;
        }
        tx.commit()?;
        sweep(conn, &dir, None)?;
        Ok(())
    })
}

impl Daemon {
    /// Starts recording `task` (it just opened). What went wrong is journaled, not
    /// answered: the task runs either way.
    pub(super) async fn start_recording(&self, task: i64) {
        let settings = self.inner.options.recording;
        let Some(data_dir) = self.inner.data_dir.clone() else {
            self.recording_event(
                task,
                json!({"state": "failed", "reason": "this daemon keeps no files (no data directory)"}),
            )
            .await;
            return;
        };
        if self.inner.frames.state().signal != crate::device::video::Signal::Locked {
            self.recording_event(task, json!({"state": "failed", "reason": "no video signal"})).await;
            return;
        }
        let dir = recordings_dir(&data_dir);
        if let Err(e) = std::fs::create_dir_all(&dir) {
            let reason = format!("cannot create {}: {e}", dir.display());
            self.recording_event(task, json!({"state": "failed", "reason": reason})).await;
            return;
        }
        // Room for a whole recording beside the kept ones, oldest finished first.
        let files = data_dir.clone();
        let evicted = self
            .inner
            .store
            .run(move |conn| {
                let finished: Vec<(i64, u64)> = {
                    let mut stmt = conn.prepare_cached(
                        "SELECT task_id, bytes FROM recordings WHERE state IN ('complete', 'cut') ORDER BY ended_ms, task_id",
                    )?;
                    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)?.max(0).unsigned_abs())))?;
                    rows.collect::<Result<_, _>>()?
                };
                let gone = evictions(&finished, settings.max_bytes, settings.max_total_bytes);
                let why = "deleted to make room for newer recordings ([recording] max_total_bytes)";
                for &id in &gone {
                    conn.execute(
                        "UPDATE recordings SET state = 'evicted', reason = ?1 WHERE task_id = ?2",
                        params![why, id],
                    )?;
                    super::store::append_event(conn, id, "recording", &json!({"state": "evicted", "reason": why}))?;
                    // The row says so first: a file without a row is never served.
                    let _ = std::fs::remove_file(recording_path(&files, id));
                }
                conn.execute(
                    "INSERT OR REPLACE INTO recordings (task_id, state, bytes, started_ms) VALUES (?1, 'recording', 0, ?2)",
                    params![task, now_ms()],
                )?;
                Ok(gone)
            })
            .await;
        match evicted {
            Ok(gone) if !gone.is_empty() => tracing::info!(tasks = ?gone, "recordings evicted to make room"),
            Ok(_) => {}
            Err(e) => {
                tracing::error!(task, error = %e, "could not record a recording's start");
                return;
            }
        }
        let path = recording_path(&data_dir, task);
        let frames: FrameReader = self.inner.frames.clone();
        let kind: EncoderKind = self.inner.options.encoder_kind.clone();
        // The phone's picture in the capture frame, as screenshots see it.
        let region = self.inner.frames.latest().map(|f| self.active_rect(&f));
        match record::start(frames, path, settings.record(region), kind) {
            Ok(recorder) => {
                *self.inner.recordings.active.lock_plain() = Some((task, recorder));
                self.recording_event(task, json!({"state": "recording"})).await;
                tracing::info!(task, "recording");
            }
            Err(e) => self.recording_ended(task, "failed", Some(e.to_string()), None).await,
        }
    }

    /// Ends `task`'s recording, if it has one, as of `at`, and records how it ended.
    pub(super) async fn stop_recording(&self, task: i64, at: Instant) {
        let recorder = {
            let mut active = self.inner.recordings.active.lock_plain();
            match active.take() {
                Some((id, r)) if id == task => Some(r),
                other => {
                    *active = other;
                    None
                }
            }
        };
        let Some(recorder) = recorder else { return };
        let summary = recorder.finish(at).await;
        let (state, reason) = match &summary.outcome {
            RecordOutcome::Complete => ("complete", None),
            RecordOutcome::Cut(why) => ("cut", Some(why.clone())),
            RecordOutcome::Failed(why) => ("failed", Some(why.clone())),
        };
        tracing::info!(task, state, bytes = summary.bytes, "recording ended");
        self.recording_ended(task, state, reason, Some(summary)).await;
    }

    async fn recording_ended(
        &self,
        task: i64,
        state: &'static str,
        reason: Option<String>,
        summary: Option<record::RecordSummary>,
    ) {
        let bytes = summary.as_ref().map_or(0, |s| s.bytes);
        let duration_ms = summary.as_ref().map(|s| u64::try_from(s.duration.as_millis()).unwrap_or(u64::MAX));
        let size = summary.as_ref().and_then(|s| s.size);
        let source = summary.as_ref().map(|s| s.source.name());
        let row = (reason.clone(), duration_ms, size, source);
        let written = self
            .inner
            .store
            .run(move |conn| {
                let (reason, duration_ms, size, source) = row;
                conn.execute(
                    "UPDATE recordings SET state = ?1, reason = ?2, bytes = ?3, duration_ms = ?4, width = ?5, \
                     height = ?6, source = ?7, ended_ms = ?8 WHERE task_id = ?9",
                    params![
                        state,
                        reason,
                        i64::try_from(bytes).unwrap_or(i64::MAX),
                        duration_ms.map(|d| i64::try_from(d).unwrap_or(i64::MAX)),
                        size.map(|s| s.0),
                        size.map(|s| s.1),
                        source,
                        now_ms(),
                        task
                    ],
                )?;
                Ok(())
            })
            .await;
        if let Err(e) = written {
            tracing::error!(task, error = %e, "could not record how a recording ended");
        }
        let mut body = json!({"state": state, "bytes": bytes});
        if let Some(reason) = reason {
            body["reason"] = reason.into();
        }
        if let Some(ms) = duration_ms {
            body["duration_ms"] = ms.into();
        }
        if let Some((w, h)) = size {
            body["size"] = json!([w, h]);
        }
        if let Some(source) = source {
            body["source"] = source.into();
        }
        self.recording_event(task, body).await;
    }

    async fn recording_event(&self, task: i64, body: Value) {
        if let Err(e) = self.inner.store.append(task, "recording".into(), body).await {
            tracing::error!(task, error = %e, "could not record a recording event");
        }
        self.inner.tasks.notify();
    }

    /// `task`'s recording row, if it was recorded.
    pub(super) async fn recording_info(&self, task: i64) -> Result<Option<RecordingInfo>, StoreError> {
        self.inner
            .store
            .read(move |conn| {
                Ok(conn
                    .query_row(
                        "SELECT state, reason, bytes, duration_ms, width, height, source FROM recordings WHERE task_id = ?1",
                        [task],
                        |r| {
                            Ok(RecordingInfo {
                                state: r.get(0)?,
                                reason: r.get(1)?,
                                bytes: r.get::<_, i64>(2)?.max(0).unsigned_abs(),
                                duration_ms: r.get::<_, Option<i64>>(3)?.map(|d| d.max(0).unsigned_abs()),
                                width: r.get(4)?,
                                height: r.get(5)?,
                                source: r.get(6)?,
                            })
                        },
                    )
                    .optional()?)
            })
            .await
    }

    /// The file of `task`'s recording when a whole one exists.
    pub(super) async fn recording_file(&self, task: i64) -> Result<Option<(PathBuf, RecordingInfo)>, StoreError> {
        let Some(dir) = self.inner.data_dir.as_deref() else { return Ok(None) };
        Ok(self
            .recording_info(task)
            .await?
            .filter(RecordingInfo::has_file)
            .map(|info| (recording_path(dir, task), info)))
    }

    /// Bytes of the recording being written (0: none).
    pub(super) fn recording_bytes(&self) -> i64 {
        let active = self.inner.recordings.active.lock_plain();
        active.as_ref().map_or(0, |(_, r)| i64::try_from(r.written()).unwrap_or(i64::MAX))
    }

    /// After retention deleted tasks: their recordings' files go too.
    pub(super) async fn sweep_recordings(&self) {
        let Some(dir) = self.inner.data_dir.as_deref().map(recordings_dir) else { return };
        let writing = self.inner.recordings.active.lock_plain().as_ref().map(|(id, _)| *id);
        if let Err(e) = self.inner.store.read(move |conn| sweep(conn, &dir, writing)).await {
            tracing::warn!(error = %e, "could not clean the recordings directory");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::daemon::{Caller, DaemonOptions, Devices, RequestId, Role};
    use crate::device::hid::RecordingSink;
    use crate::device::sim::{SimConfig, SimPhone};
    use crate::protocol::Call;

    fn daemon_in(dir: &Path, recording: RecordingSettings, tasks_kept: u32) -> Daemon {
        let config = SimConfig { capture_width: 320, capture_height: 180, fps: 10, ..SimConfig::default() };
        let phone = SimPhone::new(config);
        Daemon::start(
            Devices { hid: Box::new(RecordingSink::default()), video: Box::new(phone.display()), sim: Some(phone) },
            DaemonOptions {
                sim: true,
                data_dir: Some(dir.to_path_buf()),
                recording,
                tasks_kept,
                ..DaemonOptions::default()
            },
        )
        .expect("daemon")
    }

    fn call(text: &str) -> Call {
        crate::protocol::parse_request(text.as_bytes()).expect("request").call
    }

    /// Waits (bounded) until the video has a picture, so a recording has something to take.
    async fn video_locked(d: &Daemon) {
        let mut frames = d.inner.frames.clone();
        while frames.latest().is_none() {
            tokio::time::timeout(Duration::from_secs(30), frames.changed()).await.expect("a frame");
        }
    }

    /// Opens a recorded task, waits for its first picture, ends it (`ok`); returns its id.
    async fn recorded_task(d: &Daemon, title: &str, ok: bool) -> i64 {
        let s = d.open_session(Caller::in_process(Role::Operate));
        let open = format!(r#"{{"id":1,"method":"task_open","title":"{title}","events":false,"record":true}}"#);
        let opened = d.handle(&s, RequestId(1), &call(&open)).await.expect("open");
        assert_eq!(opened["record"], true);
        let task = opened["id"].as_i64().expect("id");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let taken = d.inner.recordings.active.lock_plain().as_ref().map_or(0, |(_, r)| r.pictures());
            if taken > 0 {
                break;
            }
            assert!(Instant::now() < deadline, "the recording took no picture");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let finish = format!(r#"{{"id":2,"method":"task_finish","task":{task},"ok":{ok},"summary":"done"}}"#);
        d.handle(&s, RequestId(2), &call(&finish)).await.expect("finish");
        task
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(recordings_dir(dir))
            .map(|r| r.flatten().filter_map(|e| e.file_name().into_string().ok()).collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_recorded_task_ends_with_a_whole_file_a_journal_entry_and_a_report() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = daemon_in(dir.path(), RecordingSettings::default(), 0);
        video_locked(&d).await;
        let task = recorded_task(&d, "recorded", false).await;
        let info = d.recording_info(task).await.expect("read").expect("a row");
        assert_eq!(info.state, "complete", "{info:?}");
        // The phone's picture only, not the whole capture frame.
        let active = d.inner.frames.latest().map(|f| d.active_rect(&f)).expect("a frame");
        assert!(active.width < 320, "{active:?}");
        assert_eq!((info.width, info.height), (Some(active.width & !1), Some(active.height & !1)));
        assert_eq!(info.source.as_deref(), Some("encoded"));
        assert_eq!(files(dir.path()), vec![format!("task-{task}.mp4")]);
        let len = std::fs::metadata(recording_path(dir.path(), task)).expect("file").len();
        assert_eq!(info.bytes, len);
        // The journal says so before the task's last state (followers stop there).
        let events = d.inner.store.events_after(task, 0, 100).await.expect("events");
        let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
        let last_recording = kinds.iter().rposition(|k| *k == "recording").expect("a recording event");
        assert_eq!(events[last_recording].body["state"], "complete");
        assert_eq!(kinds.last(), Some(&"state"), "{kinds:?}");
        // The report: both files and the pieces of the recording.
        let s = d.open_session(Caller::in_process(Role::View));
        let report =
            d.handle(&s, RequestId(3), &call(&format!(r#"{{"id":3,"method":"task_report","task":{task}}}"#))).await;
        let report = report.expect("report");
        assert_eq!((report["state"].as_str(), report["passed"].as_bool()), (Some("failed"), Some(false)));
        assert!(report["html"].as_str().is_some_and(|h| h.contains("recording.mp4")));
        assert!(report["junit"].as_str().is_some_and(|j| j.contains("failures=\"1\"")));
        assert!(report["final_png"].is_string(), "the screen at the end is kept");
        let piece = format!(r#"{{"id":4,"method":"task_recording","task":{task},"offset":0,"length":1048576}}"#);
        let piece = d.handle(&s, RequestId(4), &call(&piece)).await.expect("piece");
        let data =
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, piece["data"].as_str().unwrap_or(""))
                .expect("base64");
        assert_eq!(data, std::fs::read(recording_path(dir.path(), task)).expect("file"));
        assert_eq!(piece["size"], len);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_recording_at_its_cap_is_cut_whole_and_the_journal_says_so() {
        // How big one picture's recording is here: the cap leaves room for it and a little.
        let probe = tempfile::tempdir().expect("tempdir");
        let d = daemon_in(probe.path(), RecordingSettings::default(), 0);
        video_locked(&d).await;
        let one = d.recording_info(recorded_task(&d, "probe", true).await).await.expect("read").expect("row").bytes;
        drop(d);
        let dir = tempfile::tempdir().expect("tempdir");
        let cap = one + (3 << 10);
        let d = daemon_in(dir.path(), RecordingSettings { max_bytes: cap, ..RecordingSettings::default() }, 0);
        video_locked(&d).await;
        let s = d.open_session(Caller::in_process(Role::Operate));
        let open = call(r#"{"id":1,"method":"task_open","title":"cap","events":false,"record":true}"#);
        let task = d.handle(&s, RequestId(1), &open).await.expect("open")["id"].as_i64().expect("id");
        // The screen's next keyframe (every 2 s) does not fit: the recorder ends on its own.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !d.inner.recordings.active.lock_plain().as_ref().is_some_and(|(_, r)| r.ended()) {
            assert!(Instant::now() < deadline, "the recording was never cut");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let finish = format!(r#"{{"id":2,"method":"task_finish","task":{task},"ok":true}}"#);
        d.handle(&s, RequestId(2), &call(&finish)).await.expect("finish");
        let info = d.recording_info(task).await.expect("read").expect("row");
        assert_eq!(info.state, "cut", "{info:?}");
        assert!(info.reason.as_deref().is_some_and(|r| r.contains("size cap")), "{info:?}");
        assert!(info.bytes <= cap && info.bytes > 0, "{} of {cap}", info.bytes);
        let events = d.inner.store.events_after(task, 0, 100).await.expect("events");
        let said = events.iter().find(|e| e.kind == "recording" && e.body["state"] == "cut").expect("a cut event");
        assert!(said.body["reason"].as_str().is_some_and(|r| r.contains("size cap")));
        // Whole: every sample the index lists is in the file.
        let bytes = std::fs::read(recording_path(dir.path(), task)).expect("file");
        let mut demuxer = shiguredo_mp4::demux::Mp4FileDemuxer::new();
        demuxer.handle_input(shiguredo_mp4::demux::Input { position: 0, data: &bytes });
        let mut samples = 0;
        while let Some(sample) = demuxer.next_sample().expect("a readable index") {
            assert!(sample.data_offset + sample.data_size as u64 <= bytes.len() as u64);
            samples += 1;
        }
        assert!(samples >= 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_total_cap_evicts_the_oldest_finished_recording_and_deleted_tasks_take_theirs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let settings =
            RecordingSettings { max_bytes: 64 << 10, max_total_bytes: 64 << 10, ..RecordingSettings::default() };
        let d = daemon_in(dir.path(), settings, 0);
        video_locked(&d).await;
        let a = recorded_task(&d, "a", true).await;
        assert_eq!(files(dir.path()), vec![format!("task-{a}.mp4")]);
        // Any finished recording plus a whole new one is over the total: A goes when B starts.
        let b = recorded_task(&d, "b", true).await;
        assert_eq!(files(dir.path()), vec![format!("task-{b}.mp4")]);
        let info = d.recording_info(a).await.expect("read").expect("row");
        assert_eq!(info.state, "evicted");
        assert!(info.reason.is_some_and(|r| r.contains("max_total_bytes")));
        let events = d.inner.store.events_after(a, 0, 100).await.expect("events");
        assert!(events.iter().any(|e| e.kind == "recording" && e.body["state"] == "evicted"));
        let s = d.open_session(Caller::in_process(Role::View));
        let piece = format!(r#"{{"id":4,"method":"task_recording","task":{a}}}"#);
        let refused = d.handle(&s, RequestId(4), &call(&piece)).await;
        assert!(matches!(refused, Err(crate::daemon::DaemonError::NotFound(_))), "{refused:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn retention_deletes_a_tasks_recording_with_it_and_a_restart_cleans_up() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = daemon_in(dir.path(), RecordingSettings::default(), 1);
        video_locked(&d).await;
        let a = recorded_task(&d, "a", true).await;
        let b = recorded_task(&d, "b", true).await;
        assert_eq!(files(dir.path()), vec![format!("task-{b}.mp4")], "task {a} was deleted with its file");
        // A task still recording when the daemon stops.
        let s = d.open_session(Caller::in_process(Role::Operate));
        let open = call(r#"{"id":1,"method":"task_open","title":"cut short","events":false,"record":true}"#);
        let c = d.handle(&s, RequestId(1), &open).await.expect("open")["id"].as_i64().expect("id");
        d.shutdown();
        d.inner.store.close().await;
        drop(d);
        // A run that stopped mid-recording: a row `recording` and a `.part`.
        std::fs::write(recordings_dir(dir.path()).join("task-99.mp4.part"), b"partial").expect("part");
        let d = daemon_in(dir.path(), RecordingSettings::default(), 1);
        assert_eq!(files(dir.path()), vec![format!("task-{b}.mp4")], "only whole recordings on record are left");
        let info = d.recording_info(c).await.expect("read").expect("row");
        assert_eq!((info.state.as_str(), info.has_file()), ("incomplete", false), "{info:?}");
        drop(s);
        drop(d);
    }

    #[test]
    fn the_oldest_finished_recordings_go_until_a_whole_one_fits() {
        let finished = [(1, 40), (2, 30), (3, 20)];
        assert_eq!(evictions(&finished, 10, 100), Vec::<i64>::new(), "90 + 10 fits in 100");
        assert_eq!(evictions(&finished, 20, 100), vec![1]);
        assert_eq!(evictions(&finished, 50, 100), vec![1]);
        assert_eq!(evictions(&finished, 60, 100), vec![1, 2]);
        assert_eq!(evictions(&finished, 100, 100), vec![1, 2, 3]);
        assert_eq!(evictions(&[], 100, 100), Vec::<i64>::new());
    }

    #[test]
    fn file_names_name_their_task_and_nothing_else_matches() {
        assert_eq!(task_of("task-12.mp4"), Some(12));
        assert_eq!(task_of("task-7.mp4.part"), Some(7));
        assert_eq!(task_of("task-x.mp4"), None);
        assert_eq!(task_of("notes.txt"), None);
        assert_eq!(task_of("task-3.mp4.bak"), None);
    }

    #[test]
    fn settings_that_cannot_work_are_refused_with_the_field_named() {
        assert_eq!(RecordingSettings::default().validate(), Ok(()));
        let small_total = RecordingSettings { max_total_bytes: 1 << 20, ..RecordingSettings::default() };
        assert!(small_total.validate().is_err_and(|e| e.contains("max_total_bytes")));
        let fps = RecordingSettings { fps: 0.0, ..RecordingSettings::default() };
        assert!(fps.validate().is_err_and(|e| e.contains("fps")));
    }
}
