"""Titsias's collapsed bound on the data given the equation (gp/inducing.py) and the
conditioned GP that uses it on many data: exact with every datum an inducing point, a lower
bound that rises with nested inducing sets, gradients against finite differences, the same
fit as the dense joint, and the inducing points refined while the bound is loose."""

import dataclasses

import pytest
import torch

import pyro_pidkl as pk
from pyro_pidkl.gp.inducing import InducingJoint
from pyro_pidkl.gp.joint import JointGaussian
from pyro_pidkl.kernels.se import se_ard
from pyro_pidkl.models.single.inducing import INDUCING_DATA, INDUCING_GAP, INDUCING_START

D = torch.float64


def heat_data(N, seed=0):
    problem = dataclasses.replace(pk.datasets.problem("heat"), n_train=N)
    return problem, problem.sample("extrapolation", seed=seed)


def heat_model(N, seed=0, **kw):
    problem, data = heat_data(N, seed)
    kw.setdefault("collocation", 60)
    model = pk.PhysicsConditionedGP(data.X_train, data.y_train, problem.equation(),
                                    problem.input_names, domain=pk.Box(**problem.domain),
                                    parameter_uncertainty=False, **kw)
    return model, data


def random_problem(N=30, M=12, m=None, seed=0):
    """Blocks of a random joint: f ~ GP(0, SE) observed at N points, v = f at M other
    points plus noise; inducing values at the first m data inputs."""
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(N, 2, generator=g, dtype=D)
    Z = torch.rand(M, 2, generator=g, dtype=D)
    kern = se_ard(2, lengthscale=0.4)
    noise = torch.tensor(0.05, dtype=D)
    m = N if m is None else m
    U = X[:m]
    obs = torch.randn(M + N, generator=g, dtype=D)
    pieces = (kern(Z) + 1e-3 * torch.eye(M, dtype=D), kern(Z, X), kern(Z, U), kern(U),
              kern(U, X), kern(X, diag=True), noise, obs)
    A = torch.cat([torch.cat([pieces[0], pieces[1]], 1),
                   torch.cat([pieces[1].T, kern(X) + noise * torch.eye(N, dtype=D)], 1)])
    return pieces, A, obs, M, kern, X, Z, U


def test_every_datum_inducing_is_the_exact_joint():
    pieces, A, obs, M, kern, X, Z, U = random_problem()
    approx, exact = InducingJoint(*pieces), JointGaussian(A, obs, M)
    assert float(approx.gap.detach()) == pytest.approx(0.0, abs=1e-8)
    for f in ("log_prob_data_given_virtual", "log_prob", "log_prob_virtual"):
        for profile in (False, True):
            assert float(getattr(approx, f)(profile)) == pytest.approx(
                float(getattr(exact, f)(profile)), rel=1e-9, abs=1e-8)
    # the posterior at new points: columns [v; u] for the bound, [v; y] for the joint
    P = torch.rand(7, 2, generator=torch.Generator().manual_seed(3), dtype=D)
    cross_u = torch.cat([kern(P, Z), kern(P, U)], 1)
    cross_y = torch.cat([kern(P, Z), kern(P, X)], 1)
    assert torch.allclose(approx.mean(cross_u), exact.mean(cross_y), atol=1e-8)
    prior = kern(P)
    assert torch.allclose(approx.variance(cross_u, prior.diagonal()),
                          exact.variance(cross_y, prior.diagonal()), atol=1e-9)
    assert torch.allclose(approx.variance(cross_u, prior, full_cov=True),
                          exact.variance(cross_y, prior, full_cov=True), atol=1e-9)


def test_bound_is_below_the_exact_density_and_rises_with_nested_inducing_sets():
    values = []
    for m in (2, 5, 10, 20, 30):
        pieces, A, obs, M, *_ = random_problem(m=m)
        values.append(float(InducingJoint(*pieces).log_prob_data_given_virtual()))
    exact = float(JointGaussian(A, obs, M).log_prob_data_given_virtual())
    assert all(v <= exact + 1e-9 for v in values)
    assert all(b >= a - 1e-9 for a, b in zip(values, values[1:]))
    assert values[0] < exact - 1.0          # a loose bound at two inducing points


def test_bound_gradients_against_finite_differences():
    """Gradients in the kernel's lengthscales and variance, the noise and the observations
    (the parameters a fit moves), against central differences."""
    _, _, obs, M, _, X, Z, U = random_problem(m=8)

    def f(log_ls, log_var, log_noise, obs):
        def k(A, B):
            d = (A[:, None, :] - B[None, :, :]) / log_ls.exp()
            return log_var.exp() * torch.exp(-0.5 * d.pow(2).sum(-1))
        A_vv = k(Z, Z) + 1e-3 * torch.eye(M, dtype=D)
        joint = InducingJoint(A_vv, k(Z, X), k(Z, U), k(U, U), k(U, X),
                              log_var.exp().expand(X.shape[0]), log_noise.exp(), obs)
        return joint.log_prob_data_given_virtual(profile=True) + 0.1 * joint.log_prob()
    theta = [torch.tensor([-0.9, -0.6], dtype=D), torch.tensor(0.2, dtype=D),
             torch.tensor(-2.5, dtype=D), obs.clone()]
    inputs = [t.clone().requires_grad_(True) for t in theta]
    grads = torch.autograd.grad(f(*inputs), inputs)
    g = torch.Generator().manual_seed(1)
    for k in range(4):
        d = torch.randn(theta[k].shape, generator=g, dtype=D)
        h = 1e-5
        up = [t.clone() for t in theta]
        dn = [t.clone() for t in theta]
        up[k], dn[k] = theta[k] + h * d, theta[k] - h * d
        fd = (float(f(*up)) - float(f(*dn))) / (2 * h)
        assert float((grads[k] * d).sum()) == pytest.approx(fd, rel=1e-6, abs=1e-6)


def test_model_with_every_datum_inducing_matches_the_dense_model():
    dense, data = heat_model(60, data_likelihood="exact")
    bound, _ = heat_model(60, data_likelihood="inducing", inducing=60)
    for model in (dense, bound):
        model.equation.alpha = torch.tensor(0.05, dtype=D)
    with torch.no_grad():
        jd, jb = dense.solve()[0], bound.solve()[0]
    assert isinstance(jd, JointGaussian) and isinstance(jb, InducingJoint)
    assert float(jb.log_prob_data_given_virtual(profile=True)) == pytest.approx(
        float(jd.log_prob_data_given_virtual(profile=True)), rel=1e-7)
    md, vd = dense(torch.as_tensor(data.X_test))
    mb, vb = bound(torch.as_tensor(data.X_test))
    assert torch.allclose(mb, md, rtol=1e-5, atol=1e-6)
    assert torch.allclose(vb, vd, rtol=1e-4, atol=1e-9)


def test_a_nonlinear_equations_start_from_the_data_alone_matches_the_dense_one():
    """Gauss-Newton's start, the data-only GP's mean jet at Z, from the bound's posterior
    (every datum inducing: the exact one)."""
    problem, data = heat_data(80)
    eq = pk.Equation(lambda f, x: f.d("t") - 0.05 * f.d("x", "x") + 0.1 * f ** 3,
                     inputs=("x", "t"))
    jets = []
    for kind in ("exact", "inducing"):
        model = pk.PhysicsConditionedGP(data.X_train, data.y_train, eq, problem.input_names,
                                        collocation=40, data_likelihood=kind, inducing=80)
        assert not model.linear
        with torch.no_grad():
            model.kernel.lengthscale = torch.tensor([0.5, 0.7], dtype=D)
            jets.append(model._data_jet())
    assert torch.allclose(jets[1], jets[0], rtol=1e-6, atol=1e-6)


def test_auto_takes_the_bound_above_the_threshold_only():
    small, _ = heat_model(50)
    assert small._inducing_inputs() is None
    with torch.no_grad():
        assert isinstance(small.solve()[0], JointGaussian)
    big, _ = heat_model(INDUCING_DATA + 1, collocation=20)
    U = big._inducing_inputs()
    assert U.shape == (INDUCING_START, 2)
    # the first inducing points are the data's maximin order: spread, none repeated
    assert torch.unique(U, dim=0).shape[0] == INDUCING_START


def test_fit_with_the_bound_ends_at_the_dense_fit():
    """A fit with the bound (few inducing points against 600 data) learns the heat
    equation's diffusivity and the kernel as the dense fit does."""
    fits = {}
    for kind in ("exact", "inducing"):
        model, data = heat_model(600, data_likelihood=kind, collocation=100)
        pk.fit(model, progress=False, restarts=0)
        fits[kind] = (model.equation_parameters()["alpha"],
                      model.kernel.lengthscale.detach().clone(), model)
    assert fits["inducing"][0] == pytest.approx(fits["exact"][0], rel=2e-3)
    assert abs(fits["exact"][0] - 0.05) / 0.05 < 0.02
    assert torch.allclose(fits["inducing"][1], fits["exact"][1], rtol=2e-2)
    model = fits["inducing"][2]
    with torch.no_grad():
        assert float(model.solve()[0].gap) <= INDUCING_GAP


def test_relinearise_doubles_the_inducing_points_while_the_bound_is_loose():
    model, _ = heat_model(800, data_likelihood="inducing", inducing="auto")
    with torch.no_grad():                     # a short lengthscale: many points needed
        model.kernel.lengthscale = torch.tensor([0.08, 0.08], dtype=D)
        model.noise = torch.tensor(1e-4, dtype=D)
        before = float(model.solve()[0].gap)
    assert before > INDUCING_GAP
    result = model.relinearise()
    assert result.refined and int(model.inducing_count) > INDUCING_START
    with torch.no_grad():
        after = float(model.solve()[0].gap)
    assert after <= INDUCING_GAP or int(model.inducing_count) == 800
    assert not model.relinearise().refined    # settled: nothing more to refine


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="data_likelihood"):
        heat_model(20, data_likelihood="vecchia")
    with pytest.raises(ValueError, match="inducing"):
        heat_model(20, inducing=0)
    pieces, *_ = random_problem(m=5)
    with pytest.raises(ValueError, match="Expected A_vv"):
        InducingJoint(pieces[0][:3], *pieces[1:])
