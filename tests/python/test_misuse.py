"""Misuse of zrt.torch: each case returns a status or raises with a message that names the
argument and what to do; none crashes or hangs."""
import json

import pytest
import torch

import zrt
import zrt.torch as zt
from conftest import launch

import models

def one_rank_comm():
    return zrt.Comm.from_env()  # no launcher variables: a job of one rank


@pytest.mark.parametrize("stage", [1, 3])
def test_optimizer_raising_is_a_callback_error_on_every_rank(stage):
    result = launch(2, "worker_misuse.py", stage)
    outputs = [json.loads(line.split("RESULT ", 1)[1]) for line in result.stdout.splitlines()
               if "RESULT " in line]
    assert len(outputs) == 2, result.stdout + result.stderr
    for out in outputs:
        assert out["status"] == "CALLBACK_ERROR", out
        assert "ValueError: boom from rank 1" in out["message"], out
        assert "rank 1" in out["message"], out
        assert out["rolled_back"] and out["step_after_failure"] == 1, out
        assert out["final_step"] == 3, out


def test_float64_parameters_are_refused_with_what_to_do():
    model = torch.nn.Linear(3, 3).double()
    comm = one_rank_comm()
    with pytest.raises(TypeError, match=r"float64.*model\.float\(\)"):
        zt.shard(model, stage=2, comm=comm)
    comm.destroy()


def test_too_few_optimizer_slots_names_the_setting():
    """An explicit ShardConfig(optimizer_slots) below what the optimizer keeps is refused when
    the optimizer is built, naming the setting (left unset, the optimizer sets it)."""
    comm = one_rank_comm()
    model = models.make("mlp")
    sharded = zt.shard(model, stage=2, comm=comm, config=zt.ShardConfig(optimizer_slots=1)).zrt
    with pytest.raises(ValueError, match=r"ShardConfig\(optimizer_slots=2\)"):
        zt.Optimizer(sharded, torch.optim.AdamW, lr=1e-3)
    sharded.close()
    comm.destroy()


def test_fused_optimizer_misuse_names_what_to_do():
    comm = one_rank_comm()
    model = models.make("mlp")
    sharded = zt.shard(model, stage=2, comm=comm, config=zt.ShardConfig(optimizer_slots=1)).zrt
    with pytest.raises(ValueError, match=r"ShardConfig\(optimizer_slots=2\)"):
        zt.FusedOptimizer(sharded, "adamw")
    with pytest.raises(ValueError, match=r"kind 'adagrad' is not one of adamw, adam, sgd, lion"):
        zt.FusedOptimizer(sharded, "adagrad")
    with pytest.raises(ValueError, match="no_decay is not a parameter of the sharded model"):
        zt.FusedOptimizer(sharded, "sgd", momentum=0.9, no_decay=[torch.zeros(3)])
    sharded.close()
    offloaded = zt.shard(models.make("mlp"), stage=2, comm=comm,
                         config=zt.ShardConfig(offload_optimizer=True)).zrt
    with pytest.raises(ValueError, match="use zrt.torch.FusedOptimizer"):
        zt.Optimizer(offloaded, torch.optim.AdamW, lr=1e-3)
    offloaded.close()
    comm.destroy()


def _train_fused(comm, step_backup, steps=3):
    model = zt.shard(models.make("mlp"), stage=3, comm=comm,
                     config=zt.ShardConfig(step_backup=step_backup))
    optimizer = zt.FusedOptimizer(model, "adamw", lr=1e-2)
    for step in range(steps):
        x, y = models.batch("mlp", step, 1, 0)
        models.loss_of("mlp", model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    with model.zrt.summon_full_params():
        values = [p.detach().clone() for p in model.parameters()]
    model.zrt.close()
    return values


def test_step_backup_segment_needs_the_fused_optimizer():
    """ShardConfig(step_backup="segment") calls the optimizer per segment: a torch optimizer,
    which steps the whole shard at once, is refused naming what to use; the fused one trains;
    an unknown value is refused naming the choices."""
    comm = one_rank_comm()
    sharded = zt.shard(models.make("mlp"), stage=3, comm=comm,
                       config=zt.ShardConfig(step_backup="segment")).zrt
    with pytest.raises(ValueError, match=r"step_backup=\"segment\"\) use zrt.torch.FusedOptimizer"):
        zt.Optimizer(sharded, torch.optim.AdamW, lr=1e-3)
    sharded.close()
    # Per segment or whole, the fused optimizer's steps give the same bits.
    trained = [_train_fused(comm, backup) for backup in ("segment", True)]
    for a, b in zip(*trained):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match=r"step_backup is 'sometimes'; expected True, False"):
        zt.shard(models.make("mlp"), stage=2, comm=comm,
                 config=zt.ShardConfig(step_backup="sometimes"))
    comm.destroy()


def test_overlapping_units_are_refused():
    comm = one_rank_comm()
    model = models.make("mlp")
    with pytest.raises(ValueError, match="overlap"):
        zt.shard(model, stage=3, units=[model.hidden, model.hidden[0]], comm=comm)
    comm.destroy()


def test_unknown_config_field():
    with pytest.raises(TypeError, match="no field 'stages'"):
        zrt.partition_config(stages=3)


def test_bad_stage_is_zrt_invalid_argument_with_its_message():
    comm = one_rank_comm()
    with pytest.raises(zrt.ZrtError, match="config.stage is 7") as raised:
        zt.shard(models.make("mlp"), stage=7, comm=comm)
    assert raised.value.status_name == "INVALID_ARGUMENT"
    comm.destroy()


@pytest.mark.parametrize("stage", [2, 3])
def test_no_sync_needs_no_flag_chosen_in_advance(stage):
    """Without ShardConfig(no_sync_accumulation) torch's .grad accumulates inside no_sync
    (test_ddp holds the bits); the next synced backward hands the sum to zrt and frees it."""
    comm = one_rank_comm()
    model = models.make("mlp")
    sharded = zt.shard(model, stage=stage, comm=comm).zrt
    x, y = models.batch("mlp", 0, 1, 0)
    with sharded.no_sync():
        models.loss_of("mlp", model(x), y).backward()
    with zt._guard.bypass():
        held = [p.tensor.grad is not None for p in sharded.params]
    assert all(held), "no_sync kept no local gradient"
    models.loss_of("mlp", model(x), y).backward()
    with zt._guard.bypass():
        assert all(p.tensor.grad is None for p in sharded.params), "local gradients not freed"
    sharded.close()
    comm.destroy()


def test_step_without_backward_is_invalid_usage():
    comm = one_rank_comm()
    model = models.make("mlp")
    sharded = zt.shard(model, stage=2, comm=comm).zrt
    opt = zt.Optimizer(sharded, torch.optim.SGD, lr=0.1)
    with pytest.raises(zrt.ZrtError) as raised:
        opt.step()
    assert raised.value.status_name == "INVALID_USAGE"
    assert "grad_ready" in raised.value.message or "gradients" in raised.value.message
    sharded.close()
    comm.destroy()


def test_oob_allgather_raising_carries_the_python_message():
    def broken(data):
        raise ConnectionError("the framework's group is gone")

    with pytest.raises(zrt.ZrtError, match="the framework's group is gone"):
        zrt.Comm.from_oob(0, 2, broken, timeout_s=5)
