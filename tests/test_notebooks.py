"""Every notebook runs top to bottom (code cells executed in order, Agg backend), and is
stored clean: valid nbformat 4, no outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, tmp_path: Path) -> None:
    cells = json.loads(path.read_text())["cells"]
    code = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    script = tmp_path / f"{path.stem}.py"
    script.write_text("import matplotlib\nmatplotlib.use('Agg')\n" + code)
    # run as `python -c` like a kernel would: spawned worker processes must not re-import
    # the script as __main__
    runner = f"exec(compile(open({str(script)!r}).read(), {script.name!r}, 'exec'))"
    # the notebooks' temporary folders (tempfile) go under tmp_path, removed by pytest
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", runner], capture_output=True, text=True,
                          timeout=240, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_clean(path: Path) -> None:
    notebook = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    assert notebook.nbformat == 4
    nbformat.validate(notebook)  # raises on an invalid notebook (cell ids included)
    dirty = [cell.id for cell in notebook.cells if cell.cell_type == "code"
             and (cell.outputs or cell.execution_count is not None)]
    assert not dirty, f"clear the outputs of {path.name} before committing: cells {dirty}"
