//! The single execution point.
//!
//! The [`Daemon`] owns the devices (behind [`HidSink`] and [`FrameSource`]), serializes input
//! (one sequence at a time, FIFO), and answers every method for every transport. Transports
//! hold a [`Daemon`] handle and a [`Session`] per connection; they never see a device.
#![forbid(unsafe_code)]

mod act;
mod calibrate;
mod caller;
mod data_lock;
mod error;
pub mod holds;
mod host_methods;
mod input;
mod limits;
mod metrics;
mod observations;
mod open_app;
mod operations;
mod phone;
mod play;
pub mod queue;
mod recordings;
mod report;
mod session;
mod settle;
mod status;
pub mod storage;
pub mod store;
mod task_methods;
pub mod tasks;
mod text;
mod text_find;
mod token_methods;
pub mod tokens;
mod turn;
pub mod update;
pub mod video;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

/// The phone's side of the USB link as `status.hid.host` reports it (a device fact the
/// daemon passes on, re-exported so transports need not reach into `device`).
pub use crate::device::hid::HostState;
pub use calibrate::{calibration_file, Calibrations, Orientation};
pub use caller::{Caller, Identity, PeerCredentials, Principal, Role};
pub use data_lock::{DataDirLock, DataLockError, LOCK_FILE};
pub use error::DaemonError;
pub use holds::{Hold, HoldKind, HoldLimits, HoldRefused, HoldWatch, Holder};
pub use input::{InputError, InputLane, InputStep};
pub use limits::{DaemonLimits, LimitsStatus, OutputBudget};
pub use metrics::CONTENT_TYPE as METRICS_CONTENT_TYPE;
pub use observations::{Observation, ObservationError, ObservationStore, OBSERVATIONS_KEPT, OBSERVATION_TTL};
pub use operations::{OperationCache, OPERATIONS_KEPT, OPERATION_TTL};
pub use recordings::{RecordingInfo, RecordingSettings};
pub use session::{RequestSlot, Session, SessionId, SessionMessage};
pub use settle::{ActSettings, UnitRect};
pub use status::{
    CalibrationStatus, Capabilities, DaemonInfo, HelloResult, HidStatus, HttpsInfo, InputStatus, StatusResult,
    TaskStatus, VideoStatus,
};
pub use storage::{StorageStatus, Unwritable};
pub use tasks::{TaskError, TaskState};
pub use tokens::{TokenError, TokenInfo, Tokens, SESSION_LIFETIME};
pub use turn::DEFAULT_QUEUE_TIMEOUT;
pub use video::{VideoEnd, VideoViewer, MAX_VIEWERS, TICKET_TTL, VIDEO_PATH};

use crate::device::geometry::PixelRect;
use crate::device::hid::descriptor::PointerProfile;
use crate::device::hid::{HidSink, Keymap, Layout};
use crate::device::input::{InputTimings, RelativePlanner};
use crate::device::sim::SimPhone;
use crate::device::video::codec::EncoderSettings;
use crate::device::video::encode::{start_encoder, EncoderKind};
use crate::device::video::viewers::ViewerHub;
use crate::device::video::{FrameHub, FrameReader, FrameSource, SourceGuard, VideoError};
use crate::protocol::{Acting, Call, HelloParams, Limits, Method, Request, RequestId, TokenRule, PROTOCOL_NAME};
use store::{Store, StoreError};
use tasks::{DeviceIdentity, Tasks};

/// Errors starting the daemon.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The video source did not start.
    #[error("start video source")]
    Video(#[from] VideoError),
    /// The task store could not be opened.
    #[error("open the task store")]
    Store(#[from] StoreError),
    /// The tokens could not be loaded.
    #[error("load the tokens")]
    Tokens(#[from] TokenError),
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
    /// Decode and encode H.264/MJPEG capture again for viewers instead of handing it on
    /// as it arrived (config `passthrough = false`).
    pub transcode_capture: bool,
    /// Finished tasks kept in the store (0: the default, 200).
    pub tasks_kept: u32,
    /// Longest wait for the device behind other input (`None`: 10 s).
    pub queue_timeout: Option<std::time::Duration>,
    /// Global limits.
    pub limits: DaemonLimits,
    /// The HTTPS server's address and fingerprint, for `status` and pairing URLs.
    pub https: Option<HttpsInfo>,
    /// How actions verify their effect on the screen.
    pub act: ActSettings,
    /// What reads text on the screen (`None`: text methods answer `OCR_UNAVAILABLE`).
    pub text_reader: Option<crate::device::ocr::SharedReader>,
    /// Task recordings' quality and disk caps.
    pub recording: RecordingSettings,
    /// The appliance's boot and updater (`None`: updates are unavailable, as on a laptop).
    pub update: Option<update::UpdateOptions>,
}

/// Finished tasks kept by default.
pub const DEFAULT_TASKS_KEPT: u32 = 200;

/// The daemon's parts. What changes while it runs has one owner each, named here: the
/// phone's state is [`phone::Phone`]; the task lifecycle is [`Tasks`] (one lock over the
/// active task) with the journal in [`Store`]; tokens are [`Tokens`]; video tickets are
/// [`video::VideoGrants`]; frames come from the [`FrameReader`], viewers from the
/// [`ViewerHub`]. The rest is fixed at start, or counters for the limits.
#[derive(Debug)]
struct Inner {
    options: DaemonOptions,
    started: Instant,
    hid_backend: &'static str,
    video_backend: &'static str,
    /// The phone's state, all of it ([`phone`]).
    phone: phone::Phone,
    frames: FrameReader,
    /// Sessions open (the limit `max_sessions` is checked against it): a counter, not
    /// state anyone decides on beyond admission.
    sessions: AtomicUsize,
    next_session: AtomicU64,
    shutdown: CancellationToken,
    /// Requests being answered: a stop waits for them ([`Daemon::requests_ended`]), so
    /// what each journals after its input (the step, once verified) is written before the
    /// store closes. A count, not state anyone decides on.
    answering: tokio::sync::watch::Sender<usize>,
    sim: Option<SimPhone>,
    timings: InputTimings,
    keymap: Keymap,
    viewers: ViewerHub,
    _encoder: SourceGuard,
    data_dir: Option<std::path::PathBuf>,
    tasks: Tasks,
    store: Store,
    tasks_kept: u32,
    /// The recording in progress ([`recordings`]).
    recordings: recordings::Recordings,
    /// Counters for `/metrics` ([`metrics`]).
    metrics: metrics::Metrics,
    /// An update's install progress ([`update`]).
    updates: update::Updates,
    /// Orders a task change's in-memory update with its store write: held across the
    /// write's await, so a tokio mutex; it guards no data of its own.
    journal: Mutex<()>,
    _video: SourceGuard,
    queue_timeout: std::time::Duration,
    limits: DaemonLimits,
    screenshots: limits::WorkLimiter,
    output: OutputBudget,
    /// Refusals by a global limit, for `status.limits`: a counter.
    refused_busy: AtomicU64,
    tokens: Tokens,
    video: Arc<video::VideoGrants>,
    /// What each principal holds open ([`holds`]): admission by share and total, and
    /// what a revocation ends.
    holds: Arc<holds::Holds>,
}

/// One request being answered, counted in [`Inner::answering`] until dropped.
struct Answering<'a>(&'a tokio::sync::watch::Sender<usize>);

impl<'a> Answering<'a> {
    fn begin(count: &'a tokio::sync::watch::Sender<usize>) -> Answering<'a> {
        count.send_modify(|n| *n += 1);
        Answering(count)
    }
}

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
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
        if let Some(dir) = options.data_dir.as_deref() {
            // SQLite may open for writing on a full disk (its journal files left by an
            // earlier run need no new space): say read-only from the start all the same.
            // The first write that succeeds says otherwise.
            if nix::sys::statvfs::statvfs(dir).is_ok_and(|fs| fs.blocks_available() == 0) {
                store.health().failed(Unwritable::Full);
            }
        }
        if !interrupted.is_empty() {
            tracing::warn!(tasks = ?interrupted, "tasks unfinished at the last shutdown are now interrupted");
        }
        if let Some(dir) = options.data_dir.as_deref() {
            if let Err(e) = recordings::recover(&store, dir) {
                tracing::error!(error = %e, "recordings left by the last run could not be checked");
            }
        }
        let tokens = Tokens::open(store.clone())?;
        if let Some(dir) = options.data_dir.as_deref() {
            // The owner's code from `flash.sh` (or `tether pair --offline`). A bad file is
            // reported and left in place; the daemon still starts (tokens can be made on the
            // control socket).
            if let Err(e) = tokens.import_offline_pairing(dir) {
                tracing::error!(error = %e, "the pairing code made offline was not imported");
            }
        }
        let tasks_kept = if options.tasks_kept == 0 { DEFAULT_TASKS_KEPT } else { options.tasks_kept };
        let viewers = ViewerHub::default();
        if !options.transcode_capture {
            hub.set_passthrough(viewers.clone());
        }
        let guard = devices.video.start(hub)?;
        // Encodes only while a viewer watches (and the capture is not handed on as is).
        let encoder = start_encoder(frames.clone(), viewers.clone(), options.encoder, options.encoder_kind.clone())?;
        let calibrations =
            options.data_dir.as_deref().map(|d| Calibrations::load(&calibration_file(d))).unwrap_or_default();
        let (timings, keymap, data_dir) = (options.timings, Keymap::new(options.layout), options.data_dir.clone());
        let queue_timeout = options.queue_timeout.unwrap_or(turn::DEFAULT_QUEUE_TIMEOUT);
        let limits = options.limits;
        let shutdown = CancellationToken::new();
        let holds = holds::Holds::new(limits.holds(), shutdown.clone());
        let relative = (options.pointer_profile == PointerProfile::Relative).then(|| {
            let counts = options.relative_counts_per_screen;
            let counts = if counts.0 > 0.0 && counts.1 > 0.0 { counts } else { DEFAULT_RELATIVE_COUNTS };
            RelativePlanner::new(counts)
        });
        let daemon = Daemon {
            inner: Arc::new(Inner {
                options,
                started: Instant::now(),
                hid_backend,
                video_backend,
                phone: phone::Phone::new(
                    InputLane::new(devices.hid),
                    phone::PhoneState { calibrations, relative, ..phone::PhoneState::default() },
                ),
                frames,
                sessions: AtomicUsize::new(0),
                next_session: AtomicU64::new(1),
                shutdown,
                answering: tokio::sync::watch::Sender::new(0),
                sim: devices.sim,
                timings,
                keymap,
                viewers,
                _encoder: encoder,
                data_dir,
                tasks: Tasks::default(),
                store,
                tasks_kept,
                recordings: recordings::Recordings::default(),
                metrics: metrics::Metrics::default(),
                updates: update::Updates::default(),
                journal: Mutex::new(()),
                _video: guard,
                queue_timeout,
                limits,
                screenshots: limits::WorkLimiter::new(limits.max_screenshots_in_flight, limits.max_screenshots_waiting),
                output: OutputBudget::new(limits.max_queued_output_bytes),
                refused_busy: AtomicU64::new(0),
                tokens,
                video: Arc::default(),
                holds,
            }),
        };
        daemon.watch_device();
        Ok(daemon)
    }

    /// The device identity tasks are bound to.
    fn device_identity(&self) -> DeviceIdentity {
        DeviceIdentity {
            hid: self.inner.hid_backend,
            video: self.inner.video_backend,
            source_size: self.inner.frames.state().source_size,
        }
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
                daemon.inner.video.generation_changed(daemon.inner.frames.state().generation);
                if let Some(change) = daemon.inner.tasks.check_device(&daemon.device_identity()) {
                    tracing::warn!(task = change.task, "the device changed: task interrupted");
                    daemon.persist(change).await;
                }
            }
        });
    }

    /// Opens a session for an authenticated in-process caller (not counted against the
    /// session limit: the daemon's own transports are few).
    pub fn open_session(&self, caller: Caller) -> Session {
        let id = SessionId(self.inner.next_session.fetch_add(1, Ordering::Relaxed));
        self.inner.sessions.fetch_add(1, Ordering::Relaxed);
        Session::new(id, caller, self.inner.clone(), None)
    }

    /// Opens a session for a connection or an HTTP request, within its caller's share and
    /// the total ([`holds`]); refused with `BUSY` beyond them. A revocation of the caller's
    /// token ends the session (its requests are cancelled; its transport closes).
    pub fn try_open_session(&self, caller: Caller) -> Result<Session, DaemonError> {
        let hold = self.take_hold(&caller, HoldKind::Session)?;
        self.inner.sessions.fetch_add(1, Ordering::Relaxed);
        let id = SessionId(self.inner.next_session.fetch_add(1, Ordering::Relaxed));
        Ok(Session::new(id, caller, self.inner.clone(), Some(hold)))
    }

    /// Takes one `kind` for `caller` from the table of what principals hold (MCP sessions
    /// and streams are served by transports, but counted and ended here). `BUSY` when the
    /// caller's share or the total is taken; the refusal is logged once per kind and
    /// caller at debug (a flood must not fill the log) and counted in `status.limits`.
    pub fn take_hold(&self, caller: &Caller, kind: HoldKind) -> Result<Hold, DaemonError> {
        self.inner.holds.take(caller, kind).map_err(|refused| {
            tracing::debug!(caller = %caller.principal.label(), "refused: {refused}");
            if refused == HoldRefused::CredentialEnded {
                return DaemonError::CredentialEnded;
            }
            self.count_busy();
            DaemonError::Busy(refused.message())
        })
    }

    /// The revocation epoch, read by a transport just before it checks a credential
    /// ([`Caller::checked_at`]).
    pub fn revocation_epoch(&self) -> u64 {
        self.inner.holds.epoch()
    }

    /// The limits of what each principal may hold.
    pub fn hold_limits(&self) -> HoldLimits {
        self.inner.limits.holds()
    }

    /// What `caller`'s principal holds of `kind` now.
    pub fn held_by(&self, caller: &Caller, kind: HoldKind) -> usize {
        self.inner.holds.held_by(caller, kind)
    }

    /// Ends everything `principal` holds open, now: its sessions (their requests are
    /// cancelled, a task it leased is abandoned, its WebSockets close saying why), its MCP
    /// sessions and streams, its video tickets and viewers. Called when its token is
    /// revoked or rotated.
    pub(crate) fn end_principal(&self, principal: &Principal) {
        // Video first: its viewers must say why they end before their opening connection
        // (ended next) closes and would say "the opener closed".
        let (tickets, viewers) = self.inner.video.principal_ended(principal);
        let holds = self.inner.holds.end(principal);
        tracing::info!(principal = %principal.label(), holds, tickets, viewers, "ended everything the credential held");
    }

    /// The named network tokens, sessions and pairing codes (for the network transports'
    /// authentication).
    pub fn tokens(&self) -> &Tokens {
        &self.inner.tokens
    }

    /// The task a live task token belongs to (`None`: the task ended, or never was), for
    /// transports that must refuse a dead token before anything else.
    pub fn task_of_token(&self, token: &str) -> Option<i64> {
        self.inner.tasks.by_token(token).ok()
    }

    /// The output budget shared by every connection's queue.
    pub fn output_budget(&self) -> &OutputBudget {
        &self.inner.output
    }

    /// How close the daemon is to its global limits.
    pub fn limits_status(&self) -> LimitsStatus {
        let l = &self.inner.limits;
        LimitsStatus {
            connections: self.inner.sessions.load(Ordering::Relaxed),
            max_connections: l.max_sessions,
            screenshots_in_flight: self.inner.screenshots.running(),
            max_screenshots_in_flight: self.inner.screenshots.max_running(),
            screenshots_waiting: self.inner.screenshots.waiting(),
            max_screenshots_waiting: self.inner.screenshots.max_waiting(),
            queue_timeout_ms: u64::try_from(self.inner.queue_timeout.as_millis()).unwrap_or(u64::MAX),
            queued_output_bytes: self.inner.output.queued(),
            max_queued_output_bytes: self.inner.output.max(),
            refused_busy: self.inner.refused_busy.load(Ordering::Relaxed),
            holds: self.inner.holds.status(),
        }
    }

    /// Adds a video viewer: it receives H.264 access units, starting with an IDR, through
    /// [`Daemon::viewer_hub`]. Watching live video is looking: the caller needs
    /// `preview`'s rule (view and up). A test entry: transports add viewers only by
    /// redeeming a `video_open` ticket, decided in [`Daemon::handle_request`].
    #[cfg(test)]
    pub(crate) fn join_viewer(
        &self,
        session: &Session,
    ) -> Result<(crate::device::video::viewers::ViewerId, std::sync::Arc<tokio::sync::Notify>), DaemonError> {
        let acting = Acting::Human { role: session.caller.role };
        Method::Preview.access().check(Method::Preview, acting, None, |_| true)?;
        Ok(self.inner.viewers.join())
    }

    /// The viewer queues (take, ack, keyframe requests, leave).
    #[cfg(test)]
    pub(crate) fn viewer_hub(&self) -> &ViewerHub {
        &self.inner.viewers
    }

    /// Stops accepting work and cancels every running input sequence (held input is
    /// released by the lane).
    pub fn shutdown(&self) {
        self.inner.shutdown.cancel();
        self.inner.video.shutdown();
    }

    /// Waits (at most `limit`) until no request is being answered: after
    /// [`Daemon::shutdown`] every request is cancelled and ends on its own, journalling
    /// what it did. A stop waits for this before it drops the connections, whose requests
    /// would otherwise be aborted between their input's release and their journal.
    pub async fn requests_ended(&self, limit: std::time::Duration) -> bool {
        let mut answering = self.inner.answering.subscribe();
        tokio::time::timeout(limit, answering.wait_for(|n| *n == 0)).await.is_ok_and(|r| r.is_ok())
    }

    /// Closes the task store after what was queued for it (see [`Store::close`]): the last
    /// step of a stop, after [`Daemon::input_released`].
    pub async fn close_store(&self) {
        self.inner.store.close().await;
    }

    /// Waits (at most `limit`) until no input is being played: after [`Daemon::shutdown`],
    /// every play has then released what it held. A process should await this before it
    /// exits, or the runtime's end would drop a play before its release is written.
    pub async fn input_released(&self, limit: std::time::Duration) -> bool {
        tokio::time::timeout(limit, self.inner.phone.lane()).await.is_ok()
    }

    /// Handles request `id` of `session`, made without a task token (in-process callers).
    pub async fn handle(&self, session: &Session, id: RequestId, call: &Call) -> Result<Value, DaemonError> {
        let slot = session.begin_request(id)?;
        self.handle_with(session, None, call, slot.cancel_token()).await
    }

    /// Handles a parsed request of `session`, with its task token. `slot` is the request's
    /// registration ([`Session::begin_request`], taken by the transport before it spawned
    /// the request so a duplicate id is refused in arrival order).
    pub async fn handle_request(
        &self,
        session: &Session,
        request: &Request,
        slot: &RequestSlot,
    ) -> Result<Value, DaemonError> {
        self.handle_with(session, request.task_token.as_deref(), &request.call, slot.cancel_token()).await
    }

    async fn handle_with(
        &self,
        session: &Session,
        token: Option<&str>,
        call: &Call,
        cancel: &CancellationToken,
    ) -> Result<Value, DaemonError> {
        // Counted before the shutdown check: a stop that saw no request answering cannot
        // miss one that started before the shutdown was signalled.
        let _answering = Answering::begin(&self.inner.answering);
        if self.inner.shutdown.is_cancelled() {
            return Err(DaemonError::ShuttingDown);
        }
        // An attached connection's calls go to its task, whatever task they name.
        let stamped;
        let call = match session.attached() {
            Some(task) if !matches!(call, Call::Attach(_)) => {
                stamped = call.stamped(task);
                &stamped
            }
            _ => call,
        };
        let acting = self.authorize(session, token, call).await?;
        let value = match call {
            Call::Hello(params) => to_value(&self.hello(session, token.is_some(), params)?),
            Call::Status(_) => to_value(&self.status().await),
            Call::Screenshot(p) => {
                let task = acting.task();
                let shot = self.screenshot(p, task, cancel).await?;
                if let Some(task) = task {
                    self.inner.tasks.observed(task);
                }
                shot
            }
            Call::Preview(p) => self.preview(p, cancel).await?,
            Call::Action(p) => self.action(session, acting, p, cancel).await?,
            Call::Batch(p) => self.batch(session, acting, p, cancel).await?,
            Call::Cancel(p) => serde_json::json!({"cancelled": session.cancel_request(p.request_id)}),
            Call::SimState(_) => to_value(&self.inner.sim.as_ref().ok_or(DaemonError::NotSim)?.state()),
            Call::Calibrate(p) => self.calibrate(session, acting, p, cancel).await?,
            Call::TaskOpen(p) => self.task_open(session, p, cancel).await?,
            Call::TaskList(p) => self.task_list(p).await?,
            Call::TaskEvents(p) => self.task_events(session, acting, p, cancel).await?,
            Call::TaskControl(p) => self.task_control(session, acting, p).await?,
            Call::TaskConfirm(p) => self.task_confirm(session, acting, p, cancel).await?,
            Call::TaskNote(p) => self.task_note(session, acting, p).await?,
            Call::TaskFinish(p) => self.task_finish(session, acting, p).await?,
            Call::Token(p) => self.token(p).await?,
            Call::Pair(p) => self.pair(p).await?,
            Call::Attach(p) => self.attach(session, p).await?,
            Call::Detach(_) => self.detach(session),
            Call::MailboxFlush(p) => self.mailbox_flush(session, p).await?,
            Call::UserMessage(p) => self.user_message(session, acting, p).await?,
            Call::TaskMessages(p) => self.task_messages(acting, p, cancel).await?,
            Call::TaskThumbnail(p) => self.task_thumbnail(p).await?,
            Call::TaskReport(p) => self.task_report(p.task).await?,
            Call::TaskRecording(p) => self.task_recording(p).await?,
            Call::Metrics(_) => self.metrics_text().await?,
            Call::UpdateStatus(_) => self.update_status().await?,
            Call::UpdateUpload(p) => self.update_upload(p).await?,
            Call::UpdateInstall(p) => self.update_install(p).await?,
            Call::VideoOpen(_) => self.video_open(session)?,
            Call::VideoRevoke(_) => self.video_revoke(session),
            Call::WaitForChange(p) => self.wait_for_change(acting, p, cancel).await?,
            Call::WaitForSettle(p) => self.wait_for_settle(acting, p, cancel).await?,
            Call::FindText(p) => self.find_text(acting, p, cancel).await?,
            Call::WaitForText(p) => self.wait_for_text(acting, p, cancel).await?,
        };
        Ok(value)
    }

    /// The one authorization check of every request: resolves the task token (once) where
    /// the method's rule looks at it, and checks the rule ([`crate::protocol::access`]).
    /// A refusal while a task is active is journalled in it.
    pub(super) async fn authorize(
        &self,
        session: &Session,
        token: Option<&str>,
        call: &Call,
    ) -> Result<Acting, DaemonError> {
        let rule = call.access();
        let acting = match (token, rule.token) {
            // A dead token is TASK_ENDED whatever the method: its agent learns it at once.
            (Some(t), TokenRule::Refused | TokenRule::OwnTask) => Acting::Agent { task: self.inner.tasks.by_token(t)? },
            _ => Acting::Human { role: session.caller.role },
        };
        let principal = session.principal();
        let opener = |id| self.inner.tasks.opener(id).is_none_or(|o| &o == principal);
        if let Err(denied) = rule.check(call.method(), acting, call.task_id(), opener) {
            let e = DaemonError::PermissionDenied(denied);
            let what = match call {
                Call::TaskControl(p) => format!("task_control {}", p.action.as_str()),
                _ => call.method().as_str().to_string(),
            };
            self.record_refusal(session, acting, &what, &e).await;
            return Err(e);
        }
        Ok(acting)
    }

    fn hello(&self, session: &Session, with_token: bool, params: &HelloParams) -> Result<HelloResult, DaemonError> {
        if let Some(requested) = &params.protocol {
            if requested != PROTOCOL_NAME {
                return Err(DaemonError::UnsupportedProtocol { requested: requested.clone() });
            }
        }
        if let Some(client) = &params.client {
            tracing::info!(session = session.id.0, client = %crate::logtext::capped(client), "hello");
        }
        let asked = params.kind.unwrap_or_default();
        let have = *session.kind.get_or_init(|| asked);
        if params.kind.is_some() && have != asked {
            return Err(DaemonError::KindFixed { have: have.as_str(), asked: asked.as_str() });
        }
        Ok(HelloResult {
            protocol: PROTOCOL_NAME,
            version: env!("CARGO_PKG_VERSION"),
            capabilities: Capabilities {
                // What this caller may call (a task's agent may also stop its task).
                methods: Method::ALL
                    .iter()
                    .filter(|m| {
                        m.access().lists_for(Some(session.caller.role), with_token)
                            || (with_token && **m == Method::TaskControl)
                    })
                    .map(|m| m.as_str())
                    .collect(),
                sim: self.inner.options.sim,
                hid_backend: self.inner.hid_backend,
                video_backend: self.inner.video_backend,
                text: self.text_capability(),
            },
            limits: Limits::CURRENT,
            caller: session.caller.clone(),
            session: session.id,
            kind: have.as_str(),
        })
    }

    /// The device and daemon state.
    pub async fn status(&self) -> StatusResult {
        let (host, leds) = match self.inner.phone.try_lane() {
            Some(lane) => (lane.host_state(), lane.leds()),
            // An input sequence holds the lane; it only runs while a host is attached, and
            // `status` must never wait behind a long gesture.
            None => (crate::device::hid::HostState::Configured, None),
        };
        let video = self.inner.frames.state();
        let newest = self.inner.frames.newest_captured().filter(|n| n.generation == video.generation);
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
                device: self.inner.frames.device(),
                generation: video.generation,
                frame_id: newest.map(|f| f.sequence),
                frame_age_ms: newest.map(|f| millis(f.captured_at.elapsed())),
                fps: self.inner.frames.fps(),
                capture: self.inner.frames.compression().map_or("raw", |c| c.name()),
                paths: status::VideoPaths::of(&self.inner.frames),
                encoder: self.inner.viewers.encoder(),
                decoder: self.inner.frames.decoder(),
                decoder_notes: self.inner.frames.decoder_notes(),
                viewers: self.inner.viewers.stats(),
            },
            input: InputStatus { busy: self.inner.phone.playing() },
            limits: self.limits_status(),
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
            https: self.inner.options.https.clone(),
            calibration: self.calibration_status(),
            storage: self.inner.store.health().status(),
            queue: {
                let waiting = self.inner.tasks.waiters();
                status::QueueStatus { length: waiting.len(), waiting }
            },
            update: self.update_summary(),
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
        Caller::in_process(Role::Operate)
    }

    /// `task_open` of a task titled "t" whose events are not streamed to its lease.
    fn quiet_task() -> crate::protocol::task_params::TaskOpenParams {
        crate::protocol::task_params::TaskOpenParams {
            title: "t".into(),
            owner: None,
            scope: Default::default(),
            events: Some(false),
            record: false,
            wait: false,
            wait_timeout_ms: None,
        }
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
        let bad = HelloParams { protocol: Some("tether/2".into()), client: None, kind: None };
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
            let s = d.open_session(Caller::in_process(role));
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
        let deadline = Instant::now() + Duration::from_secs(10);
        while rec.reports().is_empty() {
            assert!(Instant::now() < deadline, "the first sequence never pressed");
            tokio::task::yield_now().await;
        }
        assert!(d.status().await.input.busy);
        // The second sequence waits for the first; dropping the first session (a
        // disconnect) cancels it, releases the button, then the second runs.
        let d2 = d.clone();
        let run2 = tokio::spawn(async move { d2.run_input(&second, &[press()]).await });
        // Letting time pass is the point here: nothing more may be written meanwhile.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(rec.reports().len(), 1, "second sequence must wait");
        run1.abort(); // dropping the future drops `first`, like a closed connection
        let _ = run1.await;
        assert_eq!(run2.await.unwrap().unwrap(), 1);
        let kinds: Vec<bool> = rec.reports().iter().map(|r| r.report.holds_input()).collect();
        // The daemon's play released the first press when its requester went away, before
        // the second sequence was let in: press, release, press, release.
        assert_eq!(kinds, [true, false, true, false]);
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
        let agent = d.open_session(Caller::in_process(Role::Agent));
        assert!(matches!(d.join_viewer(&agent), Err(DaemonError::PermissionDenied(_))), "watching needs view");
        let viewer = d.open_session(Caller::in_process(Role::View));
        let (id, _notify) = d.join_viewer(&viewer).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let first = loop {
            if let Some(f) = d.viewer_hub().take(id) {
                break f;
            }
            assert!(Instant::now() < deadline, "no picture for the viewer");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert!(first.keyframe);
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

    /// A source that publishes one frame captured `age` ago and nothing after it (a
    /// frozen capture).
    #[derive(Debug)]
    struct FrozenSource {
        age: Duration,
    }

    impl FrameSource for FrozenSource {
        fn backend(&self) -> &'static str {
            "frozen"
        }

        fn start(self: Box<Self>, hub: FrameHub) -> Result<SourceGuard, VideoError> {
            use crate::device::video::{Frame, PixelFormat, Signal, VideoState};
            hub.set_state(VideoState { signal: Signal::Locked, source_size: Some((64, 64)), generation: 1 });
            hub.publish(Arc::new(Frame {
                generation: 1,
                sequence: 1,
                captured_at: Instant::now().checked_sub(self.age).unwrap_or_else(Instant::now),
                width: 64,
                height: 64,
                format: PixelFormat::Rgb24,
                data: Arc::from(vec![90u8; 64 * 64 * 3]),
            }));
            Ok(SourceGuard::new(move || drop(hub)))
        }
    }

    #[tokio::test]
    async fn a_screenshot_never_serves_a_frame_older_than_two_seconds() {
        let start = |age| {
            Daemon::start(
                Devices { hid: Box::new(RecordingSink::default()), video: Box::new(FrozenSource { age }), sim: None },
                DaemonOptions::default(),
            )
            .unwrap()
        };
        let frozen = start(Duration::from_secs(5));
        let s = frozen.open_session(operator());
        let quick = crate::protocol::params::ScreenshotParams { timeout_ms: Some(50), ..Default::default() };
        let err = frozen.handle(&s, RequestId(1), &Call::Screenshot(quick.clone())).await.unwrap_err();
        let body = crate::protocol::ErrorBody::from(&err);
        assert_eq!((body.code, body.retryable), (crate::protocol::ErrorCode::Timeout, true), "{err}");
        let fresh = start(Duration::ZERO);
        let s = fresh.open_session(operator());
        assert!(fresh.handle(&s, RequestId(1), &Call::Screenshot(quick)).await.is_ok());
    }

    fn home(op: &str) -> Call {
        Call::Action(crate::protocol::params::ActionParams {
            operation_id: op.into(),
            observation_id: None,
            action: crate::protocol::params::ActionSpec::Home {},
            // These tests are about operation ids, not about what the phone shows.
            verify: Some(false),
            expect: None,
            return_image: None,
            quiet_ms: None,
            settle_timeout_ms: None,
            expect_text: None,
            expect_no_text: None,
        })
    }

    fn unix(uid: u32, role: Role) -> Caller {
        Caller::unix(PeerCredentials { pid: None, uid, gid: uid }, role)
    }

    #[tokio::test]
    async fn operation_ids_are_scoped_per_caller_and_only_outcomes_are_cached() {
        let rec = RecordingSink::default();
        let d = daemon_with(&rec);
        let alice = d.open_session(unix(1001, Role::Operate));
        let bob = d.open_session(unix(1002, Role::Operate));
        let first = d.handle(&alice, RequestId(1), &home("op")).await.unwrap();
        assert_eq!(first["status"], "submitted");
        let sent = rec.reports().len();
        // Alice again: her cached result, nothing sent.
        assert_eq!(d.handle(&alice, RequestId(2), &home("op")).await.unwrap(), first);
        assert_eq!(rec.reports().len(), sent);
        // Bob's "op" is his own operation: it runs.
        d.handle(&bob, RequestId(3), &home("op")).await.unwrap();
        assert!(rec.reports().len() > sent, "another caller's id runs its own operation");
        // A refusal is not an outcome: an agent without a task is refused, and the same id
        // later runs for an admin with the same uid... and for the agent it is not cached.
        let agent = d.open_session(unix(1003, Role::Agent));
        let refused = d.handle(&agent, RequestId(4), &home("x")).await.unwrap_err();
        assert_eq!(crate::protocol::ErrorBody::from(&refused).code, crate::protocol::ErrorCode::PermissionDenied);
        let admin = d.open_session(unix(1003, Role::Admin));
        assert!(d.handle(&admin, RequestId(5), &home("x")).await.is_ok(), "the agent's refusal is not served");
        // A retryable failure before anything was sent is not cached either.
        rec.set_host_state(HostState::NotAttached);
        let err = d.handle(&alice, RequestId(6), &home("later")).await.unwrap_err();
        assert_eq!(crate::protocol::ErrorBody::from(&err).code, crate::protocol::ErrorCode::HostNotConnected);
        rec.set_host_state(HostState::Configured);
        assert!(d.handle(&alice, RequestId(7), &home("later")).await.is_ok(), "runs once the phone is back");
    }

    #[tokio::test]
    async fn notes_and_finish_come_from_the_agent_the_opener_or_an_admin() {
        use crate::protocol::task_params::{TaskFinishParams, TaskNoteParams};
        let d = daemon_with(&RecordingSink::default());
        // Peers as SO_PEERCRED reports them: `tether task open` from one shell...
        let process =
            |pid: i32, uid: u32, gid: u32| Caller::unix(PeerCredentials { pid: Some(pid), uid, gid }, Role::Operate);
        let opener = d.open_session(process(4241, 1001, 1001));
        let open = quiet_task();
        let task = d.handle(&opener, RequestId(1), &Call::TaskOpen(open)).await.unwrap()["id"].as_i64().unwrap();
        let note = |text: &str| Call::TaskNote(TaskNoteParams { task: Some(task), text: text.into() });
        let other = d.open_session(unix(1002, Role::Operate));
        let refused = d.handle(&other, RequestId(2), &note("not mine")).await.unwrap_err();
        assert_eq!(crate::protocol::ErrorBody::from(&refused).code, crate::protocol::ErrorCode::PermissionDenied);
        let finish = Call::TaskFinish(TaskFinishParams { task: Some(task), ok: true, summary: None, exit_code: None });
        assert!(d.handle(&other, RequestId(3), &finish).await.is_err(), "another operator cannot finish it");
        // ...and `tether task finish` from another (same uid, another process and primary
        // group, another connection) is the opener too; so is an admin.
        let opener_again = d.open_session(process(4242, 1001, 50));
        d.handle(&opener_again, RequestId(4), &note("mine")).await.unwrap();
        let admin = d.open_session(unix(0, Role::Admin));
        d.handle(&admin, RequestId(5), &note("admin")).await.unwrap();
        d.handle(&admin, RequestId(6), &finish).await.unwrap();
        // The journal of a finished task is closed.
        let late = d.handle(&opener_again, RequestId(7), &note("too late")).await.unwrap_err();
        assert_eq!(crate::protocol::ErrorBody::from(&late).code, crate::protocol::ErrorCode::InvalidTransition);
    }

    /// Refuses every write of `d`'s store, as a disk that takes no write does (SQLite's
    /// `query_only`), or takes them again.
    async fn refuse_writes(d: &Daemon, refuse: bool) {
        d.inner.store.read(move |c| Ok(c.pragma_update(None, "query_only", refuse)?)).await.unwrap();
    }

    fn line(text: &str) -> Call {
        crate::protocol::parse_request(text.as_bytes()).unwrap().call
    }

    fn code_of(r: &Result<Value, DaemonError>) -> Option<crate::protocol::ErrorCode> {
        r.as_ref().err().map(|e| crate::protocol::ErrorBody::from(e).code)
    }

    #[tokio::test]
    async fn a_change_the_disk_refuses_is_answered_storage_failed_and_is_not_made() {
        use crate::protocol::task_params::TaskConfirmParams;
        use crate::protocol::ErrorCode::StorageFailed;
        let d = daemon_with(&RecordingSink::default());
        let s = d.open_session(operator());
        let admin = d.open_session(Caller::in_process(Role::Admin));
        let open = quiet_task();
        let task = d.handle(&s, RequestId(1), &Call::TaskOpen(open)).await.unwrap()["id"].as_i64().unwrap();
        refuse_writes(&d, true).await;
        let finish = line(&format!(r#"{{"id":1,"method":"task_finish","task":{task},"ok":true}}"#));
        assert_eq!(code_of(&d.handle(&s, RequestId(2), &finish).await), Some(StorageFailed));
        let pause = line(&format!(r#"{{"id":1,"method":"task_control","task":{task},"action":"pause"}}"#));
        assert_eq!(code_of(&d.handle(&s, RequestId(3), &pause).await), Some(StorageFailed));
        let note = line(&format!(r#"{{"id":1,"method":"task_note","task":{task},"text":"n"}}"#));
        assert_eq!(code_of(&d.handle(&s, RequestId(4), &note).await), Some(StorageFailed));
        let agent = d.open_session(Caller::in_process(Role::Agent));
        let ask = TaskConfirmParams { question: "ok?".into() };
        let asked = d.task_confirm(&agent, Acting::Agent { task }, &ask, &CancellationToken::new()).await;
        assert_eq!(code_of(&asked), Some(StorageFailed));
        let add = line(r#"{"id":1,"method":"token","action":"add","name":"laptop"}"#);
        assert_eq!(code_of(&d.handle(&admin, RequestId(5), &add).await), Some(StorageFailed));
        let pair = line(r#"{"id":1,"method":"pair","role":"view"}"#);
        assert_eq!(code_of(&d.handle(&admin, RequestId(6), &pair).await), Some(StorageFailed));
        // Nothing changed, in memory or on disk; reads are served; status says why.
        let st = d.status().await;
        let active = st.task.unwrap();
        assert_eq!((active.state, active.question.is_none()), (TaskState::Running, true));
        assert!(!st.storage.writable && st.storage.reason.is_some(), "{:?}", st.storage);
        assert_eq!(d.inner.store.task(task).await.unwrap().state, "running");
        assert!(d.inner.tokens.list().iter().all(|t| t.name != "laptop"));
        let list = d.handle(&s, RequestId(7), &line(r#"{"id":1,"method":"task_list"}"#)).await.unwrap();
        assert_eq!(list["tasks"][0]["state"], "running");
        // The disk takes writes again: the same finish is answered, and on disk first.
        refuse_writes(&d, false).await;
        let done = d.handle(&s, RequestId(8), &finish).await.unwrap();
        assert_eq!(done["state"], "completed");
        assert_eq!(d.inner.store.task(task).await.unwrap().state, "completed");
        assert!(d.status().await.storage.writable);
    }

    #[tokio::test]
    async fn a_calibration_that_cannot_be_saved_is_not_made() {
        use crate::device::calibration::Affine;
        let dir = tempfile::tempdir().unwrap();
        let phone = SimPhone::new(SimConfig::default());
        let d = Daemon::start(
            Devices { hid: Box::new(RecordingSink::default()), video: Box::new(phone.display()), sim: Some(phone) },
            DaemonOptions { sim: true, data_dir: Some(dir.path().to_path_buf()), ..DaemonOptions::default() },
        )
        .unwrap();
        {
            let mut state = d.inner.phone.state();
            state.calibrations.portrait = Some(Affine::identity());
            state.calibrations.landscape = Some(Affine::identity());
        }
        // The file cannot be written: where its temporary copy goes is a directory.
        let blocker = dir.path().join("calibration.json.tmp");
        std::fs::create_dir(&blocker).unwrap();
        let s = d.open_session(operator());
        let reset = line(r#"{"id":1,"method":"calibrate","reset":true}"#);
        assert_eq!(code_of(&d.handle(&s, RequestId(1), &reset).await), Some(crate::protocol::ErrorCode::StorageFailed));
        let kept = d.calibration_status();
        assert!(kept.portrait && kept.landscape, "the calibration in use is the one on disk");
        assert!(!d.status().await.storage.writable);
        std::fs::remove_dir(&blocker).unwrap();
        d.handle(&s, RequestId(2), &reset).await.unwrap();
        let now = d.calibration_status();
        assert_ne!(now.portrait, now.landscape, "one orientation was reset");
        let saved = Calibrations::load(&calibration_file(dir.path()));
        assert_eq!((saved.portrait.is_some(), saved.landscape.is_some()), (now.portrait, now.landscape));
        assert!(d.status().await.storage.writable);
    }

    /// One call of each method, naming task `task` where it takes one.
    fn sample_calls(task: i64) -> Vec<Call> {
        let params = |m: Method| match m {
            Method::Hello | Method::Status | Method::Screenshot | Method::Preview | Method::SimState => "{}".into(),
            Method::TaskList => "{}".into(),
            Method::Action => r#"{"operation_id":"walk","action":{"type":"home"}}"#.into(),
            Method::Batch => r#"{"operation_id":"walk-b","actions":[{"type":"home"}]}"#.into(),
            Method::Cancel => r#"{"request_id":99}"#.into(),
            Method::Calibrate => r#"{"reset":true}"#.into(),
            Method::TaskOpen => r#"{"title":"walk","events":false}"#.into(),
            Method::TaskEvents => format!(r#"{{"task":{task}}}"#),
            Method::TaskControl => format!(r#"{{"task":{task},"action":"pause"}}"#),
            Method::TaskConfirm => r#"{"question":"ok?"}"#.into(),
            Method::TaskNote => format!(r#"{{"task":{task},"text":"n"}}"#),
            Method::TaskFinish => format!(r#"{{"task":{task},"ok":true}}"#),
            Method::Token => r#"{"action":"list"}"#.into(),
            Method::Pair => r#"{"role":"view"}"#.into(),
            Method::Attach => format!(r#"{{"task":{task}}}"#),
            Method::Detach | Method::VideoOpen | Method::VideoRevoke => "{}".into(),
            Method::MailboxFlush => r#"{"after_seq":0}"#.into(),
            Method::UserMessage => r#"{"text":"hi"}"#.into(),
            Method::TaskMessages => format!(r#"{{"task":{task}}}"#),
            Method::TaskThumbnail => format!(r#"{{"task":{task},"seq":1}}"#),
            Method::TaskReport => format!(r#"{{"task":{task}}}"#),
            Method::TaskRecording => format!(r#"{{"task":{task},"length":10}}"#),
            Method::Metrics | Method::UpdateStatus | Method::UpdateInstall => "{}".into(),
            Method::UpdateUpload => r#"{"offset":0,"total":3,"data":"AAAA"}"#.into(),
            Method::WaitForChange | Method::WaitForSettle => r#"{"timeout_ms":10}"#.into(),
            Method::FindText => r#"{"text":"Settings"}"#.into(),
            Method::WaitForText => r#"{"text":"Done","timeout_ms":10}"#.into(),
        };
        Method::ALL
            .iter()
            .map(|&m| {
                // The envelope carries the parameters beside `id` and `method`.
                let params = params(m);
                let fields = &params[1..params.len() - 1];
                let sep = if fields.is_empty() { "" } else { "," };
                let line = format!(r#"{{"id":1,"method":"{}"{sep}{fields}}}"#, m.as_str());
                crate::protocol::parse_request(line.as_bytes()).unwrap().call
            })
            .collect()
    }

    fn denied(r: &Result<Value, DaemonError>) -> bool {
        matches!(r, Err(DaemonError::PermissionDenied(_)))
    }

    /// Every method by every role, through the whole request path: refused with
    /// PERMISSION_DENIED exactly where the role table says so, and nowhere else (no
    /// handler has a check of its own).
    #[tokio::test]
    async fn every_method_by_every_role_is_refused_only_where_the_table_says() {
        for role in Role::ALL {
            let d = daemon_with(&RecordingSink::default());
            let s = d.open_session(Caller::in_process(role));
            // Task 1 is opened by this caller's own task_open where the role may.
            for (n, call) in sample_calls(1).iter().enumerate() {
                let expected = call.access().check(call.method(), Acting::Human { role }, call.task_id(), |_| true);
                let got = d.handle(&s, RequestId(n as u64 + 1), call).await;
                assert_eq!(denied(&got), expected.is_err(), "{} by {role}: {got:?}", call.method().as_str());
            }
        }
    }

    /// The same walk for a task's agent (its live token), for an agent holding the token
    /// of an ended task, and for one naming another task.
    #[tokio::test]
    async fn every_method_by_a_tasks_agent_is_refused_only_where_the_table_says() {
        let d = daemon_with(&RecordingSink::default());
        let human = d.open_session(operator());
        let open = quiet_task();
        let opened = d.handle(&human, RequestId(1), &Call::TaskOpen(open)).await.unwrap();
        let (task, token) = (opened["id"].as_i64().unwrap(), opened["token"].as_str().unwrap().to_string());
        let agent = d.open_session(Caller::in_process(Role::Agent));
        for call in sample_calls(task) {
            let rule = call.access();
            let expected = match rule.token {
                TokenRule::Ignored => rule.check(call.method(), Acting::Human { role: Role::Agent }, None, |_| true),
                _ => rule.check(call.method(), Acting::Agent { task }, call.task_id(), |_| true),
            };
            let got = d.authorize(&agent, Some(&token), &call).await;
            assert_eq!(got.is_err(), expected.is_err(), "{} by the agent: {got:?}", call.method().as_str());
            if let (Ok(acting), TokenRule::OwnTask | TokenRule::Refused) = (got, rule.token) {
                assert_eq!(acting, Acting::Agent { task }, "the token resolved to its task");
            }
        }
        // Another task's id with this token: refused for every task-scoped method.
        for call in sample_calls(task + 1).into_iter().filter(|c| c.task_id().is_some()) {
            let got = d.authorize(&agent, Some(&token), &call).await;
            assert!(matches!(got, Err(DaemonError::PermissionDenied(_))), "{}: {got:?}", call.method().as_str());
        }
        // The task ends: the token is dead for every method that looks at it.
        let stop = crate::protocol::parse_request(
            format!(r#"{{"id":1,"method":"task_control","task":{task},"action":"stop"}}"#).as_bytes(),
        )
        .unwrap()
        .call;
        d.handle(&human, RequestId(2), &stop).await.unwrap();
        for call in sample_calls(task) {
            let got = d.authorize(&agent, Some(&token), &call).await;
            let ended = matches!(&got, Err(DaemonError::Task(TaskError::Ended)));
            assert_eq!(ended, call.access().token != TokenRule::Ignored, "{}: {got:?}", call.method().as_str());
        }
    }
}
