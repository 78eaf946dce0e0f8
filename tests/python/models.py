"""The small models of the python suite: an MLP and a tiny GPT-like transformer."""
import math

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class MLP(torch.nn.Module):
    def __init__(self, width=32, depth=3, classes=5):
        super().__init__()
        self.inp = torch.nn.Linear(12, width)
        self.hidden = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))
        self.out = torch.nn.Linear(width, classes)
        self.checkpointing = False

    def forward(self, x):
        x = torch.tanh(self.inp(x))
        for layer in self.hidden:
            x = torch.tanh(checkpoint(layer, x) if self.checkpointing else layer(x))
        return self.out(x)


class Block(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.fc = torch.nn.Linear(dim, 4 * dim)
        self.fc2 = torch.nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        shape = (b, t, self.heads, d // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc(self.ln2(x))))


class TinyGPT(torch.nn.Module):
    def __init__(self, vocab=32, dim=32, heads=4, layers=2, context=16):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Parameter(torch.randn(context, dim) * 0.02)  # the root unit's
        self.blocks = torch.nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab)
        self.checkpointing = False

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        for block in self.blocks:
            x = checkpoint(block, x) if self.checkpointing else block(x)
        return self.head(self.ln(x))


def make(name, seed=0):
    torch.manual_seed(seed)
    return MLP() if name == "mlp" else TinyGPT()


GLOBAL_BATCH = 12  # divisible by 2 and 3


def batch(name, step, world, rank, dtype=torch.float32):
    """Step `step`'s slice for `rank`: the same global batch whatever the number of ranks."""
    g = torch.Generator().manual_seed(1000 + step)
    per_rank = GLOBAL_BATCH // world
    if name == "mlp":
        x = torch.randn(GLOBAL_BATCH, 12, generator=g)
        y = torch.randint(0, 5, (GLOBAL_BATCH,), generator=g)
    else:
        x = torch.randint(0, 32, (GLOBAL_BATCH, 16), generator=g)
        y = torch.roll(x, -1, dims=1)
    lo = rank * per_rank
    x, y = x[lo:lo + per_rank], y[lo:lo + per_rank]
    if name == "mlp":
        x = x.to(dtype)
    return x, y


def loss_of(name, logits, y):
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))


class FusedAdamWReference(torch.optim.Optimizer):
    """zrt's fused AdamW (zrt.torch.FusedOptimizer "adamw", kernels/optim/optim_body.inc) in
    Python, operation for operation: each f32 operation computed in float64 and rounded to f32
    (exact for *, /, +, sqrt; an fma as a*b + c in float64, exact but for a double rounding
    about once in 2**29), the constants rounded as the kernel rounds them. torch 1.13's AdamW
    has these bits; torch 2.x's rounds differently (lerp_, other kernels), so on torch 2.x the
    fused optimizer is compared with this class."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @staticmethod
    def _f32(x):
        if isinstance(x, torch.Tensor):
            return x.float().double()
        return torch.tensor(x, dtype=torch.float32).double()

    @torch.no_grad()
    def step(self, closure=None):
        r = self._f32
        for group in self.param_groups:
            lr, (beta1, beta2) = float(group["lr"]), group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                step = state["step"].item()
                g, w = p.grad.double(), p.double()
                m, v = state["exp_avg"].double(), state["exp_avg_sq"].double()
                if group["weight_decay"] != 0:
                    w = r(w * r(1.0 - lr * group["weight_decay"]))
                m = r(r(1.0 - beta1) * g + r(m * r(beta1)))
                v = r(r(r(1.0 - beta2) * g) * g + r(v * r(beta2)))
                bias2_sqrt = r(math.sqrt(1.0 - beta2 ** step))
                denom = r(r(r(v.sqrt()) / bias2_sqrt) + r(group["eps"]))
                w = r(w + r(r(r(-(lr / (1.0 - beta1 ** step))) * m) / denom))
                p.copy_(w)
                state["exp_avg"].copy_(m)
                state["exp_avg_sq"].copy_(v)


def fused_adamw_reference():
    """The optimizer class whose bits zrt's fused AdamW has: torch's AdamW on torch 1.x,
    FusedAdamWReference on torch 2.x."""
    return torch.optim.AdamW if torch.__version__.startswith("1.") else FusedAdamWReference
