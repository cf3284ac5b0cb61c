//! A long list: 120 contacts in sections by first letter, scrolled by dragging (it glides
//! like the demo's list); a tap on a name pushes its card, with the name as title.

use super::{cell, colour, el, labelled, large_title, nav_bar, App, Cx, Effect, Page, Scroller};
use crate::device::sim::ui::{Element, ElementKind, Paint, Rect};

const FIRST: [&str; 40] = [
    "Aaron", "Abigail", "Beatrice", "Benjamin", "Carlos", "Chloe", "Daniel", "Diana", "Elena", "Ethan", "Fatima",
    "Felix", "Grace", "Gustav", "Hannah", "Hugo", "Ingrid", "Isaac", "Jasmine", "Jonas", "Kai", "Karin", "Leila",
    "Lucas", "Maria", "Mateo", "Nadia", "Noah", "Olivia", "Oscar", "Paula", "Quentin", "Rosa", "Samuel", "Sofia",
    "Tomas", "Ursula", "Victor", "Yara", "Zoe",
];
const LAST: [&str; 3] = ["Lindqvist", "Moreau", "Okafor"];

/// The contacts' names, sorted.
fn names() -> Vec<String> {
    let mut v: Vec<String> = FIRST.iter().flat_map(|f| LAST.iter().map(move |l| format!("{f} {l}"))).collect();
    v.sort();
    v
}

/// One line of the list: a section header or a contact.
enum Item {
    Header(char),
    Contact(usize),
}

/// The list's state.
#[derive(Debug, Clone)]
pub struct Contacts {
    names: Vec<String>,
    scroll: Scroller,
    /// The contact whose card is open.
    open: Option<usize>,
}

impl Contacts {
    pub fn new() -> Contacts {
        Contacts { names: names(), scroll: Scroller::default(), open: None }
    }

    fn viewport(cx: &Cx) -> Rect {
        cx.r(0, 340, 1179, 2216)
    }

    /// Items with their tops and heights in the scrolled content.
    fn items(&self, cx: &Cx) -> Vec<(Item, i32, i32)> {
        let (hh, rh) = (cx.sy(70).max(1), cx.sy(130).max(1));
        let mut out = Vec::new();
        let mut y = 0;
        let mut letter = None;
        for (i, n) in self.names.iter().enumerate() {
            let first = n.chars().next().unwrap_or('#');
            if letter != Some(first) {
                letter = Some(first);
                out.push((Item::Header(first), y, hh));
                y += hh;
            }
            out.push((Item::Contact(i), y, rh));
            y += rh;
        }
        out
    }

    fn max_scroll(&self, cx: &Cx) -> i32 {
        let end = self.items(cx).last().map_or(0, |(_, y, h)| y + h);
        (end - Self::viewport(cx).h).max(0)
    }
}

impl App for Contacts {
    fn clone_box(&self) -> Box<dyn App> {
        Box::new(self.clone())
    }

    fn page(&self, cx: &Cx) -> Page {
        if let Some(name) = self.open.and_then(|i| self.names.get(i)) {
            let (mut elements, mut paint) = nav_bar(cx, name, "Contacts");
            let initials: String = name.split(' ').filter_map(|w| w.chars().next()).collect();
            let (ax, ay, ar) = (cx.sx(589), cx.sy(520), cx.sx(150));
            paint.push(Paint::Disc { x: ax, y: ay, r: ar, colour: colour::GREY });
            paint.push(super::text_centred(
                &initials,
                Rect { x: ax - ar, y: ay - ar, w: 2 * ar, h: 2 * ar },
                cx.font(110),
                colour::WHITE,
            ));
            let i = self.open.unwrap_or(0);
            for (k, (id, label)) in [
                ("phone", format!("mobile  +1 555 01{:02}", i % 100)),
                ("email", format!("{}@example.com", name.split(' ').next().unwrap_or("").to_lowercase())),
            ]
            .iter()
            .enumerate()
            {
                let r = cx.r(48, 760 + i32::try_from(k).unwrap_or(0) * 140, 1083, 140);
                let (e, p) = cell(cx, (*id).to_string(), r, label, ElementKind::Label);
                elements.push(e);
                paint.extend(p);
            }
            return Page { elements, paint, title: Some(name.clone()), ..Page::default() };
        }
        let (title, title_paint) = large_title(cx, "Contacts");
        let mut elements = vec![title];
        let mut paint = vec![title_paint];
        let viewport = Self::viewport(cx);
        let scroll = self.scroll.at(cx);
        let mut list = el("contacts", ElementKind::List, viewport);
        list.scroll_offset = Some(scroll);
        elements.push(list);
        for (item, top, h) in self.items(cx) {
            let r = Rect { x: viewport.x, y: viewport.y + top - scroll, w: viewport.w, h };
            let Some(visible) = r.intersect(&viewport) else { continue };
            match item {
                Item::Header(c) => {
                    let s = c.to_string();
                    elements.push(labelled(el(format!("section_{c}"), ElementKind::Label, visible), &s));
                    paint.push(Paint::Fill(visible, [242, 242, 247]));
                    let size = cx.font(42);
                    paint.push(super::text_at(
                        &s,
                        r.x + cx.sx(48),
                        r.y + (r.h - size) / 2,
                        size,
                        colour::GREY,
                        visible,
                    ));
                }
                Item::Contact(i) => {
                    let name = &self.names[i];
                    elements.push(labelled(el(format!("contact{i}"), ElementKind::ListRow, visible), name));
                    paint.push(Paint::Fill(visible, colour::WHITE));
                    let size = cx.font(51);
                    paint.push(super::text_at(
                        name,
                        r.x + cx.sx(48),
                        r.y + (r.h - size) / 2,
                        size,
                        colour::BLACK,
                        visible,
                    ));
                    let sep = Rect { x: r.x + cx.sx(48), y: r.y + r.h - cx.sy(2).max(1), w: r.w, h: cx.sy(2).max(1) };
                    if let Some(s) = sep.intersect(&visible) {
                        paint.push(Paint::Fill(s, colour::SEPARATOR));
                    }
                }
            }
        }
        Page {
            elements,
            paint,
            title: Some("Contacts".into()),
            animating: !cx.rest && self.scroll.moving(),
            ..Page::default()
        }
    }

    fn tap(&mut self, _cx: &Cx, target: Option<&Element>) -> Effect {
        let Some(e) = target else { return Effect::None };
        if e.kind == ElementKind::Back {
            self.open = None;
            return Effect::Pop;
        }
        if let Some(i) = e.id.strip_prefix("contact").and_then(|n| n.parse::<usize>().ok()) {
            self.open = Some(i);
            return Effect::Push;
        }
        Effect::None
    }

    fn drag(&mut self, cx: &Cx, down: (i32, i32), up: (i32, i32)) -> Effect {
        if self.open.is_none() && Self::viewport(cx).contains(down.0, down.1) {
            let max = self.max_scroll(cx);
            self.scroll.by(down.1 - up.1, max, cx.now);
        }
        Effect::None
    }

    fn back(&mut self) -> bool {
        self.open.take().is_some()
    }

    fn tick(&mut self, cx: &Cx) {
        self.scroll.tick(cx.now);
    }

    fn leave(&mut self) {
        self.scroll.stop();
    }
}
