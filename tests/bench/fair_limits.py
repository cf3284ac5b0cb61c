"""Bench: floods by one view token (and by nobody) against a real `tether serve --sim`, with
the daemon's RSS before, at its peak and after, and a legitimate admin's `status` latency
during each (root on the control socket, and an admin token over HTTPS on a kept-alive
connection), issue 30.

Floods (each BENCH_SECONDS long, default 10):
- mcp-initialize: 4 kept-alive connections looping MCP `initialize` (view token);
- websockets: 1,000 `/api/ws` connections opened and held (view token);
- sse-streams: 1,024 MCP sessions, each asked for its GET stream (view token);
- video-waits: 20 sockets without credentials reconnecting to `/api/video` at once.

    cargo build --release -p tether && \\
      TETHER_BIN=target/release/tether python3 tests/bench/fair_limits.py

Prints one table; the targets are the issue's (admin p99 <= 100 ms, RSS <= 160 MB).
"""

import http.client
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))

from websockets.sync.client import connect  # noqa: E402

from test_control_socket import Client  # noqa: E402
from test_https import HttpsDaemon  # noqa: E402

SECONDS = float(os.environ.get("BENCH_SECONDS", "10"))
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "flood", "version": "1"}}})


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Watch:
    """Samples the daemon's RSS and the admin's status latency until stopped."""

    def __init__(self, d):
        self.d, self.stop = d, threading.Event()
        self.rss, self.unix_ms, self.https_ms, self.failures = [], [], [], []
        self.threads = [threading.Thread(target=f, daemon=True) for f in (self.sample, self.unix, self.https)]
        for t in self.threads:
            t.start()

    def sample(self):
        while not self.stop.is_set():
            self.rss.append(rss_kib(self.d.proc.pid))
            time.sleep(0.05)

    def unix(self):
        while not self.stop.is_set():
            t0 = time.perf_counter()
            try:
                c = Client(self.d.socket, timeout=10)
                r = c.call({"id": 1, "method": "status"})
                c.close()
                if not r["ok"]:
                    self.failures.append(("unix", r["error"]["code"]))
            except Exception as e:  # noqa: BLE001 - a refusal is what we count
                self.failures.append(("unix", repr(e)))
            self.unix_ms.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.02)

    def https(self):
        conn = None
        while not self.stop.is_set():
            t0 = time.perf_counter()
            try:
                if conn is None:
                    conn = http.client.HTTPSConnection("localhost", self.d.port, context=self.d.context(), timeout=10)
                conn.request("GET", "/api/status", headers={"Authorization": f"Bearer {self.d.admin}"})
                r = conn.getresponse()
                r.read()
                if r.status != 200:
                    self.failures.append(("https", r.status))
            except Exception as e:  # noqa: BLE001
                self.failures.append(("https", repr(e)))
                conn = None
            self.https_ms.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.02)

    def done(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=15)


def pct(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * p / 100))]


def mcp_initialize(d, token, stop, count):
    conn = http.client.HTTPSConnection("localhost", d.port, context=d.context(), timeout=10)
    while not stop.is_set():
        try:
            conn.request("POST", "/mcp", body=INITIALIZE, headers=dict(HEADERS, Authorization=f"Bearer {token}"))
            conn.getresponse().read()
            count[0] += 1
        except Exception:  # noqa: BLE001
            conn = http.client.HTTPSConnection("localhost", d.port, context=d.context(), timeout=10)


def flood_mcp(d, token, stop):
    count = [0]
    threads = [threading.Thread(target=mcp_initialize, args=(d, token, stop, count), daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    stop.wait()
    for t in threads:
        t.join(timeout=15)
    return f"{count[0]} initialize"


def flood_websockets(d, token, stop):
    held, refused = [], 0
    for _ in range(1000):
        if stop.is_set():
            break
        try:
            w = connect(f"wss://localhost:{d.port}/api/ws", ssl=d.context(),
                        additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=10)
            held.append(w)
        except Exception:  # noqa: BLE001
            refused += 1
    stop.wait()
    for w in held:
        w.close()
    return f"{len(held)} upgraded ({refused} refused before the upgrade)"


def flood_sse(d, token, stop):
    opened, refused, held = 0, 0, []
    for _ in range(1024):
        if stop.is_set():
            break
        try:
            c = http.client.HTTPSConnection("localhost", d.port, context=d.context(), timeout=10)
            c.request("POST", "/mcp", body=INITIALIZE, headers=dict(HEADERS, Authorization=f"Bearer {token}"))
            r = c.getresponse()
            r.read()
            sid = r.headers.get("Mcp-Session-Id")
            c.request("GET", "/mcp", headers={"Accept": "text/event-stream", "Authorization": f"Bearer {token}",
                                              "Mcp-Session-Id": sid or ""})
            r = c.getresponse()
            if r.status == 200:
                opened += 1
                held.append(c)
            else:
                refused += 1
                r.read()
                c.close()
        except Exception:  # noqa: BLE001
            refused += 1
    stop.wait()
    for c in held:
        c.close()
    return f"{opened} streams opened, {refused} refused"


def flood_video(d, _token, stop):
    tries = [0]

    def one():
        while not stop.is_set():
            try:
                s = connect(f"wss://localhost:{d.port}/api/video", ssl=d.context(),
                            origin=f"https://localhost:{d.port}", open_timeout=5)
                tries[0] += 1
                try:
                    s.recv(timeout=5)
                except Exception:  # noqa: BLE001
                    pass
                s.close()
            except Exception:  # noqa: BLE001
                tries[0] += 1

    threads = [threading.Thread(target=one, daemon=True) for _ in range(20)]
    for t in threads:
        t.start()
    stop.wait()
    for t in threads:
        t.join(timeout=15)
    return f"{tries[0]} sockets"


def run(name, flood):
    d = HttpsDaemon()
    try:
        token = d.cli("token", "add", "flooder", "--role", "view").stdout.strip()
        time.sleep(1)  # settle after start (this is a measurement, not a test)
        before = rss_kib(d.proc.pid)
        watch = Watch(d)
        stop = threading.Event()
        result = [None]
        t = threading.Thread(target=lambda: result.__setitem__(0, flood(d, token, stop)), daemon=True)
        t.start()
        time.sleep(SECONDS)
        stop.set()
        t.join(timeout=120)
        time.sleep(2)
        after = rss_kib(d.proc.pid)
        watch.done()
        peak = max(watch.rss + [before, after])
        return (name, result[0], before / 1024, peak / 1024, after / 1024,
                pct(watch.unix_ms, 50), pct(watch.unix_ms, 99), pct(watch.https_ms, 50), pct(watch.https_ms, 99),
                len(watch.failures), watch.failures[:3])
    finally:
        d.stop()


def main():
    rows = [run(name, f) for name, f in (("mcp-initialize", flood_mcp), ("websockets", flood_websockets),
                                         ("sse-streams", flood_sse), ("video-waits", flood_video))]
    print(f"\nfloods of {SECONDS:.0f} s; RSS in MB; admin status latency in ms (root on the socket / admin token "
          "over HTTPS, kept alive)")
    print("| flood | what the flood did | RSS before | peak | after | socket p50 | p99 | HTTPS p50 | p99 | admin "
          "refusals |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]:.0f} | {r[3]:.0f} | {r[4]:.0f} | {r[5]:.1f} | {r[6]:.1f} | {r[7]:.1f} | "
              f"{r[8]:.1f} | {r[9]} |")
        if r[10]:
            print(f"  first refusals: {r[10]}")


if __name__ == "__main__":
    main()
