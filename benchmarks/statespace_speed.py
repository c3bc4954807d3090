"""The time axis in O(N) (issue "Systems in seconds"): the README's spring fitted with
intervals by the state-space solver (``pk.StateSpaceGP``), the dense conditioned GP
(``pk.ConditionedSystemGP``) and the exact-ODE least-squares fit (``pk.infer.fit_exact``, the
textbook method), in one run, one torch thread and one BLAS thread (``threadpoolctl``),
the library's imports done before the clocks start; then one output of a logistic law observed
at 10^3 to 10^5 times, which the dense model cannot hold, fitted by the state-space solver
alone. Prints each fit's CPU seconds, its coefficients and 90% intervals, and the targets.

    python benchmarks/statespace_speed.py --out docs/results/statespace_speed.json
    python benchmarks/statespace_speed.py --sizes 1000,10000 --skip-dense

With ``--probdiffeq PYTHON`` (or ``PIDKL_PEER_PD_PYTHON``), probdiffeq's own Fenrir-style
fit of the same spring data (``benchmarks/peers/probdiffeq_spring.py``: an ODE filter's
marginal likelihood in JAX, L-BFGS, Laplace; and scipy's exact-ODE least squares) runs in
its own environment in the same run, its versions recorded:
``python -m venv ~/peer_pd && ~/peer_pd/bin/pip install "jax[cpu]" probdiffeq==0.9.2 equinox
optax scipy``.
"""

import argparse
import json
import math
import os
import subprocess
import time

import numpy as np
import torch

import pyro_pidkl as pk
from pyro_pidkl.physics import Equation, Parameter


def spring_data():
    t = torch.linspace(0, 6, 40, dtype=torch.float64)
    noise = 0.05 * torch.randn(40, generator=torch.Generator().manual_seed(0), dtype=t.dtype)
    return t, torch.exp(-0.2 * t) * torch.cos(1.99 * t) + noise


def spring_system():
    def spring(f, x, k, c):
        pos, vel = f["x"], f["v"]
        return (pos.d("t") - vel, vel.d("t") + k * pos + c * vel)
    return pk.EquationSystem(spring, outputs=("x", "v"), inputs=("t",), k=1.0, c=1.0)


def _rounded(iv):
    return {n: {k: round(float(v[k]), 5) for k in ("value", "lower", "upper")}
            for n, v in iv.items()}


def fit_spring(method):
    t, x_obs = spring_data()
    system = spring_system()
    began = time.process_time()
    if method == "statespace":
        model = pk.StateSpaceGP(system, {"x": (t, x_obs)}, domain=pk.Box(t=(0.0, 10.0)))
        pk.fit(model, progress=False)
        iv = model.coefficient_intervals(0.9)
        mean, var = model(torch.linspace(0, 10, 101, dtype=t.dtype))
    elif method == "dense":
        model = pk.ConditionedSystemGP(system, {"x": (t, x_obs)}, domain=pk.Box(t=(0.0, 10.0)))
        pk.fit(model, progress=False)
        iv = model.coefficient_intervals(0.9)
        mean, var = model(torch.linspace(0, 10, 101, dtype=t.dtype))
    else:
        ode = pk.physics.explicit_ode(system)
        tr = torch.distributions.transform_to(torch.distributions.constraints.positive)
        found = pk.infer.fit_exact(ode, [(t.numpy(), x_obs.numpy()), (np.zeros(0), np.zeros(0))],
                             [("k", tr, [0.0]), ("c", tr, [0.0])],
                             np.array([[float(x_obs[0]), 0.0]]), 0.0, 6.0,
                             np.array([float(x_obs.std()), 1.0]), design=127,
                             design_half=np.array([math.log(1000.0)] * 2),
                             design_states=np.array([0.0, 3.0]))
        iv = found.intervals(0.9)
        mean = None
    seconds = time.process_time() - began
    out = {"method": method, "cpu_s": seconds, "intervals": _rounded(iv)}
    if mean is not None:
        tt = torch.linspace(0, 10, 101, dtype=torch.float64)
        x = torch.exp(-0.2 * tt) * torch.cos(1.99 * tt)
        v = -0.2 * x - 1.99 * torch.exp(-0.2 * tt) * torch.sin(1.99 * tt)
        err = torch.stack([mean[:, 0] - x, mean[:, 1] - v], 1)
        z = 1.6449 * var.clamp(min=0).sqrt()
        out["rmse_x_v"] = [float(e) for e in err.pow(2).mean(0).sqrt()]
        out["coverage90_x_v"] = [float(c) for c in (err.abs() <= z).double().mean(0)]
    if method == "statespace":
        out["stages"] = model.result.stages
    return out


def probdiffeq_peer(python):
    """The probdiffeq peer on the same spring data (``benchmarks/peers/probdiffeq_spring.py``
    in the interpreter ``python``, its own environment): its JSON lines, or a refusal."""
    import tempfile
    t, x_obs = spring_data()
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump({"t": t.tolist(), "x": x_obs.tolist()}, fh)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers",
                          "probdiffeq_spring.py")
    done = subprocess.run([python, script], capture_output=True, text=True,
                          env=dict(os.environ, SPRING_DATA=fh.name, OMP_NUM_THREADS="1"))
    os.unlink(fh.name)
    if done.returncode:
        tail = done.stderr.strip().splitlines()
        return [{"refused": "peer failed: " + (tail[-1][:200] if tail else "no output")}]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    version = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version("
                              "'probdiffeq'), m.version('jax'))"], capture_output=True,
                             text=True).stdout.split()
    for r in rows:
        r["versions"] = {"probdiffeq": version[0], "jax": version[1]} if len(version) == 2 \
            else None
    return rows


def fit_logistic(n, seed=0):
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 10, n)
    y = 5 / (1 + 49 * np.exp(-1.0 * t)) + 0.05 * rng.standard_normal(n)

    def logistic(f, x, r, K):
        return f.d("t") - r * f * (1 - f / K)
    eq = Equation(logistic, inputs=("t",), r=Parameter(0.5), K=Parameter(3.0))
    began = time.process_time()
    model = pk.StateSpaceGP(eq, (torch.as_tensor(t), torch.as_tensor(y)), nodes=64)
    pk.fit(model, progress=False)
    iv = model.coefficient_intervals(0.9)
    row = {"n": n, "cpu_s": time.process_time() - began, "nodes": len(model.filter.t),
           "intervals": _rounded(iv), "truth": {"r": 1.0, "K": 5.0},
           "stages": model.result.stages}
    # the textbook fit of the same data, beside it
    began = time.process_time()
    tr = torch.distributions.transform_to(torch.distributions.constraints.positive)
    found = pk.infer.fit_exact(model.ode, [(t, y)], [("r", tr, [math.log(0.5)]),
                                               ("K", tr, [math.log(3.0)])],
                         np.array([[y[0]]]), 0.0, 10.0, np.array([float(y.std())]),
                         design=63, design_half=np.array([math.log(1000.0)] * 2))
    row["exact"] = {"cpu_s": time.process_time() - began,
                    "intervals": _rounded(found.intervals(0.9))}
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000,10000,100000")
    p.add_argument("--skip-dense", action="store_true")
    p.add_argument("--out", default=None)
    p.add_argument("--probdiffeq", default=os.environ.get("PIDKL_PEER_PD_PYTHON"),
                   help="an interpreter with probdiffeq and jax: its Fenrir-style fit of the "
                        "spring runs beside ours (benchmarks/peers/probdiffeq_spring.py)")
    a = p.parse_args()
    from threadpoolctl import threadpool_limits
    torch.set_num_threads(1)
    with threadpool_limits(limits=1, user_api="blas"):
        _run(a)


def _warm_imports():
    """The modules a first fit imports (about 0.7 s once per process), imported before any
    clock starts: the fits are timed, not Python's imports."""
    import importlib
    for name in ("pyro_pidkl.infer", "pyro_pidkl.models", "pyro_pidkl.gp.data_fit",
                 "pyro_pidkl.statespace.search", "pyro_pidkl.statespace.adequacy",
                 "pyro_pidkl.diagnostics.adequacy"):
        importlib.import_module(name)


def _run(a):
    _warm_imports()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=os.path.dirname(__file__)).stdout.strip()
    record = {"commit": commit, "threads": 1, "blas_threads": 1, "spring": [],
              "logistic": []}
    methods = ["statespace", "exact"] + ([] if a.skip_dense else ["dense"])
    for method in methods:
        row = fit_spring(method)
        record["spring"].append(row)
        print(f"spring {method}: {row['cpu_s']:.2f} CPU s  "
              + "  ".join(f"{n} {v['value']:.4g} [{v['lower']:.4g}, {v['upper']:.4g}]"
                          for n, v in row["intervals"].items())
              + (f"  RMSE x, v {row['rmse_x_v'][0]:.4f}, {row['rmse_x_v'][1]:.4f}"
                 f"  90% coverage {row['coverage90_x_v'][0]:.2f}, {row['coverage90_x_v'][1]:.2f}"
                 if "rmse_x_v" in row else ""), flush=True)
    if a.probdiffeq:
        record["probdiffeq"] = probdiffeq_peer(a.probdiffeq)
        for row in record["probdiffeq"]:
            if "k" in row:
                print(f"spring peer {row['method']}: {row['cpu_s']:.2f} CPU s  "
                      f"k {row['k']:.4g} (sd {row['k_sd']:.3g})  c {row['c']:.4g} "
                      f"(sd {row['c_sd']:.3g})", flush=True)
            else:
                print(f"spring peer: {row}", flush=True)
    for n in [int(s) for s in a.sizes.split(",") if s]:
        row = fit_logistic(n)
        record["logistic"].append(row)
        print(f"logistic, {n} data ({row['nodes']} nodes): {row['cpu_s']:.1f} CPU s  "
              + "  ".join(f"{k} {v['value']:.4f} [{v['lower']:.4f}, {v['upper']:.4f}]"
                          for k, v in row["intervals"].items())
              + ("" if "exact" not in row else
                 f"  | exact fit {row['exact']['cpu_s']:.1f} CPU s  " + "  ".join(
                     f"{k} {v['value']:.4f} [{v['lower']:.4f}, {v['upper']:.4f}]"
                     for k, v in row["exact"]["intervals"].items())), flush=True)
    ss = next(r for r in record["spring"] if r["method"] == "statespace")
    print("targets:")
    print(f"  the README's spring with intervals <= 1 CPU s: {ss['cpu_s']:.2f} s "
          f"({'met' if ss['cpu_s'] <= 1 else 'MISSED'})")
    big = [r for r in record["logistic"] if r["n"] >= 100000]
    if big:
        print(f"  10^5 time points of one output <= 10 s: {big[0]['cpu_s']:.1f} s "
              f"({'met' if big[0]['cpu_s'] <= 10 else 'MISSED'})")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(record, fh, indent=1, default=float)
        print(f"-> {a.out}")


if __name__ == "__main__":
    main()
