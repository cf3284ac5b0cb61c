//! `tether calibrate`.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;
use tether::client::ControlClient;

/// Runs the closed-loop calibration on the running daemon and prints the result.
pub fn run_calibrate(
    socket: Option<PathBuf>,
    grid: Option<u32>,
    reset: bool,
    as_json: bool,
) -> anyhow::Result<ExitCode> {
    let path = super::client_socket(socket);
    let mut params = json!({});
    if let Some(g) = grid {
        params["grid"] = json!(g);
    }
    if reset {
        params["reset"] = json!(true);
    }
    if !as_json && !reset {
        eprintln!("calibrating: the pointer will visit a grid of points; keep the phone's screen still…");
    }
    let result = super::client_runtime()?.block_on(async {
        let mut client = ControlClient::connect(&path).await?;
        anyhow::Ok(client.call("calibrate", params).await?)
    })?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else if reset {
        println!("calibration for {} orientation reset", result["orientation"].as_str().unwrap_or("?"));
    } else {
        let r = &result["residual"];
        println!(
            "calibrated {} orientation from {} points: residual max {:.2} px, rms {:.2} px (capture picture pixels){}",
            result["orientation"].as_str().unwrap_or("?"),
            result["points"].as_array().map_or(0, Vec::len),
            r["picture_max"].as_f64().unwrap_or(f64::NAN),
            r["picture_rms"].as_f64().unwrap_or(f64::NAN),
            r["phone_max"].as_f64().map_or(String::new(), |p| format!("; {p:.2} phone px max")),
        );
    }
    Ok(ExitCode::SUCCESS)
}
