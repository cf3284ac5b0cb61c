//! The phone as the appliance sees it: HID reports going out, video frames coming in.
//!
//! Device models sit behind traits ([`hid::HidSink`], [`video::FrameSource`]) so that the
//! virtual iPhone ([`sim`]) and real hardware plug into the daemon the same way. Only the
//! daemon owns these objects.

pub mod boot;
pub mod calibration;
pub mod geometry;
pub mod hid;
pub mod input;
pub mod inventory;
pub mod ocr;
pub mod sim;
pub mod video;
