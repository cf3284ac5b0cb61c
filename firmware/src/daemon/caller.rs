//! Who is calling. The transport authenticates a caller (its principal, role and where it
//! came from); the daemon compares principals and never decides by the transport.

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

/// Where the caller came from, for logs and the journal: the daemon records it and never
/// decides by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Identity {
    /// A Unix-socket peer.
    Unix(PeerCredentials),
    /// A network peer (HTTPS, WebSocket, MCP over the LAN).
    Remote {
        /// Its address and port.
        addr: std::net::SocketAddr,
    },
    /// Code inside the daemon process (tests, future in-process routes).
    InProcess,
}

/// Whom a caller acts as, for ownership (a task's opener, operation ids): the same person
/// from another process, connection or transport is the same principal. The transport
/// names it when it authenticates the caller; the daemon only compares principals.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Principal {
    /// A Unix user, by uid (the control socket).
    Uid {
        /// The user id.
        uid: u32,
    },
    /// A named token (`tether token add NAME`), whichever transport presented it.
    Token {
        /// The token's name.
        name: String,
    },
    /// A caller with no identity beyond its session (in-process callers): it owns only
    /// what it did on that session. The daemon fills in the session's id when it opens it.
    Session {
        /// The session's id.
        session: u64,
    },
}

impl Principal {
    /// A short stable name (`uid:1001`, `token:laptop`, `session:4`): operation-id keys
    /// and a task's default owner.
    pub fn label(&self) -> String {
        match self {
            Principal::Uid { uid } => format!("uid:{uid}"),
            Principal::Token { name } => format!("token:{name}"),
            Principal::Session { session } => format!("session:{session}"),
        }
    }
}

/// An authenticated caller: whom it acts as, what it may do, where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Caller {
    /// Where it came from (recorded, never decided by).
    pub identity: Identity,
    /// What it may do.
    pub role: Role,
    /// Whom it acts as.
    pub principal: Principal,
    /// The daemon's revocation epoch read just before this caller's credential was
    /// checked ([`crate::daemon::Daemon::revocation_epoch`]): a credential revoked after
    /// that takes nothing new, even if it was checked before the revocation.
    #[serde(skip)]
    pub credential_epoch: u64,
}

impl Caller {
    /// A Unix-socket peer, acting as its uid.
    pub fn unix(creds: PeerCredentials, role: Role) -> Caller {
        Caller {
            identity: Identity::Unix(creds),
            role,
            principal: Principal::Uid { uid: creds.uid },
            credential_epoch: 0,
        }
    }

    /// A network peer that presented the named token `name`.
    pub fn token(name: &str, role: Role, addr: std::net::SocketAddr) -> Caller {
        Caller {
            identity: Identity::Remote { addr },
            role,
            principal: Principal::Token { name: name.into() },
            credential_epoch: 0,
        }
    }

    /// A network peer that presented only a task token: the task's agent, whose session
    /// is its principal.
    pub fn remote_agent(addr: std::net::SocketAddr) -> Caller {
        Caller {
            identity: Identity::Remote { addr },
            role: Role::Agent,
            principal: Principal::Session { session: 0 },
            credential_epoch: 0,
        }
    }

    /// The same caller, whose credential was checked at revocation epoch `epoch`.
    pub fn checked_at(mut self, epoch: u64) -> Caller {
        self.credential_epoch = epoch;
        self
    }

    /// An in-process caller: its session is its principal.
    pub fn in_process(role: Role) -> Caller {
        Caller {
            identity: Identity::InProcess,
            role,
            principal: Principal::Session { session: 0 },
            credential_epoch: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_is_the_user_not_the_process() {
        let a = Caller::unix(PeerCredentials { pid: Some(10), uid: 1001, gid: 1001 }, Role::Operate);
        let b = Caller::unix(PeerCredentials { pid: Some(11), uid: 1001, gid: 50 }, Role::Operate);
        assert_ne!(a.identity, b.identity);
        assert_eq!(a.principal, b.principal, "another process of the same user");
        let other = Caller::unix(PeerCredentials { pid: Some(10), uid: 1002, gid: 1001 }, Role::Operate);
        assert_ne!(a.principal, other.principal);
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 4000));
        let laptop = Caller::token("laptop", Role::Operate, addr);
        let again = Caller::token("laptop", Role::Operate, std::net::SocketAddr::from(([10, 0, 0, 2], 5000)));
        assert_eq!(laptop.principal, again.principal, "one token from two addresses");
        assert_ne!(laptop.principal, Caller::token("ci", Role::Operate, addr).principal);
        assert_eq!(laptop.principal.label(), "token:laptop");
        assert_eq!(a.principal.label(), "uid:1001");
    }
}
