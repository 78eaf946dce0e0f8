"""zrt.torch.FusedOptimizer: zrt's own fused AdamW, Adam, SGD or Lion on this rank's shard.

zrt_partition_step is handed the C function (zrt_optimizer_adamw, ...) and a config struct, so
the step runs no Python: one pass over master, gradient and state that also writes the
parameter copy, in SIMD and on a thread pool (docs/API.md, "Fused optimizers"). The update is
torch.optim 1.13's single-tensor formula in its order of operations, so it equals
zrt.torch.Optimizer over torch.optim.AdamW (and Adam, SGD) bit for bit. A CPU model, or any
model sharded with ShardConfig(offload_optimizer=True): ZeRO-Offload, the optimizer run on the
host per segment as each reduction ends, its state in host memory.
Every per-element state tensor lives in zrt's optimizer slots, so zrt's checkpoints and its
step rollback cover all of it.
"""
import ctypes

from .. import _lib
from ..errors import call
from ._layout import read_layout, write_layout

_KINDS = {"adamw": _lib.OPTIMIZER_ADAMW, "adam": _lib.OPTIMIZER_ADAM,
          "sgd": _lib.OPTIMIZER_SGD, "lion": _lib.OPTIMIZER_LION}
_SLOTS = {"adamw": 2, "adam": 2, "lion": 1}  # sgd: 1 with momentum, else 0


class FusedOptimizer:
    """kind: "adamw", "adam", "sgd" or "lion", with torch.optim's argument names and defaults.
    no_decay: parameters of the model that weight decay skips (biases, norms); threads: the
    optimizer's threads (1: the calling thread; 0: every CPU of the rank's affinity mask).
    param_groups[0]["lr"] is read at every step, so a schedule can change it between steps."""

    def __init__(self, sharded, kind, lr=None, betas=None, eps=1e-8, weight_decay=None,
                 momentum=0.0, dampening=0.0, nesterov=False, no_decay=(), threads=1):
        if kind not in _KINDS:
            raise ValueError(f"zrt.torch.FusedOptimizer: kind {kind!r} is not one of "
                             f"{', '.join(_KINDS)}")
        if sharded.device.type != "cpu" and not sharded.config.offload_optimizer:
            raise ValueError(f"zrt.torch.FusedOptimizer runs on host memory; the model is on "
                             f"{sharded.device}: shard it with ShardConfig(offload_optimizer="
                             f"True) (master and state then live in host memory), or use "
                             f"zrt.torch.Optimizer with a torch optimizer")
        slots = _SLOTS.get(kind, 1 if momentum else 0)
        have = sharded.config.optimizer_slots
        if have != slots:
            raise ValueError(f"zrt.torch.FusedOptimizer: {kind} keeps {slots} state tensor(s) "
                             f"per element, zrt has optimizer_slots={have}: pass "
                             f"zrt.torch.ShardConfig(optimizer_slots={slots}) to shard()")
        self.sharded = sharded
        self.kind = kind
        config = _lib.OptimizerConfig()
        call("zrt_optimizer_config_init", ctypes.byref(config), ctypes.sizeof(config),
             _KINDS[kind])
        if betas is not None:
            config.beta1, config.beta2 = betas
        config.eps = eps
        if weight_decay is not None:
            config.weight_decay = weight_decay
        config.momentum, config.dampening, config.nesterov = momentum, dampening, int(nesterov)
        skipped = {id(t) for t in no_decay}
        by_tensor = {id(p.tensor): p for p in sharded.params}
        for tensor in no_decay:
            if id(tensor) not in by_tensor:
                raise ValueError("zrt.torch.FusedOptimizer: a parameter in no_decay is not a "
                                 "parameter of the sharded model")
        self._mask = (ctypes.c_uint8 * max(1, len(sharded.params)))(
            *[0 if id(p.tensor) in skipped else 1 for p in sharded.params])
        config.decay_mask = ctypes.cast(self._mask, ctypes.POINTER(ctypes.c_uint8))
        config.decay_mask_count = len(sharded.params)
        self._pool = ctypes.c_void_p()
        if threads != 1:
            call("zrt_optimizer_pool_create", threads, ctypes.byref(self._pool))
            config.pool = self._pool
        self._config = config
        self.param_groups = [{"lr": config.lr if lr is None else lr,
                              "betas": (config.beta1, config.beta2), "eps": config.eps,
                              "weight_decay": config.weight_decay, "momentum": momentum}]
        self._fn = _lib.FUSED_OPTIMIZERS[_KINDS[kind]]
        sharded.optimizer = self

    def step(self):
        """zrt_partition_step with the fused optimizer (collective). The clip factor of
        sharded.clip_grad_norm_, if any, scales the gradients in the same pass."""
        self._config.lr = self.param_groups[0]["lr"]
        scale = self.sharded._grad_scale
        self._config.clip_factor = 1.0 if scale is None else scale
        try:
            self.sharded.pm.step(self._fn, ctypes.addressof(self._config))
        finally:
            self.sharded._grad_scale = None

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

    # --- checkpoints: the state is zrt's slots; only the kind is checked ------------------------
    def _save_layout(self, directory):
        if self.sharded.comm.rank == 0:
            write_layout(directory, "zrt-" + self.kind, None, {})

    def _load_layout(self, directory):
        read_layout(directory, "zrt-" + self.kind)
