"""Training: :func:`fit` runs SVI + Adam with a progress bar and a loss history, or, for a
model whose objective has no sampled site, L-BFGS (:func:`~pyro_pidkl.infer.lbfgs.fit_lbfgs`)."""

import math
import time

import pyro
import torch
from pyro import poutine
from pyro.infer.util import zero_grads
from tqdm import tqdm

from ..checks import positive_int, positive_number
from ..errors import FitDivergedError, NonFiniteError, NotPositiveDefiniteError
from .guides import make_guide
from .user_params import clear_store
from .fit_result import (FitResult, _mark_fitted, _mark_started, default_elbo,
                         divergence_advice)
from .lbfgs import fit_lbfgs
from .threads import fit_threads, torch_threads

__all__ = ["FitResult", "decaying_adam", "default_elbo", "fit", "svi_step"]


def _grads_finite(params):
    """Whether every gradient is finite: one fused norm over all of them, not a check per
    tensor (the parameters stay finite as long as the updates are)."""
    grads = [p.grad for p in params if p.grad is not None]
    return not grads or bool(torch.isfinite(torch.nn.utils.get_total_norm(grads)))


class _TorchAdam:
    """Adam over all of a model's unconstrained parameters at once (``foreach``), called as a
    Pyro optimiser is: ``optimizer(params)``. The same update as ``pyro.optim.Adam``, which
    keeps one ``torch.optim.Adam`` per tensor and so launches every op once per tensor."""

    def __init__(self, lr):
        self.lr, self.optim, self.known = lr, None, set()

    def __call__(self, params):
        new = [p for p in params if p not in self.known]
        if new:
            self.known.update(new)
            if self.optim is None:
                self.optim = torch.optim.Adam(new, lr=self.lr, foreach=True)
            else:
                self.optim.add_param_group({"params": new})
        self.optim.step()


def decaying_adam(lr, lr_final, num_steps):
    """Adam whose learning rate decays geometrically from ``lr`` to ``lr_final`` over
    ``num_steps`` steps (``ClippedAdam`` with ``lrd``; the clipping is effectively off)."""
    if not 0 < lr_final <= lr:
        raise ValueError(f"Expected 0 < lr_final <= lr ({lr}); got {lr_final}")
    lrd = (lr_final / lr) ** (1.0 / max(int(num_steps), 1))
    return pyro.optim.ClippedAdam({"lr": lr, "lrd": lrd, "clip_norm": 1e6})


def svi_step(model, elbo, optimizer):
    """One plain SVI step (loss and gradients, update, zeroed gradients) of ``model.model`` /
    ``model.guide``, without :func:`fit`'s divergence checks: what the benchmarks time.

    :returns: the loss (a float).
    """
    with poutine.trace(param_only=True) as capture:
        loss = elbo.loss_and_grads(model.model, model.guide)
    params = {site["value"].unconstrained() for site in capture.trace.nodes.values()}
    optimizer(params)
    zero_grads(params)
    return loss


def fit(model, num_steps=1000, lr=0.01, num_particles=1, vectorize_particles=True, seed=None,
        progress=True, optimizer=None, loss=None, guide=None, callback=None, lr_final=None,
        method="auto", tol=1e-7, restarts=None, threads="auto"):
    r"""Maximise the ELBO of ``model.model`` / ``model.guide`` with SVI, or a deterministic
    model's objective with L-BFGS.

    ``method="auto"`` (the default) picks L-BFGS for a model that declares a deterministic
    objective (``model.deterministic``: :class:`~pyro_pidkl.models.PhysicsConditionedGP`)
    when no optimiser, loss or guide is given, and SVI with Adam otherwise (PI-DKL's
    objective samples ``Z`` and ``eps``). ``method="adam"`` or ``"lbfgs"`` chooses.

    The global Pyro parameter store is cleared before and after the fit: the model's own
    tensors carry its state, so several models can be fitted and compared in one process.
    A step whose loss or gradients are NaN/inf is not applied: the fit stops with
    :class:`~pyro_pidkl.errors.FitDivergedError` and the model keeps its last finite
    parameters.

    :param model: a model with ``model()`` and ``guide()`` methods (PIDKL, DKL, SKL, ...).
    :param int num_steps: optimisation steps.
    :param float lr: Adam learning rate.
    :param int num_particles: Monte Carlo particles for :math:`Z, \epsilon`.
    :param bool vectorize_particles: draw the particles in one vectorised pass.
    :param int seed: if given, ``pyro.set_rng_seed(seed)`` first: the fit's draws (``Z``,
        ``eps``, minibatches) repeat bit for bit on CPU from the same initial model. The
        initial network weights are drawn when the model is built: give the model its own
        ``seed=`` (or call ``pyro.set_rng_seed`` before building it) to repeat those too.
    :param bool progress: show a tqdm progress bar.
    :param float lr_final: if given, the learning rate decays geometrically from ``lr`` to
        ``lr_final`` over the fit (``ClippedAdam`` with ``lrd``), which quiets the final
        iterate of a stochastic objective.
    :param optimizer: a ``pyro.optim`` optimiser (default: Adam with ``lr`` over all the
        parameters at once, the update of ``pyro.optim.Adam({"lr": lr})`` in fewer ops).
    :param loss: an ELBO (default: :func:`default_elbo`: the model's ``elbo_class`` if it
        has one, e.g. ``TraceMeanField_ELBO`` for :class:`~pyro_pidkl.models.SparsePIDKL`,
        else :class:`~pyro_pidkl.infer.elbo.PriorGuideELBO`, which is ``Trace_ELBO``'s
        estimate computed in one pass when the guide is the prior).
    :param guide: a guide for ``pyro.sample`` sites added to ``model()``: an autoguide's
        name (``"normal"``, ``"mvn"``, ``"delta"``, ``"laplace"``), an ``AutoGuide`` class or
        a guide function, joined to the model's own draws of its prior sites
        (:func:`~pyro_pidkl.infer.guides.make_guide`); the fit is then ``Trace_ELBO``'s and
        the guide is ``result.guide``. A ``pyro.param`` added to ``model()`` needs nothing:
        it is learned and kept (:mod:`~pyro_pidkl.infer.user_params`).
    :param callback: ``callback(step, loss)`` after each step.
    :param str method: ``"auto"``, ``"adam"`` (SVI) or ``"lbfgs"``.
    :param float tol: L-BFGS stops when the objective changes by less than ``tol`` times its
        size (``num_steps`` caps its iterations per run).
    :param int restarts: L-BFGS's further starts (default: the model's ``default_restarts``).
    :param threads: torch threads during the fit (:func:`~pyro_pidkl.infer.threads.fit_threads`):
        ``"auto"`` (default) runs problems of up to 8000 rows (data plus collocation points)
        with one thread, which on a two-core machine is about as fast as two when it is
        quiet and two to three times faster when it is busy (``docs/speed.md``), unless
        ``PIDKL_THREADS`` (the count) or ``OMP_NUM_THREADS`` is set; ``None`` keeps torch's
        setting (``torch.set_num_threads``); an integer sets it. The process's count is put
        back when the fit ends.
    :returns: :class:`FitResult`.
    """
    n = fit_threads(model, threads) if _is_model(model) else None
    with torch_threads(n):
        result = _fit(model, num_steps, lr, num_particles, vectorize_particles, seed, progress,
                      optimizer, loss, guide, callback, lr_final, method, tol, restarts)
    result.threads = torch.get_num_threads() if n is None else n
    return result


def _is_model(model):
    return callable(getattr(model, "model", None)) and callable(getattr(model, "guide", None))


def _fit(model, num_steps, lr, num_particles, vectorize_particles, seed, progress, optimizer,
         loss, guide, callback, lr_final, method, tol, restarts):
    if not _is_model(model):
        raise TypeError(f"Expected a model with model() and guide() methods (PIDKL, "
                        f"PhysicsConditionedGP, DKL, ...); got {type(model).__name__}")
    if method not in ("auto", "adam", "lbfgs"):
        raise ValueError(f"Expected method to be 'auto', 'adam' or 'lbfgs'; got {method!r}")
    num_steps = positive_int(num_steps, "num_steps")
    lr = positive_number(lr, "lr")
    tol = positive_number(tol, "tol")
    if lr_final is not None:
        lr_final = positive_number(lr_final, "lr_final")
    if restarts is not None:
        restarts = positive_int(restarts, "restarts", minimum=0)
    num_particles = positive_int(num_particles, "num_particles")
    if seed is not None:
        seed = positive_int(seed, "seed", minimum=0)
    if getattr(model, "fits_itself", False):
        # a model whose objective has its own optimiser (StateSpaceGP: stages of L-BFGS-B
        # with the linearisation refreshed between them)
        began = time.perf_counter()
        _mark_started(model)
        found = model.fit()
        return FitResult(losses=[-float(found.log_evidence)], num_steps=found.evaluations,
                         seconds=time.perf_counter() - began,
                         stages={"stages": found.stages})
    if method == "auto":
        plain = (optimizer is None and loss is None and guide is None and num_particles == 1
                 and callback is None and lr_final is None)
        method = "lbfgs" if plain and getattr(model, "deterministic", False) else "adam"
    if method == "lbfgs":
        if not getattr(model, "deterministic", False):
            raise ValueError(f"Expected a model with a deterministic objective for L-BFGS; "
                             f"{type(model).__name__} samples sites (use method='adam')")
        return fit_lbfgs(model, max_iter=max(1, num_steps), tol=tol, restarts=restarts,
                         seed=seed, progress=progress)
    if seed is not None:
        pyro.set_rng_seed(seed)
    clear_store(model, keep=False)
    if optimizer is None and lr_final is not None:
        optimizer = decaying_adam(lr, lr_final, num_steps)
    # the default: one foreach Adam over every parameter (tests/test_fit.py checks it against
    # pyro.optim.Adam, the plain path, to 1e-10)
    optimizer = optimizer or _TorchAdam(lr)
    if loss is None:
        loss = default_elbo(model, num_particles, vectorize_particles)
    guide = model.guide if guide is None else make_guide(model, guide)
    relinearise = (getattr(model, "relinearise", None)
                   if not getattr(model, "linear", True) else None)
    result = FitResult()
    start = time.perf_counter()
    _mark_started(model)
    bar = tqdm(range(int(num_steps)), disable=not progress, desc=type(model).__name__,
               leave=False, dynamic_ncols=True)
    try:
        for step in bar:
            last = result.losses[-1] if result.losses else math.nan
            advice = ("The update was not applied: the model keeps its last finite parameters "
                      f"(last finite loss {last:.6g}). {divergence_advice(model)}")
            try:
                with poutine.trace(param_only=True) as capture:
                    value = loss.loss_and_grads(model.model, guide)
            except (NonFiniteError, NotPositiveDefiniteError) as e:
                for site in capture.trace.nodes.values():
                    site["value"].unconstrained().grad = None
                # Pyro appends its trace-shape table to errors raised in a model: keep the
                # first line; the original error stays on .cause
                cause = str(e).split("\n")[0]
                raise FitDivergedError(f"The fit diverged at step {step}: {cause} {advice}",
                                       history=result.losses, step=step, cause=e) from None
            params = list({id(u): u for u in (site["value"].unconstrained()
                                              for site in capture.trace.nodes.values())}
                          .values())
            if not (math.isfinite(value) and _grads_finite(params)):
                zero_grads(params)
                raise FitDivergedError(
                    f"The fit diverged at step {step}: the loss is {value} or a gradient is "
                    f"NaN/inf. {advice}", history=result.losses, step=step)
            optimizer(params)
            zero_grads(params)
            if relinearise is not None and (step + 1) % 10 == 0:
                relinearise()   # a nonlinear equation: Gauss-Newton to the moved mean
            result.losses.append(float(value))
            if progress and (step % 10 == 0 or step == num_steps - 1):
                bar.set_postfix(loss=f"{value:.4g}")
            if callback is not None:
                callback(step, float(value))
        _mark_fitted(model, result)
        result.guide = guide
    finally:
        bar.close()
        result.seconds = time.perf_counter() - start
        result.num_steps = len(result.losses)
        clear_store(model)
    return result
