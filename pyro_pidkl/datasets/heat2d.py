r"""A synthetic 2-D heat-equation task of any size (the scale benchmark's data).

.. math:: f_t = \alpha (f_{xx} + f_{yy}), \qquad (x, y) \in [0, 2\pi)^2 \text{ periodic}

solved exactly in Fourier space: an initial condition made of a few Fourier modes decays
mode by mode, :math:`\hat f_k(t) = \hat f_k(0)\, e^{-\alpha |k|^2 t}`, so the solution can be
evaluated at any number of random points :math:`(x, y, t)` without a grid.
"""

import numpy as np

from .base import Dataset

__all__ = ["simulate_heat_2d", "solve_heat_2d"]


def _modes(num_modes, seed):
    rng = np.random.default_rng(seed)
    k = rng.integers(-3, 4, size=(num_modes, 2))
    k[np.all(k == 0, axis=1)] = (1, 0)
    amp = rng.normal(size=num_modes) / (1 + (k ** 2).sum(1))
    phase = rng.uniform(0, 2 * np.pi, num_modes)
    return k, amp, phase


def solve_heat_2d(X, alpha=0.1, num_modes=12, modes_seed=0):
    r"""The solution at points ``X`` ``(N, 3)`` (columns x, y, t) for the initial condition
    :math:`f_0 = \sum_j a_j \cos(k_j \cdot x + \phi_j)` (``num_modes`` random modes with
    :math:`|k_{j,i}| \le 3`, fixed by ``modes_seed``)."""
    X = np.asarray(X, dtype=np.float64)
    k, amp, phase = _modes(num_modes, modes_seed)
    out = np.zeros(len(X))
    for start in range(0, len(X), 200_000):
        x = X[start:start + 200_000]
        arg = x[:, :2] @ k.T + phase                              # (n, modes)
        decay = np.exp(-alpha * (k ** 2).sum(1) * x[:, 2:3])      # (n, modes)
        out[start:start + 200_000] = (amp * decay * np.cos(arg)).sum(1)
    return out


def simulate_heat_2d(n_train=1000, n_test=2000, alpha=0.1, noise=0.05, t_max=1.0, seed=0):
    """``n_train`` noisy and ``n_test`` noise-free points, uniform on
    :math:`[0, 2\\pi)^2 \\times [0, t_{max}]`; inputs ``x, y, t``."""
    rng = np.random.default_rng(seed)
    scale = np.array([2 * np.pi, 2 * np.pi, t_max])
    X = rng.uniform(size=(n_train + n_test, 3)) * scale
    f = solve_heat_2d(X, alpha)
    y = f[:n_train] + noise * rng.standard_normal(n_train)
    return Dataset("Heat2D", X[:n_train], y, X[n_train:], f[n_train:], ("x", "y", "t"),
                   truth={"alpha": alpha},
                   description=f"f_t = alpha (f_xx + f_yy), alpha = {alpha}, periodic; "
                               f"{n_train} noisy points (sd {noise}), {n_test} for test")
