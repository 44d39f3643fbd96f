"""Shared fixtures: a process-based LocalCluster for the session, small datasets."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# Our machines and CI set PYTHONDONTWRITEBYTECODE=1. The suite starts a few hundred Python
# processes (the CLI, spawned workers, scripts) that would each compile the package and its
# dependencies' uncompiled modules from source again: bytecode is written for this session
# and its subprocesses instead (into __pycache__ folders, which git ignores; measured on
# tests/test_bad_input.py and tests/test_config.py: 37.8 -> 32.7 s).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False, help="run slow tests")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def _unblock_sigint() -> None:
    import signal

    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@pytest.fixture
def as_from_a_shell() -> dict[str, Any]:
    """Keywords for ``subprocess.run``/``Popen`` of a command that must take Ctrl-C as one
    started from a shell does: pytest-xdist starts its workers with SIGINT blocked, and a
    child inherits the mask (it was unblocked only once a test had started a LocalCluster,
    whose multiprocessing resource tracker unblocks it: so a Ctrl-C test's result depended
    on which files its worker ran before)."""
    return {"preexec_fn": _unblock_sigint}


_BACKGROUND = pytest.StashKey["Any"]()

#: Fills numba's cache with every problem's kernels on float64, int8 and packed blocks
#: (the worker preload's small fits, then each kernel once), beside the first tests: a new
#: clone (CI) has no cache, and otherwise the first test to call a kernel, and the first
#: cluster's worker server, compile it on the suite's path.
_WARM_KERNELS = """
import numpy as np
import daskstraggle._worker_preload
from daskstraggle.problems import PCA, Block, LeastSquares, Logistic, block_stats
from daskstraggle.problems._packing import pack_dosages
rng = np.random.default_rng(0)
n, m = 64, 40
calls = rng.integers(-1, 3, size=(n, m)).astype(np.int8)
rows = {"fill": rng.uniform(0, 2, n), "center": rng.uniform(0, 2, n),
        "scale": rng.uniform(1, 2, n), "y": np.where(rng.random(n) < 0.5, -1.0, 1.0)}
for block in (Block(calls, **rows), Block(pack_dosages(calls), packed_columns=m, **rows)):
    for problem in (PCA(n_components=3), LeastSquares(), Logistic()):
        bound = problem.bind(block_stats(block))
        x = (bound.init_iterate(rng) if isinstance(problem, PCA)
             else 0.1 * rng.normal(size=bound.n_params))
        bound.kernel(block, x)
        if isinstance(problem, PCA):
            bound.gram_kernel(block)
"""


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the subprocesses of the selected ``background`` tests (see ``_background``),
    after a warm-up of numba's cache when many tests run."""

    from _background import BackgroundJobs

    marked: dict[str, dict[str, Any]] = {}
    if session.config.option.collectonly:
        # nothing runs: start nothing
        session.config.stash[_BACKGROUND] = BackgroundJobs({})
        return
    # a pytest-xdist worker ("gw0", "gw1", ...): the first one warms the cache up, and
    # the background tests run when reached (tests/_background.py)
    worker = getattr(session.config, "workerinput", {}).get("workerid")
    if len(session.items) >= 200 and worker in (None, "gw0"):
        marked["(numba cache warm-up)"] = {"argv": [sys.executable, "-c", _WARM_KERNELS],
                                           "timeout": 600}
    for item in session.items:
        mark = item.get_closest_marker("background")
        if mark is not None:
            marked[item.nodeid] = mark.kwargs
    lazy = [] if worker is None else [n for n in marked if n != "(numba cache warm-up)"]
    session.config.stash[_BACKGROUND] = BackgroundJobs(marked, lazy=lazy)


def pytest_sessionfinish(session: pytest.Session) -> None:
    jobs = session.config.stash.get(_BACKGROUND, None)
    if jobs is not None:
        jobs.close()


@pytest.fixture
def background_result(request: pytest.FixtureRequest) -> Any:
    """The finished subprocess (``CompletedProcess``) of this ``background``-marked test."""
    return request.config.stash[_BACKGROUND].result(request.node.nodeid)


@pytest.fixture(autouse=True)
def _import_time_environment_kept() -> Iterator[None]:
    """Fail a test that changes an import-time variable (``OMP_NUM_THREADS``, ...) for good.

    Once one changed, every later own cluster in the session spawns its workers instead of
    forking them from the preloaded server, which costs seconds per cluster. The values a
    Nanny sets before it starts a worker (it leaves them set), and those a library sets
    when it is imported, are expected.
    """

    from daskstraggle.runtime._connect import nanny_environ, read_at_import

    def import_time() -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if read_at_import(k)}

    before = import_time()
    yield
    after = import_time()
    nanny = nanny_environ()
    changed = sorted(k for k in set(before) | set(after)
                     if before.get(k) != after.get(k) and after.get(k) != nanny.get(k))
    assert not changed, (f"the test changed import-time environment variables for good: "
                         f"{changed}; use monkeypatch.setenv")


@pytest.fixture(scope="session")
def dask_client():
    """A LocalCluster with 3 single-threaded *process* workers, shared by the session."""
    import dask
    from distributed import Client, LocalCluster

    from daskstraggle.runtime._connect import worker_start_config
    from daskstraggle.runtime.dask import OWN_CLUSTER_CONFIG

    # workers forked from the preloaded server, as DaskRuntime(n_workers=3) starts them
    with dask.config.set({**OWN_CLUSTER_CONFIG, **worker_start_config()[0]}):
        cluster = LocalCluster(n_workers=3, threads_per_worker=1, processes=True,
                               dashboard_address=None)
    client = Client(cluster, set_as_default=False)
    yield client
    client.close()
    cluster.close()


@pytest.fixture
def low_rank_matrix() -> np.ndarray:
    """A 600 x 12 low-rank-plus-noise matrix with a clear spectral gap."""
    rng = np.random.default_rng(7)
    left = rng.normal(size=(600, 3)) * np.array([10.0, 6.0, 3.0])
    X = left @ rng.normal(size=(3, 12)) + 0.3 * rng.normal(size=(600, 12)) + 2.0
    return X


@pytest.fixture
def zarr_matrix(tmp_path: Path, low_rank_matrix: np.ndarray) -> Any:
    """``low_rank_matrix`` in a Zarr store of 50-row chunks, opened."""
    import zarr

    from daskstraggle import open_matrix

    z = zarr.create_array(tmp_path / "X.zarr", shape=low_rank_matrix.shape, chunks=(50, 12),
                          dtype="f8")
    z[:] = low_rank_matrix
    return open_matrix(tmp_path / "X.zarr")


@pytest.fixture(scope="session")
def vcz_path(tmp_path_factory: pytest.TempPathFactory):
    """A small VCF Zarr store written by bio2zarr from an msprime simulation."""
    import bio2zarr.tskit
    import msprime

    demography = msprime.Demography.island_model([1000] * 2, migration_rate=1e-4)
    ts = msprime.sim_ancestry(
        samples={"pop_0": 15, "pop_1": 15}, demography=demography, sequence_length=5e5,
        recombination_rate=1e-8, random_seed=3,
    )
    ts = msprime.sim_mutations(ts, rate=2e-8, random_seed=3, model=msprime.BinaryMutationModel())
    path = tmp_path_factory.mktemp("vcz") / "small.vcz"
    bio2zarr.tskit.convert(ts, str(path), variants_chunk_size=100)
    return path


@pytest.fixture(scope="session")
def vcz_missing_path(vcz_path, tmp_path_factory: pytest.TempPathFactory):
    """The small VCF Zarr store with 5% of calls set missing (-1) and one -2 fill call."""
    import shutil

    import zarr

    path = tmp_path_factory.mktemp("vcz") / "missing.vcz"
    shutil.copytree(vcz_path, path)
    gt = zarr.open_group(str(path), mode="r+")["call_genotype"]
    calls = gt[:]
    rng = np.random.default_rng(0)
    mask = rng.random(calls.shape[:2]) < 0.05
    calls[mask] = -1
    calls[0, 0, 1] = -2
    gt[:] = calls
    return path


@pytest.fixture
def load_pipeline():
    """Return a loader of a ``pipelines/<name>.py`` script as a module (they are not a package).

    The scripts set thread-count variables such as ``OMP_NUM_THREADS`` when they are
    imported; the environment is restored when the test ends, so that later tests' own
    clusters may still fork their workers from the preloaded server (which it refuses
    once an import-time variable changed).
    """
    import importlib.util
    from pathlib import Path

    def load(name: str):
        path = Path(__file__).resolve().parents[1] / "pipelines" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"pipeline_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    environ = dict(os.environ)
    yield load
    os.environ.clear()
    os.environ.update(environ)


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make starting a LocalCluster or connecting a Client fail the test."""
    import distributed

    def refuse(self: Any, *args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"{type(self).__name__} created before the input was validated")

    monkeypatch.setattr(distributed.LocalCluster, "__init__", refuse)
    monkeypatch.setattr(distributed.Client, "__init__", refuse)


def _start_fault_cluster() -> tuple[Any, Any]:
    import dask
    from distributed import Client, LocalCluster

    from daskstraggle.runtime._connect import worker_start_config
    from daskstraggle.runtime.dask import OWN_CLUSTER_CONFIG

    # as DaskRuntime(n_workers=3) starts one (a worker the nanny restarts is spawned)
    with dask.config.set({**OWN_CLUSTER_CONFIG, **worker_start_config()[0]}):
        cluster = LocalCluster(n_workers=3, threads_per_worker=1, processes=True,
                               dashboard_address=None)
    return cluster, Client(cluster, set_as_default=False)


def _continue_workers(cluster: Any) -> None:
    """SIGCONT every worker process of ``cluster`` (a test may have left one stopped)."""
    import signal

    for nanny in list(cluster.workers.values()):
        pid = getattr(nanny, "pid", None)
        if pid:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def _whole(cluster: Any, client: Any) -> bool:
    """Whether ``cluster`` has its 3 workers running again: a killed one is restarted by
    its nanny (and a worker a test added and killed leaves); a retired one never comes
    back, nor does a worker left closing gracefully."""
    from distributed.core import Status

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if any(n.status in (Status.closing, Status.closed) for n in cluster.workers.values()):
            return False
        info = client.scheduler_info(n_workers=-1)["workers"]
        if any(w.get("status") not in ("running", None) for w in info.values()):
            return False
        if len(info) == 3:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="session")
def _fault_clusters():
    held: dict[str, Any] = {}
    yield held
    if held:
        held["client"].close()
        held["cluster"].close()


@pytest.fixture
def fault_cluster(_fault_clusters: dict[str, Any]) -> Iterator[tuple[Any, Any]]:
    """``(cluster, client)``: a LocalCluster of 3 single-threaded process workers with
    nannies, for tests that kill, stop, retire or add workers. Shared across tests (a start
    costs seconds): after each test its stopped workers are continued and it is checked
    whole again (3 running workers, a killed one restarted by its nanny), else replaced."""
    held = _fault_clusters
    if not held or not _whole(held["cluster"], held["client"]):
        if held:
            held["client"].close()
            held["cluster"].close()
        held["cluster"], held["client"] = _start_fault_cluster()
    yield held["cluster"], held["client"]
    _continue_workers(held["cluster"])


@pytest.fixture
def at_round() -> Iterator[Callable[..., threading.Thread]]:
    """``at_round(rt, n, action)``: call ``action()`` in a thread once the run of ``rt`` has
    recorded ``n`` rounds (the coordinator's trace), not at a fixed wall time. The thread
    ends with the test."""
    threads: list[tuple[threading.Thread, threading.Event]] = []
    failures: list[BaseException] = []

    def start(rt: Any, n: int, action: Callable[[], Any]) -> threading.Thread:
        done = threading.Event()
        rt.engine.coordinator = None  # the previous run's, if any

        def wait() -> None:
            while not done.is_set():
                coordinator = getattr(rt, "coordinator", None)
                if coordinator is not None and len(coordinator.session.recorder) >= n:
                    try:
                        action()
                    except BaseException as err:  # reported when the test ends
                        failures.append(err)
                    return
                time.sleep(0.01)

        thread = threading.Thread(target=wait, daemon=True)
        thread.start()
        threads.append((thread, done))
        return thread

    yield start
    for thread, done in threads:
        done.set()
        thread.join(timeout=60)
    if failures:
        raise failures[0]


#: A `dask worker` process that imports first and joins the scheduler when told to (a
#: line on stdin): joining then takes ~0.1 s instead of the seconds of a cold start.
_LATE_WORKER = ("import sys\nfrom distributed.cli.dask_worker import main\n"
                "sys.stdin.readline()\nmain()\n")


class DaskWorkerProcess:
    """A real ``dask worker`` process (``--no-nanny`` unless ``nanny``); killed with the test."""

    def __init__(self, address: str, *, joins_later: bool = False, nanny: bool = False) -> None:
        import subprocess

        args = [address, "--nthreads", "1", "--no-dashboard", *([] if nanny else ["--no-nanny"])]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _LATE_WORKER, *args], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
        if not joins_later:
            self.join()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def join(self) -> None:
        """Let the worker join the scheduler now."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def dask_worker() -> Iterator[Callable[..., DaskWorkerProcess]]:
    """``dask_worker(address, joins_later=False, nanny=False)``: start a ``dask worker``
    process for the scheduler at ``address``; every one is killed when the test ends."""
    started: list[DaskWorkerProcess] = []

    def start(address: str, **kwargs: Any) -> DaskWorkerProcess:
        started.append(DaskWorkerProcess(address, **kwargs))
        return started[-1]

    yield start
    for worker in started:
        worker.kill()
