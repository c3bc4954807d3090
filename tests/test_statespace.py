"""The state-space solver: the integrated Wiener process against its integrals, the parallel
Kalman filter and smoother against the sequential filter and dense Gaussian conditioning,
the ODE filter against closed-form solutions (its error falling with the nodes) and the
exact ODE's likelihood, and the model's fit against the exact-ODE fit."""

import math

import numpy as np
import pytest
import torch
from scipy.integrate import quad_vec
from scipy.linalg import expm

import pyro
import pyro_pidkl as pk
from pyro_pidkl.physics import Equation, Parameter
from pyro_pidkl.physics.ode import explicit_ode
from pyro_pidkl.statespace import kalman
from pyro_pidkl.statespace.iwp import block_transition, iwp_transition
from pyro_pidkl.statespace.ode_filter import ODEFilter

DT = torch.float64


@pytest.mark.parametrize("q", [1, 2, 3])
def test_iwp_transition_is_the_integral_of_the_sde(q):
    # dx = F x dt + L dW: A = expm(F h), Q = int_0^h expm(F s) L L' expm(F s)' ds
    F = np.diag(np.ones(q), 1)
    L = np.zeros((q + 1, 1))
    L[-1] = 1.0
    h = 0.37
    A, Q = iwp_transition(q, torch.tensor([h], dtype=DT))
    Q_num, _ = quad_vec(lambda s: expm(F * s) @ L @ L.T @ expm(F * s).T, 0.0, h,
                        epsabs=1e-14, epsrel=1e-12)
    assert np.allclose(A[0].numpy(), expm(F * h), atol=1e-14)
    assert np.allclose(Q[0].numpy(), Q_num, rtol=1e-9, atol=1e-15)


def _random_model(N, seed=0, C=2, q=2, M=3):
    g = torch.Generator().manual_seed(seed)
    h = torch.rand(N, generator=g, dtype=DT) * 0.3 + 0.05
    A, Q = block_transition(q, h, torch.tensor([1.0, 2.0][:C], dtype=DT))
    D = C * (q + 1)
    H = torch.randn(N, M, D, generator=g, dtype=DT)
    R = torch.diag_embed(torch.rand(N, M, generator=g, dtype=DT) * 0.1 + 0.01)
    z = torch.randn(N, M, generator=g, dtype=DT)
    m0 = torch.randn(D, generator=g, dtype=DT)
    P0 = torch.eye(D, dtype=DT)
    mask = torch.rand(N, M, generator=g) > 0.3
    return A, Q, H, R, z, m0, P0, mask


def _dense(A, Q, H, R, z, m0, P0, mask):
    """The same model as one Gaussian over all the states: its evidence and posterior."""
    N, D = A.shape[0], m0.shape[0]
    mean = torch.zeros(N * D, dtype=DT)
    cov = torch.zeros(N * D, N * D, dtype=DT)
    mean[:D], cov[:D, :D] = m0, P0
    for n in range(1, N):
        prev, cur = slice((n - 1) * D, n * D), slice(n * D, (n + 1) * D)
        mean[cur] = A[n] @ mean[prev]
        cov[cur, :n * D] = A[n] @ cov[prev, :n * D]
        cov[:n * D, cur] = cov[cur, :n * D].T
        cov[cur, cur] = A[n] @ cov[prev, prev] @ A[n].T + Q[n]
    keep = mask.reshape(-1)
    Hd = torch.block_diag(*H)[keep]
    Rd = torch.block_diag(*R)[keep][:, keep]
    zd = z.reshape(-1)[keep]
    S = Hd @ cov @ Hd.T + Rd
    evidence = torch.distributions.MultivariateNormal(Hd @ mean, S).log_prob(zd)
    K = cov @ Hd.T @ torch.linalg.inv(S)
    return evidence, mean + K @ (zd - Hd @ mean), cov - K @ S @ K.T


@pytest.mark.parametrize("N", [1, 2, 5, 37])
@pytest.mark.parametrize("doubling", [True, False])
def test_parallel_filter_and_smoother_match_sequential_and_dense(N, doubling, monkeypatch):
    monkeypatch.setattr(kalman, "STEP_EFFICIENT", 10 ** 6 if doubling else 1)
    args = _random_model(N)
    m, P, ll = kalman.kalman_filter(*args)
    m2, P2, ll2 = kalman.sequential_filter(*args)
    assert torch.allclose(m, m2, atol=1e-10) and torch.allclose(P, P2, atol=1e-10)
    assert abs(float(ll - ll2)) < 1e-9
    evidence, post_mean, post_cov = _dense(*args)
    assert abs(float(ll - evidence)) < 1e-8
    ms, Ps, _ = kalman.rts_smoother(args[0], args[1], m, P)
    D = ms.shape[1]
    assert torch.allclose(ms.reshape(-1), post_mean, atol=1e-7)
    for n in range(N):
        assert torch.allclose(Ps[n], post_cov[n * D:(n + 1) * D, n * D:(n + 1) * D], atol=1e-6)


def test_filter_evidence_parts_are_its_innovations():
    A, Q, H, R, z, m0, P0, mask = _random_model(20, seed=3)
    _, _, ll = kalman.kalman_filter(A, Q, H, R, z, m0, P0, mask)
    _, _, (quad, logdet) = kalman.kalman_filter(A, Q, H, R, z, m0, P0, mask, parts=True)
    n = int(mask.sum())
    assert abs(float(-0.5 * (quad + logdet + n * math.log(2 * math.pi)) - ll)) < 1e-10


def _decay_filter(nodes, a=1.3, noise=0.05, n=15, seed=0):
    """f' = -a f, f(0) = 2, observed at n points on [0, 3]."""
    def decay(f, x, a):
        return (f["f"].d("t") + a * f["f"],)
    system = pk.EquationSystem(decay, outputs=("f",), inputs=("t",), a=a)
    ode = explicit_ode(system)
    t = np.linspace(0.1, 3.0, n)
    rng = np.random.default_rng(seed)
    y = 2 * np.exp(-a * t) + noise * rng.standard_normal(n)
    tr = [("a", torch.distributions.transform_to(torch.distributions.constraints.positive))]
    filt = ODEFilter(ode, [(t, y)], tr, 0.0, 3.0, [1.0], nodes=nodes)
    v = torch.tensor([math.log(a), 2.0, math.log(noise)], dtype=DT)
    return filt, v, t, y


def _smoothed(filt, v, iterations=2):
    u_star = torch.zeros(len(filt.t), filt.C, dtype=DT)
    for _ in range(iterations):
        out = filt.evidence(v, u_star, smooth=True)
        u_star = filt.nodes_mean(out["mean"]).detach()
    return out


def test_ode_filter_solution_without_data_converges_at_its_order():
    # no data but the exact initial state: the filter is a probabilistic solver
    def decay(f, x, a):
        return (f["f"].d("t") + a * f["f"],)
    ode = explicit_ode(pk.EquationSystem(decay, outputs=("f",), inputs=("t",), a=1.3))
    tr = [("a", torch.distributions.transform_to(torch.distributions.constraints.positive))]
    errors = []
    for nodes in (16, 32, 64, 128):
        filt = ODEFilter(ode, [(np.zeros(0), np.zeros(0))], tr, 0.0, 3.0, [1.0], nodes=nodes)
        v = torch.tensor([math.log(1.3), 2.0], dtype=DT)
        out = _smoothed(filt, v)
        mean = filt.nodes_mean(out["mean"])[:, 0].detach()
        errors.append(float((mean - 2 * torch.exp(-1.3 * filt.t)).abs().max()))
    rates = [math.log2(a / b) for a, b in zip(errors, errors[1:])]
    assert min(rates) > 1.8, (errors, rates)        # order q = 2 at least


def test_ode_filter_likelihood_tends_to_the_exact_odes():
    filt, v, t, y = _decay_filter(400)
    out = _smoothed(filt, v)
    exact = torch.distributions.Normal(torch.as_tensor(2 * np.exp(-1.3 * t)),
                                       0.05).log_prob(torch.as_tensor(y)).sum()
    assert abs(float(out["log_evidence"].detach() - exact)) < 1e-3 * abs(float(exact))


def test_ode_filter_gradients_match_finite_differences():
    filt, v, t, y = _decay_filter(30)
    u_star = filt.nodes_mean(_smoothed(filt, v)["mean"]).detach()
    v = v.clone().requires_grad_(True)
    g, = torch.autograd.grad(filt.evidence(v, u_star)["log_evidence"], v)
    for k in range(len(v)):
        e = torch.zeros_like(v)
        e[k] = 1e-4
        fd = (filt.evidence(v.detach() + e, u_star)["log_evidence"]
              - filt.evidence(v.detach() - e, u_star)["log_evidence"]).detach() / 2e-4
        assert abs(float(g[k] - fd)) < 1e-4 * (1 + abs(float(fd)))


def _spring():
    def spring(f, x, k, c):
        pos, vel = f["x"], f["v"]
        return (pos.d("t") - vel, vel.d("t") + k * pos + c * vel)
    t = torch.linspace(0, 6, 40, dtype=DT)
    noise = 0.05 * torch.randn(40, generator=torch.Generator().manual_seed(0), dtype=DT)
    x_obs = torch.exp(-0.2 * t) * torch.cos(1.99 * t) + noise
    system = pk.EquationSystem(spring, outputs=("x", "v"), inputs=("t",), k=1.0, c=1.0)
    return system, t, x_obs


def test_state_space_fit_matches_the_exact_ode_fit_and_predicts_the_hidden_output():
    system, t, x_obs = _spring()
    model = pk.StateSpaceGP(system, {"x": (t, x_obs)}, domain=pk.Box(t=(0.0, 10.0)))
    result = pk.fit(model, progress=False)
    assert isinstance(result, pk.infer.FitResult)
    iv = model.coefficient_intervals(0.9)
    exact = pk.infer.fit_exact(model.ode, [(t.numpy(), x_obs.numpy()), (np.zeros(0), np.zeros(0))],
                         [(n, tr, [float(tr.inv(torch.tensor(v)))]) for (n, tr), v in
                          zip(model.filter.transforms, (4.0, 0.4))],
                         np.array([[1.0, 0.0]]), 0.0, 6.0, np.array([0.5, 1.0]))
    ev = exact.intervals(0.9)
    for n in ("k", "c"):
        assert abs(iv[n]["value"] / ev[n]["value"] - 1) < 5e-3
        width, ewidth = iv[n]["upper"] - iv[n]["lower"], ev[n]["upper"] - ev[n]["lower"]
        assert 0.8 < width / ewidth < 1.25
        assert iv[n]["identified"]
    tt = torch.linspace(0, 10, 101, dtype=DT)
    mean, var = model(tt)
    assert mean.shape == (101, 2) and var.shape == (101, 2)
    truth_x = torch.exp(-0.2 * tt) * torch.cos(1.99 * tt)
    truth_v = -0.2 * truth_x - 1.99 * torch.exp(-0.2 * tt) * torch.sin(1.99 * tt)
    z = (torch.stack([mean[:, 0] - truth_x, mean[:, 1] - truth_v], 1) / var.sqrt()).abs()
    assert float(z.max()) < 4.0              # the velocity nobody measured, within its band
    assert float((mean[:, 1] - truth_v).abs().max()) < 0.15


def test_prediction_does_not_change_the_model_and_interpolates_the_nodes():
    system, t, x_obs = _spring()
    model = pk.StateSpaceGP(system, {"x": (t, x_obs)}, starts=0)
    pk.fit(model, progress=False)
    evidence = lambda: float(pyro.poutine.trace(model.model).get_trace().nodes[  # noqa: E731
        "_RETURN"]["value"]["log_evidence"].detach())
    before = evidence()
    nodes = model.filter.t
    mean, var = model(nodes, parameter_uncertainty=False)
    out = model._smoothed()
    at_nodes = model.filter.nodes_mean(out["mean"]) * model.filter.scale
    assert torch.allclose(mean, at_nodes, atol=1e-9)
    # between two nodes the mean is continuous
    mid = 0.5 * (nodes[10] + nodes[11])
    m_mid, _ = model(torch.stack([mid - 1e-7, mid, mid + 1e-7]), parameter_uncertainty=False)
    assert float((m_mid[0] - m_mid[2]).abs().max()) < 1e-5
    assert evidence() == before
    tr = pyro.poutine.trace(model.model).get_trace()
    assert "data" in tr.nodes and tr.nodes["data"]["type"] == "sample"


def test_a_single_equation_of_second_order():
    def osc(f, x, omega):
        return f.d("t", "t") + omega ** 2 * f
    eq = Equation(osc, inputs=("t",), omega=Parameter(1.5))
    t = torch.linspace(0, 5, 30, dtype=DT)
    y = torch.cos(2.0 * t) + 0.02 * torch.randn(30, generator=torch.Generator().manual_seed(1),
                                                dtype=DT)
    model = pk.StateSpaceGP(eq, (t, y))
    pk.fit(model, progress=False)
    iv = model.coefficient_intervals(0.9)["omega"]
    assert iv["lower"] < 2.0 < iv["upper"] and abs(iv["value"] - 2.0) < 0.02
    mean, var = model(t)
    assert mean.shape == (30,) and float((mean - torch.cos(2.0 * t)).abs().max()) < 0.05


def test_known_initial_value_is_held():
    system, t, x_obs = _spring()
    model = pk.StateSpaceGP(system, {"x": (t, x_obs)}, known={"v": -0.2}, starts=0)
    pk.fit(model, progress=False)
    assert abs(model.initial_state()["v"] + 0.2) < 1e-12


def test_bad_input_is_refused_in_one_line():
    heat = Equation(lambda f, x, a: f.d("t") - a * f.d("x", "x"), inputs=("t", "x"), a=1.0)
    with pytest.raises(ValueError, match="one input"):
        pk.StateSpaceGP(heat, (torch.zeros(3), torch.zeros(3)))
    implicit = Equation(lambda f, x, a: f.d("t") ** 2 - a * f, inputs=("t",), a=1.0)
    with pytest.raises(ValueError, match="explicit ODE"):
        pk.StateSpaceGP(implicit, (torch.linspace(0, 1, 5), torch.ones(5)))
    system, t, x_obs = _spring()
    with pytest.raises(ValueError, match="unknown output"):
        pk.StateSpaceGP(system, {"y": (t, x_obs)})
    with pytest.raises(TypeError, match="EquationSystem"):
        pk.StateSpaceGP(lambda f: f, (t, x_obs))
    with pytest.raises(RuntimeError, match="fitted"):
        pk.StateSpaceGP(system, {"x": (t, x_obs)})(t)


def test_an_ode_the_data_contradict_warns():
    # oscillating data, a decay law: the best trajectory of the law misses them
    t = torch.linspace(0, 6, 40, dtype=DT)
    y = torch.cos(2 * t) + 0.05 * torch.randn(40, generator=torch.Generator().manual_seed(2),
                                               dtype=DT)
    decay = Equation(lambda f, x, a: f.d("t") + a * f, inputs=("t",), a=Parameter(1.0))
    model = pk.StateSpaceGP(decay, (t, y))
    with pytest.warns(pk.ModelMisfitWarning, match="contradict"):
        pk.fit(model, progress=False)
    assert not model.adequacy()["agree"]
    assert not model.adequacy(most=10)["agree"]        # many data: the noise's check
    system, t, x_obs = _spring()
    right = pk.StateSpaceGP(system, {"x": (t, x_obs)}, starts=0)
    pk.fit(right, progress=False)
    assert right.adequacy()["agree"] and right.adequacy()["evidence_ratio"] > 0
    assert right.adequacy(most=10)["agree"]


def test_a_fitted_model_saves_and_loads(tmp_path):
    system, t, x_obs = _spring()
    model = pk.StateSpaceGP(system, {"x": (t, x_obs)}, starts=0)
    pk.fit(model, progress=False)
    mean, var = model(t)
    pk.save(model, tmp_path / "spring.pk")
    again = pk.load(tmp_path / "spring.pk")
    mean2, var2 = again(t)
    assert torch.allclose(mean, mean2, atol=1e-10) and torch.allclose(var, var2, rtol=1e-8)
    assert again.coefficient_intervals(0.9) == model.coefficient_intervals(0.9)


def _decay_data(n=25, seed=3):
    t = np.linspace(0.0, 3.0, n)
    rng = np.random.default_rng(seed)
    return t, 2.0 * np.exp(-1.2 * t) + 0.05 * rng.standard_normal(n)


def _decay_model(t, y, **kw):
    eq = Equation(lambda f, x, a: f.d("t") + a * f, inputs=("t",), a=Parameter(1.0))
    model = pk.StateSpaceGP(eq, (torch.as_tensor(t), torch.as_tensor(y)), **kw)
    pk.fit(model, progress=False)
    return model


def test_nuts_draws_hold_what_they_drew_and_leave_the_fit_as_it_was():
    t, y = _decay_data()
    model = _decay_model(t, y, starts=0)
    before = model(torch.tensor([0.5, 2.0], dtype=DT))
    draws = pk.infer.sample_coefficients(model, num_warmup=8, num_samples=8, num_chains=2,
                                   progress=False)
    assert list(draws.samples) == ["a", "x0.f", "noise.f"]
    assert draws.unconstrained.shape == (16, 3) and bool((draws.samples["a"] > 0).all())
    assert set(draws.summary()) == {"a", "x0.f", "noise.f"}
    mean, var = draws.predict(torch.tensor([0.5, 2.0], dtype=DT), num_draws=4)
    assert mean.shape == (2,) and bool((var > 0).all())
    after = model(torch.tensor([0.5, 2.0], dtype=DT))
    assert torch.equal(before[0], after[0]) and torch.equal(before[1], after[1])
    assert model.equation_parameters()["a"] == pytest.approx(
        float(torch.exp(torch.tensor(model.result.v[0]))))
    with pytest.raises(RuntimeError, match="fitted"):
        pk.StateSpaceGP(model.equation, (t, y)).sample(num_warmup=1, num_samples=1)


@pytest.mark.slow
def test_nuts_posterior_of_a_decay_rate_matches_the_exact_posterior_on_a_grid():
    # f' = -a f: the exact trajectory x0 exp(-a t); with the sampler's priors (normal sd 2
    # on log a about its start, on x0 / s about the first datum; flat on log sd) the noise
    # integrates out, p(log a, x0 | y) ~ SS^(-n/2) prior, on a grid
    t, y = _decay_data()
    model = _decay_model(t, y)
    draws = model.sample(num_warmup=150, num_samples=150, num_chains=2, progress=False)
    s = float(model.filter.scale[0])
    la = np.linspace(math.log(0.6), math.log(2.4), 400)[:, None, None]
    x0 = np.linspace(1.5, 2.5, 400)[None, :, None]
    ss = ((y - x0 * np.exp(-np.exp(la) * t)) ** 2).sum(-1)
    logp = (-0.5 * len(t) * np.log(ss) - 0.5 * (la[..., 0] / 2.0) ** 2
            - 0.5 * ((x0[..., 0] - y[0]) / s / 2.0) ** 2)
    w = np.exp(logp - logp.max())
    w /= w.sum()
    a = np.exp(la[..., 0]) * np.ones_like(w)
    mean = float((w * a).sum())
    sd = math.sqrt(float((w * (a - mean) ** 2).sum()))
    drawn = draws.samples["a"]
    assert abs(float(drawn.mean()) - mean) < 0.25 * sd
    assert 0.75 < float(drawn.std()) / sd < 1.33
    assert float(draws.diagnostics["theta"]["r_hat"].max()) < 1.05


def test_a_rate_run_to_zero_keeps_its_trade_off_in_the_laplace_intervals():
    # f' = -(a + b) f: only a + b is seen. With b run to zero (its log at -69), the
    # curvature in log b vanishes and a alone would look pinned; taken in b itself, the
    # trade-off shows and a is as free as the data leave it
    from pyro_pidkl.statespace.fit import laplace
    t, y = _decay_data()
    eq = Equation(lambda f, x, a, b: f.d("t") + (a + b) * f, inputs=("t",),
                  a=Parameter(1.0), b=Parameter(1.0))
    model = pk.StateSpaceGP(eq, (torch.as_tensor(t), torch.as_tensor(y)), starts=0)
    pk.fit(model, progress=False)
    fit = model.result
    fit.v = fit.v.copy()
    total = math.exp(fit.v[0]) + math.exp(fit.v[1])
    fit.v[0], fit.v[1] = math.log(total), math.log(total) - 70.0
    assert model._at_zero(fit.v) == [1]
    decoupled = laplace(model.filter, fit).cov[0, 0]
    assert 0 < decoupled < 0.01                        # a alone: pinned to a few percent
    coupled = laplace(model.filter, fit, [1])
    assert not (0 < coupled.cov[0, 0] < 1.0)           # a trades off against b: free
    assert np.isfinite(coupled.hessian).all() and fit.boundary == [1]
    model.result = coupled
    iv = model.coefficient_intervals(0.9)
    assert not iv["a"]["identified"] and not iv["b"]["identified"]
    assert iv["b"]["lower"] == 0.0 and iv["b"]["upper"] > 0.5
