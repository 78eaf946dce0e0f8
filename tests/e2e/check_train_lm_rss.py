#!/usr/bin/env python3
"""End-to-end: train_lm's measured peak RSS growth matches zrt's memory total within 5 %.

Runs train_lm --check-rss at each stage on N local ranks, with a model large enough (hundreds of
MiB of zrt buffers a rank) that zrt's buffers dominate the process: train_lm itself fails when a
rank's growth from finalize on, without the peers' memory it maps, is more than 5 % off
zrt_partition_memory's total. This script requires that every rank printed that line, checks its
figures again, and that the check can fail: the default small model, whose few MiB the
communicators' staging outweighs, must be refused. Exit 77 (skip) where /proc/self/status has
no VmHWM.
"""
import argparse
import re
import subprocess
import sys

RSS = re.compile(r"rank (\d+) measured peak RSS growth ([0-9.]+) MiB - peers' memory mapped here "
                 r"([0-9.-]+) MiB = ([0-9.-]+) MiB, zrt total ([0-9.]+) MiB: ([0-9.]+)x, "
                 r"residual ([+-][0-9.]+) MiB \((ok|MISMATCH)\)")


def run(command, timeout):
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    return result.returncode, result.stdout + result.stderr


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("zrt_run")
    parser.add_argument("train_lm")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--stages", default="3,2")
    parser.add_argument("--tolerance", type=float, default=0.05, help="relative")
    parser.add_argument("--min-total-mib", type=float, default=200,
                        help="zrt's total a rank must reach for the ratio to mean anything")
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("extra", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    extra = [a for a in args.extra if a != "--"]

    with open("/proc/self/status") as status:
        if not any(line.startswith("VmHWM:") for line in status):
            print("skip: /proc/self/status has no VmHWM")
            sys.exit(77)

    for stage in [int(s) for s in args.stages.split(",")]:
        command = [args.zrt_run, "-n", str(args.ranks), args.train_lm, "--stage", str(stage),
                   "--check-rss"] + extra
        code, output = run(command, args.timeout)
        if code != 0:
            print(output)
            raise SystemExit(f"FAIL: {' '.join(command)} exited {code}")
        lines = {int(m.group(1)): m for m in RSS.finditer(output)}
        if sorted(lines) != list(range(args.ranks)):
            print(output)
            raise SystemExit(f"FAIL: stage {stage}: RSS lines from ranks {sorted(lines)}, "
                             f"expected 0..{args.ranks - 1}")
        for rank, m in sorted(lines.items()):
            own, total = float(m.group(4)), float(m.group(5))
            if total < args.min_total_mib:
                raise SystemExit(f"FAIL: stage {stage} rank {rank}: zrt total {total} MiB is "
                                 f"below {args.min_total_mib} MiB: give a larger model")
            if abs(own / total - 1) > args.tolerance or m.group(8) != "ok":
                print(output)
                raise SystemExit(f"FAIL: stage {stage} rank {rank}: measured {own} MiB against "
                                 f"zrt total {total} MiB")
            print(f"stage {stage} rank {rank}: peak RSS growth {m.group(2)} MiB - peers "
                  f"{m.group(3)} MiB = {own} MiB, zrt total {total} MiB: {m.group(6)}x, "
                  f"residual {m.group(7)} MiB")

    # The check must be able to fail: on the default model zrt's buffers are a few MiB, less
    # than the staging its communicators take after the baseline.
    command = [args.zrt_run, "-n", str(args.ranks), args.train_lm, "--stage", "3", "--steps", "6",
               "--check-rss"]
    code, output = run(command, args.timeout)
    if code == 0 or "--check-rss:" not in output:
        print(output)
        raise SystemExit(f"FAIL: {' '.join(command)} exited {code} without the check's message "
                         "(a small model must fail the check)")
    print(f"ok: {args.stages} at {args.ranks} ranks within {args.tolerance:.0%}; the small "
          "model's run is refused")


if __name__ == "__main__":
    main()
