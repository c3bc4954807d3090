r"""The conditioned GP on fewer data (a maximin subset: a fit's starts are screened on it),
everything put back on leaving the ``with`` block; and what the collocation rows of
:mod:`~pyro_pidkl.models.conditioning.rows` (a subset to fit on, a refinement) read of one
equation's model.

:class:`Subsets` is a mixin of :class:`~pyro_pidkl.models.PhysicsConditionedGP`.
"""

import contextlib

import torch

from ...physics.collocation import maximin_subset
from ...physics.linearise import residual_parts

__all__ = ["Subsets"]


class Subsets:
    """The joint on subsets of its rows (module docstring)."""

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

    # -- the collocation rows (conditioning.rows) -----------------------------------------
    #: the tensors with a row per collocation point, and its axis
    collocation_buffers = {"Z": 0, "Z_s": 0, "f0": -1, "row_noise": 0}

    def _jet_at(self, joint, points):
        """The posterior mean's jet at ``points`` (user units), laid out as ``f0``."""
        return self._mean_jet(joint, self.standardizer.x_to_model(points))

    def _standardise(self, points):
        return self.standardizer.x_to_model(points)

    def _new_rows(self, count):
        """New equation points' relative residual noise: the model's (``-1``)."""
        return {"row_noise": self.row_noise.new_full((count,), -1.0)}

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

    # -- the residual between the collocation points (conditioning.resolution) ---------
    def _checked_equations(self):
        """Whether the equation's residual is checked (not with an unknown source, whose
        posterior mean *is* the residual)."""
        return self.source_kind != "gp"

    def _equations_owner(self):
        return self.equation

    def _residuals_at(self, jet, points):
        """``[(residual, size)]`` of the equation at ``points`` (user units) for the jet
        ``jet`` there (laid out as ``f0``; :func:`~pyro_pidkl.physics.linearise.residual_parts`)."""
        part = {idx: jet[k] for k, idx in enumerate(self.indices)}
        return [residual_parts(self.equation, part, points, self.input_names,
                               self._equation_source(points))]
