r"""How tightly the equation holds: the residual part of a conditioned model.

The virtual observations are :math:`v = \mathcal{L} f(Z) + \epsilon_r`, the residual
:math:`\epsilon_r` of variance :math:`\tau` times the prior variance of
:math:`\mathcal{L} f` at each point (relative, so that :math:`\tau` means the same for any
equation and units). The default :math:`10^{-6}` holds the equation to 0.1% of that
standard deviation: much tighter and learned coefficients absorb the discretisation error,
their intervals too narrow.
"""

import math
from dataclasses import dataclass

__all__ = ["ResidualNoise", "as_residual"]


@dataclass(frozen=True)
class ResidualNoise:
    r""":math:`\tau`, held or learned above ``floor``."""

    value: float = 1e-6
    learn: bool = False
    floor: float = 1e-12

    def __post_init__(self):
        for what in ("value", "floor"):
            v = getattr(self, what)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
                    v > 0 and math.isfinite(v)):
                raise ValueError(f"Expected residual_noise{'' if what == 'value' else '_floor'}"
                                 f" > 0; got {v!r}")
        if self.learn not in (True, False):
            raise ValueError(f"Expected learn_residual_noise to be True or False; got "
                             f"{self.learn!r}")
        if self.learn and not self.value > self.floor:
            raise ValueError(f"Expected residual_noise ({self.value}) above "
                             f"residual_noise_floor ({self.floor})")


def as_residual(spec=None, learn_residual_noise=None, residual_noise_floor=None):
    """A :class:`ResidualNoise` from ``spec`` (a part, a number or ``None``) and the models'
    older keywords for its other fields."""
    extra = {k: v for k, v in (("learn", learn_residual_noise),
                               ("floor", residual_noise_floor)) if v is not None}
    if isinstance(spec, ResidualNoise):
        if extra:
            raise ValueError("Expected the residual's settings in pk.ResidualNoise(...) or as "
                             "keywords, not both")
        return spec
    return ResidualNoise(1e-6 if spec is None else spec, **extra)
