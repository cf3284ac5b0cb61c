//! Media-controller capture pipelines: the path from a source (an HDMI bridge such as the
//! TC358743, a camera sensor) through subdevices to a capture node that carries
//! `V4L2_CAP_IO_MC` (the Pi's `unicam-image`, vimc's `RGB/YUV Capture`). Such a node
//! captures nothing until userspace enables the path's links and gives every pad on it a
//! matching format; the kernel checks each hop at STREAMON (EPIPE otherwise).
//!
//! [`plan_path`] walks the graph (pure); [`configure`] enables the path's links and
//! negotiates the formats hop by hop through a [`PadAccess`] (the hardware's subdevice
//! nodes in [`MediaPads`], a fake in the tests): the source's size from its DV timings when
//! it has them (a bridge), else from its pad; at each hop a code both pads offer, in our
//! order of preference, set on the source pad and then on the sink pad and read back. The
//! result names the capture node's pixel format and size and says how it was reached, for
//! the logs and `doctor`.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use super::v4l2::raw::MEDIA_INTF_T_V4L_VIDEO;
use super::v4l2::topology::{char_device_path, Link, Topology};
use super::v4l2::{
    mbus, BufType, DvTimingsStatus, FourCc, MbusFormat, MediaDevice, PixFormat, Subdev, V4l2Device, V4l2Error,
};

/// Media bus codes in our order of preference: YUV 4:2:2 (half the bandwidth of RGB, what
/// the TC358743 sends best), then RGB, then Bayer (sensors; a debayer turns them to RGB).
const PREFERRED_CODES: [u32; 10] = [
    mbus::UYVY8_1X16,
    mbus::YUYV8_1X16,
    mbus::UYVY8_2X8,
    mbus::YUYV8_2X8,
    mbus::RGB888_1X24,
    mbus::BGR888_1X24,
    mbus::SRGGB8_1X8,
    mbus::SBGGR8_1X8,
    mbus::SGRBG8_1X8,
    mbus::SGBRG8_1X8,
];

/// `V4L2_FIELD_NONE`: progressive frames.
const FIELD_NONE: u32 = 1;

/// The pixel format a capture node produces from a media bus code, among the ones we convert.
pub fn fourcc_for_code(code: u32) -> Option<FourCc> {
    match code {
        mbus::UYVY8_1X16 | mbus::UYVY8_2X8 => Some(FourCc::UYVY),
        mbus::YUYV8_1X16 | mbus::YUYV8_2X8 => Some(FourCc::YUYV),
        mbus::RGB888_1X24 => Some(FourCc::RGB24),
        _ => None,
    }
}

/// The pixel format a video node stores a media bus code as, Bayer included (for nodes on
/// a side branch of the pipeline, which the kernel validates too).
fn node_fourcc_for_code(code: u32) -> Option<FourCc> {
    match code {
        mbus::SBGGR8_1X8 => Some(FourCc::new(b"BA81")),
        mbus::SGBRG8_1X8 => Some(FourCc::new(b"GBRG")),
        mbus::SGRBG8_1X8 => Some(FourCc::new(b"GRBA")),
        mbus::SRGGB8_1X8 => Some(FourCc::new(b"RGGB")),
        mbus::BGR888_1X24 => Some(FourCc::new(b"BGR3")),
        other => fourcc_for_code(other),
    }
}

/// Why a pipeline could not be configured.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The capture node is not an entity of its media device's graph.
    #[error("the capture node is not in its media graph")]
    NotInGraph,
    /// No chain of links leads from a source entity to the capture node.
    #[error("no source entity is linked to {capture:?}")]
    NoSource {
        /// The capture entity's name.
        capture: String,
    },
    /// The configured source is not upstream of the capture node.
    #[error("{source_name:?} is not linked to {capture:?} (sources upstream: {upstream})")]
    SourceNotUpstream {
        /// The configured name.
        source_name: String,
        /// The capture entity's name.
        capture: String,
        /// The sources that are, comma-separated.
        upstream: String,
    },
    /// Using the path needs a link changed that the driver fixed.
    #[error("the immutable link {from}:{from_pad} → {to}:{to_pad} is in the way")]
    ImmutableLink {
        /// Source entity name.
        from: String,
        /// Source pad index.
        from_pad: u32,
        /// Sink entity name.
        to: String,
        /// Sink pad index.
        to_pad: u32,
    },
    /// Two linked pads share no format we can use.
    #[error("{from}:{from_pad} and {to}:{to_pad} share no usable media bus format")]
    NoCommonFormat {
        /// Source entity name.
        from: String,
        /// Source pad index.
        from_pad: u32,
        /// Sink entity name.
        to: String,
        /// Sink pad index.
        to_pad: u32,
    },
    /// A pad did not take the format its upstream pad sends.
    #[error("{entity}:{pad} took {got} instead of {wanted}")]
    Refused {
        /// Entity name.
        entity: String,
        /// Pad index.
        pad: u32,
        /// What we set.
        wanted: MbusFormat,
        /// What it kept.
        got: MbusFormat,
    },
    /// The source has DV timings and no usable signal (cable out, no lock, out of range).
    #[error("no usable signal at {source_name}: {status:?}")]
    NoSignal {
        /// The source entity's name.
        source_name: String,
        /// What the bridge reported (boxed: timings are large, errors stay small).
        status: Box<DvTimingsStatus>,
    },
    /// A subdevice on the path has no device node (it cannot be configured from userspace).
    #[error("{0} has no subdevice node")]
    NoSubdevNode(String),
    /// An ioctl failed.
    #[error(transparent)]
    V4l2(#[from] V4l2Error),
}

/// The source end of a path as the source reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceSignal {
    /// The source has no DV timings (a sensor): its pad's size is the size.
    NoTimings,
    /// Locked and applied (S_DV_TIMINGS): width × height.
    Locked(u32, u32),
    /// DV timings without a usable signal.
    NoSignal(DvTimingsStatus),
}

/// What configuring needs from the hardware, by (entity id, pad index).
pub trait PadAccess {
    /// The codes `pad` offers, in the driver's order.
    fn codes(&mut self, entity: u32, pad: u32) -> Result<Vec<u32>, PipelineError>;
    /// The pad's active format.
    fn format(&mut self, entity: u32, pad: u32) -> Result<MbusFormat, PipelineError>;
    /// Sets the pad's format; returns what the driver made of it.
    fn set_format(&mut self, entity: u32, pad: u32, want: &MbusFormat) -> Result<MbusFormat, PipelineError>;
    /// Enables or disables the link between two pads.
    fn setup_link(&mut self, source: (u32, u32), sink: (u32, u32), enabled: bool) -> Result<(), PipelineError>;
    /// Queries (and applies) the source's DV timings.
    fn source_signal(&mut self, entity: u32) -> Result<SourceSignal, PipelineError>;
    /// Sets the format of the video node behind `entity` (a side branch's capture node).
    fn set_node_format(&mut self, entity: u32, fourcc: FourCc, width: u32, height: u32) -> Result<(), PipelineError>;
}

/// One configured hop: the format on the wire from `source` to `sink`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hop {
    /// Source entity name and pad index.
    pub source: (String, u32),
    /// Sink entity name and pad index.
    pub sink: (String, u32),
    /// The format both pads carry.
    pub format: MbusFormat,
}

/// A configured pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pipeline {
    /// Source entity id (its subdevice node takes DV timings and source-change events).
    pub source: u32,
    /// Source entity name.
    pub source_name: String,
    /// Whether the source has DV timings (a bridge) or not (a sensor).
    pub has_timings: bool,
    /// The source's picture size (its timings' when it has them).
    pub source_size: (u32, u32),
    /// The hops from the source to the capture node.
    pub hops: Vec<Hop>,
    /// The capture node's pixel format.
    pub fourcc: FourCc,
    /// The captured size.
    pub width: u32,
    /// The captured height.
    pub height: u32,
    /// Links switched on or off to get here, as "A:1 → B:0 on/off".
    pub links_changed: Vec<String>,
    /// Video nodes on side branches given the format their fixed links carry, as
    /// "Raw Capture 0 RGGB 800x600".
    pub side_nodes: Vec<String>,
}

impl fmt::Display for Pipeline {
    /// `Sensor A:0 [SRGGB8_1X8 640x480] → Debayer A:0 … Scaler:1 [RGB888_1X24 640x480] →
    /// RGB/YUV Capture (RGB3 640x480)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, hop) in self.hops.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{}:{} [{}] → {}", hop.source.0, hop.source.1, hop.format, hop.sink.0)?;
            if i + 1 < self.hops.len() {
                write!(f, ":{}", hop.sink.1)?;
            }
        }
        write!(f, " ({} {}x{})", self.fourcc, self.width, self.height)
    }
}

/// The links from a source to `capture`, source first. `want_source` names the source to
/// reach; otherwise at each sink pad an enabled link is followed first, then the others in
/// the graph's order, so a pipeline set up by the board (or left by an earlier run) is kept.
pub fn plan_path(t: &Topology, capture: u32, want_source: Option<&str>) -> Result<Vec<Link>, PipelineError> {
    let capture_name = t.entity(capture).map(|e| e.name.clone()).ok_or(PipelineError::NotInGraph)?;
    let mut path = Vec::new();
    let mut visited = vec![capture];
    if walk(t, capture, want_source, &mut path, &mut visited) {
        path.reverse();
        return Ok(path);
    }
    match want_source {
        Some(name) => {
            let mut upstream = Vec::new();
            sources_upstream(t, capture, &mut vec![capture], &mut upstream);
            Err(PipelineError::SourceNotUpstream {
                source_name: name.to_string(),
                capture: capture_name,
                upstream: upstream.join(", "),
            })
        }
        None => Err(PipelineError::NoSource { capture: capture_name }),
    }
}

/// `MEDIA_ENT_F_CONN_*`: a connector (an HDMI or composite jack some bridges put before
/// themselves). Not a source we configure: the walk ends at the entity it feeds.
fn is_connector(function: u32) -> bool {
    function & 0xffff_0000 == 0x0003_0000
}

/// Whether a data link comes from a connector entity.
fn from_connector(t: &Topology, link: &Link) -> bool {
    t.pad(link.source).and_then(|p| t.entity(p.entity)).is_some_and(|e| is_connector(e.function))
}

/// Depth-first from `entity` upstream; pushes the links it took (capture side first).
fn walk(t: &Topology, entity: u32, want: Option<&str>, path: &mut Vec<Link>, visited: &mut Vec<u32>) -> bool {
    // Sink pads fed by something we configure (a connector's link does not count).
    let sinks: Vec<_> = t
        .pads_of(entity)
        .into_iter()
        .filter(|p| p.is_sink() && t.links_into(p.id).iter().any(|l| !from_connector(t, l)))
        .collect();
    if sinks.is_empty() {
        // A source: the end, if it is the one wanted.
        return want.is_none_or(|w| t.entity(entity).is_some_and(|e| e.name == w)) && !path.is_empty();
    }
    for sink in sinks {
        let mut links: Vec<Link> = t.links_into(sink.id).into_iter().filter(|l| !from_connector(t, l)).collect();
        // Enabled first; stable, so the graph's order otherwise.
        links.sort_by_key(|l| !l.is_enabled());
        for link in links {
            let Some(up) = t.pad(link.source).map(|p| p.entity) else { continue };
            if visited.contains(&up) {
                continue;
            }
            visited.push(up);
            path.push(link);
            if walk(t, up, want, path, visited) {
                return true;
            }
            path.pop();
            visited.pop();
        }
    }
    false
}

fn sources_upstream(t: &Topology, entity: u32, visited: &mut Vec<u32>, out: &mut Vec<String>) {
    for sink in t.pads_of(entity).into_iter().filter(|p| p.is_sink()) {
        for link in t.links_into(sink.id) {
            let Some(up) = t.pad(link.source).map(|p| p.entity) else { continue };
            if visited.contains(&up) {
                continue;
            }
            visited.push(up);
            if t.pads_of(up).iter().any(|p| p.is_sink()) {
                sources_upstream(t, up, visited, out);
            } else if let Some(e) = t.entity(up) {
                out.push(format!("{:?}", e.name));
            }
        }
    }
}

/// The best code of `offered` that `accepted` says yes to: first one that could reach the
/// capture node unchanged (`reaches_node`: most entities pass their sink's code through,
/// so choosing one the node cannot take early would fail hops later), then any; each
/// time ours in order of preference, then the driver's order.
fn best_code(offered: &[u32], accepted: impl Fn(u32) -> bool, reaches_node: impl Fn(u32) -> bool) -> Option<u32> {
    let ordered = || PREFERRED_CODES.iter().copied().filter(|c| offered.contains(c)).chain(offered.iter().copied());
    ordered().find(|&c| accepted(c) && reaches_node(c)).or_else(|| ordered().find(|&c| accepted(c)))
}

/// Enables the path from a source to the capture entity (`want_source`, or the enabled
/// one, see [`plan_path`]) and negotiates every hop's format. `node_formats` are the pixel
/// formats the capture node offers.
pub fn configure(
    t: &Topology,
    capture: u32,
    want_source: Option<&str>,
    node_formats: &[FourCc],
    pads: &mut dyn PadAccess,
) -> Result<Pipeline, PipelineError> {
    let path = plan_path(t, capture, want_source)?;
    let name = |entity: u32| t.entity(entity).map(|e| e.name.clone()).unwrap_or_else(|| format!("#{entity}"));
    // (entity, pad index) of a pad id. The path's pads exist: plan_path found them.
    let end = |pad: u32| t.pad(pad).map(|p| (p.entity, p.index)).ok_or(PipelineError::NotInGraph);

    // Links: others into the path's sink pads off first (a sink takes one stream), then
    // the path's on.
    let mut links_changed = Vec::new();
    for link in &path {
        for other in t.links_into(link.sink).into_iter().filter(|l| l.id != link.id && l.is_enabled()) {
            let (from, to) = (end(other.source)?, end(other.sink)?);
            if other.is_immutable() {
                return Err(PipelineError::ImmutableLink {
                    from: name(from.0),
                    from_pad: from.1,
                    to: name(to.0),
                    to_pad: to.1,
                });
            }
            pads.setup_link(from, to, false)?;
            links_changed.push(format!("{}:{} → {}:{} off", name(from.0), from.1, name(to.0), to.1));
        }
    }
    for link in path.iter().filter(|l| !l.is_enabled()) {
        let (from, to) = (end(link.source)?, end(link.sink)?);
        pads.setup_link(from, to, true)?;
        links_changed.push(format!("{}:{} → {}:{} on", name(from.0), from.1, name(to.0), to.1));
    }

    let (source, _) = end(path[0].source)?;
    let signal = pads.source_signal(source)?;
    if let SourceSignal::NoSignal(status) = signal {
        return Err(PipelineError::NoSignal { source_name: name(source), status: Box::new(status) });
    }
    let mut hops = Vec::with_capacity(path.len());
    for (i, link) in path.iter().enumerate() {
        let ((a, a_pad), (b, b_pad)) = (end(link.source)?, end(link.sink)?);
        let last = b == capture;
        let sink_codes = if last { Vec::new() } else { pads.codes(b, b_pad)? };
        let accepted = |c: u32| {
            if last {
                fourcc_for_code(c).is_some_and(|f| node_formats.contains(&f))
            } else {
                sink_codes.contains(&c)
            }
        };
        let no_common = || PipelineError::NoCommonFormat { from: name(a), from_pad: a_pad, to: name(b), to_pad: b_pad };
        // The source pad: the path's start gets the signal's size; later ones carry what
        // their entity propagated from its sink, kept when the next pad takes it.
        let mut current = pads.format(a, a_pad)?;
        if let (0, SourceSignal::Locked(w, h)) = (i, signal) {
            current.width = w;
            current.height = h;
        }
        let out = if i > 0 && accepted(current.code) {
            current
        } else {
            let reaches_node = |c: u32| fourcc_for_code(c).is_some_and(|f| node_formats.contains(&f));
            let code = best_code(&pads.codes(a, a_pad)?, accepted, reaches_node).ok_or_else(no_common)?;
            let want = MbusFormat { code, field: FIELD_NONE, ..current };
            let got = pads.set_format(a, a_pad, &want)?;
            if !accepted(got.code) {
                return Err(PipelineError::Refused { entity: name(a), pad: a_pad, wanted: want, got });
            }
            got
        };
        if !last {
            let got = pads.set_format(b, b_pad, &out)?;
            if (got.code, got.width, got.height) != (out.code, out.width, out.height) {
                return Err(PipelineError::Refused { entity: name(b), pad: b_pad, wanted: out, got });
            }
        }
        hops.push(Hop { source: (name(a), a_pad), sink: (name(b), b_pad), format: out });
    }
    // Side branches: an enabled link from a pad of the path to another video node puts
    // that node in the pipeline too (the kernel walks every enabled link at STREAMON and
    // validates each: vimc's sensor also feeds its raw capture node through a fixed link),
    // so it gets the format its link carries.
    let mut side_nodes = Vec::new();
    for (link, hop) in path.iter().zip(&hops) {
        for side in t.links.iter().filter(|l| l.source == link.source && l.id != link.id && l.is_enabled()) {
            let (node, _) = end(side.sink)?;
            if node == capture || t.entity(node).is_none_or(|e| e.function != super::v4l2::topology::ENT_F_IO_V4L) {
                continue;
            }
            let f = hop.format;
            let Some(fourcc) = node_fourcc_for_code(f.code) else { continue };
            pads.set_node_format(node, fourcc, f.width, f.height)?;
            side_nodes.push(format!("{} {fourcc} {}x{}", name(node), f.width, f.height));
        }
    }
    let first = hops.first().map(|h| h.format).ok_or(PipelineError::NotInGraph)?;
    let last = hops.last().map(|h| h.format).ok_or(PipelineError::NotInGraph)?;
    // `accepted` guaranteed a mapping for the last hop's code.
    let fourcc = fourcc_for_code(last.code).ok_or(PipelineError::NotInGraph)?;
    Ok(Pipeline {
        source,
        source_name: name(source),
        has_timings: matches!(signal, SourceSignal::Locked(..)),
        source_size: (first.width, first.height),
        hops,
        fourcc,
        width: last.width,
        height: last.height,
        links_changed,
        side_nodes,
    })
}

/// [`PadAccess`] on real hardware: the graph's subdevice nodes, opened on first use.
#[derive(Debug)]
pub struct MediaPads<'a> {
    media: &'a MediaDevice,
    topology: &'a Topology,
    sysroot: PathBuf,
    open: HashMap<u32, Subdev>,
}

impl<'a> MediaPads<'a> {
    /// Pads of `topology`'s subdevices, links through `media`; nodes found under `/`.
    pub fn new(media: &'a MediaDevice, topology: &'a Topology) -> MediaPads<'a> {
        MediaPads { media, topology, sysroot: PathBuf::from("/"), open: HashMap::new() }
    }

    /// The open subdevice node of `entity`.
    pub fn subdev(&mut self, entity: u32) -> Result<&Subdev, PipelineError> {
        if !self.open.contains_key(&entity) {
            let name = || self.topology.entity(entity).map(|e| e.name.clone()).unwrap_or_default();
            let node = self.topology.subdev_node(entity).ok_or_else(|| PipelineError::NoSubdevNode(name()))?;
            let path = char_device_path(&self.sysroot, node).ok_or_else(|| PipelineError::NoSubdevNode(name()))?;
            self.open.insert(entity, Subdev::open(&path)?);
        }
        self.open.get(&entity).ok_or(PipelineError::NotInGraph)
    }

    /// The path of `entity`'s subdevice node.
    pub fn subdev_path(&self, entity: u32) -> Option<PathBuf> {
        char_device_path(&self.sysroot, self.topology.subdev_node(entity)?)
    }

    /// Takes the open node of `entity` (the source's, kept for its events).
    pub fn take(&mut self, entity: u32) -> Option<Subdev> {
        self.open.remove(&entity)
    }
}

impl PadAccess for MediaPads<'_> {
    fn codes(&mut self, entity: u32, pad: u32) -> Result<Vec<u32>, PipelineError> {
        Ok(self.subdev(entity)?.mbus_codes(pad)?)
    }

    fn format(&mut self, entity: u32, pad: u32) -> Result<MbusFormat, PipelineError> {
        Ok(self.subdev(entity)?.format(pad)?)
    }

    fn set_format(&mut self, entity: u32, pad: u32, want: &MbusFormat) -> Result<MbusFormat, PipelineError> {
        Ok(self.subdev(entity)?.set_format(pad, want)?)
    }

    fn setup_link(&mut self, source: (u32, u32), sink: (u32, u32), enabled: bool) -> Result<(), PipelineError> {
        Ok(self.media.setup_link(source, sink, enabled)?)
    }

    fn source_signal(&mut self, entity: u32) -> Result<SourceSignal, PipelineError> {
        let dev = self.subdev(entity)?.device();
        match dev.query_dv_timings() {
            Ok(DvTimingsStatus::Locked(t)) => {
                let t = dev.set_dv_timings(&t)?;
                Ok(SourceSignal::Locked(t.width, t.height))
            }
            Ok(status) => Ok(SourceSignal::NoSignal(status)),
            // ENOTTY/EINVAL: a sensor, no timings.
            Err(V4l2Error::Ioctl { .. }) => Ok(SourceSignal::NoTimings),
            Err(e) => Err(e.into()),
        }
    }

    fn set_node_format(&mut self, entity: u32, fourcc: FourCc, width: u32, height: u32) -> Result<(), PipelineError> {
        let name = || self.topology.entity(entity).map(|e| e.name.clone()).unwrap_or_default();
        let node = self
            .topology
            .interfaces
            .iter()
            .find(|i| i.entity == Some(entity) && i.kind == MEDIA_INTF_T_V4L_VIDEO)
            .map(|i| i.devnode)
            .ok_or_else(|| PipelineError::NoSubdevNode(name()))?;
        let path = char_device_path(&self.sysroot, node).ok_or_else(|| PipelineError::NoSubdevNode(name()))?;
        let dev = V4l2Device::open(&path)?;
        let kind = BufType::capture_for(dev.querycap()?.device_caps)
            .ok_or_else(|| V4l2Error::Invalid(format!("{} is not a capture node", path.display())))?;
        match dev.set_format(kind, &PixFormat::new(width, height, fourcc)) {
            Ok(_) => Ok(()),
            // Streaming for someone else: its format is that stream's business.
            Err(V4l2Error::Ioctl { source: nix::errno::Errno::EBUSY, .. }) => {
                tracing::info!(node = %path.display(), "a side branch's node is busy; its format left as it is");
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Whether a capture node is media-controller centric (`V4L2_CAP_IO_MC`): its pipeline
/// must be configured through the graph before it streams.
pub fn is_mc_centric(device_caps: u32) -> bool {
    const CAP_IO_MC: u32 = 0x2000_0000;
    device_caps & CAP_IO_MC != 0
}

/// The capture node's entity in `media`'s graph.
pub fn capture_entity(t: &Topology, node: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let rdev = std::fs::metadata(node).ok()?.rdev();
    t.video_entity((libc::major(rdev), libc::minor(rdev))).map(|e| e.id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::video::v4l2::raw::{
        MEDIA_LNK_FL_ENABLED, MEDIA_LNK_FL_IMMUTABLE, MEDIA_PAD_FL_SINK, MEDIA_PAD_FL_SOURCE,
    };
    use crate::device::video::v4l2::topology::{Entity, Pad, ENT_F_CAM_SENSOR, ENT_F_IO_V4L, ENT_F_VID_IF_BRIDGE};

    const ON: u32 = MEDIA_LNK_FL_ENABLED;
    const FIXED: u32 = MEDIA_LNK_FL_ENABLED | MEDIA_LNK_FL_IMMUTABLE;

    /// A graph built by name: entities with (sink pads, source pads), links by
    /// ("entity", pad) pairs. Pad ids are entity id * 100 + index.
    /// ("entity", pad index).
    type End<'a> = (&'a str, u32);
    /// An entity: name, function, sink pads, source pads.
    type EntitySpec<'a> = (&'a str, u32, u32, u32);
    /// (entity id, pad index).
    type PadRef = (u32, u32);

    fn graph(entities: &[EntitySpec], links: &[(End, End, u32)]) -> Topology {
        let mut t = Topology::default();
        for (i, &(name, function, sinks, sources)) in entities.iter().enumerate() {
            let id = u32::try_from(i).unwrap() + 1;
            t.entities.push(Entity { id, name: name.into(), function });
            for index in 0..sinks + sources {
                let flags = if index < sinks { MEDIA_PAD_FL_SINK } else { MEDIA_PAD_FL_SOURCE };
                t.pads.push(Pad { id: id * 100 + index, entity: id, index, flags });
            }
        }
        let pad = |t: &Topology, (n, i): (&str, u32)| t.entity_named(n).unwrap().id * 100 + i;
        for (k, &(from, to, flags)) in links.iter().enumerate() {
            let (source, sink) = (pad(&t, from), pad(&t, to));
            t.links.push(Link { id: 1000 + u32::try_from(k).unwrap(), source, sink, flags });
        }
        t
    }

    /// vimc's graph (vimc-core.c): two sensors, two debayers, a scaler, an RGB input.
    fn vimc() -> Topology {
        graph(
            &[
                ("Sensor A", ENT_F_CAM_SENSOR, 0, 1),
                ("Sensor B", ENT_F_CAM_SENSOR, 0, 1),
                ("Debayer A", 0x4003, 1, 1),
                ("Debayer B", 0x4003, 1, 1),
                ("Raw Capture 0", ENT_F_IO_V4L, 1, 0),
                ("Raw Capture 1", ENT_F_IO_V4L, 1, 0),
                ("RGB/YUV Input", ENT_F_CAM_SENSOR, 0, 1),
                ("Scaler", 0x4005, 1, 1),
                ("RGB/YUV Capture", ENT_F_IO_V4L, 1, 0),
            ],
            &[
                (("Sensor A", 0), ("Debayer A", 0), FIXED),
                (("Sensor A", 0), ("Raw Capture 0", 0), FIXED),
                (("Sensor B", 0), ("Debayer B", 0), FIXED),
                (("Sensor B", 0), ("Raw Capture 1", 0), FIXED),
                (("Debayer A", 1), ("Scaler", 0), ON),
                (("Debayer B", 1), ("Scaler", 0), 0),
                (("RGB/YUV Input", 0), ("Scaler", 0), 0),
                (("Scaler", 1), ("RGB/YUV Capture", 0), FIXED),
            ],
        )
    }

    const BAYER: [u32; 4] = [mbus::SBGGR8_1X8, mbus::SGBRG8_1X8, mbus::SGRBG8_1X8, mbus::SRGGB8_1X8];

    /// Pads that behave like vimc's (or a bridge's): per-pad code lists, sizes kept, a
    /// debayer's source fixed at RGB, formats propagated from sink to source.
    #[derive(Default)]
    struct FakePads {
        codes: HashMap<(u32, u32), Vec<u32>>,
        formats: HashMap<(u32, u32), MbusFormat>,
        /// entity → its source pad follows its sink pad's size, with this code if set.
        propagate: HashMap<u32, Option<u32>>,
        signal: HashMap<u32, SourceSignal>,
        links: Vec<(PadRef, PadRef, bool)>,
        sets: Vec<(u32, u32, MbusFormat)>,
        nodes: Vec<(u32, FourCc, u32, u32)>,
    }

    impl PadAccess for FakePads {
        fn codes(&mut self, e: u32, p: u32) -> Result<Vec<u32>, PipelineError> {
            Ok(self.codes.get(&(e, p)).cloned().unwrap_or_default())
        }
        fn format(&mut self, e: u32, p: u32) -> Result<MbusFormat, PipelineError> {
            Ok(self.formats.get(&(e, p)).copied().unwrap_or(MbusFormat {
                code: mbus::RGB888_1X24,
                width: 640,
                height: 480,
                field: FIELD_NONE,
            }))
        }
        fn set_format(&mut self, e: u32, p: u32, want: &MbusFormat) -> Result<MbusFormat, PipelineError> {
            let offered = self.codes.get(&(e, p)).cloned().unwrap_or_default();
            let mut got = *want;
            if !offered.contains(&want.code) {
                got.code = offered.first().copied().unwrap_or(want.code);
            }
            if let Some(SourceSignal::Locked(w, h)) = self.signal.get(&e) {
                (got.width, got.height) = (*w, *h); // a bridge's size is its timings'
            }
            self.sets.push((e, p, got));
            self.formats.insert((e, p), got);
            if let Some(code) = self.propagate.get(&e).copied() {
                if p == 0 {
                    self.formats.insert((e, 1), MbusFormat { code: code.unwrap_or(got.code), ..got });
                }
            }
            Ok(got)
        }
        fn setup_link(&mut self, s: (u32, u32), k: (u32, u32), on: bool) -> Result<(), PipelineError> {
            self.links.push((s, k, on));
            Ok(())
        }
        fn source_signal(&mut self, e: u32) -> Result<SourceSignal, PipelineError> {
            Ok(self.signal.get(&e).copied().unwrap_or(SourceSignal::NoTimings))
        }
        fn set_node_format(&mut self, e: u32, f: FourCc, w: u32, h: u32) -> Result<(), PipelineError> {
            self.nodes.push((e, f, w, h));
            Ok(())
        }
    }

    fn vimc_pads(t: &Topology) -> FakePads {
        let id = |n: &str| t.entity_named(n).unwrap().id;
        let rgb = vec![mbus::BGR888_1X24, mbus::RGB888_1X24];
        let all: Vec<u32> = rgb.iter().chain(BAYER.iter()).copied().collect();
        let mut f = FakePads::default();
        for s in ["Sensor A", "Sensor B", "RGB/YUV Input"] {
            f.codes.insert((id(s), 0), all.clone());
        }
        for d in ["Debayer A", "Debayer B"] {
            f.codes.insert((id(d), 0), BAYER.to_vec());
            f.codes.insert((id(d), 1), rgb.clone());
            f.propagate.insert(id(d), Some(mbus::RGB888_1X24));
        }
        f.codes.insert((id("Scaler"), 0), rgb.clone());
        f.codes.insert((id("Scaler"), 1), rgb);
        f.propagate.insert(id("Scaler"), None);
        f
    }

    #[test]
    fn the_enabled_path_is_kept_and_every_hop_negotiated() {
        let t = vimc();
        let capture = t.entity_named("RGB/YUV Capture").unwrap().id;
        let mut pads = vimc_pads(&t);
        let p = configure(&t, capture, None, &[FourCc::RGB24, FourCc::new(b"BGR3")], &mut pads).unwrap();
        assert_eq!(p.source_name, "Sensor A");
        assert!(p.links_changed.is_empty(), "the enabled path needs no change: {:?}", p.links_changed);
        assert!(pads.links.is_empty());
        assert_eq!((p.fourcc, p.width, p.height), (FourCc::RGB24, 640, 480));
        // Bayer from the sensor (the debayer's sink takes nothing else), RGB after it.
        assert_eq!(p.hops[0].format.code, mbus::SRGGB8_1X8, "{p}");
        assert_eq!(p.hops[1].format.code, mbus::RGB888_1X24);
        assert_eq!(p.hops[2].format.code, mbus::RGB888_1X24);
        assert_eq!(
            p.to_string(),
            "Sensor A:0 [SRGGB8_1X8 640x480] → Debayer A:0, Debayer A:1 [RGB888_1X24 640x480] → Scaler:0, \
             Scaler:1 [RGB888_1X24 640x480] → RGB/YUV Capture (RGB3 640x480)"
        );
        // Each sink pad was set to what its upstream pad sends.
        let id = |n: &str| t.entity_named(n).unwrap().id;
        assert!(pads.sets.iter().any(|s| (s.0, s.1, s.2.code) == (id("Debayer A"), 0, mbus::SRGGB8_1X8)));
        assert!(pads.sets.iter().any(|s| (s.0, s.1, s.2.code) == (id("Scaler"), 0, mbus::RGB888_1X24)));
        // Sensor A's fixed link to its raw node puts that node in the pipeline: it gets the
        // Bayer format the link carries (the kernel refuses STREAMON otherwise).
        assert_eq!(pads.nodes, vec![(id("Raw Capture 0"), FourCc::new(b"RGGB"), 640, 480)]);
        assert_eq!(p.side_nodes, ["Raw Capture 0 RGGB 640x480"]);
    }

    #[test]
    fn a_named_source_switches_the_links_other_first() {
        let t = vimc();
        let id = |n: &str| t.entity_named(n).unwrap().id;
        let mut pads = vimc_pads(&t);
        let p = configure(&t, id("RGB/YUV Capture"), Some("Sensor B"), &[FourCc::RGB24], &mut pads).unwrap();
        assert_eq!(p.source_name, "Sensor B");
        assert_eq!(
            pads.links,
            vec![((id("Debayer A"), 1), (id("Scaler"), 0), false), ((id("Debayer B"), 1), (id("Scaler"), 0), true)],
            "the old link off before the new one on"
        );
        assert_eq!(p.links_changed, ["Debayer A:1 → Scaler:0 off", "Debayer B:1 → Scaler:0 on"]);
        // The RGB input reaches the scaler directly: two hops.
        let mut pads = vimc_pads(&t);
        let p = configure(&t, id("RGB/YUV Capture"), Some("RGB/YUV Input"), &[FourCc::RGB24], &mut pads).unwrap();
        assert_eq!(p.hops.len(), 2);
        assert_eq!(p.hops[0].format.code, mbus::RGB888_1X24);
    }

    #[test]
    fn unknown_or_unreachable_sources_are_named() {
        let t = vimc();
        let id = |n: &str| t.entity_named(n).unwrap().id;
        let err = plan_path(&t, id("RGB/YUV Capture"), Some("Sensor C")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("Sensor C") && msg.contains("\"Sensor A\"") && msg.contains("\"RGB/YUV Input\""), "{msg}");
        // Raw Capture 0 is fed by Sensor A only.
        let path = plan_path(&t, id("Raw Capture 0"), None).unwrap();
        assert_eq!(path.len(), 1);
        assert!(matches!(plan_path(&t, 99, None), Err(PipelineError::NotInGraph)));
        // A capture entity with nothing linked into it.
        let lonely = graph(&[("cap", ENT_F_IO_V4L, 1, 0)], &[]);
        assert!(matches!(plan_path(&lonely, 1, None), Err(PipelineError::NoSource { .. })));
    }

    #[test]
    fn an_immutable_link_in_the_way_is_refused_not_forced() {
        let t = graph(
            &[("a", ENT_F_CAM_SENSOR, 0, 1), ("b", ENT_F_CAM_SENSOR, 0, 1), ("cap", ENT_F_IO_V4L, 1, 0)],
            &[(("a", 0), ("cap", 0), FIXED), (("b", 0), ("cap", 0), 0)],
        );
        let mut pads = FakePads::default();
        let err = configure(&t, 3, Some("b"), &[FourCc::RGB24], &mut pads).unwrap_err();
        assert!(matches!(err, PipelineError::ImmutableLink { .. }), "{err}");
        assert!(pads.links.is_empty(), "nothing switched");
    }

    /// The Pi's graph: tc358743 → unicam (sink 0, image source 1) → unicam-image.
    fn pi() -> (Topology, FakePads) {
        let t = graph(
            &[
                ("tc358743 10-000f", ENT_F_VID_IF_BRIDGE, 0, 1),
                ("unicam", 0, 1, 2),
                ("unicam-image", ENT_F_IO_V4L, 1, 0),
                ("unicam-embedded", ENT_F_IO_V4L, 1, 0),
            ],
            &[
                (("tc358743 10-000f", 0), ("unicam", 0), FIXED),
                (("unicam", 1), ("unicam-image", 0), FIXED),
                (("unicam", 2), ("unicam-embedded", 0), FIXED),
            ],
        );
        let mut f = FakePads::default();
        f.codes.insert((1, 0), vec![mbus::RGB888_1X24, mbus::UYVY8_1X16]);
        let unicam = vec![mbus::RGB888_1X24, mbus::UYVY8_1X16, mbus::YUYV8_1X16, mbus::SRGGB8_1X8];
        f.codes.insert((2, 0), unicam.clone());
        f.codes.insert((2, 1), unicam);
        f.propagate.insert(2, None);
        f.signal.insert(1, SourceSignal::Locked(1920, 1080));
        (t, f)
    }

    #[test]
    fn a_bridge_gets_its_timings_size_and_yuv_on_every_hop() {
        let (t, mut pads) = pi();
        let p = configure(&t, 3, None, &[FourCc::UYVY, FourCc::RGB24, FourCc::YUYV], &mut pads).unwrap();
        assert!(p.has_timings);
        assert_eq!(p.source_name, "tc358743 10-000f");
        assert_eq!((p.fourcc, p.width, p.height), (FourCc::UYVY, 1920, 1080), "{p}");
        assert_eq!(p.hops[0].format.code, mbus::UYVY8_1X16, "YUV 4:2:2 preferred over RGB");
        assert_eq!(p.hops[1].format, p.hops[0].format, "unicam's source follows its sink");
        // Without UYVY on the node, RGB all the way.
        let (t, mut pads) = pi();
        let p = configure(&t, 3, None, &[FourCc::RGB24], &mut pads).unwrap();
        assert_eq!((p.fourcc, p.hops[0].format.code), (FourCc::RGB24, mbus::RGB888_1X24));
    }

    #[test]
    fn a_bridge_without_signal_or_a_pad_that_refuses_is_an_error() {
        let (t, mut pads) = pi();
        pads.signal.insert(1, SourceSignal::NoSignal(DvTimingsStatus::NoSignal));
        let err = configure(&t, 3, None, &[FourCc::UYVY], &mut pads).unwrap_err();
        assert!(matches!(err, PipelineError::NoSignal { .. }), "{err}");
        // A capture node offering nothing we convert: no common format at the last hop.
        let (t, mut pads) = pi();
        let err = configure(&t, 3, None, &[FourCc::new(b"BA81")], &mut pads).unwrap_err();
        assert!(matches!(err, PipelineError::NoCommonFormat { .. }), "{err}");
        // unicam's sink keeping another code than the bridge sends.
        let (t, mut pads) = pi();
        pads.codes.insert((2, 0), vec![mbus::SRGGB8_1X8]);
        let err = configure(&t, 3, None, &[FourCc::UYVY], &mut pads).unwrap_err();
        assert!(matches!(err, PipelineError::NoCommonFormat { .. }), "{err}");
    }

    #[test]
    fn a_connector_before_the_bridge_is_not_the_source() {
        // adv76xx-style: an HDMI connector entity feeds the bridge's sink pad.
        let t = graph(
            &[
                ("HDMI in", 0x0003_0001, 0, 1),
                ("adv7611 1-004c", ENT_F_VID_IF_BRIDGE, 1, 1),
                ("capture", ENT_F_IO_V4L, 1, 0),
            ],
            &[(("HDMI in", 0), ("adv7611 1-004c", 0), FIXED), (("adv7611 1-004c", 1), ("capture", 0), FIXED)],
        );
        let path = plan_path(&t, 3, None).unwrap();
        assert_eq!(path.len(), 1, "the bridge is the source: {path:?}");
        assert_eq!(t.pad(path[0].source).unwrap().entity, 2);
        assert!(plan_path(&t, 3, Some("adv7611 1-004c")).is_ok());
    }

    #[test]
    fn codes_map_to_the_pixel_formats_we_convert() {
        assert_eq!(fourcc_for_code(mbus::UYVY8_1X16), Some(FourCc::UYVY));
        assert_eq!(fourcc_for_code(mbus::YUYV8_2X8), Some(FourCc::YUYV));
        assert_eq!(fourcc_for_code(mbus::RGB888_1X24), Some(FourCc::RGB24));
        assert_eq!(fourcc_for_code(mbus::SRGGB8_1X8), None, "Bayer needs a debayer first");
        assert!(is_mc_centric(0x2000_0000 | 1) && !is_mc_centric(1));
    }
}
