"""DeepXDE's own Lorenz inverse example, fitted by the conditioned system GP and by DeepXDE
(the PINN peer, ``benchmarks/peers/deepxde_lorenz.py``) in one run, on the same data.

The problem, as DeepXDE ships it (``examples/pinn_inverse/Lorenz_inverse.py`` and
``examples/dataset/Lorenz.npz`` of ``lululxvi/deepxde``): the Lorenz system

    x' = C1 (y - x),   y' = x (C2 - z) - y,   z' = x y - C3 z

on t in [0, 3], every component observed at the same 25 times (the first at t = 0, the
initial values -8, 7, 27), C1, C2, C3 unknown and started at 1 (truth 10, 15, 8/3). Each
record: the learned coefficients and their relative errors (ours with 95% Laplace
intervals), the trajectory error (the RMS over 301 times in [0, 3] of the difference from
the true trajectory, relative to each component's spread, averaged over the three), CPU
and wall seconds on one thread, and the peer's versions and settings. A third row, the exact
ODE's least squares on the same data (scipy, from the same start), says what the data pin
when the ODE is taken as exact: DeepXDE's data lie off the true trajectory by about 0.005
(RMS), so its answer is not the truth to the last digit.

    PIDKL_DEEPXDE=<deepxde checkout> PIDKL_PEER_PYTHON=<venv with deepxde>/bin/python \\
        python benchmarks/lorenz.py                 # records in docs/results/lorenz.jsonl
    python benchmarks/lorenz.py --summary

(the peer's environment: ``python -m venv ~/dx && ~/dx/bin/pip install torch==2.13.0
deepxde``; without ``PIDKL_PEER_PYTHON`` only our row runs; without ``PIDKL_DEEPXDE``
nothing runs: the data are DeepXDE's.)
"""

import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402

DEFAULT_OUT = os.path.join(os.path.dirname(__file__), "..", "docs", "results", "lorenz.jsonl")
TRUTH = {"C1": 10.0, "C2": 15.0, "C3": 8.0 / 3.0}
X0 = (-8.0, 7.0, 27.0)
GRID = [3.0 * k / 300 for k in range(301)]


def lorenz(f, x, C1, C2, C3):
    X, Y, Z = f["x"], f["y"], f["z"]
    return (X.d("t") - C1 * (Y - X),
            Y.d("t") - (X * (C2 - Z) - Y),
            Z.d("t") - (X * Y - C3 * Z))


def data_file():
    root = os.environ.get("PIDKL_DEEPXDE")
    if not root:
        return None
    path = os.path.join(root, "examples", "dataset", "Lorenz.npz")
    if not os.path.exists(path):
        raise SystemExit(f"Expected DeepXDE's data at {path} (PIDKL_DEEPXDE is a checkout of "
                         f"lululxvi/deepxde); it is not there")
    return path


def trajectory(coefficients, x0, times):
    """``(len(times), 3)``: the Lorenz system with ``coefficients`` (C1, C2, C3) from ``x0``
    on [0, 3] (scipy's DOP853 at 1e-11)."""
    import numpy as np
    from scipy.integrate import solve_ivp
    c1, c2, c3 = coefficients
    sol = solve_ivp(lambda _, s: [c1 * (s[1] - s[0]), s[0] * (c2 - s[2]) - s[1],
                                  s[0] * s[1] - c3 * s[2]],
                    (0.0, 3.0), x0, t_eval=times, rtol=1e-11, atol=1e-11, method="DOP853")
    return np.asarray(sol.y.T)


def true_trajectory():
    """``(301, 3)``: the Lorenz system at the true coefficients from (-8, 7, 27)."""
    return trajectory([TRUTH["C1"], TRUTH["C2"], TRUTH["C3"]], X0, GRID)


def trajectory_error(pred):
    """The RMS of ``pred - truth`` over the grid, relative to each component's spread,
    averaged over the components."""
    import numpy as np
    truth = true_trajectory()
    pred = np.asarray(pred, dtype=float)
    per = np.sqrt(np.mean((pred - truth) ** 2, 0)) / truth.std(0)
    return float(per.mean()), [float(v) for v in per]


def run_ours(path, seed=0):
    import numpy as np
    import torch
    import pyro_pidkl as pk
    from pyro_pidkl.physics import EquationSystem
    d = np.load(path)
    t = torch.tensor(d["t"], dtype=torch.float64)
    y = torch.tensor(d["y"], dtype=torch.float64)
    system = EquationSystem(lorenz, outputs=("x", "y", "z"), inputs=("t",),
                            C1=1.0, C2=1.0, C3=1.0)
    cpu, began = time.process_time(), time.perf_counter()
    model = pk.ConditionedSystemGP(system, {o: (t, y[:, c]) for c, o in enumerate("xyz")},
                                   domain=pk.Box(t=(0.0, 3.0)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pk.fit(model, progress=False, seed=seed)
        iv = model.coefficient_intervals(0.95)
        mean, _ = model(torch.tensor(GRID, dtype=torch.float64)[:, None])
    out = {"coefficients": {}, "cpu_seconds": time.process_time() - cpu,
           "seconds": time.perf_counter() - began,
           "warnings": sorted({str(w.message).split(":")[0][:80] for w in caught})}
    for k, true in TRUTH.items():
        v = iv[k]
        out["coefficients"][k] = {"value": v["value"], "lower": v["lower"],
                                  "upper": v["upper"], "rel_error": abs(v["value"] - true) / true,
                                  "covered95": bool(v["lower"] <= true <= v["upper"])}
    out["trajectory_error"], out["trajectory_error_by_output"] = trajectory_error(mean.numpy())
    return out


def run_least_squares(path, seed=0):
    """The exact ODE's least squares on the same data (scipy: the coefficients and the
    initial state, trajectories by DOP853 at 1e-11), with Gauss-Newton 95% intervals from
    the residual variance: what the data say when the ODE is taken as exact."""
    import numpy as np
    from scipy.optimize import least_squares
    d = np.load(path)
    t, y = d["t"][:, 0], d["y"]

    def residuals(p):
        return (trajectory(p[:3], p[3:], t) - y).ravel()
    cpu, began = time.process_time(), time.perf_counter()
    fit = least_squares(residuals, [1.0, 1.0, 1.0, *y[0]], x_scale="jac")
    s2 = float(fit.fun @ fit.fun) / (fit.fun.size - fit.x.size)
    sd = np.sqrt(np.diag(np.linalg.pinv(fit.jac.T @ fit.jac) * s2))
    out = {"coefficients": {}, "cpu_seconds": time.process_time() - cpu,
           "seconds": time.perf_counter() - began, "rms_residual": float(np.sqrt(s2))}
    for k, (value, s) in zip(TRUTH, zip(fit.x[:3], sd[:3])):
        lo, hi = value - 1.959964 * s, value + 1.959964 * s
        out["coefficients"][k] = {"value": float(value), "lower": float(lo), "upper": float(hi),
                                  "rel_error": abs(value - TRUTH[k]) / TRUTH[k],
                                  "covered95": bool(lo <= TRUTH[k] <= hi)}
    out["trajectory_error"], out["trajectory_error_by_output"] = trajectory_error(
        trajectory(fit.x[:3], fit.x[3:], GRID))
    return out


def run_peer(path, seed=0):
    python = os.environ.get("PIDKL_PEER_PYTHON")
    peer = records.call_peer(python, {"data": path, "seed": seed, "predict": GRID},
                     peer="deepxde_lorenz.py")
    if "refused" in peer:
        return peer
    out = {"coefficients": {k: {"value": v, "rel_error": abs(v - TRUTH[k]) / TRUTH[k]}
                            for k, v in peer["coefficients"].items()},
           "cpu_seconds": peer["cpu_seconds"], "seconds": peer["seconds"],
           "versions": peer["versions"], "settings": peer["settings"]}
    out["trajectory_error"], out["trajectory_error_by_output"] = trajectory_error(
        peer["predict"])
    return out


def _key(r):
    return (r["method"], r["seed"])


def summary(path):
    recs = records.latest(records.read_records(path), _key)
    lines = ["| method | seed | C1 | C2 | C3 | median relative error | trajectory error | "
             "CPU s | commit |", "|---|---|---|---|---|---|---|---|---|"]
    for (method, seed), r in sorted(recs.items()):
        if "refused" in r:
            lines.append(f"| {method} | {seed} | {r['refused']} | | | | | | |")
            continue
        c = r["coefficients"]

        def cell(k):
            v = c[k]
            if "lower" in v:
                return (f"{v['value']:.6g} [{v['lower']:.6g}, {v['upper']:.6g}]"
                        + ("" if v["covered95"] else " (misses)"))
            return f"{v['value']:.6g}"
        errors = sorted(v["rel_error"] for v in c.values())
        who = method + (f" ({r['versions']['deepxde']}, {r['versions']['backend']})"
                        if "versions" in r else "")
        lines.append(f"| {who} | {seed} | {cell('C1')} | {cell('C2')} | {cell('C3')} | "
                     f"{100 * errors[1]:.2f}% | {r['trajectory_error']:.4f} | "
                     f"{r['cpu_seconds']:.0f} | {r.get('commit')} |")
    lines.append("| truth | | 10 | 15 | 2.667 | | | | |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--seeds", default="0")
    p.add_argument("--summary", action="store_true")
    args = p.parse_args(argv)
    if not args.summary:
        path = data_file()
        if path is None:
            raise SystemExit("Set PIDKL_DEEPXDE to a checkout of lululxvi/deepxde (its "
                             "examples/dataset/Lorenz.npz is the data)")
        seeds = records.seeds(args.seeds)
        jobs = [({"method": "system", "seed": s}, lambda s=s: run_ours(path, s))
                for s in seeds]
        jobs.append(({"method": "ode least squares", "seed": 0},
                     lambda: run_least_squares(path)))
        if os.environ.get("PIDKL_PEER_PYTHON"):
            jobs += [({"method": "deepxde", "seed": s}, lambda s=s: run_peer(path, s))
                     for s in seeds]
        else:
            print("deepxde left out: set PIDKL_PEER_PYTHON to an interpreter with deepxde")
        records.run_jobs(args.out, jobs, _key)
    print(summary(args.out))


if __name__ == "__main__":
    main()
