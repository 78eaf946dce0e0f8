"""zrt: Python bindings of the zrt C API (ctypes over libzrt; no compiled extension).

    import zrt
    comm = zrt.Comm.from_env()              # ranks from zrt-run / torchrun / mpirun / srun
    pm = zrt.Partition(comm, zrt.partition_config(stage=3))

zrt.torch shards a torch model (import it explicitly: `import zrt.torch`). libzrt is found
through ZRT_LIBRARY, the build tree, the installed library directory, then the loader.
"""
from . import _lib
from ._lib import (AVG, BF16, F16, F32, F64, MAX, MEM_CUDA, MEM_HOST, MIN, PARAM_DEFAULT,
                   PARAM_FROZEN, PARAM_UNSHARDED, PROD, SUM, library_path)
from .comm import Comm, Stream
from .errors import ZrtError, check, status_name
from .partition import Partition
from .partition import config as partition_config


__all__ = ["AVG", "BF16", "F16", "F32", "F64", "MAX", "MEM_CUDA", "MEM_HOST", "MIN",
           "PARAM_DEFAULT", "PARAM_FROZEN", "PARAM_UNSHARDED", "PROD", "SUM", "library_path",
           "Comm", "Stream", "ZrtError", "check", "status_name", "Partition", "partition_config",
           "version", "last_error"]


def version():
    """libzrt's version as "major.minor.patch"."""
    import ctypes

    code = ctypes.c_int()
    check("zrt_get_version", _lib.lib.zrt_get_version(ctypes.byref(code)))
    return f"{code.value // 10000}.{code.value // 100 % 100}.{code.value % 100}"


def last_error():
    raw = _lib.lib.zrt_last_error()
    return raw.decode(errors="replace") if raw else ""
