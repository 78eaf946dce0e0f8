"""zrt statuses as Python exceptions: every failed call raises ZrtError carrying
zrt_last_error(), the message that names the function, the argument or peer, and the cause."""
from . import _lib

_NAMES = {0: "SUCCESS", 1: "IN_PROGRESS", 2: "INVALID_ARGUMENT", 3: "INVALID_USAGE",
          4: "SYSTEM_ERROR", 5: "REMOTE_ERROR", 6: "TIMEOUT", 7: "UNSUPPORTED",
          8: "OUT_OF_MEMORY", 9: "INTERNAL_ERROR", 10: "CALLBACK_ERROR"}


def status_name(status):
    """The enum name of a status ("CALLBACK_ERROR"), or its number when this package is older."""
    return _NAMES.get(status, f"status {status}")


class ZrtError(RuntimeError):
    """A zrt call failed. `status` is the zrt_status_t, `message` zrt_last_error()."""

    def __init__(self, function, status, message):
        self.function = function
        self.status = status
        self.status_name = status_name(status)
        self.message = message
        super().__init__(f"{function}: {self.status_name}: {message}")


def check(function, status):
    """Raises ZrtError unless status is ZRT_SUCCESS (read the message on the same thread)."""
    if status != _lib.SUCCESS:
        raw = _lib.lib.zrt_last_error()
        raise ZrtError(function, status, raw.decode(errors="replace") if raw else "")


def call(name, *args):
    """Calls the C function `name` and raises on failure."""
    check(name, getattr(_lib.lib, name)(*args))


def callback_failed(error):
    """What a zrt callback returns for a Python exception (one must never cross ctypes): the
    exception's text as the callback's message (zrt_callback_error, which zrt shows with the
    failing rank on every rank)."""
    text = f"{type(error).__name__}: {error}".encode(errors="replace")
    return _lib.lib.zrt_callback_error(text)
