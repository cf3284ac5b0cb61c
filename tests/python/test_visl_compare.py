"""The lab's visl comparison (tests/vm/visl_compare.py) must catch what it exists to catch.

The fixture is a real pair from `tests/vm/run.sh stateless`: ffmpeg's trace_headers of the
test stream's first four slices (I, P, B, B at 320x240 High) and what visl traced when our
decoder sent them. It must compare clean; every kind of corruption must be named.
"""
import os
import re
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPARE = os.path.join(ROOT, "tests", "vm", "visl_compare.py")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "visl")


def run(headers, trace):
    with tempfile.TemporaryDirectory() as d:
        h, t = os.path.join(d, "h.txt"), os.path.join(d, "t.txt")
        for path, text in ((h, headers), (t, trace)):
            with open(path, "w") as f:
                f.write(text)
        p = subprocess.run([sys.executable, COMPARE, h, t], capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout


class VislCompare(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(FIXTURES, "headers.txt")) as f:
            cls.headers = f.read()
        with open(os.path.join(FIXTURES, "visl-trace.txt")) as f:
            cls.trace = f.read()

    def test_the_recorded_run_matches(self):
        rc, out = run(self.headers, self.trace)
        self.assertEqual(rc, 0, out)
        m = re.search(r"4 slices, 4 visl runs, (\d+) values compared", out)
        self.assertIsNotNone(m, out)
        self.assertGreater(int(m[1]), 150, "too few values compared to mean anything")

    def test_a_wrong_frame_num_is_named(self):
        # The second run's decode params: frame_num 1 → 3.
        parts = self.trace.split("v4l2_ctrl_h264_decode_params:")
        self.assertGreaterEqual(len(parts), 3)
        parts[2] = parts[2].replace("\nframe_num 1\n", "\nframe_num 3\n", 1)
        rc, out = run(self.headers, "v4l2_ctrl_h264_decode_params:".join(parts))
        self.assertEqual(rc, 1, out)
        self.assertIn("slice 1 (P): decode.frame_num: stream says 1, visl got 3", out)

    def test_a_wrong_header_size_is_named(self):
        m = re.search(r"header_bit_size (\d+)", self.trace)
        bad = self.trace.replace(m[0], f"header_bit_size {int(m[1]) + 8}", 1)
        rc, out = run(self.headers, bad)
        self.assertEqual(rc, 1, out)
        self.assertIn("slice.header_bit_size", out)

    def test_a_list_entry_naming_an_empty_dpb_slot_is_named(self):
        # The P slice's list0[0] must name a valid DPB entry; point it at slot 9 (empty).
        i = self.trace.index("v4l2_h264_ref_pic_list0: [0]:", self.trace.index("PFRAME"))
        j = self.trace.index("\n", i)
        line = self.trace[i:j]
        bad = self.trace[:i] + re.sub(r"index \d+", "index 9", line) + self.trace[j:]
        rc, out = run(self.headers, bad)
        self.assertEqual(rc, 1, out)
        self.assertIn("names DPB entry 9, which is not valid", out)

    def test_a_missing_run_is_named(self):
        cut = self.trace.rindex("\n", 0, self.trace.rindex("v4l2_ctrl_h264_sps:"))
        rc, out = run(self.headers, self.trace[:cut])
        self.assertEqual(rc, 1, out)
        self.assertIn("visl ran 3 times for 4 slices", out)


if __name__ == "__main__":
    unittest.main()
