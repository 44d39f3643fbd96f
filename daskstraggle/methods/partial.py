"""Partial recovery with RCS codes and age-aware ordering (Ozfatura et al., GLOBECOM 2020)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from daskstraggle._validation import check_choice, check_fraction, check_int
from daskstraggle.coding.rcs import RCS, IncrementalDecoder, default_degrees
from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods.base import Method, Placement, RoundSummary, WorkResult, WorkUnit
from daskstraggle.methods.coded import _DrawsPlacement
from daskstraggle.methods.options import MethodOption, parse_int_list
from daskstraggle.problems.base import KernelResult, combine

__all__ = ["ORDERINGS", "PartialRecovery"]

#: Ordering policies: static RCS, RCS-1 (shift by one each iteration), RCS-adaptive.
ORDERINGS = ("static", "shift", "age")


class PartialRecovery(_DrawsPlacement, Method):
    """Coded computation with partial recovery, tolerance ``q`` and age-aware ordering.

    The data is split into ``K = N`` partitions; worker ``i`` stores ``L = sum(degrees)``
    of them, drawn by the :class:`~daskstraggle.coding.RCS` code (each partition on ``L``
    workers). Each iteration a worker processes its list in the current order, sums
    consecutive runs of lengths ``degrees`` into codewords and sends each codeword as
    soon as it is computed. The coordinator row-reduces the codewords as they arrive;
    once ``ceil((1 - q) K)`` partitions are isolated it steps along their sum scaled by
    (all rows) / (rows recovered). Workers still busy with an older iteration are
    abandoned. The *age* of a partition is the number of iterations since it was last
    recovered (0 in the iteration it is).

    Orderings (the paper's §III):

    - ``"static"``: the order never changes (RCS); with persistent stragglers the same
      partitions are missed every iteration and the model is biased;
    - ``"shift"``: every worker's list is circularly shifted by one position per
      iteration (RCS-1);
    - ``"age"``: the shift (common to all workers) is chosen to put the most partitions
      older than ``age_threshold`` first in the lists of the workers that returned at
      least one codeword in the previous iteration (RCS-adaptive). A shift of 0 is never
      chosen (it would keep the order, the "shift-0 freeze"); with no aged partition to
      promote the shift is 1.

    Parameters
    ----------
    degrees : sequence of int or None, default=None
        Codeword degrees (CLI: ``--degrees 1,2,3``); their sum ``L`` is the partitions
        each worker stores and computes per iteration (at most the number of workers).
        None: the longest prefix of the paper's ``(1, 2, 3)`` that fits the workers
        (:func:`~daskstraggle.coding.rcs.default_degrees`).
    tolerance : float, default=0.0
        ``q`` in [0, 1): fraction of the partitions that may stay unrecovered in an
        iteration (0: exact gradients).
    ordering : {"static", "shift", "age"}, default="shift"
        How the lists are reordered between iterations.
    age_threshold : int, default=2
        ``A_th`` of the age-adaptive ordering: partitions with a larger age are "aged".
    rng : int or None, default=None
        Seed of the RCS code's random shifts.

    Notes
    -----
    A partition here is one row partition's kernel sum (the paper's blocks are gradient
    coordinates). The estimate is scaled by the recovered fraction of rows (the paper
    does not scale).

    References
    ----------
    .. [1] E. Ozfatura, B. Buyukates, D. Gündüz, S. Ulukus, "Age-Based Coded Computation
       for Bias Reduction in Distributed Learning", IEEE GLOBECOM 2020 (notes:
       ``docs/algorithms.md``).

    Examples
    --------
    >>> PartialRecovery(degrees=(1, 1), tolerance=0.25, ordering="age").get_params()
    {'degrees': (1, 1), 'tolerance': 0.25, 'ordering': 'age', 'age_threshold': 2, 'rng': None}
    """

    name = "partial"
    description = "RCS codes with partial recovery, see --tolerance, --ordering"
    abandon_stale = True
    cli_options = (
        MethodOption("--tolerance", "tolerance", "fraction q of partitions that may stay "
                     "unrecovered per iteration (default 0).", type=float),
        MethodOption("--ordering", "ordering", "reorder the codeword lists each iteration: "
                     "static (RCS), shift (RCS-1, default) or age (RCS-adaptive).",
                     choices=ORDERINGS),
        MethodOption("--age-threshold", "age_threshold", "with --ordering age: partitions "
                     "older than this are promoted (default 2).", type=int),
        MethodOption("--degrees", "degrees", "codeword degrees, e.g. 1,2,3; their sum is the "
                     "partitions each worker stores, at most the workers (default: the "
                     "longest prefix of 1,2,3 that fits: 1 for 1-2 workers, 1,2 for 3-5, "
                     "1,2,3 from 6).", metavar="D1,D2,...", parse=parse_int_list),
    )

    def __init__(self, degrees: Any = None, *, tolerance: float = 0.0,
                 ordering: str = "shift", age_threshold: int = 2,
                 rng: int | None = None) -> None:
        self.code: RCS | None = None  # the code of the current run (set by placement)
        self.degrees = None if degrees is None else RCS(degrees=degrees).degrees
        caller = "PartialRecovery"
        self.tolerance = check_fraction(tolerance, name="tolerance", caller=caller,
                                        closed_low=True)
        self.ordering = check_choice(ordering, name="ordering", caller=caller,
                                     choices=ORDERINGS)
        self.age_threshold = check_int(age_threshold, name="age_threshold", caller=caller,
                                       low=0)
        self.rng = rng

    def _code_for(self, n_workers: int) -> RCS:
        """The RCS code for ``n_workers``: the given degrees, or the default that fits."""
        degrees = self.degrees if self.degrees is not None else default_degrees(n_workers)
        return RCS(degrees=degrees)

    def check_n_workers(self, n_workers: int) -> None:
        """Refuse degrees summing to more than the number of workers."""
        L = self._code_for(n_workers).n_stored
        if L > n_workers:
            fit = default_degrees(n_workers)
            raise InvalidParameterError(
                f"The 'degrees' parameter of PartialRecovery (CLI: --degrees) sums to {L}, "
                f"the partitions each worker stores, but there are only {n_workers} workers "
                f"(= partitions); use degrees summing to at most {n_workers}, e.g. "
                f"degrees={fit} (CLI: --degrees {','.join(map(str, fit))}), or leave it "
                "unset: the default fits any number of workers."
            )

    def partition_count(self, n_workers: int, n_rows: int) -> int:
        """Return ``K = n_workers``."""
        return self._code_for(n_workers).partition_count(n_workers, n_rows)

    def placement(self, n_partitions: int, n_workers: int) -> Placement:
        """Draw the RCS assignment; worker ``i`` stores its list of ``L`` partitions."""
        self.check_n_workers(n_workers)
        self.code = self._code_for(n_workers)
        assignment = self.code.assign(n_workers, rng=self.rng)
        return self._keep(assignment, n_partitions)

    def _reset(self) -> None:
        """All ages 0, the static order."""
        self._drawn(self._placement)
        partition_rows = self._worker_rows_of()
        self._lists = [tuple(p) for p in self._placement]
        self._rows = np.asarray(partition_rows, dtype=np.int64)
        self._K = len(partition_rows)
        self._need = min(self._K, math.ceil((1.0 - self.tolerance) * self._K - 1e-9))
        assert self.code is not None
        self._coef = self.code.coefficient_rows()
        self._offset = 0
        self._ages = np.zeros(self._K, dtype=np.int64)
        self._new_round()

    def _new_round(self) -> None:
        self._decoder: IncrementalDecoder[tuple[int, int]] = IncrementalDecoder(self._K)
        self._messages: dict[tuple[int, int], KernelResult] = {}
        self._sent: set[int] = set()
        self._responders: set[int] = set()

    @property
    def ages(self) -> np.ndarray:
        """Current age of every partition."""
        return self._ages.copy()

    @property
    def offset(self) -> int:
        """Current shift of every worker's list (positions)."""
        return self._offset

    def order(self, worker_index: int, offset: int | None = None) -> tuple[int, ...]:
        """Return a worker's list of partitions in the order of ``offset`` (default: now)."""
        base = self._lists[worker_index]
        s = self._offset if offset is None else offset
        return tuple(base[(s + r) % len(base)] for r in range(len(base)))

    def dispatch(self, worker_index: int) -> WorkUnit | None:
        """Send the current iterate and the worker's reordered list, once per iteration."""
        if worker_index in self._sent or not self._lists[worker_index] or self.ready():
            return None
        self._sent.add(worker_index)
        return WorkUnit(worker_index, self.order(worker_index), self._x, self._version,
                        coefficients=self._coef, stream=True)

    def receive(self, result: WorkResult) -> None:
        """Row-reduce a codeword of the current iteration; drop older ones."""
        unit = result.unit
        if unit.version != self._version or self.ready():
            self._dropped += 1
            return
        if isinstance(result.result, tuple) or result.message is None \
                or unit.coefficients is None:
            raise InvalidParameterError("PartialRecovery takes streamed codeword results.")
        j = result.message
        support = np.flatnonzero(unit.coefficients[j])
        key = (unit.worker_index, j)
        self._messages[key] = result.result
        self._responders.add(unit.worker_index)
        self._decoder.add(key, [unit.partitions[p] for p in support],
                          unit.coefficients[j][support])
        self._summary = None

    def ready(self) -> bool:
        """True once ``ceil((1 - q) K)`` partitions are recovered."""
        return len(self._decoder.recovered) >= self._need

    def _summarise(self) -> RoundSummary:
        """The recovered partitions' sum scaled by the rows they cover."""
        assert self.ready()
        recovered = sorted(self._decoder.recovered)
        weights = self._decoder.sum_weights(recovered)
        keys = sorted(weights)
        ages = np.where(np.isin(np.arange(self._K), recovered), 0, self._ages + 1)
        return self._summary_of(
            combine([self._messages[k] for k in keys], [weights[k] for k in keys]),
            covered=int(self._rows[recovered].sum()), n_rows=float(self._rows.sum()),
            exact=len(recovered) == self._K,
            workers_used=tuple(sorted({k[0] for k in keys})),
            n_fresh=len(self._messages),
            ages=ages.astype(np.float64),
            extras={"n_recovered": float(len(recovered)), "shift": float(self._offset),
                    "max_age": float(ages.max())},
        )

    def step(self) -> None:
        """Step, age the partitions, and reorder the lists for the next iteration."""
        assert self.code is not None
        summary = self.summary()
        self._update(summary.result.gradient)
        assert summary.ages is not None
        self._ages = summary.ages.astype(np.int64)
        self._offset = (self._offset + self._next_shift()) % self.code.n_stored
        self._next_version()
        self._new_round()

    def _next_shift(self) -> int:
        """Shift to apply before the next iteration (by the ordering policy)."""
        assert self.code is not None
        L = self.code.n_stored
        if self.ordering == "static" or L == 1:
            return 0
        if self.ordering == "shift":
            return 1
        best, best_count = 1, 0
        for s in range(1, L):  # never 0: that would freeze the order
            first = {self.order(i, self._offset + s)[0] for i in self._responders}
            count = sum(1 for k in first if self._ages[k] > self.age_threshold)
            if count > best_count:
                best, best_count = s, count
        return best
