//! Text → positional key strokes, per keyboard layout.
//!
//! HID keycodes name key positions, not characters: iOS fixes the layout at enumeration from
//! the active soft-keyboard language. The tables follow Apple's hardware layouts (Option is
//! sent as Right Alt, which iOS treats as Option). A character the layout cannot type is an
//! error naming every such character; nothing is typed in that case.

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Modifier bit: left control.
pub const MOD_CTRL: u8 = 0x01;
/// Modifier bit: left shift.
pub const MOD_SHIFT: u8 = 0x02;
/// Modifier bit: left alt.
pub const MOD_ALT: u8 = 0x04;
/// Modifier bit: left GUI (Command on iOS).
pub const MOD_GUI: u8 = 0x08;
/// Modifier bit: right alt (Option / AltGr).
pub const MOD_OPTION: u8 = 0x40;

/// A keyboard layout the phone may be set to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// U.S. English (ANSI).
    #[default]
    Us,
    /// British English.
    Uk,
    /// German (QWERTZ).
    De,
    /// French (AZERTY).
    Fr,
}

impl Layout {
    /// Every supported layout.
    pub const ALL: [Layout; 4] = [Layout::Us, Layout::Uk, Layout::De, Layout::Fr];
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layout::Us => "us",
            Layout::Uk => "uk",
            Layout::De => "de",
            Layout::Fr => "fr",
        })
    }
}

/// One key press: a usage on the keyboard page plus modifier bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyStroke {
    /// Keyboard-page usage.
    pub usage: u8,
    /// Modifier bits held with it.
    pub modifiers: u8,
}

/// Text that the layout cannot type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {layout} keyboard layout cannot type {}", describe(.chars))]
pub struct UntypeableText {
    /// The layout.
    pub layout: Layout,
    /// Each untypeable character once, in order of first appearance.
    pub chars: Vec<char>,
}

fn describe(chars: &[char]) -> String {
    chars.iter().map(|c| format!("{c:?} (U+{:04X})", u32::from(*c))).collect::<Vec<_>>().join(", ")
}

/// Keys common to every layout: (usage, char).
const COMMON: &[(u8, char)] = &[(0x28, '\n'), (0x2B, '\t'), (0x2C, ' ')];

/// Per-key table rows: (usage, plain, shift, option, shift+option); '\0' = nothing.
type Row = (u8, char, char, char, char);

const US_PUNCT: &[Row] = &[
    (0x1E, '1', '!', '\0', '\0'),
    (0x1F, '2', '@', '\0', '\0'),
    (0x20, '3', '#', '\0', '\0'),
    (0x21, '4', '$', '\0', '\0'),
    (0x22, '5', '%', '\0', '\0'),
    (0x23, '6', '^', '\0', '\0'),
    (0x24, '7', '&', '\0', '\0'),
    (0x25, '8', '*', '\0', '\0'),
    (0x26, '9', '(', '\0', '\0'),
    (0x27, '0', ')', '\0', '\0'),
    (0x2D, '-', '_', '\0', '\0'),
    (0x2E, '=', '+', '\0', '\0'),
    (0x2F, '[', '{', '\0', '\0'),
    (0x30, ']', '}', '\0', '\0'),
    (0x31, '\\', '|', '\0', '\0'),
    (0x33, ';', ':', '\0', '\0'),
    (0x34, '\'', '"', '\0', '\0'),
    (0x35, '`', '~', '\0', '\0'),
    (0x36, ',', '<', '\0', '\0'),
    (0x37, '.', '>', '\0', '\0'),
    (0x38, '/', '?', '\0', '\0'),
];

/// Apple British: like U.S., but Shift+3 is £, Option+3 is #, and the ISO key is § ±.
const UK_DIFF: &[Row] = &[(0x20, '3', '£', '#', '\0'), (0x64, '§', '±', '\0', '\0')];

const DE_KEYS: &[Row] = &[
    (0x1C, 'z', 'Z', '\0', '\0'),
    (0x1D, 'y', 'Y', '\0', '\0'),
    (0x0F, 'l', 'L', '@', '\0'),
    (0x08, 'e', 'E', '€', '\0'),
    (0x1E, '1', '!', '\0', '\0'),
    (0x1F, '2', '"', '\0', '\0'),
    (0x20, '3', '§', '\0', '\0'),
    (0x21, '4', '$', '\0', '\0'),
    (0x22, '5', '%', '[', '\0'),
    (0x23, '6', '&', ']', '\0'),
    (0x24, '7', '/', '|', '\\'),
    (0x25, '8', '(', '{', '\0'),
    (0x26, '9', ')', '}', '\0'),
    (0x27, '0', '=', '\0', '\0'),
    (0x2D, 'ß', '?', '\0', '\0'),
    (0x2F, 'ü', 'Ü', '\0', '\0'),
    (0x30, '+', '*', '~', '\0'),
    (0x32, '#', '\'', '\0', '\0'),
    (0x33, 'ö', 'Ö', '\0', '\0'),
    (0x34, 'ä', 'Ä', '\0', '\0'),
    (0x35, '\0', '°', '\0', '\0'),
    (0x36, ',', ';', '\0', '\0'),
    (0x37, '.', ':', '\0', '\0'),
    (0x38, '-', '_', '\0', '\0'),
    (0x64, '<', '>', '\0', '\0'),
];

const FR_KEYS: &[Row] = &[
    (0x04, 'q', 'Q', '\0', '\0'),
    (0x14, 'a', 'A', '\0', '\0'),
    (0x1A, 'z', 'Z', '\0', '\0'),
    (0x1D, 'w', 'W', '\0', '\0'),
    (0x33, 'm', 'M', '\0', '\0'),
    (0x10, ',', '?', '\0', '\0'),
    (0x08, 'e', 'E', '€', '\0'),
    (0x1E, '&', '1', '\0', '\0'),
    (0x1F, 'é', '2', '\0', '\0'),
    (0x20, '"', '3', '\0', '\0'),
    (0x21, '\'', '4', '{', '\0'),
    (0x22, '(', '5', '[', '\0'),
    (0x23, '§', '6', '\0', '\0'),
    (0x24, 'è', '7', '\0', '\0'),
    (0x25, '!', '8', '\0', '\0'),
    (0x26, 'ç', '9', '\0', '\0'),
    (0x27, 'à', '0', '\0', '\0'),
    (0x2D, ')', '°', ']', '\0'),
    (0x2E, '-', '_', '}', '\0'),
    (0x30, '$', '*', '\0', '\0'),
    (0x34, 'ù', '%', '\0', '\0'),
    (0x32, '\0', '£', '\0', '\0'),
    (0x35, '@', '#', '\0', '\0'),
    (0x36, ';', '.', '\0', '\0'),
    (0x37, ':', '/', '\0', '\0'),
    (0x38, '=', '+', '\0', '\0'),
    (0x64, '<', '>', '\0', '\0'),
];

/// Character ↔ key stroke tables for one layout.
#[derive(Debug, Clone)]
pub struct Keymap {
    layout: Layout,
    to_key: HashMap<char, KeyStroke>,
    from_key: HashMap<KeyStroke, char>,
}

impl Keymap {
    /// Builds the tables for `layout`.
    pub fn new(layout: Layout) -> Keymap {
        let mut rows: Vec<Row> = Vec::new();
        for (i, c) in ('a'..='z').enumerate() {
            let usage = 0x04 + u8::try_from(i).unwrap_or(0);
            rows.push((usage, c, c.to_ascii_uppercase(), '\0', '\0'));
        }
        let overrides: &[Row] = match layout {
            Layout::Us => US_PUNCT,
            Layout::Uk => UK_DIFF,
            Layout::De => DE_KEYS,
            Layout::Fr => FR_KEYS,
        };
        if layout == Layout::Uk {
            rows.extend_from_slice(US_PUNCT);
        }
        // Later rows replace earlier ones for the same usage.
        for row in overrides {
            rows.retain(|r| r.0 != row.0);
            rows.push(*row);
        }
        let mut map = Keymap { layout, to_key: HashMap::new(), from_key: HashMap::new() };
        for (usage, c) in COMMON {
            map.insert(*c, KeyStroke { usage: *usage, modifiers: 0 });
        }
        for (usage, plain, shift, option, shift_option) in rows {
            for (c, modifiers) in
                [(plain, 0), (shift, MOD_SHIFT), (option, MOD_OPTION), (shift_option, MOD_SHIFT | MOD_OPTION)]
            {
                if c != '\0' {
                    map.insert(c, KeyStroke { usage, modifiers });
                }
            }
        }
        map
    }

    fn insert(&mut self, c: char, k: KeyStroke) {
        self.to_key.entry(c).or_insert(k);
        self.from_key.entry(k).or_insert(c);
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The stroke that types `c`, if the layout has one.
    pub fn stroke(&self, c: char) -> Option<KeyStroke> {
        self.to_key.get(&c).copied()
    }

    /// Strokes for all of `text`, or an error naming every character that cannot be typed.
    pub fn strokes(&self, text: &str) -> Result<Vec<KeyStroke>, UntypeableText> {
        let mut out = Vec::with_capacity(text.len());
        let mut bad: Vec<char> = Vec::new();
        for c in text.chars() {
            match self.stroke(c) {
                Some(k) => out.push(k),
                None if !bad.contains(&c) => bad.push(c),
                None => {}
            }
        }
        if bad.is_empty() {
            Ok(out)
        } else {
            Err(UntypeableText { layout: self.layout, chars: bad })
        }
    }

    /// The character a stroke types (what the phone does with it), ignoring Control and GUI.
    pub fn char_for(&self, usage: u8, modifiers: u8) -> Option<char> {
        let shift = if modifiers & (MOD_SHIFT | 0x20) != 0 { MOD_SHIFT } else { 0 };
        let option = if modifiers & (MOD_OPTION | MOD_ALT) != 0 { MOD_OPTION } else { 0 };
        self.from_key.get(&KeyStroke { usage, modifiers: shift | option }).copied()
    }
}

/// Keys by name for `key_press` and `hotkey`: returns (usage, modifier bit). Modifiers come
/// back as usage 0 with their bit; other keys with modifier 0.
pub fn named_key(name: &str) -> Option<(u8, u8)> {
    let lower = name.to_ascii_lowercase();
    let usage = match lower.as_str() {
        "cmd" | "command" | "gui" | "meta" => return Some((0, MOD_GUI)),
        "shift" => return Some((0, MOD_SHIFT)),
        "ctrl" | "control" => return Some((0, MOD_CTRL)),
        "alt" | "option" => return Some((0, MOD_OPTION)),
        "enter" | "return" => 0x28,
        "escape" | "esc" => 0x29,
        "backspace" => 0x2A,
        "tab" => 0x2B,
        "space" => 0x2C,
        "delete" => 0x4C,
        "right" => 0x4F,
        "left" => 0x50,
        "down" => 0x51,
        "up" => 0x52,
        "home" => 0x4A,
        "end" => 0x4D,
        "pageup" => 0x4B,
        "pagedown" => 0x4E,
        f if f.len() >= 2 && f.starts_with('f') => {
            let n: u8 = f[1..].parse().ok()?;
            if !(1..=12).contains(&n) {
                return None;
            }
            0x3A + n - 1
        }
        _ => return None,
    };
    Some((usage, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_layout_round_trips_its_own_characters() {
        for layout in Layout::ALL {
            let map = Keymap::new(layout);
            for (c, k) in &map.to_key {
                assert_eq!(map.char_for(k.usage, k.modifiers), Some(*c), "{layout} {c:?}");
            }
            let text = "Hello World 123, tether.";
            let strokes = map.strokes(text).unwrap();
            let back: String = strokes.iter().map(|k| map.char_for(k.usage, k.modifiers).unwrap()).collect();
            assert_eq!(back, text, "{layout}");
        }
    }

    #[test]
    fn layouts_are_positional() {
        let (us, de, fr) = (Keymap::new(Layout::Us), Keymap::new(Layout::De), Keymap::new(Layout::Fr));
        assert_eq!(us.stroke('y').unwrap().usage, 0x1C);
        assert_eq!(de.stroke('y').unwrap().usage, 0x1D);
        assert_eq!(fr.stroke('a').unwrap().usage, 0x14);
        assert_eq!(fr.stroke('1').unwrap(), KeyStroke { usage: 0x1E, modifiers: MOD_SHIFT });
        assert_eq!(de.stroke('@').unwrap(), KeyStroke { usage: 0x0F, modifiers: MOD_OPTION });
        assert_eq!(Keymap::new(Layout::Uk).stroke('£').unwrap().usage, 0x20);
        assert_eq!(de.stroke('ß').unwrap().usage, 0x2D);
    }

    #[test]
    fn untypeable_characters_are_named_once() {
        let err = Keymap::new(Layout::Us).strokes("café ☕ café").unwrap_err();
        assert_eq!(err.chars, vec!['é', '☕']);
        assert!(err.to_string().contains("U+00E9"), "{err}");
        assert!(Keymap::new(Layout::Fr).strokes("café").is_ok());
    }

    #[test]
    fn named_keys() {
        assert_eq!(named_key("Cmd"), Some((0, MOD_GUI)));
        assert_eq!(named_key("enter"), Some((0x28, 0)));
        assert_eq!(named_key("f12"), Some((0x45, 0)));
        assert_eq!(named_key("f13"), None);
        assert_eq!(named_key("hyper"), None);
    }
}
