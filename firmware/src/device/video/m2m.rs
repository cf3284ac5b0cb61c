//! Stateful V4L2 memory-to-memory codecs (the Pi's bcm2835-codec for H.264; vicodec's FWHT
//! in the lab): raw frames in on the OUTPUT queue, coded data out on CAPTURE (encoder), or
//! the reverse (decoder, which announces its picture format with a source-change event).
//! Codec-agnostic: the caller names the formats.

use std::path::Path;
use std::time::{Duration, Instant};

use super::v4l2::{
    BufType, BufferPlanes, Dequeued, Event, FourCc, PixFormat, Rect, V4l2Device, V4l2Error, CAP_VIDEO_M2M,
    CAP_VIDEO_M2M_MPLANE, EVENT_SOURCE_CHANGE, SEL_TGT_COMPOSE, SEL_TGT_CROP,
};

const BUFFERS: u32 = 2;

/// Errors running an M2M codec.
#[derive(Debug, thiserror::Error)]
pub enum M2mError {
    /// The V4L2 layer failed.
    #[error(transparent)]
    V4l2(#[from] V4l2Error),
    /// The driver did not answer in time.
    #[error("the codec produced nothing within {0:?}")]
    Timeout(Duration),
    /// The codec cannot take this picture format (it offered another).
    #[error("the codec cannot take {want:?}; it offers {got:?}")]
    Unsupported {
        /// What was asked for.
        want: PixFormat,
        /// What the driver would do instead.
        got: PixFormat,
    },
    /// The data does not fit the driver's buffers.
    #[error("{len} bytes do not fit a {capacity}-byte buffer")]
    TooLarge {
        /// Data length.
        len: usize,
        /// Buffer size.
        capacity: usize,
    },
}

/// The queue types of an M2M node: single-planar (vicodec by default) or multi-planar (the
/// Pi's bcm2835-codec, Rockchip's codecs); `None` for other nodes.
fn queue_types(dev: &V4l2Device) -> Option<(BufType, BufType)> {
    let caps = dev.querycap().ok()?.device_caps;
    if caps & (CAP_VIDEO_M2M | CAP_VIDEO_M2M_MPLANE) == 0 {
        return None;
    }
    Some((BufType::output_for(caps)?, BufType::capture_for(caps)?))
}

/// Finds the M2M node whose OUTPUT queue takes `input` and CAPTURE queue gives `output`.
pub fn find_node(input: FourCc, output: FourCc) -> Option<std::path::PathBuf> {
    let mut nodes: Vec<_> = std::fs::read_dir("/dev").ok()?.flatten().map(|e| e.path()).collect();
    nodes.sort();
    nodes.into_iter().find(|p| {
        p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("video"))
            && V4l2Device::open(p).is_ok_and(|d| {
                queue_types(&d).is_some_and(|(out, cap)| {
                    d.formats(out).is_ok_and(|f| f.iter().any(|f| f.fourcc == input))
                        && d.formats(cap).is_ok_and(|f| f.iter().any(|f| f.fourcc == output))
                })
            })
    })
}

fn not_m2m(path: &Path) -> M2mError {
    M2mError::V4l2(V4l2Error::Invalid(format!("{} is not a memory-to-memory codec node", path.display())))
}

/// One queue's mapped buffers and which of them the driver holds.
#[derive(Debug)]
struct Queue {
    kind: BufType,
    buffers: Vec<BufferPlanes>,
    free: Vec<u32>,
}

impl Queue {
    fn allocate(dev: &V4l2Device, kind: BufType) -> Result<Queue, V4l2Error> {
        let n = dev.request_buffers(kind, BUFFERS)?;
        let buffers = (0..n).map(|i| dev.map_buffer(kind, i)).collect::<Result<Vec<_>, _>>()?;
        Ok(Queue { kind, buffers, free: (0..n).collect() })
    }
}

/// A running stateful codec session.
#[derive(Debug)]
pub struct M2mCodec {
    dev: V4l2Device,
    /// Encoders: the raw format the OUTPUT queue takes (possibly padded).
    output_format: Option<PixFormat>,
    /// Decoders: the visible rectangle of the current stream.
    visible: Option<Rect>,
    capture_kind: BufType,
    output: Queue,
    capture: Option<Queue>,
    capture_format: Option<PixFormat>,
    /// Decoders: the raw format to ask for once the stream's size is known.
    want_raw: Option<FourCc>,
    timeout: Duration,
}

impl M2mCodec {
    /// An encoder session: `raw` frames of `width`x`height` in, `coded` out. `controls`
    /// (id, value) are set before streaming starts; ones the driver lacks are skipped (logged).
    pub fn encoder(
        path: &Path,
        raw: FourCc,
        coded: FourCc,
        width: u32,
        height: u32,
        controls: &[(u32, i32)],
    ) -> Result<M2mCodec, M2mError> {
        let dev = V4l2Device::open(path)?;
        for &(id, value) in controls {
            if let Err(e) = dev.set_control(id, value) {
                tracing::debug!(id = format!("{id:#x}"), value, error = %e, "M2M encoder control not applied");
            }
        }
        let (out_kind, cap_kind) = queue_types(&dev).ok_or_else(|| not_m2m(path))?;
        let got = dev.set_format(out_kind, &PixFormat::new(width, height, raw))?;
        // Drivers pad to whole macroblocks (1080 → 1088): fine, the caller lays the picture
        // out in the padded geometry and the crop below keeps the visible size. Anything
        // else (vicodec clamps to at least 640x360) is a different picture: refused.
        let padded = got.width >= width && got.height >= height && got.width - width < 32 && got.height - height < 32;
        if got.fourcc != raw || !padded {
            return Err(M2mError::Unsupported { want: PixFormat::new(width, height, raw), got });
        }
        if (got.width, got.height) != (width, height) {
            let visible = Rect { left: 0, top: 0, width, height };
            match dev.set_selection(out_kind, SEL_TGT_CROP, visible) {
                Ok(r) if r == visible => {}
                other => {
                    tracing::warn!(?other, "the encoder did not take the visible size; the stream carries the padding")
                }
            }
        }
        let cap = dev.set_format(cap_kind, &PixFormat::new(width, height, coded))?;
        let output = Queue::allocate(&dev, out_kind)?;
        let mut codec = M2mCodec {
            dev,
            output_format: Some(got),
            visible: None,
            capture_kind: cap_kind,
            output,
            capture: None,
            capture_format: Some(cap),
            want_raw: None,
            timeout: Duration::from_secs(5),
        };
        codec.start_capture()?;
        codec.dev.stream(codec.output.kind, true)?;
        Ok(codec)
    }

    /// A decoder session: `coded` data in; pictures come out as `raw` once the decoder has
    /// parsed the stream and announced its size with a source-change event.
    pub fn decoder(path: &Path, coded: FourCc, raw: FourCc, width: u32, height: u32) -> Result<M2mCodec, M2mError> {
        let dev = V4l2Device::open(path)?;
        let (out_kind, cap_kind) = queue_types(&dev).ok_or_else(|| not_m2m(path))?;
        dev.set_format(out_kind, &PixFormat::new(width, height, coded))?;
        dev.subscribe(EVENT_SOURCE_CHANGE, 0)?;
        let output = Queue::allocate(&dev, out_kind)?;
        dev.stream(out_kind, true)?;
        Ok(M2mCodec {
            dev,
            output_format: None,
            visible: None,
            capture_kind: cap_kind,
            output,
            capture: None,
            capture_format: None,
            want_raw: Some(raw),
            timeout: Duration::from_secs(5),
        })
    }

    /// Encoders: the raw layout each input must have (width, height padded to what the
    /// driver needs, bytes per line).
    pub fn output_format(&self) -> Option<PixFormat> {
        self.output_format
    }

    /// Decoders: the visible part of the decoded pictures (`None` if the driver cannot say),
    /// read once per source change.
    pub fn visible(&self) -> Option<Rect> {
        self.visible
    }

    /// The CAPTURE format in use (decoders: known after the first source change).
    pub fn capture_format(&self) -> Option<PixFormat> {
        self.capture_format
    }

    fn start_capture(&mut self) -> Result<(), V4l2Error> {
        let mut q = Queue::allocate(&self.dev, self.capture_kind)?;
        for i in q.free.drain(..) {
            self.dev.queue(self.capture_kind, i, &[])?;
        }
        self.capture = Some(q);
        self.dev.stream(self.capture_kind, true)
    }

    /// Decoders: (re)configure CAPTURE after a source change.
    fn on_source_change(&mut self) -> Result<(), V4l2Error> {
        if self.capture.take().is_some() {
            self.dev.stream(self.capture_kind, false)?;
            self.dev.request_buffers(self.capture_kind, 0)?;
        }
        let current = self.dev.format(self.capture_kind)?;
        // Keep the decoder's own choice when it already is the raw format we want.
        let fmt = match self.want_raw {
            Some(raw) if raw != current.fourcc => {
                self.dev.set_format(self.capture_kind, &PixFormat::new(current.width, current.height, raw))?
            }
            _ => current,
        };
        tracing::info!(width = fmt.width, height = fmt.height, format = %fmt.fourcc, "M2M decoder: source change");
        self.capture_format = Some(fmt);
        self.visible =
            self.dev.selection(self.capture_kind, SEL_TGT_COMPOSE).ok().filter(|r| r.width > 0 && r.height > 0);
        self.start_capture()
    }

    /// Sets a control mid-stream (e.g. an encoder's "force key frame" button).
    pub fn set_control(&self, id: u32, value: i32) -> Result<(), M2mError> {
        Ok(self.dev.set_control(id, value)?)
    }

    /// Feeds one unit (a raw frame or a coded frame) and returns the next result.
    pub fn process(&mut self, input: &[u8]) -> Result<Vec<u8>, M2mError> {
        self.send(input)?;
        self.receive()
    }

    /// Queues one unit without waiting for a result.
    pub fn send(&mut self, input: &[u8]) -> Result<(), M2mError> {
        let deadline = Instant::now() + self.timeout;
        // Reclaim OUTPUT buffers the driver has finished with.
        while let Dequeued::Buffer { index, .. } = self.dev.dequeue(self.output.kind)? {
            self.output.free.push(index);
        }
        let index = loop {
            if let Some(i) = self.output.free.pop() {
                break i;
            }
            if Instant::now() > deadline {
                return Err(M2mError::Timeout(self.timeout));
            }
            self.dev.wait(50)?;
            if let Dequeued::Buffer { index, .. } = self.dev.dequeue(self.output.kind)? {
                self.output.free.push(index);
            }
        };
        let buf = self.output.buffers[index as usize].first_mut();
        if input.len() > buf.len() {
            self.output.free.push(index);
            return Err(M2mError::TooLarge { len: input.len(), capacity: buf.len() });
        }
        buf.as_mut_slice()[..input.len()].copy_from_slice(input);
        let used =
            u32::try_from(input.len()).map_err(|_| M2mError::TooLarge { len: input.len(), capacity: buf.len() })?;
        self.dev.queue(self.output.kind, index, &[used])?;
        Ok(())
    }

    /// Waits for the next non-empty result (some encoders return stream headers in a buffer
    /// of their own: call again for the picture).
    pub fn receive(&mut self) -> Result<Vec<u8>, M2mError> {
        self.try_receive(self.timeout)?.ok_or(M2mError::Timeout(self.timeout))
    }

    /// Like [`M2mCodec::receive`], but `None` after `wait` (decoders may hold a picture
    /// back until more input arrives).
    pub fn try_receive(&mut self, wait: Duration) -> Result<Option<Vec<u8>>, M2mError> {
        let deadline = Instant::now() + wait;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Ok(None);
            }
            let (_, event) = self.dev.wait(i32::try_from(remaining.as_millis().min(100)).unwrap_or(100))?;
            if event {
                while let Some(ev) = self.dev.next_event()? {
                    if matches!(ev, Event::SourceChange { .. }) {
                        self.on_source_change()?;
                    }
                }
            }
            if let Ok(Dequeued::Buffer { index, .. }) = self.dev.dequeue(self.output.kind) {
                self.output.free.push(index);
            }
            let Some(cap) = self.capture.as_ref() else { continue };
            if let Dequeued::Buffer { index, payload, .. } = self.dev.dequeue(cap.kind)? {
                let data = cap.buffers.get(index as usize).map(|b| b.data(&payload).into_owned()).unwrap_or_default();
                self.dev.queue(cap.kind, index, &[])?;
                if !data.is_empty() {
                    return Ok(Some(data));
                }
            }
        }
    }
}

impl Drop for M2mCodec {
    fn drop(&mut self) {
        let _ = self.dev.stream(self.output.kind, false);
        let _ = self.dev.stream(self.capture_kind, false);
    }
}
