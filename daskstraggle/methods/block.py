"""Block Krylov PCA: every component converged, one exact pass per round, restarted.

The power method (``gd``) multiplies the same ``k`` columns again and again, converging at
the rate ``lambda_{k+1} / lambda_i``, close to 1 in a flat genotype bulk. This method keeps
every product it receives: the basis ``Q`` (block Krylov space of the random start) and
``W = X_c^T X_c Q`` grow by one block of ``b = k + p`` columns per pass; Rayleigh-Ritz on
``Q^T W`` gives the Ritz pairs with *exact* residuals ``|W u - theta Q u|``, and the next
block is the residuals of the top ``b`` pairs. A full basis (``max_blocks`` blocks)
restarts from its top ``2 b`` Ritz vectors (thick restart; their products are ``W U``).
Each round is one exact sum, so coding schemes apply as for
:class:`~daskstraggle.methods.Gram`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from daskstraggle._validation import check_int
from daskstraggle.methods.base import RoundSummary
from daskstraggle.methods.coded import CodedSum
from daskstraggle.problems._linalg import orthonormalize
from daskstraggle.problems.base import KernelResult
from daskstraggle.problems.pca import PCA

__all__ = ["BlockKrylov"]

#: Ritz vectors kept at a restart, in blocks.
_KEEP_BLOCKS = 2
#: A new (unit) direction whose part orthogonal to the basis is below this norm carries
#: no new information: it is replaced by a random direction.
_DEPENDENT = 1e-8


class BlockKrylov(CodedSum):
    """Block Krylov (Lanczos-type) PCA with thick restarts; exact sums, optionally coded.

    Parameters
    ----------
    scheme, **scheme_params
        As :class:`~daskstraggle.methods.CodedSum`, for each round's sum.
    max_blocks : int, default=6
        Blocks the basis holds before a thick restart (at least 3); the coordinator keeps
        ``2 x (max_blocks + 1) x b x d`` floats.
    rng : int or None, default=None
        Seed of the scheme's random parts and of the ``p`` random starting columns
        (None: seed 0, so runs repeat).

    Notes
    -----
    The block has ``b = k + p`` columns, ``p`` the problem's ``oversample`` (None gives
    ``p = k`` here), at most the number of columns. Per pass the workers compute
    ``X_c^T X_c B``; the coordinator does ``O(d b^2 max_blocks)`` flops. Every round is
    exact, so every component is judged each round and the iterates equal an uncoded
    run's (to rounding) whichever workers answer.

    References
    ----------
    Musco & Musco, "Randomized block Krylov methods for stronger and faster approximate
    singular value decomposition", NeurIPS 2015. Stathopoulos & Wu, thick restarting
    (SIAM J. Sci. Comput. 2002). Halko, Martinsson & Tropp, SIAM Review 2011.

    Examples
    --------
    >>> BlockKrylov(max_blocks=8).get_params()["max_blocks"]
    8
    """

    name = "block"
    description = ("PCA: block Krylov, every component converged, any number of columns; "
                   "coded with --scheme; see --oversample")
    # every round is an exact Rayleigh-Ritz step over a basis that only grows or keeps
    # its best part: no starting pass for a divergence check to compare with
    start_pass = False

    def __init__(self, scheme: Any = "uncoded", *, max_blocks: int = 6,
                 rng: int | None = None, **scheme_params: Any) -> None:
        super().__init__(scheme, rng=rng, **scheme_params)
        self.max_blocks = check_int(max_blocks, name="max_blocks", caller="BlockKrylov",
                                    low=3)

    def _reset(self) -> None:
        """The first block is the iterate plus random columns up to ``b`` (the iterate
        already has ``k + p`` columns when the problem oversamples)."""
        super()._reset()
        d, width = self._x.shape
        problem = self._problem
        assert isinstance(problem, PCA)  # check_problem refused the others
        k = problem.n_components
        self._k = k
        self._b = min(2 * k, d) if problem.oversample is None else width
        self._max_basis = min(self.max_blocks * self._b, d)
        self._fill = np.random.default_rng(0 if self.rng is None else self.rng)
        extra = self._fill.standard_normal((d, self._b - width))
        self._block = orthonormalize(np.hstack([self._x, extra]))
        # _Q and _W: views of the first basis_size columns of preallocated buffers
        capacity = self._max_basis + self._b
        self._Qbuf = np.empty((d, capacity), order="F")
        self._Wbuf = np.empty((d, capacity), order="F")
        self._set_basis(np.zeros((d, 0)), np.zeros((d, 0)))
        self._H = np.zeros((0, 0))
        self._ritz: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def basis_size(self) -> int:
        """Columns of the current basis (after the last received block)."""
        return int(self._Q.shape[1])

    def _set_basis(self, Q: np.ndarray, W: np.ndarray, start: int = 0) -> None:
        """Make ``Q`` (and its products ``W``) the basis from column ``start`` on, copied
        into the buffers."""
        m = start + Q.shape[1]
        self._Qbuf[:, start:m] = Q
        self._Wbuf[:, start:m] = W
        self._Q, self._W = self._Qbuf[:, :m], self._Wbuf[:, :m]

    def _point(self) -> np.ndarray:
        """The current block: what the workers multiply this round (dispatched by
        :meth:`CodedGD.dispatch`)."""
        return self._block

    def _summarise(self) -> RoundSummary:
        """Extend the basis by the decoded block product; return the top ``k`` Ritz pairs
        ``V`` with ``X_c^T X_c V`` (exact to rounding), and in its extras the basis size and
        ``next_ritz_value``, the ``(k + 1)``-th Ritz value
        (:mod:`daskstraggle.problems.separation`)."""
        total = self._decoded()
        self._extend(self._block, total.gradient)
        theta, Y, AY = self._rayleigh_ritz()
        k = self._k
        V, AV = Y[:, :k], AY[:, :k]
        result = KernelResult(np.ascontiguousarray(AV), np.einsum("ij,ij->j", V, AV),
                              total.n_rows)
        extras = {"basis_size": float(self.basis_size),
                  **({"next_ritz_value": float(theta[k])} if len(theta) > k else {})}
        return self._summary_of(result, point=np.ascontiguousarray(V), extras=extras,
                                **self._responders())

    def step(self) -> None:
        """Restart if the basis is full; the next block is the top Ritz residuals."""
        summary = self.summary()
        assert self._ritz is not None
        theta, Y, AY = self._ritz
        b = self._b
        residuals = AY[:, :b] - Y[:, :b] * theta[:b]
        if self.basis_size + b > self._max_basis:
            keep = max(min(_KEEP_BLOCKS * b, self._max_basis - b), self._k)
            self._set_basis(Y[:, :keep], AY[:, :keep])
            self._H = np.diag(theta[:keep])
        room = self._x.shape[0] - self.basis_size
        if room < 1:  # the basis spans everything: evaluate the Ritz vectors afresh
            self._set_basis(self._Q[:, :0], self._W[:, :0])
            self._H = np.zeros((0, 0))
            self._block = np.ascontiguousarray(Y[:, :b])
        else:
            self._block = self._new_block(residuals[:, :min(b, room)])
        self._x = summary.iterate
        self._ritz = None
        self._clear_round()

    # ------------------------------------------------------------------ internals
    def _extend(self, block: np.ndarray, product: np.ndarray) -> None:
        """Append ``block`` and its product ``X_c^T X_c block`` to the basis."""
        cross = self._Q.T @ product
        diag = block.T @ product
        m = self.basis_size
        H = np.zeros((m + block.shape[1],) * 2)
        H[:m, :m] = self._H
        H[:m, m:] = cross
        H[m:, :m] = cross.T
        H[m:, m:] = 0.5 * (diag + diag.T)
        self._H = H
        self._set_basis(block, product, start=m)

    def _rayleigh_ritz(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return Ritz values (descending) and the top Ritz vectors (those a restart can
        keep) with their products."""
        theta, U = np.linalg.eigh(self._H)
        order = np.argsort(theta)[::-1]
        width = min(max(_KEEP_BLOCKS * self._b, self._k), U.shape[1])
        U = U[:, order[:width]]
        Y = self._Q @ U
        # eigh's signs can flip with a rounding-level change of H: make each Ritz vector's
        # largest entry positive, so runs equal to rounding give the same iterates
        signs = np.where(Y[np.argmax(np.abs(Y), axis=0), np.arange(Y.shape[1])] < 0, -1.0, 1.0)
        U = U * signs
        self._ritz = (theta[order], Y * signs, self._W @ U)
        return self._ritz

    def _new_block(self, directions: np.ndarray) -> np.ndarray:
        """Orthonormalise ``directions`` (each scaled to unit norm first) against the basis
        and among themselves, by classical Gram-Schmidt twice; a direction with nothing
        outside them is replaced by a fresh random one, so the block keeps its width."""
        d, width = directions.shape
        V = np.array(directions, dtype=np.float64, order="F")
        norms = np.linalg.norm(V, axis=0)
        usable = (norms > 0) & np.isfinite(norms)
        V[:, usable] /= norms[usable]
        for _ in range(2):  # classical Gram-Schmidt twice: orthogonal to rounding
            V -= self._Q @ (self._Q.T @ V)
        block = np.zeros((d, width), order="F")
        for j in range(width):
            v = V[:, j] if usable[j] else None
            for _ in range(4):
                if v is not None:
                    v = self._against(v, block[:, :j], basis=False)
                    if np.linalg.norm(v) > _DEPENDENT:
                        break
                v = self._fill.standard_normal(int(d))
                v = self._against(v / np.linalg.norm(v), block[:, :j], basis=True)
            assert v is not None
            block[:, j] = v / np.linalg.norm(v)
        return np.ascontiguousarray(block)

    def _against(self, v: np.ndarray, earlier: np.ndarray, *, basis: bool) -> np.ndarray:
        """``v`` Gram-Schmidt-ed twice against the block's ``earlier`` columns (and
        against the basis too with ``basis``)."""
        for _ in range(2):
            if basis:
                v = v - self._Q @ (self._Q.T @ v)
            v = v - earlier @ (earlier.T @ v)
        return v
