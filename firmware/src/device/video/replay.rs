//! A recorded capture played back as a [`FrameSource`] (`video = "replay"`): an H.264
//! Annex B stream or concatenated JPEGs (what `ffmpeg -f h264` / `-f mjpeg` write, or a
//! dump of a dongle's output), published at a fixed rate, in a loop, exactly as a capture
//! device would send it. It is how the lab and the benchmarks feed the compressed-capture
//! paths (passthrough to viewers, decoding on demand) without a dongle: vivid cannot emit
//! H.264, and the sim renders raw pixels.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::codec::{access_units, mjpeg_size, CodecChoice, ParameterSets, Prepared, SoftwareH264Decoder};
use super::decode::PixelDecoder;
use super::{Compression, EncodedFrame, FrameHub, FrameSource, Signal, SourceGuard, VideoError, VideoState};

/// Largest recording read (it is held in memory whole).
pub const MAX_REPLAY_BYTES: u64 = 512 << 20;

/// Plays a recording (config `[replay]`).
#[derive(Debug, Clone)]
pub struct ReplayCapture {
    /// The file: H.264 Annex B or concatenated JPEGs (told apart by their first bytes).
    pub path: PathBuf,
    /// Pictures per second.
    pub fps: f32,
    /// Decoders for pixels (as for V4L2 capture).
    pub decoder: CodecChoice,
}

/// A recording split into pictures.
#[derive(Debug)]
pub struct Recording {
    /// How its pictures are compressed.
    pub compression: Compression,
    /// Picture size.
    pub size: (u32, u32),
    /// The pictures in order (access units, or JPEGs).
    pub pictures: Vec<Arc<[u8]>>,
}

/// Splits concatenated JPEGs: each runs from its SOI through the EOI after its scan
/// (segments are skipped by their lengths, so bytes inside them cannot end a picture).
/// Bytes that are not a JPEG are skipped.
pub fn split_jpegs(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(soi) = find(data, i, &[0xFF, 0xD8]) {
        match jpeg_end(data, soi) {
            Some(end) => {
                out.push(&data[soi..end]);
                i = end;
            }
            None => break,
        }
    }
    out
}

fn find(data: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    data.get(from..)?.windows(needle.len()).position(|w| w == needle).map(|p| p + from)
}

/// The end (exclusive) of the JPEG starting at `soi`.
fn jpeg_end(data: &[u8], soi: usize) -> Option<usize> {
    let mut i = soi + 2;
    loop {
        // Markers may be padded with fill bytes (0xFF).
        while data.get(i) == Some(&0xFF) && data.get(i + 1) == Some(&0xFF) {
            i += 1;
        }
        if *data.get(i)? != 0xFF {
            return None;
        }
        let marker = *data.get(i + 1)?;
        match marker {
            0xD9 => return Some(i + 2),
            0xD0..=0xD7 | 0x01 => i += 2,
            _ => {
                let len = usize::from(u16::from_be_bytes([*data.get(i + 2)?, *data.get(i + 3)?]));
                if len < 2 {
                    return None;
                }
                i += 2 + len;
                if marker == 0xDA {
                    // Entropy-coded data: ends at a marker other than a stuffed 0xFF00 or
                    // a restart marker.
                    loop {
                        let ff = find(data, i, &[0xFF])?;
                        match *data.get(ff + 1)? {
                            0x00 | 0xD0..=0xD7 | 0xFF => i = ff + 1,
                            _ => {
                                i = ff;
                                break;
                            }
                        }
                    }
                }
            }
        }
    }
}

impl Recording {
    /// Reads and splits a recording.
    pub fn load(path: &std::path::Path) -> Result<Recording, VideoError> {
        let bad = |why: String| VideoError::Config(format!("replay file {}: {why}", path.display()));
        let len = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?.len();
        if len > MAX_REPLAY_BYTES {
            return Err(bad(format!("{len} bytes; at most {MAX_REPLAY_BYTES} are played")));
        }
        let data = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
        Recording::parse(&data).map_err(bad)
    }

    /// Splits a recording held in memory.
    pub fn parse(data: &[u8]) -> Result<Recording, String> {
        if data.starts_with(&[0xFF, 0xD8]) {
            let pictures: Vec<Arc<[u8]>> = split_jpegs(data).into_iter().map(Arc::from).collect();
            let first = pictures.first().ok_or("no complete JPEG in it")?;
            let size = mjpeg_size(first).map_err(|e| e.to_string())?;
            return Ok(Recording { compression: Compression::Mjpeg, size, pictures });
        }
        if data.starts_with(&[0, 0, 1]) || data.starts_with(&[0, 0, 0, 1]) {
            let pictures: Vec<Arc<[u8]>> = access_units(data).into_iter().map(Arc::from).collect();
            let size = h264_size(&pictures).ok_or("no decodable IDR in it")?;
            return Ok(Recording { compression: Compression::H264, size, pictures });
        }
        Err("neither an H.264 Annex B stream nor JPEGs (it starts with neither 00 00 01 nor FF D8)".into())
    }
}

/// The picture size of an H.264 stream: its first decodable picture's.
fn h264_size(units: &[Arc<[u8]>]) -> Option<(u32, u32)> {
    let mut decoder = SoftwareH264Decoder::new().ok()?;
    // A stream starts at an IDR; a few units is plenty to find its first picture.
    units.iter().take(64).find_map(|u| decoder.decode(u).ok().flatten().map(|(w, h, _)| (w, h)))
}

impl FrameSource for ReplayCapture {
    fn backend(&self) -> &'static str {
        "replay"
    }

    fn start(self: Box<Self>, hub: FrameHub) -> Result<SourceGuard, VideoError> {
        if !(self.fps.is_finite() && self.fps > 0.0 && self.fps <= 240.0) {
            return Err(VideoError::Config(format!("replay fps {} is outside (0, 240]", self.fps)));
        }
        let recording = Recording::load(&self.path)?;
        let (width, height) = recording.size;
        tracing::info!(path = %self.path.display(), compression = recording.compression.name(), width, height,
            pictures = recording.pictures.len(), fps = self.fps, "replaying a recorded capture");
        let hub = Arc::new(hub);
        let pixels = PixelDecoder::start(hub.clone(), self.decoder)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop_thread = stop.clone();
        let period = Duration::from_secs_f32(1.0 / self.fps);
        std::thread::Builder::new()
            .name("replay".into())
            .spawn(move || {
                let _pixels = pixels;
                let generation = 1;
                hub.set_compression(Some(recording.compression));
                hub.set_state(VideoState { signal: Signal::Locked, source_size: Some((width, height)), generation });
                let mut params = ParameterSets::default();
                let mut sequence = 0u64;
                let mut next = Instant::now();
                'play: loop {
                    for picture in &recording.pictures {
                        if stop_thread.load(Ordering::Relaxed) {
                            break 'play;
                        }
                        let (data, keyframe) = match recording.compression {
                            Compression::Mjpeg => (picture.clone(), true),
                            Compression::H264 => match params.prepare(picture) {
                                Prepared::Picture { data, keyframe } => (Arc::from(&data[..]), keyframe),
                                Prepared::NoPicture | Prepared::MissingParameterSets => continue,
                            },
                        };
                        next += period;
                        if let Some(wait) = next.checked_duration_since(Instant::now()) {
                            std::thread::sleep(wait);
                        } else {
                            next = Instant::now(); // fell behind (a busy machine): no burst
                        }
                        sequence += 1;
                        let compression = recording.compression;
                        let captured_at = Instant::now();
                        hub.publish_encoded(EncodedFrame {
                            generation,
                            sequence,
                            captured_at,
                            width,
                            height,
                            compression,
                            keyframe,
                            data,
                        });
                        // A device would be asked for an IDR; a recording has them where
                        // they are (viewers start at the last one).
                        let _ = hub.take_keyframe_request();
                    }
                }
            })
            .map_err(VideoError::Spawn)?;
        Ok(SourceGuard::new(move || stop.store(true, Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JPEG: &[u8] = include_bytes!("../../../../tests/fixtures/testsrc-64x48.jpg");

    #[test]
    fn jpegs_split_at_their_ends_not_at_bytes_that_look_like_markers() {
        let stream = [JPEG, JPEG, b"trailing junk".as_slice(), JPEG].concat();
        let parts = split_jpegs(&stream);
        assert_eq!(parts, vec![JPEG, JPEG, JPEG]);
        let cut = &JPEG[..JPEG.len() - 10];
        assert_eq!(split_jpegs(&[JPEG, cut].concat()), vec![JPEG], "an unfinished JPEG is not a picture");
        let r = Recording::parse(&[JPEG, JPEG].concat()).unwrap();
        assert_eq!((r.compression, r.size, r.pictures.len()), (Compression::Mjpeg, (64, 48), 2));
    }

    #[test]
    fn h264_recordings_know_their_size_and_garbage_is_refused() {
        use crate::device::video::codec::{EncoderSettings, SoftwareH264};
        use crate::device::video::Frame;
        let mut enc = SoftwareH264::new(64, 48, EncoderSettings::default()).unwrap();
        let mut stream = Vec::new();
        for i in 0..3u8 {
            let f = Frame::rgb(1, u64::from(i), 64, 48, vec![i * 40; 64 * 48 * 3]);
            stream.extend_from_slice(&enc.encode(&f).unwrap().unwrap().data);
        }
        let r = Recording::parse(&stream).unwrap();
        assert_eq!((r.compression, r.size, r.pictures.len()), (Compression::H264, (64, 48), 3));
        assert_eq!(r.pictures.concat(), stream);
        assert!(Recording::parse(b"GIF89a").unwrap_err().contains("neither"));
        assert!(Recording::parse(&[0, 0, 1, 0x09, 0x10]).unwrap_err().contains("IDR"));
    }
}
