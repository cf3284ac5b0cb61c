//! [`DaemonError`]: every way a request can fail inside the daemon, and the one place
//! where it becomes a tether/1 wire error ([`ErrorBody`]). Each situation has its own
//! variant; nobody matches on message text.

use super::input::InputError;
use super::observations::ObservationError;
use super::storage::Unwritable;
use super::store::StoreError;
use super::tasks::TaskError;
use super::tokens::TokenError;
use crate::device::geometry::{OutOfBounds, PixelRect};
use crate::device::hid::UntypeableText;
use crate::device::video::image::ImageError;
use crate::protocol::{Denied, ErrorBody, ErrorCode, PROTOCOL_NAME};

/// Errors the daemon returns to callers. Mapped to wire codes in exactly one place:
/// `impl From<&DaemonError> for ErrorBody` below.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The role table refused the call ([`crate::protocol::access`]).
    #[error(transparent)]
    PermissionDenied(#[from] Denied),
    /// `hello` asked for another protocol.
    #[error("protocol {requested:?} is not supported; this daemon speaks {PROTOCOL_NAME}")]
    UnsupportedProtocol {
        /// What the client asked for.
        requested: String,
    },
    /// An input sequence failed.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A task control (pause, takeover, stop) or the task's end stopped input that was
    /// running; held input was released.
    #[error("interrupted after {reports_sent} of {reports_total} reports: {why}; held input was released")]
    Interrupted {
        /// Reports that reached the phone.
        reports_sent: usize,
        /// Reports the sequence had.
        reports_total: usize,
        /// What interrupted it, for a person.
        why: String,
    },
    /// The request waited too long for the device (other input ahead of it).
    #[error("waited {waited_ms} ms for the device behind other input; nothing was sent, retry")]
    QueueTimeout {
        /// How long it waited.
        waited_ms: u64,
    },
    /// `task_open` with `wait` waited its whole `wait_timeout_ms` for the phone.
    #[error(
        "waited {waited_ms} ms for the phone ({ahead} job(s) still ahead, task {active:?} active); nothing was opened"
    )]
    PhoneWaitTimeout {
        /// How long it waited.
        waited_ms: u64,
        /// Jobs still ahead of it.
        ahead: usize,
        /// The task on the phone then.
        active: Option<i64>,
    },
    /// The input was sent and the screen did not change (expected a change).
    // No field names in the text: the CLI and MCP word the `effect` themselves (and print
    // its observation id); protocol clients find it documented in docs/api.md.
    #[error("the input was sent but the screen did not change within {timeout_ms} ms (the tap may have missed, or the control was not ready or does nothing): look at the screen before going on")]
    NoVisibleEffect {
        /// How long it watched.
        timeout_ms: u64,
        /// The verification's fields.
        effect: Box<serde_json::Map<String, serde_json::Value>>,
    },
    /// The input was sent and the screen changed (expected no change).
    #[error("the input was sent and the screen changed (expected no change)")]
    UnexpectedChange {
        /// The verification's fields.
        effect: Box<serde_json::Map<String, serde_json::Value>>,
    },
    /// `open_app`'s input was sent and no app came to the front; Spotlight was dismissed.
    #[error("{name:?} did not open: Spotlight found no app of that name (it may have offered a web or Siri suggestion); Spotlight was dismissed and the phone is on the home screen. Check the app's name as the home screen shows it")]
    AppNotOpened {
        /// The name typed.
        name: String,
        /// The verification's fields (a fresh observation).
        effect: Box<serde_json::Map<String, serde_json::Value>>,
    },
    /// No text on the screen matches a query; nothing was sent.
    #[error("no text on the screen matches {query:?}{hint}")]
    TextNotFound {
        /// The query.
        query: String,
        /// What the screen says that comes closest, for a person ("; nearest: …").
        hint: String,
        /// The `text_search` object (query, observation, nearest).
        search: Box<serde_json::Value>,
    },
    /// Several places match a query equally well; nothing was sent.
    #[error("{count} places on the screen match {query:?} equally well ({listed}): pass index (0-based, top to bottom, left to right), a region, or a longer text")]
    AmbiguousText {
        /// The query.
        query: String,
        /// How many.
        count: usize,
        /// The candidates in words (`"Reset" at 180,420; …`), in reading order.
        listed: String,
        /// The `text_search` object (query, observation, candidates).
        search: Box<serde_json::Value>,
    },
    /// `expect_text` is not on the settled screen.
    #[error("the input was sent and the screen settled, but {text:?} is not on it")]
    ExpectedTextMissing {
        /// The text expected.
        text: String,
        /// The verification's fields (a fresh observation).
        effect: Box<serde_json::Map<String, serde_json::Value>>,
    },
    /// `expect_no_text` is on the settled screen.
    #[error("the input was sent and the screen settled, and {text:?} is on it")]
    UnexpectedText {
        /// The text that should not be there.
        text: String,
        /// The verification's fields (a fresh observation).
        effect: Box<serde_json::Map<String, serde_json::Value>>,
    },
    /// Reading text failed or is not possible here.
    #[error(transparent)]
    Ocr(#[from] crate::device::ocr::OcrError),
    /// `type_text` with a line break, and the caller did not ask for Returns.
    #[error("the text has a line break: in a single-line field Return ends editing at the first one and the rest would be lost, so nothing was typed. For a multi-line field pass newlines: \"return\" (each line break is pressed as Return), or type the lines one by one")]
    TextHasNewline,
    /// A global limit refused the work (too many screenshots in flight, output budget).
    #[error("the daemon is busy: {0}; retry shortly")]
    Busy(&'static str),
    /// Another request with this id is in flight on the same connection.
    #[error("request id {0} is already in flight on this connection; use a new id")]
    DuplicateId(u64),
    /// The daemon is shutting down.
    #[error("the daemon is shutting down")]
    ShuttingDown,
    /// The request was cancelled (by `cancel`, or its connection closed).
    #[error("the request was cancelled")]
    Cancelled,
    /// A sim-only method on hardware.
    #[error("this method exists only with the virtual iPhone (`tether serve --sim`)")]
    NotSim,
    /// No frame to observe.
    #[error("no video frame is available: check the HDMI signal (`tether status`)")]
    NoFrame,
    /// No frame newer than the one asked for (or fresh enough) arrived in time.
    #[error("no frame newer than {after} arrived within {timeout_ms} ms; retry")]
    FrameTimeout {
        /// The frame the caller already had (`after_frame_id`), or the newest one.
        after: u64,
        /// How long it waited.
        timeout_ms: u64,
    },
    /// An observation cannot be used.
    #[error(transparent)]
    Observation(#[from] ObservationError),
    /// Coordinates outside the observation.
    #[error(transparent)]
    OutOfBounds(#[from] OutOfBounds),
    /// A screenshot region outside the phone's picture.
    #[error(
        "region {}x{}+{}+{} is outside the phone's {}x{} picture",
        .region.width, .region.height, .region.x, .region.y, .active.width, .active.height
    )]
    RegionOutside {
        /// The region asked for (relative to the picture).
        region: PixelRect,
        /// The phone's picture.
        active: PixelRect,
    },
    /// A pointer action without the observation its coordinates refer to.
    #[error("pointer actions need the observation_id of the screenshot their coordinates refer to")]
    MissingObservation,
    /// A key name nobody knows.
    #[error(
        "unknown key {0:?}: use a single character or a name like enter, tab, escape, backspace, delete, up, \
         down, left, right, home, end, pageup, pagedown, f1-f12, cmd, shift, ctrl, alt"
    )]
    UnknownKey(String),
    /// A hotkey that is not modifiers plus exactly one key.
    #[error("a hotkey is modifiers plus exactly one other key, e.g. [\"cmd\", \"h\"]")]
    BadHotkey,
    /// A note or finish without a task to apply to.
    #[error("{0}: give the task id (or send its task_token)")]
    MissingTask(&'static str),
    /// `task_events` after a seq the task never reached.
    #[error("task {task} has no event after seq {after_seq}: its last seq is {last_seq}")]
    AfterEnd {
        /// The task.
        task: i64,
        /// What was asked.
        after_seq: i64,
        /// The last seq written.
        last_seq: i64,
    },
    /// An operation id reused with other arguments.
    #[error("operation_id {operation_id:?} was already used with different arguments; use a new id")]
    OperationConflict {
        /// The id.
        operation_id: String,
    },
    /// Text the layout cannot type.
    #[error(transparent)]
    Untypeable(#[from] UntypeableText),
    /// Calibration failed; the pointer moved (side effect), the old calibration stays.
    #[error("{0}")]
    Calibration(String),
    /// Producing an image failed.
    #[error("could not produce the image")]
    Image(#[from] ImageError),
    /// A worker thread of the daemon failed (a bug); the daemon keeps running.
    #[error("the {0} worker failed; the daemon keeps running")]
    Worker(&'static str),
    /// The kernel gave no randomness for a secret.
    #[error("no randomness is available for a new secret")]
    NoRandomness,
    /// An action's failure, already mapped to its wire error with its status
    /// (`failed_before_submit` / `outcome_unknown`); also how cached failures come back.
    /// `ErrorBody::from(&ActionFailed(body)) == body`.
    #[error("{}", .0.message)]
    ActionFailed(ErrorBody),
    /// Task admission or control refused the request.
    #[error(transparent)]
    Task(#[from] TaskError),
    /// The task store failed; the daemon keeps running.
    #[error("the task store failed: {0}")]
    Store(#[from] StoreError),
    /// A change could not be saved in the data directory (outside the task store: the
    /// calibration file), so it was not made.
    #[error(transparent)]
    Unwritable(#[from] Unwritable),
    /// A host name the appliance does not answer to.
    #[error("{0}")]
    BadHost(String),
    /// Managing tokens or pairing codes failed.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// An update was refused ([`super::update`]).
    #[error(transparent)]
    Update(#[from] super::update::UpdateError),
    /// A `hello` with another kind than the connection's first.
    #[error("this connection is a {have} connection (fixed by its first hello); it cannot become {asked}")]
    KindFixed {
        /// The pinned kind.
        have: &'static str,
        /// What the hello asked for.
        asked: &'static str,
    },
    /// A host method that needs `attach` first.
    #[error("{0} needs an attached task: send attach {{task}} first")]
    NotAttached(&'static str),
    /// `attach` on a connection of the wrong kind or transport.
    #[error("{0}")]
    CannotAttach(&'static str),
    /// Something asked for does not exist (a step's thumbnail).
    #[error("{0}")]
    NotFound(String),
    /// The caller's token was revoked or rotated after its credential was checked.
    #[error("the token this request authenticated with was revoked or rotated: log in again")]
    CredentialEnded,
    /// A video ticket that cannot be redeemed.
    #[error("the video ticket is {0}: call video_open for a new one")]
    Ticket(&'static str),
}

impl DaemonError {
    /// The wire form of this error as an action's failure: its status (did input reach
    /// the phone?) and its operation id, as the action answers and caches it.
    pub(super) fn action_body(&self, operation_id: &str) -> ErrorBody {
        let mut body = ErrorBody::from(self);
        body.status = Some(if body.side_effect_possible { "outcome_unknown" } else { "failed_before_submit" });
        body.operation_id = Some(operation_id.to_string());
        body
    }

    /// Why the disk refused the change this error reports, if that is what it reports.
    pub fn unwritable(&self) -> Option<Unwritable> {
        match self {
            DaemonError::Unwritable(why)
            | DaemonError::Store(StoreError::Unwritable(why))
            | DaemonError::Token(TokenError::Store(StoreError::Unwritable(why)))
            | DaemonError::Token(TokenError::NotSaved(StoreError::Unwritable(why))) => Some(*why),
            _ => None,
        }
    }

    /// The stable wire code, and whether input may have reached the phone.
    pub fn code(&self) -> (ErrorCode, bool) {
        if self.unwritable().is_some() {
            return (ErrorCode::StorageFailed, false);
        }
        match self {
            DaemonError::PermissionDenied(_) => (ErrorCode::PermissionDenied, false),
            DaemonError::UnsupportedProtocol { .. } => (ErrorCode::UnsupportedProtocol, false),
            DaemonError::Input(InputError::HostNotConnected) => (ErrorCode::HostNotConnected, false),
            DaemonError::Input(InputError::Cancelled { reports_sent }) => (ErrorCode::Cancelled, *reports_sent > 0),
            DaemonError::Input(InputError::Hid { reports_sent, .. }) => {
                (ErrorCode::DeviceUnavailable, *reports_sent > 0)
            }
            DaemonError::Interrupted { reports_sent, .. } => (ErrorCode::Interrupted, *reports_sent > 0),
            DaemonError::QueueTimeout { .. } | DaemonError::Busy(_) => (ErrorCode::Busy, false),
            DaemonError::DuplicateId(_) => (ErrorCode::DuplicateId, false),
            DaemonError::ShuttingDown => (ErrorCode::ShuttingDown, false),
            DaemonError::Cancelled => (ErrorCode::Cancelled, false),
            DaemonError::NotSim => (ErrorCode::Unsupported, false),
            DaemonError::NoFrame => (ErrorCode::NoFrame, false),
            DaemonError::FrameTimeout { .. } | DaemonError::PhoneWaitTimeout { .. } => (ErrorCode::Timeout, false),
            DaemonError::Observation(ObservationError::Stale { .. }) => (ErrorCode::StaleObservation, false),
            DaemonError::Observation(ObservationError::Expired { .. }) => (ErrorCode::ObservationExpired, false),
            DaemonError::OutOfBounds(_) => (ErrorCode::OutOfBounds, false),
            DaemonError::RegionOutside { .. }
            | DaemonError::MissingObservation
            | DaemonError::UnknownKey(_)
            | DaemonError::BadHotkey
            | DaemonError::MissingTask(_)
            | DaemonError::AfterEnd { .. }
            | DaemonError::BadHost(_) => (ErrorCode::InvalidParams, false),
            DaemonError::KindFixed { .. } => (ErrorCode::KindFixed, false),
            DaemonError::NotAttached(_) => (ErrorCode::NotAttached, false),
            DaemonError::CannotAttach(_) => (ErrorCode::InvalidRequest, false),
            DaemonError::Ticket(_) => (ErrorCode::TicketInvalid, false),
            DaemonError::CredentialEnded => (ErrorCode::Unauthorized, false),
            DaemonError::NotFound(_) => (ErrorCode::NotFound, false),
            DaemonError::OperationConflict { .. } => (ErrorCode::OperationConflict, false),
            DaemonError::Untypeable(_) => (ErrorCode::UntypeableText, false),
            DaemonError::Calibration(_) => (ErrorCode::CalibrationFailed, true),
            DaemonError::Image(_)
            | DaemonError::Worker(_)
            | DaemonError::NoRandomness
            | DaemonError::Store(_)
            | DaemonError::Unwritable(_) => (ErrorCode::Internal, false),
            DaemonError::ActionFailed(body) => (body.code, body.side_effect_possible),
            DaemonError::NoVisibleEffect { .. } => (ErrorCode::NoVisibleEffect, true),
            DaemonError::UnexpectedChange { .. } => (ErrorCode::UnexpectedChange, true),
            DaemonError::AppNotOpened { .. } => (ErrorCode::AppNotOpened, true),
            DaemonError::TextHasNewline => (ErrorCode::TextHasNewline, false),
            DaemonError::TextNotFound { .. } => (ErrorCode::TextNotFound, false),
            DaemonError::AmbiguousText { .. } => (ErrorCode::AmbiguousText, false),
            DaemonError::ExpectedTextMissing { .. } => (ErrorCode::ExpectedTextMissing, true),
            DaemonError::UnexpectedText { .. } => (ErrorCode::UnexpectedText, true),
            DaemonError::Ocr(crate::device::ocr::OcrError::Unavailable(_)) => (ErrorCode::OcrUnavailable, false),
            DaemonError::Ocr(_) => (ErrorCode::OcrFailed, false),
            DaemonError::Task(e) => (e.code(), false),
            DaemonError::Update(e) => (e.code(), false),
            DaemonError::Token(e) => (
                match e {
                    TokenError::Store(_) | TokenError::NotSaved(_) | TokenError::NoRandomness => ErrorCode::Internal,
                    TokenError::NoSuch(_) => ErrorCode::NoSuchToken,
                    TokenError::Exists(_) => ErrorCode::TokenExists,
                    TokenError::LastAdmin(_) => ErrorCode::LastAdmin,
                    TokenError::BadName(_) | TokenError::BadRole => ErrorCode::InvalidParams,
                    TokenError::PairingInvalid => ErrorCode::PairingInvalid,
                },
                false,
            ),
        }
    }

    /// A message safe to send to a remote caller: no paths, errno details or secrets.
    pub fn public_message(&self) -> String {
        if let (DaemonError::Token(TokenError::NotSaved(_)), Some(why)) = (self, self.unwritable()) {
            return format!(
                "the token no longer works on this appliance, but the change could not be saved: {}; then run the \
                 same command again (until then, a restart would bring the old secret back)",
                why.advice()
            );
        }
        if let Some(why) = self.unwritable() {
            return format!("this change could not be saved, so it was not made: {}; then retry", why.advice());
        }
        match self {
            DaemonError::Input(InputError::Hid { reports_sent, .. }) => format!(
                "the HID device failed after {reports_sent} reports; held input was released. \
                 Check `tether status` for the USB host state and retry"
            ),
            DaemonError::Input(InputError::HostNotConnected) => {
                "no phone has enumerated the USB gadget; nothing was sent. Check the cable/hub and \
                 that the phone is unlocked, then retry"
                    .to_string()
            }
            DaemonError::Store(_) | DaemonError::Token(TokenError::Store(_) | TokenError::NotSaved(_)) => {
                "the task store failed; the request was not recorded. See the daemon's log".into()
            }
            other => other.to_string(),
        }
    }
}

/// The one place internal daemon errors become wire errors.
impl From<&DaemonError> for ErrorBody {
    fn from(err: &DaemonError) -> Self {
        if let DaemonError::ActionFailed(body) = err {
            return body.clone();
        }
        let (code, side_effect) = err.code();
        let mut body = ErrorBody::new(code, err.public_message());
        body.side_effect_possible = side_effect;
        if let DaemonError::Interrupted { reports_sent, .. }
        | DaemonError::Input(InputError::Cancelled { reports_sent }) = err
        {
            body.reports_sent = Some(*reports_sent);
        }
        if let DaemonError::NoVisibleEffect { effect, .. }
        | DaemonError::UnexpectedChange { effect }
        | DaemonError::AppNotOpened { effect, .. }
        | DaemonError::ExpectedTextMissing { effect, .. }
        | DaemonError::UnexpectedText { effect, .. } = err
        {
            body.effect = Some(Box::new(serde_json::Value::Object(effect.as_ref().clone())));
        }
        if let DaemonError::TextNotFound { search, .. } | DaemonError::AmbiguousText { search, .. } = err {
            body.text_search = Some(search.clone());
        }
        body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_failed_round_trips_and_codes_are_distinct() {
        let interrupted = DaemonError::Interrupted { reports_sent: 3, reports_total: 9, why: "paused".into() };
        let body = ErrorBody::from(&interrupted);
        assert_eq!((body.code, body.side_effect_possible, body.reports_sent), (ErrorCode::Interrupted, true, Some(3)));
        assert_eq!(ErrorBody::from(&DaemonError::ActionFailed(body.clone())), body);
        let timeout = ErrorBody::from(&DaemonError::FrameTimeout { after: 7, timeout_ms: 100 });
        assert_eq!((timeout.code, timeout.retryable, timeout.side_effect_possible), (ErrorCode::Timeout, true, false));
        let busy = ErrorBody::from(&DaemonError::QueueTimeout { waited_ms: 10_000 });
        assert_eq!((busy.code, busy.retryable), (ErrorCode::Busy, true));
    }

    #[test]
    fn a_change_the_disk_refused_is_storage_failed_wherever_it_comes_from() {
        let full = [
            DaemonError::Unwritable(Unwritable::Full),
            DaemonError::Store(StoreError::Unwritable(Unwritable::Full)),
            DaemonError::Token(TokenError::Store(StoreError::Unwritable(Unwritable::Full))),
        ];
        for e in &full {
            let body = ErrorBody::from(e);
            assert_eq!((body.code, body.retryable, body.side_effect_possible), (ErrorCode::StorageFailed, true, false));
            assert!(body.message.contains("disk is full") && body.message.contains("not made"), "{}", body.message);
            assert!(!body.message.contains('/'), "no path: {}", body.message);
        }
        let failed = ErrorBody::from(&DaemonError::Store(StoreError::Unwritable(Unwritable::Failed)));
        assert_eq!(failed.code, ErrorCode::StorageFailed);
        // Any other store failure stays internal.
        assert_eq!(ErrorBody::from(&DaemonError::Store(StoreError::Closed)).code, ErrorCode::Internal);
    }
}
