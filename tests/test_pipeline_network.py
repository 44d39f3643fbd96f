"""``pipelines/network.py``: its scenarios, specs and table, and a quick run.

The quick run builds an emulated cluster (network namespaces, marked ``cluster`` and
``network`` like ``tests/test_emulated_cluster.py``) when it can; elsewhere it runs the
simulated half only and says why, which the test checks instead.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
from test_pipelines_load import run_quick

_PATH = Path(__file__).resolve().parents[1] / "pipelines" / "_emulated.py"
_SPEC = importlib.util.spec_from_file_location("pipeline_emulated", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
emulated = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(emulated)


def test_every_scenario_caps_every_host_and_one_link_is_slow(load_pipeline):
    pipeline = load_pipeline("network")
    cfg = pipeline.QUICK
    plans = pipeline.scenarios(cfg)
    hosts = {"sched", *pipeline.worker_names(cfg)}
    assert list(plans) == ["uncapped", "even", "slow link", "slow coordinator"]
    assert all(set(rates) == hosts for rates in plans.values())
    assert set(plans["uncapped"].values()) == {None}
    assert sorted(plans["slow link"].values()).count(cfg["slow"]) == 1
    assert plans["slow coordinator"]["sched"] == cfg["coordinator"]


def test_the_spec_gives_each_worker_index_its_compute_and_link(load_pipeline):
    from daskstraggle.latency.spec import parse_latency

    pipeline = load_pipeline("network")
    rates = {"sched": "20mbit", "w0": "100mbit", "w1": None}
    text = pipeline.spec(rates, ["w1", "w0"], {"w0": 0.25})
    model = parse_latency(text)
    assert model.link.bandwidth == (1e12, 12.5e6)  # in the given order; None: unlimited
    assert model.link.coordinator == 2.5e6
    assert text.startswith("constant(compute=[0.25, 0.25])")  # a missing worker: the slowest
    assert pipeline.spec(rates, ["w0"], None).startswith("link(")


def test_the_table_pairs_emulated_and_simulated_rows(load_pipeline):
    pipeline = load_pipeline("network")
    row = {"round_s": 2.0, "bytes_per_round": 10.0, "rounds": 1, "load_s": 0.0, "call_s": 3.0}
    emulated_rows = {"uncapped": {"gram flat": row}, "even": {"gram flat": row,
                                                             "gram tree": row}}
    simulated = {"even": {"gram flat": {**row, "round_s": 2.2},
                          "gram tree": {**row, "round_s": 1.5}}}
    table = pipeline.table(emulated_rows, simulated)
    assert "error" not in table[0] and "calibration" in table[0]["not_simulated"]
    assert table[1]["error"] == pytest.approx(0.1)
    assert table[2]["error"] == pytest.approx(-0.25)


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.network
def test_quick_run_writes_the_table(tmp_path):
    results, printed = run_quick("network", tmp_path)
    assert results["quick"] is True
    rows = {(r["scenario"], r["method"]): r for r in results["table"]}
    scenarios = {"uncapped", "even", "slow link", "slow coordinator"}
    methods = {"gram flat", "gram tree", "gram coded", "gram backups", "block", "dsag"}
    if results["emulated_skipped"] is not None:  # the simulated half only, and why
        assert results["emulated_skipped"] in printed
        assert set(rows) == {(s, m) for s in scenarios for m in methods}
        assert all(r["simulated_round_s"] > 0 for r in rows.values())
        return
    assert emulated.unavailable() is None
    assert set(rows) == {(s, m) for s in scenarios for m in methods | {"auto"}}
    for (scenario, method), row in rows.items():
        assert row["emulated_round_s"] > 0 and row["emulated_bytes"] > 0
        if method == "auto":  # what it ran is another row, and is said
            assert "error" not in row and row["not_simulated"] == "its choice's row"
            assert set(row["choices"]) <= {"gram", "gram(s=1)", "gram(tree)"}
            continue
        if scenario == "uncapped":  # the calibration
            assert "error" not in row and row["not_simulated"]
            continue
        # the same configuration simulated, its replies of the same size
        assert row["simulated_round_s"] > 0 and math.isfinite(row["error"])
        assert row["simulated_bytes"] <= row["emulated_bytes"] * 1.5
    for scenario in scenarios:
        flat, tree = rows[scenario, "gram flat"], rows[scenario, "gram tree"]
        # three workers' triangles against their one sum
        assert tree["emulated_bytes"] == pytest.approx(flat["emulated_bytes"] / 3)
        assert rows[scenario, "block"]["emulated_bytes"] < flat["emulated_bytes"]
    assert "no emulated cluster" not in printed
