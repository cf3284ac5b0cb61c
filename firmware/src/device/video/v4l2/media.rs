//! The media controller side of V4L2 that stateless codecs need: which `/dev/mediaN` a
//! video node belongs to (`MEDIA_IOC_DEVICE_INFO`, `MEDIA_IOC_G_TOPOLOGY`), and requests
//! (`MEDIA_IOC_REQUEST_ALLOC`, then `MEDIA_REQUEST_IOC_QUEUE` / `REINIT` on the request's
//! own fd). A request bundles one OUTPUT buffer with the controls that describe it; the
//! driver runs it as a unit and signals completion by POLLPRI on the request fd.

use std::fs::OpenOptions;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;

use super::ioctl;
use super::raw::*;
use super::topology::{Entity, Interface, Link, Pad, Topology};
use super::V4l2Error;

fn media_err(name: &'static str) -> impl FnOnce(Errno) -> V4l2Error {
    move |source| V4l2Error::Ioctl { name, source }
}

/// What `MEDIA_IOC_DEVICE_INFO` says about a media device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaInfo {
    /// The driver's name, e.g. `visl`, `rkvdec`, `hantro-vpu`.
    pub driver: String,
    /// The device model.
    pub model: String,
    /// Bus information, e.g. `platform:visl`.
    pub bus_info: String,
}

/// An open `/dev/mediaN`.
#[derive(Debug)]
pub struct MediaDevice {
    fd: OwnedFd,
    path: PathBuf,
}

impl MediaDevice {
    /// Opens `path` read-write.
    pub fn open(path: &Path) -> Result<MediaDevice, V4l2Error> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|source| V4l2Error::Open { path: path.into(), source })?;
        Ok(MediaDevice { fd: file.into(), path: path.into() })
    }

    /// The node's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `MEDIA_IOC_DEVICE_INFO`.
    pub fn info(&self) -> Result<MediaInfo, V4l2Error> {
        let mut i = media_device_info::default();
        // SAFETY: `self.fd` is an open media node; `i` is a valid, owned media_device_info
        // whose size is encoded in the request number, so the kernel writes within it.
        unsafe { ioctl::media_device_info(self.fd.as_raw_fd(), &mut i) }.map_err(media_err("MEDIA_IOC_DEVICE_INFO"))?;
        Ok(MediaInfo { driver: c_str(&i.driver), model: c_str(&i.model), bus_info: c_str(&i.bus_info) })
    }

    /// The (major, minor) device numbers of the V4L2 video nodes this media device exposes
    /// (`MEDIA_IOC_G_TOPOLOGY`, interfaces of type `MEDIA_INTF_T_V4L_VIDEO`).
    pub fn video_interfaces(&self) -> Result<Vec<(u32, u32)>, V4l2Error> {
        Ok(self.topology()?.interfaces.iter().filter(|i| i.kind == MEDIA_INTF_T_V4L_VIDEO).map(|i| i.devnode).collect())
    }

    /// The whole graph (`MEDIA_IOC_G_TOPOLOGY`): entities, pads, data links and device-node
    /// interfaces with the entity each exposes.
    pub fn topology(&self) -> Result<Topology, V4l2Error> {
        // Twice: once for the counts, once with room for them. A topology that changed in
        // between is read again (bounded: drivers do not hot-plug entities in a loop).
        for _ in 0..4 {
            let mut t = media_v2_topology::default();
            // SAFETY: all pointers are null, so the kernel only fills in the counts.
            unsafe { ioctl::media_g_topology(self.fd.as_raw_fd(), &mut t) }
                .map_err(media_err("MEDIA_IOC_G_TOPOLOGY"))?;
            let version = t.topology_version;
            // Bounded: a graph is tens of entries; a bogus count must not allocate gigabytes.
            let (ne, ni, np, nl) =
                (t.num_entities.min(4096), t.num_interfaces.min(4096), t.num_pads.min(16384), t.num_links.min(16384));
            let mut entities = vec![media_v2_entity::default(); ne as usize];
            let mut intfs = vec![media_v2_interface::default(); ni as usize];
            let mut pads = vec![media_v2_pad::default(); np as usize];
            let mut links = vec![media_v2_link::default(); nl as usize];
            let mut t = media_v2_topology {
                num_entities: ne,
                ptr_entities: entities.as_mut_ptr() as u64,
                num_interfaces: ni,
                ptr_interfaces: intfs.as_mut_ptr() as u64,
                num_pads: np,
                ptr_pads: pads.as_mut_ptr() as u64,
                num_links: nl,
                ptr_links: links.as_mut_ptr() as u64,
                ..Default::default()
            };
            // SAFETY: each pointer points to as many owned entries as its count says; the
            // kernel writes at most that many (ENOSPC if the graph grew) and the vectors
            // outlive the call.
            match unsafe { ioctl::media_g_topology(self.fd.as_raw_fd(), &mut t) } {
                Err(Errno::ENOSPC) => continue,
                r => r.map_err(media_err("MEDIA_IOC_G_TOPOLOGY"))?,
            };
            if t.topology_version != version {
                continue;
            }
            entities.truncate(t.num_entities as usize);
            intfs.truncate(t.num_interfaces as usize);
            pads.truncate(t.num_pads as usize);
            links.truncate(t.num_links as usize);
            return Ok(topology_from(&entities, &intfs, &pads, &links));
        }
        Err(V4l2Error::Invalid("the media topology kept changing".into()))
    }

    /// `MEDIA_IOC_SETUP_LINK`: enables or disables the data link from `source` to `sink`
    /// (each an (entity id, pad index)).
    pub fn setup_link(&self, source: (u32, u32), sink: (u32, u32), enabled: bool) -> Result<(), V4l2Error> {
        let pad = |(entity, index): (u32, u32)| media_pad_desc {
            entity,
            index: u16::try_from(index).unwrap_or(u16::MAX),
            ..Default::default()
        };
        let mut desc = media_link_desc {
            source: pad(source),
            sink: pad(sink),
            flags: if enabled { MEDIA_LNK_FL_ENABLED } else { 0 },
            ..Default::default()
        };
        // SAFETY: `desc` is an owned media_link_desc, the size the request number encodes;
        // the kernel reads it (and may write it back) within that size.
        unsafe { ioctl::media_setup_link(self.fd.as_raw_fd(), &mut desc) }
            .map_err(media_err("MEDIA_IOC_SETUP_LINK"))?;
        Ok(())
    }

    /// `MEDIA_IOC_REQUEST_ALLOC`: a new, empty request.
    pub fn alloc_request(&self) -> Result<Request, V4l2Error> {
        let mut fd: libc::c_int = -1;
        // SAFETY: the kernel writes one int (the new request's fd) to `fd`.
        unsafe { ioctl::media_request_alloc(self.fd.as_raw_fd(), &mut fd) }
            .map_err(media_err("MEDIA_IOC_REQUEST_ALLOC"))?;
        if fd < 0 {
            return Err(V4l2Error::Invalid("MEDIA_IOC_REQUEST_ALLOC returned no fd".into()));
        }
        // SAFETY: on success the kernel returned a new fd that nothing else owns.
        Ok(Request { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }
}

/// The media device a V4L2 video node belongs to, if it has one: the `/dev/mediaN` whose
/// topology lists the node's device number. Drivers without a media controller (most
/// capture devices, stateful codecs) give `None`.
pub fn media_device_for(video: &Path) -> Option<MediaDevice> {
    let rdev = std::fs::metadata(video).ok().filter(|m| m.file_type().is_char_device())?.rdev();
    let want = (libc::major(rdev), libc::minor(rdev));
    let mut nodes: Vec<_> = std::fs::read_dir("/dev")
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("media")))
        .collect();
    nodes.sort();
    nodes.into_iter().find_map(|p| {
        let m = MediaDevice::open(&p).ok()?;
        m.video_interfaces().ok()?.contains(&want).then_some(m)
    })
}

/// One media request: controls and an OUTPUT buffer are attached to it by their fd, then
/// it is queued; it completes as a unit.
#[derive(Debug)]
pub struct Request {
    fd: OwnedFd,
}

impl Request {
    /// The fd that `VIDIOC_QBUF` (`V4L2_BUF_FLAG_REQUEST_FD`) and `VIDIOC_S_EXT_CTRLS`
    /// (`V4L2_CTRL_WHICH_REQUEST_VAL`) name.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// `MEDIA_REQUEST_IOC_QUEUE`: hands the request to the driver.
    pub fn queue(&self) -> Result<(), V4l2Error> {
        // SAFETY: `self.fd` is a request fd; the ioctl takes no argument.
        unsafe { ioctl::media_request_queue(self.fd.as_raw_fd()) }.map_err(media_err("MEDIA_REQUEST_IOC_QUEUE"))?;
        Ok(())
    }

    /// `MEDIA_REQUEST_IOC_REINIT`: empties a completed request for reuse.
    pub fn reinit(&self) -> Result<(), V4l2Error> {
        // SAFETY: as for `queue`.
        unsafe { ioctl::media_request_reinit(self.fd.as_raw_fd()) }.map_err(media_err("MEDIA_REQUEST_IOC_REINIT"))?;
        Ok(())
    }

    /// Waits up to `timeout_ms` for the request to complete (POLLPRI); `false` on timeout.
    pub fn wait(&self, timeout_ms: i32) -> Result<bool, V4l2Error> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLPRI)];
        let timeout = PollTimeout::try_from(timeout_ms.max(0)).unwrap_or(PollTimeout::NONE);
        match poll(&mut fds, timeout) {
            Ok(0) | Err(Errno::EINTR) => Ok(false),
            Ok(_) => Ok(fds[0].revents().is_some_and(|r| r.contains(PollFlags::POLLPRI))),
            Err(e) => Err(media_err("poll(request)")(e)),
        }
    }
}

/// Builds the typed graph from the kernel's arrays: data links between pads kept,
/// interface links folded into their interface, ancillary links dropped.
fn topology_from(
    entities: &[media_v2_entity],
    intfs: &[media_v2_interface],
    pads: &[media_v2_pad],
    links: &[media_v2_link],
) -> Topology {
    let entity_of_interface = |id: u32| {
        links
            .iter()
            .find(|l| l.flags & MEDIA_LNK_FL_LINK_TYPE == MEDIA_LNK_FL_INTERFACE_LINK && l.source_id == id)
            .map(|l| l.sink_id)
    };
    Topology {
        entities: entities.iter().map(|e| Entity { id: e.id, name: c_str(&e.name), function: e.function }).collect(),
        pads: pads.iter().map(|p| Pad { id: p.id, entity: p.entity_id, index: p.index, flags: p.flags }).collect(),
        links: links
            .iter()
            .filter(|l| l.flags & MEDIA_LNK_FL_LINK_TYPE == MEDIA_LNK_FL_DATA_LINK)
            .map(|l| Link { id: l.id, source: l.source_id, sink: l.sink_id, flags: l.flags })
            .collect(),
        interfaces: intfs
            .iter()
            .map(|i| Interface {
                id: i.id,
                kind: i.intf_type,
                devnode: (i.devnode.major, i.devnode.minor),
                entity: entity_of_interface(i.id),
            })
            .collect(),
    }
}

fn c_str(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_that_is_not_a_device_has_no_media_device() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("video0");
        std::fs::write(&file, b"").unwrap();
        assert!(media_device_for(&file).is_none());
        assert!(media_device_for(Path::new("/nonexistent/video9")).is_none());
    }

    #[test]
    fn opening_a_missing_media_node_names_it() {
        let err = MediaDevice::open(Path::new("/nonexistent/media0")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/media0"), "{err}");
    }

    #[test]
    fn media_ioctls_on_a_non_media_fd_fail_cleanly() {
        // /dev/null accepts the open but no media ioctl: each call must come back as an
        // error, never as made-up data (the unsafe calls' failure paths).
        let m = MediaDevice::open(Path::new("/dev/null")).unwrap();
        assert!(matches!(m.info(), Err(V4l2Error::Ioctl { name: "MEDIA_IOC_DEVICE_INFO", .. })));
        assert!(m.video_interfaces().is_err());
        assert!(m.topology().is_err());
        assert!(m.setup_link((1, 0), (2, 0), true).is_err());
        assert!(m.alloc_request().is_err());
    }

    #[test]
    fn the_kernels_arrays_become_a_typed_graph() {
        let mut name = [0u8; 64];
        name[..8].copy_from_slice(b"Sensor A");
        let entities = [media_v2_entity { id: 1, name, function: 0x0002_0001, ..Default::default() }];
        let intfs = [media_v2_interface {
            id: 9,
            intf_type: MEDIA_INTF_T_V4L_SUBDEV,
            devnode: media_v2_intf_devnode { major: 81, minor: 2 },
            ..Default::default()
        }];
        let pads = [media_v2_pad { id: 2, entity_id: 1, flags: MEDIA_PAD_FL_SOURCE, index: 0, reserved: [0; 4] }];
        let links = [
            media_v2_link { id: 20, source_id: 9, sink_id: 1, flags: MEDIA_LNK_FL_INTERFACE_LINK, reserved: [0; 6] },
            media_v2_link { id: 21, source_id: 2, sink_id: 4, flags: MEDIA_LNK_FL_ENABLED, reserved: [0; 6] },
            // Ancillary (lens → sensor): not a data link.
            media_v2_link { id: 22, source_id: 5, sink_id: 1, flags: 2 << 28, reserved: [0; 6] },
        ];
        let t = topology_from(&entities, &intfs, &pads, &links);
        assert_eq!(t.entities[0].name, "Sensor A");
        assert_eq!(t.interfaces[0].entity, Some(1), "the interface link names the entity");
        assert_eq!(t.subdev_node(1), Some((81, 2)));
        assert_eq!(t.links.len(), 1, "only the data link is kept: {:?}", t.links);
        assert_eq!((t.links[0].source, t.links[0].sink), (2, 4));
    }

    #[test]
    fn c_strings_stop_at_the_nul() {
        assert_eq!(c_str(b"visl\0\0junk"), "visl");
        assert_eq!(c_str(b"full"), "full");
    }
}
