"""The ``daskstraggle`` console script: Ctrl-C prints ``aborted`` and exits 130, always.

The command line imports dask, distributed and numba, which takes seconds; Ctrl-C in that
time raised ``KeyboardInterrupt`` out of an import and Python printed a traceback. This
module imports nothing but :mod:`sys` and :mod:`signal` itself, and :func:`main` imports
the command line inside the handling, so an interrupt during the import of
:mod:`daskstraggle.cli` and of anything it loads later (dask's ``distributed``, numba, a
cluster starting) ends like one during a run: ``aborted`` on stderr, exit code 130
(128 + SIGINT, what shells report for an interrupted command), no traceback.

Python imports the package (``daskstraggle/__init__.py``) before this module; the package
loads its public names on first use (PEP 562), so that import is light and everything heavy
is imported inside the handling.
"""

from __future__ import annotations

import signal
import sys

__all__ = ["ABORTED_EXIT_CODE", "main"]

#: Exit code of an interrupted command: 128 + SIGINT.
ABORTED_EXIT_CODE = 128 + signal.SIGINT


def main() -> int:
    """Run the ``daskstraggle`` command line; return its exit code.

    Returns
    -------
    code : int
        What :func:`daskstraggle.cli.main` returns (0, 1, 2 bad input, 3 diverged, 130
        interrupted), or 130 when interrupted before or after it ran.
    """
    try:
        from daskstraggle.cli import main as run

        code = run()
    except KeyboardInterrupt:
        return _aborted()
    # the command has ended and said so: a late Ctrl-C (while the interpreter closes a
    # cluster at exit) must not replace its exit code by a traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return code


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
