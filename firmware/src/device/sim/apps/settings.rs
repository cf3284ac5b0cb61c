//! Settings: a list of labelled rows, some with switches, some that push a page (a back
//! button "< Settings" and the row's name as title). General > Reset asks in an alert.

use std::collections::BTreeMap;

use super::{cell, chevron, colour, el, large_title, nav_bar, text_right, App, Cx, Effect, Page};
use crate::device::sim::alert::Alert;
use crate::device::sim::ui::{Element, ElementKind, Paint};

/// A row: its id (a slug), its label, and what it is.
#[derive(Debug, Clone, Copy)]
enum Row {
    /// A switch, on or off by default.
    Switch(&'static str, &'static str, bool),
    /// Pushes a page.
    Nav(&'static str, &'static str),
    /// A label with a value on the right; tapping does nothing.
    Info(&'static str, &'static str, &'static str),
    /// An action in the tint colour: asks in an alert.
    Action(&'static str, &'static str),
}

const ROOT: [Row; 8] = [
    Row::Switch("airplane_mode", "Airplane Mode", false),
    Row::Nav("wifi", "Wi-Fi"),
    Row::Switch("bluetooth", "Bluetooth", true),
    Row::Nav("general", "General"),
    Row::Nav("display", "Display & Brightness"),
    Row::Nav("sounds", "Sounds & Haptics"),
    Row::Nav("privacy", "Privacy & Security"),
    Row::Nav("battery", "Battery"),
];

/// A pushed page's rows.
fn detail(page: &str) -> &'static [Row] {
    match page {
        "wifi" => &[
            Row::Switch("wifi_enabled", "Wi-Fi", true),
            Row::Info("network", "Network", "Home"),
            Row::Switch("ask_to_join", "Ask to Join Networks", false),
        ],
        "general" => &[
            Row::Info("about", "About", "iPhone"),
            Row::Info("version", "iOS Version", "26.0"),
            Row::Switch("auto_update", "Automatic Updates", true),
            Row::Action("reset", "Reset All Settings"),
        ],
        "display" => &[
            Row::Switch("dark_mode", "Dark Appearance", false),
            Row::Switch("true_tone", "True Tone", true),
            Row::Info("text_size", "Text Size", "Default"),
        ],
        "sounds" => {
            &[Row::Switch("silent_mode", "Silent Mode", false), Row::Switch("keyboard_clicks", "Keyboard Clicks", true)]
        }
        "privacy" => &[
            Row::Switch("location", "Location Services", true),
            Row::Switch("tracking", "Allow Apps to Request to Track", false),
        ],
        "battery" => {
            &[Row::Switch("low_power", "Low Power Mode", false), Row::Info("health", "Battery Health", "100%")]
        }
        _ => &[],
    }
}

fn all_rows() -> impl Iterator<Item = Row> {
    ROOT.into_iter().chain(ROOT.iter().flat_map(|r| match r {
        Row::Nav(id, _) => detail(id).iter().copied(),
        _ => [].iter().copied(),
    }))
}

fn defaults() -> BTreeMap<&'static str, bool> {
    all_rows()
        .filter_map(|r| match r {
            Row::Switch(id, _, on) => Some((id, on)),
            _ => None,
        })
        .collect()
}

/// The alert General > Reset asks.
const RESET_ALERT: &str = "reset_all";

/// Settings' state.
#[derive(Debug, Clone)]
pub struct Settings {
    switches: BTreeMap<&'static str, bool>,
    /// The pushed page (a root row's id), if any.
    page: Option<&'static str>,
}

impl Settings {
    pub fn new() -> Settings {
        Settings { switches: defaults(), page: None }
    }
}

impl App for Settings {
    fn clone_box(&self) -> Box<dyn App> {
        Box::new(self.clone())
    }

    fn page(&self, cx: &Cx) -> Page {
        let (mut elements, mut paint, rows, title, top) = match self.page {
            Some(id) => {
                let name = ROOT.iter().find_map(|r| match r {
                    Row::Nav(i, n) if *i == id => Some(*n),
                    _ => None,
                });
                let name = name.unwrap_or("Settings");
                let (e, p) = nav_bar(cx, name, "Settings");
                (e, p, detail(id), name, 330)
            }
            None => {
                let (e, p) = large_title(cx, "Settings");
                (vec![e], vec![p], &ROOT[..], "Settings", 360)
            }
        };
        let rh = 140;
        for (k, row) in rows.iter().enumerate() {
            let r = cx.r(48, top + i32::try_from(k).unwrap_or(0) * rh, 1083, rh);
            match *row {
                Row::Switch(id, label, _) => {
                    let on = self.switches.get(id).copied().unwrap_or(false);
                    let (mut e, p) = cell(cx, format!("setting_{id}"), r, label, ElementKind::ListRow);
                    // The row's element stops short of its switch (one element per spot).
                    e.rect.w -= cx.sx(48 + 153 + 20);
                    elements.push(e);
                    paint.extend(p);
                    let s = cx.r(1131 - 48 - 153, top + i32::try_from(k).unwrap_or(0) * rh + 23, 153, 93);
                    let mut sw = super::labelled(el(format!("switch_{id}"), ElementKind::Toggle, s), label);
                    sw.on = Some(on);
                    elements.push(sw);
                    paint.extend(super::switch(s, on));
                }
                Row::Nav(id, label) => {
                    let (e, p) = cell(cx, format!("setting_{id}"), r, label, ElementKind::ListRow);
                    elements.push(e);
                    paint.extend(p);
                    paint.push(chevron(cx, r));
                }
                Row::Info(id, label, value) => {
                    let (mut e, p) = cell(cx, format!("setting_{id}"), r, label, ElementKind::ListRow);
                    e.text = Some(value.to_string());
                    elements.push(e);
                    paint.extend(p);
                    paint.push(text_right(value, r, cx.sx(48), cx.font(51), colour::GREY));
                }
                Row::Action(id, label) => {
                    let (e, mut p) = cell(cx, format!("setting_{id}"), r, label, ElementKind::ListRow);
                    // The label in the tint colour: recolour the cell's text.
                    for q in &mut p {
                        if let Paint::Text(t) = q {
                            t.colour = colour::BLUE;
                        }
                    }
                    elements.push(e);
                    paint.extend(p);
                }
            }
        }
        Page { elements, paint, title: Some(title.to_string()), ..Page::default() }
    }

    fn tap(&mut self, _cx: &Cx, target: Option<&Element>) -> Effect {
        let Some(e) = target else { return Effect::None };
        if e.kind == ElementKind::Back {
            self.page = None;
            return Effect::Pop;
        }
        if let Some(id) = e.id.strip_prefix("switch_") {
            if let Some(on) = self.switches.iter_mut().find(|(k, _)| **k == id).map(|(_, v)| v) {
                *on = !*on;
            }
            return Effect::None;
        }
        let Some(id) = e.id.strip_prefix("setting_") else { return Effect::None };
        let rows = self.page.map_or(&ROOT[..], detail);
        match rows.iter().find(|r| matches!(r, Row::Nav(i, _) | Row::Action(i, _) if *i == id)) {
            Some(Row::Nav(i, _)) => {
                self.page = Some(i);
                Effect::Push
            }
            Some(Row::Action(..)) => Effect::Alert(Alert {
                id: RESET_ALERT.into(),
                title: "Reset All Settings?".into(),
                message: "Every switch goes back to its default.".into(),
                buttons: vec!["Cancel".into(), "Reset".into()],
            }),
            _ => Effect::None,
        }
    }

    fn back(&mut self) -> bool {
        self.page.take().is_some()
    }

    fn answer(&mut self, alert: &str, button: usize) {
        if alert == RESET_ALERT && button == 1 {
            self.switches = defaults();
        }
    }
}
