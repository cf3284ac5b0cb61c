//! Codecs. Today: the software H.264 encoder (openh264) for viewers and the MJPEG decoder
//! (zune-jpeg) for UVC dongles. Hardware M2M codecs (Pi bcm2835-codec) and H.264 capture
//! decoding arrive next.
//!
//! Note on licensing: Cisco's H.264 patent licence covers only its prebuilt binary; this
//! build compiles openh264 from source (see README).

mod h264;
mod h264_decode;
mod mjpeg;

pub use h264::{AccessUnit, EncoderError, EncoderSettings, SoftwareH264};
pub use h264_decode::{DecoderError, SoftwareH264Decoder};
pub use mjpeg::{decode_mjpeg, with_huffman_tables, MjpegError, STANDARD_DHT};
