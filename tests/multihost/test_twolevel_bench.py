"""zrt-bench correctness across simulated hosts: reduce-scatter, all-gather and all-reduce give
the reference results (zrt-bench -c 1 counts wrong elements) with the two-level collectives and
with the flat ring, at sizes that make odd counts, uneven all-reduce blocks and several pipeline
chunks; the topology decides the path (2 hosts x 2 ranks: two-level; 3 x 1 and 3 + 1: flat, with
the log line saying why).

Usage: test_twolevel_bench.py ZRT_BENCH"""
import json
import subprocess
import sys
import unittest

import simhosts

ZRT_BENCH = None
PORT = 29611

# f32 sums and maxima, f64 averages, i32 sums; the sizes (bytes of the full buffer) give
# all-reduce counts that do not divide by 4 ranks and reduce-scatter/all-gather counts that are
# odd, from one element per rank up to several 512 KiB pipeline chunks per block.
SWEEPS = [["-b", "4", "-e", "700000", "-f", "11"], ["-b", "4800020", "-e", "4800020"]]
RUNS = [["-d", "float", "-o", "sum,max"], ["-d", "double", "-o", "avg"], ["-d", "int32"]]


def host_script(first_rank, count):
    """A shell script that starts `count` ranks from first_rank on, in one host's namespaces (one
    `netns.sh exec` each makes fresh IPC and PID namespaces, so ranks of one host must share
    one to reach each other through shared memory), and exits with the first failure's code.
    Only the first rank's stdout stays stdout (rank 0's JSON report); the others' goes to
    stderr."""
    lines = ["rc=0"]
    for local in range(count):
        redirect = "" if local == 0 else " >&2"
        lines.append(f'RANK={first_rank + local} LOCAL_RANK={local} "$@"{redirect} & p{local}=$!')
    lines += [f"wait $p{local} || rc=$?" for local in range(count)] + ["exit $rc"]
    return "\n".join(lines)


def launch(hosts, layout, extra_env, args):
    """Starts zrt-bench with layout[i] ranks on host i (consecutive ranks), by environment, and
    returns (exit codes, rank 0's JSON report, everything the ranks wrote)."""
    world = sum(layout)
    processes = []
    first = 0
    for host, count in enumerate(layout):
        env = {"WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(count),
               "MASTER_ADDR": hosts.addr(0), "MASTER_PORT": str(PORT),
               "ZRT_JOB_TOKEN": f"twolevel-{hosts.name}", "ZRT_LOG": "info", "ZRT_TIMEOUT": "60"}
        env.update(extra_env)
        argv = [ZRT_BENCH, "-n", "2", "-w", "1", "-c", "1", "--no-progress"] + args
        if host == 0:
            argv += ["--json", "-"]
        processes.append(hosts.popen(host, ["/bin/sh", "-c", host_script(first, count), "sh"] +
                                     argv, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True))
        first += count
    codes, logs, report = [], [], None
    for index, process in enumerate(processes):
        out, err = process.communicate(timeout=300)
        codes.append(process.returncode)
        logs.append(f"--- host {index} exit {process.returncode}\n{out if index else ''}{err}")
        if index == 0 and process.returncode == 0:
            report = json.loads(out)
    return codes, report, "\n".join(logs)


class TwoLevelBenchTest(unittest.TestCase):
    def check(self, layout, hierarchy, expect_log):
        with simhosts.SimulatedHosts(len(layout)) as hosts:
            for sweep, run in [(sweep, run) for sweep in SWEEPS for run in RUNS]:
                args = sweep + run + ["reduce_scatter", "all_gather", "all_reduce"]
                codes, report, logs = launch(hosts, layout, {"ZRT_HIERARCHY": hierarchy}, args)
                self.assertEqual(codes, [0] * len(layout), logs)
                self.assertEqual(report["wrong"], 0, logs)
                self.assertEqual(report["topology"]["hosts"], len(layout), logs)
                collectives = {row["collective"] for row in report["rows"]}
                self.assertEqual(collectives, {"reduce_scatter", "all_gather", "all_reduce"})
                self.assertGreaterEqual(len(report["rows"]), 12 if len(sweep) > 4 else 3)
                if expect_log:
                    self.assertIn(expect_log, logs)
                else:
                    self.assertNotIn("two-level reduce-scatter", logs)

    def test_two_hosts_of_two_two_level(self):
        self.check([2, 2], "auto", "2 hosts of 2 ranks: two-level")

    def test_two_hosts_of_two_flat(self):
        self.check([2, 2], "flat", None)

    def test_three_hosts_of_one(self):
        self.check([1, 1, 1], "two-level", "one rank on each of 3 hosts: flat collectives")

    def test_uneven_hosts_fall_back_to_flat(self):
        self.check([3, 1], "auto", "ZRT_HIERARCHY=auto: flat collectives, since 4 ranks do not "
                   "split into hosts of 3")


if __name__ == "__main__":
    ZRT_BENCH = sys.argv.pop(1)
    simhosts.skip_unless_possible()
    unittest.main()
