"""Every notebook runs top to bottom (code cells executed in order, Agg backend), and is
stored clean: valid nbformat 4, no outputs.

Each run test runs its notebook in its own process, one notebook at a time. (They used to
run side by side: on 2 busy cores three LocalClusters of 4 process workers slowed every
round trip so much that the three took more than twice as long as one after the other.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).parents[1] / "notebooks").glob("*.ipynb"))
TIMEOUT = 300  # seconds for a notebook


#: Prepended to a notebook's code: its own LocalCluster forks the workers from the package's
#: preloaded server, as the clusters the package starts do (spawning four workers costs
#: about ten seconds of the test machine's two cores).
_FORKED_WORKERS = ("import dask\nfrom daskstraggle.runtime._connect import worker_start_config\n"
                   "dask.config.set(worker_start_config()[0])\n")


def _start(path: Path, folder: Path) -> subprocess.Popen:
    """Start the notebook's code cells as one script in ``folder`` (output to files there)."""
    cells = json.loads(path.read_text())["cells"]
    code = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    script = folder / f"{path.stem}.py"
    script.write_text("import matplotlib\nmatplotlib.use('Agg')\n" + _FORKED_WORKERS + code)
    # run as `python -c` like a kernel would: spawned worker processes must not re-import
    # the script as __main__
    runner = f"exec(compile(open({str(script)!r}).read(), {script.name!r}, 'exec'))"
    # the notebooks' temporary folders (tempfile) go under the folder, removed by pytest
    env = {**os.environ, "TMPDIR": str(folder)}
    with open(folder / "stdout.txt", "w") as out, open(folder / "stderr.txt", "w") as err:
        return subprocess.Popen([sys.executable, "-c", runner], stdout=out, stderr=err,
                                cwd=folder, env=env)


#: Notebooks whose run is marked slow (each starts a LocalCluster of 4 process workers and
#: runs several methods on it, about 40 s): genotype-pca, the flagship, runs in every suite;
#: these run with ``--runslow``, and ``test_notebook_code_compiles`` checks them in every suite.
SLOW_NOTEBOOKS = {"planning", "stragglers"}


@pytest.mark.timeout(TIMEOUT + 60)
@pytest.mark.parametrize("path", [
    pytest.param(p, marks=pytest.mark.slow) if p.stem in SLOW_NOTEBOOKS else p for p in NOTEBOOKS
], ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, tmp_path: Path) -> None:
    proc = _start(path, tmp_path)
    try:
        proc.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    stderr = (tmp_path / "stderr.txt").read_text()
    assert proc.returncode == 0, stderr[-3000:]


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS
    assert SLOW_NOTEBOOKS < {p.stem for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_code_compiles_and_names_only_what_the_package_has(path: Path) -> None:
    """The cells compile, and every ``ds.<name>`` and ``from daskstraggle... import`` name
    they use exists (cheap, in every suite)."""
    import ast
    import importlib
    import re

    import daskstraggle as ds

    cells = json.loads(path.read_text())["cells"]
    code = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    tree = ast.parse(compile(code, path.name, "exec", flags=ast.PyCF_ONLY_AST))
    missing = sorted({name for name in re.findall(r"\bds\.(\w+)", code)
                      if not hasattr(ds, name)})
    for node in ast.walk(tree):  # from daskstraggle.<module> import <names>
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("daskstraggle"):
            module = importlib.import_module(node.module)
            missing += [f"{node.module}.{a.name}" for a in node.names
                        if not hasattr(module, a.name)]
    assert not missing, f"{path.name} uses daskstraggle names that do not exist: {missing}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_clean(path: Path) -> None:
    notebook = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    assert notebook.nbformat == 4
    nbformat.validate(notebook)  # raises on an invalid notebook (cell ids included)
    dirty = [cell.id for cell in notebook.cells if cell.cell_type == "code"
             and (cell.outputs or cell.execution_count is not None)]
    assert not dirty, f"clear the outputs of {path.name} before committing: cells {dirty}"
