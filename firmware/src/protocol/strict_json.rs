//! JSON parsing that refuses duplicate object keys.
//!
//! `serde_json::Value` keeps the last of two equal keys, so `{"id":1,"id":2}` would be
//! answered as id 2 and `{"method":"fly","method":"status"}` would run `status`: a request
//! must mean one thing to every reader (a proxy, a log, the daemon). [`parse`] builds the
//! same `Value` but fails on the first repeated key, at any depth. Nesting is bounded
//! before this runs (the depth scan in `request.rs`), so the recursion is too.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Why a line is not one unambiguous JSON value.
#[derive(Debug)]
pub enum StrictError {
    /// Not JSON (or not UTF-8); serde's description.
    Syntax(serde_json::Error),
    /// Valid JSON with a key repeated in one object.
    DuplicateKey {
        /// The repeated key (truncated for messages).
        key: String,
        /// Whether the repetition is in the outermost object (the envelope).
        top_level: bool,
    },
}

/// The marker message of our own duplicate-key error inside serde; never shown to callers.
const DUPLICATE: &str = "\u{0}duplicate key";

/// Parses `bytes` as one JSON value, refusing duplicate keys.
pub fn parse(bytes: &[u8]) -> Result<Value, StrictError> {
    let mut found: Option<(String, bool)> = None;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let result = StrictSeed { depth: 0, found: &mut found }.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    match (result, found) {
        (Ok(v), _) => Ok(v),
        (Err(_), Some((key, top_level))) => Err(StrictError::DuplicateKey { key, top_level }),
        (Err(e), None) => Err(StrictError::Syntax(e)),
    }
}

/// The keys of the outermost object, in order, values skipped (for recovering the request
/// id of a line refused for a duplicate deeper down).
pub fn top_level_keys(bytes: &[u8]) -> Vec<String> {
    struct Keys;
    impl<'de> Visitor<'de> for Keys {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<String>, A::Error> {
            let mut keys = Vec::new();
            while let Some(k) = map.next_key::<String>()? {
                map.next_value::<IgnoredAny>()?;
                keys.push(k);
            }
            Ok(keys)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    de.deserialize_map(Keys).unwrap_or_default()
}

struct StrictSeed<'a> {
    depth: usize,
    found: &'a mut Option<(String, bool)>,
}

impl<'de> DeserializeSeed<'de> for StrictSeed<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        // JSON numbers are finite; serde_json never hands us NaN or infinity.
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        StrictSeed { depth: self.depth, found: self.found }.deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(StrictSeed { depth: self.depth + 1, found: &mut *self.found })? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                let shown: String = key.chars().take(64).collect();
                *self.found = Some((shown, self.depth == 0));
                return Err(de::Error::custom(DUPLICATE));
            }
            let v = map.next_value_seed(StrictSeed { depth: self.depth + 1, found: &mut *self.found })?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_value_as_serde_json_without_duplicates() {
        let line = br#"{"id":1,"method":"x","a":[1,-2,3.5,"s",null,true,{"b":{}}],"u":18446744073709551615}"#;
        assert_eq!(parse(line).unwrap(), serde_json::from_slice::<Value>(line).unwrap());
    }

    #[test]
    fn duplicates_are_found_at_any_depth() {
        assert!(matches!(parse(br#"{"id":1,"id":2}"#), Err(StrictError::DuplicateKey { top_level: true, .. })));
        match parse(br#"{"id":1,"p":[{"k":1,"k":2}]}"#) {
            Err(StrictError::DuplicateKey { key, top_level: false }) => assert_eq!(key, "k"),
            other => panic!("{other:?}"),
        }
        // The same key in sibling objects is fine.
        assert!(parse(br#"{"a":{"k":1},"b":{"k":2}}"#).is_ok());
    }

    #[test]
    fn syntax_errors_stay_syntax_errors() {
        assert!(matches!(parse(b"{not json"), Err(StrictError::Syntax(_))));
        assert!(matches!(parse(b"{} {}"), Err(StrictError::Syntax(_))));
        assert!(matches!(parse(b"\xff"), Err(StrictError::Syntax(_))));
    }

    #[test]
    fn top_level_keys_skip_values() {
        assert_eq!(top_level_keys(br#"{"id":3,"p":{"k":1,"k":2},"id":4}"#), ["id", "p", "id"]);
        assert!(top_level_keys(b"[1]").is_empty());
    }
}
