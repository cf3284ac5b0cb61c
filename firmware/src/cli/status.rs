//! `tether status`.

use std::process::ExitCode;

use serde_json::{json, Value};

use super::remote::Endpoint;

/// Prints the daemon's status, from the local socket or an appliance (`--url`).
pub fn run_status(endpoint: Endpoint, as_json: bool) -> anyhow::Result<ExitCode> {
    let status = super::client_runtime()?.block_on(async {
        let hello = endpoint.call("hello", json!({"protocol": "tether/1", "client": "tether status"})).await?;
        let status = endpoint.call("status", json!({})).await?;
        anyhow::Ok(json!({"hello": hello, "status": status}))
    })?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&status["status"])?);
    } else {
        print!("{}", render(&status["hello"], &status["status"]));
    }
    Ok(ExitCode::SUCCESS)
}

/// Who the daemon says the caller is: its role and principal (a uid on the socket, a
/// token's name over HTTPS).
fn render_caller(caller: &Value) -> String {
    let role = caller["role"].as_str().unwrap_or("?");
    match super::task::principal(&caller["principal"]) {
        Some(who) => format!("{role} ({who})"),
        None => role.to_string(),
    }
}

fn render_task(t: &Value) -> String {
    if t.is_null() {
        return "none".into();
    }
    let mut s = format!(
        "{} {} {:?} by {} ({} steps)",
        t["id"],
        t["state"].as_str().unwrap_or("?"),
        t["title"].as_str().unwrap_or(""),
        t["owner"].as_str().unwrap_or("?"),
        t["steps"]
    );
    if let Some(q) = t["question"]["text"].as_str() {
        s += &format!("\n          asks: {q}  (tether task approve|reject {})", t["id"]);
    }
    if t["needs_observation"] == json!(true) {
        s += "\n          the agent must take a fresh screenshot before acting";
    }
    s
}

fn render(hello: &Value, st: &Value) -> String {
    let size = match (&st["video"]["source_size"]["width"], &st["video"]["source_size"]["height"]) {
        (Value::Number(w), Value::Number(h)) => format!("{w}x{h}"),
        _ => "-".into(),
    };
    let age = st["video"]["frame_age_ms"].as_u64().map_or("-".into(), |a| format!("{a} ms"));
    format!(
        "tether {} ({})\n  you:    {}\n  hid:    {} host={}\n  video:  {} signal={} size={} generation={} frame age={}\n  input:  {}\n  task:   {}\n",
        st["daemon"]["version"].as_str().unwrap_or("?"),
        if st["daemon"]["sim"] == json!(true) { "virtual iPhone" } else { "hardware" },
        render_caller(&hello["caller"]),
        st["hid"]["backend"].as_str().unwrap_or("?"),
        st["hid"]["host"].as_str().unwrap_or("?"),
        st["video"]["backend"].as_str().unwrap_or("?"),
        st["video"]["signal"].as_str().unwrap_or("?"),
        size,
        st["video"]["generation"],
        age,
        if st["input"]["busy"] == json!(true) { "busy" } else { "idle" },
        render_task(&st["task"]),
    )
}
