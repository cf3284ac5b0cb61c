//! Prometheus metrics (`metrics`, served as `GET /metrics`): what a farm watches on each
//! appliance. Counters and the latency histogram live here and grow as actions run; the
//! rest is read from `status` at each scrape, so the two always agree. Every label value
//! comes from a fixed set (error codes, states), never from callers' text.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use serde_json::Value;

use super::{Daemon, DaemonError, TaskState};
use crate::device::hid::HostState;
use crate::device::video::Signal;
use crate::protocol::ErrorBody;

/// The text format's content type (Prometheus text 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabel {
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    backend: String,
}

/// What accumulates between scrapes.
#[derive(Debug)]
pub(super) struct Metrics {
    actions: Family<CodeLabel, Counter>,
    verify: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            actions: Family::default(),
            // 50 ms .. 12.8 s: a settle takes a few hundred ms, a slow screen seconds.
            verify: Histogram::new(exponential_buckets(0.05, 2.0, 9)),
        }
    }
}

impl Metrics {
    /// Counts one action (or batch) by its outcome, and its verification time.
    pub(super) fn action(&self, result: &Result<Value, DaemonError>) {
        let code = match result {
            Ok(_) => "ok".to_string(),
            Err(e) => ErrorBody::from(e).code.as_str().to_string(),
        };
        self.actions.get_or_create(&CodeLabel { code }).inc();
        if let Some(ms) = result.as_ref().ok().and_then(|v| v["settled_ms"].as_u64()) {
            self.verify.observe(ms as f64 / 1000.0);
        }
    }
}

fn gauge(registry: &mut Registry, name: &str, help: &str, value: i64) {
    let g: Gauge = Gauge::default();
    g.set(value);
    registry.register(name, help, g);
}

fn gauge_f(registry: &mut Registry, name: &str, help: &str, value: f64) {
    let g: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default();
    g.set(value);
    registry.register(name, help, g);
}

/// One series per possible value, 1 for the current one (`state="…"`).
fn one_hot(registry: &mut Registry, name: &str, help: &str, values: &[&str], current: &str) {
    let family: Family<StateLabel, Gauge> = Family::default();
    for v in values {
        family.get_or_create(&StateLabel { state: (*v).to_string() }).set(i64::from(*v == current));
    }
    registry.register(name, help, family);
}

/// The daemon's resident memory, from the kernel (bytes).
fn resident_bytes() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: i64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

impl Daemon {
    /// Counts an action's outcome for `/metrics`.
    pub(super) fn count_action(&self, result: &Result<Value, DaemonError>) {
        self.inner.metrics.action(result);
    }

    /// `metrics`: every series in Prometheus' text format.
    pub(super) async fn metrics_text(&self) -> Result<Value, DaemonError> {
        let status = self.status().await;
        let mut r = Registry::with_prefix("tether");
        let connected = status.hid.host == HostState::Configured;
        gauge(&mut r, "phone_connected", "1 when a phone has the USB gadget configured", i64::from(connected));
        let signal = match status.video.signal {
            Signal::Locked => "locked",
            Signal::NoSignal => "no_signal",
            Signal::NoDevice => "no_device",
        };
        one_hot(&mut r, "video_signal", "The capture's signal", &["locked", "no_signal", "no_device"], signal);
        gauge_f(&mut r, "video_fps", "Pictures captured a second (last 2 s)", f64::from(status.video.fps));
        let mut states: Vec<&str> = TaskState::ALL.iter().map(|s| s.as_str()).collect();
        states.push("none");
        let task_state = status.task.as_ref().map_or("none", |t| t.state.as_str());
        one_hot(&mut r, "task_state", "The active task's state (none: no task)", &states, task_state);
        let queue = i64::try_from(status.queue.length).unwrap_or(i64::MAX);
        gauge(&mut r, "task_queue_length", "Jobs waiting for the phone", queue);
        let viewers = i64::try_from(status.video.viewers.viewers).unwrap_or(i64::MAX);
        gauge(&mut r, "viewers", "Live video viewers", viewers);
        let sessions = i64::try_from(status.daemon.sessions).unwrap_or(i64::MAX);
        gauge(&mut r, "sessions", "Open connections to the daemon", sessions);
        let recording = self.recording_bytes();
        gauge(&mut r, "recording_bytes", "Bytes of the recording being written (0: none)", recording);
        gauge(&mut r, "storage_writable", "1 when the data directory takes writes", i64::from(status.storage.writable));
        gauge(
            &mut r,
            "uptime_seconds",
            "Seconds since the daemon started",
            i64::try_from(status.daemon.uptime_ms / 1000).unwrap_or(0),
        );
        r.register(
            "actions",
            "Actions and batches by result code (ok or the error code)",
            self.inner.metrics.actions.clone(),
        );
        r.register(
            "verify_latency_seconds",
            "Time from an action's input to a settled screen",
            self.inner.metrics.verify.clone(),
        );
        let build: Family<BuildLabels, Gauge> = Family::default();
        let labels =
            BuildLabels { version: status.daemon.version.to_string(), backend: status.video.backend.to_string() };
        build.get_or_create(&labels).set(1);
        r.register("build_info", "The daemon's version and video backend", build);
        let mut process = Registry::default();
        if let Some(bytes) = resident_bytes() {
            gauge(&mut process, "process_resident_memory_bytes", "Resident memory of the daemon", bytes);
        }
        let mut text = String::new();
        let encode = |text: &mut String, registry: &Registry| {
            prometheus_client::encoding::prometheus_text::encode(text, registry)
                .map_err(|_| DaemonError::Worker("metrics"))
        };
        encode(&mut text, &r)?;
        encode(&mut text, &process)?;
        Ok(serde_json::json!({"content_type": CONTENT_TYPE, "text": text}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_count_by_code_and_verified_ones_feed_the_histogram() {
        let m = Metrics::default();
        m.action(&Ok(serde_json::json!({"settled_ms": 300})));
        m.action(&Ok(serde_json::json!({"settled_ms": 120})));
        m.action(&Err(DaemonError::NotSim));
        let mut r = Registry::default();
        r.register("actions", "a", m.actions.clone());
        r.register("verify", "v", m.verify.clone());
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &r).expect("encode");
        assert!(text.contains("actions_total{code=\"ok\"} 2"), "{text}");
        assert!(text.contains("actions_total{code=\"UNSUPPORTED\"} 1"), "{text}");
        assert!(text.contains("verify_count 2"), "{text}");
        assert!(text.contains("verify_bucket{le=\"0.2\"} 1"), "{text}");
    }
}
