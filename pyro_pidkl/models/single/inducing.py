r"""Many data: the data's likelihood given the equation by Titsias's collapsed bound on
inducing values at some of the data inputs (:class:`~pyro_pidkl.gp.inducing.InducingJoint`,
:math:`O(N m^2)`), the inducing points the first ``m`` data in their maximin order, ``m``
doubled while the bound is loose (``inducing="auto"``).

:class:`InducingData` is a mixin of :class:`~pyro_pidkl.models.PhysicsConditionedGP`.
"""

import torch

from ...checks import warn
from ...gp.sparse_cholesky import maximin_order

__all__ = ["INDUCING_DATA", "INDUCING_GAP", "INDUCING_MAX", "INDUCING_START", "InducingData"]

#: with ``data_likelihood="auto"``, the data's density given the equation is Titsias's bound
#: on inducing points above this many data (dense, one evaluation of the objective factors
#: an (M + N)-row joint and its inverse: about 1 s at N = 3000 on two cores, 0.8 GB a
#: matrix at N = 10^4)
INDUCING_DATA = 2000

#: above this many time points of an explicit ODE, the model names the state-space solver
STATE_SPACE_HINT = 5000


#: the first number of inducing points of ``inducing="auto"``
INDUCING_START = 256

#: ``inducing="auto"`` doubles the inducing points while the bound's trace term (nats) at
#: the current parameters is above this
INDUCING_GAP = 1.0

#: ``inducing="auto"`` stops doubling here (and warns if the trace term is still above
#: :data:`INDUCING_GAP`)
INDUCING_MAX = 4096


class InducingData:
    """Which data carry the inducing values, and how many (module docstring)."""

    def _inducing_inputs(self):
        r"""The inducing inputs ``(m, d)`` (standardised: the first ``m`` data in their
        maximin order) when :math:`\log p(y \mid v)` is taken as Titsias's bound
        (``data_likelihood="inducing"``, or ``"auto"`` with more than
        :data:`INDUCING_DATA` data), else ``None``; ``m`` is :attr:`inducing_count`."""
        N = self.X_s.shape[0]
        if self.data_likelihood == "exact" or (self.data_likelihood == "auto"
                                               and N <= INDUCING_DATA):
            return None
        key = (self.X_s.data_ptr(), tuple(self.X_s.shape))
        cached = getattr(self, "_maximin_cache", None)
        if cached is None or cached[0] != key:
            order, _ = maximin_order(self.X_s.detach().cpu().numpy())
            cached = (key, torch.as_tensor(order, device=self.X_s.device))
            self._maximin_cache = cached
        return self.X_s[cached[1][:min(int(self.inducing_count), N)]]

    def _refine_approximation(self):
        """With ``inducing="auto"`` and Titsias's bound in use, double the inducing points
        while the bound's trace term at the current parameters and linearisation exceeds
        :data:`INDUCING_GAP` nats (at most :data:`INDUCING_MAX`, with a warning if it is
        still above). Called by :meth:`relinearise`; returns whether the count grew (the
        objective changed)."""
        if not self.inducing_auto:
            return False
        grew = False
        with torch.no_grad():
            while self._inducing_inputs() is not None:
                N, count = self.X_s.shape[0], int(self.inducing_count)
                gap = float(self.joint(*self.linearise(self.f0)).gap)
                if gap <= INDUCING_GAP or count >= min(N, INDUCING_MAX):
                    if gap > INDUCING_GAP:
                        warn(f"The inducing-point bound on the data's likelihood of "
                             f"{self._what()} is {gap:.3g} nats below the exact one at "
                             f"{count} inducing points (the most inducing='auto' takes): "
                             f"pass inducing= a larger count, or data_likelihood='exact'")
                    break
                self.inducing_count.fill_(min(2 * count, N, INDUCING_MAX))
                self._cache = None
                grew = True
        return grew

    def _hint_state_space(self):
        """One line where many time points of an explicit ODE meet the dense joint (or the
        inducing bound, its cost still cubic in the points it keeps): the state-space solver
        fits them in O(N) time and memory."""
        from ...physics.scalar_ode import equation_ode
        if (self.input_dim != 1 or self.X.shape[0] <= STATE_SPACE_HINT or self.count_outputs
                or self.conditions or self.source_kind == "gp"
                or equation_ode(self.equation, self.input_names) is None):
            return
        warn(f"{self.X.shape[0]} time points of {self._what()}, an explicit ODE: "
             f"pk.StateSpaceGP(equation, (t, y)) fits them in O(N) time and memory (seconds), "
             f"where this model's joint takes minutes and gigabytes")
