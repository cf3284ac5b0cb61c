//! The sim's apps. Each is a small file behind [`App`]: it lays out its current page as
//! elements (what `sim_state` reports and touches hit) and paint (what the screen draws),
//! and answers taps, drags and keys. The home screen, Spotlight, alerts, navigation
//! animations and app transitions belong to [`super::ui`].
//!
//! Geometry is designed for a 1179x2556 screen and scaled by [`Cx`].

mod contacts;
mod controls;
mod demo;
mod notes;
mod placeholder;
mod settings;

use super::alert::Alert;
use super::text;
use super::ui::{Element, ElementKind, Paint, Rect, TextRun, SCROLL_MS};

/// The apps on the home screen, in icon order (icon `appN` is `APP_NAMES[N]`). Demo,
/// Settings, Notes, Controls and Contacts are real screens; the others open a page that
/// shows their name.
pub const APP_NAMES: [&str; 24] = [
    "Demo",
    "Settings",
    "Notes",
    "Controls",
    "Contacts",
    "Calendar",
    "Photos",
    "Camera",
    "Mail",
    "Clock",
    "Maps",
    "Weather",
    "Reminders",
    "Stocks",
    "Books",
    "App Store",
    "Podcasts",
    "Reality Composer",
    "Health",
    "Wallet",
    "Files",
    "Music",
    "Calculator",
    "Translate",
];

/// A fresh instance of the app named `name` (one of [`APP_NAMES`]).
pub(super) fn make(name: &'static str) -> Box<dyn App> {
    match name {
        "Demo" => Box::new(demo::Demo::new()),
        "Settings" => Box::new(settings::Settings::new()),
        "Notes" => Box::new(notes::Notes::new()),
        "Controls" => Box::new(controls::Controls::new()),
        "Contacts" => Box::new(contacts::Contacts::new()),
        _ => Box::new(placeholder::Placeholder::new(name)),
    }
}

/// An icon's colour on the home screen and in Spotlight.
pub(super) fn icon_colour(i: usize) -> [u8; 3] {
    match APP_NAMES.get(i).copied().unwrap_or("") {
        // The colour the demo's icon always had (tests find it by colour).
        "Demo" => [60, 90, 200],
        "Settings" => [142, 142, 147],
        "Notes" => [255, 204, 0],
        "Controls" => [88, 86, 214],
        "Contacts" => [162, 132, 94],
        _ => {
            let n = u8::try_from(i % 256).unwrap_or(0);
            [40 + (n % 6) * 35, 80 + (n % 4) * 40, 200 - (n % 5) * 30]
        }
    }
}

/// The layout context: screen size (for scaling) and the phone's clock.
#[derive(Debug, Clone, Copy)]
pub struct Cx {
    /// Screen width in pixels.
    pub w: i32,
    /// Screen height in pixels.
    pub h: i32,
    /// Milliseconds since the phone started.
    pub now: u64,
    /// Lay out at rest: scrolls where they will stop, not where they are drawn now (what
    /// `sim_state` reports and touches hit).
    pub rest: bool,
}

impl Cx {
    /// Scales an x or a size designed for a 1179-pixel-wide screen.
    pub fn sx(&self, v: i32) -> i32 {
        i32::try_from(i64::from(v) * i64::from(self.w) / 1179).unwrap_or(v)
    }

    /// Scales a y designed for a 2556-pixel-high screen.
    pub fn sy(&self, v: i32) -> i32 {
        i32::try_from(i64::from(v) * i64::from(self.h) / 2556).unwrap_or(v)
    }

    /// A rectangle designed for 1179x2556, scaled.
    pub fn r(&self, x: i32, y: i32, w: i32, h: i32) -> Rect {
        Rect { x: self.sx(x), y: self.sy(y), w: self.sx(w), h: self.sy(h) }
    }

    /// A font size designed for 1179 wide, scaled (at least a pixel).
    pub fn font(&self, v: i32) -> i32 {
        self.sx(v).max(1)
    }
}

/// A key the focused app gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// A typed character.
    Char(char),
    /// Backspace.
    Backspace,
    /// Return.
    Enter,
    /// Cmd+A.
    SelectAll,
}

/// What an app asks of the UI after an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Nothing more.
    None,
    /// Close the app (its back button).
    Home,
    /// A page was pushed: play the push animation.
    Push,
    /// A page was popped: play it backwards.
    Pop,
    /// Show an alert; its answer comes back through [`App::answer`].
    Alert(Alert),
}

/// An app's current page.
#[derive(Debug, Clone, Default)]
pub struct Page {
    /// Elements, top-most last.
    pub elements: Vec<Element>,
    /// What is drawn, in order, over the app's background.
    pub paint: Vec<Paint>,
    /// The page's title, if it shows one.
    pub title: Option<String>,
    /// Where the caret goes, while a text element has focus.
    pub caret: Option<Rect>,
    /// Whether a text element has focus (the accessory bar shows).
    pub focused: bool,
    /// Whether something on the page moves by itself.
    pub animating: bool,
    /// The demo's load spinner: where, and which of its spokes is lit.
    pub spinner: Option<(Rect, u8)>,
    /// The demo's finished loads.
    pub loads: u32,
}

/// One app. Its state lives as long as the phone (iOS keeps apps in memory).
pub trait App: std::fmt::Debug + Send {
    /// A copy, for computing a scene at rest.
    fn clone_box(&self) -> Box<dyn App>;
    /// The page as drawn at `cx.now`.
    fn page(&self, cx: &Cx) -> Page;
    /// A tap on `target` (`None`: on no element).
    fn tap(&mut self, cx: &Cx, target: Option<&Element>) -> Effect;
    /// A drag from `down` to `up`.
    fn drag(&mut self, _cx: &Cx, _down: (i32, i32), _up: (i32, i32)) -> Effect {
        Effect::None
    }
    /// A key, for the focused element.
    fn key(&mut self, _cx: &Cx, _key: Key) -> Effect {
        Effect::None
    }
    /// Cmd+[ or the back gesture: pops a page; `false` at the app's root.
    fn back(&mut self) -> bool {
        false
    }
    /// The clock moved on: finish what ended.
    fn tick(&mut self, _cx: &Cx) {}
    /// The app closes: stop what runs, drop focus.
    fn leave(&mut self) {}
    /// The answer to an alert the app asked for: the index of the button pressed.
    fn answer(&mut self, _alert: &str, _button: usize) {}
}

/// Colours (iOS system colours).
pub(super) mod colour {
    /// Tint.
    pub const BLUE: [u8; 3] = [0, 122, 255];
    /// Switch on.
    pub const GREEN: [u8; 3] = [52, 199, 89];
    /// Destructive, badges.
    pub const RED: [u8; 3] = [255, 59, 48];
    /// Secondary text.
    pub const GREY: [u8; 3] = [142, 142, 147];
    /// Separators and outlines.
    pub const SEPARATOR: [u8; 3] = [198, 198, 200];
    /// Switch off, segmented track.
    pub const TRACK: [u8; 3] = [229, 229, 234];
    /// A switch's track when off (darker than a text field's fill, which tests find by
    /// its colour).
    pub const SWITCH_OFF: [u8; 3] = [214, 214, 218];
    /// Cells.
    pub const WHITE: [u8; 3] = [255, 255, 255];
    /// Text.
    pub const BLACK: [u8; 3] = [0, 0, 0];
}

/// An element with nothing but its id, kind and rectangle.
pub(super) fn el(id: impl Into<String>, kind: ElementKind, rect: Rect) -> Element {
    Element {
        id: id.into(),
        kind,
        rect,
        on: None,
        selected: None,
        value: None,
        enabled: None,
        taps: None,
        text: None,
        label: None,
        missing_glyphs: None,
        focused: None,
        selection: None,
        scroll_offset: None,
    }
}

/// `e` with the words drawn on it (and the characters the font lacks).
pub(super) fn labelled(mut e: Element, label: &str) -> Element {
    let missing = text::missing_glyphs(label);
    e.missing_glyphs = (!missing.is_empty()).then_some(missing);
    e.label = Some(label.to_string());
    e
}

/// `e` with typed text (and the characters the font lacks).
pub(super) fn typed(mut e: Element, typed: &str) -> Element {
    let missing = text::missing_glyphs(typed);
    e.missing_glyphs = (!missing.is_empty()).then_some(missing);
    e.text = Some(typed.to_string());
    e
}

/// A text width in whole pixels.
pub(super) fn width(s: &str, size: i32) -> i32 {
    #[allow(clippy::cast_precision_loss)] // a font size in pixels
    let w = text::width(s, size as f32);
    // Text on a screen of at most 8192 pixels, far inside i32.
    #[allow(clippy::cast_possible_truncation)]
    let r = w.round() as i32;
    r
}

/// A line of text at (`x`, `y`) (top-left of its box), `size` pixels high, clipped.
pub(super) fn text_at(s: &str, x: i32, y: i32, size: i32, colour: [u8; 3], clip: Rect) -> Paint {
    Paint::Text(TextRun { text: s.to_string(), x, y, size, colour, clip, artwork: false })
}

/// A line of text vertically centred in `r`, `pad` in from its left.
pub(super) fn text_in(s: &str, r: Rect, pad: i32, size: i32, colour: [u8; 3]) -> Paint {
    text_at(s, r.x + pad, r.y + (r.h - size) / 2, size, colour, r)
}

/// A line of text centred in `r`.
pub(super) fn text_centred(s: &str, r: Rect, size: i32, colour: [u8; 3]) -> Paint {
    let w = width(s, size);
    text_at(s, r.x + (r.w - w) / 2, r.y + (r.h - size) / 2, size, colour, r)
}

/// A line of text right-aligned in `r`, `pad` in from its right.
pub(super) fn text_right(s: &str, r: Rect, pad: i32, size: i32, colour: [u8; 3]) -> Paint {
    let w = width(s, size);
    text_at(s, r.x + r.w - pad - w, r.y + (r.h - size) / 2, size, colour, r)
}

/// An iOS switch in `r`: a pill, green when on, with a white knob at its end.
pub(super) fn switch(r: Rect, on: bool) -> Vec<Paint> {
    let rad = r.h / 2;
    let knob = rad - (r.h / 16).max(1);
    let kx = if on { r.x + r.w - rad } else { r.x + rad };
    vec![
        Paint::Round(r, rad, if on { colour::GREEN } else { colour::SWITCH_OFF }),
        Paint::Disc { x: kx, y: r.y + rad, r: knob, colour: colour::WHITE },
    ]
}

/// A page's large title (34 pt), left under the status bar.
pub(super) fn large_title(cx: &Cx, title: &str) -> (Element, Paint) {
    let r = cx.r(48, 190, 1083, 130);
    let size = cx.font(102);
    (labelled(el("title", ElementKind::Label, r), title), text_in(title, r, 0, size, colour::BLACK))
}

/// A pushed page's navigation bar: a back button ("< `back`") and the title centred.
pub(super) fn nav_bar(cx: &Cx, title: &str, back: &str) -> (Vec<Element>, Vec<Paint>) {
    let back_label = format!("< {back}");
    let b = cx.r(20, 150, 300, 120);
    let t = cx.r(330, 150, 519, 120);
    let size = cx.font(51);
    let elements = vec![
        labelled(el("back", ElementKind::Back, b), &back_label),
        labelled(el("title", ElementKind::Label, t), title),
    ];
    // The chevron is a symbol on iOS, not a letter: drawn as artwork, the name as text.
    let chevron_w = width("< ", size);
    let mut paint = vec![artwork(text_in("<", b, cx.sx(20), size, colour::BLUE))];
    let name = Rect { x: b.x + chevron_w, w: b.w - chevron_w, ..b };
    paint.push(text_in(back, name, cx.sx(20), size, colour::BLUE));
    paint.push(text_centred(&text::truncate(title, size_f(size), size_f(t.w)), t, size, colour::BLACK));
    (elements, paint)
}

/// A pixel size as a float, for text measuring.
pub(super) fn size_f(v: i32) -> f32 {
    #[allow(clippy::cast_precision_loss)] // pixel sizes, far below 2^24
    let f = v as f32;
    f
}

/// A vertical scroll position that glides to where a drag leaves it, like a flick coming to
/// rest (ease-out over [`SCROLL_MS`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Scroller {
    /// Where it rests.
    pub to: i32,
    /// The glide: from, start.
    anim: Option<(i32, u64)>,
}

impl Scroller {
    /// Where it is at `cx`: drawn now, or at rest.
    pub fn at(&self, cx: &Cx) -> i32 {
        if cx.rest {
            self.to
        } else {
            self.drawn(cx.now)
        }
    }

    /// Where it is drawn at `now`.
    pub fn drawn(&self, now: u64) -> i32 {
        match self.anim {
            Some((from, at)) => {
                #[allow(clippy::cast_precision_loss)] // milliseconds of an animation
                let t = (now.saturating_sub(at)).min(SCROLL_MS) as f64 / SCROLL_MS as f64;
                let eased = 1.0 - (1.0 - t) * (1.0 - t);
                // Scroll distances are bounded by a list's height, far inside i32.
                #[allow(clippy::cast_possible_truncation)]
                let d = (f64::from(self.to - from) * eased).round() as i32;
                from + d
            }
            None => self.to,
        }
    }

    /// Scrolls by `delta` (clamped to `0..=max`), gliding from where it is drawn now.
    pub fn by(&mut self, delta: i32, max: i32, now: u64) {
        let to = (self.to + delta).clamp(0, max.max(0));
        if to != self.to {
            self.anim = Some((self.drawn(now), now));
            self.to = to;
        }
    }

    /// Ends the glide once it is over.
    pub fn tick(&mut self, now: u64) {
        if self.anim.is_some_and(|(_, at)| now >= at + SCROLL_MS) {
            self.anim = None;
        }
    }

    /// Stops gliding (at its end).
    pub fn stop(&mut self) {
        self.anim = None;
    }

    /// Whether it glides.
    pub fn moving(&self) -> bool {
        self.anim.is_some()
    }
}

/// A white cell row of a list: its element, background, label and a separator under it.
pub(super) fn cell(cx: &Cx, id: String, r: Rect, label: &str, kind: ElementKind) -> (Element, Vec<Paint>) {
    let size = cx.font(51);
    let sep = Rect { x: r.x + cx.sx(48), y: r.y + r.h - 1.max(cx.sy(2)), w: r.w - cx.sx(48), h: 1.max(cx.sy(2)) };
    (
        labelled(el(id, kind, r), label),
        vec![
            Paint::Fill(r, colour::WHITE),
            text_in(label, r, cx.sx(48), size, colour::BLACK),
            Paint::Fill(sep, colour::SEPARATOR),
        ],
    )
}

/// A chevron (">") at the right of a navigation row.
pub(super) fn chevron(cx: &Cx, r: Rect) -> Paint {
    artwork(text_right(">", r, cx.sx(48), cx.font(51), colour::GREY))
}

/// `p` (a text run) marked as part of a picture: a symbol drawn with a letter, not text a
/// person reads (`sim_state.texts` leaves it out).
pub(super) fn artwork(p: Paint) -> Paint {
    match p {
        Paint::Text(t) => Paint::Text(TextRun { artwork: true, ..t }),
        other => other,
    }
}
