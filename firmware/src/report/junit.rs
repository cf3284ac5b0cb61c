//! JUnit XML, the format CI dashboards read (GitHub's test reporters, GitLab's
//! `artifacts:reports:junit`, Jenkins): one test suite with one test case, the task. Only
//! `completed` passes; any other end is a failure whose message says how it ended.

use std::fmt::Write as _;

use super::{outcome, TaskReport, FINAL_PICTURE_FILE};

/// Steps and refusals listed in a failure's text, newest last.
const FAILURE_LINES: usize = 10;

/// Escapes text for XML content and attributes; characters XML 1.0 cannot hold (most
/// control characters) are left out.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => {}
            c => out.push(c),
        }
    }
    out
}

/// The task's last steps and refusals, one line each, for a failure's text.
fn last_lines(report: &TaskReport) -> Vec<String> {
    let mut lines: Vec<String> = report
        .events
        .iter()
        .filter_map(|e| match e.kind.as_str() {
            "step" => {
                let tool = e.body["tool"].as_str().unwrap_or("step");
                let outcome = if e.body["result"]["ok"] == serde_json::Value::Bool(true) {
                    "ok".to_string()
                } else {
                    let error = &e.body["result"]["error"];
                    format!("{} {}", error["code"].as_str().unwrap_or("error"), error["message"].as_str().unwrap_or(""))
                };
                Some(format!("#{} {tool}: {outcome}", e.seq))
            }
            "refused" => Some(format!(
                "#{} refused {}: {} {}",
                e.seq,
                e.body["what"].as_str().unwrap_or(""),
                e.body["code"].as_str().unwrap_or(""),
                e.body["message"].as_str().unwrap_or("")
            )),
            _ => None,
        })
        .collect();
    let skip = lines.len().saturating_sub(FAILURE_LINES);
    lines.drain(..skip);
    lines
}

/// The JUnit XML of one task.
pub fn junit(report: &TaskReport) -> String {
    let t = &report.task;
    let failed = !t.passed();
    let classname = format!("tether.{}", report.appliance);
    let mut out = String::new();
    let _ = write!(
        out,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <testsuites name=\"tether\" tests=\"1\" failures=\"{f}\" errors=\"0\" time=\"{secs:.3}\">\n\
         <testsuite name=\"tether\" tests=\"1\" failures=\"{f}\" errors=\"0\" skipped=\"0\" time=\"{secs:.3}\">\n\
         <testcase classname=\"{class}\" name=\"{name}\" time=\"{secs:.3}\">\n",
        f = u8::from(failed),
        secs = t.seconds(),
        class = escape(&classname),
        name = escape(&format!("task {}: {}", t.id, t.title)),
    );
    if failed {
        let message = format!("{}: {}", t.state, outcome(report));
        let mut text = String::new();
        for line in last_lines(report) {
            text.push_str(&line);
            text.push('\n');
        }
        let _ = writeln!(
            out,
            "<failure type=\"{kind}\" message=\"{message}\">{text}</failure>",
            kind = escape(&t.state),
            message = escape(&message),
            text = escape(&text),
        );
    }
    let mut system_out = format!("task {} on {}, owner {}\nreport: report.html\n", t.id, report.appliance, t.owner);
    if report.final_png.is_some() {
        // The attachment convention Jenkins and GitLab read: a path relative to the file.
        let _ = writeln!(system_out, "[[ATTACHMENT|{FINAL_PICTURE_FILE}]]");
    }
    let _ = write!(out, "<system-out>{}</system-out>\n</testcase>\n</testsuite>\n</testsuites>\n", escape(&system_out));
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{ReportEvent, ReportTask};
    use super::*;

    fn task(state: &str, title: &str) -> TaskReport {
        TaskReport {
            task: ReportTask {
                id: 3,
                title: title.into(),
                owner: "ci".into(),
                state: state.into(),
                created_ms: 0,
                updated_ms: 2_500,
                scope: json!({}),
            },
            events: vec![
                ReportEvent {
                    seq: 2,
                    at_ms: 1,
                    kind: "step".into(),
                    body: json!({"tool": "action", "result": {"ok": false, "error": {"code": "OUT_OF_BOUNDS", "message": "off the screen"}}}),
                },
                ReportEvent {
                    seq: 3,
                    at_ms: 2,
                    kind: "state".into(),
                    body: json!({"state": state, "detail": {"summary": "command exited with 3", "exit_code": 3}}),
                },
            ],
            appliance: "bench-1".into(),
            final_png: Some(vec![1]),
            ..TaskReport::default()
        }
    }

    #[test]
    fn a_failed_task_is_one_failing_case_naming_how_it_ended() {
        let xml = junit(&task("failed", "Log in"));
        assert!(xml.contains("tests=\"1\" failures=\"1\""));
        assert!(xml.contains("name=\"task 3: Log in\""));
        assert!(xml.contains("<failure type=\"failed\" message=\"failed: command exited with 3\">"));
        assert!(xml.contains("#2 action: OUT_OF_BOUNDS off the screen"));
        assert!(xml.contains("[[ATTACHMENT|final.png]]"));
        assert!(xml.contains("time=\"2.500\""));
    }

    #[test]
    fn a_completed_task_passes_and_text_is_escaped() {
        let xml = junit(&task("completed", "a <b> & \"c\"\u{1}"));
        assert!(xml.contains("failures=\"0\""));
        assert!(!xml.contains("<failure"));
        assert!(xml.contains("name=\"task 3: a &lt;b&gt; &amp; &quot;c&quot;\""));
        assert!(!xml.contains('\u{1}'));
    }
}
