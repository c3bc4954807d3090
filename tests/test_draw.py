"""Closed-form derivatives of the posterior draw (pyro_pidkl.physics.posterior_draw) and the closed-form
backward of the GP solves (pyro_pidkl.gp.posterior.cho_solve / logdet)."""

import math

import numpy as np
import pyro
import pytest
import torch
from pyro.infer import Trace_ELBO
from torch import nn

from pyro_pidkl import PIDKL, physics
from pyro_pidkl.physics.posterior_draw import DrawField, PosteriorDraw
from pyro_pidkl.kernels import closed_form_supported, feature_jet
from pyro_pidkl.kernels.features import MLP
from pyro_pidkl.gp.posterior import cho_solve, logdet, quad_diag

NAMES = ("x", "t")


def _model(feature=None, m=7, seed=0, **kwargs):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, (40, 2)) * [2, 3] + [1, -1]
    y = np.sin(3 * X[:, 0]) * np.exp(-X[:, 1])
    pyro.set_rng_seed(seed)
    pyro.clear_param_store()
    if feature == "softplus":
        kwargs["feature_net"] = nn.Sequential(nn.Linear(2, 8, dtype=torch.float64), nn.Softplus(),
                                              nn.Linear(8, 3, dtype=torch.float64))
    elif feature == "silu":
        kwargs["feature_net"] = MLP(2, 5, width=6, depth=2, activation=nn.SiLU)
    elif feature == "skip":
        kwargs["skip_inputs"] = True
    elif feature == "constant-mean":
        kwargs["mean"] = "constant"
    model = PIDKL(X, y, physics.heat_1d(alpha=0.5), input_names=NAMES, m=m, **kwargs)
    if feature == "constant-mean":
        with torch.no_grad():
            model.mean_constant = torch.tensor(0.4, dtype=torch.float64)
    Z = torch.tensor(rng.uniform(0, 1, (m, 2)) * [2, 3] + [1, -1])
    eps = torch.randn(m, dtype=torch.float64)
    return model, Z, eps


def _fields(model, Z, eps):
    post = model.posterior()
    return post, [PosteriorDraw(post, eps, model.standardizer, closed_form=cf).field(Z, NAMES)
                  for cf in (True, False)]


@pytest.mark.parametrize("feature", [None, "skip", "silu", "softplus", "constant-mean"])
def test_closed_form_derivatives_match_autograd(feature):
    model, Z, eps = _model(feature)
    params = [p for p in model.parameters()]
    for idx in [(), ("t",), ("x",), ("x", "x"), ("x", "t"), ("t", "t")]:
        values, grads = [], []
        post, fields = _fields(model, Z, eps)
        assert isinstance(fields[0], DrawField) and not isinstance(fields[1], DrawField)
        for f in fields:
            v = f.d(*idx) if idx else f.value
            values.append(v.detach())
            grads.append(torch.autograd.grad((v * torch.arange(1.0, 8.0, dtype=v.dtype)).sum()
                                             + post.log_marginal(), params, retain_graph=True,
                                             allow_unused=True))
        scale = values[1].abs().max()
        assert (values[0] - values[1]).abs().max() <= 1e-9 * scale, idx
        for a, b in zip(*grads):
            assert (a is None) == (b is None)
            if a is not None:
                assert torch.allclose(a, b, rtol=1e-8, atol=1e-9 * (1 + b.abs().max())), idx


def test_closed_form_derivatives_match_finite_differences():
    model, Z, eps = _model()
    post, (f, _) = _fields(model, Z, eps)
    draw = PosteriorDraw(post, eps, model.standardizer)
    h = 1e-4
    with torch.no_grad():
        for j, name in enumerate(NAMES):
            e = torch.zeros(2, dtype=Z.dtype)
            e[j] = h
            fp, f0, fm = draw(Z + e), draw(Z), draw(Z - e)
            assert torch.allclose(f.d(name), (fp - fm) / (2 * h), rtol=1e-5, atol=1e-6)
            assert torch.allclose(f.d(name, name), (fp - 2 * f0 + fm) / h ** 2,
                                  rtol=1e-3, atol=1e-3)


def test_third_order_falls_back_to_autograd():
    model, Z, eps = _model()
    _, (cf, ag) = _fields(model, Z, eps)
    assert torch.allclose(cf.d("x", "x", "t"), ag.d("x", "x", "t"), rtol=1e-9, atol=1e-9)


def test_feature_jet_taylor_mode_matches_generic():
    torch.manual_seed(0)
    net = MLP(3, 4, width=5, depth=3)
    U = torch.randn(6, 3, dtype=torch.float64)
    phi, first, second = feature_jet(net, U, [0, 2], pairs=[(0, 0), (0, 2), (2, 2)])
    generic = nn.Sequential(net, nn.Softplus(beta=1e6))   # not Taylor-mode: generic path
    with torch.enable_grad():
        Uq = U.clone().requires_grad_(True)
        out = net(Uq)
        for a in (0, 2):
            J = torch.stack([torch.autograd.grad(out[:, f].sum(), Uq, create_graph=True)[0][:, a]
                             for f in range(4)], -1)
            assert torch.allclose(first[a], J, atol=1e-12)
            for b in (0, 2):
                if a <= b:
                    H = torch.stack([torch.autograd.grad(J[:, f].sum(), Uq, retain_graph=True)[0][:, b]
                                     for f in range(4)], -1)
                    assert torch.allclose(second[(a, b)], H, atol=1e-12)
    _, gfirst, gsecond = feature_jet(generic, U, [0, 2], pairs=[(0, 0), (0, 2), (2, 2)])
    assert set(gsecond) == {(0, 0), (0, 2), (2, 2)} and gfirst[0].shape == (6, 4)


def test_closed_form_field_plans_one_pass_and_handles_derivatives_off_plan():
    model, Z, eps = _model()
    post, (_, ag) = _fields(model, Z, eps)
    planned = PosteriorDraw(post, eps, model.standardizer).field(Z, NAMES, plan={(1,), (0, 0)})
    assert torch.allclose(planned.d("x", "x"), ag.d("x", "x"), atol=1e-10)
    assert planned._jet_pairs == {(0, 0)}
    assert torch.allclose(planned.d("x", "t"), ag.d("x", "t"), atol=1e-10)   # off the plan
    assert torch.allclose(planned.d("x", "x"), ag.d("x", "x"), atol=1e-10)
    assert planned._jet_pairs == {(0, 0), (0, 1)}
    assert model.physics._plan == {(1,), (0, 0)}   # heat_1d asked for f_t, f_xx


def test_closed_form_support_detection():
    model, _, _ = _model()
    assert closed_form_supported(model.kernel)
    assert not closed_form_supported(model.physics.source_kernel)   # plain RBF: no feature map


@pytest.mark.parametrize("device", [
    "cpu", pytest.param("cuda", marks=pytest.mark.skipif(
        not torch.cuda.is_available(), reason="no CUDA device on this machine"))])
def test_pidkl_loss_and_gradients_identical_either_way(device):
    # the closed-form derivatives (custom autograd Functions, Taylor-mode features) on the
    # device too: same loss and parameter gradients as autograd through the posterior
    losses, grads = [], []
    for derivatives in ("closed_form", "autograd"):
        model, _, _ = _model(m=20, derivatives=derivatives, draw="pointwise")
        model = model.to(device)
        elbo = Trace_ELBO(num_particles=3, vectorize_particles=True)
        pyro.set_rng_seed(3)
        loss = elbo.differentiable_loss(model.model, model.guide)
        params = [p for p in model.parameters()]
        losses.append(loss.item())
        grads.append(torch.autograd.grad(loss, params, allow_unused=True))
        assert loss.device.type == device
    assert losses[0] == pytest.approx(losses[1], rel=1e-10)
    for a, b in zip(*grads):
        if a is not None:
            assert torch.allclose(a, b, rtol=1e-7, atol=1e-9 * (1 + b.abs().max()))


def test_pidkl_rejects_unknown_derivatives_option():
    with pytest.raises(ValueError, match="closed_form"):
        _model(derivatives="symbolic")


def _spd(A):
    n = A.shape[-1]
    return A @ A.T + n * torch.eye(n, dtype=A.dtype)


def test_cho_solve_and_logdet_gradcheck():
    torch.manual_seed(0)
    A = torch.randn(6, 6, dtype=torch.float64, requires_grad=True)
    B = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)

    def f(A, B, explicit_inverse):
        K = _spd(A)
        L = torch.linalg.cholesky(K.detach())
        Kinv = torch.cholesky_inverse(L) if explicit_inverse else None
        return cho_solve(K, B, L, Kinv), logdet(K, L, Kinv), quad_diag(K, B, L, Kinv)
    for explicit_inverse in (False, True):
        assert torch.autograd.gradcheck(lambda A, B: f(A, B, explicit_inverse), (A, B))
    K = _spd(A.detach())
    C, _, q = f(A.detach(), B.detach(), False)
    assert torch.allclose(C, torch.linalg.solve(K, B.detach()))
    assert torch.allclose(q, torch.diagonal(B.detach().T @ torch.linalg.solve(K, B.detach())))


def test_log_marginal_matches_textbook_and_autograd():
    model, _, _ = _model()
    post = model.posterior()
    K = post.K
    lp = torch.distributions.MultivariateNormal(torch.zeros_like(post.y), K).log_prob(post.y)
    assert post.log_marginal().item() == pytest.approx(lp.item(), rel=1e-12)
    params = [p for p in model.parameters() if p.requires_grad]
    ga = torch.autograd.grad(post.log_marginal(), params, retain_graph=True, allow_unused=True)
    gb = torch.autograd.grad(lp, params, allow_unused=True)
    for a, b in zip(ga, gb):
        if b is not None:
            assert torch.allclose(a, b, rtol=1e-8, atol=1e-8)


def test_closed_form_field_respects_covariates():
    """Inputs the equation does not differentiate are not jet directions."""
    model, Z, eps = _model()
    post = model.posterior()
    f = PosteriorDraw(post, eps, model.standardizer).field(Z, NAMES, allowed=("x",))
    assert f.d("x").shape == (7,)
    with pytest.raises(ValueError, match="not among its declared inputs"):
        f.d("t")
    assert math.isfinite(float(f.d("x", "x").detach().sum()))


@pytest.mark.parametrize("activation", [nn.Tanh, nn.Sigmoid, nn.SiLU, nn.Identity])
@pytest.mark.parametrize("pairs", [[], [(0, 0), (2, 2)], [(0, 0), (0, 2), (2, 2)]])
def test_taylor_chain_is_one_node_with_autograds_gradients(activation, pairs):
    """The chain's jet as one node (written-out backward) against the layer-by-layer jet
    under autograd: values, and the gradients of the weights and the points for random
    upstream gradients; then torch's gradcheck (finite differences) of the chain itself."""
    from pyro_pidkl.kernels.feature_jets import _taylor
    from pyro_pidkl.kernels.taylor_chain import _TaylorChain, chain_layers, taylor_chain

    torch.manual_seed(0)
    net = MLP(3, 4, width=5, depth=2, activation=activation)
    U = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    directions = [0, 2]
    n1, ia, ib = 2, [directions.index(a) for a, _ in pairs], [directions.index(b) for _, b in pairs]
    eye = torch.eye(3, dtype=torch.float64)
    T0 = torch.cat([eye[directions][:, None, :].expand(2, 6, 3),
                    torch.zeros(len(pairs), 6, 3, dtype=torch.float64)])
    wz, wT = torch.randn(6, 4, dtype=torch.float64), torch.randn(2 + len(pairs), 6, 4,
                                                                  dtype=torch.float64)
    params = [U] + list(net.parameters())
    results = []
    for jet in (lambda: taylor_chain(chain_layers(net), U, T0, n1, ia, ib),
                lambda: _taylor(chain_layers(net), U, T0, n1, ia, ib)):
        z, T = jet()
        results.append((z.detach(), T.detach(),
                        torch.autograd.grad((z * wz).sum() + (T * wT).sum(), params)))
    (z1, T1, g1), (z2, T2, g2) = results
    torch.testing.assert_close(z1, z2, rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(T1, T2, rtol=1e-13, atol=1e-13)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-11)
    kinds = tuple(type(layer) for layer in chain_layers(net))
    weights = [p.detach().clone().requires_grad_(True) for p in net.parameters()]

    def chain(U, *weights):   # W1, b1, W2, b2, ... in the order of the layers
        return _TaylorChain.apply(U, T0, kinds, n1, ia, ib, *weights)
    assert torch.autograd.gradcheck(chain, (U, *weights))


def test_taylor_chain_takes_only_plain_chains():
    from pyro_pidkl.kernels.taylor_chain import chain_layers

    class MyTanh(nn.Tanh):
        def forward(self, x):
            return 2 * torch.tanh(x)
    assert len(chain_layers(MLP(2, 3, width=4, depth=2))) == 5
    assert chain_layers(nn.Sequential(nn.Linear(2, 3), MyTanh())) is None
    assert chain_layers(nn.Sequential(nn.Linear(2, 3), nn.Softplus())) is None
    assert len(chain_layers(nn.Sequential(nn.Sequential(nn.Linear(2, 3), nn.SiLU()),
                                          nn.Linear(3, 1)))) == 3
    # layers without a bias: the stacked (one-node) jet equals the dict (autograd) one
    torch.manual_seed(1)
    net = nn.Sequential(nn.Linear(2, 3, bias=False, dtype=torch.float64), nn.Tanh(),
                        nn.Linear(3, 2, dtype=torch.float64))
    U = torch.randn(4, 2, dtype=torch.float64)
    phi, T, _ = feature_jet(net, U, [0, 1], [(0, 1)], stacked=True)
    phi2, first, second = feature_jet(net, U, [0, 1], [(0, 1)])
    torch.testing.assert_close(phi, phi2)
    torch.testing.assert_close(T, torch.stack([first[0], first[1], second[(0, 1)]]))
