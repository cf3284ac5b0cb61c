//! The composite HID gadget in Linux configfs (keyboard → consumer → pointer), through the
//! `usb-gadget` crate. Creating and removing it needs root; `serve` only looks it up.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use usb_gadget::function::hid::Hid;
use usb_gadget::{Class, Config, Gadget, Id, Strings, Udc};

use super::descriptor::{DescriptorSet, PointerProfile};
use super::HidInterface;

/// The gadget's name in configfs.
pub const GADGET_NAME: &str = "tether";
/// Where configfs keeps gadgets.
pub const CONFIGFS_GADGETS: &str = "/sys/kernel/config/usb_gadget";

/// Errors managing the gadget.
#[derive(Debug, thiserror::Error)]
pub enum GadgetError {
    /// No USB device controller exists.
    #[error("no USB device controller (UDC) found: this board cannot act as a USB device (is dwc2 loaded?)")]
    NoUdc,
    /// Only the kernel's software test controller exists and none was chosen explicitly.
    #[error("only the software test controller {0} exists; pass --udc {0} to use it on purpose")]
    OnlyDummy(String),
    /// Several controllers and none chosen.
    #[error("several USB device controllers exist ({}); choose one with --udc or `udc` in the config", .0.join(", "))]
    Ambiguous(Vec<String>),
    /// The named controller does not exist.
    #[error("USB device controller {name:?} not found (available: {})", .available.join(", "))]
    UdcNotFound {
        /// Requested.
        name: String,
        /// Present.
        available: Vec<String>,
    },
    /// configfs access failed.
    #[error("configfs: {what}")]
    Configfs {
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        #[source]
        source: io::Error,
    },
    /// Binding kept failing (EBUSY: another gadget holds the UDC; ENODEV: not ready yet).
    #[error("bind to {udc} failed after {attempts} attempts")]
    Bind {
        /// The controller.
        udc: String,
        /// How often it was tried.
        attempts: u32,
        /// The last error.
        #[source]
        source: io::Error,
    },
    /// The gadget is not set up.
    #[error("the tether gadget is not set up: run `tether gadget up` as root (the boot unit does)")]
    NotUp,
}

/// What `gadget status` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GadgetStatus {
    /// Whether the gadget exists in configfs.
    pub exists: bool,
    /// The controller it is bound to.
    pub udc: Option<String>,
    /// That controller's state (`not attached`, `configured`, `suspended`, …).
    pub udc_state: Option<String>,
    /// Serial number (derived from the descriptors).
    pub serial: Option<String>,
    /// `/dev/hidgN` per interface, in function order.
    pub nodes: Vec<(HidInterface, PathBuf)>,
}

/// Serial number and bcdDevice derived from the descriptor set: iOS caches descriptors per
/// device identity, so any descriptor change must look like a new device.
pub fn identity(set: &DescriptorSet) -> (String, u16) {
    let fp = set.fingerprint();
    // Four decimal digits packed as BCD (no nibble above 9, as USB requires).
    let digits = fp % 10_000;
    let bcd = ((digits / 1000) << 12) | (((digits / 100) % 10) << 8) | (((digits / 10) % 10) << 4) | (digits % 10);
    (format!("{fp:016x}"), u16::try_from(bcd).unwrap_or(0x0100))
}

fn udc_names() -> Result<Vec<String>, GadgetError> {
    let udcs = usb_gadget::udcs().map_err(|source| GadgetError::Configfs { what: "list UDCs", source })?;
    let mut names: Vec<String> = udcs.iter().map(|u| u.name().to_string_lossy().into_owned()).collect();
    names.sort();
    Ok(names)
}

/// Picks the controller: the requested one, else the only real one. Never silently the
/// software `dummy_udc`.
pub fn choose_udc(requested: Option<&str>, available: &[String]) -> Result<String, GadgetError> {
    if let Some(name) = requested {
        return if available.iter().any(|a| a == name) {
            Ok(name.to_string())
        } else {
            Err(GadgetError::UdcNotFound { name: name.into(), available: available.to_vec() })
        };
    }
    let real: Vec<&String> = available.iter().filter(|n| !n.starts_with("dummy_udc")).collect();
    match (real.as_slice(), available.first()) {
        ([one], _) => Ok((*one).clone()),
        ([], None) => Err(GadgetError::NoUdc),
        ([], Some(dummy)) => Err(GadgetError::OnlyDummy(dummy.clone())),
        (many, _) => Err(GadgetError::Ambiguous(many.iter().map(|s| (*s).clone()).collect())),
    }
}

fn gadget_dir() -> PathBuf {
    Path::new(CONFIGFS_GADGETS).join(GADGET_NAME)
}

/// Creates the gadget and binds it; an existing tether gadget is replaced. Returns its status.
pub fn up(requested_udc: Option<&str>, profile: PointerProfile) -> Result<GadgetStatus, GadgetError> {
    let udc_name = choose_udc(requested_udc, &udc_names()?)?;
    if gadget_dir().exists() {
        down()?;
    }
    let set = DescriptorSet { profile };
    let (serial, bcd) = identity(&set);
    let mut config = Config::new("tether HID");
    for f in set.functions() {
        let mut b = Hid::builder();
        b.sub_class = f.subclass_protocol.0;
        b.protocol = f.subclass_protocol.1;
        b.report_desc = f.descriptor.to_vec();
        b.report_len = u8::try_from(f.report_len).unwrap_or(8);
        let (_hid, handle) = b.build();
        config.add_function(handle);
    }
    let mut gadget = Gadget::new(
        Class::INTERFACE_SPECIFIC,
        Id::LINUX_FOUNDATION_COMPOSITE,
        Strings::new("tether", "tether keyboard and pointer", &serial),
    )
    .with_config(config);
    gadget.name = Some(GADGET_NAME.into());
    gadget.device_release = bcd;
    let mut reg = gadget.register().map_err(|source| GadgetError::Configfs { what: "create gadget", source })?;
    let udc = find_udc(&udc_name)?;
    let mut attempts = 0;
    loop {
        attempts += 1;
        match reg.bind(Some(&udc)) {
            Ok(()) => break,
            // EBUSY: another gadget still holds the UDC; ENODEV: the UDC is not ready yet
            // early at boot. Both clear up on their own.
            Err(e) if attempts < 20 && matches!(e.raw_os_error(), Some(libc::EBUSY | libc::ENODEV)) => {
                tracing::info!(udc = %udc_name, error = %e, attempt = attempts, "bind failed; retrying");
                std::thread::sleep(Duration::from_millis(250));
            }
            Err(source) => {
                let _ = reg.remove();
                return Err(GadgetError::Bind { udc: udc_name, attempts, source });
            }
        }
    }
    // Keep it after this process exits: the daemon uses it, `gadget down` removes it.
    reg.detach();
    status()
}

fn find_udc(name: &str) -> Result<Udc, GadgetError> {
    let udcs = usb_gadget::udcs().map_err(|source| GadgetError::Configfs { what: "list UDCs", source })?;
    udcs.into_iter()
        .find(|u| u.name() == OsStr::new(name))
        .ok_or_else(|| GadgetError::UdcNotFound { name: name.into(), available: udc_names().unwrap_or_default() })
}

/// Unbinds and removes the gadget; nothing of it is left in configfs. Absent is fine.
pub fn down() -> Result<(), GadgetError> {
    let gadgets = usb_gadget::registered().map_err(|source| GadgetError::Configfs { what: "list gadgets", source })?;
    for g in gadgets {
        if g.name() == OsStr::new(GADGET_NAME) {
            g.remove().map_err(|source| GadgetError::Configfs { what: "remove gadget", source })?;
        }
    }
    Ok(())
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// The gadget as configfs and sysfs show it (readable without root).
pub fn status() -> Result<GadgetStatus, GadgetError> {
    status_at(Path::new(CONFIGFS_GADGETS), Path::new("/sys/class/udc"), Path::new("/dev"))
}

/// [`status`] against other roots (tests).
pub fn status_at(gadgets: &Path, udc_class: &Path, dev: &Path) -> Result<GadgetStatus, GadgetError> {
    let dir = gadgets.join(GADGET_NAME);
    if !dir.is_dir() {
        return Ok(GadgetStatus { exists: false, udc: None, udc_state: None, serial: None, nodes: Vec::new() });
    }
    let udc = read_trimmed(&dir.join("UDC"));
    let udc_state = udc.as_ref().and_then(|u| read_trimmed(&udc_class.join(u).join("state")));
    // One language directory (0x409, English) holds the strings.
    let serial = std::fs::read_dir(dir.join("strings"))
        .ok()
        .and_then(|mut d| d.find_map(|e| e.ok().and_then(|e| read_trimmed(&e.path().join("serialnumber")))));
    let mut functions: Vec<PathBuf> = std::fs::read_dir(dir.join("functions"))
        .map_err(|source| GadgetError::Configfs { what: "read gadget functions", source })?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("hid.")))
        .collect();
    functions.sort();
    let mut nodes = Vec::new();
    for f in functions {
        let Ok(desc) = std::fs::read(f.join("report_desc")) else { continue };
        let Some(interface) = interface_of(&desc) else { continue };
        let Some(node) = read_trimmed(&f.join("dev")).and_then(|d| node_for(dev, &d)) else { continue };
        nodes.push((interface, node));
    }
    Ok(GadgetStatus { exists: true, udc, udc_state, serial, nodes })
}

/// Which of our interfaces a report descriptor belongs to.
pub fn interface_of(desc: &[u8]) -> Option<HidInterface> {
    use super::descriptor::{CONSUMER, KEYBOARD, MOUSE, POINTER};
    [
        (KEYBOARD, HidInterface::Keyboard),
        (CONSUMER, HidInterface::Consumer),
        (POINTER, HidInterface::Pointer),
        (MOUSE, HidInterface::Mouse),
    ]
    .into_iter()
    .find(|(d, _)| *d == desc)
    .map(|(_, i)| i)
}

/// The character device in `dev` whose numbers are `major:minor`.
fn node_for(dev: &Path, numbers: &str) -> Option<PathBuf> {
    use std::os::linux::fs::MetadataExt;
    use std::os::unix::fs::FileTypeExt;
    let (major, minor) = numbers.split_once(':')?;
    let (major, minor): (u32, u32) = (major.parse().ok()?, minor.parse().ok()?);
    let want = libc::makedev(major, minor);
    std::fs::read_dir(dev)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_char_device() && m.st_rdev() == want))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udc_choice_never_silently_picks_dummy() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(choose_udc(None, &s(&["dummy_udc.0", "fe980000.usb"])).unwrap(), "fe980000.usb");
        assert!(matches!(choose_udc(None, &s(&["dummy_udc.0"])), Err(GadgetError::OnlyDummy(_))));
        assert!(matches!(choose_udc(None, &[]), Err(GadgetError::NoUdc)));
        assert!(matches!(choose_udc(None, &s(&["a.usb", "b.usb"])), Err(GadgetError::Ambiguous(_))));
        assert_eq!(choose_udc(Some("dummy_udc.0"), &s(&["dummy_udc.0"])).unwrap(), "dummy_udc.0");
        assert!(matches!(choose_udc(Some("x"), &s(&["dummy_udc.0"])), Err(GadgetError::UdcNotFound { .. })));
    }

    #[test]
    fn identity_changes_with_descriptors_and_is_valid_bcd() {
        let abs = identity(&DescriptorSet { profile: PointerProfile::Absolute });
        let rel = identity(&DescriptorSet { profile: PointerProfile::Relative });
        assert_ne!(abs, rel);
        for (_, bcd) in [abs, rel] {
            for shift in [0, 4, 8, 12] {
                assert!((bcd >> shift) & 0xF <= 9, "{bcd:#x}");
            }
        }
    }

    #[test]
    fn status_reads_a_fake_configfs() {
        let root = tempfile::tempdir().unwrap();
        let g = root.path().join("gadgets/tether");
        std::fs::create_dir_all(g.join("functions/hid.tether-0")).unwrap();
        std::fs::create_dir_all(g.join("strings/0x409")).unwrap();
        std::fs::write(g.join("UDC"), "dummy_udc.0\n").unwrap();
        std::fs::write(g.join("strings/0x409/serialnumber"), "abc\n").unwrap();
        std::fs::write(g.join("functions/hid.tether-0/report_desc"), super::super::descriptor::KEYBOARD).unwrap();
        std::fs::write(g.join("functions/hid.tether-0/dev"), "1:3\n").unwrap(); // /dev/null's numbers
        std::fs::create_dir_all(root.path().join("udc/dummy_udc.0")).unwrap();
        std::fs::write(root.path().join("udc/dummy_udc.0/state"), "configured\n").unwrap();
        let st = status_at(&root.path().join("gadgets"), &root.path().join("udc"), Path::new("/dev")).unwrap();
        assert!(st.exists);
        assert_eq!(st.udc.as_deref(), Some("dummy_udc.0"));
        assert_eq!(st.udc_state.as_deref(), Some("configured"));
        assert_eq!(st.serial.as_deref(), Some("abc"));
        assert_eq!(st.nodes, vec![(HidInterface::Keyboard, PathBuf::from("/dev/null"))]);
        let none = status_at(&root.path().join("nothing"), &root.path().join("udc"), Path::new("/dev")).unwrap();
        assert!(!none.exists);
    }
}
