"""What the Dask runtime observes about its workers, for the engine's worker pool.

The decisions (where a lost, retiring or frozen worker's indices go, what a newcomer does)
are the pool's (:class:`~daskstraggle.engine.pool.WorkerPool`); this module reads the
cluster for it: retirements announced in the workers' scheduler events, the event log of a
worker that left, a bounded wait when every worker is gone, and which partitions live
workers still hold; and, while the runtime waits for workers to join, batch jobs that
ended before their worker joined (:func:`wait_for_workers_or_jobs`).
"""

from __future__ import annotations

import functools
import logging
import re
import subprocess
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from daskstraggle.engine.pool import RETIRING
from daskstraggle.errors import ClusterConnectionError, WorkerLostError
from daskstraggle.runtime._connect import ask_scheduler, worker_status

__all__ = [
    "MEMBERSHIP_INTERVAL",
    "RetirementNews",
    "copies_elsewhere",
    "ended_jobs",
    "job_logs",
    "no_worker_error",
    "no_worker_timeout",
    "retired_before_leaving",
    "wait_for_any_worker",
    "wait_for_workers_or_jobs",
]

logger = logging.getLogger(__name__)

#: Seconds between checks that every worker holding our partitions is still there, while
#: the runtime waits for results (one scheduler round-trip each).
MEMBERSHIP_INTERVAL = 1.0
#: Seconds between looks at the cluster while its only workers cannot take work.
_POLL = 0.25
#: Seconds between asks of the batch system, while workers are awaited, which of the
#: cluster's jobs are still queued or running (one command, bounded by ``_QUEUE_TIMEOUT``).
JOB_CHECK_INTERVAL = 2.0
_QUEUE_TIMEOUT = 10.0
#: How a batch system lists which of some jobs it still queues or runs (one id a line,
#: first on the line), by the submit command of the dask-jobqueue job class; ``{ids}`` is
#: the job ids, comma-separated. A job missing from a listing that succeeded has ended.
#: The job classes of other batch systems are not asked (the wait ends at its bound).
#: SLURM: ``squeue --jobs`` lists pending, running and completing jobs only, and fails
#: (exit 1) once none of the ids is known any more.
QUEUE_LISTINGS: dict[str, tuple[str, ...]] = {
    "sbatch": ("squeue", "--noheader", "--format=%i", "--jobs={ids}"),
}
#: A job header's output and error files: ``#SBATCH -e PATH``, ``--output=PATH``, ...
_LOG_OPTION = re.compile(r"\s(?:-e|-o|--error|--output)[\s=]+(\S+)")


def no_worker_timeout() -> float:
    """Seconds to wait for a worker to (re)join when every worker has left
    (``daskstraggle.timeouts.no-worker``, :mod:`daskstraggle.config`)."""
    from daskstraggle import config

    return float(config.seconds("timeouts.no-worker"))


class RetirementNews:
    """Subscriptions to the workers' scheduler events, queueing announced retirements.

    Parameters
    ----------
    client : distributed.Client
        The runtime's client.
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self.news: deque[str] = deque(maxlen=1000)
        self._watched: dict[str, Any] = {}

    def watch(self, addresses: list[str]) -> None:
        """Subscribe to the scheduler events of ``addresses``. A topic the user's client
        already handles is left alone (a client keeps one handler per topic): the status
        poll sees that worker's retirement instead, within a second."""
        handled = getattr(self.client, "_event_handlers", {})
        for address in addresses:
            if address not in self._watched and address not in handled:
                handler = functools.partial(self._on_event, address)
                self._watched[address] = handler
                self.client.subscribe_topic(address, handler)

    def _on_event(self, address: str, event: Any) -> None:
        # runs in the client's event loop thread: only queue it (deque appends are atomic)
        if isinstance(event, tuple | list) and len(event) == 2 and _retiring(event[1]):
            self.news.append(address)

    def take(self) -> set[str]:
        """The workers announced as retiring since the last call."""
        out = set()
        while self.news:
            out.add(self.news.popleft())
        return out

    def close(self) -> None:
        """Unsubscribe (a scheduler that is gone has nothing to undo)."""
        handlers = getattr(self.client, "_event_handlers", {})
        for address, handler in self._watched.items():
            try:
                self.client.unsubscribe_topic(address)
            except Exception as err:  # the scheduler may be gone: nothing to undo there
                logger.debug("unsubscribing from %s failed: %s", address, err)
            if handlers.get(address) is handler:  # distributed keeps it: drop ours
                handlers.pop(address, None)
        self._watched = {}
        self.news.clear()


def retired_before_leaving(client: Any, address: str) -> bool:
    """Whether the scheduler's event log says the worker that left at ``address`` was
    retiring (else it was lost: killed, crashed, cut off)."""
    try:
        events = ask_scheduler(client, "events", topic=address)
    except Exception as err:  # no log: call it lost
        logger.info("reading the events of %s failed (%s)", address, err)
        return False
    return any(_retiring(msg) for _, msg in events or ())


def _retiring(msg: Any) -> bool:
    """Whether a worker's scheduler event says it started retiring."""
    return isinstance(msg, dict) and msg.get("action") == "worker-status-change" and \
        msg.get("status") == RETIRING


def wait_for_any_worker(client: Any, usable: Callable[[dict[str, str]], bool] | None = None,
                        ) -> dict[str, str]:
    """Wait (at most :func:`no_worker_timeout` s) until the cluster has a worker again
    (one that ``usable`` accepts, given the statuses: not one found frozen, say); return
    the workers' statuses.

    Raises
    ------
    WorkerLostError
        If none joined in time.
    """
    limit = no_worker_timeout()
    deadline = time.monotonic() + limit
    while True:
        remaining = deadline - time.monotonic()
        try:
            client.wait_for_workers(1, timeout=max(remaining, 0.001))
        except TimeoutError:
            break
        status = worker_status(client)
        if usable is None or usable(status):
            return status
        if remaining <= 0:
            break
        time.sleep(min(_POLL, max(remaining, 0.0)))  # a worker is there but not usable
    raise no_worker_error(limit)


def no_worker_error(limit: float) -> WorkerLostError:
    """The one line that ends a run when every worker left and none joined in ``limit`` s."""
    return WorkerLostError(
        f"Every worker left the cluster and none joined within {limit:g} s; the run cannot "
        "go on. Start workers (or check why they died: memory limit, walltime, preemption) "
        "and run again."
    )


def copies_elsewhere(client: Any, held: dict[int, Any], avoid: set[str]) -> dict[int, Any]:
    """The partitions whose loaded data a live worker outside ``avoid`` still holds (a
    retiring worker's, which Dask copies away before it closes; an adopted index's), by
    the scheduler's account."""
    if not held:
        return {}
    try:
        holders = ask_scheduler(client, "who_has", keys=[f.key for f in held.values()])
    except Exception as err:  # no copies known: reload
        logger.info("who_has failed (%s); reloading from the source", err)
        return {}
    return {p: future for p, future in held.items()
            if set(holders.get(future.key, ())) - avoid}


def wait_for_workers_or_jobs(client: Any, n_workers: int, timeout: float) -> None:
    """Wait up to ``timeout`` s until ``n_workers`` workers have joined; while waiting,
    ask the batch system every :data:`JOB_CHECK_INTERVAL` s whether a job of the client's
    dask-jobqueue cluster ended before its worker joined (:func:`ended_jobs`).

    Raises
    ------
    ClusterConnectionError
        At once if such a job is found: one line naming the job and its log.
    TimeoutError
        If the workers did not join in time.
    """
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        try:
            client.wait_for_workers(n_workers, timeout=max(min(remaining, JOB_CHECK_INTERVAL),
                                                           0.001))
            return
        except TimeoutError:
            if remaining <= JOB_CHECK_INTERVAL:
                raise
        # job ids and logs, not the jobs: an error that kept a job alive would fail
        # SpecCluster.close's check that every job it created was closed
        ended = ended_jobs(getattr(client, "cluster", None))
        if ended:
            job_id, logs = next(iter(ended.items()))
            raise _job_ended_error(client, job_id, logs, n_workers)


def ended_jobs(cluster: Any) -> dict[str, list[str]]:
    """The log files (:func:`job_logs`), by job id, of the jobs of a dask-jobqueue cluster
    (``JobQueueCluster``; ``cluster.workers`` holds its jobs) that its batch system no
    longer queues or runs although their worker is not in the cluster: jobs that ended
    before their worker joined (or after it left). Empty for any other cluster, a batch
    system :data:`QUEUE_LISTINGS` does not name, or a listing that failed."""
    listing = QUEUE_LISTINGS.get(str(getattr(getattr(cluster, "job_cls", None),
                                             "submit_command", None)))
    waiting = {} if listing is None else _jobs_without_worker(cluster)
    if listing is None or not waiting:
        return {}
    queued = _queued([arg.format(ids=",".join(waiting)) for arg in listing])
    return {} if queued is None else {job_id: job_logs(job) for job_id, job in waiting.items()
                                      if job_id not in queued}


def _jobs_without_worker(cluster: Any) -> dict[str, Any]:
    """The cluster's submitted jobs, by id, whose worker is not in the cluster (a job of
    several worker processes names them ``<name>-<i>``); empty for a cluster that is not
    a ``JobQueueCluster`` after all."""
    try:
        joined = {str(w.get("name")) for w in cluster.scheduler_info["workers"].values()}
        jobs = {str(job.job_id): (str(name), job) for name, job in list(cluster.workers.items())
                if getattr(job, "job_id", None)}
    except (AttributeError, KeyError, TypeError):
        return {}
    return {job_id: job for job_id, (name, job) in jobs.items()
            if name not in joined and not any(w.startswith(f"{name}-") for w in joined)}


def _queued(argv: list[str]) -> set[str] | None:
    """The job ids the batch system's listing ``argv`` prints (first column); None if it
    could not be asked or did not answer (squeue: none of the ids known any more)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_QUEUE_TIMEOUT,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        logger.info("asking the batch system for its jobs failed (%s)", err)
        return None
    if done.returncode != 0:
        logger.info("%s exited with %d: %s", argv[0], done.returncode, done.stderr.strip())
        return None
    return {line.split()[0] for line in done.stdout.splitlines() if line.strip()}


def job_logs(job: Any) -> list[str]:
    """The output and error files a dask-jobqueue job writes, as its job script's header
    names them (``%j``/``%J`` replaced by its id), else its ``log_directory``."""
    job_id = str(job.job_id)
    header = f" {getattr(job, 'job_header', '') or ''}"
    paths = [p.replace("%J", job_id).replace("%j", job_id) for p in _LOG_OPTION.findall(header)]
    if paths:
        return list(dict.fromkeys(paths))
    directory = getattr(job, "log_directory", None)
    return [str(directory)] if directory else []


def _job_ended_error(client: Any, job_id: str, logs: list[str], n_workers: int
                     ) -> ClusterConnectionError:
    """The one line for a job that ended before its worker joined."""
    where = (f"see its log {' and '.join(logs)}" if logs else
             "see its output file (the batch system's default: no log_directory was given)")
    return ClusterConnectionError(
        f"Job {job_id} of the {type(client.cluster).__name__} ended before its worker "
        f"joined the scheduler at {client.scheduler.address!r} ({n_workers} workers awaited); "
        f"{where}. Check the log and fix the job script (cluster.job_script(): "
        "job_script_prologue, python, the environment)."
    )
