//! The pixel decoder of compressed capture (MJPEG, H.264): decodes only while something
//! needs pixels (a screenshot, calibration, an encoder transcoding for viewers), on its own
//! thread, and never falls behind: of JPEGs only the newest is decoded; of H.264 the access
//! units since the last IDR are kept while it is idle and caught up on when pixels are
//! wanted again. Viewers never wait for it: they get the capture as it arrived
//! ([`FrameHub::publish_encoded`]).

use std::sync::Arc;
use std::time::Duration;

use super::codec::{
    decode_mjpeg, find_hardware_decoder, find_stateless_h264, CodecChoice, DecoderError, HardwareDecoder,
    SoftwareH264Decoder, StatelessH264,
};
use super::frame::{PixelQueue, Shared};
use super::v4l2::FourCc;
use super::{Compression, EncodedFrame, Frame, FrameHub, PixelFormat, VideoError};
use crate::sync::LockPlain;

/// Runs the pixel decoder of one source; stops it (and waits for it) when dropped.
#[derive(Debug)]
pub struct PixelDecoder {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PixelDecoder {
    /// Starts decoding what `hub` is given through [`FrameHub::publish_encoded`], with the
    /// decoders `choice` allows.
    pub fn start(hub: Arc<FrameHub>, choice: CodecChoice) -> Result<PixelDecoder, VideoError> {
        let shared = hub.shared().clone();
        shared.pixels.lock_plain().closed = false;
        let thread = std::thread::Builder::new()
            .name("pixel-decoder".into())
            .spawn(move || run(&hub, choice))
            .map_err(VideoError::Spawn)?;
        Ok(PixelDecoder { shared, thread: Some(thread) })
    }
}

impl Drop for PixelDecoder {
    fn drop(&mut self) {
        self.shared.pixels.lock_plain().closed = true;
        self.shared.pixels_changed.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Work taken from the queue in one go.
enum Work {
    Jpeg(Arc<EncodedFrame>),
    H264(Vec<Arc<EncodedFrame>>),
}

/// Waits until there is something to decode and pixels are wanted; `None`: stop.
fn next_work(shared: &Shared, last_jpeg: u64) -> Option<Work> {
    let mut q = shared.pixels.lock_plain();
    loop {
        if q.closed {
            return None;
        }
        if q.demand_recent() {
            if let Some(work) = take(&mut q, last_jpeg) {
                return Some(work);
            }
        }
        // Demand expires by itself: wake then to stop caring (new data wakes us anyway).
        let wait = q.wanted_at.map_or(Duration::from_secs(1), |t| {
            super::frame::PIXEL_DEMAND_WINDOW.saturating_sub(t.elapsed()).max(Duration::from_millis(10))
        });
        q = match shared.pixels_changed.wait_timeout(q, wait) {
            Ok((guard, _)) => guard,
            // The queue is plain data; a panic elsewhere cannot leave it inconsistent.
            Err(poisoned) => poisoned.into_inner().0,
        };
    }
}

fn take(q: &mut PixelQueue, last_jpeg: u64) -> Option<Work> {
    if let Some(jpeg) = q.jpeg.as_ref().filter(|j| j.sequence != last_jpeg) {
        return Some(Work::Jpeg(jpeg.clone()));
    }
    if q.fed < q.gop.len() {
        let batch: Vec<_> = q.gop.iter().skip(q.fed).cloned().collect();
        q.fed = q.gop.len();
        return Some(Work::H264(batch));
    }
    None
}

fn run(hub: &FrameHub, choice: CodecChoice) {
    let shared = hub.shared().clone();
    let mut decoders: Option<(u32, Decoders)> = None;
    let mut last_jpeg = 0;
    while let Some(work) = next_work(&shared, last_jpeg) {
        let frames = match &work {
            Work::Jpeg(f) => {
                last_jpeg = f.sequence;
                std::slice::from_ref(f)
            }
            Work::H264(batch) => batch.as_slice(),
        };
        let Some(last) = frames.last() else { continue };
        // A new generation is a new stream: fresh decoders (H.264 starts at its IDR).
        if decoders.as_ref().is_none_or(|(g, _)| *g != last.generation) {
            decoders = Some((last.generation, Decoders::new(choice)));
        }
        let Some((_, d)) = decoders.as_mut() else { continue };
        let mut picture = None;
        for (k, f) in frames.iter().enumerate() {
            // Only the newest picture is converted; the ones before it only move the
            // decoder's references along.
            let want = k + 1 == frames.len();
            if let Some(rgb) = d.picture(f, want) {
                picture = Some((f, rgb));
            }
        }
        hub.set_decoder(d.name());
        if d.notes_changed {
            d.notes_changed = false;
            hub.set_decoder_notes(d.notes.clone());
        }
        let Some((f, rgb)) = picture else { continue };
        if f.generation != hub.current_generation() {
            continue; // the signal moved on while this was decoded
        }
        hub.publish_decoded(Arc::new(Frame {
            generation: f.generation,
            sequence: f.sequence,
            captured_at: f.captured_at,
            width: f.width,
            height: f.height,
            format: PixelFormat::Rgb24,
            data: Arc::from(rgb),
        }));
    }
}

/// A hardware decoder session: a stateful M2M decoder (MJPEG or H.264) or a stateless
/// request-API one (H.264).
enum Hardware {
    Stateful(Box<HardwareDecoder>),
    Stateless(Box<StatelessH264>),
}

/// Decoders for one stream, chosen by `decoder_backend`: with `auto` (or `hardware`) a
/// stateful M2M decoder when the board has one for the format, else (H.264) a stateless
/// request-API decoder, else software (not for `hardware`). A hardware decoder that fails
/// falls back to software unless hardware was demanded. Why each skipped path was skipped
/// is kept for `status` (`video.decoder_notes`).
struct Decoders {
    choice: CodecChoice,
    hardware: Option<Hardware>,
    /// No hardware decoder for this stream (none on the board, or it failed): decided
    /// once, so frames never rescan /dev.
    software_only: bool,
    h264: Option<SoftwareH264Decoder>,
    name: &'static str,
    notes: Vec<String>,
    notes_changed: bool,
}

impl Decoders {
    fn new(choice: CodecChoice) -> Decoders {
        let mut d = Decoders {
            choice,
            hardware: None,
            software_only: choice == CodecChoice::Software,
            h264: None,
            name: "none",
            notes: Vec::new(),
            notes_changed: false,
        };
        if choice == CodecChoice::Software {
            d.note("hardware decoders not tried: decoder_backend = \"software\"".into());
        }
        d
    }

    fn name(&self) -> &'static str {
        self.name
    }

    fn note(&mut self, why: String) {
        tracing::info!("{why}");
        self.notes.push(why);
        self.notes_changed = true;
    }

    /// Decodes one picture; RGB24 of the capture's size when `want` (and it decoded),
    /// `None` otherwise.
    fn picture(&mut self, f: &EncodedFrame, want: bool) -> Option<Vec<u8>> {
        if let Some(result) = self.hardware(f, want) {
            self.name = match self.hardware {
                Some(Hardware::Stateless(_)) => "v4l2-request",
                _ => "v4l2-m2m",
            };
            return result.filter(|_| want);
        }
        self.name = "software";
        self.software(f, want)
    }

    /// Finds the hardware decoder for `f`'s format: stateful first, then stateless (H.264).
    fn open_hardware(&mut self, f: &EncodedFrame) -> Result<Option<Hardware>, DecoderError> {
        let fourcc = match f.compression {
            Compression::H264 => FourCc::H264,
            Compression::Mjpeg => FourCc::MJPEG,
        };
        if let Some(node) = find_hardware_decoder(fourcc) {
            let d = HardwareDecoder::new(&node, fourcc, f.width, f.height)?;
            tracing::info!(node = %node.display(), format = %fourcc, "decoding capture in hardware (stateful M2M)");
            return Ok(Some(Hardware::Stateful(Box::new(d))));
        }
        self.note(format!("stateful M2M decoder: none takes {fourcc}"));
        if f.compression != Compression::H264 {
            self.note(format!("stateless decoder: not used for {fourcc} (H.264 only)"));
            return Ok(None);
        }
        let Some(node) = find_stateless_h264() else {
            self.note("stateless decoder: no request-API node takes H.264 slices (S264)".into());
            return Ok(None);
        };
        let d = StatelessH264::new(&node, None)?;
        tracing::info!(node = %node.display(), decoder = %d.describe(), "decoding capture in hardware (stateless)");
        Ok(Some(Hardware::Stateless(Box::new(d))))
    }

    /// Decodes with the hardware decoder; `None` when there is none for this format (or it
    /// failed and software may take over), `Some(None)` for "no picture from this frame".
    fn hardware(&mut self, f: &EncodedFrame, want: bool) -> Option<Option<Vec<u8>>> {
        if self.software_only {
            return None;
        }
        if self.hardware.is_none() {
            match self.open_hardware(f) {
                Ok(Some(h)) => self.hardware = Some(h),
                Ok(None) => {
                    self.software_only = true;
                    return None;
                }
                Err(e) => return self.hardware_failed(e),
            }
        }
        let result = match self.hardware.as_mut()? {
            Hardware::Stateful(d) => d.decode(&f.data, (f.width, f.height)),
            // The stateless decoder converts only what is wanted; its references move on
            // either way.
            Hardware::Stateless(d) => d.decode(&f.data, want),
        };
        match result {
            Ok(Some((w, h, rgb))) if (w, h) == (f.width, f.height) => Some(Some(rgb)),
            Ok(Some((w, h, _))) => {
                tracing::warn!(got = ?(w, h), want = ?(f.width, f.height), "decoded picture of the wrong size");
                Some(None)
            }
            Ok(None) => Some(None),
            Err(e) => self.hardware_failed(e),
        }
    }

    fn hardware_failed(&mut self, e: DecoderError) -> Option<Option<Vec<u8>>> {
        self.hardware = None;
        if self.choice == CodecChoice::Hardware {
            tracing::warn!(error = %e, "hardware decoder failed; dropping the frame (decoder_backend = \"hardware\")");
            return Some(None);
        }
        self.note(format!("hardware decoder failed ({e}); decoding in software from now on"));
        self.software_only = true;
        None
    }

    fn software(&mut self, f: &EncodedFrame, want: bool) -> Option<Vec<u8>> {
        match f.compression {
            Compression::H264 => {
                if self.h264.is_none() {
                    self.h264 =
                        SoftwareH264Decoder::new().map_err(|e| tracing::warn!(error = %e, "no H.264 decoder")).ok();
                }
                match self.h264.as_mut()?.decode_to(&f.data, want) {
                    Ok(Some((dw, dh, rgb))) if (dw, dh) == (f.width, f.height) => Some(rgb),
                    Ok(_) => None, // not wanted, waiting for an IDR, or a size the format did not announce
                    Err(e) => {
                        tracing::warn!(error = %e, "dropping an undecodable H.264 access unit");
                        None
                    }
                }
            }
            Compression::Mjpeg if !want => None,
            Compression::Mjpeg => match decode_mjpeg(&f.data, (f.width, f.height)) {
                Ok(rgb) => Some(rgb),
                Err(e) => {
                    tracing::warn!(error = %e, "dropping an undecodable MJPEG frame");
                    None
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::device::video::codec::{EncoderSettings, SoftwareH264};
    use crate::device::video::{FrameReader, Signal, VideoState};

    /// The low byte of `v`: a ramp that wraps.
    fn ramp(v: u32) -> u8 {
        v.to_le_bytes()[0]
    }

    fn gradient(w: u32, h: u32, shift: u32) -> Frame {
        let data: Vec<u8> =
            (0..h).flat_map(|y| (0..w).flat_map(move |x| [ramp(x * 4 + shift), ramp(y * 4), 128])).collect();
        Frame::rgb(1, 1, w, h, data)
    }

    /// A 64x48 picture of generation 1 as a capture device would publish it.
    fn encoded(sequence: u64, compression: Compression, keyframe: bool, data: Arc<[u8]>) -> EncodedFrame {
        let (width, height, captured_at) = (64, 48, Instant::now());
        EncodedFrame { generation: 1, sequence, captured_at, width, height, compression, keyframe, data }
    }

    /// A hub locked on a 64x48 `compression` stream, and its running pixel decoder.
    fn locked_hub(compression: Compression) -> (Arc<FrameHub>, FrameReader, PixelDecoder) {
        let (hub, reader) = FrameHub::new();
        let hub = Arc::new(hub);
        hub.set_compression(Some(compression));
        hub.set_state(VideoState { signal: Signal::Locked, source_size: Some((64, 48)), generation: 1 });
        let decoder = PixelDecoder::start(hub.clone(), CodecChoice::Software).unwrap();
        (hub, reader, decoder)
    }

    /// Asks for pixels and waits for the picture captured when it asked.
    async fn present(reader: &mut FrameReader) -> Arc<Frame> {
        let floor = reader.want_pixels();
        while reader.latest().is_none_or(|f| f.sequence < floor) {
            tokio::time::timeout(Duration::from_secs(10), reader.changed()).await.unwrap();
        }
        reader.latest().unwrap()
    }

    #[tokio::test]
    async fn decodes_only_when_pixels_are_wanted_and_catches_up_in_order() {
        let (hub, mut reader, decoder) = locked_hub(Compression::H264);
        let mut enc = SoftwareH264::new(64, 48, EncoderSettings::default()).unwrap();
        for seq in 1..=10u64 {
            let au = enc.encode(&gradient(64, 48, u32::try_from(seq).unwrap() * 8)).unwrap().unwrap();
            hub.publish_encoded(encoded(seq, Compression::H264, au.keyframe, au.data));
        }
        // Nobody asked: nothing decoded, everything since the IDR kept.
        assert!(reader.latest().is_none());
        assert_eq!(hub.shared().pixels.lock_plain().gop.len(), 10);
        assert_eq!(reader.newest_captured().map(|c| c.sequence), Some(10));
        assert_eq!(reader.want_pixels(), 10, "the newest captured is the one to wait for");
        let f = present(&mut reader).await;
        assert_eq!((f.sequence, f.width, f.height), (10, 64, 48), "the newest, after all ten in order");
        // The tenth picture, not the first: compare against the source's red ramp.
        let mut px = [0u8; 3];
        assert!(f.row_rgb(24, 8, 9, &mut px));
        assert!(px[0].abs_diff(ramp(8 * 4 + 80)) < 24, "{px:?}");
        assert_eq!(hub.current_generation(), 1);
        drop(decoder);
    }

    #[tokio::test]
    async fn jpegs_decode_latest_only() {
        let (hub, mut reader, _decoder) = locked_hub(Compression::Mjpeg);
        let jpeg: Arc<[u8]> = Arc::from(&include_bytes!("../../../../tests/fixtures/testsrc-64x48.jpg")[..]);
        for seq in 1..=5u64 {
            hub.publish_encoded(encoded(seq, Compression::Mjpeg, true, jpeg.clone()));
        }
        assert!(reader.latest().is_none(), "not decoded before anyone asks");
        assert_eq!(present(&mut reader).await.sequence, 5);
        assert_eq!(reader.decoder(), "software");
    }

    #[test]
    fn an_idle_decoder_keeps_a_bounded_gop_and_asks_for_an_idr() {
        let (hub, _reader) = FrameHub::new();
        let f = |seq: u64, keyframe: bool| encoded(seq, Compression::H264, keyframe, Arc::from(vec![0u8; 8]));
        hub.publish_encoded(f(1, false));
        assert!(hub.shared().pixels.lock_plain().gop.is_empty(), "no IDR yet: nothing decodable to keep");
        hub.publish_encoded(f(2, true));
        for seq in 3..(3 + super::super::frame::PENDING_AUS as u64) {
            hub.publish_encoded(f(seq, false));
        }
        let q = hub.shared().pixels.lock_plain();
        assert!(q.gop.is_empty() && q.want_keyframe, "overflow: wait for the next IDR");
        drop(q);
        hub.publish_encoded(f(999, false));
        let q = hub.shared().pixels.lock_plain();
        assert!(q.gop.is_empty(), "deltas after an overflow are dropped until an IDR");
        drop(q);
        assert!(hub.take_keyframe_request());
        assert!(!hub.take_keyframe_request(), "asked once");
        hub.publish_encoded(f(1000, true));
        assert_eq!(hub.shared().pixels.lock_plain().gop.len(), 1);
    }
}
