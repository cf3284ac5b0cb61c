//! Whether `open_app` opened an app, and what it does when not: answer `APP_NOT_OPENED`
//! with a fresh observation, after dismissing Spotlight (Cmd+H) so the phone is left on
//! the home screen.
//!
//! One question, [`Foreground::app_opened`], answered two ways:
//! - the sim knows: its state says whether an app is in front;
//! - a phone is judged by its picture: Spotlight is gone (the settled picture differs from
//!   the one sampled once Spotlight had opened over at least [`SPOTLIGHT_GONE`] of the
//!   screen) and the picture is not the home screen (the settled picture of the last
//!   verified `home`, when there was one).
//!
//! Limits of the picture rule: Return on a web or Siri suggestion opens Safari or a card,
//! which is "an app opened" to it; an app whose first screen looks like the home screen
//! (or a home screen on another page than the one recorded) is judged by the first half
//! only; with no recorded home picture the second half is skipped. It never says "not
//! opened" for an app that did open, save one that looks exactly like Spotlight.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::play::Abandoned;
use super::settle::{Answer, Sample, Until, WatchFor};
use super::{Daemon, DaemonError, InputStep, Session};
use crate::device::input::{self, plan, Gesture};
use crate::device::sim::{Screen, SimPhone};
use crate::device::video::luma::{changed_fraction, changed_region, ChangeRules, LumaThumb};
use crate::protocol::params::ReturnImage;
use crate::protocol::Acting;

/// How much of the screen must differ from Spotlight's picture for Spotlight to be gone.
pub const SPOTLIGHT_GONE: f64 = 0.5;
/// How long `open_app` waits after Cmd+Space for Spotlight's field to take focus.
pub const SPOTLIGHT_FOCUS: Duration = Duration::from_millis(400);

/// What knows whether an app is in front.
pub(super) trait Foreground {
    /// `Some(true)`: an app is in front; `Some(false)`: none is (Spotlight, the home
    /// screen); `None`: it cannot tell.
    fn app_opened(&self) -> Option<bool>;
}

/// The sim: its own state, and the name asked for.
struct SimForeground<'a> {
    sim: &'a SimPhone,
    name: &'a str,
}

impl Foreground for SimForeground<'_> {
    fn app_opened(&self) -> Option<bool> {
        // The app in front must be the one asked for: Spotlight opens its top hit, whose
        // name starts with what was typed (or contains it); any other app is not it.
        let state = self.sim.state();
        let wanted = self.name.trim().to_lowercase();
        let front = state.app.filter(|_| state.screen == Screen::App).map(|a| a.to_lowercase());
        Some(front.is_some_and(|a| !wanted.is_empty() && a.contains(&wanted)))
    }
}

/// A phone: its pictures.
pub(super) struct PictureForeground<'a> {
    /// The picture sampled once Spotlight had opened (`None`: not sampled).
    pub spotlight: Option<&'a LumaThumb>,
    /// The settled picture of the last verified `home`, if any.
    pub home: Option<&'a LumaThumb>,
    /// The settled picture now.
    pub now: &'a LumaThumb,
    /// What counts as a change.
    pub rules: &'a ChangeRules,
}

impl Foreground for PictureForeground<'_> {
    fn app_opened(&self) -> Option<bool> {
        let spotlight = self.spotlight?;
        let gone = changed_fraction(spotlight, self.now, self.rules) >= SPOTLIGHT_GONE;
        let home = self.home.is_some_and(|h| changed_region(h, self.now, self.rules).is_none());
        Some(gone && !home)
    }
}

impl Daemon {
    /// After a verified `open_app`: `verified` as it is when an app opened (or when it
    /// cannot tell); otherwise Spotlight is dismissed and the answer is `APP_NOT_OPENED`
    /// with the fresh observation of the screen after that.
    #[allow(clippy::too_many_arguments)] // one call site; the request's whole context
    pub(super) async fn check_opened(
        &self,
        session: &Session,
        acting: Acting,
        name: &str,
        spotlight: Option<&Sample>,
        verified: Result<Map<String, Value>, DaemonError>,
        image_edge: Option<u32>,
        cancel: &CancellationToken,
    ) -> Result<Map<String, Value>, DaemonError> {
        match &verified {
            Ok(_) | Err(DaemonError::NoVisibleEffect { .. }) => {}
            Err(_) => return verified,
        }
        let opened = match &self.inner.sim {
            Some(sim) => SimForeground { sim, name }.app_opened(),
            None => {
                let Some(now) = self.sample_now(cancel).await? else {
                    return verified;
                };
                let rules = self.change_rules(&now.active, &[]);
                let home = self.inner.phone.state().home_picture.clone();
                PictureForeground {
                    spotlight: spotlight.map(|s| s.thumb.as_ref()),
                    home: home.as_deref(),
                    now: &now.thumb,
                    rules: &rules,
                }
                .app_opened()
            }
        };
        if opened != Some(false) {
            return verified;
        }
        tracing::info!(name, "open_app: no app came to the front; dismissing Spotlight");
        let effect = self.dismiss_spotlight(session, acting, image_edge, cancel).await?;
        Err(DaemonError::AppNotOpened { name: name.chars().take(128).collect(), effect: Box::new(effect) })
    }

    /// Cmd+H, then the screen once settled: the fields of a verified answer.
    async fn dismiss_spotlight(
        &self,
        session: &Session,
        acting: Acting,
        image_edge: Option<u32>,
        cancel: &CancellationToken,
    ) -> Result<Map<String, Value>, DaemonError> {
        let steps: Vec<InputStep> = plan(&Gesture::Key(input::HOME), &self.inner.timings);
        let mut turn = self.acquire_device(session, acting, None, cancel).await?;
        let baseline = self.sample_now(cancel).await?.ok_or(DaemonError::NoFrame)?;
        turn.run(&steps, Abandoned::default()).await?;
        let ended = std::time::Instant::now();
        drop(turn);
        let settings = self.act_settings();
        let rules = self.change_rules(&baseline.active, &[]);
        let what = WatchFor {
            quiet: Duration::from_millis(settings.quiet_ms),
            timeout: Duration::from_millis(settings.timeout_ms),
            until: Until::Settled,
        };
        let watched = self.watch(&baseline, &rules, ended, what, cancel).await?;
        let answer = Answer {
            from: ended,
            image_edge,
            task: acting.task(),
            return_image: ReturnImage::None,
            rules: &rules,
            text: None,
        };
        let mut fields = self.answer(&watched, answer).await?;
        fields.insert("dismissed".into(), "spotlight".into());
        Ok(fields)
    }

    /// Remembers the settled home screen (after a verified `home`), for the picture rule.
    pub(super) fn remember_home(&self, picture: Arc<LumaThumb>) {
        self.inner.phone.state().home_picture = Some(picture);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::video::Frame;

    fn painted(paint: &dyn Fn(u32, u32) -> u8) -> LumaThumb {
        let (w, h) = (100u32, 200u32);
        let data: Vec<u8> = (0..h).flat_map(|y| (0..w).flat_map(move |x| [paint(x, y); 3])).collect();
        LumaThumb::of(&Frame::rgb(1, 1, w, h, data), 100)
    }

    #[test]
    fn the_picture_rule_wants_spotlight_gone_and_no_home_screen() {
        let rules = ChangeRules::default();
        let spotlight = painted(&|_, y| if y < 40 { 230 } else { 120 });
        let home = painted(&|x, y| if (x / 20 + y / 20) % 2 == 0 { 60 } else { 180 });
        let app = painted(&|_, _| 245);
        // Spotlight still there, with the name typed: a small change.
        let typed = painted(&|x, y| {
            if y < 40 && x < 30 {
                20
            } else if y < 40 {
                230
            } else {
                120
            }
        });
        let check = |now: &LumaThumb, home_known: bool| {
            PictureForeground { spotlight: Some(&spotlight), home: home_known.then_some(&home), now, rules: &rules }
                .app_opened()
        };
        assert_eq!(check(&app, true), Some(true), "an app covers Spotlight");
        assert_eq!(check(&typed, true), Some(false), "Spotlight stayed");
        assert_eq!(check(&home, true), Some(false), "back on the home screen");
        assert_eq!(check(&home, false), Some(true), "with no home picture, only Spotlight's going is judged");
        let unsampled = PictureForeground { spotlight: None, home: None, now: &app, rules: &rules };
        assert_eq!(unsampled.app_opened(), None, "no Spotlight picture: cannot tell");
    }
}
