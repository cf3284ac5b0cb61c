//! Parameters of the observation and action methods.

use serde::{Deserialize, Serialize};

use super::text_params::{TextMatch, TextQuery};

/// Largest `max_edge` a screenshot may ask for.
pub const MAX_EDGE_LIMIT: u32 = 4096;
/// Default `max_edge` of a screenshot.
pub const DEFAULT_MAX_EDGE: u32 = 1568;
/// Longest wait for a newer frame.
pub const MAX_TIMEOUT_MS: u64 = 5000;
/// Longest `type_text` text, in bytes.
pub const MAX_TEXT_BYTES: usize = 16 * 1024;
/// Most points in a drag path.
pub const MAX_PATH_POINTS: usize = 128;

/// A rectangle in the coordinates of a full-resolution observation of the phone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Region {
    /// Left.
    pub x: u32,
    /// Top.
    pub y: u32,
    /// Width.
    pub width: u32,
    /// Height.
    pub height: u32,
}

/// Parameters of `screenshot`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScreenshotParams {
    /// Longest edge of the returned image, 64..=4096 (default 1568).
    #[serde(default)]
    pub max_edge: Option<u32>,
    /// Only this part of the phone's picture (capture pixels relative to its top-left).
    #[serde(default)]
    pub region: Option<Region>,
    /// Wait for a frame newer than this one.
    #[serde(default)]
    pub after_frame_id: Option<u64>,
    /// How long to wait for it, 0..=5000 ms.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Also read the text on it: words and lines with boxes in the image's pixels.
    #[serde(default)]
    pub text: Option<bool>,
}

/// Default `max_edge` of a preview.
pub const DEFAULT_PREVIEW_EDGE: u32 = 480;
/// Largest `max_edge` of a preview.
pub const MAX_PREVIEW_EDGE: u32 = 960;

/// Parameters of `preview`: a small image for people, which actions cannot refer to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreviewParams {
    /// Longest edge, 64..=960 (default 480).
    #[serde(default)]
    pub max_edge: Option<u32>,
    /// Answer `unchanged` unless a frame newer than this arrives within `timeout_ms`.
    #[serde(default)]
    pub after_frame_id: Option<u64>,
    /// How long to wait for a newer frame, 0..=5000 ms.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// A point in observation image pixels.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Point {
    /// X.
    pub x: f64,
    /// Y.
    pub y: f64,
}

/// Scroll direction: the direction the content moves into view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Reveal content above.
    Up,
    /// Reveal content below.
    Down,
    /// Reveal content to the left.
    Left,
    /// Reveal content to the right.
    Right,
}

/// Consumer-control keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConsumerKey {
    /// Volume up.
    VolumeUp,
    /// Volume down.
    VolumeDown,
    /// Mute.
    Mute,
    /// Play/pause.
    PlayPause,
    /// Next track.
    NextTrack,
    /// Previous track.
    PreviousTrack,
    /// Snapshot (screenshot on the phone).
    Snapshot,
}

impl ConsumerKey {
    /// The consumer-page usage.
    pub fn usage(self) -> u16 {
        match self {
            ConsumerKey::VolumeUp => 0xE9,
            ConsumerKey::VolumeDown => 0xEA,
            ConsumerKey::Mute => 0xE2,
            ConsumerKey::PlayPause => 0xCD,
            ConsumerKey::NextTrack => 0xB5,
            ConsumerKey::PreviousTrack => 0xB6,
            ConsumerKey::Snapshot => 0x65,
        }
    }
}

/// What to do. Pointer actions take observation image coordinates.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ActionSpec {
    /// Move the pointer.
    Move {
        /// X.
        x: f64,
        /// Y.
        y: f64,
    },
    /// Tap.
    Tap {
        /// X.
        x: f64,
        /// Y.
        y: f64,
    },
    /// Double tap.
    DoubleTap {
        /// X.
        x: f64,
        /// Y.
        y: f64,
    },
    /// Long press (≥ 1.5 s).
    LongPress {
        /// X.
        x: f64,
        /// Y.
        y: f64,
    },
    /// Drag along a path of 2–128 points.
    Drag {
        /// The path.
        path: Vec<Point>,
        /// Duration, 100..=5000 ms (default from the input timings).
        #[serde(default)]
        duration_ms: Option<u64>,
    },
    /// Scroll by dragging: `distance` observation pixels (default: a third of the image).
    Scroll {
        /// Where to start.
        x: f64,
        /// Where to start.
        y: f64,
        /// Which content to reveal.
        direction: Direction,
        /// How far, in observation pixels.
        #[serde(default)]
        distance: Option<f64>,
    },
    /// One key by name (`enter`, `tab`, `a`, `f5`, …).
    KeyPress {
        /// Key name or a single character.
        key: String,
    },
    /// Modifiers plus one key, e.g. `["cmd", "h"]`.
    Hotkey {
        /// 2–6 unique key names.
        keys: Vec<String>,
    },
    /// Type text with the phone's keyboard layout.
    TypeText {
        /// At most 16 KiB.
        text: String,
        /// What a line break in `text` does (default [`Newlines::Refuse`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        newlines: Option<Newlines>,
    },
    /// Cmd+H. (No fields: written `{}` so unknown fields are refused, which serde
    /// skips for unit variants of a tagged enum.)
    Home {},
    /// The app switcher.
    AppSwitcher {},
    /// Cmd+Space.
    Spotlight {},
    /// Cmd+[.
    Back {},
    /// A consumer-control key.
    Consumer {
        /// Which.
        key: ConsumerKey,
    },
    /// Open an app by name through Spotlight (Cmd+Space, the name, Return). Inside a task
    /// with an app scope, a name outside it first asks a human.
    OpenApp {
        /// The app's name as Spotlight finds it.
        name: String,
    },
    /// Tap the centre of a text read on the screen (the observation's text, read if
    /// needed; without an observation, a fresh screenshot's). Several equally good matches
    /// are `AMBIGUOUS_TEXT` unless `index` picks one; none is `TEXT_NOT_FOUND`.
    TapText {
        /// The text (or pattern), one line of 1..=256 bytes.
        text: String,
        /// How to compare (default `ignore_case`).
        #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
        mode: Option<TextMatch>,
        /// Fuzzy matching's lowest similarity, 0.5..=1.0 (default 0.8).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        threshold: Option<f64>,
        /// Only text whose centre lies here (observation pixels).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        region: Option<Region>,
        /// Which of several matches, 0-based in reading order (top to bottom, left to right).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        index: Option<u32>,
        /// The lowest OCR confidence (0..=100) a match is tapped with (default
        /// [`DEFAULT_TAP_CONFIDENCE`]): an icon's circle read as "0" is not a "0".
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min_confidence: Option<f32>,
    },
}

/// `tap_text`'s default `min_confidence`: clean words read at 85..=96; artwork read as a
/// letter (a radio button's ring as "0", a bar as "l") under 60 (the `read_text` tests).
pub const DEFAULT_TAP_CONFIDENCE: f32 = 60.0;

impl ActionSpec {
    /// `tap_text`'s query.
    pub fn text_query(&self) -> Option<TextQuery> {
        match self {
            ActionSpec::TapText { text, mode, threshold, region, .. } => Some(TextQuery {
                text: text.clone(),
                mode: mode.unwrap_or_default(),
                threshold: *threshold,
                region: *region,
            }),
            _ => None,
        }
    }

    /// Whether the action needs an observation (it has coordinates).
    pub fn needs_observation(&self) -> bool {
        matches!(
            self,
            ActionSpec::Move { .. }
                | ActionSpec::Tap { .. }
                | ActionSpec::DoubleTap { .. }
                | ActionSpec::LongPress { .. }
                | ActionSpec::Drag { .. }
                | ActionSpec::Scroll { .. }
        )
    }
}

impl ActionSpec {
    /// What the action should do to the screen unless the caller says: taps, presses,
    /// typing, shortcuts and scrolls should change it; a move, a drag (it may end where
    /// it began) and media keys (no picture on most screens) may or may not; and actions
    /// whose purpose is a state (home, the app switcher, back) have done their job when
    /// the phone is already there, so they succeed with `changed: false` (an explicit
    /// `expect: "change"` still answers `NO_VISIBLE_EFFECT`).
    pub fn default_expect(&self) -> Expect {
        match self {
            ActionSpec::Move { .. }
            | ActionSpec::Drag { .. }
            | ActionSpec::Consumer { .. }
            | ActionSpec::Home {}
            | ActionSpec::AppSwitcher {}
            | ActionSpec::Back {} => Expect::Any,
            _ => Expect::Change,
        }
    }
}

/// What `type_text` does with a line break (`\n`, `\r\n` or `\r`) in its text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Newlines {
    /// Refuse the text before anything is typed (`TEXT_HAS_NEWLINE`): Return in a
    /// single-line field ends editing (or submits), and the rest of the text would be lost.
    #[default]
    Refuse,
    /// Press Return for each line break (`\r\n` is one): for multi-line fields, where
    /// Return inserts a new line.
    Return,
}

impl Newlines {
    /// Whether `text` has a line break.
    pub fn has_line_break(text: &str) -> bool {
        text.contains(['\n', '\r'])
    }

    /// `text` with every line break (`\r\n`, `\r`, `\n`) written as one `\n` (Return).
    pub fn as_returns(text: &str) -> String {
        text.replace("\r\n", "\n").replace('\r', "\n")
    }
}

/// What an action should do to the screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    /// The screen changes; when it does not within the timeout the action answers
    /// `NO_VISIBLE_EFFECT` (the input was sent).
    Change,
    /// Either; the answer says which.
    Any,
    /// The screen stays as it was; when it changes the action answers `UNEXPECTED_CHANGE`.
    NoChange,
}

/// Which picture an answer carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReturnImage {
    /// None (default): the answer's observation id is enough to act again.
    #[default]
    None,
    /// A PNG of the changed region only (nothing when nothing changed).
    Region,
    /// A PNG of the whole settled screen.
    Full,
}

/// Default quiet period: the screen counts as settled after this long without a change.
pub const DEFAULT_QUIET_MS: u64 = 300;
/// Default longest wait for the screen to settle after an action.
pub const DEFAULT_SETTLE_TIMEOUT_MS: u64 = 3000;
/// Accepted quiet periods, ms.
pub const QUIET_MS_RANGE: std::ops::RangeInclusive<u64> = 50..=5000;
/// Accepted settle and change timeouts, ms.
pub const WAIT_MS_RANGE: std::ops::RangeInclusive<u64> = 0..=30_000;

/// Parameters of `action`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionParams {
    /// Idempotency key, 1–128 bytes: the same id and arguments return the cached result.
    pub operation_id: String,
    /// The screenshot the coordinates refer to (required for pointer actions).
    #[serde(default)]
    pub observation_id: Option<String>,
    /// What to do.
    pub action: ActionSpec,
    /// Watch the screen after the input until it settles and say what changed (default
    /// true). `false` answers as soon as the input is sent (live human input).
    #[serde(default)]
    pub verify: Option<bool>,
    /// What the action should do to the screen (default [`ActionSpec::default_expect`]).
    #[serde(default)]
    pub expect: Option<Expect>,
    /// A picture in the answer (default none).
    #[serde(default)]
    pub return_image: Option<ReturnImage>,
    /// The screen is settled after this long without a change, 50..=5000 ms (default 300).
    #[serde(default)]
    pub quiet_ms: Option<u64>,
    /// Longest wait for it to settle, 0..=30000 ms (default 3000).
    #[serde(default)]
    pub settle_timeout_ms: Option<u64>,
    /// Once settled, this text must be on screen (`ignore_case`), else the answer is
    /// `EXPECTED_TEXT_MISSING` (the input was sent).
    #[serde(default)]
    pub expect_text: Option<String>,
    /// Once settled, this text must not be on screen, else `UNEXPECTED_TEXT`.
    #[serde(default)]
    pub expect_no_text: Option<String>,
}

/// Parameters of `wait_for_change`: wait until the screen differs from a picture.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitForChangeParams {
    /// Compare with this screenshot (what the caller last saw); default the screen now.
    #[serde(default)]
    pub observation_id: Option<String>,
    /// Longest wait, 0..=30000 ms (default 5000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Once it changed, also wait for it to settle (default true).
    #[serde(default)]
    pub settle: Option<bool>,
    /// The quiet period of that settling, 50..=5000 ms (default 300).
    #[serde(default)]
    pub quiet_ms: Option<u64>,
    /// A picture in the answer (default none).
    #[serde(default)]
    pub return_image: Option<ReturnImage>,
}

/// Parameters of `wait_for_settle`: wait until the screen stops changing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitForSettleParams {
    /// Longest wait, 0..=30000 ms (default 3000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Settled after this long without a change, 50..=5000 ms (default 300).
    #[serde(default)]
    pub quiet_ms: Option<u64>,
    /// A picture in the answer (default none).
    #[serde(default)]
    pub return_image: Option<ReturnImage>,
}

/// Parameters of `cancel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelParams {
    /// The id of the request to cancel (same connection).
    pub request_id: u64,
}

/// Parameters of `calibrate`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibrateParams {
    /// Points per side of the measuring grid, 3..=6 (default 4).
    #[serde(default)]
    pub grid: Option<u32>,
    /// Forget the calibration of the current orientation instead of measuring.
    #[serde(default)]
    pub reset: Option<bool>,
}

/// Parameters of `sim_state` (none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimStateParams {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_specs_parse_and_reject_unknown_fields() {
        let a: ActionSpec = serde_json::from_str(r#"{"type":"tap","x":1,"y":2.5}"#).unwrap();
        assert_eq!(a, ActionSpec::Tap { x: 1.0, y: 2.5 });
        assert!(serde_json::from_str::<ActionSpec>(r#"{"type":"tap","x":1,"y":2,"z":3}"#).is_err());
        assert!(serde_json::from_str::<ActionSpec>(r#"{"type":"fly"}"#).is_err());
        let h: ActionSpec = serde_json::from_str(r#"{"type":"home"}"#).unwrap();
        assert_eq!(h, ActionSpec::Home {});
        assert_eq!(serde_json::to_string(&h).unwrap(), r#"{"type":"home"}"#);
        assert!(serde_json::from_str::<ActionSpec>(r#"{"type":"home","x":1}"#).is_err());
        assert!(!h.needs_observation());
    }
}
