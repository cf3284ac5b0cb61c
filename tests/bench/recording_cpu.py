"""Bench: what recording a task costs the daemon, in % of one core, at 1080p30 capture:
H.264 stored as it comes (passthrough), MJPEG decoded and encoded to 720p at 10 fps, and
the sim's raw 1080p frames encoded the same way. Each case measures the daemon's CPU
(utime + stime from /proc) over the same window with a task open, first without and then
with `record: true`; the difference is the recording's cost. Also the recording's bytes a
second and the daemon's memory.

The compressed captures are recordings (Debian's ffmpeg, testsrc2 at 1920x1080, 30 fps:
a moving picture, the worst case for an encoder) played by `video = "replay"`.

    cargo build --release -p tether && \\
      TETHER_BIN=target/release/tether python3 tests/bench/recording_cpu.py
"""

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
sys.path.insert(0, os.path.dirname(__file__))

from passthrough_cpu import cpu_seconds, record  # noqa: E402
from test_control_socket import Client  # noqa: E402
from test_https import HttpsDaemon  # noqa: E402

SECONDS = float(os.environ.get("BENCH_SECONDS", "15"))


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kib / 1024


def window(d, record_it):
    """CPU % over SECONDS with a task open (recorded or not); the recording's bytes/s."""
    c = Client(d.socket, timeout=30)
    opened = c.call({"id": 1, "method": "task_open", "title": "bench", "events": False, "record": record_it})
    assert opened.get("ok"), opened
    time.sleep(2)  # the recorder (if any) past its first keyframe and its encoder's start
    c0, t0 = cpu_seconds(d.proc.pid), time.time()
    time.sleep(SECONDS)
    elapsed = time.time() - t0
    cpu = (cpu_seconds(d.proc.pid) - c0) / elapsed * 100
    rss = rss_mib(d.proc.pid)
    done = c.call({"id": 2, "method": "task_finish", "task": opened["result"]["id"], "ok": True})
    assert done.get("ok"), done
    rate = 0.0
    if record_it:
        rec = c.call({"id": 3, "method": "task_report", "task": opened["result"]["id"]})["result"]["recording"]
        assert rec["state"] == "complete", rec
        rate = rec["bytes"] / (rec["duration_ms"] / 1000)
    c.close()
    return cpu, rate, rss


def run(label, cfg):
    d = HttpsDaemon(config_text=cfg)
    try:
        time.sleep(2)  # the source running
        base, _, rss0 = window(d, False)
        rec, rate, rss1 = window(d, True)
        print(f"{label}: daemon CPU {base:.1f}% without recording, {rec:.1f}% recording: "
              f"+{rec - base:.1f}% of a core; recording {rate * 8 / 1e6:.2f} Mbit/s; "
              f"RSS {rss0:.0f} -> {rss1:.0f} MiB", flush=True)
    finally:
        d.stop()


if __name__ == "__main__":
    tmp = tempfile.mkdtemp(prefix="tether-bench-")
    os.chmod(tmp, 0o755)
    for codec in ["h264", "mjpeg"]:
        path = os.path.join(tmp, f"testsrc2-1080p.{codec}")
        record(path, codec)
        how = "stored as it comes" if codec == "h264" else "decoded, encoded at 1280x720, 10 fps"
        run(f"1080p30 {codec} capture, {how}", f'video = "replay"\n[replay]\npath = "{path}"\nfps = 30\n')
    run("sim 1080p raw frames, the phone's picture (498x1080) encoded at 10 fps", "")
