"""One rank of the multi-rank misuse cases (tests/python/test_misuse.py), under zrt-run.

callback: rank 1's optimizer raises on the second step; every rank must see ZRT_CALLBACK_ERROR
with the Python message and the failing rank, zrt must roll the step back, and a retried step
must succeed. Prints "RESULT <json>" on every rank.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import zrt  # noqa: E402
import zrt.torch as zt  # noqa: E402

torch.set_num_threads(1)
comm = zrt.Comm.from_env()
rank = comm.rank
calls = {"n": 0}


class Flaky(torch.optim.SGD):
    def step(self, closure=None):
        calls["n"] += 1
        if calls["n"] == 2 and rank == 1:
            raise ValueError(f"boom from rank {rank}")
        return super().step(closure)


model = models.make("mlp")
sharded = zt.shard(model, stage=int(sys.argv[1]), comm=comm,
                   config=zt.ShardConfig(optimizer_slots=1, persistence_threshold=0)).zrt
opt = zt.Optimizer(sharded, Flaky, lr=0.1, momentum=0.9)
out = {}
for step in range(3):
    x, y = models.batch("mlp", step, comm.size, rank)
    models.loss_of("mlp", model(x), y).backward()
    before = {k: v.clone() for k, v in sharded.state_dict().items()} if step == 1 else None
    try:
        opt.step()
    except zrt.ZrtError as error:
        out["status"] = error.status_name
        out["message"] = error.message
        after = sharded.state_dict()
        out["rolled_back"] = all(torch.equal(before[k], after[k]) for k in before)
        out["step_after_failure"] = sharded.pm.get_step()
        opt.step()  # the gradients are still there: the retry succeeds
out["final_step"] = sharded.pm.get_step()
print("RESULT " + json.dumps(out), flush=True)
sharded.close()
comm.destroy()
