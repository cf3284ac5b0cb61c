"""`tether task run` as root on a laptop: the agent user's setup is checked as that user
before any task opens, every problem names the command that fixes it, and `doctor` reports
the same checks. Each test class makes its own throwaway user and group (removed after).

Standard library only; needs root (useradd, and running commands under another uid).
"""

import json
import os
import shutil
import subprocess
import tempfile
import unittest
import uuid

from test_control_socket import TETHER, Client, Daemon
from test_tasks import ok

ROOT = os.geteuid() == 0 and shutil.which("useradd") is not None


def sh(*args):
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=60)


def quiet(*args):
    subprocess.run(args, capture_output=True, text=True, timeout=60)


def unique(prefix):
    return f"{prefix}{uuid.uuid4().hex[:10]}"


@unittest.skipUnless(ROOT, "making users and running commands under them needs root")
class AgentSetupTest(unittest.TestCase):
    """A daemon whose agent user exists but is not yet in the socket's group; `task run` and
    `doctor` read the daemon's socket, agent user and group from its config file."""

    @classmethod
    def setUpClass(cls):
        cls.user = unique("tagent")
        cls.group = unique("tgrp")
        sh("groupadd", "--system", cls.group)
        try:
            sh("useradd", "--system", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", cls.user)
            cls.daemon = Daemon(config_text=f'agent_user = "{cls.user}"\nsocket_group = "{cls.group}"\n')
        except Exception:
            cls.remove_accounts()
            raise
        # The client's copy of the daemon's configuration, in a directory anyone can read.
        cls.conf_dir = tempfile.mkdtemp(prefix="tether-agentcfg-")
        os.chmod(cls.conf_dir, 0o755)
        cls.config = os.path.join(cls.conf_dir, "tether.toml")
        with open(cls.config, "w") as f:
            f.write(f'socket = "{cls.daemon.socket}"\nagent_user = "{cls.user}"\nsocket_group = "{cls.group}"\n')
        # A working directory the agent can enter.
        cls.work = tempfile.mkdtemp(prefix="tether-agentcwd-")
        os.chmod(cls.work, 0o755)

    @classmethod
    def remove_accounts(cls):
        quiet("userdel", cls.user)
        quiet("groupdel", cls.user)
        quiet("groupdel", cls.group)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()
        cls.remove_accounts()
        shutil.rmtree(cls.conf_dir, ignore_errors=True)
        shutil.rmtree(cls.work, ignore_errors=True)

    def env(self):
        env = {k: v for k, v in os.environ.items() if k not in ("TETHER_SOCKET", "TETHER_TOKEN")}
        # No default config file of this machine's may take part.
        env["XDG_CONFIG_HOME"] = self.conf_dir + "/none"
        return env

    def tether(self, *args, cwd=None):
        return subprocess.run([TETHER, *args], capture_output=True, text=True, timeout=60, env=self.env(),
                              cwd=cwd or self.work)

    def task_ids(self):
        c = Client(self.daemon.socket)
        try:
            return [t["id"] for t in ok(c, 1, "task_list", limit=50)["tasks"]]
        finally:
            c.close()

    def doctor_agent(self, *extra):
        r = self.tether("doctor", "--json", "--config", self.config, *extra)
        self.assertEqual(r.returncode, 0, r.stderr)
        report = json.loads(r.stdout)
        # The agent section sits beside the others, in the same shape as they are.
        for key in ("version", "daemon", "storage", "https", "agent"):
            self.assertIn(key, report)
        agent = report["agent"]
        self.assertEqual(set(agent), {"user", "uid", "socket", "socket_group", "ok", "checks"})
        for check in agent["checks"]:
            self.assertEqual(set(check), {"check", "state", "detail", "fix", "restart"})
            self.assertIn(check["state"], ("ok", "fail", "unchecked"))
        return agent, {c["check"]: c for c in agent["checks"]}

    def add_to_group(self):
        sh("usermod", "-aG", self.group, self.user)
        self.addCleanup(quiet, "gpasswd", "-d", self.user, self.group)

    def test_1_not_in_the_socket_group_names_usermod_and_opens_no_task(self):
        before = self.task_ids()
        r = self.tether("task", "run", "--config", self.config, "--", "true")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no task was opened", r.stderr)
        self.assertIn(f"usermod -aG {self.group} {self.user}", r.stderr)
        self.assertNotIn("restart", r.stderr, "the daemon set the socket's group: no restart is needed")
        self.assertEqual(self.task_ids(), before, "no task left behind")
        agent, checks = self.doctor_agent()
        self.assertFalse(agent["ok"])
        self.assertEqual(checks["user"]["state"], "ok")
        self.assertEqual(checks["socket"]["state"], "fail")
        self.assertEqual(checks["socket"]["fix"], f"sudo usermod -aG {self.group} {self.user}")
        self.assertFalse(checks["socket"]["restart"])
        text = self.tether("doctor", "--config", self.config)
        self.assertIn(f"fix: sudo usermod -aG {self.group} {self.user}", text.stdout)

    def test_2_in_the_group_task_run_works_without_a_restart(self):
        self.add_to_group()
        # The socket's group reaches the agent as a supplementary group: `task run` gives the
        # agent its groups, as a login would.
        r = self.tether("task", "run", "--config", self.config, "--title", "laptop", "--",
                        "sh", "-c", f'[ "$(id -un)" = {self.user} ] && [ -S "$TETHER_SOCKET" ]')
        self.assertEqual(r.returncode, 0, r.stderr)
        c = Client(self.daemon.socket)
        newest = ok(c, 1, "task_list", limit=1)["tasks"][0]
        c.close()
        self.assertEqual((newest["title"], newest["state"]), ("laptop", "completed"))
        r = self.tether("task", "run", "--config", self.config, "--", "true")
        self.assertEqual(r.returncode, 0, r.stderr)
        agent, checks = self.doctor_agent()
        self.assertTrue(agent["ok"], agent)
        self.assertEqual(agent["user"], self.user)
        self.assertEqual(checks["socket"]["state"], "ok", checks["socket"])
        self.assertIn("agent role", checks["socket"]["detail"])
        self.assertEqual(checks["binary"]["state"], "ok", checks["binary"])

    def test_3_a_missing_user_names_useradd_and_opens_no_task(self):
        missing = unique("tnouser")
        before = self.task_ids()
        r = self.tether("task", "run", "--config", self.config, "--agent-user", missing, "--", "true")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(f'agent user "{missing}" does not exist', r.stderr)
        self.assertIn(f"useradd --system --no-create-home --user-group --groups {self.group}", r.stderr)
        self.assertIn("no task was opened", r.stderr)
        self.assertEqual(self.task_ids(), before)
        cfg = os.path.join(self.conf_dir, "missing.toml")
        with open(cfg, "w") as f:
            f.write(f'socket = "{self.daemon.socket}"\nagent_user = "{missing}"\nsocket_group = "{self.group}"\n')
        r = self.tether("doctor", "--json", "--config", cfg)
        agent = json.loads(r.stdout)["agent"]
        self.assertFalse(agent["ok"])
        self.assertIsNone(agent["uid"])
        [user] = agent["checks"]
        self.assertEqual((user["check"], user["state"]), ("user", "fail"))
        self.assertTrue(user["fix"].endswith(f"--shell /usr/sbin/nologin {missing}"), user["fix"])

    def test_4_a_working_directory_closed_to_the_agent_is_named(self):
        self.add_to_group()
        closed = tempfile.mkdtemp(prefix="tether-closed-")  # 0700, root's
        self.addCleanup(shutil.rmtree, closed, True)
        before = self.task_ids()
        r = self.tether("task", "run", "--config", self.config, "--", "true", cwd=closed)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(f"cannot enter the working directory {closed}", r.stderr)
        self.assertIn("mode 0700", r.stderr)
        self.assertIn("cd /tmp", r.stderr)
        self.assertEqual(self.task_ids(), before)

    def test_5_a_command_the_agent_cannot_run_is_named(self):
        self.add_to_group()
        script = os.path.join(self.work, "private.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\nexit 0\n")
        os.chmod(script, 0o700)
        self.addCleanup(os.unlink, script)
        before = self.task_ids()
        r = self.tether("task", "run", "--config", self.config, "--", "./private.sh")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(f"cannot run {script}", r.stderr)
        self.assertIn(f"sudo chmod a+rx {script}", r.stderr)
        self.assertEqual(self.task_ids(), before)

    def test_6_another_agent_user_than_the_daemons_is_refused_before_the_task(self):
        # In the socket's group but not the daemon's agent user: the daemon would make it an
        # operator, so the command must not run as it.
        other = unique("tother")
        sh("useradd", "--system", "--no-create-home", "--user-group", "--groups", self.group, other)
        self.addCleanup(quiet, "groupdel", other)
        self.addCleanup(quiet, "userdel", other)
        before = self.task_ids()
        r = self.tether("task", "run", "--config", self.config, "--agent-user", other, "--", "true")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(f"gives {other} the role operate, not the agent role", r.stderr)
        self.assertIn(f'agent_user = \\"{other}\\"', json.dumps(r.stderr))
        self.assertEqual(self.task_ids(), before)


@unittest.skipUnless(ROOT, "making users and groups needs root")
class MissingSocketGroupTest(unittest.TestCase):
    """The socket's group did not exist when the daemon started: the socket kept root's
    group, so the fix makes the group, adds the agent and says the daemon must restart."""

    def test_the_fix_makes_the_group_and_asks_for_a_restart(self):
        user, group = unique("tagent"), unique("tgrp")
        sh("useradd", "--system", "--no-create-home", "--user-group", user)
        self.addCleanup(quiet, "groupdel", user)
        self.addCleanup(quiet, "userdel", user)
        daemon = Daemon(config_text=f'agent_user = "{user}"\nsocket_group = "{group}"\n')
        self.addCleanup(daemon.stop)
        conf = tempfile.mkdtemp(prefix="tether-agentcfg-")
        self.addCleanup(shutil.rmtree, conf, True)
        cfg = os.path.join(conf, "tether.toml")
        with open(cfg, "w") as f:
            f.write(f'socket = "{daemon.socket}"\nagent_user = "{user}"\nsocket_group = "{group}"\n')
        env = {k: v for k, v in os.environ.items() if k != "TETHER_SOCKET"}
        env["XDG_CONFIG_HOME"] = conf + "/none"
        r = subprocess.run([TETHER, "task", "run", "--config", cfg, "--", "true"], capture_output=True, text=True,
                           timeout=60, env=env, cwd="/")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(f"sudo groupadd --system {group} && sudo usermod -aG {group} {user}", r.stderr)
        self.assertIn("restart the daemon", r.stderr)
        r = subprocess.run([TETHER, "doctor", "--json", "--config", cfg], capture_output=True, text=True,
                           timeout=60, env=env)
        socket_check = [c for c in json.loads(r.stdout)["agent"]["checks"] if c["check"] == "socket"][0]
        self.assertEqual(socket_check["state"], "fail")
        self.assertTrue(socket_check["restart"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
