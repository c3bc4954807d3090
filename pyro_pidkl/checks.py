"""Argument checks shared by the models: training data, new inputs and counts.

Each check raises a one-line error naming what was expected and what came.
"""

import math
import numbers
import os
import sys
import warnings

import numpy as np
import torch

__all__ = ["as_inputs", "as_targets", "column_count", "equation_input_names", "is_count",
           "positive_int", "positive_number", "warn"]


def is_count(value, minimum=1):
    """Whether ``value`` is an integer ``>= minimum`` (an integral float counts; ``bool``
    does not)."""
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and float(value).is_integer() and value >= minimum)


def positive_int(value, what, minimum=1):
    """``value`` as an ``int`` if it is an integer ``>= minimum`` (:func:`is_count`).

    :param str what: how the error names the argument, e.g. ``"m (collocation points)"``.
    """
    if not is_count(value, minimum):
        raise ValueError(f"Expected {what} to be an integer >= {minimum}; got {value!r}")
    return int(value)


def warn(message, category=UserWarning):
    """``warnings.warn`` attributed to the first caller outside this package, so that the
    warning names the user's line however deep in the library it is raised."""
    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


def positive_number(value, what):
    """``value`` as a ``float`` if it is a finite real number ``> 0`` (not a string, not
    ``bool``)."""
    if not (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0):
        raise ValueError(f"Expected {what} to be a finite number > 0; got {value!r}")
    return float(value)


def column_count(X):
    """The number of columns of array-like ``X`` without converting it (1 for a vector)."""
    shape = getattr(X, "shape", None)
    return shape[1] if shape is not None and len(shape) == 2 else 1


def _to_tensor(a, dtype, what):
    if isinstance(a, torch.Tensor):
        t = a.detach().to(dtype)
    else:
        try:
            t = torch.as_tensor(np.array(a, dtype=np.float64), dtype=dtype)
        except (TypeError, ValueError) as e:
            raise TypeError(f"Expected {what} to be an array of numbers; got {type(a).__name__}"
                            f" ({e})") from None
    return t


def as_inputs(X, input_names=None, dtype=torch.float64, what="X"):
    """Check inputs and return ``(X, input_names)``.

    :param X: array-like ``(N, d)`` (a 1-D array is read as ``(N, 1)``).
    :param input_names: names of the ``d`` columns; default the columns of a table (a
        ``pandas.DataFrame``), else ``("x0", "x1", ...)``.
    :returns: a ``(N, d)`` tensor and a tuple of ``d`` names.
    """
    if input_names is None and getattr(X, "columns", None) is not None:
        input_names = tuple(str(c) for c in X.columns)
    X = _to_tensor(X, dtype, what)
    if X.dim() == 1:
        X = X.unsqueeze(-1)
    if input_names is not None:
        input_names = (input_names,) if isinstance(input_names, str) else tuple(input_names)
        if len(set(input_names)) != len(input_names):
            raise ValueError(f"Expected distinct input names; got {input_names}")
    d = X.shape[-1] if X.dim() == 2 else (len(input_names) if input_names else "d")
    if X.dim() != 2:
        raise ValueError(f"Expected {what} to have shape (N, {d})"
                         + (f" for inputs {input_names}" if input_names else "")
                         + f"; got {tuple(X.shape)}")
    if input_names is None:
        input_names = tuple(f"x{j}" for j in range(X.shape[1]))
    if X.shape[1] != len(input_names):
        raise ValueError(f"Expected {what} to have shape (N, {len(input_names)}) for inputs "
                         f"{input_names}; got {tuple(X.shape)}")
    if X.shape[0] == 0:
        raise ValueError(f"Expected at least one row in {what}; got shape {tuple(X.shape)}")
    bad = ~torch.isfinite(X)
    if bad.any():
        rows = torch.nonzero(bad.any(-1)).flatten()[:5].tolist()
        raise ValueError(f"Expected finite values in {what}; got NaN/inf in {int(bad.sum())} "
                         f"entries (first rows: {rows})")
    return X, input_names


def as_targets(y, N, dtype=torch.float64, what="y"):
    """Check targets and return a ``(N,)`` tensor (``(N, 1)`` is accepted)."""
    y = _to_tensor(y, dtype, what)
    if y.dim() == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.dim() != 1 or y.shape[0] != N:
        raise ValueError(f"Expected {what} to have shape ({N},) to match X; got {tuple(y.shape)}")
    bad = ~torch.isfinite(y)
    if bad.any():
        rows = torch.nonzero(bad).flatten()[:5].tolist()
        raise ValueError(f"Expected finite values in {what}; got NaN/inf in {int(bad.sum())} "
                         f"entries (first rows: {rows})")
    return y


def equation_input_names(X, input_names, equation):
    """The input names of data ``X`` for a model of ``equation``: ``input_names`` when
    given; ``None`` for a table (a ``pandas.DataFrame``: :func:`as_inputs` names its
    columns); the equation's one input when ``X`` has one column; otherwise ``None`` (the
    default ``x0, x1, ...``) or, when ``X`` has as many columns as the equation has inputs,
    an error asking for them: the column order is never guessed."""
    if input_names is not None or getattr(X, "columns", None) is not None:
        return input_names
    ncol = column_count(X)
    inputs = equation.inputs
    if inputs is not None and len(inputs) == 1 and ncol == 1:
        return inputs
    if inputs is not None and ncol == len(inputs):
        raise ValueError(f"Expected input_names for the {ncol} columns of X (the equation "
                         f"uses {inputs}; the column order cannot be guessed)")
    return None


def without_repeats(X, y, what="the data"):
    """``(X, y)`` with every row that repeats an earlier one exactly (the same inputs and the
    same value: one measurement given twice) kept once, with a one-line warning. A repeat
    is not a new measurement: kept, twice the same value tells a GP the noise is zero there
    (the README's oscillator with every row given twice ended at omega 2.34 and zeta 0.0025,
    its noise held at the floor). Replicates (the same inputs, another value) stay: they
    are what tells noise from signal."""
    if X.shape[0] < 2:
        return X, y
    rows = torch.cat([X, y[:, None]], 1)
    unique, inverse = torch.unique(rows, dim=0, return_inverse=True)
    if unique.shape[0] == rows.shape[0]:
        return X, y
    first = torch.full((unique.shape[0],), rows.shape[0], dtype=torch.long)
    first = first.scatter_reduce(0, inverse, torch.arange(rows.shape[0]), reduce="amin")
    keep = first.sort().values
    warn(f"{rows.shape[0] - keep.numel()} of the {rows.shape[0]} rows of {what} repeat an "
         f"earlier row exactly (the same inputs and value): each is kept once")
    return X[keep], y[keep]


def distinct_inputs(X):
    """The number of distinct rows of ``X``."""
    return int(torch.unique(X, dim=0).shape[0]) if X.shape[0] else 0


class UnfittedModelWarning(UserWarning):
    """A model that was never fitted is asked for a prediction."""


def warn_if_interrupted(model):
    """One warning when ``model``'s last fit did not finish (interrupted, or stopped by a
    divergence): its parameters are where the fit stopped, not an optimum; and one, the
    first time only, when it was never fitted by :func:`~pyro_pidkl.fit` (its parameters
    are their starting values)."""
    if getattr(model, "fit_interrupted", False):
        warn(f"The last fit of {type(model).__name__} did not finish (interrupted or "
             f"diverged): it predicts from where the fit stopped; fit it again")
    elif not hasattr(model, "fit_interrupted") and not model.__dict__.get("_warned_unfitted"):
        model.__dict__["_warned_unfitted"] = True
        warn(f"{type(model).__name__} was never fitted by pk.fit: it predicts with its "
             f"parameters at their starting values (fit it first; after your own training "
             f"loop, set model.fit_interrupted = False)", UnfittedModelWarning)
