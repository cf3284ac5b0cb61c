//! Spotlight: a search field over the dimmed home screen; typing lists the apps whose name
//! matches (prefix matches first, then names containing the query, case-insensitive);
//! "No Results" when none does.

use super::apps::{colour, el, icon_colour, labelled, text_at, text_centred, typed, width, Cx, APP_NAMES};
use super::ui::{Element, ElementKind, Paint, Rect, CARET_GAP, CARET_WIDTH};

/// Rows of results shown at most.
const MAX_RESULTS: usize = 8;

/// The apps matching `query`, best first, as indices into [`APP_NAMES`]: names starting
/// with it, then names containing it (case-insensitive). Nothing for an empty query.
pub fn matches(query: &str) -> Vec<usize> {
    let q = query.trim().to_lowercase();
    if q.is_empty() {
        return Vec::new();
    }
    let lower: Vec<String> = APP_NAMES.iter().map(|n| n.to_lowercase()).collect();
    let prefix = (0..APP_NAMES.len()).filter(|&i| lower[i].starts_with(&q));
    let contains = (0..APP_NAMES.len()).filter(|&i| !lower[i].starts_with(&q) && lower[i].contains(&q));
    prefix.chain(contains).collect()
}

/// What Spotlight shows: its elements, paint and caret.
pub fn layout(cx: &Cx, query: &str) -> (Vec<Element>, Vec<Paint>, Rect) {
    let mut paint = vec![Paint::Dim(Rect { x: 0, y: 0, w: cx.w, h: cx.h }, 190)];
    let f = cx.r(48, 200, 1083, 130);
    let mut field = typed(el("search_field", ElementKind::TextField, f), query);
    field.focused = Some(true);
    let mut elements = vec![field];
    paint.push(Paint::Round(f, cx.sx(36), [235, 235, 240]));
    let size = cx.font(51);
    let pad = cx.sx(40);
    let clip = Rect { x: f.x + pad, y: f.y, w: (f.w - 2 * pad).max(0), h: f.h };
    let ty = f.y + (f.h - size) / 2;
    if query.is_empty() {
        paint.push(text_at("Search", f.x + pad, ty, size, colour::GREY, clip));
    } else {
        paint.push(text_at(query, f.x + pad, ty, size, colour::BLACK, clip));
    }
    let end = f.x + pad + width(query, size).min(clip.w);
    let m = cx.sy(30);
    let caret = Rect { x: end + cx.sx(CARET_GAP), y: f.y + m, w: cx.sx(CARET_WIDTH).max(1), h: f.h - 2 * m };
    let found = matches(query);
    if !query.trim().is_empty() && found.is_empty() {
        let r = cx.r(48, 500, 1083, 120);
        elements.push(labelled(el("no_results", ElementKind::Label, r), "No Results"));
        paint.push(text_centred("No Results", r, cx.font(66), colour::WHITE));
    }
    if !found.is_empty() {
        let shown = found.len().min(MAX_RESULTS);
        let rh = 150;
        let panel = cx.r(48, 400, 1083, 40 + rh * i32::try_from(shown).unwrap_or(0));
        paint.push(Paint::Round(panel, cx.sx(36), [250, 250, 252]));
        for (k, &app) in found.iter().take(shown).enumerate() {
            let r = cx.r(48, 420 + rh * i32::try_from(k).unwrap_or(0), 1083, rh);
            let name = APP_NAMES[app];
            let mut e = labelled(el(format!("result{k}"), ElementKind::SearchResult, r), name);
            e.value = Some(i64::try_from(app).unwrap_or(0));
            elements.push(e);
            let icon = Rect { x: r.x + cx.sx(30), y: r.y + cx.sy(20), w: cx.sx(110), h: cx.sy(110) };
            paint.push(Paint::Round(icon, cx.sx(26), icon_colour(app)));
            let initial: String = name.chars().take(1).collect();
            paint.push(super::apps::artwork(text_centred(&initial, icon, cx.font(66), colour::WHITE)));
            let tx = icon.x + icon.w + cx.sx(36);
            paint.push(text_at(name, tx, r.y + (r.h - size) / 2, size, colour::BLACK, r));
        }
    }
    (elements, paint, caret)
}
