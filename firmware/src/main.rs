//! The `tether` command line. Parses arguments and calls one `run_*` function.

mod cli;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use cli::remote::{Endpoint, RemoteArgs};
use cli::task_args::{run_task_command, TaskCommand};
use tether::config::{HidBackend, VideoBackend};

/// tether: let AI agents and people drive a real iPhone.
///
/// The appliance plugs into the phone as a USB keyboard and pointer, watches its screen over
/// HDMI, and runs a daemon that decides who may touch the phone. With no hardware,
/// `tether serve --sim` runs everything against a virtual iPhone.
#[derive(Debug, Parser)]
#[command(name = "tether", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show the appliance's slots and versions, or install a signed update bundle (admin).
    ///
    /// With FILE (from `flash.sh bundle`): uploads it, RAUC checks its signature and writes
    /// it into the other root slot, the appliance reboots into it, and the new slot is kept
    /// only if its daemon reports healthy; otherwise the old slot boots again and this says
    /// why. Example: `tether update out/tether-rpi4-1.3.raucb --url https://tether.local`.
    /// Without FILE: the running slot and version, both slots, the last update's verdict.
    Update(UpdateArgs),
    /// The appliance's A/B boot (root): RAUC's boot backend and the judge of an update's
    /// trial. `tether bootslot show` prints the booted slot, what boots next and the last
    /// trial (docs/updates.md).
    #[command(subcommand)]
    Bootslot(cli::bootslot::BootslotCommand),
    /// Run the daemon: owns the phone's HID and video, serves the control socket.
    ///
    /// Example: `tether serve --sim` (virtual iPhone, socket under $XDG_RUNTIME_DIR/tether/).
    Serve(ServeArgs),
    /// Show what the running daemon sees: USB host, video signal, active task.
    Status(StatusArgs),
    /// Set up, remove or inspect the USB HID gadget (up/down need root; run at boot).
    ///
    /// Example: `tether gadget up --udc fe980000.usb`, then `tether serve` (no root needed).
    #[command(subcommand)]
    Gadget(GadgetCommand),
    /// Measure where the pointer really lands (from video) and correct the mapping.
    ///
    /// Needs AssistiveTouch's pointer visible and the screen otherwise still. The result is
    /// stored per orientation in the data directory and used by every later action.
    Calibrate(CalibrateArgs),
    /// Check this machine: USB device controllers, HID gadget nodes, video and codec nodes,
    /// and whether a daemon answers.
    Doctor(DoctorArgs),
    /// List the appliances on the LAN from their mDNS records: URL, phone, task state,
    /// jobs waiting, board, version.
    ///
    /// Example: `tether discover`, then `tether login` or `--url` with one of the URLs.
    Discover {
        /// How long to listen for answers, in seconds.
        #[arg(long, default_value_t = 3.0, value_name = "SECONDS")]
        timeout: f64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run a command as a task, or list, follow and control tasks.
    ///
    /// A task is the one caller allowed to drive the phone; humans can pause, take over,
    /// answer its questions and stop it. Example:
    /// `tether task run --title "check settings" -- ./my-agent.sh`, then from another
    /// terminal `tether task list` and `tether task pause 12`.
    #[command(subcommand)]
    Task(TaskCommand),
    /// Manage the named tokens HTTPS clients use (admin).
    ///
    /// Example: `tether token add ci --role operate`, then in CI
    /// `TETHER_TOKEN=… tether task run --url https://box.local --fingerprint … -- ./test.sh`.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Make a one-time pairing code for a new device: a QR code and URL to scan or paste.
    ///
    /// The URL carries the CA fingerprint, so the device pins the appliance's certificate
    /// without asking. Example: `tether pair --role view --name wall-tablet`.
    Pair(PairArgs),
    /// Log in to an appliance from this machine with a pairing URL (`tether pair` there).
    ///
    /// Redeems the code over TLS pinned to the URL's fingerprint and stores the URL, token
    /// and fingerprint in ~/.config/tether/hosts.toml (0600); later `--url` commands use them.
    Login {
        /// The pairing URL, `https://HOST[:PORT]/pair#code=…&fp=…` (quote it in the shell).
        url: String,
    },
    /// An MCP server on stdin/stdout with the phone's tools, for an MCP client to start.
    ///
    /// On the appliance it uses the control socket (inside `tether task run`, as the task's
    /// agent). With `--url` it forwards to the appliance's `/mcp` over HTTPS, with the
    /// login `tether login` stored. Example, in an MCP client's config:
    /// `{"command": "tether", "args": ["mcp", "--url", "https://tether.local"]}`.
    Mcp {
        /// Control socket path (on the appliance).
        #[arg(long, value_name = "PATH", env = "TETHER_SOCKET")]
        socket: Option<PathBuf>,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// The OCR worker process the daemon starts (requests on stdin, answers on stdout).
    #[command(hide = true)]
    OcrWorker {
        /// The worker's options (`--library`, `--tessdata`, `--languages`, …).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Where a client command goes: the socket, or `--url`.
#[derive(Debug, Args)]
struct Target {
    /// Control socket path.
    #[arg(long, value_name = "PATH", env = "TETHER_SOCKET")]
    socket: Option<PathBuf>,
    #[command(flatten)]
    remote: RemoteArgs,
}

/// `tether token` subcommands.
#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// Make a named token; prints its secret once (only its hash is stored).
    Add {
        /// Its name (letters, digits, `.`, `_`, `-`), e.g. `ci` or `alice-laptop`.
        name: String,
        /// What it may do: admin, operate or view.
        #[arg(long, default_value = "operate", value_parser = ["admin", "operate", "view"])]
        role: String,
        #[command(flatten)]
        target: Target,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Every token: name, role, when made and last used (never a secret).
    List {
        #[command(flatten)]
        target: Target,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete a token; its browser sessions end at once. The last admin token stays.
    Revoke {
        /// The token.
        name: String,
        #[command(flatten)]
        target: Target,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Give a token a new secret (printed once); the old one and its sessions stop working.
    ///
    /// A fresh install has one admin token, `admin`, whose secret nobody has seen:
    /// `sudo tether token rotate admin` shows a working one.
    Rotate {
        /// The token.
        name: String,
        #[command(flatten)]
        target: Target,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Flags of `tether pair`.
#[derive(Debug, Args)]
struct PairArgs {
    /// The new token's role: admin, operate or view.
    #[arg(long, default_value = "operate", value_parser = ["admin", "operate", "view"])]
    role: String,
    /// The new token's name (default: paired-XXXXXX).
    #[arg(long)]
    name: Option<String>,
    /// How long the code works: 90s, 10m, 2h, 1d.
    #[arg(long, default_value = "10m", value_parser = cli::token::parse_ttl)]
    ttl: std::time::Duration,
    /// Also write the QR code as SVG to FILE.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// The host name or address the URL uses (default: `<hostname>.local`); one the
    /// device can reach, e.g. the appliance's LAN address.
    #[arg(long)]
    host: Option<String>,
    /// Without a daemon: make the code (and, if missing, the appliance's CA and server
    /// certificate) in DATA_DIR, for the daemon to take at its next start. The code works
    /// once and does not expire with time (the appliance has no clock until it reaches a
    /// time server). `flash.sh` uses this for the owner: `tether pair --offline DIR --role
    /// admin --name owner --host tether.local`.
    #[arg(long, value_name = "DATA_DIR", conflicts_with = "ttl")]
    offline: Option<PathBuf>,
    #[command(flatten)]
    target: Target,
    /// Print JSON (the code, URL and fingerprint).
    #[arg(long)]
    json: bool,
}

/// Flags of `tether serve`. Each overrides the config file.
/// `tether update` arguments.
#[derive(Debug, Args)]
struct UpdateArgs {
    /// The bundle to install (`flash.sh bundle`); none: show the slots and versions.
    file: Option<PathBuf>,
    /// Install even while a task runs (the reboot ends it).
    #[arg(long)]
    force: bool,
    /// Install, but try it only at the next reboot.
    #[arg(long)]
    no_reboot: bool,
    /// How long to follow the install, reboot and trial, in seconds.
    #[arg(long, default_value_t = 1200, value_name = "SECONDS")]
    wait: u64,
    /// Print the last status as JSON.
    #[arg(long)]
    json: bool,
    /// Control socket path.
    #[arg(long, value_name = "PATH", env = "TETHER_SOCKET")]
    socket: Option<PathBuf>,
    #[command(flatten)]
    remote: RemoteArgs,
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Drive the virtual iPhone instead of real hardware (also TETHER_SIM=1, which the
    /// image's boot test sets from the kernel command line).
    #[arg(long, env = "TETHER_SIM", value_parser = clap::builder::BoolishValueParser::new())]
    sim: bool,
    /// Config file (TOML). Default: /etc/tether/tether.toml on the appliance,
    /// $XDG_CONFIG_HOME/tether/tether.toml elsewhere (if it exists).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Board file (board/<name>/board.toml): the UDC and capture node to use by default.
    /// Default: /etc/tether/board.toml if it exists.
    #[arg(long, value_name = "FILE")]
    board: Option<PathBuf>,
    /// Directory for persistent state.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Control socket path.
    #[arg(long, value_name = "PATH", env = "TETHER_SOCKET")]
    socket: Option<PathBuf>,
    /// HTTPS listen address (default: 127.0.0.1:8443 on a laptop, 0.0.0.0:443 on the
    /// appliance; port 0 picks a free one).
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<SocketAddr>,
    /// The agent user, by name or uid: connections from it are agent-only.
    #[arg(long, value_name = "NAME|UID")]
    agent_user: Option<String>,
    /// Where HID reports go: `gadget` (the USB gadget from `tether gadget up`) or `sim`.
    /// Default: `sim` with --sim, else `gadget`.
    #[arg(long, value_name = "sim|gadget")]
    hid: Option<HidBackend>,
    /// Where frames come from: `sim`, `v4l2` (the `[capture]` node) or `none`.
    /// Default: `sim` with --sim, else `none`.
    #[arg(long, value_name = "sim|v4l2|none")]
    video: Option<VideoBackend>,
}

/// Flags of `tether status`.
#[derive(Debug, Args)]
struct StatusArgs {
    /// Control socket path (default: the one `tether serve` uses on this machine).
    #[arg(long, value_name = "PATH", env = "TETHER_SOCKET")]
    socket: Option<PathBuf>,
    #[command(flatten)]
    remote: RemoteArgs,
    /// Print the raw `status` result as JSON.
    #[arg(long)]
    json: bool,
}

/// `tether gadget` subcommands.
#[derive(Debug, Subcommand)]
enum GadgetCommand {
    /// Create the composite gadget (keyboard, consumer keys, pointer) and bind it to a UDC.
    Up {
        /// USB device controller (see /sys/class/udc). Default: the config's `udc`, else the
        /// only real controller (never the software dummy_udc unless named).
        #[arg(long)]
        udc: Option<String>,
        /// Config file (for `udc` and `pointer_profile`).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Board file (for its `udc`). Default: /etc/tether/board.toml if it exists.
        #[arg(long, value_name = "FILE")]
        board: Option<PathBuf>,
    },
    /// Unbind and remove the gadget; configfs is left clean.
    Down,
    /// Show the gadget, its controller's state and its /dev/hidgN nodes.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Flags of `tether calibrate`.
#[derive(Debug, Args)]
struct CalibrateArgs {
    /// Control socket path.
    #[arg(long, value_name = "PATH", env = "TETHER_SOCKET")]
    socket: Option<PathBuf>,
    /// Points per side of the measuring grid (3-6).
    #[arg(long, value_parser = clap::value_parser!(u32).range(3..=6))]
    grid: Option<u32>,
    /// Forget the current orientation's calibration instead of measuring.
    #[arg(long)]
    reset: bool,
    /// Print the raw result as JSON.
    #[arg(long)]
    json: bool,
}

/// Flags of `tether doctor`.
#[derive(Debug, Args)]
struct DoctorArgs {
    /// Print the findings as JSON.
    #[arg(long)]
    json: bool,
    /// Control socket to probe for a running daemon.
    #[arg(long, value_name = "PATH", env = "TETHER_SOCKET")]
    socket: Option<PathBuf>,
    /// The daemon's config file, for its socket, agent user and socket group (default:
    /// the one `serve` reads by default).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Board file whose statement of what works to print. Default: /etc/tether/board.toml
    /// if it exists.
    #[arg(long, value_name = "FILE")]
    board: Option<PathBuf>,
}

fn main() -> ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    // The derived commands plus one verb per catalog tool (`tether tap X Y`, …).
    let matches = Cli::command()
        .subcommands(cli::verbs::commands())
        .after_help(
            "Drive the phone: screenshot, tap, double-tap, long-press, swipe, drag, scroll, type, press, hotkey, \
             home, app-switcher, open, back, wait-for-change (and confirm, messages inside a task): the same \
             tools agents get from `tether mcp`. `tether tap --help` explains one.",
        )
        .get_matches();
    if let Some((name, sub)) = matches.subcommand() {
        if let Some(tool) = tether::tools::catalog::verb(name) {
            return finish(cli::verbs::run(tool, sub));
        }
    }
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        Command::Serve(args) => cli::serve::run_serve(cli::serve::ServeOptions {
            sim: args.sim,
            config: args.config,
            board: args.board,
            data_dir: args.data_dir,
            socket: args.socket,
            listen: args.listen,
            agent_user: args.agent_user,
            hid: args.hid,
            video: args.video,
        }),
        Command::Status(args) => {
            Endpoint::resolve(args.socket, &args.remote).and_then(|e| cli::status::run_status(e, args.json))
        }
        Command::Gadget(cmd) => match cmd {
            GadgetCommand::Up { udc, config, board } => cli::gadget::run_gadget_up(udc, config, board),
            GadgetCommand::Down => cli::gadget::run_gadget_down(),
            GadgetCommand::Status { json } => cli::gadget::run_gadget_status(json),
        },
        Command::Calibrate(args) => cli::calibrate::run_calibrate(args.socket, args.grid, args.reset, args.json),
        Command::Discover { timeout, json } => match timeout.is_finite() && (0.1..=60.0).contains(&timeout) {
            true => cli::discover::run_discover(std::time::Duration::from_secs_f64(timeout), json),
            false => Err(anyhow::anyhow!("--timeout must be 0.1 to 60 seconds")),
        },
        Command::Doctor(args) => cli::doctor::run_doctor(args.socket, args.config, args.board, args.json),
        Command::Task(cmd) => run_task_command(cmd),
        Command::Bootslot(cmd) => cli::bootslot::run_bootslot(cmd),
        Command::Update(a) => Endpoint::resolve(a.socket, &a.remote).and_then(|endpoint| {
            cli::update::run_update(
                endpoint,
                cli::update::UpdateRequest {
                    file: a.file.as_deref(),
                    force: a.force,
                    no_reboot: a.no_reboot,
                    wait: std::time::Duration::from_secs(a.wait),
                    json: a.json,
                },
            )
        }),
        Command::Token(cmd) => run_token_command(cmd),
        Command::Pair(a) => match a.offline {
            Some(dir) => cli::token::run_pair_offline(&dir, &a.role, a.name, a.host, a.svg, a.json),
            None => Endpoint::resolve(a.target.socket, &a.target.remote)
                .and_then(|e| cli::token::run_pair(e, Some(a.role), a.name, a.host, a.ttl, a.svg, a.json)),
        },
        Command::Login { url } => cli::login::run_login(&url),
        Command::Mcp { socket, remote } => cli::mcp::run_mcp(socket, remote),
        Command::OcrWorker { args } => Ok(tether::device::ocr::worker_main::run(&args)),
    };
    finish(result)
}

fn finish(result: anyhow::Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) => {
            cli::out::stderr(format_args!("tether: {e:#}\n"));
            ExitCode::FAILURE
        }
    }
}

fn run_token_command(cmd: TokenCommand) -> anyhow::Result<ExitCode> {
    use cli::token::run_token;
    let endpoint = |t: Target| Endpoint::resolve(t.socket, &t.remote);
    match cmd {
        TokenCommand::Add { name, role, target, json } => {
            run_token(endpoint(target)?, "add", Some(name), Some(role), json)
        }
        TokenCommand::List { target, json } => run_token(endpoint(target)?, "list", None, None, json),
        TokenCommand::Revoke { name, target, json } => run_token(endpoint(target)?, "revoke", Some(name), None, json),
        TokenCommand::Rotate { name, target, json } => run_token(endpoint(target)?, "rotate", Some(name), None, json),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// The image's boot test sets TETHER_SIM=1 from the kernel command line; clap's plain
    /// bool parser refused "1" and the daemon never started.
    #[test]
    fn tether_sim_takes_the_usual_spellings() {
        fn sim_with(value: &str) -> Result<bool, clap::Error> {
            // Tests run on parallel threads: the environment is touched under this lock only.
            static ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());
            let _guard = ENV.lock().unwrap();
            // SAFETY: no other test in this binary reads or writes the environment, and
            // this one does so only while holding the lock.
            unsafe { std::env::set_var("TETHER_SIM", value) };
            let parsed = Cli::try_parse_from(["tether", "serve"]);
            // SAFETY: as above.
            unsafe { std::env::remove_var("TETHER_SIM") };
            match parsed?.command {
                Command::Serve(args) => Ok(args.sim),
                _ => unreachable!("parsed serve"),
            }
        }
        for yes in ["1", "true", "yes", "on"] {
            assert!(sim_with(yes).unwrap(), "{yes}");
        }
        for no in ["0", "false", "no", "off"] {
            assert!(!sim_with(no).unwrap(), "{no}");
        }
        assert!(sim_with("maybe").is_err());
    }
}
