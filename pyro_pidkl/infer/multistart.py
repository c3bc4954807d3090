r"""Many starts of shooting at once: the basin of an ODE's coefficients, and of the initial
states nobody measured, found from a design of starts fitted together in one batch.

Fitting an ODE's trajectories to data from one start (:mod:`~pyro_pidkl.infer.shooting`)
finds the optimum of the basin it starts in. Where gradient matching's start is in the
wrong basin (a rate at zero that cuts an unmeasured component out of the equations, as on
Hes1), another start is needed, and which one is not known. Here ``S`` starts, the rates
spread over a box in their unconstrained space (a Sobol design) and the initial states of
unmeasured outputs over their prior's range, are each fitted by multiple shooting
(Bock 1981: ``K`` segments, each from its own state, the measured outputs' states started
at the data) and then single shooting, by Levenberg-Marquardt, **all at once**: every
start's residuals and finite-difference Jacobian columns are trajectories of one batch,
integrated by fixed-step Runge-Kutta (:meth:`~pyro_pidkl.physics.ode.ExplicitODE.integrate_uniform`),
so that a Jacobian of thirty-two starts costs one pass of the integrator over a few
thousand trajectories. A start whose trajectory blows up is dropped. The starts are
ranked on the profiled negative log-likelihood of their single-shooting trajectories,

.. math:: c = \sum_c \frac{n_c}{2} \log \frac{1}{n_c} \sum_i
    \big(y_{c,i} - x_c(t_{c,i}; \theta, x_0)\big)^2,

and the best few are refined by the adaptive solver (:func:`~pyro_pidkl.infer.shooting.fit_by_shooting`)
by the caller.
"""

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from .deviance import count_likelihoods, data_nll, data_residuals, residual_scales

__all__ = ["EXTRA_SHIFT", "LOG_RANGE", "MultistartResult", "default_starts",
           "design_half_width", "extra_shift", "multistart_shooting", "start_design"]


@dataclass
class MultistartResult:
    r"""What :func:`multistart_shooting` found, best first: ``theta`` ``(S', P)`` the
    coefficients (unconstrained), ``x0`` ``(S', C)`` the initial states at ``t0``, ``cost``
    ``(S',)`` the profiled negative log-likelihood of each start's single-shooting
    trajectory (``inf`` where it failed), ``start_cost`` ``(S,)`` the same at every start
    before fitting (in the starts' order), ``start`` ``(S',)`` which start each row came
    from (the ``S'`` that reach single shooting: the best eight of the multiple-shooting
    stages), and ``seconds`` the time it took."""

    theta: np.ndarray
    x0: np.ndarray
    cost: np.ndarray
    start_cost: np.ndarray
    start: np.ndarray
    seconds: float


#: half-width of the design in a bounded coefficient's unconstrained space (a factor of a
#: thousand either way for a positive one)
LOG_RANGE = math.log(1000.0)


def design_half_width(transform, u0):
    r"""Half-width of the design around a coefficient's unconstrained start ``u0``:
    :data:`LOG_RANGE` for a bounded coefficient (a factor of a thousand either way for a
    positive one), :math:`3 \max(1, |u_0|)` for an unconstrained one."""
    identity = isinstance(transform, torch.distributions.ComposeTransform) and not transform.parts
    return 3.0 * max(1.0, abs(float(u0))) if identity else LOG_RANGE


def default_starts(num_coefficients, num_hidden):
    """Starts of the design when the user gives none: 64 per searched dimension (each
    coefficient, each unmeasured output's initial state), 64 to 512. On Hes1 (eight
    dimensions), 128 starts found no start in the truth's basin, 256 one, 512 five. The
    cost grows slowly with the number of starts (one batch); it is the Levenberg-Marquardt
    iterations, each a pass of the integrator, that cost."""
    return int(min(512, max(64, 64 * (num_coefficients + num_hidden))))


#: half-width of :func:`extra_shift`'s moves in a coefficient's unconstrained space (a factor
#: of ten either way for a positive one)
EXTRA_SHIFT = math.log(10.0)


def extra_shift(r, count):
    r"""The moves ``(count,)`` of start ``r`` past a model's listed starts (``pk.fit(model,
    restarts=R)`` with ``R`` above them): each coefficient its own uniform move within
    :math:`\pm` :data:`EXTRA_SHIFT` in its unconstrained space, the same for the same
    ``r`` (seeded by it)."""
    g = torch.Generator().manual_seed(int(r))
    return (2 * torch.rand(int(count), generator=g, dtype=torch.float64) - 1) * EXTRA_SHIFT


def start_design(centre, half_width, n, seed=0):
    r"""``n`` points ``(n, D)`` of a scrambled Sobol design in the box
    ``centre +- half_width`` (each ``(D,)``), the first of them the centre itself."""
    from scipy.stats import qmc
    centre = np.asarray(centre, dtype=float)
    half_width = np.asarray(half_width, dtype=float)
    out = np.tile(centre, (n, 1))
    if n > 1 and centre.size:
        m = int(math.ceil(math.log2(n - 1))) if n > 2 else 0
        u = qmc.Sobol(centre.size, scramble=True, seed=seed).random_base2(m)[:n - 1]
        out[1:] = centre + half_width * (2 * u - 1)
    return out


class _Batch:
    """The residuals of ``K`` shooting segments for a batch of parameter vectors."""

    def __init__(self, ode, observations, transforms, t0, t1, K, scale, sd, steps):
        self.ode, self.transforms = ode, transforms
        self.C, self.K, self.P = len(scale), K, len(transforms)
        self.scale = torch.as_tensor(scale, dtype=torch.float64)
        self.counts = count_likelihoods(observations)
        self.sd = torch.as_tensor(residual_scales(sd, observations))
        self.edges = np.linspace(t0, t1, K + 1)
        delta = self.edges[1] - self.edges[0]
        rows = []
        for c, (t, y, *_) in enumerate(observations):
            for ti, yi in zip(t, y):
                k = min(max(int((ti - t0) // delta), 0), K - 1)
                rows.append((c, k, ti - self.edges[k], yi))
        self.local = np.unique(np.r_[[r[2] for r in rows], delta])
        where = {v: j for j, v in enumerate(self.local)}
        self.obs_c = torch.tensor([r[0] for r in rows], dtype=torch.long)
        self.obs_k = torch.tensor([r[1] for r in rows], dtype=torch.long)
        self.obs_j = torch.tensor([where[r[2]] for r in rows], dtype=torch.long)
        self.obs_y = torch.tensor([r[3] for r in rows], dtype=torch.float64)
        self.steps = steps
        self.weight = 0.0
        self.prior = None             # (loc, sd) of a normal prior on the coefficients
        self.known = {}               # {component: value}: known initial states

    def _states(self, V):
        """Each row's segment states ``(B, K, C)`` (scaled), known initial states held."""
        S = V[:, self.P:].reshape(V.shape[0], self.K, self.C)
        if self.known:                      # known initial states: held, whatever V says
            S = S.clone()
            for c, value in self.known.items():
                S[:, 0, c] = value / self.scale[c]
        return S

    def _integrate(self, parts):
        """Trajectories on the local grid, one batch for every part: ``parts`` is a list of
        ``(V (b, n), S (b, J, C) scaled states, segments (J,) or (b J,))``, each row's
        ``J`` segments integrated with its coefficients from their left ends' times;
        returns ``[(b, J, C, T)]``."""
        xs, offsets, values = [], [], {n: [] for n, _ in self.transforms}
        for V, S, segments in parts:
            J = S.shape[1]
            xs.append((S * self.scale).reshape(-1, self.C))
            segments = np.asarray(segments)
            offsets.append(self.edges[segments if segments.size == len(xs[-1])
                                      else np.tile(segments, V.shape[0])])
            for i, (n, t) in enumerate(self.transforms):
                values[n].append(t(V[:, i]).repeat_interleave(J))
        traj = self.ode.integrate_uniform(
            torch.cat(xs), self.local, {n: torch.cat(v) for n, v in values.items()},
            torch.as_tensor(np.concatenate(offsets)), self.steps)
        out, at = [], 0
        for (V, S, segments), x in zip(parts, xs):
            out.append(traj[at:at + len(x)].reshape(V.shape[0], S.shape[1], self.C, -1))
            at += len(x)
        return out

    def _residuals(self, V, S, fit, ends):
        """Residuals ``(..., R)`` from the data's fits ``fit`` ``(..., N)`` and the
        segments' scaled end states ``ends`` ``(..., K - 1, C)``, ``S`` the states and
        ``V`` ``(..., n)`` the parameters they came from."""
        lead = fit.shape[:-1]
        out = [data_residuals(self.obs_y, fit.reshape(-1, fit.shape[-1]), self.obs_c,
                              self.sd, self.counts).reshape(*lead, -1)]
        if self.K > 1:
            out.append((self.weight * (ends - S[..., 1:, :])).reshape(*lead, -1))
        if self.prior is not None:
            out.append(((V[..., :self.P] - self.prior[0]) / self.prior[1]).expand(*lead, -1))
        r = torch.cat(out, -1)
        r[~torch.isfinite(r).all(-1)] = float("nan")
        return r

    def __call__(self, V):
        """Residuals ``(B, R)`` of parameter vectors ``V`` ``(B, P + K C)``; a row with a
        failed trajectory is ``nan``."""
        S = self._states(V)
        traj, = self._integrate([(V, S, np.arange(self.K))])
        return self._from_trajectories(V, S, traj)

    def _from_trajectories(self, V, S, traj):
        fit = traj[:, self.obs_k, self.obs_c, self.obs_j]
        return self._residuals(V, S, fit, traj[:, :-1, :, -1] / self.scale)

    def jacobian(self, V, r, h):
        r"""Forward-difference Jacobians ``(B, R, n)`` of the residuals at ``V`` ``(B, n)``
        (``r`` their values, ``h`` ``(B, n)`` the steps). A segment's state moves only
        that segment's trajectory: its columns integrate one segment each (``K C``
        one-segment trajectories per row, one pass), not the whole batch of segments once
        per column (``K C`` passes); a coefficient's columns integrate every segment."""
        B, K, C, P = V.shape[0], self.K, self.C, self.P
        n = V.shape[1]
        S = self._states(V)                                                 # (B, K, C)
        cols = (V[:, None, :] + torch.diag_embed(h)[:, :P, :]).reshape(-1, n)  # (B P, n)
        S_cols = self._states(cols)
        # every (segment k, component c) moved alone: its moved states (B, K, Cm, C)
        hs = h[:, P:].reshape(B, K, C)
        moved = S[:, :, None, :] + torch.diag_embed(hs)
        for c in self.known:                # a held initial state does not move
            moved[:, 0, c, c] = S[:, 0, c]
        # one batch: the coefficients' columns (every segment), the base, and one segment
        # per moved state at its own segment's offset
        seg = np.tile(np.repeat(np.arange(K), C), B)
        tc, traj, pert = self._integrate([
            (cols, S_cols, np.arange(K)), (V, S, np.arange(K)),
            (V.repeat_interleave(K * C, 0), moved.reshape(B * K * C, 1, C), seg)])
        J = torch.empty(B, r.shape[1], n, dtype=V.dtype)
        if P:
            rc = self._from_trajectories(cols, S_cols, tc).reshape(B, P, -1)
            J[:, :, :P] = ((rc - r[:, None, :]) / h[:, :P, None]).transpose(1, 2)
        pert = pert.reshape(B, K, C, C, -1)                                # (B, k, cm, C, T)
        base_fit = traj[:, self.obs_k, self.obs_c, self.obs_j]              # (B, N)
        # (the advanced indices are apart: numpy puts their dimension first, (N, B, Cm))
        moved_fit = pert[:, self.obs_k, :, self.obs_c, self.obs_j].permute(1, 2, 0)
        inside = self.obs_k[None, :] == torch.arange(K)[:, None]           # (K, N)
        fit = torch.where(inside[None, :, None, :], moved_fit[:, None],
                          base_fit[:, None, None, :])                       # (B, K, Cm, N)
        ends = (traj[:, :-1, :, -1] / self.scale)[:, None, None].repeat(1, K, C, 1, 1)
        if K > 1:
            k = torch.arange(K - 1)
            ends[:, k, :, k, :] = (pert[:, :-1, :, :, -1] / self.scale).permute(1, 0, 2, 3)
        Sm = S[:, None, None].repeat(1, K, C, 1, 1)                         # (B, K, Cm, K, C)
        kk = torch.arange(K)
        Sm[:, kk, :, kk, :] = moved.permute(1, 0, 2, 3)
        rc = self._residuals(V[:, None, None, :], Sm, fit, ends)            # (B, K, Cm, R)
        J[:, :, P:] = ((rc.reshape(B, K * C, -1) - r[:, None, :])
                       / h[:, P:, None]).transpose(1, 2)
        return J

    def profiled(self, r):
        """:math:`\\sum_c (n_c/2) \\log \\overline{r_c^2}` ``(B,)`` in data units from
        single-shooting residuals ``r`` ``(B, N)`` (a count output's: its likelihood's,
        :func:`~pyro_pidkl.infer.deviance.data_nll`)."""
        data = r[:, :self.obs_y.numel()] * self.sd[self.obs_c]
        return data_nll(data, self.obs_c, self.counts)


def _levenberg_marquardt(residuals, V, iterations, tol=1e-8):
    """Minimise ``0.5 |residuals(v)|^2`` from every row of ``V`` ``(S, n)`` at once; each row
    its own damping. Returns ``(V, cost)``; a row that failed is ``inf``."""
    S, n = V.shape
    V = V.clone()
    r = residuals(V)
    cost = 0.5 * r.pow(2).sum(1)
    cost = torch.where(torch.isfinite(cost), cost, torch.full_like(cost, math.inf))
    lam = torch.full((S,), 1e-2, dtype=V.dtype)
    active = torch.isfinite(cost)
    stalls = torch.zeros(S, dtype=torch.long)
    J = torch.zeros(S, r.shape[1], n, dtype=V.dtype)
    stale = active.clone()
    eye = torch.eye(n, dtype=V.dtype)
    for _ in range(iterations):
        if not bool(active.any()):
            break
        idx = torch.nonzero(stale & active).flatten()
        if idx.numel():
            h = 1e-6 * V[idx].abs().clamp(min=1.0)                       # (b, n)
            if hasattr(residuals, "jacobian"):
                J[idx] = residuals.jacobian(V[idx], r[idx], h)
            else:
                cols = V[idx][:, None, :] + torch.diag_embed(h)           # (b, n, n)
                rc = residuals(cols.reshape(-1, n)).reshape(idx.numel(), n, -1)
                J[idx] = ((rc - r[idx][:, None, :]) / h[:, :, None]).transpose(1, 2)
            bad = ~torch.isfinite(J[idx]).all(2).all(1)
            active[idx[bad]] = False
        ia = torch.nonzero(active).flatten()
        if not ia.numel():
            break
        Ja, ra = J[ia], r[ia]
        A = Ja.transpose(1, 2) @ Ja
        g = (Ja.transpose(1, 2) @ ra[..., None])[..., 0]
        D = torch.diagonal(A, dim1=1, dim2=2).clamp(min=1e-12)
        M = A + lam[ia, None, None] * torch.diag_embed(D) + 1e-12 * eye
        step, info = torch.linalg.solve_ex(M, -g[..., None])
        step = step[..., 0]
        ok = (info == 0)[:, None] & torch.isfinite(step)
        step = torch.where(ok, step, torch.zeros_like(step))    # a singular row: damped more
        Vn = V[ia] + step
        rn = residuals(Vn)
        cn = 0.5 * rn.pow(2).sum(1)
        cn = torch.where(torch.isfinite(cn), cn, torch.full_like(cn, math.inf))
        better = cn < cost[ia]
        gain = (cost[ia] - cn) / cost[ia].clamp(min=1e-300)
        up = ia[better]
        V[up], r[up], cost[up] = Vn[better], rn[better], cn[better]
        lam[up] = (lam[up] / 3).clamp(min=1e-9)
        lam[ia[~better]] = lam[ia[~better]] * 4
        stale = torch.zeros(S, dtype=torch.bool)
        stale[up] = True
        small = better & (gain < tol)
        stalls[ia] = torch.where(small, stalls[ia] + 1,
                                 torch.where(better, torch.zeros_like(stalls[ia]), stalls[ia]))
        active[ia[(stalls[ia] >= 3) | (lam[ia] > 1e10)]] = False
    return V, cost


def multistart_shooting(ode, observations, transforms, theta_starts, state_starts, t0, t1,
                        scale, sd, weights=(1.0, 10.0, 100.0), iterations=30,
                        steps=16, keep=None, prior=None, known=None):
    r"""Fit the ODE's trajectories to the data from every start at once (module docstring).

    :param ode: an :class:`~pyro_pidkl.physics.ode.ExplicitODE`.
    :param observations: per output, ``(t, y)`` arrays (empty for an output never
        observed).
    :param transforms: ``[(name, transform)]``: each learned coefficient and the transform
        from its unconstrained space.
    :param theta_starts: ``(S, P)`` unconstrained coefficients, one row per start.
    :param state_starts: ``(S, K, C)`` each start's states at the ``K`` segments' left ends
        (user units; ``K`` is the number of segments).
    :param float t0: where the trajectories start; ``t1``: the last datum's time.
    :param scale: each output's typical size ``(C,)``; ``sd`` its noise scale ``(C,)``.
    :param weights: the continuity weights of the multiple-shooting stages.
    :param int iterations: Levenberg-Marquardt iterations of the first stage, at most
        (two thirds of it in the later multiple-shooting stages, a third in the single
        shooting of the best eight).
    :param int steps: Runge-Kutta steps per segment.
    :param int keep: how many starts go on after the first stage, the best of them on its
        objective (default: an eighth, at least 16): the first stage, with the segments
        held together loosely, is where a start finds its basin; the later ones tighten it
        (on Hes1, seed 0, two of the 64 kept of 512 end in the truth's basin; five without
        the cut, in 30% more time).
    :param prior: ``(loc, sd)`` ``(P,)`` each: a normal prior on the unconstrained
        coefficients whose standardised residuals join the data's (a MAP fit).
    :param known: ``{component: value}``: known initial states at ``t0``, held.
    :returns: a :class:`MultistartResult`.
    """
    began = time.perf_counter()
    theta_starts = torch.as_tensor(np.asarray(theta_starts, dtype=float))
    states = torch.as_tensor(np.asarray(state_starts, dtype=float))
    S, K, C = states.shape
    P = theta_starts.shape[1]
    keep = S if K == 1 else min(S, max(16, S // 8) if keep is None else int(keep))
    scale_t = torch.as_tensor(np.asarray(scale, dtype=float))
    multi = _Batch(ode, observations, transforms, t0, t1, K, scale, sd, steps)
    single = _Batch(ode, observations, transforms, t0, t1, 1, scale, sd, steps * K)
    if prior is not None:
        multi.prior = single.prior = tuple(torch.as_tensor(np.asarray(a, dtype=float))
                                           for a in prior)
    multi.known = single.known = dict(known or {})
    with torch.no_grad():
        V = torch.cat([theta_starts, (states / scale_t).reshape(S, -1)], 1)
        start_cost = single.profiled(single(V[:, :P + C]))
        kept = torch.arange(S)
        if K > 1:
            for k, w in enumerate(weights):
                multi.weight = w
                V, stage = _levenberg_marquardt(multi, V, iterations if k == 0 else
                                                max(1, 2 * iterations // 3))
                if k == 0 and keep < S:          # the rest go on with the best of them
                    order = torch.argsort(stage)[:keep]
                    V, kept = V[order], kept[order]
            # single shooting polishes the best few: its trajectories run the whole span
            # in sequence, each step a pass over the batch (the adaptive solver refines
            # the winner after)
            order = torch.argsort(stage)[:max(1, min(len(stage), 8))]
            V, kept = V[order], kept[order]
        W, _ = _levenberg_marquardt(single, V[:, :P + C], max(1, iterations // 3))
        cost = single.profiled(single(W))
    order = torch.argsort(cost)
    x0 = W[order, P:] * scale_t
    for c, value in (known or {}).items():
        x0[:, c] = value
    return MultistartResult(W[order, :P].numpy(), x0.numpy(),
                            cost[order].numpy(), start_cost.numpy(),
                            kept[order].numpy(),
                            time.perf_counter() - began)
