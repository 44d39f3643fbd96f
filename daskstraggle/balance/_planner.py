"""Run the load balancer's optimizer in a child process, away from the coordinator's GIL.

The child is a fresh ``python -c`` that imports this module and serves (not a
``multiprocessing`` worker, so it never imports the user's ``__main__``); requests and
replies are length-prefixed pickles over its stdin and stdout.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import struct
import subprocess
import sys
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any

__all__ = ["PlannerProcess"]

logger = logging.getLogger(__name__)

_HEADER = struct.Struct("!Q")
_CHILD = ("import sys; sys.path.append(sys.argv[1]); "
          "from daskstraggle.balance._planner import _serve; _serve()")


def _send(stream: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    """Return the next message, or raise EOFError when the stream ends."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError
    size = _HEADER.unpack(header)[0]
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


class PlannerProcess:
    """A child process that runs ``balancer.plan(*args, **kwargs)`` one request at a time.

    :meth:`submit` returns a :class:`~concurrent.futures.Future` that a reader thread
    (blocked on the pipe, so it holds no GIL while waiting) completes with the plan or
    the exception the child raised. If the child dies, pending and later futures fail
    with ``RuntimeError``.
    """

    def __init__(self) -> None:
        # the child imports this very package: its parent folder goes to the end of the
        # child's sys.path; -P keeps the working directory (another checkout) off it
        root = str(Path(__file__).resolve().parents[2])
        self._proc = subprocess.Popen(
            [sys.executable, "-P", "-c", _CHILD, root],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        self._lock = threading.Lock()
        self._pending: list[Future[Any]] = []
        self._closed = False
        self._exited = False  # the reply stream ended: the child is gone
        self._reader = threading.Thread(target=self._read, name="daskstraggle-planner-reader",
                                        daemon=True)
        self._reader.start()

    def submit(self, balancer: Any, *args: Any, **kwargs: Any) -> Future[Any]:
        """Send one ``balancer.plan`` call to the child; return its future."""
        future: Future[Any] = Future()
        with self._lock:
            if not self.running:
                future.set_exception(RuntimeError("the planner process is not running"))
                return future
            self._pending.append(future)
            try:
                assert self._proc.stdin is not None
                _send(self._proc.stdin, (balancer, args, kwargs))
            except (OSError, ValueError) as err:
                self._pending.remove(future)
                future.set_exception(RuntimeError(f"the planner process is gone: {err}"))
        return future

    def _read(self) -> None:
        assert self._proc.stdout is not None
        while True:
            try:
                ok, value = _receive(self._proc.stdout)
            except (EOFError, OSError, ValueError, pickle.UnpicklingError):
                break
            with self._lock:
                future = self._pending.pop(0) if self._pending else None
            if future is None:
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)
        with self._lock:
            self._exited = True
            pending, self._pending = self._pending, []
        for future in pending:
            future.set_exception(RuntimeError("the planner process exited"))

    @property
    def running(self) -> bool:
        """Whether the child is alive and not closed."""
        return not (self._closed or self._exited) and self._proc.poll() is None

    @property
    def pid(self) -> int:
        """Process id of the child."""
        return self._proc.pid

    def close(self) -> None:
        """Stop the child at once (a plan still being computed is abandoned)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        self._proc.kill()
        self._proc.wait()
        self._reader.join(timeout=5)
        if self._proc.stdout is not None:
            self._proc.stdout.close()


def _serve() -> None:
    """The child's loop: read a request, run it, reply with (ok, plan or exception)."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    # nothing else may write to the reply stream
    sys.stdout = sys.stderr
    while True:
        try:
            balancer, args, kwargs = _receive(stdin)
        except EOFError:
            return
        try:
            reply: tuple[bool, Any] = (True, balancer.plan(*args, **kwargs))
        except Exception as err:  # sent back, raised by the future
            reply = (False, err)
        try:
            _send(stdout, reply)
        except (OSError, ValueError):
            return

