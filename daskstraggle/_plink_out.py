"""A genotype PCA's result as plink2's ``--pca`` files.

``PREFIX.eigenvec`` (the samples' unit eigenvectors, plink2's layout: ``#FID IID PC1 ...``
when the samples came from a ``.fam`` with family ids, else ``#IID PC1 ...``),
``PREFIX.eigenval`` (one eigenvalue per line, plink2's scaling ``s² / (P M)``: ``P`` the
ploidy, ``M`` the variants used), and, given the matrix the result was fitted on,
``PREFIX.eigenvec.allele`` (``--pca allele-wts``' layout: ``#CHROM ID REF ALT A1 PC1 ...``,
a line per allele, the REF line's weights the negated ALT line's) with ``PREFIX.afreq``
(``#CHROM ID REF ALT ALT_FREQS``: the fit's allele frequencies). Monomorphic variants,
which contribute nothing to the fit (scale 0) and which plink2 cannot variance-standardise,
have no lines in ``.eigenvec.allele``. The allele weights are scaled so that plink2's
``--score`` (the command in :meth:`Result.to_plink <daskstraggle.trace.Result.to_plink>`,
with ``--score-col-nums 6-(5+k)``) gives in its ``PC*_SUM`` columns the scores
:meth:`daskstraggle.PCA.transform` gives: plink2 standardises a dosage by
``sqrt(2 f (1 - f))``, we by ``sqrt(f (1 - f))``, and it counts both lines of a variant, hence
weights ``A / sqrt(2)`` per line, ``A`` the unit variant axes. The variants' ids are the
input's where they are unique, else ``CHROM:POS:REF:ALT`` (plink2's ``--set-all-var-ids
@:#:$r:$a``). A missing call contributes 0 to both, as the fit's mean imputation does.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from daskstraggle._output import (
    check_folder_exists,
    check_not_input,
    check_output_path,
    removed_on_error,
    source_paths,
)
from daskstraggle.data.genotypes import _strings
from daskstraggle.errors import InvalidParameterError, OutputExistsError, OutputNotWritableError

if TYPE_CHECKING:
    from daskstraggle.data.matrix import Matrix
    from daskstraggle.trace import Result

__all__ = ["PLINK_SUFFIXES", "check_prefix", "check_variants", "write_plink"]

#: What :func:`write_plink` writes, by suffix of the prefix (the last two need the matrix).
PLINK_SUFFIXES = (".eigenvec", ".eigenval", ".eigenvec.allele", ".afreq")


def write_plink(result: Result, prefix: str | os.PathLike[str], matrix: Matrix | None = None,
                *, client: Any = None, overwrite: bool = False) -> list[Path]:
    """As :meth:`Result.to_plink <daskstraggle.trace.Result.to_plink>`: ``prefix`` + each
    of :data:`PLINK_SUFFIXES` (the first two without ``matrix``)."""
    info = _check_result(result)
    inputs = source_paths(info)
    if matrix is not None:
        from daskstraggle.data.genotypes import matrix_after_run

        inputs += source_paths(matrix)
        matrix = matrix_after_run(matrix, result)  # without samples or variants never called
        if list(matrix.shape) != list(info["shape"]) or not matrix.genotypes:
            raise InvalidParameterError(
                f"The 'matrix' parameter of to_plink must be the genotypes the result was "
                f"fitted on, {info['shape'][0]} variants x {info['shape'][1]} samples after "
                f"quality control; got a {matrix.kind} matrix of shape {tuple(matrix.shape)}. "
                "Open it as for the fit (open_matrix(..., qc=...))."
            )
    paths = check_prefix(prefix, overwrite=overwrite, alleles=matrix is not None, inputs=inputs)
    components = np.asarray(result.fitted["components"], dtype=np.float64)
    s = np.asarray(result.fitted["singular_values"], dtype=np.float64)
    samples = (_strings(result.feature_coords) if result.feature_coords is not None
               else np.array([f"sample_{j}" for j in range(components.shape[1])]))
    eigenvalues = s ** 2 / (info["ploidy"] * info["shape"][0])
    texts = [_eigenvec_text(components, samples, _family_ids(info, samples)),
             "".join(f"{v:.10g}\n" for v in eigenvalues)]
    if matrix is not None:
        texts += _allele_texts(matrix, components, s, client)
    with removed_on_error(paths):  # every file or none of the new ones
        for path, text in zip(paths, texts, strict=True):
            try:
                path.write_text(text)
            except OSError as err:
                raise OutputNotWritableError(
                    f"The plink file (CLI: --plink-out) {str(path)!r} cannot be written "
                    f"({err.strerror or err}); nothing of this prefix was kept. Free space "
                    "or choose another prefix."
                ) from err
    return paths


def _check_result(result: Result) -> dict[str, Any]:
    info = result.attrs.get("matrix", {})
    if (result.problem != "pca" or info.get("dims") != ["variants", "samples"]
            or info.get("scaling") != "patterson"):
        raise InvalidParameterError(
            "to_plink writes a genotype PCA (VCF Zarr, .bed or allele counts, Patterson "
            f"scaled); this result is a {result.problem} of a {info.get('kind', 'matrix')} "
            "matrix. Save it with Result.save instead."
        )
    return info


def check_prefix(prefix: str | os.PathLike[str], *, overwrite: bool, alleles: bool = True,
                 inputs: Iterable[str | os.PathLike[str]] = (),
                 others: Mapping[str, str | os.PathLike[str] | None] | None = None
                 ) -> list[Path]:
    """Return the files :func:`write_plink` writes at ``prefix``, refused before any work as
    :meth:`Result.to_plink <daskstraggle.trace.Result.to_plink>` says; no file may be or
    lie in one of ``others``, the run's other outputs by role (``{"the --out store": path}``).
    """
    base = os.fspath(prefix)
    if os.path.basename(base) in ("", ".", ".."):
        raise InvalidParameterError(
            f"The plink prefix (CLI: --plink-out) {base!r} has no file name, so the files "
            f"would be hidden ({base + '.eigenvec'!r}); end it with a name, e.g. "
            f"{os.path.join(base, 'pca')!r}."
        )
    names = [base + suffix for suffix in (PLINK_SUFFIXES if alleles else PLINK_SUFFIXES[:2])]
    what = "The plink file (CLI: --plink-out)"
    for name in names:  # as given: Path folds a URL's '//'
        if os.path.isdir(name):
            raise OutputExistsError(
                f"{what} {name!r} is a folder, which plink files cannot replace; choose "
                "another prefix."
            )
        check_output_path(name, overwrite=overwrite, inputs=inputs, what=what)
        for role, other in (others or {}).items():
            check_not_input(Path(name), [other], what=what, role=role)
    paths = [Path(name) for name in names]
    check_folder_exists(paths[0], what="The plink prefix (CLI: --plink-out)")
    return paths


def _family_ids(info: dict[str, Any], samples: np.ndarray) -> np.ndarray | None:
    """The ``.fam``'s family ids of ``samples`` from a ``.bed`` (None: none, or not unique)."""
    path = info.get("path")
    if info.get("kind") != "plink-bed" or not path:
        return None
    fam = Path(path).with_suffix(".fam")
    try:
        rows = [line.split() for line in fam.read_text().splitlines() if line.strip()]
    except OSError:
        return None
    family: dict[str, str] = {}
    for row in rows:
        if len(row) < 2 or row[1] in family:
            return None
        family[row[1]] = row[0]
    return np.array([family[str(s)] for s in samples]) if all(
        str(s) in family for s in samples) else None


def _eigenvec_text(components: np.ndarray, samples: np.ndarray,
                   family: np.ndarray | None) -> str:
    k = components.shape[0]
    pcs = "\t".join(f"PC{i + 1}" for i in range(k))
    ids = samples if family is None else [f"{f}\t{s}" for f, s in zip(family, samples,
                                                                        strict=True)]
    header = "#IID" if family is None else "#FID\tIID"
    lines = [f"{header}\t{pcs}\n"]
    lines += [f"{name}\t" + "\t".join(f"{v:.10g}" for v in components[:, j]) + "\n"
              for j, name in enumerate(ids)]
    return "".join(lines)


def _allele_texts(matrix: Matrix, components: np.ndarray, s: np.ndarray,
                  client: Any) -> list[str]:
    """The ``.eigenvec.allele`` and ``.afreq`` files' text (one pass over the variants)."""
    from daskstraggle.data._bed_writer import unique_variant_ids

    center, axes = variant_axes(matrix, components, s, client)
    weights = axes / math.sqrt(2.0)  # per line; plink2 counts a variant's two lines
    chrom, pos, ref, alt, given = _variant_columns(matrix)
    ids = unique_variant_ids(chrom, pos, ref, alt, given)
    ploidy = int(matrix.source.describe().get("ploidy", 2))
    freq = center / ploidy
    k = components.shape[0]
    pcs = "\t".join(f"PC{i + 1}" for i in range(k))
    lines = [f"#CHROM\tID\tREF\tALT\tA1\t{pcs}\n"]
    for v in np.flatnonzero((freq > 0) & (freq < 1)):  # a monomorphic variant weighs 0
        head = f"{chrom[v]}\t{ids[v]}\t{ref[v]}\t{alt[v]}"
        values = weights[v]
        lines.append(f"{head}\t{ref[v]}\t" + "\t".join(f"{-w:.10g}" for w in values) + "\n")
        lines.append(f"{head}\t{alt[v]}\t" + "\t".join(f"{w:.10g}" for w in values) + "\n")
    return ["".join(lines), "#CHROM\tID\tREF\tALT\tALT_FREQS\n" + "".join(
        f"{chrom[v]}\t{ids[v]}\t{ref[v]}\t{alt[v]}\t{freq[v]:.10g}\n" for v in range(len(ids)))]


def variant_axes(matrix: Matrix, components: np.ndarray, s: np.ndarray, client: Any
                 ) -> tuple[np.ndarray, np.ndarray]:
    """One pass over the variants of ``matrix``: each variant's centre (mean dosage) and its
    unit axes ``Z V / s`` (0 where ``s`` is 0), shape (n_variants, n_components)."""
    from daskstraggle.data import _passes

    parts = _passes.map_partitions(matrix, _passes.variant_pass(components.T), client)
    ZV = np.concatenate([p[2] for p in parts])
    return (np.concatenate([p[0] for p in parts]),
            np.divide(ZV, s, out=np.zeros_like(ZV), where=s > 0))


def check_variants(matrix: Matrix) -> None:
    """Read the variant table the allele weights need, so a malformed ``.bim`` or ``.pvar``
    is refused before the fit."""
    if (table := matrix.variants) is not None:
        for name in ("variant_contig", "variant_position", "variant_allele", "variant_id"):
            table.get(name)


def _variant_columns(matrix: Matrix) -> tuple[list[str], list[int], list[str], list[str],
                                               list[str] | None]:
    """Per variant: contig, position, REF, ALT and the given id (None: no ids)."""
    table, n = matrix.variants, matrix.n_rows
    get = table.get if table is not None else dict[str, Any]().get  # no table: the defaults
    contigs = table.contigs() if table is not None else None
    chrom = list(contigs) if contigs is not None else ["0"] * n
    positions = get("variant_position")
    pos = [int(p) for p in positions] if positions is not None else list(range(1, n + 1))
    alleles = get("variant_allele")
    if alleles is not None:
        alleles = _strings(alleles).reshape(n, -1)
        ref = [a or "0" for a in alleles[:, 0]]
        alt = [a or "0" for a in alleles[:, 1]] if alleles.shape[1] > 1 else ["0"] * n
    else:
        ref, alt = ["A"] * n, ["T"] * n
    given = get("variant_id")
    return chrom, pos, ref, alt, (None if given is None else list(_strings(given)))
