"""``--scheduler-file`` / ``scheduler_file=``: the cluster a batch job describes in the JSON
file that ``dask scheduler --scheduler-file`` writes; and the dashboard's address, printed
once when a run starts on a cluster.

Real processes: a ``dask scheduler`` and a ``dask worker`` started with a scheduler file,
the CLI as a user types it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest
import zarr

from daskstraggle import fit_pca
from daskstraggle.cli import main
from daskstraggle.errors import InvalidParameterError
from daskstraggle.testing import one_error_line
from daskstraggle.trace import Result

pytestmark = pytest.mark.cluster

#: Seconds a started process may take to reach a state the test waits for.
START = 120

X = np.random.default_rng(0).normal(size=(400, 6)) * np.linspace(3.0, 1.0, 6)


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "x.zarr"
    zarr.create_array(path, data=X, chunks=(100, 6))
    return path


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "daskstraggle", *args], capture_output=True,
                          text=True, timeout=START, env=env)


def test_a_run_on_the_cluster_a_scheduler_file_names(store, tmp_path):
    # the file appears after the command started (the batch job's scheduler is slower)
    sfile = tmp_path / "scheduler.json"
    dask = [sys.executable, "-m"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    cli = subprocess.Popen(
        [sys.executable, "-m", "daskstraggle", "pca", str(store), "-k", "2",
         "--scheduler-file", str(sfile), "--min-workers", "2", "--out", str(tmp_path / "r.zarr")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    assert cli.poll() is None, cli.communicate()  # waiting for the file
    procs = [subprocess.Popen([*dask, "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                               "--port", "0", "--scheduler-file", str(sfile)], **quiet)]
    procs += [subprocess.Popen([*dask, "distributed.cli.dask_worker", "--scheduler-file",
                                str(sfile), "--nthreads", "1", "--no-nanny"], **quiet)
              for _ in range(2)]
    try:
        out, err = cli.communicate(timeout=START)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert cli.returncode == 0, err
    assert "runtime     dask (default: the scheduler file given)" in out, out
    # the dashboard's address, once, on the scheduler's host
    assert err.count("Dask dashboard: http://127.0.0.1:") == 1, err
    result = Result.load(tmp_path / "r.zarr")
    assert result.converged and len(result.attrs["workers"]) == 2
    assert json.loads(sfile.read_text())["address"].startswith("tcp://127.0.0.1:")
    local = fit_pca(X, 2, runtime="local", n_workers=2, rng=0)
    np.testing.assert_allclose(result.fitted["explained_variance"],
                               local.fitted["explained_variance"], rtol=1e-8)


def test_a_scheduler_file_that_never_appears_is_one_bounded_line(store, tmp_path):
    sfile = tmp_path / "scheduler.json"
    env = {**__import__("os").environ, "DASK_DASKSTRAGGLE__TIMEOUTS__SCHEDULER_FILE": "1s"}
    done = _cli("pca", str(store), "--scheduler-file", str(sfile), env=env)
    assert done.returncode == 2, done
    assert one_error_line(done.stderr) == (
        f"error: The scheduler file (CLI: --scheduler-file) {str(sfile)!r} did not appear "
        f"within 1 s (the daskstraggle.timeouts.scheduler-file setting); start the scheduler "
        f"with 'dask scheduler --scheduler-file {sfile}', or check the path.")


@pytest.mark.parametrize("content", ["", "not json", "[1, 2]", '{"address": ""}',
                                     '{"type": "Scheduler"}'])
def test_a_scheduler_file_without_an_address_is_one_line(store, tmp_path, capsys, content):
    sfile = tmp_path / "scheduler.json"
    sfile.write_text(content)
    assert main(["pca", str(store), "--scheduler-file", str(sfile)]) == 2
    assert one_error_line(capsys.readouterr().err).startswith(
        f"error: The scheduler file (CLI: --scheduler-file) {str(sfile)!r} holds no scheduler "
        "address (a JSON object with \"address\"")


def test_a_scheduler_file_in_a_missing_folder_is_refused_at_once(store, tmp_path, capsys):
    sfile = tmp_path / "nowhere" / "scheduler.json"
    t0 = time.monotonic()
    assert main(["pca", str(store), "--scheduler-file", str(sfile)]) == 2
    assert time.monotonic() - t0 < 60  # not the 120 s wait (a bound, not a timing)
    assert "is in a folder that does not exist" in one_error_line(capsys.readouterr().err)


def test_a_scheduler_file_with_another_cluster_is_refused(tmp_path):
    with pytest.raises(InvalidParameterError, match="Pass only one of client, address"):
        fit_pca(X, 2, scheduler="tcp://127.0.0.1:8786", scheduler_file=tmp_path / "s.json")


def test_the_dashboard_of_a_cluster_it_starts_is_printed_once_on_this_machine(capsys, store):
    fit_pca(X, 2, n_workers=2, rng=0, progress=True)
    lines = [line for line in capsys.readouterr().err.splitlines() if "dashboard" in line]
    assert len(lines) == 1 and lines[0].startswith("Dask dashboard: http://127.0.0.1:"), lines
    # --quiet (no progress) silences it, as the API's progress=False does
    assert main(["pca", str(store), "-k", "2", "--workers", "2", "--quiet"]) == 0
    assert "dashboard" not in capsys.readouterr().err
