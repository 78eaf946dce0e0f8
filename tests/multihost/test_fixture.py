"""The simulated hosts are what the multihost tests assume: each has its own hostname, PID
namespace and /dev/shm, and the hosts reach each other only through the network."""
import subprocess
import sys
import unittest

import simhosts

PROBE = r"""
import os, socket, sys
role, peer = sys.argv[1], sys.argv[2]
print(socket.gethostname(), os.getpid(), sorted(os.listdir("/dev/shm")), flush=True)
if role == "server":
    listener = socket.create_server(("0.0.0.0", 5555))
    connection, _ = listener.accept()
    connection.sendall(connection.recv(5))
else:
    for _ in range(100):
        try:
            connection = socket.create_connection((peer, 5555), timeout=1)
            break
        except OSError:
            import time; time.sleep(0.05)
    connection.sendall(b"hello")
    print(connection.recv(5).decode(), flush=True)
"""


class FixtureTest(unittest.TestCase):
    def test_hosts_are_separate_and_connected(self):
        with simhosts.SimulatedHosts(2) as hosts:
            marker = "/dev/shm/zrt-fixture-marker"
            server = hosts.popen(0, ["/bin/sh", "-c", f"touch {marker}; exec \"$0\" -c \"$1\" server -",
                                     sys.executable, PROBE], stdout=subprocess.PIPE, text=True)
            client = hosts.run(1, [sys.executable, "-c", PROBE, "client", hosts.hostname(0)],
                               timeout=30)
            server_out, _ = server.communicate(timeout=30)
            self.assertEqual(client.returncode, 0, client.stdout)
            self.assertEqual(server.returncode, 0, server_out)
            server_name, server_pid, server_shm = server_out.splitlines()[0].split(" ", 2)
            client_lines = client.stdout.splitlines()
            self.assertEqual(server_name, hosts.hostname(0))
            self.assertTrue(client_lines[0].startswith(hosts.hostname(1) + " "), client_lines)
            self.assertIn("zrt-fixture-marker", server_shm)
            self.assertNotIn("zrt-fixture-marker", client_lines[0])  # /dev/shm is per host
            self.assertEqual(server_pid, "1")  # the host's own PID namespace (sh exec'd python)
            self.assertEqual(client_lines[-1], "hello")

    def test_link_down_cuts_the_host_off(self):
        with simhosts.SimulatedHosts(2) as hosts:
            hosts.link(1, up=False)
            probe = ("import socket\ntry:\n socket.create_connection(('%s', 9), timeout=1)\n"
                     "except ConnectionRefusedError: print('reached')\n"
                     "except OSError: print('cut off')" % hosts.addr(0))
            result = hosts.run(1, [sys.executable, "-c", probe], timeout=30)
            self.assertEqual(result.stdout.strip(), "cut off")
            hosts.link(1, up=True)
            result = hosts.run(1, [sys.executable, "-c", probe], timeout=30)
            self.assertEqual(result.stdout.strip(), "reached")


if __name__ == "__main__":
    simhosts.skip_unless_possible()
    unittest.main()
