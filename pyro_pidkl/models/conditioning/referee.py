r"""The exact equation as referee: a conditioned fit of an explicit ODE is scored on the
ODE's own likelihood, beside the textbook fit of that likelihood, and never reported worse.

A GP conditioned on an equation at collocation points approximates the ODE; its objective,
:math:`\log p(y \mid v)`, is not the ODE's likelihood, and on a hard problem (a forced
nonlinear oscillator, a pendulum at large amplitude, a network with hidden species) its
optimum can be a wrong one with a narrow interval. Where the equation (or system) is an
explicit ODE with Gaussian or count data (:mod:`~pyro_pidkl.infer.deviance`),
:func:`referee` runs after the fit:

1. the exact fit (:func:`~pyro_pidkl.infer.exact_fit.fit_exact`): the ODE's trajectory
   fitted by least squares, from the GP's answer (its coefficients, and its posterior mean's
   states at the shooting segments), the user's starting values, and (for one equation) a
   Sobol design of coefficients and unmeasured initial derivatives around them; a system
   adds its shooting stage's starts;
2. both answers scored on one criterion, the negative log posterior of the data under the
   exact trajectory, :math:`c(\theta) = \min_{x_0} \sum_c \tfrac{n_c}{2} \log
   \overline{r_c^2} - \log p(\theta)` (as :mod:`~pyro_pidkl.models.conditioning.stages` does);
3. a verdict (``model.referee``, a :class:`Referee`):

   * ``"exact"``: the GP's answer is worse by more than :math:`\tfrac12\chi^2_p(0.99)`
     (outside the exact fit's 99% likelihood region). The coefficients are set to the
     exact fit's and held while the GP's own parameters are fitted again, the intervals are
     the exact fit's, and one line says so;
   * ``"agree"``: the two are within that tolerance. The more likely answer is reported
     (the exact fit's, the GP refitted to it, wherever it is the more likely by more than
     :data:`COST_SLACK`: the reported answer is never less likely under the exact ODE than
     the best exact fit found); each coefficient's interval is the union of the GP's and
     the exact fit's, widened to the GP's first estimate, so that it covers both (an
     interval that excludes an estimate of equal likelihood is not a claim the data make),
     and a coefficient is identified only when both call it so;
   * ``"apart"``: within the tolerance, but for some coefficient each fit's 90% interval
     excludes the other's estimate (two answers of about equal likelihood, as a cubic
     stiffness traded against a linear one), and the exact fit's is the more likely: its
     coefficients are reported (the GP refitted to them), each interval widened to cover
     the GP's estimate too, those coefficients not identified, and one line says so (where
     the GP's is the more likely, it is kept, ``"agree"``, with the same warning and
     widening);
   * ``"gp"``: the exact fit found a worse optimum than the GP's (its search missed the
     basin): the GP's answer and intervals stand.

Not refereed: an equation with an unknown (``"gp"``) source, a condition
(:class:`~pyro_pidkl.physics.Condition`: not yet carried by the exact fit), a
coefficient that is not a scalar, more than one input, fewer than three data.
"""

import contextlib
import copy
import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from ...checks import warn
from ...errors import FitDivergedError, NonFiniteError, NotPositiveDefiniteError
from ...infer.exact_fit import fit_exact, move_to_posterior, trajectory_nll
from ...infer.laplace import coefficient_intervals, parameters_at
from .edits import edit_sites, edits_at, edits_hessian, edits_log_density
from .stages import stage_tolerance

__all__ = ["Referee", "RefereeWarning", "equation_problem", "exact_fit",
           "exact_parameter_spread", "referee", "system_problem"]

# the exact fit's setting of each model: re-exported, as the models import them from here
from .referee_problems import equation_problem, system_problem  # noqa: E402


class RefereeWarning(UserWarning):
    """The conditioned fit and the exact-ODE fit disagree (:mod:`~pyro_pidkl.models.conditioning.referee`)."""


@dataclass
class Referee:
    r"""The referee's report (module docstring): ``exact`` the
    :class:`~pyro_pidkl.infer.exact_fit.ExactFit`, ``costs`` ``{"gp": c, "exact": c}`` (the
    negative log posterior under the exact trajectory, nats), ``tolerance``
    (:math:`\tfrac12\chi^2_p(0.99)`), ``verdict`` (``"exact"``, ``"apart"``, ``"agree"`` or
    ``"gp"``), ``gp_values`` the GP's coefficients before the verdict, ``apart`` the
    coefficients whose two 90% intervals each exclude the other fit's estimate, and
    ``seconds`` the referee's time."""

    exact: object
    costs: dict
    tolerance: float
    verdict: str
    gp_values: dict
    apart: list = field(default_factory=list)
    seconds: float = 0.0
    #: whether the exact fit's coefficients are the model's now (the GP refitted to them)
    moved: bool = False
    #: the explicit ODE the exact fit integrates
    ode: object = None

    def combine(self, gp, prob):
        r"""The reported intervals from the GP's (``gp``, as
        :func:`~pyro_pidkl.infer.laplace.coefficient_intervals` returns them) at ``prob``
        (module docstring): the exact fit's where the verdict is ``"exact"``; where
        ``"apart"`` the exact fit's, each widened to the GP's estimate before the verdict;
        the union of both, and of the GP's first estimate, where ``"agree"``; the GP's
        where ``"gp"``. A coefficient in
        :attr:`apart` is not identified (two answers of equal likelihood). Each entry gains
        ``"referee"``: the verdict."""
        if self.verdict == "gp" or self.exact is None:
            return {n: {**v, "referee": self.verdict} for n, v in gp.items()}
        exact = self.exact.intervals(prob)
        out = {}
        for n, v in gp.items():
            e = exact.get(n)
            if e is None or not isinstance(v["value"], float):
                out[n] = v
                continue
            if self.verdict == "exact":
                out[n] = {**e, "referee": "exact"}
                continue
            if self.verdict == "apart":
                other = self.gp_values[n]
                lower, upper = min(e["lower"], other), max(e["upper"], other)
                value, sd, identified = e["value"], e["sd"], e["identified"]
            else:           # the model's value (the exact fit's where more likely), both
                other = self.gp_values[n]                       # fits' intervals covered
                lower = min(v["lower"], e["lower"], other)
                upper = max(v["upper"], e["upper"], other)
                value, sd = v["value"], max(v["sd"], e["sd"])
                identified = v["identified"] and e["identified"]
            out[n] = {**v, "value": value, "lower": lower, "upper": upper, "sd": sd,
                      "identified": bool(identified and n not in self.apart),
                      "referee": self.verdict}
        return out


def _cost(model, values, problem):
    """:math:`c(\\theta)` of coefficient ``values`` ``{name: float}`` (module docstring)
    and the initial state it ends with."""
    nll, x0 = trajectory_nll(problem["ode"], problem["observations"], values,
                             problem["x0"], problem["t0"], problem["t1"], problem["scale"],
                             known=problem.get("known"))
    return nll - _log_prior(model, values), x0


@contextlib.contextmanager
def _unvalidated():
    """Distributions' arguments not validated inside the block: a coefficient the exact fit
    ran to the edge of its support (a rate at 0) has log prior ``-inf``, not an error."""
    keep = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(False)
    try:
        yield
    finally:
        torch.distributions.Distribution.set_default_validate_args(keep)


def _log_prior(model, values):
    """The coefficients' log prior at ``values`` ``{name: float}`` (``-inf`` outside its
    support), and what a user's ``model()`` adds there
    (:func:`~pyro_pidkl.models.conditioning.edits.edits_log_density`): the model's own
    density of its coefficients beside the data's likelihood."""
    tensors = [getattr(owner, p + "_unconstrained") for _, owner, p in model._coefficients()]
    unconstrained = []
    for (n, owner, p), t in zip(model._coefficients(), tensors):
        transform = torch.distributions.transform_to(owner.specs[p].constraint)
        unconstrained.append(transform.inv(torch.tensor(values[n], dtype=t.dtype)).reshape(
            t.shape))
    with torch.no_grad(), parameters_at(tensors, unconstrained), _unvalidated():
        value = float(model.coefficient_log_prior())
        if math.isfinite(value):
            value += edits_at(model, tensors, unconstrained)
    return value if math.isfinite(value) or value == -math.inf else -math.inf


def _posterior_differs(model):
    """Whether the model's density of its coefficients is other than the weak default priors
    the exact fit's least squares carries: a declared prior, or a user's added factor."""
    specs = [owner.specs[p] for _, owner, p in model._coefficients()]
    return any(spec.prior is not None for spec in specs) or bool(edit_sites(model))


def _normal_prior(model):
    """``(loc, sd)`` of the coefficients' weak default priors (normal in the unconstrained
    space), for the exact fit's MAP, or ``None`` where a coefficient has a declared prior
    (then the exact fit is the likelihood's, its Laplace precision with the prior's)."""
    from .parameter_uncertainty import COEFFICIENT_PRIOR_SD
    specs = [owner.specs[p] for _, owner, p in model._coefficients()]
    if _posterior_differs(model):
        return None
    loc = [float(torch.distributions.transform_to(spec.constraint).inv(spec.init))
           for spec in specs]
    return np.array(loc), np.full(len(loc), COEFFICIENT_PRIOR_SD)


def _prior_hessian(model, theta):
    """The Hessian ``(P, P)`` of the coefficients' negative log prior at unconstrained
    ``theta`` (the weak default or the declared priors, as the GP's Laplace has them)."""
    from .parameter_uncertainty import default_coefficient_log_prior
    specs = [owner.specs[p] for _, owner, p in model._coefficients()]

    def negative_log_prior(u):
        total = 0.0
        for k, spec in enumerate(specs):
            if spec.prior is not None:
                value = torch.distributions.transform_to(spec.constraint)(u[k])
                total = total + spec.prior.log_prob(value).sum()
            else:
                total = total + default_coefficient_log_prior(spec, u[k])
        return -total
    u = torch.tensor(np.asarray(theta, dtype=float), dtype=torch.float64)
    with torch.enable_grad(), _unvalidated():
        H = torch.autograd.functional.hessian(negative_log_prior, u)
    H = H.detach().numpy()
    if edit_sites(model):                 # and the curvature of what model() adds
        tensors = [getattr(owner, p + "_unconstrained") for _, owner, p in model._coefficients()]
        values = [torch.full_like(t, float(v)) for t, v in zip(tensors, theta)]
        H = H + edits_hessian(model, tensors, values).numpy()
    return np.where(np.isfinite(H), H, 0.0)


def _problem(model):
    """The model's exact problem (``model._exact_problem()``), ``None`` without learned
    coefficients or where it has none."""
    return model._exact_problem() if model._coefficients() else None


def _fit_problem(model, problem):
    """The exact fit of ``problem`` by least squares (with the weak default priors), then,
    where the model's density of its coefficients is another (a declared prior, a user's
    factor: :func:`_posterior_differs`), moved to the optimum of the exact trajectory's
    negative log posterior under the model's own priors and edits
    (:func:`~pyro_pidkl.infer.exact_fit.move_to_posterior`): the referee scores, and
    reports, the model the user wrote."""
    found = fit_exact(problem["ode"], problem["observations"], problem["coefficients"],
                      problem["starts"], problem["t0"], problem["t1"], problem["scale"],
                      design=problem.get("design", 0), design_half=problem.get("design_half"),
                      design_states=problem.get("design_states"), prior=_normal_prior(model),
                      known=problem.get("known"),
                      prior_precision=lambda theta: _prior_hessian(model, theta))
    if found is None or not _posterior_differs(model):
        return found

    def cost(theta):
        values = {n: float(t(torch.tensor(v))) for n, t, v in zip(found.names,
                                                                 found.transforms, theta)}
        return _cost(model, values, problem)[0]
    return move_to_posterior(found, problem["ode"], problem["observations"], problem["t0"],
                             problem["t1"], problem["scale"], cost,
                             lambda theta: _added_density(model, theta), problem.get("known"))


def _added_density(model, theta):
    r"""``(value, grad, hessian)`` over the unconstrained coefficients ``theta`` of the
    model's negative log density of them beside the data: its priors (declared, or the
    weak default) and what a user's ``model()`` adds
    (:func:`~pyro_pidkl.models.conditioning.edits.edits_log_density`)."""
    from ...infer.laplace import _hessian_of
    tensors = [getattr(owner, p + "_unconstrained") for _, owner, p in model._coefficients()]
    values = [torch.full_like(t, float(v)) for t, v in zip(tensors, theta)]

    def negative():
        extra = edits_log_density(model)
        total = -model.coefficient_log_prior()
        return total if extra is None else total - extra
    with parameters_at(tensors, values), _unvalidated():
        with torch.enable_grad():
            value = negative()
            grads = torch.autograd.grad(value, tensors, allow_unused=True)
        H = _hessian_of(negative, tensors)
    grad = np.array([0.0 if g is None else float(g.sum()) for g in grads])
    H = H.numpy()
    return float(value.detach()), grad, np.where(np.isfinite(H), H, 0.0)


def exact_fit(model):
    r"""The textbook fit of a conditioned model's explicit ODE on its data
    (:func:`~pyro_pidkl.infer.exact_fit.fit_exact`: the exact trajectory by least squares,
    from the model's current coefficients and posterior mean and from the user's starting
    values, with the coefficients' priors), to compare with the GP's answer; what
    :func:`referee` runs after every fit (``model.referee.exact``).

    :returns: an :class:`~pyro_pidkl.infer.exact_fit.ExactFit` (``values()``,
        ``intervals(prob)``, ``predict(ode, t)``).
    :raises ValueError: where the model has no exact likelihood (module docstring)."""
    problem = _problem(model)
    if problem is None:
        raise ValueError(f"Expected an explicit ODE with learned coefficients, Gaussian data and "
                         f"a known source (no conditions, one input) for an exact fit; "
                         f"{model._what()} is not one")
    with torch.no_grad():
        found = _fit_problem(model, problem)
    if found is None:
        raise ValueError(f"The exact fit of {model._what()} failed from every start (the "
                         f"trajectories did not integrate)")
    return found


def referee(model, refit=None):
    r"""Referee a fitted conditioned model on its exact ODE (module docstring): sets and
    returns ``model.referee`` (a :class:`Referee`, or ``None`` where the model is not
    refereed). ``refit()`` fits the model again from its state (the GP's own parameters,
    with the coefficients held at the exact fit's where the verdict is ``"exact"``). A
    referee that cannot run (a trajectory that does not integrate, a factor that fails)
    leaves the fit as it is and says so in one line: it never ends a fit."""
    model.referee = None
    try:
        return _referee(model, refit)
    except (ValueError, RuntimeError, ArithmeticError, np.linalg.LinAlgError,
            NonFiniteError, NotPositiveDefiniteError, FitDivergedError) as e:
        model.referee = None
        warn(f"The exact-ODE referee of {model._what()} could not run "
             f"({type(e).__name__}: {str(e).splitlines()[0][:120]}): the conditioned fit's "
             f"answer is reported unrefereed", RefereeWarning)
        return None


def _referee(model, refit):
    began = time.perf_counter()
    problem = _problem(model)
    if problem is None:
        return None
    coefficients = problem["coefficients"]      # [(name, transform, [gp, user])]
    exact = _fit_problem(model, problem)
    if exact is None:
        return None
    gp_values = {n: float(t(torch.tensor(s[0]))) for n, t, s in coefficients}
    gp_cost, _ = _cost(model, gp_values, problem)
    exact_cost = exact.nll - _log_prior(model, exact.values())
    tolerance = stage_tolerance(len(coefficients))
    apart = []
    if not math.isfinite(gp_cost) or gp_cost > exact_cost + tolerance:
        verdict = "exact"
    elif exact_cost > gp_cost + tolerance:
        verdict = "gp"
    else:                       # equally likely: do their intervals each exclude the other?
        apart = _apart(model, exact, gp_values)
        verdict = "apart" if apart and exact_cost < gp_cost else "agree"
    report = Referee(exact, {"gp": gp_cost, "exact": exact_cost}, tolerance, verdict,
                     gp_values, apart, ode=problem["ode"])
    # the reported answer is never less likely than the exact fit's: where the exact fit's
    # is the more likely (beyond rounding), its coefficients are reported
    report.moved = verdict in ("exact", "apart") or (
        verdict == "agree" and exact_cost < gp_cost - COST_SLACK)
    if report.moved:    # a small move where they agree: from the GP's own linearisation
        _hold_at_exact(model, exact, refit, problem, relinearise=verdict != "agree")
    shown = ", ".join(f"{n} {gp_values[n]:.4g} -> {v:.4g}" for n, v in exact.values().items())
    if verdict == "exact":
        warn(f"The conditioned fit of {model._what()} ended where the equation's exact "
             f"trajectory fits the data {gp_cost - exact_cost:.1f} nats worse than the "
             f"exact-ODE fit's: the exact fit's coefficients are reported ({shown}), with its "
             f"intervals, and the GP is fitted again to them (model.referee has both)",
             RefereeWarning)
    elif apart:
        better = "the exact fit's" if verdict == "apart" else "the GP's"
        warn(f"The conditioned fit and the exact-ODE fit of {model._what()} fit the data "
             f"about equally well ({gp_cost - exact_cost:+.1f} nats) but disagree on "
             f"{', '.join(apart)} beyond both 90% intervals ({shown}): {better} are reported "
             f"(the better), each interval widened to cover both, "
             f"{'it' if len(apart) == 1 else 'they'} not identified", RefereeWarning)
    report.seconds = time.perf_counter() - began
    model.referee = report
    return report


def _apart(model, exact, gp_values, prob=0.9):
    """The coefficients whose GP interval excludes the exact fit's estimate and whose exact
    interval excludes the GP's (``prob`` intervals; the GP's Laplace at its answer)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gp = coefficient_intervals(model, prob)
    except (NonFiniteError, NotPositiveDefiniteError, RuntimeError):
        return []
    ex = exact.intervals(prob)
    out = []
    for n, v in gp.items():
        e = ex.get(n)
        if e is None or not isinstance(v["value"], float):
            continue
        if not v["lower"] <= e["value"] <= v["upper"] and not e["lower"] <= gp_values[n] <= e["upper"]:
            out.append(n)
    return out


def _hold_at_exact(model, exact, refit, problem, relinearise=True):
    """Set the coefficients to the exact fit's (and, with ``relinearise``, the linearisation
    point to its trajectory: a system's GP priors too), and fit the GP's own parameters to
    them (the coefficients held), when ``refit`` is given; a refit that fails leaves the GP
    as it was, the coefficients set."""
    state = copy.deepcopy(model.state_dict())

    def put():
        with torch.no_grad():
            for (_, owner, p), v in zip(model._coefficients(), exact.theta):
                getattr(owner, p + "_unconstrained").fill_(float(v))
        model._cache = None
    put()
    if relinearise:
        _linearise_at_trajectory(model, exact, problem)
    if refit is None:
        return
    model._hold_coefficients = True
    try:
        refit()
    except (FitDivergedError, NonFiniteError, NotPositiveDefiniteError):
        model.load_state_dict(state)
        put()
    finally:
        model._hold_coefficients = False


def _linearise_at_trajectory(model, exact, problem):
    """The linearisation point at the exact fit's trajectory (a nonlinear equation's
    Gauss-Newton then starts at the solution the coefficients give, not at the GP's old
    one): a system's through its shooting stage's path (``_apply_shooting``); one equation's
    value and derivatives at the collocation points at or after the first datum."""
    from types import SimpleNamespace
    if hasattr(model, "_apply_shooting"):
        model._apply_shooting(SimpleNamespace(theta=exact.theta, x0=exact.x0, sd=exact.sd),
                              problem["t0"], exact.theta)
        return
    ode, t0 = problem["ode"], problem["t0"]
    with torch.no_grad():
        times, inverse = torch.unique(model.Z[:, 0], return_inverse=True)
        after = times >= t0
        if not bool(after.any()):
            return
        traj = exact.predict(ode, times[after].numpy())
        if traj is None or not np.isfinite(traj).all():
            return
        states = torch.as_tensor(traj.T, dtype=model.Z.dtype)              # (T, n)
        top = ode.rhs(times[after], states, exact.values())[:, -1]
        jets = torch.cat([states, top[:, None]], 1)                         # (T, n + 1)
        f0 = model.f0.clone()
        rows = after[inverse]
        where = torch.cumsum(after.long(), 0)[inverse] - 1
        for k, idx in enumerate(model.indices):
            if len(idx) <= ode.order:
                f0[k, rows] = jets[where[rows], len(idx)]
        model.f0.copy_(f0)
        model.f0_set.fill_(True)
    model._cache = None


#: nats by which the exact fit's answer must be more likely than the GP's to be reported
#: in its place when the two agree (rounding of the two costs' optimisations)
COST_SLACK = 1e-3


class _Backwards:
    """An explicit ODE in reversed time about ``t0``: :math:`\tau = 2 t_0 - t`,
    :math:`dx/d\tau = -F(2 t_0 - \tau, x)`, so that times before ``t0`` are integrated
    forwards from it."""

    def __init__(self, ode, t0):
        self.ode, self.t0 = ode, float(t0)

    def rhs(self, t, state, values=None):
        return -self.ode.rhs(2 * self.t0 - t, state, values)

    def integrate(self, *args, **kwargs):
        from ...physics.ode import ExplicitODE
        return ExplicitODE.integrate(self, *args, **kwargs)


def _exact_path(exact, ode, grid):
    """The exact fit's trajectory ``(S, T)`` at increasing times ``grid``, those before its
    start integrated backwards from it; ``None`` where an integration fails."""
    before, after = grid[grid < exact.t0], grid[grid >= exact.t0]
    parts = []
    with torch.no_grad():
        if before.size:
            back = exact.predict(_Backwards(ode, exact.t0), (2 * exact.t0 - before)[::-1])
            if back is None:
                return None
            parts.append(back[:, ::-1])
        if after.size:
            parts.append(exact.predict(ode, after))
    if any(p is None for p in parts):
        return None
    path = np.concatenate(parts, 1)
    return path if np.isfinite(path).all() else None


def exact_parameter_spread(model, t, full_cov=False):
    r"""The coefficients' share of a prediction's variance at times ``t`` ``(P,)`` (user
    units), from the exact ODE the referee fitted: for each direction :math:`s_k` of the
    coefficients' Laplace covariance :math:`C_{\theta\theta}` (the one the intervals report),
    the exact trajectory from :math:`\theta \pm s_k`, its initial state moved with them by
    its regression on the coefficients (:math:`x_0 \pm C_{x\theta} C_{\theta\theta}^{-1}
    s_k`: the data still pin the trajectory where they are), and

    .. math::
        \operatorname{var} x(t) \mathrel{+}= \sum_k \Big(\tfrac12 \big(x_{+s_k}(t) -
            x_{-s_k}(t)\big)\Big)^2 ,

    the delta method of the textbook fit (the GP's own variance, given the coefficients,
    holds the rest). So a band carries what its coefficients allow: where the function
    approaches a coefficient (a logistic's capacity), its sd reaches that coefficient's.
    The exact trajectory itself is returned too: where the GP's mean strays from it (an
    approximation's error), the prediction adds the square of the gap, as the referee's
    intervals hold both fits' estimates.

    :returns: ``(share, path)``: ``share`` ``(S, P)`` (``(S, P, P)`` with ``full_cov``) over
        the ODE's states (one equation: the value and its derivatives; a system: its
        outputs), ``path`` the exact trajectory ``(S, P)``, in the user's units (times
        before the exact fit's start integrated backwards from it); ``None`` where the
        referee did not run, found a worse fit than the GP's (``"gp"``), a coefficient is
        unidentified or at its bound, or a trajectory does not integrate."""
    import dataclasses
    report = getattr(model, "referee", None)
    if report is None or report.verdict == "gp" or report.exact is None or report.ode is None:
        return None
    exact = report.exact
    P = len(exact.names)
    t = np.asarray(t, dtype=float).reshape(-1)
    if P == 0 or exact.boundary or t.size == 0:
        return None
    cov = np.asarray(exact.cov, dtype=float)
    C = 0.5 * (cov[:P, :P] + cov[:P, :P].T)
    if not np.isfinite(C).all():
        return None
    # the band claims what the intervals claim: where they are wider than the exact fit's
    # (the union of both fits', "agree"), the exact covariance is stretched to their widths
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reported = model.coefficient_intervals(0.9)
    own = exact.intervals(0.9)
    stretch = np.array([max(1.0, reported[n]["sd"] / own[n]["sd"])
                        if own[n]["sd"] > 0 and math.isfinite(reported[n]["sd"]) else 1.0
                        for n in exact.names])
    C = C * stretch[:, None] * stretch[None, :]
    cov = cov.copy()
    cov[P:, :P] = cov[P:, :P] * stretch[None, :]
    cross = cov[P:, :P]
    cross = np.where(np.isfinite(cross).all(1, keepdims=True), cross, 0.0)   # known states
    B = cross @ np.linalg.pinv(C)
    lam, V = np.linalg.eigh(C)
    grid, where = np.unique(t, return_inverse=True)
    centre = _exact_path(exact, report.ode, grid)
    if centre is None:
        return None
    out = 0.0
    for k in range(P):
        if not lam[k] > 1e-14 * max(float(lam.max()), 1e-300):
            continue
        step = V[:, k] * math.sqrt(lam[k])
        paths = []
        for sign in (1.0, -1.0):
            moved = dataclasses.replace(exact, theta=exact.theta + sign * step,
                                        x0=exact.x0 + sign * (B @ step) * exact.scale)
            path = _exact_path(moved, report.ode, grid)
            if path is None:
                return None
            paths.append(path[:, where])
        half = 0.5 * (paths[0] - paths[1])                            # (S, P)
        out = out + (half[:, :, None] * half[:, None, :] if full_cov else half ** 2)
    return None if isinstance(out, float) else (out, centre[:, where])
