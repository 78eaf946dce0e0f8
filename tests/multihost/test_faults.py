"""Faults across simulated hosts (2 hosts x 2 ranks, launched by environment and by zrt-run on
two nodes): a rank killed on the other host mid-collective, and the other host's link taken
down mid-collective; and on one host, a rank killed in the middle of a large transfer with the
windows off (UCX's cma path). Every survivor's call returns an error (never an abort) within
the timeout, naming the dead rank, or the silent ranks and their host.

Usage: test_faults.py LIBZRT   (ZRT_RUN_EXE in the environment for the zrt-run case)"""
import os
import re
import subprocess
import sys
import threading
import time
import unittest

import simhosts

LIBZRT = None
ZRT_RUN = os.environ.get("ZRT_RUN_EXE", "")
RANK_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fault_rank.py")
TIMEOUT_S = 3
# A dead peer's own error (its connections closed) comes within milliseconds; the margin is for
# a loaded machine's scheduling, far below the timeout a missed death would take.
DEATH_MARGIN_S = 1.0
# The bound for a link going down: the call returns within ZRT_TIMEOUT + 0.5 s.
LINK_MARGIN_S = 0.5


def host_script(first_rank, ranks):
    """One exec starts every rank of a host (they share its IPC and PID namespaces) and reports
    their exit codes in rank order."""
    lines = [f'RANK={first_rank + i} LOCAL_RANK={i} "$@" & p{i}=$!' for i in range(ranks)]
    waits = [f"wait $p{i}; r{i}=$?" for i in range(ranks)]
    codes = " ".join(f"$r{i}" for i in range(ranks))
    return "\n".join(lines + waits + [f'echo "EXIT {codes}" >&2'])


def rank_env(master, port, world, local, name, extra=None):
    env = {"WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(local), "MASTER_ADDR": master,
           "MASTER_PORT": str(port), "ZRT_JOB_TOKEN": f"faults-{name}-{port}",
           "ZRT_TIMEOUT": str(TIMEOUT_S), "ZRT_LOG": "warn", "ZRT_LIBRARY": LIBZRT,
           "PYTHONUNBUFFERED": "1"}
    env.update(extra or {})
    return env


class Ranks:
    """Every host's ranks (one exec per host), their output lines stamped with the monotonic
    time they arrived and the host they came from."""

    def __init__(self, hosts, port, per_host=2, extra=None):
        self.lines = []
        self.lock = threading.Lock()
        self.processes = []
        world = per_host * hosts.count
        for host in range(hosts.count):
            env = rank_env(hosts.addr(0), port, world, per_host, hosts.name, extra)
            process = hosts.popen(host, ["/bin/sh", "-c", host_script(per_host * host, per_host),
                                         "sh", sys.executable, RANK_SCRIPT], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            self.processes.append(process)
            threading.Thread(target=self._read, args=(host, process), daemon=True).start()

    def _read(self, host, process):
        for line in process.stdout:
            with self.lock:
                self.lines.append((time.monotonic(), host, line.rstrip()))

    def wait_for(self, predicate, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if predicate([line for _, _, line in self.lines]):
                    return True
            time.sleep(0.05)
        return False

    def finish(self, timeout=120):
        for process in self.processes:
            process.wait(timeout=timeout)
        time.sleep(0.2)  # the readers drain the last lines
        with self.lock:
            return list(self.lines)


PREFIX = re.compile(r"^\[(\d+)\] ")  # zrt-run's "[rank] " before each line


def records(lines, kind):
    """The `kind` lines ("RETURNED", "KILLED"): (host, monotonic seconds, rest of the line)."""
    out = []
    for _, host, line in lines:
        line = PREFIX.sub("", line)
        if line.startswith(kind + " "):
            _, stamp, rest = (line.split(" ", 2) + [""])[:3]
            out.append((host, float(stamp), rest))
    return out


def returned(lines):
    """RETURNED lines: (host, monotonic seconds, status, message)."""
    out = []
    for host, stamp, rest in records(lines, "RETURNED"):
        status, message = (rest.split(" ", 1) + [""])[:2]
        out.append((host, stamp, int(status), message))
    return out


def exit_codes(lines):
    return [line.split()[1:] for _, _, line in lines if line.startswith("EXIT ")]


class FaultTest(unittest.TestCase):
    def assert_survivors_name(self, lines, dead, survivors, text):
        """Every survivor returned an error naming rank `dead`, soon after it was killed."""
        killed = records(lines, "KILLED")
        self.assertEqual(len(killed), 1, text)
        results = returned(lines)
        self.assertEqual(len(results), survivors, text)
        for _, stamp, status, message in results:
            self.assertNotEqual(status, 0, text)
            self.assertIn(f"rank {dead}", message, text)
            print(f"returned {stamp - killed[0][1]:+.3f} s after rank {dead} was killed: "
                  f"{message[:160]}", file=sys.stderr)
            self.assertLess(stamp - killed[0][1], TIMEOUT_S + DEATH_MARGIN_S, text)
        self.assertEqual(text.count("DESTROYED"), survivors, text)

    def test_rank_killed_on_the_other_host(self):
        with simhosts.SimulatedHosts(2) as hosts:
            ranks = Ranks(hosts, 29641, extra={"FAULT_KILL_RANK": "3", "FAULT_KILL_AT": "6"})
            lines = ranks.finish()
            text = "\n".join(line for _, _, line in lines)
            # Ranks 0, 1 on host 0 and rank 2 on host 1 each return an error naming rank 3; none
            # aborts (the host scripts report the exit codes).
            self.assert_survivors_name(lines, 3, 3, text)
            self.assertEqual(sorted(exit_codes(lines)), [["0", "0"], ["0", "137"]], text)

    def test_link_down(self):
        with simhosts.SimulatedHosts(2) as hosts:
            ranks = Ranks(hosts, 29643)
            started = ranks.wait_for(lambda ls: sum(l == "ITER 4" for l in ls) == 4, 120)
            self.assertTrue(started, "the ranks did not start:\n" +
                            "\n".join(line for _, _, line in ranks.lines))
            down = time.monotonic()
            hosts.link(1, up=False)
            lines = ranks.finish()
            text = "\n".join(line for _, _, line in lines)
            results = returned(lines)
            self.assertEqual(len(results), 4, text)
            for host, stamp, status, message in results:
                print(f"host {host}: returned {stamp - down:+.3f} s after the link went down: "
                      f"{message[:300]}", file=sys.stderr)
                self.assertNotEqual(status, 0, text)
                # Measured at the call's return (the destroy comes after).
                self.assertLess(stamp - down, TIMEOUT_S + LINK_MARGIN_S, text)
                # The ranks whose traffic stopped are the other host's, named with their host,
                # not this host's neighbour that waits like this rank.
                a, b = 2 * (1 - host), 2 * (1 - host) + 1
                self.assertRegex(message, rf"no traffic from (ranks {a}, {b}|rank {a}|rank {b}) "
                                 rf"\(host {re.escape(hosts.hostname(1 - host))}\)", text)
            self.assertEqual(text.count("DESTROYED"), 4, text)
            self.assertEqual(sorted(exit_codes(lines)), [["0", "0"], ["0", "0"]], text)

    def test_rank_killed_on_the_other_node_under_zrt_run(self):
        if not ZRT_RUN:
            self.skipTest("ZRT_RUN_EXE is not set (zrt-run is not built: no CLI11)")
        with simhosts.SimulatedHosts(2) as hosts:
            master_port = 29645  # zrt-run's store: 29646
            env = rank_env(hosts.addr(0), master_port, 4, 2, hosts.name,
                           {"FAULT_KILL_RANK": "3", "FAULT_KILL_AT": "6"})
            for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                         "ZRT_JOB_TOKEN"):
                del env[name]  # zrt-run's to set
            nodes = [hosts.popen(node, [ZRT_RUN, "--nnodes", 2, "--node-rank", node,
                                        "--master-addr", hosts.hostname(0), "--master-port",
                                        master_port, "-n", 2, "--rdzv-id", f"faults-{hosts.name}",
                                        "--join-timeout", 30, "--grace-ms", 8000,
                                        sys.executable, RANK_SCRIPT],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)
                     for node in range(2)]
            outputs = []
            for node, process in enumerate(nodes):
                out, _ = process.communicate(timeout=120)
                outputs.append((process.returncode, out))
            lines = [(0.0, node, line) for node, (_, out) in enumerate(outputs)
                     for line in out.splitlines()]
            text = "\n".join(f"node {node} (exit {code}):\n{out}"
                             for node, (code, out) in enumerate(outputs))
            self.assert_survivors_name(lines, 3, 3, text)
            # Every zrt-run exits non-zero naming the node and the rank; no rank aborted.
            failure = f"node 1 ({hosts.hostname(1)}): rank 3 killed by signal 9"
            for code, out in outputs:
                self.assertNotEqual(code, 0, text)
                self.assertIn(failure, out, text)
                self.assertNotIn("signal 6", out, text)
                self.assertNotIn("exited with code", out, text)

    def test_same_host_kill_in_a_large_transfer_without_windows(self):
        """One host, 4 ranks, ZRT_WINDOWS=0: 64 MiB all-reduces move through UCX's shared memory
        and cma (process_vm_readv); rank 1 is killed at three points of a transfer. A transport
        that treats the dead peer's ESRCH as fatal aborts a neighbour (exit 134)."""
        with simhosts.SimulatedHosts(1) as hosts:
            for attempt, delay_ms in enumerate((5, 40, 120)):
                ranks = Ranks(hosts, 29651 + 2 * attempt, per_host=4,
                              extra={"ZRT_WINDOWS": "0", "FAULT_COUNT": str(16 << 20),
                                     "FAULT_KILL_RANK": "1", "FAULT_KILL_AT": "1",
                                     "FAULT_KILL_MS": str(delay_ms)})
                lines = ranks.finish()
                text = f"kill {delay_ms} ms into the call:\n" + "\n".join(
                    line for _, _, line in lines)
                self.assert_survivors_name(lines, 1, 3, text)
                self.assertEqual(exit_codes(lines), [["0", "137", "0", "0"]], text)


if __name__ == "__main__":
    simhosts.skip_unless_possible()
    LIBZRT = sys.argv.pop(1)
    unittest.main()
