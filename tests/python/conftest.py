"""Shared helpers of the python suite: where zrt-run and the workers are, and how to launch.

The suite runs from meson (`meson test --suite python`, which sets ZRT_LIBRARY, ZRT_RUN_EXE
and PYTHONPATH) or by hand: `PYTHONPATH=python /usr/bin/python3 -m pytest tests/python`
after a build in build/ (the package then finds build/zero/api/libzrt.so itself).
"""
import json
import os
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def zrt_run_exe():
    path = os.environ.get("ZRT_RUN_EXE") or os.path.join(REPO, "build", "tools", "zrt-run",
                                                         "zrt-run")
    if not os.path.exists(path):
        pytest.skip(f"zrt-run not built ({path}); set ZRT_RUN_EXE")
    return path


def environment(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "python"), HERE] + [
        p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


def launch(ranks, script, *args, timeout=240, check=True, env=None):
    """zrt-run -n ranks python script args...; returns the CompletedProcess."""
    command = [zrt_run_exe(), "-n", str(ranks), "--timeout", str(timeout), sys.executable,
               os.path.join(HERE, script)] + [str(a) for a in args]
    result = subprocess.run(command, capture_output=True, text=True, env=environment(env),
                            timeout=timeout + 30)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} exited with {result.returncode}\n"
                             f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}")
    return result


def run_ddp_stages(tmp_path, ranks, stages, *args, name="run"):
    """One worker_ddp.py job over several stages; returns {stage: (JSON result, zrt params,
    DDP params or None)}."""
    import torch

    out = tmp_path / f"{name}.json"
    launch(ranks, "worker_ddp.py", "--stage", ",".join(str(s) for s in stages), *args,
           "--out", out)
    results = json.loads(out.read_text())
    every = {}
    for stage in stages:
        prefix = f"{out}.{stage}"
        ddp = prefix + ".ddp.pt"
        every[stage] = (results[str(stage)], torch.load(prefix + ".zrt.pt"),
                        torch.load(ddp) if os.path.exists(ddp) else None)
    return every


def run_ddp(tmp_path, ranks, *args, stage=2, name="run"):
    """One worker_ddp.py job at one stage; returns (JSON result, zrt params, DDP params)."""
    return run_ddp_stages(tmp_path, ranks, [stage], *args, name=name)[stage]


def free_ports(count):
    """A port P with P .. P+count-1 free, below the ephemeral range (32768-60999 on Linux), so
    that no connection or bind(0) of this busy machine takes one (zrt's P+1 under torchrun)
    before its listener binds it."""
    import random

    for _ in range(200):
        port = random.randrange(20000, 32000)
        sockets = [socket.socket() for _ in range(count)]
        try:
            for offset, s in enumerate(sockets):
                s.bind(("", port + offset))
            return port
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError(f"no {count} free consecutive ports in 20000-32000")


def free_port():
    return free_ports(1)


def free_port_pair():
    return free_ports(2)
