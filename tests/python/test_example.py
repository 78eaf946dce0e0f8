"""examples/torch_train.py as a user runs it: a few steps with torch's AdamW inside zrt's step
and with zrt's fused AdamW (zrt.torch.FusedOptimizer), which must print the same losses and
gradient norms (the same formulas in the same order, clipping included)."""
import os
import re

from conftest import REPO, launch


def losses(output):
    return re.findall(r"step +\d+ +loss ([0-9.]+) +grad norm ([0-9.]+)", output)


def test_torch_train_fused_adamw_matches_torch_adamw():
    script = os.path.join(REPO, "examples", "torch_train.py")
    common = ["--stage", 3, "--steps", 10, "--dim", 32, "--layers", 2, "--clip", 0.5]
    runs = {}
    for optimizer in ("torch-adamw", "zrt-adamw"):
        result = launch(2, script, *common, "--optimizer", optimizer)
        runs[optimizer] = losses(result.stdout)
        assert len(runs[optimizer]) == 2, result.stdout  # steps 1 and 10
    assert runs["zrt-adamw"] == runs["torch-adamw"], runs
    first, last = runs["zrt-adamw"][0][0], runs["zrt-adamw"][-1][0]
    assert float(last) < float(first), runs
