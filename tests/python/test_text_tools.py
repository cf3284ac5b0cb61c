"""Reading the screen (issue 33) with real clients against `tether serve --sim`: an agent
with the official MCP Python SDK does a multi-step task using only the text tools (no
coordinates anywhere), and the CLI verbs `find-text`, `tap-text`, `wait-for-text` behave as
their help says (exit 124 when the text does not come). What happened is checked with the
sim's own state.
"""

import os
import re
import subprocess
import unittest

from test_control_socket import TETHER, Daemon
from test_https import HttpsDaemon, wait_for
import test_mcp
from test_mcp import run, text_of


class TextToolsOverMcp(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = HttpsDaemon()
        cls.op = cls.d.cli("token", "add", "text-op", "--role", "operate").stdout.strip()
        cls.url = f"https://localhost:{cls.d.port}/mcp"

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    sim = test_mcp.Mcp.sim
    http_session = test_mcp.Mcp.http_session

    def test_an_agent_changes_a_setting_with_text_tools_only(self):
        """Open Settings, go to General and back, find what is ambiguous and what is not
        there: every step names text, none gives a coordinate."""
        async def body():
            async with self.http_session({"Authorization": f"Bearer {self.op}"}) as s:
                tools = {t.name for t in (await s.list_tools()).tools}
                self.assertTrue({"find_text", "tap_text", "wait_for_text"} <= tools, tools)
                r = await s.call_tool("home", {})
                self.assertFalse(r.is_error, text_of(r))
                # The screenshot can carry the text, so the agent need not look at the picture.
                r = await s.call_tool("screenshot", {"text": True})
                self.assertFalse(r.is_error, text_of(r))
                self.assertIn('"Settings"', text_of(r))
                r = await s.call_tool("find_text", {"text": "Settings"})
                self.assertFalse(r.is_error, text_of(r))
                self.assertIn("1 match(es)", text_of(r))
                r = await s.call_tool("tap_text", {"text": "Settings", "expect_text": "Airplane Mode"})
                self.assertFalse(r.is_error, text_of(r))
                self.assertIn('Tapped "Settings"', text_of(r))
                self.assertEqual(self.sim()["app"], "Settings")
                r = await s.call_tool("tap_text", {"text": "General"})
                self.assertFalse(r.is_error, text_of(r))
                r = await s.call_tool("wait_for_text", {"text": "iOS Version", "timeout_ms": 5000})
                self.assertFalse(r.is_error, text_of(r))
                self.assertIn("is on the screen", text_of(r))
                r = await s.call_tool("back", {"expect_text": "Airplane Mode"})
                self.assertFalse(r.is_error, text_of(r))
                r = await s.call_tool("wait_for_text", {"text": "iOS Version", "gone": True, "timeout_ms": 5000})
                self.assertIn("is gone", text_of(r))
                # Every app name starting with C: ambiguous, the candidates named, nothing tapped.
                r = await s.call_tool("home", {})
                touches = len(self.sim()["touches"])
                r = await s.call_tool("tap_text", {"text": "^C", "match": "regex"})
                self.assertTrue(r.is_error, text_of(r))
                self.assertIn("AMBIGUOUS_TEXT", text_of(r))
                self.assertIn("index 1:", text_of(r))
                self.assertEqual(len(self.sim()["touches"]), touches)
                r = await s.call_tool("tap_text", {"text": "Settings", "expect_text": "Bluetooth"})
                self.assertFalse(r.is_error, text_of(r))
                # A text that is not there: an error that says what is, and no tap.
                touches = len(self.sim()["touches"])
                r = await s.call_tool("tap_text", {"text": "Bluetoooth", "match": "exact"})
                self.assertTrue(r.is_error, text_of(r))
                self.assertIn("TEXT_NOT_FOUND", text_of(r))
                self.assertIn("Bluetooth", text_of(r), "the nearest text is named")
                self.assertEqual(len(self.sim()["touches"]), touches)
                r = await s.call_tool("find_text", {"text": "Bluetoooth", "match": "fuzzy"})
                self.assertFalse(r.is_error, text_of(r))
                self.assertIn('"Bluetooth"', text_of(r))
        run(body(), timeout=240)


class TextVerbs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Daemon()
        cls.env = dict(os.environ, TETHER_SOCKET=cls.d.socket)

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def tether(self, *args):
        return subprocess.run([TETHER, *args], capture_output=True, text=True, env=self.env, timeout=120)

    def state(self):
        return self.d.call({"id": 1, "method": "sim_state"})["result"]

    def test_find_tap_and_wait_for_text_from_the_shell(self):
        self.assertEqual(self.tether("home").returncode, 0)
        r = self.tether("find-text", "Notes")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r'"Notes" at \d+(\.\d+)?,\d+(\.\d+)?')
        r = self.tether("find-text", "Nowhere", "--match", "exact", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('"count": 0', r.stdout)
        r = self.tether("wait-for-text", "Nowhere", "--timeout-ms", "300")
        self.assertEqual(r.returncode, 124, (r.stdout, r.stderr))
        self.assertIn("did not appear", r.stdout)
        r = self.tether("tap-text", "Notes")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.state()["app"], "Notes")
        r = self.tether("tap-text", "Nowhere at all")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("TEXT_NOT_FOUND", r.stderr)
        self.assertEqual(self.tether("home").returncode, 0)
        r = self.tether("wait-for-text", "Notes", "--region", "0,0,10,10", "--timeout-ms", "200")
        self.assertEqual(r.returncode, 124, "nothing in a corner: " + r.stdout)
        r = self.tether("find-text", "--help")
        self.assertIn("--region", r.stdout)
        self.assertIn("find_text", r.stdout, "names the MCP tool")
        r = self.tether("screenshot", "--text", "-o", os.path.join(self.d.dir, "t.png"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Text on the screen", r.stdout)
        self.assertTrue(re.search(r'"Settings"', r.stdout), r.stdout)


if __name__ == "__main__":
    unittest.main()
