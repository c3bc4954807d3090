"""Sparse variational PI-DKL and Bayesian equation parameters."""

import math

import numpy as np

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import Trace_ELBO, TraceMeanField_ELBO

from pyro_pidkl import PIDKL, Box, Parameter, fit, physics
from pyro_pidkl.models import SparsePIDKL


def _data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0, 1, n))
    return t[:, None], np.sin(6 * t) + 0.05 * rng.standard_normal(n)


def _optimal_q(model):
    """The exact optimum of q(v) when the inducing points are the training inputs:
    precision I + L^T L / s2, mean A^-1 L^T (y - c) / s2 (whitened; c the prior mean)."""
    with torch.no_grad():
        L = model._Luu()
        s2 = model.noise
        A = torch.eye(L.shape[0], dtype=L.dtype) + L.T @ L / s2
        S = torch.linalg.inv(A)
        m = S @ L.T @ (model.y_s - model.prior_mean()) / s2
        return m, torch.linalg.cholesky(S)


def _sparse_at_optimum_and_exact(n, mean="zero"):
    """A sparse model with Xu = X and the optimal q(v), and the exact model sharing its
    kernel and noise (and, with ``mean="constant"``, a prior mean of 0.7 for both)."""
    X, y = _data(n=n)
    model = SparsePIDKL(X, y, physics.first_order_ode(), input_names=("t",), gamma=0.0,
                        num_inducing=n, batch_size=None, mean=mean)
    with torch.no_grad():
        model.Xu = model.X_s.clone()
        if mean == "constant":
            model.mean_constant = torch.tensor(0.7, dtype=torch.float64)
        m, S_tril = _optimal_q(model)
        model.u_loc, model.u_scale_tril = m, S_tril
        model.min_scale = 0.0
    exact = PIDKL(X, y, physics.first_order_ode(), input_names=("t",), gamma=0.0, mean=mean)
    exact.load_state_dict({k: v for k, v in model.state_dict().items()
                           if k in exact.state_dict()})
    return model, exact


@pytest.mark.parametrize("mean", ["zero", "constant"])
def test_sparse_with_inducing_points_at_the_data_recovers_the_exact_posterior(mean):
    model, exact = _sparse_at_optimum_and_exact(40, mean)
    if mean == "constant":
        assert float(exact.mean_constant.detach()) == 0.7     # the exact model shares c
    Xnew = np.r_[np.linspace(-0.2, 1.2, 15), 5.0][:, None]   # and one point far away
    mean_s, var_s = model(Xnew)
    mean_e, var_e = exact(Xnew)
    # equal up to the 1e-6 relative nugget on K_uu
    torch.testing.assert_close(mean_s, mean_e, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(var_s, var_e, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("mean", ["zero", "constant"])
def test_sparse_elbo_at_the_optimum_is_the_log_marginal_likelihood(mean):
    # with Xu = X and the optimal q, the collapsed bound is tight: ELBO = log p(y). With
    # gamma = 0 the model's ELBO (closed-form data term and KL) has no Monte Carlo part
    model, exact = _sparse_at_optimum_and_exact(20, mean)
    assert model.elbo_class is TraceMeanField_ELBO
    with torch.no_grad():
        log_p = float(exact.posterior().log_marginal())
        elbo = -TraceMeanField_ELBO().loss(model.model, model.guide)
        assert elbo == -TraceMeanField_ELBO().loss(model.model, model.guide)   # no noise
        assert abs(elbo - log_p) < 1e-4 * abs(log_p)
        # the Monte Carlo estimate (log p - log q at draws of q) agrees on average
        estimates = []
        for _ in range(500):
            guide_tr = poutine.trace(model.guide).get_trace()
            model_tr = poutine.trace(poutine.replay(model.model, guide_tr)).get_trace()
            estimates.append(float(model_tr.log_prob_sum() - guide_tr.log_prob_sum()))
    est = np.array(estimates)
    se = est.std() / math.sqrt(est.size)
    assert se < 0.5
    assert abs(est.mean() - log_p) < 4 * se + 1e-3 * abs(log_p)


def test_sparse_loss_stays_bounded_when_q_is_ill_conditioned():
    # the failure seen at N = 1e4: a Cholesky factor of q(v) with a tiny diagonal under large
    # off-diagonal entries; log q(v) at its own draw then lost all precision under
    # Trace_ELBO. The closed-form KL stays >= 0, so -loss <= the best data term.
    pyro.set_rng_seed(0)
    X, y = _data(n=30)
    model = SparsePIDKL(X, y, physics.first_order_ode(), input_names=("t",), gamma=0.0,
                        num_inducing=12, batch_size=None)
    M = 12
    with torch.no_grad():
        L = (torch.tril(torch.full((M, M), 1e3, dtype=torch.float64), -1)
             + 1e-9 * torch.eye(M, dtype=torch.float64))
        model.u_scale_tril = L
        model.min_scale = 1e-9
        q = dist.MultivariateNormal(model.u_loc, scale_tril=model.q_scale_tril)
        eye = torch.eye(M, dtype=torch.float64)
        kl = torch.distributions.kl_divergence(
            q, dist.MultivariateNormal(torch.zeros(M, dtype=torch.float64), scale_tril=eye))
        assert torch.isfinite(kl) and kl > 0
        best = float(dist.Normal(model.y_s, model.noise.sqrt()).log_prob(model.y_s).sum())
        for _ in range(20):
            assert -TraceMeanField_ELBO().loss(model.model, model.guide) < best
        # what Trace_ELBO makes of the same q: estimates far above any attainable bound
        # (about 1e225 here), the reward the optimiser found at N = 1e4
        assert max(-Trace_ELBO().loss(model.model, model.guide) for _ in range(20)) > best


def test_sparse_minibatch_scales_the_data_term_to_n():
    X, y = _data(n=60)
    model = SparsePIDKL(X, y, physics.first_order_ode(), input_names=("t",), gamma=0.0,
                        num_inducing=10, batch_size=15)
    tr = poutine.trace(model.model).get_trace()
    tr.compute_log_prob()
    site = tr.nodes["data"]
    assert site["log_prob"].shape == (15,) and site["scale"] == 4.0
    assert tr.nodes["points"]["value"].shape == (15,)


def test_sparse_pidkl_sites_and_fit_with_physics():
    X, y = _data(n=50)
    model = SparsePIDKL(X, y, physics.first_order_ode(B=0.5, D=0.5), input_names=("t",),
                        gamma=1.0, m=8, num_inducing=12, batch_size=20)
    tr = poutine.trace(model.model).get_trace()
    assert {"u", "points", "data", "Z", "eps", "physics"} <= set(tr.nodes)
    assert tr.nodes["Z"]["value"].shape == (8, 1)
    result = fit(model, num_steps=30, progress=False, seed=0)
    assert np.isfinite(result.losses).all()
    mean, var = model(np.linspace(0, 1, 7)[:, None])
    assert mean.shape == (7,) and (var > 0).all()
    assert not hasattr(model, "posterior")   # a sibling of ExactGP, not a subclass


def test_sparse_rejects_bad_options():
    X, y = _data()
    with pytest.raises(ValueError, match="num_inducing"):
        SparsePIDKL(X, y, physics.first_order_ode(), input_names=("t",), num_inducing=0)
    with pytest.raises(ValueError, match="batch_size"):
        SparsePIDKL(X, y, physics.first_order_ode(), input_names=("t",), batch_size=2.5)


def test_bayesian_parameter_is_a_sample_site_with_an_autonormal_guide():
    X, y = _data()
    eq = physics.first_order_ode(B=Parameter(0.5, prior=dist.LogNormal(0.0, 1.0)), D=0.5)
    model = PIDKL(X, y, eq, input_names=("t",), m=5)
    assert model.physics.bayesian_sites == ("physics.equation.B",)
    guide_tr = poutine.trace(model.guide).get_trace()
    assert {"physics.equation.B", "Z", "eps"} <= set(guide_tr.nodes)
    model_tr = poutine.trace(poutine.replay(model.model, guide_tr)).get_trace()
    assert model_tr.nodes["physics.equation.B"]["value"] == guide_tr.nodes["physics.equation.B"]["value"]
    assert model_tr.nodes["physics.equation.B"]["fn"].__class__.__name__ == "LogNormal"
    post = model.physics.equation_posterior(num_samples=400)
    assert set(post) == {"B"} and post["B"]["lower"] < post["B"]["median"] < post["B"]["upper"]
    # started at the Parameter's init
    assert abs(post["B"]["median"] - 0.5) < 0.05
    with pytest.raises(ValueError, match="No equation parameter has a prior"):
        PIDKL(X, y, physics.first_order_ode(), input_names=("t",)).physics.equation_posterior()


@pytest.mark.parametrize("device", [
    "cpu", pytest.param("cuda", marks=pytest.mark.skipif(
        not torch.cuda.is_available(), reason="no CUDA device on this machine"))])
@pytest.mark.parametrize("variant", ["exact", "sparse", "sparse-bayes"])
def test_pidkl_trains_and_predicts_on_device(variant, device):
    # second derivatives through the GP draw (the 1-D heat equation over (x, t)) on the GPU
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (200, 2))
    y = np.exp(-0.1 * np.pi ** 2 * X[:, 1]) * np.sin(np.pi * X[:, 0])
    alpha = Parameter(0.5, prior=dist.LogNormal(0.0, 1.0)) if variant == "sparse-bayes" else 0.5
    eq = physics.heat_1d(alpha=alpha)
    common = dict(input_names=("x", "t"), gamma=1.0, m=8)
    if variant == "exact":
        model = PIDKL(X, y, eq, **common)
    else:
        model = SparsePIDKL(X, y, eq, num_inducing=16, batch_size=64, **common)
    model = model.to(device)
    result = fit(model, num_steps=20, progress=False, seed=0)
    assert np.isfinite(result.losses).all()
    mean, var = model(rng.uniform(0, 1, (5, 2)))
    assert mean.device.type == device and torch.isfinite(var).all() and (var > 0).all()
    assert np.isfinite(model.equation_parameters()["alpha"])


def test_sparse_physics_draw_options():
    X, y = _data(n=30)
    for draw in ("conditional", "marginal"):
        model = SparsePIDKL(X, y, physics.first_order_ode(), input_names=("t",), m=4,
                            num_inducing=8, batch_size=None, physics_draw=draw)
        assert np.isfinite(fit(model, num_steps=3, progress=False, seed=0).losses).all()
    with pytest.raises(ValueError, match="mean"):
        SparsePIDKL(X, y, physics.first_order_ode(), input_names=("t",), mean="linear")
    with pytest.raises(ValueError, match="physics_draw"):
        SparsePIDKL(X, y, physics.first_order_ode(), input_names=("t",), physics_draw="x")
    with pytest.raises(ValueError, match="inducing_init"):
        SparsePIDKL(X, y, physics.first_order_ode(), input_names=("t",), inducing_init="x")
    model = SparsePIDKL(X, y, physics.first_order_ode(), input_names=("t",), num_inducing=50,
                        inducing_init="domain", domain=Box(t=(0.0, 2.0)))
    assert model.Xu.shape == (50, 1)


def test_sparse_data_term_never_rewards_a_negative_conditional_variance(monkeypatch):
    X, y = _data(n=30)
    model = SparsePIDKL(X, y, physics.first_order_ode(), input_names=("t",), gamma=0.0,
                        num_inducing=8, batch_size=None)
    real = model.conditional

    def rounded(U, v, Luu, full_cov=False):
        mu, var = real(U, v, Luu, full_cov)
        return mu, var - 10.0     # what cancellation in k_ii - q_ii can produce
    monkeypatch.setattr(model, "conditional", rounded)
    tr = poutine.trace(model.model).get_trace()
    tr.compute_log_prob()
    mu, _ = real(model.X_s, None, model._Luu())         # the data term uses q's marginal
    bound = dist.Normal(mu, model.noise.sqrt()).log_prob(model.y_s)
    torch.testing.assert_close(tr.nodes["data"]["log_prob"], bound)


@pytest.mark.parametrize("skip_inputs, mean", [(False, "zero"), (True, "zero"),
                                               (False, "constant")])
def test_sparse_physics_derivatives_in_closed_form_match_autograd(skip_inputs, mean):
    # the draw given v seen as a GP posterior on the inducing points (InducingConditional):
    # same physics loss and parameter gradients as autograd through the conditional,
    # second derivatives included (the 1-D heat equation); with a constant prior mean, its
    # gradient too, on Burgers' equation, whose residual involves the value of f
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (60, 2)) * [2, 1]
    y = np.exp(-0.1 * np.pi ** 2 * X[:, 1]) * np.sin(np.pi * X[:, 0] / 2)
    losses, grads, kinds = [], [], []
    for derivatives in ("closed_form", "autograd"):
        pyro.clear_param_store()
        pyro.set_rng_seed(0)
        eq = physics.heat_1d(alpha=0.3) if mean == "zero" else physics.burgers_1d(nu=0.3)
        model = SparsePIDKL(X, y, eq, input_names=("x", "t"), m=12,
                            num_inducing=15, batch_size=20, derivatives=derivatives,
                            skip_inputs=skip_inputs, draw="pointwise", mean=mean)
        with torch.no_grad():   # a q(v) away from its start, so that v varies
            model.u_loc = torch.linspace(-1, 1, 15, dtype=torch.float64)
            if mean == "constant":
                model.mean_constant = torch.tensor(-0.4, dtype=torch.float64)
        pyro.set_rng_seed(3)
        loss = TraceMeanField_ELBO().differentiable_loss(model.model, model.guide)
        tr = poutine.trace(model.model).get_trace()
        draw = model.posterior_draw((tr.nodes["u"]["value"], model._Luu()), torch.zeros(1))
        kinds.append(type(draw).__name__ + ("-closed" if getattr(draw, "closed_form", 0) else ""))
        params = [p for p in model.parameters()]
        losses.append(loss.item())
        grads.append(torch.autograd.grad(loss, params, allow_unused=True))
    assert kinds == ["PosteriorDraw-closed", "function"]
    assert losses[0] == pytest.approx(losses[1], rel=1e-9)
    for a, b in zip(*grads):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.allclose(a, b, rtol=1e-6, atol=1e-8 * (1 + b.abs().max()))
