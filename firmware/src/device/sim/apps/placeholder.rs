//! Every app the sim does not model: a page with the app's name as its large title, so
//! opening different apps looks different.

use super::{colour, el, labelled, large_title, text_centred, App, Cx, Effect, Page};
use crate::device::sim::ui::{Element, ElementKind};

/// An app that shows its name.
#[derive(Debug, Clone)]
pub struct Placeholder {
    name: &'static str,
}

impl Placeholder {
    pub fn new(name: &'static str) -> Placeholder {
        Placeholder { name }
    }
}

impl App for Placeholder {
    fn clone_box(&self) -> Box<dyn App> {
        Box::new(self.clone())
    }

    fn page(&self, cx: &Cx) -> Page {
        let (title, title_paint) = large_title(cx, self.name);
        let note = format!("No {} yet", self.name);
        let r = cx.r(90, 1150, 999, 120);
        let empty = labelled(el("empty", ElementKind::Label, r), &note);
        Page {
            elements: vec![title, empty],
            paint: vec![title_paint, text_centred(&note, r, cx.font(60), colour::GREY)],
            title: Some(self.name.to_string()),
            ..Page::default()
        }
    }

    fn tap(&mut self, _cx: &Cx, _target: Option<&Element>) -> Effect {
        Effect::None
    }
}
