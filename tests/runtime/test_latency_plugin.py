"""The latency-recording scheduler plugin and its client-side recorder.

Pure tests drive :class:`LatencyPlugin` through a stand-in scheduler; the others run real
LocalClusters with process workers (the session ``dask_client``, or small clusters of
their own for joins, leaves, the preload and a scheduler that cannot import daskstraggle).
Tasks are builtins (``time.sleep``, ``len``, ``os.urandom``) so that worker processes
need not import this module.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import textwrap
import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from daskstraggle.errors import InvalidParameterError, StraggleError
from daskstraggle.runtime.dask import worker_addresses
from daskstraggle.runtime.plugin import (
    DEFAULT_PREFIX,
    PRELOAD_NAME,
    LatencyPlugin,
    LatencyRecorder,
    TaskLatency,
)

# --- the plugin alone, driven by hand ---------------------------------------------------


class FakeScheduler:
    """The parts of ``distributed.Scheduler`` the plugin touches."""

    def __init__(self, workers: list[str]) -> None:
        self.workers = dict.fromkeys(workers)
        self.plugins: dict[str, Any] = {}
        self.events: list[tuple[list[str], Any]] = []
        self.subscribers: dict[str, set[str]] = {}

    def log_event(self, topic: list[str], msg: Any) -> None:
        self.events.append((topic, msg))

    def subscribe_topic(self, topic: str, client: str) -> None:
        self.subscribers.setdefault(topic, set()).add(client)

    def unsubscribe_topic(self, topic: str, client: str) -> None:
        self.subscribers.get(topic, set()).discard(client)

    def remove_plugin(self, name: str) -> None:
        del self.plugins[name]


def _started(plugin: LatencyPlugin, workers: list[str]) -> FakeScheduler:
    scheduler = FakeScheduler(workers)
    asyncio.run(plugin.start(scheduler))
    scheduler.plugins["p"] = plugin
    return scheduler


def _finish(plugin: LatencyPlugin, key: Any, worker: str, *, compute: float = 0.25,
            transfer: float = 0.0, start: str = "processing") -> None:
    spans = [{"action": "compute", "start": 100.0, "stop": 100.0 + compute}]
    if transfer:
        spans.insert(0, {"action": "transfer", "start": 99.0, "stop": 99.0 + transfer,
                         "source": "elsewhere"})
    plugin.transition(key, start, "memory", stimulus_id="s", worker=worker, startstops=spans,
                      nbytes=8, type=b"", typename="int")


def test_plugin_records_only_our_finished_tasks() -> None:
    plugin = LatencyPlugin()
    _started(plugin, ["w0"])
    _finish(plugin, f"{DEFAULT_PREFIX}v0-w0-a", "w0", compute=0.25, transfer=0.5)
    _finish(plugin, "other-key", "w0")
    _finish(plugin, (f"{DEFAULT_PREFIX}v0", 0), "w0")  # tuple keys are not ours
    _finish(plugin, f"{DEFAULT_PREFIX}v0-w0-b", "w0", start="waiting")
    plugin.transition(f"{DEFAULT_PREFIX}v0-w0-c", "waiting", "processing", stimulus_id="s")
    records, seq = plugin.drain(0)
    assert seq == 1
    assert records == [(1, f"{DEFAULT_PREFIX}v0-w0-a", "w0", 0.25, 0.5, 100.0, 100.25, 8)]
    record = TaskLatency.from_tuple(records[0])
    assert (record.compute_duration, record.transfer_duration) == (0.25, 0.5)
    assert record.stop_time - record.start_time == pytest.approx(0.25)


def test_plugin_keeps_the_newest_maxlen_per_worker_and_drains_after_a_number() -> None:
    plugin = LatencyPlugin("k-", maxlen=3)
    _started(plugin, ["w0", "w1"])
    for i in range(5):
        _finish(plugin, f"k-{i}", "w0")
    _finish(plugin, "k-5", "w1")
    records, seq = plugin.drain(0)
    assert [r[0] for r in records] == [3, 4, 5, 6]  # sorted across workers, oldest dropped
    assert seq == 6
    assert [r[0] for r in plugin.drain(4)[0]] == [5, 6]
    assert plugin.drain(6) == ([], 6)
    assert plugin.workers()["n_records"] == {"w0": 5, "w1": 1}


def test_plugin_tracks_initial_joined_and_left_workers_with_a_bounded_memory() -> None:
    plugin = LatencyPlugin(max_departed=1)
    scheduler = _started(plugin, ["w0", "w1"])
    plugin.add_worker(scheduler, "w2")
    plugin.remove_worker(scheduler, "w0", stimulus_id="s")
    summary = plugin.workers()
    assert summary["initial"] == ["w0", "w1"]
    assert summary["current"] == ["w1", "w2"]
    assert list(summary["joined"]) == ["w2"]
    assert list(summary["left"]) == ["w0"]
    plugin.remove_worker(scheduler, "w1", stimulus_id="s")  # w0 is forgotten (max_departed)
    summary = plugin.workers()
    assert list(summary["left"]) == ["w1"]
    assert "w0" not in summary["n_records"]
    plugin.add_worker(scheduler, "w1")  # the same address comes back
    summary = plugin.workers()
    assert summary["current"] == ["w1", "w2"] and summary["left"] == {}
    assert sorted(summary["joined"]) == ["w1", "w2"]


def test_plugin_publishes_to_its_topics_and_leaves_with_its_client() -> None:
    plugin = LatencyPlugin(topic="t", client="c1")
    scheduler = _started(plugin, ["w0"])
    assert scheduler.subscribers == {"t": {"c1"}}
    assert plugin.attach("u", "c2") == 0
    _finish(plugin, f"{DEFAULT_PREFIX}x", "w0")
    assert len(scheduler.events) == 1
    topics, msg = scheduler.events[0]
    assert sorted(topics) == ["t", "u"] and msg[:3] == (1, f"{DEFAULT_PREFIX}x", "w0")
    plugin.remove_client(scheduler, "c2")  # a reader left: stop publishing to it
    assert plugin.topics == {"t": "c1"} and "p" in scheduler.plugins
    plugin.remove_client(scheduler, "c1")  # the owner left: the plugin removes itself
    assert scheduler.plugins == {}


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(InvalidParameterError, match="'maxlen' parameter of LatencyPlugin"):
        LatencyPlugin(maxlen=0)
    with pytest.raises(InvalidParameterError, match="'prefix' parameter of LatencyPlugin"):
        LatencyPlugin("")
    with pytest.raises(InvalidParameterError, match="must be a synchronous Client"):
        LatencyRecorder(SimpleNamespace(asynchronous=True))
    with pytest.raises(InvalidParameterError, match="'maxlen' parameter of LatencyRecorder"):
        LatencyRecorder(SimpleNamespace(asynchronous=False), maxlen=-1)


# --- on a real cluster -------------------------------------------------------------------


def _keys(n: int, prefix: str = DEFAULT_PREFIX) -> list[str]:
    tag = uuid.uuid4().hex[:8]
    return [f"{prefix}test-{tag}-{i}" for i in range(n)]


def _workers(client: Any) -> list[str]:
    return worker_addresses(client)


def _plugins(client: Any) -> list[str]:
    return client.run_on_scheduler(_plugin_names)


def _plugin_names(dask_scheduler: Any = None) -> list[str]:
    return list(dask_scheduler.plugins)


def _wait_for(predicate: Any, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not reached after {timeout} s")
        time.sleep(0.05)


@pytest.mark.parametrize("push", [True, False])
def test_records_our_tasks_once_with_their_compute_time(dask_client, push) -> None:
    workers = _workers(dask_client)
    with LatencyRecorder(dask_client, push=push) as recorder:
        assert recorder.owned and recorder.name in _plugins(dask_client)
        assert recorder.workers()["initial"] == workers  # present at registration
        ours = _keys(2)
        t0 = time.monotonic()
        futures = [
            dask_client.submit(time.sleep, 0.2, key=ours[0], workers=[workers[0]],
                               allow_other_workers=False),
            dask_client.submit(len, "abc", key=ours[1], workers=[workers[1]],
                               allow_other_workers=False),
            dask_client.submit(time.sleep, 0.01, key=f"other-{uuid.uuid4().hex}"),
            dask_client.submit(len, "abc", key=f"daskstraggle-load-{uuid.uuid4().hex}"),
        ]
        dask_client.gather(futures)
        span = time.monotonic() - t0
        records = {r.key: r for r in recorder.poll()}  # no waiting: pushed before results
        assert set(records) == set(ours)
        slept = records[ours[0]]
        assert slept.worker == workers[0]
        # the task's own compute: at least its sleep, within the submit-to-result span
        assert 0.18 < slept.compute_duration <= span
        assert slept.transfer_duration == 0.0
        assert records[ours[1]].worker == workers[1]
        assert records[ours[1]].compute_duration < slept.compute_duration
        assert recorder.poll() == []  # each record once
        more = _keys(3)
        dask_client.gather([dask_client.submit(len, "ab", key=k) for k in more])
        again = recorder.poll()
        assert [r.key for r in again if r.key in more] and {r.key for r in again} == set(more)
        assert [r.seq for r in again] == sorted(r.seq for r in again)
        assert min(r.seq for r in again) > max(r.seq for r in records.values())
        assert recorder.n_lost == 0
        counts = recorder.workers()["n_records"]
        assert sum(counts.values()) == 5
    assert recorder.name not in _plugins(dask_client)


def test_transfer_of_a_dependency_from_another_worker(dask_client) -> None:
    w0, w1 = _workers(dask_client)[:2]
    blob_key, len_key = _keys(2)
    with LatencyRecorder(dask_client) as recorder:
        blob = dask_client.submit(os.urandom, 4_000_000, key=blob_key, workers=[w0],
                                  allow_other_workers=False)
        size = dask_client.submit(len, blob, key=len_key, workers=[w1],
                                  allow_other_workers=False)
        assert size.result() == 4_000_000
        records = {r.key: r for r in recorder.poll()}
    assert records[blob_key].worker == w0 and records[blob_key].transfer_duration == 0.0
    assert records[len_key].worker == w1 and records[len_key].transfer_duration > 0.0
    assert records[blob_key].nbytes >= 4_000_000


def test_memory_is_bounded_by_maxlen(dask_client) -> None:
    worker = _workers(dask_client)[0]
    with LatencyRecorder(dask_client, maxlen=3, push=False) as polled, \
            LatencyRecorder(dask_client, maxlen=3) as pushed:
        keys = _keys(6)
        dask_client.gather([dask_client.submit(len, "ab", key=k, workers=[worker],
                                               allow_other_workers=False) for k in keys])
        # the scheduler keeps the newest three; a late poll says what it missed
        assert {r.key for r in polled.poll()} < set(keys)
        assert polled.n_lost == 3
        assert polled.workers()["n_records"][worker] == 6
        # pushed records all arrived; the per-worker history keeps the newest three
        assert {r.key for r in pushed.poll()} == set(keys)
        durations = pushed.per_worker()
        assert list(durations) == [worker] and durations[worker].shape == (3,)


def test_close_unregisters_once_and_refuses_a_foreign_plugin_name(dask_client) -> None:
    recorder = LatencyRecorder(dask_client, name="daskstraggle-latency-test-close")
    assert recorder.name in _plugins(dask_client)
    # a second recorder with the same name shares the plugin; another prefix is refused
    with LatencyRecorder(dask_client, name=recorder.name) as shared:
        assert not shared.owned
    assert recorder.name in _plugins(dask_client)
    with pytest.raises(InvalidParameterError, match="a plugin recording 'daskstraggle-unit-'"):
        LatencyRecorder(dask_client, name=recorder.name, prefix="other-")
    recorder.close()
    recorder.close()
    assert recorder.name not in _plugins(dask_client)
    assert recorder.poll() == []
    assert "closed" in repr(recorder)


def test_joins_leaves_and_the_preload(tmp_path) -> None:
    import dask
    from distributed import Client, LocalCluster

    from daskstraggle.runtime.dask import OWN_CLUSTER_CONFIG

    with dask.config.set(OWN_CLUSTER_CONFIG):
        cluster = LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
            silence_logs=logging.ERROR,
            scheduler_kwargs={"preload": ["daskstraggle.runtime.plugin"]},
        )
    client = Client(cluster, set_as_default=False)
    try:
        (first,) = _workers(client)
        preloaded = LatencyRecorder(client)  # default prefix: attaches to the preload
        own = LatencyRecorder(client, name="daskstraggle-latency-test-own")
        assert preloaded.name == PRELOAD_NAME and not preloaded.owned
        assert own.owned
        assert preloaded.workers()["initial"] == []  # preloaded before any worker
        assert list(preloaded.workers()["joined"]) == [first]
        assert own.workers()["initial"] == [first]

        cluster.scale(2)
        _wait_for(lambda: len(_workers(client)) == 2)
        (second,) = set(_workers(client)) - {first}
        for recorder in (preloaded, own):
            summary = recorder.workers()
            assert summary["current"] == sorted([first, second])
            assert second in summary["joined"]

        key = _keys(1)[0]
        client.submit(len, "ab", key=key, workers=[second], allow_other_workers=False).result()
        assert [r.worker for r in preloaded.poll()] == [second]
        assert [r.worker for r in own.poll()] == [second]

        cluster.scale(1)
        _wait_for(lambda: len(_workers(client)) == 1)
        (stays,) = _workers(client)
        (gone,) = {first, second} - {stays}
        for recorder in (preloaded, own):
            summary = recorder.workers()
            assert summary["current"] == [stays]
            assert list(summary["left"]) == [gone]

        own.close()
        preloaded.close()
        assert PRELOAD_NAME in _plugins(client)  # shared: left in place
        assert own.name not in _plugins(client)
    finally:
        client.close()
        cluster.close()


_HANDED_SCHEDULER = """
import sys
sys.modules["daskstraggle"] = None  # as if daskstraggle were not installed here
import asyncio, logging
from distributed import LocalCluster

async def main():
    async with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                            protocol="tcp://", host="127.0.0.1", dashboard_address=None,
                            asynchronous=True, silence_logs=logging.CRITICAL) as cluster:
        print(cluster.scheduler_address, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main())
"""


@pytest.fixture
def handed_address(tmp_path):
    """Address of a cluster in another process where daskstraggle cannot be imported."""
    script = tmp_path / "scheduler.py"
    script.write_text(textwrap.dedent(_HANDED_SCHEDULER))
    proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        address = proc.stdout.readline().strip()
        assert address.startswith("tcp://"), "the scheduler process did not start"
        yield address
    finally:
        proc.stdin.close()  # the script exits at the end of its stdin
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def test_a_handed_cluster_needs_no_daskstraggle_on_the_scheduler(
    handed_address, monkeypatch
) -> None:
    import importlib.util

    import cloudpickle
    from distributed import Client

    import daskstraggle.runtime.plugin as plugin_module

    with Client(handed_address, set_as_default=False) as client:
        assert client.run_on_scheduler(importlib.util.find_spec, "daskstraggle") is None
        with LatencyRecorder(client) as recorder:  # travels by value
            keys = _keys(4)
            t0 = time.monotonic()
            client.gather([client.submit(time.sleep, 0.05, key=k, pure=False) for k in keys])
            span = time.monotonic() - t0
            records = recorder.poll()
            assert {r.key for r in records} == set(keys)
            # each its task's compute: its sleep, within the submit-to-result span
            assert all(0.04 < r.compute_duration <= span for r in records), records
            assert sorted(recorder.per_worker()) == _workers(client)

        # by reference, the scheduler cannot load it: one clear error
        monkeypatch.setattr(plugin_module, "_ship_by_value", lambda: None)
        cloudpickle.unregister_pickle_by_value(plugin_module)
        try:
            with pytest.raises(StraggleError, match="could not load the latency plugin"):
                LatencyRecorder(client)
        finally:
            cloudpickle.register_pickle_by_value(plugin_module)


def test_a_gap_in_pushed_records_is_filled_from_the_scheduler(dask_client) -> None:
    from collections import deque

    w0, w1 = _workers(dask_client)[:2]
    with LatencyRecorder(dask_client, maxlen=3) as recorder:
        recorder._inbox = deque(maxlen=3)  # a tiny push buffer, as if the client lagged
        keys = _keys(6)
        dask_client.gather([
            dask_client.submit(len, "ab", key=k, workers=[(w0, w1)[i % 2]],
                               allow_other_workers=False)
            for i, k in enumerate(keys)
        ])
        # three pushed records overflowed the buffer; the scheduler still has all six
        records = recorder.poll()
        assert {r.key for r in records} == set(keys)
        assert [r.seq for r in records] == list(range(1, 7))
        assert recorder.n_lost == 0
