//! Frames, the hub that hands out the latest one, and the source trait.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::watch;

use super::viewers::ViewerHub;
use crate::sync::LockPlain;

/// Pixel layout of a frame's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PixelFormat {
    /// 8-bit R, G, B, tightly packed, rows top to bottom.
    Rgb24,
    /// 4:2:0 YUV, BT.601 limited range (what HDMI bridges send): a `width`x`height` Y plane,
    /// then interleaved U, V at half resolution (`width`x`height/2` bytes). Even sizes
    /// only. Half the memory of RGB24: a 2160p frame is 12.4 MB instead of 24.9 MB.
    Nv12,
}

impl PixelFormat {
    /// Bytes of a `width`x`height` picture in this layout; `None` when the size does not
    /// exist in it (odd sizes for NV12) or its byte count overflows.
    pub fn frame_len(self, width: u32, height: u32) -> Option<usize> {
        let pixels = usize::try_from(width).ok()?.checked_mul(usize::try_from(height).ok()?)?;
        match self {
            PixelFormat::Rgb24 => pixels.checked_mul(3),
            PixelFormat::Nv12 if width.is_multiple_of(2) && height.is_multiple_of(2) => pixels.checked_add(pixels / 2),
            PixelFormat::Nv12 => None,
        }
    }

    /// One pixel of [`Frame::row_samples`] as RGB.
    pub fn to_rgb(self, sample: [u8; 3]) -> [u8; 3] {
        match self {
            PixelFormat::Rgb24 => sample,
            PixelFormat::Nv12 => super::convert::yuv_to_rgb(sample[0], sample[1], sample[2]),
        }
    }
}

/// One captured (or rendered) picture of the capture frame, shared read-only.
#[derive(Clone)]
pub struct Frame {
    /// Signal/format epoch: bumps on signal loss, resolution or format change, replug.
    pub generation: u32,
    /// Sequence number within the source's lifetime, strictly increasing.
    pub sequence: u64,
    /// Monotonic capture time.
    pub captured_at: Instant,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Layout of `data`.
    pub format: PixelFormat,
    /// Pixel data, [`PixelFormat::frame_len`] bytes.
    pub data: Arc<[u8]>,
}

impl Frame {
    /// An RGB24 frame captured now. `data` must be `width * height * 3` bytes.
    pub fn rgb(generation: u32, sequence: u64, width: u32, height: u32, data: Vec<u8>) -> Frame {
        Frame {
            generation,
            sequence,
            captured_at: Instant::now(),
            width,
            height,
            format: PixelFormat::Rgb24,
            data: Arc::from(data),
        }
    }

    /// The luma (limited-range BT.601 Y) of one pixel: the sample itself for NV12, computed
    /// for RGB24. `None` outside the frame or when the data is short.
    pub fn luma(&self, x: u32, y: u32) -> Option<u8> {
        match self.format {
            PixelFormat::Nv12 => {
                if x >= self.width || y >= self.height {
                    return None;
                }
                self.data.get(y as usize * self.width as usize + x as usize).copied()
            }
            PixelFormat::Rgb24 => {
                let mut px = [0u8; 3];
                self.row_rgb(y, x, x + 1, &mut px).then(|| super::convert::rgb_to_yuv(px)[0])
            }
        }
    }

    /// Converts pixels `x0..x1` of row `y` to RGB24 into `out` (`(x1 - x0) * 3` bytes): the
    /// one way readers see pixels whatever the layout. `false` (and `out` untouched) when
    /// the span is outside the frame, `out` has the wrong length or the data is short.
    pub fn row_rgb(&self, y: u32, x0: u32, x1: u32, out: &mut [u8]) -> bool {
        self.row(y, x0, x1, out, true)
    }

    /// Like [`Frame::row_rgb`] but in the layout's own three channels: R, G, B for RGB24;
    /// Y, U, V for NV12 (each pixel with its shared chroma). Averaging these and converting
    /// the average with [`PixelFormat::to_rgb`] is how a scaler avoids converting every
    /// source pixel (the conversion is affine, so only clamping differs).
    pub fn row_samples(&self, y: u32, x0: u32, x1: u32, out: &mut [u8]) -> bool {
        self.row(y, x0, x1, out, false)
    }

    fn row(&self, y: u32, x0: u32, x1: u32, out: &mut [u8], rgb: bool) -> bool {
        if y >= self.height || x0 > x1 || x1 > self.width || out.len() != (x1 - x0) as usize * 3 {
            return false;
        }
        if self.format.frame_len(self.width, self.height).is_none_or(|len| self.data.len() < len) {
            return false;
        }
        // Every index below is inside the length just checked.
        let (w, y, x0, x1) = (self.width as usize, y as usize, x0 as usize, x1 as usize);
        match self.format {
            PixelFormat::Rgb24 => out.copy_from_slice(&self.data[(y * w + x0) * 3..(y * w + x1) * 3]),
            PixelFormat::Nv12 => {
                let luma = &self.data[y * w..(y + 1) * w];
                let chroma_row = w * self.height as usize + (y / 2) * w;
                let chroma = &self.data[chroma_row..chroma_row + w];
                for (x, px) in (x0..x1).zip(out.chunks_exact_mut(3)) {
                    let uv = x & !1;
                    let sample = [luma[x], chroma[uv], chroma[uv + 1]];
                    px.copy_from_slice(&if rgb { PixelFormat::Nv12.to_rgb(sample) } else { sample });
                }
            }
        }
        true
    }
}

impl fmt::Debug for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Frame")
            .field("generation", &self.generation)
            .field("sequence", &self.sequence)
            .field("size", &(self.width, self.height))
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

/// How a capture device compressed its pictures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// H.264 Annex B access units (UVC H.264 dongles, files).
    H264,
    /// One JPEG per picture (most UVC HDMI dongles).
    Mjpeg,
}

impl Compression {
    /// The name `status` uses.
    pub fn name(self) -> &'static str {
        match self {
            Compression::H264 => "h264",
            Compression::Mjpeg => "mjpeg",
        }
    }
}

/// One picture as the capture device sent it: handed to viewers as is, and decoded only
/// when something needs its pixels.
#[derive(Clone)]
pub struct EncodedFrame {
    /// Signal/format epoch, as [`Frame::generation`].
    pub generation: u32,
    /// Sequence number within the source's lifetime; a picture decoded from this one
    /// carries the same number.
    pub sequence: u64,
    /// Monotonic capture time.
    pub captured_at: Instant,
    /// Width in pixels (from the capture format).
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// How `data` is compressed.
    pub compression: Compression,
    /// Decodable by itself: every JPEG; an H.264 IDR (with its SPS and PPS in front).
    pub keyframe: bool,
    /// The bytes: one Annex B access unit, or one JPEG.
    pub data: Arc<[u8]>,
}

impl fmt::Debug for EncodedFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EncodedFrame")
            .field("generation", &self.generation)
            .field("sequence", &self.sequence)
            .field("size", &(self.width, self.height))
            .field("compression", &self.compression)
            .field("keyframe", &self.keyframe)
            .field("bytes", &self.data.len())
            .finish_non_exhaustive()
    }
}

/// The newest picture the source captured, whether or not it has been decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Captured {
    /// Its generation.
    pub generation: u32,
    /// Its sequence.
    pub sequence: u64,
    /// When it was captured.
    pub captured_at: Instant,
}

/// How long a call for pixels keeps the decoder of a compressed capture working: a
/// screenshot, a calibration step or a transcoding encoder asks again well within it.
pub const PIXEL_DEMAND_WINDOW: Duration = Duration::from_secs(1);
/// The span `status`'s frame rate is counted over.
pub const FPS_WINDOW: Duration = Duration::from_secs(2);
/// Access units of H.264 kept since the last IDR for a decoder that is idle (a
/// keyframe is requested when a stream outruns it).
pub const PENDING_AUS: usize = 300;
/// Bytes of H.264 kept since the last IDR for an idle decoder.
pub const PENDING_BYTES: usize = 16 << 20;

/// Compressed pictures waiting for the pixel decoder, and the demand for pixels.
#[derive(Debug, Default)]
pub(super) struct PixelQueue {
    /// When a reader last asked for pixels.
    pub(super) wanted_at: Option<Instant>,
    /// The newest JPEG (older ones are never decoded).
    pub(super) jpeg: Option<Arc<EncodedFrame>>,
    /// H.264 since the last IDR, in order; `fed` of them went to the decoder already.
    pub(super) gop: VecDeque<Arc<EncodedFrame>>,
    pub(super) gop_bytes: usize,
    pub(super) fed: usize,
    /// The decoder wants an IDR from the device (it overflowed).
    pub(super) want_keyframe: bool,
    /// The hub is gone: the decoder ends.
    pub(super) closed: bool,
}

impl PixelQueue {
    pub(super) fn demand_recent(&self) -> bool {
        self.wanted_at.is_some_and(|t| t.elapsed() <= PIXEL_DEMAND_WINDOW)
    }

    /// Forgets the kept H.264 (a new GOP, another stream, or an overflow).
    fn clear_gop(&mut self) {
        self.gop.clear();
        self.gop_bytes = 0;
        self.fed = 0;
    }

    fn push(&mut self, frame: Arc<EncodedFrame>) {
        match frame.compression {
            Compression::Mjpeg => {
                self.clear_gop();
                self.jpeg = Some(frame);
            }
            Compression::H264 => {
                self.jpeg = None;
                let other_stream = self.gop.front().is_some_and(|f| f.generation != frame.generation);
                if frame.keyframe || other_stream {
                    self.clear_gop();
                }
                if !frame.keyframe && self.gop.is_empty() {
                    // No IDR to decode it from (the stream's start, or after an overflow).
                    return;
                }
                if self.gop.len() >= PENDING_AUS || self.gop_bytes + frame.data.len() > PENDING_BYTES {
                    // The decoder has been idle for a whole GOP: start again at an IDR.
                    self.clear_gop();
                    self.want_keyframe = true;
                    return;
                }
                self.gop_bytes += frame.data.len();
                self.gop.push_back(frame);
            }
        }
    }
}

/// State the hub's publisher, its readers and the pixel decoder share.
#[derive(Debug, Default)]
pub(super) struct Shared {
    decoder: Mutex<&'static str>,
    decoder_notes: Mutex<Vec<String>>,
    device: Mutex<Option<CaptureDevice>>,
    newest: Mutex<Option<Captured>>,
    /// When the pictures of the last [`FPS_WINDOW`] were captured (for `status`'s rate).
    recent: Mutex<VecDeque<Instant>>,
    compression: Mutex<Option<Compression>>,
    passthrough: Mutex<Option<ViewerHub>>,
    taps: Mutex<Vec<EncodedTap>>,
    pub(super) pixels: Mutex<PixelQueue>,
    pub(super) pixels_changed: Condvar,
}

/// A copy of compressed capture for one reader (a recording) as it arrives: a bounded
/// queue the publisher never waits on. A picture that finds the queue full is dropped and
/// the reader is told ([`TapReceiver::lost`]), so it can start again at a keyframe.
#[derive(Debug)]
struct EncodedTap {
    tx: std::sync::mpsc::SyncSender<TapMessage>,
    lost: Arc<std::sync::atomic::AtomicBool>,
}

impl EncodedTap {
    /// Hands `frame` on; `false` once the reader is gone (the tap is removed).
    fn offer(&self, frame: &Arc<EncodedFrame>) -> bool {
        match self.tx.try_send(TapMessage::Frame(frame.clone())) {
            Ok(()) => true,
            Err(std::sync::mpsc::TrySendError::Full(_)) => {
                self.lost.store(true, std::sync::atomic::Ordering::Relaxed);
                true
            }
            Err(std::sync::mpsc::TrySendError::Disconnected(_)) => false,
        }
    }
}

/// What a tap's reader receives.
#[derive(Debug)]
pub enum TapMessage {
    /// A compressed picture, as the capture sent it.
    Frame(Arc<EncodedFrame>),
    /// The reader's owner asks it to stop (sent through [`TapReceiver::stopper`]), with
    /// the moment that counts as the end.
    Stop(Instant),
}

/// The reading end of a tap (see [`FrameReader::encoded_tap`]).
#[derive(Debug)]
pub struct TapReceiver {
    rx: std::sync::mpsc::Receiver<TapMessage>,
    tx: std::sync::mpsc::SyncSender<TapMessage>,
    lost: Arc<std::sync::atomic::AtomicBool>,
}

impl TapReceiver {
    /// Waits up to `timeout` for the next message (`None`: nothing came).
    pub fn recv_timeout(&self, timeout: Duration) -> Option<TapMessage> {
        self.rx.recv_timeout(timeout).ok()
    }

    /// Whether pictures were dropped since the last call (the queue was full).
    pub fn lost(&self) -> bool {
        self.lost.swap(false, std::sync::atomic::Ordering::Relaxed)
    }

    /// A sender for [`TapMessage::Stop`] (it waits for room: a stop is never dropped).
    pub fn stopper(&self) -> std::sync::mpsc::SyncSender<TapMessage> {
        self.tx.clone()
    }
}

/// Whether the source currently delivers a picture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// Frames are arriving.
    Locked,
    /// The device is there but sees no signal (cable out, phone not mirroring).
    NoSignal,
    /// No capture device is open.
    NoDevice,
}

/// The capture device a source has open and what it negotiated (`status.video.device`,
/// `doctor`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CaptureDevice {
    /// The node, e.g. `/dev/video0`.
    pub node: String,
    /// Its driver (`uvcvideo`, `unicam`, `vimc`...).
    pub driver: String,
    /// The driver's name for the device (a dongle's product string for UVC).
    pub card: String,
    /// The pixel format captured (`MJPG`, `YUYV`, `UYVY`...).
    pub format: String,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// The frame rate negotiated with the device, when it takes one.
    pub fps: Option<f32>,
    /// For media-controller capture: the configured pipeline, source first.
    pub pipeline: Option<String>,
    /// Pictures dropped as corrupt since the device was opened.
    pub corrupt_frames: u64,
}

/// The source's state, published next to frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct VideoState {
    /// Signal state.
    pub signal: Signal,
    /// Current capture size, when known.
    pub source_size: Option<(u32, u32)>,
    /// Current generation (see [`Frame::generation`]).
    pub generation: u32,
}

impl Default for VideoState {
    fn default() -> Self {
        VideoState { signal: Signal::NoDevice, source_size: None, generation: 0 }
    }
}

/// Errors starting or running a video source.
#[derive(Debug, thiserror::Error)]
pub enum VideoError {
    /// The source's worker thread could not be started.
    #[error("start video source thread")]
    Spawn(#[source] std::io::Error),
    /// Invalid source configuration.
    #[error("invalid video configuration: {0}")]
    Config(String),
    /// `encoder_backend = "hardware"` on a board without an M2M H.264 encoder.
    #[error(
        "encoder_backend = \"hardware\" but no V4L2 M2M node encodes YU12 to H.264 here; use \"auto\" or \"software\""
    )]
    NoHardwareEncoder,
}

/// The publishing side of the hub. Only the source holds it.
#[derive(Debug)]
pub struct FrameHub {
    latest: watch::Sender<Option<Arc<Frame>>>,
    state: watch::Sender<VideoState>,
    shared: Arc<Shared>,
}

/// The reading side of the hub; cheap to clone.
#[derive(Debug, Clone)]
pub struct FrameReader {
    latest: watch::Receiver<Option<Arc<Frame>>>,
    state: watch::Receiver<VideoState>,
    shared: Arc<Shared>,
}

impl FrameHub {
    /// A hub with no frame and no device.
    pub fn new() -> (FrameHub, FrameReader) {
        let (latest_tx, latest_rx) = watch::channel(None);
        let (state_tx, state_rx) = watch::channel(VideoState::default());
        let shared = Arc::new(Shared { decoder: Mutex::new("none"), ..Shared::default() });
        (
            FrameHub { latest: latest_tx, state: state_tx, shared: shared.clone() },
            FrameReader { latest: latest_rx, state: state_rx, shared },
        )
    }

    /// Hands compressed capture to `viewers` as it arrives (passthrough) instead of having
    /// it decoded and encoded again. Set before the source starts.
    pub fn set_passthrough(&self, viewers: ViewerHub) {
        *self.shared.passthrough.lock_plain() = Some(viewers);
    }

    /// Records which decoder turns the capture into pictures (`none` for raw formats,
    /// `software`, `v4l2-m2m`).
    pub fn set_decoder(&self, name: &'static str) {
        *self.shared.decoder.lock_plain() = name;
    }

    /// Records why decoders ahead of the one in use were skipped (for `status`).
    pub fn set_decoder_notes(&self, notes: Vec<String>) {
        *self.shared.decoder_notes.lock_plain() = notes;
    }

    /// Records the capture device and what was negotiated with it (`None`: none open).
    pub fn set_device(&self, device: Option<CaptureDevice>) {
        *self.shared.device.lock_plain() = device;
    }

    /// Counts a captured picture that was dropped as corrupt (a truncated or garbled JPEG,
    /// a buffer the driver flagged).
    pub fn count_corrupt(&self) {
        if let Some(d) = self.shared.device.lock_plain().as_mut() {
            d.corrupt_frames += 1;
        }
    }

    /// Records how the current capture is compressed (`None`: raw pictures). Sources say
    /// it when a stream starts.
    pub fn set_compression(&self, compression: Option<Compression>) {
        *self.shared.compression.lock_plain() = compression;
        if compression.is_none() {
            self.set_decoder("none");
        }
        if let Some(viewers) = self.passthrough_viewers() {
            viewers.set_passthrough(compression);
        }
    }

    fn passthrough_viewers(&self) -> Option<ViewerHub> {
        self.shared.passthrough.lock_plain().clone()
    }

    /// Publishes a new latest frame. Never waits on readers.
    pub fn publish(&self, frame: Arc<Frame>) {
        self.note_captured(frame.generation, frame.sequence, frame.captured_at);
        self.latest.send_replace(Some(frame));
    }

    /// Publishes a decoded picture of an already announced [`EncodedFrame`].
    pub(super) fn publish_decoded(&self, frame: Arc<Frame>) {
        self.latest.send_replace(Some(frame));
    }

    fn note_captured(&self, generation: u32, sequence: u64, captured_at: Instant) {
        {
            let mut recent = self.shared.recent.lock_plain();
            while recent.front().is_some_and(|t| captured_at.saturating_duration_since(*t) > FPS_WINDOW)
                || recent.len() >= 512
            {
                recent.pop_front();
            }
            recent.push_back(captured_at);
        }
        let mut newest = self.shared.newest.lock_plain();
        if newest.is_none_or(|n| n.generation != generation || n.sequence < sequence) {
            *newest = Some(Captured { generation, sequence, captured_at });
        }
    }

    /// Publishes a compressed picture: to viewers as it is (passthrough), and to the pixel
    /// decoder, which decodes only while a reader wants pixels. Never waits.
    pub fn publish_encoded(&self, frame: EncodedFrame) {
        self.note_captured(frame.generation, frame.sequence, frame.captured_at);
        let frame = Arc::new(frame);
        if let Some(viewers) = self.passthrough_viewers() {
            viewers.publish_encoded(&frame);
        }
        self.shared.taps.lock_plain().retain(|tap| tap.offer(&frame));
        self.shared.pixels.lock_plain().push(frame);
        self.shared.pixels_changed.notify_all();
    }

    /// Whether viewers or the pixel decoder want an IDR from the device (clears both
    /// requests). Sources that can force one (a control) ask it; others wait for the
    /// device's own next IDR, and viewers start from the last one meanwhile.
    pub fn take_keyframe_request(&self) -> bool {
        let decoder = std::mem::take(&mut self.shared.pixels.lock_plain().want_keyframe);
        let viewers = self.passthrough_viewers().is_some_and(|v| v.take_keyframe_request());
        decoder || viewers
    }

    /// The state the pixel decoder shares with this hub.
    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The generation of the current state.
    pub fn current_generation(&self) -> u32 {
        self.state.borrow().generation
    }

    /// Publishes a state change; a changed generation drops the previous frame.
    pub fn set_state(&self, state: VideoState) {
        let old = self.state.send_replace(state);
        if old.generation != state.generation {
            self.latest.send_replace(None);
        }
    }
}

impl FrameReader {
    /// The newest decoded frame, if any. With compressed capture it may be older than the
    /// newest captured picture: callers that need the present call
    /// [`FrameReader::want_pixels`] first and wait for a frame at least that new.
    pub fn latest(&self) -> Option<Arc<Frame>> {
        self.latest.borrow().clone()
    }

    /// Asks for pixels: a compressed capture's decoder works for the next
    /// [`PIXEL_DEMAND_WINDOW`]. Returns the sequence of the newest captured picture (0
    /// before the first), the one to wait for; raw capture is always decoded already.
    pub fn want_pixels(&self) -> u64 {
        let newest = self.newest_captured();
        if self.compression().is_some() {
            self.shared.pixels.lock_plain().wanted_at = Some(Instant::now());
            self.shared.pixels_changed.notify_all();
        }
        match newest {
            Some(n) if n.generation == self.state().generation => n.sequence,
            _ => 0,
        }
    }

    /// A tap on compressed capture: every picture published from now on is also queued
    /// for the returned receiver (up to `capacity`; the publisher never waits). The tap
    /// goes when the receiver is dropped.
    pub fn encoded_tap(&self, capacity: usize) -> TapReceiver {
        let (tx, rx) = std::sync::mpsc::sync_channel(capacity.max(1));
        let lost = Arc::new(std::sync::atomic::AtomicBool::new(false));
        self.shared.taps.lock_plain().push(EncodedTap { tx: tx.clone(), lost: lost.clone() });
        TapReceiver { rx, tx, lost }
    }

    /// Asks the capture device for a keyframe (a reader that lost pictures starts again
    /// there).
    pub fn request_keyframe(&self) {
        self.shared.pixels.lock_plain().want_keyframe = true;
    }

    /// Pictures captured a second, over the last [`FPS_WINDOW`] (0 when none came in it).
    pub fn fps(&self) -> f32 {
        let recent = self.shared.recent.lock_plain();
        let now = Instant::now();
        let n = recent.iter().filter(|t| now.saturating_duration_since(**t) <= FPS_WINDOW).count();
        // At most 512 pictures: exact in f32.
        n as f32 / FPS_WINDOW.as_secs_f32()
    }

    /// The newest captured picture, decoded or not (what `status` reports).
    pub fn newest_captured(&self) -> Option<Captured> {
        *self.shared.newest.lock_plain()
    }

    /// How the current capture is compressed (`None`: raw).
    pub fn compression(&self) -> Option<Compression> {
        *self.shared.compression.lock_plain()
    }

    /// Whether compressed capture goes to viewers as it is (nothing to encode).
    pub fn passthrough(&self) -> bool {
        self.compression().is_some() && self.shared.passthrough.lock_plain().is_some()
    }

    /// The source state.
    pub fn state(&self) -> VideoState {
        *self.state.borrow()
    }

    /// The decoder in use for compressed capture (`none` for raw formats).
    pub fn decoder(&self) -> &'static str {
        *self.shared.decoder.lock_plain()
    }

    /// Why decoders tried before the one in use were skipped, in the order tried.
    pub fn decoder_notes(&self) -> Vec<String> {
        self.shared.decoder_notes.lock_plain().clone()
    }

    /// The capture device in use and what was negotiated with it.
    pub fn device(&self) -> Option<CaptureDevice> {
        self.shared.device.lock_plain().clone()
    }

    /// Waits for the next state change (signal, size, generation); `false` when the source
    /// is gone.
    pub async fn state_changed(&mut self) -> bool {
        self.state.changed().await.is_ok()
    }

    /// Waits for the next published frame (or state change that drops it).
    pub async fn changed(&mut self) -> bool {
        self.latest.changed().await.is_ok()
    }
}

/// Stops a running source when dropped.
pub struct SourceGuard {
    stop: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl SourceGuard {
    /// A guard that runs `stop` once when dropped.
    pub fn new(stop: impl FnOnce() + Send + Sync + 'static) -> Self {
        SourceGuard { stop: Some(Box::new(stop)) }
    }
}

impl fmt::Debug for SourceGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceGuard").finish_non_exhaustive()
    }
}

impl Drop for SourceGuard {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            stop();
        }
    }
}

/// Something that produces frames of the phone's screen.
pub trait FrameSource: Send + fmt::Debug {
    /// A short backend name shown in `status`, e.g. `"sim"` or `"v4l2"`.
    fn backend(&self) -> &'static str;

    /// Starts producing into `hub`; production stops when the guard is dropped.
    fn start(self: Box<Self>, hub: FrameHub) -> Result<SourceGuard, VideoError>;
}

/// A source with no device: `status` says so and screenshots answer `NO_FRAME`.
#[derive(Debug, Default)]
pub struct NoVideo;

impl FrameSource for NoVideo {
    fn backend(&self) -> &'static str {
        "none"
    }

    fn start(self: Box<Self>, hub: FrameHub) -> Result<SourceGuard, VideoError> {
        hub.set_state(VideoState::default());
        // Keep the hub alive so readers see a stable "no device" state.
        Ok(SourceGuard::new(move || drop(hub)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(generation: u32, sequence: u64) -> Arc<Frame> {
        Arc::new(Frame {
            generation,
            sequence,
            captured_at: Instant::now(),
            width: 2,
            height: 1,
            format: PixelFormat::Rgb24,
            data: Arc::from(vec![0u8; 6]),
        })
    }

    #[test]
    fn generation_change_drops_the_old_frame() {
        let (hub, reader) = FrameHub::new();
        hub.set_state(VideoState { signal: Signal::Locked, source_size: Some((2, 1)), generation: 1 });
        hub.publish(frame(1, 1));
        assert_eq!(reader.latest().map(|f| f.sequence), Some(1));
        hub.set_state(VideoState { signal: Signal::Locked, source_size: Some((2, 1)), generation: 1 });
        assert!(reader.latest().is_some(), "same generation keeps the frame");
        hub.set_state(VideoState { signal: Signal::NoSignal, source_size: None, generation: 2 });
        assert!(reader.latest().is_none());
        assert_eq!(reader.state().signal, Signal::NoSignal);
    }

    /// A 4x2 NV12 frame: luma ramps, left chroma pair blue-ish, right pair red-ish.
    fn nv12() -> Frame {
        let data = vec![16, 60, 120, 235, 16, 60, 120, 235, 200, 100, 90, 220];
        Frame { format: PixelFormat::Nv12, data: Arc::from(data), width: 4, height: 2, ..(*frame(1, 1)).clone() }
    }

    #[test]
    fn frame_len_knows_each_layout_and_refuses_what_cannot_exist() {
        assert_eq!(PixelFormat::Rgb24.frame_len(3840, 2160), Some(3840 * 2160 * 3));
        assert_eq!(PixelFormat::Nv12.frame_len(3840, 2160), Some(3840 * 2160 * 3 / 2));
        assert_eq!(PixelFormat::Nv12.frame_len(3, 2), None, "odd width");
        assert_eq!(PixelFormat::Nv12.frame_len(4, 3), None, "odd height");
        assert_eq!(PixelFormat::Rgb24.frame_len(u32::MAX, u32::MAX).map(|_| ()), usize::BITS.ge(&96).then_some(()));
    }

    #[test]
    fn row_rgb_converts_nv12_with_shared_chroma_and_copies_rgb() {
        let f = nv12();
        let mut row = [0u8; 12];
        assert!(f.row_rgb(1, 0, 4, &mut row));
        let want: Vec<u8> = [(16, 200, 100), (60, 200, 100), (120, 90, 220), (235, 90, 220)]
            .iter()
            .flat_map(|&(y, u, v)| super::super::convert::yuv_to_rgb(y, u, v))
            .collect();
        assert_eq!(&row[..], &want[..]);
        let mut two = [0u8; 6];
        assert!(f.row_rgb(0, 1, 3, &mut two), "a span from an odd x");
        assert_eq!(&two[..], &want[3..9]);
        let rgb = Frame::rgb(1, 1, 2, 1, vec![1, 2, 3, 4, 5, 6]);
        let mut px = [0u8; 3];
        assert!(rgb.row_rgb(0, 1, 2, &mut px));
        assert_eq!(px, [4, 5, 6]);
    }

    #[test]
    fn row_rgb_refuses_spans_outside_the_frame_and_short_data() {
        let f = nv12();
        let mut px = [9u8; 3];
        assert!(!f.row_rgb(2, 0, 1, &mut px), "row past the bottom");
        assert!(!f.row_rgb(0, 4, 5, &mut px), "column past the right edge");
        assert!(!f.row_rgb(0, 2, 1, &mut [0u8; 0]), "reversed span");
        assert!(!f.row_rgb(0, 0, 2, &mut px), "output of the wrong length");
        let short = Frame { data: Arc::from(vec![0u8; 11]), ..f };
        assert!(!short.row_rgb(0, 0, 1, &mut px), "data shorter than the size says");
        assert_eq!(px, [9, 9, 9], "untouched on refusal");
        assert_eq!(nv12().luma(3, 1), Some(235));
        assert_eq!(nv12().luma(4, 0), None);
        assert_eq!(Frame::rgb(1, 1, 1, 1, vec![255, 255, 255]).luma(0, 0), Some(235));
        assert_eq!(Frame::rgb(1, 1, 1, 1, vec![255, 255, 255]).luma(0, 1), None);
    }
}
