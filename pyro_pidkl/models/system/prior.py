r"""Each output's GP prior in a system and what the fit may do with it: its data
standardised (centre and size, :func:`~pyro_pidkl.physics.observations.output_scales`), its
SE-ARD kernel, its centre (learned where nobody measured it), its noise (a likelihood part
of :mod:`~pyro_pidkl.models.parts.likelihoods`: learned from ten data on, else held), and
the bounds on its lengthscale and prior variance.

:class:`SystemPrior` is a mixin of :class:`~pyro_pidkl.models.ConditionedSystemGP`.
"""

import math

import torch
from pyro.nn import PyroModule, PyroParam
from torch.distributions import constraints

from ...gp.data_fit import fit_data_only
from ...kernels.se import se_ard
from ...physics.collocation import half_spacing
from ...physics.observations import output_scales

__all__ = ["MAX_VARIANCE", "MIN_VARIANCE", "NOISE", "NOISE_FLOOR", "RESOLVED_SPACINGS",
           "SystemPrior", "noise_floor_of"]

#: each output's prior variance stays below this, in its standardised units (the data's
#: spread is 1): the residual noise is relative to the prior variance of the operator, so a
#: variance free to grow loosens every equation with it (on twenty years of lynx and hare
#: counts it reached 7e5, and the posterior mean missed the equation by 20-38% of its terms)
MAX_VARIANCE = 1e2

#: and above this: a prior whose spread is a tenth of the data's cannot hold them, and one
#: that collapses is a degenerate optimum (the README's spring ended at 4e-10 and 3e-11,
#: its coefficients then unidentified)
MIN_VARIANCE = 1e-2

#: the fewest collocation spacings a lengthscale spans (:meth:`ConditionedSystemGP._log_lengthscale_floor`):
#: an SE kernel at two spacings carries an equation between its points, at one it does not
RESOLVED_SPACINGS = 2.0

#: where a learned noise starts without a data-only fit, and a held one's value by default
#: (each output's standardised units)
NOISE = 1e-2

#: the noise's floor by default
NOISE_FLOOR = 1e-8


def noise_floor_of(likelihoods, default):
    """The one noise floor of a system's Gaussian outputs (:data:`NOISE_FLOOR` unless a
    likelihood part sets it; parts that set different floors are refused in one line)."""
    floors = {p.floor for p in [default, *likelihoods]
              if p.kind == "gaussian" and p.floor is not None}
    if len(floors) > 1:
        raise ValueError(f"Expected one noise floor for every Gaussian output of a system; got "
                         f"{sorted(floors)}")
    return floors.pop() if floors else NOISE_FLOOR


def _fill(held, index, learned):
    """``held`` ``(C,)`` with the entries at ``index`` replaced by ``learned`` (kept
    differentiable)."""
    if not index:
        return held
    return held.index_put((torch.tensor(index),), learned)


class SystemPrior:
    """The outputs' priors, noises and bounds (module docstring)."""

    def _set_outputs(self, parts, scales, default, dtype):
        """Each output's data in its standardised units, its SE-ARD kernel (started from a
        data-only fit where it has data), its centre and its noise, from ``parts``
        ``[(X_c, y_c)]``, ``scales`` and the likelihood parts (``default`` for outputs
        without their own)."""
        C = len(self.outputs)
        locs, sds = output_scales([y for _, y in parts], self.outputs, scales)
        self.X_by_output, self._y_user, self.X_s, self._y_std = [], [], [], []
        for (X, y), loc, sd in zip(parts, locs, sds):
            self.X_by_output.append(X)
            self._y_user.append(y)
            self.X_s.append((X - self.x_loc) / self.x_scale)
            self._y_std.append((y - loc) / sd)
        self.register_buffer("y_loc", torch.tensor(locs, dtype=dtype))
        self.register_buffer("y_scale", torch.tensor(sds, dtype=dtype))
        self.counts = [int(y.shape[0]) for y in self._y_user]
        # priors: one SE-ARD kernel per output, started from a data-only fit where there are
        # data (others at the observed outputs' median lengthscale)
        fits = [fit_data_only(U, y) if y.shape[0] >= 3 else None
                for U, y in zip(self.X_s, self._y_std)]
        found = [f.lengthscale for f in fits if f is not None]
        typical = (torch.stack(found).median(0).values if found
                   else torch.ones(self.input_dim, dtype=dtype))
        self.kernels = PyroModule[torch.nn.ModuleList](
            [se_ard(self.input_dim, dtype=dtype) for _ in self.outputs])
        with torch.no_grad():
            for kern, f in zip(self.kernels, fits):
                kern.lengthscale = PyroParam(
                    (f.lengthscale if f is not None else typical).clamp(0.05, 20.0).clone(),
                    constraints.positive)
        #: where each lengthscale started (a refinement of the collocation refits from here)
        self.lengthscale_starts = [k.lengthscale.detach().clone() for k in self.kernels]
        # an observed output's prior is centred on its data (0 after standardising); an
        # unobserved one's centre is learned
        self.mean_learned = [c for c in range(C) if not self.counts[c]]
        self.register_buffer("mean_held", torch.zeros(C, dtype=dtype))
        if self.mean_learned:
            self.mean_unobserved = PyroParam(torch.zeros(len(self.mean_learned), dtype=dtype))
        # noise: learned for outputs with enough data, held at its floor for the others
        noise_floor = noise_floor_of(self.likelihood_parts, default)
        gaussian = [p if p.kind == "gaussian" else None for p in self.likelihood_parts]
        # a count output's noise is its likelihood's: no Gaussian noise besides
        learned = [g is not None and (n >= 10 if g.learn is None else bool(g.learn) and n > 0)
                   for g, n in zip(gaussian, self.counts)]
        self.noise_learned = [c for c in range(C) if learned[c]]
        start = [max(f.noise_ratio, 10 * noise_floor) if f is not None else
                 (g.noise if g is not None and g.noise is not None else NOISE)
                 for f, g in zip(fits, gaussian)]
        # held: at its floor by default (too few data to tell noise from signal: one
        # initial value pins a trajectory), at its ``noise`` when the user holds it
        # (a count output's: as the default likelihood's, besides its working response)
        held = [noise_floor if h.learn is None else (NOISE if h.noise is None else h.noise)
                for h in (g or default for g in gaussian)]
        self.register_buffer("noise_held", torch.tensor(held, dtype=dtype))
        if self.noise_learned:
            self.noise = PyroParam(torch.tensor([start[c] for c in self.noise_learned],
                                                dtype=dtype),
                                   constraints.greater_than(float(noise_floor)))

    @property
    def mean(self):
        r""":math:`m_c`, each output's prior centre in standardised units ``(C,)``."""
        return _fill(self.mean_held, self.mean_learned, getattr(self, "mean_unobserved", None))

    def noises(self):
        """Each output's noise variance in its standardised units ``(C,)``."""
        return _fill(self.noise_held, self.noise_learned, getattr(self, "noise", None))

    def parameter_bounds(self):
        """Lengthscales stay above their floor (:meth:`_log_lengthscale_floor`); an observed output's prior variance
        between :data:`MIN_VARIANCE` and :data:`MAX_VARIANCE` of its data's; an unobserved
        output's is held where its scale (``scales``, or the shooting stage's trajectory)
        puts it: no datum says how large its prior should be, and the marginal likelihood,
        free to choose, shrank the README spring's velocity to 0.01 (its fit then missed
        the velocity by 1.4 at the start)."""
        out = {k.lengthscale_unconstrained: (self._log_lengthscale_floor(c), None)
               for c, k in enumerate(self.kernels)}
        out.update(self._held_coefficient_bounds())       # keep_best_stage holds them
        if getattr(self, "_tau_held", False) and "residual_noise" in self._pyro_params:
            u = float(self.residual_noise_unconstrained.detach())
            out[self.residual_noise_unconstrained] = (u, u)
        for c, k in enumerate(self.kernels):
            if self.counts[c]:
                out[k.variance_unconstrained] = (math.log(MIN_VARIANCE),
                                                 math.log(MAX_VARIANCE))
            else:               # no data: held where its scale (or its trajectory) puts it
                u = float(k.variance_unconstrained.detach())
                out[k.variance_unconstrained] = (u, u)
        return out

    def _log_lengthscale_floor(self, c=None):
        """The log of output ``c``'s lengthscale's lower bound in standardised units (default:
        the lowest of them): half the spacing of all the points; for an output nobody
        measured, or one observed as counts (whose data do not pin its lengthscale: the
        objective drives it to the lowest allowed), at least :data:`RESOLVED_SPACINGS`
        spacings of the equations' collocation points. Below that the equations hold at the
        points and not between them (the README spring's unmeasured velocity went to about
        one spacing at every collocation count tried, 200 to 800, and its equations then
        failed between the points by 15-28% of their terms; held at two spacings, 2.5%; the
        coefficients unchanged). An output measured with Gaussian noise keeps the lower
        bound: its data set its lengthscale, and FitzHugh-Nagumo's fast transitions need one
        under two spacings of the default points (held there, its predictions beyond the
        data fell from RMSE 0.02 to 0.5)."""
        half = half_spacing(sum(self.counts) + self.Z.shape[0], self.input_dim)
        if c is None:
            return math.log(half)
        if self.counts[c] and c not in self.count_outputs:
            return math.log(half)
        M = self.Z.shape[0] - getattr(self, "condition_rows", 0)
        return math.log(max(half,
                            RESOLVED_SPACINGS * 2 * half_spacing(max(M, 1), self.input_dim)))

    def _noise_is_learned(self):
        return bool(self.noise_learned)

    def _gaussian_series(self):
        """``[(name, c, y)]``: the outputs with Gaussian noise that is learned and data,
        those in user units (:func:`~pyro_pidkl.diagnostics.noise_model.noise_evidence`)."""
        return [(self.outputs[c], c, self._y_user[c]) for c in self.noise_learned
                if c not in self.count_outputs and self.counts[c]]

