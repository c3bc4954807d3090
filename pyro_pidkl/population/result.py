r"""What a population fit found: the population's parameters with intervals, each group's
coefficients with intervals, the log-likelihood, the branches, and predictions.

Intervals are normal in the unconstrained space mapped through each coefficient's
constraint (a positive coefficient's are :math:`\theta\, e^{\pm z\, \mathrm{sd}}`), as
``nlme``'s ``intervals``: the fixed effects' covariance is :math:`(\sum_i X_i^\top V_i^{-1}
X_i)^{-1}`, the variance parameters' the inverse Hessian of the profiled log-likelihood in
their logs. A group's coefficients :math:`\phi_i = A_i\beta + B\eta_i` take their
covariance from the inverse of the mixed-model equations' matrix (Henderson's prediction
error covariance of :math:`(\beta, \eta)`), so a group's interval carries the population's
uncertainty as well as its own.
"""

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from .model import central_batch

__all__ = ["PopulationFit"]


def _z(prob):
    return float(torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(0.5 + prob / 2)))


@dataclass
class PopulationFit:
    r"""A fitted population (module docstring). ``beta`` ``(p,)`` the fixed effects
    (unconstrained; ``beta_names``), ``beta_cov`` their covariance, ``omega`` ``(q, q)`` the
    random effects' covariance, ``sigma`` each measured output's noise sd (on its noise's
    scale), ``psi``/``psi_cov`` the variance parameters (log sds, correlations, log sigmas)
    and their covariance, ``eta`` ``(G, q)`` each group's random effects, ``phi`` ``(G, P)``
    its unconstrained coefficients and ``phi_cov`` ``(G, P, P)`` their covariance, ``loglik``
    the Laplace log-likelihood, ``steps`` the Runge-Kutta steps, ``branches`` other
    coefficient sets that fit a group as well (:mod:`~pyro_pidkl.population.branches`)."""

    pop: object
    beta: np.ndarray
    beta_cov: np.ndarray
    omega: np.ndarray
    sigma: np.ndarray
    psi: np.ndarray
    psi_cov: np.ndarray
    eta: np.ndarray
    phi: np.ndarray
    phi_cov: np.ndarray
    loglik: float
    steps: int
    converged: bool
    history: list = field(default_factory=list)
    branches: dict = field(default_factory=dict)
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    method: str = "laplace"

    @classmethod
    def from_linear(cls, pop, lin, psi, beta, eta, steps, converged, history):
        """Assemble the fit from the last linearisation ``lin`` (a
        :class:`~pyro_pidkl.population.foce._Linear`) at its variance parameters ``psi``."""
        ll, beta_hat, Mi, _, omega, sigma = lin.terms(psi)
        H = torch.autograd.functional.hessian(lambda v: lin.terms(v)[0], psi)
        psi_cov = _inverse(-H.numpy())
        G, q, p = pop.n_groups, pop.B.shape[1], pop.A.shape[2]
        # Henderson's mixed-model equations: the joint precision of (beta, eta_1..eta_G)
        D = torch.where(lin.mask, sigma[lin.noise] ** 2, torch.full_like(lin.w, math.inf))
        Xd, Zd = lin.X / D[..., None], lin.Z / D[..., None]
        C = torch.zeros(p + G * q, p + G * q, dtype=torch.float64)
        C[:p, :p] = torch.einsum("gnk,gnl->kl", lin.X, Xd)
        Oi = torch.linalg.inv(omega) if q else torch.zeros(0, 0, dtype=torch.float64)
        for i in range(G):
            sl = slice(p + i * q, p + (i + 1) * q)
            C[:p, sl] = lin.X[i].T @ Zd[i]
            C[sl, :p] = C[:p, sl].T
            C[sl, sl] = lin.Z[i].T @ Zd[i] + Oi
        Ci = torch.as_tensor(_inverse(C.detach().numpy()))
        phi = pop.phi(beta, eta)
        phi_cov = torch.zeros(G, phi.shape[1], phi.shape[1], dtype=torch.float64)
        for i in range(G):
            idx = list(range(p)) + list(range(p + i * q, p + (i + 1) * q))
            M = torch.cat([pop.A[i], pop.B], 1)
            phi_cov[i] = M @ Ci[idx][:, idx] @ M.T
        return cls(pop, beta_hat.detach().numpy(), Mi.detach().numpy(),
                   omega.detach().numpy(), sigma.detach().numpy(), psi.detach().numpy(),
                   psi_cov, eta.numpy(), phi.detach().numpy(), phi_cov.numpy(), float(ll),
                   int(steps), bool(converged), history)

    # -- the population's parameters --------------------------------------------------------
    @property
    def fixed_effects(self):
        """``{name: value}``: each fixed effect in its unconstrained space (the log of a
        positive coefficient: ``nlme``'s ``lKa``), covariate slopes, per-group values."""
        return dict(zip(self.pop.beta_names, self.beta.tolist()))

    @property
    def random_sd(self):
        """``{coefficient: sd}`` of each random effect (unconstrained units)."""
        return dict(zip(self.pop.random_names, np.sqrt(np.diag(self.omega)).tolist()))

    def intervals(self, prob=0.9):
        r"""Central ``prob`` intervals of the population's parameters: ``{name: {"value",
        "lower", "upper", "sd", "log": (value, lower, upper) unconstrained}}`` for each fixed
        effect (a coefficient's population value on its own scale), ``"sd(name)"`` each
        random effect's sd, ``"corr(a,b)"`` (full :math:`\Omega`), ``"sigma(output)"``
        each noise sd."""
        z, pop, out = _z(prob), self.pop, {}
        sd = np.sqrt(np.clip(np.diag(self.beta_cov), 0, np.inf))
        entries = {en.name: en for en in pop.entries}
        for name, b, s in zip(pop.beta_names, self.beta, sd):
            en = entries.get(name)
            t = en.transform if en is not None else (lambda u: u)
            lo, hi = (float(t(torch.tensor(b + k * s, dtype=torch.float64))) for k in (-z, z))
            v = float(t(torch.tensor(b, dtype=torch.float64)))
            out[name] = {"value": v, "lower": min(lo, hi), "upper": max(lo, hi),
                         "sd": float(s) * abs(float(_slope(t, b))),
                         "log": (float(b), float(b - z * s), float(b + z * s))}
        se = np.sqrt(np.clip(np.diag(self.psi_cov), 0, np.inf))
        q = len(pop.random_names)
        for k, n in enumerate(pop.random_names):
            out[f"sd({n})"] = _log_interval(self.psi[k], se[k], z)
        if pop.omega_kind == "full" and q > 1:
            d = np.sqrt(np.diag(self.omega))
            R = self.omega / np.outer(d, d)
            for a in range(q):
                for b in range(a):
                    out[f"corr({pop.random_names[b]},{pop.random_names[a]})"] = {
                        "value": float(R[a, b]), "lower": math.nan, "upper": math.nan,
                        "sd": math.nan}
        k0 = len(self.psi) - len(pop.data.outputs)
        for k, o in enumerate(pop.data.outputs):
            out[f"sigma({o})"] = _log_interval(self.psi[k0 + k], se[k0 + k], z)
        return out

    # -- the groups ------------------------------------------------------------------------
    def groups(self, prob=0.9):
        """Each group's coefficients (and learned initial states): ``{label: {name: {"value",
        "lower", "upper"}}}``, their intervals from :attr:`phi_cov`."""
        z, pop, out = _z(prob), self.pop, {}
        for i, label in enumerate(pop.data.labels):
            row = {}
            for j, en in enumerate(pop.entries):
                u, s = float(self.phi[i, j]), math.sqrt(max(float(self.phi_cov[i, j, j]), 0.0))
                lo, hi = (float(en.transform(torch.tensor(u + k * s, dtype=torch.float64)))
                          for k in (-z, z))
                row[en.name] = {"value": float(en.transform(torch.tensor(u,
                                                                         dtype=torch.float64))),
                                "lower": min(lo, hi), "upper": max(lo, hi)}
            out[label] = row
        return out

    def predict(self, times, group=None, prob=0.9, draws=400, seed=0):
        r"""Each output's curve at ``times``: ``{output: {"mean", "lower", "upper"}}``
        (arrays ``(T,)``). For a ``group`` (its label) its own curve with the central
        ``prob`` band of its coefficients' uncertainty (delta method); for ``group=None`` the
        typical group's (every random effect 0, covariates at their medians) with the
        band of the fixed effects' uncertainty, and ``"spread_lower"``/``"spread_upper"``, the
        central ``prob`` of the groups' curves (random effects drawn from
        :math:`\mathcal N(0, \Omega)`)."""
        pop, z = self.pop, _z(prob)
        times = np.asarray(times, dtype=float)
        if group is None:
            A = pop.A.mean(0).clone()
            cov_cols = [k for k, n in enumerate(pop.beta_names) if "~" in n]
            A[:, cov_cols] = 0.0
            phi = A @ torch.as_tensor(self.beta)
            cov = A @ torch.as_tensor(self.beta_cov) @ A.T
            row = 0
        else:
            if group not in pop.data.labels:
                raise KeyError(f"Expected a group among {pop.data.labels[:8]}...; got {group!r}")
            i = pop.data.labels.index(group)
            phi, cov, row = torch.as_tensor(self.phi[i]), torch.as_tensor(self.phi_cov[i]), i
        mean, J = _curve_jacobian(pop, phi, row, times, self.steps)
        var = torch.einsum("ctp,pq,ctq->ct", J, cov, J).clamp_min(0)
        out = {}
        for c, o in enumerate(pop.system.outputs):
            m, s = mean[c].numpy(), var[c].sqrt().numpy()
            out[o] = {"mean": m, "lower": m - z * s, "upper": m + z * s}
        if group is None and len(pop.random_names):
            g = torch.Generator().manual_seed(seed)
            L = torch.linalg.cholesky(torch.as_tensor(self.omega) +
                                      1e-12 * torch.eye(len(self.omega), dtype=torch.float64))
            eta = torch.randn(draws, L.shape[0], generator=g, dtype=torch.float64) @ L.T
            phis = phi[None, :] + eta @ pop.B.T
            with torch.no_grad():
                X = pop.trajectories(phis, np.zeros(draws, dtype=int), times=times,
                                     steps=self.steps)
            lo, hi = np.nanquantile(X.numpy(), [0.5 - prob / 2, 0.5 + prob / 2], axis=0)
            for c, o in enumerate(pop.system.outputs):
                out[o].update(spread_lower=lo[c], spread_upper=hi[c])
        return out

    def summary(self, prob=0.9):
        """A table of the population's parameters (text)."""
        rows = [f"{'':14s}{'value':>11s}{'lower':>11s}{'upper':>11s}   ({prob:.0%}; "
                f"log-likelihood {self.loglik:.2f}, {self.cpu_seconds:.1f} CPU s)"]
        for name, r in self.intervals(prob).items():
            rows.append(f"{name:14s}{r['value']:11.4g}{r['lower']:11.4g}{r['upper']:11.4g}")
        for line in self.branches.get("lines", []):
            rows.append(line)
        return "\n".join(rows)


def _slope(t, u):
    u = torch.tensor(float(u), dtype=torch.float64)
    return float(t.log_abs_det_jacobian(u, t(u)).exp()) if hasattr(t, "log_abs_det_jacobian") \
        else 1.0


def _log_interval(log_value, se, z):
    """A positive value's interval from its log's ``se``: ends past the float range are
    ``0`` and ``inf`` (an sd at its boundary, its log's curvature nearly flat)."""
    def exp(u):
        return math.exp(u) if u < 709.0 else math.inf
    return {"value": exp(log_value), "lower": exp(log_value - z * se),
            "upper": exp(log_value + z * se), "sd": exp(log_value) * se,
            "log": (float(log_value), float(log_value - z * se), float(log_value + z * se))}


def _inverse(M):
    """The inverse of a symmetric matrix; ``inf`` along directions it does not curve."""
    M = 0.5 * (M + M.T)
    lam, V = np.linalg.eigh(M)
    flat = lam <= 1e-12 * max(float(np.abs(lam).max()), 1e-300)
    inv = (V[:, ~flat] / lam[~flat]) @ V[:, ~flat].T
    if flat.any():
        loading = (V[:, flat] ** 2).sum(1) > 1e-3
        inv[loading, :] = np.inf
        inv[:, loading] = np.inf
    return inv


def _curve_jacobian(pop, phi, row, times, steps, h=1e-5):
    """The trajectories ``(C, T)`` at ``phi`` ``(P,)`` of group ``row`` and their central
    difference derivatives ``(C, T, P)``."""
    P = phi.shape[0]
    batch, step = central_batch(phi[None], h)
    batch, step = batch[0], step[0]
    with torch.no_grad():
        X = pop.trajectories(batch, np.full(2 * P + 1, row), times=times, steps=steps)
    J = (X[1:P + 1] - X[P + 1:]) / (2 * step[:, None, None])
    return X[0], J.permute(1, 2, 0)
