//! `tether serve`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use nix::unistd::{Group, Uid, User};
use tether::config::{default_config_file, CodecChoice, Config, HidBackend, Profile, VideoBackend, DEFAULT_AGENT_USER};
use tether::daemon::HttpsInfo;
use tether::daemon::{Daemon, DaemonOptions, DataDirLock, Devices};
use tether::device::hid::HidSink;
use tether::device::sim::{SimConfig, SimPhone};
use tether::device::video::encode::EncoderKind;
use tether::device::video::{FrameSource, NoVideo};
use tether::server::https::{HttpsConfig, HttpsListener};
use tether::server::mdns::MdnsConfig;
use tether::server::tls::{self, ServerNames, TlsMaterial};
use tether::server::RolePolicy;
use tether::server::{UnixServer, UnixServerConfig};
use tokio_util::sync::CancellationToken;

/// Flags given to `serve`; each overrides the config file.
#[derive(Debug)]
pub struct ServeOptions {
    pub sim: bool,
    pub config: Option<PathBuf>,
    pub board: Option<PathBuf>,
    pub data_dir: Option<PathBuf>,
    pub socket: Option<PathBuf>,
    pub listen: Option<SocketAddr>,
    pub agent_user: Option<String>,
    pub hid: Option<HidBackend>,
    pub video: Option<VideoBackend>,
}

/// The log filter when `RUST_LOG` is not set: our own events from `info`, rmcp's only from
/// `warn`. rmcp logs each MCP session it creates and each `initialize` it answers at
/// `info`, with the session id and the client's whole `clientInfo` (up to a 1 MiB message
/// per request): a client could fill the journal, and session ids do not belong in it.
const DEFAULT_LOG_FILTER: &str = "info,rmcp=warn";

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

fn resolve_config(opts: &ServeOptions) -> anyhow::Result<Config> {
    let profile = Profile::detect();
    let mut config = Config::resolve(profile, opts.config.as_deref(), opts.board.as_deref())?;
    config.sim |= opts.sim;
    if let Some(v) = &opts.data_dir {
        config.data_dir = v.clone();
    }
    if let Some(v) = &opts.socket {
        config.socket = v.clone();
    }
    if let Some(v) = opts.listen {
        config.listen = v;
    }
    if let Some(v) = opts.hid {
        config.hid = Some(v);
    }
    if let Some(v) = opts.video {
        config.video = Some(v);
    }
    if let Some(v) = &opts.agent_user {
        config.agent_user = Some(v.clone());
    }
    tracing::info!(
        profile = ?profile,
        config_file = ?opts.config.clone().or_else(|| default_config_file(profile)),
        board = config.board.as_ref().map(|b| b.name.as_str()),
        "configuration loaded"
    );
    Ok(config)
}

/// Resolves the agent user to a uid. A missing default user is fine (no agent role on this
/// machine); a missing user that was asked for explicitly is an error.
fn agent_uid(config: &Config) -> anyhow::Result<Option<u32>> {
    let explicit = config.agent_user.is_some();
    let name = config.agent_user.as_deref().unwrap_or(DEFAULT_AGENT_USER);
    if let Ok(uid) = name.parse::<u32>() {
        return Ok(Some(uid));
    }
    // A user database that cannot be read (no /etc/passwd on a minimal system) means the
    // user does not exist, as far as we can tell.
    match User::from_name(name).ok().flatten() {
        Some(user) => Ok(Some(user.uid.as_raw())),
        None if explicit => {
            bail!("agent user {name:?} does not exist (create it, or pass a numeric uid)")
        }
        None => {
            tracing::info!(
                user = name,
                "agent user does not exist yet; it is looked up at each connection, so creating it needs no restart"
            );
            Ok(None)
        }
    }
}

/// Large buffers (frames, screenshot scratch) above this come from their own mapping and go
/// back to the kernel when freed.
const MMAP_THRESHOLD_BYTES: i32 = 1 << 20;

/// Fixes glibc's mmap threshold. By default it rises to the size of each large block freed
/// (up to 32 MiB), after which 3–25 MB screenshot and frame buffers are carved from the heap
/// and stay in RSS after use: at 2160p that held 10–15 MiB more (bench `memory` row; 44 MiB
/// peak with the fixed threshold, 51–57 without). `false` when the allocator refused.
fn limit_heap_retention() -> bool {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: `mallopt` only sets an allocator tunable; it takes two integers, touches
        // no memory of ours, and is documented safe to call at any time (glibc serialises it
        // with allocations). Called once, before the runtime's threads start.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1 }
    }
    #[cfg(not(target_env = "gnu"))]
    {
        // musl (the lab's static build) returns freed large blocks by itself.
        true
    }
}

/// File descriptors kept for everything but HTTPS connections (devices, the store, the
/// control socket's clients).
const RESERVED_FDS: u64 = 256;

/// Raises the soft open-file limit to the hard one (connections are file descriptors;
/// the default soft limit of 1024 would make accept fail long before the connection
/// limit) and returns the HTTPS connections that fit beside [`RESERVED_FDS`].
fn raise_fd_limit(wanted: usize) -> usize {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return wanted;
    };
    let soft = if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() { hard } else { soft };
    let fit = usize::try_from(soft.saturating_sub(RESERVED_FDS)).unwrap_or(usize::MAX).max(16);
    if fit < wanted {
        tracing::warn!(
            open_files = soft,
            connections = fit,
            "the open-file limit allows only this many HTTPS connections"
        );
    }
    wanted.min(fit)
}

/// Runs the daemon until SIGINT/SIGTERM.
pub fn run_serve(opts: ServeOptions) -> anyhow::Result<ExitCode> {
    init_logging();
    // Whatever the daemon writes (the task store and its WAL, certificates, keys, the
    // calibration) is its own alone, whatever umask it was started with; the control
    // socket and its directory get their modes explicitly.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    if !limit_heap_retention() {
        tracing::warn!("could not fix the allocator's mmap threshold; large buffers may stay resident");
    }
    let config = resolve_config(&opts)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    // The HTTPS address first, before anything is made in the data directory (its lock,
    // a CA): a port in use must leave a fresh data directory as it was, with one message.
    let reserved = match config.https.enabled {
        true => Some(runtime.block_on(tether::server::https::reserve(config.listen))?),
        false => None,
    };
    // Before anything in the data directory is read or written (certificates, the task
    // store's crash recovery): a second daemon here would mark the first's tasks interrupted.
    let data_lock = DataDirLock::acquire(&config.data_dir, &config.socket)?;
    if !data_lock.fixed().is_empty() {
        // Said once, at start: what another user could read until now.
        let fixed: Vec<String> = data_lock.fixed().iter().map(|p| p.display().to_string()).collect();
        tracing::warn!(
            dir = %config.data_dir.display(),
            fixed = ?fixed,
            "the data directory was open to other users: made it private (directories 0700, files 0600)"
        );
    }
    if !data_lock.left_alone().is_empty() {
        let left: Vec<String> = data_lock.left_alone().iter().map(|p| p.display().to_string()).collect();
        tracing::warn!(
            dir = %config.data_dir.display(),
            left = ?left,
            "left open to other users: owned by another user, not the daemon's to change (the data directory itself is 0700)"
        );
    }
    let agent_uid = agent_uid(&config)?;
    let service_uid = Uid::effective().as_raw();
    if agent_uid == Some(service_uid) || agent_uid == Some(0) {
        bail!(
            "agent user {:?} is root or the daemon's own user; agents must run under a separate uid",
            config.agent_user.as_deref().unwrap_or(DEFAULT_AGENT_USER)
        );
    }
    // A name (not a uid) is looked up again at each connection (RolePolicy::agent_name).
    let agent_name = Some(config.agent_user.as_deref().unwrap_or(DEFAULT_AGENT_USER))
        .filter(|n| n.parse::<u32>().is_err())
        .map(str::to_string);
    let operator_gid = Group::from_name(&config.socket_group).ok().flatten().map(|g| g.gid.as_raw());
    if operator_gid.is_none() {
        tracing::info!(group = %config.socket_group, "operators' group does not exist; only admins can connect");
    }
    let tls = if config.https.enabled {
        match load_tls(&config) {
            Ok(tls) => Some(tls),
            // The appliance's CA cannot be made on a disk that takes no write. Serving a CA
            // that is gone at the next start would break every client that pins it: HTTPS
            // waits for a start with space; the control socket serves meanwhile.
            Err(e) if e.downcast_ref::<tls::TlsError>().is_some_and(tls::TlsError::refused_by_disk) => {
                tracing::error!(error = %format!("{e:#}"), "HTTPS is off: its certificates cannot be saved (free space in the data directory, then restart)");
                None
            }
            Err(e) => return Err(e),
        }
    } else {
        None
    };

    if config.decoder_backend == CodecChoice::Hardware {
        use tether::device::video::{codec::find_hardware_decoder, v4l2::FourCc};
        if find_hardware_decoder(FourCc::MJPEG).is_none() && find_hardware_decoder(FourCc::H264).is_none() {
            bail!(
                "decoder_backend = \"hardware\" but no V4L2 M2M node decodes MJPEG or H.264 to YU12 here; use \
                 \"auto\" or \"software\""
            );
        }
    }
    let encoder_kind = EncoderKind::select(config.encoder_backend)?;
    match &encoder_kind {
        EncoderKind::Hardware(node) => tracing::info!(node = %node.display(), "H.264 for viewers: hardware (V4L2 M2M)"),
        EncoderKind::Software => tracing::info!("H.264 for viewers: software (openh264)"),
    }
    // The control socket's directory (/run/tether on the appliance): the health report and
    // the reboot request live there.
    let runtime_dir = config.socket.parent().filter(|d| d.is_dir()).map(std::path::Path::to_path_buf);
    runtime.block_on(async move {
        let (devices, all_sim) = open_devices(&config)?;
        // Bound before the daemon starts, so `status` and pairing URLs carry the real port.
        // HTTPS serves only with its certificates (none on a disk that refused them).
        let listener = match (&tls, reserved) {
            (Some((material, hostname)), Some(reserved)) => {
                let mut https = HttpsConfig::new(config.listen, material.clone(), hostname.clone());
                https.max_body = config.https.max_body_bytes;
                // Zero would reap a session between its own messages: one second at least.
                https.mcp_session_idle = std::time::Duration::from_secs(config.https.mcp_session_idle_s.max(1));
                https.max_connections = raise_fd_limit(config.https.max_connections);
                Some(HttpsListener::from_bound(reserved, https))
            }
            _ => None,
        };
        let https_info = listener.as_ref().map(|l| HttpsInfo {
            port: l.port(),
            hosts: l.preferred_hosts(),
            fingerprint: l.fingerprint().hex(),
        });
        let https_port = https_info.as_ref().map(|i| i.port);
        let daemon = Daemon::start(
            devices,
            DaemonOptions {
                sim: all_sim,
                timings: config.input,
                layout: config.keyboard_layout,
                data_dir: Some(config.data_dir.clone()),
                active_rect: config.active_rect,
                pointer_profile: config.pointer_profile,
                relative_counts_per_screen: config.relative_counts_per_screen,
                encoder: config.encoder,
                encoder_kind,
                transcode_capture: !config.passthrough,
                tasks_kept: config.tasks_kept,
                queue_timeout: Some(std::time::Duration::from_millis(config.limits.queue_timeout_ms)),
                limits: config.limits.daemon_limits(),
                https: https_info,
                act: config.act.clone(),
                text_reader: text_reader(&config.ocr),
                recording: config.recording,
                // Updates need the appliance image (IMAGE_VERSION) booted through tether's
                // boot script; anywhere else `update_status` says why not.
                update: runtime_dir
                    .clone()
                    .map(|dir| tether::daemon::update::UpdateOptions { runtime_dir: dir, ..config.update.clone() }),
            },
        )
        .context("start daemon")?;
        let mut server_config = UnixServerConfig::new(
            config.socket.clone(),
            RolePolicy { service_uid, agent_uid, agent_name, operator_gid },
        );
        server_config.group = operator_gid;
        let server = UnixServer::bind(server_config, daemon.clone())?;
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let stopping = daemon.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutting down");
            // The daemon first: every request is cancelled, ends on its own and journals
            // what it did; only then are the connections dropped (their requests with them).
            stopping.shutdown();
            tokio::select! {
                ended = stopping.requests_ended(std::time::Duration::from_secs(2)) => if !ended {
                    tracing::warn!("requests still being answered after 2 s; ending them");
                },
                // A second Ctrl-C means now.
                () = wait_for_signal() => tracing::info!("second signal: not waiting for requests"),
            }
            stop.cancel();
        });
        if let (Some(dir), Some(port)) = (config.mdns_dir.clone().filter(|d| d.is_dir()), https_port) {
            let board = config.board.as_ref().map_or_else(|| "none".to_string(), |b| b.name.clone());
            let mdns = MdnsConfig { dir, board, port };
            tokio::spawn(tether::server::mdns::announce(daemon.clone(), mdns, shutdown.clone()));
        }
        let health_https = listener.as_ref().map(|l| (l.port(), l.fingerprint()));
        let https = listener.map(|l| tokio::spawn(l.serve(daemon.clone(), shutdown.clone())));
        if let Some(dir) = runtime_dir.clone() {
            let gadget = (config.hid_backend() == HidBackend::Gadget)
                .then(|| std::path::Path::new(tether::device::hid::gadget::CONFIGFS_GADGETS).join("tether/UDC"));
            tokio::spawn(super::health::report_health(super::health::HealthPlan {
                runtime_dir: dir,
                https: health_https,
                gadget_udc_file: gadget,
                patience: std::time::Duration::from_secs(120),
            }));
        }
        server.serve(shutdown).await;
        if let Some(h) = https {
            let _ = h.await;
        }
        daemon.shutdown();
        // Input being played when the signal came is cancelled; its release must be
        // written before the runtime ends.
        if !daemon.input_released(std::time::Duration::from_secs(2)).await {
            tracing::warn!("input was still being played at exit");
        }
        // Everything journalled so far is in the database file, and its journal is gone.
        daemon.close_store().await;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The certificates the HTTPS server serves: the user's, or the appliance's own CA and a
/// server certificate for this machine's names (created or reissued as needed).
fn load_tls(config: &Config) -> anyhow::Result<(TlsMaterial, String)> {
    let hostname =
        nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "tether".into());
    let names = ServerNames::of_machine(&hostname, &tls::interface_ips(), &config.https.names);
    let material = match (&config.https.cert, &config.https.key) {
        (Some(cert), Some(key)) => tls::from_files(cert, key, &names)?,
        (None, None) => tls::load_or_create(&config.data_dir, &names)
            .with_context(|| format!("certificates in {}", config.data_dir.join("tls").display()))?,
        _ => bail!("[https] cert and key go together: set both, or neither for the appliance's own CA"),
    };
    tracing::info!(fingerprint = %material.fingerprint, "HTTPS certificate authority (clients pin this)");
    Ok((material, hostname))
}

/// On a board with a CSI bridge: gives the bridge our EDID (it has none of its own, and
/// without one the phone sends nothing). A missing bridge is reported, not fatal: the
/// board may be capturing from a UVC dongle instead.
fn csi_bridge_edid() {
    use tether::device::video::edid::{bridge_subdev, edid_1080p60, load_edid};
    match bridge_subdev(std::path::Path::new("/")) {
        Some(node) => match load_edid(&node, &edid_1080p60()) {
            Ok(()) => tracing::info!(node = %node.display(), "EDID (1080p60 preferred) loaded into the CSI bridge"),
            Err(e) => tracing::warn!(node = %node.display(), error = %e, "could not load the EDID into the CSI bridge"),
        },
        None => tracing::info!("CSI bridge not detected (see `tether doctor`)"),
    }
}

/// The devices the config asks for; `true` when both are the virtual iPhone.
fn open_devices(config: &Config) -> anyhow::Result<(Devices, bool)> {
    // The virtual phone's keyboard is set to the language the daemon types for.
    let phone = SimPhone::new(SimConfig { layout: config.keyboard_layout, ..config.sim_phone });
    let hid: Box<dyn HidSink> = match config.hid_backend() {
        HidBackend::Sim => Box::new(phone.hid()),
        HidBackend::Gadget => gadget_sink()?,
    };
    if config.board.as_ref().is_some_and(|b| b.csi.is_some()) && config.video_backend() == VideoBackend::V4l2 {
        csi_bridge_edid();
    }
    let video: Box<dyn FrameSource> = match config.video_backend() {
        VideoBackend::Sim => Box::new(phone.display()),
        VideoBackend::V4l2 => v4l2_source(&config.capture, config.decoder_backend)?,
        VideoBackend::Replay => Box::new(tether::device::video::replay::ReplayCapture {
            // validate() refuses `video = "replay"` without a path.
            path: config.replay.path.clone().unwrap_or_default(),
            fps: config.replay.fps,
            decoder: config.decoder_backend,
        }),
        VideoBackend::None => {
            tracing::warn!("no video backend: screenshots answer NO_FRAME (V4L2 capture arrives with its issue)");
            Box::new(NoVideo)
        }
    };
    let all_sim = config.hid_backend() == HidBackend::Sim && config.video_backend() == VideoBackend::Sim;
    tracing::info!(hid = hid.backend(), video = video.backend(), "devices");
    // `sim_state` only makes sense when the sim both receives the input and shows it.
    Ok((Devices { hid, video, sim: all_sim.then_some(phone) }, all_sim))
}

#[cfg(target_os = "linux")]
fn v4l2_source(c: &tether::config::CaptureConfig, decoder: CodecChoice) -> anyhow::Result<Box<dyn FrameSource>> {
    use tether::device::video::v4l2::FourCc;
    let format = match c.format.as_deref() {
        None => None,
        Some(name) => {
            let bytes: [u8; 4] = name
                .as_bytes()
                .try_into()
                .map_err(|_| anyhow::anyhow!("capture.format {name:?} must be a four-character code like YUYV"))?;
            Some(FourCc::new(&bytes))
        }
    };
    Ok(Box::new(tether::device::video::capture::V4l2Capture {
        path: c.device.clone(),
        input: c.input,
        format,
        size: c.size().map_err(|e| anyhow::anyhow!(e))?,
        fps: c.fps,
        source: c.source.clone(),
        decoder,
    }))
}

#[cfg(not(target_os = "linux"))]
fn v4l2_source(_c: &tether::config::CaptureConfig, _decoder: CodecChoice) -> anyhow::Result<Box<dyn FrameSource>> {
    bail!("V4L2 capture needs Linux; use `--sim`")
}

#[cfg(target_os = "linux")]
fn gadget_sink() -> anyhow::Result<Box<dyn HidSink>> {
    use tether::device::hid::hidg::{HidgSink, DEFAULT_WRITE_TIMEOUT};
    Ok(Box::new(HidgSink::from_gadget(DEFAULT_WRITE_TIMEOUT).context("open the USB HID gadget")?))
}

#[cfg(not(target_os = "linux"))]
fn gadget_sink() -> anyhow::Result<Box<dyn HidSink>> {
    bail!("the USB HID gadget needs Linux configfs; use `--sim`")
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        // Without signal handlers the daemon runs until killed.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// The text reader `[ocr]` asks for: this binary's `ocr-worker`, kept loaded. `None` when
/// reading is disabled, or this executable cannot be found again (then the text methods
/// answer `OCR_UNAVAILABLE`, saying so).
fn text_reader(settings: &tether::config::OcrSettings) -> Option<tether::device::ocr::SharedReader> {
    let Some(program) = tether::device::ocr::worker::WorkerCommand::current_exe() else {
        tracing::warn!("the running executable cannot be found: text reading is off");
        return None;
    };
    tether::device::ocr::worker::reader_from(settings, program).map(tether::device::ocr::SharedReader)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allocator_takes_the_mmap_threshold() {
        assert!(limit_heap_retention());
        // Large blocks still allocate, fill and free normally afterwards.
        let big = vec![7u8; 4 * MMAP_THRESHOLD_BYTES as usize];
        assert!(big.iter().all(|&b| b == 7));
    }
}
