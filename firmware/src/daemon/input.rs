//! The input lane: runs one timed report sequence at a time against the HID sink, and
//! releases everything it pressed when a sequence ends, fails or is cancelled.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::device::hid::{HidError, HidInterface, HidReport, HidSink, HostState};

pub use crate::device::input::InputStep;

/// How a sequence ended badly.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// No host has configured the gadget; nothing was written.
    #[error("no USB host is connected")]
    HostNotConnected,
    /// Cancelled (cancel request, disconnect, pause); held input was released.
    #[error("input sequence cancelled after {reports_sent} reports")]
    Cancelled {
        /// Reports written before the cancellation.
        reports_sent: usize,
    },
    /// The sink failed; held input release was attempted.
    #[error("HID write failed after {reports_sent} reports")]
    Hid {
        /// Reports written before the failure.
        reports_sent: usize,
        /// The failure.
        #[source]
        source: HidError,
    },
}

/// How much of each wait is left to a precise thread sleep: tokio's timer fires on 1 ms
/// ticks, which alone would add 1-2 ms to every gesture.
const FINE_SLEEP: Duration = Duration::from_millis(2);

/// Sleeps until `due` with sub-millisecond precision: the runtime timer for the bulk (so it
/// stays cancellable), then a short sleep on the blocking pool (never on a runtime worker).
async fn precise_sleep_until(due: tokio::time::Instant) {
    if let Some(coarse) = due.checked_sub(FINE_SLEEP) {
        tokio::time::sleep_until(coarse).await;
    }
    let remaining = due.saturating_duration_since(tokio::time::Instant::now());
    if !remaining.is_zero() {
        // If the blocking pool is gone (runtime shutting down) the wait simply ends early.
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(remaining)).await;
    }
}

/// Owns the HID sink. Callers serialize access (the daemon holds it behind a fair lock).
#[derive(Debug)]
pub struct InputLane {
    sink: Box<dyn HidSink>,
    /// The last report per interface that left something pressed.
    held: BTreeMap<HidInterface, HidReport>,
}

impl InputLane {
    /// A lane over `sink`.
    pub fn new(sink: Box<dyn HidSink>) -> Self {
        InputLane { sink, held: BTreeMap::new() }
    }

    /// The sink's backend name.
    pub fn backend(&self) -> &'static str {
        self.sink.backend()
    }

    /// Keyboard LEDs as the sink knows them.
    pub fn leds(&self) -> Option<u8> {
        self.sink.leds()
    }

    /// The host state as the sink sees it.
    pub fn host_state(&self) -> HostState {
        self.sink.host_state()
    }

    /// Runs `steps` in order; returns the number of reports written. Whatever happens,
    /// nothing is left pressed afterwards (best effort when the sink itself fails).
    pub async fn run(&mut self, steps: &[InputStep], cancel: &CancellationToken) -> Result<usize, InputError> {
        if self.sink.host_state() == HostState::NotAttached {
            return Err(InputError::HostNotConnected);
        }
        let mut sent = 0usize;
        let result = self.run_steps(steps, cancel, &mut sent).await;
        self.release_all().await;
        result.map(|()| sent)
    }

    async fn run_steps(
        &mut self,
        steps: &[InputStep],
        cancel: &CancellationToken,
        sent: &mut usize,
    ) -> Result<(), InputError> {
        // Waits are measured from the sequence's start, not from the previous step, so
        // timer granularity does not accumulate over a gesture's many waits.
        let mut due = tokio::time::Instant::now();
        for step in steps {
            if cancel.is_cancelled() {
                return Err(InputError::Cancelled { reports_sent: *sent });
            }
            match step {
                InputStep::Report(report) => {
                    self.write(report).await.map_err(|source| match source {
                        HidError::HostNotConnected if *sent == 0 => InputError::HostNotConnected,
                        source => InputError::Hid { reports_sent: *sent, source },
                    })?;
                    *sent += 1;
                }
                InputStep::Wait(d) => {
                    due += *d;
                    tokio::select! {
                        () = cancel.cancelled() => return Err(InputError::Cancelled { reports_sent: *sent }),
                        () = precise_sleep_until(due) => {}
                    }
                }
            }
        }
        Ok(())
    }

    async fn write(&mut self, report: &HidReport) -> Result<(), HidError> {
        self.sink.write(report).await?;
        if report.holds_input() {
            self.held.insert(report.interface(), *report);
        } else {
            self.held.remove(&report.interface());
        }
        Ok(())
    }

    /// Releases every held key and button.
    pub async fn release_all(&mut self) {
        let held: Vec<HidReport> = self.held.values().copied().collect();
        for report in held {
            let release = report.released();
            if let Err(e) = self.write(&release).await {
                tracing::warn!(error = %e, interface = ?report.interface(), "could not release held input");
            }
        }
    }

    /// Whether anything is currently held.
    pub fn holds_input(&self) -> bool {
        !self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::hid::{KeyboardReport, PointerReport, RecordingSink};

    fn press(x: u16) -> InputStep {
        InputStep::Report(HidReport::Pointer(PointerReport::new(1, x, 100, 0)))
    }

    #[tokio::test(start_paused = true)]
    async fn cancel_mid_sequence_releases_held_buttons() {
        let rec = RecordingSink::default();
        let mut lane = InputLane::new(Box::new(rec.clone()));
        let cancel = CancellationToken::new();
        let steps = [press(100), InputStep::Wait(Duration::from_secs(5)), press(200)];
        let c = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            c.cancel();
        });
        let err = lane.run(&steps, &cancel).await.unwrap_err();
        assert!(matches!(err, InputError::Cancelled { reports_sent: 1 }));
        let log = rec.reports();
        assert_eq!(log.len(), 2);
        assert_eq!(log[1].report, HidReport::Pointer(PointerReport::new(0, 100, 100, 0)));
        assert!(!lane.holds_input());
    }

    #[tokio::test(start_paused = true)]
    async fn completed_sequence_releases_keys_left_down() {
        let rec = RecordingSink::default();
        let mut lane = InputLane::new(Box::new(rec.clone()));
        let down = HidReport::Keyboard(KeyboardReport { modifiers: 8, keys: [0x0b, 0, 0, 0, 0, 0] });
        let sent = lane.run(&[InputStep::Report(down)], &CancellationToken::new()).await.unwrap();
        assert_eq!(sent, 1);
        let log = rec.reports();
        assert_eq!(log.len(), 2, "a release follows the press");
        assert!(!log[1].report.holds_input());
    }

    #[tokio::test]
    async fn no_host_fails_before_submit() {
        let rec = RecordingSink::default();
        rec.set_host_state(HostState::NotAttached);
        let mut lane = InputLane::new(Box::new(rec.clone()));
        let err = lane.run(&[press(1)], &CancellationToken::new()).await.unwrap_err();
        assert!(matches!(err, InputError::HostNotConnected));
        assert!(rec.reports().is_empty());
    }
}
