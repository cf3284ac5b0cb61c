//! RAUC, the updater (docs/updates.md), through its command line: `rauc install` (its
//! progress lines), `rauc status` (JSON) and `rauc status mark-good|mark-bad`. The `rauc`
//! program talks to RAUC's D-Bus service (root); the image's D-Bus policy lets only root and
//! the daemon's user do so.

use std::path::Path;
use std::process::Stdio;

use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Errors from RAUC.
#[derive(Debug, thiserror::Error)]
pub enum RaucError {
    /// `rauc` could not be started (not installed: not a tether image).
    #[error("cannot run rauc: {0} (updates need the image's rauc package)")]
    Spawn(std::io::Error),
    /// RAUC refused or failed; its own words (the last error it printed).
    #[error("{0}")]
    Failed(String),
    /// `rauc status` printed something that is not its JSON.
    #[error("rauc status printed no JSON: {0}")]
    Output(String),
}

/// One line of `rauc install`'s progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// Overall percentage (0–100).
    pub percent: u8,
    /// RAUC's message ("Checking bundle", "Copying image to rootfs.1", …).
    pub message: String,
}

/// Reads a progress line (`" 40% Copying image to rootfs.1"`).
pub fn parse_progress(line: &str) -> Option<Progress> {
    let (pct, message) = line.trim_start().split_once("% ")?;
    let percent: u8 = pct.parse().ok().filter(|p| *p <= 100)?;
    Some(Progress { percent, message: message.trim().to_string() })
}

/// The reason in RAUC's failure output: its `LastError:`/`error:` line, else its last line.
pub fn failure_reason(output: &str) -> String {
    let lines: Vec<&str> = output.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let reason = lines
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("LastError: ").or_else(|| l.strip_prefix("error: ")))
        .or_else(|| lines.iter().rev().find(|l| parse_progress(l).is_none()).copied())
        .unwrap_or("rauc install failed without saying why");
    reason.to_string()
}

/// Installs `bundle` into the other slot with `program` (`rauc`), calling `progress` on every progress line.
/// Returns when RAUC is done: Ok when it installed (the other slot is then primary, on
/// trial), Err with RAUC's reason otherwise (a bad signature is refused before anything is
/// written).
pub async fn install(program: &Path, bundle: &Path, mut progress: impl FnMut(Progress)) -> Result<(), RaucError> {
    let mut child = tokio::process::Command::new(program)
        .arg("install")
        .arg(bundle)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(RaucError::Spawn)?;
    let mut output = String::new();
    let stderr = child.stderr.take();
    let errors = tokio::spawn(async move {
        let mut text = String::new();
        if let Some(e) = stderr {
            let mut lines = BufReader::new(e).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                text.push_str(&l);
                text.push('\n');
            }
        }
        text
    });
    if let Some(out) = child.stdout.take() {
        let mut lines = BufReader::new(out).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(p) = parse_progress(&line) {
                progress(p);
            }
            output.push_str(&line);
            output.push('\n');
        }
    }
    let status = child.wait().await.map_err(RaucError::Spawn)?;
    output.push_str(&errors.await.unwrap_or_default());
    if status.success() {
        Ok(())
    } else {
        Err(RaucError::Failed(failure_reason(&output)))
    }
}

/// What RAUC says of one slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RaucSlot {
    /// `a` or `b`.
    pub bootname: String,
    /// RAUC's slot name (`rootfs.0`).
    pub name: String,
    /// `booted`, `active` or `inactive`.
    pub state: String,
    /// `good` or `bad` (from the boot backend).
    pub boot_status: Option<String>,
    /// The version of the bundle last installed there (none for the slot flash.sh wrote).
    pub bundle_version: Option<String>,
    /// When it was installed (RAUC's timestamp).
    pub installed_at: Option<String>,
}

/// `rauc status`, the parts tether shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RaucStatus {
    /// RAUC's compatible string (`tether-rpi4`).
    pub compatible: String,
    /// The booted slot's bootname.
    pub booted: Option<String>,
    /// The slot that boots next's RAUC name.
    pub primary: Option<String>,
    /// Both slots.
    pub slots: Vec<RaucSlot>,
}

/// Reads `rauc status --detailed --output-format=json`'s document.
pub fn parse_status(doc: &Value) -> RaucStatus {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    let mut slots = Vec::new();
    for entry in doc.get("slots").and_then(Value::as_array).into_iter().flatten() {
        let Some(map) = entry.as_object() else { continue };
        for (name, slot) in map {
            let Some(bootname) = text(slot.get("bootname")) else { continue };
            let status = slot.get("slot_status");
            slots.push(RaucSlot {
                bootname,
                name: name.clone(),
                state: text(slot.get("state")).unwrap_or_default(),
                boot_status: text(slot.get("boot_status")),
                bundle_version: text(status.and_then(|s| s.pointer("/bundle/version"))),
                installed_at: text(status.and_then(|s| s.pointer("/installed/timestamp"))),
            });
        }
    }
    slots.sort_by(|a, b| a.bootname.cmp(&b.bootname));
    RaucStatus {
        compatible: text(doc.get("compatible")).unwrap_or_default(),
        booted: text(doc.get("booted")),
        primary: text(doc.get("boot_primary")),
        slots,
    }
}

/// `rauc status` (`program`: the `rauc` to run).
pub async fn status(program: &Path) -> Result<RaucStatus, RaucError> {
    let out = run(program, &["status", "--detailed", "--output-format=json"]).await?;
    let doc: Value =
        serde_json::from_str(out.trim()).map_err(|_| RaucError::Output(out.chars().take(200).collect()))?;
    Ok(parse_status(&doc))
}

/// `rauc status mark-good booted` / `mark-bad booted`.
pub async fn mark_booted(good: bool) -> Result<(), RaucError> {
    run(Path::new("rauc"), &["status", if good { "mark-good" } else { "mark-bad" }, "booted"]).await.map(|_| ())
}

async fn run(program: &Path, args: &[&str]) -> Result<String, RaucError> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(RaucError::Spawn)?;
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(RaucError::Failed(failure_reason(&format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr)))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_and_failure_reasons() {
        assert_eq!(
            parse_progress(" 40% Copying image to rootfs.1"),
            Some(Progress { percent: 40, message: "Copying image to rootfs.1".into() })
        );
        assert_eq!(
            parse_progress("100% Installing done."),
            Some(Progress { percent: 100, message: "Installing done.".into() })
        );
        assert_eq!(parse_progress("installing"), None);
        assert_eq!(parse_progress("140% x"), None);
        let out = "installing\n  0% Installing\n 40% Checking bundle failed.\n100% Installing failed.\nLastError: Failed to check bundle: signature verification failed: unable to get local issuer certificate\nInstalling `/x.raucb` failed\n";
        assert_eq!(
            failure_reason(out),
            "Failed to check bundle: signature verification failed: unable to get local issuer certificate"
        );
        assert_eq!(failure_reason("  0% Installing\nsomething broke\n"), "something broke");
        assert_eq!(failure_reason(""), "rauc install failed without saying why");
    }

    #[test]
    fn status_json_gives_slots_versions_and_boot_state() {
        let doc: Value = serde_json::from_str(
            r#"{"compatible":"tether-rpi4","variant":"","booted":"b","boot_primary":"rootfs.1","slots":[
            {"rootfs.0":{"class":"rootfs","device":"/dev/disk/by-partuuid/74657468-02","type":"ext4","bootname":"a","state":"inactive","boot_status":"good","slot_status":{"status":"ok"}}},
            {"rootfs.1":{"class":"rootfs","device":"/dev/disk/by-partuuid/74657468-03","type":"ext4","bootname":"b","state":"booted","boot_status":"good",
              "slot_status":{"bundle":{"compatible":"tether-rpi4","version":"lab-2"},"installed":{"timestamp":"2026-12-06T21:00:00Z","count":1},"status":"ok"}}}]}"#,
        )
        .unwrap();
        let s = parse_status(&doc);
        assert_eq!(s.compatible, "tether-rpi4");
        assert_eq!((s.booted.as_deref(), s.primary.as_deref()), (Some("b"), Some("rootfs.1")));
        assert_eq!(s.slots.len(), 2);
        assert_eq!((s.slots[0].bootname.as_str(), s.slots[0].bundle_version.as_deref()), ("a", None));
        assert_eq!(s.slots[1].bundle_version.as_deref(), Some("lab-2"));
        assert_eq!(s.slots[1].installed_at.as_deref(), Some("2026-12-06T21:00:00Z"));
    }
}
