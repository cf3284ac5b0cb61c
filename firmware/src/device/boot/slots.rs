//! The A/B boot state that U-Boot's boot script and `tether bootslot` share: `tether.env` on
//! the FAT boot partition, `name=value` lines (U-Boot's `env export -t` format).
//!
//! The script (board/lib/boot/tether-boot.cmd) walks `tether_order` and boots the first slot
//! that is `good`, or `try` with tries left (spending one before the kernel starts). Linux
//! changes the state only through [`BootEnv`]'s operations, which keep every variable they
//! do not know (a site's `tether_extra_args`) as it was.

use std::fmt;
use std::str::FromStr;

/// One of the two root slots. Slot A is partition 2, slot B partition 3 (docs/image.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Slot {
    /// Partition 2: the slot `flash.sh build` writes.
    A,
    /// Partition 3: empty until the first update.
    B,
}

impl Slot {
    /// Both slots, A first.
    pub const ALL: [Slot; 2] = [Slot::A, Slot::B];

    /// The name in `tether.env`, RAUC's `bootname` and the kernel's `tether.slot=`.
    pub fn bootname(self) -> &'static str {
        match self {
            Slot::A => "a",
            Slot::B => "b",
        }
    }

    /// The other slot (where an update goes).
    pub fn other(self) -> Slot {
        match self {
            Slot::A => Slot::B,
            Slot::B => Slot::A,
        }
    }

    /// Its partition number on the boot disk.
    pub fn partition(self) -> u8 {
        match self {
            Slot::A => 2,
            Slot::B => 3,
        }
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.bootname())
    }
}

impl FromStr for Slot {
    type Err = BootStateError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "a" | "A" => Ok(Slot::A),
            "b" | "B" => Ok(Slot::B),
            other => Err(BootStateError::UnknownSlot(other.to_string())),
        }
    }
}

/// What the boot script does with a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    /// Boots whenever it comes first in the order.
    Good,
    /// On trial: boots while `left` tries remain; each boot spends one.
    Try {
        /// Boots left before the script passes over it.
        left: u8,
    },
    /// Never booted (an update was written there and failed, or nothing was).
    Bad,
}

/// Errors reading or changing the boot state.
#[derive(Debug, thiserror::Error)]
pub enum BootStateError {
    /// A slot name that is neither `a` nor `b`.
    #[error("unknown slot '{0}': the slots are a and b")]
    UnknownSlot(String),
    /// A state that is neither `good` nor `bad` (what RAUC's backend interface sets).
    #[error("unknown slot state '{0}': expected good or bad")]
    UnknownState(String),
    /// Tries out of the range the boot script counts (1..=9: it compares single digits).
    #[error("tries must be 1 to 9, not {0}")]
    Tries(u32),
}

/// The parsed `tether.env`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootEnv {
    order: [Slot; 2],
    a: SlotState,
    b: SlotState,
    /// Variables this code does not interpret, in file order (kept on every write).
    other: Vec<(String, String)>,
}

impl Default for BootEnv {
    /// What the script assumes with no file: A good and first, B bad.
    fn default() -> Self {
        BootEnv { order: [Slot::A, Slot::B], a: SlotState::Good, b: SlotState::Bad, other: Vec::new() }
    }
}

impl BootEnv {
    /// Parses the file's bytes. Never fails: U-Boot writes a trailing NUL, a power cut can
    /// leave a torn file, and a value it cannot read falls back to what the script assumes
    /// for it (the same defaults), so Linux and the script agree on what boots next.
    pub fn parse(bytes: &[u8]) -> BootEnv {
        let mut env = BootEnv::default();
        let text = String::from_utf8_lossy(bytes);
        let (mut a_state, mut a_left, mut b_state, mut b_left) = (None, 0u8, None, 0u8);
        for line in text.split(['\n', '\0']) {
            let line = line.trim_end_matches('\r');
            let Some((name, value)) = line.split_once('=') else { continue };
            match name {
                "tether_order" => {
                    let mut it = value.split_whitespace().filter_map(|s| s.parse::<Slot>().ok());
                    if let (Some(first), Some(second)) = (it.next(), it.next()) {
                        if first != second {
                            env.order = [first, second];
                        }
                    }
                }
                "tether_a_state" => a_state = Some(value.to_string()),
                "tether_b_state" => b_state = Some(value.to_string()),
                "tether_a_left" => a_left = value.trim().parse().unwrap_or(0),
                "tether_b_left" => b_left = value.trim().parse().unwrap_or(0),
                _ if name.is_empty() => {}
                _ => env.other.push((name.to_string(), value.to_string())),
            }
        }
        env.a = state_of(a_state.as_deref(), a_left).unwrap_or(SlotState::Good);
        env.b = state_of(b_state.as_deref(), b_left).unwrap_or(SlotState::Bad);
        env
    }

    /// The file's text: every variable the script imports, then the others.
    pub fn render(&self) -> String {
        let mut out = format!("tether_order={} {}\n", self.order[0], self.order[1]);
        for slot in Slot::ALL {
            let (state, left) = match self.state(slot) {
                SlotState::Good => ("good", 0),
                SlotState::Try { left } => ("try", left),
                SlotState::Bad => ("bad", 0),
            };
            out.push_str(&format!("tether_{slot}_state={state}\ntether_{slot}_left={left}\n"));
        }
        for (name, value) in &self.other {
            out.push_str(&format!("{name}={value}\n"));
        }
        out
    }

    /// The slots in the order the script tries them.
    pub fn order(&self) -> [Slot; 2] {
        self.order
    }

    /// A slot's state.
    pub fn state(&self, slot: Slot) -> SlotState {
        match slot {
            Slot::A => self.a,
            Slot::B => self.b,
        }
    }

    fn set(&mut self, slot: Slot, state: SlotState) {
        match slot {
            Slot::A => self.a = state,
            Slot::B => self.b = state,
        }
    }

    /// RAUC's `get-primary`: the first slot in the order.
    pub fn primary(&self) -> Slot {
        self.order[0]
    }

    /// The slot the script boots next: the first good one, or on trial with a try left.
    pub fn next_boot(&self) -> Slot {
        self.order
            .into_iter()
            .find(|&s| match self.state(s) {
                SlotState::Good => true,
                SlotState::Try { left } => left > 0,
                SlotState::Bad => false,
            })
            .unwrap_or(Slot::A)
    }

    /// RAUC's `set-primary` after it wrote an update into `slot`: first in the order, on
    /// trial with `tries` boots. The other slot keeps its state (good: it is the way back).
    pub fn set_primary(&mut self, slot: Slot, tries: u32) -> Result<(), BootStateError> {
        let left = u8::try_from(tries).ok().filter(|t| (1..=9).contains(t)).ok_or(BootStateError::Tries(tries))?;
        self.order = [slot, slot.other()];
        self.set(slot, SlotState::Try { left });
        Ok(())
    }

    /// RAUC's `set-state SLOT good|bad`. Good ends a trial; bad takes the slot out of the
    /// boot and, when it was first, puts the other slot first.
    pub fn set_state(&mut self, slot: Slot, state: &str) -> Result<(), BootStateError> {
        match state {
            "good" => self.set(slot, SlotState::Good),
            "bad" => {
                self.set(slot, SlotState::Bad);
                if self.order[0] == slot {
                    self.order = [slot.other(), slot];
                }
            }
            other => return Err(BootStateError::UnknownState(other.to_string())),
        }
        Ok(())
    }

    /// RAUC's `get-state`: `good` for a slot that may boot (good, or on trial with tries
    /// left), `bad` otherwise.
    pub fn rauc_state(&self, slot: Slot) -> &'static str {
        match self.state(slot) {
            SlotState::Good => "good",
            SlotState::Try { left } if left > 0 => "good",
            _ => "bad",
        }
    }

    /// Whether `booted` is on trial: it booted with tries counted and was not yet marked good.
    pub fn on_trial(&self, booted: Slot) -> bool {
        matches!(self.state(booted), SlotState::Try { .. })
    }

    /// A trial that ended without a verdict: the first slot in the order is on trial, but
    /// the system booted the other one (its tries ran out, or U-Boot passed over it).
    pub fn abandoned_trial(&self, booted: Slot) -> Option<Slot> {
        let first = self.order[0];
        (first != booted && matches!(self.state(first), SlotState::Try { .. })).then_some(first)
    }
}

fn state_of(state: Option<&str>, left: u8) -> Option<SlotState> {
    match state?.trim() {
        "good" => Some(SlotState::Good),
        "try" => Some(SlotState::Try { left: left.min(9) }),
        "bad" => Some(SlotState::Bad),
        _ => None,
    }
}

/// The kernel command line's word about the boot: which slot (`tether.slot=`) and how it was
/// chosen (`tether.boot=`: `u-boot` or `tryboot`). None when neither is there (a direct
/// kernel boot, a development machine).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootedFrom {
    /// The slot the boot loader chose.
    pub slot: Slot,
    /// `u-boot`, `tryboot` or whatever the command line said.
    pub loader: String,
}

/// `tether.boot=` of a boot through U-Boot's boot script (tries counted by the script).
pub const LOADER_UBOOT: &str = "u-boot";
/// `tether.boot=` of a Raspberry Pi booting a slot's files under `os_prefix` (one-shot
/// `tryboot` for a slot on trial; [`super::tryboot`]).
pub const LOADER_TRYBOOT: &str = "tryboot";

impl BootedFrom {
    /// Whether this boot came through a loader that can try an update and fall back
    /// (U-Boot's boot script, or the Pi firmware's tryboot), so updates may be installed
    /// and trials judged.
    pub fn can_try_updates(&self) -> bool {
        matches!(self.loader.as_str(), LOADER_UBOOT | LOADER_TRYBOOT)
    }

    /// Reads `tether.slot=` and `tether.boot=` from a kernel command line.
    pub fn from_cmdline(cmdline: &str) -> Option<BootedFrom> {
        let mut slot = None;
        let mut loader = None;
        for word in cmdline.split_whitespace() {
            if let Some(v) = word.strip_prefix("tether.slot=") {
                slot = v.parse().ok();
            } else if let Some(v) = word.strip_prefix("tether.boot=") {
                loader = Some(v.to_string());
            }
        }
        Some(BootedFrom { slot: slot?, loader: loader.unwrap_or_else(|| "unknown".into()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_u_boot_exports_with_its_trailing_nul() {
        let env = BootEnv::parse(
            b"tether_order=b a\ntether_a_state=good\ntether_a_left=0\ntether_b_state=try\ntether_b_left=0\ntether_extra_args=quiet x=1\n\0",
        );
        assert_eq!(env.order(), [Slot::B, Slot::A]);
        assert_eq!(env.state(Slot::B), SlotState::Try { left: 0 });
        // B has no tries left: the script boots A, and the trial of B was abandoned.
        assert_eq!(env.next_boot(), Slot::A);
        assert_eq!(env.abandoned_trial(Slot::A), Some(Slot::B));
        assert_eq!(env.rauc_state(Slot::B), "bad");
        assert!(env.render().contains("tether_extra_args=quiet x=1\n"), "{}", env.render());
    }

    #[test]
    fn an_update_is_tried_then_kept_or_dropped() {
        let mut env = BootEnv::default();
        assert_eq!((env.primary(), env.next_boot()), (Slot::A, Slot::A));
        env.set_primary(Slot::B, 2).unwrap();
        assert_eq!(
            env.render(),
            "tether_order=b a\ntether_a_state=good\ntether_a_left=0\ntether_b_state=try\ntether_b_left=2\n"
        );
        assert!(env.on_trial(Slot::B) && !env.on_trial(Slot::A));
        assert_eq!(env.next_boot(), Slot::B);
        let mut kept = env.clone();
        kept.set_state(Slot::B, "good").unwrap();
        assert_eq!((kept.primary(), kept.state(Slot::B)), (Slot::B, SlotState::Good));
        assert!(!kept.on_trial(Slot::B));
        let mut dropped = env;
        dropped.set_state(Slot::B, "bad").unwrap();
        assert_eq!((dropped.primary(), dropped.next_boot()), (Slot::A, Slot::A));
        assert_eq!(dropped.abandoned_trial(Slot::A), None);
    }

    #[test]
    fn torn_or_foreign_files_fall_back_to_what_the_script_assumes() {
        for bytes in [&b""[..], b"tether_order=b", b"tether_a_state=gosh\ntether_order=a a", b"\xff\xfe=\n=x\n"] {
            let env = BootEnv::parse(bytes);
            assert_eq!(
                (env.primary(), env.state(Slot::A), env.state(Slot::B)),
                (Slot::A, SlotState::Good, SlotState::Bad)
            );
        }
        // Round trip.
        let mut env = BootEnv::parse(b"tether_extra_args=console=ttyAMA0\n");
        env.set_primary(Slot::B, 3).unwrap();
        assert_eq!(BootEnv::parse(env.render().as_bytes()), env);
    }

    #[test]
    fn refuses_what_the_script_cannot_count_or_rauc_cannot_mean() {
        let mut env = BootEnv::default();
        assert!(matches!(env.set_primary(Slot::B, 0), Err(BootStateError::Tries(0))));
        assert!(matches!(env.set_primary(Slot::B, 10), Err(BootStateError::Tries(10))));
        assert!(matches!(env.set_state(Slot::B, "meh"), Err(BootStateError::UnknownState(_))));
        assert!(matches!("c".parse::<Slot>(), Err(BootStateError::UnknownSlot(_))));
    }

    #[test]
    fn the_command_line_names_the_slot_and_loader() {
        let b = BootedFrom::from_cmdline("root=PARTUUID=74657468-03 ro tether.slot=b tether.boot=u-boot rauc.slot=b")
            .unwrap();
        assert_eq!((b.slot, b.loader.as_str()), (Slot::B, "u-boot"));
        assert!(b.can_try_updates());
        let pi = BootedFrom::from_cmdline("root=PARTUUID=74657468-02 tether.slot=a tether.boot=tryboot").unwrap();
        assert!(pi.can_try_updates());
        // A Pi image from before tryboot: its slot is known, but it cannot try an update.
        let old =
            BootedFrom::from_cmdline("root=PARTUUID=74657468-02 tether.slot=a tether.boot=raspi-firmware").unwrap();
        assert!(!old.can_try_updates());
        assert_eq!(BootedFrom::from_cmdline("root=LABEL=tether-a ro"), None);
    }
}
