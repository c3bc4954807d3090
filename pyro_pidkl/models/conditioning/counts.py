r"""Counts and log-normal data as a conditioned model's observations: Poisson or
negative-binomial data of an output that is the log of their mean, conditioned on through a
Gaussian working response (the Laplace approximation, as penalised quasi-likelihood fits a
GLMM), for one equation's series and for each output of a system alike.

An output :math:`f_c` observed as counts is the log of their mean,
:math:`y_i \sim \mathrm{Poisson}(e^{f_c(x_i)})` or
:math:`\mathrm{NB}(\text{mean } \mu_i = e^{f_c(x_i)}, \text{dispersion } r)` (variance
:math:`\mu + \mu^2 / r`, :math:`r` learned). Around the posterior mode :math:`\hat f` at the
data, the likelihood is replaced by a Gaussian of the working response

.. math::
    z_i = \hat f_i + \frac{y_i - \hat\mu_i}{\hat\mu_i}, \qquad
    z_i \mid f \sim \mathcal{N}(f(x_i), W_i^{-1}), \qquad
    W_i = \hat\mu_i \;\;(\text{Poisson}), \quad \frac{\hat\mu_i r}{\hat\mu_i + r}
    \;\;(\text{NB})

(the Fisher weights of the log link), so the joint of the data and the equations stays
Gaussian (:mod:`~pyro_pidkl.models.system.joint`, :mod:`~pyro_pidkl.models.single.joint`); :math:`\hat f` is iterated to the
posterior mean given :math:`z` (Fisher scoring), between the fit's optimiser runs, with
Gauss-Newton (:meth:`CountObservations.relinearise`). The objective is the Laplace
approximation of :math:`\log p(y \mid v)`,

.. math::
    \log \mathcal{N}(z \mid m, K + W^{-1}) + \sum_i \Bigl[\log p(y_i \mid \hat f_i)
        - \log \mathcal{N}(z_i \mid \hat f_i, W_i^{-1})\Bigr]

(exact for a Gaussian likelihood; the second term, :meth:`CountObservations._count_correction`,
is constant but for :math:`r`). Predictions of :math:`f_c` are of the log of the mean; counts
themselves: :meth:`CountObservations.predict_counts`.

Log-normal data of a positive output, :math:`\log y_i \sim \mathcal{N}(\log f_c(x_i),
s^2)`, are conditioned on the same way: :math:`\log f` linearised around :math:`\hat f`,
the working response :math:`z_i = \hat f_i (1 + \log y_i - \log \hat f_i)` with variance
:math:`\hat f_i^2 s^2` (:math:`s^2` learned); the system stays written for :math:`f`.

:class:`CountObservations` is a mixin of both conditioned models
(:class:`~pyro_pidkl.models.ConditionedSystemGP`: any output;
:class:`~pyro_pidkl.models.PhysicsConditionedGP`: its one series, ``c = 0``), which provide
``_series_name(c)``, ``_series_units(c)`` (the standardisation ``(loc, scale)``),
``_series_mean(joint, c)`` (the standardised posterior mean at the series' data) and
``_working_updated()`` (called when the working response moved).
"""

import math

import numpy as np
import torch
from pyro.nn import PyroParam
from torch.distributions import constraints

from ...param_scope import own_parameters
from .linearised import GaussNewtonResult
from ..parts.likelihoods import as_likelihood

__all__ = ["COUNT_LIKELIHOODS", "CountObservations", "check_counts", "count_log_likelihood",
           "count_start", "output_likelihoods", "series_observations", "working_response"]

#: the observation models of an output besides the Gaussian
COUNT_LIKELIHOODS = ("poisson", "negative_binomial")

#: a log-normal output's mode is kept above this (its log is taken)
POSITIVE = 1e-300

#: Fisher scoring's largest number of working-response updates per relinearisation, and
#: the relative change of the mode below which it stops
WORKING_MAX_ITER = 30
WORKING_TOL = 1e-7


def check_counts(output, y):
    """``y`` if it holds counts (finite, non-negative integers), else a one-line error."""
    bad = ~torch.isfinite(y) | (y < 0) | (y != torch.round(y))
    if bool(bad.any()):
        raise ValueError(f"Expected counts (non-negative integers) for {output}; "
                         f"got {int(bad.sum())} of {y.numel()} values that are not, e.g. "
                         f"{float(y[bad][0])!r}")
    return y


def check_positive(output, y):
    """``y`` if every value is finite and positive (log-normal data), else a one-line
    error."""
    bad = ~torch.isfinite(y) | (y <= 0)
    if bool(bad.any()):
        raise ValueError(f"Expected positive data for {output}, whose likelihood is "
                         f"log-normal; got {int(bad.sum())} of {y.numel()} that are not, e.g. "
                         f"{float(y[bad][0])!r}")
    return y


def count_start(kind, y, what):
    """What the prior, the scale and the first fits of a series observed with likelihood
    ``kind`` see in place of its data ``y`` (checked): ``log(y + 1/2)`` for counts, the data
    themselves (positive) for log-normal data."""
    if kind == "lognormal":
        return check_positive(what, y)
    return (check_counts(what, y) + 0.5).log()


def series_observations(model, c, t):
    """Series ``c``'s data at times ``t`` (numpy) for an exact fit of its ODE
    (:mod:`~pyro_pidkl.infer.deviance`): ``(t, counts, likelihood)`` for a count or
    log-normal series, else ``None``."""
    from ...infer.deviance import LogNormal, NegativeBinomial, Poisson
    if c not in getattr(model, "count_outputs", ()):
        return None
    r = model._dispersion(c)
    kind = {"lognormal": LogNormal, "negative_binomial": NegativeBinomial}.get(
        model.likelihoods[c])
    likelihood = Poisson() if kind is None else kind(float(r.detach()))
    return (t, model.count_data[c].numpy(), likelihood)


def output_likelihoods(likelihoods, outputs, parts, default):
    """Each output's likelihood part (:mod:`~pyro_pidkl.models.parts.likelihoods`) from
    ``likelihoods``: one part (or name) for every output, or ``{output: part or name}`` with
    ``default`` for the rest; checked in one line."""
    if likelihoods is None or not isinstance(likelihoods, dict):
        likelihoods = {o: likelihoods for o in outputs} if likelihoods is not None else {}
    out = [default] * len(outputs)
    for o, spec in likelihoods.items():
        if o not in outputs:
            raise ValueError(f"Expected likelihoods for outputs among {tuple(outputs)}; got "
                             f"{o!r}")
        part = as_likelihood(spec, f"the likelihood of {o!r}")
        c = outputs.index(o)
        if part.kind != "gaussian" and not parts[c][1].numel():
            raise ValueError(f"Expected data for output {o!r}, whose likelihood is "
                             f"{part.kind!r}; it has none")
        out[c] = part
    return out


def working_response(kind, y, f, r=None):
    r"""The working response and Fisher weights of counts ``y`` at log-means ``f``: ``(z,
    W)`` (module docstring; ``r`` the negative binomial's dispersion); of log-normal data
    ``y`` at ``f`` (``r`` the variance :math:`s^2` of :math:`\log y`), the linearisation
    :math:`\log f \approx \log \hat f + (f - \hat f)/\hat f`:
    :math:`z = \hat f (1 + \log y - \log \hat f)`, :math:`W = 1 / (\hat f^2 s^2)`."""
    if kind == "lognormal":
        f = f.clamp(min=POSITIVE)
        return f * (1 + y.log() - f.log()), 1.0 / (f.pow(2) * r)
    mu = f.exp()
    z = f + (y - mu) / mu
    W = mu if kind == "poisson" else mu * r / (mu + r)
    return z, W


def count_log_likelihood(kind, y, f, r=None):
    r""":math:`\sum_i \log p(y_i \mid f_i)` for counts ``y`` at log-means ``f`` (log-normal
    data ``y`` at ``f``, ``r`` the variance of :math:`\log y`)."""
    if kind == "lognormal":
        ly = y.log()
        return (-0.5 * (2 * math.pi * r).log() - 0.5 * (ly - f.clamp(min=POSITIVE).log()).pow(2)
                / r - ly).sum()
    if kind == "poisson":
        return (y * f - f.exp() - torch.lgamma(y + 1)).sum()
    mu = f.exp()
    return (torch.lgamma(y + r) - torch.lgamma(r) - torch.lgamma(y + 1)
            + r * (r.log() - (r + mu).log()) + y * (f - (r + mu).log())).sum()


class CountObservations:
    """Outputs observed as counts (module docstring). The host keeps, per count output ``c``,
    its counts ``count_data[c]``, its kind ``likelihoods[c]``, a buffer ``mode_<c>`` (the log
    of the mean at the data, user units) and, for a negative binomial, a PyroParam
    ``dispersion_<c>``."""

    def _init_counts(self, kinds, parts, variances=None):
        """Set up the non-Gaussian series of ``kinds`` (one entry per series:
        ``"gaussian"``, one of :data:`COUNT_LIKELIHOODS` or ``"lognormal"``, whose starting
        variance of the log ``variances`` may give) from their data ``parts`` ``[(X_c,
        y_c)]`` (checked): each one's mode (the log of the mean at the data, or for log-normal
        data the function there) started at :func:`count_start`, a negative binomial's
        dispersion and a log-normal series' variance of the log learned. Returns the parts
        with each such series' data replaced by its start (what its scale, prior and first
        fits see)."""
        self.likelihoods, variances = list(kinds), variances or {}
        self.count_outputs = [c for c, k in enumerate(kinds) if k != "gaussian"]
        self.count_data = {}
        out = list(parts)
        for c in self.count_outputs:
            X, y = parts[c]
            start = count_start(kinds[c], y, self._series_name(c))
            self.count_data[c] = y
            self.register_buffer(f"mode_{c}", start.clone())
            if kinds[c] == "negative_binomial":
                setattr(self, f"dispersion_{c}",
                        PyroParam(torch.tensor(10.0, dtype=y.dtype),
                                  constraints.interval(1e-2, 1e6)))
            elif kinds[c] == "lognormal":
                # started at half the mean squared difference of successive logs (von
                # Neumann's estimate of the noise's variance) unless given
                variance = variances.get(c)
                if variance is None:
                    ly = y[torch.argsort(X[:, 0])].log()
                    variance = (float((ly.diff().pow(2).mean() / 2).clamp(1e-6, 1.0))
                                if y.numel() > 2 else 1e-2)
                setattr(self, f"log_variance_{c}",
                        PyroParam(torch.tensor(float(variance), dtype=y.dtype),
                                  constraints.interval(1e-8, 10.0)))
            out[c] = (X, start)
        return out

    def _likelihood_entry(self, c, noise):
        """Series ``c``'s likelihood and its fitted parameter, in the user's units (``noise``
        a Gaussian series' noise variance): ``{"likelihood": kind, ...}`` (as
        ``likelihood_parameters()``)."""
        kind = self.likelihoods[c]
        entry = {"likelihood": kind}
        if kind == "gaussian":
            entry["noise"] = float(noise)
        elif kind == "negative_binomial":
            entry["dispersion"] = float(self._dispersion(c))
        elif kind == "lognormal":
            entry["log_variance"] = float(self._dispersion(c))
        return entry

    def _dispersion(self, c):
        """A negative binomial's dispersion, a log-normal output's variance of the log, or
        ``None``."""
        return getattr(self, f"dispersion_{c}", getattr(self, f"log_variance_{c}", None))

    def _working(self, c):
        """``(z, W)`` of count output ``c`` at its stored mode (user units)."""
        return working_response(self.likelihoods[c], self.count_data[c],
                                getattr(self, f"mode_{c}"), self._dispersion(c))

    def _working_s(self, c):
        """Count output ``c``'s working response in its standardised units ``(n_c,)``."""
        loc, scale = self._series_units(c)
        return (self._working(c)[0] - loc) / scale

    def _count_noise(self, c):
        """The variance of count output ``c``'s working response in its standardised units,
        :math:`1 / (W s_{y,c}^2)` ``(n_c,)``, or ``None`` for a Gaussian output."""
        if c not in self.count_outputs:
            return None
        return 1.0 / (self._working(c)[1] * self._series_units(c)[1] ** 2)

    def _count_correction(self):
        r""":math:`\sum_c \sum_i [\log p(y_i \mid \hat f_i) - \log \mathcal{N}(z_i \mid \hat
        f_i, W_i^{-1})]` in the standardised units of the joint's data (module docstring)."""
        total = 0.0
        for c in self.count_outputs:
            f = getattr(self, f"mode_{c}")
            z, W = self._working(c)
            scale = self._series_units(c)[1]
            var_s = 1.0 / (W * scale ** 2)
            gauss = (-0.5 * (2 * math.pi * var_s).log()
                     - 0.5 * ((z - f) / scale).pow(2) / var_s).sum()
            total = total + count_log_likelihood(self.likelihoods[c], self.count_data[c], f,
                                                 self._dispersion(c)) - gauss
        return total

    def _update_mode(self):
        """One Fisher-scoring step: each count output's mode set to the posterior mean at its
        data given the current working response. Returns the largest change relative to
        the mode's largest magnitude (at least 1)."""
        with torch.no_grad():
            joint = self.solve()[0]
            change = 0.0
            for c in self.count_outputs:
                loc, scale = self._series_units(c)
                new = loc + scale * self._series_mean(joint, c)
                if self.likelihoods[c] == "lognormal":    # its log is taken
                    new = new.clamp(min=float(self.count_data[c].min()) * 1e-3)
                mode = getattr(self, f"mode_{c}")
                size = float(mode.abs().max().clamp(min=1.0))
                change = max(change, float((new - mode).abs().max()) / size)
                mode.copy_(new)
            self._working_updated()
            self._cache = None
        return change

    def _objective(self, joint):
        """The objective (``LinearisedConditioning._objective``) and, with count outputs, the
        Laplace correction of their likelihood (:meth:`_count_correction`)."""
        value = super()._objective(joint)
        return value + self._count_correction() if self.count_outputs else value

    @own_parameters
    def relinearise(self, max_iter=None):
        r"""Gauss-Newton to the posterior mean
        (:meth:`~pyro_pidkl.models.conditioning.linearised.LinearisedConditioning.relinearise`) and, with
        count outputs, Fisher scoring of their modes with it until both settle (module
        docstring). Reports more than one iteration while the modes still move (the fit then
        runs its optimiser again)."""
        out = super().relinearise(max_iter)
        if not self.count_outputs:
            return out
        iterations, moved = out.iterations, 0.0
        for _ in range(WORKING_MAX_ITER):
            change = self._update_mode()
            moved = max(moved, change)
            out = super().relinearise(max_iter)
            iterations += out.iterations
            if change < WORKING_TOL:
                break
        return GaussNewtonResult(max(iterations, 2 if moved > 1e-4 else 1), out.converged,
                                 max(out.change, change))

    def _count_draws(self, c, mean, var, prob, num_draws, rng):
        r"""Series ``c``'s predictive interval of new counts from its log-mean's posterior
        ``mean``, ``var`` ``(P,)`` (user units): draws of the log-mean (normal), then of the
        counts given it (a negative binomial's a gamma-Poisson mixture). Returns
        ``(median, lower, upper)``, each ``(P,)``, the central ``prob`` interval."""
        m, s = mean.numpy(), var.sqrt().numpy()
        rate = np.exp(m + s * rng.standard_normal((num_draws, m.shape[0])))
        r = self._dispersion(c)
        if r is not None:
            r = float(r.detach())
            rate = rng.gamma(r, rate / r)
        y = rng.poisson(rate)
        q = np.quantile(y, [0.5, (1 - prob) / 2, (1 + prob) / 2], axis=0)
        return tuple(torch.as_tensor(v, dtype=mean.dtype) for v in q)

    def _counted(self):
        """The series observed as counts (not log-normal), checked to be some."""
        counted = [c for c in self.count_outputs if self.likelihoods[c] in COUNT_LIKELIHOODS]
        if not counted:
            raise ValueError("Expected a model with count data (a likelihood pk.Poisson() or "
                             "pk.NegativeBinomial()); it has none")
        return counted
