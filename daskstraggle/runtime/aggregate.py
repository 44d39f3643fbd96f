"""Aggregation on the workers (MLfabric's in-network aggregation, on Dask).

With ``aggregation="tree"`` a work unit's result stays on its worker (the coordinator gets
its row count and timing, :func:`unit_meta`); the method combines the
:class:`~daskstraggle.problems.held.HeldResult` with its own weights, and
:class:`TreeReducer` sums the leaves on the workers when the method reads the sum.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from daskstraggle.errors import WorkerLostError
from daskstraggle.problems.held import Leaf

__all__ = ["AGGREGATIONS", "FAN_IN", "Handle", "TreeReducer", "build_tree", "tree_sum",
           "unit_meta"]

logger = logging.getLogger(__name__)

#: The values of the ``aggregation`` option: ``"flat"`` (every result to the client) or
#: ``"tree"`` (summed on the workers).
AGGREGATIONS = ("flat", "tree")
#: Results summed by one task of the tree (its depth is ``ceil(log_FAN_IN(leaves))``).
FAN_IN = 4
#: Seconds between the reducer's checks that its leaves' workers are still there.
POLL = 0.2
#: Times a tree is built again after leaves were lost, before the reducer gives up.
MAX_REBUILDS = 3


def unit_meta(pair: tuple[Any, float]) -> tuple[Any, float]:
    """Worker task: of a unit task's ``(result, seconds)``, the rows summed (a tuple, one
    per message, for coded results) and the seconds, without the data."""
    result, seconds = pair
    if isinstance(result, tuple):
        return tuple(int(r.n_rows) for r in result), seconds
    return int(result.n_rows), seconds


def _part(item: Any, message: int | None) -> tuple[np.ndarray, np.ndarray]:
    if message is None:  # an inner node's (gradient, values)
        return item
    result = item[0]
    if message >= 0:
        result = result[message]
    return np.asarray(result.gradient), np.asarray(result.values)


def tree_sum(weights: list[float], messages: list[int | None],
             *items: Any) -> tuple[np.ndarray, np.ndarray]:
    """Worker task: ``sum weights[k] * items[k]`` as ``(gradient, values)`` in float64.

    An item is a unit task's ``(result, seconds)`` (``messages[k]``: which message of a
    coded result, -1 for a plain one) or another ``tree_sum``'s output (``None``).
    """
    gradient: Any = None
    values: Any = None
    for weight, message, item in zip(weights, messages, items, strict=True):
        g, v = _part(item, message)
        if weight != 1.0:
            g, v = weight * g, weight * v
        gradient = np.array(g, dtype=np.float64) if gradient is None else gradient + g
        values = np.array(v, dtype=np.float64) if values is None else values + v
    return gradient, values


def build_tree(leaves: list[tuple[float, int | None, Any]],
               submit: Callable[[list[float], list[int | None], list[Any]], Any]) -> Any:
    """Sum ``leaves`` ``(weight, message, item)`` in a tree of :data:`FAN_IN`-way sums.

    ``submit(weights, messages, items)`` computes (or schedules) one :func:`tree_sum`;
    the first level sums the leaves in their order, :data:`FAN_IN` at a time, with their
    weights, and each further level sums the level below. Returns the root.
    """
    level: list[tuple[float, int | None, Any]] = [
        (weight, -1 if message is None else message, item) for weight, message, item in leaves]
    while True:
        nodes = [submit([w for w, _, _ in group], [m for _, m, _ in group],
                        [item for _, _, item in group])
                 for group in (level[i:i + FAN_IN] for i in range(0, len(level), FAN_IN))]
        if len(nodes) == 1:
            return nodes[0]
        level = [(1.0, None, node) for node in nodes]


@dataclass(eq=False, slots=True)
class Handle:
    """A leaf's reference to its data: the unit task's future, where it ran, and how to
    compute it again (the worker index and the arguments of its task)."""

    future: Any
    address: str
    worker_index: int
    partitions: tuple[int, ...]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class TreeReducer:
    """Sum held results on the workers, :data:`FAN_IN` at a time, and fetch the one sum.

    One message reaches the ``client`` instead of one per worker; only the order of the
    additions differs (the iterates agree to rounding). A leaf whose worker is no longer
    among ``live()`` (the workers now in the cluster, after the engine's moves) is computed
    again where its partitions are now (``recompute(handle) -> (future, address)``), and
    the tree is built again; the tree may take ``timeout`` seconds (``timeouts.stall``).
    """

    def __init__(self, client: Any, *, live: Callable[[], set[str]],
                 recompute: Callable[[Handle], Any], timeout: float) -> None:
        self.client = client
        self._live = live
        self._recompute = recompute
        self.timeout = float(timeout)
        #: Bytes fetched by the client since :meth:`take_bytes` was last called.
        self.fetched = 0
        #: Trees built and leaves recomputed, over the reducer's life.
        self.trees = 0
        self.recomputed = 0

    def take_bytes(self) -> int:
        """Return the bytes fetched since the last call, and start counting again."""
        fetched, self.fetched = self.fetched, 0
        return fetched

    def reduce(self, terms: list[tuple[float, Leaf]]) -> tuple[np.ndarray, np.ndarray]:
        """Return ``sum weight * leaf`` as ``(gradient, values)``, summed on the workers;
        raise WorkerLostError if the tree does not finish within ``timeout`` seconds or its
        leaves are lost more than :data:`MAX_REBUILDS` times."""
        deadline = time.perf_counter() + self.timeout
        for _ in range(MAX_REBUILDS + 1):
            root = self._build(terms)
            outcome = self._wait(root, terms, deadline)
            if outcome is not None:
                gradient, values = outcome
                self.fetched += int(gradient.nbytes + values.nbytes)
                return gradient, values
            self.client.cancel([root])
        raise WorkerLostError(
            f"summing {len(terms)} results on the workers failed: their workers left "
            f"{MAX_REBUILDS + 1} times while the sum was taken."
        )

    def _build(self, terms: list[tuple[float, Leaf]]) -> Any:
        """Submit the tree; return its root's future."""
        self.trees += 1
        token = uuid.uuid4().hex[:8]
        count = iter(range(len(terms)))

        def submit(weights: list[float], messages: list[int | None], items: list[Any]) -> Any:
            return self.client.submit(tree_sum, weights, messages, *items, pure=False,
                                      key=f"daskstraggle-sum-{token}-{next(count)}")

        return build_tree([(weight, leaf.message, leaf.handle.future)
                           for weight, leaf in terms], submit)

    def _wait(self, root: Any, terms: list[tuple[float, Leaf]],
              deadline: float) -> tuple[np.ndarray, np.ndarray] | None:
        """Wait for the root to be computed, then fetch it once, whole (a fetch cut short
        by a timeout starts over: a sum slower to send than one poll over a slow link
        would never arrive); None if leaves were lost (they are recomputed first)."""
        computed = threading.Event()
        root.add_done_callback(lambda _: computed.set())
        while not computed.wait(max(0.0, min(POLL, deadline - time.perf_counter()))):
            if time.perf_counter() >= deadline:
                self._stalled(root, terms)
            lost = self._lost(terms)
            if lost:
                self._replace(lost)
                return None
        try:
            return root.result(timeout=max(deadline - time.perf_counter(), POLL))
        except TimeoutError:
            self._stalled(root, terms)
        except Exception:  # a leaf's data went with its worker, or the sum failed
            lost = self._lost(terms)
            if not lost:
                raise
            self._replace(lost)
        return None

    def _stalled(self, root: Any, terms: list[tuple[float, Leaf]]) -> NoReturn:
        """Cancel ``root`` and raise WorkerLostError: the tree took too long."""
        self.client.cancel([root])
        raise WorkerLostError(
            f"summing {len(terms)} results on the workers took more than "
            f"{self.timeout:g} s (timeouts.stall); the workers holding them do not answer."
        )

    def _lost(self, terms: list[tuple[float, Leaf]]) -> list[Leaf]:
        """The leaves whose worker left (or whose data is gone)."""
        live = self._live()
        return [leaf for _, leaf in terms if leaf.handle.address not in live
                or leaf.handle.future.status in ("lost", "error", "cancelled")]

    def _replace(self, lost: list[Leaf]) -> None:
        """Compute the lost leaves again where their partitions are now."""
        logger.warning("%d results held on workers that left: computing them again",
                       len(lost))
        for handle in {id(leaf.handle): leaf.handle for leaf in lost}.values():
            handle.future, handle.address = self._recompute(handle)
            self.recomputed += 1
