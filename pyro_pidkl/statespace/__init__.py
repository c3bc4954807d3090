r"""The time axis in :math:`O(N)`: Markov (integrated Wiener process) priors, the parallel
Kalman filter and smoother, and the probabilistic ODE solver conditioned on data
(:class:`StateSpaceGP`), and NUTS on its likelihood (:mod:`~pyro_pidkl.statespace.sampling`)."""

from .fit import FilterFit, fit_ode_filter
from .iwp import block_transition, iwp_transition, projection
from .kalman import kalman_filter, rts_smoother, sequential_filter
from .model import StateSpaceGP
from .ode_filter import ODEFilter
from .sampling import StateSpaceTarget

__all__ = ["FilterFit", "ODEFilter", "StateSpaceGP", "StateSpaceTarget", "block_transition",
           "fit_ode_filter",
           "iwp_transition", "kalman_filter", "projection", "rts_smoother",
           "sequential_filter"]
