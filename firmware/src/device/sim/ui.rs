//! The virtual iPhone's user interface: screens, elements, and what touches and keys do.
//!
//! Geometry is in native phone pixels (portrait 1179x2556 by default). Layouts scale with
//! the configured screen size so other phone sizes work too.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};

use serde::Serialize;

use super::alert::Alert;
use super::apps::{
    self, colour, el, icon_colour, labelled, text_at, text_centred, width, App, Cx, Effect, Key, APP_NAMES,
};
use super::{spotlight, text};

/// A rectangle in phone pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Rect {
    /// Left edge.
    pub x: i32,
    /// Top edge.
    pub y: i32,
    /// Width.
    pub w: i32,
    /// Height.
    pub h: i32,
}

impl Rect {
    /// Whether (`x`, `y`) is inside.
    pub fn contains(&self, x: i32, y: i32) -> bool {
        x >= self.x && x < self.x + self.w && y >= self.y && y < self.y + self.h
    }

    /// The part both rectangles cover, if any.
    pub fn intersect(&self, o: &Rect) -> Option<Rect> {
        let (x0, y0) = (self.x.max(o.x), self.y.max(o.y));
        let (x1, y1) = ((self.x + self.w).min(o.x + o.w), (self.y + self.h).min(o.y + o.h));
        (x1 > x0 && y1 > y0).then_some(Rect { x: x0, y: y0, w: x1 - x0, h: y1 - y0 })
    }
}

/// Which screen the phone shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Screen {
    /// App icons.
    Home,
    /// An app (`sim_state`'s `app` names it).
    App,
    /// Spotlight search.
    Spotlight,
}

/// What kind of element.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ElementKind {
    /// A home-screen icon.
    AppIcon,
    /// A push button.
    Button,
    /// An on/off switch.
    Toggle,
    /// A single-line text field.
    TextField,
    /// A scrollable list's viewport.
    List,
    /// A row of the list (only rows at least partly visible are listed).
    ListRow,
    /// The app's back button.
    Back,
    /// A context menu opened by a long press.
    ContextMenu,
    /// A multi-line text view (Return inserts a newline).
    TextView,
    /// Text that does nothing when tapped: titles, section letters, values.
    Label,
    /// A checkbox (`on`).
    Checkbox,
    /// One option of a radio group (`selected`).
    Radio,
    /// A stepper's digit (`value`); its - and + are buttons.
    Stepper,
    /// A heart (`on`: filled).
    Like,
    /// A red badge with a count (`value`; not drawn at 0).
    Badge,
    /// One segment of a segmented control (`selected`).
    Segment,
    /// A Spotlight result (`label`: the app; `value`: its icon index).
    SearchResult,
    /// An alert's box (`label`: its title).
    Alert,
    /// An alert's button.
    AlertButton,
}

/// One element as `sim_state` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Element {
    /// Stable id, e.g. `"toggle1"`, `"row17"`, `"app5"`.
    pub id: String,
    /// Kind.
    pub kind: ElementKind,
    /// Visible rectangle in phone pixels (clipped to its container).
    pub rect: Rect,
    /// On or off: switches, checkboxes, the heart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on: Option<bool>,
    /// Whether it is the chosen one: radio options, segments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selected: Option<bool>,
    /// A number it shows: the stepper's digit, the badge's count, a search result's app.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<i64>,
    /// `false` for a disabled control (it takes taps and does nothing); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Times tapped, for buttons and rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub taps: Option<u32>,
    /// Text typed into text fields and views; a row's value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The words drawn on it, for app icons (under the icon), buttons and rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Characters of its text or label the font cannot draw: they show as tofu (a box),
    /// as on iOS. Absent when every character draws.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing_glyphs: Option<Vec<char>>,
    /// Whether it has keyboard focus, for text fields and views.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub focused: Option<bool>,
    /// The selected characters of a text view, `[start, end)` in characters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selection: Option<(usize, usize)>,
    /// Scroll offset in pixels, for the list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scroll_offset: Option<i32>,
}

/// How the phone interpreted a touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TouchKind {
    /// Short touch without movement.
    Tap,
    /// Held at least 1.5 s without movement.
    LongPress,
    /// Moved while down.
    Drag,
}

/// A touch the phone registered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Touch {
    /// Sequence number since the phone started.
    pub seq: u64,
    /// Kind.
    pub kind: TouchKind,
    /// Where the finger went down (phone pixels).
    pub down: (i32, i32),
    /// Where it lifted.
    pub up: (i32, i32),
    /// How long it was down.
    pub duration_ms: u64,
    /// When it ended, in milliseconds since the phone started.
    pub at_ms: u64,
    /// The element under the down point, if any.
    pub target: Option<String>,
    /// Whether the phone ignored it (it came while an app was opening or closing).
    pub ignored: bool,
}

/// Movement below this many pixels still counts as a tap.
const TAP_SLOP: i32 = 24;
/// iOS needs this long for a long press.
const LONG_PRESS_MS: u64 = 1500;
/// Touches kept for `sim_state`.
const TOUCHES_KEPT: usize = 32;

/// How long an app takes to open (iOS: about 400 ms).
pub const OPEN_MS: u64 = 400;
/// How long an app takes to close.
pub const CLOSE_MS: u64 = 350;
/// How long a list scroll glides.
pub const SCROLL_MS: u64 = 350;
/// How long the load button shows its spinner.
pub const LOAD_MS: u64 = 700;
/// Half a caret blink: visible this long, then hidden this long.
pub const CARET_HALF_PERIOD_MS: u64 = 500;
/// The caret's width and its gap after the last letter, in 1179-px screen units (iOS: a
/// 2-pt bar about 1 pt after the text, never touching the letter).
pub const CARET_WIDTH: i32 = 6;
/// See [`CARET_WIDTH`].
pub const CARET_GAP: i32 = 3;
/// How long a navigation push (or pop) slides (iOS: about 0.5 s).
pub const PUSH_MS: u64 = 500;
/// Long enough for everything that moves by itself to have come to rest.
const REST_MS: u64 = 60_000;

/// A line of text as the screen draws it, in phone pixels.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TextRun {
    /// The text.
    pub text: String,
    /// Left of the line's box.
    pub x: i32,
    /// Top of the line's box (the baseline is `size`'s ascent below).
    pub y: i32,
    /// Line height in pixels.
    pub size: i32,
    /// Ink.
    pub colour: [u8; 3],
    /// Nothing is drawn outside this.
    pub clip: Rect,
    /// Part of a picture (an app icon's letter stands in for its artwork), not text a
    /// person reads: left out of [`Scene::texts`].
    pub artwork: bool,
}

/// A dimming this strong or stronger hides what is under it from `texts` (Spotlight's
/// 190; an alert's lighter dimming leaves the page readable, as on iOS).
const VEILED: u8 = 160;

/// Whether `a` lies wholly inside `b`.
fn inside(a: &Rect, b: &Rect) -> bool {
    a.x >= b.x && a.y >= b.y && a.x + a.w <= b.x + b.w && a.y + a.h <= b.y + b.h
}

/// A line of text as the screen shows it (`sim_state.texts`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShownText {
    /// The text as drawn (a truncated label ends in `…`).
    pub text: String,
    /// Its box in phone pixels: the line's advance width and height.
    pub rect: Rect,
}

/// One thing drawn, in phone pixels. A scene is a list of these over a background.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Paint {
    /// A filled rectangle.
    Fill(Rect, [u8; 3]),
    /// A filled rectangle with corners of this radius.
    Round(Rect, i32, [u8; 3]),
    /// The outline of a rounded rectangle: radius, stroke width.
    Outline(Rect, i32, i32, [u8; 3]),
    /// A filled circle.
    Disc {
        /// Centre x.
        x: i32,
        /// Centre y.
        y: i32,
        /// Radius.
        r: i32,
        /// Colour.
        colour: [u8; 3],
    },
    /// Darkens what is under the rectangle by this much (of 255).
    Dim(Rect, u8),
    /// A line of text.
    Text(TextRun),
}

impl Paint {
    /// The same, moved `dx` pixels right.
    fn shifted(&self, dx: i32) -> Paint {
        let m = |r: &Rect| Rect { x: r.x + dx, ..*r };
        match self {
            Paint::Fill(r, c) => Paint::Fill(m(r), *c),
            Paint::Round(r, k, c) => Paint::Round(m(r), *k, *c),
            Paint::Outline(r, k, s, c) => Paint::Outline(m(r), *k, *s, *c),
            Paint::Disc { x, y, r, colour } => Paint::Disc { x: x + dx, y: *y, r: *r, colour: *colour },
            Paint::Dim(r, a) => Paint::Dim(m(r), *a),
            Paint::Text(t) => Paint::Text(TextRun { x: t.x + dx, clip: m(&t.clip), ..t.clone() }),
        }
    }

    /// Feeds what this looks like to `h`: text without trailing white space (a trailing
    /// space or newline moves only the caret).
    fn hash_visible(&self, h: &mut impl Hasher) {
        match self {
            Paint::Text(t) => {
                6u8.hash(h);
                t.text.trim_end().hash(h);
                (t.x, t.y, t.size, t.colour, t.clip).hash(h);
            }
            other => other.hash(h),
        }
    }
}

/// What the screen shows at one moment: the elements as laid out, and what is drawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scene {
    /// Which screen is drawn (home, also under an app zooming; an app; Spotlight).
    pub screen: Screen,
    /// Elements, top-most last.
    pub elements: Vec<Element>,
    /// An app zooming in or out: this rectangle is drawn in the app's background.
    pub zoom: Option<Rect>,
    /// The demo's load spinner: where, and which of its 8 spokes is lit.
    pub spinner: Option<(Rect, u8)>,
    /// The text caret, while it is visible.
    pub caret: Option<Rect>,
    /// The demo's finished loads.
    pub loads: u32,
    /// What is drawn, in order, over the screen's background (under the zoom, the caret,
    /// the status bar and the pointer).
    pub paint: Vec<Paint>,
    /// Whether anything animates (every frame differs).
    pub animating: bool,
}

/// An app opening (zooming out of its icon) or closing (into it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Transition {
    opening: bool,
    icon: Rect,
    started_ms: u64,
}

/// A page sliding in (push) or out (pop) over the one it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Slide {
    forward: bool,
    started_ms: u64,
    /// What the other page drew when the slide began.
    old: Vec<Paint>,
}

/// A screen laid out.
struct Layout {
    elements: Vec<Element>,
    paint: Vec<Paint>,
    caret: Option<Rect>,
    focused: bool,
    title: Option<String>,
    animating: bool,
    spinner: Option<(Rect, u8)>,
    loads: u32,
}

/// The UI state machine: the home screen, Spotlight, alerts, navigation and transitions;
/// the apps behind [`App`].
#[derive(Debug)]
pub struct Ui {
    width: i32,
    height: i32,
    screen: Screen,
    /// One per icon, alive as long as the phone.
    apps: Vec<Box<dyn App>>,
    /// The app in front (on [`Screen::App`]).
    current: Option<usize>,
    /// Spotlight's query.
    query: String,
    alert: Option<Alert>,
    context_menu: Option<usize>,
    touches: VecDeque<Touch>,
    touch_seq: u64,
    /// The phone's clock, milliseconds since it started (set by [`Ui::tick`]).
    now_ms: u64,
    /// The app transition running, if any.
    transition: Option<Transition>,
    /// The navigation slide running, if any.
    slide: Option<Slide>,
    /// When the caret's blink cycle started (focus, typing).
    caret_since: u64,
}

impl Clone for Ui {
    fn clone(&self) -> Ui {
        Ui {
            width: self.width,
            height: self.height,
            screen: self.screen,
            apps: self.apps.iter().map(|a| a.clone_box()).collect(),
            current: self.current,
            query: self.query.clone(),
            alert: self.alert.clone(),
            context_menu: self.context_menu,
            touches: self.touches.clone(),
            touch_seq: self.touch_seq,
            now_ms: self.now_ms,
            transition: self.transition,
            slide: self.slide.clone(),
            caret_since: self.caret_since,
        }
    }
}

/// Home-screen labels (12 pt).
const LABEL_PX: i32 = 36;

impl Ui {
    /// A phone of `width`x`height` pixels on its home screen.
    pub fn new(width: u32, height: u32) -> Ui {
        Ui {
            width: i32::try_from(width).unwrap_or(1179),
            height: i32::try_from(height).unwrap_or(2556),
            screen: Screen::Home,
            apps: APP_NAMES.iter().map(|n| apps::make(n)).collect(),
            current: None,
            query: String::new(),
            alert: None,
            context_menu: None,
            touches: VecDeque::new(),
            touch_seq: 0,
            now_ms: 0,
            transition: None,
            slide: None,
            caret_since: 0,
        }
    }

    fn cx(&self, rest: bool) -> Cx {
        Cx { w: self.width, h: self.height, now: self.now_ms, rest }
    }

    /// Advances the phone's clock to `now_ms` (milliseconds since it started): animations
    /// that ended are finished. Called before every input and every rendered frame.
    pub fn tick(&mut self, now_ms: u64) {
        self.now_ms = self.now_ms.max(now_ms);
        let now = self.now_ms;
        if self.transition.is_some_and(|t| now >= t.started_ms + if t.opening { OPEN_MS } else { CLOSE_MS }) {
            self.transition = None;
        }
        if self.slide.as_ref().is_some_and(|s| now >= s.started_ms + PUSH_MS) {
            self.slide = None;
        }
        let cx = self.cx(false);
        for app in &mut self.apps {
            app.tick(&cx);
        }
    }

    /// The screen as drawn now (after [`Ui::tick`]).
    /// Every line of text the screen shows whole (not clipped, not artwork), top to bottom.
    pub fn texts(&self) -> Vec<ShownText> {
        let screen = Rect { x: 0, y: 0, w: self.width, h: self.height };
        let paint = self.scene().paint;
        let mut shown: Vec<ShownText> = paint
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p {
                Paint::Text(t) if !t.artwork && !t.text.trim().is_empty() => {
                    let text = t.text.trim_end().to_string();
                    let rect = Rect { x: t.x, y: t.y, w: width(&text, t.size), h: t.size };
                    // Under Spotlight's veil (iOS blurs what is behind it) nobody reads it.
                    let veiled = paint[i + 1..]
                        .iter()
                        .any(|q| matches!(q, Paint::Dim(d, a) if *a >= VEILED && inside(&rect, d)));
                    (inside(&rect, &t.clip) && inside(&rect, &screen) && !veiled).then_some(ShownText { text, rect })
                }
                _ => None,
            })
            .collect();
        shown.sort_by_key(|t| (t.rect.y, t.rect.x));
        shown
    }

    pub fn scene(&self) -> Scene {
        let now = self.now_ms;
        let mut zoom = None;
        let mut screen = self.screen;
        if let Some(t) = self.transition {
            let total = if t.opening { OPEN_MS } else { CLOSE_MS };
            let p = (now.saturating_sub(t.started_ms)).min(total);
            // Opening grows from the icon to the screen; closing shrinks back.
            let f = if t.opening { p } else { total - p };
            let lerp = |a: i32, b: i32| {
                a + i32::try_from(
                    (i64::from(b - a) * i64::try_from(f).unwrap_or(0)) / i64::try_from(total.max(1)).unwrap_or(1),
                )
                .unwrap_or(0)
            };
            zoom = Some(Rect {
                x: lerp(t.icon.x, 0),
                y: lerp(t.icon.y, 0),
                w: lerp(t.icon.w, self.width),
                h: lerp(t.icon.h, self.height),
            });
            // Both directions draw the home screen under the zoom.
            screen = Screen::Home;
        }
        let cx = self.cx(false);
        let mut l = self.layout(screen, &cx);
        let mut animating = l.animating || zoom.is_some();
        let mut caret = l.caret;
        if let (Some(s), Screen::App) = (&self.slide, screen) {
            animating = true;
            caret = None;
            #[allow(clippy::cast_precision_loss)] // milliseconds of an animation
            let t = (now.saturating_sub(s.started_ms)).min(PUSH_MS) as f64 / PUSH_MS as f64;
            let e = 1.0 - (1.0 - t) * (1.0 - t) * (1.0 - t);
            let w = f64::from(self.width);
            // Offsets are at most a screen wide.
            #[allow(clippy::cast_possible_truncation)]
            let off = |v: f64| v.round() as i32;
            let full = Rect { x: 0, y: 0, w: self.width, h: self.height };
            let (under, under_dx, over, over_dx) = if s.forward {
                (&s.old, off(-0.3 * w * e), &l.paint, off(w * (1.0 - e)))
            } else {
                (&l.paint, off(-0.3 * w * (1.0 - e)), &s.old, off(w * e))
            };
            let mut paint: Vec<Paint> = under.iter().map(|p| p.shifted(under_dx)).collect();
            paint.push(Paint::Fill(Rect { x: over_dx, ..full }, APP_BACKGROUND));
            paint.extend(over.iter().map(|p| p.shifted(over_dx)));
            l.paint = paint;
        }
        let blink_on = (now.saturating_sub(self.caret_since) / CARET_HALF_PERIOD_MS).is_multiple_of(2);
        Scene {
            screen,
            elements: l.elements,
            zoom,
            spinner: l.spinner,
            caret: caret.filter(|_| blink_on && self.alert.is_none()),
            loads: l.loads,
            paint: l.paint,
            animating,
        }
    }

    /// `screen` laid out at `cx`, with the alert and the accessory bar over it.
    fn layout(&self, screen: Screen, cx: &Cx) -> Layout {
        let mut l = Layout {
            elements: Vec::new(),
            paint: Vec::new(),
            caret: None,
            focused: false,
            title: None,
            animating: false,
            spinner: None,
            loads: 0,
        };
        match screen {
            Screen::Home => self.home(cx, &mut l, true),
            Screen::Spotlight => {
                self.home(cx, &mut l, false);
                let (e, p, caret) = spotlight::layout(cx, &self.query);
                l.elements = e;
                l.paint.extend(p);
                l.caret = Some(caret);
                l.focused = true;
            }
            Screen::App => {
                if let Some(app) = self.current.and_then(|i| self.apps.get(i)) {
                    let page = app.page(cx);
                    l.elements = page.elements;
                    l.paint = page.paint;
                    l.caret = page.caret;
                    l.focused = page.focused;
                    l.title = page.title;
                    l.animating = page.animating;
                    l.spinner = page.spinner;
                    l.loads = page.loads;
                }
            }
        }
        if l.focused {
            l.paint.extend(accessory_bar(cx));
        }
        if let Some(a) = &self.alert {
            // Under an alert only the alert takes touches: its elements are the screen's.
            let (e, p) = a.layout(cx);
            l.elements = e;
            l.paint.extend(p);
        }
        l
    }

    /// The home screen's icons and labels (`elements`: whether they are hit and listed).
    fn home(&self, cx: &Cx, l: &mut Layout, elements: bool) {
        let size = cx.font(LABEL_PX);
        for (i, name) in APP_NAMES.iter().enumerate() {
            let r = self.icon_rect(i);
            if elements {
                // As on iOS, the label under the icon opens the app too.
                let hit = Rect { h: r.h + cx.sy(16) + size, ..r };
                l.elements.push(labelled(el(format!("app{i}"), ElementKind::AppIcon, hit), name));
            }
            l.paint.push(Paint::Round(r, cx.sx(45), icon_colour(i)));
            let initial: String = name.chars().take(1).collect();
            l.paint.push(apps::artwork(text_centred(&initial, r, cx.font(110), colour::WHITE)));
            // iOS truncates labels that do not fit under the icon (about 12 characters).
            let room = cx.sx(250);
            let shown = text::truncate(name, apps::size_f(size), apps::size_f(room));
            let w = width(&shown, size);
            let (mid, y) = (r.x + r.w / 2, r.y + r.h + cx.sy(16));
            l.paint.push(text_at(
                &shown,
                mid - w / 2,
                y,
                size,
                colour::WHITE,
                Rect { x: mid - room / 2, y, w: room, h: size + cx.sy(10) },
            ));
        }
        if let Some(i) = self.context_menu.filter(|_| elements) {
            let r = cx.r(190, 900, 800, 600);
            l.elements.push(el(format!("menu_app{i}"), ElementKind::ContextMenu, r));
            l.paint.push(Paint::Round(r, cx.sx(40), [250, 250, 250]));
            for (k, item) in ["Edit Home Screen", "Share App", "Remove App"].iter().enumerate() {
                let row = cx.r(190, 900 + i32::try_from(k).unwrap_or(0) * 200, 800, 200);
                let ink = if k == 2 { colour::RED } else { colour::BLACK };
                l.paint.push(apps::text_in(item, row, cx.sx(50), cx.font(51), ink));
                if k > 0 {
                    l.paint.push(Paint::Fill(Rect { h: cx.sy(2).max(1), ..row }, colour::SEPARATOR));
                }
            }
        }
    }

    /// The rectangle of app icon `i` on the home screen.
    fn icon_rect(&self, i: usize) -> Rect {
        let (c, row) = (i32::try_from(i % 4).unwrap_or(0), i32::try_from(i / 4).unwrap_or(0));
        self.cx(true).r(90 + c * 270, 250 + row * 330, 200, 200)
    }

    /// The current screen.
    pub fn screen(&self) -> Screen {
        self.screen
    }

    /// Touches registered, oldest first.
    pub fn touches(&self) -> impl Iterator<Item = &Touch> {
        self.touches.iter()
    }

    /// Whether a text field or view of an app has focus.
    pub fn text_focused(&self) -> bool {
        self.screen == Screen::App && self.layout(Screen::App, &self.cx(true)).focused
    }

    /// Whether the hardware-keyboard accessory bar shows (a text element has focus).
    pub fn accessory_bar(&self) -> bool {
        self.layout(self.screen, &self.cx(true)).focused
    }

    /// The app in front, by name (`None` on the home screen and in Spotlight).
    pub fn app(&self) -> Option<String> {
        self.current.filter(|_| self.screen == Screen::App).and_then(|i| APP_NAMES.get(i)).map(|n| (*n).to_string())
    }

    /// The title of the page in front, if it shows one.
    pub fn title(&self) -> Option<String> {
        self.layout(self.screen, &self.cx(true)).title
    }

    /// The alert showing, if any.
    pub fn alert(&self) -> Option<Alert> {
        self.alert.clone()
    }

    /// A hash of what the screen shows once everything has come to rest, without the
    /// clock, the caret and the pointer: equal digests, equal pictures.
    pub fn digest(&self) -> u64 {
        let mut rest = self.clone();
        rest.tick(self.now_ms.saturating_add(REST_MS));
        let s = rest.scene();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        s.screen.hash(&mut h);
        for p in &s.paint {
            p.hash_visible(&mut h);
        }
        h.finish()
    }

    /// Every element on the current screen at rest, top-most last.
    pub fn elements(&self) -> Vec<Element> {
        self.layout(self.screen, &self.cx(true)).elements
    }

    fn hit(&self, x: i32, y: i32) -> Option<Element> {
        self.elements().into_iter().rev().find(|e| e.rect.contains(x, y))
    }

    /// Applies a finished touch.
    pub fn touch(&mut self, down: (i32, i32), up: (i32, i32), duration_ms: u64, at_ms: u64) {
        let moved = (up.0 - down.0).abs().max((up.1 - down.1).abs());
        let kind = if moved >= TAP_SLOP {
            TouchKind::Drag
        } else if duration_ms >= LONG_PRESS_MS {
            TouchKind::LongPress
        } else {
            TouchKind::Tap
        };
        let target = self.hit(down.0, down.1);
        let busy = self.transition.is_some() || self.slide.is_some();
        self.touch_seq += 1;
        self.touches.push_back(Touch {
            seq: self.touch_seq,
            kind,
            down,
            up,
            duration_ms,
            at_ms,
            target: target.as_ref().map(|e| e.id.clone()),
            ignored: busy,
        });
        while self.touches.len() > TOUCHES_KEPT {
            self.touches.pop_front();
        }
        if busy {
            // Like iOS, the screen takes no touches while an app opens or closes, or a
            // page slides.
            return;
        }
        self.caret_since = self.now_ms;
        match kind {
            TouchKind::Tap => self.tap(target),
            TouchKind::LongPress => {
                if self.screen == Screen::Home && self.alert.is_none() {
                    if let Some(e) = target.filter(|e| e.kind == ElementKind::AppIcon) {
                        self.context_menu = e.id.strip_prefix("app").and_then(|n| n.parse().ok());
                    }
                }
            }
            TouchKind::Drag => self.drag(down, up),
        }
    }

    fn tap(&mut self, target: Option<Element>) {
        if self.alert.is_some() {
            let button = target.as_ref().and_then(|e| e.id.strip_prefix("alert_button")).and_then(|n| n.parse().ok());
            if let Some(b) = button {
                self.answer(b);
            }
            // Elsewhere: the alert stays, nothing happens.
            return;
        }
        if self.context_menu.take().is_some() {
            // A tap anywhere dismisses the menu (the menu itself included).
            return;
        }
        match self.screen {
            Screen::Home => {
                if let Some(i) = target.and_then(|e| e.id.strip_prefix("app").and_then(|n| n.parse::<usize>().ok())) {
                    self.open(i);
                }
            }
            Screen::Spotlight => {
                if let Some(i) = target.filter(|e| e.kind == ElementKind::SearchResult).and_then(|e| e.value) {
                    self.open(usize::try_from(i).unwrap_or(0));
                }
            }
            Screen::App => {
                let cx = self.cx(true);
                let old = self.layout(Screen::App, &cx).paint;
                let effect = match self.current.and_then(|i| self.apps.get_mut(i)) {
                    Some(app) => app.tap(&cx, target.as_ref()),
                    None => Effect::None,
                };
                self.apply(effect, old);
            }
        }
    }

    /// The alert's button `b` was pressed: the alert goes and its app hears the answer.
    fn answer(&mut self, b: usize) {
        if let Some(a) = self.alert.take() {
            if let Some(app) = self.current.and_then(|i| self.apps.get_mut(i)) {
                app.answer(&a.id, b);
            }
        }
    }

    fn apply(&mut self, effect: Effect, old: Vec<Paint>) {
        match effect {
            Effect::None => {}
            Effect::Home => self.go_home(),
            Effect::Push | Effect::Pop => {
                self.slide = Some(Slide { forward: effect == Effect::Push, started_ms: self.now_ms, old });
            }
            Effect::Alert(a) => self.alert = Some(a),
        }
    }

    /// Opens app `i` (zooming out of its icon).
    fn open(&mut self, i: usize) {
        if i >= self.apps.len() {
            return;
        }
        self.transition = Some(Transition { opening: true, icon: self.icon_rect(i), started_ms: self.now_ms });
        self.current = Some(i);
        self.screen = Screen::App;
        self.query.clear();
        self.context_menu = None;
    }

    fn drag(&mut self, down: (i32, i32), up: (i32, i32)) {
        // Swipe up from the bottom edge: the home gesture.
        if down.1 >= self.height - self.cx(true).sy(60) && up.1 < down.1 - self.cx(true).sy(300) {
            self.go_home();
            return;
        }
        if self.alert.is_some() || self.screen != Screen::App {
            return;
        }
        let cx = self.cx(true);
        let old = self.layout(Screen::App, &cx).paint;
        let effect = match self.current.and_then(|i| self.apps.get_mut(i)) {
            Some(app) => app.drag(&cx, down, up),
            None => Effect::None,
        };
        self.apply(effect, old);
    }

    /// Cmd+H and the home gesture.
    pub fn go_home(&mut self) {
        if self.screen == Screen::App {
            let icon = self.icon_rect(self.current.unwrap_or(0));
            self.transition = Some(Transition { opening: false, icon, started_ms: self.now_ms });
            if let Some(app) = self.current.and_then(|i| self.apps.get_mut(i)) {
                app.leave();
            }
        }
        self.slide = None;
        self.alert = None;
        self.screen = Screen::Home;
        self.query.clear();
        self.context_menu = None;
    }

    /// Cmd+[: back a page, or out of the app at its first page.
    pub fn back(&mut self) {
        if self.alert.is_some() || self.slide.is_some() {
            return;
        }
        match self.screen {
            Screen::Home => {}
            Screen::Spotlight => self.go_home(),
            Screen::App => {
                let cx = self.cx(true);
                let old = self.layout(Screen::App, &cx).paint;
                let popped = self.current.and_then(|i| self.apps.get_mut(i)).is_some_and(|a| a.back());
                if popped {
                    self.apply(Effect::Pop, old);
                } else {
                    self.go_home();
                }
            }
        }
    }

    /// Escape: cancels an alert, dismisses Spotlight.
    pub fn escape(&mut self) {
        if let Some(a) = &self.alert {
            if let Some(b) = a.buttons.iter().position(|b| b == "Cancel") {
                self.answer(b);
            }
            return;
        }
        if self.screen == Screen::Spotlight {
            self.go_home();
        }
    }

    /// Cmd+Space: Spotlight with the search field focused.
    pub fn spotlight(&mut self) {
        if self.screen == Screen::App {
            if let Some(app) = self.current.and_then(|i| self.apps.get_mut(i)) {
                app.leave();
            }
        }
        self.screen = Screen::Spotlight;
        self.current = None;
        self.transition = None;
        self.slide = None;
        self.alert = None;
        self.query.clear();
        self.caret_since = self.now_ms;
        self.context_menu = None;
    }

    /// A key for the focused field, or Spotlight's.
    fn key(&mut self, key: Key) {
        if self.alert.is_some() {
            return;
        }
        // iOS keeps the caret solid while typing.
        self.caret_since = self.now_ms;
        match self.screen {
            Screen::Home => {}
            Screen::Spotlight => match key {
                Key::Char(c) => self.query.push(c),
                Key::Backspace => {
                    self.query.pop();
                }
                // Return launches the top hit; without one nothing happens.
                Key::Enter => {
                    if let Some(&i) = spotlight::matches(&self.query).first() {
                        self.open(i);
                    }
                }
                Key::SelectAll => {}
            },
            Screen::App => {
                let cx = self.cx(true);
                let old = self.layout(Screen::App, &cx).paint;
                let effect = match self.current.and_then(|i| self.apps.get_mut(i)) {
                    Some(app) => app.key(&cx, key),
                    None => Effect::None,
                };
                self.apply(effect, old);
            }
        }
    }

    /// A typed character, when a field has focus.
    pub fn type_char(&mut self, c: char) {
        self.key(Key::Char(c));
    }

    /// Backspace.
    pub fn backspace(&mut self) {
        self.key(Key::Backspace);
    }

    /// Return: ends editing in a single-line field, a newline in a text view; in
    /// Spotlight, opens the top hit.
    pub fn enter(&mut self) {
        self.key(Key::Enter);
    }

    /// Cmd+A: selects all of the focused text view.
    pub fn select_all(&mut self) {
        self.key(Key::SelectAll);
    }
}

/// An app's background (iOS's grouped background), also the colour of an app zooming.
pub const APP_BACKGROUND: [u8; 3] = [242, 242, 247];

/// The bar iOS shows at the bottom with a hardware keyboard while a text element has
/// focus: a small pill with a keyboard symbol, bottom right.
fn accessory_bar(cx: &Cx) -> Vec<Paint> {
    let bar = cx.r(800, 2390, 330, 110);
    let key = cx.r(860, 2418, 110, 54);
    let mut out = vec![
        Paint::Round(bar, bar.h / 2, [250, 250, 252]),
        Paint::Outline(bar, bar.h / 2, cx.sx(3).max(1), colour::SEPARATOR),
        Paint::Outline(key, cx.sx(8), cx.sx(4).max(1), [60, 60, 67]),
    ];
    for row in 0..2 {
        for k in 0..4 {
            let d = cx.r(872 + k * 24, 428 + 2000 + row * 18, 12, 10);
            out.push(Paint::Fill(d, [60, 60, 67]));
        }
    }
    // A chevron-like "v" to the right: hide the bar.
    out.push(apps::artwork(apps::text_in("v", cx.r(1010, 2390, 80, 110), 0, cx.font(51), [60, 60, 67])));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn centre(ui: &Ui, id: &str) -> (i32, i32) {
        let e = ui.elements().into_iter().find(|e| e.id == id).unwrap_or_else(|| panic!("no {id}"));
        (e.rect.x + e.rect.w / 2, e.rect.y + e.rect.h / 2)
    }

    fn element(ui: &Ui, id: &str) -> Element {
        ui.elements().into_iter().find(|e| e.id == id).unwrap_or_else(|| panic!("no {id}"))
    }

    /// Taps `id` at `t` and lets everything come to rest; returns the new time.
    fn tap(ui: &mut Ui, id: &str, t: u64) -> u64 {
        let p = centre(ui, id);
        ui.touch(p, p, 80, t);
        let t = t + 2000;
        ui.tick(t);
        t
    }

    /// A phone with app `name` open and at rest, and the time.
    fn open(name: &str) -> (Ui, u64) {
        let mut ui = Ui::new(1179, 2556);
        let i = APP_NAMES.iter().position(|n| *n == name).unwrap();
        let t = tap(&mut ui, &format!("app{i}"), 0);
        assert_eq!(ui.app().as_deref(), Some(name));
        (ui, t)
    }

    #[test]
    fn tap_icon_opens_app_and_toggles_flip() {
        let mut ui = Ui::new(1179, 2556);
        let p = centre(&ui, "app0");
        ui.touch(p, p, 80, 0);
        assert_eq!(ui.screen(), Screen::App);
        let t = centre(&ui, "toggle1");
        ui.touch(t, t, 80, 100);
        assert!(ui.touches().last().unwrap().ignored, "no touches while the app opens");
        assert_eq!(ui.elements().into_iter().find(|e| e.id == "toggle1").unwrap().on, Some(false));
        ui.tick(OPEN_MS);
        ui.touch(t, t, 80, OPEN_MS);
        let toggle = ui.elements().into_iter().find(|e| e.id == "toggle1").unwrap();
        assert_eq!(toggle.on, Some(true));
        assert_eq!(ui.touches().last().unwrap().target.as_deref(), Some("toggle1"));
    }

    #[test]
    fn drag_in_list_scrolls_and_long_press_opens_menu() {
        let mut ui = Ui::new(1179, 2556);
        let p = centre(&ui, "app0");
        ui.touch(p, p, 1600, 0);
        assert!(ui.elements().iter().any(|e| e.kind == ElementKind::ContextMenu));
        ui.touch(p, p, 80, 0); // dismiss
        ui.touch(p, p, 80, 0); // open
        ui.tick(OPEN_MS);
        ui.touch((500, 2200), (500, 1400), 700, 0);
        let list = ui.elements().into_iter().find(|e| e.id == "list").unwrap();
        assert_eq!(list.scroll_offset, Some(800));
        assert!(!ui.elements().iter().any(|e| e.id == "row0"), "row0 scrolled out");
        // The list glides there: drawn part of the way at first, eased out, then at rest.
        let drawn = |ui: &Ui| ui.scene().elements.iter().find(|e| e.id == "list").unwrap().scroll_offset.unwrap();
        assert!(ui.scene().animating && drawn(&ui) == 0);
        ui.tick(OPEN_MS + SCROLL_MS / 2);
        assert!((400..800).contains(&drawn(&ui)), "eased out: more than half way at half time");
        ui.tick(OPEN_MS + SCROLL_MS);
        assert_eq!(drawn(&ui), 800);
        assert!(!ui.scene().animating);
    }

    #[test]
    fn the_load_button_spins_first_the_dead_one_does_nothing_and_the_caret_blinks() {
        let mut ui = Ui::new(1179, 2556);
        let p = centre(&ui, "app0");
        ui.touch(p, p, 80, 0);
        ui.tick(OPEN_MS);
        let field = centre(&ui, "text_field");
        ui.touch(field, field, 80, OPEN_MS);
        let caret_at = |ui: &mut Ui, t: u64| {
            ui.tick(t);
            ui.scene().caret.is_some()
        };
        assert!(caret_at(&mut ui, OPEN_MS + 10));
        assert!(!caret_at(&mut ui, OPEN_MS + CARET_HALF_PERIOD_MS + 10), "blinked off");
        assert!(caret_at(&mut ui, OPEN_MS + 2 * CARET_HALF_PERIOD_MS + 10), "and on");
        ui.tick(2000);
        let before = ui.scene();
        let digest = ui.digest();
        let dead = centre(&ui, "dead_button");
        ui.touch(dead, dead, 80, 2000);
        let others = |s: &Scene| s.elements.iter().filter(|e| e.id != "dead_button").cloned().collect::<Vec<_>>();
        assert_eq!(others(&ui.scene()), others(&before), "the dead control changes nothing on screen");
        assert_eq!(ui.digest(), digest, "nor in the digest");
        assert_eq!(ui.touches().last().unwrap().target.as_deref(), Some("dead_button"));
        assert!(ui.text_focused(), "not even the field's focus");
        let load = centre(&ui, "button2");
        ui.touch(load, load, 80, 2000);
        ui.tick(2000 + LOAD_MS / 2);
        assert!(ui.scene().spinner.is_some() && ui.scene().loads == 0);
        ui.tick(2000 + LOAD_MS);
        assert!(ui.scene().spinner.is_none());
        assert_eq!(ui.scene().loads, 1);
    }

    #[test]
    fn every_app_opens_to_its_own_picture_with_its_name() {
        let mut seen = Vec::new();
        for (i, name) in APP_NAMES.iter().enumerate() {
            let mut ui = Ui::new(1179, 2556);
            tap(&mut ui, &format!("app{i}"), 0);
            assert_eq!(ui.app().as_deref(), Some(*name));
            let d = ui.digest();
            assert!(!seen.contains(&d), "{name} looks like another app");
            seen.push(d);
        }
        let ui = Ui::new(1179, 2556);
        assert_eq!(element(&ui, "app17").label.as_deref(), Some("Reality Composer"));
        assert_eq!(ui.app(), None);
    }

    #[test]
    fn spotlight_lists_prefix_matches_first_and_return_opens_the_top_hit() {
        assert!(spotlight::matches("").is_empty());
        let hits: Vec<&str> = spotlight::matches("SE").iter().map(|&i| APP_NAMES[i]).collect();
        assert_eq!(hits[0], "Settings", "prefix first: {hits:?}");
        assert!(hits.contains(&"Reality Composer"), "then contains: {hits:?}");
        let mut ui = Ui::new(1179, 2556);
        ui.spotlight();
        assert_eq!(ui.screen(), Screen::Spotlight);
        assert!(ui.accessory_bar(), "the search field has focus");
        let empty = ui.digest();
        for c in "zzq".chars() {
            ui.type_char(c);
        }
        assert!(ui.elements().iter().any(|e| e.id == "no_results" && e.label.as_deref() == Some("No Results")));
        ui.enter();
        assert_eq!(ui.screen(), Screen::Spotlight, "nothing to open");
        for _ in 0..3 {
            ui.backspace();
        }
        assert_eq!(ui.digest(), empty);
        for c in "sett".chars() {
            ui.type_char(c);
        }
        assert_eq!(element(&ui, "result0").label.as_deref(), Some("Settings"));
        ui.enter();
        assert_eq!(ui.app().as_deref(), Some("Settings"));
        assert!(ui.scene().zoom.is_some(), "it opens with the transition");
        ui.tick(OPEN_MS);
        assert_eq!(ui.title().as_deref(), Some("Settings"));
        // A tap on a result opens it; Escape dismisses.
        ui.spotlight();
        ui.type_char('n');
        let t = tap(&mut ui, "result0", OPEN_MS + 10);
        assert_eq!(ui.app().as_deref(), Some("Notes"));
        ui.spotlight();
        ui.escape();
        assert_eq!(ui.screen(), Screen::Home);
        ui.tick(t);
    }

    #[test]
    fn texts_are_what_a_person_reads_as_drawn_and_whole() {
        let (mut ui, t) = open("Settings");
        let texts: Vec<String> = ui.texts().into_iter().map(|t| t.text).collect();
        assert!(texts.contains(&"Airplane Mode".to_string()) && texts.contains(&"Settings".to_string()), "{texts:?}");
        assert!(!texts.iter().any(|t| t == ">"), "a row's chevron is a symbol, not text: {texts:?}");
        let p = centre(&ui, "setting_general");
        ui.touch(p, p, 80, t);
        ui.tick(t + PUSH_MS);
        let texts: Vec<String> = ui.texts().into_iter().map(|t| t.text).collect();
        assert!(texts.contains(&"Settings".to_string()) && !texts.iter().any(|t| t.starts_with('<')), "{texts:?}");
        ui.go_home();
        ui.tick(t + PUSH_MS + 2000);
        let home: Vec<String> = ui.texts().into_iter().map(|t| t.text).collect();
        assert!(home.iter().any(|t| t.ends_with('…')), "long labels as drawn, truncated: {home:?}");
        assert!(!home.iter().any(|t| t == "D"), "icon letters are artwork: {home:?}");
        let sorted = ui.texts().windows(2).all(|w| (w[0].rect.y, w[0].rect.x) <= (w[1].rect.y, w[1].rect.x));
        assert!(sorted, "top to bottom");
    }

    #[test]
    fn settings_pushes_a_page_and_pops_back_and_reset_asks_first() {
        let (mut ui, t) = open("Settings");
        let root = ui.digest();
        let t = tap(&mut ui, "switch_airplane_mode", t);
        assert_eq!(element(&ui, "switch_airplane_mode").on, Some(true));
        assert_ne!(ui.digest(), root);
        let on = ui.digest();
        let p = centre(&ui, "setting_general");
        ui.touch(p, p, 80, t);
        assert_eq!(ui.title().as_deref(), Some("General"));
        assert_eq!(element(&ui, "back").label.as_deref(), Some("< Settings"));
        assert!(ui.scene().animating, "the push slides");
        ui.tick(t + PUSH_MS / 2);
        assert!(ui.touches().last().is_some());
        ui.tick(t + PUSH_MS);
        assert!(!ui.scene().animating);
        let t = t + PUSH_MS;
        // Reset asks in an alert; a tap outside it does nothing.
        let t = tap(&mut ui, "setting_reset", t);
        let alert = ui.alert().unwrap();
        assert_eq!(alert.buttons, ["Cancel", "Reset"]);
        let asked = ui.digest();
        ui.touch((100, 300), (100, 300), 80, t);
        assert_eq!(ui.touches().last().unwrap().target, None);
        assert!(ui.alert().is_some());
        assert_eq!(ui.digest(), asked, "a tap outside the alert changes nothing");
        let t = tap(&mut ui, "alert_button1", t);
        assert!(ui.alert().is_none());
        ui.back();
        assert!(ui.scene().animating, "the pop slides");
        ui.tick(t + PUSH_MS);
        assert_eq!(ui.title().as_deref(), Some("Settings"));
        assert_eq!(element(&ui, "switch_airplane_mode").on, Some(false), "reset");
        assert_eq!(ui.digest(), root);
        assert_ne!(root, on);
        // The back button pops too.
        let t = tap(&mut ui, "setting_wifi", t + PUSH_MS);
        assert_eq!(ui.title().as_deref(), Some("Wi-Fi"));
        tap(&mut ui, "back", t);
        assert_eq!(ui.title().as_deref(), Some("Settings"));
    }

    #[test]
    fn notes_wraps_takes_newlines_and_replaces_a_selection() {
        let (mut ui, t) = open("Notes");
        let t = tap(&mut ui, "note", t);
        assert!(ui.text_focused() && ui.accessory_bar());
        let focused = ui.digest();
        tap(&mut ui, "note", t);
        assert_eq!(ui.digest(), focused, "focusing the focused view changes nothing");
        for c in "first line".chars() {
            ui.type_char(c);
        }
        ui.enter();
        let before_space = ui.digest();
        ui.type_char(' ');
        assert_eq!(ui.digest(), before_space, "a trailing space moves only the caret");
        ui.backspace();
        for c in "second".chars() {
            ui.type_char(c);
        }
        assert_eq!(element(&ui, "note").text.as_deref(), Some("first line\nsecond"));
        let lines = ui.scene().paint.iter().filter(|p| matches!(p, Paint::Text(t) if t.text == "second")).count();
        assert_eq!(lines, 1, "the newline starts a line");
        let typed = ui.digest();
        ui.select_all();
        assert_eq!(element(&ui, "note").selection, Some((0, 17)));
        assert_ne!(ui.digest(), typed, "the selection is drawn");
        ui.type_char('x');
        assert_eq!(element(&ui, "note").text.as_deref(), Some("x"));
        ui.select_all();
        ui.backspace();
        assert_eq!(element(&ui, "note").text.as_deref(), Some(""));
        // Long text wraps.
        for _ in 0..60 {
            for c in "word ".chars() {
                ui.type_char(c);
            }
        }
        let runs =
            ui.scene().paint.iter().filter(|p| matches!(p, Paint::Text(t) if t.text.starts_with("word"))).count();
        assert!(runs > 3, "wrapped into {runs} lines");
    }

    #[test]
    fn each_control_changes_its_state_and_the_picture_and_the_dead_one_neither() {
        let (mut ui, mut t) = open("Controls");
        type Check = (&'static str, &'static str, fn(&Element) -> bool);
        let checks: [Check; 8] = [
            ("checkbox", "checkbox", |e| e.on == Some(true)),
            ("radio2", "radio2", |e| e.selected == Some(true)),
            ("stepper_plus", "stepper_value", |e| e.value == Some(1)),
            ("stepper_minus", "stepper_value", |e| e.value == Some(0)),
            ("like", "like", |e| e.on == Some(true)),
            ("badge_button", "badge", |e| e.value == Some(1)),
            ("segment1", "segment1", |e| e.selected == Some(true)),
            ("segment0", "segment0", |e| e.selected == Some(true)),
        ];
        for (target, shows, ok) in checks {
            let d = ui.digest();
            t = tap(&mut ui, target, t);
            assert!(ok(&element(&ui, shows)), "{target}: {:?}", element(&ui, shows));
            assert_ne!(ui.digest(), d, "{target} changed nothing visible");
        }
        let d = ui.digest();
        t = tap(&mut ui, "stepper_minus", t);
        assert_eq!(ui.digest(), d, "the stepper stops at 0");
        t = tap(&mut ui, "dead_checkbox", t);
        assert_eq!(element(&ui, "dead_checkbox").taps, Some(1));
        assert_eq!(ui.digest(), d, "the disabled checkbox changes nothing visible");
        ui.touch((600, 2300), (600, 2300), 80, t);
        assert_eq!(ui.digest(), d, "nor does the empty background");
    }

    #[test]
    fn contacts_scroll_and_open_a_card() {
        let (mut ui, t) = open("Contacts");
        assert!(element(&ui, "section_A").label.as_deref() == Some("A"));
        let first = element(&ui, "contact0").label.unwrap();
        ui.touch((500, 2200), (500, 600), 700, t);
        ui.tick(t + SCROLL_MS);
        assert!(!ui.elements().iter().any(|e| e.id == "contact0"), "scrolled away");
        for _ in 0..20 {
            ui.touch((500, 2200), (500, 600), 700, t);
        }
        assert!(ui.elements().iter().any(|e| e.id == "contact119"), "the end is reachable");
        let t = tap(&mut ui, "contact119", t + SCROLL_MS);
        let name = ui.title().unwrap();
        assert!(name.starts_with('Z'), "{name}");
        ui.back();
        ui.tick(t + PUSH_MS);
        assert_eq!(ui.title().as_deref(), Some("Contacts"));
        assert!(first.starts_with('A'));
    }

    #[test]
    fn text_the_font_cannot_draw_is_tofu_and_said_so() {
        let (mut ui, t) = open("Notes");
        tap(&mut ui, "note", t);
        for c in "ok \u{65e5}\u{672c}".chars() {
            ui.type_char(c);
        }
        let note = element(&ui, "note");
        assert_eq!(note.missing_glyphs, Some(vec!['\u{65e5}', '\u{672c}']));
        assert_eq!(element(&ui, "title").missing_glyphs, None);
    }

    #[test]
    fn focus_shows_the_accessory_bar_and_leaves_with_return() {
        let (mut ui, t) = open("Demo");
        let d = ui.digest();
        tap(&mut ui, "text_field", t);
        assert!(ui.accessory_bar());
        assert_ne!(ui.digest(), d, "focus is visible beyond the caret");
        ui.enter();
        assert!(!ui.accessory_bar());
        assert_eq!(ui.digest(), d);
    }
}
