//! The connection that holds a task's lease for `tether task run`: the control socket, or
//! an HTTPS stream (`--url`). Either way, while it is open the task lives; when this
//! process dies, it closes and the task is abandoned.

use std::path::PathBuf;

use anyhow::Context;
use hyper::Method;
use serde_json::{json, Value};
use tether::client::https::{remote_error, HttpsClient, LineReader};
use tether::client::ControlClient;

use super::remote::client_error;

/// How `task run` opens its task.
#[derive(Debug, Clone, Default)]
pub struct Opening {
    /// Record the screen.
    pub record: bool,
    /// Wait for a busy phone instead of failing.
    pub wait: bool,
    /// Give up waiting after this long.
    pub wait_timeout: Option<std::time::Duration>,
}

impl Opening {
    fn params(&self, title: &str, scope: &Value) -> Value {
        let mut p = json!({"title": title, "scope": scope, "record": self.record});
        if self.wait {
            p["wait"] = true.into();
            if let Some(t) = self.wait_timeout {
                p["wait_timeout_ms"] = u64::try_from(t.as_millis()).unwrap_or(u64::MAX).into();
            }
        }
        p
    }
}

/// Prints where a waiting job stands (`queue` events).
fn say_queue(event: &Value) {
    if event["event"] != "queue" {
        return;
    }
    let position = event["position"].as_u64().map_or("?".to_string(), |p| p.to_string());
    let active = event["active_task"].as_i64().map_or(String::new(), |t| format!("; task {t} has the phone"));
    eprintln!("tether: waiting for the phone: {position} of {}{active}", event["waiting"]);
}

/// An open task's lease.
pub enum Lease {
    /// Over the control socket: one connection holds the lease, another follows events.
    Socket {
        /// The socket.
        path: PathBuf,
        /// The lease.
        lease: ControlClient,
        /// Follows the task's events.
        follower: ControlClient,
    },
    /// Over HTTPS: the streamed answer of `POST /api/tasks` is the lease and the events.
    Remote {
        /// The appliance (with the login token).
        client: HttpsClient,
        /// The stream.
        stream: LineReader,
        /// The CA fingerprint, for the command's environment.
        fingerprint: String,
    },
}

impl Lease {
    /// Opens a task over the socket; returns the lease, the task id and its token.
    pub async fn open_socket(
        path: PathBuf,
        title: &str,
        scope: &Value,
        how: &Opening,
    ) -> anyhow::Result<(Lease, i64, String)> {
        let mut lease = ControlClient::connect(&path).await?;
        // The lease connection does not read events while the command runs: opt out of them.
        let mut params = how.params(title, scope);
        params["events"] = false.into();
        let opened = lease.call_streaming("task_open", params, say_queue).await.map_err(client_error)?;
        let id = opened["id"].as_i64().context("task_open returned no id")?;
        let token = opened["token"].as_str().context("task_open returned no token")?.to_string();
        let follower = ControlClient::connect(&path).await?;
        Ok((Lease::Socket { path, lease, follower }, id, token))
    }

    /// Opens a task over HTTPS; returns the lease, the task id and its token.
    pub async fn open_remote(
        client: HttpsClient,
        fingerprint: String,
        title: &str,
        scope: &Value,
        how: &Opening,
    ) -> anyhow::Result<(Lease, i64, String)> {
        let response = client.send(Method::POST, "/api/tasks", Some(&how.params(title, scope))).await?;
        let status = response.status();
        let mut stream = LineReader::new(response.into_body());
        // Waiting for the phone: queue events and keep-alives come before the task.
        let first = loop {
            let line = stream.next().await?.context("the appliance closed the task stream before the task opened")?;
            if line.get("event").is_some() {
                say_queue(&line);
                continue;
            }
            break line;
        };
        if status != hyper::StatusCode::OK || first.get("error").is_some() {
            return Err(remote_error(status, &first).into());
        }
        let id = first["id"].as_i64().context("the task stream began without an id")?;
        let token = first["token"].as_str().context("the task stream began without a token")?.to_string();
        Ok((Lease::Remote { client, stream, fingerprint }, id, token))
    }

    /// The environment the command gets to reach the daemon (besides its task token).
    pub fn command_env(&self) -> Vec<(&'static str, String)> {
        match self {
            Lease::Socket { path, .. } => vec![(super::task::ENV_SOCKET, path.display().to_string())],
            Lease::Remote { client, fingerprint, .. } => {
                let url = client.target().base_url();
                vec![
                    // `tether mcp --url "$TETHER_MCP_URL"`, or an MCP client's HTTP config.
                    ("TETHER_MCP_URL", format!("{url}{}", tether::server::mcp::MCP_PATH)),
                    ("TETHER_URL", url),
                    ("TETHER_FINGERPRINT", fingerprint.clone()),
                ]
            }
        }
    }

    /// Follows task `id` until it ends; `on_event` sees each event. Returns its final state.
    pub async fn watch(&mut self, id: i64, mut on_event: impl FnMut(&Value)) -> Option<String> {
        match self {
            Lease::Socket { follower, .. } => {
                let params = json!({"task": id, "follow": true, "after_seq": 0});
                let r = follower.call_streaming("task_events", params, |e| on_event(e)).await;
                r.ok().and_then(|v| v["state"].as_str().map(String::from))
            }
            Lease::Remote { stream, .. } => {
                let mut last = None;
                while let Ok(Some(line)) = stream.next().await {
                    if line["event"] == "task" {
                        let event = json!({"task": line["task"], "seq": line["seq"], "kind": line["kind"], "data": line["data"]});
                        on_event(&event);
                        if line["kind"] == "state" {
                            last = line["data"]["state"].as_str().map(String::from);
                        }
                    }
                }
                last
            }
        }
    }

    /// Calls `method` as the task's opener.
    pub async fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        match self {
            Lease::Socket { lease, .. } => lease.call(method, params).await.map_err(client_error),
            Lease::Remote { client, .. } => Ok(client.call(method, params).await?),
        }
    }
}
