//! Software H.264 from the sim's frames to a viewer, checked by a decoder nobody here wrote
//! (ffprobe/ffmpeg from Debian).

// Test code: a panic is how an assertion fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::cast_possible_truncation)]

use std::process::Command;
use std::time::{Duration, Instant};

use tether::device::hid::{HidInterface, HidReport, PointerReport};
use tether::device::sim::{SimConfig, SimPhone};
use tether::device::video::codec::EncoderSettings;
use tether::device::video::encode::start_encoder;
use tether::device::video::viewers::ViewerHub;
use tether::device::video::{FrameHub, FrameSource};

fn have(tool: &str) -> bool {
    Command::new(tool).arg("-version").output().is_ok_and(|o| o.status.success())
}

#[test]
fn a_joining_viewer_gets_a_keyframe_quickly_and_the_stream_decodes_cleanly() {
    let phone = SimPhone::new(SimConfig {
        capture_width: 1280,
        capture_height: 720,
        fps: 30,
        glide_ms: 1,
        ..SimConfig::default()
    });
    let (frame_hub, frames) = FrameHub::new();
    let _display = Box::new(phone.display()).start(frame_hub).unwrap();
    let viewers = ViewerHub::default();
    // A periodic IDR only once a minute: an IDR that reaches the joiner within the test can
    // only be the one its join asked for, however slowly a loaded machine encodes.
    let settings = EncoderSettings { idr_interval_s: 60, ..EncoderSettings::default() };
    let _encoder = start_encoder(frames.clone(), viewers.clone(), settings, Default::default()).unwrap();
    // Frames flowing, nobody watching yet: the viewer joins a running stream.
    let deadline = Instant::now() + Duration::from_secs(30);
    while frames.latest().is_none_or(|f| f.sequence < 5) {
        assert!(Instant::now() < deadline, "the sim display produced no frames");
        std::thread::sleep(Duration::from_millis(10));
    }

    let joined = Instant::now();
    let (id, _notify) = viewers.join();
    let mut stream = Vec::new();
    let (mut first_at, mut units, mut keyframes) = (None, 0, 0);
    let mut x = 2000u16;
    // 30 pictures, however long they take (a generous bound only against a stuck encoder).
    while units < 30 {
        assert!(joined.elapsed() < Duration::from_secs(60), "only {units} pictures in 60 s");
        // Move the pointer so consecutive frames differ.
        x = if x > 30000 { 2000 } else { x + 700 };
        let r = HidReport::Pointer(PointerReport::new(0, x, 16000, 0));
        phone.consume(HidInterface::Pointer, r.encode().as_bytes());
        while let Some(f) = viewers.take(id) {
            if first_at.is_none() {
                assert!(f.keyframe, "a viewer's first picture is an IDR");
                first_at = Some(joined.elapsed());
            }
            units += 1;
            keyframes += usize::from(f.keyframe);
            stream.extend_from_slice(f.access_unit());
            viewers.ack(id, f.sequence);
        }
        std::thread::sleep(Duration::from_millis(10)); // pacing of the pointer moves
    }
    let first_at = first_at.expect("no picture reached the viewer");
    // The first picture is an IDR long before the periodic one: the join requested it. (How
    // quickly, in milliseconds, is for tests/bench on an idle machine.)
    assert!(first_at < Duration::from_secs(30), "keyframe took {first_at:?}");
    assert!(keyframes >= 1);
    eprintln!("viewer: first IDR after {first_at:?}, {units} pictures, {keyframes} IDRs, {} bytes", stream.len());

    if !have("ffprobe") {
        assert!(std::env::var_os("TETHER_REQUIRE_TOOLS").is_none(), "ffprobe is required (apt-get install ffmpeg)");
        eprintln!("NOTICE: ffprobe not installed; the decode check did not run");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("viewer.h264");
    std::fs::write(&file, &stream).unwrap();
    let probe = Command::new("ffprobe")
        .args(["-v", "error", "-count_frames", "-select_streams", "v:0"])
        .args(["-show_entries", "stream=codec_name,profile,width,height,nb_read_frames", "-of", "csv=p=0"])
        .arg(&file)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&probe.stdout).trim().to_string();
    let err = String::from_utf8_lossy(&probe.stderr).trim().to_string();
    assert!(probe.status.success() && err.is_empty(), "ffprobe: {err}");
    assert!(out.starts_with("h264,Constrained Baseline,1280,720,"), "{out}");
    let decoded: usize = out.rsplit(',').next().unwrap().parse().unwrap();
    assert_eq!(decoded, units, "every picture decodes: {out}");
    let full =
        Command::new("ffmpeg").args(["-v", "error", "-i"]).arg(&file).args(["-f", "null", "-"]).output().unwrap();
    assert!(
        full.status.success() && full.stderr.is_empty(),
        "ffmpeg decode errors: {}",
        String::from_utf8_lossy(&full.stderr)
    );
}
