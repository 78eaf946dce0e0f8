"""Partition managers: a thin wrapper of zrt_partition_* (one method per C call).

The binding in zrt.torch is built on this; a framework other than torch can use it directly.
Pointers are returned as ints (addresses); the caller wraps them in its own tensors.
"""
import ctypes

from . import _exit, _lib
from .errors import call

_CONFIG_FIELDS = [name for name, _ in _lib.PartitionConfig._fields_
                  if name not in ("size", "magic", "version")]


def config(**fields):
    """A zrt_partition_config_t with zrt's defaults and `fields` applied (names as in zrt.h)."""
    c = _lib.PartitionConfig()
    call("zrt_partition_config_init", ctypes.byref(c), ctypes.sizeof(c))
    for name, value in fields.items():
        if name not in _CONFIG_FIELDS:
            raise TypeError(f"zrt partition config has no field {name!r}; fields: "
                            + ", ".join(_CONFIG_FIELDS))
        setattr(c, name, int(value))
    return c


class Partition:
    """A zrt partition manager on `comm` (which must outlive it)."""

    def __init__(self, comm, cfg=None):
        self.comm = comm
        self.config = cfg if cfg is not None else config()
        self.handle = ctypes.c_void_p()
        call("zrt_partition_create", comm.handle, ctypes.byref(self.config),
             ctypes.byref(self.handle))
        _exit.track(self)

    def add_unit(self, name):
        unit = ctypes.c_int()
        call("zrt_partition_add_unit", self.handle, name.encode(), ctypes.byref(unit))
        return unit.value

    def add_param(self, unit, name, numel, flags=_lib.PARAM_DEFAULT):
        param = ctypes.c_int()
        call("zrt_partition_add_param", self.handle, unit, name.encode(), numel, flags,
             ctypes.byref(param))
        return param.value

    def add_param_shaped(self, unit, name, shape, dtype, flags=_lib.PARAM_DEFAULT):
        """With its shape and the framework's dtype."""
        param = ctypes.c_int()
        dims = (ctypes.c_int64 * max(1, len(shape)))(*shape)
        call("zrt_partition_add_param_shaped", self.handle, unit, name.encode(), len(shape), dims,
             dtype, flags, ctypes.byref(param))
        return param.value

    def wait_params(self):
        """Waits until the parameters the last step published have landed (stages 1/2); with a
        library without the call, fetching units does it (see zrt.torch)."""
        call("zrt_partition_wait_params", self.handle)

    def finalize(self):
        call("zrt_partition_finalize", self.handle)

    def set_optimizer_slots(self, slots):
        """Replaces the optimizer state with `slots` zeroed arrays (collective, before the first
        step); the config then reads the new count."""
        call("zrt_partition_set_optimizer_slots", self.handle, int(slots))
        self.config.optimizer_slots = int(slots)

    def load_param(self, param, pointer, dtype):
        call("zrt_partition_load_param", self.handle, param, pointer, dtype)

    def param_info(self, param):
        info = _lib.ParamInfo()
        info.size = ctypes.sizeof(info)
        call("zrt_partition_param_info", self.handle, param, ctypes.byref(info))
        return info

    def shard_pieces(self):
        pieces = ctypes.POINTER(_lib.ShardPiece)()
        count = ctypes.c_size_t()
        call("zrt_partition_shard_pieces", self.handle, ctypes.byref(pieces), ctypes.byref(count))
        return [pieces[i] for i in range(count.value)]

    def fetch(self, unit):
        call("zrt_partition_fetch", self.handle, unit)

    def release(self, unit):
        call("zrt_partition_release", self.handle, unit)

    def param_data(self, param):
        pointer = ctypes.c_void_p()
        call("zrt_partition_param_data", self.handle, param, ctypes.byref(pointer))
        return pointer.value

    def grad_data(self, param):
        pointer = ctypes.c_void_p()
        call("zrt_partition_grad_data", self.handle, param, ctypes.byref(pointer))
        return pointer.value

    def set_sync(self, sync):
        call("zrt_partition_set_sync", self.handle, 1 if sync else 0)

    def grad_ready(self, unit):
        call("zrt_partition_grad_ready", self.handle, unit)

    def grad_norm(self):
        """(global L2 norm of the reduced gradients, whether any is inf/NaN). Collective."""
        norm = ctypes.c_double()
        nonfinite = ctypes.c_int()
        call("zrt_partition_grad_norm", self.handle, ctypes.byref(norm), ctypes.byref(nonfinite))
        return norm.value, bool(nonfinite.value)

    def step(self, optimizer_fn, user_data=None):
        """optimizer_fn is an _lib.OptimizerFn (kept alive by the caller during the call)."""
        call("zrt_partition_step", self.handle, optimizer_fn, user_data)

    def memory(self):
        m = _lib.PartitionMemory()
        m.size = ctypes.sizeof(m)
        call("zrt_partition_memory", self.handle, ctypes.byref(m))
        return {name: getattr(m, name) for name, _ in m._fields_ if name != "size"}

    def footprint(self):
        """One line: every byte this rank's manager holds (total; device and host with
        offload) beside the ZeRO formula's model state, as zrt-mem and train_lm print it."""
        return footprint_line(self.memory())

    def stats(self):
        s = _lib.PartitionStats()
        s.size = ctypes.sizeof(s)
        call("zrt_partition_stats", self.handle, ctypes.byref(s))
        return {name: getattr(s, name) for name, _ in s._fields_ if name != "size"}

    def traffic(self):
        """Bytes sent inside the shard group and across the groups (zrt_partition_traffic)."""
        t = _lib.PartitionTraffic()
        t.size = ctypes.sizeof(t)
        call("zrt_partition_traffic", self.handle, ctypes.byref(t))
        return {name: getattr(t, name) for name, _ in t._fields_ if name != "size"}

    def save(self, directory):
        call("zrt_partition_save", self.handle, str(directory).encode())

    def load(self, directory):
        call("zrt_partition_load", self.handle, str(directory).encode())

    def export_full(self, path, dtype=_lib.F32):
        call("zrt_partition_export_full", self.handle, str(path).encode(), dtype)

    def get_step(self):
        step = ctypes.c_int64()
        call("zrt_partition_get_step", self.handle, ctypes.byref(step))
        return step.value

    def destroy(self):
        if self.handle:
            call("zrt_partition_destroy", self.handle)
            self.handle = ctypes.c_void_p()


def footprint_line(memory):
    """memory: a Partition.memory() dict. The buffers and the step backup come on top of the
    model state; with offload_optimizer both figures sum the device and the host side."""
    where = (f" (device {memory['device_total'] / 1024:.0f} KiB, host "
             f"{memory['host_total'] / 1024:.0f} KiB)" if memory["host_total"] else "")
    formula = memory["theoretical_model_state"]
    ratio = f"{memory['total'] / formula:.2f}x" if formula > 0 else "-"
    return (f"zrt total per rank {memory['total'] / 1024:.0f} KiB{where}; "
            f"total / ZeRO formula {ratio}")
