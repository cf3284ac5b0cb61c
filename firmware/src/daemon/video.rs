//! Live video grants (reference 000): `video_open` issues a one-time ticket; the
//! `/api/video` WebSocket redeems it within 15 s, once, for a viewer of the current video
//! generation. Revocation, the issuing connection closing, a new video generation and
//! shutdown end tickets and viewers alike.
//!
//! Tickets are kept only as SHA-256 hashes and never logged; the transport never puts one
//! in a URL.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::tokens::sha256;
use super::{Daemon, DaemonError, Principal, Session, SessionId};
use crate::device::video::viewers::{ViewerHub, ViewerId};
use crate::sync::LockPlain;

/// How long a ticket may wait for its socket.
pub const TICKET_TTL: Duration = Duration::from_secs(15);
/// Viewers watching at once.
pub const MAX_VIEWERS: usize = 8;
/// Unredeemed tickets kept at once (each is 15 s of memory; more is someone looping).
const MAX_TICKETS: usize = 64;
/// Unredeemed tickets of one principal: a newer one voids its oldest, so one caller's loop
/// never fills [`MAX_TICKETS`] for the others.
pub const TICKETS_PER_PRINCIPAL: usize = 4;
/// Viewers of one principal at once (of [`MAX_VIEWERS`]): one token cannot keep every
/// other viewer out.
pub const VIEWERS_PER_PRINCIPAL: usize = 4;
/// Random bytes in a ticket (32 base64url characters).
const TICKET_BYTES: usize = 24;
/// Where the video WebSocket is, on the HTTPS port.
pub const VIDEO_PATH: &str = "/api/video";

/// Why the daemon ended a viewer (the transport's close code says it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VideoEnd {
    /// `video_revoke`.
    Revoked,
    /// The credential that opened it was revoked or rotated.
    CredentialEnded,
    /// The picture changed generation (a new source or format): open video again.
    GenerationChanged,
    /// The connection that opened it closed.
    SessionClosed,
    /// The daemon is stopping.
    ShuttingDown,
}

impl VideoEnd {
    /// For a person (a WebSocket close reason).
    pub fn reason(self) -> &'static str {
        match self {
            VideoEnd::Revoked => "video revoked",
            VideoEnd::CredentialEnded => "the token this video was opened with was revoked or rotated: log in again",
            VideoEnd::GenerationChanged => "the video generation changed: call video_open again",
            VideoEnd::SessionClosed => "the connection that opened this video closed",
            VideoEnd::ShuttingDown => "the appliance is shutting down",
        }
    }
}

#[derive(Debug)]
struct Ticket {
    principal: Principal,
    session: Option<SessionId>,
    generation: u32,
    expires: Instant,
}

#[derive(Debug)]
struct Grant {
    principal: Principal,
    session: Option<SessionId>,
    generation: u32,
    end: Ending,
}

/// The end of one viewer: a token and why it fired.
#[derive(Debug, Clone, Default)]
struct Ending {
    cancel: CancellationToken,
    why: Arc<OnceLock<VideoEnd>>,
}

impl Ending {
    fn end(&self, why: VideoEnd) {
        let _ = self.why.set(why);
        self.cancel.cancel();
    }
}

#[derive(Debug, Default)]
struct GrantsInner {
    tickets: HashMap<[u8; 32], Ticket>,
    viewers: HashMap<u64, Grant>,
}

/// Tickets and viewers.
#[derive(Debug, Default)]
pub(super) struct VideoGrants {
    inner: Mutex<GrantsInner>,
    next: AtomicU64,
}

impl VideoGrants {
    fn lock(&self) -> std::sync::MutexGuard<'_, GrantsInner> {
        // Plain maps; a panic elsewhere cannot leave them inconsistent.
        self.inner.lock_plain()
    }

    /// The issuing connection closed: its tickets are void and its viewers end.
    pub(super) fn session_closed(&self, session: SessionId) {
        let mut inner = self.lock();
        inner.tickets.retain(|_, t| t.session != Some(session));
        for g in inner.viewers.values().filter(|g| g.session == Some(session)) {
            g.end.end(VideoEnd::SessionClosed);
        }
    }

    /// A new video generation: older tickets are void and older viewers end.
    pub(super) fn generation_changed(&self, generation: u32) {
        let mut inner = self.lock();
        inner.tickets.retain(|_, t| t.generation == generation);
        for g in inner.viewers.values().filter(|g| g.generation != generation) {
            g.end.end(VideoEnd::GenerationChanged);
        }
    }

    /// `principal`'s tickets are void and its viewers end (`why`); returns how many of each.
    pub(super) fn end_principal(&self, principal: &Principal, why: VideoEnd) -> (usize, usize) {
        let mut inner = self.lock();
        let before = inner.tickets.len();
        inner.tickets.retain(|_, t| &t.principal != principal);
        let tickets = before - inner.tickets.len();
        let mut viewers = 0;
        for g in inner.viewers.values().filter(|g| &g.principal == principal) {
            g.end.end(why);
            viewers += 1;
        }
        (tickets, viewers)
    }

    /// The credential `principal` was revoked or rotated: see [`VideoGrants::end_principal`].
    pub(super) fn principal_ended(&self, principal: &Principal) -> (usize, usize) {
        self.end_principal(principal, VideoEnd::CredentialEnded)
    }

    /// Shutdown: everything ends.
    pub(super) fn shutdown(&self) {
        let mut inner = self.lock();
        inner.tickets.clear();
        for g in inner.viewers.values() {
            g.end.end(VideoEnd::ShuttingDown);
        }
    }

    fn remove(&self, grant: u64) {
        self.lock().viewers.remove(&grant);
    }
}

/// One authorized viewer: take its pictures from [`VideoViewer::hub`]. Dropping it leaves.
#[derive(Debug)]
pub struct VideoViewer {
    id: ViewerId,
    notify: Arc<Notify>,
    hub: ViewerHub,
    grant: u64,
    grants: Arc<VideoGrants>,
    end: Ending,
    generation: u32,
    codec: String,
    protocol: &'static str,
}

impl VideoViewer {
    /// Its queue in the hub.
    pub fn id(&self) -> ViewerId {
        self.id
    }

    /// Woken when a picture is queued for it.
    pub fn notify(&self) -> &Notify {
        &self.notify
    }

    /// The hub its pictures come from (take, ack, keyframe requests).
    pub fn hub(&self) -> &ViewerHub {
        &self.hub
    }

    /// The video generation it watches.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// The stream's codec string (WebCodecs; `jpeg` for CDJ1).
    pub fn codec(&self) -> &str {
        &self.codec
    }

    /// The stream's message format: `h264-annexb/1` (CDV1) or `jpeg/1` (CDJ1).
    pub fn protocol(&self) -> &'static str {
        self.protocol
    }

    /// Fires when the daemon ends this viewer; [`VideoViewer::ended_because`] says why.
    pub fn ended(&self) -> &CancellationToken {
        &self.end.cancel
    }

    /// Why the daemon ended it, once it did.
    pub fn ended_because(&self) -> Option<VideoEnd> {
        self.end.why.get().copied()
    }
}

impl Drop for VideoViewer {
    fn drop(&mut self) {
        self.hub.leave(self.id);
        self.grants.remove(self.grant);
    }
}

fn ticket_hash(ticket: &str) -> [u8; 32] {
    sha256(ticket.as_bytes())
}

impl Daemon {
    /// `video_open`: a one-time ticket for the live H.264 WebSocket.
    pub(super) fn video_open(&self, session: &Session) -> Result<Value, DaemonError> {
        let generation = self.inner.frames.state().generation;
        let mut bytes = [0u8; TICKET_BYTES];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
            .map_err(|_| DaemonError::NoRandomness)?;
        let ticket = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        let now = Instant::now();
        let bound = (!session.per_request.load(Ordering::Relaxed)).then_some(session.id);
        {
            let mut inner = self.inner.video.lock();
            inner.tickets.retain(|_, t| t.expires > now);
            let principal = session.principal();
            let mut own: Vec<([u8; 32], Instant)> =
                inner.tickets.iter().filter(|(_, t)| &t.principal == principal).map(|(k, t)| (*k, t.expires)).collect();
            if own.len() >= TICKETS_PER_PRINCIPAL {
                // The oldest of the caller's own go: its loop costs only itself.
                own.sort_by_key(|(_, expires)| *expires);
                for (k, _) in own.iter().take(own.len() + 1 - TICKETS_PER_PRINCIPAL) {
                    inner.tickets.remove(k);
                }
            }
            if inner.tickets.len() >= MAX_TICKETS {
                return Err(DaemonError::Busy("too many video tickets are waiting to be used"));
            }
            inner.tickets.insert(
                ticket_hash(&ticket),
                Ticket {
                    principal: session.principal().clone(),
                    session: bound,
                    generation,
                    expires: now + TICKET_TTL,
                },
            );
        }
        let url = self.inner.options.https.as_ref().and_then(|h| {
            let host = h.hosts.first()?;
            let port = if h.port == 443 { String::new() } else { format!(":{}", h.port) };
            Some(format!("wss://{host}{port}{VIDEO_PATH}"))
        });
        Ok(json!({
            "url": url,
            "path": VIDEO_PATH,
            "ticket": ticket,
            "expires_in_ms": TICKET_TTL.as_millis(),
            "codec": self.inner.viewers.codec(),
            // `jpeg/1` (CDJ1) when an MJPEG capture is handed on as is, else CDV1.
            "protocol": self.inner.viewers.protocol(),
            "generation": generation,
        }))
    }

    /// `video_revoke`: voids the caller's tickets and ends its viewers.
    pub(super) fn video_revoke(&self, session: &Session) -> Value {
        let (tickets, viewers) = self.inner.video.end_principal(session.principal(), VideoEnd::Revoked);
        json!({"tickets": tickets, "viewers": viewers})
    }

    /// Redeems a ticket (the `/api/video` socket's first message) for a viewer: once,
    /// within [`TICKET_TTL`], in the generation it was issued for, while fewer than
    /// [`MAX_VIEWERS`] watch.
    pub fn redeem_video_ticket(&self, ticket: &str) -> Result<VideoViewer, DaemonError> {
        let generation = self.inner.frames.state().generation;
        let mut inner = self.inner.video.lock();
        // Removed whatever happens next: a ticket is tried once.
        let t = inner.tickets.remove(&ticket_hash(ticket)).ok_or(DaemonError::Ticket("unknown or already used"))?;
        if t.expires <= Instant::now() {
            return Err(DaemonError::Ticket("expired (tickets last 15 s)"));
        }
        if t.generation != generation {
            return Err(DaemonError::Ticket("from an older video generation"));
        }
        if inner.viewers.len() >= MAX_VIEWERS {
            return Err(DaemonError::Busy("8 viewers are watching already"));
        }
        if inner.viewers.values().filter(|g| g.principal == t.principal).count() >= VIEWERS_PER_PRINCIPAL {
            return Err(DaemonError::Busy("this token already has 4 viewers watching: close one first"));
        }
        let grant = self.inner.video.next.fetch_add(1, Ordering::Relaxed);
        let end = Ending::default();
        inner.viewers.insert(grant, Grant { principal: t.principal, session: t.session, generation, end: end.clone() });
        drop(inner);
        let (id, notify) = self.inner.viewers.join();
        Ok(VideoViewer {
            id,
            notify,
            hub: self.inner.viewers.clone(),
            grant,
            grants: self.inner.video.clone(),
            end,
            generation,
            codec: self.inner.viewers.codec(),
            protocol: self.inner.viewers.protocol(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::{Caller, DaemonOptions, Devices, Role};
    use crate::device::hid::RecordingSink;
    use crate::device::sim::{SimConfig, SimPhone};

    fn daemon() -> Daemon {
        let phone = SimPhone::new(SimConfig::default());
        Daemon::start(
            Devices { hid: Box::new(RecordingSink::default()), video: Box::new(phone.display()), sim: Some(phone) },
            DaemonOptions { sim: true, ..DaemonOptions::default() },
        )
        .unwrap()
    }

    fn ticket(d: &Daemon, s: &Session) -> String {
        d.video_open(s).unwrap()["ticket"].as_str().unwrap().to_string()
    }

    #[tokio::test]
    async fn a_ticket_is_redeemed_once_and_revocation_ends_its_viewer() {
        let d = daemon();
        let s = d.open_session(Caller::in_process(Role::View));
        let t = ticket(&d, &s);
        assert_eq!(t.len(), 32, "24 random bytes, base64url");
        let viewer = d.redeem_video_ticket(&t).unwrap();
        assert!(matches!(d.redeem_video_ticket(&t), Err(DaemonError::Ticket(_))), "single use");
        assert!(matches!(d.redeem_video_ticket("made-up"), Err(DaemonError::Ticket(_))));
        assert_eq!(d.status().await.video.viewers.viewers, 1);
        let spare = ticket(&d, &s);
        let revoked = d.video_revoke(&s);
        assert_eq!((revoked["viewers"].as_u64(), revoked["tickets"].as_u64()), (Some(1), Some(1)));
        assert!(viewer.ended().is_cancelled());
        assert_eq!(viewer.ended_because(), Some(VideoEnd::Revoked));
        assert!(d.redeem_video_ticket(&spare).is_err(), "revoked tickets are void");
        drop(viewer);
        assert_eq!(d.status().await.video.viewers.viewers, 0, "dropping the viewer leaves the hub");
    }

    #[tokio::test]
    async fn the_issuing_connection_closing_ends_its_viewers_unless_it_was_one_request() {
        let d = daemon();
        let conn = d.open_session(Caller::in_process(Role::View));
        let viewer = d.redeem_video_ticket(&ticket(&d, &conn)).unwrap();
        let unused = ticket(&d, &conn);
        drop(conn);
        assert_eq!(viewer.ended_because(), Some(VideoEnd::SessionClosed));
        assert!(d.redeem_video_ticket(&unused).is_err());
        // An HTTP request's session ends with its answer; its ticket is the caller's.
        let request = d.open_session(Caller::in_process(Role::View));
        request.set_per_request();
        let t = ticket(&d, &request);
        drop(request);
        let viewer = d.redeem_video_ticket(&t).unwrap();
        assert!(!viewer.ended().is_cancelled());
    }

    #[tokio::test]
    async fn at_most_eight_watch_and_a_new_generation_ends_them() {
        let d = daemon();
        // Two viewers each for four callers (each in-process session is its own principal).
        let sessions: Vec<_> = (0..MAX_VIEWERS / 2).map(|_| d.open_session(Caller::in_process(Role::View))).collect();
        let viewers: Vec<_> =
            sessions.iter().cycle().take(MAX_VIEWERS).map(|s| d.redeem_video_ticket(&ticket(&d, s)).unwrap()).collect();
        let s = d.open_session(Caller::in_process(Role::View));
        assert!(matches!(d.redeem_video_ticket(&ticket(&d, &s)), Err(DaemonError::Busy(_))));
        let waiting = ticket(&d, &s);
        d.inner.video.generation_changed(viewers[0].generation() + 1);
        assert!(viewers.iter().all(|v| v.ended_because() == Some(VideoEnd::GenerationChanged)));
        assert!(d.redeem_video_ticket(&waiting).is_err(), "a ticket of the old generation is void");
    }

    #[tokio::test]
    async fn one_principal_has_four_viewers_and_four_tickets() {
        let d = daemon();
        let s = d.open_session(Caller::in_process(Role::View));
        let viewers: Vec<_> =
            (0..VIEWERS_PER_PRINCIPAL).map(|_| d.redeem_video_ticket(&ticket(&d, &s)).unwrap()).collect();
        match d.redeem_video_ticket(&ticket(&d, &s)) {
            Err(DaemonError::Busy(m)) => assert!(m.contains("4 viewers"), "{m}"),
            other => panic!("{other:?}"),
        }
        let other = d.open_session(Caller::in_process(Role::View));
        assert!(d.redeem_video_ticket(&ticket(&d, &other)).is_ok(), "another caller still gets in");
        drop(viewers);
        // A loop of video_open voids the caller's own oldest tickets, nobody else's.
        let kept = ticket(&d, &other);
        let first: Vec<String> = (0..TICKETS_PER_PRINCIPAL).map(|_| ticket(&d, &s)).collect();
        let newest: Vec<String> = (0..TICKETS_PER_PRINCIPAL).map(|_| ticket(&d, &s)).collect();
        assert!(d.redeem_video_ticket(&first[0]).is_err(), "the oldest went");
        assert!(d.redeem_video_ticket(&newest[TICKETS_PER_PRINCIPAL - 1]).is_ok());
        assert!(d.redeem_video_ticket(&kept).is_ok(), "another caller's ticket stays");
    }

    #[tokio::test]
    async fn a_principal_ended_loses_its_tickets_and_viewers_and_only_those() {
        let d = daemon();
        let s = d.open_session(Caller::in_process(Role::View));
        let other = d.open_session(Caller::in_process(Role::View));
        let viewer = d.redeem_video_ticket(&ticket(&d, &s)).unwrap();
        let spare = ticket(&d, &s);
        let theirs = d.redeem_video_ticket(&ticket(&d, &other)).unwrap();
        assert_eq!(d.inner.video.principal_ended(s.principal()), (1, 1));
        assert_eq!(viewer.ended_because(), Some(VideoEnd::CredentialEnded));
        assert!(d.redeem_video_ticket(&spare).is_err());
        assert!(!theirs.ended().is_cancelled());
    }
}
