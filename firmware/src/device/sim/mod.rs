//! The virtual iPhone.
//!
//! It consumes exactly the HID report bytes the real gadget would write (through
//! [`SimHid`], a [`HidSink`](crate::device::hid::HidSink)) and renders frames of its screen
//! pillarboxed inside a capture frame like a real HDMI mirror (through [`SimDisplay`], a
//! [`FrameSource`](crate::device::video::FrameSource)). The pointer glides like iOS's
//! AssistiveTouch pointer, so pressing too early lands on the old spot.
//!
//! It looks and behaves like iOS: a status bar, a home screen of named apps, Spotlight,
//! apps (each a small file under `apps/`), alerts, text drawn with a real font.

mod alert;
mod apps;
mod display;
mod phone;
mod spotlight;
mod text;
mod ui;

pub use alert::Alert;
pub use apps::APP_NAMES;
pub use display::SimDisplay;
pub use phone::{PhoneSnapshot, SimConfig, SimHid, SimPhone, SimState};
pub use ui::{
    Element, ElementKind, Rect, Scene, Screen, Touch, TouchKind, CARET_HALF_PERIOD_MS, CLOSE_MS, LOAD_MS, OPEN_MS,
    PUSH_MS, SCROLL_MS,
};
