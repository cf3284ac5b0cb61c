//! The appliance's certificates: a per-appliance CA, created once, that signs the HTTPS
//! server certificate.
//!
//! Clients pin the CA's SHA-256 fingerprint (pairing URLs carry it), never the server
//! certificate: the server certificate is reissued whenever the appliance's names change
//! (a new address from DHCP) or its expiry nears, and a pinned laptop or CI job keeps
//! working. The CA is name-constrained to the appliance's own names, `.local`, loopback,
//! private and link-local addresses, so a person who installs it (an iPhone needs that
//! for secure WebSockets) never lets it vouch for any other site.
//!
//! A DNS name constraint is a subtree: `DNS:box.example` covers `box.example` and every
//! name under it. A single-label host name (`vm`, `box`) would be a whole top-level
//! domain, and a host named like a public one (`dev`, `app`) would let the CA vouch for
//! every site in it. So single-label names are never constrained (nor, then, in the
//! server certificate, which holds only names the CA may vouch for): the appliance is
//! reached as `<host>.local`, `localhost` or an address. The fixed subtrees `local`
//! (mDNS, RFC 6762) and `localhost` (RFC 6761) are special-use names, never public.
//!
//! Files, in `<data_dir>/tls/` (0700): `ca.key` and `server.key` (0600, written
//! atomically), `ca.crt`, `server.crt` and `server.json` (the names the certificate
//! holds and when it expires).

use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CidrSubnet, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
    GeneralSubtree, IsCa, Issuer, KeyPair, KeyUsagePurpose, NameConstraints, SanType,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde::{Deserialize, Serialize};

/// Apple's limit for a server certificate from a user-installed CA is 825 days.
const SERVER_VALIDITY_DAYS: i64 = 800;
/// Reissue the server certificate when fewer days than this are left.
const RENEW_BEFORE_DAYS: i64 = 30;
/// The CA outlives many server certificates; ten years.
const CA_VALIDITY_DAYS: i64 = 3650;
/// Names a reissued certificate keeps at most (old addresses are kept so a client that
/// still uses one is not broken, but not forever).
const MAX_NAMES: usize = 64;

/// Errors loading or creating the certificates.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Reading or writing a file failed.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Generating or parsing a key or certificate failed.
    #[error("certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    /// A configured certificate or key file is not usable PEM.
    #[error("{}: {what}", .path.display())]
    BadPem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// rustls refused the certificate and key.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

impl TlsError {
    /// Whether the disk refused a write (full, over quota, read-only): the certificates
    /// could be made but not kept.
    pub fn refused_by_disk(&self) -> bool {
        use nix::errno::Errno;
        matches!(
            self,
            TlsError::Io { source, .. }
                if matches!(source.raw_os_error().map(Errno::from_raw), Some(Errno::ENOSPC | Errno::EDQUOT | Errno::EROFS))
        )
    }
}

/// A SHA-256 certificate fingerprint.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// The fingerprint of a DER certificate (what `openssl x509 -fingerprint -sha256` shows).
    pub fn of(der: &[u8]) -> Fingerprint {
        let digest = ring::digest::digest(&ring::digest::SHA256, der);
        let mut out = [0u8; 32];
        out.copy_from_slice(digest.as_ref());
        Fingerprint(out)
    }

    /// Lowercase hex without separators: the form in pairing URLs and `TETHER_FINGERPRINT`.
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses hex, with or without `:` separators, in either case (the URL form and
    /// OpenSSL's `AB:CD:…` both work).
    pub fn parse(s: &str) -> Option<Fingerprint> {
        let digits: Vec<u8> = s.bytes().filter(|b| *b != b':').collect();
        if digits.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in digits.chunks(2).enumerate() {
            let text = std::str::from_utf8(pair).ok()?;
            out[i] = u8::from_str_radix(text, 16).ok()?;
        }
        Some(Fingerprint(out))
    }
}

impl std::fmt::Display for Fingerprint {
    /// OpenSSL's form: `AB:CD:…`, so a person can compare it with `openssl x509 -fingerprint`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{b:02X}")?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

/// The names the server certificate must hold.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerNames {
    /// DNS names: `localhost`, the hostname, `<hostname>.local`, configured names.
    pub dns: Vec<String>,
    /// Addresses: loopback and every interface address at start.
    pub ips: Vec<IpAddr>,
}

impl ServerNames {
    /// The names of this machine: `localhost`, `hostname` and `<hostname>.local`, the
    /// loopback addresses and `interface_ips`, and `extra` (configured names; IP strings
    /// become addresses).
    pub fn of_machine(hostname: &str, interface_ips: &[IpAddr], extra: &[String]) -> ServerNames {
        let mut names = ServerNames::default();
        names.add_dns("localhost");
        let host = hostname.trim().trim_end_matches('.').to_ascii_lowercase();
        if !host.is_empty() && host != "localhost" {
            let short = host.strip_suffix(".local").unwrap_or(&host).to_string();
            names.add_dns(&short);
            names.add_dns(&format!("{short}.local"));
        }
        for ip in [IpAddr::from([127, 0, 0, 1]), IpAddr::from(std::net::Ipv6Addr::LOCALHOST)] {
            names.add_ip(ip);
        }
        for ip in interface_ips {
            names.add_ip(*ip);
        }
        for name in extra {
            match name.parse::<IpAddr>() {
                Ok(ip) => names.add_ip(ip),
                Err(_) => names.add_dns(&name.to_ascii_lowercase()),
            }
        }
        names
    }

    /// Adds a DNS name; one that is not a valid host name (a machine whose hostname was
    /// never set reports `(none)`) is left out: one bad name in the certificate makes
    /// every client refuse it, including for the good names.
    fn add_dns(&mut self, name: &str) {
        if !is_dns_name(name) {
            tracing::warn!(name, "not a valid DNS name; left out of the HTTPS certificate");
            return;
        }
        if !self.dns.iter().any(|n| n == name) {
            self.dns.push(name.to_string());
        }
    }

    fn add_ip(&mut self, ip: IpAddr) {
        if !self.ips.contains(&ip) {
            self.ips.push(ip);
        }
    }

    /// Whether every name of `other` is among these.
    fn covers(&self, other: &ServerNames) -> bool {
        other.dns.iter().all(|n| self.dns.contains(n)) && other.ips.iter().all(|ip| self.ips.contains(ip))
    }

    /// These names followed by the older ones not among them, at most [`MAX_NAMES`].
    fn keeping(&self, older: &ServerNames) -> ServerNames {
        let mut all = self.clone();
        for n in &older.dns {
            all.add_dns(n);
        }
        for ip in &older.ips {
            all.add_ip(*ip);
        }
        all.dns.truncate(MAX_NAMES);
        all.ips.truncate(MAX_NAMES.saturating_sub(all.dns.len()));
        all
    }
}

/// What `ca.json` records: the names the CA was constrained to beyond the fixed ranges
/// (the machine's names and public addresses when it was made).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct CaRecord {
    dns: Vec<String>,
    ips: Vec<IpAddr>,
}

/// The address ranges every appliance CA may vouch for.
fn fixed_nets() -> [(IpAddr, u8); 8] {
    [
        (IpAddr::from([127, 0, 0, 0]), 8),
        (IpAddr::from([10, 0, 0, 0]), 8),
        (IpAddr::from([172, 16, 0, 0]), 12),
        (IpAddr::from([192, 168, 0, 0]), 16),
        (IpAddr::from([169, 254, 0, 0]), 16),
        (IpAddr::from(std::net::Ipv6Addr::LOCALHOST), 128),
        (IpAddr::from([0xfc00, 0, 0, 0, 0, 0, 0, 0]), 7),
        (IpAddr::from([0xfe80, 0, 0, 0, 0, 0, 0, 0]), 10),
    ]
}

fn in_net(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    let (a, b, bits): (u128, u128, u8) = match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u32::from(a).into(), u32::from(b).into(), 32),
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), 128),
        _ => return false,
    };
    let shift = u32::from(bits.saturating_sub(prefix));
    a.checked_shr(shift).unwrap_or(0) == b.checked_shr(shift).unwrap_or(0)
}

/// Whether `name` is a single DNS label (`vm`): as a name constraint it would be a whole
/// top-level domain, so it is never one (see the module docs).
fn single_label(name: &str) -> bool {
    !name.trim_end_matches('.').contains('.')
}

impl CaRecord {
    /// The names beyond the fixed set that a CA for `names` must permit; single-label
    /// names are left out (see the module docs).
    fn for_names(names: &ServerNames) -> CaRecord {
        let dns = names
            .dns
            .iter()
            .filter(|n| !n.ends_with(".local") && *n != "localhost" && !single_label(n))
            .cloned()
            .collect();
        let ips =
            names.ips.iter().filter(|ip| !fixed_nets().iter().any(|(n, p)| in_net(**ip, *n, *p))).copied().collect();
        CaRecord { dns, ips }
    }

    /// Whether the CA may vouch for DNS name `name`. A single-label subtree in the record
    /// of an older CA is not used: its certificate may permit that whole top-level
    /// domain, but no certificate of ours will carry a name in it.
    fn permits_dns(&self, name: &str) -> bool {
        let under = |base: &str| name == base || name.ends_with(&format!(".{base}"));
        under("local") || under("localhost") || self.dns.iter().any(|d| !single_label(d) && under(d))
    }

    /// The single-label subtrees an older CA was made with.
    fn whole_domains(&self) -> impl Iterator<Item = &String> {
        self.dns.iter().filter(|d| single_label(d))
    }

    /// `names` without those the CA may not vouch for.
    fn retain_permitted(&self, names: &ServerNames) -> ServerNames {
        let mut out = ServerNames::default();
        for n in names.dns.iter().filter(|n| self.permits_dns(n)) {
            out.add_dns(n);
        }
        for ip in names.ips.iter().filter(|ip| self.permits_ip(**ip)) {
            out.add_ip(*ip);
        }
        out
    }

    /// Whether the CA may vouch for address `ip`.
    fn permits_ip(&self, ip: IpAddr) -> bool {
        fixed_nets().iter().any(|(n, p)| in_net(ip, *n, *p)) || self.ips.contains(&ip)
    }
}

/// What `server.json` records about the current server certificate.
#[derive(Debug, Serialize, Deserialize)]
struct ServerRecord {
    dns: Vec<String>,
    ips: Vec<IpAddr>,
    not_after_unix: i64,
    ca_fingerprint: String,
}

/// The loaded certificates, ready to serve.
#[derive(Debug, Clone)]
pub struct TlsMaterial {
    /// The CA certificate (PEM), served at `/ca.crt`; with a user certificate, its chain's
    /// last certificate.
    pub ca_pem: String,
    /// The CA certificate (DER).
    pub ca_der: Vec<u8>,
    /// What clients pin.
    pub fingerprint: Fingerprint,
    /// The names the server certificate holds (with a user certificate: none known).
    pub names: ServerNames,
    /// rustls, with ALPN `h2` and `http/1.1`.
    pub config: Arc<rustls::ServerConfig>,
    /// Whether the server certificate was issued at this start.
    pub reissued: bool,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> TlsError + '_ {
    move |source| TlsError::Io { path: path.to_path_buf(), source }
}

/// Writes `bytes` to `path` atomically (a temporary file in the same directory, synced,
/// then renamed) with permission bits `mode`: a crash never leaves half a key.
fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), TlsError> {
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file =
        std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp).map_err(io_err(&tmp))?;
    if let Err(e) = file.write_all(bytes).and_then(|()| file.sync_all()) {
        // Half a file only takes space (on a full disk, the space someone is freeing).
        let _ = std::fs::remove_file(&tmp);
        return Err(io_err(&tmp)(e));
    }
    std::fs::rename(&tmp, path).map_err(io_err(path))
}

fn now_unix() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// The CA's subject: fixed by its key, so the issuer can be rebuilt from the key alone.
fn ca_params(key: &KeyPair, record: &CaRecord) -> CertificateParams {
    let id = Fingerprint::of(key.public_key_raw()).hex();
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "tether");
    dn.push(DnType::CommonName, format!("tether appliance CA {}", &id[..16]));
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params.name_constraints = Some(ca_constraints(record));
    params
}

/// A host name a certificate may carry: dot-separated labels of letters, digits and
/// hyphens (not at a label's ends), 1..=63 bytes each, at most 253 in all.
fn is_dns_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// What the CA may vouch for: `.local`, `localhost`, the names in `record`, and
/// loopback, private (RFC 1918, ULA) and link-local addresses plus `record`'s addresses.
fn ca_constraints(record: &CaRecord) -> NameConstraints {
    let mut permitted = vec![GeneralSubtree::DnsName("local".into()), GeneralSubtree::DnsName("localhost".into())];
    permitted.extend(record.dns.iter().map(|n| GeneralSubtree::DnsName(n.clone())));
    for (addr, prefix) in fixed_nets() {
        permitted.push(GeneralSubtree::IpAddress(CidrSubnet::from_addr_prefix(addr, prefix)));
    }
    for ip in &record.ips {
        let prefix = if ip.is_ipv4() { 32 } else { 128 };
        permitted.push(GeneralSubtree::IpAddress(CidrSubnet::from_addr_prefix(*ip, prefix)));
    }
    NameConstraints { permitted_subtrees: permitted, excluded_subtrees: Vec::new() }
}

fn days(n: i64) -> time::Duration {
    time::Duration::days(n)
}

/// Loads the CA from `dir`, creating it on first start.
fn load_or_create_ca(dir: &Path, names: &ServerNames) -> Result<(KeyPair, String, Vec<u8>, CaRecord), TlsError> {
    let key_path = dir.join("ca.key");
    let cert_path = dir.join("ca.crt");
    let record_path = dir.join("ca.json");
    if key_path.exists() && cert_path.exists() {
        let key_pem = std::fs::read_to_string(&key_path).map_err(io_err(&key_path))?;
        let key = KeyPair::from_pem(&key_pem)?;
        let cert_pem = std::fs::read_to_string(&cert_path).map_err(io_err(&cert_path))?;
        let der = first_cert_der(&cert_pem, &cert_path)?;
        // Without its record, the CA is known to permit the fixed set only.
        let record: CaRecord =
            std::fs::read(&record_path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
        for domain in record.whole_domains() {
            tracing::warn!(
                subtree = %domain,
                dir = %dir.display(),
                "this appliance's CA was made permitting a single-label name, so it could vouch for every name \
                 under it; no certificate of ours uses it any more. To drop it, move the tls directory away and \
                 restart (a new CA: every client pairs again)"
            );
        }
        return Ok((key, cert_pem, der, record));
    }
    let record = CaRecord::for_names(names);
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut params = ca_params(&key, &record);
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - days(1);
    params.not_after = now + days(CA_VALIDITY_DAYS);
    let cert = params.self_signed(&key)?;
    write_atomic(&record_path, &serde_json::to_vec_pretty(&record).unwrap_or_default(), 0o644)?;
    write_atomic(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
    write_atomic(&cert_path, cert.pem().as_bytes(), 0o644)?;
    tracing::info!(path = %cert_path.display(), "created this appliance's certificate authority");
    Ok((key, cert.pem(), cert.der().to_vec(), record))
}

fn first_cert_der(pem: &str, path: &Path) -> Result<Vec<u8>, TlsError> {
    use rustls_pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .and_then(Result::ok)
        .map(|c| c.to_vec())
        .ok_or_else(|| TlsError::BadPem { path: path.into(), what: "holds no certificate".into() })
}

/// Builds rustls' server configuration (ring, TLS 1.2 and 1.3, ALPN h2 then http/1.1, no
/// TLS 1.3 session tickets).
///
/// Why no tickets: TLS 1.3 sends them *after* the handshake, so they reach the client at
/// the moment it sends its first request. Clients that read a socket on one thread and
/// write it on another (Python's `websockets` sync client, `websocket-client`, engineio)
/// then have OpenSSL inside `SSL_read` (the tickets) and `SSL_write` (the request) on one
/// `SSL` object at once, which is not safe: we saw the request never leave the client, 1
/// connection in a few hundred on a busy machine (cpython#137583, websockets#1648 are the
/// same race). Resumption would save a LAN client about a millisecond; a hung connect costs
/// it its timeout.
fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config.send_tls13_tickets = 0;
    Ok(Arc::new(config))
}

/// Loads the appliance's CA and server certificate from `<data_dir>/tls`, creating the CA
/// on first start and (re)issuing the server certificate when it lacks one of `names`,
/// is due for renewal, or was signed by another CA. Old names are kept.
pub fn load_or_create(data_dir: &Path, names: &ServerNames) -> Result<TlsMaterial, TlsError> {
    let dir = data_dir.join("tls");
    std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).map_err(io_err(&dir))?;
    let (ca_key, ca_pem, ca_der, ca_record) = load_or_create_ca(&dir, names)?;
    let fingerprint = Fingerprint::of(&ca_der);
    // The server certificate holds only names the CA may vouch for.
    let names = &permitted(names, &ca_record);

    let record_path = dir.join("server.json");
    let (cert_path, key_path) = (dir.join("server.crt"), dir.join("server.key"));
    let record: Option<ServerRecord> =
        std::fs::read(&record_path).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok());
    let current = record.as_ref().filter(|r| {
        let held = ServerNames { dns: r.dns.clone(), ips: r.ips.clone() };
        // A certificate holding a name the CA no longer vouches for (a single-label name,
        // from an older version) is reissued without it.
        held.covers(names)
            && ca_record.retain_permitted(&held) == held
            && r.ca_fingerprint == fingerprint.hex()
            && r.not_after_unix - now_unix() > RENEW_BEFORE_DAYS * 86_400
            && cert_path.exists()
            && key_path.exists()
    });
    let (cert_pem, key_pem, held, reissued) = match current {
        Some(r) => {
            let cert_pem = std::fs::read_to_string(&cert_path).map_err(io_err(&cert_path))?;
            let key_pem = std::fs::read_to_string(&key_path).map_err(io_err(&key_path))?;
            (cert_pem, key_pem, ServerNames { dns: r.dns.clone(), ips: r.ips.clone() }, false)
        }
        None => {
            let older = record.map(|r| ServerNames { dns: r.dns, ips: r.ips }).unwrap_or_default();
            let held = ca_record.retain_permitted(&names.keeping(&older));
            let (cert_pem, key_pem, not_after) = issue_server(&ca_key, &ca_record, &held)?;
            // The record goes first and comes back last: a crash in between leaves no
            // record, and the next start issues again instead of pairing a new key with
            // the old certificate.
            let _ = std::fs::remove_file(&record_path);
            let record = ServerRecord {
                dns: held.dns.clone(),
                ips: held.ips.clone(),
                not_after_unix: not_after,
                ca_fingerprint: fingerprint.hex(),
            };
            let json = serde_json::to_vec_pretty(&record).unwrap_or_default();
            let written = write_atomic(&key_path, key_pem.as_bytes(), 0o600)
                .and_then(|()| write_atomic(&cert_path, cert_pem.as_bytes(), 0o644))
                .and_then(|()| write_atomic(&record_path, &json, 0o644));
            match written {
                Ok(()) => tracing::info!(dns = ?held.dns, ips = ?held.ips, "issued the HTTPS server certificate"),
                // Signed by the pinned CA, it serves as well from memory; without its
                // record on disk, the next start issues one again.
                Err(e) if e.refused_by_disk() => {
                    tracing::warn!(error = %e, "issued the HTTPS server certificate, but the disk is full: it is kept in memory for this run")
                }
                Err(e) => return Err(e),
            }
            (cert_pem, key_pem, held, true)
        }
    };
    let server_der = first_cert_der(&cert_pem, &cert_path)?;
    let key = KeyPair::from_pem(&key_pem)?;
    let chain = vec![CertificateDer::from(server_der), CertificateDer::from(ca_der.clone())];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    Ok(TlsMaterial { ca_pem, ca_der, fingerprint, names: held, config: server_config(chain, key)?, reissued })
}

/// `names` without those the CA may not vouch for, each logged: a single-label host name
/// never goes in (see the module docs), other names need a new CA.
fn permitted(names: &ServerNames, record: &CaRecord) -> ServerNames {
    let out = record.retain_permitted(names);
    for n in names.dns.iter().filter(|n| !out.dns.contains(n)) {
        if single_label(n) {
            tracing::info!(
                name = %n,
                "a single-label host name cannot be constrained safely (as a subtree it is a whole top-level domain); \
                 left out of the CA's constraints and the certificate: use <host>.local, localhost or an address"
            );
        } else {
            tracing::warn!(name = %n, "this name is outside what the appliance's CA may vouch for; left out of the certificate");
        }
    }
    for ip in names.ips.iter().filter(|ip| !out.ips.contains(ip)) {
        tracing::warn!(ip = %ip, "this address is outside what the appliance's CA may vouch for; left out of the certificate");
    }
    out
}

/// Issues a server certificate for `held` signed by the CA; returns its PEM, its key's
/// PEM and its expiry (unix seconds).
fn issue_server(ca_key: &KeyPair, record: &CaRecord, held: &ServerNames) -> Result<(String, String, i64), TlsError> {
    let issuer = Issuer::new(ca_params(ca_key, record), ca_key);
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, held.dns.iter().find(|n| *n != "localhost").cloned().unwrap_or("localhost".into()));
    params.distinguished_name = dn;
    for name in &held.dns {
        params.subject_alt_names.push(SanType::DnsName(name.clone().try_into()?));
    }
    for ip in &held.ips {
        params.subject_alt_names.push(SanType::IpAddress(*ip));
    }
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.use_authority_key_identifier_extension = true;
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - days(1);
    params.not_after = now + days(SERVER_VALIDITY_DAYS);
    let mut serial = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut serial)
        .map_err(|_| rcgen::Error::RingUnspecified)?;
    serial[0] &= 0x7f;
    params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem(), params.not_after.unix_timestamp()))
}

/// Loads a user-supplied certificate chain and key (`[https] cert`/`key`), which replace
/// the appliance's own CA. Clients pin the chain's last certificate; `names` (the
/// machine's names) are what the Host allowlist accepts.
pub fn from_files(cert: &Path, key: &Path, names: &ServerNames) -> Result<TlsMaterial, TlsError> {
    use rustls_pki_types::pem::PemObject;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| TlsError::BadPem { path: cert.into(), what: e.to_string() })?
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::BadPem { path: cert.into(), what: e.to_string() })?;
    let Some(last) = chain.last().cloned() else {
        return Err(TlsError::BadPem { path: cert.into(), what: "holds no certificate".into() });
    };
    let private =
        PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::BadPem { path: key.into(), what: e.to_string() })?;
    let ca_der = last.to_vec();
    let ca_pem = pem_of(&ca_der);
    Ok(TlsMaterial {
        fingerprint: Fingerprint::of(&ca_der),
        ca_pem,
        ca_der,
        names: names.clone(),
        config: server_config(chain, private)?,
        reissued: false,
    })
}

fn pem_of(der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// An unsigned iOS/iPadOS configuration profile that installs the CA (Settings → General
/// → VPN & Device Management, then Certificate Trust Settings to trust it fully).
pub fn mobileconfig(material: &TlsMaterial, hostname: &str) -> String {
    use base64::Engine;
    let der = base64::engine::general_purpose::STANDARD.encode(&material.ca_der);
    let fp = material.fingerprint.hex();
    // Stable UUIDs derived from the CA, so reinstalling replaces instead of duplicating.
    let uuid = |salt: &str| {
        let h = Fingerprint::of(format!("{salt}{fp}").as_bytes()).hex();
        format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32]).to_uppercase()
    };
    let host = xml_escape(hostname);
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <key>PayloadContent</key>
  <array>
    <dict>
      <key>PayloadCertificateFileName</key><string>tether-ca.cer</string>
      <key>PayloadContent</key><data>{der}</data>
      <key>PayloadDescription</key><string>Trusts the certificate of the tether appliance {host}</string>
      <key>PayloadDisplayName</key><string>tether appliance CA ({host})</string>
      <key>PayloadIdentifier</key><string>dev.tether.ca.{fp16}</string>
      <key>PayloadType</key><string>com.apple.security.root</string>
      <key>PayloadUUID</key><string>{cert_uuid}</string>
      <key>PayloadVersion</key><integer>1</integer>
    </dict>
  </array>
  <key>PayloadDescription</key><string>Lets this device reach the tether appliance {host} over HTTPS. The certificate can only vouch for the appliance's own local names and addresses.</string>
  <key>PayloadDisplayName</key><string>tether ({host})</string>
  <key>PayloadIdentifier</key><string>dev.tether.profile.{fp16}</string>
  <key>PayloadRemovalDisallowed</key><false/>
  <key>PayloadType</key><string>Configuration</string>
  <key>PayloadUUID</key><string>{profile_uuid}</string>
  <key>PayloadVersion</key><integer>1</integer>
</dict>
</plist>
"#,
        fp16 = &fp[..16],
        cert_uuid = uuid("cert"),
        profile_uuid = uuid("profile"),
    )
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// This machine's interface addresses (for the certificate and the Host allowlist).
pub fn interface_ips() -> Vec<IpAddr> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    let mut ips = Vec::new();
    for ifa in addrs {
        let Some(addr) = ifa.address else { continue };
        let ip = if let Some(v4) = addr.as_sockaddr_in() {
            IpAddr::V4(v4.ip())
        } else if let Some(v6) = addr.as_sockaddr_in6() {
            IpAddr::V6(v6.ip())
        } else {
            continue;
        };
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    ips
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> ServerNames {
        ServerNames::of_machine("phonebox", &[IpAddr::from([192, 168, 1, 20])], &["lab.example".into()])
    }

    #[test]
    fn a_fingerprint_reads_back_in_both_forms() {
        let fp = Fingerprint::of(b"certificate");
        assert_eq!(Fingerprint::parse(&fp.hex()), Some(fp));
        assert_eq!(Fingerprint::parse(&fp.to_string()), Some(fp));
        assert_eq!(fp.to_string().len(), 32 * 3 - 1);
        assert_eq!(Fingerprint::parse("abcd"), None);
        assert_eq!(Fingerprint::parse(&"zz".repeat(32)), None);
    }

    #[test]
    fn the_machine_names_include_local_and_loopback() {
        let n = names();
        assert_eq!(n.dns, ["localhost", "phonebox", "phonebox.local", "lab.example"]);
        // A machine whose hostname was never set says "(none)": left out, not a
        // certificate every client refuses.
        let unset = ServerNames::of_machine("(none)", &[], &["bad_name".into(), "ok-name.example".into()]);
        assert_eq!(unset.dns, ["localhost", "ok-name.example"]);
        assert!(is_dns_name("a-1.b") && !is_dns_name("-a") && !is_dns_name("a..b") && !is_dns_name(&"x".repeat(64)));
        assert!(n.ips.contains(&IpAddr::from([127, 0, 0, 1])));
        assert!(n.ips.contains(&IpAddr::from([192, 168, 1, 20])));
    }

    #[test]
    fn the_ca_is_made_once_and_the_server_certificate_follows_the_names() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create(dir.path(), &names()).unwrap();
        assert!(first.reissued);
        let key_mode = std::fs::metadata(dir.path().join("tls/ca.key")).unwrap().permissions().mode();
        assert_eq!(key_mode & 0o777, 0o600);
        let again = load_or_create(dir.path(), &names()).unwrap();
        assert!(!again.reissued, "same names: the certificate is kept");
        assert_eq!(again.fingerprint, first.fingerprint);

        // DHCP hands out another address: a new server certificate, the same CA, old names kept.
        let moved = ServerNames::of_machine("phonebox", &[IpAddr::from([10, 0, 0, 7])], &["lab.example".into()]);
        let third = load_or_create(dir.path(), &moved).unwrap();
        assert!(third.reissued);
        assert_eq!(third.fingerprint, first.fingerprint, "clients pin the CA, which never changes");
        assert!(third.names.ips.contains(&IpAddr::from([10, 0, 0, 7])));
        assert!(third.names.ips.contains(&IpAddr::from([192, 168, 1, 20])), "old address kept");
    }

    #[test]
    fn the_certificate_holds_only_names_the_ca_may_vouch_for() {
        let dir = tempfile::tempdir().unwrap();
        let public = IpAddr::from([203, 0, 113, 9]);
        let first = load_or_create(dir.path(), &ServerNames::of_machine("box", &[public], &[])).unwrap();
        assert!(first.names.ips.contains(&public), "an address present when the CA was made is permitted");
        let later = IpAddr::from([198, 51, 100, 4]);
        let moved =
            load_or_create(dir.path(), &ServerNames::of_machine("box", &[later], &["other.example".into()])).unwrap();
        assert!(!moved.names.ips.contains(&later), "a new public address is outside the CA's constraints");
        assert!(!moved.names.dns.contains(&"other.example".to_string()));
        assert!(moved.names.dns.contains(&"box.local".to_string()));
        assert!(in_net(IpAddr::from([10, 9, 8, 7]), IpAddr::from([10, 0, 0, 0]), 8));
        assert!(!in_net(IpAddr::from([11, 0, 0, 1]), IpAddr::from([10, 0, 0, 0]), 8));
        assert!(in_net(IpAddr::from([0xfe80, 0, 0, 0, 1, 2, 3, 4]), IpAddr::from([0xfe80, 0, 0, 0, 0, 0, 0, 0]), 10));
    }

    /// A leaf for `name` signed by the CA in `dir` (as anyone holding its key could).
    fn leaf_signed_by_the_ca(dir: &Path, name: &str) -> CertificateDer<'static> {
        let ca_key = KeyPair::from_pem(&std::fs::read_to_string(dir.join("tls/ca.key")).unwrap()).unwrap();
        let issuer = Issuer::new(ca_params(&ca_key, &CaRecord::default()), &ca_key);
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::new(vec![name.to_string()]).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        params.signed_by(&key, &issuer).unwrap().der().clone()
    }

    /// Whether a client that installed the CA (DER) accepts `leaf` for `name`: rustls'
    /// own verifier, which reads the CA's name constraints.
    fn trusted_for(ca_der: &[u8], leaf: &CertificateDer<'static>, name: &str) -> bool {
        use rustls::client::danger::ServerCertVerifier;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from(ca_der.to_vec())).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider).build().unwrap();
        let server = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
        verifier.verify_server_cert(leaf, &[], &server, &[], rustls::pki_types::UnixTime::now()).is_ok()
    }

    #[test]
    fn a_single_label_host_name_is_no_subtree_of_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        let m = load_or_create(dir.path(), &ServerNames::of_machine("dev", &[], &["lab.example".into()])).unwrap();
        // The real CA, as a client parses it: `dev` would be the whole `.dev` TLD.
        let bank = leaf_signed_by_the_ca(dir.path(), "bank.dev");
        assert!(!trusted_for(&m.ca_der, &bank, "bank.dev"), "the CA cannot vouch for a site under .dev");
        assert!(!trusted_for(&m.ca_der, &leaf_signed_by_the_ca(dir.path(), "dev"), "dev"));
        // What it should vouch for, it still does (the same signing, other names).
        for name in ["dev.local", "printer.local", "localhost", "lab.example", "x.lab.example"] {
            assert!(trusted_for(&m.ca_der, &leaf_signed_by_the_ca(dir.path(), name), name), "{name}");
        }
        // The server certificate holds no name outside the constraints.
        assert!(!m.names.dns.contains(&"dev".to_string()), "{:?}", m.names.dns);
        assert!(m.names.dns.contains(&"dev.local".to_string()) && m.names.dns.contains(&"localhost".to_string()));
    }

    #[test]
    fn an_older_ca_with_a_single_label_subtree_keeps_its_pin_and_the_name_leaves_the_certificate() {
        // A CA and server certificate as an older version made them for host `vm`.
        let dir = tempfile::tempdir().unwrap();
        let tls = dir.path().join("tls");
        std::fs::create_dir_all(&tls).unwrap();
        let old_record = CaRecord { dns: vec!["vm".into()], ips: Vec::new() };
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let ca = ca_params(&key, &old_record).self_signed(&key).unwrap();
        std::fs::write(tls.join("ca.key"), key.serialize_pem()).unwrap();
        std::fs::write(tls.join("ca.crt"), ca.pem()).unwrap();
        std::fs::write(tls.join("ca.json"), serde_json::to_vec(&old_record).unwrap()).unwrap();
        let old_held = ServerNames { dns: vec!["localhost".into(), "vm".into(), "vm.local".into()], ips: Vec::new() };
        let (cert, server_key, not_after) = issue_server(&key, &old_record, &old_held).unwrap();
        std::fs::write(tls.join("server.crt"), cert).unwrap();
        std::fs::write(tls.join("server.key"), server_key).unwrap();
        let record = ServerRecord {
            dns: old_held.dns.clone(),
            ips: Vec::new(),
            not_after_unix: not_after,
            ca_fingerprint: Fingerprint::of(ca.der()).hex(),
        };
        std::fs::write(tls.join("server.json"), serde_json::to_vec(&record).unwrap()).unwrap();
        assert!(trusted_for(ca.der(), &leaf_signed_by_the_ca(dir.path(), "bank.vm"), "bank.vm"), "the old hole");

        let names = ServerNames::of_machine("vm", &[], &[]);
        let m = load_or_create(dir.path(), &names).unwrap();
        assert_eq!(m.fingerprint, Fingerprint::of(ca.der()), "the CA is kept: every client's pin still holds");
        assert!(m.reissued, "the certificate that held `vm` is replaced");
        assert_eq!(m.names.dns, ["localhost", "vm.local"]);
        let again = load_or_create(dir.path(), &names).unwrap();
        assert!(!again.reissued, "and then kept");
    }

    #[test]
    fn a_users_certificate_replaces_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        let rcgen::CertifiedKey { cert, signing_key } =
            rcgen::generate_simple_self_signed(vec!["box.example".to_string()]).unwrap();
        let (cert_path, key_path) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, signing_key.serialize_pem()).unwrap();
        let m = from_files(&cert_path, &key_path, &names()).unwrap();
        assert_eq!(m.names, names(), "the Host allowlist still knows the machine's names");
        assert_eq!(m.fingerprint, Fingerprint::of(cert.der()), "clients pin the chain's last certificate");
        std::fs::write(&key_path, "not a key").unwrap();
        assert!(matches!(from_files(&cert_path, &key_path, &names()), Err(TlsError::BadPem { .. })));
        std::fs::write(&cert_path, "").unwrap();
        assert!(matches!(from_files(&cert_path, &dir.path().join("missing"), &names()), Err(TlsError::BadPem { .. })));
    }

    /// Runs a TLS 1.3 handshake in memory against `server_config`; whether the client
    /// was handed a session ticket.
    fn client_gets_a_ticket(server_config: Arc<rustls::ServerConfig>, ca_der: &[u8]) -> bool {
        use rustls::client::ClientSessionStore;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from(ca_der.to_vec())).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut client_config = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let store = Arc::new(rustls::client::ClientSessionMemoryCache::new(8));
        client_config.resumption = rustls::client::Resumption::store(store.clone());
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut client = rustls::ClientConnection::new(Arc::new(client_config), name.clone()).unwrap();
        let mut server = rustls::ServerConnection::new(server_config).unwrap();
        // Shuttle bytes both ways until nothing is left in flight (a ticket is written by
        // the server once it has the client's Finished).
        for _ in 0..10 {
            let mut wire = Vec::new();
            client.write_tls(&mut wire).unwrap();
            server.read_tls(&mut wire.as_slice()).unwrap();
            server.process_new_packets().unwrap();
            let mut back = Vec::new();
            server.write_tls(&mut back).unwrap();
            client.read_tls(&mut back.as_slice()).unwrap();
            client.process_new_packets().unwrap();
        }
        assert!(!client.is_handshaking() && !server.is_handshaking(), "the handshake completed");
        assert_eq!(client.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_3));
        store.take_tls13_ticket(&name).is_some()
    }

    #[test]
    fn a_tls13_client_gets_no_session_ticket_after_the_handshake() {
        let dir = tempfile::tempdir().unwrap();
        let m = load_or_create(dir.path(), &names()).unwrap();
        assert!(!client_gets_a_ticket(m.config.clone(), &m.ca_der), "no NewSessionTicket reached the client");
        // The check sees tickets when there are some (rustls' default sends them).
        let mut with_tickets = (*m.config).clone();
        with_tickets.send_tls13_tickets = 2;
        assert!(client_gets_a_ticket(Arc::new(with_tickets), &m.ca_der));
    }

    #[test]
    fn the_profile_holds_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        let m = load_or_create(dir.path(), &names()).unwrap();
        let profile = mobileconfig(&m, "phone<box>");
        use base64::Engine;
        assert!(profile.contains(&base64::engine::general_purpose::STANDARD.encode(&m.ca_der)));
        assert!(profile.contains("com.apple.security.root"));
        assert!(profile.contains("phone&lt;box&gt;"));
    }
}
