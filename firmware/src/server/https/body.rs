//! Response bodies: whole (JSON, PNG, text) or streamed lines (a task's lease, a followed
//! event stream), and the error answer every refusal uses.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame};
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use hyper::{Response, StatusCode};
use tokio::sync::mpsc;

use crate::protocol::{ErrorBody, ErrorCode};

/// Every response's body type.
pub type ResponseBody = UnsyncBoxBody<Bytes, Infallible>;

/// A whole body.
pub fn full(bytes: impl Into<Bytes>) -> ResponseBody {
    Full::new(bytes.into()).boxed_unsync()
}

/// A `200` (or `status`) JSON answer.
pub fn json(status: StatusCode, value: &serde_json::Value) -> Response<ResponseBody> {
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    let mut r = Response::new(full(bytes));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The HTTP status of a wire error code: the code's class (DESIGN: the same codes as the
/// socket; the status only says which kind of failure it is).
pub fn status_of(code: ErrorCode) -> StatusCode {
    use ErrorCode as C;
    match code {
        C::InvalidJson
        | C::NestingTooDeep
        | C::InvalidRequest
        | C::InvalidId
        | C::InvalidParams
        | C::UnsupportedProtocol
        | C::OutOfBounds
        | C::UntypeableText
        | C::TextHasNewline => StatusCode::BAD_REQUEST,
        C::RequestTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        C::Unauthorized => StatusCode::UNAUTHORIZED,
        C::PermissionDenied => StatusCode::FORBIDDEN,
        C::UnknownMethod | C::NotFound | C::NoSuchTask | C::NoSuchToken => StatusCode::NOT_FOUND,
        C::Unsupported => StatusCode::NOT_IMPLEMENTED,
        C::RateLimited => StatusCode::TOO_MANY_REQUESTS,
        C::DeviceUnavailable | C::HostNotConnected | C::Busy | C::NoFrame | C::ShuttingDown => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        C::Timeout => StatusCode::GATEWAY_TIMEOUT,
        C::Cancelled
        | C::Interrupted
        | C::StaleObservation
        | C::ObservationExpired
        | C::NeedsObservation
        | C::OperationConflict
        | C::TaskRunning
        | C::TaskActive
        | C::InvalidTransition
        | C::Rejected
        | C::ScopeExceeded
        | C::DuplicateId
        | C::TokenExists
        | C::LastAdmin
        | C::KindFixed
        | C::NotAttached => StatusCode::CONFLICT,
        C::TaskEnded | C::PairingInvalid | C::TicketInvalid => StatusCode::GONE,
        C::CalibrationFailed
        | C::NoVisibleEffect
        | C::UnexpectedChange
        | C::AppNotOpened
        | C::TextNotFound
        | C::AmbiguousText
        | C::ExpectedTextMissing
        | C::UnexpectedText => StatusCode::UNPROCESSABLE_ENTITY,
        C::OcrUnavailable | C::UpdateUnavailable => StatusCode::NOT_IMPLEMENTED,
        C::OcrFailed => StatusCode::SERVICE_UNAVAILABLE,
        C::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        C::StorageFailed => StatusCode::INSUFFICIENT_STORAGE,
    }
}

/// The answer to a failed request: `{"error": {...}}` (the socket's error object) with
/// the code's status; `401` says how to authenticate, `429` and `503` when to
/// come back.
pub fn error(body: ErrorBody) -> Response<ResponseBody> {
    let status = status_of(body.code);
    let mut r = json(status, &serde_json::json!({"error": body}));
    match status {
        StatusCode::UNAUTHORIZED => {
            r.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"tether\""));
        }
        StatusCode::TOO_MANY_REQUESTS => {
            r.headers_mut().insert(RETRY_AFTER, HeaderValue::from_static("60"));
        }
        StatusCode::SERVICE_UNAVAILABLE => {
            r.headers_mut().insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        _ => {}
    }
    r
}

/// Shorthand for [`error`] with a fresh body.
pub fn refuse(code: ErrorCode, message: impl Into<String>) -> Response<ResponseBody> {
    error(ErrorBody::new(code, message))
}

/// A body fed line by line from a channel; ends when the sender is dropped. Dropping the
/// body (the client went away) drops `guard` with it: for a task's lease, that is the
/// session, and the task is abandoned.
pub struct LineBody<G> {
    rx: mpsc::Receiver<Bytes>,
    _guard: G,
}

impl<G> LineBody<G> {
    /// A body reading `rx`, holding `guard` for as long as it lives.
    pub fn new(rx: mpsc::Receiver<Bytes>, guard: G) -> Self {
        LineBody { rx, _guard: guard }
    }
}

impl<G: Unpin> Body for LineBody<G> {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx.poll_recv(cx).map(|line| line.map(|b| Ok(Frame::data(b))))
    }
}

/// A streamed NDJSON response.
pub fn lines<G: Unpin + Send + 'static>(rx: mpsc::Receiver<Bytes>, guard: G) -> Response<ResponseBody> {
    let mut r = Response::new(LineBody::new(rx, guard).boxed_unsync());
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    r.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_say_how_to_go_on() {
        let r = refuse(ErrorCode::Unauthorized, "no token");
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert!(r.headers()[WWW_AUTHENTICATE].to_str().unwrap().starts_with("Bearer"));
        let r = refuse(ErrorCode::RateLimited, "slow down");
        assert_eq!(
            (r.status(), &r.headers()[RETRY_AFTER]),
            (StatusCode::TOO_MANY_REQUESTS, &HeaderValue::from_static("60"))
        );
        assert_eq!(status_of(ErrorCode::TaskEnded), StatusCode::GONE);
        assert_eq!(status_of(ErrorCode::PermissionDenied), StatusCode::FORBIDDEN);
    }
}
