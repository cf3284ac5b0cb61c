//! Config TOML text → the typed `Config`, and then what the daemon does with it first: build
//! the virtual iPhone, map through `active_rect`, plan gestures with the configured timings
//! and the relative planner with the configured screen size.
//!
//! Invariants: parsing is deterministic; an accepted config is usable — the sim takes
//! reports without panicking and keeps its pointer on screen, mapping through the active
//! rectangle stays in HID 1..=32767, and every gesture plan is finite, small enough to
//! run, and ends with nothing held.
#![no_main]
#![forbid(unsafe_code)]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use tether::config::{Config, Profile};
use tether::daemon::InputStep;
use tether::device::geometry::ObservationMapping;
use tether::device::hid::{HidInterface, HidReport, KeyStroke, PointerReport, POINTER_MAX, POINTER_MIN};
use tether::device::input::{plan, Gesture, HidPoint, RelativePlanner};
use tether::device::sim::SimPhone;

/// More steps than any sane gesture needs (a 10 s drag at 1 ms is 10k).
const MAX_STEPS: usize = 200_000;

fn ends_released(steps: &[InputStep]) -> bool {
    let last = |i: HidInterface| {
        steps.iter().rev().find_map(|s| match s {
            InputStep::Report(r) if r.interface() == i => Some(*r),
            _ => None,
        })
    };
    [HidInterface::Keyboard, HidInterface::Consumer, HidInterface::Pointer, HidInterface::Mouse]
        .into_iter()
        .filter_map(last)
        .all(|r| !r.holds_input())
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let parsed = Config::from_toml(Profile::Laptop, text);
    // Debug text, not ==: a NaN in the config is equal to itself here.
    let again = Config::from_toml(Profile::Laptop, text);
    assert_eq!(format!("{parsed:?}"), format!("{again:?}"), "parsing is deterministic");
    let Ok(c) = parsed else { return };
    assert!(c.tasks_kept > 0);

    let phone = SimPhone::new(c.sim_phone);
    for (x, y) in [(POINTER_MIN, POINTER_MIN), (POINTER_MAX, POINTER_MAX), (16384, 16384)] {
        for b in [0, 1, 0] {
            let r = HidReport::Pointer(PointerReport::new(b, x, y, 0));
            phone.consume(r.interface(), r.encode().as_bytes());
        }
    }
    let snap = phone.snapshot();
    let cfg = phone.config();
    assert!(snap.pointer.0 >= 0 && i64::from(snap.pointer.0) < i64::from(cfg.phone_width.max(1)));
    assert!(snap.pointer.1 >= 0 && i64::from(snap.pointer.1) < i64::from(cfg.phone_height.max(1)));

    if let Some(active) = c.active_rect {
        let image = (active.width.clamp(1, 4096), active.height.clamp(1, 4096));
        let m = ObservationMapping { active, source: active, image };
        for (x, y) in [(0.0, 0.0), (f64::from(image.0) - 1.0, f64::from(image.1) - 1.0)] {
            let (hx, hy) = m.to_hid(x, y).expect("a pixel of the image maps");
            assert!((POINTER_MIN..=POINTER_MAX).contains(&hx) && (POINTER_MIN..=POINTER_MAX).contains(&hy));
        }
    }

    let p = HidPoint::new(16384, 16384);
    let gestures = [
        Gesture::Tap(p),
        Gesture::DoubleTap(p),
        Gesture::LongPress(p),
        Gesture::Drag {
            path: vec![HidPoint::new(1, 1), HidPoint::new(32767, 32767)],
            duration: Duration::from_millis(c.input.swipe_ms.min(10_000)),
        },
        Gesture::Type(vec![KeyStroke { usage: 4, modifiers: 2 }; 2]),
        Gesture::Consumer(0xE9),
    ];
    let mut relative = RelativePlanner::new(c.relative_counts_per_screen);
    for g in &gestures {
        let steps = plan(g, &c.input);
        assert!(steps.len() <= MAX_STEPS, "{g:?}: {} steps", steps.len());
        assert!(ends_released(&steps), "{g:?} ends holding input");
        let steps = relative.plan(g, &c.input);
        assert!(steps.len() <= MAX_STEPS, "relative {g:?}: {} steps", steps.len());
        assert!(ends_released(&steps), "relative {g:?} ends holding input");
    }
});
