r"""What each conditioned model gives its exact-ODE referee
(:mod:`~pyro_pidkl.models.conditioning.referee`): the ODE, the data per state component (``(t, y)``, or
``(t, counts, likelihood)``), the coefficients with their starts (the GP's answer, the
user's values, a system's shooting answers), the states at the shooting segments, the
interval, the scale, the GP's mean path of the states (64 times), a single equation's Sobol
design, a system's known initial values.
"""

import numpy as np
import torch

from ...infer.shooting import _segment_states, default_segments
from .counts import series_observations

__all__ = ["DESIGN_MAX", "DESIGN_PER_COEFFICIENT", "equation_problem", "system_problem"]


#: starts of the design of a single equation's exact fit per searched coefficient (at most
#: :data:`DESIGN_MAX`)
DESIGN_PER_COEFFICIENT = 16
DESIGN_MAX = 96


def _scalar_coefficients(model):
    """``[(name, transform, [current, user's start])]`` (unconstrained), or ``None`` where a
    learned coefficient is not a scalar."""
    out = []
    for n, owner, p in model._coefficients():
        u = getattr(owner, p + "_unconstrained")
        if u.numel() != 1:
            return None
        spec = owner.specs[p]
        transform = torch.distributions.transform_to(spec.constraint)
        out.append((n, transform, [float(u.detach()), float(transform.inv(spec.init))]))
    return out


def equation_problem(model):
    """The exact fit's setting of a fitted :class:`~pyro_pidkl.models.PhysicsConditionedGP`
    (:func:`referee`), or ``None`` where it is not refereed (module docstring)."""
    from ...physics.scalar_ode import equation_ode
    from ...infer.multistart import LOG_RANGE
    from .starts import _design_box
    if (model.input_dim != 1 or model.source_kind == "gp" or model.conditions
            or model.X.shape[0] < 3 or len(model._coefficients()) != len(
                [s for s in model.equation.specs.values() if not s.fixed])):
        return None
    coefficients = _scalar_coefficients(model)
    if coefficients is None:
        return None
    if not hasattr(model, "_exact_ode"):
        model._exact_ode = equation_ode(model.equation, model.input_names, model.source_fn)
    ode = model._exact_ode
    if ode is None:
        return None
    t, y = model.X[:, 0].detach().numpy(), model.y.detach().numpy()
    order = np.argsort(t, kind="stable")
    t, y = t[order], y[order]
    data = series_observations(model, 0, t)          # counts: their exact likelihood
    data = (t, y) if data is None else (t, data[1][order], data[2])
    t0, t1 = float(t[0]), float(t[-1])
    K = default_segments(t.size)
    edges = np.linspace(t0, t1, K + 1)[:-1]
    n = ode.order
    indices = [(0,) * k for k in range(n)]
    with torch.no_grad():
        joint = model.solve()[0]
        at = torch.as_tensor(np.r_[edges, np.linspace(t0, t1, 64)], dtype=model.X.dtype)[:, None]
        jets = model._mean_jet(joint, model.standardizer.x_to_model(at), indices).numpy()
    states = jets[:, :K].T                                               # (K, n)
    scale = np.maximum(np.sqrt(np.mean(jets[:, K:] ** 2, 1)), 1e-8)
    scale[0] = max(scale[0], float(np.std(y)), 1e-8)
    empty = (np.zeros(0), np.zeros(0))
    _, half = _design_box(model)
    P = len(coefficients)
    return {"ode": ode, "observations": [data] + [empty] * (n - 1),
            "coefficients": coefficients, "starts": np.stack([states, states]),
            "x0": states[0], "t0": t0, "t1": t1, "scale": scale,
            "path": (np.linspace(t0, t1, 64), jets[:, K:]),
            "design": int(min(DESIGN_MAX, DESIGN_PER_COEFFICIENT * max(2, P + n - 1))),
            "design_half": np.minimum(half, LOG_RANGE) if P else None}


def system_problem(model):
    """The exact fit's setting of a fitted :class:`~pyro_pidkl.models.ConditionedSystemGP`
    (:func:`referee`), or ``None`` where it is not refereed (module docstring)."""
    from .stages import _shooting_setup
    if model.ode is None or sum(model.counts) < 3:
        return None
    coefficients = _scalar_coefficients(model)
    if coefficients is None:
        return None
    observations, t0, t1, scale = _shooting_setup(model)
    K = default_segments(sum(len(o[0]) for o in observations))
    edges = np.linspace(t0, t1, K + 1)[:-1]
    times = np.linspace(t0, t1, 64)
    means = model.posterior_mean(torch.as_tensor(np.r_[edges, times], dtype=model.Z.dtype)
                                 [:, None]).numpy()                      # (K + 64, C)
    states, path = means[:K], (times, means[K:].T)
    starts, thetas = [states], [[s[0] for _, _, s in coefficients]]
    # the shooting stage's answers: their trajectories at the segments
    found = []
    if getattr(model, "_shot", None) is not None:
        found.append((model._shot[1].theta, model._shot[1].x0))
    ms = getattr(model, "multistart_result", None)
    if ms is not None:
        found += [(ms.theta[k], ms.x0[k]) for k in range(min(2, len(ms.cost)))
                  if np.isfinite(ms.cost[k])]
    for theta, x0 in found:
        values = {n: t(torch.tensor(float(v))) for (n, t, _), v in zip(coefficients, theta)}
        S = _segment_states(model.ode, values, np.asarray(x0, dtype=float), t0, edges)
        if S is not None and np.isfinite(S).all():
            starts.append(np.asarray(S))
            thetas.append(list(theta))
    coefficients = [(n, t, [th[k] for th in thetas]) for k, (n, t, _) in enumerate(coefficients)]
    known = model.known_states(t0)
    for c, value in known.items():
        for S in starts:
            S[0, c] = value
    return {"ode": model.ode, "observations": observations, "coefficients": coefficients,
            "starts": np.stack(starts), "x0": starts[0][0], "t0": t0, "t1": t1,
            "scale": np.asarray(scale, dtype=float), "known": known, "path": path}
