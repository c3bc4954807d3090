"""Reference values by autograd, shared by the kernel tests."""

import torch


def pair_derivative(kernel, a, b, alpha, beta):
    """d^alpha_a d^beta_b k(a, b) by nested autograd, one pair (``kernel`` maps ``(1, d)``,
    ``(1, d)`` to ``(1, 1)``)."""
    a = a.clone().requires_grad_(True)
    b = b.clone().requires_grad_(True)
    val = kernel(a[None], b[None])[0, 0]
    for c in alpha:
        val = torch.autograd.grad(val, a, create_graph=True)[0][c]
    for c in beta:
        val = torch.autograd.grad(val, b, create_graph=True)[0][c]
    return val.detach()
