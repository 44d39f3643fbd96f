"""Progress bars in a real Jupyter kernel: a widget with ipywidgets, else a text bar, no warning.

``tqdm.auto`` in a kernel without ipywidgets warns "IProgress not found. Please update
jupyter and ipywidgets"; ``daskstraggle._progress.progress_bar`` must not. Each test starts
an ipykernel (as Jupyter does, through jupyter_client) and runs a fit with
``progress=True`` in it, reading what the kernel sends to the notebook.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ipykernel")
manager = pytest.importorskip("jupyter_client.manager")

ROOT = Path(__file__).resolve().parents[1]

#: A fit that converges (no ConvergenceWarning), with its progress bar on or off.
FIT = """
import warnings
import numpy as np
import daskstraggle as ds
X = np.random.default_rng(0).normal(size=(200, 4))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ds.fit_least_squares(X, X @ [1.0, 2.0, 3.0, 4.0], method="gd", runtime="local", rng=0,
                         progress={progress})
print("warnings:", [f"{{w.category.__name__}}: {{w.message}}" for w in caught])
"""


def run_each_cell(cells: list[str]) -> list[list[tuple[str, dict[str, Any]]]]:
    """Run ``cells`` in a fresh kernel; return the messages each cell sent to the notebook."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    km, kc = manager.start_new_kernel(kernel_name="python3", env=env, startup_timeout=60)
    per_cell = []
    try:
        for code in cells:
            msg_id = kc.execute(code)
            messages = []
            while True:
                msg = kc.get_iopub_msg(timeout=120)
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                kind, content = msg["msg_type"], msg["content"]
                if kind == "status" and content["execution_state"] == "idle":
                    break
                messages.append((kind, content))
            per_cell.append(messages)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    errors = [c for messages in per_cell for k, c in messages if k == "error"]
    assert not errors, "\n".join(line for e in errors for line in e["traceback"])
    return per_cell


def run_cells(cells: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """Run ``cells`` in a fresh kernel; return the messages they sent to the notebook."""
    return [message for messages in run_each_cell(cells) for message in messages]


def streams(messages: list[tuple[str, dict[str, Any]]], name: str) -> str:
    return "".join(c["text"] for k, c in messages if k == "stream" and c["name"] == name)


def widgets(messages: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    return [c for k, c in messages if k == "display_data"
            and "application/vnd.jupyter.widget-view+json" in c["data"]]


BLOCK_WIDGETS = ("import sys\nassert 'ipywidgets' not in sys.modules\n"
                 "sys.modules['ipywidgets'] = None  # as if it were not installed\n")


def test_kernel_without_ipywidgets_shows_nothing_when_off_and_a_text_bar_without_warning():
    # one kernel for both fits (starting a kernel is most of the time): the first fit, with
    # the bar off, runs in a fresh kernel as it would alone; then the same fit with the bar
    off, on = run_each_cell([BLOCK_WIDGETS, FIT.format(progress=False),
                             FIT.format(progress=True)])[1:]
    assert "warnings: []" in streams(off, "stdout")
    assert streams(off, "stderr") == "" and not widgets(off)
    out, err = streams(on, "stdout"), streams(on, "stderr")
    assert "warnings: []" in out, out
    assert "IProgress" not in err and "TqdmWarning" not in err, err
    assert "gd least-squares:" in err and "it/s]" in err, err  # tqdm's text bar
    assert not widgets(on)


def test_the_same_fit_with_tqdm_auto_would_warn():
    """The test above can fail: tqdm.auto itself warns in this kernel."""
    messages = run_cells([BLOCK_WIDGETS, "import warnings\n"
                          "with warnings.catch_warnings(record=True) as caught:\n"
                          "    warnings.simplefilter('always')\n"
                          "    from tqdm.auto import tqdm\n"
                          "print([str(w.message) for w in caught])"])
    assert "IProgress not found" in streams(messages, "stdout")


def test_kernel_with_ipywidgets_shows_a_widget():
    pytest.importorskip("ipywidgets")
    messages = run_cells([FIT.format(progress=True)])
    assert "warnings: []" in streams(messages, "stdout")
    assert widgets(messages), messages
    assert "it/s]" not in streams(messages, "stderr")


def test_outside_a_kernel_the_bar_is_tqdm_auto_s():
    code = ("from tqdm.auto import tqdm\n"
            "from daskstraggle._progress import progress_bar\n"
            "bar = progress_bar(total=3, disable=True)\n"
            "print(type(bar) is tqdm)")
    proc = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (proc.returncode, proc.stdout.strip()) == (0, "True"), proc.stderr
