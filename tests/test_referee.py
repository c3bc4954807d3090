"""The exact equation as start and referee, collocation that is resolved, and fits that do
not crash where a retry or a message serves (issue "Never confidently wrong")."""

import math
import warnings

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp
from torch.distributions import constraints

import pyro_pidkl as pk
from pyro_pidkl.diagnostics.adequacy import Adequacy
from pyro_pidkl.infer.exact_fit import fit_exact, trajectory_nll
from pyro_pidkl.models.conditioning.referee import RefereeWarning, referee
from pyro_pidkl.physics import Equation, Parameter
from pyro_pidkl.physics.scalar_ode import equation_ode

D = torch.float64
POSITIVE = torch.distributions.transform_to(constraints.positive)


def _duffing(f, x, c, k, b):
    return f.d("t", "t") + c * f.d("t") + k * f + b * f ** 3 - 0.8 * torch.cos(1.2 * x["t"])


def _duffing_data(n=50, seed=1, c=0.3, k=1.0, b=0.5):
    sol = solve_ivp(lambda t, s: [s[1], -c * s[1] - k * s[0] - b * s[0] ** 3
                                  + 0.8 * np.cos(1.2 * t)],
                    (0, 10), [1.0, 0.0], dense_output=True, rtol=1e-10, atol=1e-10)
    t = np.linspace(0, 10, n)
    y = sol.sol(t)[0] + 0.05 * np.random.default_rng(seed).standard_normal(n)
    return t, y


def test_a_single_equation_is_an_explicit_first_order_system():
    """f'' + c f' + k f + b f^3 = A cos(w t): the state (f, f'), its rhs in closed form, with
    a forcing read from x["t"]; an equation nonlinear in its top derivative, a PDE and an
    equation with no derivative are not explicit ODEs."""
    eq = Equation(_duffing, inputs=("t",), c=0.3, k=1.0, b=0.5)
    ode = equation_ode(eq, ("t",))
    assert ode is not None and ode.order == 2
    t = torch.tensor([0.0, 0.7, 2.0], dtype=D)
    x = torch.tensor([[1.0, 0.5], [-2.0, 0.1], [0.3, -1.0]], dtype=D)
    F = ode.rhs(t, x)
    want = -0.3 * x[:, 1] - x[:, 0] - 0.5 * x[:, 0] ** 3 + 0.8 * torch.cos(1.2 * t)
    assert torch.allclose(F[:, 0], x[:, 1]) and torch.allclose(F[:, 1], want)
    # batched coefficient values
    F2 = ode.rhs(t, x, {"k": torch.tensor([2.0, 2.0, 2.0], dtype=D)})
    assert torch.allclose(F2[:, 1], want - x[:, 0])
    # a coefficient of the top derivative that depends on t: still explicit
    eq_t = Equation(lambda f, x, a: (1 + x["t"] ** 2) * f.d("t") + a * f, inputs=("t",), a=1.0)
    ode_t = equation_ode(eq_t, ("t",))
    assert ode_t.order == 1
    assert torch.allclose(ode_t.rhs(t, x[:, :1])[:, 0], -x[:, 0] / (1 + t ** 2))
    assert equation_ode(Equation(lambda f, x: f.d("t") ** 3 + f, inputs=("t",)), ("t",)) is None
    assert equation_ode(Equation(lambda f, x: f.d("t") - f.d("x", "x"), inputs=("x", "t")),
                        ("x", "t")) is None
    assert equation_ode(Equation(lambda f, x: f - 1.0, inputs=("t",)), ("t",)) is None


def test_the_equation_ode_integrates_to_the_analytic_solution():
    """f'' + 4 f = 0, f(0) = 1, f'(0) = 0: cos(2 t), to the solver's tolerance."""
    eq = Equation(lambda f, x, w2: f.d("t", "t") + w2 * f, inputs=("t",),
                  w2=Parameter(4.0, fixed=True))
    ode = equation_ode(eq, ("t",))
    t = np.linspace(0, 5, 11)
    traj = ode.integrate(0.0, torch.tensor([[1.0, 0.0]], dtype=D), t, rtol=1e-10, atol=1e-12)
    assert np.allclose(traj[0, 0], np.cos(2 * t), atol=1e-7)
    assert np.allclose(traj[0, 1], -2 * np.sin(2 * t), atol=1e-7)


def test_the_exact_fit_recovers_a_forced_nonlinear_oscillator_with_covering_intervals():
    """Three coefficients of the forced cubic oscillator from 50 noisy points, from a start
    off by up to a factor of three (a Sobol design around it): each within 15%, each 90%
    interval covering the truth; the profiled likelihood is better at the fit than at a
    wrong answer."""
    t, y = _duffing_data()
    eq = Equation(_duffing, inputs=("t",), c=1.0, k=1.0, b=1.0)
    ode = equation_ode(eq, ("t",))
    observations = [(t, y), (np.zeros(0), np.zeros(0))]
    fit = fit_exact(ode, observations, [(n, POSITIVE, [0.0]) for n in "ckb"],
                    np.array([[y[0], 0.0]]), 0.0, 10.0, np.array([1.0, 1.0]), design=48,
                    design_half=np.full(3, math.log(1000)))
    truth = {"c": 0.3, "k": 1.0, "b": 0.5}
    iv = fit.intervals(0.9)
    for n, v in truth.items():
        assert abs(iv[n]["value"] - v) < 0.15 * v
        assert iv[n]["lower"] <= v <= iv[n]["upper"] and iv[n]["identified"]
    assert fit.sd[0] == pytest.approx(0.05, rel=0.3)
    wrong, _ = trajectory_nll(ode, observations, {"c": 0.3, "k": 1.3, "b": 0.0}, fit.x0,
                              0.0, 10.0, [1.0, 1.0])
    assert wrong > fit.nll + 20


def _oscillator_model(**kw):
    def damped_oscillator(f, x, omega, zeta):
        return f.d("t", "t") + 2 * zeta * omega * f.d("t") + omega ** 2 * f
    eq = Equation(damped_oscillator, inputs=("t",), omega=Parameter(1.0),
                  zeta=Parameter(0.5, constraints.unit_interval))
    data = pk.datasets.problem("oscillator").sample("extrapolation", seed=0)
    return pk.PhysicsConditionedGP(data.X_train, data.y_train, eq,
                                   domain=pk.Box(t=(0.0, 6.0)), **kw), data


def test_the_referee_agrees_on_a_right_fit_and_its_intervals_cover_both():
    """The README oscillator: the GP's answer and the exact fit's are equally likely under
    the exact trajectory; each reported interval covers both estimates."""
    model, _ = _oscillator_model()
    pk.fit(model, progress=False)
    report = model.referee
    assert report is not None and report.verdict == "agree"
    assert abs(report.costs["gp"] - report.costs["exact"]) < report.tolerance
    iv = model.coefficient_intervals(0.9)
    exact = report.exact.values()
    for n in ("omega", "zeta"):
        assert iv[n]["referee"] == "agree"
        assert iv[n]["lower"] <= exact[n] <= iv[n]["upper"]
        assert iv[n]["lower"] <= iv[n]["value"] <= iv[n]["upper"]
    assert iv["omega"]["lower"] < 2.0 < iv["omega"]["upper"]


@pytest.mark.slow
def test_the_referee_replaces_a_wrong_answer_with_the_exact_fits_and_says_so():
    """A fit left at a wrong optimum (here: its coefficients moved after the fit, as a fit
    stuck in a wrong basin leaves them) is worse on the exact likelihood by far more than
    the tolerance: the exact fit's coefficients are reported with its intervals (covering
    the truth), the GP is refitted to them, and one line says so."""
    model, data = _oscillator_model()
    pk.fit(model, progress=False)
    with torch.no_grad():
        model.equation.omega_unconstrained.fill_(math.log(1.2))
    model._cache = None
    with pytest.warns(RefereeWarning, match="nats worse than the exact-ODE fit") as record:
        report = referee(model, None)
    assert len(record) == 1
    assert report.verdict == "exact" and report.costs["gp"] > report.costs["exact"] + 10
    values = model.equation_parameters()
    assert values["omega"] == pytest.approx(2.0, rel=0.02)
    iv = model.coefficient_intervals(0.9)
    assert iv["omega"]["referee"] == "exact" and iv["omega"]["lower"] < 2.0 < iv["omega"]["upper"]


def test_the_referee_skips_what_it_cannot_score():
    """An unknown ("gp") source and a PDE are not refereed (no exact likelihood)."""
    model, _ = _oscillator_model(source="gp")
    pk.fit(model, progress=False)
    assert model.referee is None


def test_restarts_any_count():
    """pk.fit(model, restarts=R) for R past the model's listed starts: each extra start is
    its own, and the best objective is kept (an IndexError before)."""
    t = torch.linspace(0, 1, 12, dtype=D)
    y = torch.exp(-2 * t) + 0.01 * torch.randn(12, dtype=D, generator=torch.Generator().manual_seed(0))
    eq = Equation(lambda f, x, a: f.d("t") + a * f, inputs=("t",), a=Parameter(1.0))
    model = pk.PhysicsConditionedGP(t, y, eq)
    result = pk.fit(model, restarts=5, progress=False)
    assert len(result.starts) == 6 and len(set(np.round(result.starts, 8))) > 3
    assert model.equation_parameters()["a"] == pytest.approx(2.0, rel=0.1)


def test_an_adequacy_message_never_prints_nan():
    report = Adequacy("equation 'e'", {"equation 'e'": math.nan}, math.nan, False)
    assert not report.ok and "nan" not in report.message()
    assert "not finite" in report.message()


def _boundary_layer(eps, refine):
    u = lambda x: x - (torch.exp((x - 1) / eps) - math.exp(-1 / eps)) / (1 - math.exp(-1 / eps))
    eq = Equation(lambda f, x: -eps * f.d("x", "x") + f.d("x"), inputs=("x",))
    Z = torch.linspace(0, 1, 102, dtype=D)[1:-1]
    model = pk.PhysicsConditionedGP(torch.tensor([0.0, 1.0], dtype=D), torch.zeros(2, dtype=D),
                                    eq, collocation=Z, source=lambda x: torch.ones_like(x["x"]),
                                    collocation_refine=refine)
    return model, u


def test_a_boundary_layer_is_resolved_by_refinement_or_reported():
    """-0.02 u'' + u' = 1, u(0) = u(1) = 0 on 100 uniform points: the equation holds at the
    points and fails between them (u = 0). Without refinement the fit warns in one line
    that the collocation does not resolve the solution; with the default refinement the
    points are doubled until it does, and the solution is within 1e-3."""
    model, u = _boundary_layer(0.02, refine=0)
    with pytest.warns(UserWarning, match="between the collocation points"):
        pk.fit(model, progress=False)
    assert model.adequacy().between > 0.5
    model, u = _boundary_layer(0.02, refine=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", pk.diagnostics.adequacy.ModelMisfitWarning)
        pk.fit(model, progress=False)
    x = torch.linspace(0, 1, 1001, dtype=D)
    mean, _ = model(x)
    assert float((mean - u(x)).norm() / u(x).norm()) < 1e-3
    assert model.resolution["points"][0] == 100 and model.resolution["points"][-1] > 100
    assert model.resolution["between"][-1] < 0.02


def test_a_thinner_layer_left_unresolved_is_refused_in_one_line():
    """-0.01 u'' + u' = 1: the fit's mean is the straight line x - 1/2, which solves the
    equation everywhere (the layer left out) and misses both boundary values by 0.5: the
    equation holds between the points, the exact data are missed; refinement does not
    mend it, and the fit says so in one line (rather than answer u = x - 1/2 silently)."""
    model, u = _boundary_layer(0.01, refine=3)
    with pytest.warns(UserWarning, match="misses its exact data") as record:
        pk.fit(model, progress=False)
    assert len([w for w in record if "exact data" in str(w.message)]) == 1
    # one round that left the misfit where it was, not three: more points cannot mend it
    assert model.resolution["points"] == [100, 200]
    assert model.resolution["misfit"][1] > 0.9 * model.resolution["misfit"][0]
    report = model.adequacy()
    assert report.data_misfit > 100 and not report.ok


def test_the_exact_fit_of_a_model_is_exposed_and_refuses_what_it_cannot_fit():
    """pk.exact_fit(model): the textbook fit of the model's own equation and data, before or
    after the GP's fit; a model with an unknown source has no exact likelihood."""
    model, _ = _oscillator_model()
    found = pk.exact_fit(model)
    iv = found.intervals(0.9)
    assert iv["omega"]["lower"] < 2.0 < iv["omega"]["upper"]
    assert iv["zeta"]["lower"] < 0.15 < iv["zeta"]["upper"]
    model, _ = _oscillator_model(source="gp")
    with pytest.raises(ValueError, match="explicit ODE"):
        pk.exact_fit(model)


def test_two_answers_of_equal_likelihood_are_reported_as_such():
    """Verdict "apart" (the fits about equally likely, each 90% interval excluding the other's
    estimate, the exact fit's the more likely): the exact fit's value, its interval widened
    to the GP's estimate, not identified; "agree": the union, identified only where both
    are."""
    from pyro_pidkl.infer.exact_fit import ExactFit
    from pyro_pidkl.models.conditioning.referee import Referee
    exact = ExactFit(["b"], np.array([math.log(0.15)]), [POSITIVE], np.zeros(2), 0.0,
                     np.array([0.1, 0.1]), -77.0, np.array([[0.2 ** 2]]), np.ones(2),
                     identified=np.array([True]))
    gp = {"b": {"value": 0.0056, "lower": 0.0046, "upper": 0.0068, "sd": 0.0007,
                "identified": True}}
    apart = Referee(exact, {"gp": -74.5, "exact": -77.0}, 5.7, "apart", {"b": 0.0056}, ["b"])
    out = apart.combine(gp, 0.9)["b"]
    assert out["value"] == pytest.approx(0.15) and out["lower"] <= 0.0056 < 0.15 < out["upper"]
    assert not out["identified"] and out["referee"] == "apart"
    agree = Referee(exact, {"gp": -76.9, "exact": -77.0}, 5.7, "agree", {"b": 0.0056}, [])
    out = agree.combine(gp, 0.9)["b"]
    e = exact.intervals(0.9)["b"]
    assert out["value"] == 0.0056 and out["lower"] == 0.0046 and out["upper"] == e["upper"]
    assert out["identified"]


@pytest.mark.slow
def test_the_identified_verdict_does_not_flip_with_the_collocation_seed():
    """The forced cubic oscillator's 50 points, fitted with three collocation designs: every
    coefficient's identified flag is the same on all three, each 90% interval covers the
    truth, and the estimates agree within their intervals."""
    t, y = _duffing_data()
    truth = {"c": 0.3, "k": 1.0, "b": 0.5}
    flags, values = [], []
    for seed in range(3):
        eq = Equation(_duffing, inputs=("t",), c=1.0, k=1.0, b=1.0)
        model = pk.PhysicsConditionedGP(torch.tensor(t), torch.tensor(y), eq, seed=seed,
                                        domain=pk.Box(t=(0.0, 15.0)))
        pk.fit(model, progress=False)
        iv = model.coefficient_intervals(0.9)
        flags.append({n: v["identified"] for n, v in iv.items()})
        values.append(iv)
        for n, v in truth.items():
            assert iv[n]["lower"] <= v <= iv[n]["upper"], (seed, n, iv[n])
    assert flags[0] == flags[1] == flags[2]
    for n in truth:
        assert max(v[n]["lower"] for v in values) <= min(v[n]["upper"] for v in values)


def test_a_coefficient_at_the_edge_of_its_prior_does_not_crash_the_referee():
    """The exact fit can run a positive rate to 0, where a declared LogNormal prior is not
    defined: its log prior is -inf (the referee then keeps the GP's answer), not an error
    (a calibration fit of the pendulum stopped with a ValueError before)."""
    import pyro.distributions as dist
    from pyro_pidkl.models.conditioning.referee import _log_prior, _prior_hessian
    eq = Equation(lambda f, x, k: f.d("t") + k * f, inputs=("t",),
                  k=Parameter(1.0, prior=dist.LogNormal(0.0, 1.0)))
    t = torch.linspace(0, 1, 12, dtype=D)
    model = pk.PhysicsConditionedGP(t, torch.exp(-t), eq)
    assert _log_prior(model, {"k": 0.0}) == -math.inf
    assert math.isfinite(_log_prior(model, {"k": 1.0}))
    assert np.isfinite(_prior_hessian(model, [-1e3])).all()


def test_an_exact_fit_with_a_rate_run_to_zero_keeps_its_trade_off():
    """f' = -(a + b) f: only a + b is seen. With b run to zero (its log 70 below the
    start), the curvature in log b vanishes and a alone would look pinned (an interval
    that claims what the data do not say); taken in b itself, the trade-off shows: a is
    as free as the data leave it and b's interval runs from zero, both unidentified."""
    from pyro_pidkl.infer.exact_fit import ExactFit, _laplace, at_bound
    t = np.linspace(0.0, 4.0, 30)
    y = 2 * np.exp(-0.7 * t) + 0.02 * np.random.default_rng(0).standard_normal(30)
    eq = Equation(lambda f, x, a, b: f.d("t") + (a + b) * f, inputs=("t",), a=1.0, b=1.0)
    ode = equation_ode(eq, ("t",))
    transforms = [("a", POSITIVE), ("b", POSITIVE)]
    v = np.array([math.log(0.7), math.log(0.7) - 70.0, y[0]])
    assert at_bound(transforms, v[:2], np.zeros((1, 2))) == {1: 1e-4}
    assert at_bound(transforms, np.array([math.log(0.7), -1.0]), np.zeros((1, 2))) == {}
    args = (ode, [(t, y)], transforms, v, 0.0, 4.0, np.ones(1), np.array([0.02]))
    alone, _, _ = _laplace(*args)
    assert 0 < alone[0, 0] < 0.01                          # a alone: pinned to a few percent
    coupled, identified, sd = _laplace(*args, boundary={1: 1e-4})
    assert not (0 < coupled[0, 0] < 1.0) and not identified.any()
    fit = ExactFit(["a", "b"], v[:2], [POSITIVE] * 2, v[2:], 0.0, sd, 0.0, coupled,
                   np.ones(1), identified, [1])
    iv = fit.intervals(0.9)
    assert iv["b"]["lower"] == 0.0 and iv["b"]["upper"] > 0.5 and not iv["b"]["identified"]
    assert not iv["a"]["identified"] and iv["a"]["upper"] > 1.5


def test_an_ill_conditioned_initial_value_problem_is_not_refereed():
    """-e u'' + u' = 1 as an initial-value problem has the mode e^(x / e): at e = 0.02 a change
    of u'(0) grows e^50-fold against the solution (x - layer), so the exact likelihood is the
    integrator's error and the referee steps aside (the GP's answer and its own checks stand,
    ``model.unrefereed`` says why; ``pk.exact_fit`` refuses in one line). Exponential growth
    (the solution carries the growing mode) and e = 0.2 (e^5, kappa 1.4e4) are well conditioned."""
    from pyro_pidkl.infer.ivp_conditioning import amplification, ill_conditioned
    from pyro_pidkl.physics.scalar_ode import equation_ode
    eq = Equation(lambda f, x, e: -e * f.d("x", "x") + f.d("x") - 1.0, inputs=("x",),
                  e=Parameter(0.05))
    ode = equation_ode(eq, ("x",), None)
    times = np.linspace(0, 1, 64)
    for eps, refused in ((0.02, True), (0.2, False)):
        u = times - (np.exp((times - 1) / eps) - math.exp(-1 / eps)) / (1 - math.exp(-1 / eps))
        du = 1 - np.exp((times - 1) / eps) / eps / (1 - math.exp(-1 / eps))
        path = (times, np.stack([u, du]))
        kappa = amplification(ode, path[1][:, 0], {"e": eps}, path, [0.5, 5.0])
        why = ill_conditioned(ode, path[1][:, 0], {"e": eps}, path, [0.5, 5.0])
        assert (kappa > 1e15) if refused else (1.0 < kappa < 1e5), (eps, kappa)
        assert (why is not None) == refused and (not refused or "boundary-value" in why)
    growth = equation_ode(Equation(lambda f, x, a: f.d("t") - a * f, inputs=("t",),
                                   a=Parameter(1.0)), ("t",), None)
    times = np.linspace(0, 20, 64)
    kappa = amplification(growth, [1.0], {"a": 1.0}, (times, np.exp(times)[None]), [1e8])
    assert kappa == pytest.approx(1.0, rel=1e-3)            # grown e^20-fold, relatively exact
    x = torch.linspace(0, 1, 41, dtype=D)
    u = lambda x: x - (torch.exp((x - 1) / 0.02) - math.exp(-50)) / (1 - math.exp(-50))
    y = u(x) + 0.01 * torch.randn(41, generator=torch.Generator().manual_seed(0), dtype=D)
    model = pk.PhysicsConditionedGP(x[:, None], y, eq, collocation=pk.Collocation(30, refine=0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pk.ModelMisfitWarning)       # 30 points: unresolved
        warnings.simplefilter("error", pk.RefereeWarning)
        pk.fit(model, progress=False)
    assert model.referee is None and "boundary-value" in model.unrefereed
    with pytest.raises(ValueError, match="initial-value problem"):
        pk.exact_fit(model)


def test_a_gp_answer_near_the_exact_one_is_scored_by_the_exact_fits_quadratic():
    """Where the GP's coefficients are within the exact fit's basin, their cost above the
    exact optimum is taken to second order (the exact fit's Laplace covariance) rather than by
    a fit of the exact trajectory with them held: on the README oscillator the two agree to a
    quarter of the difference, both far under the tolerance, and the verdict is the same."""
    from pyro_pidkl.models.conditioning.referee import NEAR_SHARE, _cost, _quadratic_cost
    model, _ = _oscillator_model()
    pk.fit(model, progress=False)
    report = model.referee
    exact = report.exact
    theta = [float(t.inv(torch.tensor(report.gp_values[n], dtype=D)))
             for n, t in zip(exact.names, exact.transforms)]
    near = _quadratic_cost(exact, theta)
    full = _cost(model, report.gp_values, model._exact_problem())[0] - report.costs["exact"]
    assert near < NEAR_SHARE * report.tolerance and report.verdict == "agree"
    assert near == pytest.approx(report.costs["gp"] - report.costs["exact"])
    assert abs(near - full) <= 0.25 * abs(full) + 1e-4, (near, full)
    far = list(exact.theta + 3 * np.sqrt(np.diag(exact.cov)[:len(theta)]))
    assert _quadratic_cost(exact, far) > 3.0                    # 0.5 * 9 per coefficient
