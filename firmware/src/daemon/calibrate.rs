//! `calibrate`: find where the pointer really goes, from video, and correct for it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use tokio_util::sync::CancellationToken;

use super::{Daemon, DaemonError, InputStep, Session};
use crate::device::calibration::{locate_pointer, Affine, CalibrationPoint, PointerSample};
use crate::device::geometry::PixelRect;
use crate::device::hid::{HidReport, PointerReport, POINTER_MAX};
use crate::protocol::params::CalibrateParams;
use crate::protocol::Acting;

/// Which way the phone's picture is oriented; each has its own calibration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Orientation {
    /// Taller than wide.
    Portrait,
    /// Wider than tall.
    Landscape,
}

impl Orientation {
    /// The orientation of a picture rectangle.
    pub fn of(rect: &PixelRect) -> Orientation {
        if rect.height >= rect.width {
            Orientation::Portrait
        } else {
            Orientation::Landscape
        }
    }
}

/// Stored calibrations, one per orientation (persisted as JSON in the data directory).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Calibrations {
    /// Portrait map.
    pub portrait: Option<Affine>,
    /// Landscape map.
    pub landscape: Option<Affine>,
}

impl Calibrations {
    /// The map for `o`.
    pub fn get(&self, o: Orientation) -> Option<Affine> {
        match o {
            Orientation::Portrait => self.portrait,
            Orientation::Landscape => self.landscape,
        }
    }

    fn set(&mut self, o: Orientation, a: Option<Affine>) {
        match o {
            Orientation::Portrait => self.portrait = a,
            Orientation::Landscape => self.landscape = a,
        }
    }

    /// Reads `path`; a missing or unreadable file means no calibration (logged).
    pub fn load(path: &Path) -> Calibrations {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(path = %path.display(), error = %e, "ignoring unreadable calibration file");
                Calibrations::default()
            }),
            Err(_) => Calibrations::default(),
        }
    }
}

/// The calibration file inside the data directory.
pub fn calibration_file(data_dir: &Path) -> PathBuf {
    data_dir.join("calibration.json")
}

/// Grid points per side by default, and the allowed range.
const DEFAULT_GRID: u32 = 4;
/// Grid spans this fraction of the screen, centred: edges are avoided because a pointer
/// pushed past the screen's edge stops there and would bias the fit.
const GRID_SPAN: f64 = 0.76;

impl Daemon {
    /// HID units for a normalized picture position, through the calibration if any.
    pub(super) fn calibrated_hid(&self, n: (f64, f64), active: &PixelRect) -> (u16, u16) {
        let map = self.calibrations().get(Orientation::of(active)).unwrap_or_else(Affine::identity);
        map.to_hid(n)
    }

    /// Which orientations are calibrated.
    pub(super) fn calibration_status(&self) -> super::status::CalibrationStatus {
        let c = self.calibrations();
        super::status::CalibrationStatus { portrait: c.portrait.is_some(), landscape: c.landscape.is_some() }
    }

    fn calibrations(&self) -> Calibrations {
        self.inner.phone.state().calibrations
    }

    /// Saves the calibrations with `orientation`'s set to `affine`, then makes that the
    /// calibration in use: a calibration answered is on disk. When the file cannot be
    /// written, nothing changes and the answer is `STORAGE_FAILED`.
    async fn save_calibration(&self, orientation: Orientation, affine: Option<Affine>) -> Result<(), DaemonError> {
        if let Some(dir) = &self.inner.data_dir {
            let mut snapshot = self.calibrations();
            snapshot.set(orientation, affine);
            let path = calibration_file(dir);
            let tmp = path.with_extension("json.tmp");
            let write = async {
                tokio::fs::create_dir_all(dir).await?;
                let written = async {
                    let mut file = tokio::fs::File::create(&tmp).await?;
                    file.write_all(&serde_json::to_vec_pretty(&snapshot).unwrap_or_default()).await?;
                    file.sync_all().await
                };
                if let Err(e) = written.await {
                    // A half-written file only takes space.
                    let _ = tokio::fs::remove_file(&tmp).await;
                    return Err(e);
                }
                tokio::fs::rename(&tmp, &path).await
            };
            if let Err(e) = write.await {
                let why = super::storage::Unwritable::of_io(&e);
                tracing::error!(path = %path.display(), error = %e, "could not save the calibration; it was not changed");
                self.inner.store.health().failed(why);
                return Err(why.into());
            }
            self.inner.store.health().succeeded();
        }
        self.inner.phone.state().calibrations.set(orientation, affine);
        Ok(())
    }

    /// `calibrate` (and `calibrate reset`): admitted like any input, so during someone
    /// else's task it is refused, and a pause or takeover interrupts it.
    pub(super) async fn calibrate(
        &self,
        session: &Session,
        acting: Acting,
        p: &CalibrateParams,
        cancel: &CancellationToken,
    ) -> Result<Value, DaemonError> {
        let mut turn = self.acquire_device(session, acting, None, cancel).await?;
        let active = {
            // Only its geometry is needed: holding the frame would hold a capture buffer.
            let frame = self.frame_after(None, Duration::from_secs(2), cancel).await?;
            self.active_rect(&frame)
        };
        let orientation = Orientation::of(&active);
        // The status-bar clock and the like change by themselves: not the pointer.
        let ignore: Vec<PixelRect> = self.act_settings().ignore.iter().map(|r| r.in_frame(&active)).collect();
        if p.reset.unwrap_or(false) {
            self.save_calibration(orientation, None).await?;
            self.geometry_changed("the calibration was reset");
            drop(turn);
            return Ok(json!({"orientation": orientation, "reset": true}));
        }
        let grid = p.grid.unwrap_or(DEFAULT_GRID);
        let targets: Vec<(u16, u16)> = grid_points(grid);
        // Each frame is reduced to a small sample of the active area as soon as it arrives
        // (the capture buffer goes back at once), and each point is located as soon as its
        // next neighbour exists: samples 0 and 1 (needed again at the end, the grid is a
        // cycle) plus a window of three are all that is ever held.
        let count = targets.len();
        let mut samples: Vec<Option<PointerSample>> = vec![None; count];
        let mut located: Vec<Option<(f64, f64)>> = vec![None; count];
        // Twice the settle time: the pointer must have fully arrived before the frame.
        let settle = Duration::from_millis(self.inner.timings.settle_ms.max(50).saturating_mul(2));
        for (k, &(x, y)) in targets.iter().enumerate() {
            let step = InputStep::Report(HidReport::Pointer(PointerReport::new(0, x, y, 0)));
            turn.run(&[step, InputStep::Wait(settle)], super::play::Abandoned::default()).await?;
            let seen = self.inner.frames.latest().map(|f| f.sequence);
            let frame = self.frame_after(seen, Duration::from_secs(2), cancel).await?;
            samples[k] = Some(PointerSample::take(&frame, active));
            drop(frame);
            if k >= 2 {
                located[k - 1] = Some(locate_at(&samples, k - 1, &ignore)?);
                if k - 2 >= 2 {
                    samples[k - 2] = None;
                }
            }
        }
        drop(turn);
        // The cycle closes: the last point against its predecessor and point 0, point 0
        // against the last point and point 1.
        for k in [count - 1, 0] {
            located[k] = Some(locate_at(&samples, k, &ignore)?);
        }
        let mut points = Vec::with_capacity(count);
        for (&(hx, hy), at) in targets.iter().zip(located) {
            // Every index was filled above: 1..count-1 in the loop, count-1 and 0 after it.
            let (cx, cy) = at.ok_or_else(|| DaemonError::Calibration("a calibration point was skipped".into()))?;
            let n = (
                (cx - f64::from(active.x)) / f64::from(active.width),
                (cy - f64::from(active.y)) / f64::from(active.height),
            );
            points.push(CalibrationPoint { normalized: n, hid: (f64::from(hx), f64::from(hy)) });
        }
        let affine = Affine::fit(&points).ok_or_else(|| {
            DaemonError::Calibration("the measured points are degenerate; nothing was changed".into())
        })?;
        let residual = Residual::of(&affine, &points, &active, self.inner.sim.as_ref().map(|s| s.config()));
        self.save_calibration(orientation, Some(affine)).await?;
        self.geometry_changed("the calibration changed");
        tracing::info!(?orientation, max_px = residual.picture_max, "calibrated");
        Ok(json!({
            "orientation": orientation,
            "points": points,
            "affine": affine,
            "residual": residual,
        }))
    }
}

/// How well the fitted map explains the measurements.
#[derive(Debug, Clone, Copy, Serialize)]
struct Residual {
    /// Largest error in capture-picture pixels.
    picture_max: f64,
    /// RMS error in capture-picture pixels.
    picture_rms: f64,
    /// Largest error in phone pixels (sim only: real phones do not tell their pixel size).
    phone_max: Option<f64>,
    /// RMS error in phone pixels (sim only).
    phone_rms: Option<f64>,
}

impl Residual {
    fn of(
        a: &Affine,
        points: &[CalibrationPoint],
        active: &PixelRect,
        sim: Option<crate::device::sim::SimConfig>,
    ) -> Residual {
        let full = f64::from(POINTER_MAX) + 1.0;
        let errors = |w: f64, h: f64| -> (f64, f64) {
            let mut max = 0.0f64;
            let mut sum = 0.0;
            for p in points {
                let (px, py) = a.apply(p.normalized);
                let e = ((px - p.hid.0) / full * w).hypot((py - p.hid.1) / full * h);
                max = max.max(e);
                sum += e * e;
            }
            // A handful of points: the count is exact in f64.
            #[allow(clippy::cast_precision_loss)]
            let n = points.len().max(1) as f64;
            (max, (sum / n).sqrt())
        };
        let (picture_max, picture_rms) = errors(f64::from(active.width), f64::from(active.height));
        let phone = sim.map(|s| errors(f64::from(s.phone_width), f64::from(s.phone_height)));
        Residual { picture_max, picture_rms, phone_max: phone.map(|p| p.0), phone_rms: phone.map(|p| p.1) }
    }
}

/// `n`x`n` HID points spanning the middle of the screen, in a serpentine order so that
/// consecutive points are neighbours (never far apart, never the same).
/// Finds the pointer in sample `k` against its neighbours on the cycle of grid points.
/// `ignore`: frame regions whose changes are not the pointer (`[act] ignore`: the clock).
fn locate_at(samples: &[Option<PointerSample>], k: usize, ignore: &[PixelRect]) -> Result<(f64, f64), DaemonError> {
    let count = samples.len();
    let get = |i: usize| samples.get(i).and_then(Option::as_ref);
    let found = match (get((k + count - 1) % count), get(k), get((k + 1) % count)) {
        (Some(prev), Some(current), Some(next)) => locate_pointer(prev, current, next, ignore),
        _ => None,
    };
    found.ok_or_else(|| {
        DaemonError::Calibration(format!(
            "the pointer was not found at calibration point {} of {count}: is AssistiveTouch on, the pointer \
             visible, and the screen still?",
            k + 1
        ))
    })
}

fn grid_points(n: u32) -> Vec<(u16, u16)> {
    let n = n.max(2);
    let full = f64::from(POINTER_MAX) + 1.0;
    let at = |i: u32| {
        let v = ((1.0 - GRID_SPAN) / 2.0 + GRID_SPAN * f64::from(i) / f64::from(n - 1)) * full;
        crate::device::geometry::normalized_to_hid(v / full)
    };
    let mut out = Vec::new();
    for row in 0..n {
        for c in 0..n {
            let col = if row % 2 == 0 { c } else { n - 1 - c };
            out.push((at(col), at(row)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_is_serpentine_inside_the_edges() {
        let g = grid_points(3);
        assert_eq!(g.len(), 9);
        assert_eq!(g[2].0, g[3].0, "row 1 starts under where row 0 ended");
        assert_ne!(g[2].1, g[3].1);
        assert!(g.iter().all(|&(x, y)| (3900..=28900).contains(&x) && (3900..=28900).contains(&y)), "{g:?}");
        let mut unique = g.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 9);
    }

    #[test]
    fn orientation_and_persistence() {
        assert_eq!(Orientation::of(&PixelRect { x: 0, y: 0, width: 10, height: 20 }), Orientation::Portrait);
        assert_eq!(Orientation::of(&PixelRect { x: 0, y: 0, width: 20, height: 10 }), Orientation::Landscape);
        let dir = tempfile::tempdir().unwrap();
        let path = calibration_file(dir.path());
        assert_eq!(Calibrations::load(&path), Calibrations::default());
        let c = Calibrations { portrait: Some(Affine::identity()), landscape: None };
        std::fs::write(&path, serde_json::to_vec(&c).unwrap()).unwrap();
        assert_eq!(Calibrations::load(&path), c);
        std::fs::write(&path, b"{broken").unwrap();
        assert_eq!(Calibrations::load(&path), Calibrations::default());
    }
}
