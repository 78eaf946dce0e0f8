"""GPT-2 side by side: torch DDP, FSDP2 (fully_shard) and zrt.torch stages 1-3, in the same
processes, the variants alternating step by step (project issue 46; docs/TORCH_BENCH.md has
the measured tables).

One rank of the comparison, launched by zrt-run (torch's init_process_group("gloo") meets on
MASTER_PORT, zrt on its own store):

    HF_HUB_OFFLINE=1 build/tools/zrt-run/zrt-run -n 2 /opt/zrt/venv/bin/python3 \\
        bench/torch/bench_fsdp2.py --dtype f32

or the whole measurement at once, the alternating run and then each variant alone in its own
processes (for its peak RSS), merged into one table (this process launches zrt-run itself):

    /opt/zrt/venv/bin/python3 bench/torch/bench_fsdp2.py --all -n 2 --dtype bf16

Model: transformers' GPT2LMHeadModel from a GPT2Config (random init, dropout 0, tied
embeddings, no KV cache), the same seed for every variant; each variant is its own instance,
built once and kept alive. A step is forward (loss on the input ids as labels), backward and
the optimizer step, timed on every rank between a barrier and an all-reduce MAX of the
elapsed time (the slowest rank's). zrt's stages 1/2 publish the new parameters in the
background after a step; the timed step includes ShardedModel.wait_params(), so that no
variant's work spills into the next variant's timed step.

Variants:
  ddp      DistributedDataParallel (defaults); bf16: torch.autocast("cpu", bfloat16)
  fsdp2    fully_shard on every block, then the root (CPU mesh, gloo,
           reshard_after_forward=True); bf16: MixedPrecisionPolicy(bf16, reduce f32)
  fsdp1    FullyShardedDataParallel (FSDP1, device_id cpu), only if asked for
  zrtS     zrt.torch.shard(stage=S, units=the blocks); bf16: ShardConfig(param_dtype=bf16,
           reduce_dtype=f32); zrt.torch.Optimizer over torch.optim.AdamW
  zrtSf    the same with zrt.torch.FusedOptimizer(..., "adamw") (zrt's own, no Python)
Every variant's optimizer is AdamW(lr, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01).

Reported per variant (rank 0 prints a markdown table): median step time after --warmup, its
ratio to DDP's and FSDP2's medians, the model state per rank (zrt: zrt_partition_memory's
model_state; torch: the bytes of the parameters, the gradients as they stand after backward
and the optimizer state, local shards for DTensors) against the ZeRO formula, the peak RSS per
rank (the largest over the ranks; in the alternating run it covers every variant of the
process, so --all also runs each variant alone) and the loss of the last step (all variants
train the same model on the same batches).
"""
import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
ALL_VARIANTS = "ddp,fsdp2,zrt1,zrt2,zrt3,zrt1f,zrt2f,zrt3f"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", choices=("f32", "bf16"), default="f32")
    p.add_argument("--variants", default=ALL_VARIANTS,
                   help=f"comma-separated (default {ALL_VARIANTS}; also fsdp1)")
    p.add_argument("--only", default=None, help="one variant alone in this process (its RSS)")
    p.add_argument("--steps", type=int, default=10, help="timed steps after the warm-up")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=1, help="sequences per rank per step")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads per rank")
    p.add_argument("--json", default=None, help="rank 0 writes the results there")
    # --all: the driver (not under zrt-run).
    p.add_argument("--all", action="store_true",
                   help="launch the alternating run and one run per variant alone, merge")
    p.add_argument("-n", "--ranks", type=int, default=2, help="--all: ranks")
    p.add_argument("--only-steps", type=int, default=3, help="--all: steps of a lone run")
    p.add_argument("--zrt-run", default=None, help="--all: the launcher (default build/...)")
    p.add_argument("--timeout", type=int, default=3600, help="--all: zrt-run --timeout")
    return p.parse_args(argv)


# --- the table -------------------------------------------------------------------------------

def mib(b):
    return "-" if b is None else f"{b / 2**20:.1f}"


def ratio(a, b):
    return "-" if not a or not b else f"{a / b:.2f}x"


def table(result, rss_alone=None):
    """The markdown table of one run's result (and, with --all, each variant's lone RSS)."""
    rows = result["variants"]
    med = {v["name"]: v["median_s"] for v in rows}
    ddp, fsdp = med.get("ddp"), med.get("fsdp2") or med.get("fsdp1")
    fsdp_name = "FSDP1" if "fsdp1" in med and "fsdp2" not in med else "FSDP2"
    lines = []
    head = ["variant", "dtype", "step median (ms)", "vs DDP", f"vs {fsdp_name}",
            "model state / rank (MiB)", "ZeRO formula (MiB)", "formula"]
    if rss_alone is not None:
        head += ["peak RSS / rank, alone (MiB)", "peak RSS / rank, all variants (MiB)"]
    else:
        head += ["peak RSS / rank (MiB)"]
    head += ["loss, last step"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for v in rows:
        cells = [v["name"], result["dtype"], f"{1000 * v['median_s']:.1f}",
                 ratio(v["median_s"], ddp), ratio(v["median_s"], fsdp),
                 mib(v["model_state"]), mib(v["formula"]), v["formula_text"]]
        if rss_alone is not None:
            cells += [mib(rss_alone.get(v["name"])), mib(result["peak_rss"])]
        else:
            cells += [mib(result["peak_rss"])]
        cells += [f"{v['loss']:.4f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def zrt_buffers(result):
    """zrt's buffers beyond the model state (zrt_partition_memory, rank 0), which the peak RSS
    also holds."""
    rows = [v for v in result["variants"] if v.get("zrt_memory")]
    if not rows:
        return ""
    keys = ["model_state", "step_backup", "buckets", "gather_window", "grad_staging", "total"]
    lines = ["| zrt buffers / rank (MiB) | " + " | ".join(keys) + " |",
             "|" + "---|" * (len(keys) + 1)]
    for v in rows:
        lines.append(f"| {v['name']} | " + " | ".join(mib(v["zrt_memory"][k]) for k in keys)
                     + " |")
    return "\n".join(lines)


def goals(result):
    """The issue's goals, each with its figure and verdict."""
    med = {v["name"]: v for v in result["variants"]}
    out = []
    fsdp = med.get("fsdp2") or med.get("fsdp1")
    for suffix, optimizer in (("", "torch AdamW"), ("f", "zrt fused AdamW")):
        z3 = med.get("zrt3" + suffix)
        if z3 and fsdp:
            r = z3["median_s"] / fsdp["median_s"]
            out.append(f"zrt3{suffix} ({optimizer}) step = {r:.2f}x {fsdp['name']} "
                       f"(goal <= 0.80): {'met' if r <= 0.8 else 'NOT met'}")
        for s in (1, 2):
            z = med.get(f"zrt{s}{suffix}")
            if z and "ddp" in med:
                r = z["median_s"] / med["ddp"]["median_s"]
                out.append(f"zrt{s}{suffix} ({optimizer}) step = {r:.2f}x DDP (goal <= 1.00): "
                           f"{'met' if r <= 1.0 else 'NOT met'}")
        if z3 and fsdp:
            r = z3["model_state"] / fsdp["model_state"]
            out.append(f"zrt3{suffix} model state = {r:.2f}x {fsdp['name']}'s (goal <= 1.00): "
                       f"{'met' if r <= 1.0 else 'NOT met'}")
    return out


def header(result):
    r = result
    return (f"bench_fsdp2: GPT-2 {r['layers']} layers x {r['hidden']} hidden, {r['heads']} heads, "
            f"vocab {r['vocab']} (tied), {r['parameters']:,} parameters (P), {r['ranks']} ranks, "
            f"batch {r['batch']} x seq {r['seq']} per rank, {r['dtype']}, AdamW, torch "
            f"{r['torch']}, transformers {r['transformers']}, {r['threads']} thread(s)/rank, "
            f"{r['steps']} steps after {r['warmup']} warm-up, variants alternating step by step")


# --- the driver (--all) --------------------------------------------------------------------------

def driver(args):
    launcher = args.zrt_run or os.environ.get("ZRT_RUN_EXE") or os.path.join(
        REPO, "build", "tools", "zrt-run", "zrt-run")
    if not os.path.exists(launcher):
        sys.exit(f"bench_fsdp2: zrt-run not found at {launcher} (build first, or --zrt-run)")
    common = ["--dtype", args.dtype, "--layers", args.layers, "--hidden", args.hidden,
              "--heads", args.heads, "--vocab", args.vocab, "--seq", args.seq,
              "--batch", args.batch, "--lr", args.lr, "--threads", args.threads]
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS=str(args.threads))
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(REPO, "python")] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                         if p])

    def launch(extra, out):
        command = [launcher, "-n", str(args.ranks), "--timeout", str(args.timeout),
                   sys.executable, os.path.abspath(__file__)] + [str(a) for a in common + extra]
        command += ["--json", out]
        print("$ " + " ".join(command), file=sys.stderr, flush=True)
        done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True)
        sys.stderr.write(done.stdout)
        if done.returncode != 0:
            sys.exit(f"bench_fsdp2: {' '.join(command)} exited with {done.returncode}")
        with open(out) as f:
            return json.load(f)

    with tempfile.TemporaryDirectory() as tmp:
        result = launch(["--variants", args.variants, "--steps", args.steps,
                         "--warmup", args.warmup], os.path.join(tmp, "all.json"))
        alone = {}
        for name in args.variants.split(","):
            lone = launch(["--only", name, "--steps", args.only_steps, "--warmup", 1],
                          os.path.join(tmp, f"{name}.json"))
            alone[name] = lone["peak_rss"]
    result["peak_rss_alone"] = alone
    print(header(result))
    print(f"(baseline peak RSS / rank after imports, before any model: "
          f"{mib(result['baseline_rss'])} MiB)")
    print()
    print(table(result, alone))
    if goals(result):
        print()
    for line in goals(result):
        print("- " + line)
    buffers = zrt_buffers(result)
    if buffers:
        print()
        print(buffers)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


# --- one rank ------------------------------------------------------------------------------------

def rank_main(args):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import torch.distributed as dist
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel

    sys.path.append(os.path.join(REPO, "python"))  # after PYTHONPATH: a zrt there wins
    import zrt.torch as zt

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    bf16 = args.dtype == "bf16"
    names = [args.only] if args.only else args.variants.split(",")

    def peak_rss():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    baseline_rss = peak_rss()

    def make_model():
        torch.manual_seed(0)
        config = GPT2Config(vocab_size=args.vocab, n_positions=args.seq, n_embd=args.hidden,
                            n_layer=args.layers, n_head=args.heads, resid_pdrop=0.0,
                            embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
        return GPT2LMHeadModel(config)

    def nbytes(t):
        if t is None:
            return 0
        if hasattr(t, "to_local"):  # DTensor: this rank's shard
            t = t.to_local()
        return t.numel() * t.element_size()

    def state_bytes(opt):
        return sum(nbytes(v) for s in opt.state.values() for v in s.values()
                   if isinstance(v, torch.Tensor) and v.dim() > 0)

    P = sum(p.numel() for p in make_model().parameters())
    N = world

    class Variant:
        grad_bytes = None
        model_state = None  # measured bytes, set after the last step
        formula = None
        formula_text = ""
        loss = float("nan")

        def forward_backward(self, x):
            loss = self.model(input_ids=x, labels=x).loss
            loss.backward()
            return loss

    class Ddp(Variant):
        def __init__(self):
            from torch.nn.parallel import DistributedDataParallel
            self.name = "ddp"
            self.model = DistributedDataParallel(make_model())
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=args.lr, weight_decay=0.01)
            self.formula, self.formula_text = 16 * P, "16P"

        def step(self, x):
            if bf16:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = self.model(input_ids=x, labels=x).loss
                loss.backward()
            else:
                loss = self.forward_backward(x)
            self.grad_bytes = sum(nbytes(p.grad) for p in self.model.parameters())
            self.opt.step()
            self.opt.zero_grad()
            return loss

        def measure(self):
            self.model_state = (sum(nbytes(p) for p in self.model.parameters())
                                + self.grad_bytes + state_bytes(self.opt))

    class Fsdp2(Variant):
        def __init__(self):
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
            self.name = "fsdp2"
            self.model = make_model()
            mesh = init_device_mesh("cpu", (world,))
            policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                           reduce_dtype=torch.float32)
                      if bf16 else MixedPrecisionPolicy())
            for block in self.model.transformer.h:
                fully_shard(block, mesh=mesh, reshard_after_forward=True, mp_policy=policy)
            fully_shard(self.model, mesh=mesh, reshard_after_forward=True, mp_policy=policy)
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=args.lr, weight_decay=0.01)
            # f32 sharded parameters (the master under bf16), f32 gradient shards, AdamW's two
            # f32 moments: everything sharded; the bf16 gathered copies are transient.
            self.formula, self.formula_text = 16 * P / N, "16P/N"

        def step(self, x):
            loss = self.forward_backward(x)
            self.grad_bytes = sum(nbytes(p.grad) for p in self.model.parameters())
            self.opt.step()
            self.opt.zero_grad()
            return loss

        measure = Ddp.measure

    class Fsdp1(Fsdp2):
        def __init__(self):
            from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision
            from torch.distributed.fsdp.wrap import ModuleWrapPolicy
            from transformers.models.gpt2.modeling_gpt2 import GPT2Block
            self.name = "fsdp1"
            mp = (MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
                  if bf16 else None)
            self.model = FullyShardedDataParallel(
                make_model(), auto_wrap_policy=ModuleWrapPolicy({GPT2Block}),
                device_id=torch.device("cpu"), mixed_precision=mp, use_orig_params=True)
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=args.lr, weight_decay=0.01)
            self.formula, self.formula_text = 16 * P / N, "16P/N"

    class Zrt(Variant):
        def __init__(self, name):
            self.name = name
            self.stage = int(name[3])
            self.model = make_model()
            config = zt.ShardConfig(param_dtype=torch.bfloat16 if bf16 else None,
                                    reduce_dtype=torch.float32)
            zt.shard(self.model, stage=self.stage, units=list(self.model.transformer.h),
                     config=config)
            self.sharded = self.model.zrt
            if name.endswith("f"):
                self.opt = zt.FusedOptimizer(self.sharded, "adamw", lr=args.lr,
                                             betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
            else:
                self.opt = zt.Optimizer(self.sharded, torch.optim.AdamW, lr=args.lr,
                                        weight_decay=0.01)
            memory = self.sharded.memory()
            self.formula = memory["theoretical_model_state"]
            # Parameters p bytes, reduced gradients 4 (reduce_dtype f32), master 4, AdamW 8.
            # zrt keeps an f32 master beside the f32 parameters; FSDP2's f32 shard is both.
            p = 2 if bf16 else 4
            shared = {1: f"{p + 4}P+12P/N", 2: f"{p}P+{4 + 12}P/N", 3: f"{p + 16}P/N"}
            self.formula_text = shared[self.stage]
            replicated = memory["theoretical_model_state"] - self._formula(p)
            if replicated > 0.5 * 2**20:  # stage 3: the root's parameters stay gathered
                self.formula_text += f" + {replicated / 2**20:.0f} MiB root"

        def _formula(self, p):
            return {1: (p + 4) * P + 12 * P / N, 2: p * P + 16 * P / N,
                    3: (p + 16) * P / N}[self.stage]

        def step(self, x):
            loss = self.forward_backward(x)
            self.opt.step()
            self.sharded.wait_params()  # stages 1/2 publish in the background: inside the step
            return loss

        def measure(self):
            self.zrt_memory = self.sharded.memory()
            self.model_state = self.zrt_memory["model_state"]

    def build(name):
        if name == "ddp":
            return Ddp()
        if name == "fsdp2":
            return Fsdp2()
        if name == "fsdp1":
            return Fsdp1()
        if name.startswith("zrt") and name[3:4] in "123" and name[4:] in ("", "f"):
            return Zrt(name)
        raise SystemExit(f"bench_fsdp2: unknown variant {name!r}")

    variants = [build(n) for n in names]
    times = {v.name: [] for v in variants}
    for step in range(args.warmup + args.steps):
        generator = torch.Generator().manual_seed(1000 * rank + step)
        x = torch.randint(0, args.vocab, (args.batch, args.seq), generator=generator)
        for v in variants:  # alternating: every variant sees the same machine, step by step
            dist.barrier()
            began = time.perf_counter()
            loss = v.step(x)
            elapsed = torch.tensor([time.perf_counter() - began], dtype=torch.float64)
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
            if step >= args.warmup:
                times[v.name].append(elapsed.item())
            v.loss = loss.item()
    for v in variants:
        v.measure()
    losses = torch.tensor([v.loss for v in variants], dtype=torch.float64)
    dist.all_reduce(losses)
    rss = torch.tensor([peak_rss(), baseline_rss], dtype=torch.float64)
    dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    states = torch.tensor([float(v.model_state) for v in variants], dtype=torch.float64)
    dist.all_reduce(states, op=dist.ReduceOp.MAX)

    def median(values):
        values = sorted(values)
        n = len(values)
        return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2

    result = dict(dtype=args.dtype, ranks=world, parameters=P, layers=args.layers,
                  hidden=args.hidden, heads=args.heads, vocab=args.vocab, seq=args.seq,
                  batch=args.batch, steps=args.steps, warmup=args.warmup, threads=args.threads,
                  torch=torch.__version__, transformers=transformers.__version__,
                  date=time.strftime("%Y-%m-%d"), peak_rss=rss[0].item(),
                  baseline_rss=rss[1].item(), only=args.only, variants=[
                      dict(name=v.name, median_s=median(times[v.name]), times_s=times[v.name],
                           model_state=states[i].item(), formula=v.formula,
                           formula_text=v.formula_text, loss=losses[i].item() / world,
                           zrt_memory=getattr(v, "zrt_memory", None))
                      for i, v in enumerate(variants)])
    if rank == 0:
        print(header(result))
        print(table(result))
        for line in goals(result):
            print("- " + line)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
    for v in variants:
        if isinstance(v, Zrt):
            v.sharded.close()
    # DDP's Reducer holds the gloo group: freed after destroy_process_group, its destructor
    # joins gloo's threads with the GIL held while one of them waits for the GIL to free the
    # last work's tensors (a deadlock at exit, torch 2.13; pytorch issue 56297). Free the
    # models while the default group still holds the group.
    del v, loss
    variants.clear()
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.all:
        driver(arguments)
    else:
        rank_main(arguments)
