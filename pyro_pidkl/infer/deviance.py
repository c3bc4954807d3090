r"""Counts in a least-squares fit of an ODE's trajectory: deviance residuals, whose half sum
of squares is the counts' negative log-likelihood.

An output observed as counts is the log of their mean, :math:`\eta = x_c(t)`,
:math:`\mu = e^\eta`. Its observations enter the exact fit
(:mod:`~pyro_pidkl.infer.shooting`, :mod:`~pyro_pidkl.infer.multistart`,
:mod:`~pyro_pidkl.infer.exact_fit`) as the signed square roots of the unit deviances,

.. math::
    r_i = \operatorname{sign}(y_i - \mu_i) \sqrt{2\,d(y_i, \mu_i)}, \qquad
    d = y \log\frac{y}{\mu} - (y - \mu) \;\;(\text{Poisson}), \qquad
    d = y \log\frac{y}{\mu} - (y + \phi) \log\frac{y + \phi}{\mu + \phi}
    \;\;(\text{negative binomial, dispersion } \phi),

so that :math:`\tfrac12 \sum_i r_i^2 = -\log p(y \mid \mu) + \text{const}(y)` exactly:
least squares on them is maximum likelihood, and the Gauss-Newton Hessian
:math:`J^\top J` is the Fisher information at the optimum (near :math:`y = \mu`,
:math:`r \approx (y - \mu)/\sqrt{\operatorname{Var} y}`). A Gaussian output's residuals
stay :math:`(y - x)/\sigma` with its noise profiled (:func:`data_nll`).

An observation of an output is ``(t, y)`` (Gaussian) or ``(t, y, likelihood)`` with a
:class:`Poisson`, :class:`NegativeBinomial` or :class:`LogNormal` likelihood (log-normal
data: residuals :math:`(\log y - \log x)/s`, the state itself the output, not its log).
"""

import math

import numpy as np
import torch

__all__ = ["LogNormal", "NegativeBinomial", "Poisson", "count_likelihoods", "data_nll",
           "data_residuals", "likelihood_of", "residual_scales"]


class Poisson:
    """Poisson counts of mean :math:`e^\\eta`."""

    kind = "poisson"

    def unit_deviance(self, y, mu):
        """:math:`d(y, \\mu)` (module docstring), elementwise."""
        return torch.xlogy(y, y / mu) - (y - mu)

    def residuals(self, y, log_mean):
        """The signed root deviances ``r`` (the shape of ``log_mean``; ``y`` broadcasts)."""
        y = torch.as_tensor(y, dtype=torch.float64)
        eta = torch.as_tensor(log_mean, dtype=torch.float64).clamp(max=700.0)
        mu = eta.exp()
        d = self.unit_deviance(y, mu).clamp(min=0.0)
        return torch.sign(y - mu) * (2 * d).sqrt()

    def __repr__(self):
        return "Poisson()"


class NegativeBinomial(Poisson):
    """Negative-binomial counts of mean :math:`e^\\eta` and dispersion ``dispersion``
    (variance :math:`\\mu + \\mu^2/\\phi`), the dispersion held."""

    kind = "negative_binomial"

    def __init__(self, dispersion):
        dispersion = float(dispersion)
        if not (math.isfinite(dispersion) and dispersion > 0):
            raise ValueError(f"Expected a positive finite dispersion; got {dispersion!r}")
        self.dispersion = dispersion

    def unit_deviance(self, y, mu):
        phi = self.dispersion
        return torch.xlogy(y, y / mu) - (y + phi) * torch.log((y + phi) / (mu + phi))

    def __repr__(self):
        return f"NegativeBinomial({self.dispersion:.4g})"


class LogNormal:
    r"""Log-normal data of a positive state :math:`x`, :math:`\log y \sim \mathcal{N}(\log
    x, s^2)`, the variance held: residuals :math:`(\log y - \log x)/s`, whose half sum of
    squares is :math:`-\log p(y \mid x)` but for constants (a state at or below zero is as
    far off as the smallest positive double)."""

    kind = "lognormal"

    def __init__(self, variance):
        variance = float(variance)
        if not (math.isfinite(variance) and variance > 0):
            raise ValueError(f"Expected a positive finite variance; got {variance!r}")
        self.variance = variance

    def residuals(self, y, state):
        """``(log y - log x) / s`` (the shape of ``state``; ``y`` broadcasts)."""
        y = torch.as_tensor(y, dtype=torch.float64)
        x = torch.as_tensor(state, dtype=torch.float64).clamp(min=1e-300)
        return (y.log() - x.log()) / math.sqrt(self.variance)

    def __repr__(self):
        return f"LogNormal({self.variance:.4g})"


def likelihood_of(observation):
    """The likelihood of an observation ``(t, y[, likelihood])``: ``None`` for Gaussian."""
    return observation[2] if len(observation) > 2 else None


def count_likelihoods(observations):
    """``{component: likelihood}`` of the components observed as counts."""
    return {c: likelihood_of(o) for c, o in enumerate(observations)
            if likelihood_of(o) is not None}


def residual_scales(sd, observations):
    r"""Each component's residual scale ``(C,)`` (a float copy of ``sd``): its noise
    standard deviation for a Gaussian component, 1 for one observed as counts (its
    residuals are deviance residuals, already standardised). The one owner of that rule for
    shooting, the multistart search and the exact fit."""
    out = np.array(sd, dtype=float, copy=True).reshape(-1)
    out[list(count_likelihoods(observations))] = 1.0
    return out


def data_residuals(y, fit, obs_c, sd, counts):
    r"""The data's residuals ``(B, N)`` of fits ``fit`` ``(B, N)`` to ``y`` ``(N,)`` of
    components ``obs_c`` ``(N,)``: :math:`(y - x)/\sigma_c` for a Gaussian component, the
    deviance residuals of a count component's ``likelihood`` (``counts``:
    ``{component: likelihood}``), as torch tensors."""
    y = torch.as_tensor(y, dtype=torch.float64)
    fit = torch.as_tensor(fit, dtype=torch.float64)
    obs_c = torch.as_tensor(obs_c)
    out = (y - fit) / torch.as_tensor(sd, dtype=torch.float64)[obs_c]
    for c, likelihood in counts.items():
        m = obs_c == c
        out[:, m] = likelihood.residuals(y[m], fit[:, m])
    return out


def data_nll(r, obs_c, counts):
    r"""The data's negative log-likelihood ``(B,)`` from residuals ``r`` ``(B, N)`` of the
    data in their units (a Gaussian component's :math:`y - x`, a count component's
    deviance residuals) of components ``obs_c`` ``(N,)``: :math:`\sum_c (n_c/2) \log
    \overline{r_c^2}` over the Gaussian components (each noise at its maximum) plus
    :math:`\tfrac12 \sum_i r_i^2` over the counts, constants dropped (``inf`` where not
    finite)."""
    r = torch.as_tensor(r, dtype=torch.float64)
    obs_c = torch.as_tensor(obs_c)
    out = torch.zeros(r.shape[0], dtype=r.dtype)
    for c in torch.unique(obs_c).tolist():
        m = obs_c == c
        if c in counts:
            out = out + 0.5 * r[:, m].pow(2).sum(1)
        else:
            out = out + 0.5 * int(m.sum()) * r[:, m].pow(2).mean(1).clamp(min=1e-300).log()
    return torch.where(torch.isfinite(out), out, torch.full_like(out, math.inf))
