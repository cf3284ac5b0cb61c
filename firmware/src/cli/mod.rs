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

pub mod calibrate;
pub mod doctor;
pub mod gadget;
pub mod lease;
pub mod login;
pub mod mcp;
pub mod out;
pub mod remote;
pub mod serve;
pub mod status;
pub mod task;
pub mod token;
pub mod verbs;

use std::path::PathBuf;

use tether::config::{default_socket, Profile};

/// The socket a client should use: the flag, else this machine's default.
fn client_socket(flag: Option<PathBuf>) -> PathBuf {
    flag.unwrap_or_else(|| default_socket(Profile::detect()))
}

/// A current-thread runtime for short client commands.
fn client_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}
