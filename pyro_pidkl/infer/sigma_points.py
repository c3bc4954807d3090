r"""The sigma points of a fitted model's parameters (:mod:`~pyro_pidkl.infer.laplace`'s
module docstring): :math:`[\theta; \eta]` moved by :math:`\pm\sqrt{\lambda_k} v_k` along
each principal direction of their joint Laplace covariance :math:`C`, and the model's
Gauss-Newton solution at each, so that a prediction can add the spread of the posterior
means, :math:`\sum_k \big((\mu_k^+ - \mu_k^-)/2\big)^2`, to its variance.
"""

import torch

from ..checks import warn
from .laplace import PRIOR_SD, _has_priors, _hessian, laplace_covariance, parameters_at

__all__ = ["sigma_points"]


def sigma_points(model):
    r"""The model's Gauss-Newton solutions at the sigma points (module docstring):
    ``[((values+, joint+), (values-, joint-)), ...]``, ``values`` the unconstrained
    :math:`[\theta; \eta]` of the point, one pair per identified direction of the joint
    covariance. Empty without learned coefficients; a coefficient that is not identified
    (an infinite interval) leaves them out, with a warning, and so does a direction whose
    sigma points cannot be solved."""
    from ..errors import ConvergenceWarning, NonFiniteError, NotPositiveDefiniteError
    names, theta, eta = model._laplace_parameters(True)
    if not names:
        return []
    params, p = theta + eta, sum(t.numel() for t in theta)
    _, _, H, cov, P0 = _hessian(model, True, None if _has_priors(model) else PRIOR_SD)
    if not bool(torch.isfinite(cov[:p, :p]).all()):
        warn("A learned coefficient is not identified by the data and the equation, even "
             "under the weak prior: the predictive variance leaves its uncertainty out",
             ConvergenceWarning)
        return []
    # the coefficients' own priors (declared, or the models' weak default) are in P0; a
    # model without them gets the weak prior here
    cov = laplace_covariance(H, p, prior_sd=None if _has_priors(model) else PRIOR_SD,
                             nuisance_prior_sd=PRIOR_SD, prior_precision=P0)
    finite = torch.isfinite(cov).all(1)
    cov = torch.where(finite[:, None] & finite[None, :], cov, torch.zeros_like(cov))
    lam, V = torch.linalg.eigh(0.5 * (cov + cov.T))
    keep = lam > 1e-14 * lam.abs().max().clamp(min=1e-300)
    # every identified direction of [theta; eta]: a move of sqrt(lam) v
    moves = [V[:, k] * lam[k].sqrt() for k in range(lam.shape[0]) if keep[k]]
    sizes = [q.numel() for q in params]
    out, failed = [], 0
    for move in moves:
        pair = []
        for sign in (1.0, -1.0):
            values = [(q.detach() + dq.reshape(q.shape)).clone()
                      for q, dq in zip(params, torch.split(sign * move, sizes))]
            with parameters_at(params, values):
                try:
                    pair.append((values, model._gauss_newton(model.f0)[0]))
                except (NonFiniteError, NotPositiveDefiniteError):
                    break
        if len(pair) == 2:
            out.append(tuple(pair))
        else:
            failed += 1
    if failed:
        warn(f"{failed} of {len(moves)} directions of the parameters' uncertainty could not be "
             "solved at their sigma points (the joint covariance did not factor there): the "
             "predictive variance leaves them out", ConvergenceWarning)
    return out
