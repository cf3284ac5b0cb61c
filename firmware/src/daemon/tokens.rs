//! Named tokens (`tether token add NAME`), browser sessions and pairing codes: how network
//! callers prove who they are. Transport-neutral: the HTTPS, WebSocket and MCP transports
//! all ask [`Tokens`].
//!
//! Only SHA-256 hashes of tokens and pairing codes are stored; a token is shown once, when
//! it is made. A session cookie is `NAME.ISSUED.MAC`, the MAC an HMAC over the name, the
//! issue time and the token's hash: revoking or rotating the token ends its sessions.

use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use ring::hmac;
use rusqlite::{params, OptionalExtension};
use serde::Serialize;

use super::store::{Store, StoreError};
use crate::protocol::Role;
use crate::sync::LockPlain;

/// How long a browser session lasts.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(30 * 86_400);
/// A pairing code's default lifetime.
pub const DEFAULT_PAIRING_TTL: Duration = Duration::from_secs(600);
/// The longest a pairing code may live.
pub const MAX_PAIRING_TTL: Duration = Duration::from_secs(86_400);
/// The name of the admin token minted on first start.
pub const FIRST_ADMIN: &str = "admin";
/// How often a token's last use is written to the store (it is kept in memory between).
const LAST_USED_EVERY_MS: i64 = 60_000;

/// Errors managing tokens.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No token has that name.
    #[error("no token is named {0:?}: `tether token list` shows them")]
    NoSuch(String),
    /// A token with that name exists.
    #[error("a token named {0:?} exists: pick another name, or `tether token rotate {0}`")]
    Exists(String),
    /// The change took effect in memory (the old secret no longer works on this appliance)
    /// but could not be saved: after a restart the saved secret would work again.
    #[error(
        "the token no longer works on this appliance, but the change could not be saved ({0}): free space and run          the same command again, or the old secret works again after a restart"
    )]
    NotSaved(#[source] StoreError),
    /// Refused: it is the last admin token.
    #[error("{0:?} is the last admin token; add another admin token before revoking it")]
    LastAdmin(String),
    /// A name that is not 1–64 of `A-Z a-z 0-9 . _ -`.
    #[error("token names are 1-64 letters, digits, '.', '_' or '-'; got {0:?}")]
    BadName(String),
    /// Network tokens are admin, operate or view.
    #[error("a token's role is admin, operate or view")]
    BadRole,
    /// The pairing code is unknown, used or expired.
    #[error("this pairing code is unknown, already used or expired: ask for a new one (`tether pair`)")]
    PairingInvalid,
    /// No randomness.
    #[error("the system has no randomness to make a secret")]
    NoRandomness,
}

/// A token as `tether token list` shows it (never the secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TokenInfo {
    /// Its name.
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// When it was made (Unix ms).
    pub created_ms: i64,
    /// When it last authenticated a request (Unix ms), to the minute.
    pub last_used_ms: Option<i64>,
}

#[derive(Debug, Clone)]
struct Entry {
    info: TokenInfo,
    hash: [u8; 32],
    /// When the last use was last written to the store.
    stored_use_ms: i64,
    /// Revoked in memory, not yet on disk (the disk refused): it authenticates nothing,
    /// and revoking it again tries the write again.
    revoked: bool,
}

/// A pairing code just made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pairing {
    /// The one-time code (shown once; only its hash is stored).
    pub code: String,
    /// The role the token made from it gets.
    pub role: Role,
    /// The token's name.
    pub name: String,
    /// When the code stops working (Unix ms).
    pub expires_ms: i64,
}

/// A `tokens` row: name, role, hash, created, last used.
type TokenRow = (String, String, Vec<u8>, i64, Option<i64>);

/// The daemon's tokens (a cache of the store's table, written through).
pub struct Tokens {
    store: Store,
    entries: Mutex<Vec<Entry>>,
    cookie_key: hmac::Key,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens").field("count", &self.entries.lock_plain().len()).finish_non_exhaustive()
    }
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)).unwrap_or(0)
}

pub(super) fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// Compares two hashes in time independent of where they differ.
fn same_hash(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn random_bytes<const N: usize>() -> Result<[u8; N], TokenError> {
    let mut out = [0u8; N];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut out).map_err(|_| TokenError::NoRandomness)?;
    Ok(out)
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A fresh token: `tt_` and 256 random bits, base64url.
fn new_secret() -> Result<String, TokenError> {
    Ok(format!("tt_{}", b64(&random_bytes::<32>()?)))
}

/// Whether `name` is a valid token name.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

fn network_role(role: Role) -> Result<Role, TokenError> {
    match role {
        Role::Admin | Role::Operate | Role::View => Ok(role),
        Role::Agent => Err(TokenError::BadRole),
    }
}

/// The file, in the data directory, holding a pairing code made while no daemon ran
/// (`tether pair --offline`, which `flash.sh` runs for the appliance's owner).
pub const OFFLINE_PAIRING_FILE: &str = "owner-pairing.json";

/// What [`OFFLINE_PAIRING_FILE`] holds: never the code, only its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct OfflinePairing {
    /// SHA-256 of the code, hex.
    pub code_sha256: String,
    /// The role of the token the code makes.
    pub role: String,
    /// The token's name.
    pub name: String,
}

/// Makes a one-time pairing code for a token `name` with `role` and leaves it in
/// `data_dir` for the daemon's next start, replacing an earlier one not yet imported.
/// Returns the code (shown once).
///
/// Such a code does not expire with time: it is made for an appliance that has no clock
/// until it reaches a time server. It still works only once, and only until the daemon
/// has imported it and it was redeemed.
pub fn mint_offline_pairing(data_dir: &std::path::Path, role: Role, name: &str) -> Result<String, OfflineError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let role = network_role(role).map_err(OfflineError::Token)?;
    if !valid_name(name) {
        return Err(OfflineError::Token(TokenError::BadName(name.into())));
    }
    let code = b64(&random_bytes::<18>().map_err(OfflineError::Token)?);
    let record = OfflinePairing {
        code_sha256: hex(&sha256(code.as_bytes())),
        role: role.as_str().to_string(),
        name: name.to_string(),
    };
    let path = data_dir.join(OFFLINE_PAIRING_FILE);
    let io = |source| OfflineError::Io { path: path.clone(), source };
    std::fs::create_dir_all(data_dir).map_err(io)?;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(io)?;
    let bytes = serde_json::to_vec_pretty(&record).unwrap_or_default();
    file.write_all(&bytes).and_then(|()| file.sync_all()).map_err(io)?;
    std::fs::rename(&tmp, &path).map_err(io)?;
    Ok(code)
}

/// Errors of [`mint_offline_pairing`] and [`Tokens::import_offline_pairing`].
#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    /// The file could not be written, read or removed.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not an offline pairing record.
    #[error("{}: not a pairing record ({message}); make a new one with `tether pair --offline`", .path.display())]
    Bad {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The record's role or name is not allowed, or the store failed.
    #[error(transparent)]
    Token(TokenError),
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Tokens {
    /// Imports the pairing code `tether pair --offline` left in `data_dir`, once: the file
    /// is removed after the code is stored. Returns the token name the code makes. Blocks:
    /// call it at start-up.
    pub fn import_offline_pairing(&self, data_dir: &std::path::Path) -> Result<Option<String>, OfflineError> {
        let path = data_dir.join(OFFLINE_PAIRING_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(OfflineError::Io { path, source }),
        };
        let bad = |message: String| OfflineError::Bad { path: path.clone(), message };
        let record: OfflinePairing = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
        let hash: [u8; 32] = (0..32)
            .map(|i| record.code_sha256.get(2 * i..2 * i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
            .collect::<Option<Vec<u8>>>()
            .and_then(|v| v.try_into().ok())
            .filter(|_| record.code_sha256.len() == 64)
            .ok_or_else(|| bad("code_sha256 is not 64 hex digits".into()))?;
        let role = Role::from_name(&record.role).ok_or_else(|| bad(format!("unknown role {:?}", record.role)))?;
        let role = network_role(role).map_err(OfflineError::Token)?;
        if !valid_name(&record.name) {
            return Err(OfflineError::Token(TokenError::BadName(record.name)));
        }
        let name = record.name.clone();
        self.store
            .run_now(move |conn| {
                // Never expires: see `mint_offline_pairing`. Importing twice (a crash
                // before the file was removed) leaves one row.
                conn.execute(
                    "INSERT OR IGNORE INTO pairing_codes (code_hash, role, expires_ms, name) VALUES (?1, ?2, ?3, ?4)",
                    params![&hash[..], role.as_str(), i64::MAX, name],
                )?;
                Ok(())
            })
            .map_err(|e| OfflineError::Token(e.into()))?;
        std::fs::remove_file(&path).map_err(|source| OfflineError::Io { path: path.clone(), source })?;
        tracing::info!(token = %record.name, role = %role, "imported the pairing code made offline (it works once)");
        Ok(Some(record.name))
    }

    /// Loads the tokens and the session key from the store (making the key on first start,
    /// and the first admin token, whose secret nobody has seen: `tether token rotate admin`
    /// run as root shows a working one). Blocks: call it at start-up.
    pub fn open(store: Store) -> Result<Tokens, TokenError> {
        let fresh_key = random_bytes::<32>()?;
        // The first admin's secret is dropped unseen: tokens are only ever stored hashed.
        let first_hash = sha256(new_secret()?.as_bytes());
        let load = |conn: &rusqlite::Connection| -> Result<Vec<TokenRow>, StoreError> {
            let mut stmt = conn.prepare("SELECT name, role, hash, created_ms, last_used_ms FROM tokens ORDER BY id")?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))?;
            Ok(rows.collect::<Result<Vec<TokenRow>, _>>()?)
        };
        let written = store.run_now(move |conn| {
            let tx = conn.transaction()?;
            tx.execute("INSERT OR IGNORE INTO secrets (name, value) VALUES ('session_key', ?1)", [&fresh_key[..]])?;
            let key: Vec<u8> =
                tx.query_row("SELECT value FROM secrets WHERE name = 'session_key'", [], |r| r.get(0))?;
            let count: i64 = tx.query_row("SELECT COUNT(*) FROM tokens", [], |r| r.get(0))?;
            if count == 0 {
                tx.execute(
                    "INSERT INTO tokens (name, role, hash, created_ms) VALUES (?1, 'admin', ?2, ?3)",
                    params![FIRST_ADMIN, &first_hash[..], now_ms()],
                )?;
            }
            let rows = load(&tx)?;
            tx.commit()?;
            Ok((rows, key, count == 0))
        });
        let (rows, key, minted) = match written {
            Ok(loaded) => loaded,
            // A disk that takes no write: the tokens there are read as they are. Without a
            // stored session key, browser sessions made now last until the daemon restarts.
            Err(StoreError::Unwritable(why)) => {
                tracing::warn!(problem = %why, "the tokens are read-only until the disk takes writes");
                store.read_now(move |conn| {
                    let key: Option<Vec<u8>> = conn
                        .query_row("SELECT value FROM secrets WHERE name = 'session_key'", [], |r| r.get(0))
                        .optional()?;
                    Ok((load(conn)?, key.unwrap_or_else(|| fresh_key.to_vec()), false))
                })?
            }
            Err(e) => return Err(e.into()),
        };
        if minted {
            tracing::info!(
                "made the first admin token {FIRST_ADMIN:?}; `sudo tether token rotate {FIRST_ADMIN}` shows one"
            );
        }
        let entries = rows
            .into_iter()
            .filter_map(|(name, role, hash, created_ms, last_used_ms)| {
                let role = Role::from_name(&role)?;
                let hash: [u8; 32] = hash.try_into().ok()?;
                let info = TokenInfo { name, role, created_ms, last_used_ms };
                Some(Entry { info, hash, stored_use_ms: last_used_ms.unwrap_or(0), revoked: false })
            })
            .collect();
        Ok(Tokens { store, entries: Mutex::new(entries), cookie_key: hmac::Key::new(hmac::HMAC_SHA256, &key) })
    }

    /// The token whose secret is `secret`, as `(name, role)`, noting its use.
    pub fn authenticate(&self, secret: &str) -> Option<(String, Role)> {
        let hash = sha256(secret.as_bytes());
        let mut entries = self.entries.lock_plain();
        // Every entry is compared, so the time taken does not say which one matched.
        let mut found = None;
        for (i, e) in entries.iter().enumerate() {
            if same_hash(&e.hash, &hash) && !e.revoked {
                found = Some(i);
            }
        }
        let entry = &mut entries[found?];
        let now = now_ms();
        entry.info.last_used_ms = Some(now);
        if now - entry.stored_use_ms >= LAST_USED_EVERY_MS {
            entry.stored_use_ms = now;
            let (store, name) = (self.store.clone(), entry.info.name.clone());
            tokio::spawn(async move {
                let _ = store
                    .run(move |conn| {
                        conn.execute("UPDATE tokens SET last_used_ms = ?1 WHERE name = ?2", params![now, name])?;
                        Ok(())
                    })
                    .await;
            });
        }
        Some((entry.info.name.clone(), entry.info.role))
    }

    /// Every token, oldest first.
    pub fn list(&self) -> Vec<TokenInfo> {
        self.entries.lock_plain().iter().filter(|e| !e.revoked).map(|e| e.info.clone()).collect()
    }

    /// Makes token `name` with `role`; returns its secret (shown once).
    pub async fn add(&self, name: &str, role: Role) -> Result<String, TokenError> {
        if !valid_name(name) {
            return Err(TokenError::BadName(name.into()));
        }
        let role = network_role(role)?;
        if self.entries.lock_plain().iter().any(|e| e.info.name == name) {
            return Err(TokenError::Exists(name.into()));
        }
        let secret = new_secret()?;
        let hash = sha256(secret.as_bytes());
        let created_ms = now_ms();
        let owned = name.to_string();
        let inserted = self
            .store
            .run(move |conn| {
                Ok(conn.execute(
                    "INSERT OR IGNORE INTO tokens (name, role, hash, created_ms) VALUES (?1, ?2, ?3, ?4)",
                    params![owned, role.as_str(), &hash[..], created_ms],
                )?)
            })
            .await?;
        if inserted == 0 {
            return Err(TokenError::Exists(name.into()));
        }
        let info = TokenInfo { name: name.into(), role, created_ms, last_used_ms: None };
        self.entries.lock_plain().push(Entry { info, hash, stored_use_ms: 0, revoked: false });
        tracing::info!(token = name, role = %role, "token added");
        Ok(secret)
    }

    /// Replaces token `name`'s secret; returns the new one. The old secret stops working in
    /// memory first, then `ended` runs (the daemon ends what the old secret opened), then
    /// the new hash is written: whatever the disk does, the old secret is dead on this run
    /// ([`TokenError::NotSaved`] when the write failed).
    pub async fn rotate(&self, name: &str, ended: impl FnOnce()) -> Result<String, TokenError> {
        let secret = new_secret()?;
        let hash = sha256(secret.as_bytes());
        {
            let mut entries = self.entries.lock_plain();
            let Some(entry) = entries.iter_mut().find(|e| e.info.name == name && !e.revoked) else {
                return Err(TokenError::NoSuch(name.into()));
            };
            entry.hash = hash;
        }
        ended();
        let owned = name.to_string();
        self.store
            .run(
                move |conn| Ok(conn.execute("UPDATE tokens SET hash = ?1 WHERE name = ?2", params![&hash[..], owned])?),
            )
            .await
            .map_err(TokenError::NotSaved)?;
        tracing::info!(token = name, "token rotated");
        Ok(secret)
    }

    /// Deletes token `name`. The last admin token cannot go. It stops authenticating in
    /// memory first, then `ended` runs (the daemon ends what it opened), then the row is
    /// deleted: a failed write leaves it dead on this run ([`TokenError::NotSaved`]), and
    /// revoking it again retries the write.
    pub async fn revoke(&self, name: &str, ended: impl FnOnce()) -> Result<(), TokenError> {
        {
            let mut entries = self.entries.lock_plain();
            let admins = entries.iter().filter(|e| e.info.role == Role::Admin && !e.revoked).count();
            let Some(entry) = entries.iter_mut().find(|e| e.info.name == name) else {
                return Err(TokenError::NoSuch(name.into()));
            };
            if entry.info.role == Role::Admin && !entry.revoked && admins <= 1 {
                return Err(TokenError::LastAdmin(name.into()));
            }
            entry.revoked = true;
        }
        ended();
        let owned = name.to_string();
        self.store
            .run(move |conn| Ok(conn.execute("DELETE FROM tokens WHERE name = ?1", [owned])?))
            .await
            .map_err(TokenError::NotSaved)?;
        self.entries.lock_plain().retain(|e| e.info.name != name);
        tracing::info!(token = name, "token revoked");
        Ok(())
    }

    /// What a session cookie's MAC covers.
    fn cookie_data(name: &str, issued_s: i64, hash: &[u8; 32]) -> Vec<u8> {
        let mut data = b"tether session\0".to_vec();
        data.extend_from_slice(name.as_bytes());
        data.push(0);
        data.extend_from_slice(&issued_s.to_be_bytes());
        data.extend_from_slice(hash);
        data
    }

    /// A session cookie's value for the holder of `secret` (after [`Tokens::authenticate`]).
    pub fn session_cookie(&self, secret: &str) -> Option<String> {
        let (name, _) = self.authenticate(secret)?;
        let hash = sha256(secret.as_bytes());
        let issued = now_ms() / 1000;
        let tag = hmac::sign(&self.cookie_key, &Self::cookie_data(&name, issued, &hash));
        Some(format!("{name}.{issued}.{}", b64(tag.as_ref())))
    }

    /// The token a session cookie stands for, if the cookie is genuine, younger than
    /// [`SESSION_LIFETIME`] and its token unchanged.
    pub fn verify_cookie(&self, value: &str) -> Option<(String, Role)> {
        let mut parts = value.rsplitn(3, '.');
        let (mac, issued, name) = (parts.next()?, parts.next()?, parts.next()?);
        let issued: i64 = issued.parse().ok()?;
        let age = (now_ms() / 1000).checked_sub(issued)?;
        let lifetime = i64::try_from(SESSION_LIFETIME.as_secs()).unwrap_or(i64::MAX);
        // A minute of clock skew the other way is tolerated.
        if !(-60..=lifetime).contains(&age) {
            return None;
        }
        let mac = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(mac).ok()?;
        let entries = self.entries.lock_plain();
        let entry = entries.iter().find(|e| e.info.name == name && !e.revoked)?;
        // hmac::verify compares in constant time.
        hmac::verify(&self.cookie_key, &Self::cookie_data(name, issued, &entry.hash), &mac).ok()?;
        Some((entry.info.name.clone(), entry.info.role))
    }

    /// Makes a one-time pairing code for a token `name` (default `paired-XXXX`) with `role`.
    pub async fn create_pairing(&self, role: Role, name: Option<&str>, ttl: Duration) -> Result<Pairing, TokenError> {
        let role = network_role(role)?;
        let name = match name {
            Some(n) if !valid_name(n) => return Err(TokenError::BadName(n.into())),
            Some(n) => n.to_string(),
            None => format!("paired-{}", &b64(&random_bytes::<6>()?)[..6].to_ascii_lowercase()),
        };
        if self.entries.lock_plain().iter().any(|e| e.info.name == name) {
            return Err(TokenError::Exists(name));
        }
        let code = b64(&random_bytes::<18>()?);
        let hash = sha256(code.as_bytes());
        let ttl = ttl.min(MAX_PAIRING_TTL);
        let expires_ms = now_ms().saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
        let owned = name.clone();
        self.store
            .run(move |conn| {
                conn.execute("DELETE FROM pairing_codes WHERE expires_ms < ?1", [now_ms()])?;
                conn.execute(
                    "INSERT INTO pairing_codes (code_hash, role, expires_ms, name) VALUES (?1, ?2, ?3, ?4)",
                    params![&hash[..], role.as_str(), expires_ms, owned],
                )?;
                Ok(())
            })
            .await?;
        tracing::info!(token = %name, role = %role, "pairing code made");
        Ok(Pairing { code, role, name, expires_ms })
    }

    /// Redeems a pairing code (once, before it expires) into a new token; returns its name,
    /// role and secret.
    pub async fn redeem_pairing(&self, code: &str) -> Result<(String, Role, String), TokenError> {
        let hash = sha256(code.as_bytes());
        let now = now_ms();
        let taken: Result<Option<(String, String)>, String> = self
            .store
            .run(move |conn| {
                let tx = conn.transaction()?;
                let row = tx
                    .query_row(
                        "SELECT role, name FROM pairing_codes WHERE code_hash = ?1 AND used = 0 AND expires_ms > ?2",
                        params![&hash[..], now],
                        |r| Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?)),
                    )
                    .optional()?;
                // A name taken since the code was made leaves the code unused (and says so).
                if let Some((_, Some(name))) = &row {
                    let taken: i64 =
                        tx.query_row("SELECT COUNT(*) FROM tokens WHERE name = ?1", [name], |r| r.get(0))?;
                    if taken > 0 {
                        return Ok(Err(name.clone()));
                    }
                }
                tx.execute("UPDATE pairing_codes SET used = 1 WHERE code_hash = ?1", [&hash[..]])?;
                tx.commit()?;
                Ok(Ok(row.map(|(role, name)| (role, name.unwrap_or_default()))))
            })
            .await?;
        let Some((role, name)) = taken.map_err(TokenError::Exists)? else {
            return Err(TokenError::PairingInvalid);
        };
        let role = Role::from_name(&role).ok_or(TokenError::PairingInvalid)?;
        let secret = self.add(&name, role).await?;
        Ok((name, role, secret))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn tokens() -> (tempfile::TempDir, Tokens) {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(&dir.path().join("t.db")).unwrap();
        (dir, Tokens::open(store).unwrap())
    }

    #[tokio::test]
    async fn a_fresh_store_has_one_admin_and_keeps_only_hashes() {
        let (dir, t) = tokens().await;
        assert_eq!(
            t.list().iter().map(|i| (i.name.as_str(), i.role)).collect::<Vec<_>>(),
            [(FIRST_ADMIN, Role::Admin)]
        );
        let secret = t.add("laptop", Role::Operate).await.unwrap();
        assert!(secret.starts_with("tt_") && secret.len() > 40);
        assert_eq!(t.authenticate(&secret), Some(("laptop".into(), Role::Operate)));
        assert_eq!(t.authenticate("tt_wrong"), None);
        drop(t);
        let db = std::fs::read(dir.path().join("t.db")).unwrap();
        let wal = std::fs::read(dir.path().join("t.db-wal")).unwrap_or_default();
        let needle = secret.as_bytes();
        for bytes in [&db, &wal] {
            assert!(!bytes.windows(needle.len()).any(|w| w == needle), "the secret is not stored");
        }
    }

    #[tokio::test]
    async fn tokens_survive_a_restart_and_rotation_kills_the_old_secret() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let secret = {
            let (store, _) = Store::open(&path).unwrap();
            let t = Tokens::open(store).unwrap();
            t.add("ci", Role::View).await.unwrap()
        };
        let (store, _) = Store::open(&path).unwrap();
        let t = Tokens::open(store).unwrap();
        assert_eq!(t.list().len(), 2, "no second first admin");
        assert_eq!(t.authenticate(&secret), Some(("ci".into(), Role::View)));
        let cookie = t.session_cookie(&secret).unwrap();
        assert_eq!(t.verify_cookie(&cookie), Some(("ci".into(), Role::View)));
        let mut ended = false;
        let new = t.rotate("ci", || ended = true).await.unwrap();
        assert!(ended, "what the old secret opened is ended");
        assert_eq!(t.authenticate(&secret), None);
        assert_eq!(t.authenticate(&new), Some(("ci".into(), Role::View)));
        assert_eq!(t.verify_cookie(&cookie), None, "rotation ends sessions");
        assert!(matches!(t.rotate("nobody", || ()).await, Err(TokenError::NoSuch(_))));
    }

    #[tokio::test]
    async fn the_last_admin_stays_and_names_are_checked() {
        let (_dir, t) = tokens().await;
        assert!(matches!(t.revoke(FIRST_ADMIN, || ()).await, Err(TokenError::LastAdmin(_))));
        let second = t.add("root2", Role::Admin).await.unwrap();
        t.revoke(FIRST_ADMIN, || ()).await.unwrap();
        assert!(matches!(t.revoke("root2", || ()).await, Err(TokenError::LastAdmin(_))));
        assert!(matches!(t.add("root2", Role::View).await, Err(TokenError::Exists(_))));
        assert!(matches!(t.add("bad name", Role::View).await, Err(TokenError::BadName(_))));
        assert!(matches!(t.add("", Role::View).await, Err(TokenError::BadName(_))));
        assert!(matches!(t.add("a", Role::Agent).await, Err(TokenError::BadRole)));
        let v = t.add("viewer", Role::View).await.unwrap();
        let cookie = t.session_cookie(&v).unwrap();
        t.revoke("viewer", || ()).await.unwrap();
        assert_eq!(t.authenticate(&v), None);
        assert_eq!(t.verify_cookie(&cookie), None, "revocation ends sessions");
        assert!(t.authenticate(&second).is_some());
    }

    #[tokio::test]
    async fn cookies_cannot_be_forged_or_moved() {
        let (_dir, t) = tokens().await;
        let a = t.add("a", Role::View).await.unwrap();
        t.add("b", Role::Admin).await.unwrap();
        let cookie = t.session_cookie(&a).unwrap();
        let (_, rest) = cookie.split_once('.').unwrap();
        assert_eq!(t.verify_cookie(&format!("b.{rest}")), None, "another token's name");
        let (head, _) = cookie.rsplit_once('.').unwrap();
        assert_eq!(t.verify_cookie(&format!("{head}.AAAA")), None);
        let mut parts: Vec<&str> = cookie.split('.').collect();
        let old = (now_ms() / 1000 - 31 * 86_400).to_string();
        parts[1] = &old;
        assert_eq!(t.verify_cookie(&parts.join(".")), None, "a changed issue time breaks the MAC");
        assert_eq!(t.verify_cookie("garbage"), None);
    }

    #[tokio::test]
    async fn a_pairing_code_works_once_and_not_after_it_expires() {
        let (_dir, t) = tokens().await;
        let p = t.create_pairing(Role::Operate, Some("phone"), DEFAULT_PAIRING_TTL).await.unwrap();
        let (name, role, secret) = t.redeem_pairing(&p.code).await.unwrap();
        assert_eq!((name.as_str(), role), ("phone", Role::Operate));
        assert_eq!(t.authenticate(&secret), Some(("phone".into(), Role::Operate)));
        assert!(matches!(t.redeem_pairing(&p.code).await, Err(TokenError::PairingInvalid)), "used");
        // A zero lifetime ends at the moment it is made.
        let expired = t.create_pairing(Role::View, None, Duration::ZERO).await.unwrap();
        assert!(matches!(t.redeem_pairing(&expired.code).await, Err(TokenError::PairingInvalid)), "expired");
        assert!(matches!(t.redeem_pairing("made-up").await, Err(TokenError::PairingInvalid)));
        assert!(matches!(
            t.create_pairing(Role::View, Some("phone"), DEFAULT_PAIRING_TTL).await,
            Err(TokenError::Exists(_))
        ));
    }

    #[tokio::test]
    async fn an_offline_code_is_imported_once_and_redeems_once() {
        let (dir, t) = tokens().await;
        let data = dir.path().join("data");
        let code = mint_offline_pairing(&data, Role::Admin, "owner").unwrap();
        let file = std::fs::read_to_string(data.join(OFFLINE_PAIRING_FILE)).unwrap();
        assert!(!file.contains(&code), "the file holds only the code's hash");
        assert_eq!(t.import_offline_pairing(&data).unwrap().as_deref(), Some("owner"));
        assert!(!data.join(OFFLINE_PAIRING_FILE).exists(), "imported files are removed");
        assert_eq!(t.import_offline_pairing(&data).unwrap(), None, "nothing left to import");
        let (name, role, secret) = t.redeem_pairing(&code).await.unwrap();
        assert_eq!((name.as_str(), role), ("owner", Role::Admin));
        assert_eq!(t.authenticate(&secret), Some(("owner".into(), Role::Admin)));
        assert!(matches!(t.redeem_pairing(&code).await, Err(TokenError::PairingInvalid)), "once only");
    }

    #[tokio::test]
    async fn a_bad_offline_record_is_refused_and_kept_for_a_person_to_see() {
        let (dir, t) = tokens().await;
        let data = dir.path().join("data");
        assert!(matches!(mint_offline_pairing(&data, Role::Agent, "x"), Err(OfflineError::Token(_))));
        assert!(matches!(mint_offline_pairing(&data, Role::View, "no spaces"), Err(OfflineError::Token(_))));
        std::fs::create_dir_all(&data).unwrap();
        for bad in [
            "not json",
            r#"{"code_sha256": "00", "role": "admin", "name": "owner"}"#,
            r#"{"code_sha256": "zz00000000000000000000000000000000000000000000000000000000000000", "role": "admin", "name": "o"}"#,
            r#"{"code_sha256": "0000000000000000000000000000000000000000000000000000000000000000", "role": "root", "name": "o"}"#,
        ] {
            std::fs::write(data.join(OFFLINE_PAIRING_FILE), bad).unwrap();
            assert!(t.import_offline_pairing(&data).is_err(), "{bad}");
            assert!(data.join(OFFLINE_PAIRING_FILE).exists(), "a refused file stays");
        }
    }
}
