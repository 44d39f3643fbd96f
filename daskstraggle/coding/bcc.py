"""Batched coupon collector (BCC) schemes, homogeneous and heterogeneous, the idealised
coded-computing baseline (DSAG §VII-A), and the helpers of the BCC paper's heterogeneous
comparison (§IV-C: :func:`p2_loads`, :func:`proportional_loads`, :func:`coverage_time`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from daskstraggle._validation import _fail, _real, check_choice, check_int, check_positive
from daskstraggle.coding.base import CodeAssignment, CodingScheme, _checked, register_scheme
from daskstraggle.latency.base import check_per_worker

__all__ = [
    "BCC",
    "CoverageTime",
    "HeterogeneousBCC",
    "IdealMDS",
    "bcc_coverage_probability",
    "coverage_time",
    "harmonic_number",
    "p2_loads",
    "proportional_loads",
]

Received = tuple[int, int]
_TOL = 1e-12


def harmonic_number(n: int) -> float:
    """Return the harmonic number ``H_n = sum_{k=1}^n 1/k`` (0 for ``n = 0``).

    Examples
    --------
    >>> round(harmonic_number(3), 6)
    1.833333
    """
    return float(np.sum(1.0 / np.arange(1, int(n) + 1))) if n > 0 else 0.0


def bcc_coverage_probability(n_batches: int, n_workers: int) -> float:
    """Return P(each of ``n_batches`` batches is picked by at least one of ``n_workers``).

    Each worker picks one batch uniformly and independently. Computed with the Markov chain
    on the number of distinct batches picked so far (``O(n_workers * n_batches)``, stable,
    unlike alternating inclusion-exclusion).

    Parameters
    ----------
    n_batches : int
        Number of batches ``b >= 1``.
    n_workers : int
        Number of workers ``N >= 0``.

    Returns
    -------
    probability : float
        ``b! S(N, b) / b^N`` (``S`` the Stirling numbers of the second kind).

    Examples
    --------
    >>> bcc_coverage_probability(2, 2)
    0.5
    """
    b = int(n_batches)
    dist = np.zeros(b + 1)
    dist[0] = 1.0
    stay = np.arange(b + 1) / b  # P(pick an already seen batch | j seen)
    for _ in range(int(n_workers)):
        new = dist * stay
        new[1:] += dist[:-1] * (1.0 - stay[:-1])
        dist = new
    return float(dist[b])


#: :func:`bcc_coverage_probability` remembered per (batches, workers): ``O(N b)`` work that
#: every assignment of the same shape repeats otherwise.
_coverage_probability = functools.lru_cache(maxsize=256)(bcc_coverage_probability)


def _cover_decoder(assignment: CodeAssignment, received: frozenset[Received]) -> dict | None:
    """Pick one received copy of every partition (the smallest label), weights 1.

    Works for any scheme whose messages are 0/1 rows with disjoint supports per chosen
    message set (BCC batches, per-partition messages); returns None before coverage.
    """
    owner: dict[int, Received] = {}
    for i, j in sorted(received):
        if not (0 <= i < assignment.n_workers and 0 <= j < assignment.n_messages(i)):
            continue
        support = assignment.supports[i][j]
        if support and all(p not in owner for p in support):
            for p in support:
                owner[p] = (i, j)
    if len(owner) < assignment.n_partitions:
        return None
    return _checked(assignment, {label: 1.0 for label in set(owner.values())}, _TOL)


@register_scheme
@dataclass(frozen=True, kw_only=True, slots=True)
class BCC(CodingScheme):
    """Batched coupon collector: each worker sends the sum over one random batch.

    The ``K`` partitions are cut into ``ceil(K / r)`` batches of ``r`` consecutive
    partitions (the last may be shorter); each worker picks one uniformly at random and
    sends its sum. The decoder returns weight 1 on one received message per batch, or
    None until every batch is covered. A drawn assignment may never cover (some batch
    picked by nobody): ``info["covers"]`` says so, so a method can fail clearly.

    Parameters
    ----------
    batch_size : int
        Partitions per batch ``r``, ``1 <= r <= K``.
    n_partitions : int or None, default=None
        Number of partitions ``K``; None means ``K = N`` (the paper's ``m = n``: one
        example per partition).

    Notes
    -----
    ``info`` holds ``n_batches``, ``batch_of_worker``, ``expected_results``
    (``ceil(K/r) H_ceil(K/r)``, the coupon collector mean for an unbounded supply of
    workers), ``coverage_probability`` (for the ``N`` workers drawn), ``covers`` and
    ``communication_load`` (1 message per worker). The paper's examples are partitions
    of rows here.

    References
    ----------
    .. [1] S. Li, S. M. M. Kalan, A. S. Avestimehr, M. Soltanolkotabi, "Near-Optimal
       Straggler Mitigation for Distributed Gradient Methods", IPDPSW 2018
       (arXiv:1710.09990), §III.

    Examples
    --------
    >>> a = BCC(batch_size=2).assign(6, rng=0)
    >>> a.info["n_batches"], round(a.info["expected_results"], 3)
    (3, 5.5)
    >>> [len(p) for p in a.placement]
    [2, 2, 2, 2, 2, 2]
    """

    name: ClassVar[str] = "bcc"

    batch_size: int
    n_partitions: int | None = None

    def __post_init__(self) -> None:
        check_int(self.batch_size, name="batch_size", caller="BCC", low=1)
        if self.n_partitions is not None:
            check_int(self.n_partitions, name="n_partitions", caller="BCC", low=1)
            check_int(self.batch_size, name="batch_size", caller="BCC", low=1,
                      high=int(self.n_partitions),
                      remedy="A batch cannot hold more than n_partitions partitions.")

    def partition_count(self, n_workers: int, n_rows: int | None = None) -> int:
        """Return ``K``: ``n_partitions`` if given, else ``n_workers``."""
        return int(self.n_partitions) if self.n_partitions is not None else int(n_workers)

    def check_n_workers(self, n_workers: int) -> None:
        """Raise InvalidParameterError if ``batch_size`` exceeds ``K`` for ``n_workers``."""
        check_int(self.batch_size, name="batch_size", caller="BCC", low=1,
                  high=self.partition_count(n_workers),
                  remedy="A batch holds at most K partitions, and K equals n_workers unless "
                         "n_partitions is given; lower batch_size (CLI: --batch-size R).")

    def _assign(self, n_workers: int, rng: np.random.Generator) -> CodeAssignment:
        k = self.partition_count(n_workers)
        r = int(self.batch_size)
        n_batches = -(-k // r)
        picks = rng.integers(0, n_batches, size=n_workers)
        # one placement and one (read-only) weight row per batch, shared by its workers
        batches = [tuple(range(b * r, min((b + 1) * r, k))) for b in range(n_batches)]
        ones = [np.ones((1, len(batch))) for batch in batches]
        for weights in ones:
            weights.flags.writeable = False
        info = {
            "n_batches": n_batches,
            "batch_of_worker": tuple(picks.tolist()),
            "expected_results": n_batches * harmonic_number(n_batches),
            "coverage_probability": _coverage_probability(n_batches, int(n_workers)),
            "covers": len(set(picks.tolist())) == n_batches,
            "communication_load": 1,
        }
        return self._make(n_workers, (batches[b] for b in picks.tolist()),
                          (ones[b] for b in picks.tolist()), info, _cover_decoder, k)


def _p2_lambda(shift: np.ndarray, rate: np.ndarray) -> np.ndarray:
    """Solve ``exp(mu (lam - a)) = 1 + mu lam`` for ``lam >= a`` (Newton on ``x = mu(lam-a)``).

    With ``C = 1 + mu a`` the equation is ``x = log(C + x)``; ``f(x) = x - log(C + x)`` is
    convex and increasing for ``x > 0``, so Newton from ``x = C`` (where ``f > 0``)
    converges monotonically. ``a = 0`` gives ``lam = 0`` (no finite optimal load).
    """
    c = 1.0 + rate * shift
    x = c.copy()
    for _ in range(200):
        step = (x - np.log(c + x)) * (c + x) / np.maximum(c + x - 1.0, 1e-300)
        x = np.maximum(x - step, 0.0)
        if np.all(np.abs(step) <= 1e-13 * np.maximum(x, 1.0)):
            break
    return shift + x / rate


def p2_loads(
    shift: float | Sequence[float],
    rate: float | Sequence[float],
    n_partitions: int,
    n_samples: float,
    *,
    n_workers: int | None = None,
) -> np.ndarray:
    """Return integer loads ``r_i`` approximately minimising ``E[T^(s)]`` (problem P2).

    ``T^(s)`` is the time until the finished workers hold ``s`` sample-results in total,
    worker ``i`` finishing after ``T_i`` with ``P[T_i <= t] = 1 - exp(-(mu_i/r_i)(t - a_i
    r_i))``. Uses the asymptotically optimal solution of Reisizadeh et al. [2] that the BCC
    paper [1] cites: ``lam_i`` solves ``exp(mu_i (lam_i - a_i)) = 1 + mu_i lam_i``, the
    expected results at time ``t`` with loads ``t / lam_i`` are ``t sum_i mu_i / (1 + mu_i
    lam_i)``, so ``t* = s / sum_i mu_i / (1 + mu_i lam_i)`` and ``r_i = t* / lam_i``.

    Parameters
    ----------
    shift : float or sequence of float
        ``a_i >= 0`` per worker (a float applies to all).
    rate : float or sequence of float
        ``mu_i > 0`` per worker.
    n_partitions : int
        Number of partitions ``m`` (loads are capped at ``m``).
    n_samples : float
        Target number of sample-results ``s`` (e.g. ``c m log m``).
    n_workers : int or None, default=None
        Needed when both ``shift`` and ``rate`` are floats.

    Returns
    -------
    loads : ndarray of int of shape (N,)
        ``r_i`` rounded to the nearest integer and clipped to ``[1, m]``.

    Raises
    ------
    InvalidParameterError
        If a parameter is out of range or the per-worker lengths differ.

    References
    ----------
    .. [1] S. Li et al., "Near-Optimal Straggler Mitigation for Distributed Gradient
       Methods", IPDPSW 2018, §IV (problem P2, Remark 6).
    .. [2] A. Reisizadeh, S. Prakash, R. Pedarsani, A. S. Avestimehr, "Coded Computation
       over Heterogeneous Clusters", ISIT 2017.

    Examples
    --------
    >>> p2_loads(20.0, [1.0, 1.0, 20.0], n_partitions=50, n_samples=60).tolist()
    [20, 20, 22]
    """
    a, mu = _worker_arrays(shift, rate, n_workers, caller="p2_loads")
    m = check_int(n_partitions, name="n_partitions", caller="p2_loads", low=1)
    s = check_positive(n_samples, name="n_samples", caller="p2_loads")
    lam = _p2_lambda(a, mu)
    t_star = s / np.sum(mu / (1.0 + mu * lam))
    with np.errstate(divide="ignore"):
        raw = np.where(lam > 0, t_star / np.where(lam > 0, lam, 1.0), np.inf)
    return np.clip(np.rint(np.minimum(raw, m)), 1, m).astype(int)


def proportional_loads(rate: float | Sequence[float], n_partitions: int,
                       *, n_workers: int | None = None) -> np.ndarray:
    """Return the load-balancing loads ``r_i ~ mu_i m / sum mu`` summing to ``m`` exactly.

    The "LB" baseline of the BCC paper §IV-C (rounded by largest remainder).

    Parameters
    ----------
    rate : float or sequence of float
        ``mu_i > 0`` per worker.
    n_partitions : int
        Number of partitions ``m``.
    n_workers : int or None, default=None
        Needed when ``rate`` is a float.

    Returns
    -------
    loads : ndarray of int of shape (N,)
        Non-negative, summing to ``m`` (a worker may get 0 when ``m`` is small).

    Raises
    ------
    InvalidParameterError
        If a parameter is out of range.

    Examples
    --------
    >>> proportional_loads([1.0, 1.0, 2.0], n_partitions=10).tolist()
    [3, 2, 5]
    """
    _, mu = _worker_arrays(0.0, rate, n_workers, caller="proportional_loads")
    m = check_int(n_partitions, name="n_partitions", caller="proportional_loads", low=1)
    exact = mu / mu.sum() * m
    loads = np.floor(exact).astype(int)
    order = np.argsort(-(exact - loads), kind="stable")
    loads[order[: m - loads.sum()]] += 1
    return loads


def _worker_arrays(shift: Any, rate: Any, n_workers: int | None,
                   *, caller: str) -> tuple[np.ndarray, np.ndarray]:
    a = check_per_worker(shift, name="shift", caller=caller)
    mu = check_per_worker(rate, name="rate", caller=caller, strict=True)
    lengths = {len(v) for v in (a, mu) if isinstance(v, tuple)}
    if n_workers is not None:
        lengths.add(int(n_workers))
    if len(lengths) > 1:
        _fail("shift", caller, "a float or a sequence as long as 'rate' (and n_workers)",
              shift, f"Lengths: {sorted(lengths)}.")
    if not lengths:
        _fail("n_workers", caller, "given when shift and rate are floats", n_workers)
    n = lengths.pop()
    return np.full(n, a, dtype=float), np.full(n, mu, dtype=float)


def _random_membership(loads: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    """Return a (N, m) bool matrix; row i marks ``loads[i]`` partitions drawn w/o replacement."""
    u = rng.random((loads.size, m))
    srt = np.sort(u, axis=1)
    thr = np.where(loads > 0, srt[np.arange(loads.size), np.maximum(loads, 1) - 1], -1.0)
    return u <= thr[:, None]


def _disjoint_membership(loads: np.ndarray, m: int) -> np.ndarray:
    """Return a (N, m) bool matrix of consecutive (cyclically wrapping) disjoint blocks."""
    member = np.zeros((loads.size, m), dtype=bool)
    start = 0
    for i, r in enumerate(loads.tolist()):
        member[i, np.arange(start, start + r) % m] = True
        start += r
    return member


@dataclass(frozen=True, slots=True)
class CoverageTime:
    """Monte Carlo estimate of the time to coverage (see :func:`coverage_time`).

    Parameters
    ----------
    mean_time : float
        Mean coverage time over the trials whose placement covers (nan if none does).
    never_cover_fraction : float
        Fraction of trials whose placement leaves some partition on no worker.
    times : ndarray of shape (n_trials,)
        Coverage time per trial, ``inf`` where the placement never covers.
    """

    mean_time: float
    never_cover_fraction: float
    times: np.ndarray


def coverage_time(
    loads: Sequence[int] | np.ndarray,
    *,
    shift: float | Sequence[float],
    rate: float | Sequence[float],
    n_partitions: int,
    n_trials: int = 1000,
    disjoint: bool = False,
    rng: int | np.random.Generator | None = None,
) -> CoverageTime:
    """Estimate the expected time to coverage for given loads, shifted-exponential workers.

    Each trial draws a placement (worker ``i`` stores ``loads[i]`` of the ``m`` partitions
    uniformly without replacement, or consecutive disjoint blocks with ``disjoint=True`` as
    in the paper's load-balancing baseline) and finishing times ``T_i = a_i r_i +
    Exp(mean r_i / mu_i)``; the coverage time is ``max_p min_{i stores p} T_i`` (eq. 16),
    ``inf`` when some partition is on no worker.

    Parameters
    ----------
    loads : sequence of int of shape (N,)
        ``r_i``, each in ``[0, m]``.
    shift, rate, n_partitions
        ``a_i >= 0``, ``mu_i > 0`` (as in :func:`p2_loads`) and ``m``.
    n_trials : int, default=1000
        Monte Carlo trials (placement and times redrawn each trial).
    disjoint : bool, default=False
        Place consecutive disjoint blocks instead of random samples.
    rng : int, Generator or None, default=None
        Seed.

    Returns
    -------
    estimate : CoverageTime
        Mean over covering trials, fraction never covering, all times.

    Raises
    ------
    InvalidParameterError
        If a parameter is out of range or the lengths differ.

    Examples
    --------
    >>> est = coverage_time([2, 2], shift=1.0, rate=1.0, n_partitions=2, rng=0, n_trials=50)
    >>> est.never_cover_fraction, bool(est.mean_time >= 2.0)
    (0.0, True)
    """
    r = np.asarray(loads)
    if r.ndim != 1 or r.size == 0 or not np.issubdtype(r.dtype, np.integer):
        _fail("loads", "coverage_time", "a non-empty 1-D sequence of ints", loads)
    m = check_int(n_partitions, name="n_partitions", caller="coverage_time", low=1)
    if np.any((r < 0) | (r > m)):
        _fail("loads", "coverage_time", f"ints in [0, {m}] (n_partitions)", loads)
    trials = check_int(n_trials, name="n_trials", caller="coverage_time", low=1)
    a, mu = _worker_arrays(shift, rate, r.size, caller="coverage_time")
    gen = np.random.default_rng(rng)
    times = np.empty(trials)
    fixed = _disjoint_membership(r, m) if disjoint else None
    for t in range(trials):
        member = fixed if fixed is not None else _random_membership(r, m, gen)
        finish = a * r + gen.exponential(1.0, r.size) * r / mu
        per_part = np.where(member, finish[:, None], np.inf).min(axis=0)
        times[t] = per_part.max()
    covered = np.isfinite(times)
    mean = float(times[covered].mean()) if covered.any() else float("nan")
    return CoverageTime(mean_time=mean, never_cover_fraction=float(1.0 - covered.mean()),
                        times=times)


@register_scheme
@dataclass(frozen=True, kw_only=True, slots=True)
class HeterogeneousBCC(CodingScheme):
    """Generalized BCC for heterogeneous shifted-exponential workers (one message per partition).

    Loads ``r_i`` come from problem P2 with ``s = floor(c m log m)`` (:func:`p2_loads`);
    each worker samples ``r_i`` of the ``m`` partitions uniformly without replacement and
    sends each stored partition's result as its own message. The decoder takes one
    received copy of every partition (weights 1), None before coverage.

    With ``allocation="proportional"`` the loads are the paper's load-balancing baseline
    ``r_i ~ mu_i`` (:func:`proportional_loads`) on consecutive disjoint blocks (no
    repetition; everyone with a load must answer).

    A random placement may leave a partition on no worker (likely when ``c`` is near 1):
    ``info["covers"]`` is False and nothing decodes, so a method can fail clearly.

    Parameters
    ----------
    shift, rate : float or sequence of float
        ``a_i >= 0`` and ``mu_i > 0`` of :func:`p2_loads` (one per worker, or one for all).
    n_partitions : int
        Number of partitions ``m`` (the paper's examples).
    coverage_factor : float or None, default=None
        ``c`` in ``s = floor(c m log m)``; None uses Theorem 2's ``c = 2 + log(a + H_N /
        mu) / log m`` with ``a = max a_i`` and ``mu = min mu_i`` (a placement then covers
        with high probability). The paper's §IV-C uses ``c = 1``.
    allocation : {"p2", "proportional"}, default="p2"
        Loads from problem P2 with random placement, or the load-balancing baseline.

    Notes
    -----
    ``info`` holds ``loads``, ``n_samples`` (``s``), ``coverage_factor``, ``covers`` and
    ``expected_time_p2`` (``t*`` of the P2 solution, ``E[T^(s)]`` in the large-N limit).

    Differences from the paper: loads are rounded to integers in ``[1, m]``; per-sequence
    parameters need exactly ``N`` entries.

    References
    ----------
    .. [1] S. Li, S. M. M. Kalan, A. S. Avestimehr, M. Soltanolkotabi, "Near-Optimal
       Straggler Mitigation for Distributed Gradient Methods", IPDPSW 2018, §IV.
    .. [2] A. Reisizadeh, S. Prakash, R. Pedarsani, A. S. Avestimehr, "Coded Computation
       over Heterogeneous Clusters", ISIT 2017.

    Examples
    --------
    >>> scheme = HeterogeneousBCC(shift=1.0, rate=2.0, n_partitions=6)
    >>> a = scheme.assign(4, rng=0)
    >>> a.info["loads"], a.info["covers"]
    ((6, 6, 6, 6), True)
    >>> a.decode([(0, j) for j in range(6)]) is not None
    True
    """

    name: ClassVar[str] = "bcc-heterogeneous"

    shift: float | tuple[float, ...]
    rate: float | tuple[float, ...]
    n_partitions: int
    coverage_factor: float | None = None
    allocation: str = "p2"

    def __post_init__(self) -> None:
        caller = "HeterogeneousBCC"
        object.__setattr__(self, "shift",
                           check_per_worker(self.shift, name="shift", caller=caller))
        object.__setattr__(self, "rate",
                           check_per_worker(self.rate, name="rate", caller=caller, strict=True))
        check_int(self.n_partitions, name="n_partitions", caller=caller, low=1)
        check_positive(self.coverage_factor, name="coverage_factor", caller=caller,
                       allow_none=True)
        check_choice(self.allocation, name="allocation", caller=caller,
                     choices=["p2", "proportional"])
        if isinstance(self.shift, tuple) and isinstance(self.rate, tuple) \
                and len(self.shift) != len(self.rate):
            _fail("shift", caller, f"as long as 'rate' ({len(self.rate)} entries)", self.shift)

    def partition_count(self, n_workers: int, n_rows: int | None = None) -> int:
        """Return ``K = n_partitions``."""
        return int(self.n_partitions)

    def check_n_workers(self, n_workers: int) -> None:
        """Raise InvalidParameterError if a per-worker sequence is not ``n_workers`` long."""
        for name in ("shift", "rate"):
            value = getattr(self, name)
            if isinstance(value, tuple) and len(value) != n_workers:
                _fail(name, "HeterogeneousBCC", f"a float or a sequence of {n_workers} "
                      "entries (n_workers)", value)

    def samples_target(self, n_workers: int) -> tuple[float, int]:
        """Return ``(c, s)`` with ``s = floor(c m log m)`` (``s >= m``) for ``n_workers``."""
        m = int(self.n_partitions)
        a, mu = _worker_arrays(self.shift, self.rate, n_workers, caller="HeterogeneousBCC")
        c = self.coverage_factor
        if c is None:
            c = 2.0 + (math.log(a.max() + harmonic_number(n_workers) / mu.min())
                       / math.log(m) if m > 1 else 0.0)
        return float(c), max(m, math.floor(c * m * math.log(m)))

    def loads(self, n_workers: int) -> np.ndarray:
        """Return the loads ``r_i`` for ``n_workers`` workers, shape (N,)."""
        self.check_n_workers(n_workers)
        m = int(self.n_partitions)
        if self.allocation == "proportional":
            return proportional_loads(self.rate, m, n_workers=n_workers)
        _, s = self.samples_target(n_workers)
        return p2_loads(self.shift, self.rate, m, s, n_workers=n_workers)

    def _assign(self, n_workers: int, rng: np.random.Generator) -> CodeAssignment:
        m = int(self.n_partitions)
        loads = self.loads(n_workers)
        member = (_disjoint_membership(loads, m) if self.allocation == "proportional"
                  else _random_membership(loads, m, rng))
        placement = [tuple(np.flatnonzero(row).tolist()) for row in member]
        a, mu = _worker_arrays(self.shift, self.rate, n_workers, caller="HeterogeneousBCC")
        c, s = self.samples_target(n_workers)
        lam = _p2_lambda(a, mu)
        info = {
            "loads": tuple(int(x) for x in loads),
            "n_samples": s,
            "coverage_factor": c,
            "covers": bool(member.any(axis=0).all()),
            "expected_time_p2": float(s / np.sum(mu / (1.0 + mu * lam))),
            "communication_load": int(loads.sum()),
        }
        return self._make(n_workers, placement, (np.eye(len(p)) for p in placement), info,
                          _cover_decoder, m)


def _ideal_decoder(assignment: CodeAssignment, received: frozenset[Received]) -> dict | None:
    """Latency-only: once ``recovery_threshold`` workers replied, weights of exact GD."""
    workers = {i for i, j in received if 0 <= i < assignment.n_workers and j == 0}
    if len(workers) < assignment.info["recovery_threshold"]:
        return None
    return {(i, 0): 1.0 for i in range(assignment.n_workers)}


@register_scheme
@dataclass(frozen=True, kw_only=True, slots=True)
class IdealMDS(CodingScheme):
    """Idealised coded computing: latency of an MDS-like code, numbers of exact GD.

    No encoding is run. The placement is plain GD (``K = N`` partitions, worker ``i``
    stores partition ``i``, coefficient 1). The latency model scales each worker's compute
    time by ``info["compute_scale"] = 1/r`` (a code of rate ``r`` makes each worker's load
    ``1/r`` of an equal share) and the iteration ends at the ``ceil(r N)``-th fastest
    worker (``info["recovery_threshold"]``), decoding cost zero.

    ``decode`` returns None with fewer than ``ceil(r N)`` distinct responders; with at
    least that many it returns weight 1 on *every* worker's message, i.e. the exact GD sum,
    including messages that did not arrive. These weights are only meaningful for latency
    studies (``info["latency_only"] = True``): the method must evaluate the exact gradient
    itself rather than combine the received messages.

    Parameters
    ----------
    rate : float
        Code rate ``r``, ``0 < r <= 1``.

    References
    ----------
    .. [1] A. Severinson, E. Rosnes, S. El Rouayheb, A. Graell i Amat, "DSAG: A
       Mixed Synchronous-Asynchronous Iterative Method for Straggler-Resilient Learning",
       IEEE Trans. Commun. 2023, §VII-A.

    Examples
    --------
    >>> a = IdealMDS(rate=0.5).assign(6)
    >>> a.info["recovery_threshold"], a.info["compute_scale"]
    (3, 2.0)
    >>> a.decode([(0, 0), (4, 0)]) is None, len(a.decode([(0, 0), (4, 0), (5, 0)]))
    (True, 6)
    """

    name: ClassVar[str] = "mds-ideal"

    rate: float

    def __post_init__(self) -> None:
        _real(self.rate, lambda x: 0 < x <= 1, "rate", "IdealMDS", "a number in (0, 1]")

    def _assign(self, n_workers: int, rng: np.random.Generator) -> CodeAssignment:
        threshold = min(n_workers, max(1, math.ceil(float(self.rate) * n_workers - 1e-9)))
        info = {"latency_only": True, "recovery_threshold": threshold,
                "compute_scale": 1.0 / float(self.rate), "communication_load": 1}
        return self._one_each(n_workers, info, _ideal_decoder)
