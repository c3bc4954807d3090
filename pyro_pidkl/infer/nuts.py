r"""NUTS (Pyro's ``NUTS`` and ``MCMC``) or an autoguide fitted by SVI over a
physics-conditioned GP's equation coefficients, the GP's own parameters held at their
fitted values (empirical Bayes).

The target is the fit's objective as a density of the coefficients :math:`\theta`,

.. math::
    \log p(\theta \mid y) = \log p(y \mid v, \theta) + \log p(\theta) + \text{const},

:math:`\log p(y \mid v, \theta)` (or :math:`\log p(v, y \mid \theta)` with the joint
objective) at the Gauss-Newton solution for each :math:`\theta`, profiled over the kernel's
variance; :math:`p(\theta)` the coefficients' priors (``Parameter(1.0,
prior=dist.LogNormal(0, 1))``), and for a coefficient without one a flat prior on its
unconstrained scale (the log of a positive coefficient). NUTS moves on the unconstrained
scale, with the log-Jacobian of the constraint added for coefficients with a prior.

Predictions mix over draws: the mean and variance of :math:`f` are those of the mixture of
the plug-in posteriors at a thinned set of draws (the law of total variance), so intervals
carry the coefficients' uncertainty without the Laplace approximation.
"""

import math
import time

import pyro
import torch
from pyro.infer.mcmc import MCMC, NUTS
from pyro.ops.stats import effective_sample_size, split_gelman_rubin

from ..checks import positive_int
from ..param_scope import own_parameters
from .laplace import parameters_at
from .threads import fit_threads, torch_threads

__all__ = ["CoefficientSamples", "fit_coefficient_guide", "sample_coefficients"]


class _Potential(torch.autograd.Function):
    """The potential at ``u`` with its gradient from the model's own autograd (the model's
    coefficient tensors are swapped to ``u``, not written)."""

    @staticmethod
    def forward(ctx, u, model, thetas, sizes):
        values = [v.reshape(t.shape).clone().requires_grad_(True)
                  for v, t in zip(torch.split(u.detach(), sizes), thetas)]
        with torch.enable_grad(), parameters_at(thetas, values):
            loss = model._potential()
            for (_, owner, p), t, v in zip(model._coefficients(), thetas, values):
                spec = owner.specs[p]
                if spec.prior is not None:     # log |d theta / d u| of the constraint
                    transform = torch.distributions.transform_to(spec.constraint)
                    loss = loss - transform.log_abs_det_jacobian(t, transform(t)).sum()
            grads = torch.autograd.grad(loss, thetas, allow_unused=True)
        ctx.grad = torch.cat([(g if g is not None else torch.zeros_like(t)).reshape(-1)
                              for g, t in zip(grads, thetas)])
        return loss.detach()

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.grad, None, None, None


class CoefficientSamples:
    """Posterior draws of a conditioned GP's coefficients: ``samples`` ``{name: (S,)}`` in
    their own units, ``unconstrained`` ``(S, p)``, Pyro's ``diagnostics`` (``r_hat``,
    ``n_eff`` per coefficient, ``divergences``), ``seconds``."""

    def __init__(self, model, unconstrained, diagnostics, seconds, num_chains):
        self.model, self.unconstrained = model, unconstrained
        self.diagnostics, self.seconds, self.num_chains = diagnostics, seconds, num_chains
        self.samples = {}
        k = 0
        for (name, owner, p), t in zip(model._coefficients(), self._thetas()):
            n = t.numel()
            transform = torch.distributions.transform_to(owner.specs[p].constraint)
            self.samples[name] = transform(unconstrained[:, k:k + n]).squeeze(-1)
            k += n

    def _thetas(self):
        return self.model._laplace_parameters(False)[1]

    def summary(self, prob=0.9):
        """``{name: {"mean", "median", "lower", "upper", "r_hat", "n_eff"}}`` with the
        central ``prob`` interval."""
        lo, hi = (1 - prob) / 2, (1 + prob) / 2
        d = self.diagnostics.get("theta", {})
        out = {}
        for k, (name, draws) in enumerate(self.samples.items()):
            out[name] = {"mean": float(draws.mean()), "median": float(draws.median()),
                         "lower": float(torch.quantile(draws, lo)),
                         "upper": float(torch.quantile(draws, hi)),
                         "r_hat": float(d["r_hat"][k]) if "r_hat" in d else math.nan,
                         "n_eff": float(d["n_eff"][k]) if "n_eff" in d else math.nan}
        return out

    @own_parameters
    def predict(self, X, num_draws=40):
        r"""The mixture over ``num_draws`` evenly thinned draws of the plug-in posteriors
        at ``X``: ``(mean, var)`` of :math:`f`, the variance by the law of total variance."""
        model = self.model
        S = self.unconstrained.shape[0]
        idx = torch.linspace(0, S - 1, min(int(num_draws), S)).round().long()
        thetas = self._thetas()
        sizes = [t.numel() for t in thetas]
        keep = model.parameter_uncertainty
        model.parameter_uncertainty = False
        means, variances = [], []
        try:
            for i in idx.tolist():
                values = [v.reshape(t.shape).clone()
                          for v, t in zip(torch.split(self.unconstrained[i], sizes), thetas)]
                with torch.no_grad(), parameters_at(thetas, values):
                    m, v = model(X)
                means.append(m)
                variances.append(v)
        finally:
            model.parameter_uncertainty = keep
        M, V = torch.stack(means), torch.stack(variances)
        return M.mean(0), V.mean(0) + M.var(0, unbiased=False)

    def to_datatree(self):
        """An ArviZ ``DataTree`` with the draws (``posterior``, chains as Pyro ran them) and
        the divergences (``sample_stats``)."""
        import numpy as np
        from arviz_base import from_dict
        chains = self.num_chains
        posterior = {name: draws.reshape(chains, -1).numpy()
                     for name, draws in self.samples.items()}
        div = self.diagnostics.get("divergences", {})
        S = self.unconstrained.shape[0] // chains
        diverging = np.zeros((chains, S), dtype=bool)
        for c, steps in enumerate(div.values()):
            for step in steps:
                if 0 <= step < S:
                    diverging[c, step] = True
        return from_dict({"posterior": posterior, "sample_stats": {"diverging": diverging}})


def _fitted_coefficients(model):
    """``(thetas, sizes, start)`` of a fitted conditioned GP's learned coefficients: their
    unconstrained tensors, sizes, and values at the fit (one flat tensor); refused in one
    line for another model, an unfitted one or one without learned coefficients."""
    if not hasattr(model, "_laplace_parameters") or not hasattr(model, "_coefficients"):
        raise TypeError(f"Expected a PhysicsConditionedGP; got {type(model).__name__}")
    if not bool(getattr(model, "fitted", False)):
        raise ValueError("Expected a fitted model: call pk.fit(model) first (the GP's "
                         "parameters are held at their fitted values)")
    names, thetas, _ = model._laplace_parameters(False)
    if not names:
        raise ValueError("Expected a model with learned coefficients; it has none")
    return (thetas, [t.numel() for t in thetas],
            torch.cat([t.detach().reshape(-1) for t in thetas]))


def sample_coefficients(model, num_warmup=500, num_samples=500, num_chains=1, seed=0,
                        progress=False, target_accept_prob=0.8, threads="auto"):
    r"""Draw the equation coefficients of a fitted
    :class:`~pyro_pidkl.models.PhysicsConditionedGP` by NUTS (module docstring).

    :param model: a fitted conditioned GP (its GP parameters are held where the fit left
        them; the coefficients start there).
    :param int num_chains: chains, run one after the other (R-hat across them).
    :param threads: torch threads while sampling, as :func:`~pyro_pidkl.infer.fit`'s.
    :returns: :class:`CoefficientSamples`.
    """
    thetas, sizes, start = _fitted_coefficients(model)
    num_warmup = positive_int(num_warmup, "num_warmup", minimum=0)
    num_samples = positive_int(num_samples, "num_samples")
    num_chains = positive_int(num_chains, "num_chains")

    def potential(params):
        return _Potential.apply(params["theta"], model, thetas, sizes)

    def _one_chain(c):
        pyro.set_rng_seed(seed + 1000 * c)
        kernel = NUTS(potential_fn=potential, target_accept_prob=target_accept_prob)
        mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=num_warmup,
                    initial_params={"theta": start.clone()}, disable_progbar=not progress)
        mcmc.run()
        chains.append(mcmc.get_samples()["theta"].detach().reshape(num_samples, -1))
        div = mcmc.diagnostics().get("divergences", {})
        divergences[f"chain {c}"] = list(next(iter(div.values()), [])) if div else []

    chains, divergences = [], {}
    t0 = time.perf_counter()
    with torch_threads(fit_threads(model, threads)):
        for c in range(num_chains):         # one after the other: the model is not pickled
            _one_chain(c)
    seconds = time.perf_counter() - t0
    stacked = torch.stack(chains)                                    # (chains, S, p)
    diagnostics = {"theta": {"n_eff": effective_sample_size(stacked)}, "divergences":
                   divergences}
    if num_chains > 1 or num_samples >= 4:
        diagnostics["theta"]["r_hat"] = split_gelman_rubin(stacked)
    return CoefficientSamples(model, stacked.reshape(-1, start.numel()), diagnostics,
                              seconds, num_chains)


GUIDES = {"normal": "AutoNormal", "mvn": "AutoMultivariateNormal", "iaf": "AutoIAFNormal"}


def _laplace_scale(model, p, start):
    """A Cholesky factor of the coefficients' Laplace covariance at the fit (the GP's
    parameters held), or 0.1 I where it is not finite."""
    try:
        cov = model.laplace(nuisance=False)[3][:p, :p].detach()
        L = torch.linalg.cholesky(0.5 * (cov + cov.T))
        if bool(torch.isfinite(L).all()):
            return L
    except (RuntimeError, ValueError):
        pass
    return 0.1 * torch.eye(p, dtype=start.dtype)


def fit_coefficient_guide(model, guide="mvn", num_steps=1000, lr=0.02, num_samples=1000,
                          seed=0, threads="auto"):
    r"""Variational inference over a fitted conditioned GP's coefficients: the density of
    :func:`sample_coefficients` (on the unconstrained scale, GP parameters held) as a Pyro
    model with one site ``z``, the coefficients :math:`u = \hat u + L z` whitened by their
    Laplace covariance :math:`L L^\top` at the fit, an autoguide fitted by SVI
    (``Trace_ELBO``, Adam), then ``num_samples`` draws from it. Four particles per step,
    the learning rate decaying tenfold from ``lr`` over the fit.

    :param str guide: ``"normal"`` (``AutoNormal``, a diagonal Gaussian), ``"mvn"``
        (``AutoMultivariateNormal``, default) or ``"iaf"`` (``AutoIAFNormal``, a
        normalising flow).
    :returns: :class:`CoefficientSamples` (``losses`` the negative ELBO per step).
    """
    import pyro.distributions as dist
    from pyro import infer
    from pyro.infer import autoguide
    from pyro.infer.autoguide.initialization import init_to_value

    if guide not in GUIDES:
        raise ValueError(f"Expected guide to be one of {tuple(GUIDES)}; got {guide!r}")
    thetas, sizes, start = _fitted_coefficients(model)
    num_steps = positive_int(num_steps, "num_steps")
    num_samples = positive_int(num_samples, "num_samples")
    p = start.numel()

    # the site is z, u = start + L z with L L' the Laplace covariance of the coefficients
    # at the fit: the posterior is near N(0, I) in z, where every guide starts
    L = _laplace_scale(model, p, start)

    def density():
        # flat in effect (sd 1e3, centred at the fit), but proper: the flow guide's set-up
        # draws from the site
        z = pyro.sample("z", dist.Normal(torch.zeros_like(start), 1e3).to_event(1))
        pyro.factor("objective", -_Potential.apply(start + L @ z, model, thetas, sizes))

    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    init = {} if guide == "iaf" else {
        "init_loc_fn": init_to_value(values={"z": torch.zeros_like(start)})}
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(start.dtype)      # a flow's network in the model's precision
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
            draws = torch.stack([start + L @ q()["z"].detach() for _ in range(num_samples)])
    seconds = time.perf_counter() - t0
    out = CoefficientSamples(model, draws.reshape(-1, p), {}, seconds, 1)
    out.losses, out.guide = losses, q
    pyro.clear_param_store()
    return out
