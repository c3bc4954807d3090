r"""What a :class:`~pyro_pidkl.statespace.StateSpaceGP`'s predictions carry besides the
solver's own variance: the uncertainty of the coefficients, the initial state and the noise
(Laplace), by the delta method.
"""

import math

import numpy as np
import torch

from .fit import smoothed_values

__all__ = ["parameter_variance", "prediction_covariance"]


def prediction_covariance(model):
    r"""The covariance of :math:`v` that predictions carry: the Laplace one with a weak
    normal prior (sd :data:`~pyro_pidkl.infer.laplace.IDENTIFIED_PRIOR_SD` in the
    unconstrained space) on the coefficients and the initial state, so that a direction
    the data leave free adds a large but finite share instead of an infinite or a
    dropped one (negative curvature, where the fit ended on a saddle of such directions,
    counted as none); a held initial value adds none."""
    from ..infer.laplace import IDENTIFIED_PRIOR_SD
    H = model.result.hessian
    P, C = model.filter.P, model.filter.C
    if H is None or not np.isfinite(H).all():
        return np.zeros_like(model.result.cov)
    n = sum(len(t) for t, _ in model.observations)
    p = P + C - len(model.known)
    H = H * ((n - p) / n if n > p else 1.0)       # the n / (n - p) of the intervals
    # a fit that stopped on a ridge or a saddle of the free directions: their curvature
    # counted as none (the prior bounds them)
    lam, V = np.linalg.eigh(H)
    H = (V * np.clip(lam, 0.0, None)) @ V.T
    prior = np.zeros(len(H))
    prior[:P + C] = 1.0 / IDENTIFIED_PRIOR_SD ** 2
    free = [k for k in range(len(H)) if k - P not in model.known]
    cov = np.zeros_like(H)
    try:
        cov[np.ix_(free, free)] = np.linalg.inv(H[np.ix_(free, free)]
                                                + np.diag(prior[free]))
    except np.linalg.LinAlgError:
        return np.zeros_like(H)
    return cov

def parameter_variance(model, t_new):
    r"""The parameters' share of the predictive variance at times ``t_new`` ``(T, C)``
    (solver components, user units): :math:`J \Sigma J^\top` per time and component, with
    :math:`\Sigma` from :func:`prediction_covariance` and :math:`J` the mean's derivatives
    in :math:`v` by central differences (the linearisation point held)."""
    cov = prediction_covariance(model)
    v = model.result.v
    J = []
    for k in range(len(v)):
        if cov[k, k] <= 0:
            J.append(torch.zeros(len(t_new), model.filter.C, dtype=torch.float64))
            continue
        h = 1e-4 * max(1.0, math.sqrt(cov[k, k]))
        cols = []
        for sign in (1, -1):
            w = v.copy()
            w[k] += sign * h
            _, out = smoothed_values(model.filter, w, model.result.u_star)
            m, _ = model.filter.predict(out, t_new)
            cols.append((model.filter.E0 @ m[..., None])[..., 0])
        J.append((cols[0] - cols[1]) / (2 * h) * model.filter.scale)
    J = torch.stack(J, -1)                                             # (T, C, V)
    return torch.einsum("tcv,vw,tcw->tc", J, torch.as_tensor(cov), J).clamp(min=0.0)
