//! Untrusted MJPEG frames (what a UVC dongle hands us) → Huffman-table insertion, header
//! size and decode; and a recording of them split into JPEGs (`video = "replay"`).
//!
//! Invariants: a frame with tables is passed through untouched; otherwise the standard DHT
//! segment is inserted before SOS and nothing else changes; a frame whose markers do not
//! scan never decodes; a frame is decoded only at the size its header names (any other
//! announced size is refused with `Size` or a decode error, before pixels are allocated);
//! a decoded frame's RGB buffer is exactly width × height × 3. Split JPEGs run from an SOI
//! to an EOI, in order, without overlapping.
#![no_main]
#![forbid(unsafe_code)]

use std::borrow::Cow;

use libfuzzer_sys::fuzz_target;
use tether::device::video::codec::{decode_mjpeg, mjpeg_size, with_huffman_tables, MjpegError, STANDARD_DHT};
use tether::device::video::replay::split_jpegs;

/// Pixels above which a header's own size is not decoded here (its refusals still are):
/// the decode path is the same at any size, and a mutated header claiming 64x10544 made
/// zune decode 674 000 pixels of padding from 200 bytes, most of each execution's time.
const DECODE_PIXELS_MAX: u64 = 1 << 16;

fuzz_target!(|data: &[u8]| {
    let mut end = 0;
    for part in split_jpegs(data) {
        assert!(part.starts_with(&[0xFF, 0xD8]) && part.ends_with(&[0xFF, 0xD9]), "{part:?}");
        let at = part.as_ptr() as usize - data.as_ptr() as usize;
        assert!(at >= end, "JPEGs overlap or go backwards");
        end = at + part.len();
    }
    match with_huffman_tables(data) {
        Ok(Cow::Borrowed(same)) => assert_eq!(same, data),
        Ok(Cow::Owned(with)) => {
            assert_eq!(with.len(), data.len() + STANDARD_DHT.len());
            // Some SOS marker of the input is where the table went, and nothing else moved.
            let n = STANDARD_DHT.len();
            let inserted_at = |at: usize| {
                data[at..].starts_with(&[0xFF, 0xDA])
                    && with[..at] == data[..at]
                    && with[at..at + n] == STANDARD_DHT
                    && with[at + n..] == data[at..]
            };
            assert!((0..data.len()).any(inserted_at), "table not inserted right before SOS");
        }
        Err(_) => {
            assert!(mjpeg_size(data).is_err(), "read the header of a frame whose markers do not scan");
            assert!(decode_mjpeg(data, (64, 48)).is_err(), "decoded a frame whose markers do not scan");
            return;
        }
    }
    let Ok((w, h)) = mjpeg_size(data) else {
        assert!(decode_mjpeg(data, (64, 48)).is_err(), "decoded a frame without a readable header");
        return;
    };
    // Any other announced size is refused, whatever the header says.
    let other = (w.wrapping_add(1).max(1), h);
    assert!(decode_mjpeg(data, other).is_err(), "decoded {w}x{h} as {other:?}");
    let smaller = (w / 2, h);
    if smaller != (w, h) {
        assert!(
            matches!(decode_mjpeg(data, smaller), Err(MjpegError::Size { .. } | MjpegError::Decode(_))),
            "decoded {w}x{h} as {smaller:?}"
        );
    }
    if u64::from(w) * u64::from(h) <= DECODE_PIXELS_MAX {
        if let Ok(rgb) = decode_mjpeg(data, (w, h)) {
            assert!(w > 0 && h > 0);
            assert_eq!(rgb.len(), w as usize * h as usize * 3);
        }
    }
});
