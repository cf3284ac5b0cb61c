//! `screenshot`, `action`, `cancel` and `sim_state`: observations in, gestures out.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::operations::{Begin, OperationState};
use super::{Daemon, DaemonError, InputStep, Session};
use crate::device::geometry::{detect_active_rect, ObservationMapping, PixelRect};
use crate::device::hid::{named_key, KeyStroke, UntypeableText};
use crate::device::input::{self, plan, Gesture, HidPoint};
use crate::device::video::image::observe;
use crate::device::video::Frame;
use crate::protocol::params::{
    ActionParams, ActionSpec, Direction, PreviewParams, ScreenshotParams, DEFAULT_MAX_EDGE, DEFAULT_PREVIEW_EDGE,
};
use crate::protocol::task_params::BatchParams;
use crate::protocol::{ErrorBody, RequestId};

/// Largest PNG returned by `screenshot`.
pub const MAX_SCREENSHOT_BYTES: usize = 1 << 20;
/// Largest PNG returned by `preview`.
pub const MAX_PREVIEW_BYTES: usize = 256 << 10;

impl Daemon {
    /// The newest frame, waiting up to `timeout` for one newer than `after`.
    pub(super) async fn frame_after(&self, after: Option<u64>, timeout: Duration) -> Result<Arc<Frame>, DaemonError> {
        let mut reader = self.inner.frames.clone();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(f) = reader.latest() {
                if after.is_none_or(|a| f.sequence > a) {
                    return Ok(f);
                }
            }
            match tokio::time::timeout_at(deadline, reader.changed()).await {
                Ok(true) => {}
                _ => {
                    return match (reader.latest(), after) {
                        (Some(_), Some(a)) => Err(DaemonError::InvalidArgument(format!(
                            "no frame newer than {a} arrived within the timeout"
                        ))),
                        _ => Err(DaemonError::NoFrame),
                    }
                }
            }
        }
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
        let mut cache = self.inner.active.lock().unwrap_or_else(|p| p.into_inner());
        match *cache {
            Some((generation, rect)) if generation == frame.generation => rect,
            _ => {
                let rect = detect_active_rect(frame);
                tracing::info!(generation = frame.generation, ?rect, "active rectangle detected");
                *cache = Some((frame.generation, rect));
                rect
            }
        }
    }

    pub(super) async fn screenshot(&self, p: &ScreenshotParams) -> Result<Value, DaemonError> {
        let timeout =
            Duration::from_millis(p.timeout_ms.unwrap_or(if p.after_frame_id.is_some() { 1000 } else { 2000 }));
        let frame = self.frame_after(p.after_frame_id, timeout).await?;
        let active = self.active_rect(&frame);
        let source = match p.region {
            None => active,
            Some(r) => {
                let relative = PixelRect { x: r.x, y: r.y, width: r.width, height: r.height };
                active.sub_rect(&relative).ok_or_else(|| {
                    DaemonError::InvalidArgument(format!(
                        "region {}x{}+{}+{} is outside the phone's {}x{} picture",
                        r.width, r.height, r.x, r.y, active.width, active.height
                    ))
                })?
            }
        };
        let max_edge = p.max_edge.unwrap_or(DEFAULT_MAX_EDGE);
        let f = frame.clone();
        let image = tokio::task::spawn_blocking(move || observe(&f, source, max_edge, MAX_SCREENSHOT_BYTES))
            .await
            .map_err(|_| DaemonError::InvalidArgument("screenshot worker failed".into()))??;
        let mapping = ObservationMapping { active, source, image: (image.width, image.height) };
        let obs = self.lock_observations().insert(frame.generation, frame.sequence, mapping, Instant::now());
        Ok(json!({
            "mime_type": "image/png",
            "data": base64::engine::general_purpose::STANDARD.encode(&image.png),
            "metadata": {
                "observation_id": obs.id,
                "generation": frame.generation,
                "frame_id": frame.sequence,
                "source_rect": source,
                "active_rect": active,
                "source_size": {"width": frame.width, "height": frame.height},
                "image_size": {"width": image.width, "height": image.height},
                "frame_age_ms": u64::try_from(frame.captured_at.elapsed().as_millis()).unwrap_or(u64::MAX),
            }
        }))
    }

    pub(super) async fn preview(&self, p: &PreviewParams) -> Result<Value, DaemonError> {
        // With no frame yet (just started, or signal back), wait briefly for the first one.
        let timeout = Duration::from_millis(p.timeout_ms.unwrap_or(if p.after_frame_id.is_some() { 0 } else { 2000 }));
        let frame = match self.frame_after(p.after_frame_id, timeout).await {
            Ok(f) => f,
            Err(DaemonError::InvalidArgument(_)) => {
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
            .map_err(|_| DaemonError::InvalidArgument("preview worker failed".into()))??;
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

    /// Registers an operation; `Some` is the answer when it is already known (cached
    /// result, still in progress, or the id reused with other arguments).
    fn begin_operation(&self, id: &str, args: &Value) -> Option<Result<Value, DaemonError>> {
        match self.lock_operations().begin(id, args, Instant::now()) {
            Begin::Conflict => Some(Err(DaemonError::OperationConflict { operation_id: id.to_string() })),
            Begin::Known(OperationState::InProgress) => Some(Ok(json!({"status": "in_progress", "operation_id": id}))),
            Begin::Known(OperationState::Done(result)) => Some(result.map_err(DaemonError::ActionFailed)),
            Begin::Run => None,
        }
    }

    pub(super) async fn action(
        &self,
        session: &Session,
        request: RequestId,
        token: Option<&str>,
        p: &ActionParams,
    ) -> Result<Value, DaemonError> {
        let args = json!({"observation_id": p.observation_id, "action": p.action});
        if let Some(known) = self.begin_operation(&p.operation_id, &args) {
            return known;
        }
        let started = Instant::now();
        let outcome = self.run_action(session, request, token, &p.observation_id, &p.action).await;
        let task = outcome.as_ref().ok().and_then(|(_, a)| *a);
        let result = outcome.map(|(reports, _)| {
            let latest = self.inner.frames.latest();
            json!({
                "status": "submitted",
                "operation_id": p.operation_id,
                "reports": reports,
                "duration_ms": u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                "generation": latest.as_ref().map(|f| f.generation),
                "after_frame_id": latest.as_ref().map(|f| f.sequence),
            })
        });
        let result = result.map_err(|e| match e {
            // Task refusals keep their own codes (nothing was sent).
            DaemonError::Task(e) => DaemonError::Task(e),
            e => DaemonError::ActionFailed(action_error(&e)),
        });
        self.record_step(session, token, task, "action", &args, &result, started.elapsed()).await;
        self.finish_operation(&p.operation_id, &result);
        result
    }

    /// Caches an operation's result; a task refusal is not an outcome (nothing was sent),
    /// so it is forgotten and the same id may run once allowed.
    fn finish_operation(&self, id: &str, result: &Result<Value, DaemonError>) {
        match result {
            Err(DaemonError::Task(_)) => self.lock_operations().forget(id),
            _ => {
                let cached = match result {
                    Ok(v) => Ok(v.clone()),
                    Err(e) => Err(ErrorBody::from(e)),
                };
                self.lock_operations().finish(id, cached);
            }
        }
    }

    /// `batch`: the sub-steps one by one, each admitted on its own, so a pause or takeover
    /// takes effect between them. Stops at the first failure and says how far it got.
    pub(super) async fn batch(
        &self,
        session: &Session,
        request: RequestId,
        token: Option<&str>,
        p: &BatchParams,
    ) -> Result<Value, DaemonError> {
        let args = json!({"observation_id": p.observation_id, "actions": p.actions});
        if let Some(known) = self.begin_operation(&p.operation_id, &args) {
            return known;
        }
        let started = Instant::now();
        let mut done = 0usize;
        let mut reports = 0usize;
        let mut failure = None;
        for (i, action) in p.actions.iter().enumerate() {
            let step_started = Instant::now();
            let outcome = self.run_action(session, request, token, &p.observation_id, action).await;
            let task = outcome.as_ref().ok().and_then(|(_, a)| *a);
            let sub_args = json!({"observation_id": p.observation_id, "action": action, "index": i});
            let sub = outcome.as_ref().map(|(n, _)| json!({"status": "submitted", "reports": n}));
            let sub = match sub {
                Ok(v) => Ok(v),
                Err(e) => Err(DaemonError::ActionFailed(ErrorBody::from(e))),
            };
            self.record_step(session, token, task, "batch", &sub_args, &sub, step_started.elapsed()).await;
            match outcome {
                Ok((n, _)) => {
                    done += 1;
                    reports += n;
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let result = match failure {
            // Refused before anything ran: the refusal itself, as for a single action.
            Some(e @ DaemonError::Task(_)) if done == 0 => Err(e),
            None => Ok(json!({
                "status": "submitted",
                "operation_id": p.operation_id,
                "completed": done,
                "reports": reports,
                "duration_ms": u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            })),
            Some(e) => {
                let mut body = match &e {
                    DaemonError::Task(_) => ErrorBody::from(&e),
                    _ => action_error(&e),
                };
                if done > 0 {
                    body.side_effect_possible = true;
                    body.status = Some("outcome_unknown");
                }
                body.message = format!("{} (after {done} of {} actions)", body.message, p.actions.len());
                Err(DaemonError::ActionFailed(body))
            }
        };
        self.finish_operation(&p.operation_id, &result);
        result
    }

    /// Plans and runs one action; returns the reports sent and the task it counted for.
    async fn run_action(
        &self,
        session: &Session,
        request: RequestId,
        token: Option<&str>,
        observation_id: &Option<String>,
        action: &ActionSpec,
    ) -> Result<(usize, Option<i64>), DaemonError> {
        let p = ActionParams {
            operation_id: String::new(),
            observation_id: observation_id.clone(),
            action: action.clone(),
        };
        let steps = self.plan_action(&p)?;
        if let (ActionSpec::OpenApp { name }, Some(t)) = (action, token) {
            self.check_app_scope(session, t, name).await?;
        }
        let cancel = session.cancel.child_token();
        session.in_flight().insert(request.0, cancel.clone());
        let result = self.run_input_with(session, token, &steps, &cancel).await;
        session.in_flight().remove(&request.0);
        if let (Err(_), Some(relative)) = (&result, &self.inner.relative) {
            // The pointer may have stopped anywhere: find it again by homing next time.
            relative.lock().unwrap_or_else(|p| p.into_inner()).forget();
        }
        result.map(|(n, admission)| (n, admission.task()))
    }

    fn plan_action(&self, p: &ActionParams) -> Result<Vec<InputStep>, DaemonError> {
        let t = &self.inner.timings;
        let mapping = match (&p.observation_id, p.action.needs_observation()) {
            (Some(id), true) => {
                let generation = self.inner.frames.state().generation;
                Some(self.lock_observations().get(id, generation, Instant::now())?.mapping)
            }
            _ => None,
        };
        let point = |x: f64, y: f64| -> Result<HidPoint, DaemonError> {
            let m = mapping.ok_or_else(|| DaemonError::InvalidArgument("observation_id is required".into()))?;
            let (hx, hy) = self.calibrated_hid(m.to_normalized(x, y)?, &m.active);
            Ok(HidPoint::new(hx, hy))
        };
        let gesture = match &p.action {
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
                        _ => return Err(DaemonError::InvalidArgument("hotkey takes modifiers plus one key".into())),
                    }
                }
                let main =
                    main.ok_or_else(|| DaemonError::InvalidArgument("hotkey needs one non-modifier key".into()))?;
                Gesture::Key(KeyStroke { usage: main.usage, modifiers: modifiers | main.modifiers })
            }
            ActionSpec::TypeText { text } => Gesture::Type(self.inner.keymap.strokes(text)?),
            ActionSpec::Home => Gesture::Key(input::HOME),
            ActionSpec::Spotlight => Gesture::Key(input::SPOTLIGHT),
            ActionSpec::Back => Gesture::Key(input::BACK),
            ActionSpec::AppSwitcher => Gesture::Drag {
                path: vec![HidPoint::new(16384, 32700), HidPoint::new(16384, 19000)],
                duration: Duration::from_millis(800),
            },
            ActionSpec::Consumer { key } => Gesture::Consumer(key.usage()),
            ActionSpec::OpenApp { name } => {
                // Spotlight, a moment for its field to take focus, the name, Return.
                let typed = self.inner.keymap.strokes(&format!("{name}\n"))?;
                let mut steps = plan(&Gesture::Key(input::SPOTLIGHT), t);
                steps.push(InputStep::Wait(Duration::from_millis(400)));
                steps.extend(plan(&Gesture::Type(typed), t));
                return Ok(steps);
            }
        };
        if let Some(relative) = &self.inner.relative {
            return Ok(relative.lock().unwrap_or_else(|p| p.into_inner()).plan(&gesture, t));
        }
        if matches!(p.action, ActionSpec::AppSwitcher) {
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
            _ => Err(DaemonError::InvalidArgument(format!(
                "unknown key {key:?}: use a single character or a name like enter, tab, escape, backspace, \
                 delete, up, down, left, right, home, end, pageup, pagedown, f1-f12, cmd, shift, ctrl, alt"
            ))),
        }
    }

    /// Cancels request `id` of this session; returns whether it was running.
    pub(super) fn cancel(&self, session: &Session, id: u64) -> bool {
        match session.in_flight().get(&id) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }
}

/// The cached form of an action error, with its status.
fn action_error(e: &DaemonError) -> ErrorBody {
    let mut body = ErrorBody::from(e);
    body.status = Some(if body.side_effect_possible { "outcome_unknown" } else { "failed_before_submit" });
    body
}

/// Token map type of a session's cancellable requests.
pub(super) type InFlight = std::collections::HashMap<u64, CancellationToken>;
