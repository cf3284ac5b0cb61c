//! Phone screens for the engine: light-on-dark regions made dark-on-light, small text
//! scaled up, and the engine's boxes mapped back to the input's pixels. Pure Rust.
//!
//! Polarity: Tesseract reads dark text on a light background. A phone screen mixes both
//! (the sim's home screen has white labels on a dark-blue gradient, its apps dark text on
//! white, buttons white on blue). Each pixel is replaced by its distance from its local
//! background (see `normalize`), drawn dark on white: text comes out dark whatever its
//! polarity, and gradients and coloured panels come out white.
//!
//! Scale: Tesseract's LSTM misreads small text. A 723-px-wide screenshot of a 393-pt-wide
//! iPhone has 1.84 px per point, so an 11-pt caption's x-height is about 10 px;
//! [`Preprocess::for_picture`] scales such a picture by 1.5 (measured best, see
//! [`NATIVE_WIDTH`]).

use super::{GrayImage, TextBox, Word};

/// The picture width (pixels) that needs no scaling: about 2.8 px per point on a
/// 393-pt-wide phone, where an 11-pt caption has a ~15 px x-height. Measured on the sim's
/// screens (bench `ocr`): 1.5x a 723-px screenshot read more texts exactly than 1x, 2x or
/// 2.5x, and faster than 2x.
pub const NATIVE_WIDTH: u32 = 1100;
/// Largest scale applied (a small region is not blown up further).
pub const MAX_SCALE: f32 = 2.5;
/// Region background tile size, in input pixels.
pub const TILE: u32 = 32;
/// Block size at which a region's background is chosen, in input pixels.
const FINE: usize = 8;
/// How much a pixel's distance from the background is amplified: a difference of 128 or
/// more is full black.
const GAIN: u32 = 2;

/// How to prepare one picture.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Preprocess {
    /// Output pixels per input pixel (1.0 = unchanged).
    pub scale: f32,
    /// Replace pixels by their distance from the local background (reads light-on-dark
    /// text); `false` hands the picture over as it is.
    pub normalize: bool,
}

impl Preprocess {
    /// The choice for a picture `width` pixels wide: scaled towards [`NATIVE_WIDTH`] in
    /// steps of 0.5 (1.0 ..= [`MAX_SCALE`]), normalized.
    pub fn for_picture(width: u32) -> Preprocess {
        let raw = NATIVE_WIDTH as f32 / width.max(1) as f32;
        let stepped = (raw * 2.0).round() / 2.0;
        Preprocess { scale: stepped.clamp(1.0, MAX_SCALE), normalize: true }
    }
}

/// A picture ready for the engine.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    /// The picture to read.
    pub image: GrayImage,
    /// Its pixels per input pixel.
    pub scale: f32,
}

impl Prepared {
    /// `words` (boxes in this picture's pixels) with their boxes in the input's pixels
    /// (`width` x `height`).
    pub fn map_back(&self, words: Vec<Word>, width: u32, height: u32) -> Vec<Word> {
        words.into_iter().map(|w| Word { bbox: unscale_box(w.bbox, self.scale, width, height), ..w }).collect()
    }
}

/// Prepares `image` (already [`GrayImage::check`]ed) as `how` says.
pub fn prepare(image: &GrayImage, how: Preprocess) -> Prepared {
    let normalized;
    let source = if how.normalize {
        normalized = normalize(image);
        &normalized
    } else {
        image
    };
    let scale = if how.scale.is_finite() { how.scale.clamp(1.0, MAX_SCALE) } else { 1.0 };
    let out = if (scale - 1.0).abs() < f32::EPSILON { source.clone() } else { resize(source, scale) };
    Prepared { image: out, scale }
}

/// The part of `image` inside `b` grown by `pad` pixels on every side (clamped to the
/// picture), and where that part is.
pub fn crop(image: &GrayImage, b: TextBox, pad: u32) -> (GrayImage, TextBox) {
    let x0 = b.x.saturating_sub(pad).min(image.width.saturating_sub(1));
    let y0 = b.y.saturating_sub(pad).min(image.height.saturating_sub(1));
    let x1 = b.x.saturating_add(b.width).saturating_add(pad).clamp(x0 + 1, image.width.max(x0 + 1));
    let y1 = b.y.saturating_add(b.height).saturating_add(pad).clamp(y0 + 1, image.height.max(y0 + 1));
    let (w, h) = (x1 - x0, y1 - y0);
    let mut pixels = Vec::with_capacity(w as usize * h as usize);
    for y in y0..y1 {
        let start = y as usize * image.width as usize + x0 as usize;
        pixels.extend_from_slice(image.pixels.get(start..start + w as usize).unwrap_or(&[]));
    }
    (GrayImage { width: w, height: h, pixels }, TextBox { x: x0, y: y0, width: w, height: h })
}

/// A box in scaled pixels mapped to the input's, clamped to `width` x `height`.
pub fn unscale_box(b: TextBox, scale: f32, width: u32, height: u32) -> TextBox {
    let s = f64::from(if scale.is_finite() && scale > 0.0 { scale } else { 1.0 });
    let to_input = |v: u32, limit: u32, up: bool| {
        let f = f64::from(v) / s;
        let r = if up { f.ceil() } else { f.floor() };
        // Non-negative and clamped to `limit`, so the cast neither wraps nor truncates.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let r = r.clamp(0.0, f64::from(limit)) as u32;
        r
    };
    let x0 = to_input(b.x, width, false);
    let y0 = to_input(b.y, height, false);
    let x1 = to_input(b.x.saturating_add(b.width), width, true);
    let y1 = to_input(b.y.saturating_add(b.height), height, true);
    TextBox { x: x0, y: y0, width: x1.saturating_sub(x0), height: y1.saturating_sub(y0) }
}

/// The median of each `tile` x `tile` tile, row-major, and the grid's size.
fn tile_medians(image: &GrayImage, tile: usize) -> (Vec<u8>, usize, usize) {
    let (w, h) = (image.width as usize, image.height as usize);
    let (tx, ty) = (w.div_ceil(tile), h.div_ceil(tile));
    let mut out = Vec::with_capacity(tx * ty);
    for j in 0..ty {
        for i in 0..tx {
            let mut hist = [0u32; 256];
            let (x0, x1) = (i * tile, ((i + 1) * tile).min(w));
            let (y0, y1) = (j * tile, ((j + 1) * tile).min(h));
            for y in y0..y1 {
                for &p in &image.pixels[y * w + x0..y * w + x1] {
                    hist[usize::from(p)] += 1;
                }
            }
            let half = u32::try_from(((x1 - x0) * (y1 - y0)).div_ceil(2)).unwrap_or(u32::MAX);
            let mut seen = 0u32;
            let mut median = 255u8;
            for (v, &n) in hist.iter().enumerate() {
                seen += n;
                if seen >= half {
                    median = u8::try_from(v).unwrap_or(u8::MAX);
                    break;
                }
            }
            out.push(median);
        }
    }
    (out, tx, ty)
}

/// Distances up to this (gray levels) are no ink: two near backgrounds (a grouped list's
/// card on its page, a segmented control's track) taken one for the other, gradient
/// banding. Faint text (disabled labels) differs by 35 or more.
const NOISE: u8 = 16;
/// How near (gray levels) a pixel must be to a background to count as showing it.
const EXPLAINS: u8 = 12;
/// Two neighbouring backgrounds this far apart (gray levels) are two regions (a button on
/// a page), not one gradient.
const REGION_STEP: u8 = 24;
/// Local contrast below this (gray levels) is not text (gradient banding, noise): it is
/// never amplified past [`MAX_GAIN`] x this.
const CONTRAST_FLOOR: u32 = 32;
/// The most a faint region's contrast is amplified (light-gray disabled text on white).
const MAX_GAIN: u32 = 8;
/// What the local contrast is amplified to (of 255).
const CONTRAST_TARGET: u32 = 200;
/// How far (in `FINE` blocks) a pixel's local contrast is looked for.
const CONTRAST_REACH: usize = 2;

/// Each pixel's distance from its local background, dark on white.
///
/// Background: each `FINE` x `FINE` block takes, among the medians of the 3x3 `TILE` x
/// `TILE` tiles around it, the one that most of its pixels show (text, thin strokes,
/// never sets a background, even in a block it mostly covers; a region's edge is
/// followed to within a block instead of being blurred over a tile).
///
/// Region edges: where a neighbouring block has another region's background (a button on
/// a page), a pixel showing that background (within [`EXPLAINS`]) or a blend of the two
/// is background too: a button does not come
/// out as a black frame around its label, which the engine would not read.
///
/// Contrast: the distance is amplified by the local contrast (the largest distance among
/// the blocks within [`CONTRAST_REACH`]), so light-gray (disabled) text comes out as dark as black text;
/// below [`CONTRAST_FLOOR`] nothing is amplified further (no banding made into strokes).
fn normalize(image: &GrayImage) -> GrayImage {
    let (coarse, tx, ty) = tile_medians(image, TILE as usize);
    let (w, h) = (image.width as usize, image.height as usize);
    let (fx, fy) = (w.div_ceil(FINE), h.div_ceil(FINE));
    let t = TILE as usize;
    let mut bg = vec![255u8; fx * fy];
    for j in 0..fy {
        let cj = ((j * FINE + FINE / 2) / t).min(ty - 1);
        let (y0, y1) = (j * FINE, ((j + 1) * FINE).min(h));
        for i in 0..fx {
            let ci = ((i * FINE + FINE / 2) / t).min(tx - 1);
            let (x0, x1) = (i * FINE, ((i + 1) * FINE).min(w));
            let mut hist = [0u16; 256];
            for y in y0..y1 {
                for &p in &image.pixels[y * w + x0..y * w + x1] {
                    hist[usize::from(p)] += 1;
                }
            }
            let shown = |c: u8| -> u32 {
                let (lo, hi) = (usize::from(c.saturating_sub(EXPLAINS)), usize::from(c.saturating_add(EXPLAINS)));
                hist[lo..=hi].iter().map(|&n| u32::from(n)).sum()
            };
            let mut best = coarse[cj * tx + ci];
            let mut best_shown = shown(best);
            for nj in cj.saturating_sub(1)..=(cj + 1).min(ty - 1) {
                for ni in ci.saturating_sub(1)..=(ci + 1).min(tx - 1) {
                    let c = coarse[nj * tx + ni];
                    let n = shown(c);
                    if n > best_shown {
                        (best, best_shown) = (c, n);
                    }
                }
            }
            bg[j * fx + i] = best;
        }
    }
    // The other regions' backgrounds next to each block (at most 8).
    let mut others: Vec<[Option<u8>; 8]> = vec![[None; 8]; fx * fy];
    for j in 0..fy {
        for i in 0..fx {
            let own = bg[j * fx + i];
            let mut k = 0;
            for nj in j.saturating_sub(1)..=(j + 1).min(fy - 1) {
                for ni in i.saturating_sub(1)..=(i + 1).min(fx - 1) {
                    let n = bg[nj * fx + ni];
                    if n.abs_diff(own) > REGION_STEP && k < 8 {
                        others[j * fx + i][k] = Some(n);
                        k += 1;
                    }
                }
            }
        }
    }
    let mut dist = vec![0u8; w * h];
    for y in 0..h {
        let row = &image.pixels[y * w..(y + 1) * w];
        let b = (y / FINE) * fx;
        for (x, (&p, d)) in row.iter().zip(dist[y * w..(y + 1) * w].iter_mut()).enumerate() {
            let block = b + x / FINE;
            let own = p.abs_diff(bg[block]);
            // Only a pixel showing the other region, or the blend of the two along their
            // edge (anti-aliased rounded corners), is taken for background: text near
            // another region (a label under the pointer) keeps its own distance.
            let b = bg[block];
            let edge =
                others[block].iter().flatten().any(|&n| p.abs_diff(n) <= EXPLAINS || (p >= b.min(n) && p <= b.max(n)));
            *d = if edge || own <= NOISE { 0 } else { own };
        }
    }
    remove_lines(&mut dist, w, h);
    // Local contrast: the largest distance in each block, then over the blocks within
    // CONTRAST_REACH (a word's letters share their neighbours' contrast).
    let mut block_max = vec![0u8; fx * fy];
    for y in 0..h {
        for (x, &d) in dist[y * w..(y + 1) * w].iter().enumerate() {
            let m = &mut block_max[(y / FINE) * fx + x / FINE];
            *m = (*m).max(d);
        }
    }
    let r = CONTRAST_REACH;
    let gain: Vec<u32> = (0..fx * fy)
        .map(|k| {
            let (i, j) = (k % fx, k / fx);
            let mut m = 0u32;
            for nj in j.saturating_sub(r)..=(j + r).min(fy - 1) {
                for ni in i.saturating_sub(r)..=(i + r).min(fx - 1) {
                    m = m.max(u32::from(block_max[nj * fx + ni]));
                }
            }
            // The local contrast comes out at CONTRAST_TARGET (anti-aliasing kept, not
            // saturated); at least GAIN, at most MAX_GAIN, in 1/16ths.
            (CONTRAST_TARGET * 16 / m.max(CONTRAST_FLOOR)).clamp(GAIN * 16, MAX_GAIN * 16)
        })
        .collect();
    let mut out = vec![255u8; w * h];
    for y in 0..h {
        let g = &gain[(y / FINE) * fx..(y / FINE + 1) * fx];
        for (x, (&d, o)) in dist[y * w..(y + 1) * w].iter().zip(out[y * w..(y + 1) * w].iter_mut()).enumerate() {
            let v = u32::from(d) * g[x / FINE] / 16;
            *o = 255 - u8::try_from(v.min(255)).unwrap_or(u8::MAX);
        }
    }
    GrayImage { width: image.width, height: image.height, pixels: out }
}

/// A distance at least this (gray levels) is ink, for finding lines.
const LINE_INK: u8 = 16;
/// How far (pixels) above and below a line (left and right of a column) is looked at to
/// tell a thin line from a shape's edge.
const LINE_CLEARANCE: usize = 3;

/// The shortest run (pixels) taken for a line in a `width`-px picture: longer than any
/// letter's stroke at that width (a large title's "l" is about width / 16).
fn line_min(width: usize) -> usize {
    (width / 10).max(40)
}

/// Removes thin straight lines from `dist` (`w` x `h` distances): list separators, an
/// alert's dividers, a box's edges. They are ink to the engine, which then takes the text
/// between them for a table's cells or a picture and reads it badly or not at all; and
/// they would set the local contrast of the text beside them. A line is a horizontal (or
/// vertical) run of ink at least [`line_min`] long with no ink [`LINE_CLEARANCE`] pixels
/// off it along most of its length; a letter's stroke is never that long.
fn remove_lines(dist: &mut [u8], w: usize, h: usize) {
    let min_len = line_min(w);
    let mut clear = Vec::new();
    // Rows, then columns (a picture as tall as the screen: the same minimum as rows).
    lines_along(dist, h, w, min_len, |y, x| y * w + x, &mut clear);
    lines_along(dist, w, h, min_len, |x, y| y * w + x, &mut clear);
    for i in clear {
        dist[i] = 0;
    }
}

/// Adds to `clear` the pixels of thin lines along `inner` (0..`inner_len`) at each
/// `outer` (0..`outer_len`); `at(outer, inner)` is a pixel's index in `dist`.
fn lines_along(
    dist: &[u8],
    outer_len: usize,
    inner_len: usize,
    min_len: usize,
    at: impl Fn(usize, usize) -> usize,
    clear: &mut Vec<usize>,
) {
    for o in LINE_CLEARANCE..outer_len.saturating_sub(LINE_CLEARANCE) {
        let mut i = 0;
        while i < inner_len {
            if dist[at(o, i)] < LINE_INK {
                i += 1;
                continue;
            }
            let start = i;
            while i < inner_len && dist[at(o, i)] >= LINE_INK {
                i += 1;
            }
            if i - start < min_len {
                continue;
            }
            let thin = (start..i)
                .filter(|&k| dist[at(o - LINE_CLEARANCE, k)] < LINE_INK && dist[at(o + LINE_CLEARANCE, k)] < LINE_INK)
                .count();
            if thin * 10 >= (i - start) * 9 {
                clear.extend((start..i).map(|k| at(o, k)));
            }
        }
    }
}

/// Bilinear resize by `scale` (> 1).
fn resize(image: &GrayImage, scale: f32) -> GrayImage {
    let (w, h) = (image.width as usize, image.height as usize);
    // `scale` is at most MAX_SCALE and the input within MAX_READ_EDGE: the product fits.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let size = |n: usize| ((n as f32 * scale).round() as usize).max(1);
    let (ow, oh) = (size(w), size(h));
    let axis = |n_out: usize, n_in: usize| -> Vec<(usize, usize, f32)> {
        (0..n_out)
            .map(|p| {
                let f = ((p as f32 + 0.5) / scale - 0.5).max(0.0);
                // Non-negative and clamped below n_in.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let i0 = (f.floor() as usize).min(n_in - 1);
                let i1 = (i0 + 1).min(n_in - 1);
                (i0, i1, (f - i0 as f32).clamp(0.0, 1.0))
            })
            .collect()
    };
    let cols = axis(ow, w);
    let rows = axis(oh, h);
    let mut out = vec![0u8; ow * oh];
    for (y, &(j0, j1, fy)) in rows.iter().enumerate() {
        let (r0, r1) = (&image.pixels[j0 * w..(j0 + 1) * w], &image.pixels[j1 * w..(j1 + 1) * w]);
        let row = &mut out[y * ow..(y + 1) * ow];
        for (o, &(i0, i1, fx)) in row.iter_mut().zip(cols.iter()) {
            let top = f32::from(r0[i0]) * (1.0 - fx) + f32::from(r0[i1]) * fx;
            let bottom = f32::from(r1[i0]) * (1.0 - fx) + f32::from(r1[i1]) * fx;
            // A convex combination of bytes: within 0..=255.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let v = (top * (1.0 - fy) + bottom * fy).round() as u8;
            *o = v;
        }
    }
    // Sizes come from usize products of u32 edges times <= MAX_SCALE: within u32.
    GrayImage {
        width: u32::try_from(ow).unwrap_or(u32::MAX),
        height: u32::try_from(oh).unwrap_or(u32::MAX),
        pixels: out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(w: u32, h: u32, v: u8) -> GrayImage {
        GrayImage { width: w, height: h, pixels: vec![v; (w * h) as usize] }
    }

    fn at(img: &GrayImage, x: u32, y: u32) -> u8 {
        img.pixels[(y * img.width + x) as usize]
    }

    #[test]
    fn light_text_on_dark_comes_out_dark_on_white() {
        let mut img = flat(64, 64, 30);
        for x in 10..34 {
            img.pixels[(20 * 64 + x) as usize] = 250;
        }
        let out = prepare(&img, Preprocess { scale: 1.0, normalize: true }).image;
        assert!(at(&out, 30, 20) < 40, "stroke {}", at(&out, 30, 20));
        assert!(at(&out, 30, 40) > 230, "background {}", at(&out, 30, 40));
    }

    #[test]
    fn dark_text_on_light_stays_dark_on_white() {
        let mut img = flat(64, 64, 240);
        for x in 10..34 {
            img.pixels[(20 * 64 + x) as usize] = 20;
        }
        let out = prepare(&img, Preprocess { scale: 1.0, normalize: true }).image;
        assert!(at(&out, 30, 20) < 40);
        assert!(at(&out, 30, 40) > 230);
    }

    #[test]
    fn a_gradient_background_comes_out_white() {
        let mut img = flat(40, 256, 0);
        for y in 0..256u32 {
            for x in 0..40 {
                img.pixels[(y * 40 + x) as usize] = u8::try_from(y / 2 + 20).unwrap();
            }
        }
        let out = prepare(&img, Preprocess { scale: 1.0, normalize: true }).image;
        assert!(out.pixels.iter().all(|&p| p > 200), "min {}", out.pixels.iter().min().unwrap());
    }

    /// A `w` x `h` picture of `page` with a `bw` x `bh` button of `button` at (`bx`, `by`).
    fn page_with_button(page: u8, button: u8, (bx, by, bw, bh): (u32, u32, u32, u32)) -> GrayImage {
        let mut img = flat(160, 160, page);
        for y in by..by + bh {
            for x in bx..bx + bw {
                img.pixels[(y * 160 + x) as usize] = button;
            }
        }
        img
    }

    #[test]
    fn a_button_is_not_a_frame_around_its_label() {
        // A blue (luma 90) button on a white page, a white label stroke inside it.
        let mut img = page_with_button(245, 90, (20, 40, 120, 64));
        for x in 70..90 {
            img.pixels[(70 * 160 + x) as usize] = 250;
        }
        let out = prepare(&img, Preprocess { scale: 1.0, normalize: true }).image;
        assert!(at(&out, 80, 70) < 60, "the label is ink: {}", at(&out, 80, 70));
        // The button's edges (left, top, right, bottom) are not.
        for (x, y) in [(20, 70), (21, 70), (80, 40), (80, 41), (139, 70), (80, 103)] {
            assert!(at(&out, x, y) > 200, "edge ({x}, {y}) came out {}", at(&out, x, y));
        }
    }

    #[test]
    fn faint_text_comes_out_as_dark_as_black_text() {
        // Disabled text: 40 levels under a light page, alone in its neighbourhood.
        let mut img = flat(160, 160, 242);
        for x in 40..44 {
            for y in 60..80 {
                img.pixels[(y * 160 + x) as usize] = 202;
            }
        }
        let out = prepare(&img, Preprocess { scale: 1.0, normalize: true }).image;
        assert!(at(&out, 42, 70) < 80, "faint stroke came out {}", at(&out, 42, 70));
        // A near background (a card 12 levels off) stays white.
        let card = page_with_button(242, 230, (10, 10, 100, 100));
        let out = prepare(&card, Preprocess { scale: 1.0, normalize: true }).image;
        assert!(out.pixels.iter().all(|&p| p > 200), "min {}", out.pixels.iter().min().unwrap_or(&0));
    }

    #[test]
    fn a_separator_line_is_removed_and_a_letter_stroke_kept() {
        let mut img = flat(200, 120, 250);
        // A one-pixel separator across the picture, and a letter's stroke ("l", shorter
        // than a tenth of the picture's width, as letters are on a phone's screen).
        for x in 0..200 {
            img.pixels[(30 * 200 + x) as usize] = 200;
        }
        for y in 60..90 {
            for x in 50..53 {
                img.pixels[(y * 200 + x) as usize] = 20;
            }
        }
        let out = prepare(&img, Preprocess { scale: 1.0, normalize: true }).image;
        assert!(at(&out, 100, 30) > 200, "separator came out {}", at(&out, 100, 30));
        assert!(at(&out, 51, 80) < 60, "the stroke came out {}", at(&out, 51, 80));
    }

    #[test]
    fn scaling_follows_the_picture_width() {
        assert_eq!(Preprocess::for_picture(723).scale, 1.5);
        assert_eq!(Preprocess::for_picture(1100).scale, 1.0);
        assert_eq!(Preprocess::for_picture(3000).scale, 1.0);
        assert_eq!(Preprocess::for_picture(100).scale, MAX_SCALE);
        assert_eq!(Preprocess::for_picture(550).scale, 2.0);
    }

    #[test]
    fn a_scaled_picture_has_the_scaled_size_and_keeps_its_values() {
        let img = flat(7, 3, 99);
        let p = prepare(&img, Preprocess { scale: 2.0, normalize: false });
        assert_eq!((p.image.width, p.image.height, p.scale), (14, 6, 2.0));
        assert!(p.image.pixels.iter().all(|&v| v == 99));
        assert!(p.image.check().is_ok());
    }

    #[test]
    fn a_one_pixel_picture_survives_every_step() {
        let img = flat(1, 1, 0);
        let p = prepare(&img, Preprocess::for_picture(1));
        assert_eq!((p.image.width, p.image.height), (3, 3));
    }

    #[test]
    fn a_crop_is_padded_and_clamped_to_the_picture() {
        let mut img = flat(10, 10, 0);
        img.pixels[0] = 9;
        let (c, at) = crop(&img, TextBox { x: 1, y: 1, width: 3, height: 3 }, 2);
        assert_eq!((at, c.pixels[0]), (TextBox { x: 0, y: 0, width: 6, height: 6 }, 9));
        assert!(c.check().is_ok());
        let (c, at) = crop(&img, TextBox { x: 8, y: 8, width: 50, height: 50 }, 4);
        assert_eq!(at, TextBox { x: 4, y: 4, width: 6, height: 6 });
        assert!(c.check().is_ok());
        let (c, _) = crop(&img, TextBox { x: 40, y: 40, width: 0, height: 0 }, 0);
        assert!(c.check().is_ok(), "a box outside still crops a pixel");
    }

    #[test]
    fn boxes_map_back_to_the_input_and_stay_inside_it() {
        let b = TextBox { x: 21, y: 40, width: 100, height: 31 };
        assert_eq!(unscale_box(b, 2.0, 723, 1568), TextBox { x: 10, y: 20, width: 51, height: 16 });
        let edge = TextBox { x: 1400, y: 3100, width: 100, height: 100 };
        let m = unscale_box(edge, 2.0, 723, 1568);
        assert!(m.x + m.width <= 723 && m.y + m.height <= 1568, "{m:?}");
        assert_eq!(unscale_box(b, f32::NAN, 723, 1568), b);
    }

    #[test]
    fn words_keep_their_text_when_mapped_back() {
        let p = Prepared { image: flat(2, 2, 0), scale: 2.0 };
        let w =
            Word { text: "Hi".into(), bbox: TextBox { x: 4, y: 4, width: 8, height: 8 }, confidence: 90.0, line: 3 };
        let m = p.map_back(vec![w], 100, 100);
        assert_eq!((m[0].text.as_str(), m[0].line, m[0].bbox), ("Hi", 3, TextBox { x: 2, y: 2, width: 4, height: 4 }));
    }
}
