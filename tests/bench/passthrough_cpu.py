"""Bench: the daemon's CPU per second of 1080p30 compressed capture, with two viewers and one
screenshot a second: passthrough (the capture's own bytes to viewers, pixels decoded only
for the screenshot) against the old transcode (`passthrough = false`: every picture
decoded, then encoded again as H.264 for the viewers).

The capture is a recording (Debian's ffmpeg, testsrc2 at 1920x1080, 30 fps) played by
`video = "replay"`: MJPEG (what most UVC HDMI dongles send) and H.264. CPU is the daemon's
utime + stime from /proc over the measured window, in % of one core.

    cargo build --release -p tether && \\
      TETHER_BIN=target/release/tether python3 tests/bench/passthrough_cpu.py
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))

from websockets.exceptions import ConnectionClosed  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from test_control_socket import Client  # noqa: E402
from test_https import HttpsDaemon  # noqa: E402

SECONDS = float(os.environ.get("BENCH_SECONDS", "15"))
TICKS = os.sysconf("SC_CLK_TCK")


def record(path, codec):
    args = {"mjpeg": ["-pix_fmt", "yuvj420p", "-c:v", "mjpeg", "-q:v", "5", "-f", "mjpeg"],
            "h264": ["-pix_fmt", "yuv420p", "-c:v", "libx264", "-profile:v", "main", "-bf", "0", "-g", "60",
                     "-f", "h264"]}[codec]
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                    "testsrc2=size=1920x1080:rate=30", "-frames:v", "150", *args, path], check=True)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def viewer(d, token, stop, counts, k):
    c = Client(d.socket, timeout=15)
    opened = c.call({"id": 1, "method": "video_open"})["result"]
    s = connect(f"wss://localhost:{d.port}/api/video", ssl=d.context(),
                origin=f"https://localhost:{d.port}", max_size=16 << 20)
    s.send(json.dumps({"ticket": opened["ticket"]}))
    json.loads(s.recv(timeout=10))
    while not stop.is_set():
        try:
            m = s.recv(timeout=10)
        except ConnectionClosed:
            break  # the daemon stopped at the end of the run
        if isinstance(m, str):
            continue
        gen, seq = int.from_bytes(m[4:8], "big"), int.from_bytes(m[8:12], "big")
        s.send(json.dumps({"type": "ack", "generation": gen, "sequence": seq}))
        counts[k] += 1
    s.close()
    c.close()


def run(path, passthrough):
    cfg = f'video = "replay"\npassthrough = {"true" if passthrough else "false"}\n' \
          f'[replay]\npath = "{path}"\nfps = 30\n'
    d = HttpsDaemon(config_text=cfg)
    try:
        stop = threading.Event()
        counts = [0, 0]
        threads = [threading.Thread(target=viewer, args=(d, None, stop, counts, k), daemon=True) for k in range(2)]
        for t in threads:
            t.start()
        time.sleep(3)  # both viewers past their first IDR, the encoder (if any) warmed up
        shooter = Client(d.socket, timeout=15)
        counts[0] = counts[1] = 0
        c0, t0, shots, i = cpu_seconds(d.proc.pid), time.time(), 0, 0
        while time.time() - t0 < SECONDS:
            i += 1
            r = shooter.call({"id": i, "method": "screenshot", "max_edge": 1024})
            assert r.get("ok"), r
            shots += 1
            time.sleep(max(0.0, t0 + shots - time.time()))
        elapsed = time.time() - t0
        cpu = (cpu_seconds(d.proc.pid) - c0) / elapsed * 100
        status = shooter.call({"id": i + 1, "method": "status"})["result"]["video"]
        stop.set()
        shooter.close()
        return cpu, [n / elapsed for n in counts], shots / elapsed, status["paths"]["viewers"]
    finally:
        d.stop()


if __name__ == "__main__":
    tmp = tempfile.mkdtemp(prefix="tether-bench-")
    os.chmod(tmp, 0o755)
    for codec in ["mjpeg", "h264"]:
        path = os.path.join(tmp, f"testsrc2-1080p.{codec}")
        record(path, codec)
        for passthrough in [True, False]:
            cpu, fps, sps, path_name = run(path, passthrough)
            print(f"1080p30 {codec}, 2 viewers, 1 screenshot/s, {path_name}: daemon CPU {cpu:.0f}% of a core, "
                  f"viewers {fps[0]:.1f}/{fps[1]:.1f} fps, {sps:.2f} screenshots/s")
