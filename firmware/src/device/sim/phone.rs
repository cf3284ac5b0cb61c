//! The phone model: state driven only by HID report bytes.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::alert::Alert;
use super::ui::{Element, Scene, Screen, Touch, Ui};
use crate::device::hid::{
    BoxFuture, HidError, HidInterface, HidReport, HidSink, HostState, Keymap, Layout, MOD_GUI, POINTER_MAX,
};
use crate::sync::LockPlain;

/// Shape and behaviour of the virtual phone and of the capture frame around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    /// Capture frame width (the HDMI mode), e.g. 1920.
    pub capture_width: u32,
    /// Capture frame height, e.g. 1080.
    pub capture_height: u32,
    /// Phone screen width in native pixels (portrait).
    pub phone_width: u32,
    /// Phone screen height in native pixels (portrait).
    pub phone_height: u32,
    /// Frames per second delivered by the virtual capture.
    pub fps: u32,
    /// How long the pointer takes to glide to a new absolute position.
    pub glide_ms: u64,
    /// The keyboard layout the phone's soft keyboard is set to.
    pub layout: Layout,
    /// Pointer mapping error to simulate, in per mille of the screen size (30 = 3 %).
    pub pointer_scale_error_permille: i32,
    /// Pointer mapping offset to simulate, in phone pixels.
    pub pointer_offset_px: (i32, i32),
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            capture_width: 1920,
            capture_height: 1080,
            phone_width: 1179,
            phone_height: 2556,
            fps: 30,
            glide_ms: 100,
            layout: Layout::Us,
            pointer_scale_error_permille: 0,
            pointer_offset_px: (0, 0),
        }
    }
}

impl SimConfig {
    /// Largest phone or capture edge the sim models, in pixels (8K is 7680).
    pub const MAX_EDGE: u32 = 8192;

    /// Whether the sizes are ones the sim can model: phone edges in 1..=[`Self::MAX_EDGE`],
    /// capture edges at most that.
    pub fn check(&self) -> Result<(), String> {
        let edge = |name: &str, v: u32, min: u32| {
            if (min..=Self::MAX_EDGE).contains(&v) {
                Ok(())
            } else {
                Err(format!("sim_phone.{name} = {v} is outside {min}..={}", Self::MAX_EDGE))
            }
        };
        edge("phone_width", self.phone_width, 1)?;
        edge("phone_height", self.phone_height, 1)?;
        edge("capture_width", self.capture_width, 0)?;
        edge("capture_height", self.capture_height, 0)
    }

    /// The same shape with sizes clamped into what [`Self::check`] accepts: the phone's
    /// layout arithmetic is `i32` and its pointer mapping needs a non-empty screen.
    pub fn sanitized(self) -> SimConfig {
        SimConfig {
            phone_width: self.phone_width.clamp(1, Self::MAX_EDGE),
            phone_height: self.phone_height.clamp(1, Self::MAX_EDGE),
            capture_width: self.capture_width.min(Self::MAX_EDGE),
            capture_height: self.capture_height.min(Self::MAX_EDGE),
            ..self
        }
    }
}

/// Counters and the visible pointer, for the renderer and `status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PhoneSnapshot {
    /// Reports consumed, all interfaces.
    pub reports: u64,
    /// Reports whose bytes did not decode for their interface (must stay 0).
    pub malformed_reports: u64,
    /// Where the pointer is drawn now, in phone pixels.
    pub pointer: (i32, i32),
    /// Pointer buttons currently held.
    pub buttons: u8,
    /// Keyboard modifiers currently held.
    pub modifiers: u8,
    /// Keyboard usages currently held.
    pub keys_held: usize,
    /// Consumer usage currently held.
    pub consumer_usage: u16,
    /// Bumps whenever the UI changes.
    pub version: u64,
}

/// Everything a test may check, as `sim_state` returns it.
#[derive(Debug, Clone, Serialize)]
pub struct SimState {
    /// Current screen.
    pub screen: Screen,
    /// Phone screen size in pixels.
    pub screen_size: (u32, u32),
    /// Elements on screen.
    pub elements: Vec<Element>,
    /// Recent touches, oldest first.
    pub touches: Vec<Touch>,
    /// Whether a text field has keyboard focus.
    pub text_focused: bool,
    /// Pointer position and held input.
    pub input: PhoneSnapshot,
    /// Volume level 0..=16.
    pub volume: u8,
    /// The phone's keyboard layout.
    pub layout: Layout,
    /// Whether something moves by itself (an app opening or closing: touches are ignored
    /// meanwhile, a list gliding, a spinner).
    pub animating: bool,
    /// The app in front, by name (one of [`super::APP_NAMES`]); `None` on the home screen
    /// and in Spotlight.
    pub app: Option<String>,
    /// The title of the page in front, if it shows one.
    pub title: Option<String>,
    /// The alert showing, if any: only its buttons take taps.
    pub alert: Option<Alert>,
    /// Whether the hardware-keyboard accessory bar shows (a text element has focus).
    pub accessory_bar: bool,
    /// A hash of what the screen shows once at rest (elements, text, badges, focus and the
    /// accessory bar, the alert, the app), without the clock, the caret and the pointer:
    /// two states look the same at rest exactly when their digests are equal. Invisible
    /// counters (taps on a dead control) are not in it.
    pub scene_digest: u64,
    /// Every line of text the screen shows whole, as drawn (truncated labels end in `…`),
    /// with its box, top to bottom; the status-bar clock and icon artwork aside. What a
    /// reading of the screen should find.
    pub texts: Vec<super::ui::ShownText>,
}

#[derive(Debug)]
struct Glide {
    from: (f64, f64),
    to: (f64, f64),
    started: Instant,
}

#[derive(Debug)]
struct PhoneState {
    started: Instant,
    ui: Ui,
    glide: Glide,
    buttons: u8,
    down: Option<((i32, i32), Instant)>,
    keys: [u8; 6],
    modifiers: u8,
    consumer: u16,
    volume: u8,
    reports: u64,
    malformed: u64,
    version: u64,
}

/// The virtual iPhone. Clones share one phone.
#[derive(Debug, Clone)]
pub struct SimPhone {
    config: SimConfig,
    generation: Arc<std::sync::atomic::AtomicU32>,
    keymap: Arc<Keymap>,
    state: Arc<Mutex<PhoneState>>,
}

impl SimPhone {
    /// A phone showing its home screen, pointer in the middle. Sizes outside what the sim
    /// models are clamped ([`SimConfig::sanitized`]); [`SimPhone::config`] says what it took.
    pub fn new(config: SimConfig) -> Self {
        let config = config.sanitized();
        // On the screen even when it is one pixel wide (0.5 would round to 1, off it).
        let half = |v: u32| (f64::from(v) / 2.0).min(f64::from(v) - 1.0);
        let mid = (half(config.phone_width), half(config.phone_height));
        let state = PhoneState {
            started: Instant::now(),
            ui: Ui::new(config.phone_width, config.phone_height),
            glide: Glide { from: mid, to: mid, started: Instant::now() },
            buttons: 0,
            down: None,
            keys: [0; 6],
            modifiers: 0,
            consumer: 0,
            volume: 8,
            reports: 0,
            malformed: 0,
            version: 0,
        };
        SimPhone {
            config,
            generation: Arc::new(std::sync::atomic::AtomicU32::new(1)),
            keymap: Arc::new(Keymap::new(config.layout)),
            state: Arc::new(Mutex::new(state)),
        }
    }

    /// The phone's configuration.
    pub fn config(&self) -> SimConfig {
        self.config
    }

    /// The video generation the virtual capture reports.
    pub fn generation(&self) -> u32 {
        self.generation.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Simulates what a cable replug or a resolution change does to capture: the frame
    /// generation bumps, which invalidates observations.
    pub fn replug(&self) {
        self.generation.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The HID sink feeding this phone.
    pub fn hid(&self) -> SimHid {
        SimHid { phone: self.clone() }
    }

    /// The frame source rendering this phone.
    pub fn display(&self) -> super::SimDisplay {
        super::SimDisplay::new(self.clone())
    }

    fn lock(&self) -> MutexGuard<'_, PhoneState> {
        // A poisoned lock means a panic while holding it; the state is plain data and stays
        // usable, so recover it rather than propagate the panic into the daemon.
        self.state.lock_plain()
    }

    /// Counters and the visible pointer now.
    pub fn snapshot(&self) -> PhoneSnapshot {
        let st = self.lock();
        self.snapshot_of(&st, Instant::now())
    }

    fn snapshot_of(&self, st: &PhoneState, now: Instant) -> PhoneSnapshot {
        let p = self.pointer_at(st, now);
        PhoneSnapshot {
            reports: st.reports,
            malformed_reports: st.malformed,
            pointer: (round(p.0), round(p.1)),
            buttons: st.buttons,
            modifiers: st.modifiers,
            keys_held: st.keys.iter().filter(|&&k| k != 0).count(),
            consumer_usage: st.consumer,
            version: st.version,
        }
    }

    /// The full state for `sim_state`.
    pub fn state(&self) -> SimState {
        let now = Instant::now();
        let st = self.lock_at(now);
        SimState {
            animating: st.ui.scene().animating,
            screen: st.ui.screen(),
            screen_size: (self.config.phone_width, self.config.phone_height),
            elements: st.ui.elements(),
            touches: st.ui.touches().cloned().collect(),
            text_focused: st.ui.text_focused(),
            input: self.snapshot_of(&st, now),
            volume: st.volume,
            layout: self.config.layout,
            app: st.ui.app(),
            title: st.ui.title(),
            alert: st.ui.alert(),
            accessory_bar: st.ui.accessory_bar(),
            scene_digest: st.ui.digest(),
            texts: st.ui.texts(),
        }
    }

    /// Whether something on the screen is moving by itself now (an app opening or closing,
    /// a list gliding, a spinner).
    pub fn animating(&self) -> bool {
        self.lock_at(Instant::now()).ui.scene().animating
    }

    /// The scene and pointer, for rendering (animations advanced to now).
    pub(super) fn render_state(&self) -> (Scene, PhoneSnapshot) {
        let now = Instant::now();
        let st = self.lock_at(now);
        (st.ui.scene(), self.snapshot_of(&st, now))
    }

    /// The state with its animations advanced to `now`.
    fn lock_at(&self, now: Instant) -> MutexGuard<'_, PhoneState> {
        let mut st = self.lock();
        let ms = millis_since(st.started, now);
        st.ui.tick(ms);
        st
    }

    fn pointer_at(&self, st: &PhoneState, now: Instant) -> (f64, f64) {
        let g = &st.glide;
        let glide = self.config.glide_ms.max(1) as f64;
        let t = (now.saturating_duration_since(g.started).as_secs_f64() * 1000.0 / glide).min(1.0);
        (g.from.0 + (g.to.0 - g.from.0) * t, g.from.1 + (g.to.1 - g.from.1) * t)
    }

    /// Where an absolute HID position puts the pointer, including the simulated error.
    fn map(&self, x: u16, y: u16) -> (f64, f64) {
        let k = 1.0 + f64::from(self.config.pointer_scale_error_permille) / 1000.0;
        let full = f64::from(POINTER_MAX) + 1.0;
        let px =
            f64::from(x) / full * f64::from(self.config.phone_width) * k + f64::from(self.config.pointer_offset_px.0);
        let py =
            f64::from(y) / full * f64::from(self.config.phone_height) * k + f64::from(self.config.pointer_offset_px.1);
        let clamp = |v: f64, max: u32| v.clamp(0.0, f64::from(max) - 1.0);
        (clamp(px, self.config.phone_width), clamp(py, self.config.phone_height))
    }

    /// Consumes raw report bytes exactly as the gadget would deliver them.
    pub fn consume(&self, interface: HidInterface, bytes: &[u8]) {
        let now = Instant::now();
        let mut guard = self.lock();
        let st = &mut *guard;
        st.ui.tick(millis_since(st.started, now));
        st.reports += 1;
        let Some(report) = HidReport::decode(interface, bytes) else {
            st.malformed += 1;
            return;
        };
        match report {
            HidReport::Pointer(p) => self.pointer(st, now, self.map(p.x(), p.y()), p.buttons(), true),
            HidReport::Mouse(m) => {
                let cur = self.pointer_at(st, now);
                let max = |extent: u32| f64::from(extent) - 1.0;
                let target = (
                    (cur.0 + accelerated(m.dx) * MOUSE_PX_PER_COUNT).clamp(0.0, max(self.config.phone_width)),
                    (cur.1 + accelerated(m.dy) * MOUSE_PX_PER_COUNT).clamp(0.0, max(self.config.phone_height)),
                );
                self.pointer(st, now, target, m.buttons, false);
            }
            HidReport::Keyboard(k) => {
                let pressed: Vec<u8> = k.keys.iter().copied().filter(|u| *u != 0 && !st.keys.contains(u)).collect();
                st.keys = k.keys;
                st.modifiers = k.modifiers;
                for usage in pressed {
                    self.key(st, usage, k.modifiers);
                }
            }
            HidReport::Consumer(c) => {
                if c.usage != st.consumer {
                    match c.usage {
                        0xE9 => st.volume = (st.volume + 1).min(16),
                        0xEA => st.volume = st.volume.saturating_sub(1),
                        _ => {}
                    }
                    st.version += 1;
                }
                st.consumer = c.usage;
            }
        }
    }

    fn pointer(&self, st: &mut PhoneState, now: Instant, target: (f64, f64), buttons: u8, glides: bool) {
        let cur = self.pointer_at(st, now);
        let was_down = st.buttons & 1 != 0;
        let is_down = buttons & 1 != 0;
        if was_down || !glides {
            // While touching, the touch point follows the finger directly.
            st.glide = Glide { from: target, to: target, started: now };
        } else if target != st.glide.to {
            // Up: the pointer glides from where it is drawn now.
            st.glide = Glide { from: cur, to: target, started: now };
        }
        let at = self.pointer_at(st, now);
        let at = (round(at.0), round(at.1));
        match (was_down, is_down) {
            (false, true) => st.down = Some((at, now)),
            (true, false) => {
                if let Some((down, since)) = st.down.take() {
                    let ms = u64::try_from(now.saturating_duration_since(since).as_millis()).unwrap_or(u64::MAX);
                    let at_ms = millis_since(st.started, now);
                    st.ui.touch(down, at, ms, at_ms);
                    st.version += 1;
                }
            }
            _ => {}
        }
        st.buttons = buttons;
    }

    fn key(&self, st: &mut PhoneState, usage: u8, modifiers: u8) {
        st.version += 1;
        if modifiers & MOD_GUI != 0 {
            match usage {
                0x0B => st.ui.go_home(),
                0x2F => st.ui.back(),
                0x2C => st.ui.spotlight(),
                0x04 => st.ui.select_all(),
                _ => {}
            }
            return;
        }
        match usage {
            0x2A => st.ui.backspace(),
            0x28 => st.ui.enter(),
            0x29 => st.ui.escape(),
            _ => {
                if let Some(c) = self.keymap.char_for(usage, modifiers) {
                    st.ui.type_char(c);
                }
            }
        }
    }
}

/// Phone pixels per relative count at base gain (one iOS point on a 3x screen).
const MOUSE_PX_PER_COUNT: f64 = 3.0;

/// iOS-like pointer acceleration: deltas of up to 2 counts per report move at base gain;
/// faster motion gains quadratically, up to 6x.
fn accelerated(delta: i8) -> f64 {
    let v = f64::from(delta).abs();
    let gain = if v <= 2.0 { 1.0 } else { (1.0 + ((v - 2.0) / 12.0).powi(2)).min(6.0) };
    f64::from(delta) * gain
}

/// Milliseconds from `start` to `now` (0 when `now` is earlier).
fn millis_since(start: Instant, now: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(start).as_millis()).unwrap_or(u64::MAX)
}

fn round(v: f64) -> i32 {
    // Callers pass pixel positions clamped to the screen, far inside i32's range.
    #[allow(clippy::cast_possible_truncation)]
    let r = v.round() as i32;
    r
}

/// The [`HidSink`] that feeds report bytes into a [`SimPhone`].
#[derive(Debug, Clone)]
pub struct SimHid {
    phone: SimPhone,
}

impl HidSink for SimHid {
    fn backend(&self) -> &'static str {
        "sim"
    }

    fn write<'a>(&'a mut self, report: &'a HidReport) -> BoxFuture<'a, Result<(), HidError>> {
        Box::pin(async move {
            let bytes = report.encode();
            self.phone.consume(report.interface(), bytes.as_bytes());
            Ok(())
        })
    }

    fn host_state(&self) -> HostState {
        HostState::Configured
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::device::hid::{KeyboardReport, PointerReport};

    fn ptr(b: u8, x: u16, y: u16) -> Vec<u8> {
        HidReport::Pointer(PointerReport::new(b, x, y, 0)).encode().as_bytes().to_vec()
    }

    fn hid_of(px: i32, extent: u32) -> u16 {
        u16::try_from((i64::from(px) * 32768 + 16384) / i64::from(extent)).unwrap()
    }

    #[test]
    fn degenerate_and_huge_screens_are_clamped_not_panics() {
        // The sim_hid fuzz target found a 10^9-pixel screen overflowing the UI's i32 layout and
        // a 1-pixel one starting the pointer off screen (0.5 rounds to 1). A 0-pixel screen
        // panicked in f64::clamp (max < min) on the first pointer report.
        for (w, h) in [(0, 0), (1_027_423_718, 1_027_423_549), (u32::MAX, 1)] {
            let phone = SimPhone::new(SimConfig { phone_width: w, phone_height: h, ..SimConfig::default() });
            let (x, y) = phone.snapshot().pointer;
            let c = phone.config();
            assert!(i64::from(x) < i64::from(c.phone_width) && i64::from(y) < i64::from(c.phone_height));
            phone.consume(HidInterface::Pointer, &ptr(1, 32767, 32767));
            phone.consume(HidInterface::Pointer, &ptr(0, 32767, 32767));
            phone.consume(HidInterface::Mouse, &[0, 127, 127, 0]);
            let c = phone.config();
            assert!((1..=SimConfig::MAX_EDGE).contains(&c.phone_width) && c.phone_height >= 1);
            let (x, y) = phone.snapshot().pointer;
            assert!(
                x >= 0 && y >= 0 && i64::from(x) < i64::from(c.phone_width) && i64::from(y) < i64::from(c.phone_height)
            );
            assert!(SimConfig { phone_width: w, phone_height: h, ..SimConfig::default() }.check().is_err());
        }
        assert!(SimConfig::default().check().is_ok());
    }

    #[test]
    fn pressing_before_the_glide_ends_lands_at_the_old_spot() {
        let phone = SimPhone::new(SimConfig { glide_ms: 200, ..SimConfig::default() });
        let (x, y) = (hid_of(100, 1179), hid_of(100, 2556));
        phone.consume(HidInterface::Pointer, &ptr(0, x, y));
        phone.consume(HidInterface::Pointer, &ptr(1, x, y));
        phone.consume(HidInterface::Pointer, &ptr(0, x, y));
        let early = phone.state().touches.last().unwrap().down;
        assert!(early.0 > 400, "landed near the middle, not at (100,100): {early:?}");
        std::thread::sleep(Duration::from_millis(250));
        phone.consume(HidInterface::Pointer, &ptr(1, x, y));
        phone.consume(HidInterface::Pointer, &ptr(0, x, y));
        let settled = phone.state().touches.last().unwrap().down;
        assert!((settled.0 - 100).abs() <= 1 && (settled.1 - 100).abs() <= 1, "{settled:?}");
    }

    #[test]
    fn relative_motion_is_accelerated_and_stops_at_the_edges() {
        let phone = SimPhone::new(SimConfig::default());
        let mouse = |dx: i8, dy: i8| HidReport::Mouse(crate::device::hid::MouseReport { buttons: 0, dx, dy, wheel: 0 });
        let start = phone.snapshot().pointer;
        for _ in 0..10 {
            phone.consume(HidInterface::Mouse, mouse(2, 0).encode().as_bytes());
        }
        assert_eq!(phone.snapshot().pointer.0 - start.0, 60, "base gain: 20 counts x 3 px");
        let before = phone.snapshot().pointer.0;
        phone.consume(HidInterface::Mouse, mouse(20, 0).encode().as_bytes());
        assert!(phone.snapshot().pointer.0 - before > 60, "20 counts at once move further than 20 slow ones");
        for _ in 0..40 {
            phone.consume(HidInterface::Mouse, mouse(-127, -127).encode().as_bytes());
        }
        assert_eq!(phone.snapshot().pointer, (0, 0), "homed into the corner");
    }

    #[test]
    fn keys_type_into_a_focused_field_and_cmd_h_goes_home() {
        let phone = SimPhone::new(SimConfig { glide_ms: 1, layout: Layout::De, ..SimConfig::default() });
        let tap = |px: i32, py: i32| {
            let (x, y) = (hid_of(px, 1179), hid_of(py, 2556));
            phone.consume(HidInterface::Pointer, &ptr(0, x, y));
            std::thread::sleep(Duration::from_millis(5));
            phone.consume(HidInterface::Pointer, &ptr(1, x, y));
            phone.consume(HidInterface::Pointer, &ptr(0, x, y));
        };
        tap(190, 350); // app0
                       // The app opens over 400 ms and takes no touches meanwhile, like iOS.
        let deadline = Instant::now() + Duration::from_secs(10);
        while phone.animating() {
            assert!(Instant::now() < deadline, "the app never finished opening");
            std::thread::sleep(Duration::from_millis(10));
        }
        tap(590, 930); // text field
        let kb = |m: u8, u: u8| KeyboardReport { modifiers: m, keys: [u, 0, 0, 0, 0, 0] };
        for k in [kb(0, 0x1D), kb(0, 0), kb(0x02, 0x1D), kb(0, 0)] {
            phone.consume(HidInterface::Keyboard, HidReport::Keyboard(k).encode().as_bytes());
        }
        let field = phone.state().elements.into_iter().find(|e| e.id == "text_field").unwrap();
        assert_eq!(field.text.as_deref(), Some("yY"), "0x1D is y on a German layout");
        for k in [kb(MOD_GUI, 0x0B), kb(0, 0)] {
            phone.consume(HidInterface::Keyboard, HidReport::Keyboard(k).encode().as_bytes());
        }
        assert_eq!(phone.state().screen, Screen::Home);
        phone.consume(HidInterface::Pointer, &[1, 2, 3]);
        assert_eq!(phone.snapshot().malformed_reports, 1);
    }
}
