"""The README's snippets run as written: every ```python block, and its ``daskstraggle`` commands.

Each Python block runs as a script in a subprocess (so it needs, and is checked to have, the
``if __name__ == "__main__":`` guard that process workers require) in a folder holding small
versions of the stores it names. The scripts run side by side (much of their time is
waiting): all start with the first of their tests, and each test waits for its own. The
```bash blocks' ``daskstraggle`` commands run in README order in a fresh folder through
``main`` (``$PWD`` is that folder), with three changes that keep the test fast: the dataset
sizes are small, solves stop after ``--max-iter 10``, and ``--scheduler`` points at the
test session's cluster instead of 127.0.0.1:8786. The set-up commands (``python3 -m venv``) are
checked by tests/test_readme.py and ``.ci/run``.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daskstraggle.cli import main
from daskstraggle.data.datasets import make_dataset

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()

#: Small stand-ins for the README's datasets: (rows, columns, rows per chunk).
SMALL = {"genotypes": (2000, 60, 500), "logistic": (2000, 10, 500), "linear": (2000, 10, 500)}
#: The stores the README's Python blocks open, and their recipes.
STORES = {"geno.vcz": "genotypes", "logit.zarr": "logistic", "lin.zarr": "linear"}
SOLVES = ("pca", "logreg", "linreg")
SCRIPT_TIMEOUT = 280  # seconds for a Python block, from the start of all of them


def blocks(language: str) -> list[str]:
    """The README's fenced blocks of ``language``, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", README, flags=re.S | re.M)


def commands() -> list[list[str]]:
    """The ``daskstraggle`` commands of the bash blocks, as argument lists (without the name)."""
    out = []
    for block in blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            argv: list[str] = []
            for token in [*shlex.split(line, comments=True), "&&"]:
                if token != "&&":
                    argv.append(token)
                    continue
                if argv and argv[0] == "daskstraggle":
                    out.append(argv[1:])
                argv = []
    return out


def shrink(argv: list[str], scheduler: str) -> list[str]:
    """The command with small data, at most 10 iterations and the test's scheduler."""
    argv = list(argv)
    if argv[:2] == ["datasets", "make"]:
        for flag in ("--size", "--features", "--chunk-rows"):
            if flag in argv:
                del argv[argv.index(flag):argv.index(flag) + 2]
        rows, cols, chunk = SMALL[argv[2]]
        argv += ["--size", str(rows), "--features", str(cols), "--chunk-rows", str(chunk)]
    if argv[0] in SOLVES and "--max-iter" not in argv:
        argv += ["--max-iter", "10"]
    if "--scheduler" in argv:
        argv[argv.index("--scheduler") + 1] = scheduler
    return argv


def test_the_readme_has_snippets_to_check():
    assert len(blocks("python")) >= 2
    names = [argv[0] if argv[0] != "datasets" else "datasets make" for argv in commands()]
    assert {"pca", "logreg", "linreg", "simulate", "datasets make"} <= set(names), names


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Small versions of the stores the Python blocks open."""
    root = tmp_path_factory.mktemp("readme_stores")
    for name, recipe in STORES.items():
        rows, cols, chunk = SMALL[recipe]
        size = ({"n_variants": rows, "n_samples": cols} if recipe == "genotypes"
                else {"n_samples": rows, "n_features": cols})
        make_dataset(recipe, root / name, chunk_rows=chunk, **size)
    return root


@pytest.fixture(scope="module")
def scripts(stores: Path, tmp_path_factory: pytest.TempPathFactory):
    """Every Python block started at once as a script, each in its own folder with the stores.

    Returns ``{index: (process, folder, start time)}``; stderr goes to ``stderr.txt`` there.
    """
    started = {}
    for index, code in enumerate(blocks("python")):
        folder = tmp_path_factory.mktemp(f"snippet_{index}")
        for name in STORES:
            (folder / name).symlink_to(stores / name)
        script = folder / f"snippet_{index}.py"
        script.write_text(code)
        with open(folder / "stdout.txt", "w") as out, open(folder / "stderr.txt", "w") as err:
            proc = subprocess.Popen([sys.executable, script.name], cwd=folder, stdout=out,
                                    stderr=err)
        started[index] = (proc, folder, time.monotonic())
    yield started
    for proc, _, _ in started.values():
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.mark.cluster
@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_python_snippet_runs_as_a_script(index, scripts):
    code = blocks("python")[index]
    assert 'if __name__ == "__main__":' in code, "process workers need the __main__ guard"
    proc, folder, t0 = scripts[index]
    try:
        proc.wait(timeout=max(SCRIPT_TIMEOUT - (time.monotonic() - t0), 1))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    stderr = (folder / "stderr.txt").read_text()
    assert proc.returncode == 0, f"README python block {index} failed:\n{stderr[-3000:]}"


@pytest.mark.cluster
def test_bash_commands_run(tmp_path, monkeypatch, capsys, dask_client):
    monkeypatch.chdir(tmp_path)
    scheduler = dask_client.scheduler.address
    for argv in commands():
        argv = [a.replace("$PWD", str(tmp_path)) for a in shrink(argv, scheduler)]
        code = main(argv)
        captured = capsys.readouterr()
        assert code == 0, f"daskstraggle {shlex.join(argv)} exited {code}:\n{captured.err}"
        if "--json" in argv:
            assert "n_iter" in json.loads(captured.out)
