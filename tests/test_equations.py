import math

import pytest
import torch
from pyro.distributions import constraints

from pyro_pidkl import physics
from pyro_pidkl.physics import Equation, Parameter

PI = math.pi


def _points(m, d, seed=0):
    return torch.rand(m, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _max_abs(h):
    return float(h.detach().abs().max())


def test_first_order_ode_on_exponential_paths():
    B, D = 1.7, 0.6
    eq = physics.first_order_ode(B=B, D=D)
    Z = _points(20, 1)

    def f(p):  # general solution of f' + B f = D
        return D / B + 0.3 * torch.exp(-B * p[:, 0])
    assert _max_abs(eq.residual(f, Z)) < 1e-12
    # with the wrong rate the residual is (B' - B) * 0.3 exp(-B t): clearly non-zero
    assert _max_abs(eq.residual(f, Z, B=1.0)) > 0.1


def test_heat_1d_on_separable_solution():
    a = 0.37
    eq = physics.heat_1d(alpha=a)
    Z = _points(30, 2)

    def f(p):
        x, t = p[:, 0], p[:, 1]
        return torch.exp(-PI ** 2 * a * t) * torch.sin(PI * x)
    assert _max_abs(eq.residual(f, Z)) < 1e-12
    assert _max_abs(eq.residual(f, Z, alpha=2 * a)) > 0.1


def test_poisson_2d_on_harmonic_and_known_source():
    eq = physics.poisson_2d()
    Z = _points(25, 2)
    assert _max_abs(eq.residual(lambda p: p[:, 0] ** 2 - p[:, 1] ** 2, Z)) < 1e-12
    h = eq.residual(lambda p: torch.sin(p[:, 0]) * torch.sin(2 * p[:, 1]), Z)
    expected = -5 * torch.sin(Z[:, 0]) * torch.sin(2 * Z[:, 1])
    torch.testing.assert_close(h, expected)


def test_diffusion_2d_on_separable_solution():
    a = 0.05
    eq = physics.diffusion_2d(alpha=a)
    Z = _points(25, 3)

    def f(p):
        x, y, t = p.unbind(-1)
        return torch.exp(-2 * PI ** 2 * a * t) * torch.sin(PI * x) * torch.sin(PI * y)
    assert _max_abs(eq.residual(f, Z)) < 1e-12


def test_burgers_on_viscous_shock():
    nu = 0.07
    eq = physics.burgers_1d(nu=nu)
    Z = _points(40, 2) * 2 - 1

    def f(p):  # travelling wave u = 1/2 - 1/2 tanh((x - t/2) / (4 nu))
        x, t = p[:, 0], p[:, 1]
        return 0.5 - 0.5 * torch.tanh((x - 0.5 * t) / (4 * nu))
    assert _max_abs(eq.residual(f, Z)) < 1e-10
    assert _max_abs(eq.residual(f, Z, nu=2 * nu)) > 0.1


def test_covariates_are_not_differentiated():
    eq = physics.poisson_2d(x="x", y="y")
    Z = _points(10, 4)  # (x, y, Ni, Zn): the last two are covariates
    names = ("x", "y", "Ni", "Zn")
    h = eq.residual(lambda p: p[:, 0] ** 2 + p[:, 2] ** 3 * p[:, 3], Z, names)
    torch.testing.assert_close(h, torch.full((10,), 2.0, dtype=torch.float64))


def test_user_equation_with_parameters_and_nonlinear_terms():
    def allen_cahn(f, x, eps):
        return f.d("t") - eps * f.d("x", "x") + f ** 3 - f + 0 * x["t"]
    eq = Equation(allen_cahn, inputs=("x", "t"), eps=Parameter(0.01))
    assert eq.parameter_names == ("eps",)
    assert eq.eps.item() == pytest.approx(0.01)
    Z = _points(8, 2)

    def f(p):
        return torch.tanh(p[:, 0]) * torch.exp(-p[:, 1])
    x, t = Z[:, 0], Z[:, 1]
    u = torch.tanh(x) * torch.exp(-t)
    u_xx = -2 * torch.tanh(x) * (1 - torch.tanh(x) ** 2) * torch.exp(-t)
    torch.testing.assert_close(eq.residual(f, Z), -u - 0.01 * u_xx + u ** 3 - u)


def test_torch_functions_of_the_field():
    eq = Equation(lambda f, x: torch.sin(f) + f.d("t") * torch.exp(f), inputs=("t",))
    Z = _points(5, 1)
    h = eq.residual(lambda p: 2 * p[:, 0], Z)
    torch.testing.assert_close(h, torch.sin(2 * Z[:, 0]) + 2 * torch.exp(2 * Z[:, 0]))


def test_parameter_specs():
    fixed = Parameter(0.0, fixed=True)
    eq = physics.first_order_ode(B=2.0, D=fixed)
    assert "D" in dict(eq.named_buffers())
    assert eq.D.item() == 0.0
    assert isinstance(eq.B, torch.Tensor) and eq.B.item() == pytest.approx(2.0)
    with pytest.raises(ValueError, match="violates the constraint"):
        Parameter(-1.0)
    Parameter(-1.0, constraint=constraints.real)
    with pytest.raises(ValueError, match="finite"):
        Parameter(float("nan"))


def test_bad_equation_definitions_are_named():
    with pytest.raises(TypeError, match="unknown: \\('C',\\)"):
        Equation(lambda f, x, B: f, inputs=("t",), B=1.0, C=2.0)
    with pytest.raises(TypeError, match="missing: \\('B',\\)"):
        Equation(lambda f, x, B: f, inputs=("t",))
    with pytest.raises(TypeError, match="callable"):
        Equation("f_t", inputs=("t",))
    eq = physics.heat_1d()
    with pytest.raises(ValueError, match="unknown: \\('x',\\)"):
        eq.check_inputs(("s", "t"))


def test_a_parameters_constraint_by_name_or_refused_in_one_line():
    import pytest
    from torch.distributions import constraints

    from pyro_pidkl.physics import Parameter
    assert Parameter(1.0, "positive").constraint is constraints.positive
    assert Parameter(0.3, "unit_interval").constraint is constraints.unit_interval
    assert Parameter(-2.0, "real").constraint is constraints.real
    with pytest.raises(ValueError, match="violates the constraint"):
        Parameter(-1.0, "positive")
    with pytest.raises(ValueError, match="Expected a constraint named one of") as e:
        Parameter(1.0, "postive")
    assert "\n" not in str(e.value)
    with pytest.raises(TypeError, match="Expected a torch.distributions constraint"):
        Parameter(1.0, 3)
