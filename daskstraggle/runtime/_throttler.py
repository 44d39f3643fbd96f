"""Stop and resume one process on a duty cycle, always leaving it running at the end: a
standard-library script (it starts fast), run as ``python -m daskstraggle.runtime._throttler
--pid PID --factor F --period P --lease-file PATH --lease SECONDS``.

Every ``period`` seconds ``PID`` runs ``period / factor`` seconds, then is stopped
(``SIGSTOP``) for the rest. The throttler resumes it (``SIGCONT``, in a ``finally``) and
exits on ``SIGTERM``, ``SIGINT`` or ``SIGHUP``, when the process is gone (or a zombie),
when the lease file was removed or not touched for ``lease`` seconds, and on any error.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time

_EXIT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class _Release(Exception):
    """Raised by the signal handler to leave the duty cycle."""


def _state(pid: int) -> str | None:
    """Return the state letter of ``pid`` from /proc ('R', 'S', 'T', ...; None: gone; '?':
    unknown, or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None if os.path.isdir("/proc") else "?"
    except OSError:
        return "?"
    return data[data.rfind(b")") + 2 :][:1].decode()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return _state(pid) not in (None, "Z", "X")


def _lease_valid(path: str, lease: float) -> bool:
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return False
    return time.time() - mtime <= lease


def _resume(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGCONT)


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


#: Seconds added to each run window (at most 20 % of it) to make up for the time a
#: resumed process loses waking up (cold caches): without it a 4x throttle slowed a numpy
#: loop 4.3-5x on a 2-core Linux VM, with it 3.95-4.1x; the factor stays approximate
#: (about +-15 %) across machines and workloads.
RESUME_OVERHEAD = 0.002


def _sleep_until(deadline: float) -> None:
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        time.sleep(remaining)


def throttle(pid: int, factor: float, period: float, lease_file: str, lease: float) -> int:
    """Run the duty cycle until released; return the exit code (0: released normally)."""

    def on_signal(signum: int, frame: object) -> None:
        _resume(pid)  # first, in case the handler runs while the process is stopped
        raise _Release(signum)

    for sig in _EXIT_SIGNALS:
        signal.signal(sig, on_signal)
    nominal = period / factor
    run_duration = min(nominal + min(RESUME_OVERHEAD, 0.2 * nominal), period) \
        if factor > 1 else period
    stop_duration = period - run_duration
    try:
        if stop_duration <= 0:
            while _alive(pid) and _lease_valid(lease_file, lease):
                time.sleep(min(period, lease / 4))
            return 0
        deadline = time.monotonic()
        while _alive(pid) and _lease_valid(lease_file, lease):
            deadline += run_duration
            now = time.monotonic()
            if deadline < now - period:  # fell behind (we were not scheduled): restart
                deadline = now + run_duration
            _sleep_until(deadline)
            os.kill(pid, signal.SIGSTOP)
            try:
                deadline += stop_duration
                _sleep_until(deadline)
            finally:
                os.kill(pid, signal.SIGCONT)
        return 0
    except (_Release, ProcessLookupError):
        return 0
    finally:
        for sig in _EXIT_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        _resume(pid)
        _unlink(lease_file)


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the throttle."""
    parser = argparse.ArgumentParser(
        prog="python -m daskstraggle.runtime._throttler",
        description="Stop and resume a process on a duty cycle (it runs 1/factor of the time).",
    )
    parser.add_argument("--pid", type=int, required=True, help="process to throttle")
    parser.add_argument("--factor", type=float, required=True, help="slow-down factor >= 1")
    parser.add_argument("--period", type=float, default=0.05, help="seconds of one cycle")
    parser.add_argument("--lease-file", required=True, help="file the owner keeps touching")
    parser.add_argument("--lease", type=float, default=10.0,
                        help="release when the lease file is older than this many seconds")
    args = parser.parse_args(argv)
    if args.factor < 1 or args.period <= 0 or args.lease <= 0 or args.pid <= 0:
        parser.error("need --pid > 0, --factor >= 1, --period > 0 and --lease > 0")
    return throttle(args.pid, args.factor, args.period, args.lease_file, args.lease)


if __name__ == "__main__":
    sys.exit(main())
