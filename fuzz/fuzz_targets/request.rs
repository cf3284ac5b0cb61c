//! Untrusted request bytes → `parse_request`: never panics, and an accepted request says
//! exactly what the JSON said (id, method, task token).
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tether::protocol::{parse_request, MAX_REQUEST_BYTES};

fuzz_target!(|data: &[u8]| {
    let parsed = parse_request(data);
    assert_eq!(parsed, parse_request(data), "parsing is deterministic");
    match parsed {
        Ok(req) => {
            assert!(data.len() <= MAX_REQUEST_BYTES, "accepted an oversized line");
            let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(data) else {
                panic!("accepted something that is not a JSON object");
            };
            assert_eq!(fields.get("id").and_then(Value::as_u64), Some(req.id.0), "id");
            assert_eq!(fields.get("method").and_then(Value::as_str), Some(req.call.method().as_str()), "method");
            let token = fields.get("task_token").and_then(Value::as_str);
            assert_eq!(token, req.task_token.as_deref(), "task token");
        }
        Err(e) => {
            assert!(!e.error.message.is_empty(), "every error explains itself");
            if let Some(id) = e.id {
                // An error names an id only when the line really carried it.
                let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(data) else {
                    panic!("error names id {id} for a line that is not a JSON object");
                };
                assert_eq!(fields.get("id").and_then(Value::as_u64), Some(id.0));
            }
        }
    }
});
