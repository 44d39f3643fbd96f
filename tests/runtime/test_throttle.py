"""Whole-process throttle (SIGSTOP/SIGCONT duty cycle) on a LocalCluster of its own.

The cluster is module-scoped and separate from the session's, so a worker left stopped by
a failing test cannot hurt other tests (the fixture resumes every worker at the end).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import select
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import daskstraggle
from daskstraggle.errors import InvalidParameterError
from daskstraggle.runtime.dask import worker_addresses
from daskstraggle.runtime.throttle import ProcessThrottle, _process_state

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and SIGSTOP"),
]

THROTTLER = Path(daskstraggle.__file__).parent / "runtime" / "_throttler.py"
STOPPED = ("T", "t")
#: Seconds a started process (a throttler, a worker, a client script) may take to reach a
#: state the test waits for: generous, as a busy machine starts Python processes slowly;
#: a hang beyond it fails with a message.
START = 120


@pytest.fixture(scope="module")
def client():
    import dask
    from distributed import Client, LocalCluster

    from daskstraggle.runtime.dask import OWN_CLUSTER_CONFIG

    with dask.config.set(OWN_CLUSTER_CONFIG):
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                               dashboard_address=None, silence_logs=logging.CRITICAL)
    client = Client(cluster, set_as_default=False)
    try:
        yield client
    finally:
        for pid in client.run(os.getpid).values():
            os.kill(pid, signal.SIGCONT)  # never leave a worker stopped
        client.close()
        cluster.close()


@pytest.fixture
def workers(client):
    return worker_addresses(client)


@pytest.fixture
def pids(client):
    return client.run(os.getpid)


# --------------------------------------------------------------------------- helpers


def _work(n: int) -> float:
    """CPU-bound numpy loop without allocations; return its wall duration."""
    t0 = time.perf_counter()
    x = np.ones(200_000)
    for _ in range(n):
        np.multiply(x, 1.0001, out=x)
        np.add(x, 0.5, out=x)
        np.sqrt(x, out=x)
    return time.perf_counter() - t0


def _on(client, worker, n):
    return client.submit(_work, n, workers=[worker], allow_other_workers=False, pure=False)


def _stopped_fraction(pid, cycles, period):
    """Fraction of samples of the process's state (every ~2 ms, at times unrelated to the
    duty cycle, over ``cycles`` periods) that found it stopped."""
    samples = []
    end = time.monotonic() + cycles * period
    while time.monotonic() < end:
        samples.append(_process_state(pid) in STOPPED)
        time.sleep(0.002)
    return statistics.fmean(samples)


def _wait_stopped(pid, timeout=START):
    """Poll until the process is seen stopped (its throttler has started)."""
    end = time.monotonic() + timeout
    while _process_state(pid) not in STOPPED:
        assert time.monotonic() < end, f"process {pid} never seen stopped in {timeout} s"
        time.sleep(0.002)


def _states(pid, duration=0.3, interval=0.005):
    seen = set()
    end = time.monotonic() + duration
    while time.monotonic() < end:
        seen.add(_process_state(pid))
        time.sleep(interval)
    return seen


def _gone(pid):
    return _process_state(pid) in (None, "Z")


def _wait_released(pid, throttler_pid, timeout=START):
    """Wait until the throttler has exited; then the worker must never be seen stopped."""
    end = time.monotonic() + timeout
    while not _gone(throttler_pid):
        assert time.monotonic() < end, f"throttler {throttler_pid} still running"
        time.sleep(0.02)
    assert not _states(pid, duration=0.3) & set(STOPPED)


def _throttler_args(throttler_pid):
    """The throttler's options (``--pid``, ``--factor``, ...), from its command line."""
    with open(f"/proc/{throttler_pid}/cmdline", "rb") as f:
        argv = f.read().decode().split("\0")
    return {a: argv[i + 1] for i, a in enumerate(argv) if a.startswith("--")}


def _lease_of(throttler_pid):
    """The throttler's lease file and lease seconds, from its command line."""
    args = _throttler_args(throttler_pid)
    return Path(args["--lease-file"]), float(args["--lease"])


# --------------------------------------------------------------------------- tests


def test_factor_4_slows_the_worker_about_4x_and_stop_restores_it(client, workers, pids):
    # the slow-down is the throttler's duty cycle, checked in simulated time below; here
    # it runs for this worker with factor 4 and period 0.05, the worker is stopped and
    # still works, and is never stopped afterwards. (Durations of work side by side, or
    # the share of time the worker is seen stopped, measure it only on an idle machine:
    # on a busy one a resumed process gets the core first, and a process takes a stop
    # only once it gets a core)
    slow, fast = workers
    with ProcessThrottle(client, [slow], 4, period=0.05) as throttle:
        assert throttle.active
        (info,) = throttle.throttlers
        assert info["via_nanny"] and info["pid"] == pids[slow]
        args = _throttler_args(info["throttler_pid"])
        assert (int(args["--pid"]), float(args["--factor"]), float(args["--period"])) == (
            pids[slow], 4.0, 0.05)
        _wait_stopped(pids[slow])
        assert not _states(pids[fast], duration=0.1) & set(STOPPED)
        # it still works, only slowly
        assert _on(client, slow, 10).result() >= 0
    assert not throttle.active
    assert _gone(info["throttler_pid"])
    # restored: never seen stopped again, over 60 cycles
    assert _stopped_fraction(pids[slow], cycles=60, period=0.05) == 0.0
    assert not _states(pids[slow]) & set(STOPPED)
    throttle.stop()  # idempotent


class _SimulatedClock:
    """Time for the throttler script, simulated: each sleep advances it by the seconds
    asked plus a wake-up delay drawn by ``lag`` (a busy machine wakes a process late);
    the signals it sends are recorded with their times."""

    def __init__(self, lag):
        self.now, self.lag, self.sent = 1000.0, lag, []

    def monotonic(self):
        return self.now

    def time(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds + self.lag()

    def kill(self, pid, sig):
        self.sent.append((sig, self.now))


def _simulated_throttle(monkeypatch, lag, cycles, factor=4, period=0.05):
    """Run the throttler script's ``main`` in simulated time for ``cycles`` periods;
    return the signals it sent, with their times."""
    from types import SimpleNamespace

    from daskstraggle.runtime import _throttler

    clock = _SimulatedClock(lag)
    monkeypatch.setattr(_throttler, "time", clock)
    monkeypatch.setattr(_throttler, "os", SimpleNamespace(kill=clock.kill,
                                                          unlink=lambda path: None))
    monkeypatch.setattr(_throttler, "signal", SimpleNamespace(
        signal=lambda *args: None, SIGSTOP=signal.SIGSTOP, SIGCONT=signal.SIGCONT,
        SIG_IGN=signal.SIG_IGN))
    monkeypatch.setattr(_throttler, "_lease_valid", lambda path, lease: True)
    monkeypatch.setattr(_throttler, "_alive", lambda pid: len(clock.sent) < 2 * cycles)
    assert _throttler.main(["--pid", "4242", "--factor", str(factor), "--period",
                            str(period), "--lease-file", "lease", "--lease", "10"]) == 0
    return clock.sent


def test_the_duty_cycle_in_simulated_time(monkeypatch):
    # each period the process runs 1/4 of it plus the 2 ms of RESUME_OVERHEAD, then is
    # stopped for the rest: at 14.5 ms and resumed at 50 ms, again and again
    sent = _simulated_throttle(monkeypatch, lag=lambda: 0.0, cycles=20)
    stop, cont = signal.SIGSTOP, signal.SIGCONT
    assert [s for s, _ in sent] == [stop, cont] * 20 + [cont]  # left running at the end
    times = np.array([t for _, t in sent[:40]]) - 1000.0
    expected = np.ravel([(0.05 * k + 0.0145, 0.05 * (k + 1)) for k in range(20)])
    np.testing.assert_allclose(times, expected, atol=1e-9)


@pytest.mark.parametrize("late", [0.004, 0.02], ids=["4ms", "20ms"])
def test_the_duty_cycle_holds_when_the_throttler_wakes_late(monkeypatch, late):
    # on a busy machine the throttler wakes up late: its deadlines are absolute, so a
    # late stop shortens the stop and a late resume the next run window; the slow-down
    # stays about 4x (the 3-5 band), on average over the cycles
    rng = np.random.default_rng(0)
    sent = _simulated_throttle(monkeypatch, lag=lambda: float(rng.uniform(0, late)),
                               cycles=400)
    stop, cont = signal.SIGSTOP, signal.SIGCONT
    assert [s for s, _ in sent] == [stop, cont] * 400 + [cont]
    times = np.array([t for _, t in sent[:800]]) - 1000.0
    stopped = float(np.sum(times[1::2] - times[0::2]))
    slow_down = times[-1] / (times[-1] - stopped)  # elapsed over time left running
    assert 3.0 < slow_down < 5.0, slow_down



def test_exception_inside_with_leaves_every_worker_running(client, workers, pids):
    with pytest.raises(ZeroDivisionError), ProcessThrottle(client, workers, 10,
                                                           period=0.05) as throttle:
        infos = throttle.throttlers
        for w in workers:
            _wait_stopped(pids[w])
        1 / 0  # noqa: B018
    assert not throttle.active
    for info in infos:
        assert _gone(info["throttler_pid"])
        assert not _states(info["pid"], duration=0.2) & set(STOPPED)
    # the cluster still works
    assert client.submit(_work, 1, workers=[workers[0]], pure=False).result() >= 0


def test_factor_1_starts_nothing(client, workers):
    with ProcessThrottle(client, workers[0], 1.0) as throttle:
        assert throttle.throttlers[0]["throttler_pid"] == 0


def test_worker_without_a_nanny_throttles_itself(client, workers):
    env = dict(os.environ, PYTHONPATH=str(Path(daskstraggle.__file__).parent.parent))
    proc = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_worker", client.scheduler.address,
         "--no-nanny", "--nthreads", "1", "--name", "no-nanny", "--no-dashboard"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )
    try:
        client.wait_for_workers(len(workers) + 1, timeout=START)
        (extra,) = set(worker_addresses(client)) - set(workers)
        with ProcessThrottle(client, [extra], 10, period=0.05) as throttle:
            (info,) = throttle.throttlers
            assert not info["via_nanny"] and info["pid"] == proc.pid
            _wait_stopped(proc.pid)
        assert _gone(info["throttler_pid"])
        assert not _states(proc.pid, duration=0.2) & set(STOPPED)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
        proc.wait(timeout=START)
        end = time.monotonic() + START
        while len(worker_addresses(client)) > len(workers):
            assert time.monotonic() < end, "the stopped worker did not leave the scheduler"
            time.sleep(0.05)


_CLIENT_SCRIPT = textwrap.dedent("""
    import json, sys, time
    from distributed import Client
    from daskstraggle.runtime.throttle import ProcessThrottle

    client = Client(sys.argv[1], set_as_default=False)
    throttle = ProcessThrottle(client, [sys.argv[2]], 10, period=0.05, lease=2.0).start()
    print(json.dumps(throttle.throttlers[0]), flush=True)
    time.sleep(120)
""")


def _readline(proc, timeout):
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "the client subprocess did not start the throttle in time"
    return proc.stdout.readline()


def _renewing(lease_file, seconds):
    """Keep the lease fresh (as a live client would) for ``seconds``; return the time of
    the last renewal (the lease file's mtime: it is removed when the throttler ends)."""
    end = time.monotonic() + seconds
    while True:
        os.utime(lease_file)
        last = os.stat(lease_file).st_mtime
        if time.monotonic() >= end:
            return last
        time.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_killed_client_releases_the_worker_within_the_lease(client, workers, pids, tmp_path,
                                                            sig):
    script = tmp_path / "client.py"
    script.write_text(_CLIENT_SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(Path(daskstraggle.__file__).parent.parent))
    proc = subprocess.Popen(
        [sys.executable, str(script), client.scheduler.address, workers[1]],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )
    try:
        info = json.loads(_readline(proc, timeout=START))
        assert info["pid"] == pids[workers[1]]
        _wait_stopped(info["pid"])
        lease_file, lease = _lease_of(info["throttler_pid"])
        assert lease == 2.0
        if sig == signal.SIGKILL:
            proc.send_signal(sig)
            proc.wait(timeout=START)
            # nothing of the client is left to release the worker: only the lease can.
            # While the lease is kept fresh for longer than it lasts, the throttle goes on
            # after the client's death; left alone, it ends no earlier than the lease
            # after its last renewal, and the worker runs
            last = _renewing(lease_file, 1.5 * lease)
            assert not _gone(info["throttler_pid"])
            _wait_stopped(info["pid"])
            _wait_released(info["pid"], info["throttler_pid"])
            assert time.time() - last >= lease
        else:
            # Ctrl-C: the client's exit stops the throttle itself, without waiting for the
            # lease: the throttler ends although the lease is kept fresh all along
            os.utime(lease_file)
            proc.send_signal(sig)
            end = time.monotonic() + START
            while not _gone(info["throttler_pid"]):
                assert time.monotonic() < end, "the client's exit did not stop the throttle"
                with contextlib.suppress(FileNotFoundError):
                    os.utime(lease_file)
                time.sleep(0.05)
            proc.wait(timeout=START)
            _wait_released(info["pid"], info["throttler_pid"])
        assert not lease_file.exists()  # the throttler removes its lease file
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


# --------------------------------------------------------------------------- the script


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def _script(pid, lease_file, *, factor=20.0, period=0.2, lease=30.0):
    return subprocess.Popen([
        sys.executable, "-I", str(THROTTLER), "--pid", str(pid), "--factor", str(factor),
        "--period", str(period), "--lease-file", str(lease_file), "--lease", str(lease),
    ])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_script_resumes_the_process_on_signals(sleeper, tmp_path, sig):
    lease = tmp_path / "lease"
    lease.touch()
    throttler = _script(sleeper.pid, lease)
    _wait_stopped(sleeper.pid)
    throttler.send_signal(sig)
    assert throttler.wait(timeout=START) == 0
    assert not _states(sleeper.pid, duration=0.2) & set(STOPPED)
    assert not lease.exists()  # the script removes its lease file


def test_script_releases_on_an_expired_or_removed_lease(sleeper, tmp_path):
    lease = tmp_path / "lease"
    lease.touch()
    throttler = _script(sleeper.pid, lease, lease=0.5)
    # renewed until the throttle is seen at work (a busy machine may start the script
    # later than the lease lasts), then left to expire
    end = time.monotonic() + START
    while _process_state(sleeper.pid) not in STOPPED:
        assert throttler.poll() is None and time.monotonic() < end, "never seen stopped"
        os.utime(lease)
        time.sleep(0.002)
    last = os.stat(lease).st_mtime
    assert throttler.wait(timeout=START) == 0  # not renewed: expires after 0.5 s
    assert time.time() - last >= 0.5
    assert not _states(sleeper.pid, duration=0.2) & set(STOPPED)
    lease.touch()
    throttler = _script(sleeper.pid, lease)
    _wait_stopped(sleeper.pid)
    lease.unlink()
    assert throttler.wait(timeout=START) == 0
    assert not _states(sleeper.pid, duration=0.2) & set(STOPPED)


def test_script_exits_when_the_process_is_gone(sleeper, tmp_path):
    lease = tmp_path / "lease"
    lease.touch()
    throttler = _script(sleeper.pid, lease, factor=2, period=0.05)
    _wait_stopped(sleeper.pid)  # throttling
    sleeper.kill()
    sleeper.wait()
    assert throttler.wait(timeout=START) == 0


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"factor": 0.5}, "The 'factor' parameter of ProcessThrottle must be a number >= 1. "
                      "Got 0.5 instead."),
    ({"factor": "4"}, "The 'factor' parameter of ProcessThrottle must be a number >= 1."),
    ({"factor": float("nan")}, "The 'factor' parameter of ProcessThrottle must be"),
    ({"period": 0}, "The 'period' parameter of ProcessThrottle must be a number of seconds "
                    "> 0. Got 0.0 instead."),
    ({"period": "soon"}, "The 'period' parameter of ProcessThrottle must be seconds or a "
                         "duration like '50ms'. Got 'soon' instead."),
    ({"lease": -1}, "The 'lease' parameter of ProcessThrottle must be a number of seconds"),
    ({"lease": 0.05}, "The 'lease' parameter of ProcessThrottle must be at least twice the "
                      "period"),
    ({"workers": []}, "The 'workers' parameter of ProcessThrottle must be a worker address "
                      "or a non-empty list of them. Got [] instead."),
    ({"workers": 3}, "The 'workers' parameter of ProcessThrottle must be a worker address"),
    ({"workers": ["tcp://127.0.0.1:1"]}, "must list addresses of workers of this cluster. "
                                         "Got unknown ['tcp://127.0.0.1:1']"),
])
def test_bad_input(client, workers, kwargs, message):
    args = {"workers": workers[:1], "factor": 4, **kwargs}
    with pytest.raises(InvalidParameterError, match=re.escape(message)):
        ProcessThrottle(client, args.pop("workers"), args.pop("factor"), **args)


def test_duplicate_workers_and_period_strings(client, workers):
    with pytest.raises(InvalidParameterError, match="lists a worker twice"):
        ProcessThrottle(client, [workers[0], workers[0]], 2)
    throttle = ProcessThrottle(client, workers[0], 2, period="100ms", lease="5s")
    assert (throttle.period, throttle.lease) == (0.1, 5.0)
    assert not throttle.active
    throttle.stop()  # never started: a no-op


def test_thread_workers_in_this_process_are_refused():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster, set_as_default=False) as c:
        (w,) = worker_addresses(c)
        with pytest.raises(InvalidParameterError, match=re.escape(
                "runs in this client's process (a thread-based cluster")):
            ProcessThrottle(c, [w], 4)
