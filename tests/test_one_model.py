"""One conditioned model for one output and for several: the same ``model()``, the same
parts, and each feature checked for both where both have it.

Where each pair is tested:

- the search over starts of an explicit ODE: here, one equation and a system of the same
  oscillator from a start thirty times too slow;
- conditions (values and derivatives at points): ``test_conditioned.py`` (one equation:
  Dirichlet, Neumann, Robin, periodic, a learned condition coefficient),
  ``test_system_conditions.py`` (a system, on an output nobody measured);
- the exact-ODE referee: ``test_referee.py`` (one equation), ``test_systems.py`` (systems);
- likelihood parts: ``test_parts.py``; counts of one series as one equation and as a
  system of one, here; log-normal data both ways, ``test_lognormal.py``; counts of systems,
  ``test_system_counts.py``;
- a learned residual noise: here, for a system (the verification suite's ablation for one
  equation, ``docs/verification.md``);
- source parts (zero, known, an unknown GP): ``test_conditioned.py``, ``test_referee.py``
  (one equation), ``test_system_sources.py`` (a system, per equation);
- collocation refined where the equation fails between the points: ``test_referee.py`` (one
  equation's boundary layer), here (the same layer as a system).
"""

import pytest
import torch

import pyro_pidkl as pk
from pyro_pidkl.models.conditioning.conditioned import ConditionedModel
from pyro_pidkl.physics import Equation, EquationSystem, Parameter

from test_multistart import _oscillator_data, damped


def test_both_models_are_the_one_conditioned_model():
    for cls in (pk.PhysicsConditionedGP, pk.ConditionedSystemGP):
        assert issubclass(cls, ConditionedModel)
        assert cls.model is ConditionedModel.model and cls.guide is ConditionedModel.guide


@pytest.mark.parametrize("kind", ["equation", pytest.param("system", marks=pytest.mark.slow)])
def test_an_explicit_ode_from_a_far_start_is_found_by_the_search_over_starts(kind):
    """A damped oscillator (omega 3, zeta 0.1; x measured, its rate never), the fit started
    at omega 0.1, zeta 0.01: written as one second-order equation or as a system, the fit
    ends at the truth (the search over starts of the exact ODE, by the referee for one
    equation and by the shooting stage for a system)."""
    times, y = _oscillator_data()
    t, y = torch.as_tensor(times), torch.as_tensor(y)
    if kind == "equation":
        eq = Equation(lambda f, x, omega, zeta: f.d("t", "t") + 2 * zeta * omega * f.d("t")
                      + omega ** 2 * f, inputs=("t",), omega=Parameter(0.1),
                      zeta=Parameter(0.01))
        model = pk.PhysicsConditionedGP(t[:, None], y, eq)
    else:
        system = EquationSystem(damped, outputs=("x", "v"), inputs=("t",), omega=0.1,
                                zeta=0.01)
        model = pk.ConditionedSystemGP(system, {"x": (t, y)})
    pk.fit(model, progress=False)
    values = model.equation_parameters()
    assert values["omega"] == pytest.approx(3.0, abs=0.05)
    assert values["zeta"] == pytest.approx(0.1, abs=0.02)
    iv = model.coefficient_intervals(0.9)["omega"]
    assert iv["lower"] < 3.0 < iv["upper"]


def _logistic_counts(seed=0, n=30):
    """Counts whose mean grows logistically (r 1.2, K 60, from 5) on [0, 6]."""
    t = torch.linspace(0, 6, n, dtype=torch.float64)
    mean = 60 / (1 + (60 / 5 - 1) * torch.exp(-1.2 * t))
    return t, torch.poisson(mean, generator=torch.Generator().manual_seed(seed))


@pytest.mark.slow
@pytest.mark.parametrize("likelihood", [pk.Poisson(), pk.NegativeBinomial()])
def test_counts_of_one_series_fit_as_one_equation_and_as_a_system_of_one(likelihood):
    """One series of counts, its log-mean f under f' = r (1 - e^f / K) (the logistic law of
    the mean): as one equation (pk.PhysicsConditionedGP(likelihood=...)) and as a system of
    one output, the same coefficients, each within a fifth of a standard error of the exact
    ODE's maximum-likelihood fit (the referee's), and 90% intervals that hold the exact fit's
    and are at most half as wide again. (Since the system takes one start, 19636d9, its GP
    ends at a shorter lengthscale on the Poisson counts, 0.50 against 1.54 unconstrained,
    and its Laplace interval on K, unioned with the exact fit's, is 12.6 wide against the
    one equation's and the exact fit's 9.4: the two formulations no longer give one width.)"""
    t, y = _logistic_counts()
    eq = Equation(lambda f, x, r, K: f.d("t") - r * (1 - torch.exp(f) / K), inputs=("t",),
                  r=Parameter(0.5), K=Parameter(30.0))
    one = pk.PhysicsConditionedGP(t[:, None], y, eq, likelihood=likelihood)
    system = EquationSystem(lambda f, x, r, K: (f["u"].d("t") - r * (1 - torch.exp(f["u"]) / K),),
                            outputs=("u",), inputs=("t",), r=Parameter(0.5), K=Parameter(30.0))
    many = pk.ConditionedSystemGP(system, {"u": (t, y)}, likelihoods={"u": likelihood})
    results = []
    for model in (one, many):
        pk.fit(model, progress=False)
        iv = model.coefficient_intervals(0.9)
        exact = model.referee.exact.intervals(0.9)
        for name in ("r", "K"):
            sd = exact[name]["sd"]
            assert abs(iv[name]["value"] - exact[name]["value"]) < 0.2 * sd, (name, iv, exact)
        results.append(iv)
        assert model.referee.verdict in ("agree", "exact")
        for name in ("r", "K"):
            width = exact[name]["upper"] - exact[name]["lower"]
            assert iv[name]["lower"] <= exact[name]["lower"] + 1e-9 * width
            assert iv[name]["upper"] >= exact[name]["upper"] - 1e-9 * width
            assert iv[name]["upper"] - iv[name]["lower"] <= 1.5 * width, (name, iv, exact)
    for name in ("r", "K"):
        a, b = results[0][name], results[1][name]
        assert a["value"] == pytest.approx(b["value"], rel=0.02)
    median, lower, upper = one.predict_counts(t[:, None])
    inside = ((lower <= y) & (y <= upper)).double().mean()
    assert 0.75 <= float(inside) <= 1.0                # 90% predictive intervals of counts
    assert one.likelihood_parameters()["likelihood"] == likelihood.kind
    with pytest.raises(ValueError, match="noiseless=True") as e:
        one(t[:, None], noiseless=False)
    assert "\n" not in str(e.value)


def test_a_count_series_refuses_the_inducing_bound_and_bad_counts_in_one_line():
    t, y = _logistic_counts(n=12)
    eq = Equation(lambda f, x, r: f.d("t") - r, inputs=("t",), r=0.1)
    with pytest.raises(ValueError, match="dense solver") as e:
        pk.PhysicsConditionedGP(t[:, None], y, eq, likelihood=pk.Poisson(),
                                solver=pk.Inducing(8))
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="Expected counts") as e:
        pk.PhysicsConditionedGP(t[:, None], y + 0.5, eq, likelihood="poisson")
    assert "\n" not in str(e.value)
    model = pk.PhysicsConditionedGP(t[:, None], y, eq, likelihood=pk.Poisson())
    assert not model.profile_scale and model.screen_data is None and not model.linear
    gaussian = pk.PhysicsConditionedGP(t[:, None], y, eq)
    assert gaussian.profile_scale and gaussian.count_outputs == []
    with pytest.raises(ValueError, match="count data"):
        gaussian.predict_counts(t[:, None])
    system = EquationSystem(lambda f, x, r: (f["u"].d("t") - r,), outputs=("u",),
                            inputs=("t",), r=0.1)
    with pytest.raises(TypeError, match="source"):         # a system's are sources=
        pk.ConditionedSystemGP(system, {"u": (t, y)}, source="gp")


def _spring(**kw):
    def spring(f, x, k, c):
        return (f["x"].d("t") - f["v"], f["v"].d("t") + k * f["x"] + c * f["v"])
    t = torch.linspace(0, 6, 40, dtype=torch.float64)
    noise = 0.05 * torch.randn(40, generator=torch.Generator().manual_seed(0), dtype=t.dtype)
    x = torch.exp(-0.2 * t) * torch.cos(1.99 * t) + noise
    system = EquationSystem(spring, outputs=("x", "v"), inputs=("t",), k=1.0, c=1.0)
    return pk.ConditionedSystemGP(system, {"x": (t, x)}, domain=pk.Box(t=(0.0, 10.0)), **kw)


def test_a_systems_residual_noise_is_learned_above_its_floor_and_held_through_the_stages():
    model = _spring(residual_noise=pk.ResidualNoise(1e-5, learn=True, floor=1e-9))
    assert "residual_noise" in model._pyro_params
    model._set_tau(1e-2)
    assert float(model.residual_noise.detach()) == pytest.approx(1e-2)
    u = model.residual_noise_unconstrained
    assert u not in model.parameter_bounds()
    model._tau_held = True                        # a loose stage of the continuation
    lo, hi = model.parameter_bounds()[u]
    assert lo == hi == pytest.approx(float(u.detach()))
    held = _spring()
    assert "residual_noise" not in held._pyro_params and u not in held.parameter_bounds()


@pytest.mark.slow
def test_a_learned_residual_noise_on_an_exact_system_changes_nothing_that_matters():
    """The README's spring (its equations exact, the velocity never measured): learned, the
    residual noise stays small, the coefficients are the held fit's to 1%, both fits' 90%
    intervals hold the exact-ODE fit's (the textbook answer on the same data), and their
    widths are within a factor of two of each other. (The held fit's interval was once the
    narrower: the spring's GP has two optima 0.009 nats apart, k [3.854, 4.006] and [3.780,
    4.085], and which one a fit reaches moves with rounding: the environment of 2026-12-03
    on the AMD EPYC reaches the wider, learned [3.804, 4.058], exact [3.857, 4.003].)"""
    learned, held = _spring(learn_residual_noise=True), _spring()
    pk.fit(learned, progress=False)
    pk.fit(held, progress=False)
    assert 1e-12 < float(learned.residual_noise.detach()) < 1e-4
    a, b = learned.coefficient_intervals(0.9), held.coefficient_intervals(0.9)
    exact = held.referee.exact.intervals(0.9)
    for n in ("k", "c"):
        assert a[n]["value"] == pytest.approx(b[n]["value"], rel=0.01)
        for fit in (a, b):
            assert fit[n]["lower"] <= exact[n]["lower"] * 1.001
            assert fit[n]["upper"] >= exact[n]["upper"] * 0.999
        wa, wb = a[n]["upper"] - a[n]["lower"], b[n]["upper"] - b[n]["lower"]
        assert 0.5 <= wa / wb <= 2.0, (n, wa, wb)


@pytest.mark.slow
@pytest.mark.xfail(reason="on the Intel Xeon the system's fit stayed in a degenerate optimum at "
                   "every round (between 1.00, 0.96, 1.01, 0.99 at 50-400 points; error 0.92), "
                   "at 9e9efa1 too; it passed on the AMD EPYC in two slow-suite runs and failed "
                   "in a third (a fresh environment, 2026-12-03): rounding-dependent, open in "
                   "issue 62's notes", strict=False)
def test_a_systems_collocation_is_refined_where_its_equations_fail_between_the_points():
    """-0.02 u'' + u' = 1, u(0) = u(1) = 0 written as a system (u' = v, -0.02 v' + v = 1),
    50 collocation points: the posterior means fail the equations between the points (a
    boundary layer of width 0.02 at x = 1). With refinement (the default, as for one
    equation) the fit doubles the points until the equations hold between them, and the
    error against the exact solution falls."""
    import math
    eps = 0.02
    system = EquationSystem(lambda f, x: (f["u"].d("x") - f["v"],
                                          -eps * f["v"].d("x") + f["v"] - 1.0),
                            outputs=("u", "v"), inputs=("x",))
    X = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
    xs = torch.linspace(0, 1, 401, dtype=torch.float64)[:, None]
    exact = xs[:, 0] - (torch.exp((xs[:, 0] - 1) / eps) - math.exp(-1 / eps)) / (
        1 - math.exp(-1 / eps))
    errors, rounds = [], []
    for refine in (0, "auto"):
        model = pk.ConditionedSystemGP(system, {"u": (X, torch.zeros(2, dtype=torch.float64))},
                                       domain=pk.Box(x=(0.0, 1.0)), scales={"v": (0.0, 20.0)},
                                       collocation=pk.Collocation(50, refine=refine))
        with pytest.warns(pk.ModelMisfitWarning):          # at the points, equation 2 gives
            pk.fit(model, progress=False)                  # way somewhat either way
        errors.append(float((model(xs)[0][:, 0] - exact).abs().max()))
        rounds.append(model.resolution)
    assert rounds[0]["points"] == [50] and rounds[0]["between"][0] > 0.25
    assert len(rounds[1]["points"]) > 1 and rounds[1]["kept"] >= 1
    kept = rounds[1]["between"][rounds[1]["kept"]]
    assert kept < 0.25                                     # resolved between the points
    assert model.Z.shape[0] == rounds[1]["points"][rounds[1]["kept"]]
    assert errors[1] < 0.5 * errors[0]                     # 0.21 -> 0.08


@pytest.mark.slow
def test_a_large_system_learns_on_a_subset_of_its_collocation_points():
    """The spring at 400 collocation points, its parameters learned on a maximin subset of
    100 (as one equation's fit learns on 600 of more): the coefficients are the full fit's to
    a few percent, and the model ends with all 400 points, linearised at all of them."""
    full = _spring(collocation=400)
    part = _spring(collocation=pk.Collocation(400, fit_subset=100))
    pk.fit(full, progress=False)
    pk.fit(part, progress=False)
    assert part.Z.shape[0] == 400 and part.f0.shape[-1] == 400
    a, b = part.equation_parameters(), full.equation_parameters()
    for n in ("k", "c"):
        assert a[n] == pytest.approx(b[n], rel=0.05)
    assert part.coefficient_intervals(0.9)["k"]["lower"] < 4.0 < \
        part.coefficient_intervals(0.9)["k"]["upper"]
