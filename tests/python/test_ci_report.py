"""A CI job's evidence, as a CI system would use it: `tether task run --url … --record
--report out/ -- agent.sh` against `serve --sim`, with an agent that fails on purpose. The
exit code is passed on; `junit.xml` is read by a JUnit reader nobody here wrote
(junitparser, PyPI); the recording is decoded by Debian's ffprobe; the report's routes
answer over HTTPS with their policy. (The report in Chromium: tests/browser/report.mjs.)
"""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

import junitparser

from test_control_socket import TETHER
from test_https import HttpsDaemon

# A smaller capture than the default 1080p: the recording is encoded from raw frames, and
# half the pixels halve that work on a busy CI machine. The path is the same.
SMALL = "[sim_phone]\ncapture_width = 1280\ncapture_height = 720\n"
# As root, `task run` runs the agent under this user, which the daemon must know (the socket
# gives it the agent role).
AGENT = 'agent_user = "nobody"\nsocket_group = "nogroup"\n' if os.geteuid() == 0 else ""


def ffprobe(path):
    """(stderr, stream, format) of Debian's ffprobe decoding every frame of `path`."""
    r = subprocess.run(
        ["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
         "stream=codec_name,nb_read_frames,width,height:format=duration", "-of", "json", path],
        capture_output=True, text=True, timeout=120)
    info = json.loads(r.stdout or "{}")
    return r.stderr.strip(), (info.get("streams") or [{}])[0], info.get("format", {})


class CiJob(unittest.TestCase):
    """One daemon; each test is one CI job against it."""

    @classmethod
    def setUpClass(cls):
        cls.d = HttpsDaemon(config_text=AGENT + SMALL)
        made = json.loads(cls.d.cli("token", "add", "ci", "--role", "operate", "--json").stdout)
        cls.token = made["token"]
        cls.url = f"https://localhost:{cls.d.port}"
        # As root, the command runs as another user (as on the appliance).
        cls.agent = ["--agent-user", "nobody"] if os.geteuid() == 0 else []

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def setUp(self):
        # The CI runner's workspace: the token and fingerprint come from its secrets.
        self.work = tempfile.mkdtemp(prefix="tether-ci-")
        os.chmod(self.work, 0o777)
        self.env = dict(os.environ, XDG_CONFIG_HOME=self.work, TETHER_TOKEN=self.token,
                        TETHER_FINGERPRINT=self.d.fingerprint, TETHER_SOCKET="/nonexistent",
                        PATH=os.path.dirname(TETHER) + ":" + os.environ.get("PATH", ""))
        for k in ["TETHER_TASK_TOKEN", "TETHER_URL"]:
            self.env.pop(k, None)
        # The agent: a screenshot, two taps (steps with pictures before and after), then it
        # fails on purpose.
        self.script = os.path.join(self.work, "agent.sh")
        with open(self.script, "w") as f:
            f.write(f"#!/bin/sh\ncd /tmp\n{TETHER} screenshot -o /dev/null\n{TETHER} tap 200 300\n"
                    f"{TETHER} tap 160 60\nexit 3\n")
        os.chmod(self.script, 0o755)
        self.out = os.path.join(self.work, "out")

    def tearDown(self):
        shutil.rmtree(self.work, ignore_errors=True)

    def run_job(self, *extra):
        return subprocess.run([TETHER, "task", "run", *extra, "--title", "ci job", *self.agent, "--record",
                               "--report", self.out, "--", self.script],
                              capture_output=True, text=True, env=self.env, timeout=180)

    def check_evidence(self, r):
        self.assertEqual(r.returncode, 3, r.stderr)
        names = sorted(os.listdir(self.out))
        self.assertEqual(names, ["final.png", "junit.xml", "recording.mp4", "report.html"], r.stderr)
        # JUnit, read as a dashboard reads it.
        xml = junitparser.JUnitXml.fromfile(os.path.join(self.out, "junit.xml"))
        cases = [case for suite in xml for case in suite]
        self.assertEqual(len(cases), 1)
        case = cases[0]
        self.assertIn("ci job", case.name)
        failures = [res for res in case.result if isinstance(res, junitparser.Failure)]
        self.assertEqual(len(failures), 1, case.result)
        self.assertIn("failed", failures[0].message)
        self.assertIn("exited with 3", failures[0].message)
        self.assertIn("[[ATTACHMENT|final.png]]", case.system_out or "")
        # The recording: decoded whole with no error, as long as the task (within 1 s).
        errors, stream, fmt = ffprobe(os.path.join(self.out, "recording.mp4"))
        self.assertEqual(errors, "", "ffprobe decodes the file without a complaint")
        self.assertEqual(stream.get("codec_name"), "h264")
        self.assertGreater(int(stream.get("nb_read_frames", 0)), 0)
        # The phone's picture (portrait, inside the 1280x720 capture), not the whole frame.
        self.assertLess(stream.get("width", 0), stream.get("height", 0), stream)
        self.assertLessEqual(stream.get("height", 0), 720, stream)
        self.assertLess(abs(float(fmt["duration"]) - case.time), 1.0, (fmt, case.time))
        # The HTML names every step the journal has.
        task = self.task_id(r)
        events = self.d.call({"id": 1, "method": "task_events", "task": task})["result"]["events"]
        steps = [e["seq"] for e in events if e["kind"] == "step"]
        self.assertGreaterEqual(len(steps), 2, events)
        with open(os.path.join(self.out, "report.html"), encoding="utf-8") as f:
            page = f.read()
        for seq in steps:
            self.assertIn(f'id="step-{seq}"', page)
        self.assertNotIn("<script", page)
        return task

    def task_id(self, r):
        line = next(l for l in r.stderr.splitlines() if "opened:" in l)
        return int(line.split("task ")[1].split(" ")[0])

    def test_over_https_the_exit_code_junit_recording_and_report_are_the_evidence(self):
        r = self.run_job("--url", self.url)
        task = self.check_evidence(r)
        # The same report served by the appliance, with its policy and byte ranges.
        status, headers, body = self.d.request("GET", f"/api/tasks/{task}/report", token=self.token)
        self.assertEqual(status, 200)
        self.assertIn("default-src 'none'", headers["content-security-policy"])
        self.assertIn(b'src="recording.mp4"', body)
        status, headers, body = self.d.request("GET", f"/api/tasks/{task}/recording.mp4", token=self.token,
                                               headers={"Range": "bytes=0-99"})
        self.assertEqual(status, 206)
        size = os.path.getsize(os.path.join(self.out, "recording.mp4"))
        self.assertEqual(headers["content-range"], f"bytes 0-99/{size}")
        with open(os.path.join(self.out, "recording.mp4"), "rb") as f:
            self.assertEqual(body, f.read(100))
        status, _, body = self.d.request("GET", f"/api/tasks/{task}/recording.mp4", token=self.token)
        self.assertEqual((status, len(body)), (200, size))
        status, _, _ = self.d.request("GET", f"/api/tasks/{task}/recording.mp4", token=self.token,
                                      headers={"Range": f"bytes={size}-"})
        self.assertEqual(status, 416)
        # No token, no report.
        status, _, _ = self.d.request("GET", f"/api/tasks/{task}/report")
        self.assertEqual(status, 401)

    def test_over_the_socket_and_again_later_with_task_report(self):
        env = dict(self.env)
        env.pop("TETHER_TOKEN")
        r = subprocess.run([TETHER, "task", "run", "--socket", self.d.socket, "--title", "ci job", *self.agent,
                            "--record", "--report", self.out, "--", self.script],
                           capture_output=True, text=True, env=env, timeout=180)
        if r.returncode != 3 and "agent user" in r.stderr:
            self.fail(f"the socket run needs the agent user set up: {r.stderr}")
        task = self.check_evidence(r)
        again = os.path.join(self.work, "again")
        r = subprocess.run([TETHER, "task", "report", str(task), "-o", again, "--url", self.url],
                           capture_output=True, text=True, env=self.env, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        for name in ["junit.xml", "recording.mp4", "final.png"]:
            with open(os.path.join(self.out, name), "rb") as a, open(os.path.join(again, name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)


if __name__ == "__main__":
    unittest.main()
