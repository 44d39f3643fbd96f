"""docs/genotype-workflow.md runs as written: its Python block, then its command, in one
fresh folder (the command reads the store the Python block wrote)."""

from __future__ import annotations

import re
import runpy
import shlex
from pathlib import Path

import pytest

from daskstraggle.cli import main

DOC = Path(__file__).parents[1] / "docs" / "genotype-workflow.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)


def test_the_workflow_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (python,) = _blocks("python")
    (tmp_path / "workflow.py").write_text(python)
    runpy.run_path(str(tmp_path / "workflow.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "samples removed: {'mind': 0, 'king':" in out and "relatives' scores: (" in out
    for suffix in (".eigenvec", ".eigenval", ".eigenvec.allele", ".afreq"):
        assert (tmp_path / f"cohort_pca{suffix}").is_file()
    (bash,) = _blocks("bash")
    argv = shlex.split(bash.replace("\\\n", " "))
    assert argv[0] == "daskstraggle"
    assert main(argv[1:]) == 0
    out = capsys.readouterr().out
    assert "kept by quality control (missing removed" in out and "king removed" in out
    assert (tmp_path / "cohort_cli.eigenvec.allele").is_file()
