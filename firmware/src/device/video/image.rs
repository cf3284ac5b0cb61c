//! Turning a frame region into a PNG observation: crop, scale to fit, encode fast.

use super::Frame;
use crate::device::geometry::PixelRect;

/// Errors producing an image.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The region is not inside the frame.
    #[error("region {0:?} is outside the frame")]
    Region(PixelRect),
    /// PNG encoding failed.
    #[error("encode PNG")]
    Png(#[from] png::EncodingError),
    /// The image could not be made small enough.
    #[error("image stays above {0} bytes even when scaled down")]
    TooLarge(usize),
}

/// An encoded image.
#[derive(Debug, Clone)]
pub struct EncodedImage {
    /// PNG bytes.
    pub png: Vec<u8>,
    /// Image width.
    pub width: u32,
    /// Image height.
    pub height: u32,
}

/// The size a `w`x`h` region takes when its longer edge is limited to `max_edge`.
pub fn fit(w: u32, h: u32, max_edge: u32) -> (u32, u32) {
    let long = w.max(h);
    if long <= max_edge {
        return (w.max(1), h.max(1));
    }
    let scale = |v: u32| u32::try_from(u64::from(v) * u64::from(max_edge) / u64::from(long)).unwrap_or(1).max(1);
    (scale(w), scale(h))
}

/// Crops `region` from `frame`, scales it (area average) to `size`, and returns RGB bytes.
pub fn crop_scale(frame: &Frame, region: PixelRect, size: (u32, u32)) -> Result<Vec<u8>, ImageError> {
    let full = PixelRect { x: 0, y: 0, width: frame.width, height: frame.height };
    if region.width == 0 || region.height == 0 || !full.contains_rect(&region) {
        return Err(ImageError::Region(region));
    }
    let (ow, oh) = (size.0 as usize, size.1 as usize);
    let (rw, rh) = (region.width as usize, region.height as usize);
    let mut out = vec![0u8; ow * oh * 3];
    if (ow, oh) == (rw, rh) {
        // Unscaled (a phone screen that fits `max_edge`): each row converted in place.
        for (y, line) in (region.y..).zip(out.chunks_exact_mut(rw * 3)) {
            if !frame.row_rgb(y, region.x, region.x + region.width, line) {
                return Err(ImageError::Region(region));
            }
        }
        return Ok(out);
    }
    // Source span of each output column, relative to the region, computed once.
    let xs: Vec<(usize, usize)> = (0..ow)
        .map(|ox| {
            let a = ox * rw / ow;
            let b = ((ox + 1) * rw / ow).max(a + 1);
            (a, b)
        })
        .collect();
    // One region row in the frame's own channels (each source row is read once: output
    // rows partition them). Averaging before converting costs one conversion per output
    // pixel instead of one per source pixel (a 2160p screenshot reads 8.3 M, writes 1.4 M).
    let mut row = vec![0u8; rw * 3];
    let mut sums = vec![0u32; ow * 3];
    // Per column, 2^16 / (pixels averaged), rounded: three integer divisions per output
    // pixel were a third of a 2160p screenshot's time. With at most 255·n per sum the
    // product stays below 2^24, and the rounding error is below half a level while fewer
    // than 256 pixels are averaged (any scale down to 1/16 in each direction).
    let (mut recips, mut recips_rows) = (vec![0u32; ow], 0);
    for oy in 0..oh {
        let y0 = region.y as usize + oy * rh / oh;
        let y1 = (region.y as usize + (oy + 1) * rh / oh).max(y0 + 1);
        sums.fill(0);
        for y in y0..y1 {
            // y < region.y + region.height ≤ frame.height, checked above; a short frame
            // (data not matching its size) is an error, not a panic.
            let y = u32::try_from(y).map_err(|_| ImageError::Region(region))?;
            if !frame.row_samples(y, region.x, region.x + region.width, &mut row) {
                return Err(ImageError::Region(region));
            }
            for (&(x0, x1), sum) in xs.iter().zip(sums.chunks_exact_mut(3)) {
                for px in row[x0 * 3..x1 * 3].chunks_exact(3) {
                    sum[0] += u32::from(px[0]);
                    sum[1] += u32::from(px[1]);
                    sum[2] += u32::from(px[2]);
                }
            }
        }
        if recips_rows != y1 - y0 {
            // Rows per output row take at most two values: recomputed rarely.
            recips_rows = y1 - y0;
            for (recip, &(x0, x1)) in recips.iter_mut().zip(&xs) {
                let n = u32::try_from(recips_rows * (x1 - x0)).unwrap_or(u32::MAX).max(1);
                *recip = ((1u32 << 16) + n / 2) / n;
            }
        }
        let line = &mut out[oy * ow * 3..(oy + 1) * ow * 3];
        for ((px, sum), &recip) in line.chunks_exact_mut(3).zip(sums.chunks_exact(3)).zip(&recips) {
            // u64: a sum of more than 2^16 pixels (a scale below 1/256) must not wrap.
            let mean = |c: usize| u8::try_from((u64::from(sum[c]) * u64::from(recip) + (1 << 15)) >> 16).unwrap_or(255);
            px.copy_from_slice(&frame.format.to_rgb([mean(0), mean(1), mean(2)]));
        }
    }
    Ok(out)
}

/// Encodes RGB bytes as PNG with the fastest compression (screenshots are on the hot path).
pub fn encode_png(rgb: &[u8], width: u32, height: u32) -> Result<Vec<u8>, ImageError> {
    let mut buf = Vec::with_capacity(rgb.len() / 4);
    {
        let mut enc = png::Encoder::new(&mut buf, width, height);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_compression(png::Compression::Fastest);
        let mut writer = enc.write_header()?;
        writer.write_image_data(rgb)?;
        writer.finish()?;
    }
    Ok(buf)
}

/// Crops, fits into `max_edge`, encodes; shrinks by 3/4 until the PNG is at most `max_bytes`.
pub fn observe(frame: &Frame, region: PixelRect, max_edge: u32, max_bytes: usize) -> Result<EncodedImage, ImageError> {
    let mut edge = max_edge;
    for _ in 0..8 {
        let (w, h) = fit(region.width, region.height, edge);
        let rgb = crop_scale(frame, region, (w, h))?;
        let png = encode_png(&rgb, w, h)?;
        if png.len() <= max_bytes {
            return Ok(EncodedImage { png, width: w, height: h });
        }
        edge = (w.max(h) * 3 / 4).max(16);
    }
    Err(ImageError::TooLarge(max_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gradient(w: u32, h: u32) -> Frame {
        let mut data = Vec::with_capacity((w * h * 3) as usize);
        for y in 0..h {
            for x in 0..w {
                let byte = |v: u32| u8::try_from(v % 256).unwrap_or(0);
                data.extend_from_slice(&[byte(x), byte(y), byte(x * 7 + y * 13)]);
            }
        }
        Frame::rgb(1, 1, w, h, data)
    }

    #[test]
    fn nv12_frames_crop_and_scale_like_their_rgb_conversion() {
        let f = gradient(64, 48);
        let nv12 = crate::device::video::convert::rgb_to_yuyv(&f.data, 64, 48);
        // YUYV → NV12: luma as is, chroma from even rows.
        let mut data: Vec<u8> = nv12.chunks_exact(2).map(|p| p[0]).collect();
        for row in nv12.chunks_exact(64 * 2).step_by(2) {
            for quad in row.chunks_exact(4) {
                data.extend_from_slice(&[quad[1], quad[3]]);
            }
        }
        let yuv = Frame { format: super::super::PixelFormat::Nv12, data: data.into(), ..f.clone() };
        let mut as_rgb = Vec::new();
        for y in 0..48 {
            let mut row = vec![0u8; 64 * 3];
            assert!(yuv.row_rgb(y, 0, 64, &mut row));
            as_rgb.extend_from_slice(&row);
        }
        let converted = Frame::rgb(1, 1, 64, 48, as_rgb);
        let region = PixelRect { x: 3, y: 5, width: 40, height: 30 };
        // Unscaled: every pixel exactly its own conversion.
        assert_eq!(crop_scale(&yuv, region, (40, 30)).unwrap(), crop_scale(&converted, region, (40, 30)).unwrap());
        // Scaled: averaged in YUV, then converted; only rounding and clamping of
        // out-of-gamut pixels (shared chroma) differ from averaging the converted RGB.
        let (scaled, reference) =
            (crop_scale(&yuv, region, (17, 13)).unwrap(), crop_scale(&converted, region, (17, 13)).unwrap());
        let worst = scaled.iter().zip(&reference).map(|(a, b)| a.abs_diff(*b)).max().unwrap();
        let mean = scaled.iter().zip(&reference).map(|(a, b)| u32::from(a.abs_diff(*b))).sum::<u32>() as f64
            / scaled.len() as f64;
        assert!(worst <= 24 && mean < 2.0, "worst {worst}, mean {mean}");
        let short = Frame { data: yuv.data[..100].into(), ..yuv };
        assert!(crop_scale(&short, region, (40, 30)).is_err(), "short data is an error, not a panic");
    }

    #[test]
    fn fit_keeps_aspect() {
        assert_eq!(fit(996, 2160, 1568), (723, 1568));
        assert_eq!(fit(498, 1080, 1568), (498, 1080));
    }

    #[test]
    fn unscaled_crop_is_exact_and_png_decodes() {
        let f = gradient(64, 48);
        let region = PixelRect { x: 10, y: 5, width: 20, height: 30 };
        let rgb = crop_scale(&f, region, (20, 30)).unwrap();
        let i = ((5 + 3) * 64 + 10 + 4) * 3;
        assert_eq!(&rgb[(3 * 20 + 4) * 3..(3 * 20 + 4) * 3 + 3], &f.data[i..i + 3]);
        let img = observe(&f, region, 1568, 1 << 20).unwrap();
        let dec = png::Decoder::new(std::io::Cursor::new(img.png));
        let mut reader = dec.read_info().unwrap();
        let mut out = vec![0; reader.output_buffer_size().unwrap()];
        reader.next_frame(&mut out).unwrap();
        assert_eq!(&out[..rgb.len()], &rgb[..]);
    }

    #[test]
    fn rejects_regions_outside_the_frame_and_shrinks_to_fit_bytes() {
        let f = gradient(64, 48);
        assert!(crop_scale(&f, PixelRect { x: 60, y: 0, width: 10, height: 10 }, (10, 10)).is_err());
        let region = PixelRect { x: 0, y: 0, width: 64, height: 48 };
        let small = observe(&f, region, 64, 2000).unwrap();
        assert!(small.png.len() <= 2000 && small.width < 64);
    }
}
