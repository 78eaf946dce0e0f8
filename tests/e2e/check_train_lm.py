#!/usr/bin/env python3
"""End-to-end: train_lm at stages 0-3 on N local ranks gives the same loss curve as stage 0.

Each run must itself exit 0 (train_lm checks that its loss fell and that its memory and
traffic figures agree with the ZeRO formulas); then every stage's per-step losses must match
stage 0's within the tolerance (rounding only, in f32).
"""
import argparse
import re
import subprocess
import sys

LOSS = re.compile(r"step\s+(\d+)\s+loss\s+([0-9.]+)")


def run(zrt_run, train_lm, ranks, stage, extra, timeout):
    command = [zrt_run, "-n", str(ranks), train_lm, "--stage", str(stage), "--print-every", "1"]
    command += extra
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        print(output)
        raise SystemExit(f"FAIL: {' '.join(command)} exited {result.returncode}")
    losses = {int(m.group(1)): float(m.group(2)) for m in LOSS.finditer(result.stdout)}
    if not losses:
        print(output)
        raise SystemExit(f"FAIL: no loss lines from {' '.join(command)}")
    return losses, output


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("zrt_run")
    parser.add_argument("train_lm")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--stages", default="0,1,2,3")
    parser.add_argument("--tolerance", type=float, default=1e-5, help="relative, per step")
    parser.add_argument("--timeout", type=float, default=240)
    parser.add_argument("extra", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    extra = [a for a in args.extra if a != "--"]

    stages = [int(s) for s in args.stages.split(",")]
    reference, _ = run(args.zrt_run, args.train_lm, args.ranks, stages[0], extra, args.timeout)
    print(f"stage {stages[0]}: " + " ".join(f"{reference[k]:.6f}" for k in sorted(reference)))
    worst = 0.0
    for stage in stages[1:]:
        losses, output = run(args.zrt_run, args.train_lm, args.ranks, stage, extra, args.timeout)
        print(f"stage {stage}: " + " ".join(f"{losses[k]:.6f}" for k in sorted(losses)))
        if sorted(losses) != sorted(reference):
            raise SystemExit(f"FAIL: stage {stage} printed steps {sorted(losses)}")
        for step, value in reference.items():
            error = abs(losses[step] - value) / max(abs(value), 1e-12)
            worst = max(worst, error)
            if error > args.tolerance:
                print(output)
                raise SystemExit(f"FAIL: stage {stage} step {step}: loss {losses[step]} vs "
                                 f"stage {stages[0]}'s {value} (relative {error:.2e} > "
                                 f"{args.tolerance:.0e})")
    print(f"ok: {len(stages)} stages, {args.ranks} ranks, worst relative difference {worst:.2e}")


if __name__ == "__main__":
    main()
