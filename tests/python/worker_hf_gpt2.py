"""One rank of a comparison between zrt.torch and a torch reference on transformers' GPT-2.

Run under zrt-run (tests/python/test_hf_gpt2.py does). GPT2LMHeadModel is built from a small
GPT2Config (random init, nothing downloaded; dropout off; lm_head tied to wte), each block a zrt
unit, and trained on bytes of /usr/share/dict/words with AdamW: through zrt.torch (torch's
AdamW inside zrt's step) and through the reference, in the same process, alternately step by
step, from the same seed on the same batches:

  --against ddp:   torch DDP (gloo) and torch.optim.AdamW (f32: bit for bit at N = 2).
  --against fsdp2: FSDP2 (torch.distributed.fsdp.fully_shard on a CPU mesh with gloo, one per
                   block and one on the root) with the MixedPrecisionPolicy matching zrt's
                   ShardConfig(param_dtype, reduce_dtype).

For each stage asked for, rank 0 writes the loss curves (JSON) and four .pt files: zrt's
state_dict (the parameters in param_dtype, as floats), zrt's export (the f32 master, read back
from the safetensors file it wrote), the reference's full parameters and the initial ones (the
same for both), by parameter name.
"""
import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

import zrt.torch as zt  # noqa: E402
import stages  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--against", choices=["ddp", "fsdp2"], default="ddp")
parser.add_argument("--stage", default="3", help="stages, comma-separated: one run each")
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
parser.add_argument("--out", required=True)
args = parser.parse_args()

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

VOCAB, CONTEXT, GLOBAL_BATCH = 256, 32, 8  # bytes; GLOBAL_BATCH divisible by N = 2


def corpus():
    try:
        with open("/usr/share/dict/words", "rb") as f:
            raw = f.read()
    except OSError:  # no words file: bytes from a fixed seed
        raw = bytes(torch.randint(0, VOCAB, (1 << 16,),
                                  generator=torch.Generator().manual_seed(7)).tolist())
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()


DATA = corpus()


def make_model(seed=0):
    config = GPT2Config(vocab_size=VOCAB, n_positions=CONTEXT, n_embd=64, n_layer=2, n_head=4,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=10,
                        eos_token_id=10, use_cache=False, tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config)
    model.loss_type = "ForCausalLM"  # transformers' default for this class, without its warning
    assert model.lm_head.weight is model.transformer.wte.weight
    return model


def batch(step):
    """Step `step`'s slice for this rank: the same global batch whatever N."""
    g = torch.Generator().manual_seed(1000 + step)
    start = torch.randint(0, len(DATA) - CONTEXT, (GLOBAL_BATCH,), generator=g).tolist()
    ids = torch.stack([DATA[s:s + CONTEXT] for s in start])
    per_rank = GLOBAL_BATCH // world
    return ids[rank * per_rank:(rank + 1) * per_rank]


def make_opt(params):
    return torch.optim.AdamW(params, lr=3e-3, weight_decay=0.01)


def reference_of(model, param_dtype):
    if args.against == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh("cpu", (world,))
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    for block in model.transformer.h:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def full_parameters(model):
    """The reference's full parameters by name (FSDP2's DTensors gathered: collective)."""
    out = {}
    for name, p in model.named_parameters():
        p = p.full_tensor() if hasattr(p, "full_tensor") else p
        out[name] = p.detach().float().clone()
    return out


def all_ranks(values):
    gathered = [None] * world
    dist.all_gather_object(gathered, values)
    return gathered


def run(stage, out):
    param_dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = make_model()
    reference = make_model()
    names = [n for n, _ in model.named_parameters()]
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    config = zt.ShardConfig(param_dtype=param_dtype, reduce_dtype=torch.float32,
                            persistence_threshold=0, alignment=4, bucket_bytes=4096)
    zt.shard(model, stage=stage, units=list(model.transformer.h), config=config)
    sharded = model.zrt
    opt = zt.Optimizer(sharded, make_opt)
    ref = reference_of(reference, param_dtype)
    ref_opt = make_opt(ref.parameters())
    zrt_losses, ref_losses = [], []
    for step in range(args.steps):
        ids = batch(step)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        zrt_losses.append(loss.item())
        loss = ref(input_ids=ids, labels=ids).loss
        loss.backward()
        ref_opt.step()
        ref_opt.zero_grad()
        ref_losses.append(loss.item())
    exported = out + ".safetensors"
    sharded.export(exported)  # collective; rank 0 writes
    params = {k: v.float() for k, v in sharded.state_dict().items()}
    ref_params = full_parameters(reference)
    result = {"zrt": zrt_losses, "ref": ref_losses, "zrt_all_ranks": all_ranks(zrt_losses),
              "ref_all_ranks": all_ranks(ref_losses), "names": names,
              "step": sharded.pm.get_step(), "units": [u.name for u in sharded.units],
              "memory": sharded.memory()}
    if rank == 0:
        torch.save(params, out + ".zrt.pt")
        torch.save(load_file(exported), out + ".export.pt")
        torch.save(ref_params, out + ".ref.pt")
        torch.save(initial, out + ".init.pt")
        os.remove(exported)
    sharded.close()
    return result


stages.run_and_write(run, args.stage, args.out, rank)
dist.destroy_process_group()
