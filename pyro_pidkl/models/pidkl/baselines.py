r"""SKL (an SE-ARD GP) and DKL (a deep-kernel GP): exact GPs with a named kernel. Either
carries a physics term with ``physics=PhysicsTerm(...)`` (PI-SKL, or PI-DKL without the
written-out model of :class:`~pyro_pidkl.models.PIDKL`)."""

import torch

from ...checks import column_count
from ...kernels.deep import dkl_kernel
from .exact_gp import ExactGP

__all__ = ["DKL", "SKL"]


class SKL(ExactGP):
    r"""Standard kernel learning: exact GP with an SE-ARD kernel on the (standardised) inputs.

    .. math:: k(x, x') = s^2 \exp\big(-\tfrac12 \textstyle\sum_j (x_j - x'_j)^2 / l_j^2\big)

    Arguments as :class:`~pyro_pidkl.models.pidkl.base.GPModel` (without ``kernel``).
    """

    def __init__(self, X, y, input_names=None, **kwargs):
        super().__init__(X, y, input_names, kernel=None, **kwargs)


class DKL(ExactGP):
    r"""Deep kernel learning: exact GP with an SE kernel on features :math:`\phi(x)`.

    .. math:: k(x, x') = s^2 \exp\big(-\|\phi(x) - \phi(x')\|^2 / (2 l^2)\big)

    :param feature_net: the feature map; ``feature_dim``, ``skip_inputs``, ``seed`` (the
        network's initial weights): as :func:`~pyro_pidkl.kernels.dkl_kernel`.
    Other arguments as :class:`~pyro_pidkl.models.pidkl.base.GPModel` (without ``kernel``).
    """

    def __init__(self, X, y, input_names=None, feature_net=None, feature_dim=None,
                 skip_inputs=False, seed=None, **kwargs):
        kernel = dkl_kernel(column_count(X), feature_net, feature_dim, skip_inputs,
                            dtype=kwargs.get("dtype", torch.float64), seed=seed)
        super().__init__(X, y, input_names, kernel=kernel, **kwargs)
