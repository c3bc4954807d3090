"""Boundary and initial conditions, domains that are not boxes, derivatives to order four:
the physics-conditioned GP at its defaults, truth in closed form.

Solver cases (boundary and initial values as data, the known source, M collocation
points; relative L2 error on 2000 points inside, which must fall as M grows):

* ``poisson_L``, ``poisson_disk``: -lap(u) = s on the L-shape [-1, 1]^2 minus (0, 1] x
  [-1, 0) and on the unit disk, u = sin(2x) e^y + x y^2;
* ``elliptic_hole``: -lap(u) + u^3 = s on the unit square minus a disk of radius 0.2 at
  its centre (nonlinear, by Gauss-Newton), u = sin(pi x) sin(pi y) + x;
* ``beam``: a cantilever u'''' = e^x on [0, 1], u(0) = 0 as data, u'(0) = 0, u''(1) = 0,
  u'''(1) = 0 as conditions; u = e^x - 1 - x - (e/6) x^3;
* ``heat_neumann``: f_t = 0.1 f_xx on [0, 1] x [0, 2] from its initial values, with and
  without the no-flux conditions at both ends; f = cos(pi x) exp(-0.1 pi^2 t) + 1/2;
* ``advection_periodic``: u_t + 0.5 u_x = 0 on [0, 1] x [0, 2], periodic in x, from one
  period of initial values u = sin(2 pi x), with and without the periodic condition;
* ``lshape_peer``: the sparse-Cholesky GP solver's L-shape example
  (``examples/lshape_nonlin_elliptic.py`` of ``yifanc96/GP-PDEs-SparseCholesky``):
  -lap(u) + u^3 = f on [0, 1]^2 minus (0.5, 1]^2, u = sin(pi x) sin(pi y), 3000 interior
  and 320 boundary points; RMS error at the interior points and seconds for build, fit and
  solve. With ``PIDKL_PEER_SPARSE_CHOLESKY`` set to a checkout of the peer (and
  ``PIDKL_PEER_PYTHON`` to an interpreter with its dependencies) its script runs in the
  same run at its defaults (its own random points, Matern 7/2, ``--backend cpu``), one
  thread each;
* ``kdv``: the KdV soliton u = (c/2) sech^2(sqrt(c)/2 (x - c t)), c = 1, of
  u_t + 6 u u_x + u_xxx = 0 on [-8, 8] x [0, 2] (third order, nonlinear) from its initial
  and boundary values.

Data cases (noisy values, 5% of the solution's spread; seeds 0-2; against SKL and DKL;
RMSE beyond the data and 95% coverage of the truth there):

* ``poisson_L_data``: the L-shape, 60 noisy interior values with x < -0.2, boundary values
  there too; predicted on x >= -0.2;
* ``poisson_disk_data``: the same on the unit disk;
* ``heat_neumann_data``: 60 noisy values at t <= 0.8 and the no-flux conditions on [0, 2];
  predicted for t > 0.8; PI-DKL (gamma 1, m 20, the conditions in its term, 1000 Adam
  steps) beside the conditioned GP.

    python benchmarks/boundaries.py                 # records in docs/results/boundaries.jsonl
    python benchmarks/boundaries.py --summary
"""

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402

DEFAULT_OUT = os.path.join(os.path.dirname(__file__), "..", "docs", "results",
                           "boundaries.jsonl")
COLLOCATION = (100, 400, 1600)


def _torch():
    import torch
    return torch


def _rel(mean, truth):
    return float((mean - truth).norm() / truth.norm())


def _poisson_problem():
    torch = _torch()
    from pyro_pidkl.physics import Equation
    u = lambda X: torch.sin(2 * X[:, 0]) * torch.exp(X[:, 1]) + X[:, 0] * X[:, 1] ** 2
    s = lambda x: 3 * torch.sin(2 * x["x"]) * torch.exp(x["y"]) - 2 * x["x"]
    eq = Equation(lambda f, x: -f.laplacian("x", "y"), inputs=("x", "y"), name="poisson")
    return u, s, eq


def _shape(name):
    from pyro_pidkl.physics import Difference, Disk, Polygon, Rectangle
    return {"L": Polygon([(0, 0), (1, 0), (1, 1), (-1, 1), (-1, -1), (0, -1)]),
            "disk": Disk((0.0, 0.0), 1.0),
            "hole": Difference(Rectangle(x=(0, 1), y=(0, 1)), Disk((0.5, 0.5), 0.2))}[name]


def solve_on_shape(case, M):
    torch = _torch()
    import pyro_pidkl as pk
    from pyro_pidkl.physics import Equation
    if case == "elliptic_hole":
        pi = math.pi
        u = lambda X: torch.sin(pi * X[:, 0]) * torch.sin(pi * X[:, 1]) + X[:, 0]
        s = lambda x: (2 * pi ** 2 * torch.sin(pi * x["x"]) * torch.sin(pi * x["y"])
                       + (torch.sin(pi * x["x"]) * torch.sin(pi * x["y"]) + x["x"]) ** 3)
        eq = Equation(lambda f, x: -f.laplacian("x", "y") + f ** 3, inputs=("x", "y"),
                      name="nonlinear elliptic")
        shape = _shape("hole")
    else:
        u, s, eq = _poisson_problem()
        shape = _shape("L" if case == "poisson_L" else "disk")
    B = shape.boundary(max(40, int(4 * M ** 0.5)), seed=1)
    test = shape.interior(2000, seed=7)
    t0 = time.perf_counter()
    model = pk.PhysicsConditionedGP(B, u(B), eq, input_names=("x", "y"), domain=shape,
                                    source=s, collocation=M)
    pk.fit(model, progress=False)
    mean, var = model(test)
    return {"rel_l2": _rel(mean, u(test)),
            "coverage95": pk.diagnostics.coverage(mean, var, u(test)),
            "boundary_points": B.shape[0], "seconds": time.perf_counter() - t0}


def beam(M, with_conditions=True):
    torch = _torch()
    import pyro_pidkl as pk
    from pyro_pidkl.physics import Condition, Equation
    D = torch.float64
    conditions = [Condition([[0.0]], lambda f, x: f.d("x"), name="clamped"),
                  Condition([[1.0]], lambda f, x: f.d("x", "x"), name="no moment"),
                  Condition([[1.0]], lambda f, x: f.d("x", "x", "x"), name="no shear")]
    eq = Equation(lambda f, x: f.d("x", "x", "x", "x"), inputs=("x",), name="beam")
    t0 = time.perf_counter()
    model = pk.PhysicsConditionedGP(torch.zeros(1, 1, dtype=D), torch.zeros(1, dtype=D), eq,
                                    input_names=("x",), source=lambda x: torch.exp(x["x"]),
                                    collocation=torch.linspace(0, 1, M, dtype=D)[:, None],
                                    domain=pk.Box(x=(0.0, 1.0)),
                                    conditions=conditions if with_conditions else ())
    pk.fit(model, progress=False)
    x = torch.linspace(0, 1, 201, dtype=D)
    u = torch.exp(x) - 1 - x - math.e / 6 * x ** 3
    mean, var = model(x[:, None])
    return {"rel_l2": _rel(mean, u), "coverage95": pk.diagnostics.coverage(mean, var, u),
            "seconds": time.perf_counter() - t0}


def _heat():
    torch = _torch()
    from pyro_pidkl.physics import Condition, Equation, Parameter
    u = lambda x, t: torch.cos(math.pi * x) * torch.exp(-0.1 * math.pi ** 2 * t) + 0.5
    eq = Equation(lambda f, x, alpha: f.d("t") - alpha * f.d("x", "x"), inputs=("x", "t"),
                  alpha=Parameter(0.1, fixed=True), name="heat")
    t = torch.linspace(0, 2, 21, dtype=torch.float64)
    no_flux = [Condition(torch.stack([torch.full_like(t, end), t], 1), lambda f, x: f.d("x"),
                         name=f"no flux at x = {end}") for end in (0.0, 1.0)]
    return u, eq, no_flux


def heat_neumann(M, with_conditions=True):
    torch = _torch()
    import pyro_pidkl as pk
    u, eq, no_flux = _heat()
    x = torch.linspace(0, 1, 21, dtype=torch.float64)
    X0 = torch.stack([x, torch.zeros_like(x)], 1)
    G = torch.cartesian_prod(torch.linspace(0, 1, 41, dtype=torch.float64),
                             torch.linspace(0, 2, 41, dtype=torch.float64))
    t0 = time.perf_counter()
    model = pk.PhysicsConditionedGP(X0, u(x, 0 * x), eq, input_names=("x", "t"),
                                    domain=pk.Box(x=(0.0, 1.0), t=(0.0, 2.0)), collocation=M,
                                    conditions=no_flux if with_conditions else ())
    pk.fit(model, progress=False)
    truth = u(G[:, 0], G[:, 1])
    mean, var = model(G)
    return {"rel_l2": _rel(mean, truth),
            "coverage95": pk.diagnostics.coverage(mean, var, truth),
            "seconds": time.perf_counter() - t0}


def advection_periodic(M, with_conditions=True):
    torch = _torch()
    import pyro_pidkl as pk
    from pyro_pidkl.physics import Condition, Equation, Parameter
    D = torch.float64
    u = lambda x, t: torch.sin(2 * math.pi * (x - 0.5 * t))
    eq = Equation(lambda f, x, v: f.d("t") + v * f.d("x"), inputs=("x", "t"),
                  v=Parameter(0.5, fixed=True), name="advection")
    x = torch.linspace(0, 1, 21, dtype=D)[:-1]
    X0 = torch.stack([x, torch.zeros_like(x)], 1)
    t = torch.linspace(0, 2, 31, dtype=D)
    ends = Condition.periodic(torch.stack([torch.zeros_like(t), t], 1),
                              torch.stack([torch.ones_like(t), t], 1), name="x periodic")
    G = torch.cartesian_prod(torch.linspace(0, 1, 41, dtype=D), torch.linspace(0, 2, 41, dtype=D))
    t0 = time.perf_counter()
    model = pk.PhysicsConditionedGP(X0, u(x, 0 * x), eq, input_names=("x", "t"),
                                    domain=pk.Box(x=(0.0, 1.0), t=(0.0, 2.0)), collocation=M,
                                    conditions=[ends] if with_conditions else [])
    pk.fit(model, progress=False)
    truth = u(G[:, 0], G[:, 1])
    mean, var = model(G)
    return {"rel_l2": _rel(mean, truth),
            "coverage95": pk.diagnostics.coverage(mean, var, truth),
            "seconds": time.perf_counter() - t0}


def kdv(M):
    torch = _torch()
    import pyro_pidkl as pk
    from pyro_pidkl.physics import Equation
    c = 1.0
    u = lambda X: (c / 2) / torch.cosh(math.sqrt(c) / 2 * (X[:, 0] - c * X[:, 1])) ** 2
    eq = Equation(lambda f, x: f.d("t") + 6 * f * f.d("x") + f.d("x", "x", "x"),
                  inputs=("x", "t"), name="kdv")
    box = pk.Box(x=(-8.0, 8.0), t=(0.0, 2.0))
    n = max(40, int(4 * M ** 0.5))
    x0 = torch.linspace(-8, 8, n, dtype=torch.float64)
    tb = torch.linspace(0, 2, n // 2, dtype=torch.float64)[1:]
    X = torch.cat([torch.stack([x0, torch.zeros_like(x0)], 1),
                   torch.stack([torch.full_like(tb, -8.0), tb], 1),
                   torch.stack([torch.full_like(tb, 8.0), tb], 1)])
    G = torch.cartesian_prod(torch.linspace(-8, 8, 81, dtype=torch.float64),
                             torch.linspace(0, 2, 21, dtype=torch.float64))
    t0 = time.perf_counter()
    model = pk.PhysicsConditionedGP(X, u(X), eq, input_names=("x", "t"), domain=box,
                                    collocation=M)
    pk.fit(model, progress=False)
    mean, var = model(G)
    return {"rel_l2": _rel(mean, u(G)), "coverage95": pk.diagnostics.coverage(mean, var, u(G)),
            "converged": bool(model.solve()[2].converged), "seconds": time.perf_counter() - t0}


def lshape_peer():
    torch = _torch()
    import re
    import subprocess
    import pyro_pidkl as pk
    from pyro_pidkl.physics import Equation, Polygon
    pi = math.pi
    u = lambda X: torch.sin(pi * X[:, 0]) * torch.sin(pi * X[:, 1])
    s = lambda x: (2 * pi ** 2 * torch.sin(pi * x["x"]) * torch.sin(pi * x["y"])
                   + (torch.sin(pi * x["x"]) * torch.sin(pi * x["y"])) ** 3)
    eq = Equation(lambda f, x: -f.laplacian("x", "y") + f ** 3, inputs=("x", "y"))
    L = Polygon([(0, 0), (1, 0), (1, 0.5), (0.5, 0.5), (0.5, 1), (0, 1)])
    t0 = time.perf_counter()
    B, Z = L.boundary(320, seed=1), L.interior(3000, seed=0)
    model = pk.PhysicsConditionedGP(B, u(B), eq, input_names=("x", "y"), domain=L, source=s,
                                    collocation=Z)
    pk.fit(model, progress=False)
    err = model.posterior_mean(Z) - u(Z)
    rec = {"rms": float(err.pow(2).mean().sqrt()), "rel_l2": _rel(err + u(Z), u(Z)),
           "coverage95": float("nan"), "seconds": time.perf_counter() - t0, "M": 3000}
    root = os.environ.get("PIDKL_PEER_SPARSE_CHOLESKY")
    if root:
        python = os.environ.get("PIDKL_PEER_PYTHON", sys.executable)
        out = subprocess.run([python, "examples/lshape_nonlin_elliptic.py", "--N-interior",
                              "3000", "--backend", "cpu", "--out", os.devnull + ".png"],
                             cwd=root, capture_output=True, text=True,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
        solve = re.search(r"\[solve\]\s+([0-9.]+) s", out.stdout)
        error = re.search(r"L² = ([0-9.e+-]+)", out.stdout)
        if solve and error:
            rec.update(peer_s=float(solve.group(1)), peer_rms=float(error.group(1)))
    return rec


def data_case(case, method, seed):
    """Noisy data on part of the domain, predicted beyond it: a record."""
    torch = _torch()
    import pyro_pidkl as pk
    g = torch.Generator().manual_seed(seed)
    if case in ("poisson_L_data", "poisson_disk_data"):
        u, s, eq = _poisson_problem()
        shape = _shape("L" if case == "poisson_L_data" else "disk")
        Z = shape.interior(400, seed=seed + 11)
        inside = Z[Z[:, 0] < -0.2][:60]
        B = shape.boundary(80, seed=seed)
        B = B[B[:, 0] < -0.2]
        X = torch.cat([inside, B])
        test = shape.interior(2000, seed=7)
        test = test[test[:, 0] >= -0.2]
        names, truth_fn = ("x", "y"), u
        build = lambda: pk.PhysicsConditionedGP(X, y, eq, input_names=names, domain=shape,
                                                source=s)
    else:
        u2, eq, no_flux = _heat()
        truth_fn = lambda X: u2(X[:, 0], X[:, 1])
        X = torch.rand(60, 2, dtype=torch.float64, generator=g) * torch.tensor(
            [1.0, 0.8], dtype=torch.float64)
        G = torch.cartesian_prod(torch.linspace(0, 1, 41, dtype=torch.float64),
                                 torch.linspace(0.8, 2, 31, dtype=torch.float64)[1:])
        test, names = G, ("x", "t")
        build = lambda: pk.PhysicsConditionedGP(X, y, eq, input_names=names,
                                                domain=pk.Box(x=(0.0, 1.0), t=(0.0, 2.0)),
                                                conditions=no_flux)
        build_pidkl = lambda: pk.PIDKL(X, y, eq, input_names=names, m=20, seed=seed,
                                       domain=pk.Box(x=(0.0, 1.0), t=(0.0, 2.0)),
                                       conditions=no_flux)
    f = truth_fn(X)
    y = f + 0.05 * float(f.std()) * torch.randn(f.shape, dtype=f.dtype, generator=g)
    t0 = time.perf_counter()
    if method == "pcgp":
        model = build()
    elif method == "pidkl":
        model = build_pidkl()
    elif method == "skl":
        model = pk.models.SKL(X, y, names)
    else:
        model = pk.models.DKL(X, y, names, seed=seed)
    pk.fit(model, progress=False, seed=seed)
    mean, var = model(test)
    truth = truth_fn(test)
    return {"rmse": pk.diagnostics.rmse(mean, truth),
            "coverage95": pk.diagnostics.coverage(mean, var, truth),
            "seconds": time.perf_counter() - t0}


def jobs():
    out = []
    for case in ("poisson_L", "poisson_disk", "elliptic_hole"):
        out += [({"case": case, "M": M}, lambda c=case, M=M: solve_on_shape(c, M))
                for M in COLLOCATION]
    out += [({"case": "beam", "M": M, "conditions": True}, lambda M=M: beam(M))
            for M in (10, 20, 40)]
    out.append(({"case": "beam", "M": 20, "conditions": False}, lambda: beam(20, False)))
    out += [({"case": "heat_neumann", "M": M, "conditions": True}, lambda M=M: heat_neumann(M))
            for M in COLLOCATION[:2]]
    out.append(({"case": "heat_neumann", "M": 400, "conditions": False},
                lambda: heat_neumann(400, False)))
    out += [({"case": "advection_periodic", "M": M, "conditions": True},
             lambda M=M: advection_periodic(M)) for M in COLLOCATION]
    out.append(({"case": "advection_periodic", "M": 400, "conditions": False},
                lambda: advection_periodic(400, False)))
    out += [({"case": "kdv", "M": M}, lambda M=M: kdv(M)) for M in COLLOCATION]
    out.append(({"case": "lshape_peer", "M": 3000}, lshape_peer))
    for case in ("poisson_L_data", "poisson_disk_data", "heat_neumann_data"):
        methods = ("pcgp", "skl", "dkl") + (("pidkl",) if case == "heat_neumann_data" else ())
        for method in methods:
            out += [({"case": case, "method": method, "seed": s},
                     lambda c=case, m=method, s=s: data_case(c, m, s)) for s in range(3)]
    return out


def _key(r):
    return (r["case"], r.get("M"), r.get("conditions"), r.get("method"), r.get("seed"))


def summary(path):
    recs = records.latest(records.read_records(path), _key)
    lines = ["| solver case | M | rel. L2 | 95% coverage | seconds |", "|---|---|---|---|---|"]
    for r in recs.values():
        if "method" in r:
            continue
        label = r["case"] + ("" if r.get("conditions") is not False else " (no conditions)")
        if "rms" in r:
            label += (f" (RMS {r['rms']:.2e}" + (f"; the peer: RMS {r['peer_rms']:.2e} in "
                                                f"{r['peer_s']:.1f} s" if "peer_s" in r else "")
                      + ")")
        lines.append(f"| {label} | {r['M']} | {r['rel_l2']:.2e} | {r['coverage95']:.2f} | "
                     f"{r['seconds']:.1f} |")
    lines += ["", "| data case | method | median RMSE beyond the data | median 95% coverage |",
              "|---|---|---|---|"]
    by = {}
    for r in recs.values():
        if "method" in r:
            by.setdefault((r["case"], r["method"]), []).append(r)
    for (case, method), rs in by.items():
        lines.append(f"| {case} | {method} | {records.median([r['rmse'] for r in rs]):.3g} | "
                     f"{records.median([r['coverage95'] for r in rs]):.2f} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--summary", action="store_true")
    p.add_argument("--cases", default=None, help="comma-separated case names (default all)")
    args = p.parse_args(argv)
    if not args.summary:
        wanted = None if args.cases is None else set(args.cases.split(","))
        records.run_jobs(args.out, [(meta, job) for meta, job in jobs()
                                    if wanted is None or meta["case"] in wanted], _key)
    print(summary(args.out))


if __name__ == "__main__":
    main()
