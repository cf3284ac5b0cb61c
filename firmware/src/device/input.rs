//! Gestures → timed HID report sequences, with the iOS timings from DESIGN.md.
//!
//! Everything here is pure: a [`Gesture`] in HID units plus [`InputTimings`] gives a list of
//! [`InputStep`]s. The daemon's input lane runs them and releases anything still held on
//! cancellation.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::device::hid::{
    ConsumerReport, HidReport, KeyStroke, KeyboardReport, MouseReport, PointerReport, MOD_GUI, POINTER_MAX, POINTER_MIN,
};

/// One step of an input sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputStep {
    /// Write a report.
    Report(HidReport),
    /// Wait before the next step.
    Wait(Duration),
}

/// Every timing of the input engine, in milliseconds. Defaults are the reliable values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InputTimings {
    /// Wait after moving before pressing: iOS glides the pointer (80 seen, 250 reliable).
    pub settle_ms: u64,
    /// How long a tap holds the button.
    pub tap_hold_ms: u64,
    /// How many release reports end a press.
    pub release_repeats: u32,
    /// Gap between repeated release reports.
    pub release_gap_ms: u64,
    /// Gap between the two taps of a double tap.
    pub double_tap_gap_ms: u64,
    /// How long a long press holds (iOS needs at least 1500).
    pub long_press_ms: u64,
    /// Default swipe/drag duration (600–900 feels like a finger).
    pub swipe_ms: u64,
    /// Spacing of pointer reports along a drag.
    pub report_interval_ms: u64,
    /// How long a key is held.
    pub key_hold_ms: u64,
    /// Gap after releasing a key.
    pub key_gap_ms: u64,
}

impl Default for InputTimings {
    fn default() -> Self {
        InputTimings {
            settle_ms: 150,
            tap_hold_ms: 80,
            release_repeats: 3,
            release_gap_ms: 15,
            double_tap_gap_ms: 100,
            long_press_ms: 1600,
            swipe_ms: 700,
            report_interval_ms: 8,
            key_hold_ms: 20,
            key_gap_ms: 20,
        }
    }
}

/// Most release reports a press ends with (more only lengthen the sequence).
pub const MAX_RELEASE_REPEATS: u32 = 16;

impl InputTimings {
    /// Checks that every timing is in a range a phone can use; the error names the field.
    /// Bounds keep planning finite (a drag at 0 ms intervals, a million release reports).
    pub fn validate(&self) -> Result<(), String> {
        let ranges: [(&str, u64, u64, u64); 10] = [
            ("settle_ms", self.settle_ms, 0, 5_000),
            ("tap_hold_ms", self.tap_hold_ms, 1, 5_000),
            ("release_repeats", u64::from(self.release_repeats), 1, u64::from(MAX_RELEASE_REPEATS)),
            ("release_gap_ms", self.release_gap_ms, 0, 1_000),
            ("double_tap_gap_ms", self.double_tap_gap_ms, 1, 2_000),
            ("long_press_ms", self.long_press_ms, 100, 10_000),
            ("swipe_ms", self.swipe_ms, 50, 5_000),
            ("report_interval_ms", self.report_interval_ms, 1, 100),
            ("key_hold_ms", self.key_hold_ms, 1, 1_000),
            ("key_gap_ms", self.key_gap_ms, 0, 1_000),
        ];
        for (name, value, min, max) in ranges {
            if !(min..=max).contains(&value) {
                return Err(format!("input.{name} = {value} is outside {min}..={max}"));
            }
        }
        Ok(())
    }

    /// Release reports per press: `release_repeats` within 1..=[`MAX_RELEASE_REPEATS`].
    fn releases(&self) -> u32 {
        self.release_repeats.clamp(1, MAX_RELEASE_REPEATS)
    }
}

/// A point in HID units (1..=32767 on each axis).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HidPoint {
    /// X.
    pub x: u16,
    /// Y.
    pub y: u16,
}

impl HidPoint {
    /// A point, clamped into the valid range (never 0).
    pub fn new(x: u16, y: u16) -> Self {
        HidPoint { x: x.clamp(POINTER_MIN, POINTER_MAX), y: y.clamp(POINTER_MIN, POINTER_MAX) }
    }
}

/// Something a person does to the phone, in HID units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gesture {
    /// Move the pointer without touching.
    Move(HidPoint),
    /// Touch and lift.
    Tap(HidPoint),
    /// Two taps.
    DoubleTap(HidPoint),
    /// Touch, hold, lift.
    LongPress(HidPoint),
    /// Touch at the first point, follow the path, lift at the last.
    Drag {
        /// At least two points.
        path: Vec<HidPoint>,
        /// Duration of the movement.
        duration: Duration,
    },
    /// A key with modifiers.
    Key(KeyStroke),
    /// Several strokes in order (typing).
    Type(Vec<KeyStroke>),
    /// A consumer-control usage (volume, media).
    Consumer(u16),
}

fn pointer(buttons: u8, p: HidPoint) -> InputStep {
    InputStep::Report(HidReport::Pointer(PointerReport::new(buttons, p.x, p.y, 0)))
}

fn wait(ms: u64) -> InputStep {
    InputStep::Wait(Duration::from_millis(ms))
}

fn keyboard(modifiers: u8, usage: u8) -> InputStep {
    InputStep::Report(HidReport::Keyboard(KeyboardReport { modifiers, keys: [usage, 0, 0, 0, 0, 0] }))
}

/// Press at `p` after moving there and letting the glide finish.
fn touch_down(steps: &mut Vec<InputStep>, t: &InputTimings, p: HidPoint) {
    steps.push(pointer(0, p));
    steps.push(wait(t.settle_ms));
    steps.push(pointer(1, p));
}

/// Release at `p`, repeated so a lost report cannot leave the finger down.
fn touch_up(steps: &mut Vec<InputStep>, t: &InputTimings, p: HidPoint) {
    for i in 0..t.releases() {
        if i > 0 {
            steps.push(wait(t.release_gap_ms));
        }
        steps.push(pointer(0, p));
    }
}

/// Smoothstep ease-in-out on 0..=1.
fn ease(u: f64) -> f64 {
    u * u * (3.0 - 2.0 * u)
}

/// The point at fraction `u` of the polyline's length.
fn along(path: &[HidPoint], u: f64) -> HidPoint {
    let seg_len = |a: &HidPoint, b: &HidPoint| (f64::from(b.x) - f64::from(a.x)).hypot(f64::from(b.y) - f64::from(a.y));
    let total: f64 = path.windows(2).map(|w| seg_len(&w[0], &w[1])).sum();
    let mut remaining = u.clamp(0.0, 1.0) * total;
    for w in path.windows(2) {
        let l = seg_len(&w[0], &w[1]);
        if remaining <= l && l > 0.0 {
            let f = remaining / l;
            let x = f64::from(w[0].x) + (f64::from(w[1].x) - f64::from(w[0].x)) * f;
            let y = f64::from(w[0].y) + (f64::from(w[1].y) - f64::from(w[0].y)) * f;
            return HidPoint::new(to_u16(x), to_u16(y));
        }
        remaining -= l;
    }
    path.last().copied().unwrap_or(HidPoint::new(POINTER_MIN, POINTER_MIN))
}

fn to_u16(v: f64) -> u16 {
    // Clamped into u16's range first, so the cast cannot truncate.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let r = v.round().clamp(0.0, f64::from(u16::MAX)) as u16;
    r
}

/// Plans `gesture` as timed report steps.
pub fn plan(gesture: &Gesture, t: &InputTimings) -> Vec<InputStep> {
    let mut s = Vec::new();
    match gesture {
        Gesture::Move(p) => s.push(pointer(0, *p)),
        Gesture::Tap(p) => {
            touch_down(&mut s, t, *p);
            s.push(wait(t.tap_hold_ms));
            touch_up(&mut s, t, *p);
        }
        Gesture::DoubleTap(p) => {
            touch_down(&mut s, t, *p);
            s.push(wait(t.tap_hold_ms));
            s.push(pointer(0, *p));
            s.push(wait(t.double_tap_gap_ms));
            s.push(pointer(1, *p));
            s.push(wait(t.tap_hold_ms));
            touch_up(&mut s, t, *p);
        }
        Gesture::LongPress(p) => {
            touch_down(&mut s, t, *p);
            s.push(wait(t.long_press_ms));
            touch_up(&mut s, t, *p);
        }
        Gesture::Drag { path, duration } => {
            let (Some(first), Some(last)) = (path.first(), path.last()) else {
                return s;
            };
            touch_down(&mut s, t, *first);
            let interval = t.report_interval_ms.max(1);
            let total_ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX).max(interval);
            let n = (total_ms / interval).max(1);
            for i in 1..=n {
                s.push(wait(interval));
                // i and n are small (a drag is at most a few seconds), so f64 is exact.
                #[allow(clippy::cast_precision_loss)]
                let u = ease(i as f64 / n as f64);
                s.push(pointer(1, along(path, u)));
            }
            touch_up(&mut s, t, *last);
        }
        Gesture::Key(k) => {
            s.push(keyboard(k.modifiers, k.usage));
            s.push(wait(t.key_hold_ms));
            s.push(keyboard(0, 0));
        }
        Gesture::Type(strokes) => {
            for (i, k) in strokes.iter().enumerate() {
                if i > 0 {
                    s.push(wait(t.key_gap_ms));
                }
                s.push(keyboard(k.modifiers, k.usage));
                s.push(wait(t.key_hold_ms));
                s.push(keyboard(0, 0));
            }
        }
        Gesture::Consumer(usage) => {
            s.push(InputStep::Report(HidReport::Consumer(ConsumerReport { usage: *usage })));
            s.push(wait(t.key_hold_ms));
            s.push(InputStep::Report(HidReport::Consumer(ConsumerReport { usage: 0 })));
        }
    }
    s
}

/// Cmd+H: go to the home screen.
pub const HOME: KeyStroke = KeyStroke { usage: 0x0B, modifiers: MOD_GUI };
/// Cmd+Space: Spotlight.
pub const SPOTLIGHT: KeyStroke = KeyStroke { usage: 0x2C, modifiers: MOD_GUI };
/// Cmd+[: back.
pub const BACK: KeyStroke = KeyStroke { usage: 0x2F, modifiers: MOD_GUI };

/// The app switcher: a slow swipe up from the bottom edge that pauses before lifting.
pub fn app_switcher(t: &InputTimings) -> Vec<InputStep> {
    let from = HidPoint::new(16384, 32700);
    let to = HidPoint::new(16384, 19000);
    let mut s = plan(&Gesture::Drag { path: vec![from, to], duration: Duration::from_millis(800) }, t);
    // Hold still before the release reports so iOS reads it as a pause, not a fling.
    let release_at = s.len() - usize::try_from(t.releases() * 2 - 1).unwrap_or(1);
    s.insert(release_at, wait(600));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reports(steps: &[InputStep]) -> Vec<HidReport> {
        steps.iter().filter_map(|s| if let InputStep::Report(r) = s { Some(*r) } else { None }).collect()
    }

    fn total_wait(steps: &[InputStep]) -> Duration {
        steps.iter().map(|s| if let InputStep::Wait(d) = s { *d } else { Duration::ZERO }).sum()
    }

    #[test]
    fn tap_moves_settles_presses_holds_and_releases_three_times() {
        let t = InputTimings::default();
        let steps = plan(&Gesture::Tap(HidPoint::new(100, 200)), &t);
        let p = |b| InputStep::Report(HidReport::Pointer(PointerReport::new(b, 100, 200, 0)));
        assert_eq!(steps, vec![p(0), wait(150), p(1), wait(80), p(0), wait(15), p(0), wait(15), p(0)]);
    }

    #[test]
    fn never_zero() {
        let steps = plan(&Gesture::Tap(HidPoint::new(0, 0)), &InputTimings::default());
        for r in reports(&steps) {
            let bytes = r.encode();
            assert_ne!(&bytes.as_bytes()[1..5], &[0, 0, 0, 0]);
        }
    }

    #[test]
    fn drag_is_eased_at_8ms_and_ends_at_the_target() {
        let t = InputTimings::default();
        let path = vec![HidPoint::new(1000, 30000), HidPoint::new(1000, 2000)];
        let steps = plan(&Gesture::Drag { path, duration: Duration::from_millis(800) }, &t);
        let rs = reports(&steps);
        let ys: Vec<u16> = rs
            .iter()
            .filter_map(|r| if let HidReport::Pointer(p) = r { (p.buttons() == 1).then_some(p.y()) } else { None })
            .collect();
        assert_eq!(ys.len(), 101, "press + 100 moves");
        assert!(ys.windows(2).all(|w| w[1] <= w[0]), "monotonic");
        // Eased: the first step is smaller than a middle step.
        assert!(ys[0] - ys[1] < ys[50] - ys[51]);
        assert_eq!(*ys.last().unwrap(), 2000);
        assert_eq!(total_wait(&steps), Duration::from_millis(150 + 800 + 30));
        assert!(!rs.last().unwrap().holds_input());
    }

    #[test]
    fn long_press_holds_at_least_1500ms() {
        let t = InputTimings::default();
        let steps = plan(&Gesture::LongPress(HidPoint::new(5, 5)), &t);
        let held: Duration = steps
            .iter()
            .skip_while(|s| !matches!(s, InputStep::Report(HidReport::Pointer(p)) if p.buttons() == 1))
            .take_while(|s| !matches!(s, InputStep::Report(HidReport::Pointer(p)) if p.buttons() == 0))
            .map(|s| if let InputStep::Wait(d) = s { *d } else { Duration::ZERO })
            .sum();
        assert!(held >= Duration::from_millis(1500));
    }

    #[test]
    fn typing_releases_between_strokes() {
        let k = KeyStroke { usage: 0x04, modifiers: 0 };
        let rs = reports(&plan(&Gesture::Type(vec![k, k]), &InputTimings::default()));
        assert_eq!(rs.len(), 4);
        assert!(rs[0].holds_input() && !rs[1].holds_input() && rs[2].holds_input() && !rs[3].holds_input());
    }

    #[test]
    fn app_switcher_pauses_before_release() {
        let t = InputTimings::default();
        let s = app_switcher(&t);
        let n = s.len();
        assert_eq!(s[n - 6], wait(600));
        assert!(matches!(s[n - 5], InputStep::Report(HidReport::Pointer(p)) if p.buttons() == 0));
    }
}

/// Relative-mouse planning (the fallback pointer profile).
///
/// iOS accelerates relative mice: the distance moved per count grows with the speed of the
/// report stream, so a big delta cannot be trusted. We home the pointer into the top-left
/// corner (the screen edge stops it, however accelerated the motion), then move with at most
/// [`RelativePlanner::MAX_STEP`] counts per axis per report, where the gain stays at its
/// base value, and track the position by dead reckoning. Any failed or cancelled sequence
/// forgets the position, so the next one homes again.
#[derive(Debug, Clone)]
pub struct RelativePlanner {
    counts_per_screen: (f64, f64),
    position: Option<(i64, i64)>,
}

impl RelativePlanner {
    /// Largest per-axis delta per report while positioning.
    pub const MAX_STEP: i64 = 2;
    /// Spacing of positioning reports.
    pub const STEP_INTERVAL: Duration = Duration::from_millis(4);
    /// Reports of -127 that home the pointer from anywhere.
    const HOME_REPORTS: usize = 40;

    /// Largest screen size in counts the planner accepts: a screen crossed in 2-count
    /// steps every 4 ms, so 10 000 counts already take 20 s.
    pub const MAX_COUNTS_PER_SCREEN: f64 = 10_000.0;

    /// A planner for a screen `counts_per_screen` base-gain counts wide and high. Each axis
    /// is clamped into 1..=[`Self::MAX_COUNTS_PER_SCREEN`] (NaN counts as 1): the plan's
    /// length grows with it, and an infinite screen never arrives.
    pub fn new(counts_per_screen: (f64, f64)) -> Self {
        let sane = |v: f64| if v.is_nan() { 1.0 } else { v.clamp(1.0, Self::MAX_COUNTS_PER_SCREEN) };
        RelativePlanner { counts_per_screen: (sane(counts_per_screen.0), sane(counts_per_screen.1)), position: None }
    }

    /// Forgets the position (after a failure, or when someone else moved the pointer).
    pub fn forget(&mut self) {
        self.position = None;
    }

    fn mouse(buttons: u8, dx: i64, dy: i64) -> InputStep {
        let c = |v: i64| i8::try_from(v.clamp(-127, 127)).unwrap_or(0);
        InputStep::Report(HidReport::Mouse(MouseReport { buttons, dx: c(dx), dy: c(dy), wheel: 0 }))
    }

    /// Moves the pointer to `p` (HID units, read as a fraction of the screen).
    fn move_to(&mut self, s: &mut Vec<InputStep>, buttons: u8, p: HidPoint) {
        let full = f64::from(POINTER_MAX) + 1.0;
        // Rounded counts: well inside i64 for any screen.
        #[allow(clippy::cast_possible_truncation)]
        let target = (
            (f64::from(p.x) / full * self.counts_per_screen.0).round() as i64,
            (f64::from(p.y) / full * self.counts_per_screen.1).round() as i64,
        );
        let mut at = match self.position {
            Some(at) => at,
            None => {
                for _ in 0..Self::HOME_REPORTS {
                    s.push(Self::mouse(buttons, -127, -127));
                    s.push(InputStep::Wait(Self::STEP_INTERVAL));
                }
                (0, 0)
            }
        };
        while at != target {
            let dx = (target.0 - at.0).clamp(-Self::MAX_STEP, Self::MAX_STEP);
            let dy = (target.1 - at.1).clamp(-Self::MAX_STEP, Self::MAX_STEP);
            s.push(Self::mouse(buttons, dx, dy));
            s.push(InputStep::Wait(Self::STEP_INTERVAL));
            at = (at.0 + dx, at.1 + dy);
        }
        self.position = Some(at);
    }

    fn press_release(s: &mut Vec<InputStep>, t: &InputTimings, hold: u64) {
        s.push(Self::mouse(1, 0, 0));
        s.push(wait(hold));
        for i in 0..t.releases() {
            if i > 0 {
                s.push(wait(t.release_gap_ms));
            }
            s.push(Self::mouse(0, 0, 0));
        }
    }

    /// Plans `gesture` with relative reports; keyboard and consumer gestures are the same
    /// as with the absolute profile.
    pub fn plan(&mut self, gesture: &Gesture, t: &InputTimings) -> Vec<InputStep> {
        let mut s = Vec::new();
        match gesture {
            Gesture::Move(p) => self.move_to(&mut s, 0, *p),
            Gesture::Tap(p) => {
                self.move_to(&mut s, 0, *p);
                Self::press_release(&mut s, t, t.tap_hold_ms);
            }
            Gesture::DoubleTap(p) => {
                self.move_to(&mut s, 0, *p);
                Self::press_release(&mut s, t, t.tap_hold_ms);
                s.push(wait(t.double_tap_gap_ms));
                Self::press_release(&mut s, t, t.tap_hold_ms);
            }
            Gesture::LongPress(p) => {
                self.move_to(&mut s, 0, *p);
                Self::press_release(&mut s, t, t.long_press_ms);
            }
            Gesture::Drag { path, .. } => {
                let Some(first) = path.first() else { return s };
                self.move_to(&mut s, 0, *first);
                s.push(Self::mouse(1, 0, 0));
                for p in &path[1..] {
                    self.move_to(&mut s, 1, *p);
                }
                for i in 0..t.releases() {
                    if i > 0 {
                        s.push(wait(t.release_gap_ms));
                    }
                    s.push(Self::mouse(0, 0, 0));
                }
            }
            other => return plan(other, t),
        }
        s
    }
}

#[cfg(test)]
mod relative_tests {
    use super::*;

    fn deltas(steps: &[InputStep]) -> Vec<(u8, i8, i8)> {
        steps
            .iter()
            .filter_map(|s| match s {
                InputStep::Report(HidReport::Mouse(m)) => Some((m.buttons, m.dx, m.dy)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn hostile_screen_sizes_and_repeats_stay_bounded() {
        // Found by the geometry_plan fuzz target: counts_per_screen of 1e300 (or infinity) made
        // move_to step 2 counts at a time towards i64::MAX until memory ran out.
        let t = InputTimings { release_repeats: u32::MAX, ..InputTimings::default() };
        for counts in [(1e300, 1e300), (f64::INFINITY, f64::NAN), (-5.0, 0.0)] {
            let steps = RelativePlanner::new(counts).plan(&Gesture::Tap(HidPoint::new(32767, 32767)), &t);
            assert!(steps.len() < 40_000, "{counts:?}: {} steps", steps.len());
            assert!(!reports_of(&steps).last().unwrap().holds_input());
        }
        // u32::MAX release repeats: planned as MAX_RELEASE_REPEATS, and the app switcher's
        // `repeats * 2 - 1` no longer overflows.
        let tap = plan(&Gesture::Tap(HidPoint::new(1, 1)), &t);
        assert_eq!(reports_of(&tap).len(), 2 + MAX_RELEASE_REPEATS as usize);
        assert!(!reports_of(&app_switcher(&t)).last().unwrap().holds_input());
        assert!(t.validate().is_err());
        assert!(InputTimings { swipe_ms: 1_000_000, ..InputTimings::default() }.validate().is_err());
        assert!(InputTimings::default().validate().is_ok());
    }

    fn reports_of(steps: &[InputStep]) -> Vec<HidReport> {
        steps.iter().filter_map(|s| if let InputStep::Report(r) = s { Some(*r) } else { None }).collect()
    }

    #[test]
    fn homes_once_then_moves_in_small_steps_by_dead_reckoning() {
        let t = InputTimings::default();
        let mut r = RelativePlanner::new((393.0, 852.0));
        let first = deltas(&r.plan(&Gesture::Move(HidPoint::new(16384, 16384)), &t));
        assert!(first[..40].iter().all(|&d| d == (0, -127, -127)), "homes first");
        let moved: (i64, i64) = first[40..].iter().fold((0, 0), |a, d| (a.0 + i64::from(d.1), a.1 + i64::from(d.2)));
        assert_eq!(moved, (197, 426));
        assert!(first[40..].iter().all(|d| d.1.abs() <= 2 && d.2.abs() <= 2));
        let second = deltas(&r.plan(&Gesture::Tap(HidPoint::new(16384, 17000)), &t));
        assert!(second.iter().all(|d| d.1 != -127), "no re-homing while the position is known");
        let dy: i64 = second.iter().map(|d| i64::from(d.2)).sum();
        assert_eq!(dy, 16, "moves only the difference");
        assert_eq!(second.iter().filter(|d| d.0 == 1).count(), 1, "one press");
        r.forget();
        assert_eq!(deltas(&r.plan(&Gesture::Move(HidPoint::new(1, 1)), &t))[0], (0, -127, -127));
    }
}
