"""zrt.torch.Optimizer: any torch optimizer, run by zrt's step on this rank's shard.

It is a torch.optim.Optimizer whose param_groups are over the model's parameters, so LR
schedulers and everything else that reads or writes param_groups work. Inside, the torch
optimizer ("inner") is built over one "shard parameter" per piece of the local shard (a slice
of one model parameter, zrt_partition_shard_pieces), whose .data is a view of zrt's f32 master
and whose .grad a view of the reduced gradient shard; before every step each group's
hyperparameters (every key but its parameters) are copied into the inner group. The inner
optimizer's per-element state tensors become views of zrt's optimizer slots after they are first
created, so that zrt's checkpoints and its step rollback cover them; scalar state (Adam's step)
stays in torch and is restored from zrt's step.

How many slots the optimizer needs is found when it is built: its class steps once over a
two-element probe parameter per param group, and the state tensors of the parameter's shape
are counted (scalar state, shape (), is not). The partition manager is rebuilt with that count
before the first step when the ShardConfig left it open (zrt.torch._slots).
"""
import ctypes

import torch

from .. import _lib
from ..errors import ZrtError, callback_failed
from ._layout import (LocalShard, check_group_sizes, check_state_dict, hyperparameters,
                      indexed_groups, normalize_groups, read_layout, sharded_model_of,
                      state_dict_header, write_layout)
from ._config import step_backup_mode
from ._memory import order_before_zrt, placeholder, tensor_at
from ._slots import allocated_slots, ensure_slots

_WHO = "zrt.torch.Optimizer"
# The most elements the step hands torch at once when torch would allocate beside them (the
# clipped gradients, the first step's state): 32 MiB of f32 per allocation, whatever the shard.
_BATCH_ELEMENTS = 1 << 23


def _per_element(value, like):
    return isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape == like.shape


def _clone(value):
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def _probe_class(factory):
    """The class whose state layout is probed: a subclass of a torch optimizer is probed as
    that torch optimizer (a subclass may count or log in its step; its state is its base's),
    anything else as itself."""
    if isinstance(factory, type):
        for klass in factory.__mro__:
            if klass is torch.optim.Optimizer:
                break
            if klass.__module__.startswith("torch.optim"):
                return klass
    return factory


def probe_state_keys(factory, options, kwargs, device):
    """Per param group, the names of the per-element state tensors `factory` keeps, found by one
    step over a two-element parameter with a made-up gradient; None when the probe fails (an
    optimizer that needs a closure, say): the first real step then checks the slots."""
    for candidate in dict.fromkeys([_probe_class(factory), factory]):
        try:
            keys = []
            for group in options:
                p = torch.nn.Parameter(torch.zeros(2, dtype=torch.float32, device=device))
                opt = candidate([dict(group, params=[p])], **kwargs)
                p.grad = torch.full_like(p, 0.5)
                opt.step()
                keys.append(sorted(k for k, v in opt.state.get(p, {}).items()
                                   if _per_element(v, p)))
            return keys
        except Exception:  # noqa: BLE001 -- any failure only means "unknown"
            continue
    return None


class Optimizer(torch.optim.Optimizer):
    """optimizer_class(params, **kwargs) over the local shard of `model` (the model that
    zrt.torch.shard sharded, or its ShardedModel). params: like torch's (tensors or param
    groups), over the model's parameters (None: all trainable ones). optimizer_class may be any
    callable that builds a torch optimizer from param groups."""

    def __init__(self, model, optimizer_class, params=None, **kwargs):
        if params is None and "param_groups" in kwargs:  # the argument's earlier name
            params = kwargs.pop("param_groups")
        sharded = sharded_model_of(model, _WHO)
        if sharded.config.offload_optimizer:
            # The offloaded step calls the optimizer once per segment, on a slice of the shard;
            # a torch optimizer steps all its parameters at every call.
            raise ValueError("zrt.torch.Optimizer steps the whole shard at once; with "
                             "ShardConfig(offload_optimizer=True) use zrt.torch.FusedOptimizer")
        if step_backup_mode(sharded.config.step_backup) == _lib.STEP_BACKUP_SEGMENT:
            # That step calls the optimizer once per segment too.
            raise ValueError("zrt.torch.Optimizer steps the whole shard at once; with "
                             "ShardConfig(step_backup=\"segment\") use zrt.torch.FusedOptimizer, "
                             "or step_backup=True")
        self.sharded = sharded
        groups, group_of = normalize_groups(sharded, params, _WHO)
        options = [hyperparameters(g) for g in groups]
        name = getattr(optimizer_class, "__name__", type(optimizer_class).__name__)
        self.group_keys = probe_state_keys(optimizer_class, options, kwargs, sharded.device)
        probed = None
        if self.group_keys is not None:
            probed = sorted(set(k for keys in self.group_keys for k in keys))
            ensure_slots(sharded, len(probed), f"zrt.torch.Optimizer over {name} "
                         f"({', '.join(probed) or 'no per-element state'})")
        self._probed_keys = probed
        pm = sharded.pm
        user_index = {}
        for group in groups:
            for t in group["params"]:
                user_index[id(t)] = len(user_index)
        self._user_index = {p.index: user_index[id(p.tensor)] for p in sharded.params
                            if id(p.tensor) in user_index}
        self.local = LocalShard(pm, self._user_index)
        self.pieces = [(param, param_offset, shard_offset, count)
                       for param, param_offset, shard_offset, count in self.local.pieces]
        inner_groups = [dict(o, params=[]) for o in options]
        self.shard_params = []
        self._piece_group = []
        for param, _, _, count in self.pieces:
            if param not in group_of:
                raise ValueError(f"zrt.torch.Optimizer: parameter "
                                 f"{sharded.params[param].name!r} is in no param group")
            # Its .data becomes a view of zrt's master at every step.
            sp = torch.nn.Parameter(placeholder(count, torch.float32, sharded.device))
            inner_groups[group_of[param]]["params"].append(sp)
            self.shard_params.append(sp)
            self._piece_group.append(group_of[param])
        for group in inner_groups:
            if not group["params"]:
                # A group with nothing on this rank: a parameter without elements, which never
                # has a gradient, keeps the groups of both sides in step.
                group["params"] = [torch.nn.Parameter(torch.zeros(0, device=sharded.device))]
        self.inner = optimizer_class(inner_groups, **kwargs)
        # torch's own optimizers update parameter by parameter, so the step may hand them the
        # shard in batches (_step_in_batches); another's step may count per call or reduce over
        # every parameter, and gets the whole shard at once.
        self._batchable = type(self.inner).step.__module__.startswith("torch.optim.")
        facing = []
        for group, inner in zip(groups, self.inner.param_groups):
            face = dict(hyperparameters(inner), params=group["params"])
            if "param_names" in group:
                face["param_names"] = group["param_names"]
            facing.append(face)
        torch.optim.Optimizer.__init__(self, facing, dict(self.inner.defaults))
        self.state_keys = None  # per-element state names, in slot order, once known
        self._piece_slots = None  # per piece: [(key, slot index)]
        self._pending = {}  # piece -> {key: values} loaded by load_state_dict, for the next step
        self._pending_master = {}  # piece -> master values (param_dtype other than f32)
        # Whether state_dict() can read the state: the state holds views of zrt's slots (and
        # the shard parameters of its master) from a step, or loaded values; not after zrt's
        # checkpoint was loaded, until a step shows zrt's slots again.
        self._readable = True
        self._error = None
        self._fn = _lib.OptimizerFn(self._callback)
        sharded.optimizer = self

    # --- the callback ---------------------------------------------------------------------------
    def _views(self, base, offset, count):
        return tensor_at(ctypes.cast(base, ctypes.c_void_p).value + 4 * offset, (count,),
                         torch.float32, self.sharded.device)

    def _callback(self, args_pointer, user_data):
        try:
            self._run(args_pointer.contents)
            return _lib.SUCCESS
        except BaseException as error:  # an exception must never cross ctypes
            self._error = error
            return callback_failed(error)

    def _run(self, args):
        scale = self.sharded._grad_scale
        slots = [args.state[i] for i in range(args.num_state)]
        for k, (sp, (_, _, offset, count)) in enumerate(zip(self.shard_params, self.pieces)):
            sp.data = self._views(args.master, offset, count)
            if k in self._pending_master:
                sp.data.copy_(self._pending_master[k])
            sp.grad = self._views(args.grad, offset, count)
            if self.state_keys is not None:
                state = self.inner.state[sp]
                pending = self._pending.get(k, {})
                for key, slot in self._piece_slots[k]:
                    view = self._views(slots[slot], offset, count)
                    if key in pending:
                        view.copy_(pending[key])
                    state[key] = view
        first = self.state_keys is None
        if not first and scale is None:
            self.inner.step()  # over zrt's memory alone
        elif self._batchable and (not first or self._probed_keys is not None):
            self._step_in_batches(slots, scale)
        else:
            self._step_whole(slots, scale)
        order_before_zrt(self.sharded.device)

    def _step_in_batches(self, slots, scale):
        """torch's own optimizers: the step over batches of consecutive pieces of at most
        _BATCH_ELEMENTS elements (or one piece), for what torch would otherwise allocate for the
        whole shard beside zrt's memory: the gradients scaled by clipping (zrt's are not scaled
        in place, so that a failed step can be retried), and on the first step the optimizer's
        state, each batch's moved into zrt's slots before the next batch is stepped. Each
        piece's update is the one a whole step gives it: torch's optimizers update parameter by
        parameter. The slots of the first step are in the probe's key order, which every rank
        shares."""
        first = self.state_keys is None
        keys = sorted(self._probed_keys) if first else self.state_keys
        groups = self.inner.param_groups
        every = [group["params"] for group in groups]
        piece_slots = []
        try:
            for batch in self._batches():
                members = [self.shard_params[k] for k in batch]
                for i, group in enumerate(groups):
                    group["params"] = [self.shard_params[k] for k in batch
                                       if self._piece_group[k] == i]
                if scale is not None:
                    for sp in members:
                        sp.grad = sp.grad * scale
                self.inner.step()
                for sp in members:
                    sp.grad = None  # the scaled copy, at once
                if first:
                    piece_slots.extend(self._move_into_slots(k, keys, slots) for k in batch)
        finally:
            for group, params in zip(groups, every):
                group["params"] = params
        if first:
            self.state_keys, self._piece_slots = keys, piece_slots

    def _batches(self):
        batch, elements = [], 0
        for k, (_, _, _, count) in enumerate(self.pieces):
            if batch and elements + count > _BATCH_ELEMENTS:
                yield batch
                batch, elements = [], 0
            batch.append(k)
            elements += count
        if batch:
            yield batch

    def _step_whole(self, slots, scale):
        """One step over the shard, with the whole shard's scaled gradients and, on the first
        step, its state in torch's memory until it moves into the slots (in the order of the
        keys found): for an optimizer that is not torch's own, whose step may count per call or
        reduce over every parameter (a global norm), and on the first step of one the probe
        could not step (one that needs a closure, say)."""
        if scale is not None:
            for sp in self.shard_params:
                sp.grad = sp.grad * scale
        self.inner.step()
        if self.state_keys is not None:
            return
        keys = sorted(set(k for sp in self.shard_params for k in self._state_keys_of(sp)) |
                      set(self._probed_keys or []))
        piece_slots = [self._move_into_slots(k, keys, slots)
                       for k in range(len(self.shard_params))]
        self.state_keys, self._piece_slots = keys, piece_slots

    def _state_keys_of(self, sp):
        return sorted(k for k, v in self.inner.state.get(sp, {}).items() if _per_element(v, sp))

    def _move_into_slots(self, k, keys, slots):
        """Piece k's per-element state into its slots (slot i holds keys[i]); [(key, slot)]."""
        sp = self.shard_params[k]
        mine = self._state_keys_of(sp)
        every = sorted(set(keys) | set(mine))
        if len(every) > len(keys) or len(keys) > len(slots):
            raise RuntimeError(
                f"zrt.torch.Optimizer: {type(self.inner).__name__} keeps {len(every)} tensors of "
                f"state per element ({', '.join(every)}), zrt has optimizer_slots={len(slots)}"
                f"{' (its probe found ' + ', '.join(keys) + ')' if len(every) > len(keys) else ''}"
                f": pass zrt.torch.ShardConfig(optimizer_slots={len(every)}) to shard()")
        _, _, offset, count = self.pieces[k]
        state = self.inner.state[sp]
        for key in mine:
            view = self._views(slots[keys.index(key)], offset, count)
            view.copy_(state[key])
            state[key] = view
        return [(key, keys.index(key)) for key in mine]

    # --- the torch optimizer's face ---------------------------------------------------------------
    def _sync_hyperparameters(self):
        """Whatever the user or a scheduler wrote into a group is what the step uses."""
        for mine, inner in zip(self.param_groups, self.inner.param_groups):
            for key, value in mine.items():
                if key not in ("params", "param_names"):
                    inner[key] = value

    def step(self, closure=None):
        """zrt_partition_step with the torch optimizer on the local shard (collective).
        closure, if given, is called first (with grad enabled) and its loss returned."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._sync_hyperparameters()
        self._error = None
        saved = [{k: _clone(v) for k, v in self.inner.state.get(sp, {}).items()
                  if not _per_element(v, sp)} for sp in self.shard_params]
        keys_before = self.state_keys
        try:
            self.sharded.pm.step(self._fn, None)
        except ZrtError as error:
            # zrt rolled master and slots back on every rank; the scalar state is torch's.
            for sp, scalars in zip(self.shard_params, saved):
                if sp in self.inner.state:
                    self.inner.state[sp].update(scalars)
            if keys_before is None:
                self.inner.state.clear()
                self.state_keys = None
                self._piece_slots = None
            if self._error is not None:
                raise ZrtError(error.function, error.status,
                               f"{error.message} (this rank's optimizer raised "
                               f"{type(self._error).__name__}: {self._error})") from self._error
            raise
        finally:
            self.sharded._grad_scale = None
            for sp in self.shard_params:
                sp.grad = None
        self._pending = {}
        self._pending_master = {}
        self._readable = True
        return loss

    def zero_grad(self, set_to_none=True):
        """Nothing to do: zrt clears the gradients at every step."""

    # --- state dicts: the local shard's state -----------------------------------------------------
    def _piece_value(self, k, key):
        pending = self._pending.get(k, {})
        if key in pending:
            return pending[key]
        return self.inner.state[self.shard_params[k]][key]

    def state_dict(self):
        """This rank's optimizer state, like torch's state_dict: "state" by the index of each
        parameter in the param groups, holding the state of the parameter's elements in this
        rank's shard (per-element tensors of those elements, in the order of their offsets, and
        the scalar state such as "step"); "param_groups" with every hyperparameter; "zrt": the
        shard's layout, the slot order and, with a param_dtype other than float32, the f32
        master of the local elements. Like ZeroRedundancyOptimizer's before consolidation it is
        the local shard's state: load it on the same rank of a job sharded alike (zrt's
        checkpoints, sharded.save/load, move between layouts). Call between steps, on every
        rank (it is local; the model's values come from the model's state dict)."""
        if self.state_keys is not None and not self._readable:
            raise RuntimeError(f"{_WHO}.state_dict: zrt shows its optimizer slots during a step, "
                               "and none was taken since zrt's checkpoint was loaded: take a "
                               "step first")
        keys = set(self.state_keys or [])
        state = {}
        for param, runs in self.local.by_param.items():
            first = self.shard_params[runs[0][3]]
            scalars = self.inner.state.get(first, {})
            per_key = {}
            for _, _, _, k in runs:
                for key, _ in (self._piece_slots[k] if self._piece_slots is not None else []):
                    per_key.setdefault(key, []).append(self._piece_value(k, key))
            entry = {key: _clone(v) for key, v in scalars.items()
                     if key not in keys and not _per_element(v, first)}
            for key, parts in per_key.items():
                if len(parts) == len(runs):
                    entry[key] = torch.cat([p.detach().reshape(-1) for p in parts]).clone()
            if entry:
                state[self._user_index[param]] = entry
        groups = indexed_groups(self.param_groups)
        header = state_dict_header(self.sharded, self.local, self._name(), self.state_keys)
        if self.sharded.param_dtype != torch.float32 and self.state_keys is not None:
            header["master"] = self._masters()
        return {"state": state, "param_groups": groups, "zrt": header}

    def _name(self):
        return type(self.inner).__name__

    def _masters(self):
        """The f32 master of the local elements, by parameter (read through the shard
        parameters, which are views of it since the last step)."""
        out = {}
        for param, runs in self.local.by_param.items():
            parts = []
            for _, _, _, k in runs:
                parts.append(self._pending_master[k] if k in self._pending_master
                             else self.shard_params[k].detach())
            out[self._user_index[param]] = torch.cat(parts).clone()
        return out

    def load_state_dict(self, state_dict):
        """Loads what state_dict() returned on this rank: the hyperparameters at once, the
        per-element state into zrt's slots at the next step (which is when zrt hands them
        out). Load the model's values too (its state dict) for the run to continue exactly."""
        meta = check_state_dict(state_dict, self.sharded, self.local, self._name(),
                                len(self.param_groups), _WHO)
        saved_groups = state_dict["param_groups"]
        check_group_sizes(self.param_groups, saved_groups, _WHO)
        keys = meta.get("state_keys")
        if keys is not None and len(keys) > allocated_slots(self.sharded):
            raise ValueError(f"{_WHO}.load_state_dict: the state has {len(keys)} tensors per "
                             f"element ({', '.join(keys)}), zrt has optimizer_slots="
                             f"{allocated_slots(self.sharded)}")
        for mine, saved in zip(self.param_groups, saved_groups):
            mine.update({k: v for k, v in saved.items() if k not in ("params", "param_names")})
        self.inner.state.clear()
        self._pending, self._pending_master = {}, {}
        self._readable = True
        saved_state = {int(i): v for i, v in state_dict.get("state", {}).items()}
        if keys is None:
            self.state_keys = self._piece_slots = None
            return
        self.state_keys = list(keys)
        self._piece_slots = [[] for _ in self.shard_params]
        device = self.sharded.device
        masters = meta.get("master") or {}
        masters = {int(i): v for i, v in masters.items()}
        for param, runs in self.local.by_param.items():
            index = self._user_index[param]
            entry = saved_state.get(index, {})
            for _, count, start, k in runs:
                sp = self.shard_params[k]
                state, pending = {}, {}
                for key, value in entry.items():
                    if key in self.state_keys:
                        pending[key] = value.detach().reshape(-1)[start:start + count].to(
                            device, torch.float32).clone()
                        state[key] = pending[key]
                    else:
                        state[key] = _clone(value)
                if state:
                    self.inner.state[sp] = state
                self._pending[k] = pending
                self._piece_slots[k] = [(key, self.state_keys.index(key))
                                        for key in sorted(pending)]
                if index in masters:
                    self._pending_master[k] = masters[index].detach().reshape(-1)[
                        start:start + count].to(device, torch.float32).clone()

    # --- checkpoints ------------------------------------------------------------------------------
    def _step_offset(self, state):
        """How far torch's step count is ahead of zrt's (after a state dict of another run)."""
        step = state.get("step")
        if step is None:
            return 0
        return int(float(step)) - self.sharded.pm.get_step()

    def _save_layout(self, directory):
        if self.sharded.comm.rank != 0:
            return
        scalars = {}
        for sp in self.shard_params:
            state = self.inner.state.get(sp, {})
            for k, v in state.items():
                if k not in (self.state_keys or []):
                    scalars[k] = float(v) if isinstance(v, torch.Tensor) else v
            if state:
                scalars["zrt_step_offset"] = self._step_offset(state)
            break
        write_layout(directory, self._name(), self.state_keys, scalars,
                     group_keys=self.group_keys)  # which groups keep which state, for a load

    def _load_layout(self, directory):
        layout = read_layout(directory, self._name())
        self.inner.state.clear()
        self._pending, self._pending_master = {}, {}
        self._readable = False
        self.state_keys = layout["state_keys"]
        if self.state_keys is None:
            self._piece_slots = None
            return
        scalars = dict(layout["scalar_state"])
        step = self.sharded.pm.get_step() + int(scalars.pop("zrt_step_offset", 0))
        group_keys = layout.get("group_keys")
        if group_keys is not None and len(group_keys) != len(self.param_groups):
            group_keys = None
        self._piece_slots = []
        for k, sp in enumerate(self.shard_params):
            keys = (group_keys[self._piece_group[k]] if group_keys is not None
                    else self.state_keys)
            keys = [key for key in keys if key in self.state_keys]
            state = {}
            for key, v in scalars.items():
                state[key] = torch.tensor(float(step)) if key == "step" else v
            for key in keys:
                state[key] = placeholder(sp.numel(), torch.float32, sp.device)  # slots per step
            self.inner.state[sp] = state
            self._piece_slots.append([(key, self.state_keys.index(key)) for key in keys])
