//! Arbitrary report bytes on any interface into the virtual iPhone (`SimPhone::consume`,
//! what the sim's HID sink feeds), with arbitrary phone and capture shapes.
//!
//! Invariants: every report is counted; exactly the reports `HidReport::decode` refuses are
//! counted malformed; the pointer stays on the screen; held input mirrors the last report of
//! each interface; the volume stays in 0..=16.
#![no_main]
#![forbid(unsafe_code)]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tether::device::hid::{HidInterface, HidReport, Layout};
use tether::device::sim::{SimConfig, SimPhone};

#[derive(Debug, Arbitrary)]
struct Input {
    phone_width: u32,
    phone_height: u32,
    glide_ms: u8,
    layout: u8,
    scale_error_permille: i32,
    offset: (i32, i32),
    reports: Vec<(u8, Vec<u8>)>,
}

fuzz_target!(|input: Input| {
    let config = SimConfig {
        phone_width: input.phone_width,
        phone_height: input.phone_height,
        glide_ms: u64::from(input.glide_ms),
        layout: [Layout::Us, Layout::Uk, Layout::De, Layout::Fr][usize::from(input.layout % 4)],
        pointer_scale_error_permille: input.scale_error_permille,
        pointer_offset_px: input.offset,
        ..SimConfig::default()
    };
    let phone = SimPhone::new(config);
    let (mut count, mut bad) = (0u64, 0u64);
    let (mut buttons, mut modifiers, mut keys, mut consumer) = (0u8, 0u8, 0usize, 0u16);
    for (which, bytes) in input.reports.iter().take(64) {
        let interface = match which % 4 {
            0 => HidInterface::Keyboard,
            1 => HidInterface::Consumer,
            2 => HidInterface::Pointer,
            _ => HidInterface::Mouse,
        };
        phone.consume(interface, bytes);
        count += 1;
        match HidReport::decode(interface, bytes) {
            None => bad += 1,
            Some(HidReport::Pointer(p)) => buttons = p.buttons(),
            Some(HidReport::Mouse(m)) => buttons = m.buttons,
            Some(HidReport::Keyboard(k)) => {
                modifiers = k.modifiers;
                keys = k.keys.iter().filter(|&&u| u != 0).count();
            }
            Some(HidReport::Consumer(c)) => consumer = c.usage,
        }
        let snap = phone.snapshot();
        assert_eq!((snap.reports, snap.malformed_reports), (count, bad));
        assert_eq!(
            (snap.buttons, snap.modifiers, snap.keys_held, snap.consumer_usage),
            (buttons, modifiers, keys, consumer)
        );
        let c = phone.config();
        let (w, h) = (c.phone_width, c.phone_height);
        let (x, y) = snap.pointer;
        assert!(
            x >= 0 && y >= 0 && i64::from(x) < i64::from(w) && i64::from(y) < i64::from(h),
            "pointer {:?} off a {w}x{h} screen",
            snap.pointer
        );
    }
    let state = phone.state();
    assert!(state.volume <= 16);
    assert_eq!(state.input.reports, count);
});
