"""``pipelines/_emulated.py``: hosts in network namespaces joined by rate-capped links.

The unit tests need no root. The integration tests (marked ``cluster`` and ``network``)
build a 3-host emulated cluster, two workers on 1 Gbit/s links and one on a 20 Mbit/s
link, run one client in the scheduler's namespace, and check that the capped worker's
transfers run at its cap and that a PCA on the cluster ends on the answer of the same
exact method run locally. Where namespaces cannot be made (not root, no iproute2, no
bridge or tbf in the kernel) they skip with one reason; with ``CI=true`` they fail instead.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

_PATH = Path(__file__).resolve().parents[1] / "pipelines" / "_emulated.py"
_SPEC = importlib.util.spec_from_file_location("pipeline_emulated", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
emulated = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(emulated)

#: The cluster: two workers on fast links, one network straggler.
LINKS = {"w0": "1gbit", "w1": "1gbit", "w2": "20mbit"}
CAPPED = "w2"
#: Bytes of each timed transfer from a worker (incompressible: random bytes).
PAYLOAD = 3_000_000
#: Timed transfers per worker (the median is compared with the cap).
REPEATS = 3

#: The client, run in the scheduler's namespace: times the transfer of a payload made on
#: each worker, then fits a PCA by "gram" on the cluster and in this process.
CLIENT = """
import json, sys, time
import numpy as np
from distributed import Client, wait
import daskstraggle
from daskstraggle.runtime import DaskRuntime

address, payload, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
workers = sys.argv[4:]

def make_payload(n_bytes, seed):
    return np.random.default_rng(seed).integers(0, 256, n_bytes, dtype=np.uint8)

with Client(address, timeout="30s") as client:
    client.wait_for_workers(len(workers), timeout=60)
    seconds = {}
    for name in workers:
        seconds[name] = []
        for seed in range(repeats):
            future = client.submit(make_payload, payload, seed, workers=[name],
                                   allow_other_workers=False, pure=False)
            wait(future, timeout=60)
            start = time.perf_counter()
            data = client.gather(future, direct=True)
            seconds[name].append(time.perf_counter() - start)
            assert data.nbytes == payload
            del future, data
    runtime = DaskRuntime(client=client)  # its own link probe
    link, peers = runtime.measure_links(payload)
    names = {a: ws["name"] for a, ws in client.scheduler_info()["workers"].items()}
    fitted = {names[a]: payload / link.message_duration(i, payload)
              for i, a in enumerate(runtime.worker_names)}
    peer = {names[a]: peers.bandwidth[i] for i, a in enumerate(runtime.worker_names)}
    runtime.close()
    X = np.random.default_rng(1).normal(size=(600, 16)) * np.linspace(4, 0.5, 16)
    remote = daskstraggle.fit_pca(X, 2, method="gram", client=client, rng=0)
    local = daskstraggle.fit_pca(X, 2, method="gram", runtime="local", rng=0)
    where = {ws["name"]: address for address, ws in client.scheduler_info()["workers"].items()}

def components(result):
    c = np.asarray(result.fitted["components"])
    return (c * np.sign(c[:, :1])).tolist()  # a component's sign is arbitrary

print(json.dumps({
    "seconds": seconds,
    "fitted_rate": fitted,
    "peer_rate": peer,
    "workers": where,
    "converged": bool(remote.converged),
    "remote": components(remote), "local": components(local),
    "remote_variance": np.asarray(remote.fitted["explained_variance"]).tolist(),
    "local_variance": np.asarray(local.fitted["explained_variance"]).tolist(),
}))
"""


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def _root_namespace() -> str:
    """The root namespace's links and IPv4 addresses, as ``ip -o`` prints them."""
    return "\n".join(subprocess.run(argv, capture_output=True, text=True, timeout=10,
                                    check=True).stdout
                     for argv in (["ip", "-o", "link"], ["ip", "-4", "-o", "addr"]))


def _netns_list() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                          timeout=10, check=True).stdout


def _require_namespaces() -> None:
    reason = emulated.unavailable()
    if reason is not None:
        if _in_ci():
            pytest.fail(f"CI=true and the emulated cluster cannot be made: {reason}",
                        pytrace=False)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def emulated_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run :data:`CLIENT` on a 3-host emulated cluster; return what it printed, with the
    cluster's prefix and subnet and the root namespace as seen while the cluster ran."""
    _require_namespaces()
    script = tmp_path_factory.mktemp("emulated") / "client.py"
    script.write_text(CLIENT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}
    with emulated.EmulatedCluster(LINKS, scheduler_link="1gbit", env=env) as cluster:
        root = _root_namespace()
        done = cluster.run([sys.executable, str(script), cluster.scheduler_address,
                            str(PAYLOAD), str(REPEATS), *LINKS], timeout=150, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        prefix = cluster.prefix
        subnet = cluster.addresses[emulated.SCHEDULER].network
        plan = {host: str(address.ip) for host, address in cluster.addresses.items()}
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "prefix": prefix,
            "subnet": str(subnet), "plan": plan, "root": root, "after": _netns_list()}


# --- unit tests (no root) ------------------------------------------------------------


@pytest.mark.parametrize(("rate", "bits"), [
    ("20mbit", 20e6), ("1gbit", 1e9), ("1Gbit", 1e9), ("100kbit", 1e5), ("1.5mbit", 1.5e6),
    ("1mibit", 2.0**20), ("10kbps", 8e4), ("1mbps", 8e6), ("64bit", 64.0),
    (5e6, 5e6), (1000, 1000.0),
])
def test_rates_are_bits_per_second_as_tc_reads_them(rate: Any, bits: float) -> None:
    assert emulated.parse_rate(rate) == pytest.approx(bits)


@pytest.mark.parametrize("rate", ["20", "20 furlongs", "mbit", "0mbit", "-1mbit", 0, -5.0,
                                  float("inf")])
def test_a_rate_without_a_unit_or_not_positive_is_refused_in_one_line(rate: Any) -> None:
    with pytest.raises(ValueError, match=r"^The 'rate' of a link must be .* Got ") as err:
        emulated.parse_rate(rate)
    assert "\n" not in str(err.value)


def test_a_rate_of_another_type_is_refused_with_its_type() -> None:
    with pytest.raises(TypeError, match="Got list instead"):
        emulated.parse_rate([1])
    with pytest.raises(TypeError, match="Got bool instead"):
        emulated.parse_rate(True)


def test_the_bucket_holds_two_frames_and_two_milliseconds_of_the_rate() -> None:
    assert emulated.burst_bytes(1e6) == 2 * 1514
    assert emulated.burst_bytes(10e6) == 2 * 1514  # 2 ms would be less than two frames
    assert emulated.burst_bytes(1e9) == 250_000


def test_the_subnet_avoids_every_network_of_the_root_namespace() -> None:
    range_start = emulated.ADDRESS_RANGE.network_address
    assert emulated.pick_subnet([]) == ipaddress.IPv4Network(f"{range_start}/24")
    taken = [ipaddress.IPv4Interface("10.231.0.7/24"), ipaddress.IPv4Interface("127.0.0.1/8"),
             ipaddress.IPv4Network("10.231.1.0/24")]
    assert emulated.pick_subnet(taken) == ipaddress.IPv4Network("10.231.2.0/24")
    with pytest.raises(emulated.EmulationError, match="pick a subnet failed"):
        emulated.pick_subnet([ipaddress.IPv4Network("10.0.0.0/8")])


def test_the_scheduler_gets_the_first_address_then_the_workers_in_order() -> None:
    subnet = ipaddress.IPv4Network("10.231.5.0/24")
    plan = emulated.plan_addresses(["w0", "w1", "slow"], subnet)
    assert {host: str(address) for host, address in plan.items()} == {
        "sched": "10.231.5.1/24", "w0": "10.231.5.2/24", "w1": "10.231.5.3/24",
        "slow": "10.231.5.4/24"}
    with pytest.raises(emulated.EmulationError, match="has 2 host addresses for 3 hosts"):
        emulated.plan_addresses(["w0", "w1"], ipaddress.IPv4Network("10.231.5.0/30"))


def test_every_namespace_carries_the_instance_prefix() -> None:
    first = emulated.EmulatedCluster({"w0": "1gbit", "w1": None}, scheduler_link=1e8)
    second = emulated.EmulatedCluster({"w0": "1gbit"})
    assert re.fullmatch(rf"ds{os.getpid()}-\d+", first.prefix)
    assert first.prefix != second.prefix
    assert first.namespace("w0") == f"{first.prefix}-w0"
    assert first.namespace("sched") == f"{first.prefix}-sched"
    assert first.switch == f"{first.prefix}-switch"
    assert first.rates == {"sched": 1e8, "w0": 1e9, "w1": None}


@pytest.mark.parametrize(("links", "options", "match"), [
    ({}, {}, "must name at least one worker"),
    ({"sched": "1gbit"}, {}, "Got 'sched' instead"),
    ({"W0": "1gbit"}, {}, "Got 'W0' instead"),
    ({"worker-zero": "1gbit"}, {}, "Got 'worker-zero' instead"),
    ({"w0": "fast"}, {}, "Got 'fast' instead"),
    ({"w0": "1gbit"}, {"threads": 0}, "'threads' parameter of EmulatedCluster"),
])
def test_bad_cluster_parameters_are_refused_before_anything_is_made(
        links: dict[str, Any], options: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        emulated.EmulatedCluster(links, **options)


def test_the_skip_reason_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert emulated.check_environment() == (
        "the emulated cluster creates network namespaces, veth pairs and tc qdiscs, "
        "which needs root")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(emulated.shutil, "which", lambda program: None)
    assert emulated.check_environment() == (
        "iproute2 is not installed (ip, tc not found): apt-get install iproute2, as root")


def test_a_failed_step_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(emulated.EmulationError) as err:
        emulated._command([sys.executable, "-c", "import sys; sys.exit('no\\nway')"],
                          step="ip netns add")
    assert str(err.value) == "ip netns add failed: no way (root needed)"


# --- on an emulated cluster (root) ----------------------------------------------------


@pytest.mark.cluster
@pytest.mark.network
def test_the_capped_worker_transfers_at_its_cap(emulated_run: dict[str, Any]) -> None:
    # each worker is bound to its own namespace's address
    assert {name: re.sub(r"^tcp://|:\d+$", "", address)
            for name, address in emulated_run["workers"].items()} == {
        name: emulated_run["plan"][name] for name in LINKS}
    seconds = sorted(emulated_run["seconds"][CAPPED])
    rate = PAYLOAD * 8 / seconds[len(seconds) // 2]
    cap = emulated.parse_rate(LINKS[CAPPED])
    assert 0.7 * cap <= rate <= 1.3 * cap, (rate, cap, emulated_run["seconds"])
    # the fast links are not the bottleneck: their transfers beat the capped one's
    fast = [min(emulated_run["seconds"][name]) for name in LINKS if name != CAPPED]
    assert max(fast) < seconds[0], emulated_run["seconds"]


@pytest.mark.cluster
@pytest.mark.network
def test_the_runtimes_link_probe_finds_the_capped_worker_at_its_cap(
        emulated_run: dict[str, Any]) -> None:
    """``DaskRuntime.measure_links`` (what ``method="auto"`` measures before gram): the
    capped worker's message alone, in the fitted link model, is far slower than the
    others' and never slower than its cap (it is not waited for beyond 3x the others'
    time: then its link is known to be at least that slow)."""
    rates = emulated_run["fitted_rate"]  # bytes/s of a PAYLOAD message alone
    cap = emulated.parse_rate(LINKS[CAPPED])
    assert rates[CAPPED] * 8 >= 0.7 * cap, rates
    assert min(rates[name] for name in LINKS if name != CAPPED) > 2 * rates[CAPPED], rates
    # between workers (a ring left the capped one out): the fast links far above its cap
    peers = emulated_run["peer_rate"]
    assert min(peers[name] for name in LINKS if name != CAPPED) * 8 > 10 * cap, peers


@pytest.mark.cluster
@pytest.mark.network
def test_a_run_on_the_emulated_cluster_ends_on_the_local_answer(
        emulated_run: dict[str, Any]) -> None:
    import numpy as np

    assert emulated_run["converged"]
    np.testing.assert_allclose(emulated_run["remote"], emulated_run["local"], rtol=0,
                               atol=1e-8)
    np.testing.assert_allclose(emulated_run["remote_variance"],
                               emulated_run["local_variance"], rtol=1e-8)


@pytest.mark.cluster
@pytest.mark.network
def test_the_root_namespace_is_untouched_and_nothing_is_left(
        emulated_run: dict[str, Any]) -> None:
    subnet = ipaddress.IPv4Network(emulated_run["subnet"])
    addresses = re.findall(r"\binet (\S+)", emulated_run["root"])
    assert not [a for a in addresses if ipaddress.IPv4Interface(a).ip in subnet]
    assert not re.search(r"\d+: p-(sched|w\d)[@:]", emulated_run["root"])
    assert f"{emulated_run['prefix']}-" not in emulated_run["after"]


@pytest.mark.cluster
@pytest.mark.network
def test_a_failed_setup_step_is_named_and_undone() -> None:
    _require_namespaces()
    cluster = emulated.EmulatedCluster({"w0": "1gbit"}, latency="soon")
    with pytest.raises(emulated.EmulationError, match=r"^tc qdisc add tbf failed: "):
        with cluster:
            pass  # pragma: no cover (the setup fails)
    assert f"{cluster.prefix}-" not in _netns_list()
