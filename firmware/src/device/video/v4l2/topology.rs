//! A media device's graph as data (`MEDIA_IOC_G_TOPOLOGY`): entities, their pads, the data
//! links between pads and the device nodes (interfaces) that expose entities. Pure: read by
//! [`MediaDevice::topology`](super::MediaDevice::topology), walked by the capture pipeline,
//! built by hand in tests.

use std::path::{Path, PathBuf};

use super::raw::{
    MEDIA_INTF_T_V4L_SUBDEV, MEDIA_INTF_T_V4L_VIDEO, MEDIA_LNK_FL_ENABLED, MEDIA_LNK_FL_IMMUTABLE, MEDIA_PAD_FL_SINK,
    MEDIA_PAD_FL_SOURCE,
};

/// `MEDIA_ENT_F_IO_V4L`: a V4L2 video node's DMA engine.
pub const ENT_F_IO_V4L: u32 = 0x0001_0001;
/// `MEDIA_ENT_F_CAM_SENSOR`: a camera sensor.
pub const ENT_F_CAM_SENSOR: u32 = 0x0002_0001;
/// `MEDIA_ENT_F_VID_IF_BRIDGE`: a video interface bridge (HDMI→CSI-2, e.g. TC358743).
pub const ENT_F_VID_IF_BRIDGE: u32 = 0x0000_5002;

/// One entity (a subdevice, a video node's DMA engine, a connector...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entity {
    /// The graph's id for it.
    pub id: u32,
    /// Its name, e.g. `tc358743 10-000f`, `unicam-image`, `Sensor A`.
    pub name: String,
    /// `MEDIA_ENT_F_*`.
    pub function: u32,
}

/// One pad of an entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pad {
    /// The graph's id for it (links name pads by id).
    pub id: u32,
    /// The entity it belongs to.
    pub entity: u32,
    /// Its index within the entity (what subdevice ioctls name).
    pub index: u32,
    /// `MEDIA_PAD_FL_*`.
    pub flags: u32,
}

impl Pad {
    /// Data flows into the entity here.
    pub fn is_sink(&self) -> bool {
        self.flags & MEDIA_PAD_FL_SINK != 0
    }

    /// Data flows out of the entity here.
    pub fn is_source(&self) -> bool {
        self.flags & MEDIA_PAD_FL_SOURCE != 0
    }
}

/// A data link from a source pad to a sink pad.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// The graph's id for it.
    pub id: u32,
    /// The source pad's id.
    pub source: u32,
    /// The sink pad's id.
    pub sink: u32,
    /// `MEDIA_LNK_FL_*`.
    pub flags: u32,
}

impl Link {
    /// Data flows over it now.
    pub fn is_enabled(&self) -> bool {
        self.flags & MEDIA_LNK_FL_ENABLED != 0
    }

    /// Its state cannot be changed (fixed wiring).
    pub fn is_immutable(&self) -> bool {
        self.flags & MEDIA_LNK_FL_IMMUTABLE != 0
    }
}

/// A device node exposing an entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interface {
    /// The graph's id for it.
    pub id: u32,
    /// `MEDIA_INTF_T_*`.
    pub kind: u32,
    /// The node's (major, minor).
    pub devnode: (u32, u32),
    /// The entity it exposes (from the interface link), if any.
    pub entity: Option<u32>,
}

/// A media graph.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    /// Every entity.
    pub entities: Vec<Entity>,
    /// Every pad.
    pub pads: Vec<Pad>,
    /// Data links only (interface and ancillary links are not here).
    pub links: Vec<Link>,
    /// Device-node interfaces.
    pub interfaces: Vec<Interface>,
}

impl Topology {
    /// The entity with this id.
    pub fn entity(&self, id: u32) -> Option<&Entity> {
        self.entities.iter().find(|e| e.id == id)
    }

    /// The entity named `name`.
    pub fn entity_named(&self, name: &str) -> Option<&Entity> {
        self.entities.iter().find(|e| e.name == name)
    }

    /// The pad with this id.
    pub fn pad(&self, id: u32) -> Option<&Pad> {
        self.pads.iter().find(|p| p.id == id)
    }

    /// An entity's pads, by index.
    pub fn pads_of(&self, entity: u32) -> Vec<Pad> {
        let mut pads: Vec<Pad> = self.pads.iter().filter(|p| p.entity == entity).copied().collect();
        pads.sort_by_key(|p| p.index);
        pads
    }

    /// The data links into a sink pad, in the graph's order.
    pub fn links_into(&self, sink_pad: u32) -> Vec<Link> {
        self.links.iter().filter(|l| l.sink == sink_pad).copied().collect()
    }

    /// The entity behind the video node with this (major, minor).
    pub fn video_entity(&self, devnode: (u32, u32)) -> Option<&Entity> {
        self.interfaces
            .iter()
            .find(|i| i.kind == MEDIA_INTF_T_V4L_VIDEO && i.devnode == devnode)
            .and_then(|i| i.entity)
            .and_then(|id| self.entity(id))
    }

    /// The (major, minor) of the subdevice node exposing `entity`, if it has one.
    pub fn subdev_node(&self, entity: u32) -> Option<(u32, u32)> {
        self.interfaces
            .iter()
            .find(|i| i.kind == MEDIA_INTF_T_V4L_SUBDEV && i.entity == Some(entity))
            .map(|i| i.devnode)
    }
}

/// The `/dev` path of the character device (major, minor), from sysfs under `root`
/// (`/` on a real system): `sys/dev/char/M:m/uevent`'s `DEVNAME`. Device numbers are what a
/// media graph names; paths are what udev made of them.
pub fn char_device_path(root: &Path, (major, minor): (u32, u32)) -> Option<PathBuf> {
    let uevent = std::fs::read_to_string(root.join(format!("sys/dev/char/{major}:{minor}/uevent"))).ok()?;
    let name = uevent.lines().find_map(|l| l.strip_prefix("DEVNAME="))?;
    // DEVNAME is relative to /dev (e.g. `v4l-subdev0`); refuse anything that climbs out.
    if name.is_empty() || name.split('/').any(|c| c == "..") {
        return None;
    }
    Some(root.join("dev").join(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_number_resolves_to_its_dev_path_through_sysfs() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        std::fs::create_dir_all(r.join("sys/dev/char/81:3")).unwrap();
        std::fs::write(r.join("sys/dev/char/81:3/uevent"), "MAJOR=81\nMINOR=3\nDEVNAME=v4l-subdev1\n").unwrap();
        assert_eq!(char_device_path(r, (81, 3)), Some(r.join("dev/v4l-subdev1")));
        assert_eq!(char_device_path(r, (81, 4)), None, "no such device");
        std::fs::create_dir_all(r.join("sys/dev/char/81:5")).unwrap();
        std::fs::write(r.join("sys/dev/char/81:5/uevent"), "DEVNAME=../etc/passwd\n").unwrap();
        assert_eq!(char_device_path(r, (81, 5)), None, "a name climbing out of /dev is refused");
    }

    #[test]
    fn lookups_follow_ids_and_interfaces() {
        let t = Topology {
            entities: vec![
                Entity { id: 1, name: "sensor".into(), function: ENT_F_CAM_SENSOR },
                Entity { id: 5, name: "capture".into(), function: ENT_F_IO_V4L },
            ],
            pads: vec![
                Pad { id: 3, entity: 5, index: 0, flags: MEDIA_PAD_FL_SINK },
                Pad { id: 2, entity: 1, index: 0, flags: MEDIA_PAD_FL_SOURCE },
            ],
            links: vec![Link { id: 7, source: 2, sink: 3, flags: MEDIA_LNK_FL_ENABLED | MEDIA_LNK_FL_IMMUTABLE }],
            interfaces: vec![
                Interface { id: 10, kind: MEDIA_INTF_T_V4L_VIDEO, devnode: (81, 0), entity: Some(5) },
                Interface { id: 11, kind: MEDIA_INTF_T_V4L_SUBDEV, devnode: (81, 1), entity: Some(1) },
            ],
        };
        assert_eq!(t.video_entity((81, 0)).map(|e| e.name.as_str()), Some("capture"));
        assert_eq!(t.video_entity((81, 1)), None, "a subdev node is not a video node");
        assert_eq!(t.subdev_node(1), Some((81, 1)));
        assert_eq!(t.subdev_node(5), None);
        assert_eq!(t.entity_named("sensor").map(|e| e.id), Some(1));
        let into = t.links_into(3);
        assert_eq!(into.len(), 1);
        assert!(into[0].is_enabled() && into[0].is_immutable());
        assert!(t.pad(3).unwrap().is_sink() && t.pad(2).unwrap().is_source());
        assert_eq!(t.pads_of(1).len(), 1);
    }
}
