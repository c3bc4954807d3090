r"""Checking and standardising training data.

The GP lives on standardised inputs :math:`u = (x - m_x) / s_x` and outputs
:math:`(y - m_y) / s_y`; :class:`Standardizer` holds the four statistics and maps both ways,
so that equations and predictions can stay in the user's units.
"""

import numpy as np
import torch
from torch import nn

__all__ = ["Standardizer", "as_inputs", "as_targets"]


def _to_tensor(a, dtype, what):
    if isinstance(a, torch.Tensor):
        t = a.detach().to(dtype)
    else:
        try:
            t = torch.as_tensor(np.asarray(a, dtype=np.float64), dtype=dtype)
        except (TypeError, ValueError) as e:
            raise TypeError(f"Expected {what} to be an array of numbers; got {type(a).__name__}"
                            f" ({e})") from None
    return t


def as_inputs(X, input_names=None, dtype=torch.float64, what="X"):
    """Check inputs and return ``(X, input_names)``.

    :param X: array-like ``(N, d)`` (a 1-D array is read as ``(N, 1)``).
    :param input_names: names of the ``d`` columns; default ``("x0", "x1", ...)``.
    :returns: a ``(N, d)`` tensor and a tuple of ``d`` names.
    """
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


class Standardizer(nn.Module):
    r"""Affine maps between the user's units and the model's standardised units.

    .. math:: u = (x - m_x) / s_x, \qquad f = m_y + s_y\, f_s(u)

    Columns with zero spread (a single point, or a constant covariate) keep scale 1.

    :param torch.Tensor X: ``(N, d)`` training inputs.
    :param torch.Tensor y: ``(N,)`` training targets.
    :param bool standardize: when False all four statistics are the identity.
    """

    def __init__(self, X, y, standardize=True):
        super().__init__()
        if standardize:
            x_loc, x_scale = X.mean(0), X.std(0, unbiased=False)
            y_loc, y_scale = y.mean(), y.std(unbiased=False)
        else:
            x_loc, x_scale = torch.zeros_like(X[0]), torch.ones_like(X[0])
            y_loc, y_scale = torch.zeros_like(y[0]), torch.ones_like(y[0])
        x_scale = torch.where(x_scale > 0, x_scale, torch.ones_like(x_scale))
        y_scale = torch.where(y_scale > 0, y_scale, torch.ones_like(y_scale))
        self.register_buffer("x_loc", x_loc)
        self.register_buffer("x_scale", x_scale)
        self.register_buffer("y_loc", y_loc)
        self.register_buffer("y_scale", y_scale)

    def x_to_model(self, X):
        """``(..., d)`` user inputs to standardised inputs."""
        return (X - self.x_loc) / self.x_scale

    def y_to_model(self, y):
        """Targets to standardised targets."""
        return (y - self.y_loc) / self.y_scale

    def f_to_user(self, f):
        """Standardised function values to the user's units."""
        return self.y_loc + self.y_scale * f

    def var_to_user(self, var):
        """Standardised variances to the user's units."""
        return var * self.y_scale ** 2
