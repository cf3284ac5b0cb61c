"""`tether open` and `tether type` from the command line against a real `serve --sim`
(issue 32): an app that does not open is an error with its code and a non-zero exit, and
the phone is left on the home screen; text with a line break is refused before typing
unless `--newlines return`. Standard library only.
"""

import os
import subprocess
import unittest

from test_control_socket import TETHER, Daemon


class OpenAndType(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Daemon()
        cls.env = dict(os.environ, TETHER_SOCKET=cls.d.socket)

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def tether(self, *args):
        return subprocess.run([TETHER, *args], capture_output=True, text=True, env=self.env, timeout=60)

    def screen(self):
        return self.d.call({"id": 1, "method": "sim_state"})["result"]["screen"]

    def test_open_a_missing_app_fails_with_its_code_and_leaves_the_home_screen(self):
        r = self.tether("open", "NoSuchApp")
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("APP_NOT_OPENED", r.stderr)
        self.assertIn("home screen", r.stderr, "the hint says where the phone is")
        self.assertEqual(self.screen(), "home")
        r = self.tether("open", "Demo")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.screen(), "app")
        r = self.tether("home")
        self.assertEqual(r.returncode, 0, r.stderr)
        # Home on the home screen is done, not an error.
        r = self.tether("home")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_type_refuses_a_line_break_unless_returns_are_asked_for(self):
        r = self.tether("type", "one\ntwo")
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("TEXT_HAS_NEWLINE", r.stderr)
        self.assertIn("--newlines return", r.stderr, "the hint names the flag")
        r = self.tether("type", "--help")
        self.assertIn("--newlines", r.stdout)


if __name__ == "__main__":
    unittest.main()
