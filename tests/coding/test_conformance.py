"""Conformance: every registered coding scheme honours the CodeAssignment contract.

A new scheme registered without an example here fails ``test_every_scheme_has_an_example``,
so it cannot skip these checks.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

import daskstraggle.coding as coding
from daskstraggle.coding import CodeAssignment, list_schemes, make_scheme
from daskstraggle.coding.base import Coverage
from daskstraggle.errors import InvalidParameterError

#: name -> (parameters, number of workers) of a small valid example.
EXAMPLES: dict[str, tuple[dict, int]] = {
    "uncoded": ({}, 5),
    "fractional-repetition": ({"n_stragglers": 1}, 6),
    "cyclic-repetition": ({"n_stragglers": 2}, 7),
    "partial-straggler": ({"n_stragglers": 1, "alpha": 2}, 3),
    "bcc": ({"batch_size": 2}, 12),
    "bcc-heterogeneous": ({"shift": 1.0, "rate": 2.0, "n_partitions": 6}, 12),
    "mds-ideal": ({"rate": 0.5}, 6),
    "rcs": ({"degrees": (1, 2)}, 6),
}


def _example(name: str) -> tuple[CodeAssignment, dict, int]:
    params, n = EXAMPLES[name]
    return make_scheme(name, **params).assign(n, rng=3), params, n


def test_every_scheme_has_an_example():
    assert set(list_schemes()) == set(EXAMPLES), set(list_schemes()) ^ set(EXAMPLES)
    assert set(coding.__all__) >= {"BCC", "CyclicRepetition", "IdealMDS", "Uncoded"}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_assignment_shape_and_reproducibility(name):
    a, params, n = _example(name)
    b = make_scheme(name, **params).assign(n, rng=3)
    assert a.n_workers == n and len(a.placement) == n and len(a.coefficients) == n
    assert a.placement == b.placement
    for ca, cb in zip(a.coefficients, b.coefficients, strict=True):
        np.testing.assert_array_equal(ca, cb)
    for parts, coef in zip(a.placement, a.coefficients, strict=True):
        assert all(0 <= p < a.n_partitions for p in parts)
        assert coef.dtype == np.float64 and coef.shape[1] == len(parts)
    load = a.load()
    assert load.shape == (n,) and ((load >= 0) & (load <= 1)).all()
    A, labels = a.encoding_matrix()
    assert A.shape == (len(labels), a.n_partitions)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_decoding_is_exact_or_refused(name):
    a, _, _ = _example(name)
    A, labels = a.encoding_matrix()
    assert a.decode([]) is None
    everything = a.decode(labels)
    if a.info.get("latency_only"):
        assert everything is not None
        return
    if a.info.get("covers", True):
        assert everything is not None
    # any subset: either exact weights on received messages only, or None
    rng = np.random.default_rng(0)
    for _ in range(40):
        k = int(rng.integers(0, len(labels) + 1))
        subset = [labels[i] for i in rng.choice(len(labels), size=k, replace=False)]
        weights = a.decode(subset)
        if weights is None:
            continue
        assert set(weights) <= set(subset)
        combo = sum(w * A[labels.index(key)] for key, w in weights.items())
        np.testing.assert_allclose(combo, np.ones(a.n_partitions), atol=1e-9)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_round_trip_and_bad_input(name):
    params, _ = EXAMPLES[name]
    scheme = make_scheme(name, **params)
    d = scheme.to_dict()
    assert d.pop("name") == name
    assert make_scheme(name, **d) == scheme
    with pytest.raises(InvalidParameterError, match="'n_workers' parameter"):
        scheme.assign(0)
    with pytest.raises(InvalidParameterError, match=r"does not take \['bogus'\]"):
        make_scheme(name, bogus=1, **params)


def test_unknown_scheme():
    with pytest.raises(InvalidParameterError, match=r"'scheme' parameter must be one of \["):
        make_scheme("lt-code")


def test_uncoded_needs_everyone():
    a = make_scheme("uncoded").assign(4)
    for k in range(4):
        for subset in itertools.combinations([(i, 0) for i in range(4)], k):
            assert a.decode(subset) is None
    assert a.decode([(i, 0) for i in range(4)]) == {(i, 0): 1.0 for i in range(4)}


def test_missing_parameter_is_one_clear_error():
    with pytest.raises(InvalidParameterError,
                       match=re.escape("The coding scheme 'bcc' needs ['batch_size']")):
        make_scheme("bcc")


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_nothing_decodes_before_every_partition_is_covered(name):
    """``Coverage`` may gate ``decode``: a set that decodes always covers every partition."""
    a, _, _ = _example(name)
    _, labels = a.encoding_matrix()
    rng = np.random.default_rng(1)
    decoded = 0
    for _ in range(60):
        order = [labels[i] for i in rng.permutation(len(labels))]
        cover = Coverage(a)
        covered: set[int] = set()
        for stop, (i, j) in enumerate(order, start=1):
            covered.update(a.supports[i][j])
            complete = cover.add(i, j)
            assert complete == (bool(a.info.get("latency_only"))
                                or len(covered) == a.n_partitions)
            if a.decode(order[:stop]) is not None:
                assert complete, (name, order[:stop])
                decoded += 1
                break
    assert decoded > 0


def test_supports_are_the_nonzero_coefficients_of_each_message():
    a, _, _ = _example("partial-straggler")
    for i, (parts, coef) in enumerate(zip(a.placement, a.coefficients, strict=True)):
        for j, row in enumerate(coef):
            assert a.supports[i][j] == tuple(p for p, c in zip(parts, row, strict=True)
                                             if c != 0)
