r"""Systems of equations in several unknown functions, written as plain Python.

An :class:`EquationSystem` is an :class:`~pyro_pidkl.physics.Equation` whose ``psi`` reads
several functions by name and returns one residual per equation::

    from pyro_pidkl.physics import EquationSystem

    def fitzhugh_nagumo(f, x, a, b, c):
        V, R = f["V"], f["R"]
        return (V.d("t") - c * (V - V ** 3 / 3 + R),
                R.d("t") + (V - a + b * R) / c)

    system = EquationSystem(fitzhugh_nagumo, outputs=("V", "R"), inputs=("t",),
                            a=0.5, b=0.5, c=1.0)

``f`` maps each output's name to a :class:`~pyro_pidkl.physics.derivatives.Field`
(``f["V"].d("t")``); ``psi`` returns a tuple (or list) of ``E`` residuals of shape ``(m,)``,
the system

.. math:: \psi_e[f_1, \dots, f_C](x) = 0, \qquad e = 1, \dots, E .

:func:`linearise_system` expands every residual around the jets of all the functions
(:math:`J_{e,c,\alpha} = \partial \psi_e / \partial (\partial^\alpha f_c)`), and
:func:`is_linear_system` decides linearity at random jets, as :mod:`.linearise` does for one
function.
"""

import torch

from .derivatives import ByName, Field, Inputs
from .equation import Equation
from .linearise import JetField, _random_parameters, expansions_agree

__all__ = ["EquationSystem", "Functions", "SystemLinearisation", "is_linear_system",
           "linearise_system"]


class Functions(ByName):
    """The system's functions by name: ``f["V"]`` (or ``f.V``) is a
    :class:`~pyro_pidkl.physics.derivatives.Field`; an unknown name raises a ``KeyError``
    that lists the outputs."""

    _unknown = "Unknown output {name!r}; the system's outputs are {names}"

    def __init__(self, fields):
        self._names, self._fields = tuple(fields), list(fields.values())

    def _item(self, j):
        return self._fields[j]


class EquationSystem(Equation):
    r"""A system :math:`\psi_e[f_1, \dots, f_C] = 0`, :math:`e = 1..E`, in ``C`` unknown
    functions named by ``outputs``.

    :param callable psi: ``psi(f, x, **params)`` with ``f`` a :class:`Functions` (``f["V"]``)
        and ``x`` an :class:`~pyro_pidkl.physics.derivatives.Inputs`; returns a tuple of
        ``E`` residuals, each ``(m,)``.
    :param outputs: the names of the ``C`` functions, in the order of a prediction's
        columns.
    :param inputs: the names of the inputs ``psi`` differentiates.
    :param params: named coefficients, as :class:`~pyro_pidkl.physics.Equation`.
    """

    def __init__(self, psi, outputs, inputs=None, name=None, **params):
        super().__init__(psi, inputs=inputs, name=name, **params)
        if isinstance(outputs, str):
            outputs = (outputs,)
        outputs = tuple(outputs)
        if not outputs or not all(isinstance(o, str) and o for o in outputs) \
                or len(set(outputs)) != len(outputs):
            raise ValueError(f"Expected outputs to be distinct non-empty names; got {outputs!r}")
        self.outputs = outputs

    def evaluate(self, fields, points, names, values=None):
        """``psi`` on ``fields`` (``{output: Field}``) at ``points`` ``(m, d)``: the ``E``
        residuals stacked ``(E, m)``, checked."""
        given = {k: torch.as_tensor(v, dtype=points.dtype) for k, v in (values or {}).items()}
        params = {n: given[n] if n in given else getattr(self, n)
                  for n in self.parameter_names}
        params.update(given)
        out = self.psi(Functions(fields), Inputs(points, names), **params)
        m = points.shape[0]
        if isinstance(out, (Field, torch.Tensor)):
            out = (out,)
        if not isinstance(out, (tuple, list)) or not out:
            raise TypeError(f"Expected psi {self.name!r} to return a tuple of residuals, one "
                            f"per equation, each of shape ({m},); got {type(out).__name__}")
        rows = []
        for e, h in enumerate(out):
            h = h.value if isinstance(h, Field) else h
            if not isinstance(h, torch.Tensor) or h.shape != (m,):
                got = tuple(h.shape) if isinstance(h, torch.Tensor) else type(h).__name__
                raise ValueError(f"Expected residual {e} of psi {self.name!r} to have shape "
                                 f"({m},), one value per point; got {got}")
            rows.append(h.to(points.dtype))
        return torch.stack(rows)

    def residuals(self, functions, Z, input_names=None, **values):
        r"""The residuals :math:`\psi_e[f](Z)` ``(E, m)`` of plain functions: ``functions``
        ``{output: callable (m, d) -> (m,)}`` in user units (e.g. the true solution, to
        check a system: zero up to rounding)."""
        names = tuple(input_names) if input_names is not None else self.inputs
        missing = [o for o in self.outputs if o not in functions]
        if missing:
            raise ValueError(f"Expected a function for every output {self.outputs}; missing "
                             f"{tuple(missing)}")
        with torch.enable_grad():
            points = Z.detach().requires_grad_(True)
            fields = {o: Field(functions[o](points), points, names, allowed=self.inputs)
                      for o in self.outputs}
            return self.evaluate(fields, points, names, values)

    def extra_repr(self):
        return super().extra_repr() + f", outputs={self.outputs}"


class SystemLinearisation:
    r"""The expansion :math:`\psi_e \approx \text{offset}_e + \sum_{c,\alpha}
    J_{e,c,\alpha}\, \partial^\alpha f_c`: ``coefficients`` ``{(e, c): {alpha: (m,)}}``
    (``c`` the output's position), ``h0`` and ``offset`` ``(E, m)``, ``requested``
    ``{c: set of alpha}`` (the derivatives ``psi`` read)."""

    def __init__(self, coefficients, h0, offset, requested):
        self.coefficients, self.h0, self.offset = coefficients, h0, offset
        self.requested = requested


def linearise_system(system, jets, points, names, **values):
    r"""Linearise ``system`` around the jets ``jets`` (``[{alpha: (m,)}, ...]``, one per
    output, user units) at ``points`` ``(m, d)``: a :class:`SystemLinearisation` whose
    coefficients keep their graph to the system's parameters."""
    m = points.shape[0]
    with torch.enable_grad():
        fields = [JetField(jet or {}, points, names, allowed=system.inputs) for jet in jets]
        H = system.evaluate(dict(zip(system.outputs, fields)), points, names, values)
        used = [(c, idx, leaf) for c, fld in enumerate(fields)
                for idx, leaf in fld.leaves.items() if idx in fld.requested or idx == ()]
        leaves = [leaf for _, _, leaf in used]
        coefficients, offset = {}, []
        for e in range(H.shape[0]):
            grads = (torch.autograd.grad(H[e].sum(), leaves, create_graph=True,
                                         allow_unused=True, retain_graph=True)
                     if H[e].requires_grad else [None] * len(leaves))
            off = H[e]
            for (c, idx, leaf), g in zip(used, grads):
                if g is None:
                    continue
                g = g if g.shape == (m,) else g.expand(m)
                coefficients.setdefault((e, c), {})[idx] = g
                off = off - g * leaf.detach()
            offset.append(off)
    requested = {c: set(fld.requested) for c, fld in enumerate(fields)}
    for e in range(H.shape[0]):
        if not any(k[0] == e for k in coefficients):
            raise ValueError(f"Residual {e} of system {system.name!r} does not depend on any "
                             f"output {system.outputs}: it has nothing to condition on")
    return SystemLinearisation(coefficients, H, torch.stack(offset), requested)


def is_linear_system(system, points, names, trials=3, seed=0, rtol=1e-8):
    r"""Whether every residual is affine in the functions and their derivatives, decided as
    :func:`~pyro_pidkl.physics.is_linear` decides it for one function: expansions at
    independent random jets (and random values of the learned coefficients) must agree."""
    points = points.detach()
    g = torch.Generator().manual_seed(seed)
    dtype, m, C = points.dtype, points.shape[0], len(system.outputs)
    requested = linearise_system(system, [{}] * C, points, names).requested
    indices = {c: sorted(requested[c] | {()}, key=lambda i: (len(i), i)) for c in range(C)}
    settings = [{}] + [_random_parameters(system, g, dtype) for _ in range(trials)]
    for values in settings:
        ref = None
        for k in range(trials + 1):
            scale = 10.0 if k % 2 else 1.0
            jets = [{i: scale * torch.randn(m, generator=g, dtype=dtype) for i in indices[c]}
                    for c in range(C)]
            lin = linearise_system(system, jets, points, names, **values)
            if any(lin.requested[c] - requested[c] for c in range(C)):
                return False
            got = {(key, i): v.detach() for key, w in lin.coefficients.items()
                   for i, v in w.items()}
            offsets = {("offset", e): lin.offset[e].detach() for e in range(lin.offset.shape[0])}
            got.update(offsets)
            if ref is None:
                ref = got
            elif not expansions_agree(ref, got, rtol, loose=set(offsets)):
                return False
    return True
