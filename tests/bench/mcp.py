"""Bench: MCP over HTTPS against `tether serve --sim`, with the official MCP Python SDK.

1. Tool-call overhead: `status` (no gesture, no picture) as an MCP tool call over `/mcp`,
   against the same daemon call over `POST /api/rpc` on a kept-alive connection; p50/p99 of
   each and of the difference.
2. A scripted 10-step flow (screenshot, open the demo app, tap a button, tap the field, type,
   scroll the list, go home, ...) over MCP: wall time, and misses (taps the sim did not
   register where they were aimed).

    cargo build --release -p tether && TETHER_BIN=target/release/tether python3 tests/bench/mcp.py
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

from test_control_socket import Client  # noqa: E402
from test_https import HttpsDaemon  # noqa: E402
from test_mcp import APP0, BUTTON, FIELD, find_colour, image_of, text_of  # noqa: E402

CALLS = int(os.environ.get("BENCH_CALLS", "300"))


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
        flow = await scripted_flow(d, s)
        return times, flow


def sim(d):
    c = Client(d.socket, timeout=15)
    try:
        return c.call({"id": 1, "method": "sim_state"})["result"]
    finally:
        c.close()


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
    bx, by = find_colour(png, BUTTON)
    await call("tap", {"x": bx, "y": by})                                     # 5
    fx, fy = find_colour(png, FIELD, tolerance=8)
    await call("tap", {"x": fx, "y": fy})                                     # 6
    await call("type_text", {"text": "bench"})                                # 7
    misses += element(d, "button0")["taps"] != before + 1
    misses += element(d, "text_field")["text"] != "bench"
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
        mcp, (wall, misses, steps) = asyncio.run(mcp_run(d, token))
        p50_rpc, p50_mcp = statistics.median(rpc), statistics.median(mcp)
        print(f"status over /api/rpc: p50 {p50_rpc:.2f} ms, p99 {pct(rpc, 0.99):.2f} ms ({CALLS} calls)")
        print(f"status over /mcp:     p50 {p50_mcp:.2f} ms, p99 {pct(mcp, 0.99):.2f} ms ({CALLS} calls)")
        print(f"MCP overhead (p50 difference): {p50_mcp - p50_rpc:.2f} ms")
        print(f"10-step flow over MCP: {wall:.2f} s wall, {steps} steps, {misses} misses")
    finally:
        d.stop()


if __name__ == "__main__":
    main()
