r"""Fitting an ODE's coefficients, initial state and noise by the probabilistic solver's
likelihood (:class:`~pyro_pidkl.statespace.ode_filter.ODEFilter`).

:func:`fit_ode_filter` maximises :math:`\log p(y \mid o = 0)` over
:math:`v = [\theta; x_0 / s; \log \sigma_y / s]` by L-BFGS-B (scipy, gradients by torch),
in stages of falling diffusion floors (tempering: first a loose prior that follows the
data, last the calibrated diffusion), and refreshes the linearisation point (the smoothed
mean) after each optimisation until it settles. The covariance of :math:`v` is the inverse
of the Hessian of :math:`-\log p(y \mid o = 0)` at the optimum (Laplace, by autograd).
"""

import time
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.optimize import minimize

__all__ = ["FilterFit", "fit_ode_filter", "laplace"]


@dataclass
class FilterFit:
    r"""What :func:`fit_ode_filter` found: ``v`` the parameters (module docstring),
    ``cov`` their Laplace covariance, ``u_star`` the linearisation point ``(N, C)``, the
    log evidence, the calibrated diffusion, the number of evaluations and the time."""

    v: np.ndarray
    cov: np.ndarray
    u_star: torch.Tensor
    log_evidence: float
    diffusion: float
    evaluations: int = 0
    seconds: float = 0.0
    stages: list = field(default_factory=list)
    hessian: np.ndarray = None
    boundary: list = field(default_factory=list)


def _objective(filt, u_star, floor, counter):
    def f(x):
        counter[0] += 1
        v = torch.as_tensor(x, dtype=torch.float64).requires_grad_(True)
        try:
            out = filt.evidence(v, u_star, floor=floor)
            loss = -out["log_evidence"]
            if not torch.isfinite(loss):
                return np.inf, np.zeros_like(x)
            g, = torch.autograd.grad(loss, v)
            loss = loss.detach()
        except (RuntimeError, ValueError):          # a non-positive-definite trial point
            return np.inf, np.zeros_like(x)
        g = g.numpy()
        if not np.isfinite(g).all():
            return np.inf, np.zeros_like(x)
        return float(loss), g
    return f


def smoothed_values(filt, v, u_star, floor=0.0):
    """The smoothed components at the nodes ``(N, C)`` (solver units), detached."""
    with torch.no_grad():
        out = filt.evidence(torch.as_tensor(v, dtype=torch.float64), u_star, floor=floor,
                            smooth=True)
    return filt.nodes_mean(out["mean"]), out


def fit_ode_filter(filt, v0, u_star, floors=(1e4, 1e2, 1.0), relinearise=6, tol=1e-4,
                   bounds=None, max_iter=200, final=True):
    r"""Maximise the solver's likelihood (module docstring).

    :param filt: an :class:`~pyro_pidkl.statespace.ode_filter.ODEFilter`.
    :param v0: the starting parameters ``(P + C + measured,)``.
    :param u_star: the first linearisation point ``(N, C)`` (solver units).
    :param floors: the diffusion floors of the tempering stages, as multiples of the
        diffusion calibrated at ``v0``; a last stage at the calibrated diffusion follows.
    :param int relinearise: the most refreshes of the linearisation point per stage.
    :param float tol: the linearisation point has settled when no component moves by more
        than ``tol`` (solver units).
    :param bool final: run the last stage at the calibrated diffusion (``False``: the
        tempering stages only). The covariance is left empty: :func:`laplace` fills it.
    :returns: a :class:`FilterFit`.
    """
    began = time.perf_counter()
    v = np.asarray(v0, dtype=float).copy()
    u_star = torch.as_tensor(u_star, dtype=torch.float64)
    counter = [0]
    # the floors are multiples of the diffusion calibrated at the start (no smoothing needed)
    out, base = None, None
    if floors:
        with torch.no_grad():
            out = filt.evidence(torch.as_tensor(v, dtype=torch.float64), u_star)
        base = float(out["calibrated"])
    stages = []
    for floor in [base * f for f in floors] + ([0.0] if final else []):
        if floor and floor <= float(out["calibrated"]):
            continue                  # the floor binds no more: this stage is the last one
        for _ in range(relinearise):
            res = minimize(_objective(filt, u_star, floor, counter), v, jac=True,
                           method="L-BFGS-B", bounds=bounds,
                           options={"maxiter": max_iter})
            if np.isfinite(res.fun):
                v = res.x
            new, out = smoothed_values(filt, v, u_star, floor)
            moved = float((new - u_star).abs().max())
            u_star = new
            if moved < tol:
                break
            # settled too where the new point leaves the objective as it was (a linear ODE:
            # the linearisation is the ODE wherever it is taken)
            with torch.no_grad():
                again = float(filt.evidence(torch.as_tensor(v), u_star, floor=floor)[
                    "log_evidence"])
            if abs(again - float(out["log_evidence"])) < 1e-9 * (1 + abs(again)):
                break
        stages.append({"floor": floor, "log_evidence": float(out["log_evidence"]),
                       "diffusion": float(out["diffusion"]), "evaluations": counter[0]})
    return FilterFit(v, np.zeros((0, 0)), u_star, float(out["log_evidence"]),
                     float(out["diffusion"]), counter[0], time.perf_counter() - began, stages)


def laplace(filt, fit, boundary=()):
    r"""The Laplace covariance at ``fit`` (a :class:`FilterFit` of the final stage): the
    inverse of the Hessian of :math:`-\log p(y \mid o = 0)` by autograd, set on
    ``fit.cov`` (``inf`` where the Hessian is singular), the Hessian in :math:`v` on
    ``fit.hessian``.

    :param boundary: indices of positive coefficients run to zero (their log far below
        any value the search tried; for one bounded below by :math:`a`, :math:`k - a`):
        their curvature is taken in :math:`k = e^{v}` itself, where it is finite at zero, not in its log, where it
        vanishes and would decouple the rate from the others (a rate that trades off
        against another, as two reactions that consume the same species, would leave the
        other's interval as narrow as if it were alone). ``fit.cov`` is then the
        covariance of :math:`w` (:math:`w_j = k_j` for those, :math:`v` otherwise), and
        ``fit.boundary`` lists them."""
    began = time.perf_counter()
    boundary = sorted(int(j) for j in boundary)
    vt = torch.as_tensor(fit.v, dtype=torch.float64)
    wt = vt.clone()
    transforms = [t for _, t in filt.transforms]
    for j in boundary:            # the coefficient's own value (its log is far out)
        wt[j] = transforms[j](vt[j])

    def loss_w(w):
        return -filt.evidence(w, fit.u_star, direct=boundary)["log_evidence"]
    try:
        Hw = torch.autograd.functional.hessian(loss_w, wt).numpy()
        Hw = 0.5 * (Hw + Hw.T)
        if boundary:           # the same curvature in v (chain rule) for the predictions
            w = wt.clone().requires_grad_(True)
            g, = torch.autograd.grad(loss_w(w), w)
            d = np.ones(len(fit.v))
            for j in boundary:
                d[j] = float(transforms[j].log_abs_det_jacobian(vt[j], wt[j]).exp())
            Hv = d[:, None] * Hw * d[None, :]
            Hv[boundary, boundary] += g.numpy()[boundary] * d[boundary]
        else:
            Hv = Hw
        fit.hessian = Hv
        fit.cov = np.linalg.inv(Hw) if np.isfinite(Hw).all() else None
    except (np.linalg.LinAlgError, RuntimeError, ValueError):
        fit.cov = None
    if fit.cov is None:
        fit.cov = np.full((len(fit.v), len(fit.v)), np.inf)
    fit.boundary = boundary
    fit.stages.append({"hessian_seconds": time.perf_counter() - began})
    fit.seconds += time.perf_counter() - began
    return fit
