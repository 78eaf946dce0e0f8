"""zrt-run across simulated hosts (issue 17, items 1-3): one zrt-run per host, torchrun's
options; global ranks, refusals on both sides, a node that never comes, a failure on one node
bringing every node down. Each host's /etc/hosts maps its own name to 127.0.1.1 (Debian), and
--master-addr is host 0's name, so node 0's own view of it is loopback."""
import os
import random
import subprocess
import unittest

import simhosts

ZRT_RUN = os.environ.get("ZRT_RUN_EXE", "")
HELPER = os.environ.get("ZRT_RUN_HELPER", "")
MINIMAL = os.environ.get("C_API_MINIMAL", "")


def port():
    # Below the ephemeral range, away from torchrun's 29500; each test its own pair.
    return random.randrange(20000, 28000, 2)


def wait_for_links(hosts):
    """UCX lists only the interfaces that are running; right after `netns.sh up` a veth may not
    be yet, and UCX then finds no path to the other host. Bounded: 10 s per host."""
    probe = ("import time\nfor _ in range(200):\n"
             " if open('/sys/class/net/eth0/operstate').read().strip() == 'up': break\n"
             " time.sleep(0.05)\n")
    for index in range(hosts.count):
        hosts.run(index, ["/usr/bin/python3", "-c", probe], timeout=30)


class Nodes:
    """One zrt-run per simulated host, all started at once."""

    def __init__(self, hosts, master_port):
        self.hosts = hosts
        self.master_port = master_port

    def start(self, node, nnodes, nproc, argv, extra=(), env=None, job="job-a"):
        identity = ["--rdzv-id", job] if job else []
        command = [ZRT_RUN, "--nnodes", nnodes, "--node-rank", node, "--master-addr",
                   self.hosts.hostname(0), "--master-port", self.master_port, "-n", nproc,
                   *identity, *extra, *argv]
        return self.hosts.popen(node, command, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)

    @staticmethod
    def finish(process, timeout=90):
        try:
            out, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            out, _ = process.communicate()
            raise AssertionError(f"zrt-run ran past {timeout} s:\n{out}")
        return process.returncode, out


class LaunchNodesTest(unittest.TestCase):
    def test_two_nodes_of_two_ranks_run_a_zrt_program_with_global_ranks(self):
        with simhosts.SimulatedHosts(2) as hosts:
            wait_for_links(hosts)
            nodes = Nodes(hosts, port())
            started = [nodes.start(i, 2, 2, [MINIMAL], ["--join-timeout", "30"])
                       for i in range(2)]
            results = [nodes.finish(p) for p in started]
            for node, (code, out) in enumerate(results):
                self.assertEqual(code, 0, out)
                for local in range(2):
                    rank = node * 2 + local
                    self.assertIn(f"[{rank}] rank {rank}/4: model state", out)
            env = [nodes.start(i, 2, 2, [HELPER, "env"]) for i in range(2)]
            results = [nodes.finish(p) for p in env]
            for node, (code, out) in enumerate(results):
                self.assertEqual(code, 0, out)
                for local in range(2):
                    rank = node * 2 + local
                    self.assertIn(f"[{rank}] RANK={rank} WORLD_SIZE=4 LOCAL_RANK={local} "
                                  f"LOCAL_WORLD_SIZE=2 MASTER_ADDR={hosts.hostname(0)}", out)
                    self.assertIn(f"[{rank}] GROUP_RANK={node} NODE_RANK={node} "
                                  f"GROUP_WORLD_SIZE=2 ", out)
                self.assertIn(f"MASTER_PORT={nodes.master_port} ", out)
                self.assertIn(f"ZRT_STORE_PORT={nodes.master_port + 1}", out)

    def test_a_node_with_another_world_is_refused_on_both_sides(self):
        with simhosts.SimulatedHosts(2) as hosts:
            nodes = Nodes(hosts, port())
            first = nodes.start(0, 2, 2, [HELPER, "job"], ["--join-timeout", "30"])
            second = nodes.start(1, 2, 3, [HELPER, "job"], ["--join-timeout", "30"])
            (code0, out0), (code1, out1) = nodes.finish(first), nodes.finish(second)
            why = (f"node 1 ({hosts.hostname(1)}) was refused: node 0 runs a job of 4 ranks "
                   "(--nnodes 2 --nproc-per-node 2), this node was started with --nnodes 2 "
                   "--nproc-per-node 3 (6 ranks)")
            self.assertNotEqual(code1, 0, out1)
            self.assertIn(why, out1)
            self.assertNotEqual(code0, 0, out0)
            self.assertIn(why, out0)
            self.assertNotIn("job ok", out0 + out1)

    def test_a_node_of_another_job_is_refused_on_both_sides(self):
        with simhosts.SimulatedHosts(2) as hosts:
            nodes = Nodes(hosts, port())
            first = nodes.start(0, 2, 1, [HELPER, "job"], ["--join-timeout", "5"], job="job-a")
            second = nodes.start(1, 2, 1, [HELPER, "job"], ["--join-timeout", "5"], job="job-b")
            (code0, out0), (code1, out1) = nodes.finish(first), nodes.finish(second)
            self.assertNotEqual(code1, 0, out1)
            self.assertIn("store refused the client: it belongs to another job", out1)
            self.assertIn("this node's job identity: --rdzv-id job-b", out1)
            self.assertNotEqual(code0, 0, out0)
            self.assertIn(f"store: refused a client from {hosts.addr(1)}:", out0)
            self.assertIn("node 1 of 2 did not join", out0)

    def test_a_node_that_never_arrives_is_named(self):
        with simhosts.SimulatedHosts(2) as hosts:
            nodes = Nodes(hosts, port())
            code, out = nodes.finish(nodes.start(0, 3, 1, [HELPER, "job"],
                                                 ["--join-timeout", "3"]))
            self.assertNotEqual(code, 0, out)
            self.assertIn("nodes 1, 2 of 3 did not join within --join-timeout 3 s", out)

    def test_a_rank_failing_on_node_1_brings_node_0_down(self):
        with simhosts.SimulatedHosts(2) as hosts:
            nodes = Nodes(hosts, port())
            started = [nodes.start(i, 2, 2, [HELPER, "fail", "3", "7"],
                                   ["--join-timeout", "30", "--grace-ms", "1000"])
                       for i in range(2)]
            (code0, out0), (code1, out1) = [nodes.finish(p) for p in started]
            failure = f"node 1 ({hosts.hostname(1)}): rank 3 exited with code 7"
            self.assertEqual(code1, 7, out1)
            self.assertIn(failure, out1)
            self.assertNotEqual(code0, 0, out0)
            self.assertIn(failure + "; terminating ranks 0, 1", out0)
            self.assertNotIn("survived", out0 + out1)

    def test_two_zrt_run_jobs_on_one_port_never_mix(self):
        with simhosts.SimulatedHosts(2) as hosts:
            for attempt in range(3):
                nodes = Nodes(hosts, port())
                started = [(job, nodes.start(node, 2, 1, [HELPER, "job"],
                                             ["--join-timeout", "10"],
                                             env={"JOB_MARK": str(job)}, job=f"job-{job}"))
                           for node in range(2) for job in (1, 2)]
                outcomes = {1: [], 2: []}
                for job, process in started:
                    outcomes[job].append(nodes.finish(process))
                text = "\n".join(out for runs in outcomes.values() for _, out in runs)
                self.assertNotIn("MIXED", text)
                for job, runs in outcomes.items():
                    if all(code == 0 for code, _ in runs):
                        self.assertEqual(sum(out.count("job ok") for _, out in runs), 2, text)
                    else:
                        failed = [out for code, out in runs if code != 0]
                        self.assertTrue(any(
                            "belongs to another job" in out
                            or "cannot serve the job's store" in out for out in failed), text)

    def test_several_nodes_without_a_job_identity_are_refused(self):
        with simhosts.SimulatedHosts(1) as hosts:
            nodes = Nodes(hosts, port())
            code, out = nodes.finish(nodes.start(0, 2, 1, [HELPER, "job"], job=None))
            self.assertNotEqual(code, 0, out)
            self.assertIn("several nodes need the job's identity", out)
            self.assertIn("--rdzv-id", out)


if __name__ == "__main__":
    simhosts.skip_unless_possible()
    unittest.main()
