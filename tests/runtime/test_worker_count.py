"""A cluster caught with fewer workers than a method needs: the refusal says how to wait.

A run on an existing cluster counts its workers when it starts; on a cluster whose workers
restart (``--lifetime`` with ``--lifetime-restart``) or are still starting, that count can
be 1, and a method needing more (``n_wait=3``) used to be refused with a line about
``n_wait`` alone. The line now says the count was read at the start and names
``--min-workers``.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from daskstraggle import open_matrix
from daskstraggle.api import run_on
from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods import DSAG
from daskstraggle.problems import PCA
from daskstraggle.runtime import DaskRuntime

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def one_worker_client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, \
            Client(cluster, set_as_default=False) as client:
        yield client


def _data():
    return open_matrix(np.random.default_rng(0).normal(size=(200, 5)))


def test_too_few_workers_on_an_existing_cluster_names_min_workers(one_worker_client):
    with DaskRuntime(one_worker_client, rng=0) as rt:
        with pytest.raises(InvalidParameterError) as raised:
            run_on(rt, DSAG(n_wait=3), PCA(n_components=2), _data(), rng=0)
    line = str(raised.value)
    assert "\n" not in line
    assert line.startswith("The 'n_wait' parameter of DSAG must be an int in [1, 1]")
    assert re.search(r"The cluster had 1 worker when the run started .*--min-workers", line)


def test_with_min_workers_the_refusal_is_the_methods_own(one_worker_client):
    with DaskRuntime(one_worker_client, rng=0, min_workers=1) as rt:
        with pytest.raises(InvalidParameterError) as raised:
            run_on(rt, DSAG(n_wait=3), PCA(n_components=2), _data(), rng=0)
    assert "--min-workers" not in str(raised.value)
