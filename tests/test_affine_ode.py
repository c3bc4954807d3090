"""An affine autonomous ODE solved by the matrix exponential: against closed forms and
scipy's stiff solver, its gradient against finite differences, and the affine test against
laws that are not (a product of states, a forcing in time)."""

import math

import numpy as np
import torch

import pyro_pidkl as pk
from pyro_pidkl.physics.affine_ode import integrate_affine, is_affine

D = torch.float64


def oral(f, x, ka, ke, cl):
    A, C = f["A"], f["C"]
    return (A.d("t") + ka * A, C.d("t") - ka * ke / cl * A + ke * C)


def three_compartments(f, x, ka, k10, k12, k21, V):
    A, C, P = f["A"], f["C"], f["P"]
    return (A.d("t") + ka * A, C.d("t") - ka * A / V + (k10 + k12) * C - k21 * P,
            P.d("t") - k12 * C + k21 * P)


def oral_ode():
    return pk.physics.explicit_ode(pk.EquationSystem(
        oral, outputs=("A", "C"), inputs=("t",), ka=1.5,
                                             ke=0.1, cl=0.04))


def test_one_compartment_is_its_closed_form_at_every_time_and_at_each_datum():
    ode = oral_ode()
    assert is_affine(ode)
    ka, ke, cl = (torch.tensor(v, dtype=D) for v in ([1.5, 0.7, 3.0], [0.1, 0.2, 0.09],
                                                      [0.04, 0.05, 0.03]))
    x0 = torch.tensor([[4.0, 0.0], [3.0, 0.0], [5.0, 1.0]], dtype=D)
    t = np.array([0.0, 0.25, 1.0, 3.7, 12.0, 24.0])
    X = integrate_affine(ode, x0, t, {"ka": ka, "ke": ke, "cl": cl})
    tt = torch.as_tensor(t)
    a = x0[:, :1] * torch.exp(-ka[:, None] * tt)
    c = (x0[:, :1] * ka[:, None] * ke[:, None] / (cl[:, None] * (ka - ke)[:, None])
         * (torch.exp(-ke[:, None] * tt) - torch.exp(-ka[:, None] * tt))
         + x0[:, 1:] * torch.exp(-ke[:, None] * tt))
    assert torch.allclose(X[:, 0], a, rtol=1e-12, atol=1e-14)
    assert torch.allclose(X[:, 1], c, rtol=1e-11, atol=1e-13)
    rows = np.array([2, 0, 0, 1])
    times = np.array([3.7, 0.25, 24.0, 12.0])
    pairs = integrate_affine(ode, x0, times, {"ka": ka, "ke": ke, "cl": cl}, rows=rows)
    assert torch.allclose(pairs, X[rows, :, [3, 1, 5, 4]], rtol=1e-13)


def test_a_stiff_three_compartment_system_is_scipys_stiff_solution():
    system = pk.EquationSystem(three_compartments, outputs=("A", "C", "P"), inputs=("t",),
                               ka=1.2, k10=0.3, k12=40.0, k21=25.0, V=2.0)
    ode = pk.physics.explicit_ode(system)
    assert is_affine(ode)
    x0 = torch.tensor([[10.0, 0.0, 0.0]], dtype=D)
    t = np.array([0.1, 0.5, 2.0, 6.0])
    X = integrate_affine(ode, x0, t).detach()
    R = ode.integrate(0.0, x0, t, rtol=1e-11, atol=1e-13, max_evaluations=100000)  # LSODA
    assert np.allclose(X.numpy(), R, rtol=1e-7, atol=1e-9)


def test_the_gradient_in_the_coefficients_and_the_start_is_the_finite_difference():
    ode = oral_ode()
    t = np.array([0.5, 2.0, 9.0])

    def f(ka, ke, cl, x0):
        return integrate_affine(ode, x0, t, {"ka": ka, "ke": ke, "cl": cl})
    args = tuple(torch.tensor(v, dtype=D, requires_grad=True)
                 for v in ([1.3, 0.4], [0.11, 0.3], [0.05, 0.02], [[4.0, 0.5], [2.0, 0.0]]))
    assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-6, rtol=1e-5)


def test_laws_that_are_not_affine_and_autonomous_are_said_so():
    def logistic(f, x, r, K):
        return (f["f"].d("t") - r * f["f"] * (1 - f["f"] / K),)

    def forced(f, x, k):
        return (f["f"].d("t") + k * f["f"] - torch.sin(x["t"]),)

    def predator_prey(f, x, a, b):
        u, v = f["u"], f["v"]
        return (u.d("t") - a * u + b * u * v, v.d("t") + a * v - b * u * v)

    def oscillator(f, x, k, c):
        return (f["u"].d("t") - f["v"], f["v"].d("t") + k * f["u"] + c * f["v"] - 1.0)
    assert not is_affine(pk.physics.explicit_ode(pk.EquationSystem(logistic, outputs=("f",),
                                                           inputs=("t",), r=1.0, K=2.0)))
    assert not is_affine(pk.physics.explicit_ode(pk.EquationSystem(forced, outputs=("f",),
                                                           inputs=("t",), k=1.0)))
    assert not is_affine(pk.physics.explicit_ode(pk.EquationSystem(
        predator_prey, outputs=("u", "v"),
                                                           inputs=("t",), a=1.0, b=0.5)))
    osc = pk.physics.explicit_ode(pk.EquationSystem(oscillator, outputs=("u", "v"), inputs=("t",),
                                            k=4.0, c=0.3))
    assert is_affine(osc)
    X = integrate_affine(osc, torch.tensor([[1.0, 0.0]], dtype=D), np.array([1.0, 3.0]))
    w = math.sqrt(4.0 - 0.3 ** 2 / 4)                 # u - 1/4 is a damped cosine
    u = [0.25 + 0.75 * math.exp(-0.15 * s) * (math.cos(w * s) + 0.15 / w * math.sin(w * s))
         for s in (1.0, 3.0)]
    assert np.allclose(X[0, 0].detach().numpy(), u, rtol=1e-12)


def test_every_integrator_of_an_affine_ode_is_exact_and_of_one_equation_too():
    """The adaptive integrator takes the exact path on an affine autonomous ODE (a system's
    and a second-order equation's: the README's oscillator), batched coefficients and a
    start time included; a nonlinear ODE keeps LSODA, to its tolerance of the closed form.
    (The search's fixed-step Runge-Kutta stays: its instability at rates far past the
    design is what keeps the search out of a degenerate infinitely fast decay.)"""
    def oscillator(f, x, k, c):
        return (f["u"].d("t") - f["v"], f["v"].d("t") + k * f["u"] + c * f["v"] - 1.0)
    osc = pk.physics.explicit_ode(pk.EquationSystem(oscillator, outputs=("u", "v"), inputs=("t",),
                                            k=4.0, c=0.3))
    k = torch.tensor([4.0, 9.0], dtype=D)
    c = torch.tensor([0.3, 0.3], dtype=D)

    def u(s, kk):
        w = math.sqrt(kk - 0.3 ** 2 / 4)
        a = 1 - 1 / kk
        return 1 / kk + a * math.exp(-0.15 * s) * (math.cos(w * s) + 0.15 / w * math.sin(w * s))
    t = np.array([0.5, 1.7, 3.0])
    want = np.array([[u(s, kk) for s in t] for kk in (4.0, 9.0)])
    x0 = torch.tensor([[1.0, 0.0]] * 2, dtype=D)
    values = {"k": k, "c": c}
    adaptive = osc.integrate(0.25, x0, t + 0.25, values)     # from t0 = 0.25
    assert np.allclose(adaptive[:, 0], want, rtol=1e-12, atol=1e-13)
    assert osc.affine and not osc.homogeneous

    def damped(f, x, omega, zeta):                    # one equation of order two
        return f.d("t", "t") + 2 * zeta * omega * f.d("t") + omega ** 2 * f
    one = pk.physics.scalar_ode.equation_ode(
        pk.physics.Equation(damped, inputs=("t",), omega=2.0, zeta=0.1), ("t",))
    assert one.affine and one.homogeneous           # x'' = -4x - 0.4x'
    X = one.integrate(0.0, torch.tensor([[1.0, 0.0]], dtype=D), t)
    w = 2 * math.sqrt(1 - 0.1 ** 2)
    damped_cos = np.exp(-0.2 * t) * (np.cos(w * t) + 0.2 / w * np.sin(w * t))
    assert np.allclose(X[0, 0], damped_cos, rtol=1e-12, atol=1e-13)

    def logistic(f, x, r, K):
        return (f["f"].d("t") - r * f["f"] * (1 - f["f"] / K),)
    growth = pk.physics.explicit_ode(pk.EquationSystem(logistic, outputs=("f",), inputs=("t",),
                                               r=1.0, K=2.0))
    X = growth.integrate(0.0, torch.tensor([[0.5]], dtype=D), t, rtol=1e-10, atol=1e-12)
    closed = 2.0 / (1 + 3 * np.exp(-t))
    assert not growth.affine and np.allclose(X[0, 0], closed, rtol=1e-8)


def test_the_search_steps_of_an_affine_ode_are_its_runge_kutta_steps_as_a_linear_map():
    """integrate_uniform on an affine ODE steps x -> R(hM) x + h S(hM) b: the classical
    Runge-Kutta steps of F itself (to rounding), batched coefficients and offsets included,
    a trajectory that overflows nan and the others unaffected."""
    def forced(f, x, k, c):
        return (f["u"].d("t") - f["v"], f["v"].d("t") + k * f["u"] + c * f["v"] - 0.3)
    ode = pk.physics.explicit_ode(pk.EquationSystem(forced, outputs=("u", "v"),
                                                    inputs=("t",), k=4.0, c=0.4))
    g = torch.Generator().manual_seed(0)
    x0 = torch.randn(6, 2, generator=g, dtype=D)
    values = {"k": torch.rand(6, generator=g, dtype=D) * 5,
              "c": torch.rand(6, generator=g, dtype=D) - 0.2}
    values["k"][5] = -1e200                              # a row that overflows
    t = np.linspace(0.0, 3.0, 17)[::-1]                  # any order
    assert ode.affine
    linear = ode.integrate_uniform(x0, t, values, steps=12)
    ode._affine = False                                  # the generic steps through psi
    generic = ode.integrate_uniform(x0, t, values, steps=12)
    assert torch.isnan(linear[5]).any() and torch.isnan(generic[5]).any()
    assert torch.allclose(linear[:5], generic[:5], rtol=1e-12, atol=1e-13)
