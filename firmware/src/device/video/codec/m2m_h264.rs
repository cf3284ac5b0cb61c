//! Hardware H.264 encoding through a V4L2 stateful M2M encoder (the Raspberry Pi's
//! bcm2835-codec, Rockchip's encoders): I420 in, Annex B out. Stream headers that the driver
//! returns in a buffer of their own are joined to the picture that follows, and repeated
//! before every IDR so that a viewer joining late can decode.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::annexb::nal_types;
use super::h264::{check_frame, frame_i420, AccessUnit, EncoderError, EncoderSettings};
use crate::device::video::convert::pad_i420;
use crate::device::video::m2m::{find_node, M2mCodec};
use crate::device::video::v4l2::FourCc;
use crate::device::video::Frame;

/// `V4L2_PIX_FMT_YUV420` (I420).
const YU12: FourCc = FourCc::new(b"YU12");

/// Codec controls (`linux/v4l2-controls.h`).
mod cid {
    pub const BITRATE: u32 = 0x0099_09cf;
    pub const REPEAT_SEQ_HEADER: u32 = 0x0099_09e2;
    pub const FORCE_KEY_FRAME: u32 = 0x0099_09e5;
    pub const H264_I_PERIOD: u32 = 0x0099_0a66;
    pub const H264_PROFILE: u32 = 0x0099_0a6b;
    /// `V4L2_MPEG_VIDEO_H264_PROFILE_CONSTRAINED_BASELINE`.
    pub const PROFILE_CONSTRAINED_BASELINE: i32 = 1;
}

/// The first M2M node that encodes I420 to H.264, if the board has one.
pub fn find_hardware_h264() -> Option<PathBuf> {
    find_node(YU12, FourCc::H264)
}

/// Whether the buffer holds a coded picture (a VCL NAL unit, types 1–5).
fn has_picture(types: &[u8]) -> bool {
    types.iter().any(|t| (1..=5).contains(t))
}

/// A hardware encoder session bound to one frame size.
#[derive(Debug)]
pub struct HardwareH264 {
    codec: M2mCodec,
    width: u32,
    height: u32,
    /// The latest SPS/PPS the driver produced, repeated before IDRs that lack them.
    headers: Vec<u8>,
}

impl HardwareH264 {
    /// A session on `node` for `width`x`height` frames.
    pub fn new(node: &Path, width: u32, height: u32, s: EncoderSettings) -> Result<HardwareH264, EncoderError> {
        let period = (s.fps.max(1.0) * s.idr_interval_s.max(1) as f32).round();
        // A few seconds at most a few hundred fps: well inside i32.
        #[allow(clippy::cast_possible_truncation)]
        let period = period as i32;
        let controls = [
            (cid::H264_PROFILE, cid::PROFILE_CONSTRAINED_BASELINE),
            (cid::BITRATE, i32::try_from(s.bitrate_bps).unwrap_or(i32::MAX)),
            (cid::H264_I_PERIOD, period),
            (cid::REPEAT_SEQ_HEADER, 1),
        ];
        let codec = M2mCodec::encoder(node, YU12, FourCc::H264, width, height, &controls)
            .map_err(|e| EncoderError::Hardware(e.to_string()))?;
        Ok(HardwareH264 { codec, width, height, headers: Vec::new() })
    }

    /// The frame size this session takes.
    pub fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    /// Makes the next picture an IDR.
    pub fn request_keyframe(&mut self) {
        if let Err(e) = self.codec.set_control(cid::FORCE_KEY_FRAME, 1) {
            tracing::debug!(error = %e, "the hardware encoder cannot force a key frame");
        }
    }

    /// Encodes one frame.
    pub fn encode(&mut self, frame: &Frame) -> Result<Option<AccessUnit>, EncoderError> {
        let (w, h) = check_frame(frame, (self.width, self.height))?;
        let mut i420 = frame_i420(frame)?;
        if let Some(layout) =
            self.codec.output_format().filter(|f| (f.width, f.height) != (w, h) || f.bytes_per_line != w)
        {
            let stride = layout.bytes_per_line.max(layout.width) as usize;
            i420 = pad_i420(&i420, w as usize, h as usize, stride, layout.height as usize);
        }
        let hw = |e: crate::device::video::m2m::M2mError| EncoderError::Hardware(e.to_string());
        self.codec.send(&i420).map_err(hw)?;
        let mut data = self.codec.receive().map_err(hw)?;
        let mut types = nal_types(&data);
        if !has_picture(&types) {
            // Headers alone (bcm2835-codec's first buffer): the picture follows.
            self.headers.clone_from(&data);
            let picture = self.codec.receive().map_err(hw)?;
            data.extend_from_slice(&picture);
            types = nal_types(&data);
        }
        Ok(join_unit(&mut self.headers, data, &types).map(|(data, keyframe)| AccessUnit {
            data: Arc::from(data),
            keyframe,
            generation: frame.generation,
            frame_id: frame.sequence,
            captured_at: frame.captured_at,
        }))
    }
}

/// Remembers stream headers and puts them in front of an IDR that lacks them; returns the
/// unit and whether it is a key frame, or `None` when there is no picture in it. `types` are
/// `nal_types(&data)`. Public for the fuzz target `h264_split` (the driver's buffers are
/// untrusted bytes).
pub fn join_unit(headers: &mut Vec<u8>, data: Vec<u8>, types: &[u8]) -> Option<(Vec<u8>, bool)> {
    if !has_picture(types) {
        return None;
    }
    let keyframe = types.contains(&5);
    let has_headers = types.contains(&7) && types.contains(&8);
    if has_headers {
        // Keep everything before the first picture NAL as the current headers.
        let first_vcl = first_vcl_offset(&data).unwrap_or(data.len());
        headers.clear();
        headers.extend_from_slice(&data[..first_vcl]);
        return Some((data, keyframe));
    }
    if keyframe && !headers.is_empty() {
        let mut joined = headers.clone();
        joined.extend_from_slice(&data);
        return Some((joined, true));
    }
    Some((data, keyframe))
}

/// Offset of the start code of the first VCL NAL unit.
fn first_vcl_offset(data: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i + 3 < data.len() {
        if data[i..i + 3] == [0, 0, 1] {
            if (1..=5).contains(&(data[i + 3] & 0x1f)) {
                // Include a 4-byte start code's leading zero.
                return Some(if i > 0 && data[i - 1] == 0 { i - 1 } else { i });
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nal(t: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![0, 0, 0, 1, t];
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn headers_are_remembered_and_put_in_front_of_bare_idrs() {
        let mut headers = Vec::new();
        let sps_pps = [nal(0x67, &[1, 2]), nal(0x68, &[3])].concat();
        let idr = nal(0x65, &[9, 9, 9]);
        let first = [sps_pps.clone(), idr.clone()].concat();
        let (unit, key) = join_unit(&mut headers, first.clone(), &nal_types(&first)).unwrap();
        assert!(key);
        assert_eq!(unit, first);
        assert_eq!(headers, sps_pps, "headers are what precedes the picture");
        // A P picture passes through untouched.
        let p = nal(0x41, &[7]);
        let (unit, key) = join_unit(&mut headers, p.clone(), &nal_types(&p)).unwrap();
        assert!(!key);
        assert_eq!(unit, p);
        // A later IDR without headers gets them in front.
        let (unit, key) = join_unit(&mut headers, idr.clone(), &nal_types(&idr)).unwrap();
        assert!(key);
        assert_eq!(unit, [sps_pps, idr].concat());
        assert_eq!(nal_types(&unit), vec![7, 8, 5]);
    }

    #[test]
    fn buffers_without_a_picture_are_not_units() {
        let mut headers = Vec::new();
        let only = [nal(0x67, &[1]), nal(0x68, &[2])].concat();
        assert!(join_unit(&mut headers, only.clone(), &nal_types(&only)).is_none());
        assert!(!has_picture(&nal_types(&only)));
        assert!(has_picture(&nal_types(&nal(0x41, &[1]))));
    }

    #[test]
    fn a_missing_node_is_an_error_not_a_panic() {
        let err = HardwareH264::new(Path::new("/dev/null"), 64, 48, EncoderSettings::default()).unwrap_err();
        assert!(matches!(err, EncoderError::Hardware(_)), "{err}");
    }
}
