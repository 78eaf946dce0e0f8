"""model.state_dict() and model.load_state_dict() on a sharded model, and its buffers.

shard() puts two methods on the model instance (the class is left alone, so that a Hugging
Face model still saves under its own name). state_dict() asks torch for the keys and parameter
objects without reading any values (keep_vars), then fills in each parameter's full value, one
unit gathered at a time: clones for parameters sharded at stage 3, torch's usual detached views
for resident ones. load_state_dict() loads parameters through zrt (zrt_partition_load_param:
the values must be identical on every rank) and leaves buffers to torch. Both are collective at
stage 3: every rank calls them, between steps.

Buffers (BatchNorm statistics) are broadcast from rank 0 at shard() and then left to evolve on
each rank's own data, as FSDP does (DDP re-broadcasts them before every forward by default);
model.zrt.sync_buffers() broadcasts them again on demand.
"""
import collections

import torch

from .. import _lib


def install(sharded):
    model = sharded.model
    state_dict, load_state_dict = model.state_dict, model.load_state_dict
    model.__dict__["state_dict"] = (
        lambda *args, **kwargs: _state_dict(sharded, state_dict, *args, **kwargs))
    model.__dict__["load_state_dict"] = (
        lambda *args, **kwargs: _load_state_dict(sharded, state_dict, load_state_dict, *args,
                                                 **kwargs))


def uninstall(sharded):
    sharded.model.__dict__.pop("state_dict", None)
    sharded.model.__dict__.pop("load_state_dict", None)


def _keys_by_param(sharded, raw):
    """{id(parameter tensor): [keys]} of a keep_vars state dict (a tied parameter has several)."""
    ours = {id(p.tensor) for p in sharded.params}
    keys = collections.defaultdict(list)
    for key, value in raw.items():
        if id(value) in ours:
            keys[id(value)].append(key)
    return keys


def _state_dict(sharded, original, *args, destination=None, prefix="", keep_vars=False):
    if args:
        raise TypeError("zrt.torch: state_dict() takes keyword arguments only (destination=, "
                        "prefix=, keep_vars=), as torch 2.x asks")
    raw = original(prefix=prefix, keep_vars=True)  # parameter objects: no values read
    keys = _keys_by_param(sharded, raw)
    for p, values in sharded.gathered_params():
        if p.unit.resident:
            value = p.tensor if keep_vars else values
        else:
            value = values.clone()
        for key in keys.get(id(p.tensor), ()):
            raw[key] = value
    if not keep_vars:
        params = {key for group in keys.values() for key in group}
        for key, value in raw.items():
            if key not in params and isinstance(value, torch.Tensor):
                raw[key] = value.detach()
    if destination is None:
        return raw
    destination.update(raw)
    return destination


def _load_state_dict(sharded, state_dict_fn, original, state_dict, strict=True, **kwargs):
    raw = state_dict_fn(keep_vars=True)
    by_tensor = {id(p.tensor): p for p in sharded.params}
    param_keys = {key: by_tensor[id(value)] for key, value in raw.items()
                  if id(value) in by_tensor}
    values = {}
    for key, p in param_keys.items():
        if key in state_dict:
            values[p.name] = state_dict[key]
    missing = [key for key in param_keys if key not in state_dict
               and param_keys[key].name not in values]
    rest = {key: value for key, value in state_dict.items() if key not in param_keys}
    if strict:
        unknown = [key for key in rest if key not in raw]
        absent = missing + [key for key in raw if key not in param_keys and key not in rest]
        if unknown or absent:
            raise RuntimeError(
                f"Error(s) in loading state_dict for {type(sharded.model).__name__}: "
                f"missing keys {absent}, unexpected keys {unknown} (nothing was loaded)")
    result = original(rest, strict=False, **kwargs)
    sharded.load_params(values)
    buffers_missing = [key for key in result.missing_keys if key not in param_keys]
    return torch.nn.modules.module._IncompatibleKeys(missing + buffers_missing,
                                                     list(result.unexpected_keys))


def broadcast_buffers(sharded):
    """Every buffer of the model takes rank 0's bytes."""
    for buffer in sharded.model.buffers():
        if buffer.numel() == 0:
            continue
        host = buffer.detach().to("cpu", copy=True).contiguous()
        raw = host.view(-1).view(torch.uint8)
        sharded.comm.broadcast(raw.data_ptr(), raw.numel(), _lib.U8, 0)
        with torch.no_grad():
            buffer.copy_(host)
