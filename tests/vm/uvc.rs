//! The `uvc` suite: what a cheap HDMI capture dongle is to tether, built from the kernel's
//! own parts. A configfs UVC gadget (`usb_f_uvc`) on dummy_hcd with isochronous IN
//! (`tests/vm/kernel/dummy_hcd-iso.patch`, built by image/kbuild.sh), fed by our frame
//! source below, is enumerated by the same VM's `uvcvideo`; `tether serve --video v4l2`
//! captures from that node. Cases: negotiation (MJPEG 1080p30 chosen, isochronous alt 1),
//! screenshots equal to the JPEG sent, the sequence advancing, corrupt JPEGs dropped and
//! counted, a stalled stream restarted, unplug/replug within 2 s of the rebind, YUYV, and
//! a device that comes back offering another resolution.

use std::collections::HashMap;
use std::fs;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use serde_json::{json, Value};
use tether::device::video::codec::decode_mjpeg;
use tether::device::video::convert::{packed422_to_rgb, rgb_to_yuyv};
use tether::device::video::v4l2::{BufType, BufferPlanes, Dequeued, FourCc, PixFormat, V4l2Device, CAP_VIDEO_CAPTURE};
use tether_tests::harness::RawClient;

use super::log;
use super::video::{
    check_screenshot, sim_frame, start_daemon_config, start_daemon_with, wait_frames, wait_video, SOCKET,
};

const G: &str = "/sys/kernel/config/usb_gadget/uvc";
const UDC: &str = "dummy_udc.0";

/// What the gadget offers: a format, a size and one frame rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mode {
    mjpeg: bool,
    width: u32,
    height: u32,
    fps: u32,
}

/// Like a cheap dongle: MJPEG 1080p30 and 720p60, YUYV at a low rate.
const DONGLE: [Mode; 3] = [
    Mode { mjpeg: true, width: 1920, height: 1080, fps: 30 },
    Mode { mjpeg: true, width: 1280, height: 720, fps: 60 },
    Mode { mjpeg: false, width: 640, height: 480, fps: 10 },
];

fn write(path: impl AsRef<Path>, value: &str) -> anyhow::Result<()> {
    let path = path.as_ref();
    fs::write(path, value).with_context(|| format!("write {value:?} to {}", path.display()))
}

/// Binds the gadget to the UDC, or (`None`) unbinds it. A newline, not an empty write:
/// configfs never sees a write of no bytes.
fn set_udc(udc: Option<&str>) -> anyhow::Result<()> {
    write(format!("{G}/UDC"), &format!("{}\n", udc.unwrap_or("")))
}

fn mkdir(path: impl AsRef<Path>) -> anyhow::Result<()> {
    let path = path.as_ref();
    fs::create_dir_all(path).with_context(|| format!("mkdir {}", path.display()))
}

fn symlink(target: impl AsRef<Path>, link: impl AsRef<Path>) -> anyhow::Result<()> {
    std::os::unix::fs::symlink(target.as_ref(), link.as_ref())
        .with_context(|| format!("symlink {}", link.as_ref().display()))
}

/// The frame directory of `m` (mjpeg/m or uncompressed/u).
fn frame_dir(m: &Mode) -> String {
    let (kind, fmt) = if m.mjpeg { ("mjpeg", "m") } else { ("uncompressed", "u") };
    format!("{G}/functions/uvc.0/streaming/{kind}/{fmt}/f{}x{}", m.width, m.height)
}

/// Creates the gadget offering `modes` (MJPEG first, so its bFormatIndex is 1) and binds it.
fn gadget_up(modes: &[Mode]) -> anyhow::Result<()> {
    let f = format!("{G}/functions/uvc.0");
    mkdir(format!("{G}/strings/0x409"))?;
    write(format!("{G}/idVendor"), "0x1d6b")?;
    write(format!("{G}/idProduct"), "0x0104")?;
    write(format!("{G}/bcdUSB"), "0x0200")?;
    write(format!("{G}/strings/0x409/manufacturer"), "tether lab")?;
    write(format!("{G}/strings/0x409/product"), "HDMI capture (lab)")?;
    write(format!("{G}/strings/0x409/serialnumber"), "0001")?;
    mkdir(&f)?;
    // 3 x 1024 bytes per microframe: uvcvideo picks alt 1 for it.
    write(format!("{f}/streaming_maxpacket"), "3072")?;
    mkdir(format!("{f}/control/header/h"))?;
    symlink(format!("{f}/control/header/h"), format!("{f}/control/class/fs/h"))?;
    symlink(format!("{f}/control/header/h"), format!("{f}/control/class/ss/h"))?;
    // No camera or processing controls: uvcvideo then asks no control requests.
    write(format!("{f}/control/processing/default/bmControls"), "0\n0\n")?;
    write(format!("{f}/control/terminal/camera/default/bmControls"), "0\n0\n0\n")?;
    for m in modes {
        let d = frame_dir(m);
        mkdir(&d)?;
        let interval = 10_000_000 / m.fps;
        let size = m.width * m.height * 2;
        write(format!("{d}/wWidth"), &m.width.to_string())?;
        write(format!("{d}/wHeight"), &m.height.to_string())?;
        write(format!("{d}/dwMaxVideoFrameBufferSize"), &size.to_string())?;
        write(format!("{d}/dwMinBitRate"), &(size * 8 * m.fps).to_string())?;
        write(format!("{d}/dwMaxBitRate"), &(size * 8 * m.fps).to_string())?;
        write(format!("{d}/dwDefaultFrameInterval"), &interval.to_string())?;
        write(format!("{d}/dwFrameInterval"), &format!("{interval}\n"))?;
    }
    mkdir(format!("{f}/streaming/header/h"))?;
    if modes.iter().any(|m| m.mjpeg) {
        symlink(format!("{f}/streaming/mjpeg/m"), format!("{f}/streaming/header/h/m"))?;
    }
    if modes.iter().any(|m| !m.mjpeg) {
        symlink(format!("{f}/streaming/uncompressed/u"), format!("{f}/streaming/header/h/u"))?;
    }
    for speed in ["fs", "hs", "ss"] {
        symlink(format!("{f}/streaming/header/h"), format!("{f}/streaming/class/{speed}/h"))?;
    }
    mkdir(format!("{G}/configs/c.1/strings/0x409"))?;
    write(format!("{G}/configs/c.1/strings/0x409/configuration"), "uvc")?;
    symlink(&f, format!("{G}/configs/c.1/uvc.0"))?;
    set_udc(Some(UDC))
}

/// Unbinds and removes the gadget, in the reverse order configfs wants.
fn gadget_down(modes: &[Mode]) -> anyhow::Result<()> {
    let f = format!("{G}/functions/uvc.0");
    set_udc(None)?;
    let rm = |p: String| fs::remove_file(&p).with_context(|| format!("rm {p}"));
    let rmdir = |p: String| fs::remove_dir(&p).with_context(|| format!("rmdir {p}"));
    rm(format!("{G}/configs/c.1/uvc.0"))?;
    rmdir(format!("{G}/configs/c.1/strings/0x409"))?;
    rmdir(format!("{G}/configs/c.1"))?;
    for speed in ["fs", "hs", "ss"] {
        rm(format!("{f}/streaming/class/{speed}/h"))?;
    }
    for link in ["m", "u"] {
        let p = format!("{f}/streaming/header/h/{link}");
        if Path::new(&p).exists() {
            rm(p)?;
        }
    }
    rmdir(format!("{f}/streaming/header/h"))?;
    for m in modes {
        rmdir(frame_dir(m))?;
    }
    for fmt in ["mjpeg/m", "uncompressed/u"] {
        let p = format!("{f}/streaming/{fmt}");
        if Path::new(&p).exists() {
            rmdir(p)?;
        }
    }
    rm(format!("{f}/control/class/fs/h"))?;
    rm(format!("{f}/control/class/ss/h"))?;
    rmdir(format!("{f}/control/header/h"))?;
    rmdir(f)?;
    rmdir(format!("{G}/strings/0x409"))?;
    rmdir(G.to_string())
}

/// What the frame source sends next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feed {
    /// The known sequence, one picture after the other.
    Play,
    /// One picture of the sequence, again and again.
    Hold(usize),
    /// Nothing: the stream is on, no frame comes.
    Stall,
    /// This many broken JPEGs (cut short, header overwritten), then `Play`.
    Corrupt(u32),
}

/// State shared with the frame source's thread.
struct Source {
    feed: Mutex<Feed>,
    /// The known pictures per size: JPEGs, and one YUYV frame.
    jpegs: HashMap<(u32, u32), Vec<Vec<u8>>>,
    yuyv: HashMap<(u32, u32), Vec<u8>>,
    stop: AtomicBool,
    /// Frames queued to the gadget, corrupt ones among them.
    sent: AtomicU64,
    corrupt_sent: AtomicU64,
}

/// `struct uvc_request_data` (linux/usb/g_uvc.h): a control request's reply.
#[repr(C)]
struct UvcRequestData {
    length: i32,
    data: [u8; 60],
}

nix::ioctl_write_ptr!(uvc_send_response, b'U', 1, UvcRequestData);

/// `V4L2_EVENT_PRIVATE_START` + n: the UVC gadget's events.
const UVC_EVENT: u32 = 0x0800_0000;
const EV_CONNECT: u32 = UVC_EVENT;
const EV_DISCONNECT: u32 = UVC_EVENT + 1;
const EV_STREAMON: u32 = UVC_EVENT + 2;
const EV_STREAMOFF: u32 = UVC_EVENT + 3;
const EV_SETUP: u32 = UVC_EVENT + 4;
const EV_DATA: u32 = UVC_EVENT + 5;

/// One offered frame: (format index, frame index) are 1-based, in the gadget's order.
#[derive(Debug, Clone, Copy)]
struct Offered {
    fourcc: FourCc,
    width: u32,
    height: u32,
    /// 100 ns units.
    interval: u32,
}

/// The probe/commit state (UVC 1.1 streaming control, 34 bytes).
#[derive(Debug, Clone, Copy, Default)]
struct Probe {
    format: u8,
    frame: u8,
    interval: u32,
}

/// The gadget's formats, each a list of frames, as its node enumerates them from configfs.
fn offered(dev: &V4l2Device) -> anyhow::Result<Vec<Vec<Offered>>> {
    let mut formats = Vec::new();
    for f in dev.formats(BufType::VideoOutput)? {
        let mut frames = Vec::new();
        for (w, h) in dev.frame_sizes(f.fourcc)? {
            let (n, d) = dev.frame_intervals(f.fourcc, w, h)?.first().copied().context("no interval")?;
            let interval = (u64::from(n) * 10_000_000 / u64::from(d.max(1))) as u32;
            frames.push(Offered { fourcc: f.fourcc, width: w, height: h, interval });
        }
        formats.push(frames);
    }
    ensure!(!formats.is_empty(), "the gadget node offers no format");
    Ok(formats)
}

impl Probe {
    /// Clamped to what is offered, as a device answers SET_CUR(PROBE).
    fn clamp(self, formats: &[Vec<Offered>]) -> Probe {
        let fi = usize::from(self.format).clamp(1, formats.len());
        let frames = &formats[fi - 1];
        let ri = usize::from(self.frame).clamp(1, frames.len());
        Probe { format: fi as u8, frame: ri as u8, interval: frames[ri - 1].interval }
    }

    fn offered<'a>(&self, formats: &'a [Vec<Offered>]) -> &'a Offered {
        let p = self.clamp(formats);
        &formats[usize::from(p.format) - 1][usize::from(p.frame) - 1]
    }

    fn encode(&self, formats: &[Vec<Offered>]) -> [u8; 34] {
        let o = self.offered(formats);
        let mut b = [0u8; 34];
        b[0..2].copy_from_slice(&1u16.to_le_bytes()); // bmHint: frame interval fixed
        b[2] = self.format;
        b[3] = self.frame;
        b[4..8].copy_from_slice(&self.interval.to_le_bytes());
        b[18..22].copy_from_slice(&(o.width * o.height * 2).to_le_bytes()); // dwMaxVideoFrameSize
        b[22..26].copy_from_slice(&3072u32.to_le_bytes()); // dwMaxPayloadTransferSize: alt 1
        b[26..30].copy_from_slice(&48_000_000u32.to_le_bytes());
        b[30] = 3; // bmFramingInfo
        b[31..34].copy_from_slice(&[1, 1, 1]);
        b
    }

    fn decode(data: &[u8]) -> Probe {
        let interval = data.get(4..8).map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        Probe { format: data.get(2).copied().unwrap_or(1), frame: data.get(3).copied().unwrap_or(1), interval }
    }
}

/// The gadget's video node (it has `function_name` in sysfs), if bound.
fn gadget_node() -> Option<String> {
    let mut names: Vec<String> = fs::read_dir("/sys/class/video4linux")
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("video"))
        .collect();
    names.sort();
    names.into_iter().find(|n| Path::new(&format!("/sys/class/video4linux/{n}/function_name")).exists())
}

/// A streaming session on the gadget node.
struct Stream {
    kind: BufType,
    buffers: Vec<BufferPlanes>,
    free: Vec<u32>,
    next_due: Instant,
    interval: Duration,
    size: (u32, u32),
    mjpeg: bool,
    index: usize,
}

impl Source {
    /// The frame source: finds the gadget node, answers the host's requests, streams
    /// the known pictures at the committed rate; after a disconnect, waits for the node to
    /// come back (a rebind) and starts over.
    fn run(self: Arc<Self>) {
        while !self.stop.load(Ordering::Relaxed) {
            let Some(name) = gadget_node() else {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            };
            if let Err(e) = self.session(&name) {
                log(format!("frame source: {e:#}"));
            }
            // The unbind that sent DISCONNECT waits for this close; reading UDC waits for
            // the unbind in turn (configfs holds the gadget's lock through it), so what is
            // read is after it: empty until the next bind, whose node is then a new one.
            // (Waiting for the old node to vanish instead races with a quick rebind that
            // brings a node of the same name back.)
            while !self.stop.load(Ordering::Relaxed) {
                match fs::read_to_string(format!("{G}/UDC")) {
                    Ok(udc) if !udc.trim().is_empty() => break,
                    _ => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        }
    }

    fn session(&self, name: &str) -> anyhow::Result<()> {
        let dev = V4l2Device::open(Path::new(&format!("/dev/{name}")))?;
        let formats = offered(&dev)?;
        let mut probe = Probe { format: 1, frame: 1, interval: 0 }.clamp(&formats);
        let mut commit = probe;
        // The control selector of the SET_CUR whose data stage comes next.
        let mut set_cs = 0u8;
        // SETUP last: subscribing it activates the function (the host sees the device).
        for ev in [EV_CONNECT, EV_DISCONNECT, EV_STREAMON, EV_STREAMOFF, EV_DATA, EV_SETUP] {
            dev.subscribe(ev, 0)?;
        }
        let mut stream: Option<Stream> = None;
        while !self.stop.load(Ordering::Relaxed) {
            use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
            use std::os::fd::AsFd;
            let wait = stream.as_ref().map_or(Duration::from_millis(50), |s| {
                if s.free.is_empty() {
                    Duration::from_millis(50)
                } else {
                    s.next_due.saturating_duration_since(Instant::now())
                }
            });
            let flags = if stream.is_some() { PollFlags::POLLPRI | PollFlags::POLLOUT } else { PollFlags::POLLPRI };
            let mut fds = [PollFd::new(dev.as_fd(), flags)];
            let ms = wait.as_millis().min(50) as u16;
            let _ = poll(&mut fds, PollTimeout::from(ms));
            while let Some((kind, data)) = dev.next_event_data()? {
                match kind {
                    EV_SETUP => {
                        let (request_type, request) = (data[0], data[1]);
                        let cs = data[3]; // wValue's high byte: the control selector
                        let interface = data[4]; // wIndex's low byte, remapped: 1 = streaming
                        let length = u16::from_le_bytes([data[6], data[7]]);
                        let mut reply = UvcRequestData { length: -32, data: [0; 60] }; // stall
                        let class = request_type & 0x60 == 0x20;
                        if class && interface == 1 && (cs == 1 || cs == 2) {
                            let current = if cs == 1 { probe } else { commit };
                            let control = |p: Probe| p.encode(&formats);
                            let answer: Option<Vec<u8>> = match request {
                                0x01 => {
                                    set_cs = cs;
                                    Some(vec![0; 34]) // SET_CUR: arms the data stage
                                }
                                0x81 => Some(control(current).to_vec()),
                                0x82 | 0x87 => {
                                    Some(control(Probe { format: 1, frame: 1, interval: 0 }.clamp(&formats)).to_vec())
                                }
                                0x83 => Some(
                                    control(Probe { format: 255, frame: 255, interval: 0 }.clamp(&formats)).to_vec(),
                                ),
                                0x84 => Some(vec![0; 34]),
                                0x85 => Some(vec![34, 0]),
                                0x86 => Some(vec![3]),
                                _ => None,
                            };
                            if let Some(a) = answer {
                                let n = a.len().min(usize::from(length)).min(60);
                                reply.data[..n].copy_from_slice(&a[..n]);
                                reply.length = n as i32;
                            }
                        }
                        // SAFETY: `reply` is a valid uvc_request_data (64 bytes, the size the
                        // request number encodes) that outlives the call; the fd is the
                        // gadget's open video node.
                        unsafe { uvc_send_response(dev.as_raw_fd(), &reply) }.context("UVCIOC_SEND_RESPONSE")?;
                    }
                    EV_DATA => {
                        // uvc_request_data: length, then the SET_CUR payload.
                        let asked = Probe::decode(&data[4..]).clamp(&formats);
                        if set_cs == 1 {
                            probe = asked;
                        } else if set_cs == 2 {
                            commit = asked;
                        }
                    }
                    EV_STREAMON => {
                        let o = *commit.offered(&formats);
                        stream = Some(self.stream_on(&dev, &o)?);
                    }
                    EV_STREAMOFF => {
                        if let Some(s) = stream.take() {
                            drop(s.buffers);
                            dev.stream(s.kind, false)?;
                            dev.request_buffers(s.kind, 0)?;
                        }
                    }
                    EV_DISCONNECT => {
                        // No STREAMOFF here (it would complete a SET_INTERFACE that never
                        // came): closing the node ends the stream and lets the unbind finish.
                        return Ok(());
                    }
                    EV_CONNECT => {}
                    other => log(format!("frame source: event {other:#x}")),
                }
            }
            if let Some(s) = stream.as_mut() {
                while let Dequeued::Buffer { index, .. } = dev.dequeue(s.kind)? {
                    s.free.push(index);
                }
                if !s.free.is_empty() && Instant::now() >= s.next_due {
                    s.next_due += s.interval;
                    if s.next_due < Instant::now() {
                        s.next_due = Instant::now() + s.interval; // fell behind: no burst
                    }
                    self.feed(&dev, s)?;
                }
            }
        }
        Ok(())
    }

    fn stream_on(&self, dev: &V4l2Device, o: &Offered) -> anyhow::Result<Stream> {
        let kind = BufType::VideoOutput;
        dev.set_format(kind, &PixFormat::new(o.width, o.height, o.fourcc))?;
        let count = dev.request_buffers(kind, 4)?;
        let buffers = (0..count).map(|i| dev.map_buffer(kind, i)).collect::<Result<Vec<_>, _>>()?;
        let mut s = Stream {
            kind,
            buffers,
            free: (0..count).rev().collect(),
            next_due: Instant::now(),
            interval: Duration::from_nanos(u64::from(o.interval) * 100),
            size: (o.width, o.height),
            mjpeg: o.fourcc == FourCc::MJPEG,
            index: 0,
        };
        // One frame queued before STREAMON (which also completes the host's SET_INTERFACE).
        self.feed(dev, &mut s)?;
        dev.stream(kind, true)?;
        Ok(s)
    }

    /// Queues the next picture (or nothing while stalled).
    fn feed(&self, dev: &V4l2Device, s: &mut Stream) -> anyhow::Result<()> {
        let feed = *self.feed.lock().unwrap();
        if feed == Feed::Stall {
            return Ok(());
        }
        let Some(index) = s.free.pop() else { return Ok(()) };
        let mut corrupt = false;
        let picture: Vec<u8> = if s.mjpeg {
            let set = self.jpegs.get(&s.size).context("no JPEGs of the committed size")?;
            let k = match feed {
                Feed::Hold(k) => k % set.len(),
                _ => {
                    s.index = (s.index + 1) % set.len();
                    s.index
                }
            };
            let mut jpeg = set[k].clone();
            if let Feed::Corrupt(left) = feed {
                corrupt = true;
                if left % 2 == 0 {
                    jpeg.truncate(jpeg.len() / 2); // cut short: no EOI
                } else {
                    jpeg[2..64].fill(0x5A); // the header's markers overwritten
                }
                *self.feed.lock().unwrap() = if left > 1 { Feed::Corrupt(left - 1) } else { Feed::Play };
            }
            jpeg
        } else {
            self.yuyv.get(&s.size).context("no YUYV picture of the committed size")?.clone()
        };
        let buffer = s.buffers.get_mut(index as usize).context("buffer index")?.first_mut().as_mut_slice();
        ensure!(picture.len() <= buffer.len(), "picture of {} bytes > buffer of {}", picture.len(), buffer.len());
        buffer[..picture.len()].copy_from_slice(&picture);
        dev.queue(s.kind, index, &[picture.len() as u32])?;
        self.sent.fetch_add(1, Ordering::Relaxed);
        if corrupt {
            self.corrupt_sent.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// The host side's uvcvideo capture node.
fn host_node() -> Option<PathBuf> {
    let mut nodes: Vec<PathBuf> = fs::read_dir("/dev")
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("video")))
        .collect();
    nodes.sort();
    nodes.into_iter().find(|p| {
        V4l2Device::open(p)
            .and_then(|d| d.querycap())
            .is_ok_and(|c| c.driver == "uvcvideo" && c.device_caps & CAP_VIDEO_CAPTURE != 0)
    })
}

fn wait_host_node() -> anyhow::Result<PathBuf> {
    let start = Instant::now();
    loop {
        if let Some(p) = host_node() {
            return Ok(p);
        }
        ensure!(start.elapsed() < Duration::from_secs(30), "uvcvideo never showed a capture node");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The streaming interface's alternate setting and its endpoint's type, from sysfs: a
/// dongle streams on an isochronous alternate setting (alt 0 has no bandwidth).
fn streaming_interface() -> Option<(String, String)> {
    for e in fs::read_dir("/sys/bus/usb/devices").ok()?.flatten() {
        let dir = e.path();
        let driver = fs::read_link(dir.join("driver")).ok();
        let is_uvc = driver.is_some_and(|d| d.ends_with("uvcvideo"));
        let number = fs::read_to_string(dir.join("bInterfaceNumber")).unwrap_or_default();
        if !is_uvc || number.trim() != "01" {
            continue;
        }
        let alt = fs::read_to_string(dir.join("bAlternateSetting")).ok()?.trim().to_string();
        let ep_type = fs::read_dir(&dir)
            .ok()?
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("ep_"))
            .find_map(|e| fs::read_to_string(e.path().join("type")).ok())
            .map(|t| t.trim().to_string())
            .unwrap_or_default();
        return Some((alt, ep_type));
    }
    None
}

/// What a live viewer received.
struct Watched {
    /// Binary messages (pictures) received.
    pictures: u64,
    /// The stream's message format from its `ready` message.
    protocol: String,
    /// The last picture's payload (the JPEG itself when passed through).
    last: Vec<u8>,
    /// Seconds watched.
    seconds: f64,
}

/// A live viewer like the console's: `video_open` on the socket, then `/api/video` over
/// HTTPS pinned to the daemon's CA, acknowledging every picture, for `seconds`.
async fn watch(c: &mut RawClient, id: &mut u64, seconds: f64) -> anyhow::Result<Watched> {
    use futures_util::{SinkExt as _, StreamExt as _};
    use tether::client::https::{Credentials, HttpsClient, Target};
    use tokio_tungstenite::tungstenite::Message;
    let st = status(c, id).await?;
    let port = st["https"]["port"].as_u64().context("https port")?;
    let pin = tether::server::tls::Fingerprint::parse(st["https"]["fingerprint"].as_str().unwrap_or_default())
        .context("CA fingerprint")?;
    let (target, _, _) = Target::parse(&format!("https://127.0.0.1:{port}"))?;
    let client = HttpsClient::new(target, pin, Credentials { token: None, task_token: None })?;
    *id += 1;
    let ticket = c.ok(*id, "video_open", json!({})).await?["ticket"].as_str().context("ticket")?.to_string();
    let mut ws = client.websocket("/api/video").await?;
    ws.send(Message::text(json!({"ticket": ticket}).to_string())).await?;
    let mut w = Watched { pictures: 0, protocol: String::new(), last: Vec::new(), seconds };
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < seconds {
        let left = Duration::from_secs_f64(seconds) - start.elapsed().min(Duration::from_secs_f64(seconds));
        let Ok(next) = tokio::time::timeout(left.max(Duration::from_millis(1)), ws.next()).await else { break };
        match next.context("the video socket closed")?? {
            Message::Text(t) => {
                let v: Value = serde_json::from_str(&t)?;
                if v["type"] == "ready" {
                    w.protocol = v["protocol"].as_str().unwrap_or_default().to_string();
                }
            }
            Message::Binary(b) => {
                ensure!(b.len() > 24, "a picture message of {} bytes", b.len());
                let word = |k: usize| u32::from_be_bytes([b[k], b[k + 1], b[k + 2], b[k + 3]]);
                let ack = json!({"type": "ack", "generation": word(4), "sequence": word(8)});
                ws.send(Message::text(ack.to_string())).await?;
                w.pictures += 1;
                w.last = b[24..].to_vec();
            }
            _ => {}
        }
    }
    w.seconds = start.elapsed().as_secs_f64();
    let _ = ws.close(None).await;
    Ok(w)
}

/// utime + stime of `pid` in seconds.
fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let fields: Vec<&str> = stat.rsplit_once(')').context("stat")?.1.split_whitespace().collect();
    let ticks = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
    // SAFETY: sysconf has no preconditions; it only reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok(ticks / hz)
}

/// The daemon's CPU and the pictures one viewer got per second over `seconds`.
async fn measure(c: &mut RawClient, id: &mut u64, pid: u32, seconds: f64) -> anyhow::Result<(f64, f64)> {
    watch(c, id, 2.0).await?; // warmed up: the viewer path, the first pictures
    let cpu0 = cpu_seconds(pid)?;
    let t0 = Instant::now();
    let w = watch(c, id, seconds).await?;
    let cpu = (cpu_seconds(pid)? - cpu0) / t0.elapsed().as_secs_f64() * 100.0;
    Ok((cpu, w.pictures as f64 / w.seconds))
}

async fn status(c: &mut RawClient, id: &mut u64) -> anyhow::Result<Value> {
    *id += 1;
    c.ok(*id, "status", json!({})).await
}

fn generation(st: &Value) -> u64 {
    st["video"]["generation"].as_u64().unwrap_or(0)
}

fn load_jpegs(dir: &str) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)?.flatten().map(|e| e.path()).collect();
    files.sort();
    let jpegs = files.iter().map(fs::read).collect::<Result<Vec<_>, _>>()?;
    ensure!(jpegs.len() >= 10, "{dir} has {} JPEGs", jpegs.len());
    Ok(jpegs)
}

/// Holds picture `k` until the daemon has shown it, then checks the screenshot equals the
/// JPEG decoded.
async fn check_held(c: &mut RawClient, id: &mut u64, src: &Source, size: (u32, u32), k: usize) -> anyhow::Result<()> {
    *src.feed.lock().unwrap() = Feed::Hold(k);
    // Pictures queued before the hold drain first: 4 gadget buffers, the one uvcvideo is
    // filling and its 4 the daemon has not dequeued yet, at most.
    wait_frames(c, id, 10).await?;
    let jpeg = &src.jpegs[&size][k];
    let expected = decode_mjpeg(jpeg, size)?;
    check_screenshot(c, id, &expected, size.0 as usize).await.with_context(|| format!("picture {k}"))
}

pub async fn run() -> anyhow::Result<()> {
    let mut jpegs = HashMap::new();
    jpegs.insert((1920, 1080), load_jpegs("/uvc/1080")?);
    jpegs.insert((1280, 720), load_jpegs("/uvc/720")?);
    let rgb = sim_frame(640, 480)?;
    let yuyv = rgb_to_yuyv(&rgb, 640, 480);
    let yuyv_expected = packed422_to_rgb(&yuyv, 640, 480, 640 * 2, false)?;
    let src = Arc::new(Source {
        feed: Mutex::new(Feed::Play),
        jpegs,
        yuyv: HashMap::from([((640, 480), yuyv)]),
        stop: AtomicBool::new(false),
        sent: AtomicU64::new(0),
        corrupt_sent: AtomicU64::new(0),
    });
    gadget_up(&DONGLE)?;
    let feeder = {
        let src = src.clone();
        std::thread::spawn(move || src.run())
    };
    let node = wait_host_node()?;
    let cap = V4l2Device::open(&node)?.querycap()?;
    log(format!("uvcvideo: {} is {:?} ({})", node.display(), cap.card, cap.bus_info));

    // 1. Negotiation: the daemon is told nothing and picks the largest size and its rate.
    let mut daemon = start_daemon_with(&format!("device = \"{}\"\n", node.display()))?;
    let mut c = RawClient::connect(Path::new(SOCKET)).await?;
    let mut id = 0;
    let st = wait_video(&mut c, &mut id, "locked", 0).await?;
    let d = &st["video"]["device"];
    ensure!(d["driver"] == "uvcvideo" && d["format"] == "MJPG", "{d}");
    ensure!(d["width"] == 1920 && d["height"] == 1080 && d["fps"] == 30.0, "not MJPEG 1080p30: {d}");
    ensure!(st["video"]["capture"] == "mjpeg", "{}", st["video"]);
    let (alt, ep) = streaming_interface().context("no uvcvideo streaming interface in sysfs")?;
    ensure!(alt == "1" && ep == "Isoc", "streaming on alt {alt}, endpoint {ep}");
    log(format!("negotiated {} {}x{}@{} on isochronous alt {alt}", d["format"], d["width"], d["height"], d["fps"]));
    let st = wait_frames(&mut c, &mut id, 30).await?;
    log(format!("30 frames through uvcvideo (status fps {})", st["video"]["fps"]));

    // 2. Content: two held pictures, each equal to its JPEG decoded; the sequence moves on.
    check_held(&mut c, &mut id, &src, (1920, 1080), 3).await?;
    check_held(&mut c, &mut id, &src, (1920, 1080), 17).await?;
    ensure!(src.jpegs[&(1920, 1080)][3] != src.jpegs[&(1920, 1080)][17], "the fixtures are one picture");
    // A live viewer gets the dongle's own JPEGs, byte for byte (passthrough: nothing
    // decoded or encoded for it).
    let w = watch(&mut c, &mut id, 3.0).await?;
    ensure!(w.protocol == "jpeg/1", "viewer stream is {:?}", w.protocol);
    ensure!(w.pictures >= 10, "the viewer got {} pictures in {:.1} s", w.pictures, w.seconds);
    ensure!(w.last == src.jpegs[&(1920, 1080)][17], "the viewer's last picture is not the JPEG sent");
    log(format!(
        "viewer: {} pictures in {:.1} s over /api/video, jpeg/1, the JPEG sent byte for byte",
        w.pictures, w.seconds
    ));
    *src.feed.lock().unwrap() = Feed::Play;

    // 3. Corrupt JPEGs: dropped and counted, the stream goes on.
    let before = st["video"]["device"]["corrupt_frames"].as_u64().unwrap_or(0);
    let sent_before = src.corrupt_sent.load(Ordering::Relaxed);
    *src.feed.lock().unwrap() = Feed::Corrupt(6);
    let start = Instant::now();
    let counted = loop {
        let st = status(&mut c, &mut id).await?;
        let n = st["video"]["device"]["corrupt_frames"].as_u64().unwrap_or(0) - before;
        if n >= 6 {
            break n;
        }
        ensure!(start.elapsed() < Duration::from_secs(20), "{n} corrupt frames counted of 6 sent: {}", st["video"]);
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    ensure!(src.corrupt_sent.load(Ordering::Relaxed) - sent_before == 6, "the source sent other than 6");
    let st = wait_frames(&mut c, &mut id, 10).await?;
    ensure!(st["video"]["signal"] == "locked", "{}", st["video"]);
    check_held(&mut c, &mut id, &src, (1920, 1080), 5).await?;
    *src.feed.lock().unwrap() = Feed::Play;
    log(format!("6 corrupt JPEGs (cut short, header garbled): {counted} counted, none shown, capture goes on"));

    // 4. A stream that stalls: reported, restarted under a new generation when frames return.
    let gen = generation(&status(&mut c, &mut id).await?);
    *src.feed.lock().unwrap() = Feed::Stall;
    let stalled = wait_video(&mut c, &mut id, "no_signal", gen - 1).await?;
    *src.feed.lock().unwrap() = Feed::Play;
    let back = wait_video(&mut c, &mut id, "locked", generation(&stalled)).await?;
    log(format!("stall: no_signal, then locked again (generation {gen} -> {})", generation(&back)));

    // 5. Unplug (gadget unbound) and plug back (rebound): no_device, then frames again under
    // a new generation within 2 s of the rebind.
    let gen = generation(&back);
    set_udc(None)?;
    let gone = wait_video(&mut c, &mut id, "no_device", gen - 1).await?;
    ensure!(host_node().is_none(), "uvcvideo's node is still there after the unbind");
    let rebound = Instant::now();
    set_udc(Some(UDC))?;
    // Polled closely: the time measured is the daemon's, not this loop's.
    let back = loop {
        let st = status(&mut c, &mut id).await?;
        if st["video"]["signal"] == "locked" && generation(&st) > generation(&gone) && st["video"]["frame_id"].is_u64()
        {
            break st;
        }
        ensure!(rebound.elapsed() < Duration::from_secs(30), "no capture 30 s after the rebind: {}", st["video"]);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let took = rebound.elapsed();
    ensure!(took <= Duration::from_secs(2), "capture back {took:?} after the rebind (limit 2 s)");
    log(format!(
        "unplug → no_device; replug → locked in {:.2} s (generation {gen} -> {})",
        took.as_secs_f32(),
        generation(&back)
    ));
    check_held(&mut c, &mut id, &src, (1920, 1080), 9).await?;
    *src.feed.lock().unwrap() = Feed::Play;
    daemon.kill()?;
    daemon.wait()?;

    // 6. YUYV at its low rate, asked for by the config.
    let node = wait_host_node()?;
    let mut daemon = start_daemon_with(&format!("device = \"{}\"\nformat = \"YUYV\"\n", node.display()))?;
    let mut c = RawClient::connect(Path::new(SOCKET)).await?;
    let st = wait_video(&mut c, &mut id, "locked", 0).await?;
    let d = &st["video"]["device"];
    ensure!(d["format"] == "YUYV" && d["width"] == 640 && d["fps"] == 10.0, "{d}");
    wait_frames(&mut c, &mut id, 5).await?;
    check_screenshot(&mut c, &mut id, &yuyv_expected, 640).await?;
    log("YUYV 640x480@10: screenshot equals the frame sent");
    daemon.kill()?;
    daemon.wait()?;

    // 7. The device comes back offering another resolution (720p60 only): renegotiated,
    // new generation, pictures of the new size.
    let mut daemon = start_daemon_with(&format!("device = \"{}\"\n", node.display()))?;
    let mut c = RawClient::connect(Path::new(SOCKET)).await?;
    let st = wait_video(&mut c, &mut id, "locked", 0).await?;
    let gen = generation(&st);
    gadget_down(&DONGLE)?;
    let hd = [Mode { mjpeg: true, width: 1280, height: 720, fps: 60 }];
    gadget_up(&hd)?;
    let st = wait_video(&mut c, &mut id, "locked", gen).await?;
    let d = &st["video"]["device"];
    ensure!(d["width"] == 1280 && d["height"] == 720 && d["fps"] == 60.0, "not 720p60 after the change: {d}");
    check_held(&mut c, &mut id, &src, (1280, 720), 4).await?;
    log(format!(
        "the device came back as 720p60 only: {}x{}@{}, generation {gen} -> {}",
        d["width"],
        d["height"],
        d["fps"],
        generation(&st)
    ));
    daemon.kill()?;
    daemon.wait()?;

    // The bench (TETHER_VM_BENCH=1 tests/vm/run.sh uvc): MJPEG 1080p30 through uvcvideo to
    // one viewer against the replay path with the same JPEGs, measured the same way here.
    if fs::read_to_string("/proc/cmdline")?.contains("tether.bench=1") {
        gadget_down(&hd)?;
        gadget_up(&DONGLE)?;
        *src.feed.lock().unwrap() = Feed::Play;
        let node = wait_host_node()?;
        let seconds = 20.0;
        let mut daemon = start_daemon_with(&format!("device = \"{}\"\n", node.display()))?;
        let mut c = RawClient::connect(Path::new(SOCKET)).await?;
        wait_video(&mut c, &mut id, "locked", 0).await?;
        let (cpu, fps) = measure(&mut c, &mut id, daemon.id(), seconds).await?;
        println!("BENCH uvc: MJPEG 1080p30 gadget → dummy_hcd → uvcvideo → daemon → 1 viewer: daemon CPU {cpu:.1}% of a core, viewer {fps:.1} pictures/s");
        daemon.kill()?;
        daemon.wait()?;
        let mjpeg: Vec<u8> = src.jpegs[&(1920, 1080)].concat();
        fs::write("/run/testsrc-1080p.mjpeg", mjpeg)?;
        let mut daemon = start_daemon_config(
            "hid = \"sim\"\nvideo = \"replay\"\n[replay]\npath = \"/run/testsrc-1080p.mjpeg\"\nfps = 30\n",
        )?;
        let mut c = RawClient::connect(Path::new(SOCKET)).await?;
        wait_video(&mut c, &mut id, "locked", 0).await?;
        let (cpu, fps) = measure(&mut c, &mut id, daemon.id(), seconds).await?;
        println!("BENCH uvc: MJPEG 1080p30 replay (the same 30 JPEGs) → daemon → 1 viewer: daemon CPU {cpu:.1}% of a core, viewer {fps:.1} pictures/s");
        daemon.kill()?;
        daemon.wait()?;
        src.stop.store(true, Ordering::Relaxed);
        gadget_down(&DONGLE)?;
        feeder.join().map_err(|_| anyhow::anyhow!("frame source panicked"))?;
        return Ok(());
    }

    src.stop.store(true, Ordering::Relaxed);
    gadget_down(&hd)?;
    feeder.join().map_err(|_| anyhow::anyhow!("frame source panicked"))?;
    log(format!("frame source queued {} frames", src.sent.load(Ordering::Relaxed)));
    Ok(())
}
