"""One event each to a :class:`~daskstraggle.engine.pool.WorkerPool`, as the runtimes give
them: the tests say what happened (a task sent, a result, the statuses) in one call and
check the instructions that came back (its wake-up time apart)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from daskstraggle.engine.events import (
    BackupSent,
    Event,
    HelperReady,
    Instruction,
    Sending,
    SplitSent,
    StatusChanged,
    TaskFinished,
    TaskSent,
    Tick,
    WakeAt,
)
from daskstraggle.engine.pool import Deliver, SendBackup, SplitUnit, Task, WorkerPool
from daskstraggle.methods.base import WorkUnit

_numbers = itertools.count()


def tell(pool: WorkerPool, kind: type[Event], now: float, **fields: Any) -> list[Instruction]:
    """The pool's instructions for one event of type ``kind`` at ``now``, but its
    :class:`WakeAt`."""
    event = kind(time=now, stimulus_id=f"{kind.__name__}-{next(_numbers)}", **fields)
    return [i for i in pool.handle_stimulus(event) if not isinstance(i, WakeAt)]


def sent(pool: WorkerPool, key: str, unit: WorkUnit, now: float, **kw: Any) -> None:
    assert tell(pool, TaskSent, now, key=key, unit=unit, **kw) == []


def arrived(pool: WorkerPool, key: str, outcome: Any, now: float
            ) -> tuple[Task | None, Any, list[Instruction]]:
    """The task, what the method receives (None: nothing) and the other instructions."""
    out = tell(pool, TaskFinished, now, key=key, outcome=outcome)
    deliver = [i for i in out if isinstance(i, Deliver)]
    rest = [i for i in out if not isinstance(i, Deliver)]
    return (deliver[0].task, deliver[0].outcome, rest) if deliver else (None, None, rest)


def on_status(pool: WorkerPool, status: Mapping[str, str], now: float, *,
              retiring: Iterable[str] = (), tight: Iterable[str] = ()) -> list[Instruction]:
    return tell(pool, StatusChanged, now, status=dict(status), retiring=frozenset(retiring),
                tight=frozenset(tight))


def split(pool: WorkerPool, unit: WorkUnit, now: float = 0.0) -> SplitUnit | None:
    out = tell(pool, Sending, now, unit=unit)
    assert all(isinstance(i, SplitUnit) for i in out) and len(out) <= 1, out
    return out[0] if out else None  # type: ignore[return-value]


def sent_split(pool: WorkerPool, unit: WorkUnit, keys: tuple[str, str], now: float) -> None:
    assert tell(pool, SplitSent, now, unit=unit, keys=keys) == []


def helper_ready(pool: WorkerPool, index: int, now: float = 0.0) -> None:
    assert tell(pool, HelperReady, now, index=index) == []


def backup_sent(pool: WorkerPool, key: str, backup_key: str, now: float = 0.0) -> None:
    assert tell(pool, BackupSent, now, key=key, backup_key=backup_key) == []


def backups(pool: WorkerPool, now: float) -> list[SendBackup]:
    """The backups a :class:`Tick` at ``now`` sends (every worker of the pool live)."""
    out = tell(pool, Tick, now, live=tuple(pool.workers))
    assert all(isinstance(i, SendBackup) for i in out), out
    return out  # type: ignore[return-value]
