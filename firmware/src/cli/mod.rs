//! CLI glue: each subcommand's `run_*` function. `anyhow` lives here and in `main` only.
//!
//! # Output to a closed pipe
//! `tether task list | head -1` closes stdout under us. Rust ignores SIGPIPE, so the next
//! write fails with EPIPE and std's `println!` panics ("failed printing to stdout"). The usual
//! fix, putting SIGPIPE back to its default, is wrong here: the same process is the daemon
//! (`serve`) and the clients, and with the default disposition a write to a socket whose peer
//! went away (a browser, an MCP client, the daemon closing our control connection; Unix
//! sockets are written with write(2), which raises SIGPIPE) would kill the process silently
//! instead of returning an error someone can read. So the signal stays ignored and only
//! *stdout* gets the pipe semantics: inside `cli`, `print!` and `println!` are the macros
//! below, which end the process quietly with status 141 (what a shell shows for a process
//! killed by SIGPIPE, as `yes | head -1` gives) when stdout's reader is gone, and with a
//! one-line error for any other write failure (a full disk). Nothing printed after that
//! point could reach anyone, and every command that prints to stdout is a short-lived
//! client, so leaving at once is the same as what SIGPIPE would do. `eprintln!` is replaced
//! the same way and never fails: a diagnostic that cannot be shown is no reason to stop.

/// `print!` for the CLI: a closed stdout ends the process quietly (see the module docs).
macro_rules! print {
    ($($arg:tt)*) => { $crate::cli::out::stdout(format_args!($($arg)*)) };
}

/// `println!` for the CLI: a closed stdout ends the process quietly (see the module docs).
macro_rules! println {
    () => { $crate::cli::out::stdout(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::cli::out::stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprintln!` for the CLI: never panics (see the module docs).
macro_rules! eprintln {
    ($($arg:tt)*) => { $crate::cli::out::stderr(format_args!("{}\n", format_args!($($arg)*))) };
}

pub mod agent_setup;
pub mod bootslot;
pub mod calibrate;
pub mod discover;
pub mod doctor;
pub mod gadget;
pub mod health;
pub mod lease;
pub mod login;
pub mod mcp;
pub mod out;
pub mod remote;
pub mod report;
pub mod serve;
pub mod status;
pub mod task;
pub mod task_args;
pub mod token;
pub mod update;
pub mod verbs;

use std::path::PathBuf;

use tether::config::{default_config_file, default_socket, Config, Profile};

/// The socket a client should use: the flag, else the one the default config file names
/// (as `serve` reads it), else this machine's default.
fn client_socket(flag: Option<PathBuf>) -> PathBuf {
    flag.unwrap_or_else(|| {
        let profile = Profile::detect();
        match default_config_file(profile).filter(|f| f.exists()) {
            Some(file) => Config::load(profile, &file).map_or_else(|_| default_socket(profile), |c| c.socket),
            None => default_socket(profile),
        }
    })
}

/// The configuration `serve` would read: `file`, else the default config file when there
/// is one, else the defaults. A file given explicitly must load; a broken default one is
/// `serve`'s to report, so it counts as absent here.
fn daemon_config(file: Option<&std::path::Path>) -> anyhow::Result<Config> {
    let profile = Profile::detect();
    if let Some(f) = file {
        return Ok(Config::load(profile, f)?);
    }
    Ok(match default_config_file(profile).filter(|f| f.exists()) {
        Some(f) => Config::load(profile, &f).unwrap_or_else(|_| Config::defaults(profile)),
        None => Config::defaults(profile),
    })
}

/// The config file to name in advice: the one given, else the profile's default path.
fn config_file_for_advice(file: Option<&std::path::Path>) -> Option<PathBuf> {
    if let Some(f) = file {
        return Some(f.to_path_buf());
    }
    let profile = Profile::detect();
    default_config_file(profile).or_else(|| match profile {
        Profile::Appliance => Some(PathBuf::from(tether::config::APPLIANCE_CONFIG)),
        Profile::Laptop => std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
            .map(|base| base.join("tether/tether.toml")),
    })
}

/// A current-thread runtime for short client commands.
fn client_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}
