"""A full disk under the data directory (issue 30, "an `ok` is on disk").

An answer that reports a change is sent only once the change is on disk: on a full disk
`task_finish` answers STORAGE_FAILED and the task goes on running, and what the daemon
answered is what a restart finds. The daemon also starts on a full disk: read-only, saying
so in `status`, serving screenshots and the journal, refusing changes with STORAGE_FAILED,
and taking writes again once space is freed, without a restart.

The disk is real: a 4 MiB tmpfs mounted in a mount namespace of its own (`unshare -m`),
held open by a `sleep` so daemons can stop and start on it; daemons run in it through
`nsenter`, and the test reaches its files through /proc/PID/root. Needs root; skipped
otherwise. Standard library only.
"""

import errno
import os
import shutil
import subprocess
import tempfile
import time
import unittest

from test_control_socket import TETHER, Client, open_task


class SmallDisk:
    """A small tmpfs in a private mount namespace, gone when `close` ends its holder."""

    def __init__(self, size="4m"):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root: mounts a small tmpfs in a mount namespace")
        if not shutil.which("unshare") or not shutil.which("nsenter"):
            raise unittest.SkipTest("needs unshare and nsenter (util-linux)")
        self.mountpoint = tempfile.mkdtemp(prefix="tether-disk-")
        script = 'mount -t tmpfs -o size="$1",mode=0700 tether-test "$0" && echo ready && exec sleep 100000'
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, self.mountpoint, size],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # One line: "ready", or nothing when the mount failed (the shell exits).
        if self.holder.stdout.readline().strip() != "ready":
            err = self.holder.stderr.read()
            self.holder.wait()
            raise unittest.SkipTest(f"cannot mount a tmpfs in a mount namespace: {err.strip()}")

    def path(self, *parts):
        """A path on the small disk, as this (outside) process reaches it."""
        return os.path.join(f"/proc/{self.holder.pid}/root{self.mountpoint}", *parts)

    def inside(self, args):
        """`args` run in the small disk's mount namespace."""
        return ["nsenter", "--target", str(self.holder.pid), "--mount", "--", *args]

    def fill(self):
        """Writes zeros until the file system says ENOSPC."""
        with open(self.path("fill"), "wb", buffering=0) as f:
            chunk = b"\0" * 65536
            while True:
                try:
                    f.write(chunk)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    if len(chunk) == 1:
                        return
                    chunk = chunk[:len(chunk) // 2]

    def free(self):
        os.unlink(self.path("fill"))

    def close(self):
        self.holder.kill()
        self.holder.wait()
        self.holder.stdout.close()
        self.holder.stderr.close()
        # The namespace went with its holder, and the tmpfs with it: an empty directory.
        os.rmdir(self.mountpoint)


class DaemonOnDisk:
    """`tether serve --sim` with its data directory on `disk`; socket and log outside it."""

    def __init__(self, disk):
        self.outside = tempfile.mkdtemp(prefix="tether-py-")
        self.socket = os.path.join(self.outside, "control.sock")
        self.log_path = os.path.join(self.outside, "daemon.log")
        args = [TETHER, "serve", "--sim", "--socket", self.socket, "--data-dir", disk.mountpoint,
                "--listen", "127.0.0.1:0"]
        self.log = open(self.log_path, "a+")
        self.proc = subprocess.Popen(disk.inside(args), stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.time() > deadline:
                raise AssertionError("daemon did not start:\n" + self.read_log())
            time.sleep(0.02)

    def read_log(self):
        with open(self.log_path) as f:
            return f.read()

    def call(self, method, **params):
        c = Client(self.socket, timeout=15)
        try:
            return c.call({"id": 1, "method": method, **params})
        finally:
            c.close()

    def ok(self, method, **params):
        r = self.call(method, **params)
        assert r["ok"], f"{method}: {r}"
        return r["result"]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class DurableAnswerTest(unittest.TestCase):
    def setUp(self):
        self.disk = SmallDisk()
        self.addCleanup(self.disk.close)

    def start(self):
        d = DaemonOnDisk(self.disk)
        self.addCleanup(lambda: d.proc.poll() is None and d.stop())
        return d

    def state_on_disk(self, task):
        """The task's state as a fresh daemon reads it from the disk."""
        d = self.start()
        try:
            return d.ok("task_events", task=task)["task"]["state"]
        finally:
            d.stop()

    def assert_storage_failed(self, r):
        self.assertFalse(r["ok"], r)
        self.assertEqual(r["error"]["code"], "STORAGE_FAILED", r)
        self.assertTrue(r["error"]["retryable"], r)
        self.assertFalse(r["error"]["side_effect_possible"], r)
        self.assertIn("disk is full", r["error"]["message"])

    def test_finish_on_a_full_disk_is_refused_and_the_answer_is_what_is_on_disk(self):
        d = self.start()
        lease, task, token = open_task(d.socket, "finish on a full disk")
        self.disk.fill()
        refused = d.call("task_finish", task_token=token, ok=True, summary="done")
        self.assert_storage_failed(refused)
        # Nothing claims what the disk does not hold: the task runs, status says why,
        # and reads are served.
        st = d.ok("status")
        self.assertEqual(st["task"]["state"], "running")
        self.assertEqual(st["storage"]["writable"], False, st["storage"])
        self.assertIn("disk is full", st["storage"]["reason"])
        self.assertEqual(d.ok("task_events", task=task)["task"]["state"], "running")
        # Space again: the same finish goes through without a restart, and a restart
        # finds what was answered.
        self.disk.free()
        done = d.ok("task_finish", task_token=token, ok=True, summary="done")
        self.assertEqual(done["state"], "completed")
        self.assertEqual(d.ok("status")["storage"]["writable"], True)
        lease.close()
        d.stop()
        self.assertEqual(self.state_on_disk(task), "completed")

        # Refused, then a restart before anyone retried: not completed on disk either.
        d = self.start()
        lease, task, token = open_task(d.socket, "refused, then restarted")
        self.disk.fill()
        self.assert_storage_failed(d.call("task_finish", task_token=token, ok=True))
        lease.close()
        d.stop()
        self.disk.free()
        self.assertEqual(self.state_on_disk(task), "interrupted")

    def test_a_daemon_starts_on_a_full_disk_read_only_and_writes_once_space_is_back(self):
        d = self.start()
        lease, before, token = open_task(d.socket, "before the disk filled")
        d.ok("task_finish", task_token=token, ok=True)
        lease.close()
        d.stop()
        self.disk.fill()

        d = self.start()
        st = d.ok("status")
        self.assertEqual(st["storage"]["writable"], False, st["storage"])
        self.assertIn("disk is full", st["storage"]["reason"])
        self.assertIsNotNone(st["https"], "the certificates on disk are served")
        shot = d.ok("screenshot")
        self.assertTrue(shot["metadata"]["observation_id"])
        listed = d.ok("task_list")["tasks"]
        self.assertEqual([(t["id"], t["state"]) for t in listed], [(before, "completed")])
        self.assertEqual(d.ok("task_events", task=before)["task"]["state"], "completed")
        self.assert_storage_failed(d.call("task_open", title="on a full disk", events=False))
        self.assert_storage_failed(d.call("token", action="add", name="laptop"))
        self.assertNotIn("laptop", [t["name"] for t in d.ok("token", action="list")["tokens"]])
        self.assertIsNone(d.ok("status")["task"])
        doctor = subprocess.run([TETHER, "doctor", "--socket", d.socket], capture_output=True, text=True,
                                timeout=60)
        self.assertIn("READ-ONLY", doctor.stdout, doctor.stdout + doctor.stderr)
        self.assertIn("disk is full", doctor.stdout)

        # Space again: the store opens for writing at the next change, no restart.
        self.disk.free()
        lease, task, token = open_task(d.socket, "after space came back")
        self.assertEqual(d.ok("status")["storage"]["writable"], True)
        d.ok("task_finish", task_token=token, ok=True)
        lease.close()
        d.stop()
        self.assertEqual(self.state_on_disk(task), "completed")

    def test_a_new_data_directory_on_a_full_disk_starts_empty_and_read_only(self):
        self.disk.fill()
        d = self.start()
        st = d.ok("status")
        self.assertEqual(st["storage"]["writable"], False, st["storage"])
        self.assertIsNone(st["https"], "no CA that the next start would not have")
        self.assertIn("HTTPS is off", d.read_log())
        self.assertTrue(d.ok("screenshot")["metadata"]["observation_id"])
        self.assertEqual(d.ok("task_list")["tasks"], [])
        self.assert_storage_failed(d.call("task_open", title="nothing on disk", events=False))
        self.disk.free()
        lease, task, token = open_task(d.socket, "the first task")
        d.ok("task_finish", task_token=token, ok=True)
        lease.close()
        d.stop()
        self.assertEqual(self.state_on_disk(task), "completed")


if __name__ == "__main__":
    unittest.main()
