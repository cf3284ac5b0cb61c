//! Downscaled luma copies of frames and what changed between two of them: the measure that
//! act-and-verify settles on (issue 17). A thumbnail samples every `step`-th pixel of every
//! `step`-th row (at most `max_edge` samples a side), so comparing two 1080p frames touches
//! ~58 k bytes, not 6 MB. Changes are reported in the frame's own pixel space.

use super::Frame;
use crate::device::geometry::PixelRect;

/// A sampled luma copy of one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LumaThumb {
    /// Samples per row.
    pub width: u32,
    /// Rows.
    pub height: u32,
    /// Source pixels between samples, both directions.
    pub step: u32,
    /// The size of the sampled rectangle, in frame pixels.
    pub source: (u32, u32),
    /// Its top-left corner in the frame.
    pub origin: (u32, u32),
    data: Vec<u8>,
}

impl LumaThumb {
    /// Samples `frame` so that neither side has more than `max_edge` samples.
    pub fn of(frame: &Frame, max_edge: u32) -> LumaThumb {
        let full = PixelRect { x: 0, y: 0, width: frame.width, height: frame.height };
        LumaThumb::of_rect(frame, full, max_edge)
    }

    /// Samples the part `rect` of `frame` (clipped to it; the phone's picture) so that
    /// neither side has more than `max_edge` samples.
    pub fn of_rect(frame: &Frame, rect: PixelRect, max_edge: u32) -> LumaThumb {
        let x0 = rect.x.min(frame.width);
        let y0 = rect.y.min(frame.height);
        let w = rect.width.min(frame.width - x0);
        let h = rect.height.min(frame.height - y0);
        let max_edge = max_edge.max(1);
        let step = w.max(h).div_ceil(max_edge).max(1);
        let (width, height) = (w.div_ceil(step), h.div_ceil(step));
        let mut data = Vec::with_capacity(width as usize * height as usize);
        for ty in 0..height {
            for tx in 0..width {
                data.push(frame.luma(x0 + tx * step, y0 + ty * step).unwrap_or(0));
            }
        }
        LumaThumb { width, height, step, source: (w, h), origin: (x0, y0), data }
    }

    /// Whether `other` samples the same rectangle with the same values everywhere outside
    /// `ignore` (frame pixels).
    pub fn same_outside(&self, other: &LumaThumb, ignore: &[PixelRect]) -> bool {
        if (self.width, self.height, self.step, self.source, self.origin)
            != (other.width, other.height, other.step, other.source, other.origin)
        {
            return false;
        }
        let (ox, oy) = self.origin;
        let width = self.width as usize;
        for (i, (a, b)) in self.data.iter().zip(&other.data).enumerate() {
            if a == b {
                continue;
            }
            // i < width * height, both u32: the quotient and remainder fit.
            let (tx, ty) = (u32::try_from(i % width.max(1)).unwrap_or(0), u32::try_from(i / width.max(1)).unwrap_or(0));
            let (px, py) = (ox + tx * self.step, oy + ty * self.step);
            if !ignore.iter().any(|r| r.contains_point(px, py)) {
                return false;
            }
        }
        true
    }

    fn at(&self, x: u32, y: u32) -> u8 {
        self.data.get(y as usize * self.width as usize + x as usize).copied().unwrap_or(0)
    }
}

/// What counts as a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeRules {
    /// A sample changed when its luma moved by more than this.
    pub threshold: u8,
    /// Regions (frame pixels) whose changes never count: the status-bar clock, the pointer.
    pub ignore: Vec<PixelRect>,
    /// Fewer changed samples than this is noise.
    pub min_samples: u32,
    /// A change at most this many sample columns wide is a blinking caret, not a change
    /// (0: no such rule). Typing moves the caret, so a typed character is always wider.
    pub thin_columns: u32,
}

impl Default for ChangeRules {
    fn default() -> Self {
        ChangeRules { threshold: 12, ignore: Vec::new(), min_samples: 8, thin_columns: 2 }
    }
}

/// The bounding box, in `b`'s frame pixels, of the samples that changed from `a` to `b`
/// outside the ignored regions; `None` when fewer than `rules.min_samples` changed. Frames
/// of different sizes changed everywhere.
pub fn changed_region(a: &LumaThumb, b: &LumaThumb, rules: &ChangeRules) -> Option<PixelRect> {
    let (sw, sh) = b.source;
    let (ox, oy) = b.origin;
    if (a.width, a.height, a.step, a.source, a.origin) != (b.width, b.height, b.step, b.source, b.origin) {
        return Some(PixelRect { x: ox, y: oy, width: sw.max(1), height: sh.max(1) });
    }
    let ignored = |x: u32, y: u32| rules.ignore.iter().any(|r| r.contains_point(x, y));
    let (mut x0, mut y0, mut x1, mut y1, mut n) = (u32::MAX, u32::MAX, 0u32, 0u32, 0u32);
    for ty in 0..b.height {
        for tx in 0..b.width {
            if a.at(tx, ty).abs_diff(b.at(tx, ty)) <= rules.threshold {
                continue;
            }
            let (px, py) = (ox + tx * b.step, oy + ty * b.step);
            if ignored(px, py) {
                continue;
            }
            n += 1;
            (x0, y0, x1, y1) = (x0.min(px), y0.min(py), x1.max(px), y1.max(py));
        }
    }
    if n < rules.min_samples.max(1) {
        return None;
    }
    if (x1 - x0) / b.step < rules.thin_columns {
        return None;
    }
    // Each sample stands for the `step`-wide cell it starts; the box covers whole cells.
    let right = x1.saturating_add(b.step).min(ox + sw);
    let bottom = y1.saturating_add(b.step).min(oy + sh);
    Some(PixelRect { x: x0, y: y0, width: right.saturating_sub(x0).max(1), height: bottom.saturating_sub(y0).max(1) })
}

/// The fraction (0..=1) of `b`'s samples outside the ignored regions that changed from
/// `a`; frames of different sizes changed everywhere (1).
pub fn changed_fraction(a: &LumaThumb, b: &LumaThumb, rules: &ChangeRules) -> f64 {
    if (a.width, a.height, a.step, a.source, a.origin) != (b.width, b.height, b.step, b.source, b.origin) {
        return 1.0;
    }
    let (ox, oy) = b.origin;
    let (mut counted, mut changed) = (0u64, 0u64);
    for ty in 0..b.height {
        for tx in 0..b.width {
            let (px, py) = (ox + tx * b.step, oy + ty * b.step);
            if rules.ignore.iter().any(|r| r.contains_point(px, py)) {
                continue;
            }
            counted += 1;
            if a.at(tx, ty).abs_diff(b.at(tx, ty)) > rules.threshold {
                changed += 1;
            }
        }
    }
    // Sample counts are at most 2048² (`act.samples`): exact in f64.
    #[allow(clippy::cast_precision_loss)]
    let fraction = if counted == 0 { 0.0 } else { changed as f64 / counted as f64 };
    fraction
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(w: u32, h: u32, paint: &dyn Fn(u32, u32) -> u8) -> Frame {
        let mut data = Vec::with_capacity((w * h * 3) as usize);
        for y in 0..h {
            for x in 0..w {
                let v = paint(x, y);
                data.extend_from_slice(&[v, v, v]);
            }
        }
        Frame::rgb(1, 1, w, h, data)
    }

    #[test]
    fn thumbs_stay_within_the_edge_and_keep_the_source_size() {
        let t = LumaThumb::of(&frame(1920, 1080, &|_, _| 100), 320);
        assert_eq!((t.step, t.width, t.height, t.source), (6, 320, 180, (1920, 1080)));
        let small = LumaThumb::of(&frame(100, 50, &|_, _| 100), 320);
        assert_eq!((small.step, small.width, small.height), (1, 100, 50));
    }

    #[test]
    fn a_painted_box_is_found_where_it_was_painted() {
        let (w, h) = (640u32, 480u32);
        let before = LumaThumb::of(&frame(w, h, &|_, _| 40), 160);
        let after = LumaThumb::of(
            &frame(w, h, &|x, y| if (200..300).contains(&x) && (100..180).contains(&y) { 220 } else { 40 }),
            160,
        );
        let r = changed_region(&before, &after, &ChangeRules::default()).expect("a change");
        // Within one sample cell (step 4) of the painted box, and covering it.
        assert!(r.x <= 200 && r.x + 4 > 200 && r.y <= 100 && r.y + 4 > 100, "{r:?}");
        assert!(
            r.x + r.width >= 300 && r.x + r.width <= 304 && r.y + r.height >= 180 && r.y + r.height <= 184,
            "{r:?}"
        );
        assert_eq!(changed_region(&before, &before, &ChangeRules::default()), None, "no change");
    }

    #[test]
    fn ignored_regions_small_changes_and_faint_ones_do_not_count() {
        let (w, h) = (640u32, 480u32);
        let base = LumaThumb::of(&frame(w, h, &|_, _| 40), 160);
        // The clock: a change inside an ignored strip.
        let clock = LumaThumb::of(&frame(w, h, &|x, y| if y < 20 && x > 500 { 200 } else { 40 }), 160);
        let rules =
            ChangeRules { ignore: vec![PixelRect { x: 480, y: 0, width: 160, height: 24 }], ..Default::default() };
        assert_eq!(changed_region(&base, &clock, &rules), None);
        assert!(changed_region(&base, &clock, &ChangeRules::default()).is_some(), "counts without the ignore rule");
        // A caret: a 2x16 bar touches fewer samples than min_samples.
        let caret = LumaThumb::of(
            &frame(w, h, &|x, y| if (100..102).contains(&x) && (200..216).contains(&y) { 0 } else { 40 }),
            160,
        );
        assert_eq!(changed_region(&base, &caret, &ChangeRules::default()), None);
        // A tall caret has enough samples, but is one column wide.
        let tall = LumaThumb::of(
            &frame(w, h, &|x, y| if (100..103).contains(&x) && (200..280).contains(&y) { 0 } else { 40 }),
            160,
        );
        assert_eq!(changed_region(&base, &tall, &ChangeRules::default()), None);
        let strict = ChangeRules { thin_columns: 0, ..ChangeRules::default() };
        assert!(changed_region(&base, &tall, &strict).is_some(), "counts without the caret rule");
        // Part of a frame: regions come back in frame pixels.
        let part = PixelRect { x: 100, y: 50, width: 400, height: 400 };
        let painted = frame(w, h, &|x, y| if (300..340).contains(&x) && (200..240).contains(&y) { 220 } else { 40 });
        let (pa, pb) =
            (LumaThumb::of_rect(&frame(w, h, &|_, _| 40), part, 100), LumaThumb::of_rect(&painted, part, 100));
        let r = changed_region(&pa, &pb, &ChangeRules::default()).expect("a change");
        // Within one sample cell (step 4, from the part's corner) of the painted box.
        assert!(r.x <= 300 && r.x + 4 > 300 && r.y < 204 && r.y + 4 > 200 && r.y + r.height >= 240, "{r:?}");
        // A faint change under the threshold.
        let faint = LumaThumb::of(&frame(w, h, &|_, _| 48), 160);
        assert_eq!(changed_region(&base, &faint, &ChangeRules::default()), None);
        // A new size is a change everywhere.
        let other = LumaThumb::of(&frame(320, 240, &|_, _| 40), 160);
        assert_eq!(
            changed_region(&base, &other, &ChangeRules::default()),
            Some(PixelRect { x: 0, y: 0, width: 320, height: 240 })
        );
    }
}
