//! A raw capture buffer as a hostile driver could describe it — per-plane data offsets and
//! bytesused, width, height, stride, padded rows — through `Payload` (what DQBUF returned)
//! and the converters to RGB24 (YUYV, UYVY, NV12, RGB3, I420), plus `pad_i420`.
//!
//! Invariants: the gathered payload lies inside the planes and its length is what
//! `bytes_used` says (when the planes are that large); a conversion either fails or returns
//! exactly width × height × 3 bytes, and never succeeds for an odd width of a 4:2:x format;
//! padding an I420 picture does not change the picture.
#![no_main]
#![forbid(unsafe_code)]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tether::device::video::convert::{i420_to_rgb, nv12_to_rgb, packed422_to_rgb, pad_i420, rgb24_rows};
use tether::device::video::v4l2::Payload;

#[derive(Debug, Arbitrary)]
struct Input {
    format: u8,
    width: u32,
    height: u32,
    stride: u32,
    rows: u32,
    /// `(data_offset, bytesused)` per plane, as DQBUF returns them.
    planes: Vec<(u32, u32)>,
    /// Plane sizes (the mappings), carved out of `memory` in order.
    plane_sizes: Vec<u16>,
    memory: Vec<u8>,
}

fuzz_target!(|input: Input| {
    // The mappings: consecutive pieces of `memory`.
    let mut planes: Vec<&[u8]> = Vec::new();
    let mut rest = input.memory.as_slice();
    for &size in input.plane_sizes.iter().take(8) {
        let (plane, tail) = rest.split_at(usize::from(size).min(rest.len()));
        planes.push(plane);
        rest = tail;
    }
    if planes.is_empty() {
        planes.push(rest);
    }
    let payload = Payload::from_planes(&input.planes);
    assert!(!payload.ranges().is_empty() && payload.ranges().len() <= 8);
    assert!(payload.ranges().iter().all(|(a, z)| a <= z));
    let used = payload.bytes_used();
    let data = payload.gather(&planes);
    let fits = planes.len() >= payload.ranges().len()
        && planes.iter().zip(payload.ranges()).all(|(p, &(_, z))| z as usize <= p.len());
    if fits {
        assert_eq!(data.len() as u64, u64::from(used));
    }
    assert!(data.len() <= input.memory.len());

    let (w, h, stride, rows) =
        (input.width as usize, input.height as usize, input.stride as usize, input.rows as usize);
    let (name, out) = match input.format % 5 {
        0 => ("YUYV", packed422_to_rgb(&data, w, h, stride, false)),
        1 => ("UYVY", packed422_to_rgb(&data, w, h, stride, true)),
        2 => ("NV12", nv12_to_rgb(&data, w, h, stride)),
        3 => ("RGB3", rgb24_rows(&data, w, h, stride)),
        _ => ("I420", i420_to_rgb(&data, w, h, stride, rows)),
    };
    if let Ok(rgb) = out {
        assert_eq!(rgb.len() as u128, w as u128 * h as u128 * 3, "{name} {w}x{h}");
        assert!(name == "RGB3" || w % 2 == 0, "{name} accepted an odd width");
    }

    // An exact I420 picture, padded the way the M2M encoder wants it, reads back the same.
    let (pw, ph) = ((w % 64) & !1, (h % 64) & !1);
    if pw > 0 && ph > 0 && data.len() >= pw * ph * 3 / 2 {
        let picture = &data[..pw * ph * 3 / 2];
        let (pstride, prows) = (pw + stride % 64, ph + rows % 64);
        let padded = pad_i420(picture, pw, ph, pstride, prows);
        let direct = i420_to_rgb(picture, pw, ph, pw, ph).expect("an exact I420 picture converts");
        assert_eq!(i420_to_rgb(&padded, pw, ph, pstride, prows).expect("the padded picture converts"), direct);
    }
});
