//! Result types of `hello` and `status`.

use serde::Serialize;

use super::{Caller, SessionId};
use crate::device::hid::HostState;
use crate::device::video::Signal;
use crate::protocol::Limits;

/// What this daemon can do.
#[derive(Debug, Clone, Serialize)]
pub struct Capabilities {
    /// Implemented methods.
    pub methods: Vec<&'static str>,
    /// Whether the phone is the virtual iPhone.
    pub sim: bool,
    /// HID backend name.
    pub hid_backend: &'static str,
    /// Video backend name.
    pub video_backend: &'static str,
    /// Whether text on the screen can be read (`find_text`, `tap_text`, …): engine,
    /// version, languages, or the problem.
    pub text: serde_json::Value,
}

/// Result of `hello`.
#[derive(Debug, Clone, Serialize)]
pub struct HelloResult {
    /// Always `"tether/1"`.
    pub protocol: &'static str,
    /// Daemon version.
    pub version: &'static str,
    /// Capabilities.
    pub capabilities: Capabilities,
    /// Limits this daemon enforces.
    pub limits: Limits,
    /// Who the daemon thinks you are.
    pub caller: Caller,
    /// Your session id.
    pub session: SessionId,
    /// This connection's kind (`console`, `host`, `agent`), fixed by its first `hello`.
    pub kind: &'static str,
}

/// A size in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Size {
    /// Width.
    pub width: u32,
    /// Height.
    pub height: u32,
}

/// Daemon section of `status`.
#[derive(Debug, Clone, Serialize)]
pub struct DaemonInfo {
    /// Version.
    pub version: &'static str,
    /// Milliseconds since start.
    pub uptime_ms: u64,
    /// Whether the phone is the virtual iPhone.
    pub sim: bool,
    /// Open sessions (connections).
    pub sessions: usize,
}

/// HID section of `status`.
#[derive(Debug, Clone, Serialize)]
pub struct HidStatus {
    /// Backend name.
    pub backend: &'static str,
    /// Whether a host has the gadget (anything but `not_attached`).
    pub bound: bool,
    /// The host's state.
    pub host: HostState,
    /// Keyboard LED bits the host last set (bit 0 Num Lock, 1 Caps Lock, 2 Scroll Lock).
    pub leds: Option<u8>,
}

/// Video section of `status`.
#[derive(Debug, Clone, Serialize)]
pub struct VideoStatus {
    /// Backend name.
    pub backend: &'static str,
    /// Signal state.
    pub signal: Signal,
    /// Capture size, when known.
    pub source_size: Option<Size>,
    /// The capture device and what was negotiated with it (V4L2 capture only).
    pub device: Option<crate::device::video::CaptureDevice>,
    /// Signal/format epoch.
    pub generation: u32,
    /// Sequence number of the newest captured frame (decoded or not).
    pub frame_id: Option<u64>,
    /// Age of the newest captured frame.
    pub frame_age_ms: Option<u64>,
    /// Pictures captured a second over the last two seconds.
    pub fps: f32,
    /// How the capture arrives: `raw`, `h264` or `mjpeg`.
    pub capture: &'static str,
    /// Which path each consumer of the picture takes.
    pub paths: VideoPaths,
    /// Decoder for compressed capture (`none` for raw formats, `software`, `v4l2-m2m` for
    /// a stateful hardware decoder, `v4l2-request` for a stateless one).
    pub decoder: &'static str,
    /// Why the decoders tried before `decoder` were skipped (`decoder_backend = auto`
    /// tries stateful M2M, then stateless, then software), in the order tried.
    pub decoder_notes: Vec<String>,
    /// H.264 encoder for viewers (`software`, `v4l2-m2m`).
    pub encoder: &'static str,
    /// Viewer queues.
    pub viewers: crate::device::video::viewers::ViewerStats,
}

/// How each consumer of the video gets it (`status.video.paths`).
#[derive(Debug, Clone, Serialize)]
pub struct VideoPaths {
    /// Live viewers: `passthrough` (the capture's own H.264 or MJPEG, nothing decoded or
    /// encoded for them) or `encode` (H.264 by `encoder`, from decoded pictures when the
    /// capture is compressed).
    pub viewers: &'static str,
    /// Screenshots, observations, calibration and active-area detection: `raw` (the
    /// capture is pixels already) or `decode` (by `decoder`, only while one of them asks,
    /// newest picture only).
    pub pixels: &'static str,
}

impl VideoPaths {
    /// The paths the video of `frames` takes now.
    pub fn of(frames: &crate::device::video::FrameReader) -> VideoPaths {
        VideoPaths {
            viewers: if frames.passthrough() { "passthrough" } else { "encode" },
            pixels: if frames.compression().is_some() { "decode" } else { "raw" },
        }
    }
}

/// Input section of `status`.
#[derive(Debug, Clone, Serialize)]
pub struct InputStatus {
    /// Whether an input sequence is running.
    pub busy: bool,
}

/// Result of `status`.
#[derive(Debug, Clone, Serialize)]
pub struct StatusResult {
    /// Daemon.
    pub daemon: DaemonInfo,
    /// HID.
    pub hid: HidStatus,
    /// Video.
    pub video: VideoStatus,
    /// Input.
    pub input: InputStatus,
    /// Global limits and how close the daemon is to them.
    pub limits: super::LimitsStatus,
    /// The active (unfinished) task.
    pub task: Option<TaskStatus>,
    /// The HTTPS server, when one serves this daemon.
    pub https: Option<HttpsInfo>,
    /// Which orientations have a stored pointer calibration (`calibrate`).
    pub calibration: CalibrationStatus,
    /// Whether changes can be saved now (`writable: false`: they are refused with
    /// `STORAGE_FAILED`, reads are served).
    pub storage: super::StorageStatus,
    /// Jobs waiting for the phone (`task_open` with `wait`).
    pub queue: QueueStatus,
    /// The appliance's running slot and version, what boots next, and the last update when
    /// it was rolled back (`None` off the appliance image; `update_status` has the rest).
    pub update: Option<super::update::UpdateSummary>,
}

/// Who waits for the phone, first first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueStatus {
    /// How many wait.
    pub length: usize,
    /// The waiters.
    pub waiting: Vec<super::queue::Waiter>,
}

/// Which orientations have a stored pointer calibration; without one, pointer positions
/// map linearly onto the active rectangle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CalibrationStatus {
    /// Portrait.
    pub portrait: bool,
    /// Landscape.
    pub landscape: bool,
}

/// Where the HTTPS server listens and what clients pin (set by `serve` at start-up).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HttpsInfo {
    /// The port.
    pub port: u16,
    /// Host names and addresses clients may use, best first (for pairing URLs).
    pub hosts: Vec<String>,
    /// SHA-256 of the CA certificate clients pin, lowercase hex.
    pub fingerprint: String,
}

impl HttpsInfo {
    /// `https://HOST[:PORT]` for the best host.
    pub fn base_url(&self) -> String {
        let host = self.hosts.first().map_or("localhost", String::as_str);
        let host = if host.contains(':') { format!("[{host}]") } else { host.to_string() };
        if self.port == 443 {
            format!("https://{host}")
        } else {
            format!("https://{host}:{}", self.port)
        }
    }
}

/// The active task, in `status`.
#[derive(Debug, Clone, Serialize)]
pub struct TaskStatus {
    /// Id.
    pub id: i64,
    /// Title.
    pub title: String,
    /// Owner.
    pub owner: String,
    /// State.
    pub state: super::TaskState,
    /// Input steps so far.
    pub steps: u32,
    /// The agent must take a screenshot before its next action.
    pub needs_observation: bool,
    /// A question waiting for a human.
    pub question: Option<QuestionStatus>,
}

/// A pending question, in `status`.
#[derive(Debug, Clone, Serialize)]
pub struct QuestionStatus {
    /// Id.
    pub id: u64,
    /// The question.
    pub text: String,
    /// `confirm` or `open_app`.
    pub kind: &'static str,
}
