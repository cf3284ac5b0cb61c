//! The virtual iPhone's user interface: screens, elements, and what touches and keys do.
//!
//! Geometry is in native phone pixels (portrait 1179x2556 by default). Layouts scale with
//! the configured screen size so other phone sizes work too.

use std::collections::VecDeque;

use serde::Serialize;

use super::text;

/// A rectangle in phone pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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
    fn contains(&self, x: i32, y: i32) -> bool {
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Screen {
    /// App icons.
    Home,
    /// The demo app: buttons, toggles, a text field, a scrollable list.
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
    /// Toggle state, for toggles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on: Option<bool>,
    /// Times tapped, for buttons and rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub taps: Option<u32>,
    /// Text, for the text field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The words drawn on it, for app icons (under the icon), buttons and rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Characters of its text or label the font cannot draw: they show as tofu (a box),
    /// as on iOS. Absent when every character draws.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing_glyphs: Option<Vec<char>>,
    /// Whether it has keyboard focus, for the text field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub focused: Option<bool>,
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

const APP_ICONS: usize = 24;
/// The apps' names, in icon order. Every icon opens the demo app for now; app0 is "Demo",
/// the name Spotlight opens.
const APP_NAMES: [&str; APP_ICONS] = [
    "Demo",
    "Calendar",
    "Photos",
    "Camera",
    "Mail",
    "Clock",
    "Maps",
    "Weather",
    "Notes",
    "Reminders",
    "Stocks",
    "Books",
    "App Store",
    "Podcasts",
    "TV",
    "Health",
    "Home",
    "Wallet",
    "Settings",
    "Files",
    "Music",
    "Contacts",
    "Calculator",
    "Compass",
];
/// The buttons' labels: the load button shows a spinner before its result.
const BUTTON_LABELS: [&str; BUTTONS] = ["Button 1", "Button 2", "Load"];
const BUTTONS: usize = 3;
const LIST_ROWS: i32 = 60;
/// Movement below this many pixels still counts as a tap.
const TAP_SLOP: i32 = 24;
/// iOS needs this long for a long press.
const LONG_PRESS_MS: u64 = 1500;
/// Touches kept for `sim_state`.
const TOUCHES_KEPT: usize = 32;

/// The UI state machine.
#[derive(Debug, Clone)]
pub struct Ui {
    width: i32,
    height: i32,
    screen: Screen,
    toggles: [bool; BUTTONS],
    button_taps: [u32; BUTTONS],
    row_taps: Vec<u32>,
    text: String,
    focused: bool,
    scroll: i32,
    context_menu: Option<usize>,
    opened_app: Option<usize>,
    touches: VecDeque<Touch>,
    touch_seq: u64,
    dead_taps: u32,
    /// The phone's clock, milliseconds since it started (set by [`Ui::tick`]).
    now_ms: u64,
    /// The screen transition running, if any.
    transition: Option<Transition>,
    /// The list's scroll animation: from, to, start.
    scroll_anim: Option<(i32, i32, u64)>,
    /// When the load button started loading, while it does.
    loading_since: Option<u64>,
    /// Loads finished (shown as badges on the load button).
    loads: u32,
    /// When the caret's blink cycle started (focus, typing).
    caret_since: u64,
}

/// An app opening (zooming out of its icon) or closing (into it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Transition {
    opening: bool,
    icon: Rect,
    started_ms: u64,
}

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
/// The load button: it shows a spinner before its result.
const LOAD_BUTTON: usize = 2;

/// A line of text as the screen draws it, in phone pixels.
#[derive(Debug, Clone, PartialEq, Eq)]
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
}

/// Font sizes and margins in pixels of a 1179x2556 screen (iOS points at 3x).
/// Body text (17 pt).
const BODY_PX: i32 = 51;
/// Home-screen icon labels (12 pt).
const LABEL_PX: i32 = 36;
/// A field's text starts this far in from its left edge.
const FIELD_PAD: i32 = 30;

/// What the screen shows at one moment: the elements as drawn (the list at its animated
/// offset) and the pieces that move on their own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scene {
    /// Which screen's elements are drawn.
    pub screen: Screen,
    /// Elements as drawn, top-most last.
    pub elements: Vec<Element>,
    /// An app zooming in or out: this rectangle is drawn in the app's background.
    pub zoom: Option<Rect>,
    /// The load button's spinner: where, and which of its 8 spokes is lit.
    pub spinner: Option<(Rect, u8)>,
    /// The text caret, while it is visible.
    pub caret: Option<Rect>,
    /// Loads finished, drawn as badges on the load button.
    pub loads: u32,
    /// Text to draw, in order, after the elements.
    pub texts: Vec<TextRun>,
    /// Whether anything animates (every frame differs).
    pub animating: bool,
}

impl Ui {
    /// A phone of `width`x`height` pixels on its home screen.
    pub fn new(width: u32, height: u32) -> Ui {
        Ui {
            width: i32::try_from(width).unwrap_or(1179),
            height: i32::try_from(height).unwrap_or(2556),
            screen: Screen::Home,
            toggles: [false; BUTTONS],
            button_taps: [0; BUTTONS],
            row_taps: vec![0; usize::try_from(LIST_ROWS).unwrap_or(0)],
            text: String::new(),
            focused: false,
            scroll: 0,
            context_menu: None,
            opened_app: None,
            touches: VecDeque::new(),
            touch_seq: 0,
            dead_taps: 0,
            now_ms: 0,
            transition: None,
            scroll_anim: None,
            loading_since: None,
            loads: 0,
            caret_since: 0,
        }
    }

    /// Advances the phone's clock to `now_ms` (milliseconds since it started): animations
    /// that ended are finished. Called before every input and every rendered frame.
    pub fn tick(&mut self, now_ms: u64) {
        self.now_ms = self.now_ms.max(now_ms);
        let now = self.now_ms;
        if self.transition.is_some_and(|t| now >= t.started_ms + if t.opening { OPEN_MS } else { CLOSE_MS }) {
            self.transition = None;
        }
        if self.scroll_anim.is_some_and(|(_, _, at)| now >= at + SCROLL_MS) {
            self.scroll_anim = None;
        }
        if self.loading_since.is_some_and(|at| now >= at + LOAD_MS) {
            self.loading_since = None;
            self.loads += 1;
        }
    }

    /// The screen as drawn now (after [`Ui::tick`]).
    pub fn scene(&self) -> Scene {
        let now = self.now_ms;
        let mut animating = false;
        let mut zoom = None;
        let mut screen = self.screen;
        if let Some(t) = self.transition {
            animating = true;
            let total = if t.opening { OPEN_MS } else { CLOSE_MS };
            let p = (now.saturating_sub(t.started_ms)).min(total);
            // Opening grows from the icon to the screen; closing shrinks back.
            let f = if t.opening { p } else { total - p };
            let full = Rect { x: 0, y: 0, w: self.width, h: self.height };
            let lerp = |a: i32, b: i32| {
                a + i32::try_from(
                    (i64::from(b - a) * i64::try_from(f).unwrap_or(0)) / i64::try_from(total.max(1)).unwrap_or(1),
                )
                .unwrap_or(0)
            };
            zoom = Some(Rect {
                x: lerp(t.icon.x, full.x),
                y: lerp(t.icon.y, full.y),
                w: lerp(t.icon.w, full.w),
                h: lerp(t.icon.h, full.h),
            });
            // Both directions draw the home screen under the zoom.
            screen = Screen::Home;
        }
        animating |= self.scroll_anim.is_some();
        let scroll = self.drawn_scroll();
        let elements = self.elements_of(screen, scroll);
        let spinner = self.loading_since.and_then(|at| {
            animating = true;
            let button = elements.iter().find(|e| e.id == format!("button{LOAD_BUTTON}"))?;
            let r = button.rect;
            let spoke = u8::try_from((now.saturating_sub(at) / 60) % 8).unwrap_or(0);
            Some((Rect { x: r.x + r.w - r.h, y: r.y, w: r.h, h: r.h }, spoke))
        });
        let texts = self.texts_of(&elements, scroll);
        let caret = elements
            .iter()
            .find(|e| e.focused == Some(true))
            .filter(|_| (now.saturating_sub(self.caret_since) / CARET_HALF_PERIOD_MS).is_multiple_of(2))
            .map(|e| {
                // Right after the last glyph.
                let (x, _) = self.field_text_at(e);
                let end = x + px(text::width(e.text.as_deref().unwrap_or(""), self.font_px(BODY_PX)));
                let margin = self.sy(30);
                Rect { x: end, y: e.rect.y + margin, w: self.sx(6).max(1), h: e.rect.h - 2 * margin }
            });
        Scene { screen, elements, zoom, spinner, caret, loads: self.loads, texts, animating }
    }

    /// A font size designed for a 1179x2556 screen, scaled (at least a pixel).
    fn font_px(&self, v: i32) -> f32 {
        #[allow(clippy::cast_precision_loss)] // a font size in pixels
        let px = self.sx(v).max(1) as f32;
        px
    }

    /// Where a text field's text starts (left, top of its line): scrolled left when it is
    /// wider than the field, so its end and the caret stay in view, as iOS does.
    fn field_text_at(&self, field: &Element) -> (i32, i32) {
        let size = self.font_px(BODY_PX);
        let r = field.rect;
        let pad = self.sx(FIELD_PAD);
        let room = r.w - 2 * pad - self.sx(6).max(1);
        let w = px(text::width(field.text.as_deref().unwrap_or(""), size));
        let x = if w > room { r.x + pad + room - w } else { r.x + pad };
        (x, r.y + (r.h - px(size)) / 2)
    }

    /// The text drawn on `elements` (the list at `scroll`).
    fn texts_of(&self, elements: &[Element], scroll: i32) -> Vec<TextRun> {
        let mut out = Vec::new();
        for e in elements {
            let r = e.rect;
            match e.kind {
                ElementKind::TextField => {
                    let (x, y) = self.field_text_at(e);
                    let pad = self.sx(FIELD_PAD);
                    out.push(TextRun {
                        text: e.text.clone().unwrap_or_default(),
                        x,
                        y,
                        size: self.sx(BODY_PX).max(1),
                        colour: [0, 0, 0],
                        clip: Rect { x: r.x + pad, y: r.y, w: (r.w - 2 * pad).max(0), h: r.h },
                    });
                }
                ElementKind::AppIcon => {
                    let Some(label) = &e.label else { continue };
                    let size = self.sx(LABEL_PX).max(1);
                    let room = self.sx(260);
                    let shown = text::truncate(label, self.font_px(LABEL_PX), room as f32);
                    let w = px(text::width(&shown, self.font_px(LABEL_PX)));
                    let (cx, y) = (r.x + r.w / 2, r.y + r.h + self.sy(16));
                    out.push(TextRun {
                        text: shown,
                        x: cx - w / 2,
                        y,
                        size,
                        colour: [255, 255, 255],
                        clip: Rect { x: cx - room / 2, y, w: room, h: size + self.sy(10) },
                    });
                }
                ElementKind::Button | ElementKind::Back => {
                    let Some(label) = &e.label else { continue };
                    let size = self.sx(45).max(1);
                    let w = px(text::width(label, size as f32));
                    // Buttons with tap dots (along their bottom), badges and a spinner (at
                    // their right): top left. The others: centred.
                    let (x, y) = if e.taps.is_some() && e.id != "dead_button" {
                        (r.x + self.sx(30), r.y + self.sy(20))
                    } else {
                        (r.x + (r.w - w) / 2, r.y + (r.h - size) / 2)
                    };
                    out.push(TextRun { text: label.clone(), x, y, size, colour: [255, 255, 255], clip: r });
                }
                ElementKind::ListRow => {
                    // Placed from the row's unclipped top, clipped to what is visible of it.
                    let (Some(label), Some(index)) =
                        (&e.label, e.id.strip_prefix("row").and_then(|n| n.parse::<i32>().ok()))
                    else {
                        continue;
                    };
                    let top = self.list_viewport().y + index * self.row_height() - scroll;
                    let size = self.sx(BODY_PX).max(1);
                    out.push(TextRun {
                        text: label.clone(),
                        x: r.x + self.sx(40),
                        y: top + (self.row_height() - 4 - size) / 2,
                        size,
                        colour: [0, 0, 0],
                        clip: r,
                    });
                }
                ElementKind::Toggle | ElementKind::List | ElementKind::ContextMenu => {}
            }
        }
        out
    }

    /// Scales a coordinate designed for a 1179x2556 screen.
    fn sx(&self, v: i32) -> i32 {
        v * self.width / 1179
    }

    fn sy(&self, v: i32) -> i32 {
        v * self.height / 2556
    }

    fn r(&self, x: i32, y: i32, w: i32, h: i32) -> Rect {
        Rect { x: self.sx(x), y: self.sy(y), w: self.sx(w), h: self.sy(h) }
    }

    fn list_viewport(&self) -> Rect {
        self.r(90, 1100, 1000, 1300)
    }

    fn row_height(&self) -> i32 {
        self.sy(130).max(1)
    }

    fn max_scroll(&self) -> i32 {
        (LIST_ROWS * self.row_height() - self.list_viewport().h).max(0)
    }

    /// The current screen.
    pub fn screen(&self) -> Screen {
        self.screen
    }

    /// Touches registered, oldest first.
    pub fn touches(&self) -> impl Iterator<Item = &Touch> {
        self.touches.iter()
    }

    /// Whether the text field has focus.
    pub fn text_focused(&self) -> bool {
        self.focused && self.screen == Screen::App
    }

    /// Every element on the current screen, top-most last.
    pub fn elements(&self) -> Vec<Element> {
        self.elements_of(self.screen, self.scroll)
    }

    /// The elements of `screen` with the list scrolled to `scroll`.
    fn elements_of(&self, screen: Screen, scroll: i32) -> Vec<Element> {
        let el = |id: String, kind, rect| Element {
            id,
            kind,
            rect,
            on: None,
            taps: None,
            text: None,
            label: None,
            missing_glyphs: None,
            focused: None,
            scroll_offset: None,
        };
        let labelled = |mut e: Element, label: String| {
            let missing = text::missing_glyphs(&label);
            e.missing_glyphs = (!missing.is_empty()).then_some(missing);
            e.label = Some(label);
            e
        };
        let typed = |mut e: Element, typed: &str| {
            let missing = text::missing_glyphs(typed);
            e.missing_glyphs = (!missing.is_empty()).then_some(missing);
            e.text = Some(typed.to_string());
            e
        };
        let mut out = Vec::new();
        match screen {
            Screen::Home => {
                for i in 0..APP_ICONS {
                    let icon = el(format!("app{i}"), ElementKind::AppIcon, self.icon_rect(i));
                    out.push(labelled(icon, APP_NAMES[i].to_string()));
                }
            }
            Screen::App => {
                out.push(labelled(el("back".into(), ElementKind::Back, self.r(30, 120, 200, 120)), "Back".into()));
                // Like a disabled "Edit" button: it takes the tap and nothing happens.
                let mut dead = el("dead_button".into(), ElementKind::Button, self.r(850, 120, 300, 120));
                dead.taps = Some(self.dead_taps);
                out.push(labelled(dead, "Edit".into()));
                for i in 0..BUTTONS {
                    let y = 300 + i32::try_from(i).unwrap_or(0) * 180;
                    let mut b = el(format!("button{i}"), ElementKind::Button, self.r(90, y, 480, 140));
                    b.taps = Some(self.button_taps[i]);
                    out.push(labelled(b, BUTTON_LABELS[i].to_string()));
                    let mut t = el(format!("toggle{i}"), ElementKind::Toggle, self.r(800, y, 280, 140));
                    t.on = Some(self.toggles[i]);
                    out.push(t);
                }
                let mut f = el("text_field".into(), ElementKind::TextField, self.r(90, 860, 1000, 140));
                f.focused = Some(self.focused);
                out.push(typed(f, &self.text));
                let viewport = self.list_viewport();
                let mut list = el("list".into(), ElementKind::List, viewport);
                list.scroll_offset = Some(scroll);
                out.push(list);
                let rh = self.row_height();
                for i in 0..LIST_ROWS {
                    let row = Rect { x: viewport.x, y: viewport.y + i * rh - scroll, w: viewport.w, h: rh - 4 };
                    if let Some(visible) = row.intersect(&viewport) {
                        let mut e = el(format!("row{i}"), ElementKind::ListRow, visible);
                        e.taps = Some(self.row_taps[usize::try_from(i).unwrap_or(0)]);
                        out.push(labelled(e, format!("Item {}", i + 1)));
                    }
                }
            }
            Screen::Spotlight => {
                let mut f = el("search_field".into(), ElementKind::TextField, self.r(90, 200, 1000, 140));
                f.focused = Some(self.focused);
                out.push(typed(f, &self.text));
            }
        }
        if let Some(i) = self.context_menu {
            out.push(el(format!("menu_app{i}"), ElementKind::ContextMenu, self.r(190, 900, 800, 600)));
        }
        out
    }

    fn hit(&self, x: i32, y: i32) -> Option<Element> {
        self.elements().into_iter().rev().find(|e| e.rect.contains(x, y))
    }

    /// Applies a finished touch; returns whether anything changed.
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
        self.touch_seq += 1;
        self.touches.push_back(Touch {
            seq: self.touch_seq,
            kind,
            down,
            up,
            duration_ms,
            at_ms,
            target: target.as_ref().map(|e| e.id.clone()),
            ignored: self.transition.is_some(),
        });
        while self.touches.len() > TOUCHES_KEPT {
            self.touches.pop_front();
        }
        if self.transition.is_some() {
            // Like iOS, the screen takes no touches while an app opens or closes.
            return;
        }
        match kind {
            TouchKind::Tap => self.tap(target),
            TouchKind::LongPress => {
                if let Some(e) = target.filter(|e| e.kind == ElementKind::AppIcon) {
                    self.context_menu = e.id.strip_prefix("app").and_then(|n| n.parse().ok());
                }
            }
            TouchKind::Drag => self.drag(down, up),
        }
    }

    fn tap(&mut self, target: Option<Element>) {
        if self.context_menu.take().is_some() {
            // A tap anywhere dismisses the menu (the menu itself included).
            return;
        }
        let Some(e) = target else {
            self.focused = false;
            return;
        };
        let index = |prefix: &str| e.id.strip_prefix(prefix).and_then(|n| n.parse::<usize>().ok());
        match e.kind {
            ElementKind::AppIcon => {
                self.opened_app = index("app");
                self.transition = Some(Transition { opening: true, icon: e.rect, started_ms: self.now_ms });
                self.screen = Screen::App;
                self.focused = false;
            }
            ElementKind::Back => self.go_home(),
            ElementKind::Button if e.id == "dead_button" => {
                // It takes the tap and nothing happens, not even a change of focus.
                self.dead_taps += 1;
                return;
            }
            ElementKind::Button => {
                let i = index("button");
                if let Some(c) = i.and_then(|i| self.button_taps.get_mut(i)) {
                    *c += 1;
                }
                if i == Some(LOAD_BUTTON) && self.loading_since.is_none() {
                    self.loading_since = Some(self.now_ms);
                }
            }
            ElementKind::Toggle => {
                if let Some(t) = index("toggle").and_then(|i| self.toggles.get_mut(i)) {
                    *t = !*t;
                }
            }
            ElementKind::TextField => {
                self.focused = true;
                self.caret_since = self.now_ms;
            }
            ElementKind::ListRow => {
                if let Some(c) = index("row").and_then(|i| self.row_taps.get_mut(i)) {
                    *c += 1;
                }
            }
            ElementKind::List | ElementKind::ContextMenu => {}
        }
        if e.kind != ElementKind::TextField {
            self.focused = false;
        }
    }

    fn drag(&mut self, down: (i32, i32), up: (i32, i32)) {
        // Swipe up from the bottom edge: the home gesture.
        if down.1 >= self.height - self.sy(60) && up.1 < down.1 - self.sy(300) {
            self.go_home();
            return;
        }
        if self.screen == Screen::App && self.list_viewport().contains(down.0, down.1) {
            let to = (self.scroll + (down.1 - up.1)).clamp(0, self.max_scroll());
            if to != self.scroll {
                self.scroll_anim = Some((self.drawn_scroll(), to, self.now_ms));
                self.scroll = to;
            }
        }
    }

    /// Where the list is drawn now (mid-animation, or at rest).
    fn drawn_scroll(&self) -> i32 {
        match self.scroll_anim {
            Some((from, to, at)) => {
                // Ease out: fast first, slow at the end, like a flick coming to rest.
                #[allow(clippy::cast_precision_loss)] // milliseconds of an animation
                let t = (self.now_ms.saturating_sub(at)).min(SCROLL_MS) as f64 / SCROLL_MS as f64;
                let eased = 1.0 - (1.0 - t) * (1.0 - t);
                from + round_px(f64::from(to - from) * eased)
            }
            None => self.scroll,
        }
    }

    /// The rectangle of app icon `i` on the home screen.
    fn icon_rect(&self, i: usize) -> Rect {
        let (c, row) = (i32::try_from(i % 4).unwrap_or(0), i32::try_from(i / 4).unwrap_or(0));
        self.r(90 + c * 270, 250 + row * 330, 200, 200)
    }

    /// Cmd+H and the home gesture.
    pub fn go_home(&mut self) {
        if self.screen == Screen::App {
            let icon = self.icon_rect(self.opened_app.unwrap_or(0));
            self.transition = Some(Transition { opening: false, icon, started_ms: self.now_ms });
        }
        self.scroll_anim = None;
        self.loading_since = None;
        self.screen = Screen::Home;
        self.focused = false;
        self.context_menu = None;
    }

    /// Cmd+[: back out of the app.
    pub fn back(&mut self) {
        if self.screen != Screen::Home {
            self.go_home();
        }
    }

    /// Cmd+Space: Spotlight with the search field focused.
    pub fn spotlight(&mut self) {
        self.screen = Screen::Spotlight;
        self.transition = None;
        self.text.clear();
        self.focused = true;
        self.caret_since = self.now_ms;
        self.context_menu = None;
    }

    /// A typed character, when a field has focus.
    pub fn type_char(&mut self, c: char) {
        if self.focused {
            self.text.push(c);
            // iOS keeps the caret solid while typing.
            self.caret_since = self.now_ms;
        }
    }

    /// Backspace.
    pub fn backspace(&mut self) {
        if self.focused {
            self.text.pop();
            self.caret_since = self.now_ms;
        }
    }

    /// Return: ends editing; in Spotlight, opens the app whose name was typed (the sim has
    /// one app, "Demo").
    pub fn enter(&mut self) {
        self.focused = false;
        if self.screen == Screen::Spotlight && self.text.trim().eq_ignore_ascii_case("demo") {
            self.transition = Some(Transition { opening: true, icon: self.icon_rect(0), started_ms: self.now_ms });
            self.screen = Screen::App;
            self.opened_app = Some(0);
            self.text.clear();
        }
    }
}

/// A text width or size in whole pixels.
fn px(v: f32) -> i32 {
    // Text on a screen of at most 8192 pixels, far inside i32.
    #[allow(clippy::cast_possible_truncation)]
    let r = v.round() as i32;
    r
}

fn round_px(v: f64) -> i32 {
    // Scroll distances are bounded by the list's height, far inside i32.
    #[allow(clippy::cast_possible_truncation)]
    let r = v.round() as i32;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn centre(ui: &Ui, id: &str) -> (i32, i32) {
        let e = ui.elements().into_iter().find(|e| e.id == id).unwrap();
        (e.rect.x + e.rect.w / 2, e.rect.y + e.rect.h / 2)
    }

    #[test]
    fn tap_icon_opens_app_and_toggles_flip() {
        let mut ui = Ui::new(1179, 2556);
        let p = centre(&ui, "app5");
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
        let dead = centre(&ui, "dead_button");
        ui.touch(dead, dead, 80, 2000);
        let others = |s: &Scene| s.elements.iter().filter(|e| e.id != "dead_button").cloned().collect::<Vec<_>>();
        assert_eq!(others(&ui.scene()), others(&before), "the dead control changes nothing on screen");
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
}
