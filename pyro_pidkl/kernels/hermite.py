r"""The probabilists' Hermite polynomials :math:`He_n`: every derivative of the SE kernel is
the kernel times a product of them, :math:`\partial^n_x e^{-x^2/2} = (-1)^n He_n(x)\,
e^{-x^2/2}` (used by :mod:`~pyro_pidkl.kernels.derivatives` and
:mod:`~pyro_pidkl.kernels.operators`)."""

import torch

__all__ = ["hermite"]


def hermite(n, x):
    r"""The probabilists' Hermite polynomial :math:`He_n(x)` (in place on a fresh product
    when gradients are not recorded for :math:`n \le 6`; by the recurrence
    :math:`He_{n+1} = x He_n - n He_{n-1}` above: the covariances of derivatives of order
    up to four on each side need :math:`n \le 8`)."""
    if n == 0:
        return torch.ones_like(x)
    if n == 1:
        return x
    x2 = x * x
    grad = torch.is_grad_enabled()
    if n == 2:
        return x2 - 1 if grad else x2.sub_(1)
    if n == 3:
        return x * (x2 - 3) if grad else x2.sub_(3).mul_(x)
    if n == 4:
        return (x2 - 6) * x2 + 3 if grad else (x2 - 6).mul_(x2).add_(3)
    if n == 5:
        return x * ((x2 - 10) * x2 + 15) if grad else (x2 - 10).mul_(x2).add_(15).mul_(x)
    if n == 6:
        return (((x2 - 15) * x2 + 45) * x2 - 15 if grad
                else (x2 - 15).mul_(x2).add_(45).mul_(x2).sub_(15))
    if n < 0 or int(n) != n:
        raise ValueError(f"Expected a Hermite order that is an integer >= 0; got {n}")
    prev, cur = hermite(5, x), hermite(6, x)
    for k in range(6, int(n)):
        prev, cur = cur, x * cur - k * prev
    return cur
