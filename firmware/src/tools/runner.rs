//! Runs a catalog tool: checks its arguments, turns it into tether/1 calls on a
//! [`Backend`], and words the outcome for a model or a person.
//!
//! The runner remembers the latest screenshot it took, so pointer tools may omit
//! `observation_id` (and the answer says which screenshot was used). It never invents one:
//! with no screenshot yet, a pointer tool asks for one (MCP), or takes a fresh one first
//! when told to (the CLI, where each command is a new process).

use std::future::Future;
use std::sync::Mutex;

use serde_json::{json, Map, Value};

use super::catalog::{self, ToolDef};
use crate::protocol::{ErrorCode, Method};
use crate::sync::LockPlain;

/// A tool error's code: the daemon's stable [`ErrorCode`], or one a client adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolCode {
    /// The daemon's code.
    Daemon(ErrorCode),
    /// The daemon cannot be reached (its connection closed, the appliance is down).
    Unavailable,
    /// The appliance answered, but its certificate is not from the pinned CA (`--url`).
    FingerprintMismatch,
    /// A code this build does not know (a newer daemon's), as it was sent.
    Unknown(String),
}

impl ToolCode {
    /// The code with this wire name.
    pub fn of(name: &str) -> ToolCode {
        match ErrorCode::from_wire(name) {
            Some(code) => ToolCode::Daemon(code),
            None if name == "UNAVAILABLE" => ToolCode::Unavailable,
            None if name == "FINGERPRINT_MISMATCH" => ToolCode::FingerprintMismatch,
            None => ToolCode::Unknown(name.to_string()),
        }
    }

    /// The wire name, e.g. `"STALE_OBSERVATION"`.
    pub fn as_str(&self) -> &str {
        match self {
            ToolCode::Daemon(code) => code.as_str(),
            ToolCode::Unavailable => "UNAVAILABLE",
            ToolCode::FingerprintMismatch => "FINGERPRINT_MISMATCH",
            ToolCode::Unknown(name) => name,
        }
    }
}

impl From<ErrorCode> for ToolCode {
    fn from(code: ErrorCode) -> ToolCode {
        ToolCode::Daemon(code)
    }
}

impl PartialEq<ErrorCode> for ToolCode {
    fn eq(&self, other: &ErrorCode) -> bool {
        *self == ToolCode::Daemon(*other)
    }
}

impl std::fmt::Display for ToolCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed call: the stable code, the daemon's message, and what to do next.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ToolError {
    /// The stable error code.
    pub code: ToolCode,
    /// What went wrong.
    pub message: String,
    /// What the screen did, for `NO_VISIBLE_EFFECT` and `UNEXPECTED_CHANGE` (the error's
    /// `effect`: a fresh observation among it).
    pub effect: Option<Value>,
}

impl ToolError {
    /// An error with `code` and `message`.
    pub fn new(code: impl Into<ToolCode>, message: impl Into<String>) -> ToolError {
        ToolError { code: code.into(), message: message.into(), effect: None }
    }

    /// The same error carrying the daemon's `effect` (absent or null: none).
    #[must_use]
    pub fn with_effect(mut self, effect: Option<&Value>) -> ToolError {
        self.effect = effect.filter(|e| e.is_object()).cloned();
        self
    }

    /// What the caller should do next, by code.
    pub fn next_step(&self) -> &'static str {
        use ErrorCode as E;
        let code = match &self.code {
            ToolCode::Daemon(code) => *code,
            ToolCode::Unavailable => {
                return "The appliance cannot be reached; check that `tether serve` runs, then retry."
            }
            ToolCode::FingerprintMismatch => {
                return "The appliance answered, but not with the certificate pinned here: use the fingerprint \
                        `tether doctor` shows on the appliance, or pair again (`tether pair` there, `tether login \
                        PAIRING-URL` here).";
            }
            ToolCode::Unknown(_) => return "See the message.",
        };
        match code {
            E::StaleObservation | E::ObservationExpired | E::NeedsObservation => {
                "Take a new screenshot and use coordinates from it."
            }
            E::OutOfBounds => "Use coordinates inside the latest screenshot.",
            E::Interrupted => "A human paused, took over or stopped the task: take a screenshot before going on.",
            E::NoVisibleEffect => {
                "The input was sent but nothing on the screen changed: take a screenshot and look before \
                 trying again (the target may have been missed, not ready yet, or inert)."
            }
            E::UnexpectedChange => "The screen changed: take a screenshot to see what happened.",
            E::AppNotOpened => {
                "No app of that name opened; the phone is on the home screen. Check the app's name as the home \
                 screen shows it (take a screenshot), then try again with that name."
            }
            E::TextNotFound => {
                "The text is not on the screen: check its spelling against the nearest texts, scroll to reveal it, \
                 or wait_for_text if it is still coming."
            }
            E::AmbiguousText => "Several places match: pass index (0 = first in reading order) or a region.",
            E::ExpectedTextMissing | E::UnexpectedText => {
                "The action ran but the screen does not say what you expected: look at the screen before going on."
            }
            E::OcrUnavailable => "Text reading is not installed on this appliance: use screenshot and coordinates.",
            E::OcrFailed => "Reading the screen failed this time; retry.",
            E::UpdateUnavailable => "Updates are not available here (not the appliance image).",
            E::TextHasNewline => {
                "Nothing was typed. For a multi-line field pass newlines return (tether type --newlines return); \
                 for single-line fields type each line on its own."
            }
            E::TaskRunning => "Wait for that task to end (or ask its owner); you can still take screenshots.",
            E::TaskEnded => "The task is over: stop acting.",
            E::TaskActive => "Another task holds the phone: wait for it to end.",
            E::Rejected => "The human said no: do not do that; go on within the task's scope.",
            E::ScopeExceeded => "The task reached its limit and was stopped.",
            E::Unauthorized => {
                "The appliance does not know this token (mistyped, revoked or rotated): log in again \
                 (`tether login` with a new pairing URL from `tether pair`) or set TETHER_TOKEN to a valid token."
            }
            E::PermissionDenied => {
                "Your token's role does not allow this: ask an admin for a token with a role that does (operate \
                 drives the phone, admin also manages tokens)."
            }
            E::UntypeableText => "Type only characters of the phone's keyboard layout.",
            E::DeviceUnavailable | E::HostNotConnected | E::NoFrame => {
                "The phone is not connected or shows no picture; check the cable, then retry."
            }
            E::Busy | E::Timeout | E::RateLimited => "Retry in a moment.",
            E::StorageFailed => {
                "The appliance could not save this (its disk is full): nothing changed. Tell a person; retry once \
                 space is freed."
            }
            E::InvalidParams | E::OperationConflict => "Fix the arguments and call again.",
            _ => "See the message.",
        }
    }
}

/// Where the runner's tether/1 calls go: the daemon in-process, its control socket, or
/// its HTTPS API. Every backend speaks for one caller (its role, its task token).
pub trait Backend: Send + Sync + 'static {
    /// Calls `method` with `params` (no `id`/`method` keys) and returns its result.
    fn call(&self, method: &str, params: Map<String, Value>) -> impl Future<Output = Result<Value, ToolError>> + Send;
}

/// A backend shared by reference (the stdio server's one socket connection).
impl<T: Backend> Backend for std::sync::Arc<T> {
    fn call(&self, method: &str, params: Map<String, Value>) -> impl Future<Output = Result<Value, ToolError>> + Send {
        T::call(self, method, params)
    }
}

/// What a tool produced.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// A short account for a model or a person.
    pub text: String,
    /// The daemon's result, for programs.
    pub result: Value,
    /// An image (`mime type`, base64 data), for `screenshot`.
    pub image: Option<(String, String)>,
}

/// When a pointer tool names no screenshot and none was taken here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoScreenshot {
    /// Refuse: the caller must look first (MCP: a model must see what it taps).
    Refuse,
    /// Take one first and read the coordinates in it (the CLI: one command per process).
    TakeOne,
}

/// The latest screenshot this runner took.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    observation_id: String,
    width: u64,
    height: u64,
}

/// Runs tools on one backend.
#[derive(Debug)]
pub struct Runner<B> {
    backend: B,
    latest: Mutex<Option<Seen>>,
    no_screenshot: NoScreenshot,
}

impl<B: Backend> Runner<B> {
    /// A runner over `backend`.
    pub fn new(backend: B, no_screenshot: NoScreenshot) -> Runner<B> {
        Runner { backend, latest: Mutex::new(None), no_screenshot }
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The tools a caller may call, given the methods its role allows (`hello`'s
    /// `capabilities.methods`). The in-task tools need a task's agent: a caller whose
    /// methods include `task_confirm`, which only a live task token grants.
    pub fn allowed(methods: &[String]) -> Vec<&'static ToolDef> {
        let has = |m: &str| methods.iter().any(|x| x == m);
        let agent = has(crate::protocol::Method::TaskConfirm.as_str());
        catalog::TOOLS.iter().filter(|t| has(t.method.as_str()) && (agent || !t.in_task)).collect()
    }

    /// Runs `tool` with `args`.
    pub async fn run(&self, tool: &ToolDef, args: Map<String, Value>) -> Result<ToolOutput, ToolError> {
        tool.check_args(&args).map_err(|m| ToolError::new(ErrorCode::InvalidParams, m))?;
        match tool.name {
            "screenshot" => {
                let text = args.get("text").and_then(Value::as_bool).unwrap_or(false);
                self.screenshot(args.get("max_edge").and_then(Value::as_u64), text).await
            }
            "find_text" => self.find_text(args).await,
            "wait_for_text" => self.wait_for_text(args).await,
            "status" => self.status().await,
            "wait_for_change" | "wait_for_settle" => self.wait(tool, args).await,
            "confirm" => {
                let r = self.backend.call("task_confirm", obj(json!({"question": args["question"]}))).await?;
                let text = match r.get("approved").and_then(Value::as_bool) {
                    Some(true) => "The human approved.".to_string(),
                    Some(false) => "The human declined.".to_string(),
                    None => format!("The human answered: {r}"),
                };
                Ok(ToolOutput { text, result: r, image: None })
            }
            "messages" => {
                let r = self.backend.call("task_messages", args).await?;
                let list = r.get("messages").and_then(Value::as_array).cloned().unwrap_or_default();
                let text = if list.is_empty() {
                    "No messages from humans.".to_string()
                } else {
                    let lines: Vec<String> = list
                        .iter()
                        .map(|m| format!("[seq {}] {}", m["seq"], m["text"].as_str().unwrap_or_default()))
                        .collect();
                    format!("{} message(s):\n{}", list.len(), lines.join("\n"))
                };
                Ok(ToolOutput { text, result: r, image: None })
            }
            _ => self.act(tool, args).await,
        }
    }

    async fn screenshot(&self, max_edge: Option<u64>, with_text: bool) -> Result<ToolOutput, ToolError> {
        let mut params = Map::new();
        if let Some(e) = max_edge {
            params.insert("max_edge".into(), e.into());
        }
        if with_text {
            params.insert("text".into(), true.into());
        }
        let mut r = self.backend.call("screenshot", params).await?;
        let meta = r.get("metadata").cloned().unwrap_or(Value::Null);
        let seen = Seen {
            observation_id: meta["observation_id"].as_str().unwrap_or_default().to_string(),
            width: meta["image_size"]["width"].as_u64().unwrap_or(0),
            height: meta["image_size"]["height"].as_u64().unwrap_or(0),
        };
        let text = format!(
            "Screenshot {w}x{h} px, observation_id {id}. Pointer tools take pixels of this image \
             (x 0..{w}, y 0..{h}) and use it until the next screenshot.",
            w = seen.width,
            h = seen.height,
            id = seen.observation_id
        );
        *self.latest.lock_plain() = Some(seen);
        let mut text = text;
        if let Some(lines) = r["text"]["lines"].as_array() {
            text.push_str(&format!(
                "\nText on the screen ({} lines; box x,y widthxheight in its pixels):",
                lines.len()
            ));
            for l in lines {
                text.push_str(&format!("\n{} {:?}", box_words(&l["box"]), l["text"].as_str().unwrap_or_default()));
            }
        }
        let mime = r["mime_type"].as_str().map(str::to_string);
        let image = match (mime, r.as_object_mut().and_then(|o| o.remove("data"))) {
            (Some(mime), Some(Value::String(data))) => Some((mime, data)),
            _ => None,
        };
        Ok(ToolOutput { text, result: r, image })
    }

    async fn status(&self) -> Result<ToolOutput, ToolError> {
        let r = self.backend.call("status", Map::new()).await?;
        let word = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
        let size = &r["video"]["source_size"];
        let mut text = format!(
            "USB host: {}; video: {}{}.",
            word(&r["hid"]["host"]),
            word(&r["video"]["signal"]),
            if size.is_object() { format!(" ({}x{})", size["width"], size["height"]) } else { String::new() }
        );
        match r.get("task").filter(|t| !t.is_null()) {
            Some(t) => text.push_str(&format!(
                " Task {} \"{}\" is {} ({} steps).",
                t["id"],
                t["title"].as_str().unwrap_or_default(),
                t["state"].as_str().unwrap_or("?"),
                t["steps"]
            )),
            None => text.push_str(" No task is running."),
        }
        Ok(ToolOutput { text, result: r, image: None })
    }

    /// `wait_for_change` (against the latest screenshot taken here, when there is one)
    /// and `wait_for_settle`: the daemon watches; the answer's observation becomes the
    /// latest, so pointer tools can go on without a screenshot.
    async fn wait(&self, tool: &ToolDef, args: Map<String, Value>) -> Result<ToolOutput, ToolError> {
        let mut params = args;
        if tool.name == "wait_for_change" {
            if let Some(seen) = self.latest.lock_plain().clone() {
                params.insert("observation_id".into(), seen.observation_id.into());
            }
        }
        let mut r = match self.backend.call(tool.method.as_str(), params.clone()).await {
            // The screenshot it compares with expired: compare with the screen now.
            Err(e) if params.contains_key("observation_id") && is_observation_gone(&e) => {
                params.remove("observation_id");
                self.backend.call(tool.method.as_str(), params).await?
            }
            other => other?,
        };
        let waited = r["waited_ms"].as_u64().unwrap_or(0);
        let mut text = match (tool.name, r["changed"].as_bool(), r["settled"].as_bool()) {
            ("wait_for_change", Some(true), _) => {
                format!("The screen changed after {} ms.", r["changed_after_ms"].as_u64().unwrap_or(waited))
            }
            ("wait_for_change", _, _) => format!("The screen did not change in {waited} ms."),
            (_, _, Some(true)) => format!("The screen is settled (waited {waited} ms)."),
            _ => format!("The screen was still changing after {waited} ms."),
        };
        text.push(' ');
        text.push_str(&self.describe_effect(&r, tool.name == "wait_for_settle"));
        let image = take_image(&mut r);
        Ok(ToolOutput { text, result: r, image })
    }

    /// `find_text`: the matches, and their screenshot becomes the latest here.
    async fn find_text(&self, args: Map<String, Value>) -> Result<ToolOutput, ToolError> {
        let r = self.backend.call(Method::FindText.as_str(), args).await?;
        self.remember(&r);
        let id = r["observation_id"].as_str().unwrap_or_default();
        let query = r["query"]["text"].as_str().unwrap_or_default();
        let matches = r["matches"].as_array().cloned().unwrap_or_default();
        let mut text = match matches.len() {
            0 => format!("{query:?} is not on the screen (observation {id})."),
            n => format!("{n} match(es) for {query:?} in observation {id}, best first (centre x,y; box):"),
        };
        for m in &matches {
            text.push_str(&format!(
                "\n{:?} at {},{} (box {}, score {})",
                m["text"].as_str().unwrap_or_default(),
                m["center"]["x"],
                m["center"]["y"],
                box_words(&m["box"]),
                m["score"]
            ));
        }
        push_nearest(&mut text, &r["nearest"]);
        Ok(ToolOutput { text, result: r, image: None })
    }

    /// `wait_for_text`: whether it came (or went), and where.
    async fn wait_for_text(&self, args: Map<String, Value>) -> Result<ToolOutput, ToolError> {
        let r = self.backend.call(Method::WaitForText.as_str(), args).await?;
        self.remember(&r);
        let query = r["query"]["text"].as_str().unwrap_or_default();
        let waited = r["waited_ms"].as_u64().unwrap_or(0);
        let gone = r["gone"] == Value::Bool(true);
        let mut text = match (r["satisfied"] == Value::Bool(true), gone) {
            (true, false) => format!("{query:?} is on the screen (after {waited} ms)."),
            (true, true) => format!("{query:?} is gone from the screen (after {waited} ms)."),
            (false, false) => format!("{query:?} did not appear in {waited} ms."),
            (false, true) => format!("{query:?} was still on the screen after {waited} ms."),
        };
        if let Some(first) = r["matches"].as_array().and_then(|m| m.first()) {
            text.push_str(&format!(
                " At {},{} (box {}).",
                first["center"]["x"],
                first["center"]["y"],
                box_words(&first["box"])
            ));
        }
        push_nearest(&mut text, &r["nearest"]);
        if let Some(id) = r["observation_id"].as_str() {
            text.push_str(&format!(" Observation {id} shows the screen now."));
        }
        Ok(ToolOutput { text, result: r, image: None })
    }

    /// Makes an answer's observation (`observation_id`, `image_size`) the latest here.
    fn remember(&self, r: &Value) {
        if let (Some(id), Some(w), Some(h)) =
            (r["observation_id"].as_str(), r["image_size"]["width"].as_u64(), r["image_size"]["height"].as_u64())
        {
            *self.latest.lock_plain() = Some(Seen { observation_id: id.to_string(), width: w, height: h });
        }
    }

    /// Words for what an action or a wait did to the screen, and makes its fresh
    /// observation the latest here.
    fn describe_effect(&self, effect: &Value, say_change: bool) -> String {
        if effect["verified"] == Value::Bool(false) {
            return match effect["why"].as_str() {
                Some(why) => format!("Not verified: {why}."),
                None => "Not verified (sent without watching the screen).".into(),
            };
        }
        let mut text = String::new();
        if say_change {
            let region = &effect["changed_region"];
            let changed = effect["changed"].as_bool() == Some(true);
            match changed {
                true if region.is_object() => text.push_str(&format!(
                    "The screen changed in x {} y {} ({}x{} px)",
                    region["x"], region["y"], region["width"], region["height"]
                )),
                true => text.push_str("The screen changed"),
                // Nothing changed, so there was nothing to settle: `settled` is false then
                // only because no quiet stretch after a change was seen.
                false => text.push_str("The screen did not change"),
            }
            match (changed, effect["settled"].as_bool(), effect["settled_ms"].as_u64()) {
                (true, Some(true), Some(ms)) => text.push_str(&format!(" and settled {ms} ms after the input.")),
                (true, Some(false), _) => text.push_str(" and was still changing at the timeout."),
                _ => text.push('.'),
            }
        } else if let Some(region) = effect["changed_region"].as_object() {
            text.push_str(&format!(
                "Changed region: x {} y {} ({}x{} px).",
                region["x"], region["y"], region["width"], region["height"]
            ));
        }
        if let (Some(id), Some(w), Some(h)) = (
            effect["after_observation_id"].as_str(),
            effect["image_size"]["width"].as_u64(),
            effect["image_size"]["height"].as_u64(),
        ) {
            *self.latest.lock_plain() = Some(Seen { observation_id: id.to_string(), width: w, height: h });
            match self.no_screenshot {
                NoScreenshot::Refuse => text.push_str(&format!(
                    " New observation {id} ({w}x{h} px) shows the screen now: pointer tools use it, no screenshot \
                     needed unless you want to see the screen."
                )),
                // The CLI: each command is a new process that remembers nothing, so say how
                // to aim at this observation rather than promise it is used.
                NoScreenshot::TakeOne => text.push_str(&format!(
                    " New observation {id} ({w}x{h} px) shows the screen now: `--observation-id {id}` aims a \
                     pointer verb at it."
                )),
            }
        }
        text.trim_start().to_string()
    }

    /// The observation a pointer tool acts on: the one named, else the latest here, else
    /// (CLI) a fresh one.
    async fn observation(&self, named: Option<&str>) -> Result<(String, Option<Seen>, &'static str), ToolError> {
        if let Some(id) = named {
            return Ok((id.to_string(), None, "the screenshot named"));
        }
        let latest = self.latest.lock_plain().clone();
        match (latest, self.no_screenshot) {
            (Some(seen), _) => Ok((seen.observation_id.clone(), Some(seen), "the latest screenshot")),
            (None, NoScreenshot::TakeOne) => {
                self.screenshot(None, false).await?;
                let seen = self.latest.lock_plain().clone();
                let seen =
                    seen.ok_or_else(|| ToolError::new(ErrorCode::NoFrame, "the screenshot had no observation id"))?;
                Ok((seen.observation_id.clone(), Some(seen), "a fresh screenshot"))
            }
            (None, NoScreenshot::Refuse) => Err(ToolError::new(
                ErrorCode::NeedsObservation,
                "no screenshot yet: call screenshot first; coordinates are pixels of that image",
            )),
        }
    }

    async fn act(&self, tool: &ToolDef, args: Map<String, Value>) -> Result<ToolOutput, ToolError> {
        let num = |k: &str| args.get(k).and_then(Value::as_f64);
        let spec = match tool.name {
            "tap" | "double_tap" | "long_press" => json!({"type": tool.name, "x": num("x"), "y": num("y")}),
            "swipe" => json!({
                "type": "drag",
                "path": [{"x": num("from_x"), "y": num("from_y")}, {"x": num("to_x"), "y": num("to_y")}],
                "duration_ms": args.get("duration_ms"),
            }),
            "drag" => json!({"type": "drag", "path": args["path"], "duration_ms": args.get("duration_ms")}),
            "scroll" => json!({"type": "scroll", "direction": args["direction"], "distance": num("amount")}),
            "type_text" => json!({"type": "type_text", "text": args["text"], "newlines": args.get("newlines")}),
            "press_key" => json!({"type": "key_press", "key": args["key"]}),
            "hotkey" => json!({"type": "hotkey", "keys": args["keys"]}),
            "home" | "app_switcher" | "back" => json!({"type": tool.name}),
            "open_app" => json!({"type": "open_app", "name": args["name"]}),
            "tap_text" => json!({
                "type": "tap_text",
                "text": args["text"],
                "match": args.get("match"),
                "threshold": args.get("threshold"),
                "region": args.get("region"),
                "index": args.get("index"),
                "min_confidence": args.get("min_confidence"),
            }),
            other => return Err(ToolError::new(ErrorCode::UnknownMethod, format!("no tool {other}"))),
        };
        let mut spec = obj(spec);
        spec.retain(|_, v| !v.is_null());
        let pointer = matches!(tool.name, "tap" | "double_tap" | "long_press" | "swipe" | "drag" | "scroll");
        let mut params = Map::new();
        let mut used = None;
        if pointer {
            let (id, seen, which) = self.observation(args.get("observation_id").and_then(Value::as_str)).await?;
            if tool.name == "scroll" {
                // Start in the middle of the screenshot unless told otherwise.
                let (w, h) = seen.as_ref().map_or((0, 0), |s| (s.width, s.height));
                let x = num("x").or((w > 0).then(|| w as f64 / 2.0));
                let y = num("y").or((h > 0).then(|| h as f64 / 2.0));
                match (x, y) {
                    (Some(x), Some(y)) => {
                        spec.insert("x".into(), x.into());
                        spec.insert("y".into(), y.into());
                    }
                    _ => {
                        return Err(ToolError::new(
                            ErrorCode::InvalidParams,
                            "scroll with a named observation_id needs x and y (where to start)",
                        ))
                    }
                }
            }
            params.insert("observation_id".into(), id.clone().into());
            used = Some((id, which));
        }
        let operation = match args.get("operation_id").and_then(Value::as_str) {
            Some(op) => op.to_string(),
            None => new_operation_id()?,
        };
        params.insert("operation_id".into(), operation.clone().into());
        params.insert("action".into(), Value::Object(spec));
        if tool.name == "tap_text" {
            // The text is the target: read a fresh screenshot unless one is named.
            if let Some(id) = args.get("observation_id").filter(|v| !v.is_null()) {
                params.insert("observation_id".into(), id.clone());
            }
        }
        for key in ["expect", "return_image", "expect_text", "expect_no_text"] {
            if let Some(v) = args.get(key).filter(|v| !v.is_null()) {
                params.insert(key.into(), v.clone());
            }
        }
        let mut r = match self.backend.call(Method::Action.as_str(), params).await {
            Ok(r) => r,
            Err(mut e) => {
                // Nothing visible happened (or something unexpected did): say what the
                // screen did, and keep its fresh observation for the next look.
                // The daemon's message already says whether the screen changed: add only
                // where it changed and the fresh observation.
                if let Some(effect) = e.effect.clone() {
                    let more = self.describe_effect(&effect, false);
                    if !more.is_empty() {
                        e.message = format!("{}. {more}", e.message.trim_end_matches('.'));
                    }
                }
                return Err(e);
            }
        };
        let status = r["status"].as_str().unwrap_or("submitted").to_string();
        let mut text = format!("{}: {status}", tool.name);
        if let Some((id, which)) = used {
            text.push_str(&format!(" (coordinates read in {which}, observation {id})"));
        }
        text.push_str(&format!("; operation_id {operation}."));
        if let Some(t) = r.get("text_target").filter(|t| t.is_object()) {
            text.push_str(&format!(
                " Tapped {:?} at {},{} (box {}).",
                t["text"].as_str().unwrap_or_default(),
                t["center"]["x"],
                t["center"]["y"],
                box_words(&t["box"])
            ));
        }
        if status == "outcome_unknown" {
            text.push_str(" It may or may not have happened: take a screenshot to see.");
        }
        text.push(' ');
        text.push_str(&self.describe_effect(&r, true));
        let image = take_image(&mut r);
        Ok(ToolOutput { text: text.trim_end().to_string(), result: r, image })
    }
}

/// A box `{x, y, width, height}` as `x,y WxH`.
fn box_words(b: &Value) -> String {
    format!("{},{} {}x{}", b["x"], b["y"], b["width"], b["height"])
}

/// "Nearest on the screen: …" when an answer lists them.
fn push_nearest(text: &mut String, nearest: &Value) {
    let Some(list) = nearest.as_array().filter(|l| !l.is_empty()) else { return };
    let words: Vec<String> = list
        .iter()
        .map(|n| format!("{:?} ({})", n["text"].as_str().unwrap_or_default(), box_words(&n["box"])))
        .collect();
    text.push_str(&format!(" Nearest on the screen: {}.", words.join(", ")));
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// A fresh idempotency key: 96 random bits, hex.
fn new_operation_id() -> Result<String, ToolError> {
    let mut bytes = [0u8; 12];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| ToolError::new(ErrorCode::Internal, "no randomness for an operation id"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `e` says the named screenshot can no longer be used.
fn is_observation_gone(e: &ToolError) -> bool {
    matches!(e.code, ToolCode::Daemon(ErrorCode::StaleObservation | ErrorCode::ObservationExpired))
}

/// Moves an answer's `image` (a PNG the caller asked for) out of the result, to go once,
/// as an image.
fn take_image(r: &mut Value) -> Option<(String, String)> {
    let image = r.as_object_mut()?.remove("image")?;
    let mime = image["mime_type"].as_str()?.to_string();
    let data = image["data"].as_str()?.to_string();
    if let (Some(o), Some(region)) = (r.as_object_mut(), image.get("region")) {
        o.insert("image_region".into(), region.clone());
    }
    Some((mime, data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn tool_codes_keep_known_unavailable_and_unknown_names() {
        assert_eq!(ToolCode::of("STALE_OBSERVATION"), ToolCode::Daemon(ErrorCode::StaleObservation));
        assert!(ToolCode::of("BUSY") == ErrorCode::Busy);
        assert_eq!(ToolCode::of("UNAVAILABLE"), ToolCode::Unavailable);
        // A newer daemon's code is kept as sent, so the model still sees it.
        let newer = ToolCode::of("QUOTA_EXCEEDED");
        assert_eq!(newer, ToolCode::Unknown("QUOTA_EXCEEDED".into()));
        for code in [newer, ToolCode::Unavailable, ToolCode::FingerprintMismatch, ErrorCode::TaskEnded.into()] {
            assert_eq!(ToolCode::of(code.as_str()), code);
            assert_eq!(code.to_string(), code.as_str());
        }
    }

    /// Records calls and answers from a script.
    #[derive(Default)]
    struct Script {
        calls: Mutex<Vec<(String, Map<String, Value>)>>,
    }

    impl Backend for Script {
        async fn call(&self, method: &str, params: Map<String, Value>) -> Result<Value, ToolError> {
            self.calls.lock_plain().push((method.to_string(), params.clone()));
            match method {
                "screenshot" => Ok(json!({
                    "mime_type": "image/png", "data": "iVBOR",
                    "metadata": {"observation_id": "obs-7", "image_size": {"width": 400, "height": 800}},
                })),
                "action" => match params["action"]["type"].as_str() {
                    Some("type_text") => Err(ToolError::new(ErrorCode::UntypeableText, "no ü on this layout")),
                    // What the daemon answers for an inert control: no change, so never settled.
                    Some("home") => Err(ToolError::new(
                        ErrorCode::NoVisibleEffect,
                        "the input was sent but the screen did not change within 3000 ms",
                    )
                    .with_effect(Some(
                        &json!({"verified": true, "changed": false, "settled": false,
                            "settled_ms": null, "after_observation_id": "obs-9",
                            "image_size": {"width": 200, "height": 400}}),
                    ))),
                    Some("double_tap") => Ok(json!({"status": "submitted", "verified": false})),
                    _ => Ok(json!({
                        "status": "submitted", "verified": true, "changed": true, "settled": true,
                        "settled_ms": 412, "changed_region": {"x": 1, "y": 2, "width": 30, "height": 40},
                        "after_observation_id": format!("obs-a{}", params["operation_id"].as_str().unwrap_or("")),
                        "image_size": {"width": 400, "height": 800},
                        "image": {"mime_type": "image/png", "data": "REGION"},
                    })),
                },
                "wait_for_change" => match params.get("observation_id").and_then(Value::as_str) {
                    Some("obs-old") => Err(ToolError::new(ErrorCode::ObservationExpired, "gone")),
                    _ => Ok(json!({"verified": true, "changed": true, "changed_after_ms": 120, "waited_ms": 500,
                                   "settled": true, "settled_ms": 380, "after_observation_id": "obs-w",
                                   "image_size": {"width": 400, "height": 800}})),
                },
                _ => Ok(json!({})),
            }
        }
    }

    fn args(v: Value) -> Map<String, Value> {
        obj(v)
    }

    #[tokio::test]
    async fn pointer_tools_use_the_latest_screenshot_and_say_so() {
        let script = Arc::new(Script::default());
        let runner = Runner::new(script.clone(), NoScreenshot::Refuse);
        let tap = catalog::tool("tap").unwrap();
        let err = runner.run(tap, args(json!({"x": 5, "y": 6}))).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::NeedsObservation, "MCP never taps blind");
        assert!(err.next_step().contains("screenshot"));
        let shot = runner.run(catalog::tool("screenshot").unwrap(), Map::new()).await.unwrap();
        assert_eq!(shot.image, Some(("image/png".into(), "iVBOR".into())));
        assert!(shot.text.contains("obs-7") && shot.text.contains("400x800"), "{}", shot.text);
        assert!(shot.result.get("data").is_none(), "the image goes once, as the image");
        let out = runner.run(tap, args(json!({"x": 5, "y": 6}))).await.unwrap();
        assert!(out.text.contains("the latest screenshot, observation obs-7"), "{}", out.text);
        let scroll = catalog::tool("scroll").unwrap();
        runner.run(scroll, args(json!({"direction": "down"}))).await.unwrap();
        runner
            .run(tap, args(json!({"x": 1, "y": 2, "observation_id": "obs-3", "operation_id": "op-1"})))
            .await
            .unwrap();
        let calls = script.calls.lock_plain().clone();
        let actions: Vec<&Map<String, Value>> = calls.iter().filter(|(m, _)| m == "action").map(|(_, p)| p).collect();
        assert_eq!(actions.len(), 3);
        assert_eq!(actions[0]["observation_id"], "obs-7");
        assert_eq!(actions[0]["action"], json!({"type": "tap", "x": 5.0, "y": 6.0}));
        assert_eq!(actions[0]["operation_id"].as_str().unwrap().len(), 24, "a fresh operation id");
        assert_ne!(actions[0]["operation_id"], actions[1]["operation_id"]);
        assert_eq!(
            actions[1]["action"],
            json!({"type": "scroll", "direction": "down", "x": 200.0, "y": 400.0}),
            "a scroll starts mid-screen"
        );
        assert_eq!(actions[2]["observation_id"], "obs-3");
        assert_eq!(actions[2]["operation_id"], "op-1");
    }

    #[tokio::test]
    async fn the_cli_takes_a_screenshot_first_and_errors_keep_their_code() {
        let script = Arc::new(Script::default());
        let runner = Runner::new(script.clone(), NoScreenshot::TakeOne);
        let swipe = catalog::tool("swipe").unwrap();
        let out = runner.run(swipe, args(json!({"from_x": 1, "from_y": 2, "to_x": 3, "to_y": 4}))).await.unwrap();
        assert!(out.text.contains("a fresh screenshot"), "{}", out.text);
        let calls = script.calls.lock_plain().clone();
        assert_eq!(calls[0].0, "screenshot");
        assert_eq!(calls[1].1["action"]["path"], json!([{"x": 1.0, "y": 2.0}, {"x": 3.0, "y": 4.0}]));
        let typed = runner.run(catalog::tool("type_text").unwrap(), args(json!({"text": "ü"}))).await.unwrap_err();
        assert_eq!(typed.code, ErrorCode::UntypeableText);
        let bad = runner.run(swipe, args(json!({"from_x": 1}))).await.unwrap_err();
        assert_eq!(bad.code, ErrorCode::InvalidParams);
        assert_eq!(script.calls.lock_plain().len(), 3, "bad arguments never reach the daemon");
        // A tap on an inert control: the CLI prints the observation id it names, and how
        // to use it (each command is a new process: nothing is remembered).
        let e = runner.run(catalog::tool("home").unwrap(), Map::new()).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::NoVisibleEffect);
        assert_eq!(e.message.matches("did not change").count(), 1, "{}", e.message);
        assert!(e.message.contains("--observation-id obs-9") && !e.message.contains("effect."), "{}", e.message);
    }

    #[test]
    fn each_failure_to_authenticate_or_pin_gets_its_own_next_step() {
        let step = |code: ToolCode| ToolError::new(code, "x").next_step();
        let unknown = step(ErrorCode::Unauthorized.into());
        assert!(unknown.contains("does not know this token") && unknown.contains("tether login"), "{unknown}");
        assert!(!unknown.contains("role"), "{unknown}");
        assert!(step(ErrorCode::PermissionDenied.into()).contains("role does not allow"));
        let pin = step(ToolCode::FingerprintMismatch);
        assert!(
            pin.contains("answered") && pin.contains("tether doctor") && !pin.contains("cannot be reached"),
            "{pin}"
        );
        assert!(step(ToolCode::Unavailable).contains("cannot be reached"));
    }

    #[tokio::test]
    async fn actions_and_waits_say_what_the_screen_did_and_hand_on_their_observation() {
        let script = Arc::new(Script::default());
        let runner = Runner::new(script.clone(), NoScreenshot::Refuse);
        runner.run(catalog::tool("screenshot").unwrap(), Map::new()).await.unwrap();
        let tap = catalog::tool("tap").unwrap();
        let out = runner.run(tap, args(json!({"x": 5, "y": 6, "return_image": "region"}))).await.unwrap();
        assert!(out.text.contains("changed in x 1 y 2 (30x40 px) and settled 412 ms"), "{}", out.text);
        assert_eq!(out.image, Some(("image/png".into(), "REGION".into())), "the region comes as an image");
        assert!(out.result.get("image").is_none());
        // The next pointer tool acts on the answer's observation: no screenshot between.
        let after = out.result["after_observation_id"].as_str().unwrap().to_string();
        assert!(out.text.contains(&after) && out.text.contains("no screenshot needed"), "{}", out.text);
        runner.run(tap, args(json!({"x": 7, "y": 8, "expect": "any"}))).await.unwrap();
        let calls = script.calls.lock_plain().clone();
        let last = &calls.last().unwrap().1;
        assert_eq!(last["observation_id"], json!(after));
        assert_eq!(last["expect"], "any", "expect goes to the daemon");
        // Nothing changed: the error says so, and what to look at.
        let e = runner.run(catalog::tool("home").unwrap(), Map::new()).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::NoVisibleEffect);
        // One statement: not "did not change" twice, never "still changing" (issue 31).
        assert_eq!(e.message.matches("did not change").count(), 1, "{}", e.message);
        assert!(!e.message.contains("still changing") && e.message.contains("obs-9"), "{}", e.message);
        assert!(e.next_step().contains("screenshot"));
        let unverified = runner.run(catalog::tool("double_tap").unwrap(), args(json!({"x": 1, "y": 1}))).await.unwrap();
        assert!(unverified.text.contains("Not verified"), "{}", unverified.text);
        // wait_for_change compares with the latest observation here; an expired one falls
        // back to the screen now.
        *runner.latest.lock_plain() = Some(Seen { observation_id: "obs-old".into(), width: 1, height: 1 });
        let w = runner.run(catalog::tool("wait_for_change").unwrap(), args(json!({"timeout_ms": 900}))).await.unwrap();
        assert!(w.text.starts_with("The screen changed after 120 ms."), "{}", w.text);
        let calls = script.calls.lock_plain().clone();
        let waits: Vec<&Map<String, Value>> =
            calls.iter().filter(|(m, _)| m == "wait_for_change").map(|(_, p)| p).collect();
        assert_eq!(waits.len(), 2);
        assert_eq!((waits[0]["observation_id"].as_str(), waits[1].get("observation_id")), (Some("obs-old"), None));
        assert_eq!(runner.latest.lock_plain().as_ref().unwrap().observation_id, "obs-w");
    }

    #[test]
    fn tools_are_listed_by_the_methods_a_role_may_call() {
        let view: Vec<String> =
            ["hello", "status", "screenshot", "preview", "task_messages", "wait_for_change", "wait_for_settle"]
                .map(String::from)
                .to_vec();
        let names: Vec<&str> = Runner::<Arc<Script>>::allowed(&view).iter().map(|t| t.name).collect();
        assert_eq!(names, ["screenshot", "wait_for_change", "wait_for_settle", "status"]);
        let operate: Vec<String> = ["status", "screenshot", "preview", "action"].map(String::from).to_vec();
        assert!(Runner::<Arc<Script>>::allowed(&operate).iter().any(|t| t.name == "tap"));
        let agent: Vec<String> = ["screenshot", "action", "task_confirm", "task_messages"].map(String::from).to_vec();
        let names: Vec<&str> = Runner::<Arc<Script>>::allowed(&agent).iter().map(|t| t.name).collect();
        assert!(names.contains(&"confirm") && names.contains(&"messages"), "{names:?}");
    }
}
