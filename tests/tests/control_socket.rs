//! The control socket end to end over the sim: correlation, pipelining, bad input, limits,
//! slow readers.

// Test code: a panic is how an assertion fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::cast_possible_truncation)]

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use serde_json::Value;
use tether::protocol::MAX_REQUEST_BYTES;
use tether_tests::harness::SimDaemon;
use tokio::io::AsyncWriteExt;

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("<none>")
}

#[tokio::test]
async fn hello_and_status_are_answered() {
    let d = SimDaemon::start().await.unwrap();
    let mut c = d.connect().await.unwrap();
    let hello = c.roundtrip(r#"{"id":1,"method":"hello","protocol":"tether/1"}"#).await.unwrap();
    assert_eq!(hello["id"], 1);
    assert_eq!(hello["ok"], true);
    assert_eq!(hello["result"]["protocol"], "tether/1");
    assert_eq!(hello["result"]["caller"]["role"], "admin");
    assert_eq!(hello["result"]["caller"]["identity"]["kind"], "unix");
    assert_eq!(hello["result"]["caller"]["identity"]["pid"], std::process::id());
    assert_eq!(hello["result"]["capabilities"]["sim"], true);
    let status = c.roundtrip(r#"{"id":2,"method":"status"}"#).await.unwrap();
    assert_eq!(status["id"], 2);
    let st = &status["result"];
    assert_eq!(st["hid"]["host"], "configured");
    assert_eq!(st["video"]["source_size"]["width"], 1920);
    assert_eq!(st["daemon"]["sessions"], 1);
}

#[tokio::test]
async fn pipelined_requests_are_all_answered_and_correlated() {
    let d = SimDaemon::start().await.unwrap();
    let mut c = d.connect().await.unwrap();
    let mut batch = String::new();
    let mut expected = HashMap::new();
    for i in 0..200u64 {
        let id = i * 7919 % 1000; // unordered, unique ids
        let method = if i % 2 == 0 { "status" } else { "hello" };
        batch.push_str(&format!("{{\"id\":{id},\"method\":\"{method}\"}}\n"));
        expected.insert(id, method);
    }
    c.send_raw(batch.as_bytes()).await.unwrap();
    for _ in 0..200 {
        let reply = c.recv().await.unwrap();
        let id = reply["id"].as_u64().unwrap();
        let method = expected.remove(&id).unwrap_or_else(|| panic!("unexpected or duplicate id {id}"));
        assert_eq!(reply["ok"], true, "{reply}");
        match method {
            "hello" => assert_eq!(reply["result"]["protocol"], "tether/1"),
            _ => assert!(reply["result"]["video"].is_object()),
        }
    }
    assert!(expected.is_empty());
}

#[tokio::test]
async fn each_bad_input_gets_its_code_and_the_connection_survives() {
    let d = SimDaemon::start().await.unwrap();
    let mut c = d.connect().await.unwrap();
    let deep = format!(r#"{{"id":9,"method":"status","x":{}{}}}"#, "[".repeat(40), "]".repeat(40));
    let cases: Vec<(String, Value, &str)> = vec![
        ("{\"id\":1,".into(), Value::Null, "INVALID_JSON"),
        ("\u{1}garbage".into(), Value::Null, "INVALID_JSON"),
        (deep, Value::Null, "NESTING_TOO_DEEP"),
        (r#"{"id":2,"method":"teleport"}"#.into(), 2.into(), "UNKNOWN_METHOD"),
        (r#"{"id":3,"method":"status","verbose":true}"#.into(), 3.into(), "INVALID_PARAMS"),
        (r#"{"id":-4,"method":"status"}"#.into(), Value::Null, "INVALID_ID"),
        (r#"{"id":4.5,"method":"status"}"#.into(), Value::Null, "INVALID_ID"),
        (r#"{"id":"5","method":"status"}"#.into(), Value::Null, "INVALID_ID"),
        (r#"{"id":6}"#.into(), 6.into(), "INVALID_REQUEST"),
        (r#"{"id":7,"method":"hello","protocol":"tether/9"}"#.into(), 7.into(), "UNSUPPORTED_PROTOCOL"),
    ];
    for (line, id, expected) in cases {
        let reply = c.roundtrip(&line).await.unwrap();
        assert_eq!(reply["ok"], false, "{line}");
        assert_eq!(reply["id"], id, "{line}");
        assert_eq!(code(&reply), expected, "{line}");
        assert!(reply["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
        assert_eq!(reply["error"]["side_effect_possible"], false);
        let ok = c.roundtrip(r#"{"id":100,"method":"status"}"#).await.unwrap();
        assert_eq!(ok["ok"], true, "connection must survive {line}");
    }
}

#[tokio::test]
async fn a_line_over_64_kib_is_refused_and_the_next_one_works() {
    let d = SimDaemon::start().await.unwrap();
    let mut c = d.connect().await.unwrap();
    let big = format!(r#"{{"id":1,"method":"hello","client":"{}"}}"#, "x".repeat(MAX_REQUEST_BYTES));
    let reply = c.roundtrip(&big).await.unwrap();
    assert_eq!(code(&reply), "REQUEST_TOO_LARGE");
    // 4 MiB more without a newline, then one: still discarded without buffering.
    c.send_raw(&vec![b'y'; 4 << 20]).await.unwrap();
    let reply = c.roundtrip("").await.unwrap();
    assert_eq!(code(&reply), "REQUEST_TOO_LARGE");
    let exact = format!(r#"{{"id":2,"method":"status"{}}}"#, " ".repeat(MAX_REQUEST_BYTES - 26));
    assert_eq!(exact.len(), MAX_REQUEST_BYTES);
    let reply = c.roundtrip(&exact).await.unwrap();
    assert_eq!(reply["ok"], true, "a line of exactly the limit is accepted");
}

#[tokio::test]
async fn a_peer_that_never_reads_is_dropped_and_others_are_unaffected() {
    // The real 10 s timeout is exercised by tests/python; 1 s keeps this test quick.
    let d = SimDaemon::start_with(|c| c.stall_timeout = Duration::from_secs(1)).await.unwrap();
    let stalled = tokio::net::UnixStream::connect(d.socket()).await.unwrap();
    let (_read_half_never_read, mut write) = stalled.into_split();
    let flood = "{\"id\":1,\"method\":\"status\"}\n".repeat(20_000);
    let writer = tokio::spawn(async move {
        // Blocks once our reads stop; errors once the daemon drops us.
        let _ = write.write_all(flood.as_bytes()).await;
        write
    });
    let mut other = d.connect().await.unwrap();
    // Count from the moment the daemon has accepted the stalled peer (two sessions).
    let accept_deadline = Instant::now() + Duration::from_secs(30);
    while other.roundtrip(r#"{"id":4,"method":"status"}"#).await.unwrap()["result"]["daemon"]["sessions"] != 2 {
        assert!(Instant::now() < accept_deadline, "stalled peer never accepted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = Instant::now();
    let mut dropped = false;
    while started.elapsed() < Duration::from_secs(30) {
        let reply = other.roundtrip(r#"{"id":5,"method":"status"}"#).await.unwrap();
        assert_eq!(reply["ok"], true);
        if reply["result"]["daemon"]["sessions"] == 1 {
            dropped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(dropped, "the stalled peer was not disconnected");
    // The flood may have started filling buffers just before `started`: allow that slack.
    assert!(started.elapsed() >= Duration::from_millis(700), "dropped well before the stall timeout");
    writer.abort();
}

#[tokio::test]
async fn socket_is_0660_and_a_second_daemon_is_refused() {
    let d = SimDaemon::start().await.unwrap();
    let mode = std::fs::metadata(d.socket()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
    let second = tether::server::UnixServer::bind(
        tether::server::UnixServerConfig::new(
            d.socket().to_path_buf(),
            tether::server::RolePolicy { service_uid: 0, agent_uid: None, agent_name: None, operator_gid: None },
        ),
        d.daemon.clone(),
    );
    assert!(matches!(second, Err(tether::server::ServerError::AlreadyRunning(_))));
}

#[tokio::test]
async fn a_stale_socket_from_a_crashed_daemon_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("control.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap()); // leaves the file behind
    let phone = tether::device::sim::SimPhone::new(Default::default());
    let daemon = tether::daemon::Daemon::start(
        tether::daemon::Devices { hid: Box::new(phone.hid()), video: Box::new(phone.display()), sim: None },
        Default::default(),
    )
    .unwrap();
    let policy = tether::server::RolePolicy { service_uid: 0, agent_uid: None, agent_name: None, operator_gid: None };
    let server = tether::server::UnixServer::bind(tether::server::UnixServerConfig::new(path.clone(), policy), daemon);
    assert!(server.is_ok());
    drop(server);
    assert!(!path.exists(), "socket file removed on drop");
}
