#!/usr/bin/env python3
"""Compares what visl received with what the stream says.

    visl_compare.py HEADERS TRACE

HEADERS: ffmpeg's `-bsf:v trace_headers` output for the stream (stderr). TRACE: visl's
tracefs output (events of visl_h264_controls) for the same stream decoded slice by slice.
Every slice of the stream must have one visl run whose SPS, PPS, slice parameters and
decode parameters carry the values ffmpeg parsed (header bit sizes included), and whose
DPB and reference lists are consistent (IDRs refer to nothing; list entries name valid
DPB entries; P lists start at the newest reference; B lists straddle the picture's POC).
Exit 0 when all match; otherwise each mismatch is printed.
"""
import re
import sys

ELEMENT = re.compile(r"\] (\d+)\s+(\S+)\s+([01]+) = (-?\d+)\s*$")
EVENT = re.compile(r":\s+(v4l2_\w+):\s?(.*)$")


def parse_headers(text):
    """Slices in decoding order: (slice elements, active SPS, active PPS)."""
    sps, pps, slices = {}, {}, []
    block, kind = None, None

    def close():
        if block is None:
            return
        if kind == "sps":
            sps[block["seq_parameter_set_id"][0]] = block
        elif kind == "pps":
            pps[block["pic_parameter_set_id"][0]] = block
        elif kind == "slice":
            p = pps[block["pic_parameter_set_id"][0]]
            slices.append((block, sps[p["seq_parameter_set_id"][0]], p))

    for line in text.splitlines():
        title = line.split("] ", 1)[-1].strip()
        if title in ("Sequence Parameter Set", "Picture Parameter Set", "Slice Header") or title.startswith(
            ("Packet:", "Extradata", "Supplemental", "Access Unit")
        ):
            close()
            kind = {"Sequence Parameter Set": "sps", "Picture Parameter Set": "pps", "Slice Header": "slice"}.get(title)
            block = {} if kind else None
            continue
        m = ELEMENT.search(line)
        if m and block is not None:
            pos, name, bits, value = int(m[1]), m[2], m[3], int(m[4])
            block.setdefault(name, (value, pos, len(bits)))
            block.setdefault("_order", []).append((name, value, pos, len(bits)))
    close()
    return slices


def parse_trace(text):
    """visl runs: one dict per v4l2_ctrl_h264_sps event, holding the events that follow."""
    runs, cur, event = [], None, None
    for line in text.splitlines():
        m = EVENT.search(line)
        if m:
            event, rest = m[1], m[2]
            if event == "v4l2_ctrl_h264_sps":
                cur = {"list0": [], "list1": [], "dpb": []}
                runs.append(cur)
            if cur is None:
                continue
            if event in ("v4l2_h264_ref_pic_list0", "v4l2_h264_ref_pic_list1"):
                r = re.match(r"\[(\d+)\]: fields (\S*) ?index (\d+)", rest)
                if r:
                    cur["list" + event[-1]].append((r[2], int(r[3])))
            elif event == "v4l2_h264_dpb_entry":
                d = re.match(
                    r"\[(\d+)\]: reference_ts (\d+), pic_num (\d+) frame_num (\d+) fields (\S*) ?"
                    r"top_field_order_cnt (-?\d+) bottom_field_order_cnt (-?\d+) flags ?(\S*)",
                    rest,
                )
                if d:
                    cur["dpb"].append(
                        {"ts": int(d[2]), "pic_num": int(d[3]), "frame_num": int(d[4]), "top": int(d[6]), "flags": d[8]}
                    )
            else:
                cur.setdefault(event, {})
            continue
        if cur is not None and event and event in cur and isinstance(cur[event], dict):
            kv = line.strip().split(" ", 1)
            if len(kv) == 2:
                cur[event][kv[0]] = kv[1].strip()
    return runs


def s8(text):
    """visl prints some s8 fields with %u: back to signed."""
    v = int(text)
    return v - (1 << 32) if v >= 1 << 31 else v


def flags(text):
    return set(f for f in text.split("|") if f) if text else set()


def val(block, name, default=0):
    return block[name][0] if name in block else default


def header_end(sl):
    """Bit position where slice_data() starts: past the last header element."""
    ends = [pos + n for name, _, pos, n in sl["_order"] if name != "cabac_alignment_one_bit"]
    return max(ends)


def bits_of(sl, names):
    return sum(n for name, _, _, n in sl["_order"] if any(name.startswith(x) for x in names))


def marking_bits(sl):
    marks = ("no_output_of_prior_pics_flag", "long_term_reference_flag", "adaptive_ref_pic_marking_mode_flag",
             "memory_management_control_operation", "difference_of_pic_nums_minus1", "long_term_pic_num",
             "long_term_frame_idx", "max_long_term_frame_idx_plus1")
    return bits_of(sl, marks)


class Poc:
    """Expected POC for pic_order_cnt_type 0 and 2 (8.2.1), frames only."""

    def __init__(self):
        self.prev_msb = self.prev_lsb = 0
        self.prev_offset = self.prev_frame_num = 0

    def next(self, sl, sps):
        idr = val(sl, "nal_unit_type") == 5
        ref = val(sl, "nal_ref_idc") != 0
        fn = val(sl, "frame_num")
        t = val(sps, "pic_order_cnt_type")
        max_fn = 1 << (val(sps, "log2_max_frame_num_minus4") + 4)
        if t == 0:
            max_lsb = 1 << (val(sps, "log2_max_pic_order_cnt_lsb_minus4") + 4)
            pm, pl = (0, 0) if idr else (self.prev_msb, self.prev_lsb)
            lsb = val(sl, "pic_order_cnt_lsb")
            if lsb < pl and pl - lsb >= max_lsb // 2:
                msb = pm + max_lsb
            elif lsb > pl and lsb - pl > max_lsb // 2:
                msb = pm - max_lsb
            else:
                msb = pm
            if ref:
                self.prev_msb, self.prev_lsb = msb, lsb
            return msb + lsb
        if t == 2:
            offset = 0 if idr else self.prev_offset + (max_fn if self.prev_frame_num > fn else 0)
            self.prev_offset, self.prev_frame_num = offset, fn
            return 0 if idr else 2 * (offset + fn) - (0 if ref else 1)
        return None


SLICE_TYPES = {0: "P", 1: "B", 2: "I", 3: "SP", 4: "SI"}


def compare(slices, runs):
    bad = []
    if len(runs) != len(slices):
        bad.append(f"visl ran {len(runs)} times for {len(slices)} slices")
    poc = Poc()
    checked = 0
    for k, ((sl, sps, pps), run) in enumerate(zip(slices, runs)):
        want = {}
        # SPS
        s = run.get("v4l2_ctrl_h264_sps", {})
        for name in ("profile_idc", "level_idc", "seq_parameter_set_id", "log2_max_frame_num_minus4",
                     "pic_order_cnt_type", "max_num_ref_frames", "pic_width_in_mbs_minus1",
                     "pic_height_in_map_units_minus1"):
            want[("sps", name)] = (val(sps, name), int(s.get(name, -1)))
        want[("sps", "chroma_format_idc")] = (val(sps, "chroma_format_idc", 1), int(s.get("chroma_format_idc", -1)))
        if val(sps, "pic_order_cnt_type") == 0:
            want[("sps", "log2_max_pic_order_cnt_lsb_minus4")] = (
                val(sps, "log2_max_pic_order_cnt_lsb_minus4"), int(s.get("log2_max_pic_order_cnt_lsb_minus4", -1)))
        sf = flags(s.get("flags", ""))
        want[("sps", "FRAME_MBS_ONLY")] = (bool(val(sps, "frame_mbs_only_flag")), "FRAME_MBS_ONLY" in sf)
        want[("sps", "DIRECT_8X8_INFERENCE")] = (bool(val(sps, "direct_8x8_inference_flag")), "DIRECT_8X8_INFERENCE" in sf)
        cf = flags(s.get("constraint_set_flags", ""))
        for i in range(6):
            want[("sps", f"constraint_set{i}")] = (bool(val(sps, f"constraint_set{i}_flag")), f"CONSTRAINT_SET{i}_FLAG" in cf)
        # PPS
        p = run.get("v4l2_ctrl_h264_pps", {})
        for name in ("pic_parameter_set_id", "seq_parameter_set_id", "num_ref_idx_l0_default_active_minus1",
                     "num_ref_idx_l1_default_active_minus1", "weighted_bipred_idc", "pic_init_qp_minus26",
                     "pic_init_qs_minus26", "chroma_qp_index_offset"):
            want[("pps", name)] = (val(pps, name), int(p.get(name, -99)))
        want[("pps", "second_chroma_qp_index_offset")] = (
            val(pps, "second_chroma_qp_index_offset", val(pps, "chroma_qp_index_offset")),
            int(p.get("second_chroma_qp_index_offset", -99)))
        pf = flags(p.get("flags", ""))
        for name, flag in (("entropy_coding_mode_flag", "ENTROPY_CODING_MODE"), ("weighted_pred_flag", "WEIGHTED_PRED"),
                           ("deblocking_filter_control_present_flag", "DEBLOCKING_FILTER_CONTROL_PRESENT"),
                           ("constrained_intra_pred_flag", "CONSTRAINED_INTRA_PRED"),
                           ("redundant_pic_cnt_present_flag", "REDUNDANT_PIC_CNT_PRESENT"),
                           ("transform_8x8_mode_flag", "TRANSFORM_8X8_MODE")):
            want[("pps", flag)] = (bool(val(pps, name)), flag in pf)
        # Slice parameters
        sp = run.get("v4l2_ctrl_h264_slice_params", {})
        st = val(sl, "slice_type") % 5
        want[("slice", "slice_type")] = (SLICE_TYPES[st], sp.get("slice_type"))
        want[("slice", "header_bit_size")] = (header_end(sl), int(sp.get("header_bit_size", -1)))
        for name in ("first_mb_in_slice", "slice_qp_delta", "disable_deblocking_filter_idc", "cabac_init_idc"):
            want[("slice", name)] = (val(sl, name), s8(sp.get(name, "-99")))
        for name in ("slice_alpha_c0_offset_div2", "slice_beta_offset_div2"):
            want[("slice", name)] = (val(sl, name), s8(sp.get(name, "-99")))
        active0 = val(sl, "num_ref_idx_l0_active_minus1", val(pps, "num_ref_idx_l0_default_active_minus1"))
        active1 = val(sl, "num_ref_idx_l1_active_minus1", val(pps, "num_ref_idx_l1_default_active_minus1"))
        if st in (0, 1, 3):
            want[("slice", "num_ref_idx_l0_active_minus1")] = (active0, int(sp.get("num_ref_idx_l0_active_minus1", -1)))
        if st == 1:
            want[("slice", "num_ref_idx_l1_active_minus1")] = (active1, int(sp.get("num_ref_idx_l1_active_minus1", -1)))
            want[("slice", "DIRECT_SPATIAL_MV_PRED")] = (
                bool(val(sl, "direct_spatial_mv_pred_flag")), "DIRECT_SPATIAL_MV_PRED" in flags(sp.get("flags", "")))
        # Decode parameters
        d = run.get("v4l2_ctrl_h264_decode_params", {})
        idr = val(sl, "nal_unit_type") == 5
        for name in ("nal_ref_idc", "frame_num", "pic_order_cnt_lsb", "delta_pic_order_cnt_bottom"):
            want[("decode", name)] = (val(sl, name), int(d.get(name, -1)))
        if idr:
            want[("decode", "idr_pic_id")] = (val(sl, "idr_pic_id"), int(d.get("idr_pic_id", -1)))
        want[("decode", "pic_order_cnt_bit_size")] = (
            bits_of(sl, ("pic_order_cnt_lsb", "delta_pic_order_cnt")), int(d.get("pic_order_cnt_bit_size", -1)))
        want[("decode", "dec_ref_pic_marking_bit_size")] = (marking_bits(sl), int(d.get("dec_ref_pic_marking_bit_size", -1)))
        df = flags(d.get("flags", ""))
        want[("decode", "IDR_PIC")] = (idr, "IDR_PIC" in df)
        want[("decode", "PFRAME")] = (st in (0, 3), "PFRAME" in df)
        want[("decode", "BFRAME")] = (st == 1, "BFRAME" in df)
        expected_poc = poc.next(sl, sps)
        if expected_poc is not None:
            want[("decode", "top_field_order_cnt")] = (expected_poc, int(d.get("top_field_order_cnt", -9999)))
        # Prediction weights, when the slice has a table.
        if "luma_log2_weight_denom" in sl:
            w = run.get("v4l2_ctrl_h264_pred_weights", {})
            for name in ("luma_log2_weight_denom", "chroma_log2_weight_denom"):
                want[("weights", name)] = (val(sl, name), int(w.get(name, -1)))
        for key, (a, b) in want.items():
            checked += 1
            if a != b:
                bad.append(f"slice {k} ({SLICE_TYPES[st]}): {key[0]}.{key[1]}: stream says {a}, visl got {b}")
        # DPB and lists: consistent with each other and the picture.
        valid = [e for e in run["dpb"] if "VALID" in flags(e["flags"])]
        if idr and valid:
            bad.append(f"slice {k}: an IDR with {len(valid)} DPB entries")
        if len(valid) > max(1, val(sps, "max_num_ref_frames")):
            bad.append(f"slice {k}: {len(valid)} DPB entries for max_num_ref_frames {val(sps, 'max_num_ref_frames')}")
        cur_poc = int(d.get("top_field_order_cnt", 0))
        for n, active in ((0, active0), (1, active1)):
            if (n == 0 and st not in (0, 1, 3)) or (n == 1 and st != 1):
                continue
            entries = run[f"list{n}"][: active + 1]
            used = [i for f, i in entries if f]
            for i in used:
                if i >= len(run["dpb"]) or "VALID" not in flags(run["dpb"][i]["flags"]):
                    bad.append(f"slice {k}: list{n} names DPB entry {i}, which is not valid")
            if not used:
                bad.append(f"slice {k}: list{n} is empty")
                continue
            first = run["dpb"][used[0]] if used[0] < len(run["dpb"]) else None
            if first is None:
                continue
            short = [e for e in valid if "LONG_TERM" not in flags(e["flags"])]
            if st in (0, 3) and not val(sl, "ref_pic_list_modification_flag_l0") and short:
                if first["ts"] != max(e["ts"] for e in short):
                    bad.append(f"slice {k}: P list0 starts at ts {first['ts']}, not the newest reference")
            if st == 1 and not val(sl, f"ref_pic_list_modification_flag_l{n}"):
                before = [e["top"] for e in short if e["top"] < cur_poc]
                after = [e["top"] for e in short if e["top"] > cur_poc]
                # Only when references sit on both sides: otherwise the swap rule applies.
                if before and after:
                    expect = max(before) if n == 0 else min(after)
                    if first["top"] != expect:
                        bad.append(f"slice {k}: B list{n} starts at POC {first['top']}, want {expect} (current {cur_poc})")
    return checked, bad


def main():
    with open(sys.argv[1]) as f:
        headers = f.read()
    with open(sys.argv[2]) as f:
        trace = f.read()
    slices, runs = parse_headers(headers), parse_trace(trace)
    if not slices:
        print("visl_compare: no slices in the trace_headers output")
        return 1
    checked, bad = compare(slices, runs)
    sizes = sorted({(val(s, "pic_width_in_mbs_minus1") + 1, val(s, "pic_height_in_map_units_minus1") + 1)
                    for _, s, _ in slices})
    for b in bad:
        print("visl_compare: MISMATCH " + b)
    print(f"visl_compare: {len(slices)} slices, {len(runs)} visl runs, {checked} values compared, "
          f"sizes in macroblocks {sizes}, {len(bad)} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
