//! Requests whose answer streams, for transports with one request per answer (HTTPS): a
//! task's lease (`task_open`: the opened task, then its events until its final state) and
//! a followed journal (`task_events` with `follow`: the journal, then live, then the
//! request's answer). The answer is JSON lines; the reader's going (the receiver dropped)
//! ends the session, and with a lease the task is abandoned.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::daemon::{Caller, Daemon, DaemonError, Hold, HoldKind, Session, SessionMessage};
use crate::protocol::{Call, ErrorBody, ErrorCode, Event, Request};

/// A streamed answer.
#[derive(Debug)]
pub struct Streamed {
    /// The task the stream is about, once known (a lease's new task).
    pub task: Option<i64>,
    /// The answer's lines, each one JSON value and a newline; a keep-alive line
    /// (`{"event":"keepalive"}`) every `keepalive` while nothing else is sent. Dropping it
    /// ends the stream.
    pub lines: mpsc::Receiver<Bytes>,
}

/// Lines buffered ahead of a slow reader; the stream waits beyond this.
const LINES_AHEAD: usize = 16;

/// Runs a streaming request for `caller`. A refusal before the stream starts (no such task,
/// a seq the journal never reached, a lease refused, the caller's share of streams taken)
/// is answered as an error, so the transport can give it its status; a request that does
/// not stream is `INVALID_REQUEST`. A stream whose credential is revoked ends with an
/// `UNAUTHORIZED` line.
pub async fn stream(
    daemon: &Daemon,
    caller: &Caller,
    mut request: Request,
    keepalive: Duration,
) -> Result<Streamed, ErrorBody> {
    let held = daemon.take_hold(caller, HoldKind::Stream).map_err(|e| ErrorBody::from(&e))?;
    match &mut request.call {
        // The stream is the lease: its events come on it.
        Call::TaskOpen(p) => {
            p.events = Some(true);
            lease(daemon, caller, request, keepalive, held).await
        }
        Call::TaskEvents(p) if p.follow => follow(daemon, caller, request, keepalive, held).await,
        _ => Err(ErrorBody::new(ErrorCode::InvalidRequest, "only task_open and task_events with follow stream")),
    }
}

/// The last line of a stream whose credential was revoked or rotated.
fn credential_ended() -> ErrorBody {
    ErrorBody::new(
        ErrorCode::Unauthorized,
        "the token this stream was opened with was revoked or rotated: log in again",
    )
}

/// Whether a task event says the task has ended.
fn ends_task(event: &Event) -> bool {
    event.body.get("kind").and_then(Value::as_str) == Some("state")
        && event
            .body
            .get("data")
            .and_then(|d| d.get("state"))
            .and_then(Value::as_str)
            .is_some_and(|s| crate::daemon::store::TERMINAL_STATES.contains(&s))
}

fn line(value: &impl serde::Serialize) -> Bytes {
    // Events and answers are JSON values: they always serialize.
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

/// `task_open` on a session that lives as long as the stream: the answer `{id, token, …}`,
/// then the task's events, ending after its final state. With `wait` and a busy phone the
/// stream starts before the task opens: `queue` events (and keep-alives) until it does,
/// then the answer; an error line if the wait ends without a task.
async fn lease(
    daemon: &Daemon,
    caller: &Caller,
    request: Request,
    keepalive: Duration,
    held: Hold,
) -> Result<Streamed, ErrorBody> {
    let session = daemon.try_open_session(caller.clone()).map_err(|e| ErrorBody::from(&e))?;
    let Some(mut events) = session.take_events() else {
        return Err(ErrorBody::new(ErrorCode::Internal, "the session's events were taken"));
    };
    let session = Arc::new(session);
    let slot = session.begin_request(request.id).map_err(|e| ErrorBody::from(&e))?;
    let (s, d) = (session.clone(), daemon.clone());
    let mut running = tokio::spawn(async move {
        let result = d.handle_request(&s, &request, &slot).await;
        drop(slot);
        result
    });
    // Opened at once, refused (answered with its status), or waiting for the phone: the
    // daemon then says `Streaming` before its first `queue` event.
    let mut early = Vec::new();
    let finished = loop {
        tokio::select! {
            biased;
            r = &mut running => break Some(r),
            m = events.recv() => match m {
                Some(SessionMessage::Streaming) | None => break None,
                Some(SessionMessage::Flush(ack)) => { let _ = ack.send(()); }
                Some(SessionMessage::Event(e)) => early.push(e),
            },
        }
    };
    let (tx, rx) = mpsc::channel(LINES_AHEAD);
    match finished {
        Some(Ok(Ok(opened))) => {
            let task = opened.get("id").and_then(Value::as_i64);
            let _ = tx.try_send(line(&opened));
            for e in early {
                let _ = tx.try_send(line(&e));
            }
            tokio::spawn(pump(session, events, tx, keepalive, None, held));
            Ok(Streamed { task, lines: rx })
        }
        Some(Ok(Err(e))) => Err(ErrorBody::from(&e)),
        Some(Err(_)) => Err(stream_failed()),
        None => {
            tokio::spawn(async move {
                let mut held_back = early;
                match until_open(&mut events, &tx, keepalive, &mut running, &held, &mut held_back).await {
                    Some(opened) => {
                        if tx.send(line(&opened)).await.is_ok() {
                            for e in held_back {
                                let _ = tx.send(line(&e)).await;
                            }
                            pump(session, events, tx, keepalive, None, held).await;
                        }
                    }
                    // The wait ended without a task (or the reader went): the session goes,
                    // and with it the place in the queue.
                    None => session.close(),
                }
            });
            Ok(Streamed { task: None, lines: rx })
        }
    }
}

/// A waiting lease's stream until its task opens: `queue` events and keep-alives as they
/// come; events about the task itself are held back (`held_back`) so that the answer
/// `{id, token, …}` comes first. Returns the answer, or `None` after writing why the wait
/// ended (an error line) or when the reader went away.
async fn until_open(
    events: &mut mpsc::Receiver<SessionMessage>,
    tx: &mpsc::Sender<Bytes>,
    keepalive: Duration,
    running: &mut JoinHandle<Result<Value, DaemonError>>,
    held: &Hold,
    held_back: &mut Vec<Event>,
) -> Option<Value> {
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + keepalive, keepalive);
    loop {
        tokio::select! {
            biased;
            () = held.revocation() => {
                let _ = tx.try_send(line(&json!({"error": credential_ended()})));
                return None;
            }
            () = tx.closed() => return None,
            r = &mut *running => {
                let error = match r {
                    Ok(Ok(opened)) => return Some(opened),
                    Ok(Err(e)) => ErrorBody::from(&e),
                    Err(_) => stream_failed(),
                };
                let _ = tx.send(line(&json!({"error": error}))).await;
                return None;
            }
            m = events.recv() => match m {
                Some(SessionMessage::Event(e)) if e.event == "queue" => {
                    if tx.send(line(&e)).await.is_err() {
                        return None;
                    }
                }
                Some(SessionMessage::Event(e)) => held_back.push(e),
                Some(SessionMessage::Flush(ack)) => { let _ = ack.send(()); }
                Some(SessionMessage::Streaming) => {}
                None => return None,
            },
            _ = ticker.tick() => {
                if tx.send(line(&json!({"event": "keepalive"}))).await.is_err() {
                    return None;
                }
            }
        }
    }
}

/// `task_events` with `follow`: the journal from `after_seq`, then live, ending with the
/// request's answer (`{"id", "state", "last_seq"}`) once the task has ended and everything
/// was sent.
async fn follow(
    daemon: &Daemon,
    caller: &Caller,
    request: Request,
    keepalive: Duration,
    held: Hold,
) -> Result<Streamed, ErrorBody> {
    let session = daemon.try_open_session(caller.clone()).map_err(|e| ErrorBody::from(&e))?;
    let Some(mut events) = session.take_events() else {
        return Err(ErrorBody::new(ErrorCode::Internal, "the session's events were taken"));
    };
    let session = Arc::new(session);
    let slot = session.begin_request(request.id).map_err(|e| ErrorBody::from(&e))?;
    let task = request.call.task_id();
    let (s, d) = (session.clone(), daemon.clone());
    let mut running = tokio::spawn(async move {
        let result = d.handle_request(&s, &request, &slot).await;
        drop(slot);
        result
    });
    // A refusal is answered as an error, not as a stream: wait for the stream to start
    // (the daemon sends `Streaming` before any event; one that came first is kept anyway)
    // or the request to end.
    let mut early = None;
    let finished = loop {
        tokio::select! {
            r = &mut running => break Some(r),
            m = events.recv() => match m {
                Some(SessionMessage::Streaming) | None => break None,
                Some(SessionMessage::Flush(ack)) => { let _ = ack.send(()); }
                Some(SessionMessage::Event(e)) => { early = Some(e); break None; }
            },
        }
    };
    if let Some(Ok(Err(e))) = finished {
        return Err(ErrorBody::from(&e));
    }
    let (tx, rx) = mpsc::channel(LINES_AHEAD);
    let ending = match finished {
        Some(Ok(Ok(v))) => Ending::Done(Some(v)),
        Some(Err(_)) => Ending::Done(Some(json!({"error": stream_failed()}))),
        _ => Ending::Waiting(running),
    };
    if let Some(event) = early {
        let _ = tx.try_send(line(&event));
    }
    tokio::spawn(pump(session, events, tx, keepalive, Some(ending), held));
    Ok(Streamed { task, lines: rx })
}

fn stream_failed() -> ErrorBody {
    ErrorBody::new(ErrorCode::Internal, "the event stream failed")
}

/// How a followed stream ends: with its request's answer.
enum Ending {
    Waiting(JoinHandle<Result<Value, DaemonError>>),
    Done(Option<Value>),
}

/// Forwards a session's events as lines until the task ends (or, with `ending`, until
/// the request finishes: its answer is the last line), the reader goes away or the
/// credential is revoked. Holds the session (and with it a task's lease) and the stream's
/// place in the caller's share until then.
async fn pump<S>(
    session: S,
    events: mpsc::Receiver<SessionMessage>,
    tx: mpsc::Sender<Bytes>,
    keepalive: Duration,
    ending: Option<Ending>,
    held: Hold,
) where
    S: std::borrow::Borrow<Session> + Send + 'static,
{
    tokio::select! {
        biased;
        // Also while a send waits for a reader that stopped reading: a revoked stream
        // ends now, not when the connection's idle rule notices.
        () = held.revocation() => {
            let _ = tx.try_send(line(&json!({"error": credential_ended()})));
        }
        () = forward(events, &tx, keepalive, ending) => {}
    }
    session.borrow().close();
    drop(session);
}

/// Forwards a session's events as lines (see [`pump`]) until the task ends, the request
/// finishes or the reader goes away.
async fn forward(
    mut events: mpsc::Receiver<SessionMessage>,
    tx: &mpsc::Sender<Bytes>,
    keepalive: Duration,
    mut ending: Option<Ending>,
) {
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + keepalive, keepalive);
    loop {
        if let Some(Ending::Done(last)) = &mut ending {
            // Every event before the answer was forwarded (the daemon flushes first).
            while let Ok(message) = events.try_recv() {
                if let SessionMessage::Event(event) = message {
                    let _ = tx.send(line(&event)).await;
                }
            }
            if let Some(value) = last.take() {
                let _ = tx.send(line(&value)).await;
            }
            break;
        }
        let follows = ending.is_some();
        let done = async {
            match &mut ending {
                Some(Ending::Waiting(handle)) => Some(handle.await),
                _ => std::future::pending().await,
            }
        };
        let answer = tokio::select! {
            biased;
            () = tx.closed() => break,
            message = events.recv() => match message {
                Some(SessionMessage::Event(event)) => {
                    let last = !follows && ends_task(&event);
                    if tx.send(line(&event)).await.is_err() || last {
                        break;
                    }
                    None
                }
                Some(SessionMessage::Flush(ack)) => {
                    let _ = ack.send(());
                    None
                }
                Some(SessionMessage::Streaming) => None,
                None => break,
            },
            Some(result) = done => Some(match result {
                Ok(Ok(value)) => value,
                Ok(Err(e)) => json!({"error": ErrorBody::from(&e)}),
                Err(_) => json!({"error": stream_failed()}),
            }),
            _ = ticker.tick() => {
                if tx.send(line(&json!({"event": "keepalive"}))).await.is_err() {
                    break;
                }
                None
            }
        };
        if let Some(last) = answer {
            ending = Some(Ending::Done(Some(last)));
        }
    }
}
