r"""Exact GP regression on standardised data, written as a Pyro model.

.. math::
    p(y \mid X) = \mathcal{N}(y_s \mid c\,1, K + \sigma^2 I), \qquad
    y_s = (y - m_y) / s_y,\; u = (x - m_x) / s_x

with :math:`c = 0` (``mean="zero"``, the default: far from the data the GP reverts to the
training mean :math:`m_y`) or a learned constant (``mean="constant"``).

The noise variance :math:`\sigma^2` (standardised units) is constrained above a floor so it
cannot collapse (the paper's code lets it reach ~1e-10 and becomes overconfident).
"""

import functools

import torch
import pyro
from pyro.distributions import constraints
from pyro.nn import PyroModule, PyroParam, pyro_method

from ..data import Standardizer, as_inputs, as_targets
from ..posterior import GPPosterior

__all__ = ["ExactGP", "own_parameters"]


def own_parameters(method):
    """Run ``method`` in an empty scope of Pyro's global parameter store.

    A :class:`~pyro.nn.PyroModule` called outside a fit reads any value the global store
    holds under its parameters' names, and *adopts* it: after predicting with one model,
    a second model with the same names (``kernel.kern.lengthscale``, ``noise``, ...) would
    predict with, and keep, the first one's values. Inside the scope each model registers,
    and so uses, its own tensors; the store is restored afterwards.
    """
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with pyro.get_param_store().scope():
            return method(*args, **kwargs)
    return wrapper


class ExactGP(PyroModule):
    r"""Base class: data handling, noise, one Cholesky per step, predictions.

    Subclasses set ``self.kernel`` (a :mod:`pyro.contrib.gp` kernel on standardised inputs).

    :param X: ``(N, d)`` training inputs (user units).
    :param y: ``(N,)`` training targets.
    :param input_names: names of the ``d`` inputs (default ``x0, x1, ...``).
    :param float noise: initial noise variance (standardised units).
    :param float noise_floor: lower bound of the noise variance (standardised units).
    :param bool standardize: standardise inputs and outputs inside the model.
    :param float jitter: first relative jitter tried when a Cholesky fails.
    :param float max_jitter: largest relative jitter before raising.
    :param torch.dtype dtype: float64 by default.
    :param str mean: the prior mean of the standardised GP: ``"zero"`` (default) or
        ``"constant"`` (a learned constant :math:`c`, started at 0, parameter
        ``mean_constant``).
    """

    def __init__(self, X, y, input_names=None, noise=1e-2, noise_floor=1e-4, standardize=True,
                 jitter=1e-8, max_jitter=1e-2, dtype=torch.float64, mean="zero"):
        super().__init__()
        if mean not in ("zero", "constant"):
            raise ValueError(f"Expected mean to be 'zero' or 'constant'; got {mean!r}")
        X, self.input_names = as_inputs(X, input_names, dtype)
        y = as_targets(y, X.shape[0], dtype)
        if not noise_floor >= 0:
            raise ValueError(f"Expected noise_floor >= 0; got {noise_floor}")
        if not noise > noise_floor:
            raise ValueError(f"Expected the initial noise ({noise}) to exceed noise_floor "
                             f"({noise_floor})")
        self.standardizer = Standardizer(X, y, standardize)
        self.register_buffer("X", X)
        self.register_buffer("y", y)
        self.register_buffer("X_s", self.standardizer.x_to_model(X))
        self.register_buffer("y_s", self.standardizer.y_to_model(y))
        self.noise_floor, self.jitter, self.max_jitter = noise_floor, jitter, max_jitter
        #: gradients of the GP terms in closed form (see GPPosterior); PIDKL(...,
        #: derivatives="autograd") switches it off to trace everything by autograd
        self.closed_form_gradients = True
        self.noise = PyroParam(torch.tensor(float(noise), dtype=dtype),
                               constraints.greater_than(float(noise_floor)))
        self.mean_kind = mean
        if mean == "constant":
            self.mean_constant = PyroParam(torch.tensor(0.0, dtype=dtype))

    @property
    def input_dim(self):
        return self.X.shape[1]

    def prior_mean(self):
        """The prior mean :math:`c` of the standardised GP: ``mean_constant`` (learned) with
        ``mean="constant"``, else ``0.``."""
        return self.mean_constant if self.mean_kind == "constant" else 0.0

    def posterior(self):
        """The :class:`~pyro_pidkl.posterior.GPPosterior` at the current parameters
        (one Cholesky of ``K + sigma^2 I``)."""
        return GPPosterior(self.X_s, self.y_s, self.kernel, self.noise, self.jitter,
                           self.max_jitter, self.closed_form_gradients, mean=self.prior_mean())

    @pyro_method
    def model(self):
        r"""``pyro.factor("data", log N(y | c, K + sigma^2 I))``; returns the posterior."""
        posterior = self.posterior()
        pyro.factor("data", posterior.log_marginal())
        return posterior

    @pyro_method
    def guide(self):
        """No latent sites: the hyperparameters are point estimates."""

    @own_parameters
    def forward(self, Xnew, full_cov=False, noiseless=True):
        r"""Posterior mean and variance of :math:`f` (``noiseless=True``) or :math:`y` at
        ``Xnew`` ``(M, d)``, in the user's units.

        :returns: ``(mean (M,), var (M,))`` or ``(mean, cov (M, M))`` with ``full_cov``.
        """
        Xnew = self._check_new_inputs(Xnew)
        with torch.no_grad():
            mean, var = self._predict(self.standardizer.x_to_model(Xnew), full_cov)
            if not noiseless:
                var = var + (self.noise * torch.eye(var.shape[-1], dtype=var.dtype,
                                                    device=var.device) if full_cov
                             else self.noise)
        return self.standardizer.f_to_user(mean), self.standardizer.var_to_user(var)

    def _check_new_inputs(self, Xnew):
        """``Xnew`` checked (shape, finiteness) as a tensor on the model's device."""
        Xnew, _ = as_inputs(Xnew, self.input_names, self.X.dtype, what="Xnew")
        return Xnew.to(self.X.device)

    def _predict(self, U, full_cov):
        """Mean and variance (or covariance) of the standardised ``f`` at standardised
        points ``U``; subclasses with another posterior override this."""
        return self.posterior().mean_var(U, full_cov)

    def noise_variance(self):
        """Noise variance :math:`\\sigma^2` in the user's units (a float)."""
        return float(self.standardizer.var_to_user(self.noise.detach()))
