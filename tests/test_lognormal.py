"""Log-normal data as a likelihood part (pk.LogNormalNoise): the working response and the
log-likelihood against their closed forms, and a fit of a decay from multiplicative noise
against the exact maximum-likelihood answer, which for log y = log x0 - k t + e is ordinary
least squares on the logs."""

import numpy as np
import pytest
import torch

import pyro_pidkl as pk
from pyro_pidkl.infer.deviance import LogNormal
from pyro_pidkl.models.conditioning.counts import count_log_likelihood, working_response
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


@pytest.mark.parametrize("form", ["system", "equation"])
def test_a_decay_with_multiplicative_noise_is_the_least_squares_fit_of_the_logs(form):
    """One series with log-normal noise, as a system of one output and as one equation
    (pk.PhysicsConditionedGP(likelihood=pk.LogNormalNoise())): the same exact answer."""
    t, y = _decay(0)
    if form == "system":
        system = EquationSystem(lambda f, x, k: (f["u"].d("t") + k * f["u"],), outputs=("u",),
                                inputs=("t",), k=1.0)
        model = pk.ConditionedSystemGP(system, {"u": (t, y)},
                                       likelihoods={"u": pk.LogNormalNoise()})
    else:
        eq = pk.Equation(lambda f, x, k: f.d("t") + k * f, inputs=("t",), k=1.0)
        model = pk.PhysicsConditionedGP(t[:, None], y, eq, likelihood=pk.LogNormalNoise())
    pk.fit(model, progress=False)
    A = np.c_[np.ones(t.shape[0]), t.numpy()]
    coef, rss, _, _ = np.linalg.lstsq(A, np.log(y.numpy()), rcond=None)
    n = t.shape[0]
    se = float(np.sqrt(rss[0] / (n - 2) * np.linalg.inv(A.T @ A)[1, 1]))
    k = model.equation_parameters()["k"]
    assert abs(k - (-coef[1])) < 0.05 * se                   # the MLE (0.4608)
    interval = model.coefficient_intervals(0.9)["k"]
    half = (interval["upper"] - interval["lower"]) / 2
    assert 0.8 < half / (1.645 * se) < 1.25                  # its 90% interval's width
    s2 = float(model._dispersion(0).detach())
    assert 0.8 < s2 / (rss[0] / n) < 1.25                    # the variance of the log
    assert model.referee is not None and model.referee.verdict == "agree"
    entry = {"likelihood": "lognormal", "log_variance": pytest.approx(s2)}
    assert model.likelihood_parameters() == (entry if form == "equation" else {"u": entry})
    with pytest.raises(ValueError, match="noiseless=True") as e:
        model(t[:, None], noiseless=False)
    assert "log-normal" in str(e.value) or "lognormal" in str(e.value)
    assert "\n" not in str(e.value)


def test_lognormal_data_must_be_positive_for_a_system_and_for_one_equation():
    t, y = _decay(1)
    system = EquationSystem(lambda f, x, k: (f["u"].d("t") + k * f["u"],), outputs=("u",),
                            inputs=("t",), k=1.0)
    with pytest.raises(ValueError, match="Expected positive data for output 'u'") as e:
        pk.ConditionedSystemGP(system, {"u": (t, y - 1.0)}, likelihoods="lognormal")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="variance to be a number > 0"):
        pk.LogNormalNoise(variance=-1.0)
    eq = pk.Equation(lambda f, x, k: f.d("t") + k * f, inputs=("t",), k=1.0)
    with pytest.raises(ValueError, match="Expected positive data for y") as e:
        pk.PhysicsConditionedGP(t[:, None], y - 1.0, eq, likelihood=pk.LogNormalNoise())
    assert "\n" not in str(e.value)
