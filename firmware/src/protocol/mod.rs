//! tether/1: the one protocol every caller speaks.
//!
//! JSON lines over the Unix socket, the same JSON as WebSocket text messages. This module
//! holds the wire types, the limits and the single [`ErrorCode`] enum; it parses untrusted
//! bytes into validated [`Request`]s and never performs I/O itself.
#![forbid(unsafe_code)]

pub mod access;
mod error;
pub mod host_params;
mod limits;
mod message;
pub mod params;
mod request;
mod strict_json;
pub mod task_params;
pub mod text_params;
pub mod token_params;
pub mod update_params;

pub use access::{Acting, Denied, Humans, Role, Rule, TokenRule};
pub use error::{ErrorBody, ErrorCode};
pub use limits::{
    Limits, MAX_NESTING_DEPTH, MAX_OUTPUT_BYTES, MAX_OUTPUT_MESSAGES, MAX_REQUEST_BYTES, PROTOCOL_NAME, STALL_TIMEOUT,
};
pub use message::{Event, Outgoing, Response};
pub use request::{
    check_document, parse_request, parse_value, Call, HelloParams, Method, Request, RequestError, RequestId,
    StatusParams,
};
