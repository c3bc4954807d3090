r"""An exact ODE fit moved from its least-squares answer to the optimum of the model's own
negative log posterior (declared priors, a user's added factors), which least squares with
normal priors cannot carry (:func:`move_to_posterior`)."""

import dataclasses
import math

import numpy as np
import torch

from .exact_fit import _laplace, trajectory_nll

__all__ = ["move_to_posterior"]


def move_to_posterior(found, ode, observations, t0, t1, scale, cost, density, known=None):
    r"""A least-squares exact fit moved to the optimum of the model's negative log posterior:
    the data's profiled negative log-likelihood plus ``density`` (what the model adds: a
    declared prior, a user's factor), which least squares with normal priors cannot carry.

    The likelihood is taken as the quadratic of its Laplace precision :math:`A` at the
    least-squares answer :math:`\hat	heta` (the coefficients' marginal, the initial state
    profiled), and Newton's method minimises
    :math:`	frac12 (	heta - \hat	heta)^	op A (	heta - \hat	heta) + d(	heta)` with
    ``density``'s exact derivatives; the true ``cost(theta)`` then chooses the step along
    :math:`\hat	heta 	o 	heta^*` (a bounded line search), and the Laplace covariance is
    taken again there with :math:`d`'s curvature as the prior precision.

    :param found: an :class:`ExactFit` fitted without the added density.
    :param cost: ``theta -> float``: the true negative log posterior (``inf`` where the
        integration fails).
    :param density: ``theta -> (value, grad (P,), hessian (P, P))`` of :math:`d`.
    :returns: an :class:`ExactFit` (``extra["posterior"]`` True where it moved); ``found``
        itself where a coefficient is at its bound, one is not identified, or no step
        improves ``cost``."""
    import scipy.optimize
    P = len(found.names)
    if P == 0 or found.boundary or not np.isfinite(found.cov[:P, :P]).all():
        return found
    start = np.asarray(found.theta, dtype=float)
    _, _, H0 = density(start)
    A = np.linalg.inv(found.cov[:P, :P]) - H0           # the likelihood's own precision
    A = 0.5 * (A + A.T)

    def surrogate(theta):
        value, grad, H = density(theta)
        d = theta - start
        return 0.5 * d @ A @ d + value, A @ d + grad, A + H
    theta = start.copy()
    value, grad, H = surrogate(theta)
    for _ in range(30):
        try:
            step = np.linalg.solve(H, grad)
        except np.linalg.LinAlgError:
            break
        lam = 1.0
        while lam > 1e-4:
            trial = theta - lam * step
            new = surrogate(trial)
            if math.isfinite(new[0]) and new[0] <= value:
                break
            lam *= 0.5
        else:
            break
        theta, (value, grad, H) = trial, new
        if np.max(np.abs(lam * step)) < 1e-9:
            break

    def finite(alpha):
        v = cost(start + alpha * (theta - start))
        return float(v) if math.isfinite(v) else 1e300
    before = finite(0.0)
    line = scipy.optimize.minimize_scalar(finite, bounds=(0.0, 1.5), method="bounded",
                                          options={"xatol": 1e-3, "maxiter": 12})
    if not line.fun < before - 1e-9:
        return found
    theta = start + float(line.x) * (theta - start)
    values = {n: float(t(torch.tensor(v))) for n, t, v in zip(found.names, found.transforms,
                                                             theta)}
    nll, x0 = trajectory_nll(ode, observations, values, found.x0, t0, t1, scale, found.sd,
                             known=known)
    if not math.isfinite(nll):
        return found
    cov, identified, sd_hat = _laplace(ode, observations, list(zip(found.names,
                                                                   found.transforms)),
                                       np.r_[theta, np.asarray(x0) / found.scale], t0, t1,
                                       scale, found.sd, density(theta)[2], known)
    return dataclasses.replace(found, theta=theta, x0=np.asarray(x0, dtype=float),
                               nll=float(nll), cov=cov, identified=identified, sd=sd_hat,
                               extra={**found.extra, "posterior": True})
