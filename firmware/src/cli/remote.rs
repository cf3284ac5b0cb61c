//! Where a client command goes: the local control socket, or an appliance's HTTPS URL
//! (`--url`) with a token and the CA fingerprint to pin, from `tether login`'s
//! `~/.config/tether/hosts.toml` or from `TETHER_TOKEN` and `TETHER_FINGERPRINT`.

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tether::client::https::{Credentials, HttpsClient, Target};
use tether::client::{ClientError, ControlClient};
use tether::server::tls::Fingerprint;

/// One appliance `tether login` stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostEntry {
    /// `https://host:port`.
    pub url: String,
    /// The token's name on the appliance.
    pub name: String,
    /// Its role.
    pub role: String,
    /// The token.
    pub token: String,
    /// The CA fingerprint (hex) pinned for this appliance.
    pub fingerprint: String,
}

/// `~/.config/tether/hosts.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostsFile {
    /// The appliance `--url` commands use when none is given.
    #[serde(default)]
    pub default: Option<String>,
    /// The stored appliances.
    #[serde(default, rename = "host")]
    pub hosts: Vec<HostEntry>,
}

/// Where the hosts file lives (`$XDG_CONFIG_HOME/tether/hosts.toml`, else `~/.config/…`).
pub fn hosts_path() -> anyhow::Result<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            PathBuf::from(std::env::var_os("HOME").context("HOME is not set; cannot find ~/.config")?).join(".config")
        }
    };
    Ok(base.join("tether").join("hosts.toml"))
}

impl HostsFile {
    /// Reads the file (an absent file is empty).
    pub fn load() -> anyhow::Result<HostsFile> {
        let path = hosts_path()?;
        match std::fs::read_to_string(&path) {
            Ok(text) => toml::from_str(&text).with_context(|| format!("{} is not a hosts file", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(HostsFile::default()),
            Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
        }
    }

    /// Writes the file atomically with mode 0600 (it holds tokens).
    pub fn save(&self) -> anyhow::Result<PathBuf> {
        let path = hosts_path()?;
        let dir = path.parent().context("the hosts file has no directory")?;
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let tmp = path.with_extension("toml.tmp");
        let _ = std::fs::remove_file(&tmp);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("write {}", tmp.display()))?;
        use std::io::Write;
        file.write_all(toml::to_string(self)?.as_bytes())?;
        file.sync_all()?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("write {}", path.display()))?;
        Ok(path)
    }

    /// The entry for `url` (compared by `https://host:port`).
    pub fn find(&self, base: &str) -> Option<&HostEntry> {
        self.hosts.iter().find(|h| h.url == base)
    }

    /// Adds or replaces the entry for its URL, and makes it the default.
    pub fn upsert(&mut self, entry: HostEntry) {
        self.default = Some(entry.url.clone());
        self.hosts.retain(|h| h.url != entry.url);
        self.hosts.push(entry);
    }
}

/// Where a command goes.
#[derive(Debug, Clone)]
pub enum Endpoint {
    /// The control socket.
    Socket(PathBuf),
    /// An appliance over HTTPS.
    Remote(HttpsClient),
}

/// The `--url` flags every client command takes.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RemoteArgs {
    /// An appliance's URL (`https://host:port`): go over HTTPS instead of the local socket.
    /// `tether login` stores the token and fingerprint for it.
    #[arg(long, value_name = "URL", env = "TETHER_URL")]
    pub url: Option<String>,
    /// The CA fingerprint to pin (64 hex digits), when the URL was not stored by `tether login`.
    #[arg(long, value_name = "SHA256", env = "TETHER_FINGERPRINT")]
    pub fingerprint: Option<String>,
}

impl RemoteArgs {
    /// The fingerprint pinned for `target` (the flag, else the hosts file), hex.
    pub fn fingerprint_for(&self, target: &Target) -> anyhow::Result<String> {
        if let Some(f) = &self.fingerprint {
            return Ok(Fingerprint::parse(f).context("the fingerprint must be 64 hex digits")?.hex());
        }
        let hosts = HostsFile::load()?;
        hosts.find(&target.base_url()).map(|h| h.fingerprint.clone()).context("no fingerprint stored for this URL")
    }
}

impl Endpoint {
    /// The socket, or with `--url` the appliance: its token from `TETHER_TOKEN` or the
    /// hosts file, its fingerprint from `--fingerprint`/`TETHER_FINGERPRINT` or the hosts file.
    pub fn resolve(socket: Option<PathBuf>, remote: &RemoteArgs) -> anyhow::Result<Endpoint> {
        let Some(url) = &remote.url else {
            return Ok(Endpoint::Socket(super::client_socket(socket)));
        };
        let (target, _, _) = Target::parse(url)?;
        let hosts = HostsFile::load()?;
        let stored = hosts.find(&target.base_url());
        let task_token = std::env::var("TETHER_TASK_TOKEN").ok().filter(|t| !t.is_empty());
        // Inside a task, a command acts as the task's agent: a stored login is not used.
        let stored_token = stored.filter(|_| task_token.is_none()).map(|h| h.token.clone());
        let token = std::env::var("TETHER_TOKEN").ok().filter(|t| !t.is_empty()).or(stored_token);
        let fingerprint = match (&remote.fingerprint, stored) {
            (Some(f), _) => f.clone(),
            (None, Some(h)) => h.fingerprint.clone(),
            (None, None) => bail!(
                "no fingerprint for {}: run `tether login PAIRING-URL` first, or pass --fingerprint (`tether doctor` \
                 on the appliance shows it)",
                target.base_url()
            ),
        };
        let pin = Fingerprint::parse(&fingerprint).context("the fingerprint must be 64 hex digits")?;
        if token.is_none() && task_token.is_none() {
            bail!("no token for {}: run `tether login PAIRING-URL`, or set TETHER_TOKEN", target.base_url());
        }
        Ok(Endpoint::Remote(HttpsClient::new(target, pin, Credentials { token, task_token })?))
    }

    /// Calls one method and returns its result, on a short-lived runtime.
    pub fn call_once(&self, method: &str, params: Value) -> anyhow::Result<Value> {
        super::client_runtime()?.block_on(self.call(method, params))
    }

    /// Calls one method and returns its result.
    pub async fn call(&self, method: &str, params: Value) -> anyhow::Result<Value> {
        match self {
            Endpoint::Socket(path) => {
                let mut client = ControlClient::connect(path).await?;
                match client.call(method, super::task::with_env_token(params)).await {
                    Ok(v) => Ok(v),
                    Err(tether::client::ClientError::Remote { code, message }) => {
                        Err(anyhow::anyhow!("{code}: {message}"))
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Endpoint::Remote(client) => match client.call(method, params).await {
                Ok(v) => Ok(v),
                Err(tether::client::https::HttpsClientError::Remote { code, message, .. }) => {
                    Err(anyhow::anyhow!("{code}: {message}"))
                }
                Err(e) => Err(e.into()),
            },
        }
    }
}

/// The daemon's error as `CODE: message`, other failures as they are.
pub(super) fn client_error(e: ClientError) -> anyhow::Error {
    match e {
        ClientError::Remote { code, message } => anyhow::anyhow!("{code}: {message}"),
        other => anyhow::Error::new(other),
    }
}
