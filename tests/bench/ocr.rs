//! The `ocr` section: the text reader (Tesseract in its worker process, started from the
//! tests crate's `tether-ocr-worker`) on the sim's screens at 2160p capture (723x1568
//! screenshots, what `screenshot` returns).
//!
//! Accuracy: every text `sim_state` lists (labels, texts, titles) is looked for as an exact
//! run of words in the read, in reading order. Timing: full reads of every screen, a
//! 700x120 strip (a changed region), and the worker's peak RSS.
//!
//! `TETHER_BENCH_OCR_ARGS="--psm 3 --scale 1.5 --normalize 0"` hands tuning options to
//! the worker, to compare choices; `TETHER_BENCH_OCR_MISSES=1` prints what was missed;
//! `TETHER_BENCH_OCR_DUMP=<dir>` writes each screen and what the engine is handed
//! (`<screen>.png`, `<screen>-prepared.png`); `TETHER_BENCH_OCR_ONLY_ACCURACY=1` stops after
//! the accuracy row (for tuning); `TETHER_BENCH_OCR_FILES=<dir>` only reads the PNGs in
//! `<dir>` (e.g. `target/artifacts/read-text`, the `read_text` test's screenshots) and
//! prints their lines (with `..._DUMP`, what the engine was handed too).
//!
//! The worker is the tests crate's `tether-ocr-worker` binary: build it with the bench
//! (`cargo build --release -p tether-tests --bins`), or an older one is measured.

use std::time::{Duration, Instant};

use anyhow::Context;
use base64::Engine as _;
use serde_json::{json, Value};
use tether::device::input::InputTimings;
use tether::device::ocr::{
    preprocess, GrayImage, ReadOptions, TesseractWorker, TextRead, TextReader, WorkerCommand, WorkerConfig,
};
use tether::device::sim::{SimConfig, APP_NAMES};
use tether::protocol::text_params::fold_typography;
use tether_tests::harness::{test_ocr_worker, SimDaemon};

/// A PNG screenshot as gray pixels.
pub fn decode_png(bytes: &[u8]) -> anyhow::Result<GrayImage> {
    let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info()?;
    let mut buf = vec![0; reader.output_buffer_size().context("PNG size")?];
    let info = reader.next_frame(&mut buf)?;
    let (w, h) = (info.width, info.height);
    let data = &buf[..info.buffer_size()];
    let channels = info.color_type.samples();
    let rgb: Vec<u8> = match channels {
        1 => return Ok(GrayImage { width: w, height: h, pixels: data.to_vec() }),
        2 => return Ok(GrayImage { width: w, height: h, pixels: data.chunks_exact(2).map(|p| p[0]).collect() }),
        3 => data.to_vec(),
        _ => data.chunks_exact(channels).flat_map(|p| [p[0], p[1], p[2]]).collect(),
    };
    Ok(GrayImage::from_rgb(w, h, &rgb))
}

/// The texts the sim says it shows: its `texts` list (each line as drawn) when it has one,
/// else element labels and texts (each paragraph) and the title.
fn shown_texts(state: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(texts) = state["texts"].as_array() {
        out.extend(
            texts.iter().filter_map(|t| t["text"].as_str()).map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned),
        );
        out.sort();
        out.dedup();
        return out;
    }
    for e in state["elements"].as_array().into_iter().flatten() {
        for key in ["label", "text"] {
            if let Some(t) = e[key].as_str() {
                out.extend(t.split('\n').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned));
            }
        }
    }
    if let Some(t) = state["title"].as_str() {
        out.push(t.to_owned());
    }
    out.sort();
    out.dedup();
    out
}

/// Whether `text`'s words appear as a run in the read's words (reading order), as
/// `find_text`'s `exact` compares them.
pub fn found(read: &TextRead, text: &str) -> bool {
    let text = fold_typography(text);
    let want: Vec<&str> = text.split_whitespace().collect();
    let folded: Vec<String> = read.words.iter().map(|w| fold_typography(&w.text)).collect();
    let have: Vec<&str> = folded.iter().map(String::as_str).collect();
    !want.is_empty() && have.windows(want.len()).any(|w| w == want.as_slice())
}

/// Writes `image` as an 8-bit gray PNG.
fn write_png(path: &std::path::Path, image: &GrayImage) -> anyhow::Result<()> {
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut encoder = png::Encoder::new(file, image.width, image.height);
    encoder.set_color(png::ColorType::Grayscale);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.write_header()?.write_image_data(&image.pixels)?;
    Ok(())
}

/// A strip of `image`: `width` x `height` at (x, y), clamped.
fn strip(image: &GrayImage, y: u32, width: u32, height: u32) -> GrayImage {
    let width = width.min(image.width);
    let height = height.min(image.height.saturating_sub(y));
    let mut pixels = Vec::with_capacity((width * height) as usize);
    for row in y..y + height {
        let start = (row * image.width) as usize;
        pixels.extend_from_slice(&image.pixels[start..start + width as usize]);
    }
    GrayImage { width, height, pixels }
}

fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn summary(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |p: f64| v[((p / 100.0 * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)];
    if v.is_empty() {
        (f64::NAN, f64::NAN)
    } else {
        (at(50.0), at(99.0))
    }
}

/// The sim's screens: the home screen, then each app, captured at `capture` (width, height).
async fn sim_screens(capture: (u32, u32)) -> anyhow::Result<Vec<(String, GrayImage, Vec<String>)>> {
    let d = SimDaemon::start_phone(
        SimConfig { capture_width: capture.0, capture_height: capture.1, ..SimConfig::default() },
        InputTimings::default(),
    )
    .await?;
    let mut c = d.connect().await?;
    let mut out = Vec::new();
    let mut id = 1;
    for name in std::iter::once("home").chain(APP_NAMES.iter().copied()) {
        id += 1;
        let action = if name == "home" { json!({"type": "home"}) } else { json!({"type": "open_app", "name": name}) };
        c.ok(id, "action", json!({"operation_id": format!("bench-{id}"), "action": action})).await?;
        id += 1;
        let shot = c.ok(id, "screenshot", json!({})).await?;
        id += 1;
        let state = c.ok(id, "sim_state", json!({})).await?;
        let png =
            base64::engine::general_purpose::STANDARD.decode(shot["data"].as_str().context("screenshot data")?)?;
        out.push((name.to_owned(), decode_png(&png)?, shown_texts(&state)));
    }
    Ok(out)
}

/// Reads every PNG in `dir` and prints its lines; with `dump`, writes what the engine was
/// handed there.
async fn read_files(
    worker: &TesseractWorker,
    dir: &std::path::Path,
    dump: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "png"))
        .collect();
    paths.sort();
    let options = ReadOptions { deadline: Duration::from_secs(30), ..ReadOptions::default() };
    for path in paths {
        let image = decode_png(&std::fs::read(&path)?)?;
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        if let Some(out) = dump {
            std::fs::create_dir_all(out)?;
            let how = preprocess::Preprocess::for_picture(image.width);
            write_png(&out.join(format!("{name}-prepared.png")), &preprocess::prepare(&image, how).image)?;
        }
        let read = worker.read(image, options.clone()).await?;
        let lines: Vec<&str> = read.lines.iter().map(|l| l.text.as_str()).collect();
        println!("{name}: {lines:?}");
    }
    Ok(())
}

/// Runs the section and prints its rows.
pub async fn ocr_section(rounds: usize) -> anyhow::Result<()> {
    let args: Vec<String> =
        std::env::var("TETHER_BENCH_OCR_ARGS").unwrap_or_default().split_whitespace().map(str::to_owned).collect();
    let misses = std::env::var_os("TETHER_BENCH_OCR_MISSES").is_some();
    let dump = std::env::var_os("TETHER_BENCH_OCR_DUMP").map(std::path::PathBuf::from);
    let only_accuracy = std::env::var_os("TETHER_BENCH_OCR_ONLY_ACCURACY").is_some();
    let worker = TesseractWorker::new(WorkerConfig {
        command: WorkerCommand { program: test_ocr_worker(), args: args.clone() },
        languages: vec!["eng".into()],
        memory_limit: 1 << 30,
        default_deadline: Duration::from_secs(30),
    });
    if let Some(dir) = std::env::var_os("TETHER_BENCH_OCR_FILES") {
        return read_files(&worker, std::path::Path::new(&dir), dump.as_deref()).await;
    }
    let screens = sim_screens((3840, 2160)).await?;
    let options = ReadOptions { deadline: Duration::from_secs(30), ..ReadOptions::default() };
    // Accuracy, one read per screen (the first also waits for the worker to load), at
    // 2160p capture (723-px screenshots) and at 1080p (498 px).
    let small = sim_screens((1920, 1080)).await?;
    let (mut total, mut hits) = (0, 0);
    let mut per_screen = Vec::new();
    for (capture, set) in [("2160p", &screens), ("1080p", &small)] {
        let (mut set_total, mut set_hits) = (0, 0);
        for (name, image, texts) in set {
            if let Some(dir) = &dump {
                std::fs::create_dir_all(dir)?;
                write_png(&dir.join(format!("{capture}-{name}.png")), image)?;
                let how = preprocess::Preprocess::for_picture(image.width);
                write_png(&dir.join(format!("{capture}-{name}-prepared.png")), &preprocess::prepare(image, how).image)?;
            }
            let read = worker.read(image.clone(), options.clone()).await?;
            let missed: Vec<&String> = texts.iter().filter(|t| !found(&read, t)).collect();
            set_total += texts.len();
            set_hits += texts.len() - missed.len();
            if misses && !missed.is_empty() {
                let lines: Vec<&str> = read.lines.iter().map(|l| l.text.as_str()).collect();
                eprintln!("{capture} {name}: missed {missed:?}\n  read {lines:?}");
            }
        }
        per_screen.push(format!("{capture} {set_hits}/{set_total}"));
        total += set_total;
        hits += set_hits;
    }
    let accuracy = format!(
        "| OCR accuracy, sim screens | {:.1} % | - | {hits} of {total} texts `sim_state` lists found by exact match on every screen ({}); {} |",
        100.0 * hits as f64 / total.max(1) as f64,
        per_screen.join(", "),
        if args.is_empty() { "default tuning".to_owned() } else { args.join(" ") }
    );
    if only_accuracy {
        println!("{accuracy}");
        return Ok(());
    }
    // Full reads, every screen `rounds` times.
    let mut full = Vec::new();
    let mut by_screen: Vec<Vec<f64>> = vec![Vec::new(); screens.len()];
    for _ in 0..rounds {
        for (i, (_, image, _)) in screens.iter().enumerate() {
            let t = Instant::now();
            worker.read(image.clone(), options.clone()).await?;
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            full.push(ms);
            by_screen[i].push(ms);
        }
    }
    // The screens with the most text (home, Contacts, Demo, Settings) are the slow ones.
    let slowest = by_screen
        .into_iter()
        .zip(&screens)
        .map(|(t, s)| (summary(t).0, s.0.clone()))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .unwrap_or((f64::NAN, String::new()));
    // A changed region: a 700x120 strip of the Settings screen, its first rows.
    let settings = screens.iter().find(|s| s.0 == "Settings").map_or(&screens[0].1, |s| &s.1);
    let region = strip(settings, 300, 700, 120);
    if misses {
        let r = worker.read(region.clone(), options.clone()).await?;
        eprintln!("region: {:?}", r.lines.iter().map(|l| l.text.as_str()).collect::<Vec<_>>());
    }
    let mut regions = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        worker.read(region.clone(), options.clone()).await?;
        regions.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let rss = worker.worker_pid().and_then(peak_rss_kib).map_or(f64::NAN, |k| k as f64 / 1024.0);
    let (f50, f99) = summary(full.clone());
    let (r50, r99) = summary(regions);
    let size = (screens[0].1.width, screens[0].1.height);
    println!("{accuracy}");
    println!(
        "| OCR full read, {}x{} screenshot | {f50:.0} ms | {f99:.0} ms | {} reads over {} screens, worker kept loaded, round trip |",
        size.0,
        size.1,
        full.len(),
        screens.len()
    );
    println!("| OCR full read, slowest screen ({}) | {:.0} ms | - | p50 of its {rounds} reads |", slowest.1, slowest.0);
    println!("| OCR region read, 700x120 strip | {r50:.0} ms | {r99:.0} ms | 20 reads |");
    println!("| OCR worker peak RSS (VmHWM) | {rss:.1} MiB | - | Tesseract 5 + eng, after the reads above |");
    Ok(())
}
