r"""Viscous Burgers with a source, our own solver, and an extrapolation task in time.

.. math:: f_t + f f_x - \nu f_{xx} = g(x, t), \qquad x \in [0, 2\pi) \text{ periodic}

Solver: Fourier pseudo-spectral method of lines (exact spectral derivatives, 2/3-rule
de-aliasing of :math:`f f_x`), integrated by scipy's DOP853. It is tested against the
Cole-Hopf solution :func:`cole_hopf` of the source-free equation.
"""

import numpy as np
from scipy.integrate import solve_ivp

from .base import Dataset

__all__ = ["simulate_burgers", "cole_hopf", "solve_burgers"]


def cole_hopf(x, t, nu, c=2.0):
    r"""Exact periodic solution of :math:`f_t + f f_x = \nu f_{xx}` (no source):
    :math:`f = -2\nu\,\varphi_x / \varphi` with :math:`\varphi = c + e^{-\nu t}\cos x`,

    .. math:: f(x, t) = \frac{2\nu e^{-\nu t} \sin x}{c + e^{-\nu t} \cos x}.

    ``x`` and ``t`` broadcast; ``c > 1``.
    """
    decay = np.exp(-nu * np.asarray(t, dtype=np.float64))
    x = np.asarray(x, dtype=np.float64)
    return 2 * nu * decay * np.sin(x) / (c + decay * np.cos(x))


def solve_burgers(f0, times, nu, source=None, nx=128, rtol=1e-10, atol=1e-12):
    r"""Solve periodic viscous Burgers on :math:`[0, 2\pi)` from :math:`f(x, 0) = f_0(x)`.

    :param callable f0: initial condition, ``f0(x)`` on the grid.
    :param times: output times (increasing, from 0 or later).
    :param float nu: viscosity :math:`\nu > 0`.
    :param callable source: :math:`g(x, t)` (default none).
    :param int nx: grid points (even).
    :returns: ``x`` ``(nx,)``, ``t``, ``F`` of shape ``(nx, len(t))``.
    """
    if nu <= 0:
        raise ValueError(f"Expected a viscosity nu > 0; got {nu}")
    times = np.asarray(times, dtype=np.float64)
    x = 2 * np.pi * np.arange(nx) / nx
    k = np.fft.rfftfreq(nx, d=1.0 / nx)                     # wavenumbers 0..nx/2
    keep = k < nx / 3                                       # 2/3-rule de-aliasing
    g = source or (lambda x, t: 0.0 * x)

    def rhs(t, f):
        fh = np.fft.rfft(f)
        fx = np.fft.irfft(1j * k * fh, nx)
        fxx = np.fft.irfft(-(k ** 2) * fh, nx)
        nonlinear = np.fft.irfft(np.fft.rfft(f * fx) * keep, nx)
        return -nonlinear + nu * fxx + g(x, t)

    sol = solve_ivp(rhs, (0.0, times[-1]), f0(x), t_eval=times, method="DOP853", rtol=rtol,
                    atol=atol)
    if not sol.success:
        raise RuntimeError(f"Burgers solver failed: {sol.message}")
    return x, times, sol.y


def simulate_burgers(nu=0.05, seed=0, n_train=300, train_until=1.0, t_max=2.0, nt=41,
                     nx=64, noise=0.01):
    r"""Extrapolation in time for Burgers with a source: :math:`f_0 = \sin x`,
    :math:`g = \tfrac12 \sin(x - t)`, :math:`\nu = 0.05`; the solution on a
    ``nx x nt`` grid of :math:`[0, 2\pi) \times [0, 2]`; ``n_train`` random noisy points
    (Gaussian noise of sd ``noise``, chosen by ``seed``) with :math:`t \le 1`; test on the
    noise-free grid at :math:`t > 1`.
    """
    x, t, F = solve_burgers(np.sin, np.linspace(0.0, t_max, nt), nu,
                            source=lambda x, t: 0.5 * np.sin(x - t), nx=nx)
    xx, tt = np.meshgrid(x, t, indexing="ij")
    X, y = np.stack([xx.ravel(), tt.ravel()], 1), F.ravel()
    early = X[:, 1] <= train_until + 1e-12
    rng = np.random.default_rng(seed)
    idx = np.flatnonzero(early)
    if not 0 < n_train <= idx.size:
        raise ValueError(f"Expected 0 < n_train <= {idx.size}; got {n_train}")
    tr = rng.choice(idx, n_train, replace=False)
    y_train = y[tr] + noise * rng.standard_normal(n_train)
    return Dataset("Burgers", X[tr], y_train, X[~early], y[~early], ("x", "t"),
                   truth={"nu": nu},
                   description=f"Burgers f_t + f f_x - nu f_xx = 0.5 sin(x - t), nu = {nu}, "
                               f"periodic on [0, 2 pi); {n_train} noisy points at t <= "
                               f"{train_until}, test on t in ({train_until}, {t_max}]")
