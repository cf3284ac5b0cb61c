//! The single list of tether/1 error codes, and the mapping of internal errors onto them.

use std::fmt;

use serde::Serialize;

use crate::daemon::{DaemonError, InputError};

/// Every error a tether/1 caller can receive. The serialized names are stable: clients may
/// match on them. Add variants at the end of a group; never rename one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    // --- the request itself is malformed ---
    /// The line is not valid JSON (or not UTF-8).
    InvalidJson,
    /// The line exceeds [`MAX_REQUEST_BYTES`](super::MAX_REQUEST_BYTES); it was discarded.
    RequestTooLarge,
    /// JSON nesting exceeds [`MAX_NESTING_DEPTH`](super::MAX_NESTING_DEPTH).
    NestingTooDeep,
    /// The JSON is valid but not a request object (not an object, or `method` missing).
    InvalidRequest,
    /// `id` is missing, negative, fractional or not a number.
    InvalidId,
    /// `method` names no method of tether/1.
    UnknownMethod,
    /// A parameter is unknown, missing, or of the wrong type or range.
    InvalidParams,
    /// `hello` asked for a protocol this daemon does not speak.
    UnsupportedProtocol,
    // --- who is asking ---
    /// The caller's role does not allow this method.
    PermissionDenied,
    // --- the device ---
    /// The HID sink or the video source is not available.
    DeviceUnavailable,
    /// No USB host (phone) has configured the gadget; nothing was sent.
    HostNotConnected,
    /// Another input sequence holds the device and the caller asked not to wait.
    Busy,
    /// The operation was cancelled (by `cancel`, a disconnect or a pause).
    Cancelled,
    /// The operation did not complete in time.
    Timeout,
    // --- the daemon ---
    /// The daemon is shutting down.
    ShuttingDown,
    /// An internal failure; the daemon keeps running. The message says what failed.
    Internal,
}

impl ErrorCode {
    /// Whether the same request may succeed if sent again later unchanged.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            ErrorCode::DeviceUnavailable
                | ErrorCode::HostNotConnected
                | ErrorCode::Busy
                | ErrorCode::Timeout
                | ErrorCode::ShuttingDown
        )
    }

    /// Whether input may already have reached the phone when this error is returned, by
    /// default. A specific error may say more (see [`ErrorBody::side_effect_possible`]).
    pub fn side_effect_possible(self) -> bool {
        matches!(
            self,
            ErrorCode::Cancelled | ErrorCode::Timeout | ErrorCode::Internal
        )
    }

    /// The stable wire name, e.g. `"INVALID_JSON"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidJson => "INVALID_JSON",
            ErrorCode::RequestTooLarge => "REQUEST_TOO_LARGE",
            ErrorCode::NestingTooDeep => "NESTING_TOO_DEEP",
            ErrorCode::InvalidRequest => "INVALID_REQUEST",
            ErrorCode::InvalidId => "INVALID_ID",
            ErrorCode::UnknownMethod => "UNKNOWN_METHOD",
            ErrorCode::InvalidParams => "INVALID_PARAMS",
            ErrorCode::UnsupportedProtocol => "UNSUPPORTED_PROTOCOL",
            ErrorCode::PermissionDenied => "PERMISSION_DENIED",
            ErrorCode::DeviceUnavailable => "DEVICE_UNAVAILABLE",
            ErrorCode::HostNotConnected => "HOST_NOT_CONNECTED",
            ErrorCode::Busy => "BUSY",
            ErrorCode::Cancelled => "CANCELLED",
            ErrorCode::Timeout => "TIMEOUT",
            ErrorCode::ShuttingDown => "SHUTTING_DOWN",
            ErrorCode::Internal => "INTERNAL",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `error` object of a failed response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorBody {
    /// The stable code.
    pub code: ErrorCode,
    /// What happened and what to do about it, for a person. Not stable; never contains
    /// paths, errno details or secrets.
    pub message: String,
    /// See [`ErrorCode::retryable`].
    pub retryable: bool,
    /// Whether input may already have reached the phone.
    pub side_effect_possible: bool,
}

impl ErrorBody {
    /// An error with the code's default flags.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody {
            code,
            message: message.into(),
            retryable: code.retryable(),
            side_effect_possible: code.side_effect_possible(),
        }
    }
}

/// The one place internal daemon errors become wire errors.
impl From<&DaemonError> for ErrorBody {
    fn from(err: &DaemonError) -> Self {
        let (code, side_effect) = match err {
            DaemonError::PermissionDenied { .. } => (ErrorCode::PermissionDenied, false),
            DaemonError::UnsupportedProtocol { .. } => (ErrorCode::UnsupportedProtocol, false),
            DaemonError::Input(InputError::HostNotConnected) => {
                (ErrorCode::HostNotConnected, false)
            }
            DaemonError::Input(InputError::Cancelled { reports_sent }) => {
                (ErrorCode::Cancelled, *reports_sent > 0)
            }
            DaemonError::Input(InputError::Hid { reports_sent, .. }) => {
                (ErrorCode::DeviceUnavailable, *reports_sent > 0)
            }
            DaemonError::ShuttingDown => (ErrorCode::ShuttingDown, false),
        };
        let mut body = ErrorBody::new(code, err.public_message());
        body.side_effect_possible = side_effect;
        body
    }
}
