//! Our own typed V4L2 layer over `nix` ioctls (the `v4l` crate cannot do multi-planar, M2M,
//! DV timings, EDID or events, and needs libclang to build).
//!
//! Three layers, bottom up: `raw` (the kernel's structs, layouts pinned and tested against
//! the C header), `ioctl` (private request numbers), `device` (safe, typed calls).

mod device;
mod ioctl;
pub mod raw;

pub use device::{
    BufType, Capability, Dequeued, DvTimings, DvTimingsStatus, Event, FormatDesc, FourCc, MappedBuffer, PixFormat,
    V4l2Device, V4l2Error, EVENT_EOS, EVENT_SOURCE_CHANGE,
};
