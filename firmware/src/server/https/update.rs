//! `POST /api/update`: an update bundle as the request body (`Content-Length` required),
//! handed to the daemon as `update_upload` pieces and installed with `update_install`, all
//! through the dispatcher (the daemon checks the caller is admin on the first piece, before
//! the rest of the body is read). The pieces are typed requests carrying the body's bytes
//! as they are, [`MAX_UPLOAD_PIECE_BYTES`] at a time: on the appliance's CPU, encoding the
//! body as base64 in JSON only to parse it back was half the upload's cost. The answer comes once RAUC has started; its progress and
//! result are `update_status` (`GET /api/update`). Query: `force=1` (install while a task
//! runs), `reboot=0` (install now, try it at the next reboot).

use bytes::BytesMut;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::CONTENT_LENGTH;
use hyper::{Request, StatusCode};
use serde_json::{Map, Value};

use super::body;
use super::guard::Authenticated;
use super::shared::Shared;
use crate::protocol::update_params::{UpdateUploadParams, MAX_BUNDLE_BYTES, MAX_UPLOAD_PIECE_BYTES};
use crate::protocol::{Call, ErrorBody, ErrorCode};
use crate::server::dispatch;

/// Receives the bundle and starts the install.
pub(super) async fn post(
    shared: &Shared,
    auth: &Authenticated,
    force: bool,
    reboot: bool,
    req: Request<Incoming>,
) -> Result<super::routes::Answer, ErrorBody> {
    let total: u64 = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| {
            ErrorBody::new(ErrorCode::InvalidParams, "send the bundle with a Content-Length (curl --data-binary @FILE)")
        })?;
    if total == 0 || total > MAX_BUNDLE_BYTES {
        return Err(ErrorBody::new(
            ErrorCode::RequestTooLarge,
            format!("a bundle is 1 to {MAX_BUNDLE_BYTES} bytes, not {total}"),
        ));
    }
    let mut body = req.into_body();
    let mut pending = BytesMut::with_capacity(MAX_UPLOAD_PIECE_BYTES * 2);
    let mut offset: u64 = 0;
    loop {
        let frame = body.frame().await.transpose().map_err(|e| {
            ErrorBody::new(ErrorCode::InvalidRequest, format!("the upload broke off after {offset} bytes: {e}"))
        })?;
        let ended = frame.is_none();
        if let Some(data) = frame.and_then(|f| f.into_data().ok()) {
            pending.extend_from_slice(&data);
        }
        while pending.len() >= MAX_UPLOAD_PIECE_BYTES || (ended && !pending.is_empty()) {
            let n = pending.len().min(MAX_UPLOAD_PIECE_BYTES);
            let piece = pending.split_to(n);
            if offset + n as u64 > total {
                return Err(ErrorBody::new(ErrorCode::InvalidRequest, "the body is longer than its Content-Length"));
            }
            upload(shared, auth, offset, total, piece.to_vec()).await?;
            offset += n as u64;
        }
        if ended {
            break;
        }
    }
    if offset != total {
        return Err(ErrorBody::new(
            ErrorCode::InvalidRequest,
            format!("the upload ended after {offset} of {total} bytes; nothing was installed"),
        ));
    }
    let mut params = Map::new();
    params.insert("force".into(), force.into());
    params.insert("reboot".into(), reboot.into());
    let request = dispatch::request("update_install", params, auth.task_token.as_deref())?;
    let value = dispatch::call(&shared.daemon, &auth.caller, &request).await?;
    Ok(body::json(StatusCode::ACCEPTED, &value))
}

async fn upload(
    shared: &Shared,
    auth: &Authenticated,
    offset: u64,
    total: u64,
    data: Vec<u8>,
) -> Result<Value, ErrorBody> {
    let call = Call::UpdateUpload(UpdateUploadParams { offset, total, data });
    let request = dispatch::typed_request(call, auth.task_token.as_deref());
    dispatch::call(&shared.daemon, &auth.caller, &request).await
}
