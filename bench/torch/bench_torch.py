"""Step time and memory of zrt.torch at stages 1-3 against torch DDP and ZeroRedundancyOptimizer
(gloo), in the same processes, the variants alternating step by step.

    build/tools/zrt-run/zrt-run -n 2 /usr/bin/python3 bench/torch/bench_torch.py --steps 12

Every variant trains its own copy of the same model with AdamW on the same batches. A step is
forward + backward + optimizer step, timed on every rank and taken as the slowest rank's
(one small all-reduce after the timer stops). Reported: the median over the steps after
--warmup, the ratio to DDP's median, and the model state per rank: measured from zrt's arenas
for zrt, counted from the tensors for torch (parameters, gradients, optimizer state), beside
the ZeRO formula. torch in f32 keeps no separate master: 16P (DDP), 8P + 8P/N
(ZeroRedundancyOptimizer). zrt keeps an f32 master beside the f32 parameters (its formula,
zrt_partition_memory's theoretical_model_state): 8P + 12P/N (stage 1), 4P + 16P/N (stage 2),
20P/N (stage 3). The machine may be shared: compare ratios, not absolute times.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import zrt.torch as zt  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--warmup", type=int, default=2)
parser.add_argument("--width", type=int, default=1024)
parser.add_argument("--layers", type=int, default=6)
parser.add_argument("--batch", type=int, default=16)
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--variants", default="ddp,zero,zrt1,zrt2,zrt3")
args = parser.parse_args()
torch.set_num_threads(args.threads)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


def make_model():
    torch.manual_seed(0)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers)


def tensor_bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


class TorchVariant:
    def __init__(self, name):
        self.name = name
        self.model = DDP(make_model())
        params = list(self.model.parameters())
        if name == "zero":
            self.opt = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW,
                                               lr=1e-4)
        else:
            self.opt = torch.optim.AdamW(params, lr=1e-4)

    def step(self, x):
        self.model(x).square().mean().backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=False)

    def model_state(self):
        params = list(self.model.parameters())
        grads = [p.grad for p in params]
        state = self.opt.optim.state if self.name == "zero" else self.opt.state
        states = [v for s in state.values() for v in s.values()
                  if isinstance(v, torch.Tensor) and v.dim() > 0]
        return tensor_bytes(params) + tensor_bytes(grads) + tensor_bytes(states)

    def formula(self):
        P, N = parameters, world
        return 16 * P if self.name == "ddp" else 8 * P + 8 * P / N


class ZrtVariant:
    def __init__(self, stage):
        self.name = f"zrt{stage}"
        self.model = make_model()
        self.sharded = zt.shard(self.model, stage=stage,
                                config=zt.ShardConfig(prefetch_next_step=stage == 3)).zrt
        self.opt = zt.Optimizer(self.sharded, torch.optim.AdamW, lr=1e-4)

    def step(self, x):
        self.model(x).square().mean().backward()
        self.opt.step()

    def model_state(self):
        return self.sharded.memory()["model_state"]

    def formula(self):
        return self.sharded.memory()["theoretical_model_state"]


variants = []
for name in args.variants.split(","):
    variants.append(ZrtVariant(int(name[3:])) if name.startswith("zrt") else TorchVariant(name))
parameters = sum(p.numel() for p in make_model().parameters())
times = {v.name: [] for v in variants}
generator = torch.Generator().manual_seed(rank)
for step in range(args.warmup + args.steps):
    x = torch.randn(args.batch, args.width, generator=generator)
    for variant in variants:  # alternating: each variant sees the same machine state
        dist.barrier()
        began = time.perf_counter()
        variant.step(x)
        elapsed = torch.tensor([time.perf_counter() - began])
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        if step >= args.warmup:
            times[variant.name].append(elapsed.item())


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


P, N = parameters, world
if rank == 0:
    base = median(times["ddp"]) if "ddp" in times else None
    print(f"bench_torch: {P} parameters ({args.layers} x Linear({args.width}, {args.width})), "
          f"batch {args.batch} per rank, {N} ranks, AdamW f32, {args.steps} steps after "
          f"{args.warmup} warm-up, variants alternating step by step")
    print("| variant | median step (ms) | vs DDP | model state / rank (MiB) | ZeRO formula "
          "(MiB) | vs DDP's state |")
    print("|---|---|---|---|---|---|")
    ddp_state = next((v.model_state() for v in variants if v.name == "ddp"), None)
    for variant in variants:
        m = median(times[variant.name])
        state = variant.model_state()
        ratio = f"{m / base:.2f}x" if base else "-"
        state_ratio = f"{state / ddp_state:.2f}x" if ddp_state else "-"
        print(f"| {variant.name} | {1000 * m:.1f} | {ratio} | {state / 2**20:.1f} | "
              f"{variant.formula() / 2**20:.1f} | {state_ratio} |")
for variant in variants:
    if isinstance(variant, ZrtVariant):
        variant.sharded.close()
dist.destroy_process_group()
