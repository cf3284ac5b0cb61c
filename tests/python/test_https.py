"""The HTTPS server against real clients: curl, openssl, Python's ssl and http.client, and
the `tether` CLI itself (`login`, `task run --url`). Standard library only.

Every attack in issue 11's list is made and must be refused with its status, and the
daemon must keep serving. The plain-HTTP LAN redirect is tested from a network namespace
this test creates (root and iproute2 needed: tests/run installs iproute2; a missing one
fails, it is never skipped).
"""

import http.client
import json
import os
import resource
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import tempfile
import time
import unittest
import unittest.mock

from test_control_socket import TETHER, Client, Daemon


def wait_for(what, predicate, timeout=15.0, interval=0.02):
    """Waits until predicate() is truthy; returns its value or fails saying what."""
    deadline = time.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


class HttpsDaemon(Daemon):
    """`tether serve --sim` with HTTPS on a free loopback port, and its admin token."""

    def __init__(self, listen="127.0.0.1:0", **kw):
        super().__init__(extra_args=["--listen", listen], **kw)
        self.ca = os.path.join(self.dir, "tls", "ca.crt")
        status = self.status()
        self.port = status["https"]["port"]
        self.fingerprint = status["https"]["fingerprint"]
        self.admin = self.cli("token", "rotate", "admin").stdout.strip()
        self.base = f"https://localhost:{self.port}"

    def status(self):
        return self.call({"id": 1, "method": "status"})["result"]

    def env(self, **extra):
        env = dict(os.environ)
        env.pop("TETHER_TOKEN", None)
        env.pop("TETHER_TASK_TOKEN", None)
        env["TETHER_SOCKET"] = self.socket
        env.update(extra)
        return env

    def cli(self, *args, check=True, env=None, timeout=60):
        r = subprocess.run([TETHER, *args], capture_output=True, text=True, env=env or self.env(), timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"tether {' '.join(args)} failed ({r.returncode}): {r.stderr}")
        return r

    def context(self):
        ctx = ssl.create_default_context(cafile=self.ca)
        return ctx

    def conn(self, host="localhost"):
        return http.client.HTTPSConnection(host, self.port, context=self.context(), timeout=15)

    def request(self, method, path, body=None, headers=None, token=None, host=None):
        """One request on a fresh connection: (status, headers, parsed body or bytes)."""
        h = dict(headers or {})
        if token:
            h["Authorization"] = f"Bearer {token}"
        if host:
            h["Host"] = host
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        c = self.conn()
        try:
            c.request(method, path, body=data, headers=h)
            r = c.getresponse()
            raw = r.read()
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = raw
            return r.status, r.headers, parsed
        finally:
            c.close()

    def log_text(self):
        self.log.flush()
        with open(os.path.join(self.dir, "daemon.log")) as f:
            return f.read()


def hpack_string(data):
    """An HPACK string literal, not Huffman-coded (RFC 7541 5.2)."""
    data = data.encode() if isinstance(data, str) else data
    n, out = len(data), bytearray()
    if n < 127:
        out.append(n)
    else:
        out.append(127)
        n -= 127
        while n >= 128:
            out.append(n % 128 + 128)
            n //= 128
        out.append(n)
    return bytes(out) + data


def h2_get(d, path, headers):
    """One GET over HTTP/2 with exactly the header fields given (pseudo-headers first, in
    order, each a literal never indexed): the JSON body of the answer. A small client of
    our own: a real one would not send a `host` that disagrees with `:authority`."""
    ctx = d.context()
    ctx.set_alpn_protocols(["h2"])
    raw = socket.create_connection(("127.0.0.1", d.port), timeout=15)
    with ctx.wrap_socket(raw, server_hostname="localhost") as s:
        assert s.selected_alpn_protocol() == "h2"

        def frame(kind, flags, stream, payload=b""):
            return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload

        block = b"".join(b"\x10" + hpack_string(k) + hpack_string(v) for k, v in headers)
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0) + frame(1, 0x5, 1, block))
        buf, body = b"", b""
        while True:
            while len(buf) < 9 or len(buf) < 9 + int.from_bytes(buf[:3], "big"):
                chunk = s.recv(65536)
                if not chunk:
                    raise ConnectionError(f"the server closed the connection; body so far {body!r}")
                buf += chunk
            n = int.from_bytes(buf[:3], "big")
            kind, flags, stream, payload, buf = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7fffffff, \
                buf[9:9 + n], buf[9 + n:]
            if kind == 4 and not flags & 1:
                s.sendall(frame(4, 1, 0))
            elif kind == 0 and stream == 1:
                body += payload
                if flags & 1:
                    return json.loads(body)
            elif kind in (3, 7):
                raise ConnectionError(f"the server reset the stream (frame type {kind}): {payload!r}")


def open_lease(d, token, title="lease", headers=None):
    """POST /api/tasks; returns (connection, response, first line)."""
    c = d.conn()
    h = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    h.update(headers or {})
    c.request("POST", "/api/tasks", body=json.dumps({"title": title}), headers=h)
    r = c.getresponse()
    first = json.loads(r.readline())
    return c, r, first


class SharedDaemon(unittest.TestCase):
    """Tests that share one daemon for their class."""

    @classmethod
    def setUpClass(cls):
        cls.d = HttpsDaemon()

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()


class RealClients(SharedDaemon):

    def test_curl_reads_status_with_the_ca(self):
        d = self.d
        out = subprocess.run(
            ["curl", "-sS", "--fail-with-body", "--cacert", d.ca, "-H", f"Authorization: Bearer {d.admin}",
             f"{d.base}/api/status"],
            capture_output=True, text=True, check=True,
        )
        status = json.loads(out.stdout)
        self.assertTrue(status["daemon"]["sim"])
        self.assertEqual(status["https"]["port"], d.port)

    def test_openssl_negotiates_h2_and_http1_and_the_chain_verifies(self):
        d = self.d
        for alpn in ["h2", "http/1.1"]:
            out = subprocess.run(
                ["openssl", "s_client", "-connect", f"127.0.0.1:{d.port}", "-servername", "localhost",
                 "-alpn", alpn, "-showcerts"],
                input="", capture_output=True, text=True, timeout=30,
            ).stdout
            self.assertIn(f"ALPN protocol: {alpn}", out)
        # The CA, as a first-time user fetches it (plain HTTP is served to loopback).
        c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=10)
        self.addCleanup(c.close)
        c.request("GET", "/ca.crt")
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        served_ca = r.read().decode()
        with open(d.ca) as f:
            self.assertEqual(served_ca, f.read())
        tmp = tempfile.mkdtemp()
        ca_file = os.path.join(tmp, "ca.pem")
        with open(ca_file, "w") as f:
            f.write(served_ca)
        blocks = out.split("-----BEGIN CERTIFICATE-----")[1:]
        self.assertEqual(len(blocks), 2, "server certificate and CA")
        leaf = os.path.join(tmp, "leaf.pem")
        with open(leaf, "w") as f:
            f.write("-----BEGIN CERTIFICATE-----" + blocks[0].split("-----END CERTIFICATE-----")[0]
                    + "-----END CERTIFICATE-----\n")
        verify = subprocess.run(["openssl", "verify", "-CAfile", ca_file, leaf], capture_output=True, text=True)
        self.assertEqual(verify.returncode, 0, verify.stdout + verify.stderr)
        fp = subprocess.run(["openssl", "x509", "-in", ca_file, "-noout", "-fingerprint", "-sha256"],
                            capture_output=True, text=True, check=True).stdout.strip().split("=", 1)[1]
        doctor = json.loads(d.cli("doctor", "--json").stdout)
        self.assertEqual(doctor["https"]["fingerprint"], fp)
        self.assertEqual(fp.replace(":", "").lower(), d.fingerprint)
        text = subprocess.run(["openssl", "x509", "-in", ca_file, "-noout", "-text"],
                              capture_output=True, text=True, check=True).stdout
        self.assertIn("X509v3 Name Constraints: critical", text)
        self.assertIn("DNS:local", text)
        self.assertIn("IP:192.168.0.0/255.255.0.0", text)
        leaf_text = subprocess.run(["openssl", "x509", "-in", leaf, "-noout", "-text"],
                                   capture_output=True, text=True, check=True).stdout
        self.assertIn("TLS Web Server Authentication", leaf_text)
        not_after = subprocess.run(["openssl", "x509", "-in", leaf, "-noout", "-checkend", str(826 * 86400)],
                                   capture_output=True, text=True)
        self.assertNotEqual(not_after.returncode, 0, "valid for at most 825 days")

    def test_the_ios_profile_holds_the_ca(self):
        status, headers, body = self.d.request("GET", "/ca.mobileconfig")
        self.assertEqual(status, 200)
        self.assertEqual(headers["Content-Type"], "application/x-apple-aspen-config")
        self.assertIn(b"com.apple.security.root", body)

    def test_screenshot_png_and_an_action_on_it(self):
        d = self.d
        c = d.conn()
        self.addCleanup(c.close)
        c.request("GET", "/api/screenshot?max_edge=400", headers={"Authorization": f"Bearer {d.admin}"})
        r = c.getresponse()
        png = r.read()
        self.assertEqual(r.status, 200)
        self.assertEqual(png[:8], b"\x89PNG\r\n\x1a\n")
        obs = r.headers["Tether-Observation-Id"]
        meta = json.loads(r.headers["Tether-Metadata"])
        self.assertEqual(meta["observation_id"], obs)
        # A blank spot of the home screen: the tap changes nothing, which `expect: any` accepts.
        body = {"operation_id": "http-tap-1", "observation_id": obs, "expect": "any",
                "action": {"type": "tap", "x": 10, "y": 10}}
        status, _, result = d.request("POST", "/api/action", body=body, token=d.admin)
        self.assertEqual(status, 200, result)
        # The same operation again: the cached answer, not a second tap.
        status, _, again = d.request("POST", "/api/action", body=body, token=d.admin)
        self.assertEqual((status, again), (200, result))
        status, _, bad = d.request("POST", "/api/action", body={"operation_id": "x", "action": {"type": "nope"}},
                                   token=d.admin)
        self.assertEqual((status, bad["error"]["code"]), (400, "INVALID_PARAMS"))

    def test_rpc_and_unknown_routes(self):
        d = self.d
        status, _, r = d.request("POST", "/api/rpc", body={"method": "token", "action": "list"}, token=d.admin)
        self.assertEqual(status, 200)
        self.assertIn("admin", [t["name"] for t in r["result"]["tokens"]])
        status, _, r = d.request("GET", "/api/nothing", token=d.admin)
        self.assertEqual((status, r["error"]["code"]), (404, "NOT_FOUND"))
        status, _, r = d.request("POST", "/api/action", body="{not json", token=d.admin)
        self.assertEqual((status, r["error"]["code"]), (400, "INVALID_JSON"))

    def test_the_streamed_lease_with_python_http_client(self):
        d = self.d
        op = d.cli("token", "add", "lease-op", "--role", "operate").stdout.strip()
        c, r, first = open_lease(d, op, "python lease")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.headers["Content-Type"], "application/x-ndjson")
        task, token = first["id"], first["token"]
        self.assertEqual(first["state"], "running")
        # Events arrive on the stream: a note written by the opener shows up.
        status, _, _ = d.request("POST", f"/api/tasks/{task}/note", body={"text": "hello"}, token=op)
        self.assertEqual(status, 200)
        kinds = []
        while "note" not in kinds:
            line = json.loads(r.readline())
            if line.get("event") == "task":
                kinds.append(line["kind"])
        # The agent's token works for its own task.
        status, _, shot = d.request("GET", "/api/screenshot?format=json", headers={"Tether-Task-Token": token})
        self.assertEqual(status, 200, shot)
        # Closing the stream ends the lease: the task is abandoned.
        c.close()
        wait_for("the task to be abandoned", lambda: d.status()["task"] is None)
        status, _, tasks = d.request("GET", "/api/tasks", token=op)
        self.assertEqual(next(t for t in tasks["tasks"] if t["id"] == task)["state"], "abandoned")
        # Its journal, resumable by seq, over HTTP.
        status, _, events = d.request("GET", f"/api/tasks/{task}/events?after=1", token=op)
        self.assertEqual(status, 200)
        self.assertTrue(all(e["seq"] > 1 for e in events["events"]))

    def test_a_followed_journal_streams_and_ends(self):
        d = self.d
        op = d.cli("token", "add", "follow-op", "--role", "operate").stdout.strip()
        lease, _, first = open_lease(d, op, "followed")
        task = first["id"]
        c = d.conn()
        self.addCleanup(c.close)
        c.request("GET", f"/api/tasks/{task}/events?follow=1", headers={"Authorization": f"Bearer {op}"})
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        status, _, _ = d.request("POST", f"/api/tasks/{task}/finish", body={"ok": True}, token=op)
        self.assertEqual(status, 200)
        lines = []
        while True:
            raw = r.readline()
            if not raw:
                break
            lines.append(json.loads(raw))
        self.assertEqual(lines[-1]["state"], "completed", lines[-1])
        seqs = [l["seq"] for l in lines if l.get("event") == "task"]
        self.assertEqual(seqs, sorted(set(seqs)), "no gaps reordered, no duplicates")
        lease.close()
        status, _, r = d.request("GET", f"/api/tasks/{task}/events?follow=1&after=9999", token=op)
        self.assertEqual((status, r["error"]["code"]), (400, "INVALID_PARAMS"))
        status, _, r = d.request("GET", "/api/tasks/424242/events?follow=1", token=op)
        self.assertEqual((status, r["error"]["code"]), (404, "NO_SUCH_TASK"))


class Attacks(SharedDaemon):
    """Each refused with the right status and journalled, and the server keeps serving."""


    def test_no_token(self):
        status, headers, r = self.d.request("GET", "/api/status")
        self.assertEqual((status, r["error"]["code"]), (401, "UNAUTHORIZED"))
        self.assertTrue(headers["WWW-Authenticate"].startswith("Bearer"))

    def test_wrong_tokens_hit_the_limit_and_the_right_one_still_works(self):
        # Its own daemon: the limit counts every client's failures, the other tests' too.
        d = HttpsDaemon()
        self.addCleanup(d.stop)
        codes = [d.request("GET", "/api/status", token=f"tt_wrong{i}")[0] for i in range(21)]
        self.assertEqual(codes[:20], [401] * 20)
        self.assertEqual(codes[20], 429)
        status, headers, r = d.request("GET", "/api/status", token="tt_wrong-again")
        self.assertEqual((status, r["error"]["code"], headers["Retry-After"]), (429, "RATE_LIMITED", "60"))
        self.assertEqual(d.request("GET", "/api/status", token=d.admin)[0], 200, "a correct token is never refused")
        self.assertIn("refused a request with wrong credentials", d.log_text())

    def test_a_revoked_tokens_cookie(self):
        d = self.d
        secret = d.cli("token", "add", "browser", "--role", "operate").stdout.strip()
        status, headers, r = d.request("POST", "/login", body={"token": secret})
        self.assertEqual(status, 200, r)
        cookie = headers["Set-Cookie"]
        self.assertIn(f"tether_session_{d.port}=", cookie)
        for attr in ["HttpOnly", "SameSite=Lax", "Secure", "Max-Age=2592000"]:
            self.assertIn(attr, cookie)
        pair = cookie.split(";")[0]
        self.assertEqual(d.request("GET", "/api/status", headers={"Cookie": pair})[0], 200)
        d.cli("token", "revoke", "browser")
        status, _, r = d.request("GET", "/api/status", headers={"Cookie": pair})
        self.assertIn(status, (401, 429))
        self.assertIn(r["error"]["code"], ("UNAUTHORIZED", "RATE_LIMITED"))

    def test_cross_site_origin_with_a_cookie(self):
        d = self.d
        secret = d.cli("token", "add", "console", "--role", "operate").stdout.strip()
        _, headers, _ = d.request("POST", "/login", body={"token": secret})
        cookie = headers["Set-Cookie"].split(";")[0]
        body = {"operation_id": "csrf", "expect": "any", "action": {"type": "home"}}
        status, _, r = d.request("POST", "/api/action", body=body,
                                 headers={"Cookie": cookie, "Origin": "https://evil.example"})
        self.assertEqual((status, r["error"]["code"]), (403, "PERMISSION_DENIED"))
        status, _, _ = d.request("GET", "/api/status", headers={"Cookie": cookie, "Sec-Fetch-Site": "cross-site"})
        self.assertEqual(status, 403)
        status, _, r = d.request("POST", "/api/action", body=body,
                                 headers={"Cookie": cookie, "Origin": f"https://localhost:{d.port}"})
        self.assertEqual(status, 200, r)
        self.assertIn("refused by the Origin policy", d.log_text())

    def test_sec_fetch_site_in_any_case_with_a_cookie(self):
        d = self.d
        secret = d.cli("token", "add", "console-case", "--role", "view").stdout.strip()
        _, headers, _ = d.request("POST", "/login", body={"token": secret})
        cookie = headers["Set-Cookie"].split(";")[0]
        for value in ["Cross-Site", "CROSS-SITE", " cross-site"]:
            status, _, r = d.request("GET", "/api/status", headers={"Cookie": cookie, "Sec-Fetch-Site": value})
            self.assertEqual((status, r["error"]["code"]), (403, "PERMISSION_DENIED"), value)
        status, _, _ = d.request("GET", "/api/status", headers={"Cookie": cookie, "Sec-Fetch-Site": "Same-Origin"})
        self.assertEqual(status, 200)

    def test_a_view_token_acting(self):
        d = self.d
        view = d.cli("token", "add", "viewer", "--role", "view").stdout.strip()
        self.assertEqual(d.request("GET", "/api/status", token=view)[0], 200)
        status, _, r = d.request("POST", "/api/action", body={"operation_id": "v", "expect": "any", "action": {"type": "home"}},
                                 token=view)
        self.assertEqual((status, r["error"]["code"]), (403, "PERMISSION_DENIED"))
        status, _, r = d.request("POST", "/api/rpc", body={"method": "token", "action": "list"}, token=view)
        self.assertEqual(status, 403)

    def test_an_agent_approving_or_pausing_and_a_finished_tasks_token(self):
        d = self.d
        op = d.cli("token", "add", "agent-op", "--role", "operate").stdout.strip()
        c, r, first = open_lease(d, op, "agent attacks")
        task, token = first["id"], first["token"]
        agent = {"Tether-Task-Token": token}
        for verb in ["approve", "pause", "takeover"]:
            status, _, body = d.request("POST", f"/api/tasks/{task}/{verb}", body={}, headers=agent)
            self.assertEqual((status, body["error"]["code"]), (403, "PERMISSION_DENIED"), verb)
        status, _, events = d.request("GET", f"/api/tasks/{task}/events", token=op)
        refused = [e["data"]["what"] for e in events["events"] if e["kind"] == "refused"]
        self.assertIn("task_control approve", refused, "journalled in the task")
        self.assertIn("task_control pause", refused)
        # Finished (by its agent, with its token), the token is dead everywhere.
        status, _, _ = d.request("POST", f"/api/tasks/{task}/finish", body={"ok": True}, headers=agent)
        self.assertEqual(status, 200)
        status, _, body = d.request("GET", "/api/status", headers=agent)
        self.assertEqual((status, body["error"]["code"]), (410, "TASK_ENDED"))
        c.close()

    def test_duplicate_keys_in_bodies_are_refused_as_on_the_socket(self):
        d = self.d
        line = '{"id":1,"method":"hello","method":"status"}'
        on_socket = d.call(line)
        self.assertEqual(on_socket["error"]["code"], "INVALID_REQUEST", on_socket)
        status, _, r = d.request("POST", "/api/rpc", body='{"method":"hello","method":"status"}', token=d.admin)
        self.assertEqual(status, 400, "not answered as `status`: %r" % (r,))
        self.assertEqual(r["error"], on_socket["error"], "the socket's code and message")
        # Every REST body, at any depth, and the forms that set cookies.
        for body in ['{"operation_id":"dup-a","operation_id":"dup-b","expect":"any","action":{"type":"home"}}',
                     '{"operation_id":"dup-c","expect":"any","action":{"type":"tap","type":"home"}}']:
            status, _, r = d.request("POST", "/api/action", body=body, token=d.admin)
            self.assertEqual((status, r["error"]["code"]), (400, "INVALID_REQUEST"), body)
        secret = d.cli("token", "add", "dup-login", "--role", "view").stdout.strip()
        status, headers, r = d.request("POST", "/login", body='{"token":"tt_wrong","token":"%s"}' % secret)
        self.assertEqual((status, r["error"]["code"]), (400, "INVALID_REQUEST"), r)
        self.assertNotIn("Set-Cookie", headers)

    def test_logout_takes_only_our_own_origin(self):
        d = self.d
        cookie = f"tether_session_{d.port}=x.1.y"
        status, headers, r = d.request("POST", "/logout", headers={"Origin": "https://evil.example", "Cookie": cookie})
        self.assertEqual((status, r["error"]["code"]), (403, "PERMISSION_DENIED"))
        self.assertNotIn("Set-Cookie", headers, "a foreign page cannot clear the session")
        status, headers, r = d.request("POST", "/logout", headers={"Cookie": cookie, "Sec-Fetch-Site": "cross-site"})
        self.assertEqual(status, 403, r)
        status, headers, r = d.request("POST", "/logout", headers={"Origin": f"https://localhost:{d.port}",
                                                                   "Cookie": cookie})
        self.assertEqual((status, r), (200, {"logged_out": True}))
        self.assertIn("Max-Age=0", headers["Set-Cookie"])
        status, _, r = d.request("POST", "/logout", headers={"Cookie": cookie})
        self.assertEqual(status, 403, "a cookie write needs our Origin, as on every other cookie write")
        self.assertEqual(d.request("POST", "/logout")[0], 200, "a program with no cookie sends no Origin")

    def test_two_hosts_or_a_host_against_the_authority_are_refused(self):
        d = self.d
        auth = {"Authorization": f"Bearer {d.admin}"}
        for hosts in [["localhost", "evil.example"], ["evil.example", "localhost"], ["localhost", "localhost"]]:
            c = d.conn()
            c.putrequest("GET", "/api/status", skip_host=True)
            for h in hosts:
                c.putheader("Host", h)
            c.putheader("Authorization", auth["Authorization"])
            c.endheaders()
            r = c.getresponse()
            body = json.loads(r.read())
            c.close()
            self.assertEqual((r.status, body["error"]["code"]), (400, "INVALID_REQUEST"), hosts)
        # HTTP/1's absolute form names the host twice too.
        c = d.conn()
        c.putrequest("GET", "https://evil.example/api/status", skip_host=True)
        c.putheader("Host", f"localhost:{d.port}")
        c.putheader("Authorization", auth["Authorization"])
        c.endheaders()
        r = c.getresponse()
        self.assertEqual((r.status, json.loads(r.read())["error"]["code"]), (400, "INVALID_REQUEST"))
        c.close()
        # h2: a `host` field that disagrees with `:authority`, either way round.
        base = [(":method", "GET"), (":scheme", "https"), (":path", "/api/status")]
        bearer = [("authorization", auth["Authorization"])]
        for authority, host in [(f"localhost:{d.port}", "evil.example"), ("evil.example", f"localhost:{d.port}")]:
            body = h2_get(d, "/api/status", base + [(":authority", authority), ("host", host)] + bearer)
            self.assertEqual(body["error"]["code"], "INVALID_REQUEST", (authority, host))
        agreed = h2_get(d, "/api/status", base + [(":authority", f"localhost:{d.port}")] + bearer)
        self.assertTrue(agreed["daemon"]["sim"], "one host over h2 is served")
        self.assertIn("refused a request with an ambiguous Host", d.log_text())

    def test_a_foreign_host(self):
        d = self.d
        status, _, r = d.request("GET", "/api/status", token=d.admin, host="evil.example")
        self.assertEqual((status, r["error"]["code"]), (403, "PERMISSION_DENIED"))
        self.assertIn("refused a request for a foreign Host", d.log_text())

    def test_reused_and_expired_pairing_codes(self):
        d = self.d
        made = json.loads(d.cli("pair", "--role", "view", "--name", "tablet", "--host", "localhost", "--json").stdout)
        self.assertTrue(made["url"].startswith(f"https://localhost:{d.port}/pair#code="))
        self.assertIn(f"fp={d.fingerprint}", made["url"])
        self.assertTrue(made["qr_svg"].startswith("<?xml"), "an SVG for the console")
        status, headers, r = d.request("POST", "/api/pair", body={"code": made["code"]})
        self.assertEqual(status, 200, r)
        self.assertEqual((r["name"], r["role"]), ("tablet", "view"))
        self.assertIn("Set-Cookie", headers)
        self.assertEqual(d.request("GET", "/api/status", token=r["token"])[0], 200)
        status, _, r = d.request("POST", "/api/pair", body={"code": made["code"]})
        self.assertEqual((status, r["error"]["code"]), (410, "PAIRING_INVALID"), "reused")
        short = json.loads(d.cli("pair", "--ttl", "1s", "--json").stdout)
        wait_for("the code to expire", lambda: time.time() * 1000 > short["expires_ms"] + 5)
        status, _, r = d.request("POST", "/api/pair", body={"code": short["code"]})
        self.assertEqual((status, r["error"]["code"]), (410, "PAIRING_INVALID"), "expired")
        self.assertIn("refused a pairing code", d.log_text())

    def test_an_oversized_body(self):
        d = self.d
        big = os.path.join(tempfile.mkdtemp(), "big.json")
        with open(big, "w") as f:
            json.dump({"operation_id": "big", "action": {"type": "type_text", "text": "x" * (2 << 20)}}, f)
        # curl asks `Expect: 100-continue` for a body this large: the server refuses it
        # before it is sent. (Over h2 the 413 is followed by a reset of the stream the
        # client is still sending on, which curl 7.88 reports as a framing error.)
        r = subprocess.run(
            ["curl", "-sS", "--http1.1", "--cacert", d.ca, "-H", f"Authorization: Bearer {d.admin}", "-H",
             "Content-Type: application/json", "--data-binary", f"@{big}", "-w", "\n%{http_code}",
             f"{d.base}/api/action"], capture_output=True, text=True, timeout=60)
        body, code = r.stdout.rsplit("\n", 1)
        self.assertEqual(code, "413", r.stderr)
        self.assertEqual(json.loads(body)["error"]["code"], "REQUEST_TOO_LARGE")
        # A body that says nothing of its size is cut off at the limit too.
        c = d.conn()
        c.putrequest("POST", "/api/action")
        c.putheader("Authorization", f"Bearer {d.admin}")
        c.putheader("Transfer-Encoding", "chunked")
        c.endheaders()
        try:
            chunk = b"x" * 65536
            for _ in range(40):
                c.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            c.send(b"0\r\n\r\n")
            status = c.getresponse().status
        except (ssl.SSLError, OSError):
            status = 413  # The server answered and closed while we were still sending.
        c.close()
        self.assertEqual(status, 413)
        self.assertEqual(d.request("GET", "/api/status", token=d.admin)[0], 200)

    def test_ten_thousand_idle_connections(self):
        d = self.d
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.assertGreaterEqual(hard, 10_200, "the test needs 10 000 sockets")
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        idle = []
        try:
            for _ in range(10_000):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", d.port))
                idle.append(s)
            # While they sit there, a real client gets through (with retries: the accept
            # queue is busy).
            def served():
                try:
                    return d.request("GET", "/api/status", token=d.admin)[0] == 200
                except OSError:
                    return False
            wait_for("a real request among 10 000 idle connections", served, timeout=60, interval=0.2)
        finally:
            for s in idle:
                s.close()
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        self.assertEqual(d.request("GET", "/api/status", token=d.admin)[0], 200)
        self.assertIsNone(d.proc.poll(), "the daemon is still running")


class LogFlooding(unittest.TestCase):
    """What a client sends reaches the daemon's log capped, and bodies and session ids not
    at all (a daemon of its own, with the default log filter: its log is measured)."""

    def test_huge_mcp_client_names_and_hosts_do_not_fill_the_log(self):
        env = dict(os.environ)
        env.pop("RUST_LOG", None)
        with unittest.mock.patch.dict(os.environ, env, clear=True):
            d = HttpsDaemon()
        self.addCleanup(d.stop)
        before = len(d.log_text())
        name = "n" * 900_000
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": name, "version": "1"}}}
        headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {d.admin}"}
        sessions = []
        for _ in range(20):
            c = d.conn()
            c.request("POST", "/mcp", body=json.dumps(init), headers=dict(headers, **{"Content-Type": "application/json"}))
            r = c.getresponse()
            r.read()
            c.close()
            self.assertEqual(r.status, 200)
            sessions.append(r.headers.get("Mcp-Session-Id"))
        # A Host of 8000 characters is refused, and logged cut to a line.
        status, _, _ = d.request("GET", "/api/status", token=d.admin, host="h" * 8000 + ".example")
        self.assertEqual(status, 403)
        log = wait_for("the foreign Host in the log",
                       lambda: (lambda t: "refused a request for a foreign Host" in t and t)(d.log_text()))
        grown = log[before:]
        self.assertLess(len(grown), 16 * 1024, f"20 initializes of 900 KB grew the log by {len(grown)} bytes")
        self.assertNotIn("n" * 200, grown, "the client's name is not logged whole")
        line = next(l for l in grown.splitlines() if "refused a request for a foreign Host" in l)
        self.assertLess(len(line), 600, line[:300])
        self.assertIn("(8008 bytes)", line)
        for sid in filter(None, sessions):
            self.assertNotIn(sid, grown, "MCP session ids stay out of the log")


class RefusedConnections(unittest.TestCase):
    def test_connections_refused_credentials_do_not_lock_out_a_real_client(self):
        d = HttpsDaemon(config_text="[https]\nmax_connections = 16\n")
        self.addCleanup(d.stop)
        held = []
        try:
            # Fill every slot with kept-alive connections that were refused (401).
            for i in range(16):
                c = d.conn()
                c.request("GET", "/api/status", headers={"Authorization": f"Bearer tt_bad{i}"})
                r = c.getresponse()
                r.read()
                self.assertEqual(r.status, 401)
                held.append(c)
            status, _, _ = d.request("GET", "/api/status", token=d.admin)
            self.assertEqual(status, 200, "a refused connection is dropped to make room")
        finally:
            for c in held:
                c.close()


class OfflineOwnerCode(unittest.TestCase):
    """What flash.sh does for the owner: `tether pair --offline` into a data dir before the
    daemon ever ran there; the daemon serves that CA and takes the code once."""

    def test_the_code_made_offline_pairs_once_against_the_printed_fingerprint(self):
        data = tempfile.mkdtemp(prefix="tether-offline-")
        made = subprocess.run(
            [TETHER, "pair", "--offline", data, "--role", "admin", "--name", "owner", "--host", "localhost", "--json"],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(made.returncode, 0, made.stderr)
        made = json.loads(made.stdout)
        self.assertTrue(made["url"].startswith("https://localhost/pair#code="), made["url"])
        self.assertNotIn(made["code"], open(os.path.join(data, "owner-pairing.json")).read())
        d = HttpsDaemon(data_dir=data)
        self.addCleanup(d.stop)
        self.assertEqual(d.fingerprint, made["fingerprint"], "the daemon serves the CA pair --offline made")
        self.assertFalse(os.path.exists(os.path.join(data, "owner-pairing.json")), "imported and removed at start")
        status, _, r = d.request("POST", "/api/pair", body={"code": made["code"]})
        self.assertEqual(status, 200, r)
        self.assertEqual((r["name"], r["role"]), ("owner", "admin"))
        status, _, listed = d.request("POST", "/api/rpc", body={"method": "token", "action": "list"}, token=r["token"])
        self.assertEqual(status, 200, f"an admin token may list tokens: {listed}")
        status, _, r = d.request("POST", "/api/pair", body={"code": made["code"]})
        self.assertEqual((status, r["error"]["code"]), (410, "PAIRING_INVALID"), "once only")

    def test_a_running_daemon_is_not_needed_and_a_bad_role_is_refused(self):
        data = tempfile.mkdtemp(prefix="tether-offline-")
        r = subprocess.run([TETHER, "pair", "--offline", data, "--role", "agent"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2, "clap refuses the role")
        r = subprocess.run([TETHER, "pair", "--offline", data, "--ttl", "5m"], capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0, "an offline code has no lifetime to set")
        self.assertIn("--ttl", r.stderr)


class LanRedirect(unittest.TestCase):
    """A plain request from another host (a network namespace) gets 307 to HTTPS."""

    NS = f"tether-https-{os.getpid()}"

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0 or shutil.which("ip") is None:
            raise AssertionError("this test needs root and iproute2 (`ip netns`); tests/run installs iproute2")
        ns, host_if, ns_if = cls.NS, f"th{os.getpid() % 100000}a", f"th{os.getpid() % 100000}b"
        run = lambda *a: subprocess.run(["ip", *a], check=True, capture_output=True)
        run("netns", "add", ns)
        run("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        run("link", "set", ns_if, "netns", ns)
        run("addr", "add", "10.213.7.1/30", "dev", host_if)
        run("link", "set", host_if, "up")
        run("netns", "exec", ns, "ip", "addr", "add", "10.213.7.2/30", "dev", ns_if)
        run("netns", "exec", ns, "ip", "link", "set", ns_if, "up")
        run("netns", "exec", ns, "ip", "link", "set", "lo", "up")
        cls.host_if = host_if
        # Started after the veth exists, so its address is one of the appliance's names.
        cls.d = HttpsDaemon(listen="10.213.7.1:0")

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()
        subprocess.run(["ip", "link", "del", cls.host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", cls.NS], capture_output=True)

    def curl(self, *args):
        return subprocess.run(["ip", "netns", "exec", self.NS, "curl", "-sS", *args],
                              capture_output=True, text=True, timeout=30)

    def test_plain_http_from_the_lan_is_redirected_and_never_served(self):
        port = self.d.port
        r = self.curl("-i", f"http://10.213.7.1:{port}/api/status?x=1", "-H", f"Authorization: Bearer {self.d.admin}")
        self.assertIn("HTTP/1.1 307", r.stdout)
        self.assertIn(f"location: https://10.213.7.1:{port}/api/status?x=1", r.stdout.lower())
        self.assertNotIn('"daemon"', r.stdout, "nothing is served over plain HTTP to the LAN")
        # Never an open redirect: a foreign Host is refused, not redirected.
        r = self.curl("-i", f"http://10.213.7.1:{port}/", "-H", "Host: evil.example")
        self.assertIn("HTTP/1.1 403", r.stdout)
        # HTTPS from the LAN, verified against the CA, with the address as the name.
        r = self.curl("--fail-with-body", "--cacert", self.d.ca, "-H", f"Authorization: Bearer {self.d.admin}",
                      f"https://10.213.7.1:{port}/api/status")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(json.loads(r.stdout)["daemon"]["sim"])


class LoginAndTaskRun(unittest.TestCase):
    """`tether login` + `tether task run --url` against a local `serve --sim`."""

    def setUp(self):
        self.d = HttpsDaemon()
        self.home = tempfile.mkdtemp(prefix="tether-home-")
        made = json.loads(self.d.cli("pair", "--role", "operate", "--name", "laptop", "--host", "localhost",
                                     "--json").stdout)
        # The laptop: its own config directory, no socket.
        self.env = dict(os.environ, XDG_CONFIG_HOME=self.home, TETHER_SOCKET="/nonexistent")
        # As root, the command runs as another user (as on the appliance).
        self.agent = ["--agent-user", "nobody"] if os.geteuid() == 0 else []
        # What the command may read and write under that user.
        self.out = tempfile.mkdtemp(prefix="tether-cmd-")
        os.chmod(self.out, 0o777)
        self.ca = os.path.join(self.out, "ca.crt")
        shutil.copy(self.d.ca, self.ca)
        os.chmod(self.ca, 0o644)
        for k in ["TETHER_TOKEN", "TETHER_TASK_TOKEN", "TETHER_URL", "TETHER_FINGERPRINT"]:
            self.env.pop(k, None)
        r = subprocess.run([TETHER, "login", made["url"]], capture_output=True, text=True, env=self.env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        hosts = os.path.join(self.home, "tether", "hosts.toml")
        self.assertEqual(stat.S_IMODE(os.stat(hosts).st_mode), 0o600)
        with open(hosts) as f:
            text = f.read()
        self.assertIn(self.d.fingerprint, text)
        self.url = f"https://localhost:{self.d.port}"

    def tearDown(self):
        self.d.stop()

    def run_tether(self, *args, **kw):
        return subprocess.run([TETHER, *args], capture_output=True, text=True, env=self.env, timeout=120, **kw)

    def test_exit_code_becomes_the_result_and_the_agent_cannot_control(self):
        out = self.out
        script = (
            f"{TETHER} task approve $TETHER_TASK_ID > {out}/approve.out 2>&1; echo $? > {out}/approve.rc; "
            f"curl -s -o /dev/null -w '%{{http_code}}' --cacert {self.ca} -X POST "
            f"-H \"Tether-Task-Token: $TETHER_TASK_TOKEN\" $TETHER_URL/api/tasks/$TETHER_TASK_ID/pause "
            f"> {out}/pause.status; "
            f"env > {out}/env; exit 3"
        )
        r = self.run_tether("task", "run", "--url", self.url, "--title", "exit three", *self.agent, "--", "sh", "-c",
                            script)
        self.assertEqual(r.returncode, 3, r.stderr)
        tasks = json.loads(self.run_tether("task", "list", "--url", self.url, "--json").stdout)["tasks"]
        task = next(t for t in tasks if t["title"] == "exit three")
        self.assertEqual(task["state"], "failed")
        with open(f"{out}/approve.rc") as f:
            self.assertNotEqual(f.read().strip(), "0", "approve inside the task fails")
        with open(f"{out}/pause.status") as f:
            self.assertEqual(f.read().strip(), "403", "a direct control call with the task token fails")
        with open(f"{out}/env") as f:
            env = dict(line.split("=", 1) for line in f.read().splitlines() if "=" in line)
        self.assertEqual(env["TETHER_URL"], self.url)
        self.assertEqual(env["TETHER_FINGERPRINT"], self.d.fingerprint)
        self.assertNotIn("TETHER_TOKEN", env, "the login token never reaches the command")
        self.assertIn("TETHER_TASK_TOKEN", env)

    def test_a_token_and_fingerprint_work_without_a_login(self):
        env = dict(self.env, XDG_CONFIG_HOME=tempfile.mkdtemp(), TETHER_TOKEN=self.d.admin)
        r = subprocess.run([TETHER, "task", "list", "--url", self.url, "--json"], capture_output=True, text=True,
                           env=env, timeout=60)
        self.assertNotEqual(r.returncode, 0, "no fingerprint: refused")
        self.assertIn("fingerprint", r.stderr)
        r = subprocess.run([TETHER, "token", "list", "--url", self.url, "--fingerprint", self.d.fingerprint],
                           capture_output=True, text=True, env=env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("laptop", r.stdout)
        # A wrong pin is a TLS failure, never a silent trust.
        r = subprocess.run([TETHER, "token", "list", "--url", self.url, "--fingerprint", "ab" * 32],
                           capture_output=True, text=True, env=env, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("pinned certificate authority", r.stderr)

    def test_finish_inside_the_command_goes_through_the_url(self):
        r = self.run_tether("task", "run", "--url", self.url, "--title", "self finish", *self.agent, "--", "sh", "-c",
                            f"{TETHER} task finish --summary done; sleep 1")
        self.assertEqual(r.returncode, 0, r.stderr)
        tasks = json.loads(self.run_tether("task", "list", "--url", self.url, "--json").stdout)["tasks"]
        self.assertEqual(next(t for t in tasks if t["title"] == "self finish")["state"], "completed")

    def test_a_stop_from_elsewhere_kills_the_command_and_its_grandchildren(self):
        out = self.out
        runner = subprocess.Popen(
            [TETHER, "task", "run", "--url", self.url, "--title", "stop me", *self.agent, "--", "sh", "-c",
             f"sleep 300 & echo $! > {out}/grandchild; wait"],
            env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        pid_file = f"{out}/grandchild"
        wait_for("the grandchild", lambda: os.path.exists(pid_file) and open(pid_file).read().strip())
        grandchild = int(open(pid_file).read())
        task = wait_for("the task", lambda: self.d.status()["task"])["id"]
        r = self.run_tether("task", "stop", str(task), "--url", self.url)
        self.assertEqual(r.returncode, 0, r.stderr)
        runner.wait(timeout=30)

        def gone():
            try:
                os.kill(grandchild, 0)
            except ProcessLookupError:
                return True
            with open(f"/proc/{grandchild}/stat") as f:
                return f.read().split()[2] == "Z"
        wait_for("the grandchild to die", gone)

    def test_kill_9_of_the_runner_abandons_the_task_and_releases_held_input(self):
        runner = subprocess.Popen(
            [TETHER, "task", "run", "--url", self.url, "--title", "killed", *self.agent, "--", "sh", "-c",
             # A slow drag holds the touch down while the runner is killed.
             f"{TETHER} task list >/dev/null 2>&1; sleep 300"],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        task = wait_for("the task", lambda: self.d.status()["task"])
        found = {}
        # The agent's token is in the command's environment; read it from /proc.
        def agent_token():
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        env = f.read().split(b"\0")
                except OSError:
                    continue
                for kv in env:
                    if kv.startswith(b"TETHER_TASK_TOKEN=") and f"TETHER_TASK_ID={task['id']}".encode() in env:
                        found["pid"] = int(pid)
                        return kv.split(b"=", 1)[1].decode()
            return None
        token = wait_for("the agent's token", agent_token)
        shot = self.d.request("GET", "/api/screenshot?format=json", headers={"Tether-Task-Token": token})[2]
        obs = shot["metadata"]["observation_id"]
        drag = {"operation_id": "held", "observation_id": obs,
                "action": {"type": "drag", "path": [{"x": 50, "y": 300}, {"x": 50, "y": 600}], "duration_ms": 5000}}
        holder = http.client.HTTPSConnection("localhost", self.d.port, context=self.d.context(), timeout=30)
        holder.request("POST", "/api/action", body=json.dumps(drag),
                       headers={"Tether-Task-Token": token, "Content-Type": "application/json"})
        def sim():
            c = Client(self.d.socket)
            try:
                return c.call({"id": 1, "method": "sim_state"})["result"]
            finally:
                c.close()
        wait_for("the touch to be held", lambda: sim()["input"]["buttons"] != 0)
        runner.send_signal(signal.SIGKILL)
        killed = time.time()
        runner.wait()
        wait_for("the touch to be released", lambda: sim()["input"]["buttons"] == 0, timeout=10)
        released = time.time() - killed
        wait_for("the task to be abandoned", lambda: self.d.status()["task"] is None, timeout=10)
        print(f"\n  lease closed by kill -9: held input released after {released * 1000:.0f} ms")
        holder.close()
        state = json.loads(self.run_tether("task", "list", "--url", self.url, "--json").stdout)["tasks"]
        self.assertEqual(next(t for t in state if t["id"] == task["id"])["state"], "abandoned")
        # The command outlives its runner (its own session): end its process group.
        os.killpg(os.getpgid(found["pid"]), signal.SIGKILL)


class ApiDoc(unittest.TestCase):
    """Every `sh` block of docs/api.md runs against a fresh daemon and succeeds."""

    def test_the_documented_examples_work(self):
        d = HttpsDaemon()
        self.addCleanup(d.stop)
        doc = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                           "docs", "api.md")
        with open(doc) as f:
            text = f.read()
        blocks = []
        for part in text.split("```sh\n")[1:]:
            blocks.append(part.split("```", 1)[0])
        self.assertGreaterEqual(len(blocks), 6, "the doc has its examples")
        work = tempfile.mkdtemp(prefix="tether-doc-")
        env = d.env(URL=d.base, CA=d.ca, TOKEN=d.admin, PATH=os.path.dirname(TETHER) + os.pathsep + os.environ["PATH"])
        for block in blocks:
            r = subprocess.run(["bash", "-eu", "-c", block], cwd=work, env=env, capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(r.returncode, 0, f"this example failed:\n{block}\n{r.stdout}\n{r.stderr}")
        # What they claim, checked: the screenshot is a PNG, the fingerprint is the CA's.
        with open(os.path.join(work, "screen.png"), "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        fp = subprocess.run(["openssl", "x509", "-in", os.path.join(work, "ca.crt"), "-noout", "-fingerprint",
                             "-sha256"], capture_output=True, text=True, check=True).stdout
        self.assertEqual(fp.strip().split("=", 1)[1].replace(":", "").lower(), d.fingerprint)


if __name__ == "__main__":
    unittest.main()
