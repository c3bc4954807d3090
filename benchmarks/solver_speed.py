"""How fast the physics-conditioned GP solves a PDE and fits data, beside the best GP PDE
solver on the same problem.

Cases (each a JSON line in ``--out``, default ``docs/results/solver_speed.jsonl``, with the
thread count and commit):

* ``elliptic``: -lap(u) + u^3 = f on [0, 1]^2 from boundary values, u the 600-term sine
  series of the sparse-Cholesky GP solver's example (Chen, Owhadi & Schaefer, Math. Comp.
  2025; ``yifanc96/GP-PDEs-SparseCholesky``, ``examples/nonlin_elliptic_2d.py``), on its grid
  (h = 0.05, 0.02, 0.01: 441, 2,601, 10,201 points). Time: build, fit (hyperparameters on
  a 600-point subset of the collocation points, then Gauss-Newton on all), and the
  posterior mean at the interior points; error: the root-mean-square error there (the
  peer's "L2") and the relative L2 error. With ``PIDKL_PEER_SPARSE_CHOLESKY`` set to a
  checkout of the peer (and ``PIDKL_PEER_PYTHON`` to an interpreter that has its
  dependencies, numpy, scipy and jax; default this one), its script runs on the same
  points in the same run, ``--backend cpu``, with the same number of threads, and its
  own timing of the solve is recorded beside ours.
* ``chen2021``: Chen, Hosseini, Owhadi & Stuart 2021's problem, u = sin(pi x) sin(pi y) +
  2 sin(4 pi x) sin(4 pi y), 900 interior + 124 boundary points (their Table: L2 1.65e-4 at
  a hand-picked lengthscale and nugget).
* ``burgers``: u_t + u u_x = 0.02 u_xx on [-1, 1] x [0, 1], u(x, 0) = -sin(pi x), u = 0 at
  x = +-1 (Chen et al. 2021's set-up: 1,000 interior and 200 boundary points, uniform at
  random); truth from the Cole-Hopf integral by Gauss-Hermite quadrature.
* ``cube``: three inputs, -lap(u) + exp(u) = f on [0, 1]^3 from boundary values on the
  11^3 = 1,331-point grid, u = sin(pi x) sin(pi y) sin(pi z) + x y z; error at 2,000 random
  points (the sparse solver's factor time recorded: the target is 10 s).
* ``data``: a data-driven fit, the equation benchmark's heat problem (``f_t = alpha f_xx``
  on [0, 1]^2, alpha learned from half the truth) with N noisy data on t <= 0.4 and 200
  collocation points: build, fit and predict beyond the data, against N (``--seeds``), at
  the model's defaults (the dense joint up to 2,000 data, Titsias's bound above) and with
  the dense joint at ``--dense-N`` (the reference of the N = 10^4 target).

    python benchmarks/solver_speed.py                          # every case, 2 threads
    PIDKL_PEER_SPARSE_CHOLESKY=~/GP-PDEs-SparseCholesky PIDKL_PEER_PYTHON=~/peer/bin/python \\
        python benchmarks/solver_speed.py --cases elliptic --h 0.05,0.02
    python benchmarks/solver_speed.py --summary
"""

import argparse
import math
import os
import re
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402

DEFAULT_OUT = os.path.join(os.path.dirname(__file__), "..", "docs", "results",
                           "solver_speed.jsonl")


# -- problems ------------------------------------------------------------------------------

def peer_grid(h):
    """The peer's points (``kolesky.pde.sample_points_grid_2d``): the interior grid of
    spacing ``h`` and the boundary walked edge by edge."""
    xs = np.arange(h, 1 - h + 1e-12, h)
    XX, YY = np.meshgrid(xs, xs, indexing="ij")
    interior = np.stack([XX.ravel(), YY.ravel()], 1)
    t = np.arange(0, 1 - h + 1e-12, h)
    zero, one = np.zeros_like(t), np.ones_like(t)
    boundary = np.concatenate([np.stack([t, zero], 1), np.stack([one, t], 1),
                               np.stack([1 - t, one], 1), np.stack([zero, 1 - t], 1)])
    return interior, boundary


def _series(X, power):
    import torch
    k = torch.arange(1, 601, dtype=X.dtype)
    return (torch.sin(math.pi * X[:, :1] * k) * torch.sin(math.pi * X[:, 1:] * k) * k ** power
            ).sum(1)


def elliptic_problem():
    """``(u, source, equation)`` of the peer's example: -lap u + u^3 = f."""
    import torch
    from pyro_pidkl.physics import Equation

    def u(X):
        return _series(X, -6.0)

    def source(x):
        X = torch.stack([x["x"], x["y"]], 1)
        return 2 * math.pi ** 2 * _series(X, -4.0) + u(X) ** 3
    eq = Equation(lambda f, x: -f.laplacian("x", "y") + f ** 3, inputs=("x", "y"))
    return u, source, eq


def chen_problem():
    import torch
    from pyro_pidkl.physics import Equation
    pi = math.pi

    def u(X):
        x, y = X[:, 0], X[:, 1]
        return torch.sin(pi * x) * torch.sin(pi * y) + 2 * torch.sin(4 * pi * x) * torch.sin(4 * pi * y)

    def source(x):
        a, b = x["x"], x["y"]
        X = torch.stack([a, b], 1)
        lap = (-2 * pi ** 2 * torch.sin(pi * a) * torch.sin(pi * b)
               - 64 * pi ** 2 * torch.sin(4 * pi * a) * torch.sin(4 * pi * b))
        return -lap + u(X) ** 3
    eq = Equation(lambda f, x: -f.laplacian("x", "y") + f ** 3, inputs=("x", "y"))
    return u, source, eq


def burgers_truth(x, t, nu=0.02, nodes=150):
    r"""Cole-Hopf: :math:`u = -\int \sin\pi(x - \eta) F(x - \eta) e^{-\eta^2/4\nu t} d\eta /
    \int F(x - \eta) e^{-\eta^2/4\nu t} d\eta`, :math:`F(y) = e^{-\cos(\pi y)/(2\pi\nu)}`, by
    Gauss-Hermite quadrature (``t > 0``; the initial condition at ``t = 0``)."""
    z, w = np.polynomial.hermite.hermgauss(nodes)
    x, t = np.asarray(x, dtype=np.float64), np.asarray(t, dtype=np.float64)
    out = -np.sin(np.pi * x)
    pos = t > 0
    eta = np.sqrt(4 * nu * t[pos])[:, None] * z[None, :]
    y = x[pos][:, None] - eta
    # the common factor exp(1/(2 pi nu)) cancels: exponent -(cos(pi y) - 1)/(2 pi nu) - ...
    expo = -(np.cos(np.pi * y) + 1) / (2 * np.pi * nu)
    expo = expo - expo.max(1, keepdims=True)
    F = np.exp(expo) * w[None, :]
    out[pos] = -(np.sin(np.pi * y) * F).sum(1) / F.sum(1)
    return out


# -- runs ----------------------------------------------------------------------------------

SOLVER = "dense"


def run_ours(X_boundary, y_boundary, Z, source, eq, names, X_eval, truth, **options):
    """Build, fit and take the posterior mean at ``X_eval``: ``(seconds, rms, rel_l2,
    extra)``; with ``SOLVER = "sparse"`` by :class:`pyro_pidkl.SparseCholeskySolver`."""
    import torch
    import pyro_pidkl as pk
    if SOLVER == "sparse":
        return run_sparse(X_boundary, y_boundary, Z, source, eq, names, X_eval, truth)
    t0 = time.perf_counter()
    model = pk.PhysicsConditionedGP(torch.as_tensor(X_boundary), torch.as_tensor(y_boundary),
                                    eq, input_names=names, collocation=torch.as_tensor(Z),
                                    source="zero" if source is None else source, **options)
    fit = pk.fit(model, progress=False)
    mean = model.posterior_mean(torch.as_tensor(X_eval))
    seconds = time.perf_counter() - t0
    err = mean - torch.as_tensor(truth)
    gn = model.solve()[2]
    return seconds, {"rms": float(err.pow(2).mean().sqrt()),
                     "rel_l2": float(err.norm() / torch.as_tensor(truth).norm()),
                     "evaluations": fit.num_steps, "fit_s": round(fit.seconds, 3),
                     "gn_iterations": gn.iterations, "gn_converged": gn.converged,
                     "lengthscale": (model.kernel.lengthscale.detach()
                                     * model.standardizer.x_scale).tolist()}


def run_sparse(X_boundary, y_boundary, Z, source, eq, names, X_eval, truth):
    """The sparse-Cholesky solver at its defaults (lengthscale learned): solve and take the
    solution at ``X_eval``."""
    import resource

    import torch
    import pyro_pidkl as pk
    t0 = time.perf_counter()
    solver = pk.SparseCholeskySolver(torch.as_tensor(X_boundary), torch.as_tensor(y_boundary),
                                     eq, torch.as_tensor(Z), source=source, input_names=names)
    try:
        res = solver.solve()
    except pk.SolverRefusedError as e:          # refused with its reason: recorded as such
        res = e.result
        return time.perf_counter() - t0, {
            "solver": "sparse", "refused": str(e), "rms": float("nan"),
            "rel_l2": float("nan"), "gn_iterations": res.iterations,
            "cg_iterations": res.cg_iterations, "lengthscale": solver.ell.tolist(),
            "nu": solver.nu}
    mean = solver.posterior_mean(torch.as_tensor(X_eval))
    seconds = time.perf_counter() - t0
    err = mean - torch.as_tensor(truth)
    return seconds, {"solver": "sparse", "rms": float(err.pow(2).mean().sqrt()),
                     "rel_l2": float(err.norm() / torch.as_tensor(truth).norm()),
                     "gn_iterations": res.iterations, "gn_converged": res.converged,
                     "cg_iterations": res.cg_iterations, "solve_s": round(res.seconds, 3),
                     "factor_s": round(res.factor_seconds, 3),
                     "lengthscale": solver.ell.tolist(), "nu": solver.nu,
                     "solver_threads": solver.threads,
                     "supernodes": solver.supernodes,
                     # the process's peak so far (cases run smallest first)
                     "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def run_peer(h, threads):
    """The peer's example at spacing ``h`` (``--backend cpu``): ``{peer_s, peer_rms}``, or
    ``None`` without a checkout."""
    root = os.environ.get("PIDKL_PEER_SPARSE_CHOLESKY")
    if not root:
        return None
    python = os.environ.get("PIDKL_PEER_PYTHON", sys.executable)
    env = dict(os.environ, PYTHONPATH=root, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads), JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count=1 "
                         f"--xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'}")
    out = subprocess.run([python, "examples/nonlin_elliptic_2d.py", "--backend", "cpu",
                          "--h", str(h)], cwd=root, env=env, capture_output=True, text=True,
                         timeout=3600)
    text = out.stdout + out.stderr
    wall = re.search(r"\[fast solve\] wall time: ([0-9.eE+-]+) s", text)
    acc = re.search(r"\[accuracy\] L2 = ([0-9.eE+-]+)", text)
    if not (wall and acc):
        return {"peer_error": text.strip().splitlines()[-1][:200] if text.strip() else
                f"exit {out.returncode}"}
    versions = subprocess.run([python, "-c", "import jax, numpy, scipy; print(jax.__version__, "
                               "numpy.__version__, scipy.__version__)"], env=env,
                              capture_output=True, text=True).stdout.split()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                          text=True).stdout.strip()
    return {"peer_s": float(wall.group(1)), "peer_rms": float(acc.group(1)),
            "peer_environment": dict(zip(("jax", "numpy", "scipy"), versions), commit=head)}


def case_elliptic(h, threads):
    import torch
    u, source, eq = elliptic_problem()
    interior, boundary = peer_grid(h)
    Xb = torch.as_tensor(boundary)
    with torch.no_grad():
        yb, truth = u(Xb), u(torch.as_tensor(interior))
    seconds, rec = run_ours(boundary, yb, interior, source, eq, ("x", "y"), interior, truth)
    rec.update(case="elliptic", h=h, points=len(interior) + len(boundary), seconds=seconds,
               load_1min=round(os.getloadavg()[0], 2))
    peer = run_peer(h, threads)
    if peer:
        rec.update(peer)
        if "peer_s" in peer:
            rec["time_ratio"] = seconds / peer["peer_s"]
    return rec


def case_chen(threads):
    import torch
    u, source, eq = chen_problem()
    axis = np.linspace(0, 1, 32)
    grid = np.stack(np.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)
    edge = (grid == 0).any(1) | (grid == 1).any(1)
    X_eval = np.random.default_rng(0).uniform(0, 1, (2000, 2))
    with torch.no_grad():
        yb, truth = u(torch.as_tensor(grid[edge])), u(torch.as_tensor(X_eval))
    seconds, rec = run_ours(grid[edge], yb, grid[~edge], source, eq, ("x", "y"), X_eval, truth)
    rec.update(case="chen2021", points=len(grid), seconds=seconds)
    return rec


def case_burgers(threads, seed=0):
    from pyro_pidkl.physics import Equation
    rng = np.random.default_rng(seed)
    interior = np.stack([rng.uniform(-1, 1, 1000), rng.uniform(0, 1, 1000)], 1)
    n = 200
    xb = rng.uniform(-1, 1, n // 2)
    tb = rng.uniform(0, 1, n // 2)
    side = np.where(rng.uniform(size=n // 2) < 0.5, -1.0, 1.0)
    boundary = np.concatenate([np.stack([xb, np.zeros_like(xb)], 1),
                               np.stack([side, tb], 1)])
    yb = burgers_truth(boundary[:, 0], boundary[:, 1])
    yb[boundary[:, 1] > 0] = 0.0                         # u = 0 at x = +-1
    axis_x, axis_t = np.linspace(-1, 1, 101), np.linspace(0, 1, 51)
    grid = np.stack(np.meshgrid(axis_x, axis_t, indexing="ij"), -1).reshape(-1, 2)
    truth = burgers_truth(grid[:, 0], grid[:, 1])
    eq = Equation(lambda f, x: f.d("t") + f * f.d("x") - 0.02 * f.d("x", "x"),
                  inputs=("x", "t"))
    seconds, rec = run_ours(boundary, yb, interior, None, eq, ("x", "t"), grid, truth)
    rec.update(case="burgers", points=len(interior) + len(boundary), seconds=seconds)
    return rec


def case_cube(threads, n=11):
    """Three inputs: ``-lap u + exp(u) = f`` on the unit cube from boundary values, the
    ``n^3``-point grid (``u = sin(pi x) sin(pi y) sin(pi z) + x y z``, the source exact)."""
    import torch
    from pyro_pidkl.physics import Equation
    pi = math.pi

    def u(X):
        return torch.sin(pi * X[:, 0]) * torch.sin(pi * X[:, 1]) * torch.sin(pi * X[:, 2]) \
            + X[:, 0] * X[:, 1] * X[:, 2]

    def source(x):
        X = torch.stack([x["x"], x["y"], x["z"]], 1)
        lap = -3 * pi ** 2 * torch.sin(pi * X[:, 0]) * torch.sin(pi * X[:, 1]) \
            * torch.sin(pi * X[:, 2])
        return -lap + torch.exp(u(X))
    axis = np.linspace(0, 1, n)
    grid = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), -1).reshape(-1, 3)
    edge = (grid == 0).any(1) | (grid == 1).any(1)
    eq = Equation(lambda f, x: -f.laplacian("x", "y", "z") + torch.exp(f), inputs=("x", "y", "z"))
    X_eval = np.random.default_rng(0).uniform(0, 1, (2000, 3))
    with torch.no_grad():
        yb, truth = u(torch.as_tensor(grid[edge])), u(torch.as_tensor(X_eval))
    seconds, rec = run_ours(grid[edge], yb, grid[~edge], source, eq, ("x", "y", "z"), X_eval,
                            truth)
    rec.update(case="cube", points=len(grid), seconds=seconds)
    return rec


def case_data(N, threads, M=200, seed=0, likelihood="auto"):
    """The equation benchmark's heat problem (``f_t = alpha f_xx``, alpha learned from half
    the truth) with ``N`` noisy data on the first 40% of the time range and ``M``
    collocation points: build, fit and predict (mean and variance, with the coefficients'
    uncertainty) beyond the data. ``likelihood``: the model's ``data_likelihood``."""
    import dataclasses

    import torch
    import pyro_pidkl as pk
    problem = dataclasses.replace(pk.datasets.problem("heat"), n_train=N)
    data = problem.sample("extrapolation", seed=seed)
    t0 = time.perf_counter()
    model = pk.PhysicsConditionedGP(data.X_train, data.y_train, problem.equation(),
                                    problem.input_names, collocation=M,
                                    domain=pk.Box(**problem.domain), data_likelihood=likelihood)
    fit = pk.fit(model, progress=False)
    t1 = time.perf_counter()
    mean, var = model(torch.as_tensor(data.X_test))
    seconds = time.perf_counter() - t0
    f = torch.as_tensor(data.f_test)
    inside = ((mean - f).abs() <= 1.96 * var.sqrt()).double().mean()
    alpha = model.equation_parameters()["alpha"]
    with torch.no_grad():
        joint = model.solve()[0]
    bound = hasattr(joint, "gap")
    return {"case": "data", "N": N, "collocation": M, "seed": seed, "seconds": seconds,
            "fit_s": t1 - t0, "predict_s": seconds - (t1 - t0),
            "evaluations": fit.num_steps, "rmse": pk.diagnostics.rmse(mean, f),
            "coverage95": float(inside), "alpha": alpha,
            "alpha_rel_error": abs(alpha - 0.05) / 0.05,
            "data_likelihood": "inducing" if bound else "exact",
            "inducing": int(model.inducing_count) if bound else None,
            "bound_gap_nats": float(joint.gap) if bound else None}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default="elliptic,chen2021,cube,burgers,data")
    p.add_argument("--h", default="0.05,0.02,0.01", help="elliptic grid spacings")
    p.add_argument("--N", default="100,300,1000,3000,10000", help="data sizes of the data case")
    p.add_argument("--seeds", default="0", help="data seeds of the data case")
    p.add_argument("--dense-N", default="3000",
                   help="data sizes of the data case also run with the dense joint "
                        "(data_likelihood='exact'; the reference of the N = 10^4 target)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--solver", default="dense", choices=("dense", "sparse"),
                   help="PhysicsConditionedGP (dense) or SparseCholeskySolver (sparse)")
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--busy", action="store_true",
                   help="run beside a process that keeps one core spinning (recorded)")
    p.add_argument("--summary", action="store_true")
    args = p.parse_args(argv)
    global SOLVER
    SOLVER = args.solver
    if not args.summary:
        records.set_threads(args.threads)
        commit, cases = records.commit(), args.cases.split(",")
        jobs = []
        if "elliptic" in cases:
            jobs += [lambda h=float(h): case_elliptic(h, args.threads) for h in args.h.split(",")]
        if "chen2021" in cases:
            jobs.append(lambda: case_chen(args.threads))
        if "cube" in cases:
            jobs.append(lambda: case_cube(args.threads))
        if "burgers" in cases:
            jobs.append(lambda: case_burgers(args.threads))
        if "data" in cases:
            seeds = [int(x) for x in args.seeds.split(",")]
            jobs += [lambda n=int(n), s=s: case_data(n, args.threads, seed=s)
                     for n in args.N.split(",") for s in seeds]
            jobs += [lambda n=int(n), s=s: case_data(n, args.threads, seed=s, likelihood="exact")
                     for n in filter(None, args.dense_N.split(",")) for s in seeds]
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        # the spinner stops when this process is gone, however it ends
        hog = (subprocess.Popen([sys.executable, "-c", "import os\nparent = os.getppid()\n"
                                 "while os.getppid() == parent: pass"]) if args.busy else None)
        try:
            with open(args.out, "a") as fh:
                for job in jobs:
                    rec = job()
                    rec.update(threads=args.threads, commit=commit, busy=args.busy)
                    records.append(fh, rec)
                    print(_line(rec), flush=True)
        finally:
            if hog is not None:
                hog.kill()
    print(summary(args.out))
    print(targets(args.out))


def _line(r):
    if r["case"] == "data":
        how = (f"inducing {r['inducing']}, gap {r['bound_gap_nats']:.2g} nats"
               if r.get("data_likelihood") == "inducing" else "dense")
        return (f"data N={r['N']} seed {r.get('seed', 0)} ({how}): {r['seconds']:.2f} s "
                f"({r['evaluations']} evaluations), RMSE {r['rmse']:.3g}, 95% coverage "
                f"{r.get('coverage95', float('nan')):.2f}, alpha {r['alpha']:.5g} (truth 0.05)")
    peer = (f"; peer {r['peer_s']:.2f} s, RMS {r['peer_rms']:.2e}, ratio {r['time_ratio']:.2f}"
            if "peer_s" in r else "")
    where = (f" h={r['h']}" if "h" in r else "") + (" sparse" if r.get("solver") == "sparse"
                                                    else "")
    if "refused" in r:
        return f"{r['case']}{where} ({r['points']} points): refused after {r['seconds']:.2f} s: " \
               f"{r['refused']}"
    return (f"{r['case']}{where} ({r['points']} points): {r['seconds']:.2f} s, RMS "
            f"{r['rms']:.2e}, rel. L2 {r['rel_l2']:.2e}{peer}")


def targets(path):
    """The sparse solver against the peer at 10^4 points and more, each machine state's
    latest run: no slower and no less accurate (RMS) in the same run; the data fit at
    N = 10^4 within 60 s, its coefficient as accurate as the dense fit's at N = 3000 (the
    latest commit's runs, medians over the seeds)."""
    latest, data = {}, {}
    for r in records.read_records(path):
        if r.get("solver") == "sparse" and r["case"] == "elliptic" and "peer_s" in r \
                and r["points"] >= 10_000:
            latest[r["points"], bool(r.get("busy"))] = r
        if r["case"] == "data" and "data_likelihood" in r:
            data.setdefault(r.get("commit"), []).append(r)
    lines = ["Targets (sparse solver against the peer in the same run, >= 10^4 points):"]
    for (points, busy), r in sorted(latest.items()):
        met = r["seconds"] <= r["peer_s"] and r["rms"] <= r["peer_rms"]
        lines.append(f"- {points} points, {'other core busy' if busy else 'quiet'}: "
                     f"{r['seconds']:.1f} s against {r['peer_s']:.1f} s (ratio "
                     f"{r['time_ratio']:.2f}), RMS {r['rms']:.2e} against {r['peer_rms']:.2e}: "
                     f"{'met' if met else 'missed'} (commit {r.get('commit')})")
    if data:
        commit, runs = list(data.items())[-1]
        big = [r for r in runs if r["N"] == 10_000]
        dense = [r for r in runs if r["N"] == 3000 and r["data_likelihood"] == "exact"]
        lines.append(f"Targets (data fit, commit {commit}, medians over seeds):")
        if big:
            t = float(np.median([r["seconds"] for r in big]))
            e = float(np.median([r["alpha_rel_error"] for r in big]))
            lines.append(f"- N = 10^4 build, fit and prediction <= 60 s: {t:.1f} s "
                         f"(range {min(r['seconds'] for r in big):.1f}-"
                         f"{max(r['seconds'] for r in big):.1f}, {len(big)} seeds, "
                         f"{big[0]['threads']} threads): {'met' if t <= 60 else 'missed'}")
            if dense:
                d = float(np.median([r["alpha_rel_error"] for r in dense]))
                lines.append(f"- alpha's relative error at N = 10^4 no larger than the dense "
                             f"fit's at N = 3000: {e:.2%} against {d:.2%}: "
                             f"{'met' if e <= d else 'missed'}")
    return "\n".join(lines)


def summary(path):
    lines = ["| case | points | this library: s | RMS | rel. L2 | peer: s | peer RMS | ratio |",
             "|---|---|---|---|---|---|---|---|"]
    data = []
    for r in records.read_records(path):
        if r["case"] == "data":
            data.append(r)
            continue
        case = (r["case"] + (f" h={r['h']}" if "h" in r else "")
                + (" (sparse)" if r.get("solver") == "sparse" else ""))
        lines.append(f"| {case} | {r['points']} | {r['seconds']:.2f} | {r['rms']:.2e} | "
                     f"{r['rel_l2']:.2e} | {r.get('peer_s', float('nan')):.2f} | "
                     f"{r.get('peer_rms', float('nan')):.2e} | "
                     f"{r.get('time_ratio', float('nan')):.2f} |")
    if data:
        lines += ["", "| N (data) | likelihood | seed | threads | seconds | evaluations | RMSE "
                  "beyond the data | 95% coverage | alpha (truth 0.05) | commit |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['N']} | "
                  + (f"{r['inducing']} inducing" if r.get("data_likelihood") == "inducing"
                     else "dense")
                  + f" | {r.get('seed', 0)} | {r.get('threads', '')} | {r['seconds']:.2f} | "
                  f"{r['evaluations']} | {r['rmse']:.3g} | "
                  f"{r.get('coverage95', float('nan')):.2f} | {r['alpha']:.5g} | "
                  f"{r.get('commit', '')} |" for r in data]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
