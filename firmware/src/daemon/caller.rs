//! Who is calling: identity from the transport, role from policy.

use serde::Serialize;

pub use crate::protocol::Role;

/// Process credentials of a Unix-socket peer, from SO_PEERCRED.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PeerCredentials {
    /// Peer process id (absent on platforms that do not report it).
    pub pid: Option<i32>,
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
}

/// How the caller reached the daemon; the daemon does not care beyond logging.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Identity {
    /// A Unix-socket peer.
    Unix(PeerCredentials),
    /// Code inside the daemon process (console routes, MCP).
    InProcess,
}

/// Whom a caller acts as, for ownership (a task's opener, operation ids): the same person
/// from another process or connection is the same principal. The transport's details
/// (pid, gid, which socket) are not part of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Principal {
    /// A Unix user, by uid.
    Uid {
        /// The user id.
        uid: u32,
    },
    /// An in-process caller (console routes, MCP) carries no identity of its own yet: its
    /// session is its principal.
    Session {
        /// The session's id.
        session: u64,
    },
}

/// An authenticated caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Caller {
    /// Where it came from.
    pub identity: Identity,
    /// What it may do.
    pub role: Role,
}

impl Caller {
    /// Whom this caller acts as, on session `session`.
    pub fn principal(&self, session: u64) -> Principal {
        match self.identity {
            Identity::Unix(c) => Principal::Uid { uid: c.uid },
            Identity::InProcess => Principal::Session { session },
        }
    }
}

/// Maps Unix credentials to roles (DESIGN.md "Identities and security").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolePolicy {
    /// The uid the daemon runs as; it and root are admins.
    pub service_uid: u32,
    /// The dedicated agent uid: agent-only, whatever groups it has.
    pub agent_uid: Option<u32>,
    /// Members of this group operate.
    pub operator_gid: Option<u32>,
}

impl RolePolicy {
    /// The role of a peer with `creds` whose user belongs to `groups` (supplementary groups
    /// plus primary). `None`: the peer has no role and is refused.
    pub fn role_for(&self, creds: &PeerCredentials, groups: &[u32]) -> Option<Role> {
        // The agent check comes first: the agent uid must never gain more through groups.
        if self.agent_uid == Some(creds.uid) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(uid: u32, gid: u32) -> PeerCredentials {
        PeerCredentials { pid: Some(1), uid, gid }
    }

    #[test]
    fn maps_uids_and_groups_to_roles() {
        let p = RolePolicy { service_uid: 1000, agent_uid: Some(999), operator_gid: Some(50) };
        assert_eq!(p.role_for(&creds(0, 0), &[]), Some(Role::Admin));
        assert_eq!(p.role_for(&creds(1000, 1000), &[]), Some(Role::Admin));
        assert_eq!(p.role_for(&creds(1001, 1001), &[50]), Some(Role::Operate));
        assert_eq!(p.role_for(&creds(1001, 50), &[]), Some(Role::Operate));
        assert_eq!(p.role_for(&creds(1001, 1001), &[7]), None);
        // The agent uid stays agent even in the operator group.
        assert_eq!(p.role_for(&creds(999, 50), &[50]), Some(Role::Agent));
    }

    #[test]
    fn a_principal_is_the_user_not_the_process() {
        let a = Caller {
            identity: Identity::Unix(PeerCredentials { pid: Some(10), uid: 1001, gid: 1001 }),
            role: Role::Operate,
        };
        let b = Caller {
            identity: Identity::Unix(PeerCredentials { pid: Some(11), uid: 1001, gid: 50 }),
            role: Role::Operate,
        };
        assert_ne!(a.identity, b.identity);
        assert_eq!(a.principal(1), b.principal(2), "another process of the same user, on another session");
        let other = Caller {
            identity: Identity::Unix(PeerCredentials { pid: Some(10), uid: 1002, gid: 1001 }),
            role: Role::Operate,
        };
        assert_ne!(a.principal(1), other.principal(1));
        let console = Caller { identity: Identity::InProcess, role: Role::Operate };
        assert_ne!(console.principal(1), console.principal(2), "in-process: one principal per session");
    }
}
