r"""Laplace: the learned coefficients' uncertainty, as intervals and in predictions.

At the estimates :math:`\hat\theta` (the equation's unconstrained coefficients) and
:math:`\hat\eta` (the GP's own scalar parameters), the negative objective is expanded to
second order, :math:`H` its Hessian over :math:`[\theta; \eta]` (by double backward through
a twice-differentiable path), and :math:`C = H^{-1}` on the identified directions. Intervals
of a coefficient come from its marginal :math:`C_{\theta\theta}`, mapped through its
constraint. Predictions carry them, and the GP's own parameters' uncertainty, by sigma
points: :math:`[\theta; \eta]` moved by :math:`\pm\sqrt{\lambda_k} v_k` along each
principal direction of their joint covariance :math:`C` (here each unconstrained
coefficient and each identified direction of :math:`\eta` carries a weak normal prior,
:data:`PRIOR_SD`, so that one the data leave free widens the prediction instead of being
left out, and none moves by more than a factor of about :math:`e`); the predictive variance
adds :math:`\sum_k \big((\mu_k^+ - \mu_k^-)/2\big)^2`, the spread of the posterior means
at those points (exact for a mean linear in the parameters). A direction of
:math:`\eta` the objective does not curve is held (:func:`laplace_covariance`).

A model provides ``_laplace_parameters(nuisance) -> (names, theta, eta)``,
``_laplace_loss()`` (the negative objective, twice differentiable) and, for sigma points,
``_gauss_newton(f0) -> (joint, ...)`` and ``f0`` (:mod:`~pyro_pidkl.infer.sigma_points`).
"""

import contextlib
import math

import torch

from ..checks import warn

__all__ = ["PRIOR_SD", "coefficient_intervals", "laplace", "laplace_covariance", "laplace_parts",
           "parameters_at"]

#: the standard deviation of the weak normal prior on each unconstrained coefficient that
#: sigma points carry: a coefficient the data leave free moves by a factor e either way (of
#: a positive one), not by an infinite amount or not at all
PRIOR_SD = 1.0


def laplace_covariance(H, n_theta, flat=1e-7, prior_sd=None, nuisance_prior_sd=None,
                       prior_precision=None):
    r"""The Laplace covariance from the Hessian ``H`` of the negative objective over
    :math:`[\theta; \eta]` (coefficients first, ``n_theta`` of them).

    Flatness is judged on the *equilibrated* Hessian :math:`D^{-1/2} H D^{-1/2}` (``D`` its
    diagonal), so that it does not depend on the parameters' units: a direction is flat when
    its curvature is at most ``flat`` times that of the parameters it mixes (a ridge, a
    correlation of one) or negative (a saddle), and a parameter whose own curvature is below
    ``1e-12`` of the largest (a noise at its floor) is flat outright. (Judged against the
    largest curvature of ``H`` instead, a coefficient curved 4 beside a noise curved 1e8 was
    cut.) First the nuisance block :math:`H_{\eta\eta} = V \Lambda V^\top` is taken
    direction by direction: a direction whose curvature is at most ``flat`` times the
    largest of ``H``, or negative (a noise ratio that the profiled scale absorbs, a
    parameter at its floor, a saddle of an unobserved output's lengthscale), is not
    identified by the objective and is held at its value, not integrated over, so that it
    cannot blur the coefficients. The
    coefficients and the curved nuisance directions :math:`V_+` are then inverted together,

    .. math::
        C = T\,(T^\top H T)^{-1} T^\top, \qquad
        T = \begin{bmatrix} I & 0 \\ 0 & V_+ \end{bmatrix},

    so a coefficient's marginal is :math:`(H_{\theta\theta} - H_{\theta\eta} V_+
    \Lambda_+^{-1} V_+^\top H_{\eta\theta})^{-1}`. A flat direction of :math:`T^\top H
    T` carries no information from the objective and is cut from it. With ``prior_sd``, each
    unconstrained coefficient carries a normal prior of that standard deviation about its
    estimate, and with ``nuisance_prior_sd`` each curved nuisance direction likewise; their
    precision is added *after* the cut, so a direction the data leave free gets the prior's
    width whatever the objective's curvature elsewhere (added before the cut, a prior
    precision of 1 fell below ``flat`` times a Hessian of :math:`10^{10}` and the direction
    was dropped: a coefficient reported free then left the predictive variance). A cut
    direction no prior reaches makes every coefficient (and curved nuisance direction) with
    a loading above ``1e-3`` on it unidentified (``inf``).

    ``prior_precision`` ``(p, p)``, the Hessian of the negative log of the priors the model
    declares (a coefficient's ``Parameter(prior=...)``, the GP's ``priors``), is part of
    ``H`` but not of what the data say: the cuts are made on ``H - prior_precision`` and the
    declared priors' curvature is added after them, as the weak priors' is (a LogNormal
    prior of width 0.3 has a curvature of 11, below 1e-7 of a Hessian of 1e8).

    :returns: ``(p, p)``; a held nuisance parameter has zero rows (``inf`` on the diagonal
        of one tied to an unidentified direction)."""
    p = H.shape[0]
    P0 = torch.zeros_like(H) if prior_precision is None else 0.5 * (prior_precision
                                                                      + prior_precision.T)
    H = H - P0                                      # what the objective says without priors
    size = H.abs().max().clamp(min=1e-300)
    tiny = TINY * float(size)
    # stage 1: the curved nuisance directions, and those a declared prior reaches
    lam, V = torch.linalg.eigh(H[n_theta:, n_theta:])
    V = V[:, lam > flat * size]
    lam0, V0 = torch.linalg.eigh(P0[n_theta:, n_theta:])
    if lam0.numel():
        V0 = V0[:, lam0 > 1e-12 * float(lam0.abs().max().clamp(min=1e-300))]
    if V0.shape[1]:
        lam1, V1 = torch.linalg.eigh(V @ V.T + V0 @ V0.T)
        V = V1[:, lam1 > 0.5]
    V = _without_saddle_makers(H, n_theta, V, flat, TINY * float(size))
    k = n_theta + V.shape[1]
    T = _basis(p, n_theta, V)
    Hk = T.T @ H @ T
    # stage 2, in equilibrated coordinates x' = D^1/2 x (D the diagonal of Hk): a direction
    # the objective does not curve, relative to the curvatures of the parameters it mixes
    # (a correlation of one: a ridge), or curves negatively (a saddle), carries no
    # information from the data; the priors' precision is added after this cut
    d = _scale(Hk.diagonal(), tiny)
    S = Hk / d.sqrt()[:, None] / d.sqrt()[None, :]
    evals, evecs = torch.linalg.eigh(0.5 * (S + S.T))
    curved = evals > flat
    weak = torch.zeros(k, dtype=H.dtype, device=H.device)
    if prior_sd is not None:
        weak[:n_theta] = 1.0 / prior_sd ** 2
    if nuisance_prior_sd is not None:
        weak[n_theta:] = 1.0 / nuisance_prior_sd ** 2
    prior = (torch.diag(weak) + T.T @ P0 @ T) / d.sqrt()[:, None] / d.sqrt()[None, :]
    null = evecs[:, ~curved]                               # (k, r): the flat directions
    lam0, U0 = torch.linalg.eigh(null.T @ prior @ null)
    loose = null @ U0[:, lam0 <= 1e-9 * float(prior.abs().max().clamp(min=1e-300))]
    # the precision: the curved part and the priors, inverted on the directions either reaches
    P = (evecs[:, curved] * evals[curved]) @ evecs[:, curved].T + prior
    if loose.shape[1]:
        Q = torch.linalg.svd(torch.eye(k, dtype=H.dtype, device=H.device)
                             - loose @ loose.T)[0][:, :k - loose.shape[1]]
    else:
        Q = torch.eye(k, dtype=H.dtype, device=H.device)
    Ck = Q @ torch.linalg.inv(Q.T @ P @ Q) @ Q.T
    Ck = 0.5 * (Ck + Ck.T) / d.sqrt()[:, None] / d.sqrt()[None, :]
    bad_any = loose.shape[1] > 0
    cov = T @ Ck @ T.T
    if bad_any:
        loose = (loose.abs() > 1e-3).any(1)             # in the coordinates of T
        # back to the parameters: the coefficients as they are, each nuisance parameter
        # that loads on a loose curved direction
        rows = torch.cat([loose[:n_theta], (V[:, loose[n_theta:]].abs() > 1e-3).any(1)])
        cov[rows, :] = 0.0
        cov[:, rows] = 0.0
        cov[rows, rows] = math.inf
    return cov


#: a parameter whose curvature is below this fraction of the largest is not curved at all (a
#: noise at its floor: 1e-15 beside 1e3)
TINY = 1e-12


def _basis(p, n_theta, V):
    """``T`` ``(p, n_theta + r)``: the coefficients as they are, the nuisance block on the
    columns of ``V``."""
    T = torch.zeros(p, n_theta + V.shape[1], dtype=V.dtype, device=V.device)
    T[range(n_theta), range(n_theta)] = 1.0
    T[n_theta:, n_theta:] = V
    return T


def _flat_count(Hk, flat, tiny):
    """How many directions of ``Hk`` are flat or negative on its equilibrated scale."""
    d = _scale(Hk.diagonal(), tiny)
    S = Hk / d.sqrt()[:, None] / d.sqrt()[None, :]
    return int((torch.linalg.eigvalsh(0.5 * (S + S.T)) <= flat).sum())


def _without_saddle_makers(H, n_theta, V, flat, tiny):
    r"""The curved nuisance directions ``V`` less those whose coupling to the coefficients
    makes a saddle: each is curved on its own, but integrating over it would turn a
    coefficient the objective curves (with the GP's parameters held) into a flat or negative
    direction, the point being no maximum jointly in them (a fit stopped where a coefficient
    and a lengthscale still trade: a rate curved 9e4, reported free). Such a direction is
    held, as a nuisance direction of negative curvature is; the fewest are dropped, greedily
    (the one whose removal leaves the fewest flat directions, the least curved first)."""
    p = H.shape[0]
    base = _flat_count(H[:n_theta, :n_theta], flat, tiny) if n_theta else 0
    while V.shape[1]:
        T = _basis(p, n_theta, V)
        if _flat_count(T.T @ H @ T, flat, tiny) <= base:
            break
        counts = []
        for j in range(V.shape[1]):
            W = torch.cat([V[:, :j], V[:, j + 1:]], 1)
            T = _basis(p, n_theta, W)
            counts.append(_flat_count(T.T @ H @ T, flat, tiny))
        curv = (V * (H[n_theta:, n_theta:] @ V)).sum(0)
        j = min(range(V.shape[1]), key=lambda i: (counts[i], float(curv[i])))
        V = torch.cat([V[:, :j], V[:, j + 1:]], 1)
    return V


def _scale(diag, tiny):
    """Each parameter's own curvature for equilibration: ``|H_ii|``, or 1 where it is below
    ``tiny`` (its row is then cut as flat)."""
    d = diag.abs()
    return torch.where(d > tiny, d, torch.ones_like(d))


def laplace(model, nuisance=True, prior_sd=None):
    r"""The Hessian of the model's negative objective over :math:`[\theta; \eta]` (only
    :math:`\theta` without ``nuisance``) and its :func:`laplace_covariance` (with
    ``prior_sd``).

    :returns: ``(names, sizes, H, cov)``: the coefficients' names and sizes, ``H`` and
        ``cov`` ``(p, p)``.
    """
    names, sizes, H, P0 = laplace_parts(model, nuisance)
    return names, sizes, H, laplace_covariance(H, sum(sizes), prior_sd=prior_sd,
                                               prior_precision=P0)


def _hessian_of(loss_fn, params):
    """The symmetric Hessian ``(p, p)`` of ``loss_fn()`` over ``params`` by double
    backward (zeros where it does not depend on them)."""
    with torch.enable_grad():
        loss = loss_fn()
        if not (torch.is_tensor(loss) and loss.requires_grad):
            n = sum(q.numel() for q in params)
            return torch.zeros(n, n, dtype=params[0].dtype, device=params[0].device)
        grads = torch.autograd.grad(loss, params, create_graph=True, allow_unused=True)
        flat = torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1)
                          for g, p in zip(grads, params)])
        rows = []
        for i in range(flat.numel()):
            row = (torch.autograd.grad(flat[i], params, retain_graph=True, allow_unused=True)
                   if flat[i].requires_grad else [None] * len(params))
            rows.append(torch.cat([(r if r is not None else torch.zeros_like(p)).reshape(-1)
                                   for r, p in zip(row, params)]))
    H = torch.stack(rows).detach()
    return 0.5 * (H + H.T)


def laplace_parts(model, nuisance=True):
    r"""The Hessian ``H`` of the model's negative objective over :math:`[\theta; \eta]`
    and the Hessian ``P0`` of its negative log priors (the declared ones, part of ``H``).

    :returns: ``(names, sizes, H, P0)``."""
    names, theta, eta = model._laplace_parameters(nuisance)
    params = theta + eta
    H = _hessian_of(model._laplace_loss, params)
    log_prior = getattr(model, "log_prior", None)
    P0 = (_hessian_of(lambda: -log_prior(), params) if log_prior is not None
          else torch.zeros_like(H))
    return names, [t.numel() for t in theta], H, P0


def _parts(model, nuisance):
    """:func:`laplace_parts` through the model's own (cached) ``laplace_parts`` where it has
    one."""
    own = getattr(type(model), "laplace_parts", None)
    return model.laplace_parts(nuisance) if own is not None else laplace_parts(model, nuisance)


def _hessian(model, nuisance, prior_sd):
    """``(names, sizes, H, cov, P0)``: the parts and the covariance with ``prior_sd``."""
    names, sizes, H, P0 = _parts(model, nuisance)
    return names, sizes, H, laplace_covariance(H, sum(sizes), prior_sd=prior_sd,
                                               prior_precision=P0), P0


def _tolist(t, size):
    t = t.detach().cpu()
    return t.item() if size == 1 and t.dim() <= 1 else t.tolist()


def coefficient_intervals(model, prob=0.9, nuisance=True, prior_sd=None):
    r"""Central ``prob`` intervals of the learned coefficients from the marginal
    :math:`C_{\theta\theta}` (the GP's scalar parameters integrated out with
    ``nuisance=True``), mapped from the unconstrained space through each coefficient's
    constraint; with ``prior_sd`` under the weak prior of :func:`laplace_covariance`.

    :returns: ``{name: {"value", "lower", "upper", "sd", "identified"}}``, ``sd`` the
        delta method's standard deviation of the value, all in the coefficient's own units;
        ``identified`` whether the data alone (the GP's parameters held) narrow the
        coefficient to half a vague prior's width (:data:`IDENTIFIED_SHRINK`).
    """
    names, sizes, H, cov, P0 = _hessian(model, nuisance, prior_sd)
    if not names:
        return {}
    # identified: whether the data alone (no declared prior, a vague one after the cut)
    # narrow the coefficient, the GP's parameters held at the fit: a saddle among those (a
    # fit stopped where a lengthscale still curves down) would otherwise call a well-pinned
    # coefficient free
    n = sum(sizes)
    plain = laplace_covariance((H - P0)[:n, :n], n, prior_sd=IDENTIFIED_PRIOR_SD)
    free = ~(plain.diagonal() < (IDENTIFIED_SHRINK * IDENTIFIED_PRIOR_SD) ** 2)
    _, theta, _ = model._laplace_parameters(False)
    sd = cov.diagonal()[:sum(sizes)].clamp(min=0).sqrt()
    z = torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(0.5 + prob / 2)).item()
    out, k = {}, 0
    for n, t_raw, size in zip(names, theta, sizes):
        spec = (model.coefficient_spec(n) if hasattr(model, "coefficient_spec")
                 else model.equation.specs[n])
        t = torch.distributions.transform_to(spec.constraint)
        th, s = t_raw.detach().reshape(-1), sd[k:k + size]
        lo, hi = t(torch.nan_to_num(th - z * s)), t(torch.nan_to_num(th + z * s))
        slope = t.log_abs_det_jacobian(th, t(th)).exp()          # |dt/du|, elementwise
        out[n] = {"value": _tolist(t(th), size), "lower": _tolist(torch.minimum(lo, hi), size),
                  "upper": _tolist(torch.maximum(lo, hi), size),
                  "sd": _tolist(slope.abs() * s, size),
                  "identified": bool(not free[k:k + size].any())}
        k += size
    # a coefficient the data leave free but a declared prior pins: its prior decides it
    for name in names:
        spec = (model.coefficient_spec(name) if hasattr(model, "coefficient_spec")
                else model.equation.specs[name])
        if not out[name]["identified"] and spec.prior is not None:
            out[name]["decided_by"] = "prior"
    decided = [n for n, v in out.items() if v.get("decided_by") == "prior"]
    if decided:
        one = len(decided) == 1
        warn(f"The declared prior of {', '.join(decided)} decides {'it' if one else 'them'}: "
             f"at the fit the data and the equation do not narrow {'it' if one else 'them'} "
             f"(decided_by 'prior'), and {'its interval is' if one else 'their intervals are'} "
             f"about the prior's")
    free_names = [n for n, v in out.items() if not v["identified"] and n not in decided]
    wide = [n for n, v in out.items() if v["identified"] and _decades(v) > WIDE_DECADES]
    if wide:
        warn(f"The {prob:.0%} interval of {', '.join(wide)} spans more than {WIDE_DECADES} "
             f"orders of magnitude: the data and the equation barely constrain "
             f"{'it' if len(wide) == 1 else 'them'} (is the equation the right one?)")
    if free_names:
        finite = all(math.isfinite(float(torch.as_tensor(out[n]["upper"]).max()))
                     for n in free_names)
        what = ("its prior's" if len(free_names) == 1 else "their priors'") if finite else \
            "the whole range"
        warn(f"The data and the equation leave {', '.join(free_names)} free (a flat direction "
             f"of the objective): {'its interval is' if len(free_names) == 1 else 'their intervals are'} "
             f"{what}: hold one fixed (Parameter(value, fixed=True)) or give data where it "
             f"acts")
    return out


#: an interval wider than this many decades (of a positive coefficient) is warned of
WIDE_DECADES = 6

#: a coefficient is identified when the data alone (the GP's parameters held, a vague
#: normal prior of sd :data:`IDENTIFIED_PRIOR_SD` on its unconstrained scale added after the
#: cut for flat directions) give it a standard deviation below :data:`IDENTIFIED_SHRINK`
#: times that prior's: a ridge or saddle that a strongly curved coefficient merely touches
#: (a loading of 0.07 on the flat direction of another) leaves it identified
IDENTIFIED_PRIOR_SD = 2.0
IDENTIFIED_SHRINK = 0.5


def _decades(v):
    """How many orders of magnitude a positive interval spans (0 for others)."""
    lower, upper = torch.as_tensor(v["lower"]), torch.as_tensor(v["upper"])
    positive = (lower > 0) & torch.isfinite(upper)
    if not bool(positive.any()):
        return 0.0
    return float((upper[positive] / lower[positive]).log10().max())


@contextlib.contextmanager
def parameters_at(params, values):
    """The tensors ``params`` hold ``values`` inside the block: their storage is swapped, not
    written, so that a state key of versions and storage is the same again on leaving."""
    saved = [q.data for q in params]
    try:
        for q, v in zip(params, values):
            q.data = v
        yield
    finally:
        for q, v in zip(params, saved):
            q.data = v


def _has_priors(model):
    """Whether every learned coefficient of ``model`` carries a prior in its objective (the
    conditioned GPs: declared, or their weak default)."""
    return hasattr(model, "log_prior") and hasattr(model, "_coefficients")
