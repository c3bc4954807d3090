r"""How a coefficient (or an initial state) varies over the groups of a population.

Each coefficient :math:`\theta` of the equation, and each initial state the data do not
give, is one of

- :class:`Shared`: one value for every group, :math:`\theta_i = \theta`;
- :class:`Random`: a population value and a random effect per group, in the coefficient's
  unconstrained space :math:`u = T^{-1}(\theta)` (the log for a positive one),

  .. math:: u_i = u_{pop} + \sum_k \beta_k \, c_{ik} + \eta_i, \qquad
      \eta \sim \mathcal N(0, \Omega),

  so that a positive coefficient is :math:`\theta_i = \theta_{pop}\, e^{\eta_i}` times its
  covariates' powers, :math:`c_{ik} = \log(w_{ik} / \operatorname{median}_i w_{ik})` for a
  positive covariate :math:`w` (a weight on a clearance: an allometric exponent
  :math:`\beta`), the covariate less its median otherwise;
- :class:`PerGroup`: a value of its own per group, no distribution (a fixed effect per
  group).

The constraint (and so the transform :math:`T`) is the coefficient's
:class:`~pyro_pidkl.physics.Parameter`'s, or the declaration's own where given (an initial
state's default is the real line).
"""

import torch
from torch.distributions import biject_to

__all__ = ["Effect", "PerGroup", "Random", "Shared"]


class Effect:
    """A declaration: ``init`` the value to start from (constrained), ``constraint`` (default:
    the coefficient's own; an initial state's: real)."""

    kind = "effect"

    def __init__(self, init, constraint=None):
        init = float(init)
        if not torch.isfinite(torch.tensor(init)):
            raise ValueError(f"Expected a finite starting value for {type(self).__name__}; "
                             f"got {init!r}")
        self.init, self.constraint = init, constraint

    def transform(self, default):
        """The map from the unconstrained space to the coefficient's values."""
        return biject_to(self.constraint if self.constraint is not None else default)

    def __repr__(self):
        return f"{type(self).__name__}({self.init!r})"


class Shared(Effect):
    """One value for every group (a fixed effect)."""

    kind = "shared"


class PerGroup(Effect):
    """A value of its own for each group (a fixed effect per group, no distribution)."""

    kind = "per_group"


class Random(Effect):
    r"""A population value with a random effect per group (module docstring).

    :param float init: the population value to start from (constrained).
    :param float sd: the random effect's standard deviation to start from (unconstrained
        units: 0.3 is about 30% between groups for a positive coefficient).
    :param covariates: names of group covariates the coefficient depends on (a slope each,
        learned from 0).
    """

    kind = "random"

    def __init__(self, init, sd=0.3, covariates=(), constraint=None):
        super().__init__(init, constraint)
        if not float(sd) > 0:
            raise ValueError(f"Expected a positive starting sd for a random effect; got {sd!r}")
        self.sd = float(sd)
        self.covariates = (covariates,) if isinstance(covariates, str) else tuple(covariates)
