"""Where each worker index's partitions are loaded on a Dask cluster (one keyed task per
partition, strictly pinned; the futures are the data's handles), and moving them."""

from __future__ import annotations

import logging
import uuid
import warnings
from collections.abc import Callable
from typing import Any

from daskstraggle.engine.pool import MoveIndex, StartHelping, StopHelping, Task
from daskstraggle.errors import StraggleWarning
from daskstraggle.runtime._membership import copies_elsewhere

__all__ = ["PartitionStore"]

logger = logging.getLogger(__name__)

#: ``submit(address, fn, *args, key=...)``: a task strictly pinned to ``address``.
Submit = Callable[..., Any]


class PartitionStore:
    """The loaded partitions of every worker index (:attr:`held`), of their helpers
    (:attr:`helper`, by the index helped), and spare copies; carries out the engine pool's
    moves and helpers on them. ``client`` (the runtime's) is asked who holds copies;
    ``submit(address, fn, *args, key=...)`` runs ``fn`` strictly pinned to ``address``
    and returns its future."""

    def __init__(self, client: Any, submit: Submit) -> None:
        self.client = client
        self._submit = submit
        self.clear()

    def clear(self) -> None:
        """Forget every handle (the data is released with them)."""
        self._loaded: tuple[Any, dict[tuple[int, str], Any]] = (None, {})
        self.held: list[dict[int, Any]] = []
        self.helper: dict[int, dict[int, Any]] = {}
        self._handover: dict[int, dict[int, Any]] = {}  # a helper's copy for its new index
        self._spares: dict[tuple[str, int], Any] = {}

    def load(self, matrix: Any, placement: list[tuple[int, ...]], addresses: list[str], *,
             kept: dict[tuple[int, str], Any] | None = None) -> None:
        """Load partition ``p`` on the worker of every index whose placement holds it;
        one in ``kept`` (by partition and address: :meth:`reusable`) is used as it is."""
        kept = dict(kept or {})
        self.clear()
        self.held = [{p: kept.pop((p, addresses[i]), None) or self._load(matrix, addresses[i], p, i)
                      for p in parts} for i, parts in enumerate(placement)]
        self._loaded = (matrix, {(p, addresses[i]): f for i, held in enumerate(self.held)
                                 for p, f in held.items()})

    def reusable(self, matrix: Any) -> dict[tuple[int, str], Any]:
        """The partitions of ``matrix`` (the same object) that the last :meth:`load`
        left loaded and that are still there, by ``(partition, address)``: a run after
        another on the same data (``auto``'s probe, then its run) loads only the rest."""
        loaded, where = self._loaded
        if loaded is not matrix:
            return {}
        return {key: f for key, f in where.items() if f.status == "finished"}

    def _load(self, matrix: Any, address: str, p: int, index: int, kind: str = "load") -> Any:
        """Load partition ``p`` from the source on ``address`` for worker index ``index``,
        under a key naming ``kind`` (a load after the first is made unique)."""
        token = "" if kind == "load" else f"-{uuid.uuid4().hex[:6]}"
        return self._submit(address, matrix.loader(p), key=f"{kind}-p{p}-w{index}{token}")

    def loaded(self, task: Task) -> bool:
        """Whether the partitions ``task`` reads are loaded where it runs (a unit sent
        again after a move may wait for a reload: that is not the worker's delay)."""
        index = task.unit.worker_index
        held = self.helper.get(index, {}) if task.part == 1 else self.held[index]
        return all(held[p].status == "finished" for p in task.unit.partitions if p in held)

    def helper_loaded(self, index: int) -> bool:
        """Whether the helper of ``index`` holds every partition of it."""
        return index in self.helper and all(f.status == "finished"
                                            for f in self.helper[index].values())

    def move(self, matrix: Any, move: MoveIndex, shunned: set[str]) -> dict[str, Any]:
        """Put worker index ``move.index``'s partitions on ``move.to`` (the pool has
        re-pointed the index): copies that live workers still hold (a retiring worker's,
        which Dask copies away before it closes), the copy of a helper that takes the index
        over, else reloaded from the source. Warn unless the index was adopted by a
        newcomer. Return the record of the move (``result.attrs["worker_losses"]``)."""
        index, target = move.index, move.to
        parts = sorted(self.held[index])
        given = self._handover.pop(index, {}) if move.from_helper else {}
        # a retiring worker still serves its data (and Dask copies it away before it goes)
        avoid = set(shunned) if move.how == "fetch" else {move.previous, *shunned}
        kept = {**copies_elsewhere(
            self.client, {p: f for p, f in self.held[index].items() if p not in given},
            avoid=avoid), **given}
        self.held[index] = {p: kept[p] if p in kept else
                            self._load(matrix, target, p, index, "reload") for p in parts}
        reloaded = [p for p in parts if p not in kept]
        how = (f"are reloaded from the source on {target}" if not kept else
               f"move to {target}, which fetches them from the workers holding them" if
               move.kind == "retired" and not reloaded else
               f"move to {target} from copies left on other workers" if not reloaded else
               f"move to {target} ({sorted(kept)} from copies left on other workers, the rest "
               "reloaded from the source)")
        message = f"worker {move.previous} {move.why}; its partitions {parts} {how}"
        warn = move.kind != "adopted"
        logger.log(logging.WARNING if warn else logging.INFO, message)
        if warn:
            warnings.warn(f"{message[0].upper()}{message[1:]}.", StraggleWarning, stacklevel=4)
        return {"worker_index": index, "lost": move.previous, "moved_to": target,
                "partitions": parts, "reason": move.why, "kind": move.kind,
                "reloaded": reloaded, "stimulus_id": move.stimulus_id}

    def start_helping(self, matrix: Any, start: StartHelping) -> None:
        """Load the helped index's partitions on the newcomer."""
        index, address = start.index, start.worker
        self.helper[index] = {p: self._load(matrix, address, p, index, "helper")
                              for p in sorted(self.held[index])}
        logger.info("worker %s joined: it helps worker index %d, whose partitions %s it "
                    "loads from the source", address, index, sorted(self.held[index]))

    def stop_helping(self, stop: StopHelping) -> None:
        """Drop a helper's copy, or keep it for the index it takes over (``keep``)."""
        data = self.helper.pop(stop.index, {})
        if stop.keep:
            self._handover[stop.index] = data
        logger.info("helper %s of worker index %d %s: it stops helping", stop.worker,
                    stop.index, stop.why)

    def copies(self, index: int, address: str) -> dict[int, Any]:
        """The handles of the partitions worker index ``index``'s worker at ``address``
        holds: its own and the spare copies loaded there, by partition."""
        return {**{p: h for (a, p), h in self._spares.items() if a == address},
                **self.held[index]}

    def blocks(self, matrix: Any, index: int, address: str, partitions: tuple[int, ...]
               ) -> list[Any]:
        """The handles of ``partitions`` on worker index ``index``'s worker at ``address``:
        its own, or spare copies loaded there from the source once (for a backup)."""
        held = self.held[index]
        for p in partitions:
            if p not in held and (address, p) not in self._spares:
                self._spares[(address, p)] = self._load(matrix, address, p, index, "spare")
        return [held[p] if p in held else self._spares[(address, p)] for p in partitions]
