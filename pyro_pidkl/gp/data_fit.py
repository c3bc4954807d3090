r"""An SE-ARD GP on the data alone, fitted in a few L-BFGS-B steps: where a physics fit
starts, and whether the data show noise at all.

On standardised inputs :math:`U` and targets :math:`y`,

.. math::
    y \sim \mathcal{N}\big(0, s^2 (R_l(U, U) + \nu I)\big), \qquad
    \max_{s^2} \log p(y) = -\tfrac N2 \log\frac{y^\top (R + \nu I)^{-1} y}{N}
        - \tfrac12 \log|R + \nu I| - \tfrac N2 (1 + \log 2\pi),

maximised over the lengthscales :math:`l` and the noise ratio :math:`\nu` (above a floor).
Data that a smooth function interpolates (boundary values of a PDE, say) drive
:math:`\nu` to its floor; noisy data do not.
"""

import math

import numpy as np
import scipy.optimize
import torch

__all__ = ["DataFit", "fit_data_only"]


class DataFit:
    """What :func:`fit_data_only` found: ``lengthscale`` ``(d,)``, ``noise_ratio``
    :math:`\\nu`, ``log_likelihood`` (profiled), ``exact`` (a noise ratio below ``1e-6``, a
    noise standard deviation under 0.1% of the signal's: the data look exact)."""

    def __init__(self, lengthscale, noise_ratio, log_likelihood):
        self.lengthscale, self.noise_ratio = lengthscale, noise_ratio
        self.log_likelihood, self.exact = log_likelihood, noise_ratio <= 1e-6

    def __repr__(self):
        return (f"DataFit(lengthscale={self.lengthscale.tolist()}, noise_ratio="
                f"{self.noise_ratio:.3g}, exact={self.exact})")


def _profiled(U, y, log_ell, log_nu):
    P = U / log_ell.exp()
    r2 = ((P * P).sum(-1, keepdim=True) - 2 * P @ P.T + (P * P).sum(-1)).clamp(min=0)
    eye = torch.eye(U.shape[0], dtype=U.dtype)
    K = torch.exp(-0.5 * r2) + log_nu.exp() * eye
    L, info = torch.linalg.cholesky_ex(K)
    jitter = 1e-10
    while bool(info) and jitter < 1e-4:           # rounding at long lengthscales
        L, info = torch.linalg.cholesky_ex(K + jitter * eye)
        jitter *= 10
    if bool(info):
        raise RuntimeError("not positive definite")
    w = torch.linalg.solve_triangular(L, y[:, None], upper=False)[:, 0]
    N = y.shape[0]
    return (-0.5 * N * torch.log(w.pow(2).sum() / N) - L.diagonal().log().sum()
            - 0.5 * N * (1 + math.log(2 * math.pi)))


def fit_data_only(U, y, noise_floor=1e-10, lengthscale=1.0, max_iter=100):
    r"""Fit the SE-ARD GP of the module docstring to ``(U, y)`` (standardised, ``(N, d)``
    and ``(N,)``), from ``lengthscale`` (the same in every input) and a noise ratio of
    ``1e-2``; given several lengthscales, from each, the best optimum kept. One start can
    end at "all noise": from a lengthscale of 1, twenty yearly counts of a cycle ten years
    long ended at a noise ratio of 1e3, whose profiled likelihood does not depend on the
    data (:meth:`~pyro_pidkl.models.conditioning.linearised.LinearisedConditioning.adequacy` compares
    with the best of several starts).

    :returns: a :class:`DataFit`; ``None`` when the data are too few (``N < 3``) or every
        start fails.
    """
    best = None
    for ell in ([lengthscale] if isinstance(lengthscale, (int, float)) else lengthscale):
        found = _fit_from(U, y, noise_floor, float(ell), max_iter)
        if found is not None and (best is None or found.log_likelihood > best.log_likelihood):
            best = found
    return best


def _fit_from(U, y, noise_floor, lengthscale, max_iter):
    """:func:`fit_data_only` from one start."""
    U, y = U.detach(), y.detach()
    N, d = U.shape
    if N < 3:
        return None
    floor = math.log(max(noise_floor, 1e-8))     # far below what counts as exact (1e-6)

    def fun(x):
        z = torch.as_tensor(x, dtype=U.dtype).requires_grad_(True)
        try:
            with torch.enable_grad():
                value = -_profiled(U, y, z[:d], z[d])
                (grad,) = torch.autograd.grad(value, z)
        except RuntimeError:                     # a failed Cholesky at a trial point
            return 1e10, np.zeros_like(x)
        value = float(value.detach())
        if not (math.isfinite(value) and bool(torch.isfinite(grad).all())):
            return 1e10, np.zeros_like(x)
        return value, grad.numpy()

    x0 = np.array([math.log(lengthscale)] * d + [math.log(1e-2)])
    bounds = [(math.log(1e-3), math.log(1e3))] * d + [(floor, math.log(1e3))]
    try:
        res = scipy.optimize.minimize(fun, x0, jac=True, method="L-BFGS-B", bounds=bounds,
                                      options={"maxiter": max_iter})
    except (ValueError, RuntimeError):
        return None
    if not math.isfinite(res.fun) or res.fun >= 1e10:
        return None
    nu = math.exp(res.x[d])
    return DataFit(torch.as_tensor(np.exp(res.x[:d]), dtype=U.dtype), nu, -float(res.fun))
