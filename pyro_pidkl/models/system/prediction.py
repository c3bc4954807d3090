r"""Predictions of a conditioned system: each output's posterior mean and variance given the
data and the system, with the coefficients' share of the variance once fitted
(:mod:`~pyro_pidkl.models.conditioning.parameter_uncertainty`). Pure: nothing is written.

:class:`SystemPrediction` is a mixin of :class:`~pyro_pidkl.models.ConditionedSystemGP`.
"""

import numpy as np
import torch

from ...checks import warn_if_interrupted
from ...param_scope import own_parameters
from ..conditioning.exact_band import exact_parameter_spread

__all__ = ["SystemPrediction"]


class SystemPrediction:
    """``model(Xnew)`` (module docstring)."""

    def _check_new_inputs(self, Xnew):
        X = torch.as_tensor(Xnew, dtype=self.Z.dtype)
        X = X[:, None] if X.dim() == 1 and self.input_dim == 1 else X
        if X.dim() != 2 or X.shape[1] != self.input_dim:
            raise ValueError(f"Expected Xnew of shape (P, {self.input_dim}) for inputs "
                             f"{self.input_names}; got {tuple(X.shape)}")
        return X

    @own_parameters
    def posterior_mean(self, Xnew):
        r"""The posterior means of every output at ``Xnew`` ``(P, d)`` in user units,
        without the variances (whose coefficients' share is a Laplace fit): ``(P, C)``."""
        U = (self._check_new_inputs(Xnew) - self.x_loc) / self.x_scale
        with torch.no_grad():
            joint = self.solve()[0]
            return torch.stack([self.y_loc[c] + self.y_scale[c] * (
                joint.mean(self._cross(joint, c, U)) + self.mean[c])
                for c in range(len(self.kernels))], 1)

    @own_parameters
    def forward(self, Xnew, noiseless=True):
        r"""Posterior means and variances of every output at ``Xnew`` ``(P, d)`` in user
        units: ``(mean, var)``, each ``(P, C)`` in the order of ``outputs`` (with
        ``noiseless=False`` the variance of a new observation). Pure: nothing is written."""
        U = (self._check_new_inputs(Xnew) - self.x_loc) / self.x_scale
        warn_if_interrupted(self)
        with torch.no_grad():
            joint = self.solve()[0]
            # the coefficients' uncertainty: the exact ODE's delta method where the referee
            # fitted it (else the spread between the parameters' sigma points, below)
            found = None
            if self.parameter_uncertainty and bool(self.fitted):
                found = exact_parameter_spread(self, (U * self.x_scale + self.x_loc)[:, 0]
                                               .numpy())
            means, variances = [], []
            for c, kern in enumerate(self.kernels):
                cross = self._cross(joint, c, U)
                mean = joint.mean(cross) + self.mean[c]
                var = joint.variance(cross, kern(U, diag=True))
                if found is not None:       # the exact ODE's share, and the gap to its path
                    share, path = (torch.as_tensor(v[c]).to(var) for v in found)
                    gap = mean - (path - self.y_loc[c]) / self.y_scale[c]
                    var = var + share / self.y_scale[c] ** 2 + gap.pow(2)
                else:   # an unobserved output's centre is a parameter: it moves between points
                    var = var + self._parameter_spread(
                        lambda at: at.mean(self._cross(at, c, U)) + self.mean[c])
                if not noiseless:
                    if c in self.count_outputs and self.likelihoods[c] == "lognormal":
                        raise ValueError(f"Expected noiseless=True for output "
                                         f"{self.outputs[c]!r}: its new observations are "
                                         f"log-normal, log y ~ N(log f, s^2) (s^2: "
                                         f"model.likelihood_parameters())")
                    if c in self.count_outputs:
                        raise ValueError(f"Expected noiseless=True for count output "
                                         f"{self.outputs[c]!r}: its new observations are "
                                         f"counts (model.predict_counts(X))")
                    var = var + self.noises()[c]
                means.append(self.y_loc[c] + self.y_scale[c] * mean)
                variances.append(self.y_scale[c] ** 2 * var)
            return torch.stack(means, 1), torch.stack(variances, 1)

    @own_parameters
    def predict_counts(self, Xnew, prob=0.9, num_draws=4000, seed=0):
        r"""Predictive intervals of new counts of every count output at ``Xnew`` ``(P, d)``:
        draws of the log-mean from its posterior (normal, the parameters' uncertainty
        included), then of the counts given it
        (:meth:`~pyro_pidkl.models.conditioning.counts.CountObservations._count_draws`).

        :returns: ``{output: (median, lower, upper)}``, each ``(P,)``, the central ``prob``
            interval."""
        counted = self._counted()
        mean, var = self(Xnew)
        rng = np.random.default_rng(seed)
        return {self.outputs[c]: self._count_draws(c, mean[:, c], var[:, c], prob, num_draws,
                                                   rng) for c in counted}

    @own_parameters
    def likelihood_parameters(self):
        r"""Each observed output's likelihood and its fitted parameter, in the user's units:
        ``{output: {"likelihood": kind, ...}}`` with ``"noise"`` (a Gaussian output's noise
        variance), ``"dispersion"`` (a negative binomial's :math:`r`) or ``"log_variance"``
        (a log-normal output's :math:`s^2`, the variance of :math:`\log y`)."""
        with torch.no_grad():
            noises = self.noises() * self.y_scale ** 2
            return {o: self._likelihood_entry(c, noises[c])
                    for c, o in enumerate(self.outputs) if self.counts[c]}

    # -- the series the count likelihoods read (conditioning.counts) -----------------------
    def _series_name(self, c):
        return f"output {self.outputs[c]!r}"

    def _series_units(self, c):
        return self.y_loc[c], self.y_scale[c]

    def _series_mean(self, joint, c):
        return joint.mean(self._cross(joint, c, self.X_s[c])) + self.mean[c]

    def _working_updated(self):
        """Nothing to do: ``y_s`` reads the working response when asked."""
