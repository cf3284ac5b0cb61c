//! The `m2m` suite: our stateful M2M encoder and decoder code against a real kernel M2M
//! driver (vicodec, FWHT; built out of tree from Debian's linux-source by run.sh), through
//! its single-planar queues and, reloaded with `multiplanar=1`, its multi-planar ones (the
//! API the Pi's and Rockchip's codecs use).

use anyhow::{ensure, Context};
use tether::device::video::convert::rgb_to_i420;
use tether::device::video::m2m::{find_node, M2mCodec, M2mError};
use tether::device::video::v4l2::{FourCc, V4l2Device};

use super::log;

const FWHT: FourCc = FourCc::new(b"FWHT");
const YU12: FourCc = FourCc::new(b"YU12");

fn mean_abs_diff(a: &[u8], b: &[u8]) -> f64 {
    let n = a.len().min(b.len()).max(1);
    a.iter().zip(b).map(|(x, y)| f64::from(x.abs_diff(*y))).sum::<f64>() / n as f64
}

/// Width and height from an FWHT frame header (big-endian words after two magic words and
/// the version).
fn fwht_size(coded: &[u8]) -> Option<(u32, u32)> {
    let word = |i: usize| coded.get(i..i + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    Some((word(12)?, word(16)?))
}

fn round_trip(enc: &mut M2mCodec, dec: &mut M2mCodec, raw: &[u8], w: u32, h: u32) -> anyhow::Result<()> {
    let coded = enc.process(raw).context("encode")?;
    ensure!(!coded.is_empty() && coded.len() < raw.len(), "coded {} bytes from {}", coded.len(), raw.len());
    ensure!(fwht_size(&coded) == Some((w, h)), "encoder wrote a header for {:?}", fwht_size(&coded));
    let decoded = dec.process(&coded).context("decode")?;
    let fmt = dec.capture_format().context("decoder never announced its format")?;
    ensure!((fmt.width, fmt.height, fmt.fourcc) == (w, h, YU12), "decoder format {fmt:?}, want {w}x{h} YU12");
    ensure!(decoded.len() >= raw.len(), "decoded {} bytes, want {}", decoded.len(), raw.len());
    let err = mean_abs_diff(&decoded[..raw.len()], raw);
    ensure!(err < 4.0, "round trip error {err:.2} per sample");
    log(format!("m2m {w}x{h}: {} → {} bytes → decoded, mean error {err:.2}", raw.len(), coded.len()));
    Ok(())
}

fn frame(w: u32, h: u32) -> anyhow::Result<Vec<u8>> {
    let rgb = super::video::sim_frame(w, h)?;
    Ok(rgb_to_i420(&rgb, w as usize, h as usize))
}

/// Encoder and decoder round trips, then a mid-stream resolution change the decoder must
/// follow through its source-change event.
fn suite(planes: &str) -> anyhow::Result<()> {
    let enc_path = find_node(YU12, FWHT).context("no M2M encoder node (vicodec loaded?)")?;
    let dec_path = find_node(FWHT, YU12).context("no M2M decoder node")?;
    let caps = V4l2Device::open(&enc_path)?.querycap()?.device_caps;
    log(format!("vicodec ({planes}, caps {caps:#x}): encoder {}, decoder {}", enc_path.display(), dec_path.display()));
    let (w, h) = (640u32, 480u32);
    let raw = frame(w, h)?;
    let mut enc = M2mCodec::encoder(&enc_path, YU12, FWHT, w, h, &[])?;
    let mut dec = M2mCodec::decoder(&dec_path, FWHT, YU12, w, h)?;
    for _ in 0..3 {
        round_trip(&mut enc, &mut dec, &raw, w, h)?;
    }
    // vicodec's smallest picture is 640x360: a smaller one is refused, not silently resized.
    let small = M2mCodec::encoder(&enc_path, YU12, FWHT, 320, 240, &[]);
    ensure!(matches!(small, Err(M2mError::Unsupported { .. })), "320x240 encoder: {small:?}");
    // The sender changes resolution: a new encoder session, the same decoder session.
    drop(enc);
    let (w2, h2) = (1280u32, 720u32);
    let raw2 = frame(w2, h2)?;
    let mut enc = M2mCodec::encoder(&enc_path, YU12, FWHT, w2, h2, &[])?;
    for _ in 0..2 {
        round_trip(&mut enc, &mut dec, &raw2, w2, h2).context("after the resolution change")?;
    }
    log(format!("m2m {planes}: decoder followed {w}x{h} → {w2}x{h2} mid-stream"));
    Ok(())
}

/// The decoder that capture uses for compressed formats, driven with vicodec's FWHT: coded
/// frames in, RGB pictures out that match what was encoded.
fn capture_decoder(planes: &str) -> anyhow::Result<()> {
    use tether::device::video::codec::{find_hardware_decoder, HardwareDecoder};
    let enc_path = find_node(YU12, FWHT).context("no M2M encoder node")?;
    let dec_path = find_hardware_decoder(FWHT).context("find_hardware_decoder found no FWHT decoder")?;
    // 600 rows are not whole macroblocks: vicodec pads to 608, we lay the picture out in
    // that geometry, crop to 600 on the encoder and read 600 visible rows back.
    let (w, h) = (800u32, 600u32);
    let rgb = super::video::sim_frame(w, h)?;
    let mut enc = M2mCodec::encoder(&enc_path, YU12, FWHT, w, h, &[])?;
    let layout = enc.output_format().context("encoder layout")?;
    ensure!((layout.width, layout.height) == (800, 608), "vicodec's padded layout: {layout:?}");
    let raw = tether::device::video::convert::pad_i420(
        &rgb_to_i420(&rgb, w as usize, h as usize),
        w as usize,
        h as usize,
        layout.bytes_per_line as usize,
        layout.height as usize,
    );
    let mut dec = HardwareDecoder::new(&dec_path, FWHT, w, h)?;
    let mut pictures = 0;
    for _ in 0..10 {
        let coded = enc.process(&raw)?;
        if let Some((dw, dh, out)) = dec.decode(&coded, (w, h))? {
            ensure!((dw, dh) == (w, h), "picture {dw}x{dh}");
            let err = mean_abs_diff(&out, &rgb);
            ensure!(err < 6.0, "decoded picture differs from the source: mean error {err:.2}");
            pictures += 1;
        }
    }
    ensure!(pictures >= 8, "only {pictures} of 10 frames came out as pictures");
    log(format!(
        "capture decoder ({planes}): {pictures}/10 FWHT frames (coded {}x{}) → RGB {w}x{h} matching the source",
        layout.width, layout.height
    ));
    Ok(())
}

pub async fn run() -> anyhow::Result<()> {
    suite("single-planar")?;
    capture_decoder("single-planar")?;
    encoder_selection().await?;
    super::reload_module("vicodec", &["multiplanar=1"])?;
    suite("multi-planar")?;
    capture_decoder("multi-planar")
}

/// `tether serve` with config file `conf`, on the suite's socket and a free HTTPS port.
fn serve(conf: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new("/tether");
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--config", conf, "--socket", "/run/tether-m2m.sock"])
        .args(["--data-dir", "/run/tether-m2m"]);
    cmd
}

/// Encoder selection against a real M2M driver that is not an H.264 encoder: `hardware`
/// refuses to start with a message that says why; `auto` starts on software.
pub async fn encoder_selection() -> anyhow::Result<()> {
    let conf = "/run/tether-m2m.toml";
    std::fs::write(conf, "hid = \"sim\"\nvideo = \"sim\"\nencoder_backend = \"hardware\"\n")?;
    let out = serve(conf).output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success(), "serve with encoder_backend=hardware started without an H.264 encoder");
    ensure!(stderr.contains("no V4L2 M2M node encodes YU12 to H.264"), "unclear refusal: {stderr}");
    log("encoder_backend=hardware without an H.264 M2M node: refused with a clear message");
    std::fs::write(conf, "hid = \"sim\"\nvideo = \"sim\"\ndecoder_backend = \"hardware\"\n")?;
    let out = serve(conf).output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success(), "serve with decoder_backend=hardware started without an MJPEG/H.264 decoder");
    ensure!(stderr.contains("no V4L2 M2M node decodes MJPEG or H.264"), "unclear refusal: {stderr}");
    log("decoder_backend=hardware without an MJPEG/H.264 M2M node: refused with a clear message");
    std::fs::write(conf, "hid = \"sim\"\nvideo = \"sim\"\nencoder_backend = \"auto\"\n")?;
    let mut child = serve(conf).spawn()?;
    // Wait until the daemon answers (not merely until its socket exists).
    let start = std::time::Instant::now();
    let mut c = loop {
        match tether_tests::harness::RawClient::connect(std::path::Path::new("/run/tether-m2m.sock")).await {
            Ok(c) => break c,
            Err(e) => {
                if let Some(status) = child.try_wait()? {
                    anyhow::bail!("serve exited with {status} before answering");
                }
                ensure!(start.elapsed() < std::time::Duration::from_secs(30), "daemon did not answer: {e}");
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    };
    let st = c.ok(1, "status", serde_json::json!({})).await?;
    ensure!(st["video"]["encoder"] == "software", "auto on a board without H.264 M2M: {}", st["video"]);
    log("encoder_backend=auto with only vicodec present: software");
    child.kill()?;
    child.wait()?;
    Ok(())
}
