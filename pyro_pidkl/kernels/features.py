r"""Feature extractors for deep kernels.

The paper's feature map :math:`\phi: \mathbb{R}^d \to \mathbb{R}^{20}` is a fully connected
network with 4 hidden layers of 20 units and ``tanh`` activations.  Second-order equations
differentiate the GP twice through :math:`\phi`, so the activation must be twice
differentiable: :func:`smoothness_order` tells how many derivatives a network has.
"""

import math

import torch
from torch import nn

from ..checks import positive_int

__all__ = ["MLP", "smoothness_order"]

# Activations whose second derivative is zero almost everywhere (piecewise linear) or
# undefined: autograd silently returns 0 for f_xx through them.
_PIECEWISE_LINEAR = (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.PReLU, nn.RReLU, nn.Hardtanh,
                     nn.Threshold, nn.Hardshrink, nn.Softshrink)
# Once but not twice continuously differentiable (kink in the second derivative).
_ONCE_DIFFERENTIABLE = (nn.ELU, nn.CELU, nn.SELU, nn.Hardswish, nn.Hardsigmoid)


def smoothness_order(module):
    """How many times ``module`` is continuously differentiable in its input.

    Scans every sub-module: ``0`` if any is piecewise linear (ReLU and relatives, whose
    second derivatives autograd reports as zero), ``1`` if any is only :math:`C^1`
    (ELU, SELU, hard-swish), else ``math.inf`` (tanh, sigmoid, softplus, SiLU, GELU, ...).

    :param torch.nn.Module module: a feature map.
    :rtype: float
    """
    order = math.inf
    for sub in module.modules():
        if isinstance(sub, _PIECEWISE_LINEAR):
            # piecewise linear: first derivatives exist a.e., second ones are 0 a.e.
            order = min(order, 1)
        elif isinstance(sub, _ONCE_DIFFERENTIABLE):
            order = min(order, 1)
    return order


class MLP(nn.Module):
    r"""Fully connected feature map :math:`\phi(x)`.

    .. math:: \phi(x) = W_{L+1}\,a(W_L \cdots a(W_1 x + b_1) \cdots + b_L) + b_{L+1}

    :param int in_size: input dimension ``d``.
    :param int out_size: feature dimension (paper: 20).
    :param int width: hidden units per layer (paper: 20).
    :param int depth: number of hidden layers (paper: 4).
    :param activation: an ``nn.Module`` class or instance factory (default ``nn.Tanh``).
    :param torch.dtype dtype: parameter dtype (default ``torch.float64``).

    Shapes: ``(N, in_size) -> (N, out_size)``.
    """

    def __init__(self, in_size, out_size=20, width=20, depth=4, activation=nn.Tanh,
                 dtype=torch.float64):
        super().__init__()
        self.in_size = positive_int(in_size, "in_size")
        self.out_size = positive_int(out_size, "out_size")
        self.width = positive_int(width, "width")
        self.depth = positive_int(depth, "depth", minimum=0)
        sizes = [self.in_size] + [self.width] * self.depth + [self.out_size]
        layers = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(a, b, dtype=dtype))
            if i < len(sizes) - 2:
                layers.append(activation())
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(x)

    def extra_repr(self):
        return (f"in_size={self.in_size}, out_size={self.out_size}, width={self.width}, "
                f"depth={self.depth}")
