"""Tests of the repetition gradient codes (uncoded, fractional, cyclic, partial straggler)."""

from __future__ import annotations

import itertools
import re
from fractions import Fraction

import numpy as np
import pytest

from daskstraggle.coding.base import get_scheme_class, make_scheme
from daskstraggle.coding.repetition import (
    DECODE_TOLERANCE,
    CyclicRepetition,
    FractionalRepetition,
    PartialStraggler,
    Uncoded,
)
from daskstraggle.errors import InvalidParameterError

N_MAX = 12


def combination_residual(assignment, weights):
    """``max |sum w * A_row - 1|`` from the public encoding matrix."""
    a, labels = assignment.encoding_matrix()
    w = np.array([weights.get(label, 0.0) for label in labels])
    assert w.dtype == np.float64
    return float(np.max(np.abs(w @ a - 1.0)))


def responders(n, stragglers):
    return {(i, 0) for i in range(n) if i not in stragglers}


def cases():
    """(scheme, N, s) for every N <= 12 and every s the scheme allows."""
    out = [(Uncoded(), n, 0) for n in range(1, N_MAX + 1)]
    for n in range(1, N_MAX + 1):
        for s in range(n):
            out.append((CyclicRepetition(n_stragglers=s), n, s))
            if n % (s + 1) == 0:
                out.append((FractionalRepetition(n_stragglers=s), n, s))
    return out


def test_registered():
    assert get_scheme_class("uncoded") is Uncoded
    assert get_scheme_class("fractional_repetition") is FractionalRepetition
    assert get_scheme_class("cyclic-repetition") is CyclicRepetition
    assert get_scheme_class("partial-straggler") is PartialStraggler
    assert make_scheme("cyclic-repetition", n_stragglers=2).to_dict() == {
        "name": "cyclic-repetition",
        "n_stragglers": 2,
        "n_candidates": 8,
    }


def test_every_straggler_set_of_size_s_decodes():
    for scheme, n, s in cases():
        assignment = scheme.assign(n, rng=n * 100 + s)
        assert assignment.n_partitions == n == scheme.partition_count(n)
        assert np.allclose(assignment.load(), (s + 1) / n)
        for stragglers in itertools.combinations(range(n), s):
            weights = assignment.decode(responders(n, set(stragglers)))
            assert weights is not None, (scheme, n, stragglers)
            assert combination_residual(assignment, weights) < DECODE_TOLERANCE


def test_more_than_s_stragglers_never_gives_wrong_weights():
    for scheme, n, s in cases():
        if s + 1 > n or n > 9:
            continue
        assignment = scheme.assign(n, rng=7)
        n_none = 0
        for stragglers in itertools.combinations(range(n), s + 1):
            weights = assignment.decode(responders(n, set(stragglers)))
            if weights is None:
                n_none += 1
            else:
                assert combination_residual(assignment, weights) < DECODE_TOLERANCE
        # uncoded and cyclic need N - s responders; fractional fails when a block is lost
        if not isinstance(scheme, FractionalRepetition):
            assert n_none == len(list(itertools.combinations(range(n), s + 1)))
        else:
            assert n_none > 0


def test_fractional_lost_block_returns_none_and_lucky_set_decodes():
    a = FractionalRepetition(n_stragglers=1).assign(6)  # blocks on workers {0,3},{1,4},{2,5}
    assert a.decode(responders(6, {0, 3})) is None
    weights = a.decode(responders(6, {0, 1, 5}))  # 3 stragglers, every block still present
    assert weights == {(2, 0): 1.0, (3, 0): 1.0, (4, 0): 1.0}
    assert a.info["recovery_threshold"] == 5
    assert a.info["n_blocks"] == 3


def test_uncoded_needs_everyone():
    a = Uncoded().assign(5)
    assert a.decode(responders(5, set())) == {(i, 0): 1.0 for i in range(5)}
    assert a.decode(responders(5, {3})) is None
    assert a.info["recovery_threshold"] == 5


@pytest.mark.parametrize("n", [50, 100])
@pytest.mark.parametrize("s", [1, 3, 10])
def test_cyclic_random_straggler_sets_large_n(n, s):
    a = CyclicRepetition(n_stragglers=s).assign(n, rng=s)
    assert a.info["recovery_threshold"] == n - s
    assert np.isfinite(a.info["condition"])
    rng = np.random.default_rng(n + s)
    for _ in range(20):
        stragglers = set(rng.choice(n, size=s, replace=False).tolist())
        weights = a.decode(responders(n, stragglers))
        assert weights is not None
        assert combination_residual(a, weights) < DECODE_TOLERANCE
        # fewer stragglers: all responders are used
        weights = a.decode(responders(n, set(list(stragglers)[:1])))
        assert weights is not None and len(weights) == n - 1
    too_many = set(rng.choice(n, size=s + 1, replace=False).tolist())
    assert a.decode(responders(n, too_many)) is None


def test_cyclic_recovery_threshold_and_s0_is_uncoded():
    for n in range(1, 8):
        for s in range(n):
            assert (
                CyclicRepetition(n_stragglers=s).assign(n, rng=0).info["recovery_threshold"]
                == n - s
            )
    a = CyclicRepetition(n_stragglers=0).assign(4, rng=0)
    assert a.placement == Uncoded().assign(4).placement
    np.testing.assert_array_equal(a.encoding_matrix()[0], np.eye(4))


def test_cyclic_paper_example_shape():
    a = CyclicRepetition(n_stragglers=1).assign(3, rng=0)
    assert a.placement == ((0, 1), (1, 2), (2, 0))
    for c in a.coefficients:
        assert c.shape == (1, 2) and c[0, 0] == 1.0


def test_cyclic_is_seeded():
    a = CyclicRepetition(n_stragglers=2).assign(9, rng=3)
    b = CyclicRepetition(n_stragglers=2).assign(9, rng=3)
    for x, y in zip(a.coefficients, b.coefficients, strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize(
    ("scheme", "n"),
    [
        (Uncoded(), 12),
        (FractionalRepetition(n_stragglers=2), 12),
        (CyclicRepetition(n_stragglers=2), 12),
        (CyclicRepetition(n_stragglers=3), 50),
    ],
)
def test_float32_messages_decode_in_float64(scheme, n):
    """Messages computed in float32, weights and the sum in float64.

    Tolerance (stated honestly): the error is the float32 rounding of each message
    (inputs and an (s+1)-term sum, <= (s+2) eps32 |A_i| |g| per message) amplified by the
    decoding weights, i.e. ``(s+2) eps32 sum_i |w_i| (|A_i| @ |g|)`` (times 2 for slack).
    For weight-1 codes that is float32 accuracy; for cyclic at N = 50 the weights are
    large, so float32 messages can be far off in absolute terms: use float64 messages.
    """
    rng = np.random.default_rng(0)
    a = scheme.assign(n, rng=1)
    s = getattr(scheme, "n_stragglers", 0)
    g = rng.standard_normal((n, 5)).astype(np.float32)  # partial sums g_k, d = 5
    mat, labels = a.encoding_matrix()
    messages = mat.astype(np.float32) @ g  # float32 all the way
    exact = g.astype(np.float64).sum(axis=0)
    stragglers = set(rng.choice(n, size=s, replace=False).tolist())
    weights = a.decode(responders(n, stragglers))
    w = np.array([weights.get(label, 0.0) for label in labels])
    assert w.dtype == np.float64
    decoded = w @ messages.astype(np.float64)
    assert decoded.dtype == np.float64
    eps = float(np.finfo(np.float32).eps)
    bound = 2 * (s + 2) * eps * (np.abs(w) @ (np.abs(mat) @ np.abs(g.astype(np.float64))))
    assert np.all(np.abs(decoded - exact) <= bound)
    # with float64 messages the decoded sum is exact to ~1e-9 relative
    decoded64 = w @ (mat @ g.astype(np.float64))
    np.testing.assert_allclose(decoded64, exact, rtol=0, atol=1e-9 * np.abs(g).sum())


@pytest.mark.parametrize(
    ("n", "s", "alpha", "k"),
    [
        (3, 1, 2, 9),
        (3, 1, 2.0, 9),
        (4, 1, 3, 8),
        (6, 2, Fraction(3, 2), 42),
        (5, 1, 1.2, 55),
        (7, 3, 5, 14),
        (12, 2, 1.5, 84),
        (5, 0, 2, 10),
    ],
)
def test_partial_straggler_load_and_decoding(n, s, alpha, k):
    scheme = PartialStraggler(n_stragglers=s, alpha=alpha)
    a = scheme.assign(n, rng=0)
    assert a.n_partitions == k == scheme.partition_count(n)
    want = Fraction(alpha) if not isinstance(alpha, float) else Fraction(repr(alpha))
    want = want * (s + 1) / (n * (s + want))
    assert a.info["load_fraction"] == want
    for parts in a.placement:
        assert Fraction(len(parts), a.n_partitions) == want
    assert all(a.n_messages(i) == 2 for i in range(n))
    naive = {(i, 0) for i in range(n)}
    for stragglers in itertools.combinations(range(n), s):
        coded = {(i, 1) for i in range(n) if i not in stragglers}
        weights = a.decode(naive | coded)
        assert weights is not None
        assert combination_residual(a, weights) < DECODE_TOLERANCE
        if s:
            # both messages of only N - s workers miss the stragglers' naive parts
            both = {(i, j) for i in range(n) if i not in stragglers for j in (0, 1)}
            assert a.decode(both) is None
    assert a.decode(naive) is None
    if s + 1 < n:
        # N - s - 1 coded messages: None unless a fractional inner code got lucky
        weights = a.decode(naive | {(i, 1) for i in range(n - s - 1)})
        if a.info["inner"] == "cyclic-repetition":
            assert weights is None
        elif weights is not None:
            assert combination_residual(a, weights) < DECODE_TOLERANCE


def test_partial_straggler_figure_4():
    a = PartialStraggler(n_stragglers=1, alpha=2, inner="cyclic-repetition").assign(3, rng=0)
    assert a.placement[0][:2] == (0, 1)  # n1 = g(N1) + g(N2)
    assert a.info["inner"] == "cyclic-repetition"
    np.testing.assert_array_equal(a.coefficients[0][0], [1, 1, 0, 0])
    assert len(a.placement[0]) == 4 and a.load()[0] == pytest.approx(4 / 9)


def test_unknown_label_raises():
    a = Uncoded().assign(2)
    with pytest.raises(ValueError, match="not a message"):
        a.decode({(0, 0), (1, 1)})


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (
            lambda: CyclicRepetition(n_stragglers=3).assign(3),
            "'n_stragglers' parameter of CyclicRepetition must be an int in [0, 2]",
        ),
        (
            lambda: CyclicRepetition(n_stragglers=-1),
            "'n_stragglers' parameter of CyclicRepetition must be an int >= 0",
        ),
        (lambda: CyclicRepetition(n_stragglers=1.5), "'n_stragglers' parameter"),
        (lambda: CyclicRepetition(n_stragglers=True), "'n_stragglers' parameter"),
        (lambda: CyclicRepetition(n_candidates=0), "'n_candidates' parameter"),
        (
            lambda: FractionalRepetition(n_stragglers=1).assign(5),
            "n_stragglers + 1 divides n_workers=5. Got 1 instead. Use scheme='cyclic-repetition'",
        ),
        (lambda: FractionalRepetition(n_stragglers=4).assign(4), "'n_stragglers' parameter"),
        (lambda: FractionalRepetition(n_stragglers="1"), "Got '1' instead"),
        (
            lambda: PartialStraggler(alpha=1),
            "'alpha' parameter of PartialStraggler must be a finite number > 1",
        ),
        (lambda: PartialStraggler(alpha=0.5), "'alpha' parameter"),
        (lambda: PartialStraggler(alpha=float("inf")), "'alpha' parameter"),
        (lambda: PartialStraggler(alpha="2"), "'alpha' parameter"),
        (lambda: PartialStraggler(n_stragglers=-2), "'n_stragglers' parameter"),
        (lambda: PartialStraggler(n_stragglers=3).assign(2), "'n_stragglers' parameter"),
        (lambda: PartialStraggler(inner="mds"), "'inner' parameter"),
        (lambda: PartialStraggler(alpha=1.0000001).partition_count(4), "Round alpha"),
        (lambda: make_scheme("uncoded", n_stragglers=1), "does not take"),
    ],
)
def test_bad_parameters(build, match):
    with pytest.raises(InvalidParameterError, match=re.escape(match)):
        build()
