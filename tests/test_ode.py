"""A system as an explicit ODE, its integration against closed forms, and shooting fits that
recover known coefficients (an output nobody measured included)."""

import math

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp

import pyro_pidkl as pk
from pyro_pidkl.infer.shooting import fit_by_shooting
from pyro_pidkl.physics import EquationSystem
from pyro_pidkl.physics.ode import explicit_ode

D = torch.float64


def fitzhugh_nagumo(f, x, a, b, c):
    V, R = f["V"], f["R"]
    return (V.d("t") - c * (V - V ** 3 / 3 + R),
            R.d("t") + (V - a + b * R) / c)


def test_explicit_form_matches_the_hand_written_right_hand_side():
    system = EquationSystem(fitzhugh_nagumo, outputs=("V", "R"), inputs=("t",),
                            a=0.2, b=0.3, c=3.0)
    ode = explicit_ode(system)
    assert ode is not None
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 2, generator=g, dtype=D)
    t = torch.rand(6, generator=g, dtype=D)
    V, R = x[:, 0], x[:, 1]
    want = torch.stack([3.0 * (V - V ** 3 / 3 + R), -(V - 0.2 + 0.3 * R) / 3.0], 1)
    assert torch.allclose(ode.rhs(t, x), want, atol=1e-12)
    # a batch of coefficient values, one per state
    c = torch.linspace(1.0, 4.0, 6, dtype=D)
    got = ode.rhs(t, x, {"c": c})
    assert torch.allclose(got[:, 0], c * (V - V ** 3 / 3 + R), atol=1e-12)


def test_derivatives_mixed_by_a_constant_matrix_are_solved_for():
    # 2 u' + v' = -u,  u' - v' = v:  [2 1; 1 -1] [u'; v'] = [-u; v]
    def mixed(f, x):
        u, v = f["u"], f["v"]
        return (2 * u.d("t") + v.d("t") + u, u.d("t") - v.d("t") - v)
    ode = explicit_ode(EquationSystem(mixed, outputs=("u", "v"), inputs=("t",)))
    x = torch.tensor([[1.0, 2.0], [-0.5, 0.3]], dtype=D)
    A = torch.tensor([[2.0, 1.0], [1.0, -1.0]], dtype=D)
    want = torch.linalg.solve(A, torch.stack([-x[:, 0], x[:, 1]]))
    assert torch.allclose(ode.rhs(torch.zeros(2, dtype=D), x), want.T, atol=1e-12)


@pytest.mark.parametrize("psi, outputs, inputs", [
    (lambda f, x: (f["u"].d("t", "t") + f["u"],), ("u",), ("t",)),             # 2nd order
    (lambda f, x: (f["u"].d("t") ** 2 - f["u"],), ("u",), ("t",)),              # (u')^2
    (lambda f, x: (f["u"] * f["u"].d("t") - 1.0,), ("u",), ("t",)),             # u u'
    (lambda f, x: (f["u"].d("t") - f["u"].d("x", "x"),), ("u",), ("t", "x")),   # a PDE
    (lambda f, x: (f["u"].d("t") - f["v"], f["u"] - f["v"]), ("u", "v"), ("t",)),  # algebraic
    (lambda f, x: (f["u"].d("t") - f["v"],), ("u", "v"), ("t",)),               # too few rows
])
def test_systems_that_are_not_explicit_odes_are_recognised(psi, outputs, inputs):
    assert explicit_ode(EquationSystem(psi, outputs=outputs, inputs=inputs)) is None


def test_integration_matches_the_closed_form_for_a_batch_of_coefficients():
    def oscillator(f, x, omega):
        return (f["x"].d("t") - f["v"], f["v"].d("t") + omega ** 2 * f["x"])
    ode = explicit_ode(EquationSystem(oscillator, outputs=("x", "v"), inputs=("t",),
                                      omega=1.0))
    omega = torch.tensor([0.5, 1.0, 2.0], dtype=D)
    t = np.linspace(0.0, 6.0, 25)
    traj = ode.integrate(0.0, torch.tensor([[1.0, 0.0]] * 3, dtype=D), t,
                         {"omega": omega}, rtol=1e-9, atol=1e-11)
    want = np.cos(omega.numpy()[:, None] * t)
    assert np.abs(traj[:, 0] - want).max() < 1e-7
    # a blow-up is reported, not returned: x' = x^2 from 1 reaches infinity at t = 1
    blow = explicit_ode(EquationSystem(lambda f, x: (f["x"].d("t") - f["x"] ** 2,),
                                       outputs=("x",), inputs=("t",)))
    assert blow.integrate(0.0, torch.ones(1, 1, dtype=D), np.array([0.5, 2.0])) is None


def _lotka_volterra(f, x, alpha, beta, delta, gamma):
    X, Y = f["x"], f["y"]
    return (X.d("t") - (alpha * X - beta * X * Y), Y.d("t") - (delta * X * Y - gamma * Y))


def _sir(f, x, beta, gamma):
    s, i = f["s"], f["i"]
    return (s.d("t") + beta * s * i, i.d("t") - (beta * s * i - gamma * i))


def _observe(rhs, y0, times, sd, seed):
    sol = solve_ivp(rhs, (0.0, times[-1]), y0, t_eval=times, rtol=1e-10, atol=1e-12)
    rng = np.random.default_rng(seed)
    return sol.y, sol.y + sd * rng.standard_normal(sol.y.shape)


def _coefficients(system, start):
    t = torch.distributions.transform_to(torch.distributions.constraints.positive)
    return [(n, t, math.log(start[n])) for n in system.parameter_names]


def test_shooting_recovers_lotka_volterra_from_a_start_far_off():
    truth = dict(alpha=1.0, beta=0.5, delta=0.5, gamma=1.0)
    times = np.linspace(0.0, 10.0, 30)
    exact, noisy = _observe(lambda t, s: [s[0] - 0.5 * s[0] * s[1], 0.5 * s[0] * s[1] - s[1]],
                            [2.0, 1.0], times, 0.05, 0)
    system = EquationSystem(_lotka_volterra, outputs=("x", "y"), inputs=("t",), alpha=1.0,
                            beta=1.0, delta=1.0, gamma=1.0)
    start = dict(alpha=1.8, beta=0.3, delta=0.9, gamma=0.6)
    res = fit_by_shooting(explicit_ode(system), [(times, noisy[0]), (times, noisy[1])],
                          _coefficients(system, start), noisy[:, 0], 0.0, 10.0,
                          scale=[1.0, 1.0], sd=[0.5, 0.5])
    got = dict(zip(system.parameter_names, np.exp(res.theta)))
    for n, v in truth.items():
        assert abs(got[n] - v) / v < 0.05, (n, got[n])
    assert np.allclose(res.x0, [2.0, 1.0], atol=0.1)
    assert np.allclose(res.sd, 0.05, rtol=0.35)      # the noise, re-estimated
    assert res.improved and res.cost < res.start_cost


def test_a_jacobian_whose_batch_fails_is_taken_column_by_column(monkeypatch):
    """Where the batched integration of the Jacobian's columns fails (a perturbed column
    that blows up), each column is integrated on its own: the same Jacobian, no crash (it
    called a scipy function that does not exist)."""
    import pyro_pidkl.infer.shooting as shooting
    times = np.linspace(0.0, 10.0, 30)
    exact, noisy = _observe(lambda t, s: [s[0] - 0.5 * s[0] * s[1], 0.5 * s[0] * s[1] - s[1]],
                            [2.0, 1.0], times, 0.05, 0)
    system = EquationSystem(_lotka_volterra, outputs=("x", "y"), inputs=("t",), alpha=1.0,
                            beta=1.0, delta=1.0, gamma=1.0)
    args = ([(times, noisy[0]), (times, noisy[1])],
            _coefficients(system, dict(alpha=1.2, beta=0.4, delta=0.6, gamma=0.9)),
            noisy[:, 0], 0.0, 10.0)
    kw = dict(scale=[1.0, 1.0], sd=[0.5, 0.5], segments=1)
    whole = fit_by_shooting(explicit_ode(system), *args, **kw)
    batch = shooting._Shooting.batch
    monkeypatch.setattr(shooting._Shooting, "batch",
                        lambda self, V: None if V.shape[0] > 1 else batch(self, V))
    apart = fit_by_shooting(explicit_ode(system), *args, **kw)
    assert np.allclose(apart.theta, whole.theta, rtol=1e-5, atol=1e-7)


def test_shooting_recovers_an_output_nobody_measured():
    # SIR with only infections observed: the susceptibles' trajectory comes from the ODE
    times = np.linspace(0.0, 30.0, 25)
    exact, noisy = _observe(lambda t, s: [-0.5 * s[0] * s[1], 0.5 * s[0] * s[1] - 0.2 * s[1]],
                            [0.99, 0.01], times, 0.002, 0)
    system = EquationSystem(_sir, outputs=("s", "i"), inputs=("t",), beta=1.0, gamma=1.0)
    ode = explicit_ode(system)
    res = fit_by_shooting(ode, [(np.array([]), np.array([])), (times, noisy[1])],
                          _coefficients(system, dict(beta=1.0, gamma=0.05)), [0.5, 0.02],
                          0.0, 30.0, scale=[0.5, 0.1], sd=[1.0, 0.01])
    beta, gamma = np.exp(res.theta)
    assert abs(beta - 0.5) / 0.5 < 0.2 and abs(gamma - 0.2) / 0.2 < 0.2, (beta, gamma)
    traj = ode.integrate(0.0, torch.as_tensor(res.x0)[None], times,
                         {"beta": torch.tensor([beta]), "gamma": torch.tensor([gamma])})
    assert np.sqrt(np.mean((traj[0, 0] - exact[0]) ** 2)) < 0.1 * np.ptp(exact[0])


@pytest.mark.slow
def test_conditioned_system_recovers_an_unobserved_output_of_a_nonlinear_system():
    times = np.linspace(0.0, 30.0, 25)
    exact, noisy = _observe(lambda t, s: [-0.5 * s[0] * s[1], 0.5 * s[0] * s[1] - 0.2 * s[1]],
                            [0.99, 0.01], times, 0.005, 1)
    system = EquationSystem(_sir, outputs=("s", "i"), inputs=("t",), beta=1.0, gamma=1.0)
    t = torch.as_tensor(times, dtype=D)[:, None]
    model = pk.ConditionedSystemGP(system, {"i": (t, torch.as_tensor(noisy[1], dtype=D))},
                                   domain=pk.Box(t=(0.0, 45.0)), scales={"s": (0.5, 0.5)})
    pk.fit(model, progress=False)
    values = model.equation_parameters()
    assert abs(values["beta"] - 0.5) / 0.5 < 0.2 and abs(values["gamma"] - 0.2) / 0.2 < 0.2
    grid = torch.linspace(0.0, 45.0, 91, dtype=D)
    sol = solve_ivp(lambda t, s: [-0.5 * s[0] * s[1], 0.5 * s[0] * s[1] - 0.2 * s[1]],
                    (0.0, 45.0), [0.99, 0.01], t_eval=grid.numpy(), rtol=1e-10, atol=1e-12)
    mean, var = model(grid[:, None])
    s_err = float((mean[:, 0] - torch.as_tensor(sol.y[0])).pow(2).mean().sqrt())
    assert s_err < 0.15 * np.ptp(sol.y[0]), s_err
    i_err = float((mean[:, 1] - torch.as_tensor(sol.y[1])).pow(2).mean().sqrt())
    assert i_err < 0.01, i_err          # SKL beyond the data: 0.07 (docs/systems.md)


def test_a_second_start_from_the_same_state_reuses_the_shooting_fit():
    import copy
    from pyro_pidkl.datasets import system_problem
    p = system_problem("lotka_volterra", 0)
    model = pk.ConditionedSystemGP(p.system, p.data, domain=p.domain)
    start = copy.deepcopy(model.state_dict())
    model.match_gradients()
    first = model.match_trajectories()
    after = model.equation_parameters()
    model.load_state_dict(start)
    model.match_gradients()
    assert model.match_trajectories() is first
    assert model.equation_parameters() == after
    for n, v in p.coefficients.items():          # and the fit is a good one
        assert abs(after[n] - v) / v < 0.1, (n, after[n])
