//! The real HID sink: `/dev/hidgN` nodes of the configfs gadget, written without blocking.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use super::gadget::{self, GadgetError};
use super::{BoxFuture, HidError, HidInterface, HidReport, HidSink, HostState, PointerReport};
use crate::sync::LockPlain;

/// How long one report may wait for the host before the write counts as failed.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_millis(500);

/// How often the host-state watcher reads sysfs.
const HOST_POLL: Duration = Duration::from_millis(50);

/// The USB host state as sysfs shows it, kept fresh by a small thread so that writing a
/// report never reads sysfs on a runtime worker (two file reads per report before).
#[derive(Debug)]
struct HostWatch {
    udc_file: PathBuf,
    state: Arc<AtomicU8>,
    /// Held across each read-and-store so a poll that read before an unbind cannot store
    /// its stale answer after a `refresh` that read after it. Readers of `state` never take it.
    update: Arc<Mutex<()>>,
    stop: Arc<AtomicBool>,
}

impl HostWatch {
    fn start(udc_file: PathBuf) -> HostWatch {
        let state = Arc::new(AtomicU8::new(encode(read_host_state(&udc_file))));
        let stop = Arc::new(AtomicBool::new(false));
        let update = Arc::new(Mutex::new(()));
        let (s, st, file, up) = (state.clone(), stop.clone(), udc_file.clone(), update.clone());
        let spawned = std::thread::Builder::new().name("hid-host-state".into()).spawn(move || {
            while !st.load(Ordering::Relaxed) {
                std::thread::sleep(HOST_POLL);
                store_fresh(&up, &s, &file);
            }
        });
        if let Err(e) = spawned {
            // Without the thread the state stays as read at start; writes still fail and
            // reopen on their own when the host goes.
            tracing::warn!(error = %e, "could not start the host-state watcher");
        }
        HostWatch { udc_file, state, update, stop }
    }

    fn get(&self) -> HostState {
        decode(self.state.load(Ordering::Relaxed))
    }

    /// Reads sysfs now. Called after a failed write: the failure is often the host going
    /// away, and the error the caller is about to see must agree with the `status` that
    /// follows it, not with a poll up to one period (or, on a loaded machine, longer) old.
    fn refresh(&self) -> HostState {
        store_fresh(&self.update, &self.state, &self.udc_file)
    }
}

impl Drop for HostWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Reads the host state and stores it, serialised with every other update.
fn store_fresh(update: &Mutex<()>, state: &AtomicU8, udc_file: &Path) -> HostState {
    let _serial = update.lock_plain();
    let now = read_host_state(udc_file);
    state.store(encode(now), Ordering::Relaxed);
    now
}

fn encode(s: HostState) -> u8 {
    match s {
        HostState::NotAttached => 0,
        HostState::Configured => 1,
        HostState::Suspended => 2,
        HostState::Unknown => 3,
    }
}

fn decode(v: u8) -> HostState {
    match v {
        0 => HostState::NotAttached,
        1 => HostState::Configured,
        2 => HostState::Suspended,
        _ => HostState::Unknown,
    }
}

/// Reads the host state: the gadget's binding first (unbound — cable pulled, `gadget down`
/// — leaves the UDC's own state file stale), then the UDC's state.
fn read_host_state(udc_file: &Path) -> HostState {
    let udc = match std::fs::read_to_string(udc_file) {
        Ok(u) if !u.trim().is_empty() => u.trim().to_string(),
        Ok(_) => return HostState::NotAttached,
        Err(_) => return HostState::Unknown,
    };
    let state = PathBuf::from("/sys/class/udc").join(udc).join("state");
    match std::fs::read_to_string(state).map(|s| s.trim().to_string()).as_deref() {
        Ok("configured") => HostState::Configured,
        Ok("suspended") => HostState::Suspended,
        Ok(_) => HostState::NotAttached,
        Err(_) => HostState::Unknown,
    }
}

/// Writes reports to the gadget's `/dev/hidgN` nodes.
#[derive(Debug)]
pub struct HidgSink {
    host: HostWatch,
    nodes: Vec<(HidInterface, PathBuf)>,
    open: HashMap<HidInterface, AsyncFd<File>>,
    write_timeout: Duration,
    /// Last absolute pointer position, so a release after reopening does not move it.
    last_pointer: (u16, u16),
    leds: AtomicU8,
}

impl HidgSink {
    /// Finds the tether gadget in configfs and its device nodes (no root needed).
    pub fn from_gadget(write_timeout: Duration) -> Result<HidgSink, GadgetError> {
        let st = gadget::status()?;
        if !st.exists || st.nodes.is_empty() {
            return Err(GadgetError::NotUp);
        }
        Ok(HidgSink {
            host: HostWatch::start(PathBuf::from(gadget::CONFIGFS_GADGETS).join(gadget::GADGET_NAME).join("UDC")),
            nodes: st.nodes,
            open: HashMap::new(),
            write_timeout,
            last_pointer: (16384, 16384),
            leds: AtomicU8::new(0),
        })
    }

    fn node(&self, interface: HidInterface) -> Result<PathBuf, HidError> {
        self.nodes.iter().find(|(i, _)| *i == interface).map(|(_, p)| p.clone()).ok_or_else(|| HidError::Open {
            path: PathBuf::from(format!("<no {interface:?} function in the gadget>")),
            source: io::Error::from(io::ErrorKind::NotFound),
        })
    }

    /// Opens the node if needed; every (re)open starts with a report that releases all.
    async fn ensure_open(&mut self, interface: HidInterface) -> Result<(), HidError> {
        if self.open.contains_key(&interface) {
            return Ok(());
        }
        let open = |path: &PathBuf| {
            OpenOptions::new()
                .read(interface == HidInterface::Keyboard)
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)
        };
        let mut path = self.node(interface)?;
        let file = match open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Nodes come and go with binding; look them up again once.
                if let Ok(st) = gadget::status() {
                    if !st.nodes.is_empty() {
                        self.nodes = st.nodes;
                    }
                }
                path = self.node(interface)?;
                open(&path).map_err(|source| HidError::Open { path: path.clone(), source })?
            }
            Err(source) => return Err(HidError::Open { path, source }),
        };
        let fd = register(file).map_err(|source| HidError::Open { path, source })?;
        self.open.insert(interface, fd);
        let release = match interface {
            HidInterface::Pointer => {
                HidReport::Pointer(PointerReport::new(0, self.last_pointer.0, self.last_pointer.1, 0))
            }
            HidInterface::Keyboard => HidReport::Keyboard(super::KeyboardReport::default()),
            HidInterface::Consumer => HidReport::Consumer(super::ConsumerReport::default()),
            HidInterface::Mouse => HidReport::Mouse(super::MouseReport::default()),
        };
        self.write_now(&release).await
    }

    async fn write_now(&mut self, report: &HidReport) -> Result<(), HidError> {
        let interface = report.interface();
        let bytes = report.encode();
        let Some(fd) = self.open.get(&interface) else {
            return Err(HidError::Write(io::Error::from(io::ErrorKind::NotConnected)));
        };
        let write = async {
            loop {
                let mut ready = fd.writable().await?;
                match ready.try_io(|inner| inner.get_ref().write(bytes.as_bytes())) {
                    Ok(result) => return result,
                    Err(_would_block) => continue,
                }
            }
        };
        let result = tokio::time::timeout(self.write_timeout, write).await;
        match result {
            Ok(Ok(n)) if n == bytes.as_bytes().len() => {
                if let HidReport::Pointer(p) = report {
                    self.last_pointer = (p.x(), p.y());
                }
                Ok(())
            }
            Ok(Ok(_short)) => Err(HidError::Write(io::Error::from(io::ErrorKind::WriteZero))),
            Ok(Err(e)) => {
                // Whatever broke, the next write reopens (and releases first).
                self.open.remove(&interface);
                Err(if e.raw_os_error() == Some(libc::ESHUTDOWN) { HidError::Shutdown } else { HidError::Write(e) })
            }
            Err(_elapsed) => {
                self.open.remove(&interface);
                Err(HidError::Timeout)
            }
        }
    }
}

/// Registers an owned file with the runtime's reactor for readiness events.
fn register(file: File) -> io::Result<AsyncFd<File>> {
    // SAFETY: the `AsyncFd` takes ownership of `file`, so its descriptor stays open and refers
    // to the same open file until the `AsyncFd` is dropped, and `File::as_raw_fd` always
    // returns that one descriptor. We never replace the file through `get_mut`.
    unsafe { AsyncFd::register(file) }.map_err(|e| e.into_parts().1)
}

impl HidSink for HidgSink {
    fn backend(&self) -> &'static str {
        "hidg"
    }

    fn write<'a>(&'a mut self, report: &'a HidReport) -> BoxFuture<'a, Result<(), HidError>> {
        Box::pin(async move {
            if self.host_state() == HostState::NotAttached {
                return Err(HidError::HostNotConnected);
            }
            let result = match self.ensure_open(report.interface()).await {
                Ok(()) => self.write_now(report).await,
                Err(e) => Err(e),
            };
            if result.is_err() {
                self.host.refresh();
            }
            result
        })
    }

    fn host_state(&self) -> HostState {
        self.host.get()
    }

    fn leds(&self) -> Option<u8> {
        if let Some(fd) = self.open.get(&HidInterface::Keyboard) {
            // Drain queued LED output reports without blocking; the last one wins.
            let mut buf = [0u8; 8];
            while let Ok(n) = fd.get_ref().read(&mut buf) {
                match buf.get(..n) {
                    Some([led, ..]) => self.leds.store(*led, Ordering::Relaxed),
                    _ => break,
                }
            }
        }
        Some(self.leds.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gadget `UDC` binding file holding `contents`, and a watcher started on it.
    fn watched_udc(contents: &str) -> (tempfile::TempDir, PathBuf, HostWatch) {
        let dir = tempfile::tempdir().unwrap();
        let udc = dir.path().join("UDC");
        std::fs::write(&udc, contents).unwrap();
        let watch = HostWatch::start(udc.clone());
        (dir, udc, watch)
    }

    #[test]
    fn host_state_follows_the_binding_file_through_the_watcher() {
        let (_dir, udc, watch) = watched_udc("\n");
        assert_eq!(watch.get(), HostState::NotAttached, "read at start");
        // Bound to a UDC sysfs does not know: the state cannot be read.
        std::fs::write(&udc, "no-such-udc.0\n").unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while watch.get() != HostState::Unknown {
            assert!(std::time::Instant::now() < deadline, "the watcher never saw the change");
            std::thread::sleep(Duration::from_millis(5));
        }
        for s in [HostState::NotAttached, HostState::Configured, HostState::Suspended, HostState::Unknown] {
            assert_eq!(decode(encode(s)), s);
        }
    }

    #[test]
    fn refresh_reads_sysfs_now_without_waiting_for_the_poll() {
        let (_dir, udc, watch) = watched_udc("no-such-udc.0\n");
        assert_eq!(watch.get(), HostState::Unknown);
        // Unbound (what `set_udc("")` does): the very next read must say so.
        std::fs::write(&udc, "\n").unwrap();
        assert_eq!(watch.refresh(), HostState::NotAttached);
        assert_eq!(watch.get(), HostState::NotAttached);
    }

    #[tokio::test]
    async fn registered_files_write_without_blocking() {
        let (read_end, write_end) = nix::unistd::pipe().unwrap();
        nix::fcntl::fcntl(&write_end, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK)).unwrap();
        let fd = register(File::from(write_end)).unwrap();
        let mut ready = fd.writable().await.unwrap();
        let n = ready.try_io(|inner| inner.get_ref().write(b"abc")).unwrap().unwrap();
        assert_eq!(n, 3);
        let mut buf = [0u8; 3];
        File::from(read_end).read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"abc");
    }
}
