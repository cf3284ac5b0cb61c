//! Starting a sim daemon on a temporary socket and talking raw tether/1 lines to it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tether::daemon::{Daemon, DaemonOptions, Devices, RolePolicy};
use tether::device::input::InputTimings;
use tether::device::sim::{SimConfig, SimPhone};
use tether::server::{UnixServer, UnixServerConfig};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio_util::sync::CancellationToken;

/// A sim daemon serving a control socket in a temporary directory.
#[derive(Debug)]
pub struct SimDaemon {
    /// The daemon handle.
    pub daemon: Daemon,
    /// The virtual phone.
    pub phone: SimPhone,
    socket: PathBuf,
    shutdown: CancellationToken,
    _dir: tempfile::TempDir,
}

impl SimDaemon {
    /// Starts a daemon whose socket treats the current uid as admin.
    pub async fn start() -> anyhow::Result<SimDaemon> {
        SimDaemon::start_with(|_| {}).await
    }

    /// Starts a daemon, letting the caller adjust the socket configuration.
    pub async fn start_with(adjust: impl FnOnce(&mut UnixServerConfig)) -> anyhow::Result<SimDaemon> {
        let sim = SimConfig::default();
        SimDaemon::start_full(sim, DaemonOptions { sim: true, ..DaemonOptions::default() }, adjust).await
    }

    /// Starts a daemon over a phone configured as `sim`, with gesture `timings`; the
    /// daemon's keyboard layout follows the phone's.
    pub async fn start_phone(sim: SimConfig, timings: InputTimings) -> anyhow::Result<SimDaemon> {
        SimDaemon::start_options(sim, DaemonOptions { timings, ..DaemonOptions::default() }).await
    }

    /// Starts a daemon over a phone configured as `sim` with `options`; `sim`, the layout
    /// (the phone's) and the data directory (a temporary one) are filled in.
    pub async fn start_options(sim: SimConfig, options: DaemonOptions) -> anyhow::Result<SimDaemon> {
        SimDaemon::start_full(sim, options, |_| {}).await
    }

    async fn start_full(
        sim: SimConfig,
        options: DaemonOptions,
        adjust: impl FnOnce(&mut UnixServerConfig),
    ) -> anyhow::Result<SimDaemon> {
        let dir = tempfile::tempdir()?;
        let socket = dir.path().join("control.sock");
        let phone = SimPhone::new(sim);
        let daemon = Daemon::start(
            Devices { hid: Box::new(phone.hid()), video: Box::new(phone.display()), sim: Some(phone.clone()) },
            DaemonOptions { sim: true, layout: sim.layout, data_dir: Some(dir.path().join("data")), ..options },
        )?;
        let policy = RolePolicy { service_uid: nix_uid(), agent_uid: None, operator_gid: None };
        let mut config = UnixServerConfig::new(socket.clone(), policy);
        adjust(&mut config);
        let server = UnixServer::bind(config, daemon.clone())?;
        let shutdown = CancellationToken::new();
        tokio::spawn(server.serve(shutdown.clone()));
        Ok(SimDaemon { daemon, phone, socket, shutdown, _dir: dir })
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// A new raw connection.
    pub async fn connect(&self) -> anyhow::Result<RawClient> {
        RawClient::connect(&self.socket).await
    }
}

impl Drop for SimDaemon {
    fn drop(&mut self) {
        self.shutdown.cancel();
        self.daemon.shutdown();
    }
}

fn nix_uid() -> u32 {
    std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap_or(0)
}

/// A client that writes raw lines and reads JSON lines.
#[derive(Debug)]
pub struct RawClient {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

impl RawClient {
    /// Connects to `socket`.
    pub async fn connect(socket: &Path) -> anyhow::Result<RawClient> {
        let (read, writer) = UnixStream::connect(socket).await?.into_split();
        Ok(RawClient { reader: BufReader::new(read), writer })
    }

    /// Sends bytes as they are (add the newline yourself).
    pub async fn send_raw(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.writer.write_all(bytes).await?;
        Ok(())
    }

    /// Sends one line.
    pub async fn send(&mut self, line: &str) -> anyhow::Result<()> {
        self.send_raw(format!("{line}\n").as_bytes()).await
    }

    /// Reads one JSON message, failing after 5 s.
    pub async fn recv(&mut self) -> anyhow::Result<Value> {
        let mut line = String::new();
        let n = tokio::time::timeout(Duration::from_secs(5), self.reader.read_line(&mut line)).await??;
        anyhow::ensure!(n > 0, "connection closed");
        Ok(serde_json::from_str(&line)?)
    }

    /// Calls `method` with `params` (an object) as request `id`; returns the whole reply,
    /// skipping replies to other ids (pipelined requests may answer out of order).
    pub async fn call(&mut self, id: u64, method: &str, params: Value) -> anyhow::Result<Value> {
        let mut req = match params {
            Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        req.insert("id".into(), id.into());
        req.insert("method".into(), method.into());
        self.send(&Value::Object(req).to_string()).await?;
        loop {
            let reply = self.recv_within(Duration::from_secs(30)).await?;
            if reply["id"] == id {
                return Ok(reply);
            }
        }
    }

    /// Calls and returns `result`, failing when the reply is an error.
    pub async fn ok(&mut self, id: u64, method: &str, params: Value) -> anyhow::Result<Value> {
        let reply = self.call(id, method, params).await?;
        anyhow::ensure!(reply["ok"] == true, "{method} failed: {reply}");
        Ok(reply["result"].clone())
    }

    /// Reads one JSON message, failing after `limit`.
    pub async fn recv_within(&mut self, limit: Duration) -> anyhow::Result<Value> {
        let mut line = String::new();
        let n = tokio::time::timeout(limit, self.reader.read_line(&mut line)).await??;
        anyhow::ensure!(n > 0, "connection closed");
        Ok(serde_json::from_str(&line)?)
    }

    /// Sends one line and reads one reply.
    pub async fn roundtrip(&mut self, line: &str) -> anyhow::Result<Value> {
        self.send(line).await?;
        self.recv().await
    }
}
