"""The genotype quality-control options of the ``pca`` command (kept out of cli.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from daskstraggle.errors import InvalidParameterError

if TYPE_CHECKING:
    from daskstraggle.data.genotypes import GenotypeQC

__all__ = ["qc_from_params", "qc_line", "qc_options"]


#: The quality-control options: flags (and the parameter's name where it differs), the
#: value's type and metavar (None: an on/off flag), the help.
_QC_OPTIONS: tuple[tuple[tuple[str, ...], Any, str | None, str], ...] = (
    (("--min-maf",), float, "F", "Genotypes: keep variants whose minor allele frequency is "
     "at least F, in [0, 0.5] (as plink --maf; one counting pass on the workers)."),
    (("--max-missing",), float, "F", "Genotypes: keep variants with at most this fraction of "
     "missing calls, in [0, 1] (as plink --geno)."),
    (("--pass-only",), None, None, "VCF Zarr: keep variants whose FILTER is PASS."),
    (("--region",), None, "CONTIG[:START-END]", "Genotypes: keep variants in this region "
     "(1-based, inclusive), e.g. 1:1000000-2000000."),
    (("--max-alleles",), int, "N", "Genotypes: keep variants with at most N alleles, REF "
     "included (2: biallelic sites only; as plink2 --max-alleles)."),
    (("--hwe",), float, "P", "Genotypes: keep variants whose Hardy-Weinberg exact test "
     "p-value is at least P (as plink2 --hwe, no mid-p; diploid calls; one counting pass on "
     "the workers)."),
    (("--mind", "max_sample_missing"), float, "F", "Genotypes: keep samples with at most "
     "this fraction of missing calls, in [0, 1] (as plink --mind; one more counting pass)."),
    (("--snps-only",), None, None, "Genotypes: keep variants whose every allele is one base "
     "(no indels or symbolic alleles; as plink2 --snps-only)."),
    (("--king-cutoff",), float, "K", "Genotypes: remove one sample of each pair whose "
     "KING-robust kinship exceeds K, as plink2 --king-cutoff (0.0884: second-degree "
     "relatives and closer; one more pass on the workers)."),
    (("--ld-prune",), None, "WINDOW,STEP,R2", "Genotypes: LD pruning after the other "
     "filters, as plink2 --indep-pairwise with the window in variants (e.g. 50,5,0.2; one "
     "more pass on the workers)."),
    (("--ld-prune-order",), click.IntRange(1, 2), "1|2", "Genotypes: --ld-prune's scan "
     "order, as plink2 --indep-order: 2 (default) is plink2's since alpha 5, 1 is PLINK "
     "1.9's."),
)


def qc_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add the quality-control options (``_QC_OPTIONS``, in their order) to command ``fn``."""
    for flags, kind, metavar, text in reversed(_QC_OPTIONS):
        value = ({"is_flag": True, "default": False} if metavar is None
                 else {"type": kind, "default": None, "metavar": metavar})
        fn = click.option(*flags, help=text, **value)(fn)
    return fn


def qc_from_params(params: dict[str, Any]) -> GenotypeQC | None:
    """Pop the options' values from ``params``; return the quality control (None: none)."""
    from daskstraggle.data.genotypes import GenotypeQC, parse_qc  # the data layer: on use
    from daskstraggle.data.ld import parse_ld_prune

    ld_text, ld_order = params.pop("ld_prune"), params.pop("ld_prune_order")
    if ld_order is not None and ld_text is None:
        raise InvalidParameterError(
            "--ld-prune-order sets the order of --ld-prune; give --ld-prune WINDOW,STEP,R2 "
            "too, or drop it."
        )
    dests = (flags[-1].lstrip("-").replace("-", "_") for flags, *_ in _QC_OPTIONS)
    qc = GenotypeQC(**{dest: params.pop(dest) for dest in dests if not dest.startswith("ld_")},
                    ld_prune=parse_ld_prune(ld_text, order=ld_order))
    return parse_qc(qc, caller="pca")


def qc_line(result: Any) -> str | None:
    """One line of the result table: the variants that quality control kept, or None."""
    qc = result.quality_control  # what --json prints as quality_control
    if not qc:
        return None
    line = (f"variants    {qc['n_kept']} of {qc['n_variants']} kept by quality control"
            + _steps(qc["removed"]))
    if "n_samples" in qc:
        line += (f"\nsamples     {qc['n_samples_kept']} of {qc['n_samples']} kept by quality "
                 "control" + _steps(qc.get("samples_removed", {})))
    return line


def _steps(removed: dict[str, int]) -> str:
    """`` (maf removed 3, ld removed 5)``, or nothing when no step removed anything."""
    steps = ", ".join(f"{step} removed {n}" for step, n in removed.items())
    return f" ({steps})" if steps else ""
