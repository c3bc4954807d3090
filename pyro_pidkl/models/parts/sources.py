r"""The source :math:`g` of :math:`\psi[f] = g`: the source parts of a conditioned model.

* :class:`ZeroSource`: the equation as written is the physics (:math:`g = 0`);
* :class:`KnownSource`: a known forcing :math:`g(x)`, a callable on an
  :class:`~pyro_pidkl.physics.derivatives.Inputs` (``x["t"]``) in user units returning
  ``(M,)``;
* :class:`GPSource`: an unknown forcing :math:`g \sim \mathcal{GP}(0, \rho^2 s_g^2 R)`,
  :math:`\rho^2` the mean prior variance of the linearised operator and :math:`s_g^2` a
  learned relative amplitude, over chosen inputs (``"auto"``: each non-empty subset of the
  inputs the equation differentiates is one start of the fit, the best kept: a source over
  every input can absorb the dynamics).

A string ``"zero"`` / ``"gp"`` or a callable is accepted for each (:func:`as_source`).
"""

import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

__all__ = ["GPSource", "KnownSource", "ZeroSource", "as_source"]


@dataclass(frozen=True)
class ZeroSource:
    """:math:`g = 0`: the equation as written is complete."""

    kind: ClassVar[str] = "zero"


@dataclass(frozen=True)
class KnownSource:
    """A known source ``g(x) -> (M,)`` in user units."""

    g: Callable
    kind: ClassVar[str] = "known"

    def __post_init__(self):
        if not callable(self.g):
            raise ValueError(f"Expected KnownSource's g to be a callable g(x); got {self.g!r}")


@dataclass(frozen=True)
class GPSource:
    """An unknown source with a GP prior.

    :param inputs: the inputs it depends on: names, ``"equation"`` (every input the equation
        differentiates) or ``"auto"`` (each non-empty subset of those tried, one start of the
        fit each, the best objective kept). A source over every input can absorb the
        dynamics (any residual is some source): a heat source that depends on position only,
        modelled over position and time, left the diffusivity 3.4 times off.
    :param float variance: the initial relative amplitude :math:`s_g^2`.
    :param prior: an optional ``pyro.distributions`` prior on :math:`s_g^2` (a MAP fit).
    """

    inputs: Any = "auto"
    variance: float = 0.1
    prior: Any = None
    kind: ClassVar[str] = "gp"

    def __post_init__(self):
        v = self.variance
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
                v > 0 and math.isfinite(v)):
            raise ValueError(f"Expected GPSource's variance to be a number > 0; got {v!r}")


def as_source(spec, **gp):
    """A source part from ``spec`` (a part, ``"zero"``, ``"gp"`` or a callable); ``gp`` are
    :class:`GPSource`'s fields where ``spec`` is ``"gp"`` (the models' older keywords
    ``source_inputs``, ``source_variance``, ``source_prior``)."""
    if isinstance(spec, (ZeroSource, KnownSource, GPSource)):
        if gp:
            raise ValueError(f"Expected the GP source's settings in pk.GPSource(...) or as "
                             f"source_* keywords, not both; got {sorted(gp)} beside {spec!r}")
        return spec
    if isinstance(spec, str) and spec == "zero":
        return ZeroSource()
    if isinstance(spec, str) and spec == "gp":
        return GPSource(**gp)
    if callable(spec):
        return KnownSource(spec)
    raise ValueError(f"Expected source to be 'zero', 'gp', a callable g(x) or a source part "
                     f"(pk.ZeroSource(), pk.KnownSource(g), pk.GPSource()); got {spec!r}")
