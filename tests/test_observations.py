"""Observations split by output and each output's location and size: one rule that every
model taking a system's data reads them by (the conditioned system GP, PI-DKL on a system,
the state-space solver)."""

import math

import numpy as np
import pytest
import torch

import pyro_pidkl as pk
from pyro_pidkl.physics.observations import output_scales, split_by_output, typical_size

DT = torch.float64


def test_typical_size_is_the_spread_or_for_flat_data_the_magnitude():
    assert typical_size(torch.tensor([1.0, 3.0], dtype=DT)) == pytest.approx(1.0)
    assert typical_size(torch.tensor([2.0, 2.0, 2.0], dtype=DT)) == 2.0    # no spread
    assert typical_size(torch.tensor([0.1], dtype=DT)) == 1.0             # at least 1
    assert typical_size(torch.zeros(0, dtype=DT)) == 1.0


def test_output_scales_take_the_users_then_the_datas_then_unit():
    ys = [torch.tensor([1.0, 3.0], dtype=DT), torch.zeros(0, dtype=DT),
          torch.tensor([5.0, 9.0], dtype=DT)]
    locs, sizes = output_scales(ys, ("a", "b", "c"), {"c": 4.0})
    assert locs == [2.0, 0.0, 7.0] and sizes == [1.0, 1.0, 4.0]
    locs, sizes = output_scales(ys, ("a", "b", "c"), {"b": (10.0, 3.0)})
    assert locs[1] == 10.0 and sizes[1] == 3.0
    for bad in ({"b": (1.0, 0.0)}, {"b": "big"}, {"b": (1.0, 2.0, 3.0)}, {"b": -1.0}):
        with pytest.raises(ValueError, match=r"Expected scales\['b'\] = size > 0"):
            output_scales(ys, ("a", "b", "c"), bad)
    with pytest.raises(ValueError, match="outputs among"):
        output_scales(ys, ("a", "b", "c"), {"d": 1.0})


def test_long_and_wide_data_split_the_same():
    t = torch.linspace(0, 1, 5, dtype=DT)
    Y = torch.stack([t, torch.full_like(t, math.nan)], 1)
    Y[::2, 1] = 2.0
    wide, names = split_by_output((t, Y), ("x", "v"), ("t",))
    long, _ = split_by_output({"x": (t, Y[:, 0]), "v": (t[::2], Y[::2, 1])}, ("x", "v"), ("t",))
    assert names == ("t",)
    for (Xw, yw), (Xl, yl) in zip(wide, long):
        assert torch.equal(Xw, Xl) and torch.equal(yw, yl)


def _spring():
    def spring(f, x, k, c):
        return (f["x"].d("t") - f["v"], f["v"].d("t") + k * f["x"] + c * f["v"])
    return pk.EquationSystem(spring, outputs=("x", "v"), inputs=("t",), k=1.0, c=1.0)


def test_the_models_read_a_systems_data_and_sizes_alike():
    t = torch.linspace(0, 6, 20, dtype=DT)
    x = torch.exp(-0.2 * t) * torch.cos(2 * t)
    data = {"x": (t, x)}
    dense = pk.ConditionedSystemGP(_spring(), data)
    ss = pk.StateSpaceGP(_spring(), data, scales={"v": (0.5, 2.0)})
    assert float(dense.y_scale[0]) == pytest.approx(float(ss.filter.scale[0]))
    assert float(ss.filter.scale[1]) == 2.0 and ss.guesses == {1: 0.5}
    wide = pk.StateSpaceGP(_spring(), (t, torch.stack([x, torch.full_like(x, math.nan)], 1)))
    assert np.array_equal(wide.observations[0][1], x.numpy())
    assert wide.filter.measured == [0]
