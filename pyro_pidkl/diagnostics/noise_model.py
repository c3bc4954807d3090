r"""Whether the data reject constant Gaussian noise for noise that grows with the signal.

A fit with Gaussian noise of one variance per series (the default likelihood) weighs every
datum alike. Data whose errors are proportional to their size (a concentration, a
population, a decay over decades, measured to a few per cent) then pull the fit towards
their largest values, and the intervals, computed under a noise model the data reject, can
be narrow about a wrong answer. The check compares, at the fit's mean :math:`m` at the data,
the two noise models with their variances at their maxima:

.. math::
    \log p(y \mid \text{log-normal}) - \log p(y \mid \text{normal})
    = \frac n2 \log \overline{(y - m)^2}
      - \frac n2 \log \overline{(\log y - \log m)^2} - \sum_i \log y_i

(the same number of parameters, the log-normal density of :math:`y` with its Jacobian).
The mean is the Gaussian fit's, fitted for constant noise, so the comparison leans towards
the model fitted: above :data:`NOISE_TOL` (odds of 100 to 1, as
:data:`~pyro_pidkl.diagnostics.adequacy.EVIDENCE_TOL`) the data reject constant noise, the fit
warns (:class:`~pyro_pidkl.diagnostics.adequacy.Adequacy`) and its coefficients are not
called identified; the remedy is the likelihood that says so,
:class:`~pyro_pidkl.models.parts.likelihoods.LogNormalNoise`. Judged only for a series of
positive data with a noise that is learned, on those of them (at least :data:`MIN_DATA`)
where the fit's mean is positive.
"""

import math

import torch

__all__ = ["MIN_DATA", "NOISE_TOL", "multiplicative_evidence", "noise_evidence", "noise_rejected",
           "rejected", "rejection"]

#: nats by which log-normal noise must explain a series better than constant noise for the
#: constant noise to be rejected
NOISE_TOL = math.log(100.0)

#: the fewest data of a series that are judged
MIN_DATA = 8


def multiplicative_evidence(y, mean):
    r""":math:`\log p(y \mid \text{log-normal about } m) - \log p(y \mid \text{normal about
    } m)` in nats, each noise's variance at its maximum (module docstring); ``nan`` for fewer
    than :data:`MIN_DATA` data or where a datum is not positive; both are judged on the
    data where the mean is positive (a GP's mean can cross zero beside data near it).

    :param y: the data ``(n,)``.
    :param mean: the fit's mean at them ``(n,)``.
    :rtype: float
    """
    y = torch.as_tensor(y, dtype=torch.float64).reshape(-1)
    mean = torch.as_tensor(mean, dtype=torch.float64).reshape(-1)
    if y.shape != mean.shape:
        raise ValueError(f"Expected the data and the mean at them to have one shape; got "
                         f"{tuple(y.shape)} and {tuple(mean.shape)}")
    if not bool((y > 0).all()):                  # log-normal data are positive
        return math.nan
    keep = mean > 0             # a GP's mean may cross zero beside tiny data: not judged
    y, mean = y[keep], mean[keep]
    n = y.numel()
    if n < MIN_DATA:
        return math.nan
    normal = 0.5 * n * math.log(float((y - mean).pow(2).mean()) + 1e-300)
    lognormal = 0.5 * n * math.log(float((y.log() - mean.log()).pow(2).mean()) + 1e-300)
    return normal - lognormal - float(y.log().sum())


def noise_evidence(model, joint):
    r"""``{series: nats}`` of :func:`multiplicative_evidence` for each series of a
    conditioned model with Gaussian noise that is learned, at the posterior mean of the
    solved ``joint``; the model names them (``_gaussian_series()``: ``[(name, c, y)]``, the
    data in user units) and gives their mean (``_series_mean(joint, c)``, standardised by
    ``_series_units(c)``)."""
    out = {}
    for name, c, y in model._gaussian_series():
        loc, scale = model._series_units(c)
        mean = loc + scale * model._series_mean(joint, c)
        value = multiplicative_evidence(y.detach(), mean.detach())
        if math.isfinite(value):
            out[name] = value
    return out


def rejected(evidence):
    """``{series: nats}`` of ``evidence`` (:func:`noise_evidence`'s, or ``None``) above
    :data:`NOISE_TOL`: the series whose constant noise the data reject."""
    return {k: v for k, v in (evidence or {}).items() if v > NOISE_TOL}


def rejection(found, about=""):
    """The sentence that says why (``found``: :func:`rejected`'s; ``about`` what the
    log-normal noise is about, after "log-normal noise")."""
    shown = ", ".join(f"{k} by {v:.1f} nats" for k, v in found.items())
    return (f"the noise grows with the data: log-normal noise{about} explains them better "
            f"than constant noise ({shown}), so the intervals rest on a noise model the data "
            f"reject and no coefficient is identified")


def noise_rejected(model):
    """The series of a fitted conditioned model whose constant Gaussian noise the data reject
    (:func:`noise_evidence` above :data:`NOISE_TOL`; ``[]`` before a fit)."""
    if not bool(model.fitted):
        return []
    with torch.no_grad():
        return list(rejected(noise_evidence(model, model.solve()[0])))
