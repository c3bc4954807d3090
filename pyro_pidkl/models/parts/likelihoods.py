r"""How an output's data arise from its function: the likelihood parts of a conditioned model.

Each is a small immutable object taken per output (``likelihoods={"x": pk.Poisson()}`` on a
system, ``likelihood=pk.GaussianNoise(noise=1e-3)`` on one equation):

* :class:`GaussianNoise`: :math:`y_i = f(x_i) + \epsilon_i`, :math:`\epsilon_i \sim
  \mathcal{N}(0, \sigma^2)`, with :math:`\sigma^2` relative to the output's spread (its
  standardised units): where a learned noise starts, or its value when held, its floor, and
  whether it is learned (``None``: from ten data on, as one initial value cannot tell noise
  from signal);
* :class:`Poisson`: :math:`y_i \sim \mathrm{Poisson}(e^{f(x_i)})`, the output the log of the
  counts' mean;
* :class:`NegativeBinomial`: :math:`y_i \sim \mathrm{NB}(\mu_i = e^{f(x_i)}, r)`, variance
  :math:`\mu + \mu^2 / r`, the dispersion :math:`r` learned;
* :class:`LogNormalNoise`: :math:`\log y_i \sim \mathcal{N}(\log f(x_i), s^2)`, a positive
  output with multiplicative noise, :math:`s^2` learned (the system stays written for
  :math:`f`, not rewritten for its log).

Counts and log-normal data are conditioned on through a Gaussian working response (the
Laplace approximation:
:mod:`~pyro_pidkl.models.conditioning.counts`).
"""

import math
from dataclasses import dataclass
from typing import ClassVar

__all__ = ["GaussianNoise", "LIKELIHOODS", "LogNormalNoise", "NegativeBinomial", "Poisson",
           "as_likelihood"]


@dataclass(frozen=True)
class GaussianNoise:
    """Gaussian noise of relative variance ``noise`` (the output's standardised units).

    :param float noise: where a learned noise starts (default: a data-only fit's ratio, else
        the model's default), or its value when held (default: ``floor``).
    :param float floor: the noise's lower bound (default: the model's; exact data, boundary
        values, are then fitted exactly).
    :param learn: learn it (``True``), hold it (``False``), or (``None``) learn it from ten
        data on.
    """

    noise: float = None
    floor: float = None
    learn: bool = None
    kind: ClassVar[str] = "gaussian"

    def __post_init__(self):
        for what in ("noise", "floor"):
            v = getattr(self, what)
            if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool)
                                      and v > 0 and math.isfinite(v)):
                raise ValueError(f"Expected the Gaussian likelihood's {what} to be a number > 0 "
                                 f"or None; got {v!r}")
        if self.learn not in (None, True, False):
            raise ValueError(f"Expected the Gaussian likelihood's learn to be True, False or "
                             f"None; got {self.learn!r}")


@dataclass(frozen=True)
class Poisson:
    """Poisson counts whose mean is :math:`e^{f}` (the output is the log of the mean)."""

    kind: ClassVar[str] = "poisson"


@dataclass(frozen=True)
class NegativeBinomial:
    """Negative-binomial counts of mean :math:`e^{f}`, their dispersion learned."""

    kind: ClassVar[str] = "negative_binomial"


@dataclass(frozen=True)
class LogNormalNoise:
    r"""Multiplicative noise: :math:`\log y \sim \mathcal{N}(\log f, s^2)`, the data and
    :math:`f` positive, :math:`s^2` learned (from the data's own scatter, ``variance``:
    where it starts, if given)."""

    variance: float = None
    kind: ClassVar[str] = "lognormal"

    def __post_init__(self):
        v = self.variance
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                              or not (v > 0 and math.isfinite(v))):
            raise ValueError(f"Expected LogNormalNoise's variance to be a number > 0 or None; "
                             f"got {v!r}")


#: each likelihood by the name a string may give it
LIKELIHOODS = {"gaussian": GaussianNoise, "poisson": Poisson, "negative_binomial": NegativeBinomial,
               "lognormal": LogNormalNoise}


def as_likelihood(spec, what="the likelihood"):
    """A likelihood part from ``spec``: a part, its name (``"poisson"``), or ``None``
    (:class:`GaussianNoise`); else a one-line error naming ``what``."""
    if spec is None:
        return GaussianNoise()
    if isinstance(spec, str) and spec in LIKELIHOODS:
        return LIKELIHOODS[spec]()
    if isinstance(spec, tuple(LIKELIHOODS.values())):
        return spec
    raise ValueError(f"Expected {what} to be pk.GaussianNoise(), pk.Poisson(), "
                     f"pk.NegativeBinomial(), pk.LogNormalNoise() or one of "
                     f"{', '.join(map(repr, LIKELIHOODS))}; "
                     f"got {spec!r}")
