//! Video: frames from the phone's screen and the sources that produce them.
//!
//! A [`FrameSource`] (V4L2 capture on the appliance, the sim's renderer otherwise) publishes
//! into a [`FrameHub`]: the latest frame for screenshots plus the signal state for `status`.

#[cfg(target_os = "linux")]
pub mod capture;
pub mod codec;
pub mod convert;
pub mod decode;
pub mod edid;
pub mod encode;
mod frame;
pub mod image;
pub mod luma;
#[cfg(target_os = "linux")]
pub mod m2m;
#[cfg(target_os = "linux")]
pub mod pipeline;
pub mod record;
pub mod replay;
#[cfg(target_os = "linux")]
pub mod v4l2;
pub mod viewers;

pub use frame::{
    CaptureDevice, Captured, Compression, EncodedFrame, Frame, FrameHub, FrameReader, FrameSource, NoVideo,
    PixelFormat, Signal, SourceGuard, TapMessage, TapReceiver, VideoError, VideoState, PENDING_AUS, PENDING_BYTES,
    PIXEL_DEMAND_WINDOW,
};
