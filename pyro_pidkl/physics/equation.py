r"""Equations :math:`\psi[f](x) = g(x)` written as plain Python.

An :class:`Equation` holds a function ``psi(f, x, **params)`` that returns the residual
:math:`\psi[f]` at the points, the names of the inputs it differentiates (the others are
covariates), and its named unknown parameters, learned with the model::

    from torch.distributions import constraints
    from pyro_pidkl.physics import Equation, Parameter

    def damped_oscillator(f, x, omega, zeta):
        return f.d("t", "t") + 2 * zeta * omega * f.d("t") + omega ** 2 * f

    eq = Equation(damped_oscillator, inputs=("t",),
                  omega=Parameter(2.0), zeta=Parameter(0.5, constraints.unit_interval))

``f`` is a :class:`~pyro_pidkl.physics.derivatives.Field` (``f.d("t")``, ``f.d("x", "x")``,
arithmetic, torch functions) and ``x`` an :class:`~pyro_pidkl.physics.derivatives.Inputs`
(``x["t"]``), both in the user's units.
"""

import copy
import inspect
import numbers
import weakref

import torch
from pyro.distributions import constraints
from pyro.nn import PyroModule, PyroParam, PyroSample

from .derivatives import Field, Inputs

__all__ = ["Equation", "Parameter", "source_columns"]


class Parameter:
    """Specification of an unknown equation parameter.

    :param float init: initial value (in constrained space).
    :param constraint: a ``torch.distributions.constraints`` object (default ``positive``)
        or its name: ``"positive"``, ``"nonnegative"``, ``"real"``, ``"unit_interval"``.
    :param prior: optional ``pyro.distributions`` prior: the parameter becomes a
        ``pyro.sample`` site (a Bayesian parameter that needs a guide).
    :param bool fixed: a known constant, not learned.
    """

    def __init__(self, init, constraint=constraints.positive, prior=None, fixed=False):
        constraint = _as_constraint(constraint)
        init_t = torch.as_tensor(init, dtype=torch.float64)
        if not torch.isfinite(init_t).all():
            raise ValueError(f"Expected a finite initial value; got {init!r}")
        if not fixed and prior is None and not bool(constraint.check(init_t).all()):
            raise ValueError(f"Initial value {init!r} violates the constraint {constraint}")
        self.init, self.constraint, self.prior, self.fixed = init_t, constraint, prior, fixed

    def __repr__(self):
        kind = "fixed" if self.fixed else ("prior" if self.prior is not None else "learned")
        return f"Parameter({self.init.tolist()!r}, {kind})"


#: the constraints a :class:`Parameter` takes by name
CONSTRAINT_NAMES = {"positive": constraints.positive, "nonnegative": constraints.nonnegative,
                    "real": constraints.real, "unit_interval": constraints.unit_interval}


def _as_constraint(constraint):
    """A ``torch.distributions`` constraint, or one of :data:`CONSTRAINT_NAMES` by name."""
    if isinstance(constraint, str):
        if constraint not in CONSTRAINT_NAMES:
            raise ValueError(f"Expected a constraint named one of {sorted(CONSTRAINT_NAMES)}; "
                             f"got {constraint!r}")
        return CONSTRAINT_NAMES[constraint]
    if not isinstance(constraint, constraints.Constraint):
        raise TypeError(f"Expected a torch.distributions constraint or its name for a "
                        f"Parameter; got {type(constraint).__name__}")
    return constraint


def _as_parameter(value):
    if isinstance(value, Parameter):
        return value
    if isinstance(value, (numbers.Real, torch.Tensor)):
        return Parameter(value)
    raise TypeError(f"Expected a Parameter or a number for an equation parameter; got "
                    f"{type(value).__name__}")


class Equation(PyroModule):
    r"""A differential equation :math:`\psi[f] = g` with unknown source :math:`g`.

    :param callable psi: ``psi(f, x, **params) -> (m,)`` residual.
    :param inputs: names of the inputs ``psi`` differentiates (others are covariates);
        ``None`` means every input of the data.
    :param params: named parameters (:class:`Parameter` or an initial value, which is
        learned under a positivity constraint).

    After construction each parameter is an attribute: ``eq.alpha`` is its current
    (constrained) value, a ``pyro.param`` site inside a model.
    """

    def __init__(self, psi, inputs=None, name=None, **params):
        super().__init__()
        if not callable(psi):
            raise TypeError(f"Expected psi to be callable; got {type(psi).__name__}")
        if isinstance(inputs, str):
            inputs = (inputs,)
        self.psi = psi
        self.inputs = None if inputs is None else tuple(inputs)
        self.name = name or getattr(psi, "__name__", "equation")
        self._check_signature(params)
        self.parameter_names = tuple(params)
        self.specs = {}
        for pname, value in params.items():
            spec = _as_parameter(value)
            self.specs[pname] = spec
            if spec.fixed:
                self.register_buffer(pname, spec.init.clone())
            elif spec.prior is not None:
                setattr(self, pname, PyroSample(spec.prior))
            else:
                setattr(self, pname, PyroParam(spec.init.clone(), spec.constraint))

    def _check_signature(self, params):
        try:
            sig = inspect.signature(self.psi)
        except (TypeError, ValueError):
            return
        ps = list(sig.parameters.values())
        if any(p.kind is p.VAR_KEYWORD for p in ps):
            return
        positional = [p for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(positional) < 2 and not any(p.kind is p.VAR_POSITIONAL for p in ps):
            raise TypeError(f"Expected psi(f, x, **params); {self.psi.__name__}{sig} takes "
                            "fewer than two positional arguments")
        accepted = {p.name for p in ps[2:] if p.kind is not p.VAR_POSITIONAL}
        required = {p.name for p in ps[2:] if p.default is p.empty
                    and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        unknown = set(params) - accepted
        missing = required - set(params)
        if unknown or missing:
            raise TypeError(
                f"psi {self.psi.__name__}{sig} takes parameters {tuple(sorted(accepted))}; "
                f"got {tuple(sorted(params))}"
                + (f" (unknown: {tuple(sorted(unknown))})" if unknown else "")
                + (f" (missing: {tuple(sorted(missing))})" if missing else ""))

    def check_inputs(self, input_names):
        """Raise a ``ValueError`` if the equation names an input the data does not have."""
        if self.inputs is None:
            return
        unknown = [n for n in self.inputs if n not in input_names]
        if unknown:
            raise ValueError(f"Equation {self.name!r} uses inputs {self.inputs} but the data has "
                             f"inputs {tuple(input_names)}; unknown: {tuple(unknown)}")

    def parameter_values(self):
        """Current parameter values as a ``{name: tensor}`` dict (a model's sites)."""
        return {n: getattr(self, n) for n in self.parameter_names}

    def residual(self, f, Z, input_names=None, max_order=float("inf"), why="", **values):
        r"""Residual :math:`h = \psi[f](Z)` at points ``Z`` ``(m, d)``, shape ``(m,)``.

        :param callable f: a differentiable function ``(m, d) -> (m,)`` in user units, or
            an object whose ``field(Z, names, allowed=, max_order=, why=, plan=)`` returns its
            :class:`~pyro_pidkl.physics.derivatives.Field` at ``Z`` (derivatives of its own,
            e.g. :class:`~pyro_pidkl.physics.posterior_draw.PosteriorDraw`).
        :param torch.Tensor Z: points in user units.
        :param input_names: names of the ``d`` columns (default: ``inputs``).
        :param values: parameter values overriding the current ones (e.g. the truth).
        """
        return self.residual_field(f, Z, input_names, max_order, why, **values)[0]

    def residual_field(self, f, Z, input_names=None, max_order=float("inf"), why="",
                       plan=None, **values):
        """:meth:`residual` and the :class:`~pyro_pidkl.physics.derivatives.Field` it used,
        whose ``requested`` (the derivative index tuples ``psi`` asked for) a caller can pass
        back as ``plan`` on the next call, so that ``f`` computes them in one pass.

        :returns: ``(h (m,), field)``.
        """
        names = tuple(input_names) if input_names is not None else self.inputs
        if names is None:
            raise ValueError("input_names is required when the equation declares no inputs")
        if Z.dim() != 2 or Z.shape[-1] != len(names):
            raise ValueError(f"Expected Z to have shape (m, {len(names)}) for inputs {names}; "
                             f"got {tuple(Z.shape)}")
        self.check_inputs(names)
        unknown = set(values) - set(self.parameter_names)
        if unknown:
            raise ValueError(f"Unknown parameter(s) {tuple(sorted(unknown))}; equation "
                             f"{self.name!r} has {self.parameter_names}")
        params = self.parameter_values()
        params.update({k: torch.as_tensor(v, dtype=Z.dtype) for k, v in values.items()})
        with torch.enable_grad():
            if hasattr(f, "field"):  # a function that gives its own derivatives
                field = f.field(Z, names, allowed=self.inputs, max_order=max_order, why=why,
                                plan=plan)
            else:
                points = Z.detach().requires_grad_(True)
                field = Field(f(points), points, names, allowed=self.inputs,
                              max_order=max_order, why=why)
            if field.value.shape != (Z.shape[0],):
                raise ValueError(f"Expected f to return shape ({Z.shape[0]},); got "
                                 f"{tuple(field.value.shape)}")
            h = self.psi(field, Inputs(field.points, names), **params)
            if isinstance(h, Field):
                h = h.value
            m = Z.shape[0]
            if not isinstance(h, torch.Tensor):
                raise TypeError(f"Expected psi {self.name!r} to return a torch tensor (or a "
                                f"Field) of shape ({m},), one residual per point; got "
                                f"{type(h).__name__}")
            if h.shape != (m,):
                raise ValueError(f"Expected psi {self.name!r} to return shape ({m},), one "
                                 f"residual per point; got {tuple(h.shape)}")
            if field.value.requires_grad and not h.requires_grad:
                raise ValueError(f"Expected the residual of psi {self.name!r} to depend on f; "
                                 "it does not (computed outside torch, e.g. with numpy, or "
                                 "detached?)")
            h = h.to(Z.dtype)
        return h, field

    def extra_repr(self):
        return f"name={self.name!r}, inputs={self.inputs}, parameters={self.parameter_names}"


def source_columns(source_inputs, equation, input_names):
    """Column indices of the inputs a source kernel uses: ``"equation"`` (those the equation
    differentiates, or all when it declares none), ``"all"``, or a name or tuple of names
    from ``input_names``."""
    if source_inputs == "equation":
        names = equation.inputs or input_names
    elif source_inputs == "all":
        names = input_names
    else:
        names = (source_inputs,) if isinstance(source_inputs, str) else tuple(source_inputs)
        unknown = [n for n in names if n not in input_names]
        if unknown or not names:
            raise ValueError(f"Expected source_inputs to be 'equation', 'all' or names from "
                             f"{tuple(input_names)}; got {source_inputs!r}")
    return [list(input_names).index(n) for n in names]


#: each equation (or system) with learned coefficients -> the models and terms that learn them
_HOLDERS = weakref.WeakKeyDictionary()


def claim(equation, holder):
    r"""``equation`` (an :class:`Equation` or
    :class:`~pyro_pidkl.physics.system.EquationSystem`) for ``holder``, a model or physics
    term that learns its coefficients: the equation itself, or, where another live holder
    learns them already, a copy with their current values, with one line saying so. Two
    models sharing one set of coefficient tensors would each overwrite what the other
    learned (fitting one moved the other's answer). An equation with nothing to learn is
    shared as it is."""
    from ..checks import warn
    if all(spec.fixed for spec in equation.specs.values()):
        return equation
    holders = _HOLDERS.setdefault(equation, weakref.WeakSet())
    if any(h is not holder for h in holders):
        warn(f"{type(equation).__name__} {equation.name!r} is already learned by another "
             f"model: this {type(holder).__name__} takes a copy (its coefficients its own: "
             f"read them with model.equation_parameters(), not from the equation you "
             f"passed)")
        equation = copy.deepcopy(equation)
        holders = _HOLDERS.setdefault(equation, weakref.WeakSet())
    holders.add(holder)
    return equation
