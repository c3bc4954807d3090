r"""Systems of equations with noisy, partial observations, simulated by scipy.

Each :class:`SystemProblem` holds a system written as a user would
(:class:`~pyro_pidkl.physics.EquationSystem`, its coefficients started at a generic guess,
never at the truth), the true coefficients, its own accurate solution (scipy's
``solve_ivp`` at tolerance ``1e-10``; a PDE by the method of lines), noisy observations
(long form, by output), the domain where the system holds, and test points beyond the
data. The set-ups follow the literature where there is one:

* ``fitzhugh_nagumo``: :math:`V' = c (V - V^3/3 + R)`, :math:`R' = -(V - a + b R)/c`,
  a = b = 0.2, c = 3, from (-1, 1); 41 observations of both on [0, 20], noise sd 0.2
  (Ramsay et al. 2007; MAGI, Yang, Wong & Kou, PNAS 2021); predicted on (20, 25];
* ``hes1``: the Hes1 oscillator on the log scale (MAGI's set-up): P and M observed at
  alternating times every 7.5 min on [0, 240] (17 and 16 points), H never, log-normal
  noise 0.15; seven rate constants;
* ``lotka_volterra``: :math:`x' = \alpha x - \beta x y`, :math:`y' = \delta x y - \gamma y`
  (1, 0.5, 0.5, 1 from (2, 1)), 20 observations of both on [0, 10], noise sd 0.1; predicted
  on (10, 15];
* ``sir``: :math:`s' = -\beta s i`, :math:`i' = \beta s i - \gamma i` (0.5, 0.2 from
  s = 0.99, i = 0.01), only infections observed (25 points on [0, 30], noise sd 0.005),
  susceptibles never (known to be a fraction: ``scales`` centres their prior on 0.5 with
  size 0.5); predicted on (30, 45];
* ``reaction_diffusion``: :math:`u_t = d_u u_{xx} + u (1 - u) - u v`, :math:`v_t = d_v
  v_{xx} + u v - v / 2` on [0, 1] (no flux), d = (0.02, 0.01) learned, 60 noisy values of
  each on t <= 2, noise sd 0.02; predicted for t in (2, 3].
"""

from dataclasses import dataclass

import numpy as np
import torch

from ..physics.domain import Box
from ..physics.system import EquationSystem

__all__ = ["SYSTEMS", "SystemProblem", "system_problem"]

D = torch.float64


@dataclass
class SystemProblem:
    """A system, its truth and its data (module docstring).

    ``data``: ``{output: (X (N_c, d), y (N_c,))}``; ``truth(X)``: ``(P, C)`` true values;
    ``test``: points beyond the data ``(P, d)``; ``grid``: points over the whole domain;
    ``coefficients``: the true values; ``observed``: the outputs with data; ``scales``:
    what a modeler knows of an unobserved output's size (``{output: (loc, scale)}``, the
    model's ``scales=``)."""

    name: str
    system: EquationSystem
    input_names: tuple
    data: dict
    truth: callable
    domain: Box
    test: torch.Tensor
    grid: torch.Tensor
    coefficients: dict
    scales: dict = None

    @property
    def observed(self):
        return tuple(self.data)


def _ode_truth(rhs, y0, t_end):
    """A callable ``t (P,) or (P, 1) -> (P, C)``: the ODE's solution (dense output of
    ``solve_ivp``, tolerance 1e-10)."""
    from scipy.integrate import solve_ivp
    sol = solve_ivp(rhs, (0.0, t_end), y0, method="LSODA", dense_output=True, rtol=1e-10,
                    atol=1e-10)

    def truth(t):
        t = torch.as_tensor(t, dtype=D).reshape(-1)
        return torch.as_tensor(sol.sol(t.numpy()).T, dtype=D)
    return truth


def _observe(truth, times, column, sd, gen):
    t = torch.as_tensor(times, dtype=D)
    f = truth(t)[:, column]
    noise = sd * torch.randn(f.shape, dtype=D, generator=gen)
    return t[:, None], (f + noise)


# -- the systems, as a user would write them --------------------------------------------------
def fitzhugh_nagumo(f, x, a, b, c):
    V, R = f["V"], f["R"]
    return (V.d("t") - c * (V - V ** 3 / 3 + R),
            R.d("t") + (V - a + b * R) / c)


def hes1_log(f, x, a, b, c, d, e, g, h):
    # p, m, q: logs of the protein P, the mRNA M and the factor H
    p, m, q = f["P"], f["M"], f["H"]
    P, M, H = torch.exp(p), torch.exp(m), torch.exp(q)
    return (p.d("t") - (-a * H + b * M / P - c),
            m.d("t") - (-d + e / (1 + P ** 2) / M),
            q.d("t") - (-a * P + g / (1 + P ** 2) / H - h))


def lotka_volterra(f, x, alpha, beta, delta, gamma):
    X, Y = f["x"], f["y"]
    return (X.d("t") - (alpha * X - beta * X * Y),
            Y.d("t") - (delta * X * Y - gamma * Y))


def sir(f, x, beta, gamma):
    s, i = f["s"], f["i"]
    return (s.d("t") + beta * s * i,
            i.d("t") - (beta * s * i - gamma * i))


def reaction_diffusion(f, x, du, dv):
    u, v = f["u"], f["v"]
    return (u.d("t") - du * u.d("x", "x") - u * (1 - u) + u * v,
            v.d("t") - dv * v.d("x", "x") - u * v + 0.5 * v)


def _fhn(seed):
    a, b, c = 0.2, 0.2, 3.0
    truth = _ode_truth(lambda t, s: [c * (s[0] - s[0] ** 3 / 3 + s[1]),
                                     -(s[0] - a + b * s[1]) / c], [-1.0, 1.0], 25.0)
    gen = torch.Generator().manual_seed(seed)
    times = np.linspace(0, 20, 41)
    data = {o: _observe(truth, times, k, 0.2, gen) for k, o in enumerate(("V", "R"))}
    system = EquationSystem(fitzhugh_nagumo, outputs=("V", "R"), inputs=("t",),
                            a=1.0, b=1.0, c=1.0)
    return SystemProblem("fitzhugh_nagumo", system, ("t",), data, truth, Box(t=(0.0, 25.0)),
                         torch.linspace(20, 25, 51, dtype=D)[1:, None],
                         torch.linspace(0, 25, 251, dtype=D)[:, None],
                         {"a": a, "b": b, "c": c})


def _hes1(seed):
    k = dict(a=0.022, b=0.3, c=0.031, d=0.028, e=0.5, g=20.0, h=0.3)

    def rhs(t, s):
        P, M, H = s
        return [-k["a"] * P * H + k["b"] * M - k["c"] * P,
                -k["d"] * M + k["e"] / (1 + P ** 2),
                -k["a"] * P * H + k["g"] / (1 + P ** 2) - k["h"] * H]
    plain = _ode_truth(rhs, [1.438575, 2.037488, 17.90385], 240.0)
    truth = lambda t: plain(t).log()
    gen = torch.Generator().manual_seed(seed)
    times = np.arange(0, 240.0 + 1e-9, 7.5)
    data = {"P": _observe(truth, times[0::2], 0, 0.15, gen),
            "M": _observe(truth, times[1::2], 1, 0.15, gen)}
    system = EquationSystem(hes1_log, outputs=("P", "M", "H"), inputs=("t",),
                            **{n: 0.1 for n in k})
    grid = torch.linspace(0, 240, 241, dtype=D)[:, None]
    return SystemProblem("hes1", system, ("t",), data, truth, Box(t=(0.0, 240.0)), grid,
                         grid, k)


def _lotka_volterra(seed):
    al, be, de, ga = 1.0, 0.5, 0.5, 1.0
    truth = _ode_truth(lambda t, s: [al * s[0] - be * s[0] * s[1],
                                     de * s[0] * s[1] - ga * s[1]], [2.0, 1.0], 15.0)
    gen = torch.Generator().manual_seed(seed)
    times = np.linspace(0, 10, 20)
    data = {o: _observe(truth, times, k, 0.1, gen) for k, o in enumerate(("x", "y"))}
    system = EquationSystem(lotka_volterra, outputs=("x", "y"), inputs=("t",),
                            alpha=1.0, beta=1.0, delta=1.0, gamma=1.0)
    return SystemProblem("lotka_volterra", system, ("t",), data, truth, Box(t=(0.0, 15.0)),
                         torch.linspace(10, 15, 51, dtype=D)[1:, None],
                         torch.linspace(0, 15, 151, dtype=D)[:, None],
                         {"alpha": al, "beta": be, "delta": de, "gamma": ga})


def _sir(seed):
    be, ga = 0.5, 0.2
    truth = _ode_truth(lambda t, s: [-be * s[0] * s[1], be * s[0] * s[1] - ga * s[1]],
                       [0.99, 0.01], 45.0)
    gen = torch.Generator().manual_seed(seed)
    data = {"i": _observe(truth, np.linspace(0, 30, 25), 1, 0.005, gen)}
    system = EquationSystem(sir, outputs=("s", "i"), inputs=("t",), beta=1.0, gamma=1.0)
    return SystemProblem("sir", system, ("t",), data, truth, Box(t=(0.0, 45.0)),
                         torch.linspace(30, 45, 51, dtype=D)[1:, None],
                         torch.linspace(0, 45, 226, dtype=D)[:, None],
                         {"beta": be, "gamma": ga},
                         scales={"s": (0.5, 0.5)})     # a fraction of the population


def _rd_truth(du, dv, t_end=3.0, n=101):
    """The reaction-diffusion pair by the method of lines (second differences with no-flux
    ends, ``solve_ivp`` BDF at 1e-10): a callable ``X (P, 2) [t, x] -> (P, 2)``."""
    from scipy.integrate import solve_ivp
    from scipy.interpolate import RegularGridInterpolator
    xs = np.linspace(0, 1, n)
    h = xs[1] - xs[0]

    def lap(w):
        out = np.empty_like(w)
        out[1:-1] = w[2:] - 2 * w[1:-1] + w[:-2]
        out[0], out[-1] = 2 * (w[1] - w[0]), 2 * (w[-2] - w[-1])
        return out / h ** 2

    def rhs(t, s):
        u, v = s[:n], s[n:]
        return np.concatenate([du * lap(u) + u * (1 - u) - u * v,
                               dv * lap(v) + u * v - 0.5 * v])
    s0 = np.concatenate([0.5 + 0.4 * np.cos(np.pi * xs), 0.3 + 0.2 * np.cos(2 * np.pi * xs)])
    ts = np.linspace(0, t_end, 301)
    sol = solve_ivp(rhs, (0, t_end), s0, method="BDF", t_eval=ts, rtol=1e-10, atol=1e-10)
    interp = [RegularGridInterpolator((ts, xs), sol.y[k * n:(k + 1) * n].T, method="cubic")
              for k in range(2)]

    def truth(X):
        X = torch.as_tensor(X, dtype=D).numpy()
        return torch.as_tensor(np.stack([f(X) for f in interp], 1), dtype=D)
    return truth


def _reaction_diffusion(seed):
    du, dv = 0.02, 0.01
    truth = _rd_truth(du, dv)
    gen = torch.Generator().manual_seed(seed)
    data = {}
    for k, o in enumerate(("u", "v")):
        X = torch.rand(60, 2, dtype=D, generator=gen) * torch.tensor([2.0, 1.0], dtype=D)
        data[o] = (X, truth(X)[:, k] + 0.02 * torch.randn(60, dtype=D, generator=gen))
    system = EquationSystem(reaction_diffusion, outputs=("u", "v"), inputs=("t", "x"),
                            du=0.1, dv=0.1)
    test = torch.cartesian_prod(torch.linspace(2, 3, 21, dtype=D)[1:],
                                torch.linspace(0, 1, 21, dtype=D))
    grid = torch.cartesian_prod(torch.linspace(0, 3, 31, dtype=D),
                                torch.linspace(0, 1, 21, dtype=D))
    return SystemProblem("reaction_diffusion", system, ("t", "x"), data, truth,
                         Box(t=(0.0, 3.0), x=(0.0, 1.0)), test, grid, {"du": du, "dv": dv})


#: name -> builder ``(seed) -> SystemProblem``
SYSTEMS = {"fitzhugh_nagumo": _fhn, "hes1": _hes1, "lotka_volterra": _lotka_volterra,
           "sir": _sir, "reaction_diffusion": _reaction_diffusion}


def system_problem(name, seed=0):
    """The :class:`SystemProblem` ``name`` (one of :data:`SYSTEMS`) with noise from
    ``seed``."""
    if name not in SYSTEMS:
        raise ValueError(f"Expected a system among {tuple(SYSTEMS)}; got {name!r}")
    return SYSTEMS[name](seed)
