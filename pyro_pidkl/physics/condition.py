r"""Conditions on parts of the domain: boundary and initial conditions as their own
residuals on their own points.

A :class:`Condition` says :math:`\mathcal{B}[f](x) = h(x)` at points :math:`x` of its own,
with :math:`\mathcal{B}` any operator written as an equation is (``f``, ``f.d("x")``,
``f.d("x") + 2 * f``, ...): Dirichlet (``lambda f, x: f``), Neumann (a normal derivative),
Robin (a combination), an initial rate (``f.d("t")`` at ``t = 0``). A periodic condition
:math:`\mathcal{B}[f](a_i) = \mathcal{B}[f](b_i)` pairs two point sets
(:meth:`Condition.periodic`): its virtual observations are the differences.

:class:`~pyro_pidkl.models.PhysicsConditionedGP` conditions on each condition's values as
virtual observations, like the equation's, with a residual variance relative to the
operator's prior variance (``residual_noise``, default the model's).
"""

import torch

from .equation import Equation

__all__ = ["Condition"]


class Condition:
    r""":math:`\mathcal{B}[f](x) = h(x)` at ``points``.

    :param points: ``(K, d)`` points in user units (the model's input order).
    :param operator: ``psi(f, x) -> (K,)`` (the operator, as in an
        :class:`~pyro_pidkl.physics.Equation`) or an :class:`~pyro_pidkl.physics.Equation`,
        whose parameters are learned with the equation's unless fixed (a Robin coefficient:
        ``Equation(lambda f, x, k: f.d("x") + k * f, k=Parameter(1.0))``; reported as
        ``"name.k"``).
    :param value: :math:`h`: a number, a ``(K,)`` tensor, or a function ``h(x) -> (K,)`` of
        :class:`~pyro_pidkl.physics.derivatives.Inputs` in user units (default 0).
    :param float residual_noise: the residual variance relative to the prior variance of
        :math:`\mathcal{B} f` (default: the model's ``residual_noise``).
    :param str name: for messages.
    """

    def __init__(self, points, operator, value=0.0, residual_noise=None, name="condition"):
        P = torch.as_tensor(points, dtype=torch.float64)
        if P.dim() == 1:
            P = P[:, None]
        if P.dim() != 2 or P.shape[0] < 1 or not bool(torch.isfinite(P).all()):
            raise ValueError(f"Expected the points of {name!r} as a finite (K, d) array with "
                             f"K >= 1; got shape {tuple(P.shape)}")
        if not isinstance(operator, Equation) and not callable(operator):
            raise TypeError(f"Expected the operator of {name!r} to be psi(f, x) or an "
                            f"Equation; got {type(operator).__name__}")
        if residual_noise is not None and not residual_noise > 0:
            raise ValueError(f"Expected residual_noise > 0 for {name!r}; got {residual_noise}")
        self.points, self.operator, self.value = P, operator, value
        self.residual_noise, self.name = residual_noise, name
        #: the paired points of a periodic condition (``None`` for others)
        self.pair = None

    @classmethod
    def periodic(cls, points, pairs, operator=None, residual_noise=None, name="periodic"):
        r""":math:`\mathcal{B}[f](a_i) - \mathcal{B}[f](b_i) = 0` for ``points`` :math:`a`
        and ``pairs`` :math:`b` ``(K, d)`` (default :math:`\mathcal{B} f = f`; add
        ``lambda f, x: f.d("x")`` for the slope): ``Condition.periodic(left, right)`` with
        ``left = [[0, t] ...]``, ``right = [[L, t] ...]``."""
        out = cls(points, operator if operator is not None else (lambda f, x: f), 0.0,
                  residual_noise, name)
        B = torch.as_tensor(pairs, dtype=torch.float64)
        if B.dim() == 1:
            B = B[:, None]
        if B.shape != out.points.shape or not bool(torch.isfinite(B).all()):
            raise ValueError(f"Expected the pairs of {name!r} as finite points of shape "
                             f"{tuple(out.points.shape)}; got {tuple(B.shape)}")
        out.pair = B
        return out

    def bind(self, input_names, inputs):
        """The operator as an :class:`~pyro_pidkl.physics.Equation` for a model of inputs
        ``input_names`` (the model's equation reading ``inputs``), once the points (and a
        periodic condition's pairs) have a column per input and the operator reads only
        those inputs: what every model that takes conditions calls."""
        d = len(input_names)
        if self.points.shape[1] != d:
            raise ValueError(f"Expected the points of {self.name!r} to have shape (K, {d}) for "
                             f"inputs {tuple(input_names)}; got {tuple(self.points.shape)}")
        if self.pair is not None and self.pair.shape[1] != d:
            raise ValueError(f"Expected the pairs of {self.name!r} to have shape (K, {d}); "
                             f"got {tuple(self.pair.shape)}")
        eq = self.equation(inputs)
        eq.check_inputs(input_names)
        return eq

    def equation(self, inputs):
        """The operator as an :class:`~pyro_pidkl.physics.Equation` over ``inputs``."""
        if isinstance(self.operator, Equation):
            return self.operator
        return Equation(self.operator, inputs=inputs, name=self.name)

    def values(self, x):
        r""":math:`h` at the condition's points: ``(K,)`` (``x`` their
        :class:`~pyro_pidkl.physics.derivatives.Inputs`)."""
        K = self.points.shape[0]
        h = self.value(x) if callable(self.value) else self.value
        h = torch.as_tensor(h, dtype=torch.float64)
        if h.dim() == 0:
            h = h.expand(K)
        if h.shape != (K,):
            raise ValueError(f"Expected the value of {self.name!r} to have shape ({K},); got "
                             f"{tuple(h.shape)}")
        return h

    def __repr__(self):
        kind = ", periodic" if self.pair is not None else ""
        return f"Condition({self.name!r}, {self.points.shape[0]} points{kind})"
