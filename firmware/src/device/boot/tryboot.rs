//! The Raspberry Pi's A/B switch: a block at the end of `config.txt` that the firmware reads.
//!
//! The Pi firmware does not run U-Boot or count tries; it reads `config.txt` and loads the
//! kernel, initrd, device trees, overlays and `cmdline.txt` under `os_prefix`. Each slot's
//! boot files live in their own directory on the one FAT partition (`slot-a/`, `slot-b/`,
//! copied there by the bundle's RAUC hook), and the block says which directory a normal
//! boot uses and which one a `tryboot` boot uses (`reboot '0 tryboot'`: one boot only, then
//! normal again):
//!
//! ```text
//! # tether: A/B slots (tether bootslot rewrites this block; docs/updates.md)
//! [all]
//! os_prefix=slot-a/
//! [tryboot]
//! os_prefix=slot-b/
//! [all]
//! # tether: end of A/B slots
//! ```
//!
//! `tether.env` stays the state of record on every board ([`BootEnv`]); the block follows it:
//! the normal slot is the first *good* slot in its order, so an update on trial is reached
//! only through `tryboot`, and marking it good makes it the normal slot (the commit).
//! Everything outside the block is left byte for byte.

use super::{BootEnv, BootedFrom, Slot, SlotState, LOADER_TRYBOOT};

/// The firmware's configuration file on the boot partition.
pub const CONFIG_FILE: &str = "config.txt";

/// The reboot argument that makes the next boot (only) a tryboot one.
pub const TRYBOOT_REBOOT_ARG: &str = "0 tryboot";

const BEGIN: &str = "# tether: A/B slots (tether bootslot rewrites this block; docs/updates.md)";
const END: &str = "# tether: end of A/B slots";

/// A `config.txt` whose block cannot be read: nothing is rewritten.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrybootError {
    /// The block starts but does not end.
    #[error("config.txt: the tether A/B block has no end line ({END:?})")]
    Unterminated,
    /// The block's lines are not the ones tether writes.
    #[error("config.txt: the tether A/B block was edited ({0}); restore it (docs/updates.md) before updating")]
    Edited(String),
}

/// The block that boots `normal` normally and the other slot on a tryboot.
pub fn block(normal: Slot) -> String {
    format!("{BEGIN}\n[all]\nos_prefix=slot-{normal}/\n[tryboot]\nos_prefix=slot-{}/\n[all]\n{END}\n", normal.other())
}

/// The directory on the boot partition that holds `slot`'s boot files.
pub fn slot_dir(slot: Slot) -> String {
    format!("slot-{slot}")
}

/// The block as found in a `config.txt`: its line range (begin..=end) and its normal slot.
struct Found {
    begin: usize,
    end: usize,
    normal: Slot,
}

/// Finds and checks the block; None without one.
fn find(config: &str) -> Result<Option<Found>, TrybootError> {
    let lines: Vec<&str> = config.lines().map(str::trim_end).collect();
    let Some(begin) = lines.iter().position(|&l| l == BEGIN) else {
        return Ok(None);
    };
    let end = begin + lines[begin..].iter().position(|&l| l == END).ok_or(TrybootError::Unterminated)?;
    let prefix =
        |line: &str| line.strip_prefix("os_prefix=slot-").and_then(|s| s.strip_suffix('/'))?.parse::<Slot>().ok();
    match &lines[begin + 1..end] {
        ["[all]", normal, "[tryboot]", tryboot, "[all]"] => match (prefix(normal), prefix(tryboot)) {
            (Some(n), Some(t)) if n != t => Ok(Some(Found { begin, end, normal: n })),
            _ => Err(TrybootError::Edited(format!("os_prefix lines {normal:?}, {tryboot:?}"))),
        },
        other => Err(TrybootError::Edited(format!("{} lines between its first and last", other.len()))),
    }
}

/// The slot a normal boot uses, or None when `config` has no tether block (a board that does
/// not boot through the Pi firmware, or an image from before tryboot).
///
/// # Errors
///
/// The block is unterminated or its lines are not tether's.
pub fn normal_slot(config: &str) -> Result<Option<Slot>, TrybootError> {
    Ok(find(config)?.map(|f| f.normal))
}

fn rewrite(config: &str, found: &Found, normal: Slot) -> String {
    let mut out = String::with_capacity(config.len());
    for (i, line) in config.split_inclusive('\n').enumerate() {
        if i == found.begin {
            out.push_str(&block(normal));
        } else if !(found.begin..=found.end).contains(&i) {
            out.push_str(line);
        }
    }
    out
}

/// `config` with the block booting `normal` normally; everything else unchanged. None when
/// there is no block. (The appliance rewrites through [`follow`]; the tests swap directly.)
#[cfg(test)]
fn with_normal(config: &str, normal: Slot) -> Result<Option<String>, TrybootError> {
    Ok(find(config)?.map(|found| rewrite(config, &found, normal)))
}

/// `config` rewritten so its block follows `env` ([`normal_for`]); None when there is no
/// block or it already does (nothing to write).
///
/// # Errors
///
/// As [`normal_slot`].
pub fn follow(config: &str, env: &BootEnv) -> Result<Option<String>, TrybootError> {
    Ok(find(config)?.and_then(|found| {
        let normal = normal_for(env, found.normal);
        (normal != found.normal).then(|| rewrite(config, &found, normal))
    }))
}

/// The slot a normal boot should use for `env`: the first good slot in its order (a slot on
/// trial is reached by a tryboot only), else `current` (nothing is good: leave it).
pub fn normal_for(env: &BootEnv, current: Slot) -> Slot {
    env.order().into_iter().find(|&s| env.state(s) == SlotState::Good).unwrap_or(current)
}

/// The reboot argument that boots what `env` wants next: [`TRYBOOT_REBOOT_ARG`] on a Pi
/// booted through its firmware (`booted` says `tryboot`) whose next boot is a slot on trial
/// that the block's `normal` boot would not reach; None for a plain reboot. An image with the
/// block booted another way (the lab's U-Boot reads `tether.env` itself) reboots plainly.
pub fn reboot_arg(booted: Option<&BootedFrom>, env: &BootEnv, normal: Option<Slot>) -> Option<&'static str> {
    let normal = normal.filter(|_| booted.is_some_and(|b| b.loader == LOADER_TRYBOOT))?;
    let next = env.next_boot();
    (next != normal && env.on_trial(next)).then_some(TRYBOOT_REBOOT_ARG)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RASPI: &str = "# Do not modify this file!\narm_64bit=1\n\nkernel=vmlinuz\ninitramfs initrd.img\n";

    fn with_block(normal: Slot, after: &str) -> String {
        format!("{RASPI}dtoverlay=tether-tc358743\n{}{after}", block(normal))
    }

    #[test]
    fn the_block_names_the_normal_slot_and_a_config_without_it_is_not_a_tryboot_board() {
        assert_eq!(normal_slot(RASPI), Ok(None));
        assert_eq!(with_normal(RASPI, Slot::B), Ok(None));
        assert_eq!(normal_slot(&with_block(Slot::A, "")), Ok(Some(Slot::A)));
        assert_eq!(normal_slot(&with_block(Slot::B, "hdmi_force_hotplug=1\n")), Ok(Some(Slot::B)));
        assert!(block(Slot::A).contains("[all]\nos_prefix=slot-a/\n[tryboot]\nos_prefix=slot-b/\n[all]\n"));
    }

    #[test]
    fn swapping_rewrites_the_block_only() {
        let before = with_block(Slot::A, "# the owner's own line\r\nhdmi_force_hotplug=1");
        let after = with_normal(&before, Slot::B).unwrap().unwrap();
        assert_eq!(normal_slot(&after), Ok(Some(Slot::B)));
        assert!(after.starts_with(&format!("{RASPI}dtoverlay=tether-tc358743\n")));
        assert!(after.ends_with("# the owner's own line\r\nhdmi_force_hotplug=1"), "{after:?}");
        assert_eq!(after.len(), before.len());
        assert_eq!(with_normal(&after, Slot::A).unwrap().unwrap(), before);
    }

    #[test]
    fn an_edited_block_is_refused_not_guessed() {
        let unterminated = format!("{RASPI}{BEGIN}\n[all]\nos_prefix=slot-a/\n");
        assert_eq!(normal_slot(&unterminated), Err(TrybootError::Unterminated));
        let same = block(Slot::A).replace("os_prefix=slot-b/", "os_prefix=slot-a/");
        assert!(matches!(normal_slot(&same), Err(TrybootError::Edited(_))));
        let extra = block(Slot::A).replace("[tryboot]\n", "[tryboot]\nkernel=other\n");
        assert!(matches!(normal_slot(&extra), Err(TrybootError::Edited(_))));
        assert!(with_normal(&extra, Slot::B).is_err(), "nothing is rewritten around an edit");
    }

    #[test]
    fn the_normal_slot_follows_the_boot_state() {
        let pi = BootedFrom::from_cmdline("root=PARTUUID=74657468-02 tether.slot=a tether.boot=tryboot");
        let pi = pi.as_ref();
        let mut env = BootEnv::default();
        assert_eq!(normal_for(&env, Slot::A), Slot::A);
        // An update written into b: on trial, reached by tryboot only.
        env.set_primary(Slot::B, 3).unwrap();
        assert_eq!(normal_for(&env, Slot::A), Slot::A);
        assert_eq!(reboot_arg(pi, &env, Some(Slot::A)), Some(TRYBOOT_REBOOT_ARG));
        // The same image booted through U-Boot (the lab), or a board without the block: plain.
        let uboot = BootedFrom::from_cmdline("root=PARTUUID=74657468-02 tether.slot=a tether.boot=u-boot");
        assert_eq!(reboot_arg(uboot.as_ref(), &env, Some(Slot::A)), None);
        assert_eq!(reboot_arg(None, &env, Some(Slot::A)), None);
        assert_eq!(reboot_arg(pi, &env, None), None);
        // Judged good: b is the normal boot (the commit), a the way back.
        env.set_state(Slot::B, "good").unwrap();
        assert_eq!(normal_for(&env, Slot::A), Slot::B);
        assert_eq!(reboot_arg(pi, &env, Some(Slot::B)), None);
        // Judged failed instead: a stays normal, a plain reboot returns to it.
        let mut failed = BootEnv::default();
        failed.set_primary(Slot::B, 3).unwrap();
        failed.set_state(Slot::B, "bad").unwrap();
        assert_eq!(normal_for(&failed, Slot::A), Slot::A);
        assert_eq!(reboot_arg(pi, &failed, Some(Slot::A)), None);
        // Nothing good at all: leave the block as it is.
        let mut none = BootEnv::default();
        none.set_state(Slot::A, "bad").unwrap();
        assert_eq!(normal_for(&none, Slot::B), Slot::B);
    }
}
