"""Bench: MCP over HTTPS against `tether serve --sim`, with the official MCP Python SDK.

1. Tool-call overhead: `status` (no gesture, no picture) as an MCP tool call over `/mcp`
   - with a plain kept-alive HTTP client posting JSON-RPC (what the appliance adds),
   - with the official MCP Python SDK (what an agent in Python sees, its client included),
   - through `tether mcp --url` (the laptop bridge, JSON lines on its stdio),
   against the same daemon call over `POST /api/rpc` on a kept-alive connection; p50/p99.
2. A scripted 10-step flow (screenshot, open the demo app, tap a button, tap the field, type,
   scroll the list, go home, ...) over MCP: wall time, and misses (taps the sim did not
   register where they were aimed).

    cargo build --release -p tether && TETHER_BIN=target/release/tether python3 tests/bench/mcp_calls.py
"""

import asyncio
import contextlib
import http.client
import json
import os
import ssl
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))

import httpx2  # noqa: E402
from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from test_https import HttpsDaemon  # noqa: E402
from test_mcp import APP0, BUTTON, FIELD, BridgeProcess, find_colour, image_of, text_of  # noqa: E402

CALLS = int(os.environ.get("BENCH_CALLS", "300"))
FLOWS = int(os.environ.get("BENCH_FLOWS", "5"))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def rpc_times(d, token):
    ctx = ssl.create_default_context(cafile=d.ca)
    c = http.client.HTTPSConnection("localhost", d.port, context=ctx, timeout=15)
    body = json.dumps({"method": "status"})
    times = []
    for _ in range(CALLS):
        t = time.perf_counter()
        c.request("POST", "/api/rpc", body=body,
                  headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        assert r.status == 200
        times.append((time.perf_counter() - t) * 1000)
    c.close()
    return times


def raw_mcp_times(d, token):
    """tools/call status over /mcp from a plain kept-alive HTTP client (SSE answer read whole)."""
    ctx = ssl.create_default_context(cafile=d.ca)
    c = http.client.HTTPSConnection("localhost", d.port, context=ctx, timeout=15)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}

    def post(message):
        c.request("POST", "/mcp", body=json.dumps(message), headers=headers)
        r = c.getresponse()
        body = r.read()
        assert r.status in (200, 202), (r.status, body)
        return r, body

    r, _ = post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
    headers.update({"mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"})
    post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    times = []
    for i in range(CALLS):
        t = time.perf_counter()
        _, body = post({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                        "params": {"name": "status", "arguments": {}}})
        times.append((time.perf_counter() - t) * 1000)
        assert b'"isError":false' in body, body
    c.close()
    return times


def bridge_times(d, token):
    """tools/call status through `tether mcp --url`, JSON lines on its stdin/stdout."""
    env = dict(d.env(), TETHER_TOKEN=token, TETHER_FINGERPRINT=d.fingerprint)
    b = BridgeProcess(f"https://localhost:{d.port}/mcp", env)
    try:
        times = []
        for i in range(CALLS):
            t = time.perf_counter()
            r = b.call_tool(i + 1, "status")
            times.append((time.perf_counter() - t) * 1000)
            assert not r["result"].get("isError"), r
        return times
    finally:
        b.close()


async def mcp_run(d, token):
    ctx = ssl.create_default_context(cafile=d.ca)
    async with contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(
            httpx2.AsyncClient(verify=ctx, headers={"Authorization": f"Bearer {token}"}, timeout=60))
        read, write = await stack.enter_async_context(
            streamable_http_client(f"https://localhost:{d.port}/mcp", http_client=client))
        s = await stack.enter_async_context(ClientSession(read, write))
        await s.initialize()
        await s.list_tools()
        times = []
        for _ in range(CALLS):
            t = time.perf_counter()
            r = await s.call_tool("status", {})
            times.append((time.perf_counter() - t) * 1000)
            assert not r.is_error, text_of(r)
        flows = [await scripted_flow(d, s) for _ in range(FLOWS)]
        return times, flows


def sim(d):
    return d.call({"id": 1, "method": "sim_state"})["result"]


def element(d, eid):
    return next(e for e in sim(d)["elements"] if e["id"] == eid)


async def scripted_flow(d, s):
    """Ten steps; returns (wall seconds, misses, steps)."""
    misses, steps = 0, 0
    t0 = time.perf_counter()

    async def call(name, args=None):
        nonlocal steps
        steps += 1
        r = await s.call_tool(name, args or {})
        assert not r.is_error, f"{name}: {text_of(r)}"
        return r

    async def settle():
        await call("wait_for_change", {"timeout_ms": 2000})

    shot = await call("screenshot")                                           # 1
    x, y = find_colour(image_of(shot), APP0, tolerance=10)
    await call("tap", {"x": x, "y": y})                                       # 2
    await settle()                                                            # 3
    misses += sim(d)["screen"] != "app"
    shot = await call("screenshot")                                           # 4
    png = image_of(shot)
    before = element(d, "button0")["taps"]
    text_before = element(d, "text_field")["text"]
    bx, by = find_colour(png, BUTTON)
    await call("tap", {"x": bx, "y": by})                                     # 5
    fx, fy = find_colour(png, FIELD, tolerance=8)
    await call("tap", {"x": fx, "y": fy})                                     # 6
    await call("type_text", {"text": "bench"})                                # 7
    misses += element(d, "button0")["taps"] != before + 1
    # The field keeps its text across visits of the app: the new text goes after it.
    misses += element(d, "text_field")["text"] != text_before + "bench"
    await call("scroll", {"direction": "down"})                               # 8
    await call("home")                                                        # 9
    await call("screenshot")                                                  # 10
    misses += sim(d)["screen"] != "home"
    return time.perf_counter() - t0, misses, steps


def main():
    d = HttpsDaemon()
    try:
        token = d.cli("token", "add", "bench", "--role", "operate").stdout.strip()
        rpc = rpc_times(d, token)
        raw = raw_mcp_times(d, token)
        bridged = bridge_times(d, token)
        mcp, flows = asyncio.run(mcp_run(d, token))

        def line(what, xs):
            print(f"{what:<42} p50 {statistics.median(xs):6.2f} ms, p99 {pct(xs, 0.99):6.2f} ms ({len(xs)} calls)")

        line("status over /api/rpc (kept-alive HTTP)", rpc)
        line("status tool over /mcp (kept-alive HTTP)", raw)
        line("status tool via tether mcp --url (stdio)", bridged)
        line("status tool over /mcp (MCP Python SDK)", mcp)
        print(f"MCP overhead at the appliance (p50, /mcp - /api/rpc): "
              f"{statistics.median(raw) - statistics.median(rpc):.2f} ms")
        walls = [w for w, _, _ in flows]
        print(f"10-step flow over MCP (SDK), {len(flows)} runs: wall p50 {statistics.median(walls):.2f} s, "
              f"max {max(walls):.2f} s; {sum(m for _, m, _ in flows)} misses in {sum(n for _, _, n in flows)} steps")
    finally:
        d.stop()


if __name__ == "__main__":
    main()
