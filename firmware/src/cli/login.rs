//! `tether login URL`: redeem a pairing URL and remember the appliance.

use std::process::ExitCode;

use super::remote::{HostEntry, HostsFile};

/// Redeems `url` over TLS pinned to its fingerprint and stores the token.
pub fn run_login(url: &str) -> anyhow::Result<ExitCode> {
    let (target, pin, answer) = super::client_runtime()?.block_on(tether::client::https::redeem(url))?;
    let token = answer["token"].as_str().ok_or_else(|| anyhow::anyhow!("the appliance answered without a token"))?;
    let entry = HostEntry {
        url: target.base_url(),
        name: answer["name"].as_str().unwrap_or_default().to_string(),
        role: answer["role"].as_str().unwrap_or_default().to_string(),
        token: token.to_string(),
        fingerprint: pin.hex(),
    };
    let mut hosts = HostsFile::load()?;
    let (name, role, base) = (entry.name.clone(), entry.role.clone(), entry.url.clone());
    hosts.upsert(entry);
    let path = hosts.save()?;
    println!("logged in to {base} as {name:?} ({role}); saved in {}", path.display());
    println!("try: tether task list --url {base}");
    Ok(ExitCode::SUCCESS)
}
