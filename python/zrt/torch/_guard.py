"""Parameters that never fault: a guard on every parameter zrt.torch shards.

At stage 3 a released unit's memory is unmapped (zrt keeps only its shard), and a kernel that
read a parameter's values then would fault the process. Every sharded parameter's class becomes
ZrtParameter, an nn.Parameter whose __torch_function__ checks, before any torch function reads
or writes it, that its values are there (the unit is fetched or resident, or inside
summon_full_params), and raises a RuntimeError naming what to call otherwise. Metadata (shape,
dtype, device, requires_grad, ...) is always readable. `.grad` reads raise while zrt holds the
step's reduced, sharded gradients (between backward and the optimizer's step), so that
torch.nn.utils.clip_grad_norm_ and other readers of .grad fail loudly instead of seeing None.

Autograd's own reads (saved tensors, AccumulateGrad) run in C++ and never pass here; the cost is
one Python call per torch function on a parameter (a few microseconds), not per element.
"""
import contextlib

import torch

_disable = getattr(torch._C, "DisableTorchFunctionSubclass", None) or torch._C.DisableTorchFunction

# Functions that read no values: always allowed, whatever the unit's state.
_METADATA = set()
for _name in ("shape", "dtype", "device", "requires_grad", "is_leaf", "grad_fn", "ndim",
              "layout", "names", "is_cuda", "is_sparse", "is_quantized", "is_meta", "name",
              "_backward_hooks", "_post_accumulate_grad_hooks", "output_nr", "_version",
              "is_nested", "itemsize", "nbytes"):
    _descriptor = getattr(torch.Tensor, _name, None)
    if _descriptor is not None and hasattr(_descriptor, "__get__"):
        _METADATA.add(_descriptor.__get__)
for _name in ("size", "dim", "numel", "nelement", "element_size", "stride", "is_contiguous",
              "data_ptr", "requires_grad_", "register_hook", "register_post_accumulate_grad_hook",
              "is_floating_point", "is_complex", "get_device", "storage_offset", "__hash__",
              "__len__", "is_shared", "is_pinned"):
    _function = getattr(torch.Tensor, _name, None)
    if _function is not None:
        _METADATA.add(_function)
_GRAD_GET = torch.Tensor.grad.__get__


class ZrtParameter(torch.nn.Parameter):
    """An nn.Parameter whose values zrt owns (see the module's docstring). _zrt_param is the
    binding's record (its name, unit and ShardedModel)."""

    _bypass = 0  # >0 inside the binding's own code, which knows the state it touches

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if not ZrtParameter._bypass and func not in _METADATA:
            _check_arguments(func, args, kwargs)
        with _disable():
            return func(*args, **kwargs)


def _check_arguments(func, args, kwargs):
    for value in args:
        if isinstance(value, ZrtParameter):
            _check(value, func)
        elif isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, ZrtParameter):
                    _check(item, func)
    for value in kwargs.values():
        if isinstance(value, ZrtParameter):
            _check(value, func)


def _check(tensor, func):
    record = tensor.__dict__.get("_zrt_param")
    if record is None:
        return
    sharded = record.unit.sharded
    if func == _GRAD_GET:  # a new method-wrapper at every lookup: equal, not identical
        if sharded.grads_held:
            raise RuntimeError(
                f"zrt.torch: the gradient of {record.name!r} is held by zrt, reduced and sharded "
                f"across ranks (stage {sharded.stage}), until the optimizer's step; "
                "torch.nn.utils.clip_grad_norm_ and other readers of .grad cannot see it. Use "
                "model.zrt.clip_grad_norm_(max_norm) (zrt's global norm; the step applies the "
                "clip) and model.zrt.grad_norm() to read the norm")
        return
    if sharded.closed:
        raise RuntimeError(f"zrt.torch: parameter {record.name!r} was freed by model.zrt.close()")
    if not sharded.readable(record.unit):
        raise RuntimeError(
            f"zrt.torch: parameter {record.name!r} is sharded across ranks outside its unit's "
            f"forward and backward (stage {sharded.stage}, unit {record.unit.name!r}), so its "
            "values are not on this rank. Read it inside `with model.zrt.summon_full_params():` "
            "(collective: every rank enters it), or take a full copy with model.state_dict()")


@contextlib.contextmanager
def bypass():
    """The binding's own reads and writes of parameters whose state it manages itself."""
    ZrtParameter._bypass += 1
    try:
        yield
    finally:
        ZrtParameter._bypass -= 1


def guard(tensor, record):
    """Makes tensor (an nn.Parameter) a ZrtParameter bound to the binding's record."""
    tensor.__class__ = ZrtParameter
    tensor.__dict__["_zrt_param"] = record

