"""The ``daskstraggle`` console script: Ctrl-C prints ``aborted`` and exits 130, always.

This module imports only the interpreter's own small modules, and :func:`main` imports the
command line inside the handling (the package itself loads its names on first use), so an
interrupt while dask, distributed or numba are imported, or a cluster starts, ends like one
during a run: ``aborted`` on stderr, exit code 130 (128 + SIGINT), no traceback.

An interrupt is never lost (:func:`install_interrupt_handling`): where Python would swallow
the ``KeyboardInterrupt`` (a garbage-collector callback such as distributed's scheduler
registers, an object's ``__del__``, a weakref callback: "Exception ignored in ..."), the
interrupt is signalled again 10 ms later.
"""

from __future__ import annotations

import _thread
import gc
import signal
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import FrameType

__all__ = ["ABORTED_EXIT_CODE", "ended", "install_interrupt_handling", "main"]

#: Exit code of an interrupted command: 128 + SIGINT.
ABORTED_EXIT_CODE = 128 + signal.SIGINT
#: Seconds after which a deferred or swallowed interrupt is signalled again.
_REDELIVERY_S = 0.01


def main() -> int:
    """Run the ``daskstraggle`` command line; return its exit code.

    Returns
    -------
    code : int
        What :func:`daskstraggle.cli.main` returns (0, 1, 2 bad input, 3 diverged, 130
        interrupted), or 130 when interrupted before or after it ran.
    """
    install_interrupt_handling()
    try:
        from daskstraggle.cli import main as run

        code = run()
    except KeyboardInterrupt:
        return _aborted()
    ended()
    return code


def ended() -> None:
    """Prepare the process's exit once the command has ended and said so.

    A late Ctrl-C (while the interpreter closes a cluster at exit) is ignored from now on,
    so it cannot replace the exit code by a traceback. The objects alive now are left to
    the operating system (:func:`gc.freeze`); ``atexit`` handlers still run and the streams
    are flushed.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.freeze()


def install_interrupt_handling() -> None:
    """Make Ctrl-C (SIGINT) interrupt the main thread's own code, never a callback that
    swallows it (see the module's docstring); for the console script's process, from its
    main thread (a library user's interpreter is left alone)."""
    signal.signal(signal.SIGINT, _on_interrupt)
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type,
                                                          KeyboardInterrupt):
            _deliver_later(signal.SIGINT)  # swallowed: deliver it again
            return
        previous(unraisable)

    sys.unraisablehook = hook


def _on_interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGINT's handler: ``KeyboardInterrupt``, or, inside a garbage-collector callback,
    the same signal again once the callback has returned."""
    if _in_gc_callback(frame):
        _deliver_later(signum)
        return
    raise KeyboardInterrupt


def _deliver_later(signum: int) -> None:
    """Signal ``signum`` to the main thread again in 10 ms, from another thread (from the
    main thread the handler would run at once, where the exception is swallowed too)."""
    import threading

    timer = threading.Timer(_REDELIVERY_S, _thread.interrupt_main, args=(signum,))
    timer.daemon = True
    timer.start()


def _in_gc_callback(frame: FrameType | None) -> bool:
    """Whether ``frame`` or a frame that called it runs a callback of :data:`gc.callbacks`."""
    codes = {getattr(getattr(cb, "__func__", cb), "__code__", None) for cb in gc.callbacks}
    codes.discard(None)
    while frame is not None and codes:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


def _aborted() -> int:
    """Print ``aborted`` on stderr (ignoring a second Ctrl-C meanwhile); return 130."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt this
    try:
        sys.stderr.write("aborted\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed: the exit code still says it
        pass
    return ABORTED_EXIT_CODE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
