//! `tether task …`: run a command as a task, and list, follow and control tasks.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use tether::client::ControlClient;

use super::agent_setup;
use super::lease::Lease;
use super::remote::{client_error, Endpoint};
use tether::config::DEFAULT_AGENT_USER;

/// Environment variables a task's command gets.
pub const ENV_TOKEN: &str = "TETHER_TASK_TOKEN";
/// The task id.
pub const ENV_ID: &str = "TETHER_TASK_ID";
/// The control socket.
pub const ENV_SOCKET: &str = "TETHER_SOCKET";

/// What `tether task run` needs.
#[derive(Debug)]
pub struct RunOptions {
    /// Control socket.
    pub socket: Option<PathBuf>,
    /// Or an appliance's URL (the lease is then an HTTPS stream).
    pub remote: super::remote::RemoteArgs,
    /// Task title (default: the command line).
    pub title: Option<String>,
    /// Apps the task may open without asking.
    pub apps: Vec<String>,
    /// Step limit.
    pub max_steps: Option<u32>,
    /// Time limit in seconds.
    pub max_duration_s: Option<u64>,
    /// The agent user (when run as root).
    pub agent_user: Option<String>,
    /// The daemon's config file (default: the one `serve` reads by default).
    pub config: Option<PathBuf>,
    /// Variables passed to CMD when it runs as the agent user (`NAME` or `NAME=VALUE`).
    pub env: Vec<String>,
    /// Record the screen while the task runs.
    pub record: bool,
    /// Wait for a busy phone (in order of arrival) instead of failing.
    pub wait: bool,
    /// Give up waiting after this many seconds.
    pub wait_timeout_s: Option<u64>,
    /// Write the task's report here when it ends.
    pub report: Option<PathBuf>,
    /// The command and its arguments.
    pub command: Vec<String>,
}

/// Adds the task token from the environment, so that a command run inside a task acts
/// (and is refused) as that task's agent.
pub fn with_env_token(mut params: Value) -> Value {
    if let (Ok(token), Some(map)) = (std::env::var(ENV_TOKEN), params.as_object_mut()) {
        map.insert("task_token".into(), json!(token));
    }
    params
}

/// `tether task run [--title T] -- CMD...`.
pub fn run_task(opts: RunOptions) -> anyhow::Result<ExitCode> {
    let Some((program, args)) = opts.command.split_first() else {
        bail!("nothing to run: give the command after `--`, e.g. `tether task run -- ./agent.sh`");
    };
    // The daemon's own configuration (`--config`, else its default file): the socket and
    // the agent user must be the ones it uses.
    let config = super::daemon_config(opts.config.as_deref())?;
    let socket = opts.socket.clone().unwrap_or_else(|| config.socket.clone());
    let agent = if nix::unistd::geteuid().is_root() {
        let setup = agent_setup::Setup {
            agent_name: opts
                .agent_user
                .clone()
                .or_else(|| config.agent_user.clone())
                .unwrap_or_else(|| DEFAULT_AGENT_USER.to_string()),
            socket: socket.clone(),
            socket_group: config.socket_group.clone(),
            config_file: super::config_file_for_advice(opts.config.as_deref()),
        };
        Some(check_agent(&setup, program, opts.remote.url.is_none())?)
    } else {
        eprintln!(
            "tether: not root, so the command runs under your own uid; on the appliance run as root to \
             isolate it under the agent user"
        );
        None
    };
    // Checked before the task opens: a typo must not leave an abandoned task behind.
    let mut passed = Vec::new();
    for spec in &opts.env {
        match spec.split_once('=') {
            Some((name, value)) => passed.push((name.to_string(), std::ffi::OsString::from(value))),
            None => match std::env::var_os(spec) {
                Some(value) => passed.push((spec.clone(), value)),
                None => bail!("--env {spec}: not set in this environment (use --env {spec}=VALUE)"),
            },
        }
    }
    if agent.is_none() && !passed.is_empty() {
        eprintln!("tether: --env only matters under the agent user; the command inherits your environment");
    }
    let title = opts.title.clone().unwrap_or_else(|| opts.command.join(" "));
    let mut scope = serde_json::Map::new();
    if !opts.apps.is_empty() {
        scope.insert("apps".into(), json!(opts.apps));
    }
    if let Some(n) = opts.max_steps {
        scope.insert("max_steps".into(), json!(n));
    }
    if let Some(s) = opts.max_duration_s {
        scope.insert("max_duration_s".into(), json!(s));
    }
    let endpoint = super::remote::Endpoint::resolve(Some(socket), &opts.remote)?;
    let opening = super::lease::Opening {
        record: opts.record,
        wait: opts.wait,
        wait_timeout: opts.wait_timeout_s.map(Duration::from_secs),
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        let scope = Value::Object(scope);
        let (mut lease, id, token) = match endpoint {
            super::remote::Endpoint::Socket(path) => Lease::open_socket(path, &title, &scope, &opening).await?,
            super::remote::Endpoint::Remote(client) => {
                // The command gets its task token only: never the login token.
                let fingerprint = opts.remote.fingerprint_for(client.target())?;
                Lease::open_remote(client, fingerprint, &title, &scope, &opening).await?
            }
        };
        eprintln!("tether: task {id} opened: {title}");
        let reach = lease.command_env();

        let mut cmd = std::process::Command::new(program);
        cmd.args(args).env(ENV_TOKEN, &token).env(ENV_ID, id.to_string()).env_remove("TETHER_TOKEN");
        cmd.envs(reach.iter().map(|(k, v)| (k, v)));
        if let Some(user) = &agent {
            // Another uid is a boundary: root's environment (credentials, tokens) stays
            // behind; only the basics and what --env names go along.
            cmd.env_clear();
            for keep in ["PATH", "LANG", "LC_ALL", "TERM", "TZ"] {
                if let Ok(v) = std::env::var(keep) {
                    cmd.env(keep, v);
                }
            }
            cmd.envs(passed.iter().map(|(k, v)| (k, v)));
            cmd.env(ENV_TOKEN, &token).env(ENV_ID, id.to_string());
            cmd.envs(reach.iter().map(|(k, v)| (k, v)));
            cmd.env("HOME", &user.user.dir).env("USER", &user.user.name);
        }
        // The agent's uid, gid and all its groups (a login's, `getgrouplist`), taken in the
        // child: std's `uid()` would drop the supplementary groups, and with them the
        // socket's group that lets the agent connect.
        let ids = agent.as_ref().map(|a| (a.user.uid.as_raw(), a.user.gid.as_raw(), a.groups.clone()));
        // SAFETY: the closure runs in the forked child before exec and makes only raw system
        // calls (setsid(2), setgroups(2), setresgid(2), setresuid(2), close_range(2)), all
        // async-signal-safe; it allocates nothing (the groups were collected before the fork)
        // and touches no memory shared with the parent.
        unsafe {
            cmd.pre_exec(move || {
                nix::unistd::setsid().map_err(std::io::Error::from)?;
                if let Some((uid, gid, groups)) = &ids {
                    // A forked child before exec (become_user's safety rule): its one thread
                    // is the process.
                    agent_setup::become_user(*uid, *gid, groups).map_err(|(_, e)| e)?;
                }
                // Whatever this process inherited without close-on-exec (fds of the shell or
                // service that started it) must not reach the agent: mark every fd above
                // stderr close-on-exec. std's own error pipe already is, so spawn errors still
                // come back. Kernels before 5.11 lack the flag; the agent then inherits them.
                libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC);
                Ok(())
            });
        }
        let mut child = match tokio::process::Command::from(cmd).kill_on_drop(false).spawn() {
            Ok(c) => c,
            Err(e) => {
                let summary = format!("could not start {program:?}: {e}");
                let _ = lease.call("task_finish", json!({"task": id, "ok": false, "summary": summary})).await;
                bail!(summary);
            }
        };
        let pgid = child.id().and_then(|p| i32::try_from(p).ok()).map(Pid::from_raw);
        let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
        let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        enum End {
            Exited(std::process::ExitStatus),
            /// The command ended its own task (`tether task finish`, or a stop, with the
            /// task's token) and may still be cleaning up.
            EndedByCommand(String),
            EndedElsewhere(String),
            Signal(&'static str),
        }
        // Whether the newest state change in the journal was made with the task's token,
        // i.e. by the command itself.
        let mut last_change_by_command = false;
        let end = tokio::select! {
            status = child.wait() => End::Exited(status?),
            r = lease.watch(id, |e| {
                if e["kind"] == "state" {
                    last_change_by_command = e["data"]["detail"]["by"]["with_task_token"] == json!(true);
                }
            }) => {
                let state = r.unwrap_or_else(|| "ended".into());
                if last_change_by_command { End::EndedByCommand(state) } else { End::EndedElsewhere(state) }
            }
            _ = sigint.recv() => End::Signal("interrupt"),
            _ = sigterm.recv() => End::Signal("terminate"),
        };
        let stop_children = |pgid: Option<Pid>| async move {
            let Some(pgid) = pgid else { return };
            let _ = killpg(pgid, Signal::SIGTERM);
            tokio::time::sleep(Duration::from_secs(2)).await;
            // Whatever ignored SIGTERM in the group.
            let _ = killpg(pgid, Signal::SIGKILL);
        };
        let exit_code = |status: std::process::ExitStatus| {
            let code = status.code().unwrap_or_else(|| 128 + status_signal(&status));
            ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(1))
        };
        let code: anyhow::Result<ExitCode> = async {
            match end {
                End::EndedByCommand(state) => {
                    // The command said it is done; let it exit on its own (flush, clean up),
                    // then stop whatever is left of it as for any other end.
                    eprintln!(
                        "tether: task {id} is {state} (ended by the command); giving it {} s to exit",
                        FINISHED_GRACE.as_secs()
                    );
                    let status = tokio::select! {
                        status = child.wait() => Some(status?),
                        () = tokio::time::sleep(FINISHED_GRACE) => {
                            eprintln!("tether: the command is still running; stopping its process group");
                            None
                        }
                        _ = sigint.recv() => return Ok(stop_after_end(pgid, &mut child, stop_children, 130).await),
                        _ = sigterm.recv() => return Ok(stop_after_end(pgid, &mut child, stop_children, 143).await),
                    };
                    let status = match status {
                        Some(status) => {
                            // Anything it left running in its group goes too.
                            if let Some(p) = pgid {
                                let _ = killpg(p, Signal::SIGKILL);
                            }
                            status
                        }
                        None => {
                            stop_children(pgid).await;
                            child.wait().await?
                        }
                    };
                    Ok(exit_code(status))
                }
                End::Exited(status) => {
                    // The command is done; anything it left running in its group goes too.
                    if let Some(p) = pgid {
                        let _ = killpg(p, Signal::SIGKILL);
                    }
                    let code = status.code().unwrap_or_else(|| 128 + status_signal(&status));
                    let finish = json!({"task": id, "ok": code == 0, "exit_code": code,
                        "summary": format!("{program} exited with {code}")});
                    match lease.call("task_finish", finish).await {
                        Ok(r) => {
                            eprintln!("tether: task {id} {} (exit code {code})", r["state"].as_str().unwrap_or("?"))
                        }
                        Err(e) => eprintln!("tether: task {id}: {e}"),
                    }
                    Ok(exit_code(status))
                }
                End::EndedElsewhere(state) => {
                    eprintln!("tether: task {id} is {state}; stopping the command's process group");
                    stop_children(pgid).await;
                    let _ = child.wait().await;
                    Ok(ExitCode::from(1))
                }
                End::Signal(which) => {
                    eprintln!("tether: {which}: stopping task {id}");
                    let _ = lease.call("task_control", json!({"task": id, "action": "stop", "reason": which})).await;
                    stop_children(pgid).await;
                    let _ = child.wait().await;
                    Ok(ExitCode::from(if which == "interrupt" { 130 } else { 143 }))
                }
            }
        }
        .await;
        if let Some(dir) = &opts.report {
            // The command's exit code stands whatever happens here.
            match super::report::save_report(&mut lease, id, dir).await {
                Ok(saved) => super::report::describe(id, dir, &saved),
                Err(e) => eprintln!("tether: the report of task {id} could not be written to {}: {e:#}", dir.display()),
            }
        }
        code
    })
}

/// The agent user, checked as that user before any task opens: it exists, can enter the
/// working directory, can run `program`, and (on the socket) reaches the daemon and gets
/// the agent role there. Else one error naming the fix of each problem.
fn check_agent(setup: &agent_setup::Setup, program: &str, on_socket: bool) -> anyhow::Result<agent_setup::Agent> {
    let no_task = "no task was opened";
    let agent = agent_setup::lookup(setup).map_err(|f| anyhow::anyhow!("{}\n{no_task}", f.explain()))?;
    let cwd = std::env::current_dir().context("the working directory")?;
    let mut findings =
        vec![agent_setup::check_cwd(&agent, &cwd), agent_setup::check_program(&agent, program, &cwd, "program")];
    if on_socket {
        let mut socket = agent_setup::check_socket(setup, &agent);
        // Running the command unproven could hand it an operator's rights on the socket:
        // a check that could not be made stops the run like a failed one.
        if socket.state == agent_setup::State::Unchecked {
            socket.state = agent_setup::State::Fail;
        }
        findings.push(socket);
    }
    let failing: Vec<String> = findings
        .iter()
        .filter(|f| f.state == agent_setup::State::Fail)
        .map(|f| f.explain().replace('\n', "\n  "))
        .collect();
    if !failing.is_empty() {
        bail!(
            "the command cannot run as the agent user {:?}, so {no_task}:\n- {}",
            agent.user.name,
            failing.join("\n- ")
        );
    }
    let binary = agent_setup::check_binary(&agent);
    if binary.state == agent_setup::State::Fail {
        // Not fatal: the command may not call tether at all.
        eprintln!("tether: note: commands calling tether will fail: {}", binary.explain());
    }
    Ok(agent)
}

/// How long a command that ended its own task may take to exit before it is stopped.
const FINISHED_GRACE: Duration = Duration::from_secs(5);

/// A signal to the runner while a command that ended its own task winds down: stop it now.
async fn stop_after_end<F, Fut>(pgid: Option<Pid>, child: &mut tokio::process::Child, stop: F, code: u8) -> ExitCode
where
    F: FnOnce(Option<Pid>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    stop(pgid).await;
    let _ = child.wait().await;
    ExitCode::from(code)
}

fn status_signal(status: &std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.signal().unwrap_or(0)
}

/// `tether task list`.
pub fn run_list(endpoint: Endpoint, limit: u32, as_json: bool) -> anyhow::Result<ExitCode> {
    let r = endpoint.call_once("task_list", json!({"limit": limit}))?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(ExitCode::SUCCESS);
    }
    let tasks = r["tasks"].as_array().cloned().unwrap_or_default();
    if tasks.is_empty() {
        println!("no tasks yet");
    }
    for t in tasks {
        println!(
            "{:>5}  {:<11}  {:<16}  {}",
            t["id"],
            t["state"].as_str().unwrap_or("?"),
            t["owner"].as_str().unwrap_or("?"),
            t["title"].as_str().unwrap_or("")
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn print_event(task: &Value, seq: &Value, kind: &str, data: &Value, as_json: bool) {
    if as_json {
        println!("{}", json!({"task": task, "seq": seq, "kind": kind, "data": data}));
        return;
    }
    let what = match kind {
        "state" => {
            let mut s = data["state"].as_str().unwrap_or("?").to_string();
            if let Some(q) = data["detail"]["question"]["text"].as_str() {
                s += &format!(" — asks: {q}");
            }
            if let Some(r) = data["detail"]["reason"].as_str() {
                s += &format!(" ({r})");
            }
            s
        }
        "device" => {
            let d = &data["device"];
            let size = match (&d["source_size"][0], &d["source_size"][1]) {
                (Value::Number(w), Value::Number(h)) => format!("{w}x{h}"),
                _ => "no picture yet".into(),
            };
            format!(
                "bound to hid={} video={} {size}",
                d["hid"].as_str().unwrap_or("?"),
                d["video"].as_str().unwrap_or("?")
            )
        }
        "step" => format!(
            "{} {} → {}",
            data["tool"].as_str().unwrap_or("?"),
            data["args"]["action"]["type"].as_str().unwrap_or(""),
            if data["result"]["ok"] == json!(true) {
                "ok".to_string()
            } else {
                data["result"]["error"]["code"].to_string()
            }
        ),
        "note" => data["text"].as_str().unwrap_or("").to_string(),
        "refused" => format!("{}: {}", data["code"].as_str().unwrap_or("?"), data["what"].as_str().unwrap_or("?")),
        _ => data.to_string(),
    };
    match who(data) {
        Some(who) => println!("{seq:>5}  {kind:<8} {who}: {what}"),
        None => println!("{seq:>5}  {kind:<8} {what}"),
    }
}

/// Who made a journal event, from its `by` (steps, notes, refusals) or its state change's
/// `detail.by`: `agent` for the task's own token, else `human (token NAME)` or
/// `human (uid N)`, so a person's tap during a takeover never reads like the agent's step.
/// None for what the daemon did on its own (a lease lost, a device bound).
fn who(data: &Value) -> Option<String> {
    let by = [&data["by"], &data["detail"]["by"]].into_iter().find(|b| b.is_object())?;
    if by["with_task_token"] == json!(true) {
        return Some("agent".into());
    }
    Some(match principal(&by["principal"]) {
        Some(p) => format!("human ({p})"),
        None => "human".into(),
    })
}

/// A principal as the daemon serializes it, for people: `uid 1000`, `token laptop`.
pub(super) fn principal(p: &Value) -> Option<String> {
    match p["kind"].as_str()? {
        "uid" => Some(format!("uid {}", p["uid"])),
        "token" => Some(format!("token {}", p["name"].as_str()?)),
        "session" => Some(format!("session {}", p["session"])),
        _ => None,
    }
}

/// `tether task events ID [--follow] [--after SEQ]`.
pub fn run_events(
    endpoint: Endpoint,
    task: i64,
    follow: bool,
    after: Option<i64>,
    as_json: bool,
) -> anyhow::Result<ExitCode> {
    let print = |e: &Value| print_event(&e["task"], &e["seq"], e["kind"].as_str().unwrap_or("?"), &e["data"], as_json);
    super::client_runtime()?.block_on(async {
        let r = match (&endpoint, follow) {
            (Endpoint::Socket(path), _) => {
                let mut c = ControlClient::connect(path).await?;
                let params = with_env_token(json!({"task": task, "follow": follow, "after_seq": after}));
                c.call_streaming("task_events", params, |e| print(e)).await.map_err(client_error)?
            }
            (Endpoint::Remote(client), true) => {
                let path = format!("/api/tasks/{task}/events?follow=1&after={}", after.unwrap_or(0));
                let response = client.send(hyper::Method::GET, &path, None).await?;
                let status = response.status();
                let mut lines = tether::client::https::LineReader::new(response.into_body());
                if status != hyper::StatusCode::OK {
                    let body = lines.next().await?.unwrap_or_default();
                    return Err(tether::client::https::remote_error(status, &body).into());
                }
                let mut last = Value::Null;
                while let Some(line) = lines.next().await? {
                    if line["event"] == "task" {
                        print(&line);
                    } else {
                        last = line;
                    }
                }
                last
            }
            (Endpoint::Remote(_), false) => {
                endpoint.call("task_events", json!({"task": task, "after_seq": after})).await?
            }
        };
        if !follow {
            for e in r["events"].as_array().cloned().unwrap_or_default() {
                print_event(&json!(task), &e["seq"], e["kind"].as_str().unwrap_or("?"), &e["data"], as_json);
            }
        } else if !as_json {
            println!("task {task} is {}", r["state"].as_str().unwrap_or("?"));
        }
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `tether task pause|resume|takeover|handback|stop|approve|reject ID`.
pub fn run_control(
    endpoint: Endpoint,
    task: i64,
    action: &str,
    reason: Option<String>,
    end_task: bool,
) -> anyhow::Result<ExitCode> {
    let r = super::client_runtime()?.block_on(async {
        let c = &endpoint;
        let mut params = json!({"task": task, "action": action, "reason": reason, "end_task": end_task});
        if matches!(action, "approve" | "reject") {
            // Name the question being answered, so an answer never lands on a question
            // asked after the one this person read.
            let status = c.call("status", json!({})).await?;
            let q = &status["task"]["question"];
            if status["task"]["id"] == json!(task) && !q.is_null() {
                eprintln!("tether: {action} question {}: {}", q["id"], q["text"].as_str().unwrap_or(""));
                params["question"] = q["id"].clone();
            }
        }
        c.call("task_control", params).await
    })?;
    println!("task {task}: {}", r["state"].as_str().unwrap_or("?"));
    Ok(ExitCode::SUCCESS)
}

/// `tether task finish ID [--failed] [--summary S]`.
pub fn run_finish(
    endpoint: Endpoint,
    task: Option<i64>,
    failed: bool,
    summary: Option<String>,
) -> anyhow::Result<ExitCode> {
    let task = task.or_else(|| std::env::var(ENV_ID).ok().and_then(|v| v.parse().ok()));
    let r = endpoint.call_once("task_finish", json!({"task": task, "ok": !failed, "summary": summary}))?;
    println!("task {}: {}", r["id"], r["state"].as_str().unwrap_or("?"));
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_journal_says_who_acted() {
        let agent = json!({"tool": "tap", "by": {"role": "operate", "with_task_token": true,
            "principal": {"kind": "token", "name": "ci"}}});
        let human = json!({"tool": "tap", "by": {"role": "admin", "with_task_token": false,
            "principal": {"kind": "token", "name": "admin"}}});
        let takeover = json!({"state": "taken_over", "detail": {"by": {"role": "admin", "with_task_token": false,
            "principal": {"kind": "uid", "uid": 1000}}}});
        assert_eq!(who(&agent).as_deref(), Some("agent"));
        assert_eq!(who(&human).as_deref(), Some("human (token admin)"));
        assert_eq!(who(&takeover).as_deref(), Some("human (uid 1000)"));
        assert_eq!(who(&json!({"state": "abandoned", "detail": {"reason": "lease lost"}})), None, "the daemon itself");
    }
}
