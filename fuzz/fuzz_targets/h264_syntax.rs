//! The H.264 header parser (SPS, PPS, slice headers) over untrusted NAL units, as a
//! stateless decoder would be fed them from a capture device: a sequence of units through
//! one `StreamHeaders`.
//!
//! Every parsed slice then goes through the decoding process the stateless decoder runs
//! (`h264_dpb`: POC, reference lists, marking) and the V4L2 control builders.
//!
//! Invariants: never a panic; an accepted SPS has a picture size within 8192x8192; a slice
//! header's bits lie within its unit, its POC and marking bits within the header; it names
//! a PPS (and that PPS an SPS) the stream sent; `idr` is the unit's own type. The DPB never
//! holds more than 16 pictures and every list entry names one of them.
#![no_main]
#![forbid(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use tether::device::video::codec::h264_dpb::Dpb;
use tether::device::video::codec::h264_syntax::StreamHeaders;
use tether::device::video::codec::stateless_h264::{decode_params, pps_control, slice_params, sps_control};

fuzz_target!(|units: Vec<Vec<u8>>| {
    let mut headers = StreamHeaders::default();
    let mut dpb = Dpb::new();
    for (k, nal) in units.iter().take(32).enumerate() {
        let Ok(parsed) = headers.accept(nal) else { continue };
        for s in headers.sps.values() {
            let (w, h) = s.size().expect("an accepted SPS has a size");
            assert!(w > 0 && h > 0 && w <= 8192 && h <= 8192, "{w}x{h}");
        }
        if let Some(slice) = parsed {
            assert!(slice.header_bits <= nal.len().saturating_sub(1) * 8, "header past the unit's end");
            assert!(
                slice.pic_order_cnt_bits <= slice.header_bits && slice.dec_ref_pic_marking_bits <= slice.header_bits
            );
            let pps = headers.pps.get(&slice.pic_parameter_set_id).expect("the slice's PPS was sent");
            assert!(headers.sps.contains_key(&pps.seq_parameter_set_id), "the PPS's SPS was sent");
            assert_eq!(slice.idr, nal[0] & 0x1f == 5);
            let sps = &headers.sps[&pps.seq_parameter_set_id];
            let _ = (sps_control(sps), pps_control(sps, pps));
            let Ok(cur) = dpb.begin(sps, &slice) else { continue };
            let _ = decode_params(&dpb, &slice, &cur);
            if let Ok(lists) = dpb.ref_lists(sps, &slice, &cur) {
                assert!(lists.iter().flatten().all(|&i| i < dpb.refs().len()), "a list entry outside the DPB");
                let _ = slice_params(&slice, &lists);
            }
            let _ = dpb.finish(sps, &slice, cur, k as u64 * 1000, k as u32);
            assert!(dpb.refs().len() <= 16, "{} pictures in the DPB", dpb.refs().len());
        }
    }
});
