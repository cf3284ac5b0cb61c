//! The HTTPS server: one port for browsers, `curl`, laptops and CI.
//!
//! Each connection's first byte decides what it speaks: `0x16` (a TLS handshake) is TLS
//! (HTTP/1.1 or h2 by ALPN); anything else is plain HTTP, served only to loopback peers
//! (a LAN peer is redirected to HTTPS). Requests then pass the checks in [`guard`] and go
//! to [`routes`], which call the daemon like any other transport.
//!
//! Limits: a connection has 10 s to start and finish its TLS handshake, 20 s to send each
//! request's headers (16 KiB at most) and 30 s for its body (1 MiB; 4 KiB before
//! authentication), and is dropped after 60 s without requests (see [`ConnState`] for
//! streams and long requests). At most `max_connections` are open; when full, one is
//! dropped for the new one: an unauthenticated one of the address with the most, else an
//! idle one of whoever holds the most ([`conn::ConnTable`]), so neither thousands of idle
//! sockets nor one token's streams can lock out a real client.

mod body;
mod conn;
mod console;
mod guard;
mod mcp;
mod origin;
mod report;
mod routes;
mod shared;
mod update;
mod video;
mod ws;

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

pub use guard::{cookie_name, HostAllowlist, MAX_FAILURES, TASK_TOKEN_HEADER};

use super::tls::{self, TlsMaterial};
use crate::daemon::Daemon;
pub use conn::IDLE_TIMEOUT;
use conn::{Busy, ConnState, ConnTable, Watched};

/// The default largest request body.
pub const DEFAULT_MAX_BODY: usize = 1 << 20;
/// Most connections open at once, by default.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// How long a connection may take to send its first byte and finish the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request's body may take (all of it).
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a request's headers may take.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(20);
/// How often a streamed answer says it is alive.
pub const KEEPALIVE: Duration = Duration::from_secs(15);
/// Largest request head (HTTP/1 buffer, h2 header list).
const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub enum HttpsError {
    /// Something else listens on the address (another tether, another program).
    #[error(
        "cannot listen on {addr}: the address is already in use (another tether or another program listens \
         there): stop it, or pick another address with --listen ADDR:PORT (config key `listen`)"
    )]
    AddrInUse {
        /// The address.
        addr: SocketAddr,
    },
    /// A port below 1024 without the privilege to bind it.
    #[error(
        "cannot listen on {addr}: ports below 1024 need root or CAP_NET_BIND_SERVICE; pick a port from 1024 up \
         with --listen ADDR:PORT (config key `listen`)"
    )]
    Privileged {
        /// The address.
        addr: SocketAddr,
    },
    /// The listen address could not be bound for another reason (its cause follows in the
    /// error chain, not in this text: a chain printer would say it twice).
    #[error("cannot listen on {addr} (pick another with --listen ADDR:PORT, config key `listen`)")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: io::Error,
    },
}

impl HttpsError {
    /// The error for a failed bind of `addr`: one message a person can act on.
    fn bind(addr: SocketAddr, source: io::Error) -> HttpsError {
        match source.kind() {
            io::ErrorKind::AddrInUse => HttpsError::AddrInUse { addr },
            io::ErrorKind::PermissionDenied if addr.port() < 1024 => HttpsError::Privileged { addr },
            _ => HttpsError::Bind { addr, source },
        }
    }
}

/// Binds the listen address before anything else is set up, so a port in use stops
/// `tether serve` before it writes in its data directory (a CA made for a daemon that never
/// ran). [`HttpsListener::from_bound`] takes it on.
///
/// # Errors
/// [`HttpsError::AddrInUse`], [`HttpsError::Privileged`] or [`HttpsError::Bind`].
pub async fn reserve(listen: SocketAddr) -> Result<TcpListener, HttpsError> {
    TcpListener::bind(listen).await.map_err(|e| HttpsError::bind(listen, e))
}

/// How the server is set up.
#[derive(Debug, Clone)]
pub struct HttpsConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Certificates.
    pub tls: TlsMaterial,
    /// The machine's hostname (for the iOS profile's labels).
    pub hostname: String,
    /// Allowed `Host` values.
    pub hosts: HostAllowlist,
    /// Largest request body.
    pub max_body: usize,
    /// Most connections open at once.
    pub max_connections: usize,
    /// How often streamed answers send a keep-alive line.
    pub keepalive: Duration,
    /// How long an idle MCP session is kept.
    pub mcp_session_idle: Duration,
}

impl HttpsConfig {
    /// Defaults for `listen` with `tls`; the Host allowlist is the certificate's names.
    pub fn new(listen: SocketAddr, tls: TlsMaterial, hostname: String) -> HttpsConfig {
        let hosts = HostAllowlist::new(&tls.names);
        HttpsConfig {
            listen,
            tls,
            hostname,
            hosts,
            max_body: DEFAULT_MAX_BODY,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            keepalive: KEEPALIVE,
            mcp_session_idle: mcp::SESSION_IDLE,
        }
    }
}

/// A bound HTTPS listener, not yet serving (bound before the daemon starts, so the
/// daemon knows the real port for `status` and pairing URLs).
pub struct HttpsListener {
    listener: TcpListener,
    config: HttpsConfig,
    port: u16,
}

impl std::fmt::Debug for HttpsListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpsListener").field("listener", &self.listener).finish_non_exhaustive()
    }
}

impl HttpsListener {
    /// Binds the listen address.
    pub async fn bind(config: HttpsConfig) -> Result<HttpsListener, HttpsError> {
        let listener = reserve(config.listen).await?;
        Ok(HttpsListener::from_bound(listener, config))
    }

    /// Takes on a listener [`reserve`] bound for `config.listen`.
    pub fn from_bound(listener: TcpListener, config: HttpsConfig) -> HttpsListener {
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(config.listen.port());
        HttpsListener { listener, config, port }
    }

    /// The bound address (the port, when `--listen` asked for port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The names clients should use, best first.
    pub fn preferred_hosts(&self) -> Vec<String> {
        let listen = self.listener.local_addr().unwrap_or(self.config.listen);
        self.config.hosts.preferred(listen)
    }

    /// What clients pin.
    pub fn fingerprint(&self) -> tls::Fingerprint {
        self.config.tls.fingerprint
    }

    /// Serves `daemon` until `shutdown` fires; each connection runs on its own task.
    pub async fn serve(self, daemon: Daemon, shutdown: CancellationToken) {
        let HttpsListener { listener, config, port } = self;
        let daemon_for_mcp = daemon.clone();
        let shared = Arc::new(routes::Shared {
            daemon,
            hosts: config.hosts.clone(),
            port,
            ca_pem: config.tls.ca_pem.clone(),
            mobileconfig: tls::mobileconfig(&config.tls, &config.hostname),
            fingerprint: config.tls.fingerprint.hex(),
            limiter: guard::FailureLimiter::default(),
            noisy: guard::FailureLimiter::default(),
            max_body: config.max_body,
            keepalive: config.keepalive,
            shutdown: shutdown.clone(),
            video_pending: video::Pending::default(),
            mcp: mcp::service(daemon_for_mcp, config.mcp_session_idle, &shutdown),
        });
        tracing::info!(
            listen = %listener.local_addr().map_or(config.listen, |a| a),
            fingerprint = %config.tls.fingerprint,
            "HTTPS listening; clients pin this CA fingerprint"
        );
        let acceptor = tokio_rustls::TlsAcceptor::from(config.tls.config.clone());
        let max_connections = config.max_connections.max(1);
        let table = Arc::new(ConnTable::default());
        let next_id = AtomicU64::new(0);
        loop {
            let (stream, addr) = tokio::select! {
                () = shutdown.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // EMFILE and friends: back off instead of spinning.
                        tracing::warn!(error = %e, "HTTPS accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            if table.len() >= max_connections && !table.evict() {
                tracing::warn!(peer = %addr, "refused a connection: {max_connections} are open");
                drop(stream);
                continue;
            }
            let id = next_id.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(peer = %addr, id, "accepted a connection");
            let cancel = shutdown.child_token();
            let busy = table.add(id, addr.ip(), cancel.clone());
            let conn =
                Connection { id, addr, shared: shared.clone(), acceptor: acceptor.clone(), table: table.clone(), busy };
            let table = table.clone();
            tokio::spawn(async move {
                tokio::select! {
                    () = cancel.cancelled() => {}
                    () = conn.run(stream) => {}
                }
                table.remove(id);
            });
        }
    }
}

/// One accepted connection.
struct Connection {
    id: u64,
    addr: SocketAddr,
    shared: Arc<routes::Shared>,
    acceptor: tokio_rustls::TlsAcceptor,
    table: Arc<ConnTable>,
    busy: Busy,
}

impl Connection {
    async fn run(self, stream: TcpStream) {
        let _ = stream.set_nodelay(true);
        let mut first = [0u8; 1];
        let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.peek(&mut first)).await {
            Ok(Ok(1)) => first[0] == 0x16,
            _ => return,
        };
        let activity = Arc::new(ConnState::new(self.id, self.table.clone(), self.busy.clone()));
        if tls {
            let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, self.acceptor.accept(stream)).await;
            let stream = match handshake {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(peer = %self.addr, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(peer = %self.addr, "TLS handshake timed out");
                    return;
                }
            };
            let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
            tracing::debug!(peer = %self.addr, h2, "TLS handshake done");
            self.serve(Watched::new(stream, activity.clone()), activity, true, h2).await;
        } else {
            self.serve(Watched::new(stream, activity.clone()), activity, false, false).await;
        }
    }

    async fn serve<I>(self, io: Watched<I>, activity: Arc<ConnState>, tls: bool, h2: bool)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let peer = routes::Peer { addr: self.addr, tls, conn: activity.clone() };
        let shared = self.shared.clone();
        let service = service_fn(move |req| {
            let (shared, peer) = (shared.clone(), peer.clone());
            let pending = peer.conn.pending_guard();
            async move {
                let answer = routes::handle(shared, peer, req).await;
                drop(pending);
                Ok::<_, std::convert::Infallible>(answer)
            }
        });
        let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .max_buf_size(MAX_HEAD_BYTES.max(8192));
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(64)
            .max_header_list_size(u32::try_from(MAX_HEAD_BYTES).unwrap_or(u32::MAX))
            .keep_alive_interval(Some(Duration::from_secs(20)))
            .keep_alive_timeout(Duration::from_secs(10));
        let builder = if h2 {
            builder.http2_only()
        } else if tls {
            builder
        } else {
            builder.http1_only()
        };
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
        tokio::pin!(conn);
        let mut check = tokio::time::interval(Duration::from_secs(5));
        loop {
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(peer = %self.addr, error = %e, "connection ended with an error");
                    }
                    return;
                }
                _ = check.tick() => {
                    if activity.should_close() {
                        tracing::debug!(peer = %self.addr, "idle connection closed");
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_bind_says_one_thing_and_privilege_only_below_1024() {
        let addr = |port| SocketAddr::from(([127, 0, 0, 1], port));
        let err = |kind| io::Error::from(kind);
        let in_use = HttpsError::bind(addr(8443), err(io::ErrorKind::AddrInUse));
        assert!(matches!(in_use, HttpsError::AddrInUse { .. }));
        assert!(std::error::Error::source(&in_use).is_none(), "the cause is not said twice");
        assert!(in_use.to_string().contains("127.0.0.1:8443") && in_use.to_string().contains("--listen"));
        assert!(!in_use.to_string().contains("1024"));
        assert!(matches!(
            HttpsError::bind(addr(443), err(io::ErrorKind::PermissionDenied)),
            HttpsError::Privileged { .. }
        ));
        let denied = HttpsError::bind(addr(8443), err(io::ErrorKind::PermissionDenied));
        assert!(matches!(denied, HttpsError::Bind { .. }) && !denied.to_string().contains("1024"));
        // A chain printer (anyhow's `{:#}`) says the OS's reason once.
        let chain = format!("{:#}", anyhow::Error::new(denied));
        assert_eq!(chain.matches("permission denied").count(), 1, "{chain}");
    }
}
