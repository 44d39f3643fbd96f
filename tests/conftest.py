"""Shared fixtures: a process-based LocalCluster for the session, small datasets."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False, help="run slow tests")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def dask_client():
    """A LocalCluster with 3 single-threaded *process* workers, shared by the session."""
    import dask
    from distributed import Client, LocalCluster

    from daskstraggle.runtime.dask import OWN_CLUSTER_CONFIG

    with dask.config.set(OWN_CLUSTER_CONFIG):
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


@pytest.fixture(scope="session")
def load_pipeline():
    """Return a loader of a ``pipelines/<name>.py`` script as a module (they are not a package)."""
    import importlib.util
    from pathlib import Path

    def load(name: str):
        path = Path(__file__).resolve().parents[1] / "pipelines" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"pipeline_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make starting a LocalCluster or connecting a Client fail the test."""
    import distributed

    def refuse(self: Any, *args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"{type(self).__name__} created before the input was validated")

    monkeypatch.setattr(distributed.LocalCluster, "__init__", refuse)
    monkeypatch.setattr(distributed.Client, "__init__", refuse)
