"""Block tiles and statistics, the local map-reduce helper, and the problem registry."""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest

from daskstraggle.errors import InvalidParameterError
from daskstraggle.problems import (
    PCA,
    Block,
    KernelResult,
    LeastSquares,
    Logistic,
    MatrixStats,
    Problem,
    block_stats,
    list_problems,
    make_problem,
)
from daskstraggle.problems.block import TILE_BYTES


# ------------------------------------------------------------------------ tiles
def test_plain_float64_tiles_are_views_covering_every_row(rng):
    X = rng.normal(size=(23, 4))
    block = Block(X, start=100)
    tiles = list(block.tiles(tile_rows=5))
    assert [(a, b) for a, b, _ in tiles] == [(0, 5), (5, 10), (10, 15), (15, 20), (20, 23)]
    assert all(np.shares_memory(tile, X) for _, _, tile in tiles)
    np.testing.assert_array_equal(np.vstack([t for *_, t in tiles]), X)
    assert (block.n_rows, block.n_features, block.stop, block.nbytes) == (23, 4, 123, X.nbytes)


def test_default_tile_is_about_the_cache_size():
    block = Block(np.zeros((10, 1000)))
    assert block.tile_rows() == TILE_BYTES // 8000
    assert Block(np.zeros((3, 10**7), dtype=np.int8)).tile_rows() == 1


def test_genotype_tiles_fill_center_and_scale(rng, genotype_rows):
    dosage, fill, center, scale, dense = genotype_rows(rng, 31, 6)
    before = dosage.copy()
    block = Block(dosage, fill=fill, center=center, scale=scale)
    for tile_rows in (4, None):
        tiles = list(block.tiles(tile_rows=tile_rows))
        assert all(tile.dtype == np.float64 for *_, tile in tiles)
        np.testing.assert_allclose(np.vstack([t for *_, t in tiles]), dense, rtol=1e-14)
    np.testing.assert_array_equal(dosage, before)  # stored values never modified
    assert (dosage < 0).any()


def test_float32_tiles_are_float64_copies(rng):
    values = rng.normal(size=(9, 3)).astype(np.float32)
    tiles = list(Block(values).tiles(tile_rows=4))
    assert all(t.dtype == np.float64 and not np.shares_memory(t, values) for *_, t in tiles)
    np.testing.assert_array_equal(np.vstack([t for *_, t in tiles]), values.astype(np.float64))


def test_small_tiles_fixture_forces_many_tiles(small_tiles):
    block = Block(np.zeros((30, 2)))
    assert len(list(block.tiles())) == (5 if small_tiles else 1)


# ------------------------------------------------------------------------ statistics
def test_block_stats_add_up_to_the_dense_statistics(
    rng, mixed_blocks, total_stats
):
    blocks, X, y = mixed_blocks(rng, n_features=5, labels=lambda X: np.sign(X[:, 0]) + 0.0)
    stats = total_stats(blocks)
    assert stats.n_samples == X.shape[0] and stats.n_features == 5
    np.testing.assert_allclose(stats.column_sums, X.sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(stats.column_means, X.mean(axis=0), rtol=1e-12)
    assert stats.sq_norm == pytest.approx(np.linalg.norm(X) ** 2, rel=1e-12)
    assert stats.centered_sq_norm == pytest.approx(
        np.linalg.norm(X - X.mean(axis=0)) ** 2, rel=1e-10
    )
    values, counts = np.unique(y, return_counts=True)
    assert stats.label_counts == {float(v): int(c) for v, c in zip(values, counts, strict=True)}
    assert stats.label_sum == pytest.approx(y.sum())


def test_label_counts_are_dropped_for_regression_targets(rng, split_blocks, total_stats):
    X = rng.normal(size=(40, 2))
    stats = total_stats(split_blocks(X, rng.normal(size=40), [0, 10, 40]))
    assert stats.label_counts is None
    assert block_stats(Block(X)).label_counts is None  # no labels at all


def test_local_map_reduce_folds_each_block_once(rng, split_blocks, local_map_reduce):
    X = rng.normal(size=(20, 3))
    blocks = split_blocks(X, bounds=[0, 3, 11, 20])
    map_reduce = local_map_reduce(blocks)
    assert map_reduce(lambda block: block.n_rows) == 20
    starts = map_reduce(lambda block, k: [block.start * k], 2, combine=lambda a, b: a + b)
    assert starts == [0, 6, 22]
    np.testing.assert_allclose(map_reduce(lambda block: block.values.sum(axis=0)), X.sum(axis=0))
    assert map_reduce.calls == 3


def test_kernel_results_add_and_scale():
    a = KernelResult(gradient=np.ones(2), values=np.array([1.0]), n_rows=3)
    b = KernelResult(gradient=np.full(2, 2.0), values=np.array([0.5]), n_rows=4)
    total = a + b
    np.testing.assert_array_equal(total.gradient, [3.0, 3.0])
    assert total.n_rows == 7 and total.values[0] == 1.5
    assert a.scaled(2.0).values[0] == 2.0 and a.scaled(2.0).n_rows == 3


# ------------------------------------------------------------------------ registry
def test_list_problems():
    assert list_problems() == ["least-squares", "logistic", "pca"]


@pytest.mark.parametrize(
    ("name", "params", "cls"),
    [
        ("pca", {"n_components": 3, "center": False}, PCA),
        ("logistic", {"alpha": 0.5}, Logistic),
        ("least-squares", {"alpha": 0.1, "fit_intercept": False}, LeastSquares),
    ],
)
def test_make_problem_builds_each_problem(name, params, cls):
    problem = make_problem(name, **params)
    assert type(problem) is cls and problem.name == name
    assert isinstance(problem, Problem) and not problem.is_bound
    assert make_problem(name, **problem.get_params()) == problem
    for key, value in params.items():
        assert getattr(problem, key) == value


def test_unknown_problem_name_lists_the_valid_names():
    message = re.escape(
        "The 'name' parameter of make_problem must be one of ['least-squares', 'logistic', "
        "'pca']. Got 'ridge' instead."
    )
    with pytest.raises(InvalidParameterError, match=message):
        make_problem("ridge")


def test_unknown_parameter_is_refused():
    message = r"Unknown parameter\(s\) \['k'\].*n_components"
    with pytest.raises(InvalidParameterError, match=message):
        make_problem("pca", k=3)


def test_make_problem_validates_values():
    with pytest.raises(InvalidParameterError, match="'n_components' parameter of PCA"):
        make_problem("pca", n_components=0)
    with pytest.raises(InvalidParameterError, match="'alpha' parameter of LeastSquares"):
        make_problem("least-squares", alpha=-1)


def _bound(name: str, rng: np.random.Generator, split_blocks, total_stats):
    X = rng.normal(size=(90, 4)) + 1.0
    y = np.where(X[:, 0] + rng.normal(size=90) > 1.0, 1.0, -1.0)
    blocks = split_blocks(X, y, [0, 7, 50, 90])
    return make_problem(name).bind(total_stats(blocks)), blocks


@pytest.mark.parametrize("name", list_problems())
def test_every_problem_is_additive_over_partitions_and_picklable(
    name, rng, split_blocks, total_stats, local_map_reduce
):
    problem, blocks = _bound(name, rng, split_blocks, total_stats)
    assert problem.is_bound
    clone = pickle.loads(pickle.dumps(problem))
    x = problem.init_iterate(np.random.default_rng(5))
    np.testing.assert_array_equal(x, clone.init_iterate(np.random.default_rng(5)))
    whole = problem.kernel(Block(np.vstack([b.values for b in blocks]),
                                 y=np.concatenate([b.y for b in blocks])), x)
    parts = local_map_reduce(blocks)(clone.kernel, x)
    np.testing.assert_allclose(parts.gradient, whole.gradient, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(parts.values, whole.values, rtol=1e-12)
    assert parts.n_rows == whole.n_rows == 90
    objective = problem.objective(parts.values, x)
    assert np.isfinite(objective)
    # one step from the start point with the default step size does not increase it
    step = problem.default_step_size(local_map_reduce(blocks), rng)
    x_next = problem.update(x, parts.gradient, step)
    after = problem.objective(local_map_reduce(blocks)(problem.kernel, x_next).values, x_next)
    assert after <= objective + 1e-12
    fitted = problem.finalize(x_next, local_map_reduce(blocks)(problem.kernel, x_next))
    assert all(isinstance(v, np.ndarray) and v.dtype == np.float64 for v in fitted.values())
    ref = problem.reference_solution(local_map_reduce(blocks))
    assert ref.objective <= after + 1e-12
    assert problem.distance(ref.iterate, ref) < 1e-12


def test_supports_momentum_flags():
    assert [make_problem(n).supports_momentum for n in list_problems()] == [True, True, False]
    assert [make_problem(n).needs_labels for n in list_problems()] == [True, True, False]


def test_unbound_stats_defaults():
    stats = MatrixStats(n_samples=0, column_sums=np.zeros(2), sq_norm=0.0)
    np.testing.assert_array_equal(stats.column_means, [0.0, 0.0])


def test_centered_norm_is_accurate_when_means_dwarf_the_spread():
    """Chan's pairwise update keeps |X - mean|_F^2 exact where sq_norm - n mu^2 cancels."""
    rng = np.random.default_rng(0)
    X = 1e6 + rng.normal(size=(1000, 3))
    stats = None
    for a, b in ((0, 1), (1, 300), (300, 1000)):
        s = block_stats(Block(X[a:b], start=a))
        stats = s if stats is None else stats + s
    exact = float(((X - X.mean(axis=0)) ** 2).sum())
    assert stats.centered_sq_norm == pytest.approx(exact, rel=1e-9)
    naive = stats.sq_norm - stats.n_samples * stats.column_means @ stats.column_means
    assert abs(naive - exact) > 1e-6 * exact  # the cancellation this guards against


def test_a_slice_keeps_each_rows_own_fill_centre_and_scale():
    values = np.array([[0, 1], [2, -1], [1, 0], [-1, 1]], dtype=np.int8)
    block = Block(values, start=10, y=np.arange(4.0), fill=np.array([0.5, 1.5, 2.5, 3.5]),
                  center=np.array([0.0, 10.0, 20.0, 30.0]), scale=np.array([1.0, 2.0, 3.0, 4.0]))
    full = np.vstack([t for _, _, t in block.tiles()])
    for a, b in [(0, 4), (1, 3), (2, 4), (3, 4)]:
        part = block.slice(a, b)
        assert part.start == 10 + a and part.y.tolist() == list(range(a, b))
        np.testing.assert_array_equal(np.vstack([t for _, _, t in part.tiles()]), full[a:b])
