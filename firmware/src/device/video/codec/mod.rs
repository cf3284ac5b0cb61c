//! Codecs: H.264 for viewers in hardware (V4L2 M2M: the Pi's bcm2835-codec) or software
//! (openh264); decoders for compressed capture: MJPEG (zune-jpeg) and H.264 (a stateful
//! M2M decoder, a stateless request-API decoder such as rkvdec, or openh264).
//!
//! Note on licensing: Cisco's H.264 patent licence covers only its prebuilt binary; this
//! build compiles openh264 from source (see README).

pub mod annexb;
mod h264;
mod h264_decode;
pub mod h264_dpb;
pub mod h264_syntax;
mod m2m_decode;
mod m2m_h264;
mod mjpeg;
pub mod stateless_h264;

pub use annexb::{access_units, nal_types, ParameterSets, Prepared};
pub use m2m_decode::{find_hardware_decoder, HardwareDecoder};
pub use m2m_h264::{find_hardware_h264, join_unit, HardwareH264};
pub use stateless_h264::{find_stateless_h264, DecodeMode, StatelessH264};

/// Hardware or software codec (config `encoder_backend` / `decoder_backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CodecChoice {
    /// Hardware when the board has it, software otherwise.
    #[default]
    Auto,
    /// The board's V4L2 M2M codec; starting fails without one.
    Hardware,
    /// openh264 / zune-jpeg.
    Software,
}

pub use h264::{AccessUnit, EncoderError, EncoderSettings, SoftwareH264};
pub use h264_decode::{DecoderError, SoftwareH264Decoder};
pub use mjpeg::{check_capture_frame, decode_mjpeg, mjpeg_size, with_huffman_tables, MjpegError, STANDARD_DHT};
