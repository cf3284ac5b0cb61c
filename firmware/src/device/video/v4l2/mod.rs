//! Our own typed V4L2 layer over `nix` ioctls (the `v4l` crate cannot do multi-planar, M2M,
//! DV timings, EDID or events, and needs libclang to build).
//!
//! Three layers, bottom up: `raw` (the kernel's structs, layouts pinned and tested against
//! the C header), `ioctl` (private request numbers), `device` and `media` (safe, typed
//! calls; `media` is the media controller and its requests, for stateless codecs).

mod device;
mod ioctl;
mod media;
pub mod raw;
mod subdev;
pub mod topology;

pub use device::{
    BufType, BufferPlanes, Capability, CompoundControl, Dequeued, DvTimings, DvTimingsStatus, Event, ExtControl,
    ExtControlInfo, FormatDesc, FourCc, MappedBuffer, Payload, PixFormat, Readiness, Rect, V4l2Device, V4l2Error,
    BUF_CAP_SUPPORTS_M2M_HOLD_CAPTURE_BUF, BUF_CAP_SUPPORTS_REQUESTS, CAP_VIDEO_CAPTURE, CAP_VIDEO_CAPTURE_MPLANE,
    CAP_VIDEO_M2M, CAP_VIDEO_M2M_MPLANE, CAP_VIDEO_OUTPUT, CAP_VIDEO_OUTPUT_MPLANE, EVENT_EOS, EVENT_SOURCE_CHANGE,
    SEL_TGT_COMPOSE, SEL_TGT_CROP,
};
pub use media::{media_device_for, MediaDevice, MediaInfo, Request};
pub use subdev::{mbus, mbus_code_name, MbusFormat, Subdev};
