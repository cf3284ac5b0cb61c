//! Hardware decoding of compressed capture (MJPEG, H.264) through a V4L2 stateful M2M
//! decoder (the Pi's bcm2835-codec): coded frames in, I420 out, converted to RGB. Codec
//! agnostic like the M2M layer under it (the lab drives it with vicodec's FWHT).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::h264_decode::DecoderError;
use crate::device::video::convert::i420_to_rgb;
use crate::device::video::m2m::{find_node, M2mCodec};
use crate::device::video::v4l2::FourCc;

/// `V4L2_PIX_FMT_YUV420` (I420).
const YU12: FourCc = FourCc::new(b"YU12");
/// How long one `decode` waits for a picture before returning `None` (the decoder may hold
/// it back until the next input).
const PICTURE_WAIT: Duration = Duration::from_millis(40);

/// The first M2M node that decodes `coded` to I420, if the board has one.
pub fn find_hardware_decoder(coded: FourCc) -> Option<PathBuf> {
    find_node(coded, YU12)
}

/// A hardware decoder session for one stream.
#[derive(Debug)]
pub struct HardwareDecoder {
    codec: M2mCodec,
}

impl HardwareDecoder {
    /// A session on `node` for `coded` frames of about `width`x`height` (the decoder reads the
    /// real size from the stream).
    pub fn new(node: &Path, coded: FourCc, width: u32, height: u32) -> Result<HardwareDecoder, DecoderError> {
        let codec =
            M2mCodec::decoder(node, coded, YU12, width, height).map_err(|e| DecoderError::Hardware(e.to_string()))?;
        Ok(HardwareDecoder { codec })
    }

    /// Decodes one coded frame; `None` while the decoder has no picture yet. Returns the
    /// picture cropped to `visible` (decoders pad to whole macroblocks) as RGB24.
    pub fn decode(&mut self, data: &[u8], visible: (u32, u32)) -> Result<Option<(u32, u32, Vec<u8>)>, DecoderError> {
        let hw = |e: crate::device::video::m2m::M2mError| DecoderError::Hardware(e.to_string());
        self.codec.send(data).map_err(hw)?;
        let Some(raw) = self.codec.try_receive(PICTURE_WAIT).map_err(hw)? else { return Ok(None) };
        let fmt = self.codec.capture_format().ok_or_else(|| DecoderError::Hardware("no picture format".into()))?;
        if fmt.fourcc != YU12 {
            return Err(DecoderError::Hardware(format!("the decoder gives {}, not YU12", fmt.fourcc)));
        }
        // The stream's visible size (compose rectangle) when the driver says, else the
        // caller's; never more than the buffer holds.
        let shown = self.codec.visible().map_or(visible, |r| (r.width, r.height));
        let (w, h) = (shown.0.min(fmt.width), shown.1.min(fmt.height));
        let rgb = i420_to_rgb(&raw, w as usize, h as usize, fmt.bytes_per_line as usize, fmt.height as usize)
            .map_err(|e| DecoderError::Hardware(e.to_string()))?;
        Ok(Some((w, h, rgb)))
    }
}
