r"""Physics Informed Deep Kernel Learning (Wang, Xing, Kirby, Zhe, AISTATS 2022).

A deep-kernel GP of :math:`f` respects :math:`\psi[f] = g` with :math:`g \sim GP(0, \kappa)`
unknown. A posterior function draw :math:`f_\epsilon = \mu + \epsilon\sqrt{v}` is pushed
through :math:`\psi` by autodiff at random points :math:`Z \sim p(Z)`, and the collapsed
ELBO is

.. math::
    \mathcal{L} = \log \mathcal{N}(y \mid 0, K + \sigma^2 I)
        + \gamma\, \mathbb{E}_{p(Z)} \mathbb{E}_{p(\epsilon)}
          \log \mathcal{N}\big(h(Z, \epsilon) \mid 0, \kappa(Z, Z)\big),
    \qquad h(Z, \epsilon) = \psi[f_\epsilon](Z).

In Pyro: two factor sites (``data``, ``physics``) and two sample sites (``Z``, ``eps``)
whose guide is their prior, so that ``Trace_ELBO`` gives exactly :math:`-\mathcal{L}` (and
:class:`~pyro_pidkl.infer.elbo.PriorGuideELBO`, the default of :func:`~pyro_pidkl.fit`, the
same in one pass of the model).
The physics term is a :class:`~pyro_pidkl.physics.PhysicsTerm`; :meth:`PIDKL.model` writes
the story out with its pieces.
"""

import functools

import pyro
import torch
from pyro.nn import pyro_method

from ...checks import column_count
from ...kernels.deep import dkl_kernel
from ...physics.term import PhysicsTerm
from .exact_gp import ExactGP

__all__ = ["PIDKL", "pidkl_parts"]


def pidkl_parts(X, equation, gamma, m, domain, source_inputs, draw, source_jitter,
                equation_guide, feature_net, feature_dim, skip_inputs, seed, dtype,
                conditions=()):
    """The deep kernel and the physics term of PI-DKL (exact or sparse), from the
    constructors' arguments: ``(kernel, physics)``."""
    physics = PhysicsTerm(equation, gamma, m, domain, source_inputs, draw, source_jitter,
                          equation_guide, conditions)
    kernel = dkl_kernel(column_count(X), feature_net, feature_dim, skip_inputs, dtype=dtype,
                        seed=seed)
    return kernel, physics


class PIDKL(ExactGP):
    r"""The PI-DKL hybrid model: a deep-kernel exact GP with a physics term.

    :param X: ``(N, d)`` training inputs (user units).
    :param y: ``(N,)`` training targets.
    :param equation: a :class:`~pyro_pidkl.physics.Equation`.
    :param input_names: names of the ``d`` inputs (required for several columns, unless
        ``X`` is a ``pandas.DataFrame``: the column order is never guessed).
    :param gamma, m, domain, source_inputs, draw, source_jitter, equation_guide, conditions:
        the physics term's (:class:`~pyro_pidkl.physics.PhysicsTerm`): weight, collocation
        points per draw, :math:`p(Z)`, inputs of :math:`\kappa`, what is pushed through the
        equation, boundary and initial conditions.
    :param feature_net, feature_dim, skip_inputs, seed: the deep kernel's
        (:func:`~pyro_pidkl.kernels.dkl_kernel`; ``seed`` fixes the network's initial weights).
    Other arguments as :class:`~pyro_pidkl.models.pidkl.base.GPModel`.

    Sites of :meth:`model` (``S`` particles when vectorised): ``data`` factor ``()``,
    ``Z`` ``(S, m, d)``, ``eps`` ``(S, 1)`` or ``(S, m)``, ``physics`` factor ``(S,)``, and
    with conditions the ``conditions`` factor ``(S,)``.

    **Bayesian equation parameters.** A parameter declared with a prior,
    ``Parameter(init, prior=dist.LogNormal(...))``, is a sample site
    ``physics.equation.<name>``; the guide adds an
    :class:`~pyro.infer.autoguide.AutoNormal` over those sites alone, and
    ``model.physics.equation_posterior()`` summarises it.
    """

    def __init__(self, X, y, equation, input_names=None, gamma=1.0, m=10, domain=None,
                 source_inputs="equation", draw="function", source_jitter=1e-6,
                 equation_guide=None, feature_net=None, feature_dim=None, skip_inputs=False,
                 seed=None, conditions=(), **kwargs):
        kernel, physics = pidkl_parts(X, equation, gamma, m, domain, source_inputs, draw,
                                      source_jitter, equation_guide, feature_net, feature_dim,
                                      skip_inputs, seed, kwargs.get("dtype", torch.float64),
                                      conditions)
        super().__init__(X, y, input_names, kernel=kernel, physics=physics, **kwargs)

    @pyro_method
    def model(self):
        physics = self.physics
        # log p(y | X) = log N(y | c, K + s2 I): one Cholesky of the deep kernel matrix
        posterior = self.posterior()
        pyro.factor("data", posterior.log_marginal())
        # Z ~ p(Z): m collocation points where the equation holds           (..., m, d)
        Z = physics.sample_Z()
        # eps ~ N(0, 1): a posterior function draw f_eps = mu + eps sqrt(v)  (..., 1)
        eps = physics.sample_eps()
        # h = psi[f_eps](Z): the draw pushed through the equation           (..., m)
        h = physics.residual(functools.partial(self.posterior_draw, posterior), Z, eps)
        # gamma log N(h | 0, kappa(Z, Z)): the unknown source g ~ GP(0, kappa) at Z
        pyro.factor("physics", physics.gamma * physics.log_prob(h, Z))
        # gamma log N(B[f_eps](X_c) - h_c | 0, s_c^2): boundary conditions, if any
        physics.condition_factor(functools.partial(self.posterior_draw, posterior), eps)
        return posterior
