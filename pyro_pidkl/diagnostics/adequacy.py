r"""Whether a conditioned fit's data and equation agree: two numbers, and a warning.

A GP conditioned on an equation that the data contradict does not fail: it compromises.
Either the data are fitted and the equation gives way (the posterior mean is no longer a
solution), or the equation holds and the data are missed (taken for noise). Each shows in
one number that does not depend on how the kernel's variance or the noise ended:

* **the equation's residual**, relative to the size of its terms: at the collocation points
  :math:`z_i`, with the posterior mean :math:`\mu` and the equation linearised there,
  :math:`\psi[\mu](z) \approx b(z) + \sum_\alpha J_\alpha(z)\,\partial^\alpha\mu(z)`,

  .. math::
      r = \frac{\big(\tfrac1M \sum_i (\psi[\mu](z_i) - g(z_i))^2\big)^{1/2}}
               {\big(\tfrac1M \sum_i \big(\sum_\alpha (J_\alpha \partial^\alpha \mu)(z_i)^2
                     + g(z_i)^2\big)\big)^{1/2}},

  per equation (and per boundary condition). A fit that holds the equation has
  :math:`r \approx 10^{-3}` or less (the residual noise's default standard deviation is
  :math:`10^{-3}` of the operator's prior one); :math:`r >` :data:`RESIDUAL_TOL` means the
  equation was let go;

* **the evidence for the equation**: :math:`\log p(y \mid \text{equation}) - \log
  p(y \mid \text{no equation})`, the fit's :math:`\log p(y \mid v)` against the best SE-ARD
  GP of the data alone (both maximised over their parameters, in the same standardised
  units). The equation restricts the functions the data may come from: where it is right
  the restriction costs nothing and the difference is positive (an Occam factor); where
  the data contradict it the difference is large and negative. Below
  :math:`-\log 100` (:data:`EVIDENCE_TOL`, "decisive" on Jeffreys' scale) the data
  and the equation disagree. It is judged only where a noise is learned: with exact data
  (boundary values held at a noise floor of :math:`10^{-10}`) any discretisation error is
  thousands of nats.

* **the method of lines** (an evolution PDE in one space input): the fitted equation
  integrated from the posterior's initial and boundary values and scored on the data
  (:mod:`~pyro_pidkl.models.conditioning.method_of_lines`); where other coefficients make
  the data decisively more likely, the fit and the integrated equation disagree.
* **the noise model**: where a series has Gaussian noise of one learned variance and
  positive data, how much more likely log-normal noise about the same mean makes them
  (:mod:`~pyro_pidkl.diagnostics.noise_model`); above
  :data:`~pyro_pidkl.diagnostics.noise_model.NOISE_TOL` the data reject constant noise.

A fit of a system that is an explicit ODE also reports how far the equation's own
trajectory, integrated from the posterior mean's state at the first time with the fitted
coefficients, lies from the data (RMS over the observed outputs, in units of each output's
noise standard deviation): a number to read, not a criterion (over a long window a chaotic
system's trajectory leaves any data).
"""

import math
from dataclasses import dataclass, field

from .noise_model import rejected, rejection

__all__ = ["Adequacy", "BETWEEN_TOL", "COEFFICIENT_RESOLVED_TOL", "DATA_MISFIT_TOL", "EVIDENCE_TOL", "RESIDUAL_TOL", "ModelMisfitWarning"]

#: the equation's RMS residual at the collocation points above this fraction of the RMS
#: size of its terms: the equation gave way to the data
RESIDUAL_TOL = 0.02

#: the posterior mean's relative residual on a check set between the collocation points
#: above this: the collocation does not resolve the solution
#: (:mod:`~pyro_pidkl.models.conditioning.resolution`)
BETWEEN_TOL = 0.25

#: a learned coefficient whose estimate between the collocation points
#: (:func:`~pyro_pidkl.models.conditioning.resolution.coefficient_resolution`) lies outside
#: its interval by more than this fraction of its value is not resolved (rounding below it)
COEFFICIENT_RESOLVED_TOL = 1e-3

#: the posterior mean's RMS miss of exact data over its tolerance above this: the data and
#: the equation disagree, or the collocation does not resolve the solution
#: (:func:`~pyro_pidkl.models.conditioning.resolution.data_misfit`)
DATA_MISFIT_TOL = 3.0

#: the log evidence ratio below minus this: the data contradict the equation (odds of 100
#: to 1, "decisive" on Jeffreys' scale)
EVIDENCE_TOL = math.log(100.0)


class ModelMisfitWarning(UserWarning):
    """The data and the equation disagree (:class:`Adequacy`)."""


@dataclass
class Adequacy:
    r"""How well a conditioned fit's data and equation agree (module docstring).

    :ivar str what: the equation or system, as messages name it.
    :ivar dict residual: ``{block: r}``: the relative RMS residual of the posterior mean at
        the collocation points, per equation (and condition).
    :ivar float log_evidence_ratio: :math:`\log p(y \mid \text{equation}) - \log p(y \mid
        \text{no equation})` in nats (``nan`` when there are fewer than three data).
    :ivar bool noise_learned: whether the evidence is judged (a learned noise).
    :ivar dict trajectory_misfit: ``{output: RMS / noise sd}`` of the equation's own
        trajectory (an explicit ODE with data; else empty).
    :ivar float between: the same relative residual on a check set between the collocation
        points (:mod:`~pyro_pidkl.models.conditioning.resolution`; ``nan`` where not checked): above
        :data:`BETWEEN_TOL` the collocation does not resolve the solution.
    :ivar float data_misfit: how far the posterior mean misses exact data, over their
        tolerance (``nan`` for noisy data): above :data:`DATA_MISFIT_TOL`, a misfit.
    :ivar dict coefficients: ``{coefficient: delta}``, the relative shift each learned
        coefficient would take for the posterior mean to hold the equation between the
        collocation points
        (:func:`~pyro_pidkl.models.conditioning.resolution.coefficient_resolution`).
    :ivar list unresolved: the coefficients whose estimate shifted twice as far lies outside
        their 90% interval (:func:`~pyro_pidkl.models.conditioning.resolution.unresolved_intervals`):
        not resolved by the collocation, not identified.
    :ivar dict noise: ``{series: nats}``, how much more likely log-normal noise makes each
        series with Gaussian noise than constant noise does
        (:func:`~pyro_pidkl.diagnostics.noise_model.noise_evidence`): above
        :data:`~pyro_pidkl.diagnostics.noise_model.NOISE_TOL` the data reject the noise
        model, and no coefficient is identified.
    :ivar lines: the method-of-lines check of an evolution PDE in one space input
        (:class:`~pyro_pidkl.models.conditioning.method_of_lines.MethodOfLinesCheck`), or
        ``None``: its verdict ``"disagree"`` is a misfit.
    """

    what: str
    residual: dict
    log_evidence_ratio: float
    noise_learned: bool
    trajectory_misfit: dict = field(default_factory=dict)
    between: float = math.nan
    data_misfit: float = math.nan
    coefficients: dict = field(default_factory=dict)
    unresolved: list = field(default_factory=list)
    noise: dict = field(default_factory=dict)
    lines: object = None

    @property
    def noise_rejected(self):
        """The series whose constant Gaussian noise the data reject (module
        :mod:`~pyro_pidkl.diagnostics.noise_model`)."""
        return list(rejected(self.noise))

    @property
    def reasons(self):
        """The criteria that fail, one sentence each (empty: adequate)."""
        out = []
        loose = {k: v for k, v in self.residual.items() if not v <= RESIDUAL_TOL}
        broken = [k for k, v in loose.items() if not math.isfinite(v)]
        if broken:
            out.append(f"the posterior mean's residual of {', '.join(broken)} is not finite "
                       f"(its terms vanish or overflow at the collocation points)")
        finite = {k: v for k, v in loose.items() if math.isfinite(v)}
        if finite:
            worst = max(finite, key=finite.get)
            out.append(f"the posterior mean misses {worst} by {finite[worst]:.1%} of the size "
                       f"of its terms (the equation gave way to the data)")
        if self.between > BETWEEN_TOL:
            out.append(f"between the collocation points the posterior mean misses the "
                       f"equation by {self.between:.1%} of the size of its terms (the "
                       f"collocation does not resolve the solution: more points, "
                       f"collocation=)")
        if self.unresolved:
            one = len(self.unresolved) == 1
            shown = ", ".join(f"{n} by {self.coefficients[n]:+.1%}" for n in self.unresolved)
            out.append(f"between the collocation points the posterior mean asks for other "
                       f"coefficients ({shown}; twice that reaches outside {'its' if one else 'their'} "
                       f"90% interval{'' if one else 's'}): the collocation does not resolve the "
                       f"solution, and {'it is' if one else 'they are'} not identified (more "
                       f"points, collocation=, or a kernel that can bend)")
        if self.data_misfit > DATA_MISFIT_TOL:
            out.append(f"the posterior mean misses its exact data by {self.data_misfit:.3g} "
                       f"times their tolerance (RMS; the equation cannot pass through them, "
                       f"or the collocation does not resolve the solution: more points)")
        found = rejected(self.noise)
        if found:
            out.append(rejection(found) + " (a likelihood that says so: pk.LogNormalNoise())")
        if self.lines is not None and self.lines.verdict == "disagree":
            moved = ", ".join(f"{n} {self.lines.fit[n]:.4g} -> {v['value']:.4g}"
                              for n, v in self.lines.lines.items())
            out.append(f"the equation integrated by the method of lines from the posterior's "
                       f"initial and boundary values fits the data "
                       f"{self.lines.lines_loglik - self.lines.fit_loglik:.1f} nats better at "
                       f"other coefficients ({moved}), so the intervals are widened to reach "
                       f"them and none is identified (the collocation may not resolve the "
                       f"solution)")
        if self.noise_learned and self.log_evidence_ratio < -EVIDENCE_TOL:
            out.append(f"the data are {-self.log_evidence_ratio:.1f} nats less likely with "
                       f"the equation than without it")
        return out

    @property
    def ok(self):
        """Whether every criterion passes."""
        return not self.reasons

    def message(self):
        """The one-line warning (``""`` when adequate)."""
        if self.ok:
            return ""
        reasons = self.reasons
        if len(reasons) == 1 and self.noise_rejected:    # the noise alone: its own remedy
            return (f"The data reject the constant noise of the fit of {self.what}: "
                    f"{reasons[0]}; a system's outputs take likelihoods={{output: "
                    f"pk.LogNormalNoise()}}")
        return (f"The data and {self.what} disagree: {'; '.join(reasons)}. Check the "
                f"equation, its coefficients' constraints and the data's units (or the fit "
                f"stopped short: more starts)")

    def as_dict(self):
        """A JSON-ready dict of the numbers."""
        return {"residual": dict(self.residual), "between": self.between,
                "data_misfit": self.data_misfit, "coefficients": dict(self.coefficients),
                "unresolved": list(self.unresolved), "noise": dict(self.noise),
                "lines": None if self.lines is None else {
                    "verdict": self.lines.verdict, "fit_loglik": self.lines.fit_loglik,
                    "lines_loglik": self.lines.lines_loglik, "nodes": self.lines.nodes,
                    "grid_shift": self.lines.grid_shift, "coefficients": self.lines.lines},
                "log_evidence_ratio": self.log_evidence_ratio,
                "noise_learned": self.noise_learned,
                "trajectory_misfit": dict(self.trajectory_misfit), "ok": self.ok}

    def __str__(self):
        parts = [f"{k} {v:.2e}" for k, v in self.residual.items()]
        if math.isfinite(self.between):
            parts.append(f"between the points {self.between:.2e}")
        if self.coefficients:
            parts.append("coefficients' shift between the points " + ", ".join(
                f"{n} {q:+.2e}" for n, q in self.coefficients.items()))
        text = (f"Adequacy of {self.what}: residual / terms {', '.join(parts)}; log evidence "
                f"ratio {self.log_evidence_ratio:.1f} nats"
                + ("" if self.noise_learned else " (not judged: exact data)"))
        if self.lines is not None:
            text += f"; method of lines {self.lines.verdict}"
        if self.noise:
            text += "; log-normal against constant noise " + ", ".join(
                f"{k} {v:+.1f} nats" for k, v in self.noise.items())
        if self.trajectory_misfit:
            text += "; trajectory misfit / noise sd " + ", ".join(
                f"{k} {v:.2f}" for k, v in self.trajectory_misfit.items())
        return text + ("; adequate" if self.ok else f"; NOT adequate: {'; '.join(self.reasons)}")
