#!/usr/bin/env python3
"""Where a collective's time goes across simulated hosts: runs zrt-bench on 2 hosts (root,
scripts/netns.sh) of --local ranks for each configuration given, one after the other in the
same minutes, and samples host 0's link (eth0's byte counters, every --every ms) and the
machine's CPUs (/proc/stat) while it runs.

  bench/multihost/link_profile.py --size 64M -n 20 reduce_scatter \\
      two-level=build/tools/zrt-bench/zrt-bench \\
      tagged=build/tools/zrt-bench/zrt-bench:ZRT_WINDOWS=0 \\
      flat=build/tools/zrt-bench/zrt-bench:ZRT_HIERARCHY=flat

Per configuration: zrt-bench's time per call, what the link carried each way while traffic
flowed (first to last busy sample), the share of samples in that span in which the link carried
less than a tenth of its busiest sample each way (the link idled), and how the CPUs spent that
span (user, system, softirq, idle; 100 % = every core).
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NETNS = os.path.join(ROOT, "scripts", "netns.sh")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import host_script  # noqa: E402  (one host's ranks from one exec)

SAMPLER = r"""
import sys, time
every = float(sys.argv[1]) / 1000
while True:
    with open("/proc/net/dev") as f:
        for line in f:
            if line.strip().startswith("eth0:"):
                v = line.split(":", 1)[1].split()
                print(f"{time.monotonic():.6f} {v[0]} {v[8]}", flush=True)
    time.sleep(every)
"""


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def cpu_times():
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq = fields[:7]
    return {"user": user + nice, "system": system + irq, "softirq": softirq,
            "idle": idle + iowait}


class CpuSampler(threading.Thread):
    def __init__(self, every):
        super().__init__(daemon=True)
        self.every, self.samples, self.stop = every, [], False

    def run(self):
        while not self.stop:
            self.samples.append((time.monotonic(), cpu_times()))
            time.sleep(self.every)


def run_config(args, label, binary, env_extra, port):
    sampler = subprocess.Popen([NETNS, "exec", args.name, "0", "python3", "-c", SAMPLER,
                                str(args.every)], stdout=subprocess.PIPE, text=True)
    cpu = CpuSampler(args.every / 1000)
    cpu.start()
    time.sleep(0.3)
    processes = []
    for host in range(2):
        env = dict(os.environ)
        env.update({"WORLD_SIZE": str(2 * args.local), "LOCAL_WORLD_SIZE": str(args.local),
                    "MASTER_ADDR": "10.213.0.1", "MASTER_PORT": str(port),
                    "ZRT_JOB_TOKEN": f"{args.name}-{label}"})
        env.update(env_extra)
        argv = [binary, "-b", args.size, "-e", args.size, "-n", args.iters, "-w", args.warmup,
                "-c", 0, "-a", 1, "--no-progress"] + args.collectives
        if host == 0:
            argv += ["--json", "-"]
        processes.append(subprocess.Popen(
            [NETNS, "exec", args.name, str(host), "/bin/sh", "-c",
             host_script(host * args.local, args.local), "sh"] + [str(a) for a in argv],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [p.communicate(timeout=900) for p in processes]
    time.sleep(0.2)
    sampler.kill()
    link_out, _ = sampler.communicate()
    cpu.stop = True
    cpu.join()
    for p, (out, err) in zip(processes, outputs):
        if p.returncode != 0:
            sys.exit(f"{label}: zrt-bench failed with {p.returncode}:\n{out}\n{err}")
    report = json.loads(outputs[0][0])
    times = {row["collective"]: row["out_of_place"]["time_us"] for row in report["rows"]}
    return times, summarize(link_out, cpu.samples)


def summarize(link_out, cpu_samples):
    rows = [tuple(float(x) for x in line.split()) for line in link_out.splitlines() if line]
    rates = []  # (t, rx B/s, tx B/s) per interval
    for (t0, r0, s0), (t1, r1, s1) in zip(rows, rows[1:]):
        if t1 > t0:
            rates.append((t1, (r1 - r0) / (t1 - t0), (s1 - s0) / (t1 - t0)))
    if not rates:
        return None
    peak_rx = max(r for _, r, _ in rates)
    peak_tx = max(s for _, _, s in rates)
    busy = [i for i, (_, r, s) in enumerate(rates) if r > 0.1 * peak_rx or s > 0.1 * peak_tx]
    span = rates[busy[0]:busy[-1] + 1]
    begin, end = span[0][0], span[-1][0]
    seconds = sum(t1 - t0 for (t0, _, _), (t1, _, _) in zip(span, span[1:])) or 1e-9
    rx = sum(r * (t1 - t0) for (t0, _, _), (t1, r, _) in zip(span, span[1:])) / seconds
    tx = sum(s * (t1 - t0) for (t0, _, _), (t1, _, s) in zip(span, span[1:])) / seconds
    idle_rx = sum(1 for _, r, _ in span if r < 0.1 * peak_rx) / len(span)
    idle_tx = sum(1 for _, _, s in span if s < 0.1 * peak_tx) / len(span)
    inside = [c for t, c in cpu_samples if begin <= t <= end]
    cpu = {}
    if len(inside) >= 2:
        delta = {k: inside[-1][k] - inside[0][k] for k in inside[0]}
        total = sum(delta.values()) or 1
        cpu = {k: 100.0 * v / total for k, v in delta.items()}
    return {"rx": rx, "tx": tx, "peak_rx": peak_rx, "peak_tx": peak_tx, "idle_rx": idle_rx,
            "idle_tx": idle_tx, "seconds": end - begin, "cpu": cpu}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", nargs="+",
                        help="collectives (reduce_scatter, all_gather, all_reduce), then "
                        "LABEL=ZRT_BENCH[:VAR=VALUE,...] per configuration")
    parser.add_argument("--size", default="64M")
    parser.add_argument("--local", type=int, default=2, help="ranks per host (default 2)")
    parser.add_argument("-n", "--iters", type=int, default=20)
    parser.add_argument("-w", "--warmup", type=int, default=3)
    parser.add_argument("--every", type=float, default=5.0, help="sampling period, ms")
    parser.add_argument("--rounds", type=int, default=1, help="rounds over the configurations")
    parser.add_argument("--name", default=f"lp{os.getpid() % 100000}")
    args = parser.parse_args()
    args.size = parse_size(args.size)
    args.collectives = [c for c in args.configs if "=" not in c]
    configs = []
    for spec in (c for c in args.configs if "=" in c):
        label, rest = spec.split("=", 1)
        binary, _, env_text = rest.partition(":")
        env = dict(kv.split("=", 1) for kv in env_text.split(",") if kv)
        configs.append((label, os.path.abspath(binary), env))
    if len(args.collectives) != 1:
        sys.exit("one collective a run, so that the link samples are that collective's")
    subprocess.run([NETNS, "up", args.name, "2"], check=True)
    try:
        port = 29721
        print(f"# {args.collectives[0]} {args.size} bytes, 2 hosts x {args.local}, "
              f"load {os.getloadavg()[0]:.2f}")
        print(f"{'config':<12}{'us/call':>10}{'rx MB/s':>9}{'tx MB/s':>9}{'idle rx':>8}"
              f"{'idle tx':>8}{'user%':>7}{'sys%':>6}{'sirq%':>6}{'idle%':>6}")
        for _ in range(args.rounds):
            for label, binary, env in configs:
                port += 1
                times, link = run_config(args, label, binary, env, port)
                cpu = link["cpu"] if link else {}
                print(f"{label:<12}{times[args.collectives[0]]:>10.0f}"
                      f"{link['rx'] / 1e6:>9.0f}{link['tx'] / 1e6:>9.0f}"
                      f"{100 * link['idle_rx']:>7.0f}%{100 * link['idle_tx']:>7.0f}%"
                      f"{cpu.get('user', 0):>7.0f}{cpu.get('system', 0):>6.0f}"
                      f"{cpu.get('softirq', 0):>6.0f}{cpu.get('idle', 0):>6.0f}", flush=True)
    finally:
        subprocess.run([NETNS, "down", args.name], check=False)


if __name__ == "__main__":
    main()
