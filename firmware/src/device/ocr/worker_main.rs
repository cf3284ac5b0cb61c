//! The worker process: `tether ocr-worker [options]` (and the tests crate's
//! `tether-ocr-worker`). Reads requests on stdin, answers on stdout ([`super::wire`]),
//! exits 0 at end of input.
//!
//! It loads Tesseract once at start and keeps it loaded between reads, re-initializing only
//! when a read asks for other languages. A bad request gets an error answer and the loop
//! goes on; only a stream out of step (a header that cannot be parsed, so the pixel count
//! is unknown) ends it, with exit status 2. The protocol goes to a private copy of stdout;
//! fd 1 itself is pointed at stderr, so nothing the library prints can corrupt it.
//!
//! Options (all optional): `--library FILE` (default [`DEFAULT_LIBRARY`]),
//! `--tessdata DIR` (default: Tesseract's own), `--languages eng,deu` (default `eng`),
//! and for measuring: `--psm 3|6|11`, `--scale F` (0: from the picture's width),
//! `--normalize 0|1`, `--ppi N`, `--invert 0|1` (Tesseract's own inverted retry), `--reread 0|1`
//! (doubtful lines read again alone).

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use super::preprocess::{prepare, Preprocess};
use super::tesseract::{
    installed_languages, tessdata_dir, Engine, Library, PageSegMode, Recognition, TesseractError, DEFAULT_LIBRARY,
};
use super::wire::{read_request, write_line, Answer, Hello, Request, WireError, WireFailure};
use super::{GrayImage, OcrError, ReaderInfo, TextRead};

/// How the worker reads, beyond the engine's languages.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tuning {
    /// Page segmentation.
    pub psm: PageSegMode,
    /// Fixed scale; `None`: [`Preprocess::for_picture`].
    pub scale: Option<f32>,
    /// Whether to normalize polarity ([`Preprocess::normalize`]).
    pub normalize: bool,
    /// Resolution hint handed to Tesseract.
    pub ppi: u32,
    /// Whether Tesseract retries low-confidence lines inverted (its own light-on-dark
    /// handling; redundant after normalizing).
    pub engine_invert: bool,
    /// Whether doubtful lines are read again on their own, scaled up. On by default: on
    /// the `read_text` tests' screens it finds one text more at each capture size (a lone
    /// section letter, an alert's line), for a full-read p50 of 115 ms (bench `ocr`;
    /// `--reread 0` to compare).
    pub reread: bool,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            psm: PageSegMode::SparseText,
            scale: None,
            normalize: true,
            ppi: 300,
            engine_invert: false,
            reread: true,
        }
    }
}

/// The worker's options.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerOptions {
    /// The library file.
    pub library: String,
    /// The data directory; `None`: Tesseract's own.
    pub tessdata: Option<PathBuf>,
    /// Languages read when a request names none.
    pub languages: Vec<String>,
    /// Reading choices.
    pub tuning: Tuning,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            library: DEFAULT_LIBRARY.into(),
            tessdata: None,
            languages: vec!["eng".into()],
            tuning: Tuning::default(),
        }
    }
}

impl WorkerOptions {
    /// Parses the worker's arguments (without the program or subcommand name).
    pub fn parse(args: &[String]) -> Result<WorkerOptions, String> {
        let mut o = WorkerOptions::default();
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let mut value = || it.next().cloned().ok_or_else(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "--library" => o.library = value()?,
                "--tessdata" => o.tessdata = Some(PathBuf::from(value()?)),
                "--languages" => {
                    o.languages = value()?.split([',', '+']).filter(|s| !s.is_empty()).map(str::to_owned).collect();
                }
                "--psm" => {
                    o.tuning.psm = match value()?.as_str() {
                        "3" => PageSegMode::Auto,
                        "6" => PageSegMode::SingleBlock,
                        "11" => PageSegMode::SparseText,
                        other => return Err(format!("--psm {other}: 3, 6 or 11")),
                    }
                }
                "--scale" => {
                    let v = value()?;
                    let s: f32 = v.parse().map_err(|_| format!("--scale {v}: a number"))?;
                    o.tuning.scale = (s > 0.0).then_some(s);
                }
                "--normalize" => o.tuning.normalize = value()? != "0",
                "--invert" => o.tuning.engine_invert = value()? != "0",
                "--reread" => o.tuning.reread = value()? != "0",
                "--ppi" => {
                    let v = value()?;
                    o.tuning.ppi = v.parse().map_err(|_| format!("--ppi {v}: a number"))?;
                }
                other => return Err(format!("unknown option {other}")),
            }
        }
        if o.languages.is_empty() {
            return Err("--languages needs at least one".into());
        }
        Ok(o)
    }

    /// These options as arguments for [`WorkerOptions::parse`] (the tuning only where it
    /// differs from the default).
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec!["--library".to_owned(), self.library.clone()];
        if let Some(d) = &self.tessdata {
            a.extend(["--tessdata".to_owned(), d.display().to_string()]);
        }
        a.extend(["--languages".to_owned(), self.languages.join(",")]);
        a
    }
}

/// The engine and what it was started with.
#[derive(Debug)]
pub struct Reader {
    library: Result<Arc<Library>, TesseractError>,
    dir: PathBuf,
    engine: Option<Engine>,
    defaults: Vec<String>,
    problem: Option<String>,
    tuning: Tuning,
}

impl Reader {
    /// Loads the library and an engine for the default languages; what fails is kept as
    /// the reader's problem (every read then answers it).
    pub fn start(options: &WorkerOptions) -> Reader {
        let library = Library::open(&options.library).map(Arc::new);
        let dir = tessdata_dir(options.tessdata.as_deref());
        let mut r = Reader {
            library,
            dir,
            engine: None,
            defaults: options.languages.clone(),
            problem: None,
            tuning: options.tuning,
        };
        let defaults = r.defaults.clone();
        if let Err(e) = r.engine_for(&defaults) {
            r.problem = Some(e.to_string());
        }
        r
    }

    /// What it can do, for the hello.
    pub fn info(&self) -> ReaderInfo {
        ReaderInfo {
            engine: "tesseract".into(),
            version: self.library.as_ref().ok().map(|l| l.version()),
            available: self.problem.is_none(),
            languages: self.defaults.clone(),
            installed_languages: installed_languages(&self.dir),
            problem: self.problem.clone(),
        }
    }

    /// The engine for `languages`, (re)initialized when they differ from the loaded ones.
    fn engine_for(&mut self, languages: &[String]) -> Result<&mut Engine, TesseractError> {
        let lib = self.library.as_ref().map_err(Clone::clone)?.clone();
        let reuse = self.engine.as_ref().is_some_and(|e| e.languages() == languages);
        if !reuse {
            // The old engine goes before the new one loads: two models at once would
            // double the worker's memory.
            self.engine = None;
            tracing::debug!(languages = ?languages, "loading Tesseract");
            self.engine = Some(Engine::new(lib, &self.dir, languages)?);
        }
        self.engine.as_mut().ok_or(TesseractError::Recognize)
    }

    /// Reads `image` with `languages` (empty: the defaults).
    pub fn read(&mut self, image: &GrayImage, languages: &[String]) -> Result<TextRead, OcrError> {
        image.check()?;
        let wanted = if languages.is_empty() { self.defaults.clone() } else { languages.to_vec() };
        let tuning = self.tuning;
        let engine = self.engine_for(&wanted).map_err(|e| OcrError::Unavailable(e.to_string()))?;
        read_image(engine, image, tuning)
    }
}

/// Reads one picture with a loaded engine: preprocessed, recognized, boxes mapped back to
/// `image`'s pixels, words arranged in lines.
pub fn read_image(engine: &mut Engine, image: &GrayImage, tuning: Tuning) -> Result<TextRead, OcrError> {
    image.check()?;
    let mut how = Preprocess::for_picture(image.width);
    if let Some(s) = tuning.scale {
        how.scale = s;
    }
    how.normalize = tuning.normalize;
    let prepared = prepare(image, how);
    let words = engine
        .recognize(
            &prepared.image.pixels,
            prepared.image.width,
            prepared.image.height,
            Recognition { psm: tuning.psm, ppi: tuning.ppi, invert: tuning.engine_invert },
        )
        .map_err(|e| OcrError::Protocol(e.to_string()))?;
    let mut read = TextRead::from_words(prepared.map_back(words, image.width, image.height));
    if tuning.reread {
        reread_doubtful_lines(engine, image, &mut read, tuning);
    }
    Ok(read)
}

/// Lines read with less confidence than this are read again on their own.
const REREAD_BELOW: f32 = 85.0;
/// At most this many lines are read again per picture (bounds the time).
const MAX_REREADS: usize = 12;
/// A line read again is scaled so that it is about this tall, pixels.
const REREAD_LINE_HEIGHT: f32 = 64.0;

/// Reads doubtful lines again, each cropped and scaled up on its own as one line: small
/// light text on a busy background (the home screen's labels) reads better alone. A
/// line's words take the new texts when the new read has as many words, each more
/// confident; boxes stay those of the full read.
fn reread_doubtful_lines(engine: &mut Engine, image: &GrayImage, read: &mut TextRead, tuning: Tuning) {
    let mut doubtful: Vec<usize> = (0..read.lines.len())
        .filter(|&i| read.lines[i].confidence < REREAD_BELOW && read.lines[i].bbox.height >= 6)
        .collect();
    doubtful.sort_by(|&a, &b| read.lines[a].confidence.total_cmp(&read.lines[b].confidence));
    doubtful.truncate(MAX_REREADS);
    for i in doubtful {
        let line = read.lines[i].clone();
        let pad = (line.bbox.height / 2).max(4);
        let (part, _) = super::preprocess::crop(image, line.bbox, pad);
        let scale = (REREAD_LINE_HEIGHT / line.bbox.height.max(1) as f32).clamp(1.0, super::preprocess::MAX_SCALE);
        let prepared = prepare(&part, Preprocess { scale, normalize: tuning.normalize });
        let how = Recognition { psm: PageSegMode::SingleLine, ppi: tuning.ppi, invert: tuning.engine_invert };
        let Ok(again) = engine.recognize(&prepared.image.pixels, prepared.image.width, prepared.image.height, how)
        else {
            continue;
        };
        let old = read.words.get(line.first_word..line.first_word + line.words).unwrap_or(&[]);
        let better = again.len() == old.len() && again.iter().zip(old).all(|(n, o)| n.confidence > o.confidence);
        if !better {
            continue;
        }
        for (k, n) in again.into_iter().enumerate() {
            if let Some(w) = read.words.get_mut(line.first_word + k) {
                w.text = n.text;
                w.confidence = n.confidence;
            }
        }
        let words = read.words.get(line.first_word..line.first_word + line.words).unwrap_or(&[]);
        if let Some(l) = read.lines.get_mut(i) {
            l.text = words.iter().map(|w| w.text.as_str()).collect::<Vec<_>>().join(" ");
            l.confidence = words.iter().map(|w| w.confidence).fold(f32::INFINITY, f32::min);
        }
    }
}

/// Serves requests from `input` on `output` until `input` ends: the hello first, then one
/// answer per request. An error means the stream is out of step or the pipe broke.
pub fn serve(reader: &mut Reader, input: impl Read, output: impl Write) -> Result<(), WireError> {
    let mut input = BufReader::with_capacity(1 << 16, input);
    let mut output = BufWriter::new(output);
    write_line(&mut output, &Hello { hello: reader.info() })?;
    loop {
        let answer = match read_request(&mut input) {
            Ok(None) => return Ok(()),
            Ok(Some(Request::Refused { header, error })) => Answer::failed(header.id, WireFailure::from(&error)),
            Ok(Some(Request::Read { header, image })) => {
                let started = std::time::Instant::now();
                let result = reader.read(&image, &header.languages);
                tracing::debug!(
                    id = header.id,
                    width = image.width,
                    height = image.height,
                    ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    deadline_ms = header.deadline_ms,
                    ok = result.is_ok(),
                    "read"
                );
                match result {
                    Ok(read) => Answer::read(header.id, read),
                    Err(e) => Answer::failed(header.id, WireFailure::from(&e)),
                }
            }
            Err(e) => {
                // Out of step: say why (id 0: no request to name) and stop.
                let _ = write_line(&mut output, &Answer::failed(0, WireFailure::Failed(e.to_string())));
                return Err(e);
            }
        };
        write_line(&mut output, &answer)?;
    }
}

/// The worker process's entry: `args` are its options (after the subcommand).
pub fn run(args: &[String]) -> ExitCode {
    // Its own process: a subscriber here sets nothing in the daemon. Warnings by default;
    // TETHER_OCR_LOG=debug shows every read's time.
    let filter = tracing_subscriber::EnvFilter::try_from_env("TETHER_OCR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter).try_init();
    let options = match WorkerOptions::parse(args) {
        Ok(o) => o,
        Err(e) => {
            tracing::error!("ocr-worker: {e}");
            return ExitCode::from(64);
        }
    };
    // The protocol gets its own copy of stdout; fd 1 then points at stderr, so whatever
    // Tesseract prints goes to the log, not into the answers.
    let protocol = match nix::unistd::dup(std::io::stdout()) {
        Ok(fd) => std::fs::File::from(fd),
        Err(e) => {
            tracing::error!("ocr-worker: dup stdout: {e}");
            return ExitCode::from(71);
        }
    };
    if let Err(e) = nix::unistd::dup2_stdout(std::io::stderr()) {
        tracing::warn!("ocr-worker: cannot point stdout at stderr: {e}");
    }
    let mut reader = Reader::start(&options);
    if let Some(p) = &reader.problem {
        tracing::warn!("ocr-worker: {p}");
    }
    match serve(&mut reader, std::io::stdin().lock(), protocol) {
        Ok(()) => ExitCode::SUCCESS,
        Err(WireError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("ocr-worker: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::ocr::wire::{encode_request, parse_line, FromWorker};

    fn answers(out: &[u8]) -> Vec<FromWorker> {
        out.split(|&b| b == b'\n').filter(|l| !l.is_empty()).map(|l| parse_line(l).unwrap()).collect()
    }

    fn missing() -> Reader {
        Reader::start(&WorkerOptions { library: "libtesseract-not-there.so".into(), ..WorkerOptions::default() })
    }

    #[test]
    fn options_parse_and_refuse_nonsense() {
        let args: Vec<String> = ["--languages", "eng+deu", "--psm", "6", "--scale", "1.5"].map(String::from).to_vec();
        let o = WorkerOptions::parse(&args).unwrap();
        assert_eq!(o.languages, ["eng", "deu"]);
        assert_eq!((o.tuning.psm, o.tuning.scale), (PageSegMode::SingleBlock, Some(1.5)));
        assert_eq!(WorkerOptions::parse(&o.to_args()).unwrap().languages, o.languages);
        for bad in [&["--psm", "4"][..], &["--what"], &["--library"], &["--languages", ","]] {
            let a: Vec<String> = bad.iter().map(|s| s.to_string()).collect();
            assert!(WorkerOptions::parse(&a).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn without_the_library_it_says_hello_unavailable_and_answers_every_read() {
        let mut reader = missing();
        let mut input = encode_request(1, &GrayImage { width: 2, height: 2, pixels: vec![0; 4] }, &[], 100).unwrap();
        input.extend(encode_request(2, &GrayImage { width: 0, height: 2, pixels: vec![] }, &[], 100).unwrap());
        let mut out = Vec::new();
        serve(&mut reader, &input[..], &mut out).unwrap();
        let got = answers(&out);
        let FromWorker::Hello(info) = &got[0] else { panic!("{got:?}") };
        assert!(!info.available && info.problem.as_deref().unwrap_or("").contains("libtesseract5"), "{info:?}");
        let FromWorker::Answer(a1) = got[1].clone() else { panic!() };
        assert!(matches!(a1.into_result(), Err(OcrError::Unavailable(_))));
        let FromWorker::Answer(a2) = got[2].clone() else { panic!() };
        assert!(matches!(a2.into_result(), Err(OcrError::BadImage(_))), "size is checked first");
    }

    #[test]
    fn a_stream_out_of_step_gets_a_last_answer_and_an_error() {
        let mut reader = missing();
        let input = [3u8, 0, 0, 0, b'x', b'y', b'z'];
        let mut out = Vec::new();
        assert!(serve(&mut reader, &input[..], &mut out).is_err());
        let got = answers(&out);
        assert_eq!(got.len(), 2, "hello and the error");
    }

    #[test]
    fn a_language_change_reloads_and_a_missing_language_is_unavailable() {
        let mut reader = Reader::start(&WorkerOptions::default());
        if reader.problem.is_some() {
            assert!(std::env::var_os("TETHER_REQUIRE_TOOLS").is_none(), "{:?}", reader.problem);
            eprintln!("skipped: {:?}", reader.problem);
            return;
        }
        let img = GrayImage { width: 8, height: 8, pixels: vec![255; 64] };
        assert!(reader.read(&img, &[]).unwrap().words.is_empty());
        let e = reader.read(&img, &["zzz".into()]).unwrap_err();
        assert!(matches!(&e, OcrError::Unavailable(m) if m.contains("tesseract-ocr-zzz")), "{e:?}");
        let e = reader.read(&img, &["../x".into()]).unwrap_err();
        assert!(matches!(&e, OcrError::Unavailable(m) if m.contains("not a Tesseract language")), "{e:?}");
        assert!(reader.read(&img, &[]).is_ok(), "back to the defaults");
    }
}
