"""No client can shut out another, and a revocation ends everything (issue 30), against the
real `tether serve --sim` as a hostile LAN client would try it: one view token filling the
sessions, looping MCP `initialize`, holding streams and connections, sockets without any
credentials holding the video waiting places, a revoked token's open sockets, another
caller's MCP session, and a data directory left readable to other users.

Every wait is on a condition with a deadline; the flood numbers (RSS, the admin's latency)
are the benchmark's (tests/bench/fair_limits.py), not asserted here.
"""

import json
import os
import socket
import stat
import subprocess
import tempfile
import threading
import time
import unittest

from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from test_control_socket import Client, Daemon
from test_https import HttpsDaemon, wait_for
from test_websocket import Ws, close_code, quiet_connect_warning

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "fair", "version": "1"}}}


def mcp_post(d, token, message, session=None, method="POST"):
    """One /mcp request on a fresh connection: (status, headers, body text)."""
    h = dict(MCP_HEADERS, Authorization=f"Bearer {token}")
    if session:
        h["Mcp-Session-Id"] = session
    c = d.conn()
    try:
        c.request(method, "/mcp", body=json.dumps(message) if message is not None else None, headers=h)
        r = c.getresponse()
        return r.status, r.headers, r.read().decode(errors="replace")
    finally:
        c.close()


def mcp_session(d, token):
    """A new, initialized MCP session's id."""
    status, headers, body = mcp_post(d, token, INITIALIZE)
    assert status == 200, (status, body)
    sid = headers["Mcp-Session-Id"]
    mcp_post(d, token, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session=sid)
    return sid


def tools_list(d, token, session):
    return mcp_post(d, token, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, session=session)


def open_sse(d, token, session):
    """A standalone MCP stream (GET /mcp): (connection, response), the stream still open."""
    c = d.conn()
    c.request("GET", "/mcp", headers={"Accept": "text/event-stream", "Authorization": f"Bearer {token}",
                                      "Mcp-Session-Id": session})
    return c, c.getresponse()


def holds(d, kind):
    for k in d.status()["limits"]["holds"]:
        if k["kind"] == kind:
            return k
    raise AssertionError(f"no {kind} in status.limits.holds")


class Shares(unittest.TestCase):
    """One daemon; each test makes its own tokens."""

    @classmethod
    def setUpClass(cls):
        quiet_connect_warning()
        cls.d = HttpsDaemon()

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def token(self, name, role):
        secret = self.d.cli("token", "add", name, "--role", role).stdout.strip()
        self.addCleanup(lambda: self.d.cli("token", "revoke", name, check=False))
        return secret

    def test_a_view_token_cannot_fill_the_sessions_and_root_and_others_are_served(self):
        viewer = self.token("filler", "view")
        opened, refused = [], 0
        for _ in range(64):
            w = Ws(self.d, viewer)
            self.addCleanup(w.close)
            # A refused socket gets BUSY and is closed (1013, saying why) at once.
            try:
                r = w.call("hello")
            except ConnectionClosed as e:
                self.assertEqual(e.rcvd.code, 1013)
                self.assertIn("share", e.rcvd.reason)
                refused += 1
                continue
            if r["ok"]:
                opened.append(w)
            else:
                self.assertEqual(r["error"]["code"], "BUSY", r)
                self.assertIn("share", r["error"]["message"])
                refused += 1
        self.assertEqual(len(opened), 16, "a token's share of sessions")
        self.assertEqual(refused, 48)
        # Root on the socket, an admin token over HTTPS and another view token still get in.
        self.assertTrue(self.d.call({"id": 1, "method": "status"})["ok"])
        status, _, _ = self.d.request("GET", "/api/status", token=self.d.admin)
        self.assertEqual(status, 200)
        other = Ws(self.d, self.token("other-viewer", "view"))
        self.addCleanup(other.close)
        self.assertTrue(other.call("hello")["ok"])
        sessions = holds(self.d, "session")
        self.assertEqual(sessions["most_by_one"], 16)
        self.assertEqual(sessions["per_principal"], 16)

    def test_an_initialize_loop_costs_only_the_callers_own_mcp_sessions(self):
        viewer = self.token("looper", "view")
        first = mcp_session(self.d, viewer)
        for _ in range(60):
            status, _, body = mcp_post(self.d, viewer, INITIALIZE)
            self.assertEqual(status, 200, body)
        status, _, body = tools_list(self.d, viewer, first)
        self.assertEqual(status, 404, "the caller's least recently used session made room")
        self.assertIn("initialize a new one", body)
        mcp = holds(self.d, "mcp_session")
        self.assertLessEqual(mcp["most_by_one"], 8, mcp)
        # Everyone else's sessions are untouched, and new ones open.
        operator = self.token("loop-bystander", "operate")
        theirs = mcp_session(self.d, operator)
        status, _, body = tools_list(self.d, operator, theirs)
        self.assertEqual(status, 200, body)

    def test_an_mcp_session_belongs_to_the_caller_that_opened_it(self):
        operator = self.token("owner", "operate")
        viewer = self.token("snoop", "view")
        sid = mcp_session(self.d, operator)
        status, _, _ = tools_list(self.d, viewer, sid)
        self.assertEqual(status, 404, "another token cannot call in it")
        status, _, _ = mcp_post(self.d, viewer, None, session=sid, method="DELETE")
        self.assertEqual(status, 404, "nor end it")
        c, r = open_sse(self.d, viewer, sid)
        self.assertEqual(r.status, 404, "nor read its stream")
        c.close()
        status, _, body = tools_list(self.d, operator, sid)
        self.assertEqual(status, 200, body)
        self.assertIn("screenshot", body)
        status, _, _ = mcp_post(self.d, operator, None, session=sid, method="DELETE")
        self.assertEqual(status, 204)
        self.assertEqual(tools_list(self.d, operator, sid)[0], 404, "ended by its owner")

    def test_an_mcp_message_with_a_repeated_key_is_refused_as_on_every_transport(self):
        operator = self.token("dup-keys", "operate")
        sid = mcp_session(self.d, operator)
        c = self.d.conn()
        h = dict(MCP_HEADERS, Authorization=f"Bearer {operator}")
        h["Mcp-Session-Id"] = sid
        c.request("POST", "/mcp", headers=h,
                  body='{"jsonrpc":"2.0","id":5,"method":"tools/list","method":"tools/call",'
                       '"params":{"name":"screenshot","arguments":{}}}')
        r = c.getresponse()
        body = json.loads(r.read())
        c.close()
        self.assertEqual(r.status, 400, body)
        self.assertEqual(body["error"]["code"], "INVALID_REQUEST")
        self.assertIn("appears twice", body["error"]["message"])

    def test_a_tokens_streams_are_a_share(self):
        viewer = self.token("streamer", "view")
        sessions = [mcp_session(self.d, viewer) for _ in range(8)]
        streams = []
        for sid in sessions:
            c, r = open_sse(self.d, viewer, sid)
            self.addCleanup(c.close)
            self.assertEqual(r.status, 200)
            streams.append((c, r))
        # A ninth stream (a second one in the newest session) is refused: the token's share.
        c, r = open_sse(self.d, viewer, sessions[-1])
        self.addCleanup(c.close)
        body = r.read().decode()
        self.assertEqual(r.status, 503, body)
        self.assertIn("share of streams", body)
        self.assertEqual(holds(self.d, "stream")["most_by_one"], 8)
        # Another token still streams.
        other = self.token("other-streamer", "view")
        c, r = open_sse(self.d, other, mcp_session(self.d, other))
        self.addCleanup(c.close)
        self.assertEqual(r.status, 200)
        # A new session of the full token ends its least recently used one, and that
        # session's stream with it.
        mcp_session(self.d, viewer)
        c0, r0 = streams[0]
        c0.sock.settimeout(10)
        while r0.read(4096):
            pass

    def test_revoking_a_token_ends_its_sockets_video_and_mcp_sessions_at_once(self):
        secret = self.d.cli("token", "add", "victim", "--role", "operate").stdout.strip()
        port = self.d.port
        origin = f"https://localhost:{port}"
        # A Bearer WebSocket, a cookie WebSocket, a video viewer, an MCP session and its stream.
        bearer = Ws(self.d, secret)
        self.addCleanup(bearer.close)
        status, headers, _ = self.d.request("POST", "/login", body={"token": secret})
        self.assertEqual(status, 200)
        cookie = headers["Set-Cookie"].split(";", 1)[0]
        cookied = Ws(self.d, headers={"Cookie": cookie}, origin=origin)
        self.addCleanup(cookied.close)
        self.assertTrue(cookied.call("hello")["ok"])
        ticket = bearer.ok("video_open")["ticket"]
        viewer = connect(f"wss://localhost:{port}/api/video", ssl=self.d.context(), origin=origin, open_timeout=10)
        self.addCleanup(viewer.close)
        viewer.send(json.dumps({"ticket": ticket}))
        self.assertEqual(json.loads(viewer.recv(timeout=10))["type"], "ready")
        sid = mcp_session(self.d, secret)
        sse_conn, sse = open_sse(self.d, secret, sid)
        self.addCleanup(sse_conn.close)
        self.assertEqual(sse.status, 200)
        t0 = time.time()
        self.d.cli("token", "revoke", "victim")
        self.assertEqual(close_code(bearer.sock)[0], 4006)
        code, reason = close_code(cookied.sock)
        self.assertEqual(code, 4006)
        self.assertIn("revoked", reason)
        self.assertEqual(close_code(viewer)[0], 4006)
        # The stream ends (the body finishes) and the session is gone.
        sse_conn.sock.settimeout(10)
        while sse.read(4096):
            pass
        took = time.time() - t0
        self.assertLess(took, 10.0, "ended at once, not at the next request")
        status, _, _ = tools_list(self.d, secret, sid)
        self.assertEqual(status, 401, "the token itself no longer works")
        # What it held is given back (the other tests' tokens are revoked by then too).
        wait_for("the MCP sessions and streams to be given back",
                 lambda: holds(self.d, "mcp_session")["held"] == 0 and holds(self.d, "stream")["held"] == 0)

    def test_rotating_a_token_ends_what_the_old_secret_opened(self):
        old = self.d.cli("token", "add", "rotated", "--role", "view").stdout.strip()
        self.addCleanup(lambda: self.d.cli("token", "revoke", "rotated", check=False))
        w = Ws(self.d, old)
        self.addCleanup(w.close)
        self.assertTrue(w.call("hello")["ok"])
        new = self.d.cli("token", "rotate", "rotated").stdout.strip()
        self.assertEqual(close_code(w.sock)[0], 4006)
        fresh = Ws(self.d, new)
        self.addCleanup(fresh.close)
        self.assertTrue(fresh.call("hello")["ok"], "the new secret works")


class ConnectionTable(unittest.TestCase):
    """A small connection table, filled by one token's authenticated connections."""

    @classmethod
    def setUpClass(cls):
        cls.d = HttpsDaemon(config_text="[https]\nmax_connections = 16\n")

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def test_one_tokens_connections_cannot_keep_the_admin_out(self):
        viewer = self.d.cli("token", "add", "table-filler", "--role", "view").stdout.strip()
        held = []
        # Authenticated, kept-alive connections: proven, so never "unproven" to evict.
        for _ in range(16):
            c = self.d.conn()
            c.request("GET", "/api/status", headers={"Authorization": f"Bearer {viewer}"})
            r = c.getresponse()
            r.read()
            self.assertEqual(r.status, 200)
            held.append(c)
        try:
            for _ in range(5):
                status, _, _ = self.d.request("GET", "/api/status", token=self.d.admin)
                self.assertEqual(status, 200, "the admin gets in: the biggest holder's oldest idle one went")
        finally:
            for c in held:
                c.close()


class VideoWaits(unittest.TestCase):
    """Sockets without credentials cannot hold the video waiting places."""

    @classmethod
    def setUpClass(cls):
        quiet_connect_warning()
        cls.d = HttpsDaemon()
        cls.viewer = cls.d.cli("token", "add", "video-viewer", "--role", "view").stdout.strip()

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def test_twenty_reconnecting_sockets_without_tickets_never_keep_a_viewer_out(self):
        stop = threading.Event()
        port = self.d.port
        attempts = [0]

        def flood():
            while not stop.is_set():
                try:
                    sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=("127.0.0.2", 0))
                    s = connect(f"wss://localhost:{port}/api/video", ssl=self.d.context(), sock=sock,
                                origin=f"https://localhost:{port}", open_timeout=5)
                    attempts[0] += 1
                    try:
                        s.recv(timeout=5)
                    except Exception:
                        pass
                    s.close()
                except Exception:
                    attempts[0] += 1

        threads = [threading.Thread(target=flood, daemon=True) for _ in range(20)]
        for t in threads:
            t.start()
        try:
            wait_for("the flood to be under way", lambda: attempts[0] >= 40)
            control = Ws(self.d, self.viewer)
            self.addCleanup(control.close)
            ok = 0
            for _ in range(28):
                ticket = control.ok("video_open")["ticket"]
                try:
                    s = connect(f"wss://localhost:{port}/api/video", ssl=self.d.context(),
                                origin=f"https://localhost:{port}", open_timeout=10)
                except InvalidStatus as e:
                    self.fail(f"the viewer was refused: {e.response.status_code}")
                s.send(json.dumps({"ticket": ticket}))
                if json.loads(s.recv(timeout=10))["type"] == "ready":
                    ok += 1
                s.close()
            self.assertEqual(ok, 28)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=10)


class PrivateData(unittest.TestCase):
    """The data directory is the daemon's alone, whatever the umask it was started with."""

    def mode(self, path):
        return stat.S_IMODE(os.stat(path).st_mode)

    def test_files_and_directories_are_private_and_what_was_loosened_is_fixed_and_named(self):
        data = tempfile.mkdtemp(prefix="tether-private-")
        loose = os.path.join(data, "left-by-someone")
        with open(loose, "w") as f:
            f.write("x")
        os.chmod(loose, 0o644)
        os.chmod(data, 0o755)
        old = os.umask(0o022)
        try:
            d = HttpsDaemon(data_dir=data)
        finally:
            os.umask(old)
        try:
            # A task makes the store write (its WAL).
            c = Client(d.socket, timeout=15)
            self.assertTrue(c.call({"id": 1, "method": "task_open", "title": "private", "events": False})["ok"])
            c.close()
            self.assertEqual(self.mode(data), 0o700)
            for name in ("tasks.db", "tls/ca.key", "tls/ca.crt", "left-by-someone"):
                path = os.path.join(data, name)
                self.assertEqual(self.mode(path) & 0o077, 0, f"{name} is {oct(self.mode(path))}")
            for name in os.listdir(data):
                path = os.path.join(data, name)
                if os.path.isfile(path) and not name.endswith(".log"):
                    self.assertEqual(self.mode(path) & 0o077, 0, f"{name} is {oct(self.mode(path))}")
            log = d.log_text()
            self.assertIn("made it private", log)
            self.assertIn("left-by-someone", log)
        finally:
            d.stop()


if __name__ == "__main__":
    unittest.main()
