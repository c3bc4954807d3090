r"""The textbook fit of an explicit ODE: its exact trajectory fitted to the data by least
squares, with Laplace (Gauss-Newton) intervals.

For an ODE :math:`x' = F(t, x; \theta)` (a system, :func:`~pyro_pidkl.physics.ode.explicit_ode`,
or one equation of any order, :func:`~pyro_pidkl.physics.scalar_ode.equation_ode`) and
observations :math:`y_{c,i}` of some components at times :math:`t_{c,i}` with Gaussian noise
of unknown scale :math:`\sigma_c`, the coefficients :math:`\theta` (unconstrained) and the
initial state :math:`x_0` maximise

.. math:: \log p(y \mid \theta, x_0) = -\sum_c \frac{n_c}{2}
    \log \frac1{n_c} \sum_i \big(y_{c,i} - x_c(t_{c,i}; \theta, x_0)\big)^2 + \text{const}

(each noise at its maximum). :func:`fit_exact` searches a design of starts at once
(:func:`~pyro_pidkl.infer.multistart.multistart_shooting`: multiple, then single shooting by
Levenberg-Marquardt on fixed-step Runge-Kutta trajectories), refines the best few with the
adaptive solver (:func:`~pyro_pidkl.infer.shooting.fit_by_shooting`, LSODA), and takes the
covariance of :math:`[\theta; x_0]` from the Gauss-Newton Hessian :math:`J^\top J` of the
standardised residuals, each noise at its unbiased estimate
:math:`\hat\sigma_c^2 = \sum_i r_{c,i}^2 / (n_c - p n_c / n)`. Intervals of a coefficient
are its normal interval in the unconstrained space mapped through its constraint, as the
conditioned GPs' are (:func:`~pyro_pidkl.infer.laplace.coefficient_intervals`). What NumPyro
or Stan with an ODE solver would maximise (with flat priors), in a second or two.

A component observed as counts (an observation ``(t, y, likelihood)``, its state the log of
their mean) enters by its deviance residuals, whose half sum of squares is its exact
negative log-likelihood (:mod:`~pyro_pidkl.infer.deviance`): the fit is then maximum
likelihood for Poisson or negative-binomial data, and :math:`J^\top J` their Fisher
information.
"""

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from .deviance import residual_scales
from .laplace import IDENTIFIED_PRIOR_SD, IDENTIFIED_SHRINK
from .multistart import multistart_shooting, start_design
from .shooting import _Shooting, fit_by_shooting

__all__ = ["AT_BOUND", "SEARCH_PRIOR_SD", "ExactFit", "at_bound", "fit_exact", "normal_intervals",
           "trajectory_nll"]

#: sd, in the unconstrained space, of the weak normal prior about the first start that holds
#: the search's Levenberg-Marquardt steps where :func:`fit_exact` is given no prior (a model
#: whose own density of its coefficients is another: a declared prior, a user's factor). With
#: the segments held loosely, a coefficient they do not need (a damping, whose decay each
#: segment's own state absorbs) has a vanishing Jacobian column, and an undamped step runs it
#: onto its bound's plateau, where no later stage can bring it back: on the README's spring
#: every start ended at c = e^-1766 (profiled nll -77.7 against the truth's basin's -126.0),
#: and the edited spring's exact check then reported k 3.8474 where its posterior is at
#: 3.8801. A design corner (a factor of 1000 off, 6.9 in a log) costs 2.6 nats under it.
SEARCH_PRIOR_SD = 3.0

#: a coefficient this many times nearer its lower bound than every start has run to it (far
#: outside the search's design, a thousand either way): its Laplace curvature is taken in
#: the coefficient itself, not in its unconstrained value (as the state-space solver's,
#: :data:`~pyro_pidkl.statespace.model.AT_ZERO`)
AT_BOUND = 1e6


@dataclass
class ExactFit:
    r"""What :func:`fit_exact` found: ``names`` the coefficients, ``theta`` their
    unconstrained values ``(P,)``, ``transforms`` each one's map to its constrained value,
    ``x0`` the initial state ``(C,)`` at ``t0``, ``sd`` each component's noise scale
    ``(C,)``, ``nll`` the profiled negative log-likelihood of the data (module docstring),
    ``cov`` the Laplace covariance of :math:`[\theta; x_0 / \text{scale}]` (the
    coefficients' prior precision added, where given), ``scale`` the state's scale,
    ``identified`` whether the data alone narrow each coefficient, ``boundary`` the
    coefficients run to their lower bound (:data:`AT_BOUND`; their rows of ``cov`` in the
    coefficient's own units), ``starts`` how many starts were searched, ``seconds`` the
    time."""

    names: list
    theta: np.ndarray
    transforms: list
    x0: np.ndarray
    t0: float
    sd: np.ndarray
    nll: float
    cov: np.ndarray
    scale: np.ndarray
    identified: np.ndarray = None
    boundary: list = field(default_factory=list)
    starts: int = 0
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    def values(self):
        """The coefficients ``{name: float}`` (constrained)."""
        return {n: float(t(torch.tensor(v))) for n, t, v in zip(self.names, self.transforms,
                                                                 self.theta)}

    def theta_sd(self):
        """Each coefficient's standard deviation in its unconstrained space ``(P,)`` (in its
        own units for one in :attr:`boundary`)."""
        P = len(self.names)
        d = np.diag(self.cov)[:P] if self.cov.size else np.full(P, np.inf)
        return np.sqrt(np.where(np.isfinite(d) & (d >= 0), d, np.inf))

    def intervals(self, prob=0.9):
        r"""Central ``prob`` intervals ``{name: {"value", "lower", "upper", "sd",
        "identified"}}`` (:func:`normal_intervals`): ``identified`` where the unconstrained
        standard deviation is below :data:`~pyro_pidkl.infer.laplace.IDENTIFIED_SHRINK`
        times :data:`~pyro_pidkl.infer.laplace.IDENTIFIED_PRIOR_SD`."""
        sd = self.theta_sd()
        known = self.identified if self.identified is not None else \
            sd < IDENTIFIED_SHRINK * IDENTIFIED_PRIOR_SD
        out = normal_intervals(self.names, self.transforms, self.theta, sd, known, prob)
        # a coefficient run to its bound: its sd is in its own units (the curvature in the
        # coefficient, not in its log, where it vanishes), its interval one-sided from the
        # bound, and it is not identified (the data allow it to reach the bound)
        z = float(torch.distributions.Normal(0.0, 1.0).icdf(
            torch.tensor(0.5 + prob / 2, dtype=torch.float64)))
        for j in self.boundary:
            n, t = self.names[j], self.transforms[j]
            low = float(t(torch.tensor(-1e300, dtype=torch.float64)))
            out[n].update(lower=low, upper=out[n]["value"] + z * float(sd[j]),
                          sd=float(sd[j]), identified=False)
        return out

    def predict(self, ode, t_eval):
        """The fitted trajectory ``(C, T)`` at increasing times ``t_eval`` at or after ``t0``
        (``None`` where the integration fails)."""
        values = {n: t(torch.tensor(float(v), dtype=torch.float64))
                  for n, t, v in zip(self.names, self.transforms, self.theta)}
        traj = ode.integrate(self.t0, torch.as_tensor(self.x0)[None], np.asarray(t_eval),
                             values, max_evaluations=20000)
        return None if traj is None else traj[0]


def normal_intervals(names, transforms, theta, sd, identified, prob=0.9):
    r"""Central ``prob`` intervals of coefficients with unconstrained values ``theta`` and
    standard deviations ``sd`` (``inf`` where free): the normal interval in each one's
    unconstrained space mapped through its ``transform`` (as
    :func:`~pyro_pidkl.infer.laplace.coefficient_intervals`), ``sd`` in the coefficient's
    units by the delta method. Returns ``{name: {"value", "lower", "upper", "sd",
    "identified"}}``."""
    z = float(torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(0.5 + prob / 2,
                                                                     dtype=torch.float64)))
    out = {}
    for n, t, v, s, ok in zip(names, transforms, theta, sd, identified):
        u = torch.tensor(float(v), dtype=torch.float64)
        s = float(s)
        lo = float(t(u - z * s)) if math.isfinite(s) else float(t(torch.tensor(-1e300)))
        hi = float(t(u + z * s)) if math.isfinite(s) else float(t(torch.tensor(1e300)))
        slope = float(t.log_abs_det_jacobian(u, t(u)).exp())
        out[n] = {"value": float(t(u)), "lower": min(lo, hi), "upper": max(lo, hi),
                  "sd": float(abs(slope) * s), "identified": bool(ok)}
    return out


class _WithValues:
    """An ODE whose coefficients are held at ``values`` (``{name: float}``)."""

    def __init__(self, ode, values):
        self.ode, self.values = ode, {k: float(v) for k, v in values.items()}

    def rhs(self, t, state, values=None):
        return self.ode.rhs(t, state, {**self.values, **(values or {})})

    def integrate(self, t0, x0, t_eval, values=None, **kwargs):
        """The ODE's own integrator with the held values (exact where it is affine)."""
        return self.ode.integrate(t0, x0, t_eval, {**self.values, **(values or {})}, **kwargs)


def trajectory_nll(ode, observations, values, x0, t0, t1, scale, sd=None, max_nfev=60,
                   known=None):
    r""":math:`\min_{x_0}` of the profiled negative log-likelihood (module docstring) with
    the coefficients held at ``values`` (``{name: float}``, constrained), the initial state
    fitted by single shooting from ``x0``: ``(nll, x0)`` (``nll`` is ``inf`` where the
    integration fails)."""
    scale = np.asarray(scale, dtype=float)
    sd = 0.05 * scale if sd is None else np.asarray(sd, dtype=float)
    found = fit_by_shooting(_WithValues(ode, values), observations, [],
                            np.asarray(x0, dtype=float), t0, t1, scale, sd.copy(), segments=1,
                            max_nfev=max_nfev, known=known)
    return found.nll, found.x0


def _laplace(ode, observations, transforms, v, t0, t1, scale, sd, prior_precision=None,
             known=None, boundary=()):
    """The Gauss-Newton covariance of ``v`` (unconstrained coefficients, then the state over
    the scale) with the coefficients' prior precision ``(P, P)`` added, whether each
    coefficient is identified by the data alone (a vague normal prior of sd
    :data:`~pyro_pidkl.infer.laplace.IDENTIFIED_PRIOR_SD` instead, as the conditioned GPs
    judge it), and the noise scales it used. A coefficient in ``boundary`` (``{index:
    step}``, run to its lower bound; its derivatives by a ``step`` in it) is taken in its
    own units, not its unconstrained ones (where the data's
    curvature vanishes with the coefficient and left the others as narrow as if it were
    known), without its prior (which is in the unconstrained space)."""
    shooting = _Shooting(ode, observations, transforms, t0, t1, 1, scale, sd, 0.0)
    shooting.known = dict(known or {})
    r = shooting.fun(v)[:len(shooting.obs_c)] * shooting.sd[shooting.obs_c]
    n, p = r.size, v.size
    P = len(transforms)
    sd = np.array(shooting.sd, dtype=float)
    for c in range(len(scale)):
        rc = r[shooting.obs_c == c]
        if rc.size and c not in shooting.counts:
            dof = max(rc.size - p * rc.size / n, 1.0)
            sd[c] = max(math.sqrt(float(np.sum(rc ** 2)) / dof), 1e-12 * scale[c])
    shooting.sd = sd
    J = shooting.jac(v)
    if not np.isfinite(J).all():
        return np.full((p, p), np.inf), np.zeros(P, dtype=bool), sd
    base = shooting.fun(v) if boundary else None
    for j, step in dict(boundary).items():    # d r / d k by a step in k itself (a step in
        _, t = transforms[j]                  # its log moves it by nothing at the bound)
        k = t(torch.tensor(float(v[j]), dtype=torch.float64))
        moved = v.copy()
        moved[j] = float(t.inv(k + step))
        J[:, j] = (shooting.fun(moved) - base) / step
    A = J.T @ J

    def inverse(prior):
        B = A.copy()
        B[:P, :P] += prior
        lam, V = np.linalg.eigh(B)
        flat = lam <= 1e-10 * max(float(lam.max()), 1e-300)
        inv = (V[:, ~flat] / lam[~flat]) @ V[:, ~flat].T
        if flat.any():                      # a direction nothing curves: infinite
            loading = (V[:, flat] ** 2).sum(1) > 1e-3
            inv[loading, :] = np.inf
            inv[:, loading] = np.inf
        return inv

    prior = np.zeros((P, P)) if prior_precision is None else np.array(prior_precision)
    prior[list(boundary), :] = 0.0
    prior[:, list(boundary)] = 0.0
    cov = inverse(prior)
    plain = inverse(np.eye(P) / IDENTIFIED_PRIOR_SD ** 2)
    identified = np.diag(plain)[:P] < (IDENTIFIED_SHRINK * IDENTIFIED_PRIOR_SD) ** 2
    identified[list(boundary)] = False
    return cov, identified, sd


def at_bound(transforms, theta, starts):
    """Which coefficients ran to their lower bound: bounded below, and nearer it than
    :data:`AT_BOUND` times closer than every start (unconstrained ``starts`` ``(G, P)``):
    ``{index: step}``, the step of their derivatives (1e-4 of the nearest start's distance
    from the bound)."""
    out = {}
    for j, (_, t) in enumerate(transforms):
        low = float(t(torch.tensor(-1e300, dtype=torch.float64)))
        if not math.isfinite(low):
            continue
        value = float(t(torch.tensor(float(theta[j]), dtype=torch.float64))) - low
        given = min(float(t(torch.tensor(float(s), dtype=torch.float64))) - low
                    for s in np.asarray(starts)[:, j])
        if given > 0 and value * AT_BOUND < given:
            out[j] = 1e-4 * given
    return out


def fit_exact(ode, observations, coefficients, x0_starts, t0, t1, scale, sd=None,
              design=0, design_half=None, design_states=None, refine=1, iterations=20, steps=8, prior=None,
              prior_precision=None, known=None, seed=0):
    r"""Fit the ODE's exact trajectory to the data (module docstring).

    :param ode: an :class:`~pyro_pidkl.physics.ode.ExplicitODE` (or an
        :class:`~pyro_pidkl.physics.scalar_ode.EquationODE`).
    :param observations: per state component, ``(t, y)`` arrays (empty where unmeasured).
    :param coefficients: ``[(name, transform, [start, ...])]``: each coefficient, the map
        from its unconstrained space, and its unconstrained starts (one per given start;
        every coefficient the same number).
    :param x0_starts: the initial state at ``t0`` of each given start ``(G, C)``, or the
        states at the segments' left ends ``(G, K, C)`` (multiple shooting's starts; ``K``
        the segments, default one per four data, 2 to 12).
    :param float t0: where the trajectories start (at or before the first datum).
    :param float t1: the last datum's time.
    :param scale: each component's typical size ``(C,)``.
    :param sd: each component's noise scale to start with (default ``0.05 scale``).
    :param int design: further starts, a Sobol design of coefficients in the box
        ``first start +- design_half`` (unconstrained), with the first given start's states.
    :param design_states: ``(C,)`` half-widths of the design in the states of unmeasured
        components (default: none searched).
    :param int refine: how many of the best starts the adaptive solver refines.
    :param int iterations: Levenberg-Marquardt iterations of the search's first stage
        (:func:`~pyro_pidkl.infer.multistart.multistart_shooting`).
    :param int steps: Runge-Kutta steps per segment in the search (coarse: the adaptive
        solver refines the best).
    :param prior: ``(loc, sd)`` ``(P,)`` each: a normal prior on the unconstrained
        coefficients, fitted with the data (a MAP fit; ``nll`` stays the data's).
    :param known: ``{component: value}``: known initial states at ``t0`` (held).
    :param prior_precision: ``theta -> (P, P)``, the Hessian of the coefficients' negative
        log prior at unconstrained ``theta``, added to the Laplace precision (default none:
        a coefficient the data leave free has an infinite interval).
    :returns: an :class:`ExactFit`.
    """
    began = time.perf_counter()
    scale = np.asarray(scale, dtype=float)
    sd = residual_scales(0.05 * scale if sd is None else
                         np.maximum(np.asarray(sd, dtype=float), 1e-9 * scale), observations)
    names = [n for n, _, _ in coefficients]
    transforms = [(n, t) for n, t, _ in coefficients]
    theta_given = np.array([list(s) for _, _, s in coefficients], dtype=float).T \
        if coefficients else np.zeros((len(x0_starts), 0))
    states = np.asarray(x0_starts, dtype=float)
    if states.ndim == 2:
        states = states[:, None, :]
    G, K, C = states.shape
    theta = theta_given.reshape(G, -1)
    if design and theta.shape[1]:
        half = np.asarray(design_half, dtype=float)
        centre = theta[0]
        extra_states = np.zeros(C) if design_states is None else np.asarray(design_states)
        searched = np.flatnonzero(extra_states > 0)
        box = start_design(np.r_[centre, states[0, 0, searched]],
                           np.r_[half, extra_states[searched]], design + 1, seed=seed)[1:]
        theta = np.vstack([theta, box[:, :len(centre)]])
        more = np.repeat(states[:1], design, 0)
        for j, c in enumerate(searched):
            more[:, :, c] += box[:, len(centre) + j][:, None] - states[0, 0, c]
        states = np.concatenate([states, more])
    # the search's steps held by a weak prior where the caller gives none (its ranking is the
    # data's alone; the adaptive refinement below carries the caller's prior, or none)
    search_prior = prior if prior is not None or not theta.shape[1] else (
        theta[0], np.full(theta.shape[1], SEARCH_PRIOR_SD))
    found = multistart_shooting(ode, observations, transforms, theta, states, t0, t1, scale, sd,
                                iterations=iterations, steps=steps, prior=search_prior,
                                known=known)
    best = None
    rows = [k for k in range(len(found.cost)) if np.isfinite(found.cost[k])][:refine]
    for th, x in [(found.theta[k], found.x0[k]) for k in rows]:
        start = [(n, t, float(v)) for (n, t), v in zip(transforms, th)]
        shot = fit_by_shooting(ode, observations, start, x, t0, t1, scale, sd.copy(),
                               segments=1, prior=prior, known=known)
        if np.isfinite(shot.cost) and (best is None or shot.cost < best.cost):
            best = shot
    if best is None:
        return None
    v = np.r_[best.theta, best.x0 / scale]
    prior = None if prior_precision is None else prior_precision(best.theta)
    boundary = at_bound(transforms, best.theta, theta_given) if len(theta_given) else {}
    cov, identified, sd_hat = _laplace(ode, observations, transforms, v, t0, t1, scale,
                                       best.sd, prior, known, boundary)
    return ExactFit(names, np.asarray(best.theta, dtype=float), [t for _, t in transforms],
                    np.asarray(best.x0, dtype=float), float(t0), sd_hat, float(best.nll), cov,
                    scale, identified, sorted(boundary), starts=len(theta),
                    seconds=time.perf_counter() - began)
