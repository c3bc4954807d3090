r"""What a GP conditioned on its data and on equations is, whatever their number: its Pyro
``model()``, its empty guide, its learned coefficients and the fit's starts over them.

:class:`~pyro_pidkl.models.PhysicsConditionedGP` (one output, one equation and its
conditions) and :class:`~pyro_pidkl.models.ConditionedSystemGP` (several outputs, a system)
both derive from :class:`ConditionedModel`; each supplies its joint
(``linearise(f0) -> (w, b)``, ``joint(w, b)``), its coefficients (``_coefficients()``:
``[(name, owner, parameter)]``) and its starts (``starts``, ``_begin_start``).
"""

import time

import pyro
import torch
from pyro.nn import PyroParam, pyro_method
from torch.distributions import constraints, transform_to

from ...infer.multistart import extra_shift
from .linearised import LinearisedConditioning
from .parameter_uncertainty import ParameterUncertainty

__all__ = ["ConditionedModel"]


class ConditionedModel(LinearisedConditioning, ParameterUncertainty):
    """The conditioned models' common part (module docstring)."""

    #: the objective has no sampled site: a deterministic, second-order fit applies
    deterministic = True
    #: the guide has no latent sites and learns nothing
    guide_is_prior = True

    @pyro_method
    def model(self):
        # psi[f](Z) ~= b(Z) + sum_a w_a(Z) d^a f(Z): each equation linearised around f0,
        # the posterior means' jets of the last Gauss-Newton step (exact when psi is linear)
        w, b = self.linearise(self.f0)
        # [v; y] ~ N(0, A): v = L f(Z) + e_r observed at g(Z) - b(Z) (one row per equation
        # and point), y = f(X) + e (each output's data with its own noise)
        joint = self.joint(w, b)
        # log p(y | v), the data under the GPs conditioned on the equations (log p(v, y)
        # with objective="joint"), plus the log priors
        pyro.factor("data", self._objective(joint))
        return joint

    #: the model's own story: a subclass that rewrites model() is an edit
    #: (:mod:`~pyro_pidkl.models.conditioning.edits`)
    model.own_story = True

    @pyro_method
    def guide(self):
        """No latent sites: kernels, noises, sources and coefficients are point estimates."""

    # -- the checks after a fit ------------------------------------------------------------
    #: what :meth:`after_fit` runs, in order: ``(name, stage(model, refit))``
    after_fit_stages = ()

    def after_fit(self, refit):
        """What :func:`~pyro_pidkl.infer.fit` calls when a fit ends: each of
        :attr:`after_fit_stages` (a system's stage keeper, the collocation's refinement, the
        exact-ODE referee), ``refit()`` fitting the model again from its state; the CPU
        seconds of each kept in ``model.stage_seconds``."""
        from ...checks import warn
        from ...errors import FitDivergedError, NonFiniteError, NotPositiveDefiniteError
        from .resolution import _restore, _snapshot
        self.stage_seconds = {}
        for name, stage in self.after_fit_stages:
            began = time.process_time()
            kept = _snapshot(self)
            try:
                stage(self, refit)
            except (FitDivergedError, NonFiniteError, NotPositiveDefiniteError) as e:
                # a refit that ran where the joint does not factor: back to the last good
                # point, the fit before this stage, said in one line
                _restore(self, kept)
                warn(f"The {name} stage after the fit of {self._what()} failed "
                     f"({type(e).__name__}: {str(e).splitlines()[0][:160]}): the fit before "
                     f"it is kept")
            self.stage_seconds[name] = time.process_time() - began

    def method_of_lines_check(self, nodes=256, prob=0.9):
        """The fitted equation integrated by the method of lines from the posterior's
        initial and boundary values and scored on the data beside this fit
        (:func:`~pyro_pidkl.models.conditioning.method_of_lines.method_of_lines_check`: an
        evolution PDE in one space input and time ``t``; others are refused in one line)."""
        from .method_of_lines import method_of_lines_check
        return method_of_lines_check(self, nodes=nodes, prob=prob)

    # -- the residual noise ----------------------------------------------------------------
    def _set_residual_noise(self, part):
        r""":math:`\tau` from a :class:`~pyro_pidkl.models.parts.residual.ResidualNoise`:
        held (a buffer), or learned above its floor (a system holds it through its fit's
        loose stages, ``_tau_held``)."""
        value = torch.tensor(float(part.value), dtype=self.Z.dtype)
        if part.learn:
            self.residual_noise = PyroParam(value, constraints.greater_than(float(part.floor)))
        else:
            self.register_buffer("residual_noise", value)
        self._tau_held = False

    def _set_tau(self, value):
        r"""Set :math:`\tau` (held or learned) to ``value``."""
        with torch.no_grad():
            if "residual_noise" in self._pyro_params:
                constraint = self._pyro_params["residual_noise"][0]
                self.residual_noise_unconstrained.copy_(transform_to(constraint).inv(
                    torch.as_tensor(value, dtype=self.Z.dtype)))
            else:
                self.residual_noise.fill_(value)
        self._cache = None

    # -- the learned coefficients ----------------------------------------------------------
    def _learned(self):
        return [name for name, _, _ in self._coefficients()]

    def coefficient_spec(self, name):
        """The :class:`~pyro_pidkl.physics.Parameter` of learned coefficient ``name``."""
        for n, owner, p in self._coefficients():
            if n == name:
                return owner.specs[p]
        raise KeyError(f"Expected a learned coefficient among {self._learned()}; got {name!r}")

    def _held_coefficient_bounds(self):
        """While ``_hold_coefficients`` is set (the referee and the stage keeper refit the GP
        at given coefficients), bounds that pin each scalar coefficient where it is."""
        out = {}
        if getattr(self, "_hold_coefficients", False):
            for _, owner, p in self._coefficients():
                u = getattr(owner, p + "_unconstrained")
                if u.numel() == 1:
                    out[u] = (float(u.detach()), float(u.detach()))
        return out

    # -- the fit's starts ------------------------------------------------------------------
    @property
    def default_restarts(self):
        """Further starts of :func:`~pyro_pidkl.infer.fit`: :attr:`starts` but the first."""
        return len(self.starts) - 1

    def restart(self, r):
        """Set up start ``r`` of a fit: the model's own part of :attr:`starts` ``[r]``
        (``_begin_start``, which returns the coefficients' move), then each learned
        coefficient moved by it in its unconstrained space; past the listed starts, each by
        its own factor (:func:`~pyro_pidkl.infer.multistart.extra_shift`)."""
        starts = self.starts
        shift = self._begin_start(r, starts[r % len(starts)])
        if r >= len(starts):
            shift = extra_shift(r, len(self._coefficients()))
        shifts = torch.as_tensor(shift, dtype=self.Z.dtype).expand(len(self._coefficients()))
        with torch.no_grad():
            for (_, owner, p), move in zip(self._coefficients(), shifts):
                getattr(owner, p + "_unconstrained").add_(move)
