"""One rank of the launch-interop tests: zrt and torch.distributed in one process.

mode: torch-then-zrt, zrt-then-torch (default init_process_group and zrt_comm_init_env, in
either order), from-torch (zrt over torch's group, zrt_comm_init_oob), zrt-only. Each rank
all-reduces its rank+1 through zrt (and through torch where torch is up) and prints
"OK rank R zrt S torch T"; a zrt error prints "ZRTERROR <status> <message>" and exits 3.
"""
import sys

import torch
import torch.distributed as dist

import zrt

mode = sys.argv[1]
timeout_s = float(sys.argv[2]) if len(sys.argv) > 2 else 60


def zrt_sum(comm):
    value = torch.tensor([float(comm.rank + 1)])
    comm.all_reduce(value.data_ptr(), 1, zrt.F32, zrt.SUM)
    return value.item()


def torch_sum():
    value = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(value)
    return value.item()


try:
    torch_total = None
    if mode == "torch-then-zrt":
        dist.init_process_group("gloo")
        comm = zrt.Comm.from_env(timeout_s=timeout_s)
    elif mode == "zrt-then-torch":
        comm = zrt.Comm.from_env(timeout_s=timeout_s)
        dist.init_process_group("gloo")
    elif mode == "from-torch":
        dist.init_process_group("gloo")
        comm = zrt.Comm.from_torch(timeout_s=timeout_s)
    else:
        comm = zrt.Comm.from_env(timeout_s=timeout_s)
    total = zrt_sum(comm)
    if dist.is_initialized():
        torch_total = torch_sum()
    print(f"OK rank {comm.rank} zrt {total} torch {torch_total}", flush=True)
    comm.destroy()
    if dist.is_initialized():
        dist.destroy_process_group()
except zrt.ZrtError as error:
    print(f"ZRTERROR {error.status_name} {error.message}", flush=True)
    sys.exit(3)
