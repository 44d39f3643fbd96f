"""Gradient coding by repetition (Tandon et al., 2017): uncoded, fractional, cyclic, partial.

Each partition is placed on ``s + 1`` workers (``s`` = ``n_stragglers``); decoders accept
weights only if ``sum w * A_row`` is the all-ones vector within :data:`DECODE_TOLERANCE`.

References
----------
.. [1] R. Tandon, Q. Lei, A. G. Dimakis, N. Karampatziakis, "Gradient Coding: Avoiding
   Stragglers in Distributed Learning", ICML 2017 (notes: ``docs/algorithms.md``).
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from daskstraggle._validation import _real, check_choice, check_int
from daskstraggle.coding.base import CodeAssignment, CodingScheme, _checked, register_scheme
from daskstraggle.errors import InvalidParameterError

__all__ = [
    "DECODE_TOLERANCE",
    "CyclicRepetition",
    "FractionalRepetition",
    "PartialStraggler",
    "Uncoded",
]

#: Largest accepted ``max |sum_i w_i A_i - 1|`` of a decoding combination.
DECODE_TOLERANCE = 1e-9

#: Largest number of partitions PartialStraggler accepts (guards against alpha = 1.2345678).
_MAX_PARTITIONS = 1_000_000


def _info(n_workers: int, s: int, **extra: Any) -> dict[str, Any]:
    """The ``info`` of a repetition code of ``n_workers`` tolerating ``s`` stragglers."""
    return {"recovery_threshold": n_workers - s, "communication_load": 1,
            "computation_load": (s + 1) / n_workers, **extra}


def _workers_with(assignment: CodeAssignment, received: frozenset, message: int) -> list[int]:
    """Sorted worker indices whose message ``message`` is in ``received``."""
    n = assignment.n_workers
    out = set()
    for label in received:
        worker, msg = label
        if not (0 <= worker < n and 0 <= msg < assignment.n_messages(worker)):
            raise ValueError(f"received label {label!r} is not a message of this assignment")
        if msg == message:
            out.add(int(worker))
    return sorted(out)


def _decode_fractional(
    assignment: CodeAssignment, received: frozenset, *, group_size: int
) -> dict | None:
    """One responder per data block (the lowest-indexed one; worker ``i`` holds block
    ``i % group_size``); weights 1."""
    chosen: dict[int, int] = {}
    for i in _workers_with(assignment, received, 0):
        chosen.setdefault(i % group_size, i)
    if len(chosen) < group_size:
        return None
    return _checked(assignment, {(i, 0): 1.0 for i in sorted(chosen.values())},
                    DECODE_TOLERANCE)


def _decode_lstsq(assignment: CodeAssignment, received: frozenset) -> dict | None:
    """Least squares ``a B_I = 1`` over all responders ``I`` (float64), residual-checked."""
    workers = _workers_with(assignment, received, 0)
    if not workers:
        return None
    rows = np.zeros((len(workers), assignment.n_partitions))
    for r, i in enumerate(workers):
        rows[r, list(assignment.placement[i])] = assignment.coefficients[i][0]
    a = np.linalg.lstsq(rows.T, np.ones(assignment.n_partitions), rcond=None)[0]
    return _checked(assignment, {(i, 0): float(w) for i, w in zip(workers, a, strict=True)},
                    DECODE_TOLERANCE)


def _decode_partial(
    assignment: CodeAssignment, received: frozenset, *, inner: CodeAssignment
) -> dict | None:
    """All naive messages (weight 1) plus a decodable set of coded messages."""
    naive = _workers_with(assignment, received, 0)
    if len(naive) < assignment.n_workers:
        return None
    coded = _workers_with(assignment, received, 1)
    inner_weights = inner.decode({(i, 0) for i in coded})
    if inner_weights is None:
        return None
    weights = {(i, 0): 1.0 for i in naive}
    weights.update({(i, 1): w for (i, _), w in inner_weights.items()})
    return _checked(assignment, weights, DECODE_TOLERANCE)


def _cyclic_matrix(n: int, s: int, rng: np.random.Generator) -> np.ndarray | None:
    """Algorithm 2 of [1]: ``B`` with row ``i`` supported on the window ``i..i+s`` (mod n)."""
    if s == 0:
        return np.eye(n)
    h = rng.standard_normal((s, n))
    h[:, -1] = -h[:, :-1].sum(axis=1)  # H 1 = 0 (the paper's copy lost the minus sign)
    b = np.zeros((n, n))
    for i in range(n):
        window = (i + np.arange(s + 1)) % n
        try:
            x = np.linalg.solve(h[:, window[1:]], -h[:, window[0]])
        except np.linalg.LinAlgError:
            return None
        b[i, window] = np.concatenate(([1.0], x))
    return b if np.all(np.isfinite(b)) else None


def _row_space_condition(b: np.ndarray, s: int) -> float:
    """``sigma_1(B) / sigma_{N-s}(B)``: condition number of ``B`` on its row space."""
    sv = np.linalg.svd(b, compute_uv=False)
    rank = b.shape[0] - s
    return float(sv[0] / sv[rank - 1]) if sv[rank - 1] > 0 else float("inf")


@register_scheme
@dataclass(frozen=True, kw_only=True, slots=True)
class Uncoded(CodingScheme):
    """No redundancy: ``K = N`` partitions, worker ``i`` sends ``g_i``; needs every worker.

    Notes
    -----
    ``info``: ``recovery_threshold = N`` (workers needed), ``communication_load = 1``
    (messages per worker and iteration), ``computation_load = 1/N`` (data fraction per
    worker).

    Examples
    --------
    >>> from daskstraggle.coding.repetition import Uncoded
    >>> a = Uncoded().assign(3)
    >>> a.placement
    ((0,), (1,), (2,))
    >>> a.decode({(0, 0), (1, 0), (2, 0)})
    {(0, 0): 1.0, (1, 0): 1.0, (2, 0): 1.0}
    >>> a.decode({(0, 0), (1, 0)}) is None
    True

    References
    ----------
    .. [1] Tandon et al., "Gradient Coding", ICML 2017, Sec. 5 ("naive scheme").
    """

    name: ClassVar[str] = "uncoded"

    def _assign(self, n_workers: int, rng: np.random.Generator) -> CodeAssignment:
        return self._one_each(n_workers, _info(n_workers, 0),
                              functools.partial(_decode_fractional, group_size=n_workers))


@dataclass(frozen=True, kw_only=True, slots=True)
class _Repetition(CodingScheme):
    """The parameter of the schemes that tolerate ``n_stragglers`` stragglers."""

    n_stragglers: int = 1

    def __post_init__(self) -> None:
        check_int(self.n_stragglers, name="n_stragglers", caller=type(self).__name__, low=0)

    def check_n_workers(self, n_workers: int) -> None:
        """Require ``n_stragglers < n_workers``."""
        if self.n_stragglers >= n_workers:
            raise InvalidParameterError(
                f"The 'n_stragglers' parameter of {type(self).__name__} must be an int in "
                f"[0, {n_workers - 1}] (n_workers - 1). Got {self.n_stragglers!r} instead. "
                "Use more workers or fewer stragglers.")


@register_scheme
@dataclass(frozen=True, kw_only=True, slots=True)
class FractionalRepetition(_Repetition):
    """Fractional repetition code tolerating any ``n_stragglers`` full stragglers.

    ``K = N`` partitions are cut into ``m = N/(s+1)`` data blocks of ``s + 1`` consecutive
    partitions. The workers form ``s + 1`` groups of ``m``; worker ``i`` (group
    ``i // m``) stores block ``i % m`` and sends the plain sum of its partitions. Every
    block lives on ``s + 1`` workers, one per group, so decoding takes one responder per
    block (the lowest-indexed one) with weight 1.

    Parameters
    ----------
    n_stragglers : int, default=1
        ``s``, the number of stragglers tolerated; ``s + 1`` must divide ``n_workers``
        (use :class:`CyclicRepetition` otherwise).

    Notes
    -----
    ``info``: ``recovery_threshold = N - s`` (worst case; as few as ``N/(s+1)`` can
    suffice), ``communication_load = 1`` (messages per worker and iteration),
    ``computation_load = (s+1)/N``, ``n_blocks = N/(s+1)``.

    Examples
    --------
    >>> from daskstraggle.coding.repetition import FractionalRepetition
    >>> a = FractionalRepetition(n_stragglers=1).assign(4)
    >>> a.placement
    ((0, 1), (2, 3), (0, 1), (2, 3))
    >>> a.decode({(1, 0), (2, 0)})
    {(1, 0): 1.0, (2, 0): 1.0}
    >>> a.decode({(0, 0), (2, 0)}) is None
    True

    References
    ----------
    .. [1] Tandon et al., "Gradient Coding", ICML 2017, Sec. 3.1, Eq. (8)-(9), Theorem 2.
    """

    name: ClassVar[str] = "fractional-repetition"

    def check_n_workers(self, n_workers: int) -> None:
        """Require ``n_stragglers < n_workers`` and ``(n_stragglers + 1) | n_workers``."""
        _Repetition.check_n_workers(self, n_workers)
        s = self.n_stragglers
        if n_workers % (s + 1):
            raise InvalidParameterError(
                f"The 'n_stragglers' parameter of {type(self).__name__} must be such that "
                f"n_stragglers + 1 divides n_workers={n_workers}. Got {s!r} instead. "
                f"Use scheme='cyclic-repetition' for any n_stragglers < n_workers."
            )

    def _assign(self, n_workers: int, rng: np.random.Generator) -> CodeAssignment:
        s = self.n_stragglers
        m = n_workers // (s + 1)
        placement = (tuple(range((i % m) * (s + 1), (i % m + 1) * (s + 1)))
                     for i in range(n_workers))
        return self._make(n_workers, placement, (np.ones((1, s + 1)) for _ in range(n_workers)),
                          _info(n_workers, s, n_blocks=m),
                          functools.partial(_decode_fractional, group_size=m))


@register_scheme
@dataclass(frozen=True, kw_only=True, slots=True)
class CyclicRepetition(_Repetition):
    """Cyclic repetition code (Algorithm 2 of [1]) tolerating any ``n_stragglers``.

    ``K = N``; worker ``i`` stores partitions ``i .. i+s`` (mod ``N``) and sends
    ``B[i] @ g``. ``H`` is ``s x N`` Gaussian with ``H 1 = 0``; row ``i`` of ``B`` is 1 at
    ``i`` and solves ``H[:, i+1..i+s] x = -H[:, i]`` on the rest of its window, so (with
    probability 1) any ``N - s`` rows span the all-ones vector. ``s = 0`` is uncoded. Of
    ``n_candidates`` draws of ``H`` the one with the smallest ``sigma_1(B) /
    sigma_{N-s}(B)`` is kept (``info["condition"]``). Decoding solves ``a B_I = 1`` over
    all responders ``I`` by least squares, None unless ``max |a B_I - 1| <= 1e-9``.

    Parameters
    ----------
    n_stragglers : int, default=1
        ``s``, the number of stragglers tolerated, ``0 <= s < n_workers``.
    n_candidates : int, default=8
        Number of random ``H`` drawn; the best conditioned is kept.

    Notes
    -----
    ``info``: ``recovery_threshold = N - s``, ``communication_load = 1`` (messages per
    worker and iteration), ``computation_load = (s+1)/N``, ``condition``.
    Conditioning worsens with ``N``, so the messages should be float64. Prefer
    :class:`FractionalRepetition` when ``s + 1`` divides ``N``.

    Examples
    --------
    >>> import numpy as np
    >>> from daskstraggle.coding.repetition import CyclicRepetition
    >>> a = CyclicRepetition(n_stragglers=1).assign(3, rng=0)
    >>> a.placement
    ((0, 1), (1, 2), (2, 0))
    >>> w = a.decode({(0, 0), (2, 0)})
    >>> A, labels = a.encoding_matrix()
    >>> combo = sum(w.get(label, 0.0) * row for label, row in zip(labels, A))
    >>> bool(np.allclose(combo, 1.0))
    True
    >>> a.decode({(0, 0)}) is None
    True

    References
    ----------
    .. [1] Tandon et al., "Gradient Coding", ICML 2017, Sec. 3.2, Algorithm 2, Theorem 3.
    """

    name: ClassVar[str] = "cyclic-repetition"
    n_candidates: int = 8

    def __post_init__(self) -> None:
        _Repetition.__post_init__(self)
        check_int(self.n_candidates, name="n_candidates", caller="CyclicRepetition", low=1)

    def _assign(self, n_workers: int, rng: np.random.Generator) -> CodeAssignment:
        s = self.n_stragglers
        best, best_cond = None, float("inf")
        for _ in range(1 if s == 0 else self.n_candidates):
            b = _cyclic_matrix(n_workers, s, rng)
            if b is None:
                continue
            cond = _row_space_condition(b, s)
            if cond < best_cond:
                best, best_cond = b, cond
        if best is None:  # probability 0 for Gaussian H
            raise RuntimeError("every drawn H had a singular s x s window; draw again")
        windows = [
            tuple(int(j) for j in (i + np.arange(s + 1)) % n_workers) for i in range(n_workers)
        ]
        return self._make(n_workers, windows,
                          (best[i, list(w)].reshape(1, -1) for i, w in enumerate(windows)),
                          _info(n_workers, s, condition=best_cond), _decode_lstsq)


def _as_fraction(alpha: float | numbers.Real) -> Fraction:
    """``alpha`` as an exact fraction; floats use their shortest decimal (1.2 -> 6/5)."""
    if isinstance(alpha, numbers.Rational):
        return Fraction(int(alpha.numerator), int(alpha.denominator))
    return Fraction(repr(float(alpha)))


@register_scheme
@dataclass(frozen=True, kw_only=True, slots=True)
class PartialStraggler(_Repetition):
    """Two-stage scheme of [1] Sec. 4 for ``alpha``-partial stragglers.

    The data is split into a naive and a coded component so that a worker that is at most
    ``alpha`` times slower finishes its naive part when the others finish both parts.
    With ``r = (s+1)/(alpha-1) = a/b`` in lowest terms (``alpha`` taken exactly: floats by
    their shortest decimal, 1.2 -> 6/5), ``K = N (a + b)`` equal partitions:

    - partitions ``[0, N a)``: naive; worker ``i`` stores ``i a .. i a + a - 1``;
    - partitions ``[N a, K)``: ``N`` coded blocks of ``b`` partitions each, placed by an
      inner repetition code (fractional when ``s + 1`` divides ``N``, else cyclic) for
      ``N`` workers and ``s`` stragglers; a block's coefficient applies to its ``b``
      partitions.

    Each worker stores the fraction ``alpha (s+1) / (N (s+alpha))`` of the data exactly
    (``N = 3, s = 1, alpha = 2`` gives ``K = 9`` and ``4/9``) and sends two messages:
    message 0 = sum of its naive partitions, message 1 = its coded combination.

    Decoding needs message 0 of **every** worker and message 1 of a set the inner code
    decodes (any ``N - s``): weights 1 on the naive messages, the inner code's on the
    coded ones; anything less returns None.

    Parameters
    ----------
    n_stragglers : int, default=1
        ``s``, stragglers tolerated by the coded part, ``0 <= s < n_workers``.
    alpha : float, default=2.0
        Slowdown factor of a straggler, a finite number > 1.
    inner : {"auto", "fractional-repetition", "cyclic-repetition"}, default="auto"
        Code for the coded component; "auto" picks fractional when ``s + 1`` divides ``N``.

    Notes
    -----
    ``info``: ``load_fraction`` (exact :class:`fractions.Fraction`), ``computation_load``
    (its float), ``communication_load = 2`` (messages per worker and iteration),
    ``recovery_threshold = N`` (naive messages) and ``coded_recovery_threshold = N - s``,
    ``n_naive_per_worker = a``, ``coded_block_size = b``, ``inner`` (scheme used).

    Examples
    --------
    >>> from daskstraggle.coding.repetition import PartialStraggler
    >>> a = PartialStraggler(n_stragglers=1, alpha=2).assign(3, rng=0)
    >>> a.n_partitions, a.info["load_fraction"]
    (9, Fraction(4, 9))
    >>> w = a.decode({(0, 0), (1, 0), (2, 0), (0, 1), (2, 1)})
    >>> sorted(w)
    [(0, 0), (0, 1), (1, 0), (2, 0), (2, 1)]
    >>> a.decode({(0, 0), (0, 1), (2, 0), (2, 1)}) is None
    True

    References
    ----------
    .. [1] Tandon et al., "Gradient Coding", ICML 2017, Sec. 4 and Fig. 4.
    """

    name: ClassVar[str] = "partial-straggler"
    alpha: float = 2.0
    inner: str = "auto"

    def __post_init__(self) -> None:
        _Repetition.__post_init__(self)
        caller = type(self).__name__
        _real(self.alpha, lambda x: bool(np.isfinite(x)) and x > 1, "alpha", caller,
              "a finite number > 1 (the slowdown factor of a straggler)",
              "For stragglers that may never finish use scheme='cyclic-repetition'.")
        check_choice(self.inner, name="inner", caller=caller,
                     choices=["auto", "fractional-repetition", "cyclic-repetition"])

    def _split(self) -> tuple[int, int]:
        r = Fraction(self.n_stragglers + 1) / (_as_fraction(self.alpha) - 1)
        return r.numerator, r.denominator

    def _inner_scheme(self, n_workers: int) -> CodingScheme:
        s = self.n_stragglers
        fractional = self.inner == "fractional-repetition" or (
            self.inner == "auto" and n_workers % (s + 1) == 0)
        return (FractionalRepetition if fractional else CyclicRepetition)(n_stragglers=s)

    def check_n_workers(self, n_workers: int) -> None:
        """Check ``n_stragglers < n_workers``, the inner code and the partition count."""
        caller = type(self).__name__
        _Repetition.check_n_workers(self, n_workers)
        self._inner_scheme(n_workers).check_n_workers(n_workers)
        a, b = self._split()
        if n_workers * (a + b) > _MAX_PARTITIONS:
            raise InvalidParameterError(
                f"The 'alpha' parameter of {caller} must give at most {_MAX_PARTITIONS} "
                f"partitions (K = n_workers * (a + b) with (n_stragglers+1)/(alpha-1) = a/b). "
                f"Got {self.alpha!r} instead. Round alpha to fewer digits (e.g. 1.25)."
            )

    def partition_count(self, n_workers: int, n_rows: int | None = None) -> int:
        """Return ``K = n_workers * (a + b)`` (see the class docstring)."""
        self.check_n_workers(n_workers)
        a, b = self._split()
        return int(n_workers * (a + b))

    def _assign(self, n_workers: int, rng: np.random.Generator) -> CodeAssignment:
        s, n = self.n_stragglers, n_workers
        a, b = self._split()
        inner_scheme = self._inner_scheme(n)
        inner = inner_scheme.assign(n, rng)
        placement, coefficients = [], []
        for i in range(n):
            naive = list(range(i * a, (i + 1) * a))
            coded = [n * a + blk * b + t for blk in inner.placement[i] for t in range(b)]
            coef = np.zeros((2, a + len(coded)))
            coef[0, :a] = 1.0
            coef[1, a:] = np.repeat(inner.coefficients[i][0], b)
            placement.append(tuple(naive + coded))
            coefficients.append(coef)
        frac = _as_fraction(self.alpha) * (s + 1) / (n * (s + _as_fraction(self.alpha)))
        info = {"load_fraction": frac, "computation_load": float(frac), "communication_load": 2,
                "recovery_threshold": n, "coded_recovery_threshold": n - s,
                "n_naive_per_worker": a, "coded_block_size": b, "inner": inner_scheme.name}
        return self._make(n, placement, coefficients, info,
                          functools.partial(_decode_partial, inner=inner), n * (a + b))
