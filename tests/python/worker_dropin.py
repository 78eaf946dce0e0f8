"""One rank of the drop-in checks (tests/python/test_dropin.py): what a user of FSDP2's
fully_shard does with a model, done to a model sharded by zrt.torch. Each check writes what it
saw into a JSON per rank; the test asserts on it."""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import zrt.torch as zt  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--check", required=True)
parser.add_argument("--stages", default="1,2,3")
parser.add_argument("--out", required=True)
args = parser.parse_args()
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


def step(model, opt, index):
    x, y = models.batch("gpt", index, world, rank)
    loss = models.loss_of("gpt", model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def raised(fn):
    """The message of what fn raised, or None when it returned."""
    try:
        fn()
    except Exception as error:  # the check records every kind; the test names the one wanted
        return f"{type(error).__name__}: {error}"
    return None


def check_reads(stage):
    model = models.make("gpt")
    # persistence_threshold=0: zrt would keep a model this small gathered at stage 3.
    returned = zt.shard(model, stage=stage, config=zt.ShardConfig(persistence_threshold=0))
    opt = zt.Optimizer(model.zrt, torch.optim.AdamW, lr=1e-3)
    step(model, opt, 0)
    weight = model.blocks[0].fc.weight
    out = {"returns_model": returned is model, "default_stage": None,
           "sum": raised(lambda: weight.sum()),
           "repr": raised(lambda: repr(weight)),
           "norms": raised(lambda: [p.norm() for p in model.parameters()]),
           "shape": list(weight.shape)}
    full = model.state_dict()
    with model.zrt.summon_full_params():
        out["summoned_equals_state_dict"] = torch.equal(weight.detach().clone(),
                                                        full["blocks.0.fc.weight"])
    x, y = models.batch("gpt", 0, world, rank)
    out["grad_before_backward"] = raised(lambda: weight.grad)
    models.loss_of("gpt", model(x), y).backward()
    out["torch_clip"] = raised(lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
    out["zrt_clip"] = float(model.zrt.clip_grad_norm_(1.0))
    opt.step()
    out["grad_after_step"] = raised(lambda: weight.grad)
    model.zrt.close()
    out["after_close"] = raised(lambda: weight.sum())
    return out


def check_default_stage(_):
    model = zt.shard(models.make("gpt"))
    stage = model.zrt.stage
    model.zrt.close()
    return {"default_stage": stage}


def check_state_dict(stage):
    model = zt.shard(models.make("gpt"), stage=stage)
    opt = zt.Optimizer(model.zrt, torch.optim.AdamW, lr=1e-3)
    for index in range(2):
        step(model, opt, index)
    saved = model.state_dict()
    fresh = zt.shard(models.make("gpt", seed=7), stage=stage)
    result = fresh.load_state_dict(saved)
    again = fresh.state_dict()
    out = {"keys_equal": list(saved) == list(again),
           "values_equal": all(torch.equal(saved[k], again[k]) for k in saved),
           "incompatible": [list(result.missing_keys), list(result.unexpected_keys)],
           "strict_missing": raised(lambda: fresh.load_state_dict(
               {k: v for k, v in saved.items() if k != "head.bias"})),
           "bad_shape": raised(lambda: fresh.load_state_dict(
               dict(saved, **{"head.bias": torch.zeros(3)})))}
    # The loaded model trains on as the original does.
    fresh_opt = zt.Optimizer(fresh.zrt, torch.optim.AdamW, lr=1e-3)
    reference = zt.shard(models.make("gpt", seed=7), stage=stage)
    reference.load_state_dict(saved)
    reference_opt = zt.Optimizer(reference.zrt, torch.optim.AdamW, lr=1e-3)
    out["continues_alike"] = step(fresh, fresh_opt, 5) == step(reference, reference_opt, 5)
    for m in (model, fresh, reference):
        m.zrt.close()
    return out


class Normed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(12, 16)
        self.norm = torch.nn.BatchNorm1d(16)
        self.out = torch.nn.Linear(16, 5)

    def forward(self, x):
        return self.out(self.norm(self.inp(x)))


def check_buffers(stage):
    torch.manual_seed(0)
    model = Normed()
    with torch.no_grad():
        model.norm.running_mean.fill_(float(rank + 1))
        model.norm.num_batches_tracked.fill_(10 * (rank + 1))
    zt.shard(model, stage=stage)
    mine = {k: v.tolist() for k, v in model.named_buffers()}
    every = [None] * world
    dist.all_gather_object(every, mine)
    model.zrt.close()
    return {"buffers": every}


def check_exit_without_close(stage):
    model = zt.shard(models.make("gpt"), stage=stage)
    opt = zt.Optimizer(model.zrt, torch.optim.AdamW, lr=1e-3)
    step(model, opt, 0)
    return {"trained": True}  # no close(): the interpreter's exit closes it


def check_one_rank_raises(stage):
    model = zt.shard(models.make("gpt"), stage=stage, config=zt.ShardConfig(timeout_s=100))
    opt = zt.Optimizer(model.zrt, torch.optim.AdamW, lr=1e-3)
    if rank == 1:
        raise ValueError("rank 1 fails before its first step")
    step(model, opt, 0)  # waits for rank 1's gradients, which never come
    return {}


CHECKS = {"one_rank_raises": check_one_rank_raises, "reads": check_reads,
          "default_stage": check_default_stage, "state_dict": check_state_dict,
          "buffers": check_buffers, "exit_without_close": check_exit_without_close}
results = {stage: CHECKS[args.check](stage) for stage in map(int, args.stages.split(","))}
with open(f"{args.out}.{rank}", "w") as f:
    json.dump(results, f)
