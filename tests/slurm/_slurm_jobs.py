"""What the SLURM fault tests share: a module's SLURMCluster and its jobs, the run (a PCA
with an exact method, checkpointed every iteration so that a fault can time itself), the
answer every fault keeps (the same run in this process) and bounded waits."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from daskstraggle import fit_pca
from daskstraggle.runtime.checkpoint import load_checkpoint

#: Seconds a job may take to start and its worker to join (a busy machine starts Python
#: processes slowly), a run to reach an iteration, and the cluster's jobs to leave.
JOB_TIMEOUT = 120
#: Each task sleeps ~0.2 s: a round of gd lasts ~0.3 s, long beside a membership check (1 s).
SLOW = "gamma(mean=0.2, var=1e-6)"
#: The run: a PCA with an exact method, to a fixed number of iterations.
RUN = {"n_components": 3, "method": "gd", "max_iter": 40, "tol": None, "rng": 0}


def matrix() -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.normal(size=(2000, 10)) * np.linspace(3.0, 1.0, 10)


@functools.cache
def clean_run(max_iter: int = RUN["max_iter"]) -> Any:
    """The run in this process (two workers' partitions), the answer every fault keeps."""
    return fit_pca(matrix(), runtime="local", n_workers=2, **{**RUN, "max_iter": max_iter})


@dataclass
class Jobs:
    """A SLURMCluster, its client, the SLURM and the folder of its job logs."""

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

    def add(self, **job_kwargs: Any) -> str:
        """Submit one more job, its script written with ``job_kwargs`` in place of the
        cluster's (``walltime``, ``worker_extra_args``, ...), and return its id once SLURM
        took it (its worker may not have joined yet)."""
        template = self.cluster._job_kwargs  # the options every new job is made with
        saved, before = dict(template), set(self.ids())
        template.update(job_kwargs)
        try:
            self.cluster.scale(jobs=len(self.cluster.workers) + 1)
            self.wait_for(lambda: set(self.ids()) - before, "the job submitted")
        finally:
            template.clear()
            template.update(saved)
        (job,) = set(self.ids()) - before
        return job

    def workers_by_job(self) -> dict[str, str]:
        """The joined workers' addresses by their job's id."""
        ids = {name: str(job.job_id) for name, job in self.cluster.workers.items()}
        return {ids[str(info["name"])]: address for address, info in
                self.client.scheduler_info(n_workers=-1)["workers"].items()}


@contextmanager
def open_jobs(slurm: Any, root: Path) -> Iterator[Jobs]:
    """A SLURMCluster on ``slurm`` (its jobs' logs in ``root / "logs"``) and a client of
    it, closed (bounded) at the end: a module's ``jobs`` fixture."""
    from distributed import Client

    cluster = slurm.dask_cluster(root, walltime="00:30:00")
    client = Client(cluster, set_as_default=False)
    try:
        yield Jobs(slurm, cluster, client, root)
    finally:
        client.close()
        cluster.close(timeout=JOB_TIMEOUT)


def in_thread(run: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
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


def checkpointed_iteration(path: Path) -> int:
    """The last iteration the run checkpointed at ``path`` (-1 before the first)."""
    try:
        return int(load_checkpoint(path)["iteration"]) if path.exists() else -1
    except Exception:  # being replaced: read it next time
        return -1


def fault_at_iteration(jobs: Jobs, checkpoint: Path, iteration: int,
                       fault: Callable[[], object]) -> tuple[threading.Thread, dict[str, Any]]:
    """In a thread: once the run checkpointed ``iteration``, do ``fault()`` (at most
    JOB_TIMEOUT s later: else the thread records that the run never got there)."""
    def act() -> object:
        deadline = time.monotonic() + JOB_TIMEOUT
        while checkpointed_iteration(checkpoint) < iteration:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the run did not reach iteration {iteration} within "
                                   f"{JOB_TIMEOUT} s (job logs in {jobs.logs})")
            time.sleep(0.05)
        return fault()
    return in_thread(act)


def ended(thread: threading.Thread, out: dict[str, Any]) -> Any:
    """The fault thread's result, once it ended (bounded); its error raised here."""
    thread.join(JOB_TIMEOUT)
    assert not thread.is_alive(), "the fault thread did not end"
    if "error" in out:
        raise out["error"]
    return out.get("result")


def run_pca(jobs: Jobs, checkpoint: Path, **kwargs: Any) -> Any:
    """The PCA on the cluster's jobs (two workers, unless ``kwargs`` say otherwise),
    checkpointed every iteration (how the faults time themselves), its straggler delays
    making each round ~0.3 s."""
    return fit_pca(matrix(), client=jobs.client, checkpoint=checkpoint, checkpoint_iterations=1,
                   **{"min_workers": 2, "stragglers": SLOW, **RUN, **kwargs})


def loss_kinds(res: Any) -> list[str]:
    return [move["kind"] for move in res.attrs.get("worker_losses", [])]


def assert_same_answer(res: Any, clean: Any) -> None:
    assert res.n_iter == clean.n_iter
    np.testing.assert_allclose(res.fitted["components"], clean.fitted["components"],
                               atol=1e-8)
