"""zrt.torch where a fully_shard user would put it: shard() returns the model, parameters read
outside forward raise a clear error instead of faulting, model.state_dict() and
load_state_dict() work at every stage, torch's clip_grad_norm_ refuses instead of silently
clipping nothing, buffers start equal, and a process that exits without close() is quiet."""
import json
import time

import pytest

from conftest import launch


def run(tmp_path, check, stages="1,2,3", ranks=2):
    out = tmp_path / check
    result = launch(ranks, "worker_dropin.py", "--check", check, "--stages", stages,
                    "--out", out)
    return [json.loads((tmp_path / f"{check}.{r}").read_text()) for r in range(ranks)], result


def test_shard_returns_the_model_and_shards_fully_by_default(tmp_path):
    ranks, _ = run(tmp_path, "default_stage", stages="0")
    assert ranks[0]["0"]["default_stage"] == 3


def test_reading_a_sharded_parameter_raises_what_to_call(tmp_path):
    ranks, _ = run(tmp_path, "reads", stages="3")
    for seen in ranks:
        out = seen["3"]
        assert out["returns_model"]
        for key in ("sum", "repr", "norms"):
            assert out[key] and out[key].startswith("RuntimeError"), (key, out[key])
            assert "summon_full_params" in out[key]
            assert key == "norms" or "blocks.0.fc.weight" in out[key]
        assert out["shape"] == [128, 32]  # metadata stays readable
        assert out["summoned_equals_state_dict"]
        assert "freed by model.zrt.close()" in out["after_close"]


@pytest.mark.parametrize("stages", ["1,2,3"])
def test_torch_clip_grad_norm_raises_instead_of_clipping_nothing(tmp_path, stages):
    ranks, _ = run(tmp_path, "reads", stages=stages)
    for seen in ranks:
        for stage, out in seen.items():
            assert out["grad_before_backward"] is None, stage
            assert out["grad_after_step"] is None, stage
            assert out["torch_clip"] and "model.zrt.clip_grad_norm_" in out["torch_clip"], stage
            assert out["zrt_clip"] > 0, stage


def test_state_dict_round_trip_at_every_stage(tmp_path):
    ranks, _ = run(tmp_path, "state_dict", stages="0,1,2,3")
    for seen in ranks:
        for stage, out in seen.items():
            assert out["keys_equal"] and out["values_equal"], stage
            assert out["incompatible"] == [[], []], stage
            assert "missing keys ['head.bias']" in out["strict_missing"], stage
            assert "shape" in out["bad_shape"], stage
            assert out["continues_alike"], stage


def test_buffers_are_broadcast_from_rank_0(tmp_path):
    ranks, _ = run(tmp_path, "buffers", stages="2,3")
    for stage, out in ranks[0].items():
        every = out["buffers"]
        assert every[0] == every[1], stage
        assert every[0]["norm.running_mean"] == [1.0] * 16, stage
        assert every[0]["norm.num_batches_tracked"] == 10, stage


def test_exit_without_close_is_quiet(tmp_path):
    for attempt in range(4):
        ranks, result = run(tmp_path, "exit_without_close", stages="3")
        for text in (result.stdout, result.stderr):
            for noise in ("died", "closed its connection", "Traceback", "zrt: closing"):
                assert noise not in text, (attempt, text[-3000:])


def test_an_uncaught_exception_ends_the_job_without_waiting_out_the_timeout(tmp_path):
    """Rank 1 raises while rank 0 waits in a collective: rank 1's exit aborts its communicator
    instead of closing it collectively (which would wait for rank 0 until the 100 s timeout),
    so the launcher sees the failure at once."""
    start = time.monotonic()
    result = launch(2, "worker_dropin.py", "--check", "one_rank_raises", "--stages", "3",
                    "--out", tmp_path / "raises", check=False)
    elapsed = time.monotonic() - start
    assert result.returncode != 0
    assert "rank 1 fails before its first step" in result.stdout + result.stderr
    assert elapsed < 60, f"the job took {elapsed:.0f} s: rank 1's exit waited for its peer"
