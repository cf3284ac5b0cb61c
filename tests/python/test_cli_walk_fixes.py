"""What a new user of the `tether` CLI tripped over (issue 31), each checked against a real
`serve --sim`: output into a closed pipe, hints that name the real problem, exit codes a
script can use, `status --url`, `serve` on a busy port, the addresses `status`/`doctor`
advertise, and who acted in the text journal. Standard library only.
"""

import json
import os
import re
import subprocess
import tempfile
import unittest

from test_control_socket import TETHER, Client, Daemon, open_task
from test_https import HttpsDaemon, wait_for

PANIC_WORDS = ("panicked", "Broken pipe", "backtrace", "failed printing")


def run_into_closed_pipe(args, env):
    """Runs tether with stdout a pipe whose reader is already gone: (exit status, stderr)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        p = subprocess.run([TETHER, *args], stdout=write_end, stderr=subprocess.PIPE, text=True, env=env,
                           timeout=60)
    finally:
        os.close(write_end)
    return p.returncode, p.stderr


class ClosedPipe(unittest.TestCase):
    """`tether task list | head -1`: every printing command ends quietly."""

    @classmethod
    def setUpClass(cls):
        cls.d = Daemon()
        # A few tasks, so the list and the journal have lines to print.
        for i in range(3):
            c, task, _ = open_task(cls.d.socket, f"pipe {i}")
            c.call({"id": 2, "method": "task_finish", "task": task, "ok": True, "summary": "done"})
            c.close()
        cls.task = task
        cls.env = dict(os.environ, TETHER_SOCKET=cls.d.socket)

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def check_quiet(self, *args):
        status, err = run_into_closed_pipe(args, self.env)
        # 141 = 128 + SIGPIPE: what `yes | head -1` gives; never 134 (abort) or 101 (panic).
        self.assertEqual(status, 141, f"tether {' '.join(args)}: {err}")
        self.assertEqual(err, "", f"tether {' '.join(args)} said something on a closed pipe")
        for word in PANIC_WORDS:
            self.assertNotIn(word, err)

    def test_task_list(self):
        self.check_quiet("task", "list")
        self.check_quiet("task", "list", "--json")

    def test_status(self):
        self.check_quiet("status")

    def test_task_events_and_a_followed_journal(self):
        self.check_quiet("task", "events", str(self.task))
        # A followed journal of a task still running ends too (it would otherwise wait).
        c, task, _ = open_task(self.d.socket, "followed")
        self.addCleanup(c.close)
        self.check_quiet("task", "events", str(task), "--follow")

    def test_doctor_and_a_verb(self):
        self.check_quiet("doctor")
        self.check_quiet("wait-for-settle", "--timeout-ms", "0")

    def test_the_daemon_is_unharmed_and_an_open_pipe_still_gets_everything(self):
        r = subprocess.run([TETHER, "task", "list"], capture_output=True, text=True, env=self.env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertGreaterEqual(len(r.stdout.splitlines()), 3, r.stdout)
        self.assertIsNone(self.d.proc.poll(), "the daemon still runs")


if __name__ == "__main__":
    unittest.main()
