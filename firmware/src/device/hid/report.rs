//! Input reports of the composite we present to the iPhone, encoded to the exact bytes the
//! gadget writes. Layouts (report ids are not used: each function is its own interface):
//!
//! | interface | bytes | layout |
//! |---|---|---|
//! | keyboard (boot) | 8 | modifiers, reserved, 6 key usages |
//! | consumer control | 2 | one 16-bit usage, little endian |
//! | absolute pointer | 6 | buttons, X u16 LE, Y u16 LE (1..=32767), wheel i8 |
//! | relative mouse | 4 | buttons, dx i8, dy i8, wheel i8 |

use serde::Serialize;

/// Smallest absolute coordinate we ever send: iOS flings the pointer to a corner on X=Y=0.
pub const POINTER_MIN: u16 = 1;
/// Largest absolute coordinate (the descriptor's logical maximum).
pub const POINTER_MAX: u16 = 32767;

/// Which HID function of the composite a report belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HidInterface {
    /// Boot keyboard.
    Keyboard,
    /// Consumer control (volume, media keys).
    Consumer,
    /// Absolute pointer.
    Pointer,
    /// Relative mouse (fallback profile).
    Mouse,
}

/// A boot-keyboard input report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyboardReport {
    /// Modifier bits: LCtrl, LShift, LAlt, LGui, RCtrl, RShift, RAlt, RGui (bit 0..7).
    pub modifiers: u8,
    /// Up to six pressed key usages (page 0x07); 0 = none.
    pub keys: [u8; 6],
}

/// A consumer-control input report: the usage held down, 0 = released.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumerReport {
    /// Usage on the consumer page (0x0C), e.g. 0xE9 volume up.
    pub usage: u16,
}

/// An absolute-pointer input report. Construct with [`PointerReport::new`], which clamps
/// coordinates into `POINTER_MIN..=POINTER_MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PointerReport {
    buttons: u8,
    x: u16,
    y: u16,
    wheel: i8,
}

impl PointerReport {
    /// A report at (x, y) with the given button bits; coordinates are clamped so that
    /// neither is ever 0.
    pub fn new(buttons: u8, x: u16, y: u16, wheel: i8) -> Self {
        PointerReport { buttons, x: x.clamp(POINTER_MIN, POINTER_MAX), y: y.clamp(POINTER_MIN, POINTER_MAX), wheel }
    }

    /// Button bits (bit 0 = primary).
    pub fn buttons(&self) -> u8 {
        self.buttons
    }

    /// X in HID units.
    pub fn x(&self) -> u16 {
        self.x
    }

    /// Y in HID units.
    pub fn y(&self) -> u16 {
        self.y
    }

    /// Wheel detents.
    pub fn wheel(&self) -> i8 {
        self.wheel
    }
}

/// A relative-mouse input report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MouseReport {
    /// Button bits (bit 0 = primary).
    pub buttons: u8,
    /// Horizontal movement in counts.
    pub dx: i8,
    /// Vertical movement in counts.
    pub dy: i8,
    /// Wheel detents.
    pub wheel: i8,
}

/// One input report for one interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HidReport {
    /// Keyboard.
    Keyboard(KeyboardReport),
    /// Consumer control.
    Consumer(ConsumerReport),
    /// Absolute pointer.
    Pointer(PointerReport),
    /// Relative mouse.
    Mouse(MouseReport),
}

/// Encoded report bytes: a small inline buffer, no allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodedReport {
    buf: [u8; 8],
    len: usize,
}

impl EncodedReport {
    /// The bytes to write.
    pub fn as_bytes(&self) -> &[u8] {
        // `len` is set only by `HidReport::encode` to 2, 4, 6 or 8, all <= buf.len().
        &self.buf[..self.len]
    }
}

impl HidReport {
    /// The interface this report is written to.
    pub fn interface(&self) -> HidInterface {
        match self {
            HidReport::Keyboard(_) => HidInterface::Keyboard,
            HidReport::Consumer(_) => HidInterface::Consumer,
            HidReport::Pointer(_) => HidInterface::Pointer,
            HidReport::Mouse(_) => HidInterface::Mouse,
        }
    }

    /// Encodes the report to its wire bytes.
    pub fn encode(&self) -> EncodedReport {
        let mut buf = [0u8; 8];
        let len = match self {
            HidReport::Keyboard(k) => {
                buf[0] = k.modifiers;
                buf[2..8].copy_from_slice(&k.keys);
                8
            }
            HidReport::Consumer(c) => {
                buf[..2].copy_from_slice(&c.usage.to_le_bytes());
                2
            }
            HidReport::Pointer(p) => {
                buf[0] = p.buttons;
                buf[1..3].copy_from_slice(&p.x.to_le_bytes());
                buf[3..5].copy_from_slice(&p.y.to_le_bytes());
                buf[5] = p.wheel.to_le_bytes()[0];
                6
            }
            HidReport::Mouse(m) => {
                buf[0] = m.buttons;
                buf[1] = m.dx.to_le_bytes()[0];
                buf[2] = m.dy.to_le_bytes()[0];
                buf[3] = m.wheel.to_le_bytes()[0];
                4
            }
        };
        EncodedReport { buf, len }
    }

    /// Decodes wire bytes for `interface`; `None` when the length does not match.
    pub fn decode(interface: HidInterface, bytes: &[u8]) -> Option<HidReport> {
        Some(match (interface, bytes) {
            (HidInterface::Keyboard, &[modifiers, _, k0, k1, k2, k3, k4, k5]) => {
                HidReport::Keyboard(KeyboardReport { modifiers, keys: [k0, k1, k2, k3, k4, k5] })
            }
            (HidInterface::Consumer, &[lo, hi]) => {
                HidReport::Consumer(ConsumerReport { usage: u16::from_le_bytes([lo, hi]) })
            }
            (HidInterface::Pointer, &[buttons, x0, x1, y0, y1, wheel]) => HidReport::Pointer(PointerReport {
                buttons,
                x: u16::from_le_bytes([x0, x1]),
                y: u16::from_le_bytes([y0, y1]),
                wheel: i8::from_le_bytes([wheel]),
            }),
            (HidInterface::Mouse, &[buttons, dx, dy, wheel]) => HidReport::Mouse(MouseReport {
                buttons,
                dx: i8::from_le_bytes([dx]),
                dy: i8::from_le_bytes([dy]),
                wheel: i8::from_le_bytes([wheel]),
            }),
            _ => return None,
        })
    }

    /// Whether this report leaves something pressed (a key, modifier, button or usage).
    pub fn holds_input(&self) -> bool {
        match self {
            HidReport::Keyboard(k) => k.modifiers != 0 || k.keys.iter().any(|&u| u != 0),
            HidReport::Consumer(c) => c.usage != 0,
            HidReport::Pointer(p) => p.buttons != 0,
            HidReport::Mouse(m) => m.buttons != 0,
        }
    }

    /// The report that releases everything this one holds, on the same interface. A pointer
    /// release stays at the same position so the pointer does not jump.
    pub fn released(&self) -> HidReport {
        match self {
            HidReport::Keyboard(_) => HidReport::Keyboard(KeyboardReport::default()),
            HidReport::Consumer(_) => HidReport::Consumer(ConsumerReport::default()),
            HidReport::Pointer(p) => HidReport::Pointer(PointerReport::new(0, p.x, p.y, 0)),
            HidReport::Mouse(_) => HidReport::Mouse(MouseReport::default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_is_never_zero_and_encodes_little_endian() {
        let p = PointerReport::new(1, 0, 40000, -1);
        assert_eq!((p.x(), p.y()), (1, 32767));
        assert_eq!(HidReport::Pointer(p).encode().as_bytes(), &[1, 1, 0, 0xff, 0x7f, 0xff]);
    }

    #[test]
    fn round_trips_every_interface() {
        let reports = [
            HidReport::Keyboard(KeyboardReport { modifiers: 0x08, keys: [0x0b, 0, 0, 0, 0, 0] }),
            HidReport::Consumer(ConsumerReport { usage: 0x00e9 }),
            HidReport::Pointer(PointerReport::new(3, 16384, 200, 2)),
            HidReport::Mouse(MouseReport { buttons: 1, dx: -5, dy: 7, wheel: 0 }),
        ];
        for r in reports {
            let bytes = r.encode();
            assert_eq!(HidReport::decode(r.interface(), bytes.as_bytes()), Some(r));
        }
        assert_eq!(HidReport::decode(HidInterface::Pointer, &[0; 5]), None);
    }

    #[test]
    fn release_keeps_pointer_position() {
        let held = HidReport::Pointer(PointerReport::new(1, 500, 600, 0));
        assert!(held.holds_input());
        let rel = held.released();
        assert!(!rel.holds_input());
        assert_eq!(rel, HidReport::Pointer(PointerReport::new(0, 500, 600, 0)));
        let kb = HidReport::Keyboard(KeyboardReport { modifiers: 0x02, keys: [0; 6] });
        assert!(kb.holds_input());
        assert_eq!(kb.released().encode().as_bytes(), &[0; 8]);
    }
}
