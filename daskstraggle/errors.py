"""Exceptions raised by daskstraggle.

Every exception the library raises on purpose derives from :class:`StraggleError`;
those about bad input also derive from the matching builtin (``ValueError``,
``TypeError``, ``FileNotFoundError``, ...) so that ``except ValueError`` keeps working.
The command line turns any :class:`InputError` into one line on stderr and exit code 2,
and a :class:`DivergenceError` into one line and exit code 3.
"""

from __future__ import annotations

__all__ = ["ClusterConnectionError", "ConvergenceWarning", "CorruptDataError",
           "DataNotFoundError", "DivergenceError", "InputError", "InvalidDataError",
           "InvalidParameterError", "InvalidTypeError", "MissingChunksError", "NoCallError",
           "NonFiniteDataError", "OutputExistsError", "OutputNotWritableError",
           "SchedulerLostError", "StraggleError", "StraggleWarning", "WorkerLostError"]


class StraggleError(Exception):
    """Base class of every error daskstraggle raises on purpose."""


class InputError(StraggleError):
    """Base class of errors caused by what the user passed (the CLI exits with 2)."""


class InvalidParameterError(InputError, ValueError):
    """A parameter has a value outside its allowed range or set."""


class InvalidTypeError(InputError, TypeError):
    """A parameter has the wrong type (e.g. an address string where a Client is expected)."""


class InvalidDataError(InputError, ValueError):
    """The data has the wrong shape, dtype or content (e.g. not 2-D, empty, bad labels)."""


class NonFiniteDataError(InvalidDataError):
    """The data contains NaN or infinity; raised on the worker that loaded the partition."""


class NoCallError(InvalidDataError):
    """Genotypes with a sample or a variant that has no called genotype at all.

    Raised by :func:`~daskstraggle.runtime.lifecycle.run` after loading, before any
    round: such a sample's or variant's values are all imputed, so it would be scored 0.
    ``fit_pca``, ``genotype_pca`` and the CLI catch it, remove them with a warning and run
    again.

    Attributes
    ----------
    samples : ndarray of int
        The matrix's columns with no call.
    variants : ndarray of int
        The matrix's rows with no call.
    """

    def __init__(self, message: str, *, samples: object = (), variants: object = ()) -> None:
        import numpy as np

        super().__init__(message)
        self.samples = np.asarray(samples, dtype=np.int64)
        self.variants = np.asarray(variants, dtype=np.int64)


class CorruptDataError(InvalidDataError):
    """A Zarr store is damaged: metadata or a chunk cannot be read or decoded.

    Metadata is checked on the client when the store is opened; chunks on the worker that
    loads the partition they belong to.
    """


class MissingChunksError(CorruptDataError):
    """Chunks of a Zarr array are absent from the store (checked per partition, on workers).

    Raised unless ``missing_chunks="fill"`` (CLI: ``--missing-chunks fill``) says absent
    chunks are meant to read as the fill value (stores written with
    ``write_empty_chunks=False``).
    """


class DataNotFoundError(InputError, FileNotFoundError):
    """A store, a group member or a file does not exist or cannot be read."""


class OutputExistsError(InputError, FileExistsError):
    """An output path exists already and overwriting was not asked for."""


class OutputNotWritableError(InputError, PermissionError):
    """The folder of an output path cannot be created or written."""


class ClusterConnectionError(InputError, ConnectionError):
    """The Dask scheduler could not be reached."""


class SchedulerLostError(StraggleError, ConnectionError):
    """The Dask scheduler stopped answering during a run (the CLI exits with code 1)."""


class WorkerLostError(StraggleError, RuntimeError):
    """Workers left and none came back in time to take over their partitions."""


class DivergenceError(StraggleError, ArithmeticError):
    """A run diverged (non-finite values, or an objective that grew far past its best).

    Nothing is returned or written: the iterate cannot be trusted. The message names the
    step size and what to try; the CLI exits with code 3.
    """


class StraggleWarning(UserWarning):
    """Base class of the warnings daskstraggle emits."""


class ConvergenceWarning(StraggleWarning):
    """A run ended before its convergence criterion held (``Result.converged`` is False).

    Like scikit-learn's ``ConvergenceWarning``: the result is returned, flagged.
    """
