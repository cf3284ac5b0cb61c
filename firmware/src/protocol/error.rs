//! The single list of tether/1 error codes, and the mapping of internal errors onto them.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Every error a tether/1 caller can receive. The serialized names are stable: clients may
/// match on them. Add variants at the end of a group; never rename one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    /// The method exists but not in this mode (e.g. `sim_state` on hardware).
    Unsupported,
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
    /// The request was cancelled (by `cancel` or a disconnect) before any of its input
    /// reached the phone, or while it watched the screen after its input.
    Cancelled,
    /// The operation did not complete in time.
    Timeout,
    /// No frame is available (no signal, or none yet).
    NoFrame,
    // --- observations and actions ---
    /// The observation was invalidated (the picture changed generation, or someone else's
    /// input moved the phone on). Take a new screenshot.
    StaleObservation,
    /// The observation is unknown or older than 30 s. Take a new screenshot.
    ObservationExpired,
    /// Coordinates lie outside the observation image.
    OutOfBounds,
    /// The operation_id was used before with different arguments.
    OperationConflict,
    /// The phone's keyboard layout cannot type some characters; nothing was typed.
    UntypeableText,
    /// Calibration could not measure the pointer; the previous calibration is kept.
    CalibrationFailed,
    // --- tasks ---
    /// A task is running and this input is not its own: pause or take it over first.
    TaskRunning,
    /// The task token names a task that has ended (or never existed): stop acting.
    TaskEnded,
    /// Another task holds the phone; one task at a time.
    TaskActive,
    /// No task with that id.
    NoSuchTask,
    /// The control does not apply in the task's current state.
    InvalidTransition,
    /// Someone else used the phone: take a fresh screenshot before the next action.
    NeedsObservation,
    /// A human rejected this step; the task goes on (stay within its scope).
    Rejected,
    /// The task reached its step or time limit and was stopped.
    ScopeExceeded,
    // --- the daemon ---
    /// The daemon is shutting down.
    ShuttingDown,
    /// An internal failure; the daemon keeps running. The message says what failed.
    Internal,
    // --- added later (grouped here so existing names never move) ---
    /// Another request with this id is still in flight on this connection; ids must be
    /// unique among in-flight requests so replies and `cancel` are unambiguous.
    DuplicateId,
    /// Running input was stopped before it ended: by a task control (pause, takeover,
    /// stop), the task's end, `cancel`, its requester gone, or shutdown. The daemon released
    /// what it held; `reports_sent` says how far it got. Look at the screen before going on.
    Interrupted,
    // --- network callers (HTTPS, WebSocket, MCP) ---
    /// No credentials, or wrong ones: send `Authorization: Bearer TOKEN`, a session cookie
    /// or a task token.
    Unauthorized,
    /// Too many wrong tokens lately; a correct token still works. Wait a minute.
    RateLimited,
    /// No token has that name.
    NoSuchToken,
    /// A token with that name exists.
    TokenExists,
    /// The last admin token cannot be revoked.
    LastAdmin,
    /// The pairing code is unknown, used or expired.
    PairingInvalid,
    /// No such path on this server.
    NotFound,
    // --- hosts and live video (WebSocket) ---
    /// The connection's kind was fixed by its first `hello`; it cannot change.
    KindFixed,
    /// `mailbox_flush` or `user_message` before `attach`: attach to a running task first.
    NotAttached,
    /// The video ticket is unknown, used, expired or from an older video generation:
    /// call `video_open` for a new one.
    TicketInvalid,
    // --- act and verify ---
    /// The input was sent but the screen did not change before the timeout (a missed
    /// tap, a control not ready, a dead one). `effect` has a fresh observation: look at
    /// it before going on.
    NoVisibleEffect,
    /// `expect: "no_change"`, and the screen changed; `effect` says where.
    UnexpectedChange,
    /// `open_app` typed the name into Spotlight and pressed Return, but no app came to the
    /// front (no app of that name: Spotlight offered a web or Siri suggestion, or nothing).
    /// Spotlight was dismissed (Cmd+H): the phone is on the home screen. `effect` has a
    /// fresh observation. Check the app's name as the home screen shows it.
    AppNotOpened,
    /// `type_text` with a line break and `newlines: "refuse"` (the default): nothing was
    /// typed. A single-line field would end editing at the first Return and lose the rest.
    /// Pass `newlines: "return"` for a multi-line field, or type the lines one by one.
    TextHasNewline,
    // --- the appliance's disk ---
    /// The change could not be saved (the appliance's disk is full, or its file system
    /// refuses writes), so it was not made: nothing changed. Reads still work;
    /// `status.storage` says why. Retry once space was freed.
    StorageFailed,
    // --- reading the screen ---
    /// No text on the screen matches the query; nothing was sent. `text_search.nearest`
    /// lists what the screen says that comes closest.
    TextNotFound,
    /// Several places match the query equally well; nothing was sent.
    /// `text_search.candidates` lists them: pass `index` (0-based, reading order), a
    /// `region`, or a longer text.
    AmbiguousText,
    /// `expect_text`: the input was sent, the screen settled, and the text is not on it.
    /// `effect` has a fresh observation.
    ExpectedTextMissing,
    /// `expect_no_text`: the input was sent, the screen settled, and the text is on it.
    UnexpectedText,
    /// This appliance cannot read text (the OCR engine or its language data is missing,
    /// or reading is disabled); the message names what to install. `hello`'s
    /// `capabilities.text` says so up front.
    OcrUnavailable,
    /// Reading text failed this time (the reader took too long or stopped); it was
    /// restarted and the next read works. Retry.
    OcrFailed,
    /// This daemon cannot take updates (not the appliance image, no A/B boot through
    /// tether's boot script, or RAUC missing); the message says which.
    UpdateUnavailable,
}

impl ErrorCode {
    /// The code with this wire name (`"INVALID_JSON"`), if this build knows it.
    pub fn from_wire(name: &str) -> Option<ErrorCode> {
        use serde::de::value::{Error, StrDeserializer};
        ErrorCode::deserialize(StrDeserializer::<Error>::new(name)).ok()
    }

    /// Whether the same request may succeed if sent again later unchanged.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            ErrorCode::DeviceUnavailable
                | ErrorCode::HostNotConnected
                | ErrorCode::Busy
                | ErrorCode::Timeout
                | ErrorCode::ShuttingDown
                | ErrorCode::NoFrame
                | ErrorCode::StaleObservation
                | ErrorCode::ObservationExpired
                | ErrorCode::NeedsObservation
                | ErrorCode::TaskActive
                | ErrorCode::RateLimited
                | ErrorCode::StorageFailed
                | ErrorCode::OcrFailed
        )
    }

    /// Whether input may already have reached the phone when this error is returned, by
    /// default. A specific error may say more (see [`ErrorBody::side_effect_possible`]).
    pub fn side_effect_possible(self) -> bool {
        matches!(
            self,
            ErrorCode::Cancelled
                | ErrorCode::Timeout
                | ErrorCode::Internal
                | ErrorCode::Interrupted
                | ErrorCode::NoVisibleEffect
                | ErrorCode::UnexpectedChange
                | ErrorCode::AppNotOpened
                | ErrorCode::ExpectedTextMissing
                | ErrorCode::UnexpectedText
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
            ErrorCode::Unsupported => "UNSUPPORTED",
            ErrorCode::NoFrame => "NO_FRAME",
            ErrorCode::StaleObservation => "STALE_OBSERVATION",
            ErrorCode::ObservationExpired => "OBSERVATION_EXPIRED",
            ErrorCode::OutOfBounds => "OUT_OF_BOUNDS",
            ErrorCode::OperationConflict => "OPERATION_CONFLICT",
            ErrorCode::UntypeableText => "UNTYPEABLE_TEXT",
            ErrorCode::CalibrationFailed => "CALIBRATION_FAILED",
            ErrorCode::PermissionDenied => "PERMISSION_DENIED",
            ErrorCode::DeviceUnavailable => "DEVICE_UNAVAILABLE",
            ErrorCode::HostNotConnected => "HOST_NOT_CONNECTED",
            ErrorCode::Busy => "BUSY",
            ErrorCode::Cancelled => "CANCELLED",
            ErrorCode::Timeout => "TIMEOUT",
            ErrorCode::TaskRunning => "TASK_RUNNING",
            ErrorCode::TaskEnded => "TASK_ENDED",
            ErrorCode::TaskActive => "TASK_ACTIVE",
            ErrorCode::NoSuchTask => "NO_SUCH_TASK",
            ErrorCode::InvalidTransition => "INVALID_TRANSITION",
            ErrorCode::NeedsObservation => "NEEDS_OBSERVATION",
            ErrorCode::Rejected => "REJECTED",
            ErrorCode::ScopeExceeded => "SCOPE_EXCEEDED",
            ErrorCode::ShuttingDown => "SHUTTING_DOWN",
            ErrorCode::Internal => "INTERNAL",
            ErrorCode::DuplicateId => "DUPLICATE_ID",
            ErrorCode::Interrupted => "INTERRUPTED",
            ErrorCode::Unauthorized => "UNAUTHORIZED",
            ErrorCode::RateLimited => "RATE_LIMITED",
            ErrorCode::NoSuchToken => "NO_SUCH_TOKEN",
            ErrorCode::TokenExists => "TOKEN_EXISTS",
            ErrorCode::LastAdmin => "LAST_ADMIN",
            ErrorCode::PairingInvalid => "PAIRING_INVALID",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::KindFixed => "KIND_FIXED",
            ErrorCode::NotAttached => "NOT_ATTACHED",
            ErrorCode::TicketInvalid => "TICKET_INVALID",
            ErrorCode::NoVisibleEffect => "NO_VISIBLE_EFFECT",
            ErrorCode::UnexpectedChange => "UNEXPECTED_CHANGE",
            ErrorCode::AppNotOpened => "APP_NOT_OPENED",
            ErrorCode::TextHasNewline => "TEXT_HAS_NEWLINE",
            ErrorCode::StorageFailed => "STORAGE_FAILED",
            ErrorCode::TextNotFound => "TEXT_NOT_FOUND",
            ErrorCode::AmbiguousText => "AMBIGUOUS_TEXT",
            ErrorCode::ExpectedTextMissing => "EXPECTED_TEXT_MISSING",
            ErrorCode::UnexpectedText => "UNEXPECTED_TEXT",
            ErrorCode::OcrUnavailable => "OCR_UNAVAILABLE",
            ErrorCode::OcrFailed => "OCR_FAILED",
            ErrorCode::UpdateUnavailable => "UPDATE_UNAVAILABLE",
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
    /// For actions: `failed_before_submit` or `outcome_unknown`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<&'static str>,
    /// For actions: the request's `operation_id`, so a retry can name the same operation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_id: Option<String>,
    /// For interrupted or cancelled input: the reports that reached the phone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reports_sent: Option<usize>,
    /// For `NO_VISIBLE_EFFECT`, `UNEXPECTED_CHANGE` and `APP_NOT_OPENED`: what the screen did (the fields a
    /// verified action answers with, `after_observation_id` among them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effect: Option<Box<serde_json::Value>>,
    /// For `TEXT_NOT_FOUND` and `AMBIGUOUS_TEXT`: the query, the observation it was looked
    /// for in, and the `nearest` texts or the `candidates`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text_search: Option<Box<serde_json::Value>>,
}

impl ErrorBody {
    /// An error with the code's default flags.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody {
            code,
            message: message.into(),
            retryable: code.retryable(),
            side_effect_possible: code.side_effect_possible(),
            status: None,
            operation_id: None,
            reports_sent: None,
            effect: None,
            text_search: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant, in declaration order. A new variant goes here too: the array's length
    /// makes that a deliberate edit, and the test below then checks its wire name.
    const EVERY: [ErrorCode; 56] = [
        ErrorCode::InvalidJson,
        ErrorCode::RequestTooLarge,
        ErrorCode::NestingTooDeep,
        ErrorCode::InvalidRequest,
        ErrorCode::InvalidId,
        ErrorCode::UnknownMethod,
        ErrorCode::InvalidParams,
        ErrorCode::UnsupportedProtocol,
        ErrorCode::Unsupported,
        ErrorCode::NoFrame,
        ErrorCode::StaleObservation,
        ErrorCode::ObservationExpired,
        ErrorCode::OutOfBounds,
        ErrorCode::OperationConflict,
        ErrorCode::UntypeableText,
        ErrorCode::CalibrationFailed,
        ErrorCode::PermissionDenied,
        ErrorCode::DeviceUnavailable,
        ErrorCode::HostNotConnected,
        ErrorCode::Busy,
        ErrorCode::Cancelled,
        ErrorCode::Timeout,
        ErrorCode::TaskRunning,
        ErrorCode::TaskEnded,
        ErrorCode::TaskActive,
        ErrorCode::NoSuchTask,
        ErrorCode::InvalidTransition,
        ErrorCode::NeedsObservation,
        ErrorCode::Rejected,
        ErrorCode::ScopeExceeded,
        ErrorCode::ShuttingDown,
        ErrorCode::Internal,
        ErrorCode::DuplicateId,
        ErrorCode::Interrupted,
        ErrorCode::Unauthorized,
        ErrorCode::RateLimited,
        ErrorCode::NoSuchToken,
        ErrorCode::TokenExists,
        ErrorCode::LastAdmin,
        ErrorCode::PairingInvalid,
        ErrorCode::NotFound,
        ErrorCode::KindFixed,
        ErrorCode::NotAttached,
        ErrorCode::TicketInvalid,
        ErrorCode::NoVisibleEffect,
        ErrorCode::UnexpectedChange,
        ErrorCode::AppNotOpened,
        ErrorCode::TextHasNewline,
        ErrorCode::StorageFailed,
        ErrorCode::TextNotFound,
        ErrorCode::AmbiguousText,
        ErrorCode::ExpectedTextMissing,
        ErrorCode::UnexpectedText,
        ErrorCode::OcrUnavailable,
        ErrorCode::OcrFailed,
        ErrorCode::UpdateUnavailable,
    ];

    #[test]
    fn every_code_round_trips_through_its_wire_name() {
        let mut names = std::collections::HashSet::new();
        for code in EVERY {
            let name = code.as_str();
            assert!(names.insert(name), "{name} named twice");
            assert_eq!(ErrorCode::from_wire(name), Some(code), "{name}");
            assert_eq!(serde_json::to_value(code).ok(), Some(serde_json::Value::from(name)));
        }
        assert_eq!(ErrorCode::from_wire("NO_SUCH_CODE"), None);
        assert_eq!(ErrorCode::from_wire("busy"), None, "names are case-sensitive");
    }
}
