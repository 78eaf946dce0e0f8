#!/usr/bin/env python3
"""zrt against Open MPI on one host, side by side: reduce-scatter, all-gather and all-reduce at
N ranks (2 and 4 by default), zrt-bench under zrt-run and mpi_bench (bench/peers/mpi_bench.c)
under mpirun in two configurations: Open MPI's defaults (ob1 over vader shared memory on one
host), and its temporaries recycled through the heap (GLIBC_TUNABLES with mmap_max=0 and a huge
trim threshold, so MPI's large internal buffers are not mapped and unmapped per call).

The runs are interleaved, round after round (zrt, MPI defaults, MPI heap, then the next N, then
the next round), and every figure is the median over rounds, so a machine that others load
slows all three alike; the ratios are what count. Printed per op x N x size: zrt's busbw over the
best MPI configuration's, out of place and in place (> 1: zrt is faster), then the 8-byte
all-reduce latency of each.

Binding is alike on both sides: mpirun binds each rank to a core by default when the ranks fit
the cores (np <= 2) and not at all when oversubscribed, so zrt-run gets --bind under the same
rule (--zrt-bind on|off overrides). Unbound, two ranks' threads share one core in about half of
the runs here, and a 4 KiB call then takes ~10 us instead of ~1.3 us (mpirun --report-bindings
shows MPI's). With --bind-all both sides bind at every N, oversubscribed too: zrt-run --bind
deals the ranks round robin over the cores, mpirun gets --map-by core:OVERSUBSCRIBE --bind-to
core:overload-allowed (the same placement); unbound, 4 ranks on 2 cores are bimodal on both
sides from run to run, by which ranks the scheduler puts together.

With --registered, zrt-bench's buffers come from zrt_mem_alloc (its -R 1, as nccl-tests' -R
registers buffers): peers on the host read an all-gather's input through a mapping instead of a
kernel copy. Open MPI's buffers stay ordinary memory.

  bench/peers/compare.py --build build            # zrt-run, zrt-bench, mpi_bench from there
  bench/peers/compare.py --build build --ranks 2 --rounds 5 -b 4K -e 4M
  bench/peers/compare.py --build build --registered
  bench/peers/compare.py --build build --bind-all
"""
import argparse
import os
import statistics
import subprocess
import sys

OPS = ["reduce_scatter", "all_gather", "all_reduce"]
HEAP = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184"
CONFIGS = ["zrt", "mpi-default", "mpi-heap"]
SMALL_CALLS_UP_TO = 1 << 20


def parse_table(text):
    """nccl-tests' table (zrt-bench's and mpi_bench's) -> {(op, size): (oop_us, inplace_us)}."""
    rows = {}
    op = None
    for line in text.splitlines():
        if line.startswith("# Collective:"):
            op = line.split(":", 1)[1].strip()
            continue
        fields = line.split()
        if op is None or not fields or line.startswith("#") or not fields[0].isdigit():
            continue
        # size count type redop root | time algbw busbw wrong | time algbw busbw wrong
        rows[(op, int(fields[0]))] = (float(fields[5]), float(fields[9]))
    return rows


def run(argv, env=None, timeout=900):
    full_env = dict(os.environ)
    full_env.update(env or {})
    result = subprocess.run(argv, env=full_env, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        sys.exit(f"compare.py: {' '.join(argv)} exited with {result.returncode}:\n"
                 f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return result.stdout


def zrt_binds(args, n):
    if args.bind_all:
        return True
    if args.zrt_bind == "auto":
        return n <= (os.cpu_count() or 1)
    return args.zrt_bind == "on"


def command(config, args, n, sweep):
    if config == "zrt":
        bind = ["--bind"] if zrt_binds(args, n) else []
        # As release builds run (the order checker is on by default in debug builds: a
        # fingerprint exchange before each collective, bench/multihost/compare.py).
        registered = ["-R", "1"] if args.registered else []
        return [args.zrt_run, "-n", str(n), "--no-prefix"] + bind + [
            args.zrt_bench, "-c", "0", "--no-progress"] + registered + sweep, {
                "ZRT_CHECK": os.environ.get("ZRT_CHECK", "0")}
    mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", str(n)]
    if args.bind_all:
        mpirun += ["--map-by", "core:OVERSUBSCRIBE", "--bind-to", "core:overload-allowed"]
    env = {}
    if config == "mpi-heap":
        mpirun += ["-x", "GLIBC_TUNABLES"]
        env = {"GLIBC_TUNABLES": HEAP}
    return mpirun + [args.mpi_bench] + sweep, env


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


def sweeps(args):
    """(first size, last size, calls, sizes kept) per sweep. Sizes up to SMALL_CALLS_UP_TO run
    --small-iters calls, the larger -n: 20 calls of a 256 KiB all-gather are ~300 us, and one
    preemption in them moved that cell by 0.87-1.17x between rounds, where 200 calls gave the
    same ratio every round. Each sweep starts one size below what it keeps and leaves that one
    untimed (a sweep's first size pays the run's start whatever its warm-up calls)."""
    first, last, factor = parse_size(args.b), parse_size(args.e), int(args.f)
    grid = [first]
    while grid[-1] * factor <= last:
        grid.append(grid[-1] * factor)
    small = [size for size in grid if size <= SMALL_CALLS_UP_TO]
    large = [size for size in grid if size > SMALL_CALLS_UP_TO]
    out = []
    for group, calls in ((small, args.small_iters), (large, args.n)):
        if not group:
            continue
        at = grid.index(group[0])
        start = grid[at - 1] if at > 0 else max(1, group[0] // factor)
        out.append((start, group[-1], calls, set(group)))
    return out


def busbw_factor(op, n):
    return 2.0 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build", help="meson build folder (default: build)")
    parser.add_argument("--zrt-run", help="default: BUILD/tools/zrt-run/zrt-run")
    parser.add_argument("--zrt-bench", help="default: BUILD/tools/zrt-bench/zrt-bench")
    parser.add_argument("--mpi-bench", help="default: BUILD/bench/peers/mpi_bench")
    parser.add_argument("--ranks", default="2,4", help="rank counts, comma-separated (2,4)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3; at least 3)")
    parser.add_argument("-b", default="4K", help="smallest size (4K)")
    parser.add_argument("-e", default="4M", help="largest size (4M)")
    parser.add_argument("-f", default="2", help="size factor (2)")
    parser.add_argument("-n", default="20", help="timed calls per point above 1 MiB (20)")
    parser.add_argument("--small-iters", default="200",
                        help="timed calls per point up to 1 MiB (200)")
    parser.add_argument("-w", default="5", help="warm-up calls per point (5)")
    parser.add_argument("--latency-iters", default="20000",
                        help="calls of the 8-byte all-reduce (20000: ~6 ms a run; 200 calls "
                        "were 60 us, within one scheduler tick)")
    parser.add_argument("--zrt-bind", choices=["auto", "on", "off"], default="auto",
                        help="zrt-run --bind: auto (when N <= cores, as mpirun binds), on, off")
    parser.add_argument("--bind-all", action="store_true",
                        help="bind every rank to a core on both sides, also when N > cores "
                        "(round robin, as zrt-run --bind deals them)")
    parser.add_argument("--registered", action="store_true",
                        help="zrt-bench -R 1: zrt's buffers from zrt_mem_alloc")
    args = parser.parse_args()
    args.zrt_run = args.zrt_run or os.path.join(args.build, "tools/zrt-run/zrt-run")
    args.zrt_bench = args.zrt_bench or os.path.join(args.build, "tools/zrt-bench/zrt-bench")
    args.mpi_bench = args.mpi_bench or os.path.join(args.build, "bench/peers/mpi_bench")
    if args.rounds < 3:
        parser.error("--rounds: at least 3 (the figures are medians over rounds)")
    for path in (args.zrt_run, args.zrt_bench, args.mpi_bench):
        if not os.access(path, os.X_OK):
            parser.error(f"{path} is not an executable (build first, or give its path)")
    ranks = [int(r) for r in args.ranks.split(",")]
    plan = sweeps(args)
    latency = ["-b", "8", "-e", "8", "-n", args.latency_iters, "-w", "20", "all_reduce"]

    # samples[(config, n)][(op, size)] = [(oop, inplace), ...] one per round
    samples = {}
    lat = {}
    for r in range(args.rounds):
        for n in ranks:
            for config in CONFIGS:
                print(f"# round {r + 1}/{args.rounds}: {config}, {n} ranks", file=sys.stderr,
                      flush=True)
                for first, last, calls, keep in plan:
                    sweep = ["-b", str(first), "-e", str(last), "-f", args.f, "-n", str(calls),
                             "-w", args.w] + OPS
                    argv, env = command(config, args, n, sweep)
                    for key, value in parse_table(run(argv, env)).items():
                        if key[1] in keep:
                            samples.setdefault((config, n), {}).setdefault(key, []).append(value)
                argv, env = command(config, args, n, latency)
                for key, value in parse_table(run(argv, env)).items():
                    lat.setdefault((config, n), []).append(value[0])

    def median(config, n, key, place):
        return statistics.median(v[place] for v in samples[(config, n)][key])

    print(f"# zrt / best Open MPI configuration, busbw ratio (> 1: zrt faster); medians of "
          f"{args.rounds} interleaved rounds; MPI busbw in GB/s, best of defaults (d) and "
          f"heap-recycled (h)")
    bound = [str(n) for n in ranks if zrt_binds(args, n)]
    if args.bind_all:
        print("# both sides bound at every N (--bind-all: ranks dealt round robin over the "
              "cores)")
    else:
        print(f"# zrt-run --bind at N = {', '.join(bound) if bound else 'none'} (mpirun binds "
              f"to cores when the ranks fit them)")
    if args.registered:
        print("# zrt's buffers from zrt_mem_alloc (zrt-bench -R 1); Open MPI's ordinary memory")
    print("| op | N | size | zrt busbw | MPI busbw | out of place | zrt busbw in place | "
          "MPI in place | in place |")
    print("|---|---|---|---|---|---|---|---|---|")
    for op in OPS:
        for n in ranks:
            sizes = sorted(size for (o, size) in samples[("zrt", n)] if o == op)
            for size in sizes:
                cells = []
                for place in (0, 1):
                    zrt_us = median("zrt", n, (op, size), place)
                    mpi = {c: median(c, n, (op, size), place) for c in CONFIGS[1:]}
                    best = min(mpi, key=mpi.get)
                    bw = lambda us: size / (us * 1e3) * busbw_factor(op, n)
                    cells += [f"{bw(zrt_us):.2f}", f"{bw(mpi[best]):.2f} ({best[4]})",
                              f"**{mpi[best] / zrt_us:.2f}x**"]
                print(f"| {op} | {n} | {format_size(size)} | " + " | ".join(cells) + " |")
    print()
    print("# the same ratios as a matrix: out of place / in place")
    columns = [(op, n) for op in OPS for n in ranks]
    print("| size | " + " | ".join(f"{op} N={n}" for op, n in columns) + " |")
    print("|---|" + "---|" * len(columns))
    for size in sorted({size for (o, size) in samples[("zrt", ranks[0])]}):
        cells = []
        for op, n in columns:
            key = (op, size)
            if key not in samples[("zrt", n)]:
                cells.append("-")
                continue
            ratios = [min(median(c, n, key, p) for c in CONFIGS[1:]) / median("zrt", n, key, p)
                      for p in (0, 1)]
            cells.append(f"{ratios[0]:.2f} / {ratios[1]:.2f}")
        print(f"| {format_size(size)} | " + " | ".join(cells) + " |")
    print()
    print("# 8-byte all-reduce latency, us (median of rounds); ratio = best MPI / zrt "
          "(> 1: zrt faster)")
    print("| N | zrt | MPI defaults | MPI heap | ratio |")
    print("|---|---|---|---|---|")
    for n in ranks:
        z, d, h = (statistics.median(lat[(c, n)]) for c in CONFIGS)
        print(f"| {n} | {z:.2f} | {d:.2f} | {h:.2f} | **{min(d, h) / z:.2f}x** |")


def format_size(size):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


if __name__ == "__main__":
    main()
