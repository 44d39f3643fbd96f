"""Output paths that cannot destroy data: checks before any work
(:func:`check_output_path`), atomic replacement (:func:`write_atomically`).

The API creates a missing folder above the output; the command line refuses it
(:func:`check_folder_exists`), as ``cp`` does.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import sys
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from daskstraggle._resources import nearest_existing
from daskstraggle.data._remote import is_url
from daskstraggle.errors import (
    InvalidParameterError,
    OutputExistsError,
    OutputNotWritableError,
    StraggleWarning,
)

__all__ = ["ZARR_METADATA", "check_folder_exists", "check_not_in_zarr", "check_output_path",
           "check_writable_folder", "discard", "removed_on_error", "source_paths",
           "write_atomically"]

#: Attempts at deleting a replaced output before warning that it is left behind.
_DISCARD_ATTEMPTS = 3

#: Files that make a folder a node of a Zarr hierarchy: v3 metadata, v2 group, array and
#: attributes.
ZARR_METADATA = ("zarr.json", ".zgroup", ".zarray", ".zattrs")


def source_paths(source: Any) -> list[str]:
    """Return the file-system paths a data source reads (empty for in-memory data).

    ``source`` is a path, a :class:`~daskstraggle.data.Matrix` (its source's ``path``), an
    ``xarray.Dataset`` (the store it was opened from) or a description dict
    (``Matrix.describe()``, recorded in ``Result.attrs["matrix"]``).
    A ``file://`` URL gives its local path; other URLs (remote stores) give none. A PLINK
    fileset gives its companions too (``.bim`` and ``.fam`` beside a ``.bed``).
    """
    if isinstance(source, dict):
        path = source.get("path")
    elif type(source).__module__.startswith("xarray") and hasattr(source, "encoding"):
        path = source.encoding.get("source")  # a Dataset opened from a store
    elif isinstance(source, str | os.PathLike):
        path = source
    else:
        path = getattr(getattr(source, "source", None), "path", None)
    if not isinstance(path, str | os.PathLike):
        return []
    path = os.fspath(path)
    if path.startswith("file:"):
        path = unquote(urlparse(path).path)
    elif is_url(path):
        return []
    return [path, *_companions(path)]


def _companions(path: str) -> list[str]:
    """The files read beside ``path`` (a ``.bed``'s ``.bim`` and ``.fam``)."""
    from daskstraggle.data.backends import guess_source

    backend = guess_source(path)
    suffix: str = getattr(backend, "suffix", "")
    tail = path[len(path) - len(suffix):]
    return [path[: len(path) - len(suffix)] + (c.upper() if tail.isupper() else c)
            for c in getattr(backend, "companions", ())]


def check_output_path(
    path: str | os.PathLike[str] | None,
    *,
    overwrite: bool,
    inputs: Iterable[str | os.PathLike[str]] = (),
    what: str = "The output path (CLI: --out)",
) -> Path | None:
    """Return ``path`` as a Path (None: None), refused as :meth:`Result.save
    <daskstraggle.trace.Result.save>` says if it would destroy data (be, lie in or contain
    one of ``inputs``) or cannot be written; ``what`` names it in the messages."""
    if path is None:
        return None
    # a URL, or one that pathlib folded ('s3://b/k' -> 's3:/b/k'); 2+ letters: not a drive
    if is_url(os.fspath(path)) or re.match(r"^[A-Za-z][A-Za-z0-9+.\-]+:/", os.fspath(path)):
        raise InvalidParameterError(
            f"{what} must be a local path; got the URL {os.fspath(path)!r}. "
            "Results are written locally (copy them to the remote store afterwards)."
        )
    out = Path(path)
    check_not_input(out, inputs, what=what)
    check_not_in_zarr(out, what=what)
    if os.path.lexists(out) and not overwrite:
        raise OutputExistsError(
            f"{what} {str(out)!r} exists already; pass overwrite=True "
            "(CLI: --overwrite) or choose another path."
        )
    check_writable_folder(out.absolute().parent, out=out, what=what)
    return out


def check_not_input(out: Path, inputs: Iterable[str | os.PathLike[str] | None], *,
                    what: str = "The output path (CLI: --out)",
                    role: str = "the input store") -> None:
    """Raise InvalidParameterError if ``out`` is, is inside or contains an input (real
    paths compared, so symlinks do not hide the overlap; None entries skipped); ``what``
    names the path and ``role`` the inputs in the message."""
    real_out = Path(os.path.realpath(out))
    for source in inputs:
        if source is None:
            continue
        real_in = Path(os.path.realpath(source))
        relation = ("is" if real_out == real_in else "lies inside" if real_in in real_out.parents
                    else "contains" if real_out in real_in.parents else None)
        if relation is None:
            continue
        raise InvalidParameterError(
            f"{what} {str(out)!r} {relation} {role} {os.fspath(source)!r}; "
            "writing there would destroy the data, also with overwrite=True "
            "(CLI: --overwrite). Choose a path outside it."
        )


def check_not_in_zarr(out: Path, *, what: str = "The output path (CLI: --out)") -> None:
    """Raise InvalidParameterError if a folder above ``out`` (real path) holds one of
    :data:`ZARR_METADATA`; ``out`` itself may be a store."""
    for folder in Path(os.path.realpath(out)).parents:
        if (marker := next((m for m in ZARR_METADATA if (folder / m).is_file()), None)):
            raise InvalidParameterError(
                f"{what} {str(out)!r} lies inside the Zarr store {str(folder)!r} (it holds "
                f"{marker}); writing there would add to that store, also with "
                "overwrite=True (CLI: --overwrite). Choose a path outside it."
            )


def check_folder_exists(path: Path, *, what: str) -> None:
    """Raise OutputNotWritableError if the folder that would hold ``path`` does not exist
    (a typo in a folder name is reported, not created); ``what`` names the option."""
    folder = path.absolute().parent
    if not folder.is_dir():
        kind = "is not a folder" if os.path.lexists(folder) else "does not exist"
        raise OutputNotWritableError(
            f"{what} {str(path)!r} cannot be written: the folder {str(folder)!r} {kind}. "
            "Create it first (mkdir -p) or choose another path."
        )


def check_writable_folder(folder: Path, *, out: Path | None = None,
                          what: str = "The output path (CLI: --out)") -> None:
    """Raise OutputNotWritableError unless a probe file can be created in ``folder`` (or
    its nearest existing ancestor; permission bits do not bind root) and ``out``'s name is
    not too long for the file system."""
    target = out if out is not None else folder
    ancestor = nearest_existing(folder)
    if not ancestor.is_dir():
        raise OutputNotWritableError(
            f"{what} {str(target)!r} cannot be created: "
            f"{str(ancestor)!r} is a file, not a folder. Choose another path."
        )
    reason = None if os.access(ancestor, os.W_OK | os.X_OK) else "permission denied"
    if reason is None:
        try:
            fd, probe = tempfile.mkstemp(prefix=".daskstraggle-probe-", dir=ancestor)
            os.close(fd)
            os.unlink(probe)
        except OSError as err:
            reason = err.strerror or type(err).__name__
    if reason is not None:
        raise OutputNotWritableError(
            f"{what} {str(target)!r} cannot be written: the folder "
            f"{str(ancestor)!r} is not writable ({reason}). Choose another path or fix the "
            "folder's permissions."
        )
    if out is not None:
        _check_name_length(out, ancestor, what)


#: Bytes a temporary sibling's name adds (``.NAME.tmp-PID-TAG``, see write_atomically).
_STAGING_BYTES = len("..tmp-") + 7 + 1 + 8


def _check_name_length(out: Path, folder: Path, what: str) -> None:
    """Raise OutputNotWritableError if ``out``'s temporary sibling's name is too long."""
    try:
        limit = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # not POSIX, or no such limit
        return
    size = len(os.fsencode(out.name))
    if size + _STAGING_BYTES > limit:
        raise OutputNotWritableError(
            f"{what} {str(out)!r} cannot be written: its name has {size} bytes, and the file "
            f"system takes names of at most {limit} ({limit - _STAGING_BYTES} here: the "
            "write goes through a temporary name a little longer). Choose a shorter name."
        )


def write_atomically(out: Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` on a temporary sibling of ``out``, then put it in place.

    An existing ``out`` is swapped with it atomically where Linux offers it (a kill leaves
    the old or the new store), else by two renames; the replaced store is then deleted, and
    so are the leftovers of earlier saves whose process is gone.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staged, old = (out.parent / f".{out.name}.{kind}-{tag}" for kind in ("tmp", "old"))
    try:  # whichever of the two names still exists at the end is a leftover
        write(staged)
        if not os.path.lexists(out):
            staged.rename(out)
        elif _exchange(staged, out):  # the temporary's name now holds the replaced store
            staged.rename(old)
        else:
            out.rename(old)
            try:
                staged.rename(out)
            except BaseException:
                if not os.path.lexists(out):
                    old.rename(out)
                raise
    finally:
        for leftover in (staged, old, *_stale_leftovers(out)):
            if os.path.lexists(leftover):
                discard(leftover)
    return out


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2``); False where not supported."""
    if sys.platform != "linux":
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def _stale_leftovers(out: Path) -> list[Path]:
    """Temporaries and replaced stores of ``out`` whose writing process is gone."""
    pattern = re.compile(rf"\.{re.escape(out.name)}\.(?:tmp|old)-(\d+)-[0-9a-f]{{8}}"
                         rf"|\.{re.escape(out.name)}\.old-[0-9a-f]{{8}}")
    try:
        found = [(p, pattern.fullmatch(p.name)) for p in out.parent.iterdir()]
    except OSError:
        return []
    return [p for p, match in found
            if match is not None and (match.group(1) is None or not _alive(int(match.group(1))))]


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (this one included: a save on another thread)."""
    try:
        os.kill(pid, 0)  # signal 0: only asks; another user's process: PermissionError
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


@contextlib.contextmanager
def removed_on_error(paths: Iterable[str | os.PathLike[str] | None]) -> Iterator[None]:
    """Delete, if the block raises, each of ``paths`` that did not exist when it began."""
    new = [Path(p) for p in paths if p is not None and not os.path.lexists(p)]
    try:
        yield
    except BaseException:
        for path in new:
            if os.path.lexists(path):
                discard(path)
        raise


def discard(path: Path) -> bool:
    """Delete a file or folder tree, retrying; warn and return False if it stays."""
    error: OSError | None = None
    for _ in range(_DISCARD_ATTEMPTS):
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:
            pass
        except OSError as err:
            error = err
        if not os.path.lexists(path):
            return True
    warnings.warn(
        f"Could not delete {str(path)!r}, a temporary or replaced output ({error}); "
        "delete it by hand.",
        StraggleWarning,
        stacklevel=3,
    )
    return False
