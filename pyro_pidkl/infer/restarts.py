r"""Restarts of one fit: an equal-weight ensemble, or the restart with the best training
objective.

The collapsed PI-DKL objective has several optima on an extrapolation task (the learned
equation coefficients and the source kernel trade off against each other), and which one a
fit reaches depends on its random start. Two ways to use ``R`` restarts, neither of which
looks at held-out data:

* :class:`Ensemble`: the equal-weight mixture of the restarts' Gaussian predictives,
  reported as the Gaussian with the mixture's mean and variance (as deep ensembles are
  scored, Lakshminarayanan et al. 2017):

  .. math::

      \bar\mu = \frac1R \sum_r \mu_r, \qquad
      \bar v = \frac1R \sum_r (v_r + \mu_r^2) - \bar\mu^2 ;

* the restart whose training objective (the negative ELBO, estimated with many particles at
  the final parameters, :func:`training_objective`) is lowest.
"""

import pyro
import torch

from ..checks import positive_int
from .svi import default_elbo, fit
from .user_params import put_user_params

__all__ = ["Ensemble", "fit_restarts", "restart_seed", "training_objective"]


def restart_seed(seed, r):
    """The random seed of restart ``r`` of a fit seeded ``seed``: ``seed + 1000 r`` (restart 0
    is the single fit)."""
    return seed + 1000 * r


def training_objective(model, num_particles=64, seed=0):
    r"""The negative ELBO of a fitted ``model`` at its current parameters, averaged over
    ``num_particles`` draws of the model's sample sites (``Z``, ``eps``): the objective
    restarts are compared by. Reproducible for a given ``seed``; the caller's random state
    and param store are left as they were; no gradients are kept.

    :returns: a float (lower is better).
    """
    elbo = default_elbo(model, num_particles, vectorize_particles=num_particles > 1)
    # an empty scope of the global param store: the model's own parameters, and whatever
    # the store held (another model's fit, say) is back afterwards; the random state too
    with pyro.get_param_store().scope(), pyro.poutine.seed(rng_seed=seed), \
            torch.enable_grad():  # the physics term differentiates the posterior draw
        put_user_params(model)    # a user's pyro.param sites, as the fit left them
        value = elbo.differentiable_loss(model.model, model.guide)
    return float(value.detach())


class Ensemble:
    """The equal-weight mixture of fitted models' predictives, moment-matched to a Gaussian.

    :param members: fitted models; each maps ``X`` ``(n, d)`` to ``(mean, var)`` of shape
        ``(n,)`` with ``model(X, noiseless=...)``.
    """

    def __init__(self, members):
        members = list(members)
        if not members:
            raise ValueError("Expected at least one fitted model in an Ensemble; got none")
        self.members = members

    def __len__(self):
        return len(self.members)

    def __call__(self, X, noiseless=True, full_cov=False):
        """Mean ``(n,)`` and variance ``(n,)`` (or covariance ``(n, n)`` with ``full_cov``) of
        the mixture at ``X``, of f, or of y when ``noiseless=False``."""
        outs = [m(X, noiseless=noiseless, full_cov=full_cov) for m in self.members]
        mean = torch.stack([mu for mu, _ in outs]).mean(0)
        if full_cov:
            second = torch.stack([cov + mu[:, None] * mu[None, :] for mu, cov in outs])
            return mean, second.mean(0) - mean[:, None] * mean[None, :]
        second = torch.stack([var + mu.pow(2) for mu, var in outs])
        return mean, (second.mean(0) - mean.pow(2)).clamp_min(0)

    def noise_variance(self):
        """The members' noise variances, as a list."""
        return [m.noise_variance() for m in self.members]

    def equation_parameters(self):
        """Per equation parameter, the median over members (members without equation
        parameters are skipped); for an even number of members, the mean of the two middle
        values."""
        per = {}
        for m in self.members:
            if hasattr(m, "equation_parameters"):
                for k, v in m.equation_parameters().items():
                    per.setdefault(k, []).append(float(v))
        return {k: float(torch.tensor(v, dtype=torch.float64).quantile(0.5))
                for k, v in per.items()}

    def __repr__(self):
        return f"Ensemble({len(self)} x {type(self.members[0]).__name__})"


def _tensors(model):
    """``{id: name}`` of the tensors a model trains (parameters and buffers)."""
    named = list(model.named_parameters()) + list(model.named_buffers())
    return {id(t): name for name, t in named}


def _check_fresh(model, members, r):
    """Restarts must not share a trained tensor (e.g. one Equation object, whose unknown
    parameters would then carry over from one restart to the next)."""
    mine = _tensors(model)
    for k, other in enumerate(members):
        shared = sorted(mine[i] for i in set(mine) & set(_tensors(other)))
        if shared:
            raise ValueError(f"Expected build() to return a fresh model each call; restart {r} "
                             f"shares {shared[:3]} with restart {k}. Create everything the "
                             "model trains (its Equation, feature net, ...) inside build().")


def fit_restarts(build, restarts, seed=0, objective_particles=64, **fit_kwargs):
    r"""Fit ``restarts`` fresh models from ``build()``, restart ``r`` seeded with
    ``seed + 1000 r`` (restart 0 is the single fit with ``seed``).

    :param build: ``build() -> model`` (called after the restart's seed is set, so the
        network's initial weights differ between restarts).
    :param int restarts: ``R >= 1``.
    :param int objective_particles: particles of :func:`training_objective` (0 skips it).
    :param fit_kwargs: passed to :func:`~pyro_pidkl.infer.svi.fit`.
    :returns: ``(ensemble, results, objectives)``: an :class:`Ensemble` of the fitted
        models, their :class:`~pyro_pidkl.infer.svi.FitResult`\ s and training objectives.
    """
    restarts = positive_int(restarts, "restarts")
    members, results, objectives = [], [], []
    for r in range(int(restarts)):
        pyro.set_rng_seed(restart_seed(seed, r))
        model = build()
        _check_fresh(model, members, r)
        results.append(fit(model, **fit_kwargs))
        objectives.append(training_objective(model, objective_particles, seed=seed)
                          if objective_particles else float("nan"))
        members.append(model)
    return Ensemble(members), results, objectives
