//! `tether mcp`: the tool catalog as an MCP server on stdin/stdout, for an MCP client
//! (Claude Code, Codex, an SDK) to start as a subprocess.
//!
//! On the appliance it calls the daemon over the control socket (as the agent of a task
//! when `TETHER_TASK_TOKEN` is set, so `tether task run -- <agent>` just works). With
//! `--url` it is a bridge to the appliance's `/mcp` over HTTPS, with the token and
//! fingerprint `tether login` stored (or `TETHER_TOKEN`/`TETHER_TASK_TOKEN` and
//! `TETHER_FINGERPRINT`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use rmcp::ServiceExt;
use tether::client::backends::SocketBackend;
use tether::client::mcp_bridge::Bridge;
use tether::server::mcp::McpServer;

use super::remote::{Endpoint, RemoteArgs};

/// Runs `tether mcp` until stdin closes.
pub fn run_mcp(socket: Option<PathBuf>, remote: RemoteArgs) -> anyhow::Result<ExitCode> {
    // stdout is the protocol: logs go to stderr.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
    // The URL may come as the MCP endpoint itself ($TETHER_MCP_URL).
    let remote = RemoteArgs {
        url: remote.url.map(|u| u.trim_end_matches(tether::server::mcp::MCP_PATH).to_string()),
        fingerprint: remote.fingerprint,
    };
    let endpoint = Endpoint::resolve(socket, &remote)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(async move {
        match endpoint {
            Endpoint::Socket(path) => {
                let task_token = std::env::var(super::task::ENV_TOKEN).ok().filter(|t| !t.is_empty());
                let backend = SocketBackend::connect(&path, task_token).await?;
                let server = McpServer::single(std::sync::Arc::new(backend));
                let running = server.serve(rmcp::transport::stdio()).await.context("MCP initialize over stdio")?;
                let _ = running.waiting().await;
            }
            Endpoint::Remote(client) => {
                Bridge::new(client, Box::new(tokio::io::stdout())).run(tokio::io::stdin()).await?;
            }
        }
        Ok::<_, anyhow::Error>(())
    })?;
    // A pending read of stdin cannot be cancelled: leave without waiting for it.
    runtime.shutdown_background();
    Ok(ExitCode::SUCCESS)
}
