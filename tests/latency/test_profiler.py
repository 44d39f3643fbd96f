"""Tests of daskstraggle.latency.profiler (moving-window latency statistics)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from daskstraggle.errors import InvalidParameterError
from daskstraggle.latency.profiler import LatencyProfiler, ProfileStatistics


def _fill(prof, worker, times, compute, communication=0.01, **kwargs):
    for t, c in zip(times, compute, strict=True):
        prof.record(worker, time=float(t), compute=float(c), communication=communication,
                    **kwargs)


def test_window_keeps_the_last_seconds_of_each_worker():
    prof = LatencyProfiler(2, window=10.0, min_samples=1)
    times = np.arange(21.0)
    _fill(prof, 0, times, compute=times)  # compute sample = its time
    _fill(prof, 1, times[:5], compute=times[:5])  # worker 1's clock is its own
    stats = prof.statistics()
    np.testing.assert_array_equal(stats.n_samples, [11, 5])  # times 10..20 and 0..4
    assert prof.n_samples(0) == 11
    # times 10..20 trimmed to their 10-90 % quantiles (11 and 19): 11..19
    assert stats.compute_mean[0] == pytest.approx(15.0)
    assert stats.compute_var[0] == pytest.approx(np.var(np.arange(11.0, 20.0), ddof=1))
    assert stats.compute_mean[1] == pytest.approx(2.0)  # 0..4 trimmed to 0.4..3.6: 1..3


def test_sample_older_than_the_window_is_ignored():
    prof = LatencyProfiler(1, window=10.0, min_samples=1)
    prof.record(0, time=100.0, compute=1.0, communication=0.1)
    prof.record(0, time=89.0, compute=50.0, communication=0.1)  # too old: dropped
    prof.record(0, time=95.0, compute=3.0, communication=0.1)  # late but in window
    assert prof.n_samples(0) == 2
    assert prof.statistics().compute_mean[0] == pytest.approx(2.0)


def test_trimming_removes_outliers():
    values = [1.0] * 9 + [1000.0]
    trimmed = LatencyProfiler(1, min_samples=1)
    full = LatencyProfiler(1, min_samples=1, quantiles=(0.0, 1.0))
    for prof in (trimmed, full):
        _fill(prof, 0, range(10), compute=values, communication=0.5)
    assert trimmed.statistics().compute_mean[0] == 1.0
    assert trimmed.statistics().compute_var[0] == 0.0
    assert full.statistics().compute_mean[0] == pytest.approx(np.mean(values))
    assert full.statistics().compute_var[0] == pytest.approx(np.var(values, ddof=1))


def test_compute_and_communication_are_trimmed_separately():
    prof = LatencyProfiler(1, min_samples=1, quantiles=(0.0, 0.9))
    for k in range(10):
        prof.record(0, time=float(k), compute=1000.0 if k == 0 else 1.0,
                    communication=1000.0 if k == 9 else 0.5)
    stats = prof.statistics()
    assert stats.compute_mean[0] == 1.0  # the outlier at k=0 trimmed from compute
    assert stats.communication_mean[0] == 0.5  # the one at k=9 trimmed from communication


def test_compute_is_normalised_by_load():
    prof = LatencyProfiler(1, min_samples=5)
    loads = [0.5, 1.0, 2.0, 4.0, 1.5, 3.0]
    for k, load in enumerate(loads):
        prof.record(0, time=float(k), compute=0.2 * load, communication=0.05, load=load)
    stats = prof.statistics()
    assert stats.compute_mean[0] == pytest.approx(0.2)
    assert stats.compute_var[0] == pytest.approx(0.0, abs=1e-15)
    assert stats.communication_mean[0] == pytest.approx(0.05)  # communication not scaled


def test_stale_communication_is_replaced_by_the_recent_average():
    prof = LatencyProfiler(1, min_samples=1, quantiles=(0.0, 1.0))
    for k, comm in enumerate([0.1, 0.2, 0.3]):
        prof.record(0, time=float(k), compute=1.0, communication=comm)
    prof.record(0, time=3.0, compute=2.0, communication=9.0, stale=True)  # -> 0.2
    stats = prof.statistics()
    assert stats.communication_mean[0] == pytest.approx(0.2)
    assert stats.communication_var[0] == pytest.approx(np.var([0.1, 0.2, 0.3, 0.2], ddof=1))
    assert stats.compute_mean[0] == pytest.approx(1.25)  # the compute sample is kept
    assert stats.n_samples[0] == 4


def test_stale_average_uses_only_the_window():
    prof = LatencyProfiler(1, window=5.0, min_samples=1, quantiles=(0.0, 1.0))
    prof.record(0, time=0.0, compute=1.0, communication=10.0)
    prof.record(0, time=10.0, compute=1.0, communication=0.1)  # evicts time 0
    prof.record(0, time=11.0, compute=1.0, communication=5.0, stale=True)  # -> 0.1
    assert prof.statistics().communication_mean[0] == pytest.approx(0.1)


def test_stale_without_communication_history_skips_the_communication_sample():
    prof = LatencyProfiler(1, min_samples=1)
    prof.record(0, time=0.0, compute=1.0, communication=3.0, stale=True)
    stats = prof.statistics()
    assert stats.compute_mean[0] == 1.0
    assert math.isnan(stats.communication_mean[0])
    assert not stats.ready[0]
    prof.record(0, time=1.0, compute=1.0, communication=0.4)
    prof.record(0, time=2.0, compute=1.0, communication=9.0, stale=True)  # -> 0.4
    stats = prof.statistics()
    assert stats.communication_mean[0] == pytest.approx(0.4)
    assert stats.ready[0]


def test_min_samples():
    prof = LatencyProfiler(2, min_samples=10)
    _fill(prof, 0, range(9), compute=[1.0] * 9)
    _fill(prof, 1, range(10), compute=[1.0] * 10)
    stats = prof.statistics()
    assert np.isnan(stats.compute_mean[0]) and np.isnan(stats.compute_var[0])
    assert np.isnan(stats.communication_mean[0]) and np.isnan(stats.communication_var[0])
    assert stats.compute_mean[1] == 1.0
    np.testing.assert_array_equal(stats.ready, [False, True])
    np.testing.assert_array_equal(stats.n_samples, [9, 10])


def test_memory_is_bounded():
    prof = LatencyProfiler(1, window=10.0, min_samples=1, max_samples=50)
    _fill(prof, 0, np.arange(1000) * 1e-3, compute=np.arange(1000.0))  # all in one window
    assert prof.n_samples(0) == 50
    stats = prof.statistics()
    assert stats.n_samples[0] == 50
    assert stats.compute_mean[0] == pytest.approx(np.mean(np.arange(955.0, 995.0)))
    by_time = LatencyProfiler(1, window=10.0)
    _fill(by_time, 0, np.arange(1000.0), compute=np.ones(1000))  # one per second
    assert by_time.n_samples(0) == 11


def test_running_average_survives_eviction_by_count():
    prof = LatencyProfiler(1, min_samples=1, max_samples=3, quantiles=(0.0, 1.0))
    for k, comm in enumerate([100.0, 1.0, 2.0, 3.0]):  # 100 evicted by count
        prof.record(0, time=float(k), compute=1.0, communication=comm)
    prof.record(0, time=4.0, compute=1.0, communication=50.0, stale=True)  # -> 2.0
    # window now holds 2.0, 3.0, 2.0
    assert prof.statistics().communication_mean[0] == pytest.approx(7.0 / 3.0)


def test_reset():
    prof = LatencyProfiler(2, min_samples=1)
    _fill(prof, 0, range(3), compute=[1.0] * 3)
    _fill(prof, 1, range(3), compute=[1.0] * 3)
    prof.reset(0)
    np.testing.assert_array_equal(prof.statistics().n_samples, [0, 3])
    prof.record(0, time=0.0, compute=2.0, communication=0.1)  # old clock accepted again
    assert prof.statistics().compute_mean[0] == 2.0
    prof.reset()
    np.testing.assert_array_equal(prof.statistics().n_samples, [0, 0])
    assert "samples=0" in repr(prof)


def test_statistics_to_dict_is_json_ready():
    prof = LatencyProfiler(2, min_samples=1)
    prof.record(1, time=0.0, compute=1.0, communication=0.1)
    stats = prof.statistics()
    assert isinstance(stats, ProfileStatistics)
    d = json.loads(json.dumps(stats.to_dict(), allow_nan=False))
    assert d["compute_mean"] == [None, 1.0]
    assert d["n_samples"] == [0, 1]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_workers": 0}, "The 'n_workers' parameter of LatencyProfiler must be an int >= 1"),
        ({"window": 0.0}, "The 'window' parameter of LatencyProfiler must be a finite number"),
        ({"quantiles": (0.9, 0.1)}, "must be a pair (lo, hi) with 0 <= lo < hi <= 1"),
        ({"quantiles": (0.1,)}, "The 'quantiles' parameter of LatencyProfiler"),
        ({"quantiles": (0.1, 1.5)}, "The 'quantiles' parameter of LatencyProfiler"),
        ({"quantiles": "ab"}, "The 'quantiles' parameter of LatencyProfiler"),
        ({"min_samples": 0}, "The 'min_samples' parameter of LatencyProfiler must be an int"),
        ({"max_samples": 5}, "It must be at least min_samples."),
    ],
)
def test_bad_constructor_input(kwargs, match):
    with pytest.raises(InvalidParameterError, match=re.escape(match)):
        LatencyProfiler(kwargs.pop("n_workers", 2), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"worker_index": 2}, "The 'worker_index' parameter of LatencyProfiler.record must be "
                              "an int in [0, 1]"),
        ({"worker_index": -1}, "The 'worker_index' parameter"),
        ({"time": math.nan}, "The 'time' parameter of LatencyProfiler.record must be a finite"),
        ({"time": "0"}, "The 'time' parameter"),
        ({"compute": -1.0}, "The 'compute' parameter of LatencyProfiler.record must be a finite"
                            " number >= 0"),
        ({"communication": math.inf}, "The 'communication' parameter"),
        ({"load": 0.0}, "The 'load' parameter of LatencyProfiler.record must be a finite "
                        "number > 0"),
        ({"stale": "yes"}, "The 'stale' parameter of LatencyProfiler.record must be True or"),
    ],
)
def test_bad_record_input(kwargs, match):
    prof = LatencyProfiler(2)
    args = {"worker_index": 0, "time": 0.0, "compute": 1.0, "communication": 0.1, **kwargs}
    with pytest.raises(InvalidParameterError, match=re.escape(match)):
        prof.record(args.pop("worker_index"), **args)
    assert prof.n_samples(0) == 0


def test_bad_reset_input():
    with pytest.raises(InvalidParameterError, match="'worker_index' parameter of Latency"):
        LatencyProfiler(2).reset(5)
