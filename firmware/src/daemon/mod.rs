//! The single execution point.
//!
//! The [`Daemon`] owns the devices (behind [`HidSink`] and [`FrameSource`]), serializes input
//! (one sequence at a time, FIFO), and answers every method for every transport. Transports
//! hold a [`Daemon`] handle and a [`Session`] per connection; they never see a device.
#![forbid(unsafe_code)]

mod act;
mod calibrate;
mod caller;
mod input;
mod observations;
mod operations;
mod status;
pub mod store;
mod task_methods;
pub mod tasks;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

pub use calibrate::{calibration_file, Calibrations, Orientation};
pub use caller::{Caller, Identity, PeerCredentials, Role, RolePolicy};
pub use input::{InputError, InputLane, InputStep};
pub use observations::{Observation, ObservationError, ObservationStore, OBSERVATIONS_KEPT, OBSERVATION_TTL};
pub use operations::{OperationCache, OPERATIONS_KEPT, OPERATION_TTL};
pub use status::{
    Capabilities, DaemonInfo, HelloResult, HidStatus, InputStatus, StatusResult, TaskStatus, VideoStatus,
};
pub use tasks::{TaskError, TaskState};

use crate::device::geometry::{OutOfBounds, PixelRect};
use crate::device::hid::descriptor::PointerProfile;
use crate::device::hid::{HidSink, Keymap, Layout, UntypeableText};
use crate::device::input::{InputTimings, RelativePlanner};
use crate::device::sim::SimPhone;
use crate::device::video::codec::EncoderSettings;
use crate::device::video::encode::{start_encoder, EncoderKind};
use crate::device::video::image::ImageError;
use crate::device::video::viewers::{ViewerHub, ViewerId};
use crate::device::video::{FrameHub, FrameReader, FrameSource, SourceGuard, VideoError};
use crate::protocol::{Call, ErrorBody, Event, HelloParams, Limits, Method, Request, RequestId, PROTOCOL_NAME};
use store::{Store, StoreError};
use tasks::{Admission, Asker, DeviceIdentity, Still, Tasks};

/// Errors the daemon returns to callers. Mapped to wire codes in exactly one place:
/// `impl From<&DaemonError> for protocol::ErrorBody`.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The caller's role does not allow the method.
    #[error("{method} needs the {needed:?} role; this caller is {have:?}")]
    PermissionDenied {
        /// The method refused.
        method: &'static str,
        /// The role it needs.
        needed: Role,
        /// The caller's role.
        have: Role,
    },
    /// `hello` asked for another protocol.
    #[error("protocol {requested:?} is not supported; this daemon speaks {PROTOCOL_NAME}")]
    UnsupportedProtocol {
        /// What the client asked for.
        requested: String,
    },
    /// An input sequence failed.
    #[error(transparent)]
    Input(#[from] InputError),
    /// The daemon is shutting down.
    #[error("the daemon is shutting down")]
    ShuttingDown,
    /// A sim-only method on hardware.
    #[error("this method exists only with the virtual iPhone (`tether serve --sim`)")]
    NotSim,
    /// No frame to observe.
    #[error("no video frame is available: check the HDMI signal (`tether status`)")]
    NoFrame,
    /// An observation cannot be used.
    #[error(transparent)]
    Observation(#[from] ObservationError),
    /// Coordinates outside the observation.
    #[error(transparent)]
    OutOfBounds(#[from] OutOfBounds),
    /// An operation id reused with other arguments.
    #[error("operation_id {operation_id:?} was already used with different arguments; use a new id")]
    OperationConflict {
        /// The id.
        operation_id: String,
    },
    /// Text the layout cannot type.
    #[error(transparent)]
    Untypeable(#[from] UntypeableText),
    /// An argument is valid JSON but makes no sense here.
    #[error("{0}")]
    InvalidArgument(String),
    /// Calibration failed; the pointer moved (side effect), the old calibration stays.
    #[error("{0}")]
    Calibration(String),
    /// Producing an image failed.
    #[error("could not produce the image")]
    Image(#[from] ImageError),
    /// An action's failure, already mapped to its wire error with its status
    /// (`failed_before_submit` / `outcome_unknown`); also how cached failures come back.
    #[error("{}", .0.message)]
    ActionFailed(ErrorBody),
    /// Task admission or control refused the request.
    #[error(transparent)]
    Task(#[from] TaskError),
    /// The task store failed; the daemon keeps running.
    #[error("the task store failed: {0}")]
    Store(#[from] StoreError),
}

impl DaemonError {
    /// A message safe to send to a remote caller: no paths, errno details or secrets.
    pub fn public_message(&self) -> String {
        match self {
            DaemonError::Input(InputError::Hid { reports_sent, .. }) => format!(
                "the HID device failed after {reports_sent} reports; held input was released. \
                 Check `tether status` for the USB host state and retry"
            ),
            DaemonError::Input(InputError::HostNotConnected) => {
                "no phone has enumerated the USB gadget; nothing was sent. Check the cable/hub and \
                 that the phone is unlocked, then retry"
                    .to_string()
            }
            DaemonError::Store(_) => "the task store failed; the request was not recorded. See the daemon's log".into(),
            other => other.to_string(),
        }
    }
}

/// Errors starting the daemon.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The video source did not start.
    #[error("start video source")]
    Video(#[from] VideoError),
    /// The task store could not be opened.
    #[error("open the task store")]
    Store(#[from] StoreError),
}

/// The devices the daemon owns.
#[derive(Debug)]
pub struct Devices {
    /// Where HID reports go.
    pub hid: Box<dyn HidSink>,
    /// Where frames come from.
    pub video: Box<dyn FrameSource>,
    /// The virtual iPhone, when the devices are simulated (answers `sim_state`).
    pub sim: Option<SimPhone>,
}

/// The relative profile's default screen size in mouse counts: an iPhone 15/16 Pro is
/// 393x852 points, and iOS moves one point per count at base gain.
pub const DEFAULT_RELATIVE_COUNTS: (f64, f64) = (393.0, 852.0);

/// Start-up options that are not devices.
#[derive(Debug, Clone, Default)]
pub struct DaemonOptions {
    /// Where persistent state lives (calibration); `None` keeps it in memory only.
    pub data_dir: Option<std::path::PathBuf>,
    /// Whether the devices are the virtual iPhone (advertised in `hello` and `status`).
    pub sim: bool,
    /// Gesture timings.
    pub timings: InputTimings,
    /// The phone's keyboard layout.
    pub layout: Layout,
    /// A fixed active rectangle instead of detection.
    pub active_rect: Option<PixelRect>,
    /// Absolute pointer (default) or the relative-mouse fallback.
    pub pointer_profile: PointerProfile,
    /// For the relative profile: the screen's size in base-gain mouse counts.
    pub relative_counts_per_screen: (f64, f64),
    /// H.264 settings for viewers.
    pub encoder: EncoderSettings,
    /// Which H.264 encoder feeds viewers.
    pub encoder_kind: EncoderKind,
    /// Finished tasks kept in the store (0: the default, 200).
    pub tasks_kept: u32,
}

/// Finished tasks kept by default.
pub const DEFAULT_TASKS_KEPT: u32 = 200;
/// Events a session's stream may hold before the producer waits.
const SESSION_EVENTS: usize = 64;

/// What a session's transport forwards besides responses.
#[derive(Debug)]
pub enum SessionMessage {
    /// An event to write.
    Event(Event),
    /// Answer once every earlier event is queued for writing (a response that must come
    /// after them waits for this).
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// Identifies one session (one connection) for the daemon's lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct SessionId(pub u64);

/// One caller's connection to the daemon. Dropping it releases held input it caused and
/// (once tasks exist) ends its lease.
#[derive(Debug)]
pub struct Session {
    id: SessionId,
    caller: Caller,
    cancel: CancellationToken,
    in_flight: std::sync::Mutex<act::InFlight>,
    events: tokio::sync::mpsc::Sender<SessionMessage>,
    events_rx: std::sync::Mutex<Option<tokio::sync::mpsc::Receiver<SessionMessage>>>,
    inner: Arc<Inner>,
}

impl Session {
    fn in_flight(&self) -> std::sync::MutexGuard<'_, act::InFlight> {
        // Plain data; a panic elsewhere cannot leave it inconsistent.
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Releases what this session holds now (its peer closed), without waiting for drop.
    pub fn close(&self) {
        self.cancel.cancel();
    }

    /// The session's id.
    pub fn id(&self) -> SessionId {
        self.id
    }

    /// The caller.
    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// The session's event stream (task events it follows), for its transport to forward.
    /// Once: later calls get `None`.
    pub fn take_events(&self) -> Option<tokio::sync::mpsc::Receiver<SessionMessage>> {
        self.events_rx.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.inner.sessions.fetch_sub(1, Ordering::Relaxed);
        // The lease: a task opened on this connection is abandoned now (its input was
        // cancelled with the task), and the transition is persisted in the background.
        let withdrawn = self.inner.tasks.withdraw_asked_by(self.id);
        let abandoned = self.inner.tasks.lease_lost(self.id);
        if let Some(change) = &abandoned {
            tracing::info!(task = change.task, session = self.id.0, "lease lost: task abandoned");
        }
        let changes: Vec<_> = withdrawn.into_iter().chain(abandoned).collect();
        if !changes.is_empty() {
            let store = self.inner.store.clone();
            let keep = self.inner.tasks_kept;
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    for change in changes {
                        task_methods::persist_change(&store, &change, keep).await;
                    }
                });
            }
        }
    }
}

#[derive(Debug)]
struct Inner {
    options: DaemonOptions,
    started: Instant,
    hid_backend: &'static str,
    video_backend: &'static str,
    lane: Mutex<InputLane>,
    input_busy: AtomicBool,
    frames: FrameReader,
    sessions: AtomicUsize,
    next_session: AtomicU64,
    shutdown: CancellationToken,
    sim: Option<SimPhone>,
    timings: InputTimings,
    keymap: Keymap,
    observations: std::sync::Mutex<ObservationStore>,
    operations: std::sync::Mutex<OperationCache>,
    active: std::sync::Mutex<Option<(u32, PixelRect)>>,
    calibrations: std::sync::Mutex<Calibrations>,
    relative: Option<std::sync::Mutex<RelativePlanner>>,
    viewers: ViewerHub,
    _encoder: SourceGuard,
    data_dir: Option<std::path::PathBuf>,
    tasks: Tasks,
    store: Store,
    tasks_kept: u32,
    /// Orders a task change's in-memory update with its store write.
    journal: Mutex<()>,
    _video: SourceGuard,
}

/// Handle to the daemon; clones share it.
#[derive(Debug, Clone)]
pub struct Daemon {
    inner: Arc<Inner>,
}

impl Daemon {
    /// Starts the daemon over `devices`: the video source starts producing immediately.
    pub fn start(devices: Devices, options: DaemonOptions) -> Result<Daemon, StartError> {
        let (hub, frames) = FrameHub::new();
        let video_backend = devices.video.backend();
        let hid_backend = devices.hid.backend();
        let db = match &options.data_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| StoreError::Io(dir.clone(), e))?;
                dir.join("tasks.db")
            }
            None => std::path::PathBuf::from(":memory:"),
        };
        let (store, interrupted) = Store::open(&db)?;
        if !interrupted.is_empty() {
            tracing::warn!(tasks = ?interrupted, "tasks unfinished at the last shutdown are now interrupted");
        }
        let tasks_kept = if options.tasks_kept == 0 { DEFAULT_TASKS_KEPT } else { options.tasks_kept };
        let guard = devices.video.start(hub)?;
        // Encodes only while a viewer watches.
        let viewers = ViewerHub::default();
        let encoder = start_encoder(frames.clone(), viewers.clone(), options.encoder, options.encoder_kind.clone())?;
        let calibrations =
            options.data_dir.as_deref().map(|d| Calibrations::load(&calibration_file(d))).unwrap_or_default();
        let (timings, keymap, data_dir) = (options.timings, Keymap::new(options.layout), options.data_dir.clone());
        let relative = (options.pointer_profile == PointerProfile::Relative).then(|| {
            let counts = options.relative_counts_per_screen;
            let counts = if counts.0 > 0.0 && counts.1 > 0.0 { counts } else { DEFAULT_RELATIVE_COUNTS };
            std::sync::Mutex::new(RelativePlanner::new(counts))
        });
        let daemon = Daemon {
            inner: Arc::new(Inner {
                options,
                started: Instant::now(),
                hid_backend,
                video_backend,
                lane: Mutex::new(InputLane::new(devices.hid)),
                input_busy: AtomicBool::new(false),
                frames,
                sessions: AtomicUsize::new(0),
                next_session: AtomicU64::new(1),
                shutdown: CancellationToken::new(),
                sim: devices.sim,
                timings,
                keymap,
                observations: std::sync::Mutex::default(),
                operations: std::sync::Mutex::default(),
                active: std::sync::Mutex::default(),
                calibrations: std::sync::Mutex::new(calibrations),
                relative,
                viewers,
                _encoder: encoder,
                data_dir,
                tasks: Tasks::default(),
                store,
                tasks_kept,
                journal: Mutex::new(()),
                _video: guard,
            }),
        };
        daemon.watch_device();
        Ok(daemon)
    }

    /// Interrupts the active task as soon as the capture shows another device (a different
    /// picture size), not only at its next action. Needs a runtime; without one (plain unit
    /// tests) admission still checks at every input.
    fn watch_device(&self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let weak = Arc::downgrade(&self.inner);
        let mut frames = self.inner.frames.clone();
        rt.spawn(async move {
            while frames.state_changed().await {
                let Some(inner) = weak.upgrade() else { break };
                let daemon = Daemon { inner };
                if let Some(change) = daemon.inner.tasks.check_device(&daemon.device_identity()) {
                    tracing::warn!(task = change.task, "the device changed: task interrupted");
                    daemon.persist(change).await;
                }
            }
        });
    }

    /// Opens a session for an authenticated caller.
    pub fn open_session(&self, caller: Caller) -> Session {
        let id = SessionId(self.inner.next_session.fetch_add(1, Ordering::Relaxed));
        self.inner.sessions.fetch_add(1, Ordering::Relaxed);
        let (events, events_rx) = tokio::sync::mpsc::channel(SESSION_EVENTS);
        Session {
            id,
            caller,
            cancel: self.inner.shutdown.child_token(),
            in_flight: std::sync::Mutex::default(),
            events,
            events_rx: std::sync::Mutex::new(Some(events_rx)),
            inner: self.inner.clone(),
        }
    }

    /// Adds a video viewer (for the WebSocket transport): it receives H.264 access units,
    /// starting with an IDR, through [`Daemon::viewer_hub`].
    pub fn join_viewer(&self) -> (ViewerId, std::sync::Arc<tokio::sync::Notify>) {
        self.inner.viewers.join()
    }

    /// The viewer queues (take, ack, keyframe requests, leave).
    pub fn viewer_hub(&self) -> &ViewerHub {
        &self.inner.viewers
    }

    /// Stops accepting work and cancels every running input sequence (held input is
    /// released by the lane).
    pub fn shutdown(&self) {
        self.inner.shutdown.cancel();
    }

    fn lock_observations(&self) -> std::sync::MutexGuard<'_, ObservationStore> {
        // Plain data; a panic elsewhere cannot leave it inconsistent.
        self.inner.observations.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_operations(&self) -> std::sync::MutexGuard<'_, OperationCache> {
        // Plain data; a panic elsewhere cannot leave it inconsistent.
        self.inner.operations.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Handles request `id` of `session`, made without a task token.
    pub async fn handle(&self, session: &Session, id: RequestId, call: &Call) -> Result<Value, DaemonError> {
        self.handle_with(session, id, None, call).await
    }

    /// Handles a parsed request of `session`, with its task token.
    pub async fn handle_request(&self, session: &Session, request: &Request) -> Result<Value, DaemonError> {
        self.handle_with(session, request.id, request.task_token.as_deref(), &request.call).await
    }

    async fn handle_with(
        &self,
        session: &Session,
        id: RequestId,
        token: Option<&str>,
        call: &Call,
    ) -> Result<Value, DaemonError> {
        if self.inner.shutdown.is_cancelled() {
            return Err(DaemonError::ShuttingDown);
        }
        // A token must name the active task, whatever the request (reading task history
        // and the daemon's state excepted): an agent whose task ended learns it at once.
        let reads = matches!(call, Call::Hello(_) | Call::Status(_) | Call::TaskList(_) | Call::TaskEvents(_));
        if let (Some(t), false) = (token, reads) {
            self.inner.tasks.by_token(t)?;
        }
        let value = match call {
            Call::Hello(params) => to_value(&self.hello(session, params)?),
            Call::Status(_) => to_value(&self.status().await),
            Call::Screenshot(p) => {
                let shot = self.screenshot(p).await?;
                if let Some(task) = token.and_then(|t| self.inner.tasks.by_token(t).ok()) {
                    self.inner.tasks.observed(task);
                }
                shot
            }
            Call::Preview(p) => self.preview(p).await?,
            Call::Action(p) => self.action(session, id, token, p).await?,
            Call::Batch(p) => self.batch(session, id, token, p).await?,
            Call::Cancel(p) => serde_json::json!({"cancelled": self.cancel(session, p.request_id)}),
            Call::SimState(_) => to_value(&self.inner.sim.as_ref().ok_or(DaemonError::NotSim)?.state()),
            Call::Calibrate(p) => self.calibrate(session, p).await?,
            Call::TaskOpen(p) => self.task_open(session, token, p).await?,
            Call::TaskList(p) => self.task_list(p).await?,
            Call::TaskEvents(p) => self.task_events(session, p).await?,
            Call::TaskControl(p) => self.task_control(session, token, p).await?,
            Call::TaskConfirm(p) => self.task_confirm(session, token, p).await?,
            Call::TaskNote(p) => self.task_note(session, token, p).await?,
            Call::TaskFinish(p) => self.task_finish(session, token, p).await?,
        };
        Ok(value)
    }

    fn hello(&self, session: &Session, params: &HelloParams) -> Result<HelloResult, DaemonError> {
        if let Some(requested) = &params.protocol {
            if requested != PROTOCOL_NAME {
                return Err(DaemonError::UnsupportedProtocol { requested: requested.clone() });
            }
        }
        if let Some(client) = &params.client {
            tracing::info!(session = session.id.0, client = %client, "hello");
        }
        Ok(HelloResult {
            protocol: PROTOCOL_NAME,
            version: env!("CARGO_PKG_VERSION"),
            capabilities: Capabilities {
                methods: Method::ALL.iter().map(|m| m.as_str()).collect(),
                sim: self.inner.options.sim,
                hid_backend: self.inner.hid_backend,
                video_backend: self.inner.video_backend,
            },
            limits: Limits::CURRENT,
            caller: session.caller,
            session: session.id,
        })
    }

    /// The device and daemon state.
    pub async fn status(&self) -> StatusResult {
        let (host, leds) = match self.inner.lane.try_lock() {
            Ok(lane) => (lane.host_state(), lane.leds()),
            // An input sequence holds the lane; it only runs while a host is attached, and
            // `status` must never wait behind a long gesture.
            Err(_) => (crate::device::hid::HostState::Configured, None),
        };
        let video = self.inner.frames.state();
        let latest = self.inner.frames.latest();
        StatusResult {
            daemon: DaemonInfo {
                version: env!("CARGO_PKG_VERSION"),
                uptime_ms: millis(self.inner.started.elapsed()),
                sim: self.inner.options.sim,
                sessions: self.inner.sessions.load(Ordering::Relaxed),
            },
            hid: HidStatus {
                backend: self.inner.hid_backend,
                bound: host != crate::device::hid::HostState::NotAttached,
                host,
                leds,
            },
            video: VideoStatus {
                backend: self.inner.video_backend,
                signal: video.signal,
                source_size: video.source_size.map(|(width, height)| status::Size { width, height }),
                generation: video.generation,
                frame_id: latest.as_ref().map(|f| f.sequence),
                frame_age_ms: latest.as_ref().map(|f| millis(f.captured_at.elapsed())),
                encoder: self.inner.viewers.encoder(),
                decoder: self.inner.frames.decoder(),
                viewers: self.inner.viewers.stats(),
            },
            input: InputStatus { busy: self.inner.input_busy.load(Ordering::Relaxed) },
            task: self.inner.tasks.with_active(|t| {
                t.filter(|t| !t.state.is_terminal()).map(|t| TaskStatus {
                    id: t.id,
                    title: t.title.clone(),
                    owner: t.owner.clone(),
                    state: t.state,
                    steps: t.steps,
                    needs_observation: t.needs_observation,
                    question: t.question.as_ref().map(|q| status::QuestionStatus {
                        id: q.id,
                        text: q.text.clone(),
                        kind: q.kind,
                    }),
                })
            }),
        }
    }

    /// Runs one input sequence for `session`, after every sequence queued before it. The
    /// session's cancellation (disconnect, shutdown) stops it and releases held input.
    pub async fn run_input(&self, session: &Session, steps: &[InputStep]) -> Result<usize, DaemonError> {
        self.run_input_with(session, None, steps, &session.cancel).await.map(|(n, _)| n)
    }

    /// The device identity tasks are bound to.
    fn device_identity(&self) -> DeviceIdentity {
        DeviceIdentity {
            hid: self.inner.hid_backend,
            video: self.inner.video_backend,
            source_size: self.inner.frames.state().source_size,
        }
    }

    /// Admission, the device lock, the re-check, then the sequence. Returns the reports
    /// sent and how the input was admitted (which task it counts for).
    async fn run_input_with(
        &self,
        session: &Session,
        token: Option<&str>,
        steps: &[InputStep],
        cancel: &CancellationToken,
    ) -> Result<(usize, Admission), DaemonError> {
        let role = session.caller.role;
        if token.is_none() && !role.includes(Role::Operate) && role != Role::Agent {
            return Err(DaemonError::PermissionDenied { method: "input", needed: Role::Operate, have: role });
        }
        let asker = Asker { session: session.id, role, token };
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
                    self.record_refusal(session, token, "input", &e).await;
                    return Err(e.into());
                }
            };
            if matches!(admission, Admission::Free) && !role.includes(Role::Operate) {
                return Err(DaemonError::PermissionDenied { method: "input", needed: Role::Operate, have: role });
            }
            let task_cancel = match &admission {
                Admission::Task { cancel, .. } => cancel.clone(),
                _ => CancellationToken::new(),
            };
            let mut lane = tokio::select! {
                lane = self.inner.lane.lock() => lane,
                () = cancel.cancelled() => {
                    self.inner.tasks.unreserve(&admission);
                    return Err(InputError::Cancelled { reports_sent: 0 }.into());
                }
                () = task_cancel.cancelled() => {
                    self.inner.tasks.unreserve(&admission);
                    return Err(TaskError::Ended.into());
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
                    self.record_refusal(session, token, "input", &e).await;
                    return Err(e.into());
                }
            }
            // Stop on the caller's cancellation or, for a task's input, the task's end,
            // whichever comes first (a token has one parent: a small watcher joins the two).
            let run_cancel = cancel.child_token();
            let watcher = matches!(admission, Admission::Task { .. }).then(|| {
                let (run_cancel, task_cancel) = (run_cancel.clone(), task_cancel.clone());
                tokio::spawn(async move {
                    task_cancel.cancelled().await;
                    run_cancel.cancel();
                })
            });
            self.inner.input_busy.store(true, Ordering::Relaxed);
            let result = lane.run(steps, &run_cancel).await;
            self.inner.input_busy.store(false, Ordering::Relaxed);
            if let Some(w) = watcher {
                w.abort();
            }
            return Ok((result?, admission));
        }
    }
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    // Our result types serialize infallibly (string keys, no custom impls that fail).
    serde_json::to_value(v).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::device::hid::{HidReport, HostState, PointerReport, RecordingSink};
    use crate::device::sim::{SimConfig, SimPhone};
    use crate::protocol::StatusParams;

    fn daemon_with(rec: &RecordingSink) -> Daemon {
        let phone = SimPhone::new(SimConfig::default());
        Daemon::start(
            Devices { hid: Box::new(rec.clone()), video: Box::new(phone.display()), sim: Some(phone.clone()) },
            DaemonOptions { sim: true, ..DaemonOptions::default() },
        )
        .unwrap()
    }

    fn operator() -> Caller {
        Caller { identity: Identity::InProcess, role: Role::Operate }
    }

    fn press() -> InputStep {
        InputStep::Report(HidReport::Pointer(PointerReport::new(1, 10, 10, 0)))
    }

    #[tokio::test]
    async fn hello_reports_caller_and_rejects_other_protocols() {
        let d = daemon_with(&RecordingSink::default());
        let s = d.open_session(operator());
        let v = d.handle(&s, RequestId(1), &Call::Hello(HelloParams::default())).await.unwrap();
        assert_eq!(v["protocol"], "tether/1");
        assert_eq!(v["caller"]["role"], "operate");
        assert_eq!(v["limits"]["max_request_bytes"], 65536);
        let bad = HelloParams { protocol: Some("tether/2".into()), client: None };
        assert!(matches!(
            d.handle(&s, RequestId(1), &Call::Hello(bad)).await,
            Err(DaemonError::UnsupportedProtocol { .. })
        ));
    }

    #[tokio::test]
    async fn status_shows_frames_and_sessions() {
        let d = daemon_with(&RecordingSink::default());
        let _a = d.open_session(operator());
        let b = d.open_session(operator());
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let st = d.status().await;
            if st.video.frame_id.is_some() {
                assert_eq!(st.daemon.sessions, 2);
                assert_eq!(st.video.generation, 1);
                assert!(st.video.frame_age_ms.unwrap() < 5000);
                break;
            }
            assert!(Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(b);
        let v = d.handle(&d.open_session(operator()), RequestId(2), &Call::Status(StatusParams {})).await.unwrap();
        assert_eq!(v["daemon"]["sessions"], 2);
        assert_eq!(v["hid"]["host"], "configured");
    }

    #[tokio::test]
    async fn viewers_and_agents_without_a_task_cannot_send_input() {
        let d = daemon_with(&RecordingSink::default());
        for role in [Role::View, Role::Agent] {
            let s = d.open_session(Caller { identity: Identity::InProcess, role });
            assert!(matches!(d.run_input(&s, &[press()]).await, Err(DaemonError::PermissionDenied { .. })));
        }
    }

    #[tokio::test]
    async fn input_is_serialized_and_disconnect_releases() {
        let rec = RecordingSink::default();
        let d = daemon_with(&rec);
        let first = d.open_session(operator());
        let second = d.open_session(operator());
        let long = [press(), InputStep::Wait(Duration::from_secs(30))];
        let d1 = d.clone();
        let run1 = tokio::spawn(async move { d1.run_input(&first, &long).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(d.status().await.input.busy);
        // The second sequence waits for the first; dropping the first session (a
        // disconnect) cancels it, releases the button, then the second runs.
        let d2 = d.clone();
        let run2 = tokio::spawn(async move { d2.run_input(&second, &[press()]).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(rec.reports().len(), 1, "second sequence must wait");
        run1.abort(); // dropping the future drops `first`, like a closed connection
        let _ = run1.await;
        assert_eq!(run2.await.unwrap().unwrap(), 1);
        let kinds: Vec<bool> = rec.reports().iter().map(|r| r.report.holds_input()).collect();
        // press (held) ... released by whoever ran next, press, release.
        assert_eq!(kinds.first(), Some(&true));
        assert_eq!(kinds.last(), Some(&false));
        assert!(!d.status().await.input.busy);
    }

    #[tokio::test]
    async fn configured_active_rect_overrides_detection() {
        let phone = SimPhone::new(SimConfig::default());
        let fixed = PixelRect { x: 700, y: 10, width: 500, height: 1000 };
        let d = Daemon::start(
            Devices { hid: Box::new(phone.hid()), video: Box::new(phone.display()), sim: Some(phone.clone()) },
            DaemonOptions { sim: true, active_rect: Some(fixed), ..DaemonOptions::default() },
        )
        .unwrap();
        let s = d.open_session(operator());
        let shot = d.handle(&s, RequestId(1), &Call::Screenshot(Default::default())).await.unwrap();
        assert_eq!(
            shot["metadata"]["active_rect"],
            serde_json::json!({"x": 700, "y": 10, "width": 500, "height": 1000})
        );
        assert_eq!(shot["metadata"]["image_size"], serde_json::json!({"width": 500, "height": 1000}));
    }

    #[tokio::test]
    async fn a_viewer_joined_through_the_daemon_gets_an_idr() {
        let d = daemon_with(&RecordingSink::default());
        let (id, _notify) = d.join_viewer();
        let deadline = Instant::now() + Duration::from_secs(5);
        let first = loop {
            if let Some(f) = d.viewer_hub().take(id) {
                break f;
            }
            assert!(Instant::now() < deadline, "no picture for the viewer");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert!(first.unit.keyframe);
        let st = d.status().await;
        assert_eq!((st.video.encoder, st.video.viewers.viewers), ("software", 1));
        d.viewer_hub().leave(id);
        assert_eq!(d.status().await.video.viewers.viewers, 0);
    }

    #[tokio::test]
    async fn host_not_connected_is_reported() {
        let rec = RecordingSink::default();
        rec.set_host_state(HostState::NotAttached);
        let d = daemon_with(&rec);
        let s = d.open_session(operator());
        let err = d.run_input(&s, &[press()]).await.unwrap_err();
        assert_eq!(crate::protocol::ErrorBody::from(&err).code, crate::protocol::ErrorCode::HostNotConnected);
        assert!(!d.status().await.hid.bound);
    }
}
