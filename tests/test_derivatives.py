import math

import pytest
import torch
from torch import nn

from pyro_pidkl import physics
from pyro_pidkl.gp import GPPosterior
from pyro_pidkl.kernels import MLP
from pyro_pidkl.kernels import deep_kernel
from pyro_pidkl.kernels.features import smoothness_order
from pyro_pidkl.physics import Field, Inputs

NAMES = ("x", "t")


def _field(fn, Z, **kw):
    points = Z.detach().requires_grad_(True)
    return Field(fn(points), points, NAMES, **kw)


def test_field_derivatives_match_closed_forms():
    Z = torch.rand(9, 2, dtype=torch.float64)
    f = _field(lambda p: torch.sin(2 * p[:, 0]) * torch.exp(-p[:, 1]), Z)
    x, t = Z[:, 0], Z[:, 1]
    torch.testing.assert_close(f.d("x"), 2 * torch.cos(2 * x) * torch.exp(-t))
    torch.testing.assert_close(f.d("t"), -torch.sin(2 * x) * torch.exp(-t))
    torch.testing.assert_close(f.d("x", "x"), -4 * torch.sin(2 * x) * torch.exp(-t))
    torch.testing.assert_close(f.d("t", "t"), torch.sin(2 * x) * torch.exp(-t))
    torch.testing.assert_close(f.d("x", "t"), -2 * torch.cos(2 * x) * torch.exp(-t))
    torch.testing.assert_close(f.d("t", "x"), f.d("x", "t"))
    torch.testing.assert_close(f.laplacian("x", "t"), -3 * torch.sin(2 * x) * torch.exp(-t))
    torch.testing.assert_close(f.d("x", "x", "x"), -8 * torch.cos(2 * x) * torch.exp(-t))


def test_field_acts_like_its_values():
    Z = torch.rand(4, 2, dtype=torch.float64)
    f = _field(lambda p: p[:, 0] ** 2, Z)
    v = Z[:, 0] ** 2
    torch.testing.assert_close(torch.sin(f), torch.sin(v))
    torch.testing.assert_close(2.0 * f - 1, 2 * v - 1)
    torch.testing.assert_close(f * f.d("x"), v * 2 * Z[:, 0])
    torch.testing.assert_close(torch.tensor(3.0, dtype=torch.float64) * f, 3 * v)
    torch.testing.assert_close(f ** 2 / (1 + f), v ** 2 / (1 + v))
    torch.testing.assert_close(-f, -v)


def test_field_errors_name_what_was_expected():
    Z = torch.rand(3, 2, dtype=torch.float64)
    f = _field(lambda p: p.sum(-1), Z, allowed=("x",))
    with pytest.raises(ValueError, match="Unknown input name 'y'.*\\('x', 't'\\)"):
        f.d("y")
    with pytest.raises(ValueError, match="not among its declared inputs"):
        f.d("t")
    g = _field(lambda p: p.sum(-1), Z, max_order=1, why=" (ReLU)")
    with pytest.raises(ValueError, match="order 2.*ReLU"):
        g.d("x", "x")
    with pytest.raises(KeyError, match="Unknown input name 'z'"):
        Inputs(Z, NAMES)["z"]


def test_derivatives_are_differentiable_for_training():
    a = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    Z = torch.rand(5, 2, dtype=torch.float64)
    f = _field(lambda p: torch.sin(a * p[:, 0]), Z)
    (g,) = torch.autograd.grad(f.d("x", "x").sum(), a)
    x = Z[:, 0]
    # d/da of -a^2 sin(a x) = -2a sin(ax) - a^2 x cos(ax)
    expected = (-2 * a * torch.sin(a * x) - a ** 2 * x * torch.cos(a * x)).sum()
    torch.testing.assert_close(g, expected.detach())


def _posterior(seed=0):
    torch.manual_seed(seed)
    X = torch.rand(15, 2, dtype=torch.float64) * 2 - 1
    y = torch.sin(2 * X[:, 0]) * torch.cos(X[:, 1])
    net = MLP(2, 6, width=10, depth=2)
    kernel = deep_kernel(net, 6, variance=1.2, lengthscale=1.5)
    return GPPosterior(X, y, kernel, torch.tensor(1e-2, dtype=torch.float64))


def _fd(fn, Z, i, j=None, h=1e-4):
    """Central finite differences of fn ((m, d) -> (m,)) in columns i (and j)."""
    e = torch.zeros_like(Z)
    e[:, i] = h
    if j is None:
        return (fn(Z + e) - fn(Z - e)) / (2 * h)
    ej = torch.zeros_like(Z)
    ej[:, j] = h
    return (fn(Z + e + ej) - fn(Z + e - ej) - fn(Z - e + ej) + fn(Z - e - ej)) / (4 * h * h)


@pytest.mark.parametrize("which", ["mean", "std"])
def test_posterior_input_derivatives_match_finite_differences(which):
    post = _posterior()
    k = 0 if which == "mean" else 1

    def fn(Z):
        return post.mean_var(Z)[0] if k == 0 else post.mean_var(Z)[1].sqrt()
    Z = torch.rand(6, 2, dtype=torch.float64) * 1.6 - 0.8
    f = _field(fn, Z)
    with torch.no_grad():
        for i, a in enumerate(NAMES):
            torch.testing.assert_close(f.d(a), _fd(fn, Z, i), rtol=1e-6, atol=1e-7)
            for j, b in enumerate(NAMES):
                torch.testing.assert_close(f.d(a, b), _fd(fn, Z, i, j, h=1e-3),
                                           rtol=1e-4, atol=1e-5)


def test_smoothness_order_flags_relu_like_maps():
    assert smoothness_order(MLP(2)) == math.inf
    assert smoothness_order(MLP(2, activation=nn.ReLU)) == 1
    assert smoothness_order(MLP(2, activation=nn.ELU)) == 1
    assert smoothness_order(nn.Sequential(nn.Linear(2, 3), nn.SiLU())) == math.inf


def test_equation_residual_checks_its_arguments():
    eq = physics.heat_1d(alpha=0.5)
    Z = torch.rand(4, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"shape \(m, 2\)"):
        eq.residual(lambda p: p.sum(-1), Z[:, :1], NAMES)
    with pytest.raises(ValueError, match="Unknown parameter"):
        eq.residual(lambda p: p.sum(-1), Z, NAMES, beta=1.0)
    with pytest.raises(ValueError, match=r"return shape \(4,\)"):
        eq.residual(lambda p: p, Z, NAMES)
