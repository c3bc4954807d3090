r"""NUTS (Pyro's ``NUTS`` and ``MCMC``) or an autoguide fitted by SVI over a
physics-conditioned GP's equation coefficients :math:`\theta` and, by default, the GP's own
scalar parameters :math:`\eta` (lengthscales, noise, source amplitude) that the objective
identifies; those it leaves flat (a noise at its floor) are held at their fitted values.

The target is the fit's objective as a density,

.. math::
    \log p(\theta, \eta \mid y) = \log p(y \mid v, \theta, \eta) + \log p(\theta)
        + \log p(\eta) + \text{const},

:math:`\log p(y \mid v, \theta, \eta)` (or :math:`\log p(v, y \mid \theta, \eta)` with the
joint objective) at the Gauss-Newton solution for each point, profiled over the kernel's
variance; :math:`p(\theta)` the coefficients' priors (``Parameter(1.0,
prior=dist.LogNormal(0, 1))``; a coefficient without one has a flat prior on its
unconstrained scale, the log of a positive one) and :math:`p(\eta)` the model's ``priors``.
A GP parameter drawn without a prior of the model's gets a weak one
(:func:`default_prior`): flat on the log scale, a noise would pile its mass at its floor
(where the data are interpolated exactly, a region the likelihood barely penalises and the
log scale makes vast) and a lengthscale could run off to where the GP is constant. Both
samplers move on :math:`z`, the unconstrained parameters whitened by their Laplace
covariance at the fit, :math:`u = \hat u + L z`, with the log-Jacobian of a constraint added
for a parameter with a prior.

Predictions mix over draws: the mean and variance of :math:`f` are those of the mixture of
the plug-in posteriors at a thinned set of draws (the law of total variance), so intervals
carry the parameters' uncertainty without the Laplace approximation.
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
from ..param_scope import own_parameters, shared_store
from .laplace import PRIOR_SD, parameters_at
from .threads import fit_threads, torch_threads

__all__ = ["CoefficientSamples", "DEFAULT_PRIORS", "default_prior", "fit_coefficient_guide",
           "sample_coefficients"]

# a trajectory that leaves the region where the joint covariance can be factored, or where
# Gauss-Newton does not converge (a step far out while NUTS finds its step size), is a
# divergence, as Pyro treats a singular matrix: the density there is not evaluated
register_exception_handler("pyro_pidkl", lambda e: isinstance(
    e, (NonFiniteError, NotPositiveDefiniteError, ConvergenceWarning)))


class _Target:
    r"""The parameters a sampler draws: ``names``, unconstrained ``tensors``, their
    ``constraints``, ``priors`` (``None``: flat on the unconstrained scale) and ``sizes``;
    ``start`` the flat unconstrained values at the fit and ``L`` ``(p, p)`` the Cholesky
    factor of their Laplace covariance there (``0.1 I`` where it is not finite); ``extra``
    ``{entry: prior}`` the default priors (:func:`default_prior`) that the model's objective
    lacks. Refused in one line for another model, an unfitted one or one without learned
    coefficients."""

    def __init__(self, model, hyperparameters=True):
        if not hasattr(model, "_laplace_parameters") or not hasattr(model, "_coefficients"):
            raise TypeError(f"Expected a PhysicsConditionedGP or ConditionedSystemGP; got "
                            f"{type(model).__name__}")
        if not bool(getattr(model, "fitted", False)):
            raise ValueError("Expected a fitted model: call pk.fit(model) first (the samplers "
                             "start where the fit ended)")
        coefficients = model._coefficients()
        if not coefficients:
            raise ValueError("Expected a model with learned coefficients; it has none")
        self.model = model
        self.extra = {}
        entries = [(name, getattr(owner, p + "_unconstrained"), owner.specs[p].constraint,
                    owner.specs[p].prior) for name, owner, p in coefficients]
        self.num_coefficients = len(entries)
        _, _, eta = model._laplace_parameters(True)
        offsets, k = {}, sum(t.numel() for _, t, _, _ in entries)
        for q in eta:                      # where each GP parameter sits in the Laplace vector
            offsets[id(q)] = k
            k += q.numel()
        rows = list(range(sum(t.numel() for _, t, _, _ in entries)))
        if hyperparameters:
            cov = _laplace(model, True)
            for name, owner, attr in model.hyperparameters():
                q = owner._parameters[attr + "_unconstrained"]
                idx = list(range(offsets[id(q)], offsets[id(q)] + q.numel()))
                if bool((cov.diagonal()[idx] > 0).all()):  # identified; else held at the fit
                    prior = model.priors.get(name)
                    if prior is None:       # not in the model's objective: added here
                        prior = default_prior(name, q)
                        self.extra[len(entries)] = prior
                    entries.append((name, q, owner._pyro_params[attr][0], prior))
                    rows += idx
        else:
            cov = _laplace(model, False)
        self.names = [e[0] for e in entries]
        self.tensors = [e[1] for e in entries]
        self.constraints = [e[2] for e in entries]
        self.priors = [e[3] for e in entries]
        self.sizes = [t.numel() for t in self.tensors]
        self.start = torch.cat([t.detach().reshape(-1) for t in self.tensors])
        self.L = _whitening(cov[rows][:, rows], self.start)

    def values(self, u):
        """The flat unconstrained ``u`` as a list of tensors shaped like ``tensors``."""
        return [v.reshape(t.shape).clone() for v, t in zip(torch.split(u, self.sizes),
                                                             self.tensors)]

    def potential(self, z):
        """The negative log density at whitened ``z`` (differentiable in ``z``)."""
        return _Potential.apply(self.start + self.L @ z, self)

    def value(self, u):
        """The negative log density at unconstrained ``u`` (a float, no gradient)."""
        values = self.values(u.detach())
        with torch.no_grad(), pyro.poutine.block(), shared_store(), \
                parameters_at(self.tensors, values):
            return float(_negative_log_density(self, self.model._potential()))


#: the default priors of the GP's parameters that the samplers draw, in the model's units
#: (inputs scaled to the domain's spread, noises and variances relative to the signal's):
#: wide on the log scale (two standard deviations: a factor of 20 either way for a
#: lengthscale, 55 for a noise or a variance)
DEFAULT_PRIORS = {"lengthscale": (0.0, 1.5), "noise": (math.log(1e-2), 2.0),
                  "variance": (0.0, 2.0)}


def default_prior(name, tensor):
    r"""The weak prior a sampler gives the GP parameter ``name`` drawn without one of the
    model's: LogNormal with the location and scale of :data:`DEFAULT_PRIORS` by the name's
    last part (``"kernel.lengthscale"`` :math:`\to` lengthscale), or ``None`` (flat on the
    unconstrained scale) for another (an unobserved output's mean)."""
    import pyro.distributions as dist
    kind = name.rsplit(".", 1)[-1]
    if kind not in DEFAULT_PRIORS:
        return None
    loc, scale = DEFAULT_PRIORS[kind]
    return dist.LogNormal(torch.tensor(loc, dtype=tensor.dtype),
                          torch.tensor(scale, dtype=tensor.dtype))


def _laplace(model, nuisance):
    """The Laplace covariance at the fit, over the coefficients (and the GP's parameters
    with ``nuisance``), under the weak prior where the data leave a coefficient free."""
    cov = model.laplace(nuisance=nuisance)[3]
    if not bool(torch.isfinite(cov).all()):
        cov = model.laplace(nuisance=nuisance, prior_sd=PRIOR_SD)[3]
    return cov.detach()


def _whitening(cov, start):
    """A Cholesky factor of ``cov``, or ``0.1 I`` where it is not finite."""
    try:
        L = torch.linalg.cholesky(0.5 * (cov + cov.T))
        if bool(torch.isfinite(L).all()):
            return L
    except (RuntimeError, ValueError):
        pass
    return 0.1 * torch.eye(start.numel(), dtype=start.dtype)


def _negative_log_density(target, loss):
    """The model's negative objective ``loss`` with, for each parameter with a prior, the
    log-Jacobian of its constraint and a default prior the objective lacks."""
    for k, (t, constraint, prior) in enumerate(zip(target.tensors, target.constraints,
                                                   target.priors)):
        if prior is not None:          # log |d value / d u| of the constraint
            transform = torch.distributions.transform_to(constraint)
            value = transform(t)
            loss = loss - transform.log_abs_det_jacobian(t, value).sum()
            if k in target.extra:      # a default prior, not in the objective
                loss = loss - prior.log_prob(value).sum()
    return loss


class _Potential(torch.autograd.Function):
    """The potential at unconstrained ``u`` with its gradient from the model's own autograd
    (the model's tensors are swapped to ``u``, not written)."""

    @staticmethod
    def forward(ctx, u, target):
        values = [v.requires_grad_(True) for v in target.values(u.detach())]
        # blocked and in the store as it is: the model's sites must not enter an SVI trace
        # around it, and a scope's save and restore inside the SVI step would replace the
        # guide's constrained parameters by plain tensors (every nonlinear model failed)
        with torch.enable_grad(), pyro.poutine.block(), shared_store(), \
                parameters_at(target.tensors, values):
            loss = _negative_log_density(target, target.model._potential())
            grads = torch.autograd.grad(loss, target.tensors, allow_unused=True)
        ctx.grad = torch.cat([(g if g is not None else torch.zeros_like(t)).reshape(-1)
                              for g, t in zip(grads, target.tensors)])
        return loss.detach()

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.grad, None


class CoefficientSamples:
    """Posterior draws of a conditioned GP's parameters: ``samples`` ``{name: (S,) or (S,
    n)}`` in their own units (the coefficients, then the GP's parameters drawn, e.g.
    ``"kernel.lengthscale"``), ``unconstrained`` ``(S, p)``, Pyro's ``diagnostics``
    (``r_hat``, ``n_eff`` per unconstrained entry, ``divergences``), ``seconds``."""

    def __init__(self, target, unconstrained, diagnostics, seconds, num_chains):
        self.model, self.target = target.model, target
        self.unconstrained = unconstrained
        self.diagnostics, self.seconds, self.num_chains = diagnostics, seconds, num_chains
        self.samples = {}
        k = 0
        for name, constraint, n in zip(target.names, target.constraints, target.sizes):
            transform = torch.distributions.transform_to(constraint)
            draws = transform(unconstrained[:, k:k + n])
            self.samples[name] = draws.squeeze(-1) if n == 1 else draws
            k += n

    @property
    def coefficients(self):
        """The names of the equation's coefficients among ``samples``."""
        return self.target.names[:self.target.num_coefficients]

    def _scalars(self):
        """``(label, draws (S,), k)`` per scalar entry, ``k`` its unconstrained column."""
        k = 0
        for name, n in zip(self.target.names, self.target.sizes):
            draws = self.samples[name].reshape(self.unconstrained.shape[0], n)
            for i in range(n):
                yield (name if n == 1 else f"{name}[{i}]"), draws[:, i], k
                k += 1

    def summary(self, prob=0.9):
        """``{name: {"mean", "median", "lower", "upper", "r_hat", "n_eff"}}`` with the
        central ``prob`` interval, one entry per scalar (``"kernel.lengthscale[0]"`` for a
        vector's)."""
        lo, hi = (1 - prob) / 2, (1 + prob) / 2
        d = self.diagnostics.get("theta", {})
        out = {}
        for label, draws, k in self._scalars():
            out[label] = {"mean": float(draws.mean()), "median": float(draws.median()),
                          "lower": float(torch.quantile(draws, lo)),
                          "upper": float(torch.quantile(draws, hi)),
                          "r_hat": float(d["r_hat"][k]) if "r_hat" in d else math.nan,
                          "n_eff": float(d["n_eff"][k]) if "n_eff" in d else math.nan}
        return out

    def _thinned(self, num_draws):
        """Indices of ``num_draws`` draws evenly spread over each chain, ``(chains, k)``."""
        S = self.unconstrained.shape[0] // self.num_chains
        per = torch.linspace(0, S - 1, max(1, min(int(num_draws), S))).round().long()
        return torch.arange(self.num_chains)[:, None] * S + per[None, :]

    def at_draws(self, idx):
        """Iterate over the draws ``idx`` (a 1-D index), the model's parameters set to each
        inside the loop's body (Laplace's sigma points off): yields the draw's index."""
        model, target = self.model, self.target
        keep = model.parameter_uncertainty
        model.parameter_uncertainty = False
        try:
            for i in idx.tolist():
                with torch.no_grad(), parameters_at(target.tensors,
                                                    target.values(self.unconstrained[i])):
                    yield i
        finally:
            model.parameter_uncertainty = keep

    @own_parameters
    def predict(self, X, num_draws=40):
        r"""The mixture over ``num_draws`` evenly thinned draws of the plug-in posteriors
        at ``X``: ``(mean, var)`` of :math:`f`, the variance by the law of total variance."""
        means, variances = [], []
        for _ in self.at_draws(self._thinned(num_draws // self.num_chains or 1).flatten()):
            m, v = self.model(X)
            means.append(m)
            variances.append(v)
        M, V = torch.stack(means), torch.stack(variances)
        return M.mean(0), V.mean(0) + M.var(0, unbiased=False)

    def to_datatree(self, X_test=None, y_test=None, num_draws=100, seed=0):
        """An ArviZ ``DataTree``: ``posterior`` (every draw, chains as they ran; a vector
        parameter with a dim of its own), ``sample_stats`` (``diverging``) and, with
        ``X_test``, the predictive groups of
        :func:`~pyro_pidkl.diagnostics.arviz_tools.to_datatree` (``posterior_predictive``,
        ``log_likelihood``, ``observed_data``) from ``num_draws`` thinned draws per chain,
        one function draw at each."""
        import numpy as np
        from ..diagnostics.arviz_tools import predictive_groups, with_input_coords
        from arviz_base import from_dict
        chains = self.num_chains
        S = self.unconstrained.shape[0] // chains
        posterior, dims = {}, {}
        for name, draws in self.samples.items():
            posterior[name] = draws.reshape(chains, S, *draws.shape[1:]).numpy()
            if draws.dim() > 1:
                dims[name] = [f"{name}_dim"]
        div = self.diagnostics.get("divergences", {})
        diverging = np.zeros((chains, S), dtype=bool)
        for c, steps in enumerate(div.values()):
            for step in steps:
                if 0 <= step < S:
                    diverging[c, step] = True
        data = {"posterior": posterior, "sample_stats": {"diverging": diverging}}
        if X_test is not None:
            idx = self._thinned(num_draws)
            gen = torch.Generator().manual_seed(seed)
            groups = [predictive_groups(self.model, X_test, 1, gen)
                      for _ in self.at_draws(idx.flatten())]
            extra, extra_dims = _stack_groups(groups, idx.shape, self.model, y_test)
            data.update(extra)
            dims.update(extra_dims)
        tree = from_dict(data, dims=dims)
        return with_input_coords(tree, self.model, X_test) if X_test is not None else tree


def _stack_groups(groups, shape, model, y_test):
    """Per-draw predictive groups (one function draw each) stacked to ``(chain, draw,
    ...)``, with the observed data; the function's draws at the training inputs are left
    out (the posterior group holds the parameters' draws, more of them)."""
    import numpy as np
    from ..diagnostics.arviz_tools import observed_group
    first, dims = groups[0]
    out = {group: {var: np.concatenate([g[0][group][var] for g in groups]).reshape(
        *shape, *first[group][var].shape[1:]) for var in first[group]}
        for group in first if group != "posterior"}
    out["observed_data"] = observed_group(model, y_test, first)
    return out, {k: v for k, v in dims.items() if k != "f_train"}


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

    :param model: a fitted conditioned GP (the chains start where the fit ended).
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
    num_warmup = positive_int(num_warmup, "num_warmup", minimum=0)
    num_samples = positive_int(num_samples, "num_samples")
    num_chains = positive_int(num_chains, "num_chains")
    target = _Target(model, hyperparameters)

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
    target = _Target(model, hyperparameters)
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
