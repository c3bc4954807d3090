r"""Domains that are not boxes: disks, polygons (an L-shape), their differences (a plate
with a hole) and their products with a time interval, with points inside and on the
boundary (with outward normals, for Neumann conditions).

Every shape names its inputs (``inputs=("x", "y")``) and works in the user's units:

.. code-block:: python

    plate = Difference(Rectangle(x=(0, 1), y=(0, 1)), Disk((0.5, 0.5), 0.2))
    Z = plate.interior(400)                      # (400, 2), Sobol points kept inside
    B, n = plate.boundary(200, normals=True)     # points on the edges and outward normals
    model = pk.PhysicsConditionedGP(B, g(B), eq, domain=plate, ...)

A model given a shape collocates inside it and standardises its inputs by the shape's
bounding box (:meth:`Shape.box`).
"""

import math

import numpy as np
import torch
from .collocation import _unit_points
from .domain import Box

__all__ = ["Difference", "Disk", "Polygon", "Rectangle", "Shape", "TimeProduct"]


def _sobol(d, n, seed):
    """``n`` scrambled Sobol points in ``[0, 1]^d`` (float64 numpy): the collocation
    designs' own."""
    return _unit_points(d, n, "sobol", seed, torch.float64).numpy()


class Shape:
    """A region of named inputs. Subclasses give ``inputs``, :meth:`contains`,
    :meth:`bounds` and :meth:`_boundary` (points and outward normals by a parameter
    ``s`` in ``[0, 1)``)."""

    inputs = ()

    def contains(self, P):
        """Whether each row of ``P`` ``(n, d)`` is inside (closed): ``(n,)`` bool."""
        raise NotImplementedError

    def bounds(self):
        """``(low, high)`` float lists: the bounding box."""
        raise NotImplementedError

    def perimeter(self):
        raise NotImplementedError

    def _boundary(self, s):
        """Points ``(n, d)`` and outward unit normals ``(n, d)`` at arc-length fractions
        ``s`` ``(n,)``."""
        raise NotImplementedError

    def box(self):
        """The bounding :class:`~pyro_pidkl.physics.domain.Box`."""
        low, high = self.bounds()
        return Box(**{n: (a, b) for n, a, b in zip(self.inputs, low, high)})

    def interior(self, n, seed=0):
        """``n`` points inside: Sobol points of the bounding box, those inside kept (the box
        sampled densely enough to keep ``n``). ``(n, d)`` float64 tensor."""
        if not (isinstance(n, int) and n >= 1):
            raise ValueError(f"Expected a number of points >= 1; got {n!r}")
        low, high = (np.asarray(v, dtype=np.float64) for v in self.bounds())
        take, kept = 2 * n, np.zeros((0, len(low)))
        for attempt in range(12):
            u = low + (high - low) * _sobol(len(low), take, seed + attempt)
            inside = u[self.contains(torch.as_tensor(u)).numpy()]
            kept = np.concatenate([kept, inside])
            if kept.shape[0] >= n:
                return torch.as_tensor(kept[:n])
            frac = max(inside.shape[0] / take, 1e-3)
            take = int(min(2 ** 22, 2 * (n - kept.shape[0]) / frac + 16))
        raise ValueError(f"Could not place {n} points inside {self!r}: is it empty?")

    def boundary(self, n, seed=0, normals=False):
        """``n`` points on the boundary, spread evenly by arc length (a random shift from
        ``seed``); with ``normals`` also the outward unit normals. ``(n, d)`` tensors."""
        if not (isinstance(n, int) and n >= 1):
            raise ValueError(f"Expected a number of points >= 1; got {n!r}")
        shift = np.random.default_rng(seed).random()
        s = (np.arange(n) + shift) / n
        P, N = self._boundary(s)
        P, N = torch.as_tensor(P), torch.as_tensor(N)
        return (P, N) if normals else P

    def __sub__(self, other):
        return Difference(self, other)


class Rectangle(Shape):
    """An axis-aligned rectangle (or interval): ``Rectangle(x=(0, 1), y=(0, 2))``."""

    def __init__(self, **bounds):
        if not bounds:
            raise ValueError("Expected at least one input, e.g. Rectangle(x=(0, 1))")
        self.inputs = tuple(bounds)
        self.low = [float(a) for a, _ in bounds.values()]
        self.high = [float(b) for _, b in bounds.values()]
        if not all(a < b for a, b in zip(self.low, self.high)):
            raise ValueError(f"Expected low < high for every input; got {bounds}")

    def contains(self, P):
        low, high = torch.tensor(self.low, dtype=P.dtype), torch.tensor(self.high, dtype=P.dtype)
        return ((P >= low - 1e-12) & (P <= high + 1e-12)).all(-1)

    def bounds(self):
        return list(self.low), list(self.high)

    def _corners(self):
        (x0, y0), (x1, y1) = (self.low[0], self.low[1]), (self.high[0], self.high[1])
        return [(x0, y0), (x1, y0), (x1, y1), (x0, y1)]

    def perimeter(self):
        if len(self.inputs) == 1:
            return 2.0
        if len(self.inputs) != 2:
            raise ValueError("Boundary points of a rectangle are for one or two inputs")
        return Polygon(self._corners(), self.inputs).perimeter()

    def _boundary(self, s):
        if len(self.inputs) == 1:
            P = np.where(s[:, None] < 0.5, self.low[0], self.high[0])
            N = np.where(s[:, None] < 0.5, -1.0, 1.0)
            return P, N
        return Polygon(self._corners(), self.inputs)._boundary(s)

    def __repr__(self):
        return f"Rectangle({dict(zip(self.inputs, zip(self.low, self.high)))})"


class Disk(Shape):
    """A disk (2-D): ``Disk(center=(0, 0), radius=1, inputs=("x", "y"))``."""

    def __init__(self, center, radius, inputs=("x", "y")):
        self.center = [float(c) for c in center]
        self.radius = float(radius)
        self.inputs = tuple(inputs)
        if len(self.center) != 2 or len(self.inputs) != 2 or not self.radius > 0:
            raise ValueError(f"Expected a 2-D center, two input names and a radius > 0; got "
                             f"{center}, {inputs}, {radius}")

    def contains(self, P):
        c = torch.tensor(self.center, dtype=P.dtype)
        return ((P - c) ** 2).sum(-1) <= self.radius ** 2 * (1 + 1e-12)

    def bounds(self):
        return ([c - self.radius for c in self.center], [c + self.radius for c in self.center])

    def perimeter(self):
        return 2 * math.pi * self.radius

    def _boundary(self, s):
        a = 2 * math.pi * s
        N = np.stack([np.cos(a), np.sin(a)], 1)
        return np.asarray(self.center) + self.radius * N, N

    def __repr__(self):
        return f"Disk({self.center}, {self.radius})"


class Polygon(Shape):
    """A simple polygon (2-D) by its vertices in order: the L-shape is
    ``Polygon([(0, 0), (1, 0), (1, 1), (-1, 1), (-1, -1), (0, -1)])``."""

    def __init__(self, vertices, inputs=("x", "y")):
        V = np.asarray(vertices, dtype=np.float64)
        if V.ndim != 2 or V.shape[1] != 2 or V.shape[0] < 3:
            raise ValueError(f"Expected at least three 2-D vertices; got shape {V.shape}")
        area = 0.5 * np.sum(V[:, 0] * np.roll(V[:, 1], -1) - np.roll(V[:, 0], -1) * V[:, 1])
        if area == 0:
            raise ValueError("Expected a polygon of non-zero area")
        self.V = V if area > 0 else V[::-1].copy()        # counter-clockwise
        self.inputs = tuple(inputs)

    def contains(self, P):
        x, y = P[:, 0].numpy(), P[:, 1].numpy()
        inside = np.zeros(len(x), dtype=bool)
        on_edge = np.zeros(len(x), dtype=bool)
        V = self.V
        for (x0, y0), (x1, y1) in zip(V, np.roll(V, -1, 0)):
            crosses = ((y0 > y) != (y1 > y))
            xint = x0 + (y - y0) * (x1 - x0) / np.where(y1 != y0, y1 - y0, 1.0)
            inside ^= crosses & (x < xint)
            # points on an edge count as inside (a closed region)
            cross = (x1 - x0) * (y - y0) - (y1 - y0) * (x - x0)
            within = ((np.minimum(x0, x1) - 1e-12 <= x) & (x <= np.maximum(x0, x1) + 1e-12)
                      & (np.minimum(y0, y1) - 1e-12 <= y) & (y <= np.maximum(y0, y1) + 1e-12))
            on_edge |= within & (np.abs(cross) <= 1e-12 * max(1.0, np.hypot(x1 - x0, y1 - y0)))
        return torch.as_tensor(inside | on_edge)

    def bounds(self):
        return list(self.V.min(0)), list(self.V.max(0))

    def _edges(self):
        A, B = self.V, np.roll(self.V, -1, 0)
        return A, B, np.hypot(*(B - A).T)

    def perimeter(self):
        return float(self._edges()[2].sum())

    def _boundary(self, s):
        A, B, length = self._edges()
        cum = np.concatenate([[0.0], np.cumsum(length)]) / length.sum()
        k = np.clip(np.searchsorted(cum, s, side="right") - 1, 0, len(length) - 1)
        frac = (s - cum[k]) / (cum[k + 1] - cum[k])
        P = A[k] + frac[:, None] * (B[k] - A[k])
        tangent = (B[k] - A[k]) / length[k][:, None]
        N = np.stack([tangent[:, 1], -tangent[:, 0]], 1)     # outward for counter-clockwise
        return P, N

    def __repr__(self):
        return f"Polygon({len(self.V)} vertices)"


class Difference(Shape):
    """``A`` without ``B`` (a plate with a hole): points inside ``A`` and not strictly
    inside ``B``; its boundary is ``A``'s outside ``B`` and ``B``'s inside ``A``, with
    ``B``'s normals turned around."""

    def __init__(self, A, B):
        if tuple(A.inputs) != tuple(B.inputs):
            raise ValueError(f"Expected shapes of the same inputs; got {A.inputs} and "
                             f"{B.inputs}")
        self.A, self.B, self.inputs = A, B, tuple(A.inputs)

    def contains(self, P):
        strictly_in_B = self.B.contains(P)
        on_B = self._on_boundary_of_B(P)
        return self.A.contains(P) & (~strictly_in_B | on_B)

    def _on_boundary_of_B(self, P):
        if isinstance(self.B, Disk):
            c = torch.tensor(self.B.center, dtype=P.dtype)
            return (((P - c) ** 2).sum(-1).sqrt() - self.B.radius).abs() <= 1e-9
        return torch.zeros(P.shape[0], dtype=torch.bool)

    def bounds(self):
        return self.A.bounds()

    def perimeter(self):
        return self.A.perimeter() + self.B.perimeter()

    def _boundary(self, s):
        # spread by arc length over both boundaries, then keep the parts that bound A - B
        share = self.A.perimeter() / self.perimeter()
        outer = s < share
        PA, NA = self.A._boundary(s[outer] / share)
        PB, NB = self.B._boundary((s[~outer] - share) / (1 - share))
        keepA = ~self.B.contains(torch.as_tensor(PA)).numpy() | self._on_boundary_of_B(
            torch.as_tensor(PA)).numpy()
        keepB = self.A.contains(torch.as_tensor(PB)).numpy()
        return (np.concatenate([PA[keepA], PB[keepB]]),
                np.concatenate([NA[keepA], -NB[keepB]]))

    def boundary(self, n, seed=0, normals=False):
        # parts of each boundary may be dropped: oversample, then thin to n evenly
        P, N = Shape.boundary(self, 2 * n, seed, normals=True)
        while P.shape[0] < n:
            P, N = Shape.boundary(self, 2 * P.shape[0] + n, seed, normals=True)
        idx = torch.linspace(0, P.shape[0] - 1, n).round().long()
        return (P[idx], N[idx]) if normals else P[idx]

    def __repr__(self):
        return f"Difference({self.A!r}, {self.B!r})"


class TimeProduct(Shape):
    """A shape times a time interval: ``TimeProduct(Disk(...), t=(0, 1))``; inputs are the
    shape's then the time's. Its ``boundary`` is the shape's boundary at every time (the
    lateral boundary); :meth:`initial` gives points at the first time."""

    def __init__(self, shape, **time):
        if len(time) != 1:
            raise ValueError(f"Expected one time input, e.g. t=(0, 1); got {time}")
        (self.time, (t0, t1)), = time.items()
        self.shape, self.t0, self.t1 = shape, float(t0), float(t1)
        if not self.t0 < self.t1:
            raise ValueError(f"Expected t0 < t1; got {time}")
        self.inputs = tuple(shape.inputs) + (self.time,)

    def contains(self, P):
        t = P[:, -1]
        return self.shape.contains(P[:, :-1]) & (t >= self.t0 - 1e-12) & (t <= self.t1 + 1e-12)

    def bounds(self):
        low, high = self.shape.bounds()
        return low + [self.t0], high + [self.t1]

    def boundary(self, n, seed=0, normals=False):
        P, N = self.shape.boundary(n, seed, normals=True)
        t = torch.as_tensor(self.t0 + (self.t1 - self.t0) * _sobol(1, n, seed)[:, 0])
        P = torch.cat([P, t[:, None]], 1)
        N = torch.cat([N, torch.zeros_like(t)[:, None]], 1)
        return (P, N) if normals else P

    def initial(self, n, seed=0):
        """``n`` points of the shape at the first time."""
        P = self.shape.interior(n, seed)
        return torch.cat([P, torch.full((n, 1), self.t0, dtype=P.dtype)], 1)

    def __repr__(self):
        return f"TimeProduct({self.shape!r}, {self.time}=({self.t0}, {self.t1}))"
