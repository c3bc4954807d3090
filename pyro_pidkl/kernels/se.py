r"""Kernels, built from :mod:`pyro.contrib.gp.kernels`.

Deep kernel (the GP of :math:`f`) on features :math:`\phi(x)` of an MLP:

.. math:: k(x, x') = s^2 \exp\!\big(-\|\phi(x) - \phi(x')\|^2 / (2 l^2)\big)

Source kernel (the GP prior of :math:`g`), SE-ARD on selected inputs:

.. math:: \kappa(z, z') = s_g^2 \exp\!\big(-\tfrac12 \textstyle\sum_j (z_j - z'_j)^2 / l_j^2\big)
"""

import torch
from pyro.contrib.gp.kernels import RBF

__all__ = ["batched", "se_ard"]


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


def batched(kernel, Z):
    """Apply a :mod:`pyro.contrib.gp` kernel over leading batch dims.

    :param torch.Tensor Z: ``(..., m, d)`` points.
    :returns: ``(..., m, m)`` kernel matrices.
    """
    if Z.dim() == 2:
        return kernel(Z)
    flat = Z.reshape(-1, *Z.shape[-2:])
    K = torch.stack([kernel(z) for z in flat])
    return K.reshape(*Z.shape[:-1], Z.shape[-2])
