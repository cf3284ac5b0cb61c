//! The EDID an HDMI receiver of ours shows the phone, and loading it into a CSI bridge.
//!
//! An HDMI source picks its output mode from the sink's EDID; a bridge like the TC358743
//! has none until software writes one, so without it the phone sends nothing. Ours offers
//! 1080p60 as the preferred mode (what an iPhone's HDMI adapter sends best), then 1080p50,
//! 720p60/50 and 480p, as an HDMI sink (the CEA-861 extension's HDMI vendor block): without
//! that block a source falls back to DVI. No audio: we do not capture it.

use std::path::{Path, PathBuf};

use super::v4l2::{V4l2Device, V4l2Error};

/// EDID bytes: a base block and one CEA-861 extension (256 bytes).
pub fn edid_1080p60() -> Vec<u8> {
    let mut base = [0u8; 128];
    base[..8].copy_from_slice(&[0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00]);
    // Manufacturer "TTR" (three 5-bit letters, A = 1), product 1, no serial, made 2026.
    base[8..10].copy_from_slice(&0x5292u16.to_be_bytes());
    base[10] = 0x01;
    base[17] = 36; // 2026 - 1990
    base[18..20].copy_from_slice(&[1, 3]); // EDID 1.3
    base[20] = 0x80; // digital input
    base[23] = 0x78; // gamma 2.2
    base[24] = 0x0e; // RGB colour, sRGB; the first detailed timing is preferred
    base[25..35].copy_from_slice(&[0xee, 0x91, 0xa3, 0x54, 0x4c, 0x99, 0x26, 0x0f, 0x50, 0x54]); // sRGB
    base[35..38].copy_from_slice(&[0x21, 0x08, 0x00]); // 640x480, 800x600, 1024x768 @60
                                                       // Standard timings: 1920x1080 and 1280x720 at 60 Hz (16:9), the rest unused.
    base[38..54].copy_from_slice(&[0xd1, 0xc0, 0x81, 0xc0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]);
    // Detailed timing 1: CEA 1080p60, 148.5 MHz, positive syncs.
    base[54..72].copy_from_slice(&[
        0x02, 0x3a, 0x80, 0x18, 0x71, 0x38, 0x2d, 0x40, 0x58, 0x2c, 0x45, 0x00, 0, 0, 0, 0, 0, 0x1e,
    ]);
    // Range limits: 50–75 Hz, 30–83 kHz, up to 150 MHz.
    base[72..90]
        .copy_from_slice(&[0, 0, 0, 0xfd, 0, 50, 75, 30, 83, 15, 0x00, 0x0a, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20]);
    // Monitor name.
    base[90..95].copy_from_slice(&[0, 0, 0, 0xfc, 0]);
    base[95..108].copy_from_slice(b"tether\n      ");
    base[108..113].copy_from_slice(&[0, 0, 0, 0x10, 0]); // dummy descriptor
    base[126] = 1; // one extension
    base[127] = checksum(&base[..127]);

    let mut cea = [0u8; 128];
    // VIC 16 1080p60 (native through the base block's preferred timing), 1080p50, 720p60,
    // 720p50, 480p, VGA.
    let video = [16, 31, 4, 19, 3, 1];
    let hdmi = [0x03, 0x0c, 0x00, 0x10, 0x00]; // OUI 00-0C-03, physical address 1.0.0.0
                                               // Video capability (extended tag 0): RGB quantization range selectable (a source sends
                                               // full range when asked rather than guessing); IT and CE formats underscanned.
    let capability = [0x00, 0x4a];
    cea[0] = 0x02;
    cea[1] = 0x03;
    cea[3] = 0x81; // underscanned IT formats; one native detailed mode (the base block's)
    let mut at = 4;
    for (tag, payload) in [(2u8, &video[..]), (3u8, &hdmi[..]), (7u8, &capability[..])] {
        // Data block header: tag in the top 3 bits, length in the low 5 (both fit).
        cea[at] = (tag << 5) | u8::try_from(payload.len()).unwrap_or(0);
        cea[at + 1..at + 1 + payload.len()].copy_from_slice(payload);
        at += 1 + payload.len();
    }
    cea[2] = u8::try_from(at).unwrap_or(0); // where detailed timings would start: none follow
    cea[127] = checksum(&cea[..127]);
    [base, cea].concat()
}

/// The byte that makes a 128-byte block sum to 0 mod 256.
fn checksum(bytes: &[u8]) -> u8 {
    0u8.wrapping_sub(bytes.iter().fold(0u8, |a, b| a.wrapping_add(*b)))
}

/// The V4L2 subdevice node of a bound TC358743 (`/dev/v4l-subdevN`), looked up under
/// `root` (`/` on a board, a fake tree in tests): the bridge's I2C device in the driver's
/// sysfs directory, and the subdevice registered under it.
pub fn bridge_subdev(root: &Path) -> Option<PathBuf> {
    let driver = root.join("sys/bus/i2c/drivers/tc358743");
    let mut devices: Vec<PathBuf> = std::fs::read_dir(&driver)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains('-'))
        .map(|e| e.path())
        .collect();
    devices.sort();
    devices.into_iter().find_map(|dev| {
        let nodes = std::fs::read_dir(dev.join("video4linux")).ok()?;
        let mut names: Vec<String> = nodes
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("v4l-subdev"))
            .collect();
        names.sort();
        names.first().map(|n| root.join("dev").join(n))
    })
}

/// Writes `edid` to pad 0 of the HDMI receiver `node` (`VIDIOC_SUBDEV_S_EDID` is the same
/// request as `VIDIOC_S_EDID`) and reads it back.
pub fn load_edid(node: &Path, edid: &[u8]) -> Result<(), V4l2Error> {
    let dev = V4l2Device::open(node)?;
    dev.set_edid(0, edid)?;
    let blocks = u32::try_from(edid.len() / 128).unwrap_or(0);
    let back = dev.edid(0, blocks)?;
    if back != edid {
        return Err(V4l2Error::Invalid(format!("{} read back a different EDID", node.display())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_edid_is_two_valid_blocks_preferring_1080p60_as_an_hdmi_sink() {
        let e = edid_1080p60();
        assert_eq!(e.len(), 256);
        assert_eq!(&e[..8], &[0, 255, 255, 255, 255, 255, 255, 0]);
        for block in e.chunks(128) {
            assert_eq!(block.iter().fold(0u8, |a, b| a.wrapping_add(*b)), 0, "checksum");
        }
        // Manufacturer letters decode to TTR.
        let m = u16::from_be_bytes([e[8], e[9]]);
        let letter = |shift: u16| char::from(b'A' - 1 + u8::try_from((m >> shift) & 0x1f).unwrap());
        assert_eq!([letter(10), letter(5), letter(0)], ['T', 'T', 'R']);
        // The preferred timing: 148.5 MHz, 1920 + 280 by 1080 + 45.
        let d = &e[54..72];
        assert_eq!(u16::from_le_bytes([d[0], d[1]]), 14850);
        let hactive = u16::from(d[2]) | (u16::from(d[4] >> 4) << 8);
        let hblank = u16::from(d[3]) | (u16::from(d[4] & 0xf) << 8);
        let vactive = u16::from(d[5]) | (u16::from(d[7] >> 4) << 8);
        let vblank = u16::from(d[6]) | (u16::from(d[7] & 0xf) << 8);
        assert_eq!((hactive, hblank, vactive, vblank), (1920, 280, 1080, 45));
        // 148.5 MHz / (2200 x 1125) = 60 Hz.
        assert_eq!(148_500_000 / (2200 * 1125), 60);
        // The extension: CEA-861 rev 3 with VIC 16 native first, then the HDMI vendor block.
        let c = &e[128..];
        assert_eq!((c[0], c[1]), (2, 3));
        assert_eq!(c[4] >> 5, 2, "video data block first");
        assert_eq!(c[5], 16, "1080p60 first");
        let vsdb = 4 + 1 + usize::from(c[4] & 0x1f);
        assert_eq!((c[vsdb] >> 5, &c[vsdb + 1..vsdb + 4]), (3, &[0x03, 0x0c, 0x00][..]));
        let vcdb = vsdb + 1 + usize::from(c[vsdb] & 0x1f);
        assert_eq!((c[vcdb], c[vcdb + 1], c[vcdb + 2]), (0xe2, 0x00, 0x4a), "video capability block");
        assert_eq!(usize::from(c[2]), vcdb + 3);
    }

    /// Debian's `edid-decode --check` (the kernel media maintainers' conformance checker)
    /// passes it without a warning. Required when the suite runs from tests/run (which
    /// installs it), reported otherwise.
    #[test]
    fn edid_decode_finds_it_conformant() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tether.edid");
        std::fs::write(&file, edid_1080p60()).unwrap();
        let out = match std::process::Command::new("edid-decode").arg("--check").arg(&file).output() {
            Ok(out) => out,
            Err(e) => {
                assert!(std::env::var_os("TETHER_REQUIRE_TOOLS").is_none(), "edid-decode is needed: {e}");
                eprintln!("NOTICE: EDID conformance not checked: apt-get install edid-decode");
                return;
            }
        };
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("EDID conformity: PASS"), "{text}");
        assert!(!text.contains("Warnings:"), "{text}");
        assert!(text.contains("1920x1080   60.000000 Hz"), "{text}");
    }

    #[test]
    fn the_bridge_subdev_is_found_under_its_i2c_device() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        assert_eq!(bridge_subdev(r), None, "no driver directory");
        let drv = r.join("sys/bus/i2c/drivers/tc358743");
        std::fs::create_dir_all(&drv).unwrap();
        std::fs::write(drv.join("bind"), "").unwrap();
        assert_eq!(bridge_subdev(r), None, "driver loaded, nothing bound");
        std::fs::create_dir_all(drv.join("10-000f/video4linux/v4l-subdev2")).unwrap();
        assert_eq!(bridge_subdev(r), Some(r.join("dev/v4l-subdev2")));
    }

    #[test]
    fn loading_into_a_missing_node_names_it() {
        let err = load_edid(Path::new("/nonexistent/v4l-subdev9"), &edid_1080p60()).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/v4l-subdev9"), "{err}");
    }
}
