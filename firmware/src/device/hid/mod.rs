//! USB HID: report encoding and the sinks reports are written to.
//!
//! `report` is pure encoding (no I/O); `sink` defines where reports go: the virtual iPhone,
//! a recorder for tests, and (on the appliance) `/dev/hidgN`.

mod report;
mod sink;

pub use report::{
    ConsumerReport, EncodedReport, HidInterface, HidReport, KeyboardReport, MouseReport,
    PointerReport, POINTER_MAX, POINTER_MIN,
};
pub use sink::{BoxFuture, HidError, HidSink, HostState, RecordedReport, RecordingSink};
