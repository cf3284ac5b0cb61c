//! The numeric limits of tether/1. Every transport enforces the same values.

use std::time::Duration;

use serde::Serialize;

/// Protocol name and major version, as sent in `hello`.
pub const PROTOCOL_NAME: &str = "tether/1";
/// Largest request line accepted, in bytes, excluding the newline.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;
/// Deepest nesting of JSON arrays and objects accepted in a request.
pub const MAX_NESTING_DEPTH: usize = 32;
/// Messages that may wait in one connection's output queue.
pub const MAX_OUTPUT_MESSAGES: usize = 64;
/// Bytes that may wait in one connection's output queue.
pub const MAX_OUTPUT_BYTES: usize = 8 * 1024 * 1024;
/// A peer whose output makes no progress for this long is disconnected.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The limits as advertised by `hello`, so clients need not hard-code them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// See [`MAX_REQUEST_BYTES`].
    pub max_request_bytes: usize,
    /// See [`MAX_NESTING_DEPTH`].
    pub max_nesting_depth: usize,
    /// See [`MAX_OUTPUT_MESSAGES`].
    pub max_output_messages: usize,
    /// See [`MAX_OUTPUT_BYTES`].
    pub max_output_bytes: usize,
    /// See [`STALL_TIMEOUT`], in milliseconds.
    pub stall_timeout_ms: u64,
}

impl Limits {
    /// The limits this build enforces.
    pub const CURRENT: Limits = Limits {
        max_request_bytes: MAX_REQUEST_BYTES,
        max_nesting_depth: MAX_NESTING_DEPTH,
        max_output_messages: MAX_OUTPUT_MESSAGES,
        max_output_bytes: MAX_OUTPUT_BYTES,
        stall_timeout_ms: STALL_TIMEOUT.as_secs() * 1000,
    };
}
