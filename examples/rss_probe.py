"""The measured side of a Python example's memory report: this process's resident set, read from
/proc, beside what zrt's memory report says the partition manager holds (train_lm's rss.cc is
the C++ one, and its comment says what the kernel counts twice).

The baseline is taken just before zrt.torch.shard, with the model built. Setup (shard, which
allocates zrt's arenas and touches every page while the model's own parameters still exist,
and the optimizer) ends with the model's freed parameters handed back to the system
(malloc_trim: glibc keeps freed heap memory resident), and the peak is watched again from
there: training adds torch's working set (activations, autograd's temporaries) and the peers'
memory zrt maps here (each page in its owner's total) to what setup left. What zrt holds is
then the larger of the setup peak and the training peak less the peers' memory, over the
baseline: zrt's total, where torch's working set stays below the parameters the model gave up.
"""
import ctypes
import os

_FIELDS = ("VmRSS", "VmHWM")
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h


def status_bytes(field):
    """A field of /proc/self/status in bytes, or None where it has none."""
    if field not in _FIELDS:
        raise ValueError(f"status_bytes: field {field!r} is not one of {_FIELDS}")
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name == field:
                return int(value.split()[0]) * 1024
    return None


def peer_memfd_resident_bytes():
    """Resident bytes of memfd mappings whose file this process does not hold open: other
    processes' memory (zrt keeps an fd of each memfd it allocates and closes the one it opens
    to map a peer's)."""
    own = set()
    for fd in os.listdir("/proc/self/fd"):
        path = f"/proc/self/fd/{fd}"
        try:
            if os.readlink(path).startswith("/memfd:"):
                own.add(os.stat(path).st_ino)
        except OSError:
            continue  # closed meanwhile (the listing's own fd, say)
    total = 0
    peer = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5 and not fields[0].endswith(":"):
                peer = (len(fields) >= 6 and fields[5].startswith("/memfd:")
                        and int(fields[4]) not in own)
            elif peer and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


class RssProbe:
    def __init__(self):
        self.baseline = self.peers_baseline = None
        self.setup_peak = self.training_start = self.training_peak = None
        self.peak = self.peers_end = None

    def take_baseline(self):
        # From here on every allocation of 1 MiB or more is a mapping of its own, which free
        # unmaps: glibc would otherwise keep torch's freed temporaries (the first step's
        # optimizer state, say) resident in its heap, and the peak would measure its free lists.
        try:
            ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, 1 << 20)
        except (OSError, AttributeError):
            pass
        self._reset_peak()
        self.peers_baseline = peer_memfd_resident_bytes()
        self.baseline = status_bytes("VmRSS")

    def end_setup(self):
        self.setup_peak = status_bytes("VmHWM")
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass  # another C library: what it keeps stays in the training figure
        self._reset_peak()
        self.training_start = status_bytes("VmRSS")

    def take_peak(self):
        self.training_peak = status_bytes("VmHWM")
        self.peak = max(self.setup_peak, self.training_peak)
        self.peers_end = peer_memfd_resident_bytes()

    @staticmethod
    def _reset_peak():
        # "5" resets VmHWM to the current RSS (Linux 4.0 on). Where refused, VmHWM stays the
        # run's peak, which errs only upward.
        try:
            with open("/proc/self/clear_refs", "w") as clear:
                clear.write("5")
        except OSError:
            pass

    def lines(self, rank, zrt_total, tolerance):
        """train_lm's line (the same pattern reads both) and one on training, and whether the
        run's peak growth less the peers' memory is within `tolerance` of zrt_total."""
        mib = 1 << 20
        growth = self.peak - self.baseline
        peers = self.peers_end - self.peers_baseline
        # The peers' memory is mapped at the first collectives, in training.
        own = max(self.setup_peak, self.training_peak - peers) - self.baseline
        ratio = own / zrt_total if zrt_total > 0 else float("inf")
        ok = abs(ratio - 1) <= tolerance
        check = (f"rank {rank} measured peak RSS growth {growth / mib:.1f} MiB - peers' memory "
                 f"mapped here {peers / mib:.1f} MiB = {own / mib:.1f} MiB, zrt total "
                 f"{zrt_total / mib:.1f} MiB: {ratio:.3f}x, residual "
                 f"{(own - zrt_total) / mib:+.1f} MiB ({'ok' if ok else 'MISMATCH'})")
        setup = (self.setup_peak - self.baseline) / mib
        start = (self.training_start - self.baseline) / mib
        training = (f"rank {rank} setup peak {setup:.1f} MiB over the baseline; training from "
                    f"{start:.1f} MiB (the model's parameters returned) to a peak of "
                    f"{(self.training_peak - self.baseline) / mib:.1f} MiB, the peers' "
                    f"{peers / mib:.1f} MiB included")
        return check, training, ok
