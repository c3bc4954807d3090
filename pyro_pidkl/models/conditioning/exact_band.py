r"""A band that carries what its coefficients allow: where the exact ODE refereed a
conditioned fit (:mod:`~pyro_pidkl.models.conditioning.referee`), the coefficients' share of a
prediction's variance by the textbook delta method on the exact trajectory, and that
trajectory itself (the GP's mean is asked to hold it within the band)."""

import math
import warnings

import numpy as np
import torch

from ...checks import warn
from ...errors import BandApproximationWarning

__all__ = ["BandApproximationWarning", "exact_parameter_spread"]

#: where the trajectories at :math:`\theta \pm s_k` bend from the centre by more than this
#: share of their half difference (the second-order term of the delta method against the
#: first: a quadratic trajectory whose centre of the spread moves by half its sd), the band
#: is said to be approximate
BEND_LIMIT = 0.5


class _Backwards:
    """An explicit ODE in reversed time about ``t0``: :math:`\tau = 2 t_0 - t`,
    :math:`dx/d\tau = -F(2 t_0 - \tau, x)`, so that times before ``t0`` are integrated
    forwards from it."""

    #: integrated by LSODA (the matrix exponential serves the forward ODE)
    affine = False

    def __init__(self, ode, t0):
        self.ode, self.t0 = ode, float(t0)

    def rhs(self, t, state, values=None):
        return -self.ode.rhs(2 * self.t0 - t, state, values)

    def rhs_plain(self, t, state, values=None):
        return -self.ode.rhs_plain(2 * self.t0 - t, state, values)

    def integrate(self, *args, **kwargs):
        from ...physics.ode import ExplicitODE
        return ExplicitODE.integrate(self, *args, **kwargs)


def _exact_path(exact, ode, grid):
    """The exact fit's trajectory ``(S, T)`` at increasing times ``grid``, those before its
    start integrated backwards from it; ``None`` where an integration fails."""
    before, after = grid[grid < exact.t0], grid[grid >= exact.t0]
    parts = []
    with torch.no_grad():
        if before.size:
            back = exact.predict(_Backwards(ode, exact.t0), (2 * exact.t0 - before)[::-1])
            if back is None:
                return None
            parts.append(back[:, ::-1])
        if after.size:
            parts.append(exact.predict(ode, after))
    if any(p is None for p in parts):
        return None
    path = np.concatenate(parts, 1)
    return path if np.isfinite(path).all() else None


def exact_parameter_spread(model, t, full_cov=False):
    r"""The coefficients' share of a prediction's variance at times ``t`` ``(P,)`` (user
    units), from the exact ODE the referee fitted: for each direction :math:`s_k` of the
    coefficients' Laplace covariance :math:`C_{\theta\theta}` (the one the intervals report),
    the exact trajectory from :math:`\theta \pm s_k`, its initial state moved with them by
    its regression on the coefficients (:math:`x_0 \pm C_{x\theta} C_{\theta\theta}^{-1}
    s_k`: the data still pin the trajectory where they are), and

    .. math::
        \operatorname{var} x(t) \mathrel{+}= \sum_k \Big(\tfrac12 \big(x_{+s_k}(t) -
            x_{-s_k}(t)\big)\Big)^2 ,

    the delta method of the textbook fit (the GP's own variance, given the coefficients,
    holds the rest). So a band carries what its coefficients allow: where the function
    approaches a coefficient (a logistic's capacity), its sd reaches that coefficient's.
    The exact trajectory itself is returned too: where the GP's mean strays from it (an
    approximation's error), the prediction adds the square of the gap, as the referee's
    intervals hold both fits' estimates.

    :returns: ``(share, path)``: ``share`` ``(S, P)`` (``(S, P, P)`` with ``full_cov``) over
        the ODE's states (one equation: the value and its derivatives; a system: its
        outputs), ``path`` the exact trajectory ``(S, P)``, in the user's units (times
        before the exact fit's start integrated backwards from it); ``None`` where the
        referee did not run, found a worse fit than the GP's (``"gp"``), a coefficient is
        unidentified or at its bound, or a trajectory does not integrate."""
    import dataclasses
    report = getattr(model, "referee", None)
    if report is None or report.verdict == "gp" or report.exact is None or report.ode is None:
        return None
    exact = report.exact
    P = len(exact.names)
    t = np.asarray(t, dtype=float).reshape(-1)
    if P == 0 or exact.boundary or t.size == 0:
        return None
    cov = np.asarray(exact.cov, dtype=float)
    C = 0.5 * (cov[:P, :P] + cov[:P, :P].T)
    if not np.isfinite(C).all():
        return None
    # the band claims what the intervals claim: where they are wider than the exact fit's
    # (the union of both fits', "agree"), the exact covariance is stretched to their widths
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reported = model.coefficient_intervals(0.9)
    own = exact.intervals(0.9)
    stretch = np.array([max(1.0, reported[n]["sd"] / own[n]["sd"])
                        if own[n]["sd"] > 0 and math.isfinite(reported[n]["sd"]) else 1.0
                        for n in exact.names])
    C = C * stretch[:, None] * stretch[None, :]
    cov = cov.copy()
    cov[P:, :P] = cov[P:, :P] * stretch[None, :]
    cross = cov[P:, :P]
    cross = np.where(np.isfinite(cross).all(1, keepdims=True), cross, 0.0)   # known states
    B = cross @ np.linalg.pinv(C)
    lam, V = np.linalg.eigh(C)
    grid, where = np.unique(t, return_inverse=True)
    centre = _exact_path(exact, report.ode, grid)
    if centre is None:
        return None
    out, bend = 0.0, 0.0
    for k in range(P):
        if not lam[k] > 1e-14 * max(float(lam.max()), 1e-300):
            continue
        step = V[:, k] * math.sqrt(lam[k])
        paths = []
        for sign in (1.0, -1.0):
            moved = dataclasses.replace(exact, theta=exact.theta + sign * step,
                                        x0=exact.x0 + sign * (B @ step) * exact.scale)
            path = _exact_path(moved, report.ode, grid)
            if path is None:
                return None
            paths.append(path[:, where])
        half = 0.5 * (paths[0] - paths[1])                            # (S, P)
        out = out + (half[:, :, None] * half[:, None, :] if full_cov else half ** 2)
        bend = bend + (0.5 * (paths[0] + paths[1]) - centre[:, where]) ** 2
    if isinstance(out, float):
        return None
    first = np.sqrt(np.diagonal(out, axis1=1, axis2=2) if full_cov else out)
    ratio = np.sqrt(bend) / np.maximum(first, 1e-300)
    if float(ratio.max()) > BEND_LIMIT:
        at = t[np.asarray(ratio.max(0) > BEND_LIMIT)]
        warn(f"The band of {model._what()} at t in [{at.min():.3g}, {at.max():.3g}] is the "
             f"delta method's, and its coefficients' uncertainty bends the trajectory there "
             f"(second-order term up to {float(ratio.max()):.1f} of the first): the band's "
             f"level is approximate; pk.infer.sample_coefficients gives it without the "
             f"linearisation", BandApproximationWarning)
    return out, centre[:, where]
