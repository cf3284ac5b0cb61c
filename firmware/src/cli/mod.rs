//! CLI glue: each subcommand's `run_*` function. `anyhow` lives here and in `main` only.

pub mod calibrate;
pub mod doctor;
pub mod gadget;
pub mod lease;
pub mod login;
pub mod mcp;
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
