"""`GET /metrics` as a farm uses it: Debian's Prometheus (tests/run installs it; missing, this fails) scrapes the appliance over HTTPS
with a view token, and what it stores matches `status` and the actions' answers. The text
passes `promtool check metrics` (the Prometheus project's own linter). Nothing is mocked:
a real `serve --sim`, a real Prometheus queried over its HTTP API.
"""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import unittest
import urllib.parse
import urllib.request

from test_control_socket import Client
from test_https import HttpsDaemon, wait_for


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Metrics(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = HttpsDaemon()
        cls.view = json.loads(cls.d.cli("token", "add", "prometheus", "--role", "view", "--json").stdout)["token"]
        cls.work = tempfile.mkdtemp(prefix="tether-prom-")
        token_file = os.path.join(cls.work, "token")
        with open(token_file, "w") as f:
            f.write(cls.view)
        cls.prom_port = free_port()
        config = os.path.join(cls.work, "prometheus.yml")
        with open(config, "w") as f:
            f.write(f"""global:
  scrape_interval: 1s
scrape_configs:
  - job_name: tether
    scheme: https
    metrics_path: /metrics
    tls_config:
      ca_file: {cls.d.ca}
    authorization:
      credentials_file: {token_file}
    static_configs:
      - targets: ["localhost:{cls.d.port}"]
""")
        cls.log = open(os.path.join(cls.work, "prometheus.log"), "w")
        cls.prom = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={cls.work}/data",
             f"--web.listen-address=127.0.0.1:{cls.prom_port}"],
            stdout=cls.log, stderr=subprocess.STDOUT)

    @classmethod
    def tearDownClass(cls):
        cls.prom.terminate()
        try:
            cls.prom.wait(timeout=20)
        except subprocess.TimeoutExpired:
            cls.prom.kill()
            cls.prom.wait()
        cls.log.close()
        cls.d.stop()
        shutil.rmtree(cls.work, ignore_errors=True)

    def query(self, expr):
        """The instant vector `expr` as {labels-json: value}."""
        url = f"http://127.0.0.1:{self.prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                answer = json.load(r)
        except OSError:
            return None
        out = {}
        for series in answer["data"]["result"]:
            labels = {k: v for k, v in series["metric"].items() if k not in ("job", "instance")}
            out[json.dumps(labels, sort_keys=True)] = float(series["value"][1])
        return out

    def one(self, expr):
        values = self.query(expr) or {}
        return next(iter(values.values()), None)

    def test_the_endpoint_needs_a_token_and_passes_promtool(self):
        status, _, _ = self.d.request("GET", "/metrics")
        self.assertEqual(status, 401)
        status, headers, body = self.d.request("GET", "/metrics", token=self.view)
        self.assertEqual(status, 200)
        self.assertEqual(headers["content-type"], "text/plain; version=0.0.4; charset=utf-8")
        text = body.decode() if isinstance(body, bytes) else body
        self.assertIn("tether_task_state{state=\"none\"} 1", text)
        r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # A task's token is an agent's credential, not a monitor's.
        c = Client(self.d.socket, timeout=30)
        opened = c.call({"id": 1, "method": "task_open", "title": "metrics token", "events": False})["result"]
        status, _, _ = self.d.request("GET", "/metrics", headers={"Tether-Task-Token": opened["token"]})
        self.assertIn(status, (401, 403))
        c.close()
        wait_for("the task to end with its lease", lambda: self.d.status()["task"] is None)

    def test_prometheus_scrapes_what_status_and_the_answers_say(self):
        wait_for("prometheus to scrape the appliance", lambda: self.one('up{job="tether"}') == 1, timeout=90)
        c = Client(self.d.socket, timeout=30)
        opened = c.call({"id": 1, "method": "task_open", "title": "scraped", "events": False})["result"]
        token = opened["token"]
        shot = c.call({"id": 2, "method": "screenshot", "task_token": token})["result"]
        obs = shot["metadata"]["observation_id"]
        size = shot["metadata"]["image_size"]
        ok = c.call({"id": 3, "method": "action", "task_token": token, "operation_id": "m1", "observation_id": obs,
                     "action": {"type": "tap", "x": 10, "y": 10}, "expect": "any"})
        self.assertTrue(ok["ok"], ok)
        off = c.call({"id": 4, "method": "action", "task_token": token, "operation_id": "m2", "observation_id": obs,
                      "action": {"type": "tap", "x": size["width"] + 50, "y": 10}})
        self.assertEqual(off["error"]["code"], "OUT_OF_BOUNDS")
        status = self.d.status()
        wait_for("the task's state scraped",
                 lambda: self.one('tether_task_state{state="running"}') == 1, timeout=60)
        wait_for("the refused action scraped",
                 lambda: (self.one('tether_actions_total{code="OUT_OF_BOUNDS"}') or 0) >= 1, timeout=60)
        self.assertGreaterEqual(self.one('tether_actions_total{code="ok"}'), 1)
        self.assertEqual(self.one('tether_task_state{state="none"}'), 0)
        self.assertEqual(self.one("tether_task_queue_length"), status["queue"]["length"])
        self.assertEqual(self.one("tether_viewers"), status["video"]["viewers"]["viewers"])
        connected = 1 if status["hid"]["host"] == "configured" else 0
        self.assertEqual(self.one("tether_phone_connected"), connected)
        self.assertEqual(self.one(f'tether_video_signal{{state="{status["video"]["signal"]}"}}'), 1)
        self.assertGreater(self.one("tether_video_fps"), 0)
        self.assertGreaterEqual(self.one("tether_verify_latency_seconds_count"), 1)
        self.assertGreater(self.one("process_resident_memory_bytes"), 1 << 20)
        c.close()
        wait_for("the task to end with its lease", lambda: self.d.status()["task"] is None)
        wait_for("the end scraped", lambda: self.one('tether_task_state{state="none"}') == 1, timeout=60)


if __name__ == "__main__":
    unittest.main()
