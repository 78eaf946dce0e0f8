"""One rank of the optimizer-wrapper checks (tests/python/test_optimizer.py), under zrt-run.

zrt.torch.Optimizer and FusedOptimizer as torch.optim.Optimizers: LR schedulers, param groups,
hyperparameters written between steps, state_dict round trips and the optimizer slots derived
from the optimizer. Each case trains zrt and, where there is one, torch DDP (gloo) in the same
process on the same batches; rank 0 writes every case's losses and verdicts as JSON.

    worker_optimizer.py --cases schedulers,groups,state,slots --out result.json
"""
import argparse
import copy
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import zrt.torch as zt  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--cases", required=True)
parser.add_argument("--out", required=True)
args = parser.parse_args()

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
STEPS = 4


def config(**kwargs):
    """Small buckets and no persistent parameters, so that the MLP spans several segments and
    stage 3 really gathers; optimizer_slots left to the optimizer unless given."""
    fields = dict(persistence_threshold=0, alignment=4, bucket_bytes=4096)
    fields.update(kwargs)
    return zt.ShardConfig(**fields)


def shard(stage, seed=0, name="mlp", **kwargs):
    model = models.make(name, seed=seed)
    zt.shard(model, stage=stage, config=config(**kwargs))
    return model, model.zrt


def split(module):
    """(matrices, vectors): the usual weight-decay split."""
    matrices = [p for p in module.parameters() if p.dim() >= 2]
    vectors = [p for p in module.parameters() if p.dim() < 2]
    return matrices, vectors


SCHEDULERS = {
    "none": None,
    "steplr": lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5),
    "lambdalr": lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + 3 * s)),
    # cycles lr and beta1 (AdamW) or momentum (SGD) at every step
    "onecycle": lambda opt: torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.01,
                                                                total_steps=STEPS),
}


def one_step(module, opt, sched, step, name="mlp", dtype=torch.float32):
    x, y = models.batch(name, step, world, rank, dtype)
    loss = models.loss_of(name, module(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    if sched is not None:
        sched.step()
    return loss.item()


def same_params(sharded, reference):
    ours = sharded.state_dict()
    theirs = dict(reference.named_parameters())
    return all(torch.equal(ours[n].float(), theirs[n].detach().float()) for n in ours)


def against_ddp(stage, make_zrt, make_torch, sched=None, steps=STEPS, edit=None, **kwargs):
    """zrt (make_zrt(model)) against DDP (make_torch(module)), both with scheduler `sched` and
    the same edits of their param groups (edit(opt, step) before each step)."""
    model, sharded = shard(stage, **kwargs)
    reference = models.make("mlp")
    ddp = torch.nn.parallel.DistributedDataParallel(reference)
    opt, ddp_opt = make_zrt(model), make_torch(reference)
    sched_z = sched(opt) if sched else None
    sched_d = sched(ddp_opt) if sched else None
    out = {"zrt": [], "ddp": [], "lr": [], "is_optimizer": isinstance(opt, torch.optim.Optimizer)}
    for step in range(steps):
        if edit is not None:
            edit(opt, step)
            edit(ddp_opt, step)
        out["lr"].append([float(g["lr"]) for g in opt.param_groups])
        out["zrt"].append(one_step(model, opt, sched_z, step))
        out["ddp"].append(one_step(ddp, ddp_opt, sched_d, step))
    params_equal = same_params(sharded, reference)  # collective: on every rank, always
    out["identical"] = out["zrt"] == out["ddp"] and params_equal
    out["slots"] = sharded.pm.config.optimizer_slots
    memory = sharded.memory()
    out["optimizer_state"], out["master"] = memory["optimizer_state"], memory["master"]
    sharded.close()
    return out


def adamw(params):
    return torch.optim.AdamW(params, lr=3e-3, weight_decay=0.01)


def fused_reference(params, **kwargs):
    """What FusedOptimizer("adamw") is compared with: torch 1.13's AdamW arithmetic
    (models.AdamW113 on torch 2.x, whose AdamW rounds exp_avg differently)."""
    return models.fused_adamw_reference()(params, **dict(dict(lr=3e-3, weight_decay=0.01),
                                                          **kwargs))


def zrt_adamw(model):
    return zt.Optimizer(model, torch.optim.AdamW, lr=3e-3, weight_decay=0.01)


def fused_adamw(model):
    return zt.FusedOptimizer(model, "adamw", lr=3e-3, weight_decay=0.01)


def sgd(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def fused_sgd(model):
    return zt.FusedOptimizer(model, "sgd", lr=0.05, momentum=0.9)


# --- cases -----------------------------------------------------------------------------------
def case_schedulers():
    """Every scheduler against DDP with the same scheduler: zrt.torch.Optimizer over AdamW and
    FusedOptimizer("adamw") at stages 2 and 3; FusedOptimizer("sgd") with OneCycleLR, which
    cycles its momentum."""
    out = {}
    for stage in (2, 3):
        for name, sched in SCHEDULERS.items():
            out[f"torch/{name}/{stage}"] = against_ddp(
                stage, lambda m: zrt_adamw(m), lambda r: adamw(r.parameters()), sched)
            out[f"fused-adamw/{name}/{stage}"] = against_ddp(
                stage, fused_adamw, lambda r: fused_reference(r.parameters()), sched)
    for name in ("none", "onecycle"):
        out[f"fused-sgd/{name}/3"] = against_ddp(3, fused_sgd, lambda r: sgd(r.parameters()),
                                                 SCHEDULERS[name])
    return out


def case_groups():
    """Param groups with their own lr and weight_decay (zrt.torch.Optimizer), weight decay by
    group (FusedOptimizer: 0 or one common value), and hyperparameters written between steps
    into any group, all against DDP with the same groups and writes."""
    def torch_groups(module):
        matrices, vectors = split(module)
        return [{"params": matrices, "lr": 3e-3, "weight_decay": 0.1},
                {"params": vectors, "lr": 1e-3, "weight_decay": 0.0}]

    def fused_groups(module):
        matrices, vectors = split(module)
        return [{"params": matrices, "weight_decay": 0.1},
                {"params": vectors, "weight_decay": 0.0}]

    def edit_torch(opt, step):
        if step == 2:  # the second group's lr and the first's betas, by hand
            opt.param_groups[1]["lr"] = 5e-3
            opt.param_groups[0]["betas"] = (0.8, 0.99)
            opt.param_groups[0]["eps"] = 1e-6

    def edit_fused(opt, step):
        if step == 2:  # the vectors decay too from now on, and every group's betas change
            opt.param_groups[1]["weight_decay"] = 0.1
            for group in opt.param_groups:
                group["betas"] = (0.8, 0.99)

    out = {}
    for stage in (2, 3):
        out[f"torch/{stage}"] = against_ddp(
            stage, lambda m: zt.Optimizer(m, torch.optim.AdamW, torch_groups(m)),
            lambda r: torch.optim.AdamW(torch_groups(r)), edit=edit_torch)
        out[f"fused/{stage}"] = against_ddp(
            stage, lambda m: zt.FusedOptimizer(m, "adamw", fused_groups(m), lr=3e-3),
            lambda r: fused_reference(fused_groups(r)), edit=edit_fused)
        # the no_decay argument, on one group: the same update as the groups above
        out[f"fused-no-decay/{stage}"] = against_ddp(
            stage, lambda m: zt.FusedOptimizer(m, "adamw", lr=3e-3, weight_decay=0.1,
                                               no_decay=split(m)[1]),
            lambda r: fused_reference(fused_groups(r)))
        # the torch optimizer's default groups without edits: the edits above must matter
        out[f"torch-unedited/{stage}"] = against_ddp(
            stage, lambda m: zt.Optimizer(m, torch.optim.AdamW, torch_groups(m)),
            lambda r: torch.optim.AdamW(torch_groups(r)))
    return out


def tensors_equal(a, b):
    """Deep equality of state dicts (tensors by value and dtype)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(tensors_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(tensors_equal(x, y) for x, y in zip(a, b))
    return a == b


STATE_OPTIMIZERS = {
    "torch-adamw": lambda m: zt.Optimizer(m, torch.optim.AdamW, lr=3e-3, weight_decay=0.01),
    "torch-sgd": lambda m: zt.Optimizer(m, torch.optim.SGD, lr=0.05, momentum=0.9),
    "fused-adamw": fused_adamw,
    "fused-sgd": fused_sgd,
}


def state_run(kind, stage, dtype, mode):
    """mode "whole": 6 steps. "resumed": 3 steps, model + optimizer + scheduler state dicts,
    a fresh model (another seed) and optimizer load them, 3 steps. "model-only": the same
    without the optimizer's state (what the loaded state must change)."""
    param_dtype = torch.bfloat16 if dtype == "bf16" else None
    in_dtype = param_dtype or torch.float32
    offload = dtype == "f32-offload"  # ZeRO-Offload: the fused step per segment

    def build(seed):
        model, sharded = shard(stage, seed=seed, param_dtype=param_dtype,
                               offload_optimizer=offload)
        opt = STATE_OPTIMIZERS[kind](model)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        return model, sharded, opt, sched

    model, sharded, opt, sched = build(0)
    losses = []
    out = {}
    for step in range(6 if mode == "whole" else 3):
        losses.append(one_step(model, opt, sched, step, dtype=in_dtype))
    if mode == "whole":
        sharded.close()
        return {"losses": losses}
    model_state = {k: v.clone() for k, v in sharded.state_dict().items()}
    opt_state = copy.deepcopy(opt.state_dict())
    sched_state = copy.deepcopy(sched.state_dict())
    out["state_keys"] = sorted({k for entry in opt_state["state"].values() for k in entry})
    out["state_params"] = len(opt_state["state"])
    sharded.close()
    model, sharded, opt, sched = build(1)
    sharded.load_state_dict(model_state)
    if mode == "resumed":
        opt.load_state_dict(copy.deepcopy(opt_state))
        sched.load_state_dict(sched_state)
        out["round_trip"] = tensors_equal(opt.state_dict(), opt_state)
    for step in range(3, 6):
        losses.append(one_step(model, opt, sched, step, dtype=in_dtype))
    if mode == "resumed":
        # and once more after the steps: the state dict is still the optimizer's
        again = opt.state_dict()
        out["steps_after"] = sorted({float(e["step"]) for e in again["state"].values()
                                     if "step" in e})
    sharded.close()
    out["losses"] = losses
    return out


def case_state():
    out = {}
    runs = [(kind, stage, "f32") for kind in STATE_OPTIMIZERS for stage in (2, 3)]
    runs += [("torch-adamw", 3, "bf16"), ("fused-adamw", 3, "bf16"),
             ("fused-adamw", 2, "f32-offload")]
    for kind, stage, dtype in runs:
        key = f"{kind}/{stage}/{dtype}"
        out[key] = {mode: state_run(kind, stage, dtype, mode)
                    for mode in ("whole", "resumed", "model-only")}
    return out


SLOT_OPTIMIZERS = {  # name: (zrt side, torch side or None, slots)
    "sgd-momentum": (lambda m: zt.Optimizer(m, torch.optim.SGD, lr=0.05, momentum=0.9),
                     lambda r: torch.optim.SGD(r.parameters(), lr=0.05, momentum=0.9), 1),
    "sgd": (lambda m: zt.Optimizer(m, torch.optim.SGD, lr=0.05),
            lambda r: torch.optim.SGD(r.parameters(), lr=0.05), 0),
    "adamw": (lambda m: zt.Optimizer(m, torch.optim.AdamW, lr=3e-3),
              lambda r: torch.optim.AdamW(r.parameters(), lr=3e-3), 2),
    "adam-amsgrad": (lambda m: zt.Optimizer(m, torch.optim.Adam, lr=3e-3, amsgrad=True),
                     lambda r: torch.optim.Adam(r.parameters(), lr=3e-3, amsgrad=True), 3),
    "fused-sgd": (lambda m: zt.FusedOptimizer(m, "sgd", lr=0.05),
                  lambda r: torch.optim.SGD(r.parameters(), lr=0.05), 0),
    "fused-sgd-momentum": (fused_sgd, lambda r: sgd(r.parameters()), 1),
    "fused-adamw": (fused_adamw, lambda r: fused_reference(r.parameters()), 2),
}


def case_slots():
    """Shard with the default ShardConfig, then build the optimizer: the manager's state arrays
    become the optimizer's slots, training matches DDP, the memory report counts those slots."""
    out = {}
    for stage in (2, 3):
        for name, (make_zrt, make_torch, _) in SLOT_OPTIMIZERS.items():
            out[f"{name}/{stage}"] = against_ddp(stage, make_zrt, make_torch, steps=3)
    # Lion has no torch reference: its slot count and a step
    model, sharded = shard(3)
    opt = zt.FusedOptimizer(model, "lion", lr=1e-4)
    one_step(model, opt, None, 0)
    memory = sharded.memory()
    out["fused-lion/3"] = {"slots": sharded.pm.config.optimizer_slots,
                           "optimizer_state": memory["optimizer_state"],
                           "master": memory["master"]}
    # after a step, an optimizer that needs more slots is refused, naming the setting
    try:
        zt.Optimizer(model, torch.optim.Adam, lr=1e-3, amsgrad=True)
        out["refused"] = None
    except ValueError as error:
        out["refused"] = str(error)
    sharded.close()
    # bf16: a manager whose slots changed keeps the f32 master exactly
    for label, slots in (("derived", {}), ("explicit", {"optimizer_slots": 1})):
        model, sharded = shard(3, param_dtype=torch.bfloat16, **slots)
        opt = zt.Optimizer(model, torch.optim.SGD, lr=0.05, momentum=0.9)
        losses = [one_step(model, opt, None, step, dtype=torch.bfloat16) for step in range(3)]
        params = {k: v.float().tolist() for k, v in sharded.state_dict().items()}
        out[f"bf16-{label}"] = {"losses": losses, "params": params,
                                "slots": sharded.pm.config.optimizer_slots}
        sharded.close()
    return out


CASES = {"schedulers": case_schedulers, "groups": case_groups, "state": case_state,
         "slots": case_slots}
results = {}
for case in args.cases.split(","):
    results[case] = CASES[case]()
if rank == 0:
    with open(args.out, "w") as f:
        json.dump(results, f)
dist.destroy_process_group()
