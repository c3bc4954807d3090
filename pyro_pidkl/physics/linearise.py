r"""An equation linearised around a function: :math:`\psi[f] \approx h_0 + \sum_\alpha
J_\alpha\, (\partial^\alpha f - \partial^\alpha f_0)`.

A residual :math:`\psi[f](z)` written point-wise is a function of the derivatives
:math:`\partial^\alpha f(z)` it reads (and of :math:`z`). :func:`linearise` evaluates
``psi`` on a :class:`JetField` whose derivatives are free leaf tensors set to those of
:math:`f_0`, and takes the gradient of the residual with respect to each one:

.. math::
    J_\alpha(z) = \frac{\partial \psi}{\partial (\partial^\alpha f)}\Big|_{f_0(z)},
    \qquad h_0(z) = \psi[f_0](z) .

For a linear operator the expansion is exact whatever :math:`f_0` (Gauss-Newton converges
in one step); for a nonlinear one it is the Gauss-Newton linearisation (Chen, Hosseini,
Owhadi & Stuart 2021). The coefficients keep their graph to the equation's parameters, so
they are learned through :math:`J_\alpha` and :math:`h_0`.
"""

from dataclasses import dataclass

import torch

from .derivatives import Field, Inputs

__all__ = ["JetField", "Linearisation", "linearise"]


class JetField(Field):
    r"""A :class:`~pyro_pidkl.physics.derivatives.Field` whose derivatives are given values
    (a jet), each a leaf tensor that the residual can be differentiated against.

    :param dict jet: ``{index tuple: (m,) tensor}`` (``()`` the value); a derivative that is
        not in it reads as zeros (used to discover which derivatives an equation needs).
    :param torch.Tensor points: ``(m, d)`` points in user units.
    :param tuple names: input names of the ``d`` columns.
    :param allowed: names the equation may differentiate.
    """

    def __init__(self, jet, points, names, allowed=None):
        self._jet, self._points_ref = jet, points
        self.leaves = {}
        super().__init__(self._leaf(()), points, names, allowed)

    def _leaf(self, idx):
        if idx not in self.leaves:
            ref = self._jet.get(idx)
            if ref is None:
                ref = self._points_ref.new_zeros(self._points_ref.shape[0])
            self.leaves[idx] = ref.detach().clone().requires_grad_(True)
        return self.leaves[idx]

    def _derivative(self, idx):
        return self._leaf(idx)


@dataclass
class Linearisation:
    r"""The linear expansion of an equation at points: ``coefficients`` ``{alpha: (m,)}``
    (:math:`J_\alpha`), ``h0`` ``(m,)`` (:math:`\psi[f_0]`), and ``offset`` ``(m,)``
    (:math:`h_0 - \sum_\alpha J_\alpha \partial^\alpha f_0`, so that
    :math:`\psi[f] \approx \text{offset} + \sum_\alpha J_\alpha \partial^\alpha f`);
    ``linear`` tells whether the coefficients do not depend on :math:`f_0`."""

    coefficients: dict
    h0: torch.Tensor
    offset: torch.Tensor
    linear: bool


def linearise(equation, jet, points, names, **values):
    r"""Linearise ``equation`` around the jet ``jet`` (``{alpha: (m,)}`` in user units) at
    ``points`` ``(m, d)`` (user units), with column names ``names``.

    :param equation: a :class:`~pyro_pidkl.physics.Equation`.
    :param values: parameter values overriding the equation's current ones.
    :returns: a :class:`Linearisation`; its index tuples are column indices into ``names``.
    """
    params = equation.parameter_values()
    params.update({k: torch.as_tensor(v, dtype=points.dtype) for k, v in values.items()})
    m = points.shape[0]
    with torch.enable_grad():
        field = JetField(jet or {}, points, names, allowed=equation.inputs)
        h = equation.psi(field, Inputs(points, names), **params)
        if isinstance(h, Field):
            h = h.value
        if not isinstance(h, torch.Tensor):
            raise TypeError(f"Expected psi {equation.name!r} to return a torch tensor of shape "
                            f"({m},); got {type(h).__name__}")
        if h.shape != (m,):
            raise ValueError(f"Expected psi {equation.name!r} to return shape ({m},); got "
                             f"{tuple(h.shape)}")
        leaves = dict(field.leaves)
        used = {idx: leaf for idx, leaf in leaves.items() if idx in field.requested or idx == ()}
        grads = torch.autograd.grad(h.sum(), list(used.values()), create_graph=True,
                                    allow_unused=True) if h.requires_grad else [None] * len(used)
        coefficients, linear = {}, True
        for idx, g in zip(used, grads):
            if g is None:
                continue
            coefficients[idx] = g
            if g.requires_grad:
                second = torch.autograd.grad(g.sum(), list(used.values()), retain_graph=True,
                                             allow_unused=True)
                if any(s is not None and bool((s != 0).any()) for s in second):
                    linear = False
    if not coefficients:
        raise ValueError(f"The residual of equation {equation.name!r} does not depend on f: "
                         "it has nothing to condition on")
    offset = h - sum(c * used[idx].detach() for idx, c in coefficients.items())
    coefficients = {idx: c if c.shape == (m,) else c.expand(m) for idx, c in coefficients.items()}
    return Linearisation(coefficients, h, offset, linear)
