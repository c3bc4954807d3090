r"""Manufactured solutions: random equations with exact solutions, to verify a solver the
way numerical PDE codes are verified.

:func:`manufactured_problem` composes an equation at random from terms (a principal part:
a first- or second-order ODE, an elliptic, parabolic, advection-diffusion or wave
operator, in one to three inputs; then lower-order terms, linear with constant or variable
coefficients, or nonlinear: powers odd and even, :math:`\sin f`, :math:`\tanh f`,
:math:`e^{f/2}`, a rational term, :math:`f|f|`, products of :math:`f` and its
derivatives, squares of derivatives), picks a smooth closed-form solution :math:`u`, and
defines the source as :math:`g = \psi[u]`, computed exactly by autograd. So
:math:`\psi[f] = g` holds for :math:`f = u` to rounding, whatever the terms, and any error
of a solver is the solver's.

A :class:`ManufacturedProblem` gives the equation (coefficients known, or some of them to
be learned from a start off the truth), the source, the exact solution, and two data
set-ups: :meth:`~ManufacturedProblem.solver_data` (the solution's exact values where a
well-posed problem of its kind gives them, and collocation points inside: a PDE solved
from its boundary and initial conditions) and
:meth:`~ManufacturedProblem.extrapolation_data` (noisy values on the first part of the box
along one input and on those boundary faces; predict the rest).
"""

import math
from dataclasses import dataclass, field

import torch
from torch.distributions import constraints

from ..physics.collocation import boundary_points
from ..physics.derivatives import Field, Inputs
from ..physics.domain import Box
from ..physics.equation import Equation, Parameter
from .base import Dataset
from .manufactured_terms import (CLASSES, D, NONLINEAR_TERMS, _choice, _lower_order,
                                 _principal, _solution)

__all__ = ["CLASSES", "ManufacturedProblem", "NONLINEAR_TERMS", "manufactured_problem",
           "manufactured_suite"]

@dataclass
class ManufacturedProblem:
    r"""An equation :math:`\psi[f] = g` with an exact solution (module docstring).

    :ivar name: ``"mms-<seed>"``.
    :ivar kind: its principal part (a key of :data:`CLASSES`).
    :ivar domain: ``{input: (low, high)}``.
    :ivar terms: ``[(coefficient name, text, function(f, x, c) -> (m,), linear)]``.
    :ivar truth: the coefficients ``{name: value}`` (all positive).
    :ivar learned: the coefficients an extrapolation fit learns.
    :ivar solution: ``u(X) -> (n,)`` for ``X`` ``(n, d)`` (torch, differentiable).
    :ivar split_input: the input along which extrapolation splits (time where there is one).
    """

    name: str
    kind: str
    domain: dict
    terms: list
    truth: dict
    learned: tuple
    solution: object
    solution_text: str
    split_input: str
    split_fraction: float = 0.4
    noise: float = 0.05
    description: str = field(default="")

    @property
    def input_names(self):
        return tuple(self.domain)

    @property
    def linear(self):
        """Whether every term is linear in :math:`f` (known by construction)."""
        return all(linear for *_, linear in self.terms)

    @property
    def nonlinear_terms(self):
        return [text for _, text, _, linear in self.terms if not linear]

    def operator(self, f, x, **c):
        r""":math:`\psi[f]` without the source: the sum of the terms."""
        return sum(fn(f, x, c) for _, _, fn, _ in self.terms)

    def equation(self, learn=False, start=0.5):
        r"""The :class:`~pyro_pidkl.physics.Equation` :math:`\psi[f]` (the source is given
        separately, :meth:`source`): every coefficient fixed at the truth, or with
        ``learn`` the ``learned`` ones started at ``start`` times the truth."""
        params = {}
        for name, value in self.truth.items():
            if learn and name in self.learned:
                params[name] = Parameter(start * value, constraints.positive)
            else:
                params[name] = Parameter(value, fixed=True)
        names = self.input_names

        def psi(f, x, **c):
            return self.operator(f, x, **c)
        psi.__name__ = self.name
        return Equation(psi, inputs=names, name=self.name, **params)

    def source(self, x):
        r"""The exact source :math:`g(x) = \psi[u](x)` at an
        :class:`~pyro_pidkl.physics.derivatives.Inputs` ``x`` or points ``(m, d)``."""
        X = torch.stack([x[n] for n in self.input_names], 1) if isinstance(x, Inputs) else x
        X = X.detach().to(D)
        with torch.enable_grad():
            P = X.clone().requires_grad_(True)
            field_ = Field(self.solution(P), P, self.input_names)
            g = self.operator(field_, Inputs(P, self.input_names),
                              **{k: torch.tensor(v, dtype=D) for k, v in self.truth.items()})
        return g.detach()

    def residual(self, X):
        r""":math:`\psi[u](X) - g(X)` of the exact solution (zero to rounding; a check of
        the construction)."""
        with torch.enable_grad():
            P = X.detach().clone().requires_grad_(True)
            f = Field(self.solution(P), P, self.input_names)
            h = self.operator(f, Inputs(P, self.input_names),
                              **{k: torch.tensor(v, dtype=D) for k, v in self.truth.items()})
        return h.detach() - self.source(X)

    def _box(self):
        low = torch.tensor([lo for lo, _ in self.domain.values()], dtype=D)
        high = torch.tensor([hi for _, hi in self.domain.values()], dtype=D)
        return low, high

    def test_points(self, count=2000, seed=0):
        """``count`` uniform points in the box (a fixed seed)."""
        low, high = self._box()
        g = torch.Generator().manual_seed(10_000 + seed)
        return low + (high - low) * torch.rand(count, low.shape[0], generator=g, dtype=D)

    def boundary_data_points(self, count, seed=0):
        r"""About ``count`` points where a well-posed problem of this kind gives the
        solution: every face of the box for an elliptic operator and for a second-order
        ODE (a two-point boundary value problem); the initial time and the lateral faces
        for a parabolic, advection-diffusion or wave operator and the initial time for a
        first-order ODE (not the final time, which over-determines the problem: exact data
        there differ from the physics by the discretisation error, which a fit then takes
        for noise); and for the wave equation a second time slice at a tenth of the
        interval, for the initial rate. ``(B, d)``."""
        X = boundary_points(Box(**self.domain), count, seed=seed, input_names=self.input_names)
        if self.kind.startswith("elliptic") or self.kind == "ode2":
            return X
        j = self.input_names.index("t")
        lo, hi = self.domain["t"]
        X = X[X[:, j] < hi - 1e-12 * max(1.0, abs(hi))]
        if self.kind == "wave":
            start = X[X[:, j] <= lo + 1e-12]
            slab = start.clone()
            slab[:, j] = lo + 0.1 * (hi - lo)
            X = torch.cat([X, slab])
        return X

    def solver_data(self, boundary=None, collocation=400):
        r"""A PDE solved from its boundary values: the exact solution at the
        :meth:`boundary_data_points` (``boundary`` of them on the whole boundary, default
        :math:`4 M^{(d-1)/d}`), for ``collocation`` collocation points :math:`M`.

        :returns: a :class:`~pyro_pidkl.datasets.base.Dataset` (``X_test`` uniform points,
            ``y_test`` the exact solution there)."""
        d = len(self.domain)
        if boundary is None:
            boundary = math.ceil(4 * collocation ** ((d - 1) / d))
        Xb = self.boundary_data_points(boundary)
        with torch.no_grad():
            yb = self.solution(Xb)
            X_test = self.test_points()
            y_test = self.solution(X_test)
        return Dataset(name=f"{self.name}-solver", X_train=Xb.numpy(), y_train=yb.numpy(),
                       X_test=X_test.numpy(), y_test=y_test.numpy(),
                       input_names=self.input_names, truth=dict(self.truth),
                       description=self.description)

    def extrapolation_data(self, seed=0, n_interior=None, n_boundary=None):
        r"""Noisy data (standard deviation ``noise`` times the solution's spread) at
        ``n_interior`` uniform points of the first ``split_fraction`` of the box along
        ``split_input`` and at ``n_boundary`` of the :meth:`boundary_data_points` (the
        boundary conditions, known with the same noise; none in one dimension).

        :returns: a :class:`~pyro_pidkl.datasets.base.Dataset` whose test set is the far
            part (``X_test``, ``f_test`` the exact solution, ``y_test`` with noise), with the
            near part as ``X_inside``, ``f_inside``, and ``noise_sd``."""
        d = len(self.domain)
        n_interior = n_interior or {1: 40, 2: 100, 3: 150}[d]
        n_boundary = n_boundary if n_boundary is not None else {1: 0, 2: 40, 3: 120}[d]
        g = torch.Generator().manual_seed(seed)
        low, high = self._box()
        j = self.input_names.index(self.split_input)
        cut = float(low[j] + self.split_fraction * (high[j] - low[j]))
        near_high = high.clone()
        near_high[j] = cut
        X = low + (near_high - low) * torch.rand(n_interior, d, generator=g, dtype=D)
        if n_boundary:
            Xb = self.boundary_data_points(2 * n_boundary, seed=seed)
            keep = torch.randperm(Xb.shape[0], generator=g)[:n_boundary]
            X = torch.cat([X, Xb[keep]])
        test = self.test_points(4000, seed)
        with torch.no_grad():
            spread = float(self.solution(self.test_points(4000, 0)).std())
            sd = self.noise * spread
            y = self.solution(X) + sd * torch.randn(X.shape[0], generator=g, dtype=D)
            far = test[:, j] > cut
            f_test = self.solution(test[far])
            f_inside = self.solution(test[~far])
        data = Dataset(name=f"{self.name}-extrapolation", X_train=X.numpy(), y_train=y.numpy(),
                       X_test=test[far].numpy(),
                       y_test=(f_test + sd * torch.randn(f_test.shape[0], generator=g,
                                                         dtype=D)).numpy(),
                       input_names=self.input_names, truth=dict(self.truth),
                       description=self.description)
        data.f_test, data.noise_sd = f_test.numpy(), sd
        data.X_inside, data.f_inside = test[~far].numpy(), f_inside.numpy()
        return data


def manufactured_problem(seed, kind=None):
    r"""The manufactured problem of ``seed`` (a fixed function of it; ``kind`` forces a
    principal part): a principal part from :data:`CLASSES`, one to three lower-order terms
    (each nonlinear with probability 0.6), a random smooth solution, and the exact source.
    Learned coefficients in extrapolation: those of the principal part (its diffusivity,
    damping, speed) and the first lower-order term's.

    :returns: a :class:`ManufacturedProblem`.
    """
    g = torch.Generator().manual_seed(int(seed))
    kind = kind or _choice(g, tuple(CLASSES))
    names, split = CLASSES[kind]
    domain = {}
    for n in names:
        domain[n] = (0.0, 2.0 if kind in ("ode1", "ode2") else 1.0)
    time = "t" if "t" in names else None
    truth, terms = {}, []
    learned = _principal(kind, names, g, truth, terms)
    count = int(torch.randint(1, 4, (), generator=g))
    first_order_time = kind in ("ode1", "advection_diffusion") or kind.startswith("parabolic")
    taken = {"ode2": ("t",), "advection_diffusion": ("x",)}.get(kind, ())
    for k in range(count):
        _lower_order(g, names, truth, terms, k, bool(torch.rand((), generator=g, dtype=D) < 0.6),
                     first_order_time, taken)
    learned = tuple(learned + ["b0"])[:2]
    solution, text = _solution(g, names, domain, time)
    eq = " + ".join(t for _, t, _, _ in terms)
    return ManufacturedProblem(
        name=f"mms-{seed}", kind=kind, domain=domain, terms=terms, truth=truth,
        learned=learned, solution=solution, solution_text=text, split_input=split,
        description=f"{eq} = g({', '.join(names)}); u = {text}")


def manufactured_suite(seeds=range(40)):
    """The problems of ``seeds`` (default the 40 of the verification suite)."""
    return [manufactured_problem(s) for s in seeds]
