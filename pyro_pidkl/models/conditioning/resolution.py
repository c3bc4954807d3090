r"""Collocation that is resolved: the equation checked between the collocation points, and
more points where it fails there.

A GP conditioned on :math:`\psi[f](z_i) = g(z_i)` at ``M`` points holds the equation *at*
them; between them it holds only as far as the kernel carries it. With a lengthscale under
a few spacings (a boundary layer of width 0.02 on 100 points, say) the equation can hold at
every point and fail everywhere between: on :math:`-0.02 u'' + u' = 1`, :math:`u(0) = u(1) =
0`, the posterior mean was :math:`u = 0` with residual :math:`10^{-6}` at the points and
1.0 between them. So after a fit the residual of the posterior mean is measured on a check
set disjoint from the collocation points (a Sobol set of the same size in the same domain,
another seed), relative to the size of the equation's terms, as at the points
(:func:`~pyro_pidkl.physics.linearise.residual_parts`):

.. math::
    r_{\text{between}} = \frac{\big(\tfrac1P \sum_j (\psi[\mu](c_j) - g(c_j))^2\big)^{1/2}}
        {\big(\tfrac1P \sum_j (\sum_\alpha (J_\alpha \partial^\alpha\mu)(c_j)^2
            + g(c_j)^2)\big)^{1/2}} .

Where it is above :data:`~pyro_pidkl.diagnostics.adequacy.BETWEEN_TOL` (a quarter of the
terms: derivatives of the mean amplify its error, and a smooth solution to 1e-3 read 6%
between 40 points),
:func:`resolve` adds as many points again and fits again from the kernel's starting
lengthscales (a fit from lengthscales under the old spacing stays there). The points go where
the residual is (:func:`refinement_points`: half at the largest residual among four times as
many candidates, where it stands out, the rest spread; residual-based adaptive refinement,
Lu et al. 2021, as DeepXDE's RAR): on :math:`-u'' = g` with a tanh front of width 0.03 at 40
points, rounds of a uniform Sobol set stopped at error 0.49, these resolve it to 3.5e-3
(``tests/test_refinement.py``; in two dimensions a bump of width 0.065 at 100 points: 2e-4
against 1.0),
up to ``refine`` times (the model's ``collocation_refine``, default
:data:`REFINE_DEFAULT`), and keeps the round with the smallest residual between the points
(more points can also let the lengthscale fall to a degenerate optimum). Exact data that the
posterior mean misses (:func:`data_misfit`: a boundary layer of width 0.01 on 100 points
was left out altogether, the mean a straight line that solves the equation everywhere and
misses both boundary values) refine the points too. A round runs only while the last one
helped: a round driven by the exact data alone must lower their misfit by :data:`PROGRESS`
of itself (a layer thinner than the points can carry: 1749, 1745, 1738, 1738 at 100 to 800
points), one driven by the residual between the points must not raise it (the spring with
v(0) = 0.5 held against data saying -0.2: 0.60, 0.42, 0.99 at 200, 400, 800 points, the
cap; a boundary layer of width 0.02 on 100 points reads 0.97, 0.96, then 0.005 at 400, so
a round that lowers it a little is not the end). The adequacy check
reports what is left
(:meth:`~pyro_pidkl.models.conditioning.linearised.LinearisedConditioning.adequacy`), and a fit that
ends unresolved warns in one line. Not checked: an unknown (``"gp"``) source, whose
posterior mean *is* the residual.
"""

import copy
import math

import torch

from ...diagnostics.adequacy import BETWEEN_TOL, COEFFICIENT_RESOLVED_TOL, DATA_MISFIT_TOL
from ...physics.collocation import collocation_set
from ...physics.linearise import relative
from ..parts.collocation import REFINE_DEFAULT

__all__ = ["CHECK_POINTS_MAX", "COEFFICIENT_RESOLVED_TOL", "REFINE_DEFAULT", "between_residual",
           "coefficient_resolution", "data_misfit", "refinement_points", "resolve",
           "unresolved_intervals"]

#: the most check points (a fraction of the collocation points beyond it)
CHECK_POINTS_MAX = 1000


#: a refinement stops before the equations' rows (points times equations) exceed this many
#: (each fit's joint is dense in them)
REFINE_POINTS_MAX = 1600


#: the share of a data misfit that a refinement round driven by it must remove for the next
#: round to run (:func:`resolve`)
PROGRESS = 0.1


def check_points(model, count, seed):
    """``count`` points in the model's domain (its shape, if it has one), user units."""
    return collocation_set(int(count), model.domain, model.input_names, "sobol", seed,
                           model.Z.dtype, getattr(model, "shape", None)).to(model.Z)


def _check_set(model, joint):
    """``(points, jet)``: the check set between the collocation points (a Sobol set of as
    many points as the equations' rows, at most :data:`CHECK_POINTS_MAX`, another seed) and
    the posterior mean's jet there; ``None`` where nothing is checked."""
    E = model._equation_rows()
    if E == 0 or not model._checked_equations():
        return None
    joint = model.solve()[0] if joint is None else joint
    C = check_points(model, min(E, CHECK_POINTS_MAX), seed=7919 + E)
    return C, model._jet_at(joint, C)


def between_residual(model, joint=None):
    r""":math:`r_{\text{between}}` (module docstring) of a conditioned model at its current
    solution, the largest of its equations' (each relative to its own terms), or ``nan``
    where it is not checked (an unknown source's equation, whose residual is the source)."""
    with torch.no_grad():
        found = _check_set(model, joint)
        if found is None:
            return math.nan
        return max(relative(r, size) for r, size in model._residuals_at(found[1], found[0]))


def coefficient_resolution(model, joint=None, step=1e-3):
    r"""Where the learned coefficients would go if the equation were asked to hold between
    the collocation points instead of at them: on the check set (:func:`between_residual`'s),
    with the posterior mean held, the least-squares relative shift :math:`\delta` of the
    coefficients that best absorbs the equations' residual there,

    .. math::
        \delta = \arg\min_\delta \sum_j \Big(r(c_j) + \sum_i \delta_i\, \theta_i
            \partial_{\theta_i} \psi[\mu](c_j)\Big)^2 ,

    each term :math:`\theta_i \partial_{\theta_i}\psi` by a central difference of
    relative ``step`` in :math:`\theta_i` (over every equation it appears in). A fit holds
    the equation at its points, so there the shift is nil; where the solution is resolved it
    holds between them too and :math:`\delta \approx 0`. Where it is not (a front narrower
    than the points' spacing) the same posterior mean asks for other coefficients between the
    points: :math:`\theta_i (1 + \delta_i)` is what another collocation set would have
    given, to first order (the PINN paper's Burgers problem on 2,000 points: ``l1`` 0.979 at
    the points, 0.546 between them; ``benchmarks/burgers_identification.py``). Scalar
    coefficients of the equations only (not of a condition); ``{}`` where nothing is
    checked.

    :returns: ``{name: delta}``."""
    import numpy as np

    from ...infer.laplace import parameters_at
    with torch.no_grad():
        found = _check_set(model, joint)
        if found is None:
            return {}
        C, jet = found
        r = torch.cat([res for res, _ in model._residuals_at(jet, C)])
        names, columns = [], []
        for name, owner, p in model._coefficients():
            value = getattr(owner, p)
            if owner is not model._equations_owner() or value.numel() != 1 or \
                    float(value) == 0.0:
                continue
            u = getattr(owner, p + "_unconstrained")
            transform = torch.distributions.transform_to(owner.specs[p].constraint)
            moved = []
            for sign in (1.0, -1.0):
                at = transform.inv(value.detach() * (1.0 + sign * step)).reshape(u.shape)
                with parameters_at([u], [at.to(u)]):
                    moved.append(torch.cat([res for res, _ in model._residuals_at(jet, C)]))
            term = (moved[0] - moved[1]) / (2 * step)
            if float(term.abs().max()) > 0 and bool(torch.isfinite(term).all()):
                names.append(name)
                columns.append(term)
        if not names or not bool(torch.isfinite(r).all()):
            return {}
        A = torch.stack(columns, 1).numpy()
        delta = np.linalg.lstsq(A, -r.numpy(), rcond=1e-8)[0]
    return {n: float(d) for n, d in zip(names, delta)}


def unresolved_intervals(intervals, resolution, coefficients):
    r"""``intervals`` (as :func:`~pyro_pidkl.infer.laplace.coefficient_intervals` returns
    them) with each coefficient's estimate between the collocation points,
    :math:`\theta (1 + \delta)` (:func:`coefficient_resolution`; a positive coefficient's
    :math:`\theta e^{\delta}`), as ``"between"``. Where the estimate shifted
    :data:`RESOLUTION_SAFETY` times as far lies outside the interval by more than
    :data:`~pyro_pidkl.diagnostics.adequacy.COEFFICIENT_RESOLVED_TOL` of the value (another
    collocation set would have given an estimate the interval excludes), the coefficient is
    not resolved: ``resolved`` False, not identified, and its interval widened to reach it
    (as the referee's union of two fits)."""
    out = dict(intervals)
    specs = {n: owner.specs[p] for n, owner, p in coefficients}
    for name, delta in resolution.items():
        entry = out.get(name)
        if entry is None or not isinstance(entry.get("value"), float):
            continue
        value = entry["value"]
        positive = specs[name].constraint is torch.distributions.constraints.positive

        def shifted(d):
            return value * math.exp(d) if positive else value * (1 + d)
        # the shift is measured with the posterior mean held; were the equation asked to
        # hold between the points, the mean would move too, carrying the same unresolved
        # error: the interval is asked to hold the estimate shifted RESOLUTION_SAFETY times
        # as far (a boundary layer on 15 points: shift -9%, error +21%)
        reach = shifted(RESOLUTION_SAFETY * delta)
        entry = {**entry, "between": shifted(delta), "resolved": True}
        slack = COEFFICIENT_RESOLVED_TOL * abs(value)
        if not entry["lower"] - slack <= reach <= entry["upper"] + slack:
            entry.update(lower=min(entry["lower"], reach), upper=max(entry["upper"], reach),
                         identified=False, resolved=False)
        out[name] = entry
    return out


#: how many times its first-order shift between the collocation points a coefficient's
#: interval must reach to be resolved (:func:`unresolved_intervals`)
RESOLUTION_SAFETY = 2.0


def data_misfit(model):
    r"""How far the posterior mean misses *exact* data (the noise held, a PDE's boundary
    values): the RMS of :math:`\mu(X) - y` over its tolerance, the larger of the held
    relative noise's standard deviation and :math:`10^{-3}`, times the size of the data or
    of the mean at the collocation points; ``nan``
    where the noise is learned (the evidence judges noisy data) and for counts or log-normal
    data (not exact). A straight line that
    solves :math:`-0.01 u'' + u' = 1` everywhere and misses both boundary values by 0.5
    (the layer at one end unresolved) reads about 1,000."""
    if model._noise_is_learned() or model.X.shape[0] == 0 or model.count_outputs:
        return math.nan
    with torch.no_grad():
        mean = model.posterior_mean(model.X)
        r = (mean - model.y).pow(2).mean().sqrt()
        Z = model.Z[:model._equation_rows()]
        value = model.posterior_mean(Z[:: max(1, Z.shape[0] // 200)])   # the mean at the points
        size = max(float(model.y.pow(2).mean().sqrt()), float(value.pow(2).mean().sqrt()))
        # the held noise is relative to the kernel's variance, which a degenerate fit blows
        # up (the straight line above: 0.25): measured against the data's own size instead
        tol = max(math.sqrt(float(model.noise)), 1e-3) * size + 1e-300
    return float(r) / tol


def _unresolved(r, misfit):
    """Whether the equation fails between the points (``r``), or exact data are missed
    (``misfit``, :func:`data_misfit`'s)."""
    return r > BETWEEN_TOL or misfit > DATA_MISFIT_TOL


def _between(model):
    """:math:`r_{\text{between}}` of the model at its current solution (its own
    ``_between_residual``: one equation's, or a system's largest)."""
    with torch.no_grad():
        return model._between_residual(model.solve()[0])


def _snapshot(model):
    """The model's state, its collocation rows included (their count changes)."""
    rows = {n: getattr(model, n) for n in model.collocation_buffers}
    return rows, copy.deepcopy(model.state_dict())


def _restore(model, snapshot):
    rows, state = snapshot
    for n, v in rows.items():
        setattr(model, n, v)
    model.load_state_dict(state)
    model._cache = None


#: the share of a refinement round's new points placed where the posterior mean's residual is
#: largest, among :data:`CANDIDATES_PER_POINT` times as many candidates; the rest spread over
#: the domain (the candidates' Sobol order): residual-based adaptive refinement (Lu et al.
#: 2021; DeepXDE's RAR), half and half, so that the points follow the residual without
#: leaving the rest of the domain bare
RAR_SHARE = 0.5
CANDIDATES_PER_POINT = 4
#: a candidate is placed for its residual only where its squared residual is this many times
#: the candidates' median (a residual spread evenly, as a fit that missed the solution
#: altogether has, says nothing about where points are needed)
RAR_CONTRAST = 4.0


def refinement_points(model, count, seed):
    r"""``count`` new collocation points (user units) for a refinement round (module
    docstring): of a Sobol set of :data:`CANDIDATES_PER_POINT` ``* count`` candidates in the
    domain, the :data:`RAR_SHARE` where the posterior mean's residual is largest (each
    equation's relative to the RMS size of its terms there, summed in squares over the
    equations) and above :data:`RAR_CONTRAST` times their median, then the first of the
    others in the set's order. Where a residual is not finite, the set's first ``count``."""
    candidates = check_points(model, CANDIDATES_PER_POINT * count, seed)
    with torch.no_grad():
        joint = model.solve()[0]
        parts = model._residuals_at(model._jet_at(joint, candidates), candidates)
        score = sum((r / (size.pow(2).mean().sqrt() + 1e-300)).pow(2) for r, size in parts)
    if not torch.is_tensor(score) or not bool(torch.isfinite(score).all()):
        return candidates[:count]
    top = torch.topk(score, int(RAR_SHARE * count)).indices
    top = top[score[top] > RAR_CONTRAST * score.median()]   # a residual spread evenly: none
    rest = torch.ones(candidates.shape[0], dtype=torch.bool)
    rest[top] = False
    return torch.cat([candidates[top], candidates[rest][:count - top.numel()]])


def resolve(model, refit):
    """Check the equation between the collocation points and, while it fails, add as many
    points again and ``refit()`` (module docstring). Sets ``model.resolution``:
    ``{"between": [r, ...], "points": [M, ...], "misfit": [m, ...]}`` per round (``m``
    :func:`data_misfit`'s, ``inf`` for a round whose refit failed), ``"kept"`` the round
    kept. The model provides
    ``_between_residual(joint)``, ``_data_misfit()``, ``_insert_collocation(points)``,
    ``_restart_lengthscales()`` and ``collocation_buffers`` (the names of its tensors with
    a row per collocation point)."""
    from ...errors import NonFiniteError, NotPositiveDefiniteError
    rounds = int(getattr(model, "collocation_refine", REFINE_DEFAULT))
    r = _between(model)
    misfit = model._data_misfit()
    model.resolution = {"between": [r], "points": [model._equation_rows()], "kept": 0,
                        "misfit": [misfit]}
    best = (r, None)
    equations = getattr(model, "num_equations", 1)
    for k in range(rounds):
        E = model._equation_rows()
        if not _unresolved(r, misfit) or 2 * E * equations > REFINE_POINTS_MAX:
            break
        snapshot = _snapshot(model) if best[1] is None else best[1]
        driven_by_misfit, r_before = r <= BETWEEN_TOL, r   # else by the equation between
        try:
            model._insert_collocation(refinement_points(model, E, seed=104729 + 31 * k + E))
            model._restart_lengthscales()
            refit()
            r = _between(model)
        except (NonFiniteError, NotPositiveDefiniteError):
            r = math.nan
        # a failed round misses everything: never kept, and the last
        before, misfit = misfit, model._data_misfit() if math.isfinite(r) else math.inf
        model.resolution["between"].append(r)
        model.resolution["points"].append(model._equation_rows())
        model.resolution["misfit"].append(misfit)
        if r < best[0] or (r <= BETWEEN_TOL and not best[0] <= BETWEEN_TOL) or (
                best[1] is not None and not _unresolved(r, misfit)):
            best = (r, None)
            model.resolution["kept"] = k + 1
        else:
            best = (best[0], snapshot)          # a round that did not help: from the last
        if not (misfit <= (1 - PROGRESS) * before if driven_by_misfit else r <= r_before):
            break                               # more points left it where it was, or worse
    if best[1] is not None:                     # good one again, the worse rounds dropped
        _restore(model, best[1])
    return model.resolution
