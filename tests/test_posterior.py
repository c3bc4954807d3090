import math

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from pyro_pidkl import NotPositiveDefiniteError
from pyro_pidkl.gp import GPPosterior
from pyro_pidkl.kernels import MLP
from pyro_pidkl.kernels import deep_kernel, se_ard
from pyro_pidkl.gp.posterior import jittered_cholesky


def _data(n=12, d=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, d, generator=g, dtype=torch.float64)
    y = torch.sin(3 * X).sum(-1) + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    return X, y


def _se(A, B, s2, ls):
    d2 = ((A[:, None, :] - B[None, :, :]) / ls) ** 2
    return s2 * np.exp(-0.5 * d2.sum(-1))


def test_posterior_matches_textbook_formulas():
    X, y = _data()
    k = se_ard(2, variance=1.3, lengthscale=0.4)
    noise = torch.tensor(0.05, dtype=torch.float64)
    post = GPPosterior(X, y, k, noise)
    Xs = torch.rand(7, 2, dtype=torch.float64)
    mean, var = post.mean_var(Xs)
    _, cov = post.mean_var(Xs, full_cov=True)

    Xn, yn, Xsn = X.numpy(), y.numpy(), Xs.numpy()
    K = _se(Xn, Xn, 1.3, 0.4) + 0.05 * np.eye(len(Xn))
    Ks = _se(Xsn, Xn, 1.3, 0.4)
    Kss = _se(Xsn, Xsn, 1.3, 0.4)
    mean_ref = Ks @ np.linalg.solve(K, yn)
    cov_ref = Kss - Ks @ np.linalg.solve(K, Ks.T)
    np.testing.assert_allclose(mean.detach().numpy(), mean_ref, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(var.detach().numpy(), np.diag(cov_ref), rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(cov.detach().numpy(), cov_ref, rtol=1e-7, atol=1e-10)
    lml = multivariate_normal(np.zeros(len(yn)), K).logpdf(yn)
    assert post.log_marginal().item() == pytest.approx(lml, rel=1e-10)


@pytest.mark.parametrize("closed_form", [True, False])
def test_constant_mean_posterior_matches_textbook_formulas(closed_form):
    X, y = _data()
    y = y + 3.0
    k = se_ard(2, variance=1.3, lengthscale=0.4)
    noise = torch.tensor(0.05, dtype=torch.float64)
    c = torch.tensor(2.5, dtype=torch.float64, requires_grad=True)
    post = GPPosterior(X, y, k, noise, closed_form_gradients=closed_form, mean=c)
    Xs = torch.rand(7, 2, dtype=torch.float64)
    mean, var = post.mean_var(Xs)

    Xn, yn, Xsn = X.numpy(), y.numpy(), Xs.numpy()
    K = _se(Xn, Xn, 1.3, 0.4) + 0.05 * np.eye(len(Xn))
    Ks = _se(Xsn, Xn, 1.3, 0.4)
    np.testing.assert_allclose(mean.detach().numpy(), 2.5 + Ks @ np.linalg.solve(K, yn - 2.5),
                               rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(var.detach().numpy(),
                               np.diag(_se(Xsn, Xsn, 1.3, 0.4) - Ks @ np.linalg.solve(K, Ks.T)),
                               rtol=1e-7, atol=1e-10)
    lml = post.log_marginal()
    assert lml.item() == pytest.approx(
        multivariate_normal(np.full(len(yn), 2.5), K).logpdf(yn), rel=1e-10)
    # d log p / dc = 1^T K^{-1} (y - c)
    (grad,) = torch.autograd.grad(lml, c)
    assert grad.item() == pytest.approx(np.linalg.solve(K, yn - 2.5).sum(), rel=1e-8)
    # far from the data the mean reverts to c, not to 0
    far, _ = post.mean_var(torch.full((1, 2), 50.0, dtype=torch.float64))
    assert far.item() == pytest.approx(2.5, abs=1e-12)


def test_deep_kernel_is_se_on_features():
    torch.manual_seed(1)
    net = MLP(2, 5, width=8, depth=2)
    k = deep_kernel(net, 5, variance=0.7, lengthscale=1.9)
    X = torch.rand(6, 2, dtype=torch.float64)
    with torch.no_grad():
        F = net(X).numpy()
        np.testing.assert_allclose(k(X).numpy(), _se(F, F, 0.7, 1.9), rtol=1e-10)
        np.testing.assert_allclose(k(X, diag=True).numpy(), np.full(6, 0.7))


def test_draw_with_zero_eps_is_the_mean_and_eps_scales_the_sd():
    X, y = _data()
    post = GPPosterior(X, y, se_ard(2), torch.tensor(0.1, dtype=torch.float64))
    Xs = torch.rand(5, 2, dtype=torch.float64)
    mean, var = post.mean_var(Xs)
    torch.testing.assert_close(post.draw(torch.tensor(0.0))(Xs), mean)
    torch.testing.assert_close(post.draw(torch.tensor(2.0))(Xs), mean + 2 * var.sqrt())


def test_jitter_escalates_then_raises():
    A = torch.tensor([[1.0, 1.0], [1.0, 1.0]], dtype=torch.float64)  # singular, PSD
    L = jittered_cholesky(A)
    assert torch.allclose(L @ L.T, A, atol=1e-6)
    bad = torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=torch.float64)  # eigenvalue -1
    with pytest.raises(NotPositiveDefiniteError, match="not positive definite"):
        jittered_cholesky(bad, max_jitter=1e-2)
    with pytest.raises(ValueError, match="NaN or inf"):
        jittered_cholesky(torch.tensor([[math.nan]], dtype=torch.float64))


@pytest.mark.parametrize("where", ["diagonal", "off-diagonal", "last row"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_nan_or_inf_anywhere_in_a_symmetric_matrix_is_caught(where, bad):
    """The finiteness check reads the factor's diagonal (n numbers), not K (n^2): a
    non-finite entry anywhere in a symmetric K must still be caught, with the NaN message."""
    A = torch.randn(6, 6, dtype=torch.float64)
    K = A @ A.T + 6 * torch.eye(6, dtype=torch.float64)
    i, j = {"diagonal": (2, 2), "off-diagonal": (3, 1), "last row": (5, 0)}[where]
    K[i, j] = K[j, i] = bad
    with pytest.raises(ValueError, match="NaN or inf"):
        jittered_cholesky(K)


def test_se_gram_is_pyros_rbf_plus_noise_with_the_gradients_of_autograd():
    """se_gram against pyro.contrib.gp's RBF + noise I: values, and gradients for a
    non-symmetric upstream gradient against autograd through the RBF; and torch's gradcheck
    (finite differences) of the written-out backward."""
    from pyro_pidkl.kernels import se_gram

    torch.manual_seed(0)
    P = torch.randn(9, 3, dtype=torch.float64, requires_grad=True)
    s2 = torch.tensor(1.3, dtype=torch.float64, requires_grad=True)
    noise = torch.tensor(0.07, dtype=torch.float64, requires_grad=True)
    G = torch.randn(9, 9, dtype=torch.float64)
    rbf = se_ard(3, variance=1.0, lengthscale=1.0)
    out = []
    for gram in (lambda: se_gram(P, s2, noise),
                 lambda: s2 * rbf(P) + noise * torch.eye(9, dtype=torch.float64)):
        K = gram()
        out.append((K.detach(), torch.autograd.grad((K * G).sum(), (P, s2, noise))))
    (K1, g1), (K2, g2) = out
    torch.testing.assert_close(K1, K2, rtol=1e-14, atol=1e-14)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(se_gram, (P, s2, noise))


def test_se_cross_and_batched_se_gram_against_pyros_rbf_and_gradcheck():
    """se_cross (k(P, Q)) and se_gram on a batch of point sets: values against
    pyro.contrib.gp's RBF, gradients against autograd through it, and gradcheck."""
    from pyro_pidkl.kernels import se_cross, se_gram

    torch.manual_seed(1)
    P = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    Q = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    s2 = torch.tensor(0.8, dtype=torch.float64, requires_grad=True)
    G = torch.randn(5, 7, dtype=torch.float64)
    rbf = se_ard(3)
    out = []
    for cross in (lambda: se_cross(P, Q, s2), lambda: s2 * rbf(P, Q)):
        k = cross()
        out.append((k.detach(), torch.autograd.grad((k * G).sum(), (P, Q, s2))))
    torch.testing.assert_close(out[0][0], out[1][0], rtol=1e-14, atol=1e-14)
    for a, b in zip(out[0][1], out[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(se_cross, (P, Q, s2))

    B = torch.randn(3, 4, 2, dtype=torch.float64, requires_grad=True)
    noise = 0.1 * s2
    K = se_gram(B, s2, noise)
    r2 = ((B.unsqueeze(-2) - B.unsqueeze(-3)) ** 2).sum(-1)
    expected = s2 * torch.exp(-0.5 * r2) + noise * torch.eye(4, dtype=B.dtype)
    torch.testing.assert_close(K, expected)
    assert torch.autograd.gradcheck(lambda b, v: se_gram(b, v, 0.1 * v), (B, s2))
