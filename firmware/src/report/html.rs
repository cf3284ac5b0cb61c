//! The HTML report: one file, no script, no request for anything but its own recording
//! (pictures are inline `data:` PNGs), so it opens offline and is safe to serve from the
//! appliance's origin even though titles, notes and arguments come from agents.

use std::fmt::Write as _;

use base64::Engine as _;
use serde_json::Value;

use super::time::{offset, utc};
use super::{outcome, ReportEvent, StepPictures, TaskReport, RECORDING_FILE};

/// The report's policy (also sent as a header when served): no script of any kind, no
/// request but inline pictures and the recording next to it.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; img-src data:; media-src 'self'; \
     style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'";

/// Characters of arguments or results shown per step (the journal has them all).
const DETAIL_CHARS: usize = 600;

const STYLE: &str =
    "body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1000px;padding:16px;color:#1b1b1f}\
h1{font-size:22px;margin:0 0 4px}.meta{color:#555}.pass{color:#0a7d28}.fail{color:#b3261e}\
table.facts td{padding:2px 12px 2px 0;vertical-align:top}\
section{border-top:1px solid #ddd;padding:8px 0}section.step .pics{display:flex;gap:12px;flex-wrap:wrap}\
figure{margin:4px 0}figcaption{color:#555;font-size:12px}.shot{position:relative;display:inline-block}\
.shot img{display:block;max-width:180px;border:1px solid #ccc}\
.region{position:absolute;border:2px solid #e8710a;box-sizing:border-box}\
.when{color:#777;font-size:12px;margin-right:8px}.kind{font-weight:600;margin-right:6px}\
.who{font-size:12px;background:#eef;border-radius:3px;padding:0 4px}.human{background:#fde}\
pre{white-space:pre-wrap;word-break:break-word;background:#f6f6f8;padding:6px;margin:4px 0;font-size:12px}\
video{max-width:100%;max-height:70vh}img.final{max-width:360px;border:1px solid #ccc}";

/// Escapes text for HTML content and quoted attributes.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters (NUL included) are not text.
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

fn capped(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}… ({} more characters)", &text[..at], text[at..].chars().count()),
        None => text.to_string(),
    }
}

fn png(bytes: &[u8]) -> String {
    format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// Who did something, from the journal's `by`: the agent (with the task's token) or a
/// person (role and principal).
fn who(by: &Value) -> String {
    if by.is_null() {
        return String::new();
    }
    if by["with_task_token"] == Value::Bool(true) {
        return "<span class=\"who\">agent</span>".into();
    }
    let role = by["role"].as_str().unwrap_or("someone");
    let principal = match &by["principal"] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    format!("<span class=\"who human\">human: {} {}</span>", escape(role), escape(&capped(&principal, 80)))
}

/// The report of one task.
pub fn html(report: &TaskReport) -> String {
    let t = &report.task;
    let mut out = String::with_capacity(64 << 10);
    let verdict = if t.passed() { ("pass", "passed") } else { ("fail", "did not pass") };
    let _ = write!(
        out,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>Task {id}: {title}</title><style>{STYLE}</style></head><body>\
         <h1>Task {id}: {title}</h1>\
         <p class=\"meta\"><span class=\"{vclass}\" id=\"verdict\">{state} — {vtext}</span>: {outcome}</p>\
         <table class=\"facts\"><tr><td>Owner</td><td>{owner}</td></tr>\
         <tr><td>Appliance</td><td>{appliance}</td></tr>\
         <tr><td>Opened</td><td>{opened}</td></tr><tr><td>Ended</td><td>{ended} ({secs:.1} s)</td></tr>\
         <tr><td>Scope</td><td>{scope}</td></tr></table>",
        csp = CONTENT_SECURITY_POLICY,
        id = t.id,
        title = escape(&t.title),
        vclass = verdict.0,
        state = escape(&t.state),
        vtext = verdict.1,
        outcome = escape(&capped(&outcome(report), DETAIL_CHARS)),
        owner = escape(&t.owner),
        appliance = escape(&report.appliance),
        opened = utc(t.created_ms),
        ended = utc(t.updated_ms),
        secs = t.seconds(),
        scope = escape(&capped(&t.scope.to_string(), DETAIL_CHARS)),
    );
    recording_section(&mut out, report);
    out.push_str("<h2>Timeline</h2>");
    if report.events_cut {
        let _ =
            write!(out, "<p class=\"fail\">The journal is longer than the {} events shown.</p>", report.events.len());
    }
    for event in &report.events {
        event_section(&mut out, report, event);
    }
    out.push_str("<h2>Final screen</h2>");
    match &report.final_png {
        Some(bytes) => {
            let _ = write!(
                out,
                "<img class=\"final\" id=\"final\" alt=\"the screen when the task ended\" src=\"{}\">",
                png(bytes)
            );
        }
        None => out.push_str("<p>No picture of the screen when the task ended (no video).</p>"),
    }
    out.push_str("</body></html>\n");
    out
}

fn recording_section(out: &mut String, report: &TaskReport) {
    let Some(rec) = &report.recording else { return };
    out.push_str("<h2>Recording</h2>");
    let seconds = rec.duration_ms.map_or(String::new(), |ms| format!(", {:.1} s", ms as f64 / 1000.0));
    let _ = write!(
        out,
        "<p id=\"recording-state\">{state}{seconds}, {kib} KiB{reason}</p>",
        state = escape(&rec.state),
        kib = rec.bytes.div_ceil(1024),
        reason = rec.reason.as_deref().map_or(String::new(), |r| format!(": {}", escape(r))),
    );
    if rec.has_file() {
        let _ = write!(out, "<video controls preload=\"metadata\" src=\"{RECORDING_FILE}\"></video>");
    }
}

fn event_section(out: &mut String, report: &TaskReport, e: &ReportEvent) {
    let when = offset(e.at_ms, report.task.created_ms);
    let body = &e.body;
    match e.kind.as_str() {
        "step" => step_section(out, report.pictures.get(&e.seq), e, &when),
        "state" => {
            let detail = &body["detail"];
            let question = detail["question"]["text"].as_str();
            let mut text = String::new();
            if let Some(q) = question {
                let _ = write!(text, " — asks: {}", escape(&capped(q, DETAIL_CHARS)));
            }
            for key in ["summary", "reason", "answer"] {
                if let Some(s) = detail[key].as_str() {
                    let _ = write!(text, " — {}", escape(&capped(s, DETAIL_CHARS)));
                }
            }
            if let Some(s) = detail.as_str() {
                let _ = write!(text, " — {}", escape(&capped(s, DETAIL_CHARS)));
            }
            if let Some(code) = detail["exit_code"].as_i64() {
                let _ = write!(text, " (exit code {code})");
            }
            let _ = write!(
                out,
                "<section class=\"state\" id=\"event-{seq}\"><span class=\"when\">{when}</span>\
                 <span class=\"kind\">{state}</span>{who}{text}</section>",
                seq = e.seq,
                state = escape(body["state"].as_str().unwrap_or("?")),
                who = who(&detail["by"]),
            );
        }
        "note" => {
            let _ = write!(
                out,
                "<section class=\"note\" id=\"event-{seq}\"><span class=\"when\">{when}</span>\
                 <span class=\"kind\">note</span>{who}<pre>{text}</pre></section>",
                seq = e.seq,
                who = who(&body["by"]),
                text = escape(&capped(body["text"].as_str().unwrap_or(""), DETAIL_CHARS)),
            );
        }
        "refused" => {
            let count = body["count"].as_u64().unwrap_or(1);
            let _ = write!(
                out,
                "<section class=\"refused\" id=\"event-{seq}\"><span class=\"when\">{when}</span>\
                 <span class=\"kind fail\">refused</span>{who} {what}: <b>{code}</b> {message}{times}</section>",
                seq = e.seq,
                who = who(&body["by"]),
                what = escape(body["what"].as_str().unwrap_or("")),
                code = escape(body["code"].as_str().unwrap_or("")),
                message = escape(&capped(body["message"].as_str().unwrap_or(""), DETAIL_CHARS)),
                times = if count > 1 { format!(" (×{count})") } else { String::new() },
            );
        }
        kind => {
            let _ = write!(
                out,
                "<section class=\"other\" id=\"event-{seq}\"><span class=\"when\">{when}</span>\
                 <span class=\"kind\">{kind}</span><pre>{body}</pre></section>",
                seq = e.seq,
                kind = escape(kind),
                body = escape(&capped(&body.to_string(), DETAIL_CHARS)),
            );
        }
    }
}

fn step_section(out: &mut String, pictures: Option<&StepPictures>, e: &ReportEvent, when: &str) {
    let body = &e.body;
    let ok = body["result"]["ok"] == Value::Bool(true);
    let result = &body["result"]["result"];
    let mut verdict = if ok {
        "<b class=\"pass\">ok</b>".to_string()
    } else {
        let error = &body["result"]["error"];
        format!(
            "<b class=\"fail\">{}</b> {}",
            escape(error["code"].as_str().unwrap_or("error")),
            escape(&capped(error["message"].as_str().unwrap_or(""), DETAIL_CHARS))
        )
    };
    if let Some(ms) = result["settled_ms"].as_u64() {
        let by = result["settled_by"].as_str().map_or(String::new(), |b| format!(" ({})", escape(b)));
        let _ = write!(verdict, " · settled in {ms} ms{by}");
    }
    if result["verified"] == Value::Bool(true) {
        let changed = if result["changed_region"].is_null() { "no change seen" } else { "changed" };
        let _ = write!(verdict, " · verified: {changed}");
    }
    let _ = write!(
        out,
        "<section class=\"step\" id=\"step-{seq}\"><span class=\"when\">{when}</span>\
         <span class=\"kind\">{tool}</span>{who} {verdict} <span class=\"when\">{ms} ms</span>\
         <pre>{args}</pre>",
        seq = e.seq,
        tool = escape(body["tool"].as_str().unwrap_or("step")),
        who = who(&body["by"]),
        ms = body["duration_ms"].as_u64().unwrap_or(0),
        args = escape(&capped(&without_images(&body["args"]).to_string(), DETAIL_CHARS)),
    );
    if let Some(p) = pictures.filter(|p| p.before.is_some() || p.after.is_some()) {
        out.push_str("<div class=\"pics\">");
        if let Some(before) = &p.before {
            let _ = write!(
                out,
                "<figure><div class=\"shot\"><img alt=\"before\" src=\"{}\"></div><figcaption>before</figcaption></figure>",
                png(before)
            );
        }
        if let Some(after) = &p.after {
            let _ = write!(out, "<figure><div class=\"shot\"><img alt=\"after\" src=\"{}\">", png(after));
            if let Some(style) = region_style(result) {
                let _ = write!(out, "<div class=\"region\" style=\"{style}\"></div>");
            }
            out.push_str("</div><figcaption>after");
            if region_style(result).is_some() {
                out.push_str(" (changed region outlined)");
            }
            out.push_str("</figcaption></figure>");
        }
        out.push_str("</div>");
    }
    out.push_str("</section>");
}

/// The changed region as a box over the after picture, in percent of the picture (the
/// region is in the pixels of `image_size`; the thumbnail is the same picture smaller).
fn region_style(result: &Value) -> Option<String> {
    let r = &result["changed_region"];
    let size = &result["image_size"];
    let (w, h) = (size["width"].as_f64()?, size["height"].as_f64()?);
    if w <= 0.0 || h <= 0.0 {
        return None;
    }
    let pct = |v: f64, of: f64| (v / of * 100.0).clamp(0.0, 100.0);
    Some(format!(
        "left:{:.2}%;top:{:.2}%;width:{:.2}%;height:{:.2}%",
        pct(r["x"].as_f64()?, w),
        pct(r["y"].as_f64()?, h),
        pct(r["width"].as_f64()?, w),
        pct(r["height"].as_f64()?, h)
    ))
}

/// Arguments without inline pictures (base64 the report shows as pictures or not at all).
fn without_images(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if k == "data" && v.as_str().is_some_and(|s| s.len() > 256) {
                        Value::String("(picture data left out)".into())
                    } else {
                        without_images(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_images).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::super::{ReportRecording, ReportTask};
    use super::*;

    fn report(title: &str) -> TaskReport {
        TaskReport {
            task: ReportTask {
                id: 7,
                title: title.into(),
                owner: "ci".into(),
                state: "failed".into(),
                created_ms: 1_000,
                updated_ms: 5_500,
                scope: json!({}),
            },
            events: vec![
                ReportEvent { seq: 1, at_ms: 1_000, kind: "state".into(), body: json!({"state": "running"}) },
                ReportEvent {
                    seq: 2,
                    at_ms: 2_000,
                    kind: "step".into(),
                    body: json!({"tool": "action", "args": {"action": {"type": "tap"}}, "duration_ms": 900,
                        "by": {"with_task_token": true},
                        "result": {"ok": true, "result": {"verified": true, "settled_ms": 310, "settled_by": "quiet",
                            "changed_region": {"x": 10, "y": 20, "width": 50, "height": 40},
                            "image_size": {"width": 100, "height": 200}}}}),
                },
                ReportEvent {
                    seq: 3,
                    at_ms: 3_000,
                    kind: "refused".into(),
                    body: json!({"what": "action", "code": "TASK_PAUSED", "message": "paused", "count": 3,
                        "by": {"role": "agent", "principal": "uid 1001", "with_task_token": false}}),
                },
                ReportEvent {
                    seq: 4,
                    at_ms: 5_500,
                    kind: "state".into(),
                    body: json!({"state": "failed", "detail": {"summary": "command exited with 3", "exit_code": 3}}),
                },
            ],
            pictures: [(2, StepPictures { before: Some(vec![1, 2, 3]), after: Some(vec![4, 5]) })].into(),
            recording: Some(ReportRecording {
                state: "complete".into(),
                reason: None,
                bytes: 4096,
                duration_ms: Some(4_500),
            }),
            final_png: Some(vec![9]),
            appliance: "tether-a".into(),
            events_cut: false,
        }
    }

    #[test]
    fn every_step_state_and_refusal_is_shown_with_its_pictures_and_region() {
        let page = html(&report("Log in"));
        assert_eq!(page.matches("<section class=\"step\"").count(), 1);
        assert!(page.contains("id=\"step-2\""));
        assert!(page.contains("settled in 310 ms (quiet)"));
        assert!(page.contains("left:10.00%;top:10.00%;width:50.00%;height:20.00%"), "region over the after picture");
        assert!(page.contains("alt=\"before\"") && page.contains("alt=\"after\""));
        assert!(page.contains("TASK_PAUSED") && page.contains("(×3)"));
        assert!(page.contains("command exited with 3"));
        assert!(page.contains("did not pass"));
        assert!(page.contains("<video controls preload=\"metadata\" src=\"recording.mp4\">"));
        assert!(page.contains("id=\"final\""));
        assert!(!page.contains("<script"));
        assert!(page.contains(CONTENT_SECURITY_POLICY));
    }

    #[test]
    fn hostile_text_is_escaped_everywhere_it_appears() {
        let evil = "<script>alert(1)</script>\"' onload=x\u{0}";
        let mut r = report(evil);
        r.task.owner = evil.into();
        r.events.push(ReportEvent { seq: 5, at_ms: 6_000, kind: evil.into(), body: json!({"x": evil}) });
        r.events.push(ReportEvent { seq: 6, at_ms: 6_000, kind: "note".into(), body: json!({"text": evil}) });
        let page = html(&r);
        assert!(!page.contains("<script>"), "{page}");
        assert!(!page.contains("\" onload") && !page.contains("' onload"));
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(!page.contains('\u{0}'));
    }

    #[test]
    fn a_recording_without_a_file_has_no_player_and_says_why() {
        let mut r = report("t");
        r.recording = Some(ReportRecording {
            state: "failed".into(),
            reason: Some("no video signal".into()),
            bytes: 0,
            duration_ms: None,
        });
        let page = html(&r);
        assert!(!page.contains("<video"));
        assert!(page.contains("failed, 0 KiB: no video signal"));
    }

    proptest! {
        #[test]
        fn no_text_from_the_journal_opens_a_tag(title in ".{0,40}", note in ".{0,40}") {
            let mut r = report(&title);
            r.events.push(ReportEvent { seq: 9, at_ms: 1, kind: "note".into(), body: json!({"text": note}) });
            let page = html(&r);
            // Every '<' in the page opens one of our own tags.
            for (at, _) in page.match_indices('<') {
                let next = page[at + 1..].chars().next().unwrap_or(' ');
                prop_assert!(next.is_ascii_alphabetic() || next == '/' || next == '!', "stray '<' at {}", at);
            }
        }
    }
}
