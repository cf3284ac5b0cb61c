//! The encoder pipeline: latest raw frame → H.264 (the board's M2M encoder or openh264) →
//! [`ViewerHub`]. Runs on its own thread and only works while someone watches and the
//! capture is not already H.264/MJPEG handed on as is (passthrough).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::codec::{
    find_hardware_h264, AccessUnit, CodecChoice, EncoderError, EncoderSettings, HardwareH264, SoftwareH264,
};
use super::viewers::ViewerHub;
use super::{Frame, FrameReader, SourceGuard, VideoError};

/// Which encoder the pipeline uses, decided once at start.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum EncoderKind {
    /// openh264.
    #[default]
    Software,
    /// The V4L2 M2M encoder at this node.
    Hardware(PathBuf),
}

impl EncoderKind {
    /// Picks the encoder for `choice`: `hardware` needs an M2M H.264 encoder node,
    /// `auto` takes one when the board has it.
    pub fn select(choice: CodecChoice) -> Result<EncoderKind, VideoError> {
        match (choice, find_hardware_h264()) {
            (CodecChoice::Software, _) => Ok(EncoderKind::Software),
            (_, Some(node)) => Ok(EncoderKind::Hardware(node)),
            (CodecChoice::Auto, None) => Ok(EncoderKind::Software),
            (CodecChoice::Hardware, None) => Err(VideoError::NoHardwareEncoder),
        }
    }

    /// The name `status` shows.
    pub fn name(&self) -> &'static str {
        match self {
            EncoderKind::Software => "software",
            EncoderKind::Hardware(_) => "v4l2-m2m",
        }
    }
}

/// One encoder session of either kind (viewers' stream, recordings).
pub(super) enum Session {
    // Boxed: openh264's encoder state is ~7 KiB, the M2M session a few hundred bytes.
    Software(Box<SoftwareH264>),
    Hardware(Box<HardwareH264>),
}

impl Session {
    pub(super) fn open(kind: &EncoderKind, w: u32, h: u32, settings: EncoderSettings) -> Result<Session, EncoderError> {
        match kind {
            EncoderKind::Software => SoftwareH264::new(w, h, settings).map(|e| Session::Software(Box::new(e))),
            EncoderKind::Hardware(node) => {
                HardwareH264::new(node, w, h, settings).map(|e| Session::Hardware(Box::new(e)))
            }
        }
    }

    /// What `status` calls it (the same names as [`EncoderKind::name`]).
    pub(super) fn name(&self) -> &'static str {
        match self {
            Session::Software(_) => EncoderKind::Software.name(),
            Session::Hardware(_) => "v4l2-m2m",
        }
    }

    fn size(&self) -> (u32, u32) {
        match self {
            Session::Software(e) => e.size(),
            Session::Hardware(e) => e.size(),
        }
    }

    fn request_keyframe(&mut self) {
        match self {
            Session::Software(e) => e.request_keyframe(),
            Session::Hardware(e) => e.request_keyframe(),
        }
    }

    pub(super) fn encode(&mut self, frame: &Frame) -> Result<Option<AccessUnit>, EncoderError> {
        match self {
            Session::Software(e) => e.encode(frame),
            Session::Hardware(e) => e.encode(frame),
        }
    }
}

/// How often a waiting encoder thread looks at its stop flag. It otherwise sleeps until a
/// viewer joins or a frame arrives: the 3 ms poll this replaced woke it 333 times a second
/// with nobody watching, and on two cores those wake-ups showed in the tap latency tail.
const STOP_CHECK: Duration = Duration::from_millis(200);

/// Starts encoding frames from `frames` into `hub` with `kind`; stops when the guard drops.
/// A hardware encoder that cannot take a stream (its size, a driver error) falls back to
/// software for that stream, and `hub` says which one runs.
pub fn start_encoder(
    mut frames: FrameReader,
    hub: ViewerHub,
    settings: EncoderSettings,
    kind: EncoderKind,
) -> Result<SourceGuard, VideoError> {
    hub.set_encoder(kind.name());
    let stop = Arc::new(AtomicBool::new(false));
    let stop_thread = stop.clone();
    // Only to wait on the hubs' notifications; encoding itself runs on this thread.
    let waits = tokio::runtime::Builder::new_current_thread().enable_time().build().map_err(VideoError::Spawn)?;
    std::thread::Builder::new()
        .name("h264-encoder".into())
        .spawn(move || {
            let mut encoder: Option<(u32, Session)> = None;
            let mut last = None;
            while !stop_thread.load(Ordering::Relaxed) {
                let passthrough = frames.passthrough();
                if !hub.has_viewers() || passthrough {
                    // Idle (nothing encoded, no frame held) until someone watches, and while
                    // the capture's own H.264/MJPEG goes to viewers as it is.
                    // The timer is made inside `block_on`: it needs the runtime's context.
                    let _ = waits.block_on(async { tokio::time::timeout(STOP_CHECK, hub.viewer_joined()).await });
                    if passthrough {
                        encoder = None; // the encoder's memory is of no use meanwhile
                    }
                    continue;
                }
                // Transcoding compressed capture: its decoder works while we ask.
                frames.want_pixels();
                let frame = frames.latest();
                let fresh = frame.as_ref().is_some_and(|f| Some((f.generation, f.sequence)) != last);
                let Some(frame) = frame.filter(|_| fresh) else {
                    // Never wait holding a frame: it pins one of the capture's buffers.
                    match waits.block_on(async { tokio::time::timeout(STOP_CHECK, frames.changed()).await }) {
                        Ok(false) => break, // the source is gone for good
                        Ok(true) | Err(_) => continue,
                    }
                };
                last = Some((frame.generation, frame.sequence));
                // A new generation or size needs a new encoder (and starts with an IDR).
                let reuse = encoder
                    .as_ref()
                    .is_some_and(|(g, e)| *g == frame.generation && e.size() == (frame.width, frame.height));
                if !reuse {
                    let (w, h) = (frame.width & !1, frame.height & !1);
                    let session = Session::open(&kind, w, h, settings).or_else(|e| match kind {
                        EncoderKind::Hardware(_) => {
                            tracing::warn!(error = %e, "hardware encoder refused this stream; using software");
                            Session::open(&EncoderKind::Software, w, h, settings)
                        }
                        EncoderKind::Software => Err(e),
                    });
                    encoder = match session {
                        Ok(e) => {
                            hub.set_encoder(e.name());
                            Some((frame.generation, e))
                        }
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
