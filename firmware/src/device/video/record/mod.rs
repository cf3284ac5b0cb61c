//! Recording the capture to an MP4 file, on a thread of its own.
//!
//! H.264 capture is stored as it arrives (passthrough: no decoding, no encoding). Raw and
//! MJPEG capture is scaled down and encoded to a small H.264 (by default 1280 pixels on
//! the long edge at 10 pictures a second) for the recording only; viewers are untouched.
//!
//! MP4 keeps durations, not times: each picture lasts until the next one was captured, and
//! the last one until the moment the recording is stopped, so the file lasts exactly as
//! long as what it recorded, still screens included. A recording that reaches its size
//! cap ends there, as a whole file, and says so ([`RecordOutcome::Cut`]); one that fails
//! leaves no file ([`RecordOutcome::Failed`]).

pub mod avcc;
pub mod mp4;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shiguredo_mp4::boxes::SampleEntry;
use tokio::sync::oneshot;

use self::avcc::{sample_entry, to_avcc, AvccSample};
use self::mp4::{Mp4Writer, TIMESCALE};
use super::codec::{decode_mjpeg, EncoderSettings};
use super::encode::{EncoderKind, Session};
use super::image::{crop_scale, fit};
use super::{Compression, EncodedFrame, Frame, FrameReader, TapMessage, TapReceiver, VideoError};
use crate::device::geometry::PixelRect;

/// Pictures of compressed capture queued for the recorder before it loses some (two
/// seconds at 30 fps: a slow disk write does not cost a restart at the next keyframe).
const TAP_CAPACITY: usize = 60;

/// Errors writing a recording.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The file could not be written.
    #[error("write the recording: {0}")]
    Io(#[source] std::io::Error),
    /// The muxer refused a sample or the index.
    #[error("MP4: {0}")]
    Mux(String),
    /// The capture's H.264 cannot be stored as it is.
    #[error("the capture's H.264: {0}")]
    Stream(String),
    /// No picture was recorded.
    #[error("no picture was captured while recording")]
    Empty,
}

/// How a recording is made and bounded (config `[recording]`, with the daemon's caps).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecordSettings {
    /// The file is cut (ended cleanly) before it grows past this many bytes.
    pub max_bytes: u64,
    /// Pictures a second when encoding (raw or MJPEG capture).
    pub fps: f32,
    /// Longest edge in pixels when encoding.
    pub max_edge: u32,
    /// Bitrate when encoding.
    pub bitrate_bps: u32,
    /// When encoding: the part of the capture to record (the phone's picture in the
    /// frame), when it lies inside it; the whole frame otherwise.
    pub region: Option<PixelRect>,
}

impl Default for RecordSettings {
    fn default() -> Self {
        RecordSettings { max_bytes: 256 << 20, fps: 10.0, max_edge: 1280, bitrate_bps: 1_000_000, region: None }
    }
}

/// How the pictures got into the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordSource {
    /// The capture's own H.264, unchanged.
    Passthrough,
    /// Raw or MJPEG capture encoded for the recording.
    Encoded,
}

impl RecordSource {
    /// The name the journal uses.
    pub fn name(self) -> &'static str {
        match self {
            RecordSource::Passthrough => "passthrough",
            RecordSource::Encoded => "encoded",
        }
    }
}

/// How a recording ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordOutcome {
    /// Whole, to the moment it was stopped.
    Complete,
    /// Whole up to the reason's moment (the size cap, the video format changed).
    Cut(String),
    /// No usable file (and none left behind).
    Failed(String),
}

/// What a finished recording is.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordSummary {
    /// How it ended.
    pub outcome: RecordOutcome,
    /// The file's size (0 when failed).
    pub bytes: u64,
    /// How long it plays.
    pub duration: Duration,
    /// Its picture size, once one was recorded.
    pub size: Option<(u32, u32)>,
    /// How the pictures got there.
    pub source: RecordSource,
}

/// A recording in progress. [`Recorder::finish`] ends it; dropping it also ends it (the
/// file is finished at the moment of the drop), without waiting.
#[derive(Debug)]
pub struct Recorder {
    stop: std::sync::mpsc::SyncSender<TapMessage>,
    done: Option<oneshot::Receiver<RecordSummary>>,
    progress: Arc<Progress>,
}

/// What the recorder thread has done so far.
#[derive(Debug, Default)]
struct Progress {
    /// Bytes in the file.
    written: AtomicU64,
    /// Pictures taken into the recording (the newest waits for its duration).
    pictures: AtomicU64,
    /// The thread is done (stopped, cut or failed): its summary is waiting.
    ended: std::sync::atomic::AtomicBool,
}

impl Recorder {
    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.progress.written.load(Ordering::Relaxed)
    }

    /// Pictures taken so far.
    pub fn pictures(&self) -> u64 {
        self.progress.pictures.load(Ordering::Relaxed)
    }

    /// Whether the recording ended on its own (cut at its cap, or failed) before being
    /// stopped: [`Recorder::finish`] then only collects how.
    pub fn ended(&self) -> bool {
        self.progress.ended.load(Ordering::Acquire)
    }

    /// Ends the recording as of `at` and waits for the file to be finished.
    pub async fn finish(mut self, at: Instant) -> RecordSummary {
        let stop = self.stop.clone();
        // The thread may have ended already (a cut, a failure): its summary is waiting.
        let _ = tokio::task::spawn_blocking(move || stop.send(TapMessage::Stop(at))).await;
        let lost = RecordSummary {
            outcome: RecordOutcome::Failed("the recorder stopped unexpectedly".into()),
            bytes: 0,
            duration: Duration::ZERO,
            size: None,
            source: RecordSource::Encoded,
        };
        match self.done.take() {
            Some(done) => done.await.unwrap_or(lost),
            None => lost,
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if self.done.is_some() {
            let _ = self.stop.try_send(TapMessage::Stop(Instant::now()));
        }
    }
}

/// Starts recording `frames` into `path` (an `.mp4`; written as `.mp4.part` until it is
/// finished). `encoder` encodes raw and MJPEG capture (a hardware encoder that refuses
/// the stream falls back to software).
pub fn start(
    frames: FrameReader,
    path: PathBuf,
    settings: RecordSettings,
    encoder: EncoderKind,
) -> Result<Recorder, VideoError> {
    let tap = frames.encoded_tap(TAP_CAPACITY);
    let stop = tap.stopper();
    let progress = Arc::new(Progress::default());
    let (done_tx, done) = oneshot::channel();
    let job = Job { frames, tap, path, settings, encoder, progress: progress.clone() };
    std::thread::Builder::new()
        .name("recorder".into())
        .spawn(move || {
            let progress = job.progress.clone();
            let summary = job.run();
            progress.ended.store(true, Ordering::Release);
            let _ = done_tx.send(summary);
        })
        .map_err(VideoError::Spawn)?;
    Ok(Recorder { stop, done: Some(done), progress })
}

/// A picture encoded and waiting for its duration (known when the next one comes).
struct Pending {
    sample: AvccSample,
    entry: Option<SampleEntry>,
    at: Instant,
}

/// The recorder thread's state.
struct Job {
    frames: FrameReader,
    tap: TapReceiver,
    path: PathBuf,
    settings: RecordSettings,
    encoder: EncoderKind,
    progress: Arc<Progress>,
}

/// Where the pictures come from, decided at the first one.
enum Feed {
    /// H.264 capture: the parameter sets in use (to notice a change).
    Passthrough { params: Option<(Vec<u8>, Vec<u8>)>, generation: u32, want_idr: bool },
    /// Raw or MJPEG capture: the encoder, its output size, the last picture encoded.
    Encode { session: Option<Session>, size: Option<(u32, u32)>, last: Option<(u32, u64)> },
}

struct Output {
    writer: Mp4Writer,
    pending: Option<Pending>,
    size: Option<(u32, u32)>,
    cut: Option<String>,
}

impl Job {
    fn run(self) -> RecordSummary {
        let mut source = RecordSource::Encoded;
        let summary = |outcome, bytes, duration, size, source| RecordSummary { outcome, bytes, duration, size, source };
        let writer = match Mp4Writer::create(&self.path) {
            Ok(w) => w,
            Err(e) => {
                return summary(RecordOutcome::Failed(e.to_string()), 0, Duration::ZERO, None, source);
            }
        };
        let mut out = Output { writer, pending: None, size: None, cut: None };
        let interval = Duration::from_secs_f32(1.0 / self.settings.fps.clamp(0.5, 60.0));
        let mut feed: Option<Feed> = None;
        let mut newest_jpeg: Option<Arc<EncodedFrame>> = None;
        let mut next_tick = Instant::now();
        let mut failure = None;
        let ended = loop {
            let wait = next_tick.saturating_duration_since(Instant::now());
            let message = self.tap.recv_timeout(wait);
            let feed = feed.get_or_insert_with(|| match self.frames.compression() {
                Some(Compression::H264) => {
                    source = RecordSource::Passthrough;
                    Feed::Passthrough { params: None, generation: 0, want_idr: true }
                }
                _ => Feed::Encode { session: None, size: None, last: None },
            });
            let step = match message {
                Some(TapMessage::Stop(at)) => break at,
                Some(TapMessage::Frame(frame)) => match feed {
                    Feed::Passthrough { .. } => self.passthrough(feed, &frame, &mut out),
                    Feed::Encode { .. } => {
                        if frame.compression == Compression::Mjpeg {
                            newest_jpeg = Some(frame);
                        }
                        Ok(())
                    }
                },
                None => {
                    next_tick += interval;
                    if next_tick < Instant::now() {
                        next_tick = Instant::now() + interval; // a slow encode: no catching up
                    }
                    match feed {
                        Feed::Encode { .. } => self.encode_tick(feed, newest_jpeg.take(), &mut out),
                        Feed::Passthrough { .. } => Ok(()),
                    }
                }
            };
            if let Err(e) = step {
                failure = Some(e);
                break Instant::now();
            }
            if out.cut.is_some() {
                break Instant::now();
            }
        };
        let Output { mut writer, pending, size, cut } = out;
        if let Some(e) = failure {
            writer.abandon();
            return summary(RecordOutcome::Failed(e.to_string()), 0, Duration::ZERO, size, source);
        }
        if let Some(p) = pending {
            // The last picture lasts until the end (a cut: until the picture that did not fit).
            let duration = ticks(ended.saturating_duration_since(p.at)).max(1);
            if let Err(e) = writer.write(&p.sample.data, p.sample.idr, duration, p.entry) {
                writer.abandon();
                return summary(RecordOutcome::Failed(e.to_string()), 0, Duration::ZERO, size, source);
            }
        }
        let duration = writer.duration();
        match writer.finish() {
            Ok(bytes) => {
                self.progress.written.store(bytes, Ordering::Relaxed);
                let outcome = cut.map_or(RecordOutcome::Complete, RecordOutcome::Cut);
                summary(outcome, bytes, duration, size, source)
            }
            Err(e) => summary(RecordOutcome::Failed(e.to_string()), 0, Duration::ZERO, size, source),
        }
    }

    /// One picture of H.264 capture, stored as it is from its stream's first IDR on.
    fn passthrough(&self, feed: &mut Feed, frame: &EncodedFrame, out: &mut Output) -> Result<(), RecordError> {
        let Feed::Passthrough { params, generation, want_idr } = feed else { return Ok(()) };
        if frame.compression != Compression::H264 {
            out.cut = Some("the capture stopped sending H.264".into());
            return Ok(());
        }
        if self.tap.lost() {
            *want_idr = true; // pictures were dropped: the next ones refer to them
        }
        if params.is_some() && frame.generation != *generation {
            out.cut = Some("the video format changed".into());
            return Ok(());
        }
        let sample = to_avcc(&frame.data);
        if *want_idr && !sample.idr {
            self.frames.request_keyframe();
            return Ok(());
        }
        *want_idr = false;
        let entry = match (&sample.sps, &sample.pps) {
            (Some(sps), Some(pps)) if params.as_ref().is_none_or(|(s, p)| s != sps || p != pps) => {
                let width = u16::try_from(frame.width).map_err(|_| RecordError::Stream("picture too wide".into()))?;
                let height = u16::try_from(frame.height).map_err(|_| RecordError::Stream("picture too tall".into()))?;
                let entry = sample_entry(sps, pps, width, height)?;
                *params = Some((sps.clone(), pps.clone()));
                Some(entry)
            }
            _ if params.is_none() => return Err(RecordError::Stream("an IDR without SPS and PPS".into())),
            _ => None,
        };
        *generation = frame.generation;
        out.size = Some((frame.width, frame.height));
        self.push(out, Pending { sample, entry, at: frame.captured_at })
    }

    /// One tick of raw or MJPEG capture: the newest picture, if new, scaled and encoded.
    fn encode_tick(
        &self,
        feed: &mut Feed,
        jpeg: Option<Arc<EncodedFrame>>,
        out: &mut Output,
    ) -> Result<(), RecordError> {
        let Feed::Encode { session, size, last } = feed else { return Ok(()) };
        let frame = match jpeg {
            Some(jpeg) => {
                let Ok(rgb) = decode_mjpeg(&jpeg.data, (jpeg.width, jpeg.height)) else {
                    return Ok(()); // a broken picture from the dongle: the previous one lasts
                };
                let mut frame = Frame::rgb(jpeg.generation, jpeg.sequence, jpeg.width, jpeg.height, rgb);
                frame.captured_at = jpeg.captured_at;
                Arc::new(frame)
            }
            None if self.frames.compression().is_none() => match self.frames.latest() {
                Some(frame) => frame,
                None => return Ok(()),
            },
            None => return Ok(()),
        };
        if *last == Some((frame.generation, frame.sequence)) {
            return Ok(()); // nothing new: the previous picture lasts longer
        }
        *last = Some((frame.generation, frame.sequence));
        // The phone's picture only (a portrait phone is a quarter of a 16:9 frame: a
        // quarter of the scaling and encoding), while it lies inside this frame.
        let full = PixelRect { x: 0, y: 0, width: frame.width, height: frame.height };
        let region =
            self.settings.region.filter(|r| r.width >= 2 && r.height >= 2 && full.contains_rect(r)).unwrap_or(full);
        let (w, h) = *size.get_or_insert_with(|| {
            let (w, h) = fit(region.width, region.height, self.settings.max_edge);
            ((w & !1).max(2), (h & !1).max(2))
        });
        let Ok(rgb) = crop_scale(&frame, region, (w, h)) else { return Ok(()) };
        let mut scaled = Frame::rgb(frame.generation, frame.sequence, w, h, rgb);
        scaled.captured_at = frame.captured_at;
        if session.is_none() {
            let settings =
                EncoderSettings { bitrate_bps: self.settings.bitrate_bps, fps: self.settings.fps, idr_interval_s: 2 };
            let opened = Session::open(&self.encoder, w, h, settings).or_else(|e| match self.encoder {
                EncoderKind::Hardware(_) => {
                    tracing::warn!(error = %e, "hardware encoder refused the recording; using software");
                    Session::open(&EncoderKind::Software, w, h, settings)
                }
                EncoderKind::Software => Err(e),
            });
            *session = Some(opened.map_err(|e| RecordError::Stream(format!("cannot encode: {e}")))?);
        }
        let Some(encoder) = session.as_mut() else { return Ok(()) };
        let unit = encoder.encode(&scaled).map_err(|e| RecordError::Stream(format!("encode: {e}")))?;
        let Some(unit) = unit else { return Ok(()) };
        let sample = to_avcc(&unit.data);
        let entry = match (&sample.sps, &sample.pps, out.pending.is_none() && out.writer.samples() == 0) {
            (Some(sps), Some(pps), true) => {
                // Output sizes are at most `max_edge`, far below u16's range.
                let (w16, h16) = (u16::try_from(w).unwrap_or(u16::MAX), u16::try_from(h).unwrap_or(u16::MAX));
                Some(sample_entry(sps, pps, w16, h16)?)
            }
            (_, _, true) => return Ok(()), // the first sample must carry the parameter sets
            _ => None,
        };
        out.size = Some((w, h));
        self.push(out, Pending { sample, entry, at: scaled.captured_at })
    }

    /// Writes the waiting picture (now that its duration is known) and keeps `next`
    /// waiting; ends the file instead when `next` would not fit under the cap.
    fn push(&self, out: &mut Output, next: Pending) -> Result<(), RecordError> {
        if let Some(prev) = out.pending.take() {
            let duration = ticks(next.at.saturating_duration_since(prev.at)).max(1);
            out.writer.write(&prev.sample.data, prev.sample.idr, duration, prev.entry)?;
            self.progress.written.store(out.writer.written(), Ordering::Relaxed);
        }
        if out.writer.size_with(next.sample.data.len()) > self.settings.max_bytes {
            out.cut = Some(format!(
                "reached its size cap of {} after {} s",
                mebibytes(self.settings.max_bytes),
                out.writer.duration().as_secs()
            ));
            // `next` is not written: the file ends where it would have started.
            return Ok(());
        }
        out.pending = Some(next);
        self.progress.pictures.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// A byte count for people: "256 MiB", "150 KiB".
fn mebibytes(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
    } else {
        format!("{} KiB", bytes.div_ceil(1024))
    }
}

/// `d` in [`TIMESCALE`] ticks, saturated.
fn ticks(d: Duration) -> u32 {
    u32::try_from(d.as_micros() * u128::from(TIMESCALE) / 1_000_000).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use shiguredo_mp4::demux::{Input, Mp4FileDemuxer};

    use super::*;
    use crate::device::video::codec::SoftwareH264;
    use crate::device::video::{FrameHub, PixelFormat};

    /// (keyframe, duration in ticks, bytes) of every sample in the file.
    fn samples(path: &std::path::Path) -> Vec<(bool, u32, usize)> {
        let bytes = std::fs::read(path).expect("read");
        let mut demuxer = Mp4FileDemuxer::new();
        while let Some(required) = demuxer.required_input() {
            let start = usize::try_from(required.position).expect("position");
            demuxer.handle_input(Input { position: required.position, data: &bytes[start.min(bytes.len())..] });
        }
        let mut out = Vec::new();
        while let Some(s) = demuxer.next_sample().expect("sample") {
            out.push((s.keyframe, s.duration, s.data_size));
        }
        out
    }

    fn nv12(seq: u64, at: Instant, w: u32, h: u32) -> Arc<Frame> {
        let len = PixelFormat::Nv12.frame_len(w, h).expect("size");
        // A gradient that moves with `seq`: every picture differs, and compresses as screens do.
        let data: Vec<u8> =
            (0..len).map(|i| u8::try_from((i as u64 % u64::from(w) + seq * 5) % 200 + 16).expect("< 216")).collect();
        Arc::new(Frame {
            generation: 1,
            sequence: seq,
            captured_at: at,
            width: w,
            height: h,
            format: PixelFormat::Nv12,
            data: Arc::from(data),
        })
    }

    /// Waits (bounded) until the recorder took `n` pictures.
    fn wait_pictures(recorder: &Recorder, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while recorder.pictures() < n {
            assert!(Instant::now() < deadline, "the recorder took {} of {n} pictures", recorder.pictures());
            std::thread::yield_now();
        }
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
    }

    #[test]
    fn raw_capture_is_scaled_encoded_and_lasts_as_long_as_the_recording() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("raw.mp4");
        let (hub, frames) = FrameHub::new();
        let settings = RecordSettings { max_edge: 160, ..RecordSettings::default() };
        let recorder = start(frames, path.clone(), settings, EncoderKind::Software).expect("start");
        let base = Instant::now();
        for i in 0..5u64 {
            hub.publish(nv12(i + 1, base + Duration::from_millis(100 * i), 320, 180));
            wait_pictures(&recorder, i + 1);
        }
        let summary = runtime().block_on(recorder.finish(base + Duration::from_millis(1_000)));
        assert_eq!(summary.outcome, RecordOutcome::Complete);
        assert_eq!(summary.source, RecordSource::Encoded);
        assert_eq!(summary.size, Some((160, 90)));
        assert_eq!(summary.duration, Duration::from_secs(1));
        let read = samples(&path);
        assert_eq!(read.iter().map(|s| s.1).collect::<Vec<_>>(), vec![9_000, 9_000, 9_000, 9_000, 54_000]);
        assert!(read[0].0, "the file starts at a keyframe");
        assert_eq!(std::fs::metadata(&path).expect("file").len(), summary.bytes);
    }

    #[test]
    fn h264_capture_is_stored_as_it_came_from_its_first_idr() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pass.mp4");
        let (hub, frames) = FrameHub::new();
        hub.set_compression(Some(Compression::H264));
        let recorder = start(frames, path.clone(), RecordSettings::default(), EncoderKind::Software).expect("start");
        let settings = EncoderSettings { bitrate_bps: 300_000, fps: 10.0, idr_interval_s: 1 };
        let mut enc = SoftwareH264::new(96, 64, settings).expect("encoder");
        let base = Instant::now();
        let mut units = Vec::new();
        for i in 0..12u64 {
            let frame = Frame::rgb(1, i, 96, 64, vec![u8::try_from(i * 20).expect("small"); 96 * 64 * 3]);
            units.push(enc.encode(&frame).expect("encode").expect("unit"));
        }
        // The recording starts at an IDR: a P picture first is skipped.
        let first_idr = units.iter().position(|u| u.keyframe).expect("an IDR");
        let p = units.iter().position(|u| !u.keyframe).expect("a P picture");
        let mut order = vec![p];
        order.extend(first_idr..units.len());
        for (k, &i) in order.iter().enumerate() {
            let unit = &units[i];
            hub.publish_encoded(EncodedFrame {
                generation: 1,
                sequence: k as u64 + 1,
                captured_at: base + Duration::from_millis(50 * k as u64),
                width: 96,
                height: 64,
                compression: Compression::H264,
                keyframe: unit.keyframe,
                data: unit.data.clone(),
            });
        }
        wait_pictures(&recorder, (order.len() - 1) as u64);
        let end = base + Duration::from_millis(50 * order.len() as u64);
        let summary = runtime().block_on(recorder.finish(end));
        assert_eq!(summary.outcome, RecordOutcome::Complete);
        assert_eq!(summary.source, RecordSource::Passthrough);
        let read = samples(&path);
        assert_eq!(read.len(), units.len() - first_idr);
        assert_eq!(read[0].2, to_avcc(&units[first_idr].data).data.len(), "the first sample is the IDR, unchanged");
        assert!(read.iter().all(|s| s.1 == 4_500), "50 ms each: {read:?}");
    }

    #[test]
    fn a_recording_at_its_cap_ends_cleanly_and_says_so() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cap.mp4");
        let (hub, frames) = FrameHub::new();
        let settings = RecordSettings { max_edge: 320, max_bytes: 12 << 10, ..RecordSettings::default() };
        let recorder = start(frames, path.clone(), settings, EncoderKind::Software).expect("start");
        let base = Instant::now();
        let mut i = 0;
        while recorder.pictures() == i && i < 200 {
            i += 1;
            hub.publish(nv12(i, base + Duration::from_millis(100 * i), 320, 180));
            let deadline = Instant::now() + Duration::from_secs(30);
            // Either the picture was taken or the file was cut before it.
            while recorder.pictures() < i && recorder.done.as_ref().is_some_and(|d| d.is_empty()) {
                assert!(Instant::now() < deadline, "the recorder is stuck");
                std::thread::yield_now();
            }
        }
        let summary = runtime().block_on(recorder.finish(base + Duration::from_secs(60)));
        let RecordOutcome::Cut(reason) = &summary.outcome else { panic!("not cut: {summary:?}") };
        assert!(reason.contains("12 KiB"), "{reason}");
        assert!(summary.bytes <= 12 << 10, "{} bytes", summary.bytes);
        let read = samples(&path);
        assert!(read.len() >= 2, "{read:?}");
        let total: u64 = read.iter().map(|s| u64::from(s.1)).sum();
        assert_eq!(Duration::from_micros(total * 1_000_000 / 90_000), summary.duration);
    }

    #[test]
    fn a_recording_that_got_no_picture_fails_and_leaves_no_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("none.mp4");
        let (_hub, frames) = FrameHub::new();
        let recorder = start(frames, path.clone(), RecordSettings::default(), EncoderKind::Software).expect("start");
        let summary = runtime().block_on(recorder.finish(Instant::now()));
        assert_eq!(summary.outcome, RecordOutcome::Failed(RecordError::Empty.to_string()));
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
    }

    #[test]
    fn byte_counts_read_as_people_write_them() {
        assert_eq!(mebibytes(256 << 20), "256 MiB");
        assert_eq!(mebibytes(3 << 19), "1.5 MiB");
        assert_eq!(mebibytes(150 << 10), "150 KiB");
    }
}
