"""zrt and torch.distributed in one job, without extra variables.

Under zrt-run, MASTER_PORT is torch's and zrt's store has its own port (ZRT_STORE_PORT).
Under torchrun (emulated: its crashes under Python 3.11 here), MASTER_PORT is torch's and zrt
derives MASTER_PORT+1. torchrun is emulated faithfully: the variables its agent sets
(local_elastic_agent.py: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_*,
MASTER_ADDR/PORT, TORCHELASTIC_*), and a torch TCPStore holding MASTER_ADDR/MASTER_PORT as the
agent's rendezvous store does: on MASTER_PORT itself with static rendezvous (the workers use it
as their store), on a separate endpoint with c10d (torch's rank 0 then serves MASTER_PORT).
"""
import os
import socket
import subprocess
import sys

import pytest
import torch.distributed as dist

from conftest import HERE, environment, free_port, free_port_pair, launch

WORKER = os.path.join(HERE, "worker_launch.py")


@pytest.mark.parametrize("mode", ["torch-then-zrt", "zrt-then-torch", "from-torch"])
def test_zrt_run_and_torch_default_init(mode):
    result = launch(2, "worker_launch.py", mode)
    for rank in range(2):
        assert f"OK rank {rank} zrt 3.0 torch 3.0" in result.stdout, result.stdout + result.stderr


def torchrun_environment(rank, world, master_port, static):
    env = {k: v for k, v in environment().items()
           if not k.startswith(("ZRT_", "TORCHELASTIC_")) or k == "ZRT_LIBRARY"}
    env.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0",
                "ROLE_RANK": str(rank), "ROLE_NAME": "default", "WORLD_SIZE": str(world),
                "LOCAL_WORLD_SIZE": str(world), "GROUP_WORLD_SIZE": "1",
                "ROLE_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(master_port), "TORCHELASTIC_RESTART_COUNT": "0",
                "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_RUN_ID": "zrt-test",
                "TORCHELASTIC_USE_AGENT_STORE": str(static), "NCCL_ASYNC_ERROR_HANDLING": "1"})
    return env


class Torchrun:
    """The agent's side of torchrun: its rendezvous store, then the workers."""

    def __init__(self, static, world=2):
        self.world = world
        self.static = static
        # torchrun's default MASTER_PORT (29500) is below the ephemeral range; so is this one.
        self.master_port = free_port_pair()
        endpoint = self.master_port
        while not static and abs(endpoint - self.master_port) <= 1:  # zrt's is MASTER_PORT+1
            endpoint = free_port()
        self.store = dist.TCPStore("127.0.0.1", endpoint, world + 1, True, wait_for_workers=False)
        self.store.set("MASTER_ADDR", "127.0.0.1")
        self.store.set("MASTER_PORT", str(self.master_port))

    def run(self, mode, timeout_s=60):
        processes = [subprocess.Popen([sys.executable, WORKER, mode, str(timeout_s)],
                                      env=torchrun_environment(r, self.world, self.master_port,
                                                               self.static),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True) for r in range(self.world)]
        outputs = []
        for process in processes:
            try:
                out, _ = process.communicate(timeout=timeout_s + 60)
            except subprocess.TimeoutExpired:
                process.kill()
                out, _ = process.communicate()
            outputs.append((process.returncode, out))
        return outputs


@pytest.mark.parametrize("static", [True, False], ids=["static", "c10d"])
@pytest.mark.parametrize("mode", ["torch-then-zrt", "zrt-then-torch", "from-torch"])
def test_torchrun_environment(static, mode):
    agent = Torchrun(static)
    outputs = agent.run(mode)
    for rank, (code, out) in enumerate(outputs):
        assert code == 0 and f"OK rank {rank} zrt 3.0 torch 3.0" in out, out


def test_torchrun_derived_port_taken_says_which_and_what_to_set():
    agent = Torchrun(static=True)
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", agent.master_port + 1))
    squatter.listen()
    try:
        (code, out), _ = agent.run("zrt-only", timeout_s=5)
    finally:
        squatter.close()
    assert code == 3, out
    assert f"port {agent.master_port + 1}" in out, out
    assert "MASTER_PORT+1 under torchrun" in out and "set ZRT_STORE_PORT" in out, out


def test_master_port_held_by_torch_says_so():
    """Plain RANK/WORLD_SIZE/MASTER_PORT (no launcher of zrt's, not torchrun): torch's store
    holds MASTER_PORT first, and zrt's rank 0 says who may hold it and what to set."""
    port = free_port()
    env = {k: v for k, v in environment().items()
           if not k.startswith(("ZRT_", "TORCHELASTIC_")) or k == "ZRT_LIBRARY"}
    processes = []
    for rank in range(2):
        e = dict(env, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                 MASTER_PORT=str(port))
        processes.append(subprocess.Popen([sys.executable, WORKER, "torch-then-zrt", "5"], env=e,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
    outputs = [p.communicate(timeout=90)[0] for p in processes]
    assert "ZRTERROR" in outputs[0], outputs
    assert f"port {port} is MASTER_PORT" in outputs[0], outputs[0]
    assert "torch.distributed" in outputs[0] and "ZRT_STORE_PORT" in outputs[0], outputs[0]
