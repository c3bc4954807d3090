"""The equation problems: each closed-form solution satisfies its equation (residual by
autograd at random points), and the splits keep training and test regions apart."""

import pytest
import torch

from pyro_pidkl.datasets import PROBLEMS, problem

D = torch.float64


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_solution_satisfies_its_equation(name):
    p = PROBLEMS[name]
    eq = p.equation(start=1.0)                      # every coefficient at the truth
    g = torch.Generator().manual_seed(0)
    low = torch.tensor([lo for lo, _ in p.domain.values()], dtype=D)
    high = torch.tensor([hi for _, hi in p.domain.values()], dtype=D)
    Z = low + (high - low) * torch.rand(50, len(p.domain), generator=g, dtype=D)
    h = eq.residual(p.solution, Z, p.input_names).detach()
    if p.source == "gp":                            # psi[f] = g, g unknown to the model
        h = h - p.source_fn(Z)
    scale = float(p.solution(p.grid_points()).abs().max())
    assert float(h.abs().max()) < 1e-8 * max(scale, 1.0), name


def test_splits():
    p = problem("heat")
    data = p.sample("extrapolation", seed=0)
    assert data.X_train[:, 1].max() <= 0.4 + 1e-12 and data.X_test[:, 1].min() > 0.4
    assert data.X_train.shape == (100, 2) and data.f_test.shape == data.y_test.shape
    again = p.sample("extrapolation", seed=0)
    assert (again.y_train == data.y_train).all()
    interp = p.sample("interpolation", seed=0)
    assert interp.X_train[:, 1].max() > 0.5
    with pytest.raises(ValueError, match="split"):
        p.sample("middle")
    with pytest.raises(ValueError, match="Unknown problem"):
        problem("kdv")
