"""The partition format: the row block that kernels consume and the matrix statistics.

Kernels never materialise a float copy of a whole :class:`Block`: :meth:`Block.tiles`
converts it one cache-sized tile of rows at a time.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskstraggle._packing import packed_width, unpack_dosages
from daskstraggle.errors import InvalidDataError

__all__ = ["TILE_BYTES", "Block", "MatrixStats", "check_float_range"]

#: Float64 bounds that the data must respect (:func:`check_float_range` says why):
#: ``_SQUARE_FLOOR`` keeps the rounding of subnormal products below ``n * 2**-78`` of a
#: column's sum of squares.
_SQUARE_FLOOR = float(np.finfo(np.float64).tiny) * 2.0**26
_SUM_FLOOR = float(np.sqrt(_SQUARE_FLOOR))
_SUM_CEILING = float(np.sqrt(np.finfo(np.float64).max / 1024))
_FLOAT_MAX = float(np.finfo(np.float64).max)
_FLOAT_TINY = float(np.finfo(np.float64).tiny)

#: Target size in bytes of one float64 tile of rows (fits in L2 cache on common CPUs).
TILE_BYTES = 1 << 19


@dataclass(frozen=True, eq=False, slots=True)
class Block:
    """Rows ``[start, start + n_rows)`` of a matrix, as stored on a worker.

    Parameters
    ----------
    values : ndarray of shape (n_rows, n_features)
        Stored values. Floating point, or a signed integer dtype for genotype
        dosages where negative entries mark missing calls.
    start : int, default=0
        Global index of the first row.
    y : ndarray of shape (n_rows,) or None, default=None
        Labels (float64) of the rows, if the matrix has labels.
    fill : ndarray of shape (n_rows,) or None, default=None
        Value that replaces missing (negative) entries of integer blocks, per row.
        None means the block has no missing entries.
    center : ndarray of shape (n_rows,) or None, default=None
        Subtracted from every entry of a row after filling.
    scale : ndarray of shape (n_rows,) or None, default=None
        Multiplies every entry of a row after centring.
    packed_columns : int or None, default=None
        Set when ``values`` holds 2-bit genotype codes (uint8, four calls per byte, see
        :mod:`daskstraggle._packing`): the number of columns they encode.
    """

    values: np.ndarray
    start: int = 0
    y: np.ndarray | None = None
    fill: np.ndarray | None = None
    center: np.ndarray | None = None
    scale: np.ndarray | None = None
    packed_columns: int | None = None

    def __post_init__(self) -> None:
        """Check that packed values have the width their column count needs."""
        if self.packed_columns is not None and (
            self.values.dtype != np.uint8
            or self.values.shape[1] != packed_width(self.packed_columns)
        ):
            raise ValueError(
                f"packed values of {self.packed_columns} columns must be uint8 of width "
                f"{packed_width(self.packed_columns)}; got {self.values.dtype} of shape "
                f"{self.values.shape}"
            )

    @property
    def is_packed(self) -> bool:
        """Whether ``values`` holds 2-bit genotype codes."""
        return self.packed_columns is not None

    @property
    def n_rows(self) -> int:
        """Number of rows in the block."""
        return int(self.values.shape[0])

    @property
    def n_features(self) -> int:
        """Number of columns of the matrix (samples of packed genotypes)."""
        if self.packed_columns is not None:
            return int(self.packed_columns)
        return int(self.values.shape[1])

    @property
    def stop(self) -> int:
        """Global index one past the last row."""
        return self.start + self.n_rows

    @property
    def nbytes(self) -> int:
        """Bytes held by the stored values (the packed bytes of packed genotypes)."""
        return int(self.values.nbytes)

    def slice(self, a: int, b: int) -> Block:
        """Return rows ``[a, b)`` (block-local) as a block that shares the stored values."""
        if not 0 <= a <= b <= self.n_rows:
            raise ValueError(f"rows [{a}, {b}) are outside a block of {self.n_rows} rows")
        per_row = {name: None if (v := getattr(self, name)) is None else v[a:b]
                   for name in ("y", "fill", "center", "scale")}
        return dataclasses.replace(self, values=self.values[a:b], start=self.start + a, **per_row)

    def tile_rows(self, tile_bytes: int = TILE_BYTES) -> int:
        """Return the number of rows per tile so a float64 tile has about ``tile_bytes``."""
        return max(1, tile_bytes // (8 * max(1, self.n_features)))

    def raw_tile(self, a: int, b: int) -> np.ndarray:
        """Return the stored rows ``[a, b)`` (block-local), unpacked to int8 if packed."""
        if self.packed_columns is not None:
            return unpack_dosages(self.values[a:b], self.packed_columns)
        return self.values[a:b]

    def tiles(self, tile_rows: int | None = None) -> Iterator[tuple[int, int, np.ndarray]]:
        """Yield ``(a, b, tile)`` with ``tile`` the float64 rows ``[a, b)`` (block-local).

        Tiles of a float64 block without transforms are views; otherwise each tile is
        converted (unpacked, filled, centred, scaled) on its own, so at most one
        tile-sized float copy exists at a time.

        Parameters
        ----------
        tile_rows : int or None, default=None
            Rows per tile; None picks a cache-sized tile (:meth:`tile_rows`).
        """
        step = tile_rows or self.tile_rows()
        plain = self.values.dtype == np.float64 and all(
            per_row is None for per_row in (self.fill, self.center, self.scale))
        for a in range(0, self.n_rows, step):
            b = min(a + step, self.n_rows)
            raw = self.raw_tile(a, b)
            if plain:
                yield a, b, raw
                continue
            tile = raw.astype(np.float64)
            if self.fill is not None:
                missing = raw < 0
                if missing.any():
                    tile[missing] = np.broadcast_to(self.fill[a:b, None], raw.shape)[missing]
            if self.center is not None:
                tile -= self.center[a:b, None]
            if self.scale is not None:
                tile *= self.scale[a:b, None]
            yield a, b, tile


@dataclass(frozen=True, slots=True)
class MatrixStats:
    """Column sums and squared norm of a whole matrix (after per-row transforms).

    Parameters
    ----------
    n_samples : int
        Number of rows.
    column_sums : ndarray of shape (n_features,)
        Sum of each column.
    sq_norm : float
        Squared Frobenius norm of the (uncentred) matrix.
    label_counts : dict of float to int or None, default=None
        Count of each distinct label value, when there are at most a few distinct
        values (classification) — None for regression targets or no labels.
    label_sum : float, default=0.0
        Sum of the labels (0 without labels).
    column_sq_dev : ndarray of shape (n_features,) or None, default=None
        Sum over rows of the squared deviation from the column mean, per column,
        accumulated stably (Chan et al.'s pairwise update). None: derived from
        ``sq_norm``, which cancels badly when the means dwarf the spread.
    column_max_abs : ndarray of shape (n_features,) or None, default=None
        Largest absolute value of each column, for floating-point matrices stored without
        per-row transforms (None otherwise): :func:`check_float_range` reads it.
    label_max_abs : float, default=0.0
        Largest absolute label (0 without labels).
    column_called : ndarray of int of shape (n_features,) or None, default=None
        Genotype blocks (int8 dosages or packed codes): each column's non-missing calls;
        None for other data.
    rows_without_call : tuple of int, default=()
        Genotype blocks: the rows (``Block.start`` + local index) with no call at all.
    """

    n_samples: int
    column_sums: np.ndarray
    sq_norm: float
    label_counts: dict[float, int] | None = None
    label_sum: float = 0.0
    column_sq_dev: np.ndarray | None = None
    column_max_abs: np.ndarray | None = None
    label_max_abs: float = 0.0
    column_called: np.ndarray | None = None
    rows_without_call: tuple[int, ...] = ()

    @property
    def n_features(self) -> int:
        """Number of columns."""
        return int(self.column_sums.shape[0])

    @property
    def column_means(self) -> np.ndarray:
        """Mean of each column, shape (n_features,)."""
        return self.column_sums / max(self.n_samples, 1)

    @property
    def centered_sq_norm(self) -> float:
        """Squared Frobenius norm of the column-centred matrix."""
        if self.column_sq_dev is not None:
            return float(self.column_sq_dev.sum())
        mu = self.column_means
        return float(self.sq_norm - self.n_samples * mu @ mu)

    def __add__(self, other: MatrixStats) -> MatrixStats:
        """Combine the statistics of two disjoint row ranges."""
        counts = None
        if self.label_counts is not None and other.label_counts is not None:
            counts = dict(Counter(self.label_counts) + Counter(other.label_counts))
            counts = counts if len(counts) <= _MAX_CLASSES else None
        with np.errstate(over="ignore", invalid="ignore"):  # see check_float_range
            sq_dev = _both(self.column_sq_dev, other.column_sq_dev, lambda a, b: _combine_sq_dev(
                self.n_samples, self.column_sums, a, other.n_samples, other.column_sums, b))
        return MatrixStats(
            n_samples=self.n_samples + other.n_samples,
            column_sums=self.column_sums + other.column_sums,
            sq_norm=self.sq_norm + other.sq_norm,
            label_counts=counts,
            label_sum=self.label_sum + other.label_sum,
            column_sq_dev=sq_dev,
            column_max_abs=_both(self.column_max_abs, other.column_max_abs, np.maximum),
            label_max_abs=max(self.label_max_abs, other.label_max_abs),
            column_called=_both(self.column_called, other.column_called, np.add),
            rows_without_call=self.rows_without_call + other.rows_without_call,
        )


def _both(a: np.ndarray | None, b: np.ndarray | None, combine: Any) -> np.ndarray | None:
    """``combine(a, b)``, or None unless both are known."""
    return None if a is None or b is None else combine(a, b)


def check_float_range(stats: MatrixStats, *, caller: str, labels: bool = False) -> None:
    """Refuse data so large or so small that float64 arithmetic on it fails.

    The solvers form sums of squares of the values and squared norms of such sums: the
    matrix's sum of squares (``stats.sq_norm``) must lie between about 1.2e-150 and
    4.2e152 (so its square neither overflows nor underflows), and the square of each
    column's largest ``|value|`` (when known, see :attr:`MatrixStats.column_max_abs`) must
    be at least 1.5e-300 (float64's smallest normal number times ``2**26``) unless the
    column is all zeros. With ``labels=True``, ``n`` times the largest squared label must
    be at most 4.2e152 and that square at least 1.5e-300.

    Parameters
    ----------
    stats : MatrixStats
        Statistics of the whole matrix.
    caller : str
        The problem's name, for the message.
    labels : bool, default=False
        Check the labels too.

    Raises
    ------
    InvalidDataError
        If a bound is broken; the message names the bound and a power of ten that
        brings the data to a safe scale.
    """
    sq = float(stats.sq_norm)
    high = None if stats.column_max_abs is None else np.asarray(stats.column_max_abs)
    largest = _largest(stats)
    if not sq <= _SUM_CEILING:
        raise InvalidDataError(
            f"The values of the matrix of {caller} are too large for float64: the sum of "
            f"their squares is {sq:.3g}, above {_SUM_CEILING:.3g} (the solvers square such "
            f"sums, and float64 overflows at {_FLOAT_MAX:.3g}); divide the data by "
            f"{_power_of_ten(largest)} or so first."
        )
    if sq < _SUM_FLOOR and (largest > 0 or np.any(stats.column_sums != 0)):
        raise InvalidDataError(
            f"The values of the matrix of {caller} are too small for float64: the sum of "
            f"their squares is {sq:.3g}, below {_SUM_FLOOR:.3g} (the solvers square such "
            f"sums, and float64's normal numbers end at {_FLOAT_TINY:.3g}); multiply the "
            f"data by {_power_of_ten(1.0 / largest if largest > 0 else np.inf)} or so first."
        )
    small = np.flatnonzero((high > 0) & (high < np.sqrt(_SQUARE_FLOOR))) \
        if high is not None else np.empty(0, dtype=np.intp)
    if high is not None and len(small):
        j = int(small[0])
        raise InvalidDataError(
            f"Column {j} of the matrix of {caller} is too small for float64: its largest "
            f"|value| is {high[j]:.3g}, whose square is below {_SQUARE_FLOOR:.3g} (float64's "
            f"normal numbers end at {_FLOAT_TINY:.3g}, and sums of smaller squares lose "
            f"precision); multiply the data by {_power_of_ten(1.0 / high[j])} or so first."
        )
    if labels:
        _check_label_range(stats, caller)


def _check_label_range(stats: MatrixStats, caller: str) -> None:
    """The labels' part of :func:`check_float_range`."""
    top = float(stats.label_max_abs)
    if top > np.sqrt(_SUM_CEILING / max(stats.n_samples, 1)):
        raise InvalidDataError(
            f"The labels of {caller} are too large for float64: the largest |label| is "
            f"{top:.3g}, and {stats.n_samples} squares of that size pass {_SUM_CEILING:.3g}; "
            f"divide the labels by {_power_of_ten(top)} or so first."
        )
    if 0 < top < np.sqrt(_SQUARE_FLOOR):
        raise InvalidDataError(
            f"The labels of {caller} are too small for float64: the largest |label| is "
            f"{top:.3g}, whose square is below {_SQUARE_FLOOR:.3g}; multiply the labels by "
            f"{_power_of_ten(1.0 / top)} or so first."
        )


def _largest(stats: MatrixStats) -> float:
    """Largest ``|value|`` of the matrix: known, else the root mean square (maybe inf)."""
    if stats.column_max_abs is not None and stats.column_max_abs.size:
        return float(np.max(stats.column_max_abs))
    count = max(stats.n_samples * stats.n_features, 1)
    with np.errstate(over="ignore"):
        return float(np.sqrt(stats.sq_norm / count))


def _power_of_ten(value: float) -> str:
    """``"1e+150"`` for ``value`` near 1e150 (its order of magnitude), as text."""
    if not np.isfinite(value) or value <= 0:
        return "a large power of ten"
    return f"1e{int(np.floor(np.log10(value))):+d}"


def _combine_sq_dev(
    n_a: int, sum_a: np.ndarray, dev_a: np.ndarray, n_b: int, sum_b: np.ndarray, dev_b: np.ndarray
) -> np.ndarray:
    """Squared deviations of the union of two row sets (Chan, Golub & LeVeque 1979)."""
    if n_a == 0:
        return dev_b.copy()
    if n_b == 0:
        return dev_a.copy()
    delta = sum_b / n_b - sum_a / n_a
    return dev_a + dev_b + delta * delta * (n_a * n_b / (n_a + n_b))


_MAX_CLASSES = 16
