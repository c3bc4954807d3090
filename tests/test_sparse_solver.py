"""The Matern 7/2 kernel's derivative covariances, the sparse inverse Cholesky factor, and
the sparse-Cholesky PDE solver: against autograd, the Bessel form, the dense matrix and
manufactured solutions."""

import math
import warnings

import numpy as np
import pytest
import scipy.special
import torch

import pyro_pidkl as pk
from autograd_reference import pair_derivative
from pyro_pidkl.gp.sparse_cholesky import SparseInverseCholesky
from pyro_pidkl.kernels.matern import matern72_measurement_covariance

D = torch.float64


def _matern(x, y, ell):
    r = torch.sqrt(7 * (((x - y) / ell) ** 2).sum())
    return (1 + r + 0.4 * r ** 2 + r ** 3 / 15) * torch.exp(-r)


def _autograd_cov(p, q, a, c, ell):
    return pair_derivative(lambda A, B: _matern(A[0], B[0], ell)[None, None], p, q, a, c)


def test_matern_derivative_covariances_match_autograd_and_the_bessel_form():
    g = torch.Generator().manual_seed(0)
    ell = torch.tensor([0.3, 0.5], dtype=D)
    P, Q = torch.rand(4, 2, dtype=D, generator=g), torch.rand(3, 2, dtype=D, generator=g)
    ind = [(), (0,), (1,), (0, 0), (1, 1), (0, 1)]
    for ia, a in enumerate(ind):
        for ic, c in enumerate(ind):
            WA, WB = torch.zeros(4, 6, dtype=D), torch.zeros(3, 6, dtype=D)
            WA[:, ia], WB[:, ic] = 1, 1
            got = matern72_measurement_covariance(P, WA, Q, WB, ind, ell, variance=1.7)
            ref = torch.stack([torch.stack([_autograd_cov(p, q, a, c, ell) for q in Q])
                               for p in P])
            assert torch.allclose(got, 1.7 * ref, rtol=1e-11, atol=1e-11 * float(ref.abs().max()))
    # the value against the general Matern form with a Bessel function, nu = 7/2
    r = np.linspace(0.01, 3, 50)
    z = math.sqrt(7) * r
    bessel = 2 ** (1 - 3.5) / scipy.special.gamma(3.5) * z ** 3.5 * scipy.special.kv(3.5, z)
    k = pk.kernels.Matern72(lengthscale=1.0)(torch.zeros(1, 1, dtype=D),
                                              torch.as_tensor(r)[:, None])
    assert np.allclose(k[0].numpy(), bessel, rtol=1e-12)


def test_matern_measurement_covariance_is_a_covariance_at_coincident_points():
    """Weighted value and second-derivative measurements, several at one point: the Gram
    matrix is symmetric positive definite and the lengthscale's gradient is finite (the
    distance's square root is not differentiated at 0)."""
    g = torch.Generator().manual_seed(1)
    P = torch.rand(5, 2, dtype=D, generator=g).repeat(2, 1)
    W = torch.randn(10, 3, dtype=D, generator=g)
    log_ell = torch.tensor([-1.0, -0.5], dtype=D, requires_grad=True)
    T = matern72_measurement_covariance(P, W, P, W, [(), (0, 0), (1, 1)], log_ell.exp())
    assert torch.allclose(T, T.T, atol=1e-12)
    assert float(torch.linalg.eigvalsh(T.detach()).min()) > -1e-9 * float(T.detach().diagonal().max())
    T.sum().backward()
    assert torch.isfinite(log_ell.grad).all()
    with pytest.raises(ValueError, match="total order at most 4"):
        matern72_measurement_covariance(P, W[:, :2], P, W[:, :2], [(), (0, 0, 0)], 0.3)


def _elliptic_measurements(n):
    g = torch.linspace(0, 1, n, dtype=D)
    pts = torch.cartesian_prod(g, g)
    inner = torch.nonzero(~((pts == 0).any(1) | (pts == 1).any(1))).flatten().numpy()
    point_of = np.concatenate([np.arange(len(pts)), inner, inner])
    W = np.zeros((len(point_of), 3))
    W[:len(pts), 0] = 1
    W[len(pts):len(pts) + len(inner), 1] = 1
    W[len(pts) + len(inner):, 2] = 1
    return pts, point_of, W


def _elliptic_covariance(n):
    """The elliptic measurements on an ``n x n`` grid, their Matern covariance function, the
    dense covariance with a nugget of 1e-8, and the nugget."""
    pts, point_of, W = _elliptic_measurements(n)
    ind = [(), (0, 0), (1, 1)]

    def cov(PA, WA, PB, WB):
        return matern72_measurement_covariance(PA, WA, PB, WB, ind, 0.3)
    Pm, Wt = pts[point_of], torch.as_tensor(W)
    theta = cov(Pm, Wt, Pm, Wt)
    nugget = 1e-8 * theta.diagonal()
    return pts, point_of, W, cov, (theta + torch.diag(nugget)).numpy(), nugget


def _kl(F, theta):
    """KL(N(0, Theta) || N(0, (U U^T)^-1)), what the factor minimises."""
    QT = F.precision_matvec(theta)
    return 0.5 * (np.trace(QT) - theta.shape[0] - np.linalg.slogdet(QT)[1])


def test_the_sparse_factor_is_exact_with_every_earlier_measurement_and_improves_with_rho():
    pts, point_of, W, cov, theta, nugget = _elliptic_covariance(8)
    m = len(point_of)
    v = np.random.default_rng(0).standard_normal(m)
    exact = SparseInverseCholesky(pts, point_of, W, cov, nugget=nugget.numpy(), rho=1e9,
                                  dense_limit=0)
    dense = SparseInverseCholesky(pts, point_of, W, cov, nugget=nugget.numpy(), rho=1e9,
                                  dense_limit=m)
    assert dense.dense and not exact.dense
    for F in (exact, dense):
        assert np.allclose(F.covariance_matvec(v), theta @ v, rtol=1e-7,
                           atol=1e-7 * np.abs(theta @ v).max())
        assert np.allclose(F.precision_matvec(theta @ v), v, rtol=1e-6, atol=1e-6)
        assert F.logdet() == pytest.approx(np.linalg.slogdet(theta)[1], rel=1e-9)
    # the KL divergence falls with the radius
    kl = []
    for rho in (2.0, 3.0, 5.0):
        F = SparseInverseCholesky(pts, point_of, W, cov, nugget=nugget.numpy(), rho=rho,
                                  dense_limit=0)
        kl.append(_kl(F, theta))
        assert F.nnz < exact.nnz
    assert kl[2] < kl[1] / 3 < kl[0] / 9 and kl[2] < 1.0


def _box(n):
    g = torch.linspace(0, 1, n, dtype=D)
    pts = torch.cartesian_prod(g, g)
    edge = (pts == 0).any(1) | (pts == 1).any(1)
    return pts[edge], pts[~edge]


def _u(X):
    return torch.sin(math.pi * X[:, 0]) * torch.sinh(X[:, 1]) + X[:, 0] * X[:, 1] ** 2


def _lap_u(X):
    return (-math.pi ** 2 + 1) * torch.sin(math.pi * X[:, 0]) * torch.sinh(X[:, 1]) \
        + 2 * X[:, 0]


def test_a_manufactured_poisson_solution_converges_as_collocation_grows():
    """-lap u = f with an exact source: the error at points off the grid falls with the
    grid; a linear equation takes one Gauss-Newton step."""
    errors = []
    for n in (9, 17):
        Xb, Z = _box(n)
        solver = pk.SparseCholeskySolver(
            Xb, _u(Xb), pk.Equation(lambda f, x: -f.laplacian("x", "y"), inputs=("x", "y")),
            Z, source=lambda x: -_lap_u(torch.stack([x["x"], x["y"]], 1)), lengthscale=0.4,
            dense_limit=0)
        res = solver.solve()
        assert res.converged and res.iterations == 1
        Xt = torch.rand(300, 2, dtype=D, generator=torch.Generator().manual_seed(0))
        errors.append(float((solver.posterior_mean(Xt) - _u(Xt)).abs().max()))
    assert errors[1] < errors[0] / 4 and errors[1] < 5e-3


def _dense_gauss_newton(Xb, yb, Z, g, ell, nugget, steps=30):
    """The same model solved densely: Gauss-Newton on -lap u + u^3 = g."""
    ind = [(), (0, 0), (1, 1)]
    P = torch.cat([Xb, Z])
    n = Xb.shape[0]
    u = torch.zeros(Z.shape[0], dtype=D)
    for _ in range(steps):
        W = torch.zeros(P.shape[0], 3, dtype=D)
        W[:n, 0] = 1
        W[n:, 0], W[n:, 1], W[n:, 2] = 3 * u ** 2, -1, -1
        T = matern72_measurement_covariance(P, W, P, W, ind, ell)
        T = T + torch.diag(nugget * T.diagonal())
        lam = torch.linalg.solve(T, torch.cat([yb, g + 2 * u ** 3]))
        E = torch.zeros(Z.shape[0], 3, dtype=D)
        E[:, 0] = 1
        u = matern72_measurement_covariance(Z, E, P, W, ind, ell) @ lam
    return u


def test_a_nonlinear_solve_matches_the_dense_solution_and_is_never_taken_for_linear():
    Xb, Z = _box(9)
    g = -_lap_u(Z) + _u(Z) ** 3
    eq = pk.Equation(lambda f, x: -f.laplacian("x", "y") + f ** 3, inputs=("x", "y"))
    solver = pk.SparseCholeskySolver(Xb, _u(Xb), eq, Z, source=g, lengthscale=0.4,
                                     rho=1e9, rho_preconditioner=1e9, nugget=1e-10, tol=1e-10)
    res = solver.solve()
    assert res.converged and res.iterations > 2         # Gauss-Newton iterated: nonlinear
    dense = _dense_gauss_newton(Xb, _u(Xb), Z, g, 0.4, 1e-10)
    assert torch.allclose(solver.collocation_values, dense, atol=1e-7)
    assert float((solver.collocation_values - _u(Z)).abs().max()) < 3e-2   # the grid's error
    # a prediction at the collocation points is the solution there; it changes nothing
    before = (solver.collocation_values.clone(), solver.result)
    assert torch.allclose(solver.posterior_mean(Z), before[0], atol=1e-8)
    assert torch.equal(solver.collocation_values, before[0]) and solver.result is before[1]


def test_sin_nonlinearity_in_one_dimension_with_the_learned_lengthscale():
    """u'' + sin(u) = g on [0, 2] with u = cos(2x) + x / 2: the default (learned)
    lengthscale, sparse factors at their default radii."""
    x = torch.linspace(0, 2, 121, dtype=D)[:, None]
    Xb, Z = x[[0, -1]], x[1:-1]

    def u(X):
        return torch.cos(2 * X[:, 0]) + X[:, 0] / 2
    g = -4 * torch.cos(2 * Z[:, 0]) + torch.sin(u(Z))
    eq = pk.Equation(lambda f, x: f.d("x", "x") + torch.sin(f), inputs=("x",))
    solver = pk.SparseCholeskySolver(Xb, u(Xb), eq, Z, source=g, dense_limit=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = solver.solve()
    assert res.converged and res.iterations > 1
    Xt = torch.rand(200, 1, dtype=D, generator=torch.Generator().manual_seed(0)) * 2
    assert float((solver.posterior_mean(Xt) - u(Xt)).abs().max()) < 1e-5
    assert 0 < float(solver.ell[0]) <= 2.0
    # the solution where a user looks first: the solver called on points, silent inside
    # the solved region, one line far outside it (there the mean is the prior's zero)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(solver(Xt), solver.posterior_mean(Xt))
    far = torch.tensor([[1.0], [30.0]], dtype=D)
    with pytest.warns(UserWarning, match=r"1 of 2 prediction points lie outside the solved "
                                         r"region \(x in \[0, 2\]\)"):
        mean = solver(far)
    assert abs(float(mean[1])) < 1e-3 and abs(float(mean[0]) - float(u(far[:1]))) < 1e-5


def test_the_solver_refuses_what_it_cannot_solve_in_one_line():
    Xb, Z = _box(5)
    yb = torch.zeros(len(Xb), dtype=D)
    with pytest.raises(ValueError, match="learned coefficients.*PhysicsConditionedGP"):
        pk.SparseCholeskySolver(Xb, yb, pk.Equation(
            lambda f, x, c: -f.laplacian("x", "y") + c * f, inputs=("x", "y"), c=1.0), Z)
    with pytest.raises(ValueError, match="order at most 2"):
        pk.SparseCholeskySolver(Xb, yb, pk.Equation(lambda f, x: f.d("x", "x", "x"),
                                                    inputs=("x", "y")), Z)
    eq = pk.Equation(lambda f, x: -f.laplacian("x", "y"), inputs=("x", "y"))
    with pytest.raises(ValueError, match="distinct data and collocation points"):
        pk.SparseCholeskySolver(Xb, yb, eq, torch.cat([Z, Xb[:1]]))
    with pytest.raises(ValueError, match="source at the 9 collocation points"):
        pk.SparseCholeskySolver(Xb, yb, eq, Z, source=torch.zeros(4))
    with pytest.raises(ValueError, match="y of shape"):
        pk.SparseCholeskySolver(Xb, yb[:3], eq, Z)
    with pytest.raises(ValueError, match="finite y"):
        pk.SparseCholeskySolver(Xb, yb * float("nan"), eq, Z)
    with pytest.raises(ValueError, match="a count with a domain"):
        pk.SparseCholeskySolver(Xb, yb, eq, 50)
    with pytest.raises(ValueError, match="Expected lengthscale 'learn'"):
        pk.SparseCholeskySolver(Xb, yb, eq, Z, lengthscale="auto")
    with pytest.raises(ValueError, match="Expected threads to be 'auto', None or an integer"):
        pk.SparseCholeskySolver(Xb, yb, eq, Z, threads=0)


def _matern_general(x, y, ell, nu):
    """The Matern 9/2 and 11/2 kernels in their textbook closed forms (Rasmussen & Williams
    eq. 4.16's polynomial times exponential), written out independently of the library."""
    r = torch.sqrt(2 * nu * (((x - y) / ell) ** 2).sum())
    if nu == 4.5:
        poly = 1 + r + 3 * r ** 2 / 7 + 2 * r ** 3 / 21 + r ** 4 / 105
    else:
        poly = 1 + r + 4 * r ** 2 / 9 + r ** 3 / 9 + r ** 4 / 63 + r ** 5 / 945
    return poly * torch.exp(-r)


@pytest.mark.parametrize("nu", [4.5, 5.5])
def test_smoother_matern_derivative_covariances_match_autograd_and_the_bessel_form(nu):
    g = torch.Generator().manual_seed(2)
    ell = torch.tensor([0.4, 0.7], dtype=D)
    P, Q = torch.rand(3, 2, dtype=D, generator=g), torch.rand(3, 2, dtype=D, generator=g)
    ind = [(), (0,), (1, 1), (0, 1)]
    for ia, a in enumerate(ind):
        for ic, c in enumerate(ind):
            WA, WB = torch.zeros(3, 4, dtype=D), torch.zeros(3, 4, dtype=D)
            WA[:, ia], WB[:, ic] = 1, 1
            got = matern72_measurement_covariance(P, WA, Q, WB, ind, ell, nu=nu)
            ref = torch.stack([torch.stack([pair_derivative(
                lambda A, B: _matern_general(A[0], B[0], ell, nu)[None, None], p, q, a, c)
                for q in Q]) for p in P])
            assert torch.allclose(got, ref, rtol=1e-10, atol=1e-10 * float(ref.abs().max()))
    r = np.linspace(0.01, 3, 40)
    z = math.sqrt(2 * nu) * r
    bessel = 2 ** (1 - nu) / scipy.special.gamma(nu) * z ** nu * scipy.special.kv(nu, z)
    one = torch.ones(1, 1, dtype=D), torch.ones(40, 1, dtype=D)
    k = matern72_measurement_covariance(torch.zeros(1, 1, dtype=D), one[0],
                                        torch.as_tensor(r)[:, None], one[1], [()], 1.0, nu=nu)
    assert np.allclose(k[0].numpy(), bessel, rtol=1e-12)
    with pytest.raises(ValueError, match="half-integer smoothness nu >= 7/2"):
        matern72_measurement_covariance(P, WA, Q, WB, ind, ell, nu=2.5)


def test_supernodes_share_factorisations_and_lose_no_accuracy():
    """Aggregated columns are conditioned on a superset of their own sets: exact with every
    earlier measurement, and at a finite radius a KL divergence no larger than one
    supernode per point, with fewer factorisations."""
    pts, point_of, W, cov, theta, nugget = _elliptic_covariance(9)
    v = np.random.default_rng(1).standard_normal(len(point_of))
    exact = SparseInverseCholesky(pts, point_of, W, cov, nugget=nugget.numpy(), rho=1e9,
                                  lam=1.5, dense_limit=0)
    assert not exact.dense and exact.supernodes < len(pts)
    assert np.allclose(exact.covariance_matvec(v), theta @ v, rtol=1e-7,
                       atol=1e-7 * np.abs(theta @ v).max())
    for rho in (2.0, 3.0):
        single = SparseInverseCholesky(pts, point_of, W, cov, nugget=nugget.numpy(), rho=rho,
                                       lam=None, dense_limit=0)
        grouped = SparseInverseCholesky(pts, point_of, W, cov, nugget=nugget.numpy(), rho=rho,
                                        lam=1.5, dense_limit=0)
        assert grouped.supernodes < single.supernodes == len(pts)
        assert _kl(grouped, theta) <= _kl(single, theta) * (1 + 1e-9)
    with pytest.raises(ValueError, match="level ratio lam > 1"):
        SparseInverseCholesky(pts, point_of, W, cov, rho=3.0, lam=1.0)


def test_a_supernode_that_does_not_factor_gets_a_nugget_or_a_one_line_refusal(monkeypatch):
    """The value measured twice at each point without a nugget: singular, factored with an
    escalated nugget (and said so), or refused when even the largest fails."""
    pts, point_of, W = _elliptic_measurements(5)
    twice = np.concatenate([point_of, point_of])
    W2 = np.concatenate([W, W])

    def cov(PA, WA, PB, WB):
        return matern72_measurement_covariance(PA, WA, PB, WB, [(), (0, 0), (1, 1)], 0.3)
    F = SparseInverseCholesky(pts, twice, W2, cov, nugget=0.0, rho=3.0, dense_limit=0)
    assert 0 < F.escalated <= F.MAX_NUGGET and np.isfinite(F.U.data).all()
    monkeypatch.setattr(SparseInverseCholesky, "MAX_NUGGET", 1e-20)
    for limit in (0, 10_000):                       # the sparse factor and the exact one
        with pytest.raises(pk.errors.NotPositiveDefiniteError, match="duplicated points"):
            SparseInverseCholesky(pts, twice, W2, cov, nugget=0.0, rho=3.0, dense_limit=limit)


def test_a_linear_equation_is_solved_to_the_full_tolerance():
    """A linear equation takes one Gauss-Newton step: its CG solve goes to ``cg_tol`` (with
    exact products, the solution of an approximate preconditioner equals the exact one)."""
    Xb, Z = _box(13)
    eq = pk.Equation(lambda f, x: -f.laplacian("x", "y") + 2 * f, inputs=("x", "y"))
    g = -_lap_u(Z) + 2 * _u(Z)
    exact = pk.SparseCholeskySolver(Xb, _u(Xb), eq, Z, source=g, lengthscale=0.5, rho=1e9,
                                    rho_preconditioner=1e9)
    cg = pk.SparseCholeskySolver(Xb, _u(Xb), eq, Z, source=g, lengthscale=0.5, rho=1e9,
                                 rho_preconditioner=2.0, dense_limit=0)
    assert exact.solve().iterations == 1 and cg.solve().iterations == 1
    assert cg.result.cg_iterations[0] > 1
    diff = (cg.collocation_values - exact.collocation_values).abs().max()
    assert float(diff) < 1e-6 * float(exact.collocation_values.abs().max())


def test_small_problems_take_the_exact_factor_and_large_ones_the_sparse_one():
    """Up to ``dense_limit`` measurements the factors are exact (a nonlinear solve then
    equals the dense Gauss-Newton's); above it, sparse (supernodes, CG iterating)."""
    Xb, Z = _box(9)
    g = -_lap_u(Z) + _u(Z) ** 3
    eq = pk.Equation(lambda f, x: -f.laplacian("x", "y") + f ** 3, inputs=("x", "y"))
    small = pk.SparseCholeskySolver(Xb, _u(Xb), eq, Z, source=g, lengthscale=0.4, tol=1e-10)
    small.solve()
    dense = _dense_gauss_newton(Xb, _u(Xb), Z, g, 0.4, small.nugget)
    assert torch.allclose(small.collocation_values, dense, atol=1e-7)
    assert max(small.result.cg_iterations) <= 2           # an exact preconditioner
    large = pk.SparseCholeskySolver(Xb, _u(Xb), eq, Z, source=g, lengthscale=0.4, tol=1e-10,
                                    dense_limit=10)
    large.solve()
    assert max(large.result.cg_iterations) > 2
    assert float((large.collocation_values - dense).abs().max()) < 1e-2


def test_a_solve_whose_conjugate_gradients_keep_failing_is_refused_with_the_reason():
    """CG stopped above its tolerance in three Gauss-Newton steps in a row: a one-line
    refusal, the steps so far kept (result, last iterate); two failures only warn."""
    Xb, Z = _box(9)
    g = -_lap_u(Z) + _u(Z) ** 3
    eq = pk.Equation(lambda f, x: -f.laplacian("x", "y") + f ** 3, inputs=("x", "y"))
    solver = pk.SparseCholeskySolver(Xb, _u(Xb), eq, Z, source=g, lengthscale=0.4,
                                     dense_limit=0, rho_preconditioner=1.5,
                                     cg_max_iterations=1, tol=1e-12)
    with pytest.warns(pk.models.ConvergenceWarning, match="conjugate gradients stopped"), \
            pytest.raises(pk.SolverRefusedError,
                          match=r"conjugate gradients to converge.*3 Gauss-Newton steps in a "
                                r"row.*PhysicsConditionedGP") as caught:
        solver.solve()
    assert caught.value.result is solver.result and solver.result.iterations == 3
    assert not solver.result.converged and solver.result.cg_iterations == [1, 1, 1]
    assert torch.isfinite(solver.collocation_values).all()


def _cube(n=7):
    """-lap(u) + exp(u) = f on [0, 1]^3 from boundary values on an n^3 grid."""
    pi = math.pi

    def u(X):
        return (torch.sin(pi * X[:, 0]) * torch.sin(pi * X[:, 1]) * torch.sin(pi * X[:, 2])
                + X[:, 0] * X[:, 1] * X[:, 2])

    def source(x):
        X = torch.stack([x["x"], x["y"], x["z"]], 1)
        return 3 * pi ** 2 * torch.sin(pi * X[:, 0]) * torch.sin(pi * X[:, 1]) \
            * torch.sin(pi * X[:, 2]) + torch.exp(u(X))
    axis = torch.linspace(0, 1, n, dtype=torch.float64)
    grid = torch.cartesian_prod(axis, axis, axis)
    edge = (grid == 0).any(1) | (grid == 1).any(1)
    eq = pk.Equation(lambda f, x: -f.laplacian("x", "y", "z") + torch.exp(f),
                     inputs=("x", "y", "z"))
    return grid[edge], grid[~edge], u, source, eq


def test_auto_smoothness_is_the_marginal_likelihoods_choice_and_helps_in_three_inputs():
    """nu="auto" learns a lengthscale for each candidate smoothness and keeps the one of the
    largest marginal likelihood; on a smooth 3-D solution that is a smoother kernel than 7/2,
    and the solution's error falls (7^3 grid: 1.3e-2 at 7/2, 3.1e-3 chosen)."""
    X, Z, u, source, eq = _cube()
    Xe = torch.rand(500, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    errors = {}
    for nu in (3.5, "auto"):
        solver = pk.SparseCholeskySolver(X, u(X), eq, Z, source=source, nu=nu)
        mean = solver(Xe)
        errors[nu] = float((mean - u(Xe)).norm() / u(Xe).norm())
        nll = solver.nu_likelihoods
        assert solver.nu == min(nll, key=nll.get)
    assert set(nll) == set(pk.SparseCholeskySolver.NU_CANDIDATES) and solver.nu > 3.5
    assert errors["auto"] < 0.5 * errors[3.5]


def test_auto_smoothness_stays_at_seven_halves_past_the_dense_limit():
    """A sparse factor of a smoother kernel preconditions CG poorly: past ``dense_limit``
    measurements "auto" is 7/2 (nothing else is tried)."""
    X, Z, u, source, eq = _cube(5)
    solver = pk.SparseCholeskySolver(X, u(X), eq, Z, source=source, dense_limit=10)
    solver.solve()
    assert solver.nu == 3.5 and set(solver.nu_likelihoods) == {3.5}


@pytest.mark.parametrize("nu", [3.0, 2.5, "smooth", True])
def test_a_bad_smoothness_is_refused(nu):
    X, Z, u, source, eq = _cube(4)
    with pytest.raises(ValueError, match="half-integer"):
        pk.SparseCholeskySolver(X, u(X), eq, Z, source=source, nu=nu)
