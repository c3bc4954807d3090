r"""Standardising training data.

The GP lives on standardised inputs :math:`u = (x - m_x) / s_x` and outputs
:math:`(y - m_y) / s_y`; :class:`Standardizer` holds the four statistics and maps both ways,
so that equations and predictions can stay in the user's units.
"""

import torch
from torch import nn

__all__ = ["Standardizer"]


class Standardizer(nn.Module):
    r"""Affine maps between the user's units and the model's standardised units.

    .. math:: u = (x - m_x) / s_x, \qquad f = m_y + s_y\, f_s(u)

    Columns with zero spread (a single point, or a constant covariate) keep scale 1.
    Targets whose spread is below ``1e-8`` of their largest magnitude (constant, or
    constant up to rounding: boundary values such as :math:`\sin \pi` computed in floating
    point) are not divided by that spread, which would blow rounding up to the data's
    scale: they are centred and scaled by their largest magnitude (1 when all are zero),
    and ``y_degenerate`` is set.

    :param torch.Tensor X: ``(N, d)`` training inputs.
    :param torch.Tensor y: ``(N,)`` training targets.
    :param bool standardize: when False all four statistics are the identity.
    :param x_loc: ``(d,)`` input centre overriding the data's mean (e.g. a domain's centre).
    :param x_scale: ``(d,)`` input scale overriding the data's spread.
    """

    def __init__(self, X, y, standardize=True, x_loc=None, x_scale=None):
        super().__init__()
        self.y_degenerate = False
        if standardize:
            x_loc = X.mean(0) if x_loc is None else torch.as_tensor(x_loc).to(X)
            x_scale = X.std(0, unbiased=False) if x_scale is None else \
                torch.as_tensor(x_scale).to(X)
            y_loc, y_scale = y.mean(), y.std(unbiased=False)
            size = y.abs().max()
            if not bool(y_scale > 1e-8 * size):
                self.y_degenerate = True
                y_scale = size if bool(size > 0) else torch.ones_like(size)
        else:
            x_loc, x_scale = torch.zeros_like(X[0]), torch.ones_like(X[0])
            y_loc, y_scale = torch.zeros_like(y[0]), torch.ones_like(y[0])
        x_scale = torch.where(x_scale > 0, x_scale, torch.ones_like(x_scale))
        y_scale = torch.where(y_scale > 0, y_scale, torch.ones_like(y_scale))
        self.register_buffer("x_loc", x_loc)
        self.register_buffer("x_scale", x_scale)
        self.register_buffer("y_loc", y_loc)
        self.register_buffer("y_scale", y_scale)
        self._derivative_scales = {}   # derivative_scale's, by index list, device and dtype

    def x_to_model(self, X):
        """``(..., d)`` user inputs to standardised inputs."""
        return (X - self.x_loc) / self.x_scale

    def y_to_model(self, y):
        """Targets to standardised targets."""
        return (y - self.y_loc) / self.y_scale

    def f_to_user(self, f):
        """Standardised function values to the user's units."""
        return self.y_loc + self.y_scale * f

    def derivative_scale(self, indices):
        r""":math:`c_\alpha = s_y / \prod_{a \in \alpha} s_{x,a}` for each derivative index
        tuple :math:`\alpha` of ``indices`` (``(n,)``, not differentiated), so that
        :math:`\partial^\alpha f = c_\alpha\, \partial^\alpha_u f_s`. Kept per index
        list, device and dtype: the statistics do not change after construction."""
        key = (tuple(indices), self.x_scale.device, self.x_scale.dtype)
        if key not in self._derivative_scales:
            with torch.no_grad():
                self._derivative_scales[key] = torch.stack(
                    [self.y_scale / torch.prod(self.x_scale[list(i)]) for i in indices])
        return self._derivative_scales[key]

    def var_to_user(self, var):
        """Standardised variances to the user's units."""
        return var * self.y_scale ** 2
