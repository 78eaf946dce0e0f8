"""The optimizer's side of a zrt.torch checkpoint: one JSON file beside zrt's shards, naming
the optimizer and the torch-side state zrt's slots do not hold."""
import json
import os

_LAYOUT_FILE = "zrt_torch_optimizer.json"


def write_layout(directory, name, state_keys, scalar_state, **extra):
    layout = {"optimizer": name, "state_keys": state_keys, "scalar_state": scalar_state}
    layout.update(extra)
    with open(os.path.join(directory, _LAYOUT_FILE), "w") as f:
        json.dump(layout, f)


def read_layout(directory, name):
    """The layout saved in `directory`, refused unless its optimizer is `name`."""
    path = os.path.join(directory, _LAYOUT_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"zrt.torch: {path} is missing: the checkpoint was not "
                                "saved by zrt.torch with an optimizer")
    with open(path) as f:
        layout = json.load(f)
    if layout["optimizer"] != name:
        raise ValueError(f"zrt.torch: the checkpoint's optimizer is {layout['optimizer']}, "
                         f"this one {name}")
    return layout


# --- what both optimizers share: the model, its param groups, the local shard, state dicts -----
def sharded_model_of(model, who):
    """The ShardedModel of `model`: the torch model zrt.torch.shard returned (model.zrt) or the
    ShardedModel itself."""
    from ._shard import ShardedModel

    sharded = getattr(model, "zrt", model)
    if not isinstance(sharded, ShardedModel):
        raise TypeError(f"{who}: the first argument is a {type(model).__name__}; pass the model "
                        f"that zrt.torch.shard() sharded (or its ShardedModel, model.zrt)")
    return sharded


def normalize_groups(sharded, params, who):
    """The param groups as torch takes them (an iterable of tensors or of dicts; None: every
    trainable parameter), over the sharded model's parameters, as a list of dicts whose
    "params" are lists of tensors (torch 2.x's (name, tensor) pairs become "param_names").
    Returns (groups, group_of: zrt parameter index -> group index)."""
    import torch

    by_tensor = {id(p.tensor): p for p in sharded.params}
    if params is None:
        groups = [{"params": [p.tensor for p in sharded.params if p.trainable]}]
    else:
        if isinstance(params, torch.Tensor):
            raise TypeError(f"{who}: params should be an iterable of tensors or of dicts "
                            f"(param groups), not a tensor")
        params = list(params)
        if not params:
            raise ValueError(f"{who}: an empty parameter list")
        groups = ([dict(g) for g in params] if isinstance(params[0], dict)
                  else [{"params": params}])
    out, group_of = [], {}
    for g, group in enumerate(groups):
        tensors = group.get("params")
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        elif isinstance(tensors, set):
            raise TypeError(f"{who}: param group {g}'s params are a set; use a list (the order "
                            "of a set changes between runs)")
        else:
            tensors = list(tensors or [])
        group = dict(group)
        if tensors and all(isinstance(t, tuple) and len(t) == 2 for t in tensors):
            group["param_names"] = [name for name, _ in tensors]
            tensors = [t for _, t in tensors]
        for t in tensors:
            if not isinstance(t, torch.Tensor) or id(t) not in by_tensor:
                raise ValueError(f"{who}: a parameter in param group {g} is not a parameter of "
                                 "the sharded model")
            index = by_tensor[id(t)].index
            if index in group_of:
                raise ValueError(f"{who}: parameter {sharded.params[index].name!r} appears in "
                                 f"param groups {group_of[index]} and {g}")
            group_of[index] = g
        group["params"] = tensors
        out.append(group)
    return out, group_of


def hyperparameters(group):
    """A group's settings: everything but its parameters."""
    return {k: v for k, v in group.items() if k not in ("params", "param_names")}


class LocalShard:
    """This rank's shard by parameter: the pieces zrt_partition_shard_pieces lists, each
    parameter's local elements numbered in the order of their offsets in it (the order in which
    a state dict concatenates them). `user_index`: zrt parameter index -> the index of the
    parameter in the optimizer's param groups (torch's numbering of state dicts)."""

    def __init__(self, pm, user_index):
        self.pieces = [(p.param, p.param_offset, p.shard_offset, p.count)
                       for p in pm.shard_pieces()]
        self.user_index = user_index
        self.by_param = {}  # zrt index -> [(param_offset, count, local_start, piece number)]
        for k, (param, offset, _, count) in enumerate(self.pieces):
            self.by_param.setdefault(param, []).append([offset, count, 0, k])
        for runs in self.by_param.values():
            runs.sort()
            start = 0
            for run in runs:
                run[2] = start
                start += run[1]

    def numel(self, param):
        return sum(run[1] for run in self.by_param.get(param, []))

    def position(self, param, offset):
        """Where element `offset` of `param` is in the parameter's local elements."""
        for run_offset, count, start, _ in self.by_param.get(param, []):
            if run_offset <= offset < run_offset + count:
                return start + offset - run_offset
        raise RuntimeError(f"zrt.torch: element {offset} of parameter {param} is not in this "
                           "rank's shard")

    def layout(self):
        """The pieces as a state dict records them: [user index, offset in it, count]."""
        return sorted([self.user_index[param], offset, count]
                      for param, offset, _, count in self.pieces)


def state_dict_header(sharded, local, name, state_keys):
    return {"format": 1, "optimizer": name, "rank": sharded.comm.rank,
            "world_size": sharded.comm.size, "stage": sharded.stage, "pieces": local.layout(),
            "state_keys": list(state_keys) if state_keys is not None else None}


def check_state_dict(state_dict, sharded, local, name, num_groups, who):
    """Refuses a state dict of another optimizer, rank layout or grouping, saying why."""
    meta = state_dict.get("zrt") if isinstance(state_dict, dict) else None
    if meta is None or "pieces" not in meta:
        raise ValueError(f"{who}.load_state_dict: the state dict has no 'zrt' entry: it was not "
                         f"made by {who}.state_dict()")
    if meta["optimizer"] != name:
        raise ValueError(f"{who}.load_state_dict: the state dict is of optimizer "
                         f"{meta['optimizer']}, this one is {name}")
    where = f"rank {meta['rank']} of {meta['world_size']}"
    if meta["world_size"] != sharded.comm.size or [list(p) for p in meta["pieces"]] != \
            local.layout():
        raise ValueError(
            f"{who}.load_state_dict: the state dict holds the optimizer state of the shard of "
            f"{where}, which is not this rank's shard (rank {sharded.comm.rank} of "
            f"{sharded.comm.size}): an optimizer state dict is the local shard's, to be loaded "
            "on the same rank with the same number of ranks, units and sharding settings; "
            "zrt's checkpoints (sharded.save/load) move between layouts")
    groups = state_dict.get("param_groups", [])
    if len(groups) != num_groups:
        raise ValueError(f"{who}.load_state_dict: the state dict has {len(groups)} param "
                         f"group(s), the optimizer {num_groups}")
    return meta


def check_group_sizes(groups, saved_groups, who):
    """Refuses a state dict whose param groups hold other numbers of parameters than ours."""
    for g, (mine, saved) in enumerate(zip(groups, saved_groups)):
        if len(saved["params"]) != len(mine["params"]):
            raise ValueError(f"{who}.load_state_dict: param group {g} has "
                             f"{len(saved['params'])} parameters in the state dict, "
                             f"{len(mine['params'])} here")


def indexed_groups(groups):
    """torch's state-dict form of param_groups: every hyperparameter, and the parameters as
    their positions counted across the groups."""
    out, start = [], 0
    for group in groups:
        out.append(dict(hyperparameters(group),
                        params=list(range(start, start + len(group["params"])))))
        start += len(group["params"])
    return out
