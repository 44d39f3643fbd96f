"""The README runs as written: its fenced blocks, in order, in one fresh folder.

What a reader does, top to bottom in a new folder: each ```bash block's ``daskstraggle``
commands run through ``main`` (``$PWD`` is that folder), each ```python block runs as a
script in a subprocess there (so it needs, and is checked to have, the
``if __name__ == "__main__":`` guard that process workers require) and sees what the blocks
above it wrote: a snippet that writes a path an earlier command wrote fails, as it would for
the reader. Three changes keep the test fast: the dataset sizes are small, solves stop after
``--max-iter 10``, and ``--scheduler`` points at the test session's cluster instead of
127.0.0.1:8786 (the README says to start one). The set-up commands (``python3 -m venv``) are
checked by tests/test_readme.py and ``.ci/run``.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from daskstraggle.cli import main

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()

#: Small stand-ins for the README's datasets: (rows, columns, rows per chunk).
SMALL = {"genotypes": (2000, 60, 500), "logistic": (2000, 10, 500), "linear": (2000, 10, 500)}
SOLVES = ("pca", "logreg", "linreg")
SCRIPT_TIMEOUT = 280  # seconds for a Python block


def fenced() -> list[tuple[str, str]]:
    """The README's fenced blocks in order, as (language, text)."""
    return re.findall(r"^```(\w*)\n(.*?)^```", README, flags=re.S | re.M)


def blocks(language: str) -> list[str]:
    """The README's fenced blocks of ``language``, in order."""
    return [text for lang, text in fenced() if lang == language]


def block_commands(block: str) -> list[list[str]]:
    """The ``daskstraggle`` commands of one bash block, as argument lists (without the name)."""
    out = []
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


def commands() -> list[list[str]]:
    """The ``daskstraggle`` commands of every bash block, in order."""
    return [argv for block in blocks("bash") for argv in block_commands(block)]


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


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_python_blocks_can_run_as_scripts(index):
    assert 'if __name__ == "__main__":' in blocks("python")[index], \
        "process workers need the __main__ guard"


@pytest.mark.cluster
@pytest.mark.timeout(1200)  # the whole README one block after the other (a few minutes)
def test_the_blocks_run_in_order_in_a_fresh_folder(tmp_path, tmp_path_factory, monkeypatch,
                                                    capsys, dask_client):
    folder = tmp_path / "reader"
    folder.mkdir()
    scripts = tmp_path_factory.mktemp("readme_scripts")  # not in the reader's folder
    monkeypatch.chdir(folder)
    scheduler = dask_client.scheduler.address
    ran = {"bash": 0, "python": 0}
    for index, (language, text) in enumerate(fenced()):
        if language == "bash":
            for argv in block_commands(text):
                argv = [a.replace("$PWD", str(folder)) for a in shrink(argv, scheduler)]
                code = main(argv)
                captured = capsys.readouterr()
                assert code == 0, (f"README block {index}: daskstraggle {shlex.join(argv)} "
                                   f"exited {code}:\n{captured.err}")
                if "--json" in argv:
                    assert "n_iter" in json.loads(captured.out)
                ran["bash"] += 1
        elif language == "python":
            script = scripts / f"block_{index}.py"
            script.write_text(text)
            proc = subprocess.run([sys.executable, str(script)], cwd=folder, text=True,
                                  capture_output=True, timeout=SCRIPT_TIMEOUT)
            assert proc.returncode == 0, \
                f"README python block {index} failed:\n{proc.stderr[-3000:]}"
            ran["python"] += 1
    assert ran["python"] == len(blocks("python")) and ran["bash"] == len(commands())
