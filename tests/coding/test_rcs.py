"""RCS codes and the incremental decoder."""

from __future__ import annotations

import numpy as np
import pytest

from daskstraggle.coding import RCS, IncrementalDecoder, rcs_codewords
from daskstraggle.errors import InvalidParameterError


def test_assignment_stores_every_partition_on_L_workers_in_shifted_lists():
    a = RCS(degrees=(1, 2, 3)).assign(10, rng=4)
    shifts = a.info["shifts"]
    assert len(set(shifts)) == 6 and a.n_partitions == 10
    for i, parts in enumerate(a.placement):
        assert parts == tuple((i + c) % 10 for c in shifts)
    counts = np.bincount(np.concatenate(a.placement), minlength=10)
    assert (counts == 6).all()
    # codewords: runs of 1, 2 and 3 consecutive list entries
    assert a.coefficients[0].tolist() == [[1, 0, 0, 0, 0, 0], [0, 1, 1, 0, 0, 0],
                                          [0, 0, 0, 1, 1, 1]]
    assert rcs_codewords(a.placement[3], (1, 2, 3))[1] == a.placement[3][1:3]


def test_decoder_peels_and_reduces():
    rng = np.random.default_rng(0)
    g = rng.normal(size=(5, 3))  # the blocks' values
    dec = IncrementalDecoder(5)
    messages = {}

    def send(label, blocks):
        messages[label] = g[list(blocks)].sum(axis=0)
        return dec.add(label, blocks)

    assert send("ab", (0, 1)) == []
    assert send("bc", (1, 2)) == []
    assert send("ab-again", (0, 1)) == []  # dependent: nothing new
    assert send("ac", (0, 2)) == [0, 1, 2]  # only a combination of all three isolates them
    assert send("d", (3,)) == [3]
    assert send("de", (3, 4)) == [4]  # peeling
    assert dec.recovered == frozenset(range(5)) and dec.n_received == 6
    for k in range(5):
        value = sum(w * messages[label] for label, w in dec.weights(k).items())
        np.testing.assert_allclose(value, g[k], atol=1e-12)
    with pytest.raises(KeyError):
        IncrementalDecoder(2).weights(0)


def test_decoder_matches_a_rank_oracle_on_random_codewords():
    rng = np.random.default_rng(1)
    for _ in range(50):
        K = int(rng.integers(2, 9))
        dec = IncrementalDecoder(K)
        rows = []
        for m in range(int(rng.integers(1, 2 * K))):
            blocks = rng.choice(K, size=int(rng.integers(1, K + 1)), replace=False)
            dec.add(m, blocks)
            row = np.zeros(K)
            row[blocks] = 1
            rows.append(row)
        A = np.array(rows)
        rank = np.linalg.matrix_rank(A)
        expected = {k for k in range(K)
                    if np.linalg.matrix_rank(np.vstack([A, np.eye(K)[k]])) == rank}
        assert dec.recovered == expected


def test_static_decode_is_exact_when_everything_arrives():
    a = RCS(degrees=(1, 2)).assign(5, rng=0)
    everything = [(i, j) for i in range(5) for j in range(2)]
    weights = a.decode(everything)
    A, labels = a.encoding_matrix()
    combo = sum(weights.get(lab, 0.0) * A[r] for r, lab in enumerate(labels))
    np.testing.assert_allclose(combo, np.ones(5), atol=1e-12)
    assert a.decode([(0, 0)]) is None


def test_bad_parameters():
    with pytest.raises(InvalidParameterError, match="'degrees' parameter of RCS must be"):
        RCS(degrees=())
    with pytest.raises(InvalidParameterError, match="'degrees' parameter of RCS must be"):
        RCS(degrees=(1, 2.5))
    with pytest.raises(InvalidParameterError, match=r"sums to 6, .* only 5 workers"):
        RCS(degrees=(1, 2, 3)).assign(5)
