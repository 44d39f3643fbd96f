"""``DaskRuntime.measure_links`` on process workers: every worker's links, and a worker busy
with an earlier task is not waited for (the issue 46 rule: a probe never waits for work
left over from an earlier run)."""

from __future__ import annotations

import time

import pytest

from daskstraggle.latency.fit import Links
from daskstraggle.runtime import DaskRuntime

pytestmark = pytest.mark.cluster


def test_the_links_of_every_worker_are_measured(dask_client):
    with DaskRuntime(dask_client) as runtime:
        links = runtime.measure_links(2**20)
    assert isinstance(links, Links)
    for link in links:
        assert len(link.bandwidth) == 3 and min(link.bandwidth) > 0
        assert len(link.latency) == 3 and min(link.latency) >= 0
        assert link.coordinator > 0


def test_a_worker_busy_with_an_earlier_task_is_not_waited_for(dask_client):
    busy = sorted(dask_client.scheduler_info()["workers"])[0]
    earlier = dask_client.submit(time.sleep, 30, workers=[busy], pure=False)
    try:
        while earlier.status == "pending" and not dask_client.processing(workers=[busy])[busy]:
            time.sleep(0.05)
        with DaskRuntime(dask_client) as runtime:
            links = runtime.measure_links(2**20)
            index = runtime.worker_names.index(busy)
        assert earlier.status == "pending"  # measured while the busy worker was still busy
        assert links is not None
        # its links unknown: taken as the others' (not a slow link)
        bandwidth = links.to_coordinator.bandwidth
        others = [b for k, b in enumerate(bandwidth) if k != index]
        assert min(others) * 0.5 <= bandwidth[index]
    finally:
        earlier.cancel()
