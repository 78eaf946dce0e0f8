"""One rank of the multihost fault tests: blocking 32 MiB f32 all-reduces through libzrt
(ctypes, ZRT_LIBRARY) until one fails. Prints "ITER i" as it goes and, when a call fails,
"RETURNED <monotonic seconds> <status> <message>" (CLOCK_MONOTONIC is shared by the simulated
hosts). With FAULT_KILL_AT=i it kills itself with SIGKILL 10 ms into iteration i's collective."""
import ctypes
import os
import signal
import sys
import threading
import time

lib = ctypes.CDLL(os.environ["ZRT_LIBRARY"])
lib.zrt_last_error.restype = ctypes.c_char_p
comm, stream = ctypes.c_void_p(), ctypes.c_void_p()
if lib.zrt_comm_init_env(None, ctypes.byref(comm)) != 0:
    print(f"INIT FAILED {lib.zrt_last_error().decode()}", flush=True)
    sys.exit(3)
if lib.zrt_stream_create(comm, 0, ctypes.byref(stream)) != 0:
    print(f"STREAM FAILED {lib.zrt_last_error().decode()}", flush=True)
    sys.exit(3)
count = 8 << 20
buffer = (ctypes.c_float * count)()
kill_at = int(os.environ.get("FAULT_KILL_AT", "-1"))


def say(line):
    # One write per line: the two ranks of a host share one pipe (print writes the newline apart).
    os.write(1, (line + "\n").encode())


for iteration in range(100000):
    if iteration == kill_at:
        threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGKILL)).start()
    status = lib.zrt_all_reduce(comm, buffer, buffer, ctypes.c_size_t(count), 0, 0, stream)
    if status == 0:
        status = lib.zrt_stream_synchronize(stream)
    if status != 0:
        say(f"RETURNED {time.monotonic():.3f} {status} {lib.zrt_last_error().decode()}")
        break
    say(f"ITER {iteration}")
lib.zrt_comm_destroy(comm)
say("DESTROYED")
