//! What each principal holds open, in one table: sessions (connections and HTTP requests
//! in flight), MCP sessions and streamed answers.
//!
//! Global limits alone let one client take everything: 64 `/api/ws` connections from a
//! view token left root's `tether status` with `BUSY`. Here every hold is counted twice,
//! against its holder's share and against the total, and the last part of each total is
//! kept for administrators. So:
//! - a principal (a named token, a Unix user, or, for callers with no name of their own,
//!   the address they came from) holds at most its share of each kind;
//! - callers that are not administrators stop short of the total by the reserve, so an
//!   administrator always finds room, whatever the others hold;
//! - an administrator (root or the daemon's user on the control socket, or an admin token)
//!   has no share limit, only the total: it is the appliance's owner, can make and revoke
//!   every token, and what it opens it can close.
//!
//! Every hold carries a cancellation token that fires when its holder is ended
//! ([`Holds::end`]: the token was revoked or rotated) or the daemon shuts down; whatever
//! serves the hold (a WebSocket, an MCP session, a stream) watches it and closes.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::{Caller, Identity, Principal, Role};
use crate::sync::LockPlain;

/// The kinds of things a principal can hold open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldKind {
    /// A daemon session: a connection (the socket, `/api/ws`) or one HTTP request being
    /// answered (REST, `/api/rpc`, an MCP tool call).
    Session,
    /// An MCP session over Streamable HTTP (its worker, its queues, its tools' state).
    McpSession,
    /// A streamed HTTP answer: a task's lease, a followed journal, an MCP SSE stream.
    Stream,
}

impl HoldKind {
    const ALL: [HoldKind; 3] = [HoldKind::Session, HoldKind::McpSession, HoldKind::Stream];

    fn index(self) -> usize {
        match self {
            HoldKind::Session => 0,
            HoldKind::McpSession => 1,
            HoldKind::Stream => 2,
        }
    }

    /// What it is called in messages.
    pub fn noun(self) -> &'static str {
        match self {
            HoldKind::Session => "connections and requests",
            HoldKind::McpSession => "MCP sessions",
            HoldKind::Stream => "streams",
        }
    }
}

/// One kind's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KindLimit {
    /// Held by everyone together.
    pub total: usize,
    /// Held by one principal (an administrator is not limited).
    pub per_principal: usize,
    /// The last part of `total`, kept for administrators.
    pub reserved_for_admin: usize,
}

/// The limits of every kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldLimits {
    /// Daemon sessions.
    pub sessions: KindLimit,
    /// MCP sessions.
    pub mcp_sessions: KindLimit,
    /// Streamed answers.
    pub streams: KindLimit,
}

impl Default for HoldLimits {
    fn default() -> Self {
        HoldLimits {
            sessions: KindLimit { total: 64, per_principal: 16, reserved_for_admin: 8 },
            mcp_sessions: KindLimit { total: 64, per_principal: 8, reserved_for_admin: 8 },
            streams: KindLimit { total: 64, per_principal: 8, reserved_for_admin: 8 },
        }
    }
}

impl HoldLimits {
    fn of(&self, kind: HoldKind) -> KindLimit {
        match kind {
            HoldKind::Session => self.sessions,
            HoldKind::McpSession => self.mcp_sessions,
            HoldKind::Stream => self.streams,
        }
    }
}

/// Whose share a hold counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Holder {
    /// A named token or a Unix user.
    Principal(Principal),
    /// A network caller with no name beyond its connection (a task token alone): the
    /// address it came from.
    Address(IpAddr),
    /// Code inside the daemon: counted in the totals, never limited.
    InProcess,
}

impl Holder {
    /// Whose share `caller`'s holds count against.
    pub fn of(caller: &Caller) -> Holder {
        match (&caller.principal, caller.identity) {
            (Principal::Session { .. }, Identity::Remote { addr }) => Holder::Address(addr.ip()),
            (Principal::Session { .. }, _) => Holder::InProcess,
            (p, _) => Holder::Principal(p.clone()),
        }
    }
}

/// Why a hold was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HoldRefused {
    /// The holder has its whole share of this kind.
    #[error("this caller already holds its share of {} ({limit}): close some first", .kind.noun())]
    Share {
        /// The kind.
        kind: HoldKind,
        /// The share.
        limit: usize,
    },
    /// The credential was revoked or rotated after it was checked.
    #[error("the token this request authenticated with was revoked or rotated: log in again")]
    CredentialEnded,
    /// Everyone together holds all of this kind that non-administrators may.
    #[error("the appliance's {} are full ({total}, the last {reserved} kept for administrators); retry shortly", .kind.noun())]
    Full {
        /// The kind.
        kind: HoldKind,
        /// The total.
        total: usize,
        /// What is kept for administrators.
        reserved: usize,
    },
}

impl HoldRefused {
    /// The kind refused.
    pub fn kind(&self) -> Option<HoldKind> {
        match self {
            HoldRefused::Share { kind, .. } | HoldRefused::Full { kind, .. } => Some(*kind),
            HoldRefused::CredentialEnded => None,
        }
    }

    /// A fixed message for `BUSY` (the daemon's error carries static text).
    pub fn message(&self) -> &'static str {
        match self {
            HoldRefused::CredentialEnded => {
                "the token this request authenticated with was revoked or rotated: log in again"
            }
            HoldRefused::Share { kind: HoldKind::Session, .. } => {
                "this token (or user) already has its share of connections and requests open: close some first"
            }
            HoldRefused::Share { kind: HoldKind::McpSession, .. } => {
                "this token already has its share of MCP sessions: end one (DELETE) first"
            }
            HoldRefused::Share { kind: HoldKind::Stream, .. } => {
                "this token already has its share of streams open: close one first"
            }
            HoldRefused::Full { kind: HoldKind::Session, .. } => {
                "too many connections are open (the rest are kept for administrators); retry shortly"
            }
            HoldRefused::Full { kind: HoldKind::McpSession, .. } => {
                "too many MCP sessions are open (the rest are kept for administrators); retry shortly"
            }
            HoldRefused::Full { kind: HoldKind::Stream, .. } => {
                "too many streams are open (the rest are kept for administrators); retry shortly"
            }
        }
    }
}

#[derive(Debug, Default)]
struct HolderState {
    counts: [usize; 3],
    /// Each hold's end, and whether it was ended by [`Holds::end`], by hold id.
    ends: HashMap<u64, (CancellationToken, Arc<AtomicBool>)>,
}

#[derive(Debug, Default)]
struct State {
    holders: HashMap<Holder, HolderState>,
    totals: [usize; 3],
    next: u64,
    /// Revocations so far.
    epoch: u64,
    /// Each principal ended, with the revocation epoch its end made (see [`Holds::epoch`]).
    ended: HashMap<Principal, u64>,
}

/// The table (see the module's documentation).
#[derive(Debug)]
pub struct Holds {
    limits: HoldLimits,
    /// Parent of every hold's end: the daemon's shutdown.
    shutdown: CancellationToken,
    /// Not the phone's state (nothing about the phone is decided here): who holds what is
    /// asked by every transport before it serves, in sections that never await, so one
    /// plain mutex of its own rather than a trip through the phone's owner.
    state: Mutex<State>,
}

/// One thing held open; dropping it gives the room back.
#[derive(Debug)]
pub struct Hold {
    id: u64,
    kind: HoldKind,
    holder: Holder,
    ended: CancellationToken,
    revoked: Arc<AtomicBool>,
    table: Arc<Holds>,
}

impl Hold {
    /// Fires when the holder is ended ([`Holds::end`]) or the daemon shuts down: whatever
    /// serves this hold closes.
    pub fn ended(&self) -> &CancellationToken {
        &self.ended
    }

    /// The kind held.
    pub fn kind(&self) -> HoldKind {
        self.kind
    }

    /// Whether the holder was ended ([`Holds::end`]), as opposed to the daemon shutting
    /// down, once [`Hold::ended`] has fired.
    pub fn revoked(&self) -> bool {
        self.revoked.load(Ordering::Acquire)
    }

    /// Waits until the holder is ended by [`Holds::end`]; never returns for a shutdown
    /// (whoever serves the hold watches the shutdown itself, and says so differently).
    pub async fn revocation(&self) {
        self.watch().revocation().await;
    }

    /// A handle that waits for the revocation without holding the room (a watcher task
    /// whose hold lives elsewhere).
    pub fn watch(&self) -> HoldWatch {
        HoldWatch { ended: self.ended.clone(), revoked: self.revoked.clone() }
    }
}

/// Waits for a hold's revocation ([`Hold::watch`]).
#[derive(Debug, Clone)]
pub struct HoldWatch {
    ended: CancellationToken,
    revoked: Arc<AtomicBool>,
}

impl HoldWatch {
    /// See [`Hold::revocation`].
    pub async fn revocation(&self) {
        self.ended.cancelled().await;
        if !self.revoked.load(Ordering::Acquire) {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut state = self.table.state.lock_plain();
        let i = self.kind.index();
        state.totals[i] = state.totals[i].saturating_sub(1);
        let empty = match state.holders.get_mut(&self.holder) {
            Some(h) => {
                h.counts[i] = h.counts[i].saturating_sub(1);
                h.ends.remove(&self.id);
                h.ends.is_empty()
            }
            None => false,
        };
        if empty {
            state.holders.remove(&self.holder);
        }
    }
}

/// `status.limits.holds`: one kind's totals now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KindStatus {
    /// The kind.
    pub kind: HoldKind,
    /// Held now, by everyone.
    pub held: usize,
    /// The most any one holder holds now.
    pub most_by_one: usize,
    /// The limits.
    #[serde(flatten)]
    pub limit: KindLimit,
}

impl Holds {
    /// An empty table; every hold's end is a child of `shutdown`.
    pub fn new(limits: HoldLimits, shutdown: CancellationToken) -> Arc<Holds> {
        Arc::new(Holds { limits, shutdown, state: Mutex::default() })
    }

    /// Takes one `kind` for `caller`, within its share and the total (see the module).
    pub fn take(self: &Arc<Self>, caller: &Caller, kind: HoldKind) -> Result<Hold, HoldRefused> {
        let holder = Holder::of(caller);
        let admin = caller.role == Role::Admin;
        let limit = self.limits.of(kind);
        let i = kind.index();
        let mut state = self.state.lock_plain();
        if let Holder::Principal(p) = &holder {
            // Checked before the revocation, taking after it: refused (the end already
            // fired for everything held then; this would escape it).
            if state.ended.get(p).is_some_and(|at| *at > caller.credential_epoch) {
                return Err(HoldRefused::CredentialEnded);
            }
        }
        let total = state.totals[i];
        let room = if admin { limit.total } else { limit.total.saturating_sub(limit.reserved_for_admin) };
        if total >= room {
            return Err(HoldRefused::Full { kind, total: limit.total, reserved: limit.reserved_for_admin });
        }
        let mine = state.holders.get(&holder).map_or(0, |h| h.counts[i]);
        let limited = !admin && holder != Holder::InProcess;
        if limited && mine >= limit.per_principal {
            return Err(HoldRefused::Share { kind, limit: limit.per_principal });
        }
        let id = state.next;
        state.next += 1;
        state.totals[i] += 1;
        let ended = self.shutdown.child_token();
        let revoked = Arc::new(AtomicBool::new(false));
        let h = state.holders.entry(holder.clone()).or_default();
        h.counts[i] += 1;
        h.ends.insert(id, (ended.clone(), revoked.clone()));
        drop(state);
        Ok(Hold { id, kind, holder, ended, revoked, table: self.clone() })
    }

    /// Ends everything `principal` holds (its token was revoked or rotated): each hold's
    /// end fires. The holds stay counted until whoever serves them lets go. Returns how many
    /// holds were ended.
    pub fn end(&self, principal: &Principal) -> usize {
        let mut state = self.state.lock_plain();
        state.epoch += 1;
        let epoch = state.epoch;
        state.ended.insert(principal.clone(), epoch);
        let Some(h) = state.holders.get(&Holder::Principal(principal.clone())) else { return 0 };
        for (end, revoked) in h.ends.values() {
            // Set before the cancel: whoever wakes on it reads why.
            revoked.store(true, Ordering::Release);
            end.cancel();
        }
        h.ends.len()
    }

    /// The revocation epoch: read it before checking a credential and give it to the
    /// caller ([`Caller::checked_at`]); a revocation after the read refuses what the caller
    /// would take.
    pub fn epoch(&self) -> u64 {
        self.state.lock_plain().epoch
    }

    /// What `caller`'s holder holds of `kind` now.
    pub fn held_by(&self, caller: &Caller, kind: HoldKind) -> usize {
        self.state.lock_plain().holders.get(&Holder::of(caller)).map_or(0, |h| h.counts[kind.index()])
    }

    /// Every kind's totals now, for `status`.
    pub fn status(&self) -> Vec<KindStatus> {
        let state = self.state.lock_plain();
        HoldKind::ALL
            .iter()
            .map(|&kind| {
                let i = kind.index();
                KindStatus {
                    kind,
                    held: state.totals[i],
                    most_by_one: state.holders.values().map(|h| h.counts[i]).max().unwrap_or(0),
                    limit: self.limits.of(kind),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::PeerCredentials;

    fn limits() -> HoldLimits {
        let k = KindLimit { total: 6, per_principal: 2, reserved_for_admin: 2 };
        HoldLimits { sessions: k, mcp_sessions: k, streams: k }
    }

    fn token(name: &str, role: Role) -> Caller {
        Caller::token(name, role, std::net::SocketAddr::from(([10, 0, 0, 2], 4000)))
    }

    fn root() -> Caller {
        Caller::unix(PeerCredentials { pid: Some(1), uid: 0, gid: 0 }, Role::Admin)
    }

    #[test]
    fn a_principal_holds_its_share_and_no_more() {
        let t = Holds::new(limits(), CancellationToken::new());
        let view = token("viewer", Role::View);
        let a = t.take(&view, HoldKind::Session).unwrap();
        let _b = t.take(&view, HoldKind::Session).unwrap();
        let e = t.take(&view, HoldKind::Session).unwrap_err();
        assert_eq!(e, HoldRefused::Share { kind: HoldKind::Session, limit: 2 });
        // Another kind, and another principal, have their own counts.
        assert!(t.take(&view, HoldKind::Stream).is_ok());
        assert!(t.take(&token("other", Role::View), HoldKind::Session).is_ok());
        drop(a);
        assert!(t.take(&view, HoldKind::Session).is_ok(), "a dropped hold gives its room back");
    }

    #[test]
    fn the_reserve_is_kept_for_administrators_who_have_no_share_limit() {
        let t = Holds::new(limits(), CancellationToken::new());
        let held: Vec<Hold> =
            ["a", "a", "b", "b"].iter().map(|n| t.take(&token(n, Role::Operate), HoldKind::Session).unwrap()).collect();
        let e = t.take(&token("c", Role::Operate), HoldKind::Session).unwrap_err();
        assert!(matches!(e, HoldRefused::Full { total: 6, reserved: 2, .. }), "{e:?}");
        // An admin token takes from the reserve; root too.
        let _admin = t.take(&token("owner", Role::Admin), HoldKind::Session).unwrap();
        let _root = t.take(&root(), HoldKind::Session).unwrap();
        assert!(t.take(&root(), HoldKind::Session).is_err(), "the total holds for root too");
        drop(held);
        // Administrators are not held to a share.
        let many: Vec<Hold> = (0..4).map(|_| t.take(&root(), HoldKind::Session).unwrap()).collect();
        assert_eq!(t.held_by(&root(), HoldKind::Session), 5);
        drop(many);
        let owner: Vec<Hold> =
            (0..5).map(|_| t.take(&token("owner", Role::Admin), HoldKind::Stream).unwrap()).collect();
        assert_eq!(owner.len(), 5);
    }

    #[test]
    fn callers_without_a_name_share_their_address() {
        let t = Holds::new(limits(), CancellationToken::new());
        let agent = |port| Caller::remote_agent(std::net::SocketAddr::from(([10, 0, 0, 9], port)));
        let _a = t.take(&agent(1), HoldKind::Session).unwrap();
        let _b = t.take(&agent(2), HoldKind::Session).unwrap();
        assert!(t.take(&agent(3), HoldKind::Session).is_err(), "one address, one share");
        let elsewhere = Caller::remote_agent(std::net::SocketAddr::from(([10, 0, 0, 10], 1)));
        let _elsewhere = t.take(&elsewhere, HoldKind::Session).unwrap();
        // In-process callers (the daemon's own code) are counted in the totals.
        let inproc: Vec<Hold> =
            (0..2).map(|_| t.take(&Caller::in_process(Role::Admin), HoldKind::Session).unwrap()).collect();
        assert_eq!(t.status()[0].held, 5);
        drop(inproc);
    }

    #[test]
    fn ending_a_principal_fires_every_hold_of_its_and_none_of_anyone_elses() {
        let shutdown = CancellationToken::new();
        let t = Holds::new(limits(), shutdown.clone());
        let laptop = token("laptop", Role::Operate);
        let s = t.take(&laptop, HoldKind::Session).unwrap();
        let m = t.take(&laptop, HoldKind::McpSession).unwrap();
        let other = t.take(&token("ci", Role::Operate), HoldKind::Session).unwrap();
        assert_eq!(t.end(&laptop.principal), 2);
        assert!(s.ended().is_cancelled() && m.ended().is_cancelled());
        assert!(s.revoked() && m.revoked());
        assert!(!other.ended().is_cancelled());
        assert_eq!(t.end(&Principal::Token { name: "nobody".into() }), 0);
        shutdown.cancel();
        assert!(other.ended().is_cancelled(), "shutdown ends every hold");
        assert!(!other.revoked(), "and says it was not a revocation");
        drop((s, m, other));
        // Checked before the end, taking after it: refused; checked after: taken.
        assert_eq!(t.take(&laptop, HoldKind::Session).unwrap_err(), HoldRefused::CredentialEnded);
        let after = laptop.clone().checked_at(t.epoch());
        assert!(t.take(&after, HoldKind::Session).is_ok(), "the token made again, or its new secret");
        assert_eq!(t.status().iter().map(|k| k.held).sum::<usize>(), 0);
        assert!(t.state.lock_plain().holders.is_empty(), "no holder is remembered once it holds nothing");
    }
}
