//! Starting a sim daemon on a temporary socket and talking raw tether/1 lines to it.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use tether::daemon::{Daemon, DaemonOptions, Devices};
use tether::device::input::InputTimings;
use tether::device::sim::{SimConfig, SimPhone};
use tether::server::RolePolicy;
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

    /// Starts a daemon that reads text (the `tether-ocr-worker` built with this crate, as
    /// `serve` runs its own), over a phone configured as `sim`.
    pub async fn start_reading(sim: SimConfig) -> anyhow::Result<SimDaemon> {
        // Tuning options for the worker (`--scale 2`, see `tether ocr-worker`), to compare
        // choices on the tests' screens; none by default.
        let args = std::env::var("TETHER_TEST_OCR_ARGS").unwrap_or_default();
        let args = args.split_whitespace().map(str::to_owned).collect();
        let program = tether::device::ocr::worker::WorkerCommand { program: test_ocr_worker(), args };
        let settings = tether::config::OcrSettings::default();
        let reader =
            tether::device::ocr::worker::reader_from(&settings, program).map(tether::device::ocr::SharedReader);
        SimDaemon::start_options(sim, DaemonOptions { text_reader: reader, ..DaemonOptions::default() }).await
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
        let policy = RolePolicy { service_uid: nix_uid(), agent_uid: None, agent_name: None, operator_gid: None };
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
///
/// Replies may arrive out of order and events may arrive between them, so nothing read
/// is ever thrown away: a message that is not the one a caller waits for stays in
/// `pending`, in arrival order, until [`RawClient::reply`], [`RawClient::event`] or
/// [`RawClient::recv`] takes it.
#[derive(Debug)]
pub struct RawClient {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    /// Messages read but not taken yet, oldest first.
    pending: VecDeque<Value>,
    /// Bytes of a line whose end has not arrived yet (kept across timeouts).
    partial: Vec<u8>,
}

/// How long [`RawClient::call`] waits for its reply: generous, for a loaded CI machine.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

impl RawClient {
    /// Connects to `socket`.
    pub async fn connect(socket: &Path) -> anyhow::Result<RawClient> {
        let (read, writer) = UnixStream::connect(socket).await?.into_split();
        Ok(RawClient { reader: BufReader::new(read), writer, pending: VecDeque::new(), partial: Vec::new() })
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

    /// Sends request `id`: `method` with `params` (an object) without waiting for the reply.
    pub async fn send_request(&mut self, id: u64, method: &str, params: Value) -> anyhow::Result<()> {
        let mut req = match params {
            Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        req.insert("id".into(), id.into());
        req.insert("method".into(), method.into());
        self.send(&Value::Object(req).to_string()).await
    }

    /// Reads the next message from the socket (not from `pending`), failing at `deadline`.
    /// Cancel-safe: a line cut short by the deadline is kept and completed next time.
    async fn read_message(&mut self, deadline: Instant) -> anyhow::Result<Value> {
        loop {
            if let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.partial.drain(..=end).collect();
                return Ok(serde_json::from_slice(&line)?);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let buf = match tokio::time::timeout(left, self.reader.fill_buf()).await {
                Ok(r) => r?,
                Err(_) => anyhow::bail!(
                    "nothing arrived in time ({} unread message(s) buffered: {:?})",
                    self.pending.len(),
                    self.pending
                ),
            };
            anyhow::ensure!(!buf.is_empty(), "connection closed");
            let n = buf.len();
            self.partial.extend_from_slice(buf);
            self.reader.consume(n);
        }
    }

    /// The next message in arrival order (buffered ones first), failing after 5 s.
    pub async fn recv(&mut self) -> anyhow::Result<Value> {
        self.recv_within(Duration::from_secs(5)).await
    }

    /// The next message in arrival order (buffered ones first), failing after `limit`.
    pub async fn recv_within(&mut self, limit: Duration) -> anyhow::Result<Value> {
        if let Some(m) = self.pending.pop_front() {
            return Ok(m);
        }
        self.read_message(Instant::now() + limit).await
    }

    /// The first message (buffered or new) for which `want` holds; others are kept.
    pub async fn take(&mut self, limit: Duration, mut want: impl FnMut(&Value) -> bool) -> anyhow::Result<Value> {
        if let Some(m) = self.pending.iter().position(&mut want).and_then(|i| self.pending.remove(i)) {
            return Ok(m);
        }
        let deadline = Instant::now() + limit;
        loop {
            let m = self.read_message(deadline).await?;
            if want(&m) {
                return Ok(m);
            }
            self.pending.push_back(m);
        }
    }

    /// The reply to request `id` (not an event), failing after `limit`; everything else
    /// that arrives first stays buffered.
    pub async fn reply(&mut self, id: u64, limit: Duration) -> anyhow::Result<Value> {
        self.take(limit, |m| m.get("event").is_none() && m["id"] == id)
            .await
            .map_err(|e| e.context(format!("no reply to request {id}")))
    }

    /// The next event (a message with an `event` field), failing after `limit`; replies
    /// that arrive first stay buffered.
    pub async fn event(&mut self, limit: Duration) -> anyhow::Result<Value> {
        self.take(limit, |m| m.get("event").is_some()).await
    }

    /// Messages read but not taken yet.
    pub fn buffered(&self) -> usize {
        self.pending.len()
    }

    /// Calls `method` with `params` (an object) as request `id` and returns its whole reply;
    /// replies to other ids and events that arrive first are kept for later.
    pub async fn call(&mut self, id: u64, method: &str, params: Value) -> anyhow::Result<Value> {
        self.send_request(id, method, params).await?;
        self.reply(id, REPLY_TIMEOUT).await
    }

    /// Calls and returns `result`, failing when the reply is an error.
    pub async fn ok(&mut self, id: u64, method: &str, params: Value) -> anyhow::Result<Value> {
        let reply = self.call(id, method, params).await?;
        anyhow::ensure!(reply["ok"] == true, "{method} failed: {reply}");
        Ok(reply["result"].clone())
    }

    /// Sends one line and reads the next message (buffered ones first).
    pub async fn roundtrip(&mut self, line: &str) -> anyhow::Result<Value> {
        self.send(line).await?;
        self.recv().await
    }
}

/// Evaluates `$check` (an expression giving an `Option`, may `.await`) every 10 ms until
/// it is `Some`, and yields the value; panics naming `$what` once `$limit` has passed. For
/// waiting on a condition instead of sleeping and hoping.
#[macro_export]
macro_rules! wait_for {
    ($limit:expr, $what:expr, $check:expr) => {{
        let limit: std::time::Duration = $limit;
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(v) = $check {
                break v;
            }
            assert!(std::time::Instant::now() < deadline, "timed out after {limit:?} waiting for {}", $what);
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }};
}

/// A test's view of one connection: numbers its own requests, adds a task token when it
/// has one, and panics with the request on anything unexpected (a failed test). Built on
/// [`RawClient`], so replies to other ids and events that arrive early are kept, not lost.
#[derive(Debug)]
pub struct Caller {
    /// The connection underneath, for raw lines.
    pub c: RawClient,
    next: u64,
    token: Option<String>,
}

impl Caller {
    /// Connects to `d`. Request ids start above 1000, clear of ids a test picks itself.
    pub async fn new(d: &SimDaemon) -> Caller {
        #[allow(clippy::expect_used)] // test helper: no connection is a failed test
        let c = d.connect().await.expect("connect to the sim daemon");
        Caller { c, next: 1000, token: None }
    }

    /// Sends every later request with `task_token`.
    #[must_use]
    pub fn with_token(mut self, token: &str) -> Caller {
        self.token = Some(token.to_string());
        self
    }

    /// Sends a request under the next id without waiting; returns the id.
    pub async fn send(&mut self, method: &str, params: Value) -> u64 {
        self.next += 1;
        self.send_as(self.next, method, params).await;
        self.next
    }

    /// Sends a request under a chosen id (duplicate-id tests) without waiting.
    pub async fn send_as(&mut self, id: u64, method: &str, params: Value) {
        let mut params = match params {
            Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        if let Some(t) = &self.token {
            params.insert("task_token".into(), t.clone().into());
        }
        if let Err(e) = self.c.send_request(id, method, Value::Object(params)).await {
            panic!("send {method} as {id}: {e:#}");
        }
    }

    /// The reply to `id`, however much else arrives first.
    pub async fn reply(&mut self, id: u64, within: Duration) -> Value {
        self.c.reply(id, within).await.unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// The next event, however many replies arrive first.
    pub async fn event(&mut self, within: Duration) -> Value {
        self.c.event(within).await.unwrap_or_else(|e| panic!("no event: {e:#}"))
    }

    /// Sends and waits for the whole reply.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params).await;
        self.reply(id, REPLY_TIMEOUT).await
    }

    /// Calls and returns `result`; panics when the reply is an error.
    pub async fn ok(&mut self, method: &str, params: Value) -> Value {
        let r = self.call(method, params.clone()).await;
        assert_eq!(r["ok"], true, "{method} {params}: {r}");
        r["result"].clone()
    }

    /// Calls and returns `error`; panics when the call succeeds.
    pub async fn err(&mut self, method: &str, params: Value) -> Value {
        let r = self.call(method, params.clone()).await;
        assert_eq!(r["ok"], false, "{method} {params} should fail: {r}");
        r["error"].clone()
    }

    /// A screenshot's observation id.
    pub async fn shot(&mut self) -> String {
        let r = self.ok("screenshot", serde_json::json!({})).await;
        match r["metadata"]["observation_id"].as_str() {
            Some(id) => id.to_string(),
            None => panic!("screenshot without an observation id: {r}"),
        }
    }
}

/// The `tether-ocr-worker` binary built with this crate: next to the running test or bench
/// executable (`target/<profile>/`), or one directory up (integration tests run from
/// `target/<profile>/deps/`). Build it first: `cargo build -p tether-tests --bin
/// tether-ocr-worker` (cargo builds a package's bins before its integration tests).
pub fn test_ocr_worker() -> PathBuf {
    let name = "tether-ocr-worker";
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let candidates = [dir.join(name), dir.parent().map(|p| p.join(name)).unwrap_or_default()];
    candidates.iter().find(|p| p.is_file()).cloned().unwrap_or_else(|| candidates[0].clone())
}
