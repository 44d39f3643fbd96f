"""Progress bars: tqdm's notebook widget where Jupyter can show it, a text bar elsewhere
(without the warning ``tqdm.auto`` prints in a kernel that lacks ipywidgets)."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["progress_bar"]

#: Modules whose presence means this process is a Jupyter kernel (ipykernel; JupyterLite).
_KERNEL_MODULES = ("ipykernel", "IPython.utils._process_emscripten")


def progress_bar(iterable: Any = None, **kwargs: Any) -> Any:
    """Return ``tqdm.auto.tqdm(iterable, **kwargs)``, but in a Jupyter kernel without
    ipywidgets ``tqdm.std.tqdm``, shown also with ``disable=None`` (a kernel's streams are
    not terminals)."""
    if any(name in sys.modules for name in _KERNEL_MODULES) and not _widgets_available():
        from tqdm.std import tqdm

        if kwargs.get("disable", False) is None:
            kwargs["disable"] = False
        return tqdm(iterable, **kwargs)
    from tqdm.auto import tqdm

    return tqdm(iterable, **kwargs)


def _widgets_available() -> bool:
    """Whether tqdm's notebook bar can draw: the widget class it needs imported."""
    from tqdm.notebook import IProgress  # None when ipywidgets cannot be imported

    return IProgress is not None
