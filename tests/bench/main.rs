//! tether benchmarks over the virtual iPhone. Run with:
//!
//! ```sh
//! cargo run --release -p tether-tests --bin bench            # every section
//! cargo run --release -p tether-tests --bin bench -- memory  # only some (see SECTIONS)
//! ```
//!
//! Prints a Markdown section for BENCHMARKS.md: screenshot latency at 1080p and 2160p
//! capture, action overhead beyond the intended gesture timeline, and the daemon's memory.

#![allow(clippy::cast_possible_truncation, clippy::cast_precision_loss, clippy::cast_sign_loss)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};
use tether::device::input::InputTimings;
use tether::device::sim::SimConfig;
use tether_tests::harness::{RawClient, SimDaemon};

mod ocr;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p / 100.0 * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn summary(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (percentile(&v, 50.0), percentile(&v, 99.0))
}

/// Screenshot round trips (request → PNG in the reply) over the control socket.
async fn screenshots(width: u32, height: u32, n: usize) -> anyhow::Result<(f64, f64, usize)> {
    let d = SimDaemon::start_phone(
        SimConfig { capture_width: width, capture_height: height, ..SimConfig::default() },
        InputTimings::default(),
    )
    .await?;
    let mut c = d.connect().await?;
    c.ok(1, "screenshot", json!({})).await?; // first frame, active-rect detection
    let mut times = Vec::with_capacity(n);
    let mut bytes = 0;
    for i in 0..n {
        let t = Instant::now();
        let r = c.ok(10 + i as u64, "screenshot", json!({})).await?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        bytes = r["data"].as_str().map_or(0, str::len) * 3 / 4;
    }
    let (p50, p99) = summary(times);
    Ok((p50, p99, bytes))
}

/// Planned timeline of one tap under `t`.
fn tap_timeline(t: &InputTimings) -> f64 {
    (t.settle_ms + t.tap_hold_ms + u64::from(t.release_repeats.saturating_sub(1)) * t.release_gap_ms) as f64
}

/// Client-observed action time minus the gesture's own waits, for `kind` (`tap` or `move`;
/// a move has no waits, so its time is all overhead).
async fn action_overhead(kind: &str, n: usize) -> anyhow::Result<(f64, f64)> {
    let timings = InputTimings::default();
    let d = SimDaemon::start_phone(SimConfig::default(), timings).await?;
    let mut c = d.connect().await?;
    let mut obs = String::new();
    let mut over = Vec::with_capacity(n);
    for i in 0..n {
        // Observations last 30 s: refresh now and then (outside the timed part).
        if i % 50 == 0 {
            let shot = c.ok(1, "screenshot", json!({})).await?;
            obs = shot["metadata"]["observation_id"].as_str().context("observation id")?.to_string();
        }
        // Tap the wallpaper between icons so the screen stays put.
        // Unverified: this measures the input path; the flow section measures verification.
        let params = json!({"operation_id": format!("b{i}"), "observation_id": obs, "verify": false,
            "action": {"type": kind, "x": 20 + (i % 10), "y": 20}});
        let t = Instant::now();
        let r = c.ok(100 + i as u64, "action", params).await?;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        anyhow::ensure!(r["status"] == "submitted", "{r}");
        over.push(if kind == "move" { ms } else { ms - tap_timeline(&timings) });
    }
    Ok(summary(over))
}

/// KiB → MiB for printing (exact for any RSS a process here can have).
#[allow(clippy::cast_precision_loss)]
fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn rss_kib(pid: u32) -> anyhow::Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok((field("VmRSS:"), field("VmHWM:")))
}

/// A real `tether serve --sim` process with a `width`x`height` capture; its socket.
async fn spawn_daemon(width: u32, height: u32) -> anyhow::Result<(std::process::Child, PathBuf, tempfile::TempDir)> {
    let exe = std::env::current_exe()?;
    let tether = exe.with_file_name("tether");
    anyhow::ensure!(tether.exists(), "build the daemon first: cargo build --release -p tether");
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("control.sock");
    let config = dir.path().join("tether.toml");
    std::fs::write(&config, format!("[sim_phone]\ncapture_width = {width}\ncapture_height = {height}\n"))?;
    let child = Command::new(&tether)
        // Port 0: benches run beside other daemons and never collide on the HTTPS port.
        .args(["serve", "--sim", "--listen", "127.0.0.1:0", "--socket"])
        .arg(&socket)
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        anyhow::ensure!(Instant::now() < deadline, "daemon did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok((child, socket, dir))
}

/// The real `tether serve --sim` process under load: RSS now and its peak.
async fn daemon_memory(width: u32, height: u32) -> anyhow::Result<(u64, u64)> {
    let (mut child, socket, _dir) = spawn_daemon(width, height).await?;
    let mut c = RawClient::connect(&socket).await?;
    let mut obs = String::new();
    for i in 0..60u64 {
        let r: Value = c.ok(i, "screenshot", json!({})).await?;
        obs = r["metadata"]["observation_id"].as_str().unwrap_or_default().to_string();
    }
    for i in 0..20u64 {
        // Verified (the watch's memory counts too); the wallpaper does not change: `any`.
        let params = json!({"operation_id": format!("m{i}"), "observation_id": obs, "expect": "any",
            "action": {"type": "tap", "x": 20, "y": 20}});
        c.ok(1000 + i, "action", params).await?;
    }
    // Calibration moves the pointer over 16 points and compares pictures of each.
    let cal = c.ok(2000, "calibrate", json!({"grid": 4})).await?;
    anyhow::ensure!(cal["residual"].is_object(), "calibrate: {cal}");
    let rss = rss_kib(child.id());
    let _ = child.kill();
    let _ = child.wait();
    rss
}

/// What [`ocr_daemon`] measured.
struct OcrDaemon {
    tap_text: Vec<f64>,
    tap: Vec<f64>,
    reads: usize,
    daemon_rss: u64,
    daemon_hwm: u64,
    worker_rss: u64,
    worker_hwm: u64,
}

/// The pid of `parent`'s child running `name` (its `comm`), if any.
fn child_named(parent: u32, name: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.filter_map(Result::ok).find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // "pid (comm) state ppid ...": comm may hold spaces, so split after its ')'.
        let (head, rest) = stat.rsplit_once(')')?;
        let ppid: u32 = rest.split_whitespace().nth(1)?.parse().ok()?;
        (ppid == parent && head.contains(name)).then_some(pid)
    })
}

/// The real `tether serve --sim` at 1080p with its OCR worker: `tap_text` end to end
/// against `tap` at the same place, and both processes' memory after text reads.
async fn ocr_daemon(taps: usize) -> anyhow::Result<OcrDaemon> {
    let (mut child, socket, _dir) = spawn_daemon(1920, 1080).await?;
    let pid = child.id();
    let measured = ocr_daemon_run(pid, &socket, taps).await;
    // Stopped whatever happened: a failed step must not leave the daemon running.
    let _ = child.kill();
    let _ = child.wait();
    measured
}

async fn ocr_daemon_run(pid: u32, socket: &std::path::Path, taps: usize) -> anyhow::Result<OcrDaemon> {
    let mut c = RawClient::connect(socket).await?;
    let mut id = 0u64;
    let mut next = || {
        id += 1;
        id
    };
    let act = |op: String, action: Value| json!({"operation_id": op, "action": action, "expect": "any"});
    // Text screenshots of every app (the worker loads on the first).
    let mut reads = 0;
    for app in tether::device::sim::APP_NAMES {
        c.ok(next(), "action", act(format!("open-{app}"), json!({"type": "open_app", "name": app}))).await?;
        let shot = c.ok(next(), "screenshot", json!({"text": true})).await?;
        anyhow::ensure!(shot["text"]["lines"].is_array(), "no text read: is Tesseract installed? {shot}");
        reads += 1;
    }
    c.ok(next(), "action", act("settings".into(), json!({"type": "open_app", "name": "Settings"}))).await?;
    let shot = c.ok(next(), "screenshot", json!({})).await?;
    let m = &shot["metadata"];
    let bottom = json!({"type": "move", "x": m["image_size"]["width"].as_f64().unwrap_or(0.0) / 2.0,
                        "y": m["image_size"]["height"].as_f64().unwrap_or(0.0) - 4.0});
    c.ok(
        next(),
        "action",
        json!({"operation_id": "park", "observation_id": m["observation_id"], "action": bottom, "expect": "any"}),
    )
    .await?;
    let (mut tap_text, mut tap) = (Vec::new(), Vec::new());
    for i in 0..taps {
        let t = Instant::now();
        let r = c.ok(next(), "action", act(format!("tt-{i}"), json!({"type": "tap_text", "text": "General"}))).await?;
        tap_text.push(t.elapsed().as_secs_f64() * 1000.0);
        let at = r["text_target"]["center"].clone();
        c.ok(next(), "action", act(format!("back-{i}"), json!({"type": "back"}))).await?;
        // The same tap by coordinates, on a fresh observation of the same screen.
        let shot = c.ok(next(), "screenshot", json!({})).await?;
        let params = json!({"operation_id": format!("t-{i}"), "observation_id": shot["metadata"]["observation_id"],
                            "expect": "any", "action": {"type": "tap", "x": at["x"], "y": at["y"]}});
        let t = Instant::now();
        c.ok(next(), "action", params).await?;
        tap.push(t.elapsed().as_secs_f64() * 1000.0);
        c.ok(next(), "action", act(format!("back2-{i}"), json!({"type": "back"}))).await?;
        // The pointer rests over "General" now and would hide its letters: parked on the
        // empty bottom edge, as `TEXT_NOT_FOUND` tells an agent to.
        let shot = c.ok(next(), "screenshot", json!({})).await?;
        let m = &shot["metadata"];
        let bottom = json!({"type": "move", "x": m["image_size"]["width"].as_f64().unwrap_or(0.0) / 2.0,
                            "y": m["image_size"]["height"].as_f64().unwrap_or(0.0) - 4.0});
        let park = json!({"operation_id": format!("park-{i}"), "observation_id": m["observation_id"],
                          "action": bottom, "expect": "any"});
        c.ok(next(), "action", park).await?;
    }
    let worker = child_named(pid, "tether").context("the daemon's OCR worker process")?;
    let (worker_rss, worker_hwm) = rss_kib(worker)?;
    let (daemon_rss, daemon_hwm) = rss_kib(pid)?;
    Ok(OcrDaemon { tap_text, tap, reads, daemon_rss, daemon_hwm, worker_rss, worker_hwm })
}

/// Hostile load on a 2160p sim: `clients` connections each pipeline `each` full-size
/// screenshots and never read. Returns the daemon's peak RSS (KiB), the slowest `status`
/// answer another connection got meanwhile, and how many requests limits refused.
async fn stalled_clients(clients: usize, each: u64) -> anyhow::Result<(u64, Duration, u64)> {
    let (mut child, socket, _dir) = spawn_daemon(3840, 2160).await?;
    let mut probe = RawClient::connect(&socket).await?;
    probe.ok(0, "screenshot", json!({})).await?; // the first frame exists
    let mut stalled = Vec::new();
    for _ in 0..clients {
        let mut c = RawClient::connect(&socket).await?;
        let mut lines = String::new();
        for id in 0..each {
            lines.push_str(&format!("{{\"id\":{id},\"method\":\"screenshot\",\"max_edge\":4096}}\n"));
        }
        c.send_raw(lines.as_bytes()).await?;
        stalled.push(c);
    }
    let mut slowest = Duration::ZERO;
    let until = Instant::now() + Duration::from_secs(15);
    let mut id = 1u64;
    let mut refused = 0;
    while Instant::now() < until {
        let t = Instant::now();
        let st: Value = probe.ok(id, "status", json!({})).await?;
        slowest = slowest.max(t.elapsed());
        refused = st["limits"]["refused_busy"].as_u64().unwrap_or(0);
        id += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, hwm) = rss_kib(child.id())?;
    drop(stalled);
    let _ = child.kill();
    let _ = child.wait();
    Ok((hwm, slowest, refused))
}

/// Distinct sim frames at `w`x`h` (the pointer moves between them).
fn sim_frames(w: u32, h: u32, count: usize) -> anyhow::Result<Vec<tether::device::video::Frame>> {
    use tether::device::hid::{HidInterface, HidReport, PointerReport};
    use tether::device::video::{FrameHub, FrameSource};
    let phone = tether::device::sim::SimPhone::new(SimConfig {
        capture_width: w,
        capture_height: h,
        fps: 60,
        glide_ms: 1,
        ..SimConfig::default()
    });
    let (hub, reader) = FrameHub::new();
    let _guard = Box::new(phone.display()).start(hub)?;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let x = 2000 + u16::try_from(i * 900 % 28000).unwrap_or(0);
        let r = HidReport::Pointer(PointerReport::new(0, x, 8000 + x / 2, 0));
        phone.consume(HidInterface::Pointer, r.encode().as_bytes());
        std::thread::sleep(Duration::from_millis(40));
        out.push((*reader.latest().context("no frame")?).clone());
    }
    Ok(out)
}

/// Software H.264 encode of sim frames: fps and per-frame latency.
fn encode_bench(w: u32, h: u32, n: usize) -> anyhow::Result<(f64, f64, f64)> {
    use tether::device::video::codec::{EncoderSettings, SoftwareH264};
    let frames = sim_frames(w, h, 30)?;
    let mut enc = SoftwareH264::new(w, h, EncoderSettings::default())?;
    let mut times = Vec::with_capacity(n);
    let start = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        enc.encode(&frames[i % frames.len()])?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let fps = n as f64 / start.elapsed().as_secs_f64();
    let (p50, p99) = summary(times);
    Ok((fps, p50, p99))
}

/// Capture (sim render) → encoder → viewer: how long a picture waits before a viewer takes it.
fn viewer_latency(w: u32, h: u32, secs: u64) -> anyhow::Result<(f64, f64)> {
    use tether::device::hid::{HidInterface, HidReport, PointerReport};
    use tether::device::video::codec::EncoderSettings;
    use tether::device::video::viewers::ViewerHub;
    use tether::device::video::{FrameHub, FrameSource};
    let phone = tether::device::sim::SimPhone::new(SimConfig {
        capture_width: w,
        capture_height: h,
        fps: 30,
        glide_ms: 1,
        ..SimConfig::default()
    });
    let (hub, reader) = FrameHub::new();
    let _display = Box::new(phone.display()).start(hub)?;
    let viewers = ViewerHub::default();
    let _enc = tether::device::video::encode::start_encoder(
        reader,
        viewers.clone(),
        EncoderSettings::default(),
        Default::default(),
    )?;
    let (id, _) = viewers.join();
    let mut lat = Vec::new();
    let start = Instant::now();
    let mut x = 2000u16;
    while start.elapsed() < Duration::from_secs(secs) {
        x = if x > 30000 { 2000 } else { x + 300 };
        let r = HidReport::Pointer(PointerReport::new(0, x, 16000, 0));
        phone.consume(HidInterface::Pointer, r.encode().as_bytes());
        while let Some(f) = viewers.take(id) {
            lat.push(f.captured_at.elapsed().as_secs_f64() * 1000.0);
            viewers.ack(id, f.sequence);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(summary(lat))
}

/// MJPEG decode of a 1080p frame (made by Debian's ffmpeg from its test pattern).
fn mjpeg_bench(n: usize) -> anyhow::Result<Option<(f64, f64, usize)>> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("frame.jpg");
    let made = Command::new("ffmpeg")
        .args(["-v", "error", "-f", "lavfi", "-i", "testsrc=size=1920x1080:rate=1", "-frames:v", "1", "-f", "mjpeg"])
        .arg(&file)
        .status();
    if !made.is_ok_and(|s| s.success()) {
        return Ok(None);
    }
    let jpeg = std::fs::read(&file)?;
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let rgb = tether::device::video::codec::decode_mjpeg(&jpeg, (1920, 1080))?;
        anyhow::ensure!(rgb.len() == 1920 * 1080 * 3, "decoded {} bytes", rgb.len());
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let (p50, p99) = summary(times);
    Ok(Some((p50, p99, jpeg.len())))
}

/// Lease loss: the opening connection closes while the task's agent holds the finger down
/// in a long drag; the time until the agent's drag has ended (held input released, reply
/// received) and until `status` shows no task.
async fn lease_abandon(n: usize) -> anyhow::Result<(f64, f64, f64, f64)> {
    let d = SimDaemon::start().await?;
    let mut watcher = d.connect().await?;
    let (mut released, mut gone) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n as u64 {
        let mut lease = d.connect().await?;
        let opened = lease.ok(1, "task_open", json!({"title": format!("lease {i}")})).await?;
        let token = opened["token"].as_str().context("token")?.to_string();
        let mut agent = d.connect().await?;
        let shot = agent.ok(2, "screenshot", json!({"task_token": token})).await?;
        let obs = shot["metadata"]["observation_id"].clone();
        let drag = json!({"id": 3, "method": "action", "task_token": token, "operation_id": format!("d{i}"),
            "observation_id": obs, "action": {"type": "drag", "duration_ms": 3000,
            "path": [{"x": 100, "y": 300}, {"x": 100, "y": 600}]}});
        agent.send(&drag.to_string()).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let t = Instant::now();
        drop(lease);
        agent.recv_within(Duration::from_secs(5)).await?;
        released.push(t.elapsed().as_secs_f64() * 1000.0);
        while !watcher.ok(10 + i, "status", json!({})).await?["task"].is_null() {}
        gone.push(t.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(d.phone.state().input.buttons == 0, "held input after the lease closed");
    }
    let (r50, r99) = summary(released);
    let (g50, g99) = summary(gone);
    Ok((r50, r99, g50, g99))
}

/// The sections, in the order they run; `bench memory stalled` runs only those two.
/// HTTPS `GET /api/status` over one kept-alive connection, and with a fresh TCP + TLS
/// handshake each time (p50/p99 of each, in ms), against a real `tether serve --sim`.
async fn https_status(n: usize) -> anyhow::Result<(f64, f64, f64, f64)> {
    use tether::client::https::{Credentials, HttpsClient, Target};
    use tether::server::tls::Fingerprint;
    let (mut child, socket, _dir) = spawn_daemon(1920, 1080).await?;
    let result = async {
        // Run as root (or the daemon's user): the socket makes this caller an admin.
        let mut c = tether::client::ControlClient::connect(&socket).await?;
        let status = c.call("status", json!({})).await?;
        let port = status["https"]["port"].as_u64().context("no HTTPS port")? as u16;
        let pin = Fingerprint::parse(status["https"]["fingerprint"].as_str().context("no fingerprint")?)
            .context("fingerprint")?;
        let token = c.call("token", json!({"action": "rotate", "name": "admin"})).await?["token"]
            .as_str()
            .context("token")?
            .to_string();
        let client = HttpsClient::new(
            Target { host: "localhost".into(), port },
            pin,
            Credentials { token: Some(token), task_token: None },
        )?;
        let mut kept = client.connect().await?;
        kept.json(hyper::Method::GET, "/api/status", None).await?;
        let mut warm = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            kept.json(hyper::Method::GET, "/api/status", None).await?;
            warm.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        let mut fresh = Vec::with_capacity(n / 2);
        for _ in 0..n / 2 {
            let t = Instant::now();
            client.connect().await?.json(hyper::Method::GET, "/api/status", None).await?;
            fresh.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        let (w50, w99) = summary(warm);
        let (f50, f99) = summary(fresh);
        anyhow::Ok((w50, w99, f50, f99))
    }
    .await;
    let _ = child.kill();
    let _ = child.wait();
    result
}

const SECTIONS: [&str; 12] = [
    "screenshots",
    "actions",
    "memory",
    "stalled",
    "video",
    "mjpeg",
    "lease",
    "https",
    "diff",
    "flow",
    "verified_tap",
    "ocr",
];

/// `n` verified taps on a Demo toggle (it flips at once) on a fresh sim at its defaults
/// (30 fps): each round trip in ms, and how many settled by still frames.
async fn verified_taps(n: usize) -> anyhow::Result<(Vec<f64>, usize)> {
    let d = SimDaemon::start_phone(SimConfig::default(), InputTimings::default()).await?;
    let mut c = d.connect().await?;
    let state = c.ok(1, "sim_state", json!({})).await?;
    let screen = (state["screen_size"][0].as_f64().context("size")?, state["screen_size"][1].as_f64().context("size")?);
    let shot = c.ok(2, "screenshot", json!({})).await?;
    let image = (
        shot["metadata"]["image_size"]["width"].as_f64().context("width")?,
        shot["metadata"]["image_size"]["height"].as_f64().context("height")?,
    );
    let at = |state: &Value, id: &str| -> anyhow::Result<(f64, f64)> {
        let r = &element(state, id).context("element")?["rect"];
        let c = |k: &str, len: &str, extent: f64, img: f64| {
            ((r[k].as_f64().unwrap_or(0.0) + r[len].as_f64().unwrap_or(0.0) / 2.0) * img / extent).floor()
        };
        Ok((c("x", "w", screen.0, image.0), c("y", "h", screen.1, image.1)))
    };
    let (x, y) = at(&state, "app0")?;
    let obs = shot["metadata"]["observation_id"].as_str().context("observation")?;
    let r = c
        .ok(
            3,
            "action",
            json!({"operation_id": "open", "observation_id": obs, "action": {"type": "tap", "x": x, "y": y}}),
        )
        .await?;
    let mut obs = r["after_observation_id"].as_str().context("after_observation_id")?.to_string();
    let state = c.ok(4, "sim_state", json!({})).await?;
    let (x, y) = at(&state, "toggle0")?;
    let mut times = Vec::with_capacity(n);
    let mut still = 0;
    for i in 0..n {
        let id = 10 + i as u64;
        let t = Instant::now();
        let r = c
            .ok(
                id,
                "action",
                json!({"operation_id": format!("t{i}"), "observation_id": obs, "action": {"type": "tap", "x": x, "y": y}}),
            )
            .await?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(r["changed"] == true, "tap {i} saw no change: {r}");
        if r["settled_by"] == "still_frames" {
            still += 1;
        }
        obs = r["after_observation_id"].as_str().context("after_observation_id")?.to_string();
    }
    Ok((times, still))
}

/// How a scripted agent learns where things are between steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Looking {
    /// Act and verify: each action's answer carries the next observation.
    Verified,
    /// A screenshot right after each (unverified) action, as most phone tools do.
    ScreenshotAfter,
    /// A fixed sleep of this many ms, then a screenshot (the usual workaround).
    SleepThenScreenshot(u64),
}

/// One step of the scripted flow: the action (coordinates from an element's centre) and
/// the check of its effect in `sim_state`.
struct Step {
    name: &'static str,
    target: Option<&'static str>,
    action: Value,
    check: fn(&Value) -> bool,
}

fn element<'a>(state: &'a Value, id: &str) -> Option<&'a Value> {
    state["elements"].as_array()?.iter().find(|e| e["id"] == id)
}

fn flow_steps() -> Vec<Step> {
    let tap = json!({"type": "tap"});
    vec![
        Step { name: "open the app", target: Some("app0"), action: tap.clone(), check: |s| s["screen"] == "app" },
        Step {
            name: "focus the field",
            target: Some("text_field"),
            action: tap.clone(),
            check: |s| element(s, "text_field").is_some_and(|e| e["focused"] == true),
        },
        Step {
            name: "type",
            target: None,
            action: json!({"type": "type_text", "text": "hello"}),
            check: |s| element(s, "text_field").is_some_and(|e| e["text"] == "hello"),
        },
        Step {
            name: "flip a toggle",
            target: Some("toggle0"),
            action: tap.clone(),
            check: |s| element(s, "toggle0").is_some_and(|e| e["on"] == true),
        },
        Step {
            name: "load",
            target: Some("button2"),
            action: tap.clone(),
            check: |s| element(s, "button2").is_some_and(|e| e["taps"] == 1),
        },
        Step {
            name: "scroll the list",
            target: Some("list"),
            action: json!({"type": "scroll", "direction": "down"}),
            check: |s| element(s, "list").is_some_and(|e| e["scroll_offset"].as_i64() > Some(0)),
        },
        Step {
            name: "tap a row",
            target: Some("row9"),
            action: tap.clone(),
            check: |s| element(s, "row9").is_some_and(|e| e["taps"] == 1),
        },
        Step { name: "back home", target: Some("back"), action: tap.clone(), check: |s| s["screen"] == "home" },
        Step { name: "open another app", target: Some("app0"), action: tap.clone(), check: |s| s["screen"] == "app" },
        Step {
            name: "flip another toggle",
            target: Some("toggle1"),
            action: tap,
            check: |s| element(s, "toggle1").is_some_and(|e| e["on"] == true),
        },
    ]
}

/// Runs the 10-step flow once on a fresh sim; returns its wall time (ms) and the steps
/// whose effect did not happen.
async fn flow_once(looking: Looking) -> anyhow::Result<(f64, usize)> {
    let d = SimDaemon::start_phone(SimConfig::default(), InputTimings::default()).await?;
    let mut c = d.connect().await?;
    let state = c.ok(1, "sim_state", json!({})).await?;
    let screen = (state["screen_size"][0].as_f64().context("size")?, state["screen_size"][1].as_f64().context("size")?);
    let started = Instant::now();
    let shot = c.ok(2, "screenshot", json!({})).await?;
    let mut obs = shot["metadata"]["observation_id"].as_str().context("observation")?.to_string();
    let mut image = (
        shot["metadata"]["image_size"]["width"].as_f64().context("width")?,
        shot["metadata"]["image_size"]["height"].as_f64().context("height")?,
    );
    let mut misses = 0;
    let mut id = 10u64;
    let mut outside = Duration::ZERO;
    for (i, step) in flow_steps().iter().enumerate() {
        // Where the target is: the sim's account stands in for the agent's eyes (not timed).
        let t = Instant::now();
        let state = c.ok(id, "sim_state", json!({})).await?;
        id += 1;
        outside += t.elapsed();
        let mut action = step.action.clone();
        if let Some(target) = step.target {
            let Some(e) = element(&state, target) else {
                misses += 1;
                continue;
            };
            let r = &e["rect"];
            let centre = |k: &str, len: &str, extent: f64, img: f64| {
                ((r[k].as_f64().unwrap_or(0.0) + r[len].as_f64().unwrap_or(0.0) / 2.0) * img / extent).floor()
            };
            action["x"] = json!(centre("x", "w", screen.0, image.0));
            action["y"] = json!(centre("y", "h", screen.1, image.1));
        }
        let mut params = json!({"operation_id": format!("f{i}"), "observation_id": obs, "action": action});
        if looking != Looking::Verified {
            params["verify"] = json!(false);
        }
        let r = c.call(id, "action", params).await?;
        id += 1;
        let effect = if r["ok"] == true { r["result"].clone() } else { r["error"]["effect"].clone() };
        match looking {
            Looking::Verified => {
                // Where a verified step's time goes, for whoever tunes the settle rules.
                if std::env::var_os("TETHER_BENCH_STEPS").is_some() {
                    eprintln!(
                        "flow step {:>2} {:<20} {:>5} ms (settled_ms {}, {})",
                        i + 1,
                        step.name,
                        effect["duration_ms"],
                        effect["settled_ms"],
                        effect["settled_by"]
                    );
                }
                obs = effect["after_observation_id"].as_str().context("after_observation_id")?.to_string();
                image = (
                    effect["image_size"]["width"].as_f64().context("width")?,
                    effect["image_size"]["height"].as_f64().context("height")?,
                );
            }
            Looking::ScreenshotAfter | Looking::SleepThenScreenshot(_) => {
                if let Looking::SleepThenScreenshot(ms) = looking {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                let shot = c.ok(id, "screenshot", json!({})).await?;
                id += 1;
                obs = shot["metadata"]["observation_id"].as_str().context("observation")?.to_string();
            }
        }
        let t = Instant::now();
        let state = c.ok(id, "sim_state", json!({})).await?;
        id += 1;
        outside += t.elapsed();
        if !(step.check)(&state) {
            misses += 1;
            eprintln!("flow {looking:?}: step {} ({}) missed", i + 1, step.name);
        }
    }
    let wall = started.elapsed().saturating_sub(outside);
    Ok((wall.as_secs_f64() * 1000.0, misses))
}

/// The act-and-verify measure, as the daemon runs it per new frame while it watches: a
/// luma sample of the phone's picture (400 samples along its long edge) and its diff with
/// the previous one, on the sim's NV12 frames with the pointer moving between them.
fn diff_bench(w: u32, h: u32, runs: usize) -> anyhow::Result<(f64, f64)> {
    use tether::device::geometry::detect_active_rect;
    use tether::device::video::luma::{changed_region, ChangeRules, LumaThumb};
    let frames = sim_frames(w, h, 2)?;
    let active = detect_active_rect(&frames[0]);
    let samples = tether::daemon::ActSettings::default().samples;
    let rules = ChangeRules::default();
    let mut prev = LumaThumb::of_rect(&frames[0], active, samples);
    let mut times: Vec<f64> = (0..runs)
        .map(|k| {
            let t = Instant::now();
            let thumb = LumaThumb::of_rect(&frames[(k + 1) % 2], active, samples);
            std::hint::black_box(changed_region(&prev, &thumb, &rules));
            prev = thumb;
            t.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    times.sort_by(f64::total_cmp);
    Ok((percentile(&times, 50.0), percentile(&times, 99.0)))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(bad) = args.iter().find(|a| !SECTIONS.contains(&a.as_str())) {
        anyhow::bail!("unknown section {bad:?}; sections: {} (none = all)", SECTIONS.join(", "));
    }
    let run = |section: &str| args.is_empty() || args.iter().any(|a| a == section);
    let n = 200;
    println!("| measure | p50 | p99 | notes |");
    println!("|---|---|---|---|");
    if run("screenshots") {
        let (p50_1080, p99_1080, bytes_1080) = screenshots(1920, 1080, n).await?;
        let (p50_2160, p99_2160, bytes_2160) = screenshots(3840, 2160, n).await?;
        println!("| screenshot, 1080p capture | {p50_1080:.1} ms | {p99_1080:.1} ms | {n} runs, PNG {bytes_1080} B, end to end over the socket |");
        println!("| screenshot, 2160p capture | {p50_2160:.1} ms | {p99_2160:.1} ms | {n} runs, PNG {bytes_2160} B, scaled to 1568 px |");
    }
    if run("actions") {
        let (o50, o99) = action_overhead("tap", n).await?;
        let (m50, m99) = action_overhead("move", n).await?;
        println!(
            "| tap overhead beyond its {:.0} ms timeline | {o50:.2} ms | {o99:.2} ms | {n} taps, client round trip |",
            tap_timeline(&InputTimings::default())
        );
        println!("| move (no waits) round trip | {m50:.2} ms | {m99:.2} ms | {n} moves |");
    }
    if run("memory") {
        for (w, h, name) in [(1920, 1080, "1080p"), (3840, 2160, "2160p")] {
            let (rss, hwm) = daemon_memory(w, h).await?;
            println!(
                "| daemon RSS, {name} sim | {:.1} MiB | peak {:.1} MiB ({:.1} MB) | after 60 screenshots, 20 taps and a 4x4 `calibrate` |",
                mib(rss),
                mib(hwm),
                mib(hwm) * 1.048_576
            );
        }
    }
    if run("stalled") {
        let (stalled_hwm, stalled_slowest, stalled_refused) = stalled_clients(40, 20).await?;
        println!(
            "| daemon peak RSS, 40 clients × 20 pipelined 2160p screenshots, never reading | - | peak {:.1} MiB | slowest `status` meanwhile {:.0} ms; {stalled_refused} refused BUSY; 15 s |",
            mib(stalled_hwm),
            stalled_slowest.as_secs_f64() * 1000.0
        );
    }
    if run("video") {
        let (fps720, e50_720, e99_720) = encode_bench(1280, 720, 300)?;
        let (fps1080, e50_1080, e99_1080) = encode_bench(1920, 1080, 200)?;
        let (l50, l99) = viewer_latency(1280, 720, 5)?;
        println!("| software H.264 encode, 720p sim screen | {e50_720:.1} ms | {e99_720:.1} ms | {fps720:.0} fps, openh264 from source, 300 frames |");
        println!("| software H.264 encode, 1080p sim screen | {e50_1080:.1} ms | {e99_1080:.1} ms | {fps1080:.0} fps, 200 frames |");
        println!(
            "| capture → viewer added latency, 720p30 | {l50:.1} ms | {l99:.1} ms | render → encode → viewer queue, 5 s |"
        );
    }
    if run("mjpeg") {
        match mjpeg_bench(100)? {
            Some((p50, p99, bytes)) => {
                println!("| MJPEG decode, 1080p | {p50:.1} ms | {p99:.1} ms | zune-jpeg, ffmpeg testsrc frame of {bytes} B, 100 runs |")
            }
            None => println!("| MJPEG decode, 1080p | - | - | not measured: needs ffmpeg to make the frame |"),
        }
    }
    if run("lease") {
        let (lr50, lr99, lg50, lg99) = lease_abandon(50).await?;
        println!(
            "| lease closed → agent's drag released | {lr50:.1} ms | {lr99:.1} ms | 50 tasks, finger down in a 3 s drag |"
        );
        println!("| lease closed → no task in `status` | {lg50:.1} ms | {lg99:.1} ms | same runs, polled over another connection |");
    }
    if run("diff") {
        for (w, h, name) in [(1920u32, 1080u32, "1080p"), (3840, 2160, "2160p")] {
            let (p50, p99) = diff_bench(w, h, 200)?;
            println!("| frame change detection, {name} | {p50:.2} ms | {p99:.2} ms | 200 runs: luma sample of the phone's picture (400 along its long edge) of a sim NV12 frame + diff against the previous |");
        }
    }
    if run("flow") {
        let runs = 5;
        for (looking, name) in [
            (Looking::Verified, "act and verify (no screenshots)"),
            (Looking::ScreenshotAfter, "screenshot right after each action"),
            (Looking::SleepThenScreenshot(1000), "1 s sleep + screenshot after each action"),
        ] {
            let mut walls = Vec::with_capacity(runs);
            let mut misses = 0;
            for _ in 0..runs {
                let (wall, missed) = flow_once(looking).await?;
                walls.push(wall);
                misses += missed;
            }
            let (p50, _) = summary(walls.clone());
            let worst = walls.iter().copied().fold(0.0, f64::max);
            println!(
                "| 10-step sim flow, {name} | {:.2} s | max {:.2} s | {misses} of {} steps missed over {runs} runs (open app, focus, type, toggle, load, scroll, row, back, open, toggle) |",
                p50 / 1000.0,
                worst / 1000.0,
                runs * 10
            );
        }
    }
    if run("verified_tap") {
        let taps = 40;
        let (times, still) = verified_taps(taps).await?;
        let (p50, p99) = summary(times);
        println!("| verified tap, a toggle that flips at once (sim, 30 fps) | {p50:.0} ms | {p99:.0} ms | {taps} taps, round trip from request to answer; {still} settled by still frames |");
    }
    if run("ocr") {
        // `TETHER_BENCH_OCR_ONLY_DAEMON=1`: only the real daemon's rows below.
        if std::env::var_os("TETHER_BENCH_OCR_ONLY_DAEMON").is_none() {
            ocr::ocr_section(8).await?;
        }
        let taps = 20;
        let m = ocr_daemon(taps).await?;
        let (t50, t99) = summary(m.tap_text);
        let (p50, p99) = summary(m.tap);
        println!("| `tap_text` end to end, 1080p sim | {t50:.0} ms | {t99:.0} ms | {taps} verified taps on \"General\" (Settings), round trip: read of the observation, tap, settle, band re-read of the pushed page; the same `tap` at its centre: p50 {p50:.0} ms, p99 {p99:.0} ms |");
        println!(
            "| RSS with OCR loaded, 1080p sim | {:.1} MiB | peak {:.1} MiB | the real `tether serve --sim`: daemon peak {:.1} MiB + `tether ocr-worker` peak {:.1} MiB, after {} text screenshots and the taps above |",
            mib(m.daemon_rss + m.worker_rss),
            mib(m.daemon_hwm + m.worker_hwm),
            mib(m.daemon_hwm),
            mib(m.worker_hwm),
            m.reads
        );
    }
    if run("https") {
        let (w50, w99, f50, f99) = https_status(n).await?;
        println!("| HTTPS `GET /api/status`, kept-alive connection | {w50:.2} ms | {w99:.2} ms | {n} requests, HTTP/1.1, TLS 1.3, pinned CA |");
        println!("| HTTPS `GET /api/status`, fresh TCP + TLS handshake | {f50:.2} ms | {f99:.2} ms | {} connections, ECDSA P-256 |", n / 2);
    }
    Ok(())
}
