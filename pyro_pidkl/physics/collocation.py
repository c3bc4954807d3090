r"""Point sets in a box: collocation points inside it and points on its boundary.

A box is :math:`\prod_j [a_j, b_j]` in the user's units, given as a resolved
:class:`~pyro_pidkl.physics.domain.Box` or as a :class:`~pyro_pidkl.physics.domain.Box`
whose every input is bounded together with the input names.
"""

import math
import warnings

import torch

from ..checks import positive_int

__all__ = ["boundary_points", "box_bounds", "collocation_points", "collocation_set",
           "half_spacing", "maximin_subset"]

_DESIGNS = ("sobol", "grid", "random")


def box_bounds(domain, input_names=None, dtype=torch.float64):
    r"""``(low, high)`` ``(d,)`` tensors of a box: a resolved
    :class:`~pyro_pidkl.physics.domain.Box`, or a :class:`~pyro_pidkl.physics.domain.Box` that
    bounds every one of ``input_names``."""
    if hasattr(domain, "low"):
        return domain.low, domain.high
    bounds = getattr(domain, "bounds", None)
    if bounds is None or input_names is None:
        raise TypeError(f"Expected a resolved Box, or a Box and input_names; got {domain!r}")
    missing = [n for n in input_names if n not in bounds]
    if missing:
        raise ValueError(f"Expected the box to bound every input {tuple(input_names)}; "
                         f"missing: {tuple(missing)}")
    low = torch.tensor([bounds[n][0] for n in input_names], dtype=dtype)
    high = torch.tensor([bounds[n][1] for n in input_names], dtype=dtype)
    if not bool((low < high).all()):
        raise ValueError(f"Expected low < high for every input; got {bounds}")
    return low, high


def _unit_points(d, count, design, seed, dtype):
    if design == "sobol":
        from scipy.stats import qmc
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # balance properties need 2^k points
            return torch.as_tensor(qmc.Sobol(d, scramble=True, seed=seed).random(count),
                                   dtype=dtype)
    if design == "random":
        g = torch.Generator().manual_seed(seed)
        return torch.rand(count, d, generator=g, dtype=dtype)
    n = math.ceil(count ** (1.0 / d) - 1e-9) if d else 1
    axis = torch.linspace(0, 1, n, dtype=dtype)
    return torch.cartesian_prod(*([axis] * d)).reshape(-1, d)


def collocation_points(domain, count, design="sobol", seed=0, input_names=None):
    r"""``count`` points in a box (user units): ``"sobol"`` (scrambled Sobol,
    :class:`scipy.stats.qmc.Sobol`), ``"grid"`` (a product grid with
    :math:`\lceil count^{1/d} \rceil` points per input, so possibly more than ``count``) or
    ``"random"`` (uniform).

    :param domain: a resolved :class:`~pyro_pidkl.physics.domain.Box`, or a Box bounding
        every one of ``input_names``.
    :returns: ``(M, d)``.
    """
    count = positive_int(count, "the number of collocation points")
    if design not in _DESIGNS:
        raise ValueError(f"Expected design to be one of {_DESIGNS}; got {design!r}")
    low, high = box_bounds(domain, input_names)
    u = _unit_points(low.shape[0], count, design, seed, low.dtype)
    return low + (high - low) * u


def collocation_set(collocation, domain, input_names, design="sobol", seed=0,
                    dtype=torch.float64, shape=None):
    """A model's collocation points from its ``collocation`` argument: ``None`` (``200 d``
    points), a count, or an ``(M, d)`` tensor of them in user units
    (:func:`given_points`); a count is a ``design`` in the resolved box ``domain``
    (:func:`collocation_points`) or, given a ``shape`` of
    :mod:`~pyro_pidkl.physics.geometry`, inside it (Sobol or random).

    :returns: ``(M, d)`` of ``dtype``.
    """
    if isinstance(collocation, torch.Tensor) or hasattr(collocation, "shape"):
        return given_points(collocation, input_names, dtype)
    count = positive_int(200 * len(input_names) if collocation is None else collocation,
                         "collocation")
    if shape is None:
        return collocation_points(domain, count, design, seed).to(dtype)
    if design == "grid":
        raise ValueError("Expected design 'sobol' or 'random' on a shape that is not a box; "
                         "got 'grid'")
    return shape.interior(count, seed).to(dtype)


def half_spacing(count, d):
    r"""Half the spacing of ``count`` points spread evenly over a box standardised to unit
    variance in each of its ``d`` inputs (sides :math:`\sqrt{12}`):
    :math:`\tfrac12 \sqrt{12} / count^{1/d}`. Below it an SE kernel's lengthscale sees
    each point alone (the models' lower bound on it)."""
    return 0.5 * math.sqrt(12.0) / count ** (1.0 / d)


def boundary_points(domain, count, seed=0, input_names=None, design="sobol"):
    r"""About ``count`` points on the boundary of a box (user units), spread over its faces
    in proportion to their areas (both ends of an interval in one dimension).

    Each face :math:`x_j = a_j` or :math:`x_j = b_j` gets
    :math:`\lceil count \cdot |F| / \sum |F| \rceil` points of a ``design`` on it; in one
    dimension the two end points.

    :param domain: as :func:`collocation_points`.
    :returns: ``(B, d)`` points, ``B >= min(count, 2 d)``.
    """
    count = positive_int(count, "the number of boundary points")
    low, high = box_bounds(domain, input_names)
    d = low.shape[0]
    if d == 1:
        return torch.stack([low, high])
    width = high - low
    areas = torch.stack([width.prod() / width[j] for j in range(d)])
    total = 2 * areas.sum()
    faces = []
    for j in range(d):
        n = max(1, math.ceil(count * float(areas[j] / total)))
        others = [k for k in range(d) if k != j]
        for side, value in ((0, low[j]), (1, high[j])):
            u = _unit_points(d - 1, n, design, seed + 2 * j + side, low.dtype)
            pts = torch.empty(u.shape[0], d, dtype=low.dtype)
            pts[:, others] = low[others] + width[others] * u
            pts[:, j] = value
            faces.append(pts)
    return torch.cat(faces)


def given_points(points, input_names, dtype=torch.float64):
    """Collocation points a user gives, checked: ``(M, d)`` (``(M,)`` for one input), at
    least one, finite; a one-line ``ValueError`` naming what came otherwise."""
    d = len(input_names)
    Z = torch.as_tensor(points, dtype=dtype)
    if Z.dim() == 1 and d == 1:
        Z = Z[:, None]
    if Z.dim() != 2 or Z.shape[1] != d or Z.shape[0] < 1:
        raise ValueError(f"Expected collocation points of shape (M, {d}) for inputs "
                         f"{tuple(input_names)}; got {tuple(Z.shape)}")
    if not bool(torch.isfinite(Z).all()):
        raise ValueError("Expected finite collocation points; got NaN/inf")
    return Z


def maximin_subset(points, count):
    r"""Indices of ``count`` of ``points`` ``(M, d)`` chosen greedily far apart (a maximin,
    or farthest-point, ordering: each next point maximises its distance to those already
    chosen, starting from the one nearest the centroid): a subset that covers the set
    evenly, whatever its design. ``(count,)`` long tensor; :math:`O(M \cdot count)`."""
    M = points.shape[0]
    count = min(int(count), M)
    P = points.detach()
    first = int(((P - P.mean(0)) ** 2).sum(1).argmin())
    chosen = [first]
    dist = ((P - P[first]) ** 2).sum(1)
    for _ in range(count - 1):
        nxt = int(dist.argmax())
        chosen.append(nxt)
        dist = torch.minimum(dist, ((P - P[nxt]) ** 2).sum(1))
    return torch.tensor(chosen, dtype=torch.long, device=points.device)
