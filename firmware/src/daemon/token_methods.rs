//! `token` and `pair`: the admin's management of named network tokens and pairing codes.

use serde_json::{json, Value};

use super::tokens::DEFAULT_PAIRING_TTL;
use super::{Daemon, DaemonError, HttpsInfo, Principal};
use crate::protocol::token_params::{PairParams, TokenAction, TokenParams};
use crate::protocol::Role;

impl Daemon {
    /// `token`: add, list, revoke or rotate a named token. Secrets appear only in the
    /// answers of `add` and `rotate`.
    pub(super) async fn token(&self, p: &TokenParams) -> Result<Value, DaemonError> {
        let tokens = &self.inner.tokens;
        // `validate_token` made sure every action but list has a name.
        let name = p.name.as_deref().unwrap_or_default();
        Ok(match p.action {
            TokenAction::List => json!({"tokens": tokens.list()}),
            TokenAction::Add => {
                let role = p.role.unwrap_or(Role::Operate);
                let secret = tokens.add(name, role).await?;
                json!({"name": name, "role": role, "token": secret})
            }
            // Everything the old secret opened ends as soon as it stops authenticating, before
            // the change is written (and whether or not the disk takes it).
            TokenAction::Rotate => {
                let principal = Principal::Token { name: name.to_string() };
                let secret = tokens.rotate(name, || self.end_principal(&principal)).await?;
                json!({"name": name, "token": secret})
            }
            TokenAction::Revoke => {
                let principal = Principal::Token { name: name.to_string() };
                tokens.revoke(name, || self.end_principal(&principal)).await?;
                json!({"name": name, "revoked": true})
            }
        })
    }

    /// `pair`: a one-time code for a new token, with the URL that redeems it (when an
    /// HTTPS server serves this daemon) carrying the CA fingerprint to pin.
    pub(super) async fn pair(&self, p: &PairParams) -> Result<Value, DaemonError> {
        let ttl = p.ttl_ms.map_or(DEFAULT_PAIRING_TTL, std::time::Duration::from_millis);
        let https = self.inner.options.https.as_ref();
        let host = match (&p.host, https) {
            (Some(h), Some(info)) if !info.hosts.iter().any(|known| known.eq_ignore_ascii_case(h)) => {
                return Err(DaemonError::BadHost(format!(
                    "the appliance does not answer to {h:?}; use one of: {}",
                    info.hosts.join(", ")
                )));
            }
            (Some(h), _) => Some(h.clone()),
            (None, _) => None,
        };
        let role = p.role.unwrap_or(Role::Operate);
        let pairing = self.inner.tokens.create_pairing(role, p.name.as_deref(), ttl).await?;
        let url = https.map(|h| {
            let base = match &host {
                Some(chosen) => HttpsInfo { hosts: vec![chosen.clone()], ..h.clone() }.base_url(),
                None => h.base_url(),
            };
            format!("{base}/pair#code={}&fp={}", pairing.code, h.fingerprint)
        });
        // The console shows the URL as a QR code; the daemon renders it once, here.
        let qr_svg = url
            .as_deref()
            .and_then(|u| qrcode::QrCode::new(u.as_bytes()).ok())
            .map(|code| code.render::<qrcode::render::svg::Color<'_>>().min_dimensions(256, 256).build());
        Ok(json!({
            "qr_svg": qr_svg,
            "code": pairing.code,
            "role": pairing.role,
            "name": pairing.name,
            "expires_ms": pairing.expires_ms,
            "url": url,
            "fingerprint": https.map(|h| h.fingerprint.clone()),
        }))
    }
}
