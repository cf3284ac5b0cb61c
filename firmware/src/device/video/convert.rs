//! Raw capture formats → RGB24 (BT.601, limited range: what HDMI bridges and UVC send).
//!
//! Integer math, one pass, no allocation beyond the output.

/// Converts one limited-range BT.601 YUV sample to RGB.
#[inline]
pub(crate) fn yuv_to_rgb(y: u8, u: u8, v: u8) -> [u8; 3] {
    let c = (i32::from(y) - 16) * 298;
    let d = i32::from(u) - 128;
    let e = i32::from(v) - 128;
    let clamp = |x: i32| u8::try_from(((x + 128) >> 8).clamp(0, 255)).unwrap_or(0);
    [clamp(c + 409 * e), clamp(c - 100 * d - 208 * e), clamp(c + 516 * d)]
}

/// Errors converting a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// The buffer is shorter than the format requires.
    #[error("{format} {width}x{height} needs {needed} bytes, got {got}")]
    Short {
        /// Format name.
        format: &'static str,
        /// Width.
        width: usize,
        /// Height.
        height: usize,
        /// Bytes needed.
        needed: usize,
        /// Bytes present.
        got: usize,
    },
    /// Odd width for a 4:2:x format.
    #[error("{0} needs an even width")]
    OddWidth(&'static str),
    /// A size no frame has: zero, or so large that its byte counts overflow (a driver's
    /// numbers are not trusted with arithmetic).
    #[error("{format} {width}x{height} (stride {stride}) is not a usable frame size")]
    Size {
        /// Format name.
        format: &'static str,
        /// Width.
        width: usize,
        /// Height.
        height: usize,
        /// Bytes per line.
        stride: usize,
    },
}

/// Bytes that `rows` lines `stride` apart take when the last holds `last` bytes; `None` for
/// no rows or on overflow.
fn lines(stride: usize, rows: usize, last: usize) -> Option<usize> {
    stride.checked_mul(rows.checked_sub(1)?)?.checked_add(last)
}

/// Checks a frame's description against its buffer; returns the RGB24 output length.
/// `needed` is `None` when the layout's arithmetic overflowed.
fn check(
    format: &'static str,
    src: &[u8],
    (width, height, stride): (usize, usize, usize),
    needed: Option<usize>,
    even_width: bool,
) -> Result<usize, ConvertError> {
    if even_width && width % 2 != 0 {
        return Err(ConvertError::OddWidth(format));
    }
    let out = width.checked_mul(height).and_then(|n| n.checked_mul(3)).filter(|&n| n > 0);
    let (Some(out), Some(needed)) = (out, needed) else {
        return Err(ConvertError::Size { format, width, height, stride });
    };
    if src.len() < needed {
        return Err(ConvertError::Short { format, width, height, needed, got: src.len() });
    }
    Ok(out)
}

/// Packed 4:2:2 (YUYV when `uyvy` is false, UYVY when true) with `stride` bytes per line.
pub fn packed422_to_rgb(
    src: &[u8],
    width: usize,
    height: usize,
    stride: usize,
    uyvy: bool,
) -> Result<Vec<u8>, ConvertError> {
    let name = if uyvy { "UYVY" } else { "YUYV" };
    let row = width.checked_mul(2);
    let stride = stride.max(row.unwrap_or(0));
    let needed = row.and_then(|row| lines(stride, height, row));
    let mut out = vec![0u8; check(name, src, (width, height, stride), needed, true)?];
    let row = width * 2; // checked above
    for (y, row_out) in out.chunks_exact_mut(width * 3).enumerate() {
        let row = &src[y * stride..y * stride + row];
        for (quad, px) in row.chunks_exact(4).zip(row_out.chunks_exact_mut(6)) {
            let (y0, u, y1, v) =
                if uyvy { (quad[1], quad[0], quad[3], quad[2]) } else { (quad[0], quad[1], quad[2], quad[3]) };
            px[..3].copy_from_slice(&yuv_to_rgb(y0, u, v));
            px[3..].copy_from_slice(&yuv_to_rgb(y1, u, v));
        }
    }
    Ok(out)
}

/// RGB24 with `stride` bytes per line → tightly packed RGB24.
pub fn rgb24_rows(src: &[u8], width: usize, height: usize, stride: usize) -> Result<Vec<u8>, ConvertError> {
    let row = width.checked_mul(3);
    let stride = stride.max(row.unwrap_or(0));
    let needed = row.and_then(|row| lines(stride, height, row));
    let mut out = Vec::with_capacity(check("RGB3", src, (width, height, stride), needed, false)?);
    let row = width * 3; // checked above
    for y in 0..height {
        out.extend_from_slice(&src[y * stride..y * stride + row]);
    }
    Ok(out)
}

/// NV12: a Y plane (`stride` bytes per line) then interleaved UV at half resolution.
pub fn nv12_to_rgb(src: &[u8], width: usize, height: usize, stride: usize) -> Result<Vec<u8>, ConvertError> {
    nv12_padded_to_rgb(src, width, height, stride, height)
}

/// Like [`nv12_to_rgb`] for a Y plane of `rows` lines (a decoder pads the picture's
/// `height` up to whole macroblocks; the UV plane starts after the padding).
pub fn nv12_padded_to_rgb(
    src: &[u8],
    width: usize,
    height: usize,
    stride: usize,
    rows: usize,
) -> Result<Vec<u8>, ConvertError> {
    let stride = stride.max(width);
    let rows = rows.max(height);
    let uv_start = stride.checked_mul(rows);
    let needed = uv_start.and_then(|uv| uv.checked_add(stride.checked_mul(height.div_ceil(2))?));
    let mut out = vec![0u8; check("NV12", src, (width, height, stride), needed, true)?];
    let uv_start = stride * rows; // checked above
    for (y, row_out) in out.chunks_exact_mut(width * 3).enumerate() {
        let luma = &src[y * stride..y * stride + width];
        let chroma = &src[uv_start + (y / 2) * stride..uv_start + (y / 2) * stride + width];
        for (x, px) in row_out.chunks_exact_mut(3).enumerate() {
            let uv = x & !1;
            px.copy_from_slice(&yuv_to_rgb(luma[x], chroma[uv], chroma[uv + 1]));
        }
    }
    Ok(out)
}

/// I420 (YU12): a Y plane of `stride` bytes per line and `rows` lines (a decoder may pad
/// the picture's `height` up to its macroblock rows), then U and V at half resolution.
pub fn i420_to_rgb(
    src: &[u8],
    width: usize,
    height: usize,
    stride: usize,
    rows: usize,
) -> Result<Vec<u8>, ConvertError> {
    let stride = stride.max(width);
    let rows = rows.max(height);
    let (cstride, crows) = (stride.div_ceil(2), rows.div_ceil(2));
    let layout = (|| {
        let u_start = stride.checked_mul(rows)?;
        let v_start = u_start.checked_add(cstride.checked_mul(crows)?)?;
        Some((u_start, v_start, v_start.checked_add(cstride.checked_mul(height.div_ceil(2))?)?))
    })();
    let mut out = vec![0u8; check("I420", src, (width, height, stride), layout.map(|l| l.2), true)?];
    let (u_start, v_start, _) = layout.unwrap_or_default(); // Some: checked above
    for (y, row_out) in out.chunks_exact_mut(width * 3).enumerate() {
        let luma = &src[y * stride..y * stride + width];
        let u = &src[u_start + (y / 2) * cstride..];
        let v = &src[v_start + (y / 2) * cstride..];
        for (x, px) in row_out.chunks_exact_mut(3).enumerate() {
            px.copy_from_slice(&yuv_to_rgb(luma[x], u[x / 2], v[x / 2]));
        }
    }
    Ok(out)
}

/// Lays an I420 picture of `width`x`height` out in a padded geometry (`stride` bytes per
/// luma line, `rows` lines), repeating the edge pixels into the padding: what an encoder
/// that works on whole macroblocks expects.
pub fn pad_i420(src: &[u8], width: usize, height: usize, stride: usize, rows: usize) -> Vec<u8> {
    let (stride, rows) = (stride.max(width), rows.max(height));
    let (cw, ch, cstride, crows) = (width / 2, height / 2, stride.div_ceil(2), rows.div_ceil(2));
    let mut out = vec![0u8; stride * rows + 2 * cstride * crows];
    let mut plane = |src_off: usize, dst_off: usize, w: usize, h: usize, dst_stride: usize, dst_rows: usize| {
        for y in 0..dst_rows {
            let sy = y.min(h.saturating_sub(1));
            let Some(row) = src.get(src_off + sy * w..src_off + sy * w + w) else { return };
            let dst = &mut out[dst_off + y * dst_stride..dst_off + (y + 1) * dst_stride];
            dst[..w].copy_from_slice(row);
            let last = row.last().copied().unwrap_or(0);
            dst[w..].fill(last);
        }
    };
    plane(0, 0, width, height, stride, rows);
    plane(width * height, stride * rows, cw, ch, cstride, crows);
    plane(width * height + cw * ch, stride * rows + cstride * crows, cw, ch, cstride, crows);
    out
}

/// RGB → limited-range BT.601 luma.
#[inline]
fn luma(r: i32, g: i32, b: i32) -> u8 {
    u8::try_from(((66 * r + 129 * g + 25 * b + 128) >> 8) + 16).unwrap_or(235)
}

/// RGB → limited-range BT.601 (U, V).
#[inline]
fn chroma(r: i32, g: i32, b: i32) -> (u8, u8) {
    let u = u8::try_from(((-38 * r - 74 * g + 112 * b + 128) >> 8) + 128).unwrap_or(128);
    let v = u8::try_from(((112 * r - 94 * g - 18 * b + 128) >> 8) + 128).unwrap_or(128);
    (u, v)
}

/// One RGB colour as limited-range BT.601 (Y, U, V): how renderers that draw in NV12
/// (the sim) pick their samples.
pub fn rgb_to_yuv([r, g, b]: [u8; 3]) -> [u8; 3] {
    let (r, g, b) = (i32::from(r), i32::from(g), i32::from(b));
    let (u, v) = chroma(r, g, b);
    [luma(r, g, b), u, v]
}

/// RGB24 → YUYV (for writing test frames to an output device, and for the encoder path).
pub fn rgb_to_yuyv(rgb: &[u8], width: usize, height: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(width * height * 2);
    let y_of = |p: &[u8]| luma(i32::from(p[0]), i32::from(p[1]), i32::from(p[2]));
    for row in rgb.chunks_exact(width * 3).take(height) {
        for pair in row.chunks_exact(6) {
            let (a, b) = (&pair[..3], &pair[3..]);
            let r = (i32::from(a[0]) + i32::from(b[0])) / 2;
            let g = (i32::from(a[1]) + i32::from(b[1])) / 2;
            let bl = (i32::from(a[2]) + i32::from(b[2])) / 2;
            let (u, v) = chroma(r, g, bl);
            out.extend_from_slice(&[y_of(a), u, y_of(b), v]);
        }
    }
    out
}

/// NV12 (tight, even sizes) → I420: the same planes, chroma de-interleaved. `None` when
/// `src` is not `width * height * 3 / 2` bytes.
pub fn nv12_to_i420(src: &[u8], width: usize, height: usize) -> Option<Vec<u8>> {
    let luma_len = width.checked_mul(height)?;
    if !width.is_multiple_of(2) || !height.is_multiple_of(2) || src.len() != luma_len.checked_add(luma_len / 2)? {
        return None;
    }
    let quarter = luma_len / 4;
    let mut out = vec![0u8; src.len()];
    out[..luma_len].copy_from_slice(&src[..luma_len]);
    let (u_plane, v_plane) = out[luma_len..].split_at_mut(quarter);
    for ((pair, u), v) in src[luma_len..].chunks_exact(2).zip(u_plane).zip(v_plane) {
        *u = pair[0];
        *v = pair[1];
    }
    Some(out)
}

/// RGB24 → I420 (planar Y, then U and V at half resolution), BT.601 limited range; even
/// sizes. Feeds encoders that take planar 4:2:0.
pub fn rgb_to_i420(rgb: &[u8], width: usize, height: usize) -> Vec<u8> {
    let yuyv = rgb_to_yuyv(rgb, width, height);
    let (cw, ch) = (width / 2, height / 2);
    let mut out = vec![0u8; width * height + 2 * cw * ch];
    for y in 0..height {
        for x in 0..width {
            out[y * width + x] = yuyv[(y * width + x) * 2];
        }
    }
    let (u_plane, v_plane) = out[width * height..].split_at_mut(cw * ch);
    for cy in 0..ch {
        for cx in 0..cw {
            // Average the two 4:2:2 rows that share this 4:2:0 sample.
            let at = |row: usize, k: usize| u16::from(yuyv[(row * width + cx * 2) * 2 + k]);
            let avg = |k: usize| u8::try_from((at(cy * 2, k) + at(cy * 2 + 1, k)).div_ceil(2)).unwrap_or(128);
            u_plane[cy * cw + cx] = avg(1);
            v_plane[cy * cw + cx] = avg(3);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_nv12_reads_chroma_after_the_padding_rows() {
        // 4x2 visible in a 4x4 luma plane: chroma must come from row 4, not row 2.
        let (w, h, rows) = (4usize, 2usize, 4usize);
        let mut src = vec![128u8; w * rows + w * rows.div_ceil(2)];
        src[w * 2..w * rows].fill(0); // padding rows: never read as chroma
        src[w * rows..].copy_from_slice(&[255, 128, 255, 128, 0, 0, 0, 0]);
        let rgb = nv12_padded_to_rgb(&src, w, h, w, rows).unwrap();
        assert_eq!(rgb.len(), w * h * 3);
        let plain = nv12_to_rgb(&[vec![128u8; w * h], vec![255, 128, 255, 128]].concat(), w, h, w).unwrap();
        assert_eq!(rgb, plain);
        assert!(nv12_padded_to_rgb(&src[..w * rows], w, h, w, rows).is_err(), "too short for its chroma");
    }

    #[test]
    fn nv12_to_i420_deinterleaves_chroma_and_refuses_wrong_sizes() {
        let nv12 = [1, 2, 3, 4, 5, 6, 7, 8, 10, 20, 30, 40];
        assert_eq!(nv12_to_i420(&nv12, 4, 2), Some(vec![1, 2, 3, 4, 5, 6, 7, 8, 10, 30, 20, 40]));
        assert_eq!(nv12_to_i420(&nv12[..11], 4, 2), None);
        assert_eq!(nv12_to_i420(&nv12, 3, 2), None);
        assert_eq!(nv12_to_i420(&[], usize::MAX, 2), None);
    }

    #[test]
    fn one_colour_survives_yuv_within_a_level() {
        for rgb in [[0, 0, 0], [255, 255, 255], [200, 200, 200], [0, 122, 255], [52, 199, 89], [20, 60, 120]] {
            let [y, u, v] = rgb_to_yuv(rgb);
            let back = yuv_to_rgb(y, u, v);
            for (a, b) in rgb.iter().zip(back) {
                assert!(a.abs_diff(b) <= 3, "{rgb:?} -> {back:?}");
            }
        }
    }

    #[test]
    fn i420_round_trips_and_honours_padded_rows() {
        let (w, h) = (8usize, 6usize);
        let rgb: Vec<u8> = [40u8, 200, 90].iter().copied().cycle().take(w * h * 3).collect();
        let i420 = rgb_to_i420(&rgb, w, h);
        let back = i420_to_rgb(&i420, w, h, w, h).unwrap();
        assert!(back.iter().zip(&rgb).all(|(a, b)| a.abs_diff(*b) <= 4), "{back:?}");
        // The same picture in a decoder's buffer padded to 8 rows.
        let mut padded = vec![0u8; w * 8 + 2 * (w / 2) * 4];
        padded[..w * h].copy_from_slice(&i420[..w * h]);
        let (c, cw) = (w * h, (w / 2) * (h / 2));
        padded[w * 8..w * 8 + cw].copy_from_slice(&i420[c..c + cw]);
        padded[w * 8 + (w / 2) * 4..w * 8 + (w / 2) * 4 + cw].copy_from_slice(&i420[c + cw..]);
        assert_eq!(i420_to_rgb(&padded, w, h, w, 8).unwrap(), back);
        assert!(matches!(i420_to_rgb(&i420[..10], w, h, w, h), Err(ConvertError::Short { .. })));
        // pad_i420 makes that layout (edge rows repeated) and i420_to_rgb reads it back.
        let made = pad_i420(&i420, w, h, w + 4, 8);
        assert_eq!(made.len(), (w + 4) * 8 + 2 * ((w + 4) / 2) * 4);
        assert_eq!(i420_to_rgb(&made, w, h, w + 4, 8).unwrap(), back);
        assert_eq!(&made[(w + 4) * 7..(w + 4) * 7 + w], &i420[w * 5..w * 6], "last row repeated");
    }

    #[test]
    fn primaries_survive_the_round_trip() {
        for (rgb, tol) in [([255u8, 0, 0], 4), ([0, 255, 0], 4), ([0, 0, 255], 4), ([128, 128, 128], 2), ([0, 0, 0], 1)]
        {
            let frame: Vec<u8> = rgb.iter().copied().cycle().take(4 * 2 * 3).collect();
            let yuyv = rgb_to_yuyv(&frame, 4, 2);
            let back = packed422_to_rgb(&yuyv, 4, 2, 8, false).unwrap();
            for (a, b) in back.iter().zip(&frame) {
                assert!(a.abs_diff(*b) <= tol, "{rgb:?} -> {back:?}");
            }
        }
    }

    #[test]
    fn uyvy_and_nv12_match_yuyv() {
        let (w, h) = (4usize, 2usize);
        let yuyv: Vec<u8> = (0..w * h * 2).map(|i| u8::try_from(i * 37 % 200 + 20).unwrap()).collect();
        let uyvy: Vec<u8> = yuyv.chunks_exact(2).flat_map(|p| [p[1], p[0]]).collect();
        assert_eq!(packed422_to_rgb(&uyvy, w, h, 0, true).unwrap(), packed422_to_rgb(&yuyv, w, h, 0, false).unwrap());
        // NV12 with the same luma and (vertically shared) chroma.
        let mut nv12 = vec![128u8; w * h + w * h / 2];
        for y in 0..h {
            for x in 0..w {
                nv12[y * w + x] = yuyv[y * w * 2 + x * 2];
            }
        }
        for x in (0..w).step_by(2) {
            nv12[w * h + x] = yuyv[x * 2 + 1];
            nv12[w * h + x + 1] = yuyv[x * 2 + 3];
        }
        let rgb = nv12_to_rgb(&nv12, w, h, w).unwrap();
        assert_eq!(&rgb[..w * 3], &packed422_to_rgb(&yuyv, w, h, 0, false).unwrap()[..w * 3]);
    }

    #[test]
    fn i420_planes_average_chroma() {
        let rgb: Vec<u8> = [200u8, 30, 40].iter().copied().cycle().take(4 * 2 * 3).collect();
        let i420 = rgb_to_i420(&rgb, 4, 2);
        assert_eq!(i420.len(), 8 + 2 + 2);
        let yuyv = rgb_to_yuyv(&rgb, 4, 2);
        assert_eq!(&i420[..4], &[yuyv[0], yuyv[2], yuyv[4], yuyv[6]]);
        assert_eq!((i420[8], i420[10]), (yuyv[1], yuyv[3]), "uniform colour: chroma unchanged");
    }

    #[test]
    fn hostile_sizes_are_errors_not_panics() {
        // Found by the raw_convert fuzz target: `stride * (height - 1) + width * 2` overflowed
        // (and in release wrapped, passed the length check and sliced out of range).
        let size = |r: Result<Vec<u8>, ConvertError>| matches!(r, Err(ConvertError::Size { .. }));
        assert!(size(packed422_to_rgb(&[], 3_570_717_696, 3_570_717_908, 54_484, false)));
        assert!(size(nv12_to_rgb(&[], usize::MAX - 1, usize::MAX / 2, 0)));
        assert!(size(i420_to_rgb(&[], 2, 2, usize::MAX / 2, usize::MAX / 2)));
        assert!(size(rgb24_rows(&[], usize::MAX / 2, 2, 0)));
        // Width 0 passed the length check, then chunks_exact_mut(0) panicked.
        assert!(size(packed422_to_rgb(&[0; 16], 0, 4, 0, false)));
        assert!(size(nv12_to_rgb(&[0; 16], 0, 4, 4)));
        assert!(size(i420_to_rgb(&[0; 16], 0, 4, 4, 4)));
        assert!(size(rgb24_rows(&[0; 16], 0, 4, 0)));
        assert!(size(packed422_to_rgb(&[0; 16], 2, 0, 4, false)));
        // RGB3 with a stride: the last line was cut short although w*h*3 bytes were there.
        assert!(matches!(rgb24_rows(&[7; 6], 1, 2, 4), Err(ConvertError::Short { needed: 7, .. })));
        assert_eq!(rgb24_rows(&[1, 2, 3, 0, 4, 5, 6], 1, 2, 4).unwrap(), vec![1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn short_buffers_and_odd_widths_are_errors() {
        assert!(matches!(packed422_to_rgb(&[0; 7], 2, 2, 4, false), Err(ConvertError::Short { .. })));
        assert!(nv12_to_rgb(&[0; 6], 2, 2, 2).is_ok());
        assert!(matches!(nv12_to_rgb(&[0; 5], 2, 2, 2), Err(ConvertError::Short { .. })));
        assert_eq!(packed422_to_rgb(&[0; 12], 3, 1, 6, false), Err(ConvertError::OddWidth("YUYV")));
    }
}
