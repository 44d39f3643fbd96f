"""The link term: its grammar, its errors, and the closed forms of its transfer times."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from daskstraggle.errors import InvalidParameterError
from daskstraggle.latency import Link, SharedLink, parse_bandwidth, share_link
from daskstraggle.latency.base import Constant, LatencyModel
from daskstraggle.latency.models import Gamma, Slowdown
from daskstraggle.latency.spec import parse_latency, parse_stragglers

GAMMA = Gamma(mean=0.1, var=1e-4)


# --------------------------------------------------------------------------- grammar

@pytest.mark.parametrize(("rate", "bytes_per_second"), [
    (1e9, 1e9), (1, 1.0), ("100mbit", 12.5e6), ("1Gbit", 125e6), ("8bit", 1.0),
    ("2kbps", 2e3), ("1.5mbps", 1.5e6), ("1kibit", 128.0), ("1mibps", 2.0**20),
    (" 10 MBit ", 1.25e6), ("1e3kbit", 125e3), ("1tbit", 125e9),
])
def test_bandwidth_is_bytes_per_second_or_a_tc_rate(rate, bytes_per_second):
    assert parse_bandwidth(rate) == bytes_per_second


def test_the_term_combines_with_any_distribution():
    model = parse_latency("gamma(mean=0.1, var=1e-4) + link(bandwidth=1e9, coordinator=1e8)")
    assert model == Link(base=GAMMA, bandwidth=1e9, coordinator=1e8)
    assert model.link is model and GAMMA.link is None
    per_worker = parse_latency("gamma(mean=0.1, var=1e-4) + link(bandwidth=(1e9, 1e9, 1e7))")
    assert per_worker.bandwidth == (1e9, 1e9, 1e7) and per_worker.coordinator is None
    # strings and lists, and a modifier on top: the link is found through it
    model = parse_latency('shifted_exponential(shift=0.1, rate=5) + link(bandwidth=["1gbit", '
                          '"10mbit"], coordinator="100mbit", latency=0.002) '
                          '+ slowdown(workers=1, factor=3)')
    assert model.link is not None and model.link.bandwidth == (125e6, 1.25e6)
    assert model.link.coordinator == 12.5e6 and model.link.latency == 0.002
    # beside the fault terms of the simulated runtime
    spec = parse_stragglers("constant(compute=1) + link(coordinator=1e6) + loss(workers=0, at=2)")
    assert spec.model.link.coordinator == 1e6 and len(spec.faults) == 1


@pytest.mark.parametrize("text", [
    "gamma(mean=0.1, var=1e-4) + link(bandwidth=1e9, coordinator=1e8)",
    "constant(compute=0.5) + link(bandwidth=[1e9, '100mbit', 1e7], latency=[0.0, 0.001, 0.0])",
    "link(coordinator='1gbit')",
    "gamma(mean=0.1, var=1e-4) + link(bandwidth=1e6) + slowdown(workers=0, factor=2)",
])
def test_round_trips_through_its_spec_and_its_dict(text):
    model = parse_latency(text)
    assert parse_latency(model.to_spec()) == model
    assert LatencyModel.from_dict(json.loads(json.dumps(model.to_dict()))) == model
    assert model.to_dict()["name"] in ("link", "slowdown")


def test_the_link_changes_no_draw():
    plain = Slowdown(base=GAMMA, workers=0, factor=2.0).sampler(3, rng=4)
    linked = parse_latency("gamma(mean=0.1, var=1e-4) + link(bandwidth=1e3) "
                           "+ slowdown(workers=0, factor=2)").sampler(3, rng=4)
    for k in range(5):
        assert linked.sample(k % 3, load=1.5) == plain.sample(k % 3, load=1.5)
    alone = Link(bandwidth=1e6).sampler(2)
    assert alone.sample(1, measured=0.25) == (0.25, 0.0)  # the real compute time, unchanged


@pytest.mark.parametrize(("text", "name", "fix"), [
    ("link(bandwidth=0)", "bandwidth", "a tc rate such as '100mbit'"),
    ("link(bandwidth='fast')", "bandwidth", "a tc rate such as '100mbit'"),
    ("link(bandwidth='100')", "bandwidth", "a tc rate such as '100mbit'"),  # a unit is needed
    ("link(bandwidth='100 mbit/s')", "bandwidth", "(bit, kbit, mbit, gbit: bits/s"),
    ("link(bandwidth=[1e9, -1])", "bandwidth", "one per worker"),
    ("link(bandwidth=[])", "bandwidth", "one per worker"),
    ("link(bandwidth=True)", "bandwidth", "bytes per second"),
    ("link(coordinator=[1e9, 1e9])", "coordinator", "or None (unlimited)"),
    ("link(coordinator=0.5)", "coordinator", "a finite number >= 1"),
    ("link(latency=-1)", "latency", ">= 0"),
])
def test_bad_parameters_fail_in_one_line_naming_the_parameter_and_the_fix(text, name, fix):
    with pytest.raises(InvalidParameterError) as err:
        parse_latency(text)
    message = str(err.value)
    assert f"The {name!r} parameter of Link must be" in message and fix in message
    assert "\n" not in message


def test_bad_combinations_fail_in_one_line():
    with pytest.raises(InvalidParameterError, match=re.escape("give one link(...) term")):
        parse_latency("gamma(mean=0.1, var=1e-4) + link(bandwidth=1e9) + link(coordinator=1e8)")
    with pytest.raises(InvalidParameterError, match="has 2 values but there are 3 workers"):
        parse_latency("link(bandwidth=(1e9, 1e9))").sampler(3)
    with pytest.raises(InvalidParameterError, match=re.escape("takes ['base', 'bandwidth'")):
        parse_latency("link(rate=1e9)")
    with pytest.raises(InvalidParameterError, match="not a modifier"):
        parse_latency("link(bandwidth=1e9) + gamma(mean=0.1, var=1e-4)")


# --------------------------------------------------------------------------- closed forms

@pytest.mark.parametrize(("nbytes", "rate", "latency"), [
    (1e6, 1e9, 0.0), (64.0, 1e3, 0.0), (8e6, 12.5e6, 0.002), (0.0, 1e6, 0.01)])
def test_one_reply_takes_its_bytes_over_the_bandwidth_plus_the_latency(nbytes, rate, latency):
    link = Link(bandwidth=(1e12, rate), latency=latency)
    assert link.transfer_duration(1, nbytes) == pytest.approx(nbytes / rate + latency, rel=1e-15)
    assert link.transfer_duration(0, nbytes) == pytest.approx(nbytes / 1e12 + latency, rel=1e-15)
    assert Link(latency=latency).transfer_duration(0, nbytes) == latency  # unlimited
    assert link.coordinator_duration(nbytes) == 0.0  # no coordinator bandwidth: no queue


@pytest.mark.parametrize(("n", "nbytes", "rate"),
                         [(4, 64.0, 1e3), (10, 1e6, 1.25e8), (1, 5.0, 1.0)])
def test_simultaneous_equal_replies_share_the_coordinator_link(n, nbytes, rate):
    """Sent at once, n equal replies share the link equally: all arrive when its n
    messages' bytes have crossed (TCP streams through one port)."""
    crossed = share_link(Link(coordinator=rate), [0.0] * n, nbytes)
    np.testing.assert_allclose(crossed, [n * nbytes / rate] * n, rtol=1e-12)


def test_a_reply_reaching_an_idle_coordinator_link_does_not_wait():
    link = Link(coordinator=100.0)
    # alone from 1 s, shared from 2 s (50 B left at 50 B/s), alone again; idle at 10 s
    assert share_link(link, [1.0, 2.0, 10.0], 150.0) == pytest.approx([3.0, 4.0, 11.5])
    assert share_link(Link(), [3.0], 1e9) == [3.0]  # unlimited


def test_a_reply_held_by_its_own_link_leaves_the_rest_to_the_others():
    """Max-min fair shares: a reply whose own link carries 10 B/s takes 10 of the
    coordinator's 100; the two others share 90 until they are done, then it goes on."""
    crossed = share_link(Link(coordinator=100.0), [0.0] * 3, 450.0, rates=[10.0, 1e9, 1e9])
    assert crossed == pytest.approx([45.0, 10.0, 10.0])


def test_the_shared_link_carries_a_message_behind_the_replies_in_flight():
    """A checkpoint written while two replies are in flight shares the link with them
    and is done once its bytes crossed; the replies that finished first come back."""
    shared = SharedLink(Link(coordinator=100.0))
    shared.add("a", 0.0, 100.0)
    shared.add("b", 0.0, 300.0)
    done, before = shared.cross(0.0, 100.0)  # a third of 100 B/s each
    assert done == pytest.approx(3.0) and before == [(pytest.approx(3.0), "a")]
    assert shared.next_done() == (pytest.approx(5.0), "b")  # 200 B left, alone at 100 B/s


def test_constant_base_keeps_its_own_communication():
    model = Link(base=Constant(compute=1.0, communication=0.5), bandwidth=1e3)
    assert model.sampler(1).sample(0, load=2.0) == (2.0, 0.5)
