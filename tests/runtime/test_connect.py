"""Reaching a cluster never hangs and ends in one line; Ctrl-C and exit are quiet.

Real processes: an HTTP server (not a Dask scheduler), a port nothing listens on, a
``dask scheduler`` without workers, and the CLI interrupted with SIGINT sent to its whole
process group (as a terminal's Ctrl-C does, so the workers receive it too). The slow
commands (each waits for the 10 s handshake or worker timeout) start together with the
first test of the module (the ``servers`` fixture is autouse) and run alongside the others;
the two tests that wait for them come last.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import zarr

import daskstraggle
from daskstraggle.cli import main
from daskstraggle.errors import ClusterConnectionError, InvalidTypeError, StraggleWarning
from daskstraggle.runtime import DaskRuntime
from daskstraggle.testing import BackgroundCommand, free_port, one_error_line

CLI = [sys.executable, "-m", "daskstraggle.cli"]



#: Seconds a started process (a scheduler, a worker, the CLI) may take to reach a state
#: the test waits for: generous, as a busy machine starts Python processes slowly; a hang
#: beyond it fails with a message (pytest-timeout's 300 s would end it anyway).
START = 120


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = START) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the server process exited"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on port {port} after {timeout} s")






@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("connect") / "a.zarr"
    z = zarr.create_array(path, shape=(200, 4), chunks=(50, 4), dtype="f8")
    z[:] = np.random.default_rng(0).normal(size=(200, 4))
    return path


@pytest.fixture(scope="module", autouse=True)
def servers(data, tmp_path_factory: pytest.TempPathFactory):
    """An HTTP server, a scheduler without workers, and the CLI pointed at each."""
    http_port, sched_port = free_port(), free_port()
    http = subprocess.Popen([sys.executable, "-m", "http.server", str(http_port), "--bind",
                             "127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sched = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host",
                              "127.0.0.1", "--port", str(sched_port), "--dashboard-address",
                              ":0", "--no-show"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        wait_listening(http_port, http)
        wait_listening(sched_port, sched)
        ns = SimpleNamespace(http=f"tcp://127.0.0.1:{http_port}",
                             scheduler=f"tcp://127.0.0.1:{sched_port}")
        cwd = tmp_path_factory.mktemp("bg")
        ns.cwd = cwd
        ns.http_run = BackgroundCommand(
            [*CLI, "pca", str(data), "--scheduler", ns.http, "--out", str(cwd / "o1.zarr")],
            cwd, timeout=2 * START)
        ns.empty_run = BackgroundCommand(
            [*CLI, "pca", str(data), "--scheduler", ns.scheduler, "--out", str(cwd / "o2.zarr")],
            cwd, timeout=2 * START)
        yield ns
        for run in (ns.http_run, ns.empty_run):
            if run.proc.poll() is None:
                run.proc.kill()
            run.result()
    finally:
        for proc in (http, sched):
            proc.terminate()
            proc.wait(timeout=START)


# ------------------------------------------------------------ a port nothing listens on
def test_refused_connection_fails_at_once(data, tmp_path, capsys, monkeypatch):
    # "at once": one connection attempt, whose refusal ends the call; no distributed
    # Client is built (it would retry a refused connection until its timeout)
    import distributed

    address = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there
    port = int(address.rsplit(":", 1)[1])
    attempts: list[str] = []
    create_connection = socket.create_connection

    def attempt(where, *args, **kwargs):
        try:
            return create_connection(where, *args, **kwargs)
        except BaseException as err:
            if where[1] == port:
                attempts.append(type(err).__name__)
            raise

    def no_client(self: object, *args: object, **kwargs: object) -> None:
        raise AssertionError("a distributed Client was built for a refused address")

    monkeypatch.setattr(socket, "create_connection", attempt)
    monkeypatch.setattr(distributed.Client, "__init__", no_client)
    code = main(["pca", str(data), "--scheduler", address])
    line = one_error_line(capsys.readouterr().err)
    assert code == 2
    assert address in line and "refused" in line
    assert attempts == ["ConnectionRefusedError"]
    with pytest.raises(ClusterConnectionError, match="connection was refused"):
        daskstraggle.fit_pca(data, 1, scheduler=address)
    assert attempts == ["ConnectionRefusedError"] * 2


# ------------------------------------------------------------ an address string as client
def test_client_given_an_address_string_is_refused(servers, data, tmp_path):
    for call in (lambda: daskstraggle.fit_pca(data, 1, client=servers.scheduler,
                                              out=tmp_path / "o.zarr"),
                 lambda: DaskRuntime(servers.scheduler)):
        with pytest.raises(InvalidTypeError,
                           match=re.escape(f"Got a str instead. To connect to the scheduler at "
                                           f"{servers.scheduler!r}, pass scheduler=")):
            call()
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------ interrupts
def test_ctrl_c_ends_in_one_line_with_quiet_workers(data, tmp_path):
    argv = [*CLI, "pca", str(data), "-k", "1", "--workers", "2", "--method", "sgd", "--wait",
            "1", "--max-iter", "1000000", "--tol", "1e-300", "--quiet",
            "--checkpoint", str(tmp_path / "run.ckpt"), "--checkpoint-iterations", "1"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, start_new_session=True)
    try:
        # iterating once the checkpoint of a later iteration is written
        deadline = time.monotonic() + START
        while not _iterated(tmp_path / "run.ckpt", 3):
            if proc.poll() is not None or time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                pytest.fail(f"the run did not get going within {START} s: {proc.communicate()}")
            time.sleep(0.05)
        assert len(_descendants(proc.pid)) >= 2  # the LocalCluster's worker processes
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        _, err = proc.communicate(timeout=START)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip().splitlines() == ["aborted"], err


def _iterated(path: Path, iteration: int) -> bool:
    from daskstraggle.runtime.checkpoint import load_checkpoint

    try:
        return load_checkpoint(path)["iteration"] >= iteration
    except Exception:  # not written yet (each write replaces the file whole)
        return False


def _descendants(pid: int) -> list[int]:
    psutil = pytest.importorskip("psutil")
    return [p.pid for p in psutil.Process(pid).children(recursive=True)
            if "multiprocessing" in " ".join(p.cmdline())]


# -------------------------------------------------------------- many workers, exit
def test_too_many_workers_for_the_cores_warns_in_one_line(data, capsys, monkeypatch):
    import distributed

    def refuse(self: object, *args: object, **kwargs: object) -> None:
        raise AssertionError("LocalCluster started")

    monkeypatch.setattr(distributed.LocalCluster, "__init__", refuse)
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    with pytest.warns(StraggleWarning, match=r"Starting 5 worker processes on 1 CPU core"), \
            pytest.raises(AssertionError, match="LocalCluster started"):
        DaskRuntime(n_workers=5)
    with pytest.raises(AssertionError, match="LocalCluster started"):
        DaskRuntime(n_workers=4)  # 4 per core: no warning (warnings are errors here)

    import warnings
    with warnings.catch_warnings(), pytest.raises(AssertionError, match="LocalCluster started"):
        warnings.simplefilter("always", StraggleWarning)
        main(["pca", str(data), "--workers", "5"])
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "warning: Starting 5 worker processes on 1 CPU core(s): they only take turns on the "
        "cores and each needs memory and start-up time; use at most 4 (--workers), or "
        "connect to a larger cluster (--scheduler)."], err


BUSY_EXIT = r"""
import sys, time
from daskstraggle.runtime.dask import connect

def block_zarr_io(restore_hook):  # keep zarr's I/O thread busy past its 0.2 s exit join
    import atexit
    from zarr.core import sync
    if restore_hook:  # the control: as if the plugin had not run
        atexit.register(sync.cleanup_resources)
    loop = sync._get_loop()
    loop.call_soon_threadsafe(time.sleep, 3)
    return True

if __name__ == "__main__":  # the workers' processes import this file too
    if sys.argv[2] == "spawn":  # the start method of a worker the nanny restarts
        from daskstraggle.runtime import _connect
        _connect.worker_start_config = lambda: ({}, {})
    client, owned = connect(n_workers=1)
    restore = sys.argv[1] == "without-plugin"
    assert client.submit(block_zarr_io, restore, pure=False).result()
    for obj in owned:
        obj.close()
"""


def _busy_exit(plugin: bool, method: str) -> pytest.MarkDecorator:
    """The subprocess of one case, run beside the other tests (tests/_background.py)."""
    mode = "with-plugin" if plugin else "without-plugin"
    return pytest.mark.background(argv=[sys.executable, "{tmp}/busy_exit.py", mode, method],
                                  files={"busy_exit.py": BUSY_EXIT}, timeout=2 * START)


@pytest.mark.parametrize(("plugin", "method"), [
    pytest.param(True, "spawn", marks=_busy_exit(True, "spawn"), id="quiet"),
    pytest.param(False, "spawn", marks=_busy_exit(False, "spawn"), id="control"),
    pytest.param(False, "forkserver", marks=_busy_exit(False, "forkserver"), id="forked"),
])
def test_workers_exit_without_zarr_atexit_noise(plugin, method, background_result):
    """A busy zarr I/O thread at exit printed a warning and a traceback per worker.

    A spawned worker (as the nanny restarts one) runs the exit hooks: the plugin removes
    zarr's, and the control shows the noise without it. A worker forked from the
    forkserver (how a LocalCluster started here starts its workers) leaves with
    ``os._exit`` and runs no exit hook at all, plugin or not.
    """
    proc = background_result
    assert proc.returncode == 0, proc.stderr
    if plugin or method == "forkserver":
        assert proc.stderr == "", proc.stderr
    else:  # the control shows the test can fail: the noise is there without the plugin
        assert "Cannot close a running event loop" in proc.stderr, proc.stderr


# -------------------------------------------------------------- not a Dask scheduler
def test_http_server_is_refused_within_the_timeout(servers, data):
    # the handshake's bound ends the wait: the error is the timeout's and names it
    with pytest.raises(ClusterConnectionError,
                       match=re.escape(f"The server at {servers.http!r} did not answer the "
                                       "Dask handshake within 2 s: it is not a Dask scheduler")):
        DaskRuntime(address=servers.http, timeout=2)

    run = servers.http_run.result()
    assert run.proc.returncode == 2, run.err
    assert run.out == ""
    line = one_error_line(run.err)
    assert servers.http in line and "not a Dask scheduler" in line and "8786" in line
    assert "did not answer the Dask handshake within 10 s" in line  # the CLI's bound
    assert not (servers.cwd / "o1.zarr").exists()


# ------------------------------------------------------------ a scheduler, no workers
def test_scheduler_without_workers_ends_in_one_line(servers, data):
    # the bound on waiting for workers ends the wait: the error is its timeout's
    with pytest.raises(ClusterConnectionError,
                       match=re.escape(f"The Dask scheduler at {servers.scheduler!r} has no "
                                       "workers (waited 1 s). Start some (dask worker")):
        DaskRuntime(address=servers.scheduler, timeout=1)

    run = servers.empty_run.result()
    assert run.proc.returncode == 2, run.err
    line = one_error_line(run.err)
    assert servers.scheduler in line and "no workers (waited 10 s)" in line
    assert not (servers.cwd / "o2.zarr").exists()


# ------------------------------------------------------------- forked worker processes
def test_own_clusters_fork_their_workers_from_a_preloaded_server():
    import dask

    from daskstraggle.runtime._connect import WORKER_PRELOAD, worker_start_config

    key = "distributed.worker.multiprocessing-method"
    if not sys.platform.startswith("linux"):
        assert worker_start_config() == ({}, {})
        return
    worker_start_config()  # our server is configured (once per process)
    assert worker_start_config()[0] == {key: "forkserver"}
    assert "daskstraggle._worker_preload" in WORKER_PRELOAD
    # the user's own choice of start method is kept
    with dask.config.set({key: "fork"}):
        assert worker_start_config() == ({}, {})


def test_forked_workers_get_what_changed_in_the_environment_or_are_spawned(monkeypatch):
    """A forked worker has the server's environment: a variable set since is passed to
    the workers, and one read at import time (thread pools, numba) means spawning."""
    from daskstraggle.runtime._connect import worker_start_config

    if not sys.platform.startswith("linux"):
        pytest.skip("forked workers on Linux only")
    worker_start_config()  # the server's environment is recorded (once per process)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "set-after-the-server-started")
    config, environ = worker_start_config()
    assert config and environ["AWS_ACCESS_KEY_ID"] == "set-after-the-server-started"
    # scikit-learn sets these on import (in a worker too): passed on, not a reason to spawn
    monkeypatch.setenv("KMP_INIT_AT_FORK", "set-after-the-server-started")
    config, environ = worker_start_config()
    assert config and environ["KMP_INIT_AT_FORK"] == "set-after-the-server-started"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert worker_start_config() == ({}, {})


@pytest.mark.cluster
def test_clusters_started_after_a_nanny_set_its_variables_still_fork(dask_client):
    """A Nanny sets ``OMP_NUM_THREADS``, ``PYTHONHASHSEED``, ... in this process for good
    before its first worker starts (and so before our server starts): they are part of the
    server's environment, not a change since, so the next clusters fork too."""
    from daskstraggle.runtime._connect import nanny_environ, worker_start_config

    if not sys.platform.startswith("linux"):
        pytest.skip("forked workers on Linux only")
    assert nanny_environ().items() <= os.environ.items()  # the session's cluster set them
    assert worker_start_config()[0] == {"distributed.worker.multiprocessing-method":
                                        "forkserver"}


@pytest.mark.cluster
def test_the_session_clusters_workers_hold_the_preloaded_kernels(dask_client):
    def preloaded() -> tuple[bool, bool]:
        import signal
        import sys

        return ("daskstraggle._worker_preload" in sys.modules,
                signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, ()))

    # forked from the preloaded server, and Ctrl-C blocked there whoever started it
    assert all(v == (True, True) for v in dask_client.run(preloaded).values())


def test_a_failing_kernel_warm_up_does_not_stop_the_forkserver(monkeypatch):
    """Only an ImportError is skipped by the forkserver's preload: any other error raised
    on import would stop it from forking workers, so the warm-up keeps its errors."""
    import importlib

    import daskstraggle.api

    mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    try:
        from daskstraggle import _worker_preload
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    calls = []

    def broken(*args, **kwargs):
        calls.append(args)
        raise RuntimeError("no kernels here")

    monkeypatch.setattr(daskstraggle.api, "fit_pca", broken)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    try:
        importlib.reload(_worker_preload)  # raises nothing
        assert signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, ())
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # the import blocked SIGINT here
    assert calls


@pytest.mark.parametrize(("source", "named"), [
    ("import daskstraggle\nres = daskstraggle.fit_pca(X, 2, n_workers=2)\n", True),
    ('if __name__ == "__main__":\n    res = fit_pca(X)\n', False),
    ("if __name__=='__main__' :\n    pass\n", False),
])
def test_unguarded_main_names_a_script_without_the_guard(tmp_path, monkeypatch, source,
                                                         named):
    from daskstraggle.runtime._connect import unguarded_main

    script = tmp_path / "fit.py"
    script.write_text(source)
    monkeypatch.setitem(sys.modules, "__main__", SimpleNamespace(__file__=str(script)))
    assert unguarded_main() == (str(script) if named else None)
    monkeypatch.setitem(sys.modules, "__main__", SimpleNamespace())  # python -c, a notebook
    assert unguarded_main() is None


@pytest.mark.cluster
def test_a_script_without_the_main_guard_is_told_about_the_guard(tmp_path):
    """Worker processes import the script that starts them: without the guard each tries
    to start a cluster of its own, and the one line says so (not memory or process
    limits)."""
    script = tmp_path / "fit.py"
    script.write_text("import numpy as np\nimport daskstraggle as ds\n"
                      "X = np.random.default_rng(0).normal(size=(100, 4))\n"
                      "ds.fit_pca(X, 2, n_workers=2, runtime='dask')\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode != 0
    line = [text for text in proc.stderr.splitlines() if "ClusterConnectionError" in text][-1]
    assert "has no 'if __name__ == \"__main__\":' guard" in line, proc.stderr[-2000:]
    assert "process limit" not in line
