//! A tether client over HTTPS, pinned to the appliance's CA fingerprint: what `tether
//! login`, `--url` commands and `tether task run --url` use.
//!
//! There is no way to skip the certificate check: the server's chain must contain the
//! pinned CA and the server certificate must verify against it (name, validity, the CA's
//! name constraints), with rustls' own verifier.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde_json::{json, Value};

use crate::server::tls::Fingerprint;

/// Errors of the HTTPS client.
#[derive(Debug, thiserror::Error)]
pub enum HttpsClientError {
    /// The URL is not `https://HOST[:PORT][/…]`.
    #[error("{0:?} is not an https:// URL of a tether appliance")]
    BadUrl(String),
    /// The fingerprint is not 64 hex digits.
    #[error("the fingerprint must be the CA's SHA-256: 64 hex digits (`tether doctor` on the appliance shows it)")]
    BadFingerprint,
    /// Connecting failed.
    #[error("cannot reach {target}: {source}")]
    Connect {
        /// Host and port.
        target: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The appliance answered, but its certificate is not from the pinned CA: the pin is
    /// wrong (or the appliance made a new CA), not the network.
    #[error(
        "{target} answered, but its certificate is not from the pinned certificate authority: it presented a CA \
         with fingerprint {presented}, the one pinned here is {pinned}. Compare it with what `tether doctor` \
         shows on the appliance before trusting it (anyone on the network can answer), or pair again \
         (`tether pair` there, then `tether login PAIRING-URL` here)"
    )]
    PinMismatch {
        /// Host and port.
        target: String,
        /// The fingerprint this client pinned.
        pinned: Fingerprint,
        /// The fingerprint of the CA the server presented (its chain's last certificate).
        presented: Fingerprint,
    },
    /// TLS failed for another reason (a name the certificate does not hold, an expired one).
    #[error("TLS with {target} failed: {source} (is the fingerprint the appliance's? `tether doctor` there shows it)")]
    Tls {
        /// Host and port.
        target: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// HTTP failed.
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    /// The server answered with an error.
    #[error("{code}: {message}")]
    Remote {
        /// The HTTP status.
        status: u16,
        /// The stable error code.
        code: String,
        /// The server's explanation.
        message: String,
        /// What the screen did (`NO_VISIBLE_EFFECT`, `UNEXPECTED_CHANGE`).
        effect: Option<Value>,
    },
    /// The server sent something unexpected.
    #[error("unexpected answer: {0}")]
    Protocol(String),
}

/// An appliance's address: `https://host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// Port.
    pub port: u16,
}

impl Target {
    /// Parses `https://HOST[:PORT][/PATH][#FRAGMENT]`; returns the target, the path and
    /// the fragment.
    pub fn parse(url: &str) -> Result<(Target, String, Option<String>), HttpsClientError> {
        let bad = || HttpsClientError::BadUrl(url.to_string());
        let rest = url.strip_prefix("https://").ok_or_else(bad)?;
        let (rest, fragment) = match rest.split_once('#') {
            Some((r, f)) => (r, Some(f.to_string())),
            None => (rest, None),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/".to_string()),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6.split_once(']').ok_or_else(bad)?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| bad())?,
                None if after.is_empty() => 443,
                None => return Err(bad()),
            };
            (host.to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), p.parse().map_err(|_| bad())?),
                None => (authority.to_string(), 443),
            }
        };
        if host.is_empty() || host.contains(['@', ' ', '/']) {
            return Err(bad());
        }
        Ok((Target { host, port }, path, fragment))
    }

    /// `https://host[:port]`.
    pub fn base_url(&self) -> String {
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        if self.port == 443 {
            format!("https://{host}")
        } else {
            format!("https://{host}:{}", self.port)
        }
    }
}

/// Accepts a server whose chain holds the pinned CA, verified against that CA alone.
#[derive(Debug)]
struct PinnedCa {
    pin: Fingerprint,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinnedCa {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if Fingerprint::of(end_entity) == self.pin {
            // The pinned certificate itself (a user's self-signed certificate).
            return Ok(ServerCertVerified::assertion());
        }
        let Some(anchor) = intermediates.iter().find(|c| Fingerprint::of(c) == self.pin) else {
            // Typed, so `connect` can tell a wrong pin from a network failure. The appliance
            // sends its CA last; a server that sends no chain shows its own certificate.
            let presented = Fingerprint::of(intermediates.last().unwrap_or(end_entity));
            return Err(rustls::Error::InvalidCertificate(rustls::CertificateError::Other(rustls::OtherError(
                Arc::new(NotPinned(presented)),
            ))));
        };
        let mut roots = rustls::RootCertStore::empty();
        roots.add(anchor.clone().into_owned())?;
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), self.provider.clone())
                .build()
                .map_err(|e| rustls::Error::General(e.to_string()))?;
        verifier.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// The certificate error [`PinnedCa`] raises: the server's CA is not the pinned one.
#[derive(Debug, thiserror::Error)]
#[error("the server's certificate is not from the pinned certificate authority (its CA is {0})")]
struct NotPinned(Fingerprint);

/// The CA a failed handshake presented, when it failed because of the pin.
fn not_pinned(e: &std::io::Error) -> Option<Fingerprint> {
    let rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other)) =
        e.get_ref()?.downcast_ref::<rustls::Error>()?
    else {
        return None;
    };
    other.0.downcast_ref::<NotPinned>().map(|n| n.0)
}

/// Credentials a request carries.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// A named token (`Authorization: Bearer`).
    pub token: Option<String>,
    /// A task token (`Tether-Task-Token`).
    pub task_token: Option<String>,
}

/// A client of one appliance.
#[derive(Clone)]
pub struct HttpsClient {
    target: Target,
    connector: tokio_rustls::TlsConnector,
    credentials: Credentials,
    /// The pinned fingerprint, for error messages.
    pin: Fingerprint,
}

impl std::fmt::Debug for HttpsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpsClient").field("target", &self.target).finish_non_exhaustive()
    }
}

impl HttpsClient {
    /// A client of `target` that trusts only the CA with fingerprint `pin`.
    pub fn new(target: Target, pin: Fingerprint, credentials: Credentials) -> Result<HttpsClient, HttpsClientError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = Arc::new(PinnedCa { pin, provider: provider.clone() });
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| HttpsClientError::Protocol(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(HttpsClient { target, connector: tokio_rustls::TlsConnector::from(Arc::new(config)), credentials, pin })
    }

    /// The appliance's address.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// TCP, then TLS pinned to the CA.
    async fn tls(&self) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, HttpsClientError> {
        let target = format!("{}:{}", self.target.host, self.target.port);
        let tcp = tokio::net::TcpStream::connect((self.target.host.as_str(), self.target.port))
            .await
            .map_err(|source| HttpsClientError::Connect { target: target.clone(), source })?;
        let _ = tcp.set_nodelay(true);
        let name =
            ServerName::try_from(self.target.host.clone()).map_err(|_| HttpsClientError::BadUrl(target.clone()))?;
        self.connector.connect(name, tcp).await.map_err(|source| match not_pinned(&source) {
            Some(presented) => HttpsClientError::PinMismatch { target: target.clone(), pinned: self.pin, presented },
            None => HttpsClientError::Tls { target, source },
        })
    }

    /// Opens a WebSocket on `path` (`/api/video`, `/api/ws`) over TLS pinned to the CA,
    /// with the browser `Origin` of the appliance itself (the server refuses others) and
    /// the client's credentials.
    pub async fn websocket(
        &self,
        path: &str,
    ) -> Result<
        tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
        HttpsClientError,
    > {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
        let tls = self.tls().await?;
        let base = self.target.base_url();
        let url = format!("wss://{}{path}", base.trim_start_matches("https://"));
        let mut request = url.into_client_request().map_err(|e| HttpsClientError::Protocol(e.to_string()))?;
        let header =
            |v: &str| hyper::header::HeaderValue::from_str(v).map_err(|e| HttpsClientError::Protocol(e.to_string()));
        let headers = request.headers_mut();
        headers.insert(hyper::header::ORIGIN, header(&base)?);
        if let Some(t) = &self.credentials.token {
            headers.insert(hyper::header::AUTHORIZATION, header(&format!("Bearer {t}"))?);
        }
        if let Some(t) = &self.credentials.task_token {
            headers.insert("tether-task-token", header(t)?);
        }
        let (socket, _) = tokio_tungstenite::client_async(request, tls)
            .await
            .map_err(|e| HttpsClientError::Protocol(format!("WebSocket {path}: {e}")))?;
        Ok(socket)
    }

    /// Opens a kept-alive HTTP/1.1 connection (TCP, then TLS pinned to the CA).
    pub async fn connect(&self) -> Result<KeptAlive, HttpsClientError> {
        let tls = self.tls().await?;
        let (sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(KeptAlive { sender, client: self.clone() })
    }

    /// POSTs `length` bytes that `body` yields piece by piece (a file too big to hold, with
    /// the caller counting what was sent) on a fresh connection; the answer's JSON, an
    /// error answer as [`HttpsClientError::Remote`].
    pub async fn post_stream(
        &self,
        path: &str,
        length: u64,
        body: tokio::sync::mpsc::Receiver<Bytes>,
    ) -> Result<Value, HttpsClientError> {
        use futures_util::StreamExt as _;
        let tls = self.tls().await?;
        let frames = tokio_stream_of(body).map(|b| Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(b)));
        let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, http_body_util::StreamBody<_>>(
            hyper_util::rt::TokioIo::new(tls),
        )
        .await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(hyper::header::HOST, self.target.base_url().trim_start_matches("https://"))
            .header(hyper::header::CONTENT_TYPE, "application/octet-stream")
            .header(hyper::header::CONTENT_LENGTH, length);
        if let Some(t) = &self.credentials.token {
            builder = builder.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let request = builder
            .body(http_body_util::StreamBody::new(frames))
            .map_err(|e| HttpsClientError::Protocol(e.to_string()))?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|_| HttpsClientError::Protocol(format!("HTTP {status}: {}", String::from_utf8_lossy(&bytes))))?;
        if !status.is_success() {
            return Err(remote_error(status, &value));
        }
        Ok(value)
    }

    /// Sends one request on a fresh connection; returns the response with its body
    /// unread (a stream, for a task's lease).
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Response<Incoming>, HttpsClientError> {
        self.connect().await?.send(method, path, body).await
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Request<Full<Bytes>>, HttpsClientError> {
        let bytes = body.map(|b| serde_json::to_vec(b).unwrap_or_default()).unwrap_or_default();
        let content_type = body.map(|_| "application/json");
        self.request_with(method, path, Bytes::from(bytes), content_type, &[])
    }

    /// A request with raw body bytes and extra headers (the MCP bridge's).
    fn request_with(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
        content_type: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Result<Request<Full<Bytes>>, HttpsClientError> {
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, self.target.base_url().trim_start_matches("https://"));
        if let Some(ct) = content_type {
            builder = builder.header(hyper::header::CONTENT_TYPE, ct);
        }
        if let Some(t) = &self.credentials.token {
            builder = builder.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        if let Some(t) = &self.credentials.task_token {
            builder = builder.header("tether-task-token", t);
        }
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(Full::new(body)).map_err(|e| HttpsClientError::Protocol(e.to_string()))
    }

    /// Sends a request and reads its JSON answer; an error answer becomes
    /// [`HttpsClientError::Remote`].
    pub async fn json(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value, HttpsClientError> {
        read_json(self.send(method, path, body).await?).await
    }

    /// Calls one tether/1 method (`POST /api/rpc`) and returns its result.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, HttpsClientError> {
        let mut request = match params {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        request.insert("id".into(), 1.into());
        request.insert("method".into(), method.into());
        let answer = self.json(Method::POST, "/api/rpc", Some(&Value::Object(request))).await?;
        Ok(answer.get("result").cloned().unwrap_or(Value::Null))
    }
}

/// The pieces a channel receives, as a stream (ends when the sender is dropped).
fn tokio_stream_of(mut rx: tokio::sync::mpsc::Receiver<Bytes>) -> impl futures_util::Stream<Item = Bytes> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// A kept-alive connection to the appliance: requests go one after another on it.
pub struct KeptAlive {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    client: HttpsClient,
}

impl std::fmt::Debug for KeptAlive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptAlive").field("target", &self.client.target).finish_non_exhaustive()
    }
}

impl KeptAlive {
    /// Sends a request on this connection; the body is unread.
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Response<Incoming>, HttpsClientError> {
        let request = self.client.request(method, path, body)?;
        self.sender.ready().await?;
        Ok(self.sender.send_request(request).await?)
    }

    /// Sends a request with raw body bytes and extra headers; the body is unread.
    pub async fn send_with(
        &mut self,
        method: Method,
        path: &str,
        body: Bytes,
        content_type: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Result<Response<Incoming>, HttpsClientError> {
        let request = self.client.request_with(method, path, body, content_type, headers)?;
        self.sender.ready().await?;
        Ok(self.sender.send_request(request).await?)
    }

    /// Waits until the connection can take another request (the last answer's body was
    /// read); `false` if it closed instead.
    pub async fn wait_ready(&mut self) -> bool {
        self.sender.ready().await.is_ok()
    }

    /// Whether the connection can take another request (the server has not closed it).
    pub fn is_open(&self) -> bool {
        !self.sender.is_closed()
    }

    /// Sends a request and reads its JSON answer (an error answer is an error).
    pub async fn json(&mut self, method: Method, path: &str, body: Option<&Value>) -> Result<Value, HttpsClientError> {
        let response = self.send(method, path, body).await?;
        read_json(response).await
    }
}

async fn read_json(response: Response<Incoming>) -> Result<Value, HttpsClientError> {
    let status = response.status();
    let bytes = response.into_body().collect().await?.to_bytes();
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|_| HttpsClientError::Protocol(format!("HTTP {status}: {}", String::from_utf8_lossy(&bytes))))?;
    if status != StatusCode::OK {
        return Err(remote_error(status, &value));
    }
    Ok(value)
}

/// Reads a streamed NDJSON answer line by line.
#[derive(Debug)]
pub struct LineReader {
    body: Incoming,
    buf: Vec<u8>,
    done: bool,
}

impl LineReader {
    /// Reads `body`.
    pub fn new(body: Incoming) -> LineReader {
        LineReader { body, buf: Vec::new(), done: false }
    }

    /// The next JSON line (`None` at the end of the stream); keep-alive lines are skipped.
    pub async fn next(&mut self) -> Result<Option<Value>, HttpsClientError> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let value: Value = serde_json::from_slice(&line)
                    .map_err(|_| HttpsClientError::Protocol(String::from_utf8_lossy(&line).into_owned()))?;
                if value["event"] == "keepalive" {
                    continue;
                }
                return Ok(Some(value));
            }
            if self.done {
                return Ok(None);
            }
            match self.body.frame().await {
                Some(frame) => {
                    if let Ok(data) = frame?.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                None => self.done = true,
            }
        }
    }
}

/// The error an answer carries.
pub fn remote_error(status: StatusCode, value: &Value) -> HttpsClientError {
    let error = &value["error"];
    HttpsClientError::Remote {
        status: status.as_u16(),
        code: error["code"].as_str().unwrap_or("UNKNOWN").to_string(),
        message: error["message"].as_str().unwrap_or_default().to_string(),
        effect: error.get("effect").filter(|e| e.is_object()).cloned(),
    }
}

/// The pairing URL's parts: `https://HOST[:PORT]/pair#code=CODE&fp=FINGERPRINT`.
pub fn parse_pairing_url(url: &str) -> Result<(Target, String, Fingerprint), HttpsClientError> {
    let (target, _path, fragment) = Target::parse(url)?;
    let fragment = fragment.ok_or_else(|| HttpsClientError::BadUrl(url.into()))?;
    let field = |key: &str| {
        fragment.split('&').find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('='))).map(str::to_string)
    };
    let code = field("code").ok_or_else(|| HttpsClientError::BadUrl(url.into()))?;
    let fp = field("fp").and_then(|f| Fingerprint::parse(&f)).ok_or(HttpsClientError::BadFingerprint)?;
    Ok((target, code, fp))
}

/// Redeems a pairing code (`POST /api/pair`) over TLS pinned to the fingerprint in the
/// URL; returns the answer (`name`, `role`, `token`, `fingerprint`).
pub async fn redeem(url: &str) -> Result<(Target, Fingerprint, Value), HttpsClientError> {
    let (target, code, pin) = parse_pairing_url(url)?;
    let client = HttpsClient::new(target.clone(), pin, Credentials::default())?;
    let answer = client.json(Method::POST, "/api/pair", Some(&json!({"code": code}))).await?;
    Ok((target, pin, answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_with_and_without_ports() {
        let (t, path, frag) = Target::parse("https://box.local:8443/pair#code=abc&fp=00").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, path.as_str(), frag.as_deref()),
            ("box.local", 8443, "/pair", Some("code=abc&fp=00"))
        );
        let (t, path, _) = Target::parse("https://[::1]:9/").unwrap();
        assert_eq!((t.host.as_str(), t.port, path.as_str()), ("::1", 9, "/"));
        assert_eq!(Target::parse("https://box").unwrap().0.port, 443);
        assert_eq!(t.base_url(), "https://[::1]:9");
        for bad in ["http://box", "https://", "https://box:x", "https://user@box", "https://[::1"] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_pairing_url_needs_its_code_and_fingerprint() {
        let fp = Fingerprint::of(b"ca");
        let url = format!("https://box.local/pair#code=xyz&fp={}", fp.hex());
        let (t, code, pin) = parse_pairing_url(&url).unwrap();
        assert_eq!((t.port, code.as_str(), pin), (443, "xyz", fp));
        assert!(parse_pairing_url("https://box.local/pair#code=xyz").is_err());
        assert!(parse_pairing_url(&format!("https://box.local/pair#fp={}", fp.hex())).is_err());
    }
}
