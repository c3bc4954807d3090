"""The adequacy check: a conditioned fit whose data contradict its equation says so in one
line; a right equation does not; the numbers behind it against their closed forms."""

import math
import warnings

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp
from torch.distributions import constraints

import pyro_pidkl as pk
from pyro_pidkl.diagnostics import EVIDENCE_TOL, RESIDUAL_TOL, Adequacy
from pyro_pidkl.physics import Equation, Parameter
from pyro_pidkl.physics.linearise import relative_residual

D = torch.float64


def _logistic_data(n=30, sd=0.03, seed=0):
    t = np.linspace(0, 10, n)
    f = solve_ivp(lambda _, s: [0.9 * s[0] * (1 - s[0] / 2.0)], (0, 10), [0.1], t_eval=t,
                  rtol=1e-10, atol=1e-12).y[0]
    y = f + sd * np.std(f) * np.random.default_rng(seed).standard_normal(n)
    return torch.tensor(t, dtype=D)[:, None], torch.tensor(y, dtype=D)


def _fit(X, y, eq, domain=(0.0, 12.0)):
    model = pk.PhysicsConditionedGP(X, y, eq, domain=pk.Box(t=domain))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = pk.fit(model, progress=False)
    return model, result, [w for w in caught if issubclass(w.category, pk.ModelMisfitWarning)]


def test_relative_residual_against_its_closed_form():
    """f = exp(-t) in f' + k f = 0 with k = 2: residual exp(-t), terms -exp(-t) and
    2 exp(-t), so r = 1 / sqrt(5) at any points; the solution (k = 1) gives 0."""
    t = torch.linspace(0, 2, 9, dtype=D)[:, None]
    f = torch.exp(-t[:, 0])
    jet = {(): f, (0,): -f}
    for k, expected in ((2.0, 1 / math.sqrt(5)), (1.0, 0.0)):
        eq = Equation(lambda F, x, k: F.d("t") + k * F, inputs=("t",),
                      k=Parameter(k, fixed=True))
        assert abs(relative_residual(eq, jet, t, ("t",)) - expected) < 1e-12


@pytest.mark.slow
def test_a_wrong_equation_warns_and_a_right_one_does_not():
    """Logistic data: fitted with linear decay (no term can bend the curve), the data are
    decisively less likely with the equation than without it and pk.fit warns in one line
    naming the equation; fitted with the logistic equation, no warning."""
    X, y = _logistic_data()
    decay = Equation(lambda f, x, k: f.d("t") + k * f, inputs=("t",),
                     k=Parameter(1.0, constraints.real))
    model, result, caught = _fit(X, y, decay)
    report = result.adequacy
    assert isinstance(report, Adequacy) and not report.ok
    assert report.noise_learned and report.log_evidence_ratio < -EVIDENCE_TOL
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    assert "<lambda>" in str(caught[0].message) and "disagree" in str(caught[0].message)
    logistic = Equation(lambda f, x, r, K: f.d("t") - r * f * (1 - f / K), inputs=("t",),
                        r=Parameter(0.5), K=Parameter(1.0))
    model, result, caught = _fit(X, y, logistic)
    report = result.adequacy
    assert report.ok and not caught, str(report)
    assert report.log_evidence_ratio > 0                    # the equation's Occam factor
    assert max(report.residual.values()) < RESIDUAL_TOL


@pytest.mark.slow
def test_adequacy_is_pure_and_reported_as_numbers():
    X, y = _logistic_data(n=20)
    eq = Equation(lambda f, x, r, K: f.d("t") - r * f * (1 - f / K), inputs=("t",),
                  r=Parameter(0.5), K=Parameter(1.0))
    model, _, _ = _fit(X, y, eq)
    Xnew = torch.linspace(0, 12, 7, dtype=D)[:, None]
    before = model(Xnew)
    report = model.adequacy()
    after = model(Xnew)
    assert torch.equal(before[0], after[0]) and torch.equal(before[1], after[1])
    d = report.as_dict()
    assert set(d) == {"residual", "between", "data_misfit", "log_evidence_ratio",
                      "noise_learned", "trajectory_misfit", "coefficients", "unresolved", "ok",
                      "noise", "lines"}
    assert d["lines"] is None and set(d["noise"]) == {"y"}     # an ODE: no method of lines
    assert "Adequacy of equation" in str(report)


def test_exact_data_are_not_judged_on_evidence():
    """Boundary values of a two-point problem (exact data, the noise held at its floor):
    the evidence is reported, not judged; the equation's residual is."""
    eq = Equation(lambda f, x: f.d("t", "t") + 4.0 * f, inputs=("t",))
    X = torch.tensor([[0.0], [1.0]], dtype=D)
    y = torch.cos(2 * X[:, 0])
    model = pk.PhysicsConditionedGP(X, y, eq, collocation=40)
    pk.fit(model, progress=False)
    report = model.adequacy()
    assert not report.noise_learned and report.ok, str(report)
    assert math.isnan(report.log_evidence_ratio)          # two data: no reference fit


@pytest.mark.slow
def test_a_system_with_a_missing_interaction_warns():
    """Lotka-Volterra data fitted with two uncoupled equations (u' = a u, v' = -c v): the
    system cannot follow the cycles; the check says so, naming the system."""
    t = np.linspace(0, 20, 41)
    sol = solve_ivp(lambda _, s: [(0.55 - 0.028 * s[1]) * s[0], (-0.8 + 0.024 * s[0]) * s[1]],
                    (0, 20), [30.0, 4.0], t_eval=t, rtol=1e-10, atol=1e-12).y
    g = np.random.default_rng(0)
    data = {o: (torch.tensor(t, dtype=D),
                torch.tensor(s + 0.05 * np.std(s) * g.standard_normal(41), dtype=D))
            for o, s in zip(("u", "v"), sol)}

    def decoupled(f, x, a, c):
        return (f["u"].d("t") - a * f["u"], f["v"].d("t") + c * f["v"])
    system = pk.EquationSystem(decoupled, outputs=("u", "v"), inputs=("t",), a=0.5, c=0.5)
    model = pk.ConditionedSystemGP(system, data, domain=pk.Box(t=(0.0, 20.0)))
    with pytest.warns(pk.ModelMisfitWarning, match="system 'decoupled'"):
        result = pk.fit(model, progress=False)
    assert not result.adequacy.ok
    assert set(result.adequacy.trajectory_misfit) == {"u", "v"}


@pytest.mark.slow
def test_lynx_hare_fit_keeps_the_equation():
    """Twenty-one years of lynx and hare pelts (the library's copy) under Lotka-Volterra:
    the posterior mean is a solution of the system (its residual under RESIDUAL_TOL of the
    terms; with each output's prior variance free to grow it missed them by 8%, the
    equations let go) and every rate lands inside NumPyro's 90% posterior interval."""
    t, hare, lynx = pk.datasets.lynx_hare()

    def lotka_volterra(f, x, alpha, beta, gamma, delta):
        u, v = f["u"], f["v"]
        return (u.d("t") - (alpha - beta * v) * u, v.d("t") - (-gamma + delta * u) * v)
    system = pk.EquationSystem(lotka_volterra, outputs=("u", "v"), inputs=("t",), alpha=1.0,
                               beta=0.05, gamma=1.0, delta=0.05)
    model = pk.ConditionedSystemGP(system, {"u": (t, hare), "v": (t, lynx)},
                                   domain=pk.Box(t=(0.0, 20.0)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pk.models.ConvergenceWarning)
        result = pk.fit(model, progress=False)
    assert max(result.adequacy.residual.values()) < RESIDUAL_TOL, str(result.adequacy)
    rates = model.equation_parameters()
    for name, (_, low, high) in pk.datasets.REFERENCE_POSTERIOR.items():
        assert low <= rates[name] <= high, (name, rates[name])


@pytest.mark.slow
def test_the_datatree_carries_the_equation_check():
    """to_datatree of a conditioned fit holds the posterior mean's residual and the terms'
    size at the collocation points (what the adequacy summarises: their RMS ratio) and the
    adequacy numbers as attributes."""
    import json
    X, y = _logistic_data(n=20)
    eq = Equation(lambda f, x, r, K: f.d("t") - r * f * (1 - f / K), inputs=("t",),
                  r=Parameter(0.5), K=Parameter(1.0))
    model, result, _ = _fit(X, y, eq)
    tree = pk.diagnostics.to_datatree(model, torch.linspace(10, 12, 5, dtype=D)[:, None],
                                      num_samples=10)
    group = tree["equation_data"]
    r, size = group["residual_0"].values, group["terms_0"].values
    assert r.shape == size.shape == (model.Z.shape[0],)
    assert group["points_0_t"].values.shape == r.shape
    name, value = next(iter(result.adequacy.residual.items()))
    assert abs(np.sqrt((r ** 2).mean() / (size ** 2).mean()) - value) < 1e-12
    assert json.loads(tree.attrs["adequacy"])["residual"][name] == pytest.approx(value)
