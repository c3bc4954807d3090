r"""A second-order fit for models whose objective has no sampled site.

The physics-conditioned GP's objective is a smooth, deterministic function of a handful of
scalars (kernel variance and lengthscales, noise, the equation's coefficients), so it is
maximised as BoTorch fits GPs: scipy's L-BFGS-B on the unconstrained parameters, stopped
when the objective changes by less than ``tol`` relative to its size, in tens of
evaluations where Adam needs a thousand steps. Its bounds let a noise reach its floor in
finitely many steps (the unconstrained value of a parameter above a floor would otherwise
run towards minus infinity for ever smaller gains). For a nonlinear
equation the objective is that of the equation linearised around the current posterior
mean, so the fit alternates: Gauss-Newton moves the linearisation point to the posterior
mean at the current parameters (``model.relinearise()``), L-BFGS fits the parameters at
that point, until neither moves.

``restarts`` more starts (``model.restart(r)`` sets start ``r``: other lengthscales, other
coefficient values) guard against a multimodal marginal likelihood; the start with the
best final objective is kept. Nothing here looks at held-out data.
"""

import contextlib
import copy
import math
import time

import numpy as np
import pyro
import scipy.optimize
import torch
from torch.distributions import constraints
from pyro import poutine
from tqdm import tqdm

from ..checks import positive_int
from ..errors import FitDivergedError, NonFiniteError, NotPositiveDefiniteError
from .user_params import clear_store
from .fit_result import (FitResult, _mark_fitted, _mark_started, default_elbo,
                         divergence_advice)

__all__ = ["fit_lbfgs"]


def _objective(model, elbo):
    """``(loss tensor, parameters)`` of one pass of the model (the negative objective)."""
    with poutine.trace(param_only=True) as capture:
        loss = elbo.differentiable_loss(model.model, model.guide)
    params = list({id(u): u for u in (site["value"].unconstrained()
                                      for site in capture.trace.nodes.values())}.values())
    return loss, params


def _bounds(params, model):
    """L-BFGS-B bounds on the unconstrained parameters: a parameter constrained above a
    positive floor (a noise floor) may come within 1% of it, where its unconstrained value
    would otherwise run to minus infinity for ever smaller gains; a model's own
    ``parameter_bounds()`` (``{unconstrained tensor: (low, high)}``) add others; the rest
    are free."""
    store = pyro.get_param_store()
    own = getattr(model, "parameter_bounds", dict)()
    out = []
    for p in params:
        if any(p is q for q in own):
            lo, hi = next(v for q, v in own.items() if q is p)
            out += [(lo, hi)] * p.numel()
            continue
        name = store._param_to_name.get(p)
        constraint = store._constraints.get(name) if name is not None else None
        low = getattr(constraint, "lower_bound", None)
        lo = None
        if isinstance(constraint, constraints.greater_than) and isinstance(low, (int, float)) \
                and low > 0:
            lo = math.log(0.01 * low)             # u = log(x - low) >= log(0.01 low)
        out += [(lo, None)] * p.numel()
    return out


#: runs of L-BFGS and Gauss-Newton in a row that may end above the best objective seen
#: (or below it by at most :data:`GAIN`) before a nonlinear fit stops there
PATIENCE = 3

#: nats by which a run must better the best objective seen to count as progress: a
#: hundredth of a nat moves no interval (a 90% interval's end is 1.35 nats from its centre)
GAIN = 1e-2


def _one_start(model, elbo, max_iter, tol, outer_max, bar, result):
    """L-BFGS-B (with Gauss-Newton between runs for a nonlinear equation) from the model's
    current state; appends every evaluated loss to ``result.losses``. Returns the final
    loss."""
    relinearise = getattr(model, "relinearise", None)
    linear = getattr(model, "linear", True)
    if relinearise is not None and not linear:
        relinearise(max_iter=10)       # the start's parameters: a rough linearisation will do
    try:
        loss, params = _objective(model, elbo)
    except (NonFiniteError, NotPositiveDefiniteError) as e:
        raise FitDivergedError(f"The fit could not start: {str(e).splitlines()[0]}. "
                               f"{divergence_advice(model, 'lbfgs')}",
                               history=result.losses, step=0, cause=e) from None
    scale = max(1.0, abs(float(loss.detach())))
    state = {"best": float(loss.detach())}
    sizes = [p.numel() for p in params]
    bounds = _bounds(params, model)

    def assign(x):
        with torch.no_grad():
            for p, v in zip(params, torch.split(torch.as_tensor(x), sizes)):
                p.copy_(v.reshape(p.shape).to(p))

    def fun(x):
        assign(x)
        for p in params:
            p.grad = None
        try:
            value = elbo.differentiable_loss(model.model, model.guide)
            if not torch.isfinite(value):
                raise NonFiniteError("the objective is NaN/inf")
            value.backward()
            grad = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p))
                              .reshape(-1) for p in params])
            if not bool(torch.isfinite(grad).all()):
                raise NonFiniteError("a gradient is NaN/inf")
        except (NonFiniteError, NotPositiveDefiniteError):
            # a trial point the line search cannot use: a large finite loss makes it step
            # back (inf or NaN would stop the search)
            return state["best"] + 1e3 * scale, np.zeros(sum(sizes))
        v = float(value.detach())
        state["best"] = min(state["best"], v)
        result.losses.append(v)
        bar.update(1)
        if len(result.losses) % 5 == 0:
            bar.set_postfix(loss=f"{v:.6g}")
        return v, grad.detach().cpu().numpy().astype(np.float64)

    previous = math.inf
    best, stalled = None, 0
    for outer in range(outer_max):
        before = copy.deepcopy(model.state_dict())
        x0 = torch.cat([p.detach().reshape(-1) for p in params]).cpu().numpy()
        x0 = np.array([min(max(v, lo if lo is not None else -np.inf), np.inf)
                       for v, (lo, _) in zip(x0, bounds)])
        # the linearisation moves after a run on a nonlinear equation: converge the
        # early runs loosely and tighten towards tol
        ftol = tol if linear else max(tol, 1e-4 * 0.01 ** outer)
        res = scipy.optimize.minimize(fun, x0, jac=True, method="L-BFGS-B", bounds=bounds,
                                      options={"maxiter": max_iter, "ftol": ftol,
                                               "gtol": 1e-7, "maxcor": 20, "maxls": 10})
        assign(res.x)
        if relinearise is None:
            with torch.no_grad():
                return float(_objective(model, elbo)[0])
        try:
            gn = relinearise()
            with torch.no_grad():
                value = float(_objective(model, elbo)[0])
        except (NonFiniteError, NotPositiveDefiniteError):
            # the run moved the parameters where the linearisation overflows (an epidemic's
            # exp(u) at a trial rate): back to the best linearised state seen, or to where
            # this run began, and stop
            model.load_state_dict(best[1] if best is not None else before)
            model._cache = None
            with torch.no_grad():
                return best[0] if best is not None else float(_objective(model, elbo)[0])
        if gn.refined:       # a refined approximation: a new objective, whose values the
            best, stalled, previous = None, 0, math.inf        # earlier ones don't compare
            continue                                            # with: run again
        if linear:
            return value
        # each run optimises the objective at a fixed linearisation, which the next
        # Gauss-Newton solve moves: the objective at the moved point can be worse (SIR
        # with its susceptibles unobserved: 29.6 nats, then 6, then a collapse to "all
        # noise" at -35). The best linearised state seen is kept; a run that betters it by
        # no more than GAIN counts as stalled (a two-cycle creeping down by thousandths of
        # a nat ran all 20 alternations on a reaction network)
        if best is None or (math.isfinite(value) and value < best[0]):
            gain = math.inf if best is None else best[0] - value
            best = (value, copy.deepcopy(model.state_dict()))
            stalled = 0 if gain > GAIN else stalled + 1
        else:
            stalled += 1
        if stalled >= PATIENCE:          # Gauss-Newton and the runs cycle: stop
            break
        # done when the linearisation stays put, or the objective no longer moves between
        # runs by more than 1e-6 of its size (its rounding on an ill-conditioned joint)
        if ftol <= tol and (gn.iterations <= 1 or abs(previous - value) <= 1e-6 * scale):
            break
        previous = value
    # put the best back where it is better than the end beyond rounding (an end a rounding
    # away from the best is where Gauss-Newton converged last)
    if best is not None and not value <= best[0] + 1e-6 * scale:
        model.load_state_dict(best[1])
        value = best[0]
    return value


def fit_lbfgs(model, max_iter=500, tol=1e-7, restarts=None, outer_max=20, seed=None,
              progress=True):
    r"""Maximise a deterministic model's objective with L-BFGS (module docstring).

    :param model: a model whose ``model()`` has only factor sites (``model.deterministic``),
        e.g. :class:`~pyro_pidkl.models.PhysicsConditionedGP`.
    :param int max_iter: L-BFGS iterations per run (each evaluates the objective about once
        or twice).
    :param float tol: stop when the objective changes by less than ``tol`` times its size.
    :param int restarts: further starts (``model.restart(r)``; default
        ``model.default_restarts``, else 0); the best final objective is kept.
    :param int outer_max: Gauss-Newton / L-BFGS alternations for a nonlinear equation.
    :param int seed: ``pyro.set_rng_seed(seed)`` first.
    :param bool progress: a tqdm bar over the objective's evaluations.
    :returns: :class:`~pyro_pidkl.infer.FitResult` (``losses``: every evaluated negative
        objective, in order; ``num_steps``: their count; ``starts``: the final loss of each
        start; ``best_start``).
    """
    max_iter = positive_int(max_iter, "max_iter")
    outer_max = positive_int(outer_max, "outer_max")
    if not tol > 0:
        raise ValueError(f"Expected tol > 0; got {tol!r}")
    if restarts is not None:
        restarts = positive_int(restarts, "restarts", minimum=0)
    if seed is not None:
        pyro.set_rng_seed(seed)
    elbo = default_elbo(model)
    result = FitResult()
    result.starts = []
    t0 = time.perf_counter()
    bar = tqdm(disable=not progress, desc=f"{type(model).__name__} (L-BFGS)", leave=False,
               dynamic_ncols=True)
    clear_store(model, keep=False)
    _mark_started(model)
    prepare = getattr(model, "prepare_fit", None)
    if prepare is not None:
        prepare()                            # starting values from the data alone
    if restarts is None:
        restarts = getattr(model, "default_restarts", 0)
    if restarts and not hasattr(model, "restart"):
        raise TypeError(f"Expected a model with a restart(r) method for restarts; "
                        f"{type(model).__name__} has none")
    subset = getattr(model, "fit_collocation", None)
    many = subset is not None and hasattr(model, "collocation_subset")
    began = time.process_time()
    try:
        with (model.collocation_subset(subset) if many else contextlib.nullcontext()):
            best = _starts(model, elbo, restarts, max_iter, tol, outer_max, bar, result)
        result.stage_seconds["fit"] = time.process_time() - began
        if not math.isfinite(best[0]):
            first = getattr(result, "start_errors", None)
            cause = ("the objective is unbounded (the data fitted exactly at a vanishing "
                     "scale: are the data, source and conditions all zero or all equal?)"
                     if best[0] == -math.inf else
                     f"first: {first[0]}" if first else "no start gave a finite objective")
            raise FitDivergedError(f"The fit failed from every start ({cause}). "
                                   + divergence_advice(model, "lbfgs"),
                                   history=result.losses,
                                   step=len(result.losses))
        after = getattr(model, "after_fit", None)
        if after is not None:                # e.g. a system keeps its best stage
            def refit():
                clear_store(model)
                return _one_start(model, elbo, max_iter, tol, outer_max, bar, result)
            after(refit)
            result.stages = dict(getattr(model, "stage_costs", None) or {})
            result.stage_seconds.update(getattr(model, "stage_seconds", {}))
        if many and model.Z.shape[0] > subset:
            model.relinearise()              # all collocation points at the learned parameters
        result.best_start = best[1]
        _mark_fitted(model, result)
    finally:
        bar.close()
        clear_store(model)
        result.seconds = time.perf_counter() - t0
        result.num_steps = len(result.losses)
    return result


def _starts(model, elbo, restarts, max_iter, tol, outer_max, bar, result):
    """Every start from the model's state as it is (each through the model's
    continuation first, if it has one); the model is left at the best. With
    several starts each is first run to a loose tolerance (``1e-4``, 10 iterations and two
    Gauss-Newton alternations at most), on a subset of the data where the model offers one
    (``model.data_subset(model.screen_data)``), and only the best is then run to ``tol`` on
    all of them: a screen, then a polish. Returns ``(loss, start, state)``."""
    start_state = copy.deepcopy(model.state_dict())
    best = (math.inf, None, None)
    screen = restarts > 0
    subset = getattr(model, "data_subset", None) if screen else None
    for r in range(restarts + 1):
        if r:
            model.load_state_dict(start_state)
            model.restart(r)
        try:
            # a screen ranks the starts: on many data, a subset of them tells
            with (subset(getattr(model, "screen_data", None)) if subset is not None
                  else contextlib.nullcontext()):
                _continue(model, elbo, max_iter, tol, bar, result)
                clear_store(model)
                value = _one_start(model, elbo, min(max_iter, 10) if screen else max_iter,
                                   max(tol, 1e-4) if screen else tol,
                                   2 if screen else outer_max, bar, result)
        except FitDivergedError as e:
            if r == 0 and not restarts:
                raise
            result.start_errors = getattr(result, "start_errors", []) + [
                str(e).split(". Try")[0]]
            value = math.inf
        result.starts.append(value)
        if value < best[0]:
            best = (value, r, copy.deepcopy(model.state_dict()))
    if best[2] is not None:
        model.load_state_dict(best[2])
        if screen:                                # polish the best start
            clear_store(model)
            value = _one_start(model, elbo, max_iter, tol, outer_max, bar, result)
            best = (value, best[1], None)
    return best


def _continue(model, elbo, max_iter, tol, bar, result):
    """The stages of a model's ``continuation()`` (a generator that sets each stage's state
    and puts the model's own back when it ends), each fitted loosely from the last: an
    objective made smooth (the equations held loosely) and tightened stage by stage, so
    that the starts begin in the basin of the loose problem's optimum. A stage that fails
    ends the continuation where it is."""
    stages = getattr(model, "continuation", None)
    if stages is None:
        return
    for _ in stages():
        clear_store(model)
        try:
            _one_start(model, elbo, min(max_iter, 100), max(tol, 1e-5), 3, bar, result)
        except FitDivergedError:
            break
