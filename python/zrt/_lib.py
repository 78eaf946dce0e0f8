"""ctypes declarations of libzrt's C API (include/zrt/zrt.h) and how the library is found.

No compiled extension: the same package serves any torch (1.13 here, 2.x on a GPU machine)
because it only ever talks to zrt's C ABI. Structs mirror zrt.h field for field; every struct
that can grow carries its size, so a newer libzrt accepts these (the ABI rule of zrt.h).
"""
import ctypes
import os

# --- finding libzrt ---------------------------------------------------------------------------
#  1. ZRT_LIBRARY: the path of libzrt.so (the meson test environment sets it);
#  2. the build tree this package lies in: <repo>/python/zrt -> <repo>/build*/zero/api/;
#  3. the library directory recorded at `meson install` (_install_paths.py, written by meson);
#  4. the dynamic loader's search path (libzrt.so.0).


def _candidates():
    explicit = os.environ.get("ZRT_LIBRARY")
    if explicit:
        return [explicit]
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    found = []
    try:
        for entry in sorted(os.listdir(repo)):
            path = os.path.join(repo, entry, "zero", "api", "libzrt.so")
            if entry.startswith("build") and os.path.exists(path):
                found.append(path)
    except OSError:
        pass
    try:
        from . import _install_paths  # written by meson install

        found.append(os.path.join(_install_paths.LIBDIR, "libzrt.so.0"))
    except ImportError:
        pass
    found.append("libzrt.so.0")
    return found


def _load():
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL), path
        except OSError as error:
            errors.append(f"{path}: {error}")
    raise ImportError(
        "zrt: cannot load libzrt (set ZRT_LIBRARY to the path of libzrt.so, e.g. "
        "build/zero/api/libzrt.so); tried: " + "; ".join(errors))


lib, library_path = _load()

# The structs below are zrt.h's, field for field (tests/python/test_abi.py compares them with
# the layout tests/api/test_abi_layout.c pins).

# --- enums ------------------------------------------------------------------------------------
SUCCESS, IN_PROGRESS, INVALID_ARGUMENT, INVALID_USAGE, SYSTEM_ERROR = 0, 1, 2, 3, 4
REMOTE_ERROR, TIMEOUT, UNSUPPORTED, OUT_OF_MEMORY, INTERNAL_ERROR = 5, 6, 7, 8, 9
CALLBACK_ERROR = 10
MAX_DIMS = 8
F32, F64, F16, BF16, I8, U8, I32, I64 = range(8)
SUM, AVG, MIN, MAX, PROD = range(5)
MEM_HOST, MEM_CUDA = 0, 1
# zrt_step_backup_t
STEP_BACKUP_NONE, STEP_BACKUP_FULL, STEP_BACKUP_SEGMENT = 0, 1, 2
PARAM_DEFAULT, PARAM_FROZEN, PARAM_UNSHARDED = 0, 1, 2
CONFIG_MAGIC = 0x7A72

status_t = ctypes.c_int
handle = ctypes.c_void_p
size_t = ctypes.c_size_t


# --- structs ----------------------------------------------------------------------------------
class CommConfig(ctypes.Structure):
    _fields_ = [("size", size_t), ("magic", ctypes.c_uint32), ("version", ctypes.c_uint32),
                ("timeout_ms", ctypes.c_int64), ("name", ctypes.c_char_p)]


OobAllgather = ctypes.CFUNCTYPE(status_t, ctypes.c_void_p, ctypes.c_void_p, size_t,
                                ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
OobTest = ctypes.CFUNCTYPE(status_t, ctypes.c_void_p)
OobFree = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class Oob(ctypes.Structure):
    _fields_ = [("struct_size", size_t), ("allgather", OobAllgather), ("test", OobTest),
                ("free", OobFree), ("user_data", ctypes.c_void_p), ("rank", ctypes.c_int),
                ("size", ctypes.c_int), ("local_rank", ctypes.c_int),
                ("local_size", ctypes.c_int)]


class PartitionConfig(ctypes.Structure):
    _fields_ = [("size", size_t), ("magic", ctypes.c_uint32), ("version", ctypes.c_uint32),
                ("stage", ctypes.c_int), ("param_dtype", ctypes.c_int),
                ("reduce_dtype", ctypes.c_int), ("master_dtype", ctypes.c_int),
                ("optimizer_slots", ctypes.c_int), ("bucket_bytes", size_t),
                ("prefetch_depth", ctypes.c_int), ("prefetch_bytes", size_t),
                ("max_live_bytes", size_t), ("persistence_threshold", size_t),
                ("alignment", size_t), ("mem_kind", ctypes.c_int),
                ("no_sync_accumulation", ctypes.c_int), ("step_backup", ctypes.c_int),
                ("prefetch_next_step", ctypes.c_int), ("offload_optimizer", ctypes.c_int),
                ("grad_accumulate", ctypes.c_int), ("shard_group_size", ctypes.c_int),
                ("hpz_group_size", ctypes.c_int64), ("grad_windows", ctypes.c_int)]


class ParamInfo(ctypes.Structure):
    _fields_ = [("size", size_t), ("unit", ctypes.c_int), ("numel", size_t),
                ("flags", ctypes.c_uint32), ("resident", ctypes.c_int),
                ("first_segment", ctypes.c_int), ("last_segment", ctypes.c_int),
                ("segment_offset", size_t), ("view_offset", size_t), ("dtype", ctypes.c_int),
                ("ndim", ctypes.c_int), ("dims", ctypes.c_int64 * MAX_DIMS)]


class ShardPiece(ctypes.Structure):
    _fields_ = [("param", ctypes.c_int), ("param_offset", size_t), ("shard_offset", size_t),
                ("count", size_t)]


class OptimizerArgs(ctypes.Structure):
    _fields_ = [("size", size_t), ("master", ctypes.POINTER(ctypes.c_float)),
                ("grad", ctypes.POINTER(ctypes.c_float)),
                ("state", ctypes.POINTER(ctypes.POINTER(ctypes.c_float))),
                ("num_state", ctypes.c_int), ("count", size_t),
                ("pieces", ctypes.POINTER(ShardPiece)), ("num_pieces", size_t),
                ("step", ctypes.c_int64)]


OptimizerFn = ctypes.CFUNCTYPE(status_t, ctypes.POINTER(OptimizerArgs), ctypes.c_void_p)

OPTIMIZER_ADAMW, OPTIMIZER_ADAM, OPTIMIZER_SGD, OPTIMIZER_LION = range(4)


class OptimizerConfig(ctypes.Structure):
    _fields_ = [("size", size_t), ("magic", ctypes.c_uint32), ("version", ctypes.c_uint32),
                ("kind", ctypes.c_int), ("lr", ctypes.c_double), ("beta1", ctypes.c_double),
                ("beta2", ctypes.c_double), ("eps", ctypes.c_double),
                ("weight_decay", ctypes.c_double), ("momentum", ctypes.c_double),
                ("dampening", ctypes.c_double), ("nesterov", ctypes.c_int),
                ("bias_correction", ctypes.c_int), ("grad_scale", ctypes.c_double),
                ("clip_factor", ctypes.c_double),
                ("decay_mask", ctypes.POINTER(ctypes.c_uint8)), ("decay_mask_count", size_t),
                ("pool", ctypes.c_void_p)]


class PartitionMemory(ctypes.Structure):
    _fields_ = [("size", size_t)] + [(name, ctypes.c_uint64) for name in (
        "full_params", "param_shard", "gradients", "grad_shard", "master", "optimizer_state",
        "buckets", "gather_window", "grad_staging", "model_state", "total")] + [
            ("theoretical_model_state", ctypes.c_double), ("parameters", ctypes.c_uint64),
            ("padded_parameters", ctypes.c_uint64), ("step_backup", ctypes.c_uint64),
            ("device_model_state", ctypes.c_uint64), ("device_total", ctypes.c_uint64),
            ("host_model_state", ctypes.c_uint64), ("host_total", ctypes.c_uint64),
            ("theoretical_device_model_state", ctypes.c_double),
            ("theoretical_host_model_state", ctypes.c_double),
            ("param_secondary", ctypes.c_uint64)]


class PartitionStats(ctypes.Structure):
    _fields_ = [("size", size_t), ("fetches", ctypes.c_uint64), ("gathers", ctypes.c_uint64),
                ("prefetches", ctypes.c_uint64), ("prefetch_hits", ctypes.c_uint64),
                ("evictions", ctypes.c_uint64), ("max_gathered_units", ctypes.c_int),
                ("max_gathered_bytes", ctypes.c_uint64), ("order_recorded", ctypes.c_int),
                ("order_invalidated", ctypes.c_int)]


class PartitionTraffic(ctypes.Structure):
    _fields_ = [("size", size_t), ("shard_group_size", ctypes.c_int),
                ("replica_groups", ctypes.c_int), ("intra_group_bytes", ctypes.c_uint64),
                ("inter_group_bytes", ctypes.c_uint64)]


# --- functions --------------------------------------------------------------------------------
P = ctypes.POINTER
_prototypes = {
    "zrt_status_string": (ctypes.c_char_p, [status_t]),
    "zrt_last_error": (ctypes.c_char_p, []),
    "zrt_get_version": (status_t, [P(ctypes.c_int)]),
    "zrt_comm_config_init": (status_t, [P(CommConfig), size_t]),
    "zrt_comm_init_env": (status_t, [P(CommConfig), P(handle)]),
    "zrt_oob_init": (status_t, [P(Oob), size_t]),
    "zrt_comm_init_oob": (status_t, [P(Oob), P(CommConfig), P(handle)]),
    "zrt_comm_rank": (status_t, [handle, P(ctypes.c_int)]),
    "zrt_comm_size": (status_t, [handle, P(ctypes.c_int)]),
    "zrt_comm_local_rank": (status_t, [handle, P(ctypes.c_int)]),
    "zrt_comm_local_size": (status_t, [handle, P(ctypes.c_int)]),
    "zrt_comm_destroy": (status_t, [handle]),
    "zrt_comm_abort": (status_t, [handle]),
    "zrt_comm_get_error": (status_t, [handle]),
    "zrt_stream_create": (status_t, [handle, ctypes.c_int, P(handle)]),
    "zrt_stream_destroy": (status_t, [handle]),
    "zrt_stream_synchronize": (status_t, [handle]),
    "zrt_all_reduce": (status_t, [handle, ctypes.c_void_p, ctypes.c_void_p, size_t, ctypes.c_int,
                                  ctypes.c_int, handle]),
    "zrt_all_gather": (status_t, [handle, ctypes.c_void_p, ctypes.c_void_p, size_t,
                                  ctypes.c_int, handle]),
    "zrt_broadcast": (status_t, [handle, ctypes.c_void_p, ctypes.c_void_p, size_t, ctypes.c_int,
                                 ctypes.c_int, handle]),
    "zrt_barrier": (status_t, [handle, handle]),
    "zrt_partition_config_init": (status_t, [P(PartitionConfig), size_t]),
    "zrt_partition_config_load": (status_t, [ctypes.c_char_p, P(PartitionConfig)]),
    "zrt_partition_create": (status_t, [handle, P(PartitionConfig), P(handle)]),
    "zrt_partition_destroy": (status_t, [handle]),
    "zrt_partition_add_unit": (status_t, [handle, ctypes.c_char_p, P(ctypes.c_int)]),
    "zrt_partition_add_param": (status_t, [handle, ctypes.c_int, ctypes.c_char_p, size_t,
                                           ctypes.c_uint32, P(ctypes.c_int)]),
    "zrt_partition_finalize": (status_t, [handle]),
    "zrt_partition_set_optimizer_slots": (status_t, [handle, ctypes.c_int]),
    "zrt_partition_load_param": (status_t, [handle, ctypes.c_int, ctypes.c_void_p,
                                            ctypes.c_int]),
    "zrt_partition_param_info": (status_t, [handle, ctypes.c_int, P(ParamInfo)]),
    "zrt_partition_shard_pieces": (status_t, [handle, P(P(ShardPiece)), P(size_t)]),
    "zrt_partition_fetch": (status_t, [handle, ctypes.c_int]),
    "zrt_partition_release": (status_t, [handle, ctypes.c_int]),
    "zrt_partition_param_data": (status_t, [handle, ctypes.c_int, P(ctypes.c_void_p)]),
    "zrt_partition_grad_data": (status_t, [handle, ctypes.c_int, P(ctypes.c_void_p)]),
    "zrt_partition_set_sync": (status_t, [handle, ctypes.c_int]),
    "zrt_partition_grad_ready": (status_t, [handle, ctypes.c_int]),
    "zrt_partition_grad_norm": (status_t, [handle, P(ctypes.c_double), P(ctypes.c_int)]),
    "zrt_partition_step": (status_t, [handle, OptimizerFn, ctypes.c_void_p]),
    "zrt_partition_memory": (status_t, [handle, P(PartitionMemory)]),
    "zrt_partition_stats": (status_t, [handle, P(PartitionStats)]),
    "zrt_partition_traffic": (status_t, [handle, P(PartitionTraffic)]),
    "zrt_partition_save": (status_t, [handle, ctypes.c_char_p]),
    "zrt_partition_load": (status_t, [handle, ctypes.c_char_p]),
    "zrt_partition_export_full": (status_t, [handle, ctypes.c_char_p, ctypes.c_int]),
    "zrt_partition_get_step": (status_t, [handle, P(ctypes.c_int64)]),
    "zrt_callback_error": (status_t, [ctypes.c_char_p]),
    "zrt_partition_add_param_shaped": (status_t, [handle, ctypes.c_int, ctypes.c_char_p,
                                                  ctypes.c_int, P(ctypes.c_int64), ctypes.c_int,
                                                  ctypes.c_uint32, P(ctypes.c_int)]),
    "zrt_partition_wait_params": (status_t, [handle]),
    "zrt_optimizer_config_init": (status_t, [P(OptimizerConfig), size_t, ctypes.c_int]),
    "zrt_optimizer_pool_create": (status_t, [ctypes.c_int, P(handle)]),
    "zrt_optimizer_pool_destroy": (status_t, [handle]),
}
for _name, (_restype, _argtypes) in _prototypes.items():
    _function = getattr(lib, _name)
    _function.restype = _restype
    _function.argtypes = _argtypes

# zrt's fused optimizers (zrt_optimizer_adamw, ...) as OptimizerFn pointers to the C functions
# themselves, for zrt_partition_step with an OptimizerConfig as user_data: no Python runs in
# the step.
FUSED_OPTIMIZERS = {
    kind: OptimizerFn(ctypes.cast(getattr(lib, "zrt_optimizer_" + name), ctypes.c_void_p).value)
    for kind, name in ((OPTIMIZER_ADAMW, "adamw"), (OPTIMIZER_ADAM, "adam"),
                       (OPTIMIZER_SGD, "sgd"), (OPTIMIZER_LION, "lion"))
}
