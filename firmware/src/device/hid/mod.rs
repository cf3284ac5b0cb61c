//! USB HID: report encoding and the sinks reports are written to.
//!
//! `report` is pure encoding (no I/O); `sink` defines where reports go: the virtual iPhone,
//! a recorder for tests, and (on the appliance) `/dev/hidgN`.

pub mod descriptor;
#[cfg(target_os = "linux")]
pub mod gadget;
#[cfg(target_os = "linux")]
pub mod hidg;
mod keymap;
mod report;
mod sink;

pub use keymap::{
    named_key, KeyStroke, Keymap, Layout, UntypeableText, MOD_ALT, MOD_CTRL, MOD_GUI, MOD_OPTION, MOD_SHIFT,
};
pub use report::{
    ConsumerReport, EncodedReport, HidInterface, HidReport, KeyboardReport, MouseReport, PointerReport, POINTER_MAX,
    POINTER_MIN,
};
pub use sink::{BoxFuture, HidError, HidSink, HostState, RecordedReport, RecordingSink};
