r"""One ordinary differential equation of any order as an explicit first-order system.

An equation in one input :math:`t` that reads :math:`f, f', \dots, f^{(n)}` and enters its
highest derivative linearly,

.. math:: \psi[f](t) = w(t, f, \dots, f^{(n-1)})\, f^{(n)} + h(t, f, \dots, f^{(n-1)}) = g(t),

with a known source :math:`g` (zero, or a function of :math:`t`) and :math:`w \ne 0`, is the
first-order system of the state :math:`x = (f, f', \dots, f^{(n-1)})`

.. math:: x_k' = x_{k+1} \;(k < n - 1), \qquad x_{n-1}' = \frac{g(t) - h(t, x)}{w(t, x)}.

:func:`equation_ode` decides it by evaluating ``psi`` at random states with the top
derivative at 0, 1 and 2 (the second difference must vanish, :math:`w` must not), for the
current coefficients and random ones; forcing (``x["t"]``) and coefficients that change with
:math:`t` or the state are allowed. :class:`EquationODE` evaluates :math:`w` and :math:`h` on
a batch of states and coefficient values: two calls of ``psi`` per right-hand side. It has
the interface of :class:`~pyro_pidkl.physics.ode.ExplicitODE`, so the shooting and the exact
fit (:mod:`~pyro_pidkl.infer.exact_fit`) take a single equation as they take a system.
"""

import torch

from .derivatives import Field, Inputs
from .linearise import JetField, _random_parameters, derivatives_read
from .ode import ExplicitODE

__all__ = ["EquationODE", "equation_ode"]


class EquationODE(ExplicitODE):
    r""":math:`x' = F(t, x)` of one equation of order ``n`` (module docstring); build it with
    :func:`equation_ode`.

    :param equation: a :class:`~pyro_pidkl.physics.Equation`.
    :param tuple names: the input's name, ``(t,)``.
    :param int order: ``n``.
    :param source: ``g(x) -> (m,)`` taking an :class:`~pyro_pidkl.physics.derivatives.Inputs`,
        or ``None`` (zero).
    """

    def __init__(self, equation, names, order, source=None):
        self.equation, self.names, self.order, self.source = equation, tuple(names), order, source
        #: the state's components: the value and its derivatives
        self.outputs = tuple("f" + "'" * k for k in range(order))
        self.law = equation
        # a held coefficient never changes: read once (a module attribute costs a transform)
        self._held = {n: getattr(equation, n).detach() for n, spec in equation.specs.items()
                      if spec.fixed}

    def _psi(self, t, state, top, values):
        points = t[:, None]
        jet = {(0,) * k: state[:, k] for k in range(self.order)}
        jet[(0,) * self.order] = top
        field = JetField(jet, points, self.names, allowed=self.equation.inputs, leaves=False)
        values = values or {}
        params = {n: self._held[n] if n in self._held else getattr(self.equation, n)
                  for n in self.equation.parameter_names if n not in values}
        params.update({k: torch.as_tensor(v, dtype=state.dtype) for k, v in values.items()})
        h = self.equation.psi(field, Inputs(points, self.names), **params)
        return (h.value if isinstance(h, Field) else h).to(state.dtype)

    def rhs(self, t, state, values=None):
        r""":math:`F(t, x)` ``(B, n)`` at times ``t`` ``(B,)`` and states ``state`` ``(B, n)``
        (user units), with coefficient values ``values`` (``{name: (B,)}`` or scalars;
        default the equation's current ones)."""
        t = torch.as_tensor(t).to(state.dtype)
        B = state.shape[0]
        zero = state.new_zeros(B)
        # one call of psi on the batch twice over: the top derivative at 0, then at 1
        twice = {k: (torch.cat([v, v]) if torch.is_tensor(v) and v.dim() else v)
                 for k, v in (values or {}).items()}
        h = self._psi(torch.cat([t, t]), torch.cat([state, state]),
                      torch.cat([zero, zero + 1.0]), twice)
        h0, w = h[:B], h[B:] - h[:B]
        g = zero if self.source is None else torch.as_tensor(
            self.source(Inputs(t[:, None], self.names)), dtype=state.dtype).expand_as(zero)
        return torch.cat([state[:, 1:], ((g - h0) / w)[:, None]], 1)


def equation_ode(equation, names, source=None, seed=0, trials=3, rtol=1e-8):
    r"""The equation as an :class:`EquationODE`, or ``None`` when it is not an explicit ODE:
    more than one input, no derivative, a derivative in another input, or a highest
    derivative that enters nonlinearly or with a coefficient that vanishes.

    :param source: the known source ``g`` (``None``: zero).
    """
    names = tuple(names)
    if len(names) != 1:
        return None
    g = torch.Generator().manual_seed(seed)
    points = torch.rand(7, 1, generator=g, dtype=torch.float64) * 4 - 2
    try:
        read = derivatives_read(equation, points, names)
    except (ValueError, TypeError, RuntimeError):
        return None
    if any(set(i) - {0} for i in read):
        return None
    n = max(len(i) for i in read)
    if n == 0:
        return None
    ode = EquationODE(equation, names, n, source)
    settings = [{}] + [_random_parameters(equation, g, torch.float64) for _ in range(trials)]
    judged = 0
    with torch.no_grad():
        for k, values in enumerate(settings):
            state = (1 + 4 * k) * torch.randn(7, n, generator=g, dtype=torch.float64)
            # signed states, and positive ones (a growth law's power or log of f is only
            # defined there): points where psi is not finite are not judged
            for trial in (state, state.abs() + 0.1):
                t = points[:, 0]
                try:
                    h = [ode._psi(t, trial, trial.new_full((7,), float(a)), values)
                         for a in (0, 1, 2)]
                except (ValueError, TypeError, RuntimeError):
                    return None
                # nor where the terms are so large that a unit change of the derivative is
                # below the relative tolerance (e^f at f = 40: a growth law of a log-mean)
                ok = (torch.isfinite(h[0]) & torch.isfinite(h[1]) & torch.isfinite(h[2])
                      & (h[0].abs() < 1e6))
                if int(ok.sum()) < 3:
                    continue
                judged += 1
                h = [v[ok] for v in h]
                w = h[1] - h[0]
                curve = h[2] - 2 * h[1] + h[0]
                size = h[0].abs() + w.abs() + 1.0
                if bool((w.abs() <= rtol * size).any()) or bool((curve.abs() > 1e-6 * size).any()):
                    return None
    if not judged:
        return None
    return ode
