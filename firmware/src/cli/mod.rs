//! CLI glue: each subcommand's `run_*` function. `anyhow` lives here and in `main` only.

pub mod agent_setup;
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
