//! The one typed configuration: defaults per profile, then the TOML file, then flags.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::board::{Board, CaptureKind};
use crate::daemon::{ActSettings, DaemonLimits, RecordingSettings, DEFAULT_QUEUE_TIMEOUT, DEFAULT_RELATIVE_COUNTS};
use crate::device::geometry::PixelRect;
use crate::device::hid::descriptor::PointerProfile;
use crate::device::hid::Layout;
use crate::device::input::{InputTimings, RelativePlanner};
use crate::device::sim::SimConfig;
use crate::device::video::codec::EncoderSettings;

/// Where the daemon runs, which decides the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// A developer's machine: XDG directories, socket under `$XDG_RUNTIME_DIR`.
    Laptop,
    /// The appliance: `/etc/tether/tether.toml`, `/var/lib/tether`, `/run/tether`.
    Appliance,
}

/// Where HID reports go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HidBackend {
    /// The virtual iPhone.
    Sim,
    /// The configfs gadget's `/dev/hidgN` (set up by `tether gadget up`).
    Gadget,
}

/// Where frames come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VideoBackend {
    /// The virtual iPhone's renderer.
    Sim,
    /// No capture (screenshots answer `NO_FRAME`).
    None,
    /// A V4L2 capture node (HDMI bridge or UVC dongle), see [`CaptureConfig`].
    V4l2,
    /// A recorded capture (H.264 or MJPEG file) played in a loop, see [`ReplayConfig`]:
    /// the compressed-capture paths without a dongle.
    Replay,
}

/// `[replay]`: the recording `video = "replay"` plays.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReplayConfig {
    /// An H.264 Annex B stream (`ffmpeg ... -f h264`) or concatenated JPEGs
    /// (`ffmpeg ... -f mjpeg`).
    pub path: Option<PathBuf>,
    /// Pictures per second.
    pub fps: f32,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        ReplayConfig { path: None, fps: 30.0 }
    }
}

/// The V4L2 capture node to use with `video = "v4l2"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CaptureConfig {
    /// The node.
    pub device: PathBuf,
    /// Input to select (the HDMI input on multi-input devices).
    pub input: Option<u32>,
    /// Pixel format (`YUYV`, `UYVY`, `NV12`, `RGB3`, `MJPG`, `H264`); default: the node's current
    /// format when tether converts it, else the first of those the node offers.
    pub format: Option<String>,
    /// Capture size as `WIDTHxHEIGHT` for devices without DV timings (UVC dongles); default:
    /// the largest the device offers. HDMI bridges take the signal's size.
    pub size: Option<String>,
    /// Frame rate for devices that take one (UVC); default: the fastest at the chosen size.
    pub fps: Option<u32>,
    /// Media-controller capture (a CSI bridge behind `unicam`): the source entity's name,
    /// e.g. `tc358743 10-000f`; default: the one the enabled links lead to.
    pub source: Option<String>,
}

impl Default for CaptureConfig {
    fn default() -> Self {
        CaptureConfig {
            device: PathBuf::from("/dev/video0"),
            input: None,
            format: None,
            size: None,
            fps: None,
            source: None,
        }
    }
}

impl CaptureConfig {
    /// `size` as (width, height); an error a person can act on when it is not `WxH`.
    pub fn size(&self) -> Result<Option<(u32, u32)>, String> {
        let Some(text) = self.size.as_deref() else { return Ok(None) };
        let parsed =
            text.split_once(['x', 'X']).and_then(|(w, h)| Some((w.trim().parse().ok()?, h.trim().parse().ok()?)));
        match parsed {
            Some((w, h)) if (16..=7680).contains(&w) && (16..=4320).contains(&h) => Ok(Some((w, h))),
            _ => Err(format!("capture.size {text:?} must be WIDTHxHEIGHT, e.g. \"1920x1080\" (16x16..=7680x4320)")),
        }
    }
}

impl std::str::FromStr for HidBackend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sim" => Ok(HidBackend::Sim),
            "gadget" => Ok(HidBackend::Gadget),
            other => Err(format!("unknown HID backend {other:?}: use sim or gadget")),
        }
    }
}

impl std::str::FromStr for VideoBackend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sim" => Ok(VideoBackend::Sim),
            "none" => Ok(VideoBackend::None),
            "v4l2" => Ok(VideoBackend::V4l2),
            "replay" => Ok(VideoBackend::Replay),
            other => Err(format!("unknown video backend {other:?}: use sim, v4l2, replay or none")),
        }
    }
}

/// `[https]`: the HTTPS server.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpsSettings {
    /// Serve HTTPS at all (`false`: the control socket only).
    pub enabled: bool,
    /// Extra names and addresses the appliance answers to (a DNS name on your LAN, a
    /// VPN address): added to the certificate and the Host allowlist.
    pub names: Vec<String>,
    /// A certificate chain (PEM) to serve instead of the appliance's own CA; clients then
    /// pin the chain's last certificate.
    pub cert: Option<PathBuf>,
    /// The key for `cert` (PEM).
    pub key: Option<PathBuf>,
    /// Largest request body in bytes (default 1 MiB).
    pub max_body_bytes: usize,
    /// Most connections open at once.
    pub max_connections: usize,
    /// An MCP session at `/mcp` with no traffic for this many seconds is forgotten (its
    /// client initializes again; `tether mcp --url` does so by itself). Default 600.
    pub mcp_session_idle_s: u64,
}

impl Default for HttpsSettings {
    fn default() -> Self {
        HttpsSettings {
            enabled: true,
            names: Vec::new(),
            cert: None,
            key: None,
            max_body_bytes: 1 << 20,
            max_connections: 1024,
            mcp_session_idle_s: 600,
        }
    }
}

/// The agent user looked for when none is configured.
pub const DEFAULT_AGENT_USER: &str = "tether-agent";

/// The appliance's configuration file; its presence selects [`Profile::Appliance`].
pub const APPLIANCE_CONFIG: &str = "/etc/tether/tether.toml";

impl Profile {
    /// The appliance profile when its config file exists, the laptop profile otherwise.
    pub fn detect() -> Profile {
        if Path::new(APPLIANCE_CONFIG).exists() {
            Profile::Appliance
        } else {
            Profile::Laptop
        }
    }
}

/// The daemon's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Drive the virtual iPhone instead of hardware.
    pub sim: bool,
    /// Persistent state (database, certificates).
    pub data_dir: PathBuf,
    /// The control socket.
    pub socket: PathBuf,
    /// Group owning the control socket; its members get the `operate` role.
    pub socket_group: String,
    /// HTTPS listen address (appliance: 0.0.0.0:443; laptop: 127.0.0.1:8443).
    pub listen: SocketAddr,
    /// The HTTPS server's names, certificate and limits (`[https]`).
    pub https: HttpsSettings,
    /// The agent user (name or numeric uid): agent-only on the control socket. `None`:
    /// [`DEFAULT_AGENT_USER`] if that user exists (set explicitly, it must exist).
    pub agent_user: Option<String>,
    /// The virtual iPhone's shape.
    pub sim_phone: SimConfig,
    /// The phone's soft-keyboard language, which fixes the HID layout at enumeration.
    pub keyboard_layout: Layout,
    /// Gesture timings.
    pub input: InputTimings,
    /// Where the phone's picture sits in the capture frame, when detection should not guess
    /// (capture pixels). `None`: detected per signal generation.
    pub active_rect: Option<PixelRect>,
    /// `absolute` (default) or the `relative` mouse fallback.
    pub pointer_profile: PointerProfile,
    /// Relative profile: the screen's size in base-gain mouse counts (iOS points).
    pub relative_counts_per_screen: (f64, f64),
    /// Finished tasks kept in the task store (unfinished ones are never deleted).
    pub tasks_kept: u32,
    /// HID backend; default: `sim` with `sim = true`, else `gadget`.
    pub hid: Option<HidBackend>,
    /// Video backend; default: `sim` with `sim = true`, else `v4l2` when the board has a UVC
    /// capture node, else `none`.
    pub video: Option<VideoBackend>,
    /// USB device controller for `tether gadget up` (default: the only real one).
    pub udc: Option<String>,
    /// The capture node for `video = "v4l2"`.
    pub capture: CaptureConfig,
    /// H.264 for viewers (`[encoder]`).
    pub encoder: EncoderSettings,
    /// Which H.264 encoder for viewers: `auto` (the board's M2M encoder when there is one),
    /// `hardware` (refuse to start without it) or `software` (openh264).
    pub encoder_backend: CodecChoice,
    /// Which decoder for compressed capture: `auto` (a stateful M2M decoder, else for
    /// H.264 a stateless request-API one, else software), `hardware` (either kind, never
    /// software) or `software`.
    pub decoder_backend: CodecChoice,
    /// Hand H.264/MJPEG capture to viewers as it arrives (default). `false` decodes and
    /// encodes it again, as before passthrough: for a browser that cannot decode the
    /// device's H.264 profile, and for comparing the two.
    pub passthrough: bool,
    /// The recording for `video = "replay"`.
    pub replay: ReplayConfig,
    /// Global limits (`[limits]`).
    pub limits: LimitsConfig,
    /// avahi's service directory for tether's mDNS records (appliance:
    /// `/run/tether-mdns`, used when it exists; laptop: none).
    pub mdns_dir: Option<PathBuf>,
    /// The board (`--board` or `/etc/tether/board.toml`): its capture node is the default
    /// video source when not simulating.
    pub board: Option<Board>,
    /// How actions verify their effect on the screen (`[act]`).
    pub act: ActSettings,
    /// Reading text in the phone's pictures (`[ocr]`).
    pub ocr: OcrSettings,
    /// Task recordings: quality and disk caps (`[recording]`).
    pub recording: RecordingSettings,
    /// Where updates find the boot partition, os-release, the kernel command line and RAUC
    /// (`[update]`; the image's paths by default).
    pub update: crate::daemon::update::UpdateOptions,
}

/// `[ocr]`: the text reader (Tesseract in a worker process; see `device::ocr`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OcrSettings {
    /// Whether the daemon reads text at all (`false`: text tools answer unavailable and no
    /// worker is started).
    pub enabled: bool,
    /// Tesseract language codes read by default, e.g. `["eng", "deu"]`; each needs its
    /// `tesseract-ocr-<code>` package.
    pub languages: Vec<String>,
    /// The Tesseract library to load (a file name searched the usual way, or a path);
    /// default `libtesseract.so.5`.
    pub library: Option<PathBuf>,
    /// The directory with the `.traineddata` files; default: `$TESSDATA_PREFIX`, else
    /// Debian's `/usr/share/tesseract-ocr/5/tessdata`.
    pub tessdata: Option<PathBuf>,
    /// How long one read may take before its worker is killed (ms).
    pub read_deadline_ms: u64,
    /// The worker's address-space limit (MiB): a runaway allocation kills the worker, not
    /// the appliance.
    pub memory_limit_mib: u64,
}

impl Default for OcrSettings {
    fn default() -> Self {
        OcrSettings {
            enabled: true,
            languages: vec!["eng".into()],
            library: None,
            tessdata: None,
            read_deadline_ms: u64::try_from(crate::device::ocr::DEFAULT_READ_DEADLINE.as_millis()).unwrap_or(10_000),
            memory_limit_mib: crate::device::ocr::worker::DEFAULT_MEMORY_LIMIT_MIB,
        }
    }
}

impl OcrSettings {
    /// Checks the languages and numbers; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        use crate::device::ocr::tesseract::{check_language, MAX_LANGUAGES};
        if self.languages.is_empty() || self.languages.len() > MAX_LANGUAGES {
            return Err(format!("ocr.languages needs 1..={MAX_LANGUAGES} codes, has {}", self.languages.len()));
        }
        for l in &self.languages {
            check_language(l).map_err(|e| format!("ocr.languages: {e}"))?;
        }
        if !(100..=600_000).contains(&self.read_deadline_ms) {
            return Err(format!("ocr.read_deadline_ms = {} is outside 100..=600000", self.read_deadline_ms));
        }
        if !(256..=16_384).contains(&self.memory_limit_mib) {
            return Err(format!("ocr.memory_limit_mib = {} is outside 256..=16384", self.memory_limit_mib));
        }
        if self.library.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
            return Err("ocr.library is empty".into());
        }
        Ok(())
    }
}

/// `[limits]`: what keeps the daemon responsive and its memory bounded whatever clients do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// An action waiting longer than this for the device (behind other input) is refused
    /// with `BUSY` instead of running late.
    pub queue_timeout_ms: u64,
    /// Connections at once.
    pub max_connections: usize,
    /// Screenshots produced at once.
    pub max_screenshots_in_flight: usize,
    /// Screenshots waiting for those; more are refused with `BUSY`.
    pub max_screenshots_waiting: usize,
    /// Output bytes queued for all clients together.
    pub max_queued_output_bytes: usize,
    /// Connections and HTTP requests one token (or Unix user, or nameless address) may
    /// have open; root on the control socket is not limited.
    pub sessions_per_principal: usize,
    /// Of every total (connections, MCP sessions, streams), the part kept for
    /// administrators (at most a quarter of the total).
    pub reserved_for_admin: usize,
    /// MCP sessions at once.
    pub max_mcp_sessions: usize,
    /// MCP sessions of one token; its least recently used goes for a new one.
    pub mcp_sessions_per_principal: usize,
    /// Streamed answers at once (task leases, followed journals, MCP streams).
    pub max_streams: usize,
    /// Streamed answers of one token.
    pub streams_per_principal: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        let d = DaemonLimits::default();
        LimitsConfig {
            queue_timeout_ms: u64::try_from(DEFAULT_QUEUE_TIMEOUT.as_millis()).unwrap_or(10_000),
            max_connections: d.max_sessions,
            max_screenshots_in_flight: d.max_screenshots_in_flight,
            max_screenshots_waiting: d.max_screenshots_waiting,
            max_queued_output_bytes: d.max_queued_output_bytes,
            sessions_per_principal: d.sessions_per_principal,
            reserved_for_admin: d.reserved_for_admin,
            max_mcp_sessions: d.max_mcp_sessions,
            mcp_sessions_per_principal: d.mcp_sessions_per_principal,
            max_streams: d.max_streams,
            streams_per_principal: d.streams_per_principal,
        }
    }
}

impl LimitsConfig {
    /// The daemon's limits.
    pub fn daemon_limits(&self) -> DaemonLimits {
        DaemonLimits {
            max_sessions: self.max_connections,
            max_screenshots_in_flight: self.max_screenshots_in_flight,
            max_screenshots_waiting: self.max_screenshots_waiting,
            max_queued_output_bytes: self.max_queued_output_bytes,
            sessions_per_principal: self.sessions_per_principal,
            reserved_for_admin: self.reserved_for_admin,
            max_mcp_sessions: self.max_mcp_sessions,
            mcp_sessions_per_principal: self.mcp_sessions_per_principal,
            max_streams: self.max_streams,
            streams_per_principal: self.streams_per_principal,
        }
    }

    fn validate(&self) -> Result<(), String> {
        let ranges: [(&str, u64, u64, u64); 11] = [
            ("queue_timeout_ms", self.queue_timeout_ms, 100, 600_000),
            ("max_connections", self.max_connections as u64, 1, 4096),
            ("max_screenshots_in_flight", self.max_screenshots_in_flight as u64, 1, 16),
            ("max_screenshots_waiting", self.max_screenshots_waiting as u64, 0, 1024),
            ("max_queued_output_bytes", self.max_queued_output_bytes as u64, 1 << 20, 1 << 30),
            ("sessions_per_principal", self.sessions_per_principal as u64, 1, 4096),
            ("reserved_for_admin", self.reserved_for_admin as u64, 0, 1024),
            ("max_mcp_sessions", self.max_mcp_sessions as u64, 1, 4096),
            ("mcp_sessions_per_principal", self.mcp_sessions_per_principal as u64, 1, 4096),
            ("max_streams", self.max_streams as u64, 1, 4096),
            ("streams_per_principal", self.streams_per_principal as u64, 1, 4096),
        ];
        for (name, value, min, max) in ranges {
            if !(min..=max).contains(&value) {
                return Err(format!("limits.{name} = {value} is outside {min}..={max}"));
            }
        }
        Ok(())
    }
}

pub use crate::device::video::codec::CodecChoice;

/// The TOML file: every field optional, unknown fields rejected.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    sim: Option<bool>,
    data_dir: Option<PathBuf>,
    socket: Option<PathBuf>,
    socket_group: Option<String>,
    listen: Option<SocketAddr>,
    https: Option<HttpsSettings>,
    agent_user: Option<String>,
    sim_phone: Option<SimConfig>,
    keyboard_layout: Option<Layout>,
    input: Option<InputTimings>,
    active_rect: Option<PixelRect>,
    pointer_profile: Option<PointerProfile>,
    relative_counts_per_screen: Option<(f64, f64)>,
    tasks_kept: Option<u32>,
    hid: Option<HidBackend>,
    video: Option<VideoBackend>,
    udc: Option<String>,
    capture: Option<CaptureConfig>,
    encoder: Option<EncoderSettings>,
    encoder_backend: Option<CodecChoice>,
    decoder_backend: Option<CodecChoice>,
    passthrough: Option<bool>,
    replay: Option<ReplayConfig>,
    limits: Option<LimitsConfig>,
    mdns_dir: Option<PathBuf>,
    act: Option<ActSettings>,
    ocr: Option<OcrSettings>,
    recording: Option<RecordingSettings>,
    update: Option<crate::daemon::update::UpdateOptions>,
}

/// Errors loading the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("read config file {}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML for this struct.
    #[error("config file {}: {message}", .path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's explanation, with line and column.
        message: String,
    },
    /// The board file could not be read or is invalid.
    #[error(transparent)]
    Board(#[from] crate::board::BoardError),
}

/// The laptop default for the control socket: `$XDG_RUNTIME_DIR/tether/control.sock`, or a
/// per-user directory under the temp dir when there is no runtime dir.
pub fn default_socket(profile: Profile) -> PathBuf {
    match profile {
        Profile::Appliance => PathBuf::from("/run/tether/control.sock"),
        Profile::Laptop => match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
            Some(dir) => PathBuf::from(dir).join("tether/control.sock"),
            None => {
                std::env::temp_dir().join(format!("tether-{}", nix::unistd::geteuid().as_raw())).join("control.sock")
            }
        },
    }
}

fn default_data_dir(profile: Profile) -> PathBuf {
    match profile {
        Profile::Appliance => PathBuf::from("/var/lib/tether"),
        Profile::Laptop => match std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
            Some(dir) => PathBuf::from(dir).join("tether"),
            None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
                Some(home) => PathBuf::from(home).join(".local/share/tether"),
                None => std::env::temp_dir().join("tether-data"),
            },
        },
    }
}

/// The config file read when none is given: the appliance's, or the user's XDG one.
pub fn default_config_file(profile: Profile) -> Option<PathBuf> {
    match profile {
        Profile::Appliance => Some(PathBuf::from(APPLIANCE_CONFIG)),
        Profile::Laptop => {
            let base = std::env::var_os("XDG_CONFIG_HOME")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
            Some(base.join("tether/tether.toml")).filter(|p| p.exists())
        }
    }
}

impl Config {
    /// The HID backend in effect.
    pub fn hid_backend(&self) -> HidBackend {
        self.hid.unwrap_or(if self.sim { HidBackend::Sim } else { HidBackend::Gadget })
    }

    /// The video backend in effect.
    pub fn video_backend(&self) -> VideoBackend {
        let board_capture = self.board.as_ref().is_some_and(|b| b.capture.kind == CaptureKind::Uvc);
        self.video.unwrap_or(match (self.sim, board_capture) {
            (true, _) => VideoBackend::Sim,
            (false, true) => VideoBackend::V4l2,
            (false, false) => VideoBackend::None,
        })
    }

    /// The defaults of `profile`.
    pub fn defaults(profile: Profile) -> Config {
        Config {
            sim: false,
            data_dir: default_data_dir(profile),
            socket: default_socket(profile),
            socket_group: "tether".into(),
            listen: match profile {
                Profile::Appliance => SocketAddr::from(([0, 0, 0, 0], 443)),
                Profile::Laptop => SocketAddr::from(([127, 0, 0, 1], 8443)),
            },
            https: HttpsSettings::default(),
            agent_user: None,
            sim_phone: SimConfig::default(),
            keyboard_layout: Layout::Us,
            input: InputTimings::default(),
            active_rect: None,
            pointer_profile: PointerProfile::Absolute,
            relative_counts_per_screen: DEFAULT_RELATIVE_COUNTS,
            tasks_kept: crate::daemon::DEFAULT_TASKS_KEPT,
            hid: None,
            video: None,
            udc: None,
            capture: CaptureConfig::default(),
            encoder: EncoderSettings::default(),
            encoder_backend: CodecChoice::Auto,
            decoder_backend: CodecChoice::Auto,
            passthrough: true,
            replay: ReplayConfig::default(),
            limits: LimitsConfig::default(),
            mdns_dir: match profile {
                Profile::Appliance => Some(PathBuf::from("/run/tether-mdns")),
                Profile::Laptop => None,
            },
            board: None,
            act: ActSettings::default(),
            ocr: OcrSettings::default(),
            recording: RecordingSettings::default(),
            update: crate::daemon::update::UpdateOptions::default(),
        }
    }

    /// The defaults of `profile` on `board`: the board's UDC for the gadget and, when it
    /// has a UVC capture node, V4L2 capture from that node. The config file overrides both.
    pub fn defaults_on(profile: Profile, board: Option<&Board>) -> Config {
        let mut c = Config::defaults(profile);
        if let Some(b) = board {
            c.udc = Some(b.usb.udc.clone());
            if let Some(device) = &b.capture.device {
                c.capture.device = device.clone();
            }
            c.board = Some(b.clone());
        }
        c
    }

    /// The configuration in effect: the defaults of `profile` on the board (`board`, else
    /// the installed board file when there is one), overlaid with the config file (`file`,
    /// else the profile's default file when it exists). Files named explicitly must exist.
    pub fn resolve(profile: Profile, file: Option<&Path>, board: Option<&Path>) -> Result<Config, ConfigError> {
        let board = match Board::find(board) {
            Some(path) => Some(Board::load(&path)?),
            None => None,
        };
        let base = Config::defaults_on(profile, board.as_ref());
        match file.map(Path::to_path_buf).or_else(|| default_config_file(profile).filter(|p| p.exists())) {
            Some(path) => Config::load_over(base, &path),
            None => Ok(base),
        }
    }

    /// Defaults of `profile` overlaid with the TOML file at `path`.
    pub fn load(profile: Profile, path: &Path) -> Result<Config, ConfigError> {
        Config::load_over(Config::defaults(profile), path)
    }

    /// `base` overlaid with the TOML file at `path`.
    pub fn load_over(base: Config, path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
        Config::overlay(base, &text).map_err(|message| ConfigError::Parse { path: path.into(), message })
    }

    /// Defaults of `profile` overlaid with TOML text; the error is the parser's message.
    pub fn from_toml(profile: Profile, text: &str) -> Result<Config, String> {
        Config::overlay(Config::defaults(profile), text)
    }

    /// `base` overlaid with TOML text; the error is the parser's message.
    pub fn overlay(base: Config, text: &str) -> Result<Config, String> {
        let file: ConfigFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut c = base;
        let ConfigFile {
            sim,
            data_dir,
            socket,
            socket_group,
            listen,
            https,
            agent_user,
            sim_phone,
            keyboard_layout,
            input,
            active_rect,
            pointer_profile,
            relative_counts_per_screen,
            tasks_kept,
            hid,
            video,
            udc,
            capture,
            encoder,
            encoder_backend,
            decoder_backend,
            passthrough,
            replay,
            limits,
            mdns_dir,
            act,
            ocr,
            recording,
            update,
        } = file;
        c.sim = sim.unwrap_or(c.sim);
        c.data_dir = data_dir.unwrap_or(c.data_dir);
        c.socket = socket.unwrap_or(c.socket);
        c.socket_group = socket_group.unwrap_or(c.socket_group);
        c.listen = listen.unwrap_or(c.listen);
        c.https = https.unwrap_or(c.https);
        c.agent_user = agent_user.or(c.agent_user);
        c.sim_phone = sim_phone.unwrap_or(c.sim_phone);
        c.keyboard_layout = keyboard_layout.unwrap_or(c.keyboard_layout);
        c.input = input.unwrap_or(c.input);
        c.active_rect = active_rect.or(c.active_rect);
        c.pointer_profile = pointer_profile.unwrap_or(c.pointer_profile);
        c.relative_counts_per_screen = relative_counts_per_screen.unwrap_or(c.relative_counts_per_screen);
        c.tasks_kept = tasks_kept.filter(|&n| n > 0).unwrap_or(c.tasks_kept);
        c.hid = hid.or(c.hid);
        c.video = video.or(c.video);
        c.udc = udc.or(c.udc);
        c.capture = capture.unwrap_or(c.capture);
        c.encoder = encoder.unwrap_or(c.encoder);
        c.encoder_backend = encoder_backend.unwrap_or(c.encoder_backend);
        c.decoder_backend = decoder_backend.unwrap_or(c.decoder_backend);
        c.passthrough = passthrough.unwrap_or(c.passthrough);
        c.replay = replay.unwrap_or(c.replay);
        c.limits = limits.unwrap_or(c.limits);
        c.mdns_dir = mdns_dir.or(c.mdns_dir);
        c.act = act.unwrap_or(c.act);
        c.ocr = ocr.unwrap_or(c.ocr);
        c.recording = recording.unwrap_or(c.recording);
        c.update = update.unwrap_or(c.update);
        c.validate()?;
        Ok(c)
    }

    /// Checks every number that planning, rendering or allocation takes from the config, so
    /// a bad file is refused at start with the field named instead of failing later.
    pub fn validate(&self) -> Result<(), String> {
        self.sim_phone.check()?;
        if self.video == Some(VideoBackend::Replay) && self.replay.path.is_none() {
            return Err("video = \"replay\" needs the recording: [replay] path = \"capture.h264\"".into());
        }
        if !(self.replay.fps.is_finite() && self.replay.fps > 0.0 && self.replay.fps <= 240.0) {
            return Err(format!("replay fps {} is outside (0, 240]", self.replay.fps));
        }
        self.capture.size()?;
        if self.capture.fps.is_some_and(|f| !(1..=240).contains(&f)) {
            return Err(format!("capture.fps {} is outside 1..=240", self.capture.fps.unwrap_or(0)));
        }
        self.input.validate()?;
        self.limits.validate()?;
        self.act.check()?;
        self.ocr.validate()?;
        self.recording.validate()?;
        let s = &self.sim_phone;
        if !(64..=7680).contains(&s.capture_width) || !(64..=4320).contains(&s.capture_height) {
            return Err(format!(
                "sim_phone capture {}x{} is outside 64x64..=7680x4320",
                s.capture_width, s.capture_height
            ));
        }
        if !s.capture_width.is_multiple_of(2) || !s.capture_height.is_multiple_of(2) {
            return Err(format!(
                "sim_phone capture {}x{}: width and height must be even (the sim draws 4:2:0 frames, like an HDMI capture)",
                s.capture_width, s.capture_height
            ));
        }
        if !(100..=4000).contains(&s.phone_width) || !(100..=4000).contains(&s.phone_height) || s.glide_ms > 5000 {
            return Err("sim_phone: phone_width/phone_height must be 100..=4000 and glide_ms at most 5000".into());
        }
        if !(1..=240).contains(&s.fps) {
            return Err(format!("sim_phone.fps = {} is outside 1..=240", s.fps));
        }
        let (w, h) = self.relative_counts_per_screen;
        let max = RelativePlanner::MAX_COUNTS_PER_SCREEN;
        if !(w.is_finite() && h.is_finite() && w > 0.0 && h > 0.0 && w <= max && h <= max) {
            return Err(format!("relative_counts_per_screen = [{w}, {h}]: each must be in (0, {max}]"));
        }
        if let Some(r) = self.active_rect {
            if r.width == 0
                || r.height == 0
                || r.x.checked_add(r.width).is_none()
                || r.y.checked_add(r.height).is_none()
            {
                return Err("active_rect must be a non-empty rectangle".into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_overrides_defaults_and_rejects_unknown_keys() {
        let c = Config::from_toml(
            Profile::Appliance,
            "sim = true\nagent_user = \"nobody\"\n[sim_phone]\ncapture_width = 3840\ncapture_height = 2160\n",
        )
        .unwrap();
        assert!(c.sim);
        assert_eq!(c.agent_user.as_deref(), Some("nobody"));
        assert_eq!(c.socket, PathBuf::from("/run/tether/control.sock"));
        assert_eq!(c.sim_phone.capture_width, 3840);
        assert_eq!(c.sim_phone.phone_width, 1179, "unset sim fields keep defaults");
        let err = Config::from_toml(Profile::Laptop, "sim = true\nsimm = 1\n").unwrap_err();
        assert!(err.contains("simm"), "{err}");
        assert!(Config::from_toml(Profile::Laptop, "listen = \"nope\"").is_err());
        let c = Config::from_toml(Profile::Laptop, "active_rect = { x = 1, y = 2, width = 3, height = 4 }").unwrap();
        assert_eq!(c.active_rect, Some(PixelRect { x: 1, y: 2, width: 3, height: 4 }));
    }

    #[test]
    fn numbers_out_of_range_are_refused_with_the_field_named() {
        for (toml, field) in [
            ("[input]\nrelease_repeats = 4294967295", "release_repeats"),
            ("[input]\nreport_interval_ms = 0", "report_interval_ms"),
            ("[limits]\nmax_connections = 0", "max_connections"),
            ("[sim_phone]\ncapture_width = 4294967295", "capture"),
            ("[sim_phone]\ncapture_width = 1921", "must be even"),
            ("relative_counts_per_screen = [0.0, 1.0]", "relative_counts"),
            ("active_rect = { x = 4294967295, y = 0, width = 2, height = 2 }", "active_rect"),
            ("[act]\nquiet_ms = 1", "act.quiet_ms"),
            ("[act]\nignore = [{ x = 0.5, y = 0.0, width = 1.5, height = 0.1 }]", "act.ignore[0]"),
            ("[act]\nsamples = 3", "act.samples"),
            ("[act]\nquiet = 300", "quiet"),
            ("[ocr]\nlanguages = []", "ocr.languages"),
            ("[ocr]\nlanguages = [\"../eng\"]", "ocr.languages"),
            ("[ocr]\nread_deadline_ms = 5", "ocr.read_deadline_ms"),
            ("[ocr]\nmemory_limit_mib = 1", "ocr.memory_limit_mib"),
            ("[ocr]\nlangs = [\"eng\"]", "langs"),
        ] {
            let err = Config::from_toml(Profile::Laptop, toml).unwrap_err();
            assert!(err.contains(field), "{toml}: {err}");
        }
        let c = Config::from_toml(Profile::Laptop, "[limits]\nqueue_timeout_ms = 2000").unwrap();
        assert_eq!(c.limits.queue_timeout_ms, 2000);
        let act = "[act]\nquiet_ms = 500\nignore = [{ x = 0.0, y = 0.0, width = 1.0, height = 0.1 }]";
        let c = Config::from_toml(Profile::Laptop, act).unwrap();
        assert_eq!(
            (c.act.quiet_ms, c.act.timeout_ms, c.act.ignore.len()),
            (500, 3000, 1),
            "unset act fields keep defaults"
        );
        assert_eq!(c.limits.max_connections, 64, "unset limits keep defaults");
        let c = Config::from_toml(Profile::Laptop, "[ocr]\nlanguages = [\"eng\", \"deu\"]").unwrap();
        assert_eq!((c.ocr.languages.len(), c.ocr.enabled, c.ocr.read_deadline_ms), (2, true, 10_000));
    }

    #[test]
    fn values_that_parse_but_cannot_run_are_rejected() {
        // Each of these was accepted and then led into what the sim_hid and geometry_plan
        // fuzz targets found: a sim clamp panic, i32 overflow in the sim's layout, billions
        // of planned reports, an endless relative move, a zero-size active rectangle (HID 0).
        for bad in [
            "[sim_phone]\nphone_width = 0",
            "[sim_phone]\nphone_height = 1027423549",
            "[sim_phone]\ncapture_width = 100000",
            "[input]\nrelease_repeats = 4294967295",
            "[input]\nswipe_ms = 100000000000",
            "[input]\nlong_press_ms = 18446744073709551615",
            "relative_counts_per_screen = [inf, 852.0]",
            "relative_counts_per_screen = [nan, 852.0]",
            "relative_counts_per_screen = [1e300, 852.0]",
            "active_rect = { x = 1, y = 2, width = 0, height = 4 }",
        ] {
            assert!(Config::from_toml(Profile::Laptop, bad).is_err(), "accepted {bad:?}");
        }
        let ok = "relative_counts_per_screen = [1.0, 10000.0]\n[sim_phone]\nphone_width = 750\n[input]\nrelease_repeats = 16";
        assert!(Config::from_toml(Profile::Laptop, ok).is_ok());
    }

    #[test]
    fn backends_follow_sim_unless_set() {
        let mut c = Config::defaults(Profile::Laptop);
        assert_eq!((c.hid_backend(), c.video_backend()), (HidBackend::Gadget, VideoBackend::None));
        c.sim = true;
        assert_eq!((c.hid_backend(), c.video_backend()), (HidBackend::Sim, VideoBackend::Sim));
        let c = Config::from_toml(Profile::Laptop, "hid = \"gadget\"\nvideo = \"sim\"\nudc = \"dummy_udc.0\"").unwrap();
        assert_eq!((c.hid_backend(), c.video_backend()), (HidBackend::Gadget, VideoBackend::Sim));
        assert_eq!(c.udc.as_deref(), Some("dummy_udc.0"));
        assert!("usb".parse::<HidBackend>().is_err());
    }

    #[test]
    fn appliance_defaults() {
        let c = Config::defaults(Profile::Appliance);
        assert_eq!(c.data_dir, PathBuf::from("/var/lib/tether"));
        assert_eq!(c.listen.port(), 443);
    }
}
