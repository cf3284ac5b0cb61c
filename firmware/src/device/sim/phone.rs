//! The phone model: state driven by HID report bytes.

use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::device::hid::{
    BoxFuture, HidError, HidInterface, HidReport, HidSink, HostState, POINTER_MAX,
};

/// Shape of the virtual phone and of the capture frame around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    /// Capture frame width (the HDMI mode), e.g. 1920.
    pub capture_width: u32,
    /// Capture frame height, e.g. 1080.
    pub capture_height: u32,
    /// Phone screen width in native pixels (portrait).
    pub phone_width: u32,
    /// Phone screen height in native pixels (portrait).
    pub phone_height: u32,
    /// Frames per second delivered by the virtual capture.
    pub fps: u32,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            capture_width: 1920,
            capture_height: 1080,
            phone_width: 1179,
            phone_height: 2556,
            fps: 30,
        }
    }
}

/// What the phone has received so far, for `status` and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PhoneSnapshot {
    /// Reports consumed, all interfaces.
    pub reports: u64,
    /// Reports whose bytes did not decode for their interface (must stay 0).
    pub malformed_reports: u64,
    /// Pointer position in phone pixels.
    pub pointer: (u32, u32),
    /// Pointer buttons currently held.
    pub buttons: u8,
    /// Keyboard modifiers currently held.
    pub modifiers: u8,
    /// Keyboard usages currently held.
    pub keys_held: usize,
    /// Consumer usage currently held.
    pub consumer_usage: u16,
    /// Bumps whenever something visible changes; the display re-renders on change.
    pub version: u64,
}

#[derive(Debug, Default)]
struct PhoneState {
    snapshot: PhoneSnapshot,
}

/// The virtual iPhone. Clones share one phone.
#[derive(Debug, Clone)]
pub struct SimPhone {
    config: SimConfig,
    state: Arc<Mutex<PhoneState>>,
}

impl SimPhone {
    /// A phone showing its home screen, pointer in the middle.
    pub fn new(config: SimConfig) -> Self {
        let mut state = PhoneState::default();
        state.snapshot.pointer = (config.phone_width / 2, config.phone_height / 2);
        SimPhone {
            config,
            state: Arc::new(Mutex::new(state)),
        }
    }

    /// The phone's configuration.
    pub fn config(&self) -> SimConfig {
        self.config
    }

    /// The HID sink feeding this phone.
    pub fn hid(&self) -> SimHid {
        SimHid {
            phone: self.clone(),
        }
    }

    /// The frame source rendering this phone.
    pub fn display(&self) -> super::SimDisplay {
        super::SimDisplay::new(self.clone())
    }

    /// A copy of the phone's state.
    pub fn snapshot(&self) -> PhoneSnapshot {
        self.lock().snapshot
    }

    fn lock(&self) -> MutexGuard<'_, PhoneState> {
        // A poisoned lock means a panic while holding it; the state is plain data and stays
        // usable, so recover it rather than propagate the panic into the daemon.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Consumes raw report bytes exactly as the gadget would deliver them.
    pub fn consume(&self, interface: HidInterface, bytes: &[u8]) {
        let mut st = self.lock();
        st.snapshot.reports += 1;
        let Some(report) = HidReport::decode(interface, bytes) else {
            st.snapshot.malformed_reports += 1;
            return;
        };
        let before = st.snapshot;
        match report {
            HidReport::Pointer(p) => {
                st.snapshot.pointer = (
                    scale(p.x(), self.config.phone_width),
                    scale(p.y(), self.config.phone_height),
                );
                st.snapshot.buttons = p.buttons();
            }
            HidReport::Mouse(m) => st.snapshot.buttons = m.buttons,
            HidReport::Keyboard(k) => {
                st.snapshot.modifiers = k.modifiers;
                st.snapshot.keys_held = k.keys.iter().filter(|&&u| u != 0).count();
            }
            HidReport::Consumer(c) => st.snapshot.consumer_usage = c.usage,
        }
        let mut after = st.snapshot;
        after.reports = before.reports;
        if after != before {
            st.snapshot.version += 1;
        }
    }
}

/// Maps an absolute HID coordinate onto `0..extent` phone pixels.
fn scale(v: u16, extent: u32) -> u32 {
    let max = u64::from(POINTER_MAX);
    let px = u64::from(v) * u64::from(extent) / (max + 1);
    // px < extent because v <= max < max + 1, so it fits in u32.
    u32::try_from(px).unwrap_or(extent.saturating_sub(1))
}

/// The [`HidSink`] that feeds report bytes into a [`SimPhone`].
#[derive(Debug, Clone)]
pub struct SimHid {
    phone: SimPhone,
}

impl HidSink for SimHid {
    fn backend(&self) -> &'static str {
        "sim"
    }

    fn write<'a>(&'a mut self, report: &'a HidReport) -> BoxFuture<'a, Result<(), HidError>> {
        Box::pin(async move {
            let bytes = report.encode();
            self.phone.consume(report.interface(), bytes.as_bytes());
            Ok(())
        })
    }

    fn host_state(&self) -> HostState {
        HostState::Configured
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::hid::{KeyboardReport, PointerReport};

    #[test]
    fn consumes_report_bytes() {
        let phone = SimPhone::new(SimConfig::default());
        let mut hid = phone.hid();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            hid.write(&HidReport::Pointer(PointerReport::new(1, 16384, 32767, 0)))
                .await
                .unwrap();
            hid.write(&HidReport::Keyboard(KeyboardReport {
                modifiers: 8,
                keys: [0x0b, 0, 0, 0, 0, 0],
            }))
            .await
            .unwrap();
        });
        let s = phone.snapshot();
        assert_eq!(s.pointer, (589, 2555));
        assert_eq!((s.buttons, s.modifiers, s.keys_held), (1, 8, 1));
        assert_eq!(s.reports, 2);
        phone.consume(HidInterface::Pointer, &[1, 2, 3]);
        assert_eq!(phone.snapshot().malformed_reports, 1);
    }
}
