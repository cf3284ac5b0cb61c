//! H.264 Annex B splitting over untrusted encoder buffers: `nal_types` and `join_unit`
//! (headers remembered and put in front of bare IDRs), across a sequence of buffers.
//!
//! Invariants: NAL types are 5-bit and one per start code; a buffer without a picture is no
//! unit; a unit is the buffer itself or the remembered headers followed by it; remembered
//! headers hold no picture and come from the front of a buffer that had SPS and PPS.
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use tether::device::video::codec::{join_unit, nal_types};

fn start_codes(data: &[u8]) -> usize {
    data.windows(3).filter(|w| *w == [0, 0, 1]).count()
}

fuzz_target!(|buffers: Vec<Vec<u8>>| {
    let mut headers = Vec::new();
    for data in buffers.iter().take(16) {
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
