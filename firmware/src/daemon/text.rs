//! Reading the screen: the text of observations (read once, kept with them), `find_text`,
//! `wait_for_text`, `tap_text`'s target, and after a verified action the text of its
//! fresh observation, re-reading only the part of the picture that changed.
//!
//! Text belongs to an observation: its boxes are pixels of that observation's image, so a
//! match's centre is a point `tap` takes as is. Reads go to the configured
//! [`TextReader`](crate::device::ocr::TextReader) (a worker process: a crash or hang there
//! costs one read, answered `OCR_FAILED`, never the daemon).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use super::observations::{FrameRef, Observation, ObservationError};
use super::text_find::{self, Found};
use super::{Acting, Daemon, DaemonError};
use crate::device::geometry::{ObservationMapping, PixelRect};
use crate::device::ocr::preprocess::TILE;
use crate::device::ocr::{GrayImage, OcrError, ReadOptions, SharedReader, TextBox, TextRead};
use crate::device::video::image::{crop_scale, fit};
use crate::device::video::luma::LumaThumb;
use crate::device::video::Frame;
use crate::protocol::params::{ActionSpec, DEFAULT_MAX_EDGE, DEFAULT_TAP_CONFIDENCE};
use crate::protocol::text_params::{FindTextParams, TextQuery, WaitForTextParams, DEFAULT_TEXT_WAIT_MS};

/// Pixels of the observation's image added above and below a changed region before its
/// band is read again: a word whose box grew (a counter going from 9 to 10) is read whole.
const REREAD_MARGIN: u32 = 16;
/// A change covering more than this share of the picture is read whole (a new page).
const FULL_READ_SHARE: f64 = 0.5;
/// Most matches an answer lists.
const MAX_MATCHES: usize = 50;
/// Nearest texts a `TEXT_NOT_FOUND` lists.
const NEAREST: usize = 5;
/// Two fuzzy scores this close are equally good.
const SAME_SCORE: f64 = 1e-3;

/// What the text of an action's fresh observation starts from.
#[derive(Debug, Clone)]
pub(super) struct TextBasis {
    /// The acted-on observation's text and geometry, when it was read: only what changed
    /// is read again.
    pub before: Option<(Arc<TextRead>, ObservationMapping)>,
}

/// `tap_text`'s target, resolved before any input.
#[derive(Debug, Clone)]
pub(super) struct TextTarget {
    /// The observation the text was read in (the tap's coordinates are its pixels).
    pub observation_id: String,
    /// The tap.
    pub action: ActionSpec,
    /// What the answer says about it (`text_target`).
    pub described: Value,
}

impl Daemon {
    /// The reader, or why there is none.
    pub(super) fn text_reader(&self) -> Result<SharedReader, DaemonError> {
        self.inner.options.text_reader.clone().ok_or_else(|| {
            DaemonError::Ocr(OcrError::Unavailable(
                "this daemon was started without a text reader ([ocr] enabled = false, or no engine); \
                 see `tether doctor`"
                    .into(),
            ))
        })
    }

    /// `hello`'s `capabilities.text`: whether text can be read, and in which languages.
    pub(super) fn text_capability(&self) -> Value {
        match &self.inner.options.text_reader {
            Some(reader) => serde_json::to_value(reader.0.info()).unwrap_or(Value::Null),
            None => json!({"engine": null, "available": false, "languages": [], "installed_languages": [],
                           "problem": "reading text is disabled ([ocr] enabled = false)"}),
        }
    }

    /// Reads `rect` (pixels of an image as `mapping` shows `frame`; `None`: all of it).
    /// The answer's boxes are pixels of that whole image.
    pub(super) async fn read_frame(
        &self,
        frame: Arc<Frame>,
        mapping: ObservationMapping,
        rect: Option<TextBox>,
        cancel: &CancellationToken,
    ) -> Result<TextRead, DaemonError> {
        let reader = self.text_reader()?;
        let (iw, ih) = mapping.image;
        let rect = rect.unwrap_or(TextBox { x: 0, y: 0, width: iw, height: ih });
        let gray = tokio::task::spawn_blocking(move || {
            let source = frame_rect(&rect, &mapping);
            let rgb = crop_scale(&frame, source, (rect.width.max(1), rect.height.max(1)))?;
            Ok::<_, crate::device::video::image::ImageError>(GrayImage::from_rgb(
                rect.width.max(1),
                rect.height.max(1),
                &rgb,
            ))
        })
        .await
        .map_err(|_| DaemonError::Worker("text picture"))??;
        let read = tokio::select! {
            read = reader.0.read(gray, ReadOptions::default()) => read?,
            () = cancel.cancelled() => return Err(DaemonError::Cancelled),
        };
        Ok(offset(read, rect.x, rect.y))
    }

    /// The text of observation `obs`: kept with it, or read now when its picture is still
    /// the newest frame (a screenshot taken without `text: true`, used at once).
    async fn text_of(&self, obs: &Observation, cancel: &CancellationToken) -> Result<Arc<TextRead>, DaemonError> {
        if let Some(text) = &obs.text {
            return Ok(text.clone());
        }
        let frame = self.inner.frames.latest().filter(|f| f.generation == obs.generation && f.sequence == obs.frame_id);
        let Some(frame) = frame else {
            return Err(DaemonError::Observation(ObservationError::Stale {
                id: obs.id.clone(),
                why: "it was taken without text: true and the screen has shown newer pictures since \
                      (take the screenshot with text: true, or leave observation_id out for a fresh read)",
            }));
        };
        let text = Arc::new(self.read_frame(frame, obs.mapping, None, cancel).await?);
        self.inner.phone.state().observations.set_text(&obs.id, text.clone());
        Ok(text)
    }

    /// A fresh observation of the whole phone, read: what the text methods use without an
    /// observation id. `task` is the task whose agent asks.
    async fn observe_text(
        &self,
        task: Option<i64>,
        max_edge: Option<u32>,
        cancel: &CancellationToken,
    ) -> Result<(Observation, Arc<TextRead>), DaemonError> {
        let frame = self.frame_after(None, Duration::from_millis(2000), cancel).await?;
        self.observe_frame_text(frame, task, max_edge, cancel).await
    }

    /// An observation of `frame`, read.
    async fn observe_frame_text(
        &self,
        frame: Arc<Frame>,
        task: Option<i64>,
        max_edge: Option<u32>,
        cancel: &CancellationToken,
    ) -> Result<(Observation, Arc<TextRead>), DaemonError> {
        let active = self.active_rect(&frame);
        let image = fit(active.width, active.height, max_edge.unwrap_or(DEFAULT_MAX_EDGE));
        let mapping = ObservationMapping { active, source: active, image };
        let samples = self.act_settings().samples;
        let f = frame.clone();
        let luma = tokio::task::spawn_blocking(move || Arc::new(LumaThumb::of_rect(&f, active, samples)))
            .await
            .map_err(|_| DaemonError::Worker("frame sampling"))?;
        let text = Arc::new(self.read_frame(frame.clone(), mapping, None, cancel).await?);
        let at =
            FrameRef { generation: frame.generation, frame_id: frame.sequence, geometry_epoch: self.geometry_epoch() };
        let obs = {
            let mut state = self.inner.phone.state();
            let observations = &mut state.observations;
            let obs = observations.insert(at, mapping, task, Instant::now());
            observations.set_luma(&obs.id, luma);
            observations.set_text(&obs.id, text.clone());
            obs
        };
        if let Some(task) = task {
            self.inner.tasks.observed(task);
        }
        Ok((obs, text))
    }

    /// The observation named `id` (checked for `acting`) and its text, or a fresh one.
    async fn text_source(
        &self,
        acting: Acting,
        id: Option<&str>,
        max_edge: Option<u32>,
        cancel: &CancellationToken,
    ) -> Result<(Observation, Arc<TextRead>), DaemonError> {
        match id {
            Some(id) => {
                let obs = self.check_observation(id, acting)?;
                let text = self.text_of(&obs, cancel).await?;
                Ok((obs, text))
            }
            None => self.observe_text(acting.task(), max_edge, cancel).await,
        }
    }

    /// `screenshot` with `text: true`: reads the observation just taken of `frame`.
    pub(super) async fn screenshot_text(
        &self,
        frame: Arc<Frame>,
        obs: &Observation,
        cancel: &CancellationToken,
    ) -> Result<Value, DaemonError> {
        let started = Instant::now();
        let text = Arc::new(self.read_frame(frame, obs.mapping, None, cancel).await?);
        self.inner.phone.state().observations.set_text(&obs.id, text.clone());
        Ok(text_json(&text, started.elapsed()))
    }

    /// `find_text`: where a text is on the screen.
    pub(super) async fn find_text(
        &self,
        acting: Acting,
        p: &FindTextParams,
        cancel: &CancellationToken,
    ) -> Result<Value, DaemonError> {
        let started = Instant::now();
        let query = p.query();
        let (obs, text) = self.text_source(acting, p.observation_id.as_deref(), p.max_edge, cancel).await?;
        let found = find(&text, &query)?;
        let mut out = Map::new();
        out.insert("observation_id".into(), obs.id.clone().into());
        out.insert("image_size".into(), json!({"width": obs.mapping.image.0, "height": obs.mapping.image.1}));
        out.insert("query".into(), json!(query));
        out.insert("count".into(), found.len().into());
        out.insert("matches".into(), found.iter().take(MAX_MATCHES).map(found_json).collect());
        if found.is_empty() {
            out.insert("nearest".into(), nearest_json(&text, &query));
        }
        out.insert("took_ms".into(), millis(started.elapsed()).into());
        Ok(Value::Object(out))
    }

    /// `wait_for_text`: reads each new picture until the text appears (or is gone) or the
    /// timeout passes. A picture identical to the last one read is not read again.
    pub(super) async fn wait_for_text(
        &self,
        acting: Acting,
        p: &WaitForTextParams,
        cancel: &CancellationToken,
    ) -> Result<Value, DaemonError> {
        let started = Instant::now();
        let query = p.query();
        let gone = p.gone.unwrap_or(false);
        let deadline = started + Duration::from_millis(p.timeout_ms.unwrap_or(DEFAULT_TEXT_WAIT_MS));
        let mut reader = self.inner.frames.clone();
        let mut last_read: Option<(u64, Arc<LumaThumb>)> = None;
        let mut reads = 0u32;
        let mut last: Option<(Observation, Arc<TextRead>, Vec<Found>)> = None;
        loop {
            reader.want_pixels();
            let newest = reader.latest();
            if let Some(frame) = newest.filter(|f| last_read.as_ref().is_none_or(|(seq, _)| f.sequence > *seq)) {
                let active = self.active_rect(&frame);
                let samples = self.act_settings().samples;
                let f = frame.clone();
                let thumb = tokio::task::spawn_blocking(move || Arc::new(LumaThumb::of_rect(&f, active, samples)))
                    .await
                    .map_err(|_| DaemonError::Worker("frame sampling"))?;
                let same = last_read.as_ref().is_some_and(|(_, t)| **t == *thumb);
                last_read = Some((frame.sequence, thumb));
                if !same || last.is_none() {
                    let (obs, text) = self.observe_frame_text(frame, acting.task(), p.max_edge, cancel).await?;
                    reads += 1;
                    let found = find(&text, &query)?;
                    let done = found.is_empty() == gone;
                    last = Some((obs, text, found));
                    if done {
                        break;
                    }
                }
            }
            if Instant::now() >= deadline {
                break;
            }
            tokio::select! {
                changed = tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), reader.changed()) => {
                    if !matches!(changed, Ok(true)) {
                        break;
                    }
                }
                () = cancel.cancelled() => return Err(DaemonError::Cancelled),
            }
        }
        let Some((obs, text, found)) = last else {
            return Err(DaemonError::NoFrame);
        };
        let satisfied = found.is_empty() == gone;
        let mut out = Map::new();
        out.insert("satisfied".into(), satisfied.into());
        out.insert("gone".into(), gone.into());
        out.insert("waited_ms".into(), millis(started.elapsed()).into());
        out.insert("reads".into(), reads.into());
        out.insert("observation_id".into(), obs.id.clone().into());
        out.insert("image_size".into(), json!({"width": obs.mapping.image.0, "height": obs.mapping.image.1}));
        out.insert("query".into(), json!(query));
        out.insert("matches".into(), found.iter().take(MAX_MATCHES).map(found_json).collect());
        if found.is_empty() && !gone {
            out.insert("nearest".into(), nearest_json(&text, &query));
        }
        Ok(Value::Object(out))
    }

    /// `tap_text`'s target: the best match's centre in the named observation (read if
    /// needed) or in a fresh one. Nothing is sent when there is none, or several equally
    /// good ones and no `index`.
    pub(super) async fn resolve_tap_text(
        &self,
        acting: Acting,
        observation_id: Option<&str>,
        action: &ActionSpec,
        cancel: &CancellationToken,
    ) -> Result<TextTarget, DaemonError> {
        let (Some(query), ActionSpec::TapText { index, min_confidence, .. }) = (action.text_query(), action) else {
            return Err(DaemonError::Worker("tap_text target"));
        };
        let (obs, text) = self.text_source(acting, observation_id, None, cancel).await?;
        let all = find(&text, &query)?;
        let search = |key: &str, list: Value| Box::new(json!({"query": query, "observation_id": obs.id, key: list}));
        // A match read with too little confidence is not tapped: OCR makes letters of
        // artwork (a radio button's ring reads "0"), and a wrong tap is worse than none.
        let floor = min_confidence.unwrap_or(DEFAULT_TAP_CONFIDENCE);
        let (found, uncertain): (Vec<Found>, Vec<Found>) = all.into_iter().partition(|f| f.confidence >= floor);
        if found.is_empty() && !uncertain.is_empty() {
            let listed: Vec<String> = uncertain
                .iter()
                .take(3)
                .map(|f| {
                    let (x, y) = f.bbox.center();
                    format!("{:?} at {x:.0},{y:.0} (confidence {:.0})", f.text, f.confidence)
                })
                .collect();
            return Err(DaemonError::TextNotFound {
                query: query.text.clone(),
                hint: format!(
                    "; read only with less confidence than min_confidence {floor:.0}: {} (text_search.uncertain); \
                     lower min_confidence to tap it anyway",
                    listed.join(", ")
                ),
                search: search("uncertain", uncertain.iter().map(found_json).collect()),
            });
        }
        let Some(best) = found.first().map(|f| f.score) else {
            let near = text_find::nearest(&text, &query, NEAREST);
            let mut hint = if near.is_empty() {
                "; no text was read on the screen".to_string()
            } else {
                let shown: Vec<String> = near.iter().take(3).map(|n| format!("{:?}", n.text)).collect();
                format!("; nearest on the screen: {} (text_search.nearest has boxes)", shown.join(", "))
            };
            if let Some(covered) = self.pointer_over(&text, &obs.mapping) {
                hint.push_str(&covered);
            }
            return Err(DaemonError::TextNotFound {
                query: query.text.clone(),
                hint,
                search: search("nearest", nearest_json(&text, &query)),
            });
        };
        // The equally good matches, in reading order.
        let mut best_ones: Vec<&Found> = found.iter().filter(|f| best - f.score < SAME_SCORE).collect();
        best_ones.sort_by_key(|f| (f.line, f.bbox.x));
        let chosen = match (index, best_ones.len()) {
            (None, 1) => best_ones[0],
            (None, count) => {
                let list = best_ones.iter().map(|f| found_json(f)).collect();
                let listed = best_ones
                    .iter()
                    .enumerate()
                    .map(|(i, f)| {
                        let (x, y) = f.bbox.center();
                        format!("index {i}: {:?} at {x:.0},{y:.0}", f.text)
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(DaemonError::AmbiguousText {
                    query: query.text.clone(),
                    count,
                    listed,
                    search: search("candidates", list),
                });
            }
            (Some(i), count) => match best_ones.get(*i as usize) {
                Some(f) => f,
                None => {
                    let list: Value = best_ones.iter().map(|f| found_json(f)).collect();
                    return Err(DaemonError::TextNotFound {
                        query: query.text.clone(),
                        hint: format!(": index {i} asks for match {} of {count}", i + 1),
                        search: search("candidates", list),
                    });
                }
            },
        };
        let (x, y) = chosen.bbox.center();
        let mut described = found_json(chosen);
        if let Value::Object(m) = &mut described {
            m.insert("observation_id".into(), obs.id.clone().into());
        }
        Ok(TextTarget { observation_id: obs.id.clone(), action: ActionSpec::Tap { x, y }, described })
    }

    /// What to tell a caller whose text was not found while the pointer rests over a line
    /// of `text` (the pointer hides the letters under it), if it does.
    fn pointer_over(&self, text: &TextRead, mapping: &ObservationMapping) -> Option<String> {
        let (nx, ny) = self.last_pointer()?;
        let (iw, ih) = mapping.image;
        let (px, py) = (nx * f64::from(iw), ny * f64::from(ih));
        // The pointer's disc reaches about this far (image pixels) from where it rests.
        let reach = f64::from(iw) / 30.0;
        let line = text.lines.iter().find(|l| {
            let b = l.bbox;
            px >= f64::from(b.x) - reach
                && px <= f64::from(b.x + b.width) + reach
                && py >= f64::from(b.y) - reach
                && py <= f64::from(b.y + b.height) + reach
        })?;
        Some(format!(
            "; the pointer rests at {px:.0},{py:.0} over {:?} and hides letters under it: move it away (action \
             move, to an empty part of the screen) and try again",
            line.text
        ))
    }

    /// The text of observation `id`, if it was read.
    pub(super) fn observation_text(&self, id: &str) -> Option<(Arc<TextRead>, ObservationMapping)> {
        let state = self.inner.phone.state();
        let obs = state.observations.peek(id)?;
        Some((obs.text.clone()?, obs.mapping))
    }

    /// Reads the fresh observation `after` of `frame` (mapping `mapping`), starting from
    /// `basis`: when the acted-on observation was read with the same geometry, only the
    /// `changed` region (frame pixels) is read again; otherwise all of it. Kept with the
    /// observation.
    pub(super) async fn read_after(
        &self,
        frame: Arc<Frame>,
        after: &str,
        mapping: ObservationMapping,
        changed: Option<PixelRect>,
        basis: &TextBasis,
        cancel: &CancellationToken,
    ) -> Result<Arc<TextRead>, DaemonError> {
        let same_geometry =
            basis.before.as_ref().filter(|(_, m)| m.image == mapping.image && m.source == mapping.source);
        let text = match (same_geometry, changed) {
            (Some((before, _)), None) => before.clone(),
            (Some((before, _)), Some(r)) => {
                let (iw, ih) = mapping.image;
                // A band the image's width: whole lines are read again, as a full read
                // would see them (a change inside a line changes the line's reading).
                let changed = grow(image_box(&r, &mapping), REREAD_MARGIN, iw, ih);
                let region = reread_band(changed, before, iw, ih);
                let share =
                    f64::from(region.width) * f64::from(region.height) / (f64::from(iw) * f64::from(ih)).max(1.0);
                if share > FULL_READ_SHARE {
                    Arc::new(self.read_frame(frame, mapping, None, cancel).await?)
                } else {
                    let inside = self.read_frame(frame, mapping, Some(region), cancel).await?;
                    Arc::new(before.replace_region(&region, &inside))
                }
            }
            (None, _) => Arc::new(self.read_frame(frame, mapping, None, cancel).await?),
        };
        self.inner.phone.state().observations.set_text(after, text.clone());
        Ok(text)
    }
}

/// The band of an `iw` x `ih` image read again for a `changed` box: the image's width,
/// its top and bottom on the preprocessing's tile grid (the band's tiles are the full
/// read's, so are the backgrounds found in them), then grown over every line of `before`
/// it cuts (a cut line would be read as half its letters, and its old words dropped).
fn reread_band(changed: TextBox, before: &TextRead, iw: u32, ih: u32) -> TextBox {
    let mut top = changed.y / TILE * TILE;
    let mut bottom = (changed.y + changed.height).div_ceil(TILE).saturating_mul(TILE).min(ih);
    // Each pass only grows the band, within the image: it ends.
    loop {
        let band = TextBox { x: 0, y: top, width: iw, height: bottom.saturating_sub(top).max(1) };
        let (mut t, mut b) = (top, bottom);
        // A line's box is where the engine saw ink; its letters' anti-aliased edges and
        // descenders reach a little further.
        let padded = |l: &crate::device::ocr::Line| {
            let pad = (l.bbox.height / 3).max(3);
            let y = l.bbox.y.saturating_sub(pad);
            TextBox { x: 0, y, width: iw, height: (l.bbox.y + l.bbox.height + pad).min(ih) - y }
        };
        for line in before.lines.iter().map(padded).filter(|l| l.overlaps(&band)) {
            t = t.min(line.y);
            b = b.max(line.y + line.height);
        }
        if (t, b) == (top, bottom) {
            return band;
        }
        (top, bottom) = (t, b);
    }
}

/// The matches of `query` in `text` (a bad pattern was refused when parsed).
fn find(text: &TextRead, query: &TextQuery) -> Result<Vec<Found>, DaemonError> {
    text_find::find(text, query).map_err(|_| DaemonError::Worker("text pattern"))
}

/// `read` with every box moved by (`dx`, `dy`).
fn offset(mut read: TextRead, dx: u32, dy: u32) -> TextRead {
    for w in &mut read.words {
        w.bbox.x += dx;
        w.bbox.y += dy;
    }
    for l in &mut read.lines {
        l.bbox.x += dx;
        l.bbox.y += dy;
    }
    read
}

/// The frame pixels an image rectangle shows (rounded outwards, inside the source).
fn frame_rect(r: &TextBox, m: &ObservationMapping) -> PixelRect {
    let sx = f64::from(m.source.width) / f64::from(m.image.0.max(1));
    let sy = f64::from(m.source.height) / f64::from(m.image.1.max(1));
    let x0 = (f64::from(r.x) * sx).floor();
    let y0 = (f64::from(r.y) * sy).floor();
    let x1 = (f64::from(r.x + r.width) * sx).ceil().min(f64::from(m.source.width));
    let y1 = (f64::from(r.y + r.height) * sy).ceil().min(f64::from(m.source.height));
    PixelRect {
        x: m.source.x + to_u32(x0),
        y: m.source.y + to_u32(y0),
        width: to_u32(x1 - x0).max(1),
        height: to_u32(y1 - y0).max(1),
    }
}

/// A rectangle of frame pixels in an observation's image pixels (covering it).
pub(super) fn image_box(r: &PixelRect, m: &ObservationMapping) -> TextBox {
    let (iw, ih) = (f64::from(m.image.0), f64::from(m.image.1));
    let sx = iw / f64::from(m.source.width.max(1));
    let sy = ih / f64::from(m.source.height.max(1));
    let x0 = (f64::from(r.x.saturating_sub(m.source.x)) * sx).floor().clamp(0.0, iw);
    let y0 = (f64::from(r.y.saturating_sub(m.source.y)) * sy).floor().clamp(0.0, ih);
    let x1 = (f64::from((r.x + r.width).saturating_sub(m.source.x)) * sx).ceil().clamp(0.0, iw);
    let y1 = (f64::from((r.y + r.height).saturating_sub(m.source.y)) * sy).ceil().clamp(0.0, ih);
    TextBox { x: to_u32(x0), y: to_u32(y0), width: to_u32(x1 - x0), height: to_u32(y1 - y0) }
}

/// `b` grown by `by` on every side, inside a `w`x`h` image.
fn grow(b: TextBox, by: u32, w: u32, h: u32) -> TextBox {
    let x0 = b.x.saturating_sub(by);
    let y0 = b.y.saturating_sub(by);
    let x1 = (b.x + b.width + by).min(w);
    let y1 = (b.y + b.height + by).min(h);
    TextBox { x: x0, y: y0, width: x1.saturating_sub(x0).max(1), height: y1.saturating_sub(y0).max(1) }
}

fn to_u32(v: f64) -> u32 {
    // Callers pass pixel values clamped into the image, far inside u32.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let r = v.max(0.0).min(f64::from(u32::MAX)) as u32;
    r
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A read as answers carry it: lines and words with boxes, and how long it took.
pub(super) fn text_json(text: &TextRead, took: Duration) -> Value {
    let mut v = serde_json::to_value(text).unwrap_or_else(|_| json!({}));
    if let Value::Object(m) = &mut v {
        m.insert("read_ms".into(), millis(took).into());
    }
    v
}

/// Only the lines of a read, for action answers.
pub(super) fn lines_json(text: &TextRead) -> Value {
    text.lines.iter().map(|l| json!({"text": l.text, "box": l.bbox})).collect()
}

fn found_json(f: &Found) -> Value {
    let (cx, cy) = f.bbox.center();
    json!({
        "text": f.text,
        "box": f.bbox,
        "center": {"x": cx, "y": cy},
        "confidence": f.confidence,
        "score": (f.score * 1000.0).round() / 1000.0,
        "line": f.line,
    })
}

fn nearest_json(text: &TextRead, query: &TextQuery) -> Value {
    text_find::nearest(text, query, NEAREST)
        .into_iter()
        .map(|n| json!({"text": n.text, "box": n.bbox, "score": (n.score * 1000.0).round() / 1000.0}))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_and_frame_rectangles_map_both_ways() {
        let m = ObservationMapping {
            active: PixelRect { x: 100, y: 0, width: 1000, height: 2000 },
            source: PixelRect { x: 100, y: 0, width: 1000, height: 2000 },
            image: (500, 1000),
        };
        let img = TextBox { x: 10, y: 20, width: 30, height: 40 };
        let f = frame_rect(&img, &m);
        assert_eq!(f, PixelRect { x: 120, y: 40, width: 60, height: 80 });
        assert_eq!(image_box(&f, &m), img);
        assert_eq!(grow(img, 16, 500, 1000), TextBox { x: 0, y: 4, width: 56, height: 72 });
        assert_eq!(grow(TextBox { x: 490, y: 990, width: 10, height: 10 }, 16, 500, 1000).width, 26);
    }

    #[test]
    fn a_reread_band_lies_on_the_tile_grid_and_never_cuts_a_line() {
        let word = |text: &str, y: u32, line: usize| crate::device::ocr::Word {
            text: text.into(),
            bbox: TextBox { x: 40, y, width: 60, height: 20 },
            confidence: 90.0,
            line,
        };
        let before = TextRead::from_words(vec![word("Add", 440, 0), word("Month", 505, 1), word("Far", 900, 2)]);
        // A change around 420..470 ends at 480 on the grid, clear of "Month".
        let band = reread_band(TextBox { x: 30, y: 420, width: 100, height: 50 }, &before, 498, 1080);
        assert_eq!((band.x, band.y, band.width, band.height), (0, 416, 498, 64));
        // One reaching 500 would cut "Month" (505..525) at 512: the band takes all of it,
        // with a third of its height for the letters' edges.
        let band = reread_band(TextBox { x: 30, y: 420, width: 100, height: 80 }, &before, 498, 1080);
        assert_eq!((band.y, band.y + band.height), (416, 531));
        // At the image's bottom edge the band stops at the image.
        let band = reread_band(TextBox { x: 0, y: 1070, width: 10, height: 10 }, &before, 498, 1080);
        assert_eq!((band.y, band.y + band.height), (1056, 1080));
    }
}
