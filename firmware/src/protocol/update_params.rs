//! Parameters of the update methods (docs/updates.md): `update_upload` sends a bundle in
//! pieces, `update_install` has RAUC install it, `update_status` takes none.

use serde::Deserialize;

/// The largest bundle the daemon takes (a root filesystem, compressed, is a few hundred MiB).
pub const MAX_BUNDLE_BYTES: u64 = 2 << 30;

/// Bundle bytes per `update_upload` piece that keep a request, base64 and all, under
/// [`MAX_REQUEST_BYTES`](super::MAX_REQUEST_BYTES) (64 KiB).
pub const UPLOAD_PIECE_BYTES: usize = 45 * 1024;

/// Parameters of `update_upload`: `data` (base64) is the bundle's bytes from `offset`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateUploadParams {
    /// Where this piece goes: 0 starts a new bundle, then each piece continues the last.
    pub offset: u64,
    /// The whole bundle's size in bytes (1..=[`MAX_BUNDLE_BYTES`]).
    pub total: u64,
    /// The piece, base64.
    pub data: String,
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
