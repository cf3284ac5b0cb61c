//! Parameters of the text methods (`find_text`, `wait_for_text`) and of `tap_text`.
//!
//! A text query names what to look for the way a person would say it ("Sign in"), how to
//! compare it with what the screen shows, and optionally where to look. Boxes and regions
//! are pixels of the observation the text was read in.

use serde::{Deserialize, Serialize};

use super::params::{Region, WAIT_MS_RANGE};

/// Longest query, in bytes.
pub const MAX_QUERY_BYTES: usize = 256;
/// Default `threshold` of a fuzzy query.
pub const DEFAULT_FUZZY_THRESHOLD: f64 = 0.8;
/// Lowest `threshold` a fuzzy query may ask for (below it almost anything matches).
pub const MIN_FUZZY_THRESHOLD: f64 = 0.5;
/// Default `timeout_ms` of `wait_for_text`.
pub const DEFAULT_TEXT_WAIT_MS: u64 = 5000;

/// How a query is compared with the words on screen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TextMatch {
    /// The query's words, in order, are words of one line, character for character
    /// (typographic twins count as one: see [`fold_typography`]).
    Exact,
    /// As `exact`, ignoring case and punctuation around the words (default): "sign in"
    /// finds "Sign In", "Books" finds "Books.".
    #[default]
    IgnoreCase,
    /// Words of one line whose text is at least `threshold` similar to the query
    /// (1 - edit distance / length, ignoring case): survives a misread letter.
    Fuzzy,
    /// A regular expression (Rust `regex` syntax) searched in each line's text.
    Regex,
}

/// `text` with typographic twins made one: an ellipsis and three periods (iOS truncates
/// a label with "…", which OCR reads as "..."), curly and straight quotes.
///
/// ```
/// use tether::protocol::text_params::fold_typography;
/// assert_eq!(fold_typography("Reality Compo..."), fold_typography("Reality Compo…"));
/// assert_eq!(fold_typography("Don’t"), "Don't");
/// ```
pub fn fold_typography(text: &str) -> String {
    text.replace("...", "…").replace(['’', '‘'], "'").replace(['“', '”'], "\"")
}

impl TextMatch {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            TextMatch::Exact => "exact",
            TextMatch::IgnoreCase => "ignore_case",
            TextMatch::Fuzzy => "fuzzy",
            TextMatch::Regex => "regex",
        }
    }
}

/// What to look for: the fields every text query has.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TextQuery {
    /// The text (or pattern), 1..=256 bytes, one line.
    pub text: String,
    /// How to compare (default `ignore_case`).
    #[serde(rename = "match")]
    pub mode: TextMatch,
    /// Fuzzy matching's lowest similarity, 0.5..=1.0 (default 0.8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// Only text whose centre lies in this part of the observation (its pixels).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<Region>,
}

impl TextQuery {
    /// Checks the query's fields; the message names the method.
    pub fn check(&self, method: &str) -> Result<(), String> {
        if self.text.trim().is_empty() || self.text.len() > MAX_QUERY_BYTES || self.text.contains(['\n', '\r']) {
            return Err(format!("{method}: text must be one line of 1-{MAX_QUERY_BYTES} bytes"));
        }
        if let Some(t) = self.threshold {
            if self.mode != TextMatch::Fuzzy {
                return Err(format!("{method}: threshold applies only to match \"fuzzy\""));
            }
            if !(MIN_FUZZY_THRESHOLD..=1.0).contains(&t) {
                return Err(format!("{method}: threshold must be {MIN_FUZZY_THRESHOLD}..=1.0, got {t}"));
            }
        }
        if self.region.is_some_and(|r| r.width == 0 || r.height == 0) {
            return Err(format!("{method}: region must have a non-zero width and height"));
        }
        if self.mode == TextMatch::Regex {
            if let Err(e) = regex::RegexBuilder::new(&self.text).size_limit(1 << 20).build() {
                return Err(format!("{method}: text is not a valid regular expression: {e}"));
            }
        }
        Ok(())
    }

    /// A query from a message's fields (`mode` defaulted).
    fn of(text: &str, mode: Option<TextMatch>, threshold: Option<f64>, region: Option<Region>) -> TextQuery {
        TextQuery { text: text.to_string(), mode: mode.unwrap_or_default(), threshold, region }
    }

    /// Fuzzy matching's threshold, defaulted.
    pub fn threshold(&self) -> f64 {
        self.threshold.unwrap_or(DEFAULT_FUZZY_THRESHOLD)
    }
}

/// The wire form of a query's fields (flattening cannot be combined with refusing unknown
/// fields, so each message lists them and converts).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FindTextParams {
    /// The text (or pattern).
    pub text: String,
    /// How to compare.
    #[serde(default, rename = "match")]
    pub mode: Option<TextMatch>,
    /// Fuzzy threshold.
    #[serde(default)]
    pub threshold: Option<f64>,
    /// Where to look (observation pixels).
    #[serde(default)]
    pub region: Option<Region>,
    /// Search this screenshot's text (read now if it was taken without `text: true` and is
    /// still the newest picture); default: a fresh screenshot, read whole.
    #[serde(default)]
    pub observation_id: Option<String>,
    /// Longest edge of a fresh screenshot, 64..=4096 (default 1568).
    #[serde(default)]
    pub max_edge: Option<u32>,
}

impl FindTextParams {
    /// The query.
    pub fn query(&self) -> TextQuery {
        TextQuery::of(&self.text, self.mode, self.threshold, self.region)
    }
}

/// Parameters of `wait_for_text`: wait until a text appears (or is gone).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitForTextParams {
    /// The text (or pattern).
    pub text: String,
    /// How to compare.
    #[serde(default, rename = "match")]
    pub mode: Option<TextMatch>,
    /// Fuzzy threshold.
    #[serde(default)]
    pub threshold: Option<f64>,
    /// Where to look (pixels of a screenshot at `max_edge`).
    #[serde(default)]
    pub region: Option<Region>,
    /// Wait until it is gone instead (default false: until it appears).
    #[serde(default)]
    pub gone: Option<bool>,
    /// Longest wait, 0..=30000 ms (default 5000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Longest edge of the screenshots read, 64..=4096 (default 1568).
    #[serde(default)]
    pub max_edge: Option<u32>,
}

impl WaitForTextParams {
    /// The query.
    pub fn query(&self) -> TextQuery {
        TextQuery::of(&self.text, self.mode, self.threshold, self.region)
    }
}

/// Checks `find_text`'s parameters.
pub fn validate_find(p: &FindTextParams) -> Result<(), String> {
    p.query().check("find_text")?;
    check_edge("find_text", p.max_edge)?;
    if p.observation_id.is_some() && p.max_edge.is_some() {
        return Err("find_text: max_edge applies to a fresh screenshot, not to observation_id".into());
    }
    Ok(())
}

/// Checks `wait_for_text`'s parameters.
pub fn validate_wait(p: &WaitForTextParams) -> Result<(), String> {
    p.query().check("wait_for_text")?;
    check_edge("wait_for_text", p.max_edge)?;
    if let Some(t) = p.timeout_ms.filter(|t| !WAIT_MS_RANGE.contains(t)) {
        return Err(format!(
            "wait_for_text: timeout_ms must be {}..={}, got {t}",
            WAIT_MS_RANGE.start(),
            WAIT_MS_RANGE.end()
        ));
    }
    Ok(())
}

fn check_edge(method: &str, max_edge: Option<u32>) -> Result<(), String> {
    match max_edge {
        Some(e) if !(64..=super::params::MAX_EDGE_LIMIT).contains(&e) => {
            Err(format!("{method}: max_edge must be 64..={}, got {e}", super::params::MAX_EDGE_LIMIT))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(text: &str, mode: TextMatch) -> TextQuery {
        TextQuery { text: text.into(), mode, threshold: None, region: None }
    }

    #[test]
    fn queries_are_checked_before_any_reading() {
        assert!(query("Sign in", TextMatch::IgnoreCase).check("find_text").is_ok());
        assert!(query("", TextMatch::Exact).check("find_text").is_err());
        assert!(query("two\nlines", TextMatch::Exact).check("find_text").is_err());
        assert!(query(&"x".repeat(MAX_QUERY_BYTES + 1), TextMatch::Exact).check("find_text").is_err());
        let bad_regex = query("(unclosed", TextMatch::Regex).check("find_text").unwrap_err();
        assert!(bad_regex.contains("regular expression"), "{bad_regex}");
        let mut fuzzy = query("Settings", TextMatch::Fuzzy);
        fuzzy.threshold = Some(0.2);
        assert!(fuzzy.check("find_text").is_err());
        fuzzy.threshold = Some(0.9);
        assert!(fuzzy.check("find_text").is_ok());
        let mut exact = query("Settings", TextMatch::Exact);
        exact.threshold = Some(0.9);
        assert!(exact.check("find_text").is_err(), "a threshold without fuzzy is a mistake worth saying");
    }

    #[test]
    fn find_text_parses_with_defaults_and_refuses_unknown_fields() {
        let p: FindTextParams = serde_json::from_str(r#"{"text":"Wi-Fi"}"#).unwrap();
        assert_eq!(p.query().mode, TextMatch::IgnoreCase);
        let p: FindTextParams = serde_json::from_str(r#"{"text":"^Wi","match":"regex"}"#).unwrap();
        assert_eq!(p.query().mode, TextMatch::Regex);
        assert!(serde_json::from_str::<FindTextParams>(r#"{"text":"a","matches":"exact"}"#).is_err());
        let w: WaitForTextParams = serde_json::from_str(r#"{"text":"Done","gone":true,"timeout_ms":100}"#).unwrap();
        assert!(validate_wait(&w).is_ok());
        let w: WaitForTextParams = serde_json::from_str(r#"{"text":"Done","timeout_ms":40000}"#).unwrap();
        assert!(validate_wait(&w).is_err());
    }
}
