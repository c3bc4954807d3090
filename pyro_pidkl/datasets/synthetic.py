r"""Our own generators of the paper's simulations (scipy's stiff ODE solver).

* 1stODE: :math:`f' + B f - D = \sin(2\pi t) e^{-t}`, :math:`f(0) = 0.1`, :math:`B = D = 1`,
  1001 points on :math:`[0, 1]`; train on :math:`t < 0.1`, test on the rest.
* 1dDiffusion: :math:`f_t = \alpha f_{xx}` on :math:`x \in [0, 2]`, :math:`f = 1` at both
  ends, initial square wave (2 on :math:`[0.755, 1.245]`, else 1), :math:`\alpha = 0.1`;
  method of lines on the 50-point grid (second-order central differences, BDF in time),
  kept at the 48 interior points and :math:`t = 0.01, \dots, 1.01`; train on :math:`t = 0.5`.
"""

import numpy as np
from scipy.integrate import solve_ivp
from scipy.sparse import diags

from ..checks import positive_int
from .base import Dataset

__all__ = ["simulate_diffusion_1d", "simulate_first_order_ode", "solve_diffusion_1d",
           "solve_first_order_ode"]


def solve_first_order_ode(t, B=1.0, D=1.0, f0=0.1, source=None):
    r"""Solve :math:`f' = D - B f + g(t)` on the sorted times ``t`` (``t[0]`` is the start)."""
    t = np.asarray(t, dtype=np.float64)
    g = source or (lambda s: np.sin(2 * np.pi * s) * np.exp(-s))
    sol = solve_ivp(lambda s, f: D - B * f + g(s), (t[0], t[-1]), [f0], t_eval=t,
                    method="DOP853", rtol=1e-12, atol=1e-13)
    if not sol.success:
        raise RuntimeError(f"ODE solver failed: {sol.message}")
    return sol.y[0]


def simulate_first_order_ode(n=1001, t_max=1.0, train_until=0.1, B=1.0, D=1.0, f0=0.1,
                             source=None, name="1stODE", source_text="sin(2 pi t) exp(-t)"):
    """The paper's 1stODE extrapolation task (noise free); ``source`` (a function of ``t``,
    described by ``source_text``), ``B``, ``D`` and ``f0`` make other instances of it."""
    n = positive_int(n, "n (time points)", minimum=2)
    for name_, value in (("t_max", t_max), ("train_until", train_until), ("B", B), ("D", D),
                         ("f0", f0)):
        if not (isinstance(value, (int, float, np.floating)) and np.isfinite(value)):
            raise ValueError(f"Expected {name_} to be a finite number; got {value!r}")
    if not 0 < train_until <= t_max:
        raise ValueError(f"Expected 0 < train_until <= t_max ({t_max}); got {train_until}")
    t = np.linspace(0.0, t_max, n)
    f = solve_first_order_ode(t, B, D, f0, source)
    train = t < train_until - 1e-12
    return Dataset(name, t[train, None], f[train], t[~train, None], f[~train], ("t",),
                   truth={"B": B, "D": D},
                   description=f"f' + B f - D = {source_text}, f(0) = {f0}, B = {B}, D = {D}; "
                               f"train t < {train_until}")


def solve_diffusion_1d(alpha=0.1, nx=50, length=2.0, times=None, low=1.0, high=2.0,
                       pulse=(0.755, 1.245)):
    r"""Heat equation :math:`f_t = \alpha f_{xx}` with Dirichlet ends ``low``.

    :returns: ``x`` (interior points, ``nx - 2``), ``t``, ``U`` of shape ``(nx - 2, len(t))``.
    """
    times = np.round(np.arange(1, 102) * 0.01, 10) if times is None else np.asarray(times)
    grid = np.linspace(0.0, length, nx)
    dx = grid[1] - grid[0]
    x = grid[1:-1]
    u0 = np.where((x >= pulse[0]) & (x <= pulse[1]), high, low)
    n = x.size
    A = diags([np.ones(n - 1), -2 * np.ones(n), np.ones(n - 1)], [-1, 0, 1]) * (alpha / dx ** 2)
    b = np.zeros(n)
    b[0] = b[-1] = alpha * low / dx ** 2
    sol = solve_ivp(lambda s, u: A @ u + b, (0.0, times[-1]), u0, t_eval=times, method="BDF",
                    jac=A, rtol=1e-10, atol=1e-12)
    if not sol.success:
        raise RuntimeError(f"Diffusion solver failed: {sol.message}")
    return x, times, sol.y


def simulate_diffusion_1d(alpha=0.1, train_time=0.5, pulse=(0.755, 1.245), high=2.0,
                          name="1dDiffusion"):
    """The paper's 1dDiffusion task: train on the slice ``t = train_time`` (48 points), test
    on every other time of the grid (48 x 100 points); ``pulse`` and ``high`` (the initial
    square wave) and ``alpha`` make other instances of it."""
    x, t, U = solve_diffusion_1d(alpha, pulse=pulse, high=high)
    T, Xg = np.meshgrid(t, x)              # (48, 101) each
    inputs = np.stack([Xg.ravel(), T.ravel()], axis=1)
    values = U.ravel()
    train = np.isclose(inputs[:, 1], train_time)
    if not train.any():
        raise ValueError(f"train_time {train_time} is not on the time grid {t[0]}..{t[-1]}")
    return Dataset(name, inputs[train], values[train], inputs[~train], values[~train],
                   ("x", "t"), truth={"alpha": alpha},
                   description=f"f_t = alpha f_xx, alpha = {alpha}, initial {high} on {pulse} "
                               f"(1 elsewhere); train on t = {train_time}")
