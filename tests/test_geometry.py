"""Domains that are not boxes: membership, interior and boundary points, outward normals,
and the conditioned GP solving Poisson's equation on them."""

import math

import pytest
import torch

import pyro_pidkl as pk
from pyro_pidkl.physics import Difference, Disk, Equation, Polygon, Rectangle, TimeProduct

D = torch.float64
L_SHAPE = Polygon([(0, 0), (1, 0), (1, 1), (-1, 1), (-1, -1), (0, -1)])
SHAPES = {"L-shape": (L_SHAPE, 3.0),
          "disk": (Disk((0.0, 0.0), 1.0), math.pi),
          "plate with a hole": (Difference(Rectangle(x=(0, 1), y=(0, 1)), Disk((0.5, 0.5), 0.2)),
                                1 - math.pi * 0.04)}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_points_inside_on_and_normals_outward(name):
    shape, area = SHAPES[name]
    low, high = shape.bounds()
    box_area = (high[0] - low[0]) * (high[1] - low[1])
    U = torch.rand(20000, 2, dtype=D, generator=torch.Generator().manual_seed(0))
    U = torch.tensor(low, dtype=D) + torch.tensor([high[0] - low[0], high[1] - low[1]], dtype=D) * U
    assert float(shape.contains(U).double().mean()) * box_area == pytest.approx(area, rel=0.03)
    Z = shape.interior(300, seed=1)
    assert Z.shape == (300, 2) and bool(shape.contains(Z).all())
    B, N = shape.boundary(200, seed=2, normals=True)
    assert B.shape == (200, 2) and torch.allclose(N.norm(dim=1), torch.ones(200, dtype=D))
    assert bool(shape.contains(B).all())
    eps = 1e-6
    assert not bool(shape.contains(B + eps * N).any())           # a step out leaves it
    assert bool(shape.contains(B - eps * N).all())               # a step in stays


def test_a_time_product_has_a_lateral_boundary_and_initial_points():
    domain = TimeProduct(Disk((0.0, 0.0), 1.0), t=(0.0, 2.0))
    assert domain.inputs == ("x", "y", "t")
    B, N = domain.boundary(50, normals=True)
    assert torch.allclose(B[:, :2].norm(dim=1), torch.ones(50, dtype=D))
    assert bool((B[:, 2] >= 0).all() and (B[:, 2] <= 2).all()) and bool((N[:, 2] == 0).all())
    P0 = domain.initial(20)
    assert bool((P0[:, 2] == 0).all()) and bool(domain.contains(P0).all())


def _poisson(shape, M):
    u = lambda X: torch.sin(2 * X[:, 0]) * torch.exp(X[:, 1]) + X[:, 0] * X[:, 1] ** 2
    s = lambda x: (3 * torch.sin(2 * x["x"]) * torch.exp(x["y"]) - 2 * x["x"])   # -lap u
    eq = Equation(lambda f, x: -f.laplacian("x", "y"), inputs=("x", "y"))
    B = shape.boundary(max(40, int(4 * M ** 0.5)), seed=1)
    model = pk.PhysicsConditionedGP(B, u(B), eq, input_names=("x", "y"), domain=shape,
                                    source=s, collocation=M)
    pk.fit(model, progress=False)
    test = shape.interior(1000, seed=7)
    return float((model(test)[0] - u(test)).norm() / u(test).norm())


@pytest.mark.parametrize("name", ["L-shape", "disk"])
def test_poisson_solved_on_a_shape_to_1e_4_and_better_with_more_points(name):
    shape, _ = SHAPES[name]
    coarse, fine = _poisson(shape, 100), _poisson(shape, 400)
    assert fine < 1e-4 and fine < coarse, (coarse, fine)


def test_shapes_refuse_what_they_cannot_be():
    with pytest.raises(ValueError, match="three 2-D vertices"):
        Polygon([(0, 0), (1, 1)])
    with pytest.raises(ValueError, match="radius > 0"):
        Disk((0, 0), 0.0)
    with pytest.raises(ValueError, match="same inputs"):
        Difference(Disk((0, 0), 1.0), Disk((0, 0), 0.5, inputs=("u", "v")))
    eq = Equation(lambda f, x: -f.laplacian("x", "y"), inputs=("x", "y"))
    B = Disk((0, 0), 1.0, inputs=("y", "x")).boundary(20)
    with pytest.raises(ValueError, match="domain's inputs"):
        pk.PhysicsConditionedGP(B, B[:, 0], eq, input_names=("x", "y"),
                                domain=Disk((0, 0), 1.0, inputs=("y", "x")))
