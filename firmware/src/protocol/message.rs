//! Messages the daemon sends: responses and events.

use serde::Serialize;
use serde_json::Value;

use super::{ErrorBody, RequestId};

/// The answer to one request. `id` is `None` only when the request's id could not be read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Response {
    /// The request's id, or `null` when it was unreadable.
    pub id: Option<RequestId>,
    /// Whether the request succeeded.
    pub ok: bool,
    /// The result, present when `ok`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The error, present when not `ok`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

impl Response {
    /// A successful response.
    pub fn ok(id: RequestId, result: Value) -> Self {
        Response { id: Some(id), ok: true, result: Some(result), error: None }
    }

    /// A failed response.
    pub fn err(id: Option<RequestId>, error: ErrorBody) -> Self {
        Response { id, ok: false, result: None, error: Some(error) }
    }
}

/// An unsolicited message; `seq` is a per-stream sequence number a client can resume after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// The event kind, e.g. `"task"`.
    pub event: String,
    /// Sequence number within its stream, strictly increasing.
    pub seq: u64,
    /// Event-specific fields, flattened into the object.
    #[serde(flatten)]
    pub body: serde_json::Map<String, Value>,
}

/// Anything written to a connection.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Outgoing {
    /// A response to a request.
    Response(Response),
    /// An event.
    Event(Event),
}

impl Outgoing {
    /// Serializes the message as one JSON line including the trailing newline.
    pub fn to_line(&self) -> Vec<u8> {
        // Serializing these types cannot fail: every map key is a string and no custom
        // Serialize impl returns an error. Fall back to an INTERNAL error line regardless,
        // so a bug here can never kill a connection silently.
        let mut line = serde_json::to_vec(self).unwrap_or_else(|_| {
            br#"{"id":null,"ok":false,"error":{"code":"INTERNAL","message":"response could not be encoded","retryable":false,"side_effect_possible":false}}"#.to_vec()
        });
        line.push(b'\n');
        line
    }
}
