//! V4L2 capture as a [`FrameSource`]: a dedicated thread that opens the node, negotiates
//! with it (the HDMI signal's DV timings; a UVC dongle's size and frame rate; for
//! media-controller nodes such as the Pi's `unicam-image`, the whole pipeline from the
//! bridge, see [`super::pipeline`]), streams mmap buffers, converts raw frames to RGB and
//! publishes them. MJPEG and H.264 are published as they arrive (viewers get them
//! untouched) and decoded by the [`PixelDecoder`] only when pixels are wanted; JPEGs that
//! are not whole are dropped and counted. Signal loss, resolution change, a stream that
//! stalls and replug (the node found again by identity when it comes back under another
//! number) bump the generation and recover without a restart.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::codec::{check_capture_frame, CodecChoice, ParameterSets, Prepared};
use super::convert::{nv12_to_rgb, packed422_to_rgb, rgb24_rows};
use super::decode::PixelDecoder;
use super::pipeline::{self, capture_entity, is_mc_centric, MediaPads, Pipeline, PipelineError};
use super::v4l2::{
    media_device_for, BufType, Capability, Dequeued, DvTimingsStatus, Event, FourCc, PixFormat, Subdev, V4l2Device,
    V4l2Error, EVENT_SOURCE_CHANGE,
};
use super::{
    CaptureDevice, Compression, EncodedFrame, Frame, FrameHub, FrameSource, PixelFormat, Signal, SourceGuard,
    VideoError, VideoState,
};

/// `V4L2_CID_MPEG_VIDEO_FORCE_KEY_FRAME`: how viewers' keyframe requests reach an H.264
/// capture device that has it.
const CID_FORCE_KEY_FRAME: u32 = 0x0099_09e5;

/// Raw formats we convert, in order of preference.
pub const RAW_FORMATS: [FourCc; 6] =
    [FourCc::YUYV, FourCc::UYVY, FourCc::NV12, FourCc::RGB24, FourCc::MJPEG, FourCc::H264];

/// Buffers requested from the driver.
const BUFFERS: u32 = 4;

/// How often a missing device is looked for again (a replugged dongle is streaming again
/// well within 2 s of coming back).
const REOPEN_EVERY: Duration = Duration::from_millis(250);

/// A stream with no frame for this long (or five frame intervals, if longer) has stalled:
/// it is restarted under a new generation.
const STALL_AFTER: Duration = Duration::from_secs(2);

/// Capture from a V4L2 node.
#[derive(Debug, Clone)]
pub struct V4l2Capture {
    /// The node, e.g. `/dev/video0`.
    pub path: PathBuf,
    /// Input to select first (HDMI input of multi-input devices).
    pub input: Option<u32>,
    /// Preferred pixel format; the first supported of [`RAW_FORMATS`] otherwise.
    pub format: Option<FourCc>,
    /// Preferred size for devices without DV timings (UVC); the largest offered otherwise.
    pub size: Option<(u32, u32)>,
    /// Preferred frame rate for devices that take one (UVC); the fastest otherwise.
    pub fps: Option<u32>,
    /// Media-controller capture: the source entity to capture from (e.g. `tc358743
    /// 10-000f`); the one the enabled links lead to otherwise.
    pub source: Option<String>,
    /// Hardware or software decoding of MJPEG/H.264 capture.
    pub decoder: CodecChoice,
}

/// Why one streaming session ended.
enum SessionEnd {
    /// The source changed (signal, resolution): start over with a new generation.
    Restart,
    /// Asked to stop.
    Stop,
}

/// The format to capture in: the configured one when the node offers it; otherwise the
/// node's current format when we can convert it (a pipeline set up by the board's scripts,
/// or changed by the operator between streams, is respected); otherwise our first choice.
fn choose_format(want: Option<FourCc>, current: FourCc, offered: &[FourCc]) -> Option<FourCc> {
    want.filter(|f| offered.contains(f))
        .or_else(|| Some(current).filter(|f| RAW_FORMATS.contains(f) && offered.contains(f)))
        .or_else(|| RAW_FORMATS.iter().copied().find(|f| offered.contains(f)))
}

/// The size to capture at when no DV timings dictate it: the configured one when offered,
/// else the largest offered (a dongle's current size is often a small default), else the
/// node's current one.
fn choose_size(want: Option<(u32, u32)>, offered: &[(u32, u32)], current: (u32, u32)) -> (u32, u32) {
    want.filter(|w| offered.contains(w))
        .or_else(|| offered.iter().copied().max_by_key(|&(w, h)| u64::from(w) * u64::from(h)))
        .unwrap_or(current)
}

/// The frame interval to ask for: the one nearest the configured rate, else the shortest
/// (fastest). Intervals are (numerator, denominator) seconds.
fn choose_interval(want_fps: Option<u32>, offered: &[(u32, u32)]) -> Option<(u32, u32)> {
    let seconds = |&(n, d): &(u32, u32)| if d == 0 { f64::MAX } else { f64::from(n) / f64::from(d) };
    let valid = offered.iter().filter(|i| i.0 > 0 && i.1 > 0);
    match want_fps.filter(|&f| f > 0) {
        Some(fps) => {
            let target = 1.0 / f64::from(fps);
            valid.min_by(|a, b| (seconds(a) - target).abs().total_cmp(&(seconds(b) - target).abs())).copied()
        }
        None => valid.min_by(|a, b| seconds(a).total_cmp(&seconds(b))).copied(),
    }
}

/// How long a stream may go without a frame: [`STALL_AFTER`] or five intervals.
fn stall_limit(interval: Option<(u32, u32)>) -> Duration {
    let five = interval
        .filter(|&(_, d)| d > 0)
        .map(|(n, d)| Duration::from_secs_f64(5.0 * f64::from(n) / f64::from(d)))
        .unwrap_or_default();
    STALL_AFTER.max(five)
}

/// What identifies a capture device across replugs (its node number may change).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    driver: String,
    card: String,
    bus_info: String,
}

impl From<&Capability> for Identity {
    fn from(c: &Capability) -> Self {
        Identity { driver: c.driver.clone(), card: c.card.clone(), bus_info: c.bus_info.clone() }
    }
}

/// Opens the configured node, or — once a device has been seen there — the capture node
/// of that same device wherever it is now (a dongle plugged back can come up as another
/// /dev/videoN, and the old number may then belong to something else). When that device
/// is nowhere, a capture node at the configured path is taken (another dongle, or the same
/// one on another USB port): the configuration names a node, not a device.
fn open_device(path: &Path, seen: Option<&Identity>) -> Result<V4l2Device, V4l2Error> {
    let capture = |c: &Capability| BufType::capture_for(c.device_caps).is_some();
    let first = V4l2Device::open(path);
    let first_cap = first.as_ref().ok().and_then(|d| d.querycap().ok());
    let Some(seen) = seen else { return first };
    if first_cap.as_ref().is_some_and(|c| capture(c) && Identity::from(c) == *seen) {
        return first;
    }
    // Only nodes whose sysfs name is the device's card are opened (while a dongle is
    // away this runs four times a second).
    let mut nodes: Vec<String> = std::fs::read_dir("/sys/class/video4linux")
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    nodes.retain(|n| {
        n.starts_with("video")
            && std::fs::read_to_string(format!("/sys/class/video4linux/{n}/name")).is_ok_and(|v| v.trim() == seen.card)
    });
    nodes.sort();
    for node in nodes.iter().map(|n| Path::new("/dev").join(n)).filter(|n| n.as_path() != path) {
        if let Ok(d) = V4l2Device::open(&node) {
            if d.querycap().is_ok_and(|c| capture(&c) && Identity::from(&c) == *seen) {
                tracing::info!(configured = %path.display(), found = %node.display(), "the capture device came back under another node");
                return Ok(d);
            }
        }
    }
    match (first, first_cap) {
        (Ok(d), Some(c)) if capture(&c) => {
            tracing::info!(path = %path.display(), driver = %c.driver, card = %c.card, "another capture device at the configured node; using it");
            Ok(d)
        }
        (Ok(_), _) => Err(V4l2Error::Invalid(format!("{} is not a capture node now", path.display()))),
        (Err(e), _) => Err(e),
    }
}

struct Session<'a> {
    dev: &'a V4l2Device,
    hub: &'a FrameHub,
    stop: &'a AtomicBool,
    /// A stall was logged at warn and no frame came since (later ones go to debug).
    stall_logged: &'a std::cell::Cell<bool>,
}

/// One captured buffer, ready to publish.
enum Picture {
    /// Raw capture converted to RGB24.
    Raw(Vec<u8>),
    /// Compressed capture as the device sent it (H.264 with its parameter sets before an
    /// IDR), and whether it is decodable by itself.
    Encoded(Compression, Arc<[u8]>, bool),
}

/// Converts one raw capture buffer to RGB24; `None` (logged) for a malformed one.
fn raw_picture(fmt: &PixFormat, data: &[u8]) -> Option<Vec<u8>> {
    let (w, h, stride) = (fmt.width as usize, fmt.height as usize, fmt.bytes_per_line as usize);
    let rgb = match fmt.fourcc {
        FourCc::YUYV => packed422_to_rgb(data, w, h, stride, false),
        FourCc::UYVY => packed422_to_rgb(data, w, h, stride, true),
        FourCc::NV12 => nv12_to_rgb(data, w, h, stride),
        FourCc::RGB24 => rgb24_rows(data, w, h, stride),
        _ => return None,
    };
    rgb.map_err(|e| tracing::warn!(error = %e, "dropping a malformed frame")).ok()
}

impl Session<'_> {
    /// Waits for a usable signal; returns the timings' size, or `None` when the node has no
    /// DV timings (plain UVC/webcam nodes). A signal that comes back after this session
    /// announced "no signal" ends the session instead (`Err(SessionEnd::Restart)`): each locked
    /// period gets its own generation.
    fn lock_signal(&self, generation: u32) -> Result<Result<Option<(u32, u32)>, SessionEnd>, V4l2Error> {
        let mut announced = None;
        loop {
            match self.dev.query_dv_timings() {
                Ok(DvTimingsStatus::Locked(_)) if announced.is_some() => return Ok(Err(SessionEnd::Restart)),
                Ok(DvTimingsStatus::Locked(t)) => {
                    let t = self.dev.set_dv_timings(&t)?;
                    return Ok(Ok(Some((t.width, t.height))));
                }
                Ok(status) => {
                    if announced != Some(status) {
                        tracing::info!(?status, "no usable HDMI signal; waiting for one");
                        announced = Some(status);
                    }
                    self.hub.set_state(VideoState { signal: Signal::NoSignal, source_size: None, generation });
                    // Wake on a source-change event or re-check every second. Not poll():
                    // a queue that is not streaming reports POLLERR at once, which would spin.
                    for _ in 0..20 {
                        if self.stop.load(Ordering::Relaxed) {
                            return Ok(Err(SessionEnd::Stop));
                        }
                        if matches!(self.dev.next_event(), Ok(Some(_))) {
                            while let Ok(Some(_)) = self.dev.next_event() {}
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
                // ENOTTY/EINVAL: this node has no DV timings.
                Err(V4l2Error::Ioctl { .. }) => return Ok(Ok(None)),
                Err(e) => return Err(e),
            }
        }
    }

    /// Configures a media-controller pipeline up to this node (see [`super::pipeline`]),
    /// waiting while its bridge has no signal. Returns it with the bridge's subdevice node
    /// (for DV timings and source-change events) when the source has timings.
    fn configure_pipeline(
        &self,
        generation: u32,
        source: Option<&str>,
        offered: &[FourCc],
    ) -> Result<Result<(Pipeline, Option<Subdev>), SessionEnd>, V4l2Error> {
        let path = self.dev.path();
        let media = media_device_for(path).ok_or_else(|| {
            V4l2Error::Invalid(format!("{} is media-controller capture, but no /dev/media* lists it", path.display()))
        })?;
        let mut announced = None;
        loop {
            let topology = media.topology()?;
            let entity = capture_entity(&topology, path)
                .ok_or_else(|| V4l2Error::Invalid(format!("{} is not in its media graph", path.display())))?;
            let mut pads = MediaPads::new(&media, &topology);
            match pipeline::configure(&topology, entity, source, offered, &mut pads) {
                // Each locked period gets its own generation (as in `lock_signal`).
                Ok(_) if announced.is_some() => return Ok(Err(SessionEnd::Restart)),
                Ok(p) => {
                    let bridge = if p.has_timings { pads.take(p.source) } else { None };
                    return Ok(Ok((p, bridge)));
                }
                Err(PipelineError::NoSignal { source_name, status }) => {
                    if announced.as_ref() != Some(&status) {
                        tracing::info!(source = %source_name, ?status, "no usable HDMI signal at the bridge; waiting for one");
                        announced = Some(status);
                    }
                    self.hub.set_state(VideoState { signal: Signal::NoSignal, source_size: None, generation });
                    // The bridge's source-change event or a re-check every second.
                    let bridge = topology.entity_named(&source_name).map(|e| e.id).and_then(|id| pads.take(id));
                    if let Some(b) = &bridge {
                        let _ = b.device().subscribe(EVENT_SOURCE_CHANGE, 0);
                    }
                    for _ in 0..20 {
                        if self.stop.load(Ordering::Relaxed) {
                            return Ok(Err(SessionEnd::Stop));
                        }
                        if bridge.as_ref().is_some_and(|b| matches!(b.device().next_event(), Ok(Some(_)))) {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
                Err(PipelineError::V4l2(e)) => return Err(e),
                Err(e) => return Err(V4l2Error::Invalid(format!("media pipeline: {e}"))),
            }
        }
    }

    fn stream(&self, generation: u32, want: &V4l2Capture, sequence: &mut u64) -> Result<SessionEnd, V4l2Error> {
        let cap = self.dev.querycap()?;
        let kind = BufType::capture_for(cap.device_caps)
            .ok_or_else(|| V4l2Error::Invalid(format!("{} is not a capture node", self.dev.path().display())))?;
        let offered: Vec<FourCc> = self.dev.formats(kind)?.into_iter().map(|f| f.fourcc).collect();
        // Where the signal's DV timings are watched (the node or the bridge's subdevice), and
        // the size they locked.
        let mut bridge = None;
        let mut bridge_events = false;
        let mut pipeline = None;
        let (fourcc, size, timings_size) = if is_mc_centric(cap.device_caps) {
            let (p, b) = match self.configure_pipeline(generation, want.source.as_deref(), &offered)? {
                Ok(found) => found,
                Err(end) => return Ok(end),
            };
            // Events from the bridge's node only when it takes the subscription (a
            // subdevice without events answers DQEVENT with ENOTTY); the timings are
            // re-checked every second either way.
            if let Some(b) = &b {
                match b.device().subscribe(EVENT_SOURCE_CHANGE, 0) {
                    Ok(()) => bridge_events = true,
                    Err(e) => {
                        tracing::info!(error = %e, "no source-change events from the bridge; checking its timings every second")
                    }
                }
            }
            // The bridge's own size: what its timings say (later hops may scale or crop).
            let timings = b.as_ref().map(|_| p.source_size);
            tracing::info!(pipeline = %p, links_changed = ?p.links_changed, side_nodes = ?p.side_nodes, "media pipeline configured");
            if want.format.is_some() || want.size.is_some() || want.fps.is_some() {
                tracing::info!(
                    "capture.format, size and fps do not apply to media-controller capture: the pipeline decides"
                );
            }
            let found = (p.fourcc, (p.width, p.height), timings);
            bridge = b;
            pipeline = Some(p);
            found
        } else {
            let timings = match self.lock_signal(generation)? {
                Ok(size) => size,
                Err(end) => return Ok(end),
            };
            let current = self.dev.format(kind)?;
            let fourcc = choose_format(want.format, current.fourcc, &offered)
                .ok_or_else(|| V4l2Error::Invalid(format!("no supported raw format among {offered:?}")))?;
            let size = timings.unwrap_or_else(|| {
                let sizes = self.dev.frame_sizes(fourcc).unwrap_or_default();
                choose_size(want.size, &sizes, (current.width, current.height))
            });
            (fourcc, size, timings)
        };
        if self.stop.load(Ordering::Relaxed) {
            return Ok(SessionEnd::Stop);
        }
        let fmt = self.dev.set_format(kind, &PixFormat::new(size.0, size.1, fourcc))?;
        if fmt.fourcc != fourcc {
            return Err(V4l2Error::Invalid(format!("driver chose {} instead of {fourcc}", fmt.fourcc)));
        }
        // The frame rate, for devices that take one (UVC); HDMI's comes with its timings.
        let mut interval = None;
        if timings_size.is_none() {
            let intervals = self.dev.frame_intervals(fourcc, fmt.width, fmt.height).unwrap_or_default();
            if let Some(ask) = choose_interval(want.fps, &intervals) {
                match self.dev.set_frame_interval(kind, ask) {
                    Ok(got) => interval = Some(got),
                    Err(e) => tracing::debug!(error = %e, "the device takes no frame interval"),
                }
            }
            interval = self.dev.frame_interval(kind).ok().flatten().or(interval);
        }
        let fps = interval.filter(|&(n, d)| n > 0 && d > 0).map(|(n, d)| d as f32 / n as f32);
        let count = self.dev.request_buffers(kind, BUFFERS)?;
        let buffers = (0..count).map(|i| self.dev.map_buffer(kind, i)).collect::<Result<Vec<_>, _>>()?;
        for i in 0..count {
            self.dev.queue(kind, i, &[])?;
        }
        self.dev.stream(kind, true)?;
        self.hub.set_device(Some(CaptureDevice {
            node: self.dev.path().display().to_string(),
            driver: cap.driver.clone(),
            card: cap.card.clone(),
            format: fmt.fourcc.to_string(),
            width: fmt.width,
            height: fmt.height,
            fps,
            pipeline: pipeline.as_ref().map(|p| p.to_string()),
            corrupt_frames: 0,
        }));
        tracing::info!(path = %self.dev.path().display(), driver = %cap.driver, card = %cap.card, format = %fmt.fourcc, width = fmt.width, height = fmt.height, fps, planes = fmt.planes, multiplanar = kind.is_multiplanar(), generation, "capturing");
        let timings_dev = match (&bridge, timings_size) {
            (Some(b), Some(size)) => Some((b.device(), size)),
            (None, Some(size)) => Some((self.dev, size)),
            _ => None,
        };
        let mut checked = Instant::now();
        let compression = match fmt.fourcc {
            FourCc::H264 => Some(Compression::H264),
            FourCc::MJPEG => Some(Compression::Mjpeg),
            _ => None,
        };
        self.hub.set_compression(compression);
        // A new session is a new stream: its own parameter sets, and the pixel decoder
        // starts again at its first IDR (it follows the generation).
        let mut params = ParameterSets::default();
        let mut force_keyframe = compression == Some(Compression::H264);
        let stall_after = stall_limit(interval);
        let mut last_frame = Instant::now();
        // "Locked" means frames arrive: said with the session's first one.
        let mut locked = false;
        let mut corrupt_logged = 0u32;
        let end = loop {
            if self.stop.load(Ordering::Relaxed) {
                break SessionEnd::Stop;
            }
            // Events can be missed (or not implemented by a bridge): re-check the signal
            // every second while streaming HDMI.
            if let Some((dev, size)) = timings_dev {
                if checked.elapsed() >= Duration::from_secs(1) {
                    checked = Instant::now();
                    match dev.query_dv_timings()? {
                        DvTimingsStatus::Locked(t) if (t.width, t.height) == size => {}
                        other => {
                            tracing::info!(status = ?other, "signal changed while streaming");
                            break SessionEnd::Restart;
                        }
                    }
                }
            }
            // A first frame may take longer than a running stream's gap (sensor start-up).
            let limit = if locked { stall_after } else { stall_after * 2 };
            if last_frame.elapsed() > limit {
                // At warn once, then at debug until frames come back (a dongle without a
                // source may send nothing for hours).
                let seconds = last_frame.elapsed().as_secs_f32();
                if self.stall_logged.replace(true) {
                    tracing::debug!(seconds, "still no frames; restarting the stream");
                } else {
                    tracing::warn!(seconds, "no frames from the capture device; restarting the stream");
                }
                self.hub.set_state(VideoState { signal: Signal::NoSignal, source_size: None, generation });
                break SessionEnd::Restart;
            }
            let ready = self.dev.readiness(200)?;
            let (frame_ready, event_ready) = (ready.frame, ready.event);
            if ready.error && !frame_ready && !event_ready {
                // It stays set: polling again would spin until the stall limit.
                return Err(V4l2Error::Invalid("the capture queue reported an error (POLLERR)".into()));
            }
            let mut restart = false;
            if event_ready {
                while let Some(ev) = self.dev.next_event()? {
                    if let Event::SourceChange { changes } = ev {
                        tracing::info!(changes, "source change");
                        restart = true;
                    }
                }
            }
            // The bridge's events arrive on its own node (its DQEVENT does not block).
            if let Some(b) = bridge.as_ref().filter(|_| bridge_events) {
                while let Some(ev) = b.device().next_event()? {
                    if let Event::SourceChange { changes } = ev {
                        tracing::info!(changes, "source change at the bridge");
                        restart = true;
                    }
                }
            }
            if restart {
                break SessionEnd::Restart;
            }
            if !frame_ready {
                continue;
            }
            if force_keyframe && self.hub.take_keyframe_request() {
                if let Err(e) = self.dev.set_control(CID_FORCE_KEY_FRAME, 1) {
                    // Viewers start from the last IDR instead; stop asking this device.
                    tracing::info!(error = %e, "the capture device cannot force an IDR; viewers start at its last one");
                    force_keyframe = false;
                }
            }
            let Dequeued::Buffer { index, payload, error, .. } = self.dev.dequeue(kind)? else { continue };
            let captured_at = Instant::now();
            last_frame = captured_at;
            let Some(buffer) = buffers.get(index as usize) else {
                self.dev.queue(kind, index, &[])?;
                continue;
            };
            let data = buffer.data(&payload);
            let whole = if error {
                Err("the driver flagged the buffer".to_string())
            } else if compression == Some(Compression::Mjpeg) {
                check_capture_frame(&data, (fmt.width, fmt.height)).map_err(|e| e.to_string())
            } else {
                Ok(())
            };
            let picture = match (whole, compression) {
                (Err(why), _) => {
                    self.hub.count_corrupt();
                    // A few at info, then quietly (a dongle with a bad cable can send many).
                    if corrupt_logged < 5 {
                        corrupt_logged += 1;
                        tracing::info!(why = %why, bytes = data.len(), "dropping a corrupt capture frame");
                    }
                    None
                }
                (Ok(()), None) => {
                    let rgb = raw_picture(&fmt, &data);
                    if rgb.is_none() {
                        self.hub.count_corrupt();
                    }
                    rgb.map(Picture::Raw)
                }
                (Ok(()), Some(c @ Compression::Mjpeg)) => Some(Picture::Encoded(c, Arc::from(&data[..]), true)),
                (Ok(()), Some(c @ Compression::H264)) => match params.prepare(&data) {
                    Prepared::Picture { data, keyframe } => Some(Picture::Encoded(c, Arc::from(&data[..]), keyframe)),
                    Prepared::NoPicture => None,
                    Prepared::MissingParameterSets => {
                        tracing::debug!("an IDR before any SPS/PPS; waiting for them");
                        None
                    }
                },
            };
            drop(data);
            self.dev.queue(kind, index, &[])?;
            let Some(picture) = picture else { continue };
            if !locked {
                locked = true;
                self.stall_logged.set(false);
                self.hub.set_state(VideoState {
                    signal: Signal::Locked,
                    source_size: Some((fmt.width, fmt.height)),
                    generation,
                });
            }
            *sequence += 1;
            let (sequence, width, height) = (*sequence, fmt.width, fmt.height);
            match picture {
                Picture::Encoded(compression, data, keyframe) => {
                    let frame =
                        EncodedFrame { generation, sequence, captured_at, width, height, compression, keyframe, data };
                    self.hub.publish_encoded(frame);
                }
                Picture::Raw(rgb) => {
                    let (format, data) = (PixelFormat::Rgb24, Arc::from(rgb));
                    self.hub.publish(Arc::new(Frame {
                        generation,
                        sequence,
                        captured_at,
                        width,
                        height,
                        format,
                        data,
                    }));
                }
            }
        };
        let _ = self.dev.stream(kind, false);
        drop(buffers);
        let _ = self.dev.request_buffers(kind, 0);
        Ok(end)
    }
}

impl FrameSource for V4l2Capture {
    fn backend(&self) -> &'static str {
        "v4l2"
    }

    fn start(self: Box<Self>, hub: FrameHub) -> Result<SourceGuard, VideoError> {
        let stop = Arc::new(AtomicBool::new(false));
        let stop_thread = stop.clone();
        std::thread::Builder::new()
            .name("v4l2-capture".into())
            .spawn(move || {
                let hub = Arc::new(hub);
                // Compressed capture is decoded only while pixels are wanted, on its own thread.
                let _pixels = match PixelDecoder::start(hub.clone(), self.decoder) {
                    Ok(d) => Some(d),
                    Err(e) => {
                        tracing::error!(error = %e, "no pixel decoder: screenshots of compressed capture will fail");
                        None
                    }
                };
                // Sequence numbers never repeat within the source's lifetime.
                let mut sequence = 0u64;
                let mut generation = 0u32;
                let mut missing_logged = false;
                let mut last_failure = String::new();
                // The device last streamed, so a replug under another node finds it again.
                let mut seen: Option<Identity> = None;
                let stall_logged = std::cell::Cell::new(false);
                while !stop_thread.load(Ordering::Relaxed) {
                    let dev = match open_device(&self.path, seen.as_ref()) {
                        Ok(d) => {
                            missing_logged = false;
                            d
                        }
                        Err(e) => {
                            // Once at warn (no dongle plugged can last days: the journal is
                            // small), then at debug until it comes back. The state is said
                            // once per absence: readers wake on changes, not on retries.
                            if missing_logged {
                                tracing::debug!(error = %e, "capture device unavailable; retrying");
                            } else {
                                tracing::warn!(error = %e, "capture device unavailable; looking for it again every 250 ms");
                                missing_logged = true;
                                generation += 1;
                                hub.set_state(VideoState { signal: Signal::NoDevice, source_size: None, generation });
                                hub.set_device(None);
                            }
                            std::thread::sleep(REOPEN_EVERY);
                            continue;
                        }
                    };
                    // Each session is a generation of its own.
                    generation += 1;
                    if let Ok(c) = dev.querycap() {
                        seen = Some(Identity::from(&c));
                    }
                    if let Some(i) = self.input {
                        if let Err(e) = dev.set_input(i) {
                            tracing::warn!(error = %e, input = i, "could not select input");
                        }
                    }
                    // Source-change events are per input: subscribe for the one we use.
                    if let Err(e) = dev.subscribe(EVENT_SOURCE_CHANGE, self.input.unwrap_or(0)) {
                        tracing::debug!(error = %e, "no source-change events on this node");
                    }
                    let session = Session { dev: &dev, hub: &hub, stop: &stop_thread, stall_logged: &stall_logged };
                    match session.stream(generation, &self, &mut sequence) {
                        Ok(SessionEnd::Stop) => break,
                        Ok(SessionEnd::Restart) => last_failure.clear(),
                        Err(e) => {
                            // The same failure again (a pipeline that cannot be configured)
                            // is logged once, not every half second.
                            let text = format!("{e:?}");
                            if text == last_failure {
                                tracing::debug!(error = %text, "capture failed again; reopening");
                            } else {
                                tracing::warn!(error = %e, "capture failed; reopening");
                                last_failure = text;
                                // The state changes (readers wake on it) once per kind of
                                // failure, not on every retry.
                                hub.set_state(VideoState { signal: Signal::NoDevice, source_size: None, generation });
                                hub.set_device(None);
                            }
                            std::thread::sleep(REOPEN_EVERY * 2);
                        }
                    }
                }
            })
            .map_err(VideoError::Spawn)?;
        Ok(SourceGuard::new(move || stop.store(true, Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_is_the_configured_one_when_offered_else_the_largest() {
        let offered = [(640, 480), (1920, 1080), (1280, 720)];
        assert_eq!(choose_size(Some((1280, 720)), &offered, (640, 480)), (1280, 720));
        assert_eq!(choose_size(None, &offered, (640, 480)), (1920, 1080));
        assert_eq!(choose_size(Some((3840, 2160)), &offered, (640, 480)), (1920, 1080), "not offered: the largest");
        assert_eq!(choose_size(None, &[], (800, 600)), (800, 600), "nothing enumerated: the node's current size");
    }

    #[test]
    fn interval_is_the_nearest_to_the_configured_rate_else_the_fastest() {
        let offered = [(1, 30), (1, 60), (1, 5), (0, 0)];
        assert_eq!(choose_interval(None, &offered), Some((1, 60)));
        assert_eq!(choose_interval(Some(30), &offered), Some((1, 30)));
        assert_eq!(choose_interval(Some(25), &offered), Some((1, 30)));
        assert_eq!(choose_interval(Some(1), &offered), Some((1, 5)));
        // UVC reports 100 ns units as n/10_000_000.
        assert_eq!(choose_interval(None, &[(333_333, 10_000_000), (166_666, 10_000_000)]), Some((166_666, 10_000_000)));
        assert_eq!(choose_interval(None, &[]), None);
        assert_eq!(choose_interval(None, &[(0, 0)]), None, "a zero interval is no choice");
    }

    #[test]
    fn a_slow_stream_gets_five_intervals_before_it_counts_as_stalled() {
        assert_eq!(stall_limit(None), STALL_AFTER);
        assert_eq!(stall_limit(Some((1, 30))), STALL_AFTER);
        assert_eq!(stall_limit(Some((1, 1))), Duration::from_secs(5));
        assert_eq!(stall_limit(Some((1, 0))), STALL_AFTER);
    }

    #[test]
    fn a_missing_node_without_a_device_seen_is_an_open_error() {
        let err = open_device(Path::new("/nonexistent/video9"), None).unwrap_err();
        assert!(matches!(err, V4l2Error::Open { .. }), "{err}");
        // Seen before: every /dev/video* is tried; none here is that device.
        let seen = Identity { driver: "uvcvideo".into(), card: "no such dongle".into(), bus_info: "usb-x-1".into() };
        assert!(open_device(Path::new("/nonexistent/video9"), Some(&seen)).is_err());
    }

    #[test]
    fn format_choice_prefers_config_then_the_node_then_our_order() {
        let offered = [FourCc::NV12, FourCc::YUYV, FourCc::new(b"BA81")];
        // Configured and offered: used.
        assert_eq!(choose_format(Some(FourCc::NV12), FourCc::YUYV, &offered), Some(FourCc::NV12));
        // Not configured: the node's current format is respected when we convert it...
        assert_eq!(choose_format(None, FourCc::NV12, &offered), Some(FourCc::NV12));
        // ...and our first choice otherwise (a Bayer format we cannot convert).
        assert_eq!(choose_format(None, FourCc::new(b"BA81"), &offered), Some(FourCc::YUYV));
        // Configured but not offered: fall back the same way.
        assert_eq!(choose_format(Some(FourCc::MJPEG), FourCc::NV12, &offered), Some(FourCc::NV12));
        assert_eq!(choose_format(None, FourCc::new(b"BA81"), &[FourCc::new(b"BA81")]), None);
    }
}
