r"""The distribution :math:`p(Z)` of the collocation points, in the user's units.

``Box()`` (default) is uniform on the data's bounding box; ``Box(t=(0, 1))`` overrides
named inputs (others keep the data's range). ``Gaussian()`` is
:math:`\mathcal{N}(m_x, s_x^2)` per input (the data's mean and spread; the paper's choice
for normalised inputs), with named overrides ``Gaussian(x=(loc, scale))``.
"""

import copy

import torch
import pyro.distributions as dist

__all__ = ["Box", "Gaussian"]


class _Domain:
    def __init__(self, bounds=None, **named):
        bounds = dict(bounds or {})
        bounds.update(named)
        self.bounds = {}
        for name, pair in bounds.items():
            try:
                a, b = (float(v) for v in pair)
            except (TypeError, ValueError):
                raise ValueError(f"Expected a pair of numbers for input {name!r}; got {pair!r}") \
                    from None
            if not (torch.isfinite(torch.tensor([a, b])).all()):
                raise ValueError(f"Expected finite numbers for input {name!r}; got {pair!r}")
            self.bounds[name] = (a, b)

    def apply(self, fn):
        """A copy whose tensors (e.g. ``low``, ``high``) went through ``fn`` (e.g. a device
        move); used by ``model.to(device)``."""
        out = copy.copy(self)
        for name, value in vars(self).items():
            if isinstance(value, torch.Tensor):
                setattr(out, name, fn(value))
        return out

    def _check_names(self, input_names):
        unknown = [n for n in self.bounds if n not in input_names]
        if unknown:
            raise ValueError(f"The domain names inputs {tuple(unknown)} that the data does not "
                             f"have; the inputs are {tuple(input_names)}")

    def __repr__(self):
        return f"{type(self).__name__}({self.bounds})"


class Box(_Domain):
    """Uniform distribution on a box; bounds ``name=(low, high)`` in user units."""

    def resolve(self, X, input_names):
        """The box fixed against training inputs ``X`` ``(N, d)`` (a new object)."""
        self._check_names(input_names)
        low, high = X.min(0).values.clone(), X.max(0).values.clone()
        for j, name in enumerate(input_names):
            if name in self.bounds:
                a, b = self.bounds[name]
                if not a < b:
                    raise ValueError(f"Expected low < high for input {name!r}; got ({a}, {b})")
                dlo, dhi = float(low[j]), float(high[j])
                if b < dlo or a > dhi:
                    raise ValueError(
                        f"The domain of {name!r} is [{a:g}, {b:g}] but the data span "
                        f"[{dlo:g}, {dhi:g}]: they do not overlap")
                low[j], high[j] = a, b
        flat = (high <= low).nonzero().flatten().tolist()
        if flat:
            names = tuple(input_names[j] for j in flat)
            raise ValueError(f"The data have zero spread in inputs {names}; give their domain "
                             "explicitly, e.g. Box(name=(low, high))")
        out = copy.copy(self)
        out.low, out.high = low, high
        return out

    def distribution(self, m):
        """``(m, d)`` points drawn uniformly (one event)."""
        # no per-draw argument checks: the bounds were checked when the box was resolved
        return dist.Uniform(self.low, self.high, validate_args=False).expand(
            [m, self.low.shape[0]]).to_event(2)


class Gaussian(_Domain):
    """Independent normal per input; overrides ``name=(loc, scale)`` in user units."""

    def resolve(self, X, input_names):
        """The distribution fixed against training inputs ``X`` ``(N, d)`` (a new object)."""
        self._check_names(input_names)
        loc, scale = X.mean(0).clone(), X.std(0, unbiased=False).clone()
        for j, name in enumerate(input_names):
            if name in self.bounds:
                a, b = self.bounds[name]
                if not b > 0:
                    raise ValueError(f"Expected a positive scale for input {name!r}; got {b}")
                loc[j], scale[j] = a, b
        flat = (scale <= 0).nonzero().flatten().tolist()
        if flat:
            names = tuple(input_names[j] for j in flat)
            raise ValueError(f"The data have zero spread in inputs {names}; give their scale "
                             "explicitly, e.g. Gaussian(name=(loc, scale))")
        out = copy.copy(self)
        out.loc, out.scale = loc, scale
        return out

    def distribution(self, m):
        """``(m, d)`` independent normal points (one event)."""
        return dist.Normal(self.loc, self.scale, validate_args=False).expand(
            [m, self.loc.shape[0]]).to_event(2)
