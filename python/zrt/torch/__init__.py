"""zrt.torch: ZeRO stages 0-3 for torch models over zrt, with an unchanged training loop.

    import zrt.torch
    sharded = zrt.torch.shard(model, stage=3)                       # units: top-level children
    optim = zrt.torch.Optimizer(sharded, torch.optim.AdamW, lr=1e-3)
    # or zrt's own, no Python in the step: zrt.torch.FusedOptimizer(sharded, "adamw", lr=1e-3)
    for x, y in data:
        loss = loss_fn(model(x), y)
        loss.backward()
        sharded.clip_grad_norm_(1.0)                                # optional, zrt's fused norm
        optim.step()

docs/TORCH.md gives the design: parameters are tensors over zrt's memory, forward hooks fetch
and release units, backward accumulates into zrt's gradient windows, and the torch optimizer
runs inside zrt's step on this rank's shard.
"""
from ._config import ShardConfig
from ._fused import FusedOptimizer
from ._optimizer import Optimizer
from ._shard import ShardedModel, shard

__all__ = ["ShardConfig", "FusedOptimizer", "Optimizer", "ShardedModel", "shard"]
