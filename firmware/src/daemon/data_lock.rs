//! One daemon per data directory.
//!
//! The task store, tokens, calibration and certificates in a data directory belong to the
//! daemon that opened it. A second daemon on the same directory would mark the first one's
//! running tasks `interrupted` (the store's crash recovery) and both would write one journal.
//! [`DataDirLock`] takes an exclusive `flock(2)` on `daemon.lock` in the directory before
//! anything in it is read or written; the kernel drops the lock when the process ends, so a
//! crashed daemon (even `kill -9`) never leaves the directory locked. The file itself records
//! who holds it, so the refusal can name the running daemon.
//!
//! The directory holds secrets (the session key, token hashes, the CA key), so the lock also
//! makes it private whatever the umask of whoever started the daemon: the directory and every
//! directory below it 0700, every file 0600. What was looser is fixed and named in
//! [`DataDirLock::fixed`]; what cannot be fixed (a directory the daemon does not own) refuses
//! the start.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
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
    /// The directory is readable by others and this daemon cannot make it private.
    #[error(
        "the data directory {} is open to other users (mode {mode:o}, owner uid {owner}) and this daemon (uid {me}) \
         cannot make it private: chown it to the daemon's user, or give the daemon its own --data-dir",
        dir.display()
    )]
    NotPrivate {
        /// The directory.
        dir: PathBuf,
        /// Its mode bits.
        mode: u32,
        /// Its owner.
        owner: u32,
        /// The daemon's effective uid.
        me: u32,
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
    fixed: Vec<PathBuf>,
    left_alone: Vec<PathBuf>,
}

impl DataDirLock {
    /// Locks `dir` (creating it if needed) for this process; `socket` is written beside the
    /// pid so a refused second daemon can say which one runs.
    pub fn acquire(dir: &Path, socket: &Path) -> Result<DataDirLock, DataLockError> {
        let io = |source| DataLockError::Io { dir: dir.to_path_buf(), source };
        // Made 0700 from the start (parents as the umask says: they are not ours to judge).
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io)?;
        let meta = std::fs::metadata(dir).map_err(io)?;
        let mut fixed = Vec::new();
        if meta.mode() & 0o077 != 0 {
            if std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).is_err() {
                let (mode, owner, me) = (meta.mode() & 0o7777, meta.uid(), nix::unistd::Uid::effective().as_raw());
                return Err(DataLockError::NotPrivate { dir: dir.to_path_buf(), mode, owner, me });
            }
            fixed.push(dir.to_path_buf());
        }
        let path = dir.join(LOCK_FILE);
        // Not truncated on open: until the lock is ours, the contents are the holder's.
        let file =
            std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o600).open(&path);
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
        if let Err(e) = write(&mut held) {
            // The lock is held all the same: a full disk must not keep the daemon from
            // starting (it serves what it has, read-only). A refused second daemon then
            // cannot say who holds the directory, only that someone does.
            if super::storage::Unwritable::of_io(&e) != super::storage::Unwritable::Full {
                return Err(io(e));
            }
            tracing::warn!(path = %path.display(), error = %e, "the data directory is locked, but the disk is full: who holds it is not written");
        }
        // Only once the lock is ours: a running daemon's files are not touched by a refused one.
        let mut left_alone = Vec::new();
        make_private(dir, &mut fixed, &mut left_alone).map_err(io)?;
        Ok(DataDirLock { _held: held, path, fixed, left_alone })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The data directory and what is below it that was open to other users and are
    /// now private (0600 files, 0700 directories); empty when all was already private.
    pub fn fixed(&self) -> &[PathBuf] {
        &self.fixed
    }

    /// What is below the directory, open to other users, and owned by another user (so
    /// not the daemon's to change): left as it is, and named so the start says so.
    pub fn left_alone(&self) -> &[PathBuf] {
        &self.left_alone
    }
}

/// Removes group and other bits from everything below `dir` that this process owns: files
/// keep only their owner's bits (0644 becomes 0600), directories become 0700. Entries
/// owned by someone else (the appliance's root-owned `ssh/`, `lost+found`) are not entered or
/// changed: they are not the daemon's, and it cannot read them anyway. Symbolic links are not
/// followed.
fn make_private(dir: &Path, fixed: &mut Vec<PathBuf>, left_alone: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let me = nix::unistd::Uid::effective().as_raw();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = match std::fs::symlink_metadata(entry.path()) {
            Ok(meta) => meta,
            // Gone since the listing (nothing else should be writing here; the lock is held).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if meta.file_type().is_symlink() {
            continue;
        }
        if meta.uid() != me {
            if meta.mode() & 0o077 != 0 {
                left_alone.push(entry.path());
            }
            continue;
        }
        let mode = meta.mode() & 0o7777;
        let private = if meta.is_dir() { 0o700 } else { mode & 0o700 };
        if mode & 0o077 != 0 {
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(private))?;
            fixed.push(entry.path());
        }
        if meta.is_dir() {
            make_private(&entry.path(), fixed, left_alone)?;
        }
    }
    Ok(())
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
    fn a_loose_directory_is_made_private_and_what_was_fixed_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(data.join("tasks.db"), b"x").unwrap();
        std::fs::set_permissions(data.join("tasks.db"), std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::create_dir(data.join("tls")).unwrap();
        std::fs::set_permissions(data.join("tls"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(data.join("tls/ca.key"), b"k").unwrap();
        std::fs::set_permissions(data.join("tls/ca.key"), std::fs::Permissions::from_mode(0o666)).unwrap();
        std::fs::write(data.join("already"), b"k").unwrap();
        std::fs::set_permissions(data.join("already"), std::fs::Permissions::from_mode(0o600)).unwrap();
        let lock = DataDirLock::acquire(&data, Path::new("/s")).unwrap();
        let mode = |p: &str| std::fs::metadata(data.join(p)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(""), 0o700);
        assert_eq!(mode("tasks.db"), 0o600);
        assert_eq!(mode("tls"), 0o700);
        assert_eq!(mode("tls/ca.key"), 0o600);
        assert_eq!(mode("already"), 0o600);
        let mut fixed: Vec<_> = lock.fixed().iter().map(|p| p.strip_prefix(&data).unwrap().to_path_buf()).collect();
        fixed.sort();
        let want: Vec<PathBuf> = ["", "tasks.db", "tls", "tls/ca.key"].iter().map(PathBuf::from).collect();
        assert_eq!(fixed, want);
        drop(lock);
        // Already private: nothing to say the second time.
        assert!(DataDirLock::acquire(&data, Path::new("/s")).unwrap().fixed().is_empty());
    }

    #[test]
    fn what_another_user_owns_is_left_alone_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        let theirs = data.join("ssh");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Only root can give a file away; as anyone else the directory is simply ours.
        let given = nix::unistd::chown(&theirs, Some(nix::unistd::Uid::from_raw(65534)), None).is_ok();
        let lock = DataDirLock::acquire(&data, Path::new("/s")).unwrap();
        let mode = std::fs::metadata(&theirs).unwrap().permissions().mode() & 0o777;
        if given {
            assert_eq!(mode, 0o755, "not the daemon's to change");
            assert_eq!(lock.left_alone(), std::slice::from_ref(&theirs));
            assert!(!lock.fixed().contains(&theirs));
        } else {
            assert_eq!(mode, 0o700);
            assert!(lock.left_alone().is_empty());
        }
    }

    #[test]
    fn a_new_directory_is_private_whatever_the_umask() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("a/b");
        let lock = DataDirLock::acquire(&data, Path::new("/s")).unwrap();
        assert_eq!(std::fs::metadata(&data).unwrap().permissions().mode() & 0o777, 0o700);
        let lock_mode = std::fs::metadata(lock.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(lock_mode & 0o077, 0, "lock file {lock_mode:o}");
        assert!(lock.fixed().is_empty());
    }

    #[test]
    fn an_empty_record_still_reads_as_a_holder() {
        assert_eq!(describe_holder(""), "a daemon that is still starting");
        assert_eq!(describe_holder("pid 7, socket /s\nmore"), "pid 7, socket /s");
    }
}
