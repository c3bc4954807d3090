"""Counts in the exact fit: deviance residuals whose half sum of squares is the counts'
negative log-likelihood, and an exact fit of Poisson counts that is the GLM's maximum
likelihood with its Wald standard error."""

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

import pyro_pidkl as pk
from pyro_pidkl.infer.deviance import NegativeBinomial, Poisson, data_nll
from pyro_pidkl.infer.exact_fit import fit_exact
from pyro_pidkl.physics import EquationSystem, Parameter


def _nb(mean, phi):
    return torch.distributions.NegativeBinomial(total_count=torch.tensor(phi),
                                                probs=mean / (mean + phi))


@pytest.mark.parametrize("likelihood", [Poisson(), NegativeBinomial(3.5)])
def test_half_the_squared_deviance_residuals_is_the_negative_log_likelihood(likelihood):
    """Between two means, the change of 0.5 sum r^2 equals the change of -log p(y | mu)
    (torch's distributions), with zero counts among the data."""
    y = torch.tensor([0.0, 1.0, 3.0, 7.0, 20.0, 0.0], dtype=torch.float64)
    a = torch.tensor([0.5, 2.0, 2.5, 9.0, 15.0, 0.1], dtype=torch.float64)
    b = a * torch.tensor([1.7, 0.6, 1.2, 0.9, 1.5, 3.0], dtype=torch.float64)

    def nll(mu):
        if isinstance(likelihood, NegativeBinomial):
            return -float(_nb(mu, likelihood.dispersion).log_prob(y).sum())
        return -float(torch.distributions.Poisson(mu).log_prob(y).sum())

    def half(mu):
        return 0.5 * float(likelihood.residuals(y, mu.log()).pow(2).sum())
    assert half(b) - half(a) == pytest.approx(nll(b) - nll(a), rel=1e-10, abs=1e-10)
    r = likelihood.residuals(y, y.clamp(min=1e-3).log())
    assert float(r[y > 0].abs().max()) < 1e-6              # zero where the mean is the datum
    # the profiled Gaussian cost and the counts' in one call
    res = torch.tensor([[0.3, -0.1, 0.2, 1.0, 2.0]], dtype=torch.float64)
    c = torch.tensor([0, 0, 0, 1, 1])
    expected = 1.5 * math.log((0.09 + 0.01 + 0.04) / 3) + 0.5 * 5.0
    assert float(data_nll(res, c, {1: likelihood})[0]) == pytest.approx(expected)


def test_an_exact_fit_of_poisson_counts_whose_log_mean_is_a_line_is_the_glm():
    """u' = r, counts ~ Poisson(e^u): the exact fit's r is the Poisson GLM's maximum
    likelihood and its standard error the GLM's Wald one."""
    g = np.random.default_rng(0)
    t = np.linspace(0, 6, 30)
    y = g.poisson(np.exp(math.log(5) + 0.3 * t)).astype(float)
    system = EquationSystem(lambda f, x, r: (f["u"].d("t") - r,), outputs=("u",),
                            inputs=("t",), r=Parameter(1.0))
    ode = pk.physics.explicit_ode(system, ("t",))
    positive = torch.distributions.transform_to(torch.distributions.constraints.positive)
    fit = fit_exact(ode, [(t, y, Poisson())], [("r", positive, [0.0])], np.array([[1.0]]),
                    0.0, 6.0, np.array([1.0]), design=8, design_half=np.array([1.0]))
    b = minimize(lambda b: float(np.sum(np.exp(b[0] + b[1] * t) - y * (b[0] + b[1] * t))),
                 [1.0, 0.1], method="BFGS", options={"gtol": 1e-10}).x
    X = np.c_[np.ones_like(t), t]
    se = math.sqrt(np.linalg.inv(X.T @ (np.exp(X @ b)[:, None] * X))[1, 1])
    iv = fit.intervals(0.9)["r"]
    assert iv["value"] == pytest.approx(b[1], abs=1e-3 * se)
    assert iv["sd"] == pytest.approx(se, rel=0.02)
    assert fit.x0[0] == pytest.approx(b[0], abs=1e-2)


def test_a_dispersion_that_is_not_positive_is_refused_in_one_line():
    with pytest.raises(ValueError, match="positive finite dispersion"):
        NegativeBinomial(0.0)


def test_residual_scales_are_the_noise_or_one_for_counts():
    from pyro_pidkl.infer.deviance import Poisson, residual_scales
    sd = np.array([0.3, 0.2, 5.0])
    obs = [(np.zeros(2), np.zeros(2)), (np.zeros(0), np.zeros(0)),
           (np.zeros(2), np.zeros(2), Poisson())]
    out = residual_scales(sd, obs)
    assert out.tolist() == [0.3, 0.2, 1.0] and sd.tolist() == [0.3, 0.2, 5.0]   # a copy
