"""zrt.torch.shard: a torch model's parameters become zrt's buffers, and hooks drive ZeRO.

How it fits together (docs/TORCH.md has the design):
  - Units are the modules the user names (default: the model's top-level children); the
    parameters that belong to no unit form a "root" unit, kept gathered at stage 3.
  - Every parameter's .data is a tensor over zrt's memory (zrt_partition_param_data), made
    again only when zrt hands out another address (stage 3 without stable addresses).
  - Forward: a unit's pre-hook fetches it, its post-hook releases it and hooks its outputs.
  - Backward: the first gradient reaching a unit's outputs fetches it again and opens its
    gradient window: every parameter's .grad becomes a view of the window, so autograd's
    AccumulateGrad adds into zrt's memory in place. When every parameter of the unit has
    accumulated (hooks on the AccumulateGrad nodes), the unit is handed to zrt (grad_ready)
    and released. A callback at the end of backward closes what is left.
"""
import contextlib

import torch

from .. import _lib
from ..comm import Comm
from ..partition import Partition
from ..partition import config as partition_config
from ._config import ShardConfig
from ._memory import order_before_zrt, tensor_at, zrt_dtype


class _Param:
    __slots__ = ("index", "name", "tensor", "unit", "shape", "trainable", "address", "accumulator")

    def __init__(self, index, name, tensor, unit):
        self.index = index
        self.name = name
        self.tensor = tensor
        self.unit = unit
        self.shape = tuple(tensor.shape)
        self.trainable = tensor.requires_grad
        self.address = None
        self.accumulator = None


class _Unit:
    def __init__(self, index, name, module):
        self.index = index
        self.name = name
        self.module = module
        self.params = []
        self.fetched = False
        self.open = False  # its gradient window is handed out
        self.ready = False  # grad_ready called in this backward
        self.arrived = 0  # AccumulateGrad calls seen in this backward
        self.deferred = False  # some gradient landed outside the window (copied at the end)
        self.resident = False  # always gathered (stages 0-2, frozen, persistent)

    @property
    def trainable(self):
        return [p for p in self.params if p.trainable]


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


class ShardedModel:
    """The zrt side of a sharded torch model. Made by zrt.torch.shard; also at model.zrt."""

    def __init__(self, model, stage, units, config, comm):
        self.model = model
        self.config = config or ShardConfig()
        self.stage = stage
        self.comm = comm if comm is not None else _default_comm(self.config)
        self._own_comm = comm is None
        params = list(model.parameters())
        if not params:
            raise ValueError("zrt.torch.shard: the model has no parameters")
        self.device = params[0].device
        self.param_dtype = self.config.param_dtype or params[0].dtype
        self._zdtype = zrt_dtype(self.param_dtype, "param_dtype")
        for p in params:
            if p.device != self.device:
                raise ValueError(f"zrt.torch.shard: parameters on {p.device} and {self.device}; "
                                 "move the model to one device first")
            zrt_dtype(p.dtype, "a parameter")
        self._build_units(units)
        self.pm = Partition(self.comm, self._partition_config())
        self._register()
        self.pm.finalize()
        self._load_initial_values()
        for p in self.params:
            if p.trainable:
                p.tensor.grad = None
        self._install_hooks()
        self._backward_started = False
        self.optimizer = None

    # --- construction -------------------------------------------------------------------------
    def _build_units(self, units):
        model = self.model
        if units is None:
            modules = []
            for child in model.children():
                # Containers without a forward of their own (ModuleList, ModuleDict) never run
                # hooks: their children are the units.
                if isinstance(child, (torch.nn.ModuleList, torch.nn.ModuleDict)):
                    modules.extend(child.children())
                else:
                    modules.append(child)
            modules = [m for m in modules if any(True for _ in m.parameters())]
        else:
            modules = list(units)
        names = {id(m): n for n, m in model.named_modules()}
        owner = {}
        self.units = []
        # The root unit first: its parameters are used around every other unit's forward.
        # Named "" so that zrt's exports keep its parameters' names unqualified (the others'
        # names start with their unit's module path, which zrt then leaves as they are).
        root = _Unit(0, "", model)
        self.units.append(root)
        for module in modules:
            if id(module) not in names:
                raise ValueError("zrt.torch.shard: a unit is not a submodule of the model")
            if module is model:
                raise ValueError("zrt.torch.shard: the model itself cannot be a unit (it is the "
                                 "root; name its submodules)")
            unit = _Unit(len(self.units), names[id(module)], module)
            self.units.append(unit)
            for p in module.parameters():
                if id(p) in owner and owner[id(p)] is not unit:
                    raise ValueError(f"zrt.torch.shard: a parameter of unit {unit.name!r} also "
                                     f"belongs to unit {owner[id(p)].name!r}: units must not "
                                     "overlap or share parameters")
                owner[id(p)] = unit
        self.params = []
        for name, tensor in model.named_parameters():
            unit = owner.get(id(tensor), root)
            param = _Param(len(self.params), name, tensor, unit)
            unit.params.append(param)
            self.params.append(param)
        if not root.params:
            self.units.pop(0)
            for i, unit in enumerate(self.units):
                unit.index = i
        self.root = self.units[0] if self.units[0].module is model else None

    def _partition_config(self):
        c = self.config
        fields = dict(stage=self.stage, param_dtype=self._zdtype,
                      reduce_dtype=zrt_dtype(c.reduce_dtype, "reduce_dtype"),
                      optimizer_slots=c.optimizer_slots,
                      mem_kind=_lib.MEM_CUDA if self.device.type == "cuda" else _lib.MEM_HOST,
                      no_sync_accumulation=int(c.no_sync_accumulation),
                      step_backup=int(c.step_backup),
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
        for unit in self.units:
            index = self.pm.add_unit(unit.name)
            assert index == unit.index
            for p in unit.params:
                flags = _lib.PARAM_DEFAULT if p.trainable else _lib.PARAM_FROZEN
                if unit is self.root and p.trainable:
                    flags = _lib.PARAM_UNSHARDED  # used all through forward and backward
                index = self.pm.add_param_shaped(unit.index, p.name, p.shape,
                                                 zrt_dtype(p.tensor.dtype, p.name), flags)
                assert index == p.index

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

    # --- parameters over zrt's memory ---------------------------------------------------------
    def _bind(self, unit):
        """Points every parameter of unit at zrt's current address for it (a no-op while the
        address is unchanged, which it always is for resident parameters and stable stage 3)."""
        for p in unit.params:
            address = self.pm.param_data(p.index)
            if address != p.address:
                p.tensor.data = tensor_at(address, p.shape, self.param_dtype, self.device)
                p.address = address

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
                    lambda m, args, unit=unit: self._pre_forward(unit)))
                self._handles.append(unit.module.register_forward_hook(
                    lambda m, args, out, unit=unit: self._post_forward(unit, out)))
            for p in unit.trainable:
                # The AccumulateGrad node of p; kept, so that the hook stays registered.
                p.accumulator = p.tensor.expand_as(p.tensor).grad_fn.next_functions[0][0]
                self._handles.append(p.accumulator.register_hook(
                    lambda grads_in, grads_out, p=p: self._accumulated(p)))
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
            for tensor in _tensors(output):
                if tensor.requires_grad:
                    tensor.register_hook(self._backward_begins)

    def _pre_forward(self, unit):
        self._fetch(unit)

    def _post_forward(self, unit, output):
        # A recomputation inside this unit's own backward (checkpointing) must not release it.
        if not unit.open:
            self._release(unit)
        if torch.is_grad_enabled():
            for tensor in _tensors(output):
                if tensor.requires_grad:
                    tensor.register_hook(lambda grad, unit=unit: self._pre_backward(unit))

    def _backward_begins(self, grad):
        if not self._backward_started:
            self._backward_started = True
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_ends)

    def _pre_backward(self, unit):
        self._backward_begins(None)
        # A unit of frozen parameters only (replicated, resident) has no gradient to hand over.
        if unit.open or unit.ready or not unit.trainable:
            return
        self._open(unit)

    def _open(self, unit, fetch=True):
        for other in self.units:
            if other.open and other is not unit:
                self._close(other)
        if fetch:
            self._fetch(unit)
        for p in unit.trainable:
            window = tensor_at(self.pm.grad_data(p.index), p.shape, self.param_dtype, self.device)
            if not self._accumulating_windows:
                window.zero_()
            if p.tensor.grad is not None:  # arrived before the window was open
                window.add_(p.tensor.grad)
            p.tensor.grad = window
        unit.open = True

    def _close(self, unit):
        if not unit.open and unit.deferred:
            self._open(unit, fetch=False)  # only to copy the gradients torch kept
        order_before_zrt(self.device)
        self.pm.grad_ready(unit.index)
        unit.open = False
        unit.ready = True
        for p in unit.trainable:
            p.tensor.grad = None
        if unit is not self.root:
            self._release(unit)

    def _accumulated(self, p):
        unit = p.unit
        if unit.ready:
            raise RuntimeError(
                f"zrt.torch: parameter {p.name!r} received a gradient after its unit "
                f"{unit.name!r} was handed to zrt: a parameter used outside its unit's backward "
                "must be in a unit that encloses every use")
        if not unit.open:
            unit.deferred = True  # kept in torch's .grad; _open copies it into the window
            return
        unit.arrived += 1
        if unit.arrived == len(unit.trainable) and unit is not self.root:
            self._close(unit)

    def _backward_ends(self):
        try:
            for unit in reversed(self.units):
                if unit.trainable and not unit.ready:
                    self._close(unit)
        finally:
            self._backward_started = False
            for unit in self.units:
                unit.ready = unit.open = unit.deferred = False
                unit.arrived = 0

    @property
    def _accumulating_windows(self):
        # zrt hands out zeroed windows when the framework accumulates (grad_accumulate);
        # a library without the mode hands out windows to overwrite, which the binding zeroes.
        return getattr(self.pm.config, "grad_accumulate", 0) == 1

    # --- between steps -------------------------------------------------------------------------
    @contextlib.contextmanager
    def no_sync(self):
        """Micro-batches inside accumulate locally without reducing (like DDP.no_sync)."""
        self.pm.set_sync(False)
        try:
            yield
        finally:
            self.pm.set_sync(True)

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

    def state_dict(self):
        """The full parameters as copies, by the model's parameter names, in param_dtype. Call
        between steps, on every rank (stage 3 gathers each unit)."""
        out = {}
        self.wait_params()
        for unit in self.units:
            gather = not unit.resident and not unit.fetched
            if gather:
                self._fetch(unit)
            for p in unit.params:
                out[p.name] = p.tensor.detach().clone()
            if gather:
                self._release(unit)
        return out

    def load_state_dict(self, state_dict):
        """Sets every parameter from full tensors (identical on every rank), between steps."""
        missing = [p.name for p in self.params if p.name not in state_dict]
        if missing:
            raise KeyError(f"zrt.torch: load_state_dict misses {', '.join(missing)}")
        for p in self.params:
            values = state_dict[p.name].detach().to(self.device, torch.float32).contiguous()
            if tuple(values.shape) != p.shape:
                raise ValueError(f"zrt.torch: {p.name} has shape {tuple(values.shape)} in the "
                                 f"state dict, {p.shape} in the model")
            self.pm.load_param(p.index, values.data_ptr(), _lib.F32)
        for unit in self.units:
            if unit.fetched:
                self._bind(unit)

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

    def stats(self):
        return self.pm.stats()

    def close(self):
        """Frees zrt's buffers (the parameters become invalid) and the communicator zrt.torch
        made itself."""
        for handle in self._handles:
            handle.remove()
        self.pm.destroy()
        if self._own_comm:
            self.comm.destroy()


def _default_comm(config):
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return Comm.from_torch(timeout_s=config.timeout_s)
    return Comm.from_env(timeout_s=config.timeout_s)


def shard(model, stage=2, units=None, config=None, comm=None):
    """Shards `model` with zrt at ZeRO `stage` (0-3), in place, and returns its ShardedModel
    (also model.zrt). units: the submodules that are fetched and reduced together (default:
    the top-level children that have parameters). comm: a zrt.Comm (default: over
    torch.distributed's group when it is initialised, else from the launcher's environment).
    The training loop is unchanged: loss.backward(), then the step of
    zrt.torch.Optimizer(model.zrt, torch.optim.X, ...)."""
    sharded = ShardedModel(model, stage, units, config, comm)
    model.zrt = sharded
    return sharded
