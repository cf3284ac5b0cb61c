//! V4L2 subdevice nodes (`/dev/v4l-subdevN`): pad formats on the media bus and the codes a
//! pad offers. A subdevice also answers the DV-timings, EDID, event and control ioctls with
//! the video node's numbers and structs, so those are [`V4l2Device`]'s, reached through
//! [`Subdev::device`].

use std::path::Path;

use nix::errno::Errno;

use super::ioctl;
use super::raw::*;
use super::{V4l2Device, V4l2Error};

/// A pad's format on the media bus (`v4l2_mbus_framefmt`, the fields we negotiate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MbusFormat {
    /// `MEDIA_BUS_FMT_*`, see [`mbus_code_name`].
    pub code: u32,
    /// Width in pixels.
    pub width: u32,
    /// Height in lines.
    pub height: u32,
    /// `V4L2_FIELD_*` (1 = progressive).
    pub field: u32,
}

impl std::fmt::Display for MbusFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}x{}", mbus_code_name(self.code), self.width, self.height)
    }
}

/// Media bus codes by name, the ones capture pipelines carry.
pub mod mbus {
    /// `MEDIA_BUS_FMT_RGB888_1X24`.
    pub const RGB888_1X24: u32 = 0x100a;
    /// `MEDIA_BUS_FMT_BGR888_1X24`.
    pub const BGR888_1X24: u32 = 0x1013;
    /// `MEDIA_BUS_FMT_UYVY8_2X8`.
    pub const UYVY8_2X8: u32 = 0x2006;
    /// `MEDIA_BUS_FMT_YUYV8_2X8`.
    pub const YUYV8_2X8: u32 = 0x2008;
    /// `MEDIA_BUS_FMT_UYVY8_1X16` (TC358743's YUV 4:2:2 on CSI-2).
    pub const UYVY8_1X16: u32 = 0x200f;
    /// `MEDIA_BUS_FMT_YUYV8_1X16`.
    pub const YUYV8_1X16: u32 = 0x2011;
    /// `MEDIA_BUS_FMT_SBGGR8_1X8`.
    pub const SBGGR8_1X8: u32 = 0x3001;
    /// `MEDIA_BUS_FMT_SGRBG8_1X8`.
    pub const SGRBG8_1X8: u32 = 0x3002;
    /// `MEDIA_BUS_FMT_SGBRG8_1X8`.
    pub const SGBRG8_1X8: u32 = 0x3013;
    /// `MEDIA_BUS_FMT_SRGGB8_1X8`.
    pub const SRGGB8_1X8: u32 = 0x3014;
}

/// A readable name for a media bus code (`0x...` for ones we do not name).
pub fn mbus_code_name(code: u32) -> String {
    let name = match code {
        mbus::RGB888_1X24 => "RGB888_1X24",
        mbus::BGR888_1X24 => "BGR888_1X24",
        mbus::UYVY8_2X8 => "UYVY8_2X8",
        mbus::YUYV8_2X8 => "YUYV8_2X8",
        mbus::UYVY8_1X16 => "UYVY8_1X16",
        mbus::YUYV8_1X16 => "YUYV8_1X16",
        mbus::SBGGR8_1X8 => "SBGGR8_1X8",
        mbus::SGRBG8_1X8 => "SGRBG8_1X8",
        mbus::SGBRG8_1X8 => "SGBRG8_1X8",
        mbus::SRGGB8_1X8 => "SRGGB8_1X8",
        other => return format!("0x{other:04x}"),
    };
    name.to_string()
}

/// An open subdevice node.
#[derive(Debug)]
pub struct Subdev {
    dev: V4l2Device,
}

impl Subdev {
    /// Opens `path` read-write (subdevice nodes are read-only unless the driver allows
    /// configuration from userspace, which media-controller pipelines do).
    pub fn open(path: &Path) -> Result<Subdev, V4l2Error> {
        Ok(Subdev { dev: V4l2Device::open(path)? })
    }

    /// The node as a V4L2 device: DV timings, EDID, events and controls.
    pub fn device(&self) -> &V4l2Device {
        &self.dev
    }

    /// `VIDIOC_SUBDEV_G_FMT` of `pad` (the active format).
    pub fn format(&self, pad: u32) -> Result<MbusFormat, V4l2Error> {
        let mut f = v4l2_subdev_format { which: SUBDEV_FORMAT_ACTIVE, pad, ..Default::default() };
        // SAFETY: `f` is a valid, owned v4l2_subdev_format, the size the request encodes.
        unsafe { ioctl::subdev_g_fmt(self.dev.raw(), &mut f) }
            .map_err(|source| V4l2Error::Ioctl { name: "SUBDEV_G_FMT", source })?;
        Ok(from_raw(&f.format))
    }

    /// `VIDIOC_SUBDEV_S_FMT` of `pad`; returns what the driver made of it (it adjusts sizes
    /// and may keep its own code).
    pub fn set_format(&self, pad: u32, want: &MbusFormat) -> Result<MbusFormat, V4l2Error> {
        let mut f = v4l2_subdev_format { which: SUBDEV_FORMAT_ACTIVE, pad, ..Default::default() };
        f.format.code = want.code;
        f.format.width = want.width;
        f.format.height = want.height;
        f.format.field = want.field;
        // SAFETY: as for G_FMT.
        unsafe { ioctl::subdev_s_fmt(self.dev.raw(), &mut f) }
            .map_err(|source| V4l2Error::Ioctl { name: "SUBDEV_S_FMT", source })?;
        Ok(from_raw(&f.format))
    }

    /// `VIDIOC_SUBDEV_ENUM_MBUS_CODE` of `pad`: every code it offers, in the driver's order.
    pub fn mbus_codes(&self, pad: u32) -> Result<Vec<u32>, V4l2Error> {
        let mut out = Vec::new();
        // Bounded: a driver that never says "past the end" must not hang the daemon.
        for index in 0..256 {
            let mut e = v4l2_subdev_mbus_code_enum { pad, index, which: SUBDEV_FORMAT_ACTIVE, ..Default::default() };
            // SAFETY: `e` is a valid, owned v4l2_subdev_mbus_code_enum.
            match unsafe { ioctl::subdev_enum_mbus_code(self.dev.raw(), &mut e) } {
                Ok(_) => out.push(e.code),
                Err(Errno::EINVAL) => break, // past the last one
                Err(source) => return Err(V4l2Error::Ioctl { name: "SUBDEV_ENUM_MBUS_CODE", source }),
            }
        }
        Ok(out)
    }
}

fn from_raw(f: &v4l2_mbus_framefmt) -> MbusFormat {
    MbusFormat { code: f.code, width: f.width, height: f.height, field: f.field }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_have_names_and_unknown_ones_show_their_number() {
        assert_eq!(mbus_code_name(mbus::UYVY8_1X16), "UYVY8_1X16");
        assert_eq!(mbus_code_name(0x5001), "0x5001");
        let f = MbusFormat { code: mbus::RGB888_1X24, width: 1280, height: 720, field: 1 };
        assert_eq!(f.to_string(), "RGB888_1X24 1280x720");
    }

    #[test]
    fn subdev_ioctls_on_a_non_v4l2_fd_fail_cleanly() {
        // /dev/null opens but answers no ioctl: each call must be an error, never data
        // (the unsafe calls' failure paths).
        let s = Subdev::open(Path::new("/dev/null")).unwrap();
        assert!(matches!(s.format(0), Err(V4l2Error::Ioctl { name: "SUBDEV_G_FMT", .. })));
        let want = MbusFormat { code: mbus::UYVY8_1X16, width: 1920, height: 1080, field: 1 };
        assert!(matches!(s.set_format(0, &want), Err(V4l2Error::Ioctl { name: "SUBDEV_S_FMT", .. })));
        assert!(s.mbus_codes(0).is_err(), "ENOTTY is an error, not an empty list");
        assert!(s.device().frame_interval(super::super::BufType::VideoCapture).is_err());
        assert!(s.device().frame_sizes(super::super::FourCc::MJPEG).is_err());
    }
}
