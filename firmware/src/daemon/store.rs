//! The task store: one thread owns the SQLite connection (WAL); callers send it jobs over a
//! bounded channel and await the answer, so no runtime worker ever waits on SQLite.
//!
//! Schema versions live in `PRAGMA user_version`; [`MIGRATIONS`] brings any older database
//! up to date at open. Every task transition and step is an event with a per-task sequence
//! number, so a stream can resume after any `seq` without gaps or duplicates.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

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

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// Handle to the store thread; clones share it.
#[derive(Debug, Clone)]
pub struct Store {
    jobs: mpsc::Sender<Job>,
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)).unwrap_or(0)
}

/// Opens (creating and migrating) the database at `path` on the calling thread.
fn open_connection(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // FULL: an event acknowledged to a caller survives power loss and kill -9.
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
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
    Ok(conn)
}

fn append_event(conn: &Connection, task_id: i64, kind: &str, body: &Value) -> Result<i64, StoreError> {
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
    pub fn open(path: &Path) -> Result<(Store, Vec<i64>), StoreError> {
        let mut conn = open_connection(path)?;
        let interrupted = interrupt_unfinished(&mut conn)?;
        let (jobs, mut rx) = mpsc::channel::<Job>(QUEUE);
        std::thread::Builder::new()
            .name("task-store".into())
            .spawn(move || {
                while let Some(job) = rx.blocking_recv() {
                    job(&mut conn);
                }
            })
            .map_err(|_| StoreError::Closed)?;
        Ok((Store { jobs }, interrupted))
    }

    /// Runs `f` on the store thread and blocks the calling thread for its answer: for
    /// start-up only (loading the tokens before the daemon serves anything).
    pub(super) fn run_now<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let job: Job = Box::new(move |conn| {
            let _ = tx.send(f(conn));
        });
        self.jobs.try_send(job).map_err(|_| StoreError::Closed)?;
        rx.recv().map_err(|_| StoreError::Closed)?
    }

    /// Runs `f` on the store thread (for the daemon's other tables, e.g. tokens).
    pub(super) async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |conn| {
            let _ = tx.send(f(conn));
        });
        self.jobs.send(job).await.map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Creates a task in state `running` and records its first event.
    pub async fn create_task(&self, title: String, owner: String, scope: Value) -> Result<i64, StoreError> {
        self.run(move |conn| {
            let tx = conn.transaction()?;
            let now = now_ms();
            tx.execute(
                "INSERT INTO tasks (title, owner, state, scope, created_ms, updated_ms) VALUES (?1, ?2, 'running', ?3, ?4, ?4)",
                params![title, owner, scope.to_string(), now],
            )?;
            let id = tx.last_insert_rowid();
            append_event(&tx, id, "state", &serde_json::json!({"state": "running", "title": title, "owner": owner}))?;
            tx.commit()?;
            Ok(id)
        })
        .await
    }

    /// Moves a task to `state` and records the transition; returns the event's seq.
    pub async fn set_state(&self, task_id: i64, state: String, detail: Value) -> Result<i64, StoreError> {
        self.run(move |conn| {
            let tx = conn.transaction()?;
            let n = tx.execute(
                "UPDATE tasks SET state = ?1, updated_ms = ?2 WHERE id = ?3",
                params![state, now_ms(), task_id],
            )?;
            if n == 0 {
                return Err(StoreError::NoSuchTask(task_id));
            }
            let seq = append_event(&tx, task_id, "state", &serde_json::json!({"state": state, "detail": detail}))?;
            tx.commit()?;
            Ok(seq)
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
        self.run(move |conn| {
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
        self.run(move |conn| {
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
        self.run(move |conn| {
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
        self.run(move |conn| {
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
                "INSERT INTO steps (task_id, seq, tool, args, result, duration_ms, caller, thumbnail) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    task_id,
                    seq,
                    step.tool,
                    step.args.to_string(),
                    step.result.to_string(),
                    i64::try_from(step.duration_ms).unwrap_or(i64::MAX),
                    step.caller.to_string(),
                    step.thumbnail
                ],
            )?;
            tx.commit()?;
            Ok(seq)
        })
        .await
    }

    /// The thumbnail of step `seq` of a task, if it has one.
    pub async fn thumbnail(&self, task_id: i64, seq: i64) -> Result<Option<Vec<u8>>, StoreError> {
        self.run(move |conn| {
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
        self.run(move |conn| {
            let mut stmt = conn
                .prepare_cached("SELECT question, state, answered_by FROM approvals WHERE task_id = ?1 ORDER BY id")?;
            let rows = stmt.query_map([task_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    /// The newest `limit` tasks, newest first.
    pub async fn list(&self, limit: u32) -> Result<Vec<StoredTask>, StoreError> {
        self.run(move |conn| {
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
    async fn steps_and_approvals_have_their_rows() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(&dir.path().join("t.db")).unwrap();
        let id = store.create_task("t".into(), "me".into(), json!({})).await.unwrap();
        let step = StepRecord {
            tool: "action".into(),
            args: json!({"action": {"type": "home"}}),
            result: json!({"ok": true}),
            duration_ms: 42,
            caller: json!({"role": "agent"}),
            thumbnail: Some(b"png".to_vec()),
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
        let id = store.create_task("t".into(), "alice".into(), json!({"max_steps": 3})).await.unwrap();
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
            let id = store.create_task(format!("t{i}"), "o".into(), json!({})).await.unwrap();
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
