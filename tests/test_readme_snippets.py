"""The README and the guide pages run as written: each page's fenced blocks, in order, in one
fresh folder per page (:data:`PAGES`).

What a reader does, top to bottom in a new folder: each ```bash block's ``daskstraggle``
commands run through ``main`` (``$PWD`` is that folder), each ```python block runs as a
script there (``runpy.run_path`` with ``__name__ == "__main__"``, in one Python process
that runs the blocks one after another as the test reaches them: a LocalCluster's
process workers import the block itself, so it needs, and is checked to have, the
``if __name__ == "__main__":`` guard they require) and sees what the blocks above it wrote:
a snippet that writes a path an earlier command wrote fails, as it would for the reader.
Five changes keep the test fast: the Python blocks' own LocalClusters fork their workers
from the package's preloaded server (as the clusters the package starts do), the dataset
sizes are small, solves stop after
``--max-iter 10``, a LocalCluster that a command starts has at most 2 process workers (the
``daskstraggle.workers`` setting docs/guide.md documents, and ``--workers``, unless a
``--stragglers`` spec names a higher worker index or ``--wait`` asks for more), and
``--scheduler`` points at the test session's cluster instead of 127.0.0.1:8786 (the pages
say to start one). The set-up
commands (``python3 -m venv``) are checked by tests/test_readme.py and ``.ci/run``.
"""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import subprocess
import sys
from pathlib import Path

import dask
import pytest

from daskstraggle.cli import main

ROOT = Path(__file__).parents[1]
#: The pages whose blocks run, each in its own fresh folder: the README and the docs pages that
#: hold the sections the README used to (a page's blocks see only what its earlier blocks wrote,
#: so a page makes the data its examples read).
PAGES = ("README.md", "docs/guide.md", "docs/stragglers.md")
TEXT = {page: (ROOT / page).read_text() for page in PAGES}

#: Small stand-ins for the README's datasets: (rows, columns, rows per chunk).
SMALL = {"genotypes": (2000, 60, 500), "logistic": (2000, 10, 500), "linear": (2000, 10, 500)}
SOLVES = ("pca", "logreg", "linreg")
SCRIPT_TIMEOUT = 280  # seconds for a Python block
#: Process workers of a LocalCluster a command starts (4 by default and in the README):
#: each worker costs seconds to start on the test machine's 2 cores.
MAX_WORKERS = 2


def fenced(page: str = "README.md") -> list[tuple[str, str]]:
    """The fenced blocks of ``page`` in order, as (language, text)."""
    return re.findall(r"^```(\w*)\n(.*?)^```", TEXT[page], flags=re.S | re.M)


def blocks(language: str, page: str = "README.md") -> list[str]:
    """The fenced blocks of ``language`` in ``page``, in order."""
    return [text for lang, text in fenced(page) if lang == language]


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


def commands(page: str = "README.md") -> list[list[str]]:
    """The ``daskstraggle`` commands of every bash block of ``page``, in order."""
    return [argv for block in blocks("bash", page) for argv in block_commands(block)]


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
    runtime = argv[argv.index("--runtime") + 1] if "--runtime" in argv else "dask"
    # a LocalCluster of fewer process workers: as many as the straggler spec's highest
    # worker index needs, and as many as --wait asks for
    if argv[0] in SOLVES and "--workers" in argv and runtime == "dask":
        spec = argv[argv.index("--stragglers") + 1] if "--stragglers" in argv else ""
        named = [int(i) for i in re.findall(r"\d+", " ".join(
            re.findall(r"workers=(\[[^\]]*\]|\d+)", spec)))]
        wait = int(argv[argv.index("--wait") + 1]) if "--wait" in argv else 1
        at = argv.index("--workers") + 1
        argv[at] = str(min(int(argv[at]), max(MAX_WORKERS, wait, *(i + 1 for i in named))))
    if "--scheduler" in argv:
        argv[argv.index("--scheduler") + 1] = scheduler
    return argv


def test_the_readme_has_snippets_to_check():
    assert len(blocks("python")) >= 2
    for page in PAGES:
        assert blocks("python", page) or commands(page), f"{page} has no snippet to run"
    names = [argv[0] if argv[0] != "datasets" else "datasets make"
             for page in PAGES for argv in commands(page)]
    assert {"pca", "logreg", "linreg", "simulate", "datasets make"} <= set(names), names


@pytest.mark.parametrize(("page", "index"), [(page, index) for page in PAGES
                                             for index in range(len(blocks("python", page)))])
def test_python_blocks_can_run_as_scripts(page, index):
    assert 'if __name__ == "__main__":' in blocks("python", page)[index], \
        "process workers need the __main__ guard"


#: Runs a page's Python blocks in one process: reads a block's path per line on stdin,
#: runs it as a script (``__main__``, in the current folder) and writes one JSON line
#: ``{"ok": ..., "error": ...}`` to the file descriptor ``argv[1]``.
_BLOCK_RUNNER = """
import json, os, runpy, sys, traceback

import dask
from daskstraggle.runtime._connect import worker_start_config

# the blocks' own LocalClusters fork their workers from the preloaded server, as the
# package's clusters do (spawning each costs seconds on 2 cores)
dask.config.set(worker_start_config()[0])
status = os.fdopen(int(sys.argv[1]), "w")
for line in sys.stdin:
    try:
        runpy.run_path(line.strip(), run_name="__main__")
        report = {"ok": True}
    except BaseException:
        report = {"ok": False, "error": traceback.format_exc()}
    sys.stdout.flush()
    sys.stderr.flush()
    status.write(json.dumps(report) + "\\n")
    status.flush()
"""


class _BlockRunner:
    """One Python process running a page's Python blocks, one at a time, in ``folder``."""

    def __init__(self, folder: Path, logs: Path) -> None:
        read, write = os.pipe()
        self.stderr = logs / "blocks.stderr"
        with open(logs / "blocks.stdout", "w") as out, open(self.stderr, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _BLOCK_RUNNER, str(write)], stdin=subprocess.PIPE,
                stdout=out, stderr=err, cwd=folder, text=True, pass_fds=(write,))
        os.close(write)
        self.status = os.fdopen(read)

    def run(self, script: Path) -> dict:
        """Run ``script`` as ``__main__``; its report (``ok``, ``error``)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{script}\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.status], [], [], SCRIPT_TIMEOUT)
        line = self.status.readline() if ready else ""
        if not line:
            return {"ok": False, "error": f"no answer within {SCRIPT_TIMEOUT} s (exit code "
                    f"{self.proc.poll()}):\n{self.stderr.read_text()[-3000:]}"}
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.status.close()


@pytest.mark.cluster
@pytest.mark.timeout(1200)  # a whole page one block after the other (a few minutes)
@pytest.mark.parametrize("page", PAGES)
def test_the_blocks_run_in_order_in_a_fresh_folder(page, tmp_path, tmp_path_factory, monkeypatch,
                                                    capsys, dask_client):
    folder = tmp_path / "reader"
    folder.mkdir()
    scripts = tmp_path_factory.mktemp("readme_scripts")  # not in the reader's folder
    monkeypatch.chdir(folder)
    scheduler = dask_client.scheduler.address
    ran = {"bash": 0, "python": 0}
    runner = _BlockRunner(folder, scripts)
    try:
        for index, (language, text) in enumerate(fenced(page)):
            if language == "bash":
                for argv in block_commands(text):
                    argv = [a.replace("$PWD", str(folder)) for a in shrink(argv, scheduler)]
                    with dask.config.set({"daskstraggle.workers": MAX_WORKERS}):
                        code = main(argv)
                    captured = capsys.readouterr()
                    assert code == 0, (f"{page} block {index}: daskstraggle "
                                       f"{shlex.join(argv)} exited {code}:\n{captured.err}")
                    if "--json" in argv:
                        assert "n_iter" in json.loads(captured.out)
                    ran["bash"] += 1
            elif language == "python":
                script = scripts / f"block_{index}.py"
                script.write_text(text)
                report = runner.run(script)
                assert report["ok"], f"{page} python block {index} failed:\n{report['error']}"
                ran["python"] += 1
    finally:
        runner.close()
    assert ran["python"] == len(blocks("python", page)) and ran["bash"] == len(commands(page))
