r"""Coefficients of an ODE system by shooting: the trajectories integrated from their
initial values fitted to the data (Bock's multiple shooting, then single shooting).

For an explicit ODE :math:`f' = F(t, f; \theta)` (:func:`~pyro_pidkl.physics.ode.explicit_ode`)
and observations :math:`y_{c,i}` of some outputs at times :math:`t_{c,i}`, single shooting
minimises

.. math:: \sum_{c,i} \Big(\frac{y_{c,i} - x_c(t_{c,i}; \theta, x_0)}{\sigma_c}\Big)^2

over the coefficients :math:`\theta` (in their unconstrained space) and the initial state
:math:`x_0` (every output, observed or not). Multiple shooting cuts the data's time span
into ``K`` segments, each with its own initial state :math:`s_k`, and adds the mismatches
:math:`w\,(x(t_{k+1}; s_k) - s_{k+1}) / \text{scale}` for a weight :math:`w` raised
stage by stage: a segment only has to follow the data near it, so a start far from the
coefficients does not send the trajectory far from the data, and the objective has fewer
optima than single shooting's (Bock 1981; Peifer & Timmer 2007). The last stage, single
shooting from the first segment's state, makes the trajectory one solution of the ODE.

Each least-squares step (:func:`scipy.optimize.least_squares`, trust region) takes its
Jacobian by forward differences with every column's trajectories integrated together, as
one batch (:meth:`~pyro_pidkl.physics.ode.ExplicitODE.integrate`). The noise scales
:math:`\sigma_c` start where the caller puts them and are re-estimated from the residuals
once (a second pass), so that outputs measured with different noise weigh as they should.
An output observed as counts (an observation ``(t, y, likelihood)``) enters by its deviance
residuals instead, its noise its likelihood's (:mod:`~pyro_pidkl.infer.deviance`).
"""

from dataclasses import dataclass, field

import numpy as np
import scipy.optimize
import torch

from .deviance import count_likelihoods, data_nll, data_residuals, residual_scales

__all__ = ["ShootingResult", "default_segments", "fit_by_shooting", "profiled", "profiled_nll"]


@dataclass
class ShootingResult:
    r"""What :func:`fit_by_shooting` found: ``theta`` the coefficients (unconstrained,
    ``(P,)``), ``x0`` the initial state ``(C,)`` at ``t0``, ``cost`` half the sum of squared
    standardised residuals at the end (single shooting), ``sd`` the noise scales it ended
    with ``(C,)``, ``start_cost`` the same objective at the start, ``stages`` each
    stage's ``(segments, weight, cost)``, and ``nll`` the profiled negative
    log-likelihood of the data at the end, :math:`\sum_c (n_c/2) \log \overline{r_c^2}`
    (each output's noise at its maximum: comparable between fits whatever their noise
    scales)."""

    theta: np.ndarray
    x0: np.ndarray
    cost: float
    sd: np.ndarray
    start_cost: float
    stages: list = field(default_factory=list)
    nll: float = float("inf")

    @property
    def improved(self):
        """Whether it ended below where it started."""
        return bool(np.isfinite(self.cost) and self.cost < self.start_cost)


class _Shooting:
    """The residuals of ``K`` segments for a batch of parameter vectors."""

    def __init__(self, ode, observations, transforms, t0, t1, K, scale, sd, weight):
        self.ode, self.transforms = ode, transforms
        self.C, self.K, self.P = len(scale), K, len(transforms)
        self.counts = count_likelihoods(observations)
        self.scale, self.sd, self.weight = scale, residual_scales(sd, observations), weight
        self.edges = np.linspace(t0, t1, K + 1)
        self.delta = self.edges[1] - self.edges[0]
        rows = []
        for c, (t, y, *_) in enumerate(observations):
            for ti, yi in zip(t, y):
                k = min(max(int((ti - t0) // self.delta), 0), K - 1) if K > 1 else 0
                rows.append((c, k, ti - self.edges[k], yi))
        self.local = np.unique(np.r_[[r[2] for r in rows], self.delta])
        where = {v: j for j, v in enumerate(self.local)}
        self.obs_c = np.array([r[0] for r in rows])
        self.obs_k = np.array([r[1] for r in rows])
        self.obs_j = np.array([where[r[2]] for r in rows])
        self.obs_y = np.array([r[3] for r in rows])
        self.size = len(rows) + (K - 1) * self.C
        #: ``(loc, sd)`` of a normal prior on the unconstrained coefficients, or ``None``:
        #: its standardised residuals follow the data's (a MAP fit)
        self.prior = None
        #: ``{component: value}``: initial states that are known (held)
        self.known = {}

    def batch(self, V):
        """Residuals ``(B, R)`` of parameter vectors ``V`` ``(B, P + K C)``, or ``None``."""
        B, K, C, P = V.shape[0], self.K, self.C, self.P
        theta = torch.as_tensor(V[:, :P])
        values = {n: t(theta[:, i]).repeat_interleave(K)
                  for i, (n, t) in enumerate(self.transforms)}
        S = V[:, P:].reshape(B, K, C)
        if self.known:                      # known initial states: held, whatever v says
            S = S.copy()
            for c, value in self.known.items():
                S[:, 0, c] = value / self.scale[c]
        x = torch.as_tensor((S * self.scale).reshape(B * K, C))
        offset = np.tile(self.edges[:K], B)
        traj = self.ode.integrate(0.0, x, self.local, values, t_offset=offset)
        if traj is None:
            return None
        traj = traj.reshape(B, K, C, -1)
        fit = traj[:, self.obs_k, self.obs_c, self.obs_j]               # (B, N)
        out = [data_residuals(self.obs_y, fit, self.obs_c, self.sd, self.counts).numpy()]
        if K > 1:
            ends = traj[:, :-1, :, -1] / self.scale                    # (B, K-1, C)
            out.append((self.weight * (ends - S[:, 1:])).reshape(B, -1))
        if self.prior is not None:
            out.append((V[:, :P] - self.prior[0]) / self.prior[1])
        return np.concatenate(out, 1)

    def fun(self, v):
        r = self.batch(v[None])
        extra = 0 if self.prior is None else self.P
        return r[0] if r is not None else np.full(self.size + extra, 1e6)

    def jac(self, v):
        h = 1e-6 * np.maximum(1.0, np.abs(v))
        V = np.vstack([v, v + np.diag(h)])
        r = self.batch(V)
        if r is None:           # one column's integration failed: each column on its own
            r = np.stack([self.fun(row) for row in V])
        return ((r[1:] - r[0]) / h[:, None]).T

    def solve(self, v0, max_nfev):
        res = scipy.optimize.least_squares(self.fun, v0, jac=self.jac, method="trf",
                                           max_nfev=max_nfev, x_scale="jac")
        return res.x, float(res.cost)


def default_segments(n_data):
    """Multiple shooting's segments for ``n_data`` data: one per four data, 2 to 12."""
    return int(min(12, max(2, n_data // 4)))


def _segment_states(ode, theta_values, x0, t0, edges):
    """The trajectory from ``x0`` at the segments' left ends ``(K, C)`` (or ``None``)."""
    if len(edges) == 1:
        return x0[None]
    traj = ode.integrate(t0, torch.as_tensor(x0)[None], edges, theta_values)
    return None if traj is None else traj[0].T


def fit_by_shooting(ode, observations, coefficients, x0, t0, t1, scale, sd,
                    segments=None, weights=(1.0, 10.0, 100.0), max_nfev=60, refine_sd=True,
                    judged_from=None, prior=None, known=None):
    r"""Fit an ODE's coefficients and initial state to data by multiple shooting, then
    single shooting (module docstring).

    :param ode: an :class:`~pyro_pidkl.physics.ode.ExplicitODE`.
    :param observations: per output, ``(t, y)`` arrays (empty for an output never
        observed).
    :param coefficients: ``[(name, transform, start)]``: each learned coefficient, the
        transform from its unconstrained space, and its unconstrained start.
    :param x0: the initial state's start ``(C,)`` at ``t0`` (user units).
    :param float t0: where the trajectories start (at or before the first datum).
    :param float t1: the last datum's time.
    :param scale: each output's typical size ``(C,)`` (states are fitted divided by it).
    :param sd: each output's noise scale to start with ``(C,)``.
    :param int segments: ``K`` (default: one per four data, 2 to 12; 1 is single shooting
        alone).
    :param weights: the continuity weights of the multiple-shooting stages.
    :param int max_nfev: evaluations of the residuals per stage, at most (each with its
        Jacobian).
    :param prior: ``(loc, sd)`` ``(P,)`` each: a normal prior on the unconstrained
        coefficients whose standardised residuals join the data's (a MAP fit; ``cost``
        includes them, ``nll`` does not).
    :param known: ``{component: value}``: initial states at ``t0`` that are known (a
        condition's): held at their values.
    :param judged_from: ``(theta, x0)`` where ``start_cost`` is measured (default: the
        start): a fit started elsewhere (another start's answer) judged against the
        caller's own start.
    :returns: a :class:`ShootingResult`.
    """
    scale = np.asarray(scale, dtype=float)
    sd = residual_scales(np.maximum(np.asarray(sd, dtype=float), 1e-6 * scale), observations)
    counts = count_likelihoods(observations)
    transforms = [(n, t) for n, t, _ in coefficients]
    theta = np.array([float(s) for _, _, s in coefficients], dtype=float)
    x0 = np.asarray(x0, dtype=float)
    n_data = sum(len(o[0]) for o in observations)
    if segments is None:
        segments = default_segments(n_data)
    stages = []

    def shooting(sd, K=1, weight=0.0):
        out = _Shooting(ode, observations, transforms, t0, t1, K, scale, sd, weight)
        out.prior, out.known = prior, dict(known or {})
        return out

    def single(theta, x0, sd, nfev):
        v, cost = shooting(sd).solve(np.r_[theta, x0 / scale], nfev)
        return v[:len(theta)], v[len(theta):] * scale, cost

    def single_cost(theta, x0, sd):
        return 0.5 * float(np.sum(shooting(sd).fun(np.r_[theta, x0 / scale]) ** 2))

    theta_start, x_start = theta.copy(), x0.copy()
    judge = (theta_start, x_start) if judged_from is None else tuple(
        np.asarray(v, dtype=float) for v in judged_from)
    candidates = []
    # multiple shooting from the start's trajectory (or from x0 everywhere where it fails)
    if segments > 1:
        edges = np.linspace(t0, t1, segments + 1)[:-1]
        values = {n: t(torch.tensor(theta[i])) for i, (n, t) in enumerate(transforms)}
        S = _segment_states(ode, values, x0, t0, edges)
        S = np.tile(x0, (segments, 1)) if S is None else S
        v = np.r_[theta, (S / scale).reshape(-1)]
        for w in weights:
            v, cost = shooting(sd, segments, w).solve(v, max_nfev)
            stages.append((segments, w, cost))
        P = len(theta)
        candidates.append((v[:P], v[P:P + len(scale)] * scale))
    candidates.append((theta_start, x_start))
    best = None
    for th, x in candidates:
        th, x, cost = single(th, x, sd, max_nfev)
        stages.append((1, 0.0, cost))
        if best is None or cost < best[2]:
            best = (th, x, cost)
    theta, x0, cost = best
    if refine_sd:
        s = shooting(sd)
        r = s.fun(np.r_[theta, x0 / scale])[:len(s.obs_c)] * sd[s.obs_c]
        for c in range(len(scale)):
            rc = r[s.obs_c == c]
            if len(rc) > 2 and c not in counts:
                sd[c] = max(float(np.sqrt(np.mean(rc ** 2))), 1e-3 * scale[c])
        theta, x0, cost = single(theta, x0, sd, max_nfev)
        stages.append((1, 0.0, cost))
    # the start's cost at the noise scales the fit ended with: the two compare
    start_cost = single_cost(*judge, sd)
    x0 = np.array(x0, dtype=float)
    for c, value in (known or {}).items():
        x0[c] = value
    return ShootingResult(theta, x0, cost, sd, start_cost, stages,
                          profiled_nll(shooting(sd), np.r_[theta, x0 / scale]))


def profiled_nll(shooting, v):
    r""":math:`\sum_c (n_c/2) \log \overline{r_c^2}`, the data's negative log-likelihood
    under the single-shooting trajectory of ``v`` (coefficients, then the initial state over
    the scale), each output's noise at its maximum (``inf`` where the integration fails);
    a count output's is its likelihood's (:func:`~pyro_pidkl.infer.deviance.data_nll`)."""
    r = shooting.batch(v[None])
    if r is None:
        return float("inf")
    r = r[:, :len(shooting.obs_c)] * shooting.sd[shooting.obs_c]
    return float(data_nll(r, shooting.obs_c, shooting.counts)[0])


def profiled(residuals):
    r""":math:`\sum_c (n_c/2) \log \overline{r_c^2}` of each output's residuals (an
    iterable of arrays, data units): the negative log-likelihood with each output's noise
    at its maximum, constants dropped."""
    return float(sum(0.5 * len(r) * np.log(max(float(np.mean(np.square(r))), 1e-300))
                     for r in residuals))
