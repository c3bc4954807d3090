r"""Other coefficient sets that fit as well: symmetries said aloud.

Some laws give the same curve for two sets of coefficients (the flip-flop of first-order
absorption and elimination: :math:`k_a` and :math:`k_e` exchanged, the volume rescaled).
For each group, its own data are fitted alone (no population, no penalty) from a design of
starts around its estimate (a Sobol design within ``half`` of it in every unconstrained
coefficient), every start of every group in one batch by Levenberg-Marquardt. Minima whose
standardised residual sums of squares are within :data:`SAME_FIT` of the group's best,
isolated (their Gauss-Newton matrix not singular) and apart by more than
:data:`APART` in some unconstrained coefficient, are the group's **branches**: the data
cannot tell them apart. The report names, per group, the branches, which one the
population fit took (the nearest to its estimate), the coefficients whose order the
branches exchange (the convention taken, e.g. ``ka > ke``), and, where any group has
branches, the population refitted from the other branches with its log-likelihood beside
the first's.
"""

import math

import numpy as np
import torch
from scipy.stats import qmc

from .model import central_batch

__all__ = ["APART", "LIKELY", "SAME_FIT", "find_branches", "population_optima"]

#: two minima fit a group's data equally when their sums of squared standardised residuals
#: (chi-square units) differ by less than this: a likelihood ratio above 0.95, evidence the
#: data cannot give either way
SAME_FIT = 0.1
#: and are distinct when some unconstrained coefficient differs by more than this
APART = 0.1


#: another population optimum within this many log-likelihood units of the best is said
LIKELY = 2.0


def population_optima(pop, fit, refit, starts=4, half=1.0, seed=0):
    """The population refitted from ``starts`` Sobol starts of the fixed effects within
    ``half`` (unconstrained) of the model's own start: ``[{"loglik", "beta", "values",
    "fit"}]``, the given ``fit`` first, best first after it."""
    p = pop.beta_start.shape[0]
    design = qmc.Sobol(p, scramble=True, seed=seed + 1).random(starts) * 2 * half - half
    out, saved = [], pop.beta_start
    try:
        for d in design:
            pop.beta_start = saved + torch.as_tensor(d)
            try:
                other = refit(pop, tol=1e-5, branches=False, starts=0)
            except (RuntimeError, ValueError):
                continue
            if math.isfinite(other.loglik):
                out.append(other)
    finally:
        pop.beta_start = saved
    out.sort(key=lambda f: -f.loglik)
    return [fit] + out


def say_optima(pop, found):
    """Lines naming the population optima distinct from the best (some fixed effect apart
    by more than :data:`APART`) within :data:`LIKELY` of its log-likelihood."""
    best, lines = found[0], []
    seen = [best.beta]
    for f in found[1:]:
        if best.loglik - f.loglik > LIKELY:
            continue
        if any(np.abs(f.beta - b).max() <= APART for b in seen):
            continue
        seen.append(f.beta)
        vals = ", ".join(f"{k} {v['value']:.4g}" for k, v in list(f.intervals().items())[:6])
        lines.append(f"another population optimum {best.loglik - f.loglik:.2f} log-likelihood "
                     f"units below the reported one ({vals}): the data leave the population "
                     "between branches; the intervals hold inside one")
    return lines


def _individual_fits(pop, fit, offsets, iterations=25, steps=None):
    """Every group's data fitted alone from its estimate moved by each of ``offsets``
    ``(S, P)`` (unconstrained), or from ``offsets`` ``(G, S, P)`` themselves: ``(phi (G, S,
    P), ss (G, S), flat (G, S))``, ``flat`` where the Gauss-Newton matrix is singular."""
    G, P = fit.phi.shape
    offsets = torch.as_tensor(np.asarray(offsets, dtype=float))
    phi = offsets if offsets.dim() == 3 else torch.as_tensor(fit.phi)[:, None, :] + offsets[None]
    steps = steps or fit.steps
    S = phi.shape[1]
    sigma = torch.as_tensor(fit.sigma)[torch.as_tensor(pop.noise_index)]
    z = pop.obs_z
    gi = torch.as_tensor(pop.obs_group)

    def residuals(theta):            # theta (G, S, P): r (G, S, n) masked, J (G, S, n, P)
        batch, h = central_batch(theta.reshape(-1, P))
        batch = batch.reshape(-1, P)
        rows = np.repeat(np.repeat(np.arange(G), S), 2 * P + 1)
        with torch.no_grad():
            X = pop.trajectories(batch, rows, steps=steps)
        X = X.reshape(G, S, 2 * P + 1, *X.shape[1:])
        comp, tim = torch.as_tensor(pop.obs_comp), torch.as_tensor(pop.obs_time)
        f = X[gi, :, :, comp, tim]                                        # (n, S, 2P + 1)
        f = torch.where(pop.log_noise[:, None, None], torch.log(f.clamp_min(1e-300)), f)
        r = (z[:, None] - f[..., 0]) / sigma[:, None]                     # (n, S)
        J = -(f[..., 1:P + 1] - f[..., P + 1:]) / (2 * h.reshape(G, S, P)[gi]) \
            / sigma[:, None, None]                                        # (n, S, P)
        return r, J

    def totals(r, J):
        mask = torch.zeros(G, r.shape[0], dtype=r.dtype)
        mask[gi, torch.arange(r.shape[0])] = 1.0
        r = torch.where(torch.isfinite(r), r, torch.full_like(r, 1e150))
        J = torch.where(torch.isfinite(J), J, torch.zeros_like(J))
        ss = torch.einsum("gn,ns->gs", mask, r ** 2)
        A = torch.einsum("gn,nsp,nsq->gspq", mask, J, J)
        b = torch.einsum("gn,nsp,ns->gsp", mask, J, r)
        return ss, A, b

    r, J = residuals(phi)
    ss, A, b = totals(r, J)
    lam = torch.full((G, S), 1e-3, dtype=torch.float64)
    eye = torch.eye(P, dtype=torch.float64)
    for _ in range(iterations):
        d = torch.diagonal(A, dim1=-2, dim2=-1).clamp_min(1e-12)
        M = A + lam[..., None, None] * torch.diag_embed(d) + 1e-12 * eye
        step = -torch.linalg.solve(M, b[..., None])[..., 0]
        step = torch.where(torch.isfinite(step), step, torch.zeros_like(step))
        trial = phi + step.clamp(-2.0, 2.0)
        r2, J2 = residuals(trial)
        ss2, A2, b2 = totals(r2, J2)
        better = torch.isfinite(ss2) & (ss2 <= ss)
        if not bool((better & (ss - ss2 > 1e-10 * ss)).any()) and bool((lam > 1e6).all()
                                                                      | ~better.any()):
            break
        phi = torch.where(better[..., None], trial, phi)
        ss = torch.where(better, ss2, ss)
        A = torch.where(better[..., None, None], A2, A)
        b = torch.where(better[..., None], b2, b)
        lam = torch.where(better, (lam / 10).clamp_min(1e-12), lam * 8)
    A = np.nan_to_num(A.numpy(), nan=0.0, posinf=0.0, neginf=0.0)
    flat = np.ones((G, S), dtype=bool)
    for i in range(G):
        for k in range(S):
            try:
                lam_ik = np.linalg.eigvalsh(A[i, k])
                flat[i, k] = lam_ik[0] <= 1e-10 * max(lam_ik[-1], 1e-300)
            except np.linalg.LinAlgError:
                pass
    ss = ss.numpy()
    ss[~np.isfinite(ss) | (ss > 1e100)] = np.inf
    return phi.numpy(), ss, flat


def _orderings(pop, sets, taken):
    """Pairs of coefficients whose order the ``sets`` exchange, as the convention of the
    set ``taken`` (``["ka > ke"]``)."""
    names = [en.name for en in pop.entries if en.state is None]
    cols = [j for j, en in enumerate(pop.entries) if en.state is None]
    values = [[float(pop.entries[j].transform(torch.tensor(s[j], dtype=torch.float64)))
               for j in cols] for s in sets]
    out = []
    for a in range(len(cols)):
        for b in range(a + 1, len(cols)):
            signs = {np.sign(v[a] - v[b]) for v in values}
            if len(signs) > 1:
                hi, lo = (a, b) if values[taken][a] > values[taken][b] else (b, a)
                out.append(f"{names[hi]} > {names[lo]}")
    return out


def _polish(pop, fit, phi, ss, keep=2, within=25.0):
    """Each group's ``keep`` best distinct minima (those within ``within`` of its best, in
    chi-square units) refined on steps placed and checked for them (a
    branch can need shorter steps than the population's fit: a fast elimination late),
    the steps of the fit restored after."""
    G = phi.shape[0]
    best = np.empty((G, keep, phi.shape[2]))
    for i in range(G):                  # the best distinct minima (repeated to fill)
        reps = []
        for k in np.argsort(np.where(np.isfinite(ss[i]), ss[i], np.inf)):
            if reps and not ss[i, k] <= ss[i, reps[0]] + within:
                break
            if all(np.abs(phi[i, k] - phi[i, m]).max() > APART for m in reps):
                reps.append(k)
            if len(reps) == keep:
                break
        best[i] = phi[i, [reps[j % len(reps)] for j in range(keep)]]
    rows = np.repeat(np.arange(G), keep)
    flat_phi = torch.as_tensor(best.reshape(-1, best.shape[2]))
    saved = pop._density
    try:
        pop.set_density(flat_phi, rows=rows)
        steps = pop.choose_steps(flat_phi, rows=rows, start=fit.steps)
        return _individual_fits(pop, fit, best, iterations=20, steps=steps)
    finally:
        pop._density = saved


def _branches(pop, fit, phi, ss, flat):
    """Each group's isolated minima as good as its best (module docstring):
    ``({label: {...}}, [labels whose best minimum is not isolated]})``."""
    groups, unidentified = {}, []
    for i, label in enumerate(pop.data.labels):
        best = float(np.nanmin(ss[i]))
        same = np.flatnonzero(ss[i] <= best + SAME_FIT)
        if flat[i, same].any():
            unidentified.append(label)
            continue
        reps = []
        for k in same:
            if all(np.abs(phi[i, k] - phi[i, m]).max() > APART for m in reps):
                reps.append(k)
        if len(reps) < 2:
            continue
        sets = [phi[i, k] for k in reps]
        taken = int(np.argmin([np.abs(s - fit.phi[i]).max() for s in sets]))
        groups[label] = {
            "sets": [{en.name: float(en.transform(torch.tensor(s[j], dtype=torch.float64)))
                      for j, en in enumerate(pop.entries)} for s in sets],
            "phi": [s.tolist() for s in sets], "taken": taken,
            "convention": _orderings(pop, sets, taken)}
    return groups, unidentified


def find_branches(pop, fit, starts=16, half=3.0, seed=0, population=True, refit=None):
    r"""Each group's branches (module docstring): ``{"groups": {label: {"sets": [{name:
    value}], "taken": k, "convention": [...]}}, "alone_unidentified": [labels],
    "population": {...} or None, "lines": [text]}``; ``refit`` (the population fit,
    :func:`~pyro_pidkl.population.foce.fit_population`) refits the population from the other
    branches where given."""
    P = fit.phi.shape[1]
    design = qmc.Sobol(P, scramble=True, seed=seed).random(starts) * 2 * half - half
    phi, ss, flat = _individual_fits(pop, fit, np.vstack([np.zeros(P), design]))
    groups, unidentified = _branches(pop, fit, phi, ss, flat)
    # a symmetry of the law is every group's: the moves between one group's branches,
    # tried from every other group's estimate
    moves = [np.asarray(p) - np.asarray(g["phi"][g["taken"]])
             for g in groups.values() for k, p in enumerate(g["phi"]) if k != g["taken"]]
    if moves and len(groups) + len(unidentified) < pop.n_groups:
        more = _individual_fits(pop, fit, np.asarray(moves[:starts]))
        phi, ss, flat = (np.concatenate([a, b], 1) for a, b in zip((phi, ss, flat), more))
        groups, unidentified = _branches(pop, fit, phi, ss, flat)
    phi, ss, flat = _polish(pop, fit, phi, ss)
    groups, unidentified = _branches(pop, fit, phi, ss, flat)
    report = {"groups": groups, "alone_unidentified": unidentified, "population": None}
    lines = []
    if groups:
        conventions = sorted({c for g in groups.values() for c in g["convention"]})
        lines.append(f"{len(groups)} of {pop.n_groups} groups fit their own data equally well "
                     f"with {'/'.join(str(len(g['sets'])) for g in list(groups.values())[:1])} "
                     f"coefficient sets (groups {', '.join(map(str, list(groups)[:12]))}"
                     f"{'...' if len(groups) > 12 else ''}); the population fit takes "
                     f"{', '.join(conventions) or 'the set nearest the population'}")
        if population and refit is not None:
            report["population"] = _other_population(pop, fit, groups, refit)
            other = report["population"]
            if other is not None:
                d = fit.loglik - other["loglik"]
                lines.append(
                    "the population fitted from the other branch: log-likelihood "
                    f"{other['loglik']:.2f} ({'as likely' if abs(d) < 1e-3 else f'{d:.2f} less likely' if d > 0 else f'{-d:.2f} MORE likely: the reported fit is not the best'})"
                    f"; its values {', '.join(f'{k} {v:.4g}' for k, v in other['values'].items())}")
    if unidentified:
        lines.append(f"groups {', '.join(map(str, unidentified[:8]))}: their own data alone "
                     "do not identify their coefficients (the population does)")
    report["lines"] = lines
    return report


def _other_population(pop, fit, groups, refit):
    """The population refitted from each group's other branch (the groups without one at
    their estimate): its log-likelihood and population values, or ``None`` where it
    fails."""
    phi = fit.phi.copy()
    for i, label in enumerate(pop.data.labels):
        g = groups.get(label)
        if g is not None:
            others = [k for k in range(len(g["phi"])) if k != g["taken"]]
            phi[i] = np.asarray(g["phi"][others[0]])
    # the fixed effects that best give these coefficients (least squares in A_i beta)
    A = pop.A.numpy().reshape(-1, pop.A.shape[2])
    beta = np.linalg.lstsq(A, phi.reshape(-1), rcond=None)[0]
    saved = pop.beta_start
    try:
        pop.beta_start = torch.as_tensor(beta)
        other = refit(pop, tol=1e-3, steps=fit.steps, branches=False)
    except (RuntimeError, ValueError):
        return None
    finally:
        pop.beta_start = saved
    if not math.isfinite(other.loglik):
        return None
    return {"loglik": other.loglik,
            "values": {k: v["value"] for k, v in other.intervals().items()}}
