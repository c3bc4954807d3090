r"""Baselines on the same machinery: SKL (SE-ARD GP) and DKL (deep kernel, no physics)."""

import torch
from torch import nn

from ..kernels import deep_kernel, se_ard
from ..nn import MLP
from .exact_gp import ExactGP

__all__ = ["DKL", "SKL"]


class WithInputs(nn.Module):
    """``x -> [phi(x), x]``: features concatenated with the inputs."""

    def __init__(self, feature_net):
        super().__init__()
        self.feature_net = feature_net

    def forward(self, x):
        return torch.cat([self.feature_net(x), x], dim=-1)


class SKL(ExactGP):
    r"""Standard kernel learning: exact GP with an SE-ARD kernel on the (standardised) inputs.

    .. math:: k(x, x') = s^2 \exp\big(-\tfrac12 \textstyle\sum_j (x_j - x'_j)^2 / l_j^2\big)

    Arguments as :class:`~pyro_pidkl.models.exact_gp.ExactGP`.
    """

    def __init__(self, X, y, input_names=None, **kwargs):
        super().__init__(X, y, input_names, **kwargs)
        self.kernel = se_ard(self.input_dim, dtype=self.X.dtype)


class DKL(ExactGP):
    r"""Deep kernel learning: exact GP with an SE kernel on MLP features :math:`\phi(x)`.

    .. math:: k(x, x') = s^2 \exp\big(-\|\phi(x) - \phi(x')\|^2 / (2 l^2)\big)

    :param feature_net: an ``nn.Module`` ``(N, d) -> (N, feature_dim)``; default the paper's
        MLP (4 hidden layers of 20 units, tanh, 20 outputs).
    :param int feature_dim: output size of ``feature_net`` (inferred for :class:`MLP`).
    :param bool skip_inputs: SE-ARD kernel on :math:`[\phi(u), u]` (features and the
        standardised inputs) instead of :math:`\phi(u)`: a stationary part whose variance
        returns to the prior away from the data.
    Other arguments as :class:`~pyro_pidkl.models.exact_gp.ExactGP`.
    """

    def __init__(self, X, y, input_names=None, feature_net=None, feature_dim=None,
                 skip_inputs=False, **kwargs):
        super().__init__(X, y, input_names, **kwargs)
        if feature_net is None:
            feature_net = MLP(self.input_dim, feature_dim or 20, dtype=self.X.dtype)
        if not isinstance(feature_net, nn.Module):
            raise TypeError(f"Expected feature_net to be a torch.nn.Module; got "
                            f"{type(feature_net).__name__}")
        if feature_dim is None:
            with torch.no_grad():
                out = feature_net(self.X_s[:1])
            if out.dim() != 2 or out.shape[0] != 1:
                raise ValueError(f"Expected feature_net to map (N, {self.input_dim}) to "
                                 f"(N, feature_dim); got {tuple(out.shape)} for N = 1")
            feature_dim = out.shape[1]
        self.feature_net = feature_net
        self.feature_dim = int(feature_dim)
        self.skip_inputs = bool(skip_inputs)
        if skip_inputs:
            feature_net = WithInputs(feature_net)
            feature_dim = self.feature_dim + self.input_dim
        # a plain nn.Module inside a PyroModule is registered with pyro.module on access:
        # its weights are the param sites "kernel.iwarping_fn$$$<name>"
        self.kernel = deep_kernel(feature_net, int(feature_dim), dtype=self.X.dtype,
                                  ard=skip_inputs)
