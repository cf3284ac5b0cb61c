//! `tether token …` and `tether pair`: named tokens for the HTTPS server, and pairing
//! codes that turn into one.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{json, Value};

use super::remote::Endpoint;

/// Runs `token ACTION` (add, list, revoke, rotate) and prints the answer.
pub fn run_token(
    endpoint: Endpoint,
    action: &str,
    name: Option<String>,
    role: Option<String>,
    as_json: bool,
) -> anyhow::Result<ExitCode> {
    let mut params = json!({"action": action});
    if let Some(n) = name {
        params["name"] = n.into();
    }
    if let Some(r) = role {
        params["role"] = r.into();
    }
    let result = endpoint.call_once("token", params)?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&result)?);
        return Ok(ExitCode::SUCCESS);
    }
    match action {
        "list" => print!("{}", render_list(&result)),
        "revoke" => println!("revoked {}; its sessions have ended", result["name"].as_str().unwrap_or("?")),
        _ => {
            // The secret is shown once: it is stored only hashed.
            println!("{}", result["token"].as_str().unwrap_or_default());
            eprintln!(
                "token {:?} ({}): shown once, store it now. Use it as `Authorization: Bearer TOKEN` or \
                 TETHER_TOKEN.",
                result["name"].as_str().unwrap_or("?"),
                result["role"].as_str().unwrap_or("same role")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn when(ms: &Value) -> String {
    ms.as_i64().map_or("never".into(), |ms| {
        let secs = ms / 1000;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        let ago = (now - secs).max(0);
        match ago {
            0..=119 => format!("{ago} s ago"),
            120..=7199 => format!("{} min ago", ago / 60),
            7200..=172_799 => format!("{} h ago", ago / 3600),
            _ => format!("{} days ago", ago / 86_400),
        }
    })
}

fn render_list(result: &Value) -> String {
    let mut out = format!("{:<24} {:<8} {:<16} {}\n", "NAME", "ROLE", "CREATED", "LAST USED");
    for t in result["tokens"].as_array().into_iter().flatten() {
        out += &format!(
            "{:<24} {:<8} {:<16} {}\n",
            t["name"].as_str().unwrap_or("?"),
            t["role"].as_str().unwrap_or("?"),
            when(&t["created_ms"]),
            when(&t["last_used_ms"])
        );
    }
    out
}

/// Runs `pair`: prints the pairing URL as a terminal QR code and text.
pub fn run_pair(
    endpoint: Endpoint,
    role: Option<String>,
    name: Option<String>,
    host: Option<String>,
    ttl: std::time::Duration,
    svg: Option<PathBuf>,
    as_json: bool,
) -> anyhow::Result<ExitCode> {
    let mut params = json!({"ttl_ms": u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)});
    if let Some(h) = host {
        params["host"] = h.into();
    }
    if let Some(r) = role {
        params["role"] = r.into();
    }
    if let Some(n) = name {
        params["name"] = n.into();
    }
    let result = endpoint.call_once("pair", params)?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&result)?);
        return Ok(ExitCode::SUCCESS);
    }
    let Some(url) = result["url"].as_str() else {
        anyhow::bail!("the daemon serves no HTTPS (its [https] is disabled), so there is nothing to pair with");
    };
    print_qr(url, svg)?;
    eprintln!(
        "scan it, or run `tether login '{url}'` on a laptop. It makes the {} token {:?}, works once, \
         and expires in {} s.",
        result["role"].as_str().unwrap_or("?"),
        result["name"].as_str().unwrap_or("?"),
        ttl.as_secs()
    );
    Ok(ExitCode::SUCCESS)
}

/// Runs `pair --offline DIR`: the appliance's CA and server certificate (made if missing)
/// and a one-time code in `DIR`, which the daemon imports at its next start.
pub fn run_pair_offline(
    data_dir: &std::path::Path,
    role: &str,
    name: Option<String>,
    host: Option<String>,
    svg: Option<PathBuf>,
    as_json: bool,
) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    use tether::protocol::Role;
    use tether::server::tls::{self, ServerNames};
    let role = Role::from_name(role).ok_or_else(|| anyhow::anyhow!("role {role:?}: use admin, operate or view"))?;
    let name = name.unwrap_or_else(|| "owner".into());
    let host = host.unwrap_or_else(|| "tether.local".into());
    // The certificate holds the appliance's own names (`tether.local` for the default
    // host; a single-label name is never in it) and `host` when it is something else,
    // e.g. a fixed LAN address.
    let short = host.strip_suffix(".local").filter(|h| !h.contains('.') && !h.contains(':'));
    let names = match short {
        Some(s) => ServerNames::of_machine(s, &[], &[]),
        None => ServerNames::of_machine("tether", &[], std::slice::from_ref(&host)),
    };
    let material = tls::load_or_create(data_dir, &names)
        .with_context(|| format!("certificates in {}", data_dir.join("tls").display()))?;
    let code = tether::daemon::tokens::mint_offline_pairing(data_dir, role, &name)?;
    let url_host = if host.contains(':') { format!("[{host}]") } else { host.clone() };
    let url = format!("https://{url_host}/pair#code={code}&fp={}", material.fingerprint.hex());
    if as_json {
        let out = json!({
            "url": url,
            "code": code,
            "role": role.as_str(),
            "name": name,
            "fingerprint": material.fingerprint.hex(),
            "fingerprint_openssl": material.fingerprint.to_string(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    print_qr(&url, svg)?;
    eprintln!(
        "the appliance takes this code at its next start. It makes the {} token {name:?} and works once; \
         it does not expire with time. CA fingerprint (SHA-256) {}",
        role.as_str(),
        material.fingerprint
    );
    Ok(ExitCode::SUCCESS)
}

/// Prints `url` as a terminal QR code and as text; with `svg`, also writes the QR there.
fn print_qr(url: &str, svg: Option<PathBuf>) -> anyhow::Result<()> {
    let code = qrcode::QrCode::new(url.as_bytes())?;
    if let Some(path) = svg {
        let image = code.render::<qrcode::render::svg::Color<'_>>().min_dimensions(256, 256).build();
        std::fs::write(&path, image)?;
        eprintln!("QR code written to {}", path.display());
    }
    let art = code
        .render::<qrcode::render::unicode::Dense1x2>()
        .dark_color(qrcode::render::unicode::Dense1x2::Light)
        .light_color(qrcode::render::unicode::Dense1x2::Dark)
        .build();
    println!("{art}");
    println!("{url}");
    Ok(())
}

/// Parses `10m`, `90s`, `2h`, `1d` or plain seconds.
pub fn parse_ttl(s: &str) -> Result<std::time::Duration, String> {
    let (number, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = number.parse().map_err(|_| format!("{s:?}: use a number with s, m, h or d (e.g. 10m)"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => return Err(format!("{s:?}: the unit is s, m, h or d")),
    };
    if secs == 0 || secs > 86_400 {
        return Err("a pairing code lives between 1 s and 1 day".into());
    }
    Ok(std::time::Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_read_like_people_write_them() {
        assert_eq!(parse_ttl("10m"), Ok(std::time::Duration::from_secs(600)));
        assert_eq!(parse_ttl("45"), Ok(std::time::Duration::from_secs(45)));
        assert_eq!(parse_ttl("1d"), Ok(std::time::Duration::from_secs(86_400)));
        assert!(parse_ttl("2d").is_err());
        assert!(parse_ttl("0s").is_err());
        assert!(parse_ttl("ten").is_err());
        assert!(parse_ttl("5y").is_err());
    }
}
