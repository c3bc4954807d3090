r"""Latent force model kernels (Alvarez, Luengo, Lawrence 2009): the covariance of the
solution of a linear equation driven by latent forces with SE priors, in closed form.

Both kernels are :class:`pyro.contrib.gp.kernels.Kernel` subclasses acting on inputs in the
user's units, so that their physical parameters (decay :math:`D`, diffusivity
:math:`\alpha`) are read directly.

**First-order ODE.** :math:`f'(t) + D f(t) = \sum_r S_r u_r(t)` for :math:`t \ge t_0`,
:math:`u_r \sim \mathcal{GP}(0, e^{-(s-s')^2/\ell_r^2})`, plus an unknown initial value and
a constant offset:

.. math::
    f(t) = c + a\, e^{-D\tau} + \sum_r S_r \int_0^{\tau} e^{-D(\tau - s)} u_r(s)\, ds,
    \qquad \tau = t - t_0,

    k(t, t') = \sigma_c^2 + \sigma_0^2 e^{-D(\tau + \tau')}
      + \sum_r S_r^2 \frac{\sqrt{\pi}\,\ell_r}{2}\big[h_r(\tau', \tau) + h_r(\tau, \tau')\big],

    h_r(\tau', \tau) = \frac{e^{\nu_r^2}}{2D}\Big\{ e^{-D(\tau'-\tau)}
      \big[\operatorname{erf}\!\big(\tfrac{\tau'-\tau}{\ell_r} - \nu_r\big)
          + \operatorname{erf}\!\big(\tfrac{\tau}{\ell_r} + \nu_r\big)\big]
      - e^{-D(\tau' + \tau)} \big[\operatorname{erf}\!\big(\tfrac{\tau'}{\ell_r} - \nu_r\big)
          + \operatorname{erf}(\nu_r)\big]\Big\}, \qquad \nu_r = D \ell_r / 2

(Lawrence, Sanguinetti, Rattray 2007). The products :math:`e^{c}[\operatorname{erf}(a) +
\operatorname{erf}(b)]` are evaluated through :func:`torch.special.erfcx` so that no
overflowing exponential meets a cancelling difference.

**Heat equation with a latent initial condition.** :math:`f_t = \alpha \nabla^2 f` on
:math:`\mathbb{R}^p`, :math:`f(x, 0) = \sum_r u_r(x)`, :math:`u_r \sim \mathcal{GP}(0,
\sigma_r^2 \exp(-\tfrac12\sum_j (x_j - x'_j)^2/\ell_{rj}^2))`; the Gaussian heat kernel
convolved twice with the SE prior gives

.. math::
    k\big((x, t), (x', t')\big) = \sigma_c^2 + \sum_r \sigma_r^2 \prod_{j=1}^{p}
      \frac{\ell_{rj}}{\sqrt{\ell_{rj}^2 + 2\alpha(t + t')}}
      \exp\!\Big(-\frac{(x_j - x'_j)^2}{2(\ell_{rj}^2 + 2\alpha(t + t'))}\Big).

Over :math:`(x, t)` jointly this is a non-stationary kernel in time; at a fixed time
:math:`T` (no time input, as in the paper) it is a sum of SE kernels in :math:`x`.
"""

import math

import torch
from pyro.contrib.gp.kernels import Kernel
from pyro.distributions import constraints
from pyro.nn import PyroParam

__all__ = ["FirstOrderLFMKernel", "HeatLFMKernel"]


def _exp_erf_sum(c, a, b):
    r""":math:`e^{c}[\operatorname{erf}(a) + \operatorname{erf}(b)]` for ``b >= 0`` and
    ``c - a^2 <= 0``, ``c - b^2 <= 0`` (which hold for the ODE kernel's terms).

    For ``a >= 0`` then ``c <= 0`` and the product is direct; for ``a < 0`` it is
    :math:`e^{c - a^2}\operatorname{erfcx}(-a) - e^{c - b^2}\operatorname{erfcx}(b)`.
    Both branches are kept finite everywhere so that gradients through ``torch.where``
    stay finite.
    """
    direct = torch.exp(c.clamp(max=0.0)) * (torch.erf(a) + torch.erf(b))
    stable = (torch.exp((c - a * a).clamp(max=0.0)) * torch.special.erfcx(a.abs())
              - torch.exp((c - b * b).clamp(max=0.0)) * torch.special.erfcx(b.abs()))
    return torch.where(a >= 0, direct, stable)


def _h(tau1, tau2, decay, lengthscale):
    r""":math:`h(\tau_1, \tau_2)` of the first-order LFM kernel, broadcast over
    ``(R, N, M)`` with ``decay`` scalar and ``lengthscale`` ``(R, 1, 1)``."""
    nu = decay * lengthscale / 2
    first = _exp_erf_sum(nu ** 2 - decay * (tau1 - tau2), (tau1 - tau2) / lengthscale - nu,
                         tau2 / lengthscale + nu)
    second = _exp_erf_sum(nu ** 2 - decay * (tau1 + tau2), tau1 / lengthscale - nu,
                          nu.expand_as(first))
    return (first - second) / (2 * decay)


class FirstOrderLFMKernel(Kernel):
    r"""Covariance of the first-order ODE :math:`f' + D f = \sum_r S_r u_r` (module docstring).

    :param int input_dim: columns of the inputs it receives.
    :param int time_dim: the column holding time :math:`t`.
    :param int num_forces: :math:`R`, the number of latent forces.
    :param float decay: initial :math:`D > 0`.
    :param lengthscale: initial :math:`\ell_r` (a float or ``R`` values).
    :param float sensitivity: initial :math:`S_r` (all forces).
    :param float initial_variance: initial :math:`\sigma_0^2` (prior variance of
        :math:`f(t_0) - c`).
    :param float offset_variance: initial :math:`\sigma_c^2`.
    :param float origin: :math:`t_0`, where the ODE starts (inputs must satisfy
        :math:`t \ge t_0`).
    """

    def __init__(self, input_dim, time_dim=0, num_forces=1, decay=1.0, lengthscale=1.0,
                 sensitivity=1.0, initial_variance=1.0, offset_variance=1.0, origin=0.0,
                 dtype=torch.float64):
        super().__init__(1, active_dims=[time_dim])
        if num_forces < 1:
            raise ValueError(f"Expected num_forces >= 1; got {num_forces}")
        self.num_forces = int(num_forces)
        lengthscale = torch.as_tensor(lengthscale, dtype=dtype).expand(num_forces).clone()
        self.decay = PyroParam(torch.tensor(float(decay), dtype=dtype), constraints.positive)
        self.lengthscale = PyroParam(lengthscale, constraints.positive)
        self.sensitivity = PyroParam(torch.full((num_forces,), float(sensitivity), dtype=dtype))
        self.initial_variance = PyroParam(torch.tensor(float(initial_variance), dtype=dtype),
                                          constraints.positive)
        self.offset_variance = PyroParam(torch.tensor(float(offset_variance), dtype=dtype),
                                         constraints.positive)
        self.origin = float(origin)

    def _tau(self, X):
        return self._slice_input(X)[:, 0] - self.origin

    def forward(self, X, Z=None, diag=False):
        tau = self._tau(X)
        tau2 = tau if Z is None else self._tau(Z)
        if diag:
            tau1, tau2 = tau, tau
        else:
            tau1, tau2 = tau[:, None], tau2[None, :]
        ell = self.lengthscale.reshape(-1, *([1] * tau1.dim()))
        S2 = (self.sensitivity ** 2).reshape(ell.shape)
        D = self.decay
        forces = S2 * math.sqrt(math.pi) * ell / 2 * (_h(tau2, tau1, D, ell)
                                                        + _h(tau1, tau2, D, ell))
        return (self.offset_variance + self.initial_variance * torch.exp(-D * (tau1 + tau2))
                + forces.sum(0))


class HeatLFMKernel(Kernel):
    r"""Covariance of the heat equation :math:`f_t = \alpha\nabla^2 f` with a latent initial
    condition, a sum of ``R`` SE latent functions (module docstring).

    :param int input_dim: columns of the inputs it receives.
    :param space_dims: the columns of the spatial coordinates :math:`x` (``p`` of them).
    :param int time_dim: the column of time :math:`t` (measured from the initial time), or
        ``None`` for a fixed time ``time`` (only :math:`\alpha T` is then identifiable).
    :param float time: :math:`T` when ``time_dim`` is ``None``.
    :param int num_forces: :math:`R`.
    :param float diffusivity: initial :math:`\alpha > 0`.
    :param lengthscale: initial :math:`\ell_{rj}` (a float, ``R`` values, or ``(R, p)``).
    :param float variance: initial :math:`\sigma_r^2`.
    :param float offset_variance: initial :math:`\sigma_c^2`.
    """

    def __init__(self, input_dim, space_dims, time_dim=None, time=1.0, num_forces=1,
                 diffusivity=0.1, lengthscale=1.0, variance=1.0, offset_variance=1.0,
                 dtype=torch.float64):
        space_dims = list(space_dims)
        active = space_dims + ([] if time_dim is None else [time_dim])
        super().__init__(len(active), active_dims=active)
        if num_forces < 1:
            raise ValueError(f"Expected num_forces >= 1; got {num_forces}")
        p = len(space_dims)
        self.num_forces, self.space_size, self.has_time = int(num_forces), p, time_dim is not None
        self.time = float(time)
        ell = torch.as_tensor(lengthscale, dtype=dtype)
        ell = (ell.reshape(-1, 1) if ell.dim() == 1 else ell).expand(num_forces, p).clone()
        self.diffusivity = PyroParam(torch.tensor(float(diffusivity), dtype=dtype),
                                     constraints.positive)
        self.lengthscale = PyroParam(ell, constraints.positive)
        self.variance = PyroParam(torch.full((num_forces,), float(variance), dtype=dtype),
                                  constraints.positive)
        self.offset_variance = PyroParam(torch.tensor(float(offset_variance), dtype=dtype),
                                         constraints.positive)

    def _split(self, X):
        X = self._slice_input(X)
        p = self.space_size
        t = X[:, p] if self.has_time else torch.full_like(X[:, 0], self.time)
        return X[:, :p], t

    def forward(self, X, Z=None, diag=False):
        x1, t1 = self._split(X)
        x2, t2 = (x1, t1) if Z is None else self._split(Z)
        if diag:
            dx2, tsum = torch.zeros_like(x1), 2 * t1
        else:
            dx2 = (x1[:, None, :] - x2[None, :, :]) ** 2
            tsum = t1[:, None] + t2[None, :]
        # (R, ..., p): widened squared lengthscales l^2 + 2 alpha (t + t')
        ell2 = (self.lengthscale ** 2).reshape(self.num_forces, *([1] * tsum.dim()),
                                                self.space_size)
        wide = ell2 + 2 * self.diffusivity * tsum[None, ..., None]
        terms = torch.sqrt(ell2 / wide) * torch.exp(-dx2[None] / (2 * wide))
        var = self.variance.reshape(-1, *([1] * tsum.dim()))
        return self.offset_variance + (var * terms.prod(-1)).sum(0)
