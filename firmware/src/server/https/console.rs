//! The web console: the files of `web/` (plain ES modules and CSS, no build step),
//! embedded in the binary and served to anyone (they hold no secrets; every call they make
//! is authenticated like any other) with an ETag, gzip when the browser takes it, and a
//! Content-Security-Policy that allows only the appliance's own scripts, styles, workers
//! and connections: no inline script, no other origin.

use std::sync::LazyLock;

use bytes::Bytes;
use hyper::header::{
    HeaderMap, HeaderValue, ACCEPT_ENCODING, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_TYPE, ETAG, IF_NONE_MATCH, VARY,
};
use hyper::{Method, Response, StatusCode};

use super::body::{self, ResponseBody};

/// One embedded file.
struct Asset {
    path: &'static str,
    mime: &'static str,
    bytes: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $mime:literal) => {
        Asset {
            path: concat!("/", $name),
            mime: $mime,
            bytes: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/../web/", $name)),
        }
    };
}

/// Every file of the console. (A new file in `web/` is served only once listed here.)
const FILES: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("app.js", "text/javascript; charset=utf-8"),
    asset!("api.js", "text/javascript; charset=utf-8"),
    asset!("login.js", "text/javascript; charset=utf-8"),
    asset!("live.js", "text/javascript; charset=utf-8"),
    asset!("video.js", "text/javascript; charset=utf-8"),
    asset!("video-worker.js", "text/javascript; charset=utf-8"),
    asset!("tasks.js", "text/javascript; charset=utf-8"),
    asset!("access.js", "text/javascript; charset=utf-8"),
    asset!("device.js", "text/javascript; charset=utf-8"),
    asset!("update.js", "text/javascript; charset=utf-8"),
    asset!("icon.svg", "image/svg+xml"),
];

/// The console's pages: each is `index.html`, which reads its path.
const PAGES: &[&str] = &["/", "/pair", "/live", "/tasks", "/access", "/device", "/update"];

/// A file ready to serve.
struct Prepared {
    asset: &'static Asset,
    etag: HeaderValue,
    /// The gzip encoding, when it is smaller.
    gzip: Option<Bytes>,
}

static PREPARED: LazyLock<Vec<Prepared>> = LazyLock::new(|| FILES.iter().map(prepare).collect());

fn prepare(asset: &'static Asset) -> Prepared {
    let digest = ring::digest::digest(&ring::digest::SHA256, asset.bytes);
    let hex: String = digest.as_ref()[..12].iter().map(|b| format!("{b:02x}")).collect();
    // Hex in quotes is always a valid header value.
    let etag = HeaderValue::from_str(&format!("\"{hex}\"")).unwrap_or_else(|_| HeaderValue::from_static("\"0\""));
    let gzip = gzip(asset.bytes).filter(|g| g.len() < asset.bytes.len()).map(Bytes::from);
    Prepared { asset, etag, gzip }
}

fn gzip(bytes: &[u8]) -> Option<Vec<u8>> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes).ok()?;
    encoder.finish().ok()
}

/// The policy: our own files only; connections to our own origin (and its WebSockets).
fn content_security_policy(host: &str) -> String {
    format!(
        "default-src 'none'; script-src 'self'; worker-src 'self'; style-src 'self'; img-src 'self' data: blob:; \
         connect-src 'self' wss://{host}; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )
}

/// Whether `path` is the console's (a page or one of its files).
pub fn serves(path: &str) -> bool {
    PAGES.contains(&path) || FILES.iter().any(|f| f.path == path)
}

/// Answers a GET or HEAD of one of the console's paths ([`serves`]); `host` is the
/// request's checked Host.
pub fn answer(method: &Method, path: &str, headers: &HeaderMap, host: &str) -> Response<ResponseBody> {
    let path = if PAGES.contains(&path) { "/index.html" } else { path };
    let Some(file) = PREPARED.iter().find(|p| p.asset.path == path) else {
        return body::refuse(crate::protocol::ErrorCode::NotFound, format!("no page at {path}"));
    };
    let gzip = file.gzip.as_ref().filter(|_| accepts_gzip(headers));
    let not_modified = headers
        .get(IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == file.etag.to_str().unwrap_or_default() || t.trim() == "*"));
    let bytes = match (not_modified || method == Method::HEAD, gzip) {
        (true, _) => Bytes::new(),
        (false, Some(g)) => g.clone(),
        (false, None) => Bytes::from_static(file.asset.bytes),
    };
    let mut r = Response::new(body::full(bytes));
    if not_modified {
        *r.status_mut() = StatusCode::NOT_MODIFIED;
    }
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(file.asset.mime));
    h.insert(ETAG, file.etag.clone());
    // Always revalidate: an update of the appliance must reach the browser at once.
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(VARY, HeaderValue::from_static("Accept-Encoding"));
    if gzip.is_some() {
        h.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    if let Ok(v) = HeaderValue::from_str(&content_security_policy(host)) {
        h.insert("content-security-policy", v);
    }
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
    r
}

fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers.get_all(ACCEPT_ENCODING).iter().filter_map(|v| v.to_str().ok()).any(|v| {
        v.split(',').any(|part| {
            let mut it = part.split(';');
            let name = it.next().unwrap_or_default().trim();
            let refused = it.any(|q| matches!(q.trim(), "q=0" | "q=0.0" | "q=0.00" | "q=0.000"));
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn bytes(r: Response<ResponseBody>) -> Vec<u8> {
        r.into_body().collect().await.unwrap().to_bytes().to_vec()
    }

    #[tokio::test]
    async fn pages_are_the_index_with_a_strict_policy() {
        for page in PAGES {
            assert!(serves(page));
            let r = answer(&Method::GET, page, &HeaderMap::new(), "box.local");
            assert_eq!(r.status(), StatusCode::OK);
            let csp = r.headers()["content-security-policy"].to_str().unwrap().to_string();
            assert!(csp.contains("script-src 'self';") && !csp.contains("unsafe"), "{csp}");
            assert!(csp.contains("wss://box.local"), "{csp}");
            assert_eq!(r.headers()["x-content-type-options"], "nosniff");
            let html = String::from_utf8(bytes(r).await).unwrap();
            assert!(html.contains("<script type=\"module\" src=\"/app.js\"></script>"));
        }
        assert!(!serves("/api/status") && !serves("/secret") && !serves("/../Cargo.toml"));
    }

    #[test]
    fn no_page_has_inline_script_or_style_or_an_outside_url() {
        for f in FILES.iter().filter(|f| f.mime.starts_with("text/html")) {
            let html = std::str::from_utf8(f.bytes).unwrap();
            for tag in html.split("<script").skip(1) {
                assert!(tag.split('>').next().unwrap().contains("src="), "inline script in {}", f.path);
            }
            assert!(!html.contains("<style") && !html.contains(" style="), "inline style in {}", f.path);
            let handler = html.split(" on").skip(1).any(|rest| {
                let name: String = rest.chars().take_while(char::is_ascii_lowercase).collect();
                !name.is_empty() && rest[name.len()..].starts_with('=')
            });
            assert!(!handler, "an inline event handler in {}", f.path);
        }
        for f in FILES {
            // (The SVG namespace is a name, not a fetch.)
            let text = String::from_utf8_lossy(f.bytes).replace("http://www.w3.org/2000/svg", "");
            for outside in ["http://", "https://", "//cdn", "fonts.googleapis"] {
                assert!(!text.contains(outside), "{} names an outside URL ({outside})", f.path);
            }
        }
    }

    #[tokio::test]
    async fn etags_revalidate_and_gzip_is_offered_when_taken() {
        let plain = answer(&Method::GET, "/app.js", &HeaderMap::new(), "box.local");
        let etag = plain.headers()[ETAG].clone();
        assert!(plain.headers().get(CONTENT_ENCODING).is_none());
        let original = bytes(plain).await;
        assert_eq!(original, FILES.iter().find(|f| f.path == "/app.js").unwrap().bytes);

        let mut h = HeaderMap::new();
        h.insert(ACCEPT_ENCODING, HeaderValue::from_static("br, gzip;q=0.8"));
        let zipped = answer(&Method::GET, "/app.js", &h, "box.local");
        assert_eq!(zipped.headers()[CONTENT_ENCODING], "gzip");
        assert_eq!(zipped.headers()[ETAG], etag);
        let z = bytes(zipped).await;
        let mut unzipped = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(z.as_slice()), &mut unzipped).unwrap();
        assert_eq!(unzipped, original);

        h.insert(ACCEPT_ENCODING, HeaderValue::from_static("gzip;q=0"));
        assert!(answer(&Method::GET, "/app.js", &h, "box.local").headers().get(CONTENT_ENCODING).is_none());

        let mut h = HeaderMap::new();
        h.insert(IF_NONE_MATCH, etag);
        let again = answer(&Method::GET, "/app.js", &h, "box.local");
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        assert!(bytes(again).await.is_empty());
        let head = answer(&Method::HEAD, "/style.css", &HeaderMap::new(), "box.local");
        assert_eq!(head.status(), StatusCode::OK);
        assert!(bytes(head).await.is_empty());
    }
}
