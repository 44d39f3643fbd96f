"""Checkpoint and resume: the same answer as an uninterrupted run, never a broken file.

In process (the local runtime is deterministic, so every method must resume to the very
iterates of an uninterrupted run), then with real processes: a CLI run on a LocalCluster
killed with SIGKILL and resumed, and a writer killed at random instants mid-write.
"""

from __future__ import annotations

import os
import pickle
import re
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

from daskstraggle import Result, fit_logistic, fit_pca
from daskstraggle.cli import main
from daskstraggle.errors import (
    DataNotFoundError,
    InvalidDataError,
    InvalidParameterError,
    OutputExistsError,
)
from daskstraggle.runtime.checkpoint import Checkpointer, load_checkpoint


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 8)) * np.arange(8, 0, -1)
    y = (X[:, 0] + rng.normal(size=400) > 0).astype(float)
    return X, y


X, Y = _data()
CASES = [
    ("gd", fit_pca, {}),
    ("block", fit_pca, {}),
    ("gram", fit_pca, {}),
    ("coded", fit_pca, {"method_params": {"scheme": "cyclic-repetition", "rng": 0}}),
    ("partial", fit_pca, {"method_params": {"rng": 0}}),
    ("ignore-stragglers", fit_pca, {}),
    ("nag", fit_logistic, {"labels": Y}),
    ("sgd", fit_logistic, {"labels": Y}),
    ("dsag", fit_logistic, {"labels": Y, "method_params": {"n_wait": 2, "subpartitions": 2}}),
    ("async", fit_logistic, {"labels": Y}),
]


@pytest.mark.parametrize(("method", "fit", "kwargs"), CASES, ids=[c[0] for c in CASES])
def test_a_resumed_run_ends_where_an_uninterrupted_one_does(tmp_path, method, fit, kwargs):
    common = {"method": method, "runtime": "local", "n_workers": 3, "rng": 1, "tol": None,
              **kwargs}
    full = fit(X, max_iter=10, **common)
    ck = tmp_path / "run.ckpt"
    first = fit(X, max_iter=4, checkpoint=ck, checkpoint_iterations=1, **common)
    assert first.attrs["checkpoint"]["last_iteration"] == 4
    resumed = fit(X, max_iter=10, resume=ck, **common)
    assert resumed.attrs["resumed_at_iteration"] == 4
    assert resumed.n_iter == full.n_iter == 10
    if method == "coded":
        # decoded from another set of workers' messages than in the uninterrupted run
        # (there a straggler was still busy with the previous round): equal to rounding
        np.testing.assert_allclose(resumed.iterate, full.iterate, rtol=0, atol=1e-13)
    else:
        np.testing.assert_array_equal(resumed.iterate, full.iterate)
    # the trace goes on: the first rows are the interrupted run's, time keeps increasing
    objective = resumed.trace["objective"].values
    np.testing.assert_array_equal(objective[:4], first.trace["objective"].values)
    assert np.all(np.diff(resumed.trace["wall_time"].values) >= 0)
    # and it kept writing to the same file
    assert load_checkpoint(ck)["iteration"] == 10


def test_a_checkpoint_is_written_every_interval_and_records_its_cost(tmp_path):
    ck = tmp_path / "a.ckpt"
    res = fit_pca(X, 2, method="gd", runtime="local", n_workers=2, rng=0, tol=None,
                  max_iter=30, checkpoint=ck, checkpoint_interval=3600)
    info = res.attrs["checkpoint"]
    # an hour never passes: only the one written when the run stops
    assert info["n_written"] == 1 and info["last_iteration"] == 30
    assert info["write_seconds"] > 0
    state = load_checkpoint(ck)
    assert state["stepped"] is False and state["settings"]["method"][0] == "gd"


def test_resuming_a_finished_run_needs_more_iterations(tmp_path):
    ck = tmp_path / "a.ckpt"
    fit_pca(X, 2, method="gd", runtime="local", rng=0, tol=None, max_iter=5, checkpoint=ck)
    with pytest.raises(InvalidParameterError, match="holds 5 iterations already, and max_iter "
                       r"is 5: pass a larger max_iter \(CLI: --max-iter\)"):
        fit_pca(X, 2, method="gd", runtime="local", rng=0, tol=None, max_iter=5, resume=ck)


@pytest.mark.parametrize(("change", "match"), [
    ({"method": "block"}, "another method"),
    ({"n_components": 3}, "another problem"),
    ({"n_workers": 3}, "another number of workers"),
    ({"X": X[:300]}, "another matrix shape"),
    ({"X": X * 2.0}, "The data differ from those of the run that wrote the checkpoint"),
    ({"step_size": 0.5}, "The checkpoint's run used step_size=1; resume without one"),
])
def test_a_checkpoint_of_another_run_is_refused(tmp_path, change, match):
    ck = tmp_path / "a.ckpt"
    base = {"X": X, "n_components": 2, "method": "gd", "n_workers": 2}
    fit_pca(**base, runtime="local", rng=0, tol=None, max_iter=3, checkpoint=ck)
    error = InvalidDataError if "differ" in match else InvalidParameterError
    with pytest.raises(error, match=match):
        fit_pca(**{**base, **change}, runtime="local", rng=0, tol=None, max_iter=6, resume=ck)


def test_bad_checkpoint_arguments_are_one_line_before_any_work(tmp_path):
    ck = tmp_path / "a.ckpt"
    ck.write_bytes(b"precious")
    # not a checkpoint: never suggest resuming from it
    with pytest.raises(OutputExistsError, match="exists already and is a file, not a "
                       "daskstraggle checkpoint; choose another path") as info:
        fit_pca(X, 2, runtime="local", checkpoint=ck)
    assert "--resume" not in str(info.value)
    assert ck.read_bytes() == b"precious"
    real = tmp_path / "real.ckpt"
    Checkpointer(real).write({"iterate": 1}, iteration=1)
    with pytest.raises(OutputExistsError, match="exists already: continue that run with "
                       "--resume"):
        fit_pca(X, 2, runtime="local", checkpoint=real)
    with pytest.raises(InvalidDataError, match="is not a daskstraggle checkpoint"):
        fit_pca(X, 2, runtime="local", resume=ck)
    other = tmp_path / "b.ckpt"
    other.write_bytes(pickle.dumps({"something": "else"}))
    with pytest.raises(InvalidDataError, match="is not a daskstraggle checkpoint"):
        fit_pca(X, 2, runtime="local", resume=other)
    with pytest.raises(DataNotFoundError, match="No checkpoint at"):
        fit_pca(X, 2, runtime="local", resume=tmp_path / "none.ckpt")
    with pytest.raises(InvalidParameterError, match=r"'checkpoint_iterations' parameter \(CLI: "
                       r"--checkpoint-iterations\) needs a checkpoint file"):
        fit_pca(X, 2, runtime="local", checkpoint_iterations=3)
    with pytest.raises(InvalidParameterError, match="checkpoint_interval"):
        fit_pca(X, 2, runtime="local", checkpoint=tmp_path / "c.ckpt", checkpoint_interval=0)
    with pytest.raises(InvalidParameterError, match="is also the result's path"):
        fit_pca(X, 2, runtime="local", checkpoint=tmp_path / "r.zarr", out=tmp_path / "r.zarr")


def test_a_checkpoint_inside_the_input_store_is_refused(tmp_path):
    import zarr

    path = tmp_path / "x.zarr"
    zarr.create_array(path, data=X, chunks=(100, 8))
    with pytest.raises(InvalidParameterError, match=r"The checkpoint path \(CLI: --checkpoint\) "
                       ".* lies inside the input store"):
        fit_pca(str(path), 2, runtime="local", checkpoint=path / "ck")


# A process that imports once, then forks a checkpoint writer per "go" line (printing its
# pid) and reaps it on "reap" (printing "reaped"): each writer starts in milliseconds.
_WRITERS = """
import os, sys, time
import numpy as np
from daskstraggle.runtime.checkpoint import Checkpointer
child = None
for line in sys.stdin:
    if line.strip() == "reap":
        os.waitpid(child, 0)
        print("reaped", flush=True)
        continue
    child = os.fork()
    if child == 0:
        ck = Checkpointer(sys.argv[1], iterations=1)
        i = 0
        while True:
            i += 1
            big = np.full(2_000_000, float(i))  # 16 MB: a write takes a while
            ck.write({"iteration": i, "big": big}, iteration=i, now=time.monotonic())
    print(child, flush=True)
"""


def test_a_writer_killed_at_any_instant_leaves_the_old_or_the_new_checkpoint(tmp_path):
    ck = tmp_path / "run.ckpt"
    rng = np.random.default_rng(0)
    seen = []
    writers = subprocess.Popen([sys.executable, "-c", _WRITERS, str(ck)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(8):
            writers.stdin.write("go\n")
            writers.stdin.flush()
            pid = int(writers.stdout.readline())
            time.sleep(0.1 + rng.uniform(0, 0.4))
            os.kill(pid, signal.SIGKILL)
            writers.stdin.write("reap\n")
            writers.stdin.flush()
            assert writers.stdout.readline().strip() == "reaped"
            if not ck.exists():  # killed before its first write finished
                continue
            state = load_checkpoint(ck)
            assert np.all(state["big"] == state["iteration"])
            seen.append(state["iteration"])
    finally:
        writers.kill()
        writers.wait()
    assert seen, "no checkpoint was ever complete"
    # a later write removes the temporaries the killed writers left
    Checkpointer(ck, iterations=1).write({"iteration": 0}, iteration=0, now=0.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt"]


@pytest.mark.cluster
def test_a_killed_cli_run_resumes_to_the_uninterrupted_answer(tmp_path, capsys, fault_cluster):
    import zarr

    rng = np.random.default_rng(0)
    data = rng.normal(size=(6000, 10)) * np.linspace(3.0, 1.0, 10)
    path = tmp_path / "x.zarr"
    zarr.create_array(path, data=data, chunks=(1000, 10))
    args = ["pca", str(path), "-k", "3", "--method", "gd", "--tol", "1e-300", "--quiet",
            "--json"]
    ck = tmp_path / "run.ckpt"
    run = subprocess.Popen(
        [sys.executable, "-m", "daskstraggle", *args, "--workers", "3", "--max-iter", "400",
         "--checkpoint", str(ck), "--checkpoint-iterations", "3",
         "--stragglers", "gamma(mean=0.05, var=1e-6)"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.perf_counter() + 240  # a busy machine starts processes slowly
        while not (ck.exists() and load_checkpoint(ck)["iteration"] >= 6):
            if run.poll() is not None or time.perf_counter() > deadline:
                run.kill()
                pytest.fail(f"the run wrote no checkpoint at iteration 6 in 240 s: "
                            f"{run.communicate()}")
            time.sleep(0.1)
        children = psutil.Process(run.pid).children(recursive=True)
        assert len(children) >= 3  # the LocalCluster's worker processes
        run.send_signal(signal.SIGKILL)  # the client dies mid-run; its cluster with it
    finally:
        run.kill()
        run.communicate()
    _, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, f"stray processes of the killed run: {alive}"
    done = load_checkpoint(ck)["iteration"]
    assert 6 <= done < 400  # killed mid-run (however many rounds the kill took to land)
    # carried on, and compared, on another cluster of as many workers
    on = ["--scheduler", fault_cluster[0].scheduler_address]
    out_resumed, out_full = tmp_path / "resumed.zarr", tmp_path / "full.zarr"
    total = str(done + 24)  # rounds after the checkpoint's, however late the kill landed
    assert main([*args, *on, "--max-iter", total, "--resume", str(ck), "--out",
                 str(out_resumed)]) == 0
    assert main([*args, *on, "--max-iter", total, "--out", str(out_full)]) == 0
    resumed, full = Result.load(out_resumed), Result.load(out_full)
    assert resumed.attrs["resumed_at_iteration"] == done and resumed.n_iter == done + 24
    np.testing.assert_allclose(resumed.iterate, full.iterate, rtol=1e-12, atol=1e-14)
    capsys.readouterr()


def test_the_cli_refuses_an_existing_checkpoint_in_one_line(tmp_path, capsys):
    import zarr

    path = tmp_path / "x.zarr"
    zarr.create_array(path, data=X, chunks=(100, 8))
    ck = tmp_path / "run.ckpt"
    ck.write_text("someone's file")
    assert main(["pca", str(path), "--runtime", "local", "--checkpoint", str(ck)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: The checkpoint path (CLI: --checkpoint)")
    assert ck.read_text() == "someone's file"
    assert main(["pca", str(path), "--runtime", "local", "--checkpoint-interval", "5"]) == 2
    assert "needs a checkpoint file" in capsys.readouterr().err


def test_another_worker_count_is_refused_before_a_cluster_starts(tmp_path, no_cluster):
    """Resuming with --workers other than the checkpoint's used to start the cluster and
    load the data first; the count is known before, and so is the refusal."""
    ck = tmp_path / "a.ckpt"
    fit_pca(X, 2, method="gd", n_workers=2, runtime="local", rng=0, tol=None, max_iter=3,
            checkpoint=ck)
    with pytest.raises(InvalidParameterError, match=re.escape(
            "another number of workers: 2, this run has 3. Resume with the same settings "
            "(n_workers=2; CLI: --workers 2, or on a cluster --min-workers 2 with 2 workers "
            "up)")):
        fit_pca(X, 2, method="gd", n_workers=3, rng=0, tol=None, max_iter=6, resume=ck)
