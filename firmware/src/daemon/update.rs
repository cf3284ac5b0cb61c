//! Updates (docs/updates.md): what the appliance runs and what boots next (`update_status`),
//! a bundle received in pieces (`update_upload`), RAUC installing it into the other slot
//! (`update_install`), the reboot that tries it, and the daemon's health report that lets
//! the trial judge (`tether bootslot trial`, root) keep it.
//!
//! An install runs on a task of the daemon's own, never on the request that asked for it:
//! the client may go away (it usually does: the board reboots), RAUC goes on and the result
//! is kept for `update_status`. The daemon is unprivileged: RAUC's D-Bus service writes the
//! slot, and a reboot is asked of `tether-reboot.path` by creating a file.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Value};

use super::{Daemon, DaemonError};
use crate::device::boot::files::BootDir;
use crate::device::boot::{self, rauc, BootedFrom, HealthReport, Slot, SlotState, TrialOutcome, TrialRecord};
use crate::protocol::update_params::{
    UpdateInstallParams, UpdateUploadParams, MAX_BUNDLE_BYTES, MAX_UPLOAD_PIECE_BYTES,
};
use crate::protocol::ErrorCode;

/// Why an update method refused.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// Not an A/B appliance boot, or no data directory: `UPDATE_UNAVAILABLE`.
    #[error("{0}")]
    Unavailable(String),
    /// A piece that does not continue the bundle, a bad size, no whole bundle to install:
    /// `INVALID_PARAMS`.
    #[error("{0}")]
    Upload(String),
    /// An install is running: `BUSY`.
    #[error("an update is being installed; wait for it to end (update_status)")]
    Installing,
    /// A task has the phone: `TASK_ACTIVE`.
    #[error(
        "task {task} is {state}: an update reboots the appliance under it; wait for it to end, or install with force"
    )]
    TaskRunning {
        /// The task.
        task: i64,
        /// Its state.
        state: &'static str,
    },
    /// The running slot is an update still on trial: `BUSY`. Installing now would write the
    /// other slot, the way back, before this one is known to work.
    #[error(
        "slot {running} is an update still on trial (its judge decides within minutes of the boot); \
         installing now would overwrite slot {}, the way back: wait for the verdict (update_status: trial)",
        running.other()
    )]
    OnTrial {
        /// The running slot.
        running: Slot,
    },
    /// The bundle could not be stored: `STORAGE_FAILED`.
    #[error("could not store the bundle: {0}")]
    Storage(std::io::Error),
}

impl UpdateError {
    /// The wire code.
    pub fn code(&self) -> ErrorCode {
        match self {
            UpdateError::Unavailable(_) => ErrorCode::UpdateUnavailable,
            UpdateError::Upload(_) => ErrorCode::InvalidParams,
            UpdateError::Installing | UpdateError::OnTrial { .. } => ErrorCode::Busy,
            UpdateError::TaskRunning { .. } => ErrorCode::TaskActive,
            UpdateError::Storage(_) => ErrorCode::StorageFailed,
        }
    }
}

/// Where the daemon finds the appliance's boot and updater (`[update]` in the config; the
/// defaults are the image's paths).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpdateOptions {
    /// The FAT boot partition's mount point (`tether.env`, `tether-trial.json`).
    pub boot_dir: PathBuf,
    /// `/etc/os-release` (IMAGE_ID, IMAGE_VERSION).
    pub os_release: PathBuf,
    /// Where the kernel command line is read (tether.slot=, tether.boot=), first readable
    /// wins: `/proc/cmdline`, which the daemon's sandbox hides (ProcSubset=pid), then the
    /// device tree's `/chosen/bootargs`, which U-Boot and the Pi firmware both fill.
    pub cmdline: Vec<PathBuf>,
    /// The daemon's runtime directory: `health.json` and the `reboot` request go here (the
    /// control socket's directory; not a config key).
    #[serde(skip)]
    pub runtime_dir: PathBuf,
    /// The `rauc` program.
    pub rauc: PathBuf,
}

impl Default for UpdateOptions {
    fn default() -> Self {
        UpdateOptions::appliance(PathBuf::from("/run/tether"))
    }
}

impl UpdateOptions {
    /// The appliance's paths, with the runtime directory the control socket lives in.
    pub fn appliance(runtime_dir: PathBuf) -> UpdateOptions {
        UpdateOptions {
            boot_dir: PathBuf::from(boot::BOOT_DIR),
            os_release: PathBuf::from("/etc/os-release"),
            cmdline: vec![
                PathBuf::from("/proc/cmdline"),
                PathBuf::from("/sys/firmware/devicetree/base/chosen/bootargs"),
            ],
            runtime_dir,
            rauc: PathBuf::from("rauc"),
        }
    }
}

/// Where an install is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum InstallPhase {
    /// Nothing received or installed since the daemon started.
    #[default]
    Idle,
    /// A bundle is arriving (`update_upload`).
    Receiving,
    /// RAUC is checking and writing it.
    Installing,
    /// Written; the other slot boots next, on trial.
    Installed,
    /// RAUC refused or failed (`error` says why); nothing boots differently.
    Failed,
}

/// The install's progress, as `update_status` shows it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct InstallState {
    /// Where it is.
    pub phase: InstallPhase,
    /// Bytes of the bundle received.
    pub received: u64,
    /// The bundle's size, as the uploader announced it.
    pub total: u64,
    /// RAUC's percentage.
    pub percent: u8,
    /// RAUC's last progress message, or what the daemon is doing.
    pub message: String,
    /// Why it failed.
    pub error: Option<String>,
    /// Whether the daemon asked for the reboot that tries it.
    pub reboot_requested: bool,
}

/// The daemon's update state: the install's progress, in a watch channel (changed by the
/// upload and the install's own task, read by `update_status`; waiters see each change).
/// It is the updater's state, not the phone's, so it is not the phone owner's
/// ([`super::phone`]).
#[derive(Debug, Clone)]
pub struct Updates {
    install: Arc<tokio::sync::watch::Sender<InstallState>>,
}

impl Default for Updates {
    fn default() -> Self {
        Updates { install: Arc::new(tokio::sync::watch::Sender::new(InstallState::default())) }
    }
}

impl Updates {
    /// Changes the state; every subscriber is told.
    fn with<T>(&self, f: impl FnOnce(&mut InstallState) -> T) -> T {
        let mut out = None;
        self.install.send_modify(|s| out = Some(f(s)));
        // send_modify always runs the closure.
        out.unwrap_or_else(|| unreachable!("send_modify runs its closure"))
    }

    /// The install's state, and its changes.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<InstallState> {
        self.install.subscribe()
    }
}

/// One slot as `update_status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct SlotView {
    /// `a` or `b`.
    pub slot: Slot,
    /// `good`, `try` or `bad` (the boot script's view).
    pub state: &'static str,
    /// Tries left while on trial.
    pub tries_left: u8,
    /// Whether this is the running slot.
    pub booted: bool,
    /// The version installed there by an update (RAUC's record), when known.
    pub version: Option<String>,
    /// When RAUC installed it.
    pub installed_at: Option<String>,
}

/// The short form `status.update` carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UpdateSummary {
    /// The running slot.
    pub slot: Slot,
    /// The running image's version.
    pub version: String,
    /// The slot that boots next.
    pub next_boot: Slot,
    /// The last update, when it was rolled back: which slot, which version and why.
    pub rolled_back: Option<TrialRecord>,
}

fn state_name(s: SlotState) -> (&'static str, u8) {
    match s {
        SlotState::Good => ("good", 0),
        SlotState::Try { left } => ("try", left),
        SlotState::Bad => ("bad", 0),
    }
}

impl Daemon {
    fn update_options(&self) -> Option<&UpdateOptions> {
        self.inner.options.update.as_ref()
    }

    /// The image and boot, or why this daemon cannot take updates.
    fn update_context(&self) -> Result<(UpdateOptions, (String, String), BootedFrom), String> {
        let Some(o) = self.update_options() else {
            return Err("updates are for the appliance image (this daemon was started without one)".into());
        };
        let os = std::fs::read_to_string(&o.os_release).unwrap_or_default();
        let image = boot::image_version(&os)
            .ok_or_else(|| format!("{} has no IMAGE_ID/IMAGE_VERSION: not a tether image", o.os_release.display()))?;
        let cmdline = o.cmdline.iter().find_map(|p| std::fs::read(p).ok()).unwrap_or_default();
        // The device tree's string ends in a NUL.
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let booted = BootedFrom::from_cmdline(&cmdline).ok_or_else(|| {
            "the kernel command line names no tether.slot: this boot did not come through tether's boot script"
                .to_string()
        })?;
        if !booted.can_try_updates() {
            return Err(format!(
                "this board boots through {}: an image that cannot try an update and fall back \
                 (U-Boot's boot script or the Pi firmware's tryboot); re-flash it with a newer image (docs/updates.md)",
                booted.loader
            ));
        }
        Ok((o.clone(), image, booted))
    }

    /// `status.update`: the running slot and version, what boots next, a rollback.
    pub(super) fn update_summary(&self) -> Option<UpdateSummary> {
        let (o, (_, version), booted) = self.update_context().ok()?;
        let dir = BootDir::new(&o.boot_dir);
        let env = dir.read_env().ok()?;
        let rolled_back = dir.read_trial().filter(|t| t.outcome == TrialOutcome::RolledBack);
        Some(UpdateSummary { slot: booted.slot, version, next_boot: env.next_boot(), rolled_back })
    }

    /// `update_status`: the image, both slots, the last trial, the install's progress.
    pub(super) async fn update_status(&self) -> Result<Value, DaemonError> {
        let install = self.inner.updates.with(|s| s.clone());
        let (o, (image_id, version), booted) = match self.update_context() {
            Ok(c) => c,
            Err(problem) => return Ok(json!({"available": false, "problem": problem, "install": install})),
        };
        let dir = BootDir::new(&o.boot_dir);
        let env = dir.read_env().map_err(|e| UpdateError::Unavailable(e.to_string()))?;
        let (rauc, rauc_problem) = match rauc::status(&o.rauc).await {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e.to_string())),
        };
        let slots: Vec<SlotView> = Slot::ALL
            .into_iter()
            .map(|slot| {
                let (state, tries_left) = state_name(env.state(slot));
                let r = rauc.as_ref().and_then(|r| r.slots.iter().find(|s| s.bootname == slot.bootname()));
                SlotView {
                    slot,
                    state,
                    tries_left,
                    booted: slot == booted.slot,
                    // The running slot's own version is the image's; RAUC knows the rest.
                    version: if slot == booted.slot {
                        Some(version.clone())
                    } else {
                        r.and_then(|r| r.bundle_version.clone())
                    },
                    installed_at: r.and_then(|r| r.installed_at.clone()),
                }
            })
            .collect();
        let trial = dir.read_trial();
        let health = std::fs::read(o.runtime_dir.join("health.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<HealthReport>(&b).ok());
        Ok(json!({
            "available": rauc_problem.is_none(),
            "problem": rauc_problem,
            "image": {"id": image_id, "version": version},
            "booted": {"slot": booted.slot, "loader": booted.loader},
            "order": env.order(),
            "next_boot": env.next_boot(),
            "slots": slots,
            "trial": trial,
            "rolled_back": trial.as_ref().filter(|t| t.outcome == TrialOutcome::RolledBack),
            "health": health,
            "install": install,
        }))
    }

    fn incoming_bundle(&self) -> Result<PathBuf, DaemonError> {
        let dir = self.inner.data_dir.as_ref().ok_or_else(|| {
            UpdateError::Unavailable("this daemon keeps no data directory to receive a bundle in".into())
        })?;
        Ok(dir.join("update").join("incoming.raucb"))
    }

    /// `update_upload`: one piece of a bundle. `offset` 0 starts a new one (whatever was
    /// received before is dropped); every other piece must continue where the last ended.
    pub(super) async fn update_upload(&self, p: &UpdateUploadParams) -> Result<Value, DaemonError> {
        self.update_context().map_err(UpdateError::Unavailable)?;
        if p.data.len() > MAX_UPLOAD_PIECE_BYTES {
            return Err(UpdateError::Upload(format!(
                "a piece is at most {MAX_UPLOAD_PIECE_BYTES} bytes, not {}",
                p.data.len()
            ))
            .into());
        }
        // The write runs on a blocking thread, which needs its own copy (a memcpy of at most
        // one piece; the request is borrowed).
        let data = p.data.clone();
        let path = self.incoming_bundle()?;
        let updates = &self.inner.updates;
        let expected = updates.with(|s| match s.phase {
            InstallPhase::Installing => Err(UpdateError::Installing),
            InstallPhase::Receiving if p.offset != 0 => Ok(s.received),
            _ if p.offset != 0 => {
                Err(UpdateError::Upload(format!("no bundle is being received: start with offset 0, not {}", p.offset)))
            }
            _ => Ok(0),
        })?;
        if p.offset != expected {
            return Err(UpdateError::Upload(format!(
                "offset {} does not continue the bundle: {expected} bytes received so far",
                p.offset
            ))
            .into());
        }
        let end = p.offset + data.len() as u64;
        if p.total == 0 || p.total > MAX_BUNDLE_BYTES || end > p.total {
            return Err(UpdateError::Upload(format!(
                "total must be 1..={MAX_BUNDLE_BYTES} bytes and hold every piece (piece ends at {end}, total {})",
                p.total
            ))
            .into());
        }
        let (first, total) = (p.offset == 0, p.total);
        let write_path = path.clone();
        let written = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            if first {
                if let Some(parent) = write_path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
            }
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(first)
                .append(!first)
                .open(&write_path)?;
            f.write_all(&data)?;
            if end == total {
                f.sync_all()?;
            }
            Ok(())
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
        if let Err(e) = written {
            updates.with(|s| *s = InstallState::default());
            let _ = std::fs::remove_file(&path);
            return Err(UpdateError::Storage(e).into());
        }
        updates.with(|s| {
            *s = InstallState {
                phase: InstallPhase::Receiving,
                received: end,
                total: p.total,
                message: format!("received {end} of {} bytes", p.total),
                ..InstallState::default()
            }
        });
        Ok(json!({"received": end, "total": p.total, "complete": end == p.total}))
    }

    /// `update_install`: RAUC installs the received bundle into the other slot, on the
    /// daemon's own task. Refused while a task runs unless `force`. With `reboot`, the
    /// daemon asks for the reboot that tries it once RAUC is done.
    pub(super) async fn update_install(&self, p: &UpdateInstallParams) -> Result<Value, DaemonError> {
        let (o, _, booted) = self.update_context().map_err(UpdateError::Unavailable)?;
        // An ended task stays in the registry until the next one; only an unfinished one has
        // the phone.
        if let Some((task, state)) = self.inner.tasks.active().filter(|(_, s)| !s.is_terminal()) {
            if !p.force {
                return Err(UpdateError::TaskRunning { task, state: state.as_str() }.into());
            }
        }
        if BootDir::new(&o.boot_dir).read_env().is_ok_and(|env| env.on_trial(booted.slot)) {
            return Err(UpdateError::OnTrial { running: booted.slot }.into());
        }
        let path = self.incoming_bundle()?;
        let updates = self.inner.updates.clone();
        let target = booted.slot.other();
        self.inner.updates.with(|s| match s.phase {
            InstallPhase::Receiving if s.received == s.total => {
                s.phase = InstallPhase::Installing;
                s.percent = 0;
                s.message = format!("installing into slot {target}");
                Ok(())
            }
            InstallPhase::Receiving => Err(UpdateError::Upload(format!(
                "the bundle is not whole: {} of {} bytes received",
                s.received, s.total
            ))),
            InstallPhase::Installing => Err(UpdateError::Installing),
            _ => Err(UpdateError::Upload("no bundle received: send it with update_upload first".into())),
        })?;
        let reboot = p.reboot;
        tracing::info!(target_slot = %target, "installing an update");
        tokio::spawn(async move {
            let progress_updates = updates.clone();
            let result = rauc::install(&o.rauc, &path, move |pr| {
                progress_updates.with(|s| {
                    s.percent = pr.percent;
                    s.message = pr.message;
                })
            })
            .await;
            let _ = tokio::fs::remove_file(&path).await;
            match result {
                Ok(()) => {
                    tracing::info!(target_slot = %target, "update installed; it boots next, on trial");
                    let mut asked = false;
                    if reboot {
                        let request = o.runtime_dir.join("reboot");
                        match tokio::fs::write(&request, format!("update installed into slot {target}\n")).await {
                            Ok(()) => asked = true,
                            Err(e) => {
                                tracing::error!(error = %e, path = %request.display(), "could not ask for the reboot")
                            }
                        }
                    }
                    updates.with(|s| {
                        s.phase = InstallPhase::Installed;
                        s.percent = 100;
                        s.message = if asked {
                            format!("installed into slot {target}; rebooting to try it")
                        } else {
                            format!("installed into slot {target}; it is tried at the next reboot")
                        };
                        s.reboot_requested = asked;
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "update refused or failed");
                    updates.with(|s| {
                        s.phase = InstallPhase::Failed;
                        s.error = Some(e.to_string());
                        s.message = "the update was not installed; the running slot boots next as before".into();
                    });
                }
            }
        });
        Ok(json!({"phase": "installing", "target": target}))
    }
}

/// Writes the daemon's health report where the trial judge reads it (`health.json` in the
/// runtime directory), by temporary file and rename.
pub fn write_health(runtime_dir: &Path, report: &HealthReport) -> std::io::Result<()> {
    let path = runtime_dir.join("health.json");
    let tmp = runtime_dir.join("health.json.new");
    std::fs::write(&tmp, serde_json::to_vec(report).unwrap_or_default())?;
    std::fs::rename(&tmp, &path)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;

    use super::*;
    use crate::daemon::{Caller, DaemonOptions, Devices, RequestId, Role};
    use crate::device::hid::RecordingSink;
    use crate::device::sim::{SimConfig, SimPhone};
    use crate::protocol::Call;

    /// A fake appliance in a temporary directory: os-release, a command line, the boot
    /// partition's state, and a `rauc` that answers `status` and installs with `outcome`
    /// (`ok`, or the reason it prints as RAUC does before failing).
    struct Appliance {
        dir: tempfile::TempDir,
    }

    impl Appliance {
        fn new(rauc_install: &str) -> Appliance {
            let dir = tempfile::tempdir().expect("tempdir");
            let p = dir.path();
            for d in ["boot", "run", "data"] {
                std::fs::create_dir(p.join(d)).expect("dir");
            }
            std::fs::write(p.join("os-release"), "ID=debian\nIMAGE_ID=tether-rpi4\nIMAGE_VERSION=lab-1\n")
                .expect("write");
            std::fs::write(p.join("bootargs"), b"root=PARTUUID=74657468-02 ro tether.slot=a tether.boot=u-boot\0")
                .expect("write");
            let status = r#"{"compatible":"tether-rpi4","booted":"a","boot_primary":"rootfs.0","slots":[{"rootfs.1":{"bootname":"b","state":"inactive","boot_status":"bad","slot_status":{"bundle":{"compatible":null}}}},{"rootfs.0":{"bootname":"a","state":"booted","boot_status":"good","slot_status":{"bundle":{"compatible":null}}}}]}"#;
            let script = format!(
                "#!/bin/sh\ncase \"$1\" in\nstatus) echo '{status}' ;;\ninstall) test -s \"$2\" || {{ echo 'LastError: no bundle'; exit 1; }}; cp \"$2\" \"$(dirname \"$0\")/installed\"; echo installing; echo '  0% Installing'; echo ' 40% Copying image to rootfs.1'; {rauc_install} ;;\nesac\n"
            );
            std::fs::write(p.join("rauc"), script).expect("write");
            std::fs::set_permissions(p.join("rauc"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
            Appliance { dir }
        }

        fn options(&self) -> UpdateOptions {
            let p = self.dir.path();
            UpdateOptions {
                boot_dir: p.join("boot"),
                os_release: p.join("os-release"),
                // The first is missing, as /proc/cmdline is in the daemon's sandbox.
                cmdline: vec![p.join("no-cmdline"), p.join("bootargs")],
                runtime_dir: p.join("run"),
                rauc: p.join("rauc"),
            }
        }

        fn daemon(&self, update: bool) -> Daemon {
            let phone =
                SimPhone::new(SimConfig { capture_width: 320, capture_height: 180, fps: 10, ..SimConfig::default() });
            Daemon::start(
                Devices { hid: Box::new(RecordingSink::default()), video: Box::new(phone.display()), sim: Some(phone) },
                DaemonOptions {
                    sim: true,
                    data_dir: Some(self.dir.path().join("data")),
                    update: update.then(|| self.options()),
                    ..DaemonOptions::default()
                },
            )
            .expect("daemon")
        }
    }

    fn call(text: &str) -> Call {
        crate::protocol::parse_request(text.as_bytes()).expect("request").call
    }

    fn code(r: &Result<Value, DaemonError>) -> Option<ErrorCode> {
        r.as_ref().err().map(|e| e.code().0)
    }

    async fn upload(d: &Daemon, bundle: &[u8], piece: usize) -> Result<Value, DaemonError> {
        let s = d.open_session(Caller::in_process(Role::Admin));
        let mut last = Ok(Value::Null);
        for (i, chunk) in bundle.chunks(piece).enumerate() {
            let data = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, chunk);
            let text = format!(
                r#"{{"id":{i},"method":"update_upload","offset":{},"total":{},"data":"{data}"}}"#,
                i * piece,
                bundle.len()
            );
            last = d.handle(&s, RequestId(i as u64 + 1), &call(&text)).await;
            last.as_ref().map_err(|e| e.to_string()).expect("piece");
        }
        last
    }

    async fn wait_phase(d: &Daemon, phase: InstallPhase) -> InstallState {
        let mut rx = d.inner.updates.subscribe();
        let state = tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|s| s.phase == phase))
            .await
            .expect("the install ends")
            .expect("the daemon lives");
        state.clone()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn status_shows_the_image_slots_and_a_rollback() {
        let a = Appliance::new("exit 0");
        let d = a.daemon(true);
        let s = d.open_session(Caller::in_process(Role::View));
        let st = d.handle(&s, RequestId(1), &call(r#"{"id":1,"method":"update_status"}"#)).await.expect("status");
        assert_eq!(st["available"], true, "{st}");
        assert_eq!((st["image"]["version"].as_str(), st["booted"]["slot"].as_str()), (Some("lab-1"), Some("a")));
        assert_eq!(st["slots"][0]["state"], "good");
        assert_eq!(st["slots"][0]["version"], "lab-1");
        assert_eq!(st["slots"][1]["state"], "bad");
        assert_eq!(st["next_boot"], "a");
        assert!(st["rolled_back"].is_null());
        // The judge recorded a rollback of b at this boot: status and `status.update` say so.
        let boot = BootDir::new(a.dir.path().join("boot"));
        boot.write_trial(&TrialRecord {
            slot: Slot::B,
            version: Some("lab-bad".into()),
            outcome: TrialOutcome::RolledBack,
            reason: "the daemon's health check failed: https: no answer".into(),
            at_unix: 1,
        })
        .expect("write");
        let st = d.handle(&s, RequestId(2), &call(r#"{"id":2,"method":"update_status"}"#)).await.expect("status");
        assert_eq!(st["rolled_back"]["version"], "lab-bad", "{st}");
        let summary = d.status().await.update.expect("the appliance's summary");
        assert_eq!((summary.slot, summary.version.as_str(), summary.next_boot), (Slot::A, "lab-1", Slot::A));
        assert!(summary.rolled_back.is_some_and(|r| r.reason.contains("health check")));
        // A Pi image from before tryboot: unavailable, and what to do.
        std::fs::write(
            a.dir.path().join("bootargs"),
            b"root=PARTUUID=74657468-02 tether.slot=a tether.boot=raspi-firmware",
        )
        .expect("write");
        let st = d.handle(&s, RequestId(3), &call(r#"{"id":3,"method":"update_status"}"#)).await.expect("status");
        assert_eq!(st["available"], false);
        assert!(st["problem"].as_str().is_some_and(|p| p.contains("re-flash")), "{st}");
        // The same Pi booted with the tryboot layout: available.
        std::fs::write(a.dir.path().join("bootargs"), b"root=PARTUUID=74657468-02 tether.slot=a tether.boot=tryboot")
            .expect("write");
        let st = d.handle(&s, RequestId(4), &call(r#"{"id":4,"method":"update_status"}"#)).await.expect("status");
        assert_eq!((st["available"].as_bool(), st["booted"]["loader"].as_str()), (Some(true), Some("tryboot")), "{st}");
        // Off the appliance: unavailable, and why.
        let plain = a.daemon(false);
        let s = plain.open_session(Caller::in_process(Role::View));
        let st = plain.handle(&s, RequestId(1), &call(r#"{"id":1,"method":"update_status"}"#)).await.expect("status");
        assert_eq!(st["available"], false);
        assert!(st["problem"].as_str().is_some_and(|p| p.contains("appliance image")), "{st}");
        assert!(plain.status().await.update.is_none());
        let up = plain
            .handle(&s, RequestId(2), &call(r#"{"id":2,"method":"update_upload","offset":0,"total":3,"data":"AAAA"}"#))
            .await;
        assert_eq!(code(&up), Some(ErrorCode::PermissionDenied), "view may not upload");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_bundle_in_pieces_is_installed_by_rauc_and_the_reboot_asked_for() {
        let a = Appliance::new("echo '100% Installing done.'; exit 0");
        let d = a.daemon(true);
        let bundle: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let last = upload(&d, &bundle, 30_000).await.expect("upload");
        assert_eq!((last["received"].as_u64(), last["complete"].as_bool()), (Some(100_000), Some(true)));
        let s = d.open_session(Caller::in_process(Role::Admin));
        let started =
            d.handle(&s, RequestId(9), &call(r#"{"id":9,"method":"update_install"}"#)).await.expect("install");
        assert_eq!(started["target"], "b");
        let done = wait_phase(&d, InstallPhase::Installed).await;
        assert_eq!(done.percent, 100);
        assert!(done.reboot_requested && done.message.contains("rebooting"), "{done:?}");
        // RAUC got the bundle byte for byte; the daemon's copy is gone; the reboot is asked.
        assert_eq!(std::fs::read(a.dir.path().join("installed")).expect("installed"), bundle);
        assert!(!a.dir.path().join("data/update/incoming.raucb").exists());
        let request = std::fs::read_to_string(a.dir.path().join("run/reboot")).expect("reboot request");
        assert!(request.contains("slot b"), "{request}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn refusals_keep_the_running_slot_and_say_why() {
        let a = Appliance::new(
            "echo 'LastError: Failed to check bundle: signature verification failed: unable to get local issuer certificate'; exit 1",
        );
        let d = a.daemon(true);
        let s = d.open_session(Caller::in_process(Role::Admin));
        // Nothing received yet.
        let r = d.handle(&s, RequestId(1), &call(r#"{"id":1,"method":"update_install"}"#)).await;
        assert_eq!(code(&r), Some(ErrorCode::InvalidParams));
        // A piece that does not continue the bundle.
        let r = d
            .handle(&s, RequestId(2), &call(r#"{"id":2,"method":"update_upload","offset":6,"total":9,"data":"AAAA"}"#))
            .await;
        assert_eq!(code(&r), Some(ErrorCode::InvalidParams));
        let r = d
            .handle(&s, RequestId(3), &call(r#"{"id":3,"method":"update_upload","offset":0,"total":2,"data":"AAAA"}"#))
            .await;
        assert_eq!(code(&r), Some(ErrorCode::InvalidParams), "3 bytes do not fit a total of 2");
        // A piece larger than any transport may hand over (a typed request can carry one).
        let big = Call::UpdateUpload(UpdateUploadParams {
            offset: 0,
            total: MAX_BUNDLE_BYTES,
            data: vec![0; MAX_UPLOAD_PIECE_BYTES + 1],
        });
        let r = d.handle(&s, RequestId(3), &big).await;
        assert_eq!(code(&r), Some(ErrorCode::InvalidParams), "{r:?}");
        // Half a bundle is not installed.
        let r = d
            .handle(&s, RequestId(4), &call(r#"{"id":4,"method":"update_upload","offset":0,"total":6,"data":"AAAA"}"#))
            .await;
        assert!(r.is_ok(), "{r:?}");
        let r = d.handle(&s, RequestId(5), &call(r#"{"id":5,"method":"update_install"}"#)).await;
        assert_eq!(code(&r), Some(ErrorCode::InvalidParams));
        // The running slot still on trial: refused, so the way back is not overwritten.
        upload(&d, b"bundle", 6).await.expect("upload");
        let boot = BootDir::new(a.dir.path().join("boot"));
        let mut env = boot.read_env().expect("env");
        env.set_primary(Slot::A, 3).expect("a on trial");
        boot.write_env(&env).expect("write");
        let r = d.handle(&s, RequestId(6), &call(r#"{"id":6,"method":"update_install"}"#)).await;
        assert_eq!(code(&r), Some(ErrorCode::Busy), "{r:?}");
        assert!(r.as_ref().is_err_and(|e| e.to_string().contains("still on trial")), "{r:?}");
        env.set_state(Slot::A, "good").expect("judged good");
        boot.write_env(&env).expect("write");
        // While a task runs: refused unless forced.
        upload(&d, b"bundle", 6).await.expect("upload");
        let op = d.open_session(Caller::in_process(Role::Operate));
        d.handle(&op, RequestId(6), &call(r#"{"id":6,"method":"task_open","title":"busy","events":false}"#))
            .await
            .expect("task");
        let r = d.handle(&s, RequestId(7), &call(r#"{"id":7,"method":"update_install"}"#)).await;
        assert_eq!(code(&r), Some(ErrorCode::TaskActive), "{r:?}");
        // Forced: RAUC refuses the signature; the daemon says so and asks for no reboot.
        d.handle(&s, RequestId(8), &call(r#"{"id":8,"method":"update_install","force":true}"#)).await.expect("forced");
        let failed = wait_phase(&d, InstallPhase::Failed).await;
        assert!(failed.error.as_deref().is_some_and(|e| e.contains("signature verification failed")), "{failed:?}");
        assert!(!a.dir.path().join("run/reboot").exists());
        assert!(!a.dir.path().join("data/update/incoming.raucb").exists());
    }
}
