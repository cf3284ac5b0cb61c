//! The daemon side of the OCR worker: [`TesseractWorker`] keeps one worker process
//! ([`super::worker_main`]) loaded and serves reads through it, one at a time.
//!
//! The worker runs at lower CPU priority (nice 10), with `OMP_THREAD_LIMIT=1`, an
//! address-space limit and a cleared environment. A read past its deadline kills it
//! ([`OcrError::Timeout`]); a worker that dies during a read is reported
//! ([`OcrError::WorkerDied`], with its exit status or signal); an answer that is not one
//! restarts it ([`OcrError::Protocol`]). In every case the next read starts a new worker.
//!
//! Cancel safety: the running worker is taken out of its slot for the duration of a read
//! and put back only after a complete answer. A read whose future is dropped halfway drops
//! the worker with it (`kill_on_drop`), so no later read can see a stale answer; the cost
//! is one restart.

use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::wire::{encode_request, parse_line, FromWorker, MAX_ANSWER};
use super::{GrayImage, OcrError, ReadFuture, ReadOptions, ReaderInfo, TextRead, TextReader};
use crate::sync::LockPlain;

/// Default address-space limit of the worker, MiB (Tesseract with one language model maps
/// about 250 MiB; a huge picture's working set stays well below this).
pub const DEFAULT_MEMORY_LIMIT_MIB: u64 = 1024;
/// The worker's CPU priority (nice value): below the daemon's video and input work.
pub const WORKER_NICE: i32 = 10;
/// How long a starting worker may take to say hello.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Longest stderr line forwarded to the log.
const MAX_LOG_LINE: usize = 4096;

/// The program to start as a worker, with its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerCommand {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments (e.g. `["ocr-worker", "--languages", "eng"]`).
    pub args: Vec<String>,
}

impl WorkerCommand {
    /// This executable's hidden `ocr-worker` subcommand (what the product uses); `None`
    /// when the executable's path is unknown.
    pub fn current_exe() -> Option<WorkerCommand> {
        let program = std::env::current_exe().ok()?;
        Some(WorkerCommand { program, args: vec!["ocr-worker".into()] })
    }
}

/// How the daemon runs its worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerConfig {
    /// What to start.
    pub command: WorkerCommand,
    /// Languages read when a read names none (also handed to the worker).
    pub languages: Vec<String>,
    /// The worker's address-space limit (RLIMIT_AS), bytes; 0: none.
    pub memory_limit: u64,
    /// A read's deadline when its options give none (zero).
    pub default_deadline: Duration,
}

/// The daemon's handle on its OCR worker. Cheap to share (`Arc` inside).
#[derive(Debug, Clone)]
pub struct TesseractWorker {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: WorkerConfig,
    /// The worker between reads; `None` before the first start and after a failure.
    /// Holding the lock is holding the right to read: callers queue on it.
    slot: tokio::sync::Mutex<Option<Running>>,
    /// The last hello (or "starting"): what `info()` answers without waiting.
    info: Mutex<ReaderInfo>,
    /// The running worker's pid, 0 for none.
    pid: AtomicU32,
    next_id: AtomicU64,
}

#[derive(Debug)]
struct Running {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pid: u32,
}

fn starting_info(languages: &[String]) -> ReaderInfo {
    ReaderInfo {
        engine: "tesseract".into(),
        version: None,
        available: false,
        languages: languages.to_vec(),
        installed_languages: Vec::new(),
        problem: Some("the text reader is starting".into()),
    }
}

impl TesseractWorker {
    /// A reader with its worker started in the background when a tokio runtime is running
    /// (else on the first read).
    pub fn new(config: WorkerConfig) -> TesseractWorker {
        let info = Mutex::new(starting_info(&config.languages));
        let inner = Arc::new(Inner {
            config,
            slot: tokio::sync::Mutex::new(None),
            info,
            pid: AtomicU32::new(0),
            next_id: AtomicU64::new(1),
        });
        let worker = TesseractWorker { inner };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let w = worker.clone();
            rt.spawn(async move {
                let mut slot = w.inner.slot.lock().await;
                if slot.is_none() {
                    match tokio::time::timeout(START_TIMEOUT, w.inner.start()).await {
                        Ok(Ok(running)) => *slot = Some(running),
                        Ok(Err(e)) => tracing::warn!("OCR worker: {e}"),
                        Err(_) => tracing::warn!("OCR worker did not start within {START_TIMEOUT:?}"),
                    }
                }
            });
        }
        worker
    }

    /// Waits until a worker is running (starting one if needed) and returns its hello, or
    /// what kept it from starting. For `doctor` and tests: reads never need to call it.
    pub async fn ready(&self) -> ReaderInfo {
        let mut slot = self.inner.slot.lock().await;
        if slot.is_none() {
            match tokio::time::timeout(START_TIMEOUT, self.inner.start()).await {
                Ok(Ok(running)) => *slot = Some(running),
                Ok(Err(_)) => {}
                Err(_) => {
                    let mut info = self.inner.info.lock_plain();
                    info.available = false;
                    info.problem = Some(format!("the OCR worker did not start within {START_TIMEOUT:?}"));
                }
            }
        }
        drop(slot);
        self.info()
    }

    /// The running worker's process id (for tests and the bench).
    pub fn worker_pid(&self) -> Option<u32> {
        match self.inner.pid.load(Ordering::Acquire) {
            0 => None,
            pid => Some(pid),
        }
    }

    async fn read_once(&self, image: GrayImage, options: ReadOptions) -> Result<TextRead, OcrError> {
        image.check()?;
        let deadline = if options.deadline.is_zero() { self.inner.config.default_deadline } else { options.deadline };
        let ms = u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX);
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let request =
            encode_request(id, &image, &options.languages, ms).map_err(|e| OcrError::Protocol(e.to_string()))?;
        drop(image);
        let mut slot = self.inner.slot.lock().await;
        // Out of the slot while reading: dropped (and killed) if this future is.
        let taken = slot.take();
        let inner = &self.inner;
        let work = async move {
            let mut running = match taken {
                Some(r) => r,
                None => inner.start().await?,
            };
            match exchange(&mut running, id, &request).await {
                Ok(result) => Ok((running, result)),
                Err(failure) => Err(inner.fail(running, failure).await),
            }
        };
        match tokio::time::timeout(deadline, work).await {
            Ok(Ok((running, result))) => {
                *slot = Some(running);
                result
            }
            Ok(Err(e)) => {
                self.inner.pid.store(0, Ordering::Release);
                Err(e)
            }
            Err(_) => {
                // The worker (if one was started) was dropped with the future: kill_on_drop
                // sends SIGKILL; the runtime reaps it.
                self.inner.pid.store(0, Ordering::Release);
                tracing::warn!(deadline_ms = ms, "OCR read past its deadline; worker killed");
                Err(OcrError::Timeout { ms })
            }
        }
    }
}

/// What went wrong talking to a worker.
enum Failure {
    /// Its stdout ended or a pipe broke: it died.
    Died,
    /// It answered nonsense.
    Protocol(String),
    /// It answered an engine failure (the worker said so itself).
    Engine(OcrError),
}

/// Sends one request and reads its answer.
async fn exchange(running: &mut Running, id: u64, request: &[u8]) -> Result<Result<TextRead, OcrError>, Failure> {
    if running.stdin.write_all(request).await.is_err() || running.stdin.flush().await.is_err() {
        return Err(Failure::Died);
    }
    let line = match read_line_bounded(&mut running.stdout, MAX_ANSWER).await {
        Ok(Some(line)) => line,
        Ok(None) => return Err(Failure::Died),
        Err(LineError::Io) => return Err(Failure::Died),
        Err(LineError::TooLong) => return Err(Failure::Protocol(format!("an answer longer than {MAX_ANSWER} bytes"))),
    };
    match parse_line(&line) {
        Ok(FromWorker::Answer(a)) if a.id == id => match a.into_result() {
            Err(OcrError::Protocol(m)) => Err(Failure::Engine(OcrError::Protocol(m))),
            other => Ok(other),
        },
        Ok(FromWorker::Answer(a)) => Err(Failure::Protocol(format!("answer {} to request {id}", a.id))),
        Ok(FromWorker::Hello(_)) => Err(Failure::Protocol("a second hello".into())),
        Err(e) => Err(Failure::Protocol(e.to_string())),
    }
}

impl Inner {
    /// Starts a worker and reads its hello; a failure is also what `info()` says next.
    async fn start(&self) -> Result<Running, OcrError> {
        let started = self.start_worker().await;
        if let Err(e) = &started {
            let mut info = self.info.lock_plain();
            info.available = false;
            info.problem = Some(e.to_string());
        }
        started
    }

    async fn start_worker(&self) -> Result<Running, OcrError> {
        let c = &self.config;
        let mut cmd = std::process::Command::new(&c.command.program);
        cmd.args(&c.command.args);
        cmd.arg("--languages").arg(c.languages.join(","));
        cmd.env_clear().env("OMP_THREAD_LIMIT", "1");
        // The worker needs no working directory of the daemon's: holding one keeps it busy
        // (an unmount, a task's directory whose processes are counted by it).
        cmd.current_dir("/");
        for passed in ["TESSDATA_PREFIX", "TETHER_OCR_LOG"] {
            if let Some(v) = std::env::var_os(passed) {
                cmd.env(passed, v);
            }
        }
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        limit_child(&mut cmd, c.memory_limit);
        let mut child = Command::from(cmd).kill_on_drop(true).spawn().map_err(|e| {
            OcrError::Unavailable(format!("cannot start the OCR worker {}: {e}", c.command.program.display()))
        })?;
        let pid = child.id().unwrap_or(0);
        let (Some(stdin), Some(stdout), stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take()) else {
            return Err(OcrError::Unavailable("the OCR worker's pipes are missing".into()));
        };
        if let Some(stderr) = stderr {
            tokio::spawn(forward_log(pid, BufReader::new(stderr)));
        }
        let mut stdout = BufReader::with_capacity(1 << 16, stdout);
        let hello = match read_line_bounded(&mut stdout, MAX_ANSWER).await {
            Ok(Some(line)) => parse_line(&line),
            _ => {
                let status = wait_status(&mut child).await;
                return Err(OcrError::Unavailable(format!("the OCR worker exited at start ({status})")));
            }
        };
        match hello {
            Ok(FromWorker::Hello(info)) => {
                if let Some(p) = &info.problem {
                    tracing::warn!("OCR unavailable: {p}");
                } else {
                    tracing::info!(version = ?info.version, languages = ?info.languages, pid, "OCR worker ready");
                }
                *self.info.lock_plain() = info;
            }
            other => {
                return Err(OcrError::Protocol(format!("the OCR worker started without a hello: {other:?}")));
            }
        }
        self.pid.store(pid, Ordering::Release);
        Ok(Running { child, stdin, stdout, pid })
    }

    /// Ends a worker after `failure` and says what happened.
    async fn fail(&self, mut running: Running, failure: Failure) -> OcrError {
        self.pid.store(0, Ordering::Release);
        match failure {
            Failure::Died => {
                let status = wait_status(&mut running.child).await;
                tracing::warn!(pid = running.pid, "OCR worker died during a read: {status}");
                OcrError::WorkerDied(status)
            }
            Failure::Protocol(m) => {
                let _ = running.child.kill().await;
                tracing::warn!(pid = running.pid, "OCR worker answered nonsense: {m}");
                OcrError::Protocol(m)
            }
            Failure::Engine(e) => {
                let _ = running.child.kill().await;
                e
            }
        }
    }
}

/// The child's exit in words ("exit status 3", "killed by SIGKILL").
async fn wait_status(child: &mut Child) -> String {
    // A worker whose stdout closed is exiting; if it lingers (closed stdout by hand), it is
    // killed after a moment rather than waited on forever.
    match tokio::time::timeout(Duration::from_secs(2), child.wait()).await {
        Ok(Ok(status)) => describe(status),
        Ok(Err(e)) => format!("status unknown: {e}"),
        Err(_) => {
            let _ = child.kill().await;
            "stopped answering; killed".into()
        }
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(sig) = status.signal() {
        let name = nix::sys::signal::Signal::try_from(sig).map(|s| s.as_str()).unwrap_or("an unknown signal");
        return format!("killed by {name}");
    }
    match status.code() {
        Some(code) => format!("exit status {code}"),
        None => "exited".into(),
    }
}

/// Why a line could not be read.
#[derive(Debug)]
enum LineError {
    Io,
    TooLong,
}

/// One line without its newline; `None` at end of stream; at most `max` bytes buffered.
async fn read_line_bounded(r: &mut (impl AsyncBufRead + Unpin), max: usize) -> Result<Option<Vec<u8>>, LineError> {
    let mut line = Vec::new();
    loop {
        let buf = r.fill_buf().await.map_err(|_| LineError::Io)?;
        if buf.is_empty() {
            return if line.is_empty() { Ok(None) } else { Err(LineError::Io) };
        }
        let (chunk, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if line.len() + chunk.len() > max {
            return Err(LineError::TooLong);
        }
        line.extend_from_slice(chunk);
        let used = done.unwrap_or(chunk.len());
        r.consume(used);
        if done.is_some() {
            return Ok(Some(line));
        }
    }
}

/// The worker's stderr (its log and Tesseract's messages), line by line into ours.
async fn forward_log(pid: u32, mut stderr: BufReader<tokio::process::ChildStderr>) {
    loop {
        match read_line_bounded(&mut stderr, MAX_LOG_LINE).await {
            Ok(Some(line)) => tracing::debug!(pid, "ocr-worker: {}", String::from_utf8_lossy(&line)),
            Ok(None) | Err(LineError::Io) => return,
            Err(LineError::TooLong) => tracing::debug!(pid, "ocr-worker: (a log line over {MAX_LOG_LINE} bytes)"),
        }
    }
}

/// Sets the child's nice value and address-space limit, and keeps the daemon's other file
/// descriptors out of it.
fn limit_child(cmd: &mut std::process::Command, memory_limit: u64) {
    use std::os::unix::process::CommandExt;
    let limit = memory_limit as libc::rlim_t;
    // SAFETY: the closure runs in the forked child before exec and makes only raw system
    // calls (setpriority(2), setrlimit(2), close_range(2)), all async-signal-safe; it
    // allocates nothing and touches no memory shared with the parent (its captures are
    // plain integers copied into it).
    unsafe {
        cmd.pre_exec(move || {
            // Lower priority is best effort: a failure leaves the worker at the daemon's.
            libc::setpriority(libc::PRIO_PROCESS, 0, WORKER_NICE);
            if limit > 0 {
                let rl = libc::rlimit { rlim_cur: limit, rlim_max: limit };
                if libc::setrlimit(libc::RLIMIT_AS, &rl) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // The daemon's sockets and devices must not leak into the worker; std's own
            // error pipe is close-on-exec already. Kernels before 5.11 ignore the flag.
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC);
            Ok(())
        });
    }
}

impl TextReader for TesseractWorker {
    fn info(&self) -> ReaderInfo {
        self.inner.info.lock_plain().clone()
    }

    fn read(&self, image: GrayImage, options: ReadOptions) -> ReadFuture<'_> {
        Box::pin(self.read_once(image, options))
    }
}

/// The daemon's text reader as the configuration says: `None` when `[ocr] enabled = false`.
pub fn reader_from(settings: &crate::config::OcrSettings, program: WorkerCommand) -> Option<Arc<dyn TextReader>> {
    if !settings.enabled {
        return None;
    }
    Some(Arc::new(TesseractWorker::new(worker_config(settings, program))))
}

/// The worker's configuration from `[ocr]`, with `program` as the worker.
pub fn worker_config(settings: &crate::config::OcrSettings, program: WorkerCommand) -> WorkerConfig {
    let mut command = program;
    if let Some(lib) = &settings.library {
        command.args.extend(["--library".into(), lib.display().to_string()]);
    }
    if let Some(dir) = &settings.tessdata {
        command.args.extend(["--tessdata".into(), dir.display().to_string()]);
    }
    WorkerConfig {
        command,
        languages: settings.languages.clone(),
        memory_limit: settings.memory_limit_mib.saturating_mul(1 << 20),
        default_deadline: Duration::from_millis(settings.read_deadline_ms),
    }
}

/// The Debian packages to install for `info`'s problem (the library and every configured
/// language that is not installed); empty when reads work.
pub fn missing_packages(info: &ReaderInfo) -> Vec<String> {
    if info.available {
        return Vec::new();
    }
    let mut out = Vec::new();
    if info.version.is_none() {
        out.push("libtesseract5".to_owned());
    }
    for l in &info.languages {
        if !info.installed_languages.contains(l) && super::tesseract::check_language(l).is_ok() {
            out.push(super::tesseract::package_for(l));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_packages_name_the_library_and_languages() {
        let mut info = starting_info(&["eng".into(), "deu".into()]);
        info.installed_languages = vec!["eng".into()];
        assert_eq!(missing_packages(&info), ["libtesseract5", "tesseract-ocr-deu"]);
        info.version = Some("5.3.0".into());
        assert_eq!(missing_packages(&info), ["tesseract-ocr-deu"]);
        info.available = true;
        assert!(missing_packages(&info).is_empty());
    }

    #[tokio::test]
    async fn lines_are_bounded_and_split() {
        let data: &[u8] = b"one\ntwo\nlonger than ten bytes\n";
        let mut r = BufReader::with_capacity(4, data);
        assert_eq!(read_line_bounded(&mut r, 10).await.unwrap().unwrap(), b"one");
        assert_eq!(read_line_bounded(&mut r, 10).await.unwrap().unwrap(), b"two");
        assert!(matches!(read_line_bounded(&mut r, 10).await, Err(LineError::TooLong)));
        let mut end = BufReader::new(&b""[..]);
        assert!(read_line_bounded(&mut end, 10).await.unwrap().is_none());
        let mut cut = BufReader::new(&b"no newline"[..]);
        assert!(matches!(read_line_bounded(&mut cut, 100).await, Err(LineError::Io)));
    }

    #[tokio::test]
    async fn a_missing_program_is_unavailable() {
        let w = TesseractWorker::new(WorkerConfig {
            command: WorkerCommand { program: "/nonexistent/ocr-worker".into(), args: vec![] },
            languages: vec!["eng".into()],
            memory_limit: 0,
            default_deadline: Duration::from_secs(5),
        });
        let img = GrayImage { width: 2, height: 2, pixels: vec![0; 4] };
        let e = w.read(img, ReadOptions::default()).await.unwrap_err();
        assert!(matches!(&e, OcrError::Unavailable(m) if m.contains("cannot start")), "{e:?}");
        assert_eq!(w.worker_pid(), None);
    }

    #[tokio::test]
    async fn a_bad_image_never_reaches_the_worker() {
        let w = TesseractWorker::new(WorkerConfig {
            command: WorkerCommand { program: "/nonexistent/ocr-worker".into(), args: vec![] },
            languages: vec!["eng".into()],
            memory_limit: 0,
            default_deadline: Duration::from_secs(5),
        });
        let img = GrayImage { width: 3, height: 2, pixels: vec![0; 5] };
        assert!(matches!(w.read(img, ReadOptions::default()).await, Err(OcrError::BadImage(_))));
    }

    /// A "worker" that is a shell script: says hello, then answers nonsense.
    #[tokio::test]
    async fn nonsense_is_a_protocol_error_and_the_next_read_restarts() {
        let hello = r#"{"hello":{"engine":"fake","version":null,"available":true,"languages":["eng"],"installed_languages":["eng"],"problem":null}}"#;
        let script = format!("echo '{hello}'; head -c 10 >/dev/null; echo 'not json'; sleep 5");
        let w = TesseractWorker::new(WorkerConfig {
            command: WorkerCommand { program: "/bin/sh".into(), args: vec!["-c".into(), script, "sh".into()] },
            languages: vec!["eng".into()],
            memory_limit: 0,
            default_deadline: Duration::from_secs(10),
        });
        let img = GrayImage { width: 2, height: 2, pixels: vec![0; 4] };
        let e = w.read(img.clone(), ReadOptions::default()).await.unwrap_err();
        assert!(matches!(e, OcrError::Protocol(_)), "{e:?}");
        assert_eq!(w.info().engine, "fake", "the hello is kept");
        let e = w.read(img, ReadOptions::default()).await.unwrap_err();
        assert!(matches!(e, OcrError::Protocol(_)), "a new worker answered: {e:?}");
    }
}
