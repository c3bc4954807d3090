r"""Where the equation is imposed: the collocation part of a conditioned model.

:class:`Collocation` holds the design of the points :math:`Z` at which
:math:`\psi[f](Z) = g(Z)` is conditioned on: how many (or the points themselves), how they
are laid out, and what a fit may do with them (condition on a maximin subset while it learns
the parameters; double them while the equation fails between them,
:mod:`~pyro_pidkl.models.conditioning.resolution`). An integer or a tensor is accepted for
it (:func:`as_collocation`).
"""

from dataclasses import dataclass
from typing import Any

import torch

from ...checks import is_count

__all__ = ["Collocation", "DESIGNS", "REFINE_DEFAULT", "as_collocation"]

#: how many times a fit doubles the collocation points by default while the equation fails
#: between them
REFINE_DEFAULT = 3

#: the layouts of the points
DESIGNS = ("sobol", "grid", "random")


@dataclass(frozen=True, eq=False)
class Collocation:
    """The collocation design.

    :param points: the number of points (default ``200 d``) or an ``(M, d)`` tensor of them
        in user units.
    :param str design: ``"sobol"`` (default), ``"grid"`` or ``"random"``.
    :param int seed: the design's seed.
    :param refine: how many times a fit may double the points while the equation fails
        between them (``"auto"``: the models' default, 3).
    :param fit_subset: with more points than this a fit learns the parameters on a maximin
        subset of this many, then solves with all (``"auto"``: the models' default, 600;
        ``None``: always all).
    """

    points: Any = None
    design: str = "sobol"
    seed: int = 0
    refine: Any = "auto"
    fit_subset: Any = "auto"

    def __post_init__(self):
        p = self.points
        if not (p is None or torch.is_tensor(p) or is_count(p)
                or hasattr(p, "__array__") or isinstance(p, (list, tuple))):
            raise ValueError(f"Expected collocation points to be a count or an (M, d) tensor; "
                             f"got {p!r}")
        if self.design not in DESIGNS:
            raise ValueError(f"Expected design to be one of {DESIGNS}; got {self.design!r}")
        if not (self.refine == "auto" or is_count(self.refine, 0)):
            raise ValueError(f"Expected refine to be 'auto' or an integer >= 0; got "
                             f"{self.refine!r}")
        if not (self.fit_subset in ("auto", None) or is_count(self.fit_subset)):
            raise ValueError(f"Expected fit_subset to be 'auto', None or an integer >= 1; got "
                             f"{self.fit_subset!r}")

    def refinements(self, default):
        """The number of doublings, ``default`` for ``"auto"``."""
        return default if self.refine == "auto" else int(self.refine)

    def subset(self, default):
        """The fit's subset size (``None``: all), ``default`` for ``"auto"``."""
        return default if self.fit_subset == "auto" else self.fit_subset


def as_collocation(spec, **settings):
    """A :class:`Collocation` from ``spec`` (a part, a count, points or ``None``) and the
    models' older keywords for its fields (``design``, ``seed``, ``collocation_refine``,
    ``fit_collocation``), which may not be given twice."""
    if isinstance(spec, Collocation):
        if settings:
            raise ValueError(f"Expected the collocation's settings in pk.Collocation(...) or "
                             f"as keywords, not both; got {sorted(settings)} beside it")
        return spec
    names = {"collocation_refine": "refine", "fit_collocation": "fit_subset"}
    return Collocation(spec, **{names.get(k, k): v for k, v in settings.items()})
