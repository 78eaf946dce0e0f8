"""Closing at interpreter exit what the program left open: partition managers, then the
communicators they live on, newest first, so that every rank's connections close together
(a collective close) instead of each peer seeing the others vanish.

A program that ends with an exception its code did not catch is failing: its peers may be
waiting in a collective that this rank will never join, so a collective close would wait for
them until the timeout. Its communicators are aborted first (local and immediate), and the
launcher sees the failure at once.
"""
import atexit
import sys
import weakref

_live = []
_failed = []


def track(obj):
    """obj has close() or destroy(), safe to call twice; it is closed at exit if still alive."""
    _live.append(weakref.ref(obj))


def _note_failure(kind, value, traceback):
    _failed.append(kind)
    _previous_hook(kind, value, traceback)


_previous_hook = sys.excepthook
sys.excepthook = _note_failure


@atexit.register
def _close_all():
    alive = [obj for obj in (ref() for ref in reversed(_live)) if obj is not None]
    if _failed:
        for obj in alive:
            if hasattr(obj, "abort"):
                _report(obj, obj.abort)
    for obj in alive:
        _report(obj, getattr(obj, "close", None) or obj.destroy)
    _live.clear()


def _report(obj, action):
    try:
        action()
    except Exception as error:
        print(f"zrt: closing a {type(obj).__name__} at exit: {error}", file=sys.stderr)
