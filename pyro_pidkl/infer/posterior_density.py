r"""The posterior density over a fitted conditioned model's parameters, as the samplers of
:mod:`~pyro_pidkl.infer.nuts` see it: the equation's learned coefficients :math:`\theta`
and, by default, the GP's own scalar parameters :math:`\eta` that the objective identifies
(those it leaves flat, a noise at its floor, are held at their fitted values).

.. math::
    \log p(\theta, \eta \mid y) = \log p(y \mid v, \theta, \eta) + \log p(\theta)
        + \log p(\eta) + \text{const},

:math:`\log p(y \mid v, \theta, \eta)` (or :math:`\log p(v, y \mid \theta, \eta)` with the
joint objective) at the Gauss-Newton solution for each point, profiled over the kernel's
variance; :math:`p(\theta)` the coefficients' priors (``Parameter(1.0,
prior=dist.LogNormal(0, 1))``; a coefficient without one has a flat prior on its
unconstrained scale, the log of a positive one) and :math:`p(\eta)` the model's ``priors``.
A GP parameter drawn without a prior of the model's gets a weak one
(:func:`default_prior`): flat on the log scale, a noise would pile its mass at its floor
(where the data are interpolated exactly, a region the likelihood barely penalises and the
log scale makes vast) and a lengthscale could run off to where the GP is constant. The
density is written on :math:`z`, the unconstrained parameters whitened by their Laplace
covariance at the fit, :math:`u = \hat u + L z`, with the log-Jacobian of a constraint added
for a parameter with a prior (:meth:`PosteriorTarget.potential`).
"""

import math

import pyro
import torch

from ..param_scope import shared_store
from .laplace import PRIOR_SD, parameters_at

__all__ = ["DEFAULT_PRIORS", "PosteriorTarget", "default_prior"]


class PosteriorTarget:
    r"""The parameters a sampler draws: ``names``, unconstrained ``tensors``, their
    ``constraints``, ``priors`` (``None``: flat on the unconstrained scale) and ``sizes``;
    ``start`` the flat unconstrained values at the fit and ``L`` ``(p, p)`` the Cholesky
    factor of their Laplace covariance there (``0.1 I`` where it is not finite); ``extra``
    ``{entry: prior}`` the default priors (:func:`default_prior`) that the model's objective
    lacks. Refused in one line for another model, an unfitted one or one without learned
    coefficients."""

    def __init__(self, model, hyperparameters=True):
        if not hasattr(model, "_laplace_parameters") or not hasattr(model, "_coefficients"):
            raise TypeError(f"Expected a PhysicsConditionedGP or ConditionedSystemGP; got "
                            f"{type(model).__name__}")
        if not bool(getattr(model, "fitted", False)):
            raise ValueError("Expected a fitted model: call pk.fit(model) first (the samplers "
                             "start where the fit ended)")
        coefficients = model._coefficients()
        if not coefficients:
            raise ValueError("Expected a model with learned coefficients; it has none")
        self.model = model
        self.extra = {}
        entries = [(name, getattr(owner, p + "_unconstrained"), owner.specs[p].constraint,
                    owner.specs[p].prior) for name, owner, p in coefficients]
        self.num_coefficients = len(entries)
        _, _, eta = model._laplace_parameters(True)
        offsets, k = {}, sum(t.numel() for _, t, _, _ in entries)
        for q in eta:                      # where each GP parameter sits in the Laplace vector
            offsets[id(q)] = k
            k += q.numel()
        rows = list(range(sum(t.numel() for _, t, _, _ in entries)))
        if hyperparameters:
            cov = _laplace(model, True)
            for name, owner, attr in model.hyperparameters():
                q = owner._parameters[attr + "_unconstrained"]
                idx = list(range(offsets[id(q)], offsets[id(q)] + q.numel()))
                if bool((cov.diagonal()[idx] > 0).all()):  # identified; else held at the fit
                    prior = model.priors.get(name)
                    if prior is None:       # not in the model's objective: added here
                        prior = default_prior(name, q)
                        self.extra[len(entries)] = prior
                    entries.append((name, q, owner._pyro_params[attr][0], prior))
                    rows += idx
        else:
            cov = _laplace(model, False)
        self.names = [e[0] for e in entries]
        self.tensors = [e[1] for e in entries]
        self.constraints = [e[2] for e in entries]
        self.priors = [e[3] for e in entries]
        self.sizes = [t.numel() for t in self.tensors]
        self.start = torch.cat([t.detach().reshape(-1) for t in self.tensors])
        self.L = _whitening(cov[rows][:, rows], self.start)

    def values(self, u):
        """The flat unconstrained ``u`` as a list of tensors shaped like ``tensors``."""
        return [v.reshape(t.shape).clone() for v, t in zip(torch.split(u, self.sizes),
                                                             self.tensors)]

    def potential(self, z):
        """The negative log density at whitened ``z`` (differentiable in ``z``)."""
        return _Potential.apply(self.start + self.L @ z, self)

    def value(self, u):
        """The negative log density at unconstrained ``u`` (a float, no gradient)."""
        values = self.values(u.detach())
        with torch.no_grad(), pyro.poutine.block(), shared_store(), \
                parameters_at(self.tensors, values):
            return float(_negative_log_density(self, self.model._potential()))


#: the default priors of the GP's parameters that the samplers draw, in the model's units
#: (inputs scaled to the domain's spread, noises and variances relative to the signal's):
#: wide on the log scale (two standard deviations: a factor of 20 either way for a
#: lengthscale, 55 for a noise or a variance)
DEFAULT_PRIORS = {"lengthscale": (0.0, 1.5), "noise": (math.log(1e-2), 2.0),
                  "variance": (0.0, 2.0)}


def default_prior(name, tensor):
    r"""The weak prior a sampler gives the GP parameter ``name`` drawn without one of the
    model's: LogNormal with the location and scale of :data:`DEFAULT_PRIORS` by the name's
    last part (``"kernel.lengthscale"`` :math:`\to` lengthscale), or ``None`` (flat on the
    unconstrained scale) for another (an unobserved output's mean)."""
    import pyro.distributions as dist
    kind = name.rsplit(".", 1)[-1]
    if kind not in DEFAULT_PRIORS:
        return None
    loc, scale = DEFAULT_PRIORS[kind]
    return dist.LogNormal(torch.tensor(loc, dtype=tensor.dtype),
                          torch.tensor(scale, dtype=tensor.dtype))


def _laplace(model, nuisance):
    """The Laplace covariance at the fit, over the coefficients (and the GP's parameters
    with ``nuisance``), under the weak prior where the data leave a coefficient free."""
    cov = model.laplace(nuisance=nuisance)[3]
    if not bool(torch.isfinite(cov).all()):
        cov = model.laplace(nuisance=nuisance, prior_sd=PRIOR_SD)[3]
    return cov.detach()


def _whitening(cov, start):
    """A Cholesky factor of ``cov``, or ``0.1 I`` where it is not finite."""
    try:
        L = torch.linalg.cholesky(0.5 * (cov + cov.T))
        if bool(torch.isfinite(L).all()):
            return L
    except (RuntimeError, ValueError):
        pass
    return 0.1 * torch.eye(start.numel(), dtype=start.dtype)


def _negative_log_density(target, loss):
    """The model's negative objective ``loss`` with, for each parameter with a prior, the
    log-Jacobian of its constraint and a default prior the objective lacks."""
    for k, (t, constraint, prior) in enumerate(zip(target.tensors, target.constraints,
                                                   target.priors)):
        if prior is not None:          # log |d value / d u| of the constraint
            transform = torch.distributions.transform_to(constraint)
            value = transform(t)
            loss = loss - transform.log_abs_det_jacobian(t, value).sum()
            if k in target.extra:      # a default prior, not in the objective
                loss = loss - prior.log_prob(value).sum()
    return loss


class _Potential(torch.autograd.Function):
    """The potential at unconstrained ``u`` with its gradient from the model's own autograd
    (the model's tensors are swapped to ``u``, not written)."""

    @staticmethod
    def forward(ctx, u, target):
        values = [v.requires_grad_(True) for v in target.values(u.detach())]
        # blocked and in the store as it is: the model's sites must not enter an SVI trace
        # around it, and a scope's save and restore inside the SVI step would replace the
        # guide's constrained parameters by plain tensors (every nonlinear model failed)
        with torch.enable_grad(), pyro.poutine.block(), shared_store(), \
                parameters_at(target.tensors, values):
            loss = _negative_log_density(target, target.model._potential())
            grads = torch.autograd.grad(loss, target.tensors, allow_unused=True)
        ctx.grad = torch.cat([(g if g is not None else torch.zeros_like(t)).reshape(-1)
                              for g, t in zip(grads, target.tensors)])
        return loss.detach()

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.grad, None
