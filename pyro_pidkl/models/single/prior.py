r"""The GP prior of one output and what the fit holds of it: inputs standardised on the
domain, the kernel, the data's noise (learned, or held where a data-only fit finds the data
exact or there are too few to tell), the equation's residual noise and the source.

:class:`SinglePrior` is a mixin of :class:`~pyro_pidkl.models.PhysicsConditionedGP`; its
parts come from :mod:`~pyro_pidkl.models.parts`.
"""

import itertools
import math

import torch
from pyro.nn import PyroParam
from torch.distributions import constraints

from ...gp.standardise import Standardizer
from ...kernels.deep import deep_kernel
from ...kernels.derivatives import derivative_kernel_supported
from ...kernels.features import MLP
from ...kernels.se import se_ard
from ...physics.collocation import maximin_subset
from ...physics.equation import source_columns

__all__ = ["DATA_FIT_POINTS", "SinglePrior"]

#: the data-only fit that decides whether the noise is learned uses at most this many data
#: (a maximin subset): at N = 1000 the whole set cost 2 s of a 11 s fit
DATA_FIT_POINTS = 400


class SinglePrior:
    """The prior's parts and settings (module docstring)."""

    def _standardise_on_domain(self, standardize):
        """Inputs standardised by the domain box (its centre, and the spread of a uniform
        distribution on it), so that a kernel's lengthscale means the same wherever the data
        lie in it."""
        if not standardize:
            return
        low, high = self.domain.low, self.domain.high
        self.standardizer = Standardizer(self.X, self.y, True, x_loc=(low + high) / 2,
                                         x_scale=(high - low) / math.sqrt(12.0))
        self.X_s = self.standardizer.x_to_model(self.X)
        self.y_s = self.standardizer.y_to_model(self.y)

    def _make_kernel(self, kernel, feature_net):
        if kernel == "se":
            return se_ard(self.input_dim, dtype=self.X.dtype)
        if kernel == "deep":
            net = feature_net or MLP(self.input_dim, 20, dtype=self.X.dtype)
            with torch.no_grad():
                width = net(self.X_s[:1]).shape[-1]
            return deep_kernel(net, width, dtype=self.X.dtype)
        if isinstance(kernel, str) or not derivative_kernel_supported(kernel):
            raise ValueError(f"Expected kernel to be 'se', 'deep', an RBF kernel or a "
                             f"Warping(RBF) deep kernel; got {kernel!r}")
        return kernel

    def source_inputs(self):
        """The names of the inputs the ``"gp"`` source depends on (as fitted), or ``()``."""
        if self.source_kind != "gp":
            return ()
        active = list(self.source_kernel.active_dims)
        return tuple(self.input_names[j] for j in active if float(self.source_mask[j]) > 0)

    def prepare_fit(self):
        r"""Decide, once before a fit (:func:`~pyro_pidkl.infer.fit` calls it), whether a
        noise learned by default (``learn_noise=None``) is learned at all: data that an
        SE-ARD GP on the data alone (a maximin subset of at most :data:`DATA_FIT_POINTS`)
        interpolates with a noise under 0.1% of the signal
        (:func:`~pyro_pidkl.gp.data_fit.fit_data_only`; the boundary values of a PDE) are
        taken as exact, the noise held at its floor. Learned, it would take the physics'
        discretisation error for noise and give up the boundary values with it.

        :returns: the data-only fit (a :class:`~pyro_pidkl.gp.data_fit.DataFit`) or
            ``None``."""
        if not (self._noise_auto and "noise" in self._pyro_params) or self.count_outputs:
            return None
        from ...gp.data_fit import fit_data_only
        U, y = self.X_s, (self.y_s - self.prior_mean()).detach()
        if U.shape[0] > DATA_FIT_POINTS:     # whether data show noise: a subset tells
            keep = maximin_subset(U, DATA_FIT_POINTS)
            U, y = U[keep], y[keep]
        found = fit_data_only(U, y, self.noise_floor)
        if found is not None and found.exact:
            self._hold_noise(False, self.noise_floor, self.noise_floor)
        return found

    def _hold_noise(self, learn, noise, floor):
        """With ``learn_noise=None``, fewer than ten data cannot tell noise from signal (one
        initial value, two end values: the marginal likelihood takes whatever the physics
        does not fit exactly, discretisation error included, for noise): the data are then
        taken as exact, the noise held at its floor. ``False`` holds it at ``noise``."""
        self._noise_auto = learn is None
        if learn is None:
            learn = self.X.shape[0] >= 10
            noise = floor if noise is None else noise
        if learn:
            return
        noise = floor if noise is None else noise
        del self.noise
        self.register_buffer("noise", torch.tensor(float(max(noise, 1e-300)), dtype=self.X.dtype))
        self.learn_noise = False

    def _set_likelihood(self, part, noise, floor):
        """The data's likelihood part: Gaussian noise (learned or held, :meth:`_hold_noise`),
        or counts or log-normal data through a working response
        (:mod:`~pyro_pidkl.models.conditioning.counts`: the series ``c = 0``), whose
        variance is per datum and absolute: the kernel's variance is then learned, not
        profiled, the Gaussian noise held at its floor, and a fit's starts are not screened
        on a subset of the data (the working response is the whole series')."""
        kind = part.kind
        data = self.y.clone()                # the buffer becomes the working response
        if kind in ("poisson", "negative_binomial"):     # the counts back from log(y + 1/2)
            data = torch.round(self.y.exp() - 0.5)
        self._init_counts([kind], [(self.X, data)], {0: getattr(part, "variance", None)})
        if not self.count_outputs:
            self._hold_noise(part.learn, noise, floor)
            return
        self._hold_noise(False, floor, floor)
        self.profile_scale = False
        self.screen_data = None
        self._working_updated()

    def _working_updated(self):
        """The working response of count or log-normal data as the model's targets ``y``,
        ``y_s`` (:mod:`~pyro_pidkl.models.conditioning.counts`)."""
        with torch.no_grad():                # new tensors: y may be the caller's
            z = self._working(0)[0]
            self.y = z.clone()
            self.y_s = self.standardizer.y_to_model(z)

    def _series_name(self, c):
        return "y"

    def _series_units(self, c):
        return self.standardizer.y_loc, self.standardizer.y_scale

    def _series_mean(self, joint, c):
        return joint.mean(self._cross(joint, self.X_s)) + joint.c

    def _noise_is_learned(self):
        return "noise" in self._pyro_params

    def _gaussian_series(self):
        """``[(name, c, y)]``: the series with Gaussian noise that is learned, their data in
        user units (:func:`~pyro_pidkl.diagnostics.noise_model.noise_evidence`)."""
        if self.count_outputs or not self._noise_is_learned() or self.X.shape[0] == 0:
            return []
        return [("y", 0, self.y)]

    def _set_source(self, source):
        """The source part (:mod:`~pyro_pidkl.models.parts.sources`): a known function, or
        a GP's kernel over its inputs, with one start of the fit per candidate set of them
        (``inputs="auto"``)."""
        self.source_kind, self.source_fn = source.kind, getattr(source, "g", None)
        self.source_prior = getattr(source, "prior", None)
        self.source_candidates = [None]
        if self.source_kind == "gp":
            auto = source.inputs == "auto"
            cols = source_columns("equation" if auto else source.inputs, self.equation,
                                  self.input_names)
            self.source_kernel = se_ard(self.input_dim, cols, dtype=self.X.dtype)
            # which of the source kernel's inputs it uses (1) or is constant along (0); with
            # "auto" every non-empty subset is one start of the fit, the best objective kept
            self.register_buffer("source_mask", torch.ones(self.input_dim, dtype=self.X.dtype))
            if auto:
                self.source_candidates = [c for k in range(len(cols), 0, -1)
                                          for c in itertools.combinations(cols, k)]
            self.source_kernel.variance = PyroParam(
                torch.tensor(float(source.variance), dtype=self.X.dtype), constraints.positive)
