//! Tesseract 5's C API (`tesseract/capi.h`), loaded at run time with `dlopen`.
//!
//! Nothing links against Tesseract: the binary builds and cross-compiles with no Tesseract
//! installed, and a missing library or language file is a [`TesseractError`] naming the
//! Debian package to install. The declarations below are written from the header's
//! signatures (Tesseract 5.3, `include/tesseract/capi.h`); only the functions tether uses
//! are declared. This is the only file of the OCR engine with `unsafe`.
//!
//! The engine is used by the worker process only ([`super::worker_main`]): a crash in it
//! costs one read, never the daemon.

use std::ffi::{c_char, c_float, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

use super::{TextBox, Word};

/// The library's file name, as Debian's `libtesseract5` installs it.
pub const DEFAULT_LIBRARY: &str = "libtesseract.so.5";

/// Where Debian's `tesseract-ocr-*` packages put the language data, newest layout first.
pub const TESSDATA_CANDIDATES: [&str; 3] =
    ["/usr/share/tesseract-ocr/5/tessdata", "/usr/share/tesseract-ocr/4.00/tessdata", "/usr/share/tessdata"];

/// Longest language code accepted (Tesseract's are like `eng`, `chi_sim`, `script/Latin`
/// is not accepted: no path separators).
const MAX_LANGUAGE_LEN: usize = 32;

/// Most languages one engine loads at once.
pub const MAX_LANGUAGES: usize = 8;

/// Why the engine cannot load or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TesseractError {
    /// The shared library is not there or does not load.
    #[error("cannot load {library} ({reason}); install the Debian package libtesseract5")]
    Library {
        /// The file asked for.
        library: String,
        /// dlopen's words.
        reason: String,
    },
    /// The library lacks a function tether needs (not Tesseract 4/5's C API).
    #[error("{library} has no {symbol}: not Tesseract 5's C API")]
    Symbol {
        /// The file loaded.
        library: String,
        /// The missing function.
        symbol: &'static str,
    },
    /// A language code is not one Tesseract could have.
    #[error("{0:?} is not a Tesseract language code (like eng, deu, chi_sim)")]
    BadLanguage(String),
    /// A language's data file is not installed.
    #[error("no language data for {language} in {dir}; install the Debian package tesseract-ocr-{package}")]
    MissingLanguage {
        /// The code asked for.
        language: String,
        /// Where it was looked for.
        dir: String,
        /// The package's suffix (`eng`, `chi-sim`).
        package: String,
    },
    /// `TessBaseAPIInit3` failed although the data files exist.
    #[error("Tesseract did not start with {languages} from {dir}")]
    Init {
        /// The `+`-joined codes.
        languages: String,
        /// The data directory.
        dir: String,
    },
    /// The picture's size does not fit the C API's `int`s or its byte count.
    #[error("picture {width}x{height} with {len} bytes cannot be handed to Tesseract")]
    BadImage {
        /// Width.
        width: u32,
        /// Height.
        height: u32,
        /// Bytes given.
        len: usize,
    },
    /// `TessBaseAPIRecognize` failed.
    #[error("Tesseract failed to recognize the picture")]
    Recognize,
}

/// Opaque `TessBaseAPI`.
#[repr(C)]
struct TessBaseApi {
    _private: [u8; 0],
}
/// Opaque `TessResultIterator`.
#[repr(C)]
struct TessResultIterator {
    _private: [u8; 0],
}
/// Opaque `TessPageIterator`.
#[repr(C)]
struct TessPageIterator {
    _private: [u8; 0],
}

/// capi.h's `BOOL` is `int`.
type Bool = c_int;

/// `TessPageIteratorLevel`: `RIL_BLOCK, RIL_PARA, RIL_TEXTLINE, RIL_WORD, RIL_SYMBOL`.
const RIL_TEXTLINE: c_int = 2;
const RIL_WORD: c_int = 3;

/// `TessPageSegMode` values tether uses (the enum's order in capi.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageSegMode {
    /// `PSM_AUTO` (3): full page layout analysis.
    Auto = 3,
    /// `PSM_SINGLE_BLOCK` (6): one uniform block of text.
    SingleBlock = 6,
    /// `PSM_SINGLE_LINE` (7): one line of text.
    SingleLine = 7,
    /// `PSM_SPARSE_TEXT` (11): as much text as possible, in no particular order.
    SparseText = 11,
}

/// The functions used, copied out of the library once (fn pointers are `Copy`); valid as
/// long as the [`Library`] holding them is loaded.
#[derive(Clone, Copy)]
struct Api {
    version: unsafe extern "C" fn() -> *const c_char,
    delete_text: unsafe extern "C" fn(*const c_char),
    create: unsafe extern "C" fn() -> *mut TessBaseApi,
    delete: unsafe extern "C" fn(*mut TessBaseApi),
    init3: unsafe extern "C" fn(*mut TessBaseApi, *const c_char, *const c_char) -> c_int,
    set_page_seg_mode: unsafe extern "C" fn(*mut TessBaseApi, c_int),
    set_variable: unsafe extern "C" fn(*mut TessBaseApi, *const c_char, *const c_char) -> Bool,
    set_image: unsafe extern "C" fn(*mut TessBaseApi, *const u8, c_int, c_int, c_int, c_int),
    set_source_resolution: unsafe extern "C" fn(*mut TessBaseApi, c_int),
    recognize: unsafe extern "C" fn(*mut TessBaseApi, *mut c_void) -> c_int,
    get_iterator: unsafe extern "C" fn(*mut TessBaseApi) -> *mut TessResultIterator,
    result_page_iterator: unsafe extern "C" fn(*mut TessResultIterator) -> *mut TessPageIterator,
    bounding_box:
        unsafe extern "C" fn(*const TessPageIterator, c_int, *mut c_int, *mut c_int, *mut c_int, *mut c_int) -> Bool,
    is_at_beginning_of: unsafe extern "C" fn(*const TessPageIterator, c_int) -> Bool,
    utf8_text: unsafe extern "C" fn(*const TessResultIterator, c_int) -> *mut c_char,
    confidence: unsafe extern "C" fn(*const TessResultIterator, c_int) -> c_float,
    next: unsafe extern "C" fn(*mut TessResultIterator, c_int) -> Bool,
    iterator_delete: unsafe extern "C" fn(*mut TessResultIterator),
    clear: unsafe extern "C" fn(*mut TessBaseApi),
    end: unsafe extern "C" fn(*mut TessBaseApi),
}

/// The loaded `libtesseract`.
pub struct Library {
    api: Api,
    /// Keeps the code behind `api` mapped; dropped last.
    _lib: libloading::Library,
    name: String,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library").field("name", &self.name).finish_non_exhaustive()
    }
}

/// Looks up `name` (NUL-terminated) in `lib` as a `T`.
///
/// # Safety
/// `T` must be the function pointer type the C header declares for `name`.
unsafe fn symbol<T: Copy>(lib: &libloading::Library, library: &str, name: &'static [u8]) -> Result<T, TesseractError> {
    // SAFETY: the caller promises `T` is the symbol's real type; the value is copied out
    // and used only while `lib` stays loaded (Library keeps both together).
    match unsafe { lib.get::<T>(name) } {
        Ok(s) => Ok(*s),
        Err(_) => Err(TesseractError::Symbol {
            library: library.to_owned(),
            symbol: std::str::from_utf8(name.strip_suffix(b"\0").unwrap_or(name)).unwrap_or("?"),
        }),
    }
}

impl Library {
    /// Loads the library (a file name searched the usual way, or a path).
    pub fn open(library: &str) -> Result<Library, TesseractError> {
        // SAFETY: loading runs the library's initializers. libtesseract's are C++ static
        // constructors with no preconditions on the caller; it is loaded in the worker
        // process only, which has a single thread at this point.
        let lib = unsafe { libloading::Library::new(library) }
            .map_err(|e| TesseractError::Library { library: library.to_owned(), reason: e.to_string() })?;
        let n = library;
        // SAFETY: for every `symbol` call below, each type is the one capi.h declares for that
        // name: opaque handles as pointers, `BOOL` and enums as `int`, `float` as c_float,
        // `ETEXT_DESC*` as a void pointer we always pass as NULL.
        let api = unsafe {
            Api {
                version: symbol(&lib, n, b"TessVersion\0")?,
                delete_text: symbol(&lib, n, b"TessDeleteText\0")?,
                create: symbol(&lib, n, b"TessBaseAPICreate\0")?,
                delete: symbol(&lib, n, b"TessBaseAPIDelete\0")?,
                init3: symbol(&lib, n, b"TessBaseAPIInit3\0")?,
                set_page_seg_mode: symbol(&lib, n, b"TessBaseAPISetPageSegMode\0")?,
                set_variable: symbol(&lib, n, b"TessBaseAPISetVariable\0")?,
                set_image: symbol(&lib, n, b"TessBaseAPISetImage\0")?,
                set_source_resolution: symbol(&lib, n, b"TessBaseAPISetSourceResolution\0")?,
                recognize: symbol(&lib, n, b"TessBaseAPIRecognize\0")?,
                get_iterator: symbol(&lib, n, b"TessBaseAPIGetIterator\0")?,
                result_page_iterator: symbol(&lib, n, b"TessResultIteratorGetPageIterator\0")?,
                bounding_box: symbol(&lib, n, b"TessPageIteratorBoundingBox\0")?,
                is_at_beginning_of: symbol(&lib, n, b"TessPageIteratorIsAtBeginningOf\0")?,
                utf8_text: symbol(&lib, n, b"TessResultIteratorGetUTF8Text\0")?,
                confidence: symbol(&lib, n, b"TessResultIteratorConfidence\0")?,
                next: symbol(&lib, n, b"TessResultIteratorNext\0")?,
                iterator_delete: symbol(&lib, n, b"TessResultIteratorDelete\0")?,
                clear: symbol(&lib, n, b"TessBaseAPIClear\0")?,
                end: symbol(&lib, n, b"TessBaseAPIEnd\0")?,
            }
        };
        Ok(Library { api, _lib: lib, name: library.to_owned() })
    }

    /// Tesseract's version, e.g. `5.3.0`.
    pub fn version(&self) -> String {
        // SAFETY: TessVersion takes nothing and returns a pointer to a static NUL-terminated
        // string (not to be freed), or NULL, which is checked.
        let p = unsafe { (self.api.version)() };
        if p.is_null() {
            return "unknown".into();
        }
        // SAFETY: non-NULL, static and NUL-terminated per the header.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// The directory with the language data: `configured`, else `$TESSDATA_PREFIX`, else the
/// first of [`TESSDATA_CANDIDATES`] that exists (else the first, for messages).
pub fn tessdata_dir(configured: Option<&Path>) -> PathBuf {
    if let Some(p) = configured {
        return p.to_path_buf();
    }
    if let Some(p) = std::env::var_os("TESSDATA_PREFIX").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    TESSDATA_CANDIDATES
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_dir())
        .unwrap_or_else(|| PathBuf::from(TESSDATA_CANDIDATES[0]))
}

/// The languages whose `.traineddata` is in `dir`, sorted (`osd`, orientation detection, is
/// not a language and is left out).
pub fn installed_languages(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".traineddata")).map(str::to_owned))
        .filter(|l| l != "osd" && check_language(l).is_ok())
        .collect();
    out.sort();
    out
}

/// Whether `code` looks like a Tesseract language code: 1..=32 of `[A-Za-z0-9_]` (no path
/// separators or dots, so it cannot name a file outside the data directory).
pub fn check_language(code: &str) -> Result<(), TesseractError> {
    let ok = !code.is_empty()
        && code.len() <= MAX_LANGUAGE_LEN
        && code.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(TesseractError::BadLanguage(code.chars().take(MAX_LANGUAGE_LEN + 8).collect()))
    }
}

/// The Debian package with `code`'s data: `tesseract-ocr-<code>` with `_` as `-`.
pub fn package_for(code: &str) -> String {
    format!("tesseract-ocr-{}", code.to_ascii_lowercase().replace('_', "-"))
}

/// Checks `languages` against the data in `dir`: every code valid and installed.
pub fn check_languages(dir: &Path, languages: &[String]) -> Result<(), TesseractError> {
    if languages.is_empty() || languages.len() > MAX_LANGUAGES {
        return Err(TesseractError::BadLanguage(format!("{} languages (1..={MAX_LANGUAGES})", languages.len())));
    }
    for l in languages {
        check_language(l)?;
        if !dir.join(format!("{l}.traineddata")).is_file() {
            return Err(TesseractError::MissingLanguage {
                language: l.clone(),
                dir: dir.display().to_string(),
                package: package_for(l).trim_start_matches("tesseract-ocr-").to_owned(),
            });
        }
    }
    Ok(())
}

/// One recognizer, initialized with a set of languages. Not `Send`: the worker uses it on
/// one thread.
pub struct Engine {
    lib: Arc<Library>,
    handle: NonNull<TessBaseApi>,
    languages: Vec<String>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("languages", &self.languages).finish_non_exhaustive()
    }
}

/// How one recognition runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recognition {
    /// Page segmentation.
    pub psm: PageSegMode,
    /// The picture's resolution hint, pixels per inch.
    pub ppi: u32,
    /// Whether Tesseract retries each low-confidence line inverted (light-on-dark text;
    /// costs time, redundant after [`super::preprocess`] normalized the picture).
    pub invert: bool,
}

impl Engine {
    /// An engine reading `languages` with the data in `dir` (checked first, so a missing
    /// file is a clear error rather than Tesseract's message on stderr).
    pub fn new(lib: Arc<Library>, dir: &Path, languages: &[String]) -> Result<Engine, TesseractError> {
        check_languages(dir, languages)?;
        let joined = languages.join("+");
        let init_error = || TesseractError::Init { languages: joined.clone(), dir: dir.display().to_string() };
        // Tesseract appends the language file name to the directory itself.
        let mut dir_text = dir.as_os_str().to_str().ok_or_else(init_error)?.to_owned();
        if !dir_text.ends_with('/') {
            dir_text.push('/');
        }
        let c_dir = CString::new(dir_text).map_err(|_| init_error())?;
        let c_lang = CString::new(joined.clone()).map_err(|_| init_error())?;
        // SAFETY: TessBaseAPICreate takes nothing and returns a new handle or NULL (checked).
        let raw = unsafe { (lib.api.create)() };
        let handle = NonNull::new(raw).ok_or_else(init_error)?;
        // From here on Drop ends and deletes the handle on every path.
        let engine = Engine { lib, handle, languages: languages.to_vec() };
        // SAFETY: the handle is live; both strings are NUL-terminated and outlive the call
        // (Tesseract copies them).
        let rc = unsafe { (engine.lib.api.init3)(engine.handle.as_ptr(), c_dir.as_ptr(), c_lang.as_ptr()) };
        if rc != 0 {
            return Err(init_error());
        }
        Ok(engine)
    }

    /// The languages it reads.
    pub fn languages(&self) -> &[String] {
        &self.languages
    }

    /// The library it uses.
    pub fn library(&self) -> &Arc<Library> {
        &self.lib
    }

    fn set_variable(&self, name: &CStr, value: &CStr) -> bool {
        // SAFETY: the handle is live; both are NUL-terminated and Tesseract copies them.
        unsafe { (self.lib.api.set_variable)(self.handle.as_ptr(), name.as_ptr(), value.as_ptr()) != 0 }
    }

    /// Reads a grayscale picture (`width * height` bytes, rows top to bottom): its words
    /// with boxes in its pixels, confidences and Tesseract's line numbers.
    pub fn recognize(
        &mut self,
        pixels: &[u8],
        width: u32,
        height: u32,
        how: Recognition,
    ) -> Result<Vec<Word>, TesseractError> {
        let bad = || TesseractError::BadImage { width, height, len: pixels.len() };
        let w = c_int::try_from(width).map_err(|_| bad())?;
        let h = c_int::try_from(height).map_err(|_| bad())?;
        let len = usize::try_from(u64::from(width) * u64::from(height)).map_err(|_| bad())?;
        if width == 0 || height == 0 || pixels.len() != len {
            return Err(bad());
        }
        let ppi = c_int::try_from(how.ppi.clamp(70, 1200)).unwrap_or(300);
        let api = self.lib.api;
        let handle = self.handle.as_ptr();
        // SAFETY: the handle is live; the mode is one of capi.h's enum values.
        unsafe { (api.set_page_seg_mode)(handle, how.psm as c_int) };
        self.set_variable(c"tessedit_do_invert", if how.invert { c"1" } else { c"0" });
        // SAFETY: `pixels` holds exactly w*h bytes, one per pixel, `w` per row, as the call's
        // (bytes_per_pixel = 1, bytes_per_line = w) say; Tesseract copies them into its own
        // image, and `pixels` outlives the call anyway.
        unsafe { (api.set_image)(handle, pixels.as_ptr(), w, h, 1, w) };
        // SAFETY: the handle is live and has an image.
        unsafe { (api.set_source_resolution)(handle, ppi) };
        // SAFETY: the handle is live with an image; a NULL monitor is allowed (no progress,
        // no cancel: the daemon kills the worker past the deadline instead).
        let rc = unsafe { (api.recognize)(handle, std::ptr::null_mut()) };
        let words = if rc == 0 { Ok(self.words(width, height)) } else { Err(TesseractError::Recognize) };
        // SAFETY: the handle is live; Clear frees the image and results (no iterator is alive:
        // `words` deleted its own).
        unsafe { (api.clear)(handle) };
        words
    }

    /// The words of the last recognition.
    fn words(&self, width: u32, height: u32) -> Vec<Word> {
        let api = self.lib.api;
        // SAFETY: the handle is live and recognized; the iterator returned (or NULL, checked)
        // is ours to delete, which the loop's end does.
        let Some(it) = NonNull::new(unsafe { (api.get_iterator)(self.handle.as_ptr()) }) else {
            return Vec::new();
        };
        let it = it.as_ptr();
        // SAFETY: `it` is live; the page iterator is a view of it (same object, not to be
        // deleted separately) and lives as long as `it`.
        let page = unsafe { (api.result_page_iterator)(it) };
        let mut out = Vec::new();
        let mut line: usize = 0;
        let mut first = true;
        loop {
            // SAFETY: `page` is the live view of `it`; the level is a capi.h enum value.
            let starts_line = unsafe { (api.is_at_beginning_of)(page, RIL_TEXTLINE) } != 0;
            if starts_line && !first {
                line += 1;
            }
            first = false;
            // SAFETY: `it` is live; the text returned is NUL-terminated, ours, freed with
            // TessDeleteText right after copying; NULL (no word here) is checked.
            let text = unsafe {
                let p = (api.utf8_text)(it, RIL_WORD);
                if p.is_null() {
                    None
                } else {
                    let s = CStr::from_ptr(p).to_string_lossy().into_owned();
                    (api.delete_text)(p);
                    Some(s)
                }
            };
            let (mut l, mut t, mut r, mut b): (c_int, c_int, c_int, c_int) = (0, 0, 0, 0);
            // SAFETY: `page` is live; the four pointers are to our locals.
            let boxed = unsafe { (api.bounding_box)(page, RIL_WORD, &mut l, &mut t, &mut r, &mut b) } != 0;
            // SAFETY: `it` is live.
            let confidence = unsafe { (api.confidence)(it, RIL_WORD) };
            if let (Some(text), true) = (text, boxed) {
                let text = text.trim().to_owned();
                if !text.is_empty() {
                    out.push(Word {
                        text,
                        bbox: clamp_box(l, t, r, b, width, height),
                        confidence: confidence.clamp(0.0, 100.0),
                        line,
                    });
                }
            }
            // SAFETY: `it` is live; Next returns 0 at the end.
            if unsafe { (api.next)(it, RIL_WORD) } == 0 {
                break;
            }
        }
        // SAFETY: `it` came from GetIterator and is deleted once; `page` is not used after.
        unsafe { (api.iterator_delete)(it) };
        out
    }
}

/// A box from Tesseract's (left, top, right, bottom), clamped to the picture.
fn clamp_box(l: c_int, t: c_int, r: c_int, b: c_int, width: u32, height: u32) -> TextBox {
    let cx = |v: c_int| u32::try_from(v.max(0)).unwrap_or(0).min(width);
    let cy = |v: c_int| u32::try_from(v.max(0)).unwrap_or(0).min(height);
    let (x0, y0, x1, y1) = (cx(l), cy(t), cx(r), cy(b));
    TextBox { x: x0, y: y0, width: x1.saturating_sub(x0), height: y1.saturating_sub(y0) }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // SAFETY: the handle is live and dropped once; End frees the models, Delete the
        // handle itself; nothing uses it afterwards.
        unsafe {
            (self.lib.api.end)(self.handle.as_ptr());
            (self.lib.api.delete)(self.handle.as_ptr());
        }
    }
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)]
mod tests {
    use super::*;

    /// The library when this machine has it (CI installs it via tests/run's need_tools);
    /// tests that need it skip otherwise, saying so.
    fn lib() -> Option<Arc<Library>> {
        match Library::open(DEFAULT_LIBRARY) {
            Ok(l) => Some(Arc::new(l)),
            Err(e) => {
                assert!(std::env::var_os("TETHER_REQUIRE_TOOLS").is_none(), "{e}");
                eprintln!("skipped: {e}");
                None
            }
        }
    }

    #[test]
    fn a_missing_library_names_the_package() {
        let e = Library::open("libtesseract-not-there.so.9").unwrap_err();
        assert!(matches!(e, TesseractError::Library { .. }));
        assert!(e.to_string().contains("libtesseract5"), "{e}");
    }

    #[test]
    fn a_library_without_the_api_is_refused() {
        // libc loads but has no Tesseract functions.
        let e = Library::open("libc.so.6").unwrap_err();
        assert!(matches!(e, TesseractError::Symbol { symbol: "TessVersion", .. }), "{e:?}");
    }

    #[test]
    fn the_version_is_read() {
        let Some(lib) = lib() else { return };
        assert!(lib.version().starts_with('5'), "{}", lib.version());
    }

    #[test]
    fn language_codes_cannot_name_other_files() {
        assert!(check_language("eng").is_ok());
        assert!(check_language("chi_sim").is_ok());
        for bad in ["", "../etc/passwd", "eng+deu", "a.b", &"x".repeat(40)] {
            assert!(check_language(bad).is_err(), "{bad:?}");
        }
        assert_eq!(package_for("chi_sim"), "tesseract-ocr-chi-sim");
    }

    #[test]
    fn a_missing_language_names_its_package() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("eng.traineddata"), b"").unwrap();
        std::fs::write(dir.path().join("osd.traineddata"), b"").unwrap();
        assert_eq!(installed_languages(dir.path()), ["eng"]);
        let e = check_languages(dir.path(), &["eng".into(), "deu".into()]).unwrap_err();
        assert!(e.to_string().contains("tesseract-ocr-deu"), "{e}");
    }

    #[test]
    fn an_engine_with_missing_data_is_an_error_not_a_crash() {
        let Some(lib) = lib() else { return };
        let dir = tempfile::tempdir().unwrap();
        // A file that exists but is not language data: Init3 fails, Drop still cleans up.
        std::fs::write(dir.path().join("eng.traineddata"), b"not a model").unwrap();
        let e = Engine::new(lib, dir.path(), &["eng".into()]).unwrap_err();
        assert!(matches!(e, TesseractError::Init { .. }), "{e:?}");
    }

    /// A 3x-scaled "HI" drawn with blocks: enough for Tesseract to find one word.
    fn blocky_text() -> (Vec<u8>, u32, u32) {
        let glyphs = ["#...#.###", "#...#..#.", "#####..#.", "#...#..#.", "#...#.###"];
        let (scale, pad) = (12u32, 40u32);
        let (w, h) = (9 * scale + 2 * pad, 5 * scale + 2 * pad);
        let mut px = vec![255u8; (w * h) as usize];
        for (row, line) in glyphs.iter().enumerate() {
            for (col, c) in line.bytes().enumerate() {
                if c == b'#' {
                    for dy in 0..scale {
                        for dx in 0..scale {
                            let (x, y) = (pad + col as u32 * scale + dx, pad + row as u32 * scale + dy);
                            px[(y * w + x) as usize] = 0;
                        }
                    }
                }
            }
        }
        (px, w, h)
    }

    #[test]
    fn an_engine_reads_words_with_boxes_and_cleans_up() {
        let Some(lib) = lib() else { return };
        let dir = tessdata_dir(None);
        let mut engine = Engine::new(lib, &dir, &["eng".into()]).unwrap();
        let (px, w, h) = blocky_text();
        let how = Recognition { psm: PageSegMode::SparseText, ppi: 300, invert: false };
        let words = engine.recognize(&px, w, h, how).unwrap();
        let hi = words.iter().find(|w| w.text == "HI").unwrap_or_else(|| panic!("{words:?}"));
        assert!(hi.bbox.x >= 30 && hi.bbox.x <= 50 && hi.bbox.width > 80, "{hi:?}");
        // The engine is re-usable after a read, and an empty page reads as nothing.
        let blank = vec![255u8; (w * h) as usize];
        assert!(engine.recognize(&blank, w, h, how).unwrap().is_empty());
    }

    #[test]
    fn a_wrong_length_never_reaches_the_engine() {
        let Some(lib) = lib() else { return };
        let mut engine = Engine::new(lib, &tessdata_dir(None), &["eng".into()]).unwrap();
        let how = Recognition { psm: PageSegMode::Auto, ppi: 300, invert: false };
        let e = engine.recognize(&[0; 15], 4, 4, how).unwrap_err();
        assert!(matches!(e, TesseractError::BadImage { .. }));
        assert!(matches!(engine.recognize(&[], 0, 0, how), Err(TesseractError::BadImage { .. })));
    }

    #[test]
    fn boxes_are_clamped_to_the_picture() {
        assert_eq!(clamp_box(-5, -5, 20, 30, 10, 10), TextBox { x: 0, y: 0, width: 10, height: 10 });
        assert_eq!(clamp_box(8, 8, 2, 2, 10, 10), TextBox { x: 8, y: 8, width: 0, height: 0 });
    }
}
