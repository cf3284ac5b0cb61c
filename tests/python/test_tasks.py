"""Tasks from the outside: the real `tether` binary, killed with -9, driven by other uids,
and `tether task run` wrapping real processes. Standard library only.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from test_control_socket import CHILD_PYTHON, TETHER, Client, Daemon


def call(client, req_id, method, **params):
    req = {"id": req_id, "method": method}
    req.update(params)
    client.send_line(req)
    while True:
        msg = client.recv()
        if msg.get("id") == req_id:
            return msg


def ok(client, req_id, method, **params):
    r = call(client, req_id, method, **params)
    assert r["ok"], f"{method} {params}: {r}"
    return r["result"]


def events(client, task, after=0):
    return ok(client, 900, "task_events", task=task, after_seq=after)["events"]


def session_members(sid):
    """Pids whose session id is `sid` (from /proc/PID/stat)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z" and int(fields[3]) == sid:
            found.append(int(entry))
    return found


def children_of(pid):
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                out.append(int(entry))
    return out


class KillNineTest(unittest.TestCase):
    """kill -9 during a task: after a restart the task is `interrupted`, every event up to the
    kill is still there, and the stream resumes by seq."""

    def test_kill_9_then_restart(self):
        d = Daemon()
        lease = Client(d.socket)
        opened = ok(lease, 1, "task_open", title="survive kill -9")
        task, token = opened["id"], opened["token"]
        agent = Client(d.socket)
        shot = ok(agent, 2, "screenshot", task_token=token)
        obs = shot["metadata"]["observation_id"]
        ok(agent, 3, "action", task_token=token, operation_id="t1", observation_id=obs,
           action={"type": "tap", "x": 100, "y": 300})
        for i in range(3):
            ok(agent, 10 + i, "task_note", task_token=token, text=f"note {i}")
        ok(lease, 4, "task_control", task=task, action="pause")
        before = events(lease, task)
        self.assertGreaterEqual(len(before), 7)
        d.proc.kill()
        d.proc.wait()
        d.log.close()
        os.unlink(d.socket)  # stale after kill -9
        again = Daemon(data_dir=d.dir)
        try:
            c = Client(again.socket)
            listed = ok(c, 1, "task_list")["tasks"]
            self.assertEqual(listed[0]["id"], task)
            self.assertEqual(listed[0]["state"], "interrupted")
            after = events(c, task)
            self.assertEqual(after[:len(before)], before, "every event up to the kill is kept")
            # The stream resumes after the last seq seen before the kill: only what is new.
            resumed = events(c, task, after=before[-1]["seq"])
            self.assertEqual([e["seq"] for e in resumed], [before[-1]["seq"] + 1])
            self.assertEqual(resumed[0]["data"]["state"], "interrupted")
            # The old token is dead; a new task can be opened.
            r = call(c, 2, "screenshot", task_token=token)
            self.assertEqual(r["error"]["code"], "TASK_ENDED")
            ok(c, 3, "task_open", title="after restart")
            c.close()
        finally:
            lease.close()
            agent.close()
            again.stop()


class SecondDaemonTest(unittest.TestCase):
    """A second daemon on a data directory in use exits non-zero naming the first, before it
    touches anything: the first's running task stays running and its journal unchanged."""

    def test_a_second_daemon_on_the_same_data_dir_refuses_to_start(self):
        d = Daemon()
        lease = Client(d.socket)
        try:
            opened = ok(lease, 1, "task_open", title="the first daemon's task")
            task = opened["id"]
            ok(lease, 2, "task_note", task_token=opened["token"], text="before the second daemon")
            before = events(lease, task)
            other_socket = os.path.join(tempfile.mkdtemp(prefix="tether-py-"), "second.sock")
            second = subprocess.run(
                [TETHER, "serve", "--sim", "--socket", other_socket, "--data-dir", d.dir,
                 "--listen", "127.0.0.1:0"],
                capture_output=True, text=True, timeout=30)
            self.assertNotEqual(second.returncode, 0, second.stderr)
            self.assertIn(f"pid {d.proc.pid}", second.stderr)
            self.assertIn(d.socket, second.stderr, "names the running daemon's socket")
            self.assertIn("--data-dir", second.stderr, "says what to do")
            self.assertFalse(os.path.exists(other_socket), "the second never bound a socket")
            self.assertIsNone(d.proc.poll(), "the first daemon still runs")
            listed = ok(lease, 3, "task_list")["tasks"]
            self.assertEqual([t["state"] for t in listed if t["id"] == task], ["running"])
            self.assertEqual(events(lease, task), before, "the journal is untouched")
            ok(lease, 4, "task_note", task_token=opened["token"], text="after")
        finally:
            lease.close()
            d.stop()


@unittest.skipUnless(os.geteuid() == 0, "running clients under the agent uid needs root")
class AgentUidTest(unittest.TestCase):
    """An agent under its own uid cannot approve its own question or resume a paused task, with
    or without the task's token, on the owner's socket; each refusal is in the journal."""

    SCRIPT = r"""
import json, socket, sys
path, token, task, action, ask = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5] == "ask"
def conn():
    s = socket.socket(socket.AF_UNIX); s.connect(path); s.settimeout(10); return s
def call(s, req):
    s.sendall((json.dumps(req) + "\n").encode()); buf = b""
    while True:
        while b"\n" not in buf:
            buf += s.recv(65536)
        line, buf = buf.split(b"\n", 1)
        msg = json.loads(line)
        if msg.get("id") == req["id"]:
            return msg
asker = conn()
out = {}
s = conn()
if ask:
    asker.sendall((json.dumps({"id": 1, "method": "task_confirm", "question": "pay 100 EUR?", "task_token": token}) + "\n").encode())
    # Wait until the question is the task's (it is waiting for a human), not a fixed time.
    import time
    deadline = time.time() + 30
    while ((call(s, {"id": 5, "method": "status"}).get("result") or {}).get("task") or {}).get("state") != "waiting":
        if time.time() > deadline:
            sys.exit("the question never reached the task")
        time.sleep(0.02)
out["hello"] = call(s, {"id": 2, "method": "hello"})["result"]["caller"]
out["plain"] = call(s, {"id": 3, "method": "task_control", "task": task, "action": action})
out["token"] = call(s, {"id": 4, "method": "task_control", "task": task, "action": action, "task_token": token})
print(json.dumps(out))
"""

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(["--agent-user", "nobody"], config_text='socket_group = "nogroup"\n')

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def as_agent(self, token, task, action, ask):
        out = subprocess.run(
            [CHILD_PYTHON, "-c", self.SCRIPT, self.daemon.socket, token, str(task), action, "ask" if ask else "-"],
            user="nobody", group="nogroup", extra_groups=[], capture_output=True, text=True, timeout=30,
        )
        self.assertEqual(out.returncode, 0, out.stderr)
        return json.loads(out.stdout)

    def refused(self, c, task):
        return [e for e in events(c, task) if e["kind"] == "refused"]

    def refused_counting(self, c, task, n):
        """The refused events once they count `n` refusals (fails after 30 s)."""
        deadline = time.time() + 30
        while True:
            refused = self.refused(c, task)
            total = sum(r["data"].get("count", 1) for r in refused)
            if total >= n:
                self.assertEqual(total, n, refused)
                return refused
            self.assertLess(time.time(), deadline, refused)
            time.sleep(0.05)

    def test_agent_cannot_approve_or_resume(self):
        owner = Client(self.daemon.socket)
        opened = ok(owner, 1, "task_open", title="agent isolation")
        task, token = opened["id"], opened["token"]
        # The agent asks, then tries to answer itself.
        out = self.as_agent(token, task, "approve", ask=True)
        self.assertEqual(out["hello"]["role"], "agent")
        self.assertEqual(out["hello"]["identity"]["uid"], 65534)
        for how in ("plain", "token"):
            self.assertEqual(out[how]["error"]["code"], "PERMISSION_DENIED", out[how])
        # Repeats within a second share one journal event that counts them (written within
        # about a second): wait until both are counted.
        refused = self.refused_counting(owner, task, 2)
        self.assertTrue(all(r["data"]["by"]["identity"]["uid"] == 65534 for r in refused), refused)
        self.assertTrue(all(r["data"]["what"] == "task_control approve" for r in refused), refused)
        # The question was never answered yes (it was withdrawn when the agent left).
        answers = [e for e in events(owner, task) if e["kind"] == "state" and e["data"].get("detail", {}).get("approved")]
        self.assertEqual(answers, [])
        # A human pauses; the agent cannot resume.
        deadline = time.time() + 30
        while ok(owner, 2, "status")["task"]["state"] != "running":
            self.assertLess(time.time(), deadline)
            time.sleep(0.05)
        ok(owner, 3, "task_control", task=task, action="pause")
        out = self.as_agent(token, task, "resume", ask=False)
        for how in ("plain", "token"):
            self.assertEqual(out[how]["error"]["code"], "PERMISSION_DENIED", out[how])
        self.assertEqual(ok(owner, 4, "status")["task"]["state"], "paused")
        self.refused_counting(owner, task, 4)
        ok(owner, 5, "task_control", task=task, action="stop")
        owner.close()


class TaskRunTest(unittest.TestCase):
    """`tether task run`: exit code → result; a stop from another terminal (or SIGTERM to the
    runner) ends the command's whole process group."""

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(["--agent-user", "nobody"], config_text='socket_group = "nogroup"\n')
        cls.extra = ["--agent-user", "nobody"] if os.geteuid() == 0 else []

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def tether(self, *args, **kw):
        return subprocess.run([TETHER, *args], capture_output=True, text=True, timeout=60, **kw)

    def newest(self):
        c = Client(self.daemon.socket)
        try:
            return ok(c, 1, "task_list", limit=1)["tasks"][0], c
        except Exception:
            c.close()
            raise

    def test_exit_code_becomes_the_result(self):
        script = '[ -n "$TETHER_TASK_TOKEN" ] && [ "$TETHER_TASK_ID" -gt 0 ] && [ -S "$TETHER_SOCKET" ] && exit 3; exit 1'
        r = self.tether("task", "run", "--socket", self.daemon.socket, "--title", "exit three", *self.extra,
                        "--", "sh", "-c", script)
        self.assertEqual(r.returncode, 3, r.stderr)
        task, c = self.newest()
        self.assertEqual(task["title"], "exit three")
        self.assertEqual(task["state"], "failed")
        last = events(c, task["id"])[-1]
        self.assertEqual(last["data"]["state"], "failed")
        self.assertEqual(last["data"]["detail"]["exit_code"], 3)
        c.close()
        r = self.tether("task", "run", "--socket", self.daemon.socket, *self.extra, "--", "true")
        self.assertEqual(r.returncode, 0, r.stderr)
        task, c = self.newest()
        self.assertEqual(task["state"], "completed")
        c.close()

    @unittest.skipUnless(os.geteuid() == 0, "a clean environment applies under the agent uid (root only)")
    def test_the_agent_gets_a_clean_environment(self):
        script = ('[ -z "$ROOT_SECRET" ] && [ "$PASSED" = yes ] && [ "$API_KEY" = k1 ] && [ -n "$TETHER_TASK_TOKEN" ] '
                  '&& [ "$USER" = nobody ] && exit 4; env >&2; exit 1')
        env = dict(os.environ, ROOT_SECRET="s3cr3t", PASSED="yes")
        r = self.tether("task", "run", "--socket", self.daemon.socket, *self.extra, "--env", "PASSED",
                        "--env", "API_KEY=k1", "--", "sh", "-c", script, env=env)
        self.assertEqual(r.returncode, 4, r.stderr)
        # A variable named but not set is refused before any task opens.
        before = ok(Client(self.daemon.socket), 1, "task_list", limit=1)["tasks"][0]["id"]
        r = self.tether("task", "run", "--socket", self.daemon.socket, *self.extra, "--env", "NOT_SET_ANYWHERE",
                        "--", "true")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("NOT_SET_ANYWHERE", r.stderr)
        self.assertEqual(ok(Client(self.daemon.socket), 1, "task_list", limit=1)["tasks"][0]["id"], before)

    def test_inherited_descriptors_do_not_reach_the_command(self):
        # The runner inherits fd N (no close-on-exec); the command must not see it.
        r_fd, w_fd = os.pipe()
        os.set_inheritable(r_fd, True)
        try:
            script = f'[ -e /proc/$$/fd/{r_fd} ] && exit 1; [ -e /proc/$$/fd/2 ] && exit 6; exit 1'
            r = self.tether("task", "run", "--socket", self.daemon.socket, *self.extra, "--", "sh", "-c", script,
                            pass_fds=(r_fd,))
            self.assertEqual(r.returncode, 6, r.stderr)
        finally:
            os.close(r_fd)
            os.close(w_fd)

    def start_sleeper(self):
        runner = subprocess.Popen(
            [TETHER, "task", "run", "--socket", self.daemon.socket, "--title", "sleeper", *self.extra, "--",
             "sh", "-c", "sleep 1000 & (sleep 1000 & wait) & wait"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 30
        while True:
            kids = children_of(runner.pid)
            group = session_members(kids[0]) if kids else []
            if len(group) >= 4:  # sh, sleep, the subshell and its sleep
                break
            self.assertLess(time.time(), deadline, f"the command did not start: {kids} {group}")
            time.sleep(0.05)
        sh = kids[0]
        if os.geteuid() == 0:
            with open(f"/proc/{sh}/status") as f:
                uid_line = next(l for l in f if l.startswith("Uid:"))
            self.assertEqual(int(uid_line.split()[1]), 65534, "runs under the agent uid")
        self.assertEqual(os.getsid(sh), sh, "the command leads its own session")
        return runner, sh, group

    def assert_group_gone(self, sid, group):
        deadline = time.time() + 20
        while session_members(sid):
            self.assertLess(time.time(), deadline, f"still running: {session_members(sid)} of {group}")
            time.sleep(0.05)

    def test_stop_from_another_terminal_kills_the_process_group(self):
        runner, sh, group = self.start_sleeper()
        task, c = self.newest()
        self.assertEqual(task["state"], "running")
        r = self.tether("task", "stop", str(task["id"]), "--socket", self.daemon.socket)
        self.assertEqual(r.returncode, 0, r.stderr)
        runner.wait(timeout=10)
        self.assert_group_gone(sh, group)
        self.assertEqual(runner.returncode, 1)
        self.assertEqual(ok(c, 2, "task_list", limit=1)["tasks"][0]["state"], "cancelled")
        c.close()

    def test_sigterm_to_the_runner_stops_the_task(self):
        runner, sh, group = self.start_sleeper()
        task, c = self.newest()
        runner.send_signal(signal.SIGTERM)
        runner.wait(timeout=10)
        self.assert_group_gone(sh, group)
        self.assertEqual(runner.returncode, 143)
        self.assertEqual(ok(c, 2, "task_list", limit=1)["tasks"][0]["state"], "cancelled")
        c.close()

    def scratch_dir(self):
        """A directory the command can write to, whichever uid it runs under."""
        d = tempfile.mkdtemp(prefix="tether-run-")
        os.chmod(d, 0o777)
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def test_a_command_that_finishes_its_own_task_may_exit_on_its_own(self):
        # `tether task finish` from inside ends the task while the command still runs: the
        # runner must not kill it at once, and its exit code is the result.
        marker = os.path.join(self.scratch_dir(), "exited-on-its-own")
        script = (f'{TETHER} task finish --socket "$TETHER_SOCKET" --summary "done early" || exit 9; '
                  f'sleep 1; touch {marker}; exit 7')
        r = self.tether("task", "run", "--socket", self.daemon.socket, "--title", "finishes itself", *self.extra,
                        "--", "sh", "-c", script)
        self.assertEqual(r.returncode, 7, r.stderr)
        self.assertTrue(os.path.exists(marker), "the command was killed before it could exit: " + r.stderr)
        task, c = self.newest()
        self.assertEqual(task["title"], "finishes itself")
        self.assertEqual(task["state"], "completed")
        c.close()

    def test_a_command_that_finishes_its_own_task_and_hangs_is_stopped_after_the_grace(self):
        script = f'{TETHER} task finish --socket "$TETHER_SOCKET" || exit 9; sleep 1000'
        started = time.time()
        runner = subprocess.Popen(
            [TETHER, "task", "run", "--socket", self.daemon.socket, "--title", "finishes and hangs", *self.extra,
             "--", "sh", "-c", script],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        try:
            _, err = runner.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            runner.kill()
            raise
        took = time.time() - started
        # Stopped by SIGTERM after the 5 s grace: the command's own status, 128 + 15.
        self.assertEqual(runner.returncode, 143, err)
        self.assertGreaterEqual(took, 5.0, f"stopped before the 5 s grace: {err}")
        task, c = self.newest()
        self.assertEqual(task["state"], "completed")
        c.close()

    def test_control_from_inside_the_task_is_refused(self):
        # The command itself tries to approve/resume through the CLI: its environment carries
        # the task token, so the daemon treats it as the agent.
        script = f'{TETHER} task pause "$TETHER_TASK_ID" --socket "$TETHER_SOCKET" && exit 0; exit 7'
        r = self.tether("task", "run", "--socket", self.daemon.socket, *self.extra, "--", "sh", "-c", script)
        self.assertEqual(r.returncode, 7, r.stderr)
        task, c = self.newest()
        refused = [e for e in events(c, task["id"]) if e["kind"] == "refused"]
        self.assertEqual(len(refused), 1, refused)
        c.close()


if __name__ == "__main__":
    unittest.main()
