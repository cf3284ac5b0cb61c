//! The OCR worker as the daemon runs it: `tether ocr-worker` behind a [`TesseractWorker`].
//! It reads rendered words with boxes, and survives being killed, hung and fed hostile
//! pictures: each costs one read, and the next read works.
//!
//! Needs Tesseract (`libtesseract5 tesseract-ocr-eng`); without it the tests that read say
//! so and pass, unless `TETHER_REQUIRE_TOOLS` is set (CI), where they fail.

#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)]

use std::time::{Duration, Instant};

use ab_glyph::{Font, FontRef, PxScale, ScaleFont};
use tether::device::ocr::{
    GrayImage, OcrError, ReadOptions, TesseractWorker, TextBox, TextRead, TextReader, WorkerCommand, WorkerConfig,
};

fn config(deadline: Duration) -> WorkerConfig {
    WorkerConfig {
        command: WorkerCommand { program: env!("CARGO_BIN_EXE_tether").into(), args: vec!["ocr-worker".into()] },
        languages: vec!["eng".into()],
        memory_limit: 1 << 30,
        default_deadline: deadline,
    }
}

/// A started worker, or `None` (test skipped) when Tesseract is not installed here.
async fn worker(deadline: Duration) -> Option<TesseractWorker> {
    let w = TesseractWorker::new(config(deadline));
    let info = w.ready().await;
    if info.available {
        return Some(w);
    }
    assert!(std::env::var_os("TETHER_REQUIRE_TOOLS").is_none(), "OCR unavailable: {info:?}");
    eprintln!("skipped: OCR unavailable here: {:?}", info.problem);
    None
}

/// `lines` drawn with the sim's font (Ubuntu Light) at 28 px, dark on white, except the
/// last, white on a dark-blue band; each line's box.
fn rendered(lines: &[&str]) -> (GrayImage, Vec<TextBox>) {
    let font = FontRef::try_from_slice(epaint_default_fonts::UBUNTU_LIGHT).unwrap();
    let (w, h) = (723u32, 80 * lines.len() as u32 + 40);
    let mut px = vec![250u8; (w * h) as usize];
    let band_top = 80 * (lines.len() as u32 - 1) + 20;
    for y in band_top..band_top + 70 {
        px[(y * w) as usize..((y + 1) * w) as usize].fill(40);
    }
    let scale = PxScale::from(28.0);
    let scaled = font.as_scaled(scale);
    let mut boxes = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let inverted = i == lines.len() - 1;
        let (x0, baseline) = (40.0, 80.0 * i as f32 + 40.0 + scaled.ascent());
        let mut x = x0;
        for c in line.chars() {
            let id = font.glyph_id(c);
            let glyph = id.with_scale_and_position(scale, ab_glyph::point(x, baseline));
            x += scaled.h_advance(id);
            if let Some(outlined) = font.outline_glyph(glyph) {
                let b = outlined.px_bounds();
                outlined.draw(|gx, gy, cov| {
                    let (px_x, px_y) = (b.min.x as i32 + gx as i32, b.min.y as i32 + gy as i32);
                    if px_x >= 0 && px_y >= 0 && (px_x as u32) < w && (px_y as u32) < h {
                        let p = &mut px[(px_y as u32 * w + px_x as u32) as usize];
                        let ink = if inverted { 255.0 } else { 20.0 };
                        *p = (f32::from(*p) * (1.0 - cov) + ink * cov).round() as u8;
                    }
                });
            }
        }
        let top = (80.0 * i as f32 + 40.0) as u32;
        boxes.push(TextBox { x: x0 as u32, y: top, width: (x - x0) as u32, height: 28 });
    }
    (GrayImage { width: w, height: h, pixels: px }, boxes)
}

fn line_texts(read: &TextRead) -> Vec<&str> {
    read.lines.iter().map(|l| l.text.as_str()).collect()
}

/// CPU time (utime + stime, ticks) of `pid`.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Waits (polling, bounded) until `cond` holds.
async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn noise(w: u32, h: u32, seed: u64) -> GrayImage {
    let mut s = seed;
    let pixels = (0..w * h)
        .map(|_| {
            s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (s >> 56) as u8
        })
        .collect();
    GrayImage { width: w, height: h, pixels }
}

const WORDS: [&str; 3] = ["Airplane Mode", "General Settings", "Sign in"];

async fn reads_the_words(w: &TesseractWorker) {
    let (image, boxes) = rendered(&WORDS);
    let read = w.read(image, ReadOptions::default()).await.unwrap();
    assert_eq!(line_texts(&read), WORDS, "{read:?}");
    for (line, want) in read.lines.iter().zip(&boxes) {
        let (cx, cy) = line.bbox.center();
        let (wx, wy) = want.center();
        assert!((cx - wx).abs() < 12.0 && (cy - wy).abs() < 12.0, "{:?} is off {want:?}", line.bbox);
        assert!(line.confidence > 50.0, "{line:?}");
    }
}

#[tokio::test]
async fn reads_rendered_words_with_boxes_in_the_pictures_pixels() {
    let Some(w) = worker(Duration::from_secs(20)).await else { return };
    reads_the_words(&w).await;
    let info = w.info();
    assert!(info.version.as_deref().unwrap_or("").starts_with('5'), "{info:?}");
    assert!(info.installed_languages.contains(&"eng".to_string()));
}

#[tokio::test]
async fn the_worker_runs_niced_limited_and_with_a_clean_environment() {
    let Some(w) = worker(Duration::from_secs(20)).await else { return };
    let pid = w.worker_pid().unwrap();
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let address = limits.lines().find(|l| l.starts_with("Max address space")).unwrap();
    assert!(address.contains(&(1u64 << 30).to_string()), "{address}");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split_whitespace().collect();
    // Field 19 of stat is the nice value; `fields` starts at field 3.
    assert_eq!(fields[16], "10", "nice");
    let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let vars: Vec<String> =
        env.split(|&b| b == 0).filter(|v| !v.is_empty()).map(|v| String::from_utf8_lossy(v).into_owned()).collect();
    assert!(vars.contains(&"OMP_THREAD_LIMIT=1".to_string()), "{vars:?}");
    assert!(
        vars.iter().all(|v| v.starts_with("OMP_THREAD_LIMIT=")
            || v.starts_with("TESSDATA_PREFIX=")
            || v.starts_with("TETHER_OCR_LOG=")),
        "{vars:?}"
    );
}

#[tokio::test]
async fn a_worker_killed_mid_read_is_reported_and_the_next_read_works() {
    let Some(w) = worker(Duration::from_secs(60)).await else { return };
    let pid = w.worker_pid().unwrap();
    let before = cpu_ticks(pid).unwrap();
    let reading = {
        let w = w.clone();
        tokio::spawn(async move { w.read(noise(2000, 2000, 1), ReadOptions::default()).await })
    };
    // Mid-read: the worker is burning CPU on the picture.
    wait_until("the worker to start reading", || cpu_ticks(pid).is_some_and(|t| t > before)).await;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    let e = reading.await.unwrap().unwrap_err();
    assert!(matches!(&e, OcrError::WorkerDied(m) if m.contains("SIGKILL")), "{e:?}");
    assert_eq!(w.worker_pid(), None);
    reads_the_words(&w).await;
    assert_ne!(w.worker_pid(), Some(pid), "a new worker");
}

#[tokio::test]
async fn a_hung_worker_times_out_within_the_deadline_and_the_next_read_works() {
    let Some(w) = worker(Duration::from_secs(20)).await else { return };
    let pid = w.worker_pid().unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGSTOP).unwrap();
    let deadline = Duration::from_millis(1500);
    let (image, _) = rendered(&WORDS);
    let started = Instant::now();
    let e = w.read(image, ReadOptions { deadline, ..ReadOptions::default() }).await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(e, OcrError::Timeout { ms: 1500 });
    assert!(took >= deadline && took < deadline + Duration::from_secs(2), "took {took:?}");
    // The stopped worker is gone (SIGKILL ends a stopped process too).
    wait_until("the hung worker to go", || {
        !std::path::Path::new(&format!("/proc/{pid}/cmdline")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat")).map(|s| s.contains(") Z")).unwrap_or(true)
    })
    .await;
    reads_the_words(&w).await;
}

#[tokio::test]
async fn hostile_pictures_get_clear_errors_or_empty_reads_and_the_next_read_works() {
    let Some(w) = worker(Duration::from_secs(30)).await else { return };
    let o = ReadOptions::default;
    let empty = GrayImage { width: 0, height: 0, pixels: vec![] };
    assert!(matches!(w.read(empty, o()).await, Err(OcrError::BadImage(_))));
    let huge = GrayImage { width: 9000, height: 9000, pixels: vec![0; 9000 * 9000] };
    assert!(matches!(w.read(huge, o()).await, Err(OcrError::BadImage(_))));
    let short = GrayImage { width: 723, height: 1568, pixels: vec![7; 1000] };
    assert!(matches!(w.read(short, o()).await, Err(OcrError::BadImage(_))));
    let pid = w.worker_pid();
    let black = GrayImage { width: 723, height: 1568, pixels: vec![0; 723 * 1568] };
    assert!(w.read(black, o()).await.unwrap().words.is_empty());
    // Noise: whatever Tesseract makes of it, or a timeout; never a dead reader.
    let deadline = Duration::from_secs(5);
    // (A timeout kills the worker by design; on a busy machine noise can take that long.)
    let timed_out = match w.read(noise(723, 1568, 7), ReadOptions { deadline, ..o() }).await {
        Ok(_) => false,
        Err(OcrError::Timeout { .. }) => true,
        Err(e) => panic!("noise: {e:?}"),
    };
    let one = GrayImage { width: 1, height: 1, pixels: vec![255] };
    assert!(w.read(one, o()).await.unwrap().words.is_empty());
    if w.worker_pid().is_some() && !timed_out {
        assert_eq!(w.worker_pid(), pid, "refused pictures never cost the worker");
    }
    reads_the_words(&w).await;
}

#[tokio::test]
async fn a_missing_language_is_unavailable_and_the_defaults_still_read() {
    let Some(w) = worker(Duration::from_secs(20)).await else { return };
    let (image, _) = rendered(&WORDS);
    let o = ReadOptions { languages: vec!["zzz".into()], ..ReadOptions::default() };
    let e = w.read(image, o).await.unwrap_err();
    assert!(matches!(&e, OcrError::Unavailable(m) if m.contains("tesseract-ocr-zzz")), "{e:?}");
    reads_the_words(&w).await;
}

#[tokio::test]
async fn a_worker_program_that_is_not_there_is_unavailable() {
    let mut c = config(Duration::from_secs(5));
    c.command.program = "/nonexistent/tether".into();
    let w = TesseractWorker::new(c);
    let (image, _) = rendered(&WORDS);
    let e = w.read(image, ReadOptions::default()).await.unwrap_err();
    assert!(matches!(e, OcrError::Unavailable(_)), "{e:?}");
    let info = w.info();
    assert!(!info.available && info.problem.is_some(), "{info:?}");
}
