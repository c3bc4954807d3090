r"""What every GP model of the library shares: checked data on a standardised scale, a
Gaussian noise above a floor, a prior mean, a kernel, an optional physics term, and
predictions in the user's units.

.. math::
    y_s = (y - m_y) / s_y, \qquad u = (x - m_x) / s_x, \qquad
    y_s = c + f(u) + \varepsilon, \quad \varepsilon \sim \mathcal{N}(0, \sigma^2)

with :math:`c = 0` (``mean="zero"``, the default: far from the data the GP reverts to the
training mean :math:`m_y`) or a learned constant (``mean="constant"``). The noise variance
:math:`\sigma^2` (standardised units) is constrained above a floor so it cannot collapse
(the paper's code lets it reach ~1e-10 and becomes overconfident).
"""

import torch
from pyro.contrib.gp.kernels import Kernel
from pyro.distributions import constraints
from pyro.nn import PyroModule, PyroParam

from ...checks import (as_inputs, as_targets, equation_input_names, warn, warn_if_interrupted,
                      without_repeats)
from ...gp.standardise import Standardizer
from ...kernels.se import se_ard
from ...param_scope import own_parameters
from ...physics.term import PhysicsTerm

__all__ = ["GPModel"]


class GPModel(PyroModule):
    r"""Base of the exact and sparse models: data, noise, mean, kernel, physics term.

    :param X: ``(N, d)`` training inputs (user units).
    :param y: ``(N,)`` training targets.
    :param input_names: names of the ``d`` inputs; default the columns of a
        ``pandas.DataFrame``, or with a physics term the equation's input when ``X`` has one
        column, else ``x0, x1, ...``; never guessed when the order could be wrong (an
        equation over several inputs needs them).
    :param kernel: a :mod:`pyro.contrib.gp` kernel on standardised inputs, or a function
        ``standardizer -> kernel`` (for kernels that need the data's units); default an
        SE-ARD kernel on all inputs.
    :param physics: a :class:`~pyro_pidkl.physics.PhysicsTerm` (or ``None``: no physics).
    :param float noise: initial noise variance (standardised units).
    :param float noise_floor: lower bound of the noise variance (standardised units).
    :param bool standardize: standardise inputs and outputs inside the model.
    :param float jitter: first relative jitter tried when a Cholesky fails.
    :param float max_jitter: largest relative jitter before raising.
    :param torch.dtype dtype: float64 by default.
    :param str mean: the prior mean :math:`c` of the standardised GP: ``"zero"`` (default)
        or ``"constant"`` (learned, started at 0, parameter ``mean_constant``).
    :param str derivatives: ``"closed_form"`` (default: gradients of the GP terms and
        derivatives of the physics draw up to order two from the kernel's, where the kernel
        allows; autograd otherwise) or ``"autograd"`` (autograd through the posterior and
        its Cholesky factor everywhere: the textbook route, slower).
    """

    def __init__(self, X, y, input_names=None, kernel=None, physics=None, noise=1e-2,
                 noise_floor=1e-4, standardize=True, jitter=1e-8, max_jitter=1e-2,
                 dtype=torch.float64, mean="zero", derivatives="closed_form"):
        super().__init__()
        if mean not in ("zero", "constant"):
            raise ValueError(f"Expected mean to be 'zero' or 'constant'; got {mean!r}")
        if derivatives not in ("closed_form", "autograd"):
            raise ValueError(f"Expected derivatives to be 'closed_form' or 'autograd'; got "
                             f"{derivatives!r}")
        if physics is not None and not isinstance(physics, PhysicsTerm):
            raise TypeError(f"Expected physics to be a pyro_pidkl.physics.PhysicsTerm or None; "
                            f"got {type(physics).__name__}")
        if physics is not None:
            input_names = equation_input_names(X, input_names, physics.equation)
        X, self.input_names = as_inputs(X, input_names, dtype)
        y = as_targets(y, X.shape[0], dtype)
        X, y = without_repeats(X, y, f"{type(self).__name__}'s data")
        self._check_data(y)
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
        self.derivatives = derivatives
        #: gradients of the GP terms in closed form (see GPPosterior)
        self.closed_form_gradients = derivatives == "closed_form"
        self.noise = PyroParam(torch.tensor(float(noise), dtype=dtype),
                               constraints.greater_than(float(noise_floor)))
        self.mean_kind = mean
        if mean == "constant":
            self.mean_constant = PyroParam(torch.tensor(0.0, dtype=dtype))
        if kernel is None:
            kernel = se_ard(self.input_dim, dtype=dtype)
        elif not isinstance(kernel, Kernel) and callable(kernel):
            kernel = kernel(self.standardizer)
        if not isinstance(kernel, Kernel):
            raise TypeError(f"Expected kernel to be a pyro.contrib.gp kernel (or a function "
                            f"returning one); got {type(kernel).__name__}")
        self.kernel = kernel
        self.physics = physics
        if physics is not None:
            physics.attach(self)

    #: the fewest training points the model takes: a data-only GP needs two to set a scale
    min_training_points = 2
    #: warn when every target is the same: the data then say nothing of the kernel's scale
    warn_constant_y = True

    def _check_data(self, y):
        name = type(self).__name__
        if y.shape[0] < self.min_training_points:
            raise ValueError(f"Expected at least {self.min_training_points} training points for "
                             f"{name}; got {y.shape[0]}")
        if self.warn_constant_y and y.shape[0] > 1 and bool((y == y[0]).all()):
            warn(f"Every target of {name} is {float(y[0]):.6g}: constant data say "
                          f"nothing of the function's scale or lengthscales, and the fit will "
                          f"return a flat function")

    @property
    def input_dim(self):
        return self.X.shape[1]

    def prior_mean(self):
        """The prior mean :math:`c` of the standardised GP: ``mean_constant`` (learned) with
        ``mean="constant"``, else ``0.``."""
        return self.mean_constant if self.mean_kind == "constant" else 0.0

    @own_parameters
    def forward(self, Xnew, full_cov=False, noiseless=True):
        r"""Posterior mean and variance of :math:`f` (``noiseless=True``) or :math:`y` at
        ``Xnew`` ``(M, d)``, in the user's units.

        :returns: ``(mean (M,), var (M,))`` or ``(mean, cov (M, M))`` with ``full_cov``.
        """
        Xnew = self._check_new_inputs(Xnew)
        warn_if_interrupted(self)
        with torch.no_grad():
            mean, var = self._predict(self.standardizer.x_to_model(Xnew), full_cov)
            if not noiseless:
                noise = self._noise_s()
                var = var + (noise * torch.eye(var.shape[-1], dtype=var.dtype,
                                               device=var.device) if full_cov else noise)
        return self.standardizer.f_to_user(mean), self.standardizer.var_to_user(var)

    def _check_new_inputs(self, Xnew):
        """``Xnew`` checked (shape, finiteness) as a tensor on the model's device."""
        Xnew, _ = as_inputs(Xnew, self.input_names, self.X.dtype, what="Xnew")
        return Xnew.to(self.X.device)

    def _predict(self, U, full_cov):
        """Mean and variance (or covariance) of the standardised ``f`` at standardised
        points ``U``."""
        raise NotImplementedError

    def _noise_s(self):
        """The noise variance in standardised units (not differentiated)."""
        return self.noise.detach()

    def noise_variance(self):
        """Noise variance :math:`\\sigma^2` in the user's units (a float)."""
        return float(self.standardizer.var_to_user(self._noise_s()))

    def equation_parameters(self):
        """The physics term's equation parameters ``{name: value}`` (``{}`` without one)."""
        return {} if self.physics is None else self.physics.equation_parameters()
