"""Hostile clients against the real `tether serve --sim` binary: huge and odd numbers,
duplicate keys, duplicate ids, floods, slow and stalled readers, refusal floods, control
during input. Standard library only.

Every test ends by checking that the daemon is still up (a fresh connection's `status`
answers) and asserts the exact error code. Synchronisation is by condition (poll until it
holds, with a generous deadline), never by sleeping; the only pauses are the deliberate ones
of the slow reader.

The load tests (global limits, slow readers) use $TETHER_RELEASE_BIN when set (tests/run
sets it): a release build is what the memory bound is about.
"""

import json
import os
import select
import socket
import threading
import time
import unittest

import test_control_socket
from test_control_socket import TETHER, Daemon

TETHER_RELEASE = os.environ.get("TETHER_RELEASE_BIN") or TETHER
U64_MAX = 18446744073709551615
I64_MAX = 9223372036854775807
U32_MAX = 4294967295
# Errors a number out of range may get.
RANGE_CODES = ("INVALID_PARAMS", "OUT_OF_BOUNDS")
UHD = "[sim_phone]\ncapture_width = 3840\ncapture_height = 2160\n"


class Conn:
    """A blocking tether/1 connection that keeps every message it has not been asked for."""

    def __init__(self, path, timeout=10.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""
        self.pending = []
        self.next_id = 1000

    def send(self, obj_or_text):
        text = obj_or_text if isinstance(obj_or_text, (str, bytes)) else json.dumps(obj_or_text)
        data = text if isinstance(text, bytes) else text.encode()
        self.sock.sendall(data + b"\n")

    def read_message(self, deadline):
        while b"\n" not in self.buf:
            left = deadline - time.time()
            if left <= 0:
                raise TimeoutError(f"no message in time; unread: {self.pending}")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 20)
            except socket.timeout:
                raise TimeoutError(f"no message in time; unread: {self.pending}") from None
            if not chunk:
                raise ConnectionError("daemon closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def take(self, want, within=10.0):
        for i, m in enumerate(self.pending):
            if want(m):
                return self.pending.pop(i)
        deadline = time.time() + within
        while True:
            m = self.read_message(deadline)
            if want(m):
                return m
            self.pending.append(m)

    def reply(self, rid, within=10.0):
        return self.take(lambda m: "event" not in m and m.get("id") == rid, within)

    def request(self, method, rid=None, **params):
        if rid is None:
            self.next_id += 1
            rid = self.next_id
        req = {"id": rid, "method": method}
        req.update(params)
        self.send(req)
        return rid

    def call(self, method, within=10.0, **params):
        return self.reply(self.request(method, **params), within)

    def ok(self, method, within=10.0, **params):
        r = self.call(method, within, **params)
        assert r.get("ok") is True, f"{method} {params}: {r}"
        return r["result"]

    def close(self):
        self.sock.close()


def short(msg, limit=400):
    """A message for an assertion text: long fields (PNG data) cut."""
    text = json.dumps(msg)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def wait_for(what, check, within=30.0, every=0.02):
    """Polls `check` until it returns something truthy; fails naming `what`."""
    deadline = time.time() + within
    while True:
        v = check()
        if v:
            return v
        if time.time() > deadline:
            raise AssertionError(f"timed out after {within} s waiting for {what}")
        time.sleep(every)


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


class HostileBase(unittest.TestCase):
    BINARY = TETHER
    CONFIG = None

    @classmethod
    def setUpClass(cls):
        # Daemon() starts test_control_socket.TETHER: point it at this class's binary.
        saved = test_control_socket.TETHER
        test_control_socket.TETHER = cls.BINARY
        try:
            cls.daemon = Daemon(config_text=cls.CONFIG)
        finally:
            test_control_socket.TETHER = saved

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def conn(self, timeout=10.0):
        c = Conn(self.daemon.socket, timeout)
        self.addCleanup(c.close)
        return c

    def assert_alive(self):
        self.assertIsNone(self.daemon.proc.poll(), "the daemon exited")
        c = Conn(self.daemon.socket, 5.0)
        try:
            st = c.call("status", within=5.0)
            self.assertTrue(st["ok"], st)
        finally:
            c.close()

    def assert_error(self, reply, code, rid="any"):
        self.assertIs(reply.get("ok"), False, f"expected {code}, got {short(reply)}")
        if rid != "any":
            self.assertEqual(reply.get("id"), rid, short(reply))
        got = reply["error"]["code"]
        if isinstance(code, tuple):
            self.assertIn(got, code, short(reply))
        else:
            self.assertEqual(got, code, short(reply))

    def wait_no_task(self):
        c = Conn(self.daemon.socket)
        try:
            wait_for("no active task", lambda: c.ok("status")["task"] is None)
        finally:
            c.close()

    def frame_id(self, c):
        return wait_for("a first frame", lambda: c.ok("status")["video"]["frame_id"])

    def shot(self, c, **params):
        r = c.ok("screenshot", **params)
        return r["metadata"]["observation_id"]

    def open_task(self, title="hostile"):
        """A task whose lease (and agent: it sends the token) is a new connection."""
        self.wait_no_task()
        lease = Conn(self.daemon.socket)
        opened = lease.ok("task_open", title=title)

        def end():
            lease.close()
            self.wait_no_task()

        self.addCleanup(end)
        return lease, opened["id"], opened["token"]


class InputValidationTest(HostileBase):
    """Numbers out of range, duplicate keys, unknown fields: refused with a code, never a
    crash or a hang."""

    def tearDown(self):
        self.assert_alive()

    def test_a_screenshot_region_that_wraps_u32(self):
        c = self.conn()
        for region in ({"x": 10, "y": 0, "width": U32_MAX - 5, "height": 10},
                       {"x": U32_MAX, "y": 0, "width": 1, "height": 1}):
            with self.subTest(region=region):
                self.assert_error(c.call("screenshot", region=region), "INVALID_PARAMS")
                self.assert_alive()

    def test_huge_and_odd_numbers(self):
        c = self.conn()
        frame = self.frame_id(c)
        obs = self.shot(c)
        cases = [
            ("tap at 1e308,-1e308", "action",
             {"operation_id": "huge-tap", "observation_id": obs, "action": {"type": "tap", "x": 1e308, "y": -1e308}}),
            ("drag lasting u64::MAX ms", "action",
             {"operation_id": "huge-drag", "observation_id": obs,
              "action": {"type": "drag", "path": [{"x": 10, "y": 10}, {"x": 20, "y": 20}], "duration_ms": U64_MAX}}),
            ("screenshot max_edge u32::MAX", "screenshot", {"max_edge": U32_MAX}),
            ("screenshot timeout_ms u64::MAX", "screenshot", {"after_frame_id": frame, "timeout_ms": U64_MAX}),
            ("screenshot after_frame_id u64::MAX", "screenshot", {"after_frame_id": U64_MAX, "timeout_ms": 0}),
            ("task_list limit u64::MAX", "task_list", {"limit": U64_MAX}),
            ("preview max_edge 0", "preview", {"max_edge": 0}),
        ]
        for name, method, params in cases:
            with self.subTest(name):
                # A connection of its own: if the daemon hangs on it, closing it cancels
                # whatever it started (a drag that never ends holds the device).
                one = Conn(self.daemon.socket)
                try:
                    r = one.call(method, within=5.0, **params)
                except TimeoutError:
                    self.fail(f"{name}: no answer in 5 s (hang)")
                finally:
                    one.close()
                # Waiting for a frame that never comes is a retryable TIMEOUT, not bad input.
                self.assert_error(r, ("TIMEOUT",) if "after_frame_id" in name else RANGE_CODES)
                self.assert_alive()

    def test_duplicate_keys_are_refused(self):
        c = self.conn()
        cases = [
            ('{"id":1,"id":2,"method":"status"}', None),
            ('{"id":3,"method":"fly","method":"status"}', 3),
            ('{"id":4,"method":"screenshot","max_edge":100,"max_edge":200}', 4),
        ]
        for line, rid in cases:
            with self.subTest(line):
                c.send(line)
                r = c.take(lambda m: "event" not in m, 10.0)
                self.assert_error(r, "INVALID_REQUEST")
                self.assertIn("id", r, "the reply carries an id (null when it is unknown)")
                self.assertEqual(r["id"], rid, r)

    def test_unit_actions_reject_unknown_fields(self):
        c = self.conn()
        r = c.call("action", operation_id="home-x", action={"type": "home", "x": 1})
        self.assert_error(r, "INVALID_PARAMS")

    def test_every_action_checks_a_given_observation(self):
        c = self.conn()
        r = c.call("action", operation_id="kp-garbage", observation_id="garbage",
                   action={"type": "key_press", "key": "a"})
        self.assert_error(r, "OBSERVATION_EXPIRED")

    def test_bad_lines_not_covered_by_test_control_socket(self):
        # (invalid JSON, deep nesting, unknown method, id -1 and a 70 KB line are there.)
        c = self.conn()
        cases = [
            (b'{"id":1,"method":"st\xff\xfeatus"}', "INVALID_JSON"),
            (b"[]", "INVALID_REQUEST"),
            (b'"x"', "INVALID_REQUEST"),
        ]
        for line, code in cases:
            with self.subTest(line):
                c.send(line)
                r = c.take(lambda m: "event" not in m, 10.0)
                self.assert_error(r, code)
                self.assertIsNone(r["id"], r)
                self.assertTrue(c.ok("status"), "the connection survives")


class ConcurrencyTest(HostileBase):
    """Duplicate in-flight ids, cancelling a frame wait, refusal floods, event ranges,
    control while input runs, calibrate during a task."""

    def tearDown(self):
        self.assert_alive()

    def test_a_duplicate_in_flight_id_is_refused_and_the_first_completes(self):
        c = self.conn()
        watcher = self.conn()
        obs = self.shot(c)
        c.request("action", rid=5, operation_id="dup-lp", observation_id=obs,
                  action={"type": "long_press", "x": 100, "y": 300})
        wait_for("the long press to hold the device", lambda: watcher.ok("status")["input"]["busy"])
        c.request("status", rid=5)
        first = c.take(lambda m: m.get("id") == 5, 10.0)
        self.assert_error(first, "DUPLICATE_ID", 5)
        self.assertIs(first["error"]["retryable"], False, first)
        second = c.take(lambda m: m.get("id") == 5, 15.0)
        self.assertIs(second.get("ok"), True, f"the long press still completes: {second}")
        self.assertEqual(second["result"]["status"], "submitted", second)

    def test_cancel_covers_a_screenshot_waiting_for_a_frame(self):
        c = self.conn()
        frame = self.frame_id(c)
        started = time.time()
        rid = c.request("screenshot", after_frame_id=frame + 1000000, timeout_ms=5000)
        cancel = c.call("cancel", request_id=rid)
        self.assertIs(cancel.get("ok"), True, cancel)
        self.assertEqual(cancel["result"], {"cancelled": True})
        r = c.reply(rid, 10.0)
        took = time.time() - started
        self.assert_error(r, "CANCELLED", rid)
        self.assertLess(took, 4.0, f"the screenshot waited {took:.1f} s: not cancelled, timed out")

    def test_refusals_are_coalesced_in_the_journal(self):
        lease, task, token = self.open_task("refusal flood")
        stranger = self.conn(timeout=30.0)
        n = 3000
        payload = "".join(
            json.dumps({"id": i, "method": "action", "operation_id": f"flood-{i}", "action": {"type": "home"}}) + "\n"
            for i in range(1, n + 1)
        ).encode()
        # Write in a thread (on a duplicate of the socket, with its own timeout): the daemon
        # answers while we write, and both directions must drain.
        out = stranger.sock.dup()
        self.addCleanup(out.close)
        out.settimeout(60)
        writer = threading.Thread(target=out.sendall, args=(payload,))
        writer.start()
        codes = {}
        for _ in range(n):
            m = stranger.take(lambda m: "event" not in m, 30.0)
            code = m.get("error", {}).get("code") if m.get("ok") is False else "ok"
            codes[code] = codes.get(code, 0) + 1
        writer.join(30)
        self.assertEqual(codes, {"TASK_RUNNING": n})
        lease.ok("task_finish", task_token=token, ok=True, summary="flood over")
        refused, after = [], 0
        while True:
            page = lease.ok("task_events", within=30.0, task=task, after_seq=after)["events"]
            if not page:
                break
            refused += [e for e in page if e["kind"] == "refused"]
            after = page[-1]["seq"]
            if any(e["kind"] == "state" and e["data"].get("state") == "completed" for e in page):
                break
        self.assertLessEqual(len(refused), 20, f"{len(refused)} refused events for {n} refusals")
        counts = [e["data"].get("count") for e in refused]
        self.assertTrue(all(isinstance(k, int) and k >= 1 for k in counts), counts[:20])
        self.assertEqual(sum(counts), n)

    def test_task_events_after_the_end_is_refused_with_the_last_seq(self):
        lease, task, token = self.open_task("events range")
        lease.ok("task_note", task_token=token, text="one note")
        events = lease.ok("task_events", task=task)["events"]
        last = events[-1]["seq"]
        for follow in (False, True):
            for after in (last + 1, I64_MAX):
                with self.subTest(follow=follow, after_seq=after):
                    c = Conn(self.daemon.socket)
                    try:
                        r = c.call("task_events", within=5.0, task=task, after_seq=after, follow=follow)
                    except TimeoutError:
                        self.fail("no answer in 5 s")
                    finally:
                        c.close()
                    self.assert_error(r, "INVALID_PARAMS")
                    self.assertRegex(r["error"]["message"], rf"\b{last}\b", "the message says the last seq")

    def test_takeover_interrupts_typing_where_input_runs(self):
        lease, task, token = self.open_task("typing")
        human = self.conn()
        rid = lease.request("action", task_token=token, operation_id="type-2000",
                            action={"type": "type_text", "text": "a" * 2000})
        wait_for("typing to hold the device", lambda: human.ok("status")["input"]["busy"])
        took_over = time.time()
        human.ok("task_control", task=task, action="takeover")
        try:
            r = lease.reply(rid, 5.0)
        except TimeoutError:
            self.fail("type_text went on after the takeover")
        took = time.time() - took_over
        self.assert_error(r, "INTERRUPTED", rid)
        self.assertLess(took, 1.0, f"the typing stopped {took:.2f} s after the takeover")
        self.assertEqual(r["error"]["status"], "outcome_unknown", r)
        self.assertIs(r["error"]["side_effect_possible"], True, r)
        self.assertRegex(r["error"]["message"], r"\d+\s.*report", "the message says how many reports were sent")
        started = time.time()
        home = human.call("action", operation_id="human-home", action={"type": "home"})
        self.assertIs(home.get("ok"), True, home)
        self.assertLess(time.time() - started, 3.0, "the human's own input waited")

    def test_calibrate_during_someone_elses_task(self):
        self.open_task("calibrate refused")
        other = self.conn()
        self.assert_error(other.call("calibrate", within=20.0), "TASK_RUNNING")


class GlobalLimitsTest(HostileBase):
    """Many connections flooding 4K screenshots without reading: the daemon stays
    responsive and bounded, and refuses connections past its limit."""

    BINARY = TETHER_RELEASE
    CONFIG = UHD

    def tearDown(self):
        self.assert_alive()

    def test_flood_of_unread_4k_screenshots(self):
        pid = self.daemon.proc.pid
        probe = self.conn(timeout=30.0)
        self.frame_id(probe)
        line = b"".join(
            json.dumps({"id": i, "method": "screenshot", "max_edge": 4096}).encode() + b"\n" for i in range(20)
        )
        flooders = []
        try:
            for _ in range(40):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(5)
                s.connect(self.daemon.socket)
                s.sendall(line)
                flooders.append(s)
            slowest, worst_rss = 0.0, 0
            t0 = time.time()
            while time.time() - t0 < 15:
                started = time.time()
                st = probe.call("status", within=30.0)
                slowest = max(slowest, time.time() - started)
                self.assertTrue(st["ok"], st)
                worst_rss = max(worst_rss, vm_hwm_kib(pid))
                time.sleep(0.25)  # pacing of the probe, not synchronisation
            limits = st["result"].get("limits")
        finally:
            for s in flooders:
                s.close()
        peak = vm_hwm_kib(pid)
        with self.subTest("status answers within 2 s throughout"):
            self.assertLess(slowest, 2.0, f"slowest status took {slowest:.2f} s")
        with self.subTest("peak RSS ≤ 160 MB"):
            self.assertLessEqual(peak, 160 * 1024, f"VmHWM {peak / 1024:.0f} MiB")
        with self.subTest("status.limits"):
            self.assertIsInstance(limits, dict, "status has no limits object")
            for k in ("connections", "max_connections", "screenshots_in_flight", "max_screenshots_in_flight",
                      "screenshots_waiting", "max_screenshots_waiting", "queue_timeout_ms",
                      "queued_output_bytes", "max_queued_output_bytes", "refused_busy"):
                self.assertIn(k, limits)
        # Everything closed: the daemon is fine and nothing is left in flight.
        def settled():
            lim = probe.ok("status").get("limits") or {}
            return (lim.get("connections", 1) <= 1 and lim.get("screenshots_in_flight", 0) == 0
                    and lim.get("screenshots_waiting", 0) == 0)
        wait_for("the flood to be cleaned up", settled, within=60.0, every=0.2)
        self.assertTrue(probe.ok("screenshot", within=30.0, max_edge=256))

    def test_connections_past_the_limit_get_busy(self):
        probe = self.conn()
        limits = probe.ok("status").get("limits")
        self.assertIsInstance(limits, dict, "status has no limits object")
        max_conn, refused_before = limits["max_connections"], limits["refused_busy"]
        self.assertLessEqual(max_conn, 4096, "a limit worth testing")
        held = []
        try:
            busy = None
            for _ in range(max_conn + 5):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(10)
                s.connect(self.daemon.socket)
                held.append(s)
            # The daemon admits connections as it identifies them, which need not be in
            # connect order: whichever are past the limit get one line at once; accepted
            # ones get nothing. Wait for the first line on any of them.
            readable, _, _ = select.select(held, [], [], 10.0)
            if readable:
                s = readable[0]
                busy = (s, s.recv(65536))
            self.assertIsNotNone(busy, f"{len(held)} connections, none refused")
            s, data = busy
            while not data.endswith(b"\n"):
                more = s.recv(65536)
                self.assertTrue(more, "closed mid-line")
                data += more
            msg = json.loads(data.split(b"\n")[0])
            self.assert_error(msg, "BUSY")
            self.assertIs(msg["error"]["retryable"], True, msg)
            self.assertEqual(s.recv(65536), b"", "the refused connection is closed after its one line")
        finally:
            for s in held:
                s.close()
        after = wait_for("refused_busy to count it", lambda: (probe.ok("status").get("limits") or {}).get(
            "refused_busy", 0) > refused_before)
        self.assertTrue(after)


class SlowReaderTest(HostileBase):
    """A reader that makes progress is served however slowly; one that stops is dropped."""

    BINARY = TETHER_RELEASE
    CONFIG = UHD

    def tearDown(self):
        self.assert_alive()

    def test_slow_but_steady_reader_is_served_and_a_stalled_one_dropped(self):
        probe = self.conn(timeout=30.0)
        self.frame_id(probe)
        size = len(json.dumps(probe.call("screenshot", within=30.0, max_edge=4096)))
        # Enough output that, read at 32 KiB/s, it takes well over 10 s past the socket
        # buffers (~200 KiB): the daemon has unsent output all that time.
        n = max(1, min(20, -(-560_000 // size)))
        request = b"".join(
            json.dumps({"id": i, "method": "screenshot", "max_edge": 4096}).encode() + b"\n" for i in range(n)
        )
        stalled = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(stalled.close)
        stalled.connect(self.daemon.socket)
        stalled.sendall(request)
        stalled_since = time.time()
        slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(slow.close)
        slow.settimeout(30)
        slow.connect(self.daemon.socket)
        slow.sendall(request)
        got, started = b"", time.time()
        while got.count(b"\n") < n:
            chunk = slow.recv(32 * 1024)
            self.assertTrue(chunk, f"the slow reader was dropped after {time.time() - started:.1f} s, "
                                   f"{len(got)} bytes in")
            got += chunk
            time.sleep(1.0)  # the behaviour under test: a reader this slow
        took = time.time() - started
        replies = [json.loads(l) for l in got.split(b"\n") if l]
        self.assertEqual(sorted(r["id"] for r in replies), list(range(n)))
        self.assertTrue(all(r["ok"] for r in replies), [r.get("error") for r in replies if not r["ok"]])
        self.assertGreater(took, 10.0, f"only {took:.1f} s of slow reading ({len(got)} bytes): not a real test")
        # The stalled reader has read nothing for as long: it must be gone. What the kernel
        # buffered still drains, then EOF (or a reset).
        wait_for("12 s without reading", lambda: time.time() - stalled_since >= 12.0, within=30.0, every=0.1)
        stalled.settimeout(10)
        drained = 0
        try:
            while True:
                chunk = stalled.recv(1 << 20)
                if not chunk:
                    break
                drained += len(chunk)
        except ConnectionResetError:
            pass
        except socket.timeout:
            self.fail(f"the stalled reader was not dropped ({drained} bytes were waiting)")
        self.assertLess(drained, len(got), "the stalled reader got everything: it was never stalled")


if __name__ == "__main__":
    unittest.main(verbosity=2)
