//! A typed, safe V4L2 device: every ioctl in one small function that builds the C struct,
//! calls the kernel, and validates what came back. The only `unsafe` in video code lives
//! here and in `raw`/`ioctl`, each block with its reason.

use std::ffi::c_void;
use std::fmt;
use std::fs::OpenOptions;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use nix::errno::Errno;

use super::ioctl;
use super::raw::*;

/// Errors from a V4L2 device. Expected outcomes (no frame ready, no signal) are not errors:
/// see [`Dequeued`] and [`DvTimingsStatus`].
#[derive(Debug, thiserror::Error)]
pub enum V4l2Error {
    /// The node could not be opened.
    #[error("open {}", .path.display())]
    Open {
        /// The node.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An ioctl failed.
    #[error("VIDIOC_{name} failed: {source}")]
    Ioctl {
        /// The ioctl's name without the prefix.
        name: &'static str,
        /// The kernel's error.
        #[source]
        source: Errno,
    },
    /// mmap of a buffer failed.
    #[error("mmap V4L2 buffer")]
    Mmap(#[source] Errno),
    /// The kernel answered something we cannot use.
    #[error("unexpected answer from the driver: {0}")]
    Invalid(String),
}

fn ioctl_err(name: &'static str) -> impl FnOnce(Errno) -> V4l2Error {
    move |source| V4l2Error::Ioctl { name, source }
}

/// A four-character pixel format code.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct FourCc(pub u32);

impl FourCc {
    /// From four ASCII bytes, e.g. `b"YUYV"`.
    pub const fn new(code: &[u8; 4]) -> FourCc {
        FourCc(u32::from_le_bytes(*code))
    }

    /// Packed YUV 4:2:2, Y0 U Y1 V.
    pub const YUYV: FourCc = FourCc::new(b"YUYV");
    /// Packed YUV 4:2:2, U Y0 V Y1.
    pub const UYVY: FourCc = FourCc::new(b"UYVY");
    /// Planar Y then interleaved UV, 4:2:0.
    pub const NV12: FourCc = FourCc::new(b"NV12");
    /// 24-bit RGB.
    pub const RGB24: FourCc = FourCc::new(b"RGB3");
    /// Motion JPEG.
    pub const MJPEG: FourCc = FourCc::new(b"MJPG");
    /// H.264 elementary stream.
    pub const H264: FourCc = FourCc::new(b"H264");
}

impl fmt::Debug for FourCc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0.to_le_bytes();
        let s: String = b.iter().map(|&c| if c.is_ascii_graphic() || c == b' ' { c as char } else { '?' }).collect();
        write!(f, "{s}")
    }
}

impl fmt::Display for FourCc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Buffer queue types we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum BufType {
    /// Single-planar capture.
    VideoCapture = 1,
    /// Single-planar output.
    VideoOutput = 2,
    /// Multi-planar capture (RK3588 HDMI-in, the Pi's codec CAPTURE side).
    VideoCaptureMplane = 9,
    /// Multi-planar output (the Pi's codec OUTPUT side).
    VideoOutputMplane = 10,
}

impl BufType {
    /// Whether buffers of this type carry a plane array.
    pub fn is_multiplanar(self) -> bool {
        matches!(self, BufType::VideoCaptureMplane | BufType::VideoOutputMplane)
    }

    /// The capture queue type a node with `device_caps` uses (single-planar preferred),
    /// or `None` when it captures neither way.
    pub fn capture_for(device_caps: u32) -> Option<BufType> {
        if device_caps & (CAP_VIDEO_CAPTURE | CAP_VIDEO_M2M) != 0 {
            Some(BufType::VideoCapture)
        } else if device_caps & (CAP_VIDEO_CAPTURE_MPLANE | CAP_VIDEO_M2M_MPLANE) != 0 {
            Some(BufType::VideoCaptureMplane)
        } else {
            None
        }
    }

    /// The output queue type a node with `device_caps` uses (single-planar preferred).
    pub fn output_for(device_caps: u32) -> Option<BufType> {
        if device_caps & (CAP_VIDEO_OUTPUT | CAP_VIDEO_M2M) != 0 {
            Some(BufType::VideoOutput)
        } else if device_caps & (CAP_VIDEO_OUTPUT_MPLANE | CAP_VIDEO_M2M_MPLANE) != 0 {
            Some(BufType::VideoOutputMplane)
        } else {
            None
        }
    }
}

/// `V4L2_CAP_VIDEO_CAPTURE`.
pub const CAP_VIDEO_CAPTURE: u32 = 0x0000_0001;
/// `V4L2_CAP_VIDEO_OUTPUT`.
pub const CAP_VIDEO_OUTPUT: u32 = 0x0000_0002;
/// `V4L2_CAP_VIDEO_CAPTURE_MPLANE`.
pub const CAP_VIDEO_CAPTURE_MPLANE: u32 = 0x0000_1000;
/// `V4L2_CAP_VIDEO_OUTPUT_MPLANE`.
pub const CAP_VIDEO_OUTPUT_MPLANE: u32 = 0x0000_2000;
/// `V4L2_CAP_VIDEO_M2M_MPLANE`.
pub const CAP_VIDEO_M2M_MPLANE: u32 = 0x0000_4000;
/// `V4L2_CAP_VIDEO_M2M`.
pub const CAP_VIDEO_M2M: u32 = 0x0000_8000;
/// `VIDEO_MAX_PLANES` as the kernel's `length` field takes it.
const MAX_PLANES: u32 = 8;
const _: () = assert!(MAX_PLANES as usize == VIDEO_MAX_PLANES);
/// `V4L2_BUF_FLAG_KEYFRAME`: the encoder's output is a key frame.
const BUF_FLAG_KEYFRAME: u32 = 0x0000_0008;
/// `V4L2_BUF_FLAG_ERROR`: the driver could not fill the buffer (e.g. a failed decode).
const BUF_FLAG_ERROR: u32 = 0x0000_0040;
/// `V4L2_BUF_FLAG_M2M_HOLD_CAPTURE_BUF`: more slices of the same picture follow.
const BUF_FLAG_M2M_HOLD_CAPTURE_BUF: u32 = 0x0000_0200;
/// `V4L2_BUF_FLAG_TIMESTAMP_COPY`: the driver copies OUTPUT timestamps to CAPTURE.
const BUF_FLAG_TIMESTAMP_COPY: u32 = 0x0000_4000;
/// `V4L2_BUF_FLAG_REQUEST_FD`: `request_fd` names the request this buffer belongs to.
const BUF_FLAG_REQUEST_FD: u32 = 0x0080_0000;
/// `V4L2_BUF_CAP_SUPPORTS_REQUESTS` (REQBUFS `capabilities`).
pub const BUF_CAP_SUPPORTS_REQUESTS: u32 = 1 << 3;
/// `V4L2_BUF_CAP_SUPPORTS_M2M_HOLD_CAPTURE_BUF`.
pub const BUF_CAP_SUPPORTS_M2M_HOLD_CAPTURE_BUF: u32 = 1 << 5;

const MEMORY_MMAP: u32 = 1;
const FIELD_NONE: u32 = 1;
/// `V4L2_EVENT_EOS`.
pub const EVENT_EOS: u32 = 2;
/// `V4L2_EVENT_SOURCE_CHANGE`.
pub const EVENT_SOURCE_CHANGE: u32 = 5;

fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// What `QUERYCAP` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capability {
    /// Driver name, e.g. `vivid`.
    pub driver: String,
    /// Card name.
    pub card: String,
    /// Bus.
    pub bus_info: String,
    /// Capabilities of this node (`device_caps`).
    pub device_caps: u32,
}

/// One format the node offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatDesc {
    /// The code.
    pub fourcc: FourCc,
    /// The driver's description.
    pub description: String,
}

/// A rectangle of a picture (selection API).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rect {
    /// Left edge.
    pub left: u32,
    /// Top edge.
    pub top: u32,
    /// Width.
    pub width: u32,
    /// Height.
    pub height: u32,
}

impl From<v4l2_rect> for Rect {
    fn from(r: v4l2_rect) -> Rect {
        let non_negative = |v: i32| u32::try_from(v).unwrap_or(0);
        Rect { left: non_negative(r.left), top: non_negative(r.top), width: r.width, height: r.height }
    }
}

/// Selections name the single-planar type even for multi-planar queues (videodev2.h).
fn selection_type(buf: BufType) -> u32 {
    match buf {
        BufType::VideoCaptureMplane => BufType::VideoCapture as u32,
        BufType::VideoOutputMplane => BufType::VideoOutput as u32,
        other => other as u32,
    }
}

/// `V4L2_SEL_TGT_CROP`.
pub const SEL_TGT_CROP: u32 = 0x0000;
/// `V4L2_SEL_TGT_COMPOSE`.
pub const SEL_TGT_COMPOSE: u32 = 0x0100;

/// A picture format, single- or multi-planar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PixFormat {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Pixel format.
    pub fourcc: FourCc,
    /// Bytes per line of the first plane (0: let the driver choose).
    pub bytes_per_line: u32,
    /// Bytes per image, all planes together.
    pub size_image: u32,
    /// Memory planes per buffer (1 for single-planar queues and contiguous formats).
    pub planes: u32,
}

impl PixFormat {
    /// A request for `width`x`height` in `fourcc`, strides and sizes left to the driver.
    pub const fn new(width: u32, height: u32, fourcc: FourCc) -> PixFormat {
        PixFormat { width, height, fourcc, bytes_per_line: 0, size_image: 0, planes: 1 }
    }
}

/// Digital-video timings (BT.656/1120).
#[derive(Debug, Clone, Copy)]
pub struct DvTimings {
    /// Active width.
    pub width: u32,
    /// Active height.
    pub height: u32,
    /// Pixel clock in Hz.
    pub pixelclock: u64,
    /// Total width (active + blanking).
    pub total_width: u32,
    /// Total height.
    pub total_height: u32,
    raw: v4l2_dv_timings,
}

/// Timings are equal when the picture they describe is: size, clock and blanking.
impl PartialEq for DvTimings {
    fn eq(&self, o: &Self) -> bool {
        (self.width, self.height, self.pixelclock, self.total_width, self.total_height)
            == (o.width, o.height, o.pixelclock, o.total_width, o.total_height)
    }
}

impl Eq for DvTimings {}

impl DvTimings {
    fn from_raw(raw: v4l2_dv_timings) -> DvTimings {
        let bt = raw.bt;
        let (w, h, pc) = (bt.width, bt.height, bt.pixelclock);
        let total_width = w + bt.hfrontporch + bt.hsync + bt.hbackporch;
        let total_height = h + bt.vfrontporch + bt.vsync + bt.vbackporch;
        DvTimings { width: w, height: h, pixelclock: pc, total_width, total_height, raw }
    }

    /// Frames per second these timings give, in millihertz.
    pub fn fps_milli(&self) -> u64 {
        let total = u64::from(self.total_width) * u64::from(self.total_height);
        (self.pixelclock * 1000).checked_div(total).unwrap_or(0)
    }
}

/// What `QUERY_DV_TIMINGS` found: expected outcomes of an HDMI input, not errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DvTimingsStatus {
    /// A signal with these timings.
    Locked(DvTimings),
    /// No cable or no signal (ENOLINK).
    NoSignal,
    /// A signal the receiver cannot lock to (ENOLCK).
    NoLock,
    /// Timings outside what the receiver supports (ERANGE).
    OutOfRange,
}

/// One dequeued buffer, or none yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dequeued {
    /// A filled buffer.
    Buffer {
        /// Which buffer.
        index: u32,
        /// Payload bytes in it, all planes together (data offsets excluded).
        bytes_used: u32,
        /// Where the payload sits in each plane.
        payload: Payload,
        /// The driver's frame counter.
        sequence: u32,
        /// Encoders: the buffer holds a key frame.
        keyframe: bool,
        /// The buffer's timestamp in ns (M2M drivers copy an OUTPUT buffer's to the
        /// CAPTURE buffer made from it).
        timestamp_ns: u64,
        /// The driver flagged the buffer as failed (`V4L2_BUF_FLAG_ERROR`).
        error: bool,
    },
    /// Nothing ready (EAGAIN on a non-blocking node).
    NotReady,
}

/// Where a dequeued buffer's payload sits: per plane, `start..end` bytes of the mapping
/// (multi-planar drivers may put a header before the data: `data_offset`, e.g. vivid's 128).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Payload {
    ranges: [(u32, u32); VIDEO_MAX_PLANES],
    planes: usize,
}

impl Payload {
    /// One plane holding `used` bytes from its start.
    pub fn single(used: u32) -> Payload {
        let mut ranges = [(0, 0); VIDEO_MAX_PLANES];
        ranges[0] = (0, used);
        Payload { ranges, planes: 1 }
    }

    /// From what a driver returned per plane, `(data_offset, bytesused)` (at most
    /// `VIDEO_MAX_PLANES`; at least one plane, empty if none is given). `bytesused` counts
    /// the data offset too (videodev2.h); an offset past it leaves the plane empty.
    pub fn from_planes(planes: &[(u32, u32)]) -> Payload {
        let mut ranges = [(0, 0); VIDEO_MAX_PLANES];
        let n = planes.len().clamp(1, VIDEO_MAX_PLANES);
        for (r, &(offset, used)) in ranges.iter_mut().zip(planes) {
            *r = (offset.min(used), used);
        }
        Payload { ranges, planes: n }
    }

    /// The `(start, end)` byte range of each plane's payload.
    pub fn ranges(&self) -> &[(u32, u32)] {
        &self.ranges[..self.planes]
    }

    /// Payload bytes, all planes together (data offsets excluded), saturating: planes whose
    /// sizes add up past `u32::MAX` say `u32::MAX`.
    pub fn bytes_used(&self) -> u32 {
        self.ranges().iter().fold(0u32, |sum, (a, z)| sum.saturating_add(z - a))
    }

    /// The payload out of the planes' memory, planes in order: borrowed when it sits in one
    /// plane, copied together otherwise (e.g. NV12M's separate luma and chroma planes).
    /// Ranges are clamped to the memory (a driver's word is not trusted with it).
    pub fn gather<'a>(&self, planes: &[&'a [u8]]) -> std::borrow::Cow<'a, [u8]> {
        fn slice(bytes: &[u8], (start, end): (u32, u32)) -> &[u8] {
            let end = (end as usize).min(bytes.len());
            &bytes[(start as usize).min(end)..end]
        }
        let mut parts = planes.iter().zip(self.ranges()).map(|(p, r)| slice(p, *r));
        match self.ranges().len() {
            0 => std::borrow::Cow::Borrowed(&[]),
            1 => std::borrow::Cow::Borrowed(parts.next().unwrap_or_default()),
            _ => std::borrow::Cow::Owned(parts.flatten().copied().collect()),
        }
    }
}

/// A dequeued event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Resolution or signal changed: re-query the timings and restart streaming.
    SourceChange {
        /// `V4L2_EVENT_SRC_CH_*` bits.
        changes: u32,
    },
    /// End of stream (codecs).
    Eos,
    /// Another event type.
    Other(u32),
}

/// One control for [`V4l2Device::set_ext_controls`]: a scalar value, or a compound value
/// (a codec parameter struct) borrowed for the call.
#[derive(Debug, Clone, Copy)]
pub struct ExtControl<'a> {
    raw: v4l2_ext_control,
    _borrow: std::marker::PhantomData<&'a ()>,
}

/// Kernel structs that are passed whole as a compound control.
pub trait CompoundControl: Copy + sealed::Sealed {}

mod sealed {
    pub trait Sealed {}
}

macro_rules! compound {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl CompoundControl for $t {}
    )*};
}
compound!(
    v4l2_ctrl_h264_sps,
    v4l2_ctrl_h264_pps,
    v4l2_ctrl_h264_scaling_matrix,
    v4l2_ctrl_h264_pred_weights,
    v4l2_ctrl_h264_slice_params,
    v4l2_ctrl_h264_decode_params
);

impl<'a> ExtControl<'a> {
    /// A scalar (integer, menu, boolean) control.
    pub fn value(id: u32, value: i32) -> ExtControl<'static> {
        // The union's `value` is an `__s32` at its start: little-endian, the low 4 bytes.
        let raw = v4l2_ext_control { id, size: 0, reserved2: [0], value_or_ptr: u64::from(value as u32) };
        ExtControl { raw, _borrow: std::marker::PhantomData }
    }

    /// A compound control whose payload is `value` (its whole struct).
    pub fn compound<T: CompoundControl>(id: u32, value: &'a T) -> ExtControl<'a> {
        let size = u32::try_from(std::mem::size_of::<T>()).unwrap_or(u32::MAX);
        let raw = v4l2_ext_control { id, size, reserved2: [0], value_or_ptr: value as *const T as u64 };
        ExtControl { raw, _borrow: std::marker::PhantomData }
    }

    /// The control's id.
    pub fn id(&self) -> u32 {
        self.raw.id
    }
}

/// What `VIDIOC_QUERY_EXT_CTRL` says about one control.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtControlInfo {
    /// The control's id.
    pub id: u32,
    /// The driver's name for it.
    pub name: String,
    /// Lowest value (menus: first item).
    pub minimum: i64,
    /// Highest value (menus: last item).
    pub maximum: i64,
    /// The value a fresh open starts with.
    pub default: i64,
    /// Bytes per element (compound controls: the struct size the driver expects).
    pub elem_size: u32,
}

/// A timestamp in ns as the `timeval` V4L2 carries (µs resolution: `ns` should be a
/// multiple of 1000 to come back unchanged).
fn ns_timeval(ns: u64) -> timeval {
    let us = ns / 1000;
    timeval { tv_sec: i64::try_from(us / 1_000_000).unwrap_or(i64::MAX), tv_usec: (us % 1_000_000) as i64 }
}

/// `v4l2_timeval_to_ns`: what a driver compares a DPB entry's `reference_ts` with.
fn timeval_ns(t: timeval) -> u64 {
    u64::try_from(t.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(t.tv_usec).unwrap_or(0) * 1000)
}

/// A V4L2 device node.
#[derive(Debug)]
pub struct V4l2Device {
    fd: OwnedFd,
    path: PathBuf,
}

impl V4l2Device {
    /// Opens `path` read-write, non-blocking.
    pub fn open(path: &Path) -> Result<V4l2Device, V4l2Error> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|source| V4l2Error::Open { path: path.into(), source })?;
        Ok(V4l2Device { fd: file.into(), path: path.into() })
    }

    /// The node's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn raw(&self) -> libc::c_int {
        self.fd.as_raw_fd()
    }

    /// `VIDIOC_QUERYCAP`.
    pub fn querycap(&self) -> Result<Capability, V4l2Error> {
        let mut c = v4l2_capability::default();
        // SAFETY: `self.fd` is an open V4L2 node; the kernel writes at most
        // size_of::<v4l2_capability>() bytes into `c`, which we own.
        unsafe { ioctl::querycap(self.raw(), &mut c) }.map_err(ioctl_err("QUERYCAP"))?;
        let device_caps = if c.capabilities & 0x8000_0000 != 0 { c.device_caps } else { c.capabilities };
        Ok(Capability {
            driver: c_string(&c.driver),
            card: c_string(&c.card),
            bus_info: c_string(&c.bus_info),
            device_caps,
        })
    }

    /// `VIDIOC_ENUM_FMT` over every index.
    pub fn formats(&self, buf: BufType) -> Result<Vec<FormatDesc>, V4l2Error> {
        let mut out = Vec::new();
        for index in 0..256 {
            let mut d = v4l2_fmtdesc { index, type_: buf as u32, ..Default::default() };
            // SAFETY: as for QUERYCAP; `d` is a valid, owned v4l2_fmtdesc.
            match unsafe { ioctl::enum_fmt(self.raw(), &mut d) } {
                Ok(_) => out.push(FormatDesc { fourcc: FourCc(d.pixelformat), description: c_string(&d.description) }),
                Err(Errno::EINVAL) => break, // end of the list
                Err(e) => return Err(ioctl_err("ENUM_FMT")(e)),
            }
        }
        Ok(out)
    }

    /// Reads the union member of `v4l2_format` its type selects.
    fn pix_of(f: &v4l2_format) -> Result<PixFormat, V4l2Error> {
        let single = [BufType::VideoCapture as u32, BufType::VideoOutput as u32];
        let multi = [BufType::VideoCaptureMplane as u32, BufType::VideoOutputMplane as u32];
        if single.contains(&f.type_) {
            // SAFETY: for single-planar buffer types (checked above) the kernel fills
            // `fmt.pix`; every bit pattern is a valid v4l2_pix_format (plain integers).
            let p = unsafe { f.fmt.pix };
            Ok(PixFormat {
                width: p.width,
                height: p.height,
                fourcc: FourCc(p.pixelformat),
                bytes_per_line: p.bytesperline,
                size_image: p.sizeimage,
                planes: 1,
            })
        } else if multi.contains(&f.type_) {
            // SAFETY: for multi-planar types (checked above) the kernel fills `fmt.pix_mp`;
            // plain integers, any bit pattern valid. Copied out whole (the struct is packed).
            let p = unsafe { f.fmt.pix_mp };
            let planes = usize::from(p.num_planes).clamp(1, VIDEO_MAX_PLANES);
            let plane_fmt = p.plane_fmt;
            let size_image = plane_fmt[..planes].iter().map(|pf| pf.sizeimage).sum();
            Ok(PixFormat {
                width: p.width,
                height: p.height,
                fourcc: FourCc(p.pixelformat),
                bytes_per_line: plane_fmt[0].bytesperline,
                size_image,
                planes: u32::from(p.num_planes.max(1)),
            })
        } else {
            Err(V4l2Error::Invalid(format!("format type {} is not a video type", f.type_)))
        }
    }

    /// `VIDIOC_G_FMT`.
    pub fn format(&self, buf: BufType) -> Result<PixFormat, V4l2Error> {
        let mut f = v4l2_format { type_: buf as u32, ..Default::default() };
        // SAFETY: `f` is a valid, owned v4l2_format; the kernel writes within its size.
        unsafe { ioctl::g_fmt(self.raw(), &mut f) }.map_err(ioctl_err("G_FMT"))?;
        Self::pix_of(&f)
    }

    /// `VIDIOC_S_FMT`: returns what the driver actually chose.
    pub fn set_format(&self, buf: BufType, want: &PixFormat) -> Result<PixFormat, V4l2Error> {
        let fmt = if buf.is_multiplanar() {
            let mut plane_fmt = [v4l2_plane_pix_format::default(); VIDEO_MAX_PLANES];
            plane_fmt[0].bytesperline = want.bytes_per_line;
            plane_fmt[0].sizeimage = want.size_image;
            v4l2_format_fmt {
                pix_mp: v4l2_pix_format_mplane {
                    width: want.width,
                    height: want.height,
                    pixelformat: want.fourcc.0,
                    field: FIELD_NONE,
                    plane_fmt,
                    num_planes: 0, // the driver fills in what the format needs
                    ..Default::default()
                },
            }
        } else {
            v4l2_format_fmt {
                pix: v4l2_pix_format {
                    width: want.width,
                    height: want.height,
                    pixelformat: want.fourcc.0,
                    field: FIELD_NONE,
                    bytesperline: want.bytes_per_line,
                    sizeimage: want.size_image,
                    ..Default::default()
                },
            }
        };
        let mut f = v4l2_format { type_: buf as u32, fmt };
        // SAFETY: as for G_FMT.
        unsafe { ioctl::s_fmt(self.raw(), &mut f) }.map_err(ioctl_err("S_FMT"))?;
        Self::pix_of(&f)
    }

    /// `VIDIOC_REQBUFS` with mmap memory; 0 frees them. Returns how many the driver gave.
    pub fn request_buffers(&self, buf: BufType, count: u32) -> Result<u32, V4l2Error> {
        let mut r = v4l2_requestbuffers { count, type_: buf as u32, memory: MEMORY_MMAP, ..Default::default() };
        // SAFETY: `r` is a valid, owned v4l2_requestbuffers.
        unsafe { ioctl::reqbufs(self.raw(), &mut r) }.map_err(ioctl_err("REQBUFS"))?;
        Ok(r.count)
    }

    /// Like [`V4l2Device::request_buffers`], also returning the queue's capabilities
    /// (`V4L2_BUF_CAP_*`, e.g. [`BUF_CAP_SUPPORTS_REQUESTS`]).
    pub fn request_buffers_caps(&self, buf: BufType, count: u32) -> Result<(u32, u32), V4l2Error> {
        let mut r = v4l2_requestbuffers { count, type_: buf as u32, memory: MEMORY_MMAP, ..Default::default() };
        // SAFETY: `r` is a valid, owned v4l2_requestbuffers.
        unsafe { ioctl::reqbufs(self.raw(), &mut r) }.map_err(ioctl_err("REQBUFS"))?;
        Ok((r.count, r.capabilities))
    }

    /// `VIDIOC_QUERYBUF` + mmap: maps every plane of buffer `index` (one for single-planar
    /// queues).
    pub fn map_buffer(&self, buf: BufType, index: u32) -> Result<BufferPlanes, V4l2Error> {
        let mut planes = [v4l2_plane::default(); VIDEO_MAX_PLANES];
        let mut b = v4l2_buffer { index, type_: buf as u32, memory: MEMORY_MMAP, ..Default::default() };
        if buf.is_multiplanar() {
            b.m.planes = planes.as_mut_ptr();
            b.length = MAX_PLANES;
        }
        // SAFETY: `b` is a valid, owned v4l2_buffer; for multi-planar types `m.planes` points
        // to `planes` (VIDEO_MAX_PLANES entries, as `length` says), which outlives the call.
        unsafe { ioctl::querybuf(self.raw(), &mut b) }.map_err(ioctl_err("QUERYBUF"))?;
        let mut maps = Vec::new();
        if buf.is_multiplanar() {
            let n = (b.length as usize).min(VIDEO_MAX_PLANES);
            for p in &planes[..n] {
                // SAFETY: for MMAP memory the kernel sets each plane's `m.mem_offset`.
                let offset = unsafe { p.m.mem_offset };
                maps.push(MappedBuffer::map(&self.fd, offset, p.length as usize)?);
            }
        } else {
            // SAFETY: for MMAP memory the kernel sets `m.offset` (union member for mmap).
            let offset = unsafe { b.m.offset };
            maps.push(MappedBuffer::map(&self.fd, offset, b.length as usize)?);
        }
        if maps.is_empty() {
            return Err(V4l2Error::Invalid("a buffer without planes".into()));
        }
        Ok(BufferPlanes { planes: maps })
    }

    /// `VIDIOC_QBUF`: hands buffer `index` to the driver. `bytes_used` (one entry per plane;
    /// missing entries are 0) matters for output queues.
    pub fn queue(&self, buf: BufType, index: u32, bytes_used: &[u32]) -> Result<(), V4l2Error> {
        let mut planes = [v4l2_plane::default(); VIDEO_MAX_PLANES];
        let mut b = v4l2_buffer {
            index,
            type_: buf as u32,
            memory: MEMORY_MMAP,
            bytesused: bytes_used.first().copied().unwrap_or(0),
            field: FIELD_NONE,
            ..Default::default()
        };
        if buf.is_multiplanar() {
            let n = bytes_used.len().clamp(1, VIDEO_MAX_PLANES);
            for (p, used) in planes.iter_mut().zip(bytes_used) {
                p.bytesused = *used;
            }
            b.m.planes = planes.as_mut_ptr();
            b.length = u32::try_from(n).unwrap_or(MAX_PLANES);
        }
        // SAFETY: as for QUERYBUF: `planes` outlives the call and holds `length` entries.
        unsafe { ioctl::qbuf(self.raw(), &mut b) }.map_err(ioctl_err("QBUF"))?;
        Ok(())
    }

    /// `VIDIOC_QBUF` of an OUTPUT buffer into `request` (stateless codecs): the buffer
    /// runs when the request is queued. `timestamp_ns` tags the picture it decodes to (the
    /// handle references use); `hold_capture` keeps the CAPTURE buffer for the next slice
    /// of the same picture.
    pub fn queue_in_request(
        &self,
        buf: BufType,
        index: u32,
        bytes_used: u32,
        request: &super::Request,
        timestamp_ns: u64,
        hold_capture: bool,
    ) -> Result<(), V4l2Error> {
        let mut planes = [v4l2_plane::default(); VIDEO_MAX_PLANES];
        let mut b = v4l2_buffer {
            index,
            type_: buf as u32,
            memory: MEMORY_MMAP,
            bytesused: bytes_used,
            field: FIELD_NONE,
            flags: BUF_FLAG_REQUEST_FD
                | BUF_FLAG_TIMESTAMP_COPY
                | if hold_capture { BUF_FLAG_M2M_HOLD_CAPTURE_BUF } else { 0 },
            timestamp: ns_timeval(timestamp_ns),
            request_fd: request.raw_fd(),
            ..Default::default()
        };
        if buf.is_multiplanar() {
            planes[0].bytesused = bytes_used;
            b.m.planes = planes.as_mut_ptr();
            b.length = 1;
        }
        // SAFETY: as for QUERYBUF: `planes` outlives the call and holds `length` entries;
        // `request_fd` is an open request fd owned by `request`, which outlives the call.
        unsafe { ioctl::qbuf(self.raw(), &mut b) }.map_err(ioctl_err("QBUF(request)"))?;
        Ok(())
    }

    /// `VIDIOC_S_EXT_CTRLS`: sets `controls` now, or (with `request`) stores them in the
    /// request. On failure the error names the control the driver refused.
    pub fn set_ext_controls(
        &self,
        request: Option<&super::Request>,
        controls: &[ExtControl<'_>],
    ) -> Result<(), V4l2Error> {
        let mut raw: Vec<v4l2_ext_control> = controls.iter().map(|c| c.raw).collect();
        let mut c = v4l2_ext_controls {
            which: if request.is_some() { CTRL_WHICH_REQUEST_VAL } else { CTRL_WHICH_CUR_VAL },
            count: u32::try_from(raw.len()).map_err(|_| V4l2Error::Invalid("too many controls".into()))?,
            error_idx: 0,
            request_fd: request.map_or(0, |r| r.raw_fd()),
            reserved: [0],
            controls: raw.as_mut_ptr(),
        };
        // SAFETY: `controls` points to `count` owned entries; each compound entry's pointer
        // and size come from an `ExtControl`, which borrows a live value of exactly that
        // size for as long as `controls` is borrowed (across this call).
        match unsafe { ioctl::s_ext_ctrls(self.raw(), &mut c) } {
            Ok(_) => Ok(()),
            Err(source) => {
                let which = controls.get(c.error_idx as usize).map_or(0, |c| c.id());
                tracing::debug!(control = format!("{which:#x}"), error = %source, "S_EXT_CTRLS refused");
                Err(V4l2Error::Ioctl { name: "S_EXT_CTRLS", source })
            }
        }
    }

    /// `VIDIOC_QUERY_EXT_CTRL` for one control; `None` when the node lacks it.
    pub fn query_ext_control(&self, id: u32) -> Result<Option<ExtControlInfo>, V4l2Error> {
        let mut q = v4l2_query_ext_ctrl { id, ..Default::default() };
        // SAFETY: `q` is a valid, owned v4l2_query_ext_ctrl.
        match unsafe { ioctl::query_ext_ctrl(self.raw(), &mut q) } {
            Ok(_) => Ok(Some(ExtControlInfo {
                id: q.id,
                name: c_string(&q.name),
                minimum: q.minimum,
                maximum: q.maximum,
                default: q.default_value,
                elem_size: q.elem_size,
            })),
            Err(Errno::EINVAL) => Ok(None),
            Err(e) => Err(ioctl_err("QUERY_EXT_CTRL")(e)),
        }
    }

    /// `VIDIOC_DQBUF`, non-blocking.
    pub fn dequeue(&self, buf: BufType) -> Result<Dequeued, V4l2Error> {
        let mut planes = [v4l2_plane::default(); VIDEO_MAX_PLANES];
        let mut b = v4l2_buffer { type_: buf as u32, memory: MEMORY_MMAP, ..Default::default() };
        if buf.is_multiplanar() {
            b.m.planes = planes.as_mut_ptr();
            b.length = MAX_PLANES;
        }
        // SAFETY: as for QUERYBUF.
        match unsafe { ioctl::dqbuf(self.raw(), &mut b) } {
            Ok(_) => {
                let payload = if buf.is_multiplanar() {
                    let n = (b.length as usize).clamp(1, VIDEO_MAX_PLANES);
                    let given: Vec<(u32, u32)> = planes[..n].iter().map(|p| (p.data_offset, p.bytesused)).collect();
                    Payload::from_planes(&given)
                } else {
                    Payload::single(b.bytesused)
                };
                Ok(Dequeued::Buffer {
                    index: b.index,
                    bytes_used: payload.bytes_used(),
                    payload,
                    sequence: b.sequence,
                    keyframe: b.flags & BUF_FLAG_KEYFRAME != 0,
                    timestamp_ns: timeval_ns(b.timestamp),
                    error: b.flags & BUF_FLAG_ERROR != 0,
                })
            }
            Err(Errno::EAGAIN) => Ok(Dequeued::NotReady),
            Err(e) => Err(ioctl_err("DQBUF")(e)),
        }
    }

    /// `VIDIOC_STREAMON` / `VIDIOC_STREAMOFF`.
    pub fn stream(&self, buf: BufType, on: bool) -> Result<(), V4l2Error> {
        let t: libc::c_int = buf as libc::c_int;
        // SAFETY: the kernel reads one int from `&t`, which lives across the call.
        let r = unsafe {
            if on {
                ioctl::streamon(self.raw(), &t)
            } else {
                ioctl::streamoff(self.raw(), &t)
            }
        };
        let name = match (on, buf.is_multiplanar(), buf == BufType::VideoOutput || buf == BufType::VideoOutputMplane) {
            (true, false, false) => "STREAMON(capture)",
            (true, false, true) => "STREAMON(output)",
            (true, true, false) => "STREAMON(capture, multi-planar)",
            (true, true, true) => "STREAMON(output, multi-planar)",
            (false, ..) => "STREAMOFF",
        };
        r.map_err(ioctl_err(name))?;
        Ok(())
    }

    /// `VIDIOC_S_SELECTION`: sets `target` (e.g. [`SEL_TGT_CROP`] on an encoder's OUTPUT
    /// queue: the visible part of a padded picture) and returns the rectangle the driver took.
    pub fn set_selection(&self, buf: BufType, target: u32, rect: Rect) -> Result<Rect, V4l2Error> {
        let r = v4l2_rect {
            left: i32::try_from(rect.left).unwrap_or(0),
            top: i32::try_from(rect.top).unwrap_or(0),
            width: rect.width,
            height: rect.height,
        };
        let mut sel = v4l2_selection { type_: selection_type(buf), target, flags: 0, r, reserved: [0; 9] };
        // SAFETY: `sel` is a valid, owned v4l2_selection; the kernel writes within its size.
        unsafe { ioctl::s_selection(self.raw(), &mut sel) }.map_err(ioctl_err("S_SELECTION"))?;
        Ok(Rect::from(sel.r))
    }

    /// `VIDIOC_G_SELECTION`.
    pub fn selection(&self, buf: BufType, target: u32) -> Result<Rect, V4l2Error> {
        let mut sel = v4l2_selection { type_: selection_type(buf), target, ..Default::default() };
        // SAFETY: as for S_SELECTION.
        unsafe { ioctl::g_selection(self.raw(), &mut sel) }.map_err(ioctl_err("G_SELECTION"))?;
        Ok(Rect::from(sel.r))
    }

    /// `VIDIOC_S_INPUT`.
    pub fn set_input(&self, index: u32) -> Result<(), V4l2Error> {
        let mut i = libc::c_int::try_from(index).map_err(|_| V4l2Error::Invalid("input index".into()))?;
        // SAFETY: the kernel reads and writes one int at `&mut i`.
        unsafe { ioctl::s_input(self.raw(), &mut i) }.map_err(ioctl_err("S_INPUT"))?;
        Ok(())
    }

    /// `VIDIOC_ENUMINPUT` over every index: (index, name, type).
    pub fn inputs(&self) -> Result<Vec<(u32, String, u32)>, V4l2Error> {
        let mut out = Vec::new();
        for index in 0..64 {
            let mut i = v4l2_input { index, ..Default::default() };
            // SAFETY: `i` is a valid, owned v4l2_input.
            match unsafe { ioctl::enuminput(self.raw(), &mut i) } {
                Ok(_) => out.push((index, c_string(&i.name), i.type_)),
                Err(Errno::EINVAL) => break,
                Err(e) => return Err(ioctl_err("ENUMINPUT")(e)),
            }
        }
        Ok(out)
    }

    /// `VIDIOC_ENUM_FRAMESIZES` for `fourcc`: the discrete sizes, or for a stepwise or
    /// continuous range its minimum and maximum.
    pub fn frame_sizes(&self, fourcc: FourCc) -> Result<Vec<(u32, u32)>, V4l2Error> {
        let mut out = Vec::new();
        for index in 0..256 {
            let mut e = v4l2_frmsizeenum { index, pixel_format: fourcc.0, ..Default::default() };
            // SAFETY: `e` is a valid, owned v4l2_frmsizeenum; the kernel writes within it.
            match unsafe { ioctl::enum_framesizes(self.raw(), &mut e) } {
                Ok(_) => {}
                Err(Errno::EINVAL) => break, // past the last one
                Err(err) => return Err(ioctl_err("ENUM_FRAMESIZES")(err)),
            }
            let w = e.stepwise;
            if e.type_ == FRMSIZE_TYPE_DISCRETE {
                // Discrete entries hold (width, height) in the first two words.
                out.push((w.min_width, w.max_width));
            } else {
                out.push((w.min_width, w.min_height));
                out.push((w.max_width, w.max_height));
                break; // one range describes them all
            }
        }
        Ok(out)
    }

    /// `VIDIOC_ENUM_FRAMEINTERVALS` for `fourcc` at `width`×`height`: the discrete intervals
    /// as (numerator, denominator) seconds, or for a range its shortest and longest.
    pub fn frame_intervals(&self, fourcc: FourCc, width: u32, height: u32) -> Result<Vec<(u32, u32)>, V4l2Error> {
        let mut out = Vec::new();
        for index in 0..256 {
            let mut e = v4l2_frmivalenum { index, pixel_format: fourcc.0, width, height, ..Default::default() };
            // SAFETY: `e` is a valid, owned v4l2_frmivalenum; the kernel writes within it.
            match unsafe { ioctl::enum_frameintervals(self.raw(), &mut e) } {
                Ok(_) => {}
                Err(Errno::EINVAL) => break,
                Err(err) => return Err(ioctl_err("ENUM_FRAMEINTERVALS")(err)),
            }
            let s = e.stepwise;
            out.push((s.min.numerator, s.min.denominator));
            if e.type_ != FRMIVAL_TYPE_DISCRETE {
                out.push((s.max.numerator, s.max.denominator));
                break;
            }
        }
        Ok(out)
    }

    /// `VIDIOC_G_PARM`: the capture queue's frame interval as (numerator, denominator)
    /// seconds, or `None` when the driver does not take one (`V4L2_CAP_TIMEPERFRAME` unset).
    pub fn frame_interval(&self, buf: BufType) -> Result<Option<(u32, u32)>, V4l2Error> {
        let mut p = v4l2_streamparm { type_: buf as u32, ..Default::default() };
        // SAFETY: `p` is a valid, owned v4l2_streamparm; the kernel writes within its size.
        unsafe { ioctl::g_parm(self.raw(), &mut p) }.map_err(ioctl_err("G_PARM"))?;
        // SAFETY: for capture queues the union holds `capture`; every bit pattern is valid
        // for its plain integer fields.
        let c = unsafe { p.parm.capture };
        Ok((c.capability & CAP_TIMEPERFRAME != 0 && c.timeperframe.denominator != 0)
            .then_some((c.timeperframe.numerator, c.timeperframe.denominator)))
    }

    /// `VIDIOC_S_PARM`: asks for a frame interval (numerator/denominator seconds); returns
    /// the one the driver chose (the nearest it has).
    pub fn set_frame_interval(&self, buf: BufType, interval: (u32, u32)) -> Result<(u32, u32), V4l2Error> {
        let capture = v4l2_captureparm {
            timeperframe: v4l2_fract { numerator: interval.0, denominator: interval.1 },
            ..Default::default()
        };
        let mut p = v4l2_streamparm { type_: buf as u32, parm: v4l2_streamparm_union { capture } };
        // SAFETY: as for G_PARM.
        unsafe { ioctl::s_parm(self.raw(), &mut p) }.map_err(ioctl_err("S_PARM"))?;
        // SAFETY: as for G_PARM.
        let c = unsafe { p.parm.capture };
        Ok((c.timeperframe.numerator, c.timeperframe.denominator))
    }

    /// `VIDIOC_QUERY_DV_TIMINGS`: what the HDMI receiver sees now.
    pub fn query_dv_timings(&self) -> Result<DvTimingsStatus, V4l2Error> {
        let mut t = v4l2_dv_timings::default();
        // SAFETY: `t` is a valid, owned v4l2_dv_timings; the kernel writes within its size.
        match unsafe { ioctl::query_dv_timings(self.raw(), &mut t) } {
            Ok(_) => Ok(DvTimingsStatus::Locked(DvTimings::from_raw(t))),
            Err(Errno::ENOLINK) => Ok(DvTimingsStatus::NoSignal),
            Err(Errno::ENOLCK) => Ok(DvTimingsStatus::NoLock),
            Err(Errno::ERANGE) => Ok(DvTimingsStatus::OutOfRange),
            Err(e) => Err(ioctl_err("QUERY_DV_TIMINGS")(e)),
        }
    }

    /// `VIDIOC_S_DV_TIMINGS`: applies timings (usually the ones just queried).
    pub fn set_dv_timings(&self, timings: &DvTimings) -> Result<DvTimings, V4l2Error> {
        let mut t = timings.raw;
        // SAFETY: as for QUERY_DV_TIMINGS.
        unsafe { ioctl::s_dv_timings(self.raw(), &mut t) }.map_err(ioctl_err("S_DV_TIMINGS"))?;
        Ok(DvTimings::from_raw(t))
    }

    /// `VIDIOC_G_DV_TIMINGS`.
    pub fn dv_timings(&self) -> Result<DvTimings, V4l2Error> {
        let mut t = v4l2_dv_timings::default();
        // SAFETY: as for QUERY_DV_TIMINGS.
        unsafe { ioctl::g_dv_timings(self.raw(), &mut t) }.map_err(ioctl_err("G_DV_TIMINGS"))?;
        Ok(DvTimings::from_raw(t))
    }

    /// `VIDIOC_ENUM_DV_TIMINGS` entry `index`, or `None` past the end.
    pub fn enum_dv_timings(&self, index: u32) -> Result<Option<DvTimings>, V4l2Error> {
        let mut e = v4l2_enum_dv_timings { index, ..Default::default() };
        // SAFETY: `e` is a valid, owned v4l2_enum_dv_timings.
        match unsafe { ioctl::enum_dv_timings(self.raw(), &mut e) } {
            Ok(_) => Ok(Some(DvTimings::from_raw(e.timings))),
            Err(Errno::EINVAL) => Ok(None),
            Err(err) => Err(ioctl_err("ENUM_DV_TIMINGS")(err)),
        }
    }

    /// `VIDIOC_DV_TIMINGS_CAP`: (min width, max width, min height, max height).
    pub fn dv_timings_cap(&self) -> Result<(u32, u32, u32, u32), V4l2Error> {
        let mut c = v4l2_dv_timings_cap::default();
        // SAFETY: `c` is a valid, owned v4l2_dv_timings_cap.
        unsafe { ioctl::dv_timings_cap(self.raw(), &mut c) }.map_err(ioctl_err("DV_TIMINGS_CAP"))?;
        let bt = c.bt;
        Ok((bt.min_width, bt.max_width, bt.min_height, bt.max_height))
    }

    /// `VIDIOC_G_EDID`: up to `blocks` 128-byte blocks of `pad` (on a video node: the input
    /// index; on a bridge subdevice: its pad, usually 0).
    pub fn edid(&self, pad: u32, blocks: u32) -> Result<Vec<u8>, V4l2Error> {
        let mut data = vec![0u8; blocks as usize * 128];
        let mut e = v4l2_edid { pad, start_block: 0, blocks, reserved: [0; 5], edid: data.as_mut_ptr() };
        // SAFETY: `e.edid` points to `blocks * 128` writable bytes that outlive the call;
        // the kernel writes at most `e.blocks` blocks there and updates `e.blocks`.
        unsafe { ioctl::g_edid(self.raw(), &mut e) }.map_err(ioctl_err("G_EDID"))?;
        data.truncate(e.blocks.min(blocks) as usize * 128);
        Ok(data)
    }

    /// `VIDIOC_S_EDID` of `pad` (see [`V4l2Device::edid`]).
    pub fn set_edid(&self, pad: u32, edid: &[u8]) -> Result<(), V4l2Error> {
        if !edid.len().is_multiple_of(128) {
            return Err(V4l2Error::Invalid("an EDID is a whole number of 128-byte blocks".into()));
        }
        let mut data = edid.to_vec();
        let blocks = u32::try_from(edid.len() / 128).map_err(|_| V4l2Error::Invalid("EDID too long".into()))?;
        let mut e = v4l2_edid { pad, start_block: 0, blocks, reserved: [0; 5], edid: data.as_mut_ptr() };
        // SAFETY: `e.edid` points to `blocks * 128` bytes that outlive the call.
        unsafe { ioctl::s_edid(self.raw(), &mut e) }.map_err(ioctl_err("S_EDID"))?;
        Ok(())
    }

    /// `VIDIOC_SUBSCRIBE_EVENT`. For source-change events `id` is the input index.
    pub fn subscribe(&self, event_type: u32, id: u32) -> Result<(), V4l2Error> {
        let s = v4l2_event_subscription { type_: event_type, id, ..Default::default() };
        // SAFETY: the kernel reads one v4l2_event_subscription from `&s`.
        unsafe { ioctl::subscribe_event(self.raw(), &s) }.map_err(ioctl_err("SUBSCRIBE_EVENT"))?;
        Ok(())
    }

    /// `VIDIOC_DQEVENT`: the next pending event, if any.
    pub fn next_event(&self) -> Result<Option<Event>, V4l2Error> {
        Ok(self.next_event_data()?.map(|(kind, d)| match kind {
            // SOURCE_CHANGE's payload is `src_change { __u32 changes }`, its first four bytes.
            EVENT_SOURCE_CHANGE => Event::SourceChange { changes: u32::from_ne_bytes([d[0], d[1], d[2], d[3]]) },
            EVENT_EOS => Event::Eos,
            other => Event::Other(other),
        }))
    }

    /// `VIDIOC_DQEVENT` with the event's type and raw 64-byte payload, for events this
    /// layer does not interpret (a UVC gadget's `UVC_EVENT_*` carry USB requests).
    pub fn next_event_data(&self) -> Result<Option<(u32, [u8; 64])>, V4l2Error> {
        let mut e = v4l2_event::default();
        // SAFETY: `e` is a valid, owned v4l2_event; the kernel writes within its size.
        match unsafe { ioctl::dqevent(self.raw(), &mut e) } {
            Ok(_) => {}
            Err(Errno::ENOENT) => return Ok(None), // nothing pending
            Err(err) => return Err(ioctl_err("DQEVENT")(err)),
        }
        // SAFETY: every variant of the payload union is plain bytes; `data` views all 64.
        Ok(Some((e.type_, unsafe { e.u.data })))
    }

    /// Every control of the node: (id, name, minimum, maximum), via `VIDIOC_QUERYCTRL`.
    pub fn controls(&self) -> Result<Vec<(u32, String, i32, i32)>, V4l2Error> {
        let mut out = Vec::new();
        let mut id = 0u32;
        loop {
            let mut q = v4l2_queryctrl { id: id | CTRL_FLAG_NEXT_CTRL, ..Default::default() };
            // SAFETY: `q` is a valid, owned v4l2_queryctrl.
            match unsafe { ioctl::queryctrl(self.raw(), &mut q) } {
                Ok(_) => {}
                Err(Errno::EINVAL) => break, // past the last control
                Err(e) => return Err(ioctl_err("QUERYCTRL")(e)),
            }
            if q.id <= id {
                break; // a driver that does not advance would loop forever
            }
            id = q.id;
            if q.type_ != CTRL_TYPE_CTRL_CLASS {
                out.push((q.id, c_string(&q.name), q.minimum, q.maximum));
            }
        }
        Ok(out)
    }

    /// The id of the control called `name` (case-insensitive), if the node has one.
    pub fn control_id(&self, name: &str) -> Result<Option<u32>, V4l2Error> {
        Ok(self.controls()?.into_iter().find(|c| c.1.eq_ignore_ascii_case(name)).map(|c| c.0))
    }

    /// `VIDIOC_G_CTRL`.
    pub fn control(&self, id: u32) -> Result<i32, V4l2Error> {
        let mut c = v4l2_control { id, value: 0 };
        // SAFETY: `c` is a valid, owned v4l2_control.
        unsafe { ioctl::g_ctrl(self.raw(), &mut c) }.map_err(ioctl_err("G_CTRL"))?;
        Ok(c.value)
    }

    /// `VIDIOC_S_CTRL`.
    pub fn set_control(&self, id: u32, value: i32) -> Result<(), V4l2Error> {
        let mut c = v4l2_control { id, value };
        // SAFETY: as for G_CTRL.
        unsafe { ioctl::s_ctrl(self.raw(), &mut c) }.map_err(ioctl_err("S_CTRL"))?;
        Ok(())
    }

    /// Waits up to `timeout_ms` for a frame (POLLIN/POLLOUT) or an event (POLLPRI).
    pub fn wait(&self, timeout_ms: i32) -> Result<(bool, bool), V4l2Error> {
        let r = self.readiness(timeout_ms)?;
        Ok((r.frame, r.event))
    }

    /// Like [`V4l2Device::wait`], and says whether the queue reported an error (POLLERR:
    /// a streaming queue the driver gave up on, e.g. after `vb2_queue_error`; it stays
    /// set, so polling again returns at once).
    pub fn readiness(&self, timeout_ms: i32) -> Result<Readiness, V4l2Error> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN | PollFlags::POLLOUT | PollFlags::POLLPRI)];
        let timeout = PollTimeout::try_from(timeout_ms.max(0)).unwrap_or(PollTimeout::NONE);
        match poll(&mut fds, timeout) {
            Ok(0) | Err(Errno::EINTR) => Ok(Readiness::default()),
            Ok(_) => {
                let r = fds[0].revents().unwrap_or(PollFlags::empty());
                Ok(Readiness {
                    frame: r.intersects(PollFlags::POLLIN | PollFlags::POLLOUT),
                    event: r.contains(PollFlags::POLLPRI),
                    error: r.intersects(PollFlags::POLLERR | PollFlags::POLLHUP),
                })
            }
            Err(e) => Err(ioctl_err("poll")(e)),
        }
    }
}

/// What [`V4l2Device::readiness`] found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Readiness {
    /// A buffer can be dequeued.
    pub frame: bool,
    /// An event is pending.
    pub event: bool,
    /// The queue reported an error (or the device hung up).
    pub error: bool,
}

impl std::os::fd::AsFd for V4l2Device {
    /// The node's fd, borrowed (for `poll` on a driver-specific mix of events).
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.fd)
    }
}

impl std::os::fd::AsRawFd for V4l2Device {
    /// The node's fd, for driver-specific ioctls this layer does not wrap (e.g. a UVC
    /// gadget's `UVCIOC_SEND_RESPONSE`). The device keeps owning it.
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

/// The mapped planes of one driver buffer.
#[derive(Debug)]
pub struct BufferPlanes {
    planes: Vec<MappedBuffer>,
}

impl BufferPlanes {
    /// The planes, in order (never empty).
    pub fn planes(&self) -> &[MappedBuffer] {
        &self.planes
    }

    /// The first (for contiguous formats, the only) plane, writable.
    pub fn first_mut(&mut self) -> &mut MappedBuffer {
        // Never empty: `map_buffer` refuses a buffer without planes.
        &mut self.planes[0]
    }

    /// Capacity of the first plane.
    pub fn len(&self) -> usize {
        self.planes[0].len()
    }

    /// Whether the first plane is empty (never, by construction).
    pub fn is_empty(&self) -> bool {
        self.planes[0].is_empty()
    }

    /// A dequeued buffer's payload, planes in order: borrowed when it sits in one plane,
    /// copied together otherwise (e.g. NV12M's separate luma and chroma planes). Ranges are
    /// clamped to the mappings (a driver's word is not trusted with memory).
    pub fn data(&self, payload: &Payload) -> std::borrow::Cow<'_, [u8]> {
        let planes: Vec<&[u8]> = self.planes.iter().map(MappedBuffer::as_slice).collect();
        payload.gather(&planes)
    }
}

/// One mmap'ed driver buffer; unmapped on drop.
#[derive(Debug)]
pub struct MappedBuffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; nothing ties it to the
// creating thread.
unsafe impl Send for MappedBuffer {}

impl MappedBuffer {
    fn map(fd: &OwnedFd, offset: u32, len: usize) -> Result<MappedBuffer, V4l2Error> {
        if len == 0 {
            return Err(V4l2Error::Invalid("zero-length buffer".into()));
        }
        // SAFETY: a fresh shared mapping of `len` bytes of the device at the offset QUERYBUF
        // returned; the kernel validates offset and length and we check the result.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                libc::off_t::from(offset),
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(V4l2Error::Mmap(Errno::last()));
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or(V4l2Error::Mmap(Errno::EFAULT))?;
        Ok(MappedBuffer { ptr, len })
    }

    /// The buffer's bytes (slice by the dequeued `bytes_used`, not the whole length).
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The buffer's bytes, writable (output queues).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` maps `len` writable bytes, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Length of the mapping.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never, by construction).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for MappedBuffer {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the region `map` created; no slices outlive `self`.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast::<c_void>(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_survive_the_timeval_round_trip() {
        for ns in [0u64, 1000, 999_999_000, 1_000_000_000, 123_456_789_000, 4_000_000_000_000] {
            assert_eq!(timeval_ns(ns_timeval(ns)), ns, "{ns}");
        }
        // Sub-µs parts are lost, as in the kernel's timeval.
        assert_eq!(timeval_ns(ns_timeval(1999)), 1000);
        assert_eq!(timeval_ns(timeval { tv_sec: -1, tv_usec: -5 }), 0);
    }

    #[test]
    fn ext_controls_carry_values_and_borrowed_structs() {
        let v = ExtControl::value(0x00a4_0900, -1);
        assert_eq!(v.id(), 0x00a4_0900);
        assert_eq!(u32::try_from({ v.raw.value_or_ptr } & 0xffff_ffff).unwrap().cast_signed(), -1);
        assert_eq!({ v.raw.size }, 0);
        let pps = v4l2_ctrl_h264_pps { pic_init_qp_minus26: -3, ..Default::default() };
        let c = ExtControl::compound(0x00a4_0903, &pps);
        assert_eq!({ c.raw.size } as usize, std::mem::size_of::<v4l2_ctrl_h264_pps>());
        assert_eq!({ c.raw.value_or_ptr }, &pps as *const _ as u64);
    }

    #[test]
    fn ext_control_calls_on_a_non_v4l2_fd_fail_cleanly() {
        let dev = V4l2Device { fd: std::fs::File::open("/dev/null").unwrap().into(), path: "/dev/null".into() };
        let pps = v4l2_ctrl_h264_pps::default();
        let err = dev.set_ext_controls(None, &[ExtControl::compound(0x00a4_0903, &pps)]).unwrap_err();
        assert!(matches!(err, V4l2Error::Ioctl { name: "S_EXT_CTRLS", .. }), "{err}");
        assert!(dev.query_ext_control(0x00a4_0900).is_err());
    }

    #[test]
    fn fourcc_codes() {
        assert_eq!(FourCc::YUYV.0, 0x5659_5559);
        assert_eq!(FourCc::NV12.to_string(), "NV12");
        assert_eq!(format!("{:?}", FourCc(0x0000_0041)), "A???");
    }

    #[test]
    fn payload_ranges_are_clamped_and_sizes_saturate() {
        // Plane 1's header claims more than it used: empty. Plane 2 is past its mapping: cut.
        let p = Payload::from_planes(&[(4, 10), (20, 8), (0, 100)]);
        assert_eq!(p.ranges(), &[(4, 10), (8, 8), (0, 100)]);
        assert_eq!(p.bytes_used(), 6 + 100);
        let mem = [1u8; 16];
        assert_eq!(p.gather(&[&mem, &mem, &mem[..5]]).len(), 6 + 5);
        assert_eq!(p.gather(&[&mem]).len(), 6, "missing planes give nothing");
        assert_eq!(Payload::from_planes(&[]).ranges(), &[(0, 0)]);
        assert_eq!(Payload::from_planes(&[(0, 1); 12]).ranges().len(), VIDEO_MAX_PLANES);
        // Two planes near 4 GiB: the sum used to overflow u32 (a panic with overflow checks,
        // a wrong size in release).
        assert_eq!(Payload::from_planes(&[(0, 3_000_000_000), (0, 3_000_000_000)]).bytes_used(), u32::MAX);
    }

    #[test]
    fn opening_a_missing_node_is_a_typed_error() {
        let err = V4l2Device::open(Path::new("/dev/video-does-not-exist")).unwrap_err();
        assert!(matches!(err, V4l2Error::Open { .. }));
    }

    #[test]
    fn ioctls_on_a_non_v4l2_fd_fail_cleanly() {
        // /dev/null accepts the open but no V4L2 ioctl: each must map to an error, not UB.
        let dev = V4l2Device::open(Path::new("/dev/null")).unwrap();
        assert!(matches!(dev.querycap(), Err(V4l2Error::Ioctl { name: "QUERYCAP", .. })));
        assert!(dev.format(BufType::VideoCapture).is_err());
        assert!(dev.query_dv_timings().is_err());
        assert!(dev.next_event().is_err());
    }

    fn mapped(bytes: &[u8]) -> MappedBuffer {
        use std::io::Write;
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        MappedBuffer::map(&OwnedFd::from(f), 0, bytes.len()).unwrap()
    }

    #[test]
    fn payload_skips_data_offsets_and_joins_planes() {
        let luma: Vec<u8> = (0..16).collect();
        let chroma: Vec<u8> = (100..108).collect();
        let planes = BufferPlanes { planes: vec![mapped(&luma), mapped(&chroma)] };
        // One plane with a 4-byte header before the picture (vivid's data_offset).
        let mut one = Payload::single(12);
        one.ranges[0] = (4, 12);
        assert_eq!(&*planes.data(&one), &luma[4..12]);
        assert!(matches!(planes.data(&one), std::borrow::Cow::Borrowed(_)));
        // Two planes: luma then chroma, each from its own mapping.
        let two = Payload { ranges: [(0, 16), (0, 8), (0, 0), (0, 0), (0, 0), (0, 0), (0, 0), (0, 0)], planes: 2 };
        let joined = planes.data(&two);
        assert_eq!(&joined[..16], &luma[..]);
        assert_eq!(&joined[16..], &chroma[..]);
        // A driver claiming more than the mapping holds is clamped, never read past.
        let lying = Payload { ranges: [(8, 999), (50, 60), (0, 0), (0, 0), (0, 0), (0, 0), (0, 0), (0, 0)], planes: 2 };
        assert_eq!(&*planes.data(&lying), &luma[8..]);
    }

    #[test]
    fn queue_types_follow_the_capabilities() {
        assert_eq!(BufType::capture_for(CAP_VIDEO_CAPTURE), Some(BufType::VideoCapture));
        assert_eq!(BufType::capture_for(CAP_VIDEO_CAPTURE_MPLANE), Some(BufType::VideoCaptureMplane));
        assert_eq!(BufType::output_for(CAP_VIDEO_M2M_MPLANE), Some(BufType::VideoOutputMplane));
        assert_eq!(BufType::output_for(CAP_VIDEO_M2M), Some(BufType::VideoOutput));
        assert_eq!(BufType::capture_for(CAP_VIDEO_OUTPUT), None);
        assert!(BufType::VideoOutputMplane.is_multiplanar() && !BufType::VideoCapture.is_multiplanar());
    }

    #[test]
    fn dv_timings_fps() {
        let mut raw = v4l2_dv_timings::default();
        raw.bt.width = 1920;
        raw.bt.height = 1080;
        raw.bt.pixelclock = 148_500_000;
        raw.bt.hfrontporch = 88;
        raw.bt.hsync = 44;
        raw.bt.hbackporch = 148;
        raw.bt.vfrontporch = 4;
        raw.bt.vsync = 5;
        raw.bt.vbackporch = 36;
        let t = DvTimings::from_raw(raw);
        assert_eq!((t.total_width, t.total_height), (2200, 1125));
        assert_eq!(t.fps_milli(), 60_000);
    }
}
