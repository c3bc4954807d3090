r"""Kernels, built from :mod:`pyro.contrib.gp.kernels`.

Deep kernel (the GP of :math:`f`) on features :math:`\phi(x)` of an MLP:

.. math:: k(x, x') = s^2 \exp\!\big(-\|\phi(x) - \phi(x')\|^2 / (2 l^2)\big)

Source kernel (the GP prior of :math:`g`), SE-ARD on selected inputs:

.. math:: \kappa(z, z') = s_g^2 \exp\!\big(-\tfrac12 \textstyle\sum_j (z_j - z'_j)^2 / l_j^2\big)
"""

import torch
from pyro.contrib.gp.kernels import RBF

__all__ = ["se_ard", "se_cross", "se_gram"]


def se_ard(input_dim, active_dims=None, variance=1.0, lengthscale=1.0, dtype=torch.float64):
    """SE kernel with one lengthscale per active input (ARD).

    :param int input_dim: number of columns of the inputs it receives.
    :param active_dims: the columns it uses (default: all).
    """
    active = list(range(input_dim)) if active_dims is None else list(active_dims)
    bad = [j for j in active if not 0 <= j < input_dim]
    if bad:
        raise ValueError(f"Expected active_dims within 0..{input_dim - 1}; got {active}")
    return RBF(len(active), variance=torch.tensor(float(variance), dtype=dtype),
               lengthscale=torch.full((len(active),), float(lengthscale), dtype=dtype),
               active_dims=active)


def _se_factor(P, Q):
    r""":math:`E = \exp(-\tfrac12 \|p_i - q_j\|^2)` ``(..., N, M)`` by the formula of
    ``pyro.contrib.gp``'s RBF, :math:`|p_i|^2 - 2 p_i \cdot q_j + |q_j|^2` clamped at 0, in
    place (no autograd: the callers' backwards are written out)."""
    sp = (P * P).sum(-1, keepdim=True)
    sq = sp if Q is P else (Q * Q).sum(-1, keepdim=True)
    return (P @ Q.mT).mul_(-2).add_(sp).add_(sq.mT).clamp_(min=0).mul_(-0.5).exp_()


class _SEGram(torch.autograd.Function):
    @staticmethod
    def forward(ctx, P, variance, noise):
        E = _se_factor(P, P)
        ctx.save_for_backward(P, variance, E)
        K = variance * E
        K.diagonal(dim1=-2, dim2=-1).add_(noise)
        return K

    @staticmethod
    def backward(ctx, grad_K):
        P, variance, E = ctx.saved_tensors
        SE = (grad_K + grad_K.mT).mul_(E)                  # (G + G^T) o E
        rowsum = SE.sum(-1, keepdim=True)
        grad_P = (SE @ P - rowsum * P) * variance if ctx.needs_input_grad[0] else None
        grad_var = 0.5 * rowsum.sum() if ctx.needs_input_grad[1] else None
        grad_noise = (grad_K.diagonal(dim1=-2, dim2=-1).sum()
                      if ctx.needs_input_grad[2] else None)
        return grad_P, grad_var, grad_noise


class _SECross(torch.autograd.Function):
    @staticmethod
    def forward(ctx, P, Q, variance):
        E = _se_factor(P, Q)
        ctx.save_for_backward(P, Q, variance, E)
        return variance * E

    @staticmethod
    def backward(ctx, grad_K):
        P, Q, variance, E = ctx.saved_tensors
        GE = grad_K * E
        W = GE * variance                                   # G o K
        grad_P = (W @ Q - W.sum(-1, keepdim=True) * P) if ctx.needs_input_grad[0] else None
        grad_Q = (W.mT @ P - W.sum(-2).unsqueeze(-1) * Q) if ctx.needs_input_grad[1] else None
        grad_var = GE.sum() if ctx.needs_input_grad[2] else None
        return grad_P, grad_Q, grad_var


def se_gram(P, variance, noise):
    r"""The SE Gram matrix plus noise, :math:`K = s^2 \exp(-\tfrac12 \|p_i - p_j\|^2) +
    \sigma^2 I` ``(..., N, N)`` for scaled points :math:`P` ``(..., N, F)`` (inputs or
    features over their lengthscales), with the backward written out: for an upstream
    gradient :math:`G`, :math:`W = (G + G^\top) \circ E`, :math:`E = \exp(-\tfrac12 r^2)`,

    .. math::
        \bar P = s^2\,(W P - \mathrm{diag}(W 1) P), \qquad
        \bar{s^2} = \tfrac12\, 1^\top W 1, \qquad \bar{\sigma^2} = \mathrm{tr}\, G,

    three ``N x N`` passes and one product where autograd through the formula makes about
    ten. The same values as ``pyro.contrib.gp.kernels.RBF`` (its formula, in place).

    :param torch.Tensor P: ``(..., N, F)``.
    :param torch.Tensor variance: :math:`s^2` (scalar tensor).
    :param torch.Tensor noise: :math:`\sigma^2` (scalar tensor).
    """
    return _SEGram.apply(P, variance, noise)


def se_cross(P, Q, variance):
    r"""The SE cross-covariance :math:`k_{ij} = s^2 \exp(-\tfrac12 \|p_i - q_j\|^2)`
    ``(..., N, M)`` of scaled points :math:`P` ``(..., N, F)`` and :math:`Q` ``(..., M, F)``,
    with the backward written out: for an upstream gradient :math:`G` and
    :math:`W = G \circ k`,

    .. math::
        \bar P = W Q - \mathrm{diag}(W 1) P, \qquad
        \bar Q = W^\top P - \mathrm{diag}(W^\top 1) Q, \qquad
        \bar{s^2} = 1^\top (G \circ E) 1 .
    """
    return _SECross.apply(P, Q, variance)
