//! Act and verify: after input, watch the picture until it settles and say what the input
//! did to it (`settled_ms`, `changed`, `changed_region`, a fresh observation of the settled
//! screen); and the `wait_for_change` / `wait_for_settle` methods on the same machinery.
//!
//! Only the latest frame is looked at, as a sampled luma copy of the phone's picture
//! ([`LumaThumb`], ~0.7 ms per 1080p frame), and only while someone waits: nothing runs
//! between actions. Frames are held just long enough to sample them, so a capture with a
//! small buffer pool is never starved.
//!
//! When the screen is settled: after `quiet_ms` (300) without a change; or sooner, when the
//! picture differs from the baseline and its samples then stay bit-identical for long
//! enough: `still_ms` (60, at least [`STILL_FRAMES`] frames) after a single change, and
//! after an animation (more than one change) twice the longest gap seen between its steps,
//! at least [`STILL_AFTER_MOTION`] (100 ms): an app opening that moved every frame is
//! still 100 ms after its last frame; a spinner stepping every 60 ms needs 120 ms of
//! stillness it never has. Bit-identical, not "below the threshold": a slow fade moves a
//! little every frame and never starts a still stretch, so it keeps the full quiet window.
//! The answer's `settled_by` says which rule ended the watch. Limits: a source whose
//! frames are never bit-identical (compressed capture noise) always takes the quiet
//! window; a spinner whose first frame is the only change and whose next step comes later
//! than `still_ms`, or whose first two steps came within a frame and whose next comes
//! later than 100 ms, settles early (iOS draws its spinners at 8 steps a second or faster,
//! and rarely alone: the tap's highlight animates too).
//!
//! What is not a change: the pointer where it is in one picture and not in the other (a
//! drag's or a move's two ends; a pointer resting in both is no mask: see
//! `ActionRun::pointer_at_baseline` in `act.rs`), a blinking caret (a change one or two sample columns wide), the status-bar
//! clock and whatever else the configured ignore regions cover, and changes touching fewer
//! samples than a minimum.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use super::observations::{FrameRef, MAX_SCREENSHOT_BYTES, THUMBNAIL_EDGE};
use super::text::{lines_json, TextBasis};
use super::{Acting, Daemon, DaemonError};
use crate::device::geometry::{ObservationMapping, PixelRect};
use crate::device::video::image::{fit, observe};
use crate::device::video::luma::{changed_region, ChangeRules, LumaThumb};
use crate::device::video::{Frame, Signal};
use crate::protocol::params::{
    ReturnImage, WaitForChangeParams, WaitForSettleParams, DEFAULT_MAX_EDGE, DEFAULT_QUIET_MS,
    DEFAULT_SETTLE_TIMEOUT_MS,
};

/// A rectangle as fractions (0..1) of the phone's picture, so one setting fits every
/// capture size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitRect {
    /// Left.
    pub x: f64,
    /// Top.
    pub y: f64,
    /// Width.
    pub width: f64,
    /// Height.
    pub height: f64,
}

impl UnitRect {
    /// The rectangle in frame pixels of `active`, clipped to it.
    pub fn in_frame(&self, active: &PixelRect) -> PixelRect {
        let (aw, ah) = (f64::from(active.width), f64::from(active.height));
        let px = |v: f64, extent: f64| to_u32((v.clamp(0.0, 1.0) * extent).round());
        let (x0, y0) = (px(self.x, aw), px(self.y, ah));
        let (x1, y1) = (px(self.x + self.width, aw), px(self.y + self.height, ah));
        PixelRect { x: active.x + x0, y: active.y + y0, width: x1.saturating_sub(x0), height: y1.saturating_sub(y0) }
    }
}

/// How actions verify their effect (config `[act]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ActSettings {
    /// The screen is settled after this long without a change (ms).
    pub quiet_ms: u64,
    /// Or sooner: after one change, this long of bit-identical samples (ms; 0: off).
    pub still_ms: u64,
    /// Longest wait for it to settle after an action (ms).
    pub timeout_ms: u64,
    /// A sample changed when its luma moved by more than this (0..255).
    pub threshold: u8,
    /// Fewer changed samples than this is noise.
    pub min_samples: u32,
    /// A change at most this many sample columns wide is a blinking caret (0: off).
    pub thin_columns: u32,
    /// Samples along the long edge of the phone's picture (400: a 1080p phone is sampled
    /// every 3rd pixel).
    pub samples: u32,
    /// The pointer's radius, as a fraction of the picture's width, masked where it is
    /// drawn (AssistiveTouch's pointer is about 2 %; the margin covers calibration error).
    pub pointer_radius: f64,
    /// Regions whose changes never count, as fractions of the picture (default: the
    /// status-bar clock, top left).
    pub ignore: Vec<UnitRect>,
}

impl Default for ActSettings {
    fn default() -> Self {
        ActSettings {
            quiet_ms: DEFAULT_QUIET_MS,
            still_ms: DEFAULT_STILL_MS,
            timeout_ms: DEFAULT_SETTLE_TIMEOUT_MS,
            threshold: 12,
            min_samples: 8,
            thin_columns: 2,
            samples: 400,
            pointer_radius: 0.045,
            ignore: vec![UnitRect { x: 0.0, y: 0.0, width: 0.45, height: 0.06 }],
        }
    }
}

impl ActSettings {
    /// Whether the values make sense; the message names the bad one.
    pub fn check(&self) -> Result<(), String> {
        if !(crate::protocol::params::QUIET_MS_RANGE).contains(&self.quiet_ms) {
            return Err(format!("act.quiet_ms = {} is outside 50..=5000", self.quiet_ms));
        }
        if self.still_ms > 1000 {
            return Err(format!("act.still_ms = {} is above 1000", self.still_ms));
        }
        if self.timeout_ms > 30_000 {
            return Err(format!("act.timeout_ms = {} is above 30000", self.timeout_ms));
        }
        if !(16..=2048).contains(&self.samples) {
            return Err(format!("act.samples = {} is outside 16..=2048", self.samples));
        }
        if !(0.0..=0.5).contains(&self.pointer_radius) {
            return Err(format!("act.pointer_radius = {} is outside 0..=0.5", self.pointer_radius));
        }
        for (i, r) in self.ignore.iter().enumerate() {
            let unit = |v: f64| (0.0..=1.0).contains(&v);
            if !(unit(r.x) && unit(r.y) && unit(r.width) && unit(r.height)) {
                return Err(format!("act.ignore[{i}] must be fractions 0..=1 of the phone's picture"));
            }
        }
        Ok(())
    }
}

/// Default `still_ms`: two frame intervals at 30 fps, four at 60.
pub const DEFAULT_STILL_MS: u64 = 60;
/// The fewest frames of a still stretch (the changed one and two identical to it).
pub const STILL_FRAMES: u32 = 3;
/// The shortest still stretch that settles an animation (more than one change): an
/// animation that moved every frame has ended once this passes with nothing moving.
pub const STILL_AFTER_MOTION: Duration = Duration::from_millis(100);

/// Which rule ended a watch (the answer's `settled_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SettledBy {
    /// One change, then bit-identical samples for `still_ms`.
    StillFrames,
    /// No change for `quiet_ms`.
    QuietWindow,
    /// A change was all the watch waited for (`wait_for_change` with `settle: false`).
    Change,
    /// It did not settle (timeout, a new picture).
    NotSettled,
}

impl SettledBy {
    fn as_str(self) -> &'static str {
        match self {
            SettledBy::StillFrames => "still_frames",
            SettledBy::QuietWindow => "quiet_window",
            SettledBy::Change => "change",
            SettledBy::NotSettled => "not_settled",
        }
    }
}

/// The still-frames rule over the samples of one watch. Settled when, at a sample taken
/// after the input's last report: the picture differs from the baseline, at most one change
/// (motion) was seen among the samples taken after that report, and the samples have been
/// bit-identical (outside the ignored regions) for `still` and at least [`STILL_FRAMES`]
/// frames. Samples during the input (a pressed pointer may look darker) are the input's own
/// appearance: they start stretches but are no change counted against the rule.
///
/// The stretch is measured twice: by capture times, and by frames (how many frames the
/// source published across it, times the shortest frame interval seen in this watch). A
/// frame stamped late (a capture or a renderer held up after drawing it) can stretch the
/// times of a picture that stood still for less than `still`, such as one step of a
/// spinner; the frame count cannot be stretched that way.
#[derive(Debug, Clone)]
pub(super) struct Stillness {
    still: Duration,
    /// Changes (motion events) seen in samples taken after the last report.
    changes: u32,
    /// The first sample of the current identical stretch, when it was taken, its frame,
    /// and how many samples the stretch has.
    stretch: Option<(Arc<LumaThumb>, Instant, u64, u32)>,
    /// The previous sample's frame and capture time.
    prev: Option<(u64, Instant)>,
    /// The shortest time per frame seen between two samples.
    frame_interval: Option<Duration>,
    /// When the last change after the input was seen.
    last_change: Option<Instant>,
    /// The longest gap between two changes after the input.
    longest_gap: Duration,
}

/// One sample as the still-frames rule takes it.
#[derive(Debug, Clone, Copy)]
pub(super) struct StillSample<'a> {
    /// The sample.
    pub thumb: &'a Arc<LumaThumb>,
    /// When its frame was captured.
    pub at: Instant,
    /// Its frame's sequence number.
    pub frame_id: u64,
    /// Whether it was taken after the input's last report.
    pub after_input: bool,
    /// Whether the motion rule saw it move.
    pub moved: bool,
    /// Whether it differs from the baseline.
    pub differs: bool,
}

impl Stillness {
    /// A rule needing `still` of identical samples (zero: never settles by it).
    pub(super) fn new(still: Duration) -> Stillness {
        Stillness {
            still,
            changes: 0,
            stretch: None,
            prev: None,
            frame_interval: None,
            last_change: None,
            longest_gap: Duration::ZERO,
        }
    }

    /// Takes the next sample; whether the screen is now settled by this rule.
    pub(super) fn push(&mut self, s: StillSample<'_>, rules: &ChangeRules) -> bool {
        if s.moved && s.after_input {
            self.changes += 1;
            if let Some(last) = self.last_change {
                self.longest_gap = self.longest_gap.max(s.at.saturating_duration_since(last));
            }
            self.last_change = Some(s.at);
        }
        if let Some((frame, at)) = self.prev {
            let frames = u32::try_from(s.frame_id.saturating_sub(frame)).unwrap_or(u32::MAX);
            if frames > 0 {
                let per_frame = s.at.saturating_duration_since(at) / frames;
                self.frame_interval = Some(self.frame_interval.map_or(per_frame, |i| i.min(per_frame)));
            }
        }
        self.prev = Some((s.frame_id, s.at));
        let same = self.stretch.as_ref().is_some_and(|(first, ..)| identical(first, s.thumb, &rules.ignore));
        match (&mut self.stretch, same) {
            (Some((.., n)), true) => *n += 1,
            (stretch, _) => *stretch = Some((s.thumb.clone(), s.at, s.frame_id, 1)),
        }
        let Some((_, since, first_frame, n)) = &self.stretch else {
            return false;
        };
        // After an animation, the stillness must outlast the pauses between its steps.
        let needed = if self.changes <= 1 {
            self.still
        } else {
            self.still.max(STILL_AFTER_MOTION).max(self.longest_gap.saturating_mul(2))
        };
        let frames = u32::try_from(s.frame_id.saturating_sub(*first_frame)).unwrap_or(u32::MAX);
        let by_frames = self.frame_interval.is_some_and(|i| i.saturating_mul(frames) >= needed);
        !self.still.is_zero()
            && s.after_input
            && s.differs
            && *n >= STILL_FRAMES
            && s.at.saturating_duration_since(*since) >= needed
            && by_frames
    }
}

/// Whether two samples are bit-identical outside `ignore` (frame pixels).
fn identical(a: &LumaThumb, b: &LumaThumb, ignore: &[PixelRect]) -> bool {
    if ignore.is_empty() {
        return a == b;
    }
    a.same_outside(b, ignore)
}

/// One sampled picture.
#[derive(Debug, Clone)]
pub(super) struct Sample {
    /// Its frame's sequence.
    pub frame_id: u64,
    /// Its frame's generation.
    pub generation: u32,
    /// When the frame was captured.
    pub captured_at: Instant,
    /// The phone's picture in that frame.
    pub active: PixelRect,
    /// The luma copy.
    pub thumb: Arc<LumaThumb>,
}

/// How long to watch, and for what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WatchFor {
    /// Settled after this long without a change.
    pub quiet: Duration,
    /// Longest watch, from its start.
    pub timeout: Duration,
    /// What ends it.
    pub until: Until,
}

/// What to wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Until {
    /// No change for `quiet`.
    Settled,
    /// A difference from the baseline, then (when `settle`) no change for `quiet`.
    Changed {
        /// Whether to also wait for the change to end.
        settle: bool,
    },
}

/// How one watch went.
#[derive(Debug, Clone)]
pub(super) struct Watched {
    /// The last picture sampled.
    pub last: Sample,
    /// What differs between the baseline and `last`, in frame pixels.
    pub changed: Option<PixelRect>,
    /// Whether the wait ended as asked (quiet reached; or a change seen).
    pub settled: bool,
    /// The first picture of the final quiet stretch: the last that differed from the
    /// one before it (or, with no change at all, the first after `from`).
    pub settled_frame: Option<(u64, Instant)>,
    /// When a difference from the baseline was first seen.
    pub changed_at: Option<Instant>,
    /// Which rule ended the watch.
    pub settled_by: SettledBy,
}

/// Everything the answer of a verified action or a wait needs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Answer<'a> {
    /// When the watched stretch began (the last report; the wait's start).
    pub from: Instant,
    /// The image size the answer's observation should have (the acted-on screenshot's),
    /// `None`: fit the default edge.
    pub image_edge: Option<u32>,
    /// The task whose agent asks.
    pub task: Option<i64>,
    /// Which picture to include.
    pub return_image: ReturnImage,
    /// The rules the watch used.
    pub rules: &'a ChangeRules,
    /// Read the fresh observation's text too, from this basis ([`TextBasis`]).
    pub text: Option<(&'a TextBasis, &'a CancellationToken)>,
}

/// Longest wait in [`Daemon::sample_after`] for a frame captured after its moment.
pub(super) const SAMPLE_AFTER_WAIT: Duration = Duration::from_millis(150);

fn to_u32(v: f64) -> u32 {
    // Callers pass pixel values clamped into the frame, far inside u32.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let r = v.max(0.0).min(f64::from(u32::MAX)) as u32;
    r
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Daemon {
    /// The act settings.
    pub(super) fn act_settings(&self) -> &ActSettings {
        &self.inner.options.act
    }

    /// Samples `frame` (its phone picture) on the blocking pool and lets go of it.
    async fn sample(&self, frame: Arc<Frame>) -> Result<Sample, DaemonError> {
        let active = self.active_rect(&frame);
        let edge = self.act_settings().samples;
        let (frame_id, generation, captured_at) = (frame.sequence, frame.generation, frame.captured_at);
        let thumb = tokio::task::spawn_blocking(move || LumaThumb::of_rect(&frame, active, edge))
            .await
            .map_err(|_| DaemonError::Worker("frame sampling"))?;
        Ok(Sample { frame_id, generation, captured_at, active, thumb: Arc::new(thumb) })
    }

    /// The screen now, sampled; `None` when there is no picture to verify against (no
    /// capture, no signal).
    pub(super) async fn sample_now(&self, cancel: &CancellationToken) -> Result<Option<Sample>, DaemonError> {
        if self.inner.frames.state().signal != Signal::Locked {
            return Ok(None);
        }
        match self.frame_after(None, Duration::from_millis(500), cancel).await {
            Ok(frame) => Ok(Some(self.sample(frame).await?)),
            Err(DaemonError::Cancelled) => Err(DaemonError::Cancelled),
            Err(_) => Ok(None),
        }
    }

    /// The screen once `at` has passed: a frame captured at or after `at` (waiting up to
    /// [`SAMPLE_AFTER_WAIT`] for one; a source that sends no frame while nothing moves
    /// gives its latest), sampled. `None` when there is no picture (no capture, no signal).
    pub(super) async fn sample_after(
        &self,
        at: Instant,
        cancel: &CancellationToken,
    ) -> Result<Option<Sample>, DaemonError> {
        if self.inner.frames.state().signal != Signal::Locked {
            return Ok(None);
        }
        let mut reader = self.inner.frames.clone();
        let generation = reader.state().generation;
        let deadline = tokio::time::Instant::from_std(at + SAMPLE_AFTER_WAIT);
        loop {
            reader.want_pixels();
            if let Some(f) = reader.latest().filter(|f| f.generation == generation && f.captured_at >= at) {
                return Ok(Some(self.sample(f).await?));
            }
            tokio::select! {
                next = tokio::time::timeout_at(deadline, reader.changed()) => match next {
                    Ok(true) => {}
                    Ok(false) | Err(_) => return self.sample_now(cancel).await,
                },
                () = cancel.cancelled() => return Err(DaemonError::Cancelled),
            }
        }
    }

    /// The rules for a watch over the picture `active`: the configured ones, plus the
    /// pointer at each of `pointer` (normalized phone coordinates: where it is in one
    /// picture and not in the other).
    pub(super) fn change_rules(&self, active: &PixelRect, pointer: &[(f64, f64)]) -> ChangeRules {
        let s = self.act_settings();
        let mut ignore: Vec<PixelRect> = s.ignore.iter().map(|r| r.in_frame(active)).collect();
        let radius = (s.pointer_radius * f64::from(active.width)).max(1.0);
        let at = |(nx, ny): (f64, f64)| {
            (f64::from(active.x) + nx * f64::from(active.width), f64::from(active.y) + ny * f64::from(active.height))
        };
        let mut mask = |(x, y): (f64, f64)| {
            ignore.push(PixelRect {
                x: to_u32(x - radius),
                y: to_u32(y - radius),
                width: to_u32(2.0 * radius) + 1,
                height: to_u32(2.0 * radius) + 1,
            });
        };
        for &p in pointer {
            mask(at(p));
        }
        ChangeRules { threshold: s.threshold, ignore, min_samples: s.min_samples, thin_columns: s.thin_columns }
    }

    /// Where the pointer was left by the last action (normalized), if known.
    pub(super) fn last_pointer(&self) -> Option<(f64, f64)> {
        self.inner.phone.state().pointer_at
    }

    /// Records where the pointer is now (`None`: unknown).
    pub(super) fn set_last_pointer(&self, at: Option<(f64, f64)>) {
        self.inner.phone.state().pointer_at = at;
    }

    /// Watches frames after `from` until `what.until` holds or `what.timeout` (from
    /// `from`) passes.
    pub(super) async fn watch(
        &self,
        baseline: &Sample,
        rules: &ChangeRules,
        from: Instant,
        what: WatchFor,
        cancel: &CancellationToken,
    ) -> Result<Watched, DaemonError> {
        let WatchFor { quiet, timeout, until } = what;
        let mut reader = self.inner.frames.clone();
        let mut deadline = from + timeout;
        let mut prev = baseline.clone();
        let mut motion = Motion::new(baseline.thumb.clone());
        let mut stillness = Stillness::new(Duration::from_millis(self.act_settings().still_ms));
        let mut settled_by = SettledBy::NotSettled;
        let mut last_change: Option<(u64, Instant)> = None;
        let mut first_after: Option<(u64, Instant)> = None;
        let mut changed_at: Option<Instant> = None;
        // The settle phase starts at `from`, or (waiting for a change) at the change.
        let mut settle_from = match until {
            Until::Settled => Some(from),
            Until::Changed { .. } => None,
        };
        let settled = loop {
            if cancel.is_cancelled() {
                return Err(DaemonError::Cancelled);
            }
            // Compressed capture decodes only while someone asks for pixels.
            reader.want_pixels();
            let latest = reader.latest().filter(|f| f.generation == baseline.generation && f.sequence > prev.frame_id);
            if let Some(frame) = latest {
                let s = self.sample(frame).await?;
                if s.captured_at >= from && first_after.is_none() {
                    first_after = Some((s.frame_id, s.captured_at));
                }
                let moved = motion.moved(&s.thumb, rules);
                if moved {
                    last_change = Some((s.frame_id, s.captured_at));
                }
                let differs = changed_region(&baseline.thumb, &s.thumb, rules).is_some();
                let still = stillness.push(
                    StillSample {
                        thumb: &s.thumb,
                        at: s.captured_at,
                        frame_id: s.frame_id,
                        after_input: s.captured_at >= from,
                        moved,
                        differs,
                    },
                    rules,
                );
                if changed_at.is_none() && s.captured_at >= from && differs {
                    changed_at = Some(s.captured_at);
                    if let Until::Changed { settle } = until {
                        if !settle {
                            prev = s;
                            settled_by = SettledBy::Change;
                            break true;
                        }
                        settle_from = Some(s.captured_at);
                        // The settling gets its own time, whenever the change came.
                        deadline = deadline.max(s.captured_at + Duration::from_millis(DEFAULT_SETTLE_TIMEOUT_MS));
                    }
                }
                prev = s;
                if still && settle_from.is_some() {
                    settled_by = SettledBy::StillFrames;
                    break true;
                }
                if let Some(start) = settle_from {
                    let quiet_since = last_change.map_or(start, |(_, at)| at.max(start));
                    if prev.captured_at.saturating_duration_since(quiet_since) >= quiet {
                        settled_by = SettledBy::QuietWindow;
                        break true;
                    }
                }
            } else if reader.state().generation != baseline.generation {
                // A new picture altogether (replug, new mode): nothing to compare with.
                break false;
            }
            // A source that stops sending frames when nothing moves is quiet too.
            let quiet_deadline = settle_from.map(|start| {
                let quiet_since = last_change.map_or(start, |(_, at)| at.max(start));
                tokio::time::Instant::from_std(quiet_since + quiet + Duration::from_millis(250))
            });
            let far = tokio::time::Instant::from_std(deadline);
            tokio::select! {
                next = tokio::time::timeout_at(far, reader.changed()) => match next {
                    Ok(true) => {}
                    Ok(false) | Err(_) => break false,
                },
                () = async {
                    match quiet_deadline {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => {
                    let newest = reader.newest_captured();
                    if newest.is_none_or(|n| n.sequence <= prev.frame_id) {
                        settled_by = SettledBy::QuietWindow;
                        break true;
                    }
                }
                () = cancel.cancelled() => return Err(DaemonError::Cancelled),
            }
        };
        let changed = changed_region(&baseline.thumb, &prev.thumb, rules);
        let settled_frame = match last_change {
            Some((id, at)) if at >= settle_from.unwrap_or(from) => Some((id, at)),
            _ => first_after,
        };
        Ok(Watched { last: prev, changed, settled, settled_frame, changed_at, settled_by })
    }

    /// The answer's fields for a finished watch: what changed (in the answer's
    /// observation pixels), timings, and a fresh observation of the screen now.
    pub(super) async fn answer(&self, watched: &Watched, a: Answer<'_>) -> Result<Map<String, Value>, DaemonError> {
        let mut out = Map::new();
        out.insert("verified".into(), true.into());
        out.insert("changed".into(), watched.changed.is_some().into());
        out.insert("settled".into(), watched.settled.into());
        out.insert("settled_by".into(), watched.settled_by.as_str().into());
        let settled_ms = watched.settled_frame.map(|(_, at)| millis(at.saturating_duration_since(a.from)));
        out.insert("settled_ms".into(), settled_ms.into());
        out.insert("settled_frame_id".into(), watched.settled_frame.map(|(id, _)| id).into());
        // The observation shows the newest picture (the settled one, or what the screen
        // became by the timeout).
        let frame = self.inner.frames.latest().filter(|f| f.generation == watched.last.generation);
        let Some(frame) = frame else {
            out.insert("changed_region".into(), Value::Null);
            out.insert("after_observation_id".into(), Value::Null);
            return Ok(out);
        };
        let active = self.active_rect(&frame);
        let edge = a.image_edge.unwrap_or(DEFAULT_MAX_EDGE);
        let region = watched.changed.map(|r| clip(r, &active));
        let want = a.return_image;
        let f = frame.clone();
        let samples = self.act_settings().samples;
        let with_thumbnail = a.task.is_some() && self.inner.tasks.busy().is_some();
        let (full, part, luma, thumbnail) = tokio::task::spawn_blocking(move || {
            let full = match want {
                ReturnImage::Full => Some(observe(&f, active, edge, MAX_SCREENSHOT_BYTES)?),
                _ => None,
            };
            let part = match (want, region) {
                (ReturnImage::Region, Some(r)) if r.width > 0 && r.height > 0 => {
                    Some(observe(&f, r, edge, MAX_SCREENSHOT_BYTES)?)
                }
                _ => None,
            };
            let thumbnail = with_thumbnail
                .then(|| observe(&f, active, THUMBNAIL_EDGE, MAX_SCREENSHOT_BYTES).ok())
                .flatten()
                .map(|t| Arc::new(t.png));
            let luma = Arc::new(LumaThumb::of_rect(&f, active, samples));
            Ok::<_, crate::device::video::image::ImageError>((full, part, luma, thumbnail))
        })
        .await
        .map_err(|_| DaemonError::Worker("act answer"))??;
        let image = full.as_ref().map_or_else(|| fit(active.width, active.height, edge), |i| (i.width, i.height));
        let mapping = ObservationMapping { active, source: active, image };
        let epoch = self.geometry_epoch();
        let at = FrameRef { generation: frame.generation, frame_id: frame.sequence, geometry_epoch: epoch };
        let obs = {
            let mut state = self.inner.phone.state();
            let observations = &mut state.observations;
            let obs = observations.insert(at, mapping, a.task, Instant::now());
            observations.set_luma(&obs.id, luma);
            if let Some(t) = thumbnail {
                observations.set_thumbnail(&obs.id, t);
            }
            obs
        };
        if let Some((basis, cancel)) = a.text {
            match self.read_after(frame.clone(), &obs.id, mapping, region, basis, cancel).await {
                Ok(text) => {
                    out.insert("text_lines".into(), lines_json(&text));
                }
                Err(DaemonError::Cancelled) => return Err(DaemonError::Cancelled),
                Err(e) => {
                    out.insert("text_error".into(), e.public_message().into());
                }
            }
        }
        out.insert("changed_region".into(), region.map(|r| image_rect(&r, &mapping)).into());
        out.insert("after_observation_id".into(), obs.id.into());
        out.insert("after_frame_id".into(), frame.sequence.into());
        out.insert("image_size".into(), json!({"width": image.0, "height": image.1}));
        out.insert("ignored_regions".into(), a.rules.ignore.len().into());
        let encode = |png: &[u8]| base64::engine::general_purpose::STANDARD.encode(png);
        if let Some(img) = full {
            out.insert("image".into(), json!({"mime_type": "image/png", "data": encode(&img.png)}));
        }
        if let Some(img) = part {
            out.insert(
                "image".into(),
                json!({
                    "mime_type": "image/png",
                    "data": encode(&img.png),
                    "region": region.map(|r| image_rect(&r, &mapping)),
                    "size": {"width": img.width, "height": img.height},
                }),
            );
        }
        Ok(out)
    }

    /// `wait_for_settle`: waits until the screen stops changing.
    pub(super) async fn wait_for_settle(
        &self,
        acting: Acting,
        p: &WaitForSettleParams,
        cancel: &CancellationToken,
    ) -> Result<Value, DaemonError> {
        let started = Instant::now();
        let baseline = self.sample_now(cancel).await?.ok_or(DaemonError::NoFrame)?;
        // No pointer mask: nothing moves it while this waits (the reasoning is at
        // `ActionRun::pointer_at_baseline` in act.rs).
        let rules = self.change_rules(&baseline.active, &[]);
        let quiet = Duration::from_millis(p.quiet_ms.unwrap_or(self.act_settings().quiet_ms));
        let timeout = Duration::from_millis(p.timeout_ms.unwrap_or(self.act_settings().timeout_ms));
        let what = WatchFor { quiet, timeout, until: Until::Settled };
        let watched = self.watch(&baseline, &rules, started, what, cancel).await?;
        let answer = Answer {
            from: started,
            image_edge: None,
            task: acting.task(),
            return_image: p.return_image.unwrap_or_default(),
            rules: &rules,
            text: None,
        };
        let mut out = self.answer(&watched, answer).await?;
        out.insert("waited_ms".into(), millis(started.elapsed()).into());
        Ok(Value::Object(out))
    }

    /// `wait_for_change`: waits until the screen differs from the named screenshot (or
    /// from the screen when called), then (by default) for it to settle.
    pub(super) async fn wait_for_change(
        &self,
        acting: Acting,
        p: &WaitForChangeParams,
        cancel: &CancellationToken,
    ) -> Result<Value, DaemonError> {
        let started = Instant::now();
        let now = self.sample_now(cancel).await?.ok_or(DaemonError::NoFrame)?;
        let (baseline, image_edge) = match &p.observation_id {
            Some(id) => {
                let generation = self.inner.frames.state().generation;
                let epoch = self.geometry_epoch();
                let obs = self.inner.phone.state().observations.get(id, generation, epoch, Instant::now())?;
                let edge = obs.mapping.image.0.max(obs.mapping.image.1);
                match obs.luma {
                    // What the caller saw, compared with what comes now.
                    Some(thumb) if obs.mapping.active == now.active => {
                        (Sample { thumb, frame_id: obs.frame_id, ..now.clone() }, Some(edge))
                    }
                    _ => (now.clone(), Some(edge)),
                }
            }
            None => (now.clone(), None),
        };
        // The screen now is the baseline: the pointer rests in both pictures, no mask. A named
        // observation may show the pointer elsewhere (input since, unverified): where it
        // rests now is masked, as where it was then is not known.
        let pointer: Vec<(f64, f64)> = match &p.observation_id {
            Some(_) => self.last_pointer().into_iter().collect(),
            None => Vec::new(),
        };
        let rules = self.change_rules(&baseline.active, &pointer);
        let timeout = Duration::from_millis(p.timeout_ms.unwrap_or(5000));
        let quiet = Duration::from_millis(p.quiet_ms.unwrap_or(self.act_settings().quiet_ms));
        let settle = p.settle.unwrap_or(true);
        // Already different from what the caller saw: no need to wait for more.
        let watched = if p.observation_id.is_some() && changed_region(&baseline.thumb, &now.thumb, &rules).is_some() {
            let from = now.captured_at.max(started);
            let base = Sample { captured_at: from, ..now.clone() };
            let mut w = if settle {
                self.watch(&base, &rules, started, WatchFor { quiet, timeout, until: Until::Settled }, cancel).await?
            } else {
                Watched {
                    last: now.clone(),
                    changed: None,
                    settled: true,
                    settled_frame: None,
                    changed_at: None,
                    settled_by: SettledBy::Change,
                }
            };
            w.changed = changed_region(&baseline.thumb, &w.last.thumb, &rules);
            w.changed_at = Some(started);
            w
        } else {
            self.watch(
                &baseline,
                &rules,
                started,
                WatchFor { quiet, timeout, until: Until::Changed { settle } },
                cancel,
            )
            .await?
        };
        let answer = Answer {
            from: watched.changed_at.unwrap_or(started),
            image_edge,
            task: acting.task(),
            return_image: p.return_image.unwrap_or_default(),
            rules: &rules,
            text: None,
        };
        let mut out = self.answer(&watched, answer).await?;
        out.insert("changed".into(), watched.changed_at.is_some().into());
        out.insert("waited_ms".into(), millis(started.elapsed()).into());
        out.insert(
            "changed_after_ms".into(),
            watched.changed_at.map(|at| millis(at.saturating_duration_since(started))).into(),
        );
        Ok(Value::Object(out))
    }
}

/// Whether the screen is still moving: each sample is compared with the one that began the
/// current still stretch (the anchor), not just with the one before it, so a slow fade whose
/// every step is below the threshold still counts once it adds up.
#[derive(Debug, Clone)]
struct Motion {
    anchor: Arc<LumaThumb>,
}

impl Motion {
    fn new(anchor: Arc<LumaThumb>) -> Motion {
        Motion { anchor }
    }

    /// Whether `sample` differs from the anchor; if so it becomes the anchor.
    fn moved(&mut self, sample: &Arc<LumaThumb>, rules: &ChangeRules) -> bool {
        let moved = changed_region(&self.anchor, sample, rules).is_some();
        if moved {
            self.anchor = sample.clone();
        }
        moved
    }
}

/// `r` clipped to `to` (empty when they do not meet).
fn clip(r: PixelRect, to: &PixelRect) -> PixelRect {
    let x0 = r.x.max(to.x);
    let y0 = r.y.max(to.y);
    let x1 = (r.x.saturating_add(r.width)).min(to.x.saturating_add(to.width));
    let y1 = (r.y.saturating_add(r.height)).min(to.y.saturating_add(to.height));
    PixelRect { x: x0, y: y0, width: x1.saturating_sub(x0), height: y1.saturating_sub(y0) }
}

/// A rectangle of frame pixels in an observation's image pixels (covering it).
fn image_rect(r: &PixelRect, m: &ObservationMapping) -> Value {
    let (iw, ih) = (f64::from(m.image.0), f64::from(m.image.1));
    let sx = iw / f64::from(m.source.width.max(1));
    let sy = ih / f64::from(m.source.height.max(1));
    let x0 = (f64::from(r.x.saturating_sub(m.source.x)) * sx).floor().clamp(0.0, iw);
    let y0 = (f64::from(r.y.saturating_sub(m.source.y)) * sy).floor().clamp(0.0, ih);
    let x1 = (f64::from((r.x + r.width).saturating_sub(m.source.x)) * sx).ceil().clamp(0.0, iw);
    let y1 = (f64::from((r.y + r.height).saturating_sub(m.source.y)) * sy).ceil().clamp(0.0, ih);
    json!({"x": to_u32(x0), "y": to_u32(y0), "width": to_u32(x1 - x0), "height": to_u32(y1 - y0)})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(v: u8) -> Arc<LumaThumb> {
        let data: Vec<u8> = (0..64 * 64).flat_map(|_| [v, v, v]).collect();
        Arc::new(LumaThumb::of(&Frame::rgb(1, 1, 64, 64, data), 64))
    }

    #[test]
    fn a_slow_fade_is_motion_once_it_adds_up_and_stillness_is_not() {
        let rules = ChangeRules::default();
        let mut motion = Motion::new(flat(100));
        // +5 luma a frame: under the threshold (12) from one frame to the next...
        assert!(changed_region(&flat(105), &flat(110), &rules).is_none());
        let moved: Vec<bool> = [105, 110, 115, 120, 125, 130].iter().map(|&v| motion.moved(&flat(v), &rules)).collect();
        // ...but against where the still stretch began it moves every few frames.
        assert_eq!(moved, [false, false, true, false, false, true]);
        assert!(!motion.moved(&flat(130), &rules) && !motion.moved(&flat(131), &rules), "still");
    }

    /// Plays `frames` (luma values, one every `every` ms from the input's last report on,
    /// after a baseline of 100) through the motion and still-frames rules; the index of
    /// the frame the still rule settles at.
    fn still_settles_at(frames: &[u8], every: u64) -> Option<usize> {
        let rules = ChangeRules::default();
        let baseline = flat(100);
        let mut motion = Motion::new(baseline.clone());
        let mut still = Stillness::new(Duration::from_millis(DEFAULT_STILL_MS));
        let t0 = Instant::now();
        frames.iter().enumerate().position(|(i, &v)| {
            let thumb = flat(v);
            let moved = motion.moved(&thumb, &rules);
            let differs = changed_region(&baseline, &thumb, &rules).is_some();
            let frame_id = u64::try_from(i).unwrap();
            let at = t0 + Duration::from_millis(every * frame_id);
            still.push(StillSample { thumb: &thumb, at, frame_id, after_input: true, moved, differs }, &rules)
        })
    }

    #[test]
    fn a_single_step_change_settles_after_still_frames() {
        // 30 fps: the change, then two identical frames span 66 ms.
        assert_eq!(still_settles_at(&[200, 200, 200, 200], 33), Some(2));
        // 60 fps: four intervals reach 60 ms.
        assert_eq!(still_settles_at(&[200, 200, 200, 200, 200, 200], 17), Some(4));
        // No change at all: the rule never settles (the quiet window does).
        assert_eq!(still_settles_at(&[100; 10], 33), None);
    }

    #[test]
    fn a_step_stamped_late_is_not_still_long_enough() {
        // 60 fps, a spinner stepping every 60 ms: four frames show one step; the last is
        // stamped 15 ms late, so their capture times span 65 ms, but they are three frames.
        let rules = ChangeRules::default();
        let mut still = Stillness::new(Duration::from_millis(DEFAULT_STILL_MS));
        let t0 = Instant::now();
        let step = flat(200);
        let settled: Vec<bool> = [(0u64, 0u64), (1, 17), (2, 33), (3, 65)]
            .iter()
            .map(|&(frame_id, ms)| {
                let at = t0 + Duration::from_millis(ms);
                let s =
                    StillSample { thumb: &step, at, frame_id, after_input: true, moved: frame_id == 0, differs: true };
                still.push(s, &rules)
            })
            .collect();
        assert_eq!(settled, [false; 4]);
    }

    #[test]
    fn a_spinner_never_settles_by_still_frames() {
        // Two states alternating every other frame: changes keep coming.
        let spinner = [200, 200, 150, 150, 200, 200, 150, 150, 200, 200, 150, 150];
        assert_eq!(still_settles_at(&spinner, 33), None);
        // The sim's spinner at 30 fps: a step every 60 ms, seen every other frame or two.
        let sim = [200, 200, 150, 200, 200, 150, 150, 200, 200, 150, 200, 200, 150, 150];
        assert_eq!(still_settles_at(&sim, 33), None);
    }

    #[test]
    fn an_animation_settles_once_still_for_twice_its_longest_step() {
        // Moving every frame for 7 frames at 30 fps, then resting: the still stretch begins
        // at the last moving frame (index 6) and settles 100 ms later (index 10), not 60.
        let mut anim: Vec<u8> = (0..7).map(|i| 120 + 20 * i).collect();
        anim.extend([240; 8]);
        assert_eq!(still_settles_at(&anim, 33), Some(10));
        // Steps two frames apart: twice 66 ms of stillness are needed.
        let mut stepped: Vec<u8> = vec![140, 140, 180, 180, 220, 220];
        stepped.extend([240; 8]);
        assert_eq!(still_settles_at(&stepped, 33), Some(6 + 4));
    }

    #[test]
    fn a_slow_fade_never_settles_by_still_frames() {
        // +2 luma a frame: below the threshold frame to frame, never bit-identical.
        let fade: Vec<u8> = (0..20).map(|i| 120 + 2 * i).collect();
        assert_eq!(still_settles_at(&fade, 33), None);
        // A change that eases in over a few frames, then rests: the ease is one change
        // (below the motion threshold from its anchor), and identical frames then settle it.
        assert_eq!(still_settles_at(&[200, 205, 206, 206, 206], 33), Some(4));
    }

    #[test]
    fn frames_of_the_input_itself_start_stretches_but_are_not_changes() {
        let rules = ChangeRules::default();
        let mut still = Stillness::new(Duration::from_millis(DEFAULT_STILL_MS));
        let t0 = Instant::now();
        let (pressed, effect) = (flat(60), flat(200));
        let mut push = |thumb: &Arc<LumaThumb>, ms: u64, after_input: bool, moved: bool| {
            let at = t0 + Duration::from_millis(ms);
            let frame_id = ms / 33;
            still.push(StillSample { thumb, at, frame_id, after_input, moved, differs: true }, &rules)
        };
        // The pressed pointer, then the effect, both before the last report.
        assert!(!push(&pressed, 0, false, true));
        assert!(!push(&effect, 33, false, true));
        assert!(!push(&effect, 66, true, false));
        assert!(push(&effect, 99, true, false), "settled: the effect's frames span 66 ms");
    }

    #[test]
    fn unit_rects_and_image_rects_map_through_the_picture() {
        let active = PixelRect { x: 711, y: 0, width: 498, height: 1080 };
        let clock = ActSettings::default().ignore[0].in_frame(&active);
        assert_eq!(clock, PixelRect { x: 711, y: 0, width: 224, height: 65 });
        let m = ObservationMapping { active, source: active, image: (249, 540) };
        let r = image_rect(&PixelRect { x: 811, y: 100, width: 50, height: 51 }, &m);
        assert_eq!(r, json!({"x": 50, "y": 50, "width": 25, "height": 26}));
        assert_eq!(clip(PixelRect { x: 0, y: 0, width: 800, height: 20 }, &active).x, 711);
        assert_eq!(clip(PixelRect { x: 0, y: 0, width: 10, height: 20 }, &active).width, 0);
        assert!(ActSettings::default().check().is_ok());
        let bad =
            ActSettings { ignore: vec![UnitRect { x: 0.5, y: 0.0, width: 2.0, height: 0.1 }], ..Default::default() };
        assert!(bad.check().unwrap_err().contains("act.ignore[0]"));
    }
}
