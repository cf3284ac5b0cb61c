//! `tether update [FILE]`: the appliance's slots and versions, or install a signed bundle
//! (`flash.sh bundle`) and follow it through the reboot to its verdict (docs/updates.md).

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use base64::Engine as _;
use serde_json::{json, Value};
use tether::client::ControlClient;
use tether::protocol::update_params::{MAX_BUNDLE_BYTES, UPLOAD_PIECE_BYTES};

use super::remote::{client_error, Endpoint};

/// What `tether update` was asked.
pub struct UpdateRequest<'a> {
    /// The bundle to install; None prints the status.
    pub file: Option<&'a Path>,
    /// Install while a task runs.
    pub force: bool,
    /// Do not reboot once installed.
    pub no_reboot: bool,
    /// Stop waiting for the verdict after this long.
    pub wait: Duration,
    /// Print JSON (the status; with FILE, the last status seen).
    pub json: bool,
}

/// Runs `tether update`.
pub fn run_update(endpoint: Endpoint, req: UpdateRequest<'_>) -> anyhow::Result<ExitCode> {
    super::client_runtime()?.block_on(async move {
        let Some(file) = req.file else {
            let status = endpoint.call("update_status", json!({})).await?;
            if req.json {
                println!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                print_status(&status);
            }
            return Ok(ExitCode::SUCCESS);
        };
        install(&endpoint, file, &req).await
    })
}

fn print_status(s: &Value) {
    if s["available"] == json!(false) && s["image"].is_null() {
        println!("updates: unavailable: {}", s["problem"].as_str().unwrap_or("unknown"));
        return;
    }
    println!(
        "image:    {} {} (slot {}, booted by {})",
        s["image"]["id"].as_str().unwrap_or("?"),
        s["image"]["version"].as_str().unwrap_or("?"),
        s["booted"]["slot"].as_str().unwrap_or("?"),
        s["booted"]["loader"].as_str().unwrap_or("?")
    );
    for slot in s["slots"].as_array().into_iter().flatten() {
        let tries = match slot["state"].as_str() {
            Some("try") => format!(" ({} tries left)", slot["tries_left"]),
            _ => String::new(),
        };
        println!(
            "slot {}:   {}{}{}, version {}",
            slot["slot"].as_str().unwrap_or("?"),
            slot["state"].as_str().unwrap_or("?"),
            tries,
            if slot["booted"] == json!(true) { ", running" } else { "" },
            slot["version"].as_str().unwrap_or("unknown")
        );
    }
    println!("next boot: slot {}", s["next_boot"].as_str().unwrap_or("?"));
    if let Some(t) = s["trial"].as_object() {
        println!(
            "last trial: slot {} version {}: {}{}",
            t.get("slot").and_then(Value::as_str).unwrap_or("?"),
            t.get("version").and_then(Value::as_str).unwrap_or("unknown"),
            t.get("outcome").and_then(Value::as_str).unwrap_or("?"),
            t.get("reason")
                .and_then(Value::as_str)
                .filter(|r| !r.is_empty())
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        );
    }
    let i = &s["install"];
    if i["phase"] != json!("idle") {
        println!(
            "install:  {} {}% {}",
            i["phase"].as_str().unwrap_or("?"),
            i["percent"],
            i["message"].as_str().unwrap_or("")
        );
        if let Some(e) = i["error"].as_str() {
            println!("          error: {e}");
        }
    }
    if let Some(p) = s["problem"].as_str() {
        println!("problem:  {p}");
    }
}

/// One connection to the control socket for the upload's many pieces.
struct Uploader(ControlClient);

impl Uploader {
    async fn open(endpoint: &Endpoint) -> anyhow::Result<Uploader> {
        match endpoint {
            Endpoint::Socket(path) => Ok(Uploader(ControlClient::connect(path).await?)),
            Endpoint::Remote(_) => bail!("an HTTPS upload is one streamed request"),
        }
    }

    async fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        self.0.call(method, params).await.map_err(client_error)
    }
}

async fn install(endpoint: &Endpoint, file: &Path, req: &UpdateRequest<'_>) -> anyhow::Result<ExitCode> {
    let mut f = std::fs::File::open(file).with_context(|| format!("open {}", file.display()))?;
    let total = f.metadata()?.len();
    if total == 0 || total > MAX_BUNDLE_BYTES {
        bail!(
            "{} is {total} bytes: a bundle is 1 to {MAX_BUNDLE_BYTES} (make one with flash.sh bundle)",
            file.display()
        );
    }
    let before = endpoint.call("update_status", json!({})).await?;
    if before["available"] != json!(true) {
        bail!("UPDATE_UNAVAILABLE: {}", before["problem"].as_str().unwrap_or("this appliance does not take updates"));
    }
    let old_slot = before["booted"]["slot"].as_str().unwrap_or("?").to_string();
    let target = if old_slot == "a" { "b" } else { "a" };
    eprintln!(
        "updating {} {} (slot {old_slot}) with {} ({:.1} MiB) into slot {target}",
        before["image"]["id"].as_str().unwrap_or("?"),
        before["image"]["version"].as_str().unwrap_or("?"),
        file.display(),
        total as f64 / 1048576.0
    );
    let started = Instant::now();
    let started_install = match endpoint {
        // One streamed POST: the daemon takes it in pieces itself, and the request is
        // authenticated once, not once a piece.
        Endpoint::Remote(client) => {
            let (tx, rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(4);
            let path = file.to_path_buf();
            let reader = tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
                let mut f = std::fs::File::open(&path)?;
                let mut sent = 0u64;
                let mut shown = 0u64;
                let started = Instant::now();
                loop {
                    let mut buf = vec![0u8; 1 << 20];
                    let n = read_piece(&mut f, &mut buf)?;
                    if n == 0 {
                        return Ok(());
                    }
                    buf.truncate(n);
                    if tx.blocking_send(bytes::Bytes::from(buf)).is_err() {
                        // The request ended (refused): its answer says why.
                        return Ok(());
                    }
                    sent += n as u64;
                    show_progress(sent, total, &mut shown, started);
                }
            });
            let query = format!("/api/update?force={}&reboot={}", u8::from(req.force), u8::from(!req.no_reboot));
            let answer = client.post_stream(&query, total, rx).await;
            reader.await.context("the file reader")??;
            answer.map_err(|e| match e {
                tether::client::https::HttpsClientError::Remote { code, message, .. } => {
                    anyhow::anyhow!("{code}: {message}")
                }
                other => other.into(),
            })?
        }
        Endpoint::Socket(_) => {
            let mut up = Uploader::open(endpoint).await?;
            let mut offset = 0u64;
            let mut buf = vec![0u8; UPLOAD_PIECE_BYTES];
            let mut shown = 0u64;
            while offset < total {
                let n = read_piece(&mut f, &mut buf)?;
                if n == 0 {
                    bail!("{} ended after {offset} of {total} bytes (it changed while being sent)", file.display());
                }
                let data = base64::engine::general_purpose::STANDARD.encode(&buf[..n]);
                up.call("update_upload", json!({"offset": offset, "total": total, "data": data})).await?;
                offset += n as u64;
                show_progress(offset, total, &mut shown, started);
            }
            up.call("update_install", json!({"force": req.force, "reboot": !req.no_reboot})).await?
        }
    };
    eprintln!("  RAUC is installing into slot {}", started_install["target"].as_str().unwrap_or(target));
    follow(endpoint, &old_slot, target, req).await
}

/// Prints the upload's progress every 5 % (and at the end).
fn show_progress(sent: u64, total: u64, shown: &mut u64, started: Instant) {
    if sent * 20 / total > *shown || sent == total {
        *shown = sent * 20 / total;
        eprintln!(
            "  uploaded {:>3}% ({:.1} MiB, {:.1} s)",
            sent * 100 / total,
            sent as f64 / 1048576.0,
            started.elapsed().as_secs_f64()
        );
    }
}

fn read_piece(f: &mut std::fs::File, buf: &mut [u8]) -> anyhow::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        let got = f.read(&mut buf[n..])?;
        if got == 0 {
            break;
        }
        n += got;
    }
    Ok(n)
}

/// Polls `update_status` through the install, the reboot and the trial. Condition polls:
/// the appliance sends no event across its own reboot.
async fn follow(
    endpoint: &Endpoint,
    old_slot: &str,
    target: &str,
    req: &UpdateRequest<'_>,
) -> anyhow::Result<ExitCode> {
    let deadline = Instant::now() + req.wait;
    let mut last_message = String::new();
    let mut went_down = false;
    let mut installed = false;
    loop {
        let attempt = tokio::time::timeout(Duration::from_secs(10), endpoint.call("update_status", json!({}))).await;
        match attempt {
            Ok(Ok(s)) if !went_down => {
                let i = &s["install"];
                let message = format!("{}% {}", i["percent"], i["message"].as_str().unwrap_or(""));
                if message != last_message {
                    eprintln!("  {message}");
                    last_message = message;
                }
                match i["phase"].as_str() {
                    Some("failed") => {
                        eprintln!("not installed: {}", i["error"].as_str().unwrap_or("unknown error"));
                        emit(req, &s)?;
                        return Ok(ExitCode::from(1));
                    }
                    Some("installed") if req.no_reboot || i["reboot_requested"] != json!(true) => {
                        eprintln!("installed into slot {target}; it is tried at the next reboot");
                        emit(req, &s)?;
                        return Ok(ExitCode::SUCCESS);
                    }
                    Some("installed") => {
                        if !installed {
                            eprintln!("  rebooting into slot {target} to try it");
                            installed = true;
                        }
                        if matches!(endpoint, Endpoint::Socket(_)) {
                            // On the appliance itself: the reboot ends this command too.
                            return Ok(ExitCode::SUCCESS);
                        }
                    }
                    _ => {}
                }
            }
            Ok(Ok(s)) => {
                let booted = s["booted"]["slot"].as_str().unwrap_or("?");
                let trial = &s["trial"];
                if booted == target && trial["slot"] == json!(target) && trial["outcome"] == json!("good") {
                    eprintln!(
                        "updated: slot {target} runs {} and was marked good",
                        s["image"]["version"].as_str().unwrap_or("?")
                    );
                    emit(req, &s)?;
                    return Ok(ExitCode::SUCCESS);
                }
                if booted == old_slot && trial["slot"] == json!(target) && trial["outcome"] == json!("rolled-back") {
                    eprintln!(
                        "rolled back: slot {old_slot} runs {} again; the update in slot {target} failed: {}",
                        s["image"]["version"].as_str().unwrap_or("?"),
                        trial["reason"].as_str().unwrap_or("no reason recorded")
                    );
                    emit(req, &s)?;
                    return Ok(ExitCode::from(1));
                }
                let state = format!(
                    "booted slot {booted}, trial of slot {target}: {}",
                    trial["outcome"].as_str().unwrap_or("not started")
                );
                if state != last_message {
                    eprintln!("  {state}");
                    last_message = state;
                }
            }
            Ok(Err(_)) | Err(_) if !req.no_reboot => {
                if !went_down {
                    eprintln!("  the appliance went away (rebooting); waiting for it to come back");
                    went_down = true;
                }
            }
            Ok(Err(e)) => return Err(e),
            Err(_) => eprintln!("  no answer within 10 s; asking again"),
        }
        if Instant::now() >= deadline {
            bail!("TIMEOUT: no verdict within {} s; `tether update` (no file) shows where it is", req.wait.as_secs());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn emit(req: &UpdateRequest<'_>, status: &Value) -> anyhow::Result<()> {
    if req.json {
        println!("{}", serde_json::to_string_pretty(status)?);
    }
    Ok(())
}
