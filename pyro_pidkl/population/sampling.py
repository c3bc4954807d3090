r"""NUTS over everything in a population: Pyro's ``NUTS`` on :meth:`PopulationODE.model
<pyro_pidkl.population.PopulationODE.model>` itself, its random effects partly non-centred,
in coordinates whitened at the Laplace fit.

The model samples each group's random effect as :math:`\eta_i \sim \mathcal N(0,
\operatorname{diag}\omega^2)`. Centred, a group with few data makes a funnel of
:math:`(\omega, \eta_i)` that NUTS cannot cross; non-centred (:math:`\eta_i = \omega
\odot \tilde\eta_i`), a group with many data makes a curved ridge. The sampler runs the
same model under ``poutine.reparam`` with :class:`~pyro.infer.reparam.LocScaleReparam` at
each group's own centredness (:func:`_centredness`: the share of the effect's prior
variance the group's data explain at the fit), and in coordinates :math:`u = \hat u + L z`
whitened by the Hessian of the potential at the fit (:class:`_Whitened`), so that its first
trees are not ten levels deep. The chains run one after the other (R-hat across them), on
one torch thread by default, the density traced once by TorchScript. An affine law
(compartments) costs one matrix exponential a datum per density
(:func:`~pyro_pidkl.physics.affine_ode.integrate_affine`); any other explicit ODE its
Runge-Kutta batch at the fit's steps, differentiated by autograd (slower).

Measured (``python benchmarks/population.py theophylline``, docs/populations.md): the
theophylline posterior within a few hundredths of a posterior sd of NumPyro's, at many
times its CPU seconds (a gradient is milliseconds of eager torch, not a compiled kernel).
"""

import math
import time
import warnings

import numpy as np
import pyro
import torch
from pyro import poutine
from pyro.infer.autoguide.initialization import init_to_median, init_to_value
from pyro.infer.mcmc import MCMC, NUTS
from pyro.infer.mcmc.util import initialize_model
from pyro.infer.reparam import LocScaleReparam
from pyro.ops.stats import effective_sample_size, split_gelman_rubin

from ..checks import positive_int
from ..infer.threads import torch_threads

__all__ = ["PopulationSamples", "sample_population"]


def _start(pop, fit, centred):
    """The chains' start: the Laplace fit's values (``None``: Pyro's prior medians), the
    random effects partly decentred by ``centred`` (:func:`_centredness`)."""
    if fit is None:
        return init_to_median
    D = torch.float64
    sd = torch.as_tensor(np.sqrt(np.clip(np.diag(fit.omega), 1e-12, None)), dtype=D)
    values = {"beta": torch.as_tensor(fit.beta, dtype=D), "omega_sd": sd,
              "sigma": torch.as_tensor(fit.sigma, dtype=D).clamp_min(1e-12),
              "eta": torch.as_tensor(fit.eta, dtype=D),     # the site, before its reparam
              "eta_decentered": torch.as_tensor(fit.eta, dtype=D) / sd ** (1 - centred)}
    return init_to_value(values=values, fallback=init_to_median)


def _centredness(pop, fit):
    r"""How centred each group's random effect is drawn (Pyro's ``LocScaleReparam``: 0 the
    non-centred :math:`\eta_i = \omega \tilde\eta_i`, 1 the centred :math:`\eta_i`):
    the share of its prior variance the group's own data explain at the Laplace fit,
    :math:`c_{ik} = 1 - v_{ik} / \omega_k^2` with :math:`v_{ik}` the fit's variance of
    that coefficient of group ``i``, clipped to ``[0, 1]`` (partial non-centring,
    Papaspiliopoulos, Roberts & Skold 2007; Gorinova, Moore & Hoffman 2020): groups with
    many data are centred (non-centred, their posterior is a curved ridge in
    :math:`(\omega, \tilde\eta_i)`), groups with few data non-centred (centred, a funnel).
    ``0.0`` without a fit, and where the fit's variance is not finite."""
    if fit is None or not pop.B.shape[1]:
        return 0.0
    cols = [int(j) for j in torch.nonzero(pop.B.T)[:, 1]]
    v = np.stack([fit.phi_cov[:, j, j] for j in cols], 1)              # (G, q)
    with np.errstate(all="ignore"):
        c = 1.0 - v / np.clip(np.diag(fit.omega), 1e-300, None)[None, :]
    c = np.where(np.isfinite(c), c, 0.0)           # a variance the fit could not give
    return torch.as_tensor(np.clip(c, 0.0, 1.0 - 1e-6), dtype=torch.float64)


class _Whitened:
    r"""The model's potential :math:`U(u)` (Pyro's, over every unconstrained site, flattened)
    in whitened coordinates :math:`u = \hat u + L z`, :math:`L L^\top` the inverse of
    :math:`U`'s Hessian at the start :math:`\hat u` (by autograd; a direction of
    non-positive curvature left at unit scale): NUTS then starts with the
    posterior's scales and correlations near the start, where with an identity mass matrix
    its early trees ran ten levels deep."""

    def __init__(self, model, init_strategy, jit=True):
        init, self.U, self.transforms, _ = initialize_model(
            model, max_plate_nesting=1, init_strategy=init_strategy)
        self.names = sorted(init)
        self.shapes = [init[n].shape for n in self.names]
        self.sizes = [max(init[n].numel(), 0) for n in self.names]
        self.start = torch.cat([init[n].detach().reshape(-1) for n in self.names])
        self.L = self._whitening(self.start)
        self._traced = None
        if jit:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._traced = torch.jit.trace(self.flat_potential, (self.start,),
                                               check_trace=False)

    def unflatten(self, u):
        parts = torch.split(u, self.sizes, dim=-1)
        return {n: p.reshape(*u.shape[:-1], *s) for n, p, s in zip(self.names, parts,
                                                                  self.shapes)}

    def flat_potential(self, u):
        return self.U(self.unflatten(u))

    def _whitening(self, u):
        H = torch.autograd.functional.hessian(self.flat_potential, u.detach())
        H = (H + H.T) / 2
        if not torch.isfinite(H).all():
            return torch.eye(u.numel(), dtype=u.dtype)
        lam, V = torch.linalg.eigh(H)
        lam = torch.where(lam > 1e-8 * lam.abs().max().clamp_min(1e-300), lam,
                          torch.ones_like(lam))
        return V * lam.rsqrt()

    def potential(self, params):
        u = self.start + params["z"] @ self.L.T
        return self._traced(u) if self._traced is not None else self.flat_potential(u)

    def constrained(self, z):
        """Draws ``z`` ``(S, p)`` as ``{site: (S, ...)}`` in the sites' own units."""
        sites = self.unflatten(self.start + z @ self.L.T)
        return {n: self.transforms[n].inv(v) if n in self.transforms else v
                for n, v in sites.items()}


def sample_population(pop, fit=None, num_warmup=1000, num_samples=1000, num_chains=2, seed=0,
                      progress=True, target_accept_prob=0.8, threads=1, jit=True):
    r"""Posterior draws of a :class:`~pyro_pidkl.population.PopulationODE`'s fixed effects,
    random-effect sds, noise sds and every group's random effects by NUTS (module
    docstring), under the vague priors :meth:`PopulationODE.model` states.

    :param fit: a :class:`~pyro_pidkl.population.PopulationFit` of ``pop`` to start the
        chains from (recommended; ``None`` starts at the priors' medians). Its Runge-Kutta
        steps are used for a law that needs them.
    :param int num_chains: chains, one after the other (each seeded ``seed + chain``).
    :param bool progress: Pyro's progress bar per chain.
    :param threads: torch threads while sampling (default one, as the fit).
    :param bool jit: trace the density once with TorchScript (``torch.jit.trace``), its
        Python (Pyro's trace of the model, the distributions) then run once.
    :returns: :class:`PopulationSamples`.
    """
    num_warmup = positive_int(num_warmup, "num_warmup", minimum=0)
    num_samples = positive_int(num_samples, "num_samples (split R-hat needs 4)", minimum=4)
    num_chains = positive_int(num_chains, "num_chains")
    if fit is not None and fit.pop is not pop:
        raise ValueError("Expected the PopulationFit of this PopulationODE; got another's")
    centred = _centredness(pop, fit)
    model = poutine.reparam(pop.model, config={"eta": LocScaleReparam(centered=centred)})
    steps_before = pop.steps
    if fit is not None and not pop.affine:
        pop.steps = fit.steps
    chains, divergences, accept = [], [], []
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        with torch_threads(threads):
            target = _Whitened(model, _start(pop, fit, centred), jit)
            for c in range(num_chains):
                pyro.set_rng_seed(seed + c)
                kernel = NUTS(potential_fn=target.potential,
                              target_accept_prob=target_accept_prob)
                mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=num_warmup,
                            initial_params={"z": torch.zeros_like(target.start)},
                            disable_progbar=not progress)
                mcmc.run()
                chains.append(target.constrained(mcmc.get_samples()["z"].detach()))
                div = mcmc.diagnostics().get("divergences", {})
                divergences.append(list(next(iter(div.values()), [])) if div else [])
                rate = mcmc.diagnostics().get("acceptance rate", {})
                accept.append(float(next(iter(rate.values()), math.nan)) if rate else math.nan)
    finally:
        pop.steps = steps_before
    stacked = {k: torch.stack([ch[k] for ch in chains]) for k in chains[0]}   # (chains, S, ...)
    # eta = omega^(1 - c) * eta_decentered (LocScaleReparam at loc 0)
    stacked["eta"] = stacked["eta_decentered"] * stacked["omega_sd"][:, :, None, :] ** (
        1 - torch.as_tensor(centred, dtype=torch.float64))
    return PopulationSamples(pop, stacked, {"divergences": divergences, "accept": accept},
                             time.perf_counter() - wall, time.process_time() - cpu,
                             fit.steps if fit is not None else pop.steps)


class PopulationSamples:
    r"""Draws of a population by :func:`sample_population`: ``draws`` ``{site: (chains, S,
    ...)}`` (``beta`` the unconstrained fixed effects, ``omega_sd`` the random effects' sds,
    ``sigma`` each measured output's noise sd, ``eta`` ``(chains, S, G, q)`` the groups'
    random effects), ``diagnostics`` (each chain's divergent draws and acceptance rate),
    ``seconds`` (wall), ``cpu_seconds`` and ``steps`` (the Runge-Kutta steps of a law that
    needs them)."""

    def __init__(self, pop, draws, diagnostics, seconds, cpu_seconds, steps=None):
        self.pop, self.draws, self.diagnostics, self.steps = pop, draws, diagnostics, steps
        self.seconds, self.cpu_seconds = seconds, cpu_seconds
        self.num_chains, self.num_samples = draws["beta"].shape[:2]

    @property
    def divergences(self):
        """Divergent transitions after warm-up, over all chains."""
        return sum(len(d) for d in self.diagnostics["divergences"])

    def parameters(self):
        """``{name: (chains, S)}``: each fixed effect by its name in
        :attr:`PopulationODE.beta_names` (unconstrained: the log of a positive coefficient,
        ``nlme``'s ``lKa``), ``"sd(name)"`` each random effect's sd, ``"sigma(output)"``
        each noise sd: the keys of :meth:`PopulationFit.intervals`."""
        pop, d = self.pop, self.draws
        out = {n: d["beta"][..., k] for k, n in enumerate(pop.beta_names)}
        out.update({f"sd({n})": d["omega_sd"][..., k] for k, n in enumerate(pop.random_names)})
        out.update({f"sigma({o})": d["sigma"][..., k] for k, o in enumerate(pop.data.outputs)})
        return out

    def summary(self, prob=0.9):
        """``{name: {"mean", "sd", "median", "lower", "upper", "r_hat", "n_eff"}}`` of
        :meth:`parameters`, the central ``prob`` interval, split R-hat and the effective
        sample size over the chains."""
        lo, hi = (1 - prob) / 2, (1 + prob) / 2
        out = {}
        for name, x in self.parameters().items():
            flat = x.reshape(-1)
            out[name] = {"mean": float(flat.mean()), "sd": float(flat.std()),
                         "median": float(flat.median()),
                         "lower": float(torch.quantile(flat, lo)),
                         "upper": float(torch.quantile(flat, hi)),
                         "r_hat": float(split_gelman_rubin(x)) if x.shape[1] >= 4 else math.nan,
                         "n_eff": float(effective_sample_size(x))}
        return out

    def phi(self):
        """Every draw's groups' unconstrained coefficients ``(chains S, G, P)``."""
        beta = self.draws["beta"].reshape(-1, self.draws["beta"].shape[-1])
        eta = self.draws["eta"].reshape(-1, *self.draws["eta"].shape[2:])
        return torch.einsum("gpk,sk->sgp", self.pop.A, beta) + eta @ self.pop.B.T

    def groups(self, prob=0.9):
        """Each group's coefficients (and learned initial states) in their own units:
        ``{label: {name: {"mean", "median", "lower", "upper"}}}``."""
        lo, hi = (1 - prob) / 2, (1 + prob) / 2
        phi, pop, out = self.phi(), self.pop, {}
        for i, label in enumerate(pop.data.labels):
            row = {}
            for j, en in enumerate(pop.entries):
                v = en.transform(phi[:, i, j])
                row[en.name] = {"mean": float(v.mean()), "median": float(v.median()),
                                "lower": float(torch.quantile(v, lo)),
                                "upper": float(torch.quantile(v, hi))}
            out[label] = row
        return out

    def predict(self, times, group, prob=0.9, draws=200):
        """A group's curve at ``times`` over ``draws`` thinned posterior draws: ``{output:
        {"mean", "median", "lower", "upper"}}`` (arrays ``(T,)``), the central ``prob`` band
        of the curve (its coefficients' uncertainty; the noise left out)."""
        pop = self.pop
        if group not in pop.data.labels:
            raise KeyError(f"Expected a group among {pop.data.labels[:8]}...; got {group!r}")
        i = pop.data.labels.index(group)
        phi = self.phi()[:, i]
        idx = torch.linspace(0, phi.shape[0] - 1, min(int(draws), phi.shape[0])).round().long()
        with torch.no_grad():
            X = pop.trajectories(phi[idx], np.full(idx.numel(), i),
                                 times=np.asarray(times, dtype=float), steps=self.steps).numpy()
        q = np.nanquantile(X, [0.5 - prob / 2, 0.5, 0.5 + prob / 2], axis=0)
        return {o: {"mean": np.nanmean(X[:, c], 0), "median": q[1, c], "lower": q[0, c],
                    "upper": q[2, c]} for c, o in enumerate(pop.system.outputs)}

    def to_datatree(self):
        """An ArviZ ``DataTree``: ``posterior`` (:meth:`parameters` and each group's random
        effects ``eta`` with dims ``(group, effect)``, chains as they ran), ``sample_stats``
        (``diverging``)."""
        from arviz_base import from_dict
        post = {k: v.numpy() for k, v in self.parameters().items()}
        post["eta"] = self.draws["eta"].numpy()
        diverging = np.zeros((self.num_chains, self.num_samples), dtype=bool)
        for c, steps in enumerate(self.diagnostics["divergences"]):
            diverging[c, [s for s in steps if 0 <= s < self.num_samples]] = True
        return from_dict({"posterior": post, "sample_stats": {"diverging": diverging}},
                         dims={"eta": ["group", "effect"]},
                         coords={"group": list(self.pop.data.labels),
                                 "effect": list(self.pop.random_names)})
