"""Communicators and streams: thin wrappers of zrt_comm_* and zrt_stream_*.

Comm.from_env() reads the launcher's variables (zrt-run, torchrun, mpirun, srun);
Comm.from_torch() meets over an initialised torch.distributed process group through
zrt_comm_init_oob, so a job that already has a torch group needs no store of zrt's own.
"""
import ctypes

from . import _exit, _lib
from .errors import call, callback_failed


def _config(timeout_s=None, name=None):
    config = _lib.CommConfig()
    call("zrt_comm_config_init", ctypes.byref(config), ctypes.sizeof(config))
    if timeout_s is not None:
        config.timeout_ms = int(timeout_s * 1000)
    if name is not None:
        config._name = name.encode()  # keeps the bytes alive while the struct is
        config.name = config._name
    return config


class Stream:
    """A zrt stream (an ordered queue of collectives) on a communicator."""

    def __init__(self, comm, mem_kind=_lib.MEM_HOST):
        self.comm = comm
        self.handle = ctypes.c_void_p()
        call("zrt_stream_create", comm.handle, mem_kind, ctypes.byref(self.handle))

    def synchronize(self):
        call("zrt_stream_synchronize", self.handle)

    def abort(self):
        """Fails every pending and future operation on this communicator at once (local); a
        destroy() afterwards closes its connections without waiting for the peers."""
        if self.handle:
            call("zrt_comm_abort", self.handle)

    def destroy(self):
        if self.handle:
            call("zrt_stream_destroy", self.handle)
            self.handle = ctypes.c_void_p()


class Comm:
    """A zrt communicator. destroy() (or the context manager) frees it."""

    def __init__(self, handle):
        self.handle = handle
        self._stream = None
        _exit.track(self)

    @classmethod
    def from_env(cls, timeout_s=None, name=None):
        handle = ctypes.c_void_p()
        call("zrt_comm_init_env", ctypes.byref(_config(timeout_s, name)), ctypes.byref(handle))
        return cls(handle)

    @classmethod
    def from_oob(cls, rank, size, allgather, local_rank=-1, local_size=-1, timeout_s=None,
                 name=None):
        """Over a caller's all-gather: allgather(data: bytes) -> list of every rank's bytes."""
        failures = []

        def gather(sendbuf, recvbuf, nbytes, user_data, request):
            try:
                mine = ctypes.string_at(sendbuf, nbytes) if nbytes else b""
                parts = allgather(mine)
                if len(parts) != size or any(len(p) != nbytes for p in parts):
                    raise RuntimeError(f"the all-gather returned {len(parts)} parts, not {size} "
                                       f"of {nbytes} bytes")
                ctypes.memmove(recvbuf, b"".join(parts), nbytes * size)
                request[0] = ctypes.c_void_p(1)
                return _lib.SUCCESS
            except Exception as error:  # reported through the status, never through ctypes
                failures.append(error)
                return callback_failed(error)

        oob = _lib.Oob()
        call("zrt_oob_init", ctypes.byref(oob), ctypes.sizeof(oob))
        callbacks = (_lib.OobAllgather(gather), _lib.OobTest(lambda request: _lib.SUCCESS),
                     _lib.OobFree(lambda request: None))
        oob.allgather, oob.test, oob.free = callbacks
        oob.rank, oob.size, oob.local_rank, oob.local_size = rank, size, local_rank, local_size
        handle = ctypes.c_void_p()
        try:
            call("zrt_comm_init_oob", ctypes.byref(oob), ctypes.byref(_config(timeout_s, name)),
                 ctypes.byref(handle))
        except Exception as error:
            if failures:
                raise error from failures[0]
            raise
        return cls(handle)

    @classmethod
    def from_torch(cls, group=None, timeout_s=None, name=None):
        """Over torch.distributed's (initialised) group, with all_gather_object as the oob."""
        import torch.distributed as dist

        def allgather(data):
            parts = [None] * dist.get_world_size(group)
            dist.all_gather_object(parts, data, group=group)
            return parts

        local_rank, local_size = -1, -1
        return cls.from_oob(dist.get_rank(group), dist.get_world_size(group), allgather,
                            local_rank, local_size, timeout_s, name)

    def _int(self, name):
        value = ctypes.c_int()
        call(name, self.handle, ctypes.byref(value))
        return value.value

    @property
    def rank(self):
        return self._int("zrt_comm_rank")

    @property
    def size(self):
        return self._int("zrt_comm_size")

    @property
    def local_rank(self):
        return self._int("zrt_comm_local_rank")

    @property
    def local_size(self):
        return self._int("zrt_comm_local_size")

    def stream(self):
        """A host stream of this communicator, made once (for the binding's small collectives;
        the default stream stays the framework's)."""
        if self._stream is None:
            self._stream = Stream(self)
        return self._stream

    def all_reduce(self, pointer, count, dtype, op, stream=None):
        stream = stream or self.stream()
        call("zrt_all_reduce", self.handle, pointer, pointer, count, dtype, op, stream.handle)
        stream.synchronize()

    def broadcast(self, pointer, count, dtype, root=0, stream=None):
        stream = stream or self.stream()
        call("zrt_broadcast", self.handle, pointer, pointer, count, dtype, root, stream.handle)
        stream.synchronize()

    def barrier(self, stream=None):
        stream = stream or self.stream()
        call("zrt_barrier", self.handle, stream.handle)
        stream.synchronize()

    def abort(self):
        """Fails every pending and future operation on this communicator at once (local); a
        destroy() afterwards closes its connections without waiting for the peers."""
        if self.handle:
            call("zrt_comm_abort", self.handle)

    def destroy(self):
        if self.handle:
            if self._stream is not None:
                self._stream.destroy()
                self._stream = None
            call("zrt_comm_destroy", self.handle)
            self.handle = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()
