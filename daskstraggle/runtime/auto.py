"""``method="auto"`` on a cluster: probe the workers, simulate the candidates, run the fastest;
``gram`` with speculative backups instead (:func:`measure_and_choose`; the procedure and its
assumptions: ``docs/methods.md``)."""

from __future__ import annotations

import itertools
import math
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from daskstraggle.engine.stop import StopRule
from daskstraggle.errors import ConvergenceWarning, NoCallError
from daskstraggle.latency.base import Constant
from daskstraggle.latency.fit import UNLIMITED, Links
from daskstraggle.latency.modifiers import Link, share_link
from daskstraggle.methods import make_method
from daskstraggle.methods.base import Method, RoundSummary, WorkResult, WorkUnit
from daskstraggle.methods.gd import GD
from daskstraggle.problems import PCA, LeastSquares
from daskstraggle.runtime.lifecycle import Outcome, run

if TYPE_CHECKING:
    from daskstraggle.data.matrix import Matrix
    from daskstraggle.engine.recorder import TraceRecorder
    from daskstraggle.latency.base import LatencyModel
    from daskstraggle.problems.base import Problem
    from daskstraggle.runtime.base import Runtime
    from daskstraggle.trace import Result

#: Rounds of plain gradient descent the probe runs.
PROBE_ROUNDS = 8
#: After all workers but one answered a probe round, how many times the round's time so far
#: it waits for the last.
PROBE_WINDOW = 3.0
#: Leading probe rounds left out of the latency fit.
WARMUP_ROUNDS = 2
#: Bytes of each message of the simulation's surrogate problem (least squares on 6
#: columns: a gradient of 6 float64 values and 2 more).
SURROGATE_MESSAGE_BYTES = 64
#: Rounds each candidate plays in the simulation.
SIM_ROUNDS = 60
#: How many times faster than the plain method a candidate must be predicted to replace it:
#: above the predictions without a straggler (1.05-1.09 for dsag on 4 process workers) and
#: most under DSAG's ramp (1.07-1.30, where dsag and gd take the same time: either choice
#: costs little), below an intermittent (markov) straggler's (1.32-1.61, where dsag is 2.3x
#: faster); see ``docs/measurements/straggler_table.md``.
MARGIN = 1.25
#: Coded candidates tolerate up to this many stragglers (fewer on small clusters).
MAX_STRAGGLERS = 2
#: Share of each partition's rows the probe reads for gram and block on genotypes.
PROBE_FRACTION = 1 / 16
#: Share of its rows each probe task reads when the probe runs on the run's data (all the
#: rows loaded): its rounds are that much shorter (a straggler held each of them 3x the
#: others' time), its messages those of the run; the compute times are scaled back up.
TASK_FRACTION = 1 / 4
#: The speculative backups ``auto`` runs ``gram`` with (``backup_after``: a worker's unit
#: unanswered this many times the median latency is computed again on another worker),
#: unless the runtime has its own. Its one exact round is the whole job, so no probe can
#: pay off; with a worker 8x slow, gram's round then takes about what coded gram's does.
ONE_ROUND_BACKUP_AFTER = 1.5
#: Largest message the link probe sends (:meth:`Runtime.measure_links`); larger replies are
#: charged their own bytes at the rates it measured.
LINK_PROBE_BYTES = 2**20
#: Share of each worker's rows the tasks of gram's compute probe read in its first two
#: rounds (a warm-up, then one measured), twice that in its third: the two measured give
#: the fixed cost of a task and the cost of its rows. It runs when the links measured can
#: hold gram's round up (:class:`ProbeGram`).
GRAM_PROBE_SHARE = 1 / 32
#: Smallest reply (bytes) for which ``auto`` weighs tree aggregation for ``gd``: smaller
#: replies of 16 workers cross a 100 Mbit/s coordinator's link in about the 20-30 ms a
#: level of sums costs as a task of its own (a 2-core machine), so the tree cannot be
#: faster by the margin there, and the links are not measured.
TREE_MIN_BYTES = 16 * 2**10
#: Smallest matrix (its values as float64) worth a probe: a smaller job takes about as
#: long as the probe itself, so ``auto`` keeps the rule there.
MEASURE_MIN_BYTES = 64 * 2**20


def worth_measuring(n_rows: int, n_columns: int) -> bool:
    """Whether ``auto`` probes the workers for a matrix of this shape: at least
    :data:`MEASURE_MIN_BYTES` of float64 values.

    Examples
    --------
    >>> worth_measuring(20_000, 300), worth_measuring(400_000, 100)
    (False, True)
    """
    return 8 * n_rows * n_columns >= MEASURE_MIN_BYTES


@dataclass(frozen=True)
class Candidate:
    """A method ``auto`` may run: its ``label`` in reports (e.g. ``"coded(s=1)"``), the
    ``method`` that runs when it is chosen, the ``surrogate`` the simulation plays for
    it (itself, or the GD method with the same waiting rule for gram and block), and the
    runtime settings it runs with: ``backup_after`` (None: the runtime's own) and
    ``aggregation`` (None: the runtime's own)."""

    label: str
    method: Method
    surrogate: Method
    backup_after: float | None = None
    aggregation: str | None = None


@dataclass(frozen=True)
class Choice:
    """What ``auto`` measured, predicted and chose: the chosen ``method`` and its
    ``label``; the ``plain`` label, the rule's on the data (kept unless another is
    predicted :data:`MARGIN` times faster); the ``predicted`` seconds per round of the
    probe's kind (a gd round on the probed rows) by label; the ``probe_rounds`` and
    ``probe_seconds`` (wall, from the probe's start to the choice: its data load and any
    link measurement included); each worker's mean latency over the
    rounds fitted (``worker_latency``, s); the probe's trace ``probe_latency`` (workers in
    columns, rounds in rows, None where a worker delivered nothing), both as tasks of all
    the worker's rows loaded (compute times scaled up from :data:`TASK_FRACTION`); the
    ``probe_fraction`` of the rows it read (1: all); the ``backup_after`` and
    ``aggregation`` it runs the method with (None: the runtime's own settings); and the
    ``links`` measured (None: not measured)."""

    method: Method
    label: str
    plain: str
    predicted: dict[str, float]
    probe_rounds: int
    probe_seconds: float
    worker_latency: list[float] = field(default_factory=list)
    probe_latency: list[list[float | None]] = field(default_factory=list)
    probe_fraction: float = 1.0
    backup_after: float | None = None
    aggregation: str | None = None
    links: Links | None = None

    @contextmanager
    def applied(self, runtime: Runtime) -> Iterator[None]:
        """Run with the choice's settings: its ``backup_after`` and ``aggregation`` on
        ``runtime`` (restored after)."""
        before = runtime.backup_after, getattr(runtime, "aggregation", None)
        if self.backup_after is not None:
            runtime.backup_after = self.backup_after
        if self.aggregation is not None:
            runtime.aggregation = self.aggregation  # type: ignore[attr-defined]
        try:
            yield
        finally:
            runtime.backup_after = before[0]
            if self.aggregation is not None:
                runtime.aggregation = before[1]  # type: ignore[attr-defined]

    def as_attrs(self, result: Result | None = None) -> dict[str, Any]:
        """Return the choice as plain values for ``result.attrs["auto"]``, with
        ``achieved``, the mean seconds per round of ``result`` (the chosen method's run),
        when its rounds are of the probe's kind (gd, coded GD or DSAG on all the rows)."""
        attrs: dict[str, Any] = {
            "choice": self.label, "plain": self.plain,
            "predicted": {k: round(v, 6) for k, v in self.predicted.items()},
            "probe_rounds": self.probe_rounds, "probe_seconds": round(self.probe_seconds, 3),
            "probe_fraction": self.probe_fraction, "backup_after": self.backup_after,
            "aggregation": self.aggregation, "link": _link_attrs(self.links),
            "worker_latency": [round(v, 6) for v in self.worker_latency],
            "probe_latency": self.probe_latency,
            "margin": MARGIN,
            "assumption": "dsag(w=n-1) needs as many rounds as gd",
        }
        comparable = self.method.name in ("gd", "coded", "dsag") and self.probe_fraction == 1
        if comparable and result is not None and "iteration_duration" in result.trace:
            durations = np.asarray(result.trace["iteration_duration"], dtype=float)
            if durations.size:
                attrs["achieved"] = round(float(np.nanmean(durations)), 6)
        return attrs

    def summary(self) -> str:
        """One line: the choice and why (:func:`describe`)."""
        return f"auto: {describe(self.as_attrs())}"


def describe(auto: dict[str, Any]) -> str:
    """Say what ``auto`` ran and why, from ``result.attrs["auto"]`` (:meth:`Choice.as_attrs`):
    ``"ran coded(s=1) after 8 probe rounds (1.2 s); predicted per gd round: ..."``, or,
    when nothing was probed (a single candidate: one worker), that the rule chose.

    Examples
    --------
    >>> describe({"choice": "gd", "probe_rounds": 0, "probe_seconds": 0.0, "predicted": {}})
    'ran gd, the rule on the data (one candidate on this cluster: nothing to probe)'
    """
    link = auto.get("link")
    links = "" if not link else (
        "; links measured: slowest worker " + (
            "not slower than the coordinator" if min(link["bandwidth"]) >= UNLIMITED
            else f"{min(link['bandwidth']) / 1e6:.3g} MB/s")
        + f", coordinator {link['coordinator'] / 1e6:.3g} MB/s")
    if auto.get("backup_after") is not None and not auto["probe_rounds"]:
        return (f"ran {auto['choice']} with speculative backups (a worker's unit unanswered "
                f"{auto['backup_after']:g} times the median latency is computed again "
                "elsewhere): one exact round is the whole job, no probe could pay off"
                + (links and links + ": another method could save its round less than "
                   "measuring them took"))
    if not auto["probe_rounds"] or not auto["predicted"]:
        return (f"ran {auto['choice']}, the rule on the data (one candidate on this cluster: "
                "nothing to probe)")
    ranked = sorted(auto["predicted"].items(), key=lambda kv: kv[1])
    kind = "gram" if auto.get("plain") == "gram" else "gd"
    return (f"ran {auto['choice']} after {auto['probe_rounds']} probe rounds "
            f"({auto['probe_seconds']:.1f} s){links}; predicted per {kind} round: "
            + ", ".join(f"{label} {seconds:.3g} s" for label, seconds in ranked))


def candidates(plain: Method, n_workers: int) -> list[Candidate]:
    """Return the methods ``auto`` compares for ``plain`` (the rule's ``gd``, ``gram`` or
    ``block``) on ``n_workers`` workers: ``plain`` first; then, on two or more workers, its
    coded variants (cyclic repetition tolerating ``s`` = 1 .. :data:`MAX_STRAGGLERS`
    stragglers, ``s <= n - 2``: no worker holds the whole matrix) and, for gd, DSAG
    waiting for ``n - 1`` workers."""
    gd = make_method("gd")
    coded_plain = plain.name in ("gram", "block")
    out = [Candidate(plain.name, plain, gd if coded_plain else plain)]
    if n_workers < 2:
        return out
    for s in range(1, min(MAX_STRAGGLERS, n_workers - 2) + 1):  # never every partition
        coded = make_method("coded", scheme="cyclic-repetition", n_stragglers=s)
        method = (make_method(plain.name, scheme="cyclic-repetition", n_stragglers=s)
                  if coded_plain else coded)
        out.append(Candidate(f"{plain.name if coded_plain else 'coded'}(s={s})", method,
                             coded))
    if plain.name == "gd":
        dsag = make_method("dsag", n_wait=n_workers - 1)
        out.append(Candidate(f"dsag(w={n_workers - 1})", dsag, dsag))
    return out


def gram_candidates(gram: Method, n_workers: int, backup_after: float) -> list[Candidate]:
    """Return the candidates for ``gram`` when the links may hold its round up: itself
    with speculative backups (``backup_after``), its coded variants (:func:`candidates`)
    and, on three or more workers, itself with ``aggregation="tree"`` (one sum reaches
    the coordinator)."""
    plain, *coded = candidates(gram, n_workers)
    out = [replace(plain, backup_after=backup_after), *coded]
    if n_workers >= 3:
        out.append(Candidate(f"{gram.name}(tree)", gram, plain.surrogate, aggregation="tree"))
    return out


def predict(options: list[Candidate], model: LatencyModel, n_workers: int,
            rng: np.random.Generator, *, links: Links | None = None, message_bytes: int = 0,
            rounds: int = SIM_ROUNDS, sum_duration: float = 0.0) -> dict[str, float]:
    """Return each candidate's simulated seconds per round, by label, on ``n_workers``
    workers whose tasks of an equal share of the rows take ``model``'s (per-worker)
    latency, over ``rounds`` rounds (each candidate with its runtime settings); ``rng``
    seeds the surrogate problem and the latencies (the same draws for every candidate).
    With ``links``, every message also crosses them as one of ``message_bytes`` bytes
    would (the surrogate's smaller messages meet bandwidths scaled down by as much): the
    replies to the coordinator its ``to_coordinator`` links, tree aggregation's sums the
    ``between_workers`` ones, each sum a task of ``sum_duration`` seconds."""
    from daskstraggle.data import open_matrix
    from daskstraggle.runtime.fault_simulation import make_least_squares_data
    from daskstraggle.runtime.sim import SimRuntime

    X, y = make_least_squares_data(n_workers, rows_per_worker=24, n_features=6,
                                   seed=int(rng.integers(2**32)))
    # read-only float64 rows take the numpy kernels: nothing to compile in this process
    # (0.4 s of numba in a client that runs no kernel) for blocks of 24 x 6
    X.setflags(write=False)
    matrix = open_matrix(X, labels=y, n_partitions=n_workers)
    seed = int(rng.integers(2**32))
    models = {"flat": model, "tree": model}
    if links is not None:
        factor = message_bytes / SURROGATE_MESSAGE_BYTES
        models = {"flat": _scaled(links.to_coordinator, model, factor),
                  "tree": _scaled(links.between_workers, model, factor)}
    out: dict[str, float] = {}
    for option in options:
        with SimRuntime(n_workers=n_workers, latency=models[option.aggregation or "flat"],
                        rng=seed,
                        backup_after=option.backup_after, sum_duration=sum_duration,
                        aggregation=option.aggregation or "flat") as sim:
            outcome = _rounds(sim, option.surrogate, LeastSquares(), matrix, rounds, rng=seed)
        out[option.label] = float(np.mean(outcome.rows.column("iteration_duration")))
    return out


def _scaled(link: Link, model: LatencyModel, factor: float) -> Link:
    """``link`` on top of ``model``, its bandwidths divided by ``factor`` (a message
    ``factor`` times smaller takes as long)."""
    def scale(value: Any) -> Any:
        if value is None:
            return None
        return tuple(v / factor for v in value) if isinstance(value, tuple) else value / factor

    return Link(base=model, bandwidth=scale(link.bandwidth),
                coordinator=scale(link.coordinator), latency=link.latency)


def _link_attrs(links: Links | None) -> dict[str, Any] | None:
    """The measured ``links`` as plain values (bytes/s per worker to the coordinator and
    to other workers, of the coordinator; seconds per message), None when not measured."""
    if links is None:
        return None
    link, peers = links

    def rates(value: Any) -> list[float]:
        return [float(b) for b in np.atleast_1d(value or UNLIMITED)]

    return {"bandwidth": rates(link.bandwidth), "peer_bandwidth": rates(peers.bandwidth),
            "coordinator": float(link.coordinator or UNLIMITED),
            "latency": [round(float(v), 6) for v in np.atleast_1d(link.latency)]}


def links_matter(link: Link, n_workers: int, nbytes: int, backup_after: float,
                 least: float = 0.0) -> bool:
    """Whether another method could save a round of gram with speculative backups (after
    ``backup_after`` times the median latency) more than ``least`` seconds (what measuring
    the links took: less cannot pay for probing further), its every worker sending
    ``nbytes`` bytes on ``link``: a worker's message alone takes over that times the
    median worker's, and the backups wait up to that long for it (a backup's message then
    crosses a fast link); or the messages share the coordinator's link longer than the
    slowest takes alone, which no backup shortens.

    Examples
    --------
    >>> links_matter(Link(bandwidth=(1e8, 1e8, 1e6)), 3, 10**6, 1.5)
    True
    >>> links_matter(Link(bandwidth=(1e8, 1e8, 1e6)), 3, 10**6, 1.5, least=0.1)
    False
    >>> links_matter(Link(bandwidth=1e8, coordinator=1e9), 3, 10**6, 1.5)
    False
    """
    alone = [link.message_duration(i, nbytes) for i in range(n_workers)]
    median = float(np.median(alone))
    caught = (min(max(alone) - median, backup_after * median)
              if max(alone) > backup_after * median else 0.0)
    shared = n_workers * link.coordinator_duration(nbytes) - max(alone)
    return max(caught, shared) > least


def pick(predicted: dict[str, float], plain: str, trees: frozenset[str] | set[str] = frozenset()
         ) -> str:
    """Return the label to run: the fastest predicted, if :data:`MARGIN` times faster than
    ``plain``; else ``plain``. A label in ``trees`` (tree aggregation, the least faithful
    prediction: its sums' tasks are charged roughly) must be :data:`MARGIN` times faster
    than the label chosen among the others.

    Examples
    --------
    >>> pick({"gram": 1.0, "gram(s=1)": 0.7, "gram(tree)": 0.6}, "gram", {"gram(tree)"})
    'gram(s=1)'
    >>> pick({"gram": 1.0, "gram(s=1)": 0.7, "gram(tree)": 0.5}, "gram", {"gram(tree)"})
    'gram(tree)'
    """
    flat = {k: v for k, v in predicted.items() if k not in trees}
    best = min(flat, key=flat.__getitem__)
    label = best if flat[best] * MARGIN <= flat[plain] else plain
    return min((t for t in trees if predicted[t] * MARGIN <= predicted[label]),
               key=predicted.__getitem__, default=label)


def measure_and_choose(runtime: Runtime, problem: Problem, matrix: Matrix, plain: Method, *,
                       rng: np.random.Generator,
                       clock: Callable[[], float] = time.perf_counter) -> Choice:
    """Probe the runtime's workers with a short GD run of ``problem`` (unbound) on
    ``matrix``, simulate the :func:`candidates` for ``plain`` (the rule's method) under
    gamma laws fitted to the probe, and return the :class:`Choice`. For ``gd`` on three
    or more workers whose replies are of :data:`TREE_MIN_BYTES` or more and took long
    enough that one sum could pay (:func:`_tree_may_pay`), the links are measured and ``gd`` with
    ``aggregation="tree"`` is a candidate too (:func:`_predict_tree`), run only if
    :data:`MARGIN` times faster than the flat choice. ``rng`` seeds the probe and the
    simulation; ``clock`` measures the probe's wall seconds. ``gram`` on a runtime that
    sends backups is not probed (its one round is the whole job): it runs with
    ``backup_after`` :data:`ONE_ROUND_BACKUP_AFTER` unless the runtime has its own
    (:func:`_choose_gram`)."""
    from daskstraggle.latency import fit_trace

    n = runtime.n_workers
    options = candidates(plain, n)
    if len(options) == 1:
        return Choice(plain, plain.name, plain.name, {}, 0, 0.0)
    if plain.name == "gram" and type(runtime).backups:
        after = runtime.backup_after
        return _choose_gram(runtime, problem, matrix, plain, rng=rng, clock=clock,
                            backup_after=ONE_ROUND_BACKUP_AFTER if after is None else after)
    start = clock()
    probe, fraction = _probe_some(runtime, problem, matrix, plain, rng)
    share = _task_share(fraction)
    arrays = _fit_arrays(probe.rows, whole=fraction == 1.0, share=share)
    predicted = predict(options, fit_trace(arrays), n, rng)
    links = None
    if plain.name == "gd" and fraction == 1.0 and n >= 3 and _tree_may_pay(
            probe.rows, min(predicted.values())):
        links, tree, seconds = _predict_tree(runtime, plain, probe.rows, share, rng)
        if tree is not None:
            options.append(tree)
            predicted[tree.label] = seconds
    label = pick(predicted, plain.name,
                 trees={o.label for o in options if o.aggregation == "tree"})
    chosen = next(option for option in options if option.label == label)
    return Choice(chosen.method, label, plain.name, predicted, PROBE_ROUNDS, clock() - start,
                  *_latency_tables(probe.rows, arrays, share), fraction,
                  aggregation=chosen.aggregation, links=links)


def _probe_some(runtime: Runtime, problem: Problem, matrix: Matrix, plain: Method,
                rng: np.random.Generator) -> tuple[Outcome, float]:
    """:func:`_probe` on the rows :func:`_probed_rows` picks (all of them if a share of
    them misses every call of a sample); the outcome and the share of the rows read."""
    probed, fraction = _probed_rows(matrix, plain, runtime.n_workers)
    try:
        return _probe(runtime, problem, probed, rng, share=_task_share(fraction)), fraction
    except NoCallError:
        if fraction == 1.0:
            raise  # the run's own refusal: the caller removes them and runs again
    # a share of the rows can miss every call of a sample that has calls elsewhere
    return _probe(runtime, problem, matrix, rng, share=_task_share(1.0)), 1.0


def _latency_tables(rows: TraceRecorder, arrays: dict[str, np.ndarray], share: float
                    ) -> tuple[list[float], list[list[float | None]]]:
    """:class:`Choice`'s ``worker_latency`` and ``probe_latency`` from the probe's trace
    ``rows``, as tasks of a whole ``share`` (a censored worker's mean from ``arrays``)."""
    compute, _, communication = rows.per_worker()
    table = compute / share + communication
    means = [float(np.nanmean(column)) if np.isfinite(column).any()
             else float(np.mean(arrays["compute_duration"][:, j]))  # censored
             for j, column in enumerate(table[WARMUP_ROUNDS:].T)]
    return means, [[None if np.isnan(v) else round(float(v), 6) for v in row] for row in table]


def _tree_may_pay(rows: TraceRecorder, best: float) -> bool:
    """Whether tree aggregation could run a round :data:`MARGIN` times faster than
    ``best`` seconds, by the probe's trace ``rows``: its messages are of
    :data:`TREE_MIN_BYTES` or more, and the slowest worker's median communication time
    (what one sum could save at most) is over the share of ``best`` the margin asks."""
    communication = rows.per_worker()[2][WARMUP_ROUNDS:]
    if not np.isfinite(communication).any() or _message_bytes(rows) < TREE_MIN_BYTES:
        return False
    with warnings.catch_warnings():  # a worker that never answered: NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        slowest = float(np.nanmax(np.nanmedian(communication, axis=0)))
    return slowest > best * (1 - 1 / MARGIN)


def _message_bytes(rows: TraceRecorder) -> int:
    """The median bytes of one reply in the probe's rounds (the warm-up left out)."""
    answered = np.isfinite(rows.per_worker()[1][WARMUP_ROUNDS:]).sum(axis=1)
    return int(np.median(rows.column("bytes_to_coordinator")[WARMUP_ROUNDS:]
                         / np.maximum(answered, 1)))


def _predict_tree(runtime: Runtime, plain: Method, rows: TraceRecorder, share: float,
                  rng: np.random.Generator) -> tuple[Links | None, Candidate | None, float]:
    """Measure the links with the probe's messages (``rows``: its trace, each task on
    ``share`` of its rows) and predict ``plain`` with ``aggregation="tree"`` on them:
    the laws fitted to the probe's compute and to its communication beyond the messages'
    bytes, the sums simulated on the links between workers, each sum a task of the least
    of the workers' median fixed cost (``SimRuntime(sum_duration=)``). Return the links
    (None: not measured), the tree candidate (None: no prediction) and its seconds per
    round."""
    from daskstraggle.latency import fit_trace

    n = runtime.n_workers
    nbytes = _message_bytes(rows)
    links = runtime.measure_links(max(1, min(nbytes, LINK_PROBE_BYTES)))
    if links is None:
        return None, None, math.inf
    bytes_only = Links(*(replace(link, latency=0.0) for link in links))
    arrays = _fit_arrays(rows, whole=True, share=share, link=bytes_only.to_coordinator)
    tree = Candidate(f"{plain.name}(tree)", plain, plain, aggregation="tree")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        fixed = float(np.nanmin(np.nanmedian(arrays["communication_duration"], axis=0)))
    return links, tree, predict([tree], fit_trace(arrays), n, rng, links=bytes_only,
                                message_bytes=nbytes, sum_duration=fixed)[tree.label]


def _choose_gram(runtime: Runtime, problem: Problem, matrix: Matrix, gram: Method, *,
                 rng: np.random.Generator, clock: Callable[[], float],
                 backup_after: float) -> Choice:
    """``gram`` with speculative backups, unless the links measured
    (:meth:`Runtime.measure_links`, messages of gram's packed triangle up to
    :data:`LINK_PROBE_BYTES`) say another method could save its round more than
    measuring them took (:func:`links_matter`): then three
    rounds of :class:`ProbeGram` on the run's data measure each worker's compute (a task's
    fixed cost and its rows'),
    and the :func:`gram_candidates` are simulated on it and the links, one round each;
    tree aggregation's sums are simulated as tasks of the least of the probe tasks'
    fixed costs (their communication beyond their messages' bytes on the links:
    ``SimRuntime(sum_duration=)``), and the tree runs only if predicted :data:`MARGIN`
    times faster than the flat candidate chosen."""
    start = clock()
    n = runtime.n_workers
    nbytes = 8 * matrix.n_columns * (matrix.n_columns + 1) // 2
    links = runtime.measure_links(min(nbytes, LINK_PROBE_BYTES))
    if links is None or not links_matter(links.to_coordinator, n, nbytes, backup_after,
                                         least=clock() - start):
        return Choice(gram, gram.name, gram.name, {}, 0, clock() - start,
                      backup_after=backup_after, links=links)
    share = GRAM_PROBE_SHARE  # of the run's data: the run reuses what the probe loaded
    shares = (share, share, 2 * share)  # a warm-up, then two sizes: cost per row, per task
    probe = _rounds(runtime, ProbeGram(shares), problem, matrix, len(shares),
                    step_size=1.0, rng=rng)
    # the probe's communication times hold each message's fixed cost (Dask's scheduling
    # and the fetch): the links add their bytes only
    bytes_only = Links(*(replace(link, latency=0.0) for link in links))
    model = _gram_model(probe.rows, share, bytes_only.to_coordinator)
    options = gram_candidates(gram, n, backup_after)
    predicted = predict(options, model, n, rng, message_bytes=nbytes, rounds=1,
                        links=bytes_only,  # a sum: a task, the least fixed cost
                        sum_duration=min(np.atleast_1d(model.communication)))
    label = pick(predicted, gram.name,
                 trees={option.label for option in options if option.aggregation == "tree"})
    chosen = next(option for option in options if option.label == label)
    return Choice(chosen.method, label, gram.name, predicted, len(shares),
                  clock() - start, list(np.add(model.compute, model.communication)),
                  backup_after=chosen.backup_after, aggregation=chosen.aggregation,
                  links=links)


def _beyond_links(rows: TraceRecorder, link: Link) -> np.ndarray:
    """The probe's communication times (rounds x workers, NaN where a worker did not
    answer) less each message's time on ``link``, a round's messages sharing the
    coordinator's link from the end of their compute: what a message costs beyond its
    bytes (Dask's scheduling and the fetch), at least 0."""
    compute, latency, communication = rows.per_worker()
    answered = np.isfinite(latency)
    sizes = rows.column("bytes_to_coordinator") / np.maximum(answered.sum(axis=1), 1)
    for r, nbytes in enumerate(sizes):
        workers = np.flatnonzero(answered[r])
        crossed = share_link(link, [float(compute[r, i]) for i in workers], nbytes,
                             [link.rate(int(i)) for i in workers])
        communication[r, workers] = np.maximum(0.0, latency[r, workers] - crossed)
    return communication


def _gram_model(rows: TraceRecorder, share: float, link: Link) -> Constant:
    """Each worker's time for a task of gram on its whole share, from :class:`ProbeGram`'s
    rounds 1 and 2 (``share`` and twice it of each worker's rows): the cost of its rows,
    the workers' median (a task's time on a small job is mostly noise), plus each worker's
    own fixed cost; and its communication time beyond its message's on ``link`` (the
    fixed cost of a message: Dask's scheduling and the fetch), the median of the two
    rounds. A worker that did not answer gets the others' median."""
    one, two = rows.per_worker()[0][1:3]
    communication = _beyond_links(rows, link)[1:3]
    slope = two - one
    per_share = (float(np.nanmedian(np.maximum(slope, 0.0))) / share
                 if np.isfinite(slope).any() else 0.0)
    whole = np.maximum(one - per_share * share, 0.0) + per_share
    with warnings.catch_warnings():  # a worker that never answered: NaN, filled below
        warnings.simplefilter("ignore", RuntimeWarning)
        sent = np.nanmedian(communication, axis=0)

    def filled(values: np.ndarray) -> tuple[float, ...]:
        typical = float(np.nanmedian(values)) if np.isfinite(values).any() else 0.0
        return tuple(float(v) if np.isfinite(v) else typical for v in values)

    return Constant(compute=filled(whole), communication=filled(sent))


class ProbeGD(GD):
    """The probe's gradient descent: it does not wait for a busy or far slower worker.

    A round is ready once every worker holding data but one answered for it; the
    coordinator then waits :data:`PROBE_WINDOW` times the round's time so far for the last
    (:attr:`collect_window`). A worker is sent the current point only once it answered its
    previous task, so a slow worker's latency is its own, not that of a queue. Each task
    reads the first ``share`` of its worker's rows. The sum of a round without every
    worker or every row is partial: its objective is not claimed (None). Only the
    latencies matter; the iterate just moves.

    Parameters
    ----------
    share : float, default=1.0
        Share of its worker's rows each task reads (in (0, 1]).
    """

    collect_window = PROBE_WINDOW
    exact_rounds = False
    dispatch_once_per_version = False
    start_pass = final_pass = False  # its rounds' times are what it measures, not its progress

    def __init__(self, share: float = 1.0) -> None:
        super().__init__()
        self.share = share

    def start(self, problem: Problem, iterate: np.ndarray, placement: list[tuple[int, ...]],
              *, step_size: float, partition_rows: list[int] | None = None) -> None:
        """Reset the run state (no task in flight)."""
        super().start(problem, iterate, placement, step_size=step_size,
                      partition_rows=partition_rows)
        self._busy: set[int] = set()

    def dispatch(self, worker_index: int) -> WorkUnit | None:
        """Send the current point to a worker that is idle and has not had it yet."""
        if worker_index in self._busy:
            return None
        unit = super().dispatch(worker_index)
        if unit is None:
            return None
        self._busy.add(worker_index)
        if self.share < 1 and self._partition_rows is not None:
            rows = sum(self._partition_rows[p] for p in unit.partitions)
            unit = replace(unit, rows=(0, max(1, math.ceil(rows * self.share))))
        return unit

    def receive(self, result: WorkResult) -> None:
        """The worker is idle again; keep the result if it is for the current point."""
        self._busy.discard(result.unit.worker_index)
        super().receive(result)

    def ready(self) -> bool:
        """True once every worker holding data but one answered for this point."""
        return len(self._results) >= max(1, self._n_holding - 1)

    def summary(self) -> RoundSummary:
        """The (possibly partial) sum; an objective only when every worker answered."""
        summary = super().summary()
        partial = len(self._results) < self._n_holding or self.share < 1
        if partial and summary.objective is not None:
            summary = self._summary = replace(summary, objective=None)
        return summary


class ProbeGram(ProbeGD):
    """The probe of gram's compute: :class:`ProbeGD` whose tasks also compute the Gram
    matrix of the rows they read (:class:`_TimedGram`), so that each worker's compute
    time is gram's, while its message stays a gradient. Round ``r`` reads
    ``shares[r]`` of each worker's rows (the last share after the last).

    Parameters
    ----------
    shares : tuple of float
        Share of its worker's rows each task of each round reads (in (0, 1]).
    """

    def __init__(self, shares: tuple[float, ...]) -> None:
        super().__init__(shares[0])
        self.shares = shares

    def dispatch(self, worker_index: int) -> WorkUnit | None:
        """As :meth:`ProbeGD.dispatch`, on this round's share of the rows."""
        self.share = self.shares[min(self._version, len(self.shares) - 1)]
        return super().dispatch(worker_index)

    def work_problem(self, problem: Problem) -> Any:
        """The problem's kernel, after its rows' Gram matrix."""
        return _TimedGram(problem)


@dataclass(frozen=True, slots=True)
class _TimedGram:
    """Worker side of :class:`ProbeGram`: ``problem``'s kernel sum, after the blocks'
    centred Gram matrix (computed for its time, not sent)."""

    problem: Any

    def kernel_sum(self, blocks: Any, iterate: np.ndarray) -> Any:
        """The Gram matrix of ``blocks``, then the kernel sum sent."""
        self.problem.gram_kernel_sum(blocks, upper=True)
        return self.problem.kernel_sum(blocks, iterate)

    def kernel(self, block: Any, iterate: np.ndarray) -> Any:
        """:meth:`kernel_sum` of one block."""
        return self.kernel_sum((block,), iterate)


def _probe(runtime: Runtime, problem: Problem, matrix: Matrix, rng: np.random.Generator,
           share: float = 1.0) -> Outcome:
    """:data:`PROBE_ROUNDS` rounds of :class:`ProbeGD` (each task on ``share`` of its
    worker's rows) with a fixed step that moves the iterate but cannot diverge in a few
    rounds."""
    return _rounds(runtime, ProbeGD(share), problem, matrix, PROBE_ROUNDS,
                   step_size=1.0 if isinstance(problem, PCA) else 1e-9, rng=rng)


def _task_share(fraction: float) -> float:
    """Share of its worker's rows a probe task reads, the probe having loaded ``fraction``
    of the rows: :data:`TASK_FRACTION` of the run's data, all of a share."""
    return TASK_FRACTION if fraction == 1.0 else 1.0


def _rounds(runtime: Runtime, method: Method, problem: Problem, matrix: Matrix,
            n_rounds: int, **kwargs: Any) -> Outcome:
    """Run ``n_rounds`` rounds of ``method``, whether it converged or not (no warning)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return run(runtime, method, problem, matrix,
                   stop=StopRule(max_iter=n_rounds, tol=None), **kwargs)


def _fit_arrays(rows: TraceRecorder, *, whole: bool, share: float = 1.0,
                link: Link | None = None) -> dict[str, np.ndarray]:
    """The probe rounds the laws are fitted to (the warm-up left out): each worker's
    compute time (measured on the worker: the task and any injected delay), divided by
    the ``share`` of its rows each task read (a whole task's), which the simulation
    scales with a task's rows, and, when the probe ran on all the rows, its
    communication time, which it does not. A probe of a share of the rows loaded says
    nothing of the real round's messages (gram's is d x d), so then compute alone decides.
    With ``link``, the communication time is taken beyond the messages' time on it
    (:func:`_beyond_links`: the fixed cost of a message, for a run whose messages cross
    other links).

    A worker with fewer than two answers in those rounds (busy, or far slower than the
    probe waited for) is censored: each round it did not answer counts as a compute
    time of the round's duration, and as the other workers' median communication time."""
    compute, _, measured = (a[WARMUP_ROUNDS:] for a in rows.per_worker())
    if link is not None:
        measured = _beyond_links(rows, link)[WARMUP_ROUNDS:]
    compute = compute / share
    communication = measured if whole else None
    rounds = rows.column("iteration_duration")[WARMUP_ROUNDS:] / share
    for worker in np.flatnonzero(np.isfinite(compute).sum(axis=0) < 2):
        missing = ~np.isfinite(compute[:, worker])
        compute[missing, worker] = rounds[missing]
        if communication is not None:
            others = np.delete(communication, worker, axis=1)[missing]
            typical = (np.nanmedian(others, axis=1) if np.isfinite(others).any()
                       else np.zeros(int(missing.sum())))
            communication[missing, worker] = np.nan_to_num(typical)
    arrays = {"compute_duration": compute}
    if communication is not None:
        arrays["communication_duration"] = communication
    return arrays


def _probed_rows(matrix: Matrix, plain: Method, n_workers: int) -> tuple[Matrix, float]:
    """The rows the probe reads, and their share: for gram and block on a genotype
    matrix the first :data:`PROBE_FRACTION` of each partition's rows (at least one),
    else all of them."""
    if plain.name not in ("gram", "block") or not matrix.genotypes:
        return matrix, 1.0
    if matrix.n_partitions < n_workers:
        matrix = matrix.repartition(min(n_workers, matrix.n_rows))
    bounds = np.asarray(matrix.bounds)
    keep = [np.arange(a, a + max(1, int(np.ceil((b - a) * PROBE_FRACTION))))
            for a, b in itertools.pairwise(bounds)]
    rows = np.concatenate(keep)
    return matrix.select_rows(rows), len(rows) / matrix.n_rows
