//! Finding a query in what a read found: which words of which line match, their box, and
//! how well. Pure functions over [`TextRead`]; the daemon decides what to do with them.
//!
//! A match never crosses lines (a button's label is one line; two lines that happen to
//! continue each other are two things on an iPhone screen). Within a line it is a run of
//! consecutive words, so OCR that splits "Wi-Fi" into "Wi-" "Fi" or merges "App Store" into
//! one word still matches: runs are compared without their spaces where the mode allows.

use crate::device::ocr::{TextBox, TextRead, Word};
use crate::protocol::params::Region;
use crate::protocol::text_params::{fold_typography, TextMatch, TextQuery};

/// Spans longer than this many words beyond the query's own count are not tried.
const EXTRA_WORDS: usize = 2;

/// One place the query matched.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    /// What the screen says there (the words as read, or the regex's match).
    pub text: String,
    /// The union of the matched words' boxes.
    pub bbox: TextBox,
    /// The lowest confidence of those words, 0..=100.
    pub confidence: f32,
    /// How well it matched, 0..=1 (1 unless fuzzy).
    pub score: f64,
    /// Its line in the read.
    pub line: usize,
}

/// Text on screen near a query that found nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct Near {
    /// The text.
    pub text: String,
    /// Where.
    pub bbox: TextBox,
    /// Its similarity to the query, 0..=1.
    pub score: f64,
}

/// Every match of `query` in `read`, best first (then in reading order).
///
/// # Errors
///
/// A regex query that does not compile (queries are checked when parsed, so only a
/// caller that skipped [`TextQuery::check`] sees this).
pub fn find(read: &TextRead, query: &TextQuery) -> Result<Vec<Found>, regex::Error> {
    let mut found = Vec::new();
    for (line, words) in lines_in(read, query.region) {
        match query.mode {
            TextMatch::Regex => found.extend(regex_in_line(line, &words, &query.text)?),
            TextMatch::Exact | TextMatch::IgnoreCase => found.extend(phrase_in_line(line, &words, query)),
            TextMatch::Fuzzy => found.extend(fuzzy_in_line(line, &words, query)),
        }
    }
    found.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.line.cmp(&b.line)).then(a.bbox.x.cmp(&b.bbox.x)));
    Ok(found)
}

/// Up to `n` distinct texts on screen most like `query` (for "not found, but here is what
/// the screen says"), best first.
pub fn nearest(read: &TextRead, query: &TextQuery, n: usize) -> Vec<Near> {
    let wanted = squash(&query.text.to_lowercase());
    let count = query.text.split_whitespace().count().max(1);
    let mut near: Vec<Near> = Vec::new();
    for (_, words) in lines_in(read, query.region) {
        for start in 0..words.len() {
            for len in count.saturating_sub(1).max(1)..=count + 1 {
                let Some(span) = words.get(start..start + len) else { break };
                let text = join(span);
                let score = similarity(&squash(&text.to_lowercase()), &wanted);
                if !near.iter().any(|x| x.text == text) {
                    near.push(Near { text, bbox: union(span), score });
                }
            }
        }
    }
    near.sort_by(|a, b| b.score.total_cmp(&a.score));
    near.truncate(n);
    near
}

/// Whether `text` is on screen (an `ignore_case` phrase anywhere): what `expect_text`
/// checks.
pub fn shows(read: &TextRead, text: &str) -> bool {
    let query = TextQuery { text: text.to_string(), mode: TextMatch::IgnoreCase, threshold: None, region: None };
    find(read, &query).is_ok_and(|f| !f.is_empty())
}

/// Each line's words that lie in `region` (centres), with the line's index; lines with
/// none are left out.
fn lines_in(read: &TextRead, region: Option<Region>) -> Vec<(usize, Vec<&Word>)> {
    let region = region.map(|r| TextBox { x: r.x, y: r.y, width: r.width, height: r.height });
    (0..read.lines.len())
        .map(|i| (i, read.line_words(i).iter().filter(|w| region.is_none_or(|r| w.bbox.center_in(&r))).collect()))
        .filter(|(_, words): &(usize, Vec<&Word>)| !words.is_empty())
        .collect()
}

fn phrase_in_line(line: usize, words: &[&Word], query: &TextQuery) -> Vec<Found> {
    let exact = query.mode == TextMatch::Exact;
    let wanted = if exact {
        fold_typography(&query.text.split_whitespace().collect::<Vec<_>>().join(" "))
    } else {
        squash(&trim_punctuation(&query.text.to_lowercase()))
    };
    let count = query.text.split_whitespace().count().max(1);
    let mut found = Vec::new();
    let mut next_free = 0;
    for start in 0..words.len() {
        if start < next_free {
            continue;
        }
        // The shortest run from `start` that says the query.
        for len in 1..=count + EXTRA_WORDS {
            let Some(span) = words.get(start..start + len) else { break };
            let text = join(span);
            let matches = if exact {
                fold_typography(&text) == wanted
            } else {
                squash(&trim_punctuation(&text.to_lowercase())) == wanted
            };
            if matches {
                found.push(Found { text, bbox: union(span), confidence: lowest(span), score: 1.0, line });
                next_free = start + len;
                break;
            }
        }
    }
    found
}

fn fuzzy_in_line(line: usize, words: &[&Word], query: &TextQuery) -> Vec<Found> {
    let wanted = squash(&query.text.to_lowercase());
    let count = query.text.split_whitespace().count().max(1);
    let threshold = query.threshold();
    let mut candidates: Vec<(usize, usize, f64)> = Vec::new();
    for start in 0..words.len() {
        for len in count.saturating_sub(1).max(1)..=count + 1 {
            let Some(span) = words.get(start..start + len) else { break };
            let score = similarity(&squash(&join(span).to_lowercase()), &wanted);
            if score >= threshold {
                candidates.push((start, len, score));
            }
        }
    }
    // Best first; a run overlapping a better one on this line is the same place.
    candidates.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.1.cmp(&b.1)));
    let mut taken: Vec<(usize, usize)> = Vec::new();
    let mut found = Vec::new();
    for (start, len, score) in candidates {
        if taken.iter().any(|&(s, l)| start < s + l && s < start + len) {
            continue;
        }
        taken.push((start, len));
        let span = &words[start..start + len];
        found.push(Found { text: join(span), bbox: union(span), confidence: lowest(span), score, line });
    }
    found
}

fn regex_in_line(line: usize, words: &[&Word], pattern: &str) -> Result<Vec<Found>, regex::Error> {
    let re = regex::RegexBuilder::new(pattern).size_limit(1 << 20).build()?;
    let text = join(words);
    // Each word's byte range in the joined text.
    let mut ranges = Vec::with_capacity(words.len());
    let mut at = 0;
    for w in words {
        ranges.push(at..at + w.text.len());
        at += w.text.len() + 1;
    }
    let mut found = Vec::new();
    for m in re.find_iter(&text).filter(|m| !m.is_empty()) {
        let span: Vec<&Word> = words
            .iter()
            .zip(&ranges)
            .filter(|(_, r)| r.start < m.end() && m.start() < r.end)
            .map(|(w, _)| *w)
            .collect();
        if span.is_empty() {
            continue;
        }
        found.push(Found {
            text: m.as_str().to_string(),
            bbox: union(&span),
            confidence: lowest(&span),
            score: 1.0,
            line,
        });
    }
    Ok(found)
}

fn join(words: &[&Word]) -> String {
    words.iter().map(|w| w.text.as_str()).collect::<Vec<_>>().join(" ")
}

fn union(words: &[&Word]) -> TextBox {
    words
        .iter()
        .skip(1)
        .fold(words.first().map(|w| w.bbox).unwrap_or(TextBox { x: 0, y: 0, width: 0, height: 0 }), |b, w| {
            b.union(&w.bbox)
        })
}

fn lowest(words: &[&Word]) -> f32 {
    words.iter().map(|w| w.confidence).fold(100.0, f32::min)
}

/// `s` without whitespace.
fn squash(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

/// `s` without punctuation and symbols at its two ends.
fn trim_punctuation(s: &str) -> String {
    s.trim_matches(|c: char| !c.is_alphanumeric() && !c.is_whitespace()).trim().to_string()
}

/// 1 - edit distance / the longer length (1: equal, 0: nothing in common).
pub fn similarity(a: &str, b: &str) -> f64 {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let longest = a.len().max(b.len());
    if longest == 0 {
        return 1.0;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut row = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = prev[j] + usize::from(ca != cb);
            row[j + 1] = substitute.min(prev[j + 1] + 1).min(row[j] + 1);
        }
        std::mem::swap(&mut prev, &mut row);
    }
    1.0 - prev[b.len()] as f64 / longest as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read of `lines`, each word 10 px per character, lines 40 px apart.
    fn read(lines: &[&str]) -> TextRead {
        let mut words = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let mut x = 10;
            for w in line.split_whitespace() {
                let width = 10 * u32::try_from(w.chars().count()).unwrap();
                words.push(Word {
                    text: w.into(),
                    bbox: TextBox { x, y: 40 * u32::try_from(i).unwrap(), width, height: 20 },
                    confidence: 90.0,
                    line: i,
                });
                x += width + 8;
            }
        }
        TextRead::from_words(words)
    }

    fn q(text: &str, mode: TextMatch) -> TextQuery {
        TextQuery { text: text.into(), mode, threshold: None, region: None }
    }

    fn texts(f: &[Found]) -> Vec<&str> {
        f.iter().map(|f| f.text.as_str()).collect()
    }

    #[test]
    fn a_phrase_matches_consecutive_words_of_one_line_only() {
        let r = read(&["Airplane Mode", "Sign in", "to continue Sign", "in"]);
        let found = find(&r, &q("Sign in", TextMatch::Exact)).unwrap();
        assert_eq!(texts(&found), ["Sign in"], "never across lines");
        assert_eq!(found[0].bbox, TextBox { x: 10, y: 40, width: 68, height: 20 });
        assert!(find(&r, &q("sign in", TextMatch::Exact)).unwrap().is_empty(), "exact is case-sensitive");
        assert!(find(&r, &q("Mode Airplane", TextMatch::IgnoreCase)).unwrap().is_empty(), "order counts");
        assert!(find(&r, &q("Sign", TextMatch::Exact)).unwrap().len() == 2);
    }

    #[test]
    fn ignore_case_forgives_case_punctuation_and_split_or_merged_words() {
        let r = read(&["Books.", "Wi- Fi", "AppStore", "Remember me"]);
        for (query, seen) in
            [("books", "Books."), ("Wi-Fi", "Wi- Fi"), ("App Store", "AppStore"), ("remember ME", "Remember me")]
        {
            let found = find(&r, &q(query, TextMatch::IgnoreCase)).unwrap();
            assert_eq!(texts(&found), [seen], "{query}");
        }
        assert!(find(&r, &q("Book", TextMatch::IgnoreCase)).unwrap().is_empty(), "a part of a word is not the word");
    }

    #[test]
    fn exact_counts_an_ellipsis_and_three_periods_as_one_but_nothing_else() {
        let r = read(&["Reality Compo...", "Don’t Allow"]);
        let found = find(&r, &q("Reality Compo…", TextMatch::Exact)).unwrap();
        assert_eq!(texts(&found), ["Reality Compo..."]);
        assert_eq!(texts(&find(&r, &q("Don't Allow", TextMatch::Exact)).unwrap()), ["Don’t Allow"]);
        assert!(find(&r, &q("Reality Compo", TextMatch::Exact)).unwrap().is_empty(), "the mark is still text");
        assert!(find(&r, &q("reality compo…", TextMatch::Exact)).unwrap().is_empty(), "case still counts");
    }

    #[test]
    fn fuzzy_survives_a_misread_letter_and_ranks_by_similarity() {
        let r = read(&["Settinqs", "Setting", "Sounds"]);
        let found = find(&r, &q("Settings", TextMatch::Fuzzy)).unwrap();
        assert_eq!(texts(&found), ["Settinqs", "Setting"]);
        assert!(found[0].score > 0.85 && found[0].score < 1.0);
        let mut strict = q("Settings", TextMatch::Fuzzy);
        strict.threshold = Some(0.95);
        assert!(find(&r, &strict).unwrap().is_empty());
    }

    #[test]
    fn a_regex_match_boxes_the_words_it_touches() {
        let r = read(&["Total 12 items", "Done"]);
        let found = find(&r, &q(r"\d+ items", TextMatch::Regex)).unwrap();
        assert_eq!(texts(&found), ["12 items"]);
        assert_eq!(found[0].bbox.x, 10 + 50 + 8);
        assert!(find(&r, &q("x*", TextMatch::Regex)).unwrap().is_empty(), "empty matches are no match");
    }

    #[test]
    fn a_region_limits_the_search_to_words_centred_in_it() {
        let r = read(&["Edit", "Edit"]);
        let mut query = q("Edit", TextMatch::Exact);
        assert_eq!(find(&r, &query).unwrap().len(), 2);
        query.region = Some(Region { x: 0, y: 30, width: 200, height: 40 });
        let found = find(&r, &query).unwrap();
        assert_eq!((found.len(), found[0].line), (1, 1));
    }

    #[test]
    fn nearest_offers_what_the_screen_says_instead() {
        let r = read(&["General", "Display & Brightness", "Battery"]);
        let near = nearest(&r, &q("Brightnes", TextMatch::IgnoreCase), 2);
        assert_eq!(near[0].text, "Brightness");
        assert!(shows(&r, "display & brightness"));
        assert!(!shows(&r, "Privacy"));
    }

    #[test]
    fn similarity_is_one_minus_the_normalized_edit_distance() {
        assert_eq!(similarity("abc", "abc"), 1.0);
        assert_eq!(similarity("", ""), 1.0);
        assert!((similarity("kitten", "sitting") - (1.0 - 3.0 / 7.0)).abs() < 1e-9);
        assert_eq!(similarity("abc", ""), 0.0);
    }
}
