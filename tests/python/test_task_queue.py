"""Jobs waiting for a busy phone: `tether task run --wait` over the socket and over HTTPS.
Jobs run one after the other in order of arrival; a waiting job killed with SIGKILL leaves
the queue and nothing of it behind; the ones behind it move up; a job without --wait is
refused while others wait; --timeout gives up cleanly. Each job's command waits for a file
the test creates, so the order is the test's, never a sleep's.
"""

import json
import os
import signal
import subprocess
import tempfile
import unittest

from test_control_socket import TETHER
from test_https import HttpsDaemon, wait_for

AGENT = 'agent_user = "nobody"\nsocket_group = "nogroup"\n' if os.geteuid() == 0 else ""


class Queue:
    """The tests, over one way of reaching the daemon (`self.via`)."""

    @classmethod
    def setUpClass(cls):
        cls.d = HttpsDaemon(config_text=AGENT)
        made = json.loads(cls.d.cli("token", "add", "queue", "--role", "operate", "--json").stdout)
        cls.token = made["token"]
        cls.agent = ["--agent-user", "nobody"] if os.geteuid() == 0 else []

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="tether-queue-")
        os.chmod(self.work, 0o777)
        self.env = dict(os.environ, XDG_CONFIG_HOME=self.work, TETHER_TOKEN=self.token,
                        TETHER_FINGERPRINT=self.d.fingerprint)
        self.env.pop("TETHER_TASK_TOKEN", None)
        self.jobs = []

    def tearDown(self):
        for p, err in self.jobs:
            if p.poll() is None:
                p.kill()
                p.wait()
            err.close()

    def via(self):
        raise NotImplementedError

    def job(self, name, *flags):
        """Starts `task run` for job `name`, whose command runs until `release(name)`."""
        gate = os.path.join(self.work, f"go-{name}")
        err = open(os.path.join(self.work, f"{name}.err"), "w")
        script = f"while [ ! -e {gate} ]; do sleep 0.05; done"
        p = subprocess.Popen([TETHER, "task", "run", *self.via(), "--title", f"job {name}", *self.agent, *flags,
                              "--", "sh", "-c", script], stdout=subprocess.DEVNULL, stderr=err, env=self.env)
        self.jobs.append((p, err))
        return p

    def release(self, name):
        open(os.path.join(self.work, f"go-{name}"), "w").close()

    def said(self, name):
        with open(os.path.join(self.work, f"{name}.err")) as f:
            return f.read()

    def status(self):
        return self.d.status()

    def running(self):
        task = self.status()["task"]
        return task["title"] if task else None

    def tasks(self):
        return {t["title"]: t for t in self.d.call({"id": 1, "method": "task_list", "limit": 50})["result"]["tasks"]}

    def times(self, title):
        """(first, last) event time of the task titled `title`."""
        task = self.tasks()[title]
        events = self.d.call({"id": 1, "method": "task_events", "task": task["id"]})["result"]["events"]
        return events[0]["at_ms"], events[-1]["at_ms"]

    def test_waiting_jobs_run_in_order_and_a_killed_waiter_leaves_the_queue(self):
        tag = self.via()[0].strip("-")
        a = self.job(f"{tag}-a")
        wait_for("job a to have the phone", lambda: self.running() == f"job {tag}-a", timeout=60)
        b = self.job(f"{tag}-b", "--wait")
        wait_for("b in the queue", lambda: self.status()["queue"]["length"] == 1, timeout=60)
        c = self.job(f"{tag}-c", "--wait")
        wait_for("c behind b", lambda: self.status()["queue"]["length"] == 2, timeout=60)
        wait_for("b told its place", lambda: "waiting for the phone: 1 of 1" in self.said(f"{tag}-b"), timeout=60)
        wait_for("c told its place", lambda: "waiting for the phone: 2 of 2" in self.said(f"{tag}-c"), timeout=60)
        # Nobody jumps the queue.
        r = subprocess.run([TETHER, "task", "run", *self.via(), "--title", "jumper", *self.agent, "--", "true"],
                           capture_output=True, text=True, env=self.env, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("TASK_ACTIVE", r.stderr)
        # A waiter killed outright: out of the queue, nothing opened for it.
        c.send_signal(signal.SIGKILL)
        c.wait()
        wait_for("c gone from the queue", lambda: self.status()["queue"]["length"] == 1, timeout=60)
        d = self.job(f"{tag}-d", "--wait")
        wait_for("d behind b", lambda: [w["position"] for w in self.status()["queue"]["waiting"]] == [1, 2],
                 timeout=60)
        # A's end opens B, B's opens D.
        self.release(f"{tag}-a")
        self.assertEqual(a.wait(timeout=60), 0, self.said(f"{tag}-a"))
        wait_for("b to have the phone", lambda: self.running() == f"job {tag}-b", timeout=60)
        self.assertEqual(self.status()["queue"]["length"], 1)
        self.release(f"{tag}-b")
        self.assertEqual(b.wait(timeout=60), 0, self.said(f"{tag}-b"))
        wait_for("d to have the phone", lambda: self.running() == f"job {tag}-d", timeout=60)
        self.release(f"{tag}-d")
        self.assertEqual(d.wait(timeout=60), 0, self.said(f"{tag}-d"))
        tasks = self.tasks()
        self.assertNotIn(f"job {tag}-c", tasks, "the killed waiter never opened a task")
        self.assertNotIn("jumper", tasks)
        for name in "abd":
            self.assertEqual(tasks[f"job {tag}-{name}"]["state"], "completed")
        # One after the other: each opened after the previous one's end.
        (_, a_end), (b_start, b_end), (d_start, _) = (self.times(f"job {tag}-{n}") for n in "abd")
        self.assertLessEqual(a_end, b_start)
        self.assertLessEqual(b_end, d_start)
        self.assertEqual(self.status()["queue"]["length"], 0)

    def test_a_waiter_gives_up_at_its_timeout_and_nothing_opens(self):
        tag = self.via()[0].strip("-") + "-t"
        a = self.job(f"{tag}-a")
        wait_for("job a to have the phone", lambda: self.running() == f"job {tag}-a", timeout=60)
        r = subprocess.run([TETHER, "task", "run", *self.via(), "--title", f"job {tag}-late", *self.agent, "--wait",
                            "--timeout", "1", "--", "true"], capture_output=True, text=True, env=self.env,
                           timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("TIMEOUT", r.stderr)
        self.assertIn("waiting for the phone: 1 of 1", r.stderr)
        self.assertEqual(self.status()["queue"]["length"], 0)
        self.release(f"{tag}-a")
        self.assertEqual(a.wait(timeout=60), 0)
        self.assertNotIn(f"job {tag}-late", self.tasks())


class OverTheSocket(Queue, unittest.TestCase):
    def via(self):
        return ["--socket", self.d.socket]


class OverHttps(Queue, unittest.TestCase):
    def via(self):
        return ["--url", f"https://localhost:{self.d.port}"]


if __name__ == "__main__":
    unittest.main()
