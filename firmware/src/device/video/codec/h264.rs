//! Software H.264 encoding with openh264: constrained baseline, IDR (with SPS/PPS) on
//! request and every N seconds, fixed bitrate and frame rate from config.

use std::sync::Arc;
use std::time::Instant;

use openh264::encoder::{
    BitRate, Complexity, Encoder, EncoderConfig, FrameRate, FrameType, IntraFramePeriod, Profile, UsageType,
};
use openh264::formats::{RgbSliceU8, YUVBuffer, YUVSlices};
use openh264::OpenH264API;
use serde::{Deserialize, Serialize};

use crate::device::video::convert::{nv12_to_i420, rgb_to_i420};
use crate::device::video::{Frame, PixelFormat};

/// Encoder settings (config `[encoder]`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EncoderSettings {
    /// Target bitrate in bits per second.
    pub bitrate_bps: u32,
    /// Frame rate the stream is encoded for.
    pub fps: f32,
    /// An IDR at least this often, in seconds (viewers that lost data recover by then).
    pub idr_interval_s: u32,
}

impl Default for EncoderSettings {
    fn default() -> Self {
        EncoderSettings { bitrate_bps: 4_000_000, fps: 30.0, idr_interval_s: 2 }
    }
}

/// One encoded picture in Annex B form.
#[derive(Debug, Clone)]
pub struct AccessUnit {
    /// Annex B bytes; IDRs carry SPS and PPS.
    pub data: Arc<[u8]>,
    /// Whether this is an IDR.
    pub keyframe: bool,
    /// The source frame's generation.
    pub generation: u32,
    /// The source frame's sequence.
    pub frame_id: u64,
    /// When the source frame was captured.
    pub captured_at: Instant,
}

/// Errors encoding.
#[derive(Debug, thiserror::Error)]
pub enum EncoderError {
    /// openh264 refused the configuration or a frame.
    #[error("openh264: {0}")]
    OpenH264(String),
    /// The hardware (V4L2 M2M) encoder failed.
    #[error("hardware encoder: {0}")]
    Hardware(String),
    /// The frame cannot be encoded as is.
    #[error("cannot encode a {width}x{height} frame: {why}")]
    Frame {
        /// Width.
        width: u32,
        /// Height.
        height: u32,
        /// Why.
        why: &'static str,
    },
}

/// Checks that `frame` is a whole picture of the encoder's `size`; returns the size.
pub(super) fn check_frame(frame: &Frame, size: (u32, u32)) -> Result<(u32, u32), EncoderError> {
    let (w, h) = (frame.width, frame.height);
    if (w, h) != size {
        return Err(EncoderError::Frame { width: w, height: h, why: "size differs from the encoder's" });
    }
    if frame.format.frame_len(w, h) != Some(frame.data.len()) {
        return Err(EncoderError::Frame { width: w, height: h, why: "data length does not match the size" });
    }
    Ok((w, h))
}

/// The frame as tight I420 (what encoders take). The frame was checked by [`check_frame`].
pub(super) fn frame_i420(frame: &Frame) -> Result<Vec<u8>, EncoderError> {
    let (w, h) = (frame.width as usize, frame.height as usize);
    match frame.format {
        PixelFormat::Rgb24 => Ok(rgb_to_i420(&frame.data, w, h)),
        PixelFormat::Nv12 => nv12_to_i420(&frame.data, w, h).ok_or(EncoderError::Frame {
            width: frame.width,
            height: frame.height,
            why: "NV12 data length does not match the size",
        }),
    }
}

/// The software encoder, bound to one frame size (a new size needs a new encoder).
pub struct SoftwareH264 {
    encoder: Encoder,
    width: u32,
    height: u32,
}

impl std::fmt::Debug for SoftwareH264 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftwareH264").field("width", &self.width).field("height", &self.height).finish_non_exhaustive()
    }
}

impl SoftwareH264 {
    /// An encoder for `width`x`height` frames (both even, at most 3840x2160).
    pub fn new(width: u32, height: u32, s: EncoderSettings) -> Result<SoftwareH264, EncoderError> {
        if !width.is_multiple_of(2)
            || !height.is_multiple_of(2)
            || width == 0
            || height == 0
            || width > 3840
            || height > 2160
        {
            return Err(EncoderError::Frame { width, height, why: "sizes must be even, non-zero, at most 3840x2160" });
        }
        let period = (s.fps.max(1.0) * s.idr_interval_s.max(1) as f32).round();
        // A few seconds at most a few hundred fps: well inside u32.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let period = period as u32;
        let config = EncoderConfig::new()
            .profile(Profile::Baseline)
            .usage_type(UsageType::CameraVideoRealTime)
            // Live viewing on a small board: speed over compression (a phone's screen is
            // mostly flat colour, which costs few bits at any effort).
            .complexity(Complexity::Low)
            .bitrate(BitRate::from_bps(s.bitrate_bps))
            .max_frame_rate(FrameRate::from_hz(s.fps))
            // The default skips frames to meet the bitrate, which produced empty frames.
            .skip_frames(false)
            .intra_frame_period(IntraFramePeriod::from_num_frames(period));
        let encoder = Encoder::with_api_config(OpenH264API::from_source(), config)
            .map_err(|e| EncoderError::OpenH264(e.to_string()))?;
        Ok(SoftwareH264 { encoder, width, height })
    }

    /// The frame size this encoder takes.
    pub fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    /// Makes the next picture an IDR (a viewer joined or lost data).
    pub fn request_keyframe(&mut self) {
        self.encoder.force_intra_frame();
    }

    /// Encodes one frame; `None` when the encoder produced nothing for it.
    pub fn encode(&mut self, frame: &Frame) -> Result<Option<AccessUnit>, EncoderError> {
        let (w, h) = check_frame(frame, (self.width, self.height))?;
        let (w, h) = (w as usize, h as usize);
        // Sizes were checked even and the lengths match, so the wrappers' assertions hold.
        let encoded = match frame.format {
            PixelFormat::Rgb24 => {
                self.encoder.encode(&YUVBuffer::from_rgb_source(RgbSliceU8::new(&frame.data, (w, h))))
            }
            PixelFormat::Nv12 => {
                // The luma plane is used in place; only chroma is de-interleaved.
                let (luma, chroma) = frame.data.split_at(w * h);
                let (u, v): (Vec<u8>, Vec<u8>) = chroma.chunks_exact(2).map(|p| (p[0], p[1])).unzip();
                self.encoder.encode(&YUVSlices::new((luma, &u, &v), (w, h), (w, w / 2, w / 2)))
            }
        };
        let stream = encoded.map_err(|e| EncoderError::OpenH264(e.to_string()))?;
        let keyframe = matches!(stream.frame_type(), FrameType::IDR);
        if matches!(stream.frame_type(), FrameType::Skip | FrameType::Invalid) {
            return Ok(None);
        }
        let data = stream.to_vec();
        if data.is_empty() {
            return Ok(None);
        }
        Ok(Some(AccessUnit {
            data: Arc::from(data),
            keyframe,
            generation: frame.generation,
            frame_id: frame.sequence,
            captured_at: frame.captured_at,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::super::nal_types;
    use super::*;

    fn frame(seq: u64, w: u32, h: u32) -> Frame {
        let data: Vec<u8> = (0..w * h * 3).map(|i| u8::try_from((i as u64 + seq * 7) % 251).unwrap()).collect();
        Frame::rgb(1, seq, w, h, data)
    }

    #[test]
    fn first_picture_is_an_idr_with_sps_pps_and_keyframes_come_on_request() {
        let mut enc = SoftwareH264::new(64, 48, EncoderSettings { idr_interval_s: 100, ..Default::default() }).unwrap();
        let first = enc.encode(&frame(1, 64, 48)).unwrap().unwrap();
        assert!(first.keyframe);
        let types = nal_types(&first.data);
        assert!(types.contains(&7) && types.contains(&8) && types.contains(&5), "{types:?}");
        let second = enc.encode(&frame(2, 64, 48)).unwrap().unwrap();
        assert!(!second.keyframe);
        enc.request_keyframe();
        let third = enc.encode(&frame(3, 64, 48)).unwrap().unwrap();
        assert!(third.keyframe, "forced IDR");
    }

    #[test]
    fn bad_sizes_are_errors_not_panics() {
        assert!(SoftwareH264::new(63, 48, EncoderSettings::default()).is_err());
        let mut enc = SoftwareH264::new(64, 48, EncoderSettings::default()).unwrap();
        assert!(enc.encode(&frame(1, 32, 48)).is_err());
    }
}
