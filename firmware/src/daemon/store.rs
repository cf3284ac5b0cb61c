//! The task store: one thread owns the SQLite connection (WAL); callers send it jobs over a
//! bounded channel and await the answer, so no runtime worker ever waits on SQLite.
//!
//! Schema versions live in `PRAGMA user_version`; [`MIGRATIONS`] brings any older database
//! up to date at open. Every task transition and step is an event with a per-task sequence
//! number, so a stream can resume after any `seq` without gaps or duplicates.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::storage::{StorageHealth, Unwritable};

/// Jobs that may wait for the store thread.
const QUEUE: usize = 256;

/// Schema migrations, index = version - 1. Append only.
pub const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE tasks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    owner TEXT NOT NULL,
    state TEXT NOT NULL,
    scope TEXT NOT NULL,
    token_hash BLOB,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    result TEXT
);
CREATE TABLE events (
    task_id INTEGER NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    at_ms INTEGER NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (task_id, seq)
);
CREATE TABLE steps (
    task_id INTEGER NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    tool TEXT NOT NULL,
    args TEXT NOT NULL,
    result TEXT NOT NULL,
    duration_ms INTEGER NOT NULL,
    caller TEXT NOT NULL,
    PRIMARY KEY (task_id, seq)
);
CREATE TABLE approvals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id INTEGER NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    question TEXT NOT NULL,
    state TEXT NOT NULL,
    asked_ms INTEGER NOT NULL,
    answered_ms INTEGER,
    answered_by TEXT
);
CREATE TABLE tokens (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL,
    hash BLOB NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE TABLE pairing_codes (
    code_hash BLOB PRIMARY KEY,
    role TEXT NOT NULL,
    expires_ms INTEGER NOT NULL,
    used INTEGER NOT NULL DEFAULT 0
);
"#,
    r#"
ALTER TABLE tokens ADD COLUMN last_used_ms INTEGER;
ALTER TABLE pairing_codes ADD COLUMN name TEXT;
CREATE TABLE secrets (
    name TEXT PRIMARY KEY,
    value BLOB NOT NULL
);
"#,
    // A small PNG of the picture a step's coordinates were read in (the console's log).
    r#"
ALTER TABLE steps ADD COLUMN thumbnail BLOB;
"#,
    // Task recordings (daemon/recordings.rs), the picture after a verified step, and the
    // screen when the task ended (the report's).
    r#"
CREATE TABLE recordings (
    task_id INTEGER PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
    state TEXT NOT NULL,
    reason TEXT,
    bytes INTEGER NOT NULL DEFAULT 0,
    duration_ms INTEGER,
    width INTEGER,
    height INTEGER,
    source TEXT,
    started_ms INTEGER NOT NULL,
    ended_ms INTEGER
);
ALTER TABLE steps ADD COLUMN after_thumbnail BLOB;
ALTER TABLE tasks ADD COLUMN final_png BLOB;
"#,
];

/// States a task can end in; anything else is unfinished.
pub const TERMINAL_STATES: &[&str] = &["completed", "failed", "cancelled", "rejected", "abandoned", "interrupted"];

/// Errors from the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed.
    #[error("database")]
    Sqlite(#[from] rusqlite::Error),
    /// The database was written by a newer tether.
    #[error("database schema version {found} is newer than this build's {supported}")]
    TooNew {
        /// Version found.
        found: i64,
        /// Newest version this build knows.
        supported: usize,
    },
    /// The store thread is gone (daemon shutting down).
    #[error("the task store is closed")]
    Closed,
    /// The task does not exist.
    #[error("task {0} does not exist")]
    NoSuchTask(i64),
    /// The data directory could not be created.
    #[error("create {}", .0.display())]
    Io(std::path::PathBuf, #[source] std::io::Error),
    /// The disk took no write (full, read-only, failing): nothing was changed.
    #[error(transparent)]
    Unwritable(#[from] Unwritable),
}

impl StoreError {
    /// Whether this is SQLite saying the disk refused a write, and how.
    fn unwritable(&self) -> Option<Unwritable> {
        match self {
            StoreError::Sqlite(e) => Unwritable::of_sqlite(e),
            StoreError::Unwritable(why) => Some(*why),
            _ => None,
        }
    }
}

/// One stored event.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    /// The task.
    pub task_id: i64,
    /// Sequence within the task, from 1.
    pub seq: i64,
    /// Wall-clock time in Unix milliseconds.
    pub at_ms: i64,
    /// Kind, e.g. `state`, `step`, `note`.
    pub kind: String,
    /// Event body.
    pub body: Value,
}

/// One step for [`Store::append_step`].
#[derive(Debug, Clone, PartialEq)]
pub struct StepRecord {
    /// The method (`action`, `batch`).
    pub tool: String,
    /// Its arguments.
    pub args: Value,
    /// Its result or error.
    pub result: Value,
    /// How long it took.
    pub duration_ms: u64,
    /// Who made it.
    pub caller: Value,
    /// A small PNG of the screenshot it acted on, if it acted on one.
    pub thumbnail: Option<Vec<u8>>,
    /// A small PNG of the screen after it, when it was verified.
    pub after_thumbnail: Option<Vec<u8>>,
}

/// A stored task's summary.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredTask {
    /// Id.
    pub id: i64,
    /// Title.
    pub title: String,
    /// Owner (who opened it).
    pub owner: String,
    /// Current state.
    pub state: String,
}

/// A question's row in `approvals`, written in the transaction of the state change it
/// goes with ([`Store::transition`]).
#[derive(Debug, Clone, PartialEq)]
pub enum ApprovalWrite {
    /// A question was asked: a new `pending` row with this text.
    Asked(String),
    /// Approval `id` was answered (`approved`, `rejected`, `withdrawn`) by `by`.
    Answered {
        /// The row.
        id: i64,
        /// The answer.
        state: &'static str,
        /// Who answered, as the journal describes them.
        by: String,
    },
}

/// One job for the store thread: `write` jobs need a connection that may write (a store
/// opened read-only tries to open for writing first); `run` gets the connection, or why
/// there is none that may write.
struct Job {
    write: bool,
    run: Box<dyn FnOnce(Conn<'_>) + Send>,
    /// The last job: the thread closes the connection (SQLite checkpoints its journal into
    /// the database and removes it) and then answers here.
    close: Option<oneshot::Sender<()>>,
}

/// What a job is given: the connection, or why there is none that may write.
type Conn<'a> = Result<&'a mut Connection, Unwritable>;

/// Handle to the store thread; clones share it.
#[derive(Debug, Clone)]
pub struct Store {
    jobs: mpsc::Sender<Job>,
    health: Arc<StorageHealth>,
    /// The directory the database lives in (`None`: in memory).
    dir: Option<Arc<Path>>,
}

/// The store thread's side: the connection, and whether it may write.
struct Db {
    conn: Connection,
    path: PathBuf,
    writable: bool,
    health: Arc<StorageHealth>,
    /// How the database is opened for writing ([`open_writable`]; tests refuse).
    open: Opener,
}

/// Opens the database for writing: the connection and the tasks it interrupted.
type Opener = fn(&Path) -> Result<(Connection, Vec<i64>), StoreError>;

impl Db {
    fn serve(&mut self, job: Job) {
        if job.write && !self.writable {
            self.reopen();
        }
        if job.write && !self.writable {
            (job.run)(Err(self.health.problem().unwrap_or(Unwritable::Failed)));
        } else {
            (job.run)(Ok(&mut self.conn));
        }
    }

    /// A store opened read-only (the disk took no write at start) tries to open for
    /// writing again, at each write asked of it: once the disk has space, it works again,
    /// without a restart. Tasks unfinished at the last shutdown become `interrupted` then.
    fn reopen(&mut self) {
        match (self.open)(&self.path) {
            Ok((conn, interrupted)) => {
                self.conn = conn;
                self.writable = true;
                self.health.succeeded();
                tracing::info!("the task store is open for writing again");
                if !interrupted.is_empty() {
                    tracing::warn!(tasks = ?interrupted, "tasks unfinished at the last shutdown are now interrupted");
                }
            }
            Err(e) => match e.unwritable() {
                Some(why) => {
                    let why = self.path.parent().map_or(why, |dir| why.refined(dir));
                    tracing::debug!(error = ?e, "the task store is still not writable");
                    self.health.failed(why);
                }
                None => tracing::error!(error = ?e, "the task store could not be opened for writing"),
            },
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)).unwrap_or(0)
}

/// Opens (creating and migrating) the database at `path` for writing, on the calling
/// thread, and marks the tasks a previous run left unfinished `interrupted`.
fn open_writable(path: &Path) -> Result<(Connection, Vec<i64>), StoreError> {
    let mut conn = Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // FULL: an event acknowledged to a caller survives power loss and kill -9.
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    migrate(&conn)?;
    let interrupted = interrupt_unfinished(&mut conn)?;
    Ok((conn, interrupted))
}

/// `file:` URI of `path` with `query` (`None`: a path the URI form cannot carry).
fn file_uri(path: &Path, query: &str) -> Option<String> {
    let text = path.to_str()?;
    let escaped = text.replace('%', "%25").replace('?', "%3f").replace('#', "%23");
    Some(format!("file:{escaped}?{query}"))
}

/// Opens the database at `path` only to read it, for a start on a disk that takes no
/// write: first as usual but read-only (which reads a journal a crash left behind), then
/// as immutable (which needs no shared-memory index: SQLite cannot make one on a full
/// disk), but only when the write-ahead log is empty (immutable ignores it: what a crash
/// left there, a revoked token say, would read as never having happened), and when neither
/// reads anything, an empty store in memory (reads answer "nothing yet"; writes are still
/// refused).
fn open_read_only(path: &Path) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let wal_empty = std::fs::metadata(&wal).map_or(true, |m| m.len() == 0);
    for query in ["mode=ro", "immutable=1"] {
        if query == "immutable=1" && !wal_empty {
            tracing::warn!("the task store's journal holds changes it cannot read without space: not read");
            break;
        }
        let Some(uri) = file_uri(path, query) else { break };
        let read = Connection::open_with_flags(&uri, flags)
            .and_then(|conn| conn.pragma_query_value(None, "user_version", |r| r.get::<_, i64>(0)).map(|v| (conn, v)));
        match read {
            Ok((_, version)) if usize::try_from(version).unwrap_or(usize::MAX) > MIGRATIONS.len() => {
                return Err(StoreError::TooNew { found: version, supported: MIGRATIONS.len() });
            }
            Ok((conn, version)) if version > 0 => {
                tracing::warn!(how = query, "the task store is open read-only");
                return Ok(conn);
            }
            // No schema: nothing stored yet.
            Ok(_) => break,
            Err(e) => tracing::debug!(how = query, error = %e, "the task store cannot be read this way"),
        }
    }
    tracing::warn!("nothing stored can be read: the task store starts empty and read-only");
    let conn = Connection::open_in_memory()?;
    migrate(&conn)?;
    Ok(conn)
}

/// Brings the schema up to date ([`MIGRATIONS`]).
fn migrate(conn: &Connection) -> Result<(), StoreError> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let current = usize::try_from(version).unwrap_or(usize::MAX);
    if current > MIGRATIONS.len() {
        return Err(StoreError::TooNew { found: version, supported: MIGRATIONS.len() });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current) {
        let tx = conn.unchecked_transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", i64::try_from(i + 1).unwrap_or(i64::MAX))?;
        tx.commit()?;
    }
    Ok(())
}

pub(super) fn append_event(conn: &Connection, task_id: i64, kind: &str, body: &Value) -> Result<i64, StoreError> {
    let seq: i64 =
        conn.query_row("SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE task_id = ?1", [task_id], |r| r.get(0))?;
    conn.execute(
        "INSERT INTO events (task_id, seq, at_ms, kind, body) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![task_id, seq, now_ms(), kind, body.to_string()],
    )?;
    Ok(seq)
}

/// One `SELECT seq, at_ms, kind, body` row of `task_id`'s events.
fn stored_event(task_id: i64, r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredEvent> {
    let body: String = r.get(3)?;
    Ok(StoredEvent {
        task_id,
        seq: r.get(0)?,
        at_ms: r.get(1)?,
        kind: r.get(2)?,
        body: serde_json::from_str(&body).unwrap_or(Value::String(body)),
    })
}

impl Store {
    /// Opens the database at `path` and starts the store thread. Unfinished tasks from a
    /// previous run become `interrupted` (with an event) before anything else happens.
    ///
    /// A disk that takes no write (full, read-only) does not stop the start: the store
    /// then serves reads of what is there, refuses writes with [`StoreError::Unwritable`]
    /// and says so in [`Store::health`], and opens for writing at the first write after
    /// the disk takes writes again.
    pub fn open(path: &Path) -> Result<(Store, Vec<i64>), StoreError> {
        Store::open_with(path, open_writable)
    }

    fn open_with(path: &Path, open: Opener) -> Result<(Store, Vec<i64>), StoreError> {
        let health = Arc::new(StorageHealth::default());
        let in_memory = path == Path::new(":memory:");
        let dir: Option<Arc<Path>> = if in_memory { None } else { path.parent().map(Arc::from) };
        let (conn, writable, interrupted) = match open(path) {
            Ok((conn, interrupted)) => (conn, true, interrupted),
            Err(e) => match e.unwritable().filter(|_| !in_memory) {
                Some(why) => {
                    let why = dir.as_deref().map_or(why, |d| why.refined(d));
                    tracing::error!(error = ?e, problem = %why, "the task store cannot be written: serving it read-only");
                    health.failed(why);
                    (open_read_only(path)?, false, Vec::new())
                }
                None => return Err(e),
            },
        };
        let mut db = Db { conn, path: path.to_path_buf(), writable, health: health.clone(), open };
        let (jobs, mut rx) = mpsc::channel::<Job>(QUEUE);
        std::thread::Builder::new()
            .name("task-store".into())
            .spawn(move || {
                while let Some(mut job) = rx.blocking_recv() {
                    if let Some(closed) = job.close.take() {
                        drop(db);
                        let _ = closed.send(());
                        return;
                    }
                    db.serve(job);
                }
            })
            .map_err(|_| StoreError::Closed)?;
        Ok((Store { jobs, health, dir }, interrupted))
    }

    /// Closes the database after every job queued before this one: the last connection's
    /// close folds the write-ahead log into the database and removes it and its index, so a
    /// stopped daemon leaves one file (and the next start on a full disk finds no journal
    /// to reuse). Later jobs fail with [`StoreError::Closed`].
    pub async fn close(&self) {
        let (tx, rx) = oneshot::channel();
        let job = Job { write: false, run: Box::new(|_| {}), close: Some(tx) };
        if self.jobs.send(job).await.is_ok() {
            let _ = rx.await;
        }
    }

    /// Whether the data directory takes writes (shared with the daemon).
    pub fn health(&self) -> &Arc<StorageHealth> {
        &self.health
    }

    /// A job running `f` on the store thread and handing its result to `reply`. A write's
    /// outcome is reported to [`Store::health`], and a write the disk refused answers
    /// [`StoreError::Unwritable`] (logged here with SQLite's own words).
    fn job<T: Send + 'static>(
        &self,
        write: bool,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
        reply: impl FnOnce(Result<T, StoreError>) + Send + 'static,
    ) -> Job {
        let (health, dir) = (self.health.clone(), self.dir.clone());
        let run = move |conn: Conn<'_>| {
            let result = match conn {
                Err(why) => Err(StoreError::Unwritable(why)),
                Ok(conn) if write => match f(conn) {
                    Ok(v) => {
                        health.succeeded();
                        Ok(v)
                    }
                    Err(e) => match e.unwritable() {
                        Some(why) => {
                            let why = dir.as_deref().map_or(why, |d| why.refined(d));
                            tracing::error!(error = ?e, problem = %why, "the disk refused a write of the task store; nothing was changed");
                            health.failed(why);
                            Err(StoreError::Unwritable(why))
                        }
                        None => Err(e),
                    },
                },
                Ok(conn) => f(conn),
            };
            reply(result);
        };
        Job { write, run: Box::new(run), close: None }
    }

    /// Runs the write `f` on the store thread and blocks the calling thread for its
    /// answer: for start-up only (loading the tokens before the daemon serves anything).
    pub(super) fn run_now<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.now(true, f)
    }

    /// [`Store::run_now`] for a job that only reads.
    pub(super) fn read_now<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.now(false, f)
    }

    fn now<T: Send + 'static>(
        &self,
        write: bool,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let job = self.job(write, f, move |r| {
            let _ = tx.send(r);
        });
        self.jobs.try_send(job).map_err(|_| StoreError::Closed)?;
        rx.recv().map_err(|_| StoreError::Closed)?
    }

    /// Runs the write `f` on the store thread (for the daemon's other tables, e.g.
    /// tokens). A disk that refuses it answers [`StoreError::Unwritable`].
    pub(super) async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.submit(true, f).await
    }

    /// Runs `f`, which only reads, on the store thread: served by a read-only store too.
    pub(super) async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.submit(false, f).await
    }

    async fn submit<T: Send + 'static>(
        &self,
        write: bool,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        let job = self.job(write, f, move |r| {
            let _ = tx.send(r);
        });
        self.jobs.send(job).await.map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Creates a task in state `running` and records its first event and, when given, a
    /// `device` event with `device` as its body: one transaction, so a task is on disk
    /// whole or not at all.
    pub async fn create_task(
        &self,
        title: String,
        owner: String,
        scope: Value,
        device: Option<Value>,
    ) -> Result<i64, StoreError> {
        self.run(move |conn| {
            let tx = conn.transaction()?;
            let now = now_ms();
            tx.execute(
                "INSERT INTO tasks (title, owner, state, scope, created_ms, updated_ms) VALUES (?1, ?2, 'running', ?3, ?4, ?4)",
                params![title, owner, scope.to_string(), now],
            )?;
            let id = tx.last_insert_rowid();
            append_event(&tx, id, "state", &serde_json::json!({"state": "running", "title": title, "owner": owner}))?;
            if let Some(device) = device {
                append_event(&tx, id, "device", &device)?;
            }
            tx.commit()?;
            Ok(id)
        })
        .await
    }

    /// Moves a task to `state` and records the transition; returns the event's seq.
    pub async fn set_state(&self, task_id: i64, state: String, detail: Value) -> Result<i64, StoreError> {
        self.transition(task_id, state, detail, None).await.map(|(seq, _)| seq)
    }

    /// Moves a task to `state`, records the transition and writes `approval` with it, in
    /// one transaction; returns the event's seq and the id of an approval row asked.
    pub async fn transition(
        &self,
        task_id: i64,
        state: String,
        detail: Value,
        approval: Option<ApprovalWrite>,
    ) -> Result<(i64, Option<i64>), StoreError> {
        self.run(move |conn| {
            let tx = conn.transaction()?;
            let now = now_ms();
            let n =
                tx.execute("UPDATE tasks SET state = ?1, updated_ms = ?2 WHERE id = ?3", params![state, now, task_id])?;
            if n == 0 {
                return Err(StoreError::NoSuchTask(task_id));
            }
            let seq = append_event(&tx, task_id, "state", &serde_json::json!({"state": state, "detail": detail}))?;
            let asked = match approval {
                None => None,
                Some(ApprovalWrite::Asked(question)) => {
                    tx.execute(
                        "INSERT INTO approvals (task_id, question, state, asked_ms) VALUES (?1, ?2, 'pending', ?3)",
                        params![task_id, question, now],
                    )?;
                    Some(tx.last_insert_rowid())
                }
                Some(ApprovalWrite::Answered { id, state, by }) => {
                    tx.execute(
                        "UPDATE approvals SET state = ?1, answered_ms = ?2, answered_by = ?3 WHERE id = ?4",
                        params![state, now, by, id],
                    )?;
                    None
                }
            };
            tx.commit()?;
            Ok((seq, asked))
        })
        .await
    }

    /// Records an event (a step, a note, a refusal); returns its seq.
    pub async fn append(&self, task_id: i64, kind: String, body: Value) -> Result<i64, StoreError> {
        self.run(move |conn| {
            let exists: Option<i64> =
                conn.query_row("SELECT id FROM tasks WHERE id = ?1", [task_id], |r| r.get(0)).optional()?;
            if exists.is_none() {
                return Err(StoreError::NoSuchTask(task_id));
            }
            append_event(conn, task_id, &kind, &body)
        })
        .await
    }

    /// Events of `task_id` after `after_seq`, in order (at most `limit`).
    pub async fn events_after(&self, task_id: i64, after_seq: i64, limit: u32) -> Result<Vec<StoredEvent>, StoreError> {
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT seq, at_ms, kind, body FROM events WHERE task_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
            )?;
            let rows = stmt.query_map(params![task_id, after_seq, limit], |r| stored_event(task_id, r))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    /// Events of one `kind` of `task_id` after `after_seq`, in order (at most `limit`):
    /// a task's inbox is its `user_message` events.
    pub async fn events_of_kind_after(
        &self,
        task_id: i64,
        kind: &'static str,
        after_seq: i64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT seq, at_ms, kind, body FROM events WHERE task_id = ?1 AND kind = ?2 AND seq > ?3 \
                 ORDER BY seq LIMIT ?4",
            )?;
            let rows = stmt.query_map(params![task_id, kind, after_seq, limit], |r| stored_event(task_id, r))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    /// A task's summary.
    pub async fn task(&self, task_id: i64) -> Result<StoredTask, StoreError> {
        self.read(move |conn| {
            conn.query_row("SELECT id, title, owner, state FROM tasks WHERE id = ?1", [task_id], |r| {
                Ok(StoredTask { id: r.get(0)?, title: r.get(1)?, owner: r.get(2)?, state: r.get(3)? })
            })
            .optional()?
            .ok_or(StoreError::NoSuchTask(task_id))
        })
        .await
    }

    /// The last event seq written for a task (0: none yet).
    pub async fn last_seq(&self, task_id: i64) -> Result<i64, StoreError> {
        self.read(move |conn| {
            Ok(conn.query_row("SELECT COALESCE(MAX(seq), 0) FROM events WHERE task_id = ?1", [task_id], |r| r.get(0))?)
        })
        .await
    }

    /// Records a step: its event and its row in `steps` (same seq), in one transaction.
    pub async fn append_step(&self, task_id: i64, step: StepRecord) -> Result<i64, StoreError> {
        self.run(move |conn| {
            let tx = conn.transaction()?;
            let body = serde_json::json!({
                "tool": step.tool, "args": step.args, "result": step.result,
                "duration_ms": step.duration_ms, "by": step.caller,
            });
            let mut body = body;
            if step.thumbnail.is_some() {
                // The picture itself is fetched apart (`task_thumbnail`): journals stay small.
                body["thumbnail"] = true.into();
            }
            let seq = append_event(&tx, task_id, "step", &body)?;
            tx.execute(
                "INSERT INTO steps (task_id, seq, tool, args, result, duration_ms, caller, thumbnail, after_thumbnail) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    task_id,
                    seq,
                    step.tool,
                    step.args.to_string(),
                    step.result.to_string(),
                    i64::try_from(step.duration_ms).unwrap_or(i64::MAX),
                    step.caller.to_string(),
                    step.thumbnail,
                    step.after_thumbnail
                ],
            )?;
            tx.commit()?;
            Ok(seq)
        })
        .await
    }

    /// The thumbnail of step `seq` of a task, if it has one.
    pub async fn thumbnail(&self, task_id: i64, seq: i64) -> Result<Option<Vec<u8>>, StoreError> {
        self.read(move |conn| {
            Ok(conn
                .query_row("SELECT thumbnail FROM steps WHERE task_id = ?1 AND seq = ?2", params![task_id, seq], |r| {
                    r.get::<_, Option<Vec<u8>>>(0)
                })
                .optional()?
                .flatten())
        })
        .await
    }

    /// A question asked of a human: a row in `approvals` in state `pending`; returns its id.
    pub async fn approval_asked(&self, task_id: i64, question: String) -> Result<i64, StoreError> {
        self.run(move |conn| {
            conn.execute(
                "INSERT INTO approvals (task_id, question, state, asked_ms) VALUES (?1, ?2, 'pending', ?3)",
                params![task_id, question, now_ms()],
            )?;
            Ok(conn.last_insert_rowid())
        })
        .await
    }

    /// The answer (`approved`, `rejected`, `withdrawn`) to approval `id`, and who gave it.
    pub async fn approval_answered(&self, id: i64, state: String, by: String) -> Result<(), StoreError> {
        self.run(move |conn| {
            conn.execute(
                "UPDATE approvals SET state = ?1, answered_ms = ?2, answered_by = ?3 WHERE id = ?4",
                params![state, now_ms(), by, id],
            )?;
            Ok(())
        })
        .await
    }

    /// A task's approvals: (question, state, answered_by), oldest first.
    pub async fn approvals(&self, task_id: i64) -> Result<Vec<(String, String, Option<String>)>, StoreError> {
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached("SELECT question, state, answered_by FROM approvals WHERE task_id = ?1 ORDER BY id")?;
            let rows = stmt.query_map([task_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    /// The newest `limit` tasks, newest first.
    pub async fn list(&self, limit: u32) -> Result<Vec<StoredTask>, StoreError> {
        self.read(move |conn| {
            let mut stmt =
                conn.prepare_cached("SELECT id, title, owner, state FROM tasks ORDER BY id DESC LIMIT ?1")?;
            let rows = stmt.query_map([limit], |r| {
                Ok(StoredTask { id: r.get(0)?, title: r.get(1)?, owner: r.get(2)?, state: r.get(3)? })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    /// Deletes the oldest finished tasks beyond the newest `keep`; unfinished ones are never
    /// deleted. Returns how many were removed.
    pub async fn retain(&self, keep: u32) -> Result<usize, StoreError> {
        self.run(move |conn| {
            let placeholders = TERMINAL_STATES.iter().map(|s| format!("'{s}'")).collect::<Vec<_>>().join(",");
            let sql = format!(
                "DELETE FROM tasks WHERE state IN ({placeholders}) AND id NOT IN \
                 (SELECT id FROM tasks ORDER BY id DESC LIMIT ?1)"
            );
            Ok(conn.execute(&sql, [keep])?)
        })
        .await
    }
}

/// Marks every unfinished task `interrupted` (daemon restarted), with an event each.
fn interrupt_unfinished(conn: &mut Connection) -> Result<Vec<i64>, StoreError> {
    let tx = conn.transaction()?;
    let placeholders = TERMINAL_STATES.iter().map(|s| format!("'{s}'")).collect::<Vec<_>>().join(",");
    let ids: Vec<i64> = {
        let mut stmt = tx.prepare(&format!("SELECT id FROM tasks WHERE state NOT IN ({placeholders}) ORDER BY id"))?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        rows.collect::<Result<Vec<_>, _>>()?
    };
    for &id in &ids {
        tx.execute("UPDATE tasks SET state = 'interrupted', updated_ms = ?1 WHERE id = ?2", params![now_ms(), id])?;
        append_event(&tx, id, "state", &serde_json::json!({"state": "interrupted", "detail": "the daemon restarted"}))?;
    }
    tx.commit()?;
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn a_closed_store_leaves_one_file_with_everything_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.db");
        let (store, _) = Store::open(&db).unwrap();
        let id = store.create_task("t".into(), "me".into(), json!({}), None).await.unwrap();
        store.append(id, "note".into(), json!({"text": "kept"})).await.unwrap();
        assert!(dir.path().join("t.db-wal").exists(), "a journal while open");
        store.close().await;
        assert!(!dir.path().join("t.db-wal").exists(), "folded in and removed");
        assert!(!dir.path().join("t.db-shm").exists());
        assert!(matches!(store.append(id, "note".into(), json!({})).await, Err(StoreError::Closed)));
        let (again, _) = Store::open(&db).unwrap();
        // (The reopen marks the unfinished task interrupted after it.)
        let events = again.events_after(id, 0, 10).await.unwrap();
        assert!(events.iter().any(|e| e.kind == "note" && e.body["text"] == json!("kept")), "{events:?}");
    }

    #[tokio::test]
    async fn steps_and_approvals_have_their_rows() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(&dir.path().join("t.db")).unwrap();
        let id = store.create_task("t".into(), "me".into(), json!({}), None).await.unwrap();
        let step = StepRecord {
            tool: "action".into(),
            args: json!({"action": {"type": "home"}}),
            result: json!({"ok": true}),
            duration_ms: 42,
            caller: json!({"role": "agent"}),
            thumbnail: Some(b"png".to_vec()),
            after_thumbnail: Some(b"after".to_vec()),
        };
        let seq = store.append_step(id, step.clone()).await.unwrap();
        let ev = store.events_after(id, seq - 1, 10).await.unwrap();
        assert_eq!((ev[0].kind.as_str(), ev[0].body["duration_ms"].clone()), ("step", json!(42)));
        // The picture is stored beside the step, and the event only says there is one.
        assert_eq!(ev[0].body["thumbnail"], json!(true));
        assert_eq!(store.thumbnail(id, seq).await.unwrap(), Some(b"png".to_vec()));
        let bare = store.append_step(id, StepRecord { thumbnail: None, ..step }).await.unwrap();
        assert_eq!(store.thumbnail(id, bare).await.unwrap(), None);
        assert!(store.events_after(id, bare - 1, 10).await.unwrap()[0].body.get("thumbnail").is_none());
        assert_eq!(store.thumbnail(id, 999).await.unwrap(), None);
        let a = store.approval_asked(id, "pay?".into()).await.unwrap();
        assert_eq!(store.approvals(id).await.unwrap(), vec![("pay?".to_string(), "pending".to_string(), None)]);
        store.approval_answered(a, "rejected".into(), "uid 0".into()).await.unwrap();
        assert_eq!(store.approvals(id).await.unwrap()[0].1, "rejected");
    }

    #[tokio::test]
    async fn events_are_sequenced_resumable_and_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("tether.db");
        let (store, interrupted) = Store::open(&db).unwrap();
        assert!(interrupted.is_empty());
        let id = store.create_task("t".into(), "alice".into(), json!({"max_steps": 3}), None).await.unwrap();
        for i in 0..5 {
            let seq = store.append(id, "step".into(), json!({"i": i})).await.unwrap();
            assert_eq!(seq, i + 2, "seq 1 is the opening state event");
        }
        let after = store.events_after(id, 3, 100).await.unwrap();
        assert_eq!(after.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![4, 5, 6]);
        assert_eq!(after[0].body, json!({"i": 2}));
        assert!(matches!(store.append(999, "x".into(), json!({})).await, Err(StoreError::NoSuchTask(999))));
        drop(store);
        // Restart: the running task is interrupted, history intact, the stream resumes.
        let (store, interrupted) = Store::open(&db).unwrap();
        assert_eq!(interrupted, vec![id]);
        assert_eq!(store.task(id).await.unwrap().state, "interrupted");
        let tail = store.events_after(id, 6, 100).await.unwrap();
        assert_eq!(tail.len(), 1);
        assert_eq!((tail[0].seq, tail[0].body["state"].clone()), (7, json!("interrupted")));
    }

    #[tokio::test]
    async fn retention_never_deletes_unfinished_tasks() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(&dir.path().join("t.db")).unwrap();
        let mut ids = Vec::new();
        for i in 0..6 {
            let id = store.create_task(format!("t{i}"), "o".into(), json!({}), None).await.unwrap();
            if i != 1 {
                store.set_state(id, "completed".into(), json!({})).await.unwrap();
            }
            ids.push(id);
        }
        let removed = store.retain(2).await.unwrap();
        assert_eq!(removed, 3, "t0, t2, t3 go; t1 is running; t4, t5 are the newest two");
        assert!(store.task(ids[1]).await.is_ok());
        assert!(matches!(store.task(ids[0]).await, Err(StoreError::NoSuchTask(_))));
        assert!(store.events_after(ids[0], 0, 10).await.unwrap().is_empty(), "events go with the task");
    }

    /// What `PRAGMA page_count` says.
    async fn pages(store: &Store) -> i64 {
        store.read(|c| Ok(c.pragma_query_value(None, "page_count", |r| r.get(0))?)).await.unwrap()
    }

    #[tokio::test]
    async fn a_write_the_disk_refuses_changes_nothing_and_the_next_that_fits_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(&dir.path().join("t.db")).unwrap();
        let id = store.create_task("t".into(), "me".into(), json!({}), Some(json!({"device": "sim"}))).await.unwrap();
        assert_eq!(store.events_after(id, 0, 10).await.unwrap().len(), 2, "the task and its device, together");
        // No page more: SQLite answers SQLITE_FULL, as on a full disk.
        let now = pages(&store).await;
        store.read(move |c| Ok(c.pragma_update(None, "max_page_count", now)?)).await.unwrap();
        let big = json!({"summary": "x".repeat(64 * 1024)});
        let refused = store.set_state(id, "completed".into(), big.clone()).await;
        assert!(matches!(refused, Err(StoreError::Unwritable(Unwritable::Full))), "{refused:?}");
        assert_eq!(store.health().problem(), Some(Unwritable::Full));
        let asked =
            store.transition(id, "waiting".into(), big.clone(), Some(ApprovalWrite::Asked("q".repeat(70_000)))).await;
        assert!(matches!(asked, Err(StoreError::Unwritable(_))), "{asked:?}");
        // Nothing of either transaction is on disk, and reads are served.
        assert_eq!(store.task(id).await.unwrap().state, "running");
        assert_eq!(store.last_seq(id).await.unwrap(), 2);
        assert!(store.approvals(id).await.unwrap().is_empty());
        // Space again: the same write goes through, and health says so.
        store.read(|c| Ok(c.pragma_update(None, "max_page_count", 1_000_000)?)).await.unwrap();
        let (_, row) =
            store.transition(id, "waiting".into(), json!({}), Some(ApprovalWrite::Asked("q?".into()))).await.unwrap();
        assert_eq!(store.health().problem(), None);
        let by = "uid 0".to_string();
        let answer = ApprovalWrite::Answered { id: row.unwrap(), state: "approved", by: by.clone() };
        store.transition(id, "running".into(), json!({}), Some(answer)).await.unwrap();
        assert_eq!(store.approvals(id).await.unwrap(), vec![("q?".into(), "approved".into(), Some(by))]);
        store.set_state(id, "completed".into(), big).await.unwrap();
        assert_eq!(store.task(id).await.unwrap().state, "completed");
    }

    /// Whether [`refusing`] refuses (the disk is "full").
    static DISK_FULL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

    /// [`open_writable`] on a disk that refuses writes while [`DISK_FULL`].
    fn refusing(path: &Path) -> Result<(Connection, Vec<i64>), StoreError> {
        if DISK_FULL.load(std::sync::atomic::Ordering::SeqCst) {
            let full = rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR_SHMSIZE);
            return Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(full, None)));
        }
        open_writable(path)
    }

    #[tokio::test]
    async fn a_store_that_cannot_be_written_at_start_serves_reads_and_writes_once_it_can() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("tasks.db");
        let (store, _) = Store::open(&db).unwrap();
        let old = store.create_task("before".into(), "me".into(), json!({}), None).await.unwrap();
        drop(store);
        // The start: no write possible. It starts all the same, read-only.
        let (store, interrupted) = Store::open_with(&db, refusing).unwrap();
        assert!(interrupted.is_empty(), "nothing could be marked");
        assert!(store.health().problem().is_some());
        let listed = store.list(10).await.unwrap();
        assert_eq!((listed[0].id, listed[0].title.as_str()), (old, "before"), "what is on disk is read");
        let refused = store.create_task("now".into(), "me".into(), json!({}), None).await;
        assert!(matches!(refused, Err(StoreError::Unwritable(_))), "{refused:?}");
        assert!(store.append(old, "note".into(), json!({})).await.is_err());
        assert_eq!(store.list(10).await.unwrap().len(), 1);
        // Space comes back: the next write opens the store for writing, without a restart,
        // and the task the last run left unfinished is interrupted first.
        DISK_FULL.store(false, std::sync::atomic::Ordering::SeqCst);
        let new = store.create_task("now".into(), "me".into(), json!({}), None).await.unwrap();
        assert_eq!(store.health().problem(), None);
        assert_eq!(store.task(old).await.unwrap().state, "interrupted");
        assert_eq!(store.task(new).await.unwrap().state, "running");
    }

    #[test]
    fn with_nothing_readable_the_store_starts_empty() {
        let dir = tempfile::tempdir().unwrap();
        // An empty file: what a start on a full disk leaves (SQLite made it, wrote nothing).
        let db = dir.path().join("tasks.db");
        std::fs::write(&db, b"").unwrap();
        let conn = open_read_only(&db).unwrap();
        let tasks: i64 = conn.query_row("SELECT COUNT(*) FROM tasks", [], |r| r.get(0)).unwrap();
        assert_eq!(tasks, 0);
        assert_eq!(file_uri(Path::new("/a b/%?#x"), "mode=ro").unwrap(), "file:/a b/%25%3f%23x?mode=ro");
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.db");
        let conn = Connection::open(&db).unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
        drop(conn);
        assert!(matches!(Store::open(&db), Err(StoreError::TooNew { found: 99, .. })));
    }
}
