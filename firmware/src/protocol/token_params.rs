//! Parameters of `token` and `pair` (admin: named network tokens and pairing codes).

use serde::Deserialize;

use super::Role;

/// The longest pairing code lifetime a caller may ask for (one day).
pub const MAX_PAIR_TTL_MS: u64 = 86_400_000;

/// What `token` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenAction {
    /// Make a token `name` with `role`; the answer holds its secret, once.
    Add,
    /// Every token's name, role, creation and last use (never a secret).
    List,
    /// Delete token `name` and end its sessions (not the last admin).
    Revoke,
    /// Give token `name` a new secret; the old one and its sessions stop working.
    Rotate,
}

/// Parameters of `token`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenParams {
    /// What to do.
    pub action: TokenAction,
    /// The token (all but `list`).
    #[serde(default)]
    pub name: Option<String>,
    /// For `add`: `admin`, `operate` or `view` (default `operate`).
    #[serde(default)]
    pub role: Option<Role>,
}

/// Parameters of `pair`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairParams {
    /// The new token's role (default `operate`).
    #[serde(default)]
    pub role: Option<Role>,
    /// The new token's name (default `paired-…`).
    #[serde(default)]
    pub name: Option<String>,
    /// How long the code works, in ms (default 10 minutes, at most a day).
    #[serde(default)]
    pub ttl_ms: Option<u64>,
    /// The host the URL names (one of the appliance's names or addresses; default the
    /// first of them, `<hostname>.local`).
    #[serde(default)]
    pub host: Option<String>,
}

fn network_role(what: &str, role: Option<Role>) -> Result<(), String> {
    match role {
        Some(Role::Agent) => Err(format!("{what}: role is admin, operate or view (agents get task tokens)")),
        _ => Ok(()),
    }
}

/// Checks `token`.
pub fn validate_token(p: &TokenParams) -> Result<(), String> {
    let needs_name = p.action != TokenAction::List;
    match (&p.name, needs_name) {
        (None, true) => return Err("token: this action needs a name".into()),
        (Some(_), false) => return Err("token: list takes no name".into()),
        _ => {}
    }
    if p.role.is_some() && p.action != TokenAction::Add {
        return Err("token: only add takes a role".into());
    }
    network_role("token", p.role)
}

/// Checks `pair`.
pub fn validate_pair(p: &PairParams) -> Result<(), String> {
    if p.ttl_ms.is_some_and(|t| t == 0 || t > MAX_PAIR_TTL_MS) {
        return Err(format!("pair: ttl_ms must be 1..={MAX_PAIR_TTL_MS}"));
    }
    network_role("pair", p.role)
}
