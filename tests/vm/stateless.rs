//! The `stateless` suite: our request-API H.264 decoder against the kernel's virtual
//! stateless decoder, visl (built out of tree from trixie's linux-source by
//! `image/kbuild.sh`, booted on trixie's kernel). visl decodes nothing; it traces every
//! control it receives. This side drives a real stream (`/stream.h264`, made on the host by
//! Debian's ffmpeg from testsrc, with a resolution change in the middle) through the
//! decoder slice by slice, then prints visl's trace between `VISL TRACE BEGIN` / `END` for
//! the host to compare with ffmpeg's `trace_headers` (`tests/vm/visl_compare.py`). Then
//! the same stream frame-based, and the recovery paths.

use std::fs;
use std::path::Path;

use anyhow::{ensure, Context};
use tether::device::video::codec::{access_units, find_stateless_h264, DecodeMode, StatelessH264};
use tether::device::video::v4l2::{media_device_for, V4l2Device};

use super::log;

const TRACING: &str = "/sys/kernel/tracing";

fn write(path: &str, value: &str) -> anyhow::Result<()> {
    fs::write(Path::new(TRACING).join(path), value).with_context(|| format!("write {value:?} to {path}"))
}

/// Decodes every access unit; returns (pictures, distinct sizes in order).
fn decode_all(dec: &mut StatelessH264, aus: &[&[u8]]) -> anyhow::Result<(usize, Vec<(u32, u32)>)> {
    let mut pictures = 0;
    let mut sizes: Vec<(u32, u32)> = Vec::new();
    for (k, au) in aus.iter().enumerate() {
        let picture = dec.decode(au, true).with_context(|| format!("access unit {k}"))?;
        let (w, h, rgb) = picture.with_context(|| format!("access unit {k} gave no picture"))?;
        ensure!(rgb.len() == (w * h * 3) as usize, "picture {k}: {} bytes for {w}x{h}", rgb.len());
        pictures += 1;
        if sizes.last() != Some(&(w, h)) {
            sizes.push((w, h));
        }
    }
    Ok((pictures, sizes))
}

pub async fn run() -> anyhow::Result<()> {
    let node = find_stateless_h264().context("no stateless H.264 decoder node (is visl loaded?)")?;
    let media = media_device_for(&node).context("the decoder node has no media device")?;
    let info = media.info()?;
    ensure!(info.driver == "visl", "media device driver {:?}", info.driver);
    log(format!("visl at {} with {} ({})", node.display(), media.path().display(), info.bus_info));
    let caps = V4l2Device::open(&node)?.querycap()?;
    log(format!("device caps {:#x}", caps.device_caps));

    let stream = fs::read("/stream.h264").context("/stream.h264")?;
    let aus = access_units(&stream);
    ensure!(aus.len() >= 10, "only {} access units in the test stream", aus.len());

    // Slice-based with tracing: every control of every slice goes to the trace.
    write("buffer_size_kb", "16384")?;
    write("trace", "")?;
    write("events/visl_h264_controls/enable", "1")?;
    let mut dec = StatelessH264::new(&node, Some(DecodeMode::SliceBased))?;
    log(format!("decoding {} access units with {}", aus.len(), dec.describe()));
    let (pictures, sizes) = decode_all(&mut dec, &aus)?;
    write("events/visl_h264_controls/enable", "0")?;
    ensure!(pictures == aus.len(), "{pictures} pictures from {} access units", aus.len());
    ensure!(sizes.len() >= 2, "the stream's resolution change was not seen: {sizes:?}");
    log(format!("slice-based: {pictures} pictures, sizes {sizes:?}"));
    drop(dec);
    let trace = fs::read_to_string(Path::new(TRACING).join("trace"))?;
    println!("VISL TRACE BEGIN");
    for line in trace.lines().filter(|l| !l.starts_with('#')) {
        println!("{line}");
    }
    println!("VISL TRACE END");

    // Frame-based: one request per picture.
    let mut dec = StatelessH264::new(&node, Some(DecodeMode::FrameBased))?;
    let (pictures, sizes) = decode_all(&mut dec, &aus)?;
    ensure!(pictures == aus.len() && sizes.len() >= 2, "frame-based: {pictures} pictures, {sizes:?}");
    log(format!("frame-based: {pictures} pictures, sizes {sizes:?}"));

    // Recovery: a P picture with nothing before it waits for an IDR; garbage is an error,
    // not a crash; the next IDR decodes again.
    let mut dec = StatelessH264::new(&node, None)?;
    let first_p = aus.iter().position(|au| !tether::device::video::codec::nal_types(au).contains(&5)).unwrap_or(1);
    ensure!(dec.decode(aus[first_p], true)?.is_none(), "a P picture decoded without its IDR");
    let mut broken = aus[0].to_vec();
    let cut = broken.len() / 2;
    broken.truncate(cut.max(40));
    broken.extend_from_slice(&[0, 0, 1, 0x65, 0xff, 0xff, 0xff]);
    let _ = dec.decode(&broken, true); // visl takes anything; the point is no panic
    ensure!(dec.decode(aus[0], true)?.is_some(), "the IDR after a broken picture did not decode");
    ensure!(dec.decode(aus[1], true)?.is_some(), "the picture after the recovery IDR did not decode");
    log("recovery: P without IDR waits, broken input is survived, the next IDR decodes");
    Ok(())
}
