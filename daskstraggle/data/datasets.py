"""Dataset recipes: simulated genotypes and synthetic regression data, written as Zarr into
a hidden sibling of ``out`` renamed into place when complete. Data-global draws come from
the first child of ``np.random.SeedSequence(seed)``, chunk ``i``'s rows from child ``i + 1``."""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np

from daskstraggle._output import check_not_in_zarr, check_writable_folder
from daskstraggle._validation import (
    check_bool,
    check_choice,
    check_int,
    check_nonnegative,
    check_path,
    check_positive,
)
from daskstraggle.errors import InvalidParameterError, OutputExistsError, StraggleError

__all__ = ["DATASETS", "make_dataset", "make_genotypes", "make_linear", "make_logistic"]

logger = logging.getLogger(__name__)

#: Individuals per island of the simulated island model (msprime ``population_size``).
POPULATION_SIZE = 10_000
#: Per-base, per-generation mutation rate of the genotype simulation.
MUTATION_RATE = 1e-8
#: Per-base, per-generation recombination rate of the genotype simulation.
RECOMBINATION_RATE = 1e-8
#: Largest number of samples in one VCF Zarr sample chunk.
MAX_SAMPLES_CHUNK = 10_000
#: Longest independent segment of one msprime simulation (bases).
SEGMENT_LENGTH = 2_000_000
_DTYPES = ("float64", "float32")
_Arrays = dict[str, np.ndarray]
_Globals = Callable[[np.random.Generator, dict[str, Any]], tuple[_Arrays, dict[str, Any]]]
_Rows = Callable[[np.random.Generator, int, _Arrays, dict[str, Any], dict[str, Any]],
                 tuple[np.ndarray, np.ndarray]]
_Seqs = list[np.random.SeedSequence]


# ---------------------------------------------------------------------------- helpers
def _exists(path: object) -> OutputExistsError:
    return OutputExistsError(
        f"{str(path)!r} exists; pass overwrite=True (CLI: --overwrite) or choose another path"
    )


def _targets(path: Path) -> list[Path]:
    """The paths a recipe writes: ``path``, or a ``.bed``'s fileset (.bed, .bim, .fam)."""
    if path.suffix.lower() != ".bed":
        return [path]
    return [path.with_suffix(suffix) for suffix in (".bed", ".bim", ".fam")]


def _check_out(out: object, *, caller: str, overwrite: object, progress: object,
               fileset: bool = False) -> tuple[Path, bool, bool]:
    """Return ``out`` as an absolute path, ``overwrite`` and ``progress`` checked; refuse
    a ``.bed`` unless ``fileset``, a path in a Zarr store, one that exists (or a file of its
    fileset; unless ``overwrite``) or whose folder cannot be written."""
    overwrite = check_bool(overwrite, name="overwrite", caller=caller)
    progress = check_bool(progress, name="progress", caller=caller)
    what = f"The 'out' parameter of {caller} (CLI: --out)"
    given = os.fspath(check_path(out, name="out", caller=f"{caller} (CLI: --out)",
                                 example="data/lin.zarr"))
    path = Path(given).expanduser().absolute()
    if path.suffix.lower() == ".bed" and not fileset:
        raise InvalidParameterError(
            f"The 'out' parameter of {caller} (CLI: --out) ends in .bed, which names a PLINK "
            f"fileset: only genotypes are written as one. Got {given!r} instead; "
            "name the Zarr store otherwise, e.g. data.zarr."
        )
    check_not_in_zarr(path, what=what)
    existing = [t for t in dict.fromkeys([path, *_targets(path)]) if os.path.lexists(t)]
    if existing and not overwrite:
        raise _exists(existing[0])
    check_writable_folder(path.parent, out=path, what=what)
    return path, overwrite, progress


def _gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:.3g} GiB"


def _check_fits(out: Path, *, caller: str, store_bytes: float, chunk_bytes: float,
                sizes: str) -> None:
    """Refuse a store of ``store_bytes`` (uncompressed) over the free disk space, or a
    chunk of ``chunk_bytes`` over the available memory; ``sizes`` names the options."""
    from daskstraggle._resources import available_memory, nearest_existing

    folder = nearest_existing(out.parent)
    free = shutil.disk_usage(folder).free
    if store_bytes > free:
        raise InvalidParameterError(
            f"The dataset of {caller} would take up to {_gib(store_bytes)} ({sizes}), "
            f"more than the {_gib(free)} free in {str(folder)!r}; lower --size or "
            "--features, or write it elsewhere."
        )
    available = available_memory()
    if chunk_bytes > available:
        raise InvalidParameterError(
            f"The dataset of {caller} draws its rows a chunk at a time, {_gib(chunk_bytes)} "
            f"in memory ({sizes}), more than the {_gib(available)} available; lower "
            "--chunk-rows or --features."
        )


def _check_ints(values: dict[str, Any], caller: str, **flags: str) -> dict[str, Any]:
    """``values``, those ``flags`` names checked as ints >= 1 (seed >= 0; CLI: the flag)."""
    return {key: check_int(value, name=key, caller=caller, low=0 if key == "seed" else 1,
                           remedy=f"(CLI: {flags[key]})") if key in flags else value
            for key, value in values.items()}


def _check_fraction(value: object, *, name: str, caller: str) -> float:
    flag = f"(CLI: --{name.replace('_', '-')})"
    value = check_nonnegative(value, name=name, caller=caller, remedy=flag)
    if value >= 1:
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} must be a number in [0, 1). "
            f"Got {value!r} instead. {flag}"
        )
    return value


@contextlib.contextmanager
def _staged(targets: list[Path], *, overwrite: bool) -> Iterator[Path]:
    """Yield a temporary folder beside ``targets``; on success move its entries of their
    names onto them (an old target removed only then), on failure leave them as they were.
    Zarr writes every chunk meanwhile, those of the fill value too (reads refuse absent ones)."""
    import zarr

    targets[0].parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{targets[0].name}.tmp-", dir=targets[0].parent))
    old = staging / ".old"
    try:
        with zarr.config.set({"array.write_empty_chunks": True}):
            yield staging
        existing = [t for t in targets if os.path.lexists(t)]
        if existing and not overwrite:  # appeared while we were writing
            raise _exists(existing[0])
        old.mkdir()
        for target in targets:
            if os.path.lexists(target):
                os.replace(target, old / target.name)
            try:
                os.replace(staging / target.name, target)
            except BaseException:
                if os.path.lexists(old / target.name):
                    os.replace(old / target.name, target)
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _streams(seed: int, n_rows: int, chunk_rows: int) -> tuple[np.random.SeedSequence,
                                                                 list[tuple[int, int]], _Seqs]:
    """Return the global seed sequence, the chunks' ``(start, stop)`` rows and their seeds."""
    bounds = [(a, min(a + chunk_rows, n_rows)) for a in range(0, n_rows, chunk_rows)]
    children = np.random.SeedSequence(seed).spawn(len(bounds) + 1)
    return children[0], bounds, children[1:]


def _progress(iterable: Any, *, enabled: bool, desc: str, total: int, unit: str = "chunk") -> Any:
    """Wrap ``iterable`` in a tqdm bar on stderr."""
    if not enabled:
        return iterable
    from daskstraggle._progress import progress_bar

    return progress_bar(iterable, desc=desc, total=total, unit=unit, leave=False)


# --------------------------------------------------------------------- tabular recipes
def _write_table(name: str, out: object, values: dict[str, Any], extra: tuple[str, float], *,
                 overwrite: object, progress: object, global_arrays: _Globals,
                 rows: _Rows) -> Path:
    """Check a tabular recipe's parameters (``values`` and the recipe's own non-negative
    ``extra`` (name, value)), then write X and y chunk by chunk as Zarr v3: ``global_arrays``
    draws the data-global arrays and attrs, ``rows`` a chunk's rows."""
    import zarr

    caller = f"make_{name}"
    params = _check_ints(values, caller, n_samples="--size", n_features="--features",
                         chunk_rows="--chunk-rows", seed="--seed")
    params["dtype"] = check_choice(values["dtype"], name="dtype", caller=caller, choices=_DTYPES)
    params[extra[0]] = check_nonnegative(extra[1], name=extra[0], caller=caller)
    path, overwrite, progress = _check_out(out, caller=caller, overwrite=overwrite,
                                           progress=progress)
    n_samples, n_features = params["n_samples"], params["n_features"]
    chunk = min(params["chunk_rows"], n_samples)
    # X in its dtype and y; a chunk is drawn in float64, cast and summed (about 3 copies)
    _check_fits(path, caller=caller,
                store_bytes=n_samples * (n_features * np.dtype(params["dtype"]).itemsize + 8),
                chunk_bytes=8.0 * (3 * chunk + 1) * n_features,
                sizes=f"{n_samples} rows of {n_features} columns, {chunk} rows per chunk")
    global_seq, bounds, chunk_seqs = _streams(params["seed"], n_samples, chunk)
    arrays, attrs = global_arrays(np.random.default_rng(global_seq), params)
    with _staged([path], overwrite=overwrite) as tmp:
        group = zarr.open_group(tmp / path.name, mode="w", zarr_format=3)
        group.attrs.update({"daskstraggle_dataset": name, "params": params,
                            "seed": params["seed"], **attrs})
        X = group.create_array("X", shape=(n_samples, n_features), chunks=(chunk, n_features),
                               dtype=params["dtype"], dimension_names=("sample", "feature"))
        y = group.create_array("y", shape=(n_samples,), chunks=(chunk,), dtype="float64",
                               dimension_names=("sample",))
        for key, value in arrays.items():
            group.create_array(key, data=value, dimension_names=("feature",))
        chunks = zip(bounds, chunk_seqs, strict=True)
        for (start, stop), seq in _progress(chunks, enabled=progress, desc=name, total=len(bounds)):
            X_rows, y_rows = rows(np.random.default_rng(seq), stop - start, arrays, attrs, params)
            X[start:stop] = X_rows
            y[start:stop] = y_rows
    logger.info("wrote %s dataset (%d x %d) to %s", name, n_samples, n_features, path)
    return path


def _logistic_globals(rng: np.random.Generator,
                      params: dict[str, Any]) -> tuple[_Arrays, dict[str, Any]]:
    g = rng.standard_normal(params["n_features"])
    mu = params["separation"] * g / np.linalg.norm(g)
    return {"mu": mu, "coef": 2.0 * mu}, {"intercept": 0.0}


def _logistic_rows(rng: np.random.Generator, m: int, arrays: _Arrays, attrs: dict[str, Any],
                   params: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    y = rng.integers(0, 2, size=m).astype(np.float64) * 2.0 - 1.0
    X = rng.standard_normal((m, params["n_features"]))
    X += y[:, None] * arrays["mu"]
    return X.astype(params["dtype"], copy=False), y


def _linear_globals(rng: np.random.Generator,
                    params: dict[str, Any]) -> tuple[_Arrays, dict[str, Any]]:
    coef = rng.standard_normal(params["n_features"])
    return {"coef": coef}, {"intercept": float(rng.standard_normal())}


def _linear_rows(rng: np.random.Generator, m: int, arrays: _Arrays, attrs: dict[str, Any],
                 params: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    X = rng.standard_normal((m, params["n_features"])).astype(params["dtype"], copy=False)
    y = X.astype(np.float64) @ arrays["coef"] + attrs["intercept"]
    y += params["noise"] * rng.standard_normal(m)
    return X, y


def make_logistic(out: str | os.PathLike[str], *, n_samples: int = 100_000,
                  n_features: int = 50, chunk_rows: int = 10_000, separation: float = 1.0,
                  dtype: str = "float64", seed: int = 0, overwrite: bool = False,
                  progress: bool = False) -> Path:
    """Write a two-Gaussian-mixture classification dataset as a Zarr v3 group.

    Each label is drawn as ``y = -1`` or ``y = +1`` with probability 1/2 and its features
    as ``x ~ N(y μ, I)``. The mean ``μ`` is drawn once, ``μ = separation · g / ‖g‖`` with
    ``g ~ N(0, I)``, so ``‖μ‖ = separation`` whatever ``n_features``: the Bayes error is
    ``Φ(-separation)`` (about 16% at the default 1.0). The class posterior is exactly
    logistic, ``P(y = 1 | x) = 1 / (1 + exp(-2 μᵀx))``, so ``coef = 2μ`` (intercept 0) are
    the true logistic-regression coefficients.

    Parameters
    ----------
    out : str or os.PathLike
        Directory of the Zarr v3 group to write (parents are created).
    n_samples : int, default=100_000
        Rows (examples).
    n_features : int, default=50
        Columns (features).
    chunk_rows : int, default=10_000
        Rows per Zarr chunk; each chunk's rows come from their own random stream.
    separation : float, default=1.0
        ``‖μ‖``, half the distance between the class means; 0 makes the labels
        independent of the features.
    dtype : {"float64", "float32"}, default="float64"
        Storage dtype of ``X``; rows are drawn in float64 and rounded, so a float32 store
        holds the float64 store's values rounded.
    seed : int, default=0
        Seed of ``np.random.SeedSequence``.
    overwrite : bool, default=False
        Replace an existing ``out`` (after the new store is complete).
    progress : bool, default=False
        Show a progress bar over chunks on stderr.

    Returns
    -------
    path : pathlib.Path
        The absolute path of the store: arrays ``X`` (n_samples, n_features), ``y``
        (n_samples,) in {-1, +1}, ``mu`` and ``coef`` (n_features,); group attrs
        ``daskstraggle_dataset``, ``params``, ``seed``, ``intercept``.

    Raises
    ------
    InvalidParameterError, OutputExistsError, OutputNotWritableError
        As :func:`make_genotypes`.

    Notes
    -----
    Tandon et al. and Li et al. draw the label from a logistic model with separate true
    weights; here it is the mixture component, an exact logistic model too, whose
    difficulty ``separation`` fixes whatever ``n_features``.

    References
    ----------
    .. [1] R. Tandon, Q. Lei, A. G. Dimakis, N. Karampatziakis, "Gradient Coding:
       Avoiding Stragglers in Distributed Learning", ICML 2017, Sec. 5.
    .. [2] S. Li, S. M. M. Kalan, A. S. Avestimehr, M. Soltanolkotabi, "Near-Optimal
       Straggler Mitigation for Distributed Gradient Methods" (batched coupon
       collector), IPDPSW 2018, Sec. VI.

    Examples
    --------
    >>> import tempfile, zarr
    >>> path = make_logistic(tempfile.mkdtemp() + "/mix.zarr", n_samples=1000, n_features=5)
    >>> zarr.open_group(path, mode="r")["X"].shape
    (1000, 5)
    """
    values = {"n_samples": n_samples, "n_features": n_features, "chunk_rows": chunk_rows,
              "dtype": dtype, "seed": seed}
    return _write_table("logistic", out, values, ("separation", separation),
                        overwrite=overwrite, progress=progress,
                        global_arrays=_logistic_globals, rows=_logistic_rows)


def make_linear(out: str | os.PathLike[str], *, n_samples: int = 100_000,
                n_features: int = 50, chunk_rows: int = 10_000, noise: float = 0.1,
                dtype: str = "float64", seed: int = 0, overwrite: bool = False,
                progress: bool = False) -> Path:
    """Write a linear-regression dataset ``y = X w* + b* + noise · ε`` as a Zarr v3 group.

    Features are ``x ~ N(0, I)``; the true coefficients ``w* ~ N(0, I)`` and intercept
    ``b* ~ N(0, 1)`` are drawn once; ``ε ~ N(0, 1)`` per row. ``y`` is computed from the
    stored (possibly float32-rounded) ``X``, so the model holds exactly for the stored data.

    Parameters
    ----------
    out, n_samples, n_features, chunk_rows, dtype, seed, overwrite, progress
        As :func:`make_logistic`.
    noise : float, default=0.1
        Standard deviation of the additive Gaussian noise (0: noiseless).

    Returns
    -------
    path : pathlib.Path
        The absolute path of the store: arrays ``X`` (n_samples, n_features), ``y``
        (n_samples,) and ``coef`` (n_features,); group attrs ``daskstraggle_dataset``,
        ``params``, ``seed``, ``intercept``.

    Raises
    ------
    InvalidParameterError, OutputExistsError, OutputNotWritableError
        As :func:`make_genotypes`.

    Examples
    --------
    >>> import tempfile, zarr
    >>> path = make_linear(tempfile.mkdtemp() + "/lin.zarr", n_samples=1000, n_features=5)
    >>> zarr.open_group(path, mode="r")["coef"].shape
    (5,)
    """
    values = {"n_samples": n_samples, "n_features": n_features, "chunk_rows": chunk_rows,
              "dtype": dtype, "seed": seed}
    return _write_table("linear", out, values, ("noise", noise), overwrite=overwrite,
                        progress=progress, global_arrays=_linear_globals, rows=_linear_rows)


# ------------------------------------------------------------------------- genotypes
def _sites_per_base(n_nodes: int, n_populations: int, migration_rate: float, ploidy: int) -> float:
    """Approximate the expected segregating sites per base under the island model.

    Watterson: ``E[S] = μ L 2 T₂ a_n``, ``a_n = Σ_{i<n} 1/i``. With ``D`` islands of ``N``
    of ploidy ``k`` and migration ``m``, a pair coalesces after ``D k N`` generations from
    one island, ``D k N + 1 / (2 m)`` from two. The smaller of the fast-migration estimate
    (one tree, ``T₂`` averaged over pairs) and the slow one (``D`` island trees joined by
    one of ``D`` lineages) is used; ``_simulate`` makes up a shortfall.
    """

    def harmonic(n: float) -> float:
        return float(np.sum(1.0 / np.arange(1, max(int(n), 2))))

    within = n_populations * ploidy * POPULATION_SIZE
    if n_populations == 1:
        return MUTATION_RATE * 2.0 * within * harmonic(n_nodes)
    between = within + 1.0 / (2.0 * migration_rate)
    pairs = (within + (n_populations - 1) * between) / n_populations
    fast = 2.0 * pairs * harmonic(n_nodes)
    slow = (n_populations * 2.0 * ploidy * POPULATION_SIZE * harmonic(n_nodes / n_populations)
            + 2.0 * between * harmonic(n_populations))
    return MUTATION_RATE * min(fast, slow)


def _segregating_sites(ts: Any) -> np.ndarray:
    """Return the ids of sites that vary among the samples and have a position > 0."""
    import tskit

    site_ids = np.arange(ts.num_sites)
    n_mutations = np.bincount(ts.tables.mutations.site, minlength=ts.num_sites)
    keep = n_mutations > 0
    # one mutation on a branch of a coalesced tree always segregates; recurrent or back
    # mutations (binary model) may not, so decode those few sites
    variant = tskit.Variant(ts)
    for site in np.flatnonzero(n_mutations > 1):
        variant.decode(int(site))
        genotypes = variant.genotypes
        keep[site] = bool((genotypes != genotypes[0]).any())
    keep &= ts.tables.sites.position > 0  # VCF positions are 1-based; tskit's can be 0
    return site_ids[keep]


def _concatenate(pieces: list[Any]) -> Any:
    """Join tree sequences that share their sample nodes end to end, as unlinked segments:
    ``tskit.TreeSequence.concatenate(..., add_populations=False)``, linear in the pieces."""
    if len(pieces) == 1:
        return pieces[0]
    tables = pieces[0].dump_tables()
    n_samples = pieces[0].num_samples
    tables.sequence_length = sum(ts.sequence_length for ts in pieces)
    offset = pieces[0].sequence_length
    for ts in pieces[1:]:
        assert (ts.samples() == np.arange(n_samples)).all()  # msprime numbers samples first
        t = ts.tables
        node_map = np.arange(ts.num_nodes, dtype=np.int32)
        node_map[n_samples:] = tables.nodes.num_rows + np.arange(ts.num_nodes - n_samples)
        nodes, edges, sites, muts = t.nodes, t.edges, t.sites, t.mutations
        tables.nodes.append_columns(
            flags=nodes.flags[n_samples:], time=nodes.time[n_samples:],
            population=nodes.population[n_samples:], individual=nodes.individual[n_samples:],
        )
        tables.edges.append_columns(left=edges.left + offset, right=edges.right + offset,
                                    parent=node_map[edges.parent], child=node_map[edges.child])
        site_base, mutation_base = tables.sites.num_rows, tables.mutations.num_rows
        tables.sites.append_columns(position=sites.position + offset,
                                    ancestral_state=sites.ancestral_state,
                                    ancestral_state_offset=sites.ancestral_state_offset)
        tables.mutations.append_columns(
            site=muts.site + site_base, node=node_map[muts.node], time=muts.time,
            derived_state=muts.derived_state, derived_state_offset=muts.derived_state_offset,
            parent=np.where(muts.parent >= 0, muts.parent + mutation_base, -1).astype(np.int32),
        )
        offset += ts.sequence_length
    tables.sort()
    tables.build_index()
    tables.compute_mutation_parents()
    return tables.tree_sequence()


def _simulate(
    params: dict[str, Any], rng: np.random.Generator, *, progress: bool = False
) -> tuple[Any, dict[str, Any]]:
    """Simulate an island-model tree sequence with exactly ``n_variants`` biallelic sites,
    in unlinked segments of at most ``SEGMENT_LENGTH`` bases (one simulation's cost grows
    about quadratically with its length) until they hold enough; the surplus is deleted."""
    import msprime

    n_variants, n_samples = params["n_variants"], params["n_samples"]
    n_pop, ploidy = params["n_populations"], params["ploidy"]
    demography = msprime.Demography.island_model(
        [POPULATION_SIZE] * n_pop, migration_rate=params["migration_rate"]
    )
    samples = {f"pop_{i}": n_samples // n_pop + (i < n_samples % n_pop) for i in range(n_pop)}
    rate = _sites_per_base(n_samples * ploidy, n_pop, params["migration_rate"], ploidy)
    total = max((1.05 * n_variants + 4.0 * math.sqrt(n_variants) + 10.0) / rate, 10.0)
    n_expected = math.ceil(total / SEGMENT_LENGTH)
    length = math.ceil(total / n_expected)
    pieces: list[Any] = []
    found = 0
    for _ in _progress(range(10 * n_expected + 10), enabled=progress, desc="msprime",
                       total=n_expected, unit="segment"):
        ancestry_seed, mutation_seed = (int(s) for s in rng.integers(1, 2**31 - 1, size=2))
        ts = msprime.sim_ancestry(
            samples, demography=demography, ploidy=ploidy, sequence_length=length,
            recombination_rate=RECOMBINATION_RATE, random_seed=ancestry_seed,
        )
        ts = msprime.sim_mutations(ts, rate=MUTATION_RATE, model=msprime.BinaryMutationModel(),
                                   random_seed=mutation_seed)
        kept = _segregating_sites(ts)[: n_variants - found]
        pieces.append(ts.delete_sites(np.setdiff1d(np.arange(ts.num_sites), kept)))
        found += len(kept)
        logger.debug("segment %d (%d bp): %d of %d sites", len(pieces), length, found, n_variants)
        if found == n_variants:
            break
    else:  # pragma: no cover - needs a 10x misestimate
        raise StraggleError(f"msprime gave {found} < {n_variants} segregating sites in "
                            f"{len(pieces)} segments of {length} bp")
    info = {"population_size": POPULATION_SIZE, "mutation_rate": MUTATION_RATE,
            "recombination_rate": RECOMBINATION_RATE, "segment_length": length,
            "n_segments": len(pieces), "msprime_version": msprime.__version__}
    logger.info("simulated %d segments of %d bp for %d variants", len(pieces), length, n_variants)
    return _concatenate(pieces), info


def _add_missing(group: Any, *, missing_rate: float, bounds: list[tuple[int, int]],
                 seqs: _Seqs, progress: bool) -> None:
    """Set a fraction ``missing_rate`` of calls to -1, chunk by chunk, and update the mask."""
    calls = group["call_genotype"]
    mask = group["call_genotype_mask"] if "call_genotype_mask" in group else None
    n_samples, ploidy = calls.shape[1:]
    chunks = zip(bounds, seqs, strict=True)
    for (start, stop), seq in _progress(chunks, enabled=progress, desc="missing calls",
                                        total=len(bounds)):
        missing = np.random.default_rng(seq).random((stop - start, n_samples)) < missing_rate
        block = calls[start:stop]
        block[missing] = -1
        calls[start:stop] = block
        if mask is not None:
            mask[start:stop] = np.repeat(missing[:, :, None], ploidy, axis=2) | (block < 0)


def _write_filters(group: Any, n_variants: int, chunk_rows: int) -> None:
    """Write ``filter_id``, ``filter_description`` and ``variant_filter``, every variant
    PASS (bio2zarr writes none from a tree sequence; ``pass_only`` needs them)."""
    for name, text in (("filter_id", "PASS"), ("filter_description", "All filters passed")):
        member = group.create_array(name, data=np.array([text], dtype=np.dtypes.StringDType()),
                                    chunks=(1,))
        member.attrs["_ARRAY_DIMENSIONS"] = ["filters"]
    member = group.create_array("variant_filter", shape=(n_variants, 1), dtype=bool,
                                chunks=(chunk_rows, 1), fill_value=False)
    member[:] = True
    member.attrs["_ARRAY_DIMENSIONS"] = ["variants", "filters"]
    member.attrs["description"] = "Filters applied to each variant (all PASS: simulated)"


def make_genotypes(
    out: str | os.PathLike[str],
    *,
    n_variants: int = 20_000,
    n_samples: int = 300,
    n_populations: int = 3,
    migration_rate: float = 1e-4,
    ploidy: int = 2,
    chunk_rows: int = 5_000,
    missing_rate: float = 0.0,
    seed: int = 0,
    overwrite: bool = False,
    progress: bool = False,
) -> Path:
    """Simulate structured genotypes with msprime and write them as VCF Zarr (bio2zarr).

    A symmetric island model of ``n_populations`` islands of ``POPULATION_SIZE`` (10 000),
    recombination and mutation rates 1e-8 per base per generation, binary mutation model
    (every site biallelic), simulated as unlinked segments of at most 2 Mb until they hold
    ``n_variants`` segregating sites; exactly ``n_variants`` variants, on contig ``"1"``.

    Parameters
    ----------
    out : str or os.PathLike
        Directory of the VCF Zarr store to write (Zarr format 2, as bio2zarr writes
        by default; parents are created). The binary model's alleles ``0`` and ``1`` are
        named ``A`` (REF) and ``T`` (ALT): plink reads an allele ``0`` as missing, so the
        ``.eigenvec.allele`` of a PCA of the store works with ``plink2 --score``. A path
        ending in ``.bed`` writes the same calls as a PLINK 1 fileset instead (``.bed``,
        ``.bim`` and ``.fam`` with that prefix; ploidy 2 only): A1 is the ALT allele, every
        variant has a unique id, ``CHROM:POS:REF:ALT`` (``:2``, ... on a repeat; plink2 needs
        unique ids to LD-prune), and the ``.fam``'s family id is the sample's island
        (``pop_0``, ...).
    n_variants : int, default=20_000
        Variants (rows of the genotype matrix).
    n_samples : int, default=300
        Individuals, split as evenly as possible over the islands (the first
        ``n_samples % n_populations`` islands get one more).
    n_populations : int, default=3
        Islands; 1 gives a single panmictic population.
    migration_rate : float, default=1e-4
        msprime per-generation migration rate between each pair of islands (the scaled
        rate ``4 N m`` is 4 at the default). Hudson's F_ST is ``1 / (1 + 2 m D k N)``,
        about 0.077 with the defaults (``D`` islands, ploidy ``k``, ``N`` = 10 000).
    ploidy : int, default=2
        Ploidy of the individuals (1 to 16).
    chunk_rows : int, default=5_000
        Variants per Zarr chunk; the samples are one chunk up to 10 000 of them.
    missing_rate : float, default=0.0
        Fraction of calls (whole calls, all ploidy entries) set to -1 after conversion,
        to emulate missing data (msprime simulates none); ``call_genotype_mask`` is set to
        match.
    seed : int, default=0
        Seed of ``np.random.SeedSequence``: msprime's seeds come from its first child,
        the missing calls of variant chunk ``i`` from child ``i + 1``.
    overwrite, progress : bool, default=False
        As :func:`make_logistic` (the progress bars are bio2zarr's and one over chunks).

    Returns
    -------
    path : pathlib.Path
        The absolute path of the store (of the ``.bed`` file for a fileset). Beside
        bio2zarr's arrays (``call_genotype`` (variants, samples, ploidy) int8,
        ``call_genotype_mask``, ``sample_id``, ``variant_position``, ...) the store holds
        ``sample_population`` (samples,) with the island name (``"pop_0"``, ...) of each
        sample, ``variant_filter`` (variants, filters) with ``filter_id`` ``["PASS"]``
        (every variant passes), and group attrs ``daskstraggle_dataset``, ``params``,
        ``seed`` and ``simulation``.

    Raises
    ------
    InvalidParameterError
        If a parameter is invalid, ``out`` names no store ('', '.') or lies inside a Zarr
        store, or the dataset would not fit the free disk space (before compression) or
        a chunk being drawn the available memory (nothing is written).
    OutputExistsError
        If ``out`` exists and ``overwrite`` is False.
    OutputNotWritableError
        If the folder of ``out`` cannot be written.
    ImportError
        If msprime or bio2zarr is not installed (``pip install 'daskstraggle[genomics]'``).

    References
    ----------
    .. [1] F. Baumdicker et al., "Efficient ancestry and mutation simulation with
       msprime 1.0", Genetics 220(3), 2022.
    .. [2] E. Czech et al., "Analysis-ready VCF at Biobank scale using Zarr", bioRxiv
       2024 (VCF Zarr; bio2zarr, https://github.com/sgkit-dev/bio2zarr).

    Examples
    --------
    >>> import tempfile
    >>> path = make_genotypes(tempfile.mkdtemp() + "/g.vcz", n_variants=100,
    ...                       n_samples=30)  # doctest: +SKIP
    """
    caller = "make_genotypes"
    params: dict[str, Any] = _check_ints(
        {"n_variants": n_variants, "n_samples": n_samples, "n_populations": n_populations,
         "migration_rate": check_positive(migration_rate, name="migration_rate", caller=caller),
         "ploidy": check_int(ploidy, name="ploidy", caller=caller, low=1, high=16),
         "chunk_rows": chunk_rows,
         "missing_rate": _check_fraction(missing_rate, name="missing_rate", caller=caller),
         "seed": seed},
        caller, n_variants="--size", n_samples="--features", n_populations="--populations",
        chunk_rows="--chunk-rows", seed="--seed")
    if params["n_samples"] < params["n_populations"]:
        raise InvalidParameterError(
            f"The 'n_samples' parameter of {caller} must be an int >= {params['n_populations']} "
            f"(n_populations). Got {n_samples!r} instead. Every population needs a sample "
            "(CLI: --features, --populations)."
        )
    path, overwrite, progress = _check_out(out, caller=caller, overwrite=overwrite,
                                           progress=progress, fileset=True)
    # the calls as int8 (compressed on disk); the simulation holds int64s per sample node
    chunk = min(params["chunk_rows"], params["n_variants"])
    nodes = params["n_samples"] * params["ploidy"]
    _check_fits(path, caller=caller, store_bytes=float(params["n_variants"]) * nodes,
                chunk_bytes=8.0 * (chunk + 1) * nodes,
                sizes=f"{params['n_variants']} variants of {params['n_samples']} samples of "
                      f"ploidy {params['ploidy']}, {chunk} variants per chunk")
    bed = path.suffix.lower() == ".bed"
    if bed and params["ploidy"] != 2:
        raise InvalidParameterError(
            f"The 'ploidy' parameter of make_genotypes must be 2 for a PLINK .bed output "
            f"({str(path)!r}): a .bed holds diploid calls. Got {ploidy!r} instead; write a VCF "
            "Zarr store (a path not ending in .bed) for other ploidies."
        )
    try:
        import bio2zarr.tskit
        import msprime  # noqa: F401
        import zarr
    except ImportError as err:
        raise ImportError(
            f"make_genotypes needs msprime and bio2zarr ({err}); install them with "
            "pip install 'daskstraggle[genomics]'"
        ) from err

    global_seq, bounds, chunk_seqs = _streams(params["seed"], params["n_variants"], chunk)
    ts, simulation = _simulate(params, np.random.default_rng(global_seq), progress=progress)
    mapping = ts.map_to_vcf_model()
    # bio2zarr sample i is row i of the mapping; its population is that of its first node
    node_population = ts.tables.nodes.population[mapping.individuals_nodes[:, 0]]
    names = np.array([ts.population(p).metadata["name"] for p in range(ts.num_populations)])
    populations = names[node_population]

    with _staged(_targets(path), overwrite=overwrite) as staging:
        store = staging / ("calls.vcz" if bed else path.name)
        bio2zarr.tskit.convert(
            ts, store, model_mapping=mapping, variants_chunk_size=chunk,
            samples_chunk_size=min(params["n_samples"], MAX_SAMPLES_CHUNK),
            show_progress=progress, zarr_format=2,
        )
        group = zarr.open_group(store, mode="r+")
        sample_chunks = cast("zarr.Array", group["sample_id"]).chunks
        member = group.create_array("sample_population", chunks=sample_chunks,
                                    data=populations.astype(np.dtypes.StringDType()))
        member.attrs["_ARRAY_DIMENSIONS"] = ["samples"]
        member.attrs["description"] = "Simulated population (island) of each sample"
        _name_alleles(group, {"0": "A", "1": "T"})
        _write_filters(group, params["n_variants"], chunk)
        if params["missing_rate"] > 0:
            _add_missing(group, missing_rate=params["missing_rate"], bounds=bounds,
                         seqs=chunk_seqs, progress=progress)
        group.attrs.update({"daskstraggle_dataset": "genotypes", "params": params,
                            "seed": params["seed"], "simulation": simulation})
        if bed:
            from daskstraggle.data._bed_writer import write_bed

            write_bed(store, staging / Path(path.name).with_suffix(""), family=populations)
    logger.info("wrote genotypes (%d variants x %d samples) to %s",
                params["n_variants"], params["n_samples"], path)
    return path


def _name_alleles(group: Any, names: dict[str, str]) -> None:
    """Rename the alleles of ``variant_allele`` in place by ``names`` (others kept)."""
    member = group["variant_allele"]
    alleles = np.asarray(member[:], dtype=object)
    renamed = np.vectorize(lambda allele: names.get(str(allele), allele), otypes=[object])
    member[:] = renamed(alleles).astype(member.dtype)


# --------------------------------------------------------------------------- registry
DATASETS: dict[str, Callable[..., Path]] = {
    "genotypes": make_genotypes,
    "logistic": make_logistic,
    "linear": make_linear,
}


def make_dataset(name: str, out: str | os.PathLike[str], **params: Any) -> Path:
    """Write the dataset recipe ``name`` (a key of :data:`DATASETS`) to ``out``, with the
    recipe's keyword arguments ``params``; return the store's absolute path.

    Raises
    ------
    InvalidParameterError
        If ``name`` is not a recipe, a parameter is unknown to it or invalid.
    OutputExistsError
        If ``out`` exists and ``overwrite`` is not True.

    Examples
    --------
    >>> import tempfile
    >>> make_dataset("linear", tempfile.mkdtemp() + "/lin.zarr", n_samples=100).name
    'lin.zarr'
    """
    check_choice(name, name="name", caller="make_dataset", choices=sorted(DATASETS))
    recipe = DATASETS[name]
    accepted = [p for p in inspect.signature(recipe).parameters if p != "out"]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise InvalidParameterError(
            f"The 'params' parameter of make_dataset must hold only parameters of "
            f"{recipe.__name__}: {accepted}. Got unknown {unknown} instead."
        )
    return recipe(out, **params)
