r"""Derivatives of a function at points, by input name.

:class:`Field` wraps :math:`f(Z)` for points :math:`Z \in \mathbb{R}^{m \times d}` and gives
:math:`\partial f / \partial z_a`, :math:`\partial^2 f / \partial z_a \partial z_b`, ... by the
names of the inputs, with ``torch.autograd.grad(create_graph=True)`` so that every derivative
is vectorised over the ``m`` points and differentiable for training.

Each point's value must depend only on that point (true for GP posterior mean and variance
functions and for any point-wise function), so the gradient of ``f.sum()`` gives every
point's derivative at once; one ``grad`` call yields all ``d`` first derivatives, and one more
per needed row gives second derivatives.

A :class:`Field` behaves like the tensor of its values in arithmetic and in ``torch``
functions (``f * f.d("x")``, ``torch.sin(f)``), so equations read like the maths.
"""

import math

import torch

__all__ = ["ByName", "Field", "Inputs"]


def _unwrap(a):
    if isinstance(a, Field):
        return a.value
    if isinstance(a, (list, tuple)):
        return type(a)(_unwrap(b) for b in a)
    if isinstance(a, dict):
        return {k: _unwrap(v) for k, v in a.items()}
    return a


class ByName:
    """A read-only mapping by name: ``m["t"]`` and ``m.t`` both work; an unknown name
    raises a ``KeyError`` that lists the known ones (``_unknown``, formatted with ``name``
    and ``names``). Subclasses set ``_names`` and give ``_item(j)``, the ``j``-th value."""

    _unknown = "Unknown name {name!r}; the names are {names}"

    def __getitem__(self, name):
        try:
            j = self._names.index(name)
        except ValueError:
            raise KeyError(self._unknown.format(name=name, names=self._names)) from None
        return self._item(j)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError as e:
            raise AttributeError(str(e)) from None

    def __iter__(self):
        return iter(self._names)

    def __len__(self):
        return len(self._names)

    def keys(self):
        return self._names


class Inputs(ByName):
    """The points as a read-only mapping from input name to a ``(m,)`` tensor (user units).

    ``x["t"]`` and ``x.t`` both work; an unknown name raises a ``KeyError`` that lists the
    known ones.
    """

    _unknown = "Unknown input name {name!r}; the inputs are {names}"

    def __init__(self, points, names):
        self._points, self._names = points, tuple(names)

    def _item(self, j):
        return self._points[:, j]


class Field:
    r"""A function's values at ``m`` points, with derivatives by input name.

    :param torch.Tensor value: ``(m,)`` values :math:`f(Z)`, computed from ``points``.
    :param torch.Tensor points: ``(m, d)`` points with ``requires_grad=True``.
    :param tuple names: the ``d`` input names, in column order.
    :param allowed: names that may be differentiated (default: all ``names``).
    :param max_order: largest derivative order the function supports reliably
        (e.g. 1 for a ReLU feature map); higher orders raise a ``ValueError``.
    """

    def __init__(self, value, points, names, allowed=None, max_order=math.inf, why=""):
        self.value, self.points, self.names = value, points, tuple(names)
        self.allowed = self.names if allowed is None else tuple(allowed)
        self.max_order, self._why = max_order, why
        self._cache = {(): value}
        self.max_order_used = 0
        self.requested = set()   # derivative index tuples asked for through d()

    # -- derivatives ---------------------------------------------------------------
    def _index(self, name):
        if name not in self.allowed:
            if name in self.names:
                raise ValueError(
                    f"The equation differentiates with respect to {name!r}, which is not "
                    f"among its declared inputs {self.allowed}; add it to `inputs=`.")
            raise ValueError(f"Unknown input name {name!r} in a derivative; the inputs are "
                             f"{self.names}")
        return self.names.index(name)

    def _derivative(self, idx):
        if idx in self._cache:
            return self._cache[idx]
        lower = self._derivative(idx[:-1])
        with torch.enable_grad():  # also under no_grad, e.g. in Predictive
            g = None
            if lower.requires_grad:
                (g,) = torch.autograd.grad(lower.sum(), self.points, create_graph=True,
                                           allow_unused=True)
            if g is None:  # lower does not depend on the points
                g = torch.zeros_like(self.points)
            for j in range(len(self.names)):
                self._cache.setdefault(tuple(sorted(idx[:-1] + (j,))), g[:, j])
        return self._cache[idx]

    def d(self, *names):
        r"""Partial derivative :math:`\partial^k f / \partial x_{a_1} \cdots \partial x_{a_k}`.

        ``f.d("t")`` is :math:`f_t`, ``f.d("x", "x")`` is :math:`f_{xx}`, ``f.d("x", "t")`` the
        mixed :math:`f_{xt}` (derivatives commute). Returns a ``(m,)`` tensor.
        """
        if len(names) == 1 and isinstance(names[0], (tuple, list)):
            names = tuple(names[0])
        if len(names) > self.max_order:
            raise ValueError(
                f"A derivative of order {len(names)} ({', '.join(names)}) was requested, but "
                f"the function is only reliably differentiable {self.max_order} time(s){self._why}.")
        idx = tuple(sorted(self._index(n) for n in names))
        self.max_order_used = max(self.max_order_used, len(names))
        self.requested.add(idx)
        return self._derivative(idx)

    def laplacian(self, *names):
        r""":math:`\sum_a \partial^2 f / \partial x_a^2` over ``names`` (``(m,)``)."""
        if not names:
            raise ValueError("Expected at least one input name for the laplacian; got none")
        return sum(self.d(n, n) for n in names)

    def grad(self, *names):
        """First derivatives ``(m, len(names))`` by name."""
        return torch.stack([self.d(n) for n in names], dim=-1)

    # -- behave like the tensor of values -----------------------------------------
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return func(*_unwrap(args), **_unwrap(kwargs or {}))

    def __repr__(self):
        return f"Field(m={self.value.shape[0]}, inputs={self.names})"

    @property
    def shape(self):
        return self.value.shape

    def __len__(self):
        return self.value.shape[0]

    def __neg__(self):
        return -self.value

    def __pos__(self):
        return self.value

    def __abs__(self):
        return self.value.abs()

    def __getitem__(self, item):
        return self.value[item]


def _binary(op):
    def left(self, other):
        return op(self.value, _unwrap(other))

    def right(self, other):
        return op(_unwrap(other), self.value)
    return left, right


for _name, _op in {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "truediv": lambda a, b: a / b, "pow": lambda a, b: a ** b,
}.items():
    _l, _r = _binary(_op)
    setattr(Field, f"__{_name}__", _l)
    setattr(Field, f"__r{_name}__", _r)
