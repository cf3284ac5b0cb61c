//! H.264 access units as MP4 stores them: length-prefixed NAL units ("AVCC") in the
//! samples, and the parameter sets once, in the track's `avc1`/`avcC` sample entry.

use shiguredo_mp4::boxes::{Avc1Box, AvccBox, SampleEntry, VisualSampleEntryFields};
use shiguredo_mp4::Uint;

use super::RecordError;
use crate::device::video::codec::annexb::{nal_units, NAL_AUD, NAL_IDR, NAL_PPS, NAL_SPS};
use crate::device::video::codec::h264_syntax::Sps;

/// NAL unit type of supplemental enhancement information (timing hints a file does not
/// need; some decoders choke on a capture device's private ones).
const NAL_SEI: u8 = 6;

/// One access unit converted for MP4.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AvccSample {
    /// The picture's NAL units, each after a 4-byte big-endian length.
    pub data: Vec<u8>,
    /// Whether it holds an IDR slice (a sync sample).
    pub idr: bool,
    /// The last SPS the unit carried (without start code).
    pub sps: Option<Vec<u8>>,
    /// The last PPS the unit carried.
    pub pps: Option<Vec<u8>>,
}

/// Converts one Annex B access unit: slices become length-prefixed; SPS and PPS are
/// returned apart (they belong in the sample entry); delimiters and SEI are dropped.
pub fn to_avcc(annexb: &[u8]) -> AvccSample {
    let mut out = AvccSample::default();
    for nal in nal_units(annexb) {
        // A start code's trailing zero bytes belong to no NAL (trailing_zero_8bits).
        let bytes = trim_trailing_zeros(nal.bytes);
        match nal.kind {
            NAL_SPS => out.sps = Some(bytes.to_vec()),
            NAL_PPS => out.pps = Some(bytes.to_vec()),
            NAL_AUD | NAL_SEI => {}
            kind => {
                let Ok(len) = u32::try_from(bytes.len()) else { continue };
                if bytes.is_empty() {
                    continue;
                }
                out.idr |= kind == NAL_IDR;
                out.data.extend_from_slice(&len.to_be_bytes());
                out.data.extend_from_slice(bytes);
            }
        }
    }
    out
}

fn trim_trailing_zeros(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    &bytes[..end]
}

/// The `avc1` sample entry for a stream with these parameter sets, pictures `width` x
/// `height`. High profiles need the chroma format and bit depths in `avcC` (ISO
/// 14496-15 5.3.3.1.2); they are read from the SPS itself.
pub fn sample_entry(sps: &[u8], pps: &[u8], width: u16, height: u16) -> Result<SampleEntry, RecordError> {
    let parsed = Sps::parse(sps).map_err(|e| RecordError::Stream(format!("unreadable SPS: {e}")))?;
    let (profile, compatibility, level) = match sps {
        [_, profile, compatibility, level, ..] => (*profile, *compatibility, *level),
        _ => return Err(RecordError::Stream("SPS too short".into())),
    };
    let high = !matches!(profile, 66 | 77 | 88);
    let narrow =
        |v: u32, what: &str| u8::try_from(v).map_err(|_| RecordError::Stream(format!("SPS {what} {v} out of range")));
    let (chroma, luma_depth, chroma_depth) = if high {
        (
            Some(Uint::new(narrow(parsed.chroma_format_idc, "chroma_format_idc")?)),
            Some(Uint::new(narrow(parsed.bit_depth_luma_minus8, "bit_depth_luma_minus8")?)),
            Some(Uint::new(narrow(parsed.bit_depth_chroma_minus8, "bit_depth_chroma_minus8")?)),
        )
    } else {
        (None, None, None)
    };
    Ok(SampleEntry::Avc1(Avc1Box {
        visual: VisualSampleEntryFields {
            data_reference_index: VisualSampleEntryFields::DEFAULT_DATA_REFERENCE_INDEX,
            width,
            height,
            horizresolution: VisualSampleEntryFields::DEFAULT_HORIZRESOLUTION,
            vertresolution: VisualSampleEntryFields::DEFAULT_VERTRESOLUTION,
            frame_count: VisualSampleEntryFields::DEFAULT_FRAME_COUNT,
            compressorname: VisualSampleEntryFields::NULL_COMPRESSORNAME,
            depth: VisualSampleEntryFields::DEFAULT_DEPTH,
        },
        avcc_box: AvccBox {
            avc_profile_indication: profile,
            profile_compatibility: compatibility,
            avc_level_indication: level,
            length_size_minus_one: Uint::new(3),
            sps_list: vec![sps.to_vec()],
            pps_list: vec![pps.to_vec()],
            chroma_format: chroma,
            bit_depth_luma_minus8: luma_depth,
            bit_depth_chroma_minus8: chroma_depth,
            sps_ext_list: Vec::new(),
        },
        unknown_boxes: Vec::new(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::video::codec::{EncoderSettings, SoftwareH264};
    use crate::device::video::Frame;

    fn idr() -> Vec<u8> {
        let mut enc = SoftwareH264::new(64, 48, EncoderSettings::default()).expect("encoder");
        let frame = Frame::rgb(1, 1, 64, 48, vec![90; 64 * 48 * 3]);
        enc.encode(&frame).expect("encode").expect("a picture").data.to_vec()
    }

    #[test]
    fn an_idr_splits_into_length_prefixed_slices_and_its_parameter_sets() {
        let unit = idr();
        let sample = to_avcc(&unit);
        assert!(sample.idr);
        let (sps, pps) = (sample.sps.clone().expect("sps"), sample.pps.clone().expect("pps"));
        assert_eq!(sps[0] & 0x1f, NAL_SPS);
        assert_eq!(pps[0] & 0x1f, NAL_PPS);
        // Walk the lengths: they cover the sample exactly and no NAL is a parameter set.
        let mut at = 0;
        let mut kinds = Vec::new();
        while at < sample.data.len() {
            let len = u32::from_be_bytes(sample.data[at..at + 4].try_into().expect("4 bytes")) as usize;
            kinds.push(sample.data[at + 4] & 0x1f);
            at += 4 + len;
        }
        assert_eq!(at, sample.data.len());
        assert!(kinds.contains(&NAL_IDR), "{kinds:?}");
        assert!(!kinds.contains(&NAL_SPS) && !kinds.contains(&NAL_PPS), "{kinds:?}");
    }

    #[test]
    fn delimiters_and_sei_are_dropped_and_garbage_is_no_sample() {
        let mut unit = vec![0, 0, 0, 1, 0x09, 0xf0, 0, 0, 1, 0x06, 5, 1, 0x80];
        unit.extend_from_slice(&[0, 0, 1, 0x41, 0x9a, 0x01, 0, 0]);
        let sample = to_avcc(&unit);
        assert!(!sample.idr);
        assert_eq!(sample.data, vec![0, 0, 0, 3, 0x41, 0x9a, 0x01]);
        assert_eq!(to_avcc(&[1, 2, 3, 4]), AvccSample::default());
    }

    #[test]
    fn baseline_entries_leave_out_the_high_profile_fields_and_bad_sps_is_an_error() {
        let sample = to_avcc(&idr());
        let (sps, pps) = (sample.sps.expect("sps"), sample.pps.expect("pps"));
        let SampleEntry::Avc1(entry) = sample_entry(&sps, &pps, 64, 48).expect("entry") else {
            panic!("not avc1");
        };
        assert_eq!(entry.avcc_box.avc_profile_indication, sps[1]);
        assert_eq!(entry.avcc_box.chroma_format, None);
        assert_eq!((entry.visual.width, entry.visual.height), (64, 48));
        assert!(sample_entry(&[0x67], &pps, 64, 48).is_err());
    }

    proptest::proptest! {
        /// Capture bytes are the dongle's word: any of them converts without a panic, and
        /// the lengths written always cover the sample exactly.
        #[test]
        fn any_bytes_convert_into_a_consistent_sample(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let sample = to_avcc(&bytes);
            let mut at = 0;
            while at < sample.data.len() {
                let len = u32::from_be_bytes(sample.data[at..at + 4].try_into().expect("4 bytes")) as usize;
                proptest::prop_assert!(len > 0);
                at += 4 + len;
            }
            proptest::prop_assert_eq!(at, sample.data.len());
        }
    }

    #[test]
    fn high_profile_entries_carry_chroma_and_bit_depth_from_the_sps() {
        let sps = crate::device::video::codec::h264_syntax::test_support::high_sps();
        let SampleEntry::Avc1(entry) = sample_entry(&sps, &[0x68, 0xce], 64, 48).expect("entry") else {
            panic!("not avc1");
        };
        assert_eq!(entry.avcc_box.avc_profile_indication, 100);
        assert_eq!(entry.avcc_box.chroma_format.map(Uint::get), Some(1));
        assert_eq!(entry.avcc_box.bit_depth_luma_minus8.map(Uint::get), Some(0));
    }
}
