//! The board the appliance runs on: `board/<name>/board.toml`, installed in the image as
//! `/etc/tether/board.toml`.
//!
//! One file feeds two readers: `flash.sh` takes the `[image]` section (packages, boot
//! loader, device tree) and the daemon takes the rest as its hardware defaults (the gadget's
//! UDC, the capture node) and, in `tether doctor`, as the statement of what works on this
//! board with the kernel the image ships. The config file still overrides every default.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Where the image installs the board file; read when no `--board` is given.
pub const INSTALLED_BOARD: &str = "/etc/tether/board.toml";

/// A board description.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Board {
    /// Short name, the folder's name (`rpi4`).
    pub name: String,
    /// What a person calls it (`Raspberry Pi 4 Model B`).
    pub description: String,
    /// Debian architecture of the image (`arm64`).
    pub arch: String,
    /// How `flash.sh` builds the image.
    pub image: BoardImage,
    /// The USB device controller the gadget binds to.
    pub usb: BoardUsb,
    /// Where the phone's picture comes from.
    pub capture: BoardCapture,
    /// Hardware codec nodes, if any.
    #[serde(default)]
    pub codec: BoardCodec,
    /// The TC358743 HDMI-to-CSI bridge, on boards whose camera connector takes one.
    #[serde(default)]
    pub csi: Option<BoardCsi>,
    /// What works with the kernel the image ships, as a person should read it.
    pub support: BoardSupport,
}

/// `[csi]`: the image builds `tc358743` and `bcm2835-unicam` for the board's kernel and
/// applies this overlay; `tether doctor` reports whether the bridge answered.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BoardCsi {
    /// `board/lib/overlays/<overlay>.dts`, installed as `overlays/tether-tc358743.dtbo`.
    pub overlay: String,
}

/// `[image]`: read by `flash.sh`, carried here so one parser checks every board file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BoardImage {
    /// Debian packages for the kernel, firmware and boot loader.
    pub packages: Vec<String>,
    /// `raspi-firmware` or `u-boot-rockchip`.
    pub boot: BootKind,
    /// The board's device tree, relative to the kernel's DTB directory.
    pub dtb: String,
    /// Lines appended to the Pi's `config.txt` (raspi-firmware only).
    #[serde(default)]
    pub config_txt: Vec<String>,
    /// u-boot build in Debian's `u-boot-rockchip` (`/usr/lib/u-boot/<target>/`).
    #[serde(default)]
    pub uboot_target: String,
    /// Serial console for the kernel command line (`ttyS2,1500000`).
    #[serde(default)]
    pub console: String,
}

/// How the board boots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BootKind {
    /// The Raspberry Pi's GPU firmware reads `config.txt` from the FAT partition.
    RaspiFirmware,
    /// Rockchip: idbloader and u-boot.itb before the first partition, then extlinux.
    UBootRockchip,
}

/// `[usb]`: the OTG port.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BoardUsb {
    /// The UDC name under `/sys/class/udc` (`fe980000.usb`).
    pub udc: String,
    /// What the shipped device tree sets: `peripheral`, `otg` or `host`.
    pub dr_mode: String,
    /// The node the image's device-tree change patches when `dr_mode` is `host`.
    #[serde(default)]
    pub dr_mode_node: String,
}

/// `[capture]`: the capture device.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BoardCapture {
    /// `uvc` (a USB HDMI dongle) or `none`.
    #[serde(rename = "type")]
    pub kind: CaptureKind,
    /// The V4L2 node.
    #[serde(default)]
    pub device: Option<PathBuf>,
}

/// Capture hardware kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CaptureKind {
    /// A UVC HDMI dongle on a host port.
    Uvc,
    /// No capture hardware this board can use.
    None,
}

/// `[codec]`: stateful V4L2 M2M codec nodes; empty means software.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BoardCodec {
    /// Decoder node (`""`: software).
    #[serde(default)]
    pub decoder: String,
    /// Encoder node (`""`: software).
    #[serde(default)]
    pub encoder: String,
}

/// `[support]`: one sentence per capability, starting `yes`, `no: why`, `after …: what`
/// or `untried: what` (built and proven in the lab, not yet on the board itself).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BoardSupport {
    /// The USB HID gadget.
    pub hid_gadget: String,
    /// Capture through a UVC dongle.
    pub uvc_capture: String,
    /// Capture through a TC358743 CSI bridge.
    pub csi_capture: String,
    /// Hardware H.264.
    pub hw_h264: String,
    /// Hardware JPEG decode.
    pub hw_jpeg: String,
}

impl BoardSupport {
    /// `(capability, statement)` in a fixed order, for reports.
    pub fn rows(&self) -> [(&'static str, &str); 5] {
        [
            ("HID gadget", &self.hid_gadget),
            ("UVC capture", &self.uvc_capture),
            ("CSI capture", &self.csi_capture),
            ("hardware H.264", &self.hw_h264),
            ("hardware JPEG", &self.hw_jpeg),
        ]
    }
}

/// Errors reading a board file.
#[derive(Debug, thiserror::Error)]
pub enum BoardError {
    /// The file could not be read.
    #[error("read board file {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid board description.
    #[error("board file {}: {message}", .path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's explanation, with line and column.
        message: String,
    },
}

impl Board {
    /// Reads and checks a board file.
    pub fn load(path: &Path) -> Result<Board, BoardError> {
        let text = std::fs::read_to_string(path).map_err(|source| BoardError::Read { path: path.into(), source })?;
        Board::parse(&text).map_err(|message| BoardError::Parse { path: path.into(), message })
    }

    /// Parses board TOML; the error names the field.
    pub fn parse(text: &str) -> Result<Board, String> {
        let board: Board = toml::from_str(text).map_err(|e| e.to_string())?;
        board.check()?;
        Ok(board)
    }

    /// The board file to read: `explicit`, else the installed one when it exists.
    pub fn find(explicit: Option<&Path>) -> Option<PathBuf> {
        match explicit {
            Some(p) => Some(p.to_path_buf()),
            None => Some(PathBuf::from(INSTALLED_BOARD)).filter(|p| p.exists()),
        }
    }

    fn check(&self) -> Result<(), String> {
        let valid_name = !self.name.is_empty()
            && self.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !valid_name {
            return Err(format!("name {:?}: use lowercase letters, digits and '-'", self.name));
        }
        if self.usb.udc.is_empty() {
            return Err("usb.udc is empty: name the controller as /sys/class/udc lists it".into());
        }
        if !["peripheral", "otg", "host"].contains(&self.usb.dr_mode.as_str()) {
            return Err(format!("usb.dr_mode {:?}: use peripheral, otg or host", self.usb.dr_mode));
        }
        if self.usb.dr_mode == "host" && !self.usb.dr_mode_node.starts_with('/') {
            return Err("usb.dr_mode is host: usb.dr_mode_node must name the node to patch (/soc/usb@...)".into());
        }
        if self.capture.kind == CaptureKind::Uvc && self.capture.device.is_none() {
            return Err("capture.type is uvc: capture.device must name the node".into());
        }
        if self.image.boot == BootKind::UBootRockchip && self.image.uboot_target.is_empty() {
            return Err("image.boot is u-boot-rockchip: image.uboot_target must name the u-boot build".into());
        }
        for (what, text) in self.support.rows() {
            if !["yes", "no: ", "after ", "untried: "].iter().any(|p| text.starts_with(p)) {
                return Err(format!(
                    "support for {what}: start with \"yes\", \"no: \", \"after \" or \"untried: \"; got {text:?}"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boards_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../board")
    }

    /// Every board the image builds must also be a board the daemon understands.
    #[test]
    fn every_board_in_the_tree_parses() {
        let mut seen = Vec::new();
        for entry in std::fs::read_dir(boards_dir()).unwrap() {
            let dir = entry.unwrap().path();
            let file = dir.join("board.toml");
            if !file.exists() {
                continue;
            }
            let board = Board::load(&file).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(board.name, dir.file_name().unwrap().to_string_lossy(), "name = the folder's name");
            assert!(dir.join("README.md").exists(), "{} has no README.md", dir.display());
            if board.usb.dr_mode == "host" {
                assert!(dir.join("dtb.sh").exists(), "{}: dr_mode host needs dtb.sh", board.name);
            }
            if let Some(csi) = &board.csi {
                let overlay = boards_dir().join("lib/overlays").join(format!("{}.dts", csi.overlay));
                assert!(overlay.exists(), "{}: no overlay {}", board.name, overlay.display());
                assert_eq!(board.image.boot, BootKind::RaspiFirmware, "{}: overlays go through config.txt", board.name);
            }
            seen.push(board.name);
        }
        seen.sort();
        for wanted in ["cm4", "rockpi4", "rpi4", "zero2w"] {
            assert!(seen.iter().any(|s| s == wanted), "board/{wanted} missing: {seen:?}");
        }
    }

    const MINIMAL: &str = r#"
name = "x1"
description = "X"
arch = "arm64"
[image]
packages = ["linux-image-arm64"]
boot = "raspi-firmware"
dtb = "a.dtb"
[usb]
udc = "fe980000.usb"
dr_mode = "peripheral"
[capture]
type = "uvc"
device = "/dev/video0"
[support]
hid_gadget = "yes"
uvc_capture = "yes"
csi_capture = "no: not in the kernel"
hw_h264 = "no: none"
hw_jpeg = "no: none"
"#;

    #[test]
    fn a_minimal_board_parses_and_bad_ones_name_the_field() {
        let b = Board::parse(MINIMAL).unwrap();
        assert_eq!(b.usb.udc, "fe980000.usb");
        assert_eq!(b.capture.kind, CaptureKind::Uvc);
        assert_eq!(b.codec, BoardCodec::default());
        let cases = [
            (MINIMAL.replace("dr_mode = \"peripheral\"", "dr_mode = \"host\""), "dr_mode_node"),
            (MINIMAL.replace("udc = \"fe980000.usb\"", "udc = \"\""), "usb.udc"),
            (MINIMAL.replace("device = \"/dev/video0\"", ""), "capture.device"),
            (MINIMAL.replace("\"no: none\"", "\"maybe\""), "support for"),
            (MINIMAL.replace("name = \"x1\"", "name = \"X 1\""), "name"),
            (MINIMAL.replace("boot = \"raspi-firmware\"", "boot = \"u-boot-rockchip\""), "uboot_target"),
            (MINIMAL.replace("arch = \"arm64\"", "arch = \"arm64\"\nsurprise = 1"), "surprise"),
        ];
        for (text, field) in cases {
            let err = Board::parse(&text).unwrap_err();
            assert!(err.contains(field), "{field}: {err}");
        }
    }
}
