//! The appliance's boot: which root slot runs, which one boots next, and the records that
//! carry an update's trial from one boot to the next (docs/updates.md).
//!
//! Three files, each with one writer:
//! - `tether.env` on the FAT boot partition ([`slots::BootEnv`]): U-Boot's boot script and
//!   `tether bootslot` (RAUC's custom boot backend, root). On a Raspberry Pi the A/B block
//!   of `config.txt` follows it ([`tryboot`]), written with it.
//! - `tether-trial.json` on the boot partition ([`TrialRecord`]): `tether bootslot trial`
//!   (root), so the old slot can say why the new one was rolled back.
//! - `/run/tether/health.json` ([`HealthReport`]): the daemon, once it has checked itself;
//!   the trial judge reads it.

pub mod files;
pub mod rauc;
pub mod slots;
pub mod tryboot;

use serde::{Deserialize, Serialize};

pub use slots::{BootEnv, BootStateError, BootedFrom, Slot, SlotState, LOADER_TRYBOOT, LOADER_UBOOT};

/// Where the FAT boot partition is mounted (rootfs/etc/fstab).
pub const BOOT_DIR: &str = "/boot/firmware";
/// The boot state's file name on the boot partition (8.3, for U-Boot's `fatwrite`).
pub const BOOT_ENV_FILE: &str = "tether.env";
/// The last trial's record on the boot partition.
pub const TRIAL_FILE: &str = "tether-trial.json";
/// The daemon's health report (its runtime directory).
pub const HEALTH_FILE: &str = "/run/tether/health.json";
/// Created by the daemon to ask for a reboot (tether-reboot.path acts on it as root).
pub const REBOOT_REQUEST: &str = "/run/tether/reboot";

/// How a trial ended (or that it is still running).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TrialOutcome {
    /// The slot booted and is being judged.
    Trying,
    /// The daemon reported healthy; the slot was marked good.
    Good,
    /// Judged unhealthy on the slot itself; it was marked bad and the board rebooted.
    Failed,
    /// Back on the old slot after a trial that failed or never reached a verdict.
    RolledBack,
}

/// The last update trial, as the judge recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrialRecord {
    /// The slot on trial.
    pub slot: Slot,
    /// The version it carried (its IMAGE_VERSION), when it got far enough to say.
    pub version: Option<String>,
    /// How it ended.
    pub outcome: TrialOutcome,
    /// Why it failed or was rolled back (empty otherwise).
    #[serde(default)]
    pub reason: String,
    /// When the record was last written (Unix seconds; the board may have no RTC).
    pub at_unix: u64,
}

/// The record the judge writes on `booted` about the other slot's trial, when there was one
/// that ended without this slot being replaced: the trial failed (its judge said why and
/// rebooted), never reached a verdict (`Trying` left behind), or never started (the boot
/// script passed over the slot after `tries` boots: no record from it at all). None when
/// there is nothing to roll back. The caller also marks that slot bad.
pub fn rolled_back(
    env: &BootEnv,
    last: Option<&TrialRecord>,
    booted: Slot,
    tries: u32,
    now_unix: u64,
) -> Option<TrialRecord> {
    let failed_elsewhere = last
        .filter(|t| t.slot != booted && matches!(t.outcome, TrialOutcome::Failed | TrialOutcome::Trying))
        .map(|t| t.slot);
    let slot = env.abandoned_trial(booted).or(failed_elsewhere)?;
    let mut record = last.filter(|r| r.slot == slot).cloned().unwrap_or(TrialRecord {
        slot,
        version: None,
        outcome: TrialOutcome::Trying,
        reason: String::new(),
        at_unix: now_unix,
    });
    if record.reason.is_empty() {
        record.reason = match record.outcome {
            TrialOutcome::Trying if last.is_some_and(|r| r.slot == slot) => format!(
                "slot {slot} started its trial but reached no verdict in {tries} boots (the system stopped or rebooted before its health check ended)"
            ),
            _ => format!("slot {slot} did not come up far enough to be judged in {tries} boots (kernel or early boot)"),
        };
    }
    record.outcome = TrialOutcome::RolledBack;
    record.at_unix = now_unix;
    Some(record)
}

/// One check of the daemon's health report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthCheck {
    /// `daemon`, `https`, `hid_gadget`.
    pub name: String,
    /// Passed.
    pub ok: bool,
    /// What was seen.
    pub detail: String,
}

/// What the daemon wrote after checking itself at start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthReport {
    /// Every check passed.
    pub ok: bool,
    /// The checks, in the order they ran.
    pub checks: Vec<HealthCheck>,
    /// The first failure, as a sentence (empty when healthy).
    #[serde(default)]
    pub reason: String,
}

impl HealthReport {
    /// A report from its checks: healthy when all passed, else the first failure's detail.
    pub fn from_checks(checks: Vec<HealthCheck>) -> HealthReport {
        let reason = checks.iter().find(|c| !c.ok).map(|c| format!("{}: {}", c.name, c.detail)).unwrap_or_default();
        HealthReport { ok: reason.is_empty(), checks, reason }
    }
}

/// The image's version and identity from os-release (`IMAGE_ID`, `IMAGE_VERSION`: the
/// build writes them). None on a machine that is not a tether image.
pub fn image_version(os_release: &str) -> Option<(String, String)> {
    let mut id = None;
    let mut version = None;
    for line in os_release.lines() {
        let Some((k, v)) = line.split_once('=') else { continue };
        let v = v.trim().trim_matches('"').to_string();
        match k.trim() {
            "IMAGE_ID" => id = Some(v),
            "IMAGE_VERSION" => version = Some(v),
            _ => {}
        }
    }
    Some((id?, version?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_names_the_first_failure() {
        let ok = |name: &str| HealthCheck { name: name.into(), ok: true, detail: "fine".into() };
        assert_eq!(HealthReport::from_checks(vec![ok("daemon"), ok("https")]).reason, "");
        let bad = HealthCheck { name: "https".into(), ok: false, detail: "no answer on 127.0.0.1:443".into() };
        let r = HealthReport::from_checks(vec![ok("daemon"), bad, ok("hid_gadget")]);
        assert!(!r.ok);
        assert_eq!(r.reason, "https: no answer on 127.0.0.1:443");
    }

    #[test]
    fn os_release_gives_the_image_and_its_version() {
        let text =
            "PRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\nID=debian\nIMAGE_ID=tether-rpi4\nIMAGE_VERSION=\"1.4.2\"\n";
        assert_eq!(image_version(text), Some(("tether-rpi4".into(), "1.4.2".into())));
        assert_eq!(image_version("ID=debian\n"), None);
    }

    fn trial(slot: Slot, outcome: TrialOutcome, reason: &str) -> TrialRecord {
        TrialRecord { slot, version: Some("2".into()), outcome, reason: reason.into(), at_unix: 1 }
    }

    #[test]
    fn a_failed_trial_is_rolled_back_with_its_own_reason() {
        // The judge on b marked it bad and rebooted: a is first again.
        let env = BootEnv::parse(b"tether_order=a b\ntether_a_state=good\ntether_b_state=bad\n");
        let last = trial(Slot::B, TrialOutcome::Failed, "tether.service failed to start");
        let r = rolled_back(&env, Some(&last), Slot::A, 3, 9).unwrap();
        assert_eq!(
            (r.slot, r.outcome, r.reason.as_str(), r.at_unix),
            (Slot::B, TrialOutcome::RolledBack, "tether.service failed to start", 9)
        );
        assert_eq!(r.version.as_deref(), Some("2"));
        // Recorded once: the next boot finds nothing more to do.
        assert_eq!(rolled_back(&env, Some(&r), Slot::A, 3, 10), None);
    }

    #[test]
    fn a_trial_without_a_verdict_or_a_record_is_rolled_back_too() {
        // U-Boot passed over b (no tries left) and booted a; b started its trial.
        let env = BootEnv::parse(b"tether_order=b a\ntether_a_state=good\ntether_b_state=try\ntether_b_left=0\n");
        let started = trial(Slot::B, TrialOutcome::Trying, "");
        let r = rolled_back(&env, Some(&started), Slot::A, 3, 5).unwrap();
        assert!(r.reason.contains("reached no verdict in 3 boots"), "{}", r.reason);
        // b never got as far as its judge: no record at all.
        let r = rolled_back(&env, None, Slot::A, 3, 5).unwrap();
        assert!(r.reason.contains("did not come up far enough"), "{}", r.reason);
        assert_eq!(r.version, None);
        // An old record of a's own trial says nothing about b.
        let old = trial(Slot::A, TrialOutcome::Good, "");
        assert!(rolled_back(&env, Some(&old), Slot::A, 3, 5).unwrap().reason.contains("did not come up"));
    }

    #[test]
    fn nothing_to_roll_back_on_a_kept_update_or_during_a_trial() {
        let kept = BootEnv::parse(b"tether_order=b a\ntether_a_state=good\ntether_b_state=good\n");
        assert_eq!(rolled_back(&kept, Some(&trial(Slot::B, TrialOutcome::Good, "")), Slot::B, 3, 1), None);
        let trying = BootEnv::parse(b"tether_order=b a\ntether_a_state=good\ntether_b_state=try\ntether_b_left=2\n");
        assert_eq!(rolled_back(&trying, Some(&trial(Slot::B, TrialOutcome::Trying, "")), Slot::B, 3, 1), None);
    }

    #[test]
    fn trial_records_read_back() {
        let r = TrialRecord {
            slot: Slot::B,
            version: Some("2".into()),
            outcome: TrialOutcome::RolledBack,
            reason: "x".into(),
            at_unix: 5,
        };
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains(r#""outcome":"rolled-back""#) && text.contains(r#""slot":"b""#), "{text}");
        assert_eq!(serde_json::from_str::<TrialRecord>(&text).unwrap(), r);
    }
}
