r"""The method-of-lines check of an evolution PDE in one space input: the fitted equation
integrated on a grid from the posterior's initial and boundary values, its solution scored
on the data beside the conditioned fit's (the PDE's analogue of the exact-ODE referee).

For :math:`\psi[u] = a\,u_t + b(x, t, u, u_x, u_{xx}; \theta) = g(x, t)` (``psi`` affine in
:math:`u_t`, :math:`a \ne 0`; read off ``psi`` at :math:`u_t = 0` and :math:`1`) on
:math:`[x_0, x_1] \times [t_0, t_1]`:

.. math::
    \dot u_j = \frac{g(x_j, t) - b_j}{a_j}, \qquad
    u_x \approx \frac{u_{j+1} - u_{j-1}}{2h}, \quad
    u_{xx} \approx \frac{u_{j+1} - 2u_j + u_{j-1}}{h^2},

on the interior nodes of a uniform grid of ``nodes`` points, :math:`u(x, t_0)` and the two
boundary values :math:`u(x_0, t)`, :math:`u(x_1, t)` the posterior mean's (Dirichlet), by
scipy's BDF with the Jacobian's band given. The data's Gaussian log-likelihood at the
noise's maximum, :math:`-\tfrac n2 \log(\mathrm{RSS}/n)`, is computed for the solution at the
conditioned fit's coefficients and at the coefficients that maximise it (``least_squares``
over their unconstrained values, intervals from the Gauss-Newton covariance; not searched
where one Gauss-Newton step from the fit's coefficients would gain under a quarter of the
tolerance below: they are then the optimum's neighbourhood, and the check costs
:math:`P + 2` solves). Where the fit's
coefficients are outside the 99% likelihood region of that optimum
(:math:`\tfrac12\chi^2_p(0.99)`), the verdict is ``"disagree"``; a grid twice as fine that
moves the optimum's log-likelihood by more than :data:`GRID_TOLERANCE` marks the check
unresolved (its numbers are not to be trusted), and the check says so.
"""

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch.distributions import biject_to

from ...infer.deviance import data_nll
from ...physics.derivatives import Field, Inputs
from .stages import stage_tolerance

__all__ = ["GRID_TOLERANCE", "LINES_NODES", "MethodOfLinesCheck", "lines_stage",
           "method_of_lines_check", "widen_to_lines"]

#: the grid of the check every fit of an evolution PDE in one space input runs
#: (:func:`lines_stage`; a grid of ``2 LINES_NODES - 1`` checks it)
LINES_NODES = 128

#: nats by which the optimum's log-likelihood may move on a grid twice as fine
GRID_TOLERANCE = 1.0


@dataclass
class MethodOfLinesCheck:
    """What :func:`method_of_lines_check` found.

    :ivar dict fit: the conditioned fit's coefficients.
    :ivar dict lines: the method-of-lines optimum: ``{name: {"value", "lower", "upper"}}``.
    :ivar float fit_loglik: the data's log-likelihood under the equation's solution at the
        fit's coefficients (the noise at its maximum).
    :ivar float lines_loglik: the same at the optimum.
    :ivar float tolerance: :math:`\\tfrac12\\chi^2_p(0.99)`.
    :ivar str verdict: ``"agree"``, ``"disagree"`` or ``"unresolved"`` (the grid moved the
        optimum by more than :data:`GRID_TOLERANCE`).
    """

    fit: dict
    lines: dict
    fit_loglik: float
    lines_loglik: float
    tolerance: float
    verdict: str
    nodes: int
    grid_shift: float
    seconds: float

    def summary(self):
        """One line per coefficient and one for the verdict."""
        out = [f"{n}: fit {self.fit[n]:.4g}, method of lines {v['value']:.4g} "
               f"[{v['lower']:.4g}, {v['upper']:.4g}]" for n, v in self.lines.items()]
        out.append(f"log-likelihood {self.fit_loglik:.2f} at the fit's coefficients, "
                   f"{self.lines_loglik:.2f} at the optimum ({self.verdict}; "
                   f"{self.nodes} nodes, a grid twice as fine moves it {self.grid_shift:.2f})")
        return out


def _evolution(model):
    """``(space, time)`` input indices, or a one-line refusal."""
    if not hasattr(model, "equation"):
        raise ValueError(f"Expected one equation (a PhysicsConditionedGP); got "
                         f"{type(model).__name__}")
    names = tuple(model.input_names)
    if len(names) != 2 or "t" not in names:
        raise ValueError(f"Expected an evolution PDE in one space input and time 't'; got "
                         f"inputs {names}")
    if model.source_kind == "gp":
        raise ValueError("Expected a zero or known source; an unknown (GP) source has no "
                         "solution to integrate")
    it = names.index("t")
    return 1 - it, it


class _Lines:
    """The semi-discrete system of a model's equation on ``nodes`` points."""

    def __init__(self, model, nodes):
        self.model, self.ix, self.it = model, *_evolution(model)
        lo, hi = model.domain.low, model.domain.high
        self.x = np.linspace(float(lo[self.ix]), float(hi[self.ix]), int(nodes))
        self.h = self.x[1] - self.x[0]
        self.t0, self.t1 = float(lo[self.it]), float(hi[self.it])
        # the posterior mean's initial and boundary values
        tb = np.linspace(self.t0, self.t1, 201)
        with torch.no_grad():
            self.u0 = self._mean(self.x, np.full_like(self.x, self.t0))
            self.tb = tb
            self.left = self._mean(np.full_like(tb, self.x[0]), tb)
            self.right = self._mean(np.full_like(tb, self.x[-1]), tb)

    def _points(self, x, t):
        P = np.zeros((len(x), 2))
        P[:, self.ix], P[:, self.it] = x, t
        return torch.as_tensor(P, dtype=torch.float64)

    def _mean(self, x, t):
        # the posterior mean alone (a stage runs before the fit is marked finished, where a
        # prediction would warn that it did not)
        return self.model.posterior_mean(self._points(x, t)).detach().numpy().astype(float)

    def rhs(self, t, interior, values):
        u = np.concatenate([[np.interp(t, self.tb, self.left)], interior,
                            [np.interp(t, self.tb, self.right)]])
        ut = torch.as_tensor(u, dtype=torch.float64)
        ux = (ut[2:] - ut[:-2]) / (2 * self.h)
        uxx = (ut[2:] - 2 * ut[1:-1] + ut[:-2]) / self.h ** 2
        P = self._points(self.x[1:-1], np.full(len(self.x) - 2, t))
        r = [self._psi(ut[1:-1], ux, uxx, torch.full_like(ux, w), P, values) for w in (0., 1.)]
        a, b = r[1] - r[0], r[0]
        g = (self.model.source_fn(P) if self.model.source_kind == "known"
             else torch.zeros_like(b))
        return ((torch.as_tensor(g, dtype=torch.float64) - b) / a).numpy()

    def _psi(self, u, ux, uxx, ut, P, values):
        return _psi(self.model, self.ix, self.it, u, ux, uxx, ut, P, values)

    def solve(self, values, X):
        """The solution at the points ``X`` (``(n, 2)`` numpy, user units), or ``None``."""
        from scipy.integrate import solve_ivp
        from scipy.interpolate import RectBivariateSpline
        from scipy.sparse import diags
        n = len(self.x) - 2
        band = diags([np.ones(n - 1), np.ones(n), np.ones(n - 1)], [-1, 0, 1], shape=(n, n))
        times = np.linspace(self.t0, self.t1, 101)
        sol = solve_ivp(lambda t, y: self.rhs(t, y, values), (self.t0, self.t1),
                        self.u0[1:-1], method="BDF", t_eval=times, jac_sparsity=band,
                        rtol=1e-6, atol=1e-8 * max(np.abs(self.u0).max(), 1e-12))
        if not sol.success or not np.all(np.isfinite(sol.y)):
            return None
        U = np.vstack([np.interp(times, self.tb, self.left)[None], sol.y,
                       np.interp(times, self.tb, self.right)[None]])       # (nodes, T)
        spline = RectBivariateSpline(self.x, times, U, kx=3, ky=3)
        return spline.ev(X[:, self.ix], X[:, self.it])


def _psi(model, ix, it, u, ux, uxx, ut, P, values):
    r""":math:`\psi` at the points ``P`` with the given :math:`u, u_x, u_{xx}, u_t`."""
    f = Field(u, P, model.input_names)
    f._cache.update({(ix,): ux, (ix, ix): uxx, (it,): ut})
    out = model.equation.psi(f, Inputs(P, model.input_names), **values)
    extra = f.requested - {(), (ix,), (ix, ix), (it,)}
    if extra:
        names = model.input_names
        raise ValueError(f"Expected an equation with u, u_x, u_xx and u_t only; it asks for "
                         f"{[''.join(names[i] for i in e) for e in extra]}")
    return torch.as_tensor(out, dtype=torch.float64).expand(u.shape)


def _check_affine(model, values):
    r"""Refuse, in one line, an equation that is not :math:`a u_t + b` with :math:`a \ne 0`
    (probed at random states on random points of the domain)."""
    ix, it = _evolution(model)
    g = torch.Generator().manual_seed(3)
    lo = torch.as_tensor(model.domain.low, dtype=torch.float64)
    hi = torch.as_tensor(model.domain.high, dtype=torch.float64)
    P = lo + (hi - lo) * torch.rand(16, 2, generator=g, dtype=torch.float64)
    u, ux, uxx = (torch.randn(16, generator=g, dtype=torch.float64) for _ in range(3))
    r = [_psi(model, ix, it, u, ux, uxx, torch.full_like(u, w), P, values)
         for w in (0., 1., 2.)]
    a = r[1] - r[0]
    scale = float(r[0].abs().max() + a.abs().max() + 1e-300)
    if float(a.abs().min()) <= 1e-12 * scale or \
            float((r[2] - 2 * r[1] + r[0]).abs().max()) > 1e-8 * scale:
        raise ValueError("Expected an evolution equation a u_t + b(u, u_x, u_xx) = g with "
                         "a != 0; psi is not affine in u_t")

def _coefficients(model):
    """``[(name, transform)]`` of the learned scalar coefficients."""
    out = []
    for name in model._learned():
        spec = model.coefficient_spec(name)
        if spec.init.numel() != 1:
            raise ValueError(f"Expected scalar coefficients; {name} has shape "
                             f"{tuple(spec.init.shape)}")
        out.append((name, biject_to(spec.constraint)))
    return out


def _values(model, coefficients, z):
    return {n: t(torch.as_tensor(v, dtype=torch.float64)) for (n, t), v in zip(coefficients, z)} | {
        n: torch.as_tensor(getattr(model.equation, n), dtype=torch.float64).detach()
        for n in model.equation.specs if n not in dict(coefficients)}


def _jacobian(residual, z, r, step=1e-4):
    """Forward differences of ``residual`` at ``z`` (``r`` its value there), a relative step
    as ``least_squares``' ``diff_step``: ``(n, P)``."""
    J = np.empty((r.size, z.size))
    for k in range(z.size):
        h = step * max(1.0, abs(float(z[k])))
        dz = z.copy()
        dz[k] += h
        J[:, k] = (residual(dz) - r) / h
    return J


def _loglik(residual):
    """The data's Gaussian log-likelihood, the noise at its maximum, constants dropped
    (:func:`~pyro_pidkl.infer.deviance.data_nll` of one component)."""
    return -float(data_nll(residual[None], np.zeros(residual.size, dtype=int), ())[0])


def method_of_lines_check(model, nodes=256, prob=0.9, max_nfev=40):
    r"""The method-of-lines check of a fitted conditioned model whose equation is an
    evolution PDE in one space input and time ``t`` (module docstring).

    :param int nodes: grid points in space (a grid of ``2 * nodes - 1`` checks it).
    :param float prob: the optimum's interval probability.
    :returns: a :class:`MethodOfLinesCheck`; a model it cannot serve (other inputs, an
        unknown source, derivatives beyond :math:`u_{xx}`, not affine in :math:`u_t`) is
        refused in one line (``ValueError``).
    """
    from scipy import optimize, stats
    began = time.process_time()
    coefficients = _coefficients(model)
    if not coefficients:
        raise ValueError("Expected learned coefficients to check; the equation has none")
    X = model.X.detach().numpy().astype(float)
    y = model.y.detach().numpy().astype(float)
    z_fit = np.array([float(t.inv(torch.as_tensor(getattr(model.equation, n),
                                                  dtype=torch.float64).detach()))
                      for n, t in coefficients])
    _check_affine(model, _values(model, coefficients, z_fit))
    lines = _Lines(model, nodes)
    scale = max(float(np.std(y)), 1e-12)

    def residual(z, grid=lines):
        u = grid.solve(_values(model, coefficients, z), X)
        return np.full(len(y), 1e3) if u is None else (u - y) / scale

    at_fit = residual(z_fit)
    tol = stage_tolerance(len(z_fit))
    J0 = _jacobian(residual, z_fit, at_fit)
    # where one Gauss-Newton step from the fit's coefficients gains under a quarter of the
    # tolerance, they are the optimum's neighbourhood: no search (P + 1 solves in all)
    step = np.linalg.lstsq(J0, -at_fit, rcond=None)[0]
    if _loglik(at_fit + J0 @ step) - _loglik(at_fit) <= tol / 4:
        best, r_best, J = z_fit, at_fit, J0
    else:
        opt = optimize.least_squares(residual, z_fit, method="lm", diff_step=1e-4,
                                     max_nfev=max_nfev * (len(z_fit) + 1))
        moved = _loglik(opt.fun) >= _loglik(at_fit)
        best, r_best, J = (opt.x, opt.fun, opt.jac) if moved else (z_fit, at_fit, J0)
    fine = _Lines(model, 2 * int(nodes) - 1)
    shift = abs(_loglik(residual(best, fine)) - _loglik(r_best))
    # Gauss-Newton covariance of the unconstrained coefficients, the noise at its maximum
    s2 = float(np.sum(r_best ** 2)) / max(len(y) - len(best), 1)
    cov = np.linalg.pinv(J.T @ J) * s2
    zq = float(stats.norm.ppf(0.5 + prob / 2))
    out = {}
    for k, (n, t) in enumerate(coefficients):
        sd = math.sqrt(max(cov[k, k], 0.0))
        ends = [float(t(torch.tensor(best[k] + s * zq * sd))) for s in (-1.0, 1.0)]
        out[n] = {"value": float(t(torch.tensor(best[k]))), "lower": min(ends),
                  "upper": max(ends)}
    fit_ll, best_ll = _loglik(at_fit), _loglik(r_best)
    verdict = ("unresolved" if shift > GRID_TOLERANCE
               else "disagree" if best_ll - fit_ll > tol else "agree")
    fit_values = {n: float(t(torch.tensor(v))) for (n, t), v in zip(coefficients, z_fit)}
    return MethodOfLinesCheck(fit_values, out, fit_ll, best_ll, tol, verdict, int(nodes),
                              shift, time.process_time() - began)


def _checked(model):
    """Whether :func:`lines_stage` serves ``model``: one equation of an evolution in one
    space input and time ``t``, a zero or known source, learned scalar coefficients, noisy
    data (a learned noise: exact boundary values are a solver's, not data to score). A
    coefficient of a condition (a Robin boundary's ``"robin.k"``) is not one the lines
    integrate (their boundary values are the posterior's): such a fit is not checked."""
    return (hasattr(model, "equation") and len(model.input_names) == 2
            and "t" in model.input_names and model.source_kind != "gp"
            and model.X.shape[0] >= 3 and bool(model._learned())
            and set(model._learned()) <= set(model.equation.specs)
            and model._noise_is_learned() and not model.count_outputs)


def lines_stage(model, refit=None):
    r"""After a fit (a stage of :attr:`~pyro_pidkl.models.PhysicsConditionedGP.after_fit_stages`):
    the method-of-lines check on :data:`LINES_NODES` nodes of a fit it serves, kept as
    ``model.lines`` (``None`` where it does not serve, or refuses: an equation that reads
    more than :math:`u, u_x, u_{xx}, u_t` or is not affine in :math:`u_t`). Its verdict
    joins the adequacy check: ``"disagree"`` (the fit's coefficients outside the 99%
    likelihood region of the integrated equation's optimum, on a grid that resolves it)
    is a misfit, warned in one line, and each coefficient's interval is widened to reach
    the optimum and not identified (:func:`widen_to_lines`); ``"unresolved"`` (the check's
    own grid does not resolve the solution) judges nothing."""
    model.lines = None
    if not _checked(model):
        return
    try:
        with torch.no_grad():
            model.lines = method_of_lines_check(model, nodes=LINES_NODES)
    except ValueError:                  # an equation the check cannot integrate
        model.lines = None


def widen_to_lines(intervals, check):
    """``intervals`` (``coefficient_intervals()``'s) where the method-of-lines ``check``
    disagrees: each widened to reach the check's optimum, not identified, with
    ``"lines"`` its value; as they are otherwise."""
    if check is None or check.verdict != "disagree":
        return intervals
    out = {}
    for n, v in intervals.items():
        other = check.lines.get(n)
        if other is None:
            out[n] = v
            continue
        out[n] = {**v, "lower": min(v["lower"], other["value"]),
                  "upper": max(v["upper"], other["value"]), "identified": False,
                  "lines": other["value"]}
    return out
