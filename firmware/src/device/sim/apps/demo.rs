//! The demo app the tests were written against: three buttons (the third loads for
//! [`LOAD_MS`] with a spinner, then shows a badge), three switches, a text field, a dead
//! "Edit" button and a 60-row list that glides when dragged.

use super::{colour, el, labelled, text_at, typed, width, App, Cx, Effect, Key, Page, Scroller};
use crate::device::sim::ui::{ElementKind, Paint, Rect, LOAD_MS};

const BUTTONS: usize = 3;
const LIST_ROWS: i32 = 60;
/// The load button: it shows a spinner before its result.
const LOAD_BUTTON: usize = 2;
/// The buttons' labels.
const BUTTON_LABELS: [&str; BUTTONS] = ["Button 1", "Button 2", "Load"];
/// A field's text starts this far in from its left edge.
const FIELD_PAD: i32 = 30;

/// The demo app's state.
#[derive(Debug, Clone)]
pub struct Demo {
    toggles: [bool; BUTTONS],
    button_taps: [u32; BUTTONS],
    row_taps: Vec<u32>,
    text: String,
    focused: bool,
    scroll: Scroller,
    /// When the load button started loading, while it does.
    loading_since: Option<u64>,
    loads: u32,
    /// Taps on the dead button: counted, never shown.
    dead_taps: u32,
}

impl Demo {
    pub fn new() -> Demo {
        Demo {
            toggles: [false; BUTTONS],
            button_taps: [0; BUTTONS],
            row_taps: vec![0; usize::try_from(LIST_ROWS).unwrap_or(0)],
            text: String::new(),
            focused: false,
            scroll: Scroller::default(),
            loading_since: None,
            loads: 0,
            dead_taps: 0,
        }
    }

    fn viewport(cx: &Cx) -> Rect {
        cx.r(90, 1100, 1000, 1300)
    }

    fn row_height(cx: &Cx) -> i32 {
        cx.sy(130).max(1)
    }

    fn max_scroll(cx: &Cx) -> i32 {
        (LIST_ROWS * Self::row_height(cx) - Self::viewport(cx).h).max(0)
    }

    /// Where the field's text starts: scrolled left when it is wider than the field, so
    /// its end and the caret stay in view, as iOS does.
    fn field_text_x(cx: &Cx, r: Rect, text: &str) -> i32 {
        let pad = cx.sx(FIELD_PAD);
        let room = r.w - 2 * pad - cx.sx(6).max(1);
        let w = width(text, cx.font(51));
        if w > room {
            r.x + pad + room - w
        } else {
            r.x + pad
        }
    }
}

impl App for Demo {
    fn clone_box(&self) -> Box<dyn App> {
        Box::new(self.clone())
    }

    fn page(&self, cx: &Cx) -> Page {
        let mut p = Page { focused: self.focused, loads: self.loads, ..Page::default() };
        let white = colour::WHITE;
        let label_size = cx.font(45);
        let back = cx.r(30, 120, 200, 120);
        p.elements.push(labelled(el("back", ElementKind::Back, back), "Back"));
        p.paint.push(Paint::Round(back, cx.sx(24), [0, 100, 220]));
        p.paint.push(super::text_centred("Back", back, label_size, white));
        // Like a disabled "Edit" button: it takes the tap and nothing happens.
        let dead = cx.r(850, 120, 300, 120);
        let mut d = labelled(el("dead_button", ElementKind::Button, dead), "Edit");
        d.taps = Some(self.dead_taps);
        d.enabled = Some(false);
        p.elements.push(d);
        p.paint.push(Paint::Round(dead, cx.sx(24), [174, 174, 178]));
        p.paint.push(super::text_centred("Edit", dead, label_size, white));
        for (i, name) in BUTTON_LABELS.iter().enumerate() {
            let y = 300 + i32::try_from(i).unwrap_or(0) * 180;
            let r = cx.r(90, y, 480, 140);
            let mut b = labelled(el(format!("button{i}"), ElementKind::Button, r), name);
            b.taps = Some(self.button_taps[i]);
            p.elements.push(b);
            p.paint.push(Paint::Round(r, cx.sx(24), colour::BLUE));
            p.paint.push(text_at(name, r.x + cx.sx(30), r.y + cx.sy(20), label_size, white, r));
            // Taps show: a dot per tap (up to 10) along the bottom.
            for k in 0..i32::try_from(self.button_taps[i].min(10)).unwrap_or(0) {
                let dot = Rect {
                    x: r.x + cx.sx(20 + k * 36),
                    y: r.y + r.h - cx.sy(40),
                    w: cx.sx(24).max(1),
                    h: cx.sy(24).max(1),
                };
                p.paint.push(Paint::Fill(dot, white));
            }
            if i == LOAD_BUTTON {
                // The results: a green badge per finished load (up to 5).
                for k in 0..i32::try_from(self.loads.min(5)).unwrap_or(0) {
                    let b = Rect {
                        x: r.x + r.w - cx.sx(60 + k * 50),
                        y: r.y + cx.sy(20),
                        w: cx.sx(40).max(1),
                        h: cx.sy(40).max(1),
                    };
                    p.paint.push(Paint::Fill(b, colour::GREEN));
                }
                if let Some(at) = self.loading_since {
                    p.animating = true;
                    let spoke = u8::try_from((cx.now.saturating_sub(at) / 60) % 8).unwrap_or(0);
                    let sr = Rect { x: r.x + r.w - r.h, y: r.y, w: r.h, h: r.h };
                    p.spinner = Some((sr, spoke));
                    // Eight spokes around the centre; one is lit and it goes round.
                    let (scx, scy, rad) = (sr.x + sr.w / 2, sr.y + sr.h / 2, sr.h / 3);
                    let offsets = [(0, -2), (1, -1), (2, 0), (1, 1), (0, 2), (-1, 1), (-2, 0), (-1, -1)];
                    for (n, (dx, dy)) in offsets.iter().enumerate() {
                        let c = if n == usize::from(spoke) { white } else { [0, 70, 160] };
                        let s = cx.sx(10);
                        let spoke_rect = Rect {
                            x: scx + dx * rad / 2 - s,
                            y: scy + dy * rad / 2 - s,
                            w: (2 * s).max(1),
                            h: (2 * s).max(1),
                        };
                        p.paint.push(Paint::Fill(spoke_rect, c));
                    }
                }
            }
            let t = cx.r(800, y, 280, 140);
            let mut e = el(format!("toggle{i}"), ElementKind::Toggle, t);
            e.on = Some(self.toggles[i]);
            p.elements.push(e);
            p.paint.extend(super::switch(t, self.toggles[i]));
        }
        let f = cx.r(90, 860, 1000, 140);
        let mut field = typed(el("text_field", ElementKind::TextField, f), &self.text);
        field.focused = Some(self.focused);
        p.elements.push(field);
        p.paint.push(Paint::Round(f, cx.sx(20), if self.focused { white } else { colour::TRACK }));
        if self.focused {
            // A tint outline, so focus shows beyond the thin caret.
            p.paint.push(Paint::Outline(f, cx.sx(20), cx.sx(5).max(1), colour::BLUE));
        }
        let size = cx.font(51);
        let x = Self::field_text_x(cx, f, &self.text);
        let pad = cx.sx(FIELD_PAD);
        let ty = f.y + (f.h - size) / 2;
        p.paint.push(text_at(
            &self.text,
            x,
            ty,
            size,
            colour::BLACK,
            Rect { x: f.x + pad, y: f.y, w: (f.w - 2 * pad).max(0), h: f.h },
        ));
        if self.focused {
            let end = x + width(&self.text, size);
            let m = cx.sy(30);
            p.caret = Some(Rect { x: end, y: f.y + m, w: cx.sx(6).max(1), h: f.h - 2 * m });
        }
        let viewport = Self::viewport(cx);
        let scroll = self.scroll.at(cx);
        p.animating |= !cx.rest && self.scroll.moving();
        let mut list = el("list", ElementKind::List, viewport);
        list.scroll_offset = Some(scroll);
        p.elements.push(list);
        p.paint.push(Paint::Fill(viewport, [242, 242, 247]));
        let rh = Self::row_height(cx);
        for i in 0..LIST_ROWS {
            let row = Rect { x: viewport.x, y: viewport.y + i * rh - scroll, w: viewport.w, h: rh - 4 };
            let Some(visible) = row.intersect(&viewport) else { continue };
            let taps = self.row_taps[usize::try_from(i).unwrap_or(0)];
            let label = format!("Item {}", i + 1);
            let mut e = labelled(el(format!("row{i}"), ElementKind::ListRow, visible), &label);
            e.taps = Some(taps);
            p.elements.push(e);
            p.paint.push(Paint::Fill(visible, white));
            // Placed from the row's unclipped top, clipped to what is visible of it.
            p.paint.push(text_at(&label, row.x + cx.sx(40), row.y + (row.h - size) / 2, size, colour::BLACK, visible));
            for k in 0..i32::try_from(taps.min(10)).unwrap_or(0) {
                let dot = Rect {
                    x: row.x + cx.sx(20 + k * 36),
                    y: row.y + row.h - cx.sy(40),
                    w: cx.sx(24).max(1),
                    h: cx.sy(24).max(1),
                };
                if let Some(d) = dot.intersect(&visible) {
                    p.paint.push(Paint::Fill(d, colour::BLUE));
                }
            }
        }
        p
    }

    fn tap(&mut self, _cx: &Cx, target: Option<&super::Element>) -> Effect {
        let Some(e) = target else {
            self.focused = false;
            return Effect::None;
        };
        let index = |prefix: &str| e.id.strip_prefix(prefix).and_then(|n| n.parse::<usize>().ok());
        match e.kind {
            ElementKind::Back => return Effect::Home,
            ElementKind::Button if e.id == "dead_button" => {
                // It takes the tap and nothing happens, not even a change of focus.
                self.dead_taps += 1;
                return Effect::None;
            }
            ElementKind::Button => {
                let i = index("button");
                if let Some(c) = i.and_then(|i| self.button_taps.get_mut(i)) {
                    *c += 1;
                }
                if i == Some(LOAD_BUTTON) && self.loading_since.is_none() {
                    self.loading_since = Some(_cx.now);
                }
            }
            ElementKind::Toggle => {
                if let Some(t) = index("toggle").and_then(|i| self.toggles.get_mut(i)) {
                    *t = !*t;
                }
            }
            ElementKind::TextField => {
                self.focused = true;
                return Effect::None;
            }
            ElementKind::ListRow => {
                if let Some(c) = index("row").and_then(|i| self.row_taps.get_mut(i)) {
                    *c += 1;
                }
            }
            _ => {}
        }
        self.focused = false;
        Effect::None
    }

    fn drag(&mut self, cx: &Cx, down: (i32, i32), up: (i32, i32)) -> Effect {
        if Self::viewport(cx).contains(down.0, down.1) {
            self.scroll.by(down.1 - up.1, Self::max_scroll(cx), cx.now);
        }
        Effect::None
    }

    fn key(&mut self, _cx: &Cx, key: Key) -> Effect {
        if !self.focused {
            return Effect::None;
        }
        match key {
            Key::Char(c) => self.text.push(c),
            Key::Backspace => {
                self.text.pop();
            }
            // Return ends editing in a single-line field.
            Key::Enter => self.focused = false,
            Key::SelectAll => {}
        }
        Effect::None
    }

    fn tick(&mut self, cx: &Cx) {
        self.scroll.tick(cx.now);
        if self.loading_since.is_some_and(|at| cx.now >= at + LOAD_MS) {
            self.loading_since = None;
            self.loads += 1;
        }
    }

    fn leave(&mut self) {
        self.scroll.stop();
        self.loading_since = None;
        self.focused = false;
    }
}
