"""Hugging Face GPT-2 (transformers' GPT2LMHeadModel) trained by zrt.torch, exported as HF.

    build/tools/zrt-run/zrt-run -n 2 /opt/zrt/venv/bin/python3 examples/hf_gpt2.py \
        --stage 3 --steps 50 --export /tmp/gpt2-out

The model is built from a GPT2Config (random initialisation: nothing is downloaded) over the
characters of /usr/share/dict/words, each transformer block a zrt unit; the parameters that
belong to no block (the token and position embeddings, the final LayerNorm and the LM head tied
to the token embedding) form zrt's root unit, kept gathered. The training loop is the usual
Hugging Face one (`model(ids, labels=ids).loss`, backward, step), with torch's AdamW running
inside zrt's step on each rank's shard.

--export DIR writes a Hugging Face model directory: config.json (and generation_config.json)
from rank 0, and model.safetensors by zrt's collective export of the f32 master weights under
the model's parameter names. Like save_pretrained, the file leaves out lm_head.weight (tied to
transformer.wte.weight; from_pretrained ties it again), so that

    GPT2LMHeadModel.from_pretrained(DIR)

loads it with no missing or unexpected key. --check then verifies that on rank 0: the loaded
model (in the training dtype) gives logits torch.equal to the sharded model's own on a batch.

Run it from the repository root after a build (the package finds build/zero/api/libzrt.so;
elsewhere set ZRT_LIBRARY), with a Python that has torch 2.x and transformers.
"""
import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is ever downloaded

import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import zrt  # noqa: E402
import zrt.torch as zt  # noqa: E402

try:
    from transformers import GPT2Config, GPT2LMHeadModel
except ImportError as error:  # Debian's torch 1.13 comes without transformers
    sys.exit(f"hf_gpt2: this example needs transformers ({error}); "
             "run it with a Python that has it, e.g. /opt/zrt/venv/bin/python3")

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--stage", type=int, default=3, help="ZeRO stage 0-3")
parser.add_argument("--steps", type=int, default=50)
parser.add_argument("--batch", type=int, default=8, help="sequences per rank and step")
parser.add_argument("--context", type=int, default=64, help="tokens per sequence (n_positions)")
parser.add_argument("--layers", type=int, default=2, help="n_layer")
parser.add_argument("--hidden", type=int, default=64, help="n_embd")
parser.add_argument("--heads", type=int, default=4, help="n_head")
parser.add_argument("--lr", type=float, default=3e-3)
parser.add_argument("--clip", type=float, default=1.0, help="global gradient norm (0: none)")
parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32",
                    help="bf16: bf16 parameters and activations, f32 master and reductions")
parser.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa",
                    help="transformers' attention implementation")
parser.add_argument("--export", default=None, help="Hugging Face model directory to write")
parser.add_argument("--check", action="store_true",
                    help="after --export: rank 0 loads it with from_pretrained and compares "
                         "logits with the sharded model's (exit status 1 if they differ)")
parser.add_argument("--check-rss", action="store_true",
                    help="each rank measures its peak RSS growth from just before shard to the "
                         "end of training and fails (exit 1) if, less the peers' memory zrt maps "
                         "here, it is more than 5 %% off zrt's memory total (examples/"
                         "rss_probe.py); give a model large against its batch")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--corpus", default="/usr/share/dict/words")
args = parser.parse_args()
if args.check and not args.export:
    parser.error("--check needs --export DIR")
torch.set_num_threads(1)

# Characters of the corpus; '\n' (the first, sorted) ends every word: the eos token.
text = open(args.corpus, encoding="utf-8", errors="replace").read()
chars = sorted(set(text))
index = {c: i for i, c in enumerate(chars)}
data = torch.tensor([index[c] for c in text], dtype=torch.long)
eos = index.get("\n", 0)

comm = zrt.Comm.from_env()  # zrt-run, torchrun, mpirun or srun
rank, world = comm.rank, comm.size
dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32

config = GPT2Config(vocab_size=len(chars), n_positions=args.context, n_embd=args.hidden,
                    n_layer=args.layers, n_head=args.heads, resid_pdrop=0.0, embd_pdrop=0.0,
                    attn_pdrop=0.0, bos_token_id=eos, eos_token_id=eos, use_cache=False,
                    tie_word_embeddings=True)
config._attn_implementation = args.attn
torch.manual_seed(args.seed)
model = GPT2LMHeadModel(config)  # random init (rank 0's values are broadcast by shard)
model.loss_type = "ForCausalLM"  # transformers' default for this class, without its warning
assert model.lm_head.weight is model.transformer.wte.weight  # tied: one parameter, root unit
numel = sum(p.numel() for p in model.parameters())
rss = None
if args.check_rss:
    from rss_probe import RssProbe  # examples/, beside this script
    rss = RssProbe()
    rss.take_baseline()

# Each block is a unit; wte (= lm_head), wpe and ln_f belong to none: the root unit.
zt.shard(model, stage=args.stage, units=list(model.transformer.h), comm=comm,
         config=zt.ShardConfig(param_dtype=dtype, reduce_dtype=torch.float32,
                               prefetch_next_step=args.stage == 3))
sharded = model.zrt
decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
optim = zt.Optimizer(sharded, torch.optim.AdamW,
                     [{"params": decay, "weight_decay": 0.1},
                      {"params": no_decay, "weight_decay": 0.0}], lr=args.lr)

if rss is not None:
    rss.end_setup()
memory = sharded.memory()
if rank == 0:
    print(f"hf_gpt2: GPT2LMHeadModel, {numel} parameters, {args.layers} layers x {args.hidden}, "
          f"{len(chars)} characters, {args.dtype}, stage {args.stage}, {world} ranks, "
          f"{len(sharded.units)} units; model state per rank "
          f"{memory['model_state'] / 1024:.0f} KiB (ZeRO formula "
          f"{memory['theoretical_model_state'] / 1024:.0f} KiB)", flush=True)
    print(f"hf_gpt2: {sharded.footprint()}", flush=True)

generator = torch.Generator().manual_seed(1 + rank)
times = []
for step in range(1, args.steps + 1):
    start = torch.randint(0, len(data) - args.context, (args.batch,), generator=generator)
    ids = torch.stack([data[s:s + args.context] for s in start.tolist()])
    began = time.perf_counter()
    loss = model(input_ids=ids, labels=ids).loss  # transformers shifts the labels itself
    loss.backward()
    norm = sharded.clip_grad_norm_(args.clip) if args.clip > 0 else None
    optim.step()
    times.append(time.perf_counter() - began)
    if rank == 0 and (step % 10 == 0 or step == 1 or step == args.steps):
        shown = f"  grad norm {norm.item():.3f}" if norm is not None else ""
        print(f"step {step:3d}  loss {loss.item():.4f}{shown}  "
              f"{1000 * sorted(times)[len(times) // 2]:.1f} ms/step (median)", flush=True)

failed = False
if rss is not None:
    rss.take_peak()
    check, training, ok = rss.lines(rank, sharded.memory()["total"], tolerance=0.05)
    print(f"--check-rss: {check}\n--check-rss: {training}", flush=True)
    failed = not ok

# Greedy completion: every rank runs the same forward (stage 3 gathers are collective).
model.eval()
with torch.no_grad():
    idx = torch.tensor([[index[c] for c in "\nst"]])
    for _ in range(24):
        nxt = model(input_ids=idx[:, -args.context:]).logits[0, -1].float().argmax()
        idx = torch.cat([idx, nxt.view(1, 1)], dim=1)
if rank == 0:
    sample = "".join(chars[i] for i in idx[0].tolist()).strip().replace("\n", " | ")
    print(f"sample: {sample}", flush=True)

if args.export:
    if args.check:
        # The sharded model's logits on a batch, computed by every rank (collective at stage 3).
        probe = torch.stack([data[s:s + args.context] for s in range(0, 4 * 997, 997)])
        with torch.no_grad():
            expected = model(input_ids=probe).logits
    os.makedirs(args.export, exist_ok=True)
    # The weights: zrt gathers the f32 master unit by unit; rank 0 writes model.safetensors under
    # the parameter names, which are transformers' (lm_head.weight, tied, is not among them).
    sharded.export(os.path.join(args.export, "model.safetensors"))
    if rank == 0:
        config.architectures = [type(model).__name__]  # as save_pretrained records it
        config.save_pretrained(args.export)  # config.json
        model.generation_config.save_pretrained(args.export)
        print(f"exported a Hugging Face model to {args.export}", flush=True)
        if args.check:
            loaded, info = GPT2LMHeadModel.from_pretrained(
                args.export, dtype=dtype, attn_implementation=args.attn,
                output_loading_info=True)
            loaded.eval()
            problems = {k: v for k, v in info.items() if v}
            with torch.no_grad():
                got = loaded(input_ids=probe).logits
            tied = loaded.lm_head.weight is loaded.transformer.wte.weight
            same = torch.equal(got, expected)
            difference = (got.float() - expected.float()).abs().max().item()
            print(f"check: from_pretrained({args.export}) loading info "
                  f"{problems or 'clean'}, lm_head tied {tied}, logits "
                  f"{'identical' if same else 'DIFFER'} (max difference {difference:.3g})",
                  flush=True)
            failed = failed or bool(problems) or not tied or not same

sharded.close()
comm.destroy()
sys.exit(1 if failed else 0)
