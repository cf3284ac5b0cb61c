//! Screenshot geometry and gesture planning with hostile numbers: regions, `max_edge`,
//! frame sizes, active rectangles, observation coordinates, timings and gestures.
//!
//! Invariants: containment agrees with exact (u128) arithmetic; `sub_rect` is `Some` exactly
//! for non-empty regions inside; `fit` stays within `max_edge` and never returns 0;
//! `crop_scale`/`observe` return what they promise; every mapped point is in HID 1..=32767;
//! every planned gesture (absolute and relative) ends with nothing held on any interface.
#![no_main]
#![forbid(unsafe_code)]

use std::time::Duration;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tether::daemon::InputStep;
use tether::device::geometry::{detect_active_rect, ObservationMapping, PixelRect};
use tether::device::hid::{HidInterface, HidReport, KeyStroke, POINTER_MAX, POINTER_MIN};
use tether::device::input::{plan, Gesture, HidPoint, InputTimings, RelativePlanner};
use tether::device::video::image::{crop_scale, fit, observe};
use tether::device::video::Frame;

#[derive(Debug, Arbitrary)]
struct Rect {
    x: u32,
    y: u32,
    width: u32,
    height: u32,
}

impl Rect {
    fn pixel(&self) -> PixelRect {
        PixelRect { x: self.x, y: self.y, width: self.width, height: self.height }
    }
}

#[derive(Debug, Arbitrary)]
struct Timings {
    settle_ms: u16,
    tap_hold_ms: u16,
    release_repeats: u8,
    release_gap_ms: u16,
    double_tap_gap_ms: u16,
    long_press_ms: u16,
    swipe_ms: u16,
    report_interval_ms: u8,
    key_hold_ms: u16,
    key_gap_ms: u16,
}

impl Timings {
    /// Bounded so that one plan stays small; the shapes (zeros, one repeat) stay reachable.
    fn input(&self) -> InputTimings {
        InputTimings {
            settle_ms: u64::from(self.settle_ms),
            tap_hold_ms: u64::from(self.tap_hold_ms),
            release_repeats: u32::from(self.release_repeats % 8),
            release_gap_ms: u64::from(self.release_gap_ms),
            double_tap_gap_ms: u64::from(self.double_tap_gap_ms),
            long_press_ms: u64::from(self.long_press_ms),
            swipe_ms: u64::from(self.swipe_ms),
            report_interval_ms: u64::from(self.report_interval_ms),
            key_hold_ms: u64::from(self.key_hold_ms),
            key_gap_ms: u64::from(self.key_gap_ms),
        }
    }
}

#[derive(Debug, Arbitrary)]
enum G {
    Move(u16, u16),
    Tap(u16, u16),
    DoubleTap(u16, u16),
    LongPress(u16, u16),
    Drag { path: Vec<(u16, u16)>, duration_ms: u16 },
    Key(u8, u8),
    Type(Vec<(u8, u8)>),
    Consumer(u16),
}

impl G {
    fn gesture(&self) -> Gesture {
        let p = |&(x, y): &(u16, u16)| HidPoint::new(x, y);
        match self {
            G::Move(x, y) => Gesture::Move(p(&(*x, *y))),
            G::Tap(x, y) => Gesture::Tap(p(&(*x, *y))),
            G::DoubleTap(x, y) => Gesture::DoubleTap(p(&(*x, *y))),
            G::LongPress(x, y) => Gesture::LongPress(p(&(*x, *y))),
            G::Drag { path, duration_ms } => Gesture::Drag {
                path: path.iter().take(64).map(p).collect(),
                // Under 4.1 s: a drag plans one step per report interval, and 65 s drags
                // at 1 ms (130 000 steps, twice) made most executions about the loop, not
                // the shapes. `config` checks the step bound of long drags.
                duration: Duration::from_millis(u64::from(*duration_ms % 4096)),
            },
            G::Key(usage, modifiers) => Gesture::Key(KeyStroke { usage: *usage, modifiers: *modifiers }),
            G::Type(keys) => {
                Gesture::Type(keys.iter().take(64).map(|&(usage, modifiers)| KeyStroke { usage, modifiers }).collect())
            }
            G::Consumer(u) => Gesture::Consumer(*u),
        }
    }
}

#[derive(Debug, Arbitrary)]
struct Input {
    /// Frame size (small: the pixel loops run on it).
    frame_w: u8,
    frame_h: u8,
    /// A lit box in the frame, so detection has something to find.
    lit: Rect,
    region: Rect,
    max_edge: u32,
    max_bytes: u16,
    active: Rect,
    source: Rect,
    image: (u32, u32),
    obs: (f64, f64),
    timings: Timings,
    counts_per_screen: (f64, f64),
    gestures: Vec<G>,
}

fn check_containment(outer: &PixelRect, inner: &PixelRect) {
    let exact = u128::from(inner.x) >= u128::from(outer.x)
        && u128::from(inner.y) >= u128::from(outer.y)
        && u128::from(inner.x) + u128::from(inner.width) <= u128::from(outer.x) + u128::from(outer.width)
        && u128::from(inner.y) + u128::from(inner.height) <= u128::from(outer.y) + u128::from(outer.height);
    assert_eq!(outer.contains_rect(inner), exact, "{outer:?} ⊇ {inner:?}");
    let shifted = (u64::from(outer.x) + u64::from(inner.x), u64::from(outer.y) + u64::from(inner.y));
    // Inside, and its absolute position is representable.
    let inside = shifted.0 <= u64::from(u32::MAX)
        && shifted.1 <= u64::from(u32::MAX)
        && inner.width > 0
        && inner.height > 0
        && u64::from(inner.x) + u64::from(inner.width) <= u64::from(outer.width)
        && u64::from(inner.y) + u64::from(inner.height) <= u64::from(outer.height);
    match outer.sub_rect(inner) {
        Some(r) => {
            assert!(inside, "sub_rect accepted {inner:?} in {outer:?}");
            assert_eq!((u64::from(r.x), u64::from(r.y)), shifted);
            assert_eq!((r.width, r.height), (inner.width, inner.height));
            assert!(outer.contains_rect(&r));
        }
        None => assert!(!inside, "sub_rect refused {inner:?} in {outer:?}"),
    }
}

fn check_mapping(m: &ObservationMapping, x: f64, y: f64) {
    let (iw, ih) = m.image;
    let inside = x >= 0.0 && y >= 0.0 && x < f64::from(iw) && y < f64::from(ih);
    match (m.to_normalized(x, y), m.to_hid(x, y)) {
        (Ok((nx, ny)), Ok((hx, hy))) => {
            assert!(inside, "mapped a point outside the image: {m:?} ({x}, {y})");
            assert!((0.0..=1.0).contains(&nx) && (0.0..=1.0).contains(&ny), "{m:?} ({x}, {y}) -> ({nx}, {ny})");
            for h in [hx, hy] {
                assert!((POINTER_MIN..=POINTER_MAX).contains(&h), "{m:?} ({x}, {y}) -> HID {h}");
            }
        }
        (Err(_), Err(_)) => assert!(!inside, "refused a point inside the image: {m:?} ({x}, {y})"),
        other => panic!("to_normalized and to_hid disagree: {other:?}"),
    }
}

/// Replays `steps` and checks that every interface they touched ends released, and that
/// every pointer report is inside the HID range.
fn check_plan(steps: &[InputStep], what: &dyn std::fmt::Debug) {
    let mut last: [Option<HidReport>; 4] = [None; 4];
    for step in steps {
        let InputStep::Report(r) = step else { continue };
        if let HidReport::Pointer(p) = r {
            assert!((POINTER_MIN..=POINTER_MAX).contains(&p.x()), "{what:?}: x {}", p.x());
            assert!((POINTER_MIN..=POINTER_MAX).contains(&p.y()), "{what:?}: y {}", p.y());
        }
        let slot = match r.interface() {
            HidInterface::Keyboard => 0,
            HidInterface::Consumer => 1,
            HidInterface::Pointer => 2,
            HidInterface::Mouse => 3,
        };
        last[slot] = Some(*r);
    }
    for r in last.iter().flatten() {
        assert!(!r.holds_input(), "{what:?} ends holding {r:?}");
    }
    if let Some(InputStep::Report(r)) = steps.iter().rev().find(|s| matches!(s, InputStep::Report(_))) {
        assert!(!r.holds_input(), "{what:?}: the last report holds input");
    }
}

fuzz_target!(|input: Input| {
    // Containment and sub-rectangles over the whole u32 range.
    let active = input.active.pixel();
    let region = input.region.pixel();
    check_containment(&active, &region);
    check_containment(&region, &active);
    check_containment(&input.source.pixel(), &region);

    // fit never returns 0 and never exceeds max_edge (or 1, when max_edge is 0).
    let (fw, fh) = fit(region.width, region.height, input.max_edge);
    assert!(fw >= 1 && fh >= 1);
    assert!(fw.max(fh) <= input.max_edge.max(1), "fit({region:?}, {}) = {fw}x{fh}", input.max_edge);
    assert!(fw <= region.width.max(1) && fh <= region.height.max(1), "fit grew {region:?} to {fw}x{fh}");

    // A small frame with a lit box; crop, scale and observe against it.
    let (w, h) = (u32::from(input.frame_w % 48) + 1, u32::from(input.frame_h % 48) + 1);
    let mut data = vec![0u8; (w * h * 3) as usize];
    let lit = input.lit.pixel();
    for y in 0..h {
        for x in 0..w {
            if lit.contains_rect(&PixelRect { x, y, width: 1, height: 1 }) {
                let i = ((y * w + x) * 3) as usize;
                data[i..i + 3].copy_from_slice(&[200, u8::try_from(x).unwrap_or(0), u8::try_from(y).unwrap_or(0)]);
            }
        }
    }
    let frame = Frame::rgb(1, 1, w, h, data);
    let full = PixelRect { x: 0, y: 0, width: w, height: h };
    let detected = detect_active_rect(&frame);
    assert!(detected.width >= 1 && detected.height >= 1 && full.contains_rect(&detected), "{detected:?} in {w}x{h}");

    // The screenshot region as the daemon forms it: relative to the detected picture.
    let edge = input.max_edge % 96;
    for region in [region, detected.sub_rect(&region).unwrap_or(detected)] {
        let size = fit(region.width, region.height, edge);
        match crop_scale(&frame, region, size) {
            Ok(rgb) => {
                assert!(region.width > 0 && region.height > 0 && full.contains_rect(&region));
                assert_eq!(rgb.len(), size.0 as usize * size.1 as usize * 3);
            }
            Err(_) => assert!(region.width == 0 || region.height == 0 || !full.contains_rect(&region)),
        }
        if let Ok(img) = observe(&frame, region, edge, usize::from(input.max_bytes)) {
            assert!(img.png.len() <= usize::from(input.max_bytes));
            assert!(img.width >= 1 && img.height >= 1);
            assert!(img.width <= region.width && img.height <= region.height);
        }
        // Every pixel of that observation maps inside the picture, in HID range.
        let m = ObservationMapping { active: detected, source: region, image: size };
        check_mapping(&m, input.obs.0, input.obs.1);
        check_mapping(&m, f64::from(size.0) - 1.0, f64::from(size.1) - 1.0);
        check_mapping(&m, 0.0, 0.0);
    }

    // A mapping made of hostile numbers still never yields HID 0 or a value past the max.
    let hostile = ObservationMapping { active, source: input.source.pixel(), image: input.image };
    check_mapping(&hostile, input.obs.0, input.obs.1);

    // Gestures: absolute and relative plans end with nothing held.
    let t = input.timings.input();
    let mut relative = RelativePlanner::new(input.counts_per_screen);
    for g in input.gestures.iter().take(8) {
        let gesture = g.gesture();
        check_plan(&plan(&gesture, &t), &gesture);
        check_plan(&relative.plan(&gesture, &t), &gesture);
    }
});
