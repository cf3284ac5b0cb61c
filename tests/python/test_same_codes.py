"""One list of calls, good and bad, over every transport: the same codes from each (issue 29).

The control socket, `POST /api/rpc`, the `/api/ws` WebSocket and MCP (`/mcp`, raw JSON-RPC
over HTTP, as any client sends it) all reach the daemon's one dispatcher; a caller must
get the same answer whichever it uses. Each call is written once as a tether/1 request and
once as the MCP tool that makes it. Calls MCP cannot make the same way are left out on
purpose: a pointer tool without `observation_id` uses the latest screenshot (tether/1
requires the id), and tools outside a caller's role are not listed to it at all.
"""

import itertools
import json
import unittest

from test_control_socket import Client, open_task
from test_https import HttpsDaemon
from test_websocket import Ws, quiet_connect_warning

GONE = "obs_999_1"

# (tether/1 method, params, MCP tool, arguments, expected code or "ok")
AS_ADMIN = [
    ("status", {}, "status", {}, "ok"),
    ("action", {"observation_id": GONE, "action": {"type": "tap", "x": 10, "y": 10}},
     "tap", {"x": 10, "y": 10, "observation_id": GONE}, "OBSERVATION_EXPIRED"),
    ("action", {"action": {"type": "home"}, "expect": "bogus"}, "home", {"expect": "bogus"}, "INVALID_PARAMS"),
    ("action", {"action": {"type": "key_press", "key": "nosuchkey"}}, "press_key", {"key": "nosuchkey"},
     "INVALID_PARAMS"),
    ("action", {"action": {"type": "open_app", "name": ""}}, "open_app", {"name": ""}, "INVALID_PARAMS"),
    ("action", {"action": {"type": "type_text", "text": ""}}, "type_text", {"text": ""}, "NO_VISIBLE_EFFECT"),
    ("task_confirm", {"question": "ok?"}, "confirm", {"question": "ok?"}, "PERMISSION_DENIED"),
    ("wait_for_change", {"timeout_ms": 10}, "wait_for_change", {"timeout_ms": 10}, "ok"),
    ("wait_for_change", {"timeout_ms": -1}, "wait_for_change", {"timeout_ms": -1}, "INVALID_PARAMS"),
    ("screenshot", {"scale": 7}, "screenshot", {"scale": 7}, "INVALID_PARAMS"),
    # One operation id, twice with the same arguments (the outcome again), then other ones.
    ("action", {"operation_id": "dup", "action": {"type": "home"}, "expect": "any"},
     "home", {"operation_id": "dup", "expect": "any"}, "ok"),
    ("action", {"operation_id": "dup", "action": {"type": "home"}, "expect": "any"},
     "home", {"operation_id": "dup", "expect": "any"}, "ok"),
    ("action", {"operation_id": "dup", "action": {"type": "app_switcher"}, "expect": "any"},
     "app_switcher", {"operation_id": "dup", "expect": "any"}, "OPERATION_CONFLICT"),
]

# The same, as a task's agent (its task token): what the task's rules add.
AS_AGENT = [
    ("status", {}, "status", {}, "ok"),
    ("action", {"observation_id": GONE, "action": {"type": "tap", "x": 10, "y": 10}},
     "tap", {"x": 10, "y": 10, "observation_id": GONE}, "OBSERVATION_EXPIRED"),
    ("action", {"operation_id": "adup", "action": {"type": "home"}, "expect": "any"},
     "home", {"operation_id": "adup", "expect": "any"}, "ok"),
    ("action", {"operation_id": "adup", "action": {"type": "app_switcher"}, "expect": "any"},
     "app_switcher", {"operation_id": "adup", "expect": "any"}, "OPERATION_CONFLICT"),
    ("wait_for_change", {"timeout_ms": -1}, "wait_for_change", {"timeout_ms": -1}, "INVALID_PARAMS"),
]


class Transports:
    """The four ways in, each answering a call with its code ("ok" or the error's code)."""

    def __init__(self, d, token=None, task_token=None):
        self.d, self.token, self.task_token = d, token, task_token
        headers = {"Tether-Task-Token": task_token} if task_token else {}
        self.ws = Ws(d, token=token, headers=headers)
        self.mcp_headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
                            **headers}
        if token:
            self.mcp_headers["Authorization"] = f"Bearer {token}"
        self.ids = itertools.count(10)
        r, _ = self.mcp_post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "same", "version": "1"}}})
        self.session = r.headers["Mcp-Session-Id"]
        self.mcp_post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def close(self):
        self.ws.close()

    def socket(self, method, params):
        c = Client(self.d.socket, timeout=15)
        try:
            extra = {"task_token": self.task_token} if self.task_token else {}
            r = c.call({"id": 1, "method": method, **params, **extra})
        finally:
            c.close()
        return "ok" if r["ok"] else r["error"]["code"]

    def rpc(self, method, params):
        headers = {"Tether-Task-Token": self.task_token} if self.task_token else {}
        status, _, r = self.d.request("POST", "/api/rpc", body={"method": method, **params}, token=self.token,
                                      headers=headers)
        return "ok" if status == 200 else r["error"]["code"]

    def websocket(self, method, params):
        r = self.ws.call(method, timeout=30, **params)
        return "ok" if r["ok"] else r["error"]["code"]

    def mcp_post(self, message):
        h = dict(self.mcp_headers)
        if getattr(self, "session", None):
            h["Mcp-Session-Id"] = self.session
        c = self.d.conn()
        try:
            c.request("POST", "/mcp", body=json.dumps(message), headers=h)
            r = c.getresponse()
            return r, r.read().decode()
        finally:
            c.close()

    def mcp(self, tool, arguments):
        _, text = self.mcp_post({"jsonrpc": "2.0", "id": next(self.ids), "method": "tools/call",
                                 "params": {"name": tool, "arguments": arguments}})
        if not text.lstrip().startswith("{"):  # an SSE answer: its last data line
            text = [ln[5:] for ln in text.splitlines() if ln.startswith("data:") and ln[5:].strip()][-1]
        m = json.loads(text)
        if "error" in m:
            return f"jsonrpc {m['error']['code']}"
        result = m["result"]
        if not result.get("isError"):
            return "ok"
        # A tool error reads "CODE: message\nNext: ..." (server/mcp.rs).
        return result["content"][-1]["text"].split(":", 1)[0]


class SameCodes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        quiet_connect_warning()
        cls.d = HttpsDaemon()

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def run_list(self, calls, transports):
        ops = itertools.count()
        for method, params, tool, arguments, expected in calls:
            got = {}
            for name in ["socket", "rpc", "websocket"]:
                p = dict(params)
                if method == "action" and "operation_id" not in p:
                    # tether/1 actions carry an operation id; a fresh one per call.
                    p["operation_id"] = f"{name}-{next(ops)}"
                elif "operation_id" in p:
                    # One id per transport: each transport's list is its own sequence.
                    p["operation_id"] = f"{p['operation_id']}-{name}"
                got[name] = getattr(transports, name)(method, p)
            a = dict(arguments)
            if "operation_id" in a:
                a["operation_id"] = f"{a['operation_id']}-mcp"
            got["mcp"] = transports.mcp(tool, a)
            with self.subTest(method=method, params=params):
                self.assertEqual(got, dict.fromkeys(got, expected))

    def test_the_same_calls_get_the_same_codes_as_an_admin(self):
        # The socket's caller is this test's uid (root in CI: admin); the others use the
        # admin token.
        t = Transports(self.d, token=self.d.admin)
        self.addCleanup(t.close)
        self.run_list(AS_ADMIN, t)

    def test_the_same_calls_get_the_same_codes_as_a_tasks_agent(self):
        lease, _, token = open_task(self.d.socket, "same codes")
        self.addCleanup(lease.close)
        t = Transports(self.d, task_token=token)
        self.addCleanup(t.close)
        self.run_list(AS_AGENT, t)


if __name__ == "__main__":
    unittest.main()
