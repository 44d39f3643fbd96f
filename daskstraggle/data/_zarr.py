"""Zarr reads that refuse damaged stores: absent chunks, undecodable chunks, bad metadata.

Zarr reads an absent chunk as the array's fill value, silently, and lets a decoding error
or a metadata parsing error escape as a long traceback. The helpers here turn each into one
:class:`~daskstraggle.errors.CorruptDataError` line naming the store and the array. They
touch only the keys they need: :func:`check_chunks` tests one storage key per chunk (shard,
for sharded arrays) of the rows read, so a worker checks its own partition and the client
never lists a whole store.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskstraggle.errors import CorruptDataError, DataNotFoundError, MissingChunksError

__all__ = [
    "MISSING_CHUNKS",
    "GroupArrays",
    "absent_keys",
    "check_chunks",
    "chunk_keys",
    "describe",
    "group_arrays",
    "open_array",
    "open_node",
    "read",
    "read_rows",
    "read_selection",
]

#: Values of ``missing_chunks``: refuse absent chunks, or read them as the fill value.
MISSING_CHUNKS = ("error", "fill")

#: Metadata documents of Zarr v3 and v2 nodes.
_METADATA_KEYS = ("zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata")

#: Existence checks issued at once.
_BATCH = 256


def describe(path: str, name: str | None) -> str:
    """Return how messages name an array: ``array 'X' in the Zarr store '/p/g.zarr'``."""
    if name is None:
        return f"the Zarr array {path!r}"
    return f"array {name!r} in the Zarr store {path!r}"


def _reason(err: BaseException) -> str:
    """Return ``Type: first line of the message`` (messages stay on one line)."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


# ---------------------------------------------------------------------------- chunks
def chunk_keys(array: Any, start: int, stop: int) -> list[str]:
    """Return the storage keys (relative to the array) of the chunks holding rows ``[start, stop)``.

    Every chunk along the other dimensions is included. For sharded arrays the keys are
    those of the shards.
    """
    grid = tuple(array.metadata.chunk_grid.chunk_shape)
    rows = range(start // grid[0], -(-stop // grid[0]))
    others = [range(-(-int(n) // int(c))) for n, c in zip(array.shape[1:], grid[1:], strict=True)]
    encode = array.metadata.encode_chunk_key
    return [encode(coords) for coords in itertools.product(rows, *others)]


def absent_keys(array: Any, keys: Iterable[str]) -> list[str]:
    """Return the keys (relative to the array) that do not exist in its store."""
    from zarr.core.sync import sync

    store_path = array.store_path
    keys = list(keys)
    fs = getattr(store_path.store, "fs", None)
    if fs is not None:  # a remote store: answer from the store, not from listings cached earlier
        fs.invalidate_cache()

    async def exists() -> list[bool]:
        found: list[bool] = []
        for i in range(0, len(keys), _BATCH):
            batch = keys[i : i + _BATCH]
            found += await asyncio.gather(*[(store_path / key).exists() for key in batch])
        return found

    return [key for key, ok in zip(keys, sync(exists()), strict=True) if not ok]


def check_chunks(array: Any, start: int, stop: int, *, what: str, missing_chunks: str) -> None:
    """Refuse rows ``[start, stop)`` of ``array`` if a chunk holding them is absent.

    Parameters
    ----------
    array : zarr.Array
        The array about to be read.
    start, stop : int
        Row range (first dimension) about to be read.
    what : str
        How the message names the array (see :func:`describe`).
    missing_chunks : {"error", "fill"}
        ``"fill"`` skips the check: absent chunks read as the fill value.

    Raises
    ------
    MissingChunksError
        If a chunk is absent and ``missing_chunks="error"``.
    """
    if missing_chunks == "fill":
        return
    keys = chunk_keys(array, start, stop)
    absent = absent_keys(array, keys)
    if absent:
        raise MissingChunksError(_absent_message(what, absent, len(keys), array))


def _absent_message(what: str, absent: list[str], n_keys: int, array: Any) -> str:
    return (
        f"{len(absent)} of {n_keys} chunks of {what} are missing (first: "
        f"{absent[0]!r}). Restore the store, or if it was written with "
        "write_empty_chunks=False pass missing_chunks='fill' (CLI: --missing-chunks fill) "
        f"to read absent chunks as the fill value {_plain(array.fill_value)!r}."
    )


# ---------------------------------------------------------------------------- reads
def read(array: Any, selection: Any, *, what: str) -> Any:
    """Return ``array[selection]``, or raise one line if a chunk cannot be decoded.

    Raises
    ------
    CorruptDataError
        If zarr or a codec fails to decode a chunk (I/O errors propagate unchanged).
    """
    try:
        return array[selection]
    except (OSError, MemoryError):
        raise
    except Exception as err:  # codecs raise RuntimeError, ValueError, TypeError, ...
        raise CorruptDataError(
            f"{what} could not be decoded ({_reason(err)}): a chunk is corrupt. Restore the "
            "store from a good copy or write it again."
        ) from err


def open_array(path: str, name: str | None,
               storage_options: dict[str, Any] | None = None) -> Any:
    """Open the array ``name`` of the store at ``path`` (the store itself if None), read-only.

    ``storage_options`` (None for a local path) opens ``path`` as an fsspec URL.

    Raises
    ------
    CorruptDataError
        If its metadata cannot be read (I/O errors propagate unchanged).
    DataNotFoundError
        If ``path`` is a URL and no store is found there.
    """
    import zarr

    options = {} if storage_options is None else {"storage_options": storage_options}
    try:
        if name is None:
            return zarr.open_array(path, mode="r", **options)
        return zarr.open_group(path, mode="r", **options)[name]
    except Exception as err:  # JSONDecodeError, KeyError, TypeError, ValueError, ...
        if storage_options is None or not isinstance(err, _node_not_found()):
            if isinstance(err, OSError | MemoryError):
                raise
            raise CorruptDataError(_bad_metadata(describe(path, name), err)) from err
        reason = _reason(err)
    raise _detached(DataNotFoundError(
        f"{describe(path, name)} is not found by the process reading it ({reason}). Each "
        "worker opens the store itself: give a URL every worker reaches (a memory:// store "
        "lives in one process: use it with runtime='local' or threaded workers)."
    ))


def _detached(err: BaseException) -> BaseException:
    """Return ``err``, raised outside any ``except`` block by the caller: no context.

    On a worker an error travels pickled with its cause and context, and zarr's and
    botocore's exceptions do not unpickle (the client would get a bare ``Exception``).
    """
    err.__cause__ = err.__context__ = None
    return err


def _node_not_found() -> tuple[type[BaseException], ...]:
    import zarr.errors

    return tuple(getattr(zarr.errors, n) for n in ("NodeNotFoundError", "GroupNotFoundError",
                                                   "ArrayNotFoundError")
                 if hasattr(zarr.errors, n))


def read_rows(path: str, name: str | None, start: int, stop: int, *, missing_chunks: str,
              storage_options: dict[str, Any] | None = None) -> Any:
    """Read rows ``[start, stop)`` of an array where this runs, refusing damaged chunks.

    Opens the store (a local path, or an fsspec URL with ``storage_options``), checks the
    chunks of the rows (:func:`check_chunks`) and reads them (:func:`read`). For a URL,
    an I/O error (connection, credentials) becomes one line saying that the process
    reading (a worker) needs the client's access to the store.

    Raises
    ------
    MissingChunksError, CorruptDataError
        If a chunk of the rows is absent or cannot be decoded.
    DataNotFoundError
        If a remote store cannot be reached or read from here.
    """
    def body(array: Any, what: str) -> Any:
        check_chunks(array, start, stop, what=what, missing_chunks=missing_chunks)
        return read(array, slice(start, stop), what=what)

    return _guarded_read(path, name, storage_options, body)


def read_selection(path: str, name: str | None, rows: np.ndarray, columns: np.ndarray | None,
                   *, missing_chunks: str,
                   storage_options: dict[str, Any] | None = None) -> np.ndarray:
    """Read the rows ``rows`` (and the columns ``columns``) of an array, where this runs.

    An orthogonal selection: ``array[rows][:, columns]``, in the order given (repeats
    allowed). Only the chunks holding a selected (row, column) are checked and read, so a
    sparse selection reads no chunk it does not need. Errors as :func:`read_rows`.

    Parameters
    ----------
    path, name : str
        Store and array (see :func:`open_array`).
    rows : ndarray of int of shape (n_rows,)
        Indices along the first dimension.
    columns : ndarray of int of shape (n_columns,) or None
        Indices along the second dimension (None: all).
    missing_chunks : {"error", "fill"}
        See :func:`check_chunks`.
    storage_options : dict or None, default=None
        A URL's fsspec options.

    Returns
    -------
    values : ndarray
        The selection; the other dimensions whole.
    """
    unique_rows, row_order = np.unique(rows, return_inverse=True)
    unique_cols, col_order = (None, None) if columns is None else np.unique(
        columns, return_inverse=True)

    def body(array: Any, what: str) -> Any:
        if missing_chunks == "error":
            keys = selection_keys(array, unique_rows, unique_cols)
            absent = absent_keys(array, keys)
            if absent:
                raise MissingChunksError(_absent_message(what, absent, len(keys), array))
        values = _read_runs(array, unique_rows, unique_cols, what)
        if len(unique_rows) != len(rows) or (unique_rows != rows).any():
            values = values[row_order]
        if unique_cols is not None and (len(unique_cols) != len(columns)
                                        or (unique_cols != columns).any()):
            values = values[:, col_order]
        return values

    return _guarded_read(path, name, storage_options, body)


def _read_runs(array: Any, rows: np.ndarray, columns: np.ndarray | None, what: str) -> np.ndarray:
    """Read sorted unique ``rows`` (and ``columns``) as slices over runs of touched chunks.

    A slice of whole chunks then a numpy take is several times faster than zarr's
    orthogonal selection with integer arrays, and reads the same chunks: a run is a series
    of consecutive row chunks that each hold a selected row.
    """
    grid = int(array.metadata.chunk_grid.chunk_shape[0])
    chunk = rows // grid
    starts = np.flatnonzero(np.diff(chunk, prepend=-2) > 1)  # a chunk skipped: a new run
    cols: tuple[slice, ...] = ()
    if columns is not None and array.ndim > 1:
        cols = (slice(int(columns[0]), int(columns[-1]) + 1),)
    parts = []
    for a, b in zip(starts, [*starts[1:], len(rows)], strict=True):
        low, high = int(rows[a]), int(rows[b - 1]) + 1
        block = np.asarray(read(array, (slice(low, high), *cols), what=what))
        parts.append(block[rows[a:b] - low])
    values = np.concatenate(parts) if len(parts) > 1 else parts[0]
    if columns is not None and array.ndim > 1:
        values = values[:, columns - columns[0]]
    return values


def selection_keys(array: Any, rows: np.ndarray, columns: np.ndarray | None) -> list[str]:
    """Return the storage keys of the chunks (shards) holding the selected rows and columns.

    ``rows`` and ``columns`` are indices along the first two dimensions (``columns``
    None: every chunk); every chunk along the other dimensions is included.
    """
    grid = tuple(array.metadata.chunk_grid.chunk_shape)
    every = [range(-(-int(n) // int(c))) for n, c in zip(array.shape, grid, strict=True)]
    axes: list[Iterable[int]] = [np.unique(np.asarray(rows) // grid[0]).tolist(), *every[1:]]
    if columns is not None and array.ndim > 1:
        axes[1] = np.unique(np.asarray(columns) // grid[1]).tolist()
    encode = array.metadata.encode_chunk_key
    return [encode(coords) for coords in itertools.product(*axes)]


def _guarded_read(path: str, name: str | None, storage_options: dict[str, Any] | None,
                  body: Any) -> Any:
    """Open the array and run ``body(array, what)``, turning remote I/O errors into one line."""
    what = describe(path, name)
    try:
        array = open_array(path, name, storage_options)
        return body(array, what)
    except DataNotFoundError:
        raise
    except (OSError, MemoryError) as err:
        if storage_options is None or isinstance(err, MemoryError):
            raise
        reason = _reason(err)
    raise _detached(DataNotFoundError(
        f"{what} cannot be read by the process reading it ({reason}). Each worker opens the "
        "store itself: it needs the same fsspec packages, network access and credentials as "
        "the client (see docs/remote-stores.md)."
    ))


def _bad_metadata(what: str, err: BaseException) -> str:
    return (
        f"The metadata of {what} cannot be read ({_reason(err)}): the store is damaged. "
        "Restore it from a good copy or write it again."
    )


# ---------------------------------------------------------------------------- groups
@dataclass(frozen=True, slots=True)
class GroupArrays:
    """The arrays of a Zarr group, and the members whose metadata cannot be read.

    Attributes
    ----------
    path : str
        Path of the store (for messages).
    arrays : dict of str to zarr.Array
        Readable arrays, by name.
    corrupt : dict of str to str
        Members with unreadable metadata: name to reason.
    """

    path: str
    arrays: dict[str, Any]
    corrupt: dict[str, str]

    @property
    def names(self) -> list[str]:
        """Every array name, readable or not, sorted."""
        return sorted({*self.arrays, *self.corrupt})

    def __contains__(self, name: object) -> bool:
        return name in self.arrays or name in self.corrupt

    def __getitem__(self, name: str) -> Any:
        """Return the array ``name``.

        Raises
        ------
        CorruptDataError
            If its metadata cannot be read.
        KeyError
            If the group has no such array.
        """
        if name in self.corrupt:
            raise CorruptDataError(
                f"The metadata of {describe(self.path, name)} cannot be read "
                f"({self.corrupt[name]}): the store is damaged. Restore it from a good copy "
                "or write it again."
            )
        return self.arrays[name]


def group_arrays(group: Any, path: str) -> GroupArrays:
    """Open each direct member of ``group`` that is an array; note those that cannot be read.

    Lists one level of the group (as zarr's own ``array_keys`` does); a member whose
    metadata document exists but does not parse is recorded in ``corrupt`` instead of
    failing the whole group.
    """
    import zarr
    from zarr.core.sync import collect_aiterator

    store_path = group.store_path
    names = collect_aiterator(store_path.store.list_dir(store_path.path))
    arrays: dict[str, Any] = {}
    corrupt: dict[str, str] = {}
    for name in sorted(set(names) - set(_METADATA_KEYS)):
        try:
            node = group[name]
        except (OSError, MemoryError):
            raise
        except Exception as err:  # KeyError when not a node; parse errors when damaged
            if _has_metadata(store_path / name):
                corrupt[name] = _reason(err)
            continue
        if isinstance(node, zarr.Array):
            arrays[name] = node
    return GroupArrays(path, arrays, corrupt)


def _has_metadata(store_path: Any) -> bool:
    from zarr.core.sync import sync

    async def any_exists() -> bool:
        found = await asyncio.gather(*[(store_path / k).exists() for k in _METADATA_KEYS[:3]])
        return any(found)

    return bool(sync(any_exists()))


def open_node(path: str, storage_options: dict[str, Any] | None = None) -> Any:
    """Open the Zarr array or group at ``path`` read-only.

    ``storage_options`` (None for a local path) opens ``path`` as an fsspec URL.

    Raises
    ------
    CorruptDataError
        If ``path`` holds a Zarr metadata document that cannot be read.
    Exception
        Whatever zarr raises when ``path`` is not a Zarr store at all (the caller words it).
    """
    import zarr
    from zarr.storage import FsspecStore, LocalStore, StorePath

    options = {} if storage_options is None else {"storage_options": storage_options}
    try:
        return zarr.open(path, mode="r", **options)
    except (OSError, MemoryError):
        raise
    except Exception as err:
        store = (LocalStore(path, read_only=True) if storage_options is None
                 else FsspecStore.from_url(path, storage_options=storage_options,
                                           read_only=True))
        if _has_metadata(StorePath(store)):
            raise CorruptDataError(_bad_metadata(f"the Zarr store {path!r}", err)) from err
        raise
