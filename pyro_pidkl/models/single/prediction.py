r"""What a fitted :class:`~pyro_pidkl.models.PhysicsConditionedGP` predicts: the posterior
of :math:`f` given the data and the equation, at the converged linearisation.

With :math:`k_{*} = \operatorname{cov}(\partial^\alpha f(U), [v; y])`
(:meth:`~pyro_pidkl.models.single.joint.EquationJoint._cross`) and :math:`A` the joint's
covariance,

.. math::
    \mathbb{E} f(U) = c + k_*^\top A^{-1} ([v; y] - m), \qquad
    \operatorname{var} f(U) = \hat s^2 \bigl(k(U, U) - k_*^\top A^{-1} k_*\bigr)
        + \text{the parameters' share}

(:math:`\hat s^2` the profiled scale of the kernel's variance; the parameters' share from
:meth:`~pyro_pidkl.models.conditioning.parameter_uncertainty.ParameterUncertainty._parameter_spread`).
Every method is pure: it solves from the stored linearisation point and writes nothing.

:class:`ConditionedPrediction` is a mixin of
:class:`~pyro_pidkl.models.PhysicsConditionedGP`.
"""

import numpy as np
import torch

from ...param_scope import own_parameters
from ...kernels.operators import OperatorCovariance
from ..conditioning.exact_band import exact_parameter_spread

__all__ = ["ConditionedPrediction"]


class ConditionedPrediction:
    """The posterior given the data and the equation (module docstring)."""

    @own_parameters
    def conditional(self):
        """The joint Gaussian of the data and the virtual observations at the converged
        linearisation (pure: see :meth:`solve`)."""
        return self.solve()[0]

    def posterior(self):
        """Refused: the data-only GP posterior is not this model's; use ``model(X)`` or
        :meth:`conditional` (the posterior given the data and the equation)."""
        raise TypeError("PhysicsConditionedGP's posterior is conditioned on the equation as "
                        "well as the data: use model(X) or model.conditional(), not posterior()")

    @own_parameters
    def posterior_mean(self, Xnew):
        r"""The posterior mean of :math:`f` at ``Xnew`` ``(P, d)`` in the user's units,
        without the variance (whose :math:`O((N + M)^2 P)` triangular solve dominates a
        prediction at as many points as the collocation set): ``(P,)``."""
        Xnew = self._check_new_inputs(Xnew)
        with torch.no_grad():
            joint = self.conditional()
            U = self.standardizer.x_to_model(Xnew)
            alpha, M = joint.weights(), joint.M
            a_points = self._points(alpha[:M])
            parts = []
            for Uc in torch.split(U, 2048):        # memory bounded by 2048 rows at a time
                UZ = OperatorCovariance(self.kernel, Uc, self.Z_s)
                UX = OperatorCovariance(self.kernel, Uc, joint.inputs)
                parts.append(UZ.matvec({(): 1.0}, joint.w, a_points)
                             + UX.matvec({(): 1.0}, {(): 1.0}, alpha[M:]))
            return self.standardizer.f_to_user(torch.cat(parts) + joint.c)

    def _signal_variance(self):
        """The kernel's variance parameter (standardised units); every covariance is
        relative to it and the fit profiles it out (:meth:`signal_variance`)."""
        kern = getattr(self.kernel, "kern", self.kernel)
        return kern.variance

    @own_parameters
    def signal_variance(self):
        r"""The prior variance of :math:`f` in the user's units at its maximum-likelihood
        value :math:`\hat s^2` (profiled out of the objective; the kernel's ``variance``
        parameter is only its unit), a float."""
        with torch.no_grad():
            scale = self._scale(self.conditional())
            return float(self.standardizer.var_to_user(self._signal_variance() * scale))

    def _scale(self, joint):
        """The maximum-likelihood factor of the kernel's variance at ``joint`` (every
        covariance is relative to it, so the fit profiles it out)."""
        if not self.profile_scale:               # counts: the kernel's variance is learned
            return 1.0
        return joint.scale(conditional=self.objective == "conditional")

    def _noise_s(self):
        if self.count_outputs:
            raise ValueError(f"Expected noiseless=True for {self._what()}'s "
                             f"{self.likelihoods[0]} data: a new observation is not f plus "
                             f"Gaussian noise (model.predict_counts(X) for counts; "
                             f"model.likelihood_parameters())")
        with torch.no_grad():
            joint = self.conditional()
            return self.noise.detach() * self._signal_variance().detach() * self._scale(joint)

    def _predict(self, U, full_cov):
        joint = self.conditional()
        cross = self._cross(joint, U)
        mean = joint.mean(cross) + joint.c
        prior = self.kernel(U) if full_cov else self.kernel(U, diag=True)
        var = joint.variance(cross, prior, full_cov) * self._scale(joint)
        # the coefficients' uncertainty: the exact ODE's delta method where the referee fitted
        # it, else the spread of the mean between the parameters' sigma points
        found = None
        if self.parameter_uncertainty and bool(self.fitted):
            t = (U * self.standardizer.x_scale + self.standardizer.x_loc)[:, 0]
            found = exact_parameter_spread(self, t.numpy(), full_cov)
        if found is None:
            return mean, var + self._parameter_spread(lambda at: at.mean(self._cross(at, U)),
                                                      full_cov)
        share, path = (torch.as_tensor(v[0]).to(var) for v in found)
        # and the gap between the GP's mean and the exact trajectory, where they part
        gap = (self.standardizer.f_to_user(mean) - path) / self.standardizer.y_scale
        scale = self.standardizer.y_scale ** 2
        return mean, var + share / scale + (gap[:, None] * gap[None, :] if full_cov
                                            else gap.pow(2))

    @own_parameters
    def predict_counts(self, Xnew, prob=0.9, num_draws=4000, seed=0):
        r"""Predictive intervals of new counts at ``Xnew`` ``(P, d)`` (a model with a
        :class:`~pyro_pidkl.models.parts.likelihoods.Poisson` or
        :class:`~pyro_pidkl.models.parts.likelihoods.NegativeBinomial` likelihood): draws of
        the log-mean from its posterior (normal, the parameters' uncertainty included), then
        of the counts given it.

        :returns: ``(median, lower, upper)``, each ``(P,)``, the central ``prob`` interval."""
        c = self._counted()[0]
        mean, var = self(Xnew)
        return self._count_draws(c, mean, var, prob, num_draws, np.random.default_rng(seed))

    @own_parameters
    def likelihood_parameters(self):
        r"""The data's likelihood and its fitted parameter, in the user's units:
        ``{"likelihood": kind, ...}`` with ``"noise"`` (Gaussian: the noise variance),
        ``"dispersion"`` (a negative binomial's :math:`r`) or ``"log_variance"`` (log-normal
        data: :math:`s^2`, the variance of :math:`\log y`)."""
        with torch.no_grad():
            noise = None if self.count_outputs else self.noise_variance()
            return self._likelihood_entry(0, noise)
