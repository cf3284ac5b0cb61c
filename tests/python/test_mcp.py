"""MCP against `tether serve --sim` with the official MCP Python SDK (PyPI `mcp` 2.x, installed by
tests/run): Streamable HTTP at `/mcp`, stdio `tether mcp` over the control socket, and the
`tether mcp --url` bridge. The screen is read from the screenshot's own pixels (a PNG decoded
here), and what the taps did is checked with the sim's state.
"""

import asyncio
import json
import os
import select
import socket
import ssl
import struct
import subprocess
import tempfile
import time
import unittest
import zlib
import base64
import shutil

import httpx2
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from test_control_socket import TETHER, Client, open_task
from test_https import HttpsDaemon, wait_for

BUTTON = (0, 122, 255)
APP0 = (60, 90, 200)
FIELD = (229, 229, 234)
DEAD = (174, 174, 178)


def decode_png(data):
    """(width, height, rows of (r, g, b)) of an 8-bit RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", None
    while pos < len(data):
        (n,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(width)])
        prev = line
    return width, height, rows


def find_colour(png, colour, tolerance=18, min_run=20):
    """Centre (x, y) of the topmost block of pixels near `colour`, in image pixels."""
    _, _, rows = decode_png(png)
    near = lambda p: all(abs(p[i] - colour[i]) <= tolerance for i in range(3))
    # Only runs of at least `min_run` pixels count: the edges of anti-aliased text pass
    # through many colours, a control's fill is a solid run.
    hits = []
    for y, row in enumerate(rows):
        run = []
        for x, p in enumerate(row):
            if near(p):
                run.append((x, y))
                continue
            if len(run) >= min_run:
                hits += run
            run = []
        if len(run) >= min_run:
            hits += run
    assert hits, f"no pixel near {colour} in the screenshot"
    top = hits[0][1]
    block, y = [], top
    while True:
        row = [(x, yy) for x, yy in hits if yy == y]
        if not row:
            break
        block += row
        y += 1
    xs, ys = [x for x, _ in block], [y for _, y in block]
    return (min(xs) + max(xs)) / 2, (min(ys) + max(ys)) / 2


def image_of(result):
    images = [c for c in result.content if c.type == "image"]
    assert len(images) == 1, result.content
    return base64.b64decode(images[0].data)


def text_of(result):
    return "\n".join(c.text for c in result.content if c.type == "text")


def run(coro, timeout=120):
    return asyncio.run(asyncio.wait_for(coro, timeout))


class Mcp(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = HttpsDaemon()
        cls.op = cls.d.cli("token", "add", "mcp-op", "--role", "operate").stdout.strip()
        cls.viewer = cls.d.cli("token", "add", "mcp-view", "--role", "view").stdout.strip()
        cls.url = f"https://localhost:{cls.d.port}/mcp"

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def sim(self):
        return self.d.call({"id": 1, "method": "sim_state"})["result"]

    def element(self, element_id):
        return next(e for e in self.sim()["elements"] if e["id"] == element_id)

    def http_session(self, headers):
        """An async context: an initialized ClientSession over /mcp with these headers."""
        d = self

        class Ctx:
            async def __aenter__(self):
                self.stack = contextlib_stack = __import__("contextlib").AsyncExitStack()
                ctx = ssl.create_default_context(cafile=d.d.ca)
                client = await contextlib_stack.enter_async_context(
                    httpx2.AsyncClient(verify=ctx, headers=headers, timeout=httpx2.Timeout(60, read=300)))
                read, write = await contextlib_stack.enter_async_context(
                    streamable_http_client(d.url, http_client=client))
                session = await contextlib_stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                return session

            async def __aexit__(self, *exc):
                await self.stack.aclose()

        return Ctx()

    def open_task(self, title):
        """A task leased by a socket connection of this test: (client, id, token)."""
        c, task, token = open_task(self.d.socket, title)
        self.addCleanup(c.close)
        return c, task, token

    def control(self, task, action):
        status, _, body = self.d.request("POST", f"/api/tasks/{task}/{action}", body={}, token=self.op)
        self.assertEqual(status, 200, body)
        return body

    async def open_demo_app(self, s):
        if self.sim()["screen"] != "app":
            shot = await s.call_tool("screenshot", {})
            x, y = find_colour(image_of(shot), APP0, tolerance=10)
            r = await s.call_tool("tap", {"x": x, "y": y})
            self.assertFalse(r.is_error, text_of(r))
            wait_for("the demo app to open", lambda: self.sim()["screen"] == "app")
        # The sim's state flips at the tap; its next rendered frame shows it. Until then a
        # screenshot may still show the home screen (a busy machine renders late).
        for _ in range(100):
            shot = await s.call_tool("screenshot", {})
            try:
                find_colour(image_of(shot), BUTTON)
                return
            except AssertionError:
                await asyncio.sleep(0.05)
        self.fail("no screenshot showed the demo app's button")

    def test_tools_follow_the_role_and_a_tap_found_in_the_pixels_lands(self):
        async def body():
            async with self.http_session({"Authorization": f"Bearer {self.viewer}"}) as s:
                names = [t.name for t in (await s.list_tools()).tools]
                self.assertEqual(sorted(names), [
                    "find_text", "screenshot", "status", "wait_for_change", "wait_for_settle", "wait_for_text"])
                r = await s.call_tool("tap", {"x": 1, "y": 1})
                self.assertTrue(r.is_error)
                self.assertIn("PERMISSION_DENIED", text_of(r))
            async with self.http_session({"Authorization": f"Bearer {self.op}"}) as s:
                tools = {t.name: t for t in (await s.list_tools()).tools}
                for name in ["tap", "swipe", "type_text", "open_app", "wait_for_change", "screenshot"]:
                    self.assertIn(name, tools)
                self.assertNotIn("confirm", tools, "confirm is for a task's agent")
                self.assertEqual(tools["tap"].input_schema["required"], ["x", "y"])
                r = await s.call_tool("tap", {"x": 5, "y": 5})
                self.assertTrue(r.is_error)
                self.assertIn("screenshot first", text_of(r), "never a tap without a screenshot")
                await self.open_demo_app(s)
                shot = await s.call_tool("screenshot", {})
                png = image_of(shot)
                self.assertLess(len(png), 1 << 20)
                w, h, _ = decode_png(png)
                self.assertLessEqual(max(w, h), 1568)
                self.assertIn("observation_id", text_of(shot))
                before = self.element("button0")["taps"]
                x, y = find_colour(png, BUTTON)
                r = await s.call_tool("tap", {"x": x, "y": y})
                self.assertFalse(r.is_error, text_of(r))
                self.assertIn("latest screenshot", text_of(r), "it says which screenshot it used")
                wait_for("button0 to count the tap", lambda: self.element("button0")["taps"] == before + 1)
                # Type into the field: tap it (found by colour), then type.
                fx, fy = find_colour(png, FIELD, tolerance=8)
                r = await s.call_tool("tap", {"x": fx, "y": fy})
                self.assertFalse(r.is_error, text_of(r))
                wait_for("the field to take focus", lambda: self.element("text_field")["focused"])
                r = await s.call_tool("type_text", {"text": "hello mcp"})
                self.assertFalse(r.is_error, text_of(r))
                # (Other tests of this class may have typed into the field before.)
                wait_for("the text to arrive", lambda: self.element("text_field")["text"].endswith("hello mcp"))
                # Bad arguments are tool errors with a code, and the server goes on.
                r = await s.call_tool("tap", {"x": "left", "y": 2})
                self.assertTrue(r.is_error)
                self.assertIn("INVALID_PARAMS", text_of(r))
                r = await s.call_tool("status", {})
                self.assertFalse(r.is_error, text_of(r))
        run(body())

    def test_a_flow_needs_no_screenshot_between_steps(self):
        """Act and verify over MCP: each answer says what changed and carries the next
        observation (and, asked, the picture), so one screenshot starts a whole flow."""
        async def body():
            async with self.http_session({"Authorization": f"Bearer {self.op}"}) as s:
                r = await s.call_tool("home", {"expect": "any"})
                self.assertFalse(r.is_error, text_of(r))
                wait_for("the home screen", lambda: self.sim()["screen"] == "home")
                r = await s.call_tool("wait_for_settle", {})
                self.assertIn("settled", text_of(r))
                shot = await s.call_tool("screenshot", {})
                x, y = find_colour(image_of(shot), APP0, tolerance=10)
                # The app opens (an animation); the answer waits it out and shows the result.
                r = await s.call_tool("tap", {"x": x, "y": y, "return_image": "full"})
                self.assertFalse(r.is_error, text_of(r))
                text = text_of(r)
                self.assertIn("The screen changed in x", text)
                self.assertIn("settled", text)
                self.assertIn("New observation", text)
                self.assertIn("no screenshot needed", text)
                self.assertEqual(self.sim()["screen"], "app")
                # The field, found in the picture that came with the answer.
                fx, fy = find_colour(image_of(r), FIELD, tolerance=6)
                r = await s.call_tool("tap", {"x": fx, "y": fy})
                self.assertFalse(r.is_error, text_of(r))
                self.assertIn("The screen changed", text_of(r))
                self.assertTrue(self.element("text_field")["focused"], "the tap landed after the animation")
                r = await s.call_tool("type_text", {"text": "no looking"})
                self.assertFalse(r.is_error, text_of(r))
                self.assertIn("The screen changed in x", text_of(r))
                self.assertTrue(self.element("text_field")["text"].endswith("no looking"), self.element("text_field"))
                # A control that does nothing: the tool says so, with what to do.
                r = await s.call_tool("screenshot", {})
                dx, dy = find_colour(image_of(r), DEAD, tolerance=6)
                r = await s.call_tool("tap", {"x": dx, "y": dy})
                self.assertTrue(r.is_error, text_of(r))
                self.assertIn("NO_VISIBLE_EFFECT", text_of(r))
                self.assertIn("did not change", text_of(r))
                self.assertIn("Next: ", text_of(r))
        run(body())

    def test_a_task_agent_waits_while_paused_and_confirm_is_answered_over_http(self):
        lease, task, token = self.open_task("mcp agent")
        progress = []

        async def body():
            async with self.http_session({"Tether-Task-Token": token}) as agent, \
                    self.http_session({"Authorization": f"Bearer {self.op}"}) as outsider:
                names = [t.name for t in (await agent.list_tools()).tools]
                self.assertIn("confirm", names)
                shot = await agent.call_tool("screenshot", {})
                self.assertFalse(shot.is_error, text_of(shot))
                # The one outside the task may look but not touch, and is told why.
                self.assertFalse((await outsider.call_tool("screenshot", {})).is_error)
                r = await outsider.call_tool("tap", {"x": 10, "y": 10})
                self.assertTrue(r.is_error)
                self.assertIn("TASK_RUNNING", text_of(r))
                self.assertIn("mcp agent", text_of(r), "the refusal names the task")
                # Pause: the agent's tap waits (and says why), resume lets it finish.
                self.control(task, "pause")

                async def note(p, total, message):
                    progress.append(message)

                tap = asyncio.ensure_future(agent.call_tool("home", {"expect": "any"}, progress_callback=note))
                deadline = time.time() + 30
                while not any("paused" in (m or "") for m in progress):
                    self.assertFalse(tap.done(), "the call waited instead of failing")
                    self.assertLess(time.time(), deadline, f"no progress saying paused: {progress}")
                    await asyncio.sleep(0.1)
                self.control(task, "resume")
                r = await asyncio.wait_for(tap, 30)
                self.assertFalse(r.is_error, text_of(r))
                # confirm waits for a person; the HTTP task API answers it.
                ask = asyncio.ensure_future(agent.call_tool("confirm", {"question": "delete the album?"}))
                deadline = time.time() + 30
                while True:
                    status, _, body = self.d.request("GET", "/api/status", token=self.op)
                    q = (body.get("task") or {}).get("question")
                    if q:
                        break
                    self.assertLess(time.time(), deadline, "the question never showed")
                    await asyncio.sleep(0.1)
                self.assertEqual(q["text"], "delete the album?")
                self.control(task, "approve")
                r = await asyncio.wait_for(ask, 30)
                self.assertFalse(r.is_error, text_of(r))
                self.assertIn("approved", text_of(r))
        run(body())

    def test_hosts_and_origins(self):
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {self.op}"}
        lan = socket.gethostname().split(".")[0] + ".local"
        status, _, _ = self.d.request("POST", "/mcp", body=init, headers=headers, host=f"{lan}:{self.d.port}")
        self.assertEqual(status, 200, f"a LAN name ({lan}) reaches /mcp")
        status, _, _ = self.d.request("POST", "/mcp", body=init, headers=headers, host="evil.example")
        self.assertEqual(status, 403)
        h = dict(headers, Origin="https://evil.example")
        status, _, body = self.d.request("POST", "/mcp", body=init, headers=h)
        self.assertEqual(status, 403, body)
        status, _, _ = self.d.request("POST", "/mcp", body=init, headers={"Accept": headers["Accept"]})
        self.assertEqual(status, 401, "no token, no MCP")

    def test_the_mcp_inspector_lists_the_tools(self):
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        inspector = os.environ.get("TETHER_INSPECTOR") or os.path.join(
            cache, "tether-npm", "node_modules", ".bin", "mcp-inspector")
        self.assertTrue(os.access(inspector, os.X_OK), f"no MCP Inspector at {inspector}: tests/run installs it")
        env = dict(os.environ, NODE_EXTRA_CA_CERTS=self.d.ca,
                   MCP_CATALOG_PATH=os.path.join(self.d.dir, "inspector.json"))
        r = subprocess.run([inspector, "--cli", self.url, "--transport", "http", "--method", "tools/list",
                            "--header", f"Authorization: Bearer {self.viewer}"],
                           capture_output=True, text=True, env=env, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        names = sorted(t["name"] for t in json.loads(r.stdout)["tools"])
        self.assertEqual(names, [
            "find_text", "screenshot", "status", "wait_for_change", "wait_for_settle", "wait_for_text"])

    def test_stdio_on_the_appliance_and_the_url_bridge(self):
        env = self.d.env()

        async def use(params):
            async with stdio_client(params) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    names = [t.name for t in (await s.list_tools()).tools]
                    self.assertIn("tap", names)
                    shot = await s.call_tool("screenshot", {})
                    self.assertFalse(shot.is_error, text_of(shot))
                    decode_png(image_of(shot))
                    r = await s.call_tool("home", {"expect": "any"})
                    self.assertFalse(r.is_error, text_of(r))
                    return names

        local = run(use(StdioServerParameters(command=TETHER, args=["mcp"], env=env)))
        bridged_env = dict(env, TETHER_TOKEN=self.op, TETHER_FINGERPRINT=self.d.fingerprint)
        bridged = run(use(StdioServerParameters(command=TETHER, args=["mcp", "--url", self.url], env=bridged_env)))
        self.assertEqual(local, bridged, "the same tools on both paths")

    def test_the_bridge_answers_when_the_appliance_is_gone(self):
        # A port nothing listens on: every request gets a JSON-RPC error at once.
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        env = dict(self.d.env(), TETHER_TOKEN=self.op, TETHER_FINGERPRINT=self.d.fingerprint)
        p = subprocess.Popen([TETHER, "mcp", "--url", f"https://127.0.0.1:{port}"], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        init = {"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        out, err = p.communicate(json.dumps(init).encode() + b"\n", timeout=30)
        reply = json.loads(out.splitlines()[0])
        self.assertEqual(reply["id"], 7)
        self.assertIn("cannot reach", reply["error"]["message"])
        self.assertEqual(p.returncode, 0, err)


class BridgeProcess:
    """`tether mcp --url` driven by hand, JSON-RPC line by line."""

    def __init__(self, url, env):
        self.p = subprocess.Popen([TETHER, "mcp", "--url", url], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.buf = b""
        self.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        assert "result" in self.reply(0)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.p.stdin.write(json.dumps(message).encode() + b"\n")
        self.p.stdin.flush()

    def reply(self, rid, timeout=60):
        """The next message answering `rid` (progress and other messages are skipped)."""
        deadline = time.time() + timeout
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                message = json.loads(line)
                if message.get("id") == rid:
                    return message
            left = deadline - time.time()
            if left <= 0 or not select.select([self.p.stdout], [], [], left)[0]:
                raise AssertionError(f"no answer to {rid} within {timeout} s")
            chunk = os.read(self.p.stdout.fileno(), 65536)
            if not chunk:
                raise AssertionError(f"the bridge exited before answering {rid}: {self.p.stderr.read().decode()}")
            self.buf += chunk

    def call_tool(self, rid, name, arguments=None):
        self.send({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                   "params": {"name": name, "arguments": arguments or {}}})
        return self.reply(rid)

    def close(self):
        """Closes stdin (the bridge deletes its session and exits); its stderr."""
        self.p.stdin.close()
        self.p.wait(timeout=30)
        err = self.p.stderr.read().decode()
        self.p.stdout.close()
        self.p.stderr.close()
        return err

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        for f in (self.p.stdin, self.p.stdout, self.p.stderr):
            if not f.closed:
                f.close()


class SessionLoss(unittest.TestCase):
    """MCP sessions are forgotten when idle; the bridge initializes again by itself, also
    across a restart of the appliance on the same port."""

    IDLE_S = 1

    def start(self, config_text=None, **kw):
        self.d = HttpsDaemon(config_text=config_text, **kw)
        self.addCleanup(lambda: self.d.stop())
        self.op = self.d.cli("token", "add", "bridge", "--role", "operate").stdout.strip()

    def bridge(self):
        # At info, the bridge says when it initializes again.
        env = dict(self.d.env(), TETHER_TOKEN=self.op, TETHER_FINGERPRINT=self.d.fingerprint, RUST_LOG="info")
        b = BridgeProcess(f"https://localhost:{self.d.port}/mcp", env)
        self.addCleanup(b.kill)
        return b

    def assert_ok(self, reply):
        self.assertIn("result", reply, reply)
        self.assertFalse(reply["result"].get("isError"), reply)

    def test_an_idle_session_is_forgotten_and_the_bridge_initializes_again(self):
        self.start(f"[https]\nmcp_session_idle_s = {self.IDLE_S}\n")
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        headers = {"Accept": "application/json, text/event-stream"}
        status, h, _ = self.d.request("POST", "/mcp", body=init, headers=headers, token=self.op)
        self.assertEqual(status, 200)
        session = h["mcp-session-id"]
        b = self.bridge()
        self.assert_ok(b.call_tool(1, "status"))
        # Idleness is what is under test: nothing may touch either session meanwhile.
        time.sleep(self.IDLE_S + 2)
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        status, _, _ = self.d.request("POST", "/mcp", body=listing, token=self.op,
                                      headers=dict(headers, **{"mcp-session-id": session}))
        self.assertEqual(status, 404, "an idle session is forgotten")
        self.assert_ok(b.call_tool(2, "status"))
        err = b.close()
        self.assertIn("initializing again", err)
        self.assertEqual(b.p.returncode, 0, err)

    def test_the_bridge_carries_on_across_a_restart(self):
        self.start()
        b = self.bridge()
        self.assert_ok(b.call_tool(1, "status"))
        self.assert_ok(b.call_tool(2, "home", {"expect": "any"}))
        port, data = self.d.port, self.d.dir
        self.d.stop()
        wait_for("the old socket to go", lambda: not os.path.exists(self.d.socket))
        # The same data (tokens, CA) and port: the bridge's pooled connections are dead
        # and its session unknown; the next calls must still just work.
        self.d = HttpsDaemon(listen=f"127.0.0.1:{port}", data_dir=data)
        self.assert_ok(b.call_tool(3, "status"))
        self.assert_ok(b.call_tool(4, "home", {"expect": "any"}))
        err = b.close()
        self.assertEqual(b.p.returncode, 0, err)


class InsideTaskRun(unittest.TestCase):
    """`tether task run --url` gives its command what `tether mcp --url` needs, and only the task's token."""

    def setUp(self):
        self.d = HttpsDaemon()
        self.op = self.d.cli("token", "add", "runner", "--role", "operate").stdout.strip()
        self.out = tempfile.mkdtemp(prefix="tether-mcp-cmd-")
        os.chmod(self.out, 0o777)

    def tearDown(self):
        self.d.stop()

    def test_the_childs_mcp_calls_act_but_it_cannot_approve(self):
        env = dict(os.environ, XDG_CONFIG_HOME=tempfile.mkdtemp(), TETHER_SOCKET="/nonexistent",
                   TETHER_TOKEN=self.op, TETHER_FINGERPRINT=self.d.fingerprint)
        env.pop("TETHER_TASK_TOKEN", None)
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "child", "version": "1"}}}
        lines = [init, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                 {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "home", "arguments": {"expect": "any"}}},
                 {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "screenshot", "arguments": {}}}]
        requests = os.path.join(self.out, "requests.jsonl")
        with open(requests, "w") as f:
            f.write("".join(json.dumps(m) + "\n" for m in lines))
        os.chmod(requests, 0o644)
        out = self.out
        # The child may also try the HTTP task API directly with its own token (curl, trusting
        # the appliance's CA from a copy it can read).
        ca = os.path.join(out, "ca.crt")
        shutil.copy(self.d.ca, ca)
        os.chmod(ca, 0o644)
        direct = (f"curl -s -o /dev/null -w '%{{http_code}}' --cacert {ca} -X POST -H 'Content-Type: application/json' "
                  f"-H \"Tether-Task-Token: $TETHER_TASK_TOKEN\" -d '{{}}' "
                  f"https://localhost:{self.d.port}/api/tasks/$TETHER_TASK_ID")
        script = (f'{TETHER} mcp --url "$TETHER_MCP_URL" < {requests} > {out}/mcp.out 2> {out}/mcp.err; '
                  f"{TETHER} task approve $TETHER_TASK_ID > {out}/approve.out 2>&1; echo $? > {out}/approve.rc; "
                  f"{direct}/approve > {out}/direct-approve.code; {direct}/pause > {out}/direct-pause.code")
        agent = ["--agent-user", "nobody"] if os.geteuid() == 0 else []
        r = subprocess.run([TETHER, "task", "run", "--url", f"https://localhost:{self.d.port}", "--title", "mcp child",
                            *agent, "--", "sh", "-c", script], capture_output=True, text=True, env=env, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(f"{out}/mcp.out") as f:
            replies = {m.get("id"): m for m in map(json.loads, f.read().splitlines())}
        with open(f"{out}/mcp.err") as f:
            err = f.read()
        self.assertFalse(replies[2]["result"].get("isError"), (replies[2], err))
        self.assertIn("home: submitted", replies[2]["result"]["content"][0]["text"])
        self.assertEqual(replies[3]["result"]["content"][0]["type"], "image")
        with open(f"{out}/approve.rc") as f:
            self.assertNotEqual(f.read().strip(), "0", "approve from inside the task fails")
        for action in ["approve", "pause"]:
            with open(f"{out}/direct-{action}.code") as f:
                self.assertEqual(f.read().strip(), "403", f"a direct HTTP {action} with the task token is refused")
        # The steps were the task's: its journal has them.
        c = Client(self.d.socket)
        try:
            tasks = c.call({"id": 1, "method": "task_list"})["result"]["tasks"]
            task = next(t for t in tasks if t["title"] == "mcp child")
            events = c.call({"id": 2, "method": "task_events", "task": task["id"]})["result"]["events"]
        finally:
            c.close()
        self.assertTrue(any(e.get("kind") == "step" for e in events), events[-5:])


class Verbs(unittest.TestCase):
    """The same catalog as CLI verbs."""

    @classmethod
    def setUpClass(cls):
        cls.d = HttpsDaemon()

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def test_screenshot_tap_type_and_help(self):
        out = os.path.join(self.d.dir, "shot.png")
        r = self.d.cli("screenshot", "-o", out)
        self.assertIn("observation_id", r.stdout)
        with open(out, "rb") as f:
            w, h, _ = decode_png(f.read())
        self.assertGreater(w, 0)
        # The Demo app's icon in that picture (a blank spot answers NO_VISIBLE_EFFECT).
        r = self.d.cli("tap", "80", "150")
        self.assertIn("tap: submitted", r.stdout)
        self.assertIn("a fresh screenshot", r.stdout)
        r = self.d.cli("type", "é€", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("UNTYPEABLE_TEXT", r.stderr)
        r = self.d.cli("tap", "--help")
        self.assertIn("pixels", r.stdout)
        self.assertIn("--observation-id", r.stdout)
        r = self.d.cli("swipe", "1", "2", check=False)
        self.assertNotEqual(r.returncode, 0, "missing arguments are refused by the parser")
        r = self.d.cli("--help")
        self.assertIn("screenshot", r.stdout)


if __name__ == "__main__":
    unittest.main()
