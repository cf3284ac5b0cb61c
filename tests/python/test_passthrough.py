"""Compressed capture handed to viewers as it arrives (issue 16): a recorded H.264 or MJPEG
capture, made by Debian's ffmpeg from testsrc, played by `video = "replay"` (vivid cannot
emit H.264; the sim renders raw pixels). A viewer of `/api/video` must receive the
recording's own access units / JPEGs, byte for byte, and screenshots still work because
pixels are decoded on demand.
"""

import base64
import json
import os
import shutil
import struct
import subprocess
import tempfile
import unittest

from test_https import HttpsDaemon, wait_for
from test_websocket import CDV1, Ws, quiet_connect_warning

from websockets.sync.client import connect

CDJ1 = 0x43444A31
SIZE = (640, 360)


def ffmpeg(*args):
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", *args], check=True)


def make_h264(path, frames=90, gop=15):
    """Main profile, no B-frames (what capture dongles send), an access unit delimiter before
    each picture, and SPS/PPS only before the first IDR, as devices that send them once do
    (x264 repeats them: they are cut out of later IDRs here)."""
    ffmpeg("-f", "lavfi", "-i", f"testsrc=size={SIZE[0]}x{SIZE[1]}:rate=30", "-frames:v", str(frames),
           "-pix_fmt", "yuv420p", "-c:v", "libx264", "-profile:v", "main", "-bf", "0", "-g", str(gop),
           "-bsf:v", "h264_metadata=aud=insert", "-f", "h264", path)
    with open(path, "rb") as f:
        aus = access_units(f.read())
    out = [aus[0]]
    for au in aus[1:]:
        starts = nal_starts(au) + [(len(au), None)]
        out.append(b"".join(au[a:b] for (a, t), (b, _) in zip(starts, starts[1:]) if t not in (7, 8)))
    with open(path, "wb") as f:
        f.write(b"".join(out))


def make_mjpeg(path, frames=30):
    ffmpeg("-f", "lavfi", "-i", f"testsrc=size={SIZE[0]}x{SIZE[1]}:rate=30", "-frames:v", str(frames),
           "-pix_fmt", "yuvj420p", "-c:v", "mjpeg", "-f", "mjpeg", path)


def nal_starts(data):
    """(offset of the start code, NAL type) of every NAL unit."""
    out, i = [], 0
    while True:
        i = data.find(b"\x00\x00\x01", i)
        if i < 0 or i + 3 >= len(data):
            return out
        start = i - 1 if i > 0 and data[i - 1] == 0 else i
        out.append((start, data[i + 3] & 0x1F))
        i += 3


def access_units(data):
    """The recording split at its access unit delimiters (type 9)."""
    cuts = [s for s, t in nal_starts(data) if t == 9] + [len(data)]
    return [data[a:b] for a, b in zip(cuts, cuts[1:])]


def with_parameter_sets(au, sps_pps):
    """What a viewer must get for `au`: an IDR without SPS/PPS has them put in after its
    delimiter; everything else is untouched."""
    types = [t for _, t in nal_starts(au)]
    if 5 not in types or (7 in types and 8 in types):
        return au
    second = nal_starts(au)[1][0]
    return au[:second] + sps_pps + au[second:]


def jpegs(data):
    """ffmpeg's MJPEG: whole JPEGs back to back (no thumbnails inside)."""
    out, i = [], 0
    while True:
        end = data.find(b"\xff\xd9", i)
        if end < 0:
            return out
        out.append(data[i:end + 2])
        i = end + 2


def read_messages(sock, n, magic, timeout=30):
    """n binary messages with `magic` (acked): [(header, payload)]."""
    got = []
    while len(got) < n:
        m = sock.recv(timeout=timeout)
        if isinstance(m, str):
            continue
        mag, gen, seq, at, flags = struct.unpack(">IIIQI", m[:24])
        assert mag == magic, hex(mag)
        got.append(({"generation": gen, "sequence": seq, "key": flags & 1}, m[24:]))
        sock.send(json.dumps({"type": "ack", "generation": gen, "sequence": seq}))
    return got


class Replay(unittest.TestCase):
    recording = None  # set by subclasses: (file name, maker)
    config_extra = ""

    @classmethod
    def setUpClass(cls):
        quiet_connect_warning()
        cls.tmp = tempfile.mkdtemp(prefix="tether-replay-")
        os.chmod(cls.tmp, 0o755)
        name, maker = cls.recording
        cls.path = os.path.join(cls.tmp, name)
        maker(cls.path)
        with open(cls.path, "rb") as f:
            cls.data = f.read()
        config = f'video = "replay"\n{cls.config_extra}\n[replay]\npath = "{cls.path}"\nfps = 30\n'
        cls.d = HttpsDaemon(config_text=config)
        cls.op = cls.d.cli("token", "add", "replay-op", "--role", "operate").stdout.strip()

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def watch(self):
        control = Ws(self.d, self.op)
        self.addCleanup(control.close)
        # The codec string comes from the first IDR's SPS: watch once the recording's first
        # picture (an IDR) has gone through (a viewer before it is told the default).
        wait_for("the first picture", lambda: control.ok("status")["video"]["frame_id"] is not None)
        opened = control.ok("video_open")
        s = connect(f"wss://localhost:{self.d.port}/api/video", ssl=self.d.context(),
                    origin=f"https://localhost:{self.d.port}", open_timeout=10, max_size=8 << 20)
        self.addCleanup(s.close)
        s.send(json.dumps({"ticket": opened["ticket"]}))
        ready = json.loads(s.recv(timeout=10))
        self.assertEqual(ready["type"], "ready")
        return control, s, ready, opened

    def screenshot_is_the_recording(self, control):
        """Pixels are decoded on demand: a screenshot shows testsrc at the recording's size."""
        shot = control.ok("screenshot", max_edge=2048)
        meta = shot["metadata"]
        self.assertEqual((meta["source_size"]["width"], meta["source_size"]["height"]), SIZE, meta)
        png = base64.b64decode(shot["data"])
        out = os.path.join(self.tmp, "shot.png")
        with open(out, "wb") as f:
            f.write(png)
        # testsrc's colour bars: many distinct colours, not a blank or grey picture.
        rgb = subprocess.run(["ffmpeg", "-v", "error", "-i", out, "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                             capture_output=True, check=True).stdout
        colours = {rgb[i:i + 3] for i in range(0, len(rgb), 3 * 97)}
        self.assertGreater(len(colours), 20, "the screenshot is not the recording's picture")


class H264Passthrough(Replay):
    recording = ("testsrc.h264", make_h264)

    def test_a_viewer_receives_the_recordings_access_units_byte_for_byte(self):
        aus = access_units(self.data)
        self.assertEqual(len(aus), 90)
        self.assertEqual(b"".join(aus), self.data)
        first = nal_starts(aus[0])
        # The first IDR's SPS and PPS (x264 puts an SEI after them).
        sps_pps = aus[0][first[1][0]:[s for s, t in first if t not in (7, 8, 9)][0]]
        self.assertEqual([t for _, t in nal_starts(sps_pps)], [7, 8])
        self.assertFalse(any(t == 7 for _, t in nal_starts(aus[15])), "later IDRs lack SPS/PPS in the file")
        expected = [with_parameter_sets(au, sps_pps) for au in aus]

        control, s, ready, opened = self.watch()
        self.assertEqual(ready["protocol"], "h264-annexb/1")
        self.assertTrue(ready["codec"].startswith("avc1.4D"), ready["codec"])
        got = read_messages(s, 75, CDV1)
        self.assertEqual(got[0][0]["key"], 1, "a viewer starts at an IDR")
        start = expected.index(got[0][1])
        for k, (header, payload) in enumerate(got):
            want = expected[(start + k) % len(expected)]
            self.assertEqual(payload, want, f"message {k} is not access unit {(start + k) % len(expected)}")
            idr = 5 in [t for _, t in nal_starts(want)]
            self.assertEqual(header["key"], 1 if idr else 0, k)
        seqs = [h["sequence"] for h, _ in got]
        self.assertEqual(seqs, list(range(seqs[0], seqs[0] + len(seqs))), "no gap for an acking viewer")
        # Debian's decoder takes the stream as received, without an error.
        stream = os.path.join(self.tmp, "received.h264")
        with open(stream, "wb") as f:
            f.write(b"".join(p for _, p in got))
        probe = subprocess.run(["ffprobe", "-v", "error", "-f", "h264", "-count_frames", "-show_entries",
                                "stream=width,height,nb_read_frames", "-of", "json", stream],
                               capture_output=True, text=True, check=True)
        self.assertEqual(probe.stderr, "")
        info = json.loads(probe.stdout)["streams"][0]
        self.assertEqual((info["width"], info["height"], int(info["nb_read_frames"])), (*SIZE, 75))

        status = control.ok("status")["video"]
        self.assertEqual(status["backend"], "replay")
        self.assertEqual(status["capture"], "h264")
        self.assertEqual(status["paths"], {"viewers": "passthrough", "pixels": "decode"})
        self.screenshot_is_the_recording(control)
        video = control.ok("status")["video"]
        self.assertEqual(video["decoder"], "software")
        # decoder_backend = auto tried both hardware kinds first and says why each was skipped
        # (this machine has neither a stateful M2M nor a stateless request-API decoder).
        notes = " | ".join(video["decoder_notes"])
        self.assertIn("stateful M2M decoder: none takes H264", notes)
        self.assertIn("stateless decoder: no request-API node takes H.264 slices", notes)


class MjpegPassthrough(Replay):
    recording = ("testsrc.mjpeg", make_mjpeg)

    def test_a_viewer_receives_the_recordings_jpegs_and_screenshots_decode_on_demand(self):
        pictures = jpegs(self.data)
        self.assertEqual(len(pictures), 30)
        control, s, ready, opened = self.watch()
        self.assertEqual((ready["protocol"], ready["codec"]), ("jpeg/1", "jpeg"))
        self.assertEqual(opened["protocol"], "jpeg/1")
        got = read_messages(s, 40, CDJ1)
        start = pictures.index(got[0][1])
        for k, (header, payload) in enumerate(got):
            self.assertEqual(payload, pictures[(start + k) % len(pictures)], f"message {k}")
            self.assertEqual(header["key"], 1)
        status = control.ok("status")["video"]
        self.assertEqual((status["capture"], status["paths"]["viewers"]), ("mjpeg", "passthrough"))
        self.screenshot_is_the_recording(control)
        notes = " | ".join(control.ok("status")["video"]["decoder_notes"])
        self.assertIn("stateless decoder: not used for MJPG (H.264 only)", notes)


class MjpegTranscoded(Replay):
    """`passthrough = false`: the old path (decode, encode H.264) still works."""
    recording = ("testsrc.mjpeg", make_mjpeg)
    config_extra = "passthrough = false"

    def test_viewers_get_h264_encoded_here(self):
        control, s, ready, _ = self.watch()
        self.assertEqual(ready["protocol"], "h264-annexb/1")
        got = read_messages(s, 10, CDV1)
        self.assertEqual(got[0][0]["key"], 1)
        self.assertNotIn(b"\xff\xd8", got[0][1][:4])
        status = control.ok("status")["video"]
        self.assertEqual(status["paths"], {"viewers": "encode", "pixels": "decode"})
        self.assertEqual(status["decoder"], "software", "the encoder's pixels came from the decoder")


class BadRecording(unittest.TestCase):
    def test_a_file_that_is_not_a_recording_is_refused_at_start_with_its_name(self):
        tmp = tempfile.mkdtemp(prefix="tether-replay-bad-")
        self.addCleanup(shutil.rmtree, tmp, True)
        bad = os.path.join(tmp, "not-video.bin")
        with open(bad, "wb") as f:
            f.write(b"GIF89a" + bytes(100))
        with self.assertRaises(RuntimeError) as e:
            HttpsDaemon(config_text=f'video = "replay"\n[replay]\npath = "{bad}"\n')
        self.assertIn("not-video.bin", str(e.exception))
        self.assertIn("neither an H.264", str(e.exception))


if __name__ == "__main__":
    unittest.main()
