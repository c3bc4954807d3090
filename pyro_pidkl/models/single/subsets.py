r"""The conditioned GP on fewer rows: a maximin subset of the collocation points (a fit of a
large problem learns its parameters on it) or of the data (a fit's starts are screened on
it), everything put back on leaving the ``with`` block; and on more collocation points (a
refinement, :mod:`~pyro_pidkl.models.conditioning.resolution`).

:class:`Subsets` is a mixin of :class:`~pyro_pidkl.models.PhysicsConditionedGP`.
"""

import contextlib
import math

import torch

from ...errors import NonFiniteError, NotPositiveDefiniteError
from ...physics.collocation import maximin_subset

__all__ = ["Subsets"]


class Subsets:
    """The joint on subsets of its rows (module docstring)."""

    @contextlib.contextmanager
    def collocation_subset(self, count):
        r"""Condition on ``count`` of the collocation points (a maximin subset,
        :func:`~pyro_pidkl.physics.collocation.maximin_subset`) inside the ``with`` block;
        on leaving it, all points are back and the linearisation point is the subset
        solution's posterior mean at all of them. Used by :func:`~pyro_pidkl.infer.fit` to
        learn the parameters of a large problem."""
        M = self.Z.shape[0]
        E = M - self.condition_rows
        if count is None or count >= E:
            yield self
            return
        eq_idx = maximin_subset(self.Z_s[:E], count)
        idx = torch.cat([eq_idx, torch.arange(E, M, device=self.Z.device)])
        Z, Z_s, f0, row_noise = self.Z, self.Z_s, self.f0, self.row_noise
        self.Z, self.Z_s, self.f0 = Z[idx], Z_s[idx], f0[:, idx].clone()
        self.row_noise = torch.cat([row_noise[eq_idx], row_noise[E:]])
        self._cache = None
        try:
            yield self
        finally:
            full = f0
            try:
                with torch.no_grad():
                    joint, _, result = self._gauss_newton(self.f0)
                    if math.isfinite(result.change):
                        full = self._mean_jet(joint, U=Z_s)
            except (NonFiniteError, NotPositiveDefiniteError):
                pass
            self.Z, self.Z_s, self.f0 = Z, Z_s, full
            self.row_noise = row_noise
            self._cache = None

    @contextlib.contextmanager
    def data_subset(self, count):
        r"""Condition on ``count`` of the data (a maximin subset of their inputs,
        :func:`~pyro_pidkl.physics.collocation.maximin_subset`) inside the ``with`` block; on
        leaving it, all data are back. Used by :func:`~pyro_pidkl.infer.fit` to screen the
        starts of a fit on many data (:attr:`screen_data`): the screen only ranks the
        starts, and the best is then fitted to all the data."""
        N = self.X.shape[0]
        if count is None or count >= N:
            yield self
            return
        keep = maximin_subset(self.X_s, count)
        with self._attributes_held({name: getattr(self, name)[keep]
                                    for name in ("X", "y", "X_s", "y_s")}):
            yield self

    # -- more rows: the collocation refined (conditioning.resolution) ----------------------
    #: the tensors with a row (or column) per collocation point
    collocation_buffers = ("Z", "Z_s", "f0", "row_noise")

    def _insert_collocation(self, new):
        """Append collocation points ``new`` (user units) to the equation's, with the current
        posterior mean's jet there as their linearisation point."""
        E = self.Z.shape[0] - self.condition_rows
        with torch.no_grad():
            joint = self.solve()[0]
            new_s = self.standardizer.x_to_model(new)
            jet = self._mean_jet(joint, new_s)
            self.Z = torch.cat([self.Z[:E], new, self.Z[E:]])
            self.Z_s = torch.cat([self.Z_s[:E], new_s, self.Z_s[E:]])
            self.f0 = torch.cat([self.f0[:, :E], jet, self.f0[:, E:]], 1)
            self.row_noise = torch.cat([self.row_noise[:E],
                                        self.row_noise.new_full((new.shape[0],), -1.0),
                                        self.row_noise[E:]])
        self._cache = None

    def _restart_lengthscales(self):
        """An SE kernel's lengthscales back at their start (1 in standardised units), the
        linearisation point at the data's: a fit that ended at lengthscales under the
        spacing (the equation held at the points only) stays there when refitted from
        them."""
        kern = self.kernel
        if getattr(kern, "kern", None) is not None or not hasattr(kern,
                                                                  "lengthscale_unconstrained"):
            return
        with torch.no_grad():
            kern.lengthscale_unconstrained.fill_(0.0)
            self.f0_set.fill_(False)
        self._cache = None
