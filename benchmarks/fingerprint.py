"""Six fits of the conditioned models, printed to full precision: a refactor of the models
that should change nothing is checked by rerunning this and comparing with the record.

    python benchmarks/fingerprint.py --out docs/results/fingerprint.json
    python benchmarks/fingerprint.py --check docs/results/fingerprint.json

The fits (one torch thread, one BLAS thread): the README's oscillator (two coefficients
learned, extrapolated); the README's spring (a system, its velocity never measured); the
README's nonlinear PDE solved from boundary values on a 16 x 16 grid; a heat equation with
an unknown GP source; Poisson counts of a growth (a one-output system); and negative-binomial
counts of the same. Each records its coefficients, its objective, its 90% intervals and a
prediction's mean and variance at a few points.
"""

import argparse
import json
import math
import time

import platform

import torch

import pyro_pidkl as pk
from records import commit
from pyro_pidkl.infer import torch_threads, training_objective
from pyro_pidkl.physics import Equation, EquationSystem, Parameter

D = torch.float64


def _summary(model, X):
    mean, var = model(X)
    out = {"objective": float(training_objective(model)),
           "mean": mean.detach().reshape(-1).tolist(), "var": var.detach().reshape(-1).tolist()}
    if model._coefficients():
        out["coefficients"] = model.equation_parameters()
        out["intervals"] = {n: [v["value"], v["lower"], v["upper"]]
                            for n, v in model.coefficient_intervals(prob=0.9).items()}
    return out


def oscillator():
    def damped(f, x, omega, zeta):
        return f.d("t", "t") + 2 * zeta * omega * f.d("t") + omega ** 2 * f
    from torch.distributions import constraints
    eq = Equation(damped, inputs=("t",), omega=Parameter(1.0),
                  zeta=Parameter(0.5, constraints.unit_interval))
    data = pk.datasets.problem("oscillator").sample("extrapolation", seed=0)
    model = pk.PhysicsConditionedGP(data.X_train, data.y_train, eq, domain=pk.Box(t=(0.0, 6.0)))
    pk.fit(model, progress=False)
    return _summary(model, data.X_test[::10])


def spring():
    def spring(f, x, k, c):
        pos, vel = f["x"], f["v"]
        return (pos.d("t") - vel, vel.d("t") + k * pos + c * vel)
    t = torch.linspace(0, 6, 40, dtype=D)
    noise = 0.05 * torch.randn(40, generator=torch.Generator().manual_seed(0), dtype=D)
    x_obs = torch.exp(-0.2 * t) * torch.cos(1.99 * t) + noise
    system = pk.EquationSystem(spring, outputs=("x", "v"), inputs=("t",), k=1.0, c=1.0)
    model = pk.ConditionedSystemGP(system, {"x": (t, x_obs)}, domain=pk.Box(t=(0.0, 10.0)))
    pk.fit(model, progress=False)
    return _summary(model, torch.linspace(0, 10, 6, dtype=D))


def pde():
    pi = math.pi
    u = lambda x, y: torch.sin(pi * x) * torch.sin(pi * y)                     # noqa: E731
    s = lambda x: 2 * pi ** 2 * u(x["x"], x["y"]) + u(x["x"], x["y"]) ** 3      # noqa: E731
    axis = torch.linspace(0, 1, 16, dtype=D)
    grid = torch.cartesian_prod(axis, axis)
    edge = (grid == 0).any(1) | (grid == 1).any(1)
    eq = Equation(lambda f, x: -f.laplacian("x", "y") + f ** 3, inputs=("x", "y"))
    model = pk.PhysicsConditionedGP(grid[edge], u(*grid[edge].T), eq, input_names=("x", "y"),
                                    collocation=grid[~edge], source=s)
    pk.fit(model, progress=False)
    X = torch.rand(5, 2, generator=torch.Generator().manual_seed(0), dtype=D)
    return _summary(model, X)


def heat_source():
    """u_t = a u_xx + g(x), g unknown: the diffusivity learned beside a GP source."""
    a = 0.3
    X = torch.rand(60, 2, generator=torch.Generator().manual_seed(1), dtype=D)
    u = torch.exp(-a * math.pi ** 2 * X[:, 1]) * torch.sin(math.pi * X[:, 0]) \
        + (1 - torch.exp(-a * math.pi ** 2 * X[:, 1])) * torch.sin(math.pi * X[:, 0]) / (a * math.pi ** 2)
    eq = Equation(lambda f, x, a: f.d("t") - a * f.d("x", "x"), inputs=("x", "t"),
                  a=Parameter(1.0))
    model = pk.PhysicsConditionedGP(X, u, eq, input_names=("x", "t"), source="gp",
                                    collocation=60)
    pk.fit(model, progress=False)
    return _summary(model, X[:5])


def _growth_counts(kind):
    t = torch.linspace(0, 6, 30, dtype=D)
    y = torch.poisson(5 * torch.exp(0.3 * t), generator=torch.Generator().manual_seed(0))
    system = EquationSystem(lambda f, x, r: (f["u"].d("t") - r,), outputs=("u",),
                            inputs=("t",), r=0.1)
    model = pk.ConditionedSystemGP(system, {"u": (t, y)}, likelihoods={"u": kind})
    pk.fit(model, progress=False)
    return _summary(model, torch.linspace(0, 6, 5, dtype=D))


def poisson():
    return _growth_counts("poisson")


def negative_binomial():
    return _growth_counts("negative_binomial")


FITS = [oscillator, spring, pde, heat_source, poisson, negative_binomial]


def _compare(new, old, path=""):
    """``[(path, old, new, relative difference)]`` of every number that moved."""
    if isinstance(new, dict):
        return [d for k in sorted(set(new) | set(old))
                for d in _compare(new.get(k), old.get(k), f"{path}.{k}")]
    if isinstance(new, list) and isinstance(old, list) and len(new) == len(old):
        return [d for i, (a, b) in enumerate(zip(new, old)) for d in _compare(a, b, f"{path}[{i}]")]
    if isinstance(new, (int, float)) and isinstance(old, (int, float)):
        diff = abs(new - old) / max(abs(old), 1e-12)
        return [] if diff == 0 else [(path, old, new, diff)]
    return [] if new == old else [(path, old, new, math.inf)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the fingerprint here (JSON)")
    parser.add_argument("--check", help="compare with this record")
    parser.add_argument("--fits", default=",".join(f.__name__ for f in FITS))
    args = parser.parse_args()
    chosen = args.fits.split(",")
    record = {}
    with torch_threads(1):
        for fit in FITS:
            if fit.__name__ not in chosen:
                continue
            began = time.process_time()
            record[fit.__name__] = fit()
            print(f"{fit.__name__}: {time.process_time() - began:.1f} CPU s, objective "
                  f"{record[fit.__name__]['objective']!r}", flush=True)
    if args.out:
        import numpy
        import pyro
        import scipy
        meta = {"commit": commit(), "machine": platform.machine(), "threads": 1,
                "torch": torch.__version__, "python": platform.python_version(),
                "numpy": numpy.__version__, "scipy": scipy.__version__,
                "pyro": pyro.__version__}
        with open(args.out, "w") as fh:
            json.dump({"meta": meta, **record}, fh, indent=1)
    if args.check:
        with open(args.check) as fh:
            old = {k: v for k, v in json.load(fh).items() if k in record}
        print(f"against the record made at {json.load(open(args.check)).get('meta', {})}")
        moved = _compare(record, old)
        worst = max((d[3] for d in moved), default=0.0)
        print(f"{len(moved)} numbers moved; largest relative change {worst:.3g}")
        for case in record:
            mine = [d[3] for d in moved if d[0].startswith(f".{case}.")]
            print(f"  {case}: {len(mine)} moved, largest {max(mine, default=0.0):.2g}")
        for path, a, b, d in sorted(moved, key=lambda r: -r[3])[:15]:
            print(f"  {path}: {a!r} -> {b!r} ({d:.2g})")


if __name__ == "__main__":
    main()
