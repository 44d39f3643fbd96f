"""Result: summary, Zarr round trip, atomic and refusing writes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from daskstraggle import GD, PCA, LocalRuntime, Result, StopRule, open_matrix
from daskstraggle.errors import OutputExistsError


@pytest.fixture
def result(low_rank_matrix) -> Result:
    with LocalRuntime(n_workers=3) as rt:
        return rt.run(GD(), PCA(n_components=2), open_matrix(low_rank_matrix), reference=True,
                      rng=0, stop=StopRule(max_iter=50))


def test_summary_is_json_with_the_documented_keys(result):
    summary = json.loads(json.dumps(result.summary()))
    for key in ("method", "n_iter", "wall_time_s", "objective", "explained_variance",
                "explained_variance_ratio", "reference_objective", "gap"):
        assert key in summary
    assert summary["n_iter"] == result.n_iter == result.trace.sizes["iteration"]


def test_round_trip(result, tmp_path):
    path = result.save(tmp_path / "r.zarr")
    back = Result.load(path)
    assert back.problem == "pca" and back.method == "gd" and back.n_iter == result.n_iter
    for key, value in result.fitted.items():
        np.testing.assert_array_equal(back.fitted[key], value)
    np.testing.assert_array_equal(back.trace["objective"], result.trace["objective"])
    np.testing.assert_array_equal(back.trace["compute_duration"], result.trace["compute_duration"])
    assert back.reference_objective == result.reference_objective
    assert back.attrs["runtime"] == "local"


def test_existing_output_is_never_overwritten_without_permission(result, tmp_path):
    path = tmp_path / "r.zarr"
    path.mkdir()
    (path / "precious.txt").write_text("keep")
    with pytest.raises(OutputExistsError, match="exists already"):
        result.save(path)
    assert (path / "precious.txt").read_text() == "keep"
    result.save(path, overwrite=True)
    assert not (path / "precious.txt").exists()
    assert Result.load(path).n_iter == result.n_iter
    assert [p.name for p in tmp_path.iterdir()] == ["r.zarr"]  # no temporaries left
