r"""The deep kernel: an SE kernel on the features :math:`\phi(x)` of a network.

.. math:: k(x, x') = s^2 \exp\!\big(-\|\phi(x) - \phi(x')\|^2 / (2 l^2)\big)
"""

import torch
from pyro.contrib.gp.kernels import RBF, Warping
from torch import nn

from ..checks import positive_int
from .features import MLP

__all__ = ["WithInputs", "closed_form_supported", "deep_kernel", "dkl_kernel", "feature_map",
           "se_on_all_features"]


class WithInputs(nn.Module):
    """``x -> [phi(x), x]``: features concatenated with the inputs."""

    def __init__(self, feature_net):
        super().__init__()
        self.feature_net = feature_net

    def forward(self, x):
        return torch.cat([self.feature_net(x), x], dim=-1)


def deep_kernel(feature_net, feature_dim, variance=1.0, lengthscale=1.0, dtype=torch.float64,
                ard=False):
    """SE kernel on the output of ``feature_net`` (``Warping(RBF, iwarping_fn=feature_net)``).

    :param torch.nn.Module feature_net: ``(N, d) -> (N, feature_dim)``.
    :param int feature_dim: output size of ``feature_net``.
    :param bool ard: one lengthscale per feature (default: one shared lengthscale).
    """
    shape = (feature_dim,) if ard else ()
    base = RBF(feature_dim, variance=torch.tensor(float(variance), dtype=dtype),
               lengthscale=torch.full(shape, float(lengthscale), dtype=dtype))
    return Warping(base, iwarping_fn=feature_net)


def feature_map(kernel):
    r"""The feature map :math:`\phi` of a kernel on features, :math:`k(x, x') =
    k_0(\phi(x), \phi(x'))` (``Warping`` without output warping), else ``None``. Read once
    per step: each access of a ``PyroModule``'s network runs ``pyro.module``."""
    if isinstance(kernel, Warping) and kernel.owarping_coef is None:
        return kernel.iwarping_fn
    return None


def se_on_all_features(kern):
    """Whether the kernel on the features is an SE kernel on all of them."""
    return (isinstance(kern, RBF)
            and list(kern.active_dims) == list(range(kern.input_dim)))


def closed_form_supported(kernel):
    """Whether :class:`DrawField` has closed-form derivatives for ``kernel``: an SE kernel
    on all features of a feature map (``Warping(RBF, iwarping_fn=...)``)."""
    return feature_map(kernel) is not None and se_on_all_features(kernel.kern)


def dkl_kernel(input_dim, feature_net=None, feature_dim=None, skip_inputs=False,
               dtype=torch.float64, seed=None):
    r"""The deep kernel of DKL and PI-DKL on ``input_dim`` standardised inputs.

    :param feature_net: an ``nn.Module`` ``(N, d) -> (N, feature_dim)``; default the paper's
        MLP (4 hidden layers of 20 units, tanh, 20 outputs).
    :param int feature_dim: output size of ``feature_net`` (inferred when ``None``).
    :param bool skip_inputs: SE-ARD kernel on :math:`[\phi(u), u]` (features and the
        standardised inputs) instead of :math:`\phi(u)`: a stationary part whose variance
        returns to the prior away from the data.
    :param int seed: draw the default network's initial weights from this seed (default:
        from torch's global random state, e.g. ``pyro.set_rng_seed`` beforehand).
    """
    if feature_net is None:
        with torch.random.fork_rng(devices=[], enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(positive_int(seed, "seed", minimum=0))
            feature_net = MLP(input_dim, feature_dim or 20, dtype=dtype)
    if not isinstance(feature_net, nn.Module):
        raise TypeError(f"Expected feature_net to be a torch.nn.Module; got "
                        f"{type(feature_net).__name__}")
    if feature_dim is None:
        with torch.no_grad():
            out = feature_net(torch.zeros(1, input_dim, dtype=dtype))
        if out.dim() != 2 or out.shape[0] != 1:
            raise ValueError(f"Expected feature_net to map (N, {input_dim}) to "
                             f"(N, feature_dim); got {tuple(out.shape)} for N = 1")
        feature_dim = out.shape[1]
    feature_dim = int(feature_dim)
    if skip_inputs:
        feature_net, feature_dim = WithInputs(feature_net), feature_dim + input_dim
    # a plain nn.Module inside a PyroModule is registered with pyro.module on access: its
    # weights are the param sites "kernel.iwarping_fn$$$<name>"
    return deep_kernel(feature_net, feature_dim, dtype=dtype, ard=bool(skip_inputs))
