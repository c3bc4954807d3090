r"""What a GP conditioned on a linearised equation (or system) does with it: damped
Gauss-Newton to the posterior mean, the pure, cached solution at the current parameters,
the one method that moves the linearisation point, and the check that the fitted model's
data and equation agree. The parameters' priors and Laplace uncertainty are
:mod:`~pyro_pidkl.models.conditioning.parameter_uncertainty`'s.

:class:`LinearisedConditioning` is a mixin of
:class:`~pyro_pidkl.models.PhysicsConditionedGP` and
:class:`~pyro_pidkl.models.ConditionedSystemGP`. The host provides the maths of its own
model: ``operators()``, ``linearise(f0)`` -> ``(w, b)``, ``joint(w, b, closed_form=,
operators=)``, ``_mean_jet(joint)`` and ``_data_jet()`` (jets whose last axis runs over the
collocation points and whose second-to-last over ``indices``), ``_residual_size(f0)``,
``_residual_parts(jet)``, ``_log_evidence_ratio()``, ``_objective(joint)`` and ``_what()``
(how messages name it); and the state ``f0``, ``f0_set``, ``linear``, ``indices``,
``newton_tol``, ``newton_max_iter``, ``_cache``.
"""

import contextlib
import math

import torch

from ...checks import positive_int, warn
from ...diagnostics.adequacy import Adequacy, ModelMisfitWarning
from ...diagnostics.noise_model import noise_evidence, noise_rejected
from ...errors import ConvergenceWarning, NonFiniteError, NotPositiveDefiniteError
from ...param_scope import own_parameters
from ...physics.collocation import maximin_subset
from ...physics.linearise import relative

__all__ = ["ConvergenceWarning", "GaussNewtonResult", "LinearisedConditioning"]


class GaussNewtonResult:
    """What a Gauss-Newton run did: ``iterations``, ``converged``, ``change`` (the last
    relative change of the linearisation point)."""

    def __init__(self, iterations, converged, change, refined=False):
        self.iterations, self.converged, self.change = iterations, converged, change
        #: the model's approximation of its objective was refined first (more inducing
        #: points): the objective changed, a fit should run again
        self.refined = refined

    def __repr__(self):
        return (f"GaussNewtonResult(iterations={self.iterations}, converged={self.converged}, "
                f"change={self.change:.3g})")


#: the starts (lengthscales, standardised units) of the data-only GP that the adequacy
#: check's evidence compares with: the best of them is kept
REFERENCE_LENGTHSCALES = (1.0, 0.3, 0.1)


class LinearisedConditioning:
    """Gauss-Newton, the cached solution, the objective and the adequacy check, shared by the
    conditioned models (module docstring)."""

    #: the objective is maximised over the kernel's variance (every covariance is relative to
    #: it): the single-output model's, whose noise is relative to its signal; a system's
    #: outputs each keep their own
    profile_scale = False

    def _objective(self, joint):
        r"""The fit's objective at ``joint``: :math:`\log p(y \mid v)` (``objective=
        "conditional"``) or :math:`\log p(v, y)` (``"joint"``), maximised over the kernel's
        variance where :attr:`profile_scale`, plus the log priors (``log_prior()``)."""
        if self.objective == "conditional":
            value = joint.log_prob_data_given_virtual(profile=self.profile_scale)
        else:
            value = joint.log_prob(profile=self.profile_scale)
        return value + self.log_prior()

    def _set_newton(self, newton_tol, newton_max_iter):
        """Gauss-Newton's tolerance (> 0) and largest number of iterations, checked."""
        if not newton_tol > 0:
            raise ValueError(f"Expected newton_tol > 0; got {newton_tol!r}")
        self.newton_tol = float(newton_tol)
        self.newton_max_iter = positive_int(newton_max_iter, "newton_max_iter")

    def _warn_unused(self, unused, residual="residual", of="equation"):
        """One line naming each learned coefficient in ``unused`` (found by
        :func:`~pyro_pidkl.physics.linearise.unused_coefficients`): the residual never
        depends on it, and the fit cannot move it."""
        if unused:
            warn(f"{', '.join(unused)} never enter{'s' if len(unused) == 1 else ''} the "
                 f"{residual} of {self._what()}: the fit cannot learn "
                 f"{'it' if len(unused) == 1 else 'them'} (fix them, or check the {of})")

    def _check_right_hand_sides(self):
        """Refuse, in one line and before any fit, what no fit can mend: a condition whose
        values are not finite, and a problem that ``f = 0`` solves exactly (every datum zero,
        and the equations and conditions zero at the zero function: their sources too), where
        the kernel's scale runs to zero and the objective to infinity for any coefficients."""
        with torch.no_grad():
            rhs = self.source() if hasattr(self, "source") else None
            if rhs is not None and not bool(torch.isfinite(rhs).all()):
                bad = [c.name for c, (start, stop, _, _) in zip(self.conditions,
                                                                self._blocks()[1:])
                       if not bool(torch.isfinite(rhs[start:stop]).all())]
                what = (f"condition {', '.join(map(repr, bad))}" if bad else "the source")
                raise ValueError(f"Expected finite values of {what}; got "
                                 f"{int((~torch.isfinite(rhs)).sum())} NaN/inf of "
                                 f"{rhs.numel()}")
            ys = getattr(self, "y_by_output", None) or [self.y]
            if sum(y.numel() for y in ys) == 0 or any(bool((y != 0).any()) for y in ys):
                return
            _, b = self.linearise(torch.zeros_like(self.f0))
            v = (rhs if rhs is not None else 0.0) - b
            if bool((v != 0).any()):
                return
        raise ValueError(f"Expected data, a source or a condition that is not zero "
                         f"everywhere; got every datum 0 and {self._what()} zero at f = 0: "
                         f"f = 0 fits both exactly for any coefficients, and the fit's scale "
                         f"would collapse to zero (nothing to learn)")

    @contextlib.contextmanager
    def collocation_held_to(self, count):
        r"""Condition on ``count`` of the equation's collocation points (a maximin subset;
        a condition's points all kept) inside the ``with`` block, and put everything back
        exactly on leaving it: the linearisation point is the stored one's restriction to
        the subset, and nothing is written. What a sampler uses to evaluate the density at
        a fraction of the cost (:func:`~pyro_pidkl.infer.nuts.sample_coefficients`, which
        corrects its draws by importance weights at all points)."""
        M = self.Z.shape[0]
        E = M - getattr(self, "condition_rows", 0)
        if count is None or count >= E:
            yield self
            return
        eq_idx = maximin_subset(self.Z_s[:E], int(count))
        idx = torch.cat([eq_idx, torch.arange(E, M, device=self.Z.device)])
        held = {name: getattr(self, name)[..., idx] if name == "f0" else getattr(self, name)[idx]
                for name in ("Z", "Z_s", "f0", "row_noise") if hasattr(self, name)}
        with self._attributes_held(held):
            yield self

    @contextlib.contextmanager
    def _attributes_held(self, values):
        """The model's attributes set to ``values`` ``{name: value}`` inside the ``with``
        block (the cached solution dropped), the old ones put back on leaving it."""
        saved = {name: getattr(self, name) for name in values}
        for name, value in values.items():
            setattr(self, name, value)
        self._cache = None
        try:
            yield self
        finally:
            for name, value in saved.items():
                setattr(self, name, value)
            self._cache = None

    def _gauss_newton(self, f0, max_iter=None):
        r"""Damped Gauss-Newton from ``f0`` at the current parameters, in local variables:
        ``(joint, f0, GaussNewtonResult)`` with ``f0`` the posterior mean's jet of ``joint``,
        which is linearised at a point within the tolerance of it.

        Each step moves the linearisation point towards the posterior mean of the
        equation linearised there, :math:`f_0 + \lambda (f_{new} - f_0)`, with the largest
        :math:`\lambda \in \{1, \tfrac12, \dots, 2^{-6}\}` that does not raise the
        equation's residual at the collocation points (by more than 1%: near the solution it
        sits on a floor set by the data and the residual noise, where it moves with
        rounding), and the full step once steps are
        below ``1e-3``: the full step near the solution (fast convergence), a
        shorter one where the linearisation is poor (a strong nonlinearity far from the
        solution, where full steps oscillate). Where no :math:`\lambda` lowers the residual,
        the fixed point ahead has a larger residual than this point (the equation gives way
        to the data there), and the full step is taken if the iteration contracts (the next
        step is shorter): damping would only creep towards it, and the objective would be
        read at a linearisation that is no fixed point. Steps are measured relative to the
        size of each row of the jet, on the rows of order 0 and 1; converged below
        ``newton_tol``."""
        with torch.no_grad():
            ops = self.operators()
            if not self.linear and not bool(self.f0_set):
                f0 = self._data_jet()
            if self.linear:
                return (self.joint(*self.linearise(f0), operators=ops), f0,
                        GaussNewtonResult(0, True, 0.0))
            change = math.inf
            merit = self._residual_size(f0)
            # convergence is judged on the jet's rows of order 0 and 1 where there are any:
            # second derivatives of the posterior mean carry the rounding of an ill-
            # conditioned joint (1e-4 relative), which would never settle below a tolerance
            orders = torch.tensor([len(i) for i in self.indices])
            low = orders <= 1 if bool((orders <= 1).any()) else orders >= 0
            ahead = None          # the joint linearised at f0 already (a contraction test's)
            for it in range(1, (max_iter or self.newton_max_iter) + 1):
                joint = ahead if ahead is not None else self.joint(*self.linearise(f0),
                                                                   operators=ops)
                ahead = None
                new = self._mean_jet(joint)
                step = new - f0
                size = new.abs().amax(-1, keepdim=True).clamp(min=1e-300)
                full = float((step.abs() / size)[..., low, :].max())
                lam = 1.0
                while True:
                    candidate = f0 + lam * step
                    value = self._residual_size(candidate)
                    # near the solution (a step below 1e-3) the full step is taken: the
                    # residual no longer falls there (data and equation balance), and
                    # Gauss-Newton converges fast
                    if full <= 1e-3 or value <= 1.01 * merit \
                            or lam <= 2 ** -6 or not math.isfinite(merit):
                        break
                    lam *= 0.5
                if lam <= 2 ** -6 and value > 1.01 * merit:
                    # no step along this direction lowers the residual: the fixed point ahead
                    # is one where the equation gives way to the data (its residual above
                    # this point's), and damping would only creep towards it; the full step
                    # is taken where it contracts the iteration (the next step shorter)
                    ahead = self._contracting(f0 + step, full, ops, low)
                    if ahead is not None:
                        lam, candidate = 1.0, f0 + step
                        value = self._residual_size(candidate)
                change = lam * full
                if not math.isfinite(change) or not math.isfinite(value):
                    break
                f0, merit = candidate, value
                if change <= self.newton_tol:
                    # the joint of this step: linearised within the tolerance of the
                    # returned point, whose jet is its posterior mean (one factorisation
                    # fewer than linearising again)
                    return joint, f0, GaussNewtonResult(it, True, change)
            return joint, f0, GaussNewtonResult(it, False, change)

    def _contracting(self, trial, full, ops, low):
        """The joint linearised at the full step's point ``trial`` where the step from there
        is shorter than ``full`` (the fixed-point iteration contracts), else ``None``."""
        try:
            joint = self.joint(*self.linearise(trial), operators=ops)
        except (NonFiniteError, NotPositiveDefiniteError):
            return None
        new = self._mean_jet(joint)
        size = new.abs().amax(-1, keepdim=True).clamp(min=1e-300)
        return joint if float(((new - trial).abs() / size)[..., low, :].max()) < full else None

    def _state_key(self):
        """What identifies the state a solution depends on: each tensor's identity, version
        (in-place updates) and storage (``.data`` replaced, as assigning a PyroParam does);
        not the ``fitted`` flag, which the solution does not read."""
        return tuple((id(t), t._version, t.data_ptr()) for t in
                     [*self.parameters(), *self.buffers()] if t is not self.fitted)

    @own_parameters
    def solve(self):
        r"""The conditioned GPs at the current parameters: Gauss-Newton from the stored
        linearisation point to ``newton_tol`` (nonlinear equations), in local variables.

        Pure: the same state gives the same result and nothing is written (the result is
        cached against the parameters' versions). :meth:`relinearise` stores its point.

        :returns: ``(joint, f0, GaussNewtonResult)``.
        """
        key = self._state_key()
        if self._cache is None or self._cache[0] != key:
            out = self._gauss_newton(self.f0)
            if not out[2].converged:
                warn(f"Gauss-Newton did not converge for {self._what()}: {out[2]}",
                     ConvergenceWarning)
            self._cache = (key, out)
        return self._cache[1]

    @own_parameters
    def relinearise(self, max_iter=None):
        r"""Move the stored linearisation point :math:`f_0` to the posterior mean by
        Gauss-Newton at the current parameters (the only method that changes it; a model
        with an approximate objective refines it here first, e.g. more inducing points). Called by
        :func:`~pyro_pidkl.infer.fit` between optimiser runs; call it in a hand-written SVI
        loop every few steps.

        :param int max_iter: at most this many iterations (default ``newton_max_iter``).
        :returns: a :class:`GaussNewtonResult`.
        """
        refine = getattr(self, "_refine_approximation", None)
        refined = bool(refine()) if refine is not None else False
        out = self._gauss_newton(self.f0, max_iter)
        out[2].refined = refined
        if math.isfinite(out[2].change):
            with torch.no_grad():
                self.f0.copy_(out[1])
                self.f0_set.fill_(True)
            self._cache = (self._state_key(), out)     # what a prediction would compute
        return out[2]

    @own_parameters
    def training_objective(self):
        """The fit's objective (:math:`\\log p(y \\mid v)`, plus :math:`\\log p(v)` with the
        joint objective) at the current parameters and the converged linearisation (a
        float)."""
        with torch.no_grad():
            return float(self._objective(self.solve()[0]))

    def _potential(self):
        """The negative objective at the converged linearisation, differentiable once
        (closed-form gradients): what NUTS needs. A linear equation needs no Gauss-Newton
        solve: its linearisation does not depend on the point."""
        from .edits import edits_log_density
        f0 = self.f0 if self.linear else self.solve()[1]
        loss = -self._objective(self.joint(*self.linearise(f0)))
        extra = edits_log_density(self, latent="ignore")               # what a user's model() adds
        return loss if extra is None else loss - extra

    # -- adequacy: do the data and the equation agree? -----------------------------------
    @own_parameters
    def adequacy(self):
        r"""How well the fitted model's data and equation agree
        (:mod:`~pyro_pidkl.diagnostics.adequacy`): the posterior mean's residual at the
        collocation points relative to the size of the equation's terms, the log evidence
        for the equation against a GP of the data alone, and (a system that is an explicit
        ODE) the misfit of the equation's own trajectory. Pure: nothing is written.

        :returns: an :class:`~pyro_pidkl.diagnostics.adequacy.Adequacy`."""
        with torch.no_grad():
            joint = self.solve()[0]
            residual = {name: relative(r, size) for name, (_, r, size)
                        in self._residual_parts(self._mean_jet(joint)).items()}
            try:
                evidence = self._log_evidence_ratio()
            except (NonFiniteError, NotPositiveDefiniteError):
                evidence = math.nan
            trajectory = self._trajectory_misfit()
            between = self._between_residual(joint)
            missed = self._data_misfit()
            resolved = self.coefficient_resolution()
            noise = noise_evidence(self, joint)
        return Adequacy(self._what(), residual, evidence, self._noise_is_learned(),
                        trajectory, between, missed, resolved, self._unresolved(resolved),
                        noise, getattr(self, "lines", None))

    def _unresolved(self, resolved):
        """The coefficients the collocation does not resolve (their estimate between the
        points outside their 90% interval); none where the exact ODE refereed the fit."""
        report = getattr(self, "referee", None)
        if not resolved or (report is not None and report.verdict != "gp"):
            return []
        import warnings
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                intervals = self.coefficient_intervals(0.9)
        except (NonFiniteError, NotPositiveDefiniteError, RuntimeError, ValueError):
            return []
        return [n for n, v in intervals.items() if v.get("resolved") is False]

    @own_parameters
    def coefficient_resolution(self):
        r"""``{coefficient: delta}``: the relative shift of each learned coefficient that
        would let the posterior mean hold the equations between the collocation points
        (:func:`~pyro_pidkl.models.conditioning.resolution.coefficient_resolution`); where
        the shifted estimate lies outside the coefficient's interval it is not resolved and
        not identified (:meth:`coefficient_intervals`). Kept with the state; ``{}`` where
        nothing is checked."""
        from .resolution import coefficient_resolution
        if not hasattr(self, "_residuals_at"):
            return {}
        key = self._state_key()
        cached = getattr(self, "_resolution_cache", None)
        if cached is None or cached[0] != key:
            try:
                value = coefficient_resolution(self, self.solve()[0])
            except (NonFiniteError, NotPositiveDefiniteError):
                value = {}
            self._resolution_cache = (key, value)
        return dict(self._resolution_cache[1])

    @own_parameters
    def equation_residuals(self):
        r"""The posterior mean's residual at the collocation points, per equation (and
        condition): ``{name: (points (m, d), residual (m,), size of the terms (m,))}`` in
        user units; what :meth:`adequacy` summarises (and what
        :func:`~pyro_pidkl.diagnostics.to_datatree` puts in its ``equation`` group)."""
        with torch.no_grad():
            return self._residual_parts(self._mean_jet(self.solve()[0]))

    @own_parameters
    def noise_rejected(self):
        """The series whose constant Gaussian noise the data reject for noise that grows
        with the signal (:func:`~pyro_pidkl.diagnostics.noise_model.noise_rejected`)."""
        return noise_rejected(self)

    def check_adequacy(self):
        """:meth:`adequacy`, with a one-line
        :class:`~pyro_pidkl.diagnostics.adequacy.ModelMisfitWarning` when the data and the
        equation disagree (:func:`~pyro_pidkl.infer.fit` calls it after every fit)."""
        report = self.adequacy()
        if not report.ok:
            warn(report.message(), ModelMisfitWarning)
        return report

    def _between_residual(self, joint):
        """The residual between the collocation points (``nan``: not checked)."""
        return math.nan

    def _data_misfit(self):
        """How far the posterior mean misses exact data (``nan``: not checked)."""
        return math.nan

    def _trajectory_misfit(self):
        """``{output: misfit}`` of an explicit ODE's own trajectory (systems only)."""
        return {}
