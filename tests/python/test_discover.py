"""`tether discover` finds appliances as a laptop on their LAN would: two `serve --sim`
daemons, each in its own network namespace with its own avahi-daemon (Debian's, the
announcer the image runs) publishing the service file the daemon writes, on a bridge
shared with a third namespace where `tether discover` browses. Their states come from the
TXT records: one idle, one running a task. Root and iproute2 needed (tests/run installs
avahi-daemon and iproute2; missing, this fails).
"""

import json
import os
import shutil
import subprocess
import tempfile
import textwrap
import time
import unittest

from test_control_socket import TETHER, Client, Daemon
from test_https import wait_for

PID = os.getpid() % 100000
CLIENT = f"tdisc-c-{PID}"
SUBNET = "10.213.8"


def ip(*args, ns=None):
    cmd = ["ip", "netns", "exec", ns, "ip", *args] if ns else ["ip", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True)


class Appliance:
    """A namespace with a daemon and its avahi, on the client's bridge."""

    def __init__(self, name, index, bridge):
        self.name, self.ns = name, f"tdisc-{name}-{PID}"
        self.work = tempfile.mkdtemp(prefix=f"tether-discover-{name}-")
        os.chmod(self.work, 0o755)
        self.services = os.path.join(self.work, "services")
        os.mkdir(self.services)
        os.chmod(self.services, 0o755)
        inside, outside = f"td{PID}{name}0", f"td{PID}{name}1"
        ip("netns", "add", self.ns)
        ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        ip("link", "set", inside, "netns", self.ns)
        ip("link", "set", outside, "netns", CLIENT)
        ip("link", "set", outside, "master", bridge, ns=CLIENT)
        ip("link", "set", outside, "up", ns=CLIENT)
        ip("addr", "add", f"{SUBNET}.{index}/24", "dev", inside, ns=self.ns)
        ip("link", "set", inside, "up", ns=self.ns)
        ip("link", "set", "lo", "up", ns=self.ns)
        # The daemon (its socket reachable from here, its network in the namespace).
        self.daemon = Daemon(config_text=f'mdns_dir = "{self.services}"\n', netns=self.ns)
        wait_for("the daemon's service file", lambda: os.path.exists(os.path.join(self.services, "tether.service")),
                 timeout=30)
        conf = os.path.join(self.work, "avahi-daemon.conf")
        with open(conf, "w") as f:
            f.write(textwrap.dedent(f"""\
                [server]
                host-name=tether-{name}
                use-ipv4=yes
                use-ipv6=no
                allow-interfaces={inside}
                enable-dbus=no
                [publish]
                publish-workstation=no
                publish-hinfo=no
                """))
        # Its own /run (pid file, socket) and the daemon's service directory where avahi
        # looks, in a mount namespace of its own: the host's avahi is untouched.
        script = (f"mount -t tmpfs tmpfs /run/avahi-daemon && mount --bind {self.services} /etc/avahi/services "
                  f"&& exec avahi-daemon --no-drop-root --no-chroot --no-rlimits -f {conf}")
        os.makedirs("/run/avahi-daemon", exist_ok=True)
        self.log = open(os.path.join(self.work, "avahi.log"), "w")
        self.avahi = subprocess.Popen(["ip", "netns", "exec", self.ns, "unshare", "-m", "--propagation", "private",
                                       "sh", "-c", script], stdout=self.log, stderr=subprocess.STDOUT)

    def stop(self):
        self.avahi.terminate()
        try:
            self.avahi.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.avahi.kill()
            self.avahi.wait()
        self.log.close()
        self.daemon.stop()
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
        shutil.rmtree(self.work, ignore_errors=True)


class Discover(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("avahi-daemon") is None:
            raise AssertionError("this test needs root, iproute2 and avahi-daemon (tests/run installs them)")
        ip("netns", "add", CLIENT)
        cls.appliances = []
        try:
            ip("link", "add", "br0", "type", "bridge", ns=CLIENT)
            # Multicast reaches every port at once (no snooping waiting for a querier).
            ip("link", "set", "br0", "type", "bridge", "mcast_snooping", "0", ns=CLIENT)
            ip("addr", "add", f"{SUBNET}.1/24", "dev", "br0", ns=CLIENT)
            ip("link", "set", "br0", "up", ns=CLIENT)
            ip("link", "set", "lo", "up", ns=CLIENT)
            cls.appliances = [Appliance("a", 2, "br0"), Appliance("b", 3, "br0")]
        except Exception:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for a in cls.appliances:
            a.stop()
        subprocess.run(["ip", "netns", "del", CLIENT], capture_output=True)

    def discover(self):
        r = subprocess.run(["ip", "netns", "exec", CLIENT, TETHER, "discover", "--json", "--timeout", "3"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return {a["name"]: a for a in json.loads(r.stdout)}

    def test_both_appliances_are_found_with_their_states(self):
        a, b = self.appliances
        lease = Client(b.daemon.socket, timeout=15)
        opened = lease.call({"id": 1, "method": "task_open", "title": "busy", "events": False})
        self.assertTrue(opened["ok"], opened)
        deadline = time.time() + 90
        found = {}
        while time.time() < deadline:
            found = self.discover()
            if found.get("tether-a", {}).get("task") == "none" and found.get("tether-b", {}).get("task") == "running":
                break
        self.assertEqual(sorted(found), ["tether-a", "tether-b"], found)
        self.assertEqual(found["tether-a"]["task"], "none", found)
        self.assertEqual(found["tether-b"]["task"], "running", found)
        for name, appliance in found.items():
            port = (a if name == "tether-a" else b).daemon.call({"id": 1, "method": "status"})["result"]["https"]["port"]
            self.assertEqual(appliance["url"], f"https://{name}.local:{port}")
            self.assertEqual(appliance["queue"], "0")
            self.assertEqual(appliance["phone"], "connected")
        self.assertIn(f"{SUBNET}.2", found["tether-a"]["addresses"])
        self.assertIn(f"{SUBNET}.3", found["tether-b"]["addresses"])
        lease.close()
        # The table a person reads.
        r = subprocess.run(["ip", "netns", "exec", CLIENT, TETHER, "discover", "--timeout", "2"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("tether-a", r.stdout)


if __name__ == "__main__":
    unittest.main()
