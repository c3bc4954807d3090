r"""Held-out scores of a Gaussian predictive :math:`\mathcal{N}(\hat y_i, s_i^2)`.

* ``rmse``: :math:`\sqrt{\tfrac1n \sum_i (\hat y_i - y_i)^2}`
* ``nrmse``: :math:`\mathrm{RMSE} / \mathrm{sd}(y)` (the paper's code);
* ``relative_l2_error``: :math:`\|\hat y - y\|_2 / \|y\|_2`
* ``test_log_predictive_density``: :math:`\tfrac1n \sum_i \log \mathcal{N}(y_i \mid \hat y_i, s_i^2)`
* ``coverage``: fraction of :math:`y_i` inside the central ``level`` interval
* ``crps``: mean continuous ranked probability score (lower is better; in units of y)
"""

import math

import torch

__all__ = ["coverage", "crps", "nrmse", "relative_l2_error", "rmse",
           "test_log_predictive_density"]


def _t(a):
    return torch.as_tensor(a, dtype=torch.float64).reshape(-1)


def rmse(mean, y):
    """Root mean squared error."""
    return float((_t(mean) - _t(y)).pow(2).mean().sqrt())


def nrmse(mean, y):
    r"""Normalised RMSE, :math:`\mathrm{RMSE} / \mathrm{sd}(y)` (the population standard
    deviation of the targets), as the paper's code computes it: 1 is the error of predicting
    the targets' mean everywhere."""
    return rmse(mean, y) / float(_t(y).std(unbiased=False))


def relative_l2_error(mean, y):
    r"""Relative L2 error :math:`\|\mu - y\| / \|y\|` (depends on the targets' offset)."""
    return float((_t(mean) - _t(y)).norm() / _t(y).norm())


def test_log_predictive_density(mean, var, y):
    """Mean log density of ``y`` under independent normals ``N(mean, var)``."""
    mean, var, y = _t(mean), _t(var), _t(y)
    return float((-0.5 * (y - mean).pow(2) / var - 0.5 * torch.log(2 * math.pi * var)).mean())


def coverage(mean, var, y, level=0.95):
    """Fraction of ``y`` inside the central ``level`` interval of ``N(mean, var)``."""
    if not 0 < level < 1:
        raise ValueError(f"Expected 0 < level < 1; got {level}")
    z = math.sqrt(2) * torch.special.erfinv(torch.tensor(level, dtype=torch.float64))
    mean, var, y = _t(mean), _t(var), _t(y)
    return float(((y - mean).abs() <= z * var.sqrt()).double().mean())


def crps(mean, var, y):
    r"""Mean continuous ranked probability score of ``y`` under ``N(mean, var)``.

    .. math::

        \mathrm{CRPS}(F, y) = \int (F(x) - \mathbf 1[x \ge y])^2 \, dx
        = s \left[z (2\Phi(z) - 1) + 2 \varphi(z) - \tfrac{1}{\sqrt\pi}\right],
        \quad z = \frac{y - \hat y}{s}

    (Gneiting and Raftery 2007). A proper score in the units of y: it reduces to the
    absolute error for a point forecast and, unlike the log score, grows linearly (not
    logarithmically) with an interval that is wider than it needs to be.
    """
    mean, var, y = _t(mean), _t(var), _t(y)
    s = var.sqrt()
    z = (y - mean) / s
    normal = torch.distributions.Normal(torch.zeros((), dtype=torch.float64),
                                        torch.ones((), dtype=torch.float64))
    value = s * (z * (2 * normal.cdf(z) - 1) + 2 * normal.log_prob(z).exp()
                 - 1 / math.sqrt(math.pi))
    return float(value.mean())
