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

Whether ``psi`` is linear is a property of ``psi`` over all functions, not at one:
:func:`is_linear` linearises it at several independent random jets (and random values of
its learned parameters) and calls it linear only when every expansion is the same. A test
at the zero function alone misses every term whose second derivative vanishes there
(:math:`\sin f`, :math:`f^3`, :math:`\tanh f`, :math:`f|f|`, :math:`(1 - f^2) f_t`).
"""

import math
from dataclasses import dataclass

import torch

from .derivatives import Field, Inputs

__all__ = ["JetField", "Linearisation", "derivatives_read", "is_linear", "linearise",
           "relative", "relative_residual", "residual_parts", "unused_coefficients"]


class JetField(Field):
    r"""A :class:`~pyro_pidkl.physics.derivatives.Field` whose derivatives are given values
    (a jet), each a leaf tensor that the residual can be differentiated against.

    :param dict jet: ``{index tuple: (m,) tensor}`` (``()`` the value); a derivative that is
        not in it reads as zeros (used to discover which derivatives an equation needs).
    :param torch.Tensor points: ``(m, d)`` points in user units.
    :param tuple names: input names of the ``d`` columns.
    :param allowed: names the equation may differentiate.
    :param bool leaves: each derivative a fresh leaf tensor (default: what
        :func:`linearise` differentiates against); ``False``: the given tensors themselves,
        so that a residual keeps its graph to whatever the jet was computed from.
    """

    def __init__(self, jet, points, names, allowed=None, leaves=True):
        self._jet, self._points_ref, self._fresh = jet, points, leaves
        self.leaves = {}
        super().__init__(self._leaf(()), points, names, allowed)

    def _leaf(self, idx):
        if idx not in self.leaves:
            ref = self._jet.get(idx)
            if ref is None:
                ref = self._points_ref.new_zeros(self._points_ref.shape[0])
            self.leaves[idx] = ref.detach().clone().requires_grad_(True) if self._fresh else ref
        return self.leaves[idx]

    def _derivative(self, idx):
        return self._leaf(idx)


@dataclass
class Linearisation:
    r"""The linear expansion of an equation at points: ``coefficients`` ``{alpha: (m,)}``
    (:math:`J_\alpha`), ``h0`` ``(m,)`` (:math:`\psi[f_0]`), and ``offset`` ``(m,)``
    (:math:`h_0 - \sum_\alpha J_\alpha \partial^\alpha f_0`, so that
    :math:`\psi[f] \approx \text{offset} + \sum_\alpha J_\alpha \partial^\alpha f`);
    ``linear`` tells whether the coefficients and the offset are the same at independent
    random jets (:func:`is_linear`; ``None`` unless asked for)."""

    coefficients: dict
    h0: torch.Tensor
    offset: torch.Tensor
    linear: bool


def linearise(equation, jet, points, names, check_linear=False, **values):
    r"""Linearise ``equation`` around the jet ``jet`` (``{alpha: (m,)}`` in user units) at
    ``points`` ``(m, d)`` (user units), with column names ``names``.

    :param equation: a :class:`~pyro_pidkl.physics.Equation`.
    :param bool check_linear: also decide whether ``psi`` is linear (:func:`is_linear`, at
        these points); otherwise ``linear`` is ``None``.
    :param values: parameter values overriding the equation's current ones.
    :returns: a :class:`Linearisation`; its index tuples are column indices into ``names``.
    """
    coefficients, h, offset, _ = _expand(equation, jet, points, names, values)
    linear = is_linear(equation, points, names) if check_linear else None
    return Linearisation(coefficients, h, offset, linear)


def derivatives_read(equation, points, names):
    """The derivative indices ``psi`` reads at ``points`` (probed at the zero jet), the
    value ``()`` first, then by order: a list of index tuples (columns of ``names``)."""
    _, _, _, requested = _expand(equation, {}, points.detach(), names, {})
    return sorted(requested | {()}, key=lambda i: (len(i), i))


def _expand(equation, jet, points, names, values):
    """``(coefficients, h0, offset, requested)`` of the expansion at ``jet``."""
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
        used = {idx: leaf for idx, leaf in field.leaves.items()
                if idx in field.requested or idx == ()}
        grads = (torch.autograd.grad(h.sum(), list(used.values()), create_graph=True,
                                     allow_unused=True)
                 if h.requires_grad else [None] * len(used))
        coefficients = {idx: g for idx, g in zip(used, grads) if g is not None}
    if not coefficients:
        raise ValueError(f"The residual of equation {equation.name!r} does not depend on f: "
                         "it has nothing to condition on")
    offset = h - sum(c * used[idx].detach() for idx, c in coefficients.items())
    coefficients = {idx: c if c.shape == (m,) else c.expand(m) for idx, c in coefficients.items()}
    return coefficients, h, offset, set(field.requested)


def _random_parameters(equation, generator, dtype):
    """Values of the equation's learned parameters drawn around their current ones (in the
    unconstrained space, a standard deviation of one), so that a coefficient that is zero
    now cannot hide a nonlinear term."""
    out = {}
    for name, spec in equation.specs.items():
        if spec.fixed:
            continue
        value = torch.as_tensor(getattr(equation, name), dtype=dtype).detach()
        t = torch.distributions.transform_to(spec.constraint)
        u = t.inv(value)
        u = torch.where(torch.isfinite(u), u, torch.zeros_like(u))
        out[name] = t(u + torch.randn(u.shape, generator=generator, dtype=dtype))
    return out


def is_linear(equation, points, names, trials=3, seed=0, rtol=1e-8):
    r"""Whether the residual :math:`\psi[f]` is affine in :math:`f` and its derivatives:
    :math:`\psi[f] = b + \sum_\alpha J_\alpha\, \partial^\alpha f` with :math:`b` and
    :math:`J_\alpha` independent of :math:`f`.

    ``psi`` is linearised at ``trials`` independent random jets (standard normal values,
    and ten times larger, at each point) for the equation's current parameters and for
    ``trials`` random draws of its learned parameters; it is linear when every expansion has
    the same coefficients and offset (to ``rtol``). Decided once per equation and point set,
    never from the zero function alone.

    :param points: ``(m, d)`` points in user units (a few suffice; more catch terms that
        switch on only in part of the domain).
    :returns: bool.
    """
    points = points.detach()
    g = torch.Generator().manual_seed(seed)
    dtype, m = points.dtype, points.shape[0]
    # the derivatives psi reads (probed at the zero jet and at a random one)
    _, _, _, requested = _expand(equation, {}, points, names, {})
    indices = sorted(requested | {()}, key=lambda i: (len(i), i))
    settings = [{}] + [_random_parameters(equation, g, dtype) for _ in range(trials)]
    for values in settings:
        ref = None
        for k in range(trials + 1):
            scale = 10.0 if k % 2 else 1.0
            jet = {i: scale * torch.randn(m, generator=g, dtype=dtype) for i in indices}
            coefficients, _, offset, more = _expand(equation, jet, points, names, values)
            if more - requested:               # psi reads other derivatives at other f
                return False
            got = {i: c.detach() for i, c in coefficients.items()}
            got["offset"] = offset.detach()
            if ref is None:
                ref = got
            elif not expansions_agree(ref, got, rtol, loose={"offset"}):
                return False
    return True


def expansions_agree(ref, got, rtol, loose=()):
    """Whether two expansions ``{key: (m,) tensor}`` (coefficients and offsets, each
    detached) are the same: finite, and equal to ``rtol`` of their size (at least 1), to
    ``100 rtol`` on the keys in ``loose`` (offsets, which carry the rounding of the whole
    residual). A key that one of them lacks reads as zeros."""
    for key in set(ref) | set(got):
        like = ref[key] if key in ref else got[key]
        a = ref.get(key, torch.zeros_like(like))
        b = got.get(key, torch.zeros_like(like))
        if not bool(torch.isfinite(a).all() and torch.isfinite(b).all()):
            return False
        size = max(float(a.abs().max()), float(b.abs().max()), 1.0)
        tol = rtol * size * (100.0 if key in loose else 1.0)
        if float((a - b).abs().max()) > tol:
            return False
    return True


def residual_parts(equation, jet, points, names, source=None):
    r"""The residual :math:`\psi[f](z_i) - g(z_i)` of a function with jet ``jet``
    (``{alpha: (m,)}``) at ``points`` and the size of the equation's terms there,
    :math:`\big(\sum_\alpha (J_\alpha \partial^\alpha f)(z_i)^2 + g(z_i)^2\big)^{1/2}`
    (the equation linearised at the jet; ``source`` :math:`g` ``(m,)``, default 0):
    ``(residual (m,), size (m,))``, detached."""
    lin = linearise(equation, jet, points, names)
    h0 = lin.h0.detach()
    g = torch.zeros_like(h0) if source is None else torch.as_tensor(source).to(h0)
    size2 = g.pow(2)
    for idx, J in lin.coefficients.items():
        if idx in jet:
            size2 = size2 + (torch.as_tensor(J).detach() * jet[idx]).to(h0).expand_as(h0).pow(2)
    return h0 - g, size2.sqrt()


def relative(residual, size):
    """``rms(residual) / rms(size)`` (0 for 0 / 0, ``inf`` for r / 0): a float."""
    num, den = residual.pow(2).mean().sqrt(), size.pow(2).mean().sqrt()
    if float(den) == 0.0:
        return 0.0 if float(num) == 0.0 else math.inf
    return float(num / den)


def relative_residual(equation, jet, points, names, source=None):
    r"""How far a function misses an equation, relative to the size of the equation's
    terms: with the equation linearised at the function's jet ``jet`` (``{alpha: (m,)}``)
    at ``points``,

    .. math::
        r = \frac{\operatorname{rms}_i\big(\psi[f](z_i) - g(z_i)\big)}
                 {\operatorname{rms}_i\Big(\big(\textstyle\sum_\alpha
                  (J_\alpha \partial^\alpha f)(z_i)^2 + g(z_i)^2\big)^{1/2}\Big)},

    ``source`` :math:`g` ``(m,)`` (default 0). ``0`` for a solution; ``1`` or more when the
    residual is as large as the terms. A float."""
    return relative(*residual_parts(equation, jet, points, names, source))


def unused_coefficients(residual, coefficients, trials=2, seed=0):
    """The names of ``coefficients`` (``[(name, unconstrained tensor), ...]``) that the
    residual never depends on: ``residual(generator)`` (a tensor computed at random jets
    drawn from ``generator``) gets no gradient with respect to them at any of ``trials``
    draws. Such a coefficient cannot be learned: it stays where it starts."""
    g = torch.Generator().manual_seed(seed)
    used = set()
    for _ in range(trials):
        with torch.enable_grad():
            value = residual(g).pow(2).sum()
            grads = torch.autograd.grad(value, [t for _, t in coefficients],
                                        allow_unused=True)
        used |= {n for (n, _), gr in zip(coefficients, grads)
                 if gr is not None and bool((gr != 0).any())}
    return [n for n, _ in coefficients if n not in used]
