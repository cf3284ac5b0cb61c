"""The WebSockets against a real client nobody here wrote (`websockets` from PyPI, installed
by tests/run) over TLS: `/api/ws` (tether/1 for third-party hosts: reference 001) and
`/api/video` (ticketed live H.264: reference 000), checked with Debian's ffprobe/ffmpeg.
"""

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import unittest
import warnings

from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from test_control_socket import Client, open_task
from test_https import HttpsDaemon, wait_for

CDV1 = 0x43445631


def quiet_connect_warning():
    """websockets 17 prefers `with connect(...)`; these tests close their sockets themselves.
    (Set inside the test run: unittest installs its own warning filters first.)"""
    warnings.filterwarnings("ignore", message="connect\\(\\) must be used as a context manager")


class Ws:
    """A tether/1 WebSocket client: requests by id, events collected as they come."""

    def __init__(self, d, token=None, headers=None, origin=None, path="/api/ws"):
        h = dict(headers or {})
        if token:
            h["Authorization"] = f"Bearer {token}"
        self.sock = connect(
            f"wss://localhost:{d.port}{path}", ssl=d.context(), additional_headers=h, origin=origin,
            open_timeout=10, max_size=4 << 20,
        )
        self.events = []
        self.next_id = 1

    def send(self, obj):
        self.sock.send(json.dumps(obj))

    def recv(self, timeout=10):
        return json.loads(self.sock.recv(timeout=timeout))

    def call(self, method, timeout=10, **params):
        """Sends one request and returns its response; events meanwhile are kept."""
        rid = self.next_id
        self.next_id += 1
        self.send({"id": rid, "method": method, **params})
        deadline = time.time() + timeout
        while True:
            m = self.recv(timeout=max(0.1, deadline - time.time()))
            if m.get("id") == rid and "ok" in m:
                return m
            if "event" in m:
                self.events.append(m)

    def ok(self, method, **params):
        r = self.call(method, **params)
        assert r["ok"], f"{method}: {r}"
        return r["result"]

    def wait_event(self, pred, timeout=10):
        deadline = time.time() + timeout
        while True:
            for e in self.events:
                if pred(e):
                    return e
            try:
                m = self.recv(timeout=max(0.1, deadline - time.time()))
            except TimeoutError:
                raise AssertionError(f"no such event; got {self.events[-5:]}")
            if "event" in m:
                self.events.append(m)

    def close(self):
        self.sock.close()


def close_code(sock, timeout=20):
    """Reads until the server closes; returns (code, reason)."""
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            sock.recv(timeout=max(0.1, deadline - time.time()))
    except ConnectionClosed as e:
        rcvd = e.rcvd
        return (rcvd.code, rcvd.reason) if rcvd else (None, None)
    except TimeoutError:
        pass
    raise AssertionError("the server did not close the socket")


class Base(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        quiet_connect_warning()
        cls.d = HttpsDaemon()
        cls.op = cls.d.cli("token", "add", "ws-op", "--role", "operate").stdout.strip()
        cls.viewer = cls.d.cli("token", "add", "ws-view", "--role", "view").stdout.strip()

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def ws(self, token=None, **kw):
        w = Ws(self.d, token or self.op, **kw)
        self.addCleanup(w.close)
        return w

    def unix(self):
        c = Client(self.d.socket, timeout=15)
        self.addCleanup(c.close)
        return c

    def open_task(self, title="ws task"):
        """A task whose lease is a socket connection of this test; (client, id, token)."""
        c, task, token = open_task(self.d.socket, title)
        self.addCleanup(c.close)
        return c, task, token

    def note(self, lease, task, text):
        r = lease.call({"id": 2, "method": "task_note", "task": task, "text": text})
        self.assertTrue(r["ok"], r)
        return r["result"]["seq"]


class Control(Base):

    def test_hello_pins_the_connections_kind(self):
        w = self.ws()
        self.assertEqual(w.ok("hello", kind="host")["kind"], "host")
        r = w.call("hello", kind="console")
        self.assertEqual(r["error"]["code"], "KIND_FIXED", r)
        self.assertEqual(w.ok("hello")["kind"], "host", "a hello without kind keeps it")
        w2 = self.ws()
        self.assertEqual(w2.ok("hello")["kind"], "host", "the default kind is pinned by the first hello")
        self.assertEqual(w2.call("hello", kind="agent")["error"]["code"], "KIND_FIXED")
        agent = self.ws()
        agent.ok("hello", kind="agent")
        lease, task, _ = self.open_task("agent kind")
        r = agent.call("attach", task=task)
        self.assertEqual(r["error"]["code"], "INVALID_REQUEST", r)
        self.assertIn("agent", r["error"]["message"])

    def test_attach_mirrors_a_running_task_and_stamps_its_target(self):
        lease, task, _ = self.open_task("mirrored")
        w = self.ws(self.d.admin)
        w.ok("hello", kind="host")
        att = w.ok("attach", task=task)
        self.assertEqual((att["task"], att["state"]), (task, "running"))
        seq = self.note(lease, task, "hello from the opener")
        e = w.wait_event(lambda e: e.get("seq") == seq)
        self.assertEqual((e["task"], e["kind"], e["data"]["text"]), (task, "note", "hello from the opener"))
        # A spoofed task id is ignored: the call goes to the attached task.
        ev = w.ok("task_events", task=999999)
        self.assertEqual(ev["task"]["id"], task)
        r = w.ok("task_control", task=999999, action="pause")
        self.assertEqual((r["id"], r["state"]), (task, "paused"))
        st = self.d.status()
        self.assertEqual((st["task"]["id"], st["task"]["state"]), (task, "paused"))
        w.ok("task_control", task=1, action="resume")
        # Detach ends the mirror: no more events, and ids are the caller's again.
        self.assertEqual(w.ok("detach")["detached"], task)
        r = w.call("task_events", task=999999)
        self.assertEqual(r["error"]["code"], "NO_SUCH_TASK", r)

    def test_attach_refuses_finished_and_unknown_tasks(self):
        w = self.ws()
        self.assertEqual(w.call("attach", task=987654)["error"]["code"], "NO_SUCH_TASK")
        lease, task, _ = self.open_task("short")
        r = lease.call({"id": 3, "method": "task_finish", "task": task, "ok": True})
        self.assertTrue(r["ok"], r)
        r = w.call("attach", task=task)
        self.assertEqual(r["error"]["code"], "INVALID_TRANSITION", r)
        self.assertIn("completed", r["error"]["message"])
        self.assertEqual(w.call("mailbox_flush", after_seq=0)["error"]["code"], "NOT_ATTACHED")
        self.assertEqual(w.call("user_message", text="hi")["error"]["code"], "NOT_ATTACHED")

    def test_reconnect_and_mailbox_flush_miss_nothing_and_repeat_nothing(self):
        lease, task, _ = self.open_task("replayed")
        first = self.ws()
        first.ok("attach", task=task)
        for i in range(3):
            self.note(lease, task, f"before {i}")
        last = first.wait_event(lambda e: e.get("data", {}).get("text") == "before 2")["seq"]
        first.close()
        # Events while nobody is attached, and while the new connection attaches.
        writer_lease = self.unix()
        stop = threading.Event()

        def keep_writing():
            n = 0
            while not stop.is_set() and n < 200:
                r = writer_lease.call({"id": 9, "method": "task_note", "task": task, "text": f"during {n}"})
                assert r["ok"], r
                n += 1

        for i in range(5):
            self.note(lease, task, f"missed {i}")
        t = threading.Thread(target=keep_writing)
        t.start()
        try:
            second = self.ws()
            att = second.ok("attach", task=task)
            flushed = second.ok("mailbox_flush", after_seq=last)
            self.assertFalse(flushed["more"])
            self.assertEqual(flushed["live_from"], att["live_from"])
        finally:
            stop.set()
            t.join()
        end = self.note(lease, task, "after")
        second.wait_event(lambda e: e.get("seq") == end)
        seqs = [e["seq"] for e in flushed["events"]] + [e["seq"] for e in second.events if e["task"] == task]
        self.assertEqual(sorted(seqs), list(range(last + 1, end + 1)), "every event once, none missing")
        self.assertEqual(len(seqs), len(set(seqs)))
        # Asking again after the live start replays nothing more.
        self.assertEqual(second.ok("mailbox_flush", after_seq=att["live_from"])["events"], [])
        r = second.call("mailbox_flush", after_seq=end + 1000)
        self.assertEqual(r["error"]["code"], "INVALID_PARAMS", r)

    def test_user_message_reaches_the_agent_and_the_journal(self):
        lease, task, token = self.open_task("talk")
        viewer = self.ws(self.viewer)
        viewer.ok("attach", task=task)
        r = viewer.call("user_message", text="not allowed to talk")
        self.assertEqual(r["error"]["code"], "PERMISSION_DENIED", r)
        w = self.ws()
        w.ok("attach", task=task)
        sent = w.ok("user_message", text="please open Settings")
        self.assertEqual(sent["task"], task)
        agent = self.unix()
        got = agent.call({"id": 1, "method": "task_messages", "task_token": token, "wait_ms": 5000})
        self.assertTrue(got["ok"], got)
        msgs = got["result"]["messages"]
        self.assertEqual([m["text"] for m in msgs], ["please open Settings"])
        self.assertEqual(msgs[0]["from"], {"kind": "token", "name": "ws-op"})
        # Read past it: nothing new; a message while the agent waits wakes it.
        after = got["result"]["last_seq"]

        def later():
            time.sleep(0.3)
            w.ok("user_message", text="and then Wi-Fi")

        threading.Thread(target=later).start()
        got = agent.call({"id": 2, "method": "task_messages", "task_token": token, "after_seq": after, "wait_ms": 10000})
        self.assertEqual([m["text"] for m in got["result"]["messages"]], ["and then Wi-Fi"])
        journal = lease.call({"id": 4, "method": "task_events", "task": task})["result"]["events"]
        kinds = [(e["kind"], e["data"].get("text")) for e in journal]
        self.assertIn(("user_message", "please open Settings"), kinds)
        # The attached host's own mirror saw it as an event too.
        w.wait_event(lambda e: e.get("kind") == "user_message" and e["data"]["text"] == "and then Wi-Fi")

    def test_bad_messages_get_codes_and_the_socket_stays(self):
        w = self.ws()
        w.sock.send("{not json")
        self.assertEqual(w.recv()["error"]["code"], "INVALID_JSON")
        w.sock.send(b"\x00\x01binary")
        self.assertEqual(w.recv()["error"]["code"], "INVALID_REQUEST")
        w.send({"id": 5, "method": "status", "pad": "x" * 70000})
        self.assertEqual(w.recv()["error"]["code"], "REQUEST_TOO_LARGE")
        self.assertIn("daemon", w.ok("status"))
        # Past the message limit the socket is closed with 1009 (read before the rest of the
        # message was sent: the send itself may see the close).
        try:
            w.sock.send("x" * (1 << 20) + "y" * 10)
            code = close_code(w.sock)[0]
        except ConnectionClosed as e:
            code = e.rcvd.code if e.rcvd else None
        self.assertEqual(code, 1009)
        self.assertIn("daemon", self.ws().ok("status"), "the daemon goes on")

    def test_closing_the_socket_ends_the_lease_of_its_task(self):
        wait_for("an earlier test's lease to end", lambda: self.d.status().get("task") is None)
        w = Ws(self.d, self.op)
        opened = w.ok("task_open", title="lease over ws")
        task = opened["id"]
        self.assertEqual(self.d.status()["task"]["id"], task)
        w.close()
        wait_for("the task to be abandoned", lambda: self.d.status().get("task") is None)
        c = self.unix()
        tasks = c.call({"id": 1, "method": "task_list"})["result"]["tasks"]
        self.assertEqual([t["state"] for t in tasks if t["id"] == task], ["abandoned"])

    def test_authentication_and_origin_come_before_the_upgrade(self):
        d = self.d
        with self.assertRaises(InvalidStatus) as e:
            Ws(d, None)
        self.assertEqual(e.exception.response.status_code, 401)
        with self.assertRaises(InvalidStatus) as e:
            Ws(d, "tt_wrong")
        self.assertEqual(e.exception.response.status_code, 401)
        with self.assertRaises(InvalidStatus) as e:
            Ws(d, self.op, origin="https://evil.example")
        self.assertEqual(e.exception.response.status_code, 403)
        # A session cookie needs the console's own Origin.
        st, headers, _ = d.request("POST", "/login", body={"token": self.op}, headers={"Origin": d.base})
        self.assertEqual(st, 200)
        cookie = headers["Set-Cookie"].split(";")[0]
        with self.assertRaises(InvalidStatus) as e:
            Ws(d, headers={"Cookie": cookie})
        self.assertEqual(e.exception.response.status_code, 403)
        w = self.ws(None, headers={"Cookie": cookie}, origin=d.base)
        self.assertEqual(w.ok("hello", kind="console")["caller"]["principal"]["name"], "ws-op")
        # A task token in a header makes the socket its task's agent.
        lease, task, token = self.open_task("agent header")
        agent = self.ws(None, headers={"Tether-Task-Token": token})
        shot = agent.ok("screenshot")
        self.assertIn("observation_id", shot["metadata"])
        r = agent.ok("task_note", text="from the agent's socket")
        self.assertEqual(r["id"], task)


def read_frames(sock, n, ack=True, timeout=20):
    """Receives n CDV1 frames (acking each); returns [(header dict, payload)]."""
    frames = []
    deadline = time.time() + timeout
    while len(frames) < n:
        m = sock.recv(timeout=max(0.1, deadline - time.time()))
        if isinstance(m, str):
            continue
        magic, gen, seq, at, flags = struct.unpack(">IIIQI", m[:24])
        assert magic == CDV1, hex(magic)
        frames.append(({"generation": gen, "sequence": seq, "at_us": at, "key": flags & 1,
                        "recv_us": time.monotonic_ns() // 1000}, m[24:]))
        if ack:
            sock.send(json.dumps({"type": "ack", "generation": gen, "sequence": seq}))
    return frames


class Video(Base):

    def origin(self):
        return f"https://localhost:{self.d.port}"

    def viewer_socket(self, ticket, origin=True, source=None):
        """A socket on /api/video (from loopback address `source`, if given) that sends
        `ticket` first (nothing if None)."""
        sock = None
        if source:
            sock = socket.create_connection(("127.0.0.1", self.d.port), timeout=10, source_address=(source, 0))
        s = connect(f"wss://localhost:{self.d.port}/api/video", ssl=self.d.context(), sock=sock,
                    origin=self.origin() if origin else None, open_timeout=10, max_size=8 << 20)
        self.addCleanup(s.close)
        if ticket is not None:
            s.send(json.dumps({"ticket": ticket}))
        return s

    def watch(self, control):
        opened = control.ok("video_open")
        self.assertEqual(opened["expires_in_ms"], 15000)
        self.assertEqual(len(opened["ticket"]), 32)
        s = self.viewer_socket(opened["ticket"])
        ready = json.loads(s.recv(timeout=10))
        self.assertEqual(ready["type"], "ready")
        return s, ready, opened

    def test_the_stream_decodes_and_shows_the_sims_screen(self):
        control = self.ws(self.viewer)
        s, ready, opened = self.watch(control)
        self.assertEqual(opened["path"], "/api/video")
        self.assertTrue(opened["url"].startswith("wss://") and opened["url"].endswith(f":{self.d.port}/api/video"))
        frames = read_frames(s, 45)
        self.assertEqual(frames[0][0]["key"], 1, "the first frame is an IDR")
        seqs = [f[0]["sequence"] for f in frames]
        self.assertEqual(seqs, list(range(seqs[0], seqs[0] + len(seqs))), "an acking viewer sees no gap")
        tmp = tempfile.mkdtemp(prefix="tether-video-")
        self.addCleanup(shutil.rmtree, tmp)
        stream = os.path.join(tmp, "live.h264")
        with open(stream, "wb") as f:
            for _, payload in frames:
                f.write(payload)
        probe = subprocess.run(
            ["ffprobe", "-v", "error", "-f", "h264", "-count_frames", "-select_streams", "v:0",
             "-show_entries", "stream=codec_name,profile,width,height,nb_read_frames", "-of", "json", stream],
            capture_output=True, text=True, check=True,
        )
        self.assertEqual(probe.stderr, "", "ffprobe found errors in the stream")
        info = json.loads(probe.stdout)["streams"][0]
        self.assertEqual(info["codec_name"], "h264")
        self.assertEqual(int(info["nb_read_frames"]), 45)
        # The codec string names the stream's own profile and level.
        sps_profile = {"Constrained Baseline": "42", "Baseline": "42", "Main": "4D", "High": "64"}[info["profile"]]
        self.assertTrue(ready["codec"].startswith("avc1." + sps_profile), (ready["codec"], info["profile"]))
        # The last decoded picture, cropped to the phone, against a screenshot.
        shot = control.ok("screenshot", max_edge=2048)
        rect = shot["metadata"]["active_rect"]
        size = shot["metadata"]["image_size"]
        self.assertEqual((size["width"], size["height"]), (rect["width"], rect["height"]), "unscaled screenshot")
        png = os.path.join(tmp, "shot.png")
        with open(png, "wb") as f:
            f.write(base64.b64decode(shot["data"]))

        def rgb(args):
            return subprocess.run(["ffmpeg", "-v", "error", *args, "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                                  capture_output=True, check=True).stdout

        crop = f"crop={rect['width']}:{rect['height']}:{rect['x']}:{rect['y']}"
        video = rgb(["-f", "h264", "-i", stream, "-vf", crop + ",select=eq(n\\,44)", "-frames:v", "1"])
        still = rgb(["-i", png])
        self.assertEqual(len(video), len(still))
        step = 7  # every 7th byte is plenty and keeps pure Python quick
        err = sum(abs(a - b) for a, b in zip(video[::step], still[::step])) / len(still[::step])
        self.assertLess(err, 6.0, f"mean error {err:.2f} of 255 between the video and a screenshot")

    def test_tickets_are_refused_when_reused_expired_in_the_url_or_from_another_origin(self):
        control = self.ws(self.viewer)
        expiring = control.ok("video_open")["ticket"]
        issued = time.time()
        s, _, opened = self.watch(control)
        # Reused.
        again = self.viewer_socket(opened["ticket"])
        self.assertEqual(close_code(again)[0], 1008)
        # In the URL: refused before the upgrade, whatever the ticket.
        with self.assertRaises(InvalidStatus) as e:
            connect(f"wss://localhost:{self.d.port}/api/video?ticket={expiring}", ssl=self.d.context(),
                    origin=self.origin(), open_timeout=10)
        self.assertEqual(e.exception.response.status_code, 400)
        # Another origin.
        with self.assertRaises(InvalidStatus) as e:
            connect(f"wss://localhost:{self.d.port}/api/video", ssl=self.d.context(),
                    origin="https://evil.example", open_timeout=10)
        self.assertEqual(e.exception.response.status_code, 403)
        # An oversized first message.
        big = self.viewer_socket(None)
        big.send("x" * 2000)
        self.assertEqual(close_code(big)[0], 1009)
        # No ticket within 2 s.
        quiet = self.viewer_socket(None)
        t0 = time.time()
        code, reason = close_code(quiet)
        self.assertEqual(code, 1008)
        self.assertGreaterEqual(time.time() - t0, 1.5)
        self.assertIn("2 s", reason)
        # Expired: the ticket from the start, after its 15 s.
        time.sleep(max(0.0, issued + 15.5 - time.time()))
        late = self.viewer_socket(expiring)
        code, reason = close_code(late)
        self.assertEqual(code, 1008)
        self.assertIn("expired", reason)
        # The daemon never logged a ticket.
        log = self.d.log_text()
        self.assertNotIn(expiring, log)
        self.assertNotIn(opened["ticket"], log)

    def test_one_address_holds_four_waiting_places_and_others_still_get_in(self):
        waiting = [self.viewer_socket(None, source="127.0.0.2") for _ in range(4)]
        with self.assertRaises(InvalidStatus) as e:
            self.viewer_socket(None, source="127.0.0.2")
        self.assertEqual(e.exception.response.status_code, 503)
        self.assertIn(b"from this address", e.exception.response.body)
        # Another address still waits, and watches.
        control = self.ws(self.viewer)
        s = self.viewer_socket(control.ok("video_open")["ticket"], source="127.0.0.3")
        self.assertEqual(json.loads(s.recv(timeout=10))["type"], "ready")
        for w in waiting:
            w.close()

    def test_a_slow_viewer_is_dropped_and_the_fast_one_keeps_its_rate_and_latency(self):
        control = self.ws(self.viewer)
        fast, _, _ = self.watch(control)
        alone = read_frames(fast, 60)
        slow, _, _ = self.watch(control)
        t_slow = time.time()
        got_slow = []

        def never_ack():
            try:
                while True:
                    got_slow.append(slow.recv(timeout=30))
            except ConnectionClosed as e:
                got_slow.append(("closed", e.rcvd.code if e.rcvd else None, time.time() - t_slow))
            except TimeoutError:
                pass

        t = threading.Thread(target=never_ack)
        t.start()
        beside = read_frames(fast, 150, timeout=30)
        t.join(timeout=30)

        def rate(frames):
            span = (frames[-1][0]["recv_us"] - frames[0][0]["recv_us"]) / 1e6
            return (len(frames) - 1) / span

        def p50(frames):
            lat = sorted((f[0]["recv_us"] - f[0]["at_us"]) / 1000 for f in frames)
            return lat[len(lat) // 2]

        print(f"\nfast viewer: alone {rate(alone):.1f} fps p50 {p50(alone):.1f} ms; "
              f"beside a slow one {rate(beside):.1f} fps p50 {p50(beside):.1f} ms")
        self.assertGreater(rate(beside), 20.0, "the fast viewer keeps (near) the sim's 30 fps")
        self.assertLess(p50(beside), p50(alone) + 30.0, "its latency does not grow with the slow viewer")
        seqs = [f[0]["sequence"] for f in beside]
        self.assertEqual(seqs, list(range(seqs[0], seqs[0] + len(seqs))), "the fast viewer skips nothing")
        end = got_slow[-1]
        self.assertEqual(end[0], "closed", end)
        self.assertEqual(end[1], 4004, "dropped for an unacknowledged frame")
        self.assertTrue(9.5 <= end[2] <= 15.0, f"after {end[2]:.1f} s")
        frames_to_slow = sum(1 for m in got_slow if isinstance(m, bytes))
        self.assertEqual(frames_to_slow, 8, "at most 8 unacknowledged frames")
        st = self.d.status()["video"]["viewers"]
        self.assertGreater(st["skipped"], 0)

    def test_revoke_and_the_opening_connection_closing_end_the_video(self):
        control = self.ws(self.viewer)
        s, _, _ = self.watch(control)
        read_frames(s, 2)
        spare = control.ok("video_open")["ticket"]
        st = self.d.status()["video"]["viewers"]
        self.assertGreaterEqual(st["viewers"], 1)
        s.send(json.dumps({"type": "keyframe"}))
        wait_for("the keyframe request to be counted",
                 lambda: self.d.status()["video"]["viewers"]["keyframe_requests"] >= st["keyframe_requests"] + 1)
        r = control.ok("video_revoke")
        self.assertEqual((r["viewers"], r["tickets"]), (1, 1))
        self.assertEqual(close_code(s)[0], 4002)
        self.assertEqual(close_code(self.viewer_socket(spare))[0], 1008, "a revoked ticket is void")
        # The connection that opened the video closes: its viewer goes too.
        other = Ws(self.d, self.viewer)
        s2, _, _ = self.watch(other)
        read_frames(s2, 1)
        other.close()
        self.assertEqual(close_code(s2)[0], 4005)
        wait_for("no viewers", lambda: self.d.status()["video"]["viewers"]["viewers"] == 0)

    def test_one_token_watches_four_times_and_the_ninth_viewer_is_refused(self):
        control = self.ws(self.viewer)
        watching = [self.watch(control)[0] for _ in range(4)]
        s = self.viewer_socket(control.ok("video_open")["ticket"])
        code, reason = close_code(s)
        self.assertEqual(code, 1013, reason)
        self.assertIn("4 viewers", reason)
        # Another token still watches, up to the eight in all.
        other = self.ws(self.op)
        watching += [self.watch(other)[0] for _ in range(4)]
        third = self.ws(self.d.admin)
        s = self.viewer_socket(third.ok("video_open")["ticket"])
        code, reason = close_code(s)
        self.assertEqual(code, 1013, reason)
        self.assertIn("8 viewers", reason)
        for w in watching:
            w.close()


if __name__ == "__main__":
    unittest.main()
