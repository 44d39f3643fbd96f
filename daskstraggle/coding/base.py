"""The CodingScheme contract: which partitions each worker stores, what it sends, how to decode.

``g_k`` is the kernel sum over partition ``k`` of ``K``; worker ``i``'s message ``j`` is
``sum_p coefficients[i][j, p] * g_{placement[i][p]}``, and ``decode(received)`` returns
weights ``w`` with ``sum w[(i, j)] * message_(i, j) = sum_k g_k`` exactly (float64), or None
(decoders check the residual and never return wrong weights). Pure numpy.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar

import numpy as np

from daskstraggle._registry import Registry
from daskstraggle._validation import check_int
from daskstraggle.errors import InvalidParameterError

__all__ = [
    "CodeAssignment",
    "CodingScheme",
    "Coverage",
    "get_scheme_class",
    "list_schemes",
    "make_scheme",
    "register_scheme",
]

Received = tuple[int, int]  # (worker_index, message_index)

_REGISTRY: Registry[CodingScheme] = Registry(
    "coding scheme", group="daskstraggle.schemes",
    unknown=lambda name, names: (
        f"The 'scheme' parameter must be one of {names}. Got {name!r} instead."
    ),
)
# The registry's methods are the public functions (see daskstraggle._registry).
register_scheme = _REGISTRY.register
list_schemes = _REGISTRY.names
get_scheme_class = _REGISTRY.get


def make_scheme(name: str, **params: Any) -> CodingScheme:
    """Build a registered scheme from its name and parameters.

    Raises
    ------
    InvalidParameterError
        If the name is unknown or a parameter is missing, not accepted or invalid.
    """
    cls = _REGISTRY.get(name)
    missing = [f.name for f in fields(cls)  # type: ignore[arg-type]
               if f.default is MISSING and f.default_factory is MISSING and f.name not in params]
    if missing:
        raise InvalidParameterError(_missing_message(cls.name, missing))
    return _REGISTRY.make(name, **params)


#: Command-line flags of the scheme parameters (``daskstraggle pca ... --method coded``).
_CLI_FLAGS = {"n_stragglers": "--stragglers-tolerated S", "batch_size": "--batch-size R",
              "alpha": "--straggler-alpha A"}


def _missing_message(label: str, missing: list[str]) -> str:
    """Say which parameters a scheme needs, in Python and on the command line."""
    python = ", ".join(f"{m}=..." for m in missing)
    flags = [_CLI_FLAGS[m] for m in missing if m in _CLI_FLAGS]
    cli = (f"CLI: {' '.join(flags)}" if len(flags) == len(missing)
           else "the CLI has no flags for them: use the Python API")
    return (f"The coding scheme {label!r} needs {missing}: pass {python} with the scheme "
            f"(Python: in method_params, or CodedGD({label!r}, {python}); {cli}).")


@dataclass(frozen=True, kw_only=True)
class CodeAssignment:
    """One drawn realisation of a scheme for ``n_workers`` workers (see the module docstring).

    Parameters
    ----------
    scheme : str
        Registry name of the scheme that drew it.
    n_workers : int
        Number of workers ``N``.
    n_partitions : int
        Number of data partitions ``K`` the rows are split into.
    placement : tuple of tuple of int
        Partitions each worker stores.
    coefficients : tuple of ndarray
        ``coefficients[i]`` has shape ``(n_messages_i, len(placement[i]))``.
    info : dict, default={}
        Closed-form figures of the scheme where the paper gives them, e.g.
        ``recovery_threshold`` (workers needed), ``communication_load`` (messages per
        worker per iteration), ``coverage_probability``, ``covers`` (whether this drawn
        assignment can ever decode), ``latency_only`` (an idealised bound whose weights
        stand for an exact evaluation, not for the received messages).
    """

    scheme: str
    n_workers: int
    n_partitions: int
    placement: tuple[tuple[int, ...], ...]
    coefficients: tuple[np.ndarray, ...]
    info: dict[str, Any] = field(default_factory=dict)
    decoder: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.placement) != self.n_workers or len(self.coefficients) != self.n_workers:
            raise ValueError("placement and coefficients need one entry per worker")
        for i, (parts, coef) in enumerate(zip(self.placement, self.coefficients, strict=True)):
            if coef.ndim != 2 or coef.shape[1] != len(parts):
                raise ValueError(f"worker {i}: coefficients must have shape (messages, "
                                 f"{len(parts)}), got {coef.shape}")

    def matches(self, placement: Iterable[Iterable[int]]) -> bool:
        """Return whether ``placement`` is this assignment's placement."""
        return [tuple(p) for p in self.placement] == [tuple(p) for p in placement]

    def n_messages(self, worker_index: int) -> int:
        """Number of messages worker ``worker_index`` sends per iteration."""
        return int(self.coefficients[worker_index].shape[0])

    def load(self) -> np.ndarray:
        """Return the fraction of the partitions each worker computes over, shape (N,)."""
        return np.array([len(p) / self.n_partitions for p in self.placement])

    def encoding_matrix(self) -> tuple[np.ndarray, list[Received]]:
        """Return ``A`` of shape (all messages, K) with ``message = A @ g`` and its row labels."""
        rows, labels = [], []
        for i, (parts, coef) in enumerate(zip(self.placement, self.coefficients, strict=True)):
            for j in range(coef.shape[0]):
                row = np.zeros(self.n_partitions)
                np.add.at(row, list(parts), coef[j])
                rows.append(row)
                labels.append((i, j))
        return np.array(rows).reshape(len(rows), self.n_partitions), labels

    @functools.cached_property
    def supports(self) -> tuple[tuple[tuple[int, ...], ...], ...]:
        """``supports[i][j]``: the partitions worker ``i``'s message ``j`` sums over.

        Those of ``placement[i]`` with a nonzero coefficient in ``coefficients[i][j]``.
        """
        return tuple(
            tuple(tuple(int(parts[p]) for p in np.flatnonzero(row)) for row in coef)
            for parts, coef in zip(self.placement, self.coefficients, strict=True))

    def decode(self, received: Iterable[Received]) -> dict[Received, float] | None:
        """Return weights recovering ``sum_k g_k`` from the received messages, or None.

        Parameters
        ----------
        received : iterable of (int, int)
            ``(worker_index, message_index)`` pairs that arrived.

        Returns
        -------
        weights : dict of (int, int) to float or None
            None when the received messages cannot give the full sum.
        """
        if self.decoder is None:
            raise NotImplementedError(f"{self.scheme} assignments have no decoder")
        return self.decoder(self, frozenset(received))


def _checked(assignment: CodeAssignment, weights: dict[Received, float],
             tol: float) -> dict[Received, float] | None:
    """Return ``weights`` if ``max |sum w * A_row - 1| <= tol`` (they give ``sum_k g_k``)."""
    total = np.zeros(assignment.n_partitions)
    for (i, j), w in weights.items():
        np.add.at(total, list(assignment.placement[i]), w * assignment.coefficients[i][j])
    return weights if float(np.max(np.abs(total - 1.0))) <= tol else None


class Coverage:
    """The partitions of an assignment that no received message sums over yet.

    Every exact decoder needs each ``g_k`` in at least one received message, so
    ``decode`` cannot succeed before :attr:`complete`. Latency-only assignments (whose
    weights stand for an exact evaluation, ``info["latency_only"]``) are complete from
    the start: their decoder alone decides.

    Parameters
    ----------
    assignment : CodeAssignment
        The drawn assignment.

    Examples
    --------
    >>> from daskstraggle.coding import make_scheme
    >>> a = make_scheme("fractional-repetition", n_stragglers=1).assign(4)
    >>> cover = Coverage(a)
    >>> cover.add(0, 0), cover.add(2, 0), cover.add(1, 0)
    (False, False, True)
    """

    def __init__(self, assignment: CodeAssignment) -> None:
        self._supports = assignment.supports
        self._missing = np.ones(assignment.n_partitions, dtype=bool)
        self._left = 0 if assignment.info.get("latency_only") else assignment.n_partitions

    @property
    def complete(self) -> bool:
        """Whether every partition is in some received message."""
        return self._left == 0

    def add(self, worker_index: int, message_index: int) -> bool:
        """Count message ``message_index`` of worker ``worker_index``; return :attr:`complete`."""
        if self._left:
            support = list(self._supports[worker_index][message_index])
            new = self._missing[support]
            if new.any():
                self._missing[support] = False
                self._left -= int(new.sum())
        return self._left == 0


class CodingScheme(ABC):
    """Abstract base of the coding schemes: parameters only, immutable.

    Subclasses are ``@dataclass(frozen=True, kw_only=True, slots=True)``, validate in
    ``__post_init__``, are decorated with :func:`register_scheme` and set ``name``
    (hyphenated, e.g. ``"cyclic-repetition"``).
    """

    #: Registry name.
    name: ClassVar[str]

    def check_n_workers(self, n_workers: int) -> None:  # noqa: B027 - optional hook
        """Raise InvalidParameterError if the parameters do not fit ``n_workers`` workers."""

    def partition_count(self, n_workers: int, n_rows: int | None = None) -> int:
        """Return how many partitions ``K`` the rows are split into for ``n_workers``
        (default: ``K = n_workers``, once :meth:`check_n_workers` accepts it)."""
        self.check_n_workers(n_workers)
        return int(n_workers)

    @abstractmethod
    def _assign(self, n_workers: int, rng: np.random.Generator) -> CodeAssignment:
        """Draw the assignment (``n_workers`` already checked)."""

    def _make(self, n_workers: int, placement: Any, coefficients: Any, info: dict[str, Any],
              decoder: Any, n_partitions: int | None = None) -> CodeAssignment:
        """Return this scheme's CodeAssignment (``n_partitions`` None: ``n_workers``)."""
        return CodeAssignment(
            scheme=self.name, n_workers=n_workers, placement=tuple(placement),
            n_partitions=n_workers if n_partitions is None else n_partitions,
            coefficients=tuple(coefficients), info=info, decoder=decoder)

    def _one_each(self, n_workers: int, info: dict[str, Any], decoder: Any) -> CodeAssignment:
        """Return the assignment of ``K = N`` partitions, worker ``i`` sending ``g_i``."""
        return self._make(n_workers, ((i,) for i in range(n_workers)),
                          (np.ones((1, 1)) for _ in range(n_workers)), info, decoder)

    def assign(
        self, n_workers: int, rng: int | np.random.Generator | None = None
    ) -> CodeAssignment:
        """Draw an assignment for ``n_workers`` workers.

        Raises
        ------
        InvalidParameterError
            If the scheme's parameters do not fit ``n_workers``.
        """
        n_workers = check_int(n_workers, name="n_workers", caller=f"{type(self).__name__}.assign",
                              low=1)
        self.check_n_workers(n_workers)
        return self._assign(n_workers, np.random.default_rng(rng))

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"name": ..., **parameters}``."""
        return {"name": self.name, **{f.name: getattr(self, f.name)
                                      for f in fields(self)}}  # type: ignore[arg-type]
