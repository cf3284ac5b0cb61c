//! H.264 parameter sets and slice headers (ITU-T H.264 7.3.2.1.1, 7.3.2.2, 7.3.3), parsed
//! from a capture device's stream: what a stateless (request API) decoder must be told for
//! every slice, and the picture size a stream announces.
//!
//! The input is untrusted. Every `ue(v)` is bounded to 32 bits, every count and index to
//! what the standard allows, and anything we cannot decode in hardware (slice groups, MVC,
//! SVC) is refused with [`SyntaxError::Unsupported`] rather than guessed at.

use std::collections::HashMap;

/// Why a parameter set or slice header could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyntaxError {
    /// The bits ran out in the middle of a syntax element.
    #[error("the NAL unit ends inside {0}")]
    Truncated(&'static str),
    /// A value outside what the standard allows.
    #[error("{what} = {value} is outside the standard's range")]
    Range {
        /// The syntax element.
        what: &'static str,
        /// Its value.
        value: i64,
    },
    /// Valid H.264 that we do not decode.
    #[error("not supported: {0}")]
    Unsupported(&'static str),
    /// A slice names a parameter set the stream has not sent.
    #[error("{what} {id} has not been received")]
    Missing {
        /// `SPS` or `PPS`.
        what: &'static str,
        /// Its id.
        id: u32,
    },
    /// Not the kind of NAL unit asked for.
    #[error("NAL unit type {0} is not {1}")]
    Kind(u8, &'static str),
}

/// The RBSP of a NAL unit payload: emulation prevention bytes (`00 00 03`) removed.
pub fn rbsp(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len());
    let mut zeros = 0;
    for &b in payload {
        if zeros >= 2 && b == 3 {
            zeros = 0;
            continue;
        }
        zeros = if b == 0 { zeros + 1 } else { 0 };
        out.push(b);
    }
    out
}

/// Reads bits of an RBSP, most significant first.
#[derive(Debug)]
pub struct BitReader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> BitReader<'a> {
    /// A reader at the first bit of `data`.
    pub fn new(data: &'a [u8]) -> BitReader<'a> {
        BitReader { data, pos: 0 }
    }

    /// Bits read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    fn bit(&mut self, what: &'static str) -> Result<u32, SyntaxError> {
        let byte = self.data.get(self.pos / 8).ok_or(SyntaxError::Truncated(what))?;
        let bit = (byte >> (7 - self.pos % 8)) & 1;
        self.pos += 1;
        Ok(u32::from(bit))
    }

    /// `u(n)`, n ≤ 32.
    pub fn bits(&mut self, n: u32, what: &'static str) -> Result<u32, SyntaxError> {
        let mut v = 0u32;
        for _ in 0..n.min(32) {
            v = (v << 1) | self.bit(what)?;
        }
        Ok(v)
    }

    /// `u(1)`.
    pub fn flag(&mut self, what: &'static str) -> Result<bool, SyntaxError> {
        Ok(self.bit(what)? == 1)
    }

    /// `ue(v)`: Exp-Golomb, at most 31 leading zeros (values up to 2^32 - 2).
    pub fn ue(&mut self, what: &'static str) -> Result<u32, SyntaxError> {
        let mut zeros = 0;
        while self.bit(what)? == 0 {
            zeros += 1;
            if zeros > 31 {
                return Err(SyntaxError::Range { what, value: i64::MAX });
            }
        }
        let rest = self.bits(zeros, what)?;
        // 2^zeros - 1 + rest fits: zeros ≤ 31 and rest < 2^zeros.
        Ok(((1u64 << zeros) - 1 + u64::from(rest)).try_into().unwrap_or(u32::MAX))
    }

    /// `ue(v)` no greater than `max`.
    pub fn ue_max(&mut self, max: u32, what: &'static str) -> Result<u32, SyntaxError> {
        let v = self.ue(what)?;
        if v > max {
            return Err(SyntaxError::Range { what, value: i64::from(v) });
        }
        Ok(v)
    }

    /// `se(v)`: signed Exp-Golomb.
    pub fn se(&mut self, what: &'static str) -> Result<i32, SyntaxError> {
        let k = i64::from(self.ue(what)?);
        let v = if k % 2 == 1 { (k + 1) / 2 } else { -(k / 2) };
        i32::try_from(v).map_err(|_| SyntaxError::Range { what, value: v })
    }

    /// `se(v)` within `min..=max`.
    pub fn se_range(&mut self, min: i32, max: i32, what: &'static str) -> Result<i32, SyntaxError> {
        let v = self.se(what)?;
        if !(min..=max).contains(&v) {
            return Err(SyntaxError::Range { what, value: i64::from(v) });
        }
        Ok(v)
    }

    /// `more_rbsp_data()`: whether anything but the stop bit and its zero padding is left.
    pub fn more_rbsp_data(&self) -> bool {
        let Some(last) = self.data.iter().rposition(|&b| b != 0) else { return false };
        // The stop bit is the lowest set bit of the last non-zero byte.
        let stop = last * 8 + 7 - self.data[last].trailing_zeros() as usize;
        self.pos < stop
    }
}

/// A scaling list as sent: absent (fall back per the standard's rule A/B), the default
/// matrix, or explicit values in the bitstream's (zig-zag) order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScalingList {
    /// Not sent: inherited by fall-back rule A (SPS) or B (PPS).
    NotPresent,
    /// `useDefaultScalingMatrixFlag`: the standard's default table.
    Default,
    /// The values, in zig-zag scan order (16 or 64 of them).
    Explicit(Vec<u8>),
}

fn scaling_list(r: &mut BitReader<'_>, size: usize) -> Result<ScalingList, SyntaxError> {
    let (mut last, mut next) = (8i32, 8i32);
    let mut list = Vec::with_capacity(size);
    for j in 0..size {
        if next != 0 {
            let delta = r.se_range(-128, 127, "delta_scale")?;
            next = (last + delta + 256) % 256;
            if j == 0 && next == 0 {
                return Ok(ScalingList::Default);
            }
        }
        let v = if next == 0 { last } else { next };
        list.push(u8::try_from(v).map_err(|_| SyntaxError::Range { what: "scaling list", value: i64::from(v) })?);
        last = v;
    }
    Ok(ScalingList::Explicit(list))
}

fn scaling_lists(r: &mut BitReader<'_>, count: usize) -> Result<Vec<ScalingList>, SyntaxError> {
    (0..count)
        .map(|i| {
            if r.flag("scaling_list_present_flag")? {
                scaling_list(r, if i < 6 { 16 } else { 64 })
            } else {
                Ok(ScalingList::NotPresent)
            }
        })
        .collect()
}

/// A sequence parameter set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[allow(missing_docs)] // the fields are the standard's syntax elements, named as there
pub struct Sps {
    pub profile_idc: u8,
    /// constraint_set0_flag .. constraint_set5_flag, in the high bits as sent.
    pub constraint_flags: u8,
    pub level_idc: u8,
    pub seq_parameter_set_id: u32,
    pub chroma_format_idc: u32,
    pub separate_colour_plane_flag: bool,
    pub bit_depth_luma_minus8: u32,
    pub bit_depth_chroma_minus8: u32,
    pub qpprime_y_zero_transform_bypass_flag: bool,
    pub seq_scaling_matrix_present_flag: bool,
    /// 8 lists (12 with 4:4:4) when present: six 4x4, then the 8x8 ones.
    pub scaling_lists: Vec<ScalingList>,
    pub log2_max_frame_num_minus4: u32,
    pub pic_order_cnt_type: u32,
    pub log2_max_pic_order_cnt_lsb_minus4: u32,
    pub delta_pic_order_always_zero_flag: bool,
    pub offset_for_non_ref_pic: i32,
    pub offset_for_top_to_bottom_field: i32,
    pub offset_for_ref_frame: Vec<i32>,
    pub max_num_ref_frames: u32,
    pub gaps_in_frame_num_value_allowed_flag: bool,
    pub pic_width_in_mbs_minus1: u32,
    pub pic_height_in_map_units_minus1: u32,
    pub frame_mbs_only_flag: bool,
    pub mb_adaptive_frame_field_flag: bool,
    pub direct_8x8_inference_flag: bool,
    /// (left, right, top, bottom) when frame_cropping_flag.
    pub frame_crop: Option<(u32, u32, u32, u32)>,
    pub vui_parameters_present_flag: bool,
}

/// The largest picture side we take: beyond any capture device and the kernel's decoders.
pub const MAX_SIDE: u32 = 8192;

/// Profiles whose SPS carries chroma format, bit depth and scaling matrices (7.3.2.1.1).
const HIGH_PROFILES: [u8; 13] = [100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135];

impl Sps {
    /// Parses an SPS NAL unit (header byte included).
    pub fn parse(nal: &[u8]) -> Result<Sps, SyntaxError> {
        let (_, data) = split_header(nal, super::annexb::NAL_SPS, "an SPS")?;
        let data = rbsp(data);
        let r = &mut BitReader::new(&data);
        let mut s = Sps {
            profile_idc: u8::try_from(r.bits(8, "profile_idc")?).unwrap_or(0),
            constraint_flags: u8::try_from(r.bits(8, "constraint flags")?).unwrap_or(0),
            level_idc: u8::try_from(r.bits(8, "level_idc")?).unwrap_or(0),
            seq_parameter_set_id: r.ue_max(31, "seq_parameter_set_id")?,
            chroma_format_idc: 1,
            ..Sps::default()
        };
        if HIGH_PROFILES.contains(&s.profile_idc) {
            s.chroma_format_idc = r.ue_max(3, "chroma_format_idc")?;
            if s.chroma_format_idc == 3 {
                s.separate_colour_plane_flag = r.flag("separate_colour_plane_flag")?;
            }
            s.bit_depth_luma_minus8 = r.ue_max(6, "bit_depth_luma_minus8")?;
            s.bit_depth_chroma_minus8 = r.ue_max(6, "bit_depth_chroma_minus8")?;
            s.qpprime_y_zero_transform_bypass_flag = r.flag("qpprime_y_zero_transform_bypass_flag")?;
            s.seq_scaling_matrix_present_flag = r.flag("seq_scaling_matrix_present_flag")?;
            if s.seq_scaling_matrix_present_flag {
                s.scaling_lists = scaling_lists(r, if s.chroma_format_idc == 3 { 12 } else { 8 })?;
            }
        }
        s.log2_max_frame_num_minus4 = r.ue_max(12, "log2_max_frame_num_minus4")?;
        s.pic_order_cnt_type = r.ue_max(2, "pic_order_cnt_type")?;
        match s.pic_order_cnt_type {
            0 => s.log2_max_pic_order_cnt_lsb_minus4 = r.ue_max(12, "log2_max_pic_order_cnt_lsb_minus4")?,
            1 => {
                s.delta_pic_order_always_zero_flag = r.flag("delta_pic_order_always_zero_flag")?;
                s.offset_for_non_ref_pic = r.se("offset_for_non_ref_pic")?;
                s.offset_for_top_to_bottom_field = r.se("offset_for_top_to_bottom_field")?;
                let n = r.ue_max(255, "num_ref_frames_in_pic_order_cnt_cycle")?;
                s.offset_for_ref_frame = (0..n).map(|_| r.se("offset_for_ref_frame")).collect::<Result<_, _>>()?;
            }
            _ => {}
        }
        s.max_num_ref_frames = r.ue_max(16, "max_num_ref_frames")?;
        s.gaps_in_frame_num_value_allowed_flag = r.flag("gaps_in_frame_num_value_allowed_flag")?;
        // 8192x8192 pixels at most: larger than any capture device (and the kernel's limit).
        s.pic_width_in_mbs_minus1 = r.ue_max(511, "pic_width_in_mbs_minus1")?;
        s.pic_height_in_map_units_minus1 = r.ue_max(511, "pic_height_in_map_units_minus1")?;
        s.frame_mbs_only_flag = r.flag("frame_mbs_only_flag")?;
        if !s.frame_mbs_only_flag {
            s.mb_adaptive_frame_field_flag = r.flag("mb_adaptive_frame_field_flag")?;
        }
        s.direct_8x8_inference_flag = r.flag("direct_8x8_inference_flag")?;
        if r.flag("frame_cropping_flag")? {
            let mut off = || r.ue_max(8192, "frame_crop_offset");
            s.frame_crop = Some((off()?, off()?, off()?, off()?));
        }
        s.vui_parameters_present_flag = r.flag("vui_parameters_present_flag")?;
        // The VUI (timing, colour) changes nothing a decoder is told: not parsed.
        let coded_height = (2 - u32::from(s.frame_mbs_only_flag)) * (s.pic_height_in_map_units_minus1 + 1) * 16;
        if coded_height > MAX_SIDE {
            // Field coding doubles the map units (found by the h264_syntax fuzz target).
            return Err(SyntaxError::Range { what: "coded picture height", value: i64::from(coded_height) });
        }
        if s.size().is_none() {
            return Err(SyntaxError::Range { what: "frame cropping", value: 0 });
        }
        Ok(s)
    }

    /// `ChromaArrayType`.
    pub fn chroma_array_type(&self) -> u32 {
        if self.separate_colour_plane_flag {
            0
        } else {
            self.chroma_format_idc
        }
    }

    /// Bits of `frame_num`.
    pub fn frame_num_bits(&self) -> u32 {
        self.log2_max_frame_num_minus4 + 4
    }

    /// The displayed picture size (cropping applied); `None` when the crop is larger than
    /// the coded picture.
    pub fn size(&self) -> Option<(u32, u32)> {
        let frame_height_mbs = (2 - u32::from(self.frame_mbs_only_flag)) * (self.pic_height_in_map_units_minus1 + 1);
        let (w, h) = ((self.pic_width_in_mbs_minus1 + 1) * 16, frame_height_mbs * 16);
        let (sub_w, sub_h) = match self.chroma_array_type() {
            1 => (2, 2),
            2 => (2, 1),
            _ => (1, 1),
        };
        let (unit_x, unit_y) = if self.chroma_array_type() == 0 {
            (1, 2 - u32::from(self.frame_mbs_only_flag))
        } else {
            (sub_w, sub_h * (2 - u32::from(self.frame_mbs_only_flag)))
        };
        let (l, r, t, b) = self.frame_crop.unwrap_or_default();
        let w = w.checked_sub(unit_x * (l + r)).filter(|&w| w > 0)?;
        let h = h.checked_sub(unit_y * (t + b)).filter(|&h| h > 0)?;
        Some((w, h))
    }
}

/// A picture parameter set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[allow(missing_docs)] // the standard's syntax elements
pub struct Pps {
    pub pic_parameter_set_id: u32,
    pub seq_parameter_set_id: u32,
    pub entropy_coding_mode_flag: bool,
    pub bottom_field_pic_order_in_frame_present_flag: bool,
    pub num_ref_idx_l0_default_active_minus1: u32,
    pub num_ref_idx_l1_default_active_minus1: u32,
    pub weighted_pred_flag: bool,
    pub weighted_bipred_idc: u32,
    pub pic_init_qp_minus26: i32,
    pub pic_init_qs_minus26: i32,
    pub chroma_qp_index_offset: i32,
    pub deblocking_filter_control_present_flag: bool,
    pub constrained_intra_pred_flag: bool,
    pub redundant_pic_cnt_present_flag: bool,
    pub transform_8x8_mode_flag: bool,
    pub pic_scaling_matrix_present_flag: bool,
    pub scaling_lists: Vec<ScalingList>,
    pub second_chroma_qp_index_offset: i32,
}

impl Pps {
    /// Parses a PPS NAL unit; `sps` are the stream's SPSs (its scaling lists depend on the
    /// SPS's chroma format).
    pub fn parse(nal: &[u8], sps: &HashMap<u32, Sps>) -> Result<Pps, SyntaxError> {
        let (_, data) = split_header(nal, super::annexb::NAL_PPS, "a PPS")?;
        let data = rbsp(data);
        let r = &mut BitReader::new(&data);
        let mut p = Pps {
            pic_parameter_set_id: r.ue_max(255, "pic_parameter_set_id")?,
            seq_parameter_set_id: r.ue_max(31, "seq_parameter_set_id")?,
            ..Pps::default()
        };
        let s =
            sps.get(&p.seq_parameter_set_id).ok_or(SyntaxError::Missing { what: "SPS", id: p.seq_parameter_set_id })?;
        p.entropy_coding_mode_flag = r.flag("entropy_coding_mode_flag")?;
        p.bottom_field_pic_order_in_frame_present_flag = r.flag("bottom_field_pic_order_in_frame_present_flag")?;
        if r.ue_max(7, "num_slice_groups_minus1")? > 0 {
            return Err(SyntaxError::Unsupported("slice groups (FMO)"));
        }
        p.num_ref_idx_l0_default_active_minus1 = r.ue_max(31, "num_ref_idx_l0_default_active_minus1")?;
        p.num_ref_idx_l1_default_active_minus1 = r.ue_max(31, "num_ref_idx_l1_default_active_minus1")?;
        p.weighted_pred_flag = r.flag("weighted_pred_flag")?;
        p.weighted_bipred_idc = r.bits(2, "weighted_bipred_idc")?;
        if p.weighted_bipred_idc == 3 {
            return Err(SyntaxError::Range { what: "weighted_bipred_idc", value: 3 });
        }
        p.pic_init_qp_minus26 = r.se_range(-62, 25, "pic_init_qp_minus26")?;
        p.pic_init_qs_minus26 = r.se_range(-26, 25, "pic_init_qs_minus26")?;
        p.chroma_qp_index_offset = r.se_range(-12, 12, "chroma_qp_index_offset")?;
        p.deblocking_filter_control_present_flag = r.flag("deblocking_filter_control_present_flag")?;
        p.constrained_intra_pred_flag = r.flag("constrained_intra_pred_flag")?;
        p.redundant_pic_cnt_present_flag = r.flag("redundant_pic_cnt_present_flag")?;
        p.second_chroma_qp_index_offset = p.chroma_qp_index_offset;
        if r.more_rbsp_data() {
            p.transform_8x8_mode_flag = r.flag("transform_8x8_mode_flag")?;
            p.pic_scaling_matrix_present_flag = r.flag("pic_scaling_matrix_present_flag")?;
            if p.pic_scaling_matrix_present_flag {
                let extra = if s.chroma_format_idc == 3 { 6 } else { 2 };
                p.scaling_lists = scaling_lists(r, 6 + extra * usize::from(p.transform_8x8_mode_flag))?;
            }
            p.second_chroma_qp_index_offset = r.se_range(-12, 12, "second_chroma_qp_index_offset")?;
        }
        Ok(p)
    }
}

/// The header byte's `nal_unit_type` checked against `want`; returns (`nal_ref_idc`, payload).
fn split_header<'a>(nal: &'a [u8], want: u8, name: &'static str) -> Result<(u8, &'a [u8]), SyntaxError> {
    let (&header, payload) = nal.split_first().ok_or(SyntaxError::Truncated("the NAL unit header"))?;
    if header & 0x1f != want {
        return Err(SyntaxError::Kind(header & 0x1f, name));
    }
    Ok(((header >> 5) & 3, payload))
}

/// Slice types (`slice_type % 5`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SliceType {
    /// P.
    #[default]
    P,
    /// B.
    B,
    /// I.
    I,
    /// SP.
    Sp,
    /// SI.
    Si,
}

/// One entry of a reference picture list modification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListModification {
    /// `modification_of_pic_nums_idc` (0..=2; 3 ends the list and is not stored).
    pub idc: u32,
    /// `abs_diff_pic_num_minus1` (idc 0, 1) or `long_term_pic_num` (idc 2).
    pub value: u32,
}

/// One memory management control operation (`dec_ref_pic_marking`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[allow(missing_docs)] // the standard's syntax elements
pub struct Mmco {
    pub op: u32,
    pub difference_of_pic_nums_minus1: u32,
    pub long_term_pic_num: u32,
    pub long_term_frame_idx: u32,
    pub max_long_term_frame_idx_plus1: u32,
}

/// Explicit weighted prediction of one list: (luma weight, luma offset, [chroma (weight,
/// offset); 2]) per reference, defaults filled in where a flag was 0.
pub type WeightTable = Vec<((i32, i32), [(i32, i32); 2])>;

/// A slice header.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[allow(missing_docs)] // the standard's syntax elements
pub struct SliceHeader {
    pub nal_ref_idc: u8,
    pub idr: bool,
    pub first_mb_in_slice: u32,
    pub slice_type: SliceType,
    pub pic_parameter_set_id: u32,
    pub colour_plane_id: u32,
    pub frame_num: u32,
    pub field_pic_flag: bool,
    pub bottom_field_flag: bool,
    pub idr_pic_id: u32,
    pub pic_order_cnt_lsb: u32,
    pub delta_pic_order_cnt_bottom: i32,
    pub delta_pic_order_cnt: [i32; 2],
    pub redundant_pic_cnt: u32,
    pub direct_spatial_mv_pred_flag: bool,
    pub num_ref_idx_l0_active_minus1: u32,
    pub num_ref_idx_l1_active_minus1: u32,
    pub modifications: [Vec<ListModification>; 2],
    pub luma_log2_weight_denom: u32,
    pub chroma_log2_weight_denom: u32,
    /// Present only when explicit weighted prediction applies to this slice.
    pub weights: Option<[WeightTable; 2]>,
    pub no_output_of_prior_pics_flag: bool,
    pub long_term_reference_flag: bool,
    pub adaptive_ref_pic_marking: Option<Vec<Mmco>>,
    pub cabac_init_idc: u32,
    pub slice_qp_delta: i32,
    pub sp_for_switch_flag: bool,
    pub slice_qs_delta: i32,
    pub disable_deblocking_filter_idc: u32,
    pub slice_alpha_c0_offset_div2: i32,
    pub slice_beta_offset_div2: i32,
    /// Bits of the picture order count elements (what V4L2 calls `pic_order_cnt_bit_size`).
    pub pic_order_cnt_bits: usize,
    /// Bits of `dec_ref_pic_marking()` (`dec_ref_pic_marking_bit_size`).
    pub dec_ref_pic_marking_bits: usize,
    /// Bits of the whole header in the RBSP, up to `slice_data()`.
    pub header_bits: usize,
}

impl SliceHeader {
    /// Parses the header of a slice NAL unit (type 1 or 5) against the stream's parameter
    /// sets.
    pub fn parse(nal: &[u8], sps: &HashMap<u32, Sps>, pps: &HashMap<u32, Pps>) -> Result<SliceHeader, SyntaxError> {
        let (&header, payload) = nal.split_first().ok_or(SyntaxError::Truncated("the NAL unit header"))?;
        let kind = header & 0x1f;
        if kind != super::annexb::NAL_SLICE && kind != super::annexb::NAL_IDR {
            return Err(if matches!(kind, 20 | 21) {
                SyntaxError::Unsupported("MVC/SVC slices")
            } else {
                SyntaxError::Kind(kind, "a slice")
            });
        }
        // Only the header is needed: 64 KiB of payload bounds any header (weights of 32
        // references per list are a few hundred bytes).
        let data = rbsp(payload.get(..payload.len().min(64 << 10)).unwrap_or_default());
        let r = &mut BitReader::new(&data);
        let idr = kind == super::annexb::NAL_IDR;
        let first_mb_in_slice = r.ue_max(512 * 512, "first_mb_in_slice")?;
        let slice_type = match r.ue_max(9, "slice_type")? % 5 {
            0 => SliceType::P,
            1 => SliceType::B,
            2 => SliceType::I,
            3 => SliceType::Sp,
            _ => SliceType::Si,
        };
        let pic_parameter_set_id = r.ue_max(255, "pic_parameter_set_id")?;
        let p = pps.get(&pic_parameter_set_id).ok_or(SyntaxError::Missing { what: "PPS", id: pic_parameter_set_id })?;
        let s =
            sps.get(&p.seq_parameter_set_id).ok_or(SyntaxError::Missing { what: "SPS", id: p.seq_parameter_set_id })?;
        let mut h = SliceHeader {
            nal_ref_idc: (header >> 5) & 3,
            idr,
            first_mb_in_slice,
            slice_type,
            pic_parameter_set_id,
            colour_plane_id: 0,
            frame_num: 0,
            field_pic_flag: false,
            bottom_field_flag: false,
            idr_pic_id: 0,
            pic_order_cnt_lsb: 0,
            delta_pic_order_cnt_bottom: 0,
            delta_pic_order_cnt: [0, 0],
            redundant_pic_cnt: 0,
            direct_spatial_mv_pred_flag: false,
            num_ref_idx_l0_active_minus1: p.num_ref_idx_l0_default_active_minus1,
            num_ref_idx_l1_active_minus1: p.num_ref_idx_l1_default_active_minus1,
            modifications: [Vec::new(), Vec::new()],
            luma_log2_weight_denom: 0,
            chroma_log2_weight_denom: 0,
            weights: None,
            no_output_of_prior_pics_flag: false,
            long_term_reference_flag: false,
            adaptive_ref_pic_marking: None,
            cabac_init_idc: 0,
            slice_qp_delta: 0,
            sp_for_switch_flag: false,
            slice_qs_delta: 0,
            disable_deblocking_filter_idc: 0,
            slice_alpha_c0_offset_div2: 0,
            slice_beta_offset_div2: 0,
            pic_order_cnt_bits: 0,
            dec_ref_pic_marking_bits: 0,
            header_bits: 0,
        };
        if s.separate_colour_plane_flag {
            h.colour_plane_id = r.bits(2, "colour_plane_id")?;
        }
        h.frame_num = r.bits(s.frame_num_bits(), "frame_num")?;
        if !s.frame_mbs_only_flag {
            h.field_pic_flag = r.flag("field_pic_flag")?;
            if h.field_pic_flag {
                h.bottom_field_flag = r.flag("bottom_field_flag")?;
            }
        }
        if idr {
            h.idr_pic_id = r.ue_max(65535, "idr_pic_id")?;
        }
        let poc_start = r.position();
        let bottom_present = p.bottom_field_pic_order_in_frame_present_flag && !h.field_pic_flag;
        if s.pic_order_cnt_type == 0 {
            h.pic_order_cnt_lsb = r.bits(s.log2_max_pic_order_cnt_lsb_minus4 + 4, "pic_order_cnt_lsb")?;
            if bottom_present {
                h.delta_pic_order_cnt_bottom = r.se("delta_pic_order_cnt_bottom")?;
            }
        }
        if s.pic_order_cnt_type == 1 && !s.delta_pic_order_always_zero_flag {
            h.delta_pic_order_cnt[0] = r.se("delta_pic_order_cnt[0]")?;
            if bottom_present {
                h.delta_pic_order_cnt[1] = r.se("delta_pic_order_cnt[1]")?;
            }
        }
        h.pic_order_cnt_bits = r.position() - poc_start;
        if p.redundant_pic_cnt_present_flag {
            h.redundant_pic_cnt = r.ue_max(127, "redundant_pic_cnt")?;
        }
        if slice_type == SliceType::B {
            h.direct_spatial_mv_pred_flag = r.flag("direct_spatial_mv_pred_flag")?;
        }
        if matches!(slice_type, SliceType::P | SliceType::Sp | SliceType::B)
            && r.flag("num_ref_idx_active_override_flag")?
        {
            h.num_ref_idx_l0_active_minus1 = r.ue_max(31, "num_ref_idx_l0_active_minus1")?;
            if slice_type == SliceType::B {
                h.num_ref_idx_l1_active_minus1 = r.ue_max(31, "num_ref_idx_l1_active_minus1")?;
            }
        }
        let lists = match slice_type {
            SliceType::I | SliceType::Si => 0,
            SliceType::B => 2,
            _ => 1,
        };
        for list in 0..lists {
            if r.flag("ref_pic_list_modification_flag")? {
                loop {
                    let idc = r.ue_max(5, "modification_of_pic_nums_idc")?;
                    if idc == 3 {
                        break;
                    }
                    let value = match idc {
                        0 | 1 => r.ue_max(131_071, "abs_diff_pic_num_minus1")?,
                        2 => r.ue("long_term_pic_num")?,
                        // 4 and 5 are MVC's.
                        _ => return Err(SyntaxError::Unsupported("MVC reference list modification")),
                    };
                    // One modification per reference, plus slack for equal entries.
                    if h.modifications[list].len() > 32 {
                        return Err(SyntaxError::Range { what: "ref_pic_list_modification entries", value: 33 });
                    }
                    h.modifications[list].push(ListModification { idc, value });
                }
            }
        }
        let explicit = (p.weighted_pred_flag && matches!(slice_type, SliceType::P | SliceType::Sp))
            || (p.weighted_bipred_idc == 1 && slice_type == SliceType::B);
        if explicit {
            h.luma_log2_weight_denom = r.ue_max(7, "luma_log2_weight_denom")?;
            let chroma = s.chroma_array_type() != 0;
            if chroma {
                h.chroma_log2_weight_denom = r.ue_max(7, "chroma_log2_weight_denom")?;
            }
            let mut tables: [WeightTable; 2] = [Vec::new(), Vec::new()];
            let counts = [h.num_ref_idx_l0_active_minus1, h.num_ref_idx_l1_active_minus1];
            for (list, table) in tables.iter_mut().enumerate().take(if slice_type == SliceType::B { 2 } else { 1 }) {
                for _ in 0..=counts[list] {
                    let mut luma = (1 << h.luma_log2_weight_denom, 0);
                    if r.flag("luma_weight_flag")? {
                        luma = (r.se_range(-128, 127, "luma_weight")?, r.se_range(-128, 127, "luma_offset")?);
                    }
                    let mut cw = [(1 << h.chroma_log2_weight_denom, 0); 2];
                    if chroma && r.flag("chroma_weight_flag")? {
                        for c in &mut cw {
                            *c = (r.se_range(-128, 127, "chroma_weight")?, r.se_range(-128, 127, "chroma_offset")?);
                        }
                    }
                    table.push((luma, cw));
                }
            }
            h.weights = Some(tables);
        }
        if h.nal_ref_idc != 0 {
            let start = r.position();
            if idr {
                h.no_output_of_prior_pics_flag = r.flag("no_output_of_prior_pics_flag")?;
                h.long_term_reference_flag = r.flag("long_term_reference_flag")?;
            } else if r.flag("adaptive_ref_pic_marking_mode_flag")? {
                let mut ops = Vec::new();
                loop {
                    let op = r.ue_max(6, "memory_management_control_operation")?;
                    if op == 0 {
                        break;
                    }
                    let mut m = Mmco { op, ..Mmco::default() };
                    if op == 1 || op == 3 {
                        m.difference_of_pic_nums_minus1 = r.ue("difference_of_pic_nums_minus1")?;
                    }
                    if op == 2 {
                        m.long_term_pic_num = r.ue("long_term_pic_num")?;
                    }
                    if op == 3 || op == 6 {
                        m.long_term_frame_idx = r.ue_max(16, "long_term_frame_idx")?;
                    }
                    if op == 4 {
                        m.max_long_term_frame_idx_plus1 = r.ue_max(17, "max_long_term_frame_idx_plus1")?;
                    }
                    if ops.len() >= 66 {
                        return Err(SyntaxError::Range { what: "memory management operations", value: 67 });
                    }
                    ops.push(m);
                }
                h.adaptive_ref_pic_marking = Some(ops);
            }
            h.dec_ref_pic_marking_bits = r.position() - start;
        }
        if p.entropy_coding_mode_flag && !matches!(slice_type, SliceType::I | SliceType::Si) {
            h.cabac_init_idc = r.ue_max(2, "cabac_init_idc")?;
        }
        h.slice_qp_delta = r.se_range(-87, 87, "slice_qp_delta")?;
        if matches!(slice_type, SliceType::Sp | SliceType::Si) {
            if slice_type == SliceType::Sp {
                h.sp_for_switch_flag = r.flag("sp_for_switch_flag")?;
            }
            h.slice_qs_delta = r.se_range(-51, 51, "slice_qs_delta")?;
        }
        if p.deblocking_filter_control_present_flag {
            h.disable_deblocking_filter_idc = r.ue_max(2, "disable_deblocking_filter_idc")?;
            if h.disable_deblocking_filter_idc != 1 {
                h.slice_alpha_c0_offset_div2 = r.se_range(-6, 6, "slice_alpha_c0_offset_div2")?;
                h.slice_beta_offset_div2 = r.se_range(-6, 6, "slice_beta_offset_div2")?;
            }
        }
        h.header_bits = r.position();
        Ok(h)
    }
}

/// The parameter sets a stream has sent so far, and the slice headers of its pictures.
#[derive(Debug, Default)]
pub struct StreamHeaders {
    /// SPSs by id.
    pub sps: HashMap<u32, Sps>,
    /// PPSs by id.
    pub pps: HashMap<u32, Pps>,
}

impl StreamHeaders {
    /// Takes one NAL unit (header byte first): records an SPS or PPS, parses a slice
    /// header; other units are `Ok(None)`.
    pub fn accept(&mut self, nal: &[u8]) -> Result<Option<SliceHeader>, SyntaxError> {
        let Some(&header) = nal.first() else { return Ok(None) };
        match header & 0x1f {
            super::annexb::NAL_SPS => {
                let s = Sps::parse(nal)?;
                self.sps.insert(s.seq_parameter_set_id, s);
                Ok(None)
            }
            super::annexb::NAL_PPS => {
                let p = Pps::parse(nal, &self.sps)?;
                self.pps.insert(p.pic_parameter_set_id, p);
                Ok(None)
            }
            super::annexb::NAL_SLICE | super::annexb::NAL_IDR => {
                SliceHeader::parse(nal, &self.sps, &self.pps).map(Some)
            }
            _ => Ok(None),
        }
    }
}

/// Builders of test NAL units, shared by the codec and recording tests.
#[cfg(test)]
pub(crate) mod test_support {
    /// Writes the syntax back, to build test NAL units bit by bit.
    #[derive(Default)]
    pub(crate) struct BitWriter {
        pub(crate) bits: Vec<bool>,
    }

    impl BitWriter {
        pub(crate) fn u(&mut self, n: u32, v: u32) -> &mut Self {
            for i in (0..n).rev() {
                self.bits.push((v >> i) & 1 == 1);
            }
            self
        }
        pub(crate) fn ue(&mut self, v: u32) -> &mut Self {
            let x = u64::from(v) + 1;
            let len = 64 - x.leading_zeros();
            for _ in 0..len - 1 {
                self.bits.push(false);
            }
            for i in (0..len).rev() {
                self.bits.push((x >> i) & 1 == 1);
            }
            self
        }
        pub(crate) fn se(&mut self, v: i32) -> &mut Self {
            let k = if v > 0 { 2 * v - 1 } else { -2 * v };
            self.ue(u32::try_from(k).unwrap_or(u32::MAX))
        }
        /// The NAL unit: header byte, the bits, the stop bit, zero padding.
        pub(crate) fn nal(&mut self, header: u8) -> Vec<u8> {
            self.bits.push(true);
            while !self.bits.len().is_multiple_of(8) {
                self.bits.push(false);
            }
            let mut out = vec![header];
            out.extend(self.bits.chunks(8).map(|c| c.iter().fold(0u8, |b, &x| (b << 1) | u8::from(x))));
            out
        }
    }

    /// A High-profile 1080p SPS with scaling lists (POC type 0, 4 reference frames).
    pub(crate) fn high_sps() -> Vec<u8> {
        let mut w = BitWriter::default();
        w.u(8, 100).u(8, 0).u(8, 40).ue(0); // High, level 4.0, id 0
        w.ue(1).ue(0).ue(0).u(1, 0).u(1, 1); // 4:2:0, 8 bit, scaling matrix present
                                             // List 0 explicit (deltas: 8 -> 16 then all 16), list 1 default, lists 2..7 absent.
        w.u(1, 1).se(8);
        for _ in 1..16 {
            w.se(0);
        }
        w.u(1, 1).se(-8); // next = 0 at j = 0: the default matrix
        for _ in 2..8 {
            w.u(1, 0);
        }
        w.ue(0).ue(0).ue(2); // log2_max_frame_num 4, POC type 0, lsb 6 bits
        w.ue(4).u(1, 0).ue(119).ue(67).u(1, 1).u(1, 1); // 4 refs, 1920x1088 coded
        w.u(1, 1).ue(0).ue(0).ue(0).ue(4).u(1, 0); // crop 8 rows: 1080
        w.nal(0x67)
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{high_sps, BitWriter};
    use super::*;
    use crate::device::video::codec::annexb::nal_units;
    use crate::device::video::codec::{EncoderSettings, SoftwareH264};
    use crate::device::video::Frame;

    #[test]
    fn exp_golomb_and_emulation_prevention() {
        let mut w = BitWriter::default();
        w.ue(0).ue(1).ue(2).ue(254).se(1).se(-1).se(-2048).u(3, 5);
        let nal = w.nal(0x67);
        let r = &mut BitReader::new(&nal[1..]);
        assert_eq!([r.ue("a").unwrap(), r.ue("b").unwrap(), r.ue("c").unwrap(), r.ue("d").unwrap()], [0, 1, 2, 254]);
        assert_eq!([r.se("e").unwrap(), r.se("f").unwrap(), r.se("g").unwrap()], [1, -1, -2048]);
        assert_eq!(r.bits(3, "h").unwrap(), 5);
        assert!(!r.more_rbsp_data(), "only the stop bit is left");
        assert!(r.flag("stop bit").unwrap());
        assert_eq!(r.ue("past the end"), Err(SyntaxError::Truncated("past the end")), "only zero padding after it");
        // Each 00 00 03 loses its 03, including one at the very end.
        assert_eq!(rbsp(&[0, 0, 3, 1, 0, 0, 3, 0, 0, 3]), vec![0, 0, 1, 0, 0, 0, 0]);
        assert_eq!(rbsp(&[0, 3, 0, 0, 4]), vec![0, 3, 0, 0, 4], "03 after a single zero is data");
        // 32 leading zeros is no ue(v) we accept.
        assert!(matches!(BitReader::new(&[0, 0, 0, 0, 0x80]).ue("x"), Err(SyntaxError::Range { .. })));
    }

    /// openh264's stream of a 100x60 picture: SPS with cropping (7x4 macroblocks, 12 and 4
    /// pixels cropped), PPS, and IDR + P slice headers that agree with it.
    #[test]
    fn openh264_stream_parses_with_cropping_and_consistent_slices() {
        let (w, h) = (100u32, 60u32);
        let mut enc = SoftwareH264::new(w, h, EncoderSettings::default()).unwrap();
        let mut headers = StreamHeaders::default();
        let mut slices = Vec::new();
        for i in 0..3u8 {
            let frame = Frame::rgb(1, u64::from(i), w, h, vec![i * 60; (w * h * 3) as usize]);
            let au = enc.encode(&frame).unwrap().unwrap();
            for n in nal_units(&au.data) {
                if let Some(s) = headers.accept(n.bytes).unwrap() {
                    slices.push(s);
                }
            }
        }
        let sps = headers.sps.values().next().unwrap();
        assert_eq!(sps.profile_idc, 66, "constrained baseline");
        assert_eq!((sps.pic_width_in_mbs_minus1, sps.pic_height_in_map_units_minus1), (6, 3));
        assert_eq!(sps.size(), Some((100, 60)));
        assert!(sps.frame_mbs_only_flag);
        let pps = headers.pps.values().next().unwrap();
        assert!(!pps.entropy_coding_mode_flag, "baseline is CAVLC");
        assert!(slices.len() >= 3);
        let (idr, p) = (&slices[0], &slices[slices.len() - 1]);
        assert!(idr.idr && idr.slice_type == SliceType::I && idr.frame_num == 0);
        assert!(!p.idr && p.slice_type == SliceType::P && p.frame_num > 0);
        assert!(idr.header_bits > 0 && idr.dec_ref_pic_marking_bits == 2, "IDR marking: two flags");
    }

    #[test]
    fn a_high_profile_sps_with_scaling_lists_and_a_pps_with_8x8_transform() {
        let sps = Sps::parse(&high_sps()).unwrap();
        assert_eq!(sps.size(), Some((1920, 1080)));
        assert_eq!(sps.scaling_lists.len(), 8);
        assert_eq!(sps.scaling_lists[0], ScalingList::Explicit(vec![16; 16]));
        assert_eq!(sps.scaling_lists[1], ScalingList::Default);
        assert_eq!(sps.scaling_lists[2], ScalingList::NotPresent);
        assert_eq!(sps.max_num_ref_frames, 4);
        let mut set = HashMap::new();
        set.insert(0, sps);
        let mut w = BitWriter::default();
        w.ue(0).ue(0).u(1, 1).u(1, 0).ue(0).ue(2).ue(0).u(1, 1).u(2, 0).se(-3).se(0).se(2);
        w.u(1, 1).u(1, 0).u(1, 0); // deblocking control, no constrained intra, no redundant
        w.u(1, 1).u(1, 0).se(-2); // transform_8x8, no matrix, second chroma offset
        let pps = Pps::parse(&w.nal(0x68), &set).unwrap();
        assert!(pps.entropy_coding_mode_flag && pps.transform_8x8_mode_flag && pps.weighted_pred_flag);
        assert_eq!((pps.num_ref_idx_l0_default_active_minus1, pps.pic_init_qp_minus26), (2, -3));
        assert_eq!((pps.chroma_qp_index_offset, pps.second_chroma_qp_index_offset), (2, -2));
        // The same PPS without the optional tail: the second offset copies the first.
        let mut w = BitWriter::default();
        w.ue(1).ue(0).u(1, 0).u(1, 0).ue(0).ue(0).ue(0).u(1, 0).u(2, 0).se(0).se(0).se(5).u(1, 0).u(1, 0).u(1, 0);
        let short = Pps::parse(&w.nal(0x68), &set).unwrap();
        assert_eq!(short.second_chroma_qp_index_offset, 5);
        let mut w = BitWriter::default();
        w.ue(2).ue(7);
        assert_eq!(Pps::parse(&w.nal(0x68), &set), Err(SyntaxError::Missing { what: "SPS", id: 7 }));
    }

    #[test]
    fn a_weighted_p_slice_with_list_modification_and_mmco() {
        let mut headers = StreamHeaders::default();
        headers.accept(&high_sps()).unwrap();
        let mut w = BitWriter::default();
        w.ue(0).ue(0).u(1, 1).u(1, 0).ue(0).ue(1).ue(0).u(1, 1).u(2, 0).se(0).se(0).se(0).u(1, 1).u(1, 0).u(1, 0);
        headers.accept(&w.nal(0x68)).unwrap();
        let mut w = BitWriter::default();
        w.ue(0).ue(5).ue(0); // first mb 0, P (5 % 5), PPS 0
        w.u(4, 3).u(6, 6); // frame_num 3, POC lsb 6
        w.u(1, 1).ue(0); // override: 1 reference
        w.u(1, 1).ue(0).ue(2).ue(3); // modify l0: subtract 3, end
        w.ue(5).ue(4); // weights: luma denom 5, chroma denom 4
        w.u(1, 1).se(40).se(-3).u(1, 0); // ref 0: luma weighted, chroma default
        w.u(1, 1).ue(1).ue(0).ue(0); // MMCO 1 (difference 0), end
        w.ue(1).se(-4).ue(0).se(2).se(-1); // cabac 1, qp -4, deblocking 0 with offsets
        let nal = w.nal(0x41);
        let s = headers.accept(&nal).unwrap().unwrap();
        assert_eq!((s.slice_type, s.frame_num, s.pic_order_cnt_lsb), (SliceType::P, 3, 6));
        assert_eq!(s.num_ref_idx_l0_active_minus1, 0);
        assert_eq!(s.modifications[0], vec![ListModification { idc: 0, value: 2 }]);
        let weights = s.weights.as_ref().unwrap();
        assert_eq!(weights[0], vec![((40, -3), [(16, 0), (16, 0)])]);
        assert!(weights[1].is_empty());
        assert_eq!(s.adaptive_ref_pic_marking, Some(vec![Mmco { op: 1, ..Mmco::default() }]));
        assert_eq!(s.dec_ref_pic_marking_bits, 1 + 3 + 1 + 1);
        assert_eq!(s.pic_order_cnt_bits, 6);
        assert_eq!((s.cabac_init_idc, s.slice_qp_delta), (1, -4));
        assert_eq!((s.slice_alpha_c0_offset_div2, s.slice_beta_offset_div2), (2, -1));
        assert_eq!(s.header_bits, w.bits.iter().rposition(|&b| b).unwrap(), "everything before the stop bit");
        // Cut short anywhere: an error, never a panic or a made-up header.
        for cut in 1..nal.len() - 1 {
            assert!(headers.accept(&nal[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn what_we_cannot_decode_is_refused() {
        let mut set = HashMap::new();
        set.insert(0, Sps::parse(&high_sps()).unwrap());
        let mut w = BitWriter::default();
        w.ue(0).ue(0).u(1, 0).u(1, 0).ue(1);
        assert_eq!(Pps::parse(&w.nal(0x68), &set), Err(SyntaxError::Unsupported("slice groups (FMO)")));
        assert_eq!(
            SliceHeader::parse(&[0x74, 0x80], &set, &HashMap::new()),
            Err(SyntaxError::Unsupported("MVC/SVC slices"))
        );
        assert_eq!(Sps::parse(&[0x68, 0x80]), Err(SyntaxError::Kind(8, "an SPS")));
        let mut w = BitWriter::default();
        w.u(8, 66).u(8, 0).u(8, 30).ue(0).ue(0).ue(0).ue(0).ue(1).u(1, 0).ue(0).ue(0).u(1, 1).u(1, 0);
        w.u(1, 1).ue(9).ue(0).ue(0).ue(0).u(1, 0); // crop 18 columns of a 16-wide picture
        assert!(matches!(Sps::parse(&w.nal(0x67)), Err(SyntaxError::Range { what: "frame cropping", .. })));
        // Field coding doubles the height: 512 map units of fields are 16384 rows.
        let mut w = BitWriter::default();
        w.u(8, 66).u(8, 0).u(8, 30).ue(0).ue(0).ue(0).ue(0).ue(1).u(1, 0).ue(0).ue(511).u(1, 0).u(1, 0).u(1, 1);
        w.u(1, 0).u(1, 0);
        assert!(matches!(Sps::parse(&w.nal(0x67)), Err(SyntaxError::Range { what: "coded picture height", .. })));
    }
}
