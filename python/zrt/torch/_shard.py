"""zrt.torch.shard: a torch model's parameters become zrt's buffers, and hooks drive ZeRO.

How it fits together (docs/TORCH.md has the design):
  - Units are the modules the user names (default: the model's top-level children); the
    parameters that belong to no unit form a "root" unit, kept gathered at stage 3.
  - Every parameter's .data is a tensor over zrt's memory (zrt_partition_param_data), made
    again only when zrt hands out another address (stage 3 without stable addresses), and every
    parameter is a ZrtParameter (_guard.py): read where its values are not on this rank, it
    raises instead of faulting.
  - Forward: a unit's pre-hook fetches it, its post-hook releases it and hooks its outputs.
  - Backward: the first gradient reaching a unit's outputs fetches it again and opens its
    gradient window: every parameter's .grad becomes a view of the window, so autograd's
    AccumulateGrad adds into zrt's memory in place. When every parameter of the unit has
    accumulated, the unit is handed to zrt (grad_ready) and released. A callback at the end of
    backward closes what is left.
"""
import contextlib

import torch

from .. import _exit, _lib
from ..comm import Comm
from ..partition import Partition
from ..partition import config as partition_config
from . import _guard, _hooks, _state_dict
from ._config import ShardConfig, step_backup_mode
from ._memory import order_before_zrt, placeholder, tensor_at, zrt_dtype
from ._units import build_units


class ShardedModel:
    """The zrt side of a sharded torch model: made by zrt.torch.shard, found at model.zrt."""

    def __init__(self, model, stage, units, config, comm):
        self.model = model
        self.config = config or ShardConfig()
        self.stage = stage
        self.closed = False
        self.optimizer = None
        self.comm = comm if comm is not None else _default_comm(self.config)
        self._own_comm = comm is None
        self._check_parameters()
        self.units, self.params, self.root = build_units(model, units, self)
        self.pm = Partition(self.comm, self._partition_config())
        self._register()
        self.pm.finalize()
        self._load_initial_values()
        _state_dict.broadcast_buffers(self)
        for p in self.params:
            _guard.guard(p.tensor, p)
            if p.trainable:
                with _guard.bypass():
                    p.tensor.grad = None
        self._backward_started = False
        self._summoned = 0
        self._local_accumulation = False  # inside no_sync, torch's .grad accumulates (stage 2/3)
        self._held_at_step = None  # zrt's step count when the last backward handed gradients over
        self._install_hooks()
        _state_dict.install(self)
        _exit.track(self)

    # --- construction -------------------------------------------------------------------------
    def _check_parameters(self):
        params = list(self.model.parameters())
        if not params:
            raise ValueError("zrt.torch.shard: the model has no parameters")
        self.device = params[0].device
        self.param_dtype = self.config.param_dtype or params[0].dtype
        self._zdtype = zrt_dtype(self.param_dtype, "param_dtype")
        for p in params:
            if p.device != self.device:
                raise ValueError(f"zrt.torch.shard: parameters on {p.device} and {self.device}; "
                                 "move the model to one device first")
            if isinstance(p, _guard.ZrtParameter):
                raise ValueError("zrt.torch.shard: the model is sharded already (model.zrt)")
            zrt_dtype(p.dtype, "a parameter")

    def _partition_config(self):
        c = self.config
        slots = 2 if c.optimizer_slots is None else c.optimizer_slots
        fields = dict(stage=self.stage, param_dtype=self._zdtype,
                      reduce_dtype=zrt_dtype(c.reduce_dtype, "reduce_dtype"),
                      optimizer_slots=slots,
                      mem_kind=_lib.MEM_CUDA if self.device.type == "cuda" else _lib.MEM_HOST,
                      no_sync_accumulation=int(c.no_sync_accumulation),
                      step_backup=step_backup_mode(c.step_backup),
                      prefetch_next_step=int(c.prefetch_next_step),
                      offload_optimizer=int(c.offload_optimizer),
                      grad_accumulate=1)  # autograd adds into .grad, the window itself
        for name in ("bucket_bytes", "prefetch_depth", "prefetch_bytes", "max_live_bytes",
                     "persistence_threshold", "alignment"):
            value = getattr(c, name)
            if value is not None:
                fields[name] = value
        return partition_config(**fields)

    def _register(self):
        """Units and parameters in the order build_units numbered them, which is zrt's."""
        for unit in self.units:
            index = self.pm.add_unit(unit.name)
            if index != unit.index:
                raise RuntimeError(f"zrt.torch: zrt numbered unit {unit.name!r} {index}, the "
                                   f"binding {unit.index} (a bug: please report)")
            for p in unit.params:
                flags = _lib.PARAM_DEFAULT if p.trainable else _lib.PARAM_FROZEN
                if unit is self.root and p.trainable:
                    flags = _lib.PARAM_UNSHARDED  # used all through forward and backward
                index = self.pm.add_param_shaped(unit.index, p.name, p.shape,
                                                 zrt_dtype(p.tensor.dtype, p.name), flags)
                if index != p.index:
                    raise RuntimeError(f"zrt.torch: zrt numbered parameter {p.name!r} {index}, "
                                       f"the binding {p.index} (a bug: please report)")

    def _load_initial_values(self):
        # Like DDP, rank 0's initial values win: load_param wants identical values everywhere.
        for p in self.params:
            values = p.tensor.detach().to(torch.float32).contiguous().cpu()
            self.comm.broadcast(values.data_ptr(), values.numel(), _lib.F32, 0)
            if self.device.type == "cuda":
                values = values.to(self.device)
            self.pm.load_param(p.index, values.data_ptr(), _lib.F32)
        for unit in self.units:
            unit.resident = all(self.pm.param_info(p.index).resident for p in unit.params)
            if unit.resident:
                self._bind(unit)
            else:
                self.unbind(unit)

    # --- parameters over zrt's memory ---------------------------------------------------------
    def readable(self, unit):
        """Whether unit's parameters hold their values on this rank now."""
        return unit.resident or unit.fetched or self._summoned > 0

    @property
    def grads_held(self):
        """True between a backward that handed gradients to zrt and the optimizer's step."""
        return self._held_at_step is not None and self._held_at_step == self.pm.get_step()

    def _bind(self, unit):
        """Points every parameter of unit at zrt's current address for it (a no-op while the
        address is unchanged, which it always is for resident parameters and stable stage 3)."""
        with _guard.bypass():
            for p in unit.params:
                address = self.pm.param_data(p.index)
                if address != p.address:
                    p.view = tensor_at(address, p.shape, self.param_dtype, self.device)
                    p.tensor.data = p.view
                    p.address = address

    def unbind(self, unit):
        """Points unit's parameters at no memory until its next fetch binds them: the model's
        own storage (or a replaced manager's) goes at once, not at the unit's first fetch."""
        with _guard.bypass():
            for p in unit.params:
                p.view = placeholder(p.shape, p.tensor.dtype, self.device)
                p.tensor.data = p.view
                p.address = None

    def _fetch(self, unit):
        if not unit.fetched:
            self.pm.fetch(unit.index)
            unit.fetched = True
        self._bind(unit)

    def _release(self, unit):
        if unit.fetched:
            self.pm.release(unit.index)
            unit.fetched = False

    # --- hooks ---------------------------------------------------------------------------------
    def _install_hooks(self):
        self._handles = []
        for unit in self.units:
            if unit is not self.root:
                self._handles.append(unit.module.register_forward_pre_hook(
                    lambda m, args, unit=unit: self._fetch(unit)))
                self._handles.append(unit.module.register_forward_hook(
                    lambda m, args, out, unit=unit: self._post_forward(unit, out)))
            for p in unit.trainable:
                with _guard.bypass():
                    self._handles.append(_hooks.after_accumulation(
                        p.tensor, lambda p=p: self._accumulated(p)))
        self._handles.append(self.model.register_forward_pre_hook(
            lambda m, args: self._pre_forward_root()))
        self._handles.append(self.model.register_forward_hook(
            lambda m, args, out: self._post_forward_root(out)))

    def _pre_forward_root(self):
        if self.root is not None:
            self._fetch(self.root)

    def _post_forward_root(self, output):
        # The root's parameters are resident (stage 3: unsharded), so backward reads them
        # without another fetch.
        if self.root is not None and self.root.fetched and not self._backward_started:
            self._release(self.root)
        if torch.is_grad_enabled():
            _hooks.first_gradient(list(_tensors(output)), self._backward_begins)

    def _post_forward(self, unit, output):
        # A recomputation inside this unit's own backward (checkpointing) must not release it.
        if not unit.open:
            self._release(unit)
        if torch.is_grad_enabled():
            _hooks.first_gradient(list(_tensors(output)),
                                  lambda unit=unit: self._pre_backward(unit))

    def _backward_begins(self):
        if not self._backward_started:
            self._backward_started = True
            _hooks.at_backward_end(self._backward_ends)

    def _pre_backward(self, unit):
        self._backward_begins()
        # A unit of frozen parameters only (replicated, resident) has no gradient to hand over.
        if unit.open or unit.ready or not unit.trainable:
            return
        if self._local_accumulation:
            self._fetch(unit)  # the values backward reads; torch's .grad takes the gradients
            unit.open = True
            return
        self._open(unit)

    def _open(self, unit, fetch=True):
        for other in self.units:
            if other.open and other is not unit:
                self._close(other)
        if fetch:
            self._fetch(unit)
        with _guard.bypass():
            for p in unit.trainable:
                window = tensor_at(self.pm.grad_data(p.index), p.shape, self.param_dtype,
                                   self.device)
                if p.tensor.grad is not None:
                    # Kept by torch: it arrived before the window was open, or no_sync
                    # accumulated it locally. zrt hands the window out zeroed.
                    window.add_(p.tensor.grad)
                p.tensor.grad = window
        unit.open = True

    def _close(self, unit):
        if self._local_accumulation:
            unit.open = False
            unit.ready = True
            if unit is not self.root:
                self._release(unit)
            return
        if not unit.open and self._has_torch_grads(unit):
            self._open(unit, fetch=False)  # only to copy the gradients torch kept
        order_before_zrt(self.device)
        self.pm.grad_ready(unit.index)
        unit.open = False
        unit.ready = True
        with _guard.bypass():
            for p in unit.trainable:
                p.tensor.grad = None
        if unit is not self.root:
            self._release(unit)

    @staticmethod
    def _has_torch_grads(unit):
        with _guard.bypass():
            return any(p.tensor.grad is not None for p in unit.trainable)

    def _accumulated(self, p):
        unit = p.unit
        if unit.ready:
            raise RuntimeError(
                f"zrt.torch: parameter {p.name!r} received a gradient after its unit "
                f"{unit.name!r} was handed to zrt: a parameter used outside its unit's backward "
                "must be in a unit that encloses every use")
        if not unit.open:
            return  # kept in torch's .grad; _open or _close copies it into the window
        unit.arrived += 1
        if unit.arrived == len(unit.trainable) and unit is not self.root:
            self._close(unit)

    def _backward_ends(self):
        try:
            for unit in reversed(self.units):
                if unit.trainable and not unit.ready:
                    self._close(unit)
            if not self._local_accumulation:
                self._held_at_step = self.pm.get_step()
        finally:
            self._backward_started = False
            for unit in self.units:
                unit.ready = unit.open = False
                unit.arrived = 0

    # --- between steps -------------------------------------------------------------------------
    @contextlib.contextmanager
    def no_sync(self):
        """Micro-batches inside accumulate their gradients without reducing (DDP's no_sync,
        FSDP2's set_requires_gradient_sync(False)); the first backward after the block reduces
        the sum. Stages 0/1, or ShardConfig(no_sync_accumulation=True): zrt accumulates in its
        full-size gradient buffer. Stages 2/3 otherwise: torch's own .grad accumulates (a full
        gradient in param_dtype per rank, as DDP holds, freed when the next synced backward
        hands it to zrt)."""
        native = self.stage <= 1 or self.config.no_sync_accumulation
        if native:
            self.pm.set_sync(False)
        else:
            self._local_accumulation = True
        try:
            yield
        finally:
            if native:
                self.pm.set_sync(True)
            else:
                self._local_accumulation = False

    def set_requires_gradient_sync(self, requires_sync):
        """FSDP2's spelling of no_sync, for loops written against fully_shard."""
        if not requires_sync and self._no_sync_context is None:
            self._no_sync_context = self.no_sync()
            self._no_sync_context.__enter__()
        elif requires_sync and self._no_sync_context is not None:
            context, self._no_sync_context = self._no_sync_context, None
            context.__exit__(None, None, None)

    _no_sync_context = None

    def grad_norm(self):
        """The global L2 norm of the reduced gradients (collective), as a tensor."""
        norm, _ = self.pm.grad_norm()
        return torch.tensor(norm)

    def clip_grad_norm_(self, max_norm):
        """zrt's fused global norm of the reduced gradients; the next step scales them by
        max_norm / (norm + 1e-6) when that is below 1 (torch.nn.utils.clip_grad_norm_'s rule).
        Returns the norm as a tensor. Call after backward, before the optimizer's step."""
        norm, _ = self.pm.grad_norm()
        coef = max_norm / (norm + 1e-6)
        self._grad_scale = coef if coef < 1.0 else None
        return torch.tensor(norm)

    _grad_scale = None

    def wait_params(self):
        """Every resident parameter holds this step's values from now until the next step
        (stages 1/2 publish them in the background after a step), so that they can be read
        at any time: evaluation, state_dict."""
        self.pm.wait_params()

    @contextlib.contextmanager
    def summon_full_params(self, writeback=False):
        """Inside, every parameter holds its full value on this rank. At stage 3 each unit is
        gathered in turn and copied into memory of torch's (the whole model's parameters in
        param_dtype, freed at exit), as FSDP's summon_full_params does. Collective: every rank
        enters it, between steps. writeback=True loads the values found at exit back into zrt
        (identical on every rank, as load_state_dict wants); otherwise changes to sharded
        parameters are lost."""
        copies = {p.index: values.clone() for p, values in self.gathered_params()
                  if not p.unit.resident}
        with _guard.bypass():
            for index, values in copies.items():
                self.params[index].tensor.data = values
        self._summoned += 1
        try:
            yield
            if writeback:
                self._write_back()
        finally:
            self._summoned -= 1
            with _guard.bypass():
                for index in copies:
                    p = self.params[index]
                    p.tensor.data = p.view
            for unit in self.units:
                if unit.fetched:
                    self._bind(unit)

    def _write_back(self):
        with _guard.bypass():
            values = {p.name: p.tensor.detach() for p in self.params}
        self.load_params(values)

    def state_dict(self):
        """The full parameters as copies, by the model's parameter names, in param_dtype. Call
        between steps, on every rank (stage 3 gathers each unit in turn)."""
        out = {}
        for p, values in self.gathered_params():
            out[p.name] = values.clone()
        return out

    def gathered_params(self):
        """(record, values) for every parameter, unit by unit, each unit gathered only while its
        values are taken; the values are valid until the next item. Collective."""
        self.wait_params()
        for unit in self.units:
            # Resident units are fetched too (a no-op wait), so that the fetches follow the
            # forward order zrt recorded for prefetching instead of departing from it.
            gather = not unit.fetched
            if gather:
                self._fetch(unit)
            try:
                with _guard.bypass():
                    for p in unit.params:
                        yield p, p.tensor.detach()
            finally:
                if gather:
                    self._release(unit)

    def load_state_dict(self, state_dict):
        """Sets every parameter from full tensors (identical on every rank), between steps."""
        missing = [p.name for p in self.params if p.name not in state_dict]
        if missing:
            raise KeyError(f"zrt.torch: load_state_dict misses {', '.join(missing)}")
        self.load_params({p.name: state_dict[p.name] for p in self.params})

    def load_params(self, values_by_name):
        """Loads the parameters named in values_by_name (full tensors, identical everywhere)."""
        self.wait_params()
        by_name = {p.name: p for p in self.params}
        for name, tensor in values_by_name.items():
            p = by_name[name]
            values = tensor.detach().to(self.device, torch.float32, copy=True).contiguous()
            if tuple(values.shape) != p.shape:
                raise ValueError(f"zrt.torch: {p.name} has shape {tuple(values.shape)} in the "
                                 f"state dict, {p.shape} in the model")
            self.pm.load_param(p.index, values.data_ptr(), _lib.F32)
        for unit in self.units:
            if unit.fetched:
                self._bind(unit)

    def sync_buffers(self):
        """Broadcasts rank 0's buffers (BatchNorm statistics) to every rank. shard() does it
        once; afterwards buffers evolve on each rank's own data, as under FSDP."""
        _state_dict.broadcast_buffers(self)

    def save(self, directory):
        """zrt's sharded checkpoint (every rank its shard), with the optimizer's layout."""
        self.pm.save(directory)
        if self.optimizer is not None:
            self.optimizer._save_layout(directory)

    def load(self, directory):
        """Loads a checkpoint saved at any N and stage; the optimizer continues from its step."""
        self.pm.load(directory)
        for unit in self.units:
            if unit.fetched:
                self._bind(unit)
        if self.optimizer is not None:
            self.optimizer._load_layout(directory)

    def export(self, path, dtype=torch.float32):
        """The full parameters in one safetensors file (rank 0 writes it; collective), from the
        f32 master, by the model's parameter names and, with the framework API, shapes."""
        self.pm.export_full(path, zrt_dtype(dtype, "export dtype"))

    def memory(self):
        return self.pm.memory()

    def footprint(self):
        """zrt's whole footprint on this rank beside the ZeRO formula, one line."""
        return self.pm.footprint()

    def stats(self):
        return self.pm.stats()

    def close(self):
        """Frees zrt's buffers (reading a parameter afterwards raises) and the communicator
        zrt.torch made itself. Called at interpreter exit for a model not closed before, so
        that every rank's connections close together and quietly."""
        if self.closed:
            return
        self.closed = True
        for handle in self._handles:
            handle.remove()
        _state_dict.uninstall(self)
        self.pm.destroy()
        if self._own_comm:
            self.comm.destroy()


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif hasattr(value, "to_tuple"):  # Hugging Face's ModelOutput
        yield from _tensors(value.to_tuple())


def _default_comm(config):
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return Comm.from_torch(timeout_s=config.timeout_s)
    return Comm.from_env(timeout_s=config.timeout_s)


def shard(model, stage=3, units=None, config=None, comm=None):
    """Shards `model` with zrt at ZeRO `stage` (0-3; default 3, full sharding, as FSDP2's
    fully_shard), in place, and returns the model; its zrt side is model.zrt (a ShardedModel).
    units: the submodules that are fetched and reduced together (default: the top-level children
    that have parameters; a ModuleList's children). comm: a zrt.Comm (default: over
    torch.distributed's group when it is initialised, else from the launcher's environment).
    The training loop is unchanged: loss.backward(), then the step of
    zrt.torch.Optimizer(model, torch.optim.X, ...)."""
    model.zrt = ShardedModel(model, stage, units, config, comm)
    return model
