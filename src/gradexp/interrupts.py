"""Ctrl-C and SIGTERM: where they may land.

Python runs a signal handler between two bytecodes of the main thread, wherever that is: inside
Keras' or TensorFlow's Python code around a compiled call, inside a checkpoint save, inside an
sqlite write. An exception raised there can leave native state half-changed; one CI run saw the
process end in a segfault right after SIGTERM, before the run could end KILLED. So the work that
must not be cut in two (each training stretch with its callbacks, each store write) runs with the
signals held, and they land right after it. A stretch lasts about trainer.STRETCH_SECONDS, so an
interrupt still lands within a fraction of a second of a compiled run (or one epoch of a streamed
one).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

from gradexp.endings import Terminated


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into an exception (Terminated, a KeyboardInterrupt) so the run can end
    KILLED and keep what it has."""
    def handler(signum, frame):
        if _in_finalizer(frame):
            # Python prints an exception raised inside a __del__ as "Exception ignored" and
            # drops it, and the signal with it (a sweep once went on to its end after SIGTERM
            # landed in a ZipFile's): deliver it again in a moment, once the finalizer returned.
            threading.Timer(0.01, os.kill, (os.getpid(), signum)).start()
            return
        raise Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (some launchers): leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _in_finalizer(frame) -> bool:
    """Whether the main thread was interrupted inside an object's __del__."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


# What each open interrupts_deferred block has caught, outermost first (main thread only).
_held: list[list[int]] = []


def interrupt_pending() -> bool:
    """Whether an open interrupts_deferred block holds a signal: a long held stretch of work
    (the packed training) asks at its safe points and stops there, so the signal lands soon."""
    return any(_held)


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until the block ends, then deliver them as their handlers would
    have (a signal that was ignored stays ignored). Blocks nest: an inner block hands what it
    caught to the outer one. Work held for long asks interrupt_pending() at its safe points."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach only the main thread anyway
        return
    caught: list[int] = []
    # An ignored signal (Ctrl-C under `nohup ... &`) stays ignored, never held: held, it would
    # count as pending and stop held work (the packed training) for nothing
    previous = {sig: signal.signal(sig, lambda signum, frame: caught.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)
                if signal.getsignal(sig) is not signal.SIG_IGN}
    _held.append(caught)
    try:
        yield
    finally:
        _held.pop()  # blocks nest: this one is the innermost
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if caught:
            handler = previous[caught[0]]
            if callable(handler):
                handler(caught[0], None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(caught[0])
