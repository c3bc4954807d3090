r"""NUTS (Pyro's ``NUTS`` and ``MCMC``) or an autoguide fitted by SVI over a
physics-conditioned GP's equation coefficients :math:`\theta` and, by default, the GP's own
scalar parameters :math:`\eta` that the objective identifies.

The target is the fit's objective as a density, whitened at the fit's Laplace approximation
(:mod:`~pyro_pidkl.infer.posterior_density`); NUTS runs each chain from the fit, on a
subset of the collocation points when there are many, its draws corrected by importance
weights at all of them. The draws, their summary and the predictions mixed over them are a
:class:`~pyro_pidkl.infer.coefficient_samples.CoefficientSamples`.
"""

import math
import time
import warnings

import pyro
import torch
from pyro.infer.mcmc import MCMC, NUTS
from pyro.ops.integrator import register_exception_handler
from pyro.ops.stats import effective_sample_size, split_gelman_rubin

from ..checks import positive_int
from ..errors import ConvergenceWarning, NonFiniteError, NotPositiveDefiniteError
from .coefficient_samples import CoefficientSamples
from .posterior_density import DEFAULT_PRIORS, PosteriorTarget, default_prior
from .threads import fit_threads, torch_threads

__all__ = ["CoefficientSamples", "DEFAULT_PRIORS", "default_prior", "fit_coefficient_guide",
           "sample_coefficients"]

# a trajectory that leaves the region where the joint covariance can be factored, or where
# Gauss-Newton does not converge (a step far out while NUTS finds its step size), is a
# divergence, as Pyro treats a singular matrix: the density there is not evaluated
register_exception_handler("pyro_pidkl", lambda e: isinstance(
    e, (NonFiniteError, NotPositiveDefiniteError, ConvergenceWarning)))


#: collocation points per input that the sampler conditions on by default (the fit's
#: default is 200 per input); its draws are then corrected to all points by importance
#: weights
SAMPLER_COLLOCATION = 50

#: a Pareto k-hat of the correction's weights above this, and the subset's draws do not
#: stand for the posterior at all points: warned of
KHAT_WARN = 0.7


def _collocation_count(model, collocation):
    """How many collocation points the sampler conditions on (``None``: all)."""
    if collocation is None:
        return None
    if collocation == "auto":
        d = getattr(model, "input_dim", 1)
        return SAMPLER_COLLOCATION * d
    return positive_int(collocation, "collocation")


def _importance_correction(target, model, unconstrained, count, num_chains):
    r"""Draws made at a subset of the collocation points, moved to the posterior at all of
    them: log weights :math:`\log w_s = U_{sub}(u_s) - U(u_s)` (the negative log densities
    at the subset and at all points), Pareto-smoothed (PSIS; ArviZ's ``psislw``), then each
    chain resampled systematically by its weights. Returns ``(draws, khat, excess)``,
    ``excess`` the draws' mean :math:`U` above its value at the fit (about ``p / 2`` for
    draws of the posterior at all points)."""
    import numpy as np
    from arviz_stats.base.array import array_stats
    full = torch.tensor([target.value(u) for u in unconstrained], dtype=unconstrained.dtype)
    # where the draws lie under the posterior at all points: for draws of it, U - U(mode)
    # is about p/2 (a chi-square over two); far more, and the subset's chains explored
    # another region (small importance weights' k-hat cannot show mass they never reached)
    excess = float(full.mean()) - target.value(target.start)
    with model.collocation_held_to(count):
        sub = torch.tensor([target.value(u) for u in unconstrained], dtype=unconstrained.dtype)
    raw = (sub - full).numpy()
    if not np.isfinite(raw).all():
        raw = np.where(np.isfinite(raw), raw, -np.inf)
    S = unconstrained.shape[0] // num_chains
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            lw, khat = array_stats.psislw(raw.reshape(1, -1), axis=-1)
        lw = np.asarray(lw).reshape(num_chains, S)
    except ValueError:          # too few draws for a Pareto fit of the tail: raw weights
        lw, khat = raw.reshape(num_chains, S), float("nan")
    out = []
    for c in range(num_chains):
        w = np.exp(lw[c] - lw[c].max())
        w = w / w.sum()
        edges = (np.arange(S) + 0.5) / S                  # systematic resampling
        idx = np.minimum(np.searchsorted(np.cumsum(w), edges), S - 1)
        out.append(unconstrained[c * S + torch.as_tensor(idx)])
    return torch.cat(out), float(np.asarray(khat).reshape(-1)[0]), excess


def sample_coefficients(model, num_warmup=500, num_samples=500, num_chains=1, seed=0,
                        progress=True, target_accept_prob=0.8, threads="auto",
                        hyperparameters=True, collocation=None):
    r"""Draw the equation coefficients of a fitted
    :class:`~pyro_pidkl.models.PhysicsConditionedGP` (or
    :class:`~pyro_pidkl.models.ConditionedSystemGP`), and the GP's own parameters, by NUTS
    (module docstring).

    :param model: a fitted conditioned GP (the chains start where the fit ended); a
        :class:`~pyro_pidkl.statespace.StateSpaceGP` runs its own
        (:meth:`~pyro_pidkl.statespace.StateSpaceGP.sample`, the arguments from
        ``num_warmup`` to ``progress`` passed on).
    :param int num_chains: chains, run one after the other (R-hat across them).
    :param bool progress: Pyro's progress bar per chain (default on: a sampler's run is
        minutes).
    :param threads: torch threads while sampling, as :func:`~pyro_pidkl.infer.fit`'s.
    :param bool hyperparameters: draw the GP's identified parameters too (default); ``False``
        holds them at the fit (empirical Bayes).
    :param collocation: the collocation points the chains condition on: ``None`` (default:
        all), a count (a maximin subset) or ``"auto"`` (:data:`SAMPLER_COLLOCATION` per
        input). With a subset each density is cheaper; the draws are then moved to the
        posterior at all points by importance weights (Pareto-smoothed; each chain
        resampled by them), the weights' Pareto :math:`\hat k` in ``diagnostics["khat"]``
        and a warning above :data:`KHAT_WARN`, or where the draws lie far below the
        posterior's value at the fit (``diagnostics["excess"]``: the subset's chains found
        another region, which small weights cannot show). Measured
        (``benchmarks/sampler_speed.py``): on the README's oscillator, the GP's parameters
        held, 50 of 200 points give the same intervals 1.7 times faster; on a two-output
        system the subset's chains settled 30% off in a rate with a k-hat of 0.05 (now
        warned); with the GP's parameters drawn the subset's posterior moves (k-hat 1.65).
        Use it where a run at all points has confirmed it. R-hat and effective sizes are
        those of the chains as they ran.
    :returns: :class:`CoefficientSamples`.
    """
    if getattr(model, "samples_itself", False):   # its own sampler (a state-space model)
        return model.sample(num_warmup, num_samples, num_chains, seed, progress)
    num_warmup = positive_int(num_warmup, "num_warmup", minimum=0)
    num_samples = positive_int(num_samples, "num_samples")
    num_chains = positive_int(num_chains, "num_chains")
    target = PosteriorTarget(model, hyperparameters)

    def potential(params):
        with warnings.catch_warnings():      # not converged: raised, then a divergence
            warnings.simplefilter("error", ConvergenceWarning)
            return target.potential(params["z"])

    def _one_chain(c):
        pyro.set_rng_seed(seed + 1000 * c)
        kernel = NUTS(potential_fn=potential, target_accept_prob=target_accept_prob)
        mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=num_warmup,
                    initial_params={"z": torch.zeros_like(target.start)},
                    disable_progbar=not progress)
        mcmc.run()
        z = mcmc.get_samples()["z"].detach().reshape(num_samples, -1)
        chains.append(target.start + z @ target.L.T)
        div = mcmc.diagnostics().get("divergences", {})
        divergences[f"chain {c}"] = list(next(iter(div.values()), [])) if div else []

    chains, divergences = [], {}
    count = _collocation_count(model, collocation)
    t0 = time.perf_counter()
    with torch_threads(fit_threads(model, threads)):
        with model.collocation_held_to(count):
            for c in range(num_chains):      # one after the other: the model is not pickled
                _one_chain(c)
        stacked = torch.stack(chains)                                # (chains, S, p)
        draws = stacked.reshape(-1, target.start.numel())
        khat = excess = None
        if count is not None and count < model.Z.shape[0]:
            draws, khat, excess = _importance_correction(target, model, draws, count,
                                                         num_chains)
    seconds = time.perf_counter() - t0
    diagnostics = {"theta": {"n_eff": effective_sample_size(stacked)}, "divergences":
                   divergences, "khat": khat, "excess": excess, "collocation": count}
    if num_chains > 1 or num_samples >= 4:
        diagnostics["theta"]["r_hat"] = split_gelman_rubin(stacked)
    p = target.start.numel()
    if excess is not None and excess > p / 2 + 3 * math.sqrt(p / 2) + 2:
        warnings.warn(f"The draws at {count} collocation points lie where the posterior at all "
                      f"{model.Z.shape[0]} is {excess:.1f} nats below its value at the fit "
                      f"(draws of it would be about {p / 2:.1f}): the subset's chains explored "
                      f"another region; rerun with collocation=None", ConvergenceWarning,
                      stacklevel=2)
    elif khat is not None and khat > KHAT_WARN:
        warnings.warn(f"The draws at {count} collocation points stand poorly for the posterior "
                      f"at all {model.Z.shape[0]} (the importance weights' Pareto k-hat is "
                      f"{khat:.2f} > {KHAT_WARN}): rerun with collocation=None",
                      ConvergenceWarning, stacklevel=2)
    return CoefficientSamples(target, draws, diagnostics, seconds, num_chains)


GUIDES = {"normal": "AutoNormal", "mvn": "AutoMultivariateNormal", "iaf": "AutoIAFNormal"}


def fit_coefficient_guide(model, guide="mvn", num_steps=1000, lr=0.02, num_samples=1000,
                          seed=0, threads="auto", hyperparameters=True):
    r"""Variational inference over a fitted conditioned GP's coefficients and GP
    parameters: the density of :func:`sample_coefficients` as a Pyro model with one site
    ``z`` (the unconstrained parameters whitened by their Laplace covariance at the fit,
    :math:`u = \hat u + L z`), an autoguide fitted by SVI (``Trace_ELBO``, Adam), then
    ``num_samples`` draws from it. Four particles per step, the learning rate decaying
    tenfold from ``lr`` over the fit.

    :param str guide: ``"normal"`` (``AutoNormal``, a diagonal Gaussian), ``"mvn"``
        (``AutoMultivariateNormal``, default) or ``"iaf"`` (``AutoIAFNormal``, a
        normalising flow).
    :param bool hyperparameters: as :func:`sample_coefficients`'.
    :returns: :class:`CoefficientSamples` (``losses`` the negative ELBO per step).
    """
    import pyro.distributions as dist
    from pyro import infer
    from pyro.infer import autoguide
    from pyro.infer.autoguide.initialization import init_to_value

    if guide not in GUIDES:
        raise ValueError(f"Expected guide to be one of {tuple(GUIDES)}; got {guide!r}")
    num_steps = positive_int(num_steps, "num_steps")
    num_samples = positive_int(num_samples, "num_samples")
    target = PosteriorTarget(model, hyperparameters)
    zero = torch.zeros_like(target.start)

    def density():
        # flat in effect (sd 1e3, centred at the fit), but proper: the flow guide's set-up
        # draws from the site; the posterior is near N(0, I) in z, where every guide starts
        z = pyro.sample("z", dist.Normal(zero, 1e3).to_event(1))
        pyro.factor("objective", -target.potential(z))

    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    # whitened, the posterior is near N(0, I) in z: the Gaussian guides start there (Pyro's
    # default scale, 0.1, would start them ten times too narrow)
    init = {} if guide == "iaf" else {"init_loc_fn": init_to_value(values={"z": zero}),
                                      "init_scale": 1.0}
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(zero.dtype)       # a flow's network in the model's precision
    try:
        q = getattr(autoguide, GUIDES[guide])(density, **init)
        q()                                   # its parameters made now, in that precision
    finally:
        torch.set_default_dtype(dtype)
    # the learning rate decays tenfold over the fit: the final iterate of a noisy ELBO
    decay = 0.1 ** (1.0 / num_steps)
    optim = pyro.optim.ClippedAdam({"lr": lr, "lrd": decay, "clip_norm": 10.0})
    svi = infer.SVI(density, q, optim, infer.Trace_ELBO(num_particles=4,
                                                        vectorize_particles=False))
    losses = []
    t0 = time.perf_counter()
    with torch_threads(fit_threads(model, threads)):
        for _ in range(num_steps):
            losses.append(float(svi.step()))
        with torch.no_grad():
            z = torch.stack([q()["z"].detach() for _ in range(num_samples)])
    seconds = time.perf_counter() - t0
    out = CoefficientSamples(target, target.start + z @ target.L.T, {}, seconds, 1)
    out.losses, out.guide = losses, q
    pyro.clear_param_store()
    return out
