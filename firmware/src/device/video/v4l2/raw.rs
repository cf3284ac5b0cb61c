//! The kernel's V4L2 structs we use, by hand, with their kernel names (`linux/videodev2.h`).
//!
//! Only 64-bit Linux targets are supported (x86_64, aarch64: both LP64, same layouts). The
//! compile-time assertions below pin every size and offset; `tests::layout_matches_c`
//! compiles a C probe against the system header (and, with the cross compiler, for aarch64)
//! and checks the same numbers.
// Kernel names and fields, documented in linux/videodev2.h; unions cannot derive Debug.
#![allow(non_camel_case_types, missing_docs, missing_debug_implementations, clippy::type_complexity)]

use std::mem::{offset_of, size_of};

pub const VIDEO_MAX_PLANES: usize = 8;

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_capability {
    pub driver: [u8; 16],
    pub card: [u8; 32],
    pub bus_info: [u8; 32],
    pub version: u32,
    pub capabilities: u32,
    pub device_caps: u32,
    pub reserved: [u32; 3],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_fmtdesc {
    pub index: u32,
    pub type_: u32,
    pub flags: u32,
    pub description: [u8; 32],
    pub pixelformat: u32,
    pub mbus_code: u32,
    pub reserved: [u32; 3],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_pix_format {
    pub width: u32,
    pub height: u32,
    pub pixelformat: u32,
    pub field: u32,
    pub bytesperline: u32,
    pub sizeimage: u32,
    pub colorspace: u32,
    pub priv_: u32,
    pub flags: u32,
    pub ycbcr_enc: u32,
    pub quantization: u32,
    pub xfer_func: u32,
}

#[repr(C, packed)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_plane_pix_format {
    pub sizeimage: u32,
    pub bytesperline: u32,
    pub reserved: [u16; 6],
}

#[repr(C, packed)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_pix_format_mplane {
    pub width: u32,
    pub height: u32,
    pub pixelformat: u32,
    pub field: u32,
    pub colorspace: u32,
    pub plane_fmt: [v4l2_plane_pix_format; VIDEO_MAX_PLANES],
    pub num_planes: u8,
    pub flags: u8,
    pub ycbcr_enc: u8,
    pub quantization: u8,
    pub xfer_func: u8,
    pub reserved: [u8; 7],
}

/// `v4l2_format.fmt`: 200 bytes, 8-byte aligned (the kernel union holds pointers).
#[repr(C)]
#[derive(Clone, Copy)]
pub union v4l2_format_fmt {
    pub pix: v4l2_pix_format,
    pub pix_mp: v4l2_pix_format_mplane,
    pub raw_data: [u8; 200],
    pub align: [u64; 25],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct v4l2_format {
    pub type_: u32,
    pub fmt: v4l2_format_fmt,
}

impl Default for v4l2_format {
    fn default() -> Self {
        v4l2_format { type_: 0, fmt: v4l2_format_fmt { raw_data: [0; 200] } }
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_requestbuffers {
    pub count: u32,
    pub type_: u32,
    pub memory: u32,
    pub capabilities: u32,
    pub flags: u8,
    pub reserved: [u8; 3],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct timeval {
    pub tv_sec: i64,
    pub tv_usec: i64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct timespec {
    pub tv_sec: i64,
    pub tv_nsec: i64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_timecode {
    pub type_: u32,
    pub flags: u32,
    pub frames: u8,
    pub seconds: u8,
    pub minutes: u8,
    pub hours: u8,
    pub userbits: [u8; 4],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union v4l2_plane_m {
    pub mem_offset: u32,
    pub userptr: u64,
    pub fd: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct v4l2_plane {
    pub bytesused: u32,
    pub length: u32,
    pub m: v4l2_plane_m,
    pub data_offset: u32,
    pub reserved: [u32; 11],
}

impl Default for v4l2_plane {
    fn default() -> Self {
        v4l2_plane { bytesused: 0, length: 0, m: v4l2_plane_m { userptr: 0 }, data_offset: 0, reserved: [0; 11] }
    }
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union v4l2_buffer_m {
    pub offset: u32,
    pub userptr: u64,
    pub planes: *mut v4l2_plane,
    pub fd: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct v4l2_buffer {
    pub index: u32,
    pub type_: u32,
    pub bytesused: u32,
    pub flags: u32,
    pub field: u32,
    pub timestamp: timeval,
    pub timecode: v4l2_timecode,
    pub sequence: u32,
    pub memory: u32,
    pub m: v4l2_buffer_m,
    pub length: u32,
    pub reserved2: u32,
    pub request_fd: i32,
}

impl Default for v4l2_buffer {
    fn default() -> Self {
        v4l2_buffer {
            index: 0,
            type_: 0,
            bytesused: 0,
            flags: 0,
            field: 0,
            timestamp: timeval::default(),
            timecode: v4l2_timecode::default(),
            sequence: 0,
            memory: 0,
            m: v4l2_buffer_m { userptr: 0 },
            length: 0,
            reserved2: 0,
            request_fd: 0,
        }
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_frmsize_stepwise {
    pub min_width: u32,
    pub max_width: u32,
    pub step_width: u32,
    pub min_height: u32,
    pub max_height: u32,
    pub step_height: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_frmsizeenum {
    pub index: u32,
    pub pixel_format: u32,
    pub type_: u32,
    /// Discrete sizes use the first two words (width, height).
    pub stepwise: v4l2_frmsize_stepwise,
    pub reserved: [u32; 2],
}

/// `V4L2_FRMSIZE_TYPE_DISCRETE` / `V4L2_FRMIVAL_TYPE_DISCRETE`: one entry per size/interval.
pub const FRMSIZE_TYPE_DISCRETE: u32 = 1;
/// See [`FRMSIZE_TYPE_DISCRETE`].
pub const FRMIVAL_TYPE_DISCRETE: u32 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct v4l2_fract {
    pub numerator: u32,
    pub denominator: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_frmival_stepwise {
    pub min: v4l2_fract,
    pub max: v4l2_fract,
    pub step: v4l2_fract,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_frmivalenum {
    pub index: u32,
    pub pixel_format: u32,
    pub width: u32,
    pub height: u32,
    pub type_: u32,
    /// Discrete intervals use `min`.
    pub stepwise: v4l2_frmival_stepwise,
    pub reserved: [u32; 2],
}

#[repr(C, packed)]
#[derive(Debug, Clone, Copy)]
pub struct v4l2_bt_timings {
    pub width: u32,
    pub height: u32,
    pub interlaced: u32,
    pub polarities: u32,
    pub pixelclock: u64,
    pub hfrontporch: u32,
    pub hsync: u32,
    pub hbackporch: u32,
    pub vfrontporch: u32,
    pub vsync: u32,
    pub vbackporch: u32,
    pub il_vfrontporch: u32,
    pub il_vsync: u32,
    pub il_vbackporch: u32,
    pub standards: u32,
    pub flags: u32,
    pub picture_aspect: v4l2_fract,
    pub cea861_vic: u8,
    pub hdmi_vic: u8,
    pub reserved: [u8; 46],
}

impl Default for v4l2_bt_timings {
    fn default() -> Self {
        // SAFETY-free zero init: every field is an integer or array of integers.
        v4l2_bt_timings {
            width: 0,
            height: 0,
            interlaced: 0,
            polarities: 0,
            pixelclock: 0,
            hfrontporch: 0,
            hsync: 0,
            hbackporch: 0,
            vfrontporch: 0,
            vsync: 0,
            vbackporch: 0,
            il_vfrontporch: 0,
            il_vsync: 0,
            il_vbackporch: 0,
            standards: 0,
            flags: 0,
            picture_aspect: v4l2_fract::default(),
            cea861_vic: 0,
            hdmi_vic: 0,
            reserved: [0; 46],
        }
    }
}

/// `v4l2_dv_timings`: `type` then a 128-byte union of which we use `bt` (type 0, BT.656/1120).
#[repr(C, packed)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_dv_timings {
    pub type_: u32,
    pub bt: v4l2_bt_timings,
    pub pad: [u32; 1],
}

#[repr(C, packed)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_bt_timings_cap {
    pub min_width: u32,
    pub max_width: u32,
    pub min_height: u32,
    pub max_height: u32,
    pub min_pixelclock: u64,
    pub max_pixelclock: u64,
    pub standards: u32,
    pub capabilities: u32,
    pub reserved: [u32; 16],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_dv_timings_cap {
    pub type_: u32,
    pub pad: u32,
    pub reserved: [u32; 2],
    pub bt: v4l2_bt_timings_cap,
    pub raw_rest: [u32; 6],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_enum_dv_timings {
    pub index: u32,
    pub pad: u32,
    pub reserved: [u32; 2],
    pub timings: v4l2_dv_timings,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct v4l2_edid {
    pub pad: u32,
    pub start_block: u32,
    pub blocks: u32,
    pub reserved: [u32; 5],
    pub edid: *mut u8,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_event_subscription {
    pub type_: u32,
    pub id: u32,
    pub flags: u32,
    pub reserved: [u32; 5],
}

/// `v4l2_event.u`: 64 bytes, 8-byte aligned (it contains an `__s64`).
#[repr(C)]
#[derive(Clone, Copy)]
pub union v4l2_event_u {
    pub data: [u8; 64],
    pub align: [u64; 8],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct v4l2_event {
    pub type_: u32,
    pub u: v4l2_event_u,
    pub pending: u32,
    pub sequence: u32,
    pub timestamp: timespec,
    pub id: u32,
    pub reserved: [u32; 8],
}

impl Default for v4l2_event {
    fn default() -> Self {
        v4l2_event {
            type_: 0,
            u: v4l2_event_u { data: [0; 64] },
            pending: 0,
            sequence: 0,
            timestamp: timespec::default(),
            id: 0,
            reserved: [0; 8],
        }
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_control {
    pub id: u32,
    pub value: i32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_rect {
    pub left: i32,
    pub top: i32,
    pub width: u32,
    pub height: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_selection {
    pub type_: u32,
    pub target: u32,
    pub flags: u32,
    pub r: v4l2_rect,
    pub reserved: [u32; 9],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_input {
    pub index: u32,
    pub name: [u8; 32],
    pub type_: u32,
    pub audioset: u32,
    pub tuner: u32,
    pub std: u64,
    pub status: u32,
    pub capabilities: u32,
    pub reserved: [u32; 3],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_queryctrl {
    pub id: u32,
    pub type_: u32,
    pub name: [u8; 32],
    pub minimum: i32,
    pub maximum: i32,
    pub step: i32,
    pub default_value: i32,
    pub flags: u32,
    pub reserved: [u32; 2],
}

/// `V4L2_CTRL_FLAG_NEXT_CTRL`: with QUERYCTRL, return the next control after `id`.
pub const CTRL_FLAG_NEXT_CTRL: u32 = 0x8000_0000;
/// `V4L2_CTRL_TYPE_CTRL_CLASS`: a class heading, not a control.
pub const CTRL_TYPE_CTRL_CLASS: u32 = 6;

/// `VIDIOC_QUERYMENU` answer: a menu item's name (or value, for integer menus).
#[repr(C, packed)]
#[derive(Debug, Clone, Copy)]
pub struct v4l2_querymenu {
    pub id: u32,
    pub index: u32,
    pub name: [u8; 32],
    pub reserved: u32,
}

/// One control of `VIDIOC_S_EXT_CTRLS`: `value` for scalars, `ptr` (with `size`) for
/// compound controls such as the stateless codec parameters.
#[repr(C, packed)]
#[derive(Debug, Clone, Copy)]
pub struct v4l2_ext_control {
    pub id: u32,
    pub size: u32,
    pub reserved2: [u32; 1],
    /// The union `value` / `value64` / `ptr`: 8 bytes, written as a pointer or a value.
    pub value_or_ptr: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct v4l2_ext_controls {
    /// `which` (`V4L2_CTRL_WHICH_*`) or a control class.
    pub which: u32,
    pub count: u32,
    pub error_idx: u32,
    pub request_fd: i32,
    pub reserved: [u32; 1],
    pub controls: *mut v4l2_ext_control,
}

/// `V4L2_CTRL_WHICH_CUR_VAL`: set the controls now.
pub const CTRL_WHICH_CUR_VAL: u32 = 0;
/// `V4L2_CTRL_WHICH_REQUEST_VAL`: store the controls in the request `request_fd`.
pub const CTRL_WHICH_REQUEST_VAL: u32 = 0x0f01_0000;
/// `V4L2_CTRL_MAX_DIMS`.
pub const CTRL_MAX_DIMS: usize = 4;

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_query_ext_ctrl {
    pub id: u32,
    pub type_: u32,
    pub name: [u8; 32],
    pub minimum: i64,
    pub maximum: i64,
    pub step: u64,
    pub default_value: i64,
    pub flags: u32,
    pub elem_size: u32,
    pub elems: u32,
    pub nr_of_dims: u32,
    pub dims: [u32; CTRL_MAX_DIMS],
    pub reserved: [u32; 32],
}

// --- stateless H.264 (linux/v4l2-controls.h) ---------------------------------------------

/// `V4L2_H264_NUM_DPB_ENTRIES`.
pub const H264_NUM_DPB_ENTRIES: usize = 16;
/// `V4L2_H264_REF_LIST_LEN`.
pub const H264_REF_LIST_LEN: usize = 2 * H264_NUM_DPB_ENTRIES;

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct v4l2_ctrl_h264_sps {
    pub profile_idc: u8,
    pub constraint_set_flags: u8,
    pub level_idc: u8,
    pub seq_parameter_set_id: u8,
    pub chroma_format_idc: u8,
    pub bit_depth_luma_minus8: u8,
    pub bit_depth_chroma_minus8: u8,
    pub log2_max_frame_num_minus4: u8,
    pub pic_order_cnt_type: u8,
    pub log2_max_pic_order_cnt_lsb_minus4: u8,
    pub max_num_ref_frames: u8,
    pub num_ref_frames_in_pic_order_cnt_cycle: u8,
    pub offset_for_ref_frame: [i32; 255],
    pub offset_for_non_ref_pic: i32,
    pub offset_for_top_to_bottom_field: i32,
    pub pic_width_in_mbs_minus1: u16,
    pub pic_height_in_map_units_minus1: u16,
    pub flags: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct v4l2_ctrl_h264_pps {
    pub pic_parameter_set_id: u8,
    pub seq_parameter_set_id: u8,
    pub num_slice_groups_minus1: u8,
    pub num_ref_idx_l0_default_active_minus1: u8,
    pub num_ref_idx_l1_default_active_minus1: u8,
    pub weighted_bipred_idc: u8,
    pub pic_init_qp_minus26: i8,
    pub pic_init_qs_minus26: i8,
    pub chroma_qp_index_offset: i8,
    pub second_chroma_qp_index_offset: i8,
    pub flags: u16,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct v4l2_ctrl_h264_scaling_matrix {
    pub scaling_list_4x4: [[u8; 16]; 6],
    pub scaling_list_8x8: [[u8; 64]; 6],
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct v4l2_h264_weight_factors {
    pub luma_weight: [i16; 32],
    pub luma_offset: [i16; 32],
    pub chroma_weight: [[i16; 2]; 32],
    pub chroma_offset: [[i16; 2]; 32],
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct v4l2_ctrl_h264_pred_weights {
    pub luma_log2_weight_denom: u16,
    pub chroma_log2_weight_denom: u16,
    pub weight_factors: [v4l2_h264_weight_factors; 2],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct v4l2_h264_reference {
    pub fields: u8,
    pub index: u8,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct v4l2_ctrl_h264_slice_params {
    pub header_bit_size: u32,
    pub first_mb_in_slice: u32,
    pub slice_type: u8,
    pub colour_plane_id: u8,
    pub redundant_pic_cnt: u8,
    pub cabac_init_idc: u8,
    pub slice_qp_delta: i8,
    pub slice_qs_delta: i8,
    pub disable_deblocking_filter_idc: u8,
    pub slice_alpha_c0_offset_div2: i8,
    pub slice_beta_offset_div2: i8,
    pub num_ref_idx_l0_active_minus1: u8,
    pub num_ref_idx_l1_active_minus1: u8,
    pub reserved: u8,
    pub ref_pic_list0: [v4l2_h264_reference; H264_REF_LIST_LEN],
    pub ref_pic_list1: [v4l2_h264_reference; H264_REF_LIST_LEN],
    pub flags: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct v4l2_h264_dpb_entry {
    pub reference_ts: u64,
    pub pic_num: u32,
    pub frame_num: u16,
    pub fields: u8,
    pub reserved: [u8; 5],
    pub top_field_order_cnt: i32,
    pub bottom_field_order_cnt: i32,
    pub flags: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_ctrl_h264_decode_params {
    pub dpb: [v4l2_h264_dpb_entry; H264_NUM_DPB_ENTRIES],
    pub nal_ref_idc: u16,
    pub frame_num: u16,
    pub top_field_order_cnt: i32,
    pub bottom_field_order_cnt: i32,
    pub idr_pic_id: u16,
    pub pic_order_cnt_lsb: u16,
    pub delta_pic_order_cnt_bottom: i32,
    pub delta_pic_order_cnt0: i32,
    pub delta_pic_order_cnt1: i32,
    pub dec_ref_pic_marking_bit_size: u32,
    pub pic_order_cnt_bit_size: u32,
    pub slice_group_change_cycle: u32,
    pub reserved: u32,
    pub flags: u32,
}

// --- media controller (linux/media.h) ----------------------------------------------------

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct media_device_info {
    pub driver: [u8; 16],
    pub model: [u8; 32],
    pub serial: [u8; 40],
    pub bus_info: [u8; 32],
    pub media_version: u32,
    pub hw_revision: u32,
    pub driver_version: u32,
    pub reserved: [u32; 31],
}

impl Default for media_device_info {
    fn default() -> Self {
        media_device_info {
            driver: [0; 16],
            model: [0; 32],
            serial: [0; 40],
            bus_info: [0; 32],
            media_version: 0,
            hw_revision: 0,
            driver_version: 0,
            reserved: [0; 31],
        }
    }
}

#[repr(C, packed)]
#[derive(Debug, Clone, Copy, Default)]
pub struct media_v2_intf_devnode {
    pub major: u32,
    pub minor: u32,
}

/// `media_v2_interface`; the union holds `devnode` for device-node interfaces.
#[repr(C, packed)]
#[derive(Debug, Clone, Copy, Default)]
pub struct media_v2_interface {
    pub id: u32,
    pub intf_type: u32,
    pub flags: u32,
    pub reserved: [u32; 9],
    pub devnode: media_v2_intf_devnode,
    pub raw_rest: [u32; 14],
}

#[repr(C, packed)]
#[derive(Debug, Clone, Copy, Default)]
pub struct media_v2_topology {
    pub topology_version: u64,
    pub num_entities: u32,
    pub reserved1: u32,
    pub ptr_entities: u64,
    pub num_interfaces: u32,
    pub reserved2: u32,
    pub ptr_interfaces: u64,
    pub num_pads: u32,
    pub reserved3: u32,
    pub ptr_pads: u64,
    pub num_links: u32,
    pub reserved4: u32,
    pub ptr_links: u64,
}

/// `MEDIA_INTF_T_V4L_VIDEO`: a /dev/videoN interface.
pub const MEDIA_INTF_T_V4L_VIDEO: u32 = 0x0000_0200;
/// `MEDIA_INTF_T_V4L_SUBDEV`: a /dev/v4l-subdevN interface.
pub const MEDIA_INTF_T_V4L_SUBDEV: u32 = 0x0000_0203;

#[repr(C, packed)]
#[derive(Debug, Clone, Copy)]
pub struct media_v2_entity {
    pub id: u32,
    pub name: [u8; 64],
    pub function: u32,
    pub flags: u32,
    pub reserved: [u32; 5],
}

impl Default for media_v2_entity {
    fn default() -> Self {
        media_v2_entity { id: 0, name: [0; 64], function: 0, flags: 0, reserved: [0; 5] }
    }
}

#[repr(C, packed)]
#[derive(Debug, Clone, Copy, Default)]
pub struct media_v2_pad {
    pub id: u32,
    pub entity_id: u32,
    pub flags: u32,
    /// The pad's index in its entity (valid since media API 4.19, which every kernel we
    /// support has).
    pub index: u32,
    pub reserved: [u32; 4],
}

#[repr(C, packed)]
#[derive(Debug, Clone, Copy, Default)]
pub struct media_v2_link {
    pub id: u32,
    /// A pad id (data links) or an interface id (interface links).
    pub source_id: u32,
    /// A pad id (data links) or an entity id (interface links).
    pub sink_id: u32,
    pub flags: u32,
    pub reserved: [u32; 6],
}

pub const MEDIA_PAD_FL_SINK: u32 = 1 << 0;
pub const MEDIA_PAD_FL_SOURCE: u32 = 1 << 1;
pub const MEDIA_LNK_FL_ENABLED: u32 = 1 << 0;
pub const MEDIA_LNK_FL_IMMUTABLE: u32 = 1 << 1;
pub const MEDIA_LNK_FL_LINK_TYPE: u32 = 0xf << 28;
pub const MEDIA_LNK_FL_DATA_LINK: u32 = 0;
pub const MEDIA_LNK_FL_INTERFACE_LINK: u32 = 1 << 28;

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct media_pad_desc {
    pub entity: u32,
    pub index: u16,
    pub flags: u32,
    pub reserved: [u32; 2],
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct media_link_desc {
    pub source: media_pad_desc,
    pub sink: media_pad_desc,
    pub flags: u32,
    pub reserved: [u32; 2],
}

// --- subdevices (linux/v4l2-subdev.h, linux/v4l2-mediabus.h) ---------------------------

#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct v4l2_mbus_framefmt {
    pub width: u32,
    pub height: u32,
    pub code: u32,
    pub field: u32,
    pub colorspace: u32,
    pub ycbcr_enc: u16,
    pub quantization: u16,
    pub xfer_func: u16,
    pub flags: u16,
    pub reserved: [u16; 10],
}

/// `v4l2_subdev_format`. Newer headers name `reserved[0]` `stream` (stream 0, the only one
/// we use, is zero either way).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_subdev_format {
    pub which: u32,
    pub pad: u32,
    pub format: v4l2_mbus_framefmt,
    pub reserved: [u32; 8],
}

/// `v4l2_subdev_mbus_code_enum` (`reserved[0]` is `stream` in newer headers).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_subdev_mbus_code_enum {
    pub pad: u32,
    pub index: u32,
    pub code: u32,
    pub which: u32,
    pub flags: u32,
    pub reserved: [u32; 7],
}

/// `V4L2_SUBDEV_FORMAT_ACTIVE`: the format the hardware uses (not a TRY scratch one).
pub const SUBDEV_FORMAT_ACTIVE: u32 = 1;

// --- streaming parameters ---------------------------------------------------------------

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct v4l2_captureparm {
    pub capability: u32,
    pub capturemode: u32,
    pub timeperframe: v4l2_fract,
    pub extendedmode: u32,
    pub readbuffers: u32,
    pub reserved: [u32; 4],
}

/// `v4l2_streamparm`; the union holds `capture` for capture queues.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct v4l2_streamparm {
    pub type_: u32,
    pub parm: v4l2_streamparm_union,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union v4l2_streamparm_union {
    pub capture: v4l2_captureparm,
    pub raw_data: [u8; 200],
}

impl Default for v4l2_streamparm {
    fn default() -> Self {
        v4l2_streamparm { type_: 0, parm: v4l2_streamparm_union { raw_data: [0; 200] } }
    }
}

/// `V4L2_CAP_TIMEPERFRAME`: the driver takes a frame interval in `timeperframe`.
pub const CAP_TIMEPERFRAME: u32 = 0x1000;

/// (name, size, [(field, offset)]) for every struct, as the C probe prints them.
pub fn layout_table() -> Vec<(&'static str, usize, Vec<(&'static str, usize)>)> {
    vec![
        (
            "v4l2_capability",
            size_of::<v4l2_capability>(),
            vec![
                ("capabilities", offset_of!(v4l2_capability, capabilities)),
                ("device_caps", offset_of!(v4l2_capability, device_caps)),
            ],
        ),
        ("v4l2_fmtdesc", size_of::<v4l2_fmtdesc>(), vec![("pixelformat", offset_of!(v4l2_fmtdesc, pixelformat))]),
        ("v4l2_pix_format", size_of::<v4l2_pix_format>(), vec![("xfer_func", offset_of!(v4l2_pix_format, xfer_func))]),
        (
            "v4l2_pix_format_mplane",
            size_of::<v4l2_pix_format_mplane>(),
            vec![
                ("plane_fmt", offset_of!(v4l2_pix_format_mplane, plane_fmt)),
                ("num_planes", offset_of!(v4l2_pix_format_mplane, num_planes)),
            ],
        ),
        (
            "v4l2_plane_pix_format",
            size_of::<v4l2_plane_pix_format>(),
            vec![("bytesperline", offset_of!(v4l2_plane_pix_format, bytesperline))],
        ),
        ("v4l2_format", size_of::<v4l2_format>(), vec![("fmt", offset_of!(v4l2_format, fmt))]),
        (
            "v4l2_requestbuffers",
            size_of::<v4l2_requestbuffers>(),
            vec![("flags", offset_of!(v4l2_requestbuffers, flags))],
        ),
        (
            "v4l2_buffer",
            size_of::<v4l2_buffer>(),
            vec![
                ("timestamp", offset_of!(v4l2_buffer, timestamp)),
                ("timecode", offset_of!(v4l2_buffer, timecode)),
                ("sequence", offset_of!(v4l2_buffer, sequence)),
                ("memory", offset_of!(v4l2_buffer, memory)),
                ("m", offset_of!(v4l2_buffer, m)),
                ("length", offset_of!(v4l2_buffer, length)),
                ("request_fd", offset_of!(v4l2_buffer, request_fd)),
            ],
        ),
        (
            "v4l2_plane",
            size_of::<v4l2_plane>(),
            vec![("m", offset_of!(v4l2_plane, m)), ("data_offset", offset_of!(v4l2_plane, data_offset))],
        ),
        ("v4l2_frmsizeenum", size_of::<v4l2_frmsizeenum>(), vec![("reserved", offset_of!(v4l2_frmsizeenum, reserved))]),
        ("v4l2_frmivalenum", size_of::<v4l2_frmivalenum>(), vec![("reserved", offset_of!(v4l2_frmivalenum, reserved))]),
        (
            "v4l2_bt_timings",
            size_of::<v4l2_bt_timings>(),
            vec![
                ("pixelclock", offset_of!(v4l2_bt_timings, pixelclock)),
                ("picture_aspect", offset_of!(v4l2_bt_timings, picture_aspect)),
            ],
        ),
        ("v4l2_dv_timings", size_of::<v4l2_dv_timings>(), vec![("bt", offset_of!(v4l2_dv_timings, bt))]),
        ("v4l2_dv_timings_cap", size_of::<v4l2_dv_timings_cap>(), vec![("bt", offset_of!(v4l2_dv_timings_cap, bt))]),
        (
            "v4l2_enum_dv_timings",
            size_of::<v4l2_enum_dv_timings>(),
            vec![("timings", offset_of!(v4l2_enum_dv_timings, timings))],
        ),
        ("v4l2_edid", size_of::<v4l2_edid>(), vec![("edid", offset_of!(v4l2_edid, edid))]),
        (
            "v4l2_event_subscription",
            size_of::<v4l2_event_subscription>(),
            vec![("flags", offset_of!(v4l2_event_subscription, flags))],
        ),
        (
            "v4l2_event",
            size_of::<v4l2_event>(),
            vec![
                ("u", offset_of!(v4l2_event, u)),
                ("pending", offset_of!(v4l2_event, pending)),
                ("timestamp", offset_of!(v4l2_event, timestamp)),
                ("id", offset_of!(v4l2_event, id)),
            ],
        ),
        ("v4l2_control", size_of::<v4l2_control>(), vec![("value", offset_of!(v4l2_control, value))]),
        (
            "v4l2_input",
            size_of::<v4l2_input>(),
            vec![("std", offset_of!(v4l2_input, std)), ("status", offset_of!(v4l2_input, status))],
        ),
        (
            "v4l2_selection",
            size_of::<v4l2_selection>(),
            vec![
                ("target", offset_of!(v4l2_selection, target)),
                ("r", offset_of!(v4l2_selection, r)),
                ("reserved", offset_of!(v4l2_selection, reserved)),
            ],
        ),
        ("v4l2_querymenu", size_of::<v4l2_querymenu>(), vec![("reserved", offset_of!(v4l2_querymenu, reserved))]),
        (
            "v4l2_ext_control",
            size_of::<v4l2_ext_control>(),
            vec![("size", offset_of!(v4l2_ext_control, size)), ("value", offset_of!(v4l2_ext_control, value_or_ptr))],
        ),
        (
            "v4l2_ext_controls",
            size_of::<v4l2_ext_controls>(),
            vec![
                ("count", offset_of!(v4l2_ext_controls, count)),
                ("request_fd", offset_of!(v4l2_ext_controls, request_fd)),
                ("controls", offset_of!(v4l2_ext_controls, controls)),
            ],
        ),
        (
            "v4l2_query_ext_ctrl",
            size_of::<v4l2_query_ext_ctrl>(),
            vec![
                ("minimum", offset_of!(v4l2_query_ext_ctrl, minimum)),
                ("default_value", offset_of!(v4l2_query_ext_ctrl, default_value)),
                ("elems", offset_of!(v4l2_query_ext_ctrl, elems)),
                ("dims", offset_of!(v4l2_query_ext_ctrl, dims)),
            ],
        ),
        (
            "v4l2_ctrl_h264_sps",
            size_of::<v4l2_ctrl_h264_sps>(),
            vec![
                ("offset_for_ref_frame", offset_of!(v4l2_ctrl_h264_sps, offset_for_ref_frame)),
                ("offset_for_non_ref_pic", offset_of!(v4l2_ctrl_h264_sps, offset_for_non_ref_pic)),
                ("pic_width_in_mbs_minus1", offset_of!(v4l2_ctrl_h264_sps, pic_width_in_mbs_minus1)),
                ("flags", offset_of!(v4l2_ctrl_h264_sps, flags)),
            ],
        ),
        (
            "v4l2_ctrl_h264_pps",
            size_of::<v4l2_ctrl_h264_pps>(),
            vec![
                ("pic_init_qp_minus26", offset_of!(v4l2_ctrl_h264_pps, pic_init_qp_minus26)),
                ("flags", offset_of!(v4l2_ctrl_h264_pps, flags)),
            ],
        ),
        (
            "v4l2_ctrl_h264_scaling_matrix",
            size_of::<v4l2_ctrl_h264_scaling_matrix>(),
            vec![("scaling_list_8x8", offset_of!(v4l2_ctrl_h264_scaling_matrix, scaling_list_8x8))],
        ),
        (
            "v4l2_h264_weight_factors",
            size_of::<v4l2_h264_weight_factors>(),
            vec![
                ("chroma_weight", offset_of!(v4l2_h264_weight_factors, chroma_weight)),
                ("chroma_offset", offset_of!(v4l2_h264_weight_factors, chroma_offset)),
            ],
        ),
        (
            "v4l2_ctrl_h264_pred_weights",
            size_of::<v4l2_ctrl_h264_pred_weights>(),
            vec![("weight_factors", offset_of!(v4l2_ctrl_h264_pred_weights, weight_factors))],
        ),
        (
            "v4l2_ctrl_h264_slice_params",
            size_of::<v4l2_ctrl_h264_slice_params>(),
            vec![
                ("slice_type", offset_of!(v4l2_ctrl_h264_slice_params, slice_type)),
                ("num_ref_idx_l1_active_minus1", offset_of!(v4l2_ctrl_h264_slice_params, num_ref_idx_l1_active_minus1)),
                ("ref_pic_list0", offset_of!(v4l2_ctrl_h264_slice_params, ref_pic_list0)),
                ("ref_pic_list1", offset_of!(v4l2_ctrl_h264_slice_params, ref_pic_list1)),
                ("flags", offset_of!(v4l2_ctrl_h264_slice_params, flags)),
            ],
        ),
        (
            "v4l2_h264_dpb_entry",
            size_of::<v4l2_h264_dpb_entry>(),
            vec![
                ("pic_num", offset_of!(v4l2_h264_dpb_entry, pic_num)),
                ("fields", offset_of!(v4l2_h264_dpb_entry, fields)),
                ("top_field_order_cnt", offset_of!(v4l2_h264_dpb_entry, top_field_order_cnt)),
                ("flags", offset_of!(v4l2_h264_dpb_entry, flags)),
            ],
        ),
        (
            "v4l2_ctrl_h264_decode_params",
            size_of::<v4l2_ctrl_h264_decode_params>(),
            vec![
                ("nal_ref_idc", offset_of!(v4l2_ctrl_h264_decode_params, nal_ref_idc)),
                ("idr_pic_id", offset_of!(v4l2_ctrl_h264_decode_params, idr_pic_id)),
                (
                    "dec_ref_pic_marking_bit_size",
                    offset_of!(v4l2_ctrl_h264_decode_params, dec_ref_pic_marking_bit_size),
                ),
                ("flags", offset_of!(v4l2_ctrl_h264_decode_params, flags)),
            ],
        ),
        (
            "media_device_info",
            size_of::<media_device_info>(),
            vec![
                ("bus_info", offset_of!(media_device_info, bus_info)),
                ("media_version", offset_of!(media_device_info, media_version)),
            ],
        ),
        (
            "media_v2_interface",
            size_of::<media_v2_interface>(),
            vec![
                ("intf_type", offset_of!(media_v2_interface, intf_type)),
                ("devnode", offset_of!(media_v2_interface, devnode)),
            ],
        ),
        (
            "media_v2_topology",
            size_of::<media_v2_topology>(),
            vec![
                ("num_interfaces", offset_of!(media_v2_topology, num_interfaces)),
                ("ptr_interfaces", offset_of!(media_v2_topology, ptr_interfaces)),
                ("ptr_links", offset_of!(media_v2_topology, ptr_links)),
            ],
        ),
        (
            "media_v2_entity",
            size_of::<media_v2_entity>(),
            vec![("function", offset_of!(media_v2_entity, function)), ("flags", offset_of!(media_v2_entity, flags))],
        ),
        ("media_v2_pad", size_of::<media_v2_pad>(), vec![("index", offset_of!(media_v2_pad, index))]),
        ("media_v2_link", size_of::<media_v2_link>(), vec![("flags", offset_of!(media_v2_link, flags))]),
        (
            "media_pad_desc",
            size_of::<media_pad_desc>(),
            vec![("index", offset_of!(media_pad_desc, index)), ("flags", offset_of!(media_pad_desc, flags))],
        ),
        (
            "media_link_desc",
            size_of::<media_link_desc>(),
            vec![("sink", offset_of!(media_link_desc, sink)), ("flags", offset_of!(media_link_desc, flags))],
        ),
        (
            "v4l2_mbus_framefmt",
            size_of::<v4l2_mbus_framefmt>(),
            vec![
                ("ycbcr_enc", offset_of!(v4l2_mbus_framefmt, ycbcr_enc)),
                ("flags", offset_of!(v4l2_mbus_framefmt, flags)),
            ],
        ),
        (
            "v4l2_subdev_format",
            size_of::<v4l2_subdev_format>(),
            vec![
                ("format", offset_of!(v4l2_subdev_format, format)),
                ("reserved", offset_of!(v4l2_subdev_format, reserved)),
            ],
        ),
        (
            "v4l2_subdev_mbus_code_enum",
            size_of::<v4l2_subdev_mbus_code_enum>(),
            vec![("which", offset_of!(v4l2_subdev_mbus_code_enum, which))],
        ),
        (
            "v4l2_captureparm",
            size_of::<v4l2_captureparm>(),
            vec![("timeperframe", offset_of!(v4l2_captureparm, timeperframe))],
        ),
        ("v4l2_streamparm", size_of::<v4l2_streamparm>(), vec![("parm", offset_of!(v4l2_streamparm, parm))]),
    ]
}

// Compile-time pins (64-bit Linux). A mismatch fails the build on every target we ship.
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(size_of::<v4l2_capability>() == 104);
    assert!(size_of::<v4l2_fmtdesc>() == 64);
    assert!(size_of::<v4l2_pix_format>() == 48);
    assert!(size_of::<v4l2_plane_pix_format>() == 20);
    assert!(size_of::<v4l2_pix_format_mplane>() == 192);
    assert!(size_of::<v4l2_format>() == 208);
    assert!(offset_of!(v4l2_format, fmt) == 8);
    assert!(size_of::<v4l2_requestbuffers>() == 20);
    assert!(size_of::<v4l2_buffer>() == 88);
    assert!(offset_of!(v4l2_buffer, timestamp) == 24);
    assert!(offset_of!(v4l2_buffer, m) == 64);
    assert!(size_of::<v4l2_plane>() == 64);
    assert!(size_of::<v4l2_frmsizeenum>() == 44);
    assert!(size_of::<v4l2_frmivalenum>() == 52);
    assert!(size_of::<v4l2_bt_timings>() == 124);
    assert!(size_of::<v4l2_dv_timings>() == 132);
    assert!(size_of::<v4l2_dv_timings_cap>() == 144);
    assert!(size_of::<v4l2_enum_dv_timings>() == 148);
    assert!(size_of::<v4l2_edid>() == 40);
    assert!(size_of::<v4l2_event_subscription>() == 32);
    assert!(size_of::<v4l2_event>() == 136);
    assert!(offset_of!(v4l2_event, u) == 8);
    assert!(size_of::<v4l2_control>() == 8);
    assert!(size_of::<v4l2_input>() == 80);
    assert!(size_of::<v4l2_queryctrl>() == 68);
    assert!(size_of::<v4l2_selection>() == 64);
    assert!(size_of::<v4l2_querymenu>() == 44);
    assert!(size_of::<v4l2_ext_control>() == 20);
    assert!(size_of::<v4l2_ext_controls>() == 32);
    assert!(size_of::<v4l2_query_ext_ctrl>() == 232);
    assert!(size_of::<v4l2_ctrl_h264_sps>() == 1048);
    assert!(size_of::<v4l2_ctrl_h264_pps>() == 12);
    assert!(size_of::<v4l2_ctrl_h264_scaling_matrix>() == 480);
    assert!(size_of::<v4l2_ctrl_h264_pred_weights>() == 772);
    assert!(size_of::<v4l2_ctrl_h264_slice_params>() == 152);
    assert!(size_of::<v4l2_h264_dpb_entry>() == 32);
    assert!(size_of::<v4l2_ctrl_h264_decode_params>() == 560);
    assert!(size_of::<media_device_info>() == 256);
    assert!(size_of::<media_v2_interface>() == 112);
    assert!(size_of::<media_v2_topology>() == 72);
    assert!(size_of::<media_v2_entity>() == 96);
    assert!(size_of::<media_v2_pad>() == 32);
    assert!(size_of::<media_v2_link>() == 40);
    assert!(size_of::<media_pad_desc>() == 20);
    assert!(size_of::<media_link_desc>() == 52);
    assert!(size_of::<v4l2_mbus_framefmt>() == 48);
    assert!(size_of::<v4l2_subdev_format>() == 88);
    assert!(size_of::<v4l2_subdev_mbus_code_enum>() == 48);
    assert!(size_of::<v4l2_streamparm>() == 204);
};

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;
    use std::process::Command;

    use super::layout_table;

    /// A C program printing `name size` and `name.field offset` for every struct we mirror.
    fn probe_source() -> String {
        let mut c =
            String::from(
            "#include <stdio.h>\n#include <stddef.h>\n#include <linux/videodev2.h>\n#include <linux/media.h>\n#include <linux/v4l2-subdev.h>\nint main(void) {\n",
        );
        for (name, _, fields) in layout_table() {
            c += &format!("  printf(\"{name} %zu\\n\", sizeof(struct {name}));\n");
            for (field, _) in fields {
                c += &format!("  printf(\"{name}.{field} %zu\\n\", offsetof(struct {name}, {field}));\n");
            }
        }
        c + "  return 0;\n}\n"
    }

    fn expected() -> HashMap<String, usize> {
        let mut m = HashMap::new();
        for (name, size, fields) in layout_table() {
            m.insert(name.to_string(), size);
            for (field, off) in fields {
                m.insert(format!("{name}.{field}"), off);
            }
        }
        m
    }

    /// Compiles the probe with `cc`, runs it (through `runner` when cross-compiled), and
    /// returns its numbers.
    fn probe(dir: &Path, cc: &str, runner: Option<&str>) -> Result<HashMap<String, usize>, String> {
        let src = dir.join("probe.c");
        let exe = dir.join(format!("probe-{cc}"));
        std::fs::write(&src, probe_source()).map_err(|e| e.to_string())?;
        let out =
            Command::new(cc).arg("-static").arg("-o").arg(&exe).arg(&src).output().map_err(|e| format!("{cc}: {e}"))?;
        if !out.status.success() {
            return Err(format!("{cc} failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let run = match runner {
            Some(r) => Command::new(r).arg(&exe).output(),
            None => Command::new(&exe).output(),
        }
        .map_err(|e| format!("run probe: {e}"))?;
        let text = String::from_utf8_lossy(&run.stdout).into_owned();
        Ok(text
            .lines()
            .filter_map(|l| l.split_once(' ').and_then(|(k, v)| v.parse().ok().map(|v| (k.to_string(), v))))
            .collect())
    }

    fn tool(name: &str) -> bool {
        Command::new("sh").arg("-c").arg(format!("command -v {name}")).output().is_ok_and(|o| o.status.success())
    }

    #[test]
    fn layout_matches_c() {
        let dir = tempfile::tempdir().unwrap();
        let want = expected();
        let host = probe(dir.path(), "cc", None).expect("the host C compiler and linux/videodev2.h are needed");
        assert_eq!(host, want, "x86_64/host layout differs from linux/videodev2.h");
        // aarch64, the boards' architecture: required when the suite runs from tests/run
        // (which installs the cross tools), reported otherwise.
        let cross = tool("aarch64-linux-gnu-gcc") && (tool("qemu-aarch64-static") || tool("qemu-aarch64"));
        if !cross {
            assert!(
                std::env::var_os("TETHER_REQUIRE_TOOLS").is_none(),
                "aarch64 layout check needs gcc-aarch64-linux-gnu and qemu-user-static"
            );
            eprintln!("NOTICE: aarch64 layout check not run: install gcc-aarch64-linux-gnu and qemu-user-static");
            return;
        }
        let runner = if tool("qemu-aarch64-static") { "qemu-aarch64-static" } else { "qemu-aarch64" };
        let arm = probe(dir.path(), "aarch64-linux-gnu-gcc", Some(runner)).unwrap();
        assert_eq!(arm, want, "aarch64 layout differs from linux/videodev2.h");
    }
}
