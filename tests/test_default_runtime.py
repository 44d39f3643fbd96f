"""The default runtime (issue 43, item 4b): Dask's convention, decided in one place.

``runtime=None``: the Dask runtime on a client, scheduler, ``n_workers`` or an option only
it takes; on the active ``distributed`` client when there is one; else in process when the
data fit comfortably in memory, else a LocalCluster. The same for the command line and the
estimators, which say which runtime ran and why.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import daskstraggle.runtime.choice as choice_module
import daskstraggle.runtime.dask as dask_runtime
from daskstraggle import fit_pca
from daskstraggle.cli import main
from daskstraggle.latency.spec import parse_stragglers
from daskstraggle.runtime.choice import (
    IN_PROCESS_MEMORY_FRACTION,
    active_client,
    choose_runtime,
)

X = np.random.default_rng(0).normal(size=(120, 6)) * [5, 3, 1, 1, 1, 1]
#: What the in-process runtime holds of X (float64).
X_BYTES = X.size * 8


class ClusterAsked(Exception):
    """Raised in place of connecting to (or starting) a cluster: the run chose Dask."""


@pytest.fixture
def cluster_asked(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Make the Dask runtime's connection raise ClusterAsked, recording what it asked."""
    asked: list[dict[str, Any]] = []

    def connect(client: Any, **kw: Any) -> Any:
        asked.append({"client": client, **kw})
        raise ClusterAsked

    monkeypatch.setattr(dask_runtime, "connect", connect)
    return asked


@pytest.fixture
def threads_client() -> Any:
    """An active default client on a LocalCluster of two threads (no processes)."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        yield client


# ----------------------------------------------------------------------------- the rule
def test_a_runtime_given_wins_whatever_the_data():
    assert choose_runtime("local", data_bytes=10**15, available=10**9).runtime == "local"
    dask = choose_runtime("dask", data_bytes=1, available=10**9)
    assert (dask.runtime, dask.client, dask.reason) == ("dask", None, None)
    assert choose_runtime("sim", n_workers=3).runtime == "sim"


def test_small_data_run_in_process_and_large_data_on_a_local_cluster():
    free = 10**9
    fits = IN_PROCESS_MEMORY_FRACTION * free
    small = choose_runtime(None, data_bytes=int(fits), available=free)
    assert (small.runtime, small.client) == ("local", None)
    assert small.reason == ("default: data fit in memory (250 MB of 1.0 GB available), "
                            "no client")
    large = choose_runtime(None, data_bytes=int(fits) + 1, available=free)
    assert (large.runtime, large.client) == ("dask", None)
    assert large.reason.startswith("default: data larger than 1/4 of the memory available")
    assert large.reason.endswith("a LocalCluster")


def test_the_data_decide_only_once_known():
    assert choose_runtime(None).runtime is None
    assert choose_runtime(None, n_workers=2).runtime == "dask"


@pytest.mark.parametrize(("asked", "why"), [
    ({"client": object()}, "default: the client given"),
    ({"scheduler": "tcp://127.0.0.1:8786"}, "default: the scheduler given"),
    ({"n_workers": 2}, "default: n_workers given (CLI: --workers): a LocalCluster"),
    ({"stragglers": parse_stragglers("slowdown(workers=1, factor=4)")},
     "default: stragglers needs worker processes: a LocalCluster"),
    ({"backup_after": 3.0}, "default: backup_after needs worker processes: a LocalCluster"),
    ({"aggregation": "tree"},
     "default: aggregation='tree' needs worker processes: a LocalCluster"),
    ({"min_workers": 2}, "default: min_workers needs worker processes: a LocalCluster"),
])
def test_a_cluster_asked_for_means_the_dask_runtime_even_for_small_data(asked, why):
    chosen = choose_runtime(None, **asked, data_bytes=1, available=10**12)
    assert (chosen.runtime, chosen.reason) == ("dask", why)
    assert chosen.client is asked.get("client")


def test_the_active_client_is_used_for_any_data(threads_client):
    for size in (1, 10**15):
        chosen = choose_runtime(None, data_bytes=size, available=10**9)
        assert (chosen.runtime, chosen.client) == ("dask", threads_client)
        assert chosen.reason == "default: the active distributed client"
    assert choose_runtime("dask").client is threads_client  # "dask" by name: the same
    # workers asked for: a LocalCluster of them, not the active client
    assert choose_runtime(None, n_workers=2).client is None
    assert choose_runtime("local").client is None


def test_the_active_client_is_not_looked_for_without_distributed():
    code = ("import sys; from daskstraggle.runtime.choice import active_client; "
            "assert active_client() is None; assert 'distributed' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_no_active_client_once_it_closed():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster:
        client = Client(cluster)
        assert active_client() is client
        client.close()
        assert active_client() is None


# -------------------------------------------------------------------- the fit functions
def test_a_fit_on_small_data_runs_in_process_and_says_why(no_cluster):
    res = fit_pca(X, 2, rng=0)
    assert res.attrs["runtime"] == "local"
    assert res.attrs["runtime_reason"].startswith("default: data fit in memory (5.8 kB of ")
    given = fit_pca(X, 2, rng=0, runtime="local")
    assert "runtime_reason" not in given.attrs
    np.testing.assert_array_equal(res.fitted["components"], given.fitted["components"])


def test_a_fit_in_a_fresh_process_imports_no_distributed():
    code = ("import sys, numpy as np; from daskstraggle import fit_pca; "
            "X = np.random.default_rng(0).normal(size=(50, 4)); r = fit_pca(X, 2, rng=0); "
            "assert r.attrs['runtime'] == 'local', r.attrs['runtime']; "
            "assert 'distributed' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_a_fit_on_data_too_large_for_memory_starts_a_local_cluster(monkeypatch, cluster_asked):
    monkeypatch.setattr(choice_module, "available_memory",
                        lambda: int(X_BYTES / IN_PROCESS_MEMORY_FRACTION) - 1)
    with pytest.raises(ClusterAsked):
        fit_pca(X, 2, rng=0)
    assert [(asked["client"], asked["n_workers"]) for asked in cluster_asked] == [(None, None)]
    monkeypatch.setattr(choice_module, "available_memory",
                        lambda: int(X_BYTES / IN_PROCESS_MEMORY_FRACTION))
    assert fit_pca(X, 2, rng=0).attrs["runtime"] == "local"  # just fits


@pytest.mark.parametrize("asked", [{"n_workers": 2}, {"runtime": "dask"},
                                   {"stragglers": "slowdown(workers=1, factor=2)"}])
def test_workers_or_the_dask_runtime_asked_for_start_a_local_cluster(cluster_asked, asked):
    with pytest.raises(ClusterAsked):
        fit_pca(X, 2, rng=0, **asked)
    assert cluster_asked[0]["client"] is None
    assert cluster_asked[0]["n_workers"] == asked.get("n_workers")


def test_a_fit_runs_on_the_active_client(threads_client):
    res = fit_pca(X, 2, rng=0)
    assert res.attrs["runtime"] == "dask"
    assert res.attrs["runtime_reason"] == "default: the active distributed client"
    assert sorted(res.attrs["workers"]) == sorted(threads_client.scheduler_info()["workers"])


def test_the_size_is_that_of_the_storage_the_run_holds(monkeypatch, vcz_path, cluster_asked):
    """Genotypes held as int8 take one byte a call, packed ones a quarter (known from the
    store's metadata): with memory between the two, packed runs in process."""
    from daskstraggle import open_matrix

    int8 = open_matrix(vcz_path)
    packed = open_matrix(vcz_path, genotype_storage="packed")
    assert packed.row_nbytes < int8.row_nbytes
    between = (packed.n_rows * packed.row_nbytes + int8.n_rows * int8.row_nbytes) // 2
    monkeypatch.setattr(choice_module, "available_memory",
                        lambda: int(between / IN_PROCESS_MEMORY_FRACTION))
    assert fit_pca(packed, 2, rng=0).attrs["runtime"] == "local"
    with pytest.raises(ClusterAsked):
        fit_pca(int8, 2, rng=0)


# ------------------------------------------------------ the command line and estimators
def test_the_command_line_runs_small_data_in_process_and_says_why(no_cluster, tmp_path,
                                                                  capsys):
    import zarr

    zarr.save_array(str(tmp_path / "x.zarr"), X)
    assert main(["pca", str(tmp_path / "x.zarr"), "-k", "2", "--quiet"]) == 0
    table = capsys.readouterr().out
    assert "local runtime with 4 workers" in table
    assert "\nruntime     local (default: data fit in memory (" in table
    assert main(["pca", str(tmp_path / "x.zarr"), "-k", "2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["runtime"] == "local"
    assert summary["runtime_reason"].startswith("default: data fit in memory")


def test_the_command_line_starts_a_local_cluster_for_workers(cluster_asked, tmp_path):
    import zarr

    zarr.save_array(str(tmp_path / "x.zarr"), X)
    for flags in (["--workers", "2"], ["--runtime", "dask"]):
        with pytest.raises(ClusterAsked):
            main(["pca", str(tmp_path / "x.zarr"), "-k", "2", "--quiet", *flags])
    assert [asked["n_workers"] for asked in cluster_asked] == [2, None]


def test_an_estimator_fits_small_data_in_process(no_cluster):
    from daskstraggle import PCA

    pca = PCA(2, random_state=0).fit(X)
    assert pca.result_.attrs["runtime"] == "local"
    assert pca.result_.attrs["runtime_reason"].startswith("default: data fit in memory")
    assert pca.transform(X).shape == (120, 2)
