r"""A PDE solved by a GP conditioned on the equation, past the size a dense covariance
holds: a Matern prior, sparse Cholesky factors of precisions, and conjugate gradients.

The model is the physics-conditioned GP's in solver mode (no unknown coefficient): the
solution :math:`u \sim \mathcal{GP}(0, k)`, observed exactly (up to a nugget) at the data
points :math:`X` and conditioned on :math:`\psi[u](z) = g(z)` at the collocation points
:math:`Z`, with :math:`\psi` linearised by Gauss-Newton,
:math:`\psi[u] \approx b + \sum_\alpha J_\alpha \partial^\alpha u`. Each step solves

.. math::
    \Theta_{\mathrm{lin}}\, \lambda = \begin{bmatrix} y \\ g(Z) - b(Z) \end{bmatrix},
    \qquad \Theta_{\mathrm{lin}} = C\, \Theta\, C^\top,

with :math:`\Theta` the covariance of the *base* measurements (the value at every point,
and each derivative :math:`\partial^\alpha` the equation reads at every collocation
point) and :math:`C` the sparse matrix of the data and the linearised operator on them.
The new solution's values and derivatives at all points are :math:`\Theta C^\top \lambda`,
and anywhere else :math:`u(x) = \operatorname{cov}(u(x), C\phi)\, \lambda`.

Nothing of size :math:`n^2` is formed (the algorithm of Chen, Owhadi & Schaefer, Math.
Comp. 2025, for any equation the library linearises):

* :math:`\Theta \approx (U U^\top)^{-1}` by the KL-optimal sparse factor
  (:class:`~pyro_pidkl.gp.sparse_cholesky.SparseInverseCholesky`, radius ``rho``), built
  once: a product :math:`\Theta_{\mathrm{lin}} v` is two sparse triangular solves;
* :math:`\Theta_{\mathrm{lin}}` is solved by conjugate gradients, preconditioned by its own
  sparse factor (radius ``rho_preconditioner``), rebuilt each Gauss-Newton step.

The Matern kernel is what makes the factors sparse and accurate (its conditional
covariances screen; the SE kernel's do not), the rougher the better for the factors (7/2,
the smoothest with the second derivatives the equations read). Its lengthscale is learned
as the dense solver's is: by maximising the linearised measurements' marginal likelihood
on a maximin subset of the points (``lengthscale="learn"``), or given; with ``nu="auto"``
the smoothness too (7/2, 9/2 or 11/2) where the covariance is small enough to be factored
exactly, since there a smoother prior can be the more accurate (in three inputs).
"""

import math
import time
import warnings

import numpy as np
import scipy.sparse
import scipy.sparse.linalg
import torch
from scipy.spatial import cKDTree

from ...checks import as_inputs
from ...errors import ConvergenceWarning, SolverRefusedError
from ...gp.sparse_cholesky import SparseInverseCholesky, maximin_order
from ...infer.threads import fit_threads, torch_threads
from ...physics.collocation import collocation_points
from ...physics.derivatives import Inputs
from ...physics.linearise import derivatives_read, is_linear
from ..parts.solvers import SparseCholesky
from .sparse_lengthscale import learn_lengthscale
from .sparse_measurements import SparseMeasurements, _moved
from .sparse_prediction import SparsePrediction

__all__ = ["SparseCholeskySolver", "SparseSolveResult", "default_radius"]


def default_radius(rho2, d):
    r"""The conditioning radius in ``d`` dimensions whose ball holds as many points as the
    radius ``rho2`` does in two (the factor's accuracy follows the size of the conditioning
    sets), and never less than ``rho2``: :math:`\max(\rho_2, (\pi \rho_2^2 / V_d)^{1/d})`,
    :math:`V_d` the unit ball's volume (1-D: 4 becomes 25; 3-D stays 4)."""
    volume = math.pi ** (d / 2) / math.gamma(d / 2 + 1)
    return max(rho2, (math.pi * rho2 ** 2 / volume) ** (1 / d))


class SparseSolveResult:
    """What :meth:`SparseCholeskySolver.solve` did: Gauss-Newton ``iterations``,
    ``converged``, ``change`` (the last relative change of the solution at the points),
    ``cg_iterations`` (per step), ``seconds`` and ``factor_seconds`` (the sparse factors)."""

    def __init__(self, iterations, converged, change, cg_iterations, seconds, factor_seconds):
        self.iterations, self.converged, self.change = iterations, converged, change
        self.cg_iterations, self.seconds, self.factor_seconds = (cg_iterations, seconds,
                                                                 factor_seconds)

    def __repr__(self):
        return (f"SparseSolveResult(iterations={self.iterations}, converged={self.converged}, "
                f"change={self.change:.3g}, cg_iterations={self.cg_iterations}, "
                f"seconds={self.seconds:.3g})")


class SparseCholeskySolver(SparseMeasurements, SparsePrediction):
    r"""Solve :math:`\psi[u] = g` from data at ``X`` (boundary values, or any point values)
    with collocation points ``collocation`` (module docstring).

    :param X: ``(n, d)`` data inputs; ``y`` ``(n,)`` values.
    :param equation: a :class:`~pyro_pidkl.physics.Equation` with no learned coefficient,
        reading derivatives of order at most two.
    :param collocation: ``(M, d)`` collocation points, distinct from each other and from
        ``X``, or a count ``M`` of scrambled Sobol points in ``domain``.
    :param source: a callable ``g(x)`` (``x[name]`` the ``(M,)`` column of an input, as for
        :class:`PhysicsConditionedGP`),
        ``(M,)`` values at the collocation points, or ``None`` (zero).
    :param input_names: the ``d`` input names (default: the equation's inputs).
    :param domain: a :class:`~pyro_pidkl.physics.Box`, for a count of collocation points.
    :param lengthscale: ``"learn"`` (default), a float or ``(d,)`` in user units.
    :param nu: the Matern kernel's smoothness, a half-integer from 7/2, or ``"auto"`` (the
        default): with a learned lengthscale and at most ``dense_limit`` measurements (the
        covariance then usually factored exactly), the one of :attr:`NU_CANDIDATES` whose
        learned lengthscale gives the largest marginal likelihood; otherwise 7/2. A smoother
        kernel's sparse factor preconditions CG poorly (at 10,201 points, 11/2 took 183-792
        CG iterations a step against 5-38 for 7/2, six times the time, at the same error),
        while in three inputs the smoother prior is the more accurate (the ``cube`` case of
        ``benchmarks/solver_speed.py``).
    :param settings: the numerical settings, a
        :class:`~pyro_pidkl.models.parts.solvers.SparseCholesky` (radii, nugget, tolerances,
        iteration limits, supernodes, the dense limit; given as keywords too).
    :param int threads: torch threads while solving (``None``: as set; ``"auto"``: as
        :func:`~pyro_pidkl.infer.threads.fit_threads` decides for a fit). One by default: the
        factors are many small batches, which a second thread barely speeds up on a quiet
        machine and slows several times when another process keeps a core busy
        (``docs/speed.md``).

    When conjugate gradients fail in :attr:`CG_STALLS` Gauss-Newton steps in a row the solve
    is refused (:class:`~pyro_pidkl.errors.SolverRefusedError`, the reason in one line; the
    last iterate and ``result`` kept): the preconditioner does not work for that equation.

    The solution: ``solver(Xnew)`` (:meth:`posterior_mean`, solving first if needed) anywhere
    in the points' box, :attr:`collocation_values` at the collocation points. :meth:`solve`
    returns the diagnostics (a :class:`SparseSolveResult`, kept as ``result``); ``ell`` is
    the lengthscale used.

    .. code-block:: python

        solver = pk.SparseCholeskySolver(X_boundary, u_boundary, eq, 10_000, domain=box)
        u = solver(X_test)            # (P,): solves, then predicts
        solver.result                 # Gauss-Newton steps, CG iterations, seconds
    """

    #: conjugate gradients failing in this many Gauss-Newton steps in a row refuse the solve
    CG_STALLS = 3

    #: the smoothnesses ``nu="auto"`` chooses from, by the marginal likelihood
    NU_CANDIDATES = (3.5, 4.5, 5.5)

    def __init__(self, X, y, equation, collocation, source=None, input_names=None, domain=None,
                 lengthscale="learn", nu="auto", threads=1, settings=None, **older):
        if settings is None:
            settings = SparseCholesky(**older)
        elif older:
            raise ValueError(f"Expected the sparse solver's settings in pk.SparseCholesky(...) "
                             f"or as keywords, not both; got {sorted(older)} beside it")
        elif not isinstance(settings, SparseCholesky):
            raise ValueError(f"Expected settings to be pk.SparseCholesky(...); got {settings!r}")
        self.settings = settings
        names = tuple(input_names or equation.inputs or ())
        self.X = self._points(X, "X", len(names) or None)
        d = self.X.shape[1]
        if not names:
            names = tuple(f"x{j}" for j in range(d))
        if len(names) != d:
            raise ValueError(f"Expected {d} input names for X of shape {tuple(self.X.shape)}; "
                             f"got {names}")
        equation.check_inputs(names)
        learned = [n for n, s in equation.specs.items() if not s.fixed]
        if learned:
            raise ValueError(f"Expected an equation without learned coefficients (the sparse "
                             f"solver solves, it does not fit); got {learned}: use "
                             f"PhysicsConditionedGP to learn them")
        self.names, self.equation = names, equation
        self.y = torch.as_tensor(y, dtype=torch.float64).reshape(-1)
        if self.y.shape[0] != self.X.shape[0]:
            raise ValueError(f"Expected y of shape ({self.X.shape[0]},) to match X; got "
                             f"{tuple(torch.as_tensor(y).shape)}")
        if not bool(torch.isfinite(self.y).all()):
            raise ValueError("Expected finite y; got NaN/inf")
        if isinstance(collocation, int) and not isinstance(collocation, bool):
            if domain is None:
                raise ValueError(f"Expected collocation points (M, {d}), or a count with a "
                                 f"domain=Box(...); got the count {collocation} alone")
            collocation = collocation_points(domain, collocation, input_names=names)
        self.Z = self._points(collocation, "collocation", d)
        allp = torch.cat([self.X, self.Z]).numpy()
        dist, _ = cKDTree(allp).query(allp, k=2)
        if allp.shape[0] > 1 and not (dist[:, 1] > 0).all():
            raise ValueError("Expected distinct data and collocation points; got "
                             f"{int((dist[:, 1] == 0).sum())} repeated")
        self.g = self._source(source)
        self.indices = derivatives_read(equation, self.Z[: min(64, len(self.Z))], names)
        too_high = [i for i in self.indices if len(i) > 2]
        if too_high:
            raise ValueError(f"Expected derivatives of order at most 2 (the Matern 7/2 "
                             f"kernel's); equation {equation.name!r} reads "
                             f"{[tuple(names[j] for j in i) for i in too_high]}")
        self.rho = default_radius(4.0, d) if settings.rho is None else float(settings.rho)
        self.rho_preconditioner = (default_radius(6.0, d) if settings.rho_preconditioner is None
                                   else float(settings.rho_preconditioner))
        for name in ("nugget", "tol", "max_iterations", "cg_tol", "cg_max_iterations",
                     "learn_points", "preconditioner_tol", "lam", "alpha"):
            setattr(self, name, getattr(settings, name))
        if nu != "auto" and not (isinstance(nu, (int, float)) and not isinstance(nu, bool)
                                 and float(nu) >= 3.5 and float(nu - 0.5).is_integer()):
            raise ValueError(f"Expected nu 'auto' or a half-integer >= 3.5 (7/2, 9/2, ...); "
                             f"got {nu!r}")
        self.nu_setting = nu
        #: the Matern smoothness used (``nu="auto"``: chosen when the lengthscale is learned)
        self.nu = 3.5 if nu == "auto" else float(nu)
        self.nu_likelihoods = None
        self.dense_limit = int(settings.dense_limit)
        self.threads = fit_threads(self, threads)
        if isinstance(lengthscale, str) and lengthscale != "learn":
            raise ValueError(f"Expected lengthscale 'learn', a float or ({d},); got "
                             f"{lengthscale!r}")
        self.lengthscale = lengthscale
        self.result = None

    # -- inputs ------------------------------------------------------------------------
    @staticmethod
    def _points(P, what, d):
        P = as_inputs(P, what=what)[0]
        if (d is not None and P.shape[1] != d) or P.shape[0] < 1:
            raise ValueError(f"Expected {what} of shape (n, {d or 'd'}); got {tuple(P.shape)}")
        if not bool(torch.isfinite(P).all()):
            raise ValueError(f"Expected finite {what}; got NaN/inf")
        return P

    def _source(self, source):
        M = self.Z.shape[0]
        if source is None:
            return torch.zeros(M, dtype=torch.float64)
        if callable(source):
            with torch.no_grad():
                g = source(Inputs(self.Z, self.names))
        else:
            g = source
        g = torch.as_tensor(g, dtype=torch.float64).reshape(-1)
        if g.shape[0] != M:
            raise ValueError(f"Expected the source at the {M} collocation points; got "
                             f"shape {tuple(g.shape)}")
        return g

    # -- the measurements --------------------------------------------------------------
    # -- the lengthscale ---------------------------------------------------------------
    def learn_lengthscale(self):
        r"""The lengthscale (``(d,)``, user units) that maximises the log marginal
        likelihood of the data and the linearised equation on a maximin subset of
        ``learn_points`` collocation points, dense
        (:func:`~pyro_pidkl.models.conditioning.sparse_lengthscale.learn_lengthscale`); with
        ``nu="auto"`` and at most ``dense_limit`` measurements, for each smoothness in
        :attr:`NU_CANDIDATES`, and the best pair is kept (``nu`` set,
        ``nu_likelihoods`` the negative log likelihood of each)."""
        candidates = (self.NU_CANDIDATES if self.nu_setting == "auto"
                      and self._measurement_count() <= self.dense_limit else (self.nu,))
        ell, self.nu, self.nu_likelihoods = learn_lengthscale(self, candidates)
        return ell

    def _measurement_count(self):
        """The covariance's measurements: every point's value and each derivative at Z."""
        return self.X.shape[0] + self.Z.shape[0] * len(self.indices)

    # -- the solve ---------------------------------------------------------------------
    def solve(self):
        """Gauss-Newton with the sparse factors: a :class:`SparseSolveResult` (also kept as
        ``self.result``); the solution is then :meth:`posterior_mean`."""
        with torch_threads(self.threads):
            return self._solve()

    def _solve(self):
        t0 = time.perf_counter()
        if isinstance(self.lengthscale, str):
            self.lengthscale = self.learn_lengthscale()
        ell = torch.as_tensor(self.lengthscale, dtype=torch.float64).expand(len(self.names))
        self.ell = ell
        cov = self._covariance(ell)
        n, M, w = self.X.shape[0], self.Z.shape[0], len(self.indices)
        points, point_of, Wb, rows = self._base(self.Z)
        self.measurements = point_of.shape[0]
        order = maximin_order((points / ell).numpy())
        t1 = time.perf_counter()
        diag_b = self._diagonal(points, point_of, Wb, cov)
        big = SparseInverseCholesky(points, point_of, Wb, cov, nugget=self.nugget * diag_b,
                                    rho=self.rho, order=order, scale=ell, lam=self.lam,
                                    alpha=self.alpha, dense_limit=self.dense_limit)
        factor_s = time.perf_counter() - t1
        self.supernodes = big.supernodes
        jet = np.zeros((w, M))
        cg_counts, change, converged = [], math.inf, False
        merit, pre, pre_weights, lam, stalled = math.inf, None, None, None, 0
        state = self._linearised(torch.as_tensor(jet), self.Z, self.g)
        for it in range(1, self.max_iterations + 1):
            Wl, rhs, _ = state
            C = self._operator(Wl.numpy(), rows, n, M, point_of.shape[0])
            # an exact preconditioner is rebuilt each step (cheap at its size, and a stale
            # one of a smooth kernel's ill-conditioned covariance took CG to 1,000 steps)
            if pre is None or pre.dense or _moved(Wl, pre_weights) > self.preconditioner_tol:
                t1 = time.perf_counter()
                diag_l = self._diagonal(points, np.arange(n + M), Wl, cov)
                pre = SparseInverseCholesky(points, np.arange(n + M), Wl, cov,
                                            nugget=self.nugget * diag_l,
                                            rho=self.rho_preconditioner, order=order,
                                            scale=ell, lam=self.lam, alpha=self.alpha,
                                            dense_limit=self._preconditioner_limit(n + M))
                pre_weights = Wl
                factor_s += time.perf_counter() - t1
            A = scipy.sparse.linalg.LinearOperator(
                (n + M, n + M), matvec=lambda v: C @ big.covariance_matvec(C.T @ v),
                dtype=np.float64)
            Mop = scipy.sparse.linalg.LinearOperator((n + M, n + M), matvec=pre.precision_matvec,
                                                     dtype=np.float64)
            b = rhs.numpy()
            # inexact Gauss-Newton: each solve a little more accurate than the last step; a
            # linear equation's one solve is the answer, to the full tolerance
            rtol = (self.cg_tol if self._linear()
                    else max(self.cg_tol, min(1e-3, 1e-2 * change)))
            count = [0]
            lam, info = scipy.sparse.linalg.cg(
                A, b, x0=pre.precision_matvec(b) if lam is None else lam, M=Mop, rtol=rtol,
                maxiter=self.cg_max_iterations,
                callback=lambda _: count.__setitem__(0, count[0] + 1))
            cg_counts.append(count[0])
            stalled = stalled + 1 if info != 0 else 0
            if info != 0 and stalled < self.CG_STALLS:
                warnings.warn(f"conjugate gradients stopped at {count[0]} iterations above "
                              f"the tolerance {self.cg_tol} (Gauss-Newton step {it})",
                              ConvergenceWarning, stacklevel=2)
            z = big.covariance_matvec(C.T @ lam)
            new = np.stack([z[rows[k]] for k in range(w)])
            # damped: the largest step in 1, 1/2, ... that does not raise the residual; the
            # full step near the solution (below 1e-3), where the residual sits on the floor
            # of the approximation and moves with rounding
            step, step_size = new - jet, 1.0
            full = float(np.abs(step[0]).max()) / max(float(np.abs(new[0]).max()), 1e-300)
            while True:
                candidate = jet + step_size * step
                # the next step's linearisation, whose residual is the merit
                state = self._linearised(torch.as_tensor(candidate), self.Z, self.g)
                value = state[2]
                if full <= 1e-3 or value <= 1.01 * merit or step_size <= 2 ** -6 \
                        or not math.isfinite(merit):
                    break
                step_size *= 0.5
            jet, merit = candidate, value
            change = step_size * full
            self.values = np.concatenate([z[:n], jet[0]])
            # converged only on a full step: a damped one is not the solution of its system
            if step_size == 1.0 and (change <= self.tol or self._linear()):
                converged = True
                break
            if stalled >= self.CG_STALLS:
                self.jet = jet
                self.result = SparseSolveResult(it, False, change, cg_counts,
                                                time.perf_counter() - t0, factor_s)
                raise SolverRefusedError(
                    f"Expected conjugate gradients to converge; they stopped above the "
                    f"tolerance {rtol:.3g} at {self.cg_max_iterations} iterations in "
                    f"{stalled} Gauss-Newton steps in a row (step {it}, relative change "
                    f"{change:.3g}): the preconditioner, the sparse factor of the linearised "
                    f"operator's covariance, does not screen for this equation (e.g. "
                    f"transport in space-time); solve it with PhysicsConditionedGP (dense)",
                    self.result)
        if not converged:
            warnings.warn(f"Gauss-Newton stopped after {it} steps with a relative change of "
                          f"{change:.3g} (tol {self.tol})", ConvergenceWarning, stacklevel=2)
        self.jet = jet
        self.result = SparseSolveResult(it, converged, change, cg_counts,
                                        time.perf_counter() - t0, factor_s)
        return self.result

    #: a preconditioner of at most this many measurements (data plus collocation points)
    #: is exact when the covariance's factor may be (a Cholesky factorisation of about a
    #: second; CG then takes one or two iterations, where a sparse preconditioner can stall)
    PRECONDITIONER_DENSE_LIMIT = 4_000

    def _preconditioner_limit(self, m):
        limit = min(self.dense_limit, self.PRECONDITIONER_DENSE_LIMIT)
        return limit if m <= limit else None       # else: exact only where cheaper

    def _linear(self):
        if not hasattr(self, "_is_linear"):
            self._is_linear = is_linear(self.equation, self.Z[:min(32, len(self.Z))], self.names)
        return self._is_linear

    # -- predictions -------------------------------------------------------------------
    def __call__(self, Xnew):
        """The solution at ``Xnew`` ``(P, d)``: :meth:`posterior_mean`."""
        return self.posterior_mean(Xnew)
