"""Quality control's counting pass: one compiled sweep gives every per-variant and
per-sample count.

The oracle is the implementation it replaced, written out in numpy: the fraction of called
genotypes, the mean called dosage, the HWE p-value of the (het, hom_1, hom_2) counts and
each sample's fraction of missing calls, with ``--mind`` applied first in a pass of its own
and the variant counts taken again over the samples it keeps.
"""

from __future__ import annotations

import warnings

import dask.array as da
import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import daskstraggle as ds
from daskstraggle.data import sources
from daskstraggle.data.genotypes import GenotypeQC, call_counts, filter_variants
from daskstraggle.data.hwe import hwe_exact_p_counts
from daskstraggle.errors import InvalidDataError

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def dosage_matrices(draw: st.DrawFn) -> tuple[np.ndarray, int]:
    """Diploid dosages (-1 missing) with all-missing and monomorphic variants, samples
    missing from nothing to everything, any sample count; and a partition height."""
    n_variants = draw(st.integers(1, 30))
    n_samples = draw(st.integers(1, 23))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    freq = rng.choice([0.0, 0.02, 0.3, 0.5, 1.0], size=(n_variants, 1))
    dosages = rng.binomial(2, freq, size=(n_variants, n_samples)).astype(np.int8)
    rates = rng.choice([0.0, 0.05, 0.3, 1.0], size=(1, n_samples), p=[0.4, 0.3, 0.2, 0.1])
    dosages[rng.uniform(size=dosages.shape) < rates] = -1
    dosages[rng.uniform(size=n_variants) < 0.1] = -1  # variants with no call
    return dosages, draw(st.integers(1, n_variants))


def _matrix(dosages: np.ndarray, rows: int):
    """A genotype matrix of ``dosages``, one partition per ``rows`` variants."""
    return ds.open_matrix(da.from_array(dosages, chunks=(rows, -1)),
                          genotype_dims=("variants", "samples"))


def _oracle_counts(dosages: np.ndarray, ploidy: int = 2):
    """The replaced code's statistics: call rate, MAF, HWE p (diploid), sample missingness."""
    called = dosages >= 0
    n_called = np.count_nonzero(called, axis=1).astype(np.float64)
    sums = np.where(called, dosages, 0).sum(axis=1, dtype=np.float64)
    p = np.divide(sums, n_called * ploidy, out=np.full(sums.shape, np.nan), where=n_called > 0)
    p_hwe = None
    if ploidy == 2:
        p_hwe = hwe_exact_p_counts(np.count_nonzero(dosages == 1, axis=1),
                                   np.count_nonzero(dosages == 0, axis=1),
                                   np.count_nonzero(dosages == 2, axis=1))
    missing = np.count_nonzero(~called, axis=0) / max(1, dosages.shape[0])
    return n_called / dosages.shape[1], np.minimum(p, 1.0 - p), p_hwe, missing


@SETTINGS
@given(dosage_matrices())
def test_one_pass_gives_the_replaced_statistics(case):
    dosages, rows = case
    counts = call_counts(_matrix(dosages, rows))
    rate, maf, p_hwe, missing = _oracle_counts(dosages)
    for k in range(3):
        np.testing.assert_array_equal(counts.levels[:, k], (dosages == k).sum(axis=1))
    np.testing.assert_array_equal(counts.call_rate(), rate)
    np.testing.assert_array_equal(counts.maf(), maf)
    np.testing.assert_allclose(counts.hwe_p(), p_hwe, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(counts.sample_missing / max(1, dosages.shape[0]), missing)


def _oracle_filter(dosages: np.ndarray, qc: GenotypeQC):
    """The replaced filter_variants' counting steps: --mind in a pass of its own, then
    missingness, HWE and MAF over the kept samples."""
    samples = np.ones(dosages.shape[1], dtype=bool)
    samples_removed = {}
    if qc.max_sample_missing is not None:
        missing = _oracle_counts(dosages)[3]
        passing = missing <= qc.max_sample_missing + 1e-12
        samples = passing & ~((missing >= 1.0) & passing)
        samples_removed["mind"] = int((~samples).sum())
        if not samples.any():
            return None
    rate, maf, p_hwe, _ = _oracle_counts(dosages[:, samples])
    keep = np.ones(dosages.shape[0], dtype=bool)
    removed = {}
    for name, value, ok in (("missing", qc.max_missing, lambda t: 1.0 - rate <= t + 1e-12),
                            ("hwe", qc.hwe, lambda t: p_hwe >= t),
                            ("maf", qc.min_maf,
                             lambda t: np.nan_to_num(maf, nan=-1.0) >= t - 1e-12)):
        if value is not None:
            removed[name] = int((keep & ~ok(value)).sum())
            keep &= ok(value)
    return keep, removed, (samples if qc.max_sample_missing is not None else None), \
        samples_removed


QCS = st.builds(GenotypeQC, max_sample_missing=st.sampled_from([None, 0.0, 0.1, 0.5, 1.0]),
                max_missing=st.sampled_from([None, 0.2, 1.0]),
                hwe=st.sampled_from([None, 1e-3, 0.2]),
                min_maf=st.sampled_from([None, 0.0, 0.05, 0.3]))


@SETTINGS
@given(dosage_matrices(), QCS)
def test_filter_variants_keeps_what_the_two_pass_order_kept(case, qc):
    """Same kept variants and samples, same removed counts, with --mind removing samples
    (their counts subtracted, or the kept ones counted again when fewer) or none."""
    dosages, rows = case
    if not qc.counts_variants and qc.max_sample_missing is None:
        return
    want = _oracle_filter(dosages, qc)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if want is None or not want[0].any():
            with pytest.raises(InvalidDataError):
                filter_variants(_matrix(dosages, rows), qc)
            return
        report = filter_variants(_matrix(dosages, rows), qc).attrs["qc"]
    keep, removed, samples, samples_removed = want
    np.testing.assert_array_equal(report.kept, keep)
    assert report.removed == removed and report.samples_removed == samples_removed
    if samples is None:
        assert report.samples_kept is None
    else:
        np.testing.assert_array_equal(report.samples_kept, samples)


@pytest.mark.parametrize("ploidy", [1, 3, 4])
def test_other_ploidies_keep_their_call_rate_and_maf(ploidy):
    """Calls of lower ploidy padded (-2) count as scaled dosages, fractional above
    ploidy 2: the call rate and MAF are those of the decoded dosages."""
    rng = np.random.default_rng(ploidy)
    calls = rng.integers(0, 2, size=(40, 13, ploidy)).astype(np.int8)
    calls[rng.uniform(size=calls.shape) < 0.05] = -1
    if ploidy > 1:
        calls[rng.uniform(size=calls.shape[:2]) < 0.3, -1] = sources.PADDING
    dataset = xr.Dataset({"call_genotype": (("variants", "samples", "ploidy"), calls)})
    counts = call_counts(ds.open_matrix(dataset.chunk({"variants": 7})))
    dosages = sources.genotype_rows(calls, missing="zero", scaling="none").values
    rate, maf, _, missing = _oracle_counts(dosages, ploidy)
    np.testing.assert_array_equal(counts.call_rate(), rate)
    np.testing.assert_allclose(counts.maf(), maf, rtol=1e-15)
    np.testing.assert_array_equal(counts.sample_missing / 40, missing)


@pytest.fixture
def loads(monkeypatch):
    """The number of partition reads of in-memory genotypes."""
    count = [0]
    read = sources._ArrayGenotypeLoader.__call__

    def spy(self):
        count[0] += 1
        return read(self)

    monkeypatch.setattr(sources._ArrayGenotypeLoader, "__call__", spy)
    return count


def test_one_read_of_the_calls_when_mind_removes_no_sample(loads):
    """--mind, missingness, HWE and MAF from one pass (they took two); a second only when
    --mind removes samples, and it counts their columns alone."""
    rng = np.random.default_rng(0)
    dosages = rng.binomial(2, 0.3, size=(60, 21)).astype(np.int8)
    dosages[rng.uniform(size=dosages.shape) < 0.02] = -1
    matrix = _matrix(dosages, 20)
    qc = GenotypeQC(max_sample_missing=0.5, max_missing=0.1, hwe=1e-6, min_maf=0.01)
    filter_variants(matrix, qc)
    assert loads[0] == matrix.n_partitions == 3
    dosages[:40, 4] = -1  # --mind 0.5 removes sample 4
    loads[0] = 0
    report = filter_variants(_matrix(dosages, 20), qc).attrs["qc"]
    assert report.samples_removed == {"mind": 1} and loads[0] == 2 * 3


def _write_bed(prefix, dosages):
    """A .bed/.bim/.fam of diploid A1 dosages (-1 missing), first sample in the low bits."""
    code = np.select([dosages == 2, dosages == 1, dosages == 0], [0, 2, 3], 1).astype(np.uint8)
    code = np.pad(code, ((0, 0), (0, -dosages.shape[1] % 4)))
    packed = (code.reshape(len(code), -1, 4) << np.array([0, 2, 4, 6], np.uint8)).sum(axis=2)
    prefix.with_suffix(".bed").write_bytes(b"\x6c\x1b\x01" + packed.astype(np.uint8).tobytes())
    prefix.with_suffix(".fam").write_text(
        "".join(f"f{i} s{i} 0 0 0 -9\n" for i in range(dosages.shape[1])))
    prefix.with_suffix(".bim").write_text(
        "".join(f"1\tv{i}\t0\t{i + 1}\tA\tG\n" for i in range(len(dosages))))
    return prefix.with_suffix(".bed")


def test_the_workers_counts_are_summed(tmp_path, dask_client):
    """A .bed counted on process workers, one task per partition: the same counts."""
    rng = np.random.default_rng(3)
    dosages = rng.binomial(2, rng.uniform(0, 0.5, size=(50, 1)), size=(50, 9)).astype(np.int8)
    dosages[rng.uniform(size=dosages.shape) < 0.1] = -1
    matrix = ds.open_matrix(_write_bed(tmp_path / "g", dosages), n_partitions=4)
    counts = call_counts(matrix, client=dask_client)
    rate, maf, p_hwe, missing = _oracle_counts(dosages)
    np.testing.assert_array_equal(counts.call_rate(), rate)
    np.testing.assert_array_equal(counts.maf(), maf)
    np.testing.assert_allclose(counts.hwe_p(), p_hwe, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(counts.sample_missing / 50, missing)
