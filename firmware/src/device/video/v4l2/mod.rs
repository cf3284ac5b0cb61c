//! Our own typed V4L2 layer over `nix` ioctls (the `v4l` crate cannot do multi-planar, M2M,
//! DV timings, EDID or events, and needs libclang to build).
//!
//! Three layers, bottom up: `raw` (the kernel's structs, layouts pinned and tested against
//! the C header), `ioctl` (private request numbers), `device` (safe, typed calls).

mod device;
mod ioctl;
pub mod raw;

pub use device::{
    BufType, BufferPlanes, Capability, Dequeued, DvTimings, DvTimingsStatus, Event, FormatDesc, FourCc, MappedBuffer,
    Payload, PixFormat, Rect, V4l2Device, V4l2Error, CAP_VIDEO_CAPTURE, CAP_VIDEO_CAPTURE_MPLANE, CAP_VIDEO_M2M,
    CAP_VIDEO_M2M_MPLANE, CAP_VIDEO_OUTPUT, CAP_VIDEO_OUTPUT_MPLANE, EVENT_EOS, EVENT_SOURCE_CHANGE, SEL_TGT_COMPOSE,
    SEL_TGT_CROP,
};
