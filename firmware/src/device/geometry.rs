//! Capture frame → active rectangle of the phone image → observation pixels → HID units.
//!
//! The phone's picture sits pillarboxed (portrait) or letterboxed inside the HDMI frame. We
//! find it once per generation by scanning a few lines for non-black pixels, then map
//! observation image coordinates through it.

use serde::{Deserialize, Serialize};

use super::hid::{POINTER_MAX, POINTER_MIN};
use super::video::{Frame, PixelFormat};

/// A rectangle in capture-frame pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PixelRect {
    /// Left.
    pub x: u32,
    /// Top.
    pub y: u32,
    /// Width (≥ 1).
    pub width: u32,
    /// Height (≥ 1).
    pub height: u32,
}

impl PixelRect {
    /// Whether `inner` lies entirely within this rectangle. Computed in `u64`: the fields
    /// come from callers and config, and `u32` sums could wrap and pass the check.
    pub fn contains_rect(&self, inner: &PixelRect) -> bool {
        inner.x >= self.x
            && inner.y >= self.y
            && u64::from(inner.x) + u64::from(inner.width) <= u64::from(self.x) + u64::from(self.width)
            && u64::from(inner.y) + u64::from(inner.height) <= u64::from(self.y) + u64::from(self.height)
    }

    /// Whether pixel (`x`, `y`) lies inside (edges computed without overflow).
    pub fn contains_point(&self, x: u32, y: u32) -> bool {
        x >= self.x && x < self.x.saturating_add(self.width) && y >= self.y && y < self.y.saturating_add(self.height)
    }

    /// `inner`, given relative to this rectangle's top-left, in this rectangle's coordinate
    /// space — `None` unless it is non-empty and lies entirely inside.
    pub fn sub_rect(&self, inner: &PixelRect) -> Option<PixelRect> {
        let rect = PixelRect {
            x: self.x.checked_add(inner.x)?,
            y: self.y.checked_add(inner.y)?,
            width: inner.width,
            height: inner.height,
        };
        (inner.width > 0 && inner.height > 0 && self.contains_rect(&rect)).then_some(rect)
    }
}

/// Channel value below which a pixel counts as black border.
/// RGB channel value at or below which a pixel counts as black border.
const BLACK: u8 = 16;
/// Luma (limited range, black = 16) at or below which an NV12 pixel counts as black.
/// Luma, not colour: in 4:2:0 the border pixel next to the picture shares its chroma and
/// turns coloured while its own luma stays black.
const BLACK_LUMA: u8 = 24;
/// Lines scanned in each direction.
const SCAN_LINES: u32 = 9;

fn is_lit(frame: &Frame, x: u32, y: u32) -> bool {
    match frame.format {
        PixelFormat::Nv12 => frame.luma(x, y).is_some_and(|l| l > BLACK_LUMA),
        PixelFormat::Rgb24 => {
            let mut px = [0u8; 3];
            frame.row_rgb(y, x, x.saturating_add(1), &mut px) && px.iter().any(|&c| c > BLACK)
        }
    }
}

/// Finds the phone's picture inside `frame`: the bounding box of non-black pixels along a
/// few horizontal and vertical scan lines. Falls back to the whole frame when it is black.
pub fn detect_active_rect(frame: &Frame) -> PixelRect {
    let (w, h) = (frame.width, frame.height);
    let full = PixelRect { x: 0, y: 0, width: w.max(1), height: h.max(1) };
    if w == 0 || h == 0 {
        return full;
    }
    let (mut x0, mut x1, mut y0, mut y1) = (w, 0u32, h, 0u32);
    for i in 1..=SCAN_LINES {
        let y = h * i / (SCAN_LINES + 1);
        if let Some(first) = (0..w).find(|&x| is_lit(frame, x, y)) {
            let last = (0..w).rev().find(|&x| is_lit(frame, x, y)).unwrap_or(first);
            x0 = x0.min(first);
            x1 = x1.max(last);
        }
        let x = w * i / (SCAN_LINES + 1);
        if let Some(first) = (0..h).find(|&y| is_lit(frame, x, y)) {
            let last = (0..h).rev().find(|&y| is_lit(frame, x, y)).unwrap_or(first);
            y0 = y0.min(first);
            y1 = y1.max(last);
        }
    }
    if x1 < x0 || y1 < y0 {
        return full;
    }
    PixelRect { x: x0, y: y0, width: x1 - x0 + 1, height: y1 - y0 + 1 }
}

/// How an observation image maps back onto the phone.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ObservationMapping {
    /// The phone's picture in the capture frame.
    pub active: PixelRect,
    /// The part of the capture frame the image shows.
    pub source: PixelRect,
    /// The image's size in pixels.
    pub image: (u32, u32),
}

/// A point outside the observation image.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("({x}, {y}) is outside the {width}x{height} observation image")]
pub struct OutOfBounds {
    /// X asked for.
    pub x: f64,
    /// Y asked for.
    pub y: f64,
    /// Image width.
    pub width: u32,
    /// Image height.
    pub height: u32,
}

impl ObservationMapping {
    /// Maps image pixel (x, y) (the pixel's centre) to normalized phone coordinates 0..1.
    pub fn to_normalized(&self, x: f64, y: f64) -> Result<(f64, f64), OutOfBounds> {
        let (iw, ih) = self.image;
        if !(x >= 0.0 && y >= 0.0 && x < f64::from(iw) && y < f64::from(ih)) {
            return Err(OutOfBounds { x, y, width: iw, height: ih });
        }
        let cx = f64::from(self.source.x) + (x + 0.5) * f64::from(self.source.width) / f64::from(iw);
        let cy = f64::from(self.source.y) + (y + 0.5) * f64::from(self.source.height) / f64::from(ih);
        let nx = (cx - f64::from(self.active.x)) / f64::from(self.active.width);
        let ny = (cy - f64::from(self.active.y)) / f64::from(self.active.height);
        // An empty active rectangle gives 0/0; clamp would keep the NaN.
        let unit = |v: f64| if v.is_nan() { 0.0 } else { v.clamp(0.0, 1.0) };
        Ok((unit(nx), unit(ny)))
    }

    /// Maps image pixel (x, y) to absolute HID units.
    pub fn to_hid(&self, x: f64, y: f64) -> Result<(u16, u16), OutOfBounds> {
        let (nx, ny) = self.to_normalized(x, y)?;
        Ok((normalized_to_hid(nx), normalized_to_hid(ny)))
    }
}

/// Normalized 0..1 → HID units 1..=32767 (never 0). NaN (an empty active rectangle gives
/// 0/0) maps to the minimum: `as u16` would have made it 0.
pub fn normalized_to_hid(n: f64) -> u16 {
    let n = if n.is_nan() { 0.0 } else { n };
    let v = (n * (f64::from(POINTER_MAX) + 1.0)).floor();
    // Clamped into 1..=32767 before the cast, so it cannot truncate or lose the sign.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let v = v.clamp(f64::from(POINTER_MIN), f64::from(POINTER_MAX)) as u16;
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame_with_box(w: u32, h: u32, b: PixelRect) -> Frame {
        let mut data = vec![0u8; (w * h * 3) as usize];
        for y in b.y..b.y + b.height {
            for x in b.x..b.x + b.width {
                let i = ((y * w + x) * 3) as usize;
                data[i..i + 3].copy_from_slice(&[40, 80, 120]);
            }
        }
        Frame::rgb(1, 1, w, h, data)
    }

    #[test]
    fn finds_pillarbox_and_letterbox() {
        let pillar = PixelRect { x: 711, y: 0, width: 498, height: 1080 };
        assert_eq!(detect_active_rect(&frame_with_box(1920, 1080, pillar)), pillar);
        let letter = PixelRect { x: 0, y: 300, width: 640, height: 200 };
        assert_eq!(detect_active_rect(&frame_with_box(640, 800, letter)), letter);
        let black = frame_with_box(64, 64, PixelRect { x: 0, y: 0, width: 0, height: 0 });
        assert_eq!(detect_active_rect(&black), PixelRect { x: 0, y: 0, width: 64, height: 64 });
    }

    #[test]
    fn chroma_bleeding_into_the_border_is_not_picture() {
        // NV12, picture from x = 5 (odd): border pixel 4 shares the picture's chroma. The
        // sim's wallpaper at its most saturated: Y 16 with that chroma is RGB (0, 8, 89).
        let (w, h) = (16usize, 4usize);
        let mut data = vec![16u8; w * h];
        for row in data.chunks_exact_mut(w) {
            row[5..].fill(120);
        }
        for _ in 0..h / 2 {
            for cx in 0..w / 2 {
                data.extend_from_slice(if cx >= 2 { &[172, 97] } else { &[128, 128] });
            }
        }
        let frame = Frame { format: PixelFormat::Nv12, data: data.into(), ..Frame::rgb(1, 1, 16, 4, Vec::new()) };
        let mut px = [0u8; 3];
        assert!(frame.row_rgb(1, 4, 5, &mut px) && px.iter().any(|&c| c > 16), "the border pixel is coloured: {px:?}");
        assert_eq!(detect_active_rect(&frame).x, 5);
    }

    #[test]
    fn containment_does_not_wrap_on_huge_sizes() {
        let active = PixelRect { x: 711, y: 0, width: 498, height: 1080 };
        let wraps = PixelRect { x: 721, y: 0, width: 4_294_967_290, height: 10 };
        assert!(!active.contains_rect(&wraps));
        let at_max = PixelRect { x: u32::MAX, y: 0, width: 1, height: 1 };
        assert!(!active.contains_rect(&at_max));
        assert_eq!(active.sub_rect(&PixelRect { x: 10, y: 0, width: 4_294_967_290, height: 10 }), None);
        assert_eq!(active.sub_rect(&PixelRect { x: u32::MAX, y: 0, width: 1, height: 1 }), None);
        assert_eq!(active.sub_rect(&PixelRect { x: 0, y: 0, width: 0, height: 1 }), None);
        assert_eq!(
            active.sub_rect(&PixelRect { x: 10, y: 20, width: 488, height: 1060 }),
            Some(PixelRect { x: 721, y: 20, width: 488, height: 1060 })
        );
        assert!(active.sub_rect(&PixelRect { x: 10, y: 20, width: 489, height: 1060 }).is_none());
    }

    #[test]
    fn maps_image_pixels_to_hid_and_rejects_outside() {
        let active = PixelRect { x: 711, y: 0, width: 498, height: 1080 };
        let m = ObservationMapping { active, source: active, image: (498, 1080) };
        let (x, y) = m.to_hid(248.5, 539.5).unwrap();
        assert!((i32::from(x) - 16384).abs() <= 40 && (i32::from(y) - 16384).abs() <= 20, "{x} {y}");
        assert_eq!(m.to_hid(0.0, 0.0).unwrap().0, 32, "pixel centre, never 0");
        assert!(m.to_hid(498.0, 10.0).is_err());
        assert!(m.to_hid(-0.1, 10.0).is_err());
        assert!(m.to_hid(f64::NAN, 10.0).is_err());
    }

    #[test]
    fn an_empty_active_rectangle_never_maps_to_hid_zero() {
        // 0/0 in to_normalized gave NaN, which clamp keeps and `as u16` turns into 0: the
        // one coordinate iOS flings the pointer into a corner for.
        let empty = PixelRect { x: 5, y: 5, width: 0, height: 0 };
        let m =
            ObservationMapping { active: empty, source: PixelRect { x: 5, y: 5, width: 0, height: 0 }, image: (1, 1) };
        // Found by the geometry_plan fuzz target (to_normalized gave NaN, to_hid gave 0).
        let (x, y) = m.to_hid(0.0, 0.0).unwrap();
        assert!(x >= POINTER_MIN && y >= POINTER_MIN, "({x}, {y})");
        assert_eq!(m.to_normalized(0.0, 0.0).unwrap(), (0.0, 0.0));
        assert_eq!(normalized_to_hid(f64::NAN), POINTER_MIN);
        assert_eq!(normalized_to_hid(f64::INFINITY), POINTER_MAX);
        assert_eq!(normalized_to_hid(-1.0), POINTER_MIN);
    }
}
