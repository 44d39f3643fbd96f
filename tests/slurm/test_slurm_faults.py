"""Faults as a batch system makes them, on SLURMCluster jobs running real ``dask worker``s.

The ``slurm`` fixture of ``conftest.py`` is a real one-node SLURM; one SLURMCluster (its
scheduler in this process) serves the module, each test starting the jobs it needs. The
faults are SLURM's own: ``scancel``, ``scontrol requeue``, ``scontrol hold``/``release``, a
job script that fails, ``cluster.adapt`` resubmitting a job that ended, and jobs reaching
their walltime with and without ``--lifetime`` (here, not in a module of its own:
pytest-xdist runs the files with most tests first, so a one-test file of two minutes'
waiting would end the suite alone). Each run ends
on the answer of the same exact method run in this process (``runtime="local"``), or in
one bounded line. Every wait is bounded and fails in one line naming the logs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import pytest
from _slurm_jobs import (
    JOB_TIMEOUT,
    RUN,
    Jobs,
    assert_same_answer,
    checkpointed_iteration,
    clean_run,
    ended,
    fault_at_iteration,
    in_thread,
    loss_kinds,
    matrix,
    open_jobs,
    run_pca,
)

from daskstraggle import fit_pca
from daskstraggle.errors import ClusterConnectionError, StraggleWarning, WorkerLostError
from daskstraggle.runtime import _membership
from daskstraggle.runtime.checkpoint import load_checkpoint

pytestmark = [pytest.mark.slurm, pytest.mark.cluster]


@pytest.fixture(scope="module")
def clean() -> Any:
    return clean_run()


@pytest.fixture(scope="module")
def jobs(slurm: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobs]:
    with open_jobs(slurm, tmp_path_factory.mktemp("slurm-faults")) as opened:
        yield opened


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
            fit_pca(matrix(), client=jobs.client, min_workers=2, **RUN)
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


# --- a. scancel -------------------------------------------------------------------------

def test_scancel_of_one_job_is_a_loss_and_the_run_ends_on_the_clean_answer(
        jobs: Jobs, clean: Any, tmp_path: Path):
    ids = jobs.start(2)
    ck = tmp_path / "run.ckpt"
    fault = fault_at_iteration(jobs, ck, 3, lambda: jobs.slurm.run("scancel", ids[1]))
    with pytest.warns(StraggleWarning, match="left the cluster"):
        res = run_pca(jobs, ck)
    ended(*fault)
    assert loss_kinds(res) == ["lost"], res.attrs["worker_losses"]
    assert_same_answer(res, clean)


def test_scancel_of_every_job_ends_in_the_checkpoint_line_then_resume_is_clean(
        jobs: Jobs, clean: Any, tmp_path: Path):
    ids = jobs.start(2)
    ck = tmp_path / "run.ckpt"
    fault = fault_at_iteration(jobs, ck, 3, lambda: jobs.slurm.run("scancel", *ids))
    # no job is resubmitted: the run waits timeouts.no-worker for a worker, then ends
    with dask.config.set({"daskstraggle.timeouts.no-worker": "5s"}), \
            pytest.raises(WorkerLostError) as raised:
        run_pca(jobs, ck)
    ended(*fault)
    done = load_checkpoint(ck)["iteration"]
    assert 3 <= done < RUN["max_iter"]
    line = str(raised.value)
    assert "\n" not in line
    assert line.startswith("Every worker left the cluster and none joined within 5 s"), line
    assert line.endswith(f" and continue from the last checkpoint (after iteration {done}): "
                         f"--resume {str(ck)!r} (API: resume=)."), line
    # new jobs, the same number of workers: the resumed run ends on the clean answer
    assert not set(jobs.start(2)) & set(ids)
    res = fit_pca(matrix(), client=jobs.client, min_workers=2, resume=ck, **RUN)
    assert not loss_kinds(res)
    assert_same_answer(res, clean)


# --- c. adapt resubmits a job that ended ------------------------------------------------

def test_adapt_resubmits_a_cancelled_job_and_its_worker_takes_the_index_back(
        jobs: Jobs, tmp_path: Path):
    ids = jobs.start(2)
    ck = tmp_path / "run.ckpt"
    clean = clean_run(80)
    # adapt resubmits a job once its worker has been gone lost-worker-timeout (15 s)
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "1s"}):
        adaptive = jobs.cluster.adapt(minimum_jobs=2, maximum_jobs=2)
        try:
            fault = fault_at_iteration(jobs, ck, 3, lambda: jobs.slurm.run("scancel", ids[1]))
            with pytest.warns(StraggleWarning, match="left the cluster"):
                res = run_pca(jobs, ck, max_iter=80)
            ended(*fault)
            new = set(jobs.ids()) - set(ids)
        finally:
            adaptive.stop()
    assert len(new) == 1, jobs.ids()  # a new SLURM job
    moves = res.attrs["worker_losses"]
    assert loss_kinds(res) == ["lost", "adopted"], moves
    # the newcomer took back the index the cancelled job's worker had
    assert moves[1]["worker_index"] == moves[0]["worker_index"], moves
    assert moves[1]["moved_to"] not in {moves[0]["lost"], moves[0]["moved_to"]}, moves
    assert_same_answer(res, clean)


# --- d. preemption (requeue), and a job held in the queue --------------------------------

def test_a_requeued_job_is_a_loss_and_its_restart_takes_the_index_back(
        jobs: Jobs, tmp_path: Path):
    ids = jobs.start(2)
    ck = tmp_path / "run.ckpt"
    clean = clean_run(80)

    def preempt() -> None:
        jobs.slurm.run("scontrol", "requeue", ids[1])  # killed, back in the queue
        # SLURM holds a requeued job 120 s (BeginTime): as a preemption's job, it may
        # start again at once
        jobs.wait_for(lambda: jobs.slurm.jobs().get(ids[1]) == "PENDING",
                      f"job {ids[1]} requeued")
        jobs.slurm.run("scontrol", "update", f"JobId={ids[1]}", "StartTime=now")

    fault = fault_at_iteration(jobs, ck, 3, preempt)
    # dask-jobqueue cancels a job whose worker is gone lost-worker-timeout (15 s): the
    # requeued job may take longer to start again on a busy machine
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "300s"}), \
            pytest.warns(StraggleWarning, match="left the cluster"):
        res = run_pca(jobs, ck, max_iter=80)
    ended(*fault)
    assert set(jobs.ids()) == set(ids)  # the same SLURM job, started again
    # its restarted worker takes the index back if it joined before the run ended
    kinds = loss_kinds(res)
    assert kinds[0] == "lost" and set(kinds[1:]) <= {"adopted"}, res.attrs["worker_losses"]
    assert_same_answer(res, clean)


class _Said(logging.Handler):
    """Set an event when a log record's message starts with ``prefix``."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix, self.event = prefix, threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith(self.prefix):
            self.event.set()


def test_min_workers_waits_for_a_held_job_and_the_run_starts_once_it_joins(
        jobs: Jobs, clean: Any, tmp_path: Path):
    ids = jobs.start(2)
    node = jobs.slurm.node
    ck = tmp_path / "run.ckpt"
    # a third job that stays in the queue: submitted while the node takes no new job,
    # then held (scontrol hold acts on pending jobs)
    jobs.slurm.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=test")
    try:
        jobs.cluster.scale(jobs=3)
        jobs.wait_for(lambda: len(jobs.ids()) == 3, "the third job submitted")
        (held,) = set(jobs.ids()) - set(ids)
        jobs.slurm.run("scontrol", "hold", held)
    finally:
        jobs.slurm.run("scontrol", "update", f"NodeName={node}", "State=RESUME")
    said = _Said("waiting for 3 workers")
    logging.getLogger("daskstraggle.runtime.dask").addHandler(said)

    def release() -> int:
        if not said.event.wait(JOB_TIMEOUT):
            raise TimeoutError("the run did not wait for 3 workers")
        assert jobs.slurm.jobs()[held] == "PENDING"
        jobs.slurm.run("scontrol", "release", held)
        return checkpointed_iteration(ck)  # the run's progress when the job was released

    fault = in_thread(release)
    try:
        res = fit_pca(matrix(), client=jobs.client, min_workers=3, checkpoint=ck,
                      checkpoint_iterations=1, **RUN)
    finally:
        logging.getLogger("daskstraggle.runtime.dask").removeHandler(said)
    assert ended(*fault) == -1  # nothing ran while the job was held
    assert jobs.n_workers() == 3 and not loss_kinds(res)
    assert_same_answer(res, clean)


# --- b. a job at its walltime, with and without --lifetime ---------------------------

#: SLURM's shortest walltime (it counts in minutes). slurmctld ends a job past its limit at
#: its next check (every 30 s) and kills it KillWait (5 s, conftest) after the SIGTERM: the
#: job ends 60-95 s after it started.
WALLTIME = "00:01:00"
#: The retiring worker's lifetime: under the walltime, and after the run started (its
#: three workers join within seconds of each other).
LIFETIME = ["--lifetime", "25s", "--lifetime-stagger", "0s"]
#: The run: only the killed job's worker is slow (its tasks 0.3 s, the others' 3 ms), so
#: it ends soon after SLURM kills that worker. The run starts once that worker joined, at
#: most 95 s before the kill, and MAX_ITER rounds of >= 0.3 s each last >= 105 s while it
#: lives (a busy machine only makes them longer). (With every worker slow until a fixed
#: round, the one worker left after the kill held three indices, 0.9 s a round: 170-190 s.)
MAX_ITER = 350


def slow_only(index: int) -> str:
    """Straggler spec: worker ``index`` (of three) 0.3 s a task, the others 3 ms."""
    fast = [i for i in range(3) if i != index]
    return f"gamma(mean=0.3, var=1e-6) + schedule(changes=[[0, {fast}, 0.01]])"


def test_a_job_at_its_walltime_retires_with_lifetime_and_is_lost_without(
        jobs: Jobs, tmp_path: Path):
    """One run on three jobs: one for the whole run; one at SLURM's shortest walltime whose
    worker has a ``--lifetime`` under it (docs/hpc.md's recipe: it retires before SLURM
    ends the job, a live worker fetches its partitions, nothing is reloaded); one at the
    same walltime without it (SLURM kills it: a loss, its partitions reloaded)."""
    slurm = jobs.slurm
    jobs.start(1)
    retiring = jobs.add(walltime=WALLTIME, worker_extra_args=LIFETIME)
    killed = jobs.add(walltime=WALLTIME)
    jobs.wait_for(lambda: jobs.n_workers() == 3, "3 workers joining")
    worker = jobs.workers_by_job()
    slow = sorted(worker.values()).index(worker[killed])  # the runs' worker index
    with pytest.warns(StraggleWarning) as warned:
        res = run_pca(jobs, tmp_path / "run.ckpt", min_workers=3, stragglers=slow_only(slow),
                      max_iter=MAX_ITER)
    jobs.wait_for(lambda: slurm.job_state(killed) != "RUNNING", f"job {killed} ending")
    states = {job: slurm.job_state(job) for job in (retiring, killed)}
    # the worker with a lifetime left before the walltime; the other reached it
    assert states == {retiring: "COMPLETED", killed: "TIMEOUT"}, states
    moves = res.attrs["worker_losses"]
    kinds = loss_kinds(res)
    assert kinds[0] == "retired" and set(kinds[1:]) == {"lost"}, moves
    assert moves[0]["lost"] == worker[retiring] and moves[0]["reloaded"] == [], moves
    lost = moves[1:]
    assert {move["lost"] for move in lost} == {worker[killed]}, moves
    assert any(move["reloaded"] for move in lost), moves  # its own partitions, from the source
    said = [str(w.message) for w in warned if issubclass(w.category, StraggleWarning)]
    assert any(f"{worker[retiring]} is retiring" in m for m in said), said
    assert any(f"{worker[killed]} left the cluster" in m for m in said), said
    assert_same_answer(res, clean_run(MAX_ITER))
