//! `tether discover`: the appliances on the LAN, from their mDNS records (`_tether._tcp`,
//! announced by avahi on each appliance). Plain threads: the browser runs its own.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use mdns_sd::{ServiceDaemon, ServiceEvent};
use serde::Serialize;

/// The service type appliances announce.
pub const SERVICE_TYPE: &str = "_tether._tcp.local.";

/// One appliance found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Appliance {
    /// Its instance name (the host name avahi gave it).
    pub name: String,
    /// `https://host:port`, to pass to `--url` or `tether login`.
    pub url: String,
    /// Its addresses.
    pub addresses: Vec<String>,
    /// `connected`, `suspended`, `none` or `unknown`.
    pub phone: String,
    /// `none` or the active task's state.
    pub task: String,
    /// Jobs waiting for the phone.
    pub queue: String,
    /// The board.
    pub board: String,
    /// tether's version.
    pub version: String,
}

/// Browses for `timeout`; every appliance that answered, by name.
pub fn browse(timeout: Duration) -> anyhow::Result<Vec<Appliance>> {
    let mdns = ServiceDaemon::new().context("start mDNS (UDP port 5353)")?;
    let events = mdns.browse(SERVICE_TYPE).context("browse for _tether._tcp")?;
    let deadline = Instant::now() + timeout;
    let mut found = BTreeMap::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Ok(event) = events.recv_timeout(left) else { break };
        match event {
            ServiceEvent::ServiceResolved(service) => {
                let txt = |key: &str| service.txt_properties.get_property_val_str(key).unwrap_or("?").to_string();
                let name = service.fullname.trim_end_matches(SERVICE_TYPE).trim_end_matches('.').to_string();
                let host = service.host.trim_end_matches('.').to_string();
                let mut addresses: Vec<String> = service.addresses.iter().map(ToString::to_string).collect();
                addresses.sort();
                let appliance = Appliance {
                    url: format!("https://{host}:{}", service.port),
                    name: name.clone(),
                    addresses,
                    phone: txt("phone"),
                    task: txt("task"),
                    queue: txt("queue"),
                    board: txt("board"),
                    version: txt("version"),
                };
                found.insert(name, appliance);
            }
            ServiceEvent::ServiceRemoved(_, fullname) => {
                let name = fullname.trim_end_matches(SERVICE_TYPE).trim_end_matches('.').to_string();
                found.remove(&name);
            }
            _ => {}
        }
    }
    // The browser's thread ends with it; an error here changes nothing found.
    let _ = mdns.shutdown();
    Ok(found.into_values().collect())
}

/// `tether discover [--timeout S] [--json]`.
pub fn run_discover(timeout: Duration, as_json: bool) -> anyhow::Result<ExitCode> {
    if !as_json {
        eprintln!("tether: looking for appliances for {} s ...", timeout.as_secs_f32());
    }
    let found = browse(timeout)?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&found)?);
        return Ok(ExitCode::SUCCESS);
    }
    if found.is_empty() {
        println!(
            "no appliances answered (they announce _tether._tcp through avahi on the LAN; \
             mDNS does not cross routers)"
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<20} {:<34} {:<10} {:<10} {:>5}  {:<8} {}",
        "NAME", "URL", "PHONE", "TASK", "QUEUE", "BOARD", "VERSION"
    );
    for a in &found {
        println!(
            "{:<20} {:<34} {:<10} {:<10} {:>5}  {:<8} {}",
            a.name, a.url, a.phone, a.task, a.queue, a.board, a.version
        );
    }
    Ok(ExitCode::SUCCESS)
}
