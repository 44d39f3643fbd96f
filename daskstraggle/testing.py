"""Helpers for testing daskstraggle and code built on it (no pytest import).

- :func:`one_error_line`: assert that a command's stderr is exactly one ``error: ...`` line,
  the CLI's contract for bad input and failed runs.
- :class:`BackgroundCommand`: run a command in a subprocess while a test does other work,
  with a bound on how long it may take.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

__all__ = ["BackgroundCommand", "one_error_line"]


def one_error_line(err: str) -> str:
    """Assert ``err`` is exactly one line ``error: ...`` (no traceback); return it.

    Parameters
    ----------
    err : str
        What a command printed on stderr.

    Returns
    -------
    line : str
        The error line.

    Raises
    ------
    AssertionError
        If ``err`` holds a traceback, several lines, or no ``error:`` line.
    """
    assert "Traceback" not in err, err
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    return lines[0]


class BackgroundCommand:
    """A command run in a subprocess in the background; :meth:`result` waits for it.

    Parameters
    ----------
    argv : list of str
        The command and its arguments.
    cwd : path
        Working directory of the command.
    timeout : float, default=90
        Seconds after which the command is killed (its output so far is kept).

    Attributes
    ----------
    out, err : str
        The command's stdout and stderr, once :meth:`result` returned.
    elapsed : float
        Seconds from the start to the end of the command.
    proc : subprocess.Popen
        The process.
    """

    def __init__(self, argv: list[str], cwd: str | Path, *, timeout: float = 90) -> None:
        self.t0 = time.monotonic()
        self.timeout = float(timeout)
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, cwd=cwd)
        self.out = self.err = ""
        self.elapsed = float("nan")
        self._thread = threading.Thread(target=self._wait, daemon=True)
        self._thread.start()

    def _wait(self) -> None:
        try:
            self.out, self.err = self.proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.out, self.err = self.proc.communicate()
        self.elapsed = time.monotonic() - self.t0

    def result(self) -> BackgroundCommand:
        """Wait for the command to end; return self.

        Returns
        -------
        self : BackgroundCommand
        """
        self._thread.join()
        return self
