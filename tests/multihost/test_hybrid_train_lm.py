"""train_lm across two simulated hosts x two ranks, launched by environment by hand on each host
(RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR = host 0, MASTER_PORT,
ZRT_JOB_TOKEN): stages 0-3 with flat sharding and stages 1-3 with hybrid sharding (the default
shard group, one host: 2 groups of 2), and stage 3 with hpZ (--hpz -1: a secondary copy in
one host's two ranks) print the loss curve of the same job on one host.

The one-host reference runs its four ranks on host 0 with the same shard group size, so both
reduce in the same order; the curves are compared at 1e-6 relative per step (the report prints
the worst difference: 0 when the order is kept bit for bit).

    test_hybrid_train_lm.py TRAIN_LM [--steps K]
"""
import argparse
import os
import re
import shlex
import subprocess
import sys

from simhosts import SimulatedHosts, skip_unless_possible

LOSS = re.compile(r"step\s+(\d+)\s+loss\s+([0-9.]+)")
SPLIT = re.compile(r"hybrid sharding, (\d+) groups of (\d+): intra-group (.*) per step, "
                   r"inter-group (.*) per step; formula .*: (ok|MISMATCH)")
HPZ = re.compile(r"hpZ, secondary copy (.*) in groups of (\d+): intra-group (.*) per step; "
                 r"formula .*: (ok|MISMATCH)")


def launch(hosts, placement, argv, port, token, timeout):
    """Starts the ranks (placement[r] = rank r's host); returns host 0's output (rank 0's lines).

    The ranks of one host start from one shell on it, so they share its PID and IPC namespaces
    as the processes of one machine do (each `netns.sh exec` is a machine of its own)."""
    world = len(placement)
    processes = []
    for host in sorted(set(placement)):
        local = [r for r, h in enumerate(placement) if h == host]
        lines = []
        for rank in local:
            env = {"RANK": rank, "WORLD_SIZE": world, "LOCAL_RANK": local.index(rank),
                   "LOCAL_WORLD_SIZE": len(local), "MASTER_ADDR": hosts.addr(0),
                   "MASTER_PORT": port, "ZRT_JOB_TOKEN": token}
            assignments = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in env.items())
            lines.append(f"env {assignments} {' '.join(shlex.quote(a) for a in argv)} &")
        lines.append("fail=0; for p in $(jobs -p); do wait $p || fail=1; done; exit $fail")
        processes.append(hosts.popen(host, ["bash", "-c", "\n".join(lines)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = []
    failed = []
    for host, process in enumerate(processes):
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
            failed.append(f"host {host} ran past {timeout} s")
        outputs.append(output)
        if process.returncode != 0:
            failed.append(f"host {host}'s ranks exited {process.returncode}")
    if failed:
        print("\n".join(f"--- host {h}\n{o}" for h, o in enumerate(outputs)))
        raise SystemExit(f"FAIL: {' '.join(argv)} on hosts {placement}: {', '.join(failed)}")
    return outputs[0]


def losses_of(output, what):
    losses = {int(m.group(1)): float(m.group(2)) for m in LOSS.finditer(output)}
    if not losses:
        print(output)
        raise SystemExit(f"FAIL: no loss lines from {what}")
    return losses


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("train_lm")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--tolerance", type=float, default=1e-6)
    parser.add_argument("--timeout", type=float, default=240)
    args = parser.parse_args()
    skip_unless_possible()

    token = f"hybrid-test-{os.getpid()}"
    # Below Linux's ephemeral range (32768-60999): a port there may be held by a socket another
    # run's UCX tcp connections left (seen: "Address already in use" on rank 0's store).
    port = 20000 + os.getpid() % 12000
    one_host = [0, 0, 0, 0]
    two_hosts = [0, 0, 1, 1]
    # (stage, option, its value on one host, on two hosts): flat is G = 4; hybrid by host (-1) on
    # two hosts is one host's two ranks, which the one-host reference must ask for as G = 2; hpZ
    # is bit-equal to flat stage 3, its secondary groups by host (-1) one host's two ranks.
    cases = ([(s, "--shard-group", "4", "4") for s in range(4)] +
             [(s, "--shard-group", "2", "-1") for s in (1, 2, 3)] + [(3, "--hpz", "2", "-1")])
    worst = 0.0
    with SimulatedHosts(2) as hosts:
        for stage, option, one_group, two_group in cases:
            base = [args.train_lm, "--stage", str(stage), "--steps", str(args.steps),
                    "--print-every", "1", "--batch", "48"]
            port += 1
            reference_out = launch(hosts, one_host, base + [option, one_group], port, token,
                                   args.timeout)
            port += 1
            across_out = launch(hosts, two_hosts, base + [option, two_group], port, token,
                                args.timeout)
            name = f"stage {stage} {option} {one_group}"
            reference = losses_of(reference_out, name + " on one host")
            across = losses_of(across_out, name + " on two hosts")
            if sorted(reference) != sorted(across):
                raise SystemExit(f"FAIL: {name}: steps {sorted(across)} vs {sorted(reference)}")
            for step, value in reference.items():
                error = abs(across[step] - value) / max(abs(value), 1e-12)
                worst = max(worst, error)
                if error > args.tolerance:
                    print(across_out)
                    raise SystemExit(f"FAIL: {name} step {step}: loss {across[step]} across "
                                     f"hosts vs {value} on one host (relative {error:.2e})")
            split = SPLIT.search(across_out)
            if option == "--hpz":
                hpz = HPZ.search(across_out)
                if hpz is None or hpz.group(2) != "2" or hpz.group(4) != "ok":
                    print(across_out)
                    raise SystemExit(f"FAIL: {name}: hpZ across two hosts is not one host's two "
                                     "ranks, or its traffic is off the formula")
                print(f"{name}: secondary copy {hpz.group(1)}, intra-group {hpz.group(3)}")
            elif one_group == "2":
                if split is None or split.group(1) != "2" or split.group(2) != "2":
                    print(across_out)
                    raise SystemExit(f"FAIL: {name}: the default shard group across two hosts "
                                     "is not one host's two ranks")
                if split.group(5) != "ok":
                    raise SystemExit(f"FAIL: {name}: traffic split off its formula")
                print(f"{name}: traffic split intra {split.group(3)}, inter {split.group(4)}")
            print(f"{name}: " + " ".join(f"{across[k]:.6f}" for k in sorted(across)))
    print(f"ok: {len(cases)} runs across 2 hosts x 2 ranks, worst relative difference from one "
          f"host {worst:.2e}")


if __name__ == "__main__":
    sys.exit(main())
