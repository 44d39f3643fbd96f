"""Faults as a batch system makes them, on SLURMCluster jobs running real ``dask worker``s.

The ``slurm`` fixture of ``conftest.py`` is a real one-node SLURM; one SLURMCluster (its
scheduler in this process) serves the module, each test starting the jobs it needs. The
faults are SLURM's own: ``scancel``, ``scontrol requeue``, ``scontrol hold``/``release``, a
job script that fails, and ``cluster.adapt`` resubmitting a job that ended. Each run ends
on the answer of the same exact method run in this process (``runtime="local"``), or in
one bounded line. Every wait is bounded and fails in one line naming the logs.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daskstraggle import fit_pca
from daskstraggle.errors import ClusterConnectionError
from daskstraggle.runtime import _membership
from daskstraggle.runtime.checkpoint import load_checkpoint

pytestmark = [pytest.mark.slurm, pytest.mark.cluster]

#: Seconds a job may take to start and its worker to join (a busy machine starts Python
#: processes slowly), a run to reach an iteration, and the cluster's jobs to leave.
JOB_TIMEOUT = 120
#: Each task sleeps ~0.2 s: a round of gd lasts ~0.3 s, long beside a membership check (1 s).
SLOW = "gamma(mean=0.2, var=1e-6)"
#: The run: a PCA with an exact method, to a fixed number of iterations.
RUN = {"n_components": 3, "method": "gd", "max_iter": 40, "tol": None, "rng": 0}


def _matrix() -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.normal(size=(2000, 10)) * np.linspace(3.0, 1.0, 10)


@pytest.fixture(scope="module")
def clean() -> Any:
    """The run in this process (two workers' partitions), the answer every fault keeps."""
    return fit_pca(_matrix(), runtime="local", n_workers=2, **RUN)


@dataclass
class Jobs:
    """The module's SLURMCluster, its client, the SLURM and the folder of its job logs."""

    slurm: Any
    cluster: Any
    client: Any
    root: Path

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def ids(self) -> list[str]:
        """The cluster's jobs (dask-jobqueue's), by worker name order."""
        return [str(job.job_id) for _, job in sorted(self.cluster.workers.items())
                if job.job_id is not None]

    def wait_for(self, condition: Callable[[], object], what: str,
                 timeout: float = JOB_TIMEOUT) -> None:
        self.slurm.wait_for(condition, f"{what} (job logs in {self.logs})", timeout)

    def n_workers(self) -> int:
        return len(self.client.scheduler_info(n_workers=-1)["workers"])

    def start(self, n: int) -> list[str]:
        """End the cluster's jobs, start ``n`` new ones and wait until their workers joined;
        return their job ids."""
        self.cluster.scale(jobs=0)
        self.wait_for(lambda: not self.cluster.workers and self.n_workers() == 0,
                      "the previous jobs' workers leaving")
        if n:
            self.cluster.scale(jobs=n)
            self.wait_for(lambda: self.n_workers() == n, f"{n} workers joining")
        return self.ids()


@pytest.fixture(scope="module")
def jobs(slurm: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobs]:
    from dask_jobqueue import SLURMCluster
    from distributed import Client

    root = tmp_path_factory.mktemp("slurm-faults")
    cluster = SLURMCluster(
        cores=1, processes=1, memory="1GB", walltime="00:30:00", queue=slurm.partition,
        python=sys.executable, log_directory=str(root / "logs"),
        job_extra_directives=[f"--chdir={root}"],
        scheduler_options={"host": "127.0.0.1", "dashboard_address": "127.0.0.1:0"},
    )
    client = Client(cluster, set_as_default=False)
    try:
        yield Jobs(slurm, cluster, client, root)
    finally:
        client.close()
        cluster.close(timeout=JOB_TIMEOUT)


def _in_thread(run: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Start ``run()`` in a thread; its result (or exception) lands in the dict."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["result"] = run()
        except BaseException as err:  # handed to the test
            out["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


def _iteration(path: Path) -> int:
    try:
        return int(load_checkpoint(path)["iteration"]) if path.exists() else -1
    except Exception:  # being replaced: read it next time
        return -1


def _joined(jobs: Jobs, thread: threading.Thread, out: dict[str, Any]) -> Any:
    thread.join(JOB_TIMEOUT)
    if thread.is_alive():
        pytest.fail(f"the run did not end within {JOB_TIMEOUT} s (queue: {jobs.slurm.jobs()}; "
                    f"job logs in {jobs.logs})", pytrace=False)
    if "error" in out:
        raise out["error"]
    return out["result"]


def _same_answer(res: Any, clean: Any) -> None:
    assert res.n_iter == clean.n_iter
    np.testing.assert_allclose(res.fitted["components"], clean.fitted["components"],
                               atol=1e-8)


# --- e. a job whose worker cannot start -------------------------------------------------

class _FakeJob:
    job_header = "#SBATCH -J dask-worker\n#SBATCH -e /logs/dask-worker-%J.err\n" \
                 "#SBATCH -o /logs/dask-worker-%J.out"

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id


class _FakeCluster:
    class job_cls:
        submit_command = "sbatch"

    def __init__(self) -> None:
        self.workers = {"0": _FakeJob("11"), "1": _FakeJob("12"), "2": _FakeJob("13")}
        self.scheduler_info = {"workers": {"tcp://w0": {"name": "0"}}}


class _FakeClient:
    """A client whose workers never all join, on a fake JobQueueCluster."""

    def __init__(self) -> None:
        self.cluster = _FakeCluster()
        self.scheduler = type("Rpc", (), {"address": "tcp://127.0.0.1:8786"})()

    def wait_for_workers(self, n: int, timeout: float) -> None:
        raise TimeoutError


def test_a_job_that_ended_before_its_worker_joined_is_named_with_its_log(monkeypatch):
    # job 11's worker joined; the batch system still queues 13; 12 ended without a worker
    monkeypatch.setattr(_membership, "QUEUE_LISTINGS",
                        {"sbatch": ("sh", "-c", "echo '{ids}' | tr , '\\n' | grep 13")})
    monkeypatch.setattr(_membership, "JOB_CHECK_INTERVAL", 0.01)
    with pytest.raises(ClusterConnectionError) as raised:
        _membership.wait_for_workers_or_jobs(_FakeClient(), 3, timeout=600)
    assert str(raised.value) == (
        "Job 12 of the _FakeCluster ended before its worker joined the scheduler at "
        "'tcp://127.0.0.1:8786' (3 workers awaited); see its log /logs/dask-worker-12.err and "
        "/logs/dask-worker-12.out. Check the log and fix the job script "
        "(cluster.job_script(): job_script_prologue, python, the environment).")
    # a batch system that is not asked, or a listing that fails: the wait's own bound
    monkeypatch.setattr(_membership, "QUEUE_LISTINGS", {"sbatch": ("false", "{ids}")})
    with pytest.raises(TimeoutError):
        _membership.wait_for_workers_or_jobs(_FakeClient(), 3, timeout=0.05)


def test_a_job_whose_worker_cannot_start_is_one_line_naming_its_log(jobs: Jobs, clean: Any):
    """A job script whose prologue fails (``exit 1``) while ``min_workers`` waits: the
    wait ends in one line naming the job and its log, not after the 300 s bound."""
    (job,) = jobs.start(1)
    bad = jobs.cluster._job_kwargs
    saved = bad.get("job_script_prologue")
    bad["job_script_prologue"] = ["exit 1"]
    try:
        jobs.cluster.scale(jobs=2)
        with pytest.raises(ClusterConnectionError) as raised:
            fit_pca(_matrix(), client=jobs.client, min_workers=2, **RUN)
    finally:
        bad["job_script_prologue"] = saved
    failed = [j for j in jobs.ids() if j != job]
    assert len(failed) == 1
    line = str(raised.value)
    assert "\n" not in line
    log = jobs.logs / f"dask-worker-{failed[0]}.err"
    assert line.startswith(f"Job {failed[0]} of the SLURMCluster ended before its worker "
                           "joined the scheduler at "), line
    assert f"see its log {log} and " in line and log.exists(), line
    assert line.endswith("Check the log and fix the job script (cluster.job_script(): "
                         "job_script_prologue, python, the environment)."), line
