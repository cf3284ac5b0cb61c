//! Whether the agent user can run a task's command on this machine, checked as that user
//! (`task run` as root, before a task opens, and `doctor`); every problem names the command
//! that fixes it and says whether the daemon must be restarted afterwards.
//!
//! The checks run on a thread of their own that takes the agent's uid, gid and groups with
//! raw system calls, which on Linux change the calling thread's credentials only: what the
//! kernel allows that thread (directory search, the socket's mode and ACLs, SO_PEERCRED at
//! the daemon) is exactly what the agent's command will get, with nothing re-implemented.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::unistd::{access, AccessFlags, Gid, Group, Uid, User};
use serde::Serialize;
use serde_json::{json, Value};
use tether::config::DEFAULT_AGENT_USER;

/// What a check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Works.
    Ok,
    /// Stops the agent; `fix` says what to do.
    Fail,
    /// Could not be checked (no daemon answering, not root).
    Unchecked,
}

/// One check of the agent setup.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// `user`, `socket`, `cwd`, `program` or `binary`.
    pub check: &'static str,
    /// The outcome.
    pub state: State,
    /// What was found, for a person.
    pub detail: String,
    /// The command(s) that fix it, when it fails.
    pub fix: Option<String>,
    /// The daemon must be restarted after the fix (it reads this when it starts).
    pub restart: bool,
}

impl Finding {
    fn ok(check: &'static str, detail: String) -> Finding {
        Finding { check, state: State::Ok, detail, fix: None, restart: false }
    }
    fn fail(check: &'static str, detail: String, fix: String, restart: bool) -> Finding {
        Finding { check, state: State::Fail, detail, fix: Some(fix), restart }
    }
    fn unchecked(check: &'static str, detail: String) -> Finding {
        Finding { check, state: State::Unchecked, detail, fix: None, restart: false }
    }

    /// The finding for a person: what is wrong, the fix, and whether to restart.
    pub fn explain(&self) -> String {
        let mut s = self.detail.clone();
        if let Some(fix) = &self.fix {
            s += &format!("\n  fix: {fix}");
        }
        if self.restart {
            s += "\n  then restart the daemon (`tether serve`): it reads this only when it starts";
        }
        s
    }
}

/// The daemon's side of the setup, as `task run` and `doctor` read its configuration.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The agent user's name (or uid).
    pub agent_name: String,
    /// The control socket.
    pub socket: PathBuf,
    /// The group the daemon gives the socket.
    pub socket_group: String,
    /// The config file to name in fixes: the one given, else the default one.
    pub config_file: Option<PathBuf>,
}

/// The agent user, resolved: who the command runs as, with the groups a login gives it.
#[derive(Debug, Clone)]
pub struct Agent {
    /// The user.
    pub user: User,
    /// Its groups, the primary one included (`getgrouplist`).
    pub groups: Vec<u32>,
}

/// The agent user named by `setup`, or the finding that says how to create it.
pub fn lookup(setup: &Setup) -> Result<Agent, Finding> {
    let name = &setup.agent_name;
    let user = match name.parse::<u32>() {
        Ok(uid) => User::from_uid(Uid::from_raw(uid)).ok().flatten(),
        Err(_) => User::from_name(name).ok().flatten(),
    };
    let Some(user) = user else {
        let detail = format!("agent user {name:?} does not exist");
        if name.parse::<u32>().is_ok() {
            let fix = format!(
                "name a user instead of uid {name} (agent_user in the config, or --agent-user), or create one: {}",
                useradd(setup, DEFAULT_AGENT_USER)
            );
            return Err(Finding::fail("user", detail, fix, false));
        }
        return Err(Finding::fail("user", detail, useradd(setup, name), socket_needs_restart(setup)));
    };
    if user.uid.is_root() {
        let fix = format!("name another user: {}", useradd(setup, DEFAULT_AGENT_USER));
        return Err(Finding::fail("user", format!("agent user {name:?} is root"), fix, false));
    }
    let groups = std::ffi::CString::new(user.name.clone())
        .ok()
        .and_then(|n| nix::unistd::getgrouplist(&n, user.gid).ok())
        .map(|gs| gs.into_iter().map(Gid::as_raw).collect())
        .unwrap_or_else(|| vec![user.gid.as_raw()]);
    Ok(Agent { user, groups })
}

/// The finding for a user that exists.
pub fn user_found(agent: &Agent) -> Finding {
    let groups: Vec<String> = agent.groups.iter().map(|&g| group_name(g)).collect();
    Finding::ok("user", format!("{} (uid {}, groups {})", agent.user.name, agent.user.uid, groups.join(",")))
}

/// Creates the user in the socket's group (and the group when it is missing).
fn useradd(setup: &Setup, name: &str) -> String {
    let group = &setup.socket_group;
    let add = format!(
        "sudo useradd --system --no-create-home --user-group --groups {group} --shell /usr/sbin/nologin {name}"
    );
    match Group::from_name(group).ok().flatten() {
        Some(_) => add,
        None => format!("sudo groupadd --system {group} && {add}"),
    }
}

/// Whether the running daemon's socket lacks the configured group (it was missing when the
/// daemon started), so that a restart is needed for the socket to get it.
fn socket_needs_restart(setup: &Setup) -> bool {
    let Ok(meta) = std::fs::metadata(&setup.socket) else {
        return false;
    };
    Group::from_name(&setup.socket_group).ok().flatten().is_none_or(|g| g.gid.as_raw() != meta.gid())
}

fn group_name(gid: u32) -> String {
    Group::from_gid(Gid::from_raw(gid)).ok().flatten().map_or_else(|| gid.to_string(), |g| g.name)
}

fn user_name(uid: u32) -> String {
    User::from_uid(Uid::from_raw(uid)).ok().flatten().map_or_else(|| uid.to_string(), |u| u.name)
}

/// `PATH (mode 0700, root:root)`.
fn describe(path: &Path) -> String {
    match std::fs::metadata(path) {
        Ok(m) => {
            format!(
                "{} (mode {:04o}, {}:{})",
                path.display(),
                m.mode() & 0o7777,
                user_name(m.uid()),
                group_name(m.gid())
            )
        }
        Err(e) => format!("{} ({e})", path.display()),
    }
}

/// Why a check as the agent was not made by a process that is not root.
const NOT_ROOT: &str = "checked as root only (`sudo tether doctor`)";

/// Runs `f` on a thread of its own under the agent's uid, gid and groups. `Err`: why it
/// could not (not root; the ids could not be taken, naming the call that failed).
fn as_agent<T: Send>(agent: &Agent, f: impl FnOnce() -> T + Send) -> Result<T, String> {
    if !nix::unistd::geteuid().is_root() {
        return Err(NOT_ROOT.into());
    }
    let name = &agent.user.name;
    std::thread::scope(|s| {
        let checker = std::thread::Builder::new()
            .name("as-agent".into())
            .spawn_scoped(s, || {
                // SAFETY: this thread runs only `f` and ends when it returns (the scope joins
                // it before anything else runs), so no other code ever sees a thread whose
                // credentials differ from the rest of the process.
                unsafe { become_user(agent.user.uid.as_raw(), agent.user.gid.as_raw(), &agent.groups) }
                    .map_err(|(call, e)| format!("could not take {name}'s ids to check ({call}: {e})"))?;
                Ok(f())
            })
            .map_err(|e| format!("no thread to check as {name} ({e})"))?;
        checker.join().map_err(|_| format!("the check as {name} failed"))?
    })
}

#[cfg(any(target_arch = "arm", target_arch = "x86"))]
mod id_calls {
    // The 32-bit ids; the plain calls there take 16-bit ones.
    pub const SETGROUPS: libc::c_long = libc::SYS_setgroups32;
    pub const SETRESGID: libc::c_long = libc::SYS_setresgid32;
    pub const SETRESUID: libc::c_long = libc::SYS_setresuid32;
}
#[cfg(not(any(target_arch = "arm", target_arch = "x86")))]
mod id_calls {
    pub const SETGROUPS: libc::c_long = libc::SYS_setgroups;
    pub const SETRESGID: libc::c_long = libc::SYS_setresgid;
    pub const SETRESUID: libc::c_long = libc::SYS_setresuid;
}

/// Takes `uid`, `gid` and `groups` (real, effective and saved) for the calling thread only
/// (in a forked child, that is the whole process). Raw system calls: libc's wrappers would
/// change every thread of the process. Allocates nothing, so it is safe between fork and
/// exec. Giving up root for all three uids drops the thread's capabilities too. `Err`
/// names the call that failed. Linux only (per-thread credentials are Linux's).
///
/// # Safety
/// Call it only in a forked child before exec, or on a thread that ends right after its
/// work: glibc and everything else in the process assume every thread has the same
/// credentials, so a thread left with others must never run other code.
pub unsafe fn become_user(uid: u32, gid: u32, groups: &[u32]) -> Result<(), (&'static str, std::io::Error)> {
    let n = libc::c_long::try_from(groups.len())
        .map_err(|_| ("setgroups", std::io::Error::from_raw_os_error(libc::EINVAL)))?;
    let check = |call, r: libc::c_long| if r == 0 { Ok(()) } else { Err((call, std::io::Error::last_os_error())) };
    // SAFETY: three system calls taking integers, and for setgroups a pointer to `n` ids
    // that `groups` keeps alive for the call; they touch no memory of ours otherwise. The
    // groups and gid go first: after the uid, the thread may no longer change them.
    unsafe {
        check("setgroups", libc::syscall(id_calls::SETGROUPS, n, groups.as_ptr()))?;
        check("setresgid", libc::syscall(id_calls::SETRESGID, gid, gid, gid))?;
        check("setresuid", libc::syscall(id_calls::SETRESUID, uid, uid, uid))?;
    }
    Ok(())
}

/// The first part of `path` the calling thread's user cannot use: a directory on the way it
/// cannot search, or `path` itself without `last`.
fn blocked_at(path: &Path, last: AccessFlags) -> Option<PathBuf> {
    let mut on_the_way = PathBuf::new();
    let parts: Vec<_> = path.components().collect();
    for (i, part) in parts.iter().enumerate() {
        on_the_way.push(part);
        let need = if i + 1 == parts.len() { last } else { AccessFlags::X_OK };
        if access(&on_the_way, need).is_err() {
            return Some(on_the_way);
        }
    }
    None
}

/// What the agent's connection to the socket got.
enum Reach {
    Blocked(PathBuf),
    Role(String),
    NoRole,
    NotAnswering(String),
}

fn hello(socket: &Path) -> Reach {
    let mut stream = match UnixStream::connect(socket) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Reach::Blocked(blocked_at(socket, AccessFlags::W_OK).unwrap_or_else(|| socket.into()))
        }
        Err(e) => return Reach::NotAnswering(e.to_string()),
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
    if let Err(e) = stream.write_all(b"{\"id\":1,\"method\":\"hello\"}\n") {
        return Reach::NotAnswering(e.to_string());
    }
    let mut line = String::new();
    if let Err(e) = BufReader::new(stream.take(1 << 20)).read_line(&mut line) {
        return Reach::NotAnswering(e.to_string());
    }
    let answer: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
    match (answer["result"]["caller"]["role"].as_str(), answer["error"]["code"].as_str()) {
        (Some(role), _) => Reach::Role(role.to_string()),
        (None, Some("PERMISSION_DENIED")) => Reach::NoRole,
        (None, code) => Reach::NotAnswering(format!("unexpected answer to hello ({})", code.unwrap_or("none"))),
    }
}

/// Whether the agent reaches the control socket and the daemon gives it the agent role.
pub fn check_socket(setup: &Setup, agent: &Agent) -> Finding {
    let socket = &setup.socket;
    let name = &agent.user.name;
    if std::fs::symlink_metadata(socket).is_err() {
        return Finding::unchecked("socket", format!("no daemon on {} to check against", socket.display()));
    }
    let reach = match as_agent(agent, || match blocked_at(socket, AccessFlags::W_OK) {
        Some(at) => Reach::Blocked(at),
        None => hello(socket),
    }) {
        Ok(reach) => reach,
        Err(why) => return Finding::unchecked("socket", why),
    };
    let config = setup.config_file.as_ref().map_or_else(|| "the config file".into(), |f| f.display().to_string());
    match reach {
        Reach::Role(role) if role == "agent" => {
            Finding::ok("socket", format!("{name} reaches {} and the daemon gives it the agent role", socket.display()))
        }
        Reach::Role(_) | Reach::NoRole => {
            let got = match reach {
                Reach::Role(r) => format!("the role {r}"),
                _ => "no role".into(),
            };
            Finding::fail(
                "socket",
                format!(
                    "the daemon on {} gives {name} {got}, not the agent role: it runs with another agent user",
                    socket.display()
                ),
                format!(
                    "start the daemon with this agent user: `agent_user = \"{name}\"` in {config} (or `tether serve \
                     --agent-user {name}`), or give `task run --agent-user` the daemon's"
                ),
                true,
            )
        }
        Reach::NotAnswering(e) => {
            Finding::unchecked("socket", format!("the daemon does not answer on {}: {e}", socket.display()))
        }
        Reach::Blocked(at) if at != *socket => Finding::fail(
            "socket",
            format!("{name} cannot reach the control socket {}: {} is closed to it", socket.display(), describe(&at)),
            format!(
                "put the socket where it can reach it: `socket = \"/run/tether/control.sock\"` in {config} (`task run` \
                 and `doctor` read it too)"
            ),
            true,
        ),
        Reach::Blocked(_) => {
            let group = &setup.socket_group;
            let meta = std::fs::metadata(socket).ok();
            let socket_gid = meta.as_ref().map(MetadataExt::gid);
            // The group a socket keeps when the daemon set none: its owner's (the daemon's
            // user's) primary group, which is no operators' group to join.
            let owner_gid = meta
                .as_ref()
                .and_then(|m| User::from_uid(Uid::from_raw(m.uid())).ok().flatten())
                .map(|u| u.gid.as_raw());
            let configured = Group::from_name(group).ok().flatten();
            let detail = format!("{name} cannot connect to {}: it is not in the socket's group", describe(socket));
            match (&configured, socket_gid) {
                // The group the daemon set: joining it is enough (`task run` gives the agent
                // its groups at each run).
                (Some(g), Some(gid)) if g.gid.as_raw() == gid => {
                    Finding::fail("socket", detail, format!("sudo usermod -aG {group} {name}"), false)
                }
                // The daemon set another (named) group: its configuration differs from ours.
                (_, Some(gid)) if gid != 0 && Some(gid) != owner_gid => {
                    Finding::fail("socket", detail, format!("sudo usermod -aG {} {name}", group_name(gid)), false)
                }
                // The socket kept the daemon's own group: the group was missing at its start.
                (Some(_), _) => Finding::fail("socket", detail, format!("sudo usermod -aG {group} {name}"), true),
                (None, _) => Finding::fail(
                    "socket",
                    detail,
                    format!("sudo groupadd --system {group} && sudo usermod -aG {group} {name}"),
                    true,
                ),
            }
        }
    }
}

/// Whether the agent can enter the working directory its command inherits.
pub fn check_cwd(agent: &Agent, cwd: &Path) -> Finding {
    let name = &agent.user.name;
    match as_agent(agent, || blocked_at(cwd, AccessFlags::X_OK)) {
        Err(why) => Finding::unchecked("cwd", why),
        Ok(None) => Finding::ok("cwd", format!("{name} can enter {}", cwd.display())),
        Ok(Some(at)) => Finding::fail(
            "cwd",
            format!("{name} cannot enter the working directory {}: {} is closed to it", cwd.display(), describe(&at)),
            format!("run it from a directory {name} can enter, e.g. `cd /tmp`"),
            false,
        ),
    }
}

/// Where `program` would be found from `cwd`: itself when it has a slash, else each PATH
/// directory in order (as execvp looks).
fn candidates(program: &str, cwd: &Path) -> Vec<PathBuf> {
    if program.contains('/') {
        // Without `.` parts, so that the path named in advice is the plain one.
        return vec![cwd.join(program).components().filter(|c| *c != std::path::Component::CurDir).collect()];
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path).map(|dir| cwd.join(dir).join(program)).collect()
}

/// A script needs reading as well as executing.
fn needs(path: &Path) -> AccessFlags {
    let mut head = [0u8; 2];
    let script = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok() && head == *b"#!";
    if script {
        AccessFlags::X_OK | AccessFlags::R_OK
    } else {
        AccessFlags::X_OK
    }
}

/// Whether the agent can run `program` (as given on the command line), from `cwd`.
pub fn check_program(agent: &Agent, program: &str, cwd: &Path, check: &'static str) -> Finding {
    let name = &agent.user.name;
    let found: Vec<(PathBuf, AccessFlags)> = candidates(program, cwd)
        .into_iter()
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0))
        .map(|p| {
            let need = needs(&p);
            (p, need)
        })
        .collect();
    let Some((first, _)) = found.first() else {
        return Finding::fail(
            check,
            format!("{program}: no such command (looked in the PATH and from {})", cwd.display()),
            "check the command's name and path".into(),
            false,
        );
    };
    let result = as_agent(agent, || {
        let mut first_block = None;
        for (p, need) in &found {
            match blocked_at(p, *need) {
                None => return Ok(p.clone()),
                Some(at) => {
                    first_block.get_or_insert(at);
                }
            }
        }
        Err(first_block)
    });
    match result {
        Err(why) => Finding::unchecked(check, format!("{}: {why}", first.display())),
        Ok(Ok(p)) => Finding::ok(check, format!("{name} can run {}", p.display())),
        Ok(Err(at)) => {
            let at = at.unwrap_or_else(|| first.clone());
            let fix = if at == *first {
                format!("sudo chmod a+rx {}", first.display())
            } else {
                let file = first.file_name().map_or_else(|| program.into(), |f| f.to_string_lossy().into_owned());
                format!("sudo install -m 0755 {} /usr/local/bin/{file}", first.display())
            };
            Finding::fail(
                check,
                format!("{name} cannot run {}: {} is closed to it", first.display(), describe(&at)),
                fix,
                false,
            )
        }
    }
}

/// Whether the agent can run this tether binary (what its command calls to act).
pub fn check_binary(agent: &Agent) -> Finding {
    match std::env::current_exe() {
        Ok(exe) => {
            let cwd = Path::new("/");
            check_program(agent, &exe.to_string_lossy(), cwd, "binary")
        }
        Err(e) => Finding::unchecked("binary", format!("where this binary is: {e}")),
    }
}

/// `doctor`'s report: the user, whether it reaches the socket, whether it can run tether.
pub fn report(setup: &Setup) -> (Value, Vec<Finding>) {
    let findings = match lookup(setup) {
        Err(missing) => vec![missing],
        Ok(agent) => vec![user_found(&agent), check_socket(setup, &agent), check_binary(&agent)],
    };
    let uid = match setup.agent_name.parse::<u32>() {
        Ok(uid) => Some(uid),
        Err(_) => User::from_name(&setup.agent_name).ok().flatten().map(|u| u.uid.as_raw()),
    };
    let ok = findings.iter().all(|f| f.state != State::Fail);
    let value = json!({
        "user": setup.agent_name,
        "uid": uid,
        "socket": setup.socket,
        "socket_group": setup.socket_group,
        "ok": ok,
        "checks": findings,
    });
    (value, findings)
}
