"""Log-normal data as a likelihood part (pk.LogNormalNoise): the working response and the
log-likelihood against their closed forms, and a fit of a decay from multiplicative noise
against the exact maximum-likelihood answer, which for log y = log x0 - k t + e is ordinary
least squares on the logs."""

import numpy as np
import pytest
import torch

import pyro_pidkl as pk
from pyro_pidkl.infer.deviance import LogNormal
from pyro_pidkl.models.system.counts import count_log_likelihood, working_response
from pyro_pidkl.physics import EquationSystem

D = torch.float64


def test_the_working_response_linearises_the_log_and_the_likelihood_is_lognormal():
    y = torch.tensor([0.5, 1.2, 3.0], dtype=D)
    f = torch.tensor([0.6, 1.0, 2.5], dtype=D)
    s2 = torch.tensor(0.04, dtype=D)
    z, W = working_response("lognormal", y, f, s2)
    # z is where the line log f0 + (f - f0) / f0 reaches log y
    assert torch.allclose(f.log() + (z - f) / f, y.log())
    assert torch.allclose(W, 1 / (f ** 2 * s2))
    expected = torch.distributions.LogNormal(f.log(), s2.sqrt()).log_prob(y).sum()
    assert torch.allclose(count_log_likelihood("lognormal", y, f, s2), expected)
    r = LogNormal(0.04).residuals(y, f)
    assert torch.allclose(r, (y.log() - f.log()) / 0.2)


def _decay(seed, n=25):
    g = torch.Generator().manual_seed(seed)
    t = torch.linspace(0, 4, n, dtype=D)
    return t, 2 * torch.exp(-0.5 * t) * torch.exp(0.15 * torch.randn(n, generator=g, dtype=D))


def test_a_decay_with_multiplicative_noise_is_the_least_squares_fit_of_the_logs():
    t, y = _decay(0)
    system = EquationSystem(lambda f, x, k: (f["u"].d("t") + k * f["u"],), outputs=("u",),
                            inputs=("t",), k=1.0)
    model = pk.ConditionedSystemGP(system, {"u": (t, y)}, likelihoods={"u": pk.LogNormalNoise()})
    pk.fit(model, progress=False)
    A = np.c_[np.ones(t.shape[0]), t.numpy()]
    coef, rss, _, _ = np.linalg.lstsq(A, np.log(y.numpy()), rcond=None)
    n = t.shape[0]
    se = float(np.sqrt(rss[0] / (n - 2) * np.linalg.inv(A.T @ A)[1, 1]))
    k = float(model.system.k.detach())
    assert abs(k - (-coef[1])) < 0.05 * se                   # the MLE (0.4608)
    interval = model.coefficient_intervals(0.9)["k"]
    half = (interval["upper"] - interval["lower"]) / 2
    assert 0.8 < half / (1.645 * se) < 1.25                  # its 90% interval's width
    s2 = float(model._dispersion(0).detach())
    assert 0.8 < s2 / (rss[0] / n) < 1.25                    # the variance of the log
    assert model.referee is not None and model.referee.verdict == "agree"
    assert model.likelihood_parameters() == {"u": {"likelihood": "lognormal",
                                                   "log_variance": pytest.approx(s2)}}
    with pytest.raises(ValueError, match="new observations are log-normal") as e:
        model(t, noiseless=False)
    assert "\n" not in str(e.value)


def test_lognormal_data_must_be_positive_and_one_series_is_a_system_of_one():
    t, y = _decay(1)
    system = EquationSystem(lambda f, x, k: (f["u"].d("t") + k * f["u"],), outputs=("u",),
                            inputs=("t",), k=1.0)
    with pytest.raises(ValueError, match="Expected positive data for output 'u'") as e:
        pk.ConditionedSystemGP(system, {"u": (t, y - 1.0)}, likelihoods="lognormal")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="variance to be a number > 0"):
        pk.LogNormalNoise(variance=-1.0)
    eq = pk.Equation(lambda f, x, k: f.d("t") + k * f, inputs=("t",), k=1.0)
    with pytest.raises(ValueError, match="one-output system"):
        pk.PhysicsConditionedGP(t[:, None], y, eq, likelihood=pk.LogNormalNoise())
