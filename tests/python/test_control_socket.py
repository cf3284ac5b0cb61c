"""tether/1 over the control socket, from a client nobody on the Rust side wrote.

Standard library only. Starts the real `tether serve --sim` binary (path from $TETHER_BIN,
default target/debug/tether) and talks JSON lines to its socket.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Clients under other uids cannot read a per-user interpreter (e.g. pyenv under /root).
CHILD_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
TETHER = os.environ.get("TETHER_BIN", os.path.join(ROOT, "target", "debug", "tether"))


class Client:
    """A blocking tether/1 client with a read buffer."""

    def __init__(self, path, timeout=5.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""

    def send_line(self, obj_or_text):
        text = obj_or_text if isinstance(obj_or_text, str) else json.dumps(obj_or_text)
        self.sock.sendall(text.encode() + b"\n")

    def recv(self):
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("daemon closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def call(self, obj_or_text):
        self.send_line(obj_or_text)
        return self.recv()

    def close(self):
        self.sock.close()


class Daemon:
    """`tether serve --sim` on a socket in a fresh directory."""

    def __init__(self, extra_args=(), config_text=None, data_dir=None, netns=None):
        self.dir = data_dir or tempfile.mkdtemp(prefix="tether-py-")
        # The data directory is the daemon's alone (it makes it 0700): the socket, which
        # agents under another uid must reach, lives beside it, as /run/tether does.
        self.run_dir = tempfile.mkdtemp(prefix="tether-sock-")
        os.chmod(self.run_dir, 0o755)
        self.socket = os.path.join(self.run_dir, "control.sock")
        args = [TETHER, "serve", "--sim", "--socket", self.socket, "--data-dir", self.dir]
        if config_text is not None:
            cfg = os.path.join(self.dir, "tether.toml")
            with open(cfg, "w") as f:
                f.write(config_text)
            args += ["--config", cfg]
        args += list(extra_args)
        if "--listen" not in args:
            # Tests run beside other daemons: never collide on the default HTTPS port.
            args += ["--listen", "127.0.0.1:0"]
        if netns:
            # Its network is the namespace's; its files and socket are this host's.
            args = ["ip", "netns", "exec", netns, *args]
        self.log = open(os.path.join(self.dir, "daemon.log"), "a+")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.time() > deadline:
                self.log.seek(0)
                log = self.log.read()
                self.log.close()
                raise RuntimeError("daemon did not start:\n" + log)
            time.sleep(0.02)

    def call(self, request, timeout=15):
        """One request on a fresh connection; its answer."""
        c = Client(self.socket, timeout=timeout)
        try:
            return c.call(request)
        finally:
            c.close()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def open_task(socket_path, title):
    """A task whose lease is a new socket connection: (client, id, token); close the client
    to end the lease. A lease that just ended (the previous test's) may not have been seen
    by the daemon yet: TASK_ACTIVE is retryable, so it is retried (briefly)."""
    c = Client(socket_path, timeout=15)
    deadline = time.time() + 10
    while True:
        r = c.call({"id": 1, "method": "task_open", "title": title, "events": False})
        if r["ok"] or r["error"]["code"] != "TASK_ACTIVE" or time.time() > deadline:
            break
        time.sleep(0.05)
    if not r["ok"]:
        c.close()
        raise AssertionError(f"task_open failed: {r}")
    return c, r["result"]["id"], r["result"]["token"]


class ControlSocketTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()
        # SIGTERM is a clean shutdown: exit 0 and the socket file is gone.
        assert cls.daemon.proc.returncode == 0, cls.daemon.proc.returncode
        assert not os.path.exists(cls.daemon.socket)

    def client(self):
        c = Client(self.daemon.socket)
        self.addCleanup(c.close)
        return c

    def test_hello_then_status(self):
        c = self.client()
        hello = c.call({"id": 1, "method": "hello", "protocol": "tether/1", "client": "python"})
        self.assertEqual(hello["id"], 1)
        self.assertTrue(hello["ok"])
        r = hello["result"]
        self.assertEqual(r["protocol"], "tether/1")
        self.assertEqual(r["caller"]["identity"]["uid"], os.geteuid())
        self.assertEqual(r["caller"]["identity"]["pid"], os.getpid())
        self.assertEqual(r["caller"]["role"], "admin")
        self.assertEqual(r["limits"]["max_request_bytes"], 65536)
        self.assertEqual(r["limits"]["max_nesting_depth"], 32)
        self.assertIn("status", r["capabilities"]["methods"])
        # The first frame may still be rendering right after start-up.
        deadline = time.time() + 10
        while True:
            status = c.call({"id": 2, "method": "status"})
            if status["result"]["video"]["frame_id"] is not None or time.time() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(status["id"], 2)
        s = status["result"]
        self.assertEqual(s["hid"]["backend"], "sim")
        self.assertEqual(s["hid"]["host"], "configured")
        self.assertEqual(s["video"]["signal"], "locked")
        self.assertEqual(s["video"]["source_size"], {"width": 1920, "height": 1080})
        self.assertGreaterEqual(s["video"]["generation"], 1)
        self.assertLess(s["video"]["frame_age_ms"], 1000)
        self.assertIsNone(s["task"])

    def test_pipelined_requests_correlate(self):
        c = self.client()
        ids = [(i * 37) % 101 for i in range(100)]
        methods = {i: ("hello" if i % 3 else "status") for i in ids}
        payload = "".join(json.dumps({"id": i, "method": methods[i]}) + "\n" for i in ids)
        c.sock.sendall(payload.encode())
        seen = set()
        for _ in ids:
            reply = c.recv()
            self.assertTrue(reply["ok"], reply)
            rid = reply["id"]
            self.assertNotIn(rid, seen)
            seen.add(rid)
            key = "protocol" if methods[rid] == "hello" else "video"
            self.assertIn(key, reply["result"])
        self.assertEqual(seen, set(ids))

    def test_bad_input_codes_and_survival(self):
        c = self.client()
        cases = [
            ("{oops", None, "INVALID_JSON"),
            ('{"id":1,"method":"status","x":' + "[" * 33 + "]" * 33 + "}", None, "NESTING_TOO_DEEP"),
            ('{"id":2,"method":"warp"}', 2, "UNKNOWN_METHOD"),
            ('{"id":3,"method":"status","extra":1}', 3, "INVALID_PARAMS"),
            ('{"id":-1,"method":"status"}', None, "INVALID_ID"),
            ('{"id":1.25,"method":"status"}', None, "INVALID_ID"),
            ('{"id":null,"method":"status"}', None, "INVALID_ID"),
            ('{"id":4,"method":"hello","client":"' + "x" * 70000 + '"}', None, "REQUEST_TOO_LARGE"),
        ]
        for line, rid, code in cases:
            reply = c.call(line)
            self.assertFalse(reply["ok"], line[:60])
            self.assertEqual(reply["id"], rid, line[:60])
            self.assertEqual(reply["error"]["code"], code, line[:60])
            self.assertIn("retryable", reply["error"])
            self.assertIn("side_effect_possible", reply["error"])
            self.assertTrue(c.call({"id": 99, "method": "status"})["ok"])

    def test_reader_that_never_reads_is_dropped_after_10s_and_others_are_served(self):
        stalled = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(stalled.close)
        stalled.connect(self.daemon.socket)
        stalled.setblocking(False)
        line = b'{"id":1,"method":"status"}\n'
        sent = 0
        start = time.time()
        # Fill the socket in both directions without ever reading.
        while time.time() - start < 5:
            try:
                sent += stalled.send(line * 256)
            except BlockingIOError:
                break
        self.assertGreater(sent, 0)
        other = self.client()
        # Wait until the daemon has accepted the stalled connection (2 sessions).
        deadline = time.time() + 30
        while other.call({"id": 6, "method": "status"})["result"]["daemon"]["sessions"] < 2:
            self.assertLess(time.time(), deadline, "stalled connection never accepted")
            time.sleep(0.05)
        t0 = time.time()
        dropped_at = None
        while time.time() - t0 < 25:
            st = other.call({"id": 7, "method": "status"})
            self.assertTrue(st["ok"])
            if st["result"]["daemon"]["sessions"] == 1:
                dropped_at = time.time() - t0
                break
            time.sleep(0.25)
        self.assertIsNotNone(dropped_at, "stalled reader was never dropped")
        self.assertGreater(dropped_at, 8.0, "dropped before the 10 s stall timeout")
        # The stalled socket sees EOF (or a reset, since the daemon closed with our unread
        # requests still queued) after draining what was buffered.
        stalled.setblocking(True)
        stalled.settimeout(5)
        try:
            while stalled.recv(1 << 20):
                pass
        except ConnectionResetError:
            pass


@unittest.skipUnless(os.geteuid() == 0, "SO_PEERCRED role test needs root to run clients under other uids")
class PeerCredentialRolesTest(unittest.TestCase):
    """Roles come from SO_PEERCRED: `nobody` configured as the agent uid gets `agent`."""

    CLIENT = (
        "import json,socket,sys\n"
        "s=socket.socket(socket.AF_UNIX);s.connect(sys.argv[1])\n"
        "s.sendall(b'{\"id\":1,\"method\":\"hello\"}\\n')\n"
        "buf=b''\n"
        "while b'\\n' not in buf:\n"
        "    c=s.recv(4096)\n"
        "    if not c: break\n"
        "    buf+=c\n"
        "print(buf.decode().strip())\n"
    )

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(["--agent-user", "nobody"], config_text='socket_group = "nogroup"\n')

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def run_as(self, user, group):
        return subprocess.run(
            [CHILD_PYTHON, "-c", self.CLIENT, self.daemon.socket],
            user=user, group=group, extra_groups=[], capture_output=True, text=True, timeout=20,
        )

    def test_socket_mode_and_group(self):
        st = os.stat(self.daemon.socket)
        self.assertEqual(st.st_mode & 0o777, 0o660)
        self.assertEqual(st.st_gid, 65534)

    def test_agent_uid_gets_agent_role(self):
        out = self.run_as("nobody", "nogroup")
        self.assertEqual(out.returncode, 0, out.stderr)
        hello = json.loads(out.stdout)
        self.assertEqual(hello["result"]["caller"]["role"], "agent")
        self.assertEqual(hello["result"]["caller"]["identity"]["uid"], 65534)

    def test_member_of_socket_group_operates(self):
        out = self.run_as("daemon", "nogroup")
        self.assertEqual(out.returncode, 0, out.stderr)
        hello = json.loads(out.stdout)
        self.assertEqual(hello["result"]["caller"]["role"], "operate")
        self.assertEqual(hello["result"]["caller"]["identity"]["uid"], 1)

    def test_other_users_cannot_reach_the_socket(self):
        out = self.run_as("sys", "sys")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("PermissionError", out.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
