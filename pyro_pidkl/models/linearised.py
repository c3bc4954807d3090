r"""What a GP conditioned on a linearised equation (or system) does with it: damped
Gauss-Newton to the posterior mean, the pure, cached solution at the current parameters,
the one method that moves the linearisation point, and the Laplace approximation of the
learned coefficients with its effect on predictions.

:class:`LinearisedConditioning` is a mixin of
:class:`~pyro_pidkl.models.PhysicsConditionedGP` and
:class:`~pyro_pidkl.models.ConditionedSystemGP`. The host provides the maths of its own
model: ``operators()``, ``linearise(f0)`` -> ``(w, b)``, ``joint(w, b, closed_form=,
operators=)``, ``_mean_jet(joint)`` and ``_data_jet()`` (jets whose last axis runs over the
collocation points and whose second-to-last over ``indices``), ``_residual_size(f0)``,
``_objective(joint)``, ``_coefficients()``, ``_nuisance_parameters()`` and
``_what()`` (how messages name it); and the state ``f0``, ``f0_set``, ``fitted``,
``linear``, ``indices``, ``newton_tol``, ``newton_max_iter``, ``parameter_uncertainty``,
``_cache``.
"""

import contextlib
import copy
import math

import torch
from pyro.nn import PyroParam

from ..checks import warn
from ..diagnostics.adequacy import Adequacy, ModelMisfitWarning
from ..errors import ConvergenceWarning, NonFiniteError, NotPositiveDefiniteError
from ..infer.laplace import (coefficient_intervals, laplace_covariance, laplace_parts,
                             sigma_points)
from ..param_scope import own_parameters
from ..physics.collocation import maximin_subset
from ..physics.linearise import relative

__all__ = ["COEFFICIENT_PRIOR_SD", "ConvergenceWarning", "GaussNewtonResult",
           "LinearisedConditioning", "default_coefficient_log_prior", "with_point_priors"]


class GaussNewtonResult:
    """What a Gauss-Newton run did: ``iterations``, ``converged``, ``change`` (the last
    relative change of the linearisation point)."""

    def __init__(self, iterations, converged, change):
        self.iterations, self.converged, self.change = iterations, converged, change

    def __repr__(self):
        return (f"GaussNewtonResult(iterations={self.iterations}, converged={self.converged}, "
                f"change={self.change:.3g})")


def with_point_priors(equation):
    """The equation (or system), or a copy of it in which a coefficient declared with a
    prior is a parameter (its prior enters the objective: a MAP estimate, and the density
    that :func:`~pyro_pidkl.infer.nuts.sample_coefficients` samples), not a sample site."""
    if not any(spec.prior is not None and not spec.fixed for spec in equation.specs.values()):
        return equation
    equation = copy.deepcopy(equation)
    for name, spec in equation.specs.items():
        if spec.prior is not None and not spec.fixed:
            delattr(equation, name)
            setattr(equation, name, PyroParam(spec.init.clone(), spec.constraint))
    return equation


#: the standard deviation, on its unconstrained scale (the log of a positive coefficient),
#: of a learned coefficient's default prior about the value it is started at
COEFFICIENT_PRIOR_SD = 2.0


def default_coefficient_log_prior(spec, u):
    r"""The weak prior of a learned coefficient declared without one:
    :math:`u \sim \mathcal{N}(u_0, 2^2)` on its unconstrained scale, centred on the value
    it was given (:math:`u_0`, the user's guess): a factor :math:`e^2 \approx 7` per
    standard deviation for a positive coefficient. The data overrule it wherever they speak;
    where they do not, a flat prior on :math:`\log\theta` is improper and puts its mass at
    :math:`\theta \to 0`: a damping ran to 1e-7 on data that fit it 1.3 nats worse at the
    truth, its band missing the solution, and van der Pol's :math:`\mu` to 0 from 1 (the
    truth 1.5 a 64 nats better optimum). Declare a prior (``Parameter(..., prior=...)``)
    to state another."""
    u0 = torch.distributions.transform_to(spec.constraint).inv(spec.init.to(u))
    z = (u - u0) / COEFFICIENT_PRIOR_SD
    return (-0.5 * z.pow(2) - math.log(COEFFICIENT_PRIOR_SD * math.sqrt(2 * math.pi))).sum()


class LinearisedConditioning:
    """Gauss-Newton, the cached solution and Laplace, shared by the conditioned models
    (module docstring)."""

    def log_prior(self):
        r""":math:`\log p(\theta) + \log p(\eta)`: each learned coefficient's prior (its
        declared one, else the weak default of :func:`default_coefficient_log_prior`) and
        the GP's parameters' given ``priors``."""
        total = self.coefficient_log_prior()
        for name, owner, p in self.hyperparameters():
            prior = self.priors.get(name)
            if prior is not None:
                total = total + prior.log_prob(getattr(owner, p)).sum()
        return total

    def coefficient_log_prior(self):
        r""":math:`\log p(\theta)`: each learned coefficient's prior (its declared one, else
        the weak default of :func:`default_coefficient_log_prior`)."""
        total = 0.0
        for _, owner, p in self._coefficients():
            spec = owner.specs[p]
            if spec.prior is not None:
                total = total + spec.prior.log_prob(getattr(owner, p)).sum()
            else:
                total = total + default_coefficient_log_prior(
                    spec, getattr(owner, p + "_unconstrained"))
        return total

    def hyperparameters(self):
        """``[(name, owner, attribute), ...]`` of the GP's own scalar parameters that are
        learned now (``_nuisance_parameters()``), named by their module path in the model's
        units (``"kernel.lengthscale"``: inputs scaled to the domain; ``"noise"``: relative
        to the signal's variance). A parameter held (a noise at its floor) is not among them.
        """
        wanted = {id(q) for q in self._nuisance_parameters()}
        out = []
        for path, module in self.named_modules():
            for attr in getattr(module, "_pyro_params", {}):
                q = module._parameters.get(attr + "_unconstrained")
                if q is not None and id(q) in wanted:
                    out.append((f"{path}.{attr}" if path else attr, module, attr))
        return out

    def _set_priors(self, priors):
        r"""``priors``, ``{name: distribution}`` over the GP's parameters in the model's
        units (:meth:`hyperparameters`' names; e.g. ``{"kernel.lengthscale":
        dist.LogNormal(0, 1)}``), checked against the model's parameters in one line."""
        priors = dict(priors or {})
        names = [name for name, _, _ in self.hyperparameters()]
        for name, prior in priors.items():
            if name not in names:
                raise ValueError(f"Expected priors to name the GP's parameters among "
                                 f"{names}; got {name!r}")
            if not isinstance(prior, torch.distributions.Distribution):
                raise TypeError(f"Expected the prior of {name!r} to be a torch or Pyro "
                                f"distribution; got {type(prior).__name__}")
        self.priors = priors

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
        saved = {name: getattr(self, name) for name in ("Z", "Z_s", "f0", "row_noise")
                 if hasattr(self, name)}
        self.Z, self.Z_s, self.f0 = saved["Z"][idx], saved["Z_s"][idx], saved["f0"][..., idx]
        if "row_noise" in saved:
            self.row_noise = saved["row_noise"][idx]
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
        solution, where full steps oscillate). Steps are measured relative to the size of
        each row of the jet, on the rows of order 0 and 1; converged below ``newton_tol``."""
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
            for it in range(1, (max_iter or self.newton_max_iter) + 1):
                joint = self.joint(*self.linearise(f0), operators=ops)
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
        Gauss-Newton at the current parameters (the only method that changes it). Called by
        :func:`~pyro_pidkl.infer.fit` between optimiser runs; call it in a hand-written SVI
        loop every few steps.

        :param int max_iter: at most this many iterations (default ``newton_max_iter``).
        :returns: a :class:`GaussNewtonResult`.
        """
        out = self._gauss_newton(self.f0, max_iter)
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
        f0 = self.f0 if self.linear else self.solve()[1]
        return -self._objective(self.joint(*self.linearise(f0)))

    def _laplace_loss(self):
        """The negative objective at the converged linearisation, twice differentiable."""
        _, f0, _ = self.solve()
        return -self._objective(self.joint(*self.linearise(f0), closed_form=False))

    def _laplace_parameters(self, nuisance=True):
        """``(names, theta, eta)``: the learned coefficients' names, their unconstrained
        tensors, and (with ``nuisance``) the GP's own parameters
        (``_nuisance_parameters()``)."""
        coefficients = self._coefficients()
        names = [n for n, _, _ in coefficients]
        theta = [getattr(owner, p + "_unconstrained") for _, owner, p in coefficients]
        return names, theta, (self._nuisance_parameters() if nuisance else [])

    @own_parameters
    def laplace(self, nuisance=True, prior_sd=None):
        r"""The Laplace approximation of the learned coefficients :math:`\theta` and, with
        ``nuisance``, the GP's scalar parameters :math:`\eta`
        (:func:`~pyro_pidkl.infer.laplace.laplace`; its Hessian kept with the state).

        :returns: ``(names, sizes, H, cov)``."""
        names, sizes, H, P0 = self.laplace_parts(nuisance)
        return names, sizes, H, laplace_covariance(H, sum(sizes), prior_sd=prior_sd,
                                                   prior_precision=P0)

    @own_parameters
    def laplace_parts(self, nuisance=True):
        """The Hessians of the negative objective and of the declared priors
        (:func:`~pyro_pidkl.infer.laplace.laplace_parts`), kept with the state.

        :returns: ``(names, sizes, H, P0)``."""
        key = (self._state_key(), nuisance)
        cached = getattr(self, "_laplace_cache", None)
        if cached is None or cached[0] != key:
            self._laplace_cache = (key, laplace_parts(self, nuisance))
        return self._laplace_cache[1]

    @own_parameters
    def coefficient_intervals(self, prob=0.9, nuisance=True):
        r"""Laplace intervals for the learned equation coefficients
        (:func:`~pyro_pidkl.infer.laplace.coefficient_intervals`): what the data and the
        equation say, ``[0, inf]`` (with ``identified`` False) for a coefficient they leave
        free.

        :returns: ``{name: {"value", "lower", "upper", "sd", "identified"}}``."""
        return coefficient_intervals(self, prob, nuisance)

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
        return Adequacy(self._what(), residual, evidence, self._noise_is_learned(),
                        trajectory)

    @own_parameters
    def equation_residuals(self):
        r"""The posterior mean's residual at the collocation points, per equation (and
        condition): ``{name: (points (m, d), residual (m,), size of the terms (m,))}`` in
        user units; what :meth:`adequacy` summarises (and what
        :func:`~pyro_pidkl.diagnostics.to_datatree` puts in its ``equation`` group)."""
        with torch.no_grad():
            return self._residual_parts(self._mean_jet(self.solve()[0]))

    def check_adequacy(self):
        """:meth:`adequacy`, with a one-line
        :class:`~pyro_pidkl.diagnostics.adequacy.ModelMisfitWarning` when the data and the
        equation disagree (:func:`~pyro_pidkl.infer.fit` calls it after every fit)."""
        report = self.adequacy()
        if not report.ok:
            warn(report.message(), ModelMisfitWarning)
        return report

    def _trajectory_misfit(self):
        """``{output: misfit}`` of an explicit ODE's own trajectory (systems only)."""
        return {}

    def _sigma_points(self):
        """:func:`~pyro_pidkl.infer.laplace.sigma_points`, cached with the state; empty
        before a fit or with ``parameter_uncertainty=False``."""
        key = (self._state_key(), bool(self.fitted), bool(self.parameter_uncertainty))
        cached = getattr(self, "_sigma_cache", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        points = []
        if self.parameter_uncertainty and bool(self.fitted):
            points = sigma_points(self)
        self._sigma_cache = (key, points)
        return points
