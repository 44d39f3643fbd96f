"""A sample or variant with every call missing is removed with a warning, never scored 0:
found by the load's statistics (no extra pass), removed, and the run done again."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import xarray as xr

import daskstraggle as ds
from daskstraggle.api import run_on
from daskstraggle.errors import NoCallError, StraggleWarning
from daskstraggle.problems import PCA, Block, block_stats
from daskstraggle.problems._packing import pack_dosages
from daskstraggle.runtime import LocalRuntime

DEAD_SAMPLE, DEAD_VARIANT = 7, 5


def _calls(dead: bool = True) -> xr.Dataset:
    rng = np.random.default_rng(0)
    g = rng.integers(0, 2, size=(200, 30, 2)).astype(np.int8)
    g[rng.random(g.shape[:2]) < 0.05] = -1
    if dead:
        g[DEAD_VARIANT] = -1
        g[:, DEAD_SAMPLE] = -1
    return xr.Dataset({"call_genotype": (("variants", "samples", "ploidy"), g),
                       "sample_id": ("samples", np.array([f"s{j}" for j in range(30)]))})


def test_block_stats_count_calls_per_column_and_find_rows_without_any() -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(0, 3, size=(9, 6)).astype(np.int8)
    x[rng.random(x.shape) < 0.2] = -1
    x[4] = -1
    fill = np.ones(9)
    plain = block_stats(Block(x, start=100, fill=fill))
    packed = block_stats(Block(pack_dosages(x), start=100, fill=fill, packed_columns=6))
    for stats in (plain, packed):
        np.testing.assert_array_equal(stats.column_called, (x >= 0).sum(axis=0))
        assert stats.rows_without_call == (104,)
    both = plain + packed
    np.testing.assert_array_equal(both.column_called, 2 * (x >= 0).sum(axis=0))
    assert both.rows_without_call == (104, 104)
    assert block_stats(Block(rng.normal(size=(4, 3)))).column_called is None


@pytest.mark.parametrize("storage", ["int8", "packed"])
def test_fit_pca_removes_them_with_one_warning_and_fits_the_rest(storage: str) -> None:
    data = _calls()
    with pytest.warns(StraggleWarning, match=r"1 sample\(s\) \(first: \['s7'\]\) and 1 "
                                             r"variant\(s\) \(first: \[5\]\) have no "
                                             r"called genotype"):
        res = ds.fit_pca(ds.open_matrix(data, genotype_storage=storage), 3,
                         runtime="local", rng=0)
    assert res.attrs["no_call"] == {"samples": [DEAD_SAMPLE], "variants": [DEAD_VARIANT]}
    assert "s7" not in list(res.feature_coords) and len(res.feature_coords) == 29
    qc = res.attrs["matrix"]["qc"]
    assert qc["removed"] == {"no call": 1} and qc["samples_removed"] == {"no call": 1}
    clean = data.isel(variants=np.delete(np.arange(200), DEAD_VARIANT),
                      samples=np.delete(np.arange(30), DEAD_SAMPLE))
    ref = ds.fit_pca(ds.open_matrix(clean, genotype_storage=storage), 3, runtime="local",
                     rng=0)
    np.testing.assert_allclose(np.abs(res.fitted["components"]),
                               np.abs(ref.fitted["components"]), atol=1e-10)


def test_without_such_samples_nothing_is_said_or_redone(recwarn: Any) -> None:
    res = ds.fit_pca(ds.open_matrix(_calls(dead=False)), 2, runtime="local", rng=0)
    assert "no_call" not in res.attrs
    assert not [w for w in recwarn if issubclass(w.category, StraggleWarning)]


def test_a_runtime_run_refuses_them_in_one_line() -> None:
    with LocalRuntime(n_workers=2) as rt, pytest.raises(NoCallError) as info:
        run_on(rt, ds.methods.make_method("gram"), PCA(n_components=2),
               ds.open_matrix(_calls()))
    assert "\n" not in str(info.value) and "would be scored 0" in str(info.value)
    assert info.value.samples.tolist() == [DEAD_SAMPLE]
    assert info.value.variants.tolist() == [DEAD_VARIANT]


def test_genotype_pca_merges_nan_for_them(tmp_path: Any) -> None:
    data = _calls()
    with pytest.warns(StraggleWarning, match="no called genotype"):
        out = ds.genotype_pca(ds.open_matrix(data), 2, merge=False, runtime="local", rng=0)
    assert out.sizes["samples"] == 29 and out.sizes["variants"] == 199


def test_the_estimator_and_plink_files_leave_them_out(tmp_path: Any) -> None:
    data = _calls()
    matrix = ds.open_matrix(data)
    with pytest.warns(StraggleWarning, match="no called genotype"):
        pca = ds.PCA(2, runtime="local", random_state=0).fit(matrix)
    assert pca.components_.shape == (2, 29)
    assert not pca.variant_mask_[DEAD_VARIANT] and pca.variant_mask_.sum() == 199
    with pytest.warns(StraggleWarning, match="no called genotype"):
        res = ds.fit_pca(matrix, 2, runtime="local", rng=0)
    paths = res.to_plink(tmp_path / "out", matrix)
    assert len(paths[0].read_text().splitlines()) == 1 + 29


def test_the_cli_says_so_and_exits_0(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from daskstraggle.cli import main

    store = tmp_path / "g.vcz"
    _calls().to_zarr(store, zarr_format=2)
    assert main(["pca", str(store), "-k", "2", "--runtime", "local"]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("have no called genotype; removed, rather than scored 0") == 1
    out = captured.out
    assert "pca of a 199 x 29 matrix" in out
    assert "variants    199 of 200 kept by quality control (no call removed 1)" in out
    assert "samples     29 of 30 kept by quality control (no call removed 1)" in out


@pytest.mark.cluster
def test_on_process_workers_too(dask_client: Any) -> None:
    with pytest.warns(StraggleWarning, match="no called genotype"):
        res = ds.fit_pca(ds.open_matrix(_calls()), 2, client=dask_client, rng=0)
    assert res.attrs["no_call"]["samples"] == [DEAD_SAMPLE]


@pytest.mark.filterwarnings("ignore::daskstraggle.errors.ConvergenceWarning")
def test_a_resumed_run_removes_the_same_ones_first(tmp_path: Any) -> None:
    matrix = ds.open_matrix(_calls())
    kw = {"runtime": "local", "rng": 0, "method": "gd", "tol": 1e-14}
    with pytest.warns(StraggleWarning, match="no called genotype"):
        whole = ds.fit_pca(matrix, 2, max_iter=10, **kw)
    with pytest.warns(StraggleWarning, match="no called genotype"):
        ds.fit_pca(matrix, 2, max_iter=6, checkpoint=tmp_path / "ck", checkpoint_interval=2,
                   **kw)
    with pytest.warns(StraggleWarning, match="no called genotype"):
        resumed = ds.fit_pca(matrix, 2, max_iter=10, resume=tmp_path / "ck", **kw)
    assert resumed.n_iter == 10
    np.testing.assert_array_equal(resumed.iterate, whole.iterate)
