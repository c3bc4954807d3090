"""The search over starts integrates every start's segments in one batch (issue "Systems in
seconds", item 2): which integrator. In one run, one torch thread and one BLAS thread,
the same right-hand side (the library's ``ExplicitODE.rhs``):

- ``uniform``: the library's ``ExplicitODE.integrate_uniform`` (classical Runge-Kutta at
  uniform steps, read between the nodes by cubic Hermite; what the search runs),
- ``fixed``: ``ExplicitODE.integrate_fixed`` (the same method stepping to every distinct
  datum offset; what the search ran before),
- ``torchode``: torchode's Dopri5 with per-row step control (``AutoDiffAdjoint``,
  ``IntegralController`` at rtol 1e-4, atol 1e-6, at most 200 steps a row: a row that
  needs more, a stiff or exploding start, is dropped), where torchode is installed (it is not a
  dependency: ``pip install torchode``, which pins ``typeguard<3`` through ``torchtyping``).

Two measures: one batch of random trajectories (the integrator alone, its error against a
fine fixed-step reference), and the whole search of ``pk.StateSpaceGP`` on the README's
spring and on the systems benchmark's Lotka-Volterra (seed 0) with each integrator
plugged in (seconds, the best start's coefficients).

    python benchmarks/search_integrators.py --out docs/results/search_integrators.json
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pyro_pidkl as pk  # noqa: E402


def torchode_integrator(ode, rtol=1e-4, atol=1e-6, max_steps=200):
    """``integrate_uniform``'s signature by torchode (Dopri5, per-row step control; a row
    not done in ``max_steps`` steps, a stiff or exploding start, is ``nan``: dropped)."""
    import torchode as to

    def integrate(x0, t_eval, values=None, t_offset=None, steps=8):
        x0 = torch.as_tensor(x0, dtype=torch.float64)
        B = x0.shape[0]
        offset = torch.zeros(B, dtype=x0.dtype) if t_offset is None else torch.as_tensor(
            t_offset, dtype=x0.dtype)
        t_eval = torch.as_tensor(np.asarray(t_eval, dtype=float))
        order = torch.argsort(t_eval)

        def f(t, y):
            with torch.no_grad():
                d = ode.rhs(offset + t, y, values)
            return torch.where(torch.isfinite(d), d, torch.zeros_like(d))
        term = to.ODETerm(f)
        solver = to.AutoDiffAdjoint(to.Dopri5(term=term),
                                    to.IntegralController(atol=atol, rtol=rtol, term=term),
                                    max_steps=max_steps)
        with torch.no_grad():
            sol = solver.solve(to.InitialValueProblem(
                y0=x0, t_start=torch.zeros(B, dtype=x0.dtype),
                t_eval=t_eval[order].expand(B, -1)))
        ys = torch.empty(B, x0.shape[1], len(t_eval), dtype=x0.dtype)
        ys[..., order] = sol.ys.transpose(1, 2)
        ys[sol.status != 0] = float("nan")
        return ys
    return integrate


def fixed_integrator(ode):
    def integrate(x0, t_eval, values=None, t_offset=None, steps=8):
        return ode.integrate_fixed(x0, t_eval, values, t_offset,
                                   float(np.max(t_eval)) / steps)
    return integrate


def integrators(ode):
    out = {"uniform": ode.integrate_uniform, "fixed": fixed_integrator(ode)}
    try:
        out["torchode"] = torchode_integrator(ode)
    except ImportError:
        pass
    return out


def batch_rows(sizes=(200, 2000, 20000), repeats=5):
    sys_ = _spring()
    ode = pk.physics.explicit_ode(sys_)
    g = torch.Generator().manual_seed(0)
    rows = []
    for B in sizes:
        x0 = torch.randn(B, 2, generator=g, dtype=torch.float64)
        values = {"k": torch.exp(torch.randn(B, generator=g, dtype=torch.float64)),
                  "c": torch.exp(torch.randn(B, generator=g, dtype=torch.float64) - 1)}
        t_eval = np.sort(np.random.default_rng(0).uniform(0, 0.6, 12))
        ref = ode.integrate_fixed(x0, t_eval, values, None, 0.6 / 2000)
        for name, integrate in integrators(ode).items():
            began = time.process_time()
            for _ in range(repeats):
                got = integrate(x0, t_eval, values, None, 8)
            rows.append({"batch": B, "integrator": name,
                         "ms": (time.process_time() - began) / repeats * 1e3,
                         "max_error": float((got - ref).abs().max())})
            print(f"batch {B}: {name} {rows[-1]['ms']:.1f} ms, max error "
                  f"{rows[-1]['max_error']:.1e}", flush=True)
    return rows


def _spring():
    def spring(f, x, k, c):
        return (f["x"].d("t") - f["v"], f["v"].d("t") + k * f["x"] + c * f["v"])
    return pk.EquationSystem(spring, outputs=("x", "v"), inputs=("t",), k=1.0, c=1.0)


def search_rows():
    from statespace_speed import spring_data
    from pyro_pidkl.datasets import system_problem
    t, x = spring_data()
    lv = system_problem("lotka_volterra", 0)
    problems = {
        "spring": lambda: pk.StateSpaceGP(_spring(), {"x": (t, x)},
                                          domain=pk.Box(t=(0.0, 10.0))),
        "lotka_volterra": lambda: pk.StateSpaceGP(lv.system, lv.data, domain=lv.domain,
                                                  scales=lv.scales)}
    rows = []
    for name, make in problems.items():
        for integ in integrators(pk.physics.explicit_ode(_spring())):
            model = make()
            model.ode.integrate_uniform = integrators(model.ode)[integ]
            began = time.process_time()
            theta, _, cost = model.search(None)
            seconds = time.process_time() - began
            best = {n: float(tr(torch.tensor(theta[0][k])))
                    for k, (n, tr) in enumerate(model.filter.transforms)}
            rows.append({"problem": name, "integrator": integ, "cpu_s": seconds,
                         "best": best, "best_cost": float(cost[0])})
            print(f"search, {name}: {integ} {seconds:.2f} CPU s, best "
                  + ", ".join(f"{n} {v:.4g}" for n, v in best.items())
                  + f" (cost {cost[0]:.2f})", flush=True)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None)
    a = p.parse_args()
    from threadpoolctl import threadpool_limits
    torch.set_num_threads(1)
    with threadpool_limits(limits=1, user_api="blas"):
        __import__("pyro_pidkl.infer")       # imported before any clock starts
        record = {"commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                                           capture_output=True, text=True,
                                           cwd=os.path.dirname(__file__)).stdout.strip(),
                  "threads": 1, "torch": torch.__version__}
        try:
            import importlib.metadata as md
            record["torchode"] = md.version("torchode")
        except Exception:
            record["torchode"] = None
        record["batch"] = batch_rows()
        record["search"] = search_rows()
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(record, fh, indent=1)
        print(f"-> {a.out}")


if __name__ == "__main__":
    main()
