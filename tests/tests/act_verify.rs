//! Act and verify against the virtual iPhone (issue 17): every action watches the screen
//! until it settles and says what changed. The sim animates like a phone (app open and
//! close, list scrolls, a spinner before a result), has a control that does nothing, a
//! blinking caret and a ticking clock, so these checks mean something.

// Test code: a panic is how an assertion fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::cast_possible_truncation)]

use std::time::Duration;

use serde_json::{json, Value};
use tether::device::input::InputTimings;
use tether::device::sim::{SimConfig, CARET_HALF_PERIOD_MS, LOAD_MS, OPEN_MS, SCROLL_MS};
use tether_tests::harness::{Caller, SimDaemon, REPLY_TIMEOUT};
use tether_tests::wait_for;

const FPS: u32 = 60;

/// One frame at the sim's rate, in ms (rounded up).
fn frame_ms() -> u64 {
    u64::from(1000u32.div_ceil(FPS))
}

/// How long before the last report the phone saw the tap end: the release is sent again
/// `release_repeats` times, `release_gap_ms` apart, and settling is timed from the last.
fn release_tail_ms() -> u64 {
    let t = InputTimings::default();
    u64::from(t.release_repeats) * t.release_gap_ms
}

/// Scheduling slack on a loaded 2-core CI machine (two CPU hogs beside the suite): the sim's
/// render thread may publish a frame late by this much.
const SLACK_MS: u64 = 120;

async fn start() -> SimDaemon {
    let sim = SimConfig { fps: FPS, glide_ms: 40, ..SimConfig::default() };
    SimDaemon::start_phone(sim, InputTimings::default()).await.unwrap()
}

/// An element's rectangle in pixels of an observation image of `image` size.
fn rect_in_image(state: &Value, id: &str, image: (f64, f64)) -> (f64, f64, f64, f64) {
    let (sw, sh) = (state["screen_size"][0].as_f64().unwrap(), state["screen_size"][1].as_f64().unwrap());
    let e = state["elements"].as_array().unwrap().iter().find(|e| e["id"] == id).unwrap_or_else(|| {
        panic!("{id} is not on screen: {state}");
    });
    let r = &e["rect"];
    let (kx, ky) = (image.0 / sw, image.1 / sh);
    (
        r["x"].as_f64().unwrap() * kx,
        r["y"].as_f64().unwrap() * ky,
        r["w"].as_f64().unwrap() * kx,
        r["h"].as_f64().unwrap() * ky,
    )
}

fn centre(r: (f64, f64, f64, f64)) -> (f64, f64) {
    ((r.0 + r.2 / 2.0).floor(), (r.1 + r.3 / 2.0).floor())
}

fn size_of(result: &Value) -> (f64, f64) {
    (result["image_size"]["width"].as_f64().unwrap(), result["image_size"]["height"].as_f64().unwrap())
}

fn region(v: &Value) -> (f64, f64, f64, f64) {
    let r = &v["changed_region"];
    assert!(r.is_object(), "no changed_region: {v}");
    (r["x"].as_f64().unwrap(), r["y"].as_f64().unwrap(), r["width"].as_f64().unwrap(), r["height"].as_f64().unwrap())
}

struct Phone {
    c: Caller,
    ops: u64,
}

impl Phone {
    async fn new(d: &SimDaemon) -> Phone {
        Phone { c: Caller::new(d).await, ops: 0 }
    }

    async fn state(&mut self) -> Value {
        self.c.ok("sim_state", json!({})).await
    }

    /// A screenshot: its observation id and image size.
    async fn shot(&mut self) -> (String, (f64, f64)) {
        let r = self.c.ok("screenshot", json!({})).await;
        let m = &r["metadata"];
        let size = (m["image_size"]["width"].as_f64().unwrap(), m["image_size"]["height"].as_f64().unwrap());
        (m["observation_id"].as_str().unwrap().to_string(), size)
    }

    /// An action's whole reply.
    async fn act(&mut self, observation: Option<&str>, action: Value, extra: Value) -> Value {
        self.ops += 1;
        let mut params = json!({"operation_id": format!("v-{}", self.ops), "action": action});
        if let Some(o) = observation {
            params["observation_id"] = json!(o);
        }
        for (k, v) in extra.as_object().unwrap() {
            params[k] = v.clone();
        }
        self.c.call("action", params).await
    }

    /// Taps element `id` read in observation `obs` of `size`; the whole reply.
    async fn tap(&mut self, obs: &str, size: (f64, f64), id: &str, extra: Value) -> Value {
        let state = self.state().await;
        let (x, y) = centre(rect_in_image(&state, id, size));
        self.act(Some(obs), json!({"type": "tap", "x": x, "y": y}), extra).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tap_on_an_icon_reports_the_app_opening_and_its_observation_acts_next() {
    let d = start().await;
    let mut p = Phone::new(&d).await;
    let (obs, size) = p.shot().await;
    let r = p.tap(&obs, size, "app0", json!({})).await; // Demo
    assert_eq!(r["ok"], true, "{r}");
    let v = &r["result"];
    assert_eq!(
        (v["verified"].as_bool(), v["changed"].as_bool(), v["settled"].as_bool()),
        (Some(true), Some(true), Some(true)),
        "{v}"
    );
    // Settled when the animation ended, not before, and within a frame of it.
    let settled = v["settled_ms"].as_u64().unwrap();
    assert!(
        settled + frame_ms() + release_tail_ms() >= OPEN_MS,
        "settled at {settled} ms, mid-animation (opening takes {OPEN_MS} ms)"
    );
    assert!(settled <= OPEN_MS + frame_ms() + SLACK_MS, "settled at {settled} ms; opening takes {OPEN_MS} ms");
    // The app covers the screen: so does the change.
    let (x, y, w, h) = region(v);
    assert_eq!(size_of(v), size, "the answer's observation has the acted-on screenshot's size");
    assert!(x <= 1.0 && y <= 1.0 && w >= size.0 - 2.0 && h >= size.1 - 2.0, "{v}");
    assert!(v["settled_frame_id"].as_u64().is_some() && v["after_frame_id"].as_u64() >= v["settled_frame_id"].as_u64());
    assert_eq!(p.state().await["screen"], "app");
    // The answer's observation authorizes the next action, with no screenshot between.
    let next = v["after_observation_id"].as_str().unwrap().to_string();
    let r = p.tap(&next, size, "toggle0", json!({})).await;
    assert_eq!(r["ok"], true, "{r}");
    let toggle = rect_in_image(&p.state().await, "toggle0", size);
    let (x, y, w, h) = region(&r["result"]);
    // Around the toggle (its colour flips), allowing one sample cell of rounding.
    assert!(x + 4.0 >= toggle.0 && y + 4.0 >= toggle.1, "{r} vs {toggle:?}");
    assert!(x + w <= toggle.0 + toggle.2 + 4.0 && y + h <= toggle.1 + toggle.3 + 4.0, "{r} vs {toggle:?}");
    let state = p.state().await;
    let on = state["elements"].as_array().unwrap().iter().find(|e| e["id"] == "toggle0").unwrap()["on"].clone();
    assert_eq!(on, true);
    // A batch is verified once, over all its steps: both toggles flip, one region covers them.
    let next = r["result"]["after_observation_id"].as_str().unwrap().to_string();
    let state = p.state().await;
    let (t1, t2) = (rect_in_image(&state, "toggle1", size), rect_in_image(&state, "toggle2", size));
    let (a, b) = (centre(t1), centre(t2));
    let batch =
        p.c.ok(
            "batch",
            json!({"operation_id": "v-batch", "observation_id": next, "actions": [
                {"type": "tap", "x": a.0, "y": a.1}, {"type": "tap", "x": b.0, "y": b.1}]}),
        )
        .await;
    assert_eq!((batch["completed"].as_u64(), batch["changed"].as_bool()), (Some(2), Some(true)), "{batch}");
    let (x, y, w, h) = region(&batch);
    assert!(y <= t1.1 + 4.0 && y + h + 4.0 >= t2.1 + t2.3 && x <= t1.0 + 4.0 && x + w + 4.0 >= t1.0 + t1.2, "{batch}");
    assert!(batch["after_observation_id"].is_string());
    // Back home: the closing animation is watched too.
    let r = p.act(None, json!({"type": "home"}), json!({})).await;
    assert_eq!(r["result"]["changed"], true, "{r}");
    assert!(r["result"]["settled_ms"].as_u64().unwrap() + frame_ms() >= tether::device::sim::CLOSE_MS, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_control_answers_no_visible_effect_with_a_fresh_observation() {
    let d = start().await;
    let mut p = Phone::new(&d).await;
    let (obs, size) = p.shot().await;
    assert_eq!(p.tap(&obs, size, "app0", json!({})).await["ok"], true);
    let (obs, size) = p.shot().await;
    let r = p.tap(&obs, size, "dead_button", json!({"settle_timeout_ms": 1000})).await;
    assert_eq!(r["ok"], false, "{r}");
    let e = &r["error"];
    assert_eq!(e["code"], "NO_VISIBLE_EFFECT", "{r}");
    assert_eq!(e["side_effect_possible"], true, "the tap was sent");
    assert_eq!(e["status"], "outcome_unknown");
    assert_eq!(e["effect"]["changed"], false);
    let after = e["effect"]["after_observation_id"].as_str().expect("a fresh observation comes with it");
    // The phone did register the tap: it just does nothing.
    let state = p.state().await;
    assert_eq!(state["touches"].as_array().unwrap().last().unwrap()["target"], "dead_button");
    // The same operation again is answered from the cache: no second tap.
    let touches = state["touches"].as_array().unwrap().len();
    p.ops -= 1;
    let again = p.tap(&obs, size, "dead_button", json!({"settle_timeout_ms": 1000})).await;
    assert_eq!(again["error"]["code"], "NO_VISIBLE_EFFECT");
    assert_eq!(p.state().await["touches"].as_array().unwrap().len(), touches);
    // `expect: any` takes the same non-event as an answer.
    let r = p.tap(after, size, "dead_button", json!({"expect": "any", "settle_timeout_ms": 1000})).await;
    assert_eq!((r["ok"].as_bool(), r["result"]["changed"].as_bool()), (Some(true), Some(false)), "{r}");
    // Cancelled while it watches: CANCELLED, and the tap was sent all the same.
    let after = r["result"]["after_observation_id"].as_str().unwrap().to_string();
    let touches = p.state().await["touches"].as_array().unwrap().len();
    let state = p.state().await;
    let (x, y) = centre(rect_in_image(&state, "dead_button", size));
    let id =
        p.c.send(
            "action",
            json!({"operation_id": "v-cancel", "observation_id": after,
            "action": {"type": "tap", "x": x, "y": y}, "settle_timeout_ms": 30000}),
        )
        .await;
    // The touch is counted when the finger lifts, a report or two before the tap's play
    // ends; a cancel then would cut the play short (INTERRUPTED). Wait for the play to be
    // over as well, so the cancel lands while the action watches the screen.
    wait_for!(REPLY_TIMEOUT, "the tap to be played and the action to watch", {
        let n = p.state().await["touches"].as_array().unwrap().len();
        let busy = p.c.ok("status", json!({})).await["input"]["busy"] == true;
        (n > touches && !busy).then_some(())
    });
    assert_eq!(p.c.ok("cancel", json!({"request_id": id})).await["cancelled"], true);
    let r = p.c.reply(id, REPLY_TIMEOUT).await;
    assert_eq!(
        (r["error"]["code"].as_str(), r["error"]["side_effect_possible"].as_bool()),
        (Some("CANCELLED"), Some(true)),
        "{r}"
    );
    // And `expect: no_change` refuses a change.
    let (after, _) = p.shot().await;
    let r = p.tap(&after, size, "button0", json!({"expect": "no_change"})).await;
    assert_eq!(r["error"]["code"], "UNEXPECTED_CHANGE", "{r}");
    assert!(r["error"]["effect"]["changed_region"].is_object(), "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_changes_the_field_and_a_move_the_caret_and_the_clock_do_not_count() {
    let d = start().await;
    let mut p = Phone::new(&d).await;
    let (obs, size) = p.shot().await;
    let r = p.tap(&obs, size, "app0", json!({})).await;
    let next = r["result"]["after_observation_id"].as_str().unwrap().to_string();
    let r = p.tap(&next, size, "text_field", json!({})).await;
    assert_eq!(r["result"]["changed"], true, "focusing the field shows: {r}");
    let r = p.act(None, json!({"type": "type_text", "text": "hello"}), json!({"return_image": "region"})).await;
    assert_eq!(r["ok"], true, "{r}");
    let v = &r["result"];
    let field = rect_in_image(&p.state().await, "text_field", size);
    let (x, y, w, h) = region(v);
    assert!(x + 4.0 >= field.0 && y + 4.0 >= field.1, "{v} vs field {field:?}");
    assert!(x + w <= field.0 + field.2 + 4.0 && y + h <= field.1 + field.3 + 4.0, "{v} vs field {field:?}");
    let image = &v["image"];
    assert_eq!(image["mime_type"], "image/png");
    assert!(image["data"].as_str().unwrap().len() > 100 && image["region"] == v["changed_region"], "{image}");
    // A move, away from anything: the pointer is masked where it was and where it went.
    let obs = v["after_observation_id"].as_str().unwrap().to_string();
    let r = p.act(Some(&obs), json!({"type": "move", "x": size.0 * 0.8, "y": size.1 * 0.36}), json!({})).await;
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["result"]["changed"], false, "a move alone changes nothing: {r}");
    assert_eq!(r["result"]["expect"], "any");
    // The field has focus: its caret blinks. The clock ticks every second. Neither is a
    // change, however long one waits.
    let waited = CARET_HALF_PERIOD_MS * 5;
    let r = p.c.ok("wait_for_change", json!({"timeout_ms": waited})).await;
    assert_eq!(r["changed"], false, "{r}");
    assert!(r["waited_ms"].as_u64().unwrap() >= waited, "{r}");
    assert_eq!(p.state().await["text_focused"], true, "the caret was there to blink");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spinners_and_scrolls_are_waited_out_and_waits_share_the_machinery() {
    let d = start().await;
    let mut p = Phone::new(&d).await;
    let (obs, size) = p.shot().await;
    let r = p.tap(&obs, size, "app0", json!({})).await;
    let next = r["result"]["after_observation_id"].as_str().unwrap().to_string();
    // The load button spins before it shows its result: settled after the spinner.
    let r = p.tap(&next, size, "button2", json!({})).await;
    let settled = r["result"]["settled_ms"].as_u64().unwrap();
    assert!(
        settled + frame_ms() + release_tail_ms() >= LOAD_MS,
        "settled at {settled} ms while loading ({LOAD_MS} ms): {r}"
    );
    // A scroll glides.
    let next = r["result"]["after_observation_id"].as_str().unwrap().to_string();
    let list = rect_in_image(&p.state().await, "list", size);
    let (x, y) = centre(list);
    let r = p.act(Some(&next), json!({"type": "scroll", "x": x, "y": y, "direction": "down"}), json!({})).await;
    assert_eq!(r["result"]["changed"], true, "{r}");
    let settled = r["result"]["settled_ms"].as_u64().unwrap();
    assert!(
        settled + frame_ms() + release_tail_ms() >= SCROLL_MS,
        "settled at {settled} ms mid-scroll ({SCROLL_MS} ms): {r}"
    );
    let (rx, ry, rw, rh) = region(&r["result"]);
    assert!(
        ry + 4.0 >= list.1
            && ry + rh <= list.1 + list.3 + 4.0
            && rx + 4.0 >= list.0
            && rx + rw <= list.0 + list.2 + 4.0,
        "{r} vs list {list:?}"
    );
    // Unverified input answers at once; wait_for_settle then waits the animation out.
    let r = p.act(None, json!({"type": "home"}), json!({"verify": false})).await;
    assert_eq!(r["result"]["verified"], false, "{r}");
    let w = p.c.ok("wait_for_settle", json!({"timeout_ms": 3000})).await;
    assert_eq!(w["settled"], true, "{w}");
    assert!(w["after_observation_id"].is_string(), "{w}");
    // wait_for_change against a screenshot taken before an unverified change returns at once.
    let (before, _) = p.shot().await;
    let home = rect_in_image(&p.state().await, "app3", size);
    let (x, y) = centre(home);
    let r = p.act(Some(&before), json!({"type": "tap", "x": x, "y": y}), json!({"verify": false})).await;
    assert_eq!(r["ok"], true, "{r}");
    let w =
        p.c.ok("wait_for_change", json!({"observation_id": before, "timeout_ms": 5000, "return_image": "full"})).await;
    assert_eq!(w["changed"], true, "{w}");
    assert_eq!(w["settled"], true, "{w}");
    assert_eq!(w["image"]["mime_type"], "image/png");
    assert_eq!(p.state().await["screen"], "app");
    // Nothing happening: the wait ends at its timeout with changed false.
    let started = std::time::Instant::now();
    let w = p.c.ok("wait_for_change", json!({"timeout_ms": 400})).await;
    assert_eq!(w["changed"], false, "{w}");
    assert!(started.elapsed() >= Duration::from_millis(400));
    // Bad arguments are refused before anything waits.
    let e = p.c.err("wait_for_settle", json!({"quiet_ms": 1})).await;
    assert_eq!(e["code"], "INVALID_PARAMS", "{e}");
}

/// The centre of a rectangle (x, y, w, h).
fn middle(r: (f64, f64, f64, f64)) -> (f64, f64) {
    ((r.0 + r.2 / 2.0).floor(), (r.1 + r.3 / 2.0).floor())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_right_under_the_pointer_is_seen_and_a_dead_control_still_answers_no_effect() {
    let d = start().await;
    let mut p = Phone::new(&d).await;
    let (obs, size) = p.shot().await;
    let r = p.tap(&obs, size, "app0", json!({})).await;
    let next = r["result"]["after_observation_id"].as_str().unwrap().to_string();
    // A tap on the button marks it with a small dot: where that dot is drawn is what the
    // answer says changed.
    let r = p.tap(&next, size, "button0", json!({})).await;
    assert_eq!(r["result"]["changed"], true, "{r}");
    let first_mark = region(&r["result"]);
    // Tap again with the pointer on that mark's left edge: the next mark is drawn beside
    // it, within the disc the daemon used to mask around the pointer (today's sim draws an
    // opaque pointer, so the mark must not lie under the drawn disc itself).
    let next = r["result"]["after_observation_id"].as_str().unwrap().to_string();
    let (x, y) = (first_mark.0 + 1.0, middle(first_mark).1);
    let r = p.act(Some(&next), json!({"type": "tap", "x": x, "y": y}), json!({})).await;
    assert_eq!(r["ok"], true, "the second mark is a change: {r}");
    let v = &r["result"];
    assert_eq!(v["changed"], true, "{v}");
    let state = p.state().await;
    let button = state["elements"].as_array().unwrap().iter().find(|e| e["id"] == "button0").unwrap();
    assert_eq!(button["taps"], 2, "the phone took both taps");
    // The change lies where the pointer was masked before (4.5 % of the width around it).
    let radius = tether::daemon::ActSettings::default().pointer_radius * size.0;
    let (rx, ry, rw, rh) = region(v);
    assert!(
        rx < x + radius && rx + rw > x - radius && ry + 1.0 >= y - radius && ry + rh <= y + radius + 1.0,
        "the change {:?} is under the pointer at ({x}, {y}), radius {radius}: {v}",
        (rx, ry, rw, rh)
    );
    assert!(rx + rw / 2.0 < x + radius, "mostly under it: {v}");
    // A dead control tapped at its very edge: the pointer darkens while pressed and looks
    // as before once released, so it is still no change.
    let next = v["after_observation_id"].as_str().unwrap().to_string();
    let dead = rect_in_image(&p.state().await, "dead_button", size);
    let (x, y) = ((dead.0 + 2.0).ceil(), (dead.1 + dead.3 / 2.0).floor());
    let r = p.act(Some(&next), json!({"type": "tap", "x": x, "y": y}), json!({"settle_timeout_ms": 1000})).await;
    assert_eq!(r["error"]["code"], "NO_VISIBLE_EFFECT", "{r}");
    let touch = p.state().await["touches"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(touch["target"], "dead_button", "the phone took the tap: {touch}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_that_changes_at_once_settles_by_still_frames_and_an_animation_only_once_it_ends() {
    let d = start().await;
    let mut p = Phone::new(&d).await;
    let (obs, size) = p.shot().await;
    let r = p.tap(&obs, size, "app0", json!({})).await;
    let v = &r["result"];
    let settled = v["settled_ms"].as_u64().unwrap();
    assert!(settled + frame_ms() + release_tail_ms() >= OPEN_MS, "settled mid-opening: {v}");
    let next = v["after_observation_id"].as_str().unwrap().to_string();
    let r = p.tap(&next, size, "toggle0", json!({})).await;
    let v = &r["result"];
    assert_eq!((v["changed"].as_bool(), v["settled_by"].as_str()), (Some(true), Some("still_frames")), "{v}");
    let quiet = tether::protocol::params::DEFAULT_QUIET_MS;
    assert!(v["settled_ms"].as_u64().unwrap() < quiet, "settled before a quiet window would: {v}");
    // The load button spins for LOAD_MS (a step every 60 ms), then shows its result: the
    // watch never takes a pause between two steps for the end.
    let next = v["after_observation_id"].as_str().unwrap().to_string();
    let r = p.tap(&next, size, "button2", json!({})).await;
    let v = &r["result"];
    let settled = v["settled_ms"].as_u64().unwrap();
    assert!(settled + frame_ms() + release_tail_ms() >= LOAD_MS, "settled while the spinner spun: {v}");
    let waited = v["duration_ms"].as_u64().unwrap();
    assert!(waited >= LOAD_MS, "answered while the spinner spun: {v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_app_says_whether_the_app_opened_and_leaves_the_home_screen_when_not() {
    let d = start().await;
    let mut p = Phone::new(&d).await;
    let r = p.act(None, json!({"type": "open_app", "name": "Demo"}), json!({})).await;
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(p.state().await["screen"], "app");
    let r = p.act(None, json!({"type": "home"}), json!({})).await;
    assert_eq!(r["ok"], true, "{r}");
    let r = p.act(None, json!({"type": "open_app", "name": "NoSuchApp"}), json!({})).await;
    assert_eq!(r["ok"], false, "{r}");
    let e = &r["error"];
    assert_eq!(
        (e["code"].as_str(), e["retryable"].as_bool(), e["side_effect_possible"].as_bool()),
        (Some("APP_NOT_OPENED"), Some(false), Some(true)),
        "{r}"
    );
    assert!(e["effect"]["after_observation_id"].is_string(), "a fresh observation comes with it: {r}");
    let state = p.state().await;
    assert_eq!(state["screen"], "home", "Spotlight was dismissed: {state}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn home_on_the_home_screen_is_done_and_the_journal_says_ok() {
    let d = start().await;
    let mut human = Caller::new(&d).await;
    let task = human.ok("task_open", json!({"title": "home at home"})).await;
    let (id, token) = (task["id"].as_i64().unwrap(), task["token"].as_str().unwrap().to_string());
    let mut agent = Caller::new(&d).await.with_token(&token);
    let r = agent.call("action", json!({"operation_id": "home-1", "action": {"type": "home"}})).await;
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!((r["result"]["changed"].as_bool(), r["result"]["expect"].as_str()), (Some(false), Some("any")), "{r}");
    // Asked to change something, the same non-event is still an error.
    let r = agent
        .call(
            "action",
            json!({"operation_id": "home-2", "action": {"type": "home"}, "expect": "change", "settle_timeout_ms": 500}),
        )
        .await;
    assert_eq!(r["error"]["code"], "NO_VISIBLE_EFFECT", "{r}");
    // The console's journal marks a step failed when its result says ok: false.
    let events = human.ok("task_events", json!({"task": id})).await["events"].as_array().unwrap().clone();
    let steps: Vec<&Value> = events.iter().filter(|e| e["kind"] == "step").collect();
    assert_eq!(steps.len(), 2, "{events:?}");
    assert_ne!(steps[0]["data"]["result"]["ok"], false, "{:?}", steps[0]);
    assert_eq!(steps[1]["data"]["result"]["ok"], false, "{:?}", steps[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_with_a_line_break_is_refused_before_typing_unless_returns_are_asked_for() {
    let d = start().await;
    let mut p = Phone::new(&d).await;
    let (obs, size) = p.shot().await;
    let r = p.tap(&obs, size, "app0", json!({})).await;
    let next = r["result"]["after_observation_id"].as_str().unwrap().to_string();
    p.tap(&next, size, "text_field", json!({})).await;
    let field_text = |state: &Value| {
        state["elements"].as_array().unwrap().iter().find(|e| e["id"] == "text_field").unwrap()["text"].clone()
    };
    let before = p.state().await;
    for text in ["ab\ncd", "ab\r\ncd", "ab\rcd"] {
        let r = p.act(None, json!({"type": "type_text", "text": text}), json!({})).await;
        let e = &r["error"];
        assert_eq!(
            (e["code"].as_str(), e["side_effect_possible"].as_bool(), e["status"].as_str()),
            (Some("TEXT_HAS_NEWLINE"), Some(false), Some("failed_before_submit")),
            "{r}"
        );
        assert!(e["message"].as_str().unwrap().contains("newlines"), "the message teaches the way out: {r}");
    }
    let after = p.state().await;
    assert_eq!(after["input"]["reports"], before["input"]["reports"], "nothing was typed");
    assert_eq!(field_text(&after), field_text(&before));
    assert_eq!(after["text_focused"], true);
    // With returns: the line break is pressed as Return (once for \r\n); the sim's field
    // is single-line, so Return ends editing there and the rest goes nowhere.
    let r = p.act(None, json!({"type": "type_text", "text": "ab\r\ncd", "newlines": "return"}), json!({})).await;
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["result"]["reports"], 10, "a, b, Return, c, d: a press and a release each: {r}");
    let state = p.state().await;
    assert_eq!(field_text(&state), "ab", "{state}");
    assert_eq!(state["text_focused"], false, "Return ended editing");
    // Anything else is not a choice.
    let r = p.act(None, json!({"type": "type_text", "text": "x", "newlines": "keep"}), json!({})).await;
    assert_eq!(r["error"]["code"], "INVALID_PARAMS", "{r}");
}
