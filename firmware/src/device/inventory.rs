//! What hardware this machine has, for `tether doctor`: USB device controllers, HID gadget
//! nodes, V4L2 nodes (capture and codecs). Reads sysfs and /dev only; never opens a device.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// One USB device controller (`/sys/class/udc/<name>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Udc {
    /// Controller name, e.g. `fe980000.usb` or `dummy_udc.0`.
    pub name: String,
    /// The controller's `state` attribute (e.g. `not attached`, `configured`).
    pub state: Option<String>,
    /// Whether this is the kernel's software test controller (never right on a board).
    pub is_dummy: bool,
}

/// One V4L2 node (`/sys/class/video4linux/videoN`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VideoNode {
    /// Device node, e.g. `/dev/video0`.
    pub path: PathBuf,
    /// Driver-provided card name (`name` attribute).
    pub name: String,
    /// Our guess at its role from the name: `codec` for known M2M codecs, else `capture`.
    pub role: &'static str,
}

/// Everything `doctor` reports about hardware.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Inventory {
    /// USB device controllers.
    pub udcs: Vec<Udc>,
    /// Whether configfs USB gadget support is mounted.
    pub configfs_gadget: bool,
    /// `/dev/hidgN` nodes present.
    pub hidg_nodes: Vec<PathBuf>,
    /// V4L2 nodes.
    pub video_nodes: Vec<VideoNode>,
    /// The TC358743 HDMI-to-CSI bridge.
    pub csi: CsiBridge,
}

/// The TC358743 bridge as the kernel sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CsiBridge {
    /// The `tc358743` module is loaded.
    pub driver_loaded: bool,
    /// The Unicam receiver's module is loaded.
    pub receiver_loaded: bool,
    /// I2C devices the driver bound (`<bus>-<address>`, e.g. `10-000f`): the bridge answered.
    pub bound: Vec<String>,
}

impl CsiBridge {
    /// One line for a person: whether the bridge is there and what to check if not.
    pub fn statement(&self) -> String {
        match (self.bound.first(), self.driver_loaded) {
            (Some(dev), _) => format!("CSI bridge detected (tc358743 on I2C {dev})"),
            (None, true) => "CSI bridge not detected: tc358743 is loaded but no bridge answered on I2C \
                 (check the ribbon cable and that config.txt has dtoverlay=tether-tc358743)"
                .into(),
            (None, false) => "CSI bridge not detected: the tc358743 module is not loaded \
                 (no bridge in the device tree: is dtoverlay=tether-tc358743 in config.txt?)"
                .into(),
        }
    }
}

/// Card names of V4L2 memory-to-memory codecs we know.
const CODEC_NAMES: &[&str] = &["bcm2835-codec", "vicodec", "rkvdec", "hantro", "rkvenc", "vim2m"];

impl Inventory {
    /// Reads the inventory of the running machine.
    pub fn probe() -> Inventory {
        Inventory::probe_at(Path::new("/"))
    }

    /// Reads the inventory under `root` (a fake tree in tests).
    pub fn probe_at(root: &Path) -> Inventory {
        let mut udcs: Vec<Udc> = list_dir(&root.join("sys/class/udc"))
            .into_iter()
            .map(|(name, path)| Udc {
                state: fs::read_to_string(path.join("state")).ok().map(|s| s.trim().to_string()),
                is_dummy: name.starts_with("dummy_udc"),
                name,
            })
            .collect();
        udcs.sort_by(|a, b| a.name.cmp(&b.name));
        let mut hidg_nodes: Vec<PathBuf> = list_dir(&root.join("dev"))
            .into_iter()
            .filter(|(name, _)| name.starts_with("hidg"))
            .map(|(_, path)| path)
            .collect();
        hidg_nodes.sort();
        let mut video_nodes: Vec<VideoNode> = list_dir(&root.join("sys/class/video4linux"))
            .into_iter()
            .filter(|(name, _)| name.starts_with("video"))
            .map(|(node, path)| {
                let name = fs::read_to_string(path.join("name")).map(|s| s.trim().to_string()).unwrap_or_default();
                let role = if CODEC_NAMES.iter().any(|c| name.contains(c)) { "codec" } else { "capture" };
                VideoNode { path: root.join("dev").join(node), name, role }
            })
            .collect();
        video_nodes.sort_by(|a, b| a.path.cmp(&b.path));
        let mut bound: Vec<String> = list_dir(&root.join("sys/bus/i2c/drivers/tc358743"))
            .into_iter()
            .map(|(name, _)| name)
            .filter(|n| n.split_once('-').is_some_and(|(bus, addr)| bus.parse::<u32>().is_ok() && addr.len() == 4))
            .collect();
        bound.sort();
        let csi = CsiBridge {
            driver_loaded: root.join("sys/module/tc358743").is_dir(),
            receiver_loaded: root.join("sys/module/bcm2835_unicam").is_dir(),
            bound,
        };
        Inventory {
            udcs,
            configfs_gadget: root.join("sys/kernel/config/usb_gadget").is_dir(),
            hidg_nodes,
            video_nodes,
            csi,
        }
    }
}

fn list_dir(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries.flatten().filter_map(|e| e.file_name().into_string().ok().map(|n| (n, e.path()))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_csi_bridge_is_detected_only_when_the_driver_bound_one() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        let none = Inventory::probe_at(r).csi;
        assert!(!none.driver_loaded && none.bound.is_empty());
        assert!(none.statement().starts_with("CSI bridge not detected: the tc358743 module is not loaded"));
        fs::create_dir_all(r.join("sys/module/tc358743")).unwrap();
        fs::create_dir_all(r.join("sys/bus/i2c/drivers/tc358743")).unwrap();
        // The driver directory holds bind/unbind/uevent files besides devices.
        fs::write(r.join("sys/bus/i2c/drivers/tc358743/bind"), "").unwrap();
        let loaded = Inventory::probe_at(r).csi;
        assert!(loaded.driver_loaded && loaded.bound.is_empty());
        assert!(loaded.statement().contains("no bridge answered"), "{}", loaded.statement());
        fs::create_dir_all(r.join("sys/bus/i2c/drivers/tc358743/10-000f")).unwrap();
        let found = Inventory::probe_at(r).csi;
        assert_eq!(found.bound, vec!["10-000f".to_string()]);
        assert_eq!(found.statement(), "CSI bridge detected (tc358743 on I2C 10-000f)");
    }

    #[test]
    fn reads_a_fake_sysfs() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        for (dir, file, content) in [
            ("sys/class/udc/fe980000.usb", "state", "configured\n"),
            ("sys/class/udc/dummy_udc.0", "state", "not attached\n"),
            ("sys/class/video4linux/video0", "name", "unicam-image\n"),
            ("sys/class/video4linux/video10", "name", "bcm2835-codec-decode\n"),
        ] {
            fs::create_dir_all(r.join(dir)).unwrap();
            fs::write(r.join(dir).join(file), content).unwrap();
        }
        fs::create_dir_all(r.join("dev")).unwrap();
        fs::write(r.join("dev/hidg0"), "").unwrap();
        let inv = Inventory::probe_at(r);
        assert_eq!(inv.udcs.len(), 2);
        assert_eq!(inv.udcs[0].name, "dummy_udc.0");
        assert!(inv.udcs[0].is_dummy);
        assert_eq!(inv.udcs[1].state.as_deref(), Some("configured"));
        assert_eq!(inv.hidg_nodes, vec![r.join("dev/hidg0")]);
        assert_eq!(inv.video_nodes[0].role, "capture");
        assert_eq!(inv.video_nodes[1].role, "codec");
        assert!(!inv.configfs_gadget);
    }
}
