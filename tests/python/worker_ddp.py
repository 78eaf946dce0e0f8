"""One rank of a comparison between zrt.torch and torch DDP (gloo), in the same process.

Run under zrt-run (tests/python/test_ddp.py does): torch's default init_process_group uses
MASTER_PORT and zrt its own store (ZRT_STORE_PORT), so both meet without extra variables.
For each stage asked for, both train the same model from the same seed on the same batches,
step by step alternately; rank 0 writes, per stage, the loss curves and the final parameters
(JSON, and .pt files of the parameters).
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import stages  # noqa: E402
import zrt.torch as zt  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="mlp")
parser.add_argument("--stage", default="2", help="stages, comma-separated: one run each")
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--dtype", default="f32")
parser.add_argument("--optimizer", default="adamw")
parser.add_argument("--checkpointing", action="store_true")
parser.add_argument("--accum", type=int, default=1, help="micro-batches per step")
parser.add_argument("--no-sync", action="store_true", help="all but the last without sync")
parser.add_argument("--no-sync-in-zrt", action="store_true",
                    help="ShardConfig(no_sync_accumulation): zrt accumulates, not torch's .grad")
parser.add_argument("--save", default=None, help="zrt checkpoint folder after the steps")
parser.add_argument("--resume", default=None, help="zrt checkpoint folder to start from")
parser.add_argument("--no-ddp", action="store_true")
parser.add_argument("--dump-loaded", action="store_true", help="write the parameters after load")
parser.add_argument("--prefetch-depth", type=int, default=None)
parser.add_argument("--offload", action="store_true", help="ShardConfig(offload_optimizer)")
parser.add_argument("--units", choices=["default", "blocks", "reversed"], default="default",
                    help="explicit units: the GPT's blocks (root parameters before and after "
                         "them), or the same in reverse order")
parser.add_argument("--compile", action="store_true", help="torch.compile the zrt model")
parser.add_argument("--out", required=True)
args = parser.parse_args()

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


def make_opt(params):
    if args.optimizer in ("sgd", "zrt-sgd"):
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    if args.optimizer == "zrt-adamw":
        # zrt's fused AdamW has torch 1.13's bits; torch 2.x's AdamW rounds exp_avg otherwise
        # (lerp_), 1 ulp apart: DDP then runs the same arithmetic in Python.
        return models.fused_adamw_reference()(params, lr=3e-3, weight_decay=0.01)
    return torch.optim.AdamW(params, lr=3e-3, weight_decay=0.01)


def make_zrt_opt(sharded):
    """zrt's side: the torch optimizer through zrt.torch.Optimizer, or (zrt-*) zrt's fused one
    with the same settings."""
    if args.optimizer == "zrt-sgd":
        return zt.FusedOptimizer(sharded, "sgd", lr=0.05, momentum=0.9)
    if args.optimizer == "zrt-adamw":
        return zt.FusedOptimizer(sharded, "adamw", lr=3e-3, weight_decay=0.01)
    return zt.Optimizer(sharded, make_opt)


def zrt_owners(sharded):
    """Which rank owns each element in zrt's layout, by parameter name."""
    mine = [(p.param, p.param_offset, p.count) for p in sharded.pm.shard_pieces()]
    every = [None] * world
    dist.all_gather_object(every, mine)
    owners = {p.name: torch.full((p.tensor.numel(),), -1, dtype=torch.int64)
              for p in sharded.params}
    for r, pieces in enumerate(every):
        for index, offset, count in pieces:
            owners[sharded.params[index].name][offset:offset + count] = r
    return owners


def zrt_order_hook(state, bucket):
    """Averages with zrt's arithmetic, so that DDP can be compared bit for bit at N > 2 (float
    addition is not associative: with 3 ranks gloo's ring and zrt's associate the three terms
    differently). Stages 2/3 (reduce-scatter AVG): each gradient times 1/N in f32, summed for
    the elements rank b owns in ring order b+1, b+2, ..., b. Stage 1 (reduce-scatter SUM, then
    1/N): the same sum of unscaled gradients, then times 1/N. Stage 0 (all-reduce AVG of a small
    bucket, the direct algorithm): scaled gradients summed in rank order 0, 1, ..., N-1."""
    stage, owner_of = state
    grads = bucket.buffer()
    scale = 1.0 / world
    parts = [torch.empty_like(grads) for _ in range(world)]
    dist.all_gather(parts, grads if stage == 1 else grads * scale)
    if stage == 0:
        out = parts[0]
        for k in range(1, world):
            out = out + parts[k]
    else:
        owner = torch.cat([owner_of[id(p)] for p in bucket.parameters()])
        out = torch.empty_like(grads)
        for b in range(world):
            acc = parts[(b + 1) % world]
            for k in range(2, world + 1):
                acc = acc + parts[(b + k) % world]
            out = torch.where(owner == b, acc, out)
        if stage == 1:
            out = out * scale
    future = torch.futures.Future()
    future.set_result(out)
    return future


def train(forward, sync_off, step, in_dtype):
    """One optimizer step's micro-batches; returns this rank's loss of the step."""
    total = 0.0
    for micro in range(args.accum):
        x, y = models.batch(args.model, step * args.accum + micro, world, rank, in_dtype)
        last = micro == args.accum - 1
        with sync_off() if args.no_sync and not last else _nothing():
            loss = models.loss_of(args.model, forward(x), y) / args.accum
            loss.backward()
        total += loss.item()
    return total


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def run(stage, out):
    model = models.make(args.model)
    reference = models.make(args.model)
    param_dtype = torch.bfloat16 if args.dtype == "bf16" else None
    config = zt.ShardConfig(param_dtype=param_dtype, persistence_threshold=0, alignment=4,
                            bucket_bytes=4096, no_sync_accumulation=args.no_sync_in_zrt,
                            prefetch_depth=args.prefetch_depth,
                            offload_optimizer=args.offload,
                            optimizer_slots=1 if args.optimizer.endswith("sgd") else 2)
    units = None
    if args.units != "default":
        units = list(model.blocks) if args.units == "blocks" else list(reversed(model.blocks))
    model = zt.shard(model, stage=stage, config=config, units=units)
    sharded = model.zrt
    opt = make_zrt_opt(sharded)
    if args.resume:
        sharded.load(args.resume)
        if args.dump_loaded:
            loaded = {k: v.float() for k, v in sharded.state_dict().items()}
            if rank == 0:
                torch.save(loaded, out + ".loaded.pt")
    model.checkpointing = args.checkpointing
    if not args.no_ddp:
        ddp = torch.nn.parallel.DistributedDataParallel(reference)
        if world > 2:
            by_name = zrt_owners(sharded)
            owner_of = {id(p): by_name[n] for n, p in reference.named_parameters()}
            ddp.register_comm_hook((stage, owner_of), zrt_order_hook)
        ddp_opt = make_opt(ddp.parameters())
    in_dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    start = sharded.pm.get_step()
    zrt_losses, ddp_losses = [], []
    forward = torch.compile(model) if args.compile else model
    for step in range(start, start + args.steps):
        zrt_losses.append(train(forward, sharded.no_sync, step, in_dtype))
        opt.step()
        if not args.no_ddp:
            ddp_losses.append(train(ddp, ddp.no_sync, step, torch.float32))
            ddp_opt.step()
            ddp_opt.zero_grad()
    if args.save:
        sharded.save(args.save)
    params = {k: v.float() for k, v in model.state_dict().items()}  # gathered by zrt.torch
    gathered = [None] * world
    dist.all_gather_object(gathered, zrt_losses)
    if rank == 0:
        torch.save(params, out + ".zrt.pt")
        if not args.no_ddp:
            torch.save({k: v.detach() for k, v in reference.state_dict().items()},
                       out + ".ddp.pt")
    if args.compile:
        from torch._dynamo.utils import counters
        compiled = {"graphs": counters["stats"]["unique_graphs"],
                    "graph_breaks": sum(counters["graph_break"].values())}
    result = {"zrt": zrt_losses, "ddp": ddp_losses, "zrt_all_ranks": gathered,
              "compiled": compiled if args.compile else None,
              "step": sharded.pm.get_step(), "stats": sharded.stats(),
              "memory": sharded.memory()}
    sharded.close()
    return result


stages.run_and_write(run, args.stage, args.out, rank)
dist.destroy_process_group()
