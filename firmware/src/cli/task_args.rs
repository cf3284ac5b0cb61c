//! `tether task …`'s arguments (clap) and the dispatch to [`super::task`].

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::remote::{Endpoint, RemoteArgs};

/// `tether task` subcommands.
#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Open a task and run CMD as its agent; CMD's exit code becomes the task's result.
    ///
    /// CMD runs in its own session and process group with TETHER_TASK_TOKEN, TETHER_TASK_ID
    /// and TETHER_SOCKET set; as root it runs under the agent user with a clean environment
    /// (pass what it needs with --env, e.g. an API key). Ctrl-C or SIGTERM stop the
    /// task; a stop from elsewhere ends CMD's whole process group. This command holds the
    /// task's lease: if it dies, the task is abandoned.
    Run {
        /// Control socket path.
        #[arg(long, value_name = "PATH", env = "TETHER_SOCKET")]
        socket: Option<PathBuf>,
        #[command(flatten)]
        remote: RemoteArgs,
        /// Title shown to people (default: the command line).
        #[arg(long)]
        title: Option<String>,
        /// An app the task may open without asking (repeatable); others ask a human first.
        #[arg(long = "app", value_name = "NAME")]
        apps: Vec<String>,
        /// Stop the task after this many input steps.
        #[arg(long, value_name = "N")]
        max_steps: Option<u32>,
        /// Stop the task after this many seconds.
        #[arg(long, value_name = "SECONDS")]
        max_duration: Option<u64>,
        /// The user CMD runs as when this runs as root (default: the config's `agent_user`,
        /// else tether-agent).
        #[arg(long, value_name = "NAME|UID")]
        agent_user: Option<String>,
        /// The daemon's config file, for its socket, agent user and socket group (default:
        /// the one `serve` reads by default).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// A variable for CMD when it runs as the agent user, whose environment otherwise
        /// holds only PATH, LANG, LC_ALL, TERM, TZ, HOME, USER and the TETHER_* ones
        /// (repeatable; `NAME` copies it from here).
        #[arg(long = "env", value_name = "NAME[=VALUE]")]
        env: Vec<String>,
        /// Record the screen while the task runs (an MP4 kept with the task's journal).
        #[arg(long)]
        record: bool,
        /// When another task has the phone, wait for it in order of arrival (printing the
        /// position) instead of failing with TASK_ACTIVE. Killing this command leaves the
        /// queue; a human's takeover still wins.
        #[arg(long)]
        wait: bool,
        /// With --wait: give up after this many seconds (exit code 1, nothing opened).
        #[arg(long, value_name = "SECONDS", requires = "wait", value_parser = clap::value_parser!(u64).range(1..=86_400))]
        timeout: Option<u64>,
        /// When the task ends, write its report into DIR: report.html, junit.xml,
        /// final.png and (with --record) recording.mp4. CMD's exit code is kept even
        /// if the report cannot be fetched.
        #[arg(long, value_name = "DIR")]
        report: Option<PathBuf>,
        /// The command and its arguments.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Write a task's report into a directory: report.html (opens offline), junit.xml
    /// for CI dashboards, final.png and recording.mp4 when the task was recorded.
    ///
    /// Example: `tether task report 12 -o out/`, then open out/report.html.
    Report {
        /// The task.
        id: i64,
        /// The directory (created if missing; files in it are replaced).
        #[arg(short, long, value_name = "DIR")]
        out: PathBuf,
        /// Control socket path.
        #[arg(long, value_name = "PATH", env = "TETHER_SOCKET")]
        socket: Option<PathBuf>,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Recent tasks, newest first.
    List {
        /// Control socket path.
        #[arg(long, value_name = "PATH", env = "TETHER_SOCKET")]
        socket: Option<PathBuf>,
        #[command(flatten)]
        remote: RemoteArgs,
        /// How many.
        #[arg(long, default_value_t = 20)]
        limit: u32,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// A task's journal: transitions, steps, notes, refusals.
    Events {
        /// The task.
        id: i64,
        /// Keep printing new events until the task ends.
        #[arg(long)]
        follow: bool,
        /// Only events after this sequence number (resume where you left off).
        #[arg(long, value_name = "SEQ")]
        after: Option<i64>,
        /// Control socket path.
        #[arg(long, value_name = "PATH", env = "TETHER_SOCKET")]
        socket: Option<PathBuf>,
        #[command(flatten)]
        remote: RemoteArgs,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Pause a running task (its next step waits).
    Pause(ControlArgs),
    /// Resume a paused task.
    Resume(ControlArgs),
    /// Take over: you drive, the task waits.
    Takeover(ControlArgs),
    /// Hand back: the task continues after a fresh screenshot.
    Handback(ControlArgs),
    /// Stop a task (its command's process group is ended).
    Stop(ControlArgs),
    /// Answer the task's pending question yes.
    Approve(ControlArgs),
    /// Answer the task's pending question no (`--end` ends the task as rejected).
    Reject {
        #[command(flatten)]
        args: ControlArgs,
        /// End the task instead of telling its agent no.
        #[arg(long)]
        end: bool,
    },
    /// End a task as completed (or failed with --failed). Inside a task: your own.
    Finish {
        /// The task (default: $TETHER_TASK_ID).
        id: Option<i64>,
        /// It failed.
        #[arg(long)]
        failed: bool,
        /// What happened.
        #[arg(long)]
        summary: Option<String>,
        /// Control socket path.
        #[arg(long, value_name = "PATH", env = "TETHER_SOCKET")]
        socket: Option<PathBuf>,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

/// Arguments shared by the control subcommands.
#[derive(Debug, Args)]
pub struct ControlArgs {
    /// The task.
    id: i64,
    /// Why (recorded in the task's journal).
    #[arg(long)]
    reason: Option<String>,
    /// Control socket path.
    #[arg(long, value_name = "PATH", env = "TETHER_SOCKET")]
    socket: Option<PathBuf>,
    #[command(flatten)]
    remote: RemoteArgs,
}

/// Runs one `tether task` subcommand.
pub fn run_task_command(cmd: TaskCommand) -> anyhow::Result<ExitCode> {
    use super::task;
    let control = |a: ControlArgs, action: &str, end: bool| {
        task::run_control(Endpoint::resolve(a.socket, &a.remote)?, a.id, action, a.reason, end)
    };
    match cmd {
        TaskCommand::Run {
            socket,
            remote,
            title,
            apps,
            max_steps,
            max_duration,
            agent_user,
            config,
            env,
            record,
            wait,
            timeout,
            report,
            command,
        } => task::run_task(task::RunOptions {
            record,
            wait,
            wait_timeout_s: timeout,
            report,
            socket,
            remote,
            title,
            apps,
            max_steps,
            max_duration_s: max_duration,
            agent_user,
            config,
            env,
            command,
        }),
        TaskCommand::Report { id, out, socket, remote } => {
            super::report::run_report(Endpoint::resolve(socket, &remote)?, id, &out)
        }
        TaskCommand::List { socket, remote, limit, json } => {
            task::run_list(Endpoint::resolve(socket, &remote)?, limit, json)
        }
        TaskCommand::Events { id, follow, after, socket, remote, json } => {
            task::run_events(Endpoint::resolve(socket, &remote)?, id, follow, after, json)
        }
        TaskCommand::Pause(a) => control(a, "pause", false),
        TaskCommand::Resume(a) => control(a, "resume", false),
        TaskCommand::Takeover(a) => control(a, "takeover", false),
        TaskCommand::Handback(a) => control(a, "handback", false),
        TaskCommand::Stop(a) => control(a, "stop", false),
        TaskCommand::Approve(a) => control(a, "approve", false),
        TaskCommand::Reject { args, end } => control(args, "reject", end),
        TaskCommand::Finish { id, failed, summary, socket, remote } => {
            task::run_finish(Endpoint::resolve(socket, &remote)?, id, failed, summary)
        }
    }
}
