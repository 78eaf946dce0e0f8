"""state_dict / load_state_dict of a sharded model (one rank: no launcher variables)."""
import pytest
import torch

import zrt
import zrt.torch as zt

import models


@pytest.mark.parametrize("stage", [1, 3])
def test_load_state_dict_round_trip(stage):
    torch.set_num_threads(1)
    comm = zrt.Comm.from_env()
    model = models.make("gpt", seed=0)
    other = models.make("gpt", seed=1)
    sharded = zt.shard(model, stage=stage, comm=comm,
                       config=zt.ShardConfig(persistence_threshold=0)).zrt
    sharded.load_state_dict(other.state_dict())
    x, _ = models.batch("gpt", 0, 1, 0)
    with torch.no_grad():
        assert torch.equal(model(x), other(x))
    state = sharded.state_dict()
    for name, value in other.state_dict().items():
        assert state[name].shape == value.shape and torch.equal(state[name], value), name
    with pytest.raises(KeyError, match="misses"):
        sharded.load_state_dict({})
    sharded.close()
    comm.destroy()


def test_parameters_are_zrt_memory_without_copies():
    comm = zrt.Comm.from_env()
    model = models.make("mlp")
    sharded = zt.shard(model, stage=2, comm=comm).zrt
    for p in sharded.params:
        assert p.tensor.data_ptr() == sharded.pm.param_data(p.index)
        assert tuple(p.tensor.shape) == p.shape
    sharded.close()
    comm.destroy()


def test_frozen_unit_and_frozen_parameters():
    """A unit whose parameters are all frozen (requires_grad=False) at stage 3: replicated,
    never reduced; training matches plain torch on one rank."""
    comm = zrt.Comm.from_env()
    torch.manual_seed(0)
    layers = [torch.nn.Linear(8, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)]
    model, reference = torch.nn.Sequential(*layers), torch.nn.Sequential(
        *[torch.nn.Linear(l.in_features, l.out_features) for l in layers])
    reference.load_state_dict(model.state_dict())
    for m in (model, reference):
        for p in m[1].parameters():
            p.requires_grad_(False)
    config = zt.ShardConfig(persistence_threshold=0)
    sharded = zt.shard(model, stage=3, comm=comm, config=config).zrt
    opt = zt.Optimizer(sharded, torch.optim.SGD, lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD([p for p in reference.parameters() if p.requires_grad], lr=0.1,
                              momentum=0.9)
    x = torch.randn(5, 8)
    for _ in range(3):
        ours = model(x).square().mean()
        ours.backward()
        opt.step()
        theirs = reference(x).square().mean()
        theirs.backward()
        ref_opt.step()
        ref_opt.zero_grad()
        assert ours.item() == theirs.item()
    sharded.close()
    comm.destroy()


def read_safetensors(path):
    """A minimal safetensors reader (8-byte header length, JSON header, raw data)."""
    import json
    import struct

    data = open(path, "rb").read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    dtypes = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = bytearray(data[8 + length + begin:8 + length + end])
        out[name] = torch.frombuffer(raw, dtype=dtypes[entry["dtype"]]).reshape(entry["shape"])
    return out


def test_export_has_real_shapes_and_loads_into_the_model(tmp_path):
    comm = zrt.Comm.from_env()
    model = models.make("gpt")
    sharded = zt.shard(model, stage=3, comm=comm).zrt
    path = tmp_path / "model.safetensors"
    sharded.export(path)
    tensors = read_safetensors(path)
    fresh = models.make("gpt", seed=5)
    fresh.load_state_dict(tensors)  # strict: every name, every shape
    for name, value in sharded.state_dict().items():
        assert torch.equal(tensors[name], value), name
    sharded.close()
    comm.destroy()
