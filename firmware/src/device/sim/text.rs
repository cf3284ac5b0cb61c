//! The virtual iPhone's text: a real font (Ubuntu Light, from egui's `epaint_default_fonts`
//! crate, so `serve --sim` needs nothing installed) rasterized with `ab_glyph`.
//!
//! Sizes are line heights in pixels (`ab_glyph`'s `PxScale`); positions are the top-left
//! of a line's box, its baseline at `y + ascent`. Layout is done in phone pixels by the UI
//! and drawing in capture pixels by the display: widths scale linearly with the size (no
//! hinting), so what the UI measured is what the display draws, scaled.
//!
//! A character the font has no glyph for is drawn as tofu (a box, as iOS shows it) and
//! reported by [`missing_glyphs`]; control characters are not drawn at all.

use std::sync::OnceLock;

use ab_glyph::{point, Font, FontRef, GlyphId, PxScale, ScaleFont};

/// The font, parsed once. `None` only if the bytes compiled in do not parse, which the
/// tests rule out; text then draws as nothing rather than taking the daemon down.
fn font() -> Option<&'static FontRef<'static>> {
    static FONT: OnceLock<Option<FontRef<'static>>> = OnceLock::new();
    FONT.get_or_init(|| FontRef::try_from_slice(epaint_default_fonts::UBUNTU_LIGHT).ok()).as_ref()
}

/// Tofu's advance, in ems: about a capital letter's.
const TOFU_ADVANCE: f32 = 0.6;

/// What one character is drawn as.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Shape {
    /// A glyph of the font.
    Glyph(GlyphId),
    /// A box: the font cannot draw the character.
    Tofu,
    /// Nothing (a control character).
    Nothing,
}

fn shape_of(font: &FontRef<'static>, c: char) -> Shape {
    if c.is_control() {
        return Shape::Nothing;
    }
    match font.glyph_id(c) {
        // Glyph 0 is `.notdef`: the font has no glyph for it.
        GlyphId(0) => Shape::Tofu,
        id => Shape::Glyph(id),
    }
}

/// Characters of `text` the font cannot draw (each once, in order of appearance): they
/// are drawn as tofu.
pub fn missing_glyphs(text: &str) -> Vec<char> {
    let Some(font) = font() else { return Vec::new() };
    let mut out: Vec<char> = Vec::new();
    for c in text.chars() {
        if shape_of(font, c) == Shape::Tofu && !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// Where each character of a line starts (pen x, relative to the line's left) and how it
/// is drawn, plus the line's width.
fn layout(font: &FontRef<'static>, text: &str, size: f32) -> (Vec<(f32, Shape)>, f32) {
    let scaled = font.as_scaled(PxScale::from(size));
    let mut pen = 0.0f32;
    let mut prev: Option<GlyphId> = None;
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        let shape = shape_of(font, c);
        match shape {
            Shape::Glyph(id) => {
                if let Some(p) = prev {
                    pen += scaled.kern(p, id);
                }
                out.push((pen, shape));
                pen += scaled.h_advance(id);
                prev = Some(id);
            }
            Shape::Tofu => {
                out.push((pen, shape));
                pen += size * TOFU_ADVANCE;
                prev = None;
            }
            Shape::Nothing => prev = None,
        }
    }
    (out, pen)
}

/// The width of `text` drawn on one line at `size`.
pub fn width(text: &str, size: f32) -> f32 {
    font().map_or(0.0, |f| layout(f, text, size).1)
}

/// The distance from a line's top to its baseline at `size`.
pub fn ascent(size: f32) -> f32 {
    font().map_or(size * 0.8, |f| f.as_scaled(PxScale::from(size)).ascent())
}

/// `text` cut to fit `max_width` at `size`, with an ellipsis where it was cut (as iOS
/// truncates a label); the whole text when it fits.
pub fn truncate(text: &str, size: f32, max_width: f32) -> String {
    if width(text, size) <= max_width {
        return text.to_string();
    }
    let mut cut: String = text.to_string();
    while cut.pop().is_some() {
        let candidate = format!("{}…", cut.trim_end());
        if width(&candidate, size) <= max_width {
            return candidate;
        }
    }
    String::new()
}

/// `text` broken into lines no wider than `max_width` at `size`: at spaces where it can,
/// inside a word only when the word alone is too wide; `\n` always breaks.
pub fn wrap(text: &str, size: f32, max_width: f32) -> Vec<String> {
    let mut lines = Vec::new();
    for paragraph in text.split('\n') {
        let mut line = String::new();
        for word in paragraph.split(' ') {
            let joined = if line.is_empty() { word.to_string() } else { format!("{line} {word}") };
            if width(&joined, size) <= max_width {
                line = joined;
                continue;
            }
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
            }
            // The word on its own line; split it where it must.
            for c in word.chars() {
                line.push(c);
                if width(&line, size) > max_width && line.chars().count() > 1 {
                    line.pop();
                    lines.push(std::mem::take(&mut line));
                    line.push(c);
                }
            }
        }
        lines.push(line);
    }
    lines
}

/// A clip rectangle in target pixels: `x0..x1`, `y0..y1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clip {
    /// Left edge (inclusive).
    pub x0: i32,
    /// Top edge (inclusive).
    pub y0: i32,
    /// Right edge (exclusive).
    pub x1: i32,
    /// Bottom edge (exclusive).
    pub y1: i32,
}

/// Draws one line of `text` at `size` with its box's top-left at (`x`, `y`): `plot` gets
/// every pixel inside `clip` the text covers, with its coverage (0..=1) for blending.
pub fn draw_line(text: &str, size: f32, (x, y): (f32, f32), clip: Clip, mut plot: impl FnMut(i32, i32, f32)) {
    let Some(font) = font() else { return };
    let (shapes, _) = layout(font, text, size);
    let baseline = y + ascent(size);
    let mut put = |px: i32, py: i32, c: f32| {
        if c > 0.0 && px >= clip.x0 && px < clip.x1 && py >= clip.y0 && py < clip.y1 {
            plot(px, py, c.min(1.0));
        }
    };
    for (pen, shape) in shapes {
        match shape {
            Shape::Glyph(id) => {
                let glyph = id.with_scale_and_position(PxScale::from(size), point(x + pen, baseline));
                if let Some(outlined) = font.outline_glyph(glyph) {
                    let b = outlined.px_bounds();
                    let (bx, by) = (px_floor(b.min.x), px_floor(b.min.y));
                    outlined.draw(|gx, gy, c| {
                        put(bx + i32::try_from(gx).unwrap_or(0), by + i32::try_from(gy).unwrap_or(0), c);
                    });
                }
            }
            Shape::Tofu => {
                // A box from the cap height to the baseline, a little inside its advance.
                let stroke = (size / 16.0).max(1.0);
                let left = x + pen + size * 0.06;
                let right = x + pen + size * (TOFU_ADVANCE - 0.06);
                let top = baseline - size * 0.7;
                let (l, r, t, bot) = (px_floor(left), px_floor(right), px_floor(top), px_floor(baseline));
                let s = px_floor(stroke).max(1);
                for py in t..bot {
                    for px in l..r {
                        if py < t + s || py >= bot - s || px < l + s || px >= r - s {
                            put(px, py, 1.0);
                        }
                    }
                }
            }
            Shape::Nothing => {}
        }
    }
}

fn px_floor(v: f32) -> i32 {
    // Pixel positions of text on a screen, far inside i32.
    #[allow(clippy::cast_possible_truncation)]
    let r = v.floor() as i32;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: i32 = 400;
    const H: i32 = 100;

    /// Coverage of `text` drawn at (x, y) into a W x H picture.
    fn ink(text: &str, size: f32, at: (f32, f32)) -> Vec<f32> {
        let mut out = vec![0.0; usize::try_from(W * H).unwrap()];
        draw_line(text, size, at, Clip { x0: 0, y0: 0, x1: W, y1: H }, |x, y, c| {
            out[usize::try_from(y * W + x).unwrap()] += c;
        });
        out
    }

    /// The bounding box of the ink: (x0, y0, x1, y1), exclusive ends.
    fn bounds(ink: &[f32]) -> Option<(i32, i32, i32, i32)> {
        let mut b: Option<(i32, i32, i32, i32)> = None;
        for (i, &c) in ink.iter().enumerate() {
            if c > 0.05 {
                let (x, y) = (i32::try_from(i).unwrap() % W, i32::try_from(i).unwrap() / W);
                b = Some(
                    b.map_or((x, y, x + 1, y + 1), |(a, b, c, d)| (a.min(x), b.min(y), c.max(x + 1), d.max(y + 1))),
                );
            }
        }
        b
    }

    #[test]
    fn the_font_parses() {
        assert!(font().is_some());
    }

    #[test]
    #[allow(clippy::cast_possible_truncation)] // pixel sizes of a test
    fn a_word_has_ink_inside_its_box_and_none_outside() {
        let (size, at) = (40.0, (20.0, 30.0));
        let drawn = ink("Demo", size, at);
        let (x0, y0, x1, y1) = bounds(&drawn).expect("ink");
        let w = width("Demo", size);
        assert!(w > 40.0 && w < 160.0, "{w}");
        // Inside the line's box: pen start to pen end, top to top + size.
        assert!(x0 >= 20 && x1 <= 20 + w.ceil() as i32 + 1, "{x0}..{x1} for width {w}");
        assert!(y0 >= 30 && y1 <= 30 + size as i32, "{y0}..{y1}");
        // And it fills most of it: measuring is consistent with drawing.
        assert!((x1 - x0) as f32 > w * 0.8, "ink {x0}..{x1} for width {w}");
        assert!(y1 - y0 > 20, "a capital is tall: {y0}..{y1}");
    }

    #[test]
    fn different_strings_draw_differently_and_longer_ones_are_wider() {
        let at = (10.0, 10.0);
        assert_ne!(ink("Demo", 40.0, at), ink("Dome", 40.0, at));
        assert_eq!(ink("Demo", 40.0, at), ink("Demo", 40.0, at), "drawing is deterministic");
        assert!(width("Demo!", 40.0) > width("Demo", 40.0));
        assert!((width("Demo", 80.0) - 2.0 * width("Demo", 40.0)).abs() < 0.01, "widths scale with the size");
        assert_eq!(width("", 40.0), 0.0);
        assert!(bounds(&ink(" ", 40.0, at)).is_none(), "a space has no ink");
    }

    #[test]
    fn the_clip_is_respected() {
        let mut outside = 0;
        draw_line("Settings", 40.0, (0.0, 0.0), Clip { x0: 10, y0: 5, x1: 60, y1: 30 }, |x, y, _| {
            if !(10..60).contains(&x) || !(5..30).contains(&y) {
                outside += 1;
            }
        });
        assert_eq!(outside, 0);
    }

    #[test]
    fn a_character_the_font_lacks_is_tofu_and_named() {
        assert_eq!(missing_glyphs("Demo"), Vec::<char>::new());
        assert_eq!(missing_glyphs("a漢b漢😀"), vec!['漢', '😀']);
        assert!(missing_glyphs("äöüßéñ€").is_empty(), "Latin-1 and the euro are in the font");
        let tofu = ink("漢", 40.0, (10.0, 10.0));
        let (x0, y0, x1, y1) = bounds(&tofu).expect("tofu has ink");
        // A box: its corners are inked, its middle is not.
        assert!(x1 - x0 > 10 && y1 - y0 > 10, "{x0},{y0}..{x1},{y1}");
        let at = |x: i32, y: i32| tofu[usize::try_from(y * W + x).unwrap()];
        assert!(at(x0, y0) > 0.5 && at(x1 - 1, y1 - 1) > 0.5);
        assert_eq!(at((x0 + x1) / 2, (y0 + y1) / 2), 0.0);
        assert!(width("漢", 40.0) > 10.0);
        // Control characters are neither drawn nor missing.
        assert!(missing_glyphs("a\tb").is_empty());
        assert_eq!(width("a\tb", 40.0), width("ab", 40.0));
    }

    #[test]
    fn truncation_and_wrapping_fit_the_width() {
        assert_eq!(truncate("Demo", 36.0, 500.0), "Demo");
        let cut = truncate("Calculator Pro Max", 36.0, 150.0);
        assert!(cut.ends_with('…') && width(&cut, 36.0) <= 150.0, "{cut}");
        let lines = wrap("the quick brown fox jumps over the lazy dog", 30.0, 200.0);
        assert!(lines.len() > 1, "{lines:?}");
        assert!(lines.iter().all(|l| width(l, 30.0) <= 200.0), "{lines:?}");
        assert_eq!(lines.join(" "), "the quick brown fox jumps over the lazy dog");
        assert_eq!(wrap("a\nb", 30.0, 200.0), vec!["a", "b"]);
        let long = wrap("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 30.0, 100.0);
        assert!(long.len() > 1 && long.iter().all(|l| width(l, 30.0) <= 100.0), "{long:?}");
    }
}
