//! A form of small controls, the hard case for verification under the pointer: a
//! checkbox, a radio group, a stepper with a digit, a heart, a badge counter, a segmented
//! control, and a disabled checkbox that does nothing when tapped. Each is 60-100 pixels
//! at 1179 wide, some close together; their changes are small and visible.

use super::{colour, el, labelled, large_title, text_at, text_centred, text_in, App, Cx, Effect, Page};
use crate::device::sim::ui::{Element, ElementKind, Paint, Rect};

const RADIOS: [&str; 3] = ["Small", "Medium", "Large"];
const SEGMENTS: [&str; 3] = ["Day", "Week", "Month"];

/// The form's state.
#[derive(Debug, Clone, Default)]
pub struct Controls {
    checked: bool,
    radio: usize,
    stepper: u8,
    liked: bool,
    badge: u32,
    segment: usize,
    /// Taps on the disabled checkbox: counted, never shown.
    dead_taps: u32,
}

impl Controls {
    pub fn new() -> Controls {
        Controls::default()
    }
}

/// A heart centred at (`x`, `y`), `s` wide: two lobes and a point, from discs and rows.
fn heart(x: i32, y: i32, s: i32, c: [u8; 3]) -> Vec<Paint> {
    let r = s / 4;
    let mut out = vec![
        Paint::Disc { x: x - r, y: y - r / 2, r, colour: c },
        Paint::Disc { x: x + r, y: y - r / 2, r, colour: c },
    ];
    // The point: rows narrowing from the lobes' width to nothing.
    let (top, bottom) = (y - r / 2, y + s / 2);
    let h = (bottom - top).max(1);
    for row in top..bottom {
        let half = 2 * r * (bottom - row) / h;
        out.push(Paint::Fill(Rect { x: x - half, y: row, w: 2 * half, h: 1 }, c));
    }
    out
}

impl App for Controls {
    fn clone_box(&self) -> Box<dyn App> {
        Box::new(self.clone())
    }

    fn page(&self, cx: &Cx) -> Page {
        let (title, title_paint) = large_title(cx, "Controls");
        let mut e = vec![title];
        let mut p = vec![title_paint];
        let body = cx.font(51);
        let small = cx.font(45);
        // Checkbox.
        let cb = cx.r(90, 400, 80, 80);
        let mut check = labelled(el("checkbox", ElementKind::Checkbox, cb), "Remember me");
        check.on = Some(self.checked);
        e.push(check);
        if self.checked {
            p.push(Paint::Round(cb, cx.sx(14), colour::BLUE));
            // A tick: a short stroke down and a long one up, as a chain of dots.
            let pts = [(22, 52), (42, 72), (78, 30)];
            let dot = (cb.w / 14).max(1);
            for seg in pts.windows(2) {
                let ((x0, y0), (x1, y1)) = (seg[0], seg[1]);
                for k in 0..=12 {
                    let (x, y) = (x0 + (x1 - x0) * k / 12, y0 + (y1 - y0) * k / 12);
                    p.push(Paint::Disc {
                        x: cb.x + cb.w * x / 100,
                        y: cb.y + cb.h * y / 100,
                        r: dot,
                        colour: colour::WHITE,
                    });
                }
            }
        } else {
            p.push(Paint::Outline(cb, cx.sx(14), cx.sx(5).max(1), colour::GREY));
        }
        p.push(text_in(
            "Remember me",
            Rect { x: cb.x + cb.w + cx.sx(30), w: cx.sx(800), ..cb },
            0,
            body,
            colour::BLACK,
        ));
        // Radio group.
        for (i, name) in RADIOS.iter().enumerate() {
            let x = 90 + i32::try_from(i).unwrap_or(0) * 330;
            let r = cx.r(x, 560, 70, 70);
            let mut radio = labelled(el(format!("radio{i}"), ElementKind::Radio, r), name);
            radio.selected = Some(self.radio == i);
            e.push(radio);
            let (cxp, cyp, rad) = (r.x + r.w / 2, r.y + r.h / 2, r.w / 2);
            if self.radio == i {
                p.push(Paint::Disc { x: cxp, y: cyp, r: rad, colour: colour::BLUE });
                p.push(Paint::Disc { x: cxp, y: cyp, r: rad * 2 / 5, colour: colour::WHITE });
            } else {
                p.push(Paint::Disc { x: cxp, y: cyp, r: rad, colour: colour::GREY });
                p.push(Paint::Disc { x: cxp, y: cyp, r: rad - cx.sx(5).max(1), colour: [242, 242, 247] });
            }
            p.push(text_in(
                name,
                Rect { x: r.x + r.w + cx.sx(20), y: r.y, w: cx.sx(220), h: r.h },
                0,
                small,
                colour::BLACK,
            ));
        }
        // Stepper: minus and plus close together, the digit beside them.
        let minus = cx.r(90, 720, 100, 80);
        let plus = cx.r(200, 720, 100, 80);
        for (id, r, sign) in [("stepper_minus", minus, "-"), ("stepper_plus", plus, "+")] {
            e.push(labelled(el(id, ElementKind::Button, r), sign));
            p.push(Paint::Round(r, cx.sx(16), colour::TRACK));
            // The stepper's signs are symbols on iOS.
            p.push(super::artwork(text_centred(sign, r, cx.font(60), colour::BLACK)));
        }
        let digit = cx.r(330, 720, 80, 80);
        let value = self.stepper.to_string();
        let mut stepper = labelled(el("stepper_value", ElementKind::Stepper, digit), &value);
        stepper.value = Some(i64::from(self.stepper));
        e.push(stepper);
        p.push(text_centred(&value, digit, cx.font(60), colour::BLACK));
        p.push(text_in("Copies", Rect { x: cx.sx(450), w: cx.sx(400), ..digit }, 0, body, colour::GREY));
        // Heart.
        let hr = cx.r(90, 860, 90, 90);
        let mut like = labelled(el("like", ElementKind::Like, hr), "Like");
        like.on = Some(self.liked);
        e.push(like);
        let (hx, hy, hs) = (hr.x + hr.w / 2, hr.y + hr.h / 2, hr.w);
        p.extend(heart(hx, hy, hs, colour::RED));
        if !self.liked {
            p.extend(heart(hx, hy, hs * 6 / 10, [242, 242, 247]));
        }
        p.push(text_in("Favourite", Rect { x: hr.x + hr.w + cx.sx(30), w: cx.sx(800), ..hr }, 0, body, colour::BLACK));
        // Badge counter: a button, and a red badge with the count beside it.
        let add = cx.r(90, 1010, 250, 100);
        e.push(labelled(el("badge_button", ElementKind::Button, add), "Add"));
        p.push(Paint::Round(add, cx.sx(20), colour::BLUE));
        p.push(text_centred("Add", add, small, colour::WHITE));
        let br = cx.r(360, 1020, 80, 80);
        let count = self.badge.to_string();
        let mut badge = labelled(el("badge", ElementKind::Badge, br), &count);
        badge.value = Some(i64::from(self.badge));
        e.push(badge);
        if self.badge > 0 {
            p.push(Paint::Disc { x: br.x + br.w / 2, y: br.y + br.h / 2, r: br.w / 2, colour: colour::RED });
            p.push(text_centred(&count, br, cx.font(45), colour::WHITE));
        }
        // Segmented control.
        let track = cx.r(90, 1170, 999, 90);
        p.push(Paint::Round(track, cx.sx(20), colour::TRACK));
        for (i, name) in SEGMENTS.iter().enumerate() {
            let x = 90 + i32::try_from(i).unwrap_or(0) * 333;
            let r = cx.r(x, 1170, 333, 90);
            let mut seg = labelled(el(format!("segment{i}"), ElementKind::Segment, r), name);
            seg.selected = Some(self.segment == i);
            e.push(seg);
            if self.segment == i {
                let inset = cx.sx(6);
                let knob = Rect { x: r.x + inset, y: r.y + inset, w: r.w - 2 * inset, h: r.h - 2 * inset };
                p.push(Paint::Round(knob, cx.sx(16), colour::WHITE));
            }
            p.push(text_centred(name, r, small, colour::BLACK));
        }
        // A disabled checkbox: it takes the tap and nothing happens.
        let dead = cx.r(90, 1330, 80, 80);
        let mut d = labelled(el("dead_checkbox", ElementKind::Checkbox, dead), "Unavailable");
        d.on = Some(false);
        d.enabled = Some(false);
        d.taps = Some(self.dead_taps);
        e.push(d);
        p.push(Paint::Outline(dead, cx.sx(14), cx.sx(5).max(1), colour::SEPARATOR));
        p.push(text_at(
            "Unavailable",
            dead.x + dead.w + cx.sx(30),
            dead.y + (dead.h - body) / 2,
            body,
            colour::SEPARATOR,
            cx.r(200, 1330, 900, 80),
        ));
        Page { elements: e, paint: p, title: Some("Controls".into()), ..Page::default() }
    }

    fn tap(&mut self, _cx: &Cx, target: Option<&Element>) -> Effect {
        let Some(e) = target else { return Effect::None };
        let index = |prefix: &str| e.id.strip_prefix(prefix).and_then(|n| n.parse::<usize>().ok());
        match e.id.as_str() {
            "checkbox" => self.checked = !self.checked,
            "dead_checkbox" => self.dead_taps += 1,
            "stepper_minus" => self.stepper = self.stepper.saturating_sub(1),
            "stepper_plus" => self.stepper = (self.stepper + 1).min(9),
            "like" => self.liked = !self.liked,
            "badge_button" => self.badge = (self.badge + 1).min(99),
            _ => {
                if let Some(i) = index("radio") {
                    self.radio = i;
                } else if let Some(i) = index("segment") {
                    self.segment = i;
                }
            }
        }
        Effect::None
    }
}
