r"""The Taylor-mode jet of a chain of ``nn.Linear`` and element-wise activations as one
autograd node, its backward written out.

The jet carries the values :math:`z` ``(m, w)`` and derivative streams :math:`T`
``(n_1 + n_2, m, w)``: first derivatives :math:`D_a`, then second derivatives :math:`H_k`
of the pairs :math:`(a_k, b_k)`. A linear layer maps :math:`z \mapsto zW^\top + b`,
:math:`T \mapsto TW^\top`; an activation :math:`\sigma` maps

.. math::
    z \mapsto \sigma(z), \qquad D_a \mapsto \sigma'(z) D_a, \qquad
    H_k \mapsto \sigma''(z) D_{a_k} D_{b_k} + \sigma'(z) H_k .

Through autograd a layer is a dozen small nodes, and at the paper's sizes (``m = 100``
points, 20 units) the step is bound by their count, not by arithmetic. Here the whole chain
is one node, whose backward for upstream gradients :math:`\bar z, \bar D, \bar H` is, per
activation,

.. math::
    \bar z \leftarrow \sigma' \bar z + \sigma'' \textstyle\sum_{s} \bar T_s T_s
        + \sigma''' \sum_k \bar H_k D_{a_k} D_{b_k}, \qquad
    \bar T \leftarrow \sigma' \bar T, \quad
    \bar D_{a_k} \mathrel{+}= \sigma'' \bar H_k D_{b_k}, \quad
    \bar D_{b_k} \mathrel{+}= \sigma'' \bar H_k D_{a_k},

and per linear layer :math:`\bar W = \bar z^\top z + \sum_s \bar T_s^\top T_s`,
:math:`\bar b = 1^\top \bar z`, :math:`\bar z \leftarrow \bar z W`,
:math:`\bar T \leftarrow \bar T W`. Tested against autograd through the layer-by-layer jet
and by finite differences (``tests/test_draw.py``).
"""

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from .features import MLP

__all__ = ["ACTIVATIONS", "activation_jet", "chain_layers", "pair_products", "rows",
           "taylor_chain"]


#: the element-wise activations of a Taylor-mode jet (exact types: a subclass may compute
#: something else)
ACTIVATIONS = (nn.Tanh, nn.Sigmoid, nn.SiLU, nn.Identity)
_LAYERS = (nn.Linear,) + ACTIVATIONS


def chain_layers(net):
    """The layers of ``net`` as a flat list when it is a chain of ``nn.Linear`` and
    ``Tanh``, ``Sigmoid``, ``SiLU`` or ``Identity`` (an ``nn.Sequential``, possibly nested, or
    a :class:`~pyro_pidkl.kernels.features.MLP`), else ``None``."""
    if type(net) is MLP:
        net = net.layers
    if type(net) in _LAYERS:
        return [net]
    if type(net) is nn.Sequential:
        out = []
        for sub in net:
            layers = chain_layers(sub)
            if layers is None:
                return None
            out += layers
        return out
    return None


def activation_jet(kind, z, order=3):
    r""":math:`(\sigma, \sigma', \sigma'')` at ``z`` for an activation type of
    :data:`ACTIVATIONS`, and the third derivative too with ``order=3``."""
    if kind is nn.Tanh:
        t = torch.tanh(z)
        d1 = 1 - t * t
        d2 = -2 * t * d1
        return (t, d1, d2) if order < 3 else (t, d1, d2, -2 * (d1 * d1 + t * d2))
    if kind is nn.Sigmoid:
        t = torch.sigmoid(z)
        d1 = t * (1 - t)
        c = 1 - 2 * t
        d2 = d1 * c
        return (t, d1, d2) if order < 3 else (t, d1, d2, d2 * c - 2 * d1 * d1)
    if kind is nn.SiLU:
        s = torch.sigmoid(z)
        ds = s * (1 - s)
        c = 1 - 2 * s
        e = 2 + z * c
        t, d1, d2 = z * s, s + z * ds, ds * e
        return (t, d1, d2) if order < 3 else (t, d1, d2, ds * c * e + ds * (c - 2 * z * ds))
    one, zero = torch.ones_like(z), torch.zeros_like(z)
    return (z, one, zero) if order < 3 else (z, one, zero, zero)


def _run(index):
    """``index`` (a list of ints) as a slice when it is a run of consecutive rows, else
    ``None``."""
    start = index[0]
    if list(index) == list(range(start, start + len(index))):
        return slice(start, start + len(index))
    return None


def rows(x, index):
    """``x[index]`` along the first dimension for a list of ints: a slice (a view, no copy
    and no index op) when the list is a run of consecutive rows."""
    run = _run(index)
    return x[index] if run is None else x[run]


def pair_products(D, ia, ib):
    """:math:`D_{a_k} D_{b_k}` ``(n2, m, w)``."""
    Da = rows(D, ia)
    return Da.square() if ia == ib else Da * rows(D, ib)


def _add_rows(x, index, values):
    """``x[index] += values`` along the first dimension, repeated indices adding up."""
    run = _run(index)
    if run is None:
        x.index_add_(0, torch.tensor(index, device=x.device), values)
    else:
        x[run] += values


class _TaylorChain(torch.autograd.Function):
    # the streams travel as one tensor S (1 + n1 + n2, m, w): the values z, the first
    # derivatives D, the pairs' second derivatives H; a linear layer is one product for all

    @staticmethod
    def forward(ctx, z, T, kinds, n1, ia, ib, *params):
        S = torch.cat([z.unsqueeze(0), T])
        saved, p = [], 0
        for kind in kinds:
            if kind is nn.Linear:
                W, b = params[p], params[p + 1]
                saved.append(S)
                S = S @ W.T
                if b is not None:
                    S[0] += b
                p += 2
            else:
                t, d1, d2, *d3 = activation_jet(kind, S[0], order=3 if ia else 2)
                DD = pair_products(S[1:1 + n1], ia, ib) if ia else None   # D_a D_b
                saved.append((S, d1, d2, d3, DD))
                out = d1 * S
                out[0] = t
                if ia:
                    out[1 + n1:] += d2 * DD
                S = out
        ctx.kinds, ctx.n1, ctx.ia, ctx.ib, ctx.saved = kinds, n1, ia, ib, saved
        ctx.save_for_backward(*params)   # a layer without a bias saves None
        return S[0], S[1:]

    @staticmethod
    @once_differentiable
    def backward(ctx, gz, gT):
        n1, ia, ib, saved = ctx.n1, ctx.ia, ctx.ib, ctx.saved
        params = ctx.saved_tensors
        grads = [None] * len(params)
        p = len(params)
        gS = torch.cat([gz.unsqueeze(0), gT])
        inputs_need_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        for i, (kind, s) in enumerate(zip(reversed(ctx.kinds), reversed(saved))):
            first = i == len(saved) - 1
            if kind is nn.Linear:
                p -= 2
                S, W = s, params[p]
                grads[p] = gS.reshape(-1, W.shape[0]).T @ S.reshape(-1, W.shape[1])
                if params[p + 1] is not None:
                    grads[p + 1] = gS[0].sum(0)
                if first and not inputs_need_grad:
                    break
                gS = gS @ W
            else:   # the value row: sigma' gz, plus what the streams' factors owe to z
                S, d1, d2, d3, DD = s
                T, gT = S[1:], gS[1:]
                g0 = d2 * (gT * T).sum(0)
                gS = d1 * gS
                if ia:
                    D, gH = T[:n1], gT[n1:]
                    g0 += d3[0] * (gH * DD).sum(0)
                    gD, d2gH = gS[1:1 + n1], d2 * gH
                    if ia == ib:   # both factors of each pair are D_a: 2 sigma'' H_k D_a
                        _add_rows(gD, ia, 2 * d2gH * rows(D, ia))
                    else:
                        _add_rows(gD, ia, d2gH * rows(D, ib))
                        _add_rows(gD, ib, d2gH * rows(D, ia))
                gS[0] += g0
        if not inputs_need_grad:
            return (None, None, None, None, None, None, *grads)
        return (gS[0], gS[1:], None, None, None, None, *grads)


def taylor_chain(layers, z, T, n1, ia, ib):
    r"""Push values ``z`` ``(m, w)`` and derivative streams ``T`` ``(n1 + n2, m, w)``
    (first derivatives, then the pairs ``(ia[k], ib[k])``, indices into the first ``n1``)
    through ``layers`` (:func:`chain_layers`) in Taylor mode, as one autograd node with the
    backward of the module docstring (not differentiable twice).

    :returns: ``(z (m, w_out), T (n1 + n2, m, w_out))``.
    """
    kinds, params = [], []
    for layer in layers:
        kinds.append(type(layer))
        if type(layer) is nn.Linear:
            params += [layer.weight, layer.bias]
    return _TaylorChain.apply(z, T, tuple(kinds), n1, list(ia), list(ib), *params)
