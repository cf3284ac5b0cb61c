//! `tether doctor`.

use std::path::PathBuf;
use std::process::ExitCode;

use super::agent_setup::State;
use serde_json::json;
use tether::board::Board;
use tether::client::ControlClient;
use tether::config::{Config, Profile, DEFAULT_AGENT_USER};
use tether::device::inventory::Inventory;
use tether::server::tls::Fingerprint;

/// Prints what hardware and capabilities this machine has.
pub fn run_doctor(
    socket: Option<PathBuf>,
    config: Option<PathBuf>,
    board: Option<PathBuf>,
    as_json: bool,
) -> anyhow::Result<ExitCode> {
    let profile = Profile::detect();
    // The board's own statement of what works with the kernel the image ships.
    let board = match Board::find(board.as_deref()) {
        Some(path) => Some(Board::load(&path)?),
        None => None,
    };
    // The daemon's configuration (`--config`, else its default file): its socket and agent.
    let daemon_config = super::daemon_config(config.as_deref())?;
    let path = socket.unwrap_or_else(|| daemon_config.socket.clone());
    let (agent, agent_findings) = super::agent_setup::report(&super::agent_setup::Setup {
        agent_name: daemon_config.agent_user.clone().unwrap_or_else(|| DEFAULT_AGENT_USER.to_string()),
        socket: path.clone(),
        socket_group: daemon_config.socket_group.clone(),
        config_file: super::config_file_for_advice(config.as_deref()),
    });
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
    let decoders = decoder_report();
    let ocr = ocr_report(&daemon_config.ocr);
    let report = json!({
        "ocr": ocr,
        "version": env!("CARGO_PKG_VERSION"),
        "decoders": decoders,
        "profile": format!("{profile:?}").to_lowercase(),
        "socket": path,
        "daemon": daemon,
        "agent": agent,
        "hardware": inventory,
        "https": https_report(profile, &daemon),
        "storage": storage_report(profile, &daemon),
        "board": board.as_ref().map(|b| json!({
            "name": b.name,
            "description": b.description,
            "udc": b.usb.udc,
            "udc_present": inventory.udcs.iter().any(|u| u.name == b.usb.udc),
            "capture": b.capture.device,
            "csi": b.csi.as_ref().map(|c| json!({"overlay": c.overlay, "statement": inventory.csi.statement()})),
            "support": b.support,
        })),
    });
    if as_json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("tether {} doctor ({} profile)", env!("CARGO_PKG_VERSION"), report["profile"].as_str().unwrap_or("?"));
    if let Some(b) = &board {
        println!("  board:  {} ({})", b.description, b.name);
        for (what, statement) in b.support.rows() {
            println!("          {what:<15} {statement}");
        }
        if !inventory.udcs.iter().any(|u| u.name == b.usb.udc) {
            println!("  usb:    the board's controller {} is missing (see board/{}/README.md)", b.usb.udc, b.name);
        }
        if b.csi.is_some() {
            println!("  csi:    {}", inventory.csi.statement());
        }
    }
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
    for line in capture_lines(&daemon["status"]["video"]) {
        println!("{line}");
    }
    for (what, statement) in decoders.as_object().into_iter().flatten() {
        println!("  decode: {what:<6} {}", statement.as_str().unwrap_or("?"));
    }
    println!("  ocr:    {}", report["ocr"]["statement"].as_str().unwrap_or("?"));
    match daemon["reachable"].as_bool() {
        Some(true) => println!("  daemon: answering on {}", path.display()),
        _ => println!("  daemon: not reachable on {}", path.display()),
    }
    // What `task run` as root needs: the agent user, its way to the socket, this binary.
    for f in &agent_findings {
        let state = match f.state {
            State::Ok => "ok",
            State::Fail => "FAILS",
            State::Unchecked => "unchecked",
        };
        println!("  agent:  {:<7} {state}: {}", f.check, f.detail);
        if let Some(fix) = &f.fix {
            println!("          fix: {fix}");
        }
        if f.restart {
            println!("          then restart the daemon (`tether serve`): it reads this only when it starts");
        }
    }
    let storage = &report["storage"];
    let dir = storage["data_dir"].as_str().unwrap_or("?");
    let free = storage["free_bytes"].as_u64().map_or_else(|| "unknown".to_string(), |b| format!("{} MiB", b >> 20));
    match storage["daemon"]["writable"].as_bool() {
        Some(true) => println!("  storage: writable; data directory {dir} ({free} free)"),
        Some(false) => {
            println!("  storage: READ-ONLY: changes are refused (STORAGE_FAILED), reads are served");
            println!(
                "          {}",
                storage["daemon"]["reason"].as_str().unwrap_or("the data directory takes no writes")
            );
            println!("          data directory {dir} ({free} free; the daemon may have been given another --data-dir)");
        }
        None => println!("  storage: data directory {dir} ({free} free)"),
    }
    let https = &report["https"];
    match (https["fingerprint"].as_str(), https["urls"].as_array()) {
        (Some(fp), Some(urls)) if !urls.is_empty() => {
            println!("  https:  {}", urls.iter().filter_map(|u| u.as_str()).collect::<Vec<_>>().join("  "));
            println!("          CA fingerprint (SHA-256) {fp}");
        }
        (Some(fp), _) => println!("  https:  not serving now; CA fingerprint (SHA-256) {fp}"),
        _ => println!("  https:  no certificate yet (`tether serve` makes one at its first start)"),
    }
    Ok(ExitCode::SUCCESS)
}

/// What the running daemon captures from (its `status.video`): the node, its driver and
/// card, the negotiated format, and for media-controller capture the pipeline as it was
/// configured. Nothing when the daemon is not reachable or does not use V4L2.
fn capture_lines(video: &serde_json::Value) -> Vec<String> {
    if video["backend"] != "v4l2" {
        return Vec::new();
    }
    let d = &video["device"];
    let signal = video["signal"].as_str().unwrap_or("?");
    let Some(node) = d["node"].as_str() else {
        return vec![format!("  capture: no device open (signal {signal}); `tether serve` keeps looking for it")];
    };
    let fps = d["fps"].as_f64().map(|f| format!("@{f:.0} fps")).unwrap_or_default();
    let mut lines = vec![format!(
        "  capture: {node} {} {:?}: {} {}x{}{fps} (signal {signal}, {} corrupt frames dropped)",
        d["driver"].as_str().unwrap_or("?"),
        d["card"].as_str().unwrap_or("?"),
        d["format"].as_str().unwrap_or("?"),
        d["width"],
        d["height"],
        d["corrupt_frames"].as_u64().unwrap_or(0),
    )];
    if let Some(p) = d["pipeline"].as_str() {
        lines.push(format!("           pipeline: {p}"));
    }
    lines
}

/// The configuration `tether serve` reads by default (its defaults when there is none).
fn configured(profile: Profile) -> Config {
    match tether::config::default_config_file(profile) {
        Some(f) if f.exists() => Config::load(profile, &f).unwrap_or_else(|_| Config::defaults(profile)),
        _ => Config::defaults(profile),
    }
}

/// Whether the daemon can save changes (its `status.storage`), where its data directory
/// is by the configuration, and the space left there.
fn storage_report(profile: Profile, daemon: &serde_json::Value) -> serde_json::Value {
    let dir = configured(profile).data_dir;
    // The widths are the C library's: 32 bits on some targets, 64 on others.
    #[allow(clippy::useless_conversion)]
    let free = nix::sys::statvfs::statvfs(&dir)
        .ok()
        .map(|fs| u64::from(fs.blocks_available()).saturating_mul(u64::from(fs.fragment_size())));
    json!({"daemon": daemon["status"]["storage"], "data_dir": dir, "free_bytes": free})
}

/// Which decoder `decoder_backend = auto` would use for compressed capture on this
/// machine, per format, and why the ones before it would be skipped.
fn decoder_report() -> serde_json::Value {
    use tether::device::video::codec::{find_hardware_decoder, find_stateless_h264, StatelessH264};
    use tether::device::video::v4l2::FourCc;
    let stateful = |f: FourCc| find_hardware_decoder(f).map(|n| format!("stateful M2M decoder {}", n.display()));
    let h264 = stateful(FourCc::H264).unwrap_or_else(|| match find_stateless_h264() {
        Some(node) => match StatelessH264::new(&node, None) {
            Ok(d) => format!("stateless decoder {} at {} (no stateful M2M decoder)", d.describe(), node.display()),
            Err(e) => format!("software (no stateful M2M decoder; the stateless one at {} fails: {e})", node.display()),
        },
        None => "software (no stateful M2M decoder, no stateless request-API decoder)".into(),
    });
    let mjpeg = stateful(FourCc::MJPEG).unwrap_or_else(|| {
        "software (no stateful M2M JPEG decoder; stateless decoders are used for H.264 only)".into()
    });
    json!({"h264": h264, "mjpeg": mjpeg})
}

/// The HTTPS server as the daemon reports it, else the CA on disk: the fingerprint in
/// OpenSSL's form (`openssl x509 -fingerprint -sha256` shows the same).
fn https_report(profile: Profile, daemon: &serde_json::Value) -> serde_json::Value {
    let live = &daemon["status"]["https"];
    if let Some(hex) = live["fingerprint"].as_str() {
        let fp = Fingerprint::parse(hex).map(|f| f.to_string());
        let port = live["port"].as_u64().unwrap_or(443);
        let urls: Vec<String> = live["hosts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|h| h.as_str())
            .map(|h| {
                let h = if h.contains(':') { format!("[{h}]") } else { h.to_string() };
                if port == 443 {
                    format!("https://{h}")
                } else {
                    format!("https://{h}:{port}")
                }
            })
            .collect();
        return json!({"serving": true, "fingerprint": fp, "urls": urls});
    }
    let ca = configured(profile).data_dir.join("tls").join("ca.crt");
    let fp = std::fs::read(&ca).ok().and_then(|pem| {
        use rustls_pki_types::pem::PemObject;
        rustls_pki_types::CertificateDer::pem_slice_iter(&pem).next()?.ok().map(|der| Fingerprint::of(&der).to_string())
    });
    json!({"serving": false, "fingerprint": fp, "urls": []})
}

/// Whether text reading works: a worker started as the daemon would start it (this binary's
/// `ocr-worker`, the `[ocr]` settings), its hello, and the packages to add otherwise.
fn ocr_report(settings: &tether::config::OcrSettings) -> serde_json::Value {
    use tether::device::ocr::{missing_packages, worker_config, TesseractWorker, WorkerCommand};
    if !settings.enabled {
        return json!({"enabled": false, "statement": "off ([ocr] enabled = false)"});
    }
    let Some(program) = WorkerCommand::current_exe() else {
        return json!({"enabled": true, "available": false, "statement": "cannot find this executable to start the worker"});
    };
    let info = match super::client_runtime() {
        Ok(rt) => rt.block_on(TesseractWorker::new(worker_config(settings, program)).ready()),
        Err(e) => return json!({"enabled": true, "available": false, "statement": format!("no runtime: {e}")}),
    };
    let packages = missing_packages(&info);
    let statement = if info.available {
        format!(
            "Tesseract {}, reading {} (installed: {})",
            info.version.as_deref().unwrap_or("?"),
            info.languages.join(", "),
            info.installed_languages.join(", ")
        )
    } else {
        let fix =
            if packages.is_empty() { String::new() } else { format!("; fix: apt install {}", packages.join(" ")) };
        format!("UNAVAILABLE: {}{fix}", info.problem.as_deref().unwrap_or("unknown"))
    };
    json!({"enabled": true, "available": info.available, "info": info, "missing_packages": packages, "statement": statement})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_capture_device_and_its_pipeline_are_named() {
        let video = json!({
            "backend": "v4l2", "signal": "locked",
            "device": {"node": "/dev/video0", "driver": "unicam", "card": "unicam", "format": "UYVY",
                       "width": 1920, "height": 1080, "fps": null, "corrupt_frames": 0,
                       "pipeline": "tc358743 10-000f:0 [UYVY8_1X16 1920x1080] → unicam:0, unicam:1 [UYVY8_1X16 1920x1080] → unicam-image (UYVY 1920x1080)"}
        });
        let lines = capture_lines(&video);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].contains("/dev/video0 unicam") && lines[0].contains("UYVY 1920x1080 (signal locked"),
            "{lines:?}"
        );
        assert!(lines[1].contains("pipeline: tc358743 10-000f:0 [UYVY8_1X16"), "{lines:?}");
        let uvc = json!({"backend": "v4l2", "signal": "locked", "device": {"node": "/dev/video1", "driver": "uvcvideo",
            "card": "USB Video", "format": "MJPG", "width": 1920, "height": 1080, "fps": 30.0, "corrupt_frames": 3, "pipeline": null}});
        assert_eq!(
            capture_lines(&uvc),
            ["  capture: /dev/video1 uvcvideo \"USB Video\": MJPG 1920x1080@30 fps (signal locked, 3 corrupt frames dropped)"]
        );
        let missing = json!({"backend": "v4l2", "signal": "no_device", "device": null});
        assert!(capture_lines(&missing)[0].contains("no device open (signal no_device)"));
        assert!(capture_lines(&json!({"backend": "sim"})).is_empty());
        assert!(capture_lines(&serde_json::Value::Null).is_empty(), "daemon not reachable");
    }
}
