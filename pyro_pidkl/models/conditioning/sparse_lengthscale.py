r"""The sparse solver's lengthscale (and, with ``nu="auto"``, the Matern kernel's
smoothness), learned where a dense covariance is cheap: on a maximin subset of the
collocation points (and as many data in proportion), the Matern marginal likelihood of the
linearised measurements maximised over the lengthscale with the scale profiled, alternated
with Gauss-Newton on that subset; each candidate smoothness gets its own lengthscale, and
the one of the largest marginal likelihood is kept."""

import math

import scipy.optimize
import torch

from ...physics.collocation import maximin_subset

__all__ = ["learn_lengthscale"]


def learn_lengthscale(solver, candidates=(3.5,)):
    r"""The lengthscale (``(d,)``, user units) and smoothness of a sparse solver
    (:class:`~pyro_pidkl.models.conditioning.sparse_solver.SparseCholeskySolver`) that maximise the log
    marginal likelihood of the data and the linearised equation on a maximin subset of
    ``learn_points`` collocation points (and as many data points in proportion),
    alternated with Gauss-Newton on that subset (dense), for each smoothness in
    ``candidates``: ``(lengthscale, nu, {nu: negative log likelihood})``."""
    fits = {nu: _learn(solver, nu) for nu in candidates}
    best = min(fits, key=lambda nu: fits[nu][1])
    return fits[best][0], best, {nu: fit[1] for nu, fit in fits.items()}


def _learn(solver, nu):
    """``(lengthscale, negative log marginal likelihood at it)`` for smoothness ``nu``."""
    X, y = solver.X, solver.y
    Zi = maximin_subset(solver.Z, solver.learn_points)
    frac = len(Zi) / solver.Z.shape[0]
    Xi = maximin_subset(X, max(1, min(X.shape[0], math.ceil(frac * X.shape[0]))))
    Z, g = solver.Z[Zi], solver.g[Zi]
    every = torch.cat([X, solver.Z])
    span = (every.amax(0) - every.amin(0)).clamp_min(1e-12)
    log_ell = torch.log(0.2 * span)
    jet = torch.zeros(len(solver.indices), Z.shape[0], dtype=torch.float64)
    sub = _DenseSubset(solver, X[Xi], y[Xi], Z, g, nu)
    for _ in range(4):
        W, rhs = sub.linearised(jet)
        log_ell, _ = sub.fit_lengthscale(log_ell, W, rhs, span)
        for _ in range(10):
            W, rhs = sub.linearised(jet)
            new = sub.mean_jet(log_ell.exp(), W, rhs)
            change = float((new - jet).abs().max() / new.abs().max().clamp_min(1e-300))
            jet = new
            if change < 1e-6:
                break
    W, rhs = sub.linearised(jet)
    return log_ell.exp(), sub.negative_log_likelihood(log_ell, W, rhs)


class _DenseSubset:
    """The linearised measurements on a small subset, dense: the lengthscale's marginal
    likelihood and the Gauss-Newton mean there."""

    def __init__(self, solver, X, y, Z, g, nu):
        self.s, self.X, self.y, self.Z, self.g, self.nu = solver, X, y, Z, g, nu
        self.points = torch.cat([X, Z])

    def linearised(self, jet):
        return self.s._linearised(jet, self.Z, self.g, self.y)[:2]

    def _theta(self, ell, W):
        T = self.s._covariance(ell, self.nu)(self.points, W, self.points, W)
        return T + torch.diag(T.diagonal() * max(self.s.nugget, 1e-10))

    def fit_lengthscale(self, log_ell, W, rhs, span):
        r"""Maximise :math:`\log N(\text{rhs} \mid 0, \sigma^2 \Theta(\ell))` over
        :math:`\ell` with :math:`\sigma^2` at its optimum (profiled):
        :math:`-\tfrac m2 \log(r^\top \Theta^{-1} r / m) - \tfrac12 \log\det\Theta`,
        each lengthscale between 1e-3 and 1 times the points' extent ``span`` along its
        input (points inside a box say nothing of variation on longer scales, and the
        sparse factor of a kernel much longer than the box is inaccurate)."""
        def objective(u):
            le = torch.tensor(u, dtype=torch.float64, requires_grad=True)
            nll = self._nll(le, W, rhs)
            nll.backward()
            return float(nll.detach()), le.grad.numpy().copy()

        res = scipy.optimize.minimize(objective, log_ell.numpy(), jac=True, method="L-BFGS-B",
                                      bounds=[(math.log(1e-3 * float(v)), math.log(float(v)))
                                              for v in span],
                                      options={"maxiter": 100})
        return torch.as_tensor(res.x), float(res.fun)

    def _nll(self, log_ell, W, rhs):
        m = rhs.shape[0]
        L = torch.linalg.cholesky(self._theta(log_ell.exp(), W))
        a = torch.cholesky_solve(rhs[:, None], L)[:, 0]
        return 0.5 * m * torch.log(rhs @ a / m) + torch.log(L.diagonal()).sum()

    def negative_log_likelihood(self, log_ell, W, rhs):
        """The profiled negative log marginal likelihood at ``log_ell`` (a float)."""
        with torch.no_grad():
            return float(self._nll(torch.as_tensor(log_ell), W, rhs))

    def mean_jet(self, ell, W, rhs):
        with torch.no_grad():
            T = self._theta(ell, W)
            a = torch.linalg.solve(T, rhs)
            w = len(self.s.indices)
            rows = []
            for k in range(w):
                E = torch.zeros(self.Z.shape[0], w, dtype=torch.float64)
                E[:, k] = 1
                rows.append(self.s._covariance(ell, self.nu)(self.Z, E, self.points, W) @ a)
            return torch.stack(rows)
