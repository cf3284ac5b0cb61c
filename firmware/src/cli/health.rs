//! The daemon's health report at start (docs/updates.md): after an update, the trial judge
//! (`tether bootslot trial`, root) keeps the new slot only once this says healthy.
//!
//! Checks, each with its own patience (the appliance may still be coming up): the daemon
//! itself (it got this far: store open, socket bound), HTTPS answering on its own port with
//! the certificate its clients pin, and the HID gadget bound to a UDC when the daemon drives
//! one. The report goes to `health.json` in the runtime directory, once per start.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tether::client::https::{Credentials, HttpsClient, Target};
use tether::daemon::update::write_health;
use tether::device::boot::{HealthCheck, HealthReport};
use tether::server::tls::Fingerprint;

/// What to check.
pub struct HealthPlan {
    /// Where `health.json` goes.
    pub runtime_dir: PathBuf,
    /// The HTTPS port and the CA fingerprint it serves (None: HTTPS is off, which fails).
    pub https: Option<(u16, Fingerprint)>,
    /// The UDC file of the gadget the daemon drives (None: no gadget, e.g. the sim).
    pub gadget_udc_file: Option<PathBuf>,
    /// How long each check may take to pass.
    pub patience: Duration,
}

/// Runs the checks and writes the report; logs the outcome.
pub async fn report_health(plan: HealthPlan) {
    let mut checks =
        vec![HealthCheck { name: "daemon".into(), ok: true, detail: "started; control socket bound".into() }];
    checks.push(match plan.https {
        Some((port, pin)) => https_check(port, pin, plan.patience).await,
        None => HealthCheck {
            name: "https".into(),
            ok: false,
            detail: "HTTPS is not serving (see the daemon's log)".into(),
        },
    });
    checks.push(match &plan.gadget_udc_file {
        Some(file) => gadget_check(file, plan.patience).await,
        None => HealthCheck { name: "hid_gadget".into(), ok: true, detail: "no USB gadget driven here (sim)".into() },
    });
    let report = HealthReport::from_checks(checks);
    match write_health(&plan.runtime_dir, &report) {
        Ok(()) if report.ok => tracing::info!("health check passed"),
        Ok(()) => tracing::error!(reason = %report.reason, "health check failed"),
        Err(e) => tracing::error!(error = %e, dir = %plan.runtime_dir.display(), "could not write the health report"),
    }
}

/// Condition polls with a deadline: each check waits for a state outside the daemon (a
/// listener, a configfs attribute) that sends no notification.
const POLL: Duration = Duration::from_millis(500);

async fn https_check(port: u16, pin: Fingerprint, patience: Duration) -> HealthCheck {
    let target = Target { host: "127.0.0.1".into(), port };
    let started = Instant::now();
    loop {
        let last = match HttpsClient::new(target.clone(), pin, Credentials::default()) {
            Ok(client) => match client.send(hyper::Method::GET, "/ca.crt", None).await {
                Ok(r) if r.status().is_success() => {
                    return HealthCheck {
                        name: "https".into(),
                        ok: true,
                        detail: format!("127.0.0.1:{port} answers with the pinned certificate"),
                    }
                }
                Ok(r) => format!("GET /ca.crt answered {}", r.status()),
                Err(e) => e.to_string(),
            },
            Err(e) => e.to_string(),
        };
        if started.elapsed() >= patience {
            return HealthCheck {
                name: "https".into(),
                ok: false,
                detail: format!("no answer within {} s: {last}", patience.as_secs()),
            };
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn gadget_check(file: &PathBuf, patience: Duration) -> HealthCheck {
    let started = Instant::now();
    loop {
        let udc = std::fs::read_to_string(file).unwrap_or_default();
        if !udc.trim().is_empty() {
            return HealthCheck { name: "hid_gadget".into(), ok: true, detail: format!("bound to {}", udc.trim()) };
        }
        if started.elapsed() >= patience {
            return HealthCheck {
                name: "hid_gadget".into(),
                ok: false,
                detail: format!(
                    "{} names no UDC after {} s (tether-gadget.service)",
                    file.display(),
                    patience.as_secs()
                ),
            };
        }
        tokio::time::sleep(POLL).await;
    }
}
