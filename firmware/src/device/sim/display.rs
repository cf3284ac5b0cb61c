//! Renders the virtual phone into capture frames, pillarboxed like an HDMI mirror.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::phone::PhoneSnapshot;
use super::text;
use super::ui::{Paint, Rect, Scene, Screen, TextRun, APP_BACKGROUND};
use super::{SimConfig, SimPhone};

/// What a rendered frame depends on: UI version, pointer position, buttons, the clock's
/// second, the caret, and (while something animates) the time, so every frame differs.
type RenderKey = (u64, (i32, i32), u8, u64, bool, Option<Instant>);
use crate::device::video::convert::rgb_to_yuv;
use crate::device::video::{Frame, FrameHub, FrameSource, PixelFormat, Signal, SourceGuard, VideoError, VideoState};

/// The [`FrameSource`] of a [`SimPhone`]: a thread that publishes frames at the configured
/// rate, re-rendering only when the phone's state changed.
#[derive(Debug)]
pub struct SimDisplay {
    phone: SimPhone,
}

impl SimDisplay {
    pub(super) fn new(phone: SimPhone) -> Self {
        SimDisplay { phone }
    }
}

/// Where the phone sits inside the capture frame: scaled to fit, centred.
fn active_rect(cw: u32, ch: u32, pw: u32, ph: u32) -> (u32, u32, u32, u32) {
    let (cw64, ch64, pw64, ph64) = (u64::from(cw), u64::from(ch), u64::from(pw), u64::from(ph));
    let (w, h) = if cw64 * ph64 > ch64 * pw64 { (pw64 * ch64 / ph64, ch64) } else { (cw64, ph64 * cw64 / pw64) };
    // w <= cw and h <= ch by construction, so both fit in u32.
    let (w, h) = (u32::try_from(w).unwrap_or(cw), u32::try_from(h).unwrap_or(ch));
    ((cw - w) / 2, (ch - h) / 2, w, h)
}

/// An NV12 picture being drawn: a Y plane then interleaved U, V at half resolution, like
/// an HDMI bridge delivers 4:2:0. Half the memory of RGB (12.4 MB per 2160p frame).
struct Canvas<'a> {
    data: &'a mut [u8],
    width: usize,
    height: usize,
}

impl Canvas<'_> {
    /// Fills a rectangle of capture pixels, clipped to the frame. Chroma is shared by 2x2
    /// pixels, so edges on odd pixels blend as they do in a real 4:2:0 capture.
    fn fill(&mut self, (x0, y0, x1, y1): (usize, usize, usize, usize), colour: [u8; 3]) {
        let (x1, y1) = (x1.min(self.width), y1.min(self.height));
        if x0 >= x1 || y0 >= y1 {
            return;
        }
        let [luma, u, v] = rgb_to_yuv(colour);
        let w = self.width;
        for y in y0..y1 {
            self.data[y * w + x0..y * w + x1].fill(luma);
        }
        let chroma = w * self.height;
        for cy in y0 / 2..y1.div_ceil(2) {
            let row = chroma + cy * w;
            for pair in self.data[row + (x0 & !1)..row + x1.div_ceil(2) * 2].chunks_exact_mut(2) {
                pair.copy_from_slice(&[u, v]);
            }
        }
    }

    /// Fills a rounded rectangle of capture pixels (corner radius `rad`), or only its
    /// outline `stroke` wide. Corners are anti-aliased by coverage along each row's ends.
    fn round(
        &mut self,
        (x0, y0, x1, y1): (usize, usize, usize, usize),
        rad: f32,
        colour: [u8; 3],
        stroke: Option<f32>,
    ) {
        if x0 >= x1 || y0 >= y1 {
            return;
        }
        #[allow(clippy::cast_precision_loss)] // capture sizes, far below 2^24
        let (fx0, fy0, fx1, fy1) = (x0 as f32, y0 as f32, x1 as f32, y1 as f32);
        let rad = rad.min((fx1 - fx0) / 2.0).min((fy1 - fy0) / 2.0).max(0.0);
        // The inset of a rounded rectangle's edge at row centre `yc`, for radius `r` in a
        // box from `t` to `b`.
        let inset = |yc: f32, t: f32, b: f32, r: f32| {
            let d = if yc < t + r {
                t + r - yc
            } else if yc > b - r {
                yc - (b - r)
            } else {
                0.0
            };
            if d <= 0.0 {
                0.0
            } else {
                r - (r * r - d.min(r) * d.min(r)).sqrt()
            }
        };
        for y in y0..y1.min(self.height) {
            #[allow(clippy::cast_precision_loss)]
            let yc = y as f32 + 0.5;
            let o = inset(yc, fy0, fy1, rad);
            let (l, r) = (fx0 + o, fx1 - o);
            match stroke {
                None => self.span(y, l, r, colour),
                Some(s) => {
                    let ri = (rad - s).max(0.0);
                    let (it, ib) = (fy0 + s, fy1 - s);
                    if yc < it || yc > ib {
                        self.span(y, l, r, colour);
                    } else {
                        let oi = inset(yc, it, ib, ri);
                        self.span(y, l, fx0 + s + oi, colour);
                        self.span(y, fx1 - s - oi, r, colour);
                    }
                }
            }
        }
    }

    /// Fills row `y` from `l` to `r` (fractional), blending the partly covered ends.
    fn span(&mut self, y: usize, l: f32, r: f32, colour: [u8; 3]) {
        if r <= l {
            return;
        }
        // Capture coordinates, non-negative and far below 2^24.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let (li, ri) = (l.ceil().max(0.0) as usize, r.floor().max(0.0) as usize);
        if li < ri {
            self.fill((li, y, ri, y + 1), colour);
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
        {
            let lf = l.floor().max(0.0) as usize;
            if lf < li {
                self.blend(lf, y, colour, li as f32 - l);
            }
            if ri < r.ceil() as usize && ri >= li {
                self.blend(ri, y, colour, r - ri as f32);
            }
        }
    }

    /// Calls `plot` for each pixel of a disc at (`cx`, `cy`) of radius `r` inside `area`,
    /// with its coverage (edges anti-aliased).
    fn disc(
        &mut self,
        (cx, cy): (f32, f32),
        r: f32,
        (ax0, ay0, ax1, ay1): (usize, usize, usize, usize),
        mut plot: impl FnMut(&mut Self, usize, usize, f32),
    ) {
        // Capture coordinates, non-negative and far below 2^24.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let (x0, y0, x1, y1) = (
            ((cx - r - 1.0).max(0.0) as usize).max(ax0),
            ((cy - r - 1.0).max(0.0) as usize).max(ay0),
            ((cx + r + 2.0).max(0.0) as usize).min(ax1).min(self.width),
            ((cy + r + 2.0).max(0.0) as usize).min(ay1).min(self.height),
        );
        for y in y0..y1 {
            for x in x0..x1 {
                #[allow(clippy::cast_precision_loss)]
                let (dx, dy) = (x as f32 + 0.5 - cx, y as f32 + 0.5 - cy);
                let a = (r - (dx * dx + dy * dy).sqrt() + 0.5).clamp(0.0, 1.0);
                if a > 0.0 {
                    plot(self, x, y, a);
                }
            }
        }
    }

    /// Blends `colour` over one pixel with `coverage` (0..=1), as anti-aliased text is
    /// drawn. Y, U and V are linear in the (gamma-encoded) RGB, so blending them blends
    /// the colour; the chroma a 2x2 block shares takes a quarter of each pixel's coverage.
    fn blend(&mut self, x: usize, y: usize, colour: [u8; 3], coverage: f32) {
        if x >= self.width || y >= self.height {
            return;
        }
        let [luma, u, v] = rgb_to_yuv(colour);
        let mix = |old: u8, new: u8, a: f32| {
            // A convex combination of two bytes is a byte.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let m = (f32::from(old) + (f32::from(new) - f32::from(old)) * a).round().clamp(0.0, 255.0) as u8;
            m
        };
        let a = coverage.clamp(0.0, 1.0);
        let i = y * self.width + x;
        self.data[i] = mix(self.data[i], luma, a);
        let c = self.width * self.height + (y / 2) * self.width + (x & !1);
        // A fully covered pixel takes the colour's chroma (solid shapes keep their hue).
        let ca = if a >= 1.0 { 1.0 } else { a / 4.0 };
        self.data[c] = mix(self.data[c], u, ca);
        self.data[c + 1] = mix(self.data[c + 1], v, ca);
    }
}

/// The status-bar clock's text for a UTC time of day in seconds: `HH:MM:SS`. A real phone
/// shows minutes; seconds make every test run see it change.
pub(super) fn clock_text(secs: u64) -> String {
    let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    format!("{h:02}:{m:02}:{s:02}")
}

/// The battery level the status bar shows, in percent (the sim's battery never drains).
pub(super) const BATTERY_PERCENT: u8 = 100;

/// Where the clock is drawn, in phone pixels of a 1179x2556 screen: left of the status bar.
pub const CLOCK_RECT: (i32, i32, i32, i32) = (60, 40, 448, 70);

/// Draws the capture frame for a phone scene; `clock` is the time of day in seconds.
fn render(cfg: &SimConfig, scene: &Scene, snap: &PhoneSnapshot, clock: u64, data: &mut [u8]) {
    let (cw, ch) = (cfg.capture_width as usize, cfg.capture_height as usize);
    let mut canvas = Canvas { data, width: cw, height: ch };
    canvas.fill((0, 0, cw, ch), [0, 0, 0]);
    let (ax, ay, aw, ah) = active_rect(cfg.capture_width, cfg.capture_height, cfg.phone_width, cfg.phone_height);
    let (ax, ay, aw, ah) = (ax as usize, ay as usize, aw as usize, ah as usize);
    let (pw, ph) = (cfg.phone_width.max(1) as usize, cfg.phone_height.max(1) as usize);
    let to_x = |v: i32| ax + usize::try_from(v.max(0)).unwrap_or(0).min(pw) * aw / pw;
    let to_y = |v: i32| ay + usize::try_from(v.max(0)).unwrap_or(0).min(ph) * ah / ph;
    // Layouts are designed for 1179x2556 and scaled, like the UI's.
    let sx = |v: i32| i32::try_from(i64::from(v) * i64::try_from(pw).unwrap_or(1179) / 1179).unwrap_or(v);
    let sy = |v: i32| i32::try_from(i64::from(v) * i64::try_from(ph).unwrap_or(2556) / 2556).unwrap_or(v);
    let cap_rect = |r: Rect| (to_x(r.x), to_y(r.y), to_x(r.x.saturating_add(r.w)), to_y(r.y.saturating_add(r.h)));
    // Phone pixels to capture pixels, for what is placed to a fraction of a pixel.
    #[allow(clippy::cast_precision_loss)] // screen sizes, far below 2^24
    let k = aw as f32 / pw as f32;
    #[allow(clippy::cast_precision_loss)]
    let (axf, ayf) = (ax as f32, ay as f32);
    let scale = |v: i32| {
        #[allow(clippy::cast_precision_loss)] // phone pixels, far below 2^24
        let f = v as f32 * k;
        f
    };
    let on_app = scene.screen == Screen::App;
    if on_app {
        canvas.fill((ax, ay, ax + aw, ay + ah), APP_BACKGROUND);
    } else {
        for y in 0..ah {
            // A vertical gradient stands in for the wallpaper.
            let shade = u8::try_from(40 + y * 120 / ah.max(1)).unwrap_or(160);
            canvas.fill((ax, ay + y, ax + aw, ay + y + 1), [20, shade / 2, shade]);
        }
    }
    let phone_area = (ax, ay, ax + aw, ay + ah);
    let draw = |canvas: &mut Canvas<'_>, p: &Paint| match p {
        Paint::Fill(r, c) => canvas.fill(clip_to(cap_rect(*r), phone_area), *c),
        Paint::Round(r, rad, c) => canvas.round(clip_to(cap_rect(*r), phone_area), scale(*rad), *c, None),
        Paint::Outline(r, rad, stroke, c) => {
            canvas.round(clip_to(cap_rect(*r), phone_area), scale(*rad), *c, Some(scale(*stroke).max(1.0)));
        }
        Paint::Disc { x, y, r, colour } => {
            let (cx, cy) = (axf + scale(*x), ayf + scale(*y));
            canvas.disc((cx, cy), scale(*r), phone_area, |c, px, py, a| c.blend(px, py, *colour, a));
        }
        Paint::Dim(r, a) => {
            let (x0, y0, x1, y1) = clip_to(cap_rect(*r), phone_area);
            let a = f32::from(*a) / 255.0;
            for y in y0..y1 {
                for x in x0..x1 {
                    canvas.blend(x, y, [0, 0, 0], a);
                }
            }
        }
        Paint::Text(run) => draw_text(canvas, run, &cap_rect, k, (axf, ayf)),
    };
    for p in &scene.paint {
        draw(&mut canvas, p);
    }
    if let Some(r) = scene.zoom {
        draw(&mut canvas, &Paint::Fill(r, APP_BACKGROUND));
    }
    if let Some(r) = scene.caret {
        draw(&mut canvas, &Paint::Fill(r, [0, 122, 255]));
    }
    // The status bar: the clock left, signal and battery right.
    let ink = if on_app && scene.zoom.is_none() { [0, 0, 0] } else { [255, 255, 255] };
    let (x0, y0, w0, h0) = CLOCK_RECT;
    let clock_run = TextRun {
        text: clock_text(clock),
        x: sx(x0),
        y: sy(y0),
        size: sx(60).max(1),
        colour: ink,
        clip: Rect { x: sx(x0), y: sy(y0), w: sx(w0), h: sy(h0) },
        artwork: false,
    };
    draw(&mut canvas, &Paint::Text(clock_run));
    for bar in 0..4 {
        let h = sy(14 + bar * 9);
        let r = Rect { x: sx(850 + bar * 24), y: sy(98) - h, w: sx(16).max(1), h };
        draw(&mut canvas, &Paint::Fill(r, ink));
    }
    let (bx, by, bw, bh, stroke) = (sx(1000), sy(52), sx(96), sy(46), sx(5).max(1));
    for edge in [
        Rect { x: bx, y: by, w: bw, h: stroke },
        Rect { x: bx, y: by + bh - stroke, w: bw, h: stroke },
        Rect { x: bx, y: by, w: stroke, h: bh },
        Rect { x: bx + bw - stroke, y: by, w: stroke, h: bh },
        Rect { x: bx + bw + sx(3), y: by + bh / 3, w: sx(7).max(1), h: bh / 3 },
    ] {
        draw(&mut canvas, &Paint::Fill(edge, ink));
    }
    let inner = bw - 4 * stroke;
    let charged = inner * i32::from(BATTERY_PERCENT) / 100;
    draw(
        &mut canvas,
        &Paint::Fill(Rect { x: bx + 2 * stroke, y: by + 2 * stroke, w: charged, h: bh - 4 * stroke }, ink),
    );
    // The AssistiveTouch-style pointer: a translucent grey disc over the screen, darker
    // while pressed. Blended, so it looks the same before a press and after the release.
    let (px, py) = (axf + scale(snap.pointer.0), ayf + scale(snap.pointer.1));
    #[allow(clippy::cast_precision_loss)] // capture sizes, far below 2^24
    let r = (aw as f32 / 40.0).max(3.0);
    let (colour, alpha) = if snap.buttons != 0 { ([40, 40, 40], 0.7) } else { ([110, 110, 110], 0.45) };
    canvas.disc((px, py), r, phone_area, |c, x, y, a| c.blend(x, y, colour, a * alpha));
}

/// A capture rectangle cut to `area`.
fn clip_to(
    (x0, y0, x1, y1): (usize, usize, usize, usize),
    (ax0, ay0, ax1, ay1): (usize, usize, usize, usize),
) -> (usize, usize, usize, usize) {
    (x0.max(ax0), y0.max(ay0), x1.min(ax1), y1.min(ay1))
}

/// Draws a line of text given in phone pixels; `k` scales phone to capture pixels and
/// `origin` is where the phone's top-left is in the capture.
fn draw_text(
    canvas: &mut Canvas<'_>,
    run: &TextRun,
    cap_rect: &impl Fn(Rect) -> (usize, usize, usize, usize),
    k: f32,
    (axf, ayf): (f32, f32),
) {
    let (x0, y0, x1, y1) = cap_rect(run.clip);
    let clip = text::Clip { x0: cap(x0), y0: cap(y0), x1: cap(x1), y1: cap(y1) };
    #[allow(clippy::cast_precision_loss)] // phone pixels, far below 2^24
    let (x, y, size) = (axf + run.x as f32 * k, ayf + run.y as f32 * k, run.size as f32 * k);
    text::draw_line(&run.text, size, (x, y), clip, |px, py, a| {
        if let (Ok(px), Ok(py)) = (usize::try_from(px), usize::try_from(py)) {
            canvas.blend(px, py, run.colour, a);
        }
    });
}

/// A capture pixel coordinate as text clipping takes it (captures are at most 8192 wide).
fn cap(v: usize) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

/// Seconds since midnight UTC now.
pub(super) fn time_of_day() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() % 86_400)
}

/// The renderer's frame buffers: at most [`POOL_SIZE`], like a capture device's queue. A
/// buffer nobody else holds (no reader, not the published frame) is drawn into again; when
/// every buffer is held, the tick is dropped (no frame published, as a capture device drops
/// frames when its queue is full) instead of allocating another 25 MB at 2160p, so memory
/// stays at two frames whatever readers do.
#[derive(Debug, Default)]
struct BufferPool {
    buffers: Vec<Arc<[u8]>>,
}

/// Buffers the renderer owns: one published, one being drawn.
const POOL_SIZE: usize = 2;

impl BufferPool {
    /// Renders into a free buffer (or a new one while fewer than [`POOL_SIZE`] exist) and
    /// returns it, shared; `None` when every buffer is still held by someone.
    fn draw(&mut self, len: usize, paint: impl FnOnce(&mut [u8])) -> Option<Arc<[u8]>> {
        // A buffer of another size (the capture size changed) is of no further use.
        self.buffers.retain(|b| b.len() == len);
        let free = self.buffers.iter_mut().position(|b| Arc::get_mut(b).is_some());
        let mut buffer = match free {
            Some(i) => self.buffers.swap_remove(i),
            // A TrustedLen iterator: one allocation, no copy from a Vec.
            None if self.buffers.len() < POOL_SIZE => std::iter::repeat_n(0u8, len).collect(),
            None => return None,
        };
        // Just taken free or just made: nobody else holds it.
        let bytes = Arc::get_mut(&mut buffer)?;
        paint(bytes);
        self.buffers.push(buffer.clone());
        Some(buffer)
    }
}

impl FrameSource for SimDisplay {
    fn backend(&self) -> &'static str {
        "sim"
    }

    fn start(self: Box<Self>, hub: FrameHub) -> Result<SourceGuard, VideoError> {
        let cfg = self.phone.config();
        if cfg.fps == 0
            || cfg.fps > 240
            || cfg.capture_width < 64
            || cfg.capture_height < 64
            || PixelFormat::Nv12.frame_len(cfg.capture_width, cfg.capture_height).is_none()
        {
            return Err(VideoError::Config(format!(
                "sim capture {}x{} at {} fps is out of range (even sizes, 64x64 and up, 1-240 fps)",
                cfg.capture_width, cfg.capture_height, cfg.fps
            )));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stop_thread = stop.clone();
        let phone = self.phone;
        // The virtual capture locks at once: `status` right after start already knows it.
        let first_generation = phone.generation();
        hub.set_state(VideoState {
            signal: Signal::Locked,
            source_size: Some((cfg.capture_width, cfg.capture_height)),
            generation: first_generation,
        });
        std::thread::Builder::new()
            .name("sim-display".into())
            .spawn(move || {
                let mut generation = first_generation;
                let interval = Duration::from_secs(1) / cfg.fps;
                let mut rendered: Option<(RenderKey, Arc<[u8]>)> = None;
                let mut pool = BufferPool::default();
                let mut sequence = 0u64;
                let mut next = Instant::now();
                while !stop_thread.load(Ordering::Relaxed) {
                    if phone.generation() != generation {
                        generation = phone.generation();
                        hub.set_state(VideoState {
                            signal: Signal::Locked,
                            source_size: Some((cfg.capture_width, cfg.capture_height)),
                            generation,
                        });
                    }
                    let (scene, snap) = phone.render_state();
                    let clock = time_of_day();
                    let now = Instant::now();
                    let key = (
                        snap.version,
                        snap.pointer,
                        snap.buttons,
                        clock,
                        scene.caret.is_some(),
                        scene.animating.then_some(now),
                    );
                    let data = match &rendered {
                        Some((k, data)) if *k == key => Some(data.clone()),
                        _ => {
                            // Sizes were checked even and small at start.
                            let len = PixelFormat::Nv12.frame_len(cfg.capture_width, cfg.capture_height).unwrap_or(0);
                            let drawn = pool.draw(len, |buf| render(&cfg, &scene, &snap, clock, buf));
                            if let Some(data) = &drawn {
                                rendered = Some((key, data.clone()));
                            }
                            drawn
                        }
                    };
                    // `None`: every buffer is held by a reader. A capture device with its
                    // queue full drops the frame, and so does this: publishing the old
                    // picture under a new sequence would pass it off as taken after the
                    // change (a caller waiting for "a frame after my input" would get it).
                    let Some(data) = data else {
                        next += interval;
                        let now = Instant::now();
                        std::thread::sleep(next.saturating_duration_since(now));
                        if next < now {
                            next = now;
                        }
                        continue;
                    };
                    sequence += 1;
                    hub.publish(Arc::new(Frame {
                        generation,
                        sequence,
                        captured_at: Instant::now(),
                        width: cfg.capture_width,
                        height: cfg.capture_height,
                        format: PixelFormat::Nv12,
                        data,
                    }));
                    next += interval;
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    } else {
                        next = now;
                    }
                }
            })
            .map_err(VideoError::Spawn)?;
        Ok(SourceGuard::new(move || stop.store(true, Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_reuses_free_buffers_and_never_holds_more_than_two() {
        let mut pool = BufferPool::default();
        let a = pool.draw(12, |b| b.fill(1)).unwrap();
        let b = pool.draw(12, |b| b.fill(2)).unwrap();
        assert_ne!(a.as_ptr(), b.as_ptr(), "a held buffer is never drawn into");
        // Both held (published, and a reader): the tick is skipped, nothing is allocated.
        assert!(pool.draw(12, |b| b.fill(3)).is_none());
        assert!(a.iter().all(|&v| v == 1) && b.iter().all(|&v| v == 2));
        let a_ptr = a.as_ptr();
        drop(a);
        let c = pool.draw(12, |b| b.fill(3)).unwrap();
        assert_eq!(c.as_ptr(), a_ptr, "the freed buffer is reused");
        assert!(c.iter().all(|&v| v == 3));
        assert_eq!(pool.buffers.len(), POOL_SIZE);
        // A new capture size replaces the old buffers.
        drop((b, c));
        assert_eq!(pool.draw(6, |b| b.fill(4)).unwrap().len(), 6);
        assert_eq!(pool.buffers.len(), 1);
    }

    #[test]
    fn pillarbox_centres_a_portrait_phone() {
        assert_eq!(active_rect(1920, 1080, 1179, 2556), (711, 0, 498, 1080));
        assert_eq!(active_rect(1080, 1920, 1080, 1920), (0, 0, 1080, 1920));
    }

    #[test]
    fn publishes_frames_of_the_configured_size() {
        let phone = SimPhone::new(SimConfig { fps: 100, ..SimConfig::default() });
        let (hub, reader) = FrameHub::new();
        let guard = Box::new(phone.display()).start(hub).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while reader.latest().is_none_or(|f| f.sequence < 3) {
            assert!(Instant::now() < deadline, "no frames");
            std::thread::sleep(Duration::from_millis(5));
        }
        let frame = reader.latest().unwrap();
        assert_eq!((frame.width, frame.height, frame.data.len()), (1920, 1080, 1920 * 1080 * 3 / 2));
        assert_eq!(frame.format, PixelFormat::Nv12);
        // Outside the pillarbox is black, inside is not.
        let mut px = [0u8; 3];
        assert!(frame.row_rgb(0, 0, 1, &mut px));
        assert_eq!(px, [0, 0, 0]);
        assert!(frame.row_rgb(540, 960, 961, &mut px));
        assert_ne!(px, [0, 0, 0]);
        assert_eq!(reader.state().signal, Signal::Locked);
        drop(guard);
    }

    /// Renders `scene` with the pointer at the centre, pressed or not.
    fn frame_of(scene: &Scene, buttons: u8) -> Vec<u8> {
        let cfg = SimConfig::default();
        let snap = PhoneSnapshot { pointer: (589, 1278), buttons, ..PhoneSnapshot::default() };
        let mut buf = vec![0u8; PixelFormat::Nv12.frame_len(cfg.capture_width, cfg.capture_height).unwrap()];
        render(&cfg, scene, &snap, 0, &mut buf);
        buf
    }

    #[test]
    fn the_pointer_is_translucent_darker_while_pressed_and_the_same_after_release() {
        let ui = super::super::ui::Ui::new(1179, 2556);
        let scene = ui.scene();
        let before = frame_of(&scene, 0);
        let pressed = frame_of(&scene, 1);
        let after = frame_of(&scene, 0);
        assert_eq!(before, after, "the same before a press and after the release");
        // The pointer's centre: (960, 540) in a 1920x1080 capture.
        let luma = |f: &[u8], x: usize, y: usize| f[y * 1920 + x];
        assert!(luma(&pressed, 960, 540) < luma(&before, 960, 540), "darker while pressed");
        // Translucent: over a light app it is lighter than over the dark wallpaper.
        let mut app = super::super::ui::Ui::new(1179, 2556);
        app.touch((190, 350), (190, 350), 80, 0);
        app.tick(10_000);
        let over_app = frame_of(&app.scene(), 0);
        assert!(luma(&over_app, 960, 540) > luma(&before, 960, 540) + 20, "the disc blends over the screen");
        // Text is drawn: the status-bar clock puts ink where the plain wallpaper has none.
        let mut no_text = scene.clone();
        no_text.paint.retain(|p| !matches!(p, Paint::Text(_)));
        assert_ne!(frame_of(&no_text, 0), before, "labels are drawn");
    }
}
