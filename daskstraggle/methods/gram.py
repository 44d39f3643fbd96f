"""Exact PCA in one round: sum the partitions' centred Gram matrices, eigendecompose."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods.base import RoundSummary
from daskstraggle.methods.coded import CodedSum
from daskstraggle.problems._kernels import pack_upper, packed_product, unpack_upper
from daskstraggle.problems._linalg import check_dense_size
from daskstraggle.problems.base import KernelResult, Problem
from daskstraggle.problems.block import Block
from daskstraggle.problems.pca import PCA

__all__ = ["Gram", "GramKernel"]


@dataclass(frozen=True, slots=True)
class GramKernel:
    """What the workers compute for :class:`Gram`: a block's centred Gram matrix.

    Parameters
    ----------
    problem : PCA
        The bound PCA problem (its column means centre the rows).
    """

    problem: Any

    def kernel(self, block: Block, iterate: np.ndarray) -> KernelResult:
        """Return the upper triangle of ``X_c^T X_c`` over the block's rows as ``gradient``,
        packed by :func:`~daskstraggle.problems._kernels.pack_upper`; ``values`` one zero
        (``iterate`` is unused: the Gram matrix does not depend on it)."""
        return self.kernel_sum((block,), iterate)

    def kernel_sum(self, blocks: Sequence[Block], iterate: np.ndarray) -> KernelResult:
        """Return :meth:`kernel` summed over ``blocks`` into one Gram matrix, packed once."""
        gram = self.problem.gram_kernel_sum(blocks, upper=True)
        return KernelResult(gradient=pack_upper(gram), values=np.zeros(1),
                            n_rows=sum(block.n_rows for block in blocks))


class Gram(CodedSum):
    """Exact PCA from one round of summed Gram matrices (optionally coded).

    Each worker returns the centred Gram matrix ``X_i^T X_i`` of its partitions (coded
    messages with a coding scheme), as ``plink2 --pca`` uses its relationship matrix; as
    soon as the responders decode to ``X_c^T X_c``, its top ``k`` eigenvectors are the
    iterate, exact, so the run converges in that round.

    Parameters
    ----------
    scheme, rng, **scheme_params
        As :class:`~daskstraggle.methods.CodedSum`.

    Notes
    -----
    Every worker holds one ``d x d`` float64 matrix per coded message and the coordinator
    their sum (refused above 20000 columns). ``n_i d^2`` flops per worker, against
    ``n_i d k`` per power iteration.

    References
    ----------
    Chang, Chow, Tellier, Vattikuti, Purcell, Lee, "Second-generation PLINK", GigaScience
    2015 (PCA from the relationship matrix). Tandon et al., "Gradient coding", ICML 2017.

    Examples
    --------
    >>> Gram().get_params()["scheme"]["name"]
    'uncoded'
    """

    name = "gram"
    description = ("PCA: exact in one round from the summed Gram matrices, coded with "
                   "--scheme; up to 20000 columns")
    start_pass = False  # one exact round: no starting point to measure from
    pca_only = "it eigendecomposes the Gram matrix"

    def check_problem(self, problem: Problem) -> None:
        """Refuse problems other than PCA, oversampling, and PCA with too many columns."""
        super().check_problem(problem)
        assert isinstance(problem, PCA)
        if problem.oversample is not None:
            raise InvalidParameterError(
                "The 'oversample' parameter of PCA (CLI: --oversample) applies to the "
                "iterative methods; 'gram' is exact in one round: drop it, or use 'block'. "
                f"Got {problem.oversample!r} with method 'gram' instead."
            )
        if problem.is_bound:
            check_dense_size(problem.n_features, "PCA with method 'gram'")

    def check_shape(self, n_rows: int, n_columns: int) -> None:
        """Refuse more than 20000 columns (the ``d x d`` matrix), before any work."""
        check_dense_size(n_columns, "PCA with method 'gram'")

    def work_problem(self, problem: Problem) -> GramKernel:
        """Return the kernel the workers run: the partitions' centred Gram matrices."""
        return GramKernel(problem)

    def _summarise(self) -> RoundSummary:
        """The exact sum's top eigenvectors and ``X_c^T X_c V`` there."""
        import scipy.linalg  # loaded when first needed (not by the CLI's --help)

        total = self._decoded()
        d, k = self._x.shape
        # LAPACK overwrites the unpacked matrix (no second d x d copy); G V from the packed sum
        gram = unpack_upper(total.gradient, d)
        _, vectors = scipy.linalg.eigh(gram, subset_by_index=[d - k, d - 1],
                                       overwrite_a=True)
        del gram
        V = np.ascontiguousarray(vectors[:, ::-1])
        GV = packed_product(total.gradient, V)
        values = np.einsum("ij,ij->j", V, GV)
        return self._summary_of(KernelResult(GV, values, total.n_rows), point=V,
                                **self._responders())

    def step(self) -> None:
        """Keep the eigenvectors (a further round would compute the same matrix)."""
        self._x = self.summary().iterate
        self._clear_round()
