//! Property tests over the public geometry and input-planning API (proptest, default case
//! count): observation pixels map inside the phone's picture and into HID range, every
//! planned gesture ends with nothing held, and observation → HID → phone pixels loses at
//! most one phone pixel.

use std::time::Duration;

use proptest::prelude::*;
use tether::daemon::InputStep;
use tether::device::geometry::{ObservationMapping, PixelRect};
use tether::device::hid::{HidInterface, HidReport, KeyStroke, PointerReport, POINTER_MAX, POINTER_MIN};
use tether::device::input::{app_switcher, plan, Gesture, HidPoint, InputTimings, RelativePlanner};
use tether::device::sim::{SimConfig, SimPhone};
use tether::device::video::image::fit;

/// An active rectangle somewhere in a capture frame up to 8K, and a screenshot region inside
/// it (the whole picture or a part), and the observation image's size for a `max_edge`.
fn mapping() -> impl Strategy<Value = ObservationMapping> {
    (0u32..4000, 0u32..4000, 1u32..4000, 1u32..4000)
        .prop_flat_map(|(x, y, w, h)| {
            let active = PixelRect { x, y, width: w, height: h };
            (Just(active), 0..w, 0..h, 16u32..2000, any::<bool>())
        })
        .prop_flat_map(|(active, rx, ry, max_edge, whole)| {
            let (rw, rh) = (1..=active.width - rx, 1..=active.height - ry);
            (Just(active), Just((rx, ry)), rw, rh, Just(max_edge), Just(whole))
        })
        .prop_map(|(active, (rx, ry), rw, rh, max_edge, whole)| {
            let source = if whole {
                active
            } else {
                active.sub_rect(&PixelRect { x: rx, y: ry, width: rw, height: rh }).expect("inside by construction")
            };
            ObservationMapping { active, source, image: fit(source.width, source.height, max_edge) }
        })
}

/// A pixel of the observation image, picked by fractions of its size.
fn in_image(m: &ObservationMapping, fx: f64, fy: f64) -> (f64, f64) {
    let (w, h) = (f64::from(m.image.0), f64::from(m.image.1));
    ((fx * w).floor().min(w - 1.0), (fy * h).floor().min(h - 1.0))
}

fn timings() -> impl Strategy<Value = InputTimings> {
    ((0u64..2000, 0u64..2000, 0u32..6, 0u64..200, 0u64..500), (0u64..3000, 0u64..3000, 0u64..40, 0u64..100, 0u64..100))
        .prop_map(|((settle, tap, repeats, gap, dtap), (long, swipe, interval, key_hold, key_gap))| InputTimings {
            settle_ms: settle,
            tap_hold_ms: tap,
            release_repeats: repeats,
            release_gap_ms: gap,
            double_tap_gap_ms: dtap,
            long_press_ms: long,
            swipe_ms: swipe,
            report_interval_ms: interval,
            key_hold_ms: key_hold,
            key_gap_ms: key_gap,
        })
}

fn point() -> impl Strategy<Value = HidPoint> {
    (any::<u16>(), any::<u16>()).prop_map(|(x, y)| HidPoint::new(x, y))
}

fn stroke() -> impl Strategy<Value = KeyStroke> {
    (any::<u8>(), any::<u8>()).prop_map(|(usage, modifiers)| KeyStroke { usage, modifiers })
}

fn gesture() -> impl Strategy<Value = Gesture> {
    prop_oneof![
        point().prop_map(Gesture::Move),
        point().prop_map(Gesture::Tap),
        point().prop_map(Gesture::DoubleTap),
        point().prop_map(Gesture::LongPress),
        (prop::collection::vec(point(), 0..8), 0u64..3000)
            .prop_map(|(path, ms)| Gesture::Drag { path, duration: Duration::from_millis(ms) }),
        stroke().prop_map(Gesture::Key),
        prop::collection::vec(stroke(), 0..8).prop_map(Gesture::Type),
        any::<u16>().prop_map(Gesture::Consumer),
    ]
}

/// Every interface the steps touched is released by its last report.
fn assert_ends_released(steps: &[InputStep]) {
    for interface in [HidInterface::Keyboard, HidInterface::Consumer, HidInterface::Pointer, HidInterface::Mouse] {
        let last = steps.iter().rev().find_map(|s| match s {
            InputStep::Report(r) if r.interface() == interface => Some(*r),
            _ => None,
        });
        if let Some(r) = last {
            assert!(!r.holds_input(), "{interface:?} ends holding {r:?}");
        }
    }
}

proptest! {
    // Failures are reported with their minimal input; no regression files next to the test.
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    /// (a) Any pixel of the observation image lands inside the active rectangle, and its HID
    /// coordinates are in 1..=32767.
    #[test]
    fn observation_pixels_map_inside_the_picture(m in mapping(), fx in 0.0..1.0f64, fy in 0.0..1.0f64) {
        let (x, y) = in_image(&m, fx, fy);
        let (nx, ny) = m.to_normalized(x, y).expect("inside the image");
        prop_assert!((0.0..=1.0).contains(&nx) && (0.0..=1.0).contains(&ny));
        let a = m.active;
        let cx = f64::from(a.x) + nx * f64::from(a.width);
        let cy = f64::from(a.y) + ny * f64::from(a.height);
        prop_assert!(cx >= f64::from(a.x) && cx <= f64::from(a.x) + f64::from(a.width), "{cx} outside {a:?}");
        prop_assert!(cy >= f64::from(a.y) && cy <= f64::from(a.y) + f64::from(a.height), "{cy} outside {a:?}");
        // The pixel's centre through the source rectangle, before any clamping, is inside too.
        let s = m.source;
        let sx = f64::from(s.x) + (x + 0.5) * f64::from(s.width) / f64::from(m.image.0);
        let sy = f64::from(s.y) + (y + 0.5) * f64::from(s.height) / f64::from(m.image.1);
        prop_assert!(sx >= f64::from(a.x) && sx <= f64::from(a.x) + f64::from(a.width), "{sx} outside {a:?}");
        prop_assert!(sy >= f64::from(a.y) && sy <= f64::from(a.y) + f64::from(a.height), "{sy} outside {a:?}");
        prop_assert!((sx - cx).abs() < 1e-6 * f64::from(a.width), "{sx} vs {cx}");
        let (hx, hy) = m.to_hid(x, y).expect("inside the image");
        prop_assert!((POINTER_MIN..=POINTER_MAX).contains(&hx) && (POINTER_MIN..=POINTER_MAX).contains(&hy));
    }

    /// (b) Every planned gesture, absolute and relative, with any timings, ends with nothing
    /// held on any interface.
    #[test]
    fn every_plan_ends_with_nothing_held(
        gestures in prop::collection::vec(gesture(), 1..6),
        t in timings(),
        counts in (50.0..2000.0f64, 50.0..2000.0f64),
    ) {
        let mut relative = RelativePlanner::new(counts);
        for g in &gestures {
            let steps = plan(g, &t);
            assert_ends_released(&steps);
            for s in &steps {
                if let InputStep::Report(HidReport::Pointer(p)) = s {
                    prop_assert!((POINTER_MIN..=POINTER_MAX).contains(&p.x()));
                    prop_assert!((POINTER_MIN..=POINTER_MAX).contains(&p.y()));
                }
            }
            assert_ends_released(&relative.plan(g, &t));
        }
        assert_ends_released(&app_switcher(&t));
    }

    /// (c) Observation pixel → HID units → phone pixels is off by at most one phone pixel:
    /// both through the inverse written here and through the virtual iPhone's own mapping.
    #[test]
    fn observation_to_hid_to_phone_round_trips(
        m in mapping(),
        fx in 0.0..1.0f64,
        fy in 0.0..1.0f64,
        phone in (100u32..3000, 100u32..3000),
    ) {
        let (x, y) = in_image(&m, fx, fy);
        let (nx, ny) = m.to_normalized(x, y).expect("inside the image");
        let (hx, hy) = m.to_hid(x, y).expect("inside the image");
        let want = (nx * f64::from(phone.0), ny * f64::from(phone.1));
        // The inverse: HID unit h covers [h, h + 1) / 32768 of the screen.
        let full = f64::from(POINTER_MAX) + 1.0;
        let back = (f64::from(hx) / full * f64::from(phone.0), f64::from(hy) / full * f64::from(phone.1));
        prop_assert!((back.0 - want.0).abs() <= 1.0 && (back.1 - want.1).abs() <= 1.0, "{back:?} vs {want:?}");

        // The sim: press somewhere, then move while pressed (no glide), and read the pointer.
        let sim = SimPhone::new(SimConfig { phone_width: phone.0, phone_height: phone.1, ..SimConfig::default() });
        for r in [PointerReport::new(1, 16384, 16384, 0), PointerReport::new(1, hx, hy, 0)] {
            let r = HidReport::Pointer(r);
            sim.consume(r.interface(), r.encode().as_bytes());
        }
        let (px, py) = sim.snapshot().pointer;
        let max = (f64::from(phone.0) - 1.0, f64::from(phone.1) - 1.0);
        let want = (want.0.min(max.0), want.1.min(max.1));
        prop_assert!((f64::from(px) - want.0).abs() <= 1.0, "x {px} vs {}", want.0);
        prop_assert!((f64::from(py) - want.1).abs() <= 1.0, "y {py} vs {}", want.1);
    }
}
