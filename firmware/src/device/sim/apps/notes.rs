//! A notes-like editor: a multi-line text view. Typed text wraps, Return inserts a newline,
//! the caret sits after the last glyph; Cmd+A selects everything (drawn highlighted) and
//! typing or Backspace then replaces or deletes it.

use super::{colour, el, large_title, size_f, text_at, typed, width, App, Cx, Effect, Key, Page};
use crate::device::sim::text;
use crate::device::sim::ui::{Element, ElementKind, Paint, Rect, CARET_GAP, CARET_WIDTH};

/// The selection's highlight (iOS tints it light blue).
const HIGHLIGHT: [u8; 3] = [179, 215, 255];

/// The editor's state.
#[derive(Debug, Clone, Default)]
pub struct Notes {
    text: String,
    focused: bool,
    /// Everything is selected.
    all_selected: bool,
}

impl Notes {
    pub fn new() -> Notes {
        Notes::default()
    }

    fn view(cx: &Cx) -> Rect {
        cx.r(48, 360, 1083, 1900)
    }
}

impl App for Notes {
    fn clone_box(&self) -> Box<dyn App> {
        Box::new(self.clone())
    }

    fn page(&self, cx: &Cx) -> Page {
        let (title, title_paint) = large_title(cx, "Notes");
        let v = Self::view(cx);
        let mut note = typed(el("note", ElementKind::TextView, v), &self.text);
        note.focused = Some(self.focused);
        let chars = self.text.chars().count();
        note.selection = (self.all_selected && chars > 0).then_some((0, chars));
        let mut paint = vec![title_paint, Paint::Round(v, cx.sx(30), colour::WHITE)];
        if self.focused {
            paint.push(Paint::Outline(v, cx.sx(30), cx.sx(5).max(1), colour::BLUE));
        }
        let size = cx.font(51);
        let line_h = size * 6 / 5;
        let pad = cx.sx(36);
        let inner = Rect { x: v.x + pad, y: v.y + pad, w: (v.w - 2 * pad).max(1), h: (v.h - 2 * pad).max(1) };
        let lines = text::wrap(&self.text, size_f(size), size_f(inner.w - cx.sx(8)));
        let mut y = inner.y;
        let mut caret = None;
        let n = lines.len();
        for (i, line) in lines.iter().enumerate() {
            if note.selection.is_some() {
                let w = width(line, size).max(cx.sx(12));
                paint.push(Paint::Fill(
                    Rect { x: inner.x, y, w, h: line_h }.intersect(&inner).unwrap_or(inner),
                    HIGHLIGHT,
                ));
            }
            paint.push(text_at(line, inner.x, y + (line_h - size) / 2, size, colour::BLACK, inner));
            if i + 1 == n && self.focused {
                let m = (line_h - size) / 2;
                let x = inner.x + width(line, size) + cx.sx(CARET_GAP);
                caret = Some(Rect { x, y: y + m, w: cx.sx(CARET_WIDTH).max(1), h: size });
            }
            y += line_h;
        }
        Page {
            elements: vec![title, note],
            paint,
            title: Some("Notes".into()),
            caret,
            focused: self.focused,
            ..Page::default()
        }
    }

    fn tap(&mut self, _cx: &Cx, target: Option<&Element>) -> Effect {
        if target.is_some_and(|e| e.kind == ElementKind::TextView) {
            // A tap in the text puts the caret there (the end: the sim has no caret
            // movement), ending a selection.
            self.focused = true;
            self.all_selected = false;
        } else {
            self.focused = false;
            self.all_selected = false;
        }
        Effect::None
    }

    fn key(&mut self, _cx: &Cx, key: Key) -> Effect {
        if !self.focused {
            return Effect::None;
        }
        let replace = std::mem::take(&mut self.all_selected);
        match key {
            Key::Char(c) => {
                if replace {
                    self.text.clear();
                }
                self.text.push(c);
            }
            Key::Enter => {
                if replace {
                    self.text.clear();
                }
                self.text.push('\n');
            }
            Key::Backspace => {
                if replace {
                    self.text.clear();
                } else {
                    self.text.pop();
                }
            }
            Key::SelectAll => self.all_selected = !self.text.is_empty(),
        }
        Effect::None
    }

    fn leave(&mut self) {
        self.focused = false;
        self.all_selected = false;
    }
}
