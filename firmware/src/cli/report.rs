//! `tether task report ID -o DIR` and `task run --report DIR`: a task's evidence as
//! files — `report.html` (opens offline), `junit.xml`, `final.png` and `recording.mp4`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use base64::Engine as _;
use serde_json::{json, Value};
use tether::protocol::task_params::MAX_RECORDING_CHUNK;
use tether::report::{FINAL_PICTURE_FILE, RECORDING_FILE};

use super::lease::Lease;
use super::remote::Endpoint;

/// Something that answers tether/1 calls: a task's lease, or a fresh connection.
pub trait Calls {
    /// Calls `method` with `params`; the daemon's error as `CODE: message`.
    async fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value>;
}

impl Calls for Lease {
    async fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        Lease::call(self, method, params).await
    }
}

impl Calls for &Endpoint {
    async fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        Endpoint::call(self, method, params).await
    }
}

/// What was written.
#[derive(Debug)]
pub struct Saved {
    /// The task's state.
    pub state: String,
    /// The files, in the order written.
    pub files: Vec<PathBuf>,
    /// The recording's state when the task was recorded.
    pub recording: Option<String>,
}

/// Writes `bytes` to `path` through a temporary file, so a reader never sees half a file.
fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("part");
    std::fs::write(&tmp, bytes).with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("write {}", path.display()))
}

/// Fetches task `task`'s report through `calls` and writes it into `dir`.
pub async fn save_report(calls: &mut impl Calls, task: i64, dir: &Path) -> anyhow::Result<Saved> {
    let report = calls.call("task_report", json!({"task": task})).await?;
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let mut files = Vec::new();
    for (key, name) in [("html", "report.html"), ("junit", "junit.xml")] {
        let text = report[key].as_str().with_context(|| format!("the report has no {key}"))?;
        let path = dir.join(name);
        write_file(&path, text.as_bytes())?;
        files.push(path);
    }
    if let Some(png) = report["final_png"].as_str() {
        let bytes = base64::engine::general_purpose::STANDARD.decode(png).context("the final picture's base64")?;
        let path = dir.join(FINAL_PICTURE_FILE);
        write_file(&path, &bytes)?;
        files.push(path);
    }
    let recording = &report["recording"];
    let recording_state = recording["state"].as_str().map(str::to_string);
    let stale = dir.join(RECORDING_FILE);
    if recording["file"] == json!(true) {
        let path = save_recording(calls, task, dir).await?;
        files.push(path);
    } else if stale.exists() {
        // A recording from another report in this directory must not pass for this one's.
        std::fs::remove_file(&stale).with_context(|| format!("remove {}", stale.display()))?;
    }
    let state = report["state"].as_str().unwrap_or("unknown").to_string();
    Ok(Saved { state, files, recording: recording_state })
}

/// Copies the task's MP4 a piece at a time, saying how far it got on long copies.
async fn save_recording(calls: &mut impl Calls, task: i64, dir: &Path) -> anyhow::Result<PathBuf> {
    let path = dir.join(RECORDING_FILE);
    let tmp = path.with_extension("mp4.part");
    let mut file = std::fs::File::create(&tmp).with_context(|| format!("write {}", tmp.display()))?;
    let mut at = 0u64;
    let started = std::time::Instant::now();
    let mut said = started;
    loop {
        let piece = calls
            .call("task_recording", json!({"task": task, "offset": at, "length": MAX_RECORDING_CHUNK}))
            .await
            .context("fetch the recording")?;
        let data = piece["data"].as_str().context("a recording piece without data")?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(data).context("the recording's base64")?;
        let size = piece["size"].as_u64().unwrap_or(0);
        file.write_all(&bytes).with_context(|| format!("write {}", tmp.display()))?;
        at += bytes.len() as u64;
        if said.elapsed().as_secs() >= 2 {
            eprintln!("tether: recording {} of {} MiB", at >> 20, size.div_ceil(1 << 20));
            said = std::time::Instant::now();
        }
        if bytes.is_empty() || at >= size {
            anyhow::ensure!(at == size, "the recording changed while it was copied ({at} of {size} bytes)");
            break;
        }
    }
    file.sync_all()?;
    std::fs::rename(&tmp, &path).with_context(|| format!("write {}", path.display()))?;
    Ok(path)
}

/// Prints what [`save_report`] wrote.
pub fn describe(task: i64, dir: &Path, saved: &Saved) {
    let names: Vec<String> =
        saved.files.iter().filter_map(|f| f.file_name().map(|n| n.to_string_lossy().into_owned())).collect();
    eprintln!("tether: report of task {task} ({}) in {}: {}", saved.state, dir.display(), names.join(", "));
    if let Some(state) = saved.recording.as_deref().filter(|s| !matches!(*s, "complete")) {
        eprintln!("tether: the recording is {state}: report.html says why");
    }
}

/// `tether task report ID -o DIR`.
pub fn run_report(endpoint: Endpoint, task: i64, dir: &Path) -> anyhow::Result<ExitCode> {
    let saved = super::client_runtime()?.block_on(async { save_report(&mut &endpoint, task, dir).await })?;
    describe(task, dir, &saved);
    Ok(ExitCode::SUCCESS)
}
