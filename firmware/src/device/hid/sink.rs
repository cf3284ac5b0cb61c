//! Where HID reports go. The daemon owns exactly one [`HidSink`].

use std::fmt;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;

use super::HidReport;

/// A boxed future, as returned by [`HidSink`] methods (the trait must stay object safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The USB host's view of our gadget, as the UDC reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HostState {
    /// No host has configured the gadget (cable out, phone asleep before enumeration, or
    /// the gadget is not bound).
    NotAttached,
    /// A host configured the gadget: reports reach it.
    Configured,
    /// The host suspended the bus; writes block until it resumes.
    Suspended,
    /// The state could not be read.
    Unknown,
}

/// Errors writing HID reports.
#[derive(Debug, thiserror::Error)]
pub enum HidError {
    /// The device node could not be opened.
    #[error("open {}", .path.display())]
    Open {
        /// The node.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A write failed.
    #[error("write HID report")]
    Write(#[source] io::Error),
    /// The host unbound the gadget (ESHUTDOWN): reopen, don't fail the task.
    #[error("gadget unbound by host")]
    Shutdown,
    /// No host is connected; nothing was written.
    #[error("no USB host is connected")]
    HostNotConnected,
    /// The write did not complete before its deadline.
    #[error("HID write timed out")]
    Timeout,
}

/// A destination for HID reports: the real gadget, the virtual iPhone or a recorder.
pub trait HidSink: Send + fmt::Debug {
    /// A short backend name shown in `status`, e.g. `"sim"` or `"hidg"`.
    fn backend(&self) -> &'static str;

    /// Writes one report. Implementations must not block a runtime thread.
    fn write<'a>(&'a mut self, report: &'a HidReport) -> BoxFuture<'a, Result<(), HidError>>;

    /// The host's current view of the gadget.
    fn host_state(&self) -> HostState;

    /// Keyboard LED bits last set by the host (Num, Caps, Scroll, Compose, Kana), when the
    /// sink can know them.
    fn leds(&self) -> Option<u8> {
        None
    }
}

/// One report captured by a [`RecordingSink`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordedReport {
    /// When it was written.
    pub at: Instant,
    /// The report.
    pub report: HidReport,
}

/// A sink that records every report, for tests. Clones share the same log and host state.
#[derive(Debug, Clone)]
pub struct RecordingSink {
    log: Arc<Mutex<Vec<RecordedReport>>>,
    host: Arc<Mutex<HostState>>,
}

impl Default for RecordingSink {
    fn default() -> Self {
        RecordingSink { log: Arc::default(), host: Arc::new(Mutex::new(HostState::Configured)) }
    }
}

impl RecordingSink {
    /// Everything written so far.
    pub fn reports(&self) -> Vec<RecordedReport> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Changes what `host_state` reports.
    pub fn set_host_state(&self, state: HostState) {
        if let Ok(mut host) = self.host.lock() {
            *host = state;
        }
    }
}

impl HidSink for RecordingSink {
    fn backend(&self) -> &'static str {
        "recorder"
    }

    fn write<'a>(&'a mut self, report: &'a HidReport) -> BoxFuture<'a, Result<(), HidError>> {
        Box::pin(async move {
            if self.host_state() == HostState::NotAttached {
                return Err(HidError::HostNotConnected);
            }
            if let Ok(mut log) = self.log.lock() {
                log.push(RecordedReport { at: Instant::now(), report: *report });
            }
            Ok(())
        })
    }

    fn host_state(&self) -> HostState {
        self.host.lock().map(|h| *h).unwrap_or(HostState::Unknown)
    }
}
