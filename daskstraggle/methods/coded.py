"""Coded gradient descent (exact gradients from a subset of workers) and the biased baseline."""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import numpy as np

from daskstraggle._validation import check_bool, check_int
from daskstraggle.coding.base import CodeAssignment, CodingScheme, Coverage, make_scheme
from daskstraggle.errors import InvalidParameterError, StraggleWarning
from daskstraggle.methods.base import Method, Placement, RoundSummary, WorkResult, WorkUnit
from daskstraggle.methods.gd import Nesterov
from daskstraggle.methods.options import MethodOption
from daskstraggle.methods.sgd import SGD
from daskstraggle.problems.base import KernelResult, Problem, combine
from daskstraggle.problems.pca import PCA

__all__ = ["CodedGD", "CodedSum", "IgnoreStragglers"]


#: The coding scheme's options, for every method coded by a scheme.
_STRAGGLERS_TOLERATED = MethodOption(
    "--stragglers-tolerated", "n_stragglers", "s, the workers that may not answer "
    "(repetition codes).", type=int)
SCHEME_OPTIONS = (
    MethodOption("--scheme", "scheme", "the code (uncoded, fractional-repetition, "
                 "cyclic-repetition, partial-straggler, bcc, bcc-heterogeneous; default "
                 "cyclic-repetition for coded, uncoded otherwise)."),
    _STRAGGLERS_TOLERATED,
    MethodOption("--batch-size", "batch_size", "with --scheme bcc: partitions per batch (r).",
                 type=int),
    MethodOption("--straggler-alpha", "alpha_slowdown", "with --scheme partial-straggler: "
                 "slow-down factor alpha > 1.", type=float, param="alpha"),
)


class _DrawsPlacement:
    """Keeps the assignment a coded method draws in ``placement`` for its run."""

    _assignment: CodeAssignment | None = None

    @property
    def assignment(self) -> CodeAssignment | None:
        """The drawn assignment of the current run."""
        return self._assignment

    def _keep(self, assignment: CodeAssignment, n_partitions: int) -> Placement:
        """Keep ``assignment`` (which must have ``n_partitions``); return its placement."""
        if assignment.n_partitions != n_partitions:
            raise InvalidParameterError(
                f"{type(self).__name__} ({assignment.scheme!r} scheme) needs "
                f"{assignment.n_partitions} partitions, the runtime has {n_partitions}.")
        self._assignment = assignment
        return [tuple(p) for p in assignment.placement]

    def _drawn(self, placement: Placement) -> CodeAssignment:
        """Return the kept assignment, whose placement ``placement`` must be."""
        if self._assignment is None or not self._assignment.matches(placement):
            raise InvalidParameterError(
                f"{type(self).__name__}.start needs the placement it drew itself.")
        return self._assignment


class CodedGD(_DrawsPlacement, Method):
    """Gradient descent with a coding scheme: step as soon as the responders decode.

    Every worker stores the partitions of the scheme's placement and returns its coded
    messages; each iteration steps as soon as the messages received for the current
    iterate decode to the exact full gradient, so the iterates equal plain GD's.

    Parameters
    ----------
    scheme : str or CodingScheme, default="cyclic-repetition"
        The code (see :func:`daskstraggle.coding.list_schemes`).
    rng : int or None, default=None
        Seed of the scheme's random parts (cyclic repetition's ``H``, BCC's batches).
    nesterov : bool, default=False
        Accelerate with Nesterov momentum (as :class:`NAG`, whose iterates it then
        equals). Regression problems only.
    **scheme_params
        Parameters of the scheme when given by name, e.g. ``n_stragglers=1``,
        ``batch_size=2``, ``alpha=2``.

    Raises
    ------
    InvalidParameterError
        For an unknown scheme or invalid scheme parameters; at the start of a run, for a
        drawn assignment that can never decode (e.g. BCC batches no worker picked) and
        for latency-only schemes (``mds-ideal``: use the latency simulator).

    References
    ----------
    Tandon, Lei, Dimakis, Karampatziakis, "Gradient coding", ICML 2017. Li, Kalan,
    Avestimehr, Soltanolkotabi, "Near-optimal straggler mitigation for distributed
    gradient methods" (batched coupon's collector), IPDPSW 2018. Notes:
    ``docs/algorithms.md``.

    Examples
    --------
    >>> CodedGD("cyclic-repetition", n_stragglers=1).get_params()["scheme"]["n_stragglers"]
    1
    """

    name = "coded"
    description = "exact gradient from a subset, see --scheme"
    exact_rounds = True
    dispatch_once_per_version = True
    cli_options: ClassVar[tuple[MethodOption, ...]] = (*SCHEME_OPTIONS, MethodOption(
        "--nesterov", "nesterov", "Nesterov momentum on the decoded exact gradient "
        "(regression).", type=bool))

    def __init__(self, scheme: str | CodingScheme = "cyclic-repetition", *,
                 rng: int | None = None, nesterov: bool = False,
                 **scheme_params: Any) -> None:
        if isinstance(scheme, CodingScheme):
            if scheme_params:
                raise InvalidParameterError(
                    "Pass scheme parameters either inside the CodingScheme or by name, not both."
                )
            self.scheme = scheme
        else:
            self.scheme = make_scheme(scheme, **scheme_params)
        self.rng = rng
        self.nesterov = check_bool(nesterov, name="nesterov", caller="CodedGD")

    def get_params(self) -> dict[str, Any]:
        """As :meth:`Method.get_params`; ``scheme`` is the scheme's parameters."""
        return {**super().get_params(), "scheme": self.scheme.to_dict()}

    def check_problem(self, problem: Problem) -> None:
        """Refuse Nesterov momentum for problems whose iterates are not vectors (PCA)."""
        if self.nesterov and not getattr(problem, "supports_momentum", True):
            raise InvalidParameterError(
                f"The 'nesterov' parameter of CodedGD must be False for {problem.name} (CLI: "
                "drop --nesterov): its iterates are subspaces (orthonormal bases), not "
                "vectors, so momentum does not apply. Got True instead."
            )

    def check_n_workers(self, n_workers: int) -> None:
        """Refuse scheme parameters that do not fit ``n_workers`` (e.g. s >= N)."""
        self.scheme.check_n_workers(n_workers)

    def partition_count(self, n_workers: int, n_rows: int) -> int | None:
        """Return the scheme's number of partitions ``K``."""
        return self.scheme.partition_count(n_workers, n_rows)

    def placement(self, n_partitions: int, n_workers: int) -> Placement:
        """Draw the assignment and return which partitions each worker stores."""
        assignment = self.scheme.assign(n_workers, rng=self.rng)
        if assignment.info.get("latency_only"):
            raise InvalidParameterError(
                f"The {assignment.scheme!r} scheme is a latency-only bound; it has no "
                "encoding to run. Use `daskstraggle simulate` (or latency.simulate) for it."
            )
        if not assignment.info.get("covers", True):
            raise InvalidParameterError(
                f"The drawn {assignment.scheme!r} assignment leaves some data on no worker, "
                "so it can never decode (probability of coverage "
                f"{assignment.info.get('coverage_probability', float('nan')):.3g}); use more "
                "workers, a larger batch size or another rng."
            )
        placement = self._keep(assignment, n_partitions)
        if n_workers > 1 and all(len(set(p)) == n_partitions for p in placement):
            warnings.warn(
                f"The {assignment.scheme!r} scheme with these parameters stores the whole "
                f"matrix on every one of the {n_workers} workers ({n_workers}x the memory and "
                "work of uncoded): it tolerates all but one worker. Use more workers or "
                "fewer tolerated stragglers (CLI: --stragglers-tolerated) to store less.",
                StraggleWarning, stacklevel=3)
        return placement

    def _reset(self) -> None:
        assignment = self._drawn(self._placement)
        if self.nesterov:
            self._momentum = Nesterov(self._x)
        self._sent: set[int] = set()
        self._messages: dict[tuple[int, int], KernelResult] = {}
        self._coverage = Coverage(assignment)
        self._weights: dict[tuple[int, int], float] | None = None

    def dispatch(self, worker_index: int) -> WorkUnit | None:
        """Send the current iterate and the worker's coefficients, once per iterate."""
        assert self._assignment is not None
        parts = self._assignment.placement[worker_index]
        if worker_index in self._sent or not parts or self._weights is not None:
            return None
        self._sent.add(worker_index)
        return WorkUnit(worker_index, tuple(parts), self._point(), self._version,
                        coefficients=self._assignment.coefficients[worker_index])

    def receive(self, result: WorkResult) -> None:
        """Keep the messages of the current iterate; decode once they cover every partition
        (no decoder can succeed before: :class:`~daskstraggle.coding.base.Coverage`)."""
        assert self._assignment is not None
        if result.unit.version != self._version or self._weights is not None:
            return
        messages = result.result if isinstance(result.result, tuple) else (result.result,)
        worker = result.unit.worker_index
        for j, message in enumerate(messages):
            self._messages[(worker, j)] = message
            self._coverage.add(worker, j)
        if self._coverage.complete:
            self._weights = self._assignment.decode(self._messages)

    def ready(self) -> bool:
        """True once the received messages decode to the full gradient."""
        return self._weights is not None

    def _summarise(self) -> RoundSummary:
        """The decoded exact kernel sum."""
        return self._summary_of(self._decoded(), **self._responders())

    def step(self) -> None:
        """Take the exact gradient step (from the look-ahead point with Nesterov)."""
        summary = self.summary()
        self._update(summary.result.gradient, summary.objective)
        self._clear_round()

    def _decoded(self) -> KernelResult:
        """Return the decoded exact sum of the current round (once it decodes)."""
        assert self._weights is not None
        keys = sorted(k for k, w in self._weights.items() if w != 0)
        return combine([self._messages[k] for k in keys], [self._weights[k] for k in keys])

    def _responders(self) -> dict[str, Any]:
        """Return ``workers_used`` (the workers whose messages entered the sum) and
        ``n_fresh`` (how many answered), as :class:`RoundSummary` fields."""
        assert self._weights is not None
        used = sorted({k[0] for k, w in self._weights.items() if w != 0})
        return {"workers_used": tuple(used), "n_fresh": len({k[0] for k in self._messages})}

    def _clear_round(self) -> None:
        """Advance the version and forget the round's messages."""
        assert self._assignment is not None
        self._next_version(self._sent, self._messages)
        self._coverage = Coverage(self._assignment)
        self._weights = None


class CodedSum(CodedGD):
    """Base of the exact PCA methods whose every round is one sum, coded or not.

    Parameters
    ----------
    scheme : str or CodingScheme, default="uncoded"
        How the sum is made straggler-resilient (see
        :func:`daskstraggle.coding.list_schemes`): ``"uncoded"`` waits for every worker
        holding data; ``"fractional-repetition"`` or ``"cyclic-repetition"`` with
        ``n_stragglers=s`` decode from any ``N - s`` workers; ``"bcc"`` from a covering set
        of batches.
    rng : int or None, default=None
        Seed of the scheme's random parts.
    **scheme_params
        Parameters of the scheme when given by name, e.g. ``n_stragglers=1``.
    """

    cli_options = SCHEME_OPTIONS
    #: Why the method solves PCA only, in the refusal of other problems.
    pca_only: ClassVar[str] = "it is an eigensolver"

    def __init__(self, scheme: str | CodingScheme = "uncoded", *, rng: int | None = None,
                 **scheme_params: Any) -> None:
        super().__init__(scheme, rng=rng, **scheme_params)

    def check_problem(self, problem: Problem) -> None:
        """Refuse problems other than PCA."""
        if not isinstance(problem, PCA):
            raise InvalidParameterError(
                f"The 'method' parameter (CLI: --method) {self.name!r} applies to PCA only "
                f"({self.pca_only}); for {problem.name} use 'gd', 'nag', 'coded', 'dsag' or "
                f"another iterative method. Got {self.name!r} instead."
            )

    def partition_count(self, n_workers: int, n_rows: int) -> int | None:
        """Return the scheme's ``K``; uncoded keeps the storage partitions (None)."""
        if self.scheme.name == "uncoded":
            return None
        return super().partition_count(n_workers, n_rows)

    def placement(self, n_partitions: int, n_workers: int) -> Placement:
        """Draw the scheme's placement; uncoded: contiguous runs of the partitions."""
        if self.scheme.name != "uncoded":
            return super().placement(n_partitions, n_workers)
        placement = Method.placement(self, n_partitions, n_workers)
        self._assignment = CodeAssignment(
            scheme="uncoded", n_workers=n_workers, n_partitions=n_partitions,
            placement=tuple(placement),
            coefficients=tuple(np.ones((1, len(parts))) for parts in placement),
            info={"recovery_threshold": sum(1 for parts in placement if parts)},
            decoder=_every_holder,
        )
        return placement


def _every_holder(assignment: CodeAssignment, received: frozenset[tuple[int, int]]
                  ) -> dict[tuple[int, int], float] | None:
    """Decode the uncoded sum: weight 1 for every worker holding data, once all arrived."""
    needed = {(i, 0) for i, parts in enumerate(assignment.placement) if parts}
    return dict.fromkeys(needed, 1.0) if needed <= received else None


class IgnoreStragglers(SGD):
    """Uncoded baseline: wait for the fastest ``N - s`` workers, scale their partial sum.

    The gradient-coding paper's "ignoring stragglers" comparison (a biased gradient):
    :class:`SGD` with ``n_wait = N - s`` and no collect window.

    Parameters
    ----------
    n_stragglers : int, default=1
        Workers not waited for (``s``); must be below the number of workers.

    Examples
    --------
    >>> IgnoreStragglers(n_stragglers=2).get_params()
    {'n_stragglers': 2}
    """

    name = "ignore-stragglers"
    description = "wait for all but --stragglers-tolerated workers, biased"
    cli_options = (_STRAGGLERS_TOLERATED,)

    def __init__(self, n_stragglers: int = 1) -> None:
        self.n_stragglers = check_int(n_stragglers, name="n_stragglers",
                                      caller="IgnoreStragglers", low=0)
        super().__init__(None, collect_window=0.0)

    get_params = Method.get_params  # its own parameters, not SGD's

    def step_factor(self, problem: Problem, n_workers: int) -> float:
        """Return 1.0: the gradient-coding baseline takes GD's step, like the coded methods."""
        return 1.0

    def check_n_workers(self, n_workers: int) -> None:
        """Refuse ``n_stragglers >= n_workers``."""
        check_int(self.n_stragglers, name="n_stragglers", caller="IgnoreStragglers", low=0,
                  high=n_workers - 1, remedy="It must be below the number of workers.")

    def _reset(self) -> None:
        """Wait for all workers holding data but ``n_stragglers``."""
        holders = sum(1 for p in self._placement if p)
        self.check_n_workers(holders)
        self.n_wait = holders - self.n_stragglers
        super()._reset()
