r"""A system's fit keeps its best stage: every stage is judged on one criterion, the data's
likelihood under the equations' own trajectory.

For a system that is an explicit ODE with data, :meth:`ConditionedSystemGP.continuation`
finds coefficients by shooting (the ODE's trajectories fitted to the data), and the
conditioned GP's fit then moves them. Its objective, :math:`\log p(y \mid v)`, is not the
ODE's likelihood: with an output nobody measured, the GP of that output can absorb what a
wrong rate leaves, and the fit can end far from shooting's answer (a reversible reaction
observed in one species: shooting had the rates' sum within 1%, the fit ended 2.6 times
off, 41 nats less likely than the data alone). Both end points are judged on

.. math::
    c(\theta) = \min_{x_0} \sum_c \frac{n_c}{2} \log \frac{1}{n_c}
        \sum_i \big(y_{c,i} - x_c(t_{c,i}; \theta, x_0)\big)^2,

the negative log-likelihood of the data under the trajectory from the best initial state,
each output's noise at its maximum, less the coefficients' log prior
:math:`\log p(\theta)` (:func:`trajectory_cost`): the negative log posterior that NumPyro
or Stan with an ODE solver would maximise, with the model's own priors (a declared prior
that pulls a rate away from the data's optimum is the user's statement, not a failed fit). Where the fit ends worse than shooting by more than
:math:`\tfrac12 \chi^2_{p}(0.99)` (outside the 99% likelihood region of shooting's answer,
``p`` coefficients), it is fitted again from shooting's coefficients (a rate that ran to a
boundary brought back within reach of its start); if that is still worse, the coefficients
are held at shooting's and only the GPs are fitted, with a one-line warning. Each stage's
cost is kept in ``model.stage_costs``.
"""

import copy

import numpy as np
import torch

from ...checks import warn
from ...infer.laplace import parameters_at
from .edits import edits_at

__all__ = ["keep_best_stage", "stage_tolerance", "trajectory_cost"]

#: how far (in unconstrained units) from its start a coefficient is brought back before a
#: refit from shooting's answer: a rate at 1e-200 is a boundary, not a start
REACH = 8.0


def stage_tolerance(num_coefficients):
    r""":math:`\tfrac12 \chi^2_p(0.99)`: a stage worse than another by more than this lies
    outside the other's 99% likelihood region."""
    from scipy import stats
    return 0.5 * float(stats.chi2.ppf(0.99, max(int(num_coefficients), 1)))


def _shooting_setup(model):
    """``(observations, t0, t1, scale)`` of the model's data for shooting: per output
    ``(t, y)``, or ``(t, counts, likelihood)`` for an output observed as counts (its
    exact likelihood, :mod:`~pyro_pidkl.infer.deviance`)."""
    t_all = torch.cat([X[:, 0] for X in model.X_by_output])
    t0 = min(float(model.domain.low[0]), float(t_all.min()))
    return (shooting_observations(model), t0, float(t_all.max()),
            model.y_scale.numpy())


def shooting_observations(model):
    """Each output's data for an exact fit: ``(t, y)`` (Gaussian) or ``(t, counts,
    likelihood)`` (:func:`~pyro_pidkl.models.conditioning.counts.series_observations`)."""
    from .counts import series_observations
    out = []
    for c, (X, y) in enumerate(zip(model.X_by_output, model.y_by_output)):
        t = X[:, 0].numpy()
        out.append(series_observations(model, c, t) or (t, y.numpy()))
    return out


def trajectory_cost(model, theta=None, x0=None):
    r""":math:`c(\theta) - \log p(\theta)` (module docstring) of a :class:`ConditionedSystemGP` that is an
    explicit ODE with data, at unconstrained coefficients ``theta`` (``(P,)``; default the
    current ones), the initial state fitted by single shooting from ``x0`` (default: the
    posterior means at the first time).

    :returns: ``(cost, x0)``, or ``None`` for another system or a failed integration."""
    from ...infer.deviance import count_likelihoods, data_nll, data_residuals
    from ...infer.shooting import fit_by_shooting
    ode = model.ode
    if ode is None or not sum(model.counts):
        return None
    tensors = [getattr(owner, p + "_unconstrained") for _, owner, p in model._coefficients()]
    if theta is None:
        theta = [float(t.detach()) for t in tensors]
    values = [torch.full_like(t, float(v)) for t, v in zip(tensors, theta)]
    observations, t0, t1, scale = _shooting_setup(model)
    if x0 is None:                  # the linearisation point's values at the first time
        with torch.no_grad():
            jets = model.f0 if bool(model.f0_set) else model._data_jet()
            x0 = jets[:, 0, int((model.Z[:, 0] - t0).abs().argmin())].numpy()
    with torch.no_grad(), parameters_at(tensors, values):
        known = model.known_states(t0)
        found = fit_by_shooting(ode, observations, [], np.asarray(x0, dtype=float), t0, t1,
                                scale, np.maximum(0.05 * scale, 1e-12), segments=1,
                                known=known)
        grid = np.unique(np.r_[t0, np.concatenate([o[0] for o in observations])])
        traj = ode.integrate(t0, torch.as_tensor(found.x0)[None], grid)
    if traj is None:
        return None
    with torch.no_grad(), parameters_at(tensors, values):
        cost = -float(model.coefficient_log_prior())       # the coefficients' priors too
    cost -= edits_at(model, tensors, values)               # and what a user's model() adds
    path = np.concatenate([traj[0][c][np.searchsorted(grid, o[0])]
                           for c, o in enumerate(observations)])
    obs_c = np.concatenate([np.full(len(o[0]), c) for c, o in enumerate(observations)])
    y = np.concatenate([o[1] for o in observations])
    counts = count_likelihoods(observations)
    r = data_residuals(y, path[None], obs_c, np.ones(len(observations)), counts)
    cost += float(data_nll(r, obs_c, counts)[0])
    return cost, found.x0


def _coefficient_tensors(model):
    return [getattr(owner, p + "_unconstrained") for _, owner, p in model._coefficients()]


def _within_reach(model, theta):
    """Shooting's unconstrained ``theta`` with each coefficient brought within
    :data:`REACH` of its start."""
    out = []
    for (name, owner, p), v in zip(model._coefficients(), theta):
        spec = owner.specs[p]
        u0 = float(torch.distributions.transform_to(spec.constraint).inv(spec.init))
        out.append(min(max(float(v), u0 - REACH), u0 + REACH))
    return np.array(out)


def keep_best_stage(model, refit):
    r"""After a fit of ``model`` (module docstring): compare its coefficients with the
    shooting stage's on :func:`trajectory_cost`; where the fit is worse beyond
    :func:`stage_tolerance`, ``refit()`` (a fit from the model's state as it is) from
    shooting's coefficients, and if that is still worse, hold them and fit the GPs alone.
    Sets ``model.stage_costs`` ``{stage: cost}`` and ``model.kept_stage``."""
    shot = model._shot[1] if getattr(model, "_shot", None) is not None else None
    model.stage_costs, model.kept_stage = {}, "fit"
    if shot is None or not shot.improved or not model._coefficients():
        return
    # shooting's answer within reach of the starts: a rate that ran to a boundary (1e-200)
    # is judged, and refitted from, where the priors still see it
    reach = _within_reach(model, shot.theta)
    fitted = trajectory_cost(model)
    shooting = trajectory_cost(model, reach, shot.x0)
    if fitted is None or shooting is None:
        return
    tol = stage_tolerance(len(shot.theta))
    model.stage_costs = {"shooting": shooting[0], "fit": fitted[0]}
    if fitted[0] <= shooting[0] + tol:
        return
    observations, t0, _, _ = _shooting_setup(model)
    state = copy.deepcopy(model.state_dict())
    # again from shooting's answer (its trajectory the linearisation point)
    model._apply_shooting(shot, t0, reach)
    refit()
    again = trajectory_cost(model)
    if again is not None:
        model.stage_costs["refit"] = again[0]
        if again[0] <= shooting[0] + tol:
            model.kept_stage = "refit"
            return
    # still worse: the coefficients held at shooting's, the GPs fitted to them
    model._apply_shooting(shot, t0, reach)
    model._hold_coefficients = True
    try:
        refit()
    finally:
        model._hold_coefficients = False
    held = trajectory_cost(model)
    if held is None:
        model.load_state_dict(state)
        return
    model.stage_costs["held"] = held[0]
    model.kept_stage = "shooting"
    warn(f"The conditioned fit of {model._what()} ended where the equations' own trajectory "
         f"fits the data {fitted[0] - shooting[0]:.1f} nats worse than the shooting stage's "
         f"(again from there: {again[0] - shooting[0]:.1f} worse): the coefficients are held "
         f"at shooting's, the GPs fitted to them (the GP of an output nobody measured can "
         f"absorb a wrong rate)" if again is not None else
         f"The conditioned fit of {model._what()} ended where the equations' own trajectory "
         f"fits the data {fitted[0] - shooting[0]:.1f} nats worse than the shooting "
         f"stage's: the coefficients are held at shooting's, the GPs fitted to them")
