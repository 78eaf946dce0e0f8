"""zrt.torch.Optimizer: any torch optimizer, run by zrt's step on this rank's shard.

The torch optimizer is built over one "shard parameter" per piece of the local shard (a slice
of one model parameter, zrt_partition_shard_pieces), whose .data is a view of zrt's f32 master
and whose .grad a view of the reduced gradient shard. Its per-element state tensors become views
of zrt's optimizer slots after they are first created, so that zrt's checkpoints and its step
rollback cover them; scalar state (Adam's step) stays in torch and is restored from zrt's step.
"""
import ctypes

import torch

from .. import _lib
from ..errors import ZrtError, callback_failed
from ._layout import read_layout, write_layout
from ._memory import order_before_zrt, tensor_at


class Optimizer:
    """optimizer_class(param_groups, **kwargs) over the local shard of sharded (a ShardedModel).
    param_groups: like torch's, over the model's parameters (None: all trainable ones)."""

    def __init__(self, sharded, optimizer_class, param_groups=None, **kwargs):
        if sharded.config.offload_optimizer:
            # The offloaded step calls the optimizer once per segment, on a slice of the shard;
            # a torch optimizer steps all its parameters at every call.
            raise ValueError("zrt.torch.Optimizer steps the whole shard at once; with "
                             "ShardConfig(offload_optimizer=True) use zrt.torch.FusedOptimizer")
        self.sharded = sharded
        pm = sharded.pm
        self.pieces = [(p.param, p.param_offset, p.shard_offset, p.count)
                       for p in pm.shard_pieces()]
        by_tensor = {id(p.tensor): p for p in sharded.params}
        if param_groups is None:
            param_groups = [{"params": [p.tensor for p in sharded.params if p.trainable]}]
        elif isinstance(param_groups, (list, tuple)) and param_groups and isinstance(
                param_groups[0], torch.Tensor):
            param_groups = [{"params": list(param_groups)}]
        group_of = {}
        groups = []
        for g, group in enumerate(param_groups):
            options = {k: v for k, v in group.items() if k != "params"}
            groups.append(dict(options, params=[]))
            for tensor in group["params"]:
                if id(tensor) not in by_tensor:
                    raise ValueError("zrt.torch.Optimizer: a parameter in param_groups is not a "
                                     "parameter of the sharded model")
                group_of[by_tensor[id(tensor)].index] = g
        self.shard_params = []
        for param, _, _, count in self.pieces:
            if param not in group_of:
                raise ValueError(f"zrt.torch.Optimizer: parameter "
                                 f"{sharded.params[param].name!r} is in no param group")
            sp = torch.nn.Parameter(torch.zeros(count, dtype=torch.float32))
            groups[group_of[param]]["params"].append(sp)
            self.shard_params.append(sp)
        groups = [g for g in groups if g["params"]]
        if not groups:  # a rank that owns no element: the optimizer still needs a parameter
            groups = [{"params": [torch.nn.Parameter(torch.zeros(0))]}]
        self.inner = optimizer_class(groups, **kwargs)
        self.param_groups = self.inner.param_groups
        self.state_keys = None  # per-element state names, in slot order, once known
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
        for sp, (_, _, offset, count) in zip(self.shard_params, self.pieces):
            sp.data = self._views(args.master, offset, count)
            grad = self._views(args.grad, offset, count)
            sp.grad = grad * scale if scale is not None else grad
            if self.state_keys is not None:
                state = self.inner.state[sp]
                for key, slot in zip(self.state_keys, slots):
                    state[key] = self._views(slot, offset, count)
        first = self.state_keys is None
        self.inner.step()
        if first:
            self._adopt_state(slots)
        order_before_zrt(self.sharded.device)

    def _adopt_state(self, slots):
        """Moves the state torch created on the first step into zrt's slots."""
        keys = None
        for sp in self.shard_params:
            state = self.inner.state.get(sp, {})
            mine = sorted(k for k, v in state.items()
                          if isinstance(v, torch.Tensor) and v.shape == sp.shape and v.dim() > 0)
            keys = mine if keys is None else keys
            if mine != keys:
                raise RuntimeError(f"zrt.torch.Optimizer: state keys differ between shard "
                                   f"pieces ({keys} and {mine})")
        keys = keys or []
        if len(keys) > len(slots):
            raise RuntimeError(
                f"zrt.torch.Optimizer: {type(self.inner).__name__} keeps {len(keys)} tensors of "
                f"state per element ({', '.join(keys)}), zrt has optimizer_slots={len(slots)}: "
                f"pass zrt.torch.ShardConfig(optimizer_slots={len(keys)}) to shard()")
        for sp, (_, _, offset, count) in zip(self.shard_params, self.pieces):
            state = self.inner.state[sp]
            for key, slot in zip(keys, slots):
                view = self._views(slot, offset, count)
                view.copy_(state[key])
                state[key] = view
        self.state_keys = keys

    # --- the torch optimizer's face ---------------------------------------------------------------
    def step(self):
        """zrt_partition_step with the torch optimizer on the local shard (collective)."""
        self._error = None
        saved = [{k: (v.clone() if isinstance(v, torch.Tensor) and v.dim() == 0 else v)
                  for k, v in self.inner.state.get(sp, {}).items()
                  if not (isinstance(v, torch.Tensor) and v.dim() > 0)}
                 for sp in self.shard_params]
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
            if self._error is not None:
                raise ZrtError(error.function, error.status,
                               f"{error.message} (this rank's optimizer raised "
                               f"{type(self._error).__name__}: {self._error})") from self._error
            raise
        finally:
            self.sharded._grad_scale = None
            for sp in self.shard_params:
                sp.grad = None

    def zero_grad(self, set_to_none=True):
        """Nothing to do: zrt clears the gradients at every step."""

    def state_dict(self):
        return self.inner.state_dict()

    # --- checkpoints ------------------------------------------------------------------------------
    def _save_layout(self, directory):
        if self.sharded.comm.rank != 0:
            return
        scalars = {}
        for sp in self.shard_params:
            for k, v in self.inner.state.get(sp, {}).items():
                if k not in (self.state_keys or []):
                    scalars[k] = float(v) if isinstance(v, torch.Tensor) else v
            break
        write_layout(directory, type(self.inner).__name__, self.state_keys, scalars)

    def _load_layout(self, directory):
        layout = read_layout(directory, type(self.inner).__name__)
        self.inner.state.clear()
        self.state_keys = layout["state_keys"]
        if self.state_keys is None:
            return
        step = self.sharded.pm.get_step()
        for sp in self.shard_params:
            state = {}
            for k, v in layout["scalar_state"].items():
                state[k] = torch.tensor(float(step)) if k == "step" else v
            for key in self.state_keys:
                state[key] = torch.zeros_like(sp)  # re-pointed at zrt's slots by every step
            self.inner.state[sp] = state
