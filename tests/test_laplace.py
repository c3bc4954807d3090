"""The Laplace covariance of the learned coefficients from a Hessian over coefficients and
the GP's own parameters, against its closed forms."""

import math

import pytest
import torch

from pyro_pidkl.infer.laplace import laplace_covariance

D = torch.float64


def _spd(n, seed):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(n, n, generator=g, dtype=D)
    return A @ A.T + 0.5 * torch.eye(n, dtype=D)


def test_a_positive_definite_hessian_is_inverted():
    H = _spd(6, 0)
    assert torch.allclose(laplace_covariance(H, 2), torch.linalg.inv(H), atol=1e-12)


def test_a_weak_prior_adds_its_precision_to_the_coefficients_only():
    H = _spd(5, 1)
    Hp = H.clone()
    Hp[range(2), range(2)] += 1 / 0.5 ** 2
    assert torch.allclose(laplace_covariance(H, 2, prior_sd=0.5), torch.linalg.inv(Hp),
                          atol=1e-12)


def test_a_nuisance_direction_without_curvature_is_held():
    """A nuisance direction of negative curvature (a saddle of the GP's own parameters) is
    held at its value: the coefficients' marginal is the Schur complement over the curved
    directions only, and finite."""
    g = torch.Generator().manual_seed(2)
    Q, _ = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=D))
    lam = torch.tensor([-0.3, 2.0, 5.0], dtype=D)
    H_ee = (Q * lam) @ Q.T
    H_te = 0.3 * torch.randn(2, 3, generator=g, dtype=D)
    H_tt = torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=D)
    H = torch.cat([torch.cat([H_tt, H_te], 1), torch.cat([H_te.T, H_ee], 1)])
    cov = laplace_covariance(H, 2)
    Vp, lp = Q[:, 1:], lam[1:]
    schur = H_tt - H_te @ Vp @ torch.diag(1 / lp) @ Vp.T @ H_te.T
    assert torch.allclose(cov[:2, :2], torch.linalg.inv(schur), atol=1e-12)
    assert torch.isfinite(cov).all()
    # the held direction has no variance: the nuisance covariance lives on V_+ only
    assert float((Q[:, 0] @ cov[2:, 2:] @ Q[:, 0]).abs()) < 1e-12


def test_negative_curvature_of_a_coefficient_leaves_it_free():
    """A direction of negative curvature that loads on a coefficient makes it unidentified
    (an infinite variance); the other coefficient, not on it, keeps its variance."""
    H = torch.diag(torch.tensor([-1.0, 2.0, 3.0], dtype=D))
    cov = laplace_covariance(H, 2)
    assert cov[0, 0] == math.inf and abs(float(cov[1, 1]) - 0.5) < 1e-12
    assert abs(float(cov[2, 2]) - 1 / 3) < 1e-12 and float(cov[0, 1]) == 0.0


def test_a_flat_nuisance_parameter_has_no_variance():
    """A nuisance parameter with no curvature (at its floor) is held: zero variance, and the
    coefficients' covariance is the inverse of the rest."""
    H = _spd(4, 3)
    H[3, :] = 0.0
    H[:, 3] = 0.0
    cov = laplace_covariance(H, 2)
    assert torch.allclose(cov[:3, :3], torch.linalg.inv(H[:3, :3]), atol=1e-12)
    assert torch.equal(cov[3], torch.zeros(4, dtype=D))


def test_sigma_points_move_the_gps_parameters_along_their_own_directions():
    """A fitted conditioned GP's sigma points: one pair per identified direction of the
    coefficients and the GP's own parameters together (more pairs than coefficients), each
    moving the GP's parameters as well, by at most one unit of their unconstrained scale
    (the weak prior); the predictive variance is at least the plug-in one."""
    import pyro_pidkl as pk
    from pyro_pidkl.physics import Equation, Parameter
    g = torch.Generator().manual_seed(0)
    t = torch.linspace(0, 2, 25, dtype=D)
    y = torch.exp(-1.3 * t) + 0.02 * torch.randn(25, generator=g, dtype=D)
    eq = Equation(lambda f, x, k: f.d("t") + k * f, inputs=("t",), k=Parameter(1.0))
    model = pk.PhysicsConditionedGP(t[:, None], y, eq, domain=pk.Box(t=(0, 4)),
                                    collocation=40)
    pk.fit(model, progress=False)
    names, theta, eta = model._laplace_parameters(True)
    points = model._sigma_points()
    assert len(points) > len(names) and eta
    estimates = [q.detach().clone() for q in theta + eta]
    moved_eta = 0
    for (values, _), (values_minus, _) in points:
        for v, m, e in zip(values, values_minus, estimates):
            assert torch.allclose(v - e, e - m, atol=1e-12)          # symmetric pairs
            assert float((v - e).abs().max()) <= 1.0 + 1e-9
        moved_eta += any(float((v - e).abs().max()) > 1e-6
                         for v, e in zip(values[len(theta):], estimates[len(theta):]))
    assert moved_eta >= len(points) - len(names)
    X = torch.linspace(2, 4, 20, dtype=D)[:, None]
    _, var = model(X)
    model.parameter_uncertainty = False
    _, plug_in = model(X)
    assert bool((var >= plug_in - 1e-15).all()) and bool((var > plug_in).any())


def test_a_prior_bounds_a_flat_direction_whatever_the_scale_of_the_hessian():
    """A coefficient direction the objective does not curve gets the prior's variance
    (``prior_sd ** 2``) however large the rest of the Hessian is: added before the cut for
    flat directions, a precision of 1 fell below 1e-7 of a Hessian of 1e10 and the
    coefficient was dropped (reported free, left out of the predictive variance)."""
    for big in (1.0, 1e4, 1e10):
        # theta_1 - theta_2 is curved (a ratio the data pin), theta_1 + theta_2 is flat
        u = torch.tensor([1.0, -1.0], dtype=D) / math.sqrt(2)
        H = torch.zeros(3, 3, dtype=D)
        H[:2, :2] = big * torch.outer(u, u)
        H[2, 2] = big                                     # a nuisance parameter
        free = laplace_covariance(H, 2)
        assert bool(torch.isinf(free[:2, :2].diagonal()).all())
        cov = laplace_covariance(H, 2, prior_sd=1.0, nuisance_prior_sd=1.0)
        assert bool(torch.isfinite(cov).all())
        v = torch.tensor([1.0, 1.0], dtype=D) / math.sqrt(2)
        assert abs(float(v @ cov[:2, :2] @ v) - 1.0) < 1e-6, big          # the prior's
        assert abs(float(u @ cov[:2, :2] @ u) * (big + 1) - 1) < 1e-5        # the data's


@pytest.mark.slow
def test_an_unidentified_coefficient_widens_the_prediction():
    """f' = -a f / (b + f) with b = 100 far above f: only a / b is pinned, and whether the Laplace
    verdict is "free" flips with the collocation design's seed. Either way the sigma points
    move the coefficients along the ridge by the weak prior's width, and the predictive
    variance is at least the plug-in one."""
    import warnings
    import numpy as np
    import pyro_pidkl as pk
    from pyro_pidkl.physics import Equation, Parameter
    from pyro_pidkl.infer.laplace import PRIOR_SD
    from scipy.integrate import solve_ivp
    t = torch.linspace(0, 10, 26, dtype=D)
    truth = solve_ivp(lambda _, f: -f / (100.0 + f), (0, 10), [1.0], t_eval=t.numpy(),
                      rtol=1e-10, atol=1e-12).y[0]
    y = torch.tensor(truth + 0.01 * np.random.default_rng(0).standard_normal(26), dtype=D)
    verdicts = set()
    for seed in (0, 1, 2):
        eq = Equation(lambda f, x, a, b: f.d("t") + a * f / (b + f), inputs=("t",),
                      a=Parameter(0.5), b=Parameter(1.0))
        model = pk.PhysicsConditionedGP(t[:, None], y, eq, domain=pk.Box(t=(0.0, 10.0)),
                                        seed=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pk.fit(model, progress=False)
            iv = model.coefficient_intervals(0.9)
            verdicts.add(iv["a"]["identified"])
            points = model._sigma_points()
            X = torch.linspace(5, 10, 11, dtype=D)[:, None]
            _, var = model(X)
            model.parameter_uncertainty = False
            _, plug_in = model(X)
        assert points, seed
        names, theta, _ = model._laplace_parameters(False)
        # the largest move of log a + log b over the sigma points: the ridge's, about the
        # prior's standard deviation (a flat direction), never nothing
        base = torch.stack([q.detach().reshape(()) for q in theta])
        moves = [float((torch.stack([v.reshape(()) for v in values[:2]]) - base).sum().abs())
                 for pair in points for values, _ in pair]
        assert max(moves) > 0.5 * PRIOR_SD, (seed, max(moves))
        assert bool((var >= plug_in - 1e-12).all())
    assert False in verdicts      # the case that dropped the coefficient before


def test_a_declared_prior_counts_after_the_cut():
    """A coefficient's declared prior (its Hessian ``prior_precision``, part of ``H``) is
    not what the data say: a coefficient the data leave flat, beside a nuisance parameter
    curved 1e8, gets the prior's variance, not an infinite one; a curved coefficient gets
    the textbook inverse of data and prior together."""
    H = torch.diag(torch.tensor([0.0, 4.0, 1e8], dtype=D))
    P0 = torch.diag(torch.tensor([11.0, 25.0, 0.0], dtype=D))
    cov = laplace_covariance(H + P0, 2, prior_precision=P0)
    assert abs(float(cov[0, 0]) - 1 / 11.0) < 1e-12
    assert abs(float(cov[1, 1]) - 1 / 29.0) < 1e-12
    assert abs(float(cov[2, 2]) - 1e-8) < 1e-18
    # flatness is judged against each parameter's own curvature, not the largest: even
    # unaware of the prior, a curvature of 11 beside 1e8 is not flat
    assert abs(float(laplace_covariance(H + P0, 2)[0, 0]) - 1 / 11.0) < 1e-12


def test_flatness_does_not_depend_on_the_parameters_units():
    """Rescaling a parameter (its unconstrained unit) rescales its variance and nothing
    else: the same Hessian in other units gives the same covariance, transformed."""
    H = _spd(4, 3)
    H[0, :] *= 1e-5
    H[:, 0] *= 1e-5                         # coefficient 0 in units 1e5 times larger
    cov = laplace_covariance(H, 2)
    assert bool(torch.isfinite(cov).all())
    assert torch.allclose(cov, torch.linalg.inv(H), rtol=1e-8, atol=0)


def test_a_nuisance_direction_that_makes_a_saddle_with_a_coefficient_is_held():
    """A coefficient curved 9e4 and a lengthscale curved 2e3 on its own, coupled by 1.7e4
    (a correlation of 1.2: no maximum jointly, the end of a system's fit): integrating over
    the lengthscale would make the coefficient flat (reported free with its prior's width).
    The lengthscale is held instead: the coefficients' covariance is the inverse of their
    own block, the held direction has no variance; a nuisance direction that makes no saddle
    is still integrated over."""
    H = torch.tensor([[9.3e4, -45.0, 1.7e4, 0.0],
                      [-45.0, 3.0, 0.0, 0.5],
                      [1.7e4, 0.0, 2.1e3, 0.0],
                      [0.0, 0.5, 0.0, 4.0]], dtype=D)
    cov = laplace_covariance(H, 2)
    keep = [0, 1, 3]
    expected = torch.linalg.inv(H[keep][:, keep])
    assert torch.allclose(cov[keep][:, keep], expected, rtol=1e-9)
    assert torch.equal(cov[2], torch.zeros(4, dtype=D))


def test_a_coefficient_that_only_touches_a_flat_direction_is_identified():
    """Coefficient b has negative curvature (the data leave it free), a is curved 9e4 and
    coupled to b a little (its loading on b's direction is 0.07 on the equilibrated scale):
    a is identified with its own small interval, b is free with its prior's."""
    import pyro
    import pyro_pidkl as pk
    from pyro_pidkl.physics import Equation, Parameter
    t = torch.linspace(0, 1, 12, dtype=D)
    with pytest.warns(UserWarning, match="b never enters"):   # its Hessian is given below
        model = pk.PhysicsConditionedGP(t[:, None], torch.exp(-t), Equation(
            lambda f, x, a, b: f.d("t") + a * f + 0 * b, inputs=("t",), a=Parameter(1.0),
            b=Parameter(1.0)), learn_noise=False)
    H = torch.tensor([[9.3e4, -44.6], [-44.6, -1.125]], dtype=D)
    P0 = torch.diag(torch.tensor([0.25, 0.25], dtype=D))
    model.laplace_parts = lambda nuisance=True: (["a", "b"], [1, 1], H + P0, P0)
    with pytest.warns(UserWarning, match="leave b free"):
        iv = pk.infer.laplace.coefficient_intervals(model, 0.95, nuisance=False)
    assert iv["a"]["identified"] and not iv["b"]["identified"]
    assert iv["a"]["upper"] / iv["a"]["lower"] < 1.02
    assert iv["b"]["upper"] / iv["b"]["lower"] > 1e3
    pyro.clear_param_store()
