#!/usr/bin/env python3
"""zrt's collectives across simulated hosts next to what UCX and Open MPI do there, in the
same minutes: 2 hosts (scripts/netns.sh, root) of --local ranks each.

  bench/multihost/compare.py --zrt-bench build/tools/zrt-bench/zrt-bench [-n 5] [-w 2]

Per size (the whole buffer, 64 KiB .. 64 MiB, x4) and collective it prints zrt-bench's time with
ZRT_HIERARCHY=two-level and =flat, Open MPI ob1's over tcp (mpi_colls.c, mpirun through
netns_agent.sh), and:
  - zrt/ob1: ob1's time over zrt's (above 1: zrt is faster), ob1's the faster of its default
    and of yielding while it waits (OB1_CONFIGS), per cell;
  - zrt/UCX: the cross-host bytes zrt must move per direction ((H-1)/H of the buffer for
    reduce-scatter and all-gather, twice that for all-reduce) per second, over what
    ucx_perftest tag_bw moves per direction while both directions run at once, with as many
    streams each way as the two-level collectives use (--local: one per local rank) and
    messages of one rank's block: each stream's median per-second figure while all of them
    run (ucx_perftest's own reports, so start-up skew between the streams counts for nothing;
    every stream runs for at least five reports), summed per direction, the smaller direction,
    median of --ucx-rounds rounds (each printed).
Times are per call, the mean over ranks (zrt-bench -a 1) or the slowest rank's mean (ob1).
zrt runs with ZRT_CHECK=0 unless the environment sets it: the collective-order checker, on by
default in the debug builds the project's build/ holds (off in release builds), exchanges a
fingerprint with every peer before each collective's data (collectives/order_check.h), one more
message per peer and a latency that Open MPI does not pay: at 16 B across hosts it took 98 us a
call against 71 without.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NETNS = os.path.join(ROOT, "scripts", "netns.sh")
AGENT = os.path.join(ROOT, "bench", "multihost", "netns_agent.sh")
SIZES = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
COLLS = ["reduce_scatter", "all_gather", "all_reduce"]


def sweeps(args):
    """(first size, last size kept, calls) per sweep. Each starts one size below the sizes it
    keeps and leaves that one untimed: a sweep's first size pays the run's start whatever its
    warm-up calls (8 threads settling on 2 cores; zrt's 64 KiB reduce-scatter read 128 us first
    in its sweep and 90 us after a 16 KiB size, medians of 8 alternated rounds of each, and Open
    MPI's moved as much). Calls up to 1 MiB are bimodal here (which ranks share a core: 80-90 or
    130-170 us for the same 64 KiB call), so they run --small-iters times, the larger -n."""
    return [(SIZES[0] // 4, 1 << 20, args.small_iters), (1 << 20, SIZES[-1], args.iters)]


def kept(times, first, last):
    return {key: us for key, us in times.items() if first < key[1] <= last}


def netns(*args, **kwargs):
    return subprocess.run([NETNS] + [str(a) for a in args], check=True, **kwargs)


def on_host(name, host, argv, env=None, **kwargs):
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.Popen([NETNS, "exec", name, str(host)] + [str(a) for a in argv], env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def host_script(first_rank, count):
    """Starts `count` ranks in one host's namespaces (each `netns.sh exec` makes fresh IPC and
    PID namespaces: ranks of one host must share them to use shared memory); only the first
    rank's stdout stays stdout; exits with the first failure's code."""
    lines = ["rc=0"]
    for local in range(count):
        redirect = "" if local == 0 else " >&2"
        lines.append(f'RANK={first_rank + local} LOCAL_RANK={local} "$@"{redirect} & p{local}=$!')
    lines += [f"wait $p{local} || rc=$?" for local in range(count)] + ["exit $rc"]
    return "\n".join(lines)


def zrt_times(args, name, local, hierarchy, port):
    """{(collective, bytes): time_us} from zrt-bench's sweeps on 2 hosts x local ranks."""
    times = {}
    for index, (first, last, calls) in enumerate(sweeps(args)):
        times.update(kept(zrt_sweep(args, name, local, hierarchy, port + 100 * index, first,
                                    last, calls), first, last))
    return times


def zrt_sweep(args, name, local, hierarchy, port, first, last, calls):
    processes = []
    for host in range(2):
        env = {"WORLD_SIZE": 2 * local, "LOCAL_WORLD_SIZE": local, "MASTER_ADDR": "10.213.0.1",
               "MASTER_PORT": port, "ZRT_JOB_TOKEN": f"{name}-{hierarchy}",
               "ZRT_HIERARCHY": hierarchy, "ZRT_CHECK": os.environ.get("ZRT_CHECK", "0")}
        argv = [args.zrt_bench, "-b", first, "-e", last, "-f", 4, "-n", calls,
                "-w", args.warmup, "-c", 0, "-a", 1, "--no-progress"] + COLLS
        if host == 0:
            argv += ["--json", "-"]
        processes.append(on_host(name, host, ["/bin/sh", "-c", host_script(host * local, local),
                                              "sh"] + argv, {k: str(v) for k, v in env.items()}))
    outputs = [p.communicate(timeout=1800) for p in processes]
    for p, (out, err) in zip(processes, outputs):
        if p.returncode != 0:
            sys.exit(f"zrt-bench ({hierarchy}) failed with {p.returncode}:\n{out}\n{err}")
    report = json.loads(outputs[0][0])
    return {(row["collective"], row["size"]): row["out_of_place"]["time_us"]
            for row in report["rows"]}


# Open MPI's configurations; the table takes the faster per cell. Its ranks spin while they
# wait unless told to yield: with more ranks than cores (2 x 2 ranks on this machine's 2) the
# spinning ranks take the cores from the ones with work, and a 64 KiB all-gather took 4.8-6.6 ms
# instead of 94 us. mpirun declares each host's slots as --host gives them, so it does not see
# the oversubscription and yields only when told.
OB1_CONFIGS = {"ob1": [], "ob1 yield": ["--mca", "mpi_yield_when_idle", "1"]}


def ob1_best(args, name, local, binary):
    """{(collective, bytes): time_us}, the faster of OB1_CONFIGS per cell, and every config's."""
    every = {label: ob1_times(args, name, local, binary, extra)
             for label, extra in OB1_CONFIGS.items()}
    best = {key: min(times[key] for times in every.values()) for key in every["ob1"]}
    return best, every


def ob1_times(args, name, local, binary, extra):
    times = {}
    for first, last, calls in sweeps(args):
        times.update(kept(ob1_sweep(args, name, local, binary, extra, first, last, calls),
                          first, last))
    return times


def ob1_sweep(args, name, local, binary, extra, first, last, calls):
    hosts = f"{name}-h0:{local},{name}-h1:{local}"
    argv = ["mpirun", "--allow-run-as-root", "--host", hosts, "-np", 2 * local] + extra + [
            "--mca", "plm_rsh_agent", AGENT, "--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
            "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0",
            binary, first, last, calls, args.warmup]
    process = on_host(name, 0, argv)
    out, err = process.communicate(timeout=1800)
    if process.returncode != 0:
        sys.exit(f"mpirun failed with {process.returncode}:\n{out}\n{err}")
    times = {}
    for line in out.splitlines():
        coll, size, us = line.split()
        times[(coll, int(size))] = float(us)
    return times


def perftest_intervals(out):
    """The per-second bandwidths (bytes/s) ucx_perftest -v reported while it ran (its
    "[thread 0]" lines; MB = 2^20 bytes), and its overall figure from the final line."""
    intervals, overall = [], None
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("[thread"):
            fields = line.split("]", 1)[1].strip().split(",")
            intervals.append(float(fields[4]) * (1 << 20))
        elif line[:1].isdigit():
            overall = float(line.split(",")[5]) * (1 << 20)
    return intervals, overall


# Per-second reports a stream must give for a round to count: its first (which ucx_perftest
# inflates: it covers the start, 0.8 GB/s against a steady 0.29 here) and last are dropped, and
# the median of at least three others is the stream's figure.
MIN_REPORTS = 5


def ucx_round(name, streams, message, iters, port_base):
    """One round of `streams` tag_bw pairs each way at once, `iters` messages each: per
    direction, the sum over its streams of each stream's median per-second bandwidth, over the
    seconds when every stream of both directions was running (the first and last report of each
    are dropped: start-up skew and the tail, when the other streams may be done). Returns
    (the smaller direction, both), or None when a stream gave fewer than MIN_REPORTS reports."""
    env = {"UCX_TLS": "tcp,self"}
    common = ["-t", "tag_bw", "-s", message, "-n", iters, "-w", 5, "-v"]
    servers, clients = [], []
    for direction in range(2):
        for stream in range(streams):
            port = port_base + direction * 100 + stream
            servers.append(on_host(name, direction, ["ucx_perftest", "-p", port] + common, env))
    time.sleep(1.0)
    for direction in range(2):
        for stream in range(streams):
            port = port_base + direction * 100 + stream
            address = f"10.213.0.{direction + 1}"
            clients.append(on_host(name, 1 - direction,
                                   ["ucx_perftest", address, "-p", port] + common, env))
    per_direction = [0.0, 0.0]
    short = False
    for index, client in enumerate(clients):
        out, err = client.communicate(timeout=600)
        if client.returncode != 0:
            sys.exit(f"ucx_perftest failed with {client.returncode}:\n{out}\n{err}")
        intervals, _ = perftest_intervals(out)
        if len(intervals) < MIN_REPORTS:
            short = True
            continue
        per_direction[index // streams] += statistics.median(intervals[1:-1])
    for server in servers:
        server.communicate(timeout=60)
    return None if short else (min(per_direction), per_direction)


def ucx_both_ways(name, streams, message, rounds, seconds):
    """Bytes per second one direction carries while `streams` tag_bw pairs run each way at once
    (the median over `rounds` rounds of the smaller direction), and every round's figures. Each
    round runs long enough for MIN_REPORTS reports per stream: the message count starts at
    `seconds` worth at 1 GB/s per direction and grows 4x until a round gives them. (A run too
    short for steady reports once let one inflated first report stand for a stream: 1.59 GB/s
    per direction where the steady rate was 0.58.)"""
    iters = max(20, int(seconds * 1e9 / streams / message))
    results = []
    port = 13400
    while len(results) < rounds:
        port += 2 * streams
        result = ucx_round(name, streams, message, iters, port)
        if result is None:
            iters *= 4
            continue
        results.append(result)
    return statistics.median(r[0] for r in results), [r[1] for r in results]


def rounded(times):
    return {f"{coll}@{size}": round(t) for (coll, size), t in sorted(times.items())}


def medians(rounds):
    """Per cell, the median over rounds (dicts with the same keys)."""
    return {key: statistics.median(times[key] for times in rounds) for key in rounds[0]}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--zrt-bench", required=True)
    parser.add_argument("--local", type=int, default=2, help="ranks per host (default 2)")
    parser.add_argument("-n", "--iters", type=int, default=20,
                        help="calls per size above 1 MiB (default 20)")
    parser.add_argument("--small-iters", type=int, default=200,
                        help="calls per size up to 1 MiB (default 200)")
    parser.add_argument("-w", "--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of zrt two-level, zrt flat and ob1, alternated; each cell is "
                             "the median over rounds (default 3)")
    parser.add_argument("--ucx-rounds", type=int, default=3,
                        help="rounds of the UCX reference per size (median; default 3)")
    parser.add_argument("--ucx-seconds", type=float, default=3.0,
                        help="about how long each UCX round runs (default 3)")
    parser.add_argument("--name", default=f"mb{os.getpid() % 100000}")
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build", "bench-multihost"),
                        help="where mpi_colls is built (visible on every simulated host)")
    args = parser.parse_args()
    args.zrt_bench = os.path.abspath(args.zrt_bench)
    check = subprocess.run([NETNS, "check"], capture_output=True, text=True)
    if check.returncode != 0:
        sys.exit(check.stdout.strip() or check.stderr.strip())
    os.makedirs(args.build_dir, exist_ok=True)
    binary = os.path.join(args.build_dir, "mpi_colls")
    subprocess.run(["mpicc", "-O2", "-o", binary,
                    os.path.join(ROOT, "bench", "multihost", "mpi_colls.c")], check=True)
    local, hosts = args.local, 2
    netns("up", args.name, hosts)
    try:
        started = time.time()
        # Round after round, in alternating order, so that a machine others load (and this
        # one's own drift) slows all alike; small calls here are bimodal (which ranks share a
        # core), so one round decides little.
        runs = {"two-level": [], "flat": [], "ob1": []}
        for round_index in range(args.rounds):
            order = list(runs) if round_index % 2 == 0 else list(runs)[::-1]
            for label in order:
                if label == "ob1":
                    best, every = ob1_best(args, args.name, local, binary)
                    runs[label].append(best)
                    for config, times in every.items():
                        print(f"# round {round_index} {config} {rounded(times)}", flush=True)
                else:
                    port = 29701 + 2 * round_index + (label == "flat")
                    runs[label].append(zrt_times(args, args.name, local, label, port))
                    print(f"# round {round_index} zrt {label} {rounded(runs[label][-1])}",
                          flush=True)
        two_level, flat, ob1 = (medians(runs[label]) for label in ("two-level", "flat", "ob1"))
        ucx = {}
        for size in SIZES:
            block = size // (hosts * local)
            ucx[size], rounds = ucx_both_ways(args.name, local, block, args.ucx_rounds,
                                              args.ucx_seconds)
            print(f"# UCX {size}: per direction, each round (GB/s): " +
                  " ".join(f"{a / 1e9:.3f}/{b / 1e9:.3f}" for a, b in rounds), flush=True)
        print(f"# 2 hosts x {local} ranks, tcp over veth; measured in {time.time() - started:.0f} s;"
              f" times in us per call, medians of {args.rounds} rounds of {args.small_iters}"
              f" calls up to 1 MiB, {args.iters} above;"
              f" UCX = tag_bw, {local} streams each way at once, steady state, median of"
              f" {args.ucx_rounds} rounds; load {os.getloadavg()[0]:.2f}")
        print(f"{'collective':<15}{'bytes':>10}{'two-level':>11}{'flat':>11}{'ob1':>11}"
              f"{'UCX GB/s':>10}{'2L/UCX':>8}{'flat/UCX':>9}{'2L/ob1':>8}{'flat/ob1':>9}")
        for coll in COLLS:
            for size in SIZES:
                wire = size * (hosts - 1) / hosts * (2 if coll == "all_reduce" else 1)
                t2, tf, tm = two_level[(coll, size)], flat[(coll, size)], ob1[(coll, size)]
                print(f"{coll:<15}{size:>10}{t2:>11.0f}{tf:>11.0f}{tm:>11.0f}"
                      f"{ucx[size] / 1e9:>10.3f}{wire / (t2 * 1e-6) / ucx[size]:>8.2f}"
                      f"{wire / (tf * 1e-6) / ucx[size]:>9.2f}{tm / t2:>8.2f}{tm / tf:>9.2f}")
    finally:
        netns("down", args.name)


if __name__ == "__main__":
    main()
