r"""Whether an explicit ODE's exact likelihood can be computed at all: the conditioning of its
initial-value problem over the data's interval.

The exact fit (:mod:`~pyro_pidkl.infer.exact_fit`) integrates :math:`x' = F(t, x; \theta)`
forward from :math:`x_0` at :math:`t_0`. Where a small relative change of :math:`x_0` grows
by orders of magnitude before the data end, the trajectory at the data is the integrator's
error, not the ODE's solution: a boundary-value problem written as an ODE, as
:math:`-\epsilon u'' + u' = 1` with a layer of width :math:`\epsilon` at :math:`x = 1`, has the
mode :math:`e^{x / \epsilon}` (:math:`e^{50}` at :math:`\epsilon = 0.02`), and its initial
slope would have to be given to twenty digits. The amplification along a path :math:`m(t)` that fits the data (the conditioned GP's
posterior mean of the states),

.. math:: \kappa = \max_{t, c, j} \frac{|x_c(t; x_0 + \rho\, s_j(t_0) e_j) - x_c(t; x_0)|}
    {\rho\, s_c(t)}, \qquad s_c(t) = \max\big(|m_c(t)|, \tfrac1{100}
    \max_{|t' - t| \le w} |m_c(t')|\big),

(a relative change :math:`\rho` of each initial state, the largest relative change it makes
at the path's times; a state passing through zero measured against a hundredth of its size
nearby, within :math:`w`, an eighth of the interval, so that a solution growing by orders of
magnitude is measured against itself) is the
factor by which the integrator's own error at the start (its tolerance,
:data:`INTEGRATOR_ERROR`; rounding, for an affine ODE's matrix exponential) reaches the
trajectory. A growing solution is no cause (its relative error stays as it was); a mode the
solution does not contain is. Beyond :data:`ERROR_MAX` relative to the state the exact
likelihood is not computable and the exact fit is refused (:func:`ill_conditioned`).
"""

import math

import numpy as np
import torch

__all__ = ["ERROR_MAX", "INTEGRATOR_ERROR", "ROUNDING", "amplification", "ill_conditioned"]

#: the relative error of an integrated trajectory (LSODA's ``rtol``, as
#: :meth:`~pyro_pidkl.physics.ode.ExplicitODE.integrate` sets it)
INTEGRATOR_ERROR = 1e-6
#: the relative error of an affine ODE's trajectory (the matrix exponential: rounding)
ROUNDING = 1e-14
#: the largest relative error of the trajectory, the start's error times :math:`\kappa`, at
#: which its likelihood is taken as the ODE's: :math:`\kappa` up to 1e5 with LSODA, 1e13
#: for an affine ODE. On 48 random ODE problems at their true coefficients
#: (``python benchmarks/ivp_conditioning.py``: growth laws, forced nonlinear oscillators,
#: reaction networks, epidemics) :math:`\kappa` is at most 557; the boundary layer
#: :math:`-0.02 u'' + u' = 1`'s is about 1e23
ERROR_MAX = 1e-1
#: the relative change :math:`\rho` of each initial state
STEP = 1e-6


def amplification(ode, x0, values, path, scale):
    r""":math:`\kappa` (module docstring) of ``ode`` from ``x0`` ``(C,)`` at the path's first
    time with coefficients ``values`` ``{name: float}``, along ``path`` ``(times (T,), states
    (C, T))``, ``scale`` ``(C,)`` each state's typical size; ``inf`` where a perturbed
    trajectory does not integrate, ``nan`` where the unperturbed one does not (no verdict)."""
    times, m = np.asarray(path[0], dtype=float), np.asarray(path[1], dtype=float)
    x0 = np.asarray(x0, dtype=float)
    w = max(1, m.shape[1] // 16)                 # an eighth of the interval: w either side
    padded = np.pad(np.abs(m), ((0, 0), (w, w)), mode="edge")
    nearby = np.lib.stride_tricks.sliding_window_view(padded, 2 * w + 1, axis=1).max(-1)
    tiny = 1e-12 * np.maximum(np.asarray(scale, dtype=float), 1e-300)
    size = np.maximum(np.maximum(np.abs(m), 1e-2 * nearby), tiny[:, None])      # (C, T)
    C = x0.size
    X0 = np.tile(x0, (C + 1, 1))
    X0[1:] += np.diag(STEP * size[:, 0])
    batch = {n: torch.full((C + 1,), float(v), dtype=torch.float64) for n, v in values.items()}
    with np.errstate(all="ignore"):
        traj = ode.integrate(float(times[0]), torch.as_tensor(X0), times, batch)
        if traj is None:
            base = ode.integrate(float(times[0]), torch.as_tensor(x0[None]), times,
                                 {n: b[:1] for n, b in batch.items()})
            return math.nan if base is None else math.inf
        traj = np.asarray(traj, dtype=float)                            # (C + 1, C, T)
        change = np.abs(traj[1:] - traj[:1]) / (STEP * size[None])
    value = float(np.max(change)) if change.size else 0.0
    return value if math.isfinite(value) else math.inf


def ill_conditioned(ode, x0, values, path, scale):
    r"""``None`` where the exact likelihood of ``ode`` can be computed from ``x0`` (module
    docstring; the arguments :func:`amplification`'s), else a sentence saying why not (for a
    one-line refusal)."""
    kappa = amplification(ode, x0, values, path, scale)
    error = ROUNDING if getattr(ode, "affine", False) else INTEGRATOR_ERROR
    if math.isnan(kappa) or kappa * error <= ERROR_MAX:
        return None
    grown = "beyond floating point" if math.isinf(kappa) else f"{kappa:.1e}-fold"
    t0, t1 = float(path[0][0]), float(path[0][-1])
    return (f"its initial-value problem from t = {t0:.4g} amplifies a change of the initial "
            f"state {grown} by t = {t1:.4g} against the solution (a boundary-value problem, "
            f"or chaos): the trajectory at the data would be the integrator's error")
