//! Closed-loop pointer calibration: where did the pointer really go?
//!
//! We move the pointer to known HID points, find it in captured frames, and fit an affine
//! map from normalized picture coordinates to HID units. Finding the pointer uses
//! differences only: in the frame taken at point k, the pointer's pixels differ both from
//! the frame at point k-1 and from the frame at point k+1, while the pointer's other
//! positions show up in only one of the two differences.

use serde::{Deserialize, Serialize};

use super::geometry::{normalized_to_hid, PixelRect};
use super::hid::{POINTER_MAX, POINTER_MIN};
use super::video::convert::rgb_to_yuv;
use super::video::Frame;

/// A luma difference above this counts as changed (compression noise stays below).
const CHANGED_LUMA: u8 = 16;
/// An RGB channel difference above this counts as a changed colour.
const CHANGED_COLOUR: u8 = 24;
/// Fewer changed pixels than this is not a pointer.
const MIN_PIXELS: usize = 4;

/// Affine map from normalized picture coordinates (0..1) to HID units:
/// `hid_x = m[0][0]*nx + m[0][1]*ny + m[0][2]`, `hid_y = m[1][0]*nx + m[1][1]*ny + m[1][2]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Affine {
    /// The 2x3 matrix.
    pub m: [[f64; 3]; 2],
}

impl Affine {
    /// The map used without calibration: the picture spans the HID range exactly.
    pub fn identity() -> Affine {
        let full = f64::from(POINTER_MAX) + 1.0;
        Affine { m: [[full, 0.0, 0.0], [0.0, full, 0.0]] }
    }

    /// Applies the map, unclamped.
    pub fn apply(&self, n: (f64, f64)) -> (f64, f64) {
        let [a, b] = self.m;
        (a[0] * n.0 + a[1] * n.1 + a[2], b[0] * n.0 + b[1] * n.1 + b[2])
    }

    /// Applies the map and clamps into valid HID units (never 0).
    pub fn to_hid(&self, n: (f64, f64)) -> (u16, u16) {
        let (x, y) = self.apply(n);
        let full = f64::from(POINTER_MAX) + 1.0;
        let clamp = |v: f64| normalized_to_hid(v / full).max(POINTER_MIN);
        (clamp(x), clamp(y))
    }

    /// Least-squares fit of `hid ≈ A(normalized)` over at least 3 non-collinear points.
    pub fn fit(points: &[CalibrationPoint]) -> Option<Affine> {
        if points.len() < 3 {
            return None;
        }
        let pairs = points.iter().map(|p| (p.normalized, p.hid));
        // Normal equations (AᵀA) p = Aᵀb with rows [nx, ny, 1], solved once per axis.
        let mut ata = [[0.0f64; 3]; 3];
        let mut atb = [[0.0f64; 3]; 2];
        for ((nx, ny), (hx, hy)) in pairs {
            let row = [nx, ny, 1.0];
            for i in 0..3 {
                for j in 0..3 {
                    ata[i][j] += row[i] * row[j];
                }
                atb[0][i] += row[i] * hx;
                atb[1][i] += row[i] * hy;
            }
        }
        Some(Affine { m: [solve3(ata, atb[0])?, solve3(ata, atb[1])?] })
    }
}

/// One measured calibration point.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CalibrationPoint {
    /// Where the pointer was seen, normalized to the phone's picture (0..1).
    pub normalized: (f64, f64),
    /// The HID position that was sent.
    pub hid: (f64, f64),
}

/// Solves a 3x3 system by Gaussian elimination with partial pivoting.
// Index loops mirror the textbook algorithm; iterator forms obscure it.
#[allow(clippy::needless_range_loop)]
fn solve3(mut a: [[f64; 3]; 3], mut b: [f64; 3]) -> Option<[f64; 3]> {
    for col in 0..3 {
        let pivot = (col..3).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..3 {
            let f = a[row][col] / a[col][col];
            for k in col..3 {
                a[row][k] -= f * a[col][k];
            }
            b[row] -= f * b[col];
        }
    }
    let mut x = [0.0; 3];
    for i in (0..3).rev() {
        let s: f64 = (i + 1..3).map(|k| a[i][k] * x[k]).sum();
        x[i] = (b[i] - s) / a[i][i];
    }
    Some(x)
}

/// Most pixels a [`PointerSample`] keeps: a 1080p capture's portrait phone (498x1080) fits
/// at full resolution, a 2160p one is averaged 2x2. Sixteen full 2160p RGB frames were
/// 400 MB; a sample is at most 2.4 MB whatever the capture size.
const SAMPLE_MAX_PIXELS: u64 = 600_000;

/// What locating the pointer needs from one calibration frame: the searched area only,
/// area-averaged down to at most [`SAMPLE_MAX_PIXELS`], as luma and RGB. Taking a sample lets
/// go of the frame at once, so calibration never holds capture buffers.
#[derive(Debug, Clone)]
pub struct PointerSample {
    /// Capture-pixel position of the sample's top-left corner.
    origin: (u32, u32),
    /// Capture pixels per sample pixel along each axis (1 = full resolution).
    factor: u32,
    width: u32,
    height: u32,
    /// `[Y, R, G, B]` per pixel.
    pixels: Vec<[u8; 4]>,
}

impl PointerSample {
    /// Samples `area` (clipped to the frame) of `frame`.
    pub fn take(frame: &Frame, area: PixelRect) -> PointerSample {
        let x0 = area.x.min(frame.width);
        let y0 = area.y.min(frame.height);
        let x1 = (u64::from(area.x) + u64::from(area.width)).min(u64::from(frame.width));
        let y1 = (u64::from(area.y) + u64::from(area.height)).min(u64::from(frame.height));
        // x1 ≤ frame.width and y1 ≤ frame.height, both u32.
        let (w, h) = (u32::try_from(x1).unwrap_or(0) - x0, u32::try_from(y1).unwrap_or(0) - y0);
        let pixels = u64::from(w) * u64::from(h);
        let mut factor = 1u32;
        while pixels / (u64::from(factor) * u64::from(factor)) > SAMPLE_MAX_PIXELS {
            factor += 1;
        }
        let (sw, sh) = (w / factor, h / factor);
        let f = factor as usize;
        let mut pixels = vec![[0u8; 4]; sw as usize * sh as usize];
        let mut row = vec![0u8; sw as usize * f * 3];
        let mut sums = vec![[0u32; 3]; sw as usize];
        let cells = factor * factor;
        for (sy, out_row) in (0..sh).zip(pixels.chunks_exact_mut((sw as usize).max(1))) {
            sums.fill([0; 3]);
            for dy in 0..factor {
                // Rows of a frame whose data is short read as black.
                if !frame.row_rgb(y0 + sy * factor + dy, x0, x0 + sw * factor, &mut row) {
                    row.fill(0);
                }
                for (cell, sum) in row.chunks_exact(f * 3).zip(sums.iter_mut()) {
                    for px in cell.chunks_exact(3) {
                        for (acc, &v) in sum.iter_mut().zip(px) {
                            *acc += u32::from(v);
                        }
                    }
                }
            }
            for (o, sum) in out_row.iter_mut().zip(&sums) {
                // An average of u8 values fits in u8.
                let rgb = sum.map(|acc| u8::try_from(acc / cells).unwrap_or(u8::MAX));
                *o = [rgb_to_yuv(rgb)[0], rgb[0], rgb[1], rgb[2]];
            }
        }
        PointerSample { origin: (x0, y0), factor, width: sw, height: sh, pixels }
    }

    fn pixel(&self, x: u32, y: u32) -> Option<[u8; 4]> {
        self.pixels.get(y as usize * self.width as usize + x as usize).copied()
    }

    /// Bytes held.
    pub fn len(&self) -> usize {
        self.pixels.len() * 4
    }

    /// Whether the sample is empty (the area missed the frame).
    pub fn is_empty(&self) -> bool {
        self.pixels.is_empty()
    }
}

/// Sums of the pixels found changed, in sample coordinates.
#[derive(Default)]
struct Centroid {
    x: f64,
    y: f64,
    n: usize,
}

impl Centroid {
    fn add(&mut self, x: u32, y: u32) {
        self.x += f64::from(x) + 0.5;
        self.y += f64::from(y) + 0.5;
        self.n += 1;
    }
}

/// The pointer's centre in `current` (capture pixels), found against the samples taken at
/// the previous and next calibration points. `None` when nothing pointer-like changed or
/// the samples do not cover the same area.
///
/// Where the brightness changed, not the colour, when that explains the change: capture is
/// 4:2:0 or 4:2:2, so a pixel next to the pointer shares its chroma, and counting colour
/// changes widens the pointer towards even columns (half a capture pixel, more than one
/// phone pixel at 1080p). Colour decides only where the pointer sits on something as bright
/// as itself and brightness alone sees less than half of it.
pub fn locate_pointer(
    previous: &PointerSample,
    current: &PointerSample,
    next: &PointerSample,
    ignore: &[PixelRect],
) -> Option<(f64, f64)> {
    let same_shape = |s: &PointerSample| {
        (s.origin, s.factor, s.width, s.height) == (current.origin, current.factor, current.width, current.height)
    };
    if !same_shape(previous) || !same_shape(next) {
        return None;
    }
    let luma_differs = |a: [u8; 4], b: [u8; 4]| a[0].abs_diff(b[0]) > CHANGED_LUMA;
    let colour_differs =
        |a: [u8; 4], b: [u8; 4]| a[1..].iter().zip(&b[1..]).any(|(x, y)| x.abs_diff(*y) > CHANGED_COLOUR);
    let (mut by_luma, mut by_colour) = (Centroid::default(), Centroid::default());
    // Regions whose changes are not the pointer (the status-bar clock), in frame pixels.
    let ignored = |x: u32, y: u32| {
        let (fx, fy) = (current.origin.0 + x * current.factor, current.origin.1 + y * current.factor);
        ignore.iter().any(|r| r.contains_point(fx, fy))
    };
    for y in 0..current.height {
        for x in 0..current.width {
            let (Some(c), Some(p), Some(q)) = (current.pixel(x, y), previous.pixel(x, y), next.pixel(x, y)) else {
                continue;
            };
            if ignored(x, y) {
                continue;
            }
            if luma_differs(c, p) && luma_differs(c, q) {
                by_luma.add(x, y);
            }
            if colour_differs(c, p) && colour_differs(c, q) {
                by_colour.add(x, y);
            }
        }
    }
    let found = if by_luma.n >= MIN_PIXELS && by_luma.n * 2 >= by_colour.n { by_luma } else { by_colour };
    // n is a pixel count, far below 2^52: exact in f64.
    #[allow(clippy::cast_precision_loss)]
    let count = found.n as f64;
    let scale = f64::from(current.factor);
    (found.n >= MIN_PIXELS).then(|| {
        (f64::from(current.origin.0) + found.x / count * scale, f64::from(current.origin.1) + found.y / count * scale)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_a_known_map() {
        let truth = Affine { m: [[30000.0, 500.0, 1200.0], [-300.0, 31000.0, 800.0]] };
        let pairs: Vec<_> = [(0.1, 0.1), (0.9, 0.1), (0.1, 0.9), (0.9, 0.9), (0.5, 0.5)]
            .iter()
            .map(|&n| CalibrationPoint { normalized: n, hid: truth.apply(n) })
            .collect();
        let fitted = Affine::fit(&pairs).unwrap();
        for (row, want) in fitted.m.iter().zip(truth.m) {
            for (a, b) in row.iter().zip(want) {
                assert!((a - b).abs() < 1e-6, "{fitted:?}");
            }
        }
        assert!(Affine::fit(&pairs[..2]).is_none());
        let collinear: Vec<_> = [0.1, 0.2, 0.3]
            .iter()
            .map(|&v| CalibrationPoint { normalized: (v, v), hid: (v * 10.0, v * 10.0) })
            .collect();
        assert!(Affine::fit(&collinear).is_none());
    }

    #[test]
    fn identity_matches_uncalibrated_mapping() {
        assert_eq!(Affine::identity().to_hid((0.5, 0.25)), (16384, 8192));
        assert_eq!(Affine::identity().to_hid((0.0, 2.0)), (1, 32767));
    }

    fn frame_with_disc(cx: u32, cy: u32) -> Frame {
        sized_frame_with_disc(100, 80, cx, cy, 3)
    }

    fn sized_frame_with_disc(w: u32, h: u32, cx: u32, cy: u32, r: u32) -> Frame {
        let mut data = vec![50u8; (w * h * 3) as usize];
        for y in 0..h {
            for x in 0..w {
                if x.abs_diff(cx).pow(2) + y.abs_diff(cy).pow(2) <= r * r {
                    let i = ((y * w + x) * 3) as usize;
                    data[i..i + 3].copy_from_slice(&[220, 220, 220]);
                }
            }
        }
        Frame::rgb(1, 1, w, h, data)
    }

    #[test]
    fn locates_the_pointer_between_its_neighbours() {
        let (a, b, c) = (frame_with_disc(10, 10), frame_with_disc(50, 40), frame_with_disc(90, 70));
        let area = PixelRect { x: 0, y: 0, width: 100, height: 80 };
        let [a, b, c] = [&a, &b, &c].map(|f| PointerSample::take(f, area));
        assert_eq!(b.factor, 1, "a small area is kept at full resolution");
        let (x, y) = locate_pointer(&a, &b, &c, &[]).unwrap();
        assert!((x - 50.5).abs() < 0.01 && (y - 40.5).abs() < 0.01, "{x} {y}");
        assert!(locate_pointer(&b, &b, &b, &[]).is_none());
        // A change elsewhere (a clock ticking twice) pulls the centre off, unless ignored.
        let clock = |f: &Frame, v: u8| {
            let mut f = f.clone();
            let mut data = f.data.to_vec();
            for y in 0..6 {
                for x in 0..20 {
                    for ch in 0..3 {
                        data[((y * 100 + x) * 3 + ch) as usize] = v;
                    }
                }
            }
            f.data = data.into();
            f
        };
        let (ta, tb, tc) = (
            clock(&frame_with_disc(10, 10), 250),
            clock(&frame_with_disc(50, 40), 120),
            clock(&frame_with_disc(90, 70), 250),
        );
        let [ta, tb, tc] = [&ta, &tb, &tc].map(|f| PointerSample::take(f, area));
        let (x, _) = locate_pointer(&ta, &tb, &tc, &[]).unwrap();
        assert!((x - 50.5).abs() > 2.0, "the clock pulls the centre: {x}");
        let strip = PixelRect { x: 0, y: 0, width: 30, height: 8 };
        let (x, y) = locate_pointer(&ta, &tb, &tc, &[strip]).unwrap();
        assert!((x - 50.5).abs() < 0.01 && (y - 40.5).abs() < 0.01, "{x} {y}");
        let elsewhere = PointerSample::take(&frame_with_disc(90, 70), PixelRect { x: 10, y: 0, width: 90, height: 80 });
        assert!(locate_pointer(&a, &b, &elsewhere, &[]).is_none(), "samples of different areas never compare");
    }

    #[test]
    fn a_large_area_is_averaged_down_and_still_located_within_a_pixel() {
        // A 2160p capture's portrait phone: 997x2160 at (1421, 0), pointer radius 24.
        let area = PixelRect { x: 1421, y: 0, width: 997, height: 2160 };
        let frames =
            [(1600, 300), (2000, 1100), (2300, 1900)].map(|(x, y)| sized_frame_with_disc(3840, 2160, x, y, 24));
        let [a, b, c] = [&frames[0], &frames[1], &frames[2]].map(|f| PointerSample::take(f, area));
        assert_eq!(b.factor, 2);
        assert!(b.len() as u64 <= SAMPLE_MAX_PIXELS * 4, "{} bytes", b.len());
        assert_eq!(b.len(), (997 / 2) * (2160 / 2) * 4);
        let (x, y) = locate_pointer(&a, &b, &c, &[]).unwrap();
        assert!((x - 2000.5).abs() <= 1.0 && (y - 1100.5).abs() <= 1.0, "{x} {y}");
    }

    /// A `w`x`h` NV12 frame: `disc` drawn over `background`, chroma per 2x2 block taken
    /// from the disc when any pixel of the block is in it (chroma bleeds, as in a capture).
    fn nv12_with_disc(w: u32, h: u32, (cx, cy, r): (u32, u32, u32), background: [u8; 3], disc: [u8; 3]) -> Frame {
        let inside = |x: u32, y: u32| x.abs_diff(cx).pow(2) + y.abs_diff(cy).pow(2) <= r * r;
        let (bg, fg) = (rgb_to_yuv(background), rgb_to_yuv(disc));
        let mut data: Vec<u8> =
            (0..h).flat_map(|y| (0..w).map(move |x| if inside(x, y) { fg[0] } else { bg[0] })).collect();
        for by in 0..h / 2 {
            for bx in 0..w / 2 {
                let any = (0..2).any(|dy| (0..2).any(|dx| inside(bx * 2 + dx, by * 2 + dy)));
                let c = if any { fg } else { bg };
                data.extend_from_slice(&[c[1], c[2]]);
            }
        }
        Frame {
            format: crate::device::video::PixelFormat::Nv12,
            data: data.into(),
            ..Frame::rgb(1, 1, w, h, Vec::new())
        }
    }

    #[test]
    fn shared_chroma_does_not_pull_the_pointer_towards_even_columns() {
        let (blue, grey) = ([20, 80, 160], [200, 200, 200]);
        let area = PixelRect { x: 0, y: 0, width: 64, height: 48 };
        for cx in [31, 32] {
            let frames = [(10, 10), (cx, 21), (50, 38)].map(|(x, y)| nv12_with_disc(64, 48, (x, y, 5), blue, grey));
            let [a, b, c] = [&frames[0], &frames[1], &frames[2]].map(|f| PointerSample::take(f, area));
            let (x, y) = locate_pointer(&a, &b, &c, &[]).unwrap();
            let want = f64::from(cx) + 0.5;
            assert!((x - want).abs() < 0.05 && (y - 21.5).abs() < 0.05, "centre {cx}: found ({x}, {y})");
        }
    }

    #[test]
    fn a_pointer_as_bright_as_what_it_covers_is_found_by_colour() {
        // Grey 200 (luma 188) over an icon of luma 185: brightness alone sees nothing.
        let (icon, grey) = ([210u8, 195, 175], [200u8, 200, 200]);
        assert!(rgb_to_yuv(icon)[0].abs_diff(rgb_to_yuv(grey)[0]) <= CHANGED_LUMA);
        let rgb = |cx: u32, cy: u32| {
            let mut data = Vec::new();
            for y in 0..80u32 {
                for x in 0..100u32 {
                    let on = x.abs_diff(cx).pow(2) + y.abs_diff(cy).pow(2) <= 9;
                    data.extend_from_slice(if on { &grey } else { &icon });
                }
            }
            Frame::rgb(1, 1, 100, 80, data)
        };
        let area = PixelRect { x: 0, y: 0, width: 100, height: 80 };
        let [a, b, c] = [rgb(10, 10), rgb(50, 40), rgb(90, 70)].map(|f| PointerSample::take(&f, area));
        let (x, y) = locate_pointer(&a, &b, &c, &[]).unwrap();
        assert!((x - 50.5).abs() < 0.01 && (y - 40.5).abs() < 0.01, "{x} {y}");
    }

    #[test]
    fn an_area_outside_the_frame_gives_an_empty_sample() {
        let f = frame_with_disc(10, 10);
        let s = PointerSample::take(&f, PixelRect { x: 200, y: 200, width: u32::MAX, height: u32::MAX });
        assert!(s.is_empty());
        assert!(locate_pointer(&s, &s, &s, &[]).is_none());
    }
}
