#!/usr/bin/python3
"""torch 1.13's CPU AdamW beside zrt's fused AdamW, interleaved in the same minutes.

For each size (elements of one f32 parameter) and thread count, in rounds: run
bench_optimizers' BM_Memcpy and BM_AdamW rows for that size and thread count (a subprocess,
JSON output), then time torch.optim.AdamW on a tensor of that size with torch's threads set to
the same count, both its single-tensor (foreach=False) and foreach paths, and also the faster of
the two followed by the bf16 copy a mixed-precision framework makes (p16.copy_(p), which zrt's
step includes). Each figure is the best of the rounds. Prints parameters per second, zrt's rate
against one estimated from the memcpy rate (30 bytes per element; an estimate, not a bound), and
zrt / torch (the faster torch path, with and without the copy).

Usage (Debian's python has torch):
  /usr/bin/python3 bench/torch_adamw.py --bench build/bench/bench_optimizers \\
      [--sizes 1M,16M,128M] [--threads 1,all] [--rounds 2] [--min-time 0.3]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch


def parse_size(text):
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1].upper() in scale:
        return int(text[:-1]) * scale[text[-1].upper()]
    return int(text)


def zrt_rates(bench, n, threads, min_time):
    """(AdamW params/s, copy GB/s) from one bench_optimizers run."""
    pattern = f"^BM_(Memcpy/{threads}|AdamW/{n}/{threads})/"
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([bench, f"--benchmark_filter={pattern}",
                        f"--benchmark_min_time={min_time}", f"--benchmark_out={out.name}",
                        "--benchmark_out_format=json"],
                       check=True, stdout=subprocess.DEVNULL)
        rows = json.load(open(out.name))["benchmarks"]
    adamw = next(r for r in rows if r["name"].startswith("BM_AdamW"))
    copy = next(r for r in rows if r["name"].startswith("BM_Memcpy"))
    return adamw["params_per_s"], copy["moved_GBps"]


def torch_rate(n, threads, foreach, with_copy, min_time):
    """Parameters per second of torch's AdamW step (and the bf16 copy) on one tensor of n."""
    torch.set_num_threads(threads)
    p = torch.nn.Parameter(torch.full((n,), 0.5))
    p.grad = torch.full((n,), 0.01)
    p16 = torch.empty(n, dtype=torch.bfloat16)
    opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, foreach=foreach)

    def step():
        opt.step()
        if with_copy:
            p16.copy_(p.detach())

    for _ in range(2):  # state allocation and first touch
        step()
    steps = 0
    start = time.perf_counter()
    while True:
        step()
        steps += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time and steps >= 3:
            break
    del opt, p, p16
    return n * steps / elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", default="build/bench/bench_optimizers")
    parser.add_argument("--sizes", default="1M,16M,128M")
    parser.add_argument("--threads", default="1,all")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--min-time", type=float, default=0.3)
    args = parser.parse_args()
    cpus = len(os.sched_getaffinity(0))
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    thread_counts = sorted({cpus if t == "all" else int(t) for t in args.threads.split(",")})
    best = {}
    for _ in range(args.rounds):
        for n in sizes:
            for t in thread_counts:
                zrt, copy = zrt_rates(args.bench, n, t, args.min_time)
                single = torch_rate(n, t, False, False, args.min_time)
                foreach = torch_rate(n, t, True, False, args.min_time)
                # The bf16 copy after torch's faster path (foreach when it beats single-tensor).
                with_copy = torch_rate(n, t, foreach > single, True, args.min_time)
                row = best.setdefault((n, t), [0.0] * 5)
                for i, value in enumerate((zrt, copy, single, foreach, with_copy)):
                    row[i] = max(row[i], value)
    print(f"torch {torch.__version__}; {cpus} CPU(s) in the affinity mask; best of "
          f"{args.rounds} interleaved round(s), min time {args.min_time} s")
    # %memcpy: zrt's rate against one estimated from the memcpy rate of the same run at 30 bytes
    # per element. Above 100 % the estimate is no bound: part of the data stays in cache.
    print(f"{'elements':>10} {'thr':>3} {'zrt Mp/s':>9} {'%memcpy':>7} {'torch 1T':>9} "
          f"{'foreach':>9} {'+bf16':>9} {'zrt/torch':>9} {'zrt/(torch+bf16)':>16}")
    for (n, t), (zrt, copy, single, foreach, with_copy) in sorted(best.items()):
        estimate = copy * 1e9 / 30.0
        torch_best = max(single, foreach)
        print(f"{n:>10} {t:>3} {zrt / 1e6:>9.1f} {100 * zrt / estimate:>6.1f}% "
              f"{single / 1e6:>9.1f} {foreach / 1e6:>9.1f} {with_copy / 1e6:>9.1f} "
              f"{zrt / torch_best:>8.2f}x {zrt / with_copy:>15.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
