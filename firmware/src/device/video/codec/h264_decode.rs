//! Software H.264 decoding (openh264), for capture devices that send H.264: screenshots
//! need the raw picture.

use openh264::decoder::Decoder;
use openh264::formats::YUVSource;

/// Errors decoding H.264.
#[derive(Debug, thiserror::Error)]
pub enum DecoderError {
    /// openh264 rejected the stream or failed to start.
    #[error("openh264: {0}")]
    OpenH264(String),
    /// The hardware (V4L2 M2M) decoder failed.
    #[error("hardware decoder: {0}")]
    Hardware(String),
}

/// A stateful decoder for one H.264 stream (Annex B access units in order).
pub struct SoftwareH264Decoder {
    decoder: Decoder,
}

impl std::fmt::Debug for SoftwareH264Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftwareH264Decoder").finish_non_exhaustive()
    }
}

impl SoftwareH264Decoder {
    /// A decoder waiting for SPS/PPS and an IDR.
    pub fn new() -> Result<SoftwareH264Decoder, DecoderError> {
        Ok(SoftwareH264Decoder { decoder: Decoder::new().map_err(|e| DecoderError::OpenH264(e.to_string()))? })
    }

    /// Decodes one access unit; `None` until a picture is complete (e.g. before the first
    /// IDR). Returns (width, height, RGB24).
    pub fn decode(&mut self, access_unit: &[u8]) -> Result<Option<(u32, u32, Vec<u8>)>, DecoderError> {
        self.decode_to(access_unit, true)
    }

    /// Like [`SoftwareH264Decoder::decode`], but converts the picture to RGB only when
    /// `want`: catching up on a run of access units needs only the last one's pixels.
    pub fn decode_to(&mut self, access_unit: &[u8], want: bool) -> Result<Option<(u32, u32, Vec<u8>)>, DecoderError> {
        let Some(yuv) = self.decoder.decode(access_unit).map_err(|e| DecoderError::OpenH264(e.to_string()))? else {
            return Ok(None);
        };
        let (w, h) = yuv.dimensions();
        if w == 0 || h == 0 || !want {
            return Ok(None);
        }
        let mut rgb = vec![0u8; w * h * 3];
        // The buffer is exactly w*h*3 and openh264 decodes to I420, as write_rgb8 requires.
        yuv.write_rgb8(&mut rgb);
        let (w, h) = (u32::try_from(w).unwrap_or(0), u32::try_from(h).unwrap_or(0));
        Ok(Some((w, h, rgb)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::video::codec::{EncoderSettings, SoftwareH264};
    use crate::device::video::Frame;

    #[test]
    fn decodes_what_the_encoder_made() {
        let (w, h) = (64u32, 48u32);
        // Smooth content so the lossy round trip stays close.
        let data: Vec<u8> = (0..h)
            .flat_map(|y| (0..w).flat_map(move |x| [u8::try_from(x * 3).unwrap(), u8::try_from(y * 4).unwrap(), 128]))
            .collect();
        let frame = Frame::rgb(1, 1, w, h, data.clone());
        let mut enc =
            SoftwareH264::new(w, h, EncoderSettings { bitrate_bps: 2_000_000, ..Default::default() }).unwrap();
        let au = enc.encode(&frame).unwrap().unwrap();
        let mut dec = SoftwareH264Decoder::new().unwrap();
        let (dw, dh, rgb) = dec.decode(&au.data).unwrap().expect("an IDR decodes to a picture");
        assert_eq!((dw, dh), (w, h));
        let mean_err = rgb.iter().zip(&data).map(|(a, b)| u64::from(a.abs_diff(*b))).sum::<u64>() / rgb.len() as u64;
        assert!(mean_err < 12, "mean error {mean_err}");
        assert!(dec.decode(b"\x00\x00\x00\x01garbage").map_or(true, |p| p.is_none()));
    }

    #[test]
    fn nv12_frames_encode_to_the_same_picture() {
        let (w, h) = (64usize, 48usize);
        // Smooth luma, one colour of chroma: what the sim draws.
        let mut data: Vec<u8> = (0..h).flat_map(|y| (0..w).map(move |x| u8::try_from(40 + x + y).unwrap())).collect();
        data.extend(std::iter::repeat_n([90u8, 180], w * h / 4).flatten());
        let frame = Frame {
            format: crate::device::video::PixelFormat::Nv12,
            data: data.into(),
            ..Frame::rgb(1, 1, 64, 48, vec![0; w * h * 3])
        };
        let mut want = vec![0u8; w * h * 3];
        for (y, row) in want.chunks_exact_mut(w * 3).enumerate() {
            assert!(frame.row_rgb(u32::try_from(y).unwrap(), 0, 64, row));
        }
        let mut enc =
            SoftwareH264::new(64, 48, EncoderSettings { bitrate_bps: 2_000_000, ..Default::default() }).unwrap();
        let au = enc.encode(&frame).unwrap().unwrap();
        let (_, _, rgb) = SoftwareH264Decoder::new().unwrap().decode(&au.data).unwrap().unwrap();
        let mean_err = rgb.iter().zip(&want).map(|(a, b)| u64::from(a.abs_diff(*b))).sum::<u64>() / rgb.len() as u64;
        assert!(mean_err < 6, "mean error {mean_err}");
    }
}
