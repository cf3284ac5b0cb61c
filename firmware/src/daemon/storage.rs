//! Whether the data directory takes writes, and why not.
//!
//! An answer that reports a change (a task finished, a token added, a calibration saved) is
//! sent only after the change is on disk. When the disk is full, or the file system refuses
//! writes, the change is not made and the caller gets `STORAGE_FAILED` (retryable). The
//! daemon keeps serving what only reads, and says in `status.storage` that it cannot write.
//!
//! [`StorageHealth`] is what the daemon knows: the last write to the data directory failed
//! (and how), or it did not. Every write to the task store and the calibration file reports
//! here; the next write that succeeds clears it, so space that comes back is noticed
//! without a restart.

use std::sync::Mutex;

use serde::Serialize;

use crate::sync::LockPlain;

/// Why the data directory cannot be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, thiserror::Error)]
#[serde(rename_all = "snake_case")]
pub enum Unwritable {
    /// No space left on the file system (ENOSPC, EDQUOT, SQLite's SQLITE_FULL).
    #[error("the appliance's disk is full")]
    Full,
    /// The file system refused the write (read-only, an I/O error).
    #[error("the appliance's data directory cannot be written (a read-only file system or an I/O error)")]
    Failed,
}

impl Unwritable {
    /// How an I/O error from a write in the data directory reads: a full disk or quota is
    /// [`Unwritable::Full`], anything else [`Unwritable::Failed`].
    pub fn of_io(e: &std::io::Error) -> Unwritable {
        match e.raw_os_error().map(nix::errno::Errno::from_raw) {
            Some(nix::errno::Errno::ENOSPC | nix::errno::Errno::EDQUOT) => Unwritable::Full,
            _ if e.kind() == std::io::ErrorKind::StorageFull => Unwritable::Full,
            _ => Unwritable::Failed,
        }
    }

    /// Whether a SQLite error says the disk refused a write (as opposed to a bug, a
    /// constraint, a corrupt file): `Some` with how.
    pub fn of_sqlite(e: &rusqlite::Error) -> Option<Unwritable> {
        use rusqlite::ErrorCode as C;
        match e.sqlite_error_code()? {
            C::DiskFull => Some(Unwritable::Full),
            // SQLite reports a write that found no space while growing its shared-memory
            // index or journal as an I/O error (SQLITE_IOERR_SHMSIZE, _WRITE, _FSYNC).
            C::SystemIoFailure | C::ReadOnly | C::CannotOpen => Some(Unwritable::Failed),
            _ => None,
        }
    }

    /// [`Unwritable::Failed`] becomes [`Unwritable::Full`] when the file system holding
    /// `dir` has no space left for the daemon: SQLite cannot always tell (its errno is gone
    /// by the time it answers), the file system can.
    pub fn refined(self, dir: &std::path::Path) -> Unwritable {
        match (self, nix::sys::statvfs::statvfs(dir)) {
            (Unwritable::Failed, Ok(fs)) if fs.blocks_available() == 0 => Unwritable::Full,
            (why, _) => why,
        }
    }

    /// What a person should do, for the error's message and `status.storage.reason`:
    /// never a path (remote callers read it); `tether doctor` names the directory.
    pub fn advice(self) -> &'static str {
        match self {
            Unwritable::Full => {
                "the appliance's disk is full: free space in its data directory (`tether doctor` shows where)"
            }
            Unwritable::Failed => {
                "the appliance cannot write its data directory (a read-only file system or an I/O error): see the \
                 daemon's log and `tether doctor`"
            }
        }
    }
}

/// `status.storage`: whether changes can be saved now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StorageStatus {
    /// `false` from a write to the data directory that failed until the next that
    /// succeeds (or from a start on a disk that took no writes): changes are refused with
    /// `STORAGE_FAILED`, reads are served.
    pub writable: bool,
    /// Why not, and what to do, for a person.
    pub reason: Option<&'static str>,
    /// `full` or `failed`, when not writable.
    pub problem: Option<Unwritable>,
}

/// What the daemon knows about writing its data directory: shared by the store thread
/// and the daemon (clones of an `Arc`).
#[derive(Debug, Default)]
pub struct StorageHealth {
    problem: Mutex<Option<Unwritable>>,
}

impl StorageHealth {
    /// A write failed because of `why`. Logged at the first failure of a run of them.
    pub fn failed(&self, why: Unwritable) {
        let before = self.problem.lock_plain().replace(why);
        if before != Some(why) {
            tracing::error!(problem = %why, "the data directory takes no writes: changes are refused until it does");
        }
    }

    /// A write succeeded.
    pub fn succeeded(&self) {
        if let Some(was) = self.problem.lock_plain().take() {
            tracing::info!(was = %was, "the data directory takes writes again");
        }
    }

    /// The problem, if the last write failed.
    pub fn problem(&self) -> Option<Unwritable> {
        *self.problem.lock_plain()
    }

    /// For `status`.
    pub fn status(&self) -> StorageStatus {
        let problem = self.problem();
        StorageStatus { writable: problem.is_none(), reason: problem.map(Unwritable::advice), problem }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_that_mean_the_disk_refused_a_write_are_told_apart() {
        let io = |errno: nix::errno::Errno| std::io::Error::from_raw_os_error(errno as i32);
        assert_eq!(Unwritable::of_io(&io(nix::errno::Errno::ENOSPC)), Unwritable::Full);
        assert_eq!(Unwritable::of_io(&io(nix::errno::Errno::EDQUOT)), Unwritable::Full);
        assert_eq!(Unwritable::of_io(&io(nix::errno::Errno::EROFS)), Unwritable::Failed);
        assert_eq!(Unwritable::of_io(&io(nix::errno::Errno::EIO)), Unwritable::Failed);
        let sqlite = |code: i32| rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None);
        assert_eq!(Unwritable::of_sqlite(&sqlite(rusqlite::ffi::SQLITE_FULL)), Some(Unwritable::Full));
        assert_eq!(Unwritable::of_sqlite(&sqlite(rusqlite::ffi::SQLITE_IOERR_SHMSIZE)), Some(Unwritable::Failed));
        assert_eq!(Unwritable::of_sqlite(&sqlite(rusqlite::ffi::SQLITE_CONSTRAINT)), None);
        assert_eq!(Unwritable::of_sqlite(&rusqlite::Error::QueryReturnedNoRows), None);
        // A file system with room keeps an I/O error an I/O error.
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Unwritable::Failed.refined(dir.path()), Unwritable::Failed);
        assert_eq!(Unwritable::Full.refined(dir.path()), Unwritable::Full);
    }

    #[test]
    fn health_follows_the_last_write() {
        let h = StorageHealth::default();
        assert_eq!(h.status(), StorageStatus { writable: true, reason: None, problem: None });
        h.failed(Unwritable::Full);
        let st = h.status();
        assert!(!st.writable);
        assert_eq!(st.problem, Some(Unwritable::Full));
        assert!(st.reason.is_some_and(|r| r.contains("disk is full") && !r.contains('/')), "{st:?}");
        h.succeeded();
        assert!(h.status().writable);
    }
}
