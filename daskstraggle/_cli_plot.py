"""The solve commands' ``--plot PATH.png``: checks before any work
(:func:`check_plot_path`), then the figure (:func:`save_run_figure`).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from daskstraggle._output import (
    check_folder_exists,
    check_not_in_zarr,
    check_not_input,
    check_writable_folder,
)
from daskstraggle.errors import InputError, InvalidParameterError, OutputExistsError

__all__ = ["check_plot_path", "save_run_figure"]


def check_plot_path(path: str | os.PathLike[str] | None, *, overwrite: bool,
                    out: str | os.PathLike[str] | None,
                    inputs: Iterable[str | os.PathLike[str]]) -> Path | None:
    """Return the ``--plot`` path (None: None), refused without matplotlib, if not an image
    suffix, in ``out``, overlapping ``inputs`` or a Zarr store, existing (unless
    ``overwrite``) or a folder, or in a missing or read-only folder."""
    if path is None:
        return None
    target = Path(path)
    formats = _formats()
    if target.is_dir():
        raise OutputExistsError(f"--plot {str(target)!r} is a folder; name a file in it, "
                                "e.g. run.png.")
    if target.suffix.lower().removeprefix(".") not in formats:
        raise InvalidParameterError(
            f"--plot {str(target)!r} must end in an image format's suffix, one of "
            f"{', '.join('.' + f for f in sorted(formats))} (e.g. run.png)."
        )
    if os.path.lexists(target) and not overwrite:
        raise OutputExistsError(f"--plot {str(target)!r} exists already; pass --overwrite or "
                                "choose another path.")
    check_folder_exists(target, what="--plot")  # as --out: never a folder made for it
    check_writable_folder(target.absolute().parent, out=target, what="--plot")
    if out is not None:
        real, real_out = Path(os.path.realpath(target)), Path(os.path.realpath(out))
        if real == real_out or real_out in real.parents:
            raise InvalidParameterError(
                f"--plot {str(target)!r} is or lies inside --out {os.fspath(out)!r}; the "
                "result store would hold a stray file. Choose a path outside it."
            )
    check_not_input(target, inputs, what="--plot")
    check_not_in_zarr(target, what="--plot")
    return target


def _formats() -> set[str]:
    """Suffixes the Agg canvas writes (png, pdf, svg, ...); InputError without matplotlib."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
    except ImportError:
        from daskstraggle.plot import INSTALL_HINT

        raise InputError(f"--plot needs matplotlib: {INSTALL_HINT}") from None
    return set(FigureCanvasAgg.get_supported_filetypes())


def save_run_figure(result: Any, path: Path, *, labels: Any = None,
                    overwrite: bool = False) -> Path:
    """Write :func:`~daskstraggle.plot.plot_run` of ``result`` to ``path`` through a
    temporary sibling; without ``overwrite`` OutputExistsError if ``path`` appeared."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from daskstraggle.plot import plot_run

    fig = Figure(layout="constrained")
    FigureCanvasAgg(fig)
    plot_run(result, labels=labels, fig=fig)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        fig.savefig(tmp, format=path.suffix.lower().removeprefix("."), dpi=100)
        appeared = OutputExistsError(f"--plot {str(path)!r} appeared during the run; the "
                                     "figure was not written. Choose another path.")
        if overwrite:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise appeared from None
            except OSError:  # no hard links here: a rename, after checking once more
                if os.path.lexists(path):
                    raise appeared from None
                os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            tmp.unlink()
    return path
