"""Every pipeline loads and parses its options in each suite run.

The pipelines' real-cluster ``--quick`` runs are marked slow (``--runslow``); this keeps an
import error, a renamed library name or a broken option parser from going unnoticed until
someone runs them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

PIPELINES = sorted(p.stem for p in (Path(__file__).parents[1] / "pipelines").glob("*.py")
                   if not p.stem.startswith("_"))


def test_there_are_pipelines():
    assert {"time_to_accuracy", "soak", "genotype_pca", "load_balancing"} <= set(PIPELINES)


@pytest.mark.parametrize("name", PIPELINES)
def test_the_pipeline_loads_and_prints_its_help(name, load_pipeline, capsys):
    module = load_pipeline(name)
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--help"])
    assert exit_info.value.code == 0
    assert "usage:" in capsys.readouterr().out
