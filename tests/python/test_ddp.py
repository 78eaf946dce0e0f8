"""zrt.torch against torch DDP (gloo) in the same processes: bit for bit in f32.

At N = 2 the DDP reference is plain DDP. At N = 3 it is DDP with a comm hook that averages in
zrt's order (worker_ddp.zrt_order_hook): float addition is not associative, and gloo's ring
associates three terms differently from zrt's; everything else (forward, backward, the
optimizer on shards) is compared as it is.
"""
import pytest
import torch

from conftest import run_ddp, run_ddp_stages


def global_losses(result):
    """The loss of the whole batch at each step: the mean of the ranks' (equal slices)."""
    return [sum(losses) / len(losses) for losses in zip(*result["zrt_all_ranks"])]


def assert_identical(result, zrt_params, ddp_params):
    assert result["zrt"] == result["ddp"], (result["zrt"], result["ddp"])
    assert zrt_params.keys() == ddp_params.keys()
    for name, value in ddp_params.items():
        assert zrt_params[name].shape == value.shape, name
        difference = (zrt_params[name] - value).abs().max().item()
        assert torch.equal(zrt_params[name], value), f"{name}: max difference {difference}"


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("model", ["mlp", "gpt"])
def test_f32_bit_identical_to_ddp_at_every_stage(tmp_path, model, ranks):
    """Stages 0-3, one after the other in the same job (each against a fresh DDP)."""
    runs = run_ddp_stages(tmp_path, ranks, [0, 1, 2, 3], "--model", model, "--steps", 3)
    for stage, (result, zrt_params, ddp_params) in runs.items():
        assert result["step"] == 3, stage
        assert_identical(result, zrt_params, ddp_params)


def test_sgd_momentum_bit_identical(tmp_path):
    runs = run_ddp_stages(tmp_path, 2, [1, 3], "--model", "mlp", "--optimizer", "sgd",
                          "--steps", 3)
    for result, zrt_params, ddp_params in runs.values():
        assert_identical(result, zrt_params, ddp_params)


@pytest.mark.parametrize("optimizer", ["zrt-adamw", "zrt-sgd"])
def test_fused_optimizer_bit_identical_to_ddp(tmp_path, optimizer):
    """zrt.torch.FusedOptimizer (zrt's own AdamW and SGD, no Python in the step) against DDP
    with torch's: the same formulas in the same order, so the same bits."""
    runs = run_ddp_stages(tmp_path, 2, [1, 3], "--model", "gpt", "--optimizer", optimizer,
                          "--steps", 3)
    for result, zrt_params, ddp_params in runs.values():
        assert result["step"] == 3
        assert_identical(result, zrt_params, ddp_params)


def test_fused_optimizer_offloaded_bit_identical_to_ddp(tmp_path):
    """ShardConfig(offload_optimizer=True) with zrt's fused AdamW (ZeRO-Offload: the optimizer
    per segment on the host as each reduction ends) at stages 1-3: still DDP's bits."""
    runs = run_ddp_stages(tmp_path, 2, [1, 2, 3], "--model", "gpt", "--optimizer", "zrt-adamw",
                          "--offload", "--steps", 3)
    for result, zrt_params, ddp_params in runs.values():
        assert result["memory"]["host_model_state"] > 0
        assert_identical(result, zrt_params, ddp_params)


def test_bf16_within_tolerance(tmp_path):
    """bf16 parameters and activations, f32 master and reduction, against f32 DDP: bf16 keeps
    8 bits of mantissa, so losses agree to 2 % and parameters to 2e-2 absolute after 4 steps."""
    runs = run_ddp_stages(tmp_path, 2, [2, 3], "--model", "gpt", "--dtype", "bf16", "--steps", 4)
    for stage, (result, zrt_params, ddp_params) in runs.items():
        for ours, theirs in zip(result["zrt"], result["ddp"]):
            assert abs(ours - theirs) <= 0.02 * abs(theirs), (stage, result["zrt"], result["ddp"])
        for name, value in ddp_params.items():
            assert zrt_params[name].dtype == torch.float32  # state_dict copies, as floats
            assert (zrt_params[name] - value).abs().max().item() <= 2e-2, (stage, name)
        assert result["memory"]["parameters"] > 0


@pytest.mark.parametrize("model", ["mlp", "gpt"])
def test_activation_checkpointing_stage3(tmp_path, model):
    """torch.utils.checkpoint at stage 3: the recomputation gathers each checkpointed unit a
    third time, and the result is still DDP's bit for bit."""
    result, zrt_params, ddp_params = run_ddp(tmp_path, 2, "--model", model, "--checkpointing",
                                             "--steps", 3, stage=3)
    assert_identical(result, zrt_params, ddp_params)
    plain, _, _ = run_ddp(tmp_path, 2, "--model", model, "--steps", 3, "--no-ddp", stage=3,
                          name="plain")
    assert result["stats"]["fetches"] > plain["stats"]["fetches"]


@pytest.mark.parametrize("where", ["torch", "zrt"])
def test_gradient_accumulation_without_sync(tmp_path, where):
    """Three micro-batches a step, the first two under no_sync (zrt's and DDP's): bit for bit.
    torch: no flag chosen in advance (stages 2/3 accumulate in torch's .grad); zrt:
    ShardConfig(no_sync_accumulation=True), zrt's own full-size buffer."""
    flag = ["--no-sync-in-zrt"] if where == "zrt" else []
    runs = run_ddp_stages(tmp_path, 2, [1, 2, 3], "--model", "mlp", "--accum", 3, "--steps", 2,
                          "--no-sync", *flag)
    for result, zrt_params, ddp_params in runs.values():
        assert_identical(result, zrt_params, ddp_params)


def test_gradient_accumulation_with_sync(tmp_path):
    """Three micro-batches a step, each reduced. zrt adds the reduced gradients of each
    micro-batch; DDP reduces the accumulated .grad again at every micro-batch (its bucket is a
    copy of .grad), the same sum associated differently: agreement to rounding (1e-6)."""
    runs = run_ddp_stages(tmp_path, 2, [1, 2, 3], "--model", "mlp", "--accum", 3, "--steps", 2)
    for stage, (result, zrt_params, ddp_params) in runs.items():
        for a, b in zip(result["zrt"], result["ddp"]):
            assert abs(a - b) <= 1e-6 * abs(b), (stage, result["zrt"], result["ddp"])
        for name, value in ddp_params.items():
            assert (zrt_params[name] - value).abs().max().item() <= 1e-6, (stage, name)


def test_stable_addresses_at_stage3(tmp_path):
    """Linear layers save their weight for backward; at stage 3 the unit is released after its
    forward and gathered again for backward. Autograd's saved views read the right values only
    if the gather lands at the same address: without stable addresses this run departs from
    DDP from the first step."""
    result, zrt_params, ddp_params = run_ddp(tmp_path, 2, "--model", "mlp", "--steps", 3,
                                             "--prefetch-depth", 0, stage=3)
    assert_identical(result, zrt_params, ddp_params)
    assert result["stats"]["gathers"] + result["stats"]["prefetches"] >= 2 * 3 * 5


def test_save_at_3_resume_at_2(tmp_path):
    """A zrt checkpoint saved at N = 3 (stage 2) loads at N = 2 (stage 1) into the torch model:
    the parameters are the saved ones bit for bit, the step count and the optimizer state
    continue (AdamW's bias correction would differ markedly otherwise), and the losses follow
    the uninterrupted run (the global batch is the same; only the reductions' association
    differs)."""
    checkpoint = tmp_path / "ck"
    saved, saved_params, _ = run_ddp(tmp_path, 3, "--model", "gpt", "--steps", 3, "--no-ddp",
                                     "--save", checkpoint, stage=2, name="saved")
    resumed, _, _ = run_ddp(tmp_path, 2, "--model", "gpt", "--steps", 3, "--no-ddp",
                            "--resume", checkpoint, "--dump-loaded", stage=1, name="resumed")
    whole, _, _ = run_ddp(tmp_path, 3, "--model", "gpt", "--steps", 6, "--no-ddp", stage=2,
                          name="whole")
    loaded = torch.load(str(tmp_path / "resumed.json") + ".1.loaded.pt")
    for name, value in saved_params.items():
        assert torch.equal(loaded[name], value), name
    assert resumed["step"] == 6
    ours, theirs = global_losses(resumed), global_losses(whole)[3:]
    for a, b in zip(ours, theirs):
        assert abs(a - b) <= 1e-5 * abs(b), (ours, theirs)


def test_fused_optimizer_resumes_from_its_checkpoint(tmp_path):
    """zrt.torch.FusedOptimizer keeps all its state in zrt's slots: 3 steps, save, load, 3 more
    steps give the losses of 6 uninterrupted steps bit for bit (same N and stage)."""
    checkpoint = tmp_path / "ck"
    run_ddp(tmp_path, 2, "--model", "gpt", "--steps", 3, "--no-ddp", "--optimizer", "zrt-adamw",
            "--save", checkpoint, stage=2, name="saved")
    resumed, _, _ = run_ddp(tmp_path, 2, "--model", "gpt", "--steps", 3, "--no-ddp",
                            "--optimizer", "zrt-adamw", "--resume", checkpoint, stage=2,
                            name="resumed")
    whole, _, _ = run_ddp(tmp_path, 2, "--model", "gpt", "--steps", 6, "--no-ddp",
                          "--optimizer", "zrt-adamw", stage=2, name="whole")
    assert resumed["step"] == 6
    assert global_losses(resumed) == global_losses(whole)[3:], (resumed["zrt"], whole["zrt"])


@pytest.mark.parametrize("units", ["blocks", "reversed"])
def test_explicit_units_with_root_parameters_after_them(tmp_path, units):
    """units=list(model.blocks): the final norm and head come after the blocks in
    named_parameters and form the root with the embeddings; in forward order or reversed
    (zrt then prefetches in the wrong order, which costs time, never bits)."""
    runs = run_ddp_stages(tmp_path, 2, [1, 2, 3], "--model", "gpt", "--steps", 3,
                          "--units", units)
    for result, zrt_params, ddp_params in runs.values():
        assert_identical(result, zrt_params, ddp_params)


def test_torch_compile_trains_as_eager_at_stages_1_to_3(tmp_path):
    """torch.compile(model) sharded by zrt.torch: dynamo compiles graphs between zrt's hooks
    (which run as graph breaks: they call into libzrt), and the losses are those of eager DDP
    (equal here), the parameters equal to rounding (inductor's kernels round differently)."""
    if not hasattr(torch, "compile"):
        pytest.skip(f"torch {torch.__version__} has no torch.compile")
    runs = run_ddp_stages(tmp_path, 2, [1, 2, 3], "--model", "gpt", "--steps", 3, "--compile")
    for stage, (result, zrt_params, ddp_params) in runs.items():
        assert result["compiled"]["graphs"] >= 1, (stage, result["compiled"])
        for a, b in zip(result["zrt"], result["ddp"]):
            assert abs(a - b) <= 1e-5 * abs(b), (stage, result["zrt"], result["ddp"])
        # Per element, a rounding difference can flip AdamW's step on a near-zero gradient;
        # over the whole model the parameters agree to rounding.
        difference = sum(((zrt_params[n] - v) ** 2).sum() for n, v in ddp_params.items())
        size = sum((v ** 2).sum() for v in ddp_params.values())
        assert (difference / size).sqrt().item() <= 1e-4, stage
