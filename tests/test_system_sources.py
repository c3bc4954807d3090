"""Sources of a system's equations (pyro_pidkl/models/system/sources.py): a known source is
subtracted from its equation's virtual observations, an unknown one adds its GP covariance
to that equation's block; and on a system whose first equation has a forcing nobody knows,
the unknown source keeps the second equation's rate right where a zero source biases it."""

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

import pyro_pidkl as pk
from pyro_pidkl.physics import EquationSystem

D = torch.float64
A, B = 0.5, 0.8


def psi(f, x, a, b):
    return (f["u"].d("t") + a * f["u"], f["v"].d("t") - f["u"] + b * f["v"])


def forcing(x):
    return torch.sin(x["t"]) + 1.0


def _data(n=40):
    sol = solve_ivp(lambda t, s: [-A * s[0] + np.sin(t) + 1.0, s[0] - B * s[1]], (0, 8),
                    [0.5, 0.0], t_eval=np.linspace(0, 8, n), rtol=1e-10, atol=1e-12)
    rng = np.random.default_rng(0)
    t = torch.as_tensor(sol.t)
    return {"u": (t, torch.as_tensor(sol.y[0] + 0.01 * rng.standard_normal(n))),
            "v": (t, torch.as_tensor(sol.y[1] + 0.01 * rng.standard_normal(n)))}


def _system():
    return EquationSystem(psi, outputs=("u", "v"), inputs=("t",), a=1.0, b=1.0)


def test_a_known_source_is_subtracted_and_an_unknown_one_adds_its_covariance():
    data = _data(12)
    plain = pk.ConditionedSystemGP(_system(), data, collocation=20)
    model = pk.ConditionedSystemGP(_system(), data, collocation=20,
                                   sources={0: pk.GPSource(variance=0.3),
                                            1: pk.KnownSource(forcing)})
    assert plain.ode is not None and model.ode is None        # no longer the exact ODE
    M = 20
    with torch.no_grad():
        w, b = model.linearise(model.f0)
        j0, j1 = plain.joint(w, b, closed_form=False), model.joint(w, b, closed_form=False)
    g = forcing({"t": model.Z[:, 0]})
    assert torch.allclose(j1.obs[M:2 * M], j0.obs[M:2 * M] + g)       # v_1 = g - b
    assert torch.allclose(j1.obs[:M], j0.obs[:M])
    # the difference of the two covariances is the source's, on equation 0's block alone
    K0, K1 = _covariance(plain, w, b), _covariance(model, w, b)
    diff = K1 - K0
    prior_var = (K0.diagonal()[:2 * M] / (1 + float(model.residual_noise)))
    expected = prior_var[:M].mean() * model.source_kernels[0](model.Z_s)
    assert torch.allclose(diff[:M, :M], expected, rtol=1e-8, atol=1e-12)
    assert float(diff[M:, :].abs().max()) == 0.0 and float(diff[:, M:].abs().max()) == 0.0


def _covariance(model, w, b):
    """The joint's covariance ``A`` (built with gradients on, so that it is kept)."""
    w = {k: v for k, v in w.items()}
    return model.joint(w, b.requires_grad_()).A.detach()


def test_sources_are_checked_in_one_line():
    data = _data(12)
    for bad, message in [({2: pk.GPSource()}, "equation index 0..1"),
                         ({0: "unknown"}, "Expected source to be"),
                         ({0: pk.KnownSource(lambda x: torch.ones(3))}, "at the")]:
        with pytest.raises(ValueError, match=message) as e:
            pk.ConditionedSystemGP(_system(), data, collocation=20, sources=bad)
        assert "\n" not in str(e.value)


@pytest.mark.slow
def test_an_unknown_forcing_leaves_the_other_equations_rate_right():
    """u' = -a u + g(t), v' = u - b v, both measured, g = sin t + 1 unknown: with a zero
    source the fit biases b (and warns that the system misses the data); with an unknown
    GP source on the first equation, b is right with a narrow interval and a is left
    unidentified (the source absorbs it); with the forcing known, both are right."""
    data = _data()
    zero = pk.ConditionedSystemGP(_system(), data)
    with pytest.warns(pk.ModelMisfitWarning):
        pk.fit(zero, progress=False)
    gp = pk.ConditionedSystemGP(_system(), data, sources={0: pk.GPSource()})
    pk.fit(gp, progress=False)
    with pytest.warns(UserWarning, match="leave a free"):      # a: the source absorbs it
        ig = gp.coefficient_intervals(0.9)
    known = pk.ConditionedSystemGP(_system(), data, sources={0: pk.KnownSource(forcing)})
    pk.fit(known, progress=False)
    iz, ik = zero.coefficient_intervals(0.9), known.coefficient_intervals(0.9)
    assert abs(iz["b"]["value"] - B) > 0.05                   # biased by the missing forcing
    assert ig["b"]["lower"] < B < ig["b"]["upper"] and abs(ig["b"]["value"] - B) < 0.01
    assert not ig["a"]["identified"]
    for k, truth in (("a", A), ("b", B)):
        assert ik[k]["lower"] < truth < ik[k]["upper"] and ik[k]["identified"]
