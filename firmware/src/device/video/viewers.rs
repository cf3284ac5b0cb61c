//! Encoded video to viewers: a bounded tap plus one bounded, acknowledged queue per viewer
//! (reference 000: 60 frames / 8 MiB tap; 8 frames / 1 MiB unacknowledged per viewer;
//! overflow drops dependent pictures until the next IDR; keyframe requests ≤ 1/s).
//!
//! Each picture becomes one immutable CDV1 message when it is published, and every viewer
//! is handed the same bytes (no per-viewer copy). The encoder publishes; transports (the
//! `/api/video` WebSocket) take from their viewer's queue and acknowledge. Nothing here
//! ever blocks the encoder.
//!
//! CDV1 (`h264-annexb/1`), big-endian:
//!
//! | offset | type | value |
//! |---|---|---|
//! | 0 | u32 | `0x43445631` (`CDV1`) |
//! | 4 | u32 | video generation (a new one needs a new `video_open`) |
//! | 8 | u32 | sequence, one per published picture (a gap: pictures were skipped) |
//! | 12 | u64 | capture time, µs of `CLOCK_MONOTONIC` |
//! | 20 | u32 | flags: 1 = IDR keyframe (with SPS and PPS), 0 = delta |
//! | 24 | bytes | the Annex B access unit |
//!
//! When the capture device itself sends H.264 or MJPEG, its pictures are handed on as they
//! arrived (passthrough, [`ViewerHub::publish_encoded`]): H.264 in CDV1 as above, MJPEG as
//! CDJ1 (`jpeg/1`) messages, the same header with magic `0x43444A31` (`CDJ1`), flags 1 and
//! one whole JPEG as the payload. A viewer that joins an H.264 passthrough stream starts
//! at the last IDR the tap holds (the device's IDRs come when it likes), and those catch-up
//! pictures do not count against its budget.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::Notify;

use super::codec::AccessUnit;
use super::{Compression, EncodedFrame};
use crate::sync::LockPlain;

/// Frames kept in the tap.
pub const TAP_FRAMES: usize = 60;
/// Bytes kept in the tap.
pub const TAP_BYTES: usize = 8 << 20;
/// Unacknowledged frames per viewer.
pub const VIEWER_FRAMES: usize = 8;
/// Unacknowledged bytes per viewer (a single keyframe may exceed it).
pub const VIEWER_BYTES: usize = 1 << 20;
/// Keyframe requests are honoured at most this often.
pub const KEYFRAME_INTERVAL: Duration = Duration::from_secs(1);
/// The CDV1 magic, `CDV1`.
pub const CDV1_MAGIC: u32 = 0x4344_5631;
/// Bytes before the access unit in a CDV1 message.
pub const CDV1_HEADER: usize = 24;
/// The CDJ1 magic, `CDJ1`: one JPEG per message.
pub const CDJ1_MAGIC: u32 = 0x4344_4A31;
/// The protocol name of CDV1 streams (the `ready` message's `protocol`).
pub const CDV1_PROTOCOL: &str = "h264-annexb/1";
/// The protocol name of CDJ1 streams.
pub const CDJ1_PROTOCOL: &str = "jpeg/1";
/// The CDV1 flag of an IDR.
pub const CDV1_KEYFRAME: u32 = 1;
/// The codec string (WebCodecs, RFC 6381) before any IDR says otherwise: constrained
/// baseline, level 3.1, which is what openh264 produces for the sim's screen.
pub const DEFAULT_CODEC: &str = "avc1.42C01F";

/// Identifies a viewer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ViewerId(pub u64);

/// One prepared message: the same bytes for every viewer that takes it.
#[derive(Debug, Clone)]
pub struct ViewerFrame {
    /// The hub's sequence of this picture (CDV1 offset 8; gaps mean skipped pictures).
    pub sequence: u32,
    /// Whether it is an IDR.
    pub keyframe: bool,
    /// When the source frame was captured.
    pub captured_at: Instant,
    /// The whole CDV1 message (header and access unit).
    pub message: Bytes,
}

impl ViewerFrame {
    /// The access unit inside the message.
    pub fn access_unit(&self) -> &[u8] {
        self.message.get(CDV1_HEADER..).unwrap_or_default()
    }
}

#[derive(Debug)]
struct Unacked {
    sequence: u32,
    bytes: usize,
    since: Instant,
    /// Sent from the tap when the viewer joined: not counted against its budget.
    catch_up: bool,
}

/// A picture waiting to be taken, and whether it is catch-up from the tap.
#[derive(Debug)]
struct Ready {
    frame: ViewerFrame,
    catch_up: bool,
}

#[derive(Debug, Default)]
struct Viewer {
    ready: VecDeque<Ready>,
    unacked: VecDeque<Unacked>,
    waiting_for_idr: bool,
    notify: Arc<Notify>,
}

impl Viewer {
    /// Frames and bytes held against the viewer's budget (catch-up excluded).
    fn outstanding(&self) -> (usize, usize) {
        let ready = self.ready.iter().filter(|r| !r.catch_up);
        let unacked = self.unacked.iter().filter(|u| !u.catch_up);
        let (rf, rb) = ready.fold((0, 0), |(n, b), r| (n + 1, b + r.frame.message.len()));
        let (uf, ub) = unacked.fold((0, 0), |(n, b), u| (n + 1, b + u.bytes));
        (rf + uf, rb + ub)
    }

    /// Everything it holds, catch-up included (what `status` calls queued).
    fn held_bytes(&self) -> usize {
        self.ready.iter().map(|r| r.frame.message.len()).sum::<usize>()
            + self.unacked.iter().map(|u| u.bytes).sum::<usize>()
    }
}

#[derive(Debug, Default)]
struct Inner {
    viewers: HashMap<ViewerId, Viewer>,
    tap: VecDeque<ViewerFrame>,
    tap_bytes: usize,
    next_id: u64,
    next_sequence: u32,
    keyframe_wanted: bool,
    last_keyframe_request: Option<Instant>,
    encoder: &'static str,
    codec: Option<String>,
    /// The capture's own compression when it is handed on as is.
    passthrough: Option<Compression>,
    skipped: u64,
    keyframe_requests: u64,
}

/// Counters for `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ViewerStats {
    /// Connected viewers.
    pub viewers: usize,
    /// Bytes waiting for viewers or for their acknowledgement, all viewers together.
    pub queued_bytes: usize,
    /// Pictures skipped for slow (or just joined) viewers, since start.
    pub skipped: u64,
    /// Keyframes viewers asked for, since start (honoured at most once a second).
    pub keyframe_requests: u64,
    /// Pictures in the tap.
    pub tap_frames: usize,
}

/// The hub; clones share it.
#[derive(Debug, Clone, Default)]
pub struct ViewerHub {
    inner: Arc<Mutex<Inner>>,
    /// Woken when a viewer joins, so an idle encoder sleeps instead of polling.
    joined: Arc<Notify>,
}

/// Microseconds of `CLOCK_MONOTONIC` at `at` (the clock `Instant` reads on Linux), so a
/// client on the same machine can measure latency against its own monotonic clock.
pub fn monotonic_micros(at: Instant) -> u64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| Duration::new(u64::try_from(t.tv_sec()).unwrap_or(0), u32::try_from(t.tv_nsec()).unwrap_or(0)))
        .unwrap_or_default();
    let then = now.saturating_sub(at.elapsed());
    u64::try_from(then.as_micros()).unwrap_or(u64::MAX)
}

/// The CDV1 message of `unit` with sequence `sequence`: one copy of the access unit.
pub fn cdv1_message(unit: &AccessUnit, sequence: u32) -> Bytes {
    let mut buf = BytesMut::with_capacity(CDV1_HEADER + unit.data.len());
    buf.put_u32(CDV1_MAGIC);
    buf.put_u32(unit.generation);
    buf.put_u32(sequence);
    buf.put_u64(monotonic_micros(unit.captured_at));
    buf.put_u32(if unit.keyframe { CDV1_KEYFRAME } else { 0 });
    buf.put_slice(&unit.data);
    buf.freeze()
}

/// The CDJ1 message of one JPEG from the capture device.
fn cdj1_message(frame: &EncodedFrame, sequence: u32) -> Bytes {
    let mut buf = BytesMut::with_capacity(CDV1_HEADER + frame.data.len());
    buf.put_u32(CDJ1_MAGIC);
    buf.put_u32(frame.generation);
    buf.put_u32(sequence);
    buf.put_u64(monotonic_micros(frame.captured_at));
    buf.put_u32(CDV1_KEYFRAME);
    buf.put_slice(&frame.data);
    buf.freeze()
}

/// The RFC 6381 codec string (`avc1.PPCCLL`) of the first SPS in an Annex B access unit.
pub fn codec_of(annex_b: &[u8]) -> Option<String> {
    let mut i = 0;
    while i + 3 < annex_b.len() {
        let start = annex_b.get(i..i + 3)? == [0, 0, 1];
        if start {
            let nal = annex_b.get(i + 3..)?;
            if nal.first().is_some_and(|h| h & 0x1f == 7) {
                let (p, c, l) = (*nal.get(1)?, *nal.get(2)?, *nal.get(3)?);
                return Some(format!("avc1.{p:02X}{c:02X}{l:02X}"));
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    None
}

impl ViewerHub {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Plain queues; a panic elsewhere cannot leave them inconsistent.
        self.inner.lock_plain()
    }

    /// Adds a viewer; it receives nothing until the next IDR, which is requested now.
    pub fn join(&self) -> (ViewerId, Arc<Notify>) {
        let mut inner = self.lock();
        inner.next_id += 1;
        let id = ViewerId(inner.next_id);
        let mut viewer = Viewer { waiting_for_idr: true, ..Viewer::default() };
        if inner.passthrough == Some(Compression::H264) {
            // The device sends IDRs when it likes: start at the last one the tap holds.
            if let Some(at) = inner.tap.iter().rposition(|f| f.keyframe) {
                viewer.ready.extend(inner.tap.iter().skip(at).map(|f| Ready { frame: f.clone(), catch_up: true }));
                viewer.waiting_for_idr = false;
                viewer.notify.notify_one();
            }
        }
        let notify = viewer.notify.clone();
        inner.viewers.insert(id, viewer);
        // A joining viewer always gets its keyframe, whatever the rate limit says.
        inner.keyframe_wanted = true;
        inner.last_keyframe_request = Some(Instant::now());
        drop(inner);
        // A stored permit when nobody waits: the encoder's next wait returns at once.
        self.joined.notify_one();
        (id, notify)
    }

    /// For the encoder: waits until a viewer joins (returns at once if one joined since
    /// the last wait; callers check [`ViewerHub::has_viewers`] again).
    pub async fn viewer_joined(&self) {
        self.joined.notified().await;
    }

    /// Removes a viewer.
    pub fn leave(&self, id: ViewerId) {
        self.lock().viewers.remove(&id);
    }

    /// Viewers watching now.
    pub fn viewer_count(&self) -> usize {
        self.lock().viewers.len()
    }

    /// Whether anyone is watching (the encoder idles otherwise).
    pub fn has_viewers(&self) -> bool {
        !self.lock().viewers.is_empty()
    }

    /// The encoder's own need for a keyframe (a skipped picture); at most once a second.
    pub fn request_keyframe(&self) -> bool {
        let mut inner = self.lock();
        let now = Instant::now();
        if inner.last_keyframe_request.is_some_and(|t| now.duration_since(t) < KEYFRAME_INTERVAL) {
            return false;
        }
        inner.last_keyframe_request = Some(now);
        inner.keyframe_wanted = true;
        true
    }

    /// A viewer asks for a keyframe (`{"type":"keyframe"}`): counted, and honoured at most
    /// once a second for all viewers together. Returns whether it was honoured.
    pub fn viewer_wants_keyframe(&self) -> bool {
        self.lock().keyframe_requests += 1;
        self.request_keyframe()
    }

    /// For the encoder: whether the next picture must be an IDR (clears the request).
    pub fn take_keyframe_request(&self) -> bool {
        std::mem::take(&mut self.lock().keyframe_wanted)
    }

    /// Publishes one picture to the tap and every viewer with room for it, as one message
    /// all of them share.
    pub fn publish(&self, unit: AccessUnit) {
        let mut inner = self.lock();
        let sequence = inner.next_sequence;
        inner.next_sequence = sequence.wrapping_add(1);
        if unit.keyframe {
            if let Some(codec) = codec_of(&unit.data) {
                inner.codec = Some(codec);
            }
        }
        let frame = ViewerFrame {
            sequence,
            keyframe: unit.keyframe,
            captured_at: unit.captured_at,
            message: cdv1_message(&unit, sequence),
        };
        self.distribute(inner, frame);
    }

    /// Publishes one picture as the capture device sent it (passthrough): H.264 in CDV1,
    /// a JPEG in CDJ1. The bytes are the device's (an IDR carries its SPS and PPS).
    pub fn publish_encoded(&self, frame: &EncodedFrame) {
        let mut inner = self.lock();
        let sequence = inner.next_sequence;
        inner.next_sequence = sequence.wrapping_add(1);
        let message = match frame.compression {
            Compression::H264 => {
                if frame.keyframe {
                    if let Some(codec) = codec_of(&frame.data) {
                        inner.codec = Some(codec);
                    }
                }
                let unit = AccessUnit {
                    data: frame.data.clone(),
                    keyframe: frame.keyframe,
                    generation: frame.generation,
                    frame_id: frame.sequence,
                    captured_at: frame.captured_at,
                };
                cdv1_message(&unit, sequence)
            }
            Compression::Mjpeg => cdj1_message(frame, sequence),
        };
        let keyframe = frame.keyframe || frame.compression == Compression::Mjpeg;
        self.distribute(inner, ViewerFrame { sequence, keyframe, captured_at: frame.captured_at, message });
    }

    fn distribute(&self, mut inner: MutexGuard<'_, Inner>, frame: ViewerFrame) {
        let len = frame.message.len();
        let keyframe = frame.keyframe;
        inner.tap.push_back(frame.clone());
        inner.tap_bytes += len;
        while inner.tap.len() > TAP_FRAMES || (inner.tap_bytes > TAP_BYTES && inner.tap.len() > 1) {
            if let Some(old) = inner.tap.pop_front() {
                inner.tap_bytes -= old.message.len();
            }
        }
        let mut want_keyframe = false;
        let mut skipped = 0;
        for v in inner.viewers.values_mut() {
            if v.waiting_for_idr && !keyframe {
                skipped += 1;
                continue;
            }
            let (frames, bytes) = v.outstanding();
            let fits = frames < VIEWER_FRAMES && (bytes + len <= VIEWER_BYTES || (keyframe && frames == 0));
            if !fits {
                // A dependent picture is lost: skip until an IDR and ask for one.
                skipped += 1;
                v.waiting_for_idr = true;
                want_keyframe = true;
                continue;
            }
            v.waiting_for_idr = false;
            v.ready.push_back(Ready { frame: frame.clone(), catch_up: false });
            v.notify.notify_one();
        }
        inner.skipped += skipped;
        drop(inner);
        if want_keyframe {
            self.request_keyframe();
        }
    }

    /// Says whether the capture is handed on as is (`Some`: its compression) or encoded
    /// here (`None`). Set by the frame hub when a stream starts.
    pub fn set_passthrough(&self, compression: Option<Compression>) {
        let mut inner = self.lock();
        if inner.passthrough != compression {
            // Another stream: what the tap holds is of no use to a viewer of this one.
            inner.tap.clear();
            inner.tap_bytes = 0;
            if compression == Some(Compression::Mjpeg) {
                inner.codec = Some("jpeg".into());
            } else {
                inner.codec = None;
            }
        }
        inner.passthrough = compression;
    }

    /// The capture's compression when it is handed on as is.
    pub fn passthrough(&self) -> Option<Compression> {
        self.lock().passthrough
    }

    /// The stream's protocol for the `ready` message: CDJ1 for MJPEG passthrough, CDV1
    /// otherwise.
    pub fn protocol(&self) -> &'static str {
        match self.lock().passthrough {
            Some(Compression::Mjpeg) => CDJ1_PROTOCOL,
            _ => CDV1_PROTOCOL,
        }
    }

    /// Takes the next picture for `id` (it now counts as unacknowledged).
    pub fn take(&self, id: ViewerId) -> Option<ViewerFrame> {
        let mut inner = self.lock();
        let v = inner.viewers.get_mut(&id)?;
        let Ready { frame, catch_up } = v.ready.pop_front()?;
        v.unacked.push_back(Unacked {
            sequence: frame.sequence,
            bytes: frame.message.len(),
            since: Instant::now(),
            catch_up,
        });
        Some(frame)
    }

    /// Acknowledges `sequence` and everything taken before it; an ack of a picture the
    /// viewer does not hold changes nothing (returns `false`).
    pub fn ack(&self, id: ViewerId, sequence: u32) -> bool {
        let mut inner = self.lock();
        let Some(v) = inner.viewers.get_mut(&id) else { return false };
        let Some(at) = v.unacked.iter().position(|u| u.sequence == sequence) else { return false };
        v.unacked.drain(..=at);
        true
    }

    /// How long the oldest picture `id` has not acknowledged has been out (`None`: it
    /// holds none).
    pub fn oldest_unacked(&self, id: ViewerId) -> Option<Duration> {
        self.lock().viewers.get(&id)?.unacked.front().map(|u| u.since.elapsed())
    }

    /// Records which encoder feeds the hub (`software`, `v4l2-m2m`).
    pub fn set_encoder(&self, name: &'static str) {
        self.lock().encoder = name;
    }

    /// Which encoder feeds the hub; `none` before one started.
    pub fn encoder(&self) -> &'static str {
        let name = self.lock().encoder;
        if name.is_empty() {
            "none"
        } else {
            name
        }
    }

    /// The stream's codec string for WebCodecs, from the last IDR's SPS
    /// ([`DEFAULT_CODEC`] before the first).
    pub fn codec(&self) -> String {
        self.lock().codec.clone().unwrap_or_else(|| DEFAULT_CODEC.to_string())
    }

    /// Counters.
    pub fn stats(&self) -> ViewerStats {
        let inner = self.lock();
        ViewerStats {
            viewers: inner.viewers.len(),
            queued_bytes: inner.viewers.values().map(Viewer::held_bytes).sum(),
            skipped: inner.skipped,
            keyframe_requests: inner.keyframe_requests,
            tap_frames: inner.tap.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn au(keyframe: bool, len: usize) -> AccessUnit {
        AccessUnit {
            data: Arc::from(vec![0u8; len]),
            keyframe,
            generation: 1,
            frame_id: 0,
            captured_at: Instant::now(),
        }
    }

    #[test]
    fn joiners_start_at_an_idr_and_get_one_requested() {
        let hub = ViewerHub::default();
        let (id, _) = hub.join();
        assert!(hub.take_keyframe_request(), "joining asks for a keyframe");
        hub.publish(au(false, 10));
        assert!(hub.take(id).is_none(), "no dependent picture before the IDR");
        hub.publish(au(true, 10));
        hub.publish(au(false, 10));
        let f = hub.take(id).unwrap();
        assert!(f.keyframe);
        assert_eq!(hub.take(id).unwrap().sequence, f.sequence + 1);
    }

    #[test]
    fn a_slow_viewer_drops_until_the_next_idr_without_affecting_others() {
        let hub = ViewerHub::default();
        let (slow, _) = hub.join();
        let (fast, _) = hub.join();
        hub.take_keyframe_request();
        hub.publish(au(true, 100));
        // Past the joins' keyframe request, so the overflow's own request is not rate limited.
        std::thread::sleep(KEYFRAME_INTERVAL);
        for _ in 0..20 {
            hub.publish(au(false, 100));
            if let Some(f) = hub.take(fast) {
                hub.ack(fast, f.sequence);
            }
        }
        while let Some(f) = hub.take(fast) {
            hub.ack(fast, f.sequence);
        }
        // The slow viewer never acked: it holds at most 8 pictures, then waits for an IDR.
        let mut slow_frames = Vec::new();
        while let Some(f) = hub.take(slow) {
            slow_frames.push(f.sequence);
        }
        assert_eq!(slow_frames.len(), VIEWER_FRAMES);
        assert!(hub.oldest_unacked(slow).is_some() && hub.oldest_unacked(fast).is_none());
        assert!(hub.stats().skipped >= 12);
        assert!(hub.take_keyframe_request(), "overflow asks for a keyframe");
        assert!(!hub.ack(slow, 9999), "an ack of a picture it never took changes nothing");
        assert!(hub.ack(slow, *slow_frames.last().unwrap()), "one ack covers everything before it");
        assert!(hub.oldest_unacked(slow).is_none());
        hub.publish(au(false, 100));
        assert!(hub.take(slow).is_none(), "still waiting for the IDR");
        hub.publish(au(true, 100));
        assert!(hub.take(slow).unwrap().keyframe);
    }

    #[test]
    fn byte_budget_and_rate_limited_keyframe_requests() {
        let hub = ViewerHub::default();
        let (id, _) = hub.join();
        hub.take_keyframe_request();
        hub.publish(au(true, VIEWER_BYTES + 10)); // one big keyframe still goes through
        assert!(hub.take(id).is_some());
        hub.publish(au(false, 10));
        assert!(hub.take(id).is_none(), "over the byte budget until acked");
        assert!(!hub.request_keyframe(), "rate limited right after the join/overflow request");
    }

    #[test]
    fn tap_is_bounded() {
        let hub = ViewerHub::default();
        for _ in 0..100 {
            hub.publish(au(false, 10));
        }
        assert_eq!(hub.stats().tap_frames, TAP_FRAMES);
    }

    #[test]
    fn one_cdv1_message_is_shared_by_every_viewer() {
        let hub = ViewerHub::default();
        let (a, _) = hub.join();
        let (b, _) = hub.join();
        // An IDR as openh264 writes it: SPS (profile 0x42, constraints 0xC0, level 3.1), PPS, slice.
        let idr: Vec<u8> =
            [&[0, 0, 0, 1, 0x67, 0x42, 0xC0, 0x1F, 0xAA][..], &[0, 0, 0, 1, 0x68, 0xCE], &[0, 0, 1, 0x65, 0x88]]
                .concat();
        let unit = AccessUnit {
            data: Arc::from(idr.clone()),
            keyframe: true,
            generation: 7,
            frame_id: 3,
            captured_at: Instant::now(),
        };
        hub.publish(unit);
        let (fa, fb) = (hub.take(a).unwrap(), hub.take(b).unwrap());
        assert_eq!(fa.message.as_ptr(), fb.message.as_ptr(), "the same bytes, not a copy per viewer");
        let m = &fa.message;
        assert_eq!(&m[0..4], b"CDV1");
        assert_eq!(u32::from_be_bytes(m[4..8].try_into().unwrap()), 7, "generation");
        assert_eq!(u32::from_be_bytes(m[8..12].try_into().unwrap()), fa.sequence);
        let at = u64::from_be_bytes(m[12..20].try_into().unwrap());
        let now = monotonic_micros(Instant::now());
        assert!(at <= now && now - at < 5_000_000, "capture time on CLOCK_MONOTONIC: {at} vs {now}");
        assert_eq!(u32::from_be_bytes(m[20..24].try_into().unwrap()), CDV1_KEYFRAME);
        assert_eq!(fa.access_unit(), &idr[..]);
        assert_eq!(hub.codec(), "avc1.42C01F");
        assert_eq!(codec_of(&[0, 0, 1, 0x65, 1, 2, 3]), None, "no SPS, no codec string");
        let st = hub.stats();
        assert_eq!((st.viewers, st.queued_bytes), (2, 2 * m.len()));
    }

    fn encoded(compression: Compression, keyframe: bool, data: &[u8]) -> EncodedFrame {
        EncodedFrame {
            generation: 3,
            sequence: 1,
            captured_at: Instant::now(),
            width: 64,
            height: 48,
            compression,
            keyframe,
            data: Arc::from(data),
        }
    }

    #[test]
    fn jpegs_go_out_as_cdj1_untouched() {
        let hub = ViewerHub::default();
        hub.set_passthrough(Some(Compression::Mjpeg));
        assert_eq!((hub.protocol(), hub.codec().as_str()), (CDJ1_PROTOCOL, "jpeg"));
        let (id, _) = hub.join();
        let jpeg = [0xFF, 0xD8, 1, 2, 3, 0xFF, 0xD9];
        hub.publish_encoded(&encoded(Compression::Mjpeg, true, &jpeg));
        let f = hub.take(id).expect("every JPEG is a keyframe");
        assert_eq!(&f.message[0..4], b"CDJ1");
        assert_eq!(u32::from_be_bytes(f.message[4..8].try_into().unwrap()), 3, "generation");
        assert_eq!(u32::from_be_bytes(f.message[20..24].try_into().unwrap()), CDV1_KEYFRAME);
        assert_eq!(f.access_unit(), &jpeg, "the device's bytes, not a re-encode");
    }

    #[test]
    fn a_joining_viewer_of_h264_passthrough_starts_at_the_last_idr_outside_its_budget() {
        let hub = ViewerHub::default();
        hub.set_passthrough(Some(Compression::H264));
        assert_eq!(hub.protocol(), CDV1_PROTOCOL);
        let idr: Vec<u8> =
            [&[0, 0, 0, 1, 0x67, 0x4D, 0x40, 0x1F][..], &[0, 0, 0, 1, 0x68, 0xEE], &[0, 0, 1, 0x65]].concat();
        hub.publish_encoded(&encoded(Compression::H264, false, &[0, 0, 1, 0x41, 0]));
        hub.publish_encoded(&encoded(Compression::H264, true, &idr));
        for k in 0..12u8 {
            hub.publish_encoded(&encoded(Compression::H264, false, &[0, 0, 1, 0x41, k]));
        }
        assert_eq!(hub.codec(), "avc1.4D401F", "from the device's SPS");
        let (id, _) = hub.join();
        let mut got = Vec::new();
        while let Some(f) = hub.take(id) {
            got.push(f);
        }
        const { assert!(12 > VIEWER_FRAMES, "more catch-up than a viewer's budget") };
        assert_eq!(got.len(), 13, "the IDR and everything after it");
        assert!(got[0].keyframe && got[0].access_unit() == &idr[..]);
        // The catch-up does not count: the next live picture still fits.
        hub.publish_encoded(&encoded(Compression::H264, false, &[0, 0, 1, 0x41, 99]));
        let live = hub.take(id).expect("live pictures go on after the catch-up");
        assert_eq!(live.access_unit(), &[0, 0, 1, 0x41, 99]);
        // Another stream (raw capture now): the tap's pictures are of no use to anyone.
        hub.set_passthrough(None);
        assert_eq!(hub.stats().tap_frames, 0);
        assert_eq!(hub.codec(), DEFAULT_CODEC);
    }

    #[test]
    fn viewer_keyframe_requests_are_counted_and_rate_limited() {
        let hub = ViewerHub::default();
        hub.join();
        hub.take_keyframe_request();
        assert!(!hub.viewer_wants_keyframe(), "within a second of the join's own request");
        assert!(!hub.take_keyframe_request());
        assert_eq!(hub.stats().keyframe_requests, 1);
    }
}
