r"""What drives each equation of a system: a source :math:`g_e` in :math:`\psi_e[f] = g_e`,
one part of :mod:`~pyro_pidkl.models.parts.sources` per equation.

A known source is subtracted from the equation's virtual observations
(:math:`v_e = g_e(Z) - b_e(Z)`); an unknown one, :math:`g_e \sim \mathcal{GP}(0, \rho_e^2
s_e^2 R_e)`, adds its covariance to the equation's block of the virtual observations
(:math:`\rho_e^2` the mean prior variance of the linearised operator over its rows, as for
one equation: :mod:`~pyro_pidkl.models.single.joint`), with :math:`s_e^2` learned. An
equation with a source other than zero is no longer the system's exact ODE: the shooting
stages, the stage keeper and the exact-ODE referee, which integrate it, are not run.

:class:`SystemSources` is a mixin of :class:`~pyro_pidkl.models.ConditionedSystemGP`.
"""

import torch
from pyro.nn import PyroModule, PyroParam
from torch.distributions import constraints

from ...kernels.se import se_ard
from ...physics.derivatives import Inputs
from ...physics.equation import source_columns
from ..parts.sources import ZeroSource, as_source

__all__ = ["SystemSources"]


class SystemSources:
    """Each equation's source (module docstring)."""

    def _set_sources(self, sources, priors):
        """Sources from ``sources`` (one part for every equation, or ``{equation index:
        part}``; strings and callables as :func:`~pyro_pidkl.models.parts.sources.as_source`
        takes them) for the system's :attr:`num_equations` equations; returns ``priors``
        with each GP source's own prior added."""
        E = self.num_equations
        if sources is None:
            sources = {}
        elif not isinstance(sources, dict):
            sources = {e: sources for e in range(E)}
        parts = [ZeroSource()] * E
        for e, spec in sources.items():
            if isinstance(e, bool) or not isinstance(e, int) or not 0 <= e < E:
                raise ValueError(f"Expected sources keyed by equation index 0..{E - 1}; got "
                                 f"{e!r}")
            parts[e] = as_source(spec)
        self.sources = parts
        self.gp_sources = [e for e, p in enumerate(parts) if p.kind == "gp"]
        priors = dict(priors or {})
        kernels = []
        for i, e in enumerate(self.gp_sources):
            inputs = "equation" if parts[e].inputs == "auto" else parts[e].inputs
            cols = source_columns(inputs, self.system, self.input_names)
            kern = se_ard(self.input_dim, cols, dtype=self.Z.dtype)
            kern.variance = PyroParam(torch.tensor(float(parts[e].variance), dtype=self.Z.dtype),
                                      constraints.positive)
            kernels.append(kern)
            if parts[e].prior is not None:
                priors.setdefault(f"source_kernels.{i}.variance", parts[e].prior)
        if kernels:
            self.source_kernels = PyroModule[torch.nn.ModuleList](kernels)
        known = [e for e, p in enumerate(parts) if p.kind == "known"]
        for e in known:                       # checked once, on the points
            g = self._source_at(e, self.Z)
            if g.shape[0] != self.Z.shape[0]:
                raise ValueError(f"Expected the source of equation {e} at the "
                                 f"{self.Z.shape[0]} collocation points; got shape "
                                 f"{tuple(g.shape)}")
        if known or self.gp_sources:          # psi = g: no longer the system's own exact ODE
            self.ode = None
        return priors

    def _source_values(self):
        """The known sources at the current collocation points ``(E, M)`` (zeros for the
        other equations; the points may be a subset while a fit screens), evaluated once per
        set of points: the objective reads them at every evaluation."""
        if not any(p.kind == "known" for p in getattr(self, "sources", ())):
            return self.Z.new_zeros(self.num_equations, self.Z.shape[0])
        key = (self.Z.data_ptr(), tuple(self.Z.shape))
        cached = getattr(self, "_source_cache", None)
        if cached is None or cached[0] != key:
            cached = (key, torch.stack([self._source_at(e, self.Z)
                                        for e in range(self.num_equations)]))
            self._source_cache = cached
        return cached[1]

    def _source_covariance(self, prior_var):
        r"""The GP sources' covariance on the equations' virtual rows ``(E M, E M)``, or
        ``None`` (``prior_var``: the prior variance of each row of the linearised
        operator, ``(E M,)``)."""
        if not getattr(self, "gp_sources", ()):          # (a model saved before sources)
            return None
        M = self.Z.shape[0]
        blocks = [self.Z.new_zeros(M, M) for _ in range(self.num_equations)]
        for kern, e in zip(self.source_kernels, self.gp_sources):
            blocks[e] = prior_var[e * M:(e + 1) * M].mean() * kern(self.Z_s)
        return torch.block_diag(*blocks)

    def _source_at(self, e, points):
        """Equation ``e``'s known source at ``points`` ``(P, d)`` (user units), zeros for
        another: ``(P,)``."""
        part = self.sources[e] if hasattr(self, "sources") else None
        if part is None or part.kind != "known":
            return points.new_zeros(points.shape[0])
        with torch.no_grad():
            return torch.as_tensor(part.g(Inputs(points, self.input_names)),
                                   dtype=points.dtype).reshape(-1)
