"""The ``daskstraggle`` console script: Ctrl-C prints ``aborted`` and exits 130, always.

:func:`main` imports the command line inside the handling, so an interrupt while dask is
imported ends the same way; where Python would swallow the ``KeyboardInterrupt`` (a
garbage-collector callback, a ``__del__``: "Exception ignored in ...") or an extension
module's initialisation would turn it into an ImportError, it is signalled again 10 ms
later; one still pending when the command returns ends it as aborted.
"""

from __future__ import annotations

import _thread
import gc
import signal
import sys
from importlib.machinery import ExtensionFileLoader
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import FrameType

__all__ = ["ABORTED_EXIT_CODE", "ended", "install_interrupt_handling", "main"]

#: Exit code of an interrupted command: 128 + SIGINT.
ABORTED_EXIT_CODE = 128 + signal.SIGINT
#: Seconds after which a deferred or swallowed interrupt is signalled again.
_REDELIVERY_S = 0.01
#: Whether SIGINT came (an error it caused in code that does not pass it on is Ctrl-C too).
_interrupted = False


def main() -> int:
    """Run the command line; return its exit code (130 when interrupted outside it)."""
    try:  # (an interrupt before the handler is in: Python's KeyboardInterrupt, caught)
        install_interrupt_handling()
        from daskstraggle.cli import main as run

        code = run()
        if _interrupted and code != ABORTED_EXIT_CODE:  # one swallowed, or deferred past
            raise KeyboardInterrupt                        # the command's end
    except KeyboardInterrupt:
        return _aborted()
    except BaseException:
        # an interrupt inside an extension module's import (pandas' Cython init turns it
        # into "ImportError: PyCapsule_Import could not import module ...") is still Ctrl-C
        if _interrupted:
            return _aborted()
        raise
    ended()
    return code


def ended() -> None:
    """Once the command has ended: ignore a late Ctrl-C, leave live objects to the OS."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.freeze()


def install_interrupt_handling() -> None:
    """Make Ctrl-C interrupt the main thread's own code, never a callback that swallows it
    (the console script's process only, from its main thread)."""
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
    """SIGINT's handler: KeyboardInterrupt; in a gc callback or an extension module's
    initialisation (which turns it into an ImportError, which a caller may take for a
    missing optional dependency: numba's) the signal again later."""
    global _interrupted
    _interrupted = True
    if _in_gc_callback(frame) or _in_extension_init(frame):
        _deliver_later(signum)
        return
    raise KeyboardInterrupt


def _deliver_later(signum: int) -> None:
    """Signal ``signum`` to the main thread again in 10 ms, from another thread."""
    import threading

    timer = threading.Timer(_REDELIVERY_S, _thread.interrupt_main, args=(signum,))
    timer.daemon = True
    timer.start()


def _in_extension_init(frame: FrameType | None) -> bool:
    """Whether ``frame`` or a frame that called it runs an extension module's
    initialisation (which may turn an exception into an ImportError)."""
    while frame is not None:
        if (frame.f_code.co_name in ("create_module", "exec_module")
                and isinstance(frame.f_locals.get("self"), ExtensionFileLoader)):
            return True
        frame = frame.f_back
    return False


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
