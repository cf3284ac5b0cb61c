//! H.264 Annex B splitting over untrusted encoder and capture buffers: `nal_types`,
//! `join_unit` (headers remembered and put in front of bare IDRs), `ParameterSets` (the same
//! for passthrough of a capture device's H.264) and `access_units` (a recording split into
//! pictures), across a sequence of buffers.
//!
//! Invariants: NAL types are 5-bit and one per start code; a buffer without a picture is no
//! unit; a unit is the buffer itself or the remembered headers followed by it; remembered
//! headers hold no picture and come from the front of a buffer that had SPS and PPS. A
//! prepared picture is the buffer itself unless it is an IDR, which then only gains SPS and
//! PPS; access units are non-empty and together are the buffer from its first start code.
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use tether::device::video::codec::{access_units, join_unit, nal_types, ParameterSets, Prepared};

fn start_codes(data: &[u8]) -> usize {
    data.windows(3).filter(|w| *w == [0, 0, 1]).count()
}

fuzz_target!(|buffers: Vec<Vec<u8>>| {
    let mut headers = Vec::new();
    let mut params = ParameterSets::default();
    for data in buffers.iter().take(16) {
        let aus = access_units(data);
        assert!(aus.iter().all(|au| !au.is_empty()));
        assert!(data.ends_with(&aus.concat()), "access units lost or moved bytes");
        match params.prepare(data) {
            Prepared::Picture { data: out, keyframe } => {
                let types = nal_types(data);
                assert!(types.iter().any(|t| (1..=5).contains(t)));
                assert_eq!(keyframe, types.contains(&5));
                if *out != data[..] {
                    assert!(keyframe && out.len() > data.len(), "only IDRs gain bytes");
                    let out_types = nal_types(&out);
                    assert!(out_types.contains(&7) && out_types.contains(&8), "{out_types:?}");
                }
            }
            Prepared::NoPicture => assert!(!nal_types(data).iter().any(|t| (1..=5).contains(t))),
            Prepared::MissingParameterSets => assert!(nal_types(data).contains(&5)),
        }
        let types = nal_types(data);
        assert!(types.iter().all(|&t| t < 32));
        assert!(types.len() <= start_codes(data), "{types:?}");
        let picture = types.iter().any(|t| (1..=5).contains(t));
        let had_headers = headers.clone();
        match join_unit(&mut headers, data.clone(), &types) {
            None => {
                assert!(!picture, "a picture was dropped");
                assert_eq!(headers, had_headers, "a buffer without a picture changed the headers");
            }
            Some((unit, keyframe)) => {
                assert!(picture);
                assert_eq!(keyframe, types.contains(&5));
                if types.contains(&7) && types.contains(&8) {
                    assert_eq!(&unit, data);
                    assert!(data.starts_with(&headers), "headers are the buffer's front");
                    assert!(nal_types(&headers).iter().all(|t| !(1..=5).contains(t)), "headers hold a picture");
                } else if unit != *data {
                    assert!(keyframe && !had_headers.is_empty());
                    assert_eq!(unit, [had_headers.as_slice(), data.as_slice()].concat());
                    assert_eq!(headers, had_headers);
                }
            }
        }
    }
});
