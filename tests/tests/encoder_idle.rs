//! The encoder thread sleeps while nobody watches (its own binary: it counts the wake-ups
//! of every thread named `h264-encoder` in this process, so no other test may start one).

// Test code: a panic is how an assertion fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use tether::device::sim::{SimConfig, SimPhone};
use tether::device::video::codec::EncoderSettings;
use tether::device::video::encode::start_encoder;
use tether::device::video::viewers::ViewerHub;
use tether::device::video::{FrameHub, FrameSource};

/// Voluntary context switches (one per sleep or wait) of the encoder threads, summed.
fn encoder_wakeups() -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let path = task.path();
        let named = std::fs::read_to_string(path.join("comm")).is_ok_and(|c| c.trim() == "h264-encoder");
        if !named {
            continue;
        }
        let status = std::fs::read_to_string(path.join("status")).unwrap_or_default();
        total += status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    total
}

#[test]
fn an_encoder_without_viewers_sleeps_and_wakes_for_the_first_viewer() {
    let phone = SimPhone::new(SimConfig { capture_width: 320, capture_height: 240, fps: 30, ..SimConfig::default() });
    let (frame_hub, frames) = FrameHub::new();
    let _display = Box::new(phone.display()).start(frame_hub).unwrap();
    let viewers = ViewerHub::default();
    let _encoder =
        start_encoder(frames.clone(), viewers.clone(), EncoderSettings::default(), Default::default()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while frames.latest().is_none_or(|f| f.sequence < 3) {
        assert!(Instant::now() < deadline, "the sim display produced no frames");
        std::thread::sleep(Duration::from_millis(10));
    }

    // Frames flow at 30 fps and nobody watches. A wait only checks the stop flag every
    // 200 ms (≤ 6 wake-ups a second, however loaded the machine); the 3 ms poll it
    // replaced woke ~333 times a second (and under load still well over 30).
    let before = encoder_wakeups();
    let window = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let woke = encoder_wakeups() - before;
    let secs = window.elapsed().as_secs_f64();
    assert!((woke as f64) < 10.0 * secs + 5.0, "an idle encoder woke {woke} times in {secs:.2} s");

    // The first viewer is served without waiting for a poll: a picture arrives.
    let (id, _notify) = viewers.join();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(f) = viewers.take(id) {
            assert!(f.keyframe, "a viewer's first picture is an IDR");
            break;
        }
        assert!(Instant::now() < deadline, "no picture for the viewer in 60 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}
