"""Simulated hosts for the multihost suite: a context manager over scripts/netns.sh.

    with SimulatedHosts(2) as hosts:
        rank0 = hosts.popen(0, [exe, ...], env={...})
        hosts.link(1, up=False)

Each host has its own network, hostname, IPC, PID and mount namespaces; hosts.addr(i) is its
address. Leaving the block kills what still runs on the hosts and deletes the namespaces, also
when the test fails. skip_unless_possible() exits 77 (meson's skip) with the reason when this
machine cannot make namespaces (not root, no `ip netns`); under CI=true, where CI must run the
suite, it exits 1 instead.
"""
import os
import subprocess
import sys

NETNS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                     "netns.sh")


def skip_unless_possible():
    check = subprocess.run([NETNS, "check"], capture_output=True, text=True)
    if check.returncode != 0:
        print(f"multihost test cannot run: {check.stdout.strip() or check.stderr.strip()}",
              file=sys.stderr)
        sys.exit(1 if os.environ.get("CI") == "true" else 77)


def _check_outside_private_tmp(argv):
    """Each host mounts a /tmp of its own (netns.sh), so a program or file under this machine's
    /tmp is not there: say so, instead of the host's shell reporting "not found"."""
    for arg in argv:
        for token in arg.replace("'", " ").replace('"', " ").split():
            if token.startswith("/tmp/") and os.path.exists(token):
                raise RuntimeError(
                    f"{token} lies under /tmp, which every simulated host replaces with its own "
                    "(scripts/netns.sh): build and run the multihost suite from a folder "
                    "outside /tmp")


class SimulatedHosts:
    def __init__(self, count, name=None):
        self.count = count
        # Namespace names carry the pid so that tests running at once never share a host.
        self.name = name or f"z{os.getpid() % 10**7}"
        self._processes = []

    def __enter__(self):
        subprocess.run([NETNS, "up", self.name, str(self.count)], check=True)
        return self

    def __exit__(self, *exc):
        for process in self._processes:
            if process.poll() is None:
                process.kill()  # SIGKILL to the netns.sh exec process ends the host's PID ns
        for process in self._processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        subprocess.run([NETNS, "down", self.name], check=False)
        return False

    def addr(self, index):
        return f"10.213.0.{index + 1}"

    def hostname(self, index):
        return f"{self.name}-h{index}"

    def argv(self, index, argv):
        """The command line that runs argv on host `index` (for callers that spawn it)."""
        argv = [str(a) for a in argv]
        _check_outside_private_tmp(argv)
        return [NETNS, "exec", self.name, str(index)] + argv

    def popen(self, index, argv, env=None, **kwargs):
        """Starts argv on host `index`; env adds to this process's environment."""
        full_env = dict(os.environ)
        full_env.update(env or {})
        process = subprocess.Popen(self.argv(index, argv), env=full_env, **kwargs)
        self._processes.append(process)
        return process

    def run(self, index, argv, env=None, timeout=120, **kwargs):
        """Runs argv on host `index` to completion; returns its CompletedProcess."""
        process = self.popen(index, argv, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, **kwargs)
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
            raise AssertionError(f"host {index}: {argv} ran past {timeout} s:\n{output}")
        return subprocess.CompletedProcess(process.args, process.returncode, output)

    def link(self, index, up):
        subprocess.run([NETNS, "link", self.name, str(index), "up" if up else "down"],
                       check=True)

    def shape(self, index, rate):
        """Limits host `index`'s link to `rate` each way (e.g. "1gbit"); None removes it."""
        subprocess.run([NETNS, "shape", self.name, str(index), rate or "none"], check=True)
