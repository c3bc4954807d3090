"""Counts as a system's observations (pyro_pidkl/models/conditioning/counts.py): the likelihoods
and Fisher weights against their closed forms, and a fit against the exact Poisson GLM that
the same model is when the equation makes the log of the mean a straight line."""


import numpy as np
import pytest
import scipy.optimize
import torch

import pyro_pidkl as pk
from pyro_pidkl.models.conditioning.counts import count_log_likelihood, working_response
from pyro_pidkl.physics import EquationSystem

D = torch.float64


def growth(f, x, r):
    return (f["u"].d("t") - r,)


def _counts(seed=0, n=30):
    g = torch.Generator().manual_seed(seed)
    t = torch.linspace(0, 6, n, dtype=D)
    return t, torch.poisson(5 * torch.exp(0.3 * t), generator=g)


def test_the_log_likelihoods_are_poissons_and_the_negative_binomials():
    y = torch.tensor([0.0, 1.0, 4.0, 17.0], dtype=D)
    f = torch.tensor([-1.0, 0.2, 1.5, 2.9], dtype=D)
    r = torch.tensor(2.5, dtype=D)
    mu = f.exp()
    expected = torch.distributions.Poisson(mu).log_prob(y).sum()
    assert torch.allclose(count_log_likelihood("poisson", y, f), expected)
    nb = torch.distributions.NegativeBinomial(total_count=r, probs=mu / (mu + r))
    assert torch.allclose(count_log_likelihood("negative_binomial", y, f, r),
                          nb.log_prob(y).sum())


@pytest.mark.parametrize("kind", ["poisson", "negative_binomial"])
def test_the_weights_are_the_fisher_information_of_the_log_mean(kind):
    """W = E[(d log p / d f)^2], summed over the support; the working response is f plus the
    score over W's Poisson part (y - mu) / mu."""
    r = torch.tensor(3.0, dtype=D)
    ys = torch.arange(0, 400, dtype=D)
    for value in (-0.5, 1.0, 2.5):
        f = torch.full((400,), value, dtype=D, requires_grad=True)   # one f per y
        score = torch.autograd.grad(count_log_likelihood(kind, ys, f, r), f)[0]
        mu = torch.tensor(value, dtype=D).exp()
        pmf = (torch.distributions.Poisson(mu) if kind == "poisson" else
               torch.distributions.NegativeBinomial(total_count=r, probs=mu / (mu + r))
               ).log_prob(ys).exp()
        fisher = float((pmf * score ** 2).sum())
        f0 = torch.tensor([value], dtype=D)
        z, W = working_response(kind, ys[5:6], f0, r)
        assert abs(float(W) - fisher) < 1e-6 * fisher
        assert torch.allclose(z, f0 + (5 - mu) / mu)


def _glm(t, y):
    """The Poisson GLM log mu = a + r t: its MLE and Wald sd."""
    X = np.c_[np.ones(len(t)), t.numpy()]
    yy = y.numpy()
    b = scipy.optimize.minimize(lambda b: -(yy * (X @ b) - np.exp(X @ b)).sum(), [1.0, 0.1],
                                jac=lambda b: -X.T @ (yy - np.exp(X @ b)), method="BFGS").x
    cov = np.linalg.inv(X.T @ (np.exp(X @ b)[:, None] * X))
    return b, np.sqrt(np.diag(cov))


@pytest.mark.slow
def test_poisson_counts_whose_log_mean_is_a_line_are_the_glm():
    """u' = r makes log mu a line: the exact Poisson GLM. With collocation points dense
    enough that the equation holds between them at the short lengthscale the fit picks (600
    here; at the default 200 the posterior mean's slope and r can part:
    docs/systems.md#counts), the fit's r is the GLM's within a tenth of its
    standard error, the level at t = 0 within one, and the 95% interval holds the GLM's
    estimate at 0.8-1.25 times the width of its Wald interval."""
    t, y = _counts()
    model = pk.ConditionedSystemGP(EquationSystem(growth, outputs=("u",), inputs=("t",),
                                                  r=1.0),
                                   {"u": (t, y)}, likelihoods={"u": "poisson"},
                                   collocation=600)
    pk.fit(model, progress=False)
    (a, r), (sa, sr) = _glm(t, y)
    iv = model.coefficient_intervals(0.95)["r"]
    assert abs(iv["value"] - r) < 0.1 * sr, (iv, r, sr)
    assert iv["lower"] < r < iv["upper"]
    assert 0.8 < (iv["upper"] - iv["lower"]) / (2 * 1.96 * sr) < 1.25      # 0.92 measured
    mean, var = model(torch.tensor([0.0], dtype=D))
    assert abs(float(mean[0, 0]) - a) < sa
    counts = model.predict_counts(torch.tensor([0.0, 6.0], dtype=D), prob=0.9)["u"]
    assert bool((counts[1] <= counts[0]).all() and (counts[0] <= counts[2]).all())
    assert counts[1][1] > counts[2][0]            # the counts grow: 6's interval above 0's


def test_count_data_and_settings_are_checked_in_one_line():
    t, y = _counts(n=12)
    system = EquationSystem(growth, outputs=("u",), inputs=("t",), r=1.0)
    for bad, what in ((y - 20, "non-negative integers"), (y + 0.5, "non-negative integers")):
        with pytest.raises(ValueError, match=what):
            pk.ConditionedSystemGP(system, {"u": (t, bad)}, likelihoods={"u": "poisson"})
    with pytest.raises(ValueError, match="'gaussian', 'poisson', 'negative_binomial'"):
        pk.ConditionedSystemGP(system, {"u": (t, y)}, likelihoods={"u": "binomial"})
    with pytest.raises(ValueError, match="outputs among"):
        pk.ConditionedSystemGP(system, {"u": (t, y)}, likelihoods={"v": "poisson"})
    model = pk.ConditionedSystemGP(system, {"u": (t, y)}, likelihoods={"u": "poisson"})
    with pytest.raises(ValueError, match="predict_counts"):
        model(t, noiseless=False)


@pytest.mark.slow
def test_overdispersed_counts_learn_their_dispersion_and_widen_the_interval():
    """Negative-binomial counts (dispersion 4) of the same growth: the dispersion is found
    within a factor of two and r's interval holds the truth; a Poisson fit of the same
    counts is narrower than the negative binomial's (it ignores the overdispersion)."""
    rng = np.random.default_rng(3)
    t = torch.linspace(0, 6, 40, dtype=D)
    mu = 5 * np.exp(0.3 * t.numpy())
    y = torch.as_tensor(rng.poisson(rng.gamma(4.0, mu / 4.0)), dtype=D)
    system = EquationSystem(growth, outputs=("u",), inputs=("t",), r=1.0)
    widths = {}
    for kind in ("negative_binomial", "poisson"):
        model = pk.ConditionedSystemGP(system, {"u": (t, y)}, likelihoods={"u": kind})
        pk.fit(model, progress=False)
        iv = model.coefficient_intervals(0.95)["r"]
        widths[kind] = iv["upper"] - iv["lower"]
        if kind == "negative_binomial":
            assert 2.0 < float(model.dispersion_0.detach()) < 8.0
            assert iv["lower"] < 0.3 < iv["upper"]
    assert widths["negative_binomial"] > widths["poisson"]


def sir_log(f, x, beta, gamma, rho):
    """SIR with s the susceptible fraction and j the log of the expected daily count, a
    fraction rho of the infected in a population of 10,000."""
    s, j = f["s"], f["j"]
    i = torch.exp(j) / (rho * 10000.0)
    return (s.d("t") + beta * s * i, j.d("t") - (beta * s - gamma))


@pytest.mark.slow
def test_an_epidemic_from_case_counts_with_the_susceptibles_never_measured():
    """Poisson case counts (10% of the infected of 10,000) on days 0-30, s never measured:
    beta and gamma's 95% intervals hold the truth (0.5, 0.2), and the 90% intervals of new
    counts on days 30-45 hold the true expected counts."""
    from scipy.integrate import solve_ivp
    from pyro_pidkl.physics import Parameter
    sol = solve_ivp(lambda t, s: [-0.5 * s[0] * s[1], 0.5 * s[0] * s[1] - 0.2 * s[1]],
                    (0, 45), [0.99, 0.01], dense_output=True, rtol=1e-10, atol=1e-12)
    t = np.linspace(0, 30, 25)
    y = np.random.default_rng(0).poisson(1000.0 * sol.sol(t)[1])
    system = EquationSystem(sir_log, outputs=("s", "j"), inputs=("t",), beta=1.0, gamma=1.0,
                            rho=Parameter(0.1, fixed=True))
    model = pk.ConditionedSystemGP(system, {"j": (torch.as_tensor(t), torch.as_tensor(
        y, dtype=D))}, likelihoods={"j": "poisson"}, domain=pk.Box(t=(0.0, 45.0)),
        scales={"s": (0.5, 0.5)})
    pk.fit(model, progress=False)
    iv = model.coefficient_intervals(0.95)
    assert iv["beta"]["lower"] < 0.5 < iv["beta"]["upper"]
    assert iv["gamma"]["lower"] < 0.2 < iv["gamma"]["upper"]
    later = np.linspace(30, 45, 4)
    _, lower, upper = model.predict_counts(torch.as_tensor(later), prob=0.9)["j"]
    expected = torch.as_tensor(1000.0 * sol.sol(later)[1])
    assert bool(((lower <= expected) & (expected <= upper)).all()), (lower, expected, upper)
