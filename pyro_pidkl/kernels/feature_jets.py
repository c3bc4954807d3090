r"""Taylor-mode jets of a feature map: :math:`\phi(U)`, :math:`\partial_a \phi(U)` and
:math:`\partial_a \partial_b \phi(U)` at ``m`` points in one pass, for the closed-form
derivatives of deep-kernel posteriors (:mod:`pyro_pidkl.physics.posterior_draw`) and of
deep-kernel covariances (:mod:`pyro_pidkl.kernels.derivatives`).
"""

import torch
from torch import nn

from .deep import WithInputs
from .taylor_chain import activation_jet, chain_layers, pair_products, taylor_chain

__all__ = ["feature_jet"]


def _taylor(layers, z, T, n1, ia, ib):
    """Propagate values ``z`` ``(m, w)`` and the derivative streams ``T`` ``(n1 + n2, m, w)``
    (first derivatives, then the second derivatives of the pairs ``d_{ia[k]} d_{ib[k]}``,
    indices into the first ``n1``) through ``layers`` (:func:`chain_layers`) in Taylor mode
    under autograd (differentiable twice), a layer one matrix product for every stream."""
    for layer in layers:
        if type(layer) is nn.Linear:
            z, T = layer(z), T @ layer.weight.T
            continue
        z, d1, d2 = activation_jet(type(layer), z, order=2)
        out = d1 * T
        if ia:   # the chain rule's second term of each pair: sigma'' D_a D_b
            out[n1:] += d2 * pair_products(T[:n1], ia, ib)
        T = out
    return z, T


def _jvp(outputs, inputs, v):
    """Forward-mode product ``d outputs / d inputs . v`` by two reverse passes (with a
    graph); ``outputs`` point-wise in the rows of ``inputs``."""
    w = torch.zeros_like(outputs, requires_grad=True)
    (g,) = torch.autograd.grad(outputs, inputs, w, create_graph=True)
    (jv,) = torch.autograd.grad((g * v).sum(), w, create_graph=True)
    return jv


def feature_jet(net, U, directions, pairs=(), stacked=False):
    r"""The feature map and its derivatives at points ``U`` ``(m, d)``:
    ``(phi (m, F), {a: d_a phi for a in directions}, {(a, b): d_a d_b phi for (a, b) in
    pairs})``; with ``stacked``, ``(phi, T, directions)``: the derivatives as one tensor
    ``T`` ``(n1 + n2, m, F)``, the first derivatives along the sorted ``directions`` (those
    given and those of the pairs), then the pairs in the order given, computed for a chain
    of layers as one autograd node (:func:`~pyro_pidkl.kernels.taylor_chain.taylor_chain`,
    not differentiable twice).

    Taylor-mode propagation for :class:`~pyro_pidkl.kernels.features.MLP` / ``nn.Sequential`` of
    ``nn.Linear`` and ``Tanh``, ``Sigmoid``, ``SiLU``, ``Identity`` (and the ``[phi(u), u]``
    wrapper); any other network by forward-mode products from reverse passes.
    """
    eye = torch.eye(U.shape[-1], dtype=U.dtype, device=U.device)
    directions = sorted(set(directions) | {a for p in pairs for a in p})
    pairs = list(pairs)
    n1 = len(directions)
    T = torch.cat([eye[directions][:, None, :].expand(n1, *U.shape),
                   U.new_zeros((len(pairs),) + U.shape)])
    ia = [directions.index(a) for a, _ in pairs]
    ib = [directions.index(b) for _, b in pairs]
    inner = net.feature_net if isinstance(net, WithInputs) else net
    layers = chain_layers(inner)
    if layers is not None:   # stacked: the chain as one autograd node; else layer by layer
        phi, T_out = (taylor_chain if stacked else _taylor)(layers, U, T, n1, ia, ib)
        if inner is not net:
            phi, T_out = torch.cat([phi, U], -1), torch.cat([T_out, T], -1)
        if stacked:
            return phi, T_out, directions
        return (phi, dict(zip(directions, T_out[:n1].unbind(0))),
                dict(zip(pairs, T_out[n1:].unbind(0))))
    dz = {a: eye[a].expand_as(U) for a in directions}
    with torch.enable_grad():
        Uq = U if U.requires_grad else U.detach().requires_grad_(True)
        phi = net(Uq)
        first = {a: _jvp(phi, Uq, dz[a]) for a in directions}
        second = {(a, b): _jvp(first[a], Uq, dz[b]) for (a, b) in pairs}
    if stacked:
        return phi, torch.stack([first[a] for a in directions]
                                + [second[p] for p in pairs]), directions
    return phi, first, second
