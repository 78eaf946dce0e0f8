"""zrt.torch.Optimizer and FusedOptimizer are torch.optim.Optimizers (issue 46): LR schedulers
work, every hyperparameter of every group is read at each step, state_dict/load_state_dict
round-trip and resume bit for bit, and the optimizer slots come from the optimizer.

The multi-rank checks run in worker_optimizer.py under zrt-run (2 ranks, zrt against DDP over
gloo in the same processes), one launch per group of cases, shared by the tests that read it;
the rest runs in this process as a job of one rank.
"""
import json

import pytest
import torch

import zrt
import zrt.torch as zt
from conftest import launch

import models

_RUNS = {}


def worker(tmp_path_factory, case):
    """The JSON of worker_optimizer.py's case `case` (launched once per session)."""
    if case not in _RUNS:
        out = tmp_path_factory.mktemp("optimizer") / f"{case}.json"
        launch(2, "worker_optimizer.py", "--cases", case, "--out", out)
        _RUNS[case] = json.loads(out.read_text())[case]
    return _RUNS[case]


def one_rank():
    return zrt.Comm.from_env()  # no launcher variables: a job of one rank


def sharded_mlp(comm, **config):
    model = models.make("mlp")
    zt.shard(model, stage=2, comm=comm, config=zt.ShardConfig(**config))
    return model


def backward(model, step=0):
    x, y = models.batch("mlp", step, 1, 0)
    models.loss_of("mlp", model(x), y).backward()


# --- torch.optim.Optimizer --------------------------------------------------------------------
def test_both_wrappers_are_torch_optimizers_and_take_model_or_sharded_model():
    comm = one_rank()
    model = sharded_mlp(comm)
    for target in (model, model.zrt):
        opt = zt.Optimizer(target, torch.optim.AdamW, lr=1e-3)
        assert isinstance(opt, torch.optim.Optimizer)
        assert opt.sharded is model.zrt
        # the groups the user sees are over the model's own parameters, with every setting
        assert [id(p) for p in opt.param_groups[0]["params"]] == [id(p) for p in
                                                                  model.parameters()]
        assert opt.param_groups[0]["betas"] == (0.9, 0.999)
        assert opt.defaults["lr"] == 1e-3
        torch.optim.lr_scheduler.StepLR(opt, 1)  # raised TypeError before
    fused = zt.FusedOptimizer(model, "adamw", lr=1e-3)
    assert isinstance(fused, torch.optim.Optimizer)
    assert fused.param_groups[0]["weight_decay"] == 0.01
    torch.optim.lr_scheduler.OneCycleLR(fused, max_lr=0.01, total_steps=10)
    for cls in (zt.Optimizer, zt.FusedOptimizer):
        with pytest.raises(TypeError, match="zrt.torch.shard"):
            cls(torch.nn.Linear(2, 2), torch.optim.SGD if cls is zt.Optimizer else "sgd")
    model.zrt.close()
    comm.destroy()


def test_scheduler_steps_and_hyperparameters_reach_the_step():
    """A scheduler's lr and a betas written by hand are what the next step uses (one rank:
    against plain torch on the same model)."""
    comm = one_rank()
    model = sharded_mlp(comm)
    reference = models.make("mlp")
    opt = zt.Optimizer(model, torch.optim.AdamW, lr=1e-2)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: 0.5 ** s) for o in (opt, ref_opt)]
    for step in range(3):
        if step == 1:
            for o in (opt, ref_opt):
                o.param_groups[0]["betas"] = (0.5, 0.9)
        backward(model, step)
        opt.step()
        x, y = models.batch("mlp", step, 1, 0)
        models.loss_of("mlp", reference(x), y).backward()
        ref_opt.step()
        ref_opt.zero_grad()
        for s in scheds:
            s.step()
        assert opt.inner.param_groups[0]["lr"] == 1e-2 * 0.5 ** step
        assert opt.inner.param_groups[0]["betas"] == ((0.5, 0.9) if step else (0.9, 0.999))
    ours = model.zrt.state_dict()
    for name, value in reference.named_parameters():
        assert torch.equal(ours[name], value.detach()), name
    model.zrt.close()
    comm.destroy()


def test_schedulers_against_ddp(tmp_path_factory):
    """StepLR, LambdaLR and OneCycleLR (which cycles AdamW's beta1 and SGD's momentum too) on
    zrt.torch.Optimizer over AdamW and on FusedOptimizer("adamw"/"sgd"), at stages 2 and 3:
    the losses and parameters of DDP with the same scheduler, bit for bit; and every scheduler
    changes the run (its losses differ from the run without one)."""
    runs = worker(tmp_path_factory, "schedulers")
    assert len(runs) == 2 * 2 * 4 + 2
    for key, run in runs.items():
        assert run["is_optimizer"], key
        assert run["identical"], (key, run["zrt"], run["ddp"])
        kind, name, stage = key.split("/")
        if name != "none":
            plain = runs[f"{kind}/none/{stage}"]
            assert run["zrt"][1:] != plain["zrt"][1:], key  # the schedule changed the steps
            assert len({tuple(lr) for lr in run["lr"]}) > 1, key


# --- param groups -----------------------------------------------------------------------------
def test_param_groups_against_ddp(tmp_path_factory):
    """zrt.torch.Optimizer: two groups with their own lr and weight_decay, and lr, betas, eps
    written into the groups by hand at step 2: DDP's bits with the same groups and writes (and
    the writes change the run). FusedOptimizer: a decay group and a no-decay group (its mask),
    then weight_decay and betas written at step 2: DDP's bits; no_decay= gives the same."""
    runs = worker(tmp_path_factory, "groups")
    for stage in (2, 3):
        for kind in ("torch", "fused", "fused-no-decay", "torch-unedited"):
            run = runs[f"{kind}/{stage}"]
            assert run["identical"], (kind, stage, run["zrt"], run["ddp"])
        assert runs[f"torch/{stage}"]["zrt"][3:] != runs[f"torch-unedited/{stage}"]["zrt"][3:]
        assert runs[f"torch/{stage}"]["lr"][3] == [3e-3, 5e-3]
        assert runs[f"fused/{stage}"]["zrt"][:3] == runs[f"fused-no-decay/{stage}"]["zrt"][:3]
        assert runs[f"fused/{stage}"]["zrt"][3:] != runs[f"fused-no-decay/{stage}"]["zrt"][3:]


def test_fused_optimizer_refuses_groups_it_cannot_express():
    comm = one_rank()
    model = sharded_mlp(comm)
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    vectors = [p for p in model.parameters() if p.dim() < 2]
    with pytest.raises(ValueError, match=r"param groups 0 and 1 differ in 'lr' .*"
                                         r"zrt.torch.Optimizer\(model, torch.optim.AdamW"):
        zt.FusedOptimizer(model, "adamw", [{"params": matrices, "lr": 1e-3},
                                           {"params": vectors, "lr": 1e-2}])
    with pytest.raises(ValueError, match=r"param groups 0 and 1 have weight_decay 0.1 and 0.2"):
        zt.FusedOptimizer(model, "adamw", [{"params": matrices, "weight_decay": 0.1},
                                           {"params": vectors, "weight_decay": 0.2}])
    with pytest.raises(ValueError, match=r"'momentum'.*torch.optim.SGD"):
        zt.FusedOptimizer(model, "sgd", [{"params": matrices, "momentum": 0.9},
                                         {"params": vectors, "momentum": 0.5}], lr=0.1)
    with pytest.raises(ValueError, match=r"parameter 'inp.bias' is in no param group"):
        zt.FusedOptimizer(model, "adamw", [{"params": matrices}])
    # groups that agree at first, then a scheduler gives them different learning rates: the
    # step refuses, naming the groups and the key
    opt = zt.FusedOptimizer(model, "adamw", [{"params": matrices}, {"params": vectors}],
                            lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, [lambda s: 1.0, lambda s: 1.0 / (1 + s)])
    backward(model, 0)
    opt.step()
    sched.step()
    backward(model, 1)
    with pytest.raises(ValueError, match=r"param groups 0 and 1 differ in 'lr' \(0.001 and "
                                         r"0.0005\)"):
        opt.step()
    opt.param_groups[1]["lr"] = opt.param_groups[0]["lr"]
    opt.step()  # the gradients wait for a step that can run
    assert model.zrt.pm.get_step() == 2
    model.zrt.close()
    comm.destroy()


# --- state dicts ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["torch-adamw", "torch-sgd", "fused-adamw", "fused-sgd"])
def test_state_dict_resumes_bit_for_bit(tmp_path_factory, kind):
    """3 steps; the model's, the optimizer's and a StepLR's state dicts; a fresh model (another
    seed) and optimizer load them and take 3 more steps: the losses of 6 uninterrupted steps bit
    for bit, at stages 2 and 3, in bf16 (whose f32 master the optimizer's state dict keeps) and,
    for the fused AdamW, with ShardConfig(offload_optimizer=True) (its step runs per segment).
    The loaded optimizer's state_dict() is the loaded one exactly; without the optimizer's
    state the resumed losses differ."""
    runs = worker(tmp_path_factory, "state")
    keys = [k for k in runs if k.startswith(kind + "/")]
    assert len(keys) == {"torch-adamw": 3, "fused-adamw": 4}.get(kind, 2), keys
    expected = {"torch-adamw": ["exp_avg", "exp_avg_sq", "step"],
                "torch-sgd": ["momentum_buffer"],
                "fused-adamw": ["exp_avg", "exp_avg_sq", "step"],
                "fused-sgd": ["momentum_buffer", "step"]}[kind]
    for key in keys:
        whole, resumed, partial = (runs[key][m] for m in ("whole", "resumed", "model-only"))
        assert resumed["state_keys"] == expected, (key, resumed["state_keys"])
        assert resumed["state_params"] > 0, key
        assert resumed["round_trip"], key
        assert resumed["losses"] == whole["losses"], (key, resumed["losses"], whole["losses"])
        assert partial["losses"][3:] != whole["losses"][3:], key
        if "step" in expected:
            assert resumed["steps_after"] == [6.0], (key, resumed["steps_after"])


def test_state_dict_is_refused_on_another_layout():
    comm = one_rank()
    model = sharded_mlp(comm)
    opt = zt.Optimizer(model, torch.optim.AdamW, lr=1e-3)
    backward(model)
    opt.step()
    state = opt.state_dict()
    assert state["zrt"]["rank"] == 0 and state["zrt"]["world_size"] == 1
    assert float(state["state"][0]["step"]) == 1.0
    assert state["state"][0]["exp_avg"].shape == (model.inp.weight.numel(),)
    moved = dict(state, zrt=dict(state["zrt"], pieces=state["zrt"]["pieces"][1:]))
    with pytest.raises(ValueError, match=r"local shard's"):
        opt.load_state_dict(moved)
    with pytest.raises(ValueError, match=r"not made by"):
        opt.load_state_dict({"state": {}, "param_groups": state["param_groups"]})
    fused = zt.FusedOptimizer(model, "adamw")
    with pytest.raises(ValueError, match=r"optimizer AdamW, this one is zrt-adamw"):
        fused.load_state_dict(state)
    model.zrt.close()
    comm.destroy()


@pytest.mark.parametrize("kind", ["torch", "fused"])
def test_state_dict_then_zrt_checkpoint_keeps_the_step_count(tmp_path, kind):
    """A state dict loaded into a fresh model (zrt at step 0, the optimizer at step 3), a step,
    zrt's checkpoint (sharded.save), loaded into another fresh model: the optimizer continues
    from its own step count (AdamW's bias correction), the losses of an uninterrupted run."""
    import copy

    comm = one_rank()

    def build(seed):
        model = models.make("mlp", seed=seed)
        zt.shard(model, stage=3, comm=comm, config=zt.ShardConfig(persistence_threshold=0,
                                                                  bucket_bytes=4096))
        if kind == "fused":
            return model, zt.FusedOptimizer(model, "adamw", lr=3e-3)
        return model, zt.Optimizer(model, torch.optim.AdamW, lr=3e-3)

    def step(model, opt, index):
        x, y = models.batch("mlp", index, 1, 0)
        loss = models.loss_of("mlp", model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    model, opt = build(0)
    whole = [step(model, opt, s) for s in range(6)]
    model.zrt.close()
    model, opt = build(0)
    losses = [step(model, opt, s) for s in range(3)]
    model_state = {k: v.clone() for k, v in model.zrt.state_dict().items()}
    opt_state = copy.deepcopy(opt.state_dict())
    model.zrt.close()
    model, opt = build(1)
    model.zrt.load_state_dict(model_state)
    opt.load_state_dict(opt_state)
    losses.append(step(model, opt, 3))
    model.zrt.save(tmp_path / "ck")
    model.zrt.close()
    model, opt = build(2)
    model.zrt.load(tmp_path / "ck")
    assert model.zrt.pm.get_step() == 1
    losses += [step(model, opt, s) for s in (4, 5)]
    assert losses == whole
    assert {float(e["step"]) for e in opt.state_dict()["state"].values()} == {6.0}
    model.zrt.close()
    comm.destroy()


# --- optimizer slots --------------------------------------------------------------------------
def test_slots_are_derived_from_the_optimizer(tmp_path_factory):
    """Sharded with the default ShardConfig, then SGD with momentum (1 slot), plain SGD (0),
    AdamW (2), Adam with amsgrad (3) through zrt.torch.Optimizer, and FusedOptimizer's SGD (0,
    1), AdamW (2), Lion (1): the manager gets that many slots before the first step
    (zrt_partition_set_optimizer_slots), the memory report counts them, and training is DDP's
    bit for bit at stages 2 and 3."""
    runs = worker(tmp_path_factory, "slots")
    expected = {"sgd-momentum": 1, "sgd": 0, "adamw": 2, "adam-amsgrad": 3, "fused-sgd": 0,
                "fused-sgd-momentum": 1, "fused-adamw": 2}
    for stage in (2, 3):
        for name, slots in expected.items():
            run = runs[f"{name}/{stage}"]
            assert run["slots"] == slots, (name, stage, run["slots"])
            assert run["optimizer_state"] == slots * run["master"], (name, stage, run)
            assert run["identical"], (name, stage, run["zrt"], run["ddp"])
    lion = runs["fused-lion/3"]
    assert lion["slots"] == 1 and lion["optimizer_state"] == lion["master"]


def test_slots_cannot_change_after_a_step(tmp_path_factory):
    runs = worker(tmp_path_factory, "slots")
    assert runs["refused"] is not None
    assert "ShardConfig(optimizer_slots=3)" in runs["refused"], runs["refused"]
    assert "before the first step" in runs["refused"], runs["refused"]


def test_derived_slots_keep_the_f32_master_in_bf16(tmp_path_factory):
    """bf16 parameters, f32 master: the manager given SGD's one slot trains exactly as one
    sharded with ShardConfig(optimizer_slots=1) from the start."""
    runs = worker(tmp_path_factory, "slots")
    derived, explicit = runs["bf16-derived"], runs["bf16-explicit"]
    assert derived["slots"] == explicit["slots"] == 1
    assert derived["losses"] == explicit["losses"]
    assert derived["params"] == explicit["params"]


def test_too_few_explicit_slots_are_refused_when_the_optimizer_is_built():
    comm = one_rank()
    model = sharded_mlp(comm, optimizer_slots=1)
    with pytest.raises(ValueError, match=r"keeps 2 state tensor\(s\).*"
                                         r"ShardConfig\(optimizer_slots=2\)"):
        zt.Optimizer(model, torch.optim.AdamW, lr=1e-3)
    with pytest.raises(ValueError, match=r"ShardConfig\(optimizer_slots=2\)"):
        zt.FusedOptimizer(model, "adamw")
    # more than needed is kept as given
    opt = zt.Optimizer(model, torch.optim.SGD, lr=0.1)
    assert model.zrt.pm.config.optimizer_slots == 1
    backward(model)
    opt.step()
    model.zrt.close()
    comm.destroy()


def test_slots_change_in_place_before_the_first_step():
    """One rank, stage 3: the same manager, with the optimizer's slots, holds the values the
    model had, and the memory report changes with the slots; nothing else is reallocated."""
    comm = one_rank()
    model = models.make("gpt")
    zt.shard(model, stage=3, comm=comm, config=zt.ShardConfig(persistence_threshold=0))
    before = {k: v.clone() for k, v in model.zrt.state_dict().items()}
    state_before = model.zrt.memory()["optimizer_state"]
    old = model.zrt.pm
    total_before = model.zrt.memory()["total"]
    opt = zt.Optimizer(model, torch.optim.Adam, lr=1e-3, amsgrad=True)
    assert model.zrt.pm is old and model.zrt.pm.config.optimizer_slots == 3
    memory = model.zrt.memory()
    assert memory["optimizer_state"] == 3 * memory["master"] != state_before
    grown = memory["optimizer_state"] - state_before
    assert memory["total"] - total_before == 2 * grown  # the state and its full backup
    after = model.zrt.state_dict()
    for name, value in before.items():
        assert torch.equal(after[name], value), name
    x, y = models.batch("gpt", 0, 1, 0)
    models.loss_of("gpt", model(x), y).backward()
    opt.step()
    assert opt.state_keys == ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"]
    model.zrt.close()
    comm.destroy()


# --- the step in batches ------------------------------------------------------------------------
def _train_clipped(factory, steps=3):
    """One rank, stage 2, the GPT model of models.py, clipped at 0.05 (it always clips here):
    the final parameters and how often the inner optimizer's step ran."""
    comm = one_rank()
    torch.manual_seed(0)
    model = models.make("gpt")
    zt.shard(model, stage=2, comm=comm)
    opt = zt.Optimizer(model, factory, lr=1e-2)
    calls = []
    inner_step = opt.inner.step  # counted here: torch 1.13 has no step hooks

    def counted(*args, **kwargs):
        calls.append(1)
        return inner_step(*args, **kwargs)

    opt.inner.step = counted
    for step in range(steps):
        x, y = models.batch("gpt", step, 1, 0)
        models.loss_of("gpt", model(x), y).backward()
        norm = model.zrt.clip_grad_norm_(0.05)
        assert norm.item() > 0.05
        opt.step()
    params = {k: v.clone() for k, v in model.zrt.state_dict().items()}
    model.zrt.close()
    comm.destroy()
    return params, len(calls)


def test_steps_in_batches_give_the_bits_of_one_whole_step(monkeypatch):
    """torch's AdamW with clipping: the first step and every clipped step hand it the shard in
    batches (here each piece alone); the parameters match a run whose batches hold the whole
    shard, bit for bit."""
    from zrt.torch import _optimizer
    whole, whole_calls = _train_clipped(torch.optim.AdamW)
    monkeypatch.setattr(_optimizer, "_BATCH_ELEMENTS", 1)
    pieces, piece_calls = _train_clipped(torch.optim.AdamW)
    assert piece_calls > whole_calls == 3  # the batches did split the shard
    assert whole.keys() == pieces.keys()
    for name in whole:
        assert torch.equal(whole[name], pieces[name]), name


class _CountingAdamW(torch.optim.AdamW):
    """Not torch's own step (which may count per call or reduce over every parameter):
    zrt.torch must call it once per step over the whole shard, whatever the batch size."""

    calls = 0

    def step(self, closure=None):
        _CountingAdamW.calls += 1
        return super().step(closure)


def test_an_optimizer_of_its_own_gets_the_whole_shard_in_one_call(monkeypatch):
    from zrt.torch import _optimizer
    monkeypatch.setattr(_optimizer, "_BATCH_ELEMENTS", 1)
    monkeypatch.setattr(_CountingAdamW, "calls", 0)
    params, _ = _train_clipped(_CountingAdamW)
    assert _CountingAdamW.calls == 3
    reference, _ = _train_clipped(torch.optim.AdamW)
    for name in params:
        assert torch.equal(params[name], reference[name]), name
