//! What a request must pass before it reaches a route: the Host allowlist (DNS
//! rebinding), the Origin and Sec-Fetch-Site checks for cookie-authenticated requests
//! (cross-site request forgery), and authentication with its failed-attempt limit.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyper::header::{HeaderMap, AUTHORIZATION, COOKIE, HOST};

use crate::daemon::{Caller, Daemon};
use crate::protocol::{ErrorBody, ErrorCode};
use crate::server::tls::ServerNames;
use crate::sync::LockPlain;

/// Wrong credentials tolerated per [`FAILURE_WINDOW`] before wrong ones get `429`.
pub const MAX_FAILURES: usize = 20;
/// The failed-attempt window.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// The header that carries a task token.
pub const TASK_TOKEN_HEADER: &str = "tether-task-token";

/// The host names and addresses requests may name in `Host` (and `Origin`).
#[derive(Debug, Clone, Default)]
pub struct HostAllowlist {
    names: Vec<String>,
    ips: Vec<IpAddr>,
}

impl HostAllowlist {
    /// Loopback names, and the server certificate's names and addresses.
    pub fn new(names: &ServerNames) -> HostAllowlist {
        let mut list = HostAllowlist { names: vec!["localhost".into()], ips: Vec::new() };
        for n in &names.dns {
            if !list.names.contains(n) {
                list.names.push(n.to_ascii_lowercase());
            }
        }
        for ip in [IpAddr::from([127, 0, 0, 1]), IpAddr::from(std::net::Ipv6Addr::LOCALHOST)].iter().chain(&names.ips) {
            if !list.ips.contains(ip) {
                list.ips.push(*ip);
            }
        }
        list
    }

    /// The host part of a `Host` value (`name`, `name:port`, `[v6]:port`) if it is allowed.
    pub fn allows(&self, host: &str) -> Option<String> {
        let host = host.trim();
        let name = if let Some(rest) = host.strip_prefix('[') {
            let (inner, after) = rest.split_once(']')?;
            if !(after.is_empty() || after.strip_prefix(':').is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()))) {
                return None;
            }
            inner.to_string()
        } else {
            match host.rsplit_once(':') {
                Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !name.contains(':') => name.into(),
                Some(_) if host.parse::<IpAddr>().is_ok() => host.into(),
                Some(_) => return None,
                None => host.into(),
            }
        };
        let lower = name.trim_end_matches('.').to_ascii_lowercase();
        let ok = match lower.parse::<IpAddr>() {
            Ok(ip) => self.ips.contains(&ip),
            Err(_) => self.names.contains(&lower),
        };
        ok.then_some(lower)
    }

    /// The names that reach a server listening on `listen`, best first (for `status`,
    /// `doctor` and pairing URLs): on a loopback address only `localhost` and that
    /// address; on a wildcard (`0.0.0.0`, `::`) `<host>.local`, configured names with a dot,
    /// then the addresses of that family (both for `::`), `localhost` last; on one address,
    /// that address. A bare single-label hostname is never offered: it is no name a client
    /// resolves reliably (mDNS answers `<host>.local`).
    pub fn preferred(&self, listen: SocketAddr) -> Vec<String> {
        let ip = listen.ip();
        if ip.is_loopback() {
            return vec!["localhost".into(), ip.to_string()];
        }
        if !ip.is_unspecified() {
            return vec![ip.to_string()];
        }
        let mut out: Vec<String> = self.names.iter().filter(|n| n.ends_with(".local")).cloned().collect();
        out.extend(self.names.iter().filter(|n| !n.ends_with(".local") && n.contains('.')).cloned());
        // Link-local addresses need a zone in a URL: not offered.
        let link_local = |ip: &IpAddr| match ip {
            IpAddr::V4(v4) => v4.is_link_local(),
            IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
        };
        // 0.0.0.0 takes IPv4 only; `::` takes both (Linux's default dual stack).
        let reaches = |a: &IpAddr| ip.is_ipv6() || a.is_ipv4();
        out.extend(self.ips.iter().filter(|a| !a.is_loopback() && !link_local(a) && reaches(a)).map(IpAddr::to_string));
        out.push("localhost".into());
        out
    }
}

/// The request's host: its `Host` header (HTTP/1) or `:authority` (h2, and HTTP/1's
/// absolute form).
///
/// # Errors
///
/// `INVALID_REQUEST` when the request names no host, names it in more than one `Host`
/// header, in a `Host` that is not text, or in a `Host` that disagrees with its
/// authority: two readers (a proxy, this server) must never pick different hosts.
pub fn host_of(uri: &hyper::Uri, headers: &HeaderMap) -> Result<String, ErrorBody> {
    let refuse = |m: &str| Err(ErrorBody::new(ErrorCode::InvalidRequest, m));
    let mut hosts = headers.get_all(HOST).iter();
    let header = hosts.next();
    if hosts.next().is_some() {
        return refuse("the request has more than one Host header; send one");
    }
    let authority = uri.authority().map(|a| a.as_str());
    match (header.map(|h| h.to_str()), authority) {
        (Some(Err(_)), _) => refuse("the Host header is not text"),
        (Some(Ok(h)), Some(a)) if !h.trim().eq_ignore_ascii_case(a) => {
            refuse("the Host header and the request's authority name different hosts")
        }
        (Some(Ok(h)), _) => Ok(h.trim().to_string()),
        (None, Some(a)) => Ok(a.to_string()),
        (None, None) => refuse("the request names no Host"),
    }
}

/// Counts wrong credentials over the last minute, across every client: beyond
/// [`MAX_FAILURES`] a wrong credential gets `429`. A correct one is checked first and so
/// never refused.
#[derive(Debug, Default)]
pub struct FailureLimiter {
    recent: Mutex<VecDeque<Instant>>,
}

impl FailureLimiter {
    /// Records one failure; `true` when the limit is exceeded.
    pub fn failed(&self) -> bool {
        let now = Instant::now();
        let mut recent = self.recent.lock_plain();
        while recent.front().is_some_and(|t| now.duration_since(*t) > FAILURE_WINDOW) {
            recent.pop_front();
        }
        let over = recent.len() >= MAX_FAILURES;
        // Bounded: beyond the limit only the count matters.
        if recent.len() < MAX_FAILURES * 4 {
            recent.push_back(now);
        }
        over
    }
}

/// How a request authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: Bearer`.
    Bearer,
    /// The session cookie.
    Cookie,
    /// Only a task token (the task's agent).
    TaskToken,
}

/// An authenticated request's caller.
#[derive(Debug, Clone)]
pub struct Authenticated {
    /// Who it is.
    pub caller: Caller,
    /// The task token it carried, passed to the daemon with each call.
    pub task_token: Option<String>,
    /// How it authenticated.
    pub how: Auth,
}

/// The session cookie's name for a server on `port` (several appliances on one host name,
/// different ports, keep their sessions apart).
pub fn cookie_name(port: u16) -> String {
    format!("tether_session_{port}")
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Authenticates a request: a Bearer token, else the session cookie; a task token alone
/// makes the caller that task's agent. Wrong credentials are counted in `limiter`.
pub fn authenticate(
    daemon: &Daemon,
    limiter: &FailureLimiter,
    headers: &HeaderMap,
    port: u16,
    peer: SocketAddr,
) -> Result<Authenticated, ErrorBody> {
    let task_token = headers.get(TASK_TOKEN_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string);
    let wrong = |what: &str| {
        let over = limiter.failed();
        // Past the limit the refusals are counted, not each logged (an attacker would
        // otherwise fill the log).
        if over {
            tracing::debug!(peer = %peer, what, "refused a request with wrong credentials (rate limited)");
        } else {
            tracing::warn!(peer = %peer, what, "refused a request with wrong credentials");
        }
        if over {
            ErrorBody::new(
                ErrorCode::RateLimited,
                "too many wrong tokens in the last minute; wait a minute (a correct token still works)",
            )
        } else {
            ErrorBody::new(ErrorCode::Unauthorized, format!("{what}: log in again or use a valid token"))
        }
    };
    let tokens = daemon.tokens();
    // Read before the check: a revocation between the check and what the caller then
    // takes (a WebSocket's session, an MCP session) refuses it.
    let epoch = daemon.revocation_epoch();
    let human = if let Some(secret) = bearer(headers) {
        let (name, role) = tokens.authenticate(secret).ok_or_else(|| wrong("the Bearer token is not valid"))?;
        Some((Caller::token(&name, role, peer).checked_at(epoch), Auth::Bearer))
    } else if let Some(value) = cookie_value(headers, &cookie_name(port)) {
        let (name, role) = tokens.verify_cookie(value).ok_or_else(|| wrong("the session has ended"))?;
        Some((Caller::token(&name, role, peer).checked_at(epoch), Auth::Cookie))
    } else {
        None
    };
    if let Some(t) = &task_token {
        if daemon.task_of_token(t).is_none() {
            let over = limiter.failed();
            if !over {
                tracing::warn!(peer = %peer, "refused a request with a dead task token");
            }
            return Err(if over {
                ErrorBody::new(ErrorCode::RateLimited, "too many wrong tokens in the last minute; wait a minute")
            } else {
                ErrorBody::new(ErrorCode::TaskEnded, "this task token's task has ended (or never existed): stop acting")
            });
        }
    }
    match (human, task_token) {
        (Some((caller, how)), task_token) => Ok(Authenticated { caller, task_token, how }),
        (None, Some(t)) => {
            Ok(Authenticated { caller: Caller::remote_agent(peer), task_token: Some(t), how: Auth::TaskToken })
        }
        (None, None) => Err(ErrorBody::new(
            ErrorCode::Unauthorized,
            "this needs a token: send `Authorization: Bearer TOKEN` (see `tether token add` or `tether pair`)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list() -> HostAllowlist {
        HostAllowlist::new(&ServerNames::of_machine("box", &[IpAddr::from([192, 168, 1, 5])], &[]))
    }

    #[test]
    fn hosts_are_matched_without_their_port() {
        let l = list();
        for ok in ["localhost", "LOCALHOST:8443", "box", "box.local:443", "127.0.0.1:8443", "[::1]:8443", "192.168.1.5"]
        {
            assert!(l.allows(ok).is_some(), "{ok}");
        }
        for bad in
            ["evil.example", "box.evil.example", "192.168.1.6", "[::2]", "box:x", "", "[::1]x", "localhost:80:80"]
        {
            assert_eq!(l.allows(bad), None, "{bad}");
        }
        let wildcard = SocketAddr::from(([0, 0, 0, 0], 443));
        assert_eq!(l.preferred(wildcard), ["box.local", "192.168.1.5", "localhost"], "never the bare `box`");
        let loopback = SocketAddr::from(([127, 0, 0, 1], 8443));
        assert_eq!(l.preferred(loopback), ["localhost", "127.0.0.1"], "only what reaches the listener");
        let one = SocketAddr::from(([192, 168, 1, 5], 443));
        assert_eq!(l.preferred(one), ["192.168.1.5"]);
        let v6 = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 8443));
        assert_eq!(l.preferred(v6), ["localhost", "::1"]);
    }

    fn host_headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(HOST, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn host_of_refuses_two_hosts_and_a_disagreeing_authority() {
        let origin_form: hyper::Uri = "/api/status".parse().unwrap();
        let absolute: hyper::Uri = "https://box.local:8443/api/status".parse().unwrap();
        let two = host_headers(&["localhost", "evil.example"]);
        assert_eq!(host_of(&origin_form, &two).unwrap_err().code, ErrorCode::InvalidRequest);
        assert_eq!(
            host_of(&origin_form, &host_headers(&["localhost", "localhost"])).unwrap_err().code,
            ErrorCode::InvalidRequest,
            "even the same twice"
        );
        let other = host_headers(&["evil.example"]);
        assert_eq!(host_of(&absolute, &other).unwrap_err().code, ErrorCode::InvalidRequest);
        assert_eq!(host_of(&origin_form, &HeaderMap::new()).unwrap_err().code, ErrorCode::InvalidRequest);
        let mut binary = HeaderMap::new();
        binary.insert(HOST, hyper::header::HeaderValue::from_bytes(b"box\xff").unwrap());
        assert_eq!(host_of(&absolute, &binary).unwrap_err().code, ErrorCode::InvalidRequest);
        // One host, named once or the same way twice (any case): that host.
        assert_eq!(host_of(&origin_form, &host_headers(&["box.local:8443"])).unwrap(), "box.local:8443");
        assert_eq!(host_of(&absolute, &host_headers(&["BOX.local:8443"])).unwrap(), "BOX.local:8443");
        assert_eq!(host_of(&absolute, &HeaderMap::new()).unwrap(), "box.local:8443");
    }

    #[test]
    fn the_limit_counts_a_minute_of_failures() {
        let l = FailureLimiter::default();
        for _ in 0..MAX_FAILURES {
            assert!(!l.failed());
        }
        assert!(l.failed(), "the 21st within the window");
    }

    #[test]
    fn cookies_and_bearer_are_read_from_their_headers() {
        let mut h = HeaderMap::new();
        h.insert(COOKIE, "a=1; tether_session_8443=abc.1.x; b=2".parse().unwrap());
        assert_eq!(cookie_value(&h, "tether_session_8443"), Some("abc.1.x"));
        assert_eq!(cookie_value(&h, "tether_session_443"), None);
        h.insert(AUTHORIZATION, "bearer  tt_x".parse().unwrap());
        assert_eq!(bearer(&h), Some("tt_x"));
    }
}
