r"""A system of first-order ODEs in explicit form, and its integration.

A system in one input :math:`t` whose residuals read each output and only its first
derivative, with the derivatives entering linearly through a constant invertible matrix,

.. math:: \psi[f](t) = W f'(t) + h(t, f(t)) = 0, \qquad W \in \mathbb{R}^{C \times C},

is the ODE :math:`f' = F(t, f) = -W^{-1} h(t, f)`: :func:`explicit_ode` finds :math:`W` by
linearising the system at random jets and random coefficients (the coefficients of
:math:`f'` must be the same at every one of them), and :math:`h(t, f)` is the residual
with the derivatives read as zeros. Nothing is asked of the user: the system as written
for the conditioned GP (``V.d("t") - c * (V - V**3/3 + R)``) is the ODE.

:class:`ExplicitODE` evaluates :math:`F` on a batch of states with a batch of coefficient
values (``B`` trajectories at once, e.g. a finite-difference Jacobian's columns) and
integrates them with :func:`scipy.integrate.solve_ivp` (LSODA: stiff or not), or exactly by
the matrix exponential where :math:`F` is affine in the state and reads no time (linear
kinetics, compartments, linear oscillators: :attr:`ExplicitODE.affine`,
:mod:`~pyro_pidkl.physics.affine_ode`).
"""

import math

import numpy as np
import torch

from .affine_ode import affine_parts, integrate_affine, is_affine, rk4_affine
from .derivatives import Inputs
from .linearise import JetField, _random_parameters
from .system import EquationSystem, Functions, linearise_system

__all__ = ["ExplicitODE", "explicit_ode"]


class _TooCostly(Exception):
    """The solver used up its evaluations."""


class ExplicitODE:
    r""":math:`f' = -W^{-1} h(t, f)` for an :class:`~pyro_pidkl.physics.EquationSystem`
    (module docstring); build it with :func:`explicit_ode`.

    :param system: the system.
    :param tuple names: the input's name, ``(t,)``.
    :param torch.Tensor W_inv: :math:`W^{-1}` ``(C, C)``.
    """

    #: whether :math:`F` is affine in the state and autonomous, and whether :math:`F(0) = 0`
    #: too: ``None`` until :attr:`affine` decides
    #: (:func:`~pyro_pidkl.physics.affine_ode.is_affine`)
    _affine = None
    _homogeneous = None
    #: whether :meth:`rhs_plain` may pass plain tensors to ``psi``: ``None`` until checked
    _plain_ok = None
    _minus_eye = None

    def __init__(self, system, names, W_inv):
        self.system, self.names, self.W_inv = system, tuple(names), W_inv
        #: the state's components, and what holds the coefficients' specs and values
        self.outputs, self.law = tuple(system.outputs), system

    @property
    def affine(self):
        r"""Whether :math:`F(t, f) = M(\theta) f + b(\theta)` (decided once, at random states,
        times and coefficients: :func:`~pyro_pidkl.physics.affine_ode.is_affine`); then
        :meth:`integrate` is exact."""
        return is_affine(self)

    @property
    def homogeneous(self):
        r"""Whether moreover :math:`b = 0` (the exponential of :math:`tM` alone serves)."""
        return self.affine and bool(self._homogeneous)

    def rhs(self, t, state, values=None):
        r""":math:`F(t, f)` ``(B, C)`` at times ``t`` ``(B,)`` and states ``state``
        ``(B, C)`` (user units), with coefficient values ``values`` (``{name: (B,)}`` or
        scalars; default the system's current ones)."""
        points = t.to(state.dtype)[:, None]
        fields = {o: JetField({(): state[:, c]}, points, self.names,
                              allowed=self.system.inputs, leaves=False)
                  for c, o in enumerate(self.system.outputs)}
        h = self.system.evaluate(fields, points, self.names, values)    # (C, B)
        return -(self.W_inv.to(h) @ h).T

    def rhs_plain(self, t, state, values=None):
        r""":math:`F(t, f)` as :meth:`rhs`, with each output passed to ``psi`` as a plain
        tensor whose ``.d(...)`` is zero (:math:`h(t, f)` reads no derivative), not a jet:
        a few times faster, and differentiable in ``state`` and ``values``. Where ``psi``
        needs more of a field than its value and ``.d`` (checked once against :meth:`rhs`
        at random states), :meth:`rhs` itself."""
        if type(self).rhs is not ExplicitODE.rhs:     # a subclass's own right-hand side
            return self.rhs(t, state, values)
        if self._plain_ok is None:
            self._plain_ok, self._minus_eye = self._check_plain(), None
        if not self._plain_ok:
            return self.rhs(t, state, values)
        return self._plain(t, state, values)

    def _plain(self, t, state, values):
        zero = torch.zeros_like(state[:, 0])
        fields = {}
        for o, v in zip(self.system.outputs, state.unbind(1)):   # new views carry ``.d``
            v.d = lambda *names, _z=zero, **kw: _z
            fields[o] = v
        params = {}
        for n in self.system.parameter_names:
            v = (values or {}).get(n)
            if v is None:
                v = getattr(self.system, n)
            params[n] = v if isinstance(v, torch.Tensor) and v.dtype == state.dtype \
                else torch.as_tensor(v, dtype=state.dtype)
        t = t if t.dtype == state.dtype else t.to(state.dtype)
        out = self.system.psi(Functions(fields), Inputs(t[:, None], self.names), **params)
        out = (out,) if isinstance(out, torch.Tensor) else out
        h = torch.stack([r if isinstance(r, torch.Tensor) and r.shape == zero.shape
                         else torch.as_tensor(r, dtype=state.dtype).expand(zero.shape)
                         for r in out], 1)                                    # (B, C)
        if self._minus_eye is None:
            W = self.W_inv.to(torch.float64)
            self._minus_eye = bool(torch.equal(W, torch.eye(W.shape[0], dtype=W.dtype)))
        return -h if self._minus_eye else -(h @ self.W_inv.to(h).T)

    def _check_plain(self):
        g = torch.Generator().manual_seed(1)
        state = torch.randn(4, len(self.system.outputs), generator=g, dtype=torch.float64)
        t = torch.rand(4, generator=g, dtype=torch.float64)
        try:
            with torch.no_grad():
                return bool(torch.allclose(self._plain(t, state, None), self.rhs(t, state),
                                           rtol=1e-10, atol=1e-12, equal_nan=True))
        except Exception:        # psi reads what a plain tensor does not carry
            return False

    def integrate(self, t0, x0, t_eval, values=None, t_offset=None, rtol=1e-6, atol=1e-8,
                  max_evaluations=4000):
        r"""Integrate ``B`` trajectories from ``x0`` ``(B, C)`` at time ``t0`` and return
        them at ``t_eval`` (increasing, ``(T,)``, all at or after ``t0``) as ``(B, C, T)``,
        or ``None`` where the solver fails (a blow-up, a non-finite value). Exactly, by the
        matrix exponential, where the ODE is :attr:`affine`; else by LSODA.

        :param values: coefficient values ``{name: (B,)}`` (default: the current ones).
        :param t_offset: ``(B,)`` added to the time each trajectory sees (trajectories
            that start at different times, integrated over the same interval).
        :param int max_evaluations: evaluations of :math:`F` after which the solver gives
            up (``None``): coefficients that make the system stiff beyond use (a fit's
            trial point) cost a bounded time."""
        from scipy.integrate import solve_ivp
        x0 = torch.as_tensor(x0, dtype=torch.float64)
        B, C = x0.shape
        if self.affine:
            with torch.no_grad(), np.errstate(all="ignore"):
                X = integrate_affine(self, x0, np.asarray(t_eval, dtype=float) - float(t0),
                                     values).numpy()
            return X if np.isfinite(X).all() else None
        offset = (torch.zeros(B, dtype=x0.dtype) if t_offset is None
                  else torch.as_tensor(t_offset, dtype=x0.dtype))
        t_eval = np.asarray(t_eval, dtype=float)
        if t_eval.size and float(t_eval[-1]) <= float(t0):   # nothing to integrate
            return np.repeat(x0.numpy()[:, :, None], t_eval.size, axis=2)

        calls = [0]

        def F(t, s):
            calls[0] += 1
            if calls[0] > max_evaluations:
                raise _TooCostly
            with torch.no_grad():
                out = self.rhs_plain(offset + t, torch.as_tensor(s).reshape(B, C), values)
            out = out.reshape(-1).numpy()
            return out if np.isfinite(out).all() else np.full_like(out, np.nan)

        with np.errstate(all="ignore"):
            try:
                sol = solve_ivp(F, (float(t0), float(t_eval[-1])), x0.reshape(-1).numpy(),
                                t_eval=t_eval, method="LSODA", rtol=rtol, atol=atol)
            except (ValueError, ArithmeticError, RuntimeError, _TooCostly):
                return None
        if not sol.success or sol.y.shape[1] != len(t_eval) or not np.isfinite(sol.y).all():
            return None
        return sol.y.reshape(B, C, -1)


    def _guarded(self, offset, values):
        r""":math:`F(t, y)` of a batch, without gradients, ``nan`` where it is not finite
        (a trajectory that overflows stays ``nan``; the batch's others are unaffected).
        Where the ODE is affine and autonomous (:attr:`affine`), :math:`F(y) = M y + b`
        with each row's :math:`M` and :math:`b` read off once
        (:func:`~pyro_pidkl.physics.affine_ode.affine_parts`): a Runge-Kutta step is then
        four batched products, not four calls of ``psi``, and the same step."""
        parts = []

        def F(s, y):
            with torch.no_grad():
                if not self.affine:
                    d = self.rhs_plain(offset + s, y, values)
                else:
                    if not parts:
                        parts.extend(affine_parts(self, y.shape[0], values, y.dtype))
                    M, b = parts
                    d = (M @ y[..., None])[..., 0] + b
            return torch.where(torch.isfinite(d), d, torch.full_like(d, float("nan")))
        return F

    def integrate_fixed(self, x0, t_eval, values=None, t_offset=None, max_step=None):
        r"""Integrate ``B`` trajectories from ``x0`` ``(B, C)`` at time 0 with the classical
        fourth-order Runge-Kutta method at a fixed step, all in one batch, and return them
        at ``t_eval`` (increasing, ``(T,)``, at or after 0) as a ``(B, C, T)`` tensor. A
        trajectory that overflows is ``nan`` from there on, the others are unaffected:
        :func:`~pyro_pidkl.infer.multistart.multistart_shooting` integrates thousands of
        trial trajectories at once, and some of them blow up. The step is the largest not
        above ``max_step`` (default: the span over 64) that divides each interval of
        ``t_eval`` evenly; the result is a smooth function of ``x0`` and ``values``
        (finite differences of it are accurate), its error :math:`O(h^4)`.

        :param values: coefficient values ``{name: (B,)}`` (default: the current ones).
        :param t_offset: ``(B,)`` added to the time each trajectory sees."""
        x = torch.as_tensor(x0, dtype=torch.float64).clone()
        B = x.shape[0]
        t_eval = np.asarray(t_eval, dtype=float)
        offset = (torch.zeros(B, dtype=x.dtype) if t_offset is None
                  else torch.as_tensor(t_offset, dtype=x.dtype))
        span = float(t_eval[-1]) if t_eval.size else 0.0
        h_max = float(max_step) if max_step else max(span / 64.0, 1e-12)
        out, t = [], 0.0
        F = self._guarded(offset, values)
        with np.errstate(all="ignore"):
            for target in t_eval:
                n = int(math.ceil((float(target) - t) / h_max - 1e-9)) if target > t else 0
                if n:
                    h = (float(target) - t) / n
                    for _ in range(n):
                        x, _ = _rk4_step(F, t, x, h)
                        t += h
                    t = float(target)
                out.append(x)
        return torch.stack(out, -1) if out else x.new_zeros(B, x.shape[1], 0)

    def integrate_uniform(self, x0, t_eval, values=None, t_offset=None, steps=8):
        r"""Integrate ``B`` trajectories from ``x0`` ``(B, C)`` at time 0 by ``steps``
        uniform steps of the classical fourth-order Runge-Kutta method over
        :math:`[0, \max t_{eval}]`, all in one batch, and return them at ``t_eval``
        (``(T,)``, in that span, any order) as a ``(B, C, T)`` tensor, read between the
        nodes by the cubic Hermite interpolant of the nodes' states and slopes
        (:math:`O(h^4)`, as the steps): the steps do not follow the data's times, so
        data at many distinct times cost no more steps (the search over starts,
        :func:`~pyro_pidkl.infer.multistart.multistart_shooting`, integrates every segment
        of every start in one batch on one local grid: stepping to each datum's offset
        cost a step per distinct offset). Overflow as :meth:`integrate_fixed`: a
        trajectory that overflows is ``nan`` from there on, the others unaffected.

        .. math:: x(t_i + s h) = h_{00}(s)\, x_i + h_{10}(s)\, h F_i
            + h_{01}(s)\, x_{i+1} + h_{11}(s)\, h F_{i+1}

        :param values: coefficient values ``{name: (B,)}`` (default: the current ones).
        :param t_offset: ``(B,)`` added to the time each trajectory sees."""
        x = torch.as_tensor(x0, dtype=torch.float64).clone()
        B = x.shape[0]
        t_eval = np.asarray(t_eval, dtype=float)
        if not t_eval.size:
            return x.new_zeros(B, x.shape[1], 0)
        offset = (torch.zeros(B, dtype=x.dtype) if t_offset is None
                  else torch.as_tensor(t_offset, dtype=x.dtype))
        span = float(t_eval.max())
        n = max(int(steps), 1)
        h = span / n if span > 0 else 0.0
        F = self._guarded(offset, values)
        states, slopes = [x], []
        with np.errstate(all="ignore"):
            if h > 0 and self.affine:
                states, slopes = rk4_affine(self, x, values, h, n)
            elif h > 0:
                for i in range(n):
                    x, k1 = _rk4_step(F, i * h, x, h)
                    states.append(x)
                    slopes.append(k1)
                slopes.append(F(span, x))
            else:
                slopes.append(torch.zeros_like(x))
        X = torch.stack(states, -1)                                    # (B, C, n + 1)
        D = torch.stack(slopes, -1)
        if h <= 0:
            return X[..., [0] * t_eval.size]
        where = np.clip(t_eval / h, 0.0, n)
        i = np.minimum(np.floor(where).astype(int), n - 1)
        return _hermite(X, D, i, torch.as_tensor(where - i), h)

    def integrate_grid(self, x0, grid, t_eval, values=None, t_offset=None, grad=False):
        r"""Integrate ``B`` trajectories from ``x0`` ``(B, C)`` at ``grid[0]`` by one step of
        the classical fourth-order Runge-Kutta method between each pair of the increasing
        nodes ``grid`` ``(n + 1,)``, all in one batch, and return them at ``t_eval``
        (``(T,)``, inside the grid, any order) as a ``(B, C, T)`` tensor, read between the
        nodes by the cubic Hermite interpolant of the nodes' states and slopes
        (:math:`O(h^4)`, as the steps). A trajectory that overflows is ``nan`` from there on,
        the others unaffected (thousands of trial trajectories are integrated at once, and
        some blow up).

        .. math:: x(t_i + s h_i) = h_{00}(s)\, x_i + h_{10}(s)\, h_i F_i
            + h_{01}(s)\, x_{i+1} + h_{11}(s)\, h_i F_{i+1}

        :param values: coefficient values ``{name: (B,)}`` (default: the current ones).
        :param t_offset: ``(B,)`` added to the time each trajectory sees.
        :param bool grad: differentiable in ``x0`` and ``values`` (:meth:`rhs_plain`, a
            non-finite value kept as it is), for a sampler's gradients."""
        x = torch.as_tensor(x0, dtype=torch.float64)
        x = x if grad else x.clone()
        B = x.shape[0]
        t_eval = np.asarray(t_eval, dtype=float)
        if not t_eval.size:
            return x.new_zeros(B, x.shape[1], 0)
        offset = (torch.zeros(B, dtype=x.dtype) if t_offset is None
                  else torch.as_tensor(t_offset, dtype=x.dtype))
        grid = np.asarray(grid, dtype=float)
        n = grid.size - 1
        F = ((lambda s, y: self.rhs_plain(offset + s, y, values)) if grad
             else self._guarded(offset, values))
        if n < 1:
            return x[..., None].expand(*x.shape, t_eval.size)
        states, slopes = [x], []
        with np.errstate(all="ignore"):
            for i in range(n):
                x, k1 = _rk4_step(F, float(grid[i]), x, float(grid[i + 1] - grid[i]))
                states.append(x)
                slopes.append(k1)
            slopes.append(F(float(grid[-1]), x))
        X = torch.stack(states, -1)                                    # (B, C, n + 1)
        D = torch.stack(slopes, -1)
        i = np.clip(np.searchsorted(grid, t_eval, side="right") - 1, 0, n - 1)
        h = grid[i + 1] - grid[i]
        s = torch.as_tensor(np.clip((t_eval - grid[i]) / h, 0.0, 1.0))
        return _hermite(X, D, i, s, torch.as_tensor(h))


def _hermite(X, D, i, s, h):
    """The cubic Hermite interpolant of node states ``X`` and slopes ``D`` ``(B, C, n + 1)``
    in the interval starting at node ``i`` ``(T,)``, at fractions ``s`` of its length ``h``
    (a number or ``(T,)``): ``(B, C, T)``."""
    s2, s3 = s * s, s * s * s
    h00, h10 = 2 * s3 - 3 * s2 + 1, s3 - 2 * s2 + s
    h01, h11 = -2 * s3 + 3 * s2, s3 - s2
    return (h00 * X[..., i] + h10 * h * D[..., i]
            + h01 * X[..., i + 1] + h11 * h * D[..., i + 1])


def _rk4_step(F, t, x, h):
    """One step of the classical fourth-order Runge-Kutta method from ``x`` at ``t``:
    ``(x(t + h), F(t, x))``."""
    k1 = F(t, x)
    k2 = F(t + h / 2, x + h / 2 * k1)
    k3 = F(t + h / 2, x + h / 2 * k2)
    k4 = F(t + h, x + h * k3)
    return x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), k1


def explicit_ode(system, names=None, trials=3, seed=0, rtol=1e-10):
    r"""The system as an explicit ODE :math:`f' = F(t, f)` (an :class:`ExplicitODE`), or
    ``None`` when it is not one: more than one input, a derivative of order above one, a
    number of equations other than the number of outputs, or coefficients of the
    derivatives that change with the state, the coefficients or the point, or that are
    singular."""
    if not isinstance(system, EquationSystem):
        return None
    names = tuple(names or system.inputs)
    if len(names) != 1:
        return None
    C, m = len(system.outputs), 5
    g = torch.Generator().manual_seed(seed)
    points = torch.rand(m, 1, generator=g, dtype=torch.float64) * 4 - 2
    settings = [{}] + [_random_parameters(system, g, torch.float64) for _ in range(trials)]
    W = None
    for k, values in enumerate(settings):
        jets = [{(): (1 + 4 * k) * torch.randn(m, generator=g, dtype=torch.float64),
                 (0,): (1 + 4 * k) * torch.randn(m, generator=g, dtype=torch.float64)}
                for _ in range(C)]
        try:
            lin = linearise_system(system, jets, points, names, **values)
        except (ValueError, TypeError, RuntimeError):
            return None
        if lin.h0.shape[0] != C:
            return None
        Wk = torch.zeros(C, C, m, dtype=torch.float64)
        for (e, c), coef in lin.coefficients.items():
            for idx, v in coef.items():
                if idx not in ((), (0,)):
                    return None
                if idx == (0,):
                    Wk[e, c] = v.detach()
        if W is None:
            W = Wk[..., 0]
        if not torch.allclose(Wk, W[..., None].expand_as(Wk), rtol=rtol, atol=rtol):
            return None
    if not bool(torch.isfinite(W).all()) or torch.linalg.matrix_rank(W) < C:
        return None
    return ExplicitODE(system, names, torch.linalg.inv(W))
