r"""NUTS over a fitted :class:`~pyro_pidkl.statespace.StateSpaceGP`'s parameters on the
solver's :math:`O(N)` likelihood: the coefficients, the initial state and the noise,

.. math::
    \log p(v \mid y) = \log p(y \mid o = 0, v) + \log p(v) + \text{const},
    \qquad v = [\theta;\ x_0 / s;\ \log \sigma_y / s],

:math:`\log p(y \mid o = 0, v)` the filter's (:meth:`~pyro_pidkl.statespace.ode_filter.ODEFilter.evidence`,
its diffusion calibrated at each :math:`v`, linearised around the fit's trajectory) and
:math:`p(v)` weak: a coefficient's own prior where the equation declares one
(``Parameter(..., prior=...)``, with the log-Jacobian of its constraint), else a normal of
standard deviation :data:`~pyro_pidkl.infer.laplace.IDENTIFIED_PRIOR_SD` about the user's
starting value in its unconstrained space (a rate the data leave free is drawn from its
prior's range instead of wandering to :math:`-\infty` on its log); the same on each
initial value in units of its scale; flat on the log noise. The chains run on
:math:`z` with :math:`v = \hat v + L z`, :math:`L L^\top` the fit's Laplace covariance
(its free directions bounded by the weak prior,
:func:`~pyro_pidkl.statespace.prediction.prediction_covariance`), by Pyro's ``NUTS``.
Initial values the user holds (``known``) are not drawn.
"""

import contextlib
import math
import time

import numpy as np
import pyro
import torch
from pyro.infer.mcmc import MCMC, NUTS
from pyro.ops.stats import effective_sample_size, split_gelman_rubin

__all__ = ["StateSpaceTarget", "sample"]


class StateSpaceTarget:
    r"""The parameters :func:`sample` draws, as
    :class:`~pyro_pidkl.infer.coefficient_samples.CoefficientSamples` reads them:
    ``names`` (the coefficients, ``"x0.<component>"``, ``"noise.<output>"``), their
    ``constraints`` (a coefficient's own, real initial values, positive noise scales), one
    entry each (``sizes``); ``user(v)`` maps the solver's :math:`v` rows to those
    unconstrained columns in the user's units, :meth:`at` sets a row on the model."""

    def __init__(self, model):
        filt = model.filter
        self.model = model
        P, C = filt.P, filt.C
        self.num_coefficients = P
        #: the entries of :math:`v` drawn (an initial value the user holds is not)
        self.free = [k for k in range(P + C + len(filt.measured)) if k - P not in model.known]
        names = ([n for n, _ in filt.transforms] + [f"x0.{c}" for c in model.components]
                 + [f"noise.{model.components[c]}" for c in filt.measured])
        real, positive = (torch.distributions.constraints.real,
                          torch.distributions.constraints.positive)
        constraints = ([model.specs[n].constraint for n, _ in filt.transforms]
                       + [real] * C + [positive] * len(filt.measured))
        self.names = [names[k] for k in self.free]
        self.constraints = [constraints[k] for k in self.free]
        self.sizes = [1] * len(self.names)
        scale = filt.scale.numpy()
        shift = np.r_[np.zeros(P + C), np.log(scale[filt.measured])]
        mult = np.r_[np.ones(P), scale, np.ones(len(filt.measured))]
        self._shift, self._mult = shift[self.free], mult[self.free]
        self._base = np.asarray(model.result.v, dtype=float).copy()

    def user(self, v):
        """Rows of :math:`v` ``(S, n)`` as the drawn entries' unconstrained columns in user
        units ``(S, len(free))``."""
        return torch.as_tensor(np.asarray(v)[..., self.free] * self._mult + self._shift)

    def solver(self, u):
        """The inverse of :meth:`user` for one row: the full :math:`v` ``(n,)``."""
        v = self._base.copy()
        v[self.free] = (np.asarray(u, dtype=float) - self._shift) / self._mult
        return v

    @contextlib.contextmanager
    def at(self, u):
        """The model's fit set to the draw ``u`` (user-unit unconstrained columns) inside
        the block, its predictions without the Laplace share; put back on leaving."""
        model = self.model
        saved = (model.result.v, model._out, model.parameter_uncertainty)
        model.result.v = self.solver(u)
        model._out, model.parameter_uncertainty = None, False
        model._set_coefficients()
        try:
            yield
        finally:
            model.result.v, model._out, model.parameter_uncertainty = saved
            model._set_coefficients()


def _log_prior(model, v, start):
    """The weak prior (module docstring) at ``v`` ``(n,)`` (a tensor)."""
    from ..infer.laplace import IDENTIFIED_PRIOR_SD
    filt = model.filter
    P, C = filt.P, filt.C
    out = v.new_zeros(())
    for k, (name, transform) in enumerate(filt.transforms):
        prior = model.specs[name].prior
        if prior is not None:
            value = transform(v[k])
            out = out + prior.log_prob(value).sum() + transform.log_abs_det_jacobian(
                v[k], value).sum()
        else:
            out = out - 0.5 * ((v[k] - start[k]) / IDENTIFIED_PRIOR_SD) ** 2
    free = [c for c in range(C) if c not in model.known]
    if free:
        d = (v[P:P + C][free] - start[P:P + C][free]) / IDENTIFIED_PRIOR_SD
        out = out - 0.5 * (d ** 2).sum()
    return out


def sample(model, num_warmup=500, num_samples=500, num_chains=2, seed=0, progress=True,
           target_accept_prob=0.8):
    r"""Draw a fitted state-space model's parameters by NUTS (module docstring).

    :param model: a fitted :class:`~pyro_pidkl.statespace.StateSpaceGP` (the chains start
        at its fit).
    :param int num_chains: chains, one after the other (R-hat across them).
    :param bool progress: Pyro's progress bar per chain.
    :returns: a :class:`~pyro_pidkl.infer.coefficient_samples.CoefficientSamples`
        (``summary()``, ``predict(t)`` mixed over draws, ``diagnostics`` with ``r_hat``,
        ``n_eff`` and ``divergences``).
    """
    from ..checks import positive_int
    from ..infer.coefficient_samples import CoefficientSamples
    from ..infer.threads import torch_threads
    from .prediction import prediction_covariance
    if model.result is None:
        raise RuntimeError("Expected a fitted model: call pk.fit(model) first (the chains "
                           "start at its fit)")
    num_warmup = positive_int(num_warmup, "num_warmup", minimum=0)
    num_samples = positive_int(num_samples, "num_samples")
    num_chains = positive_int(num_chains, "num_chains")
    filt = model.filter
    v_hat = np.asarray(model.result.v, dtype=float)
    start = torch.as_tensor(model._start()[0])
    target = StateSpaceTarget(model)
    free = target.free
    cov = prediction_covariance(model)[np.ix_(free, free)]
    lam, vecs = np.linalg.eigh(0.5 * (cov + cov.T))
    L = torch.as_tensor(vecs * np.sqrt(np.clip(lam, 1e-12 * max(lam.max(), 1e-300), None)))
    base = torch.as_tensor(v_hat)
    index = torch.as_tensor(free)
    u_star = model.result.u_star

    def v_of(z):
        return base.index_add(0, index, L @ z)

    def potential(params):
        z = params["z"]
        v = v_of(z)
        try:
            out = filt.evidence(v, u_star)["log_evidence"] + _log_prior(model, v, start)
        except (RuntimeError, ValueError):          # a trial point the filter cannot take
            return (z * 0).sum() + math.inf
        if not torch.isfinite(out):
            return (z * 0).sum() + math.inf
        return -out

    chains, divergences = [], {}
    began = time.perf_counter()
    with torch_threads(1):
        for c in range(num_chains):
            pyro.set_rng_seed(seed + 1000 * c)
            kernel = NUTS(potential_fn=potential, target_accept_prob=target_accept_prob)
            mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=num_warmup,
                        initial_params={"z": torch.zeros(len(free), dtype=torch.float64)},
                        disable_progbar=not progress)
            mcmc.run()
            z = mcmc.get_samples()["z"].detach().reshape(num_samples, -1)
            v = base.expand(num_samples, -1).index_add(1, index, z @ L.T)
            chains.append(target.user(v.numpy()))
            div = mcmc.diagnostics().get("divergences", {})
            divergences[f"chain {c}"] = list(next(iter(div.values()), [])) if div else []
    stacked = torch.stack(chains)                                     # (chains, S, n)
    diagnostics = {"theta": {"n_eff": effective_sample_size(stacked)},
                   "divergences": divergences}
    if num_chains > 1 or num_samples >= 4:
        diagnostics["theta"]["r_hat"] = split_gelman_rubin(stacked)
    return CoefficientSamples(target, stacked.reshape(-1, stacked.shape[-1]),
                              diagnostics, time.perf_counter() - began, num_chains)
