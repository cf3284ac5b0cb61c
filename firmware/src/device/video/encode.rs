//! The encoder pipeline: latest raw frame → software H.264 → [`ViewerHub`]. Runs on its own
//! thread and only works while someone watches.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::codec::{EncoderSettings, SoftwareH264};
use super::viewers::ViewerHub;
use super::{FrameReader, SourceGuard, VideoError};

/// Starts encoding frames from `frames` into `hub`; stops when the guard drops.
pub fn start_encoder(
    frames: FrameReader,
    hub: ViewerHub,
    settings: EncoderSettings,
) -> Result<SourceGuard, VideoError> {
    let stop = Arc::new(AtomicBool::new(false));
    let stop_thread = stop.clone();
    std::thread::Builder::new()
        .name("h264-encoder".into())
        .spawn(move || {
            let mut encoder: Option<(u32, SoftwareH264)> = None;
            let mut last = None;
            while !stop_thread.load(Ordering::Relaxed) {
                let frame = frames.latest();
                let fresh = frame.as_ref().is_some_and(|f| Some((f.generation, f.sequence)) != last);
                if !fresh || !hub.has_viewers() {
                    // Frames arrive at most every few ms; polling keeps this thread simple
                    // and never makes the capture side wait.
                    std::thread::sleep(Duration::from_millis(3));
                    continue;
                }
                let Some(frame) = frame else { continue };
                last = Some((frame.generation, frame.sequence));
                // A new generation or size needs a new encoder (and starts with an IDR).
                let reuse = encoder
                    .as_ref()
                    .is_some_and(|(g, e)| *g == frame.generation && e.size() == (frame.width, frame.height));
                if !reuse {
                    encoder = match SoftwareH264::new(frame.width & !1, frame.height & !1, settings) {
                        Ok(e) => Some((frame.generation, e)),
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot encode this video");
                            std::thread::sleep(Duration::from_millis(500));
                            continue;
                        }
                    };
                }
                let Some((_, enc)) = encoder.as_mut() else { continue };
                if hub.take_keyframe_request() {
                    enc.request_keyframe();
                }
                match enc.encode(&frame) {
                    Ok(Some(unit)) => hub.publish(unit),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "encode failed; restarting the encoder");
                        encoder = None;
                    }
                }
            }
        })
        .map_err(VideoError::Spawn)?;
    Ok(SourceGuard::new(move || stop.store(true, Ordering::Relaxed)))
}
