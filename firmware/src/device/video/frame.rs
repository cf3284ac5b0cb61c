//! Frames, the hub that hands out the latest one, and the source trait.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tokio::sync::watch;

/// Pixel layout of a frame's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PixelFormat {
    /// 8-bit R, G, B, tightly packed, rows top to bottom.
    Rgb24,
}

impl PixelFormat {
    /// Bytes per pixel.
    pub fn bytes_per_pixel(self) -> usize {
        match self {
            PixelFormat::Rgb24 => 3,
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
    /// Pixel data, `width * height * bytes_per_pixel` bytes.
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
    decoder: Arc<std::sync::Mutex<&'static str>>,
}

/// The reading side of the hub; cheap to clone.
#[derive(Debug, Clone)]
pub struct FrameReader {
    latest: watch::Receiver<Option<Arc<Frame>>>,
    state: watch::Receiver<VideoState>,
    decoder: Arc<std::sync::Mutex<&'static str>>,
}

impl FrameHub {
    /// A hub with no frame and no device.
    pub fn new() -> (FrameHub, FrameReader) {
        let (latest_tx, latest_rx) = watch::channel(None);
        let (state_tx, state_rx) = watch::channel(VideoState::default());
        let decoder = Arc::new(std::sync::Mutex::new("none"));
        (
            FrameHub { latest: latest_tx, state: state_tx, decoder: decoder.clone() },
            FrameReader { latest: latest_rx, state: state_rx, decoder },
        )
    }

    /// Records which decoder turns the capture into pictures (`none` for raw formats,
    /// `software`, `v4l2-m2m`).
    pub fn set_decoder(&self, name: &'static str) {
        *self.decoder.lock().unwrap_or_else(|p| p.into_inner()) = name;
    }

    /// Publishes a new latest frame. Never waits on readers.
    pub fn publish(&self, frame: Arc<Frame>) {
        self.latest.send_replace(Some(frame));
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
    /// The newest frame, if any.
    pub fn latest(&self) -> Option<Arc<Frame>> {
        self.latest.borrow().clone()
    }

    /// The source state.
    pub fn state(&self) -> VideoState {
        *self.state.borrow()
    }

    /// The decoder in use for compressed capture (`none` for raw formats).
    pub fn decoder(&self) -> &'static str {
        *self.decoder.lock().unwrap_or_else(|p| p.into_inner())
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
}
