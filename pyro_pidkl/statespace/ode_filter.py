r"""The marginal likelihood of an ODE's coefficients in :math:`O(N)`: a probabilistic ODE
solver conditioned on the data (Fenrir; Tronarp, Bosch & Hennig, ICML 2022).

For an explicit ODE :math:`x' = F(t, x; \theta)` (:mod:`~pyro_pidkl.physics.ode`) with
``C`` components, some observed with Gaussian noise, each component gets an integrated
Wiener process prior of order ``q`` (:mod:`~pyro_pidkl.statespace.iwp`) on a grid of nodes
(the data's times and a uniform grid over the span), started exactly at the initial state
:math:`x_0` (its derivatives from the ODE), and is conditioned on the ODE at every node,

.. math:: o_n = x'(t_n) - F(t_n, x(t_n); \theta) = 0,

linearised around a trajectory :math:`x^*` (first order, EK1; exact for a linear ODE). The
model is then linear and Gaussian, and the parallel Kalman filter
(:mod:`~pyro_pidkl.statespace.kalman`) gives in :math:`O(N)` work

.. math:: \log p(y \mid o = 0; \theta, x_0, s) = \log p(y, o = 0) - \log p(o = 0),

the data's likelihood under the ODE's solution with the solver's own error folded in: the
objective of the conditioned GPs (:math:`\log p(y \mid v)`) with a Markov prior. The
diffusion :math:`\sigma^2` (the prior's trust in the ODE between nodes) is calibrated by
its closed-form maximum of :math:`p(o = 0)` (every covariance scales with it), held above
a floor that falls stage by stage during a fit (diffusion tempering, Beck et al., ICML
2024: a loose prior lets the trajectory follow the data first, which keeps the fit away
from the local optima of an oscillating ODE). The linearisation point is the posterior
mean of the previous stage, refreshed until it settles (iterated extended Kalman
smoothing, as the conditioned GP's Gauss-Newton steps).
"""

import math

import numpy as np
import torch

from .iwp import block_transition, projection
from .kalman import kalman_filter, rts_smoother

__all__ = ["ODEFilter"]

#: the ODE's virtual observations are exact: this noise (times the diffusion) only keeps
#: their covariance away from singular
ODE_JITTER = 1e-12


class ODEFilter:
    r"""The data's likelihood under an explicit ODE by a probabilistic solver (module
    docstring), as a function of the coefficients (unconstrained), the initial state and
    the noise scales.

    :param ode: an :class:`~pyro_pidkl.physics.ode.ExplicitODE` (or ``EquationODE``).
    :param observations: per component, ``(t, y)`` arrays (empty where unmeasured).
    :param transforms: ``[(name, transform)]`` of the coefficients learned.
    :param float t0: the first node (at or before the first datum).
    :param float t1: the last node.
    :param scale: each component's typical size ``(C,)``: the state is solved for in these
        units.
    :param int nodes: uniform nodes over ``[t0, t1]`` besides the data's times.
    :param int q: the prior's order (its state holds ``q`` derivatives).
    """

    def __init__(self, ode, observations, transforms, t0, t1, scale, nodes=200, q=2):
        self.ode, self.transforms, self.q = ode, list(transforms), int(q)
        self.C = len(observations)
        self.scale = torch.as_tensor(np.asarray(scale, dtype=float))
        times = [np.asarray(t, dtype=float) for t, *_ in observations]
        grid = np.unique(np.concatenate([np.linspace(t0, t1, nodes)] + times))
        self.t = torch.as_tensor(grid)
        N, C = len(grid), self.C
        y = torch.zeros(N, C, dtype=torch.float64)
        seen = torch.zeros(N, C, dtype=torch.bool)
        for c, (tc, yc, *_) in enumerate(observations):
            idx = np.searchsorted(grid, np.asarray(tc, dtype=float))
            if len(np.unique(idx)) != len(idx):
                raise ValueError(f"Expected one datum of component {c} per time; got repeated "
                                 f"times")
            y[idx, c] = torch.as_tensor(np.asarray(yc, dtype=float)) / self.scale[c]
            seen[idx, c] = True
        self.y, self.seen = y, seen
        self.measured = [c for c in range(C) if bool(seen[:, c].any())]
        self.h = torch.cat([torch.ones(1, dtype=torch.float64), self.t.diff()])
        self.E0, self.E1 = projection(self.q, C, 0), projection(self.q, C, 1)
        # the prior's transitions at unit diffusion (the diffusion scales Q alone)
        self.A, self.Q1 = block_transition(self.q, self.h, torch.ones(C, dtype=torch.float64))

    # -- the parameters ------------------------------------------------------------
    @property
    def P(self):
        return len(self.transforms)

    def split(self, v):
        """``v = [theta (P); x0 / scale (C); log sd / scale (measured)]`` as its parts."""
        P, C = self.P, self.C
        return v[:P], v[P:P + C], v[P + C:]

    def values(self, theta, direct=()):
        """The coefficients ``{name: value}`` from their unconstrained ``theta``; those at
        ``direct`` are the values themselves (:func:`~pyro_pidkl.statespace.fit.laplace`'s
        curvature of a rate at zero)."""
        return {n: theta[k] if k in direct else t(theta[k])
                for k, (n, t) in enumerate(self.transforms)}

    def _F(self, t, u, values):
        """The ODE in the solver's units: :math:`F(t, s u) / s` ``(B, C)``."""
        return self.ode.rhs(t, u * self.scale, values) / self.scale

    # -- the linearised ODE ---------------------------------------------------------
    def linearise(self, values, u_star):
        r"""The ODE's rows at every node: ``H`` ``(N, C, D)`` and ``z`` ``(N, C)`` with
        :math:`o_n \approx H_n x_n - z_n` around ``u_star`` ``(N, C)``: :math:`H = E_1 - J
        E_0`, :math:`z = F(u^*) - J u^*`, :math:`J = \partial F / \partial u` at
        :math:`u^*` (a function of the coefficients, for their gradients)."""
        with torch.enable_grad():
            u = u_star.detach().clone().requires_grad_(True)
            F = self._F(self.t, u, values)
            J = torch.stack([torch.autograd.grad(F[:, i].sum(), u, create_graph=True)[0]
                             for i in range(self.C)], 1)                    # (N, C, C)
        H = self.E1 - J @ self.E0
        z = F - (J @ u_star.detach()[..., None])[..., 0]
        return H, z

    def initial_state(self, values, u0):
        r"""The state at ``t0`` ``(D,)``: :math:`x_0`, :math:`x_0' = F(t_0, x_0)`, its
        second derivative by a central difference along the flow and its third by a second
        difference (errors :math:`O(\delta^2)`); orders above three start at zero."""
        t0 = self.t[:1]
        F0 = self._F(t0, u0[None], values)[0]
        parts = [u0, F0]
        if self.q >= 2:
            d = 1e-4 * float(self.t[-1] - self.t[0])
            ts = torch.stack([t0[0] + d, t0[0] - d])
            us = torch.stack([u0 + d * F0, u0 - d * F0])
            Fs = self._F(ts, us, values)
            parts.append((Fs[0] - Fs[1]) / (2 * d))
        if self.q >= 3:
            # the third derivative: a second difference of F along the flow, the states a
            # second-order Taylor step away (error O(d^2))
            d = 1e-3 * float(self.t[-1] - self.t[0])
            f2 = parts[2]
            ts = torch.stack([t0[0] + d, t0[0] - d])
            us = torch.stack([u0 + d * F0 + d * d / 2 * f2, u0 - d * F0 + d * d / 2 * f2])
            Fs = self._F(ts, us, values)
            parts.append((Fs[0] - 2 * F0 + Fs[1]) / (d * d))
        for _ in range(4, self.q + 1):
            parts.append(torch.zeros_like(u0))
        return torch.stack(parts, 1).reshape(-1)                           # output-major

    # -- the likelihood ---------------------------------------------------------------
    def evidence(self, v, u_star, floor=0.0, smooth=False, direct=()):
        r""":math:`\log p(y \mid o = 0)` at ``v`` (module docstring) around ``u_star``,
        the diffusion at :math:`\max(\hat\sigma^2, \text{floor})`; with ``smooth`` also the
        smoothed means and covariances at the nodes and the filter's state (for
        predictions); the coefficients at ``direct`` are given as values, not
        unconstrained."""
        theta, u0, log_sd = self.split(v)
        values = self.values(theta, direct)
        Ho, zo = self.linearise(values, u_star)
        N, C, D = len(self.t), self.C, self.C * (self.q + 1)
        m0 = self.initial_state(values, u0)
        P0 = torch.zeros(D, D, dtype=torch.float64)
        A, Q1 = self.A, self.Q1
        mask_o = torch.ones(N, C, dtype=torch.bool)
        mask_o[0] = False                                  # exact at t0 by construction
        eye = torch.eye(C, dtype=torch.float64).expand(N, C, C)
        # the ODE alone at unit diffusion: its innovations calibrate the diffusion
        _, _, (quad, logdet) = kalman_filter(A, Q1, Ho, ODE_JITTER * eye, zo, m0, P0, mask_o,
                                             parts=True)
        M = (N - 1) * C
        s2_hat = quad / M
        s2 = torch.clamp(s2_hat, min=floor) if floor else s2_hat
        log_po = -0.5 * (quad / s2 + logdet + M * torch.log(s2) + M * math.log(2 * math.pi))
        # the ODE and the data
        sd = torch.ones(C, dtype=torch.float64)
        if self.measured:
            sd = sd.index_put((torch.tensor(self.measured),), torch.exp(log_sd))
        H = torch.cat([Ho, self.E0.expand(N, C, D)], 1)
        R = torch.block_diag(s2 * ODE_JITTER * torch.eye(C, dtype=torch.float64),
                             torch.diag(sd ** 2)).expand(N, 2 * C, 2 * C)
        z = torch.cat([zo, self.y], 1)
        mask = torch.cat([mask_o, self.seen], 1)
        m, P, log_pyo = kalman_filter(A, s2 * Q1, H, R, z, m0, P0, mask)
        out = {"log_evidence": log_pyo - log_po, "diffusion": s2, "calibrated": s2_hat}
        if smooth:
            ms, Ps, _ = rts_smoother(A, s2 * Q1, m, P)
            out.update(mean=ms, cov=Ps, filtered=(m, P), A=A, Q=s2 * Q1)
        return out

    def nodes_mean(self, smoothed_mean):
        """The components' values ``(N, C)`` (solver units) from smoothed states."""
        return (self.E0 @ smoothed_mean[..., None])[..., 0]

    def predict(self, out, t_new):
        r"""Means ``(T, D)`` and covariances ``(T, D, D)`` of the state at times ``t_new``
        ``(T,)`` (at or after the first node) from a smoothed ``out``
        (:meth:`evidence` with ``smooth=True``): between two nodes, the filtered state at
        the left one moved to the time and corrected by the smoothed state at the right
        one (the smoother's recursion with a node inserted that carries no datum); past
        the last node, the last smoothed state moved on by the prior."""
        t_new = torch.as_tensor(t_new, dtype=torch.float64)
        if bool((t_new < self.t[0] - 1e-12 * (1 + abs(float(self.t[0])))).any()):
            raise ValueError(f"Expected times at or after the first node {float(self.t[0])}; "
                             f"got {float(t_new.min())}")
        N = len(self.t)
        s2 = out["diffusion"]
        mf, Pf = out["filtered"]
        ms, Ps = out["mean"], out["cov"]
        n = torch.searchsorted(self.t, t_new, right=True) - 1
        n = n.clamp(0, N - 1)
        C = self.C
        ones = torch.ones(C, dtype=torch.float64)
        d1 = (t_new - self.t[n]).clamp(min=0.0)
        A1, Q1 = block_transition(self.q, d1, s2 * ones)
        last = n == N - 1
        right = torch.where(last, n, n + 1)
        d2 = torch.where(last, torch.zeros_like(d1), self.t[right] - t_new).clamp(min=0.0)
        A2, Q2 = block_transition(self.q, d2, s2 * ones)
        # past the last node: from the smoothed state; else from the filtered one
        m_from = torch.where(last[:, None], ms[n], mf[n])
        P_from = torch.where(last[:, None, None], Ps[n], Pf[n])
        m_pred = (A1 @ m_from[..., None])[..., 0]
        P_pred = A1 @ P_from @ A1.transpose(-1, -2) + Q1
        Pp = A2 @ P_pred @ A2.transpose(-1, -2) + Q2
        # the gain P_pred A2' Pp^-1 (past the last node no correction: Pp is not used)
        eye = torch.eye(Pp.shape[-1], dtype=Pp.dtype).expand_as(Pp)
        G = torch.linalg.solve(torch.where(last[:, None, None], eye, Pp),
                               A2 @ P_pred.transpose(-1, -2)).transpose(-1, -2)
        G = torch.where(last[:, None, None], torch.zeros_like(G), G)
        m = m_pred + (G @ (ms[right] - (A2 @ m_pred[..., None])[..., 0])[..., None])[..., 0]
        P = P_pred + G @ (Ps[right] - Pp) @ G.transpose(-1, -2)
        return m, 0.5 * (P + P.transpose(-1, -2))
