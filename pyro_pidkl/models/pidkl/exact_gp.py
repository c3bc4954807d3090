r"""Exact GP regression, written as a Pyro model, with an optional physics term.

.. math::
    \log p(y \mid X) = \log \mathcal{N}(y_s \mid c\,1, K + \sigma^2 I)
    \;\Big[\, + \gamma\, \log \mathcal{N}\big(\psi[f_\epsilon](Z) \mid 0, \kappa(Z, Z)\big)
    \Big]

on standardised data (:mod:`pyro_pidkl.models.pidkl.base`); the bracket is the
:class:`~pyro_pidkl.physics.PhysicsTerm` on a posterior function draw
:math:`f_\epsilon = \mu + \epsilon\sqrt{v}`.
"""

import functools

import pyro
from pyro.nn import pyro_method

from ...gp.posterior import GPPosterior
from ...physics.posterior_draw import PosteriorDraw
from .base import GPModel

__all__ = ["ExactGP"]


class ExactGP(GPModel):
    r"""Exact GP: one Cholesky of :math:`K + \sigma^2 I` per step.

    ``ExactGP(X, y)`` is an SE-ARD GP; ``kernel=`` any :mod:`pyro.contrib.gp` kernel on
    standardised inputs; ``physics=PhysicsTerm(equation, ...)`` adds the physics factor.
    Arguments as :class:`~pyro_pidkl.models.pidkl.base.GPModel`.
    """

    #: the latent sites a guide of this model may draw from their priors (the physics term's)
    prior_sites = ("Z", "eps")

    @property
    def guide_is_prior(self):
        """Whether :meth:`guide` draws every latent site from its prior and learns nothing
        (so that :class:`~pyro_pidkl.infer.elbo.PriorGuideELBO` computes ``Trace_ELBO``'s
        value in one pass): true unless the guide is overridden or the physics term has
        Bayesian equation parameters (whose guide is learned)."""
        return (type(self).guide is ExactGP.guide
                and (self.physics is None or self.physics.equation_guide is None))

    @property
    def deterministic(self):
        """Whether the objective has no sampled site and only a few scalar parameters (no
        physics term, no feature network): :func:`~pyro_pidkl.infer.fit` then maximises
        the marginal likelihood with L-BFGS-B, as GPyTorch's and BoTorch's exact GPs are
        fitted; a deep kernel's network keeps Adam."""
        return (self.physics is None and type(self).guide is ExactGP.guide
                and not any("iwarping_fn" in name or "feature" in name
                            for name, _ in self.named_parameters()))

    def posterior(self):
        """The :class:`~pyro_pidkl.gp.posterior.GPPosterior` at the current parameters
        (one Cholesky of ``K + sigma^2 I``)."""
        return GPPosterior(self.X_s, self.y_s, self.kernel, self.noise, self.jitter,
                           self.max_jitter, self.closed_form_gradients, mean=self.prior_mean())

    def posterior_draw(self, posterior, eps):
        r"""The draw :math:`f_\epsilon(x) = m_y + s_y(\mu(u) + \epsilon\sqrt{v(u)})`,
        :math:`u = (x - m_x)/s_x`: a :class:`~pyro_pidkl.physics.posterior_draw.PosteriorDraw`, a
        function of user-unit points ``(M, d) -> (M,)`` whose derivatives at the collocation
        points are in closed form unless ``derivatives="autograd"``."""
        return PosteriorDraw(posterior, eps, self.standardizer,
                             closed_form=self.closed_form_gradients)

    @pyro_method
    def model(self):
        # log p(y | X) = log N(y | c, K + s2 I): one Cholesky of the kernel matrix
        posterior = self.posterior()
        pyro.factor("data", posterior.log_marginal())
        if self.physics is not None:
            # Z ~ p(Z), eps ~ N(0, 1), gamma log N(psi[f_eps](Z) | 0, kappa(Z, Z))
            self.physics.factor(functools.partial(self.posterior_draw, posterior))
        return posterior

    @pyro_method
    def guide(self):
        """No latent sites of the GP (its hyperparameters are point estimates); the physics
        term's ``Z`` and ``eps`` from their priors."""
        if self.physics is not None:
            self.physics.guide()

    def _predict(self, U, full_cov):
        return self.posterior().mean_var(U, full_cov)
