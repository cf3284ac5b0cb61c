//! The appliance on the LAN: keeps avahi's service file for tether current, so a fleet can
//! be found and told apart (`avahi-browse -r _tether._tcp`) without logging in to each box.
//!
//! avahi reads `/etc/avahi/services`; the image bind-mounts a directory in RAM there
//! (`/run/tether-mdns`, docs/image.md) because the root is read-only. This module only
//! writes that file: avahi notices the change (inotify) and republishes. TXT records say
//! the version, the board, whether a phone is connected and the task state. They are
//! public on the LAN, so they carry states, never titles, names or tokens.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::daemon::{Daemon, HostState, StatusResult};

/// The file written in the service directory.
pub const SERVICE_FILE: &str = "tether.service";
/// How often the state is looked at; a file is written only when a record changes.
const POLL: Duration = Duration::from_secs(2);

/// What is announced and where.
#[derive(Debug, Clone)]
pub struct MdnsConfig {
    /// avahi's service directory as the daemon may write it (`/run/tether-mdns`).
    pub dir: PathBuf,
    /// The board's name (`rpi4`), or `none`.
    pub board: String,
    /// The HTTPS port.
    pub port: u16,
}

/// The TXT records of `_tether._tcp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Records {
    /// tether's version.
    pub version: String,
    /// The board's name.
    pub board: String,
    /// `connected`, `suspended`, `none` or `unknown`.
    pub phone: &'static str,
    /// `none` or the active task's state (`running`, `paused`, ...).
    pub task: String,
    /// Jobs waiting for the phone (a count: who waits is not public).
    pub queue: usize,
}

impl Records {
    /// The records for a daemon in `status`.
    pub fn of(status: &StatusResult, board: &str) -> Records {
        let phone = match status.hid.host {
            HostState::Configured => "connected",
            HostState::Suspended => "suspended",
            HostState::NotAttached => "none",
            HostState::Unknown => "unknown",
        };
        let task = match &status.task {
            Some(t) => serde_json::to_value(t.state).ok().and_then(|v| v.as_str().map(str::to_owned)),
            None => Some("none".into()),
        };
        Records {
            version: status.daemon.version.to_string(),
            board: board.to_string(),
            phone,
            task: task.unwrap_or_else(|| "unknown".into()),
            queue: status.queue.length,
        }
    }
}

/// avahi's service-group XML for `records` on `port`.
pub fn render(records: &Records, port: u16) -> String {
    let txt = [
        format!("version={}", records.version),
        format!("board={}", records.board),
        format!("phone={}", records.phone),
        format!("task={}", records.task),
        format!("queue={}", records.queue),
    ];
    let txt: String = txt.iter().map(|t| format!("    <txt-record>{}</txt-record>\n", xml_escape(t))).collect();
    format!(
        "<?xml version=\"1.0\" standalone='no'?>\n\
         <!DOCTYPE service-group SYSTEM \"avahi-service.dtd\">\n\
         <!-- Written by tether serve (server/mdns.rs) when its state changes. -->\n\
         <service-group>\n  <name replace-wildcards=\"yes\">%h</name>\n  <service>\n    \
         <type>_https._tcp</type>\n    <port>{port}</port>\n    <txt-record>path=/</txt-record>\n  \
         </service>\n  <service>\n    <type>_tether._tcp</type>\n    <port>{port}</port>\n{txt}  \
         </service>\n</service-group>\n"
    )
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Writes `text` as `dir/SERVICE_FILE` through a temporary file and a rename, mode 0644 (avahi
/// reads it as another user), so avahi never reads half a file.
fn write_service(dir: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let tmp = dir.join(".tether.service.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o644).open(&tmp)?;
    // The daemon's umask is 0077; the mode must still be 0644.
    f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    f.write_all(text.as_bytes())?;
    std::fs::rename(&tmp, dir.join(SERVICE_FILE))
}

/// Keeps the service file current until `shutdown`. Failures are logged once per kind and
/// never stop the daemon: mDNS is a convenience.
pub async fn announce(daemon: Daemon, config: MdnsConfig, shutdown: CancellationToken) {
    let mut last: Option<Records> = None;
    let mut failing = false;
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let records = Records::of(&daemon.status().await, &config.board);
        if last.as_ref() == Some(&records) {
            continue;
        }
        match write_service(&config.dir, &render(&records, config.port)) {
            Ok(()) => {
                tracing::debug!(phone = records.phone, task = %records.task, "mDNS records updated");
                failing = false;
                last = Some(records);
            }
            Err(e) if !failing => {
                tracing::warn!(dir = %config.dir.display(), error = %e, "cannot write the mDNS service file");
                failing = true;
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records() -> Records {
        Records { version: "0.1.0".into(), board: "rpi4".into(), phone: "connected", task: "running".into(), queue: 2 }
    }

    #[test]
    fn the_file_holds_both_services_and_every_record() {
        let xml = render(&records(), 443);
        assert!(xml.contains("<type>_https._tcp</type>") && xml.contains("<type>_tether._tcp</type>"));
        assert_eq!(xml.matches("<port>443</port>").count(), 2);
        for r in ["version=0.1.0", "board=rpi4", "phone=connected", "task=running", "queue=2"] {
            assert!(xml.contains(&format!("<txt-record>{r}</txt-record>")), "{r} missing:\n{xml}");
        }
        let odd = Records { board: "a<b&c".into(), ..records() };
        assert!(render(&odd, 443).contains("board=a&lt;b&amp;c"));
    }

    #[test]
    fn the_file_is_replaced_whole_and_readable_by_avahi() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        write_service(dir.path(), "one").unwrap();
        write_service(dir.path(), "two").unwrap();
        let path = dir.path().join(SERVICE_FILE);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o644);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from(SERVICE_FILE)], "no temporary file left");
    }

    #[tokio::test]
    async fn the_active_task_state_shows_in_the_records_but_not_its_title() {
        use crate::daemon::{DaemonOptions, Devices};
        // Only the test builds devices (as `serve` does); the module itself reads the daemon.
        use crate::device::sim::{SimConfig, SimPhone};
        let phone = SimPhone::new(SimConfig::default());
        let devices = Devices { hid: Box::new(phone.hid()), video: Box::new(phone.display()), sim: Some(phone) };
        let daemon = Daemon::start(devices, DaemonOptions { sim: true, ..DaemonOptions::default() }).unwrap();
        let before = Records::of(&daemon.status().await, "rpi4");
        assert_eq!((before.phone, before.task.as_str()), ("connected", "none"));
        let session = daemon.open_session(crate::daemon::Caller::in_process(crate::protocol::Role::Operate));
        let open =
            crate::protocol::parse_request(br#"{"id":1,"method":"task_open","title":"Secret Title 42"}"#).unwrap();
        let opened = daemon.handle(&session, open.id, &open.call).await.unwrap();
        let during = Records::of(&daemon.status().await, "rpi4");
        assert_eq!(during.task, "running", "{opened}");
        assert!(!render(&during, 443).contains("Secret Title 42"), "titles stay off the LAN");
        daemon.shutdown();
    }
}
