"""daskstraggle on a real one-node SLURM (the ``slurm`` fixture of ``conftest.py``).

The faults a batch system makes are in ``test_slurm_faults.py``.

The workers are real ``dask worker`` processes started by dask-jobqueue's ``SLURMCluster``
as SLURM batch jobs. Every wait is bounded and fails in one line naming the logs.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.cluster]

#: Seconds a job may take to start and its worker to join (a busy machine starts Python
#: processes slowly), and the cluster's jobs to leave the queue when it closes.
JOB_TIMEOUT = 120


def test_ci_runs_the_slurm_tests(slurm_reason: str | None) -> None:
    """With ``CI=true`` (CI runs as root, after ``.ci/run`` installed slurm-wlm and munge)
    the SLURM tests must run: SLURM must be startable, never a skip."""
    if os.environ.get("CI", "").lower() != "true":
        if slurm_reason is not None:
            pytest.skip(slurm_reason)
        return
    assert slurm_reason is None, f"CI=true, yet the SLURM tests would skip: {slurm_reason}"


def test_a_batch_job_runs_on_the_node(slurm: Any, tmp_path: Path) -> None:
    assert slurm.node_state() == "idle"
    out = tmp_path / "hostname.out"
    job = slurm.run("sbatch", "--parsable", f"--chdir={tmp_path}", f"--output={out}",
                    "--wrap", "hostname").strip().split(";")[0]
    slurm.wait_for(lambda: job not in slurm.jobs() and out.exists(),
                   f"job {job} (sbatch --wrap hostname) ending", JOB_TIMEOUT)
    assert out.read_text().strip().split(".")[0] == slurm.node


def _aligned(components: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``components`` with each row's sign flipped to match ``reference``'s."""
    signs = np.sign(np.sum(components * reference, axis=1))
    return components * signs[:, None]


def test_fit_pca_on_slurmcluster_jobs_is_exact(slurm: Any, tmp_path: Path) -> None:
    """Two one-core SLURM jobs, each running a ``dask worker``: a block PCA on them ends on
    numpy's SVD and on the in-process run of the same method (to 1e-8)."""
    from distributed import Client

    from daskstraggle import fit_pca

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 8)) * np.linspace(4.0, 1.0, 8)

    cluster = slurm.dask_cluster(tmp_path)
    client = Client(cluster, set_as_default=False)
    job_ids: list[str] = []
    try:
        cluster.scale(jobs=2)
        try:
            client.wait_for_workers(2, timeout=JOB_TIMEOUT)
        except TimeoutError:
            pytest.fail(f"SLURMCluster: 2 workers did not join within {JOB_TIMEOUT} s "
                        f"(queue: {slurm.jobs()}; job logs in {tmp_path / 'logs'}, SLURM's "
                        f"in {slurm.root / 'log'})", pytrace=False)
        job_ids = sorted(str(job.job_id) for job in cluster.workers.values())
        assert len(job_ids) == 2
        # the workers run inside those jobs, which SLURM runs
        # (a lambda: a pickled os.environ.get would carry this process's environment)
        in_job = client.run(lambda: os.environ.get("SLURM_JOB_ID"))
        assert sorted(map(str, in_job.values())) == job_ids, in_job
        queue = slurm.jobs()
        assert all(queue.get(job) == "RUNNING" for job in job_ids), queue

        res = fit_pca(X, 2, client=client, method="block", rng=0)
        assert not res.attrs.get("worker_losses")
        assert sorted(queue) == sorted(slurm.jobs())  # the same jobs ran it all along
    finally:
        client.close()
        cluster.close(timeout=JOB_TIMEOUT)
    slurm.wait_for(lambda: not set(job_ids) & set(slurm.jobs()),
                   "the SLURMCluster's jobs leaving the queue", JOB_TIMEOUT)

    local = fit_pca(X, 2, runtime="local", n_workers=2, method="block", rng=0)
    assert res.converged and res.n_iter == local.n_iter
    np.testing.assert_allclose(res.fitted["components"], local.fitted["components"],
                               atol=1e-8)
    vt = np.linalg.svd(X - X.mean(axis=0), full_matrices=False)[2][:2]
    np.testing.assert_allclose(_aligned(res.fitted["components"], vt), vt, atol=1e-8)


def _page_block(marker: str) -> str:
    """The code block of docs/hpc.md that contains ``marker``."""
    page = (Path(__file__).parents[2] / "docs" / "hpc.md").read_text()
    blocks = re.findall(r"```(?:bash|python)\n(.*?)```", page, flags=re.S)
    (block,) = [b for b in blocks if marker in b]
    return block


def _replaced(text: str, replacements: dict[str, str]) -> str:
    """``text`` with each key replaced by its value (each key must occur)."""
    for old, new in replacements.items():
        assert old in text, f"docs/hpc.md no longer says {old!r}: update the test"
        text = text.replace(old, new)
    return text


def test_a_whole_run_as_one_batch_job_with_a_scheduler_file(slurm: Any, tmp_path: Path) -> None:
    """docs/hpc.md's batch job, as the page gives it but sized for this node: one ``sbatch``
    script starts a scheduler and two workers with a scheduler file and runs ``daskstraggle
    pca --scheduler-file`` on them; the answer is the in-process run's."""
    import zarr

    from daskstraggle import fit_pca
    from daskstraggle.trace import Result

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 8)) * np.linspace(4.0, 1.0, 8)
    zarr.create_array(tmp_path / "x.zarr", data=X, chunks=(100, 8))
    script = tmp_path / "pca.sbatch"
    script.write_text(_replaced(_page_block("#SBATCH"), {
        "--ntasks=17": "--ntasks=3 --overcommit", "--ntasks=16": "--ntasks=2",
        # any free ports: other clusters run on this machine
        "dask scheduler": "dask scheduler --port 0 --dashboard-address 127.0.0.1:0",
        "/scratch/me/geno.vcz -k 10": "x.zarr -k 2", "--min-workers 16": "--min-workers 2",
        "/scratch/me/pca.zarr": "r.zarr"}))
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    job = slurm.run("sbatch", "--parsable", f"--chdir={tmp_path}", f"--export=ALL,PATH={path}",
                    f"--output={tmp_path / 'job.out'}", str(script)).strip().split(";")[0]
    slurm.wait_for(lambda: job not in slurm.jobs(), f"the batch job {job} ending", JOB_TIMEOUT)
    log = (tmp_path / "job.out").read_text()
    assert (tmp_path / "r.zarr").exists(), log
    res = Result.load(tmp_path / "r.zarr")
    assert res.attrs["runtime"] == "dask" and len(res.attrs["workers"]) == 2
    local = fit_pca(X, 2, runtime="local", n_workers=2, method="block", rng=0)
    np.testing.assert_allclose(res.fitted["components"], local.fitted["components"],
                               atol=1e-8)


def test_the_hpc_page_runs_on_slurm(slurm: Any, tmp_path: Path, vcz_path: Path) -> None:
    """docs/hpc.md's blocks, as the page gives them but sized for this node (one-core jobs,
    two of them) and with this machine's paths: ``cluster.py`` starts a SLURMCluster and
    keeps it up; the Python block and the command line run a block PCA of a VCF Zarr store
    on its jobs, and the resume block carries on from the checkpoint the command left;
    Ctrl-C to ``cluster.py`` cancels the jobs."""
    import signal
    import subprocess

    bin_dir = Path(sys.executable).parent
    env = {**os.environ, **slurm.env, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    sized = {"/scratch/me/geno.vcz": str(vcz_path), "/scratch/me/": f"{tmp_path}/"}
    (tmp_path / "cluster.py").write_text(_replaced(_page_block("# cluster.py"), {
        "cores=4, processes=4": "cores=1, processes=1", '"16GB"': '"1GB"',
        "~/venvs/pca/bin/activate": str(bin_dir / "activate"),
        "minimum_jobs=4, maximum_jobs=4": "minimum_jobs=2, maximum_jobs=2"}))
    cluster = subprocess.Popen([sys.executable, "cluster.py"], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    address = tmp_path / "scheduler-address"
    try:
        slurm.wait_for(lambda: address.exists() or cluster.poll() is not None,
                       "cluster.py writing scheduler-address", JOB_TIMEOUT)
        assert cluster.poll() is None, cluster.communicate()[0]
        (tmp_path / "fit.py").write_text(_replaced(_page_block("ds.fit_pca("), {
            **sized, '", 10,': '", 3,', "min_workers=16": "min_workers=2"}))
        python_block = subprocess.run([sys.executable, "fit.py"], cwd=tmp_path, env=env,
                                      capture_output=True, text=True, timeout=JOB_TIMEOUT)
        assert python_block.returncode == 0, python_block.stderr
        # the same run from the command line (its own folder: the checkpoint stays), then
        # resumed from the checkpoint it left
        (tmp_path / "cli").mkdir()
        sized["/scratch/me/"] = f"{tmp_path}/cli/"
        for marker, extra in [("--checkpoint /scratch/me/pca.ckpt", {}),
                              ("--resume /scratch/me/pca.ckpt",
                               {"--out /scratch/me/pca.zarr": "--out resumed.zarr"})]:
            command = _replaced(_page_block(marker), {
                **extra, **sized, "-k 10": "-k 3", "--min-workers 16": "--min-workers 2"})
            cli = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env,
                                 capture_output=True, text=True, timeout=JOB_TIMEOUT)
            assert cli.returncode == 0, cli.stderr
        jobs = slurm.jobs()
        assert len(jobs) == 2 and set(jobs.values()) == {"RUNNING"}, jobs
    finally:
        cluster.send_signal(signal.SIGINT)  # the page's Ctrl-C
        try:
            cluster.wait(timeout=JOB_TIMEOUT)
        except subprocess.TimeoutExpired:
            cluster.kill()
    slurm.wait_for(lambda: not slurm.jobs(), "cluster.py's jobs leaving the queue", JOB_TIMEOUT)
    from daskstraggle.trace import Result

    python_res, cli_res, resumed = (Result.load(tmp_path / name) for name in (
        "pca.zarr", "cli/pca.zarr", "resumed.zarr"))
    assert python_res.converged and cli_res.converged and resumed.converged
    assert len(python_res.attrs["workers"]) == len(cli_res.attrs["workers"]) == 2
    assert resumed.attrs["resumed_at_iteration"] == cli_res.n_iter
    for res in (cli_res, resumed):
        np.testing.assert_allclose(res.fitted["explained_variance"],
                                   python_res.fitted["explained_variance"], rtol=1e-8)
    # the page's settings for a slow queue take effect as written
    exports = _page_block("DASK_DASKSTRAGGLE__TIMEOUTS__MIN_WORKERS")
    read = ("import daskstraggle.config as c; "
            "print(c.seconds('timeouts.min-workers'), c.seconds('timeouts.no-worker'))")
    shown = subprocess.run(["bash", "-c", f"{exports}\n{sys.executable} -c \"{read}\""],
                           capture_output=True, text=True, timeout=JOB_TIMEOUT)
    assert shown.stdout.split() == ["3600.0", "1800.0"], shown
