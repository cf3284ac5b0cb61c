//! Reading text in the phone's pictures (OCR).
//!
//! The daemon asks a [`TextReader`] to read a grayscale picture and gets words and lines
//! with boxes in that picture's pixels. The engine behind it (Tesseract 5, from Debian's
//! `libtesseract5` and `tesseract-ocr-*` packages; nothing is downloaded at run time) runs
//! in a worker process ([`worker`]): an engine crash, hang or runaway allocation costs one
//! read and a restart, never the daemon. Another engine replaces it by implementing the
//! trait.
//!
//! Layers, bottom up: [`tesseract`] (the engine's C API, loaded with `dlopen` inside the
//! worker process only), [`preprocess`] (phone screens: small text scaled up, light-on-dark
//! regions inverted), [`wire`] (the pipe protocol between daemon and worker), [`worker`]
//! (the daemon side: keeps one worker loaded, restarts it when it dies, kills it past a
//! read's deadline) and [`worker_main`] (the worker process's loop).

pub mod preprocess;
pub mod tesseract;
pub mod wire;
pub mod worker;
pub mod worker_main;

pub use worker::{missing_packages, reader_from, worker_config, TesseractWorker, WorkerCommand, WorkerConfig};

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Largest picture a read accepts, in pixels (a 4K frame is 8.3 M); larger ones are
/// refused before they reach the engine.
pub const MAX_READ_PIXELS: u64 = 16 << 20;
/// Longest edge a read accepts.
pub const MAX_READ_EDGE: u32 = 8192;
/// How long one read may take by default before its worker is killed.
pub const DEFAULT_READ_DEADLINE: Duration = Duration::from_secs(10);

/// A grayscale picture to read: `width * height` bytes, row-major, 0 = black.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrayImage {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// One byte per pixel, rows top to bottom.
    pub pixels: Vec<u8>,
}

impl GrayImage {
    /// A picture from RGB bytes (3 per pixel), with BT.601 luma weights.
    pub fn from_rgb(width: u32, height: u32, rgb: &[u8]) -> GrayImage {
        let pixels = rgb
            .chunks_exact(3)
            .map(|p| {
                let y = 299 * u32::from(p[0]) + 587 * u32::from(p[1]) + 114 * u32::from(p[2]);
                // At most 255 * 1000 / 1000: always fits a byte.
                u8::try_from(y / 1000).unwrap_or(u8::MAX)
            })
            .collect();
        GrayImage { width, height, pixels }
    }

    /// Whether its size is one a read accepts (non-empty, within [`MAX_READ_EDGE`] and
    /// [`MAX_READ_PIXELS`], and as many bytes as pixels).
    pub fn check(&self) -> Result<(), OcrError> {
        let pixels = u64::from(self.width) * u64::from(self.height);
        if self.width == 0 || self.height == 0 {
            return Err(OcrError::BadImage(format!("{}x{} is empty", self.width, self.height)));
        }
        if self.width > MAX_READ_EDGE || self.height > MAX_READ_EDGE || pixels > MAX_READ_PIXELS {
            return Err(OcrError::BadImage(format!(
                "{}x{} is larger than a read takes ({MAX_READ_EDGE} px a side, {MAX_READ_PIXELS} px)",
                self.width, self.height
            )));
        }
        if self.pixels.len() as u64 != pixels {
            return Err(OcrError::BadImage(format!(
                "{} bytes for {}x{} pixels",
                self.pixels.len(),
                self.width,
                self.height
            )));
        }
        Ok(())
    }
}

/// A rectangle in the read picture's pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextBox {
    /// Left edge.
    pub x: u32,
    /// Top edge.
    pub y: u32,
    /// Width.
    pub width: u32,
    /// Height.
    pub height: u32,
}

impl TextBox {
    /// The smallest box holding both.
    pub fn union(&self, other: &TextBox) -> TextBox {
        let x0 = self.x.min(other.x);
        let y0 = self.y.min(other.y);
        let x1 = (self.x + self.width).max(other.x + other.width);
        let y1 = (self.y + self.height).max(other.y + other.height);
        TextBox { x: x0, y: y0, width: x1 - x0, height: y1 - y0 }
    }

    /// Its centre, in pixels.
    pub fn center(&self) -> (f64, f64) {
        (f64::from(self.x) + f64::from(self.width) / 2.0, f64::from(self.y) + f64::from(self.height) / 2.0)
    }

    /// Whether it overlaps `other` at all.
    pub fn overlaps(&self, other: &TextBox) -> bool {
        self.x < other.x + other.width
            && other.x < self.x + self.width
            && self.y < other.y + other.height
            && other.y < self.y + self.height
    }

    /// Whether its centre lies inside `other`.
    pub fn center_in(&self, other: &TextBox) -> bool {
        let (cx, cy) = self.center();
        cx >= f64::from(other.x)
            && cy >= f64::from(other.y)
            && cx < f64::from(other.x) + f64::from(other.width)
            && cy < f64::from(other.y) + f64::from(other.height)
    }
}

/// One word as read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Word {
    /// Its text (UTF-8, no whitespace).
    pub text: String,
    /// Where it is.
    #[serde(rename = "box")]
    pub bbox: TextBox,
    /// The engine's confidence, 0..=100.
    pub confidence: f32,
    /// Index of its line in [`TextRead::lines`].
    pub line: usize,
}

/// One line of words, left to right.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Line {
    /// Its words' texts joined by single spaces.
    pub text: String,
    /// The union of its words' boxes.
    #[serde(rename = "box")]
    pub bbox: TextBox,
    /// The lowest confidence of its words, 0..=100.
    pub confidence: f32,
    /// Its words: indexes `first_word..first_word + words` of [`TextRead::words`].
    pub first_word: usize,
    /// How many words it has (at least one).
    pub words: usize,
}

/// What one read found, in reading order (lines top to bottom, words left to right).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TextRead {
    /// Every word.
    pub words: Vec<Word>,
    /// Every line.
    pub lines: Vec<Line>,
}

impl TextRead {
    /// Builds the lines from words that carry only their line numbers (in any order):
    /// lines sorted top to bottom (then left to right), words left to right within a line,
    /// `line` fields renumbered, empty words dropped.
    pub fn from_words(mut words: Vec<Word>) -> TextRead {
        for w in &mut words {
            w.text = without_bars(&w.text);
        }
        words.retain(|w| !w.text.trim().is_empty());
        let mut groups: std::collections::BTreeMap<usize, Vec<Word>> = std::collections::BTreeMap::new();
        for w in words {
            groups.entry(w.line).or_default().push(w);
        }
        let mut grouped: Vec<Vec<Word>> = groups.into_values().collect();
        for g in &mut grouped {
            g.sort_by_key(|w| w.bbox.x);
        }
        grouped.sort_by_key(|g| {
            let b = g.iter().skip(1).fold(g[0].bbox, |b, w| b.union(&w.bbox));
            (b.y + b.height / 2, b.x)
        });
        let mut read = TextRead::default();
        for g in grouped {
            let index = read.lines.len();
            let first_word = read.words.len();
            let bbox = g.iter().skip(1).fold(g[0].bbox, |b, w| b.union(&w.bbox));
            let confidence = g.iter().map(|w| w.confidence).fold(f32::INFINITY, f32::min);
            let text = g.iter().map(|w| w.text.as_str()).collect::<Vec<_>>().join(" ");
            let words = g.len();
            read.words.extend(g.into_iter().map(|w| Word { line: index, ..w }));
            read.lines.push(Line { text, bbox, confidence, first_word, words });
        }
        read
    }

    /// The words of line `i`.
    pub fn line_words(&self, i: usize) -> &[Word] {
        match self.lines.get(i) {
            Some(l) => self.words.get(l.first_word..l.first_word + l.words).unwrap_or(&[]),
            None => &[],
        }
    }

    /// This read with the words whose centres lie in `region` replaced by `inside` (a read
    /// of that region, boxes already in this read's pixels): what an unchanged picture
    /// outside `region` still shows, and what is there now.
    pub fn replace_region(&self, region: &TextBox, inside: &TextRead) -> TextRead {
        let mut words: Vec<Word> = Vec::with_capacity(self.words.len() + inside.words.len());
        let kept = self.words.iter().filter(|w| !w.bbox.center_in(region) && !w.bbox.overlaps(region));
        words.extend(kept.cloned());
        let offset = self.lines.len();
        words.extend(inside.words.iter().map(|w| Word { line: w.line + offset, ..w.clone() }));
        TextRead::from_words(words)
    }
}

/// `word` without a vertical bar stuck to either end: a text field's caret (drawn right
/// after the last letter) or a border line read as `|` (or as a bracket with no partner
/// in the word, `5]`) is never part of a word on a phone screen. A word that is only bars
/// is left alone (it is then a line, not a word's edge).
fn without_bars(word: &str) -> String {
    let bar = |c: char| matches!(c, '|' | '│' | '¦');
    let mut trimmed = word.trim_matches(bar);
    if !trimmed.contains('[') {
        trimmed = trimmed.trim_end_matches(']').trim_end_matches(bar);
    }
    if !trimmed.contains(']') {
        trimmed = trimmed.trim_start_matches('[').trim_start_matches(bar);
    }
    if trimmed.chars().any(char::is_alphanumeric) {
        trimmed.to_string()
    } else {
        word.to_string()
    }
}

/// How to read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadOptions {
    /// Tesseract language codes, e.g. `["eng"]`; empty: the reader's configured ones.
    pub languages: Vec<String>,
    /// How long the read may take before its worker is killed.
    #[serde(with = "millis")]
    pub deadline: Duration,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions { languages: Vec::new(), deadline: DEFAULT_READ_DEADLINE }
    }
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

/// What a reader can do, for `hello`, `status` and `doctor`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReaderInfo {
    /// The engine, e.g. `tesseract`.
    pub engine: String,
    /// The engine's version, when it is loaded.
    pub version: Option<String>,
    /// Whether reads can work (library and language data found).
    pub available: bool,
    /// Languages it reads with by default.
    pub languages: Vec<String>,
    /// Every language whose data is installed.
    pub installed_languages: Vec<String>,
    /// Why it is not available, in words a person can act on.
    pub problem: Option<String>,
}

/// Why a read failed. Every variant leaves the reader usable for the next read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OcrError {
    /// The engine or its data is missing (the message says which package).
    #[error("text reading is unavailable: {0}")]
    Unavailable(String),
    /// The picture cannot be read (empty, too large, wrong length).
    #[error("the picture cannot be read: {0}")]
    BadImage(String),
    /// The read took longer than its deadline; the worker was killed.
    #[error("reading text took longer than {ms} ms; the reader was restarted")]
    Timeout {
        /// The deadline.
        ms: u64,
    },
    /// The worker died during the read (crash, killed, out of memory).
    #[error("the text reader stopped during the read ({0}); it is restarted for the next read")]
    WorkerDied(String),
    /// The worker answered something that is not an answer.
    #[error("the text reader answered nonsense ({0}); it was restarted")]
    Protocol(String),
}

/// A boxed future, so readers can be trait objects.
pub type ReadFuture<'a> = Pin<Box<dyn Future<Output = Result<TextRead, OcrError>> + Send + 'a>>;

/// Something that reads text in pictures. Reads may be asked concurrently; an
/// implementation may serve them one at a time.
pub trait TextReader: Send + Sync {
    /// What it can do now.
    fn info(&self) -> ReaderInfo;

    /// Reads `image`. Boxes in the answer are in `image`'s pixels.
    fn read(&self, image: GrayImage, options: ReadOptions) -> ReadFuture<'_>;
}

/// A reader shared by the daemon's requests (a cheap clone).
#[derive(Clone)]
pub struct SharedReader(pub std::sync::Arc<dyn TextReader>);

impl std::fmt::Debug for SharedReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SharedReader").field(&self.0.info().engine).finish()
    }
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)]
mod tests {
    use super::*;

    fn word(text: &str, x: u32, y: u32, line: usize) -> Word {
        Word {
            text: text.into(),
            bbox: TextBox { x, y, width: 10 * u32::try_from(text.len()).unwrap(), height: 20 },
            confidence: 90.0,
            line,
        }
    }

    #[test]
    fn lines_are_built_in_reading_order() {
        let read = TextRead::from_words(vec![
            word("Mode", 80, 100, 7),
            word("Wi-Fi", 10, 200, 3),
            word("Airplane", 0, 100, 7),
            word(" ", 50, 50, 9),
        ]);
        let lines: Vec<&str> = read.lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(lines, ["Airplane Mode", "Wi-Fi"]);
        assert_eq!(read.line_words(0).len(), 2);
        assert_eq!(read.words[1].line, 0);
        assert_eq!(read.lines[0].bbox, TextBox { x: 0, y: 100, width: 120, height: 20 });
    }

    #[test]
    fn a_caret_stuck_to_a_word_is_not_part_of_it() {
        let read = TextRead::from_words(vec![
            word("5|", 0, 0, 0),
            word("|Call", 30, 0, 0),
            word("|", 60, 0, 0),
            word("5]", 90, 0, 0),
            word("[Ca", 120, 0, 0),
            word("[OK]", 150, 0, 0),
            word("a[i]", 180, 0, 0),
        ]);
        let texts: Vec<&str> = read.words.iter().map(|w| w.text.as_str()).collect();
        assert_eq!(texts, ["5", "Call", "|", "5", "Ca", "[OK]", "a[i]"], "a bracket with its partner stays");
    }

    #[test]
    fn a_region_read_replaces_only_the_words_in_it() {
        let before = TextRead::from_words(vec![word("Off", 0, 0, 0), word("Title", 0, 100, 1)]);
        let now = TextRead::from_words(vec![word("On", 0, 0, 0)]);
        let merged = before.replace_region(&TextBox { x: 0, y: 0, width: 50, height: 30 }, &now);
        let lines: Vec<&str> = merged.lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(lines, ["On", "Title"]);
    }

    #[test]
    fn hostile_sizes_are_refused_before_reading() {
        let empty = GrayImage { width: 0, height: 10, pixels: Vec::new() };
        assert!(matches!(empty.check(), Err(OcrError::BadImage(_))));
        let huge = GrayImage { width: 9000, height: 10, pixels: Vec::new() };
        assert!(matches!(huge.check(), Err(OcrError::BadImage(_))));
        let short = GrayImage { width: 4, height: 4, pixels: vec![0; 15] };
        assert!(matches!(short.check(), Err(OcrError::BadImage(_))));
        assert!(GrayImage { width: 4, height: 4, pixels: vec![0; 16] }.check().is_ok());
    }
}
