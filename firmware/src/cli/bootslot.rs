//! `tether bootslot`: RAUC's custom boot backend and the judge of an update's trial (root,
//! on the appliance; docs/updates.md).

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::Subcommand;
use tether::device::boot::files::BootDir;
use tether::device::boot::{
    self, rauc, tryboot, BootedFrom, HealthReport, Slot, SlotState, TrialOutcome, TrialRecord, BOOT_DIR, HEALTH_FILE,
};

/// How many boots a freshly installed slot gets before U-Boot passes over it (a boot that
/// dies before the judge runs spends one; the judge marks a failure bad at once).
const TRIES: u32 = 3;

/// `tether bootslot` subcommands.
#[derive(Debug, Subcommand)]
pub enum BootslotCommand {
    /// RAUC backend: print the slot that boots first (a or b).
    GetPrimary,
    /// RAUC backend: put SLOT first, on trial (after RAUC wrote an update into it).
    SetPrimary {
        /// a or b.
        slot: Slot,
    },
    /// RAUC backend: print good or bad for SLOT.
    GetState {
        /// a or b.
        slot: Slot,
    },
    /// RAUC backend: mark SLOT good (ends a trial) or bad (never boots it).
    SetState {
        /// a or b.
        slot: Slot,
        /// good or bad.
        state: String,
    },
    /// RAUC backend: print the booted slot (from the kernel command line).
    GetCurrent,
    /// Judge the booted slot when it is on trial (tether-trial.service runs this at boot):
    /// mark it good once the daemon reports healthy; else record why, mark it bad and
    /// reboot into the old slot. On a slot not on trial, record a trial that was rolled back.
    Trial {
        /// Seconds to wait for the daemon's health report before giving up on the slot.
        #[arg(long, default_value_t = 600)]
        deadline: u64,
        /// Give up once tether.service has been restarted this many times.
        #[arg(long, default_value_t = 3)]
        max_restarts: u32,
        /// Judge, record and mark, but do not reboot (for looking at a failure by hand).
        #[arg(long)]
        no_reboot: bool,
    },
    /// Print the boot state: booted slot, order, each slot's state, the last trial.
    Show,
    /// Reboot into what the boot state wants next (tether-reboot.service runs this for the
    /// daemon): on a Raspberry Pi whose next boot is a slot on trial, a one-shot
    /// `reboot '0 tryboot'`; otherwise a plain reboot.
    Reboot {
        /// Print the systemctl command instead of running it.
        #[arg(long)]
        dry_run: bool,
    },
}

fn boot_dir() -> BootDir {
    // TETHER_BOOT_DIR: the boot partition elsewhere (tests, a mounted card image).
    BootDir::new(std::env::var_os("TETHER_BOOT_DIR").map_or_else(|| PathBuf::from(BOOT_DIR), PathBuf::from))
}

fn booted() -> Option<BootedFrom> {
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    BootedFrom::from_cmdline(&cmdline)
}

fn now_unix() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn own_version() -> Option<String> {
    let text = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    boot::image_version(&text).map(|(_, v)| v)
}

/// Runs one `tether bootslot` command.
pub fn run_bootslot(cmd: BootslotCommand) -> anyhow::Result<ExitCode> {
    let dir = boot_dir();
    match cmd {
        BootslotCommand::GetPrimary => println!("{}", dir.read_env()?.primary()),
        BootslotCommand::SetPrimary { slot } => {
            let mut env = dir.read_env()?;
            env.set_primary(slot, TRIES)?;
            dir.write_env(&env)?;
        }
        BootslotCommand::GetState { slot } => println!("{}", dir.read_env()?.rauc_state(slot)),
        BootslotCommand::SetState { slot, state } => {
            let mut env = dir.read_env()?;
            env.set_state(slot, &state)?;
            dir.write_env(&env)?;
        }
        BootslotCommand::GetCurrent => match booted() {
            Some(b) => println!("{}", b.slot),
            None => bail!("the kernel command line names no tether.slot: not booted by tether's boot script"),
        },
        BootslotCommand::Trial { deadline, max_restarts, no_reboot } => {
            return trial(&dir, Duration::from_secs(deadline), max_restarts, no_reboot)
        }
        BootslotCommand::Show => {
            let env = dir.read_env()?;
            let b = booted();
            println!(
                "booted: {}",
                b.as_ref().map_or_else(|| "unknown (no tether.slot=)".into(), |b| format!("{} ({})", b.slot, b.loader))
            );
            println!("order: {} {}; next boot: {}", env.order()[0], env.order()[1], env.next_boot());
            for s in Slot::ALL {
                println!("slot {s}: {:?}", env.state(s));
            }
            match dir.read_trial() {
                Some(t) => println!("last trial: {}", serde_json::to_string(&t)?),
                None => println!("last trial: none"),
            }
            if let Some(normal) = dir.tryboot_normal()? {
                println!("config.txt: slot {normal} boots normally, slot {} on a tryboot", normal.other());
            }
        }
        BootslotCommand::Reboot { dry_run } => {
            // Whatever cannot be read, the reboot still happens: a plain one, which boots
            // the normal slot (the old one while an update is on trial).
            let env = dir.read_env().unwrap_or_else(|e| {
                println!("cannot read the boot state ({e}): a plain reboot");
                boot::BootEnv::default()
            });
            let normal = dir.tryboot_normal().unwrap_or_else(|e| {
                println!("{e}: a plain reboot");
                None
            });
            let arg = tryboot::reboot_arg(booted().as_ref(), &env, normal);
            let mut cmd = Command::new("systemctl");
            cmd.arg("reboot");
            if let Some(a) = arg {
                // systemd 257 takes the argument for reboot(2) as an option only.
                cmd.arg(format!("--reboot-argument={a}"));
            }
            if dry_run {
                println!("systemctl reboot{}", arg.map_or_else(String::new, |a| format!(" --reboot-argument={a:?}")));
            } else {
                println!(
                    "rebooting into slot {}{}",
                    env.next_boot(),
                    if arg.is_some() { " (tryboot: this boot only)" } else { "" }
                );
                let status = cmd.status().context("systemctl reboot")?;
                if !status.success() {
                    bail!("systemctl reboot failed ({status})");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn trial(dir: &BootDir, deadline: Duration, max_restarts: u32, no_reboot: bool) -> anyhow::Result<ExitCode> {
    let Some(booted) = booted() else {
        println!("not booted by tether's boot script (no tether.slot= on the command line): nothing to judge");
        return Ok(ExitCode::SUCCESS);
    };
    if !dir.path().join(boot::BOOT_ENV_FILE).is_file() {
        bail!(
            "booted slot {} by {}, but {} has no {}: is the boot partition mounted?",
            booted.slot,
            booted.loader,
            dir.path().display(),
            boot::BOOT_ENV_FILE
        );
    }
    let mut env = dir.read_env().context("read the boot state")?;
    // Back on this slot after the other one's trial: it failed (its judge said why and
    // rebooted), or ended without a verdict (the boot script passed over it).
    if let Some(record) = boot::rolled_back(&env, dir.read_trial().as_ref(), booted.slot, TRIES, now_unix()) {
        dir.write_trial(&record)?;
        if env.state(record.slot) != SlotState::Bad {
            env.set_state(record.slot, "bad")?;
            dir.write_env(&env)?;
        }
        println!("the update in slot {} was rolled back: {}", record.slot, record.reason);
    }
    if !booted.can_try_updates() {
        println!(
            "booted slot {} by {}: trials are judged for U-Boot's boot script and the Pi's tryboot only",
            booted.slot, booted.loader
        );
        return Ok(ExitCode::SUCCESS);
    }
    if !env.on_trial(booted.slot) {
        println!("slot {} is not on trial", booted.slot);
        return Ok(ExitCode::SUCCESS);
    }
    let version = own_version();
    let mut record = TrialRecord {
        slot: booted.slot,
        version: version.clone(),
        outcome: TrialOutcome::Trying,
        reason: String::new(),
        at_unix: now_unix(),
    };
    dir.write_trial(&record).context("record the trial")?;
    println!(
        "slot {} (version {}) is on trial: waiting for the daemon's health report",
        booted.slot,
        version.as_deref().unwrap_or("unknown")
    );
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let verdict = wait_for_verdict(deadline, max_restarts);
    match verdict {
        Ok(report) => {
            // Through RAUC (which calls `tether bootslot set-state`): a slot whose updater
            // cannot mark it good could not take the next update either.
            runtime.block_on(rauc::mark_booted(true)).context("rauc status mark-good")?;
            record.outcome = TrialOutcome::Good;
            record.at_unix = now_unix();
            dir.write_trial(&record)?;
            let checks: Vec<String> = report.checks.iter().map(|c| format!("{} ({})", c.name, c.detail)).collect();
            println!("slot {} is healthy and marked good: {}", booted.slot, checks.join("; "));
            Ok(ExitCode::SUCCESS)
        }
        Err(reason) => {
            println!("slot {} failed its trial: {reason}", booted.slot);
            record.outcome = TrialOutcome::Failed;
            record.reason = reason;
            record.at_unix = now_unix();
            dir.write_trial(&record)?;
            if let Err(e) = runtime.block_on(rauc::mark_booted(false)) {
                // RAUC may be what is broken: mark it bad ourselves.
                println!("rauc status mark-bad failed ({e}); marking slot {} bad directly", booted.slot);
                let mut env = dir.read_env()?;
                env.set_state(booted.slot, "bad")?;
                dir.write_env(&env)?;
            }
            if no_reboot {
                println!(
                    "--no-reboot: staying on slot {}; the next boot is slot {}",
                    booted.slot,
                    dir.read_env()?.next_boot()
                );
            } else {
                println!("rebooting into slot {}", dir.read_env()?.next_boot());
                let status = Command::new("systemctl").arg("reboot").status().context("systemctl reboot")?;
                if !status.success() {
                    bail!("systemctl reboot failed ({status})");
                }
            }
            Ok(ExitCode::from(1))
        }
    }
}

/// Waits for the daemon's health report; Err with the reason the slot fails.
fn wait_for_verdict(deadline: Duration, max_restarts: u32) -> Result<HealthReport, String> {
    let started = Instant::now();
    loop {
        if let Ok(bytes) = std::fs::read(HEALTH_FILE) {
            if let Ok(report) = serde_json::from_slice::<HealthReport>(&bytes) {
                return if report.ok {
                    Ok(report)
                } else {
                    Err(format!("the daemon's health check failed: {}", report.reason))
                };
            }
        }
        let unit = unit_state("tether.service");
        if unit.restarts >= max_restarts || unit.active == "failed" {
            // The journal is in RAM: the daemon's last words go into the record, or they
            // are gone after the reboot.
            let last = last_log_line("tether.service");
            let status = match unit.exit_status.as_str() {
                "" | "0" => String::new(),
                s => format!(", last exit status {s}"),
            };
            return Err(format!(
                "tether.service failed to start ({} restarts{status}){}",
                unit.restarts,
                if last.is_empty() { String::new() } else { format!(": {last}") }
            ));
        }
        if started.elapsed() >= deadline {
            return Err(format!("no health report from the daemon within {} s of boot", deadline.as_secs()));
        }
        // A poll: this is a one-shot unit, not a test; the daemon writes its report once.
        std::thread::sleep(Duration::from_secs(1));
    }
}

struct UnitState {
    active: String,
    exit_status: String,
    restarts: u32,
}

/// The unit's last log line this boot (its error, when it failed), at most 300 characters.
fn last_log_line(unit: &str) -> String {
    let out = Command::new("journalctl")
        // The unit's own processes only, not systemd's lines about it.
        .arg("-b")
        .arg(format!("_SYSTEMD_UNIT={unit}"))
        .args(["-n", "1", "-o", "cat", "--no-pager"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    out.chars().take(300).collect()
}

fn unit_state(unit: &str) -> UnitState {
    let out = Command::new("systemctl")
        .args(["show", unit, "-p", "ActiveState", "-p", "NRestarts", "-p", "ExecMainStatus"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default();
    let mut s = UnitState { active: String::new(), exit_status: String::new(), restarts: 0 };
    for line in out.lines() {
        match line.split_once('=') {
            Some(("ActiveState", v)) => s.active = v.to_string(),
            Some(("ExecMainStatus", v)) => s.exit_status = v.to_string(),
            Some(("NRestarts", v)) => s.restarts = v.parse().unwrap_or(0),
            _ => {}
        }
    }
    s
}
