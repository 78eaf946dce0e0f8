"""How many optimizer slots a sharded model has, and rebuilding its partition manager with
another count before the first step.

zrt allocates `optimizer_slots` f32 arrays of shard size when the manager is finalized; which
count is right is known only once the optimizer is (AdamW 2, SGD with momentum 1, plain SGD 0,
Adam with amsgrad 3). zrt.torch.Optimizer and FusedOptimizer call ensure_slots() when they are
built: a ShardConfig that leaves optimizer_slots to be derived gets a manager with exactly the
optimizer's count (rebuild_partition), an explicit count that is too small is refused there and
then, naming the setting, instead of at the first step.
"""
import json
import os
import shutil
import struct
import tempfile

import torch

from .. import _lib
from ..partition import Partition


def allocated_slots(sharded):
    """The optimizer slots the current manager has."""
    return int(sharded.pm.config.optimizer_slots)


def slots_derived(config):
    """Whether the ShardConfig leaves optimizer_slots to the optimizer (None)."""
    return getattr(config, "optimizer_slots", None) is None


def ensure_slots(sharded, needed, who):
    """Makes the manager's slots fit an optimizer that keeps `needed` f32 state tensors per
    element (None: unknown, nothing is done; the first step checks). `who` names the optimizer
    in errors."""
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
    if needed < have and sharded.pm.get_step() > 0:
        return  # after training, a manager with spare slots is kept as it is
    rebuild_partition(sharded, needed)


def rebuild_partition(sharded, optimizer_slots):
    """Replaces sharded.pm with a manager that has `optimizer_slots` slots and otherwise the
    same configuration, units and parameters, holding the current parameter values (the f32
    master, exactly, whatever param_dtype). Collective (every rank calls it); only before the
    first step, between forward/backward passes (no unit fetched, no gradients pending)."""
    old = sharded.pm
    optimizer_slots = int(optimizer_slots)
    if old.get_step() > 0:
        raise ValueError(
            f"zrt.torch: the partition manager has taken {old.get_step()} step(s) with "
            f"optimizer_slots={allocated_slots(sharded)}; its slots can only change before the "
            f"first step: pass zrt.torch.ShardConfig(optimizer_slots={optimizer_slots}) to "
            f"shard()")
    fetched = [u.name for u in sharded.units if getattr(u, "fetched", False)]
    if fetched:
        raise ValueError(f"zrt.torch: cannot rebuild the partition manager while units "
                         f"{fetched} are fetched (in the middle of a forward or backward); "
                         f"build the optimizer before the first forward")
    values = _current_values(sharded)
    cfg = sharded._partition_config()
    cfg.optimizer_slots = optimizer_slots
    new = Partition(sharded.comm, cfg)
    try:
        sharded.pm = new
        sharded._register()
        new.finalize()
        for p in sharded.params:
            v = values[p.index].to(sharded.device).contiguous()
            new.load_param(p.index, v.data_ptr(), _lib.F32)
    except BaseException:
        sharded.pm = old
        new.destroy()
        raise
    for unit in sharded.units:
        # Bound again now (resident) or at the unit's next fetch; until then a sharded
        # parameter's values are not on this rank, as after any release.
        resident = all(new.param_info(p.index).resident for p in unit.params)
        if hasattr(unit, "resident"):
            unit.resident = resident
        sharded.unbind(unit)
        if resident:
            sharded._bind(unit)
    old.destroy()


# --- the current values -------------------------------------------------------------------------
def _current_values(sharded):
    """{param index: f32 CPU tensor of its full value}: the master, exactly. With f32
    parameters they are the master (published from it); otherwise zrt's export (from the
    master), written by rank 0 and broadcast from there."""
    if sharded.param_dtype == torch.float32:
        return _parameter_values(sharded)
    return _exported_values(sharded)


def _parameter_values(sharded):
    return {p.index: values.to("cpu", torch.float32, copy=True)
            for p, values in sharded.gathered_params()}


def _exported_values(sharded):
    comm = sharded.comm
    folder = tempfile.mkdtemp(prefix="zrt-rebuild-")
    path = os.path.join(folder, "master.safetensors")
    try:
        sharded.pm.export_full(path, _lib.F32)
        tensors = _read_safetensors_f32(path) if comm.rank == 0 else None
    finally:
        if comm.rank != 0:
            shutil.rmtree(folder, ignore_errors=True)
    try:
        out = {}
        for k, p in enumerate(sharded.params):
            numel = 1
            for d in p.shape:
                numel *= d
            if tensors is not None:
                values = tensors[k]
                if values.numel() != numel:
                    raise RuntimeError(f"zrt.torch: the export holds {values.numel()} elements "
                                       f"for {p.name}, which has {numel}")
                values = values.reshape(p.shape).contiguous()
            else:
                values = torch.empty(p.shape, dtype=torch.float32)
            comm.broadcast(values.data_ptr(), numel, _lib.F32, 0)
            out[p.index] = values
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _read_safetensors_f32(path):
    """The tensors of an f32 safetensors file in the order of their data (zrt's export writes
    them in parameter order)."""
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    entries = sorted(((e["data_offsets"][0], e["data_offsets"][1], name)
                      for name, e in header.items() if name != "__metadata__"))
    start = 8 + length
    out = []
    for begin, end, name in entries:
        if header[name]["dtype"] != "F32":
            raise RuntimeError(f"zrt.torch: {path}: {name} is {header[name]['dtype']}, not F32")
        out.append(torch.frombuffer(bytearray(data[start + begin:start + end]),
                                    dtype=torch.float32))
    return out
