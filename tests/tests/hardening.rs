//! The core before it faces the LAN (issue 10): requests that crashed or confused the daemon,
//! control that must take effect where input runs, observations checked when the action
//! runs, per-request cancellation, global limits and the coalesced refusal journal. Each
//! test waits on conditions, never on sleeps.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed unwrap is a failed test

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tether::daemon::{DaemonLimits, DaemonOptions};
use tether::device::input::InputTimings;
use tether::device::sim::SimConfig;
use tether_tests::harness::{Caller, SimDaemon};

fn tap(obs: &str, op: &str) -> Value {
    json!({"verify": false, "operation_id": op, "observation_id": obs, "action": {"type": "tap", "x": 100, "y": 400}})
}

fn drag(obs: &str, op: &str, ms: u64) -> Value {
    json!({"verify": false, "operation_id": op, "observation_id": obs,
           "action": {"type": "drag", "path": [{"x": 100, "y": 300}, {"x": 100, "y": 600}], "duration_ms": ms}})
}

async fn open(owner: &mut Caller, params: Value) -> (i64, String) {
    let mut p = params.as_object().cloned().unwrap_or_default();
    p.insert("title".into(), "hardening".into());
    let r = owner.ok("task_open", Value::Object(p)).await;
    (r["id"].as_i64().unwrap(), r["token"].as_str().unwrap().to_string())
}

async fn touches(c: &mut Caller) -> u64 {
    let st = c.ok("sim_state", json!({})).await;
    st["touches"].as_array().and_then(|t| t.last()).and_then(|t| t["seq"].as_u64()).unwrap_or(0)
}

/// Polls `cond` until it holds; fails after 20 s with `what`.
async fn wait_until(mut cond: impl FnMut() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn alive(d: &SimDaemon) {
    let mut c = Caller::new(d).await;
    assert!(c.ok("status", json!({})).await["daemon"]["uptime_ms"].is_u64(), "the daemon answers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_numbers_are_refused_and_the_daemon_lives() {
    let d = SimDaemon::start().await.unwrap();
    let mut c = Caller::new(&d).await;
    // These wrapped u32 sums in the region check and crashed the daemon.
    for region in [
        json!({"x": 10, "y": 0, "width": 4_294_967_290u64, "height": 10}),
        json!({"x": 4_294_967_295u64, "y": 0, "width": 1, "height": 1}),
        json!({"x": 0, "y": 4_294_967_295u64, "width": 1, "height": 1}),
    ] {
        let e = c.err("screenshot", json!({"region": region})).await;
        assert_eq!(e["code"], "INVALID_PARAMS", "{region}: {e}");
    }
    let obs = c.shot().await;
    for (method, params, code) in [
        (
            "action",
            json!({"operation_id": "a", "observation_id": obs, "action": {"type": "tap", "x": 1e308, "y": -1e308}}),
            "OUT_OF_BOUNDS",
        ),
        (
            "action",
            json!({"operation_id": "b", "observation_id": obs, "action": {"type": "drag", "path": [{"x": 1, "y": 1}, {"x": 2, "y": 2}], "duration_ms": u64::MAX}}),
            "INVALID_PARAMS",
        ),
        (
            "action",
            json!({"operation_id": "c", "observation_id": obs, "expect": "any", "action": {"type": "scroll", "x": 10, "y": 10, "direction": "down", "distance": 1e308}}),
            "OK",
        ),
        ("screenshot", json!({"max_edge": 4_294_967_295u64}), "INVALID_PARAMS"),
        ("screenshot", json!({"timeout_ms": u64::MAX}), "INVALID_PARAMS"),
        ("screenshot", json!({"after_frame_id": u64::MAX, "timeout_ms": 0}), "TIMEOUT"),
        ("task_list", json!({"limit": u64::MAX}), "INVALID_PARAMS"),
        ("task_events", json!({"task": i64::MAX, "after_seq": i64::MAX}), "NO_SUCH_TASK"),
        ("preview", json!({"max_edge": 0}), "INVALID_PARAMS"),
    ] {
        let r = c.call(method, params.clone()).await;
        let got = if r["ok"] == true { "OK" } else { r["error"]["code"].as_str().unwrap() };
        assert_eq!(got, code, "{method} {params}: {r}");
    }
    alive(&d).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_in_flight_request_with_the_same_id_is_refused() {
    let d = SimDaemon::start().await.unwrap();
    let mut c = Caller::new(&d).await;
    let obs = c.shot().await;
    let press = json!({"operation_id": "lp", "observation_id": obs, "expect": "any", "action": {"type": "long_press", "x": 50, "y": 50}});
    c.send_as(5, "action", press).await;
    wait_until(|| d.phone.state().input.buttons != 0, "the long press to hold").await;
    c.send_as(5, "status", json!({})).await;
    let dup = c.reply(5, Duration::from_secs(5)).await;
    assert_eq!(dup["error"]["code"], "DUPLICATE_ID", "{dup}");
    assert_eq!(dup["error"]["retryable"], false);
    let first = c.reply(5, Duration::from_secs(10)).await;
    assert_eq!(first["ok"], true, "the first request still completes: {first}");
    // Once it is answered the id is free again.
    c.send_as(5, "status", json!({})).await;
    assert_eq!(c.reply(5, Duration::from_secs(5)).await["ok"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_covers_a_screenshot_waiting_for_a_frame() {
    let d = SimDaemon::start().await.unwrap();
    let mut c = Caller::new(&d).await;
    let frame = c.ok("screenshot", json!({})).await["metadata"]["frame_id"].as_u64().unwrap();
    let shot = c.send("screenshot", json!({"after_frame_id": frame + 1_000_000, "timeout_ms": 5000})).await;
    let cancelled = c.ok("cancel", json!({"request_id": shot})).await;
    assert_eq!(cancelled["cancelled"], true);
    let r = c.reply(shot, Duration::from_secs(20)).await;
    // A wait that ran out would answer TIMEOUT: CANCELLED means the cancel stopped it.
    assert_eq!(r["error"]["code"], "CANCELLED", "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_covers_calibrate_and_task_confirm() {
    let d = SimDaemon::start().await.unwrap();
    let mut human = Caller::new(&d).await;
    let reports = d.phone.state().input.reports;
    let cal = human.send("calibrate", json!({"grid": 6})).await;
    wait_until(|| d.phone.state().input.reports > reports, "calibration to move the pointer").await;
    human.ok("cancel", json!({"request_id": cal})).await;
    let r = human.reply(cal, Duration::from_secs(5)).await;
    assert_eq!(r["error"]["code"], "CANCELLED", "{r}");

    let (task, token) = open(&mut human, json!({})).await;
    let mut agent = Caller::new(&d).await.with_token(&token);
    let ask = agent.send("task_confirm", json!({"question": "ok?"})).await;
    let mut watcher = Caller::new(&d).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while watcher.ok("status", json!({})).await["task"]["question"].is_null() {
        assert!(Instant::now() < deadline, "the question never showed");
    }
    agent.ok("cancel", json!({"request_id": ask})).await;
    let r = agent.reply(ask, Duration::from_secs(5)).await;
    assert_eq!(r["error"]["code"], "CANCELLED", "{r}");
    let st = watcher.ok("status", json!({})).await;
    assert!(st["task"]["question"].is_null(), "the question was withdrawn: {st}");
    assert_eq!(st["task"]["state"], "running");
    let _ = task;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_action_checks_its_observation() {
    let d = SimDaemon::start().await.unwrap();
    let mut c = Caller::new(&d).await;
    let e = c
        .err(
            "action",
            json!({"operation_id": "k", "observation_id": "garbage", "action": {"type": "key_press", "key": "a"}}),
        )
        .await;
    assert_eq!(e["code"], "OBSERVATION_EXPIRED", "{e}");
    assert_eq!(e["operation_id"], "k", "errors name their operation: {e}");
    // Refusals are not cached: the same operation id runs once it is valid.
    let ok = c
        .ok("action", json!({"verify": false, "operation_id": "k", "action": {"type": "key_press", "key": "a"}}))
        .await;
    assert_eq!(ok["status"], "submitted");
    // A calibration change makes earlier observations stale (geometry epoch).
    let before = c.ok("screenshot", json!({})).await["metadata"].clone();
    c.ok("calibrate", json!({"reset": true})).await;
    let after = c.ok("screenshot", json!({})).await["metadata"].clone();
    assert!(after["geometry_epoch"].as_u64() > before["geometry_epoch"].as_u64(), "{before} {after}");
    let stale = c.err("action", tap(before["observation_id"].as_str().unwrap(), "t")).await;
    assert_eq!(stale["code"], "STALE_OBSERVATION", "{stale}");
    c.ok("action", tap(after["observation_id"].as_str().unwrap(), "t")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_observation_is_checked_again_after_waiting_for_admission() {
    let d = SimDaemon::start().await.unwrap();
    let mut human = Caller::new(&d).await;
    let (task, token) = open(&mut human, json!({"events": false})).await;
    let mut agent = Caller::new(&d).await.with_token(&token);
    let obs = agent.shot().await;
    human.ok("task_control", json!({"task": task, "action": "pause"})).await;
    let before = touches(&mut human).await;
    let queued = agent.send("action", tap(&obs, "queued")).await;
    // While it waits, the picture changes generation (a replug): the observation dies.
    d.phone.replug();
    let mut watcher = Caller::new(&d).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while watcher
        .call(
            "action",
            json!({"verify": false, "operation_id": "probe", "observation_id": obs, "action": {"type": "key_press", "key": "a"}}),
        )
        .await["error"]["code"]
        != "STALE_OBSERVATION"
    {
        assert!(Instant::now() < deadline, "the replug never made the observation stale");
    }
    human.ok("task_control", json!({"task": task, "action": "resume"})).await;
    let r = agent.reply(queued, Duration::from_secs(10)).await;
    assert_eq!(r["error"]["code"], "STALE_OBSERVATION", "{r}");
    assert_eq!(touches(&mut human).await, before, "nothing ran on the stale observation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_the_device_past_the_bound_is_busy() {
    let options = DaemonOptions { queue_timeout: Some(Duration::from_millis(300)), ..DaemonOptions::default() };
    let d = SimDaemon::start_options(SimConfig::default(), options).await.unwrap();
    let mut a = Caller::new(&d).await;
    let mut b = Caller::new(&d).await;
    let obs = a.shot().await;
    let long = a.send("action", drag(&obs, "long", 3000)).await;
    wait_until(|| d.phone.state().input.buttons != 0, "the drag to hold").await;
    let obs_b = b.shot().await;
    let e = b.err("action", tap(&obs_b, "late")).await;
    assert_eq!(e["code"], "BUSY", "{e}");
    assert_eq!(e["retryable"], true);
    assert_eq!(e["status"], "failed_before_submit");
    assert_eq!(a.reply(long, Duration::from_secs(10)).await["ok"], true);
    let limits = b.ok("status", json!({})).await["limits"].clone();
    assert!(limits["refused_busy"].as_u64().unwrap() >= 1, "{limits}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calibrate_is_admitted_like_input() {
    let d = SimDaemon::start().await.unwrap();
    let mut human = Caller::new(&d).await;
    let (_task, _token) = open(&mut human, json!({"events": false})).await;
    let reports = d.phone.state().input.reports;
    for params in [json!({}), json!({"reset": true})] {
        let e = human.err("calibrate", params.clone()).await;
        assert_eq!(e["code"], "TASK_RUNNING", "{params}: {e}");
    }
    assert_eq!(d.phone.state().input.reports, reports, "nothing reached the phone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_interrupts_long_typing_at_the_next_report() {
    let d = SimDaemon::start().await.unwrap();
    let mut human = Caller::new(&d).await;
    let (task, token) = open(&mut human, json!({"events": false})).await;
    let mut agent = Caller::new(&d).await.with_token(&token);
    let text = "a".repeat(2000);
    let typing = agent
        .send("action", json!({"verify": false, "operation_id": "type", "action": {"type": "type_text", "text": text}}))
        .await;
    let mut watcher = Caller::new(&d).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while watcher.ok("status", json!({})).await["input"]["busy"] != true {
        assert!(Instant::now() < deadline, "typing never started");
    }
    let at = Instant::now();
    human.ok("task_control", json!({"task": task, "action": "takeover"})).await;
    let r = agent.reply(typing, Duration::from_secs(5)).await;
    // Typing it all takes over a minute: an answer this soon means it was interrupted (the
    // latency itself is for the bench, not a timed test).
    assert!(at.elapsed() < Duration::from_secs(15), "interrupted, not finished: {:?}", at.elapsed());
    assert_eq!(r["error"]["code"], "INTERRUPTED", "{r}");
    assert_eq!(r["error"]["status"], "outcome_unknown");
    assert_eq!(r["error"]["side_effect_possible"], true);
    let sent = r["error"]["reports_sent"].as_u64().unwrap();
    assert!(sent > 0 && sent < 4000, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("taken_over"), "{r}");
    assert_eq!(d.phone.state().input.keys_held, 0, "no key left down");
    // The human drives now.
    human.ok("action", json!({"verify": false, "operation_id": "h", "action": {"type": "home"}})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_interrupts_the_agents_running_input() {
    let d = SimDaemon::start().await.unwrap();
    let mut human = Caller::new(&d).await;
    let (task, token) = open(&mut human, json!({"events": false})).await;
    let mut agent = Caller::new(&d).await.with_token(&token);
    let obs = agent.shot().await;
    let long = agent.send("action", drag(&obs, "d", 5000)).await;
    wait_until(|| d.phone.state().input.buttons != 0, "the drag to hold").await;
    human.ok("task_control", json!({"task": task, "action": "stop"})).await;
    let r = agent.reply(long, Duration::from_secs(20)).await;
    assert_eq!(r["error"]["code"], "INTERRUPTED", "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("cancelled"), "{r}");
    assert_eq!(d.phone.state().input.buttons, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_limit_are_busy() {
    let limits = DaemonLimits { max_sessions: 3, ..DaemonLimits::default() };
    let d = SimDaemon::start_options(SimConfig::default(), DaemonOptions { limits, ..DaemonOptions::default() })
        .await
        .unwrap();
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut c = Caller::new(&d).await;
        c.ok("hello", json!({})).await;
        held.push(c);
    }
    let mut extra = d.connect().await.unwrap();
    let refusal = extra.recv().await.unwrap();
    assert_eq!(refusal["error"]["code"], "BUSY", "{refusal}");
    assert_eq!(refusal["error"]["retryable"], true);
    assert!(extra.recv().await.is_err(), "then closed");
    let st = held[0].ok("status", json!({})).await;
    assert_eq!(st["limits"]["connections"], 3);
    assert_eq!(st["limits"]["max_connections"], 3);
    assert!(st["limits"]["refused_busy"].as_u64().unwrap() >= 1);
    // A slot frees when a connection closes.
    held.pop();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut c = d.connect().await.unwrap();
        // Until the slot frees, the daemon answers BUSY and closes, possibly before the
        // hello is written (a broken pipe here is that refusal, not a failure).
        let answer = match c.send(r#"{"id":1,"method":"hello"}"#).await {
            Ok(()) => c.recv().await.ok(),
            Err(_) => None,
        };
        if answer.is_some_and(|a| a["ok"] == true) {
            break;
        }
        assert!(Instant::now() < deadline, "the freed slot was never given out");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn screenshots_beyond_the_work_limit_are_busy() {
    let limits = DaemonLimits { max_screenshots_in_flight: 1, max_screenshots_waiting: 1, ..DaemonLimits::default() };
    let sim = SimConfig { capture_width: 3840, capture_height: 2160, ..SimConfig::default() };
    let d = SimDaemon::start_options(sim, DaemonOptions { limits, ..DaemonOptions::default() }).await.unwrap();
    let mut c = Caller::new(&d).await;
    let ids: Vec<u64> = {
        let mut ids = Vec::new();
        for _ in 0..12 {
            ids.push(c.send("screenshot", json!({"max_edge": 4096})).await);
        }
        ids
    };
    let mut codes = Vec::new();
    for id in ids {
        let r = c.reply(id, Duration::from_secs(60)).await;
        codes.push(if r["ok"] == true { "OK".to_string() } else { r["error"]["code"].as_str().unwrap().to_string() });
    }
    assert!(codes.iter().any(|c| c == "OK"), "{codes:?}");
    assert!(codes.iter().any(|c| c == "BUSY"), "{codes:?}");
    assert!(codes.iter().all(|c| c == "OK" || c == "BUSY"), "{codes:?}");
    let st = c.ok("status", json!({})).await;
    assert_eq!(st["limits"]["screenshots_in_flight"], 0, "{st}");
    assert_eq!(st["limits"]["max_screenshots_in_flight"], 1);
    assert_eq!(st["limits"]["max_screenshots_waiting"], 1);
    assert_eq!(st["limits"]["screenshots_waiting"], 0, "{st}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_refusals_are_journalled_with_counts() {
    let d = SimDaemon::start().await.unwrap();
    let mut lease = Caller::new(&d).await;
    let (task, token) = open(&mut lease, json!({"events": false})).await;
    let mut other = Caller::new(&d).await;
    const N: usize = 300;
    for i in 0..N {
        let id = other
            .send("action", json!({"verify": false, "operation_id": format!("h{i}"), "action": {"type": "home"}}))
            .await;
        let r = other.reply(id, Duration::from_secs(10)).await;
        assert_eq!(r["error"]["code"], "TASK_RUNNING");
    }
    let mut agent = Caller::new(&d).await.with_token(&token);
    agent.ok("task_finish", json!({"ok": true})).await;
    let events = lease.ok("task_events", json!({"task": task})).await["events"].as_array().unwrap().clone();
    let refused: Vec<&Value> = events.iter().filter(|e| e["kind"] == "refused").collect();
    assert!(refused.len() <= 40, "{} refusal events for {N} refusals", refused.len());
    let total: u64 = refused.iter().map(|e| e["data"]["count"].as_u64().unwrap()).sum();
    assert_eq!(total, N as u64, "every refusal is counted");
    // The counted ones are in the journal before the task's final state.
    let last_refused = events.iter().rposition(|e| e["kind"] == "refused").unwrap();
    let finished = events.iter().rposition(|e| e["data"]["state"] == "completed").unwrap();
    assert!(last_refused < finished);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_opener_hears_its_task_and_can_opt_out() {
    let d = SimDaemon::start().await.unwrap();
    let mut lease = Caller::new(&d).await;
    let (task, _token) = open(&mut lease, json!({})).await;
    let mut human = Caller::new(&d).await;
    human.ok("task_control", json!({"task": task, "action": "pause"})).await;
    let mut seen = Vec::new();
    while !seen.iter().any(|s: &String| s == "paused") {
        let e = lease.event(Duration::from_secs(10)).await;
        assert_eq!(e["event"], "task");
        assert_eq!(e["task"], task);
        if e["kind"] == "state" {
            seen.push(e["data"]["state"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(seen, ["running", "paused"]);
    human.ok("task_control", json!({"task": task, "action": "stop"})).await;
    // The stream ends with the task; a new task opened with events:false streams nothing.
    let mut quiet = Caller::new(&d).await;
    let (task2, _) = open(&mut quiet, json!({"events": false})).await;
    human.ok("task_control", json!({"task": task2, "action": "pause"})).await;
    let r = quiet.call("status", json!({})).await;
    assert_eq!(r["ok"], true);
    // An event for the pause would have been queued before this reply.
    assert_eq!(quiet.c.buffered(), 0, "no events before the status reply");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_question_waits_and_answers_name_their_question() {
    let d = SimDaemon::start().await.unwrap();
    let mut human = Caller::new(&d).await;
    let (task, token) = open(&mut human, json!({"events": false})).await;
    let mut first = Caller::new(&d).await.with_token(&token);
    let mut second = Caller::new(&d).await.with_token(&token);
    let q1 = first.send("task_confirm", json!({"question": "first?"})).await;
    let question = |st: &Value| st["task"]["question"].clone();
    let deadline = Instant::now() + Duration::from_secs(20);
    let asked = loop {
        let q = question(&human.ok("status", json!({})).await);
        if !q.is_null() {
            break q;
        }
        assert!(Instant::now() < deadline);
    };
    assert_eq!(asked["text"], "first?");
    let q2 = second.send("task_confirm", json!({"question": "second?"})).await;
    // The second waits (it is not refused BUSY) while the first is open.
    let st = human.ok("status", json!({})).await;
    assert_eq!(question(&st)["text"], "first?");
    human.ok("task_control", json!({"task": task, "action": "approve", "question": asked["id"]})).await;
    assert_eq!(first.reply(q1, Duration::from_secs(10)).await["result"]["approved"], true);
    let deadline = Instant::now() + Duration::from_secs(20);
    let next = loop {
        let q = question(&human.ok("status", json!({})).await);
        if q["text"] == "second?" {
            break q;
        }
        assert!(Instant::now() < deadline, "the second question was never asked");
    };
    // An answer naming the first question does not answer the second.
    let e = human.err("task_control", json!({"task": task, "action": "reject", "question": asked["id"]})).await;
    assert_eq!(e["code"], "INVALID_TRANSITION", "{e}");
    human.ok("task_control", json!({"task": task, "action": "reject", "question": next["id"]})).await;
    assert_eq!(second.reply(q2, Duration::from_secs(10)).await["result"]["approved"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_after_the_end_of_the_journal_are_refused() {
    let d = SimDaemon::start().await.unwrap();
    let mut human = Caller::new(&d).await;
    let (task, _) = open(&mut human, json!({"events": false})).await;
    let all = human.ok("task_events", json!({"task": task})).await["events"].as_array().unwrap().clone();
    let last = all.last().unwrap()["seq"].as_i64().unwrap();
    assert!(human.ok("task_events", json!({"task": task, "after_seq": last})).await["events"]
        .as_array()
        .unwrap()
        .is_empty());
    for follow in [false, true] {
        let e = human.err("task_events", json!({"task": task, "after_seq": last + 5, "follow": follow})).await;
        assert_eq!(e["code"], "INVALID_PARAMS", "{e}");
        assert!(e["message"].as_str().unwrap().contains(&format!("last seq is {last}")), "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_fast_timing_phone_still_refuses_nothing_it_should_run() {
    // The bounds and gates must not get in the way of ordinary use: a tap, a key, a drag.
    let timings = InputTimings { settle_ms: 60, tap_hold_ms: 30, ..InputTimings::default() };
    let d = SimDaemon::start_phone(SimConfig { glide_ms: 30, ..SimConfig::default() }, timings).await.unwrap();
    let mut c = Caller::new(&d).await;
    let obs = c.shot().await;
    let before = touches(&mut c).await;
    c.ok("action", tap(&obs, "t1")).await;
    c.ok("action", json!({"verify": false, "operation_id": "k1", "observation_id": obs, "action": {"type": "key_press", "key": "a"}}))
        .await;
    c.ok("action", drag(&obs, "d1", 300)).await;
    assert_eq!(touches(&mut c).await, before + 2);
}
