"""zrt.torch.FusedOptimizer: zrt's own fused AdamW, Adam, SGD or Lion on this rank's shard.

zrt_partition_step is handed the C function (zrt_optimizer_adamw, ...) and a config struct, so
the step runs no Python: one pass over master, gradient and state that also writes the
parameter copy, in SIMD and on a thread pool (docs/API.md, "Fused optimizers"). The update is
torch.optim 1.13's single-tensor formula in its order of operations, so on torch 1.13 it equals
zrt.torch.Optimizer over torch.optim.AdamW (and Adam, SGD) bit for bit; torch 2.x's AdamW
updates exp_avg with lerp_, which rounds differently (about 1 ulp). A CPU model, or any
model sharded with ShardConfig(offload_optimizer=True): ZeRO-Offload, the optimizer run on the
host per segment as each reduction ends, its state in host memory.

It is a torch.optim.Optimizer: param_groups over the model's parameters, read at every step
(lr, betas, eps, weight_decay; momentum, dampening, nesterov for SGD), so LR and momentum
schedulers work. zrt's config has one value of each for the whole shard plus a per-parameter
weight-decay mask: groups may differ only in weight_decay, each group's either 0 or one common
value (the mask); any other difference is refused, naming the groups and the key.

Every per-element state tensor lives in zrt's optimizer slots, so zrt's checkpoints and its step
rollback cover all of it. state_dict() reads the slots and load_state_dict() writes them: zrt
hands out their addresses only inside a step, so the first step (and the step after a load)
runs through a small Python function that records the addresses, writes loaded state and
passes the C function the loaded step count; the other steps call the C function directly.
"""
import ctypes

import torch

from .. import _lib
from ..errors import ZrtError, call, callback_failed
from ._layout import (LocalShard, check_group_sizes, check_state_dict, indexed_groups,
                      normalize_groups, read_layout, sharded_model_of, state_dict_header,
                      write_layout)
from ._memory import tensor_at
from ._slots import allocated_slots, ensure_slots

_WHO = "zrt.torch.FusedOptimizer"
_KINDS = {"adamw": _lib.OPTIMIZER_ADAMW, "adam": _lib.OPTIMIZER_ADAM,
          "sgd": _lib.OPTIMIZER_SGD, "lion": _lib.OPTIMIZER_LION}
# The hyperparameters of each kind's param groups (torch.optim's names), and its slots' names
# in slot order (torch's state names).
_GROUP_KEYS = {"adamw": ("lr", "betas", "eps", "weight_decay"),
               "adam": ("lr", "betas", "eps", "weight_decay"),
               "lion": ("lr", "betas", "weight_decay"),
               "sgd": ("lr", "momentum", "dampening", "weight_decay", "nesterov")}
_STATE_KEYS = {"adamw": ["exp_avg", "exp_avg_sq"], "adam": ["exp_avg", "exp_avg_sq"],
               "lion": ["exp_avg"], "sgd": ["momentum_buffer"]}
_TORCH_CLASS = {"adamw": "torch.optim.AdamW", "adam": "torch.optim.Adam",
                "sgd": "torch.optim.SGD", "lion": "a Lion optimizer class"}


def _value(v):
    """A hyperparameter as a comparable plain value (tensors and tuples of them included)."""
    if isinstance(v, torch.Tensor):
        return float(v)
    if isinstance(v, (tuple, list)):
        return tuple(_value(x) for x in v)
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return float(v)
    return v


class FusedOptimizer(torch.optim.Optimizer):
    """kind: "adamw", "adam", "sgd" or "lion", with torch.optim's argument names and defaults.
    model: the model zrt.torch.shard sharded (or its ShardedModel). params: param groups over
    its parameters (None: every trainable parameter in one group); groups may differ only in
    weight_decay (0 or one common value). no_decay: parameters that weight decay skips whatever
    their group (biases, norms); threads: the optimizer's threads (1: the calling thread; 0:
    every CPU of the rank's affinity mask)."""

    def __init__(self, model, kind, params=None, lr=None, betas=None, eps=None,
                 weight_decay=None, momentum=None, dampening=None, nesterov=None, no_decay=(),
                 threads=1):
        sharded = sharded_model_of(model, _WHO)
        if kind not in _KINDS:
            raise ValueError(f"zrt.torch.FusedOptimizer: kind {kind!r} is not one of "
                             f"{', '.join(_KINDS)}")
        if sharded.device.type != "cpu" and not sharded.config.offload_optimizer:
            raise ValueError(f"zrt.torch.FusedOptimizer runs on host memory; the model is on "
                             f"{sharded.device}: shard it with ShardConfig(offload_optimizer="
                             f"True) (master and state then live in host memory), or use "
                             f"zrt.torch.Optimizer with a torch optimizer")
        if isinstance(params, (int, float)) and not isinstance(params, bool):
            raise TypeError(f"{_WHO}: the third argument is params (tensors or param groups); "
                            f"pass the learning rate as lr={params!r}")
        self.sharded = sharded
        self.kind = kind
        config = _lib.OptimizerConfig()
        call("zrt_optimizer_config_init", ctypes.byref(config), ctypes.sizeof(config),
             _KINDS[kind])
        defaults = {"lr": config.lr, "betas": (config.beta1, config.beta2), "eps": config.eps,
                    "weight_decay": config.weight_decay, "momentum": config.momentum,
                    "dampening": config.dampening, "nesterov": bool(config.nesterov)}
        given = {"lr": lr, "betas": tuple(betas) if betas is not None else None, "eps": eps,
                 "weight_decay": weight_decay, "momentum": momentum, "dampening": dampening,
                 "nesterov": nesterov}
        defaults.update({k: v for k, v in given.items() if v is not None})
        defaults = {k: defaults[k] for k in _GROUP_KEYS[kind]}
        groups, group_of = normalize_groups(sharded, params, _WHO)
        for p in sharded.params:
            if p.trainable and p.index not in group_of:
                raise ValueError(f"{_WHO}: parameter {p.name!r} is in no param group (the fused "
                                 "optimizer steps every trainable parameter of the shard)")
        by_tensor = {id(p.tensor): p for p in sharded.params}
        for tensor in no_decay:
            if id(tensor) not in by_tensor:
                raise ValueError("zrt.torch.FusedOptimizer: a parameter in no_decay is not a "
                                 "parameter of the sharded model")
        self._no_decay = {by_tensor[id(t)].index for t in no_decay}
        self._group_of = group_of
        torch.optim.Optimizer.__init__(self, groups, defaults)
        self._group_values()  # refuses groups the config cannot express before anything else
        needed = self._slots_needed()
        ensure_slots(sharded, needed, f"{_WHO}({kind!r})")
        user_index, n = {}, 0
        for group in self.param_groups:
            for t in group["params"]:
                user_index[by_tensor[id(t)].index] = n
                n += 1
        self._user_index = user_index
        self.local = LocalShard(sharded.pm, user_index)
        self._mask = (ctypes.c_uint8 * max(1, len(sharded.params)))()
        config.decay_mask = ctypes.cast(self._mask, ctypes.POINTER(ctypes.c_uint8))
        config.decay_mask_count = len(sharded.params)
        self._pool = ctypes.c_void_p()
        if threads != 1:
            call("zrt_optimizer_pool_create", threads, ctypes.byref(self._pool))
            config.pool = self._pool
        self._config = config
        self._fn = _lib.FUSED_OPTIMIZERS[_KINDS[kind]]
        self._trampoline_fn = _lib.OptimizerFn(self._trampoline)
        self._addresses = None  # (param, param_offset) -> (count, master, [slots]), once seen
        self._recording = {}
        self._pending = {}  # param -> {key: this rank's values}, loaded, for the next step
        self._pending_master = {}  # param -> f32 master values (param_dtype other than f32)
        self._step_offset = 0  # the loaded optimizer's step count minus zrt's
        self._error = None
        self._apply_groups()  # refuses unsupported groups now, as well as at every step
        sharded.optimizer = self

    # --- the groups into zrt's config ----------------------------------------------------------
    def _slots_needed(self):
        if self.kind != "sgd":
            return len(_STATE_KEYS[self.kind])
        return 1 if any(_value(g["momentum"]) != 0 for g in self.param_groups) else 0

    def _state_keys(self):
        return _STATE_KEYS[self.kind][:min(self._slots_needed(),
                                           allocated_slots(self.sharded))]

    def _group_values(self):
        """The config's values from the groups, refusing groups it cannot express: (values by
        key, the common weight decay, each group's weight_decay)."""
        groups = self.param_groups
        first = groups[0]
        for key in _GROUP_KEYS[self.kind]:
            if key == "weight_decay":
                continue
            for j, group in enumerate(groups[1:], 1):
                if _value(group[key]) != _value(first[key]):
                    raise ValueError(
                        f"{_WHO}: param groups 0 and {j} differ in {key!r} ({_value(first[key])}"
                        f" and {_value(group[key])}); zrt's fused optimizer has one {key} for "
                        f"all parameters (its groups may differ only in weight_decay, each "
                        f"either 0 or one common value): for a {key} per group use "
                        f"zrt.torch.Optimizer(model, {_TORCH_CLASS[self.kind]}, param_groups)")
        decays = [_value(g["weight_decay"]) for g in groups]
        common = None
        for j, wd in enumerate(decays):
            if wd == 0:
                continue
            if common is None:
                common = (j, wd)
            elif wd != common[1]:
                raise ValueError(
                    f"{_WHO}: param groups {common[0]} and {j} have weight_decay {common[1]} "
                    f"and {wd}; zrt's fused optimizer applies one weight decay, to the "
                    f"parameters of the groups whose weight_decay is not 0: for several "
                    f"values use zrt.torch.Optimizer(model, {_TORCH_CLASS[self.kind]}, "
                    f"param_groups)")
        values = {key: _value(first[key]) for key in _GROUP_KEYS[self.kind]}
        return values, (common[1] if common is not None else 0.0), decays

    def _apply_groups(self):
        """Reads every group's hyperparameters into zrt's config and the decay mask."""
        values, weight_decay, decays = self._group_values()
        c = self._config
        c.lr = values["lr"]
        c.weight_decay = weight_decay
        if "betas" in values:
            c.beta1, c.beta2 = values["betas"]
        if "eps" in values:
            c.eps = values["eps"]
        if self.kind == "sgd":
            c.momentum = values["momentum"]
            c.dampening = values["dampening"]
            c.nesterov = int(bool(values["nesterov"]))
            if c.momentum != 0 and allocated_slots(self.sharded) < 1:
                raise ValueError(f"{_WHO}: SGD with momentum keeps a momentum buffer; the "
                                 f"optimizer was built without momentum and zrt has no slot "
                                 f"for it: build it with momentum, or pass zrt.torch."
                                 f"ShardConfig(optimizer_slots=1) to shard()")
        for p in self.sharded.params:
            group = self._group_of.get(p.index)
            self._mask[p.index] = int(group is not None and decays[group] != 0
                                      and p.index not in self._no_decay)

    def step(self, closure=None):
        """zrt_partition_step with the fused optimizer (collective). The clip factor of
        sharded.clip_grad_norm_, if any, scales the gradients in the same pass. closure, if
        given, is called first (with grad enabled) and its loss returned."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._apply_groups()
        scale = self.sharded._grad_scale
        self._config.clip_factor = 1.0 if scale is None else scale
        through_python = (self._addresses is None or self._pending or self._pending_master
                          or self._step_offset != 0)
        self._recording = {}
        self._error = None
        try:
            self.sharded.pm.step(self._trampoline_fn if through_python else self._fn,
                                 ctypes.addressof(self._config))
        except ZrtError as error:
            if self._error is not None:
                raise ZrtError(error.function, error.status,
                               f"{error.message} (this rank's step raised "
                               f"{type(self._error).__name__}: {self._error})") from self._error
            raise
        finally:
            self.sharded._grad_scale = None
        if through_python:
            self._addresses = self._recording
            self._pending, self._pending_master = {}, {}
        return loss

    def _trampoline(self, args_pointer, user_data):
        """The step through Python: records where master and slots are, writes loaded state,
        and calls the C function with the optimizer's own step count."""
        try:
            args = args_pointer.contents
            master = ctypes.cast(args.master, ctypes.c_void_p).value
            slots = [ctypes.cast(args.state[i], ctypes.c_void_p).value
                     for i in range(args.num_state)]
            keys = self._state_keys()
            for j in range(args.num_pieces):
                piece = args.pieces[j]
                at = 4 * piece.shard_offset
                count = piece.count
                self._recording[(piece.param, piece.param_offset)] = (
                    count, master + at, [s + at for s in slots])
                if piece.param not in self._pending and piece.param not in self._pending_master:
                    continue
                pos = self.local.position(piece.param, piece.param_offset)
                values = self._pending.get(piece.param, {})
                for s, key in enumerate(keys):
                    if key in values:
                        self._host(slots[s] + at, count).copy_(values[key][pos:pos + count])
                if piece.param in self._pending_master:
                    self._host(master + at, count).copy_(
                        self._pending_master[piece.param][pos:pos + count])
            pointer = args_pointer
            if self._step_offset:
                size = max(args.size, ctypes.sizeof(_lib.OptimizerArgs))
                copy = ctypes.create_string_buffer(size)
                ctypes.memmove(copy, ctypes.addressof(args), args.size)
                moved = _lib.OptimizerArgs.from_buffer(copy)
                moved.step = args.step + self._step_offset
                pointer = ctypes.pointer(moved)
            return self._fn(pointer, user_data)
        except BaseException as error:  # an exception must never cross ctypes
            self._error = error
            return callback_failed(error)

    @staticmethod
    def _host(address, count):
        return tensor_at(address, (count,), torch.float32, torch.device("cpu"))

    def zero_grad(self, set_to_none=True):
        """Nothing to do: zrt clears the gradients at every step."""

    def close(self):
        """Frees the thread pool (also when the object goes)."""
        if self._pool.value:
            call("zrt_optimizer_pool_destroy", self._pool)
            self._pool = ctypes.c_void_p()
            self._config.pool = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass

    # --- state dicts: zrt's slots of the local shard ----------------------------------------------
    def _name(self):
        return "zrt-" + self.kind

    def _read_local(self, which):
        """{param: this rank's values} of master (which None) or slot `which`, read at the
        addresses the last step through Python recorded."""
        out = {}
        for param, runs in self.local.by_param.items():
            values = torch.empty(self.local.numel(param), dtype=torch.float32)
            filled = 0
            for (p, offset), (count, master, slots) in self._addresses.items():
                if p != param:
                    continue
                pos = self.local.position(param, offset)
                address = master if which is None else slots[which]
                values[pos:pos + count] = self._host(address, count)
                filled += count
            if filled != values.numel():
                raise RuntimeError(f"{_WHO}.state_dict: zrt's step showed {filled} of the "
                                   f"{values.numel()} local elements of parameter {param}")
            out[param] = values
        return out

    def state_dict(self):
        """This rank's optimizer state, like torch's state_dict: "state" by the index of each
        parameter in the param groups, holding "step" and the slots' values of the parameter's
        elements in this rank's shard (torch's names: exp_avg, exp_avg_sq; momentum_buffer;
        in the order of their offsets); "param_groups" with every hyperparameter; "zrt": the
        shard's layout and, with a param_dtype other than float32, the f32 master of the local
        elements. It is the local shard's state (like ZeroRedundancyOptimizer's before
        consolidation): load it on the same rank of a job sharded alike. Between steps."""
        step = self.sharded.pm.get_step() + self._step_offset
        keys = self._state_keys()
        with_master = self.sharded.param_dtype != torch.float32
        state, masters = {}, {}
        if self._pending or self._pending_master:
            slot_values = [{param: v[key] for param, v in self._pending.items() if key in v}
                           for key in keys]
            masters = dict(self._pending_master)
        elif step > 0:
            if self._addresses is None:
                raise RuntimeError(f"{_WHO}.state_dict: zrt shows its optimizer slots during a "
                                   f"step, and this optimizer has not stepped since it was "
                                   f"built or loaded (zrt is at step {step}): take a step first, "
                                   f"or use zrt's checkpoints (sharded.save)")
            slot_values = [self._read_local(s) for s in range(len(keys))]
            if with_master:
                masters = self._read_local(None)
        else:
            slot_values = [{} for _ in keys]
        if step > 0:
            for param in self.local.by_param:
                entry = {"step": torch.tensor(float(step))}
                for key, values in zip(keys, slot_values):
                    if param in values:
                        entry[key] = values[param].clone()
                state[self._user_index[param]] = entry
        groups = indexed_groups(self.param_groups)
        header = state_dict_header(self.sharded, self.local, self._name(), keys)
        header["optimizer_step"] = step
        if with_master and masters:
            header["master"] = {self._user_index[p]: v.clone() for p, v in masters.items()}
        return {"state": state, "param_groups": groups, "zrt": header}

    def load_state_dict(self, state_dict):
        """Loads what state_dict() returned on this rank: the hyperparameters at once, the slots,
        the step count (and the master) at the next step. Load the model's values too."""
        meta = check_state_dict(state_dict, self.sharded, self.local, self._name(),
                                len(self.param_groups), _WHO)
        saved_groups = state_dict["param_groups"]
        check_group_sizes(self.param_groups, saved_groups, _WHO)
        old = [dict(g) for g in self.param_groups]
        for mine, saved in zip(self.param_groups, saved_groups):
            mine.update({k: v for k, v in saved.items() if k not in ("params", "param_names")})
        try:
            self._apply_groups()
            keys = self._state_keys()
            if self._slots_needed() > allocated_slots(self.sharded):
                raise ValueError(f"{_WHO}.load_state_dict: the state needs "
                                 f"{self._slots_needed()} slot(s), zrt has "
                                 f"{allocated_slots(self.sharded)}")
        except ValueError:
            for mine, before in zip(self.param_groups, old):
                mine.clear()
                mine.update(before)
            self._apply_groups()
            raise
        saved_state = {int(i): v for i, v in state_dict.get("state", {}).items()}
        masters = {int(i): v for i, v in (meta.get("master") or {}).items()}
        pending, pending_master = {}, {}
        for param in self.local.by_param:
            index = self._user_index[param]
            entry = saved_state.get(index, {})
            numel = self.local.numel(param)
            pending[param] = {}
            for key in keys:
                value = entry.get(key)
                value = (value.detach().reshape(-1).to("cpu", torch.float32).clone()
                         if value is not None else torch.zeros(numel))
                if value.numel() != numel:
                    raise ValueError(f"{_WHO}.load_state_dict: {key} of parameter {index} has "
                                     f"{value.numel()} elements, this rank holds {numel}")
                pending[param][key] = value
            if index in masters:
                pending_master[param] = masters[index].detach().reshape(-1).to(
                    "cpu", torch.float32).clone()
        self._pending, self._pending_master = pending, pending_master
        self._step_offset = int(meta.get("optimizer_step", 0)) - self.sharded.pm.get_step()

    # --- checkpoints: the state is zrt's slots; the kind and the step offset are kept -----------
    def _save_layout(self, directory):
        if self.sharded.comm.rank == 0:
            write_layout(directory, self._name(), None,
                         {"zrt_step_offset": self._step_offset})

    def _load_layout(self, directory):
        layout = read_layout(directory, self._name())
        self._step_offset = int(layout["scalar_state"].get("zrt_step_offset", 0))
        self._pending, self._pending_master = {}, {}
