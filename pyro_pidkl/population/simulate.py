r"""Populations drawn from a law, for calibration: each group's random effects from
:math:`\mathcal N(0, \Omega)`, its trajectory integrated finely, its data with noise at its
own (optionally jittered) times."""

import numpy as np
import torch

from .groups import GroupedData
from .model import PopulationODE

__all__ = ["simulate_population"]


def simulate_population(system, times, initial, effects, sd, sigma, groups=20, noise="log",
                        covariates=None, jitter=0.0, seed=0, observe=None, beta=None):
    r"""Draw a population's data from the law ``system`` with the effects' starting values
    as the truth (:class:`~pyro_pidkl.population.effects.Random`'s ``init`` the population
    value), random-effect sds ``sd`` ``{coefficient: sd}`` (independent), noise sd
    ``sigma`` (on the noise's scale: a coefficient of variation for ``"log"``).

    :param times: ``(T,)`` nominal sampling times (each group's moved by up to ``jitter``
        of the gap to the next, kept increasing).
    :param covariates: ``{name: (groups,)}`` group covariates (a dose).
    :param observe: the measured outputs (default the system's first).
    :param dict beta: fixed effects to hold instead of the starting values, by name
        (unconstrained: a covariate's slope ``"cl~Wt"``, a population value's log).
    :returns: ``(GroupedData, truth)``: ``truth`` the groups' coefficients ``(G, P)``
        (unconstrained) and the population's fixed effects.
    """
    rng = np.random.default_rng(seed)
    times = np.asarray(times, dtype=float)
    observe = tuple(observe or system.outputs[:1])
    covariates = {k: np.asarray(v, dtype=float) for k, v in (covariates or {}).items()}
    rows_t, rows_g = [], []
    gaps = np.diff(np.r_[times, times[-1] + (times[-1] - times[-2] if len(times) > 1 else 1)])
    for i in range(groups):
        t = times + jitter * gaps * rng.uniform(0, 1, times.size)
        rows_t.append(np.sort(t))
        rows_g.append(np.full(times.size, i))
    t = np.concatenate(rows_t)
    g = np.concatenate(rows_g)
    placeholder = {o: np.ones_like(t) for o in observe}
    data = GroupedData(g, t, placeholder,
                       {k: v[g] for k, v in covariates.items()}, t0=float(min(0.0, t.min())))
    pop = PopulationODE(system, data, initial, effects, noise=noise)
    given = dict(beta or {})
    unknown = [k for k in given if k not in pop.beta_names]
    if unknown:
        raise KeyError(f"Expected fixed effects among {pop.beta_names}; got {unknown}")
    beta = torch.tensor([given.get(n, float(b)) for n, b in zip(pop.beta_names,
                                                                 pop.beta_start)],
                        dtype=torch.float64)
    eta = torch.as_tensor(rng.normal(size=(groups, pop.B.shape[1])) *
                          np.array([sd[n] for n in pop.random_names]))
    phi = pop.phi(beta, eta)
    steps = pop.choose_steps(phi, start=256)
    with torch.no_grad():
        X = pop.trajectories(phi, np.arange(groups), steps=steps)
    values = {}
    for o in observe:
        c = system.outputs.index(o)
        f = X[torch.as_tensor(g), c, torch.as_tensor(np.searchsorted(pop.times, t))].numpy()
        e = rng.normal(size=f.shape) * sigma
        values[o] = f * np.exp(e) if noise == "log" else f + e
    data = GroupedData(g, t, values, {k: v[g] for k, v in covariates.items()}, t0=data.t0)
    return data, {"phi": phi.numpy(), "beta": dict(zip(pop.beta_names, beta.tolist())),
                  "sd": dict(sd), "sigma": float(sigma)}
