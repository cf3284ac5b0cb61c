"""Bench: capture -> CDV1 message at a WebSocket client, added latency at 720p30 and 1080p30.

Runs a real `tether serve --sim` per size (capture at 30 fps), opens `/api/video` over TLS
with the `websockets` client, acks every frame, and measures, per frame, the client's
CLOCK_MONOTONIC at receipt minus the capture time in the CDV1 header (same machine, same
clock). The pointer moves all the time so every frame differs.

    cargo build --release -p tether && \\
      TETHER_BIN=target/release/tether python3 tests/bench/video_ws.py
"""

import json
import os
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))

from websockets.sync.client import connect  # noqa: E402

from test_control_socket import Client  # noqa: E402
from test_https import HttpsDaemon  # noqa: E402

SECONDS = float(os.environ.get("BENCH_SECONDS", "10"))


def run(width, height):
    cfg = f"[sim_phone]\ncapture_width = {width}\ncapture_height = {height}\nfps = 30\n"
    d = HttpsDaemon(config_text=cfg)
    try:
        c = Client(d.socket, timeout=15)
        stop = threading.Event()

        def move():
            mover = Client(d.socket, timeout=15)
            shot = mover.call({"id": 0, "method": "screenshot", "max_edge": 256})["result"]["metadata"]
            w, obs = shot["image_size"]["width"], shot["observation_id"]
            x, i = 10, 0
            while not stop.is_set():
                i += 1
                x = 10 if x > w - 20 else x + 3
                mover.call({"id": i, "method": "action", "operation_id": f"m{i}", "observation_id": obs, "verify": False,
                            "action": {"type": "move", "x": x, "y": 100}})
                time.sleep(0.01)

        opened = c.call({"id": 1, "method": "video_open"})["result"]
        s = connect(f"wss://localhost:{d.port}/api/video", ssl=d.context(),
                    origin=f"https://localhost:{d.port}", max_size=8 << 20)
        s.send(json.dumps({"ticket": opened["ticket"]}))
        json.loads(s.recv(timeout=10))
        t = threading.Thread(target=move, daemon=True)
        t.start()
        lat, start, frames = [], time.time(), 0
        while time.time() - start < SECONDS:
            m = s.recv(timeout=10)
            now_us = time.monotonic_ns() // 1000
            _, gen, seq, at, _ = struct.unpack(">IIIQI", m[:24])
            s.send(json.dumps({"type": "ack", "generation": gen, "sequence": seq}))
            frames += 1
            if frames > 5:  # past the first IDR's encoder start-up
                lat.append((now_us - at) / 1000)
        fps = frames / (time.time() - start)
        stop.set()
        s.close()
        lat.sort()
        return fps, lat[len(lat) // 2], lat[int(len(lat) * 0.99)], len(lat)
    finally:
        d.stop()


if __name__ == "__main__":
    for w, h in [(1280, 720), (1920, 1080)]:
        fps, p50, p99, n = run(w, h)
        print(f"capture -> CDV1 at the client, {h}p30: p50 {p50:.1f} ms, p99 {p99:.1f} ms, {fps:.1f} fps, {n} frames")
