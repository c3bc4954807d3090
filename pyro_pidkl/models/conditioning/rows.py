r"""The collocation rows of a conditioned model, one equation's or a system's: a maximin subset
of them to fit on (a large problem learns its parameters on it, then Gauss-Newton runs at all
of them) and more of them where the equation fails between them (a refinement,
:mod:`~pyro_pidkl.models.conditioning.resolution`).

The equations' points are the first rows of :math:`Z`, the conditions' points the last
``condition_rows``; a subset or a refinement changes the first and keeps the last. Each
tensor with a row per point is named in ``collocation_buffers`` (``{name: axis}``: ``Z``,
``Z_s``, the linearisation point ``f0`` along its last axis, one equation's relative residual
noise per row ``row_noise``).

:class:`CollocationRows` is a mixin of both conditioned models, which provide
``_jet_at(joint, points)`` (the posterior means' jets at points in user units, laid out as
``f0``), ``_standardise(points)`` and ``_new_rows(count)`` (further tensors' values for new
points, ``{name: tensor}``).
"""

import contextlib
import math

import torch

from ...errors import NonFiniteError, NotPositiveDefiniteError
from ...physics.collocation import maximin_subset

__all__ = ["CollocationRows", "FIT_COLLOCATION"]

#: a fit with more collocation points than this learns on a maximin subset of this many
FIT_COLLOCATION = 600


class CollocationRows:
    """Subsets and refinements of the collocation points (module docstring)."""

    def _equation_rows(self):
        """The number of points the equations hold at (the conditions' after them)."""
        return self.Z.shape[0] - getattr(self, "condition_rows", 0)

    @contextlib.contextmanager
    def collocation_subset(self, count):
        r"""Condition on ``count`` of the equations' collocation points (a maximin subset,
        :func:`~pyro_pidkl.physics.collocation.maximin_subset`; the conditions' points all)
        inside the ``with`` block; on leaving it, all points are back and the linearisation
        point is the subset solution's posterior mean at all of them. Used by
        :func:`~pyro_pidkl.infer.fit` to learn the parameters of a large problem."""
        E = self._equation_rows()
        if count is None or count >= E:
            yield self
            return
        keep = maximin_subset(self.Z_s[:E], count)
        full = {n: getattr(self, n) for n in self.collocation_buffers}
        for n, axis in self.collocation_buffers.items():
            x = full[n]
            setattr(self, n, torch.cat([x.index_select(axis % x.dim(), keep),
                                        x.narrow(axis % x.dim(), E, x.shape[axis] - E)], axis))
        self._cache = None
        try:
            yield self
        finally:
            f0 = full["f0"]
            try:
                with torch.no_grad():
                    joint, _, result = self._gauss_newton(self.f0)
                    if math.isfinite(result.change):
                        f0 = self._jet_at(joint, full["Z"])
            except (NonFiniteError, NotPositiveDefiniteError):
                pass
            for n in self.collocation_buffers:
                setattr(self, n, full[n])
            self.f0 = f0
            self._cache = None

    def _insert_collocation(self, new):
        """Collocation points ``new`` (user units) added after the equations' points (before
        the conditions'), with the current posterior means' jets there as their
        linearisation point."""
        E = self._equation_rows()
        with torch.no_grad():
            values = {"Z": new, "Z_s": self._standardise(new),
                      "f0": self._jet_at(self.solve()[0], new),
                      **self._new_rows(new.shape[0])}
            for n, axis in self.collocation_buffers.items():
                x = getattr(self, n)
                d = axis % x.dim()
                setattr(self, n, torch.cat([x.narrow(d, 0, E), values[n],
                                            x.narrow(d, E, x.shape[d] - E)], axis))
        self._cache = None

    def _new_rows(self, count):
        return {}
