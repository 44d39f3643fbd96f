"""Jobs that reach their walltime, as dask-jobqueue users meet it (``docs/hpc.md``).

One run on three SLURMCluster jobs of the ``slurm`` fixture's SLURM: one job for the whole
run; one at SLURM's shortest walltime whose worker has a ``--lifetime`` well under it (the
recipe of ``docs/hpc.md``: the worker retires before SLURM ends the job, and a live worker
fetches its partitions, so nothing is reloaded); one at the same walltime without
``--lifetime`` (SLURM kills it: a loss, its partitions reloaded from the source). The run
ends on the answer of the same run in this process. In its own module so that pytest-xdist
runs its ~2 minutes beside other files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _slurm_jobs import assert_same_answer, clean_run, loss_kinds, open_jobs, run_pca

from daskstraggle.errors import StraggleWarning

pytestmark = [pytest.mark.slurm, pytest.mark.cluster]

#: SLURM's shortest walltime (it counts in minutes). slurmctld ends a job past its limit at
#: its next check (every 30 s) and kills it KillWait (5 s, conftest) after the SIGTERM: the
#: job ends 60-95 s after it started.
WALLTIME = "00:01:00"
#: The retiring worker's lifetime: under the walltime, and after the run started (its
#: three workers join within seconds of each other).
LIFETIME = ["--lifetime", "25s", "--lifetime-stagger", "0s"]
#: Rounds of at least 0.3 s (each task sleeps 0.3 s): 330 of them outlast the killed job
#: (the run starts once its worker joined, at most 95 s before SLURM kills it).
STRAGGLERS = "gamma(mean=0.3, var=1e-6)"
MAX_ITER = 330


def test_a_job_at_its_walltime_retires_with_lifetime_and_is_lost_without(
        slurm: Any, tmp_path: Path):
    with open_jobs(slurm, tmp_path) as jobs:
        jobs.start(1)
        retiring = jobs.add(walltime=WALLTIME, worker_extra_args=LIFETIME)
        killed = jobs.add(walltime=WALLTIME)
        jobs.wait_for(lambda: jobs.n_workers() == 3, "3 workers joining")
        worker = jobs.workers_by_job()
        with pytest.warns(StraggleWarning) as warned:
            res = run_pca(jobs, tmp_path / "run.ckpt", min_workers=3, stragglers=STRAGGLERS,
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
