"""The probabilistic-numerics peer for ``benchmarks/systems.py``: probdiffeq's parameter
estimation (Tronarp, Bosch & Hennig 2022, "Fenrir"; probdiffeq's own tutorial on it) of the
systems benchmark's ODEs, run in its own environment (``PIDKL_PEER_PD_PYTHON``: an
interpreter with ``probdiffeq``, ``jax``, ``equinox`` and ``scipy``; this library is not
imported here).

Reads the problem as ``numpyro_ode.py`` does (JSON on stdin, plus ``"start"``: the rates'
starting values, the library's generic guess) and writes JSON on stdout. The fit: an
integrated Wiener prior of order 2 per component (blockwise), the ODE as a zeroth-order
Taylor constraint, adaptive steps saved at the data's times (and the predictions'), the log
marginal likelihood of the data (``loss_lml_timeseries``; an output not measured at a time
enters with a standard deviation of 10^6, so it adds a constant), maximised over the log
rates, the initial state and each measured output's log noise by L-BFGS (scipy, on JAX's
value and gradient) through diffusion tempering (output scales 100, 10, 1, each stage from
the last; Beck et al. 2024), Laplace intervals (the Hessian by differences of JAX's gradient). Times are the process's
CPU seconds, JIT included, one thread.
"""

import json
import os
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                                   "intra_op_parallelism_threads=1")
began = time.process_time()

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from probdiffeq import ivpsolve, probdiffeq  # noqa: E402
from scipy.optimize import minimize  # noqa: E402

jax.config.update("jax_enable_x64", True)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jax_odes import SYSTEMS  # noqa: E402

UNSEEN = 1e6
SCALES = (100.0, 10.0, 1.0)


def main():
    spec = json.load(sys.stdin)
    rhs = SYSTEMS[spec["system"]]
    outputs, names = spec["outputs"], spec["coefficients"]
    obs = spec["observations"]
    P, C = len(names), len(outputs)
    measured = [c for c, o in enumerate(outputs) if o in obs]
    t0 = float(spec["t0"])
    predict = [float(t) for t in spec["predict"]]
    times = sorted({float(t) for o in obs.values() for t in o[0]} | set(predict))
    times = [t for t in times if t > t0]
    grid = jnp.array(times)
    u = np.zeros((len(times), C))
    seen = np.zeros((len(times), C), dtype=bool)
    for c, o in enumerate(outputs):
        if o in obs:
            idx = [times.index(float(t)) if float(t) > t0 else None for t in obs[o][0]]
            for i, y in zip(idx, obs[o][1]):
                if i is not None:
                    u[i, c], seen[i, c] = y, True
    u, seen = jnp.asarray(u), jnp.asarray(seen)
    x0_start = []
    for o in outputs:
        if o in obs:
            x0_start.append(float(np.asarray(obs[o][1])[np.argmin(obs[o][0])]))
        else:
            x0_start.append(float(spec["hidden"][o][0]))
    sd_start = [0.1 * float(np.std(obs[outputs[c]][1])) + 1e-3 for c in measured]
    start = np.r_[np.log([spec["start"][n] for n in names]), x0_start, np.log(sd_start)]
    ssm = probdiffeq.state_space_model_blockdiag()
    strategy = probdiffeq.strategy_smoother_fixedpoint()

    def solve(theta, output_scale):
        k = dict(zip(names, jnp.exp(theta[:P])))

        def f(y, /, *, t):
            return rhs(y, t, k)
        vf = probdiffeq.ode(f)
        y0 = theta[P:P + C]
        d1 = f(y0, t=t0)
        d2 = jax.jvp(lambda y: f(y, t=t0), (y0,), (d1,))[1]
        iwp = ssm.prior_wiener_integrated((y0, d1, d2),
                                          output_scale=output_scale * jnp.ones(C))
        ts0 = ssm.constraint_ode_ts0(vf)
        solver = probdiffeq.solver(strategy=strategy, constraint=ts0)
        error = probdiffeq.error_state_std(constraint=ts0)

        def while_loop(cond, body, init):
            return eqx.internal.while_loop(cond, body, init, kind="bounded", max_steps=64)
        fn = ivpsolve.solve_adaptive_save_at(solver=solver, error=error,
                                             while_loop=while_loop)
        return fn(iwp, save_at=jnp.concatenate([jnp.array([t0]), grid]), atol=1e-4,
                  rtol=1e-3)

    loss_lml = probdiffeq.loss_lml_timeseries()

    def nll(theta, output_scale):
        sol = solve(theta, output_scale)
        sd = jnp.full((len(times), C), UNSEEN)
        sd = sd.at[:, jnp.array(measured)].set(
            jnp.where(seen[:, jnp.array(measured)], jnp.exp(theta[P + C:]), UNSEEN))
        full = jnp.concatenate([jnp.zeros((1, C)), u], 0)
        sd = jnp.concatenate([jnp.full((1, C), UNSEEN), sd], 0)
        return -loss_lml(full, std=sd, posterior=sol.solution_full)

    vg = jax.jit(jax.value_and_grad(nll))
    x, nit, error = start, 0, None
    for s in SCALES:
        def f(th, s=s):
            v, g = vg(jnp.asarray(th), s)
            v, g = float(v), np.asarray(g, dtype=float)
            return (v, g) if np.isfinite(v) and np.isfinite(g).all() else (1e30, np.zeros_like(g))
        res = minimize(f, x, jac=True, method="L-BFGS-B")
        x, nit = res.x, nit + res.nit
    # the Hessian by central differences of JAX's gradient (JAX's own Hessian through the
    # adaptive solver's bounded loop came out non-finite)
    H = np.zeros((len(x), len(x)))
    for k in range(len(x)):
        h = 1e-4 * max(1.0, abs(x[k]))
        up, down = x.copy(), x.copy()
        up[k] += h
        down[k] -= h
        H[:, k] = (np.asarray(vg(jnp.asarray(up), SCALES[-1])[1])
                   - np.asarray(vg(jnp.asarray(down), SCALES[-1])[1])) / (2 * h)
    try:
        cov = np.linalg.inv(0.5 * (H + H.T))
    except np.linalg.LinAlgError as e:
        cov, error = np.full_like(H, np.inf), str(e)
    prob = float(spec.get("prob", 0.95))
    z = 1.959963984540054 if prob == 0.95 else float(spec.get("z"))
    out = {"coefficients": {}, "outputs": {}, "iterations": int(nit), "error": error}
    for k, n in enumerate(names):
        sd = float(np.sqrt(cov[k, k])) if np.isfinite(cov[k, k]) and cov[k, k] > 0 else np.inf
        out["coefficients"][n] = {"mean": float(np.exp(x[k])), "sd_log": sd,
                                  "lower": float(np.exp(x[k] - z * sd)),
                                  "upper": float(np.exp(x[k] + z * sd))}
    sol = solve(jnp.asarray(x), SCALES[-1])
    mean = np.asarray(sol.u.mean[0])[1:]                     # (T, C) at the grid
    std = np.asarray(sol.u.std[0])[1:]
    keep = [times.index(t) if t > t0 else None for t in predict]
    for c, o in enumerate(outputs):
        out["outputs"][o] = {
            "mean": [float(mean[i, c]) if i is not None else float(x[P + c]) for i in keep],
            "var": [float(std[i, c] ** 2) if i is not None else 0.0 for i in keep]}
    out["seconds"] = time.process_time() - began
    import importlib.metadata as md
    out["versions"] = {"probdiffeq": md.version("probdiffeq"), "jax": jax.__version__}
    out["settings"] = {"prior": "integrated Wiener, order 2, blockwise", "constraint": "ts0",
                       "steps": "adaptive, atol 1e-4, rtol 1e-3", "output_scales": SCALES}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
