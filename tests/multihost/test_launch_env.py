"""Launching by environment across simulated hosts (issue 17, items 2-3): jobs without
ZRT_JOB_TOKEN never mix (overlapping, or a straggler of a job whose rank 0 has gone meeting the
next job on the port), a master name that is loopback on rank 0's host (Debian's 127.0.1.1)
works, a loopback MASTER_ADDR on a remote rank says so, and static torchrun's variables work
beside torch's own TCPStore on MASTER_PORT."""
import os
import random
import subprocess
import time
import unittest

import simhosts

HELPER = os.environ.get("ZRT_RUN_HELPER", "")
MINIMAL = os.environ.get("C_API_MINIMAL", "")
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, with torch (tests/python uses it too)


def port():
    return random.randrange(20000, 28000, 2)


def finish(process, timeout=90):
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
        raise AssertionError(f"ran past {timeout} s:\n{out}")
    return process.returncode, out


def wait_for_links(hosts):
    """UCX lists only the interfaces that are running; right after `netns.sh up` a veth may not
    be yet, and UCX then finds no path to the other host. Bounded: 10 s per host."""
    probe = ("import time\nfor _ in range(200):\n"
             " if open('/sys/class/net/eth0/operstate').read().strip() == 'up': break\n"
             " time.sleep(0.05)\n")
    for index in range(hosts.count):
        hosts.run(index, ["/usr/bin/python3", "-c", probe], timeout=30)


def rank_env(rank, world, master, master_port, **extra):
    env = {"RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": master,
           "MASTER_PORT": str(master_port), "HELPER_TIMEOUT_MS": "8000", "ZRT_TIMEOUT": "8"}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def start(hosts, host, argv, env):
    return hosts.popen(host, argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)


def on_one_host(ranks):
    """A shell line that runs several ranks on one simulated host (one exec, so they share its
    IPC and PID namespaces as processes of one machine do) and fails if any fails."""
    lines = []
    for i, (env, argv) in enumerate(ranks):
        assignments = " ".join(f"{k}={v}" for k, v in env.items())
        lines.append(f"env {assignments} {' '.join(argv)} 2>&1 | sed 's/^/[r{i}] /' & p{i}=$!")
    waits = " ".join(f"wait $p{i} || code=1;" for i in range(len(ranks)))
    return ["/bin/bash", "-o", "pipefail", "-c", "\n".join(lines) + f"\ncode=0; {waits} exit $code"]


class LaunchEnvTest(unittest.TestCase):
    def two_jobs(self, hosts, identity):
        """Jobs 1 and 2, one rank on each host, started at once on one port; `identity(job)`
        adds the launcher's variables. Returns {job: [(code, output)] by rank}."""
        master_port = port()
        started = [(job, start(hosts, rank, [HELPER, "job"],
                               rank_env(rank, 2, hosts.hostname(0), master_port, JOB_MARK=job,
                                        ZRT_LOG="warn", **identity(job))))
                   for rank in range(2) for job in (1, 2)]
        outcomes = {1: [], 2: []}
        for job, process in started:
            outcomes[job].append(finish(process))
        return outcomes

    def test_two_jobs_on_one_port_with_the_launchers_job_ids_never_mix(self):
        ids = {"slurm": lambda job: {"SLURM_JOB_ID": 700 + job, "SLURM_STEP_ID": 0},
               "torchrun": lambda job: {"TORCHELASTIC_RUN_ID": f"run-{job}"},
               "openmpi": lambda job: {"PMIX_NAMESPACE": 1514012600 + job}}
        with simhosts.SimulatedHosts(2) as hosts:
            for launcher, identity in ids.items():
                outcomes = self.two_jobs(hosts, identity)
                text = launcher + ":\n" + "\n".join(
                    out for runs in outcomes.values() for _, out in runs)
                self.assertNotIn("MIXED", text)
                for job, runs in outcomes.items():
                    if all(code == 0 for code, _ in runs):
                        self.assertEqual(sum(out.count("job ok") for _, out in runs), 2, text)
                    else:
                        self.assertTrue(any(
                            "belongs to another job" in out
                            or "cannot serve the bootstrap store" in out
                            for code, out in runs if code != 0), text)

    def test_two_overlapping_jobs_without_any_identity_both_fail_saying_why(self):
        """No identity at all: job 1's rank 0 serves; job 2's rank 0 finds the port taken and
        claims rank 0 there; then both rank 1s come. Neither job forms a communicator."""
        with simhosts.SimulatedHosts(2) as hosts:
            master_port = port()
            master = hosts.hostname(0)
            first = start(hosts, 0, [HELPER, "job"],
                          rank_env(0, 2, master, master_port, JOB_MARK=1, ZRT_LOG="info"))
            for line in first.stdout:
                if "rank 0 serves the store" in line:
                    break
            code, out = finish(start(hosts, 0, [HELPER, "job"],
                                     rank_env(0, 2, master, master_port, JOB_MARK=2)))
            self.assertNotEqual(code, 0, out)
            self.assertIn("rank 0 cannot serve the bootstrap store", out)
            seconds = [start(hosts, 1, [HELPER, "job"],
                             rank_env(1, 2, master, master_port, JOB_MARK=job))
                       for job in (1, 2)]
            results = [finish(first)] + [finish(p) for p in seconds]
            text = "\n".join(out for _, out in results)
            self.assertNotIn("job ok", text)
            self.assertNotIn("MIXED", text)
            for code, out in results:
                self.assertNotEqual(code, 0, text)
            # Job 1's rank 0 and the rank 1 that joined it learn why; the other rank 1 finds the
            # store gone, or is refused its claim.
            self.assertIn("two jobs share this store's port", results[0][1])
            self.assertEqual(sum("two jobs share this store's port" in out
                                 for _, out in results[1:]) +
                             sum("cannot connect to the store" in out
                                 for _, out in results[1:]), 2, text)

    def job_rank(self, hosts, host, rank, world, master, master_port, job, **extra):
        return start(hosts, host, [HELPER, "job"],
                     rank_env(rank, world, master, master_port, JOB_MARK=job, **extra))

    def leave_rank_0(self, hosts, master, master_port, world):
        """Job 1's rank 0 waits alone, gives up after its timeout and exits: its store is gone
        from the port before the next job comes."""
        code, out = finish(self.job_rank(hosts, 0, 0, world, master, master_port, 1,
                                         HELPER_TIMEOUT_MS=1500, ZRT_TIMEOUT=2))
        self.assertNotEqual(code, 0, out)
        self.assertIn("timed out", out)

    def serving(self, hosts, master, master_port, world):
        """Job 2's rank 0, once it serves the store; returns it and the lines read so far."""
        process = self.job_rank(hosts, 0, 0, world, master, master_port, 2, ZRT_LOG="info")
        lines = []
        for line in process.stdout:
            lines.append(line)
            if "rank 0 serves the store" in line:
                return process, "".join(lines)
        raise AssertionError("job 2's rank 0 never served the store:\n" + "".join(lines))

    def check_both_jobs_refused(self, refused, others, head):
        """`refused` is the second claimant of rank 1; `others` end with job 2's rank 0, whose
        output began with `head`."""
        results = [finish(refused)] + [finish(p) for p in others]
        results[-1] = (results[-1][0], head + results[-1][1])
        text = "\n".join(out for _, out in results)
        self.assertNotIn("job ok", text)
        self.assertNotIn("MIXED", text)
        for code, out in results:
            self.assertNotEqual(code, 0, text)
            self.assertIn("rank 1 of 3 joined the store more than once", out, text)
            self.assertIn("two jobs share this store's port", out, text)
        self.assertIn("store refused rank 1 of 3", results[0][1], text)
        self.assertIn("store: refused rank 1 of 3 from", results[-1][1], text)  # the store's log

    def meet_on_one_port(self, straggler_first):
        """No identity. Job 1's rank 0 gave up and left; job 2 (3 ranks) serves the same port;
        job 1's straggling rank 1 and job 2's own rank 1 arrive, in either order. Which rank 1
        is the real one cannot be told, so the store refuses the second and then everyone:
        nobody forms a communicator, nobody waits for the timeout."""
        with simhosts.SimulatedHosts(2) as hosts:
            master_port = port()
            master = hosts.hostname(0)
            self.leave_rank_0(hosts, master, master_port, 3)
            rank0, head = self.serving(hosts, master, master_port, 3)
            jobs = (1, 2) if straggler_first else (2, 1)
            first = self.job_rank(hosts, 1, 1, 3, master, master_port, jobs[0])
            time.sleep(2)  # the first rank 1's hello (its claim) takes milliseconds
            started = time.monotonic()
            second = self.job_rank(hosts, 1, 1, 3, master, master_port, jobs[1])
            self.check_both_jobs_refused(second, [first, rank0], head)
            self.assertLess(time.monotonic() - started, 6)  # before HELPER_TIMEOUT_MS (8 s)

    def test_a_straggler_after_the_next_jobs_own_rank_fails_both_jobs_saying_why(self):
        self.meet_on_one_port(straggler_first=False)

    def test_a_straggler_before_the_next_jobs_own_rank_fails_both_jobs_saying_why(self):
        """The straggler takes the number first; job 2's rank 1 is refused, and so is everyone
        after it, so the straggler never trains with job 2."""
        self.meet_on_one_port(straggler_first=True)

    def test_a_straggler_of_another_world_size_is_refused_and_the_next_job_goes_on(self):
        with simhosts.SimulatedHosts(2) as hosts:
            master_port = port()
            master = hosts.hostname(0)
            self.leave_rank_0(hosts, master, master_port, 2)
            rank0, head = self.serving(hosts, master, master_port, 3)
            code, out = finish(self.job_rank(hosts, 1, 1, 2, master, master_port, 1))
            self.assertNotEqual(code, 0, out)
            self.assertIn("store refused rank 1 of 2: this store's job has 3 ranks, this "
                          "rank's has 2", out)
            self.assertNotIn("job ok", out)
            rest = [self.job_rank(hosts, 1, rank, 3, master, master_port, 2) for rank in (1, 2)]
            results = [finish(p) for p in rest] + [finish(rank0)]
            for rank, (code, out) in zip((1, 2, 0), results):
                self.assertEqual(code, 0, out)
                self.assertIn(f"job ok rank {rank}/3", out)
            self.assertIn("store: refused rank 1 of 2 from", head + results[-1][1])

    def test_a_master_name_that_is_loopback_on_rank_0s_host_works(self):
        with simhosts.SimulatedHosts(2) as hosts:
            master_port = port()
            # On host 0 its own name is 127.0.1.1 (/etc/hosts): rank 0 listens everywhere.
            started = [start(hosts, rank, [HELPER, "job"],
                             rank_env(rank, 2, hosts.hostname(0), master_port))
                       for rank in range(2)]
            for rank, process in enumerate(started):
                code, out = finish(process)
                self.assertEqual(code, 0, out)
                self.assertIn(f"job ok rank {rank}/2 local 0/1", out)

    def test_a_loopback_master_addr_on_a_remote_rank_says_so(self):
        with simhosts.SimulatedHosts(2) as hosts:
            master_port = port()
            started = [start(hosts, rank, [HELPER, "job"],
                             rank_env(rank, 2, "127.0.0.1", master_port,
                                      HELPER_TIMEOUT_MS=3000))
                       for rank in range(2)]
            (code0, out0), (code1, out1) = [finish(p) for p in started]
            self.assertNotEqual(code1, 0, out1)
            self.assertIn("'127.0.0.1' resolves to loopback (127.0.0.1) on this host, so this "
                          "rank knocks on its own host", out1)
            self.assertNotEqual(code0, 0, out0)
            self.assertIn("rank 1 of 2", out0)

    def static_torchrun(self, run_id):
        with simhosts.SimulatedHosts(2) as hosts:
            wait_for_links(hosts)
            master_port = port()
            master = hosts.hostname(0)
            # torchrun's agent on node 0: its TCPStore on MASTER_PORT, as with --master_port.
            agent = start(hosts, 0, [SYSTEM_PYTHON, "-c",
                                     "import time, torch.distributed as d\n"
                                     f"s = d.TCPStore('0.0.0.0', {master_port}, 1, True, "
                                     "wait_for_workers=False)\n"
                                     "print('agent up', flush=True)\ntime.sleep(120)\n"],
                          env={})
            self.assertEqual(agent.stdout.readline().strip(), "agent up")
            nodes = []
            for node in range(2):
                ranks = []
                for local in range(2):
                    rank = node * 2 + local
                    env = rank_env(rank, 4, master, master_port, LOCAL_RANK=local,
                                   LOCAL_WORLD_SIZE=2, GROUP_RANK=node, GROUP_WORLD_SIZE=2,
                                   TORCHELASTIC_RUN_ID=run_id, TORCHELASTIC_RESTART_COUNT=0,
                                   TORCHELASTIC_USE_AGENT_STORE="True")
                    ranks.append((env, [MINIMAL]))
                nodes.append(start(hosts, node, on_one_host(ranks), env={}))
            for node, process in enumerate(nodes):
                code, out = finish(process)
                self.assertEqual(code, 0, out)
                for local in range(2):
                    self.assertIn(f"[r{local}] rank {node * 2 + local}/4: model state", out)
            agent.kill()

    def test_static_torchrun_with_a_run_id(self):
        self.static_torchrun("static-job-1")

    def test_static_torchrun_with_its_default_run_id_none(self):
        self.static_torchrun("none")


if __name__ == "__main__":
    simhosts.skip_unless_possible()
    unittest.main()
