"""The settings of zrt.torch.shard, a small dataclass in the spirit of FSDP2's policies."""
import dataclasses
from typing import Optional, Union

import torch


@dataclasses.dataclass
class ShardConfig:
    """None keeps zrt's default (zrt.h, ZRT_PARTITION_CONFIG_INIT; docs/API.md says why).

    param_dtype: the dtype the model computes in (bfloat16 for mixed precision; the f32 master
    stays in zrt). reduce_dtype: gradient buckets and reductions. optimizer_slots: the f32 state
    tensors per element the optimizer keeps (Adam/AdamW 2, SGD with momentum 1); None: the
    optimizer wrapper sets it when it is built (zrt allocates 2 until then).
    offload_optimizer: master and optimizer state in host memory (ZeRO-Offload)."""
    param_dtype: Optional[torch.dtype] = None  # None: the model's dtype
    reduce_dtype: torch.dtype = torch.float32
    optimizer_slots: Optional[int] = None
    bucket_bytes: Optional[int] = None
    prefetch_depth: Optional[int] = None
    prefetch_bytes: Optional[int] = None
    max_live_bytes: Optional[int] = None
    persistence_threshold: Optional[int] = None
    alignment: Optional[int] = None
    no_sync_accumulation: bool = False
    # What a failed step can undo: True or "full" (the whole step rolls back; zrt.torch's
    # default, because zrt.torch.Optimizer steps the whole shard at once), "segment" (one
    # segment's copy, a constant: the optimizer is called per segment, zrt.torch.FusedOptimizer
    # only, and a failure leaves the step to resume), False or "none".
    step_backup: Union[bool, str] = True
    prefetch_next_step: bool = False
    # Stages 1-3, ZeRO-Offload: master and optimizer state in host memory (pinned beside a CUDA
    # model), the step a pipeline over segments; needs zrt.torch.FusedOptimizer.
    offload_optimizer: bool = False
    timeout_s: Optional[float] = None


_STEP_BACKUP_MODES = {True: "full", False: "none", "full": "full", "none": "none",
                      "segment": "segment"}


def step_backup_mode(value):
    """ShardConfig.step_backup as zrt_step_backup_t."""
    from .. import _lib
    name = _STEP_BACKUP_MODES.get(value) if isinstance(value, (bool, str)) else None
    if name is None:
        raise ValueError(f"ShardConfig.step_backup is {value!r}; expected True, False, "
                         "\"full\", \"segment\" or \"none\"")
    return {"none": _lib.STEP_BACKUP_NONE, "full": _lib.STEP_BACKUP_FULL,
            "segment": _lib.STEP_BACKUP_SEGMENT}[name]
