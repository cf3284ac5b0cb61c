//! What every request of one HTTPS server shares (the daemon handle, the host and origin
//! facts, the limiters, the MCP service) and the connection a request came on.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::conn::ConnState;
use super::guard::{FailureLimiter, HostAllowlist};
use super::mcp::McpService;
use super::video::Pending;
use crate::daemon::Daemon;

/// What every request of one server shares.
#[derive(Debug)]
pub struct Shared {
    /// The daemon.
    pub daemon: Daemon,
    /// Allowed `Host` values.
    pub hosts: HostAllowlist,
    /// The port clients reach (for redirects, cookie names, origins).
    pub port: u16,
    /// The CA certificate, PEM.
    pub ca_pem: String,
    /// The iOS profile holding the CA.
    pub mobileconfig: String,
    /// The CA fingerprint, lowercase hex.
    pub fingerprint: String,
    /// Wrong credentials, all clients together.
    pub limiter: FailureLimiter,
    /// Other refusals worth logging (foreign Host, cross-site cookies), at most 20 a minute.
    pub noisy: FailureLimiter,
    /// Largest request body.
    pub max_body: usize,
    /// How often a streamed answer says it is alive.
    pub keepalive: Duration,
    /// The server's shutdown (WebSockets close with 1001).
    pub shutdown: CancellationToken,
    /// Video sockets waiting for their ticket.
    pub video_pending: Pending,
    /// `/mcp`.
    pub mcp: McpService,
}

/// The connection a request came on.
#[derive(Debug, Clone)]
pub struct Peer {
    /// Its address.
    pub addr: SocketAddr,
    /// Whether it speaks TLS.
    pub tls: bool,
    /// What the connection is doing (streams, authentication).
    pub conn: Arc<ConnState>,
}
