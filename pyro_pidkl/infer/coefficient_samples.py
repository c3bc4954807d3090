r"""Posterior draws of a conditioned model's parameters, from NUTS or a fitted autoguide
(:mod:`~pyro_pidkl.infer.nuts`): their summary, predictions mixed over them, and ArviZ.

Predictions mix over draws: the mean and variance of :math:`f` are those of the mixture of
the plug-in posteriors at a thinned set of draws (the law of total variance),

.. math::
    \mathbb{E} f = \tfrac1S \sum_s \mu_s, \qquad
    \operatorname{var} f = \tfrac1S \sum_s \bigl(\sigma^2_s + \mu_s^2\bigr) - (\mathbb{E} f)^2,

so intervals carry the parameters' uncertainty without the Laplace approximation.
"""

import math

import torch

from ..param_scope import own_parameters
from .laplace import parameters_at

__all__ = ["CoefficientSamples"]


class CoefficientSamples:
    """Posterior draws of a conditioned GP's (or a state-space model's) parameters: ``samples`` ``{name: (S,) or (S,
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
        if hasattr(target, "at"):           # a target that sets its own draws on the model
            for i in idx.tolist():
                with torch.no_grad(), target.at(self.unconstrained[i]):
                    yield i
            return
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
