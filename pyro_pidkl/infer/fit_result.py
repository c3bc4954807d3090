"""What a fit leaves, shared by the two drivers (:func:`~pyro_pidkl.infer.svi.fit`'s Adam
and :func:`~pyro_pidkl.infer.lbfgs.fit_lbfgs`): the :class:`FitResult`, the objective a model
trains with (:func:`default_elbo`), the advice after a divergence, and the marks a fit sets
on its model (started, fitted: a fit stopped part way leaves a model that says so)."""

import math
import time
from dataclasses import dataclass, field

import torch

from .elbo import PriorGuideELBO

__all__ = ["FitResult", "default_elbo", "divergence_advice"]


@dataclass
class FitResult:
    """What a fit did: ``losses`` (negative ELBO per step), ``seconds``, ``num_steps``,
    ``threads``, the torch threads it ran with, ``adequacy``, a conditioned model's
    :class:`~pyro_pidkl.diagnostics.adequacy.Adequacy` report (else ``None``), and
    ``stages``, a system's stages judged on one criterion
    (:func:`~pyro_pidkl.models.conditioning.stages.keep_best_stage`; else empty), ``guide``,
    the guide an SVI fit ran (:func:`~pyro_pidkl.infer.guides.make_guide`), and
    ``stage_seconds``, the CPU seconds of each stage of an L-BFGS fit (``"fit"``: the starts
    and their polish; a conditioned model's checks after it, ``"stages"``, ``"refine"``,
    ``"referee"``; ``"adequacy"``)."""

    losses: list = field(default_factory=list)
    seconds: float = 0.0
    num_steps: int = 0
    threads: int = 0
    adequacy: object = None
    stages: dict = field(default_factory=dict)
    guide: object = None
    stage_seconds: dict = field(default_factory=dict)

    @property
    def final_loss(self):
        return self.losses[-1] if self.losses else math.nan

    def __repr__(self):
        return (f"FitResult(num_steps={self.num_steps}, final_loss={self.final_loss:.6g}, "
                f"seconds={self.seconds:.2f}, threads={self.threads})")


def default_elbo(model, num_particles=1, vectorize_particles=False):
    """The ELBO a model trains with: its ``elbo_class`` if it has one (e.g.
    ``TraceMeanField_ELBO`` for :class:`~pyro_pidkl.models.SparsePIDKL`), else
    :class:`~pyro_pidkl.infer.elbo.PriorGuideELBO` (``Trace_ELBO``'s value and gradients in
    one pass of the model when its guide is the prior; ``Trace_ELBO`` itself otherwise),
    with the model's ``max_plate_nesting``."""
    elbo_class = getattr(model, "elbo_class", PriorGuideELBO)
    return elbo_class(num_particles=int(num_particles),
                      vectorize_particles=bool(vectorize_particles) and num_particles > 1,
                      max_plate_nesting=getattr(model, "max_plate_nesting", 0))


def divergence_advice(model, method="adam"):
    """What to try after a diverged fit of ``model`` by ``method``: the options that model
    has (a sentence)."""
    tries = ["a smaller lr"]
    if hasattr(model, "noise_floor"):
        tries.append("a larger noise_floor")
    physics = getattr(model, "physics", None)
    if getattr(physics, "gamma", None) is not None:
        tries.append("a smaller gamma")
    if hasattr(model, "residual_noise"):
        tries = ["a larger residual_noise", "fewer collocation points"]
        if method == "adam" and getattr(model, "deterministic", False):
            tries.insert(0, "method='lbfgs'")
    return "Try " + (", ".join(tries[:-1]) + " or " + tries[-1] if len(tries) > 1
                     else tries[0]) + "."


def _mark_started(model):
    """A fit begins: the model is not fitted until it ends (``fitted`` False where the
    model has the flag), and until then ``fit_interrupted`` is set, so that a fit stopped
    part way (Ctrl-C, a divergence) leaves a model that says so when it predicts."""
    flag = getattr(model, "fitted", None)
    if isinstance(flag, torch.Tensor):
        with torch.no_grad():
            flag.fill_(False)
    model.fit_interrupted = True


def _mark_fitted(model, result=None):
    """Set a model's ``fitted`` flag (a buffer) where it has one, and check the adequacy of a
    model that can (``check_adequacy``: the conditioned GPs warn in one line when the data
    and the equation disagree), its report kept as ``result.adequacy``."""
    flag = getattr(model, "fitted", None)
    if isinstance(flag, torch.Tensor):
        with torch.no_grad():
            flag.fill_(True)
    model.fit_interrupted = False
    check = getattr(model, "check_adequacy", None)
    if check is not None:
        began = time.process_time()
        report = check()
        if result is not None:
            result.adequacy = report
            result.stage_seconds["adequacy"] = time.process_time() - began
