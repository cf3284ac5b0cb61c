//! H.264 Annex B byte streams as capture devices send them: NAL units between start codes,
//! and the parameter sets (SPS, PPS) that every IDR must carry for a viewer to join there.
//!
//! Capture devices differ: some repeat SPS/PPS before every IDR, some send them once when
//! streaming starts, some in a buffer of their own. [`ParameterSets`] keeps the latest ones
//! and puts them in front of an IDR that lacks them, so every keyframe we hand on is
//! decodable by itself; everything else passes through byte for byte.

use std::borrow::Cow;

/// NAL unit type of a non-IDR slice.
pub const NAL_SLICE: u8 = 1;
/// NAL unit type of an IDR slice.
pub const NAL_IDR: u8 = 5;
/// NAL unit type of a sequence parameter set.
pub const NAL_SPS: u8 = 7;
/// NAL unit type of a picture parameter set.
pub const NAL_PPS: u8 = 8;
/// NAL unit type of an access unit delimiter.
pub const NAL_AUD: u8 = 9;

/// One NAL unit inside an Annex B buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nal<'a> {
    /// Offset of its start code in the buffer (a 4-byte code's leading zero included).
    pub start: usize,
    /// `nal_unit_type` (the low 5 bits of the header byte).
    pub kind: u8,
    /// The NAL unit after the start code: header byte and payload, up to the next start
    /// code (trailing zero bytes of the next code's prefix excluded).
    pub bytes: &'a [u8],
}

/// The NAL units of an Annex B buffer, in order. Bytes before the first start code are
/// not a NAL unit and are skipped.
pub fn nal_units(data: &[u8]) -> Vec<Nal<'_>> {
    // (start code offset, first byte after the code)
    let mut codes = Vec::new();
    let mut i = 0;
    while i + 3 <= data.len() {
        if data[i] == 0 && data[i + 1] == 0 && data[i + 2] == 1 {
            let start = if i > 0 && data[i - 1] == 0 { i - 1 } else { i };
            codes.push((start, i + 3));
            i += 3;
        } else {
            i += 1;
        }
    }
    let mut units = Vec::with_capacity(codes.len());
    for (k, &(start, body)) in codes.iter().enumerate() {
        let end = codes.get(k + 1).map_or(data.len(), |&(next, _)| next);
        // `body <= end`: the next code starts at or after this one's last byte.
        let Some(bytes) = data.get(body..end.max(body)) else { continue };
        let Some(&header) = bytes.first() else { continue };
        units.push(Nal { start, kind: header & 0x1f, bytes });
    }
    units
}

/// The `nal_unit_type` of every NAL unit in an Annex B buffer, in order.
pub fn nal_types(data: &[u8]) -> Vec<u8> {
    nal_units(data).iter().map(|n| n.kind).collect()
}

/// Splits an Annex B stream (a file, not a device's buffers) into access units: a new one
/// starts at an access unit delimiter, SPS, PPS or SEI after a picture's slices, or at a
/// slice whose `first_mb_in_slice` is 0 after another picture's slices (H.264 7.4.1.2.3).
/// Bytes before the first start code are dropped.
pub fn access_units(stream: &[u8]) -> Vec<&[u8]> {
    let units = nal_units(stream);
    let mut out = Vec::new();
    let mut start = match units.first() {
        Some(n) => n.start,
        None => return out,
    };
    let mut has_picture = false;
    for n in &units {
        let vcl = (NAL_SLICE..=NAL_IDR).contains(&n.kind);
        // first_mb_in_slice is ue(v) right after the header: 0 is the single bit 1.
        let first_slice = vcl && n.bytes.get(1).is_some_and(|b| b & 0x80 != 0);
        let begins = matches!(n.kind, 6..=9 | 14..=18) || first_slice;
        if begins && has_picture {
            if let Some(au) = stream.get(start..n.start) {
                out.push(au);
            }
            start = n.start;
            has_picture = false;
        }
        has_picture |= vcl;
    }
    if let Some(au) = stream.get(start..).filter(|au| !au.is_empty()) {
        out.push(au);
    }
    out
}

/// What [`ParameterSets::prepare`] made of one buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepared<'a> {
    /// A picture to hand on: the buffer itself, or for an IDR without parameter sets the
    /// known ones followed by the buffer.
    Picture {
        /// Annex B bytes.
        data: Cow<'a, [u8]>,
        /// Whether it holds an IDR slice.
        keyframe: bool,
    },
    /// Only parameter sets (or SEI, AUD): kept for the next IDR, nothing to hand on.
    NoPicture,
    /// An IDR before any SPS/PPS was seen: nobody can decode it (nor what follows it).
    MissingParameterSets,
}

/// The latest SPS and PPS of one stream (one per video generation).
#[derive(Debug, Default, Clone)]
pub struct ParameterSets {
    /// Annex B bytes: every SPS and PPS of the last buffer that had both kinds, or the
    /// latest of each.
    sps: Vec<u8>,
    pps: Vec<u8>,
}

impl ParameterSets {
    /// Records the parameter sets in `data` and prepares it for viewers and decoders.
    pub fn prepare<'a>(&mut self, data: &'a [u8]) -> Prepared<'a> {
        let units = nal_units(data);
        let (mut sps, mut pps) = (Vec::new(), Vec::new());
        for n in &units {
            let target = match n.kind {
                NAL_SPS => &mut sps,
                NAL_PPS => &mut pps,
                _ => continue,
            };
            target.extend_from_slice(&[0, 0, 0, 1]);
            target.extend_from_slice(n.bytes);
        }
        if !sps.is_empty() {
            self.sps = sps;
        }
        if !pps.is_empty() {
            self.pps = pps;
        }
        let keyframe = units.iter().any(|n| n.kind == NAL_IDR);
        if !units.iter().any(|n| (NAL_SLICE..=NAL_IDR).contains(&n.kind)) {
            return Prepared::NoPicture;
        }
        let has_sps = units.iter().any(|n| n.kind == NAL_SPS);
        let has_pps = units.iter().any(|n| n.kind == NAL_PPS);
        if !keyframe || (has_sps && has_pps) {
            return Prepared::Picture { data: Cow::Borrowed(data), keyframe };
        }
        if self.sps.is_empty() || self.pps.is_empty() {
            return Prepared::MissingParameterSets;
        }
        // After an access unit delimiter, which must come first (H.264 7.4.1.2.3).
        let at = match units.as_slice() {
            [aud, next, ..] if aud.kind == NAL_AUD => next.start,
            _ => 0,
        };
        let mut joined = Vec::with_capacity(self.sps.len() + self.pps.len() + data.len());
        joined.extend_from_slice(&data[..at]);
        if !has_sps {
            joined.extend_from_slice(&self.sps);
        }
        if !has_pps {
            joined.extend_from_slice(&self.pps);
        }
        joined.extend_from_slice(&data[at..]);
        Prepared::Picture { data: Cow::Owned(joined), keyframe: true }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPS: &[u8] = &[0, 0, 0, 1, 0x67, 0x4d, 0x40, 0x28, 0xaa];
    const PPS: &[u8] = &[0, 0, 0, 1, 0x68, 0xee, 0x3c, 0x80];
    const IDR: &[u8] = &[0, 0, 1, 0x65, 0x88, 0x84, 0x00];
    const P: &[u8] = &[0, 0, 0, 1, 0x41, 0x9a, 0x22];

    #[test]
    fn splits_three_and_four_byte_start_codes() {
        let au = [SPS, PPS, IDR].concat();
        let units = nal_units(&au);
        assert_eq!(units.iter().map(|n| n.kind).collect::<Vec<_>>(), vec![7, 8, 5]);
        assert_eq!(units[0].start, 0);
        assert_eq!(units[0].bytes, &SPS[4..]);
        assert_eq!(units[1].start, SPS.len());
        assert_eq!(units[2].bytes, &IDR[3..], "the next code's leading zero is not payload");
        assert!(nal_units(b"no start code here").is_empty());
        assert!(nal_units(&[0, 0, 1]).is_empty(), "a start code with nothing after it");
        assert_eq!(nal_types(&[9, 9, 0, 0, 1, 0x09, 0xf0]), vec![9], "leading garbage skipped");
    }

    #[test]
    fn a_stream_splits_into_access_units_at_delimiters_headers_and_first_slices() {
        let aud: &[u8] = &[0, 0, 0, 1, 0x09, 0x10];
        // Two slices of one picture (the second has first_mb_in_slice != 0), then a P.
        let idr_a: &[u8] = &[0, 0, 1, 0x65, 0x88, 0x01];
        let idr_b: &[u8] = &[0, 0, 1, 0x65, 0x40, 0x02];
        let p1: &[u8] = &[0, 0, 0, 1, 0x41, 0x9a, 0x03];
        let p2: &[u8] = &[0, 0, 0, 1, 0x41, 0x9a, 0x04];
        let stream = [aud, SPS, PPS, idr_a, idr_b, aud, p1, p2].concat();
        let aus = access_units(&stream);
        assert_eq!(aus.len(), 3, "{aus:?}");
        assert_eq!(aus[0], &[aud, SPS, PPS, idr_a, idr_b].concat()[..]);
        assert_eq!(aus[1], &[aud, p1].concat()[..]);
        assert_eq!(aus[2], p2, "a first slice without a delimiter starts a picture too");
        assert_eq!(aus.concat(), stream, "nothing lost or added");
        assert!(access_units(b"nothing").is_empty());
    }

    #[test]
    fn idrs_get_the_parameter_sets_they_lack_and_nothing_else_changes() {
        let mut ps = ParameterSets::default();
        assert_eq!(ps.prepare(IDR), Prepared::MissingParameterSets);
        assert_eq!(ps.prepare(&[SPS, PPS].concat()), Prepared::NoPicture, "headers in a buffer of their own");
        let Prepared::Picture { data, keyframe: true } = ps.prepare(IDR) else { panic!("an IDR") };
        assert_eq!(&data[..], &[SPS, PPS, IDR].concat()[..]);
        let Prepared::Picture { data, keyframe: false } = ps.prepare(P) else { panic!("a P slice") };
        assert!(matches!(data, Cow::Borrowed(_)) && &data[..] == P, "deltas pass through untouched");
        let whole = [SPS, PPS, IDR].concat();
        let Prepared::Picture { data, keyframe: true } = ps.prepare(&whole) else { panic!("an IDR") };
        assert!(matches!(data, Cow::Borrowed(_)), "an IDR with its own headers is not copied");
        // A new SPS (resolution change) replaces the old one for later IDRs.
        let sps2: &[u8] = &[0, 0, 0, 1, 0x67, 0x64, 0x00, 0x33];
        ps.prepare(sps2);
        let Prepared::Picture { data, .. } = ps.prepare(IDR) else { panic!("an IDR") };
        assert_eq!(&data[..], &[sps2, PPS, IDR].concat()[..]);
        // An access unit delimiter stays first.
        let aud: &[u8] = &[0, 0, 0, 1, 0x09, 0x10];
        let with_aud = [aud, IDR].concat();
        let Prepared::Picture { data, .. } = ps.prepare(&with_aud) else { panic!("an IDR") };
        assert_eq!(&data[..], &[aud, sps2, PPS, IDR].concat()[..]);
    }
}
