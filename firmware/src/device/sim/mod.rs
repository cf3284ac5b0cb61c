//! The virtual iPhone.
//!
//! It consumes exactly the HID report bytes the real gadget would write (through
//! [`SimHid`], a [`HidSink`](crate::device::hid::HidSink)) and renders frames of its screen
//! pillarboxed inside a capture frame like a real HDMI mirror (through [`SimDisplay`], a
//! [`FrameSource`](crate::device::video::FrameSource)).

mod display;
mod phone;

pub use display::SimDisplay;
pub use phone::{PhoneSnapshot, SimConfig, SimHid, SimPhone};
