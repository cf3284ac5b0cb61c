//! Closed loop through the daemon API only: screenshots → actions → the virtual iPhone's
//! own account of what it registered (`sim_state`).

// Test code: a panic is how an assertion fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::cast_possible_truncation)]

use serde_json::{json, Value};
use tether::device::hid::Layout;
use tether::device::input::InputTimings;
use tether::device::sim::SimConfig;
use tether_tests::harness::{RawClient, SimDaemon, REPLY_TIMEOUT};
use tether_tests::wait_for;

/// Fast but still glide-respecting timings, so a thousand taps stay quick.
fn fast_timings() -> InputTimings {
    InputTimings {
        settle_ms: 60,
        tap_hold_ms: 30,
        release_gap_ms: 5,
        long_press_ms: 1600,
        swipe_ms: 300,
        key_hold_ms: 5,
        key_gap_ms: 5,
        ..InputTimings::default()
    }
}

fn fast_phone() -> SimConfig {
    SimConfig { glide_ms: 30, fps: 60, ..SimConfig::default() }
}

/// A screenshot plus the numbers needed to turn phone pixels into image pixels.
struct Shot {
    id: String,
    image: (f64, f64),
}

struct Driver {
    c: RawClient,
    next_id: u64,
    screen: (f64, f64),
    /// Whether actions wait for the screen to settle (`expect: any`: these tests check what
    /// the phone registered, not what it shows). Off for the thousand taps, which would
    /// otherwise wait 300 ms each.
    settle: bool,
}

impl Driver {
    async fn new(d: &SimDaemon) -> Driver {
        let mut c = d.connect().await.unwrap();
        let st = c.ok(0, "sim_state", json!({})).await.unwrap();
        let screen = (st["screen_size"][0].as_f64().unwrap(), st["screen_size"][1].as_f64().unwrap());
        Driver { c, next_id: 1, screen, settle: true }
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.id();
        self.c.call(id, method, params).await.unwrap()
    }

    async fn ok(&mut self, method: &str, params: Value) -> Value {
        let reply = self.call(method, params).await;
        assert_eq!(reply["ok"], true, "{method}: {reply}");
        reply["result"].clone()
    }

    async fn shot(&mut self) -> Shot {
        let r = self.ok("screenshot", json!({})).await;
        let m = &r["metadata"];
        assert_eq!(r["mime_type"], "image/png");
        Shot {
            id: m["observation_id"].as_str().unwrap().to_string(),
            image: (m["image_size"]["width"].as_f64().unwrap(), m["image_size"]["height"].as_f64().unwrap()),
        }
    }

    async fn state(&mut self) -> Value {
        self.ok("sim_state", json!({})).await
    }

    async fn element(&mut self, id: &str) -> Value {
        let st = self.state().await;
        st["elements"].as_array().unwrap().iter().find(|e| e["id"] == id).cloned().unwrap_or(Value::Null)
    }

    /// Image pixel for a phone pixel.
    fn to_image(&self, shot: &Shot, px: f64, py: f64) -> (f64, f64) {
        ((px * shot.image.0 / self.screen.0).floor(), (py * shot.image.1 / self.screen.1).floor())
    }

    fn centre(&self, shot: &Shot, e: &Value) -> (f64, f64) {
        let r = &e["rect"];
        let (x, y, w, h) =
            (r["x"].as_f64().unwrap(), r["y"].as_f64().unwrap(), r["w"].as_f64().unwrap(), r["h"].as_f64().unwrap());
        self.to_image(shot, x + w / 2.0, y + h / 2.0)
    }

    async fn act(&mut self, shot: Option<&Shot>, action: Value) -> Value {
        let op = format!("op-{}", self.next_id + 1);
        // These tests check where input lands (`sim_state`), not what the screen shows
        // (tests/act_verify.rs). Settling still matters: like iOS, the sim ignores touches
        // while an app opens or closes.
        let mut params = json!({"operation_id": op, "action": action});
        if self.settle {
            params["expect"] = json!("any");
        } else {
            params["verify"] = json!(false);
        }
        if let Some(s) = shot {
            params["observation_id"] = json!(s.id);
        }
        self.call("action", params).await
    }

    async fn tap(&mut self, shot: &Shot, x: f64, y: f64) {
        let r = self.act(Some(shot), json!({"type": "tap", "x": x, "y": y})).await;
        assert_eq!(r["result"]["status"], "submitted", "{r}");
    }

    async fn tap_element(&mut self, id: &str) {
        let shot = self.shot().await;
        let e = self.element(id).await;
        assert!(!e.is_null(), "{id} not on screen");
        let (x, y) = self.centre(&shot, &e);
        self.tap(&shot, x, y).await;
    }
}

/// A tiny deterministic PRNG (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_random_taps_land_on_their_targets() {
    let d = SimDaemon::start_phone(fast_phone(), fast_timings()).await.unwrap();
    let mut drv = Driver::new(&d).await;
    drv.settle = false;
    let mut rng = Rng(0x7e7e_5eed);
    let mut shot = drv.shot().await;
    let (mut hits, mut total) = (0, 0);
    let mut misses = Vec::new();
    while total < 1000 {
        if total % 25 == 0 {
            shot = drv.shot().await;
        }
        let st = drv.state().await;
        // Tap anything but the list viewport itself (its rows are the targets) and the
        // back button (covered by the home/app round trips anyway).
        let targets: Vec<&Value> = st["elements"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] != "list" && (e["kind"] != "back" || rng.below(10) == 0))
            .filter(|e| e["rect"]["h"].as_f64().unwrap() >= 12.0)
            .collect();
        let e = targets[rng.below(targets.len() as u64) as usize];
        let r = &e["rect"];
        let (x, y, w, h) =
            (r["x"].as_f64().unwrap(), r["y"].as_f64().unwrap(), r["w"].as_f64().unwrap(), r["h"].as_f64().unwrap());
        // A random image pixel whose whole footprint lies inside the element.
        let (sx, sy) = (drv.screen.0 / shot.image.0, drv.screen.1 / shot.image.1);
        let (ix0, ix1) = ((x / sx).ceil(), ((x + w) / sx).floor() - 1.0);
        let (iy0, iy1) = ((y / sy).ceil(), ((y + h) / sy).floor() - 1.0);
        if ix1 < ix0 || iy1 < iy0 {
            continue;
        }
        let ix = ix0 + rng.below((ix1 - ix0) as u64 + 1) as f64;
        let iy = iy0 + rng.below((iy1 - iy0) as u64 + 1) as f64;
        let before = st["touches"].as_array().unwrap().last().map(|t| t["seq"].as_u64().unwrap()).unwrap_or(0);
        drv.tap(&shot, ix, iy).await;
        let after = drv.state().await;
        let touch = after["touches"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(touch["seq"].as_u64().unwrap(), before + 1, "exactly one touch per tap");
        assert_eq!(touch["kind"], "tap");
        total += 1;
        if touch["target"] == e["id"] {
            hits += 1;
        } else {
            misses.push(format!("{} at ({ix},{iy}) landed on {} at {}", e["id"], touch["target"], touch["down"]));
        }
    }
    assert_eq!(hits, 1000, "misses: {misses:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_text_appears_for_every_layout() {
    let samples = [
        (Layout::Us, "Hello, World! 42 @home #tag (ok)?"),
        (Layout::Uk, "Price: £5 for 2 @ shop #1"),
        (Layout::De, "Grüße aus Köln: Straße 7 @ Büro? Ja!"),
        (Layout::Fr, "ça va à l'été, où est-il? 3 @ 9"),
    ];
    for (layout, text) in samples {
        let d = SimDaemon::start_phone(SimConfig { layout, ..fast_phone() }, fast_timings()).await.unwrap();
        let mut drv = Driver::new(&d).await;
        drv.tap_element("app0").await;
        drv.tap_element("text_field").await;
        let r = drv.act(None, json!({"type": "type_text", "text": text})).await;
        assert_eq!(r["result"]["status"], "submitted", "{layout}: {r}");
        let field = drv.element("text_field").await;
        assert_eq!(field["text"], text, "{layout}");
        // Something the layout cannot type is refused whole, naming the character.
        let r = drv.act(None, json!({"type": "type_text", "text": "ok ☃"})).await;
        assert_eq!(r["error"]["code"], "UNTYPEABLE_TEXT");
        assert_eq!(r["error"]["status"], "failed_before_submit");
        assert!(r["error"]["message"].as_str().unwrap().contains("U+2603"));
        assert_eq!(drv.element("text_field").await["text"], text, "nothing typed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swipe_scrolls_long_press_opens_menu_and_home_returns() {
    let d = SimDaemon::start_phone(fast_phone(), fast_timings()).await.unwrap();
    let mut drv = Driver::new(&d).await;
    // Long press on an icon opens its context menu.
    let shot = drv.shot().await;
    let icon = drv.element("app0").await;
    let (x, y) = drv.centre(&shot, &icon);
    let r = drv.act(Some(&shot), json!({"type": "long_press", "x": x, "y": y})).await;
    assert_eq!(r["result"]["status"], "submitted");
    assert!(drv.element("menu_app0").await.is_object(), "context menu open");
    assert_eq!(drv.state().await["touches"].as_array().unwrap().last().unwrap()["kind"], "long_press");
    drv.tap_element("app0").await; // dismisses the menu
    drv.tap_element("app0").await; // opens the app (Demo, with its list)
    assert_eq!(drv.state().await["screen"], "app");
    // Scrolling down the list by dragging.
    let shot = drv.shot().await;
    let list = drv.element("list").await;
    let (x, y) = drv.centre(&shot, &list);
    let r = drv.act(Some(&shot), json!({"type": "scroll", "x": x, "y": y, "direction": "down"})).await;
    assert_eq!(r["result"]["status"], "submitted", "{r}");
    let offset = drv.element("list").await["scroll_offset"].as_i64().unwrap();
    assert!(offset > 500, "list scrolled by {offset}");
    assert!(drv.element("row0").await.is_null(), "first row scrolled away");
    // Cmd+H goes home.
    let r = drv.act(None, json!({"type": "home"})).await;
    assert_eq!(r["result"]["status"], "submitted");
    assert_eq!(drv.state().await["screen"], "home");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pressing_before_the_glide_ends_misses() {
    let slow_glide = SimConfig { glide_ms: 400, ..fast_phone() };
    let too_early = InputTimings { settle_ms: 10, ..fast_timings() };
    let d = SimDaemon::start_phone(slow_glide, too_early).await.unwrap();
    let mut drv = Driver::new(&d).await;
    let shot = drv.shot().await;
    // The pointer starts mid-screen; aim far away at the top-left icon.
    let icon = drv.element("app0").await;
    let (x, y) = drv.centre(&shot, &icon);
    drv.tap(&shot, x, y).await;
    let touch = drv.state().await["touches"].as_array().unwrap().last().unwrap().clone();
    assert_ne!(touch["target"], "app0", "a press before the glide ends must miss: {touch}");
    assert_eq!(drv.state().await["screen"], "home");
    // With the settle longer than the glide, the same tap lands.
    drop(drv);
    drop(d);
    let d = SimDaemon::start_phone(slow_glide, InputTimings { settle_ms: 450, ..fast_timings() }).await.unwrap();
    let mut drv = Driver::new(&d).await;
    drv.tap_element("app0").await;
    assert_eq!(drv.state().await["screen"], "app");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observation_and_operation_errors() {
    let d = SimDaemon::start_phone(fast_phone(), fast_timings()).await.unwrap();
    let mut drv = Driver::new(&d).await;
    let shot = drv.shot().await;
    // Outside the image.
    let r = drv.act(Some(&shot), json!({"type": "tap", "x": shot.image.0, "y": 10})).await;
    assert_eq!(r["error"]["code"], "OUT_OF_BOUNDS", "{r}");
    assert_eq!(r["error"]["status"], "failed_before_submit");
    let r = drv.act(Some(&shot), json!({"type": "tap", "x": -1, "y": 10})).await;
    assert_eq!(r["error"]["code"], "OUT_OF_BOUNDS");
    // Unknown (or expired: older than 30 s, see daemon::observations tests) observation.
    let r = drv
        .call(
            "action",
            json!({"operation_id": "x1", "observation_id": "obs_1_999", "action": {"type": "tap", "x": 1, "y": 1}}),
        )
        .await;
    assert_eq!(r["error"]["code"], "OBSERVATION_EXPIRED");
    // Pointer action without an observation.
    let r = drv.call("action", json!({"operation_id": "x2", "action": {"type": "tap", "x": 1, "y": 1}})).await;
    assert_eq!(r["error"]["code"], "INVALID_PARAMS");
    // Idempotency: same id + args → cached; different args → conflict.
    let params = json!({"operation_id": "same", "observation_id": shot.id, "action": {"type": "move", "x": 5, "y": 5}});
    let first = drv.call("action", params.clone()).await;
    assert_eq!(first["result"]["status"], "submitted");
    let reports = drv.state().await["input"]["reports"].clone();
    let again = drv.call("action", params).await;
    assert_eq!(again["result"], first["result"], "cached result returned");
    assert_eq!(drv.state().await["input"]["reports"], reports, "not sent twice");
    let other = json!({"operation_id": "same", "observation_id": shot.id, "action": {"type": "move", "x": 6, "y": 5}});
    let r = drv.call("action", other).await;
    assert_eq!(r["error"]["code"], "OPERATION_CONFLICT");
    // A generation change (replug) makes the observation stale, once the daemon has seen a
    // frame of the new generation.
    let generation = drv.ok("status", json!({})).await["video"]["generation"].as_u64().unwrap();
    d.phone.replug();
    wait_for!(REPLY_TIMEOUT, "a frame of the new video generation", {
        let now = drv.ok("status", json!({})).await["video"]["generation"].as_u64().unwrap();
        (now > generation).then_some(())
    });
    let r = drv.act(Some(&shot), json!({"type": "tap", "x": 5, "y": 5})).await;
    assert_eq!(r["error"]["code"], "STALE_OBSERVATION", "{r}");
    let fresh = drv.shot().await;
    assert_ne!(fresh.id, shot.id);
    let r = drv.act(Some(&fresh), json!({"type": "move", "x": 5, "y": 5})).await;
    assert_eq!(r["result"]["status"], "submitted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_drag_releases_the_button() {
    let d = SimDaemon::start_phone(fast_phone(), fast_timings()).await.unwrap();
    let mut drv = Driver::new(&d).await;
    let shot = drv.shot().await;
    // As long as a drag may be (5 s; the cancel ends it), so that however slowly a loaded
    // machine gets to the cancel, the finger is still down.
    let drag = json!({"id": 500, "method": "action", "operation_id": "long-drag", "observation_id": shot.id,
        "action": {"type": "drag", "path": [{"x": 100, "y": 900}, {"x": 100, "y": 100}], "duration_ms": 5000}});
    drv.c.send(&drag.to_string()).await.unwrap();
    // Down, and moved well past the phone's tap slop (24 px), so the touch counts as a drag.
    let mut first_y = None;
    wait_for!(REPLY_TIMEOUT, "the finger to go down and move mid-drag", {
        let input = drv.state().await["input"].clone();
        let y = input["pointer"][1].as_i64().unwrap();
        let down = input["buttons"] == 1;
        let start = *first_y.get_or_insert(y);
        if !down {
            first_y = None;
        }
        (down && start - y >= 60).then_some(())
    });
    // The drag's reply (INTERRUPTED: it was cut short on the phone) may arrive before or
    // after the cancel's own: the client
    // keeps whichever comes first.
    let cancel = drv.ok("cancel", json!({"request_id": 500})).await;
    assert_eq!(cancel["cancelled"], true);
    let reply = drv.c.reply(500, REPLY_TIMEOUT).await.unwrap();
    assert_eq!(reply["error"]["code"], "INTERRUPTED", "{reply}");
    assert_eq!(reply["error"]["side_effect_possible"], true);
    assert_eq!(reply["error"]["status"], "outcome_unknown");
    let st = drv.state().await;
    assert_eq!(st["input"]["buttons"], 0, "no button held after cancel");
    assert_eq!(st["touches"].as_array().unwrap().last().unwrap()["kind"], "drag");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn screenshot_limits_and_region() {
    let d =
        SimDaemon::start_phone(SimConfig { capture_width: 3840, capture_height: 2160, ..fast_phone() }, fast_timings())
            .await
            .unwrap();
    let mut drv = Driver::new(&d).await;
    let r = drv.ok("screenshot", json!({})).await;
    let m = &r["metadata"];
    assert_eq!(m["source_size"]["width"], 3840);
    assert_eq!(m["image_size"]["height"], 1568, "max_edge defaults to 1568");
    assert!(r["data"].as_str().unwrap().len() * 3 / 4 <= 1 << 20, "at most 1 MiB");
    let frame = m["frame_id"].as_u64().unwrap();
    let newer = drv.ok("screenshot", json!({"after_frame_id": frame, "timeout_ms": 2000, "max_edge": 256})).await;
    assert!(newer["metadata"]["frame_id"].as_u64().unwrap() > frame);
    assert_eq!(newer["metadata"]["image_size"]["height"], 256);
    let region = drv.ok("screenshot", json!({"region": {"x": 10, "y": 20, "width": 100, "height": 50}})).await;
    assert_eq!(region["metadata"]["image_size"], json!({"width": 100, "height": 50}));
    let r = drv.call("screenshot", json!({"region": {"x": 0, "y": 0, "width": 5000, "height": 50}})).await;
    assert_eq!(r["error"]["code"], "INVALID_PARAMS");
    let r = drv.call("screenshot", json!({"max_edge": 10})).await;
    assert_eq!(r["error"]["code"], "INVALID_PARAMS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preview_is_small_and_cannot_authorize_input() {
    let d = SimDaemon::start_phone(fast_phone(), fast_timings()).await.unwrap();
    let mut drv = Driver::new(&d).await;
    let p = drv.ok("preview", json!({})).await;
    assert_eq!(p["metadata"]["image_size"]["height"], 480);
    assert!(p["metadata"]["observation_id"].is_null());
    let frame = p["metadata"]["frame_id"].as_u64().unwrap();
    let same = drv.ok("preview", json!({"after_frame_id": frame + 1_000_000, "timeout_ms": 50})).await;
    assert_eq!(same["unchanged"], true);
    let r = drv.call("preview", json!({"max_edge": 2000})).await;
    assert_eq!(r["error"]["code"], "INVALID_PARAMS");
}

/// Distance in phone pixels between where each tap was aimed and where the phone registered it.
async fn aim_errors(drv: &mut Driver, targets: &[&str]) -> Vec<(String, bool, f64)> {
    let mut out = Vec::new();
    for id in targets {
        let shot = drv.shot().await;
        let e = drv.element(id).await;
        let (ix, iy) = drv.centre(&shot, &e);
        drv.tap(&shot, ix, iy).await;
        let touch = drv.state().await["touches"].as_array().unwrap().last().unwrap().clone();
        // The phone point the image pixel's centre stands for.
        let aim = ((ix + 0.5) * drv.screen.0 / shot.image.0, (iy + 0.5) * drv.screen.1 / shot.image.1);
        let down = (touch["down"][0].as_f64().unwrap(), touch["down"][1].as_f64().unwrap());
        out.push((id.to_string(), touch["target"] == *id, (down.0 - aim.0).hypot(down.1 - aim.1)));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calibration_removes_scale_and_offset_error() {
    let skewed = SimConfig { pointer_scale_error_permille: 30, pointer_offset_px: (20, 20), ..fast_phone() };
    let d = SimDaemon::start_phone(skewed, fast_timings()).await.unwrap();
    let mut drv = Driver::new(&d).await;
    drv.tap_element("app0").await; // into the app (the icon is big enough to hit anyway)
    assert_eq!(drv.state().await["screen"], "app");
    // Rows low on the screen: 3 % of 2556 px plus 20 px puts taps ~95 px too low.
    let shot = drv.shot().await;
    let list = drv.element("list").await;
    let (x, y) = drv.centre(&shot, &list);
    drv.act(Some(&shot), json!({"type": "scroll", "x": x, "y": y, "direction": "down", "distance": 1})).await;
    let rows: Vec<String> = drv.state().await["elements"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "list_row" && e["rect"]["h"].as_i64().unwrap() > 100)
        .map(|e| e["id"].as_str().unwrap().to_string())
        .rev()
        .take(4)
        .collect();
    let targets: Vec<&str> = rows.iter().map(String::as_str).chain(["toggle2", "button0"]).collect();
    let before = aim_errors(&mut drv, &targets).await;
    assert!(before.iter().any(|(_, hit, _)| !hit), "taps must miss before calibration: {before:?}");
    assert!(before.iter().all(|(_, _, err)| *err > 20.0), "{before:?}");

    let cal = drv.ok("calibrate", json!({})).await;
    assert_eq!(cal["orientation"], "portrait");
    let residual = cal["residual"]["phone_max"].as_f64().unwrap();
    assert!(residual <= 2.0, "residual {residual} phone px: {cal}");

    let after = aim_errors(&mut drv, &targets).await;
    assert!(after.iter().all(|(_, hit, _)| *hit), "taps must land after calibration: {after:?}");
    let worst = after.iter().map(|(_, _, e)| *e).fold(0.0, f64::max);
    assert!(worst <= 2.0, "worst aim error {worst} phone px: {after:?}; calibration: {cal}");

    // Persisted: a reset forgets it and the error comes back.
    let reset = drv.ok("calibrate", json!({"reset": true})).await;
    assert_eq!(reset["reset"], true);
    let again = aim_errors(&mut drv, &targets[..1]).await;
    assert!(again[0].2 > 20.0, "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relative_profile_accuracy() {
    use tether::daemon::DaemonOptions;
    use tether::device::hid::descriptor::PointerProfile;
    let options = DaemonOptions {
        timings: fast_timings(),
        pointer_profile: PointerProfile::Relative,
        ..DaemonOptions::default()
    };
    let d = SimDaemon::start_options(fast_phone(), options).await.unwrap();
    let mut drv = Driver::new(&d).await;
    drv.tap_element("app1").await;
    assert_eq!(drv.state().await["screen"], "app", "first tap homes, then lands");
    let mut rng = Rng(0xbeef);
    let (mut hits, mut worst, mut sum, n) = (0, 0.0f64, 0.0, 40);
    let mut shot = drv.shot().await;
    for i in 0..n {
        if i % 10 == 0 {
            shot = drv.shot().await; // relative taps are slow: stay inside the 30 s lifetime
        }
        let st = drv.state().await;
        let targets: Vec<&Value> = st["elements"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| matches!(e["kind"].as_str(), Some("button" | "toggle" | "list_row" | "text_field")))
            .filter(|e| e["rect"]["h"].as_f64().unwrap() > 60.0)
            .collect();
        let e = targets[rng.below(targets.len() as u64) as usize];
        let (ix, iy) = drv.centre(&shot, e);
        drv.tap(&shot, ix, iy).await;
        let touch = drv.state().await["touches"].as_array().unwrap().last().unwrap().clone();
        let aim = ((ix + 0.5) * drv.screen.0 / shot.image.0, (iy + 0.5) * drv.screen.1 / shot.image.1);
        let err = (touch["down"][0].as_f64().unwrap() - aim.0).hypot(touch["down"][1].as_f64().unwrap() - aim.1);
        worst = worst.max(err);
        sum += err;
        hits += usize::from(touch["target"] == e["id"]);
    }
    eprintln!("relative profile: {hits}/{n} taps on target, mean error {:.1} px, worst {worst:.1} px", sum / n as f64);
    assert_eq!(hits, n, "relative taps must land on their targets");
    assert!(worst <= 4.0, "dead reckoning at base gain stays within one count (3 px): worst {worst}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_keys_reach_the_phone() {
    let d = SimDaemon::start_phone(fast_phone(), fast_timings()).await.unwrap();
    let mut drv = Driver::new(&d).await;
    let before = drv.state().await["volume"].as_u64().unwrap();
    for _ in 0..3 {
        let r = drv.act(None, json!({"type": "consumer", "key": "volume_up"})).await;
        assert_eq!(r["result"]["status"], "submitted");
    }
    assert_eq!(drv.state().await["volume"].as_u64().unwrap(), before + 3);
    let r = drv.act(None, json!({"type": "consumer", "key": "volume_down"})).await;
    assert_eq!(r["result"]["status"], "submitted");
    assert_eq!(drv.state().await["volume"].as_u64().unwrap(), before + 2);
    assert_eq!(drv.state().await["input"]["consumer_usage"], 0, "released");
}
