"""Subprocess tests started in the background when collection ends.

A test whose whole work is one subprocess that needs nothing from the other tests (mypy
over the package, the kernels compiled for a generic CPU) is marked
``@pytest.mark.background(argv=[...], env={...}, timeout=...)``. When collection ends,
these subprocesses run one after another in a thread of the pytest process, on the core
the suite leaves idle most of the time (its tests keep about one of the machine's two
cores busy; running two streams of tests at once, with pytest-xdist, was slower, as both
start process clusters). The test then only waits for its subprocess's result, through the
``background_result`` fixture, and asserts on it as before: selecting it alone runs the
same subprocess, started at the end of collection.

Under pytest-xdist (the README's test command runs two streams of tests, ``-n 2``) the
streams keep both cores busy and a stream does not know which tests it will be given, so
there the jobs are *lazy*: a job runs when its test asks for its result, in that test.

``{tmp}`` in an argument or a variable stands for a temporary folder of the job's own,
removed at the end of the session; ``files={name: text}`` are written there first.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BackgroundJobs"]


@dataclass
class _Job:
    argv: list[str]
    env: dict[str, str | None]
    timeout: float
    cwd: str | None
    files: dict[str, str]
    tmp: str = ""
    done: threading.Event = field(default_factory=threading.Event)
    result: subprocess.CompletedProcess | None = None
    error: str | None = None


class BackgroundJobs:
    """Run the marked tests' subprocesses one at a time in a thread; hand out their results.

    Parameters
    ----------
    marked : dict of str to dict
        The marker's keyword arguments (``argv``, and optionally ``env``, where None
        removes a variable, ``timeout`` in seconds, default 600, ``cwd`` and ``files``)
        per test id, in the order the jobs start.
    lazy : collection of str, default ()
        Test ids whose jobs the thread does not start: each runs when its result is first
        asked for, in the asking thread (a pytest-xdist worker, see the module's docstring).
    """

    def __init__(self, marked: dict[str, dict[str, Any]], *,
                 lazy: Collection[str] = ()) -> None:
        self._jobs = {
            nodeid: _Job(list(kw["argv"]), dict(kw.get("env", {})),
                         float(kw.get("timeout", 600)), kw.get("cwd"), dict(kw.get("files", {})))
            for nodeid, kw in marked.items()}
        self._lazy = frozenset(lazy)
        self._stopped = threading.Event()
        # the processes running now: the thread's and, under xdist, a test's lazy job
        self._running: set[subprocess.Popen] = set()
        self._thread = threading.Thread(target=self._run_all, name="background-tests",
                                        daemon=True)
        if set(self._jobs) - self._lazy:
            self._thread.start()

    def _run_all(self) -> None:
        for nodeid, job in self._jobs.items():
            if nodeid in self._lazy:
                continue
            if self._stopped.is_set():
                job.error = "the session ended before the job started"
            else:
                self._run(job)
            job.done.set()

    def _run(self, job: _Job) -> None:
        job.tmp = tempfile.mkdtemp(prefix="background-test-")
        for name, text in job.files.items():
            with open(os.path.join(job.tmp, name), "w") as f:
                f.write(text)
        argv = [a.replace("{tmp}", job.tmp) for a in job.argv]
        env = dict(os.environ)
        for name, value in job.env.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value.replace("{tmp}", job.tmp)
        try:
            proc = subprocess.Popen(argv, env=env, cwd=job.cwd, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as err:
            job.error = f"{argv[:3]}... could not start: {err}"
            return
        self._running.add(proc)
        try:
            out, err = proc.communicate(timeout=job.timeout)
            job.result = subprocess.CompletedProcess(argv, proc.returncode, out, err)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            job.error = f"{argv[:3]}... did not end within {job.timeout:g} s"
        finally:
            self._running.discard(proc)

    def result(self, nodeid: str) -> subprocess.CompletedProcess:
        """Wait (bounded by the job's timeout and those before it) for the test's result."""
        job = self._jobs[nodeid]
        if nodeid in self._lazy and not job.done.is_set():
            self._run(job)
            job.done.set()
        bound = sum(j.timeout for j in self._jobs.values()) + 60
        if not job.done.wait(bound):
            raise TimeoutError(f"the background job of {nodeid} gave no result in {bound:g} s")
        if job.error is not None:
            raise RuntimeError(f"background job of {nodeid}: {job.error}")
        assert job.result is not None
        return job.result

    def close(self) -> None:
        """Stop the running jobs, skip those not started, remove the jobs' folders."""
        self._stopped.set()
        for proc in list(self._running):
            if proc.poll() is None:
                proc.kill()
        if self._thread.is_alive():
            self._thread.join(30)
        for job in self._jobs.values():
            if job.tmp:
                shutil.rmtree(job.tmp, ignore_errors=True)
