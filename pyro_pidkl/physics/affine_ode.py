r"""An explicit ODE that is affine in its state and reads no time, solved exactly.

Compartment models (a dose absorbed from a gut, distributed and eliminated at first-order
rates), linear kinetics and linear oscillators are

.. math:: f'(t) = M(\theta) f(t) + b(\theta), \qquad f(0) = f_0,

whose solution is the matrix exponential of the augmented generator

.. math:: \begin{pmatrix} f(t) \\ 1 \end{pmatrix} = \exp\!\left(t
    \begin{pmatrix} M & b \\ 0 & 0 \end{pmatrix}\right)
    \begin{pmatrix} f_0 \\ 1 \end{pmatrix}

(Moler & Van Loan 2003): exact at every time, stiff or not, and differentiable in
:math:`\theta` and :math:`f_0` through :func:`torch.linalg.matrix_exp`, so a sampler's
gradient costs one batched exponential instead of a Runge-Kutta loop. :math:`M` and
:math:`b` are read off :meth:`~pyro_pidkl.physics.ode.ExplicitODE.rhs_plain` at the zero
state and the unit states (exact for an affine :math:`F`); :func:`is_affine` decides once,
at random states, times and coefficients, whether :math:`F` is affine and autonomous (and
whether :math:`b = 0` there, when the exponential of :math:`tM` alone serves).
"""

import torch

from .linearise import _random_parameters

__all__ = ["affine_parts", "integrate_affine", "is_affine", "rk4_affine"]


def is_affine(ode, trials=3, seed=0, rtol=1e-9):
    r"""Whether :math:`F(t, f)` of the :class:`~pyro_pidkl.physics.ode.ExplicitODE` ``ode``
    is affine in :math:`f` and independent of :math:`t`: at the system's coefficients and
    ``trials`` random draws of them, at random states (unit and ten-times-larger normal
    draws) and times, :math:`F(t, a x + (1-a) y) = a F(t, x) + (1-a) F(t, y)` for
    :math:`a = 2.5` and :math:`F(t, x) = F(s, x)`, to ``rtol`` of the values' size. Decided
    once: kept as ``ode._affine`` and ``ode._homogeneous`` (whether :math:`F(0) = 0` too;
    :attr:`~pyro_pidkl.physics.ode.ExplicitODE.homogeneous`)."""
    if ode._affine is not None:
        return ode._affine
    homogeneous = True
    g = torch.Generator().manual_seed(seed)
    C, B, D = len(ode.outputs), 4, torch.float64
    settings = [None] + [_random_parameters(ode.law, g, D) for _ in range(trials)]
    size = torch.tensor([[1.0], [1.0], [10.0], [10.0]], dtype=D)     # unit and large states
    ok = True
    try:
        with torch.no_grad():
            for values in settings:
                x = torch.randn(B, C, generator=g, dtype=D) * size
                y = torch.randn(B, C, generator=g, dtype=D) * 10.0
                t, s = (torch.rand(B, generator=g, dtype=D) * 4 - 2 for _ in range(2))
                Fx, Fy = ode.rhs_plain(t, x, values), ode.rhs_plain(t, y, values)
                Fm = ode.rhs_plain(t, 2.5 * x - 1.5 * y, values)
                Fs = ode.rhs_plain(s, x, values)
                homogeneous &= bool((ode.rhs_plain(t, torch.zeros_like(x), values) == 0).all())
                scale = float(torch.cat([Fx.abs(), Fy.abs(), Fm.abs()]).max()) + 1e-300
                if not (torch.isfinite(Fm).all() and torch.isfinite(Fs).all()):
                    ok = False
                elif (Fm - (2.5 * Fx - 1.5 * Fy)).abs().max() > rtol * 10 * scale or \
                        (Fs - Fx).abs().max() > rtol * scale:
                    ok = False
                if not ok:
                    break
    except (ValueError, TypeError, RuntimeError):
        ok = False
    ode._affine, ode._homogeneous = ok, ok and homogeneous
    return ok


def affine_parts(ode, batch, values=None, dtype=torch.float64):
    r""":math:`M` ``(B, C, C)`` and :math:`b` ``(B, C)`` of an affine autonomous ``ode``
    (:func:`is_affine`) for ``batch`` ``B`` coefficient values ``{name: (B,)}`` (or
    scalars): :math:`b = F(0)`, :math:`M e_j = F(e_j) - F(0)`, in one call of
    :meth:`~pyro_pidkl.physics.ode.ExplicitODE.rhs_plain` on ``B (C + 1)`` states,
    differentiable in ``values``."""
    C = len(ode.outputs)
    states = torch.cat([torch.zeros(1, C, dtype=dtype), torch.eye(C, dtype=dtype)])
    states = states.repeat(batch, 1)                                   # (B (C + 1), C)
    rep = None if values is None else {
        n: (torch.as_tensor(v, dtype=dtype).repeat_interleave(C + 1)
            if torch.as_tensor(v).dim() == 1 else v) for n, v in values.items()}
    t = torch.zeros(states.shape[0], dtype=dtype)
    F = ode.rhs_plain(t, states, rep).reshape(batch, C + 1, C)
    b = F[:, 0]
    return (F[:, 1:] - b[:, None]).transpose(1, 2), b


def integrate_affine(ode, x0, t_eval, values=None, rows=None):
    r"""``B`` trajectories of an affine autonomous ``ode`` from ``x0`` ``(B, C)`` at time 0,
    exactly (module docstring), differentiable in ``x0`` and ``values`` ``{name: (B,)}``:
    at every time of ``t_eval`` ``(T,)`` (any sign, any order), ``(B, C, T)``; or, with
    ``rows`` ``(n,)``, trajectory ``rows[j]`` at ``t_eval[j]`` only, ``(n, C)`` (one
    exponential a datum, not one a trajectory and time). A trajectory whose exponential
    overflows is ``inf``/``nan`` there."""
    x0 = torch.as_tensor(x0, dtype=torch.float64)
    B, C = x0.shape
    t = torch.as_tensor(t_eval, dtype=x0.dtype).reshape(-1)
    M, b = affine_parts(ode, B, values, x0.dtype)
    if ode.homogeneous:                              # b = 0: the generator is M itself
        gen = M
    else:
        top = torch.cat([M, b[:, :, None]], 2)                         # (B, C, C + 1)
        gen = torch.cat([top, torch.zeros(B, 1, C + 1, dtype=x0.dtype)], 1)
    if rows is not None:
        r = torch.as_tensor(rows)
        E = torch.linalg.matrix_exp(gen[r] * t[:, None, None])         # (n, C+1, C+1)
        X = (E[:, :C, :C] @ x0[r, :, None])[..., 0]
        return X + E[:, :C, C] if gen.shape[-1] > C else X
    E = torch.linalg.matrix_exp(gen[:, None] * t[None, :, None, None])  # (B, T, C+1, C+1)
    X = (E[..., :C, :C] @ x0[:, None, :, None])[..., 0]                  # (B, T, C)
    X = X + E[..., :C, C] if gen.shape[-1] > C else X
    return X.transpose(1, 2)


def rk4_affine(ode, x, values, h, n):
    r"""``n`` classical Runge-Kutta steps of ``h`` from ``x`` ``(B, C)`` of an affine
    autonomous ``ode``, :math:`F(y) = M y + b`, as the linear map they are,
    :math:`x_{i+1} = R(hM)\, x_i + h\, S(hM)\, b` with :math:`R(z) = 1 + z + z^2/2 + z^3/6 +
    z^4/24` and :math:`S(z) = 1 + z/2 + z^2/6 + z^3/24`: one batched product a step.
    Returns the nodes' states and slopes (lists of ``(B, C)``, ``nan`` where not finite)."""
    with torch.no_grad():
        M, b = affine_parts(ode, x.shape[0], values, x.dtype)
        Z = h * M
        eye = torch.eye(M.shape[-1], dtype=M.dtype).expand_as(M)
        Z2 = Z @ Z
        S = eye + Z / 2 + Z2 / 6 + Z2 @ Z / 24
        R = eye + Z @ S
        q = h * (S @ b[..., None])[..., 0]

        def finite(v):
            return torch.where(torch.isfinite(v), v, torch.full_like(v, float("nan")))
        states, slopes = [x], []
        for _ in range(n):
            slopes.append(finite((M @ x[..., None])[..., 0] + b))
            x = finite((R @ x[..., None])[..., 0] + q)
            states.append(x)
        slopes.append(finite((M @ x[..., None])[..., 0] + b))
    return states, slopes
