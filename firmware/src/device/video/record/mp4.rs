//! An MP4 file of one H.264 track, written as samples come: the media data first, the
//! index (`moov`) at the end. The muxer (shiguredo_mp4) does no I/O; this file does it.
//!
//! The file is written under `NAME.part` and renamed to its name only once the index is
//! on disk and synced: a file with the final name is always whole. A writer dropped
//! without [`Mp4Writer::finish`] (an error, a crash) leaves the `.part`, which nothing
//! serves and which the owner deletes.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shiguredo_mp4::boxes::SampleEntry;
use shiguredo_mp4::mux::{estimate_maximum_moov_box_size, Mp4FileMuxer, Mp4FileMuxerOptions, Sample};
use shiguredo_mp4::TrackKind;

use super::RecordError;

/// The track's time unit: 90 kHz, the unit of H.264's own timing.
pub const TIMESCALE: u32 = 90_000;

/// The path a recording has while it is being written.
pub fn part_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(".part");
    PathBuf::from(name)
}

/// One MP4 file being written.
pub struct Mp4Writer {
    file: File,
    path: PathBuf,
    part: PathBuf,
    mux: Mp4FileMuxer,
    /// Bytes in the file so far.
    written: u64,
    samples: usize,
    /// Sum of the samples' durations, in [`TIMESCALE`] units.
    duration: u64,
}

impl std::fmt::Debug for Mp4Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mp4Writer")
            .field("path", &self.path)
            .field("written", &self.written)
            .field("samples", &self.samples)
            .finish_non_exhaustive()
    }
}

impl Mp4Writer {
    /// Starts the file that will be `path` (written as `path.part` until finished).
    pub fn create(path: &Path) -> Result<Mp4Writer, RecordError> {
        let creation_timestamp = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        let options = Mp4FileMuxerOptions { reserved_moov_box_size: 0, creation_timestamp };
        let mux = Mp4FileMuxer::with_options(options).map_err(|e| RecordError::Mux(e.to_string()))?;
        let part = part_path(path);
        let mut file = File::create(&part).map_err(RecordError::Io)?;
        let head = mux.initial_boxes_bytes();
        file.write_all(head).map_err(RecordError::Io)?;
        let written = head.len() as u64;
        Ok(Mp4Writer { file, path: path.to_path_buf(), part, mux, written, samples: 0, duration: 0 })
    }

    /// Bytes the file would have, index included, with one more sample of `len` bytes:
    /// what a size cap is checked against before the sample is written.
    pub fn size_with(&self, len: usize) -> u64 {
        let index = estimate_maximum_moov_box_size(&[self.samples + 1]) as u64;
        self.written + len as u64 + index
    }

    /// Bytes written so far (without the index still to come).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Samples written so far.
    pub fn samples(&self) -> usize {
        self.samples
    }

    /// The samples' total duration.
    pub fn duration(&self) -> Duration {
        Duration::from_micros(self.duration * 1_000_000 / u64::from(TIMESCALE))
    }

    /// Appends one sample (AVCC bytes) lasting `duration` ticks of [`TIMESCALE`]. The
    /// first sample needs its `entry`; a later one gives one only when the stream's
    /// parameters changed.
    pub fn write(
        &mut self,
        data: &[u8],
        keyframe: bool,
        duration: u32,
        entry: Option<SampleEntry>,
    ) -> Result<(), RecordError> {
        self.file.write_all(data).map_err(RecordError::Io)?;
        let sample = Sample {
            track_kind: TrackKind::Video,
            sample_entry: entry,
            keyframe,
            // A constant: 90 000 is not zero.
            timescale: NonZeroU32::new(TIMESCALE).unwrap_or(NonZeroU32::MIN),
            duration,
            composition_time_offset: None,
            data_offset: self.written,
            data_size: data.len(),
        };
        self.mux.append_sample(&sample).map_err(|e| RecordError::Mux(e.to_string()))?;
        self.written += data.len() as u64;
        self.samples += 1;
        self.duration += u64::from(duration);
        Ok(())
    }

    /// Writes the index, syncs and gives the file its name; returns its size. A file with
    /// no sample is no video: it is removed and the answer is an error.
    pub fn finish(mut self) -> Result<u64, RecordError> {
        if self.samples == 0 {
            self.abandon();
            return Err(RecordError::Empty);
        }
        let finalized = self.mux.finalize().map_err(|e| RecordError::Mux(e.to_string()))?;
        let mut end = self.written;
        for (offset, bytes) in finalized.offset_and_bytes_pairs() {
            self.file.seek(SeekFrom::Start(offset)).map_err(RecordError::Io)?;
            self.file.write_all(bytes).map_err(RecordError::Io)?;
            end = end.max(offset + bytes.len() as u64);
        }
        self.file.sync_all().map_err(RecordError::Io)?;
        std::fs::rename(&self.part, &self.path).map_err(RecordError::Io)?;
        Ok(end)
    }

    /// Removes the unfinished file.
    pub fn abandon(self) {
        if let Err(e) = std::fs::remove_file(&self.part) {
            tracing::warn!(path = %self.part.display(), error = %e, "could not remove an unfinished recording");
        }
    }
}

#[cfg(test)]
mod tests {
    use shiguredo_mp4::demux::{Input, Mp4FileDemuxer};

    use super::super::avcc::{sample_entry, to_avcc};
    use super::*;
    use crate::device::video::codec::{EncoderSettings, SoftwareH264};
    use crate::device::video::Frame;

    /// Samples read back: (keyframe, duration, size).
    fn demux(bytes: &[u8]) -> Vec<(bool, u32, usize)> {
        let mut demuxer = Mp4FileDemuxer::new();
        while let Some(required) = demuxer.required_input() {
            let start = usize::try_from(required.position).expect("position");
            let end = required.size.map_or(bytes.len(), |s| (start + s).min(bytes.len()));
            demuxer.handle_input(Input { position: required.position, data: &bytes[start..end] });
        }
        let mut out = Vec::new();
        while let Some(sample) = demuxer.next_sample().expect("sample") {
            out.push((sample.keyframe, sample.duration, sample.data_size));
        }
        out
    }

    #[test]
    fn thirty_encoded_pictures_read_back_with_their_durations_and_sync_samples() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.mp4");
        let settings = EncoderSettings { bitrate_bps: 500_000, fps: 10.0, idr_interval_s: 1 };
        let mut enc = SoftwareH264::new(96, 64, settings).expect("encoder");
        let mut writer = Mp4Writer::create(&path).expect("create");
        assert!(part_path(&path).exists() && !path.exists());
        let mut sizes = Vec::new();
        for i in 0..30u8 {
            let frame = Frame::rgb(1, u64::from(i), 96, 64, vec![i.wrapping_mul(8); 96 * 64 * 3]);
            let unit = enc.encode(&frame).expect("encode").expect("picture");
            let sample = to_avcc(&unit.data);
            let entry = match (i, &sample.sps, &sample.pps) {
                (0, Some(sps), Some(pps)) => Some(sample_entry(sps, pps, 96, 64).expect("entry")),
                _ => None,
            };
            assert!(writer.size_with(sample.data.len()) > writer.written());
            writer.write(&sample.data, sample.idr, 9_000, entry).expect("write");
            sizes.push((sample.idr, 9_000, sample.data.len()));
        }
        assert_eq!(writer.duration(), Duration::from_secs(3));
        let len = writer.finish().expect("finish");
        assert!(path.exists() && !part_path(&path).exists());
        let bytes = std::fs::read(&path).expect("read");
        assert_eq!(bytes.len() as u64, len);
        assert_eq!(demux(&bytes), sizes);
        assert!(sizes[0].0 && sizes.iter().filter(|s| s.0).count() >= 2, "an IDR each second");
    }

    #[test]
    fn an_empty_or_abandoned_file_leaves_nothing_behind() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("b.mp4");
        let writer = Mp4Writer::create(&path).expect("create");
        assert!(matches!(writer.finish(), Err(RecordError::Empty)));
        assert!(!path.exists() && !part_path(&path).exists());
        let mut writer = Mp4Writer::create(&path).expect("create");
        writer.write(&[0, 0, 0, 1, 0x65], true, 10, None).expect_err("no sample entry");
        writer.abandon();
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
    }
}
