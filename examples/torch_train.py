"""A small GPT-like character model on /usr/share/dict/words, sharded by zrt.torch.

    build/tools/zrt-run/zrt-run -n 2 /opt/zrt/venv/bin/python3 examples/torch_train.py --stage 3

The training loop is torch's own: forward, loss.backward(), clip, step. zrt.torch.shard makes
every parameter a tensor over zrt's memory; zrt gathers, reduces and shards them (ZeRO stage
0-3), and AdamW runs inside zrt's step on this rank's shard: torch's (the default), or zrt's
fused one (--optimizer zrt-adamw). Run it from the repository root
after a build (the package finds build/zero/api/libzrt.so; elsewhere set ZRT_LIBRARY), or
anywhere after `meson install`.
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import zrt  # noqa: E402
import zrt.torch as zt  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--stage", type=int, default=3)
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--batch", type=int, default=16, help="sequences per rank and step")
parser.add_argument("--context", type=int, default=32)
parser.add_argument("--dim", type=int, default=96)
parser.add_argument("--layers", type=int, default=3)
parser.add_argument("--lr", type=float, default=3e-3)
parser.add_argument("--clip", type=float, default=1.0)
parser.add_argument("--optimizer", choices=["torch-adamw", "zrt-adamw"], default="torch-adamw",
                    help="torch.optim.AdamW inside zrt's step, or zrt's fused AdamW (no Python "
                         "in the step, the same bits)")
parser.add_argument("--optimizer-threads", type=int, default=1,
                    help="zrt-adamw's threads (0: every CPU of the rank's affinity mask)")
parser.add_argument("--bf16", action="store_true", help="bf16 parameters (f32 master in zrt)")
parser.add_argument("--checkpointing", action="store_true", help="torch.utils.checkpoint")
parser.add_argument("--save", default=None, help="zrt checkpoint folder at the end")
parser.add_argument("--corpus", default="/usr/share/dict/words")
args = parser.parse_args()
torch.set_num_threads(1)


class Block(torch.nn.Module):
    def __init__(self, dim, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.fc, self.out = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.qkv(self.ln1(x)).split(d, dim=2))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        x = x + self.proj((att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(torch.nn.Module):
    def __init__(self, vocab, dim, layers, context):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Parameter(torch.randn(context, dim) * 0.02)
        self.blocks = torch.nn.ModuleList(Block(dim) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab)
        self.checkpointing = False

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]].to(self.tok.weight.dtype)
        for block in self.blocks:
            x = torch.utils.checkpoint.checkpoint(block, x) if self.checkpointing else block(x)
        return self.head(self.ln(x))


text = open(args.corpus, encoding="utf-8", errors="replace").read()
chars = sorted(set(text))
index = {c: i for i, c in enumerate(chars)}
data = torch.tensor([index[c] for c in text], dtype=torch.long)

comm = zrt.Comm.from_env()  # zrt-run, torchrun, mpirun or srun
rank, world = comm.rank, comm.size
torch.manual_seed(0)
model = GPT(len(chars), args.dim, args.layers, args.context)
model.checkpointing = args.checkpointing
config = zt.ShardConfig(param_dtype=torch.bfloat16 if args.bf16 else None,
                        persistence_threshold=1024, prefetch_next_step=args.stage == 3)
model = zt.shard(model, stage=args.stage, comm=comm, config=config)
sharded = model.zrt
decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
if args.optimizer == "zrt-adamw":
    optim = zt.FusedOptimizer(sharded, "adamw", lr=args.lr, weight_decay=0.1, no_decay=no_decay,
                              threads=args.optimizer_threads)
else:
    optim = zt.Optimizer(sharded, torch.optim.AdamW,
                         [{"params": decay, "weight_decay": 0.1},
                          {"params": no_decay, "weight_decay": 0.0}], lr=args.lr)

numel = sum(p.numel() for p in model.parameters())
memory = sharded.memory()
if rank == 0:
    print(f"torch_train: {numel} parameters, {len(chars)} characters, stage {args.stage}, "
          f"{world} ranks, {len(sharded.units)} units; model state per rank "
          f"{memory['model_state'] / 1024:.0f} KiB (ZeRO formula "
          f"{memory['theoretical_model_state'] / 1024:.0f} KiB)", flush=True)
    print(f"torch_train: {sharded.footprint()}", flush=True)

generator = torch.Generator().manual_seed(1 + rank)
times = []
for step in range(1, args.steps + 1):
    start = torch.randint(0, len(data) - args.context - 1, (args.batch,), generator=generator)
    x = torch.stack([data[s:s + args.context] for s in start.tolist()])
    y = torch.stack([data[s + 1:s + 1 + args.context] for s in start.tolist()])
    began = time.perf_counter()
    logits = model(x)
    loss = F.cross_entropy(logits.float().view(-1, len(chars)), y.view(-1))
    loss.backward()
    norm = sharded.clip_grad_norm_(args.clip)
    optim.step()
    times.append(time.perf_counter() - began)
    if rank == 0 and (step % 10 == 0 or step == 1):
        print(f"step {step:3d}  loss {loss.item():.4f}  grad norm {norm.item():.3f}  "
              f"{1000 * sorted(times)[len(times) // 2]:.1f} ms/step (median)", flush=True)

# Greedy completion: every rank runs the same forward (stage 3 gathers are collective).
with torch.no_grad():
    idx = torch.tensor([[index[c] for c in "\nst"]])
    for _ in range(24):
        nxt = model(idx[:, -args.context:])[0, -1].float().argmax()
        idx = torch.cat([idx, nxt.view(1, 1)], dim=1)
if rank == 0:
    sample = "".join(chars[i] for i in idx[0].tolist()).strip().replace("\n", " | ")
    print(f"sample: {sample}", flush=True)
if args.save:
    sharded.save(args.save)
    if rank == 0:
        print(f"saved a zrt checkpoint to {args.save} (loadable at any N and stage)")
sharded.close()
comm.destroy()
