//! MJPEG (UVC dongles) → RGB with zune-jpeg. Many dongles omit the Huffman tables (MJPEG
//! streams may rely on the standard ones); zune-jpeg assumes them only behind an AVI1 APP0
//! marker, so we insert the standard table segment (ITU-T T.81 Annex K.3) before SOS when a
//! frame has none.

use std::borrow::Cow;

use zune_jpeg::zune_core::bytestream::ZCursor;
use zune_jpeg::zune_core::colorspace::ColorSpace;
use zune_jpeg::zune_core::options::DecoderOptions;
use zune_jpeg::JpegDecoder;

/// The standard DHT segment (Annex K.3): DC luminance, DC chrominance, AC luminance, AC
/// chrominance — the order ffmpeg writes them in. 418 bytes after the marker.
#[rustfmt::skip]
pub const STANDARD_DHT: [u8; 420] = [
    0xFF, 0xC4, 0x01, 0xA2,
    // DC luminance
    0x00, 0x00, 0x01, 0x05, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B,
    // DC chrominance
    0x01, 0x00, 0x03, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B,
    // AC luminance
    0x10, 0x00, 0x02, 0x01, 0x03, 0x03, 0x02, 0x04, 0x03, 0x05, 0x05, 0x04, 0x04, 0x00, 0x00, 0x01, 0x7D,
    0x01, 0x02, 0x03, 0x00, 0x04, 0x11, 0x05, 0x12, 0x21, 0x31, 0x41, 0x06, 0x13, 0x51, 0x61, 0x07,
    0x22, 0x71, 0x14, 0x32, 0x81, 0x91, 0xA1, 0x08, 0x23, 0x42, 0xB1, 0xC1, 0x15, 0x52, 0xD1, 0xF0,
    0x24, 0x33, 0x62, 0x72, 0x82, 0x09, 0x0A, 0x16, 0x17, 0x18, 0x19, 0x1A, 0x25, 0x26, 0x27, 0x28,
    0x29, 0x2A, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3A, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49,
    0x4A, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5A, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69,
    0x6A, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7A, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89,
    0x8A, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7,
    0xA8, 0xA9, 0xAA, 0xB2, 0xB3, 0xB4, 0xB5, 0xB6, 0xB7, 0xB8, 0xB9, 0xBA, 0xC2, 0xC3, 0xC4, 0xC5,
    0xC6, 0xC7, 0xC8, 0xC9, 0xCA, 0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8, 0xD9, 0xDA, 0xE1, 0xE2,
    0xE3, 0xE4, 0xE5, 0xE6, 0xE7, 0xE8, 0xE9, 0xEA, 0xF1, 0xF2, 0xF3, 0xF4, 0xF5, 0xF6, 0xF7, 0xF8,
    0xF9, 0xFA,
    // AC chrominance
    0x11, 0x00, 0x02, 0x01, 0x02, 0x04, 0x04, 0x03, 0x04, 0x07, 0x05, 0x04, 0x04, 0x00, 0x01, 0x02, 0x77,
    0x00, 0x01, 0x02, 0x03, 0x11, 0x04, 0x05, 0x21, 0x31, 0x06, 0x12, 0x41, 0x51, 0x07, 0x61, 0x71,
    0x13, 0x22, 0x32, 0x81, 0x08, 0x14, 0x42, 0x91, 0xA1, 0xB1, 0xC1, 0x09, 0x23, 0x33, 0x52, 0xF0,
    0x15, 0x62, 0x72, 0xD1, 0x0A, 0x16, 0x24, 0x34, 0xE1, 0x25, 0xF1, 0x17, 0x18, 0x19, 0x1A, 0x26,
    0x27, 0x28, 0x29, 0x2A, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3A, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48,
    0x49, 0x4A, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5A, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68,
    0x69, 0x6A, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7A, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87,
    0x88, 0x89, 0x8A, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0xA2, 0xA3, 0xA4, 0xA5,
    0xA6, 0xA7, 0xA8, 0xA9, 0xAA, 0xB2, 0xB3, 0xB4, 0xB5, 0xB6, 0xB7, 0xB8, 0xB9, 0xBA, 0xC2, 0xC3,
    0xC4, 0xC5, 0xC6, 0xC7, 0xC8, 0xC9, 0xCA, 0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8, 0xD9, 0xDA,
    0xE2, 0xE3, 0xE4, 0xE5, 0xE6, 0xE7, 0xE8, 0xE9, 0xEA, 0xF2, 0xF3, 0xF4, 0xF5, 0xF6, 0xF7, 0xF8,
    0xF9, 0xFA,
];

/// Errors decoding MJPEG.
#[derive(Debug, thiserror::Error)]
pub enum MjpegError {
    /// Not a JPEG, or cut short.
    #[error("not a complete JPEG frame")]
    Truncated,
    /// The decoder rejected the frame.
    #[error("JPEG decode: {0}")]
    Decode(String),
    /// A kind of JPEG no capture dongle sends: refused before the decoder sees it, because
    /// the decoder's rarely used paths (progressive scans, odd chroma subsampling) can
    /// panic on a broken frame, and a panic aborts the daemon.
    #[error("unsupported JPEG frame: {0}; capture dongles send baseline YCbCr")]
    Unsupported(&'static str),
    /// The frame's header announces another picture size than the capture format's.
    #[error("the JPEG header says {got:?}, the capture format {want:?}")]
    Size {
        /// Width and height in the frame's header.
        got: (u32, u32),
        /// Width and height the capture format announced.
        want: (u32, u32),
    },
}

/// Checks a frame header (SOFn marker `marker`, `segment` = its bytes after the length):
/// only what UVC MJPEG is, baseline or extended sequential 8-bit Huffman, one component
/// (gray) or three, the first sampled 1 or 2 in each direction (4:4:4, 4:2:2, 4:4:0,
/// 4:2:0) and the others once. zune-jpeg has panicked on frames outside this (fuzzing
/// found a progressive 4:2:0 with the subsampling on a chroma component).
fn check_frame_header(marker: u8, segment: &[u8]) -> Result<(), MjpegError> {
    match marker {
        0xC0 | 0xC1 => {}
        0xC2 | 0xC6 | 0xCA | 0xCE => return Err(MjpegError::Unsupported("progressive")),
        0xC3 | 0xC7 | 0xCB | 0xCF => return Err(MjpegError::Unsupported("lossless")),
        _ => return Err(MjpegError::Unsupported("arithmetic coding")),
    }
    let (&precision, rest) = segment.split_first().ok_or(MjpegError::Truncated)?;
    if precision != 8 {
        return Err(MjpegError::Unsupported("not 8 bits per sample"));
    }
    let (&count, components) = rest.get(4..).and_then(<[u8]>::split_first).ok_or(MjpegError::Truncated)?;
    if !(count == 1 || count == 3) || components.len() != 3 * usize::from(count) {
        return Err(MjpegError::Unsupported("neither one nor three components"));
    }
    let mut ids = [None; 3];
    for (k, c) in components.chunks_exact(3).enumerate() {
        let (id, h, v) = (c[0], c[1] >> 4, c[1] & 0x0F);
        let allowed =
            if k == 0 && count == 3 { (1..=2).contains(&h) && (1..=2).contains(&v) } else { h == 1 && v == 1 };
        if !allowed {
            return Err(MjpegError::Unsupported("a chroma subsampling other than 4:4:4, 4:2:2, 4:4:0 or 4:2:0"));
        }
        if ids.contains(&Some(id)) {
            return Err(MjpegError::Unsupported("two components with one id"));
        }
        ids[k] = Some(id);
    }
    Ok(())
}

/// Where the frame's SOS marker is, whether a DHT segment precedes it, and the frame
/// header's (width, height). The frame header must come before it, once, and be one
/// [`check_frame_header`] allows.
fn scan_markers(jpeg: &[u8]) -> Result<(usize, bool, (u32, u32)), MjpegError> {
    if jpeg.get(..2) != Some(&[0xFF, 0xD8]) {
        return Err(MjpegError::Truncated);
    }
    let mut i = 2;
    let mut has_dht = false;
    let mut sof_size = None;
    while i + 4 <= jpeg.len() {
        if jpeg[i] != 0xFF {
            return Err(MjpegError::Truncated);
        }
        let marker = jpeg[i + 1];
        if marker == 0xFF {
            i += 1; // fill byte
            continue;
        }
        if marker == 0xDA {
            let Some(size) = sof_size else {
                return Err(MjpegError::Unsupported("no frame header before the scan"));
            };
            return Ok((i, has_dht, size));
        }
        has_dht |= marker == 0xC4;
        let len = usize::from(u16::from_be_bytes([jpeg[i + 2], jpeg[i + 3]]));
        // SOF0..SOF15 but DHT (C4), JPG (C8) and DAC (CC).
        if (0xC0..=0xCF).contains(&marker) && !matches!(marker, 0xC4 | 0xC8 | 0xCC) {
            if sof_size.is_some() {
                return Err(MjpegError::Unsupported("two frame headers"));
            }
            let segment = jpeg.get(i + 4..i + 2 + len.max(2)).ok_or(MjpegError::Truncated)?;
            check_frame_header(marker, segment)?;
            // check_frame_header saw precision, height, width and the components.
            let be = |k: usize| u32::from(u16::from_be_bytes([segment[k], segment[k + 1]]));
            sof_size = Some((be(3), be(1)));
        }
        i += 2 + len;
    }
    Err(MjpegError::Truncated)
}

/// The frame, with the standard Huffman tables inserted before SOS when it has none.
pub fn with_huffman_tables(jpeg: &[u8]) -> Result<Cow<'_, [u8]>, MjpegError> {
    let (sos, has_dht, _) = scan_markers(jpeg)?;
    if has_dht {
        return Ok(Cow::Borrowed(jpeg));
    }
    let mut out = Vec::with_capacity(jpeg.len() + STANDARD_DHT.len());
    out.extend_from_slice(&jpeg[..sos]);
    out.extend_from_slice(&STANDARD_DHT);
    out.extend_from_slice(&jpeg[sos..]);
    Ok(Cow::Owned(out))
}

/// How far before a captured frame's end its EOI may be (padding after it).
const TRAILER_SLACK: usize = 1024;

/// Whether a captured frame is whole: SOI, a frame header we decode announcing `size`, a
/// scan, and EOI within its last KiB (some dongles pad the buffer after it).
/// Cheap (no pixels, no copy): run on every captured frame, so a dongle's truncated or
/// garbled JPEGs are dropped before viewers or screenshots see them.
pub fn check_capture_frame(jpeg: &[u8], size: (u32, u32)) -> Result<(), MjpegError> {
    let (_, _, got) = scan_markers(jpeg)?;
    if got != size {
        return Err(MjpegError::Size { got, want: size });
    }
    // EOI near the end: some devices pad the buffer after it (zeros, or fill bytes).
    let tail = &jpeg[jpeg.len().saturating_sub(TRAILER_SLACK)..];
    if !tail.windows(2).any(|w| w == [0xFF, 0xD9]) {
        return Err(MjpegError::Truncated);
    }
    Ok(())
}

/// The picture size in a frame's header (SOF), read without decoding any pixels.
pub fn mjpeg_size(jpeg: &[u8]) -> Result<(u32, u32), MjpegError> {
    let data = with_huffman_tables(jpeg)?;
    let mut decoder = JpegDecoder::new(ZCursor::new(&data[..]));
    header_size(&mut decoder)
}

fn header_size<T: zune_jpeg::zune_core::bytestream::ZByteReaderTrait>(
    decoder: &mut JpegDecoder<T>,
) -> Result<(u32, u32), MjpegError> {
    decoder.decode_headers().map_err(|e| MjpegError::Decode(format!("{e:?}")))?;
    let info = decoder.info().ok_or(MjpegError::Truncated)?;
    Ok((u32::from(info.width), u32::from(info.height)))
}

/// Decodes one MJPEG frame of the capture format's `size` to RGB24.
///
/// The header's size is checked before any pixel memory exists: the frame's own word is
/// the dongle's, and a broken or hostile one claiming 16384x16384 would otherwise cost
/// 805 MB of RGB (an out-of-memory on a 1 GB board) only to be dropped for its size.
pub fn decode_mjpeg(jpeg: &[u8], size: (u32, u32)) -> Result<Vec<u8>, MjpegError> {
    let data = with_huffman_tables(jpeg)?;
    let (w, h) = size;
    let options = DecoderOptions::default()
        .jpeg_set_out_colorspace(ColorSpace::RGB)
        .set_max_width(w as usize)
        .set_max_height(h as usize);
    let mut decoder = JpegDecoder::new_with_options(ZCursor::new(&data[..]), options);
    // The limits above make zune refuse a larger header; a smaller one is refused here.
    match header_size(&mut decoder) {
        Ok(got) if got != size => return Err(MjpegError::Size { got, want: size }),
        Ok(_) => {}
        Err(e) => {
            // Over the limits: say which size it claimed (read again without them).
            return Err(match mjpeg_size(jpeg) {
                Ok(got) if got != size => MjpegError::Size { got, want: size },
                _ => e,
            });
        }
    }
    let rgb = decoder.decode().map_err(|e| MjpegError::Decode(format!("{e:?}")))?;
    let want = usize::try_from(u64::from(w) * u64::from(h) * 3).unwrap_or(usize::MAX);
    if rgb.len() != want {
        return Err(MjpegError::Decode(format!("{} bytes for {w}x{h} RGB", rgb.len())));
    }
    Ok(rgb)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Made here with Debian's ffmpeg: `ffmpeg -f lavfi -i testsrc=size=64x48 -frames:v 1
    /// -huffman default -pix_fmt yuvj420p -f mjpeg` (standard tables, one DHT segment).
    const FIXTURE: &[u8] = include_bytes!("../../../../../tests/fixtures/testsrc-64x48.jpg");

    fn without_dht(jpeg: &[u8]) -> Vec<u8> {
        let mut out = jpeg[..2].to_vec();
        let mut i = 2;
        loop {
            let marker = jpeg[i + 1];
            if marker == 0xDA {
                out.extend_from_slice(&jpeg[i..]);
                return out;
            }
            let len = usize::from(u16::from_be_bytes([jpeg[i + 2], jpeg[i + 3]]));
            if marker != 0xC4 {
                out.extend_from_slice(&jpeg[i..i + 2 + len]);
            }
            i += 2 + len;
        }
    }

    #[test]
    fn whole_capture_frames_pass_and_cut_or_garbled_ones_do_not() {
        assert!(check_capture_frame(FIXTURE, (64, 48)).is_ok());
        let mut padded = FIXTURE.to_vec();
        padded.extend_from_slice(&[0; 100]);
        padded.extend_from_slice(&[0xFF; 100]);
        assert!(check_capture_frame(&padded, (64, 48)).is_ok(), "padding after EOI is a whole frame");
        assert!(matches!(check_capture_frame(FIXTURE, (1920, 1080)), Err(MjpegError::Size { got: (64, 48), .. })));
        let cut = &FIXTURE[..FIXTURE.len() - 200];
        assert!(matches!(check_capture_frame(cut, (64, 48)), Err(MjpegError::Truncated)), "no EOI");
        let mut garbage = FIXTURE.to_vec();
        garbage[2..40].fill(0x5A);
        assert!(check_capture_frame(&garbage, (64, 48)).is_err(), "markers overwritten");
        assert!(check_capture_frame(&[], (64, 48)).is_err());
        assert!(check_capture_frame(&[0xFF, 0xD8, 0xFF, 0xD9], (64, 48)).is_err(), "no frame header");
    }

    #[test]
    fn our_standard_table_is_the_one_ffmpeg_writes() {
        let pos = FIXTURE.windows(2).position(|w| w == [0xFF, 0xC4]).unwrap();
        assert_eq!(&FIXTURE[pos..pos + STANDARD_DHT.len()], &STANDARD_DHT[..]);
    }

    #[test]
    fn frames_without_tables_decode_like_the_original() {
        assert_eq!(mjpeg_size(FIXTURE).unwrap(), (64, 48));
        let rgb = decode_mjpeg(FIXTURE, (64, 48)).unwrap();
        let stripped = without_dht(FIXTURE);
        assert!(matches!(with_huffman_tables(&stripped).unwrap(), Cow::Owned(_)));
        let rgb2 = decode_mjpeg(&stripped, (64, 48)).unwrap();
        assert_eq!(rgb, rgb2);
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(decode_mjpeg(b"not a jpeg", (64, 48)).is_err());
        assert!(decode_mjpeg(&FIXTURE[..40], (64, 48)).is_err());
        assert!(decode_mjpeg(&[], (64, 48)).is_err());
    }

    /// The SOF0 segment's height and width fields, rewritten.
    fn with_header_size(jpeg: &[u8], w: u16, h: u16) -> Vec<u8> {
        let mut out = jpeg.to_vec();
        let sof = out.windows(2).position(|m| m == [0xFF, 0xC0]).unwrap();
        out[sof + 5..sof + 7].copy_from_slice(&h.to_be_bytes());
        out[sof + 7..sof + 9].copy_from_slice(&w.to_be_bytes());
        out
    }

    #[test]
    fn a_header_of_another_size_is_refused_before_decoding() {
        // 16384x16384 would be 805 MB of RGB: refused from the header, nothing allocated.
        let huge = with_header_size(FIXTURE, 16384, 16384);
        assert_eq!(mjpeg_size(&huge).unwrap(), (16384, 16384));
        match decode_mjpeg(&huge, (64, 48)) {
            Err(MjpegError::Size { got, want }) => assert_eq!((got, want), ((16384, 16384), (64, 48))),
            other => panic!("{other:?}"),
        }
        // Smaller than announced is refused too (a frame of the last mode after a switch).
        let small = with_header_size(FIXTURE, 32, 48);
        assert!(matches!(decode_mjpeg(&small, (64, 48)), Err(MjpegError::Size { got: (32, 48), .. })));
        assert!(matches!(decode_mjpeg(FIXTURE, (1920, 1080)), Err(MjpegError::Size { got: (64, 48), .. })));
    }

    /// Found by the `mjpeg` fuzz target: a progressive 2x720 frame whose second component
    /// carries the 2x2 sampling. zune-jpeg 0.5.15 panicked on it in its upsampler
    /// (`input.len() * 2 <= scratch_space.len()`), which aborts the daemon.
    const PROGRESSIVE_CRASH: &[u8] = include_bytes!("../../../../../tests/fixtures/fuzz-mjpeg-progressive-chroma.jpg");

    #[test]
    fn frames_no_dongle_sends_are_refused_before_the_decoder() {
        for size in [(2, 720), (64, 48)] {
            assert!(
                matches!(decode_mjpeg(PROGRESSIVE_CRASH, size), Err(MjpegError::Unsupported("progressive"))),
                "{size:?}"
            );
        }
        assert!(matches!(mjpeg_size(PROGRESSIVE_CRASH), Err(MjpegError::Unsupported(_))));
        let sof = FIXTURE.windows(2).position(|m| m == [0xFF, 0xC0]).unwrap();
        let with = |at: usize, byte: u8| {
            let mut f = FIXTURE.to_vec();
            f[at] = byte;
            f
        };
        // The same frame marked progressive, or lossless, or 12-bit.
        assert!(matches!(decode_mjpeg(&with(sof + 1, 0xC2), (64, 48)), Err(MjpegError::Unsupported("progressive"))));
        assert!(matches!(decode_mjpeg(&with(sof + 1, 0xC3), (64, 48)), Err(MjpegError::Unsupported("lossless"))));
        assert!(matches!(decode_mjpeg(&with(sof + 4, 12), (64, 48)), Err(MjpegError::Unsupported(_))));
        // Components: [id, sampling, table] from sof + 10. Subsampling moved to a chroma
        // component, or a luma sampled 4x, is refused; the fixture's own 4:2:0 decodes.
        assert_eq!(FIXTURE[sof + 11], 0x22, "the fixture is 4:2:0");
        assert!(matches!(decode_mjpeg(&with(sof + 14, 0x22), (64, 48)), Err(MjpegError::Unsupported(_))));
        assert!(matches!(decode_mjpeg(&with(sof + 11, 0x41), (64, 48)), Err(MjpegError::Unsupported(_))));
        assert!(matches!(decode_mjpeg(&with(sof + 13, FIXTURE[sof + 10]), (64, 48)), Err(MjpegError::Unsupported(_))));
        assert_eq!(decode_mjpeg(&with(sof + 1, 0xC1), (64, 48)).map(|rgb| rgb.len()).ok(), Some(64 * 48 * 3));
        // A scan with no frame header before it, and two frame headers.
        let no_sof: Vec<u8> = [&FIXTURE[..sof], &FIXTURE[sof + 2 + 17..]].concat();
        assert!(matches!(with_huffman_tables(&no_sof), Err(MjpegError::Unsupported(_))));
        let two: Vec<u8> = [&FIXTURE[..sof], &FIXTURE[sof..sof + 19], &FIXTURE[sof..]].concat();
        assert!(matches!(with_huffman_tables(&two), Err(MjpegError::Unsupported("two frame headers"))));
    }
}
