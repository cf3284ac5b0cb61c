//! `tether gadget up|down|status`.

use std::path::PathBuf;
use std::process::ExitCode;

#[cfg(not(target_os = "linux"))]
pub fn run_gadget_up(
    _udc: Option<String>,
    _config: Option<PathBuf>,
    _board: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    anyhow::bail!("USB gadgets need Linux configfs")
}

#[cfg(not(target_os = "linux"))]
pub fn run_gadget_down() -> anyhow::Result<ExitCode> {
    anyhow::bail!("USB gadgets need Linux configfs")
}

#[cfg(not(target_os = "linux"))]
pub fn run_gadget_status(_json: bool) -> anyhow::Result<ExitCode> {
    anyhow::bail!("USB gadgets need Linux configfs")
}

#[cfg(target_os = "linux")]
fn print(st: &tether::device::hid::gadget::GadgetStatus) {
    if !st.exists {
        println!("gadget: not set up (run `tether gadget up` as root)");
        return;
    }
    println!(
        "gadget: tether, serial {}, bound to {} ({})",
        st.serial.as_deref().unwrap_or("?"),
        st.udc.as_deref().unwrap_or("no UDC"),
        st.udc_state.as_deref().unwrap_or("unknown state")
    );
    for (interface, node) in &st.nodes {
        println!("  {:<9} {}", format!("{interface:?}").to_lowercase(), node.display());
    }
}

/// Creates and binds the gadget.
#[cfg(target_os = "linux")]
pub fn run_gadget_up(udc: Option<String>, config: Option<PathBuf>, board: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    use tether::config::{Config, Profile};
    let cfg = Config::resolve(Profile::detect(), config.as_deref(), board.as_deref())?;
    let udc = udc.or(cfg.udc);
    let st = tether::device::hid::gadget::up(udc.as_deref(), cfg.pointer_profile).context("gadget up")?;
    print(&st);
    Ok(ExitCode::SUCCESS)
}

/// Removes the gadget.
#[cfg(target_os = "linux")]
pub fn run_gadget_down() -> anyhow::Result<ExitCode> {
    tether::device::hid::gadget::down()?;
    println!("gadget: removed");
    Ok(ExitCode::SUCCESS)
}

/// Prints the gadget's state.
#[cfg(target_os = "linux")]
pub fn run_gadget_status(json: bool) -> anyhow::Result<ExitCode> {
    let st = tether::device::hid::gadget::status()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&st)?);
    } else {
        print(&st);
    }
    Ok(ExitCode::SUCCESS)
}
