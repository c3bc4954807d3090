r"""The population's marginal likelihood by Laplace's method over the random effects
(first-order conditional estimation, the Lindstrom-Bates algorithm of R's ``nlme``).

Two steps alternate until neither moves (Lindstrom & Bates 1990; Pinheiro & Bates 2000,
section 7.2):

- **penalised least squares** (PNLS): with :math:`\Omega` and :math:`\sigma` held,
  :math:`\beta` and every :math:`\eta_i` minimise

  .. math:: \sum_{ij} \frac{(z_{ij} - g_{ij}(A_i\beta + B\eta_i))^2}{\sigma_{c_j}^2}
      + \sum_i \eta_i^\top \Omega^{-1} \eta_i

  by Levenberg-Marquardt, every group's trajectory and its central-difference Jacobian
  :math:`F_i = \partial g_i / \partial \phi_i` integrated in one batch;
- **linear mixed model** (LME): the model linearised there, :math:`w_i = X_i\beta + Z_i\eta_i
  + \epsilon_i` with :math:`X_i = F_i A_i`, :math:`Z_i = F_i B`, :math:`w_i = z_i - g_i +
  F_i\hat\phi_i`, has the marginal likelihood

  .. math:: \ell(\beta, \Omega, \sigma) = -\tfrac12 \sum_i \big[\log|V_i|
      + (w_i - X_i\beta)^\top V_i^{-1} (w_i - X_i\beta) + n_i \log 2\pi\big],
      \qquad V_i = Z_i \Omega Z_i^\top + \operatorname{diag}(\sigma_{c_j}^2),

  maximised over :math:`\Omega, \sigma` with :math:`\beta` at its generalised least squares
  value; :math:`\eta_i` moves to its best linear predictor :math:`\Omega Z_i^\top
  V_i^{-1}(w_i - X_i\hat\beta)`.

At the end :math:`\ell` is the reported log-likelihood, :math:`(\sum_i X_i^\top V_i^{-1}
X_i)^{-1}` the fixed effects' covariance and the inverse Hessian of the profiled
:math:`\ell` in the log standard deviations (and correlations) that of the variance
parameters, as ``nlme``'s ``intervals``.
"""

import math
import time
import warnings

import numpy as np
import torch
from torch.distributions import biject_to, constraints

from ..diagnostics.adequacy import ModelMisfitWarning
from ..infer.threads import fit_threads, torch_threads
from .branches import find_branches, population_optima, say_optima
from .model import central_batch
from .result import PopulationFit

__all__ = ["fit_population"]

FD_STEP = 1e-5


def _predictions(pop, phi, steps, jacobian=True):
    """Each datum's working prediction ``g`` ``(n,)`` and, with ``jacobian``, its derivative
    ``F`` ``(n, P)`` in its group's ``phi`` ``(G, P)`` by central differences, all groups in
    one batch."""
    G, P = phi.shape
    if not jacobian:
        with torch.no_grad():
            return pop.data_predictions(phi, steps=steps), None
    moved, h = central_batch(phi, FD_STEP)                     # (G, 2P + 1, P), (G, P)
    with torch.no_grad():
        g_all = pop.data_predictions(moved.reshape(-1, P), steps=steps,
                                     variants=2 * P + 1)              # (n, 2P + 1)
    hd = h[torch.as_tensor(pop.obs_group)]                               # (n, P)
    F = (g_all[:, 1:P + 1] - g_all[:, P + 1:]) / (2 * hd)
    return g_all[:, 0], F


def _check_informed(pop, X, phi=None):
    """Refuse fixed effects that move no measured prediction (``X`` ``(n, p)``, the data's
    derivatives in them) at the start, or, given the groups' ``phi`` ``(G, P)``, where the
    fit went (said with the median group's coefficients there)."""
    def where():                      # said only when refusing: not on every round
        return "" if phi is None else " where the fit went (the median group's " + ", ".join(
            f"{en.name} {float(en.transform(phi[:, j].median())):.4g}"
            for j, en in enumerate(pop.entries)) + "): the data do not hold them"
    if not bool(torch.isfinite(X).all()):
        how = "the matrix exponential overflows" if pop.affine else \
            "the Runge-Kutta steps overflow (give more steps)"
        raise ValueError(f"Expected finite trajectories at the fit's coefficients; {how} "
                         f"there{where() or ' (start nearer the data)'}")
    dead = [pop.beta_names[k] for k in range(X.shape[1]) if not float(X[:, k].abs().max()) > 0]
    if dead:
        raise ValueError(f"Expected the data to depend on every fixed effect; {tuple(dead)} "
                         f"move no measured prediction{where()} (measure an output that "
                         f"depends on them, or hold them known)")


class _Penalised:
    """The PNLS problem's residuals ``[(z - g) / sigma; L^{-1} eta_i]`` and Jacobian in
    ``theta = [beta; vec(eta)]``."""

    def __init__(self, pop, omega, sigma, steps):
        self.pop, self.steps = pop, steps
        self.G, self.p, self.q = pop.n_groups, pop.A.shape[2], pop.B.shape[1]
        self.s = sigma[torch.as_tensor(pop.noise_index)]
        self.Linv = torch.linalg.inv(torch.linalg.cholesky(omega)) if self.q else None

    def split(self, theta):
        return theta[:self.p], theta[self.p:].reshape(self.G, self.q)

    def __call__(self, theta, jacobian=True):
        pop = self.pop
        beta, eta = self.split(theta)
        phi = pop.phi(beta, eta)
        g, F = _predictions(pop, phi, self.steps, jacobian)
        r = torch.cat([(pop.obs_z - g) / self.s,
                       (eta @ self.Linv.T).reshape(-1) if self.q else g.new_zeros(0)])
        if not jacobian:
            return r, None, g, None
        gi = torch.as_tensor(pop.obs_group)
        n = g.shape[0]
        Jb = -torch.einsum("np,npk->nk", F, pop.A[gi]) / self.s[:, None]
        Je = torch.zeros(n, self.G, self.q, dtype=g.dtype)
        Je[torch.arange(n), gi] = -(F @ pop.B) / self.s[:, None]
        top = torch.cat([Jb, Je.reshape(n, -1)], 1)
        if self.q:
            bottom = torch.cat([torch.zeros(self.G * self.q, self.p, dtype=g.dtype),
                                torch.block_diag(*[self.Linv] * self.G)], 1)
            top = torch.cat([top, bottom], 0)
        return r, top, g, F


def _pnls(problem, theta, iterations=10, tol=1e-9):
    """Levenberg-Marquardt on the penalised residuals from ``theta``: ``(theta, g, F,
    cost, iterations)`` at the end."""
    r, J, g, F = problem(theta)
    cost = float(r @ r)
    lam = 1e-4
    for it in range(iterations):
        A = J.T @ J
        grad = J.T @ r
        d = torch.diagonal(A).clamp_min(1e-12)
        try:
            step = -torch.linalg.solve(A + lam * torch.diag(d), grad)
        except RuntimeError:
            lam *= 10
            continue
        new = theta + step
        r2, J2, g2, F2 = problem(new)
        c2 = float(r2 @ r2)
        if math.isfinite(c2) and c2 <= cost and bool(torch.isfinite(J2).all()):
            small = cost - c2 <= tol * max(cost, 1e-300) or \
                float(step.abs().max()) < 1e-8
            theta, r, J, g, F, cost = new, r2, J2, g2, F2, c2
            lam = max(lam / 10, 1e-12)
            if small:
                break
        else:
            lam *= 8
            if lam > 1e12:
                break
    return theta, g, F, cost, it + 1


class _Linear:
    """The linearised model's marginal likelihood (module docstring) in ``psi`` = (log sd of
    each random effect, unconstrained correlations where ``full``, log sigma per output)."""

    def __init__(self, pop, g, F, phi, full):
        self.pop, self.full = pop, full
        G, q = pop.n_groups, pop.B.shape[1]
        self.q, self.m = q, len(pop.data.outputs)
        gi = pop.obs_group
        counts = np.bincount(gi, minlength=G)
        nmax = int(counts.max())
        self.mask = torch.zeros(G, nmax, dtype=torch.bool)
        self.pos = np.zeros(gi.shape[0], dtype=int)
        seen = np.zeros(G, dtype=int)
        for k, i in enumerate(gi):
            self.pos[k] = seen[i]
            seen[i] += 1
        idx = (torch.as_tensor(gi), torch.as_tensor(self.pos))
        self.mask[idx] = True
        Xn = torch.einsum("np,npk->nk", F, pop.A[torch.as_tensor(gi)])
        Zn = F @ pop.B
        wn = pop.obs_z - g + (F * phi[torch.as_tensor(gi)]).sum(1)
        self.X = torch.zeros(G, nmax, Xn.shape[1], dtype=g.dtype)
        self.Z = torch.zeros(G, nmax, q, dtype=g.dtype)
        self.w = torch.zeros(G, nmax, dtype=g.dtype)
        self.noise = torch.zeros(G, nmax, dtype=torch.long)
        _check_informed(pop, Xn, phi)
        self.X[idx], self.Z[idx], self.w[idx] = Xn, Zn, wn
        self.noise[idx] = torch.as_tensor(pop.noise_index)
        self.n = gi.shape[0]
        self.corr = biject_to(constraints.corr_cholesky)

    def size(self):
        return self.q + (self.q * (self.q - 1) // 2 if self.full else 0) + self.m

    def unpack(self, psi):
        q = self.q
        sd = psi[:q].exp()
        k = q
        if self.full and q > 1:
            Lr = self.corr(psi[q:q + q * (q - 1) // 2])
            k += q * (q - 1) // 2
            L = sd[:, None] * Lr
            omega = L @ L.T
        else:
            omega = torch.diag(sd ** 2)
        sigma = psi[k:k + self.m].exp()
        return omega, sigma

    def pack(self, omega, sigma):
        sd = torch.sqrt(torch.diagonal(omega))
        parts = [sd.log()]
        if self.full and self.q > 1:
            R = omega / (sd[:, None] * sd[None, :])
            parts.append(self.corr.inv(torch.linalg.cholesky(R)))
        parts.append(sigma.log())
        return torch.cat(parts)

    def terms(self, psi):
        """``(loglik, beta_hat, (sum X'V^-1 X)^-1, V^-1 (w - X beta), omega, sigma)``."""
        omega, sigma = self.unpack(psi)
        D = torch.where(self.mask, sigma[self.noise] ** 2, torch.ones_like(self.w))
        V = self.Z @ omega @ self.Z.transpose(1, 2) + torch.diag_embed(D)
        L = torch.linalg.cholesky(V)
        Vi_X = torch.cholesky_solve(self.X, L)
        Vi_w = torch.cholesky_solve(self.w[..., None], L)[..., 0]
        M = torch.einsum("gnk,gnl->kl", self.X, Vi_X)
        b = torch.einsum("gnk,gn->k", self.X, Vi_w)
        Mi = torch.linalg.inv(M)
        beta = Mi @ b
        res = self.w - torch.einsum("gnk,k->gn", self.X, beta)
        Vi_r = torch.cholesky_solve(res[..., None], L)[..., 0]
        logdet = 2 * torch.log(torch.diagonal(L, dim1=1, dim2=2)).sum()
        ll = -0.5 * (logdet + (res * Vi_r).sum() + self.n * math.log(2 * math.pi))
        return ll, beta, Mi, Vi_r, omega, sigma

    def maximise(self, psi):
        """The variance parameters maximising :meth:`terms`' log-likelihood from ``psi``
        (L-BFGS-B, the gradient by autograd); ``psi`` kept where a trial fails."""
        from scipy.optimize import minimize

        def f(v):
            p = torch.as_tensor(v, dtype=torch.float64).requires_grad_(True)
            try:
                loss = -self.terms(p)[0]
            except RuntimeError:          # a trial Omega not positive definite
                return math.inf, np.zeros_like(v)
            loss.backward()
            return float(loss.detach()), p.grad.numpy().copy()
        x0 = psi.detach().numpy().copy()
        found = minimize(f, x0, jac=True, method="L-BFGS-B",
                         options={"maxiter": 200, "ftol": 1e-14, "gtol": 1e-9})
        best = found.x if np.isfinite(found.fun) and found.fun <= f(x0)[0] else x0
        return torch.as_tensor(best, dtype=torch.float64)

    def blup(self, psi):
        ll, beta, Mi, Vi_r, omega, sigma = self.terms(psi)
        eta = torch.einsum("kl,gnl,gn->gk", omega, self.Z, Vi_r) if self.q else \
            torch.zeros(self.pop.n_groups, 0, dtype=beta.dtype)
        return beta.detach(), eta.detach(), float(ll)


def _rounds(pop, beta, eta, omega, sigma, psi, steps, full, iterations, tol, history):
    """PNLS and LME steps in turn (module docstring) until nothing moves by ``tol``."""
    converged = False
    for _ in range(iterations):
        problem = _Penalised(pop, omega, sigma, steps)
        theta, g, F, cost, inner = _pnls(problem, torch.cat([beta, eta.reshape(-1)]))
        beta_p, eta_p = problem.split(theta)
        lin = _Linear(pop, g, F, pop.phi(beta_p, eta_p), full)
        start = lin.pack(omega, sigma) if psi is None else psi
        psi_new = lin.maximise(start)
        beta_new, eta_new, ll = lin.blup(psi_new)
        for _ in range(20):             # the linear model's move, halved back towards the
            g_new, _ = _predictions(pop, pop.phi(beta_new, eta_new), steps, False)
            if bool(torch.isfinite(g_new).all()):     # PNLS answer where it overflows
                break
            beta_new, eta_new = (beta_p + beta_new) / 2, (eta_p + eta_new) / 2
        omega, sigma = (v.detach() for v in lin.unpack(psi_new))
        moved = max(float((beta_new - beta).abs().max()),
                    float((psi_new - start).abs().max()) if psi is not None else math.inf)
        history.append({"round": len(history) + 1, "loglik": ll, "pnls_iterations": inner,
                        "moved": moved, "steps": steps})
        beta, eta, psi = beta_new, eta_new, psi_new
        if moved < tol:
            converged = True
            break
    return beta, eta, omega, sigma, psi, converged, steps


def fit_population(pop, iterations=50, tol=1e-6, steps=None, branches=True, seed=0, starts=0,
                   threads="auto"):
    r"""Fit a :class:`~pyro_pidkl.population.PopulationODE` by the Laplace (FOCE) marginal
    likelihood (module docstring).

    :param int iterations: at most this many PNLS / LME rounds.
    :param float tol: stop when no fixed effect, log sd or log sigma moves by more.
    :param int steps: Runge-Kutta steps (default: chosen, then checked at the end).
    :param bool branches: look for other coefficient sets that fit a group's data as well
        (:func:`~pyro_pidkl.population.branches.find_branches`).
    :param int starts: refit the population from this many further starts of the fixed
        effects (:func:`~pyro_pidkl.population.branches.population_optima`), report the most
        likely and warn of another optimum nearly as likely.
    :param threads: torch threads during the fit (:func:`~pyro_pidkl.infer.threads.fit_threads`:
        one by default, as for every fit of the library).
    :returns: a :class:`~pyro_pidkl.population.result.PopulationFit`.
    """
    with torch_threads(fit_threads(pop, threads)):
        return _fit_population(pop, iterations, tol, steps, branches, seed, starts)


def _fit_population(pop, iterations, tol, steps, branches, seed, starts):
    """:func:`fit_population` at the thread count it chose."""
    began, cpu = time.perf_counter(), time.process_time()
    G, q = pop.n_groups, pop.B.shape[1]
    beta = pop.beta_start.clone()
    eta = torch.zeros(G, q, dtype=torch.float64)
    phi0 = pop.phi(beta, eta)
    omega = torch.diag(pop.omega_start ** 2)
    if pop._density is None:
        pop.set_density(pop.spread_out(phi0, beta, omega))
    steps = steps or pop.choose_steps(pop.spread_out(phi0, beta, omega))
    g0, F0 = _predictions(pop, phi0, steps)
    _check_informed(pop, torch.einsum("np,npk->nk", F0, pop.A[torch.as_tensor(pop.obs_group)]))
    z = pop.obs_z
    sigma = torch.as_tensor([max(float(torch.sqrt(torch.mean(
        (z - g0)[torch.as_tensor(pop.noise_index == k)] ** 2))), 1e-3 * pop.spread[k])
        for k in range(len(pop.data.outputs))], dtype=torch.float64)
    full = pop.omega_kind == "full"
    history, psi, measured = [], None, False
    while True:
        beta, eta, omega, sigma, psi, converged, steps = _rounds(
            pop, beta, eta, omega, sigma, psi, steps, full, iterations,
            tol if measured else max(tol, 1e-2), history)
        phi = pop.phi(beta, eta)
        tried = pop.spread_out(phi, beta, omega)
        if not measured:                # the steps placed for the fitted groups' curves
            pop.set_density(tried)
            measured = True
            steps = pop.choose_steps(tried)
            continue
        checked = pop.choose_steps(tried, start=steps)
        if checked <= steps:
            break
        steps = checked                 # the fitted coefficients need finer steps: go on
    g, F = _predictions(pop, phi, steps)
    lin = _Linear(pop, g, F, phi, full)
    result = PopulationFit.from_linear(pop, lin, psi, beta, eta, steps, converged, history)
    optima = []
    if starts:
        found = sorted(population_optima(pop, result, fit_population, starts, seed=seed),
                       key=lambda f: -f.loglik)
        result = found[0]                       # the most likely is reported
        optima = say_optima(pop, found)
        for line in optima:
            warnings.warn(line, ModelMisfitWarning, stacklevel=3)
    if branches:
        result.branches = find_branches(pop, result, seed=seed, refit=fit_population)
    result.branches.setdefault("lines", [])
    result.branches["lines"] = optima + result.branches["lines"]
    result.seconds = time.perf_counter() - began
    result.cpu_seconds = time.process_time() - cpu
    return result
