"""Genotype matrices: quality control of variants before a run (:class:`GenotypeQC`), per-variant
tables, allele-count checks. The kept variants are a selection of the store's rows (no
copy), recorded in a :class:`QCReport`."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from daskstraggle._numba import import_numba_module
from daskstraggle._validation import check_bool, check_int
from daskstraggle.data._zarr import GroupArrays, fsspec_options, group_arrays, read_selection
from daskstraggle.data.kinship import check_king_cutoff, king_keep
from daskstraggle.data.ld import LDPrune, ld_prune_keep, parse_ld_prune
from daskstraggle.data.sources import GenotypeRowSource, RowSource
from daskstraggle.errors import InvalidDataError, InvalidParameterError, StraggleWarning

if TYPE_CHECKING:
    from daskstraggle.data.matrix import Matrix

__all__ = [
    "GenotypeQC",
    "QCReport",
    "VariantTable",
    "check_not_allele_counts",
    "drop_no_calls",
    "filter_variants",
    "matrix_after_run",
    "parse_genotype_dims",
    "parse_qc",
    "parse_region",
]

#: The two orientations a 2-D array of allele counts can have.
GENOTYPE_DIMS = (("variants", "samples"), ("samples", "variants"))

_NUMBER = r"\d[\d,_]*"
_REGION = re.compile(rf"^(?P<contig>[^\s]+?)(?::(?P<start>{_NUMBER})-(?P<end>{_NUMBER})?)?$")


# ---------------------------------------------------------------------------- QC
@dataclass(frozen=True, slots=True)
class Region:
    """A genomic interval: ``contig`` from ``start`` to ``end``, 1-based and inclusive."""

    contig: str
    start: int = 1
    end: int | None = None

    def __str__(self) -> str:
        """``contig`` or ``contig:start-end``."""
        if self.start == 1 and self.end is None:
            return self.contig
        return f"{self.contig}:{self.start}-{'' if self.end is None else self.end}"


def parse_region(text: object, *, caller: str = "GenotypeQC") -> Region:
    """Parse ``"CONTIG"``, ``"CONTIG:START-END"`` or ``"CONTIG:START-"`` (1-based, inclusive;
    thousands separators allowed: ``chr1:1,000,000-2,000,000``); ``caller`` is named in errors.

    Raises
    ------
    InvalidParameterError
        If ``text`` is not such a region, or ``END < START``.
    """
    match = _REGION.match(text) if isinstance(text, str) else None
    bounds: tuple[int, int | None] = (1, None)
    if match is not None and match["start"] is not None:
        start = int(re.sub("[,_]", "", match["start"]))
        end = None if match["end"] is None else int(re.sub("[,_]", "", match["end"]))
        bounds = (start, end)
        if start < 1 or (end is not None and end < start):
            match = None
    if match is None:
        raise InvalidParameterError(
            f"The 'region' parameter of {caller} (CLI: --region) must be 'CONTIG' or "
            f"'CONTIG:START-END' with 1 <= START <= END (1-based, inclusive), e.g. "
            f"'chr1:1000000-2000000'. Got {text!r} instead."
        )
    return Region(match["contig"], *bounds)


def _check_threshold(value: object, *, name: str, caller: str, high: float) -> float | None:
    if value is None:
        return None
    if isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool) \
            and 0.0 <= float(value) <= high:  # NaN fails
        return float(value)
    raise InvalidParameterError(
        f"The {name!r} parameter of {caller} must be a number in [0, {high:g}] or None. "
        f"Got {value!r} instead."
    )


#: GenotypeQC's fields in order: their CLI flag and check, ``check(value, name=, caller=)``
#: returning the normalised value.
_FIELDS: dict[str, tuple[str, Callable[..., Any]]] = {
    "min_maf": ("--min-maf", partial(_check_threshold, high=0.5)),
    "max_missing": ("--max-missing", partial(_check_threshold, high=1.0)),
    "pass_only": ("--pass-only", check_bool),
    "region": ("--region", lambda v, **_: None if v is None else str(parse_region(v))),
    "max_alleles": ("--max-alleles", lambda v, **kw: v if v is None else check_int(v, low=1, **kw)),
    "snps_only": ("--snps-only", check_bool),
    "hwe": ("--hwe", partial(_check_threshold, high=1.0)),
    "max_sample_missing": ("--mind", partial(_check_threshold, high=1.0)),
    "king_cutoff": ("--king-cutoff", lambda v, **_: check_king_cutoff(v)),
    "ld_prune": ("--ld-prune", lambda v, **_: parse_ld_prune(v)),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class GenotypeQC:
    """Which variants a genotype PCA uses: the usual quality control before PCA.

    A variant is kept when it passes every step given. Frequencies and missingness are
    those of the matrix's samples, counted over the non-missing calls.

    Parameters
    ----------
    min_maf : float or None, default=None
        Smallest minor allele frequency kept, in [0, 0.5] (plink's ``--maf``): ``min(p, 1 -
        p)``, ``p`` the mean called dosage over the ploidy. A variant with no call is removed.
    max_missing : float or None, default=None
        Largest fraction of missing calls kept, in [0, 1] (plink's ``--geno``).
    pass_only : bool, default=False
        Keep only variants whose FILTER is PASS (``variant_filter`` at ``filter_id``
        ``"PASS"``, as bio2zarr writes them).
    region : str or None, default=None
        ``"CONTIG"`` or ``"CONTIG:START-END"`` (1-based, inclusive, as samtools and
        bcftools), on ``variant_contig`` and ``variant_position``.
    max_alleles : int or None, default=None
        Most alleles (REF and ALTs, the non-empty ``variant_allele``) a kept variant has
        (plink2's ``--max-alleles``): 2 keeps biallelic sites only.
    snps_only : bool, default=False
        Keep only variants whose every allele is one character (no indels, no ``<DEL>``),
        as plink2's ``--snps-only``.
    hwe : float or None, default=None
        Smallest Hardy-Weinberg exact test p-value kept, in [0, 1], as plink2's ``--hwe``
        without mid-p (:mod:`daskstraggle.data.hwe`). Diploid calls only.
    max_sample_missing : float or None, default=None
        Largest fraction of missing calls a kept *sample* has, in [0, 1], over the
        variants the steps above kept (plink's ``--mind``); the variant counts are then
        those of the kept samples. A sample with every call missing is removed even at 1,
        with a warning.
    king_cutoff : float or None, default=None
        Remove one sample of each pair whose KING-robust kinship exceeds this, in
        (0, 0.5], as plink2's ``--king-cutoff`` (:mod:`daskstraggle.data.kinship`), over
        the variants the steps above kept. Diploid calls only.
    ld_prune : LDPrune, str, tuple or None, default=None
        LD pruning after every other step, as plink2's ``--indep-pairwise WINDOW STEP R2``
        (window in variants): ``"50,5,0.2"``, ``(50, 5, 0.2)`` or an
        :class:`~daskstraggle.data.ld.LDPrune`; keeps plink2's ``.prune.in``.

    Raises
    ------
    InvalidParameterError
        If a value is out of range (one line naming the parameter and its CLI flag).

    Examples
    --------
    >>> GenotypeQC(min_maf=0.05, region="1:1-2,000,000").to_dict()["region"]
    '1:1-2000000'
    """

    min_maf: float | None = None
    max_missing: float | None = None
    pass_only: bool = False
    region: str | None = None
    max_alleles: int | None = None
    snps_only: bool = False
    hwe: float | None = None
    max_sample_missing: float | None = None
    king_cutoff: float | None = None
    ld_prune: LDPrune | None = None

    def __post_init__(self) -> None:
        """Check and normalise every field."""
        for name, (flag, check) in _FIELDS.items():
            value = check(getattr(self, name), name=name, caller=f"GenotypeQC (CLI: {flag})")
            object.__setattr__(self, name, value)

    @property
    def needs_counts(self) -> bool:
        """Whether a pass over the genotypes is needed (MAF, missingness, HWE, samples'
        missingness, kinship, LD pruning): run on the workers, once the runtime is up."""
        return not self.count_steps().is_empty

    @property
    def counts_variants(self) -> bool:
        """Whether the per-variant counting pass is needed (MAF, missingness, HWE)."""
        return self.min_maf is not None or self.max_missing is not None or self.hwe is not None

    @property
    def is_empty(self) -> bool:
        """Whether every variant is kept."""
        return not self.given()

    def site_steps(self) -> GenotypeQC:
        """The steps that read only per-variant arrays (region, FILTER, alleles)."""
        return GenotypeQC(**{k: v for k, v in self.given().items() if k in _SITE_FIELDS})

    def count_steps(self) -> GenotypeQC:
        """The steps that need a pass over the genotypes (:attr:`needs_counts`)."""
        return GenotypeQC(**{k: v for k, v in self.given().items() if k not in _SITE_FIELDS})

    def to_dict(self) -> dict[str, Any]:
        """Return the parameters as a dict (``GenotypeQC(**d)`` rebuilds it)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**out, "ld_prune": None if self.ld_prune is None else str(self.ld_prune)}

    def given(self) -> dict[str, Any]:
        """The parameters of the steps given (not None or False), as they are (an
        ``ld_prune`` stays an :class:`LDPrune`: its text rounds ``r2``)."""
        return {f.name: v for f in fields(self)
                if (v := getattr(self, f.name)) is not None and v is not False}


def parse_qc(qc: object, *, caller: str) -> GenotypeQC | None:
    """Return ``qc`` (a GenotypeQC, a dict of its parameters or None) as a GenotypeQC, or
    None when it is None or empty.

    Raises
    ------
    InvalidParameterError
        If ``qc`` is of another type, has unknown keys or bad values.
    """
    if qc is None or isinstance(qc, GenotypeQC):
        return None if qc is None or qc.is_empty else qc
    if isinstance(qc, Mapping):
        known = tuple(f.name for f in fields(GenotypeQC))
        unknown = sorted(str(k) for k in qc if k not in known)
        if unknown:
            raise InvalidParameterError(
                f"The 'qc' parameter of {caller} must hold only {list(known)}. Got unknown "
                f"{unknown} instead."
            )
        return parse_qc(GenotypeQC(**qc), caller=caller)
    raise InvalidParameterError(
        f"The 'qc' parameter of {caller} must be a GenotypeQC, a dict of its parameters "
        f"({', '.join(f.name for f in fields(GenotypeQC))}) or None. Got {qc!r} instead."
    )


@dataclass(frozen=True, slots=True)
class QCReport:
    """What quality control kept: a mask over the input's variants and counts per step.

    Attributes
    ----------
    qc : GenotypeQC
        The steps applied.
    kept : ndarray of bool of shape (n_variants,)
        Variants of the input (after the user's own selection) that the matrix holds.
    removed : dict of str to int
        Variants each step removed, in the order applied (``region``, ``pass``,
        ``alleles``, ``snps``, ``missing``, ``hwe``, ``maf``, ``ld``); a variant is counted
        by the first step that removed it.
    samples_kept : ndarray of bool of shape (n_samples,) or None
        The input's samples the matrix holds (``max_sample_missing``, ``king_cutoff``);
        None: all.
    samples_removed : dict of str to int
        Samples each step removed (``mind``, ``king``, ``no call``).
    no_call : dict or None
        ``{"samples": [...], "variants": [...]}``: the columns and rows of the matrix before
        that step that had no called genotype (:func:`drop_no_calls`); None: none.
    """

    qc: GenotypeQC
    kept: np.ndarray
    removed: dict[str, int] = field(default_factory=dict)
    samples_kept: np.ndarray | None = None
    samples_removed: dict[str, int] = field(default_factory=dict)
    no_call: dict[str, list[int]] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable summary (no mask)."""
        out = {**self.qc.to_dict(), "n_variants": int(self.kept.size),
               "n_kept": int(self.kept.sum()), "removed": dict(self.removed)}
        if self.samples_kept is not None:
            out.update(n_samples=int(self.samples_kept.size),
                       n_samples_kept=int(self.samples_kept.sum()),
                       samples_removed=dict(self.samples_removed))
        if self.no_call is not None:
            out["no_call"] = {k: list(v) for k, v in self.no_call.items()}
        return out


def check_qc_applies(matrix: Matrix, qc: GenotypeQC | None) -> None:
    """Refuse quality-control steps for a matrix that is not genotypes (one line, before
    any work).

    Raises
    ------
    InvalidParameterError
        If ``qc`` has a step and ``matrix`` does not hold genotypes.
    """
    if qc is not None and not qc.is_empty and not isinstance(matrix.source,
                                                              GenotypeRowSource):
        raise InvalidParameterError(
            f"The 'qc' parameter (CLI: {', '.join(flag for flag, _ in _FIELDS.values())}) "
            "applies to genotypes (a VCF Zarr store or Dataset, or allele counts with "
            f"genotype_dims); the matrix is {matrix.kind}. Drop it."
        )


def filter_variants(matrix: Matrix, qc: GenotypeQC | None, *, client: Any = None) -> Matrix:
    """Return the genotype matrix restricted to the variants that pass ``qc``.

    Parameters
    ----------
    matrix : Matrix
        A genotype matrix (rows = variants). One already filtered keeps its report: the
        new steps apply to its variants and the mask stays over the original input.
    qc : GenotypeQC or None
        The quality control (None: the matrix as it is).
    client : distributed.Client or None, default=None
        Where the passes over the genotypes run, one task per partition; None: in process.

    Returns
    -------
    matrix : Matrix
        The kept variants (a selection of the same store: nothing is copied), with
        ``attrs["qc"]`` a :class:`QCReport`.

    Raises
    ------
    InvalidParameterError
        If the matrix is not genotypes, or a step needs an array the data lacks.
    InvalidDataError
        If no variant passes.
    """
    if qc is None or qc.is_empty:
        return matrix
    check_qc_applies(matrix, qc)
    removed: dict[str, int] = {}
    samples_removed: dict[str, int] = {}
    keep = _site_keep(matrix, qc, removed)
    current = matrix.select_rows(np.flatnonzero(keep)) if not keep.all() else matrix
    samples = None
    if keep.any() and (qc.counts_variants or qc.max_sample_missing is not None):
        current, samples = _count_steps(current, qc, keep, removed, samples_removed, client)
    if keep.any() and qc.king_cutoff is not None:
        unrelated, _ = king_keep(current, qc.king_cutoff, client=client)
        samples_removed["king"] = int((~unrelated).sum())
        current = _keep_columns(current, unrelated)
        samples = _compose(np.ones(matrix.n_columns, dtype=bool) if samples is None
                           else samples, unrelated)
    if keep.any() and qc.ld_prune is not None:
        pruned = ld_prune_keep(current, qc.ld_prune, client=client)
        removed["ld"] = int((~pruned).sum())
        current = _drop_rows(current, keep, pruned)
    return _with_report(matrix, current, qc, keep, removed, samples, samples_removed)


def no_call_subject(matrix: Matrix, samples: np.ndarray, variants: np.ndarray) -> str:
    """``"2 sample(s) (first: ['a', 'b']) and 1 variant(s) (first: ['v3']) have"``, naming
    only what there is (ids when the matrix has them, else indices)."""
    parts = []
    ids = None if matrix.variants is None else matrix.variants.get("variant_id")
    for what, index, names in (("sample", samples, matrix.columns),
                               ("variant", variants, None if ids is None else _strings(ids))):
        if index.size:
            first = names[index[:3]].tolist() if names is not None else index[:3].tolist()
            parts.append(f"{index.size} {what}(s) (first: {first})")
    return " and ".join(parts) + " have"


def matrix_after_run(matrix: Matrix, result: Any) -> Matrix:
    """The matrix a run of ``matrix`` fitted: without the samples and variants it found
    with no call (``result.attrs["no_call"]``), else ``matrix`` itself."""
    removed = result.attrs.get("no_call")
    if not removed:
        return matrix
    return drop_no_calls(matrix, removed["samples"], removed["variants"], warn=False)


def drop_no_calls(matrix: Matrix, samples: np.ndarray, variants: np.ndarray, *,
                  warn: bool = True) -> Matrix:
    """Return ``matrix`` without the samples (columns) and variants (rows) ``samples`` and
    ``variants`` that have no called genotype, recorded in its :class:`QCReport` as the step
    ``"no call"``; with ``warn``, a :class:`~daskstraggle.errors.StraggleWarning` names the
    first of them.

    ``fit_pca`` calls it when the run's load finds such samples or variants
    (:class:`~daskstraggle.errors.NoCallError`): they would be scored 0. Their centred
    column or row is zero, so removing them changes nothing else.
    """
    samples = np.asarray(samples, dtype=np.int64)
    variants = np.asarray(variants, dtype=np.int64)
    keep_columns = ~np.isin(np.arange(matrix.n_columns), samples)
    keep_rows = ~np.isin(np.arange(matrix.n_rows), variants)
    out = _keep_columns(matrix, keep_columns)
    out = out if keep_rows.all() else out.select_rows(np.flatnonzero(keep_rows))
    if warn:
        warnings.warn(f"{no_call_subject(matrix, samples, variants)} no called genotype; "
                      "removed, rather than scored 0.", StraggleWarning, stacklevel=3)
    previous = matrix.attrs.get("qc")
    qc = previous.qc if isinstance(previous, QCReport) else GenotypeQC()
    return _with_report(matrix, out, qc, keep_rows, {"no call": int(variants.size)},
                        keep_columns if samples.size else None,
                        {"no call": int(samples.size)} if samples.size else {},
                        {"samples": samples.tolist(), "variants": variants.tolist()})


#: The steps on per-variant arrays, in the order applied: the name :class:`QCReport`
#: counts them under, their GenotypeQC field, and the mask they keep given the variants'
#: table and the field's value.
_SITE_STEPS: tuple[tuple[str, str, Callable[[VariantTable, Any], np.ndarray]], ...] = (
    ("region", "region", lambda table, region: _in_region(table, region)),
    ("pass", "pass_only", lambda table, _: _passes_filter(table)),
    ("alleles", "max_alleles",
     lambda table, limit: (_alleles(table, "max_alleles") != "").sum(axis=1) <= limit),
    ("snps", "snps_only", lambda table, _: _single_bases(_alleles(table, "snps_only"))),
)
_SITE_FIELDS = tuple(field for _, field, _ in _SITE_STEPS)


def _apply_steps(keep: np.ndarray, steps: Sequence[tuple[str, Callable[[], np.ndarray]]],
                 removed: dict[str, int]) -> np.ndarray:
    """``keep`` and-ed with each step's mask in turn; ``removed[name]`` counts the variants
    each step removed first."""
    for name, step in steps:
        ok = step()
        removed[name] = int((keep & ~ok).sum())
        keep &= ok
    return keep


def _site_keep(matrix: Matrix, qc: GenotypeQC, removed: dict[str, int]) -> np.ndarray:
    """The steps on per-variant arrays (:data:`_SITE_STEPS`): the mask they keep."""
    table = matrix.variants
    steps = [(name, partial(lambda f, test: test(_need(table, f), getattr(qc, f)), field, test))
             for name, field, test in _SITE_STEPS if field in qc.given()]
    return _apply_steps(np.ones(matrix.n_rows, dtype=bool), steps, removed)


def _count_steps(current: Matrix, qc: GenotypeQC, keep: np.ndarray, removed: dict[str, int],
                 samples_removed: dict[str, int],
                 client: Any) -> tuple[Matrix, np.ndarray | None]:
    """``--mind``, then missingness, HWE and MAF over the samples it keeps, from one
    counting pass (a second, over the removed samples' columns or the kept ones, whichever
    are fewer, only when ``--mind`` removes some). Record in ``keep`` the variants kept;
    return the matrix and the mask over ``current``'s samples (None: no ``--mind``)."""
    source = current.source
    assert isinstance(source, GenotypeRowSource)
    if qc.hwe is not None and source.ploidy != 2:
        raise InvalidParameterError(
            "The 'hwe' parameter (CLI: --hwe) tests diploid genotypes; these calls have "
            f"ploidy {source.ploidy}. Drop it."
        )
    counts = call_counts(current, client=client)
    samples = None
    if qc.max_sample_missing is not None:
        samples = _mind_keep(current, counts.sample_missing / max(1, current.n_rows),
                             qc.max_sample_missing)
        samples_removed["mind"] = int((~samples).sum())
        if not samples.all():
            counts = _kept_counts(current, counts, samples, client)
            current = _keep_columns(current, samples)
    return _drop_rows(current, keep, _count_keep(counts, qc, removed)), samples


def _kept_counts(matrix: Matrix, counts: CallCounts, kept: np.ndarray,
                 client: Any) -> CallCounts:
    """``counts`` restricted to the samples ``kept``: minus the removed samples' counts, or
    counted again over the kept ones when those are fewer (one pass either way)."""
    gone = np.flatnonzero(~kept)
    if gone.size < kept.sum():
        return counts.without(call_counts(matrix.select_columns(gone), client=client), kept)
    return call_counts(matrix.select_columns(np.flatnonzero(kept)), client=client)


def _count_keep(counts: CallCounts, qc: GenotypeQC, removed: dict[str, int]) -> np.ndarray | None:
    """The counting pass's variant steps (missingness, HWE, MAF): the mask of the counted
    rows they keep (None: no such step)."""
    if not qc.counts_variants:
        return None
    called, maf = counts.call_rate(), counts.maf()
    tests: list[tuple[str, float | None, Callable[[float], np.ndarray]]] = [
        ("missing", qc.max_missing, lambda t: 1.0 - called <= t + 1e-12),
        ("hwe", qc.hwe, lambda t: counts.hwe_p() >= t),
        ("maf", qc.min_maf, lambda t: np.nan_to_num(maf, nan=-1.0) >= t - 1e-12)]
    steps = [(name, partial(test, value)) for name, value, test in tests if value is not None]
    return _apply_steps(np.ones(called.size, dtype=bool), steps, removed)


def _drop_rows(current: Matrix, keep: np.ndarray, inner: np.ndarray | None) -> Matrix:
    """Record in ``keep`` (over the input) which of ``current``'s rows ``inner`` keeps;
    return the matrix of those rows (``current`` when None: no such step)."""
    if inner is None:
        return current
    keep[np.flatnonzero(keep)] = inner
    return current if inner.all() else current.select_rows(np.flatnonzero(inner))


def _keep_columns(current: Matrix, kept: np.ndarray) -> Matrix:
    """The matrix of ``current``'s samples ``kept`` (a mask)."""
    return current if kept.all() else current.select_columns(np.flatnonzero(kept))


def _mind_keep(matrix: Matrix, missing: np.ndarray, limit: float) -> np.ndarray:
    """The mask of the samples with at most ``limit`` of their calls missing (``missing``:
    each sample's fraction), never one with every call missing (removed with a warning)."""
    passing = missing <= limit + 1e-12
    dead = (missing >= 1.0) & passing  # those --mind removes are not named
    kept = passing & ~dead
    if dead.any():
        names = (matrix.columns[dead][:5].tolist() if matrix.columns is not None
                 else np.flatnonzero(dead)[:5].tolist())
        warnings.warn(
            f"{int(dead.sum())} sample(s) have no called genotype at the variants kept "
            f"(first: {names}); removed, rather than scored 0.", StraggleWarning, stacklevel=5)
    if not kept.any():
        raise InvalidDataError(
            f"No sample passes max_sample_missing={limit:g} (CLI: --mind): the least missing "
            f"has {float(missing.min()):.3g} of its calls missing. Loosen it."
        )
    return kept


def _with_report(original: Matrix, filtered: Matrix, qc: GenotypeQC, keep: np.ndarray,
                 removed: dict[str, int], samples: np.ndarray | None = None,
                 samples_removed: dict[str, int] | None = None,
                 no_call: dict[str, list[int]] | None = None) -> Matrix:
    """Attach the report to ``filtered``, composed with ``original``'s own report (its
    masks and counts stay over the input)."""
    previous = original.attrs.get("qc")
    if isinstance(previous, QCReport):  # a second stage: the mask stays over the input
        qc = GenotypeQC(**{**previous.qc.given(), **qc.given()})
        keep = _compose(previous.kept, keep)
        removed = {**previous.removed, **removed}
        if previous.samples_kept is not None:
            samples = _compose(previous.samples_kept, samples)
        samples_removed = {**previous.samples_removed, **(samples_removed or {})}
        no_call = no_call if no_call is not None else previous.no_call
    report = QCReport(qc, keep, removed, samples, dict(samples_removed or {}), no_call)
    if not keep.any():
        steps = ", ".join(f"{k} removed {v}" for k, v in removed.items())
        raise InvalidDataError(
            f"No variant passes the quality control ({keep.size} variants: {steps}); "
            f"loosen it (min_maf, max_missing, pass_only, region: {qc.to_dict()})."
        )
    return replace(filtered, attrs={**filtered.attrs, "qc": report})


def _compose(first: np.ndarray, second: np.ndarray | None) -> np.ndarray:
    """A mask over the input from a mask and a mask over the first one's kept entries."""
    if second is None:
        return first
    mask = first.copy()
    mask[np.flatnonzero(mask)] = second
    return mask


def _need(table: VariantTable | None, step: str) -> VariantTable:
    if table is None:
        raise InvalidParameterError(
            f"The {step!r} step of the quality control (CLI: --{step.replace('_', '-')}) "
            "needs the variants' contig, position and FILTER: a VCF Zarr store or an "
            "xarray.Dataset in its layout; in-memory allele counts have none. Drop it."
        )
    return table


def _contig_code(names: np.ndarray, contig: str) -> int | None:
    """The index of ``contig`` among the data's contig names: by name, else as plink2
    reads chromosome codes (``22`` finds ``chr22``, ``X`` finds ``chrX`` or ``23``,
    :func:`~daskstraggle.data._contigs.chrom_code`); None when neither matches."""
    from daskstraggle.data._contigs import chrom_code

    found = np.flatnonzero(names == contig)
    if not found.size:
        want = chrom_code(contig)
        found = np.flatnonzero([chrom_code(str(name)) == want for name in names])
    return int(found[0]) if found.size else None


def _in_region(table: VariantTable, text: str | None) -> np.ndarray:
    region = parse_region(text)
    contigs = table.whole("contig_id")
    codes = table.get("variant_contig")
    positions = table.get("variant_position")
    if contigs is None or codes is None or positions is None:
        raise InvalidParameterError(
            "The 'region' parameter (CLI: --region) needs variant_contig, contig_id and "
            "variant_position; the data lacks "
            + ", ".join(n for n, a in (("contig_id", contigs), ("variant_contig", codes),
                                       ("variant_position", positions)) if a is None) + "."
        )
    names = _strings(contigs)
    code = _contig_code(names, region.contig)
    if code is None:
        shown = ", ".join(repr(str(n)) for n in names[:10]) + (", ..." if len(names) > 10 else "")
        if ":" in region.contig:  # not a contig of the data, nor CONTIG:START-END
            raise InvalidParameterError(
                "The 'region' parameter (CLI: --region) must be 'CONTIG' or "
                "'CONTIG:START-END' with whole-number positions, e.g. '1:1000000-2000000'; "
                f"{region.contig!r} is neither (its contigs: {shown})."
            )
        raise InvalidParameterError(
            f"The 'region' parameter (CLI: --region) names contig {region.contig!r}, which "
            f"the data does not have; its contigs: {shown}."
        )
    end = np.iinfo(np.int64).max if region.end is None else region.end
    positions = np.asarray(positions, dtype=np.int64)
    return (np.asarray(codes) == code) & (positions >= region.start) & (positions <= end)


def _alleles(table: VariantTable, step: str) -> np.ndarray:
    """The variants' alleles (variants, slots) as str, ``""`` in unused slots."""
    alleles = table.get("variant_allele")
    if alleles is None:
        raise InvalidParameterError(
            f"The {step!r} parameter (CLI: --{step.replace('_', '-')}) needs variant_allele "
            "(VCF Zarr, a .bed's .bim); the data has none. Drop it."
        )
    return _strings(alleles).reshape(np.shape(alleles)[0], -1)


def _single_bases(alleles: np.ndarray) -> np.ndarray:
    """Per variant, whether every allele it has is one character (plink2's --snps-only)."""
    used = alleles != ""
    lengths = np.frompyfunc(len, 1, 1)(alleles).astype(np.int64)
    return ((lengths == 1) | ~used).all(axis=1) & used.any(axis=1)


def _passes_filter(table: VariantTable) -> np.ndarray:
    filters = table.get("variant_filter")
    names = table.whole("filter_id")
    if filters is None or names is None:
        raise InvalidParameterError(
            "The 'pass_only' parameter (CLI: --pass-only) needs variant_filter and "
            "filter_id (VCF Zarr as bio2zarr writes it from a VCF's FILTER column); the "
            "data has none. Drop it."
        )
    names = _strings(names)
    if "PASS" not in names:
        raise InvalidParameterError(
            "The 'pass_only' parameter (CLI: --pass-only) needs a 'PASS' entry in "
            f"filter_id; the data has {names.tolist()}."
        )
    filters = np.asarray(filters, dtype=bool)
    if filters.ndim == 1:
        return filters
    return filters[:, int(np.flatnonzero(names == "PASS")[0])]


@dataclass(frozen=True, slots=True)
class CallCounts:
    """A genotype matrix's calls counted in one pass: per variant, each variant's calls of
    dosage ``0 .. ploidy`` (``levels``; a fractional dosage is in none), its non-missing
    calls (``called``) and sum of called dosages (``sums``); per sample, its missing calls
    (``sample_missing``)."""

    levels: np.ndarray
    called: np.ndarray
    sums: np.ndarray
    sample_missing: np.ndarray
    ploidy: int

    def call_rate(self) -> np.ndarray:
        """Each variant's fraction of the samples with a (non-missing) call."""
        return self.called / self.sample_missing.size

    def maf(self) -> np.ndarray:
        """Each variant's ``min(p, 1 - p)``, ``p`` the mean called dosage over the ploidy;
        NaN where nothing is called."""
        p = np.divide(self.sums, self.called * float(self.ploidy),
                      out=np.full(self.sums.shape, np.nan), where=self.called > 0)
        return np.minimum(p, 1.0 - p)

    def hwe_p(self) -> np.ndarray:
        """Each variant's exact HWE p-value (:func:`daskstraggle.data.hwe.hwe_exact_p_counts`,
        once per distinct genotype-count triple) from its counts of dosage 1, 0 and 2
        (diploid calls)."""
        from daskstraggle.data.hwe import hwe_exact_p_counts

        return hwe_exact_p_counts(self.levels[:, 1], self.levels[:, 0], self.levels[:, 2])

    def without(self, other: CallCounts, kept: np.ndarray) -> CallCounts:
        """These counts less ``other``'s, the counts of the same variants at the samples
        ``~kept``: the counts over the samples ``kept``."""
        return CallCounts(self.levels - other.levels, self.called - other.called,
                          self.sums - other.sums, self.sample_missing[kept], self.ploidy)


def _partition_counts(values: np.ndarray, n_levels: int) -> tuple[np.ndarray | None, ...]:
    """One partition's counts (the task body): per row, its calls of each dosage, its
    missing calls and (fractional dosages only, else None) its dosage sum; per column,
    its missing calls."""
    counting = import_numba_module("daskstraggle.data._numba_counts")
    levels, missing, by_sample = counting.count_calls(values, n_levels)
    sums = counting.dosage_sums(values) if values.dtype.kind == "f" else None
    return levels, missing, sums, by_sample


def call_counts(matrix: Matrix, *, client: Any = None) -> CallCounts:
    """Count a genotype matrix's calls per variant (of each dosage, missing) and per sample
    (missing) in one pass over its raw dosages, one task per partition on ``client``'s
    workers (None: in process)."""
    from daskstraggle.data._passes import map_values

    source = matrix.source
    assert isinstance(source, GenotypeRowSource)
    count = partial(_partition_counts, n_levels=source.ploidy + 1)
    parts = map_values(matrix, lambda a, b: count, client)
    dosages = np.arange(source.ploidy + 1)
    levels = np.concatenate([p[0] for p in parts]).astype(np.int64)
    sums = np.concatenate([(p[0] @ dosages).astype(np.float64) if p[2] is None else p[2]
                           for p in parts])
    missing = sum((p[3] for p in parts), np.zeros(matrix.n_columns, dtype=np.int64))
    called = matrix.n_columns - np.concatenate([p[1] for p in parts]).astype(np.int64)
    return CallCounts(levels, called, sums, missing, source.ploidy)


# ---------------------------------------------------------------------------- variant tables
class VariantTable:
    """Per-variant arrays (``variant_*``) of a genotype matrix's rows, read on the client
    when asked.

    Parameters
    ----------
    reader : callable
        ``reader(name, index)`` returns array ``name`` (rows ``index`` along its first
        dimension, or all when None), or None if the data has no such array.
    index : ndarray of int or None
        The matrix's rows in the reader's arrays (None: all of them, in order).
    """

    def __init__(self, reader: Callable[[str, np.ndarray | None], np.ndarray | None],
                 index: np.ndarray | None = None) -> None:
        self.reader = reader
        self.index = None if index is None else np.asarray(index, dtype=np.int64)

    def get(self, name: str) -> np.ndarray | None:
        """Return the per-variant array ``name`` at the matrix's rows (None: absent)."""
        return self.reader(name, self.index)

    def whole(self, name: str) -> np.ndarray | None:
        """Return a whole array that is not per variant (``contig_id``, ``filter_id``)."""
        return self.reader(name, None)

    def select(self, rows: np.ndarray) -> VariantTable:
        """Return the table of rows ``rows`` of this one."""
        rows = np.asarray(rows, dtype=np.int64)
        return VariantTable(self.reader, rows if self.index is None else self.index[rows])

    def contigs(self) -> np.ndarray | None:
        """Return each variant's contig as plink2 writes it (``chr22`` is ``22``, ``chrX`` and
        ``23`` are ``X``: :func:`~daskstraggle.data._contigs.chrom_code`), or None."""
        from daskstraggle.data._contigs import chrom_code

        names, codes = self.whole("contig_id"), self.get("variant_contig")
        if names is None or codes is None:
            return None
        plink = np.array([chrom_code(name) for name in _strings(names)], dtype=object)
        return plink[np.asarray(codes, dtype=np.int64)]

    def keys(self) -> np.ndarray | None:
        """Return one string per variant, ``contig:position:alleles`` (contigs as
        :meth:`contigs`, alleles in stored order: a REF/ALT swap is another variant), or None."""
        names, positions = self.contigs(), self.get("variant_position")
        alleles = self.get("variant_allele")
        if names is None or positions is None:
            return None
        text = [f"{c}:{int(p)}" for c, p in zip(names, positions, strict=True)]
        if alleles is not None:
            allele_text = _strings(alleles).reshape(len(text), -1)
            text = [t + ":" + ",".join(a for a in row if a) for t, row in
                    zip(text, allele_text, strict=True)]
        return np.array(text)


class StoreArrays:
    """``reader`` of a :class:`VariantTable` over a VCF Zarr store (read on the client).

    Absent chunks read as the fill value, as zarr and sgkit read them (bio2zarr leaves out
    the chunks of constant arrays); chunks that do not decode are refused in one line.
    """

    def __init__(self, path: str, storage_options: dict[str, Any] | None = None) -> None:
        self.path = path
        self.storage_options = storage_options
        self._names: GroupArrays | None = None  # arrays opened by name if not listed

    def __call__(self, name: str, index: np.ndarray | None) -> np.ndarray | None:
        """Return array ``name`` (rows ``index``) of the store, or None if absent."""
        import zarr

        if self._names is None:
            group = zarr.open_group(self.path, mode="r", **fsspec_options(self.storage_options))
            self._names = group_arrays(group, self.path)
        if name not in self._names:
            return None
        where: dict[str, Any] = {"missing_chunks": "fill", "storage_options": self.storage_options}
        if index is None:
            from daskstraggle.data._zarr import read_rows

            n_rows = int(self._names[name].shape[0])
            return np.asarray(read_rows(self.path, name, 0, n_rows, **where))
        return read_selection(self.path, name, index, None, **where)


class DatasetArrays:
    """``reader`` of a :class:`VariantTable` over an in-memory ``xarray.Dataset``."""

    def __init__(self, ds: Any) -> None:
        self.ds = ds

    def __call__(self, name: str, index: np.ndarray | None) -> np.ndarray | None:
        """Return variable ``name`` (rows ``index`` of its first dimension), or None."""
        if name not in self.ds.variables:
            return None
        var = self.ds[name]
        if index is not None:
            var = var.isel({var.dims[0]: index})
        return np.asarray(var.values)


def _strings(values: Any) -> np.ndarray:
    """Return str values (numpy StringDType, bytes and object arrays included)."""
    flat = np.asarray(values, dtype=object)
    out = [v.decode() if isinstance(v, bytes) else str(v) for v in flat.ravel()]
    return np.array(out, dtype=object).reshape(flat.shape)


# ---------------------------------------------------------------------------- allele counts
def parse_genotype_dims(value: object, *, caller: str) -> bool:
    """Return whether rows are variants for ``genotype_dims`` (a pair of dimension names).

    Raises
    ------
    InvalidParameterError
        Unless ``value`` is ``("variants", "samples")`` or ``("samples", "variants")``.
    """
    pair = tuple(value) if isinstance(value, list | tuple) else None
    if pair not in GENOTYPE_DIMS:
        raise InvalidParameterError(
            f"The 'genotype_dims' parameter of {caller} must be ('variants', 'samples') "
            f"(rows are variants) or ('samples', 'variants') (rows are samples). Got "
            f"{value!r} instead."
        )
    return pair == GENOTYPE_DIMS[0]


def _first_values(X: Any) -> np.ndarray | None:
    """A sample of a 2-D integer array's values: all of numpy, a dask array's first block,
    a Zarr matrix's first chunk."""
    source = getattr(X, "source", None)
    if isinstance(source, RowSource):  # a Matrix: only a plain Zarr array is in question
        if source.kind != "zarr" or np.dtype(source.dtype).kind not in "iu":
            return None
        return source.loader(0, int(source.chunk_bounds[1]))().values
    data = X.data if _is_xarray(X) else X
    dtype = np.dtype(getattr(data, "dtype", "f8"))
    if len(getattr(data, "shape", ())) != 2 or dtype.kind not in "iu":
        return None
    if hasattr(data, "__dask_graph__"):
        return np.asarray(data.blocks[0, 0].compute(scheduler="sync"))
    if type(data).__module__.startswith("numpy"):
        return data
    return None


def check_not_allele_counts(X: Any, *, caller: str) -> None:
    """Refuse, in one line, a 2-D integer array that looks like allele counts: an xarray
    DataArray named ``call_alternate_allele_count`` or with a ``variants`` or ``samples``
    dimension, or values (all of numpy, a dask array's first block) in {-1, 0, 1, 2} that
    include a 2 or a -1 (a 0/1 matrix of binary features does not).

    Raises
    ------
    InvalidDataError
        If ``X`` looks like allele counts.
    """
    sample = _first_values(X)
    if sample is None:
        return
    named = _is_xarray(X) and (X.name == "call_alternate_allele_count"
                               or {"variants", "samples"} & {str(d) for d in X.dims})
    if not named:
        low, high = (int(sample.min()), int(sample.max())) if sample.size else (0, 0)
        if not (low >= -1 and high <= 2 and (high == 2 or low == -1)):
            return
    what = (f"xarray.DataArray {X.name!r} with dims {tuple(map(str, X.dims))}"
            if _is_xarray(X) else f"{type(X).__name__} of {np.dtype(X.dtype)}")
    raise InvalidDataError(
        f"{caller} got a 2-D integer array that looks like allele counts ({what}, values "
        "in {-1, 0, 1, 2}); a genotype PCA needs its orientation: pass genotype_dims="
        "('variants', 'samples') if rows are variants or ('samples', 'variants') if rows "
        "are samples, or convert it to float for a plain PCA of its rows."
    )


def _is_xarray(obj: Any) -> bool:
    """An xarray.DataArray (not a Dataset)."""
    return (type(obj).__module__.startswith("xarray") and hasattr(obj, "dims")
            and not hasattr(obj, "data_vars"))
