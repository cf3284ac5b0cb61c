//! The `tether` command line. Parses arguments and calls one `run_*` function.

mod cli;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
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
}

/// Flags of `tether serve`. Each overrides the config file.
#[derive(Debug, Args)]
struct ServeArgs {
    /// Drive the virtual iPhone instead of real hardware.
    #[arg(long)]
    sim: bool,
    /// Config file (TOML). Default: /etc/tether/tether.toml on the appliance,
    /// $XDG_CONFIG_HOME/tether/tether.toml elsewhere (if it exists).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Directory for persistent state.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Control socket path.
    #[arg(long, value_name = "PATH", env = "TETHER_SOCKET")]
    socket: Option<PathBuf>,
    /// HTTPS listen address, for the console and MCP (served once they exist).
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => cli::serve::run_serve(cli::serve::ServeOptions {
            sim: args.sim,
            config: args.config,
            data_dir: args.data_dir,
            socket: args.socket,
            listen: args.listen,
            agent_user: args.agent_user,
            hid: args.hid,
            video: args.video,
        }),
        Command::Status(args) => cli::status::run_status(args.socket, args.json),
        Command::Gadget(cmd) => match cmd {
            GadgetCommand::Up { udc, config } => cli::gadget::run_gadget_up(udc, config),
            GadgetCommand::Down => cli::gadget::run_gadget_down(),
            GadgetCommand::Status { json } => cli::gadget::run_gadget_status(json),
        },
        Command::Calibrate(args) => cli::calibrate::run_calibrate(args.socket, args.grid, args.reset, args.json),
        Command::Doctor(args) => cli::doctor::run_doctor(args.socket, args.json),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tether: {e:#}");
            ExitCode::FAILURE
        }
    }
}
