//! The `video` suite: vivid's HDMI output looped back into its HDMI input, captured by
//! `tether serve --video v4l2` through our own V4L2 layer.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use base64::Engine as _;
use serde_json::{json, Value};
use tether::device::sim::{SimConfig, SimPhone};
use tether::device::video::convert::{nv12_to_rgb, packed422_to_rgb, rgb_to_yuyv};
use tether::device::video::v4l2::{BufType, FourCc, PixFormat, V4l2Device};
use tether::device::video::{FrameHub, FrameSource};
use tether_tests::harness::RawClient;

use super::log;

pub const SOCKET: &str = "/run/tether-video.sock";
/// vivid as run.sh loads it: one HDMI input (input 1; input 0 is a webcam) and one HDMI
/// output.
const VIVID_PARAMS: [&str; 6] =
    ["n_devs=1", "node_types=0x101", "num_inputs=2", "input_types=0x0c", "num_outputs=1", "output_types=0x01"];

/// vivid's capture and output nodes with the queue type each uses.
fn nodes() -> anyhow::Result<((PathBuf, BufType), (PathBuf, BufType))> {
    let (mut cap, mut out) = (None, None);
    for e in std::fs::read_dir("/dev")?.flatten() {
        let p = e.path();
        if !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("video")) {
            continue;
        }
        let Ok(dev) = V4l2Device::open(&p) else { continue };
        let Ok(c) = dev.querycap() else { continue };
        if let Some(kind) = BufType::capture_for(c.device_caps) {
            cap = Some((p, kind));
        } else if let Some(kind) = BufType::output_for(c.device_caps) {
            out = Some((p, kind));
        }
    }
    Ok((cap.context("no vivid capture node")?, out.context("no vivid output node")?))
}

/// vivid's loop at 640x480 on the HDMI input; returns the signal-mode control's id.
fn setup_loop(cap: &V4l2Device, out: &V4l2Device, w: u32, h: u32) -> anyhow::Result<u32> {
    cap.set_input(1).context("select the HDMI input")?;
    let mut timings = None;
    for i in 0..200 {
        match cap.enum_dv_timings(i)? {
            Some(t) if t.width == w && t.height == h => {
                timings = Some(t);
                break;
            }
            Some(_) => {}
            None => break,
        }
    }
    let t = timings.context("no 640x480 DV timings preset")?;
    cap.set_dv_timings(&t)?;
    out.set_dv_timings(&t)?;
    for (name, value) in [("Loop Video", 1), ("OSD Text Mode", 2)] {
        let id = cap.control_id(name)?.with_context(|| format!("vivid control {name:?}"))?;
        cap.set_control(id, value)?;
    }
    cap.control_id("DV Timings Signal Mode")?.context("signal mode control")
}

/// The HDMI input's EDID (input 1 here; what the phone reads to pick a mode) round-trips through our
/// G_EDID/S_EDID: a changed product code with a fixed checksum reads back as written.
fn check_edid(cap: &V4l2Device) -> anyhow::Result<()> {
    let original = cap.edid(1, 2)?;
    ensure!(original.len() >= 128 && original[..8] == [0, 255, 255, 255, 255, 255, 255, 0], "EDID {original:02x?}");
    let mut edid = original.clone();
    edid[10] ^= 0x5a; // product code, low byte
    let sum = edid[..127].iter().fold(0u8, |a, b| a.wrapping_add(*b));
    edid[127] = 0u8.wrapping_sub(sum);
    cap.set_edid(1, &edid)?;
    let back = cap.edid(1, 2)?;
    ensure!(back == edid, "EDID read back differs from the one written");
    cap.set_edid(1, &original)?;
    log(format!("EDID: {} blocks read, changed, written and read back equal", original.len() / 128));
    Ok(())
}

/// Sets the capture node's format from outside the daemon, as a board's setup script or an
/// operator would: only possible while nobody holds buffers (retried until then).
fn set_capture_format(cap: &V4l2Device, kind: BufType, fourcc: FourCc, w: u32, h: u32) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        match cap.set_format(kind, &PixFormat::new(w, h, fourcc)) {
            Ok(f) if f.fourcc == fourcc => return Ok(()),
            Ok(f) => anyhow::bail!("capture format {f:?}, wanted {fourcc}"),
            Err(e) if start.elapsed() < Duration::from_secs(10) => {
                log(format!("capture format refused ({e:?}); retrying"));
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// A sim-rendered picture of the phone in a `w`x`h` capture frame, as RGB.
pub fn sim_frame(w: u32, h: u32) -> anyhow::Result<Vec<u8>> {
    let phone = SimPhone::new(SimConfig { capture_width: w, capture_height: h, ..SimConfig::default() });
    let (hub, reader) = FrameHub::new();
    let _guard = Box::new(phone.display()).start(hub)?;
    let start = Instant::now();
    loop {
        if let Some(f) = reader.latest() {
            // The sim draws NV12 like a capture; the output device is fed RGB.
            let mut rgb = vec![0u8; w as usize * h as usize * 3];
            for (y, row) in (0..h).zip(rgb.chunks_exact_mut(w as usize * 3)) {
                ensure!(f.row_rgb(y, 0, w, row), "sim frame {}x{} is not {w}x{h}", f.width, f.height);
            }
            return Ok(rgb);
        }
        ensure!(start.elapsed() < Duration::from_secs(10), "sim rendered nothing");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn rgb_to_nv12(rgb: &[u8], w: usize, h: usize) -> Vec<u8> {
    // Through YUYV (4:2:2), then drop every other chroma row: exact for our test frames'
    // purposes because the expected picture is computed from the very bytes we send.
    let yuyv = rgb_to_yuyv(rgb, w, h);
    let mut out = vec![0u8; w * h * 3 / 2];
    for y in 0..h {
        for x in 0..w {
            out[y * w + x] = yuyv[y * w * 2 + x * 2];
        }
    }
    for y in (0..h).step_by(2) {
        for x in (0..w).step_by(2) {
            out[w * h + (y / 2) * w + x] = yuyv[y * w * 2 + x * 2 + 1];
            out[w * h + (y / 2) * w + x + 1] = yuyv[y * w * 2 + x * 2 + 3];
        }
    }
    out
}

/// Keeps vivid's output streaming one frame, re-queued forever, until dropped.
struct Feeder {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

impl Feeder {
    fn start(
        (path, kind): &(PathBuf, BufType),
        fourcc: FourCc,
        w: u32,
        h: u32,
        bytes: Vec<u8>,
    ) -> anyhow::Result<Feeder> {
        let kind = *kind;
        let dev = V4l2Device::open(path)?;
        let fmt = dev.set_format(kind, &PixFormat::new(w, h, fourcc))?;
        ensure!(fmt.fourcc == fourcc && fmt.width == w && fmt.height == h, "output format {fmt:?}");
        let count = dev.request_buffers(kind, 2)?;
        let mut bufs = (0..count).map(|i| dev.map_buffer(kind, i)).collect::<Result<Vec<_>, _>>()?;
        let used = u32::try_from(bytes.len())?;
        for (i, b) in bufs.iter_mut().enumerate() {
            b.first_mut().as_mut_slice()[..bytes.len()].copy_from_slice(&bytes);
            dev.queue(kind, u32::try_from(i)?, &[used])?;
        }
        dev.stream(kind, true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop_t = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stop_t.load(Ordering::Relaxed) {
                if dev.wait(200)?.0 {
                    if let tether::device::video::v4l2::Dequeued::Buffer { index, .. } = dev.dequeue(kind)? {
                        dev.queue(kind, index, &[used])?;
                    }
                }
            }
            dev.stream(kind, false)?;
            drop(bufs);
            dev.request_buffers(kind, 0)?;
            Ok(())
        });
        Ok(Feeder { stop, thread: Some(thread) })
    }

    fn stop(mut self) -> anyhow::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .map(|t| t.join().unwrap_or_else(|_| Err(anyhow::anyhow!("feeder panicked"))))
            .unwrap_or(Ok(()))
    }
}

/// `tether serve --video v4l2` on `cap`; `format: None` leaves the choice to the daemon.
fn start_daemon(cap: &Path, format: Option<&str>) -> anyhow::Result<Child> {
    let format = format.map(|f| format!("format = \"{f}\"\n")).unwrap_or_default();
    start_daemon_with(&format!("device = \"{}\"\ninput = 1\n{format}", cap.display()))
}

/// `tether serve --video v4l2` with `capture` as its `[capture]` table's lines.
pub fn start_daemon_with(capture: &str) -> anyhow::Result<Child> {
    start_daemon_config(&format!("hid = \"sim\"\nvideo = \"v4l2\"\n[capture]\n{capture}"))
}

/// `tether serve` with `config` as its whole configuration file; returns once its socket
/// is there.
pub fn start_daemon_config(config: &str) -> anyhow::Result<Child> {
    let _ = std::fs::remove_file(SOCKET);
    std::fs::write("/run/tether-video.toml", config)?;
    let child = Command::new("/tether")
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--config",
            "/run/tether-video.toml",
            "--socket",
            SOCKET,
            "--data-dir",
            "/run/tether-video",
        ])
        .env("RUST_LOG", "info")
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()?;
    let start = Instant::now();
    while !Path::new(SOCKET).exists() {
        ensure!(start.elapsed() < Duration::from_secs(20), "daemon socket did not appear");
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(child)
}

/// Waits until `n` more pictures were captured (the newest frame id grew by `n`); returns
/// the status then.
pub async fn wait_frames(c: &mut RawClient, id: &mut u64, n: u64) -> anyhow::Result<Value> {
    *id += 1;
    let first = c.ok(*id, "status", json!({})).await?["video"]["frame_id"].as_u64().unwrap_or(0);
    let start = Instant::now();
    loop {
        *id += 1;
        let st = c.ok(*id, "status", json!({})).await?;
        let now = st["video"]["frame_id"].as_u64().unwrap_or(0);
        if now >= first + n {
            log(format!("{} frames in {:.1} s", now - first, start.elapsed().as_secs_f32()));
            return Ok(st);
        }
        ensure!(start.elapsed() < Duration::from_secs(30), "frames stopped at {now} (from {first}): {}", st["video"]);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn wait_video(c: &mut RawClient, id: &mut u64, want: &str, after_generation: u64) -> anyhow::Result<Value> {
    let start = Instant::now();
    loop {
        *id += 1;
        let st = c.ok(*id, "status", json!({})).await?;
        let v = &st["video"];
        if v["signal"] == want
            && v["generation"].as_u64().unwrap_or(0) > after_generation
            && (want != "locked" || v["frame_id"].is_u64())
        {
            return Ok(st);
        }
        ensure!(
            start.elapsed() < Duration::from_secs(30),
            "video never reached {want} after generation {after_generation}: {st}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A screenshot equals our own conversion of the bytes we wrote, cropped the same way.
pub async fn check_screenshot(c: &mut RawClient, id: &mut u64, expected_full: &[u8], w: usize) -> anyhow::Result<()> {
    *id += 1;
    // Unscaled: 4096 is the largest edge a screenshot may have.
    let shot = c.ok(*id, "screenshot", json!({"max_edge": 4096})).await?;
    let png_bytes = base64::engine::general_purpose::STANDARD.decode(shot["data"].as_str().context("data")?)?;
    let mut reader = png::Decoder::new(std::io::Cursor::new(png_bytes)).read_info()?;
    let mut img = vec![0; reader.output_buffer_size().context("png size")?];
    let info = reader.next_frame(&mut img)?;
    let r = &shot["metadata"]["source_rect"];
    let (x0, y0, sw, sh) = (
        r["x"].as_u64().unwrap_or(0) as usize,
        r["y"].as_u64().unwrap_or(0) as usize,
        r["width"].as_u64().unwrap_or(0) as usize,
        r["height"].as_u64().unwrap_or(0) as usize,
    );
    ensure!(
        (info.width as usize, info.height as usize) == (sw, sh),
        "unscaled crop expected: {:?} vs {sw}x{sh}",
        (info.width, info.height)
    );
    let mut want = Vec::with_capacity(sw * sh * 3);
    for y in y0..y0 + sh {
        want.extend_from_slice(&expected_full[(y * w + x0) * 3..(y * w + x0 + sw) * 3]);
    }
    let differing = img[..want.len()].iter().zip(&want).filter(|(a, b)| a != b).count();
    ensure!(differing == 0, "{differing} of {} bytes differ from the frame written", want.len());
    log(format!(
        "screenshot {sw}x{sh} at ({x0},{y0}) equals the frame written (generation {})",
        shot["metadata"]["generation"]
    ));
    Ok(())
}

pub async fn run() -> anyhow::Result<()> {
    let (cap_node, out_node) = nodes()?;
    let cap = V4l2Device::open(&cap_node.0)?;
    let out = V4l2Device::open(&out_node.0)?;
    log(format!("vivid: capture {} ({}), output {}", cap_node.0.display(), cap.querycap()?.card, out_node.0.display()));
    let (w, h) = (640u32, 480u32);
    let signal_mode = setup_loop(&cap, &out, w, h)?;
    check_edid(&cap)?;
    let rgb = sim_frame(w, h)?;
    let (wu, hu) = (w as usize, h as usize);

    // YUYV through the loop; the daemon is not told a format and follows the node's.
    set_capture_format(&cap, cap_node.1, FourCc::YUYV, w, h)?;
    let yuyv = rgb_to_yuyv(&rgb, wu, hu);
    let expected = packed422_to_rgb(&yuyv, wu, hu, wu * 2, false)?;
    let feeder = Feeder::start(&out_node, FourCc::YUYV, w, h, yuyv)?;
    let mut daemon = start_daemon(&cap_node.0, None)?;
    let mut c = RawClient::connect(Path::new(SOCKET)).await?;
    let mut id = 0;
    let st = wait_video(&mut c, &mut id, "locked", 0).await?;
    ensure!(st["video"]["backend"] == "v4l2", "{st}");
    let gen1 = st["video"]["generation"].as_u64().unwrap_or(0);
    check_screenshot(&mut c, &mut id, &expected, wu).await?;

    // Signal loss and recovery: generation bumps each time, pictures come back.
    cap.set_control(signal_mode, 1)?;
    let lost = wait_video(&mut c, &mut id, "no_signal", gen1 - 1).await?;
    log(format!("signal lost: status {}", lost["video"]));
    cap.set_control(signal_mode, 0)?;
    let back = wait_video(&mut c, &mut id, "locked", lost["video"]["generation"].as_u64().unwrap_or(gen1)).await?;
    let gen2 = back["video"]["generation"].as_u64().unwrap_or(0);
    ensure!(gen2 > gen1, "generation must bump across signal loss: {gen1} -> {gen2}");
    check_screenshot(&mut c, &mut id, &expected, wu).await?;
    log(format!("signal back: generation {gen1} -> {gen2}"));

    // Format change in the same daemon session: while the signal is away the source
    // switches to NV12 and the capture pipeline is reconfigured from outside; the daemon
    // picks the new format up when the signal returns.
    cap.set_control(signal_mode, 1)?;
    let lost = wait_video(&mut c, &mut id, "no_signal", gen2).await?;
    feeder.stop()?;
    set_capture_format(&cap, cap_node.1, FourCc::NV12, w, h)?;
    let nv12 = rgb_to_nv12(&rgb, wu, hu);
    let expected = nv12_to_rgb(&nv12, wu, hu, wu)?;
    let feeder = Feeder::start(&out_node, FourCc::NV12, w, h, nv12)?;
    cap.set_control(signal_mode, 0)?;
    let back = wait_video(&mut c, &mut id, "locked", lost["video"]["generation"].as_u64().unwrap_or(gen2)).await?;
    check_screenshot(&mut c, &mut id, &expected, wu).await?;
    log(format!(
        "YUYV → NV12 mid-session: generation {}, screenshot equals the NV12 frame",
        back["video"]["generation"]
    ));

    // And to UYVY, what the Pi's TC358743 bridge delivers.
    cap.set_control(signal_mode, 1)?;
    let lost = wait_video(&mut c, &mut id, "no_signal", back["video"]["generation"].as_u64().unwrap_or(0)).await?;
    feeder.stop()?;
    set_capture_format(&cap, cap_node.1, FourCc::UYVY, w, h)?;
    let yuyv = rgb_to_yuyv(&rgb, wu, hu);
    // Same samples, UYVY order: swap each luma/chroma byte pair.
    let uyvy: Vec<u8> = yuyv.chunks(2).flat_map(|p| [p[1], p[0]]).collect();
    let expected = packed422_to_rgb(&uyvy, wu, hu, wu * 2, true)?;
    let feeder = Feeder::start(&out_node, FourCc::UYVY, w, h, uyvy)?;
    cap.set_control(signal_mode, 0)?;
    let back = wait_video(&mut c, &mut id, "locked", lost["video"]["generation"].as_u64().unwrap_or(0)).await?;
    check_screenshot(&mut c, &mut id, &expected, wu).await?;
    log(format!(
        "NV12 → UYVY mid-session: generation {}, screenshot equals the UYVY frame",
        back["video"]["generation"]
    ));

    // A different device (here: another picture size) interrupts the task bound to the
    // first one, without waiting for its next action.
    id += 1;
    let opened = c.ok(id, "task_open", json!({"title": "bound to 640x480"})).await?;
    let (task, token) = (opened["id"].clone(), opened["token"].as_str().unwrap_or_default().to_string());
    cap.set_control(signal_mode, 1)?;
    let lost = wait_video(&mut c, &mut id, "no_signal", back["video"]["generation"].as_u64().unwrap_or(0)).await?;
    let hd = (0..200)
        .map_while(|i| cap.enum_dv_timings(i).ok().flatten())
        .find(|t| (t.width, t.height) == (1280, 720))
        .context("no 1280x720 preset")?;
    let start = Instant::now();
    while let Err(e) = cap.set_dv_timings(&hd) {
        ensure!(start.elapsed() < Duration::from_secs(10), "set 1280x720 timings: {e}");
        std::thread::sleep(Duration::from_millis(200));
    }
    cap.set_control(signal_mode, 0)?;
    let hd_status = wait_video(&mut c, &mut id, "locked", lost["video"]["generation"].as_u64().unwrap_or(0)).await?;
    ensure!(hd_status["video"]["source_size"]["width"] == 1280, "{}", hd_status["video"]);
    let start = Instant::now();
    loop {
        id += 1;
        let list = c.ok(id, "task_list", json!({"limit": 1})).await?;
        if list["tasks"][0]["state"] == "interrupted" {
            break;
        }
        ensure!(start.elapsed() < Duration::from_secs(5), "task not interrupted by the device change: {list}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    id += 1;
    let refused = c.call(id, "screenshot", json!({"task_token": token})).await?;
    ensure!(refused["error"]["code"] == "TASK_ENDED", "{refused}");
    log(format!("640x480 → 1280x720 while task {task} ran: interrupted, its token refused"));
    daemon.kill()?;
    daemon.wait()?;
    feeder.stop()?;
    drop((cap, out));

    // vivid's multi-planar API (RK3588's HDMI-in uses it): same loop, same equality.
    let params: Vec<&str> = VIVID_PARAMS.iter().copied().chain(["multiplanar=2"]).collect();
    super::reload_module("vivid", &params)?;
    let (cap_node, out_node) = nodes()?;
    ensure!(cap_node.1 == BufType::VideoCaptureMplane, "vivid capture is {:?}", cap_node.1);
    let cap = V4l2Device::open(&cap_node.0)?;
    let out = V4l2Device::open(&out_node.0)?;
    setup_loop(&cap, &out, w, h)?;
    let yuyv = rgb_to_yuyv(&rgb, wu, hu);
    let expected = packed422_to_rgb(&yuyv, wu, hu, wu * 2, false)?;
    let feeder = Feeder::start(&out_node, FourCc::YUYV, w, h, yuyv)?;
    let mut daemon = start_daemon(&cap_node.0, Some("YUYV"))?;
    let mut c = RawClient::connect(Path::new(SOCKET)).await?;
    wait_video(&mut c, &mut id, "locked", 0).await?;
    check_screenshot(&mut c, &mut id, &expected, wu).await?;
    log("multi-planar capture equals the frame written");
    daemon.kill()?;
    daemon.wait()?;
    feeder.stop()?;
    Ok(())
}
