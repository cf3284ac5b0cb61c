//! Reading and writing the boot partition's files (`tether.env`, `tether-trial.json`, and
//! on a Raspberry Pi the A/B block of `config.txt`, see [`super::tryboot`]).
//!
//! The partition is mounted read-only; a writer (root) remounts it read-write for one write
//! and back. Each write goes to a temporary file, is synced, renamed over the old one and the
//! directory synced: on FAT a rename is not atomic across a power cut, but the old or the new
//! file survives whole, and a torn `tether.env` reads as the defaults (slot A), never as a
//! slot that cannot boot.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::tryboot::{self, TrybootError, CONFIG_FILE};
use super::{BootEnv, Slot, TrialRecord, BOOT_ENV_FILE, TRIAL_FILE};

/// Errors on the boot partition.
#[derive(Debug, thiserror::Error)]
pub enum BootFilesError {
    /// Reading or writing a file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// `mount -o remount` failed (not root, or the partition is not there).
    #[error("could not remount {dir} {mode}: {detail}")]
    Remount {
        /// The mount point.
        dir: PathBuf,
        /// `rw` or `ro`.
        mode: &'static str,
        /// mount's own words.
        detail: String,
    },
    /// `config.txt`'s A/B block cannot be read (nothing was written).
    #[error(transparent)]
    Tryboot(#[from] TrybootError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BootFilesError + '_ {
    move |source| BootFilesError::Io { path: path.to_path_buf(), source }
}

/// The boot partition's directory.
#[derive(Debug, Clone)]
pub struct BootDir {
    dir: PathBuf,
}

impl BootDir {
    /// The partition mounted (or a plain directory, in tests) at `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> BootDir {
        BootDir { dir: dir.into() }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The boot state; the defaults when there is no file (what the script assumes too).
    pub fn read_env(&self) -> Result<BootEnv, BootFilesError> {
        let path = self.dir.join(BOOT_ENV_FILE);
        match fs::read(&path) {
            Ok(bytes) => Ok(BootEnv::parse(&bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BootEnv::default()),
            Err(e) => Err(io(&path)(e)),
        }
    }

    /// Writes the boot state, and on a Raspberry Pi (a `config.txt` with tether's A/B block)
    /// the block that follows it: the normal boot is the first good slot. `config.txt` goes
    /// first: a power cut between the two leaves a committed slot whose `tether.env` still
    /// says "on trial", which its judge settles on the next boot, never a normal boot into
    /// a slot that is not good.
    pub fn write_env(&self, env: &BootEnv) -> Result<(), BootFilesError> {
        let config = match self.read_config()? {
            Some(text) => tryboot::follow(&text, env)?,
            None => None,
        };
        let env_text = env.render();
        let mut files: Vec<(&str, &[u8])> = Vec::with_capacity(2);
        if let Some(config) = &config {
            files.push((CONFIG_FILE, config.as_bytes()));
        }
        files.push((BOOT_ENV_FILE, env_text.as_bytes()));
        self.write_files(&files)
    }

    /// The slot a normal boot uses on a Raspberry Pi (`config.txt`'s A/B block); None on a
    /// board without the block.
    pub fn tryboot_normal(&self) -> Result<Option<Slot>, BootFilesError> {
        match self.read_config()? {
            Some(text) => Ok(tryboot::normal_slot(&text)?),
            None => Ok(None),
        }
    }

    /// `config.txt`, None when the partition has none.
    fn read_config(&self) -> Result<Option<String>, BootFilesError> {
        let path = self.dir.join(CONFIG_FILE);
        match fs::read_to_string(&path) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(&path)(e)),
        }
    }

    /// The last trial's record, if any (an unreadable one counts as none).
    pub fn read_trial(&self) -> Option<TrialRecord> {
        let bytes = fs::read(self.dir.join(TRIAL_FILE)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Writes the trial record.
    pub fn write_trial(&self, record: &TrialRecord) -> Result<(), BootFilesError> {
        let mut text = serde_json::to_vec_pretty(record).unwrap_or_default();
        text.push(b'\n');
        self.write(TRIAL_FILE, &text)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> Result<(), BootFilesError> {
        self.write_files(&[(name, bytes)])
    }

    /// Writes each file in turn (each whole or not at all) under one read-write remount.
    fn write_files(&self, files: &[(&str, &[u8])]) -> Result<(), BootFilesError> {
        let remounted = self.remount_rw()?;
        let written = files.iter().try_for_each(|(name, bytes)| write_synced(&self.dir, name, bytes));
        // Back to read-only whatever the write did; a write error wins over a remount one.
        let back = if remounted { self.remount("ro") } else { Ok(()) };
        written.and(back)
    }

    /// Remounts read-write when the directory is a read-only mount; whether it did.
    fn remount_rw(&self) -> Result<bool, BootFilesError> {
        let stat = nix::sys::statvfs::statvfs(&self.dir)
            .map_err(|e| io(&self.dir)(std::io::Error::from_raw_os_error(e as i32)))?;
        if !stat.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY) {
            return Ok(false);
        }
        self.remount("rw")?;
        Ok(true)
    }

    fn remount(&self, mode: &'static str) -> Result<(), BootFilesError> {
        let out = Command::new("mount").arg("-o").arg(format!("remount,{mode}")).arg(&self.dir).output();
        match out {
            Ok(o) if o.status.success() => Ok(()),
            Ok(o) => Err(BootFilesError::Remount {
                dir: self.dir.clone(),
                mode,
                detail: String::from_utf8_lossy(&o.stderr).trim().to_string(),
            }),
            Err(e) => Err(BootFilesError::Remount { dir: self.dir.clone(), mode, detail: e.to_string() }),
        }
    }
}

/// Temporary file, fsync, rename, fsync of the directory.
fn write_synced(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), BootFilesError> {
    let tmp = dir.join(format!("{name}.new"));
    let path = dir.join(name);
    let mut f = fs::File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(bytes).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    drop(f);
    fs::rename(&tmp, &path).map_err(io(&path))?;
    fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::boot::{Slot, SlotState, TrialOutcome};

    #[test]
    fn no_file_is_slot_a_and_writes_read_back() {
        let tmp = tempfile::tempdir().unwrap();
        let boot = BootDir::new(tmp.path());
        let mut env = boot.read_env().unwrap();
        assert_eq!((env.primary(), env.next_boot()), (Slot::A, Slot::A));
        env.set_primary(Slot::B, 3).unwrap();
        boot.write_env(&env).unwrap();
        assert_eq!(boot.read_env().unwrap().state(Slot::B), SlotState::Try { left: 3 });
        assert!(!tmp.path().join("tether.env.new").exists());
        assert_eq!(boot.read_trial(), None);
        let rec = TrialRecord {
            slot: Slot::B,
            version: None,
            outcome: TrialOutcome::Trying,
            reason: String::new(),
            at_unix: 1,
        };
        boot.write_trial(&rec).unwrap();
        assert_eq!(boot.read_trial(), Some(rec));
        fs::write(tmp.path().join(TRIAL_FILE), b"{torn").unwrap();
        assert_eq!(boot.read_trial(), None);
    }

    #[test]
    fn on_a_pi_the_config_block_follows_the_boot_state() {
        let tmp = tempfile::tempdir().unwrap();
        let boot = BootDir::new(tmp.path());
        let config = format!("arm_64bit=1\nkernel=vmlinuz\n{}dtoverlay=tether-tc358743\n", tryboot::block(Slot::A));
        fs::write(tmp.path().join(CONFIG_FILE), &config).unwrap();
        assert_eq!(boot.tryboot_normal().unwrap(), Some(Slot::A));
        // RAUC wrote b: on trial, the normal boot stays a (config.txt untouched).
        let mut env = boot.read_env().unwrap();
        env.set_primary(Slot::B, 3).unwrap();
        boot.write_env(&env).unwrap();
        assert_eq!(fs::read_to_string(tmp.path().join(CONFIG_FILE)).unwrap(), config);
        // Marked good: b boots normally from now on; the rest of config.txt is as it was.
        env.set_state(Slot::B, "good").unwrap();
        boot.write_env(&env).unwrap();
        assert_eq!(boot.tryboot_normal().unwrap(), Some(Slot::B));
        let now = fs::read_to_string(tmp.path().join(CONFIG_FILE)).unwrap();
        assert!(now.starts_with("arm_64bit=1\nkernel=vmlinuz\n") && now.ends_with("dtoverlay=tether-tc358743\n"));
        assert!(!tmp.path().join("config.txt.new").exists());
        // An edited block: refused, and tether.env is not written either.
        fs::write(tmp.path().join(CONFIG_FILE), now.replace("os_prefix=slot-a/", "os_prefix=slot-b/")).unwrap();
        env.set_state(Slot::B, "bad").unwrap();
        assert!(matches!(boot.write_env(&env), Err(BootFilesError::Tryboot(_))));
        assert_eq!(boot.read_env().unwrap().state(Slot::B), SlotState::Good);
        // A U-Boot board has no block: only tether.env is written.
        fs::write(tmp.path().join(CONFIG_FILE), "kernel=vmlinuz\n").unwrap();
        boot.write_env(&env).unwrap();
        assert_eq!(boot.tryboot_normal().unwrap(), None);
        assert_eq!(fs::read_to_string(tmp.path().join(CONFIG_FILE)).unwrap(), "kernel=vmlinuz\n");
    }
}
