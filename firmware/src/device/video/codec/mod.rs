//! Codecs. Today: the software H.264 encoder (openh264) for viewers. Hardware M2M codecs
//! (Pi bcm2835-codec) and the MJPEG/H.264 decoders for capture arrive next.
//!
//! Note on licensing: Cisco's H.264 patent licence covers only its prebuilt binary; this
//! build compiles openh264 from source (see README).

mod h264;

pub use h264::{AccessUnit, EncoderError, EncoderSettings, SoftwareH264};
