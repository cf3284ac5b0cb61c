//! HID report descriptors of the composite we present to the iPhone, in the order the
//! functions are created: keyboard → consumer control → pointer (DESIGN.md "The iPhone").
//!
//! iOS caches descriptors per device: [`DescriptorSet::fingerprint`] changes whenever any byte
//! changes, and the gadget derives its serial and bcdDevice from it.

use super::HidInterface;

/// Boot keyboard: 8 modifier bits, a reserved byte, 6 key usages; 5 LED output bits.
pub const KEYBOARD: &[u8] = &[
    0x05, 0x01, // Usage Page (Generic Desktop)
    0x09, 0x06, // Usage (Keyboard)
    0xA1, 0x01, // Collection (Application)
    0x05, 0x07, //   Usage Page (Keyboard/Keypad)
    0x19, 0xE0, //   Usage Minimum (Left Control)
    0x29, 0xE7, //   Usage Maximum (Right GUI)
    0x15, 0x00, //   Logical Minimum (0)
    0x25, 0x01, //   Logical Maximum (1)
    0x75, 0x01, //   Report Size (1)
    0x95, 0x08, //   Report Count (8)
    0x81, 0x02, //   Input (Data, Var, Abs): modifiers
    0x95, 0x01, //   Report Count (1)
    0x75, 0x08, //   Report Size (8)
    0x81, 0x01, //   Input (Const): reserved
    0x95, 0x05, //   Report Count (5)
    0x75, 0x01, //   Report Size (1)
    0x05, 0x08, //   Usage Page (LEDs)
    0x19, 0x01, //   Usage Minimum (Num Lock)
    0x29, 0x05, //   Usage Maximum (Kana)
    0x91, 0x02, //   Output (Data, Var, Abs): LEDs
    0x95, 0x01, //   Report Count (1)
    0x75, 0x03, //   Report Size (3)
    0x91, 0x01, //   Output (Const): padding
    0x95, 0x06, //   Report Count (6)
    0x75, 0x08, //   Report Size (8)
    0x15, 0x00, //   Logical Minimum (0)
    0x25, 0x65, //   Logical Maximum (101)
    0x05, 0x07, //   Usage Page (Keyboard/Keypad)
    0x19, 0x00, //   Usage Minimum (0)
    0x29, 0x65, //   Usage Maximum (101)
    0x81, 0x00, //   Input (Data, Array): keys
    0xC0, // End Collection
];

/// Consumer control: one 16-bit usage (volume, media, snapshot).
pub const CONSUMER: &[u8] = &[
    0x05, 0x0C, // Usage Page (Consumer)
    0x09, 0x01, // Usage (Consumer Control)
    0xA1, 0x01, // Collection (Application)
    0x15, 0x00, //   Logical Minimum (0)
    0x26, 0xFF, 0x03, //   Logical Maximum (1023)
    0x19, 0x00, //   Usage Minimum (0)
    0x2A, 0xFF, 0x03, //   Usage Maximum (1023)
    0x75, 0x10, //   Report Size (16)
    0x95, 0x01, //   Report Count (1)
    0x81, 0x00, //   Input (Data, Array)
    0xC0, // End Collection
];

/// Absolute pointer: Mouse application with a Pointer+Physical collection (what iOS
/// AssistiveTouch follows), 8 buttons, X/Y 0..32767 absolute, relative wheel.
pub const POINTER: &[u8] = &[
    0x05, 0x01, // Usage Page (Generic Desktop)
    0x09, 0x02, // Usage (Mouse)
    0xA1, 0x01, // Collection (Application)
    0x09, 0x01, //   Usage (Pointer)
    0xA1, 0x00, //   Collection (Physical)
    0x05, 0x09, //     Usage Page (Button)
    0x19, 0x01, //     Usage Minimum (1)
    0x29, 0x08, //     Usage Maximum (8)
    0x15, 0x00, //     Logical Minimum (0)
    0x25, 0x01, //     Logical Maximum (1)
    0x75, 0x01, //     Report Size (1)
    0x95, 0x08, //     Report Count (8)
    0x81, 0x02, //     Input (Data, Var, Abs): buttons
    0x05, 0x01, //     Usage Page (Generic Desktop)
    0x09, 0x30, //     Usage (X)
    0x09, 0x31, //     Usage (Y)
    0x15, 0x00, //     Logical Minimum (0)
    0x26, 0xFF, 0x7F, //     Logical Maximum (32767)
    0x75, 0x10, //     Report Size (16)
    0x95, 0x02, //     Report Count (2)
    0x81, 0x02, //     Input (Data, Var, Abs): X, Y
    0x09, 0x38, //     Usage (Wheel)
    0x15, 0x81, //     Logical Minimum (-127)
    0x25, 0x7F, //     Logical Maximum (127)
    0x75, 0x08, //     Report Size (8)
    0x95, 0x01, //     Report Count (1)
    0x81, 0x06, //     Input (Data, Var, Rel): wheel
    0xC0, //   End Collection
    0xC0, // End Collection
];

/// Relative mouse (fallback profile): 8 buttons, X/Y and wheel relative, -127..127.
pub const MOUSE: &[u8] = &[
    0x05, 0x01, // Usage Page (Generic Desktop)
    0x09, 0x02, // Usage (Mouse)
    0xA1, 0x01, // Collection (Application)
    0x09, 0x01, //   Usage (Pointer)
    0xA1, 0x00, //   Collection (Physical)
    0x05, 0x09, //     Usage Page (Button)
    0x19, 0x01, //     Usage Minimum (1)
    0x29, 0x08, //     Usage Maximum (8)
    0x15, 0x00, //     Logical Minimum (0)
    0x25, 0x01, //     Logical Maximum (1)
    0x75, 0x01, //     Report Size (1)
    0x95, 0x08, //     Report Count (8)
    0x81, 0x02, //     Input (Data, Var, Abs): buttons
    0x05, 0x01, //     Usage Page (Generic Desktop)
    0x09, 0x30, //     Usage (X)
    0x09, 0x31, //     Usage (Y)
    0x09, 0x38, //     Usage (Wheel)
    0x15, 0x81, //     Logical Minimum (-127)
    0x25, 0x7F, //     Logical Maximum (127)
    0x75, 0x08, //     Report Size (8)
    0x95, 0x03, //     Report Count (3)
    0x81, 0x06, //     Input (Data, Var, Rel): X, Y, wheel
    0xC0, //   End Collection
    0xC0, // End Collection
];

/// Which pointer the composite carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PointerProfile {
    /// Absolute pointer (the default: taps land where asked).
    #[default]
    Absolute,
    /// Relative mouse, accelerated by iOS; a fallback only.
    Relative,
}

/// The ordered HID functions of one gadget configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DescriptorSet {
    /// The pointer profile.
    pub profile: PointerProfile,
}

/// One HID function: its interface, descriptor and input report length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HidFunction {
    /// Which interface.
    pub interface: HidInterface,
    /// Report descriptor bytes.
    pub descriptor: &'static [u8],
    /// Input report length in bytes.
    pub report_len: usize,
    /// Boot subclass/protocol: (1, 1) boot keyboard, (0, 0) none.
    pub subclass_protocol: (u8, u8),
}

impl DescriptorSet {
    /// The functions in creation order: keyboard → consumer → pointer.
    pub fn functions(&self) -> [HidFunction; 3] {
        let pointer = match self.profile {
            PointerProfile::Absolute => HidFunction {
                interface: HidInterface::Pointer,
                descriptor: POINTER,
                report_len: 6,
                subclass_protocol: (0, 0),
            },
            PointerProfile::Relative => HidFunction {
                interface: HidInterface::Mouse,
                descriptor: MOUSE,
                report_len: 4,
                subclass_protocol: (0, 0),
            },
        };
        [
            HidFunction {
                interface: HidInterface::Keyboard,
                descriptor: KEYBOARD,
                report_len: 8,
                subclass_protocol: (1, 1),
            },
            HidFunction {
                interface: HidInterface::Consumer,
                descriptor: CONSUMER,
                report_len: 2,
                subclass_protocol: (0, 0),
            },
            pointer,
        ]
    }

    /// A 64-bit FNV-1a hash over every function's descriptor and report length, in order.
    /// Stable across builds and platforms (no std hasher involved).
    pub fn fingerprint(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for f in self.functions() {
            let len = u64::try_from(f.descriptor.len()).unwrap_or(u64::MAX).to_le_bytes();
            for &b in len.iter().chain(f.descriptor).chain(&[u8::try_from(f.report_len).unwrap_or(u8::MAX)]) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Walks short items and sums Report Size × Report Count per main item of `kind`
    /// (0x80 Input, 0x90 Output), tracking Push/Pop-free global state like the kernel.
    fn bits(desc: &[u8], kind: u8) -> usize {
        let (mut size, mut count, mut total, mut i) = (0usize, 0usize, 0usize, 0usize);
        while i < desc.len() {
            let prefix = desc[i];
            let len = match prefix & 0x03 {
                3 => 4,
                n => n as usize,
            };
            let data = desc[i + 1..i + 1 + len].iter().rev().fold(0usize, |a, &b| (a << 8) | b as usize);
            match prefix & 0xFC {
                0x74 => size = data,
                0x94 => count = data,
                p if p == kind => total += size * count,
                _ => {}
            }
            i += 1 + len;
        }
        total
    }

    #[test]
    fn report_lengths_match_the_descriptors() {
        for profile in [PointerProfile::Absolute, PointerProfile::Relative] {
            for f in (DescriptorSet { profile }).functions() {
                assert_eq!(bits(f.descriptor, 0x80), f.report_len * 8, "{:?}", f.interface);
            }
        }
        assert_eq!(bits(KEYBOARD, 0x90), 8, "one LED output byte");
    }

    #[test]
    fn collections_balance() {
        for d in [KEYBOARD, CONSUMER, POINTER, MOUSE] {
            let opens = d.windows(2).filter(|w| w[0] == 0xA1).count();
            let closes = d.iter().filter(|&&b| b == 0xC0).count();
            assert_eq!(opens, closes);
        }
    }

    #[test]
    fn order_and_fingerprint() {
        let abs = DescriptorSet { profile: PointerProfile::Absolute };
        let rel = DescriptorSet { profile: PointerProfile::Relative };
        let order: Vec<_> = abs.functions().iter().map(|f| f.interface).collect();
        assert_eq!(order, [HidInterface::Keyboard, HidInterface::Consumer, HidInterface::Pointer]);
        assert_ne!(abs.fingerprint(), rel.fingerprint());
        assert_eq!(abs.fingerprint(), abs.fingerprint());
    }
}
