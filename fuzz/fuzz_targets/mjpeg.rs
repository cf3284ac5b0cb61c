//! Untrusted MJPEG frames (what a UVC dongle hands us) → Huffman-table insertion and decode.
//!
//! Invariants: a frame with tables is passed through untouched; otherwise the standard DHT
//! segment is inserted before SOS and nothing else changes; a decoded frame's RGB buffer is
//! exactly width × height × 3.
#![no_main]
#![forbid(unsafe_code)]

use std::borrow::Cow;

use libfuzzer_sys::fuzz_target;
use tether::device::video::codec::{decode_mjpeg, with_huffman_tables, STANDARD_DHT};

fuzz_target!(|data: &[u8]| {
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
            assert!(decode_mjpeg(data).is_err(), "decoded a frame whose markers do not scan");
            return;
        }
    }
    if let Ok((w, h, rgb)) = decode_mjpeg(data) {
        assert!(w > 0 && h > 0);
        assert_eq!(rgb.len(), w as usize * h as usize * 3);
    }
});
