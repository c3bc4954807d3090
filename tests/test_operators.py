"""Covariances of linear operators of a GP (kernels/operators.py) against the block-by-block
derivative kernel, with and without gradients, and as a product with a vector."""

import torch

from pyro_pidkl.kernels import se_ard
from pyro_pidkl.kernels.operators import OperatorCovariance, _by_blocks, hermite

D = torch.float64
IDX = [(), (0,), (2,), (0, 0), (0, 1), (1, 1), (1, 2)]


def _case():
    torch.manual_seed(0)
    kernel = se_ard(3, dtype=D, variance=1.3)
    with torch.no_grad():
        kernel.lengthscale = torch.tensor([0.5, 0.8, 1.1], dtype=D)
    UA, UB = torch.randn(7, 3, dtype=D), torch.randn(5, 3, dtype=D)
    wA = {a: torch.randn(7, dtype=D) for a in IDX}
    wA[(0, 0)] = torch.full((7,), -2.0, dtype=D)          # a constant coefficient
    wB = {a: torch.randn(5, dtype=D) for a in IDX[:4]}
    wB[()] = torch.full((5,), 0.5, dtype=D)
    return kernel, UA, UB, wA, wB


def test_hermite_polynomials_satisfy_their_recurrence():
    x = torch.linspace(-3, 3, 13, dtype=D)
    for n in range(1, 6):          # He_{n+1} = x He_n - n He_{n-1}
        assert torch.allclose(hermite(n + 1, x), x * hermite(n, x) - n * hermite(n - 1, x))


def test_operator_covariances_equal_the_derivative_blocks_with_and_without_gradients():
    kernel, UA, UB, wA, wB = _case()
    for symmetric in (False, True):
        B, wb = (UA, wA) if symmetric else (UB, wB)
        reference = _by_blocks(kernel, UA, wA, B, wb).detach()
        with_grad = OperatorCovariance(kernel, UA, B)(wA, wb, symmetric=symmetric)
        with torch.no_grad():
            without = OperatorCovariance(kernel, UA, B)(wA, wb, symmetric=symmetric)
        scale = float(reference.abs().max())
        assert torch.allclose(with_grad.detach(), reference, atol=1e-12 * scale)
        assert torch.allclose(without, reference, atol=1e-12 * scale)


def test_matvec_equals_the_matrix_times_the_vector():
    kernel, UA, UB, wA, wB = _case()
    v = torch.randn(5, dtype=D)
    op = OperatorCovariance(kernel, UA, UB)
    with torch.no_grad():
        assert torch.allclose(op.matvec(wA, wB, v), op(wA, wB) @ v, atol=1e-10)


def test_gradients_equal_autograd_through_the_blocks():
    kernel, UA, UB, wA, wB = _case()
    params = [kernel.lengthscale_unconstrained, kernel.variance_unconstrained,
              wA[(0, 1)].requires_grad_(True)]
    G = torch.randn(7, 5, dtype=D)
    ours = torch.autograd.grad((OperatorCovariance(kernel, UA, UB)(wA, wB) * G).sum(), params)
    ref = torch.autograd.grad((_by_blocks(kernel, UA, wA, UB, wB) * G).sum(), params)
    for a, b in zip(ours, ref):
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-10)
