"""The method-of-lines check of an evolution PDE in one space input: its solver against the
heat equation's closed form, its verdict on a right and a wrong coefficient, and its
refusals in one line."""

import math
import warnings

import numpy as np
import pytest
import torch

import pyro_pidkl as pk
from pyro_pidkl.models.conditioning.method_of_lines import (LINES_NODES, _Lines, lines_stage,
                                                            method_of_lines_check)


def heat(f, x, k):
    return f.d("t") - k * f.d("x", "x")


def exact(x, t, k=0.5):
    return np.exp(-k * math.pi ** 2 * t) * np.sin(math.pi * x)


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.uniform(0, 1, 60), rng.uniform(0, 0.5, 60)])
    y = exact(X[:, 0], X[:, 1]) + 0.01 * rng.standard_normal(60)
    eq = pk.Equation(heat, inputs=("x", "t"), k=0.2)
    model = pk.PhysicsConditionedGP(torch.tensor(X), torch.tensor(y), eq, input_names=("x", "t"),
                                    domain=pk.Box(x=(0, 1), t=(0, 0.5)))
    with warnings.catch_warnings():     # the fit, its method-of-lines stage included, is
        warnings.simplefilter("error")  # silent
        pk.fit(model, progress=False)
    return model


def test_the_lines_solve_the_heat_equation_at_second_order(fitted):
    grid = np.column_stack([np.tile(np.linspace(0.05, 0.95, 10), 5),
                            np.repeat(np.linspace(0.1, 0.5, 5), 10)])
    want = exact(grid[:, 0], grid[:, 1])
    errors = []
    for nodes in (9, 33):
        lines = _Lines(fitted, nodes)
        # the closed form's initial and boundary values: the discretisation's error alone
        lines.u0 = exact(lines.x, 0.0)
        lines.left, lines.right = np.zeros_like(lines.tb), np.zeros_like(lines.tb)
        u = lines.solve({"k": torch.tensor(0.5, dtype=torch.float64)}, grid)
        errors.append(np.abs(u - want).max())
    # second order in space: 4x finer, the error about 16x smaller
    assert errors[1] < errors[0] / 10 and errors[1] < 2e-3


def test_the_posteriors_initial_values_are_the_fits(fitted):
    lines = _Lines(fitted, 17)
    want = fitted(torch.tensor(np.column_stack([lines.x, np.zeros_like(lines.x)])))[0]
    assert np.allclose(lines.u0, want.detach().numpy())
    assert np.max(np.abs(lines.u0 - exact(lines.x, 0.0))) < 0.05


def test_the_check_agrees_with_a_right_fit_and_says_a_wrong_coefficient_disagrees(fitted):
    right = fitted.method_of_lines_check(nodes=33)
    assert right.verdict == "agree"
    assert right.lines["k"]["value"] == pytest.approx(fitted.equation.k.item(), rel=0.02)
    assert right.lines["k"]["lower"] < 0.5 < right.lines["k"]["upper"] or \
        abs(right.lines["k"]["value"] - 0.5) < 0.02
    kept = fitted.equation.k_unconstrained.detach().clone()
    try:
        with torch.no_grad():
            fitted.equation.k_unconstrained.fill_(math.log(0.3))
        fitted._cache = None
        wrong = method_of_lines_check(fitted, nodes=33)
    finally:
        with torch.no_grad():
            fitted.equation.k_unconstrained.copy_(kept)
        fitted._cache = None
    assert wrong.verdict == "disagree"
    assert wrong.lines_loglik - wrong.fit_loglik > wrong.tolerance
    assert len(wrong.summary()) == 2


@pytest.mark.slow
def test_every_fit_runs_the_check_and_a_disagreement_widens_and_is_warned(fitted):
    """pk.fit ends with the check on LINES_NODES nodes; where it disagrees (a coefficient
    moved to a wrong value, the stage run again) the intervals reach its optimum and are
    not identified, and the adequacy check warns in one line."""
    assert fitted.lines is not None and fitted.lines.nodes == LINES_NODES
    assert fitted.lines.verdict == "agree" and fitted.adequacy().ok
    assert "method of lines agree" in str(fitted.adequacy())
    before = fitted.coefficient_intervals(0.9)["k"]
    kept = fitted.equation.k_unconstrained.detach().clone()
    try:
        with torch.no_grad():
            fitted.equation.k_unconstrained.fill_(math.log(0.3))
        fitted._cache = None
        lines_stage(fitted)
        assert fitted.lines.verdict == "disagree"
        with warnings.catch_warnings():     # the Laplace at a point that is no optimum
            warnings.simplefilter("ignore")
            k = fitted.coefficient_intervals(0.9)["k"]
        assert k["identified"] is False and k["lower"] <= k["lines"] <= k["upper"]
        assert k["lines"] == fitted.lines.lines["k"]["value"] and k["lines"] > 0.3
        report = fitted.adequacy()
        assert not report.ok and report.as_dict()["lines"]["verdict"] == "disagree"
        with pytest.warns(pk.ModelMisfitWarning, match="method of lines") as caught:
            fitted.check_adequacy()
        assert "\n" not in str(caught[0].message)
    finally:
        with torch.no_grad():
            fitted.equation.k_unconstrained.copy_(kept)
        fitted._cache = None
        lines_stage(fitted)
    assert fitted.lines.verdict == "agree"
    assert fitted.coefficient_intervals(0.9)["k"] == before


def test_what_the_check_cannot_serve_is_refused_in_one_line(fitted):
    t = torch.linspace(0, 1, 8, dtype=torch.float64)
    ode = pk.PhysicsConditionedGP(t[:, None], torch.exp(-t), pk.Equation(
        lambda f, x, k: f.d("t") + k * f, inputs=("t",), k=1.0))
    with pytest.raises(ValueError, match="Expected an evolution PDE in one space input") as e:
        method_of_lines_check(ode)
    assert "\n" not in str(e.value)
    cases = [(lambda f, x, k: f.d("t") - k * f.d("x", "x", "x"), "u, u_x, u_xx and u_t only"),
             (lambda f, x, k: f.d("t") ** 2 - k * f.d("x", "x"), "not affine in u_t")]
    for psi, match in cases:
        eq = pk.Equation(psi, inputs=("x", "t"), k=0.5)
        model = pk.PhysicsConditionedGP(fitted.X, fitted.y, eq, input_names=("x", "t"),
                                        domain=pk.Box(x=(0, 1), t=(0, 0.5)))
        with pytest.raises(ValueError, match=match):
            method_of_lines_check(model, nodes=9)


def test_a_fit_whose_condition_learns_a_coefficient_is_not_checked(fitted):
    """A Robin condition's coefficient ("robin.k") is learned with the equation's: the lines
    integrate the equation from the posterior's boundary values, not the condition, so the
    stage leaves such a fit unchecked (no crash on a coefficient psi does not take)."""
    robin = pk.Condition([[1.0, t] for t in np.linspace(0, 0.5, 6)],
                         pk.Equation(lambda f, x, k: f.d("x") + k * f, inputs=("x", "t"),
                                     k=pk.Parameter(0.5)), name="robin")
    model = pk.PhysicsConditionedGP(fitted.X, fitted.y, pk.Equation(heat, inputs=("x", "t"),
                                                                    k=0.2),
                                    input_names=("x", "t"), domain=pk.Box(x=(0, 1), t=(0, 0.5)),
                                    conditions=[robin])
    assert "robin.k" in model._learned()
    lines_stage(model)
    assert model.lines is None
    lines_stage(fitted)
    assert fitted.lines is not None                     # the plain heat fit is checked
