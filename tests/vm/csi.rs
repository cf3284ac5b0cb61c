//! The `csi` suite: vimc (built from trixie's linux-source by image/kbuild.sh), a media
//! graph of sensors, debayers and a scaler behind a media-controller capture node, like
//! the Pi's TC358743 → unicam → unicam-image. `tether serve --video v4l2` on the capture
//! node must walk the graph, enable the path's links and give every pad a format, which
//! this suite reads back from the subdevice nodes, and then capture the sensor's picture.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use base64::Engine as _;
use serde_json::json;
use tether::device::video::v4l2::topology::{char_device_path, Topology};
use tether::device::video::v4l2::{mbus, MbusFormat, MediaDevice, Subdev, V4l2Device};
use tether_tests::harness::RawClient;

use super::log;
use super::video::{start_daemon_with, wait_frames, wait_video, SOCKET};

/// vimc's "Test Pattern" menu (v4l2-tpg's pattern list).
const PATTERN_RED: i32 = 7;
const PATTERN_BLUE: i32 = 9;
/// vimc's "Show Information" menu: no text drawn over the pattern.
const OSD_NONE: i32 = 2;

/// vimc's media device and its graph.
fn vimc() -> anyhow::Result<(MediaDevice, Topology)> {
    let start = Instant::now();
    loop {
        let mut nodes: Vec<PathBuf> = std::fs::read_dir("/dev")?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("media")))
            .collect();
        nodes.sort();
        for n in nodes {
            let m = MediaDevice::open(&n)?;
            if m.info()?.driver == "vimc" {
                let t = m.topology()?;
                return Ok((m, t));
            }
        }
        ensure!(start.elapsed() < Duration::from_secs(10), "no vimc media device");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn entity(t: &Topology, name: &str) -> anyhow::Result<u32> {
    Ok(t.entity_named(name).with_context(|| format!("vimc has no {name:?}"))?.id)
}

fn subdev(t: &Topology, name: &str) -> anyhow::Result<Subdev> {
    let node = t.subdev_node(entity(t, name)?).with_context(|| format!("{name} has no subdev node"))?;
    let path = char_device_path(Path::new("/"), node).context("subdev path")?;
    Ok(Subdev::open(&path)?)
}

/// The /dev path of the video node behind entity `name`.
fn video_node(t: &Topology, name: &str) -> anyhow::Result<PathBuf> {
    let id = entity(t, name)?;
    let intf = t.interfaces.iter().find(|i| i.entity == Some(id)).context("no interface")?;
    char_device_path(Path::new("/"), intf.devnode).context("video path")
}

/// Sets a sensor's picture: a solid test pattern, no text over it, and its size.
fn sensor_picture(t: &Topology, name: &str, pattern: i32, size: (u32, u32)) -> anyhow::Result<()> {
    let s = subdev(t, name)?;
    let dev = s.device();
    let pattern_id = dev.control_id("Test Pattern")?.context("no Test Pattern control")?;
    dev.set_control(pattern_id, pattern)?;
    let osd = dev.control_id("Show Information")?.context("no Show Information control")?;
    dev.set_control(osd, OSD_NONE)?;
    let got = s.set_format(0, &MbusFormat { code: mbus::RGB888_1X24, width: size.0, height: size.1, field: 1 })?;
    ensure!((got.width, got.height) == size, "{name} took {got}");
    Ok(())
}

fn link_enabled(t: &Topology, from: &str, to: &str) -> anyhow::Result<bool> {
    let (a, b) = (entity(t, from)?, entity(t, to)?);
    let link = t
        .links
        .iter()
        .find(|l| t.pad(l.source).is_some_and(|p| p.entity == a) && t.pad(l.sink).is_some_and(|p| p.entity == b))
        .with_context(|| format!("no link {from} → {to}"))?;
    Ok(link.is_enabled())
}

/// The screenshot's pixels (RGB) and size.
async fn screenshot(c: &mut RawClient, id: &mut u64) -> anyhow::Result<(u32, u32, Vec<u8>)> {
    *id += 1;
    let shot = c.ok(*id, "screenshot", json!({})).await?;
    let png_bytes = base64::engine::general_purpose::STANDARD.decode(shot["data"].as_str().context("data")?)?;
    let mut reader = png::Decoder::new(std::io::Cursor::new(png_bytes)).read_info()?;
    let mut img = vec![0; reader.output_buffer_size().context("png size")?];
    let info = reader.next_frame(&mut img)?;
    ensure!(info.color_type == png::ColorType::Rgb, "screenshot is {:?}", info.color_type);
    img.truncate(info.buffer_size());
    Ok((info.width, info.height, img))
}

/// Every pixel of the screenshot is near `rgb` (a debayered solid pattern: exact in the
/// middle, interpolated at the edges).
async fn check_colour(c: &mut RawClient, id: &mut u64, rgb: [u8; 3], what: &str) -> anyhow::Result<()> {
    let (w, h, img) = screenshot(c, id).await?;
    let off = img.chunks_exact(3).filter(|p| p.iter().zip(rgb).any(|(&got, want)| got.abs_diff(want) > 40)).count();
    let total = (w * h) as usize;
    ensure!(off * 100 <= total, "{what}: {off} of {total} pixels are not {rgb:?} (first {:?})", &img[..3]);
    log(format!("{what}: screenshot {w}x{h} is {rgb:?} ({off} pixels off)"));
    Ok(())
}

/// Reads a pad's active format from its subdevice node, independently of the daemon.
fn pad(t: &Topology, name: &str, index: u32) -> anyhow::Result<MbusFormat> {
    Ok(subdev(t, name)?.format(index)?)
}

pub async fn run() -> anyhow::Result<()> {
    let (media, t) = vimc()?;
    let capture = video_node(&t, "RGB/YUV Capture")?;
    let caps = V4l2Device::open(&capture)?.querycap()?;
    log(format!(
        "vimc: {} entities, {} links; capture node {} ({})",
        t.entities.len(),
        t.links.len(),
        capture.display(),
        caps.driver
    ));

    // 1. The default path (Debayer A → Scaler enabled by vimc), Sensor A at 800x600 red:
    // the daemon keeps the path, takes the sensor's size and sets every pad.
    sensor_picture(&t, "Sensor A", PATTERN_RED, (800, 600))?;
    let mut daemon = start_daemon_with(&format!("device = \"{}\"\n", capture.display()))?;
    let mut c = RawClient::connect(Path::new(SOCKET)).await?;
    let mut id = 0;
    let st = wait_video(&mut c, &mut id, "locked", 0).await?;
    let device = &st["video"]["device"];
    ensure!(device["driver"] == "vimc" && device["format"] == "RGB3", "{device}");
    ensure!(device["width"] == 800 && device["height"] == 600, "{device}");
    let want = "Sensor A:0 [SRGGB8_1X8 800x600] → Debayer A:0, Debayer A:1 [RGB888_1X24 800x600] → Scaler:0, \
                Scaler:1 [RGB888_1X24 800x600] → RGB/YUV Capture (RGB3 800x600)";
    ensure!(device["pipeline"] == want, "pipeline {} != {want}", device["pipeline"]);
    log(format!("pipeline: {}", device["pipeline"]));
    // Read back from the subdevice nodes themselves.
    let bayer = MbusFormat { code: mbus::SRGGB8_1X8, width: 800, height: 600, field: 1 };
    let rgb = MbusFormat { code: mbus::RGB888_1X24, ..bayer };
    for (name, index, want) in
        [("Sensor A", 0, bayer), ("Debayer A", 0, bayer), ("Debayer A", 1, rgb), ("Scaler", 0, rgb), ("Scaler", 1, rgb)]
    {
        let got = pad(&t, name, index)?;
        ensure!(
            (got.code, got.width, got.height) == (want.code, want.width, want.height),
            "{name}:{index} is {got}, want {want}"
        );
    }
    log("pad formats read back from the subdevice nodes: Sensor A:0, Debayer A:0/1, Scaler:0/1 as configured");
    wait_frames(&mut c, &mut id, 10).await?;
    check_colour(&mut c, &mut id, [255, 0, 0], "Sensor A (100% Red)").await?;
    daemon.kill()?;
    daemon.wait()?;

    // 2. A configured source on another branch: the daemon switches the links (Debayer A
    // → Scaler off, Debayer B → Scaler on) and captures Sensor B.
    sensor_picture(&t, "Sensor B", PATTERN_BLUE, (640, 480))?;
    ensure!(link_enabled(&t, "Debayer A", "Scaler")? && !link_enabled(&t, "Debayer B", "Scaler")?, "vimc's defaults");
    let mut daemon = start_daemon_with(&format!("device = \"{}\"\nsource = \"Sensor B\"\n", capture.display()))?;
    let mut c = RawClient::connect(Path::new(SOCKET)).await?;
    let st = wait_video(&mut c, &mut id, "locked", 0).await?;
    let device = &st["video"]["device"];
    ensure!(
        device["pipeline"].as_str().is_some_and(|p| p.starts_with("Sensor B:0 [SRGGB8_1X8 640x480] → Debayer B:0")),
        "{device}"
    );
    let now = media.topology()?;
    ensure!(
        !link_enabled(&now, "Debayer A", "Scaler")? && link_enabled(&now, "Debayer B", "Scaler")?,
        "links not switched to Sensor B's branch"
    );
    log("source = \"Sensor B\": Debayer A → Scaler disabled, Debayer B → Scaler enabled (read back from the graph)");
    wait_frames(&mut c, &mut id, 10).await?;
    check_colour(&mut c, &mut id, [0, 0, 255], "Sensor B (100% Blue)").await?;
    daemon.kill()?;
    daemon.wait()?;

    // 3. No source configured again: the enabled path is kept (Sensor B's, left by the run
    // above, as a board's own setup would be).
    let mut daemon = start_daemon_with(&format!("device = \"{}\"\n", capture.display()))?;
    let mut c = RawClient::connect(Path::new(SOCKET)).await?;
    let st = wait_video(&mut c, &mut id, "locked", 0).await?;
    ensure!(st["video"]["device"]["pipeline"].as_str().is_some_and(|p| p.starts_with("Sensor B:0")), "{st}");
    check_colour(&mut c, &mut id, [0, 0, 255], "the enabled path kept").await?;

    // 4. A source that is not upstream of the node is refused with the ones that are named,
    // and the daemon keeps running.
    daemon.kill()?;
    daemon.wait()?;
    let mut daemon = start_daemon_with(&format!("device = \"{}\"\nsource = \"Sensor C\"\n", capture.display()))?;
    let mut c = RawClient::connect(Path::new(SOCKET)).await?;
    let start = Instant::now();
    loop {
        id += 1;
        let st = c.ok(id, "status", json!({})).await?;
        ensure!(st["video"]["signal"] != "locked", "locked with a source that does not exist: {st}");
        if st["video"]["signal"] == "no_device" && start.elapsed() > Duration::from_secs(2) {
            break;
        }
        ensure!(start.elapsed() < Duration::from_secs(30), "never no_device with an unknown source: {}", st["video"]);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    log("source = \"Sensor C\": not locked, daemon answering");
    daemon.kill()?;
    daemon.wait()?;
    Ok(())
}
