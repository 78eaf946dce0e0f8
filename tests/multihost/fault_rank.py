"""One rank of the multihost fault tests: blocking f32 all-reduces (FAULT_COUNT elements, default
8 Mi = 32 MiB) through libzrt (ctypes, ZRT_LIBRARY) until one fails. Prints "ITER i" as it goes
and, when a call fails, "RETURNED <monotonic seconds> <status> <message>" (CLOCK_MONOTONIC is
shared by the simulated hosts), then destroys the communicator and exits 0: a survivor's exit
code is its error path, so any other code (134 for an abort) is a failure of the library.
With FAULT_KILL_AT=i (and FAULT_KILL_RANK unset or equal to RANK) it prints "KILLED <monotonic>"
and kills itself with SIGKILL FAULT_KILL_MS (default 10) ms into iteration i's collective.
SIGTERM (zrt-run's, once another rank failed) is held until the call in flight returns, so that
a survivor still reports what its call returned."""
import ctypes
import os
import signal
import sys
import threading
import time

lib = ctypes.CDLL(os.environ["ZRT_LIBRARY"])
lib.zrt_last_error.restype = ctypes.c_char_p
# A Python handler runs between bytecodes, so not while zrt_all_reduce blocks: the call returns
# first, then the handler, which lets the rank go on to report and exit on its own.
signal.signal(signal.SIGTERM, lambda *_: None)


def say(line):
    # One write per line: the ranks of a host share one pipe (print writes the newline apart).
    os.write(1, (line + "\n").encode())


def kill_me():
    say(f"KILLED {time.monotonic():.3f}")
    os.kill(os.getpid(), signal.SIGKILL)


comm, stream = ctypes.c_void_p(), ctypes.c_void_p()
if lib.zrt_comm_init_env(None, ctypes.byref(comm)) != 0:
    say(f"INIT FAILED {lib.zrt_last_error().decode()}")
    sys.exit(3)
if lib.zrt_stream_create(comm, 0, ctypes.byref(stream)) != 0:
    say(f"STREAM FAILED {lib.zrt_last_error().decode()}")
    sys.exit(3)
count = int(os.environ.get("FAULT_COUNT", str(8 << 20)))
buffer = (ctypes.c_float * count)()
victim = os.environ.get("FAULT_KILL_RANK", os.environ.get("RANK"))
kill_at = int(os.environ.get("FAULT_KILL_AT", "-1")) if victim == os.environ.get("RANK") else -1
kill_after = int(os.environ.get("FAULT_KILL_MS", "10")) / 1000

for iteration in range(100000):
    if iteration == kill_at:
        threading.Timer(kill_after, kill_me).start()
    status = lib.zrt_all_reduce(comm, buffer, buffer, ctypes.c_size_t(count), 0, 0, stream)
    if status == 0:
        status = lib.zrt_stream_synchronize(stream)
    if status != 0:
        say(f"RETURNED {time.monotonic():.3f} {status} {lib.zrt_last_error().decode()}")
        break
    say(f"ITER {iteration}")
lib.zrt_comm_destroy(comm)
say("DESTROYED")
