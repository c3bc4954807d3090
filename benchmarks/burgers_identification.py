"""The PINN paper's Burgers identification (Raissi, Perdikaris & Karniadakis 2019, J. Comput.
Phys. 378, continuous-time identification): the coefficients of

    u_t + l1 u u_x - l2 u_xx = 0,   x in [-1, 1], t in [0, 1],   u(x, 0) = -sin(pi x),
    u(-1, t) = u(1, t) = 0,         l1 = 1, l2 = 0.01 / pi,

learned from N points drawn at random from the 256 x 100 space-time grid, clean or with
noise of a given fraction of the solution's standard deviation, by PhysicsConditionedGP at
its defaults (l1 started at 0.5, l2 at 0.01). The solution is exact (Cole-Hopf, the heat
kernel integrated on 6,001 nodes in log-sum-exp form); a front about 0.003 wide forms at
x = 0 by t = 0.3.

Prints, per setting: each coefficient's error, its 90% interval, whether it covers the
truth, whether it is marked identified and resolved, the fit's warnings (one line each), and
CPU seconds; then the targets of issue 63 for this row: within 1% (l1) and 5% (l2) with
covering intervals, or a one-line warning and no identified verdict; and no confident miss
(an interval excluding the truth while identified, without a warning). The PINN paper's
table at 2,000 points, as issue 63 quotes it, beside: l1 0.096% / 0.039% off, l2 0.47% /
0.008% off (clean / 1% noise).

    python benchmarks/burgers_identification.py                    # 2,000 points, 0 and 1%
    python benchmarks/burgers_identification.py --points 300 --noise 0
    python benchmarks/burgers_identification.py --out docs/results/burgers_identification.jsonl
"""

import argparse
import json
import math
import time
import warnings

import numpy as np
import torch

import pyro_pidkl as pk
from pyro_pidkl.infer import torch_threads
from pyro_pidkl.physics import Equation, Parameter
from records import commit

NU = 0.01 / math.pi
TRUTH = {"l1": 1.0, "l2": NU}
#: the PINN paper's errors at 2,000 points, as issue 63 quotes them (clean, 1% noise)
PINN = {"l1": (0.096, 0.039), "l2": (0.47, 0.008)}


def exact(x, t, nodes=6001):
    """The Cole-Hopf solution at points ``x``, ``t`` (arrays of one shape)."""
    x, t = np.broadcast_arrays(np.asarray(x, float), np.asarray(t, float))
    out = np.empty(x.shape)
    for i, (xx, tt) in enumerate(zip(x.ravel(), t.ravel())):
        if tt <= 0:
            out.flat[i] = -math.sin(math.pi * xx)
            continue
        s = math.sqrt(4 * NU * tt)
        eta = np.linspace(-12 * s, 12 * s, nodes)
        y = xx - eta
        log_w = -np.cos(math.pi * y) / (2 * math.pi * NU) - eta ** 2 / (4 * NU * tt)
        w = np.exp(log_w - log_w.max())
        out.flat[i] = -np.sum(np.sin(math.pi * y) * w) / np.sum(w)
    return out


def sample(points, noise, seed=1234):
    """``(X, u)``: ``points`` grid points drawn without replacement, ``u`` with noise of
    ``noise`` times its standard deviation."""
    rng = np.random.default_rng(seed)
    xg, tg = np.linspace(-1, 1, 256), np.linspace(0, 1, 100)
    idx = rng.choice(256 * 100, points, replace=False)
    X = np.stack([xg[idx % 256], tg[idx // 256]], 1)
    u = exact(X[:, 0], X[:, 1])
    return X, u + noise * u.std() * rng.standard_normal(points)


def burgers(f, x, l1, l2):
    return f.d("t") + l1 * f * f.d("x") - l2 * f.d("x", "x")


def run(points, noise, lines=0):
    X, u = sample(points, noise)
    eq = Equation(burgers, inputs=("x", "t"), name="burgers", l1=Parameter(0.5),
                  l2=Parameter(0.01))
    model = pk.PhysicsConditionedGP(torch.tensor(X), torch.tensor(u), eq,
                                    input_names=("x", "t"), domain=pk.Box(x=(-1, 1), t=(0, 1)))
    began = time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pk.fit(model, progress=False)
        intervals = model.coefficient_intervals(0.9)
    seconds = time.process_time() - began
    said = [str(w.message).splitlines()[0] for w in caught
            if issubclass(w.category, UserWarning)]
    row = {"points": points, "noise": noise, "cpu_s": round(seconds, 1),
           "warnings": said, "adequacy": model.adequacy().as_dict(), "coefficients": {}}
    for n, v in intervals.items():
        truth = TRUTH[n]
        covers = v["lower"] <= truth <= v["upper"]
        row["coefficients"][n] = {
            "value": v["value"], "lower": v["lower"], "upper": v["upper"],
            "error_pct": 100 * abs(v["value"] - truth) / truth, "covers": covers,
            "identified": v["identified"], "resolved": v.get("resolved"),
            "between": v.get("between"),
            "confident_miss": (not covers) and v["identified"] and not said}
    grid = np.stack(np.meshgrid(np.linspace(-1, 1, 64), np.linspace(0, 1, 25)), -1).reshape(-1, 2)
    truth_u = exact(grid[:, 0], grid[:, 1])
    mean = model.posterior_mean(torch.tensor(grid)).numpy()
    row["u_rel_l2"] = float(np.linalg.norm(mean - truth_u) / np.linalg.norm(truth_u))
    if lines:
        from pyro_pidkl.models.conditioning.method_of_lines import method_of_lines_check
        check = method_of_lines_check(model, nodes=lines)
        row["method_of_lines"] = {
            "nodes": lines, "verdict": check.verdict, "grid_shift": check.grid_shift,
            "fit_loglik": check.fit_loglik, "lines_loglik": check.lines_loglik,
            "cpu_s": round(check.seconds, 1),
            "coefficients": {n: dict(v, error_pct=100 * abs(v["value"] - TRUTH[n]) / TRUTH[n],
                                     covers=v["lower"] <= TRUTH[n] <= v["upper"])
                             for n, v in check.lines.items()}}
    return row


def verdict(row):
    """The row's target: met within 1% / 5% with covering intervals, or warned and not
    identified."""
    c = row["coefficients"]
    accurate = (c["l1"]["error_pct"] <= 1 and c["l2"]["error_pct"] <= 5
                and c["l1"]["covers"] and c["l2"]["covers"])
    said = bool(row["warnings"]) and not any(v["identified"] and not v["covers"]
                                             for v in c.values())
    return "met (accurate)" if accurate else "met (warned, not identified)" if said else "MISSED"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=2000)
    parser.add_argument("--noise", type=float, nargs="*", default=[0.0, 0.01])
    parser.add_argument("--out", help="append each row as JSON to this file")
    parser.add_argument("--lines", type=int, default=0,
                        help="also the method-of-lines check on this many space nodes")
    args = parser.parse_args()
    print(f"Burgers identification, {args.points} points, commit {commit()}, one thread")
    for k, noise in enumerate(args.noise):
        with torch_threads(1):
            row = run(args.points, noise, args.lines)
        row["commit"] = commit()
        print(f"\nnoise {noise:.0%}: {row['cpu_s']} CPU s, u's relative L2 on a 64 x 25 grid "
              f"{row['u_rel_l2']:.3g}")
        for n, v in row["coefficients"].items():
            pinn = PINN[n][min(k, 1)] if args.points == 2000 and noise in (0.0, 0.01) else None
            print(f"  {n}: {v['value']:.6g} ({v['error_pct']:.2f}% off; PINN "
                  f"{'-' if pinn is None else f'{pinn}%'}), 90% [{v['lower']:.5g}, "
                  f"{v['upper']:.5g}] covers {v['covers']}, identified {v['identified']}, "
                  f"resolved {v['resolved']}, between-points estimate {v['between']}")
        if "method_of_lines" in row:
            m = row["method_of_lines"]
            print(f"  method of lines ({m['nodes']} nodes, {m['cpu_s']} CPU s): {m['verdict']}, "
                  f"log-likelihood {m['fit_loglik']:.1f} at the fit, {m['lines_loglik']:.1f} "
                  f"at its optimum, grid shift {m['grid_shift']:.2f}")
            for n, v in m["coefficients"].items():
                print(f"    {n}: {v['value']:.6g} ({v['error_pct']:.2f}% off), 90% "
                      f"[{v['lower']:.5g}, {v['upper']:.5g}] covers {v['covers']} "
                      "(given the posterior's initial and boundary values)")
        for w in row["warnings"]:
            print(f"  warning: {w[:300]}")
        print(f"  target (within 1% / 5% and covering, or warned and not identified): "
              f"{verdict(row)}; confident misses "
              f"{sum(v['confident_miss'] for v in row['coefficients'].values())}")
        if args.out:
            with open(args.out, "a") as fh:
                fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
