"""open_matrix asks the data source backends in priority order; packages add their own."""

from __future__ import annotations

from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest
import xarray as xr

import daskstraggle
from daskstraggle import _registry, open_matrix
from daskstraggle.data import backends
from daskstraggle.data.backends import (
    OpenRequest,
    SourceBackend,
    get_source,
    guess_source,
    list_sources,
)
from daskstraggle.errors import InvalidParameterError


class NpyBackend(SourceBackend):
    """What another package would ship: ``.npy`` files, read whole on the client."""

    name = "npy"
    description = "a numpy .npy file"
    parameters = ("chunk_rows",)

    @classmethod
    def guess_can_open(cls, source: Any) -> bool:
        return isinstance(source, str | Path) and str(source).endswith(".npy")

    @classmethod
    def open(cls, source: Any, request: OpenRequest):
        return get_source("array").open(np.load(source), request)


@pytest.fixture
def with_npy_plugin(monkeypatch):
    group = "daskstraggle.sources"
    point = EntryPoint(name="npy", value=f"{__name__}:NpyBackend", group=group)
    monkeypatch.setattr(_registry, "entry_points",
                        lambda *, group: [point] if group == "daskstraggle.sources" else [])
    registry = _registry.Registry("data source", group=group, unknown=backends._unknown_source)
    for name in ("array", "matrix", "plink", "pgen", "bgen", "vcf-dataset", "zarr"):
        registry.register(get_source(name))
    monkeypatch.setattr(backends, "_REGISTRY", registry)


def test_the_built_in_backends_are_asked_in_priority_order():
    assert list_sources() == ["matrix", "plink", "pgen", "bgen", "vcf-dataset", "zarr", "array"]
    X = np.ones((6, 2))
    ds = xr.Dataset({"call_genotype": (("variants", "samples", "ploidy"),
                                       np.zeros((3, 2, 2), dtype=np.int8))})
    cases = {
        "array": [X, da.ones((6, 2)), xr.DataArray(X), [[1.0, 2.0]]],
        "matrix": [open_matrix(X)],
        "plink": ["data/x.bed", Path("x.BED")],
        "pgen": ["data/x.pgen", Path("x.PGEN")],
        "bgen": ["data/x.bgen", Path("x.BGEN")],
        "zarr": ["store.zarr", Path("anything"), "s3://bucket/x.zarr"],
        "vcf-dataset": [ds],
    }
    for name, sources in cases.items():
        for source in sources:
            assert guess_source(source).name == name, source


def test_a_backend_advertised_by_entry_point_reads_its_files(with_npy_plugin, tmp_path):
    assert list_sources() == ["matrix", "plink", "pgen", "bgen", "vcf-dataset", "npy", "zarr",
                            "array"]
    X = np.random.default_rng(0).normal(size=(40, 3))
    np.save(tmp_path / "x.npy", X)
    matrix = open_matrix(str(tmp_path / "x.npy"), n_partitions=2)
    assert matrix.shape == (40, 3) and matrix.n_partitions == 2
    res = daskstraggle.fit_least_squares(str(tmp_path / "x.npy"), X @ [1.0, 2.0, 3.0],
                                         runtime="local", n_workers=2, method="gd",
                                         max_iter=400, tol=1e-10)
    np.testing.assert_allclose(res.iterate, [1.0, 2.0, 3.0, 0.0], atol=1e-6)  # + intercept
    # named explicitly, it must read the source
    assert open_matrix(X, backend="array").shape == (40, 3)
    with pytest.raises(InvalidParameterError, match="names 'npy', which does not read a ndarray"):
        open_matrix(X, backend="npy")


def test_unknown_backends_and_options_a_backend_does_not_read_are_one_line():
    with pytest.raises(InvalidParameterError, match="must be one of 'array', 'bgen', "
                                                    "'matrix', 'pgen', 'plink', 'vcf-dataset', "
                                                    "'zarr' or "
                                                    "None"):
        open_matrix(np.ones((4, 2)), backend="hdf5")
    with pytest.raises(InvalidParameterError, match="applies to a store given by URL; the "
                                                    "source is a Matrix"):
        open_matrix(open_matrix(np.ones((4, 2))), storage_options={"anon": True})
    for name in list_sources():
        cls = get_source(name)
        assert cls.description and isinstance(cls.parameters, tuple), name
