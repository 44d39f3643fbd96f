"""``pipelines/block_pca_base.py``: block PCA end to end, ours against another checkout."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_pipelines_load import run_quick

ROOT = Path(__file__).resolve().parents[1]


def test_a_base_without_a_package_is_refused(load_pipeline, tmp_path, capsys):
    pipeline = load_pipeline("block_pca_base")
    with pytest.raises(SystemExit) as exc:
        pipeline.parse_args(["--base", str(tmp_path)])
    assert exc.value.code == 2
    assert "holds no daskstraggle package" in capsys.readouterr().err


@pytest.mark.slow
def test_quick_run_against_this_checkout_makes_the_same_rounds(tmp_path):
    # this checkout as the base: both sides run the same code, so the same rounds
    results, _ = run_quick("block_pca_base", tmp_path, "--base", str(ROOT))
    assert results["quick"] is True
    (row,) = results["rows"]
    assert row["ours_rounds"] == row["base_rounds"] == [5]
    assert row["ratio"] > 0
    assert {run["package"] for run in row["runs"]["base"]} == {str(ROOT / "daskstraggle")}
    assert "ours / base" in results["table"]
