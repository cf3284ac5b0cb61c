//! Alerts: a modal box centred on a dimmed screen, with a title, a message and buttons.
//! While one shows, only its buttons take taps; a tap elsewhere does nothing.

use serde::Serialize;

use super::apps::{colour, el, labelled, text_centred, Cx};
use super::ui::{Element, ElementKind, Paint, Rect};

/// An alert as an app asks for it and `sim_state` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Alert {
    /// Which question it is, for the app that asked.
    #[serde(skip)]
    pub id: String,
    /// Title (bold on iOS).
    pub title: String,
    /// The message under it.
    pub message: String,
    /// Buttons, left to right (the cancel button first).
    pub buttons: Vec<String>,
}

/// How dark the screen behind an alert gets (of 255).
const DIM: u8 = 90;

impl Alert {
    /// The box, centred.
    fn frame(cx: &Cx) -> Rect {
        cx.r(184, 1020, 811, 460)
    }

    /// Its elements (the box, then its buttons) and what it draws over the screen.
    pub fn layout(&self, cx: &Cx) -> (Vec<Element>, Vec<Paint>) {
        let b = Self::frame(cx);
        let bh = cx.sy(132);
        let line = cx.sy(2).max(1);
        // The box's element is its text; the buttons below it are elements of their own.
        let text_area = Rect { h: b.h - bh - line, ..b };
        let mut elements = vec![labelled(el("alert", ElementKind::Alert, text_area), &self.title)];
        let mut paint = vec![
            Paint::Dim(Rect { x: 0, y: 0, w: cx.w, h: cx.h }, DIM),
            Paint::Round(b, cx.sx(42), [242, 242, 242]),
            text_centred(
                &self.title,
                Rect { x: b.x, y: b.y + cx.sy(50), w: b.w, h: cx.sy(70) },
                cx.font(51),
                colour::BLACK,
            ),
            text_centred(
                &self.message,
                Rect { x: b.x, y: b.y + cx.sy(140), w: b.w, h: cx.sy(60) },
                cx.font(39),
                colour::BLACK,
            ),
        ];
        let top = b.y + b.h - bh;
        paint.push(Paint::Fill(Rect { x: b.x, y: top - line, w: b.w, h: line }, colour::SEPARATOR));
        let n = i32::try_from(self.buttons.len().max(1)).unwrap_or(1);
        for (i, name) in self.buttons.iter().enumerate() {
            let k = i32::try_from(i).unwrap_or(0);
            let r = Rect { x: b.x + b.w * k / n, y: top, w: b.w / n, h: bh };
            elements.push(labelled(el(format!("alert_button{i}"), ElementKind::AlertButton, r), name));
            if k > 0 {
                paint.push(Paint::Fill(Rect { x: r.x, y: top, w: line, h: bh }, colour::SEPARATOR));
            }
            let ink = if name == "Cancel" { colour::BLUE } else { colour::RED };
            paint.push(text_centred(name, r, cx.font(51), ink));
        }
        (elements, paint)
    }
}
