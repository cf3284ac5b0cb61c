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


def plain_hex(fingerprint):
    """A fingerprint in either form (`ab…` or `AB:…`) as lowercase hex."""
    return fingerprint.replace(":", "").lower()


class RemoteVerbs(unittest.TestCase):
    """Hints that name the real problem, wait-for-change's exit status and `status --url`,
    against an HTTPS daemon."""

    @classmethod
    def setUpClass(cls):
        cls.d = HttpsDaemon()
        cls.url = f"https://localhost:{cls.d.port}"
        # A laptop: no socket, its own config directory.
        cls.env = dict(cls.d.env(), XDG_CONFIG_HOME=tempfile.mkdtemp(prefix="tether-home-"),
                       TETHER_SOCKET="/nonexistent")

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def tether(self, *args, **env):
        return subprocess.run([TETHER, *args], capture_output=True, text=True, env=dict(self.env, **env),
                              timeout=120)

    def test_an_unknown_token_is_not_called_a_role_problem(self):
        r = self.tether("screenshot", "-o", os.devnull, "--url", self.url, "--fingerprint", self.d.fingerprint,
                        TETHER_TOKEN="not-a-token-anyone-made")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("UNAUTHORIZED", r.stderr)
        self.assertIn("does not know this token", r.stderr)
        self.assertIn("tether login", r.stderr)
        self.assertNotIn("role", r.stderr)
        # A known token whose role is too small is the role problem.
        view = self.d.cli("token", "add", "hint-view", "--role", "view").stdout.strip()
        r = self.tether("home", "--url", self.url, "--fingerprint", self.d.fingerprint, TETHER_TOKEN=view)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("PERMISSION_DENIED", r.stderr)
        self.assertIn("role does not allow", r.stderr)

    def test_a_wrong_pin_says_the_fingerprint_differs_and_shows_both(self):
        wrong = "ab" * 32
        for args in (["screenshot", "-o", os.devnull], ["task", "list"]):
            r = self.tether(*args, "--url", self.url, "--fingerprint", wrong, TETHER_TOKEN=self.d.admin)
            self.assertNotEqual(r.returncode, 0, args)
            self.assertNotIn("cannot be reached", r.stderr, args)
            self.assertIn("not from the pinned certificate authority", r.stderr, args)
            shown = {plain_hex(f) for f in re.findall(r"(?:[0-9A-Fa-f]{2}:){31}[0-9A-Fa-f]{2}", r.stderr)}
            self.assertEqual(shown, {wrong, plain_hex(self.d.fingerprint)}, r.stderr)
            self.assertIn("tether pair", r.stderr, args)

    def test_wait_for_change_exits_124_when_nothing_changed(self):
        auth = dict(TETHER_TOKEN=self.d.admin)
        pin = ["--url", self.url, "--fingerprint", self.d.fingerprint]
        self.assertIn("124", self.tether("wait-for-change", "--help").stdout)
        # Let the screen come to rest first: then a short wait sees nothing.
        self.tether("wait-for-settle", *pin, **auth)
        r = self.tether("wait-for-change", "--timeout-ms", "300", *pin, **auth)
        self.assertEqual(r.returncode, 124, r.stdout + r.stderr)
        self.assertIn("did not change", r.stdout)
        # A change seen: 0 (the app switcher and the home screen, in turn, while it waits).
        waiting = subprocess.Popen([TETHER, "wait-for-change", "--timeout-ms", "20000", *pin],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=dict(self.env, **auth))
        self.addCleanup(waiting.kill)
        # Change the screen until the waiter has seen it (its first look may come after a change).
        verbs = iter(["app-switcher", "home"] * 20)

        def seen():
            self.tether(next(verbs), "--expect", "any", *pin, **auth)
            try:
                waiting.wait(timeout=1)
            except subprocess.TimeoutExpired:
                return False
            return True
        wait_for("wait-for-change to see a change", seen, timeout=30)
        out, err = waiting.communicate()
        self.assertEqual(waiting.returncode, 0, out + err)
        self.assertIn("changed", out)

    def test_a_tap_on_an_inert_control_says_one_thing_and_prints_the_id_it_names(self):
        from test_mcp import APP0, DEAD, find_colour  # the sim's colours and a PNG reader
        auth = dict(TETHER_TOKEN=self.d.admin)
        pin = ["--url", self.url, "--fingerprint", self.d.fingerprint]
        shot = os.path.join(tempfile.mkdtemp(), "shot.png")

        def screenshot():
            r = self.tether("screenshot", "-o", shot, *pin, **auth)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(shot, "rb") as f:
                return f.read()
        self.tether("home", "--expect", "any", *pin, **auth)
        self.tether("wait-for-settle", *pin, **auth)
        x, y = find_colour(screenshot(), APP0, tolerance=10)
        r = self.tether("tap", str(x), str(y), *pin, **auth)
        self.assertEqual(r.returncode, 0, r.stderr)
        dx, dy = find_colour(screenshot(), DEAD, tolerance=6)
        r = self.tether("tap", str(dx), str(dy), *pin, **auth)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn("NO_VISIBLE_EFFECT", r.stderr)
        self.assertEqual(r.stderr.count("did not change"), 1, r.stderr)
        self.assertNotIn("still changing", r.stderr)
        self.assertNotIn("effect.", r.stderr, "a field the CLI never prints")
        named = re.search(r"`--observation-id ([^`\s]+)` aims", r.stderr)
        self.assertTrue(named, r.stderr)
        # The id it prints is real: a verb aims at it.
        r = self.tether("tap", str(dx), str(dy), "--observation-id", named.group(1), "--expect", "any", *pin, **auth)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_status_takes_a_url_with_a_stored_login(self):
        made = json.loads(self.d.cli("pair", "--role", "view", "--name", "status-laptop", "--host", "localhost",
                                     "--json").stdout)
        r = self.tether("login", made["url"])
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.tether("status", "--url", self.url)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("virtual iPhone", r.stdout)
        self.assertIn("view (token status-laptop)", r.stdout)
        r = self.tether("status", "--url", self.url, "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["hid"]["backend"], "sim")
        # A token and a pin without a login work as for the other verbs.
        r = self.tether("status", "--url", self.url, "--fingerprint", self.d.fingerprint,
                        XDG_CONFIG_HOME=tempfile.mkdtemp(), TETHER_TOKEN=self.d.admin)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("admin (token admin)", r.stdout)


class JournalText(unittest.TestCase):
    """`tether task events` says who acted, as `--json`'s `by` does."""

    def setUp(self):
        self.d = Daemon()
        self.addCleanup(self.d.stop)
        self.env = dict(os.environ, TETHER_SOCKET=self.d.socket)
        self.env.pop("TETHER_TASK_TOKEN", None)

    def test_an_agents_step_and_a_humans_tap_during_a_takeover_read_apart(self):
        lease, task, token = open_task(self.d.socket, "who acted")
        self.addCleanup(lease.close)
        agent = Client(self.d.socket, timeout=30)
        self.addCleanup(agent.close)
        r = agent.call({"id": 1, "method": "screenshot", "task_token": token})
        self.assertTrue(r["ok"], r)
        r = agent.call({"id": 2, "method": "action", "task_token": token, "operation_id": "agent-home",
                        "action": {"type": "home"}, "expect": "any"})
        self.assertTrue(r["ok"], r)
        r = subprocess.run([TETHER, "task", "takeover", str(task)], capture_output=True, text=True, env=self.env,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        human = Client(self.d.socket, timeout=30)
        self.addCleanup(human.close)
        r = human.call({"id": 3, "method": "action", "operation_id": "human-switcher",
                        "action": {"type": "app_switcher"}, "expect": "any"})
        self.assertTrue(r["ok"], r)
        r = subprocess.run([TETHER, "task", "events", str(task)], capture_output=True, text=True, env=self.env,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        steps = [line for line in r.stdout.splitlines() if " step " in line]
        self.assertEqual(len(steps), 2, r.stdout)
        self.assertIn("agent: ", steps[0])
        self.assertIn(f"human (uid {os.geteuid()}): ", steps[1])
        self.assertNotIn("agent", steps[1])
        takeover = [line for line in r.stdout.splitlines() if "taken_over" in line]
        self.assertTrue(takeover and "human (uid" in takeover[0], r.stdout)
        # The same people as --json's `by`.
        r = subprocess.run([TETHER, "task", "events", str(task), "--json"], capture_output=True, text=True,
                           env=self.env, timeout=60)
        bys = [json.loads(line)["data"]["by"] for line in r.stdout.splitlines() if '"kind":"step"' in line]
        self.assertEqual([b["with_task_token"] for b in bys], [True, False])


class ServeOnABusyPort(unittest.TestCase):
    def test_one_message_a_failure_and_nothing_made_in_the_data_directory(self):
        import socket
        busy = socket.socket()
        self.addCleanup(busy.close)
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        base = tempfile.mkdtemp(prefix="tether-busy-")
        data = os.path.join(base, "data")  # does not exist yet: serve would make it
        sock = os.path.join(base, "control.sock")
        r = subprocess.run([TETHER, "serve", "--sim", "--data-dir", data, "--socket", sock,
                            "--listen", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, RUST_LOG="info"))
        self.assertNotEqual(r.returncode, 0)
        said = r.stdout + r.stderr
        self.assertEqual(said.count("already in use"), 1, said)
        self.assertIn(f"127.0.0.1:{port}", said)
        self.assertIn("--listen", said)
        self.assertNotIn("below 1024", said, "not a privileged port")
        self.assertFalse(os.path.exists(os.path.join(data, "tls")), "no CA made")
        made = os.listdir(data) if os.path.exists(data) else []
        self.assertEqual(made, [], "nothing made in the data directory")
        self.assertFalse(os.path.exists(sock))


class AdvertisedAddresses(unittest.TestCase):
    """`status` and `doctor` offer only URLs that reach the listener."""

    def doctor_urls(self, d):
        r = subprocess.run([TETHER, "doctor", "--json"], capture_output=True, text=True, env=d.env(), timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)["https"]["urls"]

    def test_loopback_only_offers_loopback(self):
        d = HttpsDaemon(listen="127.0.0.1:0")
        self.addCleanup(d.stop)
        self.assertEqual(d.status()["https"]["hosts"], ["localhost", "127.0.0.1"])
        urls = [f"https://localhost:{d.port}", f"https://127.0.0.1:{d.port}"]
        self.assertEqual(self.doctor_urls(d), urls)
        r = subprocess.run([TETHER, "doctor"], capture_output=True, text=True, env=d.env(), timeout=60)
        https = next(line for line in r.stdout.splitlines() if line.strip().startswith("https:"))
        self.assertNotIn(".local", https)
        # And each one answers.
        for url in urls:
            host = url.split("//")[1].rsplit(":", 1)[0]
            status, _, _ = d.request("GET", "/api/status", token=d.admin, host=f"{host}:{d.port}")
            self.assertEqual(status, 200, url)

    def test_a_wildcard_offers_the_mdns_name_never_the_bare_hostname(self):
        d = HttpsDaemon(listen="0.0.0.0:0")
        self.addCleanup(d.stop)
        hosts = d.status()["https"]["hosts"]
        short = socket_hostname()
        self.assertEqual(hosts[0], f"{short}.local", hosts)
        self.assertNotIn(short, hosts, "a bare hostname is not offered")
        self.assertNotIn("127.0.0.1", hosts)
        self.assertEqual(hosts[-1], "localhost")
        self.assertTrue(all(":" not in h for h in hosts), f"0.0.0.0 takes no IPv6: {hosts}")


def socket_hostname():
    import socket
    return socket.gethostname().split(".")[0].lower()


if __name__ == "__main__":
    unittest.main()
