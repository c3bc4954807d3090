r"""Whether a :class:`~pyro_pidkl.statespace.StateSpaceGP` fit's data and ODE agree,
judged on the ODE's exact trajectory at the fit (not on the solver's own likelihood, whose
calibrated diffusion grows with a wrong ODE's misfit).
"""

import math

import numpy as np
import torch

__all__ = ["DIFFERENCE_RATIO", "EVIDENCE_DATA", "adequacy", "difference_check",
           "exact_residuals", "noise_check", "noise_rejected"]

#: the most data whose evidence for the ODE is judged after a fit (:func:`adequacy`)
EVIDENCE_DATA = 400

#: past that many data, an exact trajectory's residual scale above this multiple of the
#: data's own noise (successive differences) is a misfit
DIFFERENCE_RATIO = 2.0


def adequacy(model, most=EVIDENCE_DATA):
    r"""Whether the data and the ODE agree, judged on the ODE's exact trajectory with the
    fitted coefficients and initial state (integrated by LSODA): its profiled Gaussian
    log-likelihood of each output's data against the best SE-ARD GP of those data alone
    (centred, in the same units; :func:`~pyro_pidkl.gp.data_fit.fit_data_only`), summed,
    as the conditioned GPs' :meth:`adequacy` judges theirs. Below :math:`-\log 100`
    (:data:`~pyro_pidkl.diagnostics.adequacy.EVIDENCE_TOL`) the data contradict the
    ODE, or the fit ended in a wrong optimum. Not the solver's own
    :math:`\log p(y \mid o = 0)`: its calibrated diffusion grows with the ODE's misfit
    and loosens the prior until a wrong ODE explains the data as a smooth GP does (a
    random forced oscillator fitted at c = 52 against the truth's 0.23 passed that
    test). Past ``most`` data, the exact trajectory's residual scale against the data's
    own noise instead (:func:`difference_check`); a trajectory that cannot be
    integrated over the data disagrees.

    :returns: ``{"evidence_ratio", "noise_ratio", "agree", "noise"}`` (one of the ratios
        ``None``; ``"noise"`` :func:`noise_check`'s), or ``None`` (an output with under
        three data)."""
    from ..diagnostics.adequacy import EVIDENCE_TOL
    from ..gp.data_fit import fit_data_only
    filt = model.filter
    if model.result is None:
        raise RuntimeError("Expected a fitted model: call pk.fit(model) first")
    residuals = exact_residuals(model)
    if residuals is None:
        return {"evidence_ratio": -math.inf, "noise_ratio": None, "agree": False}
    noise = noise_check(model, residuals)
    if sum(len(t) for t, _ in model.observations) > most:
        return {**difference_check(model, residuals), "noise": noise}
    ratio = 0.0
    for c in filt.measured:
        t, y = model.observations[c]
        if len(t) < 3:
            return None
        U = torch.as_tensor((t - t.mean()) / max(float(t.std()), 1e-300))[:, None]
        yc = torch.as_tensor((y - y.mean()) / float(filt.scale[c]))
        found = fit_data_only(U, yc, lengthscale=[0.3, 1.0, 3.0])
        if found is None:
            return None
        r = residuals[c] / float(filt.scale[c])
        n = len(r)
        exact = (-0.5 * n * math.log(max(float(np.mean(r ** 2)), 1e-300))
                 - 0.5 * n * (1 + math.log(2 * math.pi)))
        ratio += exact - found.log_likelihood
    return {"evidence_ratio": ratio, "noise_ratio": None, "agree": ratio >= -EVIDENCE_TOL,
            "noise": noise}


def noise_check(model, residuals):
    r"""``{output: nats}``: how much more likely log-normal noise about the exact trajectory
    makes each measured output's data than the fit's constant Gaussian noise
    (:func:`~pyro_pidkl.diagnostics.noise_model.multiplicative_evidence`, as the
    conditioned GPs judge theirs); above
    :data:`~pyro_pidkl.diagnostics.noise_model.NOISE_TOL` the data reject the noise model,
    the fit warns and no coefficient is identified."""
    from ..diagnostics.noise_model import multiplicative_evidence
    out = {}
    for c in model.filter.measured:
        _, y = model.observations[c]
        value = multiplicative_evidence(y, y - residuals[c])
        if math.isfinite(value):
            out[model.components[c]] = value
    return out


def noise_rejected(model):
    """The outputs whose constant noise the fit's adequacy check rejected (kept in
    ``model.result.stages``, so a saved and loaded fit says the same)."""
    from ..diagnostics.noise_model import rejected
    stages = [] if model.result is None else model.result.stages
    judged = next((s["adequacy"] for s in stages if "adequacy" in s), None)
    return list(rejected((judged or {}).get("noise")))


def warn_noise(judged):
    """Warn in one line where ``judged`` (:func:`adequacy`'s) finds the noise model
    rejected."""
    import warnings
    from ..diagnostics.adequacy import ModelMisfitWarning
    from ..diagnostics.noise_model import rejected, rejection
    found = rejected((judged or {}).get("noise"))
    if found:
        text = rejection(found, " about the ODE's exact trajectory")
        warnings.warn(text[0].upper() + text[1:], ModelMisfitWarning, stacklevel=3)

def exact_residuals(model):
    """Each output's data minus the ODE's exact trajectory with the fitted coefficients
    and initial state (``{component: (n_c,)}``, user units), or ``None`` where it cannot
    be integrated over the data."""
    filt = model.filter
    P, C = filt.P, filt.C
    v = model.result.v
    values = {n: t(torch.tensor(float(v[k]), dtype=torch.float64))
              for k, (n, t) in enumerate(filt.transforms)}
    x0 = torch.as_tensor(v[P:P + C] * filt.scale.numpy())[None]
    times = np.unique(np.concatenate([t for t, _ in model.observations if len(t)]))
    traj = model.ode.integrate(model.t0, x0, times, values, max_evaluations=50000)
    if traj is None:
        return None
    out = {}
    for c in filt.measured:
        t, y = model.observations[c]
        out[c] = y - traj[0, c, np.searchsorted(times, t)]
    return out

def difference_check(model, residuals):
    r"""Many data: the exact trajectory's residual scale of each measured output against
    the noise its data show by themselves, :math:`\hat\sigma^2 = \sum_i (y_{i+1} -
    y_i)^2 / (2 (n - 1))` (von Neumann's estimate, for data dense enough that the signal
    moves little between neighbours): above :data:`DIFFERENCE_RATIO` times it the
    trajectory misses the data. ``{"noise_ratio": float, "agree": bool}``."""
    worst = 0.0
    for c in model.filter.measured:
        t, y = model.observations[c]
        if len(t) < 3:
            continue
        alone = math.sqrt(float(np.sum(np.diff(y) ** 2)) / (2 * (len(y) - 1)))
        fitted = math.sqrt(float(np.mean(residuals[c] ** 2)))
        worst = max(worst, fitted / max(alone, 1e-300))
    return {"noise_ratio": worst, "agree": worst <= DIFFERENCE_RATIO,
            "evidence_ratio": None}
