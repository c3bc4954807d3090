r"""A system's shooting stage from many starts: the coefficients' basin, and the initial
states of outputs nobody measured, searched over a design of starts before the conditioned
GP is fitted.

Gradient matching gives the shooting stage one start. Where that start lies in the wrong
basin, shooting finds that basin's optimum: on Hes1 (seven rates, one of three components
never measured) gradient matching puts the rate that couples the hidden component at zero,
and shooting from there keeps it at zero. :func:`shoot_from_many_starts` also fits the
trajectories from a design of starts (:func:`~pyro_pidkl.infer.multistart.multistart_shooting`,
all in one batch):

* the coefficients: gradient matching's answer, the user's starting values, and a Sobol
  design around the user's values, :math:`\pm \log 1000` in the unconstrained space of a
  positive (or otherwise bounded) coefficient (a factor of a thousand either way), and
  :math:`\pm 3 \max(1, |\theta_0|)` for an unconstrained one;
* an unmeasured output's initial state: over its prior's centre :math:`\pm 3` of its scale
  (``scales`` of :class:`~pyro_pidkl.models.ConditionedSystemGP`);
* a measured output's states at the segments: the data GP's mean there.

The search's Levenberg-Marquardt steps are held by the exact fit's weak normal prior about
the user's values (:data:`~pyro_pidkl.infer.exact_fit.SEARCH_PRIOR_SD`; the ranking is the
data's alone). The best start (the lowest profiled negative log-likelihood of its
trajectory) is refined by single shooting with the adaptive solver. The search replaces shooting from gradient
matching's answer alone (``multistart=0``), which is its first start.
"""

import numpy as np
import torch

from ...infer.exact_fit import SEARCH_PRIOR_SD
from ...infer.multistart import (default_starts, design_half_width,
                                multistart_shooting, start_design)
from ...infer.shooting import default_segments, fit_by_shooting

__all__ = ["default_starts", "shoot_from_many_starts"]

def _design_box(model):
    """Centre and half-width of each coefficient's range in unconstrained space."""
    centre, half = [], []
    for _, owner, p in model._coefficients():
        spec = owner.specs[p]
        transform = torch.distributions.transform_to(spec.constraint)
        u0 = float(transform.inv(spec.init))
        centre.append(u0)
        half.append(design_half_width(transform, u0))
    return np.array(centre), np.array(half)


def shoot_from_many_starts(model, coefficients, x0, jets, t0, t1, observations, scale, sd,
                           starts, known=None):
    r"""Shooting from ``starts`` starts (module docstring), the first of them gradient
    matching's answer; the best refined by the adaptive solver.

    :param coefficients: ``[(name, transform, start)]`` as for
        :func:`~pyro_pidkl.infer.shooting.fit_by_shooting` (gradient matching's answer).
    :param x0: gradient matching's initial state ``(C,)``.
    :param jets: the linearisation point's jets ``(C, I, M)`` at the collocation points.
    :param known: ``{component: value}``: known initial states (conditions), held.
    :returns: the refined :class:`~pyro_pidkl.infer.shooting.ShootingResult`, judged
        (``improved``) against gradient matching's answer.
    """
    hidden = [c for c in range(len(model.outputs)) if not model.counts[c]]
    n_data = sum(len(o[0]) for o in observations)
    K = default_segments(n_data)
    edges = np.linspace(t0, t1, K + 1)[:-1]
    at = [int((model.Z[:, 0] - e).abs().argmin()) for e in edges]
    base = jets[:, 0, at].T.numpy()                                  # (K, C)
    centre, half = _design_box(model)
    loc = model.y_loc.numpy()
    # gradient matching's answer, then the user's values, then the Sobol design
    design = start_design(np.r_[centre, loc[hidden]], np.r_[half, 3 * scale[hidden]],
                          starts - 1, seed=0)
    design = np.vstack([np.r_[[c[2] for c in coefficients], loc[hidden]], design])[:starts]
    theta = design[:, :len(centre)]
    states = np.repeat(base[None], starts, 0)
    for j, c in enumerate(hidden):
        states[1:, :, c] = design[1:, len(centre) + j][:, None]
    # the search's steps held by the exact fit's weak prior about the user's values (its
    # ranking is the data's alone): unheld, a coefficient the loose segments do not need
    # runs onto its bound's plateau (the README spring's damping to c = e^-115860, handed to
    # the GP as its start; :data:`~pyro_pidkl.infer.exact_fit.SEARCH_PRIOR_SD`)
    prior = (centre, np.full(len(centre), SEARCH_PRIOR_SD)) if len(centre) else None
    found = multistart_shooting(model.ode, observations, [c[:2] for c in coefficients],
                                theta, states, t0, t1, scale, sd, known=known, prior=prior)
    model.multistart_result = found
    best = 0 if np.isfinite(found.cost[0]) else None
    start = ([(n, t, float(v)) for (n, t, _), v in zip(coefficients, found.theta[0])],
             found.x0[0]) if best is not None else (coefficients, x0)
    return fit_by_shooting(model.ode, observations, start[0], start[1], t0, t1, scale, sd,
                           segments=1, judged_from=([c[2] for c in coefficients], x0),
                           known=known)
