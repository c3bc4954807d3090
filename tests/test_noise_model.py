"""The noise-model check: constant Gaussian noise rejected where the data's errors grow with
their size, kept where they do not (pyro_pidkl/diagnostics/noise_model.py)."""

import math
import warnings

import numpy as np
import pytest
import torch

import pyro_pidkl as pk
from pyro_pidkl.diagnostics.noise_model import (MIN_DATA, NOISE_TOL, multiplicative_evidence)

T = np.linspace(0.0, 8.0, 30)


def _rates(make_y, mean, seeds=200):
    """The fraction of ``seeds`` simulated series whose constant noise is rejected."""
    out = []
    for s in range(seeds):
        out.append(multiplicative_evidence(make_y(np.random.default_rng(s)), mean)
                   > NOISE_TOL)
    return float(np.mean(out))


def test_the_check_rejects_constant_noise_for_proportional_errors_and_only_then():
    decay = 10.0 * np.exp(-0.8 * T)                  # three decades
    # 5% log-normal errors on a decay: rejected on every one of 200 simulated series
    assert _rates(lambda g: decay * np.exp(0.05 * g.standard_normal(T.size)), decay) == 1.0
    # constant noise on a positive signal, far from zero or decaying to a floor: the false
    # alarm rate at most 1% (odds of 100 to 1)
    wave = 5.0 + np.sin(T)
    assert _rates(lambda g: wave + 0.1 * g.standard_normal(T.size), wave) <= 0.01
    floor = 2.0 + 8.0 * np.exp(-T)
    assert _rates(lambda g: floor + 0.1 * g.standard_normal(T.size), floor) <= 0.01


def test_the_evidence_is_the_difference_of_the_two_maximised_log_likelihoods():
    g = np.random.default_rng(3)
    mean = 1.0 + np.exp(-T)
    y = mean * np.exp(0.1 * g.standard_normal(T.size))
    n = T.size

    def normal_nll(sd):                             # -log N(y | mean, sd^2), summed
        return float(np.sum(0.5 * ((y - mean) / sd) ** 2 + np.log(sd)
                            + 0.5 * math.log(2 * math.pi)))

    def lognormal_nll(s):                           # -log LogNormal(y | log mean, s^2)
        return float(np.sum(0.5 * ((np.log(y) - np.log(mean)) / s) ** 2 + np.log(s)
                            + np.log(y) + 0.5 * math.log(2 * math.pi)))
    sd = np.sqrt(np.mean((y - mean) ** 2))          # each at its maximum
    s = np.sqrt(np.mean((np.log(y) - np.log(mean)) ** 2))
    assert multiplicative_evidence(y, mean) == pytest.approx(
        normal_nll(sd) - lognormal_nll(s), abs=1e-9)
    assert normal_nll(sd) < normal_nll(1.1 * sd) and lognormal_nll(s) < lognormal_nll(0.9 * s)


def test_the_check_refuses_to_judge_what_it_cannot():
    y = np.exp(-T)
    assert math.isnan(multiplicative_evidence(y[:MIN_DATA - 1], y[:MIN_DATA - 1]))
    assert math.isnan(multiplicative_evidence(y - 0.5, y))        # a datum not positive
    # a mean not positive: those data are left out of both
    y2, m2 = np.r_[y, 1e-6], np.r_[y, -1e-3]
    assert multiplicative_evidence(y2, m2) == multiplicative_evidence(y, y)
    with pytest.raises(ValueError, match="one shape"):
        multiplicative_evidence(y, y[:-1])


def _decay_model(likelihood=None):
    g = np.random.default_rng(1)
    y = 10.0 * np.exp(-0.8 * T) * np.exp(0.05 * g.standard_normal(T.size))
    equation = pk.Equation(lambda f, x, k: f.d("t") + k * f, inputs=("t",),
                           k=pk.Parameter(2.0))
    extra = {} if likelihood is None else {"likelihood": likelihood}
    return pk.PhysicsConditionedGP(torch.tensor(T)[:, None], torch.tensor(y), equation,
                                   **extra)


def test_a_fit_under_noise_the_data_reject_warns_and_identifies_nothing():
    model = _decay_model()
    with pytest.warns(pk.ModelMisfitWarning, match="LogNormalNoise"):
        pk.fit(model, progress=False)
    assert model.noise_rejected() == ["y"]
    assert model.adequacy().noise["y"] > NOISE_TOL and not model.adequacy().ok
    k = model.coefficient_intervals(0.9)["k"]
    assert k["identified"] is False and k["noise"] == "rejected"


def test_the_likelihood_that_says_so_is_not_warned_and_covers():
    model = _decay_model(pk.LogNormalNoise())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pk.fit(model, progress=False)
    assert model.noise_rejected() == [] and model.adequacy().noise == {}
    k = model.coefficient_intervals(0.9)["k"]
    assert k["identified"] and k["lower"] < 0.8 < k["upper"]


def test_the_state_space_solver_judges_the_noise_on_the_exact_trajectory(tmp_path):
    """StateSpaceGP: the same check on the ODE's exact trajectory at its fit."""
    g = np.random.default_rng(1)
    y = 10.0 * np.exp(-0.8 * T) * np.exp(0.05 * g.standard_normal(T.size))
    equation = pk.Equation(lambda f, x, k: f.d("t") + k * f, inputs=("t",),
                           k=pk.Parameter(2.0))
    model = pk.StateSpaceGP(equation, (torch.tensor(T), torch.tensor(y)))
    with pytest.warns(pk.ModelMisfitWarning, match="log-normal"):
        pk.fit(model, progress=False)
    assert model.adequacy()["noise"]["f"] > NOISE_TOL
    for fitted in (model, _saved_and_loaded(model, tmp_path)):
        k = fitted.coefficient_intervals(0.9)["k"]
        assert k["identified"] is False and k["noise"] == "rejected"


def _saved_and_loaded(model, tmp_path):
    pk.save(model, tmp_path / "fit.pt")
    return pk.load(tmp_path / "fit.pt")
