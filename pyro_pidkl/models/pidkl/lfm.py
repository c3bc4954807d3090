r"""Latent force models (Alvarez, Luengo, Lawrence 2009) as exact GPs on the shared
machinery: the kernel is the covariance of a linear equation's solution
(:mod:`pyro_pidkl.kernels.lfm`), evaluated in the user's units so that the learned decay or
diffusivity is the physical one; outputs are standardised as for every model.

* ``equation="ode"``: :math:`f' + D f = \sum_r S_r u_r(t)` with an unknown initial value and
  offset (:class:`~pyro_pidkl.kernels.lfm.FirstOrderLFMKernel`).
* ``equation="heat"``: :math:`f_t = \alpha \nabla^2 f` with a latent initial condition
  (:class:`~pyro_pidkl.kernels.lfm.HeatLFMKernel`), over space and time, or over space at a
  fixed time when ``time`` is ``None``.
"""

import torch
from pyro.contrib.gp.kernels import Warping
from torch import nn

from ...kernels.lfm import FirstOrderLFMKernel, HeatLFMKernel
from ...checks import as_inputs
from .exact_gp import ExactGP

__all__ = ["LFM"]


class ToUserUnits(nn.Module):
    """Standardised inputs back to the user's units: ``u -> m_x + s_x u``."""

    def __init__(self, standardizer):
        super().__init__()
        self.register_buffer("loc", standardizer.x_loc.clone())
        self.register_buffer("scale", standardizer.x_scale.clone())

    def forward(self, U):
        return self.loc + self.scale * U


class LFM(ExactGP):
    r"""Latent force model regression.

    :param X: ``(N, d)`` training inputs (user units).
    :param y: ``(N,)`` targets.
    :param input_names: names of the ``d`` inputs.
    :param str equation: ``"ode"`` (first-order ODE in ``time``) or ``"heat"``.
    :param str time: the time input (``"ode"``: required; ``"heat"``: ``None`` for a fixed
        time ``fixed_time``).
    :param space: ``"heat"`` only: the spatial inputs (default all inputs but ``time``).
    :param int num_forces: :math:`R`, latent forces (SE functions of the initial condition).
    :param float origin: time at which the equation starts (times must not precede it).
    :param float fixed_time: :math:`T` of the fixed-time heat kernel.
    :param float decay: initial ODE decay :math:`D`.
    :param float diffusivity: initial :math:`\alpha`.
    Other arguments as :class:`~pyro_pidkl.models.pidkl.base.GPModel` (``physics=`` gives a
    physics-informed LFM).
    """

    def __init__(self, X, y, input_names=None, equation="ode", time="t", space=None,
                 num_forces=1, origin=0.0, fixed_time=1.0, decay=1.0, diffusivity=0.1,
                 **kwargs):
        dtype = kwargs.get("dtype", torch.float64)
        X_user, names = as_inputs(X, input_names, dtype)
        if time is not None and time not in names:
            raise ValueError(f"Unknown time input {time!r}; expected one of {names}")
        d = X_user.shape[1]
        span = lambda j: float(X_user[:, j].max() - X_user[:, j].min()) or 1.0  # noqa: E731
        halving = 0.5 ** torch.arange(num_forces, dtype=dtype)
        if equation == "ode":
            if time is None:
                raise ValueError("Expected a time input for equation='ode'; got time=None")
            j = names.index(time)
            base = FirstOrderLFMKernel(d, j, num_forces, decay=decay,
                                       lengthscale=span(j) * halving, origin=origin,
                                       dtype=dtype)
        elif equation == "heat":
            space = [n for n in names if n != time] if space is None else list(space)
            unknown = [n for n in space if n not in names]
            if unknown or not space:
                raise ValueError(f"Expected spatial inputs among {names}; got {space}")
            space_dims = [names.index(n) for n in space]
            ell = torch.tensor([span(j) for j in space_dims], dtype=dtype) * halving[:, None]
            base = HeatLFMKernel(d, space_dims, None if time is None else names.index(time),
                                 time=fixed_time, num_forces=num_forces,
                                 diffusivity=diffusivity, lengthscale=ell,
                                 variance=1.0 / num_forces, dtype=dtype)
        else:
            raise ValueError(f"Unknown equation {equation!r}; expected 'ode' or 'heat'")
        self.equation_name, self.time_name, self.origin = equation, time, float(origin)
        if time is not None:
            self._check_times(X_user, "X", names)
        super().__init__(X, y, names,
                         kernel=lambda st: Warping(base, iwarping_fn=ToUserUnits(st)), **kwargs)
        if equation == "heat":
            self.space_names = tuple(space)

    def _check_times(self, X, what, names=None):
        t = X[:, (names or self.input_names).index(self.time_name)]
        if (t < self.origin).any():
            raise ValueError(f"Expected {what}[:, {self.time_name!r}] >= origin {self.origin} "
                             f"(the equation starts there); got min {float(t.min()):g}")

    def _check_new_inputs(self, Xnew):
        Xnew = super()._check_new_inputs(Xnew)
        if self.time_name is not None:
            self._check_times(Xnew, "Xnew")
        return Xnew

    def equation_parameters(self):
        """The learned physical parameter: ``{"D": ...}`` for the ODE, ``{"alpha": ...}`` for
        the heat equation over time, ``{"alpha_T": ...}`` (:math:`\\alpha T`) at a fixed
        time; and those of a physics term's equation, if the model carries one."""
        base = self.kernel.kern
        with torch.no_grad():
            if self.equation_name == "ode":
                out = {"D": float(base.decay)}
            elif self.time_name is None:
                out = {"alpha_T": float(base.diffusivity) * base.time}
            else:
                out = {"alpha": float(base.diffusivity)}
        return {**out, **super().equation_parameters()}
