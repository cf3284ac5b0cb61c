//! The H.264 decoding process a stateless decoder leaves to us (ITU-T H.264 8.2): picture
//! order counts (8.2.1), picture numbers (8.2.4.1), reference list initialisation and
//! modification (8.2.4.2, 8.2.4.3) and reference marking (8.2.5: sliding window and
//! memory management operations). No pixels: each stored picture is the timestamp of the
//! CAPTURE buffer the hardware decoded it into.
//!
//! Progressive streams only (frames, no fields or MBAFF): what capture devices send. A
//! stream that breaks the rules (a reference that is not there, a gap in `frame_num`) is an
//! error; the decoder then waits for the next IDR.

use super::h264_syntax::{SliceHeader, SliceType, Sps};

/// Errors of the decoding process.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DpbError {
    /// `frame_num` skipped values: pictures were lost.
    #[error("frame_num jumped from {prev} to {got}: pictures were lost")]
    FrameNumGap {
        /// The previous reference picture's `frame_num`.
        prev: u32,
        /// This picture's.
        got: u32,
    },
    /// A list modification or marking operation named a picture the DPB does not hold.
    #[error("the stream refers to a picture that is not in the DPB ({0})")]
    MissingReference(&'static str),
    /// Field pictures or MBAFF: not supported by this decoder.
    #[error("interlaced H.264 (field pictures) is not supported")]
    Interlaced,
}

/// A picture kept for reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefPicture {
    /// The timestamp (ns) of the CAPTURE buffer holding the decoded picture.
    pub timestamp_ns: u64,
    /// The CAPTURE buffer index, so the decoder can requeue it once it is released.
    pub buffer: u32,
    /// `frame_num` (0 after an MMCO 5).
    pub frame_num: u32,
    /// `FrameNumWrap` / `PicNum` relative to the current picture (8.2.4.1); updated by
    /// [`Dpb::begin`].
    pub pic_num: i32,
    /// `Some(LongTermFrameIdx)` for a long-term reference.
    pub long_term_frame_idx: Option<u32>,
    /// `TopFieldOrderCnt`.
    pub top_poc: i32,
    /// `BottomFieldOrderCnt`.
    pub bottom_poc: i32,
}

impl RefPicture {
    /// `PicOrderCnt()` of a frame.
    pub fn poc(&self) -> i32 {
        self.top_poc.min(self.bottom_poc)
    }

    fn is_long_term(&self) -> bool {
        self.long_term_frame_idx.is_some()
    }
}

/// The current picture as [`Dpb::begin`] worked it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CurrentPicture {
    /// `TopFieldOrderCnt`.
    pub top_poc: i32,
    /// `BottomFieldOrderCnt`.
    pub bottom_poc: i32,
    /// `PicOrderCntMsb` (type 0) for the next picture's prediction.
    poc_msb: i32,
    /// `FrameNumOffset` (types 1 and 2).
    frame_num_offset: i32,
}

impl CurrentPicture {
    /// `PicOrderCnt(CurrPic)`.
    pub fn poc(&self) -> i32 {
        self.top_poc.min(self.bottom_poc)
    }
}

/// What the previous pictures leave for the POC of the next (8.2.1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct PocState {
    /// Previous reference picture: `PicOrderCntMsb` and `pic_order_cnt_lsb` (type 0).
    prev_msb: i32,
    prev_lsb: i32,
    /// Previous picture: `FrameNumOffset` and `frame_num` (types 1, 2).
    prev_frame_num_offset: i32,
    prev_frame_num: u32,
    /// `PrevRefFrameNum`, for the gap check.
    prev_ref_frame_num: u32,
}

/// The decoded picture buffer's reference pictures and the state the decoding process
/// carries from picture to picture.
#[derive(Debug, Clone, Default)]
pub struct Dpb {
    refs: Vec<RefPicture>,
    /// `MaxLongTermFrameIdx`; `None` is "no long-term frame indices".
    max_long_term_frame_idx: Option<u32>,
    poc: PocState,
}

impl Dpb {
    /// An empty DPB (decoding starts at an IDR).
    pub fn new() -> Dpb {
        Dpb::default()
    }

    /// Forgets every picture (after an error, or a new sequence).
    pub fn clear(&mut self) {
        *self = Dpb::default();
    }

    /// The reference pictures, oldest first.
    pub fn refs(&self) -> &[RefPicture] {
        &self.refs
    }

    /// Starts decoding a picture: checks `frame_num`, computes its POC and every reference
    /// picture's `PicNum`.
    pub fn begin(&mut self, sps: &Sps, h: &SliceHeader) -> Result<CurrentPicture, DpbError> {
        if h.field_pic_flag || !sps.frame_mbs_only_flag {
            return Err(DpbError::Interlaced);
        }
        let max_frame_num = 1u32 << sps.frame_num_bits();
        if h.idr {
            self.refs.clear();
        } else if h.frame_num != self.poc.prev_ref_frame_num
            && h.frame_num != (self.poc.prev_ref_frame_num + 1) % max_frame_num
        {
            return Err(DpbError::FrameNumGap { prev: self.poc.prev_ref_frame_num, got: h.frame_num });
        }
        let cur = self.picture_order_count(sps, h, max_frame_num);
        for r in &mut self.refs {
            r.pic_num = match r.long_term_frame_idx {
                Some(idx) => idx as i32,
                None if r.frame_num > h.frame_num => r.frame_num as i32 - max_frame_num as i32,
                None => r.frame_num as i32,
            };
        }
        Ok(cur)
    }

    /// 8.2.1.1 – 8.2.1.3, for a frame.
    fn picture_order_count(&self, sps: &Sps, h: &SliceHeader, max_frame_num: u32) -> CurrentPicture {
        let p = &self.poc;
        let is_ref = h.nal_ref_idc != 0;
        let frame_num_offset = if h.idr {
            0
        } else if p.prev_frame_num > h.frame_num {
            p.prev_frame_num_offset.wrapping_add(max_frame_num as i32)
        } else {
            p.prev_frame_num_offset
        };
        match sps.pic_order_cnt_type {
            0 => {
                let max_lsb = 1i32 << (sps.log2_max_pic_order_cnt_lsb_minus4 + 4);
                let (prev_msb, prev_lsb) = if h.idr { (0, 0) } else { (p.prev_msb, p.prev_lsb) };
                let lsb = h.pic_order_cnt_lsb as i32;
                let msb = if lsb < prev_lsb && prev_lsb - lsb >= max_lsb / 2 {
                    prev_msb.wrapping_add(max_lsb)
                } else if lsb > prev_lsb && lsb - prev_lsb > max_lsb / 2 {
                    prev_msb.wrapping_sub(max_lsb)
                } else {
                    prev_msb
                };
                let top = msb.wrapping_add(lsb);
                CurrentPicture {
                    top_poc: top,
                    bottom_poc: top.wrapping_add(h.delta_pic_order_cnt_bottom),
                    poc_msb: msb,
                    frame_num_offset,
                }
            }
            1 => {
                let cycle = i32::try_from(sps.offset_for_ref_frame.len()).unwrap_or(i32::MAX);
                let mut abs_frame_num = if cycle != 0 { frame_num_offset.wrapping_add(h.frame_num as i32) } else { 0 };
                if !is_ref && abs_frame_num > 0 {
                    abs_frame_num -= 1;
                }
                let mut expected = 0i32;
                if abs_frame_num > 0 {
                    let per_cycle: i32 = sps.offset_for_ref_frame.iter().fold(0i32, |a, &b| a.wrapping_add(b));
                    let cycle_cnt = (abs_frame_num - 1) / cycle;
                    let in_cycle = ((abs_frame_num - 1) % cycle) as usize;
                    expected = cycle_cnt.wrapping_mul(per_cycle);
                    for &o in &sps.offset_for_ref_frame[..=in_cycle] {
                        expected = expected.wrapping_add(o);
                    }
                }
                if !is_ref {
                    expected = expected.wrapping_add(sps.offset_for_non_ref_pic);
                }
                let top = expected.wrapping_add(h.delta_pic_order_cnt[0]);
                let bottom =
                    top.wrapping_add(sps.offset_for_top_to_bottom_field).wrapping_add(h.delta_pic_order_cnt[1]);
                CurrentPicture { top_poc: top, bottom_poc: bottom, poc_msb: 0, frame_num_offset }
            }
            _ => {
                let t = if h.idr {
                    0
                } else {
                    let doubled = frame_num_offset.wrapping_add(h.frame_num as i32).wrapping_mul(2);
                    if is_ref {
                        doubled
                    } else {
                        doubled.wrapping_sub(1)
                    }
                };
                CurrentPicture { top_poc: t, bottom_poc: t, poc_msb: 0, frame_num_offset }
            }
        }
    }

    /// The initial reference lists for a slice (8.2.4.2.1 for P/SP, 8.2.4.2.3 for B),
    /// modified as the slice says (8.2.4.3) and cut to the active sizes. Entries index
    /// [`Dpb::refs`].
    pub fn ref_lists(&self, sps: &Sps, h: &SliceHeader, cur: &CurrentPicture) -> Result<[Vec<usize>; 2], DpbError> {
        let short: Vec<usize> = (0..self.refs.len()).filter(|&i| !self.refs[i].is_long_term()).collect();
        let mut long: Vec<usize> = (0..self.refs.len()).filter(|&i| self.refs[i].is_long_term()).collect();
        long.sort_by_key(|&i| self.refs[i].pic_num);
        let mut lists = match h.slice_type {
            SliceType::I | SliceType::Si => return Ok([Vec::new(), Vec::new()]),
            SliceType::P | SliceType::Sp => {
                let mut l0 = short.clone();
                l0.sort_by_key(|&i| std::cmp::Reverse(self.refs[i].pic_num));
                l0.extend(&long);
                [l0, Vec::new()]
            }
            SliceType::B => {
                let poc = cur.poc();
                let mut before: Vec<usize> = short.iter().copied().filter(|&i| self.refs[i].poc() < poc).collect();
                let mut after: Vec<usize> = short.iter().copied().filter(|&i| self.refs[i].poc() > poc).collect();
                before.sort_by_key(|&i| std::cmp::Reverse(self.refs[i].poc()));
                after.sort_by_key(|&i| self.refs[i].poc());
                let mut l0: Vec<usize> = before.iter().chain(&after).chain(&long).copied().collect();
                let mut l1: Vec<usize> = after.iter().chain(&before).chain(&long).copied().collect();
                if l1.len() > 1 && l0 == l1 {
                    l1.swap(0, 1);
                }
                let (a0, a1) =
                    (h.num_ref_idx_l0_active_minus1 as usize + 1, h.num_ref_idx_l1_active_minus1 as usize + 1);
                l0.truncate(a0);
                l1.truncate(a1);
                [l0, l1]
            }
        };
        let active = [h.num_ref_idx_l0_active_minus1 as usize + 1, h.num_ref_idx_l1_active_minus1 as usize + 1];
        let max_pic_num = 1i32 << sps.frame_num_bits();
        for (n, list) in lists.iter_mut().enumerate() {
            list.truncate(active[n]);
            if h.modifications[n].is_empty() || (n == 1 && h.slice_type != SliceType::B) {
                continue;
            }
            self.modify(list, &h.modifications[n], active[n], h.frame_num as i32, max_pic_num)?;
        }
        Ok(lists)
    }

    /// 8.2.4.3: moves the named pictures to the front of `list`, in order.
    fn modify(
        &self,
        list: &mut Vec<usize>,
        ops: &[super::h264_syntax::ListModification],
        active: usize,
        curr_pic_num: i32,
        max_pic_num: i32,
    ) -> Result<(), DpbError> {
        let mut pred = curr_pic_num;
        for (ref_idx, op) in ops.iter().enumerate() {
            if ref_idx >= active {
                break;
            }
            let pic = match op.idc {
                0 | 1 => {
                    let abs = op.value as i32 + 1;
                    let mut no_wrap = if op.idc == 0 { pred - abs } else { pred + abs };
                    if no_wrap < 0 {
                        no_wrap += max_pic_num;
                    } else if no_wrap >= max_pic_num {
                        no_wrap -= max_pic_num;
                    }
                    pred = no_wrap;
                    let pic_num = if no_wrap > curr_pic_num { no_wrap - max_pic_num } else { no_wrap };
                    self.refs
                        .iter()
                        .position(|r| !r.is_long_term() && r.pic_num == pic_num)
                        .ok_or(DpbError::MissingReference("short-term picture in a list modification"))?
                }
                _ => self
                    .refs
                    .iter()
                    .position(|r| r.long_term_frame_idx == Some(op.value))
                    .ok_or(DpbError::MissingReference("long-term picture in a list modification"))?,
            };
            list.insert(ref_idx.min(list.len()), pic);
            let mut k = ref_idx + 1;
            while k < list.len() {
                if list[k] == pic {
                    list.remove(k);
                } else {
                    k += 1;
                }
            }
            list.truncate(active);
        }
        Ok(())
    }

    /// Finishes a decoded picture: reference marking (8.2.5) and, for a reference
    /// picture, storing it. Returns the CAPTURE buffers no longer referenced (besides the
    /// current one's, which the caller owns when the picture is not a reference).
    pub fn finish(
        &mut self,
        sps: &Sps,
        h: &SliceHeader,
        mut cur: CurrentPicture,
        timestamp_ns: u64,
        buffer: u32,
    ) -> Result<Vec<u32>, DpbError> {
        let before: Vec<u32> = self.refs.iter().map(|r| r.buffer).collect();
        let mut frame_num = h.frame_num;
        let mut current_long_term = None;
        let mut mmco5 = false;
        if h.nal_ref_idc != 0 {
            if h.idr {
                self.refs.clear();
                if h.long_term_reference_flag {
                    current_long_term = Some(0);
                    self.max_long_term_frame_idx = Some(0);
                } else {
                    self.max_long_term_frame_idx = None;
                }
            } else if let Some(ops) = &h.adaptive_ref_pic_marking {
                for op in ops {
                    match op.op {
                        1 => {
                            let pic_num = mmco_pic_num(h.frame_num, op.difference_of_pic_nums_minus1);
                            let k = self
                                .short_term(pic_num)
                                .ok_or(DpbError::MissingReference("short-term picture of MMCO 1"))?;
                            self.refs.remove(k);
                        }
                        2 => {
                            let k = self
                                .refs
                                .iter()
                                .position(|r| r.long_term_frame_idx == Some(op.long_term_pic_num))
                                .ok_or(DpbError::MissingReference("long-term picture of MMCO 2"))?;
                            self.refs.remove(k);
                        }
                        3 => {
                            let pic_num = mmco_pic_num(h.frame_num, op.difference_of_pic_nums_minus1);
                            self.refs.retain(|r| r.long_term_frame_idx != Some(op.long_term_frame_idx));
                            let k = self
                                .short_term(pic_num)
                                .ok_or(DpbError::MissingReference("short-term picture of MMCO 3"))?;
                            self.refs[k].long_term_frame_idx = Some(op.long_term_frame_idx);
                        }
                        4 => {
                            let max = op.max_long_term_frame_idx_plus1.checked_sub(1);
                            self.max_long_term_frame_idx = max;
                            self.refs.retain(|r| match (r.long_term_frame_idx, max) {
                                (Some(idx), Some(m)) => idx <= m,
                                (Some(_), None) => false,
                                (None, _) => true,
                            });
                        }
                        5 => {
                            self.refs.clear();
                            self.max_long_term_frame_idx = None;
                            mmco5 = true;
                        }
                        6 => {
                            self.refs.retain(|r| r.long_term_frame_idx != Some(op.long_term_frame_idx));
                            current_long_term = Some(op.long_term_frame_idx);
                        }
                        _ => {}
                    }
                }
            } else {
                // Sliding window (8.2.5.3): the DPB holds at most max_num_ref_frames
                // (at least one); the oldest short-term picture makes room.
                let max = sps.max_num_ref_frames.max(1) as usize;
                while self.refs.len() >= max {
                    let oldest = self
                        .refs
                        .iter()
                        .enumerate()
                        .filter(|(_, r)| !r.is_long_term())
                        .min_by_key(|(_, r)| r.pic_num)
                        .map(|(k, _)| k);
                    match oldest {
                        Some(k) => {
                            self.refs.remove(k);
                        }
                        None => break,
                    }
                }
            }
            if mmco5 {
                // 8.2.1: after MMCO 5 the picture counts as frame_num 0 with its POC
                // rebased to 0.
                let t = cur.top_poc.min(cur.bottom_poc);
                cur.top_poc -= t;
                cur.bottom_poc -= t;
                frame_num = 0;
            }
            // A stream that overfills the DPB (more references than it declared) loses its
            // oldest short-term picture rather than growing without bound.
            while self.refs.len() >= crate::device::video::v4l2::raw::H264_NUM_DPB_ENTRIES {
                self.refs.remove(0);
            }
            self.refs.push(RefPicture {
                timestamp_ns,
                buffer,
                frame_num,
                pic_num: frame_num as i32,
                long_term_frame_idx: current_long_term,
                top_poc: cur.top_poc,
                bottom_poc: cur.bottom_poc,
            });
            self.poc.prev_ref_frame_num = frame_num;
            if mmco5 {
                self.poc.prev_msb = 0;
                self.poc.prev_lsb = cur.top_poc;
            } else {
                self.poc.prev_msb = cur.poc_msb;
                self.poc.prev_lsb = h.pic_order_cnt_lsb as i32;
            }
        } else if h.idr {
            self.refs.clear();
        }
        self.poc.prev_frame_num = frame_num;
        self.poc.prev_frame_num_offset = if mmco5 { 0 } else { cur.frame_num_offset };
        let kept: Vec<u32> = self.refs.iter().map(|r| r.buffer).collect();
        Ok(before.into_iter().filter(|b| !kept.contains(b)).collect())
    }

    fn short_term(&self, pic_num: i32) -> Option<usize> {
        self.refs.iter().position(|r| !r.is_long_term() && r.pic_num == pic_num)
    }
}

/// `picNumX` of MMCO 1 and 3: `CurrPicNum - (difference_of_pic_nums_minus1 + 1)`, in i64
/// so a hostile difference cannot overflow; one that leaves i32 names no picture.
fn mmco_pic_num(frame_num: u32, difference_minus1: u32) -> i32 {
    let x = i64::from(frame_num) - (i64::from(difference_minus1) + 1);
    i32::try_from(x).unwrap_or(i32::MIN)
}

#[cfg(test)]
mod tests {
    use super::super::h264_syntax::{ListModification, Mmco};
    use super::*;

    fn sps(poc_type: u32, max_refs: u32) -> Sps {
        Sps {
            frame_mbs_only_flag: true,
            log2_max_frame_num_minus4: 0,
            pic_order_cnt_type: poc_type,
            log2_max_pic_order_cnt_lsb_minus4: 2,
            max_num_ref_frames: max_refs,
            ..Sps::default()
        }
    }

    fn header(idr: bool, frame_num: u32, lsb: u32, slice_type: SliceType) -> SliceHeader {
        SliceHeader { nal_ref_idc: 1, idr, slice_type, frame_num, pic_order_cnt_lsb: lsb, ..SliceHeader::default() }
    }

    /// Decodes `pictures` (idr, frame_num, poc lsb, type) into `dpb`, one CAPTURE buffer
    /// each (index = position); returns the released buffers per picture.
    fn run(dpb: &mut Dpb, sps: &Sps, pictures: &[SliceHeader]) -> Vec<Vec<u32>> {
        pictures
            .iter()
            .enumerate()
            .map(|(k, h)| {
                let cur = dpb.begin(sps, h).unwrap();
                dpb.finish(sps, h, cur, k as u64 * 1000, u32::try_from(k).unwrap()).unwrap()
            })
            .collect()
    }

    #[test]
    fn sliding_window_keeps_the_newest_references() {
        let s = sps(2, 2);
        let mut dpb = Dpb::new();
        let pics: Vec<_> =
            (0..5).map(|n| header(n == 0, n, 0, if n == 0 { SliceType::I } else { SliceType::P })).collect();
        let released = run(&mut dpb, &s, &pics);
        assert_eq!(released[0], Vec::<u32>::new());
        assert_eq!(released[1], Vec::<u32>::new());
        assert_eq!(released[2], vec![0], "the third reference pushes out the IDR");
        assert_eq!(released[4], vec![2]);
        assert_eq!(dpb.refs().iter().map(|r| r.frame_num).collect::<Vec<_>>(), vec![3, 4]);
    }

    #[test]
    fn poc_type_2_follows_decoding_order_and_frame_num_wraps() {
        let s = sps(2, 1);
        let mut dpb = Dpb::new();
        // max_frame_num = 16: frame_num runs 0..15 then wraps to 0 without an IDR.
        let mut pocs = Vec::new();
        for n in 0..20u32 {
            let h = header(n == 0, n % 16, 0, if n == 0 { SliceType::I } else { SliceType::P });
            let cur = dpb.begin(&s, &h).unwrap();
            pocs.push(cur.top_poc);
            dpb.finish(&s, &h, cur, u64::from(n) * 1000, n).unwrap();
        }
        assert_eq!(pocs, (0..20).map(|n| 2 * n).collect::<Vec<_>>());
    }

    #[test]
    fn poc_type_0_tracks_the_msb_across_lsb_wraps() {
        let s = sps(0, 1); // max lsb 64
        let mut dpb = Dpb::new();
        let mut pocs = Vec::new();
        for n in 0..40u32 {
            let h = header(n == 0, n % 16, (n * 2) % 64, if n == 0 { SliceType::I } else { SliceType::P });
            let cur = dpb.begin(&s, &h).unwrap();
            pocs.push(cur.top_poc);
            dpb.finish(&s, &h, cur, u64::from(n) * 1000, n).unwrap();
        }
        assert_eq!(pocs, (0..40).map(|n| 2 * n).collect::<Vec<_>>());
    }

    #[test]
    fn a_gap_in_frame_num_is_an_error() {
        let s = sps(2, 2);
        let mut dpb = Dpb::new();
        run(&mut dpb, &s, &[header(true, 0, 0, SliceType::I), header(false, 1, 0, SliceType::P)]);
        assert_eq!(dpb.begin(&s, &header(false, 3, 0, SliceType::P)), Err(DpbError::FrameNumGap { prev: 1, got: 3 }));
        // An IDR always restarts.
        assert!(dpb.begin(&s, &header(true, 0, 0, SliceType::I)).is_ok());
    }

    #[test]
    fn p_lists_are_by_descending_pic_num_and_modifications_reorder_them() {
        let s = sps(2, 3);
        let mut dpb = Dpb::new();
        run(
            &mut dpb,
            &s,
            &[header(true, 0, 0, SliceType::I), header(false, 1, 0, SliceType::P), header(false, 2, 0, SliceType::P)],
        );
        let mut h = header(false, 3, 0, SliceType::P);
        h.num_ref_idx_l0_active_minus1 = 2;
        let cur = dpb.begin(&s, &h).unwrap();
        let [l0, l1] = dpb.ref_lists(&s, &h, &cur).unwrap();
        let nums = |l: &[usize]| l.iter().map(|&i| dpb.refs()[i].frame_num).collect::<Vec<_>>();
        assert_eq!(nums(&l0), vec![2, 1, 0]);
        assert!(l1.is_empty());
        // Move frame 0 to the front: abs_diff_pic_num_minus1 = 2 (3 - 3 = 0).
        h.modifications[0] = vec![ListModification { idc: 0, value: 2 }];
        let [l0, _] = dpb.ref_lists(&s, &h, &cur).unwrap();
        assert_eq!(nums(&l0), vec![0, 2, 1]);
        // A modification naming a picture that is not there is an error.
        h.modifications[0] = vec![ListModification { idc: 0, value: 9 }];
        assert!(dpb.ref_lists(&s, &h, &cur).is_err());
    }

    #[test]
    fn b_lists_split_around_the_current_poc() {
        let s = sps(0, 4);
        let mut dpb = Dpb::new();
        // Decoding order I0 P8 P4 (POC = lsb), then a B at POC 6.
        run(
            &mut dpb,
            &s,
            &[header(true, 0, 0, SliceType::I), header(false, 1, 8, SliceType::P), header(false, 2, 4, SliceType::P)],
        );
        let mut h = header(false, 3, 6, SliceType::B);
        h.nal_ref_idc = 0;
        h.num_ref_idx_l0_active_minus1 = 2;
        h.num_ref_idx_l1_active_minus1 = 2;
        let cur = dpb.begin(&s, &h).unwrap();
        assert_eq!(cur.poc(), 6);
        let [l0, l1] = dpb.ref_lists(&s, &h, &cur).unwrap();
        let pocs = |l: &[usize]| l.iter().map(|&i| dpb.refs()[i].poc()).collect::<Vec<_>>();
        assert_eq!(pocs(&l0), vec![4, 0, 8]);
        assert_eq!(pocs(&l1), vec![8, 4, 0]);
        // A non-reference picture is not stored and releases nothing.
        assert_eq!(dpb.finish(&s, &h, cur, 9000, 9).unwrap(), Vec::<u32>::new());
        assert_eq!(dpb.refs().len(), 3);
    }

    #[test]
    fn memory_management_operations_mark_and_release() {
        let s = sps(2, 4);
        let mut dpb = Dpb::new();
        run(
            &mut dpb,
            &s,
            &[header(true, 0, 0, SliceType::I), header(false, 1, 0, SliceType::P), header(false, 2, 0, SliceType::P)],
        );
        // Picture 3: MMCO 1 drops frame 1 (3 - (1 + 1)), MMCO 3 makes frame 0 long-term 0.
        let mut h = header(false, 3, 0, SliceType::P);
        h.adaptive_ref_pic_marking = Some(vec![
            Mmco { op: 1, difference_of_pic_nums_minus1: 1, ..Mmco::default() },
            Mmco { op: 4, max_long_term_frame_idx_plus1: 1, ..Mmco::default() },
            Mmco { op: 3, difference_of_pic_nums_minus1: 2, long_term_frame_idx: 0, ..Mmco::default() },
        ]);
        let cur = dpb.begin(&s, &h).unwrap();
        assert_eq!(dpb.finish(&s, &h, cur, 3000, 3).unwrap(), vec![1]);
        let lt: Vec<_> = dpb.refs().iter().filter(|r| r.long_term_frame_idx.is_some()).map(|r| r.buffer).collect();
        assert_eq!(lt, vec![0]);
        // P lists put long-term pictures last.
        let mut h = header(false, 4, 0, SliceType::P);
        h.num_ref_idx_l0_active_minus1 = 2;
        let cur = dpb.begin(&s, &h).unwrap();
        let [l0, _] = dpb.ref_lists(&s, &h, &cur).unwrap();
        assert_eq!(l0.iter().map(|&i| dpb.refs()[i].buffer).collect::<Vec<_>>(), vec![3, 2, 0]);
        // MMCO 5 empties the DPB; the picture is stored as frame_num 0 with POC 0.
        h.adaptive_ref_pic_marking = Some(vec![Mmco { op: 5, ..Mmco::default() }]);
        let mut released = dpb.finish(&s, &h, cur, 4000, 4).unwrap();
        released.sort_unstable();
        assert_eq!(released, vec![0, 2, 3]);
        assert_eq!(dpb.refs().len(), 1);
        assert_eq!((dpb.refs()[0].frame_num, dpb.refs()[0].poc()), (0, 0));
        // ... and the next picture continues from frame_num 0.
        assert!(dpb.begin(&s, &header(false, 1, 0, SliceType::P)).is_ok());
    }

    #[test]
    fn missing_marking_targets_are_errors_not_panics() {
        let s = sps(2, 4);
        let mut dpb = Dpb::new();
        run(&mut dpb, &s, &[header(true, 0, 0, SliceType::I)]);
        let mut h = header(false, 1, 0, SliceType::P);
        h.adaptive_ref_pic_marking = Some(vec![Mmco { op: 1, difference_of_pic_nums_minus1: 7, ..Mmco::default() }]);
        let cur = dpb.begin(&s, &h).unwrap();
        assert!(matches!(dpb.finish(&s, &h, cur, 1000, 1), Err(DpbError::MissingReference(_))));
        let mut interlaced = s.clone();
        interlaced.frame_mbs_only_flag = false;
        assert_eq!(dpb.begin(&interlaced, &header(true, 0, 0, SliceType::I)), Err(DpbError::Interlaced));
    }
}
