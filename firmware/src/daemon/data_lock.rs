//! One daemon per data directory.
//!
//! The task store, tokens, calibration and certificates in a data directory belong to the
//! daemon that opened it. A second daemon on the same directory would mark the first one's
//! running tasks `interrupted` (the store's crash recovery) and both would write one journal.
//! [`DataDirLock`] takes an exclusive `flock(2)` on `daemon.lock` in the directory before
//! anything in it is read or written; the kernel drops the lock when the process ends, so a
//! crashed daemon (even `kill -9`) never leaves the directory locked. The file itself records
//! who holds it, so the refusal can name the running daemon.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// The lock file's name inside the data directory.
pub const LOCK_FILE: &str = "daemon.lock";

/// Why the data directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum DataLockError {
    /// Another daemon holds the directory.
    #[error(
        "the data directory {} is in use by another tether daemon ({holder}); stop that one first, or give this \
         one its own --data-dir",
        dir.display()
    )]
    InUse {
        /// The directory.
        dir: PathBuf,
        /// Who holds it, as its lock file says (`pid 123, socket /run/tether/control.sock`).
        holder: String,
    },
    /// The directory or its lock file could not be made or locked.
    #[error("lock the data directory {}: {source}", dir.display())]
    Io {
        /// The directory.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// An exclusive hold on a data directory, released when dropped (or when the process ends).
#[derive(Debug)]
pub struct DataDirLock {
    _held: Flock<File>,
    path: PathBuf,
}

impl DataDirLock {
    /// Locks `dir` (creating it if needed) for this process; `socket` is written beside the
    /// pid so a refused second daemon can say which one runs.
    pub fn acquire(dir: &Path, socket: &Path) -> Result<DataDirLock, DataLockError> {
        let io = |source| DataLockError::Io { dir: dir.to_path_buf(), source };
        std::fs::create_dir_all(dir).map_err(io)?;
        let path = dir.join(LOCK_FILE);
        // Not truncated on open: until the lock is ours, the contents are the holder's.
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path);
        let file = file.map_err(io)?;
        let mut held = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(held) => held,
            Err((mut file, Errno::EWOULDBLOCK)) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(DataLockError::InUse { dir: dir.to_path_buf(), holder: describe_holder(&text) });
            }
            Err((_, errno)) => return Err(io(errno.into())),
        };
        let record = format!("pid {}, socket {}\n", std::process::id(), socket.display());
        let write = |f: &mut File| -> std::io::Result<()> {
            f.set_len(0)?;
            f.rewind()?;
            f.write_all(record.as_bytes())?;
            f.sync_data()
        };
        write(&mut held).map_err(io)?;
        Ok(DataDirLock { _held: held, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The holder as its lock file names it, or a plain description when the file says nothing
/// (a holder that has not written it yet).
fn describe_holder(text: &str) -> String {
    let line = text.lines().next().unwrap_or("").trim();
    if line.is_empty() {
        "a daemon that is still starting".into()
    } else {
        line.chars().take(300).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_names_the_first_and_the_first_is_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let first = DataDirLock::acquire(&data, Path::new("/run/one.sock")).unwrap();
        // flock locks belong to the open file: a second open in this process conflicts
        // exactly as another process would.
        let e = DataDirLock::acquire(&data, Path::new("/run/two.sock")).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, DataLockError::InUse { .. }), "{e:?}");
        assert!(msg.contains(&format!("pid {}", std::process::id())), "{msg}");
        assert!(msg.contains("/run/one.sock"), "{msg}");
        assert!(msg.contains("--data-dir"), "{msg}");
        let text = std::fs::read_to_string(first.path()).unwrap();
        assert!(text.contains("/run/one.sock"), "the refused one did not overwrite the record: {text}");
        drop(first);
        let again = DataDirLock::acquire(&data, Path::new("/run/two.sock")).unwrap();
        assert!(std::fs::read_to_string(again.path()).unwrap().contains("/run/two.sock"));
    }

    #[test]
    fn an_unwritable_directory_is_an_io_error() {
        let file = tempfile::NamedTempFile::new().unwrap();
        // A regular file cannot be a directory.
        let e = DataDirLock::acquire(&file.path().join("data"), Path::new("/s")).unwrap_err();
        assert!(matches!(e, DataLockError::Io { .. }), "{e:?}");
    }

    #[test]
    fn an_empty_record_still_reads_as_a_holder() {
        assert_eq!(describe_holder(""), "a daemon that is still starting");
        assert_eq!(describe_holder("pid 7, socket /s\nmore"), "pid 7, socket /s");
    }
}
