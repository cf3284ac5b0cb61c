//! A task's evidence over HTTPS: `GET /api/tasks/{id}/report` (HTML),
//! `.../junit.xml`, `.../final.png` and `.../recording.mp4` (byte ranges, as video players
//! ask). Each is `task_report` or `task_recording` through the dispatcher, like every
//! route: the report's HTML links `recording.mp4` relative to itself, so the same file
//! works here and saved next to its recording.

use base64::Engine as _;
use http_body_util::BodyExt as _;
use hyper::header::{HeaderValue, ACCEPT_RANGES, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, RANGE};
use hyper::{HeaderMap, Response, StatusCode};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::body::{self, ResponseBody};
use super::guard::Authenticated;
use super::shared::Shared;
use crate::protocol::task_params::MAX_RECORDING_CHUNK;
use crate::protocol::{ErrorBody, ErrorCode};
use crate::report::CONTENT_SECURITY_POLICY;
use crate::server::dispatch;

type Answer = Response<ResponseBody>;

/// What of a task's report a route answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Artifact {
    /// The HTML report.
    Html,
    /// The JUnit XML.
    Junit,
    /// The screen when the task ended.
    FinalPng,
}

fn params(task: i64) -> Map<String, Value> {
    let mut p = Map::new();
    p.insert("task".into(), task.into());
    p
}

fn typed(bytes: impl Into<bytes::Bytes>, content_type: &'static str) -> Answer {
    let mut r = Response::new(body::full(bytes));
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// One of the report's files.
pub(super) async fn artifact(
    shared: &Shared,
    auth: &Authenticated,
    task: i64,
    what: Artifact,
) -> Result<Answer, ErrorBody> {
    let request = dispatch::request("task_report", params(task), auth.task_token.as_deref())?;
    let value = dispatch::call(&shared.daemon, &auth.caller, &request).await?;
    let text = |key: &str| value[key].as_str().map(str::to_string).unwrap_or_default();
    Ok(match what {
        Artifact::Html => {
            let mut r = typed(text("html"), "text/html; charset=utf-8");
            // Titles and notes come from agents: no script may run on this origin.
            r.headers_mut().insert("content-security-policy", HeaderValue::from_static(CONTENT_SECURITY_POLICY));
            r
        }
        Artifact::Junit => typed(text("junit"), "application/xml; charset=utf-8"),
        Artifact::FinalPng => {
            let png = value["final_png"]
                .as_str()
                .and_then(|d| base64::engine::general_purpose::STANDARD.decode(d).ok())
                .ok_or_else(|| {
                    ErrorBody::new(ErrorCode::NotFound, format!("task {task} has no picture of its final screen"))
                })?;
            typed(png, "image/png")
        }
    })
}

/// A `Range` header's one range, as the client wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ByteRange {
    /// `bytes=a-` or `bytes=a-b` (inclusive).
    From(u64, Option<u64>),
    /// `bytes=-n`: the last `n` bytes.
    Last(u64),
}

/// The one range of a `Range: bytes=…` header; `None` without one. Several ranges are
/// answered as the first (players ask for one).
fn byte_range(headers: &HeaderMap) -> Result<Option<ByteRange>, ErrorBody> {
    let Some(value) = headers.get(RANGE) else { return Ok(None) };
    let bad = || ErrorBody::new(ErrorCode::InvalidParams, "Range must be bytes=FIRST-[LAST] or bytes=-COUNT");
    let text = value.to_str().map_err(|_| bad())?;
    let spec = text.trim().strip_prefix("bytes=").ok_or_else(bad)?;
    let first = spec.split(',').next().unwrap_or("").trim();
    let (a, b) = first.split_once('-').ok_or_else(bad)?;
    let num = |s: &str| s.trim().parse::<u64>().map_err(|_| bad());
    match (a.trim().is_empty(), b.trim().is_empty()) {
        (true, false) => Ok(Some(ByteRange::Last(num(b)?))),
        (false, true) => Ok(Some(ByteRange::From(num(a)?, None))),
        (false, false) => {
            let (a, b) = (num(a)?, num(b)?);
            if b < a {
                return Err(bad());
            }
            Ok(Some(ByteRange::From(a, Some(b))))
        }
        (true, true) => Err(bad()),
    }
}

/// One `task_recording` call: (bytes, file size).
async fn piece(
    daemon: &crate::daemon::Daemon,
    auth: (&crate::daemon::Caller, Option<&str>),
    task: i64,
    offset: u64,
    length: u64,
) -> Result<(Vec<u8>, u64), ErrorBody> {
    let mut p = params(task);
    p.insert("offset".into(), offset.into());
    p.insert("length".into(), length.clamp(1, MAX_RECORDING_CHUNK).into());
    let request = dispatch::request("task_recording", p, auth.1)?;
    let value = dispatch::call(daemon, auth.0, &request).await?;
    let data = value["data"]
        .as_str()
        .and_then(|d| base64::engine::general_purpose::STANDARD.decode(d).ok())
        .ok_or_else(|| ErrorBody::new(ErrorCode::Internal, "the recording's answer had no data"))?;
    Ok((data, value["size"].as_u64().unwrap_or(0)))
}

/// `GET /api/tasks/{id}/recording.mp4`: the whole file (streamed a piece at a time) or
/// the range asked for (at most [`MAX_RECORDING_CHUNK`] bytes of it: players ask on).
pub(super) async fn recording(
    shared: &Shared,
    auth: &Authenticated,
    task: i64,
    headers: &HeaderMap,
) -> Result<Answer, ErrorBody> {
    let range = byte_range(headers)?;
    let who = (&auth.caller, auth.task_token.as_deref());
    let daemon = &shared.daemon;
    let (first, size) = match range {
        None | Some(ByteRange::From(0, _)) => piece(daemon, who, task, 0, MAX_RECORDING_CHUNK).await?,
        Some(ByteRange::From(a, _)) => piece(daemon, who, task, a, MAX_RECORDING_CHUNK).await?,
        Some(ByteRange::Last(_)) => piece(daemon, who, task, 0, 1).await?,
    };
    let mut r = match range {
        None => {
            // The whole file: the first piece now, the rest as the client reads.
            let (tx, rx) = mpsc::channel(2);
            let sent = first.len() as u64;
            let _ = tx.try_send(bytes::Bytes::from(first));
            let (daemon, caller, token) = (shared.daemon.clone(), auth.caller.clone(), auth.task_token.clone());
            tokio::spawn(async move {
                let mut at = sent;
                while at < size {
                    match piece(&daemon, (&caller, token.as_deref()), task, at, MAX_RECORDING_CHUNK).await {
                        Ok((data, _)) if !data.is_empty() => {
                            at += data.len() as u64;
                            if tx.send(bytes::Bytes::from(data)).await.is_err() {
                                return; // the client went away
                            }
                        }
                        // Gone meanwhile (evicted, deleted): the body ends short and the
                        // client sees a truncated transfer, never other bytes.
                        _ => return,
                    }
                }
            });
            let mut r = Response::new(body::LineBody::new(rx, ()).boxed_unsync());
            r.headers_mut().insert(CONTENT_LENGTH, HeaderValue::from(size));
            r
        }
        Some(range) => {
            let (a, want_end) = match range {
                ByteRange::From(a, b) => (a, b.unwrap_or(u64::MAX).min(size.saturating_sub(1))),
                ByteRange::Last(n) => (size.saturating_sub(n), size.saturating_sub(1)),
            };
            if a >= size || size == 0 {
                let mut r = body::error(ErrorBody::new(
                    ErrorCode::InvalidParams,
                    format!("the range starts past the recording's {size} bytes"),
                ));
                *r.status_mut() = StatusCode::RANGE_NOT_SATISFIABLE;
                if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                    r.headers_mut().insert(CONTENT_RANGE, v);
                }
                return Ok(r);
            }
            let data = match range {
                ByteRange::From(..) => first,
                ByteRange::Last(_) => piece(daemon, who, task, a, want_end - a + 1).await?.0,
            };
            let len = (data.len() as u64).min(want_end - a + 1);
            let data = bytes::Bytes::from(data).slice(..usize::try_from(len).unwrap_or(usize::MAX));
            let mut r = Response::new(body::full(data));
            *r.status_mut() = StatusCode::PARTIAL_CONTENT;
            if let Ok(v) = HeaderValue::from_str(&format!("bytes {a}-{}/{size}", a + len.saturating_sub(1))) {
                r.headers_mut().insert(CONTENT_RANGE, v);
            }
            r
        }
    };
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("video/mp4"));
    r.headers_mut().insert(ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(range: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(RANGE, HeaderValue::from_str(range).expect("header"));
        h
    }

    #[test]
    fn ranges_parse_as_players_send_them_and_nonsense_is_refused() {
        assert_eq!(byte_range(&HeaderMap::new()).expect("none"), None);
        assert_eq!(byte_range(&headers("bytes=0-")).expect("open"), Some(ByteRange::From(0, None)));
        assert_eq!(byte_range(&headers("bytes=100-199")).expect("closed"), Some(ByteRange::From(100, Some(199))));
        assert_eq!(byte_range(&headers("bytes=-500")).expect("suffix"), Some(ByteRange::Last(500)));
        assert_eq!(
            byte_range(&headers("bytes=5-9, 20-30")).expect("first of several"),
            Some(ByteRange::From(5, Some(9)))
        );
        for bad in ["items=0-1", "bytes=9-5", "bytes=-", "bytes=a-b", "bytes=1"] {
            assert!(byte_range(&headers(bad)).is_err(), "{bad}");
        }
    }
}
