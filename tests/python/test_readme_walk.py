"""The README, walked as a new user would: every shell command of its code blocks, in the
order it gives them, against a fresh `tether serve --sim`, each checked for what the README
says it does. `cargo run --release --` is the binary under test, found as `tether` on PATH.

The README cannot drift from the product: a command added, removed or reordered there has
no check here (or a check with no command) and the walk fails saying which. A command this
machine cannot run (a third-party MCP client, a board, the image) is never skipped
silently: its step names what runs instead (the server command it registers, or the suite
that covers it) and checks that.

As root the walk runs as `nobody` with a home of its own: the new user of a laptop, no
agent user and no groups to set up. Standard library only (and socat, which the README uses).
"""

import json
import os
import queue
import re
import select
import shlex
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request

from test_control_socket import ROOT, TETHER, Client
from test_https import wait_for

README = os.path.join(ROOT, "README.md")
PNG = b"\x89PNG\r\n\x1a\n"


def strip_comment(line):
    """`line` without a shell comment: a `#` at a word's start, outside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def readme_commands(text):
    """Every command line of the README's ```sh blocks, in order, continuations joined,
    comments dropped, `cargo run --release --` written as `tether`."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+", " ", strip_comment(line)).strip()
            if line:
                commands.append(line.replace("cargo run --release -- ", "tether "))
    return commands


class ReadmeWalk(unittest.TestCase):
    """One walk through the README; each command is a step with its own check."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tether-readme-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        os.chmod(self.dir, 0o755)
        self.home = os.path.join(self.dir, "home")
        self.work = os.path.join(self.home, "work")
        bin_dir = os.path.join(self.dir, "bin")
        for d in (self.home, self.work, bin_dir, os.path.join(self.dir, "run")):
            os.makedirs(d)
        os.symlink(os.path.abspath(TETHER), os.path.join(bin_dir, "tether"))
        # A laptop's defaults: data, socket and config below the user's XDG directories.
        config = os.path.join(self.home, ".config", "tether")
        os.makedirs(config)
        with open(os.path.join(config, "tether.toml"), "w") as f:
            # A free port rather than 8443: CI machines run other things.
            f.write('listen = "127.0.0.1:0"\n')
        self.env = {
            "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": self.home,
            "XDG_RUNTIME_DIR": os.path.join(self.dir, "run"),
            "XDG_CONFIG_HOME": os.path.join(self.home, ".config"),
            "XDG_DATA_HOME": os.path.join(self.home, ".local", "share"),
            "LANG": "C.UTF-8",
        }
        self.user = {}
        if os.geteuid() == 0:
            self.user = {"user": "nobody", "group": "nogroup", "extra_groups": []}
            for base, dirs, files in os.walk(self.dir):
                for name in dirs + files:
                    os.lchown(os.path.join(base, name), 65534, 65534)
            os.chown(self.dir, 65534, 65534)
        self.socket = os.path.join(self.env["XDG_RUNTIME_DIR"], "tether", "control.sock")
        self.procs = []
        self.addCleanup(self.stop_all)
        self.not_run_here = []
        self.pending_shell = []

    def stop_all(self):
        # The newest first: a runner stops its task while the daemon still answers.
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        for p in self.procs:
            for pipe in (p.stdin, p.stdout, p.stderr):
                if pipe:
                    pipe.close()

    # -- running things as the walk's user ------------------------------------------------

    def sh(self, command, timeout=60, check=True, env=None):
        r = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=self.work, env=env or self.env,
                           capture_output=True, text=True, timeout=timeout, **self.user)
        if check:
            self.assertEqual(r.returncode, 0, f"`{command}` failed:\n{r.stdout}\n{r.stderr}")
        return r

    def spawn(self, command, log=None, **kw):
        out = log or subprocess.PIPE
        p = subprocess.Popen(["bash", "-c", command], cwd=self.work, env=self.env, start_new_session=True,
                             stdout=out, stderr=out, text=True, **self.user, **kw)
        self.procs.append(p)
        return p

    def call(self, method, **params):
        c = Client(self.socket, timeout=15)
        try:
            r = c.call({"id": 1, "method": method, **params})
        finally:
            c.close()
        self.assertTrue(r.get("ok"), r)
        return r["result"]

    def sim(self):
        return self.call("sim_state")

    def element(self, eid):
        return next(e for e in self.sim()["elements"] if e["id"] == eid)

    def events(self, task):
        return self.call("task_events", task=task)["events"]

    def approvals(self, task):
        return [a["state"] for a in self.call("task_events", task=task)["approvals"]]

    def mcp_tools(self, command):
        """Starts `command` (an MCP server on stdio, as a client would), initializes and
        lists its tools."""
        p = self.spawn(command, stdin=subprocess.PIPE)
        messages = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "readme-walk", "version": "1"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        ]
        p.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
        p.stdin.flush()
        # Lines are read on a thread: a select on the pipe would miss lines already buffered.
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in p.stdout], daemon=True).start()
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                msg = json.loads(lines.get(timeout=max(0.0, deadline - time.time())))
            except queue.Empty:
                break
            if msg.get("id") == 2:
                p.stdin.close()
                p.wait(timeout=15)
                return [t["name"] for t in msg["result"]["tools"]]
        p.kill()
        self.fail(f"`{command}` answered no tools/list: {p.stderr.read()}")

    # -- the steps, in README order -------------------------------------------------------

    def serve_sim(self, cmd):
        # Its log goes to a file: a pipe read only at the end would fill and stall it.
        self.daemon_log = open(os.path.join(self.dir, "daemon.log"), "w+")
        self.addCleanup(self.daemon_log.close)
        self.daemon = self.spawn(cmd, log=self.daemon_log)
        wait_for("the daemon's socket", lambda: os.path.exists(self.socket) or self.daemon.poll() is not None, 60)
        self.assertIsNone(self.daemon.poll(), open(self.daemon_log.name).read())
        self.port = wait_for("HTTPS", lambda: (self.call("status").get("https") or {}).get("port"))

    def this_suite(self, cmd):
        self.not_run_here.append((cmd, "this is the suite running now"))

    def status(self, cmd):
        out = self.sh(cmd).stdout
        for documented in ("virtual iPhone", "hid:", "video:", "signal=locked", "task:"):
            self.assertIn(documented, out, out)

    def doctor_json(self, cmd):
        report = json.loads(self.sh(cmd).stdout)
        self.assertTrue(report["daemon"]["reachable"], report["daemon"])
        self.assertIn("hardware", report)

    def screenshot(self, cmd):
        out = self.sh(cmd).stdout
        with open(os.path.join(self.work, "shot.png"), "rb") as f:
            self.assertEqual(f.read(8), PNG)
        self.assertIn("observation_id", out)

    def tap_icon(self, cmd):
        self.assertEqual(self.sim()["screen"], "home")
        out = self.sh(cmd).stdout
        self.assertIn("The screen changed", out)
        self.assertEqual(self.sim()["screen"], "app", "the tap opened an app")

    def tap_field(self, cmd):
        self.sh(cmd)
        self.assertTrue(self.element("text_field")["focused"], "the tap focused the text field")

    def type_text(self, cmd):
        before = self.element("text_field")["text"]
        self.sh(cmd)
        self.assertEqual(self.element("text_field")["text"], before + "hello")

    def open_app(self, cmd):
        out = self.sh(cmd).stdout
        # Spotlight, the name, Return: the sim opens the app it names.
        self.assertEqual(self.sim()["screen"], "app", out)

    def pair(self, cmd):
        out = self.sh(cmd).stdout
        m = re.search(r"(https://localhost:(\d+)/pair#code=[\w-]+&fp=[0-9a-f]{64})", out)
        self.assertTrue(m, out)
        self.assertEqual(int(m.group(2)), self.port)
        self.pair_url = m.group(1)
        ca = os.path.join(self.env["XDG_DATA_HOME"], "tether", "tls", "ca.crt")
        ctx = ssl.create_default_context(cafile=ca)
        with urllib.request.urlopen(self.pair_url.split("#")[0], context=ctx, timeout=15) as r:
            self.assertEqual(r.status, 200)

    def socket_path(self, cmd):
        self.pending_shell.append(cmd)
        # Without XDG_RUNTIME_DIR the line names the socket the CLI looks for.
        env = {k: v for k, v in self.env.items() if k != "XDG_RUNTIME_DIR"}
        derived = self.sh(f"{cmd}; echo $sock", env=env).stdout.strip()
        missing = self.sh("tether status", env=env, check=False)
        self.assertNotEqual(missing.returncode, 0)
        self.assertIn(derived, missing.stderr, "the README's path is where the CLI looks")

    def socat(self, cmd):
        out = self.sh("; ".join(self.pending_shell + [cmd])).stdout
        self.pending_shell.clear()
        # Requests run concurrently: answers come in the order they finish, each with its id.
        lines = sorted((json.loads(line) for line in out.splitlines()), key=lambda r: r["id"])
        self.assertEqual([r["id"] for r in lines], [1, 2], out)
        self.assertTrue(all(r["ok"] for r in lines), out)
        self.assertEqual(lines[0]["result"]["protocol"], "tether/1")
        self.assertIn("video", lines[1]["result"])

    def mcp_add_local(self, cmd):
        server = cmd.split(" -- ", 1)[1]
        self.not_run_here.append((cmd, f"no {cmd.split()[0]} here: ran the server it registers, `{server}`"))
        tools = self.mcp_tools(server)
        for tool in ("screenshot", "tap", "type_text", "open_app", "wait_for_change"):
            self.assertIn(tool, tools)

    def login(self, cmd):
        self.assertIn("https://tether.local/pair#code=", cmd)
        self.sh(f"tether login {shlex.quote(self.pair_url)}")
        hosts = os.path.join(self.env["XDG_CONFIG_HOME"], "tether", "hosts.toml")
        self.assertEqual(os.stat(hosts).st_mode & 0o777, 0o600)

    def mcp_add_remote(self, cmd):
        server = cmd.split(" -- ", 1)[1].replace("https://tether.local", f"https://localhost:{self.port}")
        self.not_run_here.append((cmd, f"no {cmd.split()[0]} here: ran the server it registers, `{server}`"))
        tools = self.mcp_tools(server)
        self.assertIn("tap", tools, "an operate login lists the acting tools")

    def covered_by(self, suite):
        def step(cmd):
            path = os.path.join(ROOT, suite.split()[0])
            self.assertTrue(os.path.exists(path), f"{suite} covers `{cmd}`")
            self.not_run_here.append((cmd, f"needs a board or the image: {suite}"))
        return step

    def calibrate(self, cmd):
        out = self.sh(cmd, timeout=120).stdout
        self.assertIn("calibrated portrait orientation", out)

    def task_run(self, cmd):
        agent = os.path.join(self.work, "my-agent.sh")
        with open(agent, "w") as f:
            f.write("#!/bin/sh\n"
                    "tether open Settings\n"
                    "tether confirm 'Turn on airplane mode?' || exit 3\n"
                    "exec sleep 600\n")
        os.chmod(agent, 0o755)
        if self.user:
            os.chown(agent, 65534, 65534)
        self.runner = self.spawn(cmd)

        def opened():
            tasks = self.call("task_list")["tasks"]
            return next((t["id"] for t in tasks if t["title"] == "check the settings app"), None)

        self.task = wait_for("the task to open", opened, 30)
        wait_for("the agent's question", lambda: self.approvals(self.task) == ["pending"], 30, interval=0.1)

    def agent_processes(self):
        """Processes in the walk's working directory: the daemon's and, once the runner and
        the follower have exited, the agent's."""
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.readlink(f"/proc/{pid}/cwd") == self.work:
                    found.append(int(pid))
            except OSError:
                continue
        return found

    def with_task(self, cmd):
        return re.sub(r"\b12\b", str(self.task), cmd)

    def task_list(self, cmd):
        out = self.sh(cmd).stdout
        line = next(line for line in out.splitlines() if "check the settings app" in line)
        # The agent asked its question: the task waits for a person.
        self.assertIn("waiting", line)

    def task_follow(self, cmd):
        self.follow = self.spawn(self.with_task(cmd))
        # It prints the journal so far, then follows.
        ready, _, _ = select.select([self.follow.stdout], [], [], 30)
        self.assertTrue(ready, "the journal so far is printed at once")
        self.assertIn("running", self.follow.stdout.readline(), "the first line is the task's start")

    def pause_resume(self, cmd):
        self.sh(self.with_task(cmd))
        states = [e["data"]["state"] for e in self.events(self.task) if e["kind"] == "state"]
        self.assertEqual(states[-2:], ["paused", "waiting"], "paused, then back to waiting for the answer")

    def takeover_handback(self, cmd):
        self.sh(self.with_task(cmd))
        states = [e["data"]["state"] for e in self.events(self.task) if e["kind"] == "state"]
        self.assertEqual(states[-2:], ["taken_over", "waiting"], states)

    def approve(self, cmd):
        self.sh(self.with_task(cmd))
        wait_for("the answer in the journal", lambda: self.approvals(self.task) == ["approved"], 15, interval=0.1)
        self.assertIsNone(self.runner.poll(), "the agent goes on after the approval")

        def sleeping():
            found = []
            for pid in self.agent_processes():
                try:
                    with open(f"/proc/{pid}/cmdline") as f:
                        if f.read().startswith("sleep"):
                            found.append(pid)
                except OSError:
                    continue
            return found

        wait_for("the agent to go on to its sleep", sleeping, 15, interval=0.1)

    def stop(self, cmd):
        self.sh(self.with_task(cmd))
        rc = self.runner.wait(timeout=30)
        self.assertNotEqual(rc, 0, "a stopped task is not a success")
        self.assertEqual(self.call("task_list")["tasks"][0]["state"], "cancelled")
        # The follower ends with the task.
        self.assertEqual(self.follow.wait(timeout=15), 0)
        self.assertIn("cancelled", self.follow.stdout.read())
        # The command's whole process group ended: nothing of the agent's is left.
        left = [p for p in self.agent_processes() if p != self.daemon.pid]
        self.assertEqual(left, [], "the agent's process group ended")

    def task_run_report(self, cmd):
        script = os.path.join(self.work, "test.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\ntether home\n")
        os.chmod(script, 0o755)
        if self.user:
            os.chown(script, 65534, 65534)
        self.sh(cmd, timeout=120)
        out = os.path.join(self.work, "out")
        for name in ["report.html", "junit.xml", "final.png", "recording.mp4"]:
            self.assertTrue(os.path.getsize(os.path.join(out, name)) > 0, name)
        with open(os.path.join(out, "junit.xml")) as f:
            self.assertIn('failures="0"', f.read(), "the test passed: its case passes")

    def task_report(self, cmd):
        self.sh(self.with_task(cmd))
        with open(os.path.join(self.work, "out", "junit.xml")) as f:
            junit = f.read()
        self.assertIn("check the settings app", junit)
        self.assertIn('type="cancelled"', junit, "the stopped task is a failing case")
        # That task was not recorded: no recording of the earlier report is left beside it.
        self.assertFalse(os.path.exists(os.path.join(self.work, "out", "recording.mp4")))

    def discover(self, cmd):
        # mDNS goes to every interface of the machine; tests stay on loopback and in the
        # namespaces they make.
        self.not_run_here.append((cmd, "browses the LAN: tests/python/test_discover.py runs it in network namespaces"))
        self.assertTrue(os.path.exists(os.path.join(ROOT, "tests/python/test_discover.py")))

    STEPS = [
        (r"^tether serve --sim$", "serve_sim"),
        (r"^tests/run$", "this_suite"),
        (r"^tether status$", "status"),
        (r"^tether doctor --json$", "doctor_json"),
        (r"^tether screenshot -o shot\.png$", "screenshot"),
        (r"^tether tap 80 150$", "tap_icon"),
        (r"^tether tap 250 400$", "tap_field"),
        (r'^tether type "hello"$', "type_text"),
        (r"^tether open Demo$", "open_app"),
        (r"^tether pair --host localhost$", "pair"),
        (r"^sock=", "socket_path"),
        (r"^printf .* \| socat - UNIX-CONNECT:\$sock$", "socat"),
        (r"^claude mcp add tether -- tether mcp$", "mcp_add_local"),
        (r"^codex mcp add tether -- tether mcp$", "mcp_add_local"),
        (r"^tether login 'https://tether\.local/pair#code=", "login"),
        (r"^claude mcp add tether -- tether mcp --url https://tether\.local$", "mcp_add_remote"),
        (r"^\./flash\.sh build --board rpi4$", ("covered", "tests/vm/run.sh image")),
        (r"^\./flash\.sh write ", ("covered", "tests/image/test_write.sh")),
        (r"^\./flash\.sh bundle --board rpi4 --version 1\.3$", ("covered", "tests/vm/run.sh image")),
        (r"^tether update out/tether-rpi4-1\.3\.raucb --url https://tether\.local$", ("covered", "tests/vm/run.sh image")),
        (r"^tether gadget up --udc fe980000\.usb$", ("covered", "tests/vm/run.sh hid")),
        (r"^tether serve --video v4l2$", ("covered", "tests/vm/run.sh video")),
        (r"^tether calibrate$", "calibrate"),
        (r'^tether task run --title "check the settings app" --app Settings -- \./my-agent\.sh$', "task_run"),
        (r"^tether task list$", "task_list"),
        (r"^tether task events 12 --follow$", "task_follow"),
        (r"^tether task pause 12 ; tether task resume 12$", "pause_resume"),
        (r"^tether task takeover 12 ; tether task handback 12$", "takeover_handback"),
        (r"^tether task approve 12$", "approve"),
        (r"^tether task stop 12$", "stop"),
        (r"^tether task run --wait --record --report out/ -- \./test\.sh$", "task_run_report"),
        (r"^tether task report 12 -o out/$", "task_report"),
        (r"^tether discover$", "discover"),
    ]

    def test_every_readme_command_in_order_does_what_the_readme_says(self):
        with open(README) as f:
            commands = readme_commands(f.read())
        for i, command in enumerate(commands):
            self.assertLess(i, len(self.STEPS), f"README command {i + 1} `{command}` has no check in this walk: add one")
            pattern, step = self.STEPS[i]
            self.assertRegex(command, pattern, f"README command {i + 1} is not the one this walk expects next")
            run = self.covered_by(step[1]) if isinstance(step, tuple) else getattr(self, step)
            try:
                run(command)
            except Exception as e:
                # The walk stops at the first step that fails: later ones build on it.
                raise AssertionError(f"README command {i + 1} `{command}`: {e}") from e
        self.assertEqual(len(commands), len(self.STEPS), "the walk checks commands the README no longer has")
        print("\n  README walk: ran", len(commands) - len(self.not_run_here), "of", len(commands), "commands here")
        for command, why in self.not_run_here:
            print(f"    `{command}`: {why}")
        self.daemon.send_signal(signal.SIGTERM)
        self.assertEqual(self.daemon.wait(timeout=30), 0)
        with open(self.daemon_log.name) as f:
            log = f.read()
        self.assertNotIn("panicked", log)
        self.assertNotIn(" ERROR ", log)


class ReadmeFacts(unittest.TestCase):
    """What the README states about the protocol and the defaults, against a daemon."""

    @classmethod
    def setUpClass(cls):
        from test_control_socket import Daemon
        cls.d = Daemon()
        with open(README) as f:
            cls.text = f.read()

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def test_the_method_table_lists_every_method_an_admin_may_call(self):
        hello = self.d.call({"id": 1, "method": "hello"})["result"]
        # An admin may call everything but `task_confirm`, which only a task's agent calls.
        methods = set(hello["capabilities"]["methods"]) | {"task_confirm"}
        section = self.text.split("## Protocol (tether/1)", 1)[1].split("\n## ", 1)[0]
        listed = set()
        for row in re.findall(r"^\| (`[^|]*`) \|", section, re.M):
            listed.update(re.findall(r"`([a-z_]+)`", row))
        self.assertEqual(sorted(methods - listed), [], "methods the README's table leaves out")
        self.assertEqual(sorted(listed - methods), [], "methods the README lists that do not exist")

    def test_the_limits_block_shows_the_defaults_status_reports(self):
        limits = self.d.call({"id": 1, "method": "status"})["result"]["limits"]
        block = re.search(r"```toml\n\[limits\]\n(.*?)```", self.text, re.S).group(1)
        shown = dict(re.findall(r"^(\w+) = (\d+)", block, re.M))
        self.assertGreaterEqual(len(shown), 4, block)
        flat = {}

        def walk(prefix, v):
            if isinstance(v, dict):
                for k, x in v.items():
                    walk(k, x)
            else:
                flat.setdefault(prefix, v)

        walk("", limits)
        for key, value in shown.items():
            self.assertIn(key, flat, f"status.limits has no {key}")
            self.assertEqual(flat[key], int(value), f"README's {key}")


if __name__ == "__main__":
    unittest.main()
