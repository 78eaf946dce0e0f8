"""zrt.torch: ZeRO stages 0-3 for torch models over zrt, with an unchanged training loop.

    import zrt.torch
    model = zrt.torch.shard(model)              # stage 3 (fully_shard's default), in place
    optim = zrt.torch.Optimizer(model, torch.optim.AdamW, lr=1e-3)   # a torch.optim.Optimizer
    # or zrt's own, no Python in the step: zrt.torch.FusedOptimizer(model, "adamw", lr=1e-3)
    for x, y in data:
        loss = loss_fn(model(x), y)
        loss.backward()
        model.zrt.clip_grad_norm_(1.0)          # optional, zrt's fused norm
        optim.step()
    torch.save(model.state_dict(), path)        # full tensors, gathered unit by unit

docs/TORCH.md gives the design: parameters are tensors over zrt's memory, forward hooks fetch
and release units, backward accumulates into zrt's gradient windows, and the torch optimizer
runs inside zrt's step on this rank's shard; a parameter read where its values are not on
this rank raises, naming model.zrt.summon_full_params().
"""
from ._config import ShardConfig
from ._fused import FusedOptimizer
from ._optimizer import Optimizer
from ._shard import ShardedModel, shard

__all__ = ["ShardConfig", "FusedOptimizer", "Optimizer", "ShardedModel", "shard"]
