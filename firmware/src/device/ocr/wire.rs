//! The pipe protocol between the daemon ([`super::worker`]) and the worker process
//! ([`super::worker_main`]).
//!
//! Daemon to worker, per read: a 4-byte little-endian length, a JSON [`RequestHeader`] of
//! that length (at most [`MAX_HEADER`] bytes), then `width * height` gray bytes.
//! Worker to daemon: JSON lines. The first is a [`Hello`] (`{"hello": ReaderInfo}`), then
//! one [`Answer`] per request (`{"id", "ok", "read" | "error"}`), at most [`MAX_ANSWER`]
//! bytes each.
//!
//! Sizes are bounded before anything is allocated: a header over 64 KiB, a picture
//! larger than [`GrayImage::check`] accepts or an answer line over [`MAX_ANSWER`] is refused,
//! so a garbage stream cannot make either side allocate without bound.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

use super::{GrayImage, OcrError, ReaderInfo, TextRead, MAX_READ_EDGE, MAX_READ_PIXELS};

/// Largest request header, bytes.
pub const MAX_HEADER: usize = 64 << 10;
/// Largest answer line, bytes (a noisy 4K picture's words fit many times over).
pub const MAX_ANSWER: usize = 16 << 20;

/// What precedes a request's pixels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestHeader {
    /// Echoed in the answer.
    pub id: u64,
    /// Picture width.
    pub width: u32,
    /// Picture height.
    pub height: u32,
    /// Languages to read with; empty: the worker's defaults.
    pub languages: Vec<String>,
    /// The read's deadline (the daemon enforces it; the worker logs it).
    pub deadline_ms: u64,
}

/// Why a request could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The pipe failed.
    #[error("pipe: {0}")]
    Io(#[from] io::Error),
    /// The stream ended inside a request or answer.
    #[error("the stream ended inside a message")]
    Truncated,
    /// A header or answer is larger than allowed.
    #[error("{what} of {len} bytes is larger than {max}")]
    TooLarge {
        /// Header or answer.
        what: &'static str,
        /// Its announced or read length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Not the JSON expected.
    #[error("malformed {what}: {message}")]
    Malformed {
        /// Header, answer or hello.
        what: &'static str,
        /// The parser's words.
        message: String,
    },
}

/// An error as it crosses the pipe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "message", rename_all = "snake_case")]
pub enum WireFailure {
    /// [`OcrError::Unavailable`].
    Unavailable(String),
    /// [`OcrError::BadImage`].
    BadImage(String),
    /// Anything else the worker could not do (engine failure, bad request).
    Failed(String),
}

impl From<&OcrError> for WireFailure {
    fn from(e: &OcrError) -> WireFailure {
        match e {
            OcrError::Unavailable(m) => WireFailure::Unavailable(m.clone()),
            OcrError::BadImage(m) => WireFailure::BadImage(m.clone()),
            other => WireFailure::Failed(other.to_string()),
        }
    }
}

impl From<WireFailure> for OcrError {
    fn from(f: WireFailure) -> OcrError {
        match f {
            WireFailure::Unavailable(m) => OcrError::Unavailable(m),
            WireFailure::BadImage(m) => OcrError::BadImage(m),
            // The worker is fine, the read failed: no restart needed, but the caller gets
            // an error that says the reader, not the picture, failed.
            WireFailure::Failed(m) => OcrError::Protocol(m),
        }
    }
}

/// The worker's first line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    /// What it can do.
    pub hello: ReaderInfo,
}

/// The answer to one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    /// The request's id.
    pub id: u64,
    /// Whether `read` (true) or `error` (false) is set.
    pub ok: bool,
    /// What was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<TextRead>,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<WireFailure>,
}

impl Answer {
    /// A successful answer.
    pub fn read(id: u64, read: TextRead) -> Answer {
        Answer { id, ok: true, read: Some(read), error: None }
    }

    /// A failed answer.
    pub fn failed(id: u64, error: WireFailure) -> Answer {
        Answer { id, ok: false, read: None, error: Some(error) }
    }

    /// The result it carries; an answer with `ok` and no read (or the reverse) is a
    /// protocol error.
    pub fn into_result(self) -> Result<TextRead, OcrError> {
        match (self.ok, self.read, self.error) {
            (true, Some(read), None) => Ok(read),
            (false, None, Some(e)) => Err(e.into()),
            _ => Err(OcrError::Protocol("an answer with neither a read nor an error".into())),
        }
    }
}

/// A request's bytes: length, header, pixels.
pub fn encode_request(
    id: u64,
    image: &GrayImage,
    languages: &[String],
    deadline_ms: u64,
) -> Result<Vec<u8>, WireError> {
    let header =
        RequestHeader { id, width: image.width, height: image.height, languages: languages.to_vec(), deadline_ms };
    let json =
        serde_json::to_vec(&header).map_err(|e| WireError::Malformed { what: "header", message: e.to_string() })?;
    if json.len() > MAX_HEADER {
        return Err(WireError::TooLarge { what: "header", len: json.len(), max: MAX_HEADER });
    }
    let len = u32::try_from(json.len()).map_err(|_| WireError::TooLarge {
        what: "header",
        len: json.len(),
        max: MAX_HEADER,
    })?;
    let mut out = Vec::with_capacity(4 + json.len() + image.pixels.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(&image.pixels);
    Ok(out)
}

/// One request as the worker reads it.
#[derive(Debug)]
pub enum Request {
    /// A picture to read (its size already checked).
    Read {
        /// The header.
        header: RequestHeader,
        /// The picture.
        image: GrayImage,
    },
    /// A well-framed request whose picture is refused; its pixels were skipped without
    /// being stored, so the stream stays in step.
    Refused {
        /// The header.
        header: RequestHeader,
        /// Why.
        error: OcrError,
    },
}

/// Reads `buf.len()` bytes; `Ok(false)` when the stream ends before the first byte.
fn read_exact_or_eof(r: &mut impl Read, buf: &mut [u8]) -> Result<bool, WireError> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 => return Ok(false),
            Ok(0) => return Err(WireError::Truncated),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

/// The next request; `Ok(None)` at a clean end of stream. An error means the stream is
/// out of step (the header cannot be trusted for the pixel count) and must be closed.
pub fn read_request(r: &mut impl Read) -> Result<Option<Request>, WireError> {
    let mut len = [0u8; 4];
    if !read_exact_or_eof(r, &mut len)? {
        return Ok(None);
    }
    let len = usize::try_from(u32::from_le_bytes(len)).unwrap_or(usize::MAX);
    if len > MAX_HEADER {
        return Err(WireError::TooLarge { what: "header", len, max: MAX_HEADER });
    }
    let mut json = vec![0u8; len];
    if !read_exact_or_eof(r, &mut json)? && len > 0 {
        return Err(WireError::Truncated);
    }
    let header: RequestHeader =
        serde_json::from_slice(&json).map_err(|e| WireError::Malformed { what: "header", message: e.to_string() })?;
    let pixels = u64::from(header.width) * u64::from(header.height);
    let size_ok = header.width > 0
        && header.height > 0
        && header.width <= MAX_READ_EDGE
        && header.height <= MAX_READ_EDGE
        && pixels <= MAX_READ_PIXELS;
    if !size_ok {
        // The same words as GrayImage::check, without allocating the picture.
        let probe = GrayImage { width: header.width, height: header.height, pixels: Vec::new() };
        let error = probe.check().err().unwrap_or_else(|| OcrError::BadImage("refused size".into()));
        // Skip the announced pixels without storing them.
        let skipped = io::copy(&mut r.take(pixels), &mut io::sink())?;
        if skipped != pixels {
            return Err(WireError::Truncated);
        }
        return Ok(Some(Request::Refused { header, error }));
    }
    // Within MAX_READ_PIXELS (16 Mi): fits usize everywhere tether runs.
    let n = usize::try_from(pixels).map_err(|_| WireError::TooLarge { what: "picture", len: usize::MAX, max: 0 })?;
    let mut bytes = vec![0u8; n];
    if !read_exact_or_eof(r, &mut bytes)? {
        return Err(WireError::Truncated);
    }
    let image = GrayImage { width: header.width, height: header.height, pixels: bytes };
    Ok(Some(Request::Read { header, image }))
}

/// Writes `value` as one JSON line and flushes.
pub fn write_line(w: &mut impl Write, value: &impl Serialize) -> Result<(), WireError> {
    let mut line =
        serde_json::to_vec(value).map_err(|e| WireError::Malformed { what: "answer", message: e.to_string() })?;
    line.push(b'\n');
    w.write_all(&line)?;
    w.flush()?;
    Ok(())
}

/// One line from the worker, parsed.
#[derive(Debug, Clone, PartialEq)]
pub enum FromWorker {
    /// The start-up hello.
    Hello(ReaderInfo),
    /// An answer.
    Answer(Answer),
}

/// Parses one line the worker wrote (without its newline).
pub fn parse_line(line: &[u8]) -> Result<FromWorker, WireError> {
    if line.len() > MAX_ANSWER {
        return Err(WireError::TooLarge { what: "answer", len: line.len(), max: MAX_ANSWER });
    }
    let value: serde_json::Value =
        serde_json::from_slice(line).map_err(|e| WireError::Malformed { what: "answer", message: e.to_string() })?;
    if value.get("hello").is_some() {
        let h: Hello = serde_json::from_value(value)
            .map_err(|e| WireError::Malformed { what: "hello", message: e.to_string() })?;
        return Ok(FromWorker::Hello(h.hello));
    }
    let a: Answer =
        serde_json::from_value(value).map_err(|e| WireError::Malformed { what: "answer", message: e.to_string() })?;
    Ok(FromWorker::Answer(a))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::ocr::{TextBox, Word};

    fn image(w: u32, h: u32) -> GrayImage {
        GrayImage { width: w, height: h, pixels: (0..w * h).map(|i| (i % 251) as u8).collect() }
    }

    #[test]
    fn a_request_round_trips() {
        let img = image(5, 3);
        let bytes = encode_request(7, &img, &["eng".into()], 1500).unwrap();
        let mut r = &bytes[..];
        match read_request(&mut r).unwrap().unwrap() {
            Request::Read { header, image } => {
                assert_eq!((header.id, header.deadline_ms, header.languages), (7, 1500, vec!["eng".to_string()]));
                assert_eq!(image, img);
            }
            other => panic!("{other:?}"),
        }
        assert!(read_request(&mut r).unwrap().is_none(), "clean end of stream");
    }

    #[test]
    fn two_requests_in_a_row_stay_in_step() {
        let mut bytes = encode_request(1, &image(3, 3), &[], 10).unwrap();
        bytes.extend(encode_request(2, &image(4, 2), &[], 10).unwrap());
        let mut r = &bytes[..];
        let ids: Vec<u64> = std::iter::from_fn(|| read_request(&mut r).unwrap())
            .map(|q| match q {
                Request::Read { header, .. } | Request::Refused { header, .. } => header.id,
            })
            .collect();
        assert_eq!(ids, [1, 2]);
    }

    #[test]
    fn an_oversized_picture_is_skipped_not_stored_and_the_next_request_reads() {
        // 9000 x 1 is over the edge limit: refused, its 9000 bytes skipped.
        let big = GrayImage { width: 9000, height: 1, pixels: vec![0; 9000] };
        let mut bytes = encode_request(1, &big, &[], 10).unwrap();
        bytes.extend(encode_request(2, &image(2, 2), &[], 10).unwrap());
        let mut r = &bytes[..];
        assert!(matches!(read_request(&mut r).unwrap(), Some(Request::Refused { error: OcrError::BadImage(_), .. })));
        assert!(matches!(read_request(&mut r).unwrap(), Some(Request::Read { .. })));
    }

    #[test]
    fn a_zero_size_picture_is_refused_in_step() {
        let mut bytes = encode_request(1, &GrayImage { width: 0, height: 0, pixels: vec![] }, &[], 10).unwrap();
        bytes.extend(encode_request(2, &image(2, 2), &[], 10).unwrap());
        let mut r = &bytes[..];
        assert!(matches!(read_request(&mut r).unwrap(), Some(Request::Refused { .. })));
        assert!(matches!(read_request(&mut r).unwrap(), Some(Request::Read { .. })));
    }

    #[test]
    fn a_huge_header_length_is_refused_before_allocating() {
        let bytes = [0xff, 0xff, 0xff, 0xff, b'{'];
        let e = read_request(&mut &bytes[..]).unwrap_err();
        assert!(matches!(e, WireError::TooLarge { what: "header", .. }), "{e}");
    }

    #[test]
    fn garbage_headers_and_truncation_are_errors_not_panics() {
        let mut garbage = 5u32.to_le_bytes().to_vec();
        garbage.extend_from_slice(b"{{{{{");
        assert!(matches!(read_request(&mut &garbage[..]), Err(WireError::Malformed { .. })));
        let unknown = br#"{"id":1,"width":1,"height":1,"languages":[],"deadline_ms":1,"x":2}"#;
        let mut framed = u32::try_from(unknown.len()).unwrap().to_le_bytes().to_vec();
        framed.extend_from_slice(unknown);
        assert!(matches!(read_request(&mut &framed[..]), Err(WireError::Malformed { .. })));
        let full = encode_request(1, &image(4, 4), &[], 10).unwrap();
        for cut in [2, 6, full.len() - 1] {
            assert!(matches!(read_request(&mut &full[..cut]), Err(WireError::Truncated)), "cut at {cut}");
        }
    }

    #[test]
    fn answers_and_hello_round_trip() {
        let word =
            Word { text: "Done".into(), bbox: TextBox { x: 1, y: 2, width: 3, height: 4 }, confidence: 91.5, line: 0 };
        let read = TextRead::from_words(vec![word]);
        let mut out = Vec::new();
        write_line(&mut out, &Answer::read(3, read.clone())).unwrap();
        write_line(&mut out, &Answer::failed(4, WireFailure::BadImage("0x0 is empty".into()))).unwrap();
        let info = ReaderInfo {
            engine: "tesseract".into(),
            version: Some("5.3.0".into()),
            available: true,
            languages: vec!["eng".into()],
            installed_languages: vec!["eng".into()],
            problem: None,
        };
        write_line(&mut out, &Hello { hello: info.clone() }).unwrap();
        let lines: Vec<&[u8]> = out.split(|&b| b == b'\n').filter(|l| !l.is_empty()).collect();
        match parse_line(lines[0]).unwrap() {
            FromWorker::Answer(a) => assert_eq!((a.id, a.into_result().unwrap()), (3, read)),
            other => panic!("{other:?}"),
        }
        match parse_line(lines[1]).unwrap() {
            FromWorker::Answer(a) => {
                assert_eq!(a.into_result().unwrap_err(), OcrError::BadImage("0x0 is empty".into()))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(parse_line(lines[2]).unwrap(), FromWorker::Hello(info));
    }

    #[test]
    fn nonsense_answers_are_protocol_errors() {
        assert!(parse_line(b"Tesseract says hi").is_err());
        assert!(parse_line(br#"{"id":1}"#).is_err());
        let both = Answer { id: 1, ok: true, read: None, error: None };
        assert!(matches!(both.into_result(), Err(OcrError::Protocol(_))));
        assert!(matches!(parse_line(&vec![b' '; MAX_ANSWER + 1]), Err(WireError::TooLarge { .. })));
    }
}
