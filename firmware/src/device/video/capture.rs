//! V4L2 capture as a [`FrameSource`]: a dedicated thread that opens the node, follows the
//! HDMI signal (DV timings, source-change events), streams mmap buffers, converts raw
//! frames to RGB and publishes them. MJPEG and H.264 are published as they arrive (viewers
//! get them untouched) and decoded by the [`PixelDecoder`] only when pixels are wanted.
//! Signal loss, resolution change and replug bump the generation and recover without a
//! restart.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::codec::{CodecChoice, ParameterSets, Prepared};
use super::convert::{nv12_to_rgb, packed422_to_rgb, rgb24_rows};
use super::decode::PixelDecoder;
use super::v4l2::{
    BufType, Dequeued, DvTimingsStatus, Event, FourCc, PixFormat, V4l2Device, V4l2Error, EVENT_SOURCE_CHANGE,
};
use super::{
    Compression, EncodedFrame, Frame, FrameHub, FrameSource, PixelFormat, Signal, SourceGuard, VideoError, VideoState,
};

/// `V4L2_CID_MPEG_VIDEO_FORCE_KEY_FRAME`: how viewers' keyframe requests reach an H.264
/// capture device that has it.
const CID_FORCE_KEY_FRAME: u32 = 0x0099_09e5;

/// Raw formats we convert, in order of preference.
pub const RAW_FORMATS: [FourCc; 6] =
    [FourCc::YUYV, FourCc::UYVY, FourCc::NV12, FourCc::RGB24, FourCc::MJPEG, FourCc::H264];

/// Buffers requested from the driver.
const BUFFERS: u32 = 4;

/// Capture from a V4L2 node.
#[derive(Debug, Clone)]
pub struct V4l2Capture {
    /// The node, e.g. `/dev/video0`.
    pub path: PathBuf,
    /// Input to select first (HDMI input of multi-input devices).
    pub input: Option<u32>,
    /// Preferred pixel format; the first supported of [`RAW_FORMATS`] otherwise.
    pub format: Option<FourCc>,
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

struct Session<'a> {
    dev: &'a V4l2Device,
    hub: &'a FrameHub,
    stop: &'a AtomicBool,
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

    fn stream(&self, generation: u32, want: Option<FourCc>, sequence: &mut u64) -> Result<SessionEnd, V4l2Error> {
        let size = match self.lock_signal(generation)? {
            Ok(size) => size,
            Err(end) => return Ok(end),
        };
        if self.stop.load(Ordering::Relaxed) {
            return Ok(SessionEnd::Stop);
        }
        let caps = self.dev.querycap()?.device_caps;
        let kind = BufType::capture_for(caps)
            .ok_or_else(|| V4l2Error::Invalid(format!("{} is not a capture node", self.dev.path().display())))?;
        let offered: Vec<FourCc> = self.dev.formats(kind)?.into_iter().map(|f| f.fourcc).collect();
        let current = self.dev.format(kind)?;
        let fourcc = choose_format(want, current.fourcc, &offered)
            .ok_or_else(|| V4l2Error::Invalid(format!("no supported raw format among {offered:?}")))?;
        let (width, height) = size.unwrap_or((current.width, current.height));
        let fmt = self.dev.set_format(kind, &PixFormat::new(width, height, fourcc))?;
        if fmt.fourcc != fourcc {
            return Err(V4l2Error::Invalid(format!("driver chose {} instead of {fourcc}", fmt.fourcc)));
        }
        let count = self.dev.request_buffers(kind, BUFFERS)?;
        let buffers = (0..count).map(|i| self.dev.map_buffer(kind, i)).collect::<Result<Vec<_>, _>>()?;
        for i in 0..count {
            self.dev.queue(kind, i, &[])?;
        }
        self.dev.stream(kind, true)?;
        self.hub.set_state(VideoState {
            signal: Signal::Locked,
            source_size: Some((fmt.width, fmt.height)),
            generation,
        });
        tracing::info!(path = %self.dev.path().display(), format = %fmt.fourcc, width = fmt.width, height = fmt.height, planes = fmt.planes, multiplanar = kind.is_multiplanar(), generation, "capturing");
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
        let end = loop {
            if self.stop.load(Ordering::Relaxed) {
                break SessionEnd::Stop;
            }
            // Events can be missed (or not implemented by a bridge): re-check the signal
            // every second while streaming HDMI.
            if size.is_some() && checked.elapsed() >= Duration::from_secs(1) {
                checked = Instant::now();
                match self.dev.query_dv_timings()? {
                    DvTimingsStatus::Locked(t) if Some((t.width, t.height)) == size => {}
                    other => {
                        tracing::info!(status = ?other, "signal changed while streaming");
                        break SessionEnd::Restart;
                    }
                }
            }
            let (frame_ready, event_ready) = self.dev.wait(200)?;
            if event_ready {
                let mut restart = false;
                while let Some(ev) = self.dev.next_event()? {
                    if let Event::SourceChange { changes } = ev {
                        tracing::info!(changes, "source change");
                        restart = true;
                    }
                }
                if restart {
                    break SessionEnd::Restart;
                }
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
            let Dequeued::Buffer { index, payload, .. } = self.dev.dequeue(kind)? else { continue };
            let captured_at = Instant::now();
            let Some(buffer) = buffers.get(index as usize) else {
                self.dev.queue(kind, index, &[])?;
                continue;
            };
            let data = buffer.data(&payload);
            let picture = match compression {
                None => raw_picture(&fmt, &data).map(Picture::Raw),
                Some(c @ Compression::Mjpeg) => Some(Picture::Encoded(c, Arc::from(&data[..]), true)),
                Some(c @ Compression::H264) => match params.prepare(&data) {
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
                while !stop_thread.load(Ordering::Relaxed) {
                    generation += 1;
                    let dev = match V4l2Device::open(&self.path) {
                        Ok(d) => {
                            missing_logged = false;
                            d
                        }
                        Err(e) => {
                            // Once at warn (no dongle plugged can last days: the journal is
                            // small), then at debug until it comes back.
                            if missing_logged {
                                tracing::debug!(error = %e, "capture device unavailable; retrying");
                            } else {
                                tracing::warn!(error = %e, "capture device unavailable; retrying every second");
                                missing_logged = true;
                            }
                            hub.set_state(VideoState { signal: Signal::NoDevice, source_size: None, generation });
                            std::thread::sleep(Duration::from_secs(1));
                            continue;
                        }
                    };
                    if let Some(i) = self.input {
                        if let Err(e) = dev.set_input(i) {
                            tracing::warn!(error = %e, input = i, "could not select input");
                        }
                    }
                    // Source-change events are per input: subscribe for the one we use.
                    if let Err(e) = dev.subscribe(EVENT_SOURCE_CHANGE, self.input.unwrap_or(0)) {
                        tracing::debug!(error = %e, "no source-change events on this node");
                    }
                    let session = Session { dev: &dev, hub: &hub, stop: &stop_thread };
                    match session.stream(generation, self.format, &mut sequence) {
                        Ok(SessionEnd::Stop) => break,
                        Ok(SessionEnd::Restart) => {}
                        Err(e) => {
                            tracing::warn!(error = %e, "capture failed; reopening");
                            hub.set_state(VideoState { signal: Signal::NoDevice, source_size: None, generation });
                            std::thread::sleep(Duration::from_millis(500));
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
