r"""What a conditioned model knows of its own parameters: the priors of its learned
coefficients and of its GPs' parameters, the Laplace approximation of both at the fitted
optimum, and what that uncertainty adds to a prediction.

The Laplace approximation is taken at the converged linearisation
(:func:`~pyro_pidkl.infer.laplace.laplace_parts`), its intervals read off by
:func:`~pyro_pidkl.infer.laplace.coefficient_intervals`. A prediction carries it by sigma
points (:func:`~pyro_pidkl.infer.sigma_points.sigma_points`): with :math:`\Sigma = \sum_k s_k
s_k^\top` the joint covariance of the parameters, the posterior mean :math:`\mu(\cdot)` is
recomputed at the parameters moved by :math:`\pm s_k`, and

.. math::
    \operatorname{var} f(x) \mathrel{+}= \sum_k \Bigl(\tfrac12 \bigl(\mu_{+s_k}(x) -
        \mu_{-s_k}(x)\bigr)\Bigr)^2

(:meth:`ParameterUncertainty._parameter_spread`).

:class:`ParameterUncertainty` is a mixin of
:class:`~pyro_pidkl.models.PhysicsConditionedGP` and
:class:`~pyro_pidkl.models.ConditionedSystemGP`, beside
:class:`~pyro_pidkl.models.conditioning.linearised.LinearisedConditioning` (whose ``solve()`` it reads).
The host provides ``_coefficients()``, ``_nuisance_parameters()``, ``joint``,
``linearise`` and the state ``fitted``, ``parameter_uncertainty``.
"""

import copy
import math
import warnings

import torch
from pyro.nn import PyroParam

from ...infer.laplace import (coefficient_intervals, laplace_covariance, laplace_parts,
                             parameters_at)
from ...infer.sigma_points import sigma_points
from ...param_scope import own_parameters
from .edits import edits_log_density
from .method_of_lines import widen_to_lines
from .resolution import unresolved_intervals

__all__ = ["COEFFICIENT_PRIOR_SD", "ParameterUncertainty", "default_coefficient_log_prior",
           "with_point_priors"]


def with_point_priors(equation):
    """The equation (or system), or a copy of it in which a coefficient declared with a
    prior is a parameter (its prior enters the objective: a MAP estimate, and the density
    that :func:`~pyro_pidkl.infer.nuts.sample_coefficients` samples), not a sample site."""
    if not any(spec.prior is not None and not spec.fixed for spec in equation.specs.values()):
        return equation
    equation = copy.deepcopy(equation)
    for name, spec in equation.specs.items():
        if spec.prior is not None and not spec.fixed:
            delattr(equation, name)
            setattr(equation, name, PyroParam(spec.init.clone(), spec.constraint))
    return equation


#: the standard deviation, on its unconstrained scale (the log of a positive coefficient),
#: of a learned coefficient's default prior about the value it is started at
COEFFICIENT_PRIOR_SD = 2.0


def default_coefficient_log_prior(spec, u):
    r"""The weak prior of a learned coefficient declared without one:
    :math:`u \sim \mathcal{N}(u_0, 2^2)` on its unconstrained scale, centred on the value
    it was given (:math:`u_0`, the user's guess): a factor :math:`e^2 \approx 7` per
    standard deviation for a positive coefficient. The data overrule it wherever they speak;
    where they do not, a flat prior on :math:`\log\theta` is improper and puts its mass at
    :math:`\theta \to 0`: a damping ran to 1e-7 on data that fit it 1.3 nats worse at the
    truth, its band missing the solution, and van der Pol's :math:`\mu` to 0 from 1 (the
    truth 1.5 a 64 nats better optimum). Declare a prior (``Parameter(..., prior=...)``)
    to state another."""
    u0 = torch.distributions.transform_to(spec.constraint).inv(spec.init.to(u))
    z = (u - u0) / COEFFICIENT_PRIOR_SD
    return (-0.5 * z.pow(2) - math.log(COEFFICIENT_PRIOR_SD * math.sqrt(2 * math.pi))).sum()



class ParameterUncertainty:
    """Priors, Laplace and the parameters' share of a prediction's variance, shared by the
    conditioned models (module docstring)."""

    def log_prior(self):
        r""":math:`\log p(\theta) + \log p(\eta)`: each learned coefficient's prior (its
        declared one, else the weak default of :func:`default_coefficient_log_prior`) and
        the GP's parameters' given ``priors``."""
        total = self.coefficient_log_prior()
        for name, owner, p in self.hyperparameters():
            prior = self.priors.get(name)
            if prior is not None:
                total = total + prior.log_prob(getattr(owner, p)).sum()
        return total

    def coefficient_log_prior(self):
        r""":math:`\log p(\theta)`: each learned coefficient's prior (its declared one, else
        the weak default of :func:`default_coefficient_log_prior`)."""
        total = 0.0
        for _, owner, p in self._coefficients():
            spec = owner.specs[p]
            if spec.prior is not None:
                total = total + spec.prior.log_prob(getattr(owner, p)).sum()
            else:
                total = total + default_coefficient_log_prior(
                    spec, getattr(owner, p + "_unconstrained"))
        return total

    def hyperparameters(self):
        """``[(name, owner, attribute), ...]`` of the GP's own scalar parameters that are
        learned now (``_nuisance_parameters()``), named by their module path in the model's
        units (``"kernel.lengthscale"``: inputs scaled to the domain; ``"noise"``: relative
        to the signal's variance). A parameter held (a noise at its floor) is not among them.
        """
        wanted = {id(q) for q in self._nuisance_parameters()}
        out = []
        for path, module in self.named_modules():
            for attr in getattr(module, "_pyro_params", {}):
                q = module._parameters.get(attr + "_unconstrained")
                if q is not None and id(q) in wanted:
                    out.append((f"{path}.{attr}" if path else attr, module, attr))
        return out

    def _set_priors(self, priors):
        r"""``priors``, ``{name: distribution}`` over the GP's parameters in the model's
        units (:meth:`hyperparameters`' names; e.g. ``{"kernel.lengthscale":
        dist.LogNormal(0, 1)}``), checked against the model's parameters in one line."""
        priors = dict(priors or {})
        names = [name for name, _, _ in self.hyperparameters()]
        for name, prior in priors.items():
            if name not in names:
                raise ValueError(f"Expected priors to name the GP's parameters among "
                                 f"{names}; got {name!r}")
            if not isinstance(prior, torch.distributions.Distribution):
                raise TypeError(f"Expected the prior of {name!r} to be a torch or Pyro "
                                f"distribution; got {type(prior).__name__}")
        self.priors = priors

    def _laplace_loss(self):
        """The negative log density of the whole ``model()`` at the converged linearisation,
        twice differentiable: the objective and what a user's edit adds to it
        (:func:`~pyro_pidkl.models.conditioning.edits.edits_log_density`)."""
        _, f0, _ = self.solve()
        loss = -self._objective(self.joint(*self.linearise(f0), closed_form=False))
        extra = edits_log_density(self, latent="ignore")
        return loss if extra is None else loss - extra

    def _laplace_parameters(self, nuisance=True):
        """``(names, theta, eta)``: the learned coefficients' names, their unconstrained
        tensors, and (with ``nuisance``) the GP's own parameters
        (``_nuisance_parameters()``)."""
        coefficients = self._coefficients()
        names = [n for n, _, _ in coefficients]
        theta = [getattr(owner, p + "_unconstrained") for _, owner, p in coefficients]
        return names, theta, (self._nuisance_parameters() if nuisance else [])

    @own_parameters
    def laplace(self, nuisance=True, prior_sd=None):
        r"""The Laplace approximation of the learned coefficients :math:`\theta` and, with
        ``nuisance``, the GP's scalar parameters :math:`\eta`
        (:func:`~pyro_pidkl.infer.laplace.laplace`; its Hessian kept with the state).

        :returns: ``(names, sizes, H, cov)``."""
        names, sizes, H, P0 = self.laplace_parts(nuisance)
        return names, sizes, H, laplace_covariance(H, sum(sizes), prior_sd=prior_sd,
                                                   prior_precision=P0)

    @own_parameters
    def laplace_parts(self, nuisance=True):
        """The Hessians of the negative objective and of the declared priors
        (:func:`~pyro_pidkl.infer.laplace.laplace_parts`), kept with the state.

        :returns: ``(names, sizes, H, P0)``."""
        key = (self._state_key(), nuisance)
        cached = getattr(self, "_laplace_cache", None)
        if cached is None or cached[0] != key:
            self._laplace_cache = (key, laplace_parts(self, nuisance))
        return self._laplace_cache[1]

    @own_parameters
    def coefficient_intervals(self, prob=0.9, nuisance=True):
        r"""Laplace intervals for the learned equation coefficients
        (:func:`~pyro_pidkl.infer.laplace.coefficient_intervals`): what the data and the
        equation say, ``[0, inf]`` (with ``identified`` False) for a coefficient they leave
        free.

        Where the fit was refereed on the exact ODE (``model.referee``,
        :mod:`~pyro_pidkl.models.conditioning.referee`), the intervals are the exact fit's (verdict
        ``"exact"``) or cover both fits' (``"agree"``), and each entry says which
        (``"referee"``).

        Each entry gains ``"between"``, the coefficient's estimate were the equation to hold
        between the collocation points (:meth:`coefficient_resolution`); where it lies
        outside the interval (not for a fit the exact ODE refereed), the coefficient is not
        resolved (``"resolved"`` False), not identified, and its interval holds both
        (:func:`~pyro_pidkl.models.conditioning.resolution.unresolved_intervals`). Where the
        data reject the fit's constant Gaussian noise (:meth:`noise_rejected`) no
        coefficient is identified, and each entry says ``"noise": "rejected"``. Where the
        method-of-lines check disagrees (``model.lines``,
        :func:`~pyro_pidkl.models.conditioning.method_of_lines.lines_stage`) each interval
        reaches its optimum (``"lines"``) and none is identified.

        :returns: ``{name: {"value", "lower", "upper", "sd", "identified"}}``."""
        report = getattr(self, "referee", None)
        if report is not None and report.verdict in ("exact", "apart"):
            # the reported intervals are the exact fit's: the GP's Laplace at the held
            # coefficients is not what they claim, nor are its warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = coefficient_intervals(self, prob, nuisance)
        else:
            out = coefficient_intervals(self, prob, nuisance)
        out = out if report is None else report.combine(out, prob)
        if report is None or report.verdict == "gp":   # the exact ODE did not referee it
            out = unresolved_intervals(out, self.coefficient_resolution(), self._coefficients())
        out = widen_to_lines(out, getattr(self, "lines", None))
        if self.noise_rejected():      # computed under a noise model the data reject
            out = {n: {**v, "identified": False, "noise": "rejected"} for n, v in out.items()}
        return out

    def _sigma_points(self):
        """:func:`~pyro_pidkl.infer.sigma_points.sigma_points`, cached with the state; empty
        before a fit or with ``parameter_uncertainty=False``."""
        key = (self._state_key(), bool(self.fitted), bool(self.parameter_uncertainty))
        cached = getattr(self, "_sigma_cache", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        points = []
        if self.parameter_uncertainty and bool(self.fitted):
            points = sigma_points(self)
        self._sigma_cache = (key, points)
        return points


    def _parameter_spread(self, mean_at, full_cov=False):
        r"""What the parameters' Laplace uncertainty adds to a prediction's variance: for
        each pair of sigma points (:meth:`_sigma_points`), the square of half the difference
        of ``mean_at(joint)`` (a ``(P,)`` posterior mean computed from the joint Gaussian at
        those parameters) between them. ``(P,)``, or ``(P, P)`` with ``full_cov``; ``0.0``
        before a fit or with ``parameter_uncertainty=False``."""
        out = 0.0
        points = self._sigma_points()
        if not points:
            return out
        _, theta, eta = self._laplace_parameters(True)
        for pair in points:
            means = []
            for values, at in pair:
                with parameters_at(theta + eta, values):
                    means.append(mean_at(at))
            half = 0.5 * (means[0] - means[1])
            out = out + (half[:, None] * half[None, :] if full_cov else half.pow(2))
        return out
