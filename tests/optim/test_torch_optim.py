#!/usr/bin/python3
"""zrt's fused optimizers against torch.optim 1.13 (single-tensor paths) on the same values.

Loads libzrt through ctypes, calls zrt_optimizer_adamw/adam/sgd directly on numpy buffers (the
shard: several parameters of odd sizes with padding between them, two parameter groups, one
with weight decay and one without), and runs torch.optim.AdamW/Adam/SGD with foreach=False on
tensors of the same values for 100 steps, with a changing learning rate, loss scaling (the
gradients carry the scale; torch gets them unscaled as GradScaler does) and clipping (as
clip_grad_norm_ multiplies). Parameters and optimizer state must agree within 1 ulp per element,
and zrt's bf16 parameter copy must be torch's conversion of zrt's master. Lion, which torch 1.13
does not have, is compared with its usual torch-op formulation (lion-pytorch).

Usage: test_torch_optim.py PATH_TO_LIBZRT_SO. Exits 77 (skipped) when torch is not importable
or its CPU kernels are the default-capability ones (they do not fuse multiply-adds, and zrt's
formulas follow the AVX2/AVX-512 kernels every x86-64 machine of the last decade runs).
"""

import ctypes
import math
import os
import sys

SKIP = 1 if os.environ.get("CI") == "true" else 77  # CI must run it: there a skip fails

try:
    import numpy as np
    import torch
except Exception as error:  # noqa: BLE001 - any import failure means no torch here
    print(f"SKIP: torch (or numpy) is not importable with {sys.executable}: {error}")
    sys.exit(SKIP)


def cpu_capability():
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage:" in line:
            return line.split(":", 1)[1].strip()
    return "unknown"


ZRT_CONFIG_MAGIC = 0x7A72
ADAMW, ADAM, SGD, LION = 0, 1, 2, 3
ZRT_F32, ZRT_BF16 = 0, 3


class ShardPiece(ctypes.Structure):
    _fields_ = [("param", ctypes.c_int), ("param_offset", ctypes.c_size_t),
                ("shard_offset", ctypes.c_size_t), ("count", ctypes.c_size_t)]


class ParamSpan(ctypes.Structure):
    _fields_ = [("shard_offset", ctypes.c_size_t), ("count", ctypes.c_size_t),
                ("data", ctypes.c_void_p)]


class OptimizerArgs(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("master", ctypes.c_void_p),
                ("grad", ctypes.c_void_p), ("state", ctypes.POINTER(ctypes.c_void_p)),
                ("num_state", ctypes.c_int), ("count", ctypes.c_size_t),
                ("pieces", ctypes.POINTER(ShardPiece)), ("num_pieces", ctypes.c_size_t),
                ("step", ctypes.c_int64), ("mem_kind", ctypes.c_int),
                ("param_dtype", ctypes.c_int), ("param_spans", ctypes.POINTER(ParamSpan)),
                ("num_param_spans", ctypes.c_size_t),
                ("params_written", ctypes.POINTER(ctypes.c_int))]


class OptimizerConfig(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint32),
                ("version", ctypes.c_uint32), ("kind", ctypes.c_int), ("lr", ctypes.c_double),
                ("beta1", ctypes.c_double), ("beta2", ctypes.c_double), ("eps", ctypes.c_double),
                ("weight_decay", ctypes.c_double), ("momentum", ctypes.c_double),
                ("dampening", ctypes.c_double), ("nesterov", ctypes.c_int),
                ("bias_correction", ctypes.c_int), ("grad_scale", ctypes.c_double),
                ("clip_factor", ctypes.c_double), ("decay_mask", ctypes.c_void_p),
                ("decay_mask_count", ctypes.c_size_t), ("pool", ctypes.c_void_p)]


SIZES = [1, 7, 33, 1001, 4099]  # the parameters
PAD = 3                          # padding after each, as segment padding in a real shard
STEPS = 100
LOSS_SCALE = 512.0


def ordered(x):
    i = x.view(np.int32).astype(np.int64)
    return np.where(i < 0, np.int64(-(2**31)) - i, i)


def max_ulp(a, b):
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    both_nan = np.isnan(a) & np.isnan(b)
    d = np.abs(ordered(a) - ordered(b))
    d[both_nan] = 0
    return int(d.max()) if d.size else 0


class Shard:
    """The shard zrt's optimizer sees, and the torch tensors of the same parameters."""

    def __init__(self, lib, kind, slots, settings, seed):
        self.lib = lib
        self.kind = kind
        rng = np.random.default_rng(seed)
        self.offsets = []
        at = 0
        for n in SIZES:
            self.offsets.append(at)
            at += n + PAD
        self.count = at
        self.master = np.zeros(self.count, dtype=np.float32)
        for off, n in zip(self.offsets, SIZES):
            self.master[off:off + n] = rng.standard_normal(n).astype(np.float32)
        self.grad = np.zeros(self.count, dtype=np.float32)
        self.states = [np.zeros(self.count, dtype=np.float32) for _ in range(max(slots, 1))]
        self.copy = np.zeros(self.count, dtype=np.uint16)
        # Even parameters decay, odd ones do not (two torch parameter groups).
        self.decays = [i % 2 == 0 for i in range(len(SIZES))]
        self.mask = (ctypes.c_uint8 * len(SIZES))(*[1 if d else 0 for d in self.decays])
        self.pieces = (ShardPiece * len(SIZES))(
            *[ShardPiece(i, 0, off, n) for i, (off, n) in enumerate(zip(self.offsets, SIZES))])
        self.span = ParamSpan(0, self.count, self.copy.ctypes.data)
        self.state_ptrs = (ctypes.c_void_p * len(self.states))(
            *[s.ctypes.data for s in self.states])
        self.written = ctypes.c_int(0)
        self.config = OptimizerConfig()
        check(lib, lib.zrt_optimizer_config_init(ctypes.byref(self.config),
                                                 ctypes.sizeof(self.config), kind))
        for key, value in settings.items():
            setattr(self.config, key, value)
        self.config.decay_mask = ctypes.cast(self.mask, ctypes.c_void_p)
        self.config.decay_mask_count = len(SIZES)
        self.config.grad_scale = LOSS_SCALE
        self.slots = slots
        self.params = [torch.tensor(self.master[off:off + n].copy())
                       for off, n in zip(self.offsets, SIZES)]

    def set_grads(self, rng):
        """Gradients with the loss scale in them (what the reduction hands zrt)."""
        self.grad[:] = 0
        for off, n in zip(self.offsets, SIZES):
            self.grad[off:off + n] = (rng.standard_normal(n) * LOSS_SCALE).astype(np.float32)

    def torch_grads(self, clip):
        """The same gradients as torch sees them: GradScaler's unscale, then clipping's multiply."""
        inv_scale = torch.tensor(1.0 / LOSS_SCALE, dtype=torch.float32)
        coef = torch.tensor(clip, dtype=torch.float32)
        for p, off, n in zip(self.params, self.offsets, SIZES):
            g = torch.tensor(self.grad[off:off + n].copy())
            g.mul_(inv_scale)
            g.mul_(coef)
            p.grad = g

    def zrt_step(self, fn, step, lr, clip):
        self.config.lr = lr
        self.config.clip_factor = float(np.float32(clip))
        args = OptimizerArgs()
        args.size = ctypes.sizeof(args)
        args.master = self.master.ctypes.data
        args.grad = self.grad.ctypes.data
        args.state = self.state_ptrs
        args.num_state = self.slots
        args.count = self.count
        args.pieces = self.pieces
        args.num_pieces = len(SIZES)
        args.step = step
        args.mem_kind = 0
        args.param_dtype = ZRT_BF16
        args.param_spans = ctypes.pointer(self.span)
        args.num_param_spans = 1
        self.written.value = 0
        args.params_written = ctypes.pointer(self.written)
        check(self.lib, fn(ctypes.byref(args), ctypes.byref(self.config)))
        if self.written.value != 1:
            raise AssertionError("the optimizer did not report writing the parameter copy")


def check(lib, status):
    if status != 0:
        raise AssertionError(f"zrt status {status}: {lib.zrt_last_error().decode()}")


def lion_torch_step(params, states, lr, beta1, beta2, wd, decays):
    """Lion as lion-pytorch writes it, with torch ops."""
    for p, m, decay in zip(params, states, decays):
        if decay and wd != 0:
            p.mul_(1 - lr * wd)
        update = m.clone().mul_(beta1).add(p.grad, alpha=1 - beta1).sign_()
        p.add_(update, alpha=-lr)
        m.mul_(beta2).add_(p.grad, alpha=1 - beta2)


def run_case(lib, name, kind, fn, make_torch, settings, torch_state_keys, seed):
    slots = len(torch_state_keys)
    shard = Shard(lib, kind, slots, settings, seed)
    wd = settings.get("weight_decay", 0.0)
    groups = [{"params": [p for p, d in zip(shard.params, shard.decays) if d],
               "weight_decay": wd},
              {"params": [p for p, d in zip(shard.params, shard.decays) if not d],
               "weight_decay": 0.0}]
    opt = make_torch(groups) if make_torch is not None else None
    lion_states = [torch.zeros_like(p) for p in shard.params]
    rng = np.random.default_rng(seed + 1)
    base_lr = settings["lr"]
    for step in range(1, STEPS + 1):
        lr = base_lr * (0.5 + 0.5 * math.cos(0.07 * step))
        clip = 1.0 if step % 3 == 0 else 0.25 + 0.01 * (step % 50)
        shard.set_grads(rng)
        shard.torch_grads(clip)
        if opt is not None:
            for group in opt.param_groups:
                group["lr"] = lr
            opt.step()
        else:
            lion_torch_step(shard.params, lion_states, lr, settings["beta1"], settings["beta2"],
                            wd, shard.decays)
        shard.zrt_step(fn, step, lr, clip)
    worst = 0
    for i, (p, off, n) in enumerate(zip(shard.params, shard.offsets, SIZES)):
        worst = max(worst, max_ulp(shard.master[off:off + n], p.detach().numpy()))
        if opt is not None:
            torch_state = opt.state[p]
            for slot, key in enumerate(torch_state_keys):
                worst = max(worst, max_ulp(shard.states[slot][off:off + n],
                                           torch_state[key].numpy()))
        elif slots:
            worst = max(worst, max_ulp(shard.states[0][off:off + n], lion_states[i].numpy()))
    as_bf16 = torch.tensor(shard.master).to(torch.bfloat16).view(torch.int16).numpy()
    copy_ok = np.array_equal(as_bf16.view(np.uint16), shard.copy)
    status = "ok" if worst <= 1 and copy_ok else "FAIL"
    print(f"{status:4} {name:28} worst {worst} ulp over {STEPS} steps; bf16 copy "
          f"{'is' if copy_ok else 'is NOT'} torch's conversion")
    return worst <= 1 and copy_ok


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    capability = cpu_capability()
    if capability not in ("AVX2", "AVX512"):
        print(f"SKIP: torch's CPU capability is {capability}; the comparison needs its AVX2 or "
              "AVX-512 kernels")
        return SKIP
    lib = ctypes.CDLL(sys.argv[1])
    lib.zrt_last_error.restype = ctypes.c_char_p
    optim = torch.optim
    cases = [
        ("AdamW wd=0.01", ADAMW, lib.zrt_optimizer_adamw,
         lambda g: optim.AdamW(g, lr=1e-3, weight_decay=0.01, foreach=False),
         {"lr": 1e-3, "weight_decay": 0.01}, ["exp_avg", "exp_avg_sq"]),
        ("AdamW betas=(0.8,0.99) eps=1e-6", ADAMW, lib.zrt_optimizer_adamw,
         lambda g: optim.AdamW(g, lr=3e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1,
                               foreach=False),
         {"lr": 3e-3, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6, "weight_decay": 0.1},
         ["exp_avg", "exp_avg_sq"]),
        ("Adam", ADAM, lib.zrt_optimizer_adam,
         lambda g: optim.Adam(g, lr=1e-3, foreach=False), {"lr": 1e-3},
         ["exp_avg", "exp_avg_sq"]),
        ("Adam L2 wd=0.02", ADAM, lib.zrt_optimizer_adam,
         lambda g: optim.Adam(g, lr=1e-3, weight_decay=0.02, foreach=False),
         {"lr": 1e-3, "weight_decay": 0.02}, ["exp_avg", "exp_avg_sq"]),
        ("SGD", SGD, lib.zrt_optimizer_sgd,
         lambda g: optim.SGD(g, lr=0.01, foreach=False), {"lr": 0.01}, []),
        ("SGD momentum dampening wd", SGD, lib.zrt_optimizer_sgd,
         lambda g: optim.SGD(g, lr=0.01, momentum=0.9, dampening=0.1, weight_decay=0.01,
                             foreach=False),
         {"lr": 0.01, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01},
         ["momentum_buffer"]),
        ("SGD Nesterov wd", SGD, lib.zrt_optimizer_sgd,
         lambda g: optim.SGD(g, lr=0.01, momentum=0.8, nesterov=True, weight_decay=0.02,
                             foreach=False),
         {"lr": 0.01, "momentum": 0.8, "nesterov": 1, "weight_decay": 0.02},
         ["momentum_buffer"]),
        ("Lion (torch ops)", LION, lib.zrt_optimizer_lion, None,
         {"lr": 1e-4, "beta1": 0.9, "beta2": 0.99, "weight_decay": 0.1}, ["exp_avg"]),
    ]
    print(f"torch {torch.__version__}, CPU capability {capability}")
    ok = True
    for seed, (name, kind, fn, make, settings, keys) in enumerate(cases):
        ok = run_case(lib, name, kind, fn, make, settings, keys, 1000 + seed) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
