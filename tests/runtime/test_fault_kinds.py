"""A new fault kind is one class: registered, it is read by the stragglers grammar, played
by the simulated runtime through the engine's pool and reported by ``daskstraggle
simulate``, with no other file changed (issue 44, item 5; the worked example of
docs/architecture.md, "Adding a fault kind")."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from typing import ClassVar

import numpy as np
import pytest

from daskstraggle import _registry, open_matrix
from daskstraggle.api import run_on
from daskstraggle.cli import main
from daskstraggle.errors import WorkerLostError
from daskstraggle.latency.faults import FAULTS, ClusterState, Join, Loss
from daskstraggle.latency.spec import parse_stragglers
from daskstraggle.methods import GD
from daskstraggle.problems import PCA
from daskstraggle.runtime import SimRuntime, StopRule


@FAULTS.register
@dataclass(frozen=True, kw_only=True, slots=True)
class Preempt(Loss):
    """Spot workers preempted at ``at`` and replaced at once: each lost worker is
    followed by a new one (a loss and a join in one step, so a lost index moves straight
    to its replacement)."""

    name: ClassVar[str] = "preempt"

    def apply(self, cluster: ClusterState) -> ClusterState:
        """Return ``cluster`` without the workers and with as many new ones."""
        lost = Loss.apply(self, cluster)
        return dataclasses.replace(lost, joined=lost.joined + len(self.workers))


X = np.random.default_rng(0).normal(size=(800, 6)) * np.linspace(3.0, 1.0, 6)


def _run(faults):
    with SimRuntime(4, latency="gamma(mean=0.1, var=1e-4)", faults=faults, rng=1) as rt:
        result = run_on(rt, GD(), PCA(n_components=2), open_matrix(X),
                        stop=StopRule(max_iter=40, tol=None), rng=0)
        return result, rt.worker_pool


def test_the_grammar_reads_a_registered_kind_and_writes_it_back():
    spec = parse_stragglers("gamma(mean=0.05, var=1e-4) + preempt(workers=[2, 0], at=1.5)")
    assert spec.faults == (Preempt(workers=(0, 2), at=1.5),)
    assert spec.to_spec().endswith(" + preempt(workers=[0, 2], at=1.5)")
    assert parse_stragglers(spec.to_spec()) == spec
    assert "preempt" in FAULTS.names()


def test_the_simulated_runtime_plays_it_through_the_pool():
    clean, _ = _run(None)
    result, pool = _run("preempt(workers=1, at=1.5)")
    np.testing.assert_allclose(result.iterate, clean.iterate, rtol=1e-12, atol=1e-13)
    assert result.attrs["faults"] == "preempt(workers=[1], at=1.5)"
    # the lost index goes straight to the replacement "4" (no survivor computes for two)
    (move,) = result.attrs["worker_losses"]
    assert (move["worker_index"], move["lost"], move["moved_to"], move["kind"], move["time"]) \
        == (1, "1", "4", "lost", 1.5)
    assert pool.workers == ["0", "4", "2", "3"]
    # the same run as its loss and join written as two terms, but for the detour
    two, _ = _run("loss(workers=1, at=1.5) + join(count=1, at=1.5)")
    assert [m["kind"] for m in two.attrs["worker_losses"]] == ["lost", "adopted"]


def test_a_run_with_every_worker_lost_waits_for_the_kind_that_adds_workers():
    """The wait for workers asks each fault what it adds (old: only join terms)."""
    everyone = "loss(workers=[0, 1, 2, 3], at=1)"
    result, pool = _run(f"{everyone} + preempt(workers=0, at=2)")
    assert result.n_iter == 40 and pool.workers == ["4", "4", "4", "4"]
    with pytest.raises(WorkerLostError, match="none joined"):
        _run(f"{everyone} + loss(workers=0, at=2)")


def test_simulate_reports_it_in_json_and_in_words(capsys):
    argv = ["simulate", "--latency", "gamma(mean=0.05, var=1e-4) + preempt(workers=0, at=1)",
            "--workers", "8", "--wait", "6", "--iterations", "50"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["faults"] == ["preempt(workers=[0], at=1)"]
    preempt, move = out["events"]
    assert preempt == {"time": 1.0, "event": "preempt", "workers": ["0"],
                       "iteration": preempt["iteration"]}
    assert (move["event"], move["kind"], move["from"], move["to"]) == ("move", "lost", "0", "8")
    assert out["workers_at_end"][0] == "8"
    assert main(argv) == 0
    assert "preempt: worker 0" in capsys.readouterr().out


@dataclass(frozen=True, kw_only=True, slots=True)
class Surge(Join):
    """``count`` workers join at ``at``, as a package advertising the kind would ship it."""

    name: ClassVar[str] = "surge"


def test_an_installed_package_adds_a_kind_by_entry_point(monkeypatch):
    group = "daskstraggle.faults"
    point = EntryPoint(name="surge", value=f"{__name__}:Surge", group=group)
    monkeypatch.setattr(_registry, "entry_points",
                        lambda *, group: [point] if group == FAULTS.group else [])
    # (read the group again, on a copy of the registered kinds the test restores)
    assert "loss" in FAULTS  # (the package's own kinds registered first)
    monkeypatch.setattr(FAULTS, "_plugins_read", False)
    monkeypatch.setattr(FAULTS, "_classes", dict(FAULTS._classes))
    assert FAULTS.group == group
    spec = parse_stragglers("loss(workers=[0, 1, 2, 3], at=1) + surge(count=2, at=2)")
    assert spec.faults[1] == Surge(count=2, at=2.0)
    result, pool = _run(spec.faults)
    assert result.n_iter == 40 and set(pool.workers) == {"4", "5"}
