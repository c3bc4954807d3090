r"""Taylor-mode jets of a feature map: :math:`\phi(U)`, :math:`\partial_a \phi(U)` and
:math:`\partial_a \partial_b \phi(U)` at ``m`` points in one pass, for the closed-form
derivatives of deep-kernel posteriors (:mod:`pyro_pidkl.gp.posterior_draw`) and of
deep-kernel covariances (:mod:`pyro_pidkl.kernels.derivatives`).
"""

import torch
from torch import nn

from .deep import WithInputs
from .features import MLP

__all__ = ["feature_jet"]


def _activation_derivatives(module, z, t):
    """``(sigma'(z), sigma''(z))`` of a supported element-wise activation with output
    ``t = sigma(z)``, else ``None``."""
    if isinstance(module, nn.Tanh):
        d1 = 1 - t * t
        return d1, -2 * t * d1
    if isinstance(module, nn.Sigmoid):
        d1 = t * (1 - t)
        return d1, d1 * (1 - 2 * t)
    if isinstance(module, nn.SiLU):
        s = torch.sigmoid(z)
        ds = s * (1 - s)
        return s + z * ds, ds * (2 + z * (1 - 2 * s))
    if isinstance(module, nn.Identity):
        return torch.ones_like(z), torch.zeros_like(z)
    return None


def _taylor(net, z, D, H, ia, ib):
    """Propagate values ``z`` ``(m, w)``, first derivatives ``D`` ``(n1, m, w)`` and second
    derivatives ``H`` ``(n2, m, w)`` (pair ``k`` is ``d_{ia[k]} d_{ib[k]}``, indices into
    ``D``) through ``net`` in Taylor mode, the streams stacked so that a layer is one matrix
    product; ``None`` when a sub-module is not supported."""
    if isinstance(net, MLP):
        return _taylor(net.layers, z, D, H, ia, ib)
    if isinstance(net, nn.Sequential):
        for sub in net:
            out = _taylor(sub, z, D, H, ia, ib)
            if out is None:
                return None
            z, D, H = out
        return z, D, H
    if isinstance(net, nn.Linear):
        DH = torch.cat([D, H]) @ net.weight.T
        return net(z), DH[:D.shape[0]], DH[D.shape[0]:]
    if isinstance(net, WithInputs):
        out = _taylor(net.feature_net, z, D, H, ia, ib)
        if out is None:
            return None
        return (torch.cat([out[0], z], -1), torch.cat([out[1], D], -1),
                torch.cat([out[2], H], -1))
    t = net(z)
    derivs = _activation_derivatives(net, z, t)
    if derivs is None:
        return None
    d1, d2 = derivs
    return t, d1 * D, d2 * D[ia] * D[ib] + d1 * H


def _jvp(outputs, inputs, v):
    """Forward-mode product ``d outputs / d inputs . v`` by two reverse passes (with a
    graph); ``outputs`` point-wise in the rows of ``inputs``."""
    w = torch.zeros_like(outputs, requires_grad=True)
    (g,) = torch.autograd.grad(outputs, inputs, w, create_graph=True)
    (jv,) = torch.autograd.grad((g * v).sum(), w, create_graph=True)
    return jv


def feature_jet(net, U, directions, pairs=()):
    r"""The feature map and its derivatives at points ``U`` ``(m, d)``:
    ``(phi (m, F), {a: d_a phi for a in directions}, {(a, b): d_a d_b phi for (a, b) in
    pairs})``.

    Taylor-mode propagation for :class:`~pyro_pidkl.kernels.features.MLP` / ``nn.Sequential`` of
    ``nn.Linear`` and ``Tanh``, ``Sigmoid``, ``SiLU``, ``Identity`` (and the ``[phi(u), u]``
    wrapper); any other network by forward-mode products from reverse passes.
    """
    eye = torch.eye(U.shape[-1], dtype=U.dtype, device=U.device)
    directions = sorted(set(directions) | {a for p in pairs for a in p})
    pairs = list(pairs)
    D = eye[directions][:, None, :].expand(len(directions), *U.shape)
    H = U.new_zeros((len(pairs),) + U.shape)
    ia = [directions.index(a) for a, _ in pairs]
    ib = [directions.index(b) for _, b in pairs]
    out = _taylor(net, U, D, H, ia, ib)
    if out is not None:
        phi, D, H = out
        return phi, dict(zip(directions, D.unbind(0))), dict(zip(pairs, H.unbind(0)))
    dz = {a: eye[a].expand_as(U) for a in directions}
    with torch.enable_grad():
        Uq = U if U.requires_grad else U.detach().requires_grad_(True)
        phi = net(Uq)
        first = {a: _jvp(phi, Uq, dz[a]) for a in directions}
        second = {(a, b): _jvp(first[a], Uq, dz[b]) for (a, b) in pairs}
    return phi, first, second
