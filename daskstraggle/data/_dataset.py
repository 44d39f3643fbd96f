"""Which store rows and columns an ``xarray.Dataset`` in VCF Zarr layout shows.

:func:`store_view` recovers them without reading a genotype, from a lazily indexed variable's
key or from a selection-only dask graph evaluated on ``arange(n)`` (checked against the
store's values).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["StoreView", "store_view"]

#: Graph layers that only open or select (their names without the token).
_SELECTION_LAYERS = re.compile(r"^(original-open_dataset-.+|open_dataset-.+|getitem|"
                               r"rechunk-(merge|split)|shuffle-.+|concatenate)$")
#: 1-D variables whose selection gives a dimension's indices, in order of preference.
_PROBES = {"variants": ("variant_position", "variant_contig", "variant_id"),
           "samples": ("sample_id",)}


@dataclass(frozen=True, slots=True)
class StoreView:
    """A Dataset's genotypes as a selection of the local VCF Zarr store at ``path``: its
    variants and samples shown, in order (None: all, in order)."""

    path: str
    variant_index: np.ndarray | None
    sample_index: np.ndarray | None


def store_view(ds: Any) -> StoreView | None:
    """Return the store and selection behind ``ds["call_genotype"]`` (a Dataset in VCF Zarr
    layout), or None when it is not a plain selection of a local store's ``call_genotype``
    (in memory, computed, remote)."""
    var = ds["call_genotype"].variable
    lazy = _lazy_key(var._data)
    view: StoreView | None
    if lazy is not None:
        array, key = lazy
        root = _store_root(array)
        if (root is None or len(key) != 3 or not _is_full(key[2], array.shape[2])
                or not _is_genotypes(array)):
            return None
        indices = [_positions(k, n) for k, n in zip(key[:2], array.shape[:2], strict=True)]
        if any(i is _UNKNOWN for i in indices):
            return None
        view = StoreView(root, *indices)
    else:
        view = _dask_view(ds)
    return view if view is not None and _consistent(ds, view) else None


def _dask_view(ds: Any) -> StoreView | None:
    data = ds["call_genotype"].variable._data
    array = _dask_root(data)
    if array is None:
        return None
    root = _store_root(array)
    if root is None or ds.sizes.get("ploidy") != array.shape[2] or not _is_genotypes(array):
        return None
    selected = {dim: _selected(ds, dim) for dim in ("variants", "samples")}
    if _has_getitem(data) != any(selected.values()):
        return None  # call_genotype was indexed apart from the rest (or the reverse)
    indices = [None if ds.sizes[dim] == n and not selected[dim] else _probe(ds, dim, n, root)
               for dim, n in zip(("variants", "samples"), array.shape[:2], strict=True)]
    if any(i is _UNKNOWN for i in indices):
        return None
    return StoreView(root, *indices)


def _selected(ds: Any, dim: str) -> bool:
    """Whether any 1-D variable along ``dim`` went through a selection (or is unknown)."""
    for name in _PROBES[dim]:
        if name in ds.variables and _dask_root(ds[name].variable._data) is not None:
            return _has_getitem(ds[name].variable._data)
    return True  # no probe: cannot tell, so it must be recovered (and fails)


def _has_getitem(data: Any) -> bool:
    return any(_layer_name(k) == "getitem" for k in data.__dask_graph__().layers)


def _probe(ds: Any, dim: str, n: int, root: str) -> np.ndarray:
    """The store indices of ``dim`` from a 1-D variable's graph, checked against the store
    (``_UNKNOWN``: none found)."""
    for name in _PROBES[dim]:
        if name not in ds.variables or ds[name].dims != (dim,):
            continue
        data = ds[name].variable._data
        array = _dask_root(data)
        if array is None or array.shape != (n,) or _store_root(array) != root:
            continue
        index = _rerooted(data, n)
        if index is not None and _same_values(ds[name].values, array, index):
            return index
    return _UNKNOWN


def _rerooted(data: Any, n: int) -> np.ndarray | None:
    """Evaluate a selection graph (one root: :func:`_dask_root` took it) with its root
    replaced by ``arange(n)``."""
    import dask
    import dask.array as da
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

    graph = data.__dask_graph__()
    (root,) = [k for k in graph.layers if k.startswith("original-")]
    layers = dict(graph.layers)
    layers[root] = MaterializedLayer({root: np.arange(n, dtype=np.int64)})
    probe = da.Array(HighLevelGraph(layers, dict(graph.dependencies)), data.name,
                     data.chunks, dtype=np.int64)
    try:
        (index,) = dask.compute(probe, scheduler="sync")
    except Exception:  # a graph of another shape than the selections we know
        return None
    index = np.asarray(index)
    return index if index.shape == data.shape else None


def _same_values(values: np.ndarray, array: Any, index: np.ndarray) -> bool:
    stored = np.asarray(array.oindex[np.unique(index)])[np.searchsorted(np.unique(index),
                                                                       index)]
    if stored.dtype.kind in "OUST" or np.asarray(values).dtype.kind in "OUST":
        return [str(v) for v in stored] == [str(v) for v in np.asarray(values)]
    return np.array_equal(stored, np.asarray(values))


def _dask_root(data: Any) -> Any:
    """The zarr array at the root of a selection-only dask graph, or None."""
    if not hasattr(data, "__dask_graph__"):
        return None
    graph = data.__dask_graph__()
    if not all(_SELECTION_LAYERS.match(_layer_name(k)) for k in graph.layers):
        return None
    roots = [k for k in graph.layers if k.startswith("original-")]
    if len(roots) != 1:
        return None
    value = graph.layers[roots[0]][roots[0]]
    lazy = _lazy_key(value)
    if lazy is None or not all(_is_full(k, n) for k, n in zip(lazy[1], lazy[0].shape,
                                                               strict=True)):
        return None
    return lazy[0]


def _layer_name(key: str) -> str:
    return re.sub(r"-[0-9a-f]{32}$", "", key)


def _lazy_key(value: Any) -> tuple[Any, tuple[Any, ...]] | None:
    """(zarr array, indexer tuple) of xarray's lazily indexed wrapper of a zarr array."""
    from xarray.core import indexing

    while not isinstance(value, indexing.LazilyIndexedArray):
        inner = getattr(value, "array", None)
        if inner is None or inner is value:
            return None
        value = inner
    key = value.key
    wrapper = value.array
    array = getattr(wrapper, "_array", None)
    if (not isinstance(key, indexing.BasicIndexer | indexing.OuterIndexer) or array is None
            or type(wrapper).__name__ != "ZarrArrayWrapper"):
        return None
    return array, tuple(key.tuple)


def _store_root(array: Any) -> str | None:
    """The local directory of the group holding ``array`` (None: not a local store)."""
    from zarr.storage import LocalStore

    store = getattr(getattr(array, "store_path", None), "store", None)
    if not isinstance(store, LocalStore) or "/" in array.path.strip("/"):
        return None
    return str(Path(store.root).absolute())


def _is_genotypes(array: Any) -> bool:
    """Whether the zarr array is its store's ``call_genotype`` (not another array renamed)."""
    return str(array.path).strip("/") == "call_genotype" and len(array.shape) == 3


def _is_full(key: Any, n: int) -> bool:
    return isinstance(key, slice) and range(n)[key] == range(n)


#: What :func:`_positions` returns for an indexer it does not know.
_UNKNOWN = np.empty(0, dtype=np.int64)


def _positions(key: Any, n: int) -> np.ndarray | None:
    """The indices an indexer (slice or int array) selects of ``n``; None: all, in order;
    ``_UNKNOWN`` for another indexer."""
    if _is_full(key, n):
        return None
    if isinstance(key, slice):
        return np.arange(n, dtype=np.int64)[key]
    if isinstance(key, np.ndarray) and key.ndim == 1 and key.dtype.kind in "iu":
        return np.where(key < 0, key + n, key).astype(np.int64)
    return _UNKNOWN


def _consistent(ds: Any, view: StoreView) -> bool:
    """The view's shape is the Dataset's (a last guard against a wrong recovery)."""
    return all(index is None or len(index) == ds.sizes[dim] for dim, index in
               (("variants", view.variant_index), ("samples", view.sample_index)))
