//! `tether doctor`.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;
use tether::client::ControlClient;
use tether::config::Profile;
use tether::device::inventory::Inventory;

/// Prints what hardware and capabilities this machine has.
pub fn run_doctor(socket: Option<PathBuf>, as_json: bool) -> anyhow::Result<ExitCode> {
    let profile = Profile::detect();
    let path = super::client_socket(socket);
    let inventory = Inventory::probe();
    let daemon = super::client_runtime()?.block_on(async {
        match ControlClient::connect(&path).await {
            Ok(mut c) => match c.call("status", json!({})).await {
                Ok(status) => json!({"reachable": true, "status": status}),
                Err(e) => json!({"reachable": true, "error": e.to_string()}),
            },
            Err(e) => json!({"reachable": false, "error": e.to_string()}),
        }
    });
    let report = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "profile": format!("{profile:?}").to_lowercase(),
        "socket": path,
        "daemon": daemon,
        "hardware": inventory,
        "https": {"available": false, "cert_fingerprint": null},
    });
    if as_json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("tether {} doctor ({} profile)", env!("CARGO_PKG_VERSION"), report["profile"].as_str().unwrap_or("?"));
    if inventory.udcs.is_empty() {
        println!("  usb:    no USB device controller (need a board with USB OTG, e.g. Pi 4 USB-C port with dwc2)");
    }
    for udc in &inventory.udcs {
        let dummy = if udc.is_dummy { " (software test controller)" } else { "" };
        println!("  usb:    {}{} state={}", udc.name, dummy, udc.state.as_deref().unwrap_or("?"));
    }
    println!(
        "  gadget: configfs {}; {} hidg node(s)",
        if inventory.configfs_gadget { "mounted" } else { "not mounted" },
        inventory.hidg_nodes.len()
    );
    if inventory.video_nodes.is_empty() {
        println!("  video:  no V4L2 nodes (need an HDMI capture bridge or UVC dongle)");
    }
    for node in &inventory.video_nodes {
        println!("  video:  {} {} ({})", node.path.display(), node.name, node.role);
    }
    match daemon["reachable"].as_bool() {
        Some(true) => println!("  daemon: answering on {}", path.display()),
        _ => println!("  daemon: not reachable on {}", path.display()),
    }
    println!("  https:  not in this build yet");
    Ok(ExitCode::SUCCESS)
}
