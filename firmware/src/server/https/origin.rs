//! The one Origin policy of the HTTPS server: REST, forms, WebSockets, live video and MCP.
//!
//! By the time it runs the request's Host is one of the appliance's own names
//! ([`super::guard::HostAllowlist`]), so the console's own origin is `scheme://Host`. A
//! browser names the page that made a request in `Origin` (always on writes, WebSockets and
//! cross-origin fetches); programs send none. The rules, for every entry alike:
//!
//! - an `Origin` that is not our own is refused: a page elsewhere cannot drive the phone
//!   through a visitor's browser, whatever credential the browser would attach;
//! - a session cookie from another site (`Sec-Fetch-Site: cross-site`) is refused;
//! - a session cookie on a write, a stream (WebSocket, MCP) or a form that sets or clears it
//!   (`/logout`) must come with our Origin: the cookie is the one credential a browser sends
//!   by itself.
//!
//! Header values are compared as browsers may send them: trimmed and ASCII
//! case-insensitive; a header given twice counts if either copy says "foreign".

use hyper::header::{HeaderMap, ORIGIN};

use crate::protocol::{ErrorBody, ErrorCode};

/// What a request does, as far as the Origin policy cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// A read (`GET`, `HEAD`, `OPTIONS` under `/api/`).
    Read,
    /// A write under `/api/` (`POST`, `PUT`, `DELETE`).
    Write,
    /// A long-lived channel: `/api/ws`, `/api/video`, any `/mcp` request.
    Stream,
    /// An unauthenticated form that sets or clears the session cookie (`/login`,
    /// `/api/pair`, `/logout`).
    Form,
}

/// The console's own origin for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnOrigin(String);

impl OwnOrigin {
    /// `scheme://host` as the request named its (already allowed) Host, port included.
    pub fn new(scheme: &str, host: &str) -> OwnOrigin {
        OwnOrigin(format!("{scheme}://{host}"))
    }

    /// Checks one request's headers under the policy; `cookie` says whether its
    /// credential is the session cookie.
    pub fn check(&self, headers: &HeaderMap, entry: Entry, cookie: bool) -> Result<(), ErrorBody> {
        let refuse = |m: &str| Err(ErrorBody::new(ErrorCode::PermissionDenied, m));
        // A value that is not text is not one a browser sends: counted as cross-site.
        let cross_site = headers
            .get_all("sec-fetch-site")
            .iter()
            .any(|v| v.to_str().map_or(true, |v| v.trim().eq_ignore_ascii_case("cross-site")));
        if cookie && cross_site {
            return refuse("a session cookie is not accepted from another site");
        }
        // An Origin that is not text is still an Origin, and not ours: "" refuses it
        // (`.ok()` would read it as no Origin at all, which programs may send).
        let ours = |v: &hyper::header::HeaderValue| v.to_str().unwrap_or("").trim().eq_ignore_ascii_case(&self.0);
        let origins = headers.get_all(ORIGIN);
        match origins.iter().next() {
            Some(_) if origins.iter().all(ours) => Ok(()),
            Some(_) => refuse(match entry {
                Entry::Form => "this form only works from the appliance's own pages",
                Entry::Stream => "this stream takes only the console's own Origin",
                Entry::Read | Entry::Write => "requests from another site's pages are refused (Origin is not ours)",
            }),
            None if cookie && matches!(entry, Entry::Write | Entry::Stream | Entry::Form) => {
                refuse("a session cookie needs the console's own Origin header (programs: use a Bearer token)")
            }
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    const ALL: [Entry; 4] = [Entry::Read, Entry::Write, Entry::Stream, Entry::Form];

    #[test]
    fn a_foreign_origin_is_refused_everywhere_with_any_credential() {
        let own = OwnOrigin::new("https", "box.local:8443");
        let evil = headers(&[("origin", "https://evil.example")]);
        let port = headers(&[("origin", "https://box.local:9999")]);
        for entry in ALL {
            for cookie in [false, true] {
                assert!(own.check(&evil, entry, cookie).is_err(), "{entry:?} cookie={cookie}");
                assert!(own.check(&port, entry, cookie).is_err(), "another port: {entry:?}");
                assert!(own.check(&headers(&[("origin", "HTTPS://BOX.LOCAL:8443")]), entry, cookie).is_ok());
            }
        }
    }

    #[test]
    fn a_cookie_needs_our_origin_to_write_or_stream_but_not_to_read() {
        let own = OwnOrigin::new("https", "box.local");
        let none = HeaderMap::new();
        assert!(own.check(&none, Entry::Read, true).is_ok());
        assert!(own.check(&none, Entry::Write, true).is_err());
        assert!(own.check(&none, Entry::Stream, true).is_err());
        assert!(own.check(&none, Entry::Form, true).is_err(), "a logout with the cookie and no Origin");
        assert!(own.check(&none, Entry::Form, false).is_ok(), "a program's login");
        for entry in ALL {
            assert!(own.check(&none, entry, false).is_ok(), "programs send no Origin: {entry:?}");
        }
    }

    #[test]
    fn a_cross_site_cookie_is_refused_even_on_reads() {
        let own = OwnOrigin::new("https", "box.local");
        let h = headers(&[("sec-fetch-site", "cross-site")]);
        assert!(own.check(&h, Entry::Read, true).is_err());
        assert!(own.check(&h, Entry::Read, false).is_ok(), "a Bearer token is not sent by the browser itself");
    }

    #[test]
    fn sec_fetch_site_is_read_in_any_case_and_with_spaces() {
        let own = OwnOrigin::new("https", "box.local");
        for value in ["Cross-Site", "CROSS-SITE", " cross-site ", "cross-site\t"] {
            let h = headers(&[("sec-fetch-site", value)]);
            assert!(own.check(&h, Entry::Read, true).is_err(), "{value:?}");
        }
        for value in ["same-origin", "Same-Site", "none"] {
            assert!(own.check(&headers(&[("sec-fetch-site", value)]), Entry::Read, true).is_ok(), "{value:?}");
        }
        let mut two = headers(&[("sec-fetch-site", "same-origin")]);
        two.append("sec-fetch-site", "cross-site".parse().unwrap());
        assert!(own.check(&two, Entry::Read, true).is_err(), "a second copy counts");
    }

    #[test]
    fn every_origin_header_must_be_ours_and_spaces_do_not_matter() {
        let own = OwnOrigin::new("https", "box.local");
        assert!(own.check(&headers(&[("origin", " https://box.local ")]), Entry::Write, true).is_ok());
        let mut two = headers(&[("origin", "https://box.local")]);
        two.append(ORIGIN, "https://evil.example".parse().unwrap());
        for entry in ALL {
            assert!(own.check(&two, entry, false).is_err(), "a second, foreign Origin: {entry:?}");
        }
    }
}
