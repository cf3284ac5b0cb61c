//! Runs inside the QEMU lab (see `tests/vm/run.sh`): sets up the real gadget on dummy_hcd,
//! checks what the kernel's own USB host stack made of it, and drives `tether serve` through
//! its socket while reading the reports back from `/dev/hidraw*`.
//!
//! Prints `VMCHECK PASS` or `VMCHECK FAIL: reason`; the host script looks for those lines.

// Test code: a panic is how an assertion fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::cast_possible_truncation, clippy::cast_sign_loss)]

use std::collections::HashMap;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use serde_json::{json, Value};
use tether::device::hid::gadget::interface_of;
use tether::device::hid::{HidInterface, HidReport, Keymap, Layout};
use tether_tests::harness::RawClient;

mod csi;
mod m2m;
mod stateless;
mod uvc;
mod video;

const TETHER: &str = "/tether";
const SOCKET: &str = "/run/tether.sock";
const UDC: &str = "dummy_udc.0";
const GADGET_UDC_FILE: &str = "/sys/kernel/config/usb_gadget/tether/UDC";

fn log(msg: impl AsRef<str>) {
    println!("vmcheck: {}", msg.as_ref());
}

/// Unloads `name` and loads it again from the initramfs with `params` (e.g. a driver's
/// multi-planar mode), waiting for its nodes to settle.
fn reload_module(name: &str, params: &[&str]) -> anyhow::Result<()> {
    let status = std::process::Command::new("rmmod").arg(name).status()?;
    anyhow::ensure!(status.success(), "rmmod {name} failed");
    // run.sh puts each suite's modules in /lib/modules/<suite>/ (two kernels' modules share
    // names); the suite is on the kernel command line.
    let cmdline = std::fs::read_to_string("/proc/cmdline")?;
    let suite = cmdline.split_whitespace().find_map(|w| w.strip_prefix("tether.suite=")).unwrap_or("video");
    let status =
        std::process::Command::new("insmod").arg(format!("/lib/modules/{suite}/{name}.ko")).args(params).status()?;
    anyhow::ensure!(status.success(), "insmod {name} {params:?} failed");
    std::thread::sleep(std::time::Duration::from_millis(300));
    log(format!("reloaded {name} {}", params.join(" ")));
    Ok(())
}

/// One HID device the host enumerated.
#[derive(Debug)]
struct HostHid {
    interface: HidInterface,
    driver: String,
    hidraw: PathBuf,
    usb_device: PathBuf,
}

fn host_hid_devices() -> Vec<HostHid> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir("/sys/bus/hid/devices") else { return out };
    for e in entries.flatten() {
        let dir = e.path();
        let Ok(desc) = fs::read(dir.join("report_descriptor")) else { continue };
        let Some(interface) = interface_of(&desc) else { continue };
        let driver = fs::read_link(dir.join("driver"))
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default();
        let Some(hidraw) = fs::read_dir(dir.join("hidraw"))
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .map(|e| Path::new("/dev").join(e.file_name()))
        else {
            continue;
        };
        // .../usbN/N-1/N-1:1.k/0003:VID:PID.NNNN: the USB device is two levels up.
        let real = fs::canonicalize(&dir).unwrap_or(dir.clone());
        let usb_device = real.parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_default();
        out.push(HostHid { interface, driver, hidraw, usb_device });
    }
    out
}

fn wait_for_host(want: usize, limit: Duration) -> anyhow::Result<Vec<HostHid>> {
    let start = Instant::now();
    loop {
        let found = host_hid_devices();
        if found.len() >= want && found.iter().all(|h| h.hidraw.exists() && !h.driver.is_empty()) {
            return Ok(found);
        }
        ensure!(
            start.elapsed() < limit,
            "host saw {} of {want} HID interfaces after {limit:?}: {found:?}",
            found.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Reads every report of one hidraw node on its own thread.
fn reader(node: &Path) -> anyhow::Result<mpsc::Receiver<(Instant, Vec<u8>)>> {
    let mut file = fs::File::open(node).with_context(|| format!("open {}", node.display()))?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        while let Ok(n) = file.read(&mut buf) {
            if n == 0 || tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    Ok(rx)
}

fn drain(rx: &mpsc::Receiver<(Instant, Vec<u8>)>, quiet: Duration) -> Vec<(Instant, Vec<u8>)> {
    let mut out = Vec::new();
    while let Ok(r) = rx.recv_timeout(quiet) {
        out.push(r);
    }
    out
}

fn start_daemon() -> anyhow::Result<Child> {
    let _ = fs::remove_file(SOCKET);
    let child = Command::new(TETHER)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--hid",
            "gadget",
            "--video",
            "sim",
            "--socket",
            SOCKET,
            "--data-dir",
            "/run/tether-data",
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
        .context("start tether serve")?;
    let start = Instant::now();
    while !Path::new(SOCKET).exists() {
        ensure!(start.elapsed() < Duration::from_secs(20), "daemon socket did not appear");
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(child)
}

struct Session {
    c: RawClient,
    id: u64,
}

impl Session {
    async fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        self.id += 1;
        self.c.call(self.id, method, params).await
    }

    async fn ok(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let r = self.call(method, params).await?;
        ensure!(r["ok"] == true, "{method} failed: {r}");
        Ok(r["result"].clone())
    }

    async fn act(&mut self, obs: Option<&str>, action: Value) -> anyhow::Result<Value> {
        // The video is the sim's, which the gadget's reports never reach (they go to the
        // VM's host side): nothing to verify on screen; answer once the input is sent.
        let mut p = json!({"operation_id": format!("vm-{}", self.id + 1), "action": action, "verify": false});
        if let Some(o) = obs {
            p["observation_id"] = json!(o);
        }
        self.call("action", p).await
    }
}

fn pointer_reports(raw: &[(Instant, Vec<u8>)]) -> Vec<(Instant, u8, u16, u16)> {
    raw.iter()
        .filter_map(|(t, b)| match HidReport::decode(HidInterface::Pointer, b) {
            Some(HidReport::Pointer(p)) => Some((*t, p.buttons(), p.x(), p.y())),
            _ => None,
        })
        .collect()
}

/// Checks a tap's report stream: move to (hx, hy), settle, press, release three times.
/// `sent` is when the tap was asked for.
fn check_tap(raw: &[(Instant, Vec<u8>)], sent: Instant, hx: u16, hy: u16, settle: Duration) -> anyhow::Result<()> {
    let reports = pointer_reports(raw);
    let near = |x: u16, y: u16| x.abs_diff(hx) <= 1 && y.abs_diff(hy) <= 1;
    let start = reports
        .iter()
        .position(|r| r.1 == 0 && near(r.2, r.3))
        .with_context(|| format!("no move report at ({hx}, {hy}) ±1 in {reports:?}"))?;
    let tail = &reports[start..];
    ensure!(tail.len() >= 5, "expected move, press, 3 releases; got {tail:?}");
    let (moved, press) = (tail[0], tail[1]);
    ensure!(press.1 == 1 && near(press.2, press.3), "press must follow at the same spot: {tail:?}");
    let waited = press.0.duration_since(moved.0);
    // The reader timestamps reads, so a move delivered late (the guest descheduled on a
    // busy host) shortens the gap it sees: a CI run once saw 88 ms of a 150 ms settle. The
    // bound that holds however late reports arrive: the press was written at least `settle`
    // after the request was sent (the move comes first, then the settle), and nothing is
    // read before it is written.
    let since_request = press.0.duration_since(sent);
    ensure!(
        since_request >= settle,
        "press came {since_request:?} after the tap was asked for (and {waited:?} after the move); settle is {settle:?}"
    );
    let releases = tail[2..].iter().take_while(|r| r.1 == 0 && near(r.2, r.3)).count();
    ensure!(releases >= 3, "expected 3 release reports, got {releases}: {tail:?}");
    log(format!(
        "tap: move ({}, {}), press {waited:?} after it and {since_request:?} after the request, {releases} releases",
        moved.2, moved.3
    ));
    Ok(())
}

fn typed_text(raw: &[(Instant, Vec<u8>)], keymap: &Keymap) -> String {
    let mut out = String::new();
    let mut held: Vec<u8> = Vec::new();
    for (_, b) in raw {
        if let Some(HidReport::Keyboard(k)) = HidReport::decode(HidInterface::Keyboard, b) {
            for &u in k.keys.iter().filter(|&&u| u != 0 && !held.contains(&u)) {
                if let Some(c) = keymap.char_for(u, k.modifiers) {
                    out.push(c);
                }
            }
            held = k.keys.iter().copied().filter(|&u| u != 0).collect();
        }
    }
    out
}

fn set_udc(value: &str) -> anyhow::Result<()> {
    fs::write(GADGET_UDC_FILE, format!("{value}\n")).with_context(|| format!("write {value:?} to UDC"))
}

async fn run() -> anyhow::Result<()> {
    let up = Command::new(TETHER).args(["gadget", "up", "--udc", UDC]).status().context("run tether gadget up")?;
    ensure!(up.success(), "tether gadget up failed");
    let host = wait_for_host(3, Duration::from_secs(15))?;
    for h in &host {
        log(format!(
            "host: {:?} via {} at {} (USB device {})",
            h.interface,
            h.driver,
            h.hidraw.display(),
            h.usb_device.display()
        ));
    }
    ensure!(host.len() == 3, "expected exactly three HID interfaces, found {}", host.len());
    let mut kinds: Vec<HidInterface> = host.iter().map(|h| h.interface).collect();
    kinds.sort();
    ensure!(kinds == [HidInterface::Keyboard, HidInterface::Consumer, HidInterface::Pointer], "interfaces: {kinds:?}");
    ensure!(host.iter().all(|h| h.driver == "hid-generic"), "all bound by hid-generic: {host:?}");
    ensure!(host.iter().all(|h| h.usb_device == host[0].usb_device), "one USB device: {host:?}");
    log("descriptors: all three match ours byte for byte, one device, hid-generic");

    let mut readers: HashMap<HidInterface, _> = HashMap::new();
    for h in &host {
        readers.insert(h.interface, reader(&h.hidraw)?);
    }
    let mut daemon = start_daemon()?;
    let mut s = Session { c: RawClient::connect(Path::new(SOCKET)).await?, id: 0 };
    let hello = s.ok("hello", json!({})).await?;
    ensure!(hello["capabilities"]["hid_backend"] == "hidg", "{hello}");
    let status = s.ok("status", json!({})).await?;
    ensure!(status["hid"]["host"] == "configured", "host state: {status}");
    log(format!("status: host {} leds {}", status["hid"]["host"], status["hid"]["leds"]));

    // A tap at observation pixel (x, y).
    let shot = s.ok("screenshot", json!({})).await?;
    let m = &shot["metadata"];
    let obs = m["observation_id"].as_str().context("observation")?.to_string();
    let iw = m["image_size"]["width"].as_f64().context("image width")?;
    let ih = m["image_size"]["height"].as_f64().context("image height")?;
    let (ix, iy) = ((iw * 0.3).floor(), (ih * 0.6).floor());
    let hx = (((ix + 0.5) / iw) * 32768.0).floor() as u16;
    let hy = (((iy + 0.5) / ih) * 32768.0).floor() as u16;
    let sent = Instant::now();
    let r = s.act(Some(&obs), json!({"type": "tap", "x": ix, "y": iy})).await?;
    ensure!(r["result"]["status"] == "submitted", "tap: {r}");
    let pointer = &readers[&HidInterface::Pointer];
    check_tap(&drain(pointer, Duration::from_millis(400)), sent, hx, hy, Duration::from_millis(150))?;

    // Typed text decodes back to the same string.
    let text = "Hello, tether! 42";
    let r = s.act(None, json!({"type": "type_text", "text": text})).await?;
    ensure!(r["result"]["status"] == "submitted", "type_text: {r}");
    let keyboard = &readers[&HidInterface::Keyboard];
    let typed = typed_text(&drain(keyboard, Duration::from_millis(400)), &Keymap::new(Layout::Us));
    ensure!(typed == text, "typed {typed:?}, expected {text:?}");
    log(format!("type_text: {typed:?}"));

    // Keyboard LEDs: the host sets Caps Lock through the output report (report id 0).
    let kb_node = &host.iter().find(|h| h.interface == HidInterface::Keyboard).context("keyboard")?.hidraw;
    fs::OpenOptions::new().write(true).open(kb_node)?.write_all(&[0x00, 0x02]).context("write LED report")?;
    let start = Instant::now();
    loop {
        let leds = s.ok("status", json!({})).await?["hid"]["leds"].clone();
        if leds == 2 {
            break;
        }
        ensure!(start.elapsed() < Duration::from_secs(5), "status never showed Caps Lock: leds {leds}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    log("keyboard LEDs: Caps Lock set by the host shows in status");

    // Hotkey and consumer key.
    let r = s.act(None, json!({"type": "hotkey", "keys": ["cmd", "h"]})).await?;
    ensure!(r["result"]["status"] == "submitted", "hotkey: {r}");
    let keys = drain(keyboard, Duration::from_millis(300));
    ensure!(keys.iter().any(|(_, b)| b.len() == 8 && b[0] == 0x08 && b[2] == 0x0B), "Cmd+H report missing: {keys:?}");
    ensure!(keys.last().is_some_and(|(_, b)| b.iter().all(|&x| x == 0)), "keys released: {keys:?}");
    let r = s.act(None, json!({"type": "consumer", "key": "volume_up"})).await?;
    ensure!(r["result"]["status"] == "submitted", "consumer: {r}");
    let cons = drain(&readers[&HidInterface::Consumer], Duration::from_millis(300));
    ensure!(cons.iter().any(|(_, b)| b == &[0xE9, 0x00]), "volume up missing: {cons:?}");
    ensure!(cons.last().is_some_and(|(_, b)| b == &[0, 0]), "consumer released: {cons:?}");
    log("hotkey Cmd+H and volume_up arrived and were released");

    // Unplug in the middle of a drag.
    s.id += 1;
    let drag_id = s.id;
    let drag = json!({"id": drag_id, "method": "action", "operation_id": "unplug-drag", "observation_id": obs,
        "action": {"type": "drag", "path": [{"x": 10, "y": ih - 10.0}, {"x": 10, "y": 10}], "duration_ms": 3000}});
    s.c.send(&drag.to_string()).await?;
    tokio::time::sleep(Duration::from_millis(700)).await;
    set_udc("")?;
    let unplugged_at = Instant::now();
    let reply = loop {
        let r = s.c.recv_within(Duration::from_secs(10)).await.context("no reply to the unplugged drag")?;
        if r["id"] == drag_id {
            break r;
        }
    };
    ensure!(reply["ok"] == false, "drag must fail when unplugged: {reply}");
    ensure!(reply["error"]["status"] == "outcome_unknown", "unplug mid-drag is outcome_unknown: {reply}");
    log(format!("unplug mid-drag: {} after {:?}", reply["error"]["code"], unplugged_at.elapsed()));
    let st = s.ok("status", json!({})).await?;
    ensure!(st["hid"]["host"] == "not_attached", "status after unplug: {st}");
    let r = s.act(Some(&obs), json!({"type": "tap", "x": 5, "y": 5})).await?;
    ensure!(r["error"]["code"] == "HOST_NOT_CONNECTED", "{r}");
    ensure!(r["error"]["status"] == "failed_before_submit", "{r}");
    ensure!(daemon.try_wait()?.is_none(), "daemon must keep running");

    // Plug back in: it works again.
    set_udc(UDC)?;
    let host = wait_for_host(3, Duration::from_secs(15))?;
    let pointer_node = host.iter().find(|h| h.interface == HidInterface::Pointer).context("pointer after replug")?;
    let pointer = reader(&pointer_node.hidraw)?;
    let start = Instant::now();
    while s.ok("status", json!({})).await?["hid"]["host"] != "configured" {
        ensure!(start.elapsed() < Duration::from_secs(10), "host never reconfigured");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let shot = s.ok("screenshot", json!({})).await?;
    let obs = shot["metadata"]["observation_id"].as_str().context("observation")?.to_string();
    let sent = Instant::now();
    let r = s.act(Some(&obs), json!({"type": "tap", "x": ix, "y": iy})).await?;
    ensure!(r["result"]["status"] == "submitted", "tap after replug: {r}");
    check_tap(&drain(&pointer, Duration::from_millis(400)), sent, hx, hy, Duration::from_millis(150))?;
    log("replug: taps work again");

    daemon.kill()?;
    daemon.wait()?;
    let down = Command::new(TETHER).args(["gadget", "down"]).status()?;
    ensure!(down.success(), "gadget down failed");
    let left: Vec<_> = fs::read_dir("/sys/kernel/config/usb_gadget")?.flatten().map(|e| e.file_name()).collect();
    ensure!(left.is_empty(), "configfs not clean after gadget down: {left:?}");
    log("gadget down: configfs clean");
    Ok(())
}

fn main() -> ExitCode {
    let suite = std::env::args().nth(1).unwrap_or_else(|| "hid".into());
    if !["hid", "video", "m2m", "stateless", "csi", "uvc"].contains(&suite.as_str()) {
        println!("VMCHECK FAIL: suite {suite:?} is not built");
        return ExitCode::FAILURE;
    }
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            println!("VMCHECK FAIL: runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match suite.as_str() {
        "video" => rt.block_on(video::run()),
        "m2m" => rt.block_on(m2m::run()),
        "stateless" => rt.block_on(stateless::run()),
        "csi" => rt.block_on(csi::run()),
        "uvc" => rt.block_on(uvc::run()),
        _ => rt.block_on(run()),
    };
    match result {
        Ok(()) => {
            println!("VMCHECK PASS");
            ExitCode::SUCCESS
        }
        Err(e) => {
            // The kernel's side of a failure (link validation, driver warnings) is in its
            // log; the console runs `quiet`.
            if let Ok(out) = Command::new("dmesg").output() {
                let text = String::from_utf8_lossy(&out.stdout);
                // Repeats (a driver complaining per request) folded into a count.
                let mut folded: Vec<(String, usize)> = Vec::new();
                for l in text.lines() {
                    let message = l.split_once("] ").map_or(l, |(_, m)| m);
                    match folded.last_mut() {
                        Some((last, n)) if last.split_once("] ").map_or(last.as_str(), |(_, m)| m) == message => {
                            *n += 1
                        }
                        _ => folded.push((l.to_string(), 1)),
                    }
                }
                for (l, n) in &folded[folded.len().saturating_sub(60)..] {
                    if *n > 1 {
                        println!("dmesg: {l} (x{n})");
                    } else {
                        println!("dmesg: {l}");
                    }
                }
            }
            println!("VMCHECK FAIL: {e:#}");
            ExitCode::FAILURE
        }
    }
}
