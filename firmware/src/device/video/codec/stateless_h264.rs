//! Stateless hardware H.264 decoding through the V4L2 request API: what Debian's kernels
//! offer (`rkvdec` on RK3399; `hantro`, `cedrus` on other SoCs; `visl` in the lab). The
//! hardware decodes slices; everything a stateful decoder does itself is done here: the
//! stream's SPS/PPS/slice headers become `V4L2_CID_STATELESS_H264_*` controls, and the
//! DPB, picture order counts and reference lists come from [`super::h264_dpb`].
//!
//! One picture at a time: its slices go in one request (frame-based drivers) or one
//! request each, holding the CAPTURE buffer until the last (slice-based drivers). A
//! CAPTURE buffer that holds a reference picture stays out of the queue until the DPB
//! lets it go. Any error drops the DPB and waits for the next IDR.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::annexb::{nal_units, NAL_IDR, NAL_SLICE};
use super::h264_decode::DecoderError;
use super::h264_dpb::{CurrentPicture, Dpb};
use super::h264_syntax::{Pps, ScalingList, SliceHeader, SliceType, Sps, StreamHeaders};
use crate::device::video::convert::{i420_to_rgb, nv12_padded_to_rgb};
use crate::device::video::v4l2::raw::*;
use crate::device::video::v4l2::{
    media_device_for, BufType, BufferPlanes, Dequeued, ExtControl, FourCc, MediaDevice, PixFormat, Request, V4l2Device,
    V4l2Error, BUF_CAP_SUPPORTS_M2M_HOLD_CAPTURE_BUF, BUF_CAP_SUPPORTS_REQUESTS, CAP_VIDEO_M2M, CAP_VIDEO_M2M_MPLANE,
};

/// `V4L2_PIX_FMT_H264_SLICE`: parsed H.264 slices.
pub const S264: FourCc = FourCc::new(b"S264");
/// `V4L2_PIX_FMT_YUV420`.
const YU12: FourCc = FourCc::new(b"YU12");

/// `V4L2_CID_STATELESS_H264_*` (linux/v4l2-controls.h).
pub mod cid {
    const BASE: u32 = 0x00a4_0900;
    /// Menu: slice- or frame-based.
    pub const DECODE_MODE: u32 = BASE;
    /// Menu: slices with or without Annex B start codes.
    pub const START_CODE: u32 = BASE + 1;
    /// `v4l2_ctrl_h264_sps`.
    pub const SPS: u32 = BASE + 2;
    /// `v4l2_ctrl_h264_pps`.
    pub const PPS: u32 = BASE + 3;
    /// `v4l2_ctrl_h264_scaling_matrix`.
    pub const SCALING_MATRIX: u32 = BASE + 4;
    /// `v4l2_ctrl_h264_pred_weights`.
    pub const PRED_WEIGHTS: u32 = BASE + 5;
    /// `v4l2_ctrl_h264_slice_params`.
    pub const SLICE_PARAMS: u32 = BASE + 6;
    /// `v4l2_ctrl_h264_decode_params`.
    pub const DECODE_PARAMS: u32 = BASE + 7;
}

/// How long one request may take before the decoder is declared stuck.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// OUTPUT buffers: pictures go one at a time, so two suffice (one in flight, one filling).
const OUTPUT_BUFFERS: u32 = 2;
/// OUTPUT buffer size floor: a 1080p intra picture of a capture device fits easily.
const MIN_BITSTREAM_BYTES: u32 = 2 << 20;

/// How the driver wants slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeMode {
    /// One request per slice, with `SLICE_PARAMS` and `PRED_WEIGHTS` (cedrus).
    SliceBased,
    /// One request per picture with all its slices (rkvdec, hantro).
    FrameBased,
}

impl DecodeMode {
    fn menu_value(self) -> i32 {
        match self {
            DecodeMode::SliceBased => 0,
            DecodeMode::FrameBased => 1,
        }
    }
}

/// The first stateless H.264 decoder node (an M2M node taking `S264` with a media
/// controller), if the board has one.
pub fn find_stateless_h264() -> Option<PathBuf> {
    let mut nodes: Vec<_> = std::fs::read_dir("/dev").ok()?.flatten().map(|e| e.path()).collect();
    nodes.sort();
    nodes.into_iter().find(|p| {
        p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("video"))
            && V4l2Device::open(p).is_ok_and(|d| {
                queue_types(&d).is_some_and(|(out, _)| d.formats(out).is_ok_and(|f| f.iter().any(|f| f.fourcc == S264)))
            })
            && media_device_for(p).is_some()
    })
}

fn queue_types(dev: &V4l2Device) -> Option<(BufType, BufType)> {
    let caps = dev.querycap().ok()?.device_caps;
    if caps & (CAP_VIDEO_M2M | CAP_VIDEO_M2M_MPLANE) == 0 {
        return None;
    }
    Some((BufType::output_for(caps)?, BufType::capture_for(caps)?))
}

fn hw(e: V4l2Error) -> DecoderError {
    DecoderError::Hardware(e.to_string())
}

/// Buffers and formats for one coded size.
#[derive(Debug)]
struct Session {
    coded: (u32, u32),
    capture_format: PixFormat,
    output: Vec<BufferPlanes>,
    capture: Vec<BufferPlanes>,
    /// CAPTURE buffers we hold (dequeued, still referenced or being read).
    held: Vec<u32>,
    request: Request,
}

/// A stateless H.264 decoder for one stream (Annex B access units in decoding order).
#[derive(Debug)]
pub struct StatelessH264 {
    dev: V4l2Device,
    media: MediaDevice,
    out_kind: BufType,
    cap_kind: BufType,
    mode: DecodeMode,
    annex_b: bool,
    driver: String,
    headers: StreamHeaders,
    dpb: Dpb,
    session: Option<Session>,
    /// Pictures sent so far: the source of unique timestamps.
    pictures: u64,
    need_idr: bool,
}

impl StatelessH264 {
    /// A decoder on `node`, in the mode the driver prefers (frame-based when it offers
    /// both) or in `mode` when given and offered.
    pub fn new(node: &Path, mode: Option<DecodeMode>) -> Result<StatelessH264, DecoderError> {
        let dev = V4l2Device::open(node).map_err(hw)?;
        let (out_kind, cap_kind) = queue_types(&dev).ok_or_else(|| {
            DecoderError::Hardware(format!("{} is not a memory-to-memory codec node", node.display()))
        })?;
        if !dev.formats(out_kind).map_err(hw)?.iter().any(|f| f.fourcc == S264) {
            return Err(DecoderError::Hardware(format!("{} does not take H.264 slices (S264)", node.display())));
        }
        let media = media_device_for(node).ok_or_else(|| {
            DecoderError::Hardware(format!("{} has no media controller for requests", node.display()))
        })?;
        let driver = media.info().map(|i| i.driver).unwrap_or_else(|_| "unknown".into());
        let menu = |id| dev.query_ext_control(id).map_err(hw);
        let modes = menu(cid::DECODE_MODE)?
            .ok_or_else(|| DecoderError::Hardware("the driver has no H.264 DECODE_MODE control".into()))?;
        let offers = |m: DecodeMode| (modes.minimum..=modes.maximum).contains(&i64::from(m.menu_value()));
        let mode = match mode {
            Some(m) if offers(m) => m,
            Some(m) => return Err(DecoderError::Hardware(format!("the driver does not offer {m:?} decoding"))),
            None if offers(DecodeMode::FrameBased) => DecodeMode::FrameBased,
            None => DecodeMode::SliceBased,
        };
        // Start codes: kept when the driver takes them (fewer copies), stripped otherwise.
        let annex_b = menu(cid::START_CODE)?.is_some_and(|c| c.maximum >= 1);
        let mut controls = vec![ExtControl::value(cid::DECODE_MODE, mode.menu_value())];
        if menu(cid::START_CODE)?.is_some() {
            controls.push(ExtControl::value(cid::START_CODE, i32::from(annex_b)));
        }
        dev.set_ext_controls(None, &controls).map_err(hw)?;
        tracing::debug!(node = %node.display(), %driver, ?mode, annex_b, "stateless H.264 decoder ready");
        Ok(StatelessH264 {
            dev,
            media,
            out_kind,
            cap_kind,
            mode,
            annex_b,
            driver,
            headers: StreamHeaders::default(),
            dpb: Dpb::new(),
            session: None,
            pictures: 0,
            need_idr: true,
        })
    }

    /// What runs, for `status` and logs: e.g. `rkvdec (frame-based)`.
    pub fn describe(&self) -> String {
        let mode = match self.mode {
            DecodeMode::FrameBased => "frame-based",
            DecodeMode::SliceBased => "slice-based",
        };
        format!("{} ({mode})", self.driver)
    }

    /// The decode mode in use.
    pub fn mode(&self) -> DecodeMode {
        self.mode
    }

    /// Decodes one access unit; the picture as RGB24 (cropped to the SPS's visible size)
    /// when `want`, `None` while waiting for an IDR or when not wanted. After an error the
    /// decoder drops its references and resumes at the next IDR.
    pub fn decode(&mut self, access_unit: &[u8], want: bool) -> Result<Option<(u32, u32, Vec<u8>)>, DecoderError> {
        match self.decode_inner(access_unit, want) {
            Ok(p) => Ok(p),
            Err(e) => {
                self.resync();
                Err(e)
            }
        }
    }

    fn resync(&mut self) {
        self.need_idr = true;
        self.dpb.clear();
        if let Some(s) = self.session.as_mut() {
            for index in std::mem::take(&mut s.held) {
                if let Err(e) = self.dev.queue(self.cap_kind, index, &[]) {
                    tracing::debug!(error = %e, "requeue after a decoder error");
                }
            }
            let _ = s.request.reinit();
        }
    }

    fn decode_inner(&mut self, au: &[u8], want: bool) -> Result<Option<(u32, u32, Vec<u8>)>, DecoderError> {
        let mut slices: Vec<(&[u8], SliceHeader)> = Vec::new();
        for nal in nal_units(au) {
            let slice = nal.kind == NAL_SLICE || nal.kind == NAL_IDR;
            if slice && self.need_idr && nal.kind != NAL_IDR {
                return Ok(None); // nothing to refer to until an IDR
            }
            match self.headers.accept(nal.bytes) {
                Ok(Some(h)) => slices.push((nal.bytes, h)),
                Ok(None) => {}
                Err(e) => return Err(DecoderError::Hardware(format!("bad H.264 stream: {e}"))),
            }
        }
        let Some((_, first)) = slices.first() else { return Ok(None) };
        let first = first.clone();
        let pps = self.headers.pps.get(&first.pic_parameter_set_id).cloned();
        let sps = pps.as_ref().and_then(|p| self.headers.sps.get(&p.seq_parameter_set_id)).cloned();
        let (Some(pps), Some(sps)) = (pps, sps) else {
            return Err(DecoderError::Hardware("a slice before its parameter sets".into()));
        };
        let coded = ((sps.pic_width_in_mbs_minus1 + 1) * 16, (sps.pic_height_in_map_units_minus1 + 1) * 16);
        if self.session.as_ref().is_none_or(|s| s.coded != coded) {
            self.configure(coded, &sps)?;
        }
        let cur = self.dpb.begin(&sps, &first).map_err(|e| DecoderError::Hardware(e.to_string()))?;
        self.pictures += 1;
        let timestamp_ns = self.pictures * 1000;
        let sps_ctrl = sps_control(&sps);
        let pps_ctrl = pps_control(&sps, &pps);
        let scaling = scaling_matrix(&sps, &pps);
        let decode_params = decode_params(&self.dpb, &first, &cur);
        // What every request of this picture carries; slice-based requests add their slice's.
        let mut picture_controls = vec![
            ExtControl::compound(cid::SPS, &sps_ctrl),
            ExtControl::compound(cid::PPS, &pps_ctrl),
            ExtControl::compound(cid::DECODE_PARAMS, &decode_params),
        ];
        if let Some(m) = &scaling {
            picture_controls.push(ExtControl::compound(cid::SCALING_MATRIX, m));
        }
        let annex_b = self.annex_b;
        let bitstream = |nals: &[&[u8]]| {
            let mut data = Vec::with_capacity(nals.iter().map(|n| n.len() + 3).sum());
            for nal in nals {
                if annex_b {
                    data.extend_from_slice(&[0, 0, 1]);
                }
                data.extend_from_slice(nal);
            }
            data
        };
        match self.mode {
            DecodeMode::FrameBased => {
                let nals: Vec<&[u8]> = slices.iter().map(|(nal, _)| *nal).collect();
                self.run_request(&bitstream(&nals), &picture_controls, timestamp_ns, false)?;
            }
            DecodeMode::SliceBased => {
                for (k, (nal, h)) in slices.iter().enumerate() {
                    let lists = self.dpb.ref_lists(&sps, h, &cur).map_err(|e| DecoderError::Hardware(e.to_string()))?;
                    let slice = slice_params(h, &lists);
                    let weights = pred_weights(h);
                    let data = bitstream(&[nal]);
                    let mut controls = picture_controls.clone();
                    controls.push(ExtControl::compound(cid::SLICE_PARAMS, &slice));
                    if let Some(w) = &weights {
                        controls.push(ExtControl::compound(cid::PRED_WEIGHTS, w));
                    }
                    self.run_request(&data, &controls, timestamp_ns, k + 1 < slices.len())?;
                }
            }
        }
        let (index, error) = self.dequeue_picture()?;
        let Some(session) = self.session.as_mut() else {
            return Err(DecoderError::Hardware("decoder session vanished".into()));
        };
        session.held.push(index);
        if error {
            return Err(DecoderError::Hardware("the decoder flagged the picture as corrupt".into()));
        }
        let picture = if want { Some(picture(session, index, &sps)?) } else { None };
        let released = self
            .dpb
            .finish(&sps, &first, cur, timestamp_ns, index)
            .map_err(|e| DecoderError::Hardware(e.to_string()))?;
        let referenced = first.nal_ref_idc != 0;
        let requeue: Vec<u32> = released.into_iter().chain((!referenced).then_some(index)).collect();
        session.held.retain(|b| !requeue.contains(b));
        for b in requeue {
            self.dev.queue(self.cap_kind, b, &[]).map_err(hw)?;
        }
        self.need_idr = false;
        Ok(picture)
    }

    /// (Re)starts both queues for a new coded size.
    fn configure(&mut self, coded: (u32, u32), sps: &Sps) -> Result<(), DecoderError> {
        if let Some(old) = self.session.take() {
            drop(old.output);
            drop(old.capture);
            let _ = self.dev.stream(self.out_kind, false);
            let _ = self.dev.stream(self.cap_kind, false);
            self.dev.request_buffers(self.out_kind, 0).map_err(hw)?;
            self.dev.request_buffers(self.cap_kind, 0).map_err(hw)?;
            self.dpb.clear();
        }
        let (w, h) = coded;
        let mut want = PixFormat::new(w, h, S264);
        want.size_image = (w * h * 3 / 2).max(MIN_BITSTREAM_BYTES);
        let got = self.dev.set_format(self.out_kind, &want).map_err(hw)?;
        if got.fourcc != S264 {
            return Err(DecoderError::Hardware(format!("the decoder took {} instead of S264", got.fourcc)));
        }
        let capture_format = [FourCc::NV12, YU12]
            .into_iter()
            .find_map(|f| self.dev.set_format(self.cap_kind, &PixFormat::new(w, h, f)).ok().filter(|g| g.fourcc == f))
            .ok_or_else(|| DecoderError::Hardware("the decoder gives neither NV12 nor YU12".into()))?;
        if capture_format.width < w || capture_format.height < h {
            return Err(DecoderError::Hardware(format!(
                "the decoder's pictures are {}x{}, smaller than the stream's {w}x{h}",
                capture_format.width, capture_format.height
            )));
        }
        let (n_out, caps) = self.dev.request_buffers_caps(self.out_kind, OUTPUT_BUFFERS).map_err(hw)?;
        if caps & BUF_CAP_SUPPORTS_REQUESTS == 0 {
            return Err(DecoderError::Hardware("the OUTPUT queue does not support requests".into()));
        }
        if self.mode == DecodeMode::SliceBased && caps & BUF_CAP_SUPPORTS_M2M_HOLD_CAPTURE_BUF == 0 {
            tracing::debug!("slice-based decoder without HOLD_CAPTURE_BUF: multi-slice pictures will not decode");
        }
        // Every reference the stream may keep, the picture being decoded and one spare.
        let n_cap = (sps.max_num_ref_frames + 2).clamp(4, nz(H264_NUM_DPB_ENTRIES) + 2);
        let n_cap = self.dev.request_buffers(self.cap_kind, n_cap).map_err(hw)?;
        let output =
            (0..n_out).map(|i| self.dev.map_buffer(self.out_kind, i)).collect::<Result<Vec<_>, _>>().map_err(hw)?;
        let capture =
            (0..n_cap).map(|i| self.dev.map_buffer(self.cap_kind, i)).collect::<Result<Vec<_>, _>>().map_err(hw)?;
        if output.is_empty() || capture.len() < 2 {
            return Err(DecoderError::Hardware("the decoder gave too few buffers".into()));
        }
        for i in 0..n_cap {
            self.dev.queue(self.cap_kind, i, &[]).map_err(hw)?;
        }
        self.dev.stream(self.out_kind, true).map_err(hw)?;
        self.dev.stream(self.cap_kind, true).map_err(hw)?;
        let request = self.media.alloc_request().map_err(hw)?;
        tracing::info!(
            width = w,
            height = h,
            format = %capture_format.fourcc,
            capture_buffers = n_cap,
            decoder = %self.describe(),
            "stateless H.264 decoding started"
        );
        self.session = Some(Session { coded, capture_format, output, capture, held: Vec::new(), request });
        Ok(())
    }

    /// Sends one request: `data` in OUTPUT buffer 0 with `controls`, and waits for it.
    fn run_request(
        &mut self,
        data: &[u8],
        controls: &[ExtControl<'_>],
        timestamp_ns: u64,
        hold_capture: bool,
    ) -> Result<(), DecoderError> {
        let session = self.session.as_mut().ok_or_else(|| DecoderError::Hardware("no decoder session".into()))?;
        let buf = session.output[0].first_mut().as_mut_slice();
        if data.len() > buf.len() {
            return Err(DecoderError::Hardware(format!(
                "a {}-byte picture does not fit the {}-byte bitstream buffer",
                data.len(),
                buf.len()
            )));
        }
        buf[..data.len()].copy_from_slice(data);
        let used = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let req = &session.request;
        self.dev.set_ext_controls(Some(req), controls).map_err(hw)?;
        self.dev.queue_in_request(self.out_kind, 0, used, req, timestamp_ns, hold_capture).map_err(hw)?;
        req.queue().map_err(hw)?;
        let ms = i32::try_from(REQUEST_TIMEOUT.as_millis()).unwrap_or(i32::MAX);
        if !req.wait(ms).map_err(hw)? {
            return Err(DecoderError::Hardware(format!("the decoder did not finish a request in {REQUEST_TIMEOUT:?}")));
        }
        // The OUTPUT buffer is done with the request.
        let deadline = std::time::Instant::now() + REQUEST_TIMEOUT;
        loop {
            match self.dev.dequeue(self.out_kind).map_err(hw)? {
                Dequeued::Buffer { .. } => break,
                Dequeued::NotReady if std::time::Instant::now() < deadline => {
                    self.dev.wait(50).map_err(hw)?;
                }
                Dequeued::NotReady => {
                    return Err(DecoderError::Hardware("the bitstream buffer did not come back".into()));
                }
            }
        }
        req.reinit().map_err(hw)?;
        Ok(())
    }

    /// The CAPTURE buffer the picture went to: (index, flagged as an error).
    fn dequeue_picture(&mut self) -> Result<(u32, bool), DecoderError> {
        let deadline = std::time::Instant::now() + REQUEST_TIMEOUT;
        loop {
            match self.dev.dequeue(self.cap_kind).map_err(hw)? {
                Dequeued::Buffer { index, error, .. } => return Ok((index, error)),
                Dequeued::NotReady if std::time::Instant::now() < deadline => {
                    self.dev.wait(50).map_err(hw)?;
                }
                Dequeued::NotReady => return Err(DecoderError::Hardware("no decoded picture came back".into())),
            }
        }
    }
}

impl Drop for StatelessH264 {
    fn drop(&mut self) {
        let _ = self.dev.stream(self.out_kind, false);
        let _ = self.dev.stream(self.cap_kind, false);
    }
}

/// The visible picture of CAPTURE buffer `index` as RGB24.
fn picture(session: &Session, index: u32, sps: &Sps) -> Result<(u32, u32, Vec<u8>), DecoderError> {
    let planes = session
        .capture
        .get(index as usize)
        .ok_or_else(|| DecoderError::Hardware(format!("the decoder returned buffer {index}")))?;
    let bytes: Vec<u8> = planes.planes().iter().flat_map(|p| p.as_slice().iter().copied()).collect();
    let f = &session.capture_format;
    let (w, h) = sps.size().ok_or_else(|| DecoderError::Hardware("the SPS crops the whole picture".into()))?;
    let (w, h) = (w.min(f.width), h.min(f.height));
    let rgb = if f.fourcc == FourCc::NV12 {
        nv12_padded_to_rgb(&bytes, w as usize, h as usize, f.bytes_per_line as usize, f.height as usize)
    } else {
        i420_to_rgb(&bytes, w as usize, h as usize, f.bytes_per_line as usize, f.height as usize)
    }
    .map_err(|e| DecoderError::Hardware(e.to_string()))?;
    Ok((w, h, rgb))
}

/// `v4l2_ctrl_h264_sps` from a parsed SPS.
pub fn sps_control(s: &Sps) -> v4l2_ctrl_h264_sps {
    let mut offsets = [0i32; 255];
    for (o, v) in offsets.iter_mut().zip(&s.offset_for_ref_frame) {
        *o = *v;
    }
    // constraint_set0..5 are sent high bit first; V4L2 numbers them from bit 0.
    let constraint_set_flags = (0..6).fold(0u8, |acc, i| acc | (((s.constraint_flags >> (7 - i)) & 1) << i));
    let flag = |b: bool, f: u32| if b { f } else { 0 };
    v4l2_ctrl_h264_sps {
        profile_idc: s.profile_idc,
        constraint_set_flags,
        level_idc: s.level_idc,
        seq_parameter_set_id: n8(s.seq_parameter_set_id),
        chroma_format_idc: n8(s.chroma_format_idc),
        bit_depth_luma_minus8: n8(s.bit_depth_luma_minus8),
        bit_depth_chroma_minus8: n8(s.bit_depth_chroma_minus8),
        log2_max_frame_num_minus4: n8(s.log2_max_frame_num_minus4),
        pic_order_cnt_type: n8(s.pic_order_cnt_type),
        log2_max_pic_order_cnt_lsb_minus4: n8(s.log2_max_pic_order_cnt_lsb_minus4),
        max_num_ref_frames: n8(s.max_num_ref_frames),
        num_ref_frames_in_pic_order_cnt_cycle: u8::try_from(s.offset_for_ref_frame.len()).unwrap_or(u8::MAX),
        offset_for_ref_frame: offsets,
        offset_for_non_ref_pic: s.offset_for_non_ref_pic,
        offset_for_top_to_bottom_field: s.offset_for_top_to_bottom_field,
        pic_width_in_mbs_minus1: n16(s.pic_width_in_mbs_minus1),
        pic_height_in_map_units_minus1: n16(s.pic_height_in_map_units_minus1),
        flags: flag(s.separate_colour_plane_flag, 0x01)
            | flag(s.qpprime_y_zero_transform_bypass_flag, 0x02)
            | flag(s.delta_pic_order_always_zero_flag, 0x04)
            | flag(s.gaps_in_frame_num_value_allowed_flag, 0x08)
            | flag(s.frame_mbs_only_flag, 0x10)
            | flag(s.mb_adaptive_frame_field_flag, 0x20)
            | flag(s.direct_8x8_inference_flag, 0x40),
    }
}

/// `v4l2_ctrl_h264_pps` from a parsed PPS (and its SPS, for the scaling matrix flag).
pub fn pps_control(s: &Sps, p: &Pps) -> v4l2_ctrl_h264_pps {
    let flag = |b: bool, f: u16| if b { f } else { 0 };
    v4l2_ctrl_h264_pps {
        pic_parameter_set_id: n8(p.pic_parameter_set_id),
        seq_parameter_set_id: n8(p.seq_parameter_set_id),
        num_slice_groups_minus1: 0,
        num_ref_idx_l0_default_active_minus1: n8(p.num_ref_idx_l0_default_active_minus1),
        num_ref_idx_l1_default_active_minus1: n8(p.num_ref_idx_l1_default_active_minus1),
        weighted_bipred_idc: n8(p.weighted_bipred_idc),
        pic_init_qp_minus26: s8(p.pic_init_qp_minus26),
        pic_init_qs_minus26: s8(p.pic_init_qs_minus26),
        chroma_qp_index_offset: s8(p.chroma_qp_index_offset),
        second_chroma_qp_index_offset: s8(p.second_chroma_qp_index_offset),
        flags: flag(p.entropy_coding_mode_flag, 0x01)
            | flag(p.bottom_field_pic_order_in_frame_present_flag, 0x02)
            | flag(p.weighted_pred_flag, 0x04)
            | flag(p.deblocking_filter_control_present_flag, 0x08)
            | flag(p.constrained_intra_pred_flag, 0x10)
            | flag(p.redundant_pic_cnt_present_flag, 0x20)
            | flag(p.transform_8x8_mode_flag, 0x40)
            | flag(s.seq_scaling_matrix_present_flag || p.pic_scaling_matrix_present_flag, 0x80),
    }
}

const DEFAULT_4X4_INTRA: [u8; 16] = [6, 13, 13, 20, 20, 20, 28, 28, 28, 28, 32, 32, 32, 37, 37, 42];
const DEFAULT_4X4_INTER: [u8; 16] = [10, 14, 14, 20, 20, 20, 24, 24, 24, 24, 27, 27, 27, 30, 30, 34];
const DEFAULT_8X8_INTRA: [u8; 64] = [
    6, 10, 10, 13, 11, 13, 16, 16, 16, 16, 18, 18, 18, 18, 18, 23, 23, 23, 23, 23, 23, 25, 25, 25, 25, 25, 25, 25, 27,
    27, 27, 27, 27, 27, 27, 27, 29, 29, 29, 29, 29, 29, 29, 31, 31, 31, 31, 31, 31, 33, 33, 33, 33, 33, 36, 36, 36, 36,
    38, 38, 38, 40, 40, 42,
];
const DEFAULT_8X8_INTER: [u8; 64] = [
    9, 13, 13, 15, 13, 15, 17, 17, 17, 17, 19, 19, 19, 19, 19, 21, 21, 21, 21, 21, 21, 22, 22, 22, 22, 22, 22, 22, 24,
    24, 24, 24, 24, 24, 24, 24, 25, 25, 25, 25, 25, 25, 25, 27, 27, 27, 27, 27, 27, 28, 28, 28, 28, 28, 30, 30, 30, 30,
    32, 32, 32, 33, 33, 35,
];
/// Zig-zag scan position → raster position (frame scans, 8.5.6).
const ZIGZAG_4X4: [usize; 16] = [0, 1, 4, 8, 5, 2, 3, 6, 9, 12, 13, 10, 7, 11, 14, 15];
const ZIGZAG_8X8: [usize; 64] = [
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6, 7, 14, 21,
    28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54,
    47, 55, 62, 63,
];

/// The 12 lists (6 of 16, 6 of 64, zig-zag order) after fall-back rule A (`fallback` =
/// None: the SPS) or B (the SPS's resolved lists).
fn resolve_lists(sent: &[ScalingList], fallback: Option<&[Vec<u8>; 12]>) -> [Vec<u8>; 12] {
    let mut out: [Vec<u8>; 12] = Default::default();
    for i in 0..12 {
        let default = || match i {
            0..=2 => DEFAULT_4X4_INTRA.to_vec(),
            3..=5 => DEFAULT_4X4_INTER.to_vec(),
            6 | 8 | 10 => DEFAULT_8X8_INTRA.to_vec(),
            _ => DEFAULT_8X8_INTER.to_vec(),
        };
        out[i] = match sent.get(i).unwrap_or(&ScalingList::NotPresent) {
            ScalingList::Explicit(v) => v.clone(),
            ScalingList::Default => default(),
            ScalingList::NotPresent => match (i, fallback) {
                (0 | 3 | 6 | 7, None) => default(),
                (0 | 3 | 6 | 7, Some(f)) => f[i].clone(),
                (1 | 2 | 4 | 5, _) => out[i - 1].clone(),
                _ => out[i - 2].clone(),
            },
        };
    }
    out
}

/// The scaling matrix control, in raster order; `None` when neither the SPS nor the PPS
/// sends one (flat matrices, the control need not be set).
pub fn scaling_matrix(s: &Sps, p: &Pps) -> Option<v4l2_ctrl_h264_scaling_matrix> {
    if !s.seq_scaling_matrix_present_flag && !p.pic_scaling_matrix_present_flag {
        return None;
    }
    let flat: [Vec<u8>; 12] = std::array::from_fn(|i| vec![16u8; if i < 6 { 16 } else { 64 }]);
    let seq = if s.seq_scaling_matrix_present_flag { resolve_lists(&s.scaling_lists, None) } else { flat };
    let lists = if p.pic_scaling_matrix_present_flag {
        resolve_lists(&p.scaling_lists, if s.seq_scaling_matrix_present_flag { Some(&seq) } else { None })
    } else {
        seq
    };
    let mut m = v4l2_ctrl_h264_scaling_matrix { scaling_list_4x4: [[16; 16]; 6], scaling_list_8x8: [[16; 64]; 6] };
    for (k, raster) in m.scaling_list_4x4.iter_mut().enumerate() {
        for (zz, &v) in lists[k].iter().enumerate().take(16) {
            raster[ZIGZAG_4X4[zz]] = v;
        }
    }
    for (k, raster) in m.scaling_list_8x8.iter_mut().enumerate() {
        for (zz, &v) in lists[6 + k].iter().enumerate().take(64) {
            raster[ZIGZAG_8X8[zz]] = v;
        }
    }
    Some(m)
}

/// `v4l2_ctrl_h264_decode_params`: the DPB and the picture's own numbers.
pub fn decode_params(dpb: &Dpb, h: &SliceHeader, cur: &CurrentPicture) -> v4l2_ctrl_h264_decode_params {
    let mut d = v4l2_ctrl_h264_decode_params::default();
    for (e, r) in d.dpb.iter_mut().zip(dpb.refs()) {
        *e = v4l2_h264_dpb_entry {
            reference_ts: r.timestamp_ns,
            pic_num: r.pic_num.cast_unsigned(),
            frame_num: n16(r.frame_num),
            fields: 3, // V4L2_H264_FRAME_REF
            reserved: [0; 5],
            top_field_order_cnt: r.top_poc,
            bottom_field_order_cnt: r.bottom_poc,
            // VALID | ACTIVE, and LONG_TERM
            flags: 0x01 | 0x02 | if r.long_term_frame_idx.is_some() { 0x04 } else { 0 },
        };
    }
    d.nal_ref_idc = u16::from(h.nal_ref_idc);
    d.frame_num = n16(h.frame_num);
    d.top_field_order_cnt = cur.top_poc;
    d.bottom_field_order_cnt = cur.bottom_poc;
    d.idr_pic_id = n16(h.idr_pic_id);
    d.pic_order_cnt_lsb = n16(h.pic_order_cnt_lsb);
    d.delta_pic_order_cnt_bottom = h.delta_pic_order_cnt_bottom;
    d.delta_pic_order_cnt0 = h.delta_pic_order_cnt[0];
    d.delta_pic_order_cnt1 = h.delta_pic_order_cnt[1];
    d.dec_ref_pic_marking_bit_size = nz(h.dec_ref_pic_marking_bits);
    d.pic_order_cnt_bit_size = nz(h.pic_order_cnt_bits);
    d.flags = if h.idr { 0x01 } else { 0 }
        | match h.slice_type {
            SliceType::P | SliceType::Sp => 0x08,
            SliceType::B => 0x10,
            _ => 0,
        };
    d
}

fn slice_type_value(t: SliceType) -> u8 {
    match t {
        SliceType::P => 0,
        SliceType::B => 1,
        SliceType::I => 2,
        SliceType::Sp => 3,
        SliceType::Si => 4,
    }
}

/// `v4l2_ctrl_h264_slice_params`, with the reference lists (entries index the DPB array
/// of [`decode_params`], which lists the DPB's references in order).
pub fn slice_params(h: &SliceHeader, lists: &[Vec<usize>; 2]) -> v4l2_ctrl_h264_slice_params {
    let mut s = v4l2_ctrl_h264_slice_params {
        // From the NAL unit's first bit: the header byte, then the RBSP header bits.
        header_bit_size: nz(8 + h.header_bits),
        first_mb_in_slice: h.first_mb_in_slice,
        slice_type: slice_type_value(h.slice_type),
        colour_plane_id: n8(h.colour_plane_id),
        redundant_pic_cnt: n8(h.redundant_pic_cnt),
        cabac_init_idc: n8(h.cabac_init_idc),
        slice_qp_delta: s8(h.slice_qp_delta),
        slice_qs_delta: s8(h.slice_qs_delta),
        disable_deblocking_filter_idc: n8(h.disable_deblocking_filter_idc),
        slice_alpha_c0_offset_div2: s8(h.slice_alpha_c0_offset_div2),
        slice_beta_offset_div2: s8(h.slice_beta_offset_div2),
        num_ref_idx_l0_active_minus1: n8(h.num_ref_idx_l0_active_minus1),
        num_ref_idx_l1_active_minus1: n8(h.num_ref_idx_l1_active_minus1),
        reserved: 0,
        ref_pic_list0: [v4l2_h264_reference::default(); H264_REF_LIST_LEN],
        ref_pic_list1: [v4l2_h264_reference::default(); H264_REF_LIST_LEN],
        flags: if h.direct_spatial_mv_pred_flag { 0x01 } else { 0 } | if h.sp_for_switch_flag { 0x02 } else { 0 },
    };
    for (dst, src) in [(&mut s.ref_pic_list0, &lists[0]), (&mut s.ref_pic_list1, &lists[1])] {
        for (d, &i) in dst.iter_mut().zip(src.iter()) {
            *d = v4l2_h264_reference { fields: 3, index: u8::try_from(i).unwrap_or(u8::MAX) };
        }
    }
    s
}

/// `v4l2_ctrl_h264_pred_weights` when the slice carries an explicit weight table.
pub fn pred_weights(h: &SliceHeader) -> Option<v4l2_ctrl_h264_pred_weights> {
    let tables = h.weights.as_ref()?;
    let empty = v4l2_h264_weight_factors {
        luma_weight: [0; 32],
        luma_offset: [0; 32],
        chroma_weight: [[0; 2]; 32],
        chroma_offset: [[0; 2]; 32],
    };
    let mut w = v4l2_ctrl_h264_pred_weights {
        luma_log2_weight_denom: n16(h.luma_log2_weight_denom),
        chroma_log2_weight_denom: n16(h.chroma_log2_weight_denom),
        weight_factors: [empty; 2],
    };
    for (f, table) in w.weight_factors.iter_mut().zip(tables.iter()) {
        for (k, ((lw, lo), chroma)) in table.iter().enumerate().take(32) {
            f.luma_weight[k] = s16(*lw);
            f.luma_offset[k] = s16(*lo);
            for (c, (weight, offset)) in chroma.iter().enumerate() {
                f.chroma_weight[k][c] = s16(*weight);
                f.chroma_offset[k][c] = s16(*offset);
            }
        }
    }
    Some(w)
}

/// Narrowing for the control structs. Every value was bounded by the parser (`ue_max`,
/// `se_range`) to what its field holds, so saturating never changes one; it only keeps a
/// parser bug from turning into a silently wrapped value.
fn n8(v: u32) -> u8 {
    u8::try_from(v).unwrap_or(u8::MAX)
}

fn s8(v: i32) -> i8 {
    i8::try_from(v.clamp(i8::MIN.into(), i8::MAX.into())).unwrap_or_default()
}

fn n16(v: u32) -> u16 {
    u16::try_from(v).unwrap_or(u16::MAX)
}

fn s16(v: i32) -> i16 {
    i16::try_from(v.clamp(i16::MIN.into(), i16::MAX.into())).unwrap_or_default()
}

fn nz(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn headers_of(stream: &[u8]) -> (HashMap<u32, Sps>, HashMap<u32, Pps>) {
        let mut h = StreamHeaders::default();
        for nal in nal_units(stream) {
            let _ = h.accept(nal.bytes);
        }
        (h.sps, h.pps)
    }
    use crate::device::video::codec::{EncoderSettings, SoftwareH264};
    use crate::device::video::Frame;

    fn stream(frames: u8) -> Vec<Vec<u8>> {
        let (w, h) = (96u32, 64u32);
        let mut enc = SoftwareH264::new(w, h, EncoderSettings { bitrate_bps: 500_000, ..Default::default() }).unwrap();
        (0..frames)
            .filter_map(|i| {
                let f = Frame::rgb(1, u64::from(i), w, h, vec![i.wrapping_mul(40); (w * h * 3) as usize]);
                enc.encode(&f).unwrap().map(|au| au.data.to_vec())
            })
            .collect()
    }

    #[test]
    fn controls_carry_the_parsed_stream() {
        let aus = stream(3);
        let (sps, pps) = headers_of(&aus[0]);
        let s = sps.values().next().unwrap();
        let p = pps.values().next().unwrap();
        let c = sps_control(s);
        assert_eq!((c.profile_idc, c.pic_width_in_mbs_minus1, c.pic_height_in_map_units_minus1), (66, 5, 3));
        assert_eq!({ c.flags } & 0x10, 0x10, "frame_mbs_only");
        // Constrained baseline sets constraint_set1 (sent as bit 6): V4L2's SET1 is 0x02.
        assert_eq!(s.constraint_flags & 0x40, 0x40);
        assert_eq!(c.constraint_set_flags & 0x02, 0x02);
        let pc = pps_control(s, p);
        assert_eq!(pc.flags & 0x01, 0, "baseline is CAVLC");
        assert!(scaling_matrix(s, p).is_none(), "no scaling lists in a baseline stream");
        // The IDR: decode params say IDR, an empty DPB, and the header sizes.
        let mut headers = StreamHeaders::default();
        let mut idr = None;
        for n in nal_units(&aus[0]) {
            if let Ok(Some(h)) = headers.accept(n.bytes) {
                idr = Some(h);
            }
        }
        let idr = idr.unwrap();
        let mut dpb = Dpb::new();
        let cur = dpb.begin(s, &idr).unwrap();
        let d = decode_params(&dpb, &idr, &cur);
        assert_eq!(d.flags & 0x01, 0x01);
        assert!(d.dpb.iter().all(|e| e.flags == 0));
        assert_eq!(d.dec_ref_pic_marking_bit_size, 2, "no_output_of_prior_pics + long_term_reference flags");
        let sp = slice_params(&idr, &[Vec::new(), Vec::new()]);
        assert_eq!(sp.slice_type, 2);
        assert!(sp.header_bit_size > 8);
        dpb.finish(s, &idr, cur, 1000, 0).unwrap();
        // The next P picture refers to the IDR: DPB entry 0, list 0 entry 0.
        let mut p_hdr = None;
        for n in nal_units(&aus[1]) {
            if let Ok(Some(h)) = headers.accept(n.bytes) {
                p_hdr = Some(h);
            }
        }
        let p_hdr = p_hdr.unwrap();
        let cur = dpb.begin(s, &p_hdr).unwrap();
        let d = decode_params(&dpb, &p_hdr, &cur);
        assert_eq!((d.dpb[0].reference_ts, d.dpb[0].flags), (1000, 0x03));
        assert_eq!(d.flags & 0x08, 0x08, "P frame");
        let lists = dpb.ref_lists(s, &p_hdr, &cur).unwrap();
        let sp = slice_params(&p_hdr, &lists);
        assert_eq!(sp.ref_pic_list0[0], v4l2_h264_reference { fields: 3, index: 0 });
    }

    #[test]
    fn scaling_lists_fall_back_and_come_out_in_raster_order() {
        let mut s = Sps { seq_scaling_matrix_present_flag: true, ..Sps::default() };
        // List 0 explicit (zig-zag 1..16), list 1 absent (copies 0), list 3 default.
        s.scaling_lists = vec![ScalingList::Explicit((1..=16).collect()), ScalingList::NotPresent];
        s.scaling_lists.resize(8, ScalingList::NotPresent);
        s.scaling_lists[3] = ScalingList::Default;
        let m = scaling_matrix(&s, &Pps::default()).unwrap();
        // Raster position 4 (row 1, col 0) is the third in zig-zag order.
        assert_eq!(m.scaling_list_4x4[0][..6], [1, 2, 6, 7, 3, 5]);
        assert_eq!(m.scaling_list_4x4[1], m.scaling_list_4x4[0]);
        assert_eq!(m.scaling_list_4x4[3][0], 10);
        assert_eq!(m.scaling_list_8x8[0][0], 6, "absent 8x8 intra: the default");
        // A PPS without lists of its own keeps the SPS's; no lists anywhere: no control.
        assert!(scaling_matrix(&Sps::default(), &Pps::default()).is_none());
    }

    #[test]
    fn a_node_that_is_not_a_decoder_is_refused_with_a_reason() {
        let err = StatelessH264::new(Path::new("/nonexistent/video7"), None).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/video7"), "{err}");
    }
}
