r"""The exact ODE's search over starts for :class:`~pyro_pidkl.statespace.StateSpaceGP`:
its trajectories fitted to the data from a design of starts at once
(:func:`~pyro_pidkl.infer.multistart.multistart_shooting`), the loose fit's answer first;
the solver's likelihood then refines the best.
"""

import numpy as np
import torch

from .fit import smoothed_values

__all__ = ["SEARCH_DATA", "search", "thin"]

#: the most data of an output that the loose stage and the search see (evenly thinned: they
#: only need the basin; the refinement sees all)
SEARCH_DATA = 200

#: Levenberg-Marquardt iterations of the search's first stage (the library's systems run 30:
#: here the loose fit's answer comes first, and the solver's likelihood refines the best)
SEARCH_ITERATIONS = 10

#: starts of the search when the user gives none (``None``: the systems' rule, 64 per
#: searched dimension, 64 to 512)
DEFAULT_STARTS = None

#: segments of the search's multiple shooting (``None``: the systems' rule, one per four
#: data, 2 to 12; single shooting, 1, ended Lotka-Volterra's seed 1 in a wrong optimum)
SEARCH_SEGMENTS = None


def search(model, loose=None):
    r"""The exact ODE's trajectories fitted from a design of starts at once
    (:func:`~pyro_pidkl.infer.multistart.multistart_shooting`, as
    :class:`~pyro_pidkl.models.ConditionedSystemGP`'s search): first the loose fit's
    answer (``loose``, a :class:`~pyro_pidkl.statespace.fit.FilterFit` of the first
    tempering stage: the trajectory follows the data, as gradient matching's does), its
    states at the segments the smoothed means, those nobody measured included; then the
    user's values and a Sobol design around them (a factor of a thousand either way for
    a positive coefficient, :math:`\pm 3 \max(1, |\theta_0|)` for an unconstrained
    one), the initial states of components nobody measured over their guess
    :math:`\pm 3` of their scale. Returns ``(theta (S', P), x0 (S', C), cost (S',))``,
    best first."""
    from ..infer.multistart import (default_starts, design_half_width, multistart_shooting,
                                    start_design)
    from ..infer.shooting import default_segments
    filt = model.filter
    v0, _ = model._start()
    P, C = filt.P, filt.C
    scale = filt.scale.numpy()
    hidden = [c for c in range(C) if c not in filt.measured and c not in model.known]
    half = [design_half_width(t, v0[k]) for k, (_, t) in enumerate(filt.transforms)]
    x0 = v0[P:P + C] * scale
    starts = model.starts if model.starts is not None else (
        DEFAULT_STARTS or default_starts(P, len(hidden)))
    design = start_design(np.r_[v0[:P], x0[hidden]], np.r_[half, 3 * scale[hidden]],
                          starts, seed=0)
    observations = [(t, y) for t, y in model.thinned]
    t_last = max(float(t.max()) for t, _ in observations if len(t))
    K = SEARCH_SEGMENTS or default_segments(sum(len(t) for t, _ in observations))
    edges = np.linspace(model.t0, t_last, K + 1)[:-1]
    base = np.tile(x0, (K, 1))
    for c, (t, y) in enumerate(observations):
        if len(t) and c not in model.known:
            base[:, c] = np.interp(edges, t, y)
    states = np.repeat(base[None], starts, 0)
    for j, c in enumerate(hidden):
        states[:, :, c] = design[:, P + j][:, None]
    theta = design[:, :P]
    if loose is not None:                    # the loose fit's answer first
        try:
            with torch.no_grad():
                _, out = smoothed_values(model.coarse, loose.v, loose.u_star)
                m, _ = model.coarse.predict(out, torch.as_tensor(edges))
            at = ((filt.E0 @ m[..., None])[..., 0] * filt.scale).numpy()  # (K, C)
        except (RuntimeError, ValueError):   # its trajectory left the ODE's domain
            at = None
        if at is not None and np.isfinite(at).all():
            theta = np.vstack([loose.v[:P], theta])[:starts]
            states = np.concatenate([at[None], states])[:starts]
    sd = 0.1 * scale
    found = multistart_shooting(model.ode, observations, filt.transforms, theta, states,
                                model.t0, t_last, scale, sd,
                                iterations=SEARCH_ITERATIONS, steps=8,
                                known=model.known or None)
    return found.theta, found.x0, found.cost


def thin(t, y, most):
    """At most ``most`` of the data ``(t, y)``, evenly spaced in their order."""
    if len(t) <= most:
        return t, y
    keep = np.unique(np.linspace(0, len(t) - 1, most).round().astype(int))
    return t[keep], y[keep]
