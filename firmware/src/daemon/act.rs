//! `screenshot`, `action`, `cancel` and `sim_state`: observations in, gestures out.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::limits;
use super::observations::{FrameRef, MAX_PREVIEW_BYTES, MAX_SCREENSHOT_BYTES, THUMBNAIL_EDGE};
use super::open_app::SPOTLIGHT_FOCUS;
use super::operations::{Begin, OperationState};
use super::play::{Abandoned, AbandonedStep};
use super::settle::{Answer, Sample, Until, WatchFor};
use super::task_methods::by;
use super::text::TextBasis;
use super::text_find;
use super::{Daemon, DaemonError, InputError, InputStep, Observation, Session};
use crate::device::geometry::{detect_active_rect, ObservationMapping, PixelRect};
use crate::device::hid::{named_key, HidReport, KeyStroke, UntypeableText};
use crate::device::input::{self, plan, Gesture, HidPoint};
use crate::device::video::image::observe;
use crate::device::video::luma::LumaThumb;
use crate::device::video::Frame;
use crate::protocol::params::{
    ActionParams, ActionSpec, Direction, Expect, Newlines, PreviewParams, ReturnImage, ScreenshotParams,
    DEFAULT_MAX_EDGE, DEFAULT_PREVIEW_EDGE,
};
use crate::protocol::task_params::BatchParams;
use crate::protocol::{Acting, ErrorBody};

/// A screenshot's answer on the wire: base64 of the PNG plus metadata.
const SCREENSHOT_ANSWER_BYTES: usize = MAX_SCREENSHOT_BYTES / 3 * 4 + 4096;
/// A preview's answer on the wire.
const PREVIEW_ANSWER_BYTES: usize = MAX_PREVIEW_BYTES / 3 * 4 + 4096;
/// A screenshot never shows a frame older than this: a frozen capture is not the phone.
pub const MAX_FRAME_AGE: Duration = Duration::from_secs(2);

impl Daemon {
    /// The newest frame no older than [`MAX_FRAME_AGE`], newer than `after` when given;
    /// waits up to `timeout` for one. Ends early on `cancel`.
    pub(super) async fn frame_after(
        &self,
        after: Option<u64>,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<Arc<Frame>, DaemonError> {
        let mut reader = self.inner.frames.clone();
        let deadline = tokio::time::Instant::now() + timeout;
        // Compressed capture is decoded on demand: wait for the picture captured now, not
        // whatever was decoded last.
        let present = reader.want_pixels();
        loop {
            if let Some(f) = reader.latest() {
                let current = f.sequence >= present || f.generation != reader.state().generation;
                if current && after.is_none_or(|a| f.sequence > a) && f.captured_at.elapsed() <= MAX_FRAME_AGE {
                    return Ok(f);
                }
            }
            tokio::select! {
                changed = tokio::time::timeout_at(deadline, reader.changed()) => {
                    if matches!(changed, Ok(true)) {
                        continue;
                    }
                    let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
                    return match reader.latest() {
                        Some(f) => Err(DaemonError::FrameTimeout { after: after.unwrap_or(f.sequence), timeout_ms }),
                        None => Err(DaemonError::NoFrame),
                    };
                }
                () = cancel.cancelled() => return Err(DaemonError::Cancelled),
            }
        }
    }

    /// The geometry epoch: observations taken under another one are stale.
    pub(super) fn geometry_epoch(&self) -> u64 {
        self.inner.phone.geometry_epoch()
    }

    /// The mapping from pictures to the phone changed: every observation is stale.
    pub(super) fn geometry_changed(&self, why: &'static str) {
        let epoch = self.inner.phone.next_geometry_epoch();
        tracing::info!(epoch, why, "geometry changed: observations are stale");
    }

    /// The phone's picture in `frame`, detected once per generation.
    pub(super) fn active_rect(&self, frame: &Frame) -> PixelRect {
        if let Some(fixed) = self.inner.options.active_rect {
            let full = PixelRect { x: 0, y: 0, width: frame.width, height: frame.height };
            if full.contains_rect(&fixed) && fixed.width > 0 && fixed.height > 0 {
                return fixed;
            }
            tracing::warn!(?fixed, frame = ?(frame.width, frame.height), "configured active_rect is outside the frame; detecting");
        }
        let cached = self.inner.phone.state().active;
        match cached {
            Some((generation, rect)) if generation == frame.generation => rect,
            _ => {
                // Detected outside the state's lock (it reads the whole frame); two callers
                // at a new generation both detect, with the same answer.
                let rect = detect_active_rect(frame);
                tracing::info!(generation = frame.generation, ?rect, "active rectangle detected");
                self.inner.phone.state().active = Some((frame.generation, rect));
                rect
            }
        }
    }

    /// A slot of screenshot work, or `BUSY` when too many are running and waiting or the
    /// output budget could not take the answer.
    async fn screenshot_slot(&self, answer_bytes: usize) -> Result<limits::WorkSlot, DaemonError> {
        if !self.inner.output.has_room(answer_bytes) {
            self.count_busy();
            return Err(DaemonError::Busy("too much output is queued for clients that are not reading"));
        }
        match self.inner.screenshots.enter().await {
            Some(slot) => Ok(slot),
            None => {
                self.count_busy();
                Err(DaemonError::Busy("too many screenshots are in flight"))
            }
        }
    }

    /// `screenshot`: a PNG of the phone and the observation actions may refer to. `task`
    /// is the task whose agent asks (its observations go stale when a human acts).
    pub(super) async fn screenshot(
        &self,
        p: &ScreenshotParams,
        task: Option<i64>,
        cancel: &CancellationToken,
    ) -> Result<Value, DaemonError> {
        let timeout =
            Duration::from_millis(p.timeout_ms.unwrap_or(if p.after_frame_id.is_some() { 1000 } else { 2000 }));
        let _slot = tokio::select! {
            slot = self.screenshot_slot(SCREENSHOT_ANSWER_BYTES) => slot?,
            () = cancel.cancelled() => return Err(DaemonError::Cancelled),
        };
        let frame = self.frame_after(p.after_frame_id, timeout, cancel).await?;
        let active = self.active_rect(&frame);
        let source = match p.region {
            None => active,
            Some(r) => {
                let region = PixelRect { x: r.x, y: r.y, width: r.width, height: r.height };
                active.sub_rect(&region).ok_or(DaemonError::RegionOutside { region, active })?
            }
        };
        let max_edge = p.max_edge.unwrap_or(DEFAULT_MAX_EDGE);
        let f = frame.clone();
        // While a task runs, its steps show what they acted on: a thumbnail too.
        let with_thumbnail = self.inner.tasks.busy().is_some();
        let samples = self.act_settings().samples;
        let (image, thumbnail, luma) = tokio::task::spawn_blocking(move || {
            let image = observe(&f, source, max_edge, MAX_SCREENSHOT_BYTES)?;
            let thumbnail = with_thumbnail
                .then(|| observe(&f, source, THUMBNAIL_EDGE, MAX_PREVIEW_BYTES).ok())
                .flatten()
                .map(|t| std::sync::Arc::new(t.png));
            // What `wait_for_change` with this observation compares the screen with.
            let luma = Arc::new(LumaThumb::of_rect(&f, active, samples));
            Ok::<_, crate::device::video::image::ImageError>((image, thumbnail, luma))
        })
        .await
        .map_err(|_| DaemonError::Worker("screenshot"))??;
        let mapping = ObservationMapping { active, source, image: (image.width, image.height) };
        let epoch = self.geometry_epoch();
        let at = FrameRef { generation: frame.generation, frame_id: frame.sequence, geometry_epoch: epoch };
        let obs = {
            let mut state = self.inner.phone.state();
            let observations = &mut state.observations;
            let obs = observations.insert(at, mapping, task, Instant::now());
            if let Some(t) = thumbnail {
                observations.set_thumbnail(&obs.id, t);
            }
            observations.set_luma(&obs.id, luma);
            obs
        };
        let text = match p.text {
            Some(true) => Some(self.screenshot_text(frame.clone(), &obs, cancel).await?),
            _ => None,
        };
        let mut shot = json!({
            "mime_type": "image/png",
            "data": base64::engine::general_purpose::STANDARD.encode(&image.png),
            "metadata": {
                "observation_id": obs.id,
                "generation": frame.generation,
                "geometry_epoch": epoch,
                "frame_id": frame.sequence,
                "source_rect": source,
                "active_rect": active,
                "source_size": {"width": frame.width, "height": frame.height},
                "image_size": {"width": image.width, "height": image.height},
                "frame_age_ms": u64::try_from(frame.captured_at.elapsed().as_millis()).unwrap_or(u64::MAX),
            }
        });
        if let (Some(text), Value::Object(m)) = (text, &mut shot) {
            m.insert("text".into(), text);
        }
        Ok(shot)
    }

    pub(super) async fn preview(&self, p: &PreviewParams, cancel: &CancellationToken) -> Result<Value, DaemonError> {
        // With no frame yet (just started, or signal back), wait briefly for the first one.
        let timeout = Duration::from_millis(p.timeout_ms.unwrap_or(if p.after_frame_id.is_some() { 0 } else { 2000 }));
        let _slot = tokio::select! {
            slot = self.screenshot_slot(PREVIEW_ANSWER_BYTES) => slot?,
            () = cancel.cancelled() => return Err(DaemonError::Cancelled),
        };
        let frame = match self.frame_after(p.after_frame_id, timeout, cancel).await {
            Ok(f) => f,
            Err(DaemonError::FrameTimeout { .. }) if p.after_frame_id.is_some() => {
                // Nothing newer: say so instead of re-sending the same picture.
                let latest = self.inner.frames.latest().ok_or(DaemonError::NoFrame)?;
                return Ok(json!({
                    "unchanged": true,
                    "generation": latest.generation,
                    "frame_id": latest.sequence,
                    "frame_age_ms": u64::try_from(latest.captured_at.elapsed().as_millis()).unwrap_or(u64::MAX),
                }));
            }
            Err(e) => return Err(e),
        };
        let active = self.active_rect(&frame);
        let max_edge = p.max_edge.unwrap_or(DEFAULT_PREVIEW_EDGE);
        let f = frame.clone();
        let image = tokio::task::spawn_blocking(move || observe(&f, active, max_edge, MAX_PREVIEW_BYTES))
            .await
            .map_err(|_| DaemonError::Worker("preview"))??;
        Ok(json!({
            "mime_type": "image/png",
            "data": base64::engine::general_purpose::STANDARD.encode(&image.png),
            "metadata": {
                "generation": frame.generation,
                "frame_id": frame.sequence,
                "source_rect": active,
                "image_size": {"width": image.width, "height": image.height},
                "frame_age_ms": u64::try_from(frame.captured_at.elapsed().as_millis()).unwrap_or(u64::MAX),
            }
        }))
    }

    /// The cache key of an operation id: scoped to the caller's identity, role and the
    /// task it acts for, so nobody receives another caller's cached result.
    ///
    /// A task's agent is its task token, whatever carries it: over HTTPS each request is a
    /// session of its own (`session:N`), so keying an agent by principal would forget
    /// its operation ids between requests, and a retried action would run twice.
    fn operation_key(&self, session: &Session, acting: Acting, operation_id: &str) -> String {
        match acting {
            Acting::Agent { task } => format!("agent/task:{task}/{operation_id}"),
            Acting::Human { .. } => {
                let who = session.principal().label();
                format!("{who}/{:?}/task:-/{operation_id}", session.caller.role)
            }
        }
    }

    /// Registers an operation; `Some` is the answer when it is already known (cached
    /// result, still in progress, or the id reused with other arguments).
    fn begin_operation(&self, key: &str, operation_id: &str, args: &Value) -> Option<Result<Value, DaemonError>> {
        match self.inner.phone.state().operations.begin(key, args, Instant::now()) {
            Begin::Conflict => Some(Err(DaemonError::OperationConflict { operation_id: operation_id.to_string() })),
            Begin::Known(OperationState::InProgress) => {
                Some(Ok(json!({"status": "in_progress", "operation_id": operation_id})))
            }
            Begin::Known(OperationState::Done(result)) => Some(result.map_err(DaemonError::ActionFailed)),
            Begin::Run => None,
        }
    }

    /// Caches an operation's outcome. Only outcomes: a success, or a failure after input
    /// may have reached the phone. A refusal or a failure before anything was sent is
    /// forgotten, so the same id may run once the caller is allowed or the phone is ready.
    pub(super) fn finish_operation(&self, key: &str, result: &Result<Value, DaemonError>) {
        let outcome = match result {
            Ok(v) => Some(Ok(v.clone())),
            Err(e) => {
                let body = ErrorBody::from(e);
                body.side_effect_possible.then_some(Err(body))
            }
        };
        match outcome {
            Some(cached) => self.inner.phone.state().operations.finish(key, cached),
            None => self.inner.phone.state().operations.forget(key),
        }
    }

    pub(super) async fn action(
        &self,
        session: &Session,
        acting: Acting,
        p: &ActionParams,
        cancel: &CancellationToken,
    ) -> Result<Value, DaemonError> {
        let args = json!({"observation_id": p.observation_id, "action": p.action});
        let key = self.operation_key(session, acting, &p.operation_id);
        if let Some(known) = self.begin_operation(&key, &p.operation_id, &args) {
            return known.map_err(|e| with_operation(e, &p.operation_id));
        }
        let started = Instant::now();
        let verify = p.verify.unwrap_or(true);
        let journal = JournalAs {
            sample: verify,
            tool: "action",
            args: args.clone(),
            operation: (key.clone(), p.operation_id.clone()),
            started,
        };
        // `tap_text` is a tap at its text's centre, found before any input.
        let target = match p.action.text_query() {
            Some(_) => match self.resolve_tap_text(acting, p.observation_id.as_deref(), &p.action, cancel).await {
                Ok(target) => Some(target),
                Err(e) => {
                    let result = Err(DaemonError::ActionFailed(e.action_body(&p.operation_id)));
                    self.count_action(&result);
                    self.record_step(session, acting, acting.task(), "action", &args, &result, started.elapsed(), None)
                        .await;
                    self.finish_operation(&key, &result);
                    return result;
                }
            },
            None => None,
        };
        let (observation_id, action) = match &target {
            Some(t) => (Some(t.observation_id.as_str()), &t.action),
            None => (p.observation_id.as_deref(), &p.action),
        };
        // The fresh observation is read too when the caller works with text.
        let before_text = observation_id.and_then(|id| self.observation_text(id));
        let wants_text =
            target.is_some() || p.expect_text.is_some() || p.expect_no_text.is_some() || before_text.is_some();
        let basis = wants_text.then_some(TextBasis { before: before_text });
        let run = self.run_action(session, acting, observation_id, action, journal, cancel).await;
        let task = run.task;
        let result = match run.outcome {
            Ok(reports) => {
                let newest = self.inner.frames.newest_captured();
                let mut out = serde_json::Map::new();
                out.insert("status".into(), "submitted".into());
                out.insert("operation_id".into(), p.operation_id.clone().into());
                out.insert("reports".into(), reports.into());
                out.insert("generation".into(), newest.map(|f| f.generation).into());
                out.insert("after_frame_id".into(), newest.map(|f| f.sequence).into());
                let spec = VerifySpec {
                    expect: p.expect.unwrap_or_else(|| p.action.default_expect()),
                    quiet_ms: p.quiet_ms,
                    timeout_ms: p.settle_timeout_ms,
                    return_image: p.return_image.unwrap_or_default(),
                };
                if let Some(t) = &target {
                    out.insert("text_target".into(), t.described.clone());
                }
                let mut verified =
                    self.verified(verify.then_some(&spec), acting, &run, reports, basis.as_ref(), cancel).await;
                verified = verified.and_then(|fields| self.check_expected_text(p, fields));
                let checked = verify && run.baseline.is_some();
                match &p.action {
                    ActionSpec::OpenApp { name } if checked => {
                        let spotlight = run.spotlight.as_ref();
                        verified =
                            self.check_opened(session, acting, name, spotlight, verified, run.image_edge, cancel).await;
                    }
                    ActionSpec::Home {} if checked && verified.as_ref().is_ok_and(|f| f["settled"] == true) => {
                        if let Ok(Some(now)) = self.sample_now(cancel).await {
                            self.remember_home(now.thumb);
                        }
                    }
                    _ => {}
                }
                verified.map(|fields| {
                    out.extend(fields);
                    out.insert("duration_ms".into(), millis(started.elapsed()).into());
                    Value::Object(out)
                })
            }
            Err(e) => Err(e),
        };
        let result = result.map_err(|e| DaemonError::ActionFailed(e.action_body(&p.operation_id)));
        self.count_action(&result);
        let thumbnail = self.step_thumbnail(task, p.observation_id.as_deref());
        self.record_step(session, acting, task, "action", &args, &result, started.elapsed(), thumbnail).await;
        self.finish_operation(&key, &result);
        result
    }

    /// The verification fields of a finished run (`spec` `None`: not asked for).
    async fn verified(
        &self,
        spec: Option<&VerifySpec>,
        acting: Acting,
        run: &ActionRun,
        reports: usize,
        text: Option<&TextBasis>,
        cancel: &CancellationToken,
    ) -> Result<serde_json::Map<String, Value>, DaemonError> {
        let mut out = serde_json::Map::new();
        out.insert("verified".into(), false.into());
        let Some(spec) = spec else {
            return Ok(out);
        };
        let Some(baseline) = &run.baseline else {
            out.insert("why".into(), "no picture to compare with (no capture or no signal)".into());
            return Ok(out);
        };
        match self.verify_effect(spec, acting, baseline, run, text, cancel).await {
            // Cancelled while watching: the input was sent all the same.
            Err(DaemonError::Cancelled) => Err(DaemonError::Input(InputError::Cancelled { reports_sent: reports })),
            other => other,
        }
    }

    /// Watches the screen after the input of `run` until it settles and answers what
    /// changed, or `NO_VISIBLE_EFFECT`/`UNEXPECTED_CHANGE` when that is not what `p`
    /// expected.
    async fn verify_effect(
        &self,
        p: &VerifySpec,
        acting: Acting,
        baseline: &Sample,
        run: &ActionRun,
        text: Option<&TextBasis>,
        cancel: &CancellationToken,
    ) -> Result<serde_json::Map<String, Value>, DaemonError> {
        let settings = self.act_settings();
        let quiet = Duration::from_millis(p.quiet_ms.unwrap_or(settings.quiet_ms));
        let timeout_ms = p.timeout_ms.unwrap_or(settings.timeout_ms);
        let rules = self.change_rules(&baseline.active, &moved_pointer(run.pointer_at_baseline, run.pointer_end));
        let expect = p.expect;
        // Expecting a change, a quiet screen is no answer yet: the change may come late (a
        // page loading); wait for it up to the timeout, then for it to settle.
        let until = match expect {
            Expect::Change => Until::Changed { settle: true },
            Expect::Any | Expect::NoChange => Until::Settled,
        };
        let what = WatchFor { quiet, timeout: Duration::from_millis(timeout_ms), until };
        let watched = self.watch(baseline, &rules, run.ended, what, cancel).await?;
        let answer = Answer {
            from: run.ended,
            image_edge: run.image_edge,
            task: acting.task(),
            return_image: p.return_image,
            rules: &rules,
            text: text.map(|t| (t, cancel)),
        };
        let mut fields = self.answer(&watched, answer).await?;
        fields.insert("expect".into(), json!(expect));
        match (expect, watched.changed.is_some()) {
            (Expect::Change, false) => Err(DaemonError::NoVisibleEffect { timeout_ms, effect: Box::new(fields) }),
            (Expect::NoChange, true) => Err(DaemonError::UnexpectedChange { effect: Box::new(fields) }),
            _ => Ok(fields),
        }
    }

    /// `expect_text` / `expect_no_text`, checked on the text of the settled screen (the
    /// answer's fresh observation). The input was sent: a failure carries the effect.
    fn check_expected_text(
        &self,
        p: &ActionParams,
        fields: serde_json::Map<String, Value>,
    ) -> Result<serde_json::Map<String, Value>, DaemonError> {
        if p.expect_text.is_none() && p.expect_no_text.is_none() {
            return Ok(fields);
        }
        let read = fields.get("after_observation_id").and_then(Value::as_str).and_then(|id| self.observation_text(id));
        let Some((text, _)) = read else {
            // Not read (no picture, or the reader failed): the expectation cannot be checked.
            let why = fields.get("text_error").and_then(Value::as_str).unwrap_or("no picture of the settled screen");
            let mut body = ErrorBody::from(&DaemonError::Ocr(crate::device::ocr::OcrError::WorkerDied(why.into())));
            body.message = format!(
                "the input was sent, but the settled screen could not be read to check the expected text: {why}"
            );
            body.side_effect_possible = true;
            body.effect = Some(Box::new(Value::Object(fields)));
            return Err(DaemonError::ActionFailed(body));
        };
        if let Some(t) = &p.expect_text {
            if !text_find::shows(&text, t) {
                return Err(DaemonError::ExpectedTextMissing { text: t.clone(), effect: Box::new(fields) });
            }
        }
        if let Some(t) = &p.expect_no_text {
            if text_find::shows(&text, t) {
                return Err(DaemonError::UnexpectedText { text: t.clone(), effect: Box::new(fields) });
            }
        }
        Ok(fields)
    }

    /// The thumbnail a task's step records: the screenshot its coordinates were read in.
    fn step_thumbnail(&self, task: Option<i64>, observation: Option<&str>) -> Option<Vec<u8>> {
        task?;
        let observation = observation?;
        let png = self.inner.phone.state().observations.thumbnail(observation)?;
        Some(png.as_ref().clone())
    }

    /// `batch`: the sub-steps one by one, each admitted on its own, so a pause or takeover
    /// takes effect between them (and interrupts the one running). Stops at the first
    /// failure and says how far it got.
    pub(super) async fn batch(
        &self,
        session: &Session,
        acting: Acting,
        p: &BatchParams,
        cancel: &CancellationToken,
    ) -> Result<Value, DaemonError> {
        let args = json!({"observation_id": p.observation_id, "actions": p.actions});
        let key = self.operation_key(session, acting, &p.operation_id);
        if let Some(known) = self.begin_operation(&key, &p.operation_id, &args) {
            return known.map_err(|e| with_operation(e, &p.operation_id));
        }
        let started = Instant::now();
        let verify = p.verify.unwrap_or(true);
        let mut done = 0usize;
        let mut reports = 0usize;
        let mut failure = None;
        // The whole batch is verified once, from before its first input to after its last.
        let mut whole: Option<ActionRun> = None;
        for (i, action) in p.actions.iter().enumerate() {
            let step_started = Instant::now();
            let sub_args = json!({"observation_id": p.observation_id, "action": action, "index": i});
            let journal = JournalAs {
                sample: verify && i == 0,
                tool: "batch",
                args: sub_args.clone(),
                operation: (key.clone(), p.operation_id.clone()),
                started: step_started,
            };
            let run = self.run_action(session, acting, p.observation_id.as_deref(), action, journal, cancel).await;
            let (outcome, task) = (run.outcome, run.task);
            let sub = match &outcome {
                Ok(n) => Ok(json!({"status": "submitted", "reports": n})),
                Err(e) => Err(DaemonError::ActionFailed(ErrorBody::from(e))),
            };
            let thumbnail = self.step_thumbnail(task, p.observation_id.as_deref());
            self.record_step(session, acting, task, "batch", &sub_args, &sub, step_started.elapsed(), thumbnail).await;
            match outcome {
                Ok(n) => {
                    done += 1;
                    reports += n;
                    let w = whole.get_or_insert_with(|| ActionRun {
                        outcome: Ok(0),
                        task,
                        baseline: run.baseline,
                        ended: run.ended,
                        pointer_before: run.pointer_before,
                        pointer_at_baseline: run.pointer_at_baseline,
                        pointer_end: run.pointer_end,
                        image_edge: run.image_edge,
                        spotlight: None,
                    });
                    w.pointer_end = run.pointer_end;
                    w.ended = run.ended;
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let result = match (failure, whole) {
            (None, Some(whole)) => {
                let spec = VerifySpec {
                    expect: p.expect.unwrap_or(Expect::Any),
                    quiet_ms: p.quiet_ms,
                    timeout_ms: p.settle_timeout_ms,
                    return_image: p.return_image.unwrap_or_default(),
                };
                let verified = self.verified(verify.then_some(&spec), acting, &whole, reports, None, cancel).await;
                match verified {
                    Ok(fields) => {
                        let mut out = serde_json::Map::new();
                        out.insert("status".into(), "submitted".into());
                        out.insert("operation_id".into(), p.operation_id.clone().into());
                        out.insert("completed".into(), done.into());
                        out.insert("reports".into(), reports.into());
                        out.extend(fields);
                        out.insert("duration_ms".into(), millis(started.elapsed()).into());
                        Ok(Value::Object(out))
                    }
                    Err(e) => Err(DaemonError::ActionFailed(e.action_body(&p.operation_id))),
                }
            }
            // Validation keeps batches non-empty: no failure means a finished first action.
            (None, None) => Ok(json!({"status": "submitted", "operation_id": p.operation_id, "completed": 0})),
            (Some(e), _) => {
                let mut body = e.action_body(&p.operation_id);
                if done > 0 {
                    body.side_effect_possible = true;
                    body.status = Some("outcome_unknown");
                }
                body.message = format!("{} (after {done} of {} actions)", body.message, p.actions.len());
                Err(DaemonError::ActionFailed(body))
            }
        };
        self.count_action(&result);
        self.finish_operation(&key, &result);
        result
    }

    /// Plans and runs one action: the reports sent, and the task it counted for whenever
    /// it was admitted (also when it then failed). With `journal.sample`, the screen is sampled
    /// just before the input (with the device held), the baseline of verification.
    async fn run_action(
        &self,
        session: &Session,
        acting: Acting,
        observation_id: Option<&str>,
        action: &ActionSpec,
        journal: JournalAs,
        cancel: &CancellationToken,
    ) -> ActionRun {
        let mut run = ActionRun {
            outcome: Ok(0),
            task: None,
            baseline: None,
            ended: Instant::now(),
            pointer_before: None,
            pointer_at_baseline: None,
            pointer_end: None,
            image_edge: None,
            spotlight: None,
        };
        let planned = match self.plan_action(acting, observation_id, action) {
            Ok(planned) => planned,
            Err(e) => {
                run.outcome = Err(e);
                return run;
            }
        };
        run.image_edge = planned.image_edge;
        if let (ActionSpec::OpenApp { name }, Some(task)) = (action, acting.task()) {
            if let Err(e) = self.check_app_scope(session, task, name, cancel).await {
                run.outcome = Err(e);
                return run;
            }
        }
        let mut turn = match self.acquire_device(session, acting, observation_id, cancel).await {
            Ok(turn) => turn,
            Err(e) => {
                run.outcome = Err(e);
                return run;
            }
        };
        run.task = turn.task();
        run.pointer_before = self.last_pointer();
        // If this request ends before its input does, the daemon journals it instead.
        let abandoned = Abandoned {
            step: run.task.map(|task| AbandonedStep {
                task,
                tool: journal.tool,
                args: journal.args,
                caller: by(session, acting),
                started: journal.started,
            }),
            operation: Some(journal.operation),
        };
        // A pointer action glides first and presses once the glide is over; its baseline is
        // the screen then, the pointer resting at its target (see [`ActionRun::pointer_at_baseline`]).
        // Not being able to look never stops the input: the answer says it was not verified.
        let glide = journal.sample.then(|| first_press(&planned.steps)).flatten().filter(|&at| at > 0);
        let spotlight = journal.sample.then_some(planned.spotlight_at).flatten();
        let result = match (glide, spotlight) {
            (_, Some(at)) => {
                run.baseline = self.sample_now(cancel).await.ok().flatten();
                run.pointer_at_baseline = run.pointer_before;
                let (result, opened) = turn
                    .run_paused(&planned.steps, at, abandoned, |typed_from| self.sample_after(typed_from, cancel))
                    .await;
                run.spotlight = opened.and_then(|s| s.ok().flatten());
                result
            }
            (Some(at), None) => {
                let (result, baseline) =
                    turn.run_paused(&planned.steps, at, abandoned, |glided| self.sample_after(glided, cancel)).await;
                run.baseline = baseline.and_then(|b| b.ok().flatten());
                run.pointer_at_baseline = planned.pointer.first().copied();
                result
            }
            (None, None) => {
                if journal.sample {
                    run.baseline = self.sample_now(cancel).await.ok().flatten();
                }
                run.pointer_at_baseline = run.pointer_before;
                turn.run(&planned.steps, abandoned).await
            }
        };
        run.pointer_end = planned.pointer.last().copied().or(run.pointer_at_baseline);
        // Settling is timed from the last report, not from the waits planned after it.
        let trailing: Duration = planned
            .steps
            .iter()
            .rev()
            .take_while(|s| matches!(s, InputStep::Wait(_)))
            .map(|s| match s {
                InputStep::Wait(d) => *d,
                InputStep::Report(_) => Duration::ZERO,
            })
            .sum();
        let now = Instant::now();
        run.ended = now.checked_sub(trailing).unwrap_or(now);
        if let (true, Some(task)) = (turn.is_human_in_task(), run.task) {
            // A human drove during the task: what its agent saw before is no longer true.
            self.inner.phone.state().observations.invalidate_task(task, "a human used the phone during the task");
        }
        drop(turn);
        if result.is_err() {
            // The pointer may have stopped anywhere: find it again by homing next time.
            if let Some(relative) = self.inner.phone.state().relative.as_mut() {
                relative.forget();
            }
        }
        match (&result, planned.pointer.last()) {
            (Ok(_), Some(&last)) => self.set_last_pointer(Some(last)),
            (Err(_), Some(_)) => self.set_last_pointer(None),
            _ => {}
        }
        run.outcome = result;
        run
    }

    /// The observation `id`, if it may still authorize an action of `acting` now.
    pub(super) fn check_observation(&self, id: &str, acting: Acting) -> Result<Observation, DaemonError> {
        let generation = self.inner.frames.state().generation;
        let epoch = self.geometry_epoch();
        let observation = self.inner.phone.state().observations.get(id, generation, epoch, Instant::now())?;
        observation.authorizes(acting)?;
        Ok(observation)
    }

    /// The report steps of one action. A given observation is checked whatever the
    /// action (a key press on an expired screenshot is refused like a tap).
    fn plan_action(
        &self,
        acting: Acting,
        observation_id: Option<&str>,
        action: &ActionSpec,
    ) -> Result<Planned, DaemonError> {
        let mapping = match observation_id {
            Some(id) => Some(self.check_observation(id, acting)?.mapping),
            None => None,
        };
        let image_edge = mapping.map(|m| m.image.0.max(m.image.1));
        // Where the pointer goes, normalized, in order (masked when verifying).
        let path = std::cell::RefCell::new(Vec::new());
        let point = |x: f64, y: f64| -> Result<HidPoint, DaemonError> {
            let m = mapping.ok_or(DaemonError::MissingObservation)?;
            let n = m.to_normalized(x, y)?;
            path.borrow_mut().push(n);
            let (hx, hy) = self.calibrated_hid(n, &m.active);
            Ok(HidPoint::new(hx, hy))
        };
        let steps = self.plan_steps(action, mapping, &point)?;
        let mut pointer = path.into_inner();
        if matches!(action, ActionSpec::AppSwitcher {}) {
            pointer = vec![(0.5, 32700.0 / 32768.0), (0.5, 19000.0 / 32768.0)];
        }
        // `open_app` stops once Spotlight had time to open: its picture then tells whether
        // Spotlight is gone at the end (on a phone).
        let spotlight_at = matches!(action, ActionSpec::OpenApp { .. })
            .then(|| steps.iter().position(|s| *s == InputStep::Wait(SPOTLIGHT_FOCUS)).map(|i| i + 1))
            .flatten();
        Ok(Planned { steps, pointer, image_edge, spotlight_at })
    }

    /// The report steps of `action`; `point` maps observation pixels to HID units.
    fn plan_steps(
        &self,
        action: &ActionSpec,
        mapping: Option<ObservationMapping>,
        point: &dyn Fn(f64, f64) -> Result<HidPoint, DaemonError>,
    ) -> Result<Vec<InputStep>, DaemonError> {
        let t = &self.inner.timings;
        let gesture = match action {
            ActionSpec::Move { x, y } => Gesture::Move(point(*x, *y)?),
            ActionSpec::Tap { x, y } => Gesture::Tap(point(*x, *y)?),
            ActionSpec::DoubleTap { x, y } => Gesture::DoubleTap(point(*x, *y)?),
            ActionSpec::LongPress { x, y } => Gesture::LongPress(point(*x, *y)?),
            ActionSpec::Drag { path, duration_ms } => Gesture::Drag {
                path: path.iter().map(|pt| point(pt.x, pt.y)).collect::<Result<_, _>>()?,
                duration: Duration::from_millis(duration_ms.unwrap_or(t.swipe_ms)),
            },
            ActionSpec::Scroll { x, y, direction, distance } => {
                let (w, h) = mapping.map(|m| m.image).unwrap_or((1, 1));
                let (w, h) = (f64::from(w), f64::from(h));
                let d = distance.unwrap_or(h / 3.0);
                // Revealing content below means the finger moves up, and so on.
                let (ex, ey) = match direction {
                    Direction::Down => (*x, y - d),
                    Direction::Up => (*x, y + d),
                    Direction::Right => (x - d, *y),
                    Direction::Left => (x + d, *y),
                };
                let (ex, ey) = (ex.clamp(0.0, w - 1.0), ey.clamp(0.0, h - 1.0));
                Gesture::Drag {
                    path: vec![point(*x, *y)?, point(ex, ey)?],
                    duration: Duration::from_millis(t.swipe_ms),
                }
            }
            ActionSpec::KeyPress { key } => Gesture::Key(self.key_stroke(key)?),
            ActionSpec::Hotkey { keys } => {
                let mut modifiers = 0u8;
                let mut main: Option<KeyStroke> = None;
                for k in keys {
                    match named_key(k) {
                        Some((0, m)) => modifiers |= m,
                        _ if main.is_none() => main = Some(self.key_stroke(k)?),
                        _ => return Err(DaemonError::BadHotkey),
                    }
                }
                let main = main.ok_or(DaemonError::BadHotkey)?;
                Gesture::Key(KeyStroke { usage: main.usage, modifiers: modifiers | main.modifiers })
            }
            ActionSpec::TypeText { text, newlines } => {
                // Refused before anything is typed: a Return mid-text in a single-line field
                // ends editing and the rest would be lost while the answer said "typed".
                let text = match newlines.unwrap_or_default() {
                    Newlines::Refuse if Newlines::has_line_break(text) => return Err(DaemonError::TextHasNewline),
                    Newlines::Refuse => std::borrow::Cow::Borrowed(text.as_str()),
                    Newlines::Return => std::borrow::Cow::Owned(Newlines::as_returns(text)),
                };
                Gesture::Type(self.inner.keymap.strokes(&text)?)
            }
            ActionSpec::Home {} => Gesture::Key(input::HOME),
            ActionSpec::Spotlight {} => Gesture::Key(input::SPOTLIGHT),
            ActionSpec::Back {} => Gesture::Key(input::BACK),
            ActionSpec::AppSwitcher {} => Gesture::Drag {
                path: vec![HidPoint::new(16384, 32700), HidPoint::new(16384, 19000)],
                duration: Duration::from_millis(800),
            },
            ActionSpec::Consumer { key } => Gesture::Consumer(key.usage()),
            // Resolved into a tap before planning (`Daemon::resolve_tap_text`).
            ActionSpec::TapText { .. } => return Err(DaemonError::Worker("tap_text resolution")),
            ActionSpec::OpenApp { name } => {
                // Spotlight, a moment for its field to take focus, the name, Return.
                let typed = self.inner.keymap.strokes(&format!("{name}\n"))?;
                let mut steps = plan(&Gesture::Key(input::SPOTLIGHT), t);
                steps.push(InputStep::Wait(SPOTLIGHT_FOCUS));
                steps.extend(plan(&Gesture::Type(typed), t));
                return Ok(steps);
            }
        };
        if let Some(relative) = self.inner.phone.state().relative.as_mut() {
            return Ok(relative.plan(&gesture, t));
        }
        if matches!(action, ActionSpec::AppSwitcher {}) {
            return Ok(input::app_switcher(t));
        }
        Ok(plan(&gesture, t))
    }

    /// A key by name, or a single character typed with the phone's layout.
    fn key_stroke(&self, key: &str) -> Result<KeyStroke, DaemonError> {
        if let Some((usage, modifiers)) = named_key(key).filter(|(u, _)| *u != 0) {
            return Ok(KeyStroke { usage, modifiers });
        }
        let mut chars = key.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => self
                .inner
                .keymap
                .stroke(c)
                .ok_or_else(|| UntypeableText { layout: self.inner.keymap.layout(), chars: vec![c] }.into()),
            _ => Err(DaemonError::UnknownKey(key.chars().take(64).collect())),
        }
    }
}

/// A planned action: its steps, where it puts the pointer (normalized, in order), and
/// the longest edge of the screenshot its coordinates refer to.
struct Planned {
    steps: Vec<InputStep>,
    pointer: Vec<(f64, f64)>,
    image_edge: Option<u32>,
    /// `open_app`: the index of the first step after Spotlight opened.
    spotlight_at: Option<usize>,
}

/// How an action runs: whether it samples the screen first (the baseline of verification),
/// and how its step is journalled and cached, for the daemon to do it when the request is
/// gone before its input ended.
struct JournalAs {
    sample: bool,
    tool: &'static str,
    args: Value,
    /// (cache key, operation id).
    operation: (String, String),
    started: Instant,
}

/// How to verify an action or a batch: what the caller asked, defaults filled in.
struct VerifySpec {
    expect: Expect,
    quiet_ms: Option<u64>,
    timeout_ms: Option<u64>,
    return_image: ReturnImage,
}

/// One action's run, with what verifying it needs.
struct ActionRun {
    /// The reports sent, or why not.
    outcome: Result<usize, DaemonError>,
    /// The task it counted for.
    task: Option<i64>,
    /// The screen just before the input, when asked and a picture was there.
    baseline: Option<Sample>,
    /// When the last report was sent.
    ended: Instant,
    /// Where the pointer was before the input (normalized), if known.
    pointer_before: Option<(f64, f64)>,
    /// Where it was when the baseline was sampled: a pointer action's target (the
    /// baseline is sampled once it glided there), else where it was before.
    ///
    /// Why a pointer that is in both pictures at the same place is not masked: DESIGN
    /// says the pointer may darken (or grow) while pressed and may auto-hide when idle.
    /// The baseline is sampled after the glide, before the press, and the answer's pictures
    /// are watched after the last release: the pointer is unpressed in both, so it looks
    /// the same in both, and any change under it is the phone's. A hidden pointer is woken
    /// by the action's own move before the baseline, so it is visible in both. What could
    /// still differ is a pointer hiding by itself during the watch, seconds after the last
    /// pointer input; a watch after a pointer action ends well within that. Masking the
    /// pointer instead hides exactly where small controls show their effect (a tick, a
    /// heart, a stepper's digit), which answered NO_VISIBLE_EFFECT for taps that worked.
    pointer_at_baseline: Option<(f64, f64)>,
    /// Where the input left it (the last point it put it at), else `pointer_at_baseline`.
    pointer_end: Option<(f64, f64)>,
    /// The longest edge of the screenshot the action's coordinates refer to.
    image_edge: Option<u32>,
    /// `open_app`: the screen once Spotlight had opened.
    spotlight: Option<Sample>,
}

/// The index of the first step that presses a pointer button: where a pointer action's
/// glide ends (`None`: it presses nothing).
fn first_press(steps: &[InputStep]) -> Option<usize> {
    steps.iter().position(|s| match s {
        InputStep::Report(HidReport::Pointer(p)) => p.buttons() != 0,
        InputStep::Report(HidReport::Mouse(m)) => m.buttons != 0,
        _ => false,
    })
}

/// Where the pointer must be masked: where it is in one picture and not in the other
/// (the start and end of a drag, a move's two ends), never where it rests in both.
fn moved_pointer(at_baseline: Option<(f64, f64)>, end: Option<(f64, f64)>) -> Vec<(f64, f64)> {
    match (at_baseline, end) {
        (Some(a), Some(b)) if (a.0 - b.0).abs() < 1e-9 && (a.1 - b.1).abs() < 1e-9 => Vec::new(),
        (a, b) => a.into_iter().chain(b).collect(),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `e` as an action failure carrying `operation_id` (conflicts and cached failures).
fn with_operation(e: DaemonError, operation_id: &str) -> DaemonError {
    DaemonError::ActionFailed(e.action_body(operation_id))
}
