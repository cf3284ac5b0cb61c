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
use super::video::{Frame, PixelFormat};

/// A channel difference above this counts as changed (compression noise stays below).
const CHANGED: u8 = 24;
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

fn pixel(frame: &Frame, x: u32, y: u32) -> Option<&[u8]> {
    let PixelFormat::Rgb24 = frame.format;
    let i = (y as usize * frame.width as usize + x as usize) * 3;
    frame.data.get(i..i + 3)
}

fn differs(a: &[u8], b: &[u8]) -> bool {
    a.iter().zip(b).any(|(x, y)| x.abs_diff(*y) > CHANGED)
}

/// The pointer's centre in `current` (capture pixels), found against the frames taken at
/// the previous and next calibration points. `None` when nothing pointer-like changed.
pub fn locate_pointer(previous: &Frame, current: &Frame, next: &Frame, area: PixelRect) -> Option<(f64, f64)> {
    let same_shape = |f: &Frame| f.width == current.width && f.height == current.height;
    if !same_shape(previous) || !same_shape(next) {
        return None;
    }
    let (mut sx, mut sy, mut n) = (0.0f64, 0.0f64, 0usize);
    for y in area.y..(area.y + area.height).min(current.height) {
        for x in area.x..(area.x + area.width).min(current.width) {
            let (Some(c), Some(p), Some(q)) = (pixel(current, x, y), pixel(previous, x, y), pixel(next, x, y)) else {
                continue;
            };
            if differs(c, p) && differs(c, q) {
                sx += f64::from(x) + 0.5;
                sy += f64::from(y) + 0.5;
                n += 1;
            }
        }
    }
    // n is a pixel count, far below 2^52: exact in f64.
    #[allow(clippy::cast_precision_loss)]
    let count = n as f64;
    (n >= MIN_PIXELS).then(|| (sx / count, sy / count))
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
        let (w, h) = (100u32, 80u32);
        let mut data = vec![50u8; (w * h * 3) as usize];
        for y in 0..h {
            for x in 0..w {
                if x.abs_diff(cx).pow(2) + y.abs_diff(cy).pow(2) <= 9 {
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
        let (x, y) = locate_pointer(&a, &b, &c, area).unwrap();
        assert!((x - 50.5).abs() < 0.01 && (y - 40.5).abs() < 0.01, "{x} {y}");
        assert!(locate_pointer(&b, &b, &b, area).is_none());
    }
}
