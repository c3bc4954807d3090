import functools
import math
import warnings

import numpy as np
import pyro
import pytest
import torch
from pyro import poutine
from pyro.infer import Trace_ELBO
from torch import nn

import pyro_pidkl as pk
from pyro_pidkl import PIDKL, Box, physics
from pyro_pidkl.models import DKL, SKL
from pyro_pidkl.physics import Gaussian


def _ode_data(n=20):
    t = np.linspace(0, 1, n)
    return t[:, None], np.exp(-2 * t) + 0.5


def _heat_data():
    x, t = np.meshgrid(np.linspace(0, 1, 6), np.linspace(0, 0.5, 4))
    X = np.stack([x.ravel(), t.ravel()], 1)
    y = np.exp(-np.pi ** 2 * 0.1 * X[:, 1]) * np.sin(np.pi * X[:, 0])
    return X, y


def _pidkl(**kw):
    X, y = _ode_data()
    return PIDKL(X, y, physics.first_order_ode(), **kw)


@pytest.mark.parametrize("draw,particles", [("function", 1), ("pointwise", 1), ("function", 3),
                                            ("pointwise", 3)])
def test_trace_shows_the_sites_with_their_shapes(draw, particles):
    model = _pidkl(m=7, draw=draw)
    fn = model.model
    if particles > 1:
        fn = pyro.plate("particles", particles, dim=-1)(fn)
    tr = poutine.trace(fn).get_trace()
    sites = {n: s for n, s in tr.nodes.items() if s["type"] == "sample"}
    assert set(sites) == {"data", "Z", "eps", "physics"}
    batch = (particles,) if particles > 1 else ()
    assert sites["Z"]["value"].shape == batch + (7, 1)
    assert sites["eps"]["value"].shape == batch + ((1,) if draw == "function" else (7,))
    assert sites["data"]["fn"].batch_shape == batch       # once per particle
    assert sites["physics"]["fn"].batch_shape == batch
    assert sites["data"]["is_observed"] and sites["physics"]["is_observed"]
    params = {n for n, s in tr.nodes.items() if s["type"] == "param"}
    assert {"noise", "physics.equation.B", "physics.equation.D", "physics.source_kernel.variance",
            "kernel.kern.lengthscale"} <= params
    assert "kernel.iwarping_fn$$$layers.0.weight" in params
    Z = sites["Z"]["value"]
    assert (Z >= 0).all() and (Z <= 1).all()


def test_physics_factor_is_gamma_times_the_source_log_density():
    model = _pidkl(m=5, gamma=2.5)
    tr = poutine.trace(model.model).get_trace()
    Z, eps = tr.nodes["Z"]["value"], tr.nodes["eps"]["value"]
    with torch.no_grad():
        post = model.posterior()
        h = model.physics.residual(functools.partial(model.posterior_draw, post), Z, eps)
        logp = model.physics.log_prob(h, Z)
    torch.testing.assert_close(tr.nodes["physics"]["fn"].log_factor.detach(), 2.5 * logp)


def test_physics_log_prob_is_the_source_gp_density():
    model = _pidkl(m=6)
    Z = torch.rand(3, 6, 1, dtype=torch.float64)
    h = torch.randn(3, 6, dtype=torch.float64)
    with torch.no_grad():
        U = model.standardizer.x_to_model(Z)
        s2 = model.physics.source_kernel.variance
        ell = model.physics.source_kernel.lengthscale
        Sigma = s2 * torch.exp(-0.5 * ((U - U.transpose(-1, -2)) / ell) ** 2)
        Sigma = Sigma + model.physics.source_jitter * s2 * torch.eye(6, dtype=Sigma.dtype)
        expected = torch.distributions.MultivariateNormal(torch.zeros(6, dtype=h.dtype),
                                                          Sigma).log_prob(h)
        torch.testing.assert_close(model.physics.log_prob(h, Z), expected)


def test_physics_log_prob_gradients_are_those_of_the_textbook_density():
    """The closed-form gradients (Sigma^{-1} once, quadratic form and log-determinant with
    written-out backwards) against autograd through MultivariateNormal, for h and the
    source kernel's parameters, on a batch of point sets."""
    model = _pidkl(m=6)
    kern = model.physics.source_kernel
    Z = torch.rand(3, 6, 1, dtype=torch.float64)
    h = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    params = [h] + [p for p in kern.parameters()]
    assert len(params) == 3   # h, the variance and the lengthscale (unconstrained)
    out = []
    for density in ("library", "textbook"):
        with model._pyro_context:
            if density == "library":
                lp = model.physics.log_prob(h, Z)
            else:
                U = model.standardizer.x_to_model(Z)
                s2, ell = kern.variance, kern.lengthscale
                Sigma = s2 * torch.exp(-0.5 * ((U - U.transpose(-1, -2)) / ell) ** 2)
                Sigma = Sigma + model.physics.source_jitter * s2 * torch.eye(6, dtype=Sigma.dtype)
                lp = torch.distributions.MultivariateNormal(
                    torch.zeros(6, dtype=h.dtype), Sigma).log_prob(h)
            w = torch.tensor([0.3, -1.0, 2.0], dtype=h.dtype)
            out.append(torch.autograd.grad((w * lp).sum(), params))
    for a, b in zip(*out):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("source_inputs", ["equation", "x", ("t",)])
def test_source_covariance_is_pyros_se_kernel_on_its_columns(source_inputs):
    """The written-out source covariance against pyro.contrib.gp's RBF (active_dims), on a
    batch of point sets, with lengthscales that differ per input."""
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (20, 2)) * [2.0, 0.5]
    y = np.sin(X[:, 0]) * np.exp(-X[:, 1])
    model = pk.PIDKL(X, y, physics.heat_1d(alpha=0.3), input_names=("x", "t"), m=4,
                     source_inputs=source_inputs, seed=0)
    kern = model.physics.source_kernel
    kern.lengthscale = torch.linspace(0.5, 0.9, kern.lengthscale.numel(), dtype=torch.float64)
    kern.variance = torch.tensor(1.7, dtype=torch.float64)
    Z = torch.rand(3, 4, 2, dtype=torch.float64)
    with torch.no_grad():
        U = model.standardizer.x_to_model(Z)
        expected = torch.stack([kern(u) for u in U]) + (
            model.physics.source_jitter * 1.7 * torch.eye(4, dtype=torch.float64))
        torch.testing.assert_close(model.physics.source_covariance(Z), expected)


def test_gamma_zero_gives_the_dkl_loss():
    X, y = _ode_data()
    losses = []
    for cls in ("pidkl", "dkl"):
        pyro.clear_param_store()
        torch.manual_seed(3)
        if cls == "pidkl":
            model = PIDKL(X, y, physics.first_order_ode(), gamma=0.0)
        else:
            model = DKL(X, y, input_names=("t",))
        losses.append(Trace_ELBO().loss(model.model, model.guide))
    assert losses[0] == losses[1]


def test_svi_with_a_fixed_seed_reproduces_itself_exactly():
    runs = []
    for _ in range(2):
        pyro.set_rng_seed(11)
        model = _pidkl(m=5)
        result = pk.fit(model, num_steps=15, lr=0.02, num_particles=2, seed=5, progress=False)
        runs.append((result.losses, model.equation_parameters(), model(np.array([[0.3]]))))
    assert runs[0][0] == runs[1][0]
    assert runs[0][1] == runs[1][1]
    assert torch.equal(runs[0][2][0], runs[1][2][0])


def test_fit_raises_no_warnings():
    model = _pidkl(m=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pk.fit(model, num_steps=3, progress=False)
        pk.fit(model, num_steps=3, num_particles=2, progress=False)
        pyro.infer.Predictive(model.model, num_samples=2)()


def test_physics_term_is_computed_under_no_grad():
    """Predictive runs models under torch.no_grad(): derivatives must still be taken."""
    model = _pidkl(m=4)
    pyro.set_rng_seed(2)
    tr = poutine.trace(model.model).get_trace()
    pyro.set_rng_seed(2)
    with torch.no_grad():
        tr_ng = poutine.trace(model.model).get_trace()
    torch.testing.assert_close(tr_ng.nodes["physics"]["fn"].log_factor,
                               tr.nodes["physics"]["fn"].log_factor.detach())
    samples = pyro.infer.Predictive(model.model, num_samples=3, return_sites=["Z", "eps"])()
    assert samples["Z"].shape == (3, 4, 1) and samples["eps"].shape == (3, 1)


def test_forward_mean_and_variance_in_user_units():
    X, y = _ode_data()
    model = DKL(X, y, input_names=("t",))
    mean, var = model(X)
    _, var_y = model(X, noiseless=False)
    torch.testing.assert_close(var_y - var, torch.full_like(var, model.noise_variance()))
    assert float((mean - torch.as_tensor(y)).abs().max()) < 0.5  # data scale, not standardised
    mean_c, cov = model(X[:5], full_cov=True)
    torch.testing.assert_close(cov.diagonal(), var[:5])
    # the posterior after standardisation equals the textbook posterior in user units
    st = model.standardizer
    with torch.no_grad():
        Xs, ys = st.x_to_model(model.X), st.y_to_model(model.y)
        K = model.kernel(Xs) + model.noise * torch.eye(len(Xs))
        Ks = model.kernel(Xs[:5], Xs)
        ref = st.f_to_user(Ks @ torch.linalg.solve(K, ys))
    torch.testing.assert_close(mean_c, ref)


def test_equation_sees_user_units():
    """psi's f_t equals the derivative of the model's mean in user units (eps = 0)."""
    X, y = _ode_data()
    X = X * 50.0 + 7.0          # far from standardised units
    y = y * 30.0 - 4.0
    seen = {}

    def record(f, x):
        seen["f"], seen["f_t"], seen["t"] = f.value, f.d("t"), x["t"]
        return f.d("t")
    model = PIDKL(X, y, physics.Equation(record, inputs=("t",)), m=5)
    Z = torch.tensor([[10.0], [30.0], [50.0], [55.0], [20.0]], dtype=torch.float64)
    model.physics.residual(functools.partial(model.posterior_draw, model.posterior()), Z,
                           torch.zeros(1, dtype=torch.float64))
    mean = lambda z: model(z)[0]
    h = 1e-3
    torch.testing.assert_close(seen["t"], Z[:, 0])
    torch.testing.assert_close(seen["f"].detach(), mean(Z))
    fd = (mean(Z + h) - mean(Z - h)) / (2 * h)
    torch.testing.assert_close(seen["f_t"].detach(), fd, rtol=1e-5, atol=1e-7)


def test_constant_mean_is_learned_and_predictions_revert_to_it():
    # unstandardised y around 5: a zero-mean GP reverts to 0 away from the data, a learned
    # constant mean to the level of the data
    t = np.linspace(0, 1, 25)[:, None]
    y = 5.0 + 0.3 * np.sin(6 * t[:, 0])
    far = np.array([[6.0]])
    out = {}
    for mean in ("zero", "constant"):
        model = SKL(t, y, input_names=("t",), standardize=False, mean=mean)
        pk.fit(model, 300, lr=0.05, progress=False, seed=0)
        out[mean] = float(model(far)[0])
    assert abs(out["constant"] - 5.0) < 0.3 and abs(out["zero"]) < 1.0
    assert model.mean_constant.item() == pytest.approx(out["constant"], abs=1e-6)


def test_skl_is_an_ard_gp_on_inputs():
    X, y = _heat_data()
    model = SKL(X, y, input_names=("x", "t"))
    assert model.kernel.lengthscale.shape == (2,)
    pk.fit(model, num_steps=50, lr=0.05, progress=False)
    mean, _ = model(X)
    assert pk.diagnostics.rmse(mean, y) < 0.05


@pytest.mark.parametrize("kwargs,error,match", [
    ({"gamma": -0.1}, ValueError, "gamma >= 0"),
    ({"gamma": math.nan}, ValueError, "gamma >= 0"),
    ({"m": 0}, ValueError, "m \\(number of collocation points\\)"),
    ({"m": 2.5}, ValueError, "integer >= 1"),
    ({"draw": "each"}, ValueError, "one of"),
    ({"source_inputs": ("q",)}, ValueError, "source_inputs"),
    ({"domain": Box(s=(0, 1))}, ValueError, "does not have"),
    ({"domain": Box(t=(2, 3))}, ValueError, "do not overlap"),
    ({"domain": Box(t=(1, 0))}, ValueError, "low < high"),
    ({"domain": Gaussian(t=(0, -1))}, ValueError, "positive scale"),
    ({"noise_floor": 1.0}, ValueError, "exceed noise_floor"),
    ({"mean": "linear"}, ValueError, "'zero' or 'constant'"),
])
def test_bad_options_raise_clear_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        _pidkl(**kwargs)


def test_bad_data_raise_clear_errors():
    X, y = _ode_data()
    eq = physics.first_order_ode()
    with pytest.raises(ValueError, match=r"shape \(N, 1\) for inputs \('t',\); got \(20, 2\)"):
        PIDKL(np.hstack([X, X]), y, eq, input_names=("t",))
    with pytest.raises(ValueError, match=r"y to have shape \(20,\)"):
        PIDKL(X, y[:-1], eq)
    Xn = X.copy()
    Xn[3, 0] = np.nan
    with pytest.raises(ValueError, match="NaN/inf in 1 entries \\(first rows: \\[3\\]\\)"):
        PIDKL(Xn, y, eq)
    yi = y.copy()
    yi[0] = np.inf
    with pytest.raises(ValueError, match="finite values in y"):
        PIDKL(X, yi, eq)
    with pytest.raises(ValueError, match="at least one row"):
        PIDKL(np.zeros((0, 1)), np.zeros(0), eq)
    with pytest.raises(ValueError, match="unknown: \\('t',\\)"):
        PIDKL(X, y, eq, input_names=("s",))
    with pytest.raises(TypeError, match="Equation"):
        PIDKL(X, y, lambda f, x: f)
    model = DKL(X, y)
    with pytest.raises(ValueError, match=r"Xnew to have shape \(N, 1\)"):
        model(np.zeros((3, 2)))


def test_relu_feature_map_under_second_order_equation_is_refused():
    X, y = _heat_data()
    relu = pk.kernels.MLP(2, activation=nn.ReLU)
    with pytest.raises(ValueError, match="order 2.*ReLU-like.*nn.Tanh"):
        PIDKL(X, y, physics.heat_1d(), input_names=("x", "t"), feature_net=relu)
    # a first-order equation is fine with ReLU
    Xo, yo = _ode_data()
    PIDKL(Xo, yo, physics.first_order_ode(), feature_net=pk.kernels.MLP(1, activation=nn.ReLU))


def test_unknown_names_inside_psi_fail_at_construction():
    X, y = _heat_data()
    eq = physics.Equation(lambda f, x: f.d("z"), inputs=("x", "t"))
    with pytest.raises(ValueError, match="Unknown input name 'z'"):
        PIDKL(X, y, eq, input_names=("x", "t"))
    eq = physics.Equation(lambda f, x: x["z"], inputs=("x", "t"))
    with pytest.raises(KeyError, match="Unknown input name 'z'"):
        PIDKL(X, y, eq, input_names=("x", "t"))


class _Collapse(nn.Module):
    """A feature map sending every input to the same point: K = s^2 * ones (rank one)."""

    def forward(self, x):
        return 0.0 * x


def test_non_positive_definite_kernel_raises_named_error():
    X, y = _ode_data(6)
    model = DKL(X, y, feature_net=_Collapse(), noise=1e-300, noise_floor=0.0, max_jitter=1e-12)
    with pytest.raises(pk.NotPositiveDefiniteError, match="6 x 6 matrix K \\+ sigma\\^2 I"):
        model.posterior()
    # with the default jitter bound the same model is usable
    DKL(X, y, feature_net=_Collapse(), noise=1e-300, noise_floor=0.0).posterior()


def test_covariates_outside_the_equation_enter_the_gp_but_not_the_source_kernel():
    # Jura-like: Poisson over (x, y), covariates Ni and Zn are GP inputs only
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (30, 4))
    y = np.sin(3 * X[:, 0]) + X[:, 1] * X[:, 2] + 0.1 * X[:, 3]
    pyro.clear_param_store()
    model = PIDKL(X, y, physics.poisson_2d("x", "y"), input_names=("x", "y", "Ni", "Zn"),
                  m=8)
    assert model.physics.source_kernel.active_dims == [0, 1]
    Z = torch.rand(5, 4, dtype=torch.float64)
    Z2 = Z.clone()
    Z2[:, 2:] = torch.rand(5, 2, dtype=torch.float64)   # other covariates, same (x, y)
    torch.testing.assert_close(model.physics.source_kernel(Z), model.physics.source_kernel(Z2))
    pk.fit(model, num_steps=5, progress=False)
    with pytest.raises(ValueError, match="active_dims within 0..3"):
        pk.kernels.se_ard(4, [1, 4])


def test_pidkl_model_written_out_equals_the_generic_exact_gp_with_the_term():
    """PIDKL.model (the story written out) and DKL(physics=PhysicsTerm(...)).model (the
    generic path through PhysicsTerm.factor) give the same trace and loss."""
    X, y = _ode_data()
    losses = []
    for kind in ("pidkl", "dkl+term"):
        pyro.clear_param_store()
        torch.manual_seed(0)
        eq = physics.first_order_ode(B=0.5, D=0.5)
        if kind == "pidkl":
            model = PIDKL(X, y, eq, gamma=2.0, m=6)
        else:
            model = DKL(X, y, physics=pk.physics.PhysicsTerm(eq, gamma=2.0, m=6))
        pyro.set_rng_seed(4)
        tr = poutine.trace(model.model).get_trace()
        losses.append((float(tr.log_prob_sum().detach()), tr.nodes["Z"]["value"].clone()))
    assert losses[0][0] == pytest.approx(losses[1][0], rel=1e-12)
    assert torch.equal(losses[0][1], losses[1][1])


@pytest.mark.parametrize("carrier", ["skl", "lfm", "exact-periodic", "sparse"])
def test_any_gp_model_carries_the_physics_term(carrier):
    """PI-SKL, PI-LFM, an ExactGP with another kernel, and the sparse GP: the same sites,
    and a short fit moves the equation's parameters."""
    from pyro.contrib.gp.kernels import Periodic

    X, y = _ode_data(30)
    term = pk.physics.PhysicsTerm(physics.first_order_ode(B=0.5, D=0.5), gamma=1.0, m=5)
    build = {"skl": lambda: SKL(X, y, physics=term),
             "lfm": lambda: pk.models.LFM(X, y, input_names=("t",), physics=term),
             "exact-periodic": lambda: pk.models.ExactGP(X, y, kernel=Periodic(1), physics=term),
             "sparse": lambda: pk.models.SparseGP(X, y, num_inducing=8, batch_size=10,
                                                   physics=term)}
    pyro.set_rng_seed(0)
    model = build[carrier]()
    assert model.physics is term and model.input_names == ("t",)
    tr = poutine.trace(model.model).get_trace()
    assert {"Z", "eps", "physics"} <= set(tr.nodes)
    before = dict(model.equation_parameters())
    pk.fit(model, num_steps=15, lr=0.05, progress=False, seed=0)
    after = model.equation_parameters()
    assert after["B"] != before["B"] and after["D"] != before["D"]
