//! The control socket: tether/1 JSON lines over a Unix stream socket, callers identified by
//! SO_PEERCRED.

use std::ffi::CString;
use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nix::unistd::{Gid, Uid, User};
use tokio::io::BufReader;
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::dispatch::{Dispatcher, Flow};
use super::lines::{Line, LineReader};
use super::outbound::{Outbound, QueueLimits};
use crate::daemon::{Caller, Daemon, PeerCredentials, Role};
use crate::protocol::{
    ErrorBody, ErrorCode, Outgoing, RequestError, Response, MAX_OUTPUT_BYTES, MAX_OUTPUT_MESSAGES, MAX_REQUEST_BYTES,
    STALL_TIMEOUT,
};

/// Maps Unix credentials to roles (DESIGN.md "Identities and security").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolePolicy {
    /// The uid the daemon runs as; it and root are admins.
    pub service_uid: u32,
    /// The dedicated agent uid: agent-only, whatever groups it has.
    pub agent_uid: Option<u32>,
    /// The agent user's name, looked up again at each connection: a user created (or
    /// made again) after the daemon started is the agent at once, without a restart, and
    /// is never taken for an operator through the socket's group meanwhile.
    pub agent_name: Option<String>,
    /// Members of this group operate.
    pub operator_gid: Option<u32>,
}

impl RolePolicy {
    /// The role of a peer with `creds` whose user belongs to `groups` (supplementary groups
    /// plus primary) and whose agent user has the uid `agent_now` at this connection (see
    /// [`RolePolicy::agent_name`]). `None`: the peer has no role and is refused.
    pub fn role_for(&self, creds: &PeerCredentials, groups: &[u32], agent_now: Option<u32>) -> Option<Role> {
        // The agent check comes first: the agent uid must never gain more through groups.
        // Both the uid known at start and the name's uid now are agent-only: a lookup can
        // only ever take rights away. Root and the daemon's own uid never become agents.
        let agent_now = agent_now.filter(|&uid| uid != 0 && uid != self.service_uid);
        if self.agent_uid == Some(creds.uid) || agent_now == Some(creds.uid) {
            return Some(Role::Agent);
        }
        if creds.uid == 0 || creds.uid == self.service_uid {
            return Some(Role::Admin);
        }
        match self.operator_gid {
            Some(gid) if creds.gid == gid || groups.contains(&gid) => Some(Role::Operate),
            _ => None,
        }
    }
}

/// Errors setting up the socket.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The socket's directory could not be created.
    #[error("create socket directory {}", .path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Another daemon answers on the socket.
    #[error("another tether daemon is already listening on {}", .0.display())]
    AlreadyRunning(PathBuf),
    /// Something that is not a socket is in the way.
    #[error("{} exists and is not a socket; refusing to replace it", .0.display())]
    NotASocket(PathBuf),
    /// The socket's directory could be changed by someone else: another user could put a
    /// symlink where the socket goes (and have its mode and group applied to any file) or
    /// a socket of their own.
    #[error(
        "{} (owner uid {owner}, mode {mode:o}) could be changed by another user; the control socket \
         must live in a directory owned by this user or root that no one else may write to, \
         or in root's sticky one such as /tmp (e.g. `socket = \"/run/tether/control.sock\"` in the config file)",
        .path.display()
    )]
    UnsafeDir {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// Its permission bits.
        mode: u32,
    },
    /// Binding or configuring the socket failed.
    #[error("bind control socket {}", .path.display())]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// How the control socket is set up.
#[derive(Debug, Clone)]
pub struct UnixServerConfig {
    /// Socket path.
    pub path: PathBuf,
    /// Permission bits of the socket file (DESIGN: 0660).
    pub mode: u32,
    /// Group that owns the socket file (the operators' group), when set.
    pub group: Option<u32>,
    /// Maps peer credentials to roles.
    pub policy: RolePolicy,
    /// A peer that does not read for this long is dropped.
    pub stall_timeout: Duration,
}

impl UnixServerConfig {
    /// Defaults for `path`: mode 0660, no group change, 10 s stall timeout.
    pub fn new(path: PathBuf, policy: RolePolicy) -> Self {
        UnixServerConfig { path, mode: 0o660, group: None, policy, stall_timeout: STALL_TIMEOUT }
    }
}

/// A bound control socket. The socket file is removed when this is dropped.
#[derive(Debug)]
pub struct UnixServer {
    listener: UnixListener,
    config: Arc<UnixServerConfig>,
    daemon: Daemon,
}

impl UnixServer {
    /// Binds the socket, replacing a stale one left by a crashed daemon.
    pub fn bind(config: UnixServerConfig, daemon: Daemon) -> Result<UnixServer, ServerError> {
        let path = config.path.clone();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                std::fs::create_dir_all(dir).map_err(|source| ServerError::CreateDir { path: dir.into(), source })?;
                // Peers (operators, the agent uid) must be able to reach the socket; the
                // socket's own mode is the gate.
                let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
            }
            // The mode and group below are set by path: only a directory no one else can
            // write to keeps that path ours between the bind and the rename.
            check_socket_dir(dir)?;
        }
        remove_stale(&path)?;
        let bind_err = |source| ServerError::Bind { path: path.clone(), source };
        // Bound and listening under a temporary name, then renamed into place: the path
        // exists only once connecting to it works (a client racing a starting daemon gets
        // "no such file" and retries, never "connection refused"), with its final mode.
        let mut staging = path.clone().into_os_string();
        staging.push(".new");
        let staging = PathBuf::from(staging);
        let _ = std::fs::remove_file(&staging);
        let listener = UnixListener::bind(&staging).map_err(bind_err)?;
        std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(config.mode)).map_err(bind_err)?;
        if let Some(gid) = config.group {
            nix::unistd::chown(&staging, None, Some(Gid::from_raw(gid))).map_err(|e| bind_err(io::Error::from(e)))?;
        }
        std::fs::rename(&staging, &path).map_err(bind_err)?;
        tracing::info!(path = %path.display(), mode = format!("{:o}", config.mode), "control socket listening");
        Ok(UnixServer { listener, config: Arc::new(config), daemon })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.config.path
    }

    /// Accepts connections until `shutdown` fires. Each connection runs on its own task;
    /// a failing connection never affects others.
    pub async fn serve(self, shutdown: CancellationToken) {
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        connections.spawn(connection(self.daemon.clone(), self.config.clone(), stream));
                    }
                    Err(e) => {
                        // EMFILE and friends: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        connections.abort_all();
    }
}

impl Drop for UnixServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.config.path);
    }
}

/// Refuses a socket directory another user could write to (a predictable name in `/tmp`
/// made first by someone else, or one open to a group): see [`ServerError::UnsafeDir`].
///
/// A root-owned sticky directory open to everyone (`/tmp`, or `/run` in an initramfs) is
/// accepted: others may create names in it but not remove or rename ours, so nothing can
/// be swapped in between the bind and the chmod/chown; a name someone made first is
/// refused by [`remove_stale`] (not a socket) or answered by its daemon (already running).
fn check_socket_dir(dir: &Path) -> Result<(), ServerError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir).map_err(|source| ServerError::CreateDir { path: dir.into(), source })?;
    let euid = nix::unistd::geteuid().as_raw();
    let trusted_owner = meta.uid() == euid || meta.uid() == 0;
    let sticky_root = meta.uid() == 0 && meta.mode() & 0o1000 != 0;
    if !trusted_owner || (meta.mode() & 0o022 != 0 && !sticky_root) {
        return Err(ServerError::UnsafeDir { path: dir.into(), owner: meta.uid(), mode: meta.mode() & 0o7777 });
    }
    Ok(())
}

fn remove_stale(path: &Path) -> Result<(), ServerError> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(ServerError::NotASocket(path.into()));
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(ServerError::AlreadyRunning(path.into()));
    }
    std::fs::remove_file(path).map_err(|source| ServerError::Bind { path: path.into(), source })
}

/// Supplementary groups of `uid`'s user (plus `gid`), from the user database.
fn groups_of(uid: u32, gid: u32) -> Vec<u32> {
    let Ok(Some(user)) = User::from_uid(Uid::from_raw(uid)) else {
        return vec![gid];
    };
    let Ok(name) = CString::new(user.name) else {
        return vec![gid];
    };
    nix::unistd::getgrouplist(&name, Gid::from_raw(gid))
        .map(|gs| gs.into_iter().map(Gid::as_raw).collect())
        .unwrap_or_else(|_| vec![gid])
}

/// The uid the agent user's name has now, from the user database.
/// The agent user's uid now: `Ok(None)` when there is no such user (or no name), `Err`
/// when the user database could not answer (sssd or LDAP down).
fn agent_uid_now(name: Option<&str>) -> Result<Option<u32>, nix::Error> {
    let Some(name) = name else { return Ok(None) };
    Ok(User::from_name(name)?.map(|u| u.uid.as_raw()))
}

async fn identify(stream: &UnixStream, policy: &RolePolicy) -> io::Result<(PeerCredentials, Option<Caller>)> {
    let cred = stream.peer_cred()?;
    let creds = PeerCredentials { pid: cred.pid(), uid: cred.uid(), gid: cred.gid() };
    let name = policy.agent_name.clone();
    let (groups, agent_now) =
        tokio::task::spawn_blocking(move || (groups_of(creds.uid, creds.gid), agent_uid_now(name.as_deref())))
            .await
            .unwrap_or_else(|_| (vec![creds.gid], Err(nix::Error::EIO)));
    let role = match agent_now {
        Ok(agent_now) => policy.role_for(&creds, &groups, agent_now),
        // Fail closed: a peer that may be the agent user (which is often in the socket's
        // group) gets no operator's rights while its name cannot be checked.
        Err(e) => policy.role_for(&creds, &groups, None).filter(|&role| role != Role::Operate).or_else(|| {
            tracing::warn!(uid = creds.uid, error = %e, "the user database did not answer; refused");
            None
        }),
    };
    Ok((creds, role.map(|role| Caller::unix(creds, role))))
}

async fn connection(daemon: Daemon, config: Arc<UnixServerConfig>, stream: UnixStream) {
    let (creds, caller) = match identify(&stream, &config.policy).await {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(error = %e, "SO_PEERCRED failed; closing connection");
            return;
        }
    };
    let (read, write) = stream.into_split();
    let closed = CancellationToken::new();
    let limits =
        QueueLimits { max_messages: MAX_OUTPUT_MESSAGES, max_bytes: MAX_OUTPUT_BYTES, stall: config.stall_timeout };
    let (out, writer) = Outbound::new(write, limits, daemon.output_budget().clone(), closed.clone());
    let writer = tokio::spawn(writer);
    let Some(caller) = caller else {
        tracing::warn!(uid = creds.uid, gid = creds.gid, pid = ?creds.pid, "peer has no role; refused");
        let body = ErrorBody::new(
            ErrorCode::PermissionDenied,
            "this user has no role on this appliance: add it to the operators' group (or use the agent \
             user via `tether task run`)",
        );
        let _ = out.push(Outgoing::Response(Response::err(None, body)).to_line()).await;
        drop(out);
        let _ = writer.await;
        return;
    };
    let role = caller.role;
    let Ok(mut dispatcher) = Dispatcher::open(&daemon, caller, &out).await else {
        drop(out);
        let _ = writer.await;
        return;
    };
    let session = dispatcher.session().id().0;
    tracing::info!(session, uid = creds.uid, pid = ?creds.pid, role = %role, "connected");
    let eof = read_requests(&mut dispatcher, read, &closed).await;
    if eof {
        tracing::debug!(session, "peer closed its side; finished its requests");
    } else {
        tracing::info!(session, "connection dropped");
    }
    dispatcher.close().await;
    drop(out);
    let _ = writer.await;
    tracing::info!(session, "disconnected");
}

/// Resolves once the peer has closed both directions (POLLHUP), polling every 25 ms: a
/// half-closed peer (shutdown of its write side only) keeps its requests running.
///
/// # Cancel safety
/// Safe: it holds no state between polls.
async fn peer_hung_up(stream: &tokio::net::UnixStream) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    loop {
        let mut fds = [PollFd::new(stream.as_fd(), PollFlags::empty())];
        if let Ok(n) = poll(&mut fds, PollTimeout::ZERO) {
            if n > 0 && fds[0].revents().is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR)) {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Reads lines into the dispatcher until EOF (`true`) or the connection is closed
/// (`false`). After EOF the peer may still read: what it asked for finishes, unless it
/// stalls or turns out to be gone altogether (then its long requests, a question or a
/// followed event stream, must end, and its lease with them).
async fn read_requests(
    dispatcher: &mut Dispatcher,
    read: tokio::net::unix::OwnedReadHalf,
    closed: &CancellationToken,
) -> bool {
    let mut reader = BufReader::new(read);
    // Kept across loop turns: a `select!` that drops `next_line` keeps its half line here.
    let mut lines = LineReader::new(MAX_REQUEST_BYTES);
    loop {
        let line = tokio::select! {
            () = closed.cancelled() => return false,
            line = lines.next_line(&mut reader) => line,
            () = dispatcher.request_done() => continue,
        };
        let line = match line {
            Ok(Line::Complete(bytes)) => bytes,
            Ok(Line::TooLong(len)) => {
                dispatcher.refuse(RequestError::too_large(len)).await;
                continue;
            }
            Ok(Line::Eof) => break,
            Err(e) => {
                tracing::debug!(error = %e, "read failed");
                return false;
            }
        };
        if dispatcher.message(&line, closed).await == Flow::Closed {
            return false;
        }
    }
    let stream: &tokio::net::UnixStream = reader.get_ref().as_ref();
    tokio::select! {
        () = closed.cancelled() => dispatcher.abort(),
        () = dispatcher.all_done() => {}
        () = peer_hung_up(stream) => {}
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_directory_someone_else_may_write_to_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("tether");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(check_socket_dir(&dir).is_ok(), "ours, 0755");
        for loose in [0o775, 0o777] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(loose)).unwrap();
            let refused = check_socket_dir(&dir).unwrap_err();
            assert!(matches!(refused, ServerError::UnsafeDir { .. }), "{loose:o}");
            assert!(refused.to_string().contains("/run/tether/control.sock"), "{refused}");
        }
        // Sticky and open to all: only root's (like /tmp) is trusted, where no one else
        // may remove or rename what the daemon puts there.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let sticky = check_socket_dir(&dir);
        if nix::unistd::geteuid().is_root() {
            assert!(sticky.is_ok(), "root's sticky directory: {sticky:?}");
            nix::unistd::chown(&dir, Some(Uid::from_raw(65534)), None).unwrap();
            assert!(matches!(check_socket_dir(&dir), Err(ServerError::UnsafeDir { owner: 65534, .. })));
            nix::unistd::chown(&dir, Some(Uid::from_raw(0)), None).unwrap();
        } else {
            assert!(matches!(sticky, Err(ServerError::UnsafeDir { .. })), "a user's sticky directory");
        }
        if nix::unistd::geteuid().is_root() {
            // Made first by another user (a predictable name in /tmp).
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
            nix::unistd::chown(&dir, Some(Uid::from_raw(65534)), None).unwrap();
            assert!(matches!(check_socket_dir(&dir), Err(ServerError::UnsafeDir { owner: 65534, .. })));
        }
    }

    #[test]
    fn the_agent_name_looked_up_now_is_agent_only_and_never_root() {
        let policy = RolePolicy { service_uid: 500, agent_uid: None, agent_name: None, operator_gid: Some(600) };
        let peer = |uid| PeerCredentials { pid: None, uid, gid: 600 };
        // A user made after the start, in the socket's group: agent, not operate.
        assert_eq!(policy.role_for(&peer(700), &[600], None), Some(Role::Operate));
        assert_eq!(policy.role_for(&peer(700), &[600], Some(700)), Some(Role::Agent));
        // The uid known at start stays agent-only whatever the name says now.
        let known = RolePolicy { agent_uid: Some(701), ..policy.clone() };
        assert_eq!(known.role_for(&peer(701), &[600], Some(702)), Some(Role::Agent));
        // A name that now resolves to root or the daemon's uid takes nothing from them.
        assert_eq!(policy.role_for(&peer(0), &[], Some(0)), Some(Role::Admin));
        assert_eq!(policy.role_for(&peer(500), &[], Some(500)), Some(Role::Admin));
    }
}
