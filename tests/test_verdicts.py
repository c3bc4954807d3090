"""What a conditioned fit claims, checked against what holds: a coefficient the collocation
does not resolve is said to be so (issue 63); a band carries its coefficients' uncertainty
(the textbook delta method where the exact ODE referees the fit), a coefficient its prior
decides is said to be so, two models of one equation learn their own coefficients, and a
fit reports the seconds of each stage (issue 64)."""

import math

import numpy as np
import pyro.distributions as dist
import pytest
import torch
from scipy.optimize import curve_fit
from torch.distributions import constraints

import pyro_pidkl as pk
from pyro_pidkl.physics import Equation, Parameter

D = torch.float64
EPS = 0.02


def _layer(x):
    return x - (torch.exp((x - 1) / EPS) - math.exp(-1 / EPS)) / (1 - math.exp(-1 / EPS))


def _layer_fit(points):
    """-e u'' + u' = 1 on [0, 1], u(0) = u(1) = 0, e = 0.02 learned from 41 noisy values,
    the collocation held at ``points`` (no refinement)."""
    x = torch.linspace(0, 1, 41, dtype=D)
    y = _layer(x) + 0.01 * torch.randn(41, generator=torch.Generator().manual_seed(0), dtype=D)
    eq = Equation(lambda f, x, e: -e * f.d("x", "x") + f.d("x") - 1.0, inputs=("x",),
                  e=Parameter(0.05))
    model = pk.PhysicsConditionedGP(x[:, None], y, eq, collocation=pk.Collocation(points,
                                                                                   refine=0))
    pk.fit(model, progress=False)
    return model


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_an_unresolved_coefficient_is_said_to_be_and_a_resolved_one_is_not():
    """On 15 and 30 points the layer (width 0.02) is not resolved: e 21% and 6% off with
    Laplace intervals that exclude 0.02; each is reported not resolved, not identified, its
    interval widened towards the truth (on 30 points to hold it; on 15 to 0.0201), and the
    adequacy check says so in one line. On 200 points: resolved, identified, covering."""
    for points in (15, 30):
        model = _layer_fit(points)
        e = model.coefficient_intervals(0.9)["e"]
        assert e["resolved"] is False and e["identified"] is False, e
        assert e["lower"] <= 1.01 * EPS and EPS <= e["upper"], e
        report = model.adequacy()
        assert report.unresolved == ["e"] and not report.ok
        assert "\n" not in report.message() and "collocation" in report.message()
    model = _layer_fit(200)
    e = model.coefficient_intervals(0.9)["e"]
    assert e["resolved"] is True and e["identified"] is True and e["lower"] <= EPS <= e["upper"]
    assert model.adequacy().unresolved == []


def _oscillator():
    eq = Equation(lambda f, x, omega, zeta: f.d("t", "t") + 2 * zeta * omega * f.d("t")
                  + omega ** 2 * f, inputs=("t",), omega=Parameter(1.0),
                  zeta=Parameter(0.5, constraints.unit_interval))
    data = pk.datasets.problem("oscillator").sample("extrapolation", seed=0)
    return pk.PhysicsConditionedGP(data.X_train, data.y_train, eq, domain=pk.Box(t=(0.0, 6.0)))


def test_a_resolved_ode_asks_for_no_shift_and_reports_its_stages():
    model = _oscillator()
    result = pk.fit(model, progress=False)
    shift = model.coefficient_resolution()
    assert set(shift) == {"omega", "zeta"} and max(abs(v) for v in shift.values()) < 1e-3
    assert {"fit", "refine", "referee", "adequacy"} <= set(result.stage_seconds)
    assert all(v >= 0 for v in result.stage_seconds.values())


def _logistic_data(seed=0):
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 8, 25)
    return t, 8 / (1 + 7 * np.exp(-0.6 * t)) + 0.2 * rng.standard_normal(25)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_band_carries_its_coefficients_uncertainty():
    """Logistic growth (r 0.6, K 8; 25 points with sd 0.2 on [0, 8]) on [0, 16]: where f
    reaches its capacity (t = 16) the band's sd is at least K's; at t = 11 the band's sd is
    within 20% of the textbook delta method's (scipy's curve_fit of the closed form, its
    covariance pushed through the curve). Before: 0.045 against 0.142."""
    t, y = _logistic_data()
    eq = Equation(lambda f, x, r, K: f.d("t") - r * f * (1 - f / K), inputs=("t",),
                  r=Parameter(1.0), K=Parameter(5.0))
    model = pk.PhysicsConditionedGP(torch.tensor(t)[:, None], torch.tensor(y), eq,
                                    domain=pk.Box(t=(0.0, 16.0)))
    pk.fit(model, progress=False)
    K = model.coefficient_intervals(0.9)["K"]
    _, var = model(torch.tensor([[11.0], [16.0]], dtype=D))
    sd = var.sqrt().numpy()
    assert sd[1] >= 0.95 * K["sd"], (sd, K)

    def g(t, r, K, f0):
        return K / (1 + (K / f0 - 1) * np.exp(-r * t))
    p, C = curve_fit(g, t, y, p0=[1.0, 5.0, 1.0])
    J = np.array([(g(11.0, *(p + e)) - g(11.0, *(p - e))) / 2e-6 for e in np.eye(3) * 1e-6])
    assert sd[0] == pytest.approx(math.sqrt(J @ C @ J), rel=0.2)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pyro_pidkl.diagnostics.adequacy.ModelMisfitWarning")
def test_a_coefficient_its_prior_decides_is_said_to_be():
    """K ~ Normal(6, 0.1) declared, data that want 8.4: K is not 'free', its prior decides
    it, and the one line says so."""
    t, y = _logistic_data()
    eq = Equation(lambda f, x, r, K: f.d("t") - r * f * (1 - f / K), inputs=("t",),
                  r=Parameter(1.0), K=Parameter(5.0, prior=dist.Normal(6.0, 0.1)))
    model = pk.PhysicsConditionedGP(torch.tensor(t)[:, None], torch.tensor(y), eq,
                                    domain=pk.Box(t=(0.0, 16.0)))
    pk.fit(model, progress=False)
    with pytest.warns(UserWarning) as caught:
        K = model.coefficient_intervals(0.9)["K"]
    said = " ".join(str(w.message) for w in caught)
    if not K["identified"]:
        assert K["decided_by"] == "prior" and "prior of K decides it" in said
        assert "leave K free" not in said
    assert 5.8 < K["value"] < 6.4


@pytest.mark.filterwarnings("ignore::pyro_pidkl.models.conditioning.referee.RefereeWarning")
def test_two_models_of_one_equation_learn_their_own_coefficients():
    t = torch.linspace(0, 2, 20, dtype=D)
    eq = Equation(lambda f, x, k: f.d("t") + k * f, inputs=("t",), k=Parameter(1.0))
    first = pk.PhysicsConditionedGP(t, torch.exp(-1.3 * t), eq)
    with pytest.warns(UserWarning, match="takes a copy") as caught:
        second = pk.PhysicsConditionedGP(t, torch.exp(-0.5 * t), eq)
    assert len([w for w in caught if "takes a copy" in str(w.message)]) == 1
    assert first.equation is eq and second.equation is not eq
    pk.fit(first, progress=False)
    pk.fit(second, progress=False)
    assert first.equation_parameters()["k"] == pytest.approx(1.3, rel=1e-3)
    assert second.equation_parameters()["k"] == pytest.approx(0.5, rel=1e-3)
    fixed = Equation(lambda f, x, k: f.d("t") + k * f, inputs=("t",), k=Parameter(1.0,
                                                                                   fixed=True))
    a = pk.PhysicsConditionedGP(t, torch.exp(-t), fixed)
    b = pk.PhysicsConditionedGP(t, torch.exp(-t), fixed)      # nothing to learn: shared
    assert a.equation is b.equation is fixed


def test_a_stage_that_breaks_keeps_the_fit_before_it(monkeypatch):
    """A check after the fit whose refit runs where the joint does not factor (the issue's
    influenza fit: NonFiniteError after 180 s) keeps the fit before it, in one line."""
    from pyro_pidkl.errors import NonFiniteError
    from pyro_pidkl.models.single import model as single

    t = torch.linspace(0, 2, 20, dtype=D)
    y = torch.exp(-1.3 * t) + 0.01 * torch.randn(20, generator=torch.Generator().manual_seed(1),
                                                 dtype=D)

    def broken(model, refit):
        with torch.no_grad():
            model.equation.k_unconstrained.fill_(float("nan"))
        raise NonFiniteError("The joint covariance contains NaN or inf")
    monkeypatch.setattr(single.PhysicsConditionedGP, "after_fit_stages",
                        (("refine", broken),))
    model = pk.PhysicsConditionedGP(t, y, Equation(lambda f, x, k: f.d("t") + k * f,
                                                   inputs=("t",), k=Parameter(1.0)))
    with pytest.warns(UserWarning, match="refine stage after the fit .* failed") as caught:
        pk.fit(model, progress=False)
    assert all("\n" not in str(w.message) for w in caught)
    assert model.equation_parameters()["k"] == pytest.approx(1.3, rel=0.05)


def test_gauss_newton_reaches_the_fixed_point_where_the_residual_must_rise():
    """Logistic growth (r 1.228, K 2.484, f(0) from the draw; 25 points on [0, 5] with noise
    3% of their spread, the priors of the calibration benchmark's logistic family, its
    dataset 3): the equation's residual at the GP's fixed point is above that of points
    the fit passes through, so a line search on the residual rejected every step and crept
    at 2^-6 of a step. Before: Gauss-Newton unconverged at the fit, a false misfit warning
    (2.6%), r 'decided by its prior' with an interval 16x the exact likelihood's. Now the
    fit ends at a converged fixed point, r is identified, and its sd is within 1.5x of the
    textbook least-squares fit's (scipy's curve_fit of the closed form)."""
    gen = np.random.default_rng(10_003)
    r0, K0 = float(np.exp(gen.normal(0.0, 0.3))), float(np.exp(gen.normal(math.log(2), 0.2)))
    x0 = gen.uniform(0.1, 0.3)
    t = np.linspace(0, 5, 25)

    def g(t, r, K, f0):
        return K / (1 + (K / f0 - 1) * np.exp(-r * t))
    f = g(t, r0, K0, x0)
    y = f + 0.03 * np.std(f) * gen.standard_normal(25)
    eq = Equation(lambda f, x, r, K: f.d("t") - r * f * (1 - f / K), inputs=("t",),
                  r=Parameter(1.0, prior=dist.LogNormal(0.0, 0.3)),
                  K=Parameter(2.0, prior=dist.LogNormal(math.log(2.0), 0.2)))
    model = pk.PhysicsConditionedGP(torch.tensor(t)[:, None], torch.tensor(y), eq,
                                    domain=pk.Box(t=(0.0, 10.0)))
    pk.fit(model, progress=False)
    assert model.solve()[2].converged
    r = model.coefficient_intervals(0.9)["r"]
    p, C = curve_fit(g, t, y, p0=[1.0, 2.0, 0.2])
    assert r["identified"] and r["lower"] < r0 < r["upper"], (r, r0)
    assert r["sd"] < 1.5 * math.sqrt(C[0, 0]), (r, math.sqrt(C[0, 0]))


def test_a_band_the_linearisation_does_not_hold_for_says_so():
    """Decay f' = -k f (k 1) measured at 10 points of [0, 1] with sd 0.05: k's sd is about
    0.1, so at t = 20 the trajectories exp(-(k +- s) t) bend from the centre by tanh(s t / 2)
    ~ 0.76 of their half difference (the delta method's second-order term against its
    first): the band there says it is approximate, in one line; near the data (0.5, 1) it
    does not."""
    from pyro_pidkl.errors import BandApproximationWarning
    t = torch.linspace(0, 1, 10, dtype=D)
    y = torch.exp(-t) + 0.05 * torch.randn(10, generator=torch.Generator().manual_seed(0),
                                           dtype=D)
    eq = Equation(lambda f, x, k: f.d("t") + k * f, inputs=("t",), k=Parameter(0.5))
    model = pk.PhysicsConditionedGP(t[:, None], y, eq, domain=pk.Box(t=(0.0, 25.0)))
    pk.fit(model, progress=False)
    assert model.referee is not None and model.referee.verdict != "gp"
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", BandApproximationWarning)
        model(torch.tensor([[0.5], [1.0]], dtype=D))
    with pytest.warns(BandApproximationWarning, match=r"at t in \[20, 25\]"):
        model(torch.tensor([[0.5], [20.0], [25.0]], dtype=D))
