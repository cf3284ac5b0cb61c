"""Updates through the real transports, against a `serve --sim` whose `[update]` paths point
at a fake appliance: an os-release with IMAGE_VERSION, a device-tree command line naming
slot a booted by U-Boot, a boot partition directory with tether.env, and a `rauc` program
that records the bundle it is given (the real RAUC, U-Boot and reboots are in the QEMU lab:
tests/vm/update.sh). Checked here: `POST /api/update` streams a body into the daemon and
starts the install (and the reboot request), `GET /api/update` follows it, the role table
(view reads, only admin installs), refusals (no Content-Length, a body shorter than it
says, a running task), `tether update FILE` over the socket and `--url`, and the
unavailable answer off the appliance.
"""

import hashlib
import json
import os
import shutil
import stat
import tempfile
import unittest

from test_https import HttpsDaemon, open_lease, wait_for

STATUS = json.dumps({
    "compatible": "tether-rpi4", "booted": "a", "boot_primary": "rootfs.0",
    "slots": [
        {"rootfs.0": {"bootname": "a", "state": "booted", "boot_status": "good", "slot_status": {}}},
        {"rootfs.1": {"bootname": "b", "state": "inactive", "boot_status": "bad",
                      "slot_status": {"bundle": {"version": "lab-0"}}}},
    ],
})


def fake_appliance(root, install_line):
    for d in ("boot", "etc"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    with open(os.path.join(root, "etc", "os-release"), "w") as f:
        f.write("ID=debian\nIMAGE_ID=tether-rpi4\nIMAGE_VERSION=lab-1\n")
    with open(os.path.join(root, "bootargs"), "wb") as f:
        f.write(b"root=PARTUUID=74657468-02 ro tether.slot=a tether.boot=u-boot\0")
    with open(os.path.join(root, "boot", "tether.env"), "w") as f:
        f.write("tether_order=a b\ntether_a_state=good\ntether_a_left=0\ntether_b_state=bad\ntether_b_left=0\n")
    rauc = os.path.join(root, "rauc")
    with open(rauc, "w") as f:
        f.write(f"""#!/bin/sh
case "$1" in
status) echo '{STATUS}' ;;
install) cp "$2" "{root}/installed"; echo ' 40% Copying image to rootfs.1'; {install_line} ;;
esac
""")
    os.chmod(rauc, os.stat(rauc).st_mode | stat.S_IXUSR)
    return f"""[update]
boot_dir = "{root}/boot"
os_release = "{root}/etc/os-release"
cmdline = ["{root}/no-proc-cmdline", "{root}/bootargs"]
rauc = "{rauc}"
"""


class UpdateOverHttps(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.fake = tempfile.mkdtemp(prefix="tether-appliance-")
        cls.d = HttpsDaemon(config_text=fake_appliance(cls.fake, "echo '100% Installing done.'; exit 0"))
        cls.view = json.loads(cls.d.cli("token", "add", "watcher", "--role", "view", "--json").stdout)["token"]
        cls.operate = json.loads(cls.d.cli("token", "add", "ci", "--role", "operate", "--json").stdout)["token"]

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()
        shutil.rmtree(cls.fake, ignore_errors=True)

    def setUp(self):
        if os.path.exists(os.path.join(self.fake, "installed")):
            os.remove(os.path.join(self.fake, "installed"))
        reboot = os.path.join(self.d.run_dir, "reboot")
        if os.path.exists(reboot):
            os.remove(reboot)

    def status(self, token=None):
        code, _, body = self.d.request("GET", "/api/update", token=token or self.view)
        self.assertEqual(code, 200, body)
        return body

    def installed(self):
        s = self.status()
        if s["install"]["phase"] == "failed":
            raise AssertionError(f"the install failed: {s['install']}")
        return s if s["install"]["phase"] == "installed" else None

    def test_status_names_the_image_slots_and_boot(self):
        s = self.status()
        self.assertTrue(s["available"], s)
        self.assertEqual(s["image"], {"id": "tether-rpi4", "version": "lab-1"})
        self.assertEqual(s["booted"], {"slot": "a", "loader": "u-boot"})
        self.assertEqual([(x["slot"], x["state"], x["version"]) for x in s["slots"]],
                         [("a", "good", "lab-1"), ("b", "bad", "lab-0")])
        self.assertEqual(s["next_boot"], "a")
        self.assertEqual(self.d.status()["update"], {"slot": "a", "version": "lab-1", "next_boot": "a", "rolled_back": None})

    def test_post_streams_the_bundle_into_rauc_and_asks_for_the_reboot(self):
        bundle = os.urandom(300_000)
        code, _, body = self.d.request("POST", "/api/update", body=bundle, token=self.d.admin,
                                       headers={"Content-Type": "application/octet-stream"})
        self.assertEqual(code, 202, body)
        self.assertEqual(body, {"phase": "installing", "target": "b"})
        s = wait_for("the install to end", self.installed, timeout=30)
        self.assertEqual(s["install"]["received"], len(bundle))
        self.assertTrue(s["install"]["reboot_requested"], s["install"])
        with open(os.path.join(self.fake, "installed"), "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), hashlib.sha256(bundle).hexdigest())
        with open(os.path.join(self.d.run_dir, "reboot")) as f:
            self.assertIn("slot b", f.read())

    def test_only_admin_installs_and_bad_uploads_say_why(self):
        for token in (self.view, self.operate):
            code, _, body = self.d.request("POST", "/api/update", body=b"x" * 10, token=token)
            self.assertEqual(code, 403, body)
            self.assertEqual(body["error"]["code"], "PERMISSION_DENIED")
        # No Content-Length: chunked.
        c = self.d.conn()
        try:
            c.putrequest("POST", "/api/update")
            c.putheader("Authorization", f"Bearer {self.d.admin}")
            c.putheader("Transfer-Encoding", "chunked")
            c.endheaders()
            c.send(b"5\r\nhello\r\n0\r\n\r\n")
            r = c.getresponse()
            body = json.loads(r.read())
        finally:
            c.close()
        self.assertEqual(r.status, 400, body)
        self.assertIn("Content-Length", body["error"]["message"])
        self.assertFalse(os.path.exists(os.path.join(self.fake, "installed")))

    def test_a_running_task_refuses_an_install_unless_forced(self):
        c, _, first = open_lease(self.d, self.d.admin, title="busy")
        try:
            self.assertIn("id", first, first)
            code, _, body = self.d.request("POST", "/api/update", body=b"y" * 1000, token=self.d.admin)
            self.assertEqual(code, 409, body)
            self.assertEqual(body["error"]["code"], "TASK_ACTIVE")
            self.assertIn("force", body["error"]["message"])
            code, _, body = self.d.request("POST", "/api/update?force=1&reboot=0", body=b"y" * 1000, token=self.d.admin)
            self.assertEqual(code, 202, body)
            s = wait_for("the forced install to end", self.installed, timeout=30)
            self.assertFalse(s["install"]["reboot_requested"], "reboot=0")
            self.assertFalse(os.path.exists(os.path.join(self.d.run_dir, "reboot")))
        finally:
            c.close()
            # Closing the lease abandons the task; the other tests need the phone free.
            wait_for("the abandoned task to end", lambda: self.d.status()["task"] is None, timeout=30)

    def test_cli_installs_over_the_socket_and_over_https(self):
        path = os.path.join(self.fake, "b.raucb")
        bundle = os.urandom(200_000)
        with open(path, "wb") as f:
            f.write(bundle)
        r = self.d.cli("update", path, "--no-reboot")
        self.assertIn("installed into slot b; it is tried at the next reboot", r.stderr)
        self.assertIn("uploaded 100%", r.stderr)
        with open(os.path.join(self.fake, "installed"), "rb") as f:
            self.assertEqual(f.read(), bundle)
        os.remove(os.path.join(self.fake, "installed"))
        r = self.d.cli("update", path, "--no-reboot", "--url", self.d.base, "--fingerprint", self.d.fingerprint,
                       env=self.d.env(TETHER_TOKEN=self.d.admin))
        self.assertIn("installed into slot b", r.stderr)
        with open(os.path.join(self.fake, "installed"), "rb") as f:
            self.assertEqual(f.read(), bundle)
        out = self.d.cli("update").stdout
        self.assertIn("slot a:   good, running, version lab-1", out)


class UpdateRefusedByRauc(unittest.TestCase):
    def test_rauc_s_reason_reaches_the_cli_and_nothing_reboots(self):
        fake = tempfile.mkdtemp(prefix="tether-appliance-")
        d = HttpsDaemon(config_text=fake_appliance(
            fake, "echo 'LastError: Failed to check bundle: signature verification failed: unable to get local issuer certificate'; exit 1"))
        try:
            path = os.path.join(fake, "stranger.raucb")
            with open(path, "wb") as f:
                f.write(b"z" * 5000)
            r = d.cli("update", path, check=False)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("not installed: Failed to check bundle: signature verification failed", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(d.run_dir, "reboot")))
        finally:
            d.stop()
            shutil.rmtree(fake, ignore_errors=True)


class UpdateOffTheAppliance(unittest.TestCase):
    def test_a_laptop_daemon_says_updates_are_unavailable(self):
        d = HttpsDaemon()
        try:
            code, _, body = d.request("GET", "/api/update", token=d.admin)
            self.assertEqual(code, 200, body)
            self.assertFalse(body["available"])
            self.assertIn("IMAGE_ID", body["problem"])
            code, _, body = d.request("POST", "/api/update", body=b"x" * 10, token=d.admin)
            self.assertEqual((code, body["error"]["code"]), (501, "UPDATE_UNAVAILABLE"), body)
            r = d.cli("update")
            self.assertIn("updates: unavailable", r.stdout)
        finally:
            d.stop()


if __name__ == "__main__":
    unittest.main()
