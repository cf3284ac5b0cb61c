//! Parameters of the update methods (docs/updates.md): `update_upload` sends a bundle in
//! pieces, `update_install` has RAUC install it, `update_status` takes none.

use base64::Engine as _;
use serde::{Deserialize, Deserializer};

/// The largest bundle the daemon takes (a root filesystem, compressed, is a few hundred MiB).
pub const MAX_BUNDLE_BYTES: u64 = 2 << 30;

/// Bundle bytes per `update_upload` piece that keep a request, base64 and all, under
/// [`MAX_REQUEST_BYTES`](super::MAX_REQUEST_BYTES) (64 KiB).
pub const UPLOAD_PIECE_BYTES: usize = 45 * 1024;

// A wire piece in base64 plus its envelope fits one request; a typed piece may be larger.
const _: () = assert!(UPLOAD_PIECE_BYTES.div_ceil(3) * 4 + 256 < super::MAX_REQUEST_BYTES);
const _: () = assert!(MAX_UPLOAD_PIECE_BYTES > UPLOAD_PIECE_BYTES);

/// The most bundle bytes one `update_upload` takes. On the wire a piece is held to
/// [`UPLOAD_PIECE_BYTES`] by the request limit; a transport that hands the daemon the
/// bytes themselves (`POST /api/update` builds the request from the body, with no JSON or
/// base64 between) sends pieces up to this size, so a bundle is a few hundred requests,
/// not thousands.
pub const MAX_UPLOAD_PIECE_BYTES: usize = 1 << 20;

/// Parameters of `update_upload`: `data` is the bundle's bytes from `offset` (base64 on the
/// wire, decoded when the request is parsed).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateUploadParams {
    /// Where this piece goes: 0 starts a new bundle, then each piece continues the last.
    pub offset: u64,
    /// The whole bundle's size in bytes (1..=[`MAX_BUNDLE_BYTES`]).
    pub total: u64,
    /// The piece's bytes (at most [`MAX_UPLOAD_PIECE_BYTES`]).
    #[serde(deserialize_with = "from_base64")]
    pub data: Vec<u8>,
}

fn from_base64<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let text = String::deserialize(d)?;
    base64::engine::general_purpose::STANDARD
        .decode(text.as_bytes())
        .map_err(|e| serde::de::Error::custom(format!("data is not base64: {e}")))
}

/// Parameters of `update_install`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateInstallParams {
    /// Install even while a task runs (the reboot ends it).
    #[serde(default)]
    pub force: bool,
    /// Reboot into the new slot once installed (default); false leaves it for the next reboot.
    #[serde(default = "yes")]
    pub reboot: bool,
}

fn yes() -> bool {
    true
}

#[cfg(test)]
mod tests {
    use crate::protocol::{parse_request, Call, ErrorCode};

    #[test]
    fn a_piece_is_base64_on_the_wire_and_bytes_once_parsed() {
        let req = parse_request(br#"{"id":1,"method":"update_upload","offset":0,"total":3,"data":"AAEC"}"#)
            .expect("a valid piece");
        let Call::UpdateUpload(p) = req.call else { panic!("not update_upload: {:?}", req.call) };
        assert_eq!((p.offset, p.total, p.data), (0, 3, vec![0, 1, 2]));
        let e = parse_request(br#"{"id":1,"method":"update_upload","offset":0,"total":3,"data":"A*B"}"#)
            .expect_err("not base64");
        assert_eq!(e.error.code, ErrorCode::InvalidParams);
        assert!(e.error.message.contains("data is not base64"), "{}", e.error.message);
    }
}
