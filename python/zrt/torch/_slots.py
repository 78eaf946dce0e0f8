"""How many optimizer slots a sharded model has, and changing the count before the first step.

zrt allocates `optimizer_slots` f32 arrays of shard size when the manager is finalized; which
count is right is known only once the optimizer is (AdamW 2, SGD with momentum 1, plain SGD 0,
Adam with amsgrad 3). zrt.torch.Optimizer and FusedOptimizer call ensure_slots() when they are
built: a ShardConfig that leaves optimizer_slots to be derived gets exactly the optimizer's
count (zrt_partition_set_optimizer_slots replaces the state arrays in place, nothing else
moves), an explicit count that is too small is refused there and then, naming the setting,
instead of at the first step.
"""


def allocated_slots(sharded):
    """The optimizer slots the current manager has."""
    return int(sharded.pm.config.optimizer_slots)


def slots_derived(config):
    """Whether the ShardConfig leaves optimizer_slots to the optimizer (None)."""
    return getattr(config, "optimizer_slots", None) is None


def ensure_slots(sharded, needed, who):
    """Makes the manager's slots fit an optimizer that keeps `needed` f32 state tensors per
    element (None: unknown, nothing is done; the first step checks). `who` names the optimizer
    in errors. Collective where the count changes (every rank builds the same optimizer)."""
    if needed is None:
        return
    have = allocated_slots(sharded)
    if needed == have:
        return
    if not slots_derived(sharded.config):
        if needed > have:
            raise ValueError(
                f"{who} keeps {needed} state tensor(s) per element, and the model was sharded "
                f"with ShardConfig(optimizer_slots={have}): pass zrt.torch.ShardConfig("
                f"optimizer_slots={needed}) to shard(), or leave optimizer_slots unset so that "
                f"the optimizer sets it")
        return  # more than needed: the extra slots stay unused
    steps = sharded.pm.get_step()
    if steps > 0:
        if needed < have:
            return  # after training, a manager with spare slots is kept as it is
        raise ValueError(
            f"zrt.torch: the partition manager has taken {steps} step(s) with "
            f"optimizer_slots={have}; its slots can only change before the first step: pass "
            f"zrt.torch.ShardConfig(optimizer_slots={needed}) to shard()")
    sharded.pm.set_optimizer_slots(needed)
